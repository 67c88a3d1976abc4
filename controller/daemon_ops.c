/* easyscale-ctl daemon: the commands' requests (dmn_handle_request):
 * status and progress (daemon_status.c), release, a node's report
 * (daemon_nodes.c), and those that move ESTs: scale, preempt and grant (a
 * placement by controller/sched.h), swap-out, swap-in, migrate and
 * timeslice, each refused with the reason, answered done, or started as
 * an operation (daemon_hold.c). */
#include "controller/daemon_int.h"
#include "controller/sched.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The job's GPUs of node `node` (a job across hosts: node 0's GPUs come
 * first, from run; another node's as its reports describe them). */
static int node_gpus(int node, int *idx)
{
    int n = 0;
    for (int g = 0; g < D.job.ngpus; g++)
        if (D.job.gpus[g].node == node)
            idx[n++] = g;
    return n;
}

/* A GPU named by a request: "2" (node 0's) or a UUID (any node's, node
 * 0's first), or "NODE:ORDINAL" (a job across hosts). Its index, or
 * -ENOENT / -EINVAL. */
static int gpu_token(const char *tok)
{
    int node, ord, m = 0;
    if (strchr(tok, ':')) {
        char o[16];
        if (sscanf(tok, "%d:%d%n", &node, &ord, &m) != 2 || tok[m] || node < 0 || ord < 0 ||
            node >= (D.job.nnodes > 1 ? D.job.nnodes : 1))
            return -EINVAL;
        snprintf(o, sizeof(o), "%d", ord);
        return dmn_node_gpu_lookup(node, o);
    }
    return dmn_node_gpu_lookup(strncmp(tok, "GPU-", 4) == 0 ? -1 : 0, tok);
}

/* A refusal before anything moved. */
void dmn_refuse(int cli, uint32_t seq, int rc, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s\n", msg);
    es_ctl_log("refused: %s", msg);
    dmn_reply_text(cli, seq, rc, &b);
    es_ctl_buf_free(&b);
}

/* d2: every GPU of mask must be a model the canonical device was formed
 * from. Returns the index of one that is not, or -1. */
static int outside_canonical(uint64_t mask)
{
    if (D.job.determinism != 2)
        return -1;
    for (int g = 0; g < D.job.ngpus; g++) {
        if (!(mask & (1ull << g)))
            continue;
        const char *m = D.job.gpus[g].model;
        int ok = 0;
        char list[sizeof(D.job.canonical)], *save = NULL;
        snprintf(list, sizeof(list), "%s", D.job.canonical);
        for (char *t = strtok_r(list, ",", &save); t && m[0]; t = strtok_r(NULL, ",", &save))
            if (strcasecmp(t, m) == 0)
                ok = 1;
        if (!ok)
            return g;
    }
    return -1;
}

/* Why an EST cannot take a command now ("" when it can). */
static const char *not_movable(int r)
{
    const est_t *e = &D.ests[r];
    if (!e->seen || e->conn < 0)
        return e->seen ? "is disconnected" : "has not registered";
    if (e->unresponsive)
        return "is unresponsive";
    return "";
}

/* The node a scale event acts on: the one whose GPUs change (every GPU
 * is node 0's on one host); -1 when they are GPUs of several nodes. */
static int scale_node(uint64_t mask)
{
    uint64_t diff = mask ^ D.job.slots;
    int node = diff ? -2 : 0;
    for (int g = 0; g < D.job.ngpus; g++)
        if (diff & (1ull << g)) {
            if (node != -2 && node != D.job.gpus[g].node)
                return -1;
            node = D.job.gpus[g].node;
        }
    return node;
}

/* The ESTs a scale event places, in who (ascending ranks): every EST, or
 * in a job across hosts the node's (a host's GPUs are its ESTs' only).
 * Returns their count. */
static int scale_ests(int node, int *who)
{
    int n = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.job.nnodes <= 1 || es_ctl_nodes_of_rank(&D.nodes, r) == node)
            who[n++] = r;
    return n;
}

/* scale / preempt / grant: the new slot set. */
static void do_scale(int cli, uint32_t seq, uint32_t verb, uint64_t mask, const char *what)
{
    es_sched_slot_t slots[ES_CTL_MAX_GPUS];
    int idx[ES_CTL_MAX_GPUS], ns_ = 0, place[ES_CTL_MAX_ESTS], cur[ES_CTL_MAX_ESTS];
    int targets[ES_CTL_MAX_ESTS], who[ES_CTL_MAX_ESTS], node = scale_node(mask), nw;
    uint32_t ops[ES_CTL_MAX_ESTS];
    uint64_t ns[ES_CTL_MAX_GPUS], maxl;
    const char *source;
    char why[512], label[512];
    int moves, g;
    dmn_mask_label(mask, label, sizeof(label));
    if (node < 0) {
        dmn_refuse(cli, seq, 1, "%s refused: GPUs of several hosts at once; nothing moved", what);
        return;
    }
    nw = scale_ests(node, who);
    if ((g = outside_canonical(mask)) >= 0) {
        dmn_refuse(cli, seq, 1, "%s refused: GPU %d is a%s %s, not one of the models this d2 job's "
                   "canonical device was formed from (%s): its results could differ; nothing moved",
                   what, D.job.gpus[g].ordinal, D.job.gpus[g].model[0] ? "n" : "n unknown model",
                   D.job.gpus[g].model, D.job.canonical);
        return;
    }
    dmn_speeds(mask, ns, &source);
    for (g = 0; g < D.job.ngpus; g++)
        if ((mask & (1ull << g)) && D.job.gpus[g].node == node) {
            idx[ns_] = g;
            slots[ns_].est_ns = ns[g];
            slots[ns_].mem = D.job.gpus[g].mem;
            ns_++;
        }
    uint64_t est_mem = D.job.est_mem;
    for (int k = 0; k < nw; k++) {
        const est_t *e = &D.ests[who[k]];
        if (e->mem > est_mem)
            est_mem = e->mem;
        cur[k] = -1;
        for (int s = 0; s < ns_; s++)
            if (e->gpu == idx[s] && e->state != ES_EST_SWAPPED_OUT)
                cur[k] = s;
    }
    /* Time-slicing costs a swap out and in per extra EST per step: 2x its
     * memory at ~10 GiB/s (PCIe-class), a rough figure. */
    es_sched_in_t in = { .nslots = ns_, .slots = slots, .nests = nw, .cur = cur,
                         .est_mem = est_mem, .time_slicing = D.job.time_slicing,
                         .swap_ns = est_mem / 5 };
    int rc = es_sched_place(&in, place, &maxl, &moves, why, sizeof(why));
    if (rc < 0) {
        dmn_refuse(cli, seq, 1, "%s refused: %s; nothing moved", what, why);
        return;
    }
    int nmove = 0;
    for (int r = 0; r < D.job.nests; r++) {
        targets[r] = -2;
        ops[r] = ES_MOVE_PLACE;
    }
    for (int k = 0; k < nw; k++) {
        int r = who[k];
        if (idx[place[k]] != D.ests[r].gpu || D.ests[r].state == ES_EST_SWAPPED_OUT) {
            const char *nm = not_movable(r);
            if (nm[0]) {
                dmn_refuse(cli, seq, 1, "%s refused: EST %d %s and would have to move; "
                           "nothing moved", what, r, nm);
                return;
            }
            targets[r] = idx[place[k]];
            nmove++;
        }
    }
    if (!nmove) {
        D.job.slots = mask;
        dmn_persist();
        es_ctl_buf_t b = { 0 };
        es_ctl_buf_printf(&b, "%s: done (no EST needs to move); the job runs on GPUs %s\n", what,
                          label);
        es_ctl_log("%s", b.p);
        dmn_reply_text(cli, seq, 0, &b);
        es_ctl_buf_free(&b);
        return;
    }
    dmn_op_start(cli, seq, verb, mask, targets, ops, what);
}

/* "2,3", "0-3", "1,4-6": ascending, no repeats, each < nests. Returns the
 * count, or -1 with err. */
static int parse_ranks(const char *s, int *out, int max, char *err, size_t errlen)
{
    int n = 0, last = -1;
    char buf[ES_PROTO_ARG_MAX + 1], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long lo, hi;
        char *dash = strchr(t, '-');
        if (dash)
            *dash = '\0';
        if (es_ctl_parse_long(t, 0, ES_CTL_MAX_ESTS - 1, &lo) < 0 ||
            (dash && es_ctl_parse_long(dash + 1, 0, ES_CTL_MAX_ESTS - 1, &hi) < 0)) {
            snprintf(err, errlen, "bad rank list \"%s\" (e.g. 2,3 or 0-3)", s);
            return -1;
        }
        if (!dash)
            hi = lo;
        if (lo > hi || lo <= last) {
            snprintf(err, errlen, "rank list \"%s\": ranks in ascending order, each once", s);
            return -1;
        }
        for (long r = lo; r <= hi; r++) {
            if (r >= D.job.nests) {
                snprintf(err, errlen, "no EST %ld (the job has %d)", r, D.job.nests);
                return -1;
            }
            if (n == max) {
                snprintf(err, errlen, "more than %d ranks in one rotation", max);
                return -1;
            }
            out[n++] = (int)r;
        }
        last = (int)hi;
    }
    if (n == 0)
        snprintf(err, errlen, "empty rank list");
    return n ? n : -1;
}

int dmn_ts_member(int r)
{
    for (int k = 0; k < D.ts.n; k++)
        if (D.ts.ranks[k] == r)
            return 1;
    return 0;
}

static void already(int i, uint32_t seq, const char *what);

/* timeslice off: the members placed on the job's GPUs without
 * time-slicing (the scheduler, the other ESTs kept where they are). */
static void timeslice_off(int i, uint32_t seq, int again)
{
    char err[512], what[400], g[16];
    int targets[ES_CTL_MAX_ESTS];
    uint32_t ops[ES_CTL_MAX_ESTS];
    es_sched_slot_t slots[ES_CTL_MAX_GPUS];
    int idx[ES_CTL_MAX_GPUS], ns_ = 0, place[ES_CTL_MAX_ESTS], cur[ES_CTL_MAX_ESTS], moves;
    uint64_t ns[ES_CTL_MAX_GPUS], maxl, est_mem = D.job.est_mem;
    const char *source;
    if (!D.ts.active && again) {
        already(i, seq, "timeslice off");
        return;
    }
    if (!D.ts.active) {
        dmn_refuse(i, seq, 1, "timeslice off: the job is not time-sliced");
        return;
    }
    dmn_speeds(D.job.slots, ns, &source);
    for (int gi = 0; gi < D.job.ngpus; gi++)
        if (D.job.slots & (1ull << gi)) {
            idx[ns_] = gi;
            slots[ns_].est_ns = ns[gi];
            slots[ns_].mem = D.job.gpus[gi].mem;
            ns_++;
        }
    for (int r = 0; r < D.job.nests; r++) {
        targets[r] = -2;
        if (D.ests[r].mem > est_mem)
            est_mem = D.ests[r].mem;
        cur[r] = -1;
        for (int s = 0; s < ns_ && !dmn_ts_member(r); s++)
            if (D.ests[r].gpu == idx[s] && D.ests[r].state != ES_EST_SWAPPED_OUT)
                cur[r] = s;
    }
    es_sched_in_t in = { .nslots = ns_, .slots = slots, .nests = D.job.nests, .cur = cur,
                         .est_mem = est_mem, .time_slicing = 0 };
    if (es_sched_place(&in, place, &maxl, &moves, err, sizeof(err)) < 0) {
        dmn_refuse(i, seq, 1, "timeslice off refused: %s (grant a GPU first); the ESTs stay "
                   "time-sliced", err);
        return;
    }
    for (int r = 0; r < D.job.nests; r++) {
        int member = dmn_ts_member(r);
        if (!member && idx[place[r]] == D.ests[r].gpu && D.ests[r].state != ES_EST_SWAPPED_OUT)
            continue;
        const char *nm = not_movable(r);
        if (nm[0]) {
            dmn_refuse(i, seq, 1, "timeslice off refused: EST %d %s; nothing moved", r, nm);
            return;
        }
        targets[r] = idx[place[r]];
        ops[r] = member ? ES_MOVE_TS_LEAVE : ES_MOVE_PLACE;
    }
    dmn_gpu_label(D.ts.gpu, g, sizeof(g));
    snprintf(what, sizeof(what), "end time-slicing on GPU %s", g);
    dmn_op_start(i, seq, ES_VERB_TIMESLICE, D.job.slots, targets, ops, what);
}

/* The GPU of "timeslice GPU": one of the job's (of its canonical device in
 * d2). Returns its index, or -1 when refused (the reply sent). */
static int timeslice_gpu(int i, uint32_t seq, const char *gpu_tok)
{
    int g = gpu_token(gpu_tok);
    if (g < 0) {
        dmn_refuse(i, seq, g == -EINVAL ? 2 : 1, "timeslice: %s GPU \"%s\"",
                   g == -EINVAL ? "bad" : "no such", gpu_tok);
        return -1;
    }
    if (!(D.job.slots & (1ull << g))) {
        dmn_refuse(i, seq, 1, "timeslice: GPU %s is not one of the job's (grant it first)",
                   gpu_tok);
        return -1;
    }
    if (outside_canonical(1ull << g) >= 0) {
        dmn_refuse(i, seq, 1, "timeslice: GPU %s is not a model of this d2 job's canonical device "
                   "(%s)", gpu_tok, D.job.canonical);
        return -1;
    }
    return g;
}

/* The members of a rotation on GPU g: RANKS, else the ESTs on g now; 2 or
 * more, each running. Returns how many, or -1 when refused (the reply
 * sent). */
static int timeslice_members(int i, uint32_t seq, int g, const char *ranks_tok, int *ranks)
{
    char err[512];
    int n = 0;
    if (ranks_tok[0]) {
        n = parse_ranks(ranks_tok, ranks, ES_PROTO_TS_MAX, err, sizeof(err));
        if (n < 0) {
            dmn_refuse(i, seq, 2, "timeslice: %s", err);
            return -1;
        }
    } else {
        for (int r = 0; r < D.job.nests && n < ES_PROTO_TS_MAX; r++)
            if (D.ests[r].gpu == g && D.ests[r].state != ES_EST_SWAPPED_OUT)
                ranks[n++] = r;
    }
    if (n < 2) {
        dmn_refuse(i, seq, 1, "timeslice: %s (a rotation takes 2 to %d ESTs)",
                   ranks_tok[0] ? "one EST takes no turns" : "fewer than two ESTs on that GPU; "
                   "name the ranks", ES_PROTO_TS_MAX);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int node = D.job.nnodes > 1 ? es_ctl_nodes_of_rank(&D.nodes, ranks[k]) : 0;
        if (node != D.job.gpus[g].node) {
            dmn_refuse(i, seq, 1, "ESTs stay on their host: EST %d runs on node %d, and the "
                       "rotation's GPU is node %d's; nothing moved", ranks[k], node,
                       D.job.gpus[g].node);
            return -1;
        }
        const char *nm = not_movable(ranks[k]);
        if (!nm[0] && D.ests[ranks[k]].state == ES_EST_SWAPPED_OUT)
            nm = "is swapped out (swap it in first: a parked EST reaches no collective)";
        if (nm[0]) {
            dmn_refuse(i, seq, 1, "timeslice: EST %d %s (the job must be running); nothing moved",
                       ranks[k], nm);
            return -1;
        }
    }
    return n;
}

/* Memory: one member at a time beside the other ESTs resident on g.
 * Returns 0, or -1 when refused (the reply sent). */
static int timeslice_fits(int i, uint32_t seq, int g, const char *gpu_tok, const int *ranks,
                          int n)
{
    uint64_t est_mem = D.job.est_mem;
    int there = 0;
    for (int r = 0; r < D.job.nests; r++) {
        int member = 0;
        for (int k = 0; k < n; k++)
            member |= ranks[k] == r;
        if (D.ests[r].mem > est_mem)
            est_mem = D.ests[r].mem;
        there += !member && D.ests[r].gpu == g && D.ests[r].state != ES_EST_SWAPPED_OUT;
    }
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    if (est_mem && (uint64_t)(there + 1) * est_mem > G->mem) {
        dmn_refuse(i, seq, 1, "timeslice refused: GPU %s has %.2f GiB; one EST of %.2f GiB at a "
                   "time beside the %d other%s there would not fit; nothing moved", gpu_tok,
                   dmn_gib(G->mem), dmn_gib(est_mem), there, there == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* timeslice GPU [RANKS] | off */
static void do_timeslice(int i, uint32_t seq, const char *arg, int again)
{
    char what[400], gpu_tok[ES_PROTO_ARG_MAX + 1] = "", ranks_tok[ES_PROTO_ARG_MAX + 1] = "";
    int targets[ES_CTL_MAX_ESTS], ranks[ES_PROTO_TS_MAX], n;
    uint32_t ops[ES_CTL_MAX_ESTS];
    if (D.job.shim_time_slice) { /* the shim's rotation: fixed from the start to the end */
        char gl[512];
        dmn_mask_label(D.job.slots, gl, sizeof(gl));
        dmn_refuse(i, seq, 1, "timeslice: the shim time-slices this job on GPU %s for its whole "
                   "run (EASYSCALE_TIME_SLICE=on); nothing moved", gl);
        return;
    }
    if (strcmp(arg, "off") == 0) {
        timeslice_off(i, seq, again);
        return;
    }
    if (sscanf(arg, "%255s %255s", gpu_tok, ranks_tok) < 1 ||
        strlen(arg) != strlen(gpu_tok) + (ranks_tok[0] ? 1 + strlen(ranks_tok) : 0)) {
        dmn_refuse(i, seq, 2, "timeslice: bad argument \"%s\" (GPU [RANKS], or off)", arg);
        return;
    }
    if (D.ts.active && again &&
        gpu_token(gpu_tok) == D.ts.gpu) {
        snprintf(what, sizeof(what), "timeslice %s", arg);
        already(i, seq, what);
        return;
    }
    if (D.ts.active) {
        char gl[16];
        dmn_gpu_label(D.ts.gpu, gl, sizeof(gl));
        dmn_refuse(i, seq, 1, "timeslice: the job is time-sliced on GPU %s already (end it first: "
                   "easyscale-ctl timeslice --off)", gl);
        return;
    }
    int g = timeslice_gpu(i, seq, gpu_tok);
    if (g < 0 || (n = timeslice_members(i, seq, g, ranks_tok, ranks)) < 0 ||
        timeslice_fits(i, seq, g, gpu_tok, ranks, n) < 0)
        return;
    D.ts.gpu = g;
    D.ts.n = n;
    memcpy(D.ts.ranks, ranks, sizeof(int) * (size_t)n);
    D.ts.active = 0; /* set when the members answered (dmn_op_check) */
    for (int r = 0; r < D.job.nests; r++)
        targets[r] = -2;
    size_t o = 0;
    char list[300] = "";
    for (int k = 0; k < n && o < sizeof(list); k++) {
        int w = snprintf(list + o, sizeof(list) - o, "%s%d", k ? "," : "", ranks[k]);
        if (w > 0)
            o += (size_t)w;
        targets[ranks[k]] = g;
        ops[ranks[k]] = ES_MOVE_TS_JOIN;
    }
    snprintf(what, sizeof(what), "time-slice ESTs %s on GPU %s", list, gpu_tok);
    dmn_op_start(i, seq, ES_VERB_TIMESLICE, D.job.slots, targets, ops, what);
}

/* release STEP: `run` did the scheduled events through STEP; the ESTs held
 * at or before it go on (now, and any that registers later). */
static void do_release(int i, uint32_t seq, const char *arg)
{
    long v;
    if (es_ctl_parse_long(arg, 0, LONG_MAX - 1, &v) < 0) {
        dmn_refuse(i, seq, 2, "release: bad step \"%s\"", arg);
        return;
    }
    if ((uint64_t)v + 1 > D.released)
        D.released = (uint64_t)v + 1;
    es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
    rel.u.release.step = D.released - 1;
    int told = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].seen && D.ests[r].conn >= 0) {
            dmn_conn_send(D.ests[r].conn, &rel);
            told++;
        }
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "released step %ld (%d EST%s told)\n", v, told, told == 1 ? "" : "s");
    es_ctl_log("%s", b.p);
    dmn_reply_text(i, seq, 0, &b);
    es_ctl_buf_free(&b);
}

/* A request sent again (ES_REQ_AGAIN) whose state is reached already: done. */
static void already(int i, uint32_t seq, const char *what)
{
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s: done already (sent again after a controller restart; nothing "
                      "moved)\n", what);
    es_ctl_log("%s", b.p);
    dmn_reply_text(i, seq, 0, &b);
    es_ctl_buf_free(&b);
}

/* scale SPEC, preempt GPU, grant GPU: the job's new GPU set, then
 * do_scale. */
static void do_gpu_verb(int i, uint32_t seq, uint32_t v, const char *arg, int again)
{
    char err[512], what[400];
    if (v == ES_VERB_SCALE) {
        uint64_t mask;
        int rc = es_ctl_gpus_parse(arg, D.job.gpus, D.job.ngpus, &mask, err, sizeof(err));
        if (rc < 0) {
            dmn_refuse(i, seq, rc == -EINVAL ? 2 : 1, "scale: %s", err);
            return;
        }
        snprintf(what, sizeof(what), "scale to GPUs %s", arg);
        do_scale(i, seq, v, mask, what);
        return;
    }
    const char *name = v == ES_VERB_PREEMPT ? "preempt" : "grant";
    int g = gpu_token(arg);
    if (g < 0) {
        dmn_refuse(i, seq, g == -EINVAL ? 2 : 1, "%s: %s GPU \"%s\"", name,
                   g == -EINVAL ? "bad" : "no such", arg);
        return;
    }
    uint64_t bit = 1ull << g, mask = D.job.slots;
    snprintf(what, sizeof(what), "%s GPU %s", name, arg);
    if (again && !(mask & bit) == (v == ES_VERB_PREEMPT)) {
        already(i, seq, what);
        return;
    }
    if (v == ES_VERB_PREEMPT) {
        if (!(mask & bit)) {
            dmn_refuse(i, seq, 1, "preempt: GPU %s is not one of the job's", arg);
            return;
        }
        int idx[ES_CTL_MAX_GPUS], left = 0, n = node_gpus(D.job.gpus[g].node, idx);
        for (int k = 0; k < n; k++)
            left += idx[k] != g && (mask & (1ull << idx[k]));
        if (!left) {
            if (D.job.nnodes > 1)
                dmn_refuse(i, seq, 1, "preempt: GPU %s is node %d's last GPU of the job; its ESTs "
                           "would have nowhere to run", arg, D.job.gpus[g].node);
            else
                dmn_refuse(i, seq, 1, "preempt: GPU %s is the job's last GPU; the ESTs would have "
                           "nowhere to run (swap-out parks them)", arg);
            return;
        }
        mask &= ~bit;
    } else {
        if (mask & bit) {
            dmn_refuse(i, seq, 1, "grant: GPU %s is already the job's", arg);
            return;
        }
        mask |= bit;
    }
    do_scale(i, seq, v, mask, what);
}

/* The GPU of swap-in and migrate of EST r (name): one of the job's (of
 * its canonical device in d2) where the EST fits. Returns its index, -2
 * when the EST is there already and the request was sent again (answered
 * done), or -1 when refused (the reply sent). */
static int est_target(int i, uint32_t seq, const char *name, int r, const char *arg, int again,
                      char *what, size_t wlen)
{
    int g = gpu_token(arg);
    if (g < 0) {
        dmn_refuse(i, seq, g == -EINVAL ? 2 : 1, "%s: %s GPU \"%s\"", name,
                   g == -EINVAL ? "bad" : "no such", arg);
        return -1;
    }
    int node = D.job.nnodes > 1 ? es_ctl_nodes_of_rank(&D.nodes, r) : 0;
    if (D.job.gpus[g].node != node) {
        int gn = D.job.gpus[g].node;
        dmn_refuse(i, seq, 1, "ESTs stay on their host: EST %d runs on node %d (host %s), and GPU "
                   "%s is node %d's (host %s); nothing moved", r, node,
                   D.nodes.node[node].seen ? D.nodes.node[node].host : "?", arg, gn,
                   D.nodes.node[gn].seen ? D.nodes.node[gn].host : "?");
        return -1;
    }
    snprintf(what, wlen, "%s EST %d to GPU %s", name, r, arg);
    if (again && D.ests[r].gpu == g && D.ests[r].state != ES_EST_SWAPPED_OUT) {
        already(i, seq, what);
        return -2;
    }
    if (!(D.job.slots & (1ull << g))) {
        dmn_refuse(i, seq, 1, "%s: GPU %s is not one of the job's (grant it first)", name, arg);
        return -1;
    }
    if (outside_canonical(1ull << g) >= 0) {
        dmn_refuse(i, seq, 1, "%s: GPU %s is not a model of this d2 job's canonical device (%s)",
                   name, arg, D.job.canonical);
        return -1;
    }
    uint64_t est_mem = D.job.est_mem > D.ests[r].mem ? D.job.est_mem : D.ests[r].mem;
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    int there = dmn_on_gpu(g) - (D.ests[r].gpu == g);
    if (est_mem && (est_mem > G->mem ||
                    (!D.job.time_slicing && (uint64_t)(there + 1) * est_mem > G->mem))) {
        dmn_refuse(i, seq, 1, "%s refused: GPU %s has %.2f GiB; %d EST%s of %.2f GiB would not "
                   "fit%s; nothing moved", name, arg, dmn_gib(G->mem), there + 1, there ? "s" : "",
                   dmn_gib(est_mem), D.job.time_slicing ? "" : " without time-slicing");
        return -1;
    }
    return g;
}

/* swap-out RANK, swap-in RANK GPU, migrate RANK GPU. */
static void do_est_move(int i, uint32_t seq, uint32_t v, int r, const char *arg, int again)
{
    char what[400];
    const char *name = v == ES_VERB_SWAP_OUT ? "swap-out" : v == ES_VERB_SWAP_IN ? "swap-in"
                                                                                : "migrate";
    if (r < 0 || r >= D.job.nests) {
        dmn_refuse(i, seq, 2, "%s: no EST %d (the job has %d)", name, r, D.job.nests);
        return;
    }
    const char *nm = not_movable(r);
    if (nm[0]) {
        dmn_refuse(i, seq, 1, "%s: EST %d %s", name, r, nm);
        return;
    }
    int targets[ES_CTL_MAX_ESTS];
    uint32_t ops[ES_CTL_MAX_ESTS];
    for (int k = 0; k < D.job.nests; k++)
        targets[k] = -2;
    if (v == ES_VERB_SWAP_OUT && again && D.ests[r].state == ES_EST_SWAPPED_OUT) {
        snprintf(what, sizeof(what), "swap-out EST %d", r);
        already(i, seq, what);
        return;
    }
    if (v == ES_VERB_SWAP_OUT) {
        targets[r] = -1;
        ops[r] = ES_MOVE_SWAP_OUT;
        snprintf(what, sizeof(what), "swap-out EST %d", r);
    } else {
        int g = est_target(i, seq, name, r, arg, again, what, sizeof(what));
        if (g < 0)
            return;
        targets[r] = g;
        ops[r] = v == ES_VERB_SWAP_IN ? ES_MOVE_SWAP_IN : ES_MOVE_MIGRATE;
    }
    dmn_op_start(i, seq, v, D.job.slots, targets, ops, what);
}

void dmn_handle_request(int i, const es_proto_msg_t *m)
{
    conn_t *c = D.conns[i];
    uint32_t seq = m->seq;
    c->kind = CONN_CLI;
    c->deadline = 0;
    dmn_check_unresponsive(es_ctl_now_ms());
    uint32_t v = m->u.req.verb;
    int again = !!(m->u.req.flags & ES_REQ_AGAIN);
    if (v == ES_VERB_STATUS || v == ES_VERB_PROGRESS) {
        es_ctl_buf_t b = { 0 };
        if (v == ES_VERB_STATUS)
            dmn_status_text(&b, !!(m->u.req.flags & ES_REQ_JSON));
        else
            dmn_progress_text(&b);
        dmn_reply_text(i, seq, 0, &b);
        es_ctl_buf_free(&b);
        return;
    }
    if (v == ES_VERB_RELEASE) {
        do_release(i, seq, m->u.req.arg);
        return;
    }
    if (v == ES_VERB_NODE) {
        dmn_do_node(i, seq, m->u.req.rank, m->u.req.arg);
        return;
    }
    if (D.op.active) {
        dmn_refuse(i, seq, 1, "busy: %s is in progress (%.1f s); try again when it is done",
                   D.op.what, (es_ctl_now_ms() - D.op.start_ms) / 1000.0);
        return;
    }
    const char *arg = m->u.req.arg;
    if (dmn_refuse_across_hosts(i, seq, v))
        return;
    if (v == ES_VERB_TIMESLICE) {
        do_timeslice(i, seq, arg, again);
        return;
    }
    if (D.ts.active) {
        char g[16];
        dmn_gpu_label(D.ts.gpu, g, sizeof(g));
        dmn_refuse(i, seq, 1, "busy: the job is time-sliced on GPU %s; end it first (easyscale-ctl "
                   "timeslice --off)", g);
        return;
    }
    if (v == ES_VERB_SCALE || v == ES_VERB_PREEMPT || v == ES_VERB_GRANT)
        do_gpu_verb(i, seq, v, arg, again);
    else /* swap-out / swap-in / migrate */
        do_est_move(i, seq, v, m->u.req.rank, arg, again);
}
