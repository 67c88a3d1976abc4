/* easyscale-ctl daemon: serves one job. It owns the job's lock, listens on
 * the job's unix socket (and TCP when the job says so), takes the ESTs'
 * registrations and heartbeats, answers the CLI (status, scale, preempt,
 * grant, swap-out, swap-in, migrate, timeslice), computes placements with
 * controller/sched.h and sends MOVE commands, one operation at a time.
 *
 * It is never in the training's data path: ESTs train whether it runs or
 * not. Killed and restarted, it reads the job file and re-learns pids,
 * slots, steps and epochs from the ESTs' re-registrations.
 *
 * One thread, one poll(2) loop; every socket is non-blocking. */
#include "controller/ctl.h"
#include "controller/sched.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 2200
#define AUTH_TIMEOUT_MS 5000
#define CLI_IDLE_TIMEOUT_MS 10000
#define TICK_MS 200

enum { CONN_NEW = 0, CONN_EST = 1, CONN_CLI = 2 };

typedef struct conn {
    int fd;
    int kind;
    int tcp;
    int authed;
    uint8_t auth[ES_PROTO_AUTH_SIZE];
    size_t auth_have;
    int64_t deadline; /* authentication / a CLI's request */
    pid_t peer_pid;
    es_proto_reader_t rd;
    uint8_t rbuf[1024];
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    int closing; /* close once out is written */
    int rank;    /* EST */
    int waiting; /* CLI: waits for the operation */
    uint32_t seq;
    int id;      /* for log lines */
} conn_t;

typedef struct est {
    int conn; /* index in conns, -1 none */
    int seen; /* registered with this daemon */
    pid_t pid;
    char host[ES_PROTO_HOST_MAX + 1];
    char slot[ES_PROTO_SLOT_MAX + 1];
    int gpu; /* index in job.gpus, -1 host or unknown */
    uint64_t step, step_time_ns, wait_ns, mem, epoch;
    uint32_t state;
    int64_t last_ms;
    int unresponsive;
    /* the move in flight, then its answer */
    int pending;
    uint32_t op;
    int target, from;
    int answered;
    int32_t result;
    char reason[ES_PROTO_REASON_MAX + 1];
    uint64_t total_ns, bytes;
    int ts; /* a member of the job's rotation (time-sliced on D.ts.gpu) */
    uint64_t held; /* waiting at a scheduled step: that step + 1 (heartbeat); 0 not */
    uint64_t offer; /* its answer to HOLD_OFFER: the collective it stopped before */
    /* time-slicing figures since the EST started (heartbeat) */
    uint64_t yields, swaps_out, swaps_in, bytes_out, bytes_in;
    uint32_t where; /* enum es_proto_est_where */
} est_t;

/* The job's rotation: ESTs that take turns on one GPU (one at a time). */
typedef struct ts_state {
    int active; /* started (some members may have failed to join) */
    int gpu;    /* index in job.gpus */
    int n;
    int ranks[ES_PROTO_TS_MAX];
} ts_state_t;

/* A hold set at run time (see "a hold of the whole job" below). */
enum { RDV_NONE = 0, RDV_OFFER, RDV_AT, RDV_HELD, RDV_MOVE };
typedef struct rdv {
    int phase;
    uint64_t step;                  /* the collective every EST holds at */
    int targets[ES_CTL_MAX_ESTS];   /* the refused moves, to make at the hold */
    uint32_t ops[ES_CTL_MAX_ESTS];
    int64_t deadline_ms;            /* RDV_HELD: every EST there by then */
} rdv_t;

typedef struct op {
    int active;
    int cli; /* conn waiting for the answer, -1 none */
    uint32_t cli_seq;
    int cli_id;
    uint32_t verb;
    uint64_t epoch;
    int64_t start_ms, deadline_ms;
    uint64_t old_slots, new_slots;
    char what[320];
} op_t;

static struct {
    const char *sock;
    es_ctl_job_t job;
    char tcp_bound[96];
    int lfd, tfd;
    const char *token;
    conn_t *conns[MAX_CONNS];
    int nconn_ids;
    est_t ests[ES_CTL_MAX_ESTS];
    op_t op;
    int all_logged;
    int64_t started_ms;
    /* measured per-EST step time per GPU model (0: none), EWMA */
    struct {
        char model[16];
        uint64_t ns;
    } measured[ES_CTL_MAX_GPUS];
    int nmeasured;
    ts_state_t ts;
    rdv_t rdv;
    /* `run`'s releases of scheduled holds: the step + 1 released (0 none),
     * told to every EST that registers */
    uint64_t released;
    /* a job across hosts (job.nnodes > 1): its nodes' reports (nodes.c) */
    es_ctl_nodes_t nodes;
} D;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static const char *const op_names[] = { "?",        "place",     "migrate",
                                        "swap-out", "swap-in",   "time-slice",
                                        "end time-slicing", "hold offer", "hold" };
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == ES_MOVE_NOPS, "a name per move op");

static double sec(uint64_t ns)
{
    return (double)ns / 1e9;
}

static double gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

/* ---- connections --------------------------------------------------------------- */

static void conn_close(int i, const char *why)
{
    conn_t *c = D.conns[i];
    if (!c)
        return;
    if (why) {
        char who[32];
        if (c->kind == CONN_EST)
            snprintf(who, sizeof(who), "EST %d", c->rank);
        else
            snprintf(who, sizeof(who), "%s", c->kind == CONN_CLI ? "a command" : "new");
        es_ctl_log("closing connection %d (%s, %s%d): %s", c->id, who,
                   c->tcp ? "tcp" : "pid ", c->tcp ? 0 : (int)c->peer_pid, why);
    }
    if (c->kind == CONN_EST && c->rank >= 0 && D.ests[c->rank].conn == i) {
        est_t *e = &D.ests[c->rank];
        e->conn = -1;
        if (e->pending && !e->answered) {
            e->answered = 1;
            e->result = -ECONNRESET;
            snprintf(e->reason, sizeof(e->reason), "the EST disconnected during the move");
        }
    }
    if (D.op.active && D.op.cli == i)
        D.op.cli = -1;
    close(c->fd);
    free(c->out);
    free(c);
    D.conns[i] = NULL;
}

static int conn_add(int fd, int tcp, pid_t peer)
{
    for (int i = 0; i < MAX_CONNS; i++) {
        if (D.conns[i])
            continue;
        conn_t *c = calloc(1, sizeof(*c));
        if (!c)
            return -ENOMEM;
        c->fd = fd;
        c->tcp = tcp;
        c->authed = !tcp;
        c->deadline = es_ctl_now_ms() + (tcp ? AUTH_TIMEOUT_MS : CLI_IDLE_TIMEOUT_MS);
        c->peer_pid = peer;
        c->rank = -1;
        c->id = ++D.nconn_ids;
        c->rd.accept = ES_PROTO_ACCEPT_DAEMON;
        c->rd.buf = c->rbuf;
        c->rd.cap = sizeof(c->rbuf);
        D.conns[i] = c;
        return i;
    }
    return -EMFILE;
}

/* Queues a frame; writes what it can now. */
static void conn_send(int i, es_proto_msg_t *m)
{
    conn_t *c = i >= 0 && i < MAX_CONNS ? D.conns[i] : NULL;
    size_t need = ES_PROTO_HDR_SIZE + es_proto_max_len(m->type), len;
    if (!c || c->closing)
        return;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (need > c->out_cap - c->out_len) {
        if (c->out_off) { /* compact, then grow */
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        if (need > c->out_cap - c->out_len) {
            uint8_t *p = realloc(c->out, c->out_len + need);
            if (!p) {
                conn_close(i, "out of memory");
                return;
            }
            c->out = p;
            c->out_cap = c->out_len + need;
        }
    }
    if (es_proto_encode(m, c->out + c->out_len, c->out_cap - c->out_len, &len) < 0) {
        es_ctl_log("cannot encode a message of type %u", m->type);
        return;
    }
    c->out_len += len;
    size_t done = 0;
    int rc = es_proto_send_all(c->fd, c->out + c->out_off, c->out_len - c->out_off, &done);
    c->out_off += done;
    if (rc < 0 && rc != -EAGAIN)
        conn_close(i, "write failed");
}

static void send_error(int i, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void send_error(int i, int code, const char *fmt, ...)
{
    es_proto_msg_t m = { .type = ES_MSG_ERROR };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.u.err.text, sizeof(m.u.err.text), fmt, ap);
    va_end(ap);
    m.u.err.code = code;
    conn_send(i, &m);
    if (D.conns[i])
        D.conns[i]->closing = 1;
}

/* A reply to a CLI, then close. */
static void send_reply(int i, uint32_t seq, int rc, const char *text, size_t len)
{
    es_proto_msg_t m = { .type = ES_MSG_REPLY, .seq = seq };
    if (!D.conns[i])
        return;
    if (len > ES_PROTO_TEXT_MAX) {
        text = "the answer is too long";
        len = strlen(text);
        rc = 1;
    }
    m.u.reply.rc = rc;
    m.u.reply.text = text;
    m.u.reply.text_len = (uint32_t)len;
    conn_send(i, &m);
    if (D.conns[i])
        D.conns[i]->closing = 1;
}

static void reply_text(int i, uint32_t seq, int rc, es_ctl_buf_t *b)
{
    /* only printable text travels (a driver's name, say, could hold more) */
    for (size_t k = 0; k < b->len; k++)
        if ((b->p[k] < 0x20 && b->p[k] != '\n' && b->p[k] != '\t') || b->p[k] >= 0x7f)
            b->p[k] = '?';
    if (b->oom)
        send_reply(i, seq, 1, "out of memory", 13);
    else
        send_reply(i, seq, rc, b->p ? b->p : "", b->len);
}

/* ---- job state ------------------------------------------------------------------ */

static void persist(void)
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

/* A GPU of node `node` (-1: any; node 0's come first) by ordinal ("2") or
 * UUID: its index, or -ENOENT / -EINVAL. */
static int node_gpu_lookup(int node, const char *tok)
{
    return es_ctl_gpu_lookup_node(D.job.gpus, D.job.ngpus, node, tok);
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
        return node_gpu_lookup(node, o);
    }
    return node_gpu_lookup(strncmp(tok, "GPU-", 4) == 0 ? -1 : 0, tok);
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
    int i = node_gpu_lookup(0, slot);
    return i < 0 ? -1 : i;
}

/* Whether rank r runs on another host than this daemon (node 0). */
static int est_remote(int r)
{
    return D.job.nnodes > 1 && es_ctl_nodes_of_rank(&D.nodes, r) != 0;
}

/* The GPU of EST r's slot, among its node's GPUs (-1: parked, or a GPU
 * of another node not described yet). */
static int est_gpu(int r)
{
    if (!est_remote(r))
        return gpu_of_slot(D.ests[r].slot);
    const char *slot = D.ests[r].slot;
    if (!slot[0] || strcmp(slot, "host") == 0)
        return -1;
    int g = node_gpu_lookup(es_ctl_nodes_of_rank(&D.nodes, r), slot);
    return g < 0 ? -1 : g;
}

/* "2" for node 0's GPU ordinal 2, "1:2" for node 1's. */
static int gpu_name(int g, char *buf, size_t len)
{
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    return G->node ? snprintf(buf, len, "%d:%d", G->node, G->ordinal)
                   : snprintf(buf, len, "%d", G->ordinal);
}

static void gpu_label(int g, char *buf, size_t len)
{
    if (g < 0)
        snprintf(buf, len, "host");
    else
        gpu_name(g, buf, len);
}

/* The GPUs of mask m by node, then ordinal ("0,1,1:0,1:1"), whatever the
 * order the daemon learnt another node's in. */
static void mask_label(uint64_t m, char *buf, size_t len)
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
            int k = o < len ? gpu_name(idx[i], buf + o, len - o) : 0;
            if (k > 0)
                o += (size_t)k;
        }
    if (o >= len)
        o = len - 1;
    buf[o] = '\0';
    if (!o)
        snprintf(buf, len, "none");
}

static int on_gpu(int g)
{
    int n = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].gpu == g)
            n++;
    return n;
}

static uint64_t *measured_for(const char *model, int create)
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
static int speeds(uint64_t mask, uint64_t *ns, const char **source)
{
    int all = 1;
    for (int g = 0; g < D.job.ngpus; g++) {
        if (!(mask & (1ull << g)))
            continue;
        uint64_t *m = measured_for(D.job.gpus[g].model, 0);
        if (!m || !*m)
            all = 0;
    }
    for (int g = 0; g < D.job.ngpus; g++) {
        uint64_t *m = measured_for(D.job.gpus[g].model, 0);
        ns[g] = all && m && *m ? *m : es_ctl_gpu_prior_ns(&D.job.gpus[g]);
    }
    *source = all ? "measured" : "prior";
    return all;
}

/* Flags (and logs, once) the ESTs without heartbeat for longer than the
 * job's bound; status and commands look at the flag. */
static void check_unresponsive(int64_t now)
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
        snprintf(buf, len, "%.2f GiB", gib(b));
}

/* ---- status --------------------------------------------------------------------- */

/* status: the job's line(s) (JSON: the "job" object), then the ESTs'
 * table's header. */
static void status_job(es_ctl_buf_t *b, int json, int64_t now, const char *source)
{
    char slots[512];
    int reg = 0;
    mask_label(D.job.slots, slots, sizeof(slots));
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
        gpu_label(gpu, g, sizeof(g));
        if (!e->seen && gpu < 0)
            snprintf(g, sizeof(g), "?");
        if (est_remote(r) && gpu < 0) /* a GPU of its node's host, not described yet */
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
    snprintf(mem, sizeof(mem), "%.1f GiB", gib(G->mem));
    snprintf(rs, sizeof(rs), x->nrate ? "%.2f" : "-", sps);
    gpu_name(g, name, sizeof(name));
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

static void status_text(es_ctl_buf_t *b, int json)
{
    int64_t now = es_ctl_now_ms();
    uint64_t ns[ES_CTL_MAX_GPUS];
    const char *source;
    speeds(D.job.slots, ns, &source);
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
static void progress_text(es_ctl_buf_t *b)
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
                gpu_label(g, l, sizeof(l));
                es_ctl_buf_printf(b, " %s%s:", g < 0 ? "" : "gpu", l);
            }
            es_ctl_buf_printf(b, "%s%d", any ? "," : "", r);
            any = 1;
        }
    }
    es_ctl_buf_printf(b, "\n");
}

/* ---- operations ------------------------------------------------------------------ */

static void op_send(const int *targets, const uint32_t *ops, uint64_t step);
static void op_reply(int rc, es_ctl_buf_t *b);

/* ---- a hold of the whole job ---------------------------------------------------------
 * A move the ESTs refuse with -EXDEV (their collectives' staging is device
 * memory every EST of the job maps: docs/COLLECTIVES.md section 4) is made
 * at a hold of every EST, which the ESTs, each at its own pace, agree on in
 * two rounds: HOLD_OFFER (each stops before its next counting collective
 * and answers its index), HOLD_AT the greatest of them (each goes on to
 * that collective and holds there, its staging taken down); once every EST
 * says it is held, the refused moves again, then RELEASE. A round that
 * fails withdraws the hold, and the request fails with the reason. */

/* The operation failed only because of the staging: every EST asked
 * refused with -EXDEV, none moved. */
static int rdv_wanted(void)
{
    int n = 0;
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        if (!e->answered || e->result != -EXDEV)
            return 0;
        n++;
    }
    return n > 0;
}

/* Sends op (HOLD_OFFER, or HOLD_AT step) to every EST of the job; 0, or
 * -ENOTCONN (naming the EST in why) when one is not connected. */
static int rdv_send(int phase, uint32_t op, uint64_t step, char *why, size_t len)
{
    int targets[ES_CTL_MAX_ESTS];
    uint32_t ops[ES_CTL_MAX_ESTS];
    for (int r = 0; r < D.job.nests; r++) {
        if (!D.ests[r].seen || D.ests[r].conn < 0) {
            snprintf(why, len, "EST %d is not connected", r);
            return -ENOTCONN;
        }
        targets[r] = D.ests[r].gpu;
        ops[r] = op;
    }
    D.rdv.phase = phase;
    D.op.deadline_ms = es_ctl_now_ms() + D.job.move_timeout_ms;
    op_send(targets, ops, step);
    return 0;
}

/* Every EST goes on: the offers withdrawn and, once the collective was
 * chosen, the hold released (an EST may be waiting there already). */
static void rdv_release(void)
{
    es_proto_msg_t m = { .type = ES_MSG_MOVE };
    m.u.move.op = ES_MOVE_HOLD_AT;
    m.u.move.epoch = D.op.epoch;
    m.u.move.step = UINT64_MAX;
    es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
    int chosen = D.rdv.phase != RDV_OFFER;
    if (chosen && D.rdv.step + 1 > D.released)
        D.released = D.rdv.step + 1;
    rel.u.release.step = D.released ? D.released - 1 : 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        e->pending = e->answered = 0;
        if (!e->seen || e->conn < 0)
            continue;
        if (D.rdv.phase != RDV_MOVE)
            conn_send(e->conn, &m);
        if (chosen)
            conn_send(e->conn, &rel);
    }
    D.rdv.phase = RDV_NONE;
}

static void rdv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rdv_fail(const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    rdv_release();
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s: failed: the ESTs' collectives' staging is device memory, and "
                      "no hold of every EST could be set: %s; nothing moved\n", D.op.what, why);
    es_ctl_log("%s", b.p);
    op_reply(1, &b);
    es_ctl_buf_free(&b);
    memset(&D.op, 0, sizeof(D.op));
    D.op.cli = -1;
}

static void rdv_begin(void)
{
    char why[128];
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        D.rdv.targets[r] = e->pending ? e->target : -2;
        D.rdv.ops[r] = e->op;
        e->pending = e->answered = 0;
    }
    es_ctl_log("%s: refused while the collectives' staging is device memory: a hold of "
               "every EST first", D.op.what);
    if (rdv_send(RDV_OFFER, ES_MOVE_HOLD_OFFER, 0, why, sizeof(why)) < 0)
        rdv_fail("%s", why);
}

/* Every EST answered the round (or the time is up). */
static void rdv_answers(int64_t now)
{
    uint64_t at = 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        if (!e->answered || e->result != 0) {
            rdv_fail("EST %d: %s", r, e->answered ? e->reason : "no answer in time");
            return;
        }
        if (e->offer > at)
            at = e->offer;
        e->pending = e->answered = 0;
    }
    char why[128];
    if (D.rdv.phase == RDV_OFFER) {
        D.rdv.step = at;
        es_ctl_log("%s: every EST holds at collective %llu", D.op.what,
                   (unsigned long long)at);
        if (rdv_send(RDV_AT, ES_MOVE_HOLD_AT, at, why, sizeof(why)) < 0)
            rdv_fail("%s", why);
        return;
    }
    D.rdv.phase = RDV_HELD;
    D.rdv.deadline_ms = now + D.job.move_timeout_ms;
}

/* Waiting for every EST to say it is held at the collective. */
static void rdv_held(int64_t now)
{
    int there = 0;
    for (int r = 0; r < D.job.nests; r++)
        there += D.ests[r].held == D.rdv.step + 1;
    if (there < D.job.nests) {
        if (now >= D.rdv.deadline_ms)
            rdv_fail("%d of %d ESTs reached collective %llu within %.0f s", there,
                     D.job.nests, (unsigned long long)D.rdv.step,
                     D.job.move_timeout_ms / 1000.0);
        return;
    }
    D.rdv.phase = RDV_MOVE;
    D.op.epoch = ++D.job.epoch;
    D.op.deadline_ms = now + D.job.move_timeout_ms;
    es_ctl_log("%s: every EST held at collective %llu: epoch %llu", D.op.what,
               (unsigned long long)D.rdv.step, (unsigned long long)D.op.epoch);
    persist();
    op_send(D.rdv.targets, D.rdv.ops, 0);
}

static void op_reply(int rc, es_ctl_buf_t *b)
{
    if (D.op.cli >= 0 && D.conns[D.op.cli] && D.conns[D.op.cli]->id == D.op.cli_id)
        reply_text(D.op.cli, D.op.cli_seq, rc, b);
}

/* Finishes the operation when every EST answered or the time is up. */
static void op_check(int64_t now)
{
    if (!D.op.active)
        return;
    int open = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].pending && !D.ests[r].answered)
            open++;
    if (open && now < D.op.deadline_ms)
        return;
    if (D.rdv.phase == RDV_OFFER || D.rdv.phase == RDV_AT) {
        rdv_answers(now);
        return;
    }
    if (D.rdv.phase == RDV_HELD) {
        rdv_held(now);
        return;
    }
    if (D.rdv.phase == RDV_NONE && rdv_wanted()) {
        rdv_begin();
        return;
    }
    es_ctl_buf_t b = { 0 };
    int failed = 0, moved = 0;
    uint64_t occupied = 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        char from[16], to[16];
        gpu_label(e->from, from, sizeof(from));
        gpu_label(e->target, to, sizeof(to));
        if (!e->answered) {
            e->result = -ETIMEDOUT;
            snprintf(e->reason, sizeof(e->reason), "no answer within %.0f s",
                     D.job.move_timeout_ms / 1000.0);
        }
        moved++;
        if (e->result == 0)
            es_ctl_buf_printf(&b, "  rank %d: %s %s -> %s: ok in %.3f s (%.1f MiB)\n", r,
                              op_names[e->op], from, to, sec(e->total_ns),
                              (double)e->bytes / (1 << 20));
        else {
            failed++;
            es_ctl_buf_printf(&b, "  rank %d: %s %s -> %s: failed: %s\n", r, op_names[e->op],
                              from, to, e->reason);
        }
        if (e->op == ES_MOVE_TS_JOIN)
            e->ts = e->result == 0;
        else if (e->op == ES_MOVE_TS_LEAVE && e->result == 0)
            e->ts = 0;
        e->pending = e->answered = 0;
    }
    if (D.op.verb == ES_VERB_TIMESLICE) {
        int members = 0;
        for (int r = 0; r < D.job.nests; r++)
            members += D.ests[r].ts;
        D.ts.active = members > 0; /* ended when every member left */
    }
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].gpu >= 0)
            occupied |= 1ull << D.ests[r].gpu;
    char slots[512];
    double took = (now - D.op.start_ms) / 1000.0;
    es_ctl_buf_t head = { 0 };
    /* the GPUs the operation changed; the others as they are now (another
     * node's, learnt while it ran, stay the job's) */
    uint64_t changed = D.op.old_slots ^ D.op.new_slots;
    if (!failed) {
        D.job.slots = (D.job.slots & ~changed) | (D.op.new_slots & changed);
        mask_label(D.job.slots, slots, sizeof(slots));
        es_ctl_buf_printf(&head, "%s: done in %.3f s (%d EST%s moved); the job runs on GPUs %s\n",
                          D.op.what, took, moved, moved == 1 ? "" : "s", slots);
    } else {
        /* Consistent: every EST is on one of the job's GPUs. */
        D.job.slots = (D.job.slots & ~changed) | (D.op.old_slots & changed) | occupied;
        mask_label(D.job.slots, slots, sizeof(slots));
        es_ctl_buf_printf(&head, "%s: failed after %.3f s (%d of %d move%s failed); the job "
                          "runs on GPUs %s\n", D.op.what, took, failed, moved,
                          moved == 1 ? "" : "s", slots);
    }
    es_ctl_buf_printf(&head, "%s", b.p ? b.p : "");
    if (D.rdv.phase == RDV_MOVE) {
        es_ctl_buf_printf(&head, "  (at a hold of every EST at collective %llu: the "
                          "collectives' staging is device memory)\n",
                          (unsigned long long)D.rdv.step);
        rdv_release();
    }
    es_ctl_log("%s", head.p ? head.p : "");
    persist();
    op_reply(failed ? 1 : 0, &head);
    es_ctl_buf_free(&b);
    es_ctl_buf_free(&head);
    memset(&D.op, 0, sizeof(D.op));
    D.op.cli = -1;
}

/* Starts an operation: a MOVE ops[r] to targets[r] (a GPU index, -1 host)
 * for every EST r whose target is not -2; the answers finish it
 * (op_check). */
static void op_start(int cli, uint32_t seq, uint32_t verb, uint64_t new_slots, const int *targets,
                     const uint32_t *ops, const char *what)
{
    int64_t now = es_ctl_now_ms();
    memset(&D.op, 0, sizeof(D.op));
    D.op.active = 1;
    D.op.cli = cli;
    D.op.cli_seq = seq;
    D.op.cli_id = cli >= 0 && D.conns[cli] ? D.conns[cli]->id : 0;
    D.op.verb = verb;
    D.op.epoch = ++D.job.epoch;
    D.op.start_ms = now;
    D.op.deadline_ms = now + D.job.move_timeout_ms;
    D.op.old_slots = D.job.slots;
    D.op.new_slots = new_slots;
    snprintf(D.op.what, sizeof(D.op.what), "%s", what);
    if (cli >= 0 && D.conns[cli])
        D.conns[cli]->waiting = 1;
    es_ctl_log("%s: epoch %llu", what, (unsigned long long)D.op.epoch);
    persist();
    op_send(targets, ops, 0);
    op_check(now);
}

/* Sends MOVE ops[r] (step: HOLD_AT's) to every EST r whose target is not
 * -2, in D.op's epoch; their answers are pending. */
static void op_send(const int *targets, const uint32_t *ops, uint64_t step)
{
    for (int r = 0; r < D.job.nests; r++) {
        if (targets[r] == -2)
            continue;
        est_t *e = &D.ests[r];
        e->pending = 1;
        e->answered = 0;
        e->op = ops[r];
        e->from = e->gpu;
        e->target = targets[r];
        e->reason[0] = '\0';
        e->total_ns = e->bytes = 0;
        es_proto_msg_t m = { .type = ES_MSG_MOVE };
        m.u.move.op = ops[r];
        m.u.move.epoch = D.op.epoch;
        if (targets[r] >= 0)
            snprintf(m.u.move.slot, sizeof(m.u.move.slot), "%s", D.job.gpus[targets[r]].uuid);
        if (ops[r] == ES_MOVE_TS_JOIN) {
            m.u.move.nranks = (uint32_t)D.ts.n;
            for (int k = 0; k < D.ts.n; k++)
                m.u.move.ranks[k] = (uint32_t)D.ts.ranks[k];
        }
        if (ops[r] == ES_MOVE_HOLD_AT)
            m.u.move.step = step;
        conn_send(e->conn, &m);
    }
}

/* A refusal before anything moved. */
static void refuse(int cli, uint32_t seq, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(int cli, uint32_t seq, int rc, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s\n", msg);
    es_ctl_log("refused: %s", msg);
    reply_text(cli, seq, rc, &b);
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
    mask_label(mask, label, sizeof(label));
    if (node < 0) {
        refuse(cli, seq, 1, "%s refused: GPUs of several hosts at once; nothing moved", what);
        return;
    }
    nw = scale_ests(node, who);
    if ((g = outside_canonical(mask)) >= 0) {
        refuse(cli, seq, 1, "%s refused: GPU %d is a%s %s, not one of the models this d2 job's "
               "canonical device was formed from (%s): its results could differ; nothing moved",
               what, D.job.gpus[g].ordinal, D.job.gpus[g].model[0] ? "n" : "n unknown model",
               D.job.gpus[g].model, D.job.canonical);
        return;
    }
    speeds(mask, ns, &source);
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
        refuse(cli, seq, 1, "%s refused: %s; nothing moved", what, why);
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
                refuse(cli, seq, 1, "%s refused: EST %d %s and would have to move; nothing moved",
                       what, r, nm);
                return;
            }
            targets[r] = idx[place[k]];
            nmove++;
        }
    }
    if (!nmove) {
        D.job.slots = mask;
        persist();
        es_ctl_buf_t b = { 0 };
        es_ctl_buf_printf(&b, "%s: done (no EST needs to move); the job runs on GPUs %s\n", what,
                          label);
        es_ctl_log("%s", b.p);
        reply_text(cli, seq, 0, &b);
        es_ctl_buf_free(&b);
        return;
    }
    op_start(cli, seq, verb, mask, targets, ops, what);
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

static int ts_member(int r)
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
        refuse(i, seq, 1, "timeslice off: the job is not time-sliced");
        return;
    }
    speeds(D.job.slots, ns, &source);
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
        for (int s = 0; s < ns_ && !ts_member(r); s++)
            if (D.ests[r].gpu == idx[s] && D.ests[r].state != ES_EST_SWAPPED_OUT)
                cur[r] = s;
    }
    es_sched_in_t in = { .nslots = ns_, .slots = slots, .nests = D.job.nests, .cur = cur,
                         .est_mem = est_mem, .time_slicing = 0 };
    if (es_sched_place(&in, place, &maxl, &moves, err, sizeof(err)) < 0) {
        refuse(i, seq, 1, "timeslice off refused: %s (grant a GPU first); the ESTs stay "
               "time-sliced", err);
        return;
    }
    for (int r = 0; r < D.job.nests; r++) {
        int member = ts_member(r);
        if (!member && idx[place[r]] == D.ests[r].gpu && D.ests[r].state != ES_EST_SWAPPED_OUT)
            continue;
        const char *nm = not_movable(r);
        if (nm[0]) {
            refuse(i, seq, 1, "timeslice off refused: EST %d %s; nothing moved", r, nm);
            return;
        }
        targets[r] = idx[place[r]];
        ops[r] = member ? ES_MOVE_TS_LEAVE : ES_MOVE_PLACE;
    }
    gpu_label(D.ts.gpu, g, sizeof(g));
    snprintf(what, sizeof(what), "end time-slicing on GPU %s", g);
    op_start(i, seq, ES_VERB_TIMESLICE, D.job.slots, targets, ops, what);
}

/* The GPU of "timeslice GPU": one of the job's (of its canonical device in
 * d2). Returns its index, or -1 when refused (the reply sent). */
static int timeslice_gpu(int i, uint32_t seq, const char *gpu_tok)
{
    int g = gpu_token(gpu_tok);
    if (g < 0) {
        refuse(i, seq, g == -EINVAL ? 2 : 1, "timeslice: %s GPU \"%s\"",
               g == -EINVAL ? "bad" : "no such", gpu_tok);
        return -1;
    }
    if (!(D.job.slots & (1ull << g))) {
        refuse(i, seq, 1, "timeslice: GPU %s is not one of the job's (grant it first)", gpu_tok);
        return -1;
    }
    if (outside_canonical(1ull << g) >= 0) {
        refuse(i, seq, 1, "timeslice: GPU %s is not a model of this d2 job's canonical device "
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
            refuse(i, seq, 2, "timeslice: %s", err);
            return -1;
        }
    } else {
        for (int r = 0; r < D.job.nests && n < ES_PROTO_TS_MAX; r++)
            if (D.ests[r].gpu == g && D.ests[r].state != ES_EST_SWAPPED_OUT)
                ranks[n++] = r;
    }
    if (n < 2) {
        refuse(i, seq, 1, "timeslice: %s (a rotation takes 2 to %d ESTs)",
               ranks_tok[0] ? "one EST takes no turns" : "fewer than two ESTs on that GPU; name "
               "the ranks", ES_PROTO_TS_MAX);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        const char *nm = not_movable(ranks[k]);
        if (!nm[0] && D.ests[ranks[k]].state == ES_EST_SWAPPED_OUT)
            nm = "is swapped out (swap it in first: a parked EST reaches no collective)";
        if (nm[0]) {
            refuse(i, seq, 1, "timeslice: EST %d %s (the job must be running); nothing moved",
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
        refuse(i, seq, 1, "timeslice refused: GPU %s has %.2f GiB; one EST of %.2f GiB at a time "
               "beside the %d other%s there would not fit; nothing moved", gpu_tok, gib(G->mem),
               gib(est_mem), there, there == 1 ? "" : "s");
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
        mask_label(D.job.slots, gl, sizeof(gl));
        refuse(i, seq, 1, "timeslice: the shim time-slices this job on GPU %s for its whole run "
               "(EASYSCALE_TIME_SLICE=on); nothing moved", gl);
        return;
    }
    if (strcmp(arg, "off") == 0) {
        timeslice_off(i, seq, again);
        return;
    }
    if (sscanf(arg, "%255s %255s", gpu_tok, ranks_tok) < 1 ||
        strlen(arg) != strlen(gpu_tok) + (ranks_tok[0] ? 1 + strlen(ranks_tok) : 0)) {
        refuse(i, seq, 2, "timeslice: bad argument \"%s\" (GPU [RANKS], or off)", arg);
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
        gpu_label(D.ts.gpu, gl, sizeof(gl));
        refuse(i, seq, 1, "timeslice: the job is time-sliced on GPU %s already (end it first: "
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
    D.ts.active = 0; /* set when the members answered (op_check) */
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
    op_start(i, seq, ES_VERB_TIMESLICE, D.job.slots, targets, ops, what);
}

/* release STEP: `run` did the scheduled events through STEP; the ESTs held
 * at or before it go on (now, and any that registers later). */
static void do_release(int i, uint32_t seq, const char *arg)
{
    long v;
    if (es_ctl_parse_long(arg, 0, LONG_MAX - 1, &v) < 0) {
        refuse(i, seq, 2, "release: bad step \"%s\"", arg);
        return;
    }
    if ((uint64_t)v + 1 > D.released)
        D.released = (uint64_t)v + 1;
    es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
    rel.u.release.step = D.released - 1;
    int told = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].seen && D.ests[r].conn >= 0) {
            conn_send(D.ests[r].conn, &rel);
            told++;
        }
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "released step %ld (%d EST%s told)\n", v, told, told == 1 ? "" : "s");
    es_ctl_log("%s", b.p);
    reply_text(i, seq, 0, &b);
    es_ctl_buf_free(&b);
}

/* A request sent again (ES_REQ_AGAIN) whose state is reached already: done. */
static void already(int i, uint32_t seq, const char *what)
{
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s: done already (sent again after a controller restart; nothing "
                      "moved)\n", what);
    es_ctl_log("%s", b.p);
    reply_text(i, seq, 0, &b);
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
            refuse(i, seq, rc == -EINVAL ? 2 : 1, "scale: %s", err);
            return;
        }
        snprintf(what, sizeof(what), "scale to GPUs %s", arg);
        do_scale(i, seq, v, mask, what);
        return;
    }
    const char *name = v == ES_VERB_PREEMPT ? "preempt" : "grant";
    int g = gpu_token(arg);
    if (g < 0) {
        refuse(i, seq, g == -EINVAL ? 2 : 1, "%s: %s GPU \"%s\"", name,
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
            refuse(i, seq, 1, "preempt: GPU %s is not one of the job's", arg);
            return;
        }
        int idx[ES_CTL_MAX_GPUS], left = 0, n = node_gpus(D.job.gpus[g].node, idx);
        for (int k = 0; k < n; k++)
            left += idx[k] != g && (mask & (1ull << idx[k]));
        if (!left) {
            if (D.job.nnodes > 1)
                refuse(i, seq, 1, "preempt: GPU %s is node %d's last GPU of the job; its ESTs "
                       "would have nowhere to run", arg, D.job.gpus[g].node);
            else
                refuse(i, seq, 1, "preempt: GPU %s is the job's last GPU; the ESTs would have "
                       "nowhere to run (swap-out parks them)", arg);
            return;
        }
        mask &= ~bit;
    } else {
        if (mask & bit) {
            refuse(i, seq, 1, "grant: GPU %s is already the job's", arg);
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
        refuse(i, seq, g == -EINVAL ? 2 : 1, "%s: %s GPU \"%s\"", name,
               g == -EINVAL ? "bad" : "no such", arg);
        return -1;
    }
    int node = D.job.nnodes > 1 ? es_ctl_nodes_of_rank(&D.nodes, r) : 0;
    if (D.job.gpus[g].node != node) {
        int gn = D.job.gpus[g].node;
        refuse(i, seq, 1, "ESTs stay on their host: EST %d runs on node %d (host %s), and GPU "
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
        refuse(i, seq, 1, "%s: GPU %s is not one of the job's (grant it first)", name, arg);
        return -1;
    }
    if (outside_canonical(1ull << g) >= 0) {
        refuse(i, seq, 1, "%s: GPU %s is not a model of this d2 job's canonical device (%s)",
               name, arg, D.job.canonical);
        return -1;
    }
    uint64_t est_mem = D.job.est_mem > D.ests[r].mem ? D.job.est_mem : D.ests[r].mem;
    const es_ctl_gpu_t *G = &D.job.gpus[g];
    int there = on_gpu(g) - (D.ests[r].gpu == g);
    if (est_mem && (est_mem > G->mem ||
                    (!D.job.time_slicing && (uint64_t)(there + 1) * est_mem > G->mem))) {
        refuse(i, seq, 1, "%s refused: GPU %s has %.2f GiB; %d EST%s of %.2f GiB would not "
               "fit%s; nothing moved", name, arg, gib(G->mem), there + 1, there ? "s" : "",
               gib(est_mem), D.job.time_slicing ? "" : " without time-slicing");
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
        refuse(i, seq, 2, "%s: no EST %d (the job has %d)", name, r, D.job.nests);
        return;
    }
    const char *nm = not_movable(r);
    if (nm[0]) {
        refuse(i, seq, 1, "%s: EST %d %s", name, r, nm);
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
    op_start(i, seq, v, D.job.slots, targets, ops, what);
}

/* ---- the nodes of a job across hosts ---------------------------------------------- */

/* The job across hosts failed now: said, and kept in the job file (a
 * restarted daemon answers the nodes the same). */
static void nodes_failed(void)
{
    es_ctl_log("the job failed: %s", D.nodes.reason);
    D.job.failed_node = D.nodes.failed_node;
    snprintf(D.job.failed, sizeof(D.job.failed), "%s", D.nodes.reason);
    persist();
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
    if (node == 0 || node_gpu_lookup(node, o) >= 0)
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
               d->gpu.ordinal, d->gpu.uuid, gib(d->gpu.mem),
               d->gpu_injob ? "one of the job's" : "not the job's");
    for (int r = 0; r < D.job.nests; r++)
        if (es_ctl_nodes_of_rank(&D.nodes, r) == node && D.ests[r].seen)
            D.ests[r].gpu = est_gpu(r);
    persist();
}

/* NODE: a node's `run` reports its state; the answer is the job's
 * ("running E/N", "done E/N", "failed E/N REASON": nodes.c). */
static void do_node(int i, uint32_t seq, int node, const char *arg)
{
    char err[512], ans[600];
    int64_t now = es_ctl_now_ms();
    if (D.job.nnodes <= 1) {
        refuse(i, seq, 2, "this job runs on one host (no node reports)");
        return;
    }
    int was_failed = D.nodes.failed;
    int rc = es_ctl_nodes_report(&D.nodes, node, arg, now, err, sizeof(err));
    if (rc < 0) {
        refuse(i, seq, 2, "%s", err);
        return;
    }
    if (!was_failed && D.nodes.failed)
        nodes_failed();
    node_gpu_learn(node);
    rc = es_ctl_nodes_answer(&D.nodes, now, ans, sizeof(ans));
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s", ans);
    reply_text(i, seq, rc, &b);
    es_ctl_buf_free(&b);
}

/* A request in a job across hosts. Migrations and scale events (preempt,
 * grant) act inside a host (est_target, do_scale; the ESTs move at a hold
 * of the whole job, where the hosts' leaders' NCCL communicator is made
 * again); scale (a whole GPU set), swap-out, swap-in and time-slicing are
 * refused with the reason. Returns 1 when refused. */
static int refuse_across_hosts(int i, uint32_t seq, uint32_t v)
{
    if (D.job.nnodes <= 1)
        return 0;
    if (v == ES_VERB_PREEMPT || v == ES_VERB_GRANT)
        return 0; /* do_scale places the ESTs of the GPU's node */
    if (v == ES_VERB_SCALE) {
        refuse(i, seq, 1, "scale: not in a job across %d hosts: preempt and grant take or give "
               "one GPU of a host (NODE:ORDINAL, e.g. 1:0); nothing moved", D.job.nnodes);
        return 1;
    }
    if (v == ES_VERB_MIGRATE)
        return 0;
    refuse(i, seq, 1, "%s: not in a job across %d hosts (a parked or time-sliced EST does not "
           "take part in the collectives across hosts, and the other hosts would wait for "
           "it); migrations, preempt and grant are; nothing moved",
           v == ES_VERB_TIMESLICE ? "timeslice" : v == ES_VERB_SWAP_OUT ? "swap-out" : "swap-in",
           D.job.nnodes);
    return 1;
}

static void handle_request(int i, const es_proto_msg_t *m)
{
    conn_t *c = D.conns[i];
    uint32_t seq = m->seq;
    c->kind = CONN_CLI;
    c->deadline = 0;
    check_unresponsive(es_ctl_now_ms());
    uint32_t v = m->u.req.verb;
    int again = !!(m->u.req.flags & ES_REQ_AGAIN);
    if (v == ES_VERB_STATUS || v == ES_VERB_PROGRESS) {
        es_ctl_buf_t b = { 0 };
        if (v == ES_VERB_STATUS)
            status_text(&b, !!(m->u.req.flags & ES_REQ_JSON));
        else
            progress_text(&b);
        reply_text(i, seq, 0, &b);
        es_ctl_buf_free(&b);
        return;
    }
    if (v == ES_VERB_RELEASE) {
        do_release(i, seq, m->u.req.arg);
        return;
    }
    if (v == ES_VERB_NODE) {
        do_node(i, seq, m->u.req.rank, m->u.req.arg);
        return;
    }
    if (D.op.active) {
        refuse(i, seq, 1, "busy: %s is in progress (%.1f s); try again when it is done",
               D.op.what, (es_ctl_now_ms() - D.op.start_ms) / 1000.0);
        return;
    }
    const char *arg = m->u.req.arg;
    if (refuse_across_hosts(i, seq, v))
        return;
    if (v == ES_VERB_TIMESLICE) {
        do_timeslice(i, seq, arg, again);
        return;
    }
    if (D.ts.active) {
        char g[16];
        gpu_label(D.ts.gpu, g, sizeof(g));
        refuse(i, seq, 1, "busy: the job is time-sliced on GPU %s; end it first (easyscale-ctl "
               "timeslice --off)", g);
        return;
    }
    if (v == ES_VERB_SCALE || v == ES_VERB_PREEMPT || v == ES_VERB_GRANT)
        do_gpu_verb(i, seq, v, arg, again);
    else /* swap-out / swap-in / migrate */
        do_est_move(i, seq, v, m->u.req.rank, arg, again);
}

/* ---- ESTs ------------------------------------------------------------------------- */

static void conn_input(int i);

static void handle_register(int i, const es_proto_msg_t *m)
{
    conn_t *c = D.conns[i];
    int r = (int)m->u.reg.rank;
    if ((int)m->u.reg.world != D.job.nests || r < 0 || r >= D.job.nests) {
        es_ctl_log("refusing a registration: rank %u of %u, but the job has %d ESTs",
                   m->u.reg.rank, m->u.reg.world, D.job.nests);
        send_error(i, -EINVAL, "this job has %d ESTs; this process says rank %u of %u",
                   D.job.nests, m->u.reg.rank, m->u.reg.world);
        return;
    }
    pid_t pid = c->tcp ? (pid_t)m->u.reg.pid : c->peer_pid;
    est_t *e = &D.ests[r];
    if (e->conn >= 0 && e->conn != i && e->pid == pid && !c->tcp) {
        /* The same process again. After an exec its old connection is
         * closed already (close-on-exec, before the new image could
         * connect): take in what is left on it, and its end. */
        int old = e->conn;
        for (int k = 0; k < 64 && D.conns[old] && e->conn == old; k++) {
            uint8_t peek;
            ssize_t n = recv(D.conns[old]->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n < 0)
                break; /* nothing pending: alive */
            conn_input(old);
        }
    }
    if (e->conn >= 0 && e->conn != i) {
        es_ctl_log("refusing a second registration of rank %d (pid %d; held by pid %d)", r,
                   (int)pid, (int)e->pid);
        send_error(i, -EEXIST, "rank %d is held by pid %d of this job", r, (int)e->pid);
        return;
    }
    e->seen = 1;
    e->conn = i;
    e->pid = pid;
    snprintf(e->host, sizeof(e->host), "%s", m->u.reg.host);
    snprintf(e->slot, sizeof(e->slot), "%s", m->u.reg.slot);
    e->gpu = est_gpu(r);
    e->step = m->u.reg.step;
    e->mem = m->u.reg.mem_bytes;
    e->epoch = m->u.reg.epoch;
    e->state = strcmp(e->slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
    e->last_ms = es_ctl_now_ms();
    e->unresponsive = 0;
    /* a rotation re-learned (a restarted daemon): its members say so */
    e->ts = (m->u.reg.flags & ES_REG_TIME_SLICED) && e->gpu >= 0;
    if (e->ts && !ts_member(r) && D.ts.n < ES_PROTO_TS_MAX) {
        int k = D.ts.n++;
        for (; k > 0 && D.ts.ranks[k - 1] > r; k--)
            D.ts.ranks[k] = D.ts.ranks[k - 1];
        D.ts.ranks[k] = r;
        D.ts.gpu = e->gpu;
        D.ts.active = 1;
    }
    if (e->epoch > D.job.epoch) /* a restart before the job file caught up */
        D.job.epoch = e->epoch;
    c->kind = CONN_EST;
    c->rank = r;
    c->deadline = 0;
    es_proto_msg_t w = { .type = ES_MSG_WELCOME, .seq = m->seq };
    w.u.welcome.epoch = D.job.epoch;
    w.u.welcome.daemon_pid = (uint32_t)getpid();
    conn_send(i, &w);
    e->held = 0; /* heartbeats say again */
    if (D.released) { /* a release it may have missed while it reconnected */
        es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
        rel.u.release.step = D.released - 1;
        conn_send(i, &rel);
    }
    int reg = 0;
    for (int k = 0; k < D.job.nests; k++)
        reg += D.ests[k].conn >= 0;
    if (reg == D.job.nests && !D.all_logged) {
        D.all_logged = 1;
        es_ctl_log("all %d ESTs registered (epoch %llu)", D.job.nests,
                   (unsigned long long)D.job.epoch);
        persist();
    }
}

static void handle_heartbeat(int i, const es_proto_msg_t *m)
{
    est_t *e = &D.ests[D.conns[i]->rank];
    int64_t now = es_ctl_now_ms();
    if (e->unresponsive)
        es_ctl_log("EST %d (pid %d) answers again", D.conns[i]->rank, (int)e->pid);
    e->unresponsive = 0;
    e->step = m->u.hb.step;
    e->step_time_ns = m->u.hb.step_time_ns;
    e->wait_ns = m->u.hb.wait_ns;
    e->mem = m->u.hb.mem_bytes;
    e->epoch = m->u.hb.epoch;
    e->state = m->u.hb.state;
    e->held = m->u.hb.held;
    e->yields = m->u.hb.yields;
    e->swaps_out = m->u.hb.swaps_out;
    e->swaps_in = m->u.hb.swaps_in;
    e->bytes_out = m->u.hb.bytes_out;
    e->bytes_in = m->u.hb.bytes_in;
    e->where = m->u.hb.where;
    e->last_ms = now;
    /* Per-EST compute time on this model: the step less the time waited
     * in collectives, shared by the ESTs of the GPU. Only when the shim
     * measures the wait. */
    if (e->gpu >= 0 && m->u.hb.wait_ns && m->u.hb.step_time_ns > m->u.hb.wait_ns) {
        int k = on_gpu(e->gpu);
        uint64_t sample = (m->u.hb.step_time_ns - m->u.hb.wait_ns) / (uint64_t)(k ? k : 1);
        uint64_t *ms = measured_for(D.job.gpus[e->gpu].model, 1);
        if (ms && sample)
            *ms = *ms ? (*ms * 7 + sample) / 8 : sample;
    }
}

static void handle_ack(int i, const es_proto_msg_t *m)
{
    int r = D.conns[i]->rank;
    est_t *e = &D.ests[r];
    snprintf(e->slot, sizeof(e->slot), "%s", m->u.ack.slot);
    e->gpu = est_gpu(r);
    e->state = strcmp(e->slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
    e->last_ms = es_ctl_now_ms();
    if (m->u.ack.result == 0 && m->u.ack.epoch > e->epoch)
        e->epoch = m->u.ack.epoch;
    if (!D.op.active || !e->pending || e->answered || m->u.ack.epoch != D.op.epoch) {
        es_ctl_log("EST %d: answer for epoch %llu (none expected): %s", r,
                   (unsigned long long)m->u.ack.epoch,
                   m->u.ack.result ? m->u.ack.reason : "ok");
        return;
    }
    e->answered = 1;
    e->result = m->u.ack.result;
    if (e->op == ES_MOVE_HOLD_OFFER)
        e->offer = m->u.ack.step;
    /* the rotation as the ESTs answer (status shows it at once) */
    if (e->op == ES_MOVE_TS_JOIN && e->result == 0)
        e->ts = 1;
    else if (e->op == ES_MOVE_TS_LEAVE && e->result == 0)
        e->ts = 0;
    e->total_ns = m->u.ack.total_ns;
    e->bytes = m->u.ack.bytes;
    snprintf(e->reason, sizeof(e->reason), "%s",
             m->u.ack.reason[0] ? m->u.ack.reason : strerror(-m->u.ack.result));
}

static void handle_frame(int i)
{
    conn_t *c = D.conns[i];
    es_proto_msg_t m;
    int rc = es_proto_decode(&c->rd.h, c->rd.buf, &m);
    es_proto_reader_reset(&c->rd);
    if (rc < 0) {
        conn_close(i, es_proto_strerror(rc));
        return;
    }
    c->seq = m.seq;
    switch (c->kind) {
    case CONN_NEW:
        if (m.type == ES_MSG_REGISTER)
            handle_register(i, &m);
        else if (m.type == ES_MSG_REQUEST)
            handle_request(i, &m);
        else
            conn_close(i, "a first message that is neither a registration nor a request");
        return;
    case CONN_EST:
        if (m.type == ES_MSG_HEARTBEAT)
            handle_heartbeat(i, &m);
        else if (m.type == ES_MSG_ACK)
            handle_ack(i, &m);
        else if (m.type == ES_MSG_ERROR)
            es_ctl_log("EST %d reports: %s", c->rank, m.u.err.text);
        else
            conn_close(i, "unexpected message from an EST");
        return;
    default:
        conn_close(i, "a second request on one connection");
        return;
    }
}

/* Input on connection i. */
static void conn_input(int i)
{
    conn_t *c = D.conns[i];
    if (!c->authed) {
        /* TCP: exactly the authentication block before anything else. */
        ssize_t n = read(c->fd, c->auth + c->auth_have, sizeof(c->auth) - c->auth_have);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_close(i, "closed before authenticating");
            return;
        }
        if (n < 0)
            return;
        c->auth_have += (size_t)n;
        if (c->auth_have < sizeof(c->auth))
            return;
        if (es_proto_auth_check(c->auth, D.token) < 0) {
            conn_close(i, "bad token");
            return;
        }
        c->authed = 1;
        c->deadline = es_ctl_now_ms() + CLI_IDLE_TIMEOUT_MS;
        return;
    }
    for (int k = 0; k < 16 && D.conns[i]; k++) { /* a few frames per wakeup, then others */
        c = D.conns[i];
        if (c->closing) {
            char sink[256];
            if (read(c->fd, sink, sizeof(sink)) == 0)
                conn_close(i, NULL);
            return;
        }
        int rc = es_proto_reader_fill(&c->rd, c->fd);
        if (rc == 0) {
            /* 0 is also EAGAIN: stop when nothing more is there */
            struct pollfd p = { .fd = c->fd, .events = POLLIN };
            if (poll(&p, 1, 0) != 1)
                return;
            continue;
        }
        if (rc == -EPROTONOSUPPORT) {
            char why[200];
            snprintf(why, sizeof(why), "refused: it speaks control protocol version %u, this "
                     "controller %u (%s)", (unsigned)c->rd.h.version, ES_PROTO_VERSION,
                     es_proto_strerror(rc));
            conn_close(i, why);
            return;
        }
        if (rc < 0) {
            conn_close(i, rc == -ECONNRESET ? NULL : es_proto_strerror(rc));
            return;
        }
        handle_frame(i);
    }
}

static void accept_on(int lfd, int tcp)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        pid_t pid = 0;
        if (!tcp) {
            int rc = es_ctl_peer_check(fd, geteuid(), es_ctl_peercred_sys, &pid);
            if (rc < 0) {
                uid_t u = (uid_t)-1;
                pid_t p = 0;
                es_ctl_peercred_sys(fd, &u, &p);
                es_ctl_log("refused a connection from uid %d (pid %d): %s", (int)u, (int)p,
                           rc == -EACCES ? "not this user" : strerror(-rc));
                close(fd);
                continue;
            }
        }
        int i = conn_add(fd, tcp, pid);
        if (i < 0) {
            es_ctl_log("refused a connection: too many connections");
            close(fd);
        }
    }
}

static void tick(int64_t now)
{
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *c = D.conns[i];
        if (!c)
            continue;
        if (c->deadline && now > c->deadline && !c->waiting)
            conn_close(i, c->authed ? "no request in time" : "no authentication in time");
    }
    check_unresponsive(now);
    op_check(now);
    if (D.job.nnodes > 1 && es_ctl_nodes_tick(&D.nodes, now))
        nodes_failed();
}

/* ---- main ------------------------------------------------------------------------- */

static const char *const usage =
    "usage: easyscale-ctl daemon --socket PATH [--managed] [--ready-fd FD]\n"
    "Serves the job whose files are PATH.job and PATH.lock: takes the job's lock\n"
    "(a second controller of the same job is refused), listens on PATH (mode 0600,\n"
    "peers of this user only) and, when the job says so, on TCP (EASYSCALE_TOKEN\n"
    "required), and answers the ESTs and the CLI until SIGTERM. 'run' starts it;\n"
    "start it by hand to restart a job's controller (it re-learns the job from the\n"
    "ESTs' registrations). --managed: started by run (SIGINT ignored, ends with\n"
    "its parent); --ready-fd: write one byte there once listening.\n";

/* The daemon's options: --socket into D.sock. Returns 0, -EINVAL (usage,
 * *rc 2) or -ECANCELED (--help shown, *rc 0). */
static int daemon_getopt(int argc, char **argv, int *managed, long *ready, int *rc)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' }, { "managed", no_argument, NULL, 'm' },
        { "ready-fd", required_argument, NULL, 'r' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int c;
    optind = 1;
    opterr = 0;
    *rc = ES_CTL_EXIT_USAGE;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 's': D.sock = optarg; break;
        case 'm': *managed = 1; break;
        case 'r':
            if (es_ctl_parse_long(optarg, 3, 1 << 20, ready) < 0) {
                es_ctl_err("bad --ready-fd \"%s\"", optarg);
                fputs(usage, stderr);
                return -EINVAL;
            }
            break;
        case 'h':
            fputs(usage, stdout);
            *rc = ES_CTL_EXIT_OK;
            return -ECANCELED;
        default:
            es_ctl_err("unknown or incomplete option \"%s\"", argv[optind - 1]);
            fputs(usage, stderr);
            return -EINVAL;
        }
    }
    if (!D.sock || optind != argc) {
        es_ctl_err(D.sock ? "unexpected argument \"%s\"" : "daemon needs --socket PATH%s",
                   D.sock ? argv[optind] : "");
        fputs(usage, stderr);
        return -EINVAL;
    }
    return 0;
}

/* The job's lock (into *lockfd) and file, and the listening sockets.
 * Returns 0 or a negative errno (the reason on stderr). */
static int daemon_open(int *lockfd)
{
    char err[1024];
    pid_t holder = 0;
    int rc;
    *lockfd = es_ctl_lock(D.sock, &holder);
    if (*lockfd < 0) {
        if (*lockfd == -EBUSY)
            es_ctl_err("another controller (pid %d) owns the job at %s", (int)holder, D.sock);
        else
            es_ctl_err("cannot lock the job at %s: %s", D.sock, strerror(-*lockfd));
        return *lockfd;
    }
    if ((rc = es_ctl_job_read(D.sock, &D.job, err, sizeof(err))) < 0) {
        es_ctl_err("%s", err);
        return rc;
    }
    for (int r = 0; r < ES_CTL_MAX_ESTS; r++)
        D.ests[r].conn = D.ests[r].gpu = -1;
    D.lfd = es_ctl_listen_unix(D.sock);
    if (D.lfd < 0) {
        es_ctl_err("cannot listen on %s: %s", D.sock, strerror(-D.lfd));
        return D.lfd;
    }
    if (!D.job.tcp[0])
        return 0;
    D.token = getenv("EASYSCALE_TOKEN");
    if (!D.token || es_proto_token_valid(D.token) < 0) {
        es_ctl_err("the job listens on TCP: EASYSCALE_TOKEN must be set (%d to %d printable "
                   "characters, no spaces)", ES_PROTO_TOKEN_MIN, ES_PROTO_TOKEN_MAX);
        return -EINVAL;
    }
    D.tfd = es_ctl_listen_tcp(D.job.tcp, D.tcp_bound, sizeof(D.tcp_bound));
    if (D.tfd < 0) {
        es_ctl_err("cannot listen on %s: %s", D.job.tcp, strerror(-D.tfd));
        return D.tfd;
    }
    /* A restart binds the same port. */
    if (strcmp(D.tcp_bound, D.job.tcp) != 0) {
        snprintf(D.job.tcp, sizeof(D.job.tcp), "%s", D.tcp_bound);
        persist();
    }
    return 0;
}

/* Signals, the readiness byte for run (--ready-fd), the first log line. */
static void daemon_ready(int managed, long ready)
{
    struct sigaction sa = { .sa_handler = on_signal };
    char slots[512];
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    if (!managed)
        sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    D.started_ms = es_ctl_now_ms();
    if (D.job.nnodes > 1) {
        es_ctl_nodes_init(&D.nodes, D.job.nnodes, D.job.ests_per_node, D.job.hb_timeout_ms,
                          D.job.join_timeout_ms, D.started_ms);
        es_ctl_nodes_restore_failed(&D.nodes, D.job.failed_node, D.job.failed);
    }
    if (ready >= 0) {
        char one = '1';
        if (write((int)ready, &one, 1) != 1)
            es_ctl_log("cannot signal readiness: %s", strerror(errno));
        close((int)ready);
    }
    mask_label(D.job.slots, slots, sizeof(slots));
    es_ctl_log("serving %s: %d ESTs on GPUs %s, epoch %llu%s%s", D.sock, D.job.nests, slots,
               (unsigned long long)D.job.epoch, D.tcp_bound[0] ? ", tcp " : "", D.tcp_bound);
}

/* The listening sockets and every connection into pf (map: -1 unix, -2
 * TCP, else the connection); a closing connection whose output is all
 * written is closed. Returns how many. */
static int daemon_pollfds(struct pollfd *pf, int *map)
{
    int n = 0;
    pf[n] = (struct pollfd){ .fd = D.lfd, .events = POLLIN };
    map[n++] = -1;
    if (D.tfd >= 0) {
        pf[n] = (struct pollfd){ .fd = D.tfd, .events = POLLIN };
        map[n++] = -2;
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_t *cn = D.conns[i];
        if (!cn)
            continue;
        if (cn->closing && cn->out_off >= cn->out_len) {
            conn_close(i, NULL);
            continue;
        }
        pf[n] = (struct pollfd){ .fd = cn->fd,
                                 .events = (short)(POLLIN | (cn->out_off < cn->out_len ? POLLOUT : 0)) };
        map[n++] = i;
    }
    return n;
}

/* Connection i is ready (revents): its output goes on, its input is read. */
static void conn_ready(int i, short revents)
{
    conn_t *cn = D.conns[i];
    if (!cn)
        return;
    if (revents & POLLOUT) {
        size_t done = 0;
        int r = es_proto_send_all(cn->fd, cn->out + cn->out_off, cn->out_len - cn->out_off,
                                  &done);
        cn->out_off += done;
        if (r < 0 && r != -EAGAIN) {
            conn_close(i, NULL);
            return;
        }
    }
    if (revents & (POLLIN | POLLHUP | POLLERR))
        conn_input(i);
}

/* The poll loop, until SIGTERM (or SIGINT unmanaged). Returns 0, or -errno
 * when poll failed. */
static int daemon_loop(void)
{
    static struct pollfd pf[MAX_CONNS + 2];
    static int map[MAX_CONNS + 2];
    int64_t last_tick = 0;
    while (!g_stop) {
        int n = daemon_pollfds(pf, map);
        int k = poll(pf, (nfds_t)n, TICK_MS);
        if (k < 0 && errno != EINTR) {
            int e = errno;
            es_ctl_log("poll: %s", strerror(e));
            return -e;
        }
        for (int j = 0; k > 0 && j < n; j++) {
            if (!pf[j].revents)
                continue;
            if (map[j] == -1)
                accept_on(D.lfd, 0);
            else if (map[j] == -2)
                accept_on(D.tfd, 1);
            else
                conn_ready(map[j], pf[j].revents);
        }
        int64_t now = es_ctl_now_ms();
        if (now - last_tick >= TICK_MS) {
            tick(now);
            last_tick = now;
        }
    }
    return 0;
}

int es_ctl_daemon_main(int argc, char **argv)
{
    int managed = 0, lockfd = -1, rc = ES_CTL_EXIT_FAIL;
    long ready = -1;
    memset(&D, 0, sizeof(D));
    D.lfd = D.tfd = -1;
    D.op.cli = -1;
    if (daemon_getopt(argc, argv, &managed, &ready, &rc) < 0)
        return rc;
    rc = ES_CTL_EXIT_FAIL;
    if (managed) {
        /* Ends with run (no orphan controller), ignores the terminal's ^C. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            return ES_CTL_EXIT_FAIL;
        signal(SIGINT, SIG_IGN);
    }
    if (daemon_open(&lockfd) < 0)
        goto out;
    daemon_ready(managed, ready);
    daemon_loop(); /* poll failing ends it like SIGTERM (logged) */
    es_ctl_log("stopping");
    rc = ES_CTL_EXIT_OK;
out:
    for (int i = 0; i < MAX_CONNS; i++)
        if (D.conns[i])
            conn_close(i, NULL);
    if (D.lfd >= 0)
        close(D.lfd);
    if (D.tfd >= 0)
        close(D.tfd);
    if (lockfd >= 0)
        close(lockfd);
    return rc;
}
