/* The job file beside the socket (SOCKET.job): what `run` decided (ESTs,
 * determinism, the machine's GPUs, the job's GPUs, the planned placement,
 * the processes it started) and what the daemon changed since (slots,
 * epoch). A restarted daemon reads it and re-learns everything else (pids,
 * slots, steps, states) from the ESTs' registrations.
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
                      "time_slicing %d\nheartbeat_timeout_ms %d\nmove_timeout_ms %d\ntcp %s\n"
                      "epoch %llu\nslots %llu\n",
                      JOB_MAGIC, j->nests, es_ctl_level_name(j->determinism),
                      j->canonical[0] ? j->canonical : "-",
                      (unsigned long long)j->est_mem, j->time_slicing, j->hb_timeout_ms,
                      j->move_timeout_ms, j->tcp[0] ? j->tcp : "-", (unsigned long long)j->epoch,
                      (unsigned long long)j->slots);
    for (int i = 0; i < j->ngpus; i++) {
        const es_ctl_gpu_t *g = &j->gpus[i];
        es_ctl_buf_printf(&b, "gpu %d %s %llu %d %d %d %d %s %s\n", g->ordinal, g->uuid,
                          (unsigned long long)g->mem, g->sms, g->clock_khz, g->cc_major,
                          g->cc_minor, g->model[0] ? g->model : "-", g->name);
    }
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
        if (!ll || line[ll - 1] != '\n')
            goto bad;
        line[--ll] = '\0';
        if (ended)
            goto bad;
        if (lineno == 1) {
            if (strcmp(line, JOB_MAGIC) != 0)
                goto bad;
            continue;
        }
        char key[32], w[256];
        unsigned long long u;
        int n = 0, a, b2, c;
        if (strcmp(line, "end") == 0) {
            ended = 1;
            continue;
        }
        if (sscanf(line, "%31s %n", key, &n) != 1)
            goto bad;
        const char *v = line + n;
#define ONCE(bit)                                                                           \
    do {                                                                                    \
        if (seen & (1u << (bit)))                                                           \
            goto bad;                                                                       \
        seen |= 1u << (bit);                                                                \
    } while (0)
        if (strcmp(key, "ests") == 0) {
            long x;
            ONCE(0);
            if (es_ctl_parse_long(v, 1, ES_CTL_MAX_ESTS, &x) < 0)
                goto bad;
            j->nests = (int)x;
        } else if (strcmp(key, "determinism") == 0) {
            ONCE(1);
            if (strcmp(v, "d1") == 0)
                j->determinism = 1;
            else if (strcmp(v, "d2") == 0)
                j->determinism = 2;
            else if (strcmp(v, "off") == 0)
                j->determinism = 0;
            else
                goto bad;
        } else if (strcmp(key, "canonical") == 0) {
            ONCE(2);
            if (!word_ok(v, sizeof(j->canonical)))
                goto bad;
            if (strcmp(v, "-") != 0)
                strcpy(j->canonical, v);
        } else if (strcmp(key, "est_memory") == 0) {
            ONCE(3);
            if (es_ctl_parse_size(v, &j->est_mem) < 0 && strcmp(v, "0") != 0)
                goto bad;
        } else if (strcmp(key, "time_slicing") == 0) {
            long x;
            ONCE(4);
            if (es_ctl_parse_long(v, 0, 1, &x) < 0)
                goto bad;
            j->time_slicing = (int)x;
        } else if (strcmp(key, "heartbeat_timeout_ms") == 0) {
            long x;
            ONCE(5);
            if (es_ctl_parse_long(v, 100, 3600000, &x) < 0)
                goto bad;
            j->hb_timeout_ms = (int)x;
        } else if (strcmp(key, "move_timeout_ms") == 0) {
            long x;
            ONCE(6);
            if (es_ctl_parse_long(v, 100, 86400000, &x) < 0)
                goto bad;
            j->move_timeout_ms = (int)x;
        } else if (strcmp(key, "tcp") == 0) {
            ONCE(7);
            if (!word_ok(v, sizeof(j->tcp)))
                goto bad;
            if (strcmp(v, "-") != 0)
                strcpy(j->tcp, v);
        } else if (strcmp(key, "epoch") == 0) {
            ONCE(8);
            char *end;
            errno = 0;
            u = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-')
                goto bad;
            j->epoch = u;
        } else if (strcmp(key, "slots") == 0) {
            ONCE(9);
            char *end;
            errno = 0;
            u = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-')
                goto bad;
            j->slots = u;
        } else if (strcmp(key, "gpu") == 0) {
            es_ctl_gpu_t *g;
            char model[16];
            int m = 0;
            if (j->ngpus >= ES_CTL_MAX_GPUS)
                goto bad;
            g = &j->gpus[j->ngpus];
            if (sscanf(v, "%d %47s %llu %d %d %d %d %15s %n", &g->ordinal, g->uuid, &u, &g->sms,
                       &g->clock_khz, &g->cc_major, &g->cc_minor, model, &m) != 8 || !v[m] ||
                g->ordinal < 0 || strncmp(g->uuid, "GPU-", 4) != 0 || !u)
                goto bad;
            g->mem = u;
            snprintf(g->model, sizeof(g->model), "%s", strcmp(model, "-") ? model : "");
            snprintf(g->name, sizeof(g->name), "%s", v + m);
            j->ngpus++;
        } else if (strcmp(key, "est") == 0) {
            int m = 0;
            if (sscanf(v, "%d %d %d%n", &a, &b2, &c, &m) != 3 || v[m] || a != nest ||
                a >= ES_CTL_MAX_ESTS || b2 < -1 || b2 >= ES_CTL_MAX_GPUS || c < 0)
                goto bad;
            j->place[a] = b2;
            j->pids[a] = c;
            nest++;
        } else {
            goto bad;
        }
        (void)w;
#undef ONCE
    }
    if (!ended || seen != 0x3ffu || nest != j->nests || j->ngpus == 0) {
        snprintf(err, errlen, "the job file %s is incomplete", path);
        goto out;
    }
    for (int r = 0; r < j->nests; r++)
        if (j->place[r] >= j->ngpus)
            goto bad;
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
