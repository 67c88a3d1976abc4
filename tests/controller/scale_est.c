/* The EST of ctl_scale_bench (tests/controller/scale_bench.c), run by
 * easyscale-ctl with libeasyscale.so preloaded: it holds MIB MiB of device
 * memory (cuMemAlloc, filled with a pattern of its rank) and makes a small
 * driver call about every millisecond, so a move requested by the
 * controller finds it at a safe point at once, as an EST in training would
 * be within one kernel launch. When the file STOP exists it copies its
 * memory back and checks the pattern (the moves carried it), then exits 0.
 *
 *   scale_est MIB STOP
 *
 * Output: "ready" once the memory is filled; "FAIL ..." and exit 1 on an
 * error or a changed byte; usage: exit 2. */
#include <cuda.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024UL * 1024)
#define CHUNK (8 * MiB)

static int fail(const char *what, CUresult r)
{
    const char *n = "?";
    cuGetErrorName(r, &n);
    printf("FAIL %s = %s\n", what, n);
    fflush(stdout);
    return 1;
}

#define CK(x)                                                                  \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            rc = fail(#x, r_);                                                 \
            goto out;                                                          \
        }                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    int rc = 0;
    char *end = NULL;
    long mib = argc == 3 ? strtol(argv[1], &end, 10) : 0;
    if (argc != 3 || !end || *end || mib < 1 || mib > 65536) {
        fprintf(stderr, "usage: scale_est MIB STOP\n");
        return 2;
    }
    const char *rank_s = getenv("RANK");
    long rank = rank_s ? strtol(rank_s, &end, 10) : 0;
    if (rank_s && (*end || rank < 0 || rank > 65535)) {
        fprintf(stderr, "scale_est: bad RANK \"%s\"\n", rank_s);
        return 2;
    }
    size_t bytes = (size_t)mib * MiB;
    uint32_t pattern = 0x5ca1e000u + (uint32_t)rank;
    uint32_t *host = NULL;
    CUcontext ctx = NULL;
    CUdeviceptr d = 0, tick = 0;
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, bytes));
    CK(cuMemAlloc(&tick, 4096));
    CK(cuMemsetD32(d, pattern, bytes / 4));
    CK(cuCtxSynchronize());
    printf("ready\n");
    fflush(stdout);
    /* a small launch-like call and a synchronisation every millisecond */
    for (unsigned i = 0; access(argv[2], F_OK) != 0; i++) {
        CK(cuMemsetD32Async(tick, i, 1024, NULL));
        CK(cuStreamSynchronize(NULL));
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    host = malloc(CHUNK);
    if (!host) {
        printf("FAIL malloc: %s\n", strerror(errno));
        rc = 1;
        goto out;
    }
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        CK(cuMemcpyDtoH(host, d + off, n));
        for (size_t k = 0; k < n / 4; k++)
            if (host[k] != pattern) {
                printf("FAIL byte %zu: %08x, not %08x\n", off + 4 * k, host[k], pattern);
                rc = 1;
                goto out;
            }
    }
    printf("memory intact\n");
out:
    free(host);
    if (tick)
        cuMemFree(tick);
    if (d)
        cuMemFree(d);
    if (ctx)
        cuDevicePrimaryCtxRelease(dev);
    fflush(stdout);
    return rc;
}
