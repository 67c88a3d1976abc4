/* Swap engine and time-slicing figures (make bench): swap-out and swap-in
 * bandwidth beside the driver's memcpy bandwidth, one migration of an EST
 * holding 512 MiB (device to device and through host memory) beside its
 * target of 1.5 x bytes / memcpy bandwidth + 100 ms, the checksum's skip of
 * unchanged memory, and the step time of four ESTs time-sliced on one GPU
 * beside four ESTs each on its own GPU. Prints figures, never fails on time.
 *
 * On simcuda a "copy" is the CPU's memcpy and a kernel the CPU's loop, so
 * these figures say how the engine's own overhead compares with the copies
 * it has to make; GPU figures come from scripts/gpu-check, which runs it
 * with --here (the devices the driver shows, NVIDIA's driver there).
 *
 *   swap_bench [--mib N] [--here] [--memcpy]
 *     --mib N   the EST's size (default 512)
 *     --memcpy  the driver's copy bandwidths only (the swap.memcpy.* lines;
 *               scripts/bench-timeslice)
 *     --here    the driver's own devices (default: simcuda, 4 simulated
 *               GPUs a100, h100, a100, a100); with one device the
 *               migrations are skipped and the "own GPU" runs of the
 *               time-slicing share it (resident together)
 *
 * swap.memcpy.h2d_bw copies into device memory written before; a swap-in
 * copies into memory it has just created, so swap.memcpy.h2d_fresh_bw
 * gives the driver's copy into such memory too, the first time the GPU
 * hands it out (on simcuda memory never used before costs a page fault and
 * a cleared page per page in the device server), and
 * swap.memcpy.h2d_recycled_bw into memory created again after a release
 * (as every swap-in after the first gets it). Likewise the first migration
 * goes to a GPU that never had memory, the second (swap.migrate.d2d_again)
 * back to one that had.
 *
 * Besides the human lines, one line per figure:
 *   BENCH <id> <value> <unit> [vs <other-id>] [# what it is] */
#include "move/drv.h"
#include "move/memreg.h"
#include "move/mover.h"
#include "move/swap.h"
#include "move/tslice.h"
#include "move/vhandle.h"
#include "kernels/swapsum.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024UL * 1024)

static size_t EST = 512 * MiB; /* --mib */
static int ndev = 4;           /* devices the driver shows */

extern const unsigned char es_swapsum_fatbin[];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what, int rc, const char *msg)
{
    fprintf(stderr, "bench_swap: %s failed (%d) %s\n", what, rc, msg ? msg : "");
    exit(1);
}

#define CKD(x)                                                                 \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS)                                                \
            die(#x, (int)r_, NULL);                                            \
    } while (0)

static void setup(void)
{
    es_vh_on = 1; /* the handles made here are virtual */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h || es_drv_load(h, dlsym) != 0 || cuInit(0) != CUDA_SUCCESS || es_memreg_init() != 0)
        die("driver", 0, NULL);
}

static double gbps(size_t bytes, double ms)
{
    return ms > 0 ? bytes / ms / 1e6 : 0;
}

/* The driver's own copy bandwidth, one stream, pinned host memory. */
static void memcpy_bw(CUdeviceptr d, double *d2h, double *h2d)
{
    void *host;
    CKD(cuMemHostAlloc(&host, EST, CU_MEMHOSTALLOC_PORTABLE));
    memset(host, 1, EST);
    CUstream s;
    CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    double best_d2h = 1e30, best_h2d = 1e30;
    for (int i = 0; i < 3; i++) {
        double t = now_ms();
        CKD(cuMemcpyHtoDAsync(d, host, EST, s));
        CKD(cuStreamSynchronize(s));
        double u = now_ms();
        CKD(cuMemcpyDtoHAsync(host, d, EST, s));
        CKD(cuStreamSynchronize(s));
        double v = now_ms();
        if (u - t < best_h2d)
            best_h2d = u - t;
        if (v - u < best_d2h)
            best_d2h = v - u;
    }
    *d2h = gbps(EST, best_d2h);
    *h2d = gbps(EST, best_h2d);
    cuStreamDestroy(s);
    cuMemFreeHost(host);
}

/* The driver's host-to-device copy into device memory created just before
 * (cuMemCreate + map, as a swap-in gets it), pinned source, 1 stream: a
 * swap-in writes into fresh memory, which the figure above does not. The
 * first round's memory is new to the GPU; *recycled: the best of the next
 * two, created again after a release. */
static double memcpy_fresh_h2d_bw(double *recycled)
{
    void *host;
    CKD(cuMemHostAlloc(&host, EST, CU_MEMHOSTALLOC_PORTABLE));
    memset(host, 1, EST);
    CUstream s;
    CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    double first = 0, best = 1e30;
    for (int i = 0; i < 3; i++) {
        CUmemGenericAllocationHandle h;
        CUdeviceptr d;
        CKD(cuMemCreate(&h, EST, &p, 0));
        CKD(cuMemAddressReserve(&d, EST, es_memreg_granularity(), 0, 0));
        CKD(cuMemMap(d, EST, 0, h, 0));
        CKD(cuMemSetAccess(d, EST, &a, 1));
        double t = now_ms();
        CKD(cuMemcpyHtoDAsync(d, host, EST, s));
        CKD(cuStreamSynchronize(s));
        double u = now_ms() - t;
        if (i == 0)
            first = u;
        else if (u < best)
            best = u;
        CKD(cuMemUnmap(d, EST));
        CKD(cuMemAddressFree(d, EST));
        CKD(cuMemRelease(h));
    }
    cuStreamDestroy(s);
    cuMemFreeHost(host);
    *recycled = gbps(EST, best);
    return gbps(EST, first);
}

static void fill(CUdeviceptr d, size_t n)
{
    CUstream s;
    CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CKD(cuMemsetD32Async(d, 0x12345678, n / 4, s));
    CKD(cuStreamSynchronize(s));
    cuStreamDestroy(s);
}

/* The driver's copy bandwidths (device 0's context current): the BENCH
 * swap.memcpy.* lines. Returns the buffer of EST bytes it made on device 0. */
static CUdeviceptr bench_memcpy(double *d2h, double *h2d)
{
    CUdeviceptr d;
    CKD(es_mem_alloc(0, EST, ES_ALLOC_PLAIN, &d));
    fill(d, EST);
    double m_d2h, m_h2d;
    memcpy_bw(d, &m_d2h, &m_h2d);
    printf("memcpy (driver, 1 stream, pinned)  d2h %6.2f GB/s   h2d %6.2f GB/s\n", m_d2h, m_h2d);
    printf("BENCH swap.memcpy.d2h_bw %.3f GB/s # driver memcpy device to host, 1 stream, pinned, "
           "%zu MiB\n", m_d2h, EST / MiB);
    printf("BENCH swap.memcpy.h2d_bw %.3f GB/s # driver memcpy host to device, 1 stream, pinned, "
           "%zu MiB\n", m_h2d, EST / MiB);
    double m_recycled;
    double m_fresh = memcpy_fresh_h2d_bw(&m_recycled);
    printf("memcpy into device memory created + mapped just before: h2d %6.2f GB/s the first "
           "time, %6.2f GB/s created again after a release\n", m_fresh, m_recycled);
    printf("BENCH swap.memcpy.h2d_fresh_bw %.3f GB/s # driver memcpy host to device into memory "
           "created and mapped just before, the GPU's first use of it, 1 stream, pinned, %zu "
           "MiB\n", m_fresh, EST / MiB);
    printf("BENCH swap.memcpy.h2d_recycled_bw %.3f GB/s # the same into memory created again "
           "after a release (as a swap-in writes), best of 2\n", m_recycled);

    *d2h = m_d2h;
    *h2d = m_h2d;
    return d;
}

static void bench_swap(void)
{
    char msg[256];
    CUcontext c0, c1;
    CKD(cuDevicePrimaryCtxRetain(&c0, 0));
    CKD(cuDevicePrimaryCtxRetain(&c1, ndev > 1 ? 1 : 0));
    CKD(cuCtxSetCurrent(c0));
    double m_d2h, m_h2d;
    CUdeviceptr d = bench_memcpy(&m_d2h, &m_h2d);
    es_swap_opts_t o;
    es_swap_get_opts(&o);
    es_swap_stats_t st;
    int streams[] = { 1, 4 };
    for (int k = 0; k < 2; k++) {
        es_swap_opts_t p = { streams[k], 0, 8 * MiB, 0, 0, 0 };
        es_swap_set_opts(&p);
        es_swap_drop_parks(0);
        /* the first swap-out maps fresh host memory: the best of the next 3 */
        double out = 0, in = 0, out_c = 0, in_c = 0;
        int rc = es_swap_out(0, &st, msg, sizeof(msg));
        for (int i = 0; !rc && i < 3; i++) {
            rc = es_swap_in(0, 0, &st, msg, sizeof(msg));
            if (rc)
                break;
            if (gbps(st.bytes_h2d, st.ms) > in) {
                in = gbps(st.bytes_h2d, st.ms);
                in_c = gbps(st.bytes_h2d, st.ms_copy);
            }
            rc = es_swap_out(0, &st, msg, sizeof(msg));
            if (!rc && gbps(st.bytes_d2h, st.ms) > out) {
                out = gbps(st.bytes_d2h, st.ms);
                out_c = gbps(st.bytes_d2h, st.ms_copy);
            }
        }
        if (rc || (rc = es_swap_in(0, 0, &st, msg, sizeof(msg))) != 0)
            die("swap", rc, msg);
        if (k == 0) {
            es_phys_t *ph = es_memreg_first(0);
            printf("host copies: %s\n", ph && ph->park_h ? "VMM host memory (pinned once)"
                                                          : "memfd, registered at each swap-in");
        }
        printf("swap of %zu MiB, %d stream(s), no checksums:\n"
               "  out %6.2f GB/s (%.2fx memcpy), its copies %6.2f GB/s (%.2fx)\n"
               "  in  %6.2f GB/s (%.2fx memcpy), its copies %6.2f GB/s (%.2fx)   target >= 0.8x\n",
               EST / MiB, streams[k], out, out / m_d2h, out_c, out_c / m_d2h, in, in / m_h2d, in_c,
               in_c / m_h2d);
        printf("BENCH swap.out.%dstream.bw %.3f GB/s vs swap.memcpy.d2h_bw # swap-out of %zu MiB, "
               "%d stream(s), no checksums, best of 3\n", streams[k], out, EST / MiB, streams[k]);
        printf("BENCH swap.in.%dstream.bw %.3f GB/s vs swap.memcpy.h2d_bw # swap-in of %zu MiB, "
               "%d stream(s), best of 3\n", streams[k], in, EST / MiB, streams[k]);
    }
    /* checksums: the first swap-out hashes and copies all, an unchanged one
     * copies nothing */
    es_swap_opts_t p = { 4, 1, 8 * MiB, 0, 0, 0 };
    es_swap_set_opts(&p);
    es_swap_drop_parks(0);
    if (es_swap_out(0, &st, msg, sizeof(msg)) || es_swap_in(0, 0, NULL, msg, sizeof(msg)))
        die("checksummed swap", -1, msg);
    double first = st.ms;
    if (es_swap_out(0, &st, msg, sizeof(msg)))
        die("checksummed swap", -1, msg);
    printf("swap-out with checksums: first %.1f ms (%.2f GB/s), unchanged %.1f ms "
           "(%.0f MiB skipped, %.0f MiB copied; hashing %.1f ms)\n",
           first, gbps(EST, first), st.ms, st.bytes_skipped / (double)MiB,
           st.bytes_d2h / (double)MiB, st.ms_sums);
    if (es_swap_in(0, 0, NULL, msg, sizeof(msg)))
        die("swap-in", -1, msg);

    /* migration of the EST */
    es_swap_opts_t q = { 4, 0, 8 * MiB, 0, 0, 0 };
    es_swap_set_opts(&q);
    es_swap_drop_parks(0);
    double target = 1.5 * EST / (m_d2h * 1e6) + 100;
    printf("BENCH swap.migrate.bound %.4f s # 1.5 x %zu MiB / memcpy d2h bandwidth + 100 ms\n",
           target / 1e3, EST / MiB);
    if (ndev < 2) {
        printf("migration: one device, none measured\n");
    } else {
        int rc = es_swap_migrate(0, 1, c0, c1, &st, msg, sizeof(msg));
        if (rc)
            die("migrate d2d", rc, msg);
        printf("migration of %zu MiB, device to device: %7.1f ms (copies %.1f ms)   target <= "
               "%.1f ms (1.5 x bytes / memcpy + 100 ms)\n", EST / MiB, st.ms, st.ms_copy, target);
        printf("BENCH swap.migrate.d2d %.4f s vs swap.migrate.bound # migration of an EST of %zu "
               "MiB, device to device\n", st.ms / 1e3, EST / MiB);
        CKD(cuCtxSetCurrent(c1));
        rc = es_swap_migrate(0, 0, NULL, c0, &st, msg, sizeof(msg));
        if (rc)
            die("migrate host", rc, msg);
        printf("migration of %zu MiB, through host:     %7.1f ms (copies %.1f ms)   target <= "
               "%.1f ms\n", EST / MiB, st.ms, st.ms_copy, target);
        printf("BENCH swap.migrate.host %.4f s vs swap.migrate.bound # migration of an EST of "
               "%zu MiB, through host memory\n", st.ms / 1e3, EST / MiB);
        CKD(cuCtxSetCurrent(c0));
        rc = es_swap_migrate(0, 1, c0, c1, &st, msg, sizeof(msg));
        if (rc)
            die("migrate d2d again", rc, msg);
        printf("migration of %zu MiB, device to device, to a GPU that had memory before: "
               "%7.1f ms (copies %.1f ms)   target <= %.1f ms\n", EST / MiB, st.ms, st.ms_copy,
               target);
        printf("BENCH swap.migrate.d2d_again %.4f s vs swap.migrate.bound # the same migration "
               "again, to the GPU the EST left before (its memory used before)\n", st.ms / 1e3);
        CKD(cuCtxSetCurrent(c1));
        rc = es_swap_migrate(0, 0, c1, c0, &st, msg, sizeof(msg));
        if (rc)
            die("migrate back", rc, msg);
        CKD(cuCtxSetCurrent(c0));
    }
    es_mem_free(d);
    es_swap_drop_parks(0);
    es_swap_set_opts(&o);
}

/* ---- time-slicing ----------------------------------------------------------------- */

#define TS_N 4
#define TS_STEPS 8
#define TS_BYTES (64 * MiB)

typedef struct ts_out {
    double ms[TS_N];
    int ndev;
} ts_out_t;

static char ts_job[64];

/* One EST: TS_STEPS steps of "compute" (hashing its memory twice), on
 * device dev; sliced: parks and passes the turn after each step. */
static int ts_child(int rank, int dev, int sliced, ts_out_t *out)
{
    setup();
    es_mover_init();
    es_memreg_set_device(0, dev);
    int ranks[TS_N] = { 0, 1, 2, 3 };
    es_tslice_t *t = NULL;
    if (sliced && (es_tslice_join(&t, ts_job, dev, rank, ranks, TS_N) || es_tslice_wait(t, -1)))
        return 2;
    CUcontext ctx;
    CUstream s;
    CUmodule m;
    CUfunction f;
    CUdeviceptr data, sums;
    if (es_vh_primary_retain(&ctx, 0, dev) || es_vh_set_current(ctx) ||
        es_vh_stream_create(&s, CU_STREAM_NON_BLOCKING, 0, 0) ||
        es_vh_module_load(&m, es_swapsum_fatbin, 0, 0, NULL, NULL) ||
        es_vh_module_get_function(&f, m, "es_swapsum") ||
        es_mem_alloc(0, TS_BYTES, ES_ALLOC_PLAIN, &data) ||
        es_mem_alloc(0, TS_BYTES / ES_SWAPSUM_CHUNK * 8, ES_ALLOC_PLAIN, &sums))
        return 3;
    fill(data, TS_BYTES);
    char msg[256];
    double t0 = now_ms();
    for (int step = 0; step < TS_STEPS; step++) {
        if (sliced && step > 0 && (es_tslice_wait(t, -1) || es_mover_run(0, dev, msg, sizeof(msg))))
            return 4;
        unsigned nch = TS_BYTES / ES_SWAPSUM_CHUNK;
        es_swapsum_args_t a = { (const es_u64 *)data, (es_u64 *)sums, nch };
        void *params[] = { &a };
        for (int k = 0; k < 2; k++) {
            CUresult r = cuLaunchKernel(es_vh_real(f), nch, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0,
                                        es_vh_stream(s), params, NULL);
            if (r != CUDA_SUCCESS) {
                fprintf(stderr, "bench_swap: EST %d: cuLaunchKernel: %d\n", rank, (int)r);
                return 5;
            }
        }
        if (cuStreamSynchronize(es_vh_stream(s)) != CUDA_SUCCESS)
            return 6;
        if (sliced) {
            if (es_mover_run(0, ES_MOVER_PARK, msg, sizeof(msg)))
                return 7;
            es_tslice_pass(t);
        }
    }
    /* the last EST's step ends the round */
    out->ms[rank] = (now_ms() - t0) / TS_STEPS;
    if (t)
        es_tslice_leave(t);
    return 0;
}

static double ts_run(int sliced, ts_out_t *out)
{
    snprintf(ts_job, sizeof(ts_job), "bench-%d-%d", (int)getpid(), sliced);
    memset(out, 0, sizeof(*out));
    pid_t pids[TS_N];
    for (int i = 0; i < TS_N; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(ts_child(i, sliced ? 0 : i % ndev, sliced, out));
    }
    int bad = 0;
    for (int i = 0; i < TS_N; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "bench_swap: EST %d: status 0x%x\n", i, st);
            bad = 1;
        }
    }
    if (bad)
        die("time-slicing run", bad, NULL);
    double worst = 0;
    for (int i = 0; i < TS_N; i++)
        if (out->ms[i] > worst)
            worst = out->ms[i];
    return worst;
}

/* The driver's device count, asked in a child (this process stays without
 * CUDA until the time-slicing children have been forked). */
static int count_devices(ts_out_t *out)
{
    pid_t p = fork();
    if (p == 0) {
        setup();
        int n = 0;
        out->ndev = cuDeviceGetCount(&n) == CUDA_SUCCESS ? n : 0;
        _exit(0);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
        return 0;
    return out->ndev;
}

/* --mib N: 1..65536, strictly. */
static int mib_arg(const char *s, size_t *bytes)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 65536)
        return -EINVAL;
    *bytes = (size_t)v * MiB;
    return 0;
}

int main(int argc, char **argv)
{
    int here = 0, only_memcpy = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--here"))
            here = 1;
        else if (!strcmp(argv[i], "--memcpy"))
            only_memcpy = 1;
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc && mib_arg(argv[i + 1], &EST) == 0)
            i++;
        else {
            fprintf(stderr, "usage: swap_bench [--mib N] [--here] [--memcpy]   (N: 1..65536)\n");
            return 2;
        }
    }
    char shm[64] = "";
    if (!here) {
        snprintf(shm, sizeof(shm), "/simcuda-bench-swap-%d", (int)getpid());
        setenv("SIMCUDA_SHM_NAME", shm, 1);
        setenv("SIMCUDA_DEVICES", "a100:4G,h100:4G,a100:4G,a100:4G", 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
    }
    if (only_memcpy) { /* the copy bandwidths only (scripts/bench-timeslice) */
        setup();
        CUcontext c0;
        CKD(cuDevicePrimaryCtxRetain(&c0, 0));
        CKD(cuCtxSetCurrent(c0));
        double d2h, h2d;
        bench_memcpy(&d2h, &h2d);
        if (shm[0])
            shm_unlink(shm);
        return 0;
    }
    ts_out_t *out = mmap(NULL, sizeof(*out), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
    if (out == MAP_FAILED)
        die("mmap", errno, strerror(errno));
    ndev = count_devices(out);
    if (ndev < 1)
        die("cuDeviceGetCount", ndev, "no device");
    printf("devices: %d%s\n", ndev, here ? " (the driver's)" : " (simcuda)");
    /* the time-slicing runs first: forked before this process uses CUDA */
    double own = ts_run(0, out);
    double sliced = ts_run(1, out);
    setup();
    bench_swap();
    printf("step time, %d ESTs of %lu MiB: each on its own GPU%s %.1f ms, time-sliced on one GPU "
           "%.1f ms (%.2fx; the GPU does %dx the work per round)\n",
           TS_N, TS_BYTES / MiB, ndev < TS_N ? " (or sharing one, resident together)" : "", own,
           sliced, sliced / own, TS_N);
    printf("BENCH tslice.4on4.step %.4f s # step time, %d ESTs of %lu MiB each on its own GPU%s\n",
           own / 1e3, TS_N, TS_BYTES / MiB, ndev < TS_N ? " (or sharing one, resident together)" : "");
    printf("BENCH tslice.4on1.step %.4f s vs tslice.4on4.step # step time, %d ESTs of %lu MiB "
           "time-sliced on one GPU (%dx the work per round)\n", sliced / 1e3, TS_N, TS_BYTES / MiB,
           TS_N);
    if (shm[0])
        shm_unlink(shm);
    return 0;
}
