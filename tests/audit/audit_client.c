/* Client run by tests/audit/runtime_test.c under libeasyscale.so (and without
 * it): loads the trainer's kernels (build/examples/kernels.fatbin: the
 * float-atomic es_table_grad_atomic and the ordered es_table_grad_det) and
 * launches them, printing one fact per line ("key value...").
 *
 *   audit_client module FATBIN    cuModuleLoadData + cuModuleGetFunction;
 *                                 the clean kernel twice, the atomic one
 *                                 three times from launch_scatter_add_from_here
 *   audit_client library FATBIN   cuLibraryLoadData and cuLaunchKernelEx,
 *                                 reached through cuGetProcAddress (the CUDA
 *                                 runtime's path); CUkernel launched directly
 *                                 and through cuKernelGetFunction
 *   audit_client unload FATBIN    a flagged function, its module unloaded and
 *                                 loaded again: flagged again
 *   audit_client apis FATBIN      cuModuleLoad, cuModuleLoadDataEx,
 *                                 cuModuleLoadFatBinary, cuLibraryLoadFromFile
 *   audit_client many FATBIN      40 modules of one image while a thread
 *                                 launches a flagged function; all unloaded
 *   audit_client bench FATBIN     launch-path figures (not a test)
 *   audit_client corrupt FATBIN   damaged images to cuModuleLoadData: the
 *                                 result of each
 *
 * Compiled with -g -fno-omit-frame-pointer and linked -rdynamic so the shim's
 * host stack can name launch_scatter_add_from_here.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#undef cuGetProcAddress
#undef cuLaunchKernelEx

#include "../clients/ck.h"

#define ROWS 64
#define COLS 8
#define BUCKETS 16

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 16);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        printf("FAIL cannot read %s\n", path);
        exit(1);
    }
    memset(b + n, 0, 16);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Both kernels take (dlogits, ids, dtable, rows, cols, buckets); an older
 * es_table_grad_atomic took no buckets: the driver reads as many parameters
 * as the kernel has, so the sixth is harmless there. */
typedef struct bufs {
    CUdeviceptr dlogits, ids, dtable;
    int rows, cols, buckets;
} bufs_t;

static void setup(bufs_t *b)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    float dl[ROWS * COLS];
    int ids[ROWS];
    for (int i = 0; i < ROWS * COLS; i++)
        dl[i] = (float)((i * 37) % 101) / 7.0f;
    for (int r = 0; r < ROWS; r++)
        ids[r] = (r * 5) % BUCKETS;
    CK(cuMemAlloc(&b->dlogits, sizeof(dl)));
    CK(cuMemAlloc(&b->ids, sizeof(ids)));
    CK(cuMemAlloc(&b->dtable, BUCKETS * COLS * sizeof(float)));
    CK(cuMemcpyHtoD(b->dlogits, dl, sizeof(dl)));
    CK(cuMemcpyHtoD(b->ids, ids, sizeof(ids)));
    CK(cuMemsetD32(b->dtable, 0, BUCKETS * COLS));
    b->rows = ROWS;
    b->cols = COLS;
    b->buckets = BUCKETS;
}

/* The caller the shim's stack must name. */
__attribute__((noinline)) CUresult launch_scatter_add_from_here(CUfunction f, bufs_t *b)
{
    void *args[] = { &b->dlogits, &b->ids, &b->dtable, &b->rows, &b->cols, &b->buckets };
    CUresult r = cuLaunchKernel(f, (ROWS * COLS + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args,
                                NULL);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
    return r;
}

__attribute__((noinline)) static CUresult launch_ordered(CUfunction f, bufs_t *b)
{
    void *args[] = { &b->dlogits, &b->ids, &b->dtable, &b->rows, &b->cols, &b->buckets };
    return cuLaunchKernel(f, (BUCKETS * COLS + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args,
                          NULL);
}

static int mode_module(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    CUmodule m;
    CUfunction fa, fd;
    CK(cuModuleLoadData(&m, img));
    CK(cuModuleGetFunction(&fa, m, "es_table_grad_atomic"));
    CK(cuModuleGetFunction(&fd, m, "es_table_grad_det"));
    for (int i = 0; i < 2; i++)
        printf("launch det %d\n", (int)launch_ordered(fd, &b));
    for (int i = 0; i < 3; i++)
        printf("launch atomic %d\n", (int)launch_scatter_add_from_here(fa, &b));
    printf("sync %d\n", (int)cuCtxSynchronize());
    CK(cuModuleUnload(m));
    free(img);
    printf("done\n");
    return 0;
}

typedef CUresult (*libload_t)(CUlibrary *, const void *, CUjit_option *, void **, unsigned,
                              CUlibraryOption *, void **, unsigned);
typedef CUresult (*getkernel_t)(CUkernel *, CUlibrary, const char *);
typedef CUresult (*launchex_t)(const CUlaunchConfig *, CUfunction, void **, void **);

static void *getproc(const char *name, int ver, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress_v2(name, &p, ver, flags, &st));
    return p;
}

static int mode_library(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    libload_t load = (libload_t)getproc("cuLibraryLoadData", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    getkernel_t getk = (getkernel_t)getproc("cuLibraryGetKernel", 12000,
                                            CU_GET_PROC_ADDRESS_DEFAULT);
    launchex_t lex = (launchex_t)getproc("cuLaunchKernelEx", 11060,
                                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CUlibrary lib;
    CUkernel ka, kd;
    CK(load(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CK(getk(&ka, lib, "es_table_grad_atomic"));
    CK(getk(&kd, lib, "es_table_grad_det"));
    printf("launch det %d\n", (int)launch_ordered((CUfunction)kd, &b));
    /* a CUkernel launched as a function */
    printf("launch kernel-atomic %d\n", (int)launch_scatter_add_from_here((CUfunction)ka, &b));
    CUfunction fa;
    CK(cuKernelGetFunction(&fa, ka));
    void *args[] = { &b.dlogits, &b.ids, &b.dtable, &b.rows, &b.cols, &b.buckets };
    CUlaunchConfig cfg = { 0 };
    cfg.gridDimX = (ROWS * COLS + 127) / 128;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 128;
    cfg.blockDimY = cfg.blockDimZ = 1;
    printf("launchex function-atomic %d\n", (int)lex(&cfg, fa, args, NULL));
    printf("sync %d\n", (int)cuCtxSynchronize());
    CK(cuLibraryUnload(lib));
    free(img);
    printf("done\n");
    return 0;
}

static int mode_unload(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    for (int round = 0; round < 2; round++) {
        CUmodule m;
        CUfunction fa;
        CK(cuModuleLoadData(&m, img));
        CK(cuModuleGetFunction(&fa, m, "es_table_grad_atomic"));
        printf("round %d atomic %d\n", round, (int)launch_scatter_add_from_here(fa, &b));
        CK(cuCtxSynchronize());
        CK(cuModuleUnload(m));
    }
    free(img);
    printf("done\n");
    return 0;
}

/* Every other load API: the flagged kernel launched once per module. */
static int mode_apis(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    const char *names[] = { "cuModuleLoad", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
                            "cuLibraryLoadFromFile" };
    for (int api = 0; api < 4; api++) {
        CUmodule m = NULL;
        CUlibrary l = NULL;
        CUfunction f;
        CUkernel k;
        switch (api) {
        case 0: CK(cuModuleLoad(&m, path)); break;
        case 1: CK(cuModuleLoadDataEx(&m, img, 0, NULL, NULL)); break;
        case 2: CK(cuModuleLoadFatBinary(&m, img)); break;
        case 3: CK(cuLibraryLoadFromFile(&l, path, NULL, NULL, 0, NULL, NULL, 0)); break;
        }
        if (m) {
            CK(cuModuleGetFunction(&f, m, "es_table_grad_atomic"));
        } else {
            CK(cuLibraryGetKernel(&k, l, "es_table_grad_atomic"));
            CK(cuKernelGetFunction(&f, k));
        }
        printf("api %s atomic %d\n", names[api], (int)launch_scatter_add_from_here(f, &b));
        CK(cuCtxSynchronize());
        if (m)
            CK(cuModuleUnload(m));
        else
            CK(cuLibraryUnload(l));
    }
    free(img);
    printf("done\n");
    return 0;
}

/* 40 modules of the same image (the set grows past its first table) while
 * another thread keeps launching the first module's flagged function; then
 * every module unloaded and a clean launch made. */
#define NMOD 40
typedef struct racer {
    CUcontext ctx;
    CUfunction f;
    bufs_t *b;
    volatile int stop;
    int launches, refused;
} racer_t;

static void *race_launches(void *arg)
{
    racer_t *r = arg;
    cuCtxSetCurrent(r->ctx);
    while (!r->stop) {
        CUresult x = launch_scatter_add_from_here(r->f, r->b);
        r->launches++;
        r->refused += x == CUDA_ERROR_NOT_SUPPORTED;
        cuCtxSynchronize();
    }
    return NULL;
}

static int mode_many(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    CUmodule m[NMOD];
    CUfunction fa[NMOD], fd;
    CK(cuModuleLoadData(&m[0], img));
    CK(cuModuleGetFunction(&fa[0], m[0], "es_table_grad_atomic"));
    racer_t r = { 0 };
    CK(cuCtxGetCurrent(&r.ctx));
    r.f = fa[0];
    r.b = &b;
    pthread_t th;
    CK(pthread_create(&th, NULL, race_launches, &r));
    for (int i = 1; i < NMOD; i++) {
        CK(cuModuleLoadData(&m[i], img));
        CK(cuModuleGetFunction(&fa[i], m[i], "es_table_grad_atomic"));
    }
    int refused = 0;
    for (int i = 0; i < NMOD; i++)
        refused += launch_scatter_add_from_here(fa[i], &b) == CUDA_ERROR_NOT_SUPPORTED;
    r.stop = 1;
    pthread_join(th, NULL);
    printf("many refused %d of %d\n", refused, NMOD);
    printf("racer refused-all %d\n", r.launches > 0 && r.refused == r.launches);
    CK(cuModuleGetFunction(&fd, m[NMOD - 1], "es_table_grad_det"));
    for (int i = 0; i < NMOD; i++)
        CK(cuModuleUnload(m[i]));
    CUmodule m2;
    CK(cuModuleLoadData(&m2, img));
    CK(cuModuleGetFunction(&fd, m2, "es_table_grad_det"));
    printf("after-unload det %d\n", (int)launch_ordered(fd, &b));
    CK(cuCtxSynchronize());
    CK(cuModuleUnload(m2));
    free(img);
    printf("done\n");
    return 0;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Figures only (never asserted): the launch path of an unflagged handle
 * while a flagged one exists (EASYSCALE_AUDIT=warn: one hash lookup) next
 * to none existing (before the flagged one is got). The launches are of an
 * invalid handle, answered at once by the driver. */
static int mode_bench(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *img = read_all(path, &len);
    setup(&b);
    CUmodule m;
    CUfunction fa;
    static char bogus[64];
    double med[2];
    CK(cuModuleLoadData(&m, img));
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1)
            CK(cuModuleGetFunction(&fa, m, "es_table_grad_atomic"));
        double t[101];
        for (int round = 0; round < 101; round++) {
            double t0 = now_ns();
            for (int i = 0; i < 2000; i++)
                cuLaunchKernel((CUfunction)bogus, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            t[round] = (now_ns() - t0) / 2000;
        }
        qsort(t, 101, sizeof(t[0]), cmp_d);
        med[phase] = t[50];
    }
    printf("bench unflagged-launch no-flagged-handle %.2f ns flagged-handle-exists %.2f ns\n",
           med[0], med[1]);
    CK(cuModuleUnload(m));
    free(img);
    return 0;
}

/* Damaged copies of a valid image: each loaded with cuModuleLoadData. */
static int mode_corrupt(const char *path)
{
    bufs_t b;
    size_t len;
    unsigned char *good = read_all(path, &len);
    setup(&b);
    size_t cap = len + 64;
    unsigned char *img = calloc(1, cap);
    const char *names[] = { "zeros", "bad-magic", "header-size-huge", "body-size-huge",
                            "truncated-half", "entries-garbage", "elf-garbage", "ptx-garbage",
                            "entry-size-huge" };
    for (size_t t = 0; t < sizeof(names) / sizeof(names[0]); t++) {
        memset(img, 0, cap);
        memcpy(img, good, len);
        switch (t) {
        case 0: memset(img, 0, cap); break;
        case 1: img[0] ^= 0xff; break;
        case 2: img[6] = 0xff; img[7] = 0xff; break;                      /* header size */
        case 3: memset(img + 8, 0xff, 8); break;                          /* body size */
        case 4: memset(img + 16 + (len - 16) / 2, 0, len - 16 - (len - 16) / 2); break;
        case 5:
            for (size_t i = 16; i < len; i++)
                img[i] = (unsigned char)(i * 131 + 7);
            break;
        case 6:
            memset(img, 0, cap);
            for (size_t i = 7; i < 256; i++)
                img[i] = (unsigned char)(i * 29);
            memcpy(img, "\177ELF\002\001\001", 7);
            break;
        case 7: memset(img, 0, cap);
                strcpy((char *)img, ".version 8.0\n.target sm_75\n.entry broken( {{{ \n"); break;
        case 8: memset(img + 16 + 8, 0xff, 8); break;                     /* first entry's size */
        }
        CUmodule m = NULL;
        CUresult r = cuModuleLoadData(&m, img);
        printf("corrupt %s %d\n", names[t], (int)r);
        if (r == CUDA_SUCCESS)
            cuModuleUnload(m);
    }
    free(img);
    free(good);
    printf("done\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: audit_client module|library|unload|corrupt FATBIN\n");
        return 2;
    }
    if (!strcmp(argv[1], "module"))
        return mode_module(argv[2]);
    if (!strcmp(argv[1], "library"))
        return mode_library(argv[2]);
    if (!strcmp(argv[1], "unload"))
        return mode_unload(argv[2]);
    if (!strcmp(argv[1], "apis"))
        return mode_apis(argv[2]);
    if (!strcmp(argv[1], "bench"))
        return mode_bench(argv[2]);
    if (!strcmp(argv[1], "many"))
        return mode_many(argv[2]);
    if (!strcmp(argv[1], "corrupt"))
        return mode_corrupt(argv[2]);
    fprintf(stderr, "audit_client: unknown mode %s\n", argv[1]);
    return 2;
}
