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

#endif
