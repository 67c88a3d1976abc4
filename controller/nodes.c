/* The hosts of a job across hosts, as the daemon on node 0 sees them: each
 * node's `run` reports every second (the NODE verb: its state, host name
 * and GPUs) and is answered with the job's state. A node that fails (one of
 * its ESTs failed), goes silent longer than the timeout, or never joins
 * within the join timeout fails the job; every node learns it at its next
 * report and stops its ESTs. Pure: the caller passes the time, and the
 * daemon keeps the table (a restarted daemon re-learns it from the next
 * reports). Calls nothing of the controller but its small utilities. */
#include "controller/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void es_ctl_nodes_init(es_ctl_nodes_t *t, int n, int k, int timeout_ms, int join_ms, int64_t now)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->k = k;
    t->timeout_ms = timeout_ms;
    t->join_ms = join_ms;
    t->start_ms = now;
}

int es_ctl_nodes_of_rank(const es_ctl_nodes_t *t, int rank)
{
    return t->k > 0 && rank >= 0 ? rank / t->k : 0;
}

static int word_ok(const char *s, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= 0x20 || s[i] >= 0x7f)
            return 0;
    return 1;
}

static const char *const state_names[] = { "running", "done", "failed" };

/* "gpu=I/N,ORDINAL,MIB,MODEL,INJOB,UUID" into *g (GPU I of N, one of the
 * job's or not). Returns 0 or -EINVAL. */
static int parse_gpu(const char *w, es_ctl_gpu_t *g, int *index, int *count, int *injob)
{
    int ord, m = 0;
    unsigned long long mib;
    char model[16];
    memset(g, 0, sizeof(*g));
    if (sscanf(w, "gpu=%d/%d,%d,%llu,%15[^,],%d,%47s%n", index, count, &ord, &mib, model, injob,
               g->uuid, &m) != 7 || w[m] || *count < 1 || *count > ES_CTL_MAX_GPUS ||
        *index < 0 || *index >= *count || ord < 0 || !mib || mib > (1ull << 30) ||
        (*injob != 0 && *injob != 1) || strncmp(g->uuid, "GPU-", 4) != 0 || !g->uuid[4] ||
        strspn(g->uuid + 4, "0123456789abcdefABCDEF-") != strlen(g->uuid + 4))
        return -EINVAL;
    g->ordinal = ord;
    g->mem = mib << 20;
    snprintf(g->model, sizeof(g->model), "%s", strcmp(model, "-") ? model : "");
    snprintf(g->name, sizeof(g->name), "%s", g->model[0] ? g->model : "GPU");
    return 0;
}

/* "STATE HOST GPUS [REASON...]" into its words. Returns 0 or -EINVAL. */
static int parse_report(const char *arg, int *state, char *host, size_t hl, char *gpus, size_t gl,
                        const char **reason)
{
    const char *w[3];
    size_t wl[3];
    const char *p = arg;
    for (int i = 0; i < 3; i++) {
        if (i && *p++ != ' ')
            return -EINVAL;
        w[i] = p;
        while (*p && *p != ' ')
            p++;
        wl[i] = (size_t)(p - w[i]);
        if (!word_ok(w[i], wl[i]))
            return -EINVAL;
    }
    *state = -1;
    for (int s = 0; s < 3; s++)
        if (strlen(state_names[s]) == wl[0] && !memcmp(w[0], state_names[s], wl[0]))
            *state = s;
    if (*state < 0 || wl[1] >= hl || wl[2] >= gl)
        return -EINVAL;
    memcpy(host, w[1], wl[1]);
    host[wl[1]] = '\0';
    memcpy(gpus, w[2], wl[2]);
    gpus[wl[2]] = '\0';
    if (*p == ' ' && !p[1])
        return -EINVAL; /* a space, then no reason */
    *reason = *p == ' ' ? p + 1 : "";
    if (*state == ES_NODE_FAILED && !**reason)
        return -EINVAL;
    if (*state != ES_NODE_FAILED && **reason && strncmp(*reason, "gpu=", 4) != 0)
        return -EINVAL; /* running and done: at most a GPU's description */
    return 0;
}

static void fail_job(es_ctl_nodes_t *t, int node, const char *fmt, const char *a)
{
    if (t->failed)
        return;
    t->failed = 1;
    t->failed_node = node;
    const es_ctl_node_t *d = &t->node[node];
    int o = snprintf(t->reason, sizeof(t->reason), "host %s (node %d): ", d->seen ? d->host : "?",
                     node);
    if (o > 0 && (size_t)o < sizeof(t->reason))
        snprintf(t->reason + o, sizeof(t->reason) - (size_t)o, fmt, a);
}

int es_ctl_nodes_report(es_ctl_nodes_t *t, int node, const char *arg, int64_t now, char *err,
                        size_t len)
{
    int state;
    char host[sizeof(t->node[0].host)], gpus[sizeof(t->node[0].gpus)];
    const char *reason;
    if (node < 0 || node >= t->n) {
        snprintf(err, len, "no node %d: this job has %d (0..%d)", node, t->n, t->n - 1);
        return -EINVAL;
    }
    if (parse_report(arg, &state, host, sizeof(host), gpus, sizeof(gpus), &reason) < 0) {
        snprintf(err, len, "bad node report \"%s\" (STATE HOST GPUS [REASON])", arg);
        return -EINVAL;
    }
    es_ctl_node_t *d = &t->node[node];
    es_ctl_gpu_t g;
    int gi = 0, gn = 0, gin = 0, described = state != ES_NODE_FAILED && *reason;
    if (described && parse_gpu(reason, &g, &gi, &gn, &gin) < 0) {
        snprintf(err, len, "bad node report \"%s\" (a GPU: gpu=I/N,ORDINAL,MIB,MODEL,INJOB,"
                 "UUID)", arg);
        return -EINVAL;
    }
    if (d->seen && strcmp(d->host, host) != 0 && d->state == ES_NODE_RUNNING &&
        now - d->last_ms < t->timeout_ms) {
        snprintf(err, len, "node %d is host %s, heard %.1f s ago; host %s says it is node %d too",
                 node, d->host, (now - d->last_ms) / 1000.0, host, node);
        return -EEXIST;
    }
    d->seen = 1;
    d->last_ms = now;
    d->state = state;
    snprintf(d->host, sizeof(d->host), "%s", host);
    snprintf(d->gpus, sizeof(d->gpus), "%s", gpus);
    snprintf(d->reason, sizeof(d->reason), "%s", described ? "" : reason);
    if (described) {
        d->gpu = g;
        d->gpu_index = gi;
        d->gpu_count = gn;
        d->gpu_injob = gin;
        d->gpu_new = 1;
    }
    if (state == ES_NODE_FAILED)
        fail_job(t, node, "%s", reason);
    return 0;
}

void es_ctl_nodes_restore_failed(es_ctl_nodes_t *t, int node, const char *reason)
{
    if (node < 0 || node >= t->n || !reason[0])
        return;
    t->failed = 1;
    t->failed_node = node;
    snprintf(t->reason, sizeof(t->reason), "%s", reason);
    if (!t->node[node].seen) { /* it will not report again: it ended */
        t->node[node].seen = 1;
        t->node[node].state = ES_NODE_FAILED;
    }
}

int es_ctl_nodes_tick(es_ctl_nodes_t *t, int64_t now)
{
    char b[96];
    if (t->failed)
        return 0;
    for (int i = 0; i < t->n; i++) {
        const es_ctl_node_t *d = &t->node[i];
        if (d->seen && d->state == ES_NODE_RUNNING && now - d->last_ms > t->timeout_ms) {
            snprintf(b, sizeof(b), "%.1f s", (now - d->last_ms) / 1000.0);
            fail_job(t, i, "gone: no word from it in %s", b);
            return 1;
        }
        if (!d->seen && now - t->start_ms > t->join_ms) {
            snprintf(b, sizeof(b), "%.1f s", t->join_ms / 1000.0);
            fail_job(t, i, "never joined: no word from it in %s", b);
            return 1;
        }
    }
    return 0;
}

/* A node that will not report again: done, failed, or silent (the tick
 * failed the job for it). */
static int node_ended(const es_ctl_nodes_t *t, int i, int64_t now)
{
    const es_ctl_node_t *d = &t->node[i];
    if (!d->seen)
        return t->failed && now - t->start_ms > t->join_ms;
    return d->state != ES_NODE_RUNNING || (t->failed && now - d->last_ms > t->timeout_ms);
}

int es_ctl_nodes_answer(const es_ctl_nodes_t *t, int64_t now, char *buf, size_t len)
{
    int ended = 0, done = 0;
    for (int i = 0; i < t->n; i++) {
        ended += node_ended(t, i, now);
        done += t->node[i].seen && t->node[i].state == ES_NODE_DONE;
    }
    if (t->failed) {
        snprintf(buf, len, "failed %d/%d %s", ended, t->n, t->reason);
        return 1;
    }
    snprintf(buf, len, "%s %d/%d", done == t->n ? "done" : "running", ended, t->n);
    return 0;
}

const char *es_ctl_node_state_name(int state)
{
    return state >= 0 && state < 3 ? state_names[state] : "?";
}
