/* The machine's GPUs as the controller sees them: a probe through the CUDA
 * driver API (cuInit, cuDeviceGet*, libcuda.so.1 dlopen'ed in a child
 * process, never NVML), model keys, GPU specs. */
#include "controller/ctl.h"

#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROBE_TIMEOUT_MS 30000

/* What the child sends per GPU (same binary on both ends). */
typedef struct probe_rec {
    int ordinal, sms, clock_khz, cc_major, cc_minor;
    uint64_t mem;
    char uuid[48];
    char name[96];
} probe_rec_t;

typedef CUresult (*fn_init_t)(unsigned);
typedef CUresult (*fn_count_t)(int *);
typedef CUresult (*fn_get_t)(CUdevice *, int);
typedef CUresult (*fn_name_t)(char *, int, CUdevice);
typedef CUresult (*fn_mem_t)(size_t *, CUdevice);
typedef CUresult (*fn_uuid_t)(CUuuid *, CUdevice);
typedef CUresult (*fn_attr_t)(int *, CUdevice_attribute, CUdevice);

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* In the child: a status word (0 or a message length), then the message or
 * the count and records. */
static void probe_child(int fd)
{
    char msg[200] = "";
    int n = 0;
    probe_rec_t recs[ES_CTL_MAX_GPUS];
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(msg, sizeof(msg), "cannot load libcuda.so.1 (no CUDA driver?): %s", dlerror());
        goto out;
    }
    fn_init_t init = (fn_init_t)dlsym(h, "cuInit");
    fn_count_t count = (fn_count_t)dlsym(h, "cuDeviceGetCount");
    fn_get_t get = (fn_get_t)dlsym(h, "cuDeviceGet");
    fn_name_t name = (fn_name_t)dlsym(h, "cuDeviceGetName");
    fn_mem_t mem = (fn_mem_t)dlsym(h, "cuDeviceTotalMem_v2");
    fn_uuid_t uuid = (fn_uuid_t)dlsym(h, "cuDeviceGetUuid_v2");
    fn_attr_t attr = (fn_attr_t)dlsym(h, "cuDeviceGetAttribute");
    if (!uuid)
        uuid = (fn_uuid_t)dlsym(h, "cuDeviceGetUuid");
    if (!init || !count || !get || !name || !mem || !uuid || !attr) {
        snprintf(msg, sizeof(msg), "libcuda.so.1 lacks a device query function");
        goto out;
    }
    CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, sizeof(msg), "cuInit failed (CUresult %d)", (int)r);
        goto out;
    }
    if ((r = count(&n)) != CUDA_SUCCESS) {
        snprintf(msg, sizeof(msg), "cuDeviceGetCount failed (CUresult %d)", (int)r);
        goto out;
    }
    if (n > ES_CTL_MAX_GPUS)
        n = ES_CTL_MAX_GPUS;
    for (int i = 0; i < n; i++) {
        probe_rec_t *p = &recs[i];
        CUdevice d;
        CUuuid u;
        size_t bytes = 0;
        memset(p, 0, sizeof(*p));
        p->ordinal = i;
        if ((r = get(&d, i)) != CUDA_SUCCESS || (r = name(p->name, sizeof(p->name) - 1, d)) ||
            (r = mem(&bytes, d)) || (r = uuid(&u, d)) ||
            (r = attr(&p->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d)) ||
            (r = attr(&p->clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, d)) ||
            (r = attr(&p->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d)) ||
            (r = attr(&p->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d))) {
            snprintf(msg, sizeof(msg), "querying device %d failed (CUresult %d)", i, (int)r);
            goto out;
        }
        p->mem = bytes;
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(p->uuid, sizeof(p->uuid),
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
    }
out:;
    int len = (int)strlen(msg);
    if (write_all(fd, &len, sizeof(len)) < 0)
        _exit(1);
    if (len)
        write_all(fd, msg, (size_t)len);
    else if (write_all(fd, &n, sizeof(n)) == 0)
        write_all(fd, recs, sizeof(recs[0]) * (size_t)n);
    _exit(0);
}

/* Reads exactly len bytes before the deadline. */
static int read_full(int fd, void *p, size_t len, int64_t deadline)
{
    char *c = p;
    while (len) {
        int64_t left = deadline - es_ctl_now_ms();
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (left <= 0)
            return -ETIMEDOUT;
        int k = poll(&pf, 1, (int)left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k ? -errno : -ETIMEDOUT;
        ssize_t r = read(fd, c, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r ? -errno : -EPIPE;
        c += r;
        len -= (size_t)r;
    }
    return 0;
}

int es_ctl_gpus_probe(es_ctl_gpu_t *g, int max, int *n, char *err, size_t errlen)
{
    int pfd[2] = { -1, -1 }, rc = 0, len = 0, cnt = 0;
    pid_t pid = -1;
    probe_rec_t rec;
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot probe GPUs: pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot probe GPUs: fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(pfd[0]);
        probe_child(pfd[1]);
    }
    close(pfd[1]);
    pfd[1] = -1;
    int64_t deadline = es_ctl_now_ms() + PROBE_TIMEOUT_MS;
    if ((rc = read_full(pfd[0], &len, sizeof(len), deadline)) < 0) {
        snprintf(err, errlen, "the GPU probe failed (%s)",
                 rc == -ETIMEDOUT ? "timed out" : "crashed");
        goto out;
    }
    if (len > 0) {
        char msg[256];
        if (len >= (int)sizeof(msg))
            len = sizeof(msg) - 1;
        if (read_full(pfd[0], msg, (size_t)len, deadline) < 0)
            len = 0;
        msg[len] = '\0';
        snprintf(err, errlen, "%s", msg);
        rc = -ENODEV;
        goto out;
    }
    if ((rc = read_full(pfd[0], &cnt, sizeof(cnt), deadline)) < 0 || cnt < 0 ||
        cnt > ES_CTL_MAX_GPUS) {
        snprintf(err, errlen, "the GPU probe failed (bad answer)");
        rc = -EIO;
        goto out;
    }
    *n = 0;
    for (int i = 0; i < cnt; i++) {
        if ((rc = read_full(pfd[0], &rec, sizeof(rec), deadline)) < 0) {
            snprintf(err, errlen, "the GPU probe failed (short answer)");
            goto out;
        }
        if (i >= max)
            continue;
        es_ctl_gpu_t *d = &g[(*n)++];
        memset(d, 0, sizeof(*d));
        rec.name[sizeof(rec.name) - 1] = rec.uuid[sizeof(rec.uuid) - 1] = '\0';
        d->ordinal = rec.ordinal;
        snprintf(d->uuid, sizeof(d->uuid), "%s", rec.uuid);
        snprintf(d->name, sizeof(d->name), "%s", rec.name);
        snprintf(d->model, sizeof(d->model), "%s", es_ctl_gpu_model(rec.name));
        d->mem = rec.mem;
        d->sms = rec.sms;
        d->clock_khz = rec.clock_khz;
        d->cc_major = rec.cc_major;
        d->cc_minor = rec.cc_minor;
    }
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (pid > 0) {
        if (rc == -ETIMEDOUT)
            kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    return rc;
}

int es_ctl_d2_model_known(const char *model)
{
    /* the models of the shim's canonical device table (device/device.c) */
    static const char *const known[] = { "t4", "a100", "a10", "l4", "h100", "h200", "b200" };
    if (!model)
        return 0;
    for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
        if (strcmp(model, known[k]) == 0)
            return 1;
    return 0;
}

const char *es_ctl_gpu_model(const char *name)
{
    /* Longest keys first: "A100" contains "A10", "L40" is not an "L4". */
    static const char *const keys[] = { "b200", "h200", "h100", "a100", "v100", "p100",
                                        "a10",  "l4",   "t4" };
    char up[96];
    size_t i;
    for (i = 0; name[i] && i + 1 < sizeof(up); i++)
        up[i] = (char)tolower((unsigned char)name[i]);
    up[i] = '\0';
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        size_t kl = strlen(keys[k]);
        for (const char *p = strstr(up, keys[k]); p; p = strstr(p + 1, keys[k])) {
            int left = p == up || !isalnum((unsigned char)p[-1]);
            int right = !isalnum((unsigned char)p[kl]);
            if (left && right)
                return keys[k];
        }
    }
    return "";
}

int es_ctl_gpu_lookup_node(const es_ctl_gpu_t *g, int n, int node, const char *tok)
{
    if (!tok || !*tok)
        return -EINVAL;
    int uuid = strncmp(tok, "GPU-", 4) == 0;
    long v = -1;
    if (!uuid && es_ctl_parse_long(tok, 0, ES_CTL_MAX_GPUS - 1, &v) < 0)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        if ((node < 0 || g[i].node == node) &&
            (uuid ? strcasecmp(g[i].uuid, tok) == 0 : g[i].ordinal == v))
            return i;
    return -ENOENT;
}

int es_ctl_gpu_lookup(const es_ctl_gpu_t *g, int n, const char *tok)
{
    return es_ctl_gpu_lookup_node(g, n, -1, tok);
}

int es_ctl_gpus_parse(const char *spec, const es_ctl_gpu_t *g, int n, uint64_t *mask, char *err,
                      size_t errlen)
{
    uint64_t m = 0;
    char buf[1024];
    if (!spec || !*spec || strlen(spec) >= sizeof(buf)) {
        snprintf(err, errlen, "empty or too long GPU list");
        return -EINVAL;
    }
    if (strcmp(spec, "all") == 0) {
        if (n == 0) {
            snprintf(err, errlen, "no GPU found");
            return -ENOENT;
        }
        *mask = n == 64 ? ~0ull : (1ull << n) - 1;
        return 0;
    }
    strcpy(buf, spec);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *dash = strncmp(t, "GPU-", 4) == 0 ? NULL : strchr(t, '-');
        if (dash) {
            long a, b;
            *dash = '\0';
            if (es_ctl_parse_long(t, 0, ES_CTL_MAX_GPUS - 1, &a) < 0 ||
                es_ctl_parse_long(dash + 1, 0, ES_CTL_MAX_GPUS - 1, &b) < 0 || b < a) {
                snprintf(err, errlen, "bad GPU range \"%s-%s\" in \"%s\"", t, dash + 1, spec);
                return -EINVAL;
            }
            char one[16];
            for (long x = a; x <= b; x++) {
                snprintf(one, sizeof(one), "%ld", x);
                int i = es_ctl_gpu_lookup(g, n, one);
                if (i < 0) {
                    snprintf(err, errlen, "no GPU %ld (this machine has %d)", x, n);
                    return -ENOENT;
                }
                if (m & (1ull << i)) {
                    snprintf(err, errlen, "GPU %ld named twice in \"%s\"", x, spec);
                    return -EINVAL;
                }
                m |= 1ull << i;
            }
            continue;
        }
        int i = es_ctl_gpu_lookup(g, n, t);
        if (i == -EINVAL) {
            snprintf(err, errlen, "bad GPU \"%s\" in \"%s\" (expected ordinals, ranges like "
                     "0-3, UUIDs, or all)", t, spec);
            return -EINVAL;
        }
        if (i < 0) {
            snprintf(err, errlen, "no GPU %s (this machine has %d)", t, n);
            return -ENOENT;
        }
        if (m & (1ull << i)) {
            snprintf(err, errlen, "GPU %s named twice in \"%s\"", t, spec);
            return -EINVAL;
        }
        m |= 1ull << i;
    }
    /* Empty entries ("0,,1", ",0") are a syntax error, not skipped. */
    if (!m || strstr(spec, ",,") || spec[0] == ',' || spec[strlen(spec) - 1] == ',') {
        snprintf(err, errlen, "bad GPU list \"%s\"", spec);
        return -EINVAL;
    }
    *mask = m;
    return 0;
}

uint64_t es_ctl_gpu_prior_ns(const es_ctl_gpu_t *g)
{
    uint64_t thr = (uint64_t)(g->sms > 0 ? g->sms : 1) * (uint64_t)(g->clock_khz > 0 ? g->clock_khz : 1000000);
    uint64_t t = 1000000000000000ull / thr; /* a100: 108 x 1.41 GHz -> 6.6 ms */
    return t ? t : 1;
}
