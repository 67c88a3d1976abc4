/* easyscale-ctl daemon: the nodes of a job across hosts (job.nnodes > 1):
 * a node's `run` reports its state (controller/nodes.c keeps the table),
 * the GPUs those reports describe, the job's failure kept in the job file,
 * the requests refused across hosts. Called by daemon_ops.c and the tick;
 * calls daemon_state.c. */
#include "controller/daemon_int.h"

#include <stdio.h>

/* The job across hosts failed now: said, and kept in the job file (a
 * restarted daemon answers the nodes the same). */
void dmn_nodes_failed(void)
{
    es_ctl_log("the job failed: %s", D.nodes.reason);
    D.job.failed_node = D.nodes.failed_node;
    snprintf(D.job.failed, sizeof(D.job.failed), "%s", D.nodes.reason);
    dmn_persist();
}

/* A node's report described one of its GPUs: into the job's GPUs (after
 * node 0's, in the order learnt, kept in the job file), one of the job's
 * when the node's run has ESTs there; the node's ESTs' GPUs known again. */
static void node_gpu_learn(int node)
{
    es_ctl_node_t *d = &D.nodes.node[node];
    if (!d->gpu_new)
        return;
    d->gpu_new = 0;
    char o[16];
    snprintf(o, sizeof(o), "%d", d->gpu.ordinal);
    if (node == 0 || dmn_node_gpu_lookup(node, o) >= 0)
        return;
    if (D.job.ngpus >= ES_CTL_MAX_GPUS) {
        es_ctl_log("node %d's GPU %d not kept: the job knows %d GPUs already", node,
                   d->gpu.ordinal, D.job.ngpus);
        return;
    }
    int g = D.job.ngpus++;
    D.job.gpus[g] = d->gpu;
    D.job.gpus[g].node = node;
    if (d->gpu_injob)
        D.job.slots |= 1ull << g;
    es_ctl_log("node %d (host %s): GPU %d:%d, %s, %.1f GiB, %s", node, d->host, node,
               d->gpu.ordinal, d->gpu.uuid, dmn_gib(d->gpu.mem),
               d->gpu_injob ? "one of the job's" : "not the job's");
    for (int r = 0; r < D.job.nests; r++)
        if (es_ctl_nodes_of_rank(&D.nodes, r) == node && D.ests[r].seen)
            D.ests[r].gpu = dmn_est_gpu(r);
    dmn_persist();
}

/* NODE: a node's `run` reports its state; the answer is the job's
 * ("running E/N", "done E/N", "failed E/N REASON": nodes.c). */
void dmn_do_node(int i, uint32_t seq, int node, const char *arg)
{
    char err[512], ans[600];
    int64_t now = es_ctl_now_ms();
    if (D.job.nnodes <= 1) {
        dmn_refuse(i, seq, 2, "this job runs on one host (no node reports)");
        return;
    }
    int was_failed = D.nodes.failed;
    int rc = es_ctl_nodes_report(&D.nodes, node, arg, now, err, sizeof(err));
    if (rc < 0) {
        dmn_refuse(i, seq, 2, "%s", err);
        return;
    }
    if (!was_failed && D.nodes.failed)
        dmn_nodes_failed();
    node_gpu_learn(node);
    rc = es_ctl_nodes_answer(&D.nodes, now, ans, sizeof(ans));
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s", ans);
    dmn_reply_text(i, seq, rc, &b);
    es_ctl_buf_free(&b);
}

/* A request in a job across hosts. Migrations and scale events (preempt,
 * grant) act inside a host (est_target, do_scale; the ESTs move at a hold
 * of the whole job, where the hosts' leaders' NCCL communicator is made
 * again); scale (a whole GPU set) is refused with the reason, and so are
 * swap-out, swap-in and time-slicing unless the job's levels between the
 * hosts are in host memory (EASYSCALE_XHOST=host: a parked EST serves
 * them; the swap-in's GPU and the rotation's ESTs inside one host, checked
 * where they are named). Returns 1 when refused. */
int dmn_refuse_across_hosts(int i, uint32_t seq, uint32_t v)
{
    if (D.job.nnodes <= 1)
        return 0;
    if (v == ES_VERB_PREEMPT || v == ES_VERB_GRANT)
        return 0; /* do_scale places the ESTs of the GPU's node */
    if (v == ES_VERB_SCALE) {
        dmn_refuse(i, seq, 1, "scale: not in a job across %d hosts: preempt and grant take or give "
                   "one GPU of a host (NODE:ORDINAL, e.g. 1:0); nothing moved", D.job.nnodes);
        return 1;
    }
    if (v == ES_VERB_MIGRATE || D.job.xhost_host)
        return 0;
    dmn_refuse(i, seq, 1, "%s: not in a job across %d hosts whose collectives between the hosts "
               "are NCCL's (a parked EST cannot serve them: run the job with EASYSCALE_XHOST=host "
               "on every host, the levels between the hosts in host memory); migrations, preempt "
               "and grant are; nothing moved",
               v == ES_VERB_TIMESLICE ? "timeslice"
                                      : v == ES_VERB_SWAP_OUT ? "swap-out" : "swap-in",
               D.job.nnodes);
    return 1;
}
