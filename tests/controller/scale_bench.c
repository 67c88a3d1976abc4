/* The latency of a scale event (make bench): four ESTs holding 256 MiB of
 * device memory each (tests/controller/scale_est, under libeasyscale.so,
 * launched by easyscale-ctl run on four GPUs), scaled from 4 GPUs to 2 with
 * `easyscale-ctl scale`: the time from the command to its return (every EST
 * has answered: moved and resumed), beside the bytes moved over the
 * driver's memcpy bandwidth (device to device across GPUs, one stream: the
 * path the migrations take). Three rounds (4 -> 2, back to 4); the best
 * 4 -> 2 is the figure, every round is shown. Prints figures, never fails
 * on time; fails (exit 1) when a scale or an EST fails.
 *
 * On simcuda a copy is the CPU's memcpy, so the figure says how the
 * controller's and the mover's own overhead compares with the copies.
 *
 *   ctl_scale_bench [--mib N]    N: each EST's device memory (default 256)
 *
 * Output: a human table, and one line per figure:
 *   BENCH <id> <value> <unit> [vs <other-id>] [# what it is] */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024UL * 1024)
#define NEST 4
#define ROUNDS 3

static long g_mib = 256;
static char g_dir[128];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void msleep(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static const char *bpath(const char *rel)
{
    static char p[8][4096];
    static int k;
    const char *b = getenv("ES_BUILD");
    char *o = p[k++ % 8];
    snprintf(o, 4096, "%s/%s", b ? b : "build", rel);
    return o;
}

#define CKD(x)                                                                 \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            fprintf(stderr, "ctl_scale_bench: %s failed (%d)\n", #x, (int)r_); \
            rc = 1;                                                            \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* The driver's copy bandwidth between two GPUs (cuMemcpyPeerAsync, one
 * stream, best of 3) and device to host (pinned), in GB/s. In a child, so
 * that the bench itself holds no device memory while the job runs. */
static int memcpy_bw(double *peer, double *d2h)
{
    double *res = mmap(NULL, 2 * sizeof(double), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED)
        return -errno;
    pid_t p = fork();
    if (p == 0) {
        int rc = 0;
        size_t bytes = (size_t)g_mib * MiB;
        CUcontext c0 = NULL, c1 = NULL;
        CUdeviceptr a = 0, b = 0;
        CUdevice d0, d1;
        CUstream s = NULL;
        void *host = NULL;
        CKD(cuInit(0));
        CKD(cuDeviceGet(&d0, 0));
        CKD(cuDeviceGet(&d1, 2));
        CKD(cuDevicePrimaryCtxRetain(&c0, d0));
        CKD(cuDevicePrimaryCtxRetain(&c1, d1));
        CKD(cuCtxSetCurrent(c1));
        CKD(cuMemAlloc(&b, bytes));
        CKD(cuCtxSetCurrent(c0));
        CKD(cuMemAlloc(&a, bytes));
        CKD(cuMemsetD32(a, 0x12345678, bytes / 4));
        CKD(cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_PORTABLE));
        CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        double best_p = 1e30, best_h = 1e30;
        for (int i = 0; i < 3; i++) {
            double t = now_s();
            CKD(cuMemcpyPeerAsync(b, c1, a, c0, bytes, s));
            CKD(cuStreamSynchronize(s));
            double u = now_s();
            CKD(cuMemcpyDtoHAsync(host, a, bytes, s));
            CKD(cuStreamSynchronize(s));
            double v = now_s();
            if (u - t < best_p)
                best_p = u - t;
            if (v - u < best_h)
                best_h = v - u;
        }
        res[0] = bytes / best_p / 1e9;
        res[1] = bytes / best_h / 1e9;
    out:
        if (s)
            cuStreamDestroy(s);
        if (host)
            cuMemFreeHost(host);
        if (a)
            cuMemFree(a);
        if (b) {
            cuCtxSetCurrent(c1);
            cuMemFree(b);
        }
        _exit(rc);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st)) {
        munmap(res, 2 * sizeof(double));
        return -EIO;
    }
    *peer = res[0];
    *d2h = res[1];
    munmap(res, 2 * sizeof(double));
    return 0;
}

/* Runs argv to completion, its output (stdout and stderr) in *out (malloc'ed);
 * returns its exit status, or -1. */
static int run_cmd(char *const argv[], char **out)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/cmd.out", g_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    pid_t p = fork();
    if (p == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd);
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p)
        return -1;
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t cap = 1 << 16, n;
        *out = calloc(1, cap + 1);
        n = *out ? fread(*out, 1, cap, f) : 0;
        if (*out)
            (*out)[n] = '\0';
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* MiB moved: the sum of the "(X MiB)" of every EST's answer. */
static double mib_moved(const char *out)
{
    double sum = 0;
    for (const char *p = out; (p = strstr(p, ": ok in ")) != NULL; p++) {
        const char *q = strchr(p, '(');
        double v;
        if (q && sscanf(q, "(%lf MiB)", &v) == 1)
            sum += v;
    }
    return sum;
}

/* One scale: wall seconds, MiB moved, ESTs moved; -1 when it failed. */
static int scale(const char *sock, const char *spec, double *secs, double *mib, int *moved)
{
    char *argv[] = { (char *)bpath("bin/easyscale-ctl"), "scale", "--gpus", (char *)spec,
                     "--socket", (char *)sock, NULL };
    char *out = NULL;
    double t = now_s();
    int st = run_cmd(argv, &out);
    *secs = now_s() - t;
    if (st != 0) {
        fprintf(stderr, "ctl_scale_bench: scale --gpus %s failed (%d):\n%s\n", spec, st,
                out ? out : "");
        free(out);
        return -1;
    }
    *mib = mib_moved(out);
    *moved = count(out, ": ok in ");
    free(out);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 1;
    pid_t job = 0;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--mib") && i + 1 < argc &&
            (g_mib = strtol(argv[i + 1], &end, 10), *end == '\0' && g_mib >= 1 && g_mib <= 4096)) {
            i++;
            continue;
        }
        fprintf(stderr, "usage: ctl_scale_bench [--mib N]   (N: 1..4096, default 256)\n");
        return 2;
    }
    char shm[64], devs[128], mibs[16], stop[256], sock[256], outp[256];
    snprintf(shm, sizeof(shm), "/simcuda-bench-scale-%d", (int)getpid());
    snprintf(devs, sizeof(devs), "a100:%ldM,a100:%ldM,a100:%ldM,a100:%ldM", 3 * g_mib + 256,
             3 * g_mib + 256, 3 * g_mib + 256, 3 * g_mib + 256);
    setenv("SIMCUDA_SHM_NAME", shm, 1);
    setenv("SIMCUDA_DEVICES", devs, 1);
    setenv("EASYSCALE_HEARTBEAT_MS", "100", 1);
    setenv("EASYSCALE_LOG", "warn", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    snprintf(g_dir, sizeof(g_dir), "/tmp/es-scale-bench-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("ctl_scale_bench: mkdtemp");
        return 1;
    }
    snprintf(stop, sizeof(stop), "%s/stop", g_dir);
    snprintf(sock, sizeof(sock), "%s/job.sock", g_dir);
    snprintf(outp, sizeof(outp), "%s/job.out", g_dir);
    snprintf(mibs, sizeof(mibs), "%ld", g_mib);

    double peer = 0, d2h = 0;
    if (memcpy_bw(&peer, &d2h) < 0) {
        fprintf(stderr, "ctl_scale_bench: the memcpy measurement failed\n");
        goto out;
    }

    /* the job: 4 ESTs on GPUs 0-3 */
    job = fork();
    if (job == 0) {
        setpgid(0, 0);
        int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        char *a[] = { (char *)bpath("bin/easyscale-ctl"), "run", "--ests", "4", "--gpus", "0-3",
                      "--determinism", "d1", "--socket", sock, "--progress", "off", "--shim",
                      (char *)bpath("lib/libeasyscale.so"), "--",
                      (char *)bpath("tests/controller/scale_est"), mibs, stop, NULL };
        execv(a[0], a);
        _exit(127);
    }
    if (job < 0) {
        perror("ctl_scale_bench: fork");
        goto out;
    }
    setpgid(job, job);
    /* ready: every EST filled its memory and registered */
    int ready = 0;
    for (int i = 0; i < 1200 && !ready; i++) {
        size_t n = 0;
        char buf[1 << 15];
        FILE *f = fopen(outp, "r");
        if (f) {
            n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
        }
        buf[n] = '\0';
        if (count(buf, "] ready") == NEST && strstr(buf, "all 4 ESTs registered"))
            ready = 1;
        else if (waitpid(job, NULL, WNOHANG) == job) {
            fprintf(stderr, "ctl_scale_bench: the job ended early:\n%s\n", buf);
            job = 0;
            goto out;
        } else
            msleep(50);
    }
    if (!ready) {
        fprintf(stderr, "ctl_scale_bench: the ESTs were not ready within 60 s\n");
        goto out;
    }
    msleep(300); /* a heartbeat with the memory */

    double best = 1e30, bytes = 0, lat[ROUNDS], back[ROUNDS];
    int moved = 0, failed = 0;
    for (int r = 0; r < ROUNDS && !failed; r++) {
        double mib, mib_back;
        int mv, mv_back;
        if (scale(sock, "0,1", &lat[r], &mib, &mv) < 0 ||
            scale(sock, "0-3", &back[r], &mib_back, &mv_back) < 0) {
            failed = 1;
            break;
        }
        if (lat[r] < best) {
            best = lat[r];
            bytes = mib;
            moved = mv;
        }
    }
    /* the ESTs check their memory and end */
    int fd = open(stop, O_WRONLY | O_CREAT, 0600);
    if (fd >= 0)
        close(fd);
    int st = -1;
    for (int i = 0; i < 1200; i++) {
        if (waitpid(job, &st, WNOHANG) == job) {
            job = 0;
            break;
        }
        msleep(50);
    }
    size_t n = 0;
    static char jo[1 << 16];
    FILE *f = fopen(outp, "r");
    if (f) {
        n = fread(jo, 1, sizeof(jo) - 1, f);
        fclose(f);
    }
    jo[n] = '\0';
    if (failed || job != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        count(jo, "memory intact") != NEST) {
        fprintf(stderr, "ctl_scale_bench: the job failed:\n%s\n", jo);
        goto out;
    }

    double bound = bytes * MiB / (peer * 1e9);
    printf("scale event, %d ESTs x %ld MiB, 4 -> 2 GPUs (simcuda a100 x4), easyscale-ctl scale:\n",
           NEST, g_mib);
    printf("  %-8s %-16s %-16s\n", "round", "4 -> 2 (s)", "2 -> 4 (s)");
    for (int r = 0; r < ROUNDS; r++)
        printf("  %-8d %-16.3f %-16.3f\n", r + 1, lat[r], back[r]);
    printf("  %-34s %10.3f s   (%d ESTs moved, %.1f MiB)\n", "best 4 -> 2, command to resumed",
           best, moved, bytes);
    printf("  %-34s %10.2f GB/s  (device to host %.2f GB/s)\n", "memcpy GPU to GPU, 1 stream",
           peer, d2h);
    printf("  %-34s %10.3f s   (%.2fx)\n", "bytes / memcpy bandwidth", bound, best / bound);
    printf("BENCH scale.4to2.latency %.4f s vs scale.4to2.memcpy_bound # easyscale-ctl scale "
           "4 -> 2 GPUs, command to every EST resumed, %d ESTs x %ld MiB, best of %d\n",
           best, NEST, g_mib, ROUNDS);
    printf("BENCH scale.4to2.bytes %.1f MiB # device memory the ESTs that moved copied\n", bytes);
    printf("BENCH scale.4to2.memcpy_bw %.3f GB/s # cuMemcpyPeerAsync GPU to GPU, one stream, "
           "%ld MiB\n", peer, g_mib);
    printf("BENCH scale.4to2.memcpy_bound %.4f s # bytes moved / memcpy bandwidth\n", bound);
    rc = 0;
out:
    if (job > 0) {
        kill(-job, SIGKILL);
        waitpid(job, NULL, 0);
    }
    unlink(stop);
    unlink(outp);
    char p[256];
    snprintf(p, sizeof(p), "%s/cmd.out", g_dir);
    unlink(p);
    rmdir(g_dir);
    shm_unlink(shm);
    return rc;
}
