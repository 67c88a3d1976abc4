/* Public API of libeasyscale.so for tests and tools (resolve it with
 * dlsym(RTLD_DEFAULT, "easyscale_stats"): the library is preloaded, never
 * linked).
 *
 * Statistics are kept only when EASYSCALE_LOG=debug.
 */
#ifndef EASYSCALE_H
#define EASYSCALE_H

#include <stdint.h>

typedef struct easyscale_stat {
    uint64_t calls;       /* calls that reached the wrapper */
    uint64_t by_dlsym;    /* times dlsym answered with the wrapper */
    uint64_t by_getproc;  /* times cuGetProcAddress answered with the wrapper */
} easyscale_stat_t;

/* Counters of the wrapper of the exported symbol `sym` (e.g.
 * "cuMemAlloc_v2"). Returns 0, -EINVAL (NULL argument) or -ENOENT (not a
 * wrapped symbol). */
typedef int (*easyscale_stats_fn)(const char *sym, easyscale_stat_t *out);
int easyscale_stats(const char *sym, easyscale_stat_t *out);

/* Moving this process's EST (docs/MOVING.md; EASYSCALE_MOVE=on):
 * easyscale_move asks for the EST to go to real device `slot` (a device
 * ordinal of the driver), or to be parked in host memory (-1), or to
 * toggle between parked and where it was (-3). The move runs at the next
 * safe point: at once, on the calling thread, when it is outside every
 * CUDA call (then a park holds this thread until the EST comes back). It
 * returns 0 when the move is done, 1 when it is still pending (also when
 * the collectives' staging is device memory: the move is then made at a
 * hold of every rank at a later collective, docs/COLLECTIVES.md), or a
 * negative errno (-ENOTSUP when moves are off, -EBUSY when another request
 * is pending, or the move's failure); a failure's reason is in the log.
 * easyscale_where: the device the EST is on, -1 parked, -2 nothing on any
 * device yet; easyscale_moves: move requests run so far (done or failed). */
typedef int (*easyscale_move_fn)(int slot);
int easyscale_move(int slot);
int easyscale_where(void);
unsigned easyscale_moves(void);

#endif
