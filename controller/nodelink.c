/* A node's link to the daemon of a job across hosts (`run --nnodes`): the
 * node reports its state every second (the NODE verb: running, done, or
 * failed with the reason; its host name and GPUs) and learns the job's
 * state from the answer (nodes.c writes it). A link without an answer for
 * the timeout counts as the job failed: node 0 is gone, or the network
 * between. A running or done report also describes one of the node's GPUs,
 * each in turn (the first round back to back), so that node 0's daemon
 * can move the node's ESTs between them. Driven by run's event loop
 * (es_ctl_nlink_step); never blocks. */
#include "controller/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NLINK_EVERY_MS 1000
#define NLINK_REQ_TIMEOUT_MS 5000

void es_ctl_nlink_init(es_ctl_nlink_t *l, const char *target, const char *token, int node,
                       const char *host, const char *gpus, int timeout_ms, int64_t now)
{
    memset(l, 0, sizeof(*l));
    l->req.fd = -1;
    snprintf(l->target, sizeof(l->target), "%s", target);
    snprintf(l->token, sizeof(l->token), "%s", token ? token : "");
    snprintf(l->host, sizeof(l->host), "%s", host);
    snprintf(l->gpus, sizeof(l->gpus), "%s", gpus);
    l->node = node;
    l->timeout_ms = timeout_ms;
    l->last_ok_ms = now;
    l->job = ES_NODE_RUNNING;
}

void es_ctl_nlink_set(es_ctl_nlink_t *l, int state, const char *reason)
{
    if (l->state == state)
        return;
    l->state = state;
    snprintf(l->reason, sizeof(l->reason), "%s", reason ? reason : "");
    l->told = 0;
    l->next_ms = 0; /* report it now */
}

int es_ctl_nlink_add_gpu(es_ctl_nlink_t *l, int index, int count, const es_ctl_gpu_t *g,
                         int injob)
{
    if (l->ngpu >= ES_CTL_MAX_GPUS)
        return -ENOSPC;
    int n = snprintf(l->gpu[l->ngpu], sizeof(l->gpu[0]), "gpu=%d/%d,%d,%llu,%s,%d,%s", index,
                     count, g->ordinal, (unsigned long long)(g->mem >> 20),
                     g->model[0] ? g->model : "-", injob ? 1 : 0, g->uuid);
    if (n < 0 || (size_t)n >= sizeof(l->gpu[0]))
        return -ENOSPC;
    l->ngpu++;
    return 0;
}

/* The answer "STATE E/N [REASON]" into the link. */
static void take_answer(es_ctl_nlink_t *l, int rc, const char *t, size_t len, int64_t now)
{
    char a[560], st[16];
    int e = 0, n = 0, m = 0;
    snprintf(a, sizeof(a), "%.*s", (int)(len < sizeof(a) - 1 ? len : sizeof(a) - 1), t);
    if (sscanf(a, "%15s %d/%d %n", st, &e, &n, &m) < 3) {
        /* a refusal (rc 2: a bad report, another host holding this node) */
        snprintf(l->job_reason, sizeof(l->job_reason), "the job's controller refused this node's "
                 "report: %s", a);
        l->job = ES_NODE_FAILED;
        l->lost = 1;
        return;
    }
    l->last_ok_ms = now;
    l->ended = e;
    l->n = n;
    /* an answer to an earlier state's report (in flight when the state
     * changed) does not tell the daemon the new one */
    l->told = l->sent_state == l->state;
    if (rc == 1 || strcmp(st, "failed") == 0) {
        l->job = ES_NODE_FAILED;
        snprintf(l->job_reason, sizeof(l->job_reason), "%s", m ? a + m : "");
    } else if (strcmp(st, "done") == 0) {
        l->job = ES_NODE_DONE;
    }
}

int es_ctl_nlink_fd(const es_ctl_nlink_t *l)
{
    return l->req.fd;
}

int es_ctl_nlink_step(es_ctl_nlink_t *l, int64_t now)
{
    int before = l->job;
    if (l->req.fd >= 0) {
        int rc;
        const char *t;
        size_t len;
        int r = es_ctl_areq_poll(&l->req, &rc, &t, &len);
        if (r == 1)
            take_answer(l, rc, t, len, now);
        if (r == 1 && l->gpu_sent) /* the daemon has it: the next one */
            l->next_gpu++;
        if (r == 1 && l->next_gpu < l->ngpu)
            l->next_ms = now; /* the first round of GPUs back to back */
        if (r != 0)
            es_ctl_areq_close(&l->req);
    } else if (now >= l->next_ms && !l->lost) {
        char arg[600]; /* the request keeps ES_PROTO_ARG_MAX bytes of it */
        const char *tail = l->reason;
        l->gpu_sent = l->state != ES_NODE_FAILED && l->ngpu;
        l->sent_state = l->state;
        if (l->gpu_sent) /* a GPU in turn, again until answered */
            tail = l->gpu[l->next_gpu % l->ngpu];
        snprintf(arg, sizeof(arg), "%s %s %s%s%s", es_ctl_node_state_name(l->state), l->host,
                 l->gpus, tail[0] ? " " : "", tail);
        l->next_ms = now + NLINK_EVERY_MS;
        if (es_ctl_areq_start(&l->req, l->target, l->token[0] ? l->token : NULL, ES_VERB_NODE,
                              l->node, arg, 0, NLINK_REQ_TIMEOUT_MS) < 0)
            es_ctl_areq_close(&l->req); /* again in a second */
    }
    if (l->timeout_ms > 0 && !l->lost && l->job != ES_NODE_FAILED &&
        now - l->last_ok_ms > l->timeout_ms) {
        l->lost = 1;
        l->job = ES_NODE_FAILED;
        snprintf(l->job_reason, sizeof(l->job_reason), "no answer from the job's controller at "
                 "%s in %.1f s: node 0 is gone, or the network to it", l->target,
                 (now - l->last_ok_ms) / 1000.0);
    }
    return l->job != before;
}

void es_ctl_nlink_free(es_ctl_nlink_t *l)
{
    es_ctl_areq_free(&l->req);
}
