/* The job file beside the socket (SOCKET.job): what `run` decided (ESTs,
 * determinism, the machine's GPUs, the job's GPUs, the planned placement,
 * whether the shim time-slices the job itself, the processes it started)
 * and what the daemon changed since (slots, epoch). A restarted daemon
 * reads it and re-learns everything else (pids, slots, steps, states) from
 * the ESTs' registrations.
 *
 * Text, one "key value..." per line, written whole to a temporary file
 * and renamed over the old one; read strictly (an unknown key, a bad
 * number, a missing key: -EINVAL with the line). */
#include "controller/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOB_MAGIC "easyscale-job 1"

int es_ctl_job_write(const char *sock, const es_ctl_job_t *j)
{
    char path[4200], tmp[4300];
    es_ctl_buf_t b = { 0 };
    int fd = -1, rc = 0;
    es_ctl_job_paths(sock, path, NULL, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
    es_ctl_buf_printf(&b, "%s\nests %d\ndeterminism %s\ncanonical %s\nest_memory %llu\n"
                      "time_slicing %d\nshim_time_slice %d\nxhost_host %d\n"
                      "heartbeat_timeout_ms %d\n"
                      "move_timeout_ms %d\ntcp %s\nnodes %d\nests_per_node %d\n"
                      "join_timeout_ms %d\nepoch %llu\nslots %llu\n",
                      JOB_MAGIC, j->nests, es_ctl_level_name(j->determinism),
                      j->canonical[0] ? j->canonical : "-",
                      (unsigned long long)j->est_mem, j->time_slicing, j->shim_time_slice,
                      j->xhost_host,
                      j->hb_timeout_ms, j->move_timeout_ms, j->tcp[0] ? j->tcp : "-",
                      j->nnodes > 1 ? j->nnodes : 1, j->nnodes > 1 ? j->ests_per_node : 0,
                      j->join_timeout_ms, (unsigned long long)j->epoch, (unsigned long long)j->slots);
    for (int i = 0; i < j->ngpus; i++) {
        const es_ctl_gpu_t *g = &j->gpus[i];
        if (g->node) /* another node's GPU (a job across hosts) */
            es_ctl_buf_printf(&b, "node_gpu %d ", g->node);
        es_ctl_buf_printf(&b, "gpu %d %s %llu %d %d %d %d %s %s\n", g->ordinal, g->uuid,
                          (unsigned long long)g->mem, g->sms, g->clock_khz, g->cc_major,
                          g->cc_minor, g->model[0] ? g->model : "-", g->name);
    }
    if (j->failed[0])
        es_ctl_buf_printf(&b, "failed %d %s\n", j->failed_node, j->failed);
    for (int r = 0; r < j->nests; r++)
        es_ctl_buf_printf(&b, "est %d %d %d\n", r, j->place[r], (int)j->pids[r]);
    es_ctl_buf_printf(&b, "end\n");
    if (b.oom) {
        rc = -ENOMEM;
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    size_t off = 0;
    while (off < b.len) {
        ssize_t w = write(fd, b.p + off, b.len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        off += (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        fd = -1;
        rc = -errno;
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) < 0)
        rc = -errno;
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        unlink(tmp);
    es_ctl_buf_free(&b);
    return rc;
}

/* Printable, no spaces. */
static int word_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (!n || n >= max)
        return 0;
    for (; *s; s++)
        if (*s <= 0x20 || *s >= 0x7f)
            return 0;
    return 1;
}

/* A word value: "-" none, else copied. Returns 0 or -EINVAL. */
static int word_value(const char *v, char *out, size_t max)
{
    if (!word_ok(v, max))
        return -EINVAL;
    if (strcmp(v, "-") != 0)
        strcpy(out, v);
    return 0;
}

/* A decimal in [lo, hi]. Returns 0 or -EINVAL. */
static int int_value(const char *v, long lo, long hi, int *out)
{
    long x;
    if (es_ctl_parse_long(v, lo, hi, &x) < 0)
        return -EINVAL;
    *out = (int)x;
    return 0;
}

/* A non-negative decimal, 64 bits. Returns 0 or -EINVAL. */
static int u64_value(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long u = strtoull(v, &end, 10);
    if (!*v || *end || errno || *v == '-')
        return -EINVAL;
    *out = u;
    return 0;
}

static int level_value(const char *v, int *out)
{
    if (strcmp(v, "d1") == 0)
        *out = 1;
    else if (strcmp(v, "d2") == 0)
        *out = 2;
    else if (strcmp(v, "off") == 0)
        *out = 0;
    else
        return -EINVAL;
    return 0;
}

/* The keys every job file has, each once (bit k of seen: keys[k]). */
enum {
    K_ESTS, K_LEVEL, K_CANON, K_ESTMEM, K_TSLICE, K_SHIMTS, K_XHOST, K_HB, K_MOVE, K_TCP, K_NODES,
    K_KPN,
    K_JOIN, K_EPOCH, K_SLOTS, K_N
};
static const char *const keys[K_N] = { "ests", "determinism", "canonical", "est_memory",
                                       "time_slicing", "shim_time_slice", "xhost_host",
                                       "heartbeat_timeout_ms",
                                       "move_timeout_ms", "tcp", "nodes", "ests_per_node",
                                       "join_timeout_ms", "epoch", "slots" };
#define JOB_KEYS_ALL ((1u << K_N) - 1)

/* One of the keys. Returns 0, -ENOENT (not one of them) or -EINVAL. */
static int job_key(es_ctl_job_t *j, const char *key, const char *v, unsigned *seen)
{
    int k = 0;
    while (k < K_N && strcmp(key, keys[k]) != 0)
        k++;
    if (k == K_N)
        return -ENOENT;
    if (*seen & (1u << k))
        return -EINVAL;
    *seen |= 1u << k;
    switch (k) {
    case K_ESTS: return int_value(v, 1, ES_CTL_MAX_ESTS, &j->nests);
    case K_LEVEL: return level_value(v, &j->determinism);
    case K_CANON: return word_value(v, j->canonical, sizeof(j->canonical));
    case K_ESTMEM:
        return es_ctl_parse_size(v, &j->est_mem) < 0 && strcmp(v, "0") != 0 ? -EINVAL : 0;
    case K_TSLICE: return int_value(v, 0, 1, &j->time_slicing);
    case K_SHIMTS: return int_value(v, 0, 1, &j->shim_time_slice);
    case K_XHOST: return int_value(v, 0, 1, &j->xhost_host);
    case K_HB: return int_value(v, 100, 3600000, &j->hb_timeout_ms);
    case K_MOVE: return int_value(v, 100, 86400000, &j->move_timeout_ms);
    case K_TCP: return word_value(v, j->tcp, sizeof(j->tcp));
    case K_NODES: return int_value(v, 1, ES_CTL_MAX_NODES, &j->nnodes);
    case K_KPN: return int_value(v, 0, ES_CTL_MAX_ESTS, &j->ests_per_node);
    case K_JOIN: return int_value(v, 0, 86400000, &j->join_timeout_ms);
    case K_EPOCH: return u64_value(v, &j->epoch);
    default: return u64_value(v, &j->slots);
    }
}

/* "gpu ORDINAL UUID MEMORY SMS CLOCK CC_MAJOR CC_MINOR MODEL NAME...".
 * Returns 0 or -EINVAL. */
static int job_gpu(es_ctl_job_t *j, const char *v)
{
    es_ctl_gpu_t *g;
    char model[16];
    unsigned long long u;
    int m = 0;
    if (j->ngpus >= ES_CTL_MAX_GPUS)
        return -EINVAL;
    g = &j->gpus[j->ngpus];
    if (sscanf(v, "%d %47s %llu %d %d %d %d %15s %n", &g->ordinal, g->uuid, &u, &g->sms,
               &g->clock_khz, &g->cc_major, &g->cc_minor, model, &m) != 8 || !v[m] ||
        g->ordinal < 0 || strncmp(g->uuid, "GPU-", 4) != 0 || !u)
        return -EINVAL;
    g->mem = u;
    snprintf(g->model, sizeof(g->model), "%s", strcmp(model, "-") ? model : "");
    snprintf(g->name, sizeof(g->name), "%s", v + m);
    j->ngpus++;
    return 0;
}

/* "est RANK SLOT PID", ranks in order from 0 (*nest read so far).
 * Returns 0 or -EINVAL. */
static int job_est(es_ctl_job_t *j, const char *v, int *nest)
{
    int a, b, c, m = 0;
    if (sscanf(v, "%d %d %d%n", &a, &b, &c, &m) != 3 || v[m] || a != *nest ||
        a >= ES_CTL_MAX_ESTS || b < -1 || b >= ES_CTL_MAX_GPUS || c < 0)
        return -EINVAL;
    j->place[a] = b;
    j->pids[a] = c;
    (*nest)++;
    return 0;
}

/* One "key value..." line. Returns 0 or -EINVAL. */
static int job_line(es_ctl_job_t *j, const char *line, unsigned *seen, int *nest)
{
    char key[32];
    int n = 0;
    if (sscanf(line, "%31s %n", key, &n) != 1)
        return -EINVAL;
    const char *v = line + n;
    if (strcmp(key, "gpu") == 0)
        return job_gpu(j, v);
    if (strcmp(key, "node_gpu") == 0) { /* "node_gpu NODE gpu ...": another node's */
        int node, m = 0;
        if (sscanf(v, "%d gpu %n", &node, &m) != 1 || !m || node < 1 ||
            node >= ES_CTL_MAX_NODES || job_gpu(j, v + m) < 0)
            return -EINVAL;
        j->gpus[j->ngpus - 1].node = node;
        return 0;
    }
    if (strcmp(key, "est") == 0)
        return job_est(j, v, nest);
    if (strcmp(key, "failed") == 0) { /* "failed NODE REASON...": a job across hosts */
        int m = 0;
        if (j->failed[0] || sscanf(v, "%d %n", &j->failed_node, &m) != 1 || !m || !v[m] ||
            j->failed_node < 0 || j->failed_node >= ES_CTL_MAX_NODES ||
            strlen(v + m) >= sizeof(j->failed))
            return -EINVAL;
        snprintf(j->failed, sizeof(j->failed), "%s", v + m);
        return 0;
    }
    return job_key(j, key, v, seen) < 0 ? -EINVAL : 0;
}

int es_ctl_job_read(const char *sock, es_ctl_job_t *j, char *err, size_t errlen)
{
    char path[4200], line[512];
    int rc = -EINVAL, lineno = 0, ended = 0, nest = 0;
    unsigned seen = 0;
    es_ctl_job_paths(sock, path, NULL, sizeof(path));
    FILE *f = fopen(path, "re");
    memset(j, 0, sizeof(*j));
    if (!f) {
        rc = -errno;
        snprintf(err, errlen, "cannot read the job file %s: %s", path, strerror(errno));
        return rc;
    }
    for (int r = 0; r < ES_CTL_MAX_ESTS; r++)
        j->place[r] = -1;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t ll = strlen(line);
        if (!ll || line[ll - 1] != '\n' || ended)
            goto bad;
        line[--ll] = '\0';
        if (lineno == 1) {
            if (strcmp(line, JOB_MAGIC) != 0)
                goto bad;
            continue;
        }
        if (strcmp(line, "end") == 0)
            ended = 1;
        else if (job_line(j, line, &seen, &nest) < 0)
            goto bad;
    }
    if (!ended || seen != JOB_KEYS_ALL || nest != j->nests || j->ngpus == 0) {
        snprintf(err, errlen, "the job file %s is incomplete", path);
        goto out;
    }
    for (int r = 0; r < j->nests; r++)
        if (j->place[r] >= j->ngpus)
            goto bad;
    if (j->nnodes > 1 && j->nnodes * j->ests_per_node != j->nests) {
        snprintf(err, errlen, "the job file %s: %d nodes of %d ESTs are not its %d ESTs", path,
                 j->nnodes, j->ests_per_node, j->nests);
        goto out;
    }
    if (j->ngpus < 64 && (j->slots >> j->ngpus)) {
        snprintf(err, errlen, "the job file %s names a GPU it does not list", path);
        goto out;
    }
    rc = 0;
    goto out;
bad:
    snprintf(err, errlen, "the job file %s: bad line %d", path, lineno);
    rc = -EINVAL;
out:
    fclose(f);
    return rc;
}
