/* easyscale-ctl daemon: the answers to status (the job, its ESTs, its
 * GPUs and, across hosts, its nodes; text or JSON) and to progress (run's
 * poll of the steps and the placement). Changes nothing; calls
 * daemon_state.c's labels and speeds. */
#include "controller/daemon_int.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *est_state(const est_t *e)
{
    if (!e->seen)
        return "not-registered";
    if (e->conn < 0)
        return "disconnected";
    if (e->pending && !e->answered)
        return "moving";
    if (e->unresponsive)
        return "unresponsive";
    if (e->ts)
        return "time-sliced";
    if (e->state == ES_EST_SWAPPED_OUT)
        return "swapped-out";
    return e->held ? "held" : "running";
}

/* Where an EST's device memory is, as its last heartbeat said (not known
 * for an EST not connected now). */
static uint32_t est_where(const est_t *e)
{
    return e->seen && e->conn >= 0 ? e->where : ES_WHERE_UNKNOWN;
}

static const char *where_name(uint32_t w)
{
    return w == ES_WHERE_RESIDENT ? "resident" : w == ES_WHERE_PARKED ? "parked" : "unknown";
}

/* "512 B", "3.5 MiB", "1.50 GiB". */
static void size_label(uint64_t b, char *buf, size_t len)
{
    if (b < (1ull << 20))
        snprintf(buf, len, "%llu B", (unsigned long long)b);
    else if (b < (1ull << 30))
        snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
    else
        snprintf(buf, len, "%.2f GiB", dmn_gib(b));
}

/* status: the job's line(s) (JSON: the "job" object), then the ESTs'
 * table's header. */
static void status_job(es_ctl_buf_t *b, int json, int64_t now, const char *source)
{
    char slots[512];
    int reg = 0;
    dmn_mask_label(D.job.slots, slots, sizeof(slots));
    for (int r = 0; r < D.job.nests; r++)
        reg += D.ests[r].seen && D.ests[r].conn >= 0;
    if (json) {
        es_ctl_buf_printf(b, "{\"job\":{\"socket\":");
        es_ctl_buf_json_str(b, D.sock);
        es_ctl_buf_printf(b, ",\"daemon_pid\":%d,\"ests\":%d,\"registered\":%d,"
                          "\"determinism\":\"%s\",\"canonical\":",
                          (int)getpid(), D.job.nests, reg, es_ctl_level_name(D.job.determinism));
        es_ctl_buf_json_str(b, D.job.canonical);
        es_ctl_buf_printf(b, ",\"epoch\":%llu,\"gpus\":\"%s\",\"est_memory\":%llu,"
                          "\"time_slicing\":%s,\"heartbeat_timeout_ms\":%d,\"tcp\":",
                          (unsigned long long)D.job.epoch, slots,
                          (unsigned long long)D.job.est_mem, D.job.time_slicing ? "true" : "false",
                          D.job.hb_timeout_ms);
        es_ctl_buf_json_str(b, D.tcp_bound);
        es_ctl_buf_printf(b, ",\"speed_source\":\"%s\",\"busy\":%s,\"shim_time_slice\":%s,"
                          "\"rotation\":", source, D.op.active ? "true" : "false",
                          D.job.shim_time_slice ? "true" : "false");
        if (D.ts.active) {
            es_ctl_buf_printf(b, "{\"gpu\":%d,\"ranks\":[", D.job.gpus[D.ts.gpu].ordinal);
            for (int k = 0; k < D.ts.n; k++)
                es_ctl_buf_printf(b, "%s%d", k ? "," : "", D.ts.ranks[k]);
            es_ctl_buf_printf(b, "]}");
        } else {
            es_ctl_buf_printf(b, "null");
        }
        es_ctl_buf_printf(b, "},\"ests\":[");
    } else {
        es_ctl_buf_printf(b, "job %s: %d ESTs (%d registered), %s%s%s, GPUs %s, epoch %llu, "
                          "controller pid %d\n", D.sock, D.job.nests, reg,
                          es_ctl_level_name(D.job.determinism),
                          D.job.canonical[0] ? " canonical " : "", D.job.canonical, slots,
                          (unsigned long long)D.job.epoch, (int)getpid());
        if (D.job.shim_time_slice)
            es_ctl_buf_printf(b, "time-sliced by the shim (EASYSCALE_TIME_SLICE): every EST "
                              "takes turns on GPU %s\n", slots);
        if (D.op.active)
            es_ctl_buf_printf(b, "in progress: %s (%.1f s)\n", D.op.what,
                              (now - D.op.start_ms) / 1000.0);
        es_ctl_buf_printf(b, "%-5s %-8s %-5s %-10s %-15s %-12s %s\n", "rank", "pid", "gpu",
                          "step", "state", "step time", "last heard");
    }
}

/* status --json: an EST's time-slicing figures (fields of its object). */
static void status_est_ts_json(es_ctl_buf_t *b, const est_t *e)
{
    es_ctl_buf_printf(b, "\"where\":\"%s\",\"yields\":%llu,\"swaps_out\":%llu,"
                      "\"swaps_in\":%llu,\"bytes_out\":%llu,\"bytes_in\":%llu",
                      where_name(est_where(e)), (unsigned long long)e->yields,
                      (unsigned long long)e->swaps_out, (unsigned long long)e->swaps_in,
                      (unsigned long long)e->bytes_out, (unsigned long long)e->bytes_in);
}

/* status (human): the ESTs' time-slicing table, one line per EST. */
static void status_ests_ts_text(es_ctl_buf_t *b)
{
    es_ctl_buf_printf(b, "%-5s %-9s %-10s %-17s %s\n", "rank", "memory", "yields",
                      "swaps out/in", "bytes out/in");
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        uint32_t w = est_where(e);
        char swaps[48], out[24], in[24];
        snprintf(swaps, sizeof(swaps), "%llu/%llu", (unsigned long long)e->swaps_out,
                 (unsigned long long)e->swaps_in);
        size_label(e->bytes_out, out, sizeof(out));
        size_label(e->bytes_in, in, sizeof(in));
        es_ctl_buf_printf(b, "%-5d %-9s %-10llu %-17s %s/%s\n", r,
                          w == ES_WHERE_UNKNOWN ? "-" : where_name(w),
                          (unsigned long long)e->yields, swaps, out, in);
    }
}

/* status: one line (JSON: object) per EST. */
static void status_ests(es_ctl_buf_t *b, int json, int64_t now)
{
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        char g[16];
        int gpu = e->seen ? e->gpu : D.job.place[r];
        pid_t pid = e->seen ? e->pid : D.job.pids[r];
        dmn_gpu_label(gpu, g, sizeof(g));
        if (!e->seen && gpu < 0)
            snprintf(g, sizeof(g), "?");
        if (dmn_est_remote(r) && gpu < 0) /* a GPU of its node's host, not described yet */
            snprintf(g, sizeof(g), "n%d", es_ctl_nodes_of_rank(&D.nodes, r));
        int num = gpu >= 0 && D.job.gpus[gpu].node == 0; /* else a string: "1:0", "host" */
        double ago = e->seen ? (now - e->last_ms) / 1000.0 : -1;
        if (json) {
            es_ctl_buf_printf(b, "%s{\"rank\":%d,\"pid\":%d,\"gpu\":%s%s%s,\"slot\":", r ? "," : "",
                              r, (int)pid, num ? "" : "\"", g, num ? "" : "\"");
            es_ctl_buf_json_str(b, e->slot);
            es_ctl_buf_printf(b, ",\"host\":");
            es_ctl_buf_json_str(b, e->host);
            es_ctl_buf_printf(b, ",\"step\":%llu,\"state\":\"%s\",\"step_time_ms\":%.3f,"
                              "\"memory\":%llu,\"epoch\":%llu,\"last_heard_s\":%.3f,",
                              (unsigned long long)e->step, est_state(e), e->step_time_ns / 1e6,
                              (unsigned long long)e->mem, (unsigned long long)e->epoch, ago);
            status_est_ts_json(b, e);
            es_ctl_buf_printf(b, ",\"held_at\":");
            if (e->held)
                es_ctl_buf_printf(b, "%llu}", (unsigned long long)(e->held - 1));
            else
                es_ctl_buf_printf(b, "null}");
        } else {
            char last[32] = "-", st[32] = "-";
            if (e->seen)
                snprintf(last, sizeof(last), "%.1f s ago", ago);
            if (e->step_time_ns)
                snprintf(st, sizeof(st), "%.2f ms", e->step_time_ns / 1e6);
            es_ctl_buf_printf(b, "%-5d %-8d %-5s %-10llu %-15s %-12s %s\n", r, (int)pid, g,
                              (unsigned long long)e->step, est_state(e), st, last);
        }
    }
}

/* A GPU's ESTs for status: all placed there, those resident on it now and
 * those parked in host memory (as their heartbeats say), their mean
 * speed, and the bytes they swapped out and in. */
typedef struct gpu_ests {
    char all[4096], resident[4096], parked[4096]; /* "0,2" */
    int n, nrate;
    double rate;
    uint64_t bytes_out, bytes_in;
} gpu_ests_t;

/* Appends ",r" (or "r") to list when it fits whole (a list too long for
 * it ends at its last whole rank). */
static void list_add(char *list, size_t len, int r)
{
    char item[16];
    size_t o = strlen(list);
    int k = snprintf(item, sizeof(item), "%s%d", o ? "," : "", r);
    if (k > 0 && o + (size_t)k < len)
        memcpy(list + o, item, (size_t)k + 1);
}

static void gpu_ests(int g, gpu_ests_t *x)
{
    memset(x, 0, sizeof(*x));
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        if ((e->seen ? e->gpu : D.job.place[r]) != g)
            continue;
        x->n++;
        list_add(x->all, sizeof(x->all), r);
        uint32_t w = est_where(e);
        if (w == ES_WHERE_RESIDENT)
            list_add(x->resident, sizeof(x->resident), r);
        else if (w == ES_WHERE_PARKED)
            list_add(x->parked, sizeof(x->parked), r);
        x->bytes_out += e->bytes_out;
        x->bytes_in += e->bytes_in;
        if (e->step_time_ns) {
            x->rate += 1e9 / (double)e->step_time_ns;
            x->nrate++;
        }
    }
}

static void status_gpu_json(es_ctl_buf_t *b, int g, int first, const gpu_ests_t *x, double sps,
                            uint64_t ns)
{
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    int in = !!(D.job.slots & (1ull << g));
    es_ctl_buf_printf(b, "%s{\"gpu\":%d,\"node\":%d,\"uuid\":", first ? "" : ",", G->ordinal,
                      G->node);
    es_ctl_buf_json_str(b, G->uuid);
    es_ctl_buf_printf(b, ",\"model\":");
    es_ctl_buf_json_str(b, G->model);
    es_ctl_buf_printf(b, ",\"name\":");
    es_ctl_buf_json_str(b, G->name);
    es_ctl_buf_printf(b, ",\"memory\":%llu,\"in_job\":%s,\"ests\":[%s],"
                      "\"steps_per_s\":%.3f,\"est_step_ns\":%llu,\"resident\":[%s],"
                      "\"parked\":[%s],\"bytes_out\":%llu,\"bytes_in\":%llu,"
                      "\"bytes_swapped\":%llu}",
                      (unsigned long long)G->mem, in ? "true" : "false", x->all, sps,
                      (unsigned long long)ns, x->resident, x->parked,
                      (unsigned long long)x->bytes_out, (unsigned long long)x->bytes_in,
                      (unsigned long long)(x->bytes_out + x->bytes_in));
}

/* status (human): a GPU's line, then (with ESTs there) who is resident,
 * who is parked and what they swapped. */
static void status_gpu_text(es_ctl_buf_t *b, int g, const gpu_ests_t *x, double sps, uint64_t ns,
                            const char *source)
{
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    int in = !!(D.job.slots & (1ull << g));
    char mem[32], rs[32], sum[24], out[24], inb[24], name[16];
    snprintf(mem, sizeof(mem), "%.1f GiB", dmn_gib(G->mem));
    snprintf(rs, sizeof(rs), x->nrate ? "%.2f" : "-", sps);
    dmn_gpu_name(g, name, sizeof(name));
    es_ctl_buf_printf(b, "%-5s %-6s %-10s %-4s %-16s %-14s %.3f ms (%s)\n", name,
                      G->model[0] ? G->model : "?", mem, in ? "yes" : "no",
                      x->n ? x->all : "-", rs, ns / 1e6, source);
    if (!x->n)
        return;
    size_label(x->bytes_out + x->bytes_in, sum, sizeof(sum));
    size_label(x->bytes_out, out, sizeof(out));
    size_label(x->bytes_in, inb, sizeof(inb));
    es_ctl_buf_printf(b, "      resident: %s%s; parked: %s%s; swapped %s (%s out, %s in)\n",
                      x->resident[0] ? "ranks " : "none", x->resident,
                      x->parked[0] ? "ranks " : "none", x->parked, sum, out, inb);
}

/* status: one line (JSON: object) per GPU of the job or with ESTs on it,
 * with its measured speed and the per-EST step time placement uses (ns). */
static void status_gpus(es_ctl_buf_t *b, int json, const uint64_t *ns, const char *source)
{
    if (json)
        es_ctl_buf_printf(b, "],\"slots\":[");
    else
        es_ctl_buf_printf(b, "%-5s %-6s %-10s %-4s %-16s %-14s %s\n", "gpu", "model", "memory",
                          "job", "ESTs", "steps/s", "est. EST step");
    int first = 1;
    for (int g = 0; g < D.job.ngpus; g++) {
        gpu_ests_t x;
        gpu_ests(g, &x);
        if (!(D.job.slots & (1ull << g)) && !x.n)
            continue;
        double sps = x.nrate ? x.rate / x.nrate : 0;
        if (json)
            status_gpu_json(b, g, first, &x, sps, ns[g]);
        else
            status_gpu_text(b, g, &x, sps, ns[g], source);
        first = 0;
    }
}

/* status: the nodes of a job across hosts. */
static void status_nodes(es_ctl_buf_t *b, int json, int64_t now)
{
    const es_ctl_nodes_t *t = &D.nodes;
    if (json) { /* the slots' array ends; the nodes' is closed by the caller */
        es_ctl_buf_printf(b, "],\"failed\":");
        if (t->failed)
            es_ctl_buf_json_str(b, t->reason);
        else
            es_ctl_buf_printf(b, "null");
        es_ctl_buf_printf(b, ",\"nodes\":[");
        for (int n = 0; n < t->n; n++) {
            const es_ctl_node_t *d = &t->node[n];
            es_ctl_buf_printf(b, "%s{\"node\":%d,\"host\":", n ? "," : "", n);
            es_ctl_buf_json_str(b, d->seen ? d->host : "");
            es_ctl_buf_printf(b, ",\"gpus\":");
            es_ctl_buf_json_str(b, d->seen ? d->gpus : "");
            es_ctl_buf_printf(b, ",\"ranks\":[%d,%d],\"state\":\"%s\",\"last_heard_s\":%.3f}",
                              n * t->k, n * t->k + t->k - 1,
                              d->seen ? es_ctl_node_state_name(d->state) : "unknown",
                              d->seen ? (now - d->last_ms) / 1000.0 : -1.0);
        }
        return;
    }
    es_ctl_buf_printf(b, "hosts: %d nodes of %d ESTs (node 0 runs this controller)%s%s\n", t->n,
                      t->k, t->failed ? "; the job failed: " : "", t->failed ? t->reason : "");
    for (int n = 0; n < t->n; n++) {
        const es_ctl_node_t *d = &t->node[n];
        char heard[32] = "never heard";
        if (d->seen)
            snprintf(heard, sizeof(heard), "heard %.1f s ago", (now - d->last_ms) / 1000.0);
        es_ctl_buf_printf(b, "node %d: host %s, ranks %d-%d, GPUs %s, %s, %s\n", n,
                          d->seen ? d->host : "?", n * t->k, n * t->k + t->k - 1,
                          d->seen ? d->gpus : "?", d->seen ? es_ctl_node_state_name(d->state) :
                          "unknown", heard);
    }
}

void dmn_status_text(es_ctl_buf_t *b, int json)
{
    int64_t now = es_ctl_now_ms();
    uint64_t ns[ES_CTL_MAX_GPUS];
    const char *source;
    dmn_speeds(D.job.slots, ns, &source);
    status_job(b, json, now, source);
    status_ests(b, json, now);
    if (!json)
        status_ests_ts_text(b);
    status_gpus(b, json, ns, source);
    if (D.job.nnodes > 1)
        status_nodes(b, json, now);
    if (json)
        es_ctl_buf_printf(b, "]}\n");
}

/* "steps MIN MAX REGISTERED N UNRESPONSIVE\nplacement TEXT\n" for run. */
void dmn_progress_text(es_ctl_buf_t *b)
{
    uint64_t mn = UINT64_MAX, mx = 0;
    int reg = 0, unresp = 0, held = 0;
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        if (!e->seen || e->conn < 0)
            continue;
        reg++;
        held += e->held != 0;
        if (strcmp(est_state(e), "unresponsive") == 0)
            unresp++;
        if (e->step < mn)
            mn = e->step;
        if (e->step > mx)
            mx = e->step;
    }
    if (!reg)
        mn = 0;
    es_ctl_buf_printf(b, "steps %llu %llu %d %d %d %d\nplacement", (unsigned long long)mn,
                      (unsigned long long)mx, reg, D.job.nests, unresp, held);
    for (int g = -1; g < D.job.ngpus; g++) {
        int any = 0;
        for (int r = 0; r < D.job.nests; r++) {
            int gpu = D.ests[r].seen ? D.ests[r].gpu : D.job.place[r];
            if (gpu != g)
                continue;
            if (!any) {
                char l[16];
                dmn_gpu_label(g, l, sizeof(l));
                es_ctl_buf_printf(b, " %s%s:", g < 0 ? "" : "gpu", l);
            }
            es_ctl_buf_printf(b, "%s%d", any ? "," : "", r);
            any = 1;
        }
    }
    es_ctl_buf_printf(b, "\n");
}
