/* easyscale-ctl daemon: the job's state (controller/daemon_int.h): the job
 * file written back, the job's GPUs by name ("2", "1:0", a UUID) and by
 * mask, the GPU of an EST's slot, the measured per-EST step time per GPU
 * model and the speeds placement uses, the ESTs without heartbeat. Calls
 * controller/job.c, gpus.c and nodes.c; the other daemon files call it. */
#include "controller/daemon_int.h"

#include <stdio.h>
#include <string.h>

double dmn_gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

void dmn_persist(void)
{
    for (int r = 0; r < D.job.nests; r++) {
        if (D.ests[r].seen) {
            D.job.place[r] = D.ests[r].gpu;
            D.job.pids[r] = D.ests[r].pid;
        }
    }
    int rc = es_ctl_job_write(D.sock, &D.job);
    if (rc < 0)
        es_ctl_log("cannot write the job file: %s", strerror(-rc));
}

/* A GPU of node `node` (-1: any; node 0's come first) by ordinal ("2") or
 * UUID: its index, or -ENOENT / -EINVAL. */
int dmn_node_gpu_lookup(int node, const char *tok)
{
    return es_ctl_gpu_lookup_node(D.job.gpus, D.job.ngpus, node, tok);
}

/* The GPU (index in job.gpus) of an EST's slot: -1 host or unknown. An
 * EST of a job the shim time-slices (EASYSCALE_TIME_SLICE=on: `run` gave
 * it no slot) is on the job's one GPU, resident or parked in its turn. */
static int gpu_of_slot(const char *slot)
{
    if (!slot[0] && D.job.shim_time_slice && D.job.slots)
        return __builtin_ctzll(D.job.slots);
    if (!slot[0] || strcmp(slot, "host") == 0)
        return -1;
    int i = dmn_node_gpu_lookup(0, slot);
    return i < 0 ? -1 : i;
}

/* Whether rank r runs on another host than this daemon (node 0). */
int dmn_est_remote(int r)
{
    return D.job.nnodes > 1 && es_ctl_nodes_of_rank(&D.nodes, r) != 0;
}

/* The GPU of EST r's slot, among its node's GPUs (-1: parked, or a GPU
 * of another node not described yet). */
int dmn_est_gpu(int r)
{
    if (!dmn_est_remote(r))
        return gpu_of_slot(D.ests[r].slot);
    const char *slot = D.ests[r].slot;
    if (!slot[0] || strcmp(slot, "host") == 0)
        return -1;
    int g = dmn_node_gpu_lookup(es_ctl_nodes_of_rank(&D.nodes, r), slot);
    return g < 0 ? -1 : g;
}

/* "2" for node 0's GPU ordinal 2, "1:2" for node 1's. */
int dmn_gpu_name(int g, char *buf, size_t len)
{
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    return G->node ? snprintf(buf, len, "%d:%d", G->node, G->ordinal)
                   : snprintf(buf, len, "%d", G->ordinal);
}

void dmn_gpu_label(int g, char *buf, size_t len)
{
    if (g < 0)
        snprintf(buf, len, "host");
    else
        dmn_gpu_name(g, buf, len);
}

/* The GPUs of mask m by node, then ordinal ("0,1,1:0,1:1"), whatever the
 * order the daemon learnt another node's in. */
void dmn_mask_label(uint64_t m, char *buf, size_t len)
{
    int idx[ES_CTL_MAX_GPUS], n = 0;
    for (int g = 0; g < D.job.ngpus; g++) {
        const es_ctl_gpu_t *G = &D.job.gpus[g];
        int j = n++;
        for (; j > 0 && (D.job.gpus[idx[j - 1]].node > G->node ||
                         (D.job.gpus[idx[j - 1]].node == G->node &&
                          D.job.gpus[idx[j - 1]].ordinal > G->ordinal));
             j--)
            idx[j] = idx[j - 1];
        idx[j] = g;
    }
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        if (m & (1ull << idx[i])) {
            if (o)
                buf[o++] = ',';
            int k = o < len ? dmn_gpu_name(idx[i], buf + o, len - o) : 0;
            if (k > 0)
                o += (size_t)k;
        }
    if (o >= len)
        o = len - 1;
    buf[o] = '\0';
    if (!o)
        snprintf(buf, len, "none");
}

int dmn_on_gpu(int g)
{
    int n = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].gpu == g)
            n++;
    return n;
}

uint64_t *dmn_measured_for(const char *model, int create)
{
    for (int i = 0; i < D.nmeasured; i++)
        if (strcmp(D.measured[i].model, model) == 0)
            return &D.measured[i].ns;
    if (!create || D.nmeasured >= ES_CTL_MAX_GPUS || !model[0])
        return NULL;
    size_t ml = strnlen(model, sizeof(D.measured[0].model) - 1);
    memcpy(D.measured[D.nmeasured].model, model, ml);
    D.measured[D.nmeasured].model[ml] = '\0';
    D.measured[D.nmeasured].ns = 0;
    return &D.measured[D.nmeasured++].ns;
}

/* Per-EST step time for the GPUs of mask: measured per model when every
 * model there has a measurement (the shim reports time waited in
 * collectives), else the prior of every GPU (the units differ: never
 * mixed). */
int dmn_speeds(uint64_t mask, uint64_t *ns, const char **source)
{
    int all = 1;
    for (int g = 0; g < D.job.ngpus; g++) {
        if (!(mask & (1ull << g)))
            continue;
        uint64_t *m = dmn_measured_for(D.job.gpus[g].model, 0);
        if (!m || !*m)
            all = 0;
    }
    for (int g = 0; g < D.job.ngpus; g++) {
        uint64_t *m = dmn_measured_for(D.job.gpus[g].model, 0);
        ns[g] = all && m && *m ? *m : es_ctl_gpu_prior_ns(&D.job.gpus[g]);
    }
    *source = all ? "measured" : "prior";
    return all;
}

/* Flags (and logs, once) the ESTs without heartbeat for longer than the
 * job's bound; status and commands look at the flag. */
void dmn_check_unresponsive(int64_t now)
{
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        if (e->conn < 0 || e->unresponsive || (e->pending && !e->answered))
            continue;
        if (now - e->last_ms > D.job.hb_timeout_ms) {
            e->unresponsive = 1;
            es_ctl_log("EST %d (pid %d) is unresponsive: no heartbeat for %.1f s", r, (int)e->pid,
                       (now - e->last_ms) / 1000.0);
        }
    }
}
