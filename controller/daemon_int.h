/* The daemon's internals (controller/daemon*.c; private to those files:
 * the subcommand's entry is es_ctl_daemon_main in controller/ctl.h): its
 * one state D (the job, its connections and ESTs, the operation in
 * flight, the rotation, the hold, the nodes of a job across hosts) and the
 * prototypes each file offers the others (prefix dmn_).
 *
 * Files (one thread: daemon.c's poll loop and tick call the others):
 *   daemon.c         the connections (frames in and out, the replies), the
 *                    poll loop and its tick, the entry point
 *   daemon_ests.c    the ESTs' messages: registration, heartbeat, answer
 *   daemon_ops.c     the commands' requests: scale, preempt, grant,
 *                    swap-out, swap-in, migrate, timeslice, release, and
 *                    the dispatch to status and a node's report
 *   daemon_hold.c    the operation in flight: its MOVEs, their answers, its
 *                    end; a hold of the whole job for a move the ESTs
 *                    refuse because of their collectives' staging
 *   daemon_nodes.c   the nodes of a job across hosts: reports, their GPUs,
 *                    the job's failure
 *   daemon_status.c  status and progress (text and JSON)
 *   daemon_state.c   the job's state: the job file, GPU names and masks,
 *                    the ESTs' GPUs, speeds, unresponsive ESTs
 */
#ifndef ES_CONTROLLER_DAEMON_INT_H
#define ES_CONTROLLER_DAEMON_INT_H

#include "controller/ctl.h"

#define MAX_CONNS 2200

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

/* A hold set at run time (see "a hold of the whole job" in daemon_hold.c). */
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

/* The daemon's one state (defined in daemon.c; zeroed, then set up, by
 * es_ctl_daemon_main). */
typedef struct dmn_state {
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
} dmn_state_t;

extern dmn_state_t dmn_d;
#define D dmn_d

/* ---- daemon.c: the connections ------------------------------------------------- */

/* Queues a frame on connection i; writes what it can now. */
void dmn_conn_send(int i, es_proto_msg_t *m);
/* An error to connection i, then close. */
void dmn_send_error(int i, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A reply (printable text) to a command, then close. */
void dmn_reply_text(int i, uint32_t seq, int rc, es_ctl_buf_t *b);
/* Input on connection i. */
void dmn_conn_input(int i);

/* ---- daemon_state.c: the job's state ------------------------------------------- */

double dmn_gib(uint64_t b);
/* The job file written (the ESTs' GPUs and pids as last heard). */
void dmn_persist(void);
/* A GPU of node `node` (-1: any) by ordinal or UUID: its index, or
 * -ENOENT / -EINVAL. */
int dmn_node_gpu_lookup(int node, const char *tok);
/* Whether rank r runs on another host than this daemon (node 0). */
int dmn_est_remote(int r);
/* The GPU of EST r's slot (-1: parked, or not described yet). */
int dmn_est_gpu(int r);
/* "2" for node 0's GPU ordinal 2, "1:2" for node 1's. */
int dmn_gpu_name(int g, char *buf, size_t len);
/* dmn_gpu_name, or "host" for g < 0. */
void dmn_gpu_label(int g, char *buf, size_t len);
/* The GPUs of mask m ("0,1,1:0"; "none"). */
void dmn_mask_label(uint64_t m, char *buf, size_t len);
/* How many ESTs are on GPU g. */
int dmn_on_gpu(int g);
/* The measured per-EST step time of a GPU model (create: a new entry). */
uint64_t *dmn_measured_for(const char *model, int create);
/* Per-EST step time for the GPUs of mask (measured or prior: *source). */
int dmn_speeds(uint64_t mask, uint64_t *ns, const char **source);
/* Flags (and logs, once) the ESTs without heartbeat for too long. */
void dmn_check_unresponsive(int64_t now);

/* ---- daemon_status.c ----------------------------------------------------------- */

void dmn_status_text(es_ctl_buf_t *b, int json);
void dmn_progress_text(es_ctl_buf_t *b);

/* ---- daemon_hold.c: the operation in flight ------------------------------------ */

/* Starts an operation: MOVE ops[r] to targets[r] for every EST r whose
 * target is not -2. */
void dmn_op_start(int cli, uint32_t seq, uint32_t verb, uint64_t new_slots, const int *targets,
                  const uint32_t *ops, const char *what);
/* Finishes the operation when every EST answered or the time is up. */
void dmn_op_check(int64_t now);

/* ---- daemon_ops.c: the commands' requests -------------------------------------- */

/* A refusal before anything moved. */
void dmn_refuse(int cli, uint32_t seq, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Whether rank r is a member of the rotation. */
int dmn_ts_member(int r);
/* A command's request on connection i. */
void dmn_handle_request(int i, const es_proto_msg_t *m);

/* ---- daemon_nodes.c: the nodes of a job across hosts --------------------------- */

/* The job across hosts failed now: logged, kept in the job file. */
void dmn_nodes_failed(void);
/* NODE: a node's report, answered with the job's state. */
void dmn_do_node(int i, uint32_t seq, int node, const char *arg);
/* A request refused in a job across hosts: 1 (the reply sent), else 0. */
int dmn_refuse_across_hosts(int i, uint32_t seq, uint32_t v);

/* ---- daemon_ests.c: the ESTs' messages ----------------------------------------- */

void dmn_handle_register(int i, const es_proto_msg_t *m);
void dmn_handle_heartbeat(int i, const es_proto_msg_t *m);
void dmn_handle_ack(int i, const es_proto_msg_t *m);

#endif
