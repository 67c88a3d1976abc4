/* easyscale-ctl's internal modules (one binary: controller/main.c holds
 * the table of subcommands, each a *_main(argc, argv) with argv[0] its
 * name, and calls the one named):
 *   gpus.c    the machine's GPUs (a probe through the driver API) and GPU specs
 *   sock.c    socket paths, the job lock, listening, connecting, the peer check
 *   job.c     the job file beside the socket (what a restarted daemon reads)
 *   nodes.c   the hosts of a job across hosts (the daemon's table of nodes)
 *   nodelink.c  a node's link to that daemon (run's reports, the job's state)
 *   client.c  one request to the daemon and its reply
 *   daemon.c  the daemon: its loop and connections (daemon_int.h, private to
 *             daemon*.c: _state.c the job's state, _status.c status,
 *             _ops.c the requests, _hold.c an operation and a hold of the
 *             whole job, _nodes.c a job across hosts, _ests.c the ESTs'
 *             registrations, heartbeats and answers)
 *   run.c     the launcher: its steps and teardown (run_int.h, private to
 *             run*.c: _loop.c the event loop and the node link, _ests.c the
 *             EST processes and the daemon, _sched.c the schedule and
 *             progress, _out.c output)
 *   verify.c, verify_run.c  the checksum harness (controller/verify.h)
 *   digest.c  collective digests and diff (controller/digest.h)
 * Exit statuses of every subcommand: 0 ok, 1 the job or command failed,
 * 2 usage. */
#ifndef ES_CONTROLLER_CTL_H
#define ES_CONTROLLER_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/proto.h"

#define ES_CTL_EXIT_OK 0
#define ES_CTL_EXIT_FAIL 1
#define ES_CTL_EXIT_USAGE 2

#define ES_CTL_MAX_GPUS 64
#define ES_CTL_MAX_ESTS 1024

/* ---- small utilities (main.c) ------------------------------------------------ */

/* "easyscale-ctl: " + message + newline on stderr. */
void es_ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A determinism level's name: "off" (0), "d1", "d2". */
const char *es_ctl_level_name(int determinism);
/* The daemon's log: a timestamped line on stderr. */
void es_ctl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t es_ctl_now_ms(void);
uint64_t es_ctl_now_ns(void);

/* Strict parsers: the whole string, range-checked. Return 0 or -EINVAL. */
int es_ctl_parse_long(const char *s, long lo, long hi, long *out);
/* "256M", "8G", "1048576" (binary units, optional B/iB). */
int es_ctl_parse_size(const char *s, uint64_t *out);
/* "2.5", "10" seconds, in [lo, hi]. */
int es_ctl_parse_seconds(const char *s, double lo, double hi, double *out);

/* A growing text buffer (the daemon's replies). On allocation failure it
 * stops growing and sets oom. */
typedef struct es_ctl_buf {
    char *p;
    size_t len, cap;
    int oom;
} es_ctl_buf_t;
void es_ctl_buf_printf(es_ctl_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal (quoted, escaped). */
void es_ctl_buf_json_str(es_ctl_buf_t *b, const char *s);
void es_ctl_buf_free(es_ctl_buf_t *b);

/* ---- GPUs (gpus.c) ------------------------------------------------------------ */

typedef struct es_ctl_gpu {
    int node;           /* a job across hosts: the node whose GPU it is (0: this host) */
    int ordinal;        /* the driver's ordinal in this environment (its node's) */
    char uuid[48];      /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    char name[96];      /* the driver's name */
    char model[16];     /* t4 a100 a10 l4 h100 h200 b200 (and older ones by name), or "" unknown */
    uint64_t mem;       /* total memory, bytes */
    int sms, clock_khz, cc_major, cc_minor;
} es_ctl_gpu_t;

/* The GPUs the CUDA driver (libcuda.so.1, dlopen'ed in a child process so
 * the controller holds no driver state) shows in this environment. Returns
 * 0 and *n, or a negative errno with a reason in err. */
int es_ctl_gpus_probe(es_ctl_gpu_t *g, int max, int *n, char *err, size_t errlen);

/* The model key of a driver device name ("NVIDIA A100-SXM4-40GB" -> "a100"),
 * "" when not known. */
const char *es_ctl_gpu_model(const char *name);
/* 1 if d2's canonical device knows the model (a key of es_ctl_gpu_model),
 * 0 if not (older or unknown models: the job needs
 * EASYSCALE_CANONICAL_DEVICE). */
int es_ctl_d2_model_known(const char *model);

/* One GPU by ordinal ("2") or UUID: its index in g, or -ENOENT/-EINVAL.
 * _node: among node `node`'s GPUs only (a job across hosts; -1: any). */
int es_ctl_gpu_lookup(const es_ctl_gpu_t *g, int n, const char *tok);
int es_ctl_gpu_lookup_node(const es_ctl_gpu_t *g, int n, int node, const char *tok);

/* A GPU set: "all", or comma-separated ordinals, ranges ("0-3") and
 * UUIDs. Sets *mask (bit i = g[i]). Returns 0, -EINVAL (syntax, with err)
 * or -ENOENT (no such GPU, with err). */
int es_ctl_gpus_parse(const char *spec, const es_ctl_gpu_t *g, int n, uint64_t *mask, char *err,
                      size_t errlen);

/* Prior per-EST step time of a GPU, before any measurement: inversely
 * proportional to SMs x clock (arbitrary units, comparable between GPUs). */
uint64_t es_ctl_gpu_prior_ns(const es_ctl_gpu_t *g);

/* ---- sockets (sock.c) --------------------------------------------------------- */

/* The default directory: $XDG_RUNTIME_DIR/easyscale, else
 * /tmp/easyscale-<uid>; created 0700, refused unless it is a directory of
 * ours with no group/other access. */
int es_ctl_default_dir(char *buf, size_t len, char *err, size_t errlen);

/* The socket of the one job in the default directory (one whose daemon
 * holds its lock). -ENOENT none, -EEXIST several (err lists them). */
int es_ctl_find_job(char *path, size_t len, char *err, size_t errlen);

/* Removes the files of jobs in dir whose run (job-PID.sock) is gone and
 * whose lock nobody holds (a run killed with SIGKILL leaves them). */
void es_ctl_clean_stale(const char *dir);

/* Takes the job's lock (PATH.lock, flock). Returns the lock fd, or -EBUSY
 * with *holder set when another controller holds it. */
int es_ctl_lock(const char *sock, pid_t *holder);
/* Whether a controller holds the job's lock (1/0). */
int es_ctl_lock_held(const char *sock);

int es_ctl_listen_unix(const char *path);
/* "HOST:PORT" (PORT 0: any); the address bound in bound ("HOST:PORT"). */
int es_ctl_listen_tcp(const char *hostport, char *bound, size_t len);
/* "HOST:PORT" (HOST may be "[v6]") into host and port (0..65535). Returns 0
 * or -EINVAL. */
int es_ctl_split_hostport(const char *hp, char *host, size_t hl, char *port, size_t pl);

/* Connects to a daemon: a socket path or tcp:HOST:PORT (then sends the
 * authentication block with token). Returns the fd or a negative errno. */
int es_ctl_connect(const char *target, const char *token);

/* The peer check: the seam tests drive. A getter returns the peer's uid and
 * pid, the check refuses any uid but want. */
typedef int (*es_ctl_peercred_fn)(int fd, uid_t *uid, pid_t *pid);
int es_ctl_peercred_sys(int fd, uid_t *uid, pid_t *pid); /* SO_PEERCRED */
/* Returns 0 (and *pid), -EACCES (another uid) or the getter's error. */
int es_ctl_peer_check(int fd, uid_t want, es_ctl_peercred_fn get, pid_t *pid);

/* ---- the job file (job.c) ------------------------------------------------------ */

typedef struct es_ctl_job {
    int nests;
    int determinism;            /* 1 d1, 2 d2 */
    char canonical[128];        /* d2: the models of the job's GPUs ("a100,t4") */
    uint64_t est_mem;           /* bytes one EST needs (0: unknown) */
    int time_slicing;
    int shim_time_slice;        /* EASYSCALE_TIME_SLICE=on: the shim's own rotation holds every
                                 * EST on the job's one GPU (the ESTs report no slot) */
    int xhost_host;             /* EASYSCALE_XHOST=host (or the shim's time-slicing): the levels
                                 * between the hosts in host memory, so parks serve them */
    int hb_timeout_ms;          /* an EST without heartbeat that long is unresponsive */
    int move_timeout_ms;        /* a move without answer that long failed */
    char tcp[96];               /* "HOST:PORT" to listen on as well ("" none) */
    int nnodes;                 /* hosts of the job (1: one host); node 0 runs the daemon */
    int ests_per_node;          /* with nnodes > 1: node i has ranks i*k .. i*k+k-1 */
    int join_timeout_ms;        /* with nnodes > 1: a node unheard this long fails the job */
    uint64_t epoch;             /* placement epoch */
    /* with nnodes > 1, once the job failed: the node it failed for and why
     * ("" not failed), so that a restarted daemon still answers it */
    int failed_node;
    char failed[400];
    int ngpus;                  /* the machine's GPUs, as run probed them */
    es_ctl_gpu_t gpus[ES_CTL_MAX_GPUS];
    uint64_t slots;             /* the job's GPUs: bit i = gpus[i] */
    int place[ES_CTL_MAX_ESTS]; /* planned slot of each EST (index in gpus, -1 none) */
    pid_t pids[ES_CTL_MAX_ESTS];/* the processes run started (0: unknown) */
} es_ctl_job_t;

/* PATH.job beside the socket. Written atomically (temporary + rename,
 * 0600). Read strictly: a bad line is -EINVAL with err. */
int es_ctl_job_write(const char *sock, const es_ctl_job_t *j);
int es_ctl_job_read(const char *sock, es_ctl_job_t *j, char *err, size_t errlen);
void es_ctl_job_paths(const char *sock, char *jobf, char *lockf, size_t len);

/* ---- the nodes of a job across hosts (nodes.c) -------------------------------------- */

#define ES_CTL_MAX_NODES 64
enum { ES_NODE_RUNNING = 0, ES_NODE_DONE = 1, ES_NODE_FAILED = 2 };

typedef struct es_ctl_node {
    int seen;                   /* reported to this daemon */
    int state;                  /* ES_NODE_* of its last report */
    int64_t last_ms;            /* its last report */
    char host[64];              /* its host name */
    char gpus[192];             /* its GPUs: "a100:8192,a100:8192" (model:MiB) */
    char reason[256];           /* failed: why */
    /* the GPU its last report described (a node's reports take turns
     * through its GPUs: " gpu=I/N,ORDINAL,MIB,MODEL,INJOB,UUID"), until the
     * daemon took it (gpu_new 0) */
    es_ctl_gpu_t gpu;
    int gpu_index, gpu_count, gpu_injob, gpu_new;
} es_ctl_node_t;

typedef struct es_ctl_nodes {
    int n, k;                   /* nodes; ESTs per node (node i: ranks i*k .. i*k+k-1) */
    int timeout_ms;             /* a running node silent this long fails the job */
    int join_ms;                /* a node unheard this long after start fails the job */
    int64_t start_ms;           /* this daemon's start */
    int failed, failed_node;
    char reason[400];           /* "host H (node i): ..." */
    es_ctl_node_t node[ES_CTL_MAX_NODES];
} es_ctl_nodes_t;

void es_ctl_nodes_init(es_ctl_nodes_t *t, int n, int k, int timeout_ms, int join_ms, int64_t now);
/* The node of a rank. */
int es_ctl_nodes_of_rank(const es_ctl_nodes_t *t, int rank);
/* Node `node` reports "STATE HOST GPUS [REASON]" (STATE running, done, or
 * failed with a reason; running and done may end with one GPU's
 * description, "gpu=I/N,ORDINAL,MIB,MODEL,INJOB,UUID": GPU I of the node's
 * N, in the job or not, left in the node's gpu fields). Returns 0, -EINVAL
 * (bad node or report) or -EEXIST (another host holds that node and is
 * alive), with err. */
int es_ctl_nodes_report(es_ctl_nodes_t *t, int node, const char *arg, int64_t now, char *err,
                        size_t len);
/* A failure a daemon before this one recorded (the job file): the job is
 * failed for node `node` with reason (the whole "host H (node i): ..."),
 * and that node counts as ended. */
void es_ctl_nodes_restore_failed(es_ctl_nodes_t *t, int node, const char *reason);
/* Fails the job for a running node silent longer than the timeout, or one
 * never heard within the join timeout. Returns 1 when it failed it now. */
int es_ctl_nodes_tick(es_ctl_nodes_t *t, int64_t now);
/* The answer to a report: "running E/N", "done E/N" (every node done),
 * returning 0, or "failed E/N REASON", returning 1; E counts the nodes
 * that will not report again (done, failed, or gone). */
int es_ctl_nodes_answer(const es_ctl_nodes_t *t, int64_t now, char *buf, size_t len);
const char *es_ctl_node_state_name(int state);

/* ---- client (client.c) --------------------------------------------------------- */

/* Sends one request and waits for the reply (timeout_ms, 0 none). Returns
 * 0 with *rc and *text (malloc'ed, NUL-terminated), or a negative errno
 * with err. */
int es_ctl_request(const char *target, uint32_t verb, int32_t rank, const char *arg,
                   uint32_t flags, int timeout_ms, int *rc, char **text, char *err,
                   size_t errlen);

/* A request in flight, without blocking (fd -1: none; zero-initialise
 * with fd = -1). start: connects (TCP targets with token) and sends;
 * poll: 1 with *rc, *text (in the request's buffer, not NUL-terminated)
 * and *len, 0 pending, a negative errno (-ETIMEDOUT past timeout_ms);
 * close ends it (the buffer kept for the next), free releases all. */
typedef struct es_ctl_areq {
    int fd;
    es_proto_reader_t rd;
    uint8_t *buf;
    int64_t deadline;
} es_ctl_areq_t;
int es_ctl_areq_start(es_ctl_areq_t *a, const char *target, const char *token, uint32_t verb,
                      int32_t rank, const char *arg, uint32_t flags, int timeout_ms);
int es_ctl_areq_poll(es_ctl_areq_t *a, int *rc, const char **text, size_t *len);
void es_ctl_areq_close(es_ctl_areq_t *a);
void es_ctl_areq_free(es_ctl_areq_t *a);

/* ---- a node's link to the daemon of a job across hosts (nodelink.c) --------------- */

typedef struct es_ctl_nlink {
    char target[128], token[80];      /* the daemon: "tcp:HOST:PORT" or a socket path */
    char host[64], gpus[192];         /* this node's, for its reports */
    int node, timeout_ms;             /* no answer that long: the job failed (0: never) */
    es_ctl_areq_t req;
    int64_t next_ms, last_ok_ms;
    int state;                        /* ES_NODE_* reported */
    char reason[200];                 /* failed: why */
    int told;                         /* the state now set was answered */
    int sent_state;                   /* the state the request in flight reports */
    int job;                          /* ES_NODE_* of the job, as answered */
    int ended, n, lost;               /* nodes that ended of n; the link is given up */
    char job_reason[640];
    /* this node's GPUs, one described in each running or done report in
     * turn (" gpu=I/N,..."), so that node 0's daemon learns them (again,
     * after a restart) */
    char gpu[ES_CTL_MAX_GPUS][80];
    int ngpu, next_gpu, gpu_sent; /* gpu_sent: the request in flight describes next_gpu */
} es_ctl_nlink_t;

void es_ctl_nlink_init(es_ctl_nlink_t *l, const char *target, const char *token, int node,
                       const char *host, const char *gpus, int timeout_ms, int64_t now);
/* This node's state from now on (reported at once). */
void es_ctl_nlink_set(es_ctl_nlink_t *l, int state, const char *reason);
/* Adds GPU g of the node to what its reports describe in turn (index: its
 * place among the node's GPUs, of count; injob: one of the job's).
 * Returns 0 or -ENOSPC. */
int es_ctl_nlink_add_gpu(es_ctl_nlink_t *l, int index, int count, const es_ctl_gpu_t *g,
                         int injob);
/* The request in flight (-1 none), for poll. */
int es_ctl_nlink_fd(const es_ctl_nlink_t *l);
/* Takes an answer, sends the next report when due, gives the link up after
 * the timeout. Returns 1 when the job's state (l->job) changed. */
int es_ctl_nlink_step(es_ctl_nlink_t *l, int64_t now);
void es_ctl_nlink_free(es_ctl_nlink_t *l);

/* The socket --socket names, or the one job's (for messages: err). */
int es_ctl_resolve_socket(const char *given, char *out, size_t len, char *err, size_t errlen);

/* ---- subcommands --------------------------------------------------------------- */

int es_ctl_daemon_main(int argc, char **argv);
int es_ctl_run_main(int argc, char **argv);

#endif
