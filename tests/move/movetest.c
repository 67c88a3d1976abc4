/* Helpers of the move/ tests (see movetest.h). */
#include "tests/move/movetest.h"
#include "move/drv.h"
#include "move/memreg.h"
#include "move/vhandle.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char ct_shm[64];

static void ct_unlink(void)
{
    if (ct_shm[0])
        shm_unlink(ct_shm);
}

void ct_setup(const char *tag)
{
    snprintf(ct_shm, sizeof(ct_shm), "/simcuda-test-%s-%d", tag, (int)getpid());
    setenv("SIMCUDA_SHM_NAME", ct_shm, 1);
    shm_unlink(ct_shm);
    atexit(ct_unlink);
    ct_setup_shared();
}

void ct_setup_shared(void)
{
    es_vh_on = 1; /* the handles the tests make are virtual */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h || es_drv_load(h, dlsym) != 0 || cuInit(0) != CUDA_SUCCESS ||
        es_memreg_init() != 0) {
        fprintf(stderr, "ct_setup: driver not usable (%s)\n", h ? "symbols" : dlerror());
        abort();
    }
}

CUcontext ct_primary(int dev)
{
    CUcontext c = NULL;
    if (cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) {
        fprintf(stderr, "ct_primary(%d) failed\n", dev);
        abort();
    }
    return c;
}

void ct_primary_drop(int dev)
{
    unsigned flags;
    int active = 1;
    while (cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        if (cuDevicePrimaryCtxRelease(dev) != CUDA_SUCCESS)
            break;
}

size_t ct_used(int dev)
{
    CUcontext c = NULL, prev = NULL;
    size_t fr = 0, tot = 0;
    cuCtxGetCurrent(&prev);
    if (cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
        abort();
    cuCtxSetCurrent(c);
    cuMemGetInfo(&fr, &tot);
    cuCtxSetCurrent(prev);
    cuDevicePrimaryCtxRelease(dev);
    return tot - fr;
}

void ct_pattern(uint32_t *buf, size_t words, size_t first, uint32_t seed)
{
    for (size_t i = 0; i < words; i++) {
        uint32_t x = (uint32_t)(first + i) * 2654435761u ^ seed;
        x ^= x >> 15;
        buf[i] = x * 2246822519u;
    }
}

#define CT_CHUNK (1u << 20)

void ct_fill(CUdeviceptr p, size_t n, uint32_t seed)
{
    uint32_t *buf = malloc(CT_CHUNK);
    for (size_t off = 0; off < n; off += CT_CHUNK) {
        size_t len = n - off < CT_CHUNK ? n - off : CT_CHUNK;
        ct_pattern(buf, (len + 3) / 4, off / 4, seed);
        if (cuMemcpyHtoD(p + off, buf, len) != CUDA_SUCCESS)
            abort();
    }
    free(buf);
}

int ct_check(CUdeviceptr p, size_t n, uint32_t seed)
{
    uint32_t *buf = malloc(CT_CHUNK), *want = malloc(CT_CHUNK);
    int ok = 1;
    for (size_t off = 0; ok && off < n; off += CT_CHUNK) {
        size_t len = n - off < CT_CHUNK ? n - off : CT_CHUNK;
        ct_pattern(want, (len + 3) / 4, off / 4, seed);
        if (cuMemcpyDtoH(buf, p + off, len) != CUDA_SUCCESS || memcmp(buf, want, len) != 0)
            ok = 0;
    }
    free(buf);
    free(want);
    return ok;
}
