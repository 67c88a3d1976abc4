/* simcuda NCCL: allocation, exchange and mapping of the staging buffers
 * (see staging.h). */
#include "sim/nccl/staging.h"
#include "sim/common/simdrv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -EIO;
}

int sim_nccl_staging_setup(sim_nccl_staging_t *st, sim_nccl_seg_t *seg, uint64_t nonce,
                           uint64_t *ctrl_bar, CUdevice dev, size_t slot, size_t p2p, int nranks,
                           int me, const int *lidx, int *why, char *err, size_t errlen)
{
    const simdrv_t *d = simdrv_get();
    int n = nranks, rc = 0, fd = -1;
    int fds[SIM_NCCL_MAX_RANKS];
    memset(st, 0, sizeof(*st));
    for (int r = 0; r < n; r++)
        fds[r] = -1;
    st->nranks = n;
    st->slot = slot;
    st->p2p = p2p;
    if (!d) {
        sim_nccl_fail(seg, SIM_FAIL_ABORT);
        return fail(err, errlen, "no driver: %s", simdrv_error());
    }
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0, want = 4 * slot + (size_t)n * p2p;
    CUresult r = d->cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r == CUDA_SUCCESS && g == 0)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        st->size = (want + g - 1) / g * g;
        r = d->cuMemCreate(&st->h[me], st->size, &prop, 0);
    }
    if (r == CUDA_SUCCESS) {
        st->have[me] = 1;
        r = d->cuMemExportToShareableHandle(&fd, st->h[me], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                            0);
    }
    if (r != CUDA_SUCCESS) {
        sim_nccl_fail(seg, SIM_FAIL_ABORT);
        rc = fail(err, errlen, "cannot allocate %zu bytes of staging memory (%d)", want, (int)r);
        goto out;
    }
    rc = sim_nccl_fd_exchange(seg, nonce, ctrl_bar, fd, fds, why);
    if (rc < 0) {
        rc = fail(err, errlen, "cannot exchange the staging buffers with the peers: %s",
                  strerror(-rc));
        goto out;
    }
    for (int q = 0; q < n && r == CUDA_SUCCESS; q++)
        if (q != me && lidx[q] >= 0) {
            r = d->cuMemImportFromShareableHandle(&st->h[q], (void *)(intptr_t)fds[lidx[q]],
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            st->have[q] = r == CUDA_SUCCESS;
        } else if (q != me) {
            /* another host's rank: a mirror on this GPU */
            r = d->cuMemCreate(&st->h[q], st->size, &prop, 0);
            st->have[q] = r == CUDA_SUCCESS;
        }
    if (r == CUDA_SUCCESS)
        r = d->cuMemAddressReserve(&st->va, (size_t)n * st->size, 0, 0, 0);
    for (int q = 0; q < n && r == CUDA_SUCCESS; q++) {
        r = d->cuMemMap(sim_nccl_st_base(st, q), st->size, 0, st->h[q], 0);
        st->mapped[q] = r == CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = (int)dev;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = d->cuMemSetAccess(st->va, (size_t)n * st->size, &acc, 1);
    }
    if (r != CUDA_SUCCESS) {
        sim_nccl_fail(seg, SIM_FAIL_ABORT);
        rc = fail(err, errlen, "cannot map the peers' staging memory (%d)", (int)r);
    }
out:
    if (fd >= 0)
        close(fd);
    for (int q = 0; q < n; q++)
        if (fds[q] >= 0)
            close(fds[q]);
    if (rc < 0)
        sim_nccl_staging_free(st);
    return rc;
}

void sim_nccl_staging_free(sim_nccl_staging_t *st)
{
    const simdrv_t *d = simdrv_get();
    if (!d)
        return;
    for (int q = 0; q < st->nranks; q++) {
        if (st->mapped[q])
            d->cuMemUnmap(sim_nccl_st_base(st, q), st->size);
        if (st->have[q])
            d->cuMemRelease(st->h[q]);
        st->mapped[q] = st->have[q] = 0;
    }
    if (st->va)
        d->cuMemAddressFree(st->va, (size_t)st->nranks * st->size);
    st->va = 0;
}
