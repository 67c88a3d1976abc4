/* The swap engine (docs/MOVING.md, section 3): moves the device memory of
 * one virtual device (an EST) out to host memory, back in onto any device,
 * or straight to another device, keeping every address: only the physical
 * memory behind the registry's mappings (move/memreg.h) changes.
 *
 * The caller (the move orchestrator) provides the safe point: no other
 * thread uses the EST's memory, the streams that wrote it are drained, and
 * the calling thread's current context is one on the device the memory is
 * on (swap-out, the source of a migration) or goes to (swap-in). The engine
 * creates and destroys its own streams, module and scratch memory inside
 * the call: when it returns, it holds nothing on any device, except with
 * opts.keep_streams: then the copy streams of a swap-out or swap-in made in
 * the device's primary context stay for the next such call on that device
 * (a time-sliced EST's turns: about 0.45 ms of a pair of swaps on simcuda),
 * with a retain of that primary context so that they stay valid, until
 * es_swap_drop_streams.
 *
 * Outcomes: each function returns 0 or a negative errno with a one-line
 * reason in msg. On failure the EST is where it was before the call
 * (swap-in: still parked, with its host copy; migration: still on the old
 * device), never half-moved. A host copy (park) is dropped only once the
 * move that uses it has completed.
 *
 * Host copies are kept while the EST is resident (host memory: the size of
 * the EST; es_swap_drop_parks gives it back), so that the next swap-out
 * writes into memory that is already there. A host copy is VMM memory
 * located on the host, pinned once and granted to each device that copies
 * with it, across contexts; where the driver has none, a memfd registered
 * for the copies and unregistered before the contexts go. Checksums: with opts.sums on,
 * every chunk (ES_SWAPSUM_CHUNK bytes) of an object is hashed on the device
 * before a swap-out; a chunk whose hash equals that of its host copy from
 * the previous swap-out is not copied again (st->bytes_skipped).
 */
#ifndef ES_MOVE_SWAP_H
#define ES_MOVE_SWAP_H

#include <cuda.h>
#include <stddef.h>

typedef struct es_swap_opts {
    int streams;        /* copies in flight, 1..16 (default 2) */
    int sums;           /* chunk checksums on the device (default 1) */
    size_t piece;       /* bytes per copy, a multiple of ES_SWAPSUM_CHUNK (default 8 MiB) */
    size_t keep;        /* bytes a time-sliced EST keeps on its slot while parked (what
                         * the mover passes to es_swap_out_keep; default 0) */
    size_t probe;       /* > 0 (with sums): a swap-out hashes only about this many bytes
                         * (whole chunks) to time the hashing (st->bytes_hashed, ms_hash)
                         * and copies everything; 0: hashes every chunk (default) */
    int keep_streams;   /* 1: a swap-out's or swap-in's streams stay for the next call on
                         * the same device (es_swap_drop_streams); 0: made and destroyed
                         * in each call (default) */
} es_swap_opts_t;

typedef struct es_swap_stats {
    size_t objects;         /* physical objects moved */
    size_t bytes;           /* their size */
    size_t bytes_d2h, bytes_h2d, bytes_d2d;
    size_t bytes_skipped;   /* not copied: unchanged since the last swap-out */
    double ms;              /* wall time of the call */
    double ms_copy;         /* of which: the copies (enqueue to completion) */
    double ms_sums;         /* of which: the checksums (kernels and their copy) */
    size_t bytes_hashed;    /* the bytes the checksums' kernels read, */
    double ms_hash;         /* ... from their launch to their completion */
    double ms_sync;         /* before it: draining the EST's streams (the mover) */
    int streams_made;       /* copy streams this call created (0: kept ones reused) */
} es_swap_stats_t;

/* Sets the options (validated: -EINVAL for a value out of range). */
int es_swap_set_opts(const es_swap_opts_t *o);
void es_swap_get_opts(es_swap_opts_t *o);

/* Resident -> parked: copy every object of vdev to its host copy, unmap and
 * release the physical memory (the reservations stay), complete pending
 * stream-ordered frees first. The vdev's device becomes -1. */
int es_swap_out(int vdev, es_swap_stats_t *st, char *msg, size_t msglen);

/* The same, except that objects of at most keep bytes in all (whole
 * objects, in the registry's order, imports never) keep their physical
 * memory on the device, unmapped (es_phys_t.kept; counted in
 * es_memreg_footprint): a time-sliced EST's memory that stays on its slot
 * while it is parked (docs/MOVING.md, section 6). Their host copies are
 * made all the same (a parked EST's part in collectives reads them);
 * es_swap_park_write marks the chunks it writes, and a swap-in onto the
 * same device copies only those (st->bytes_skipped counts the rest). */
int es_swap_out_keep(int vdev, size_t keep, es_swap_stats_t *st, char *msg, size_t msglen);

/* Releases the kept memory of a parked vdev (before it goes elsewhere). */
void es_swap_release_kept(int vdev);

/* Parked -> resident on device dev: create every object's physical memory
 * on dev (all first: any failure releases them and leaves the EST parked),
 * map it at the same addresses, grant access again, copy the host copies
 * back. An object whose memory was kept on dev takes it back and copies
 * only the chunks written while parked; kept memory on another device is
 * released. */
int es_swap_in(int vdev, int dev, es_swap_stats_t *st, char *msg, size_t msglen);

/* Resident on its device -> resident on dev. Device to device when from_ctx
 * (a context on the current device, current now) and to_ctx (a context on
 * dev) are given and dev can access the current device; otherwise through
 * host memory (swap-out + swap-in, the calling thread's current context
 * switched to to_ctx in between; to_ctx is then required). */
int es_swap_migrate(int vdev, int dev, CUcontext from_ctx, CUcontext to_ctx,
                    es_swap_stats_t *st, char *msg, size_t msglen);

/* While vdev is parked: copies between host memory and the content of its
 * device range [src, src + len) as its host copies hold it (the range may
 * span several objects; the application's imported memory is not held).
 * A parked EST can so take part in work that only reads and writes its
 * memory (a collective whose turn comes while it is parked). Writes make
 * the objects written be copied whole at the next swap-out (their stored
 * checksums no longer describe the host copy). 0; -EINVAL when vdev is not
 * parked; -EFAULT when part of the range is in none of its objects (nothing
 * further copied). Takes the registry's lock. */
int es_swap_park_read(int vdev, void *dst, CUdeviceptr src, size_t len);
int es_swap_park_write(int vdev, CUdeviceptr dst, const void *src, size_t len);

/* Destroys the streams kept by opts.keep_streams and releases the primary
 * context they were made in (before that context may go: a move elsewhere,
 * a reset of it). Nothing when none are kept. */
void es_swap_drop_streams(void);

/* Drops the host copies of vdev (after a failed run, or to give the host
 * memory back while resident). */
void es_swap_drop_parks(int vdev);

#endif
