/* simcuda NCCL: the staging buffers of a communicator. Every rank allocates
 * device memory on its own GPU (cuMemCreate, exportable as a POSIX file
 * descriptor), gives the descriptor to every other rank
 * (sim_nccl_fd_exchange), and maps all of them, its own and the peers', in
 * one reservation with access for its device (cuMemMap, cuMemSetAccess), as
 * NCCL's cuMem transport does. The library's kernels copy between the
 * application's buffers and these, and reduce from them; the host never
 * touches them.
 *
 * Layout of each rank's staging (S = slot bytes, P = point-to-point ring
 * bytes): slot[2] at 0 and S, result[2] at 2S and 3S, then one ring of P
 * bytes per destination rank. */
#ifndef SIM_NCCL_STAGING_H
#define SIM_NCCL_STAGING_H

#include "sim/nccl/simnccl.h"

#include <cuda.h>

typedef struct sim_nccl_staging {
    CUdeviceptr va;        /* rank r's staging at va + r * size */
    size_t size;           /* per rank, a multiple of the granularity */
    size_t slot, p2p;      /* S and P */
    int nranks;
    CUmemGenericAllocationHandle h[SIM_NCCL_MAX_RANKS];
    unsigned char have[SIM_NCCL_MAX_RANKS], mapped[SIM_NCCL_MAX_RANKS];
} sim_nccl_staging_t;

/* Allocates, exchanges and maps; dev: this rank's device (current context).
 * seg is this host's segment; the communicator has nranks ranks, this one
 * is `me`, lidx[r] is rank r's index in seg or -1 for a rank of another
 * host: its place in the reservation holds a mirror instead, device memory
 * of this rank's GPU that the stream fills from the socket transport
 * (net.h) with what the kernels read of that rank's staging.
 * Returns 0, or a negative errno with a reason in err (the communicator's
 * segment is marked failed when the others cannot complete either). */
int sim_nccl_staging_setup(sim_nccl_staging_t *st, sim_nccl_seg_t *seg, uint64_t nonce,
                           uint64_t *ctrl_bar, CUdevice dev, size_t slot, size_t p2p, int nranks,
                           int me, const int *lidx, int *why, char *err, size_t errlen);
void sim_nccl_staging_free(sim_nccl_staging_t *st);

static inline CUdeviceptr sim_nccl_st_base(const sim_nccl_staging_t *st, int r)
{
    return st->va + (CUdeviceptr)r * st->size;
}
static inline CUdeviceptr sim_nccl_st_slot(const sim_nccl_staging_t *st, int r, int set)
{
    return sim_nccl_st_base(st, r) + (CUdeviceptr)set * st->slot;
}
static inline CUdeviceptr sim_nccl_st_result(const sim_nccl_staging_t *st, int r, int set)
{
    return sim_nccl_st_base(st, r) + (CUdeviceptr)(2 + set) * st->slot;
}
/* The ring of rank `from`'s sends to rank `to`, in from's staging. */
static inline CUdeviceptr sim_nccl_st_ring(const sim_nccl_staging_t *st, int from, int to)
{
    return sim_nccl_st_base(st, from) + (CUdeviceptr)4 * st->slot + (CUdeviceptr)to * st->p2p;
}

#endif
