/* easyscale-ctl's internal modules (one binary: controller/main.c holds
 * the table of subcommands, each a *_main(argc, argv) with argv[0] its
 * name, and calls the one named):
 *   gpus.c    the machine's GPUs (a probe through the driver API) and GPU specs
 *   sock.c    socket paths, the job lock, listening, connecting, the peer check
 *   job.c     the job file beside the socket (what a restarted daemon reads)
 *   client.c  one request to the daemon and its reply
 *   daemon.c  the daemon: registrations, heartbeats, status, scale, moves
 *   run.c     the launcher: ESTs, output, progress, schedule, the daemon
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
    int ordinal;        /* the driver's ordinal in this environment */
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

/* One GPU by ordinal ("2") or UUID: its index in g, or -ENOENT/-EINVAL. */
int es_ctl_gpu_lookup(const es_ctl_gpu_t *g, int n, const char *tok);

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
    int hb_timeout_ms;          /* an EST without heartbeat that long is unresponsive */
    int move_timeout_ms;        /* a move without answer that long failed */
    char tcp[96];               /* "HOST:PORT" to listen on as well ("" none) */
    uint64_t epoch;             /* placement epoch */
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

/* ---- client (client.c) --------------------------------------------------------- */

/* Sends one request and waits for the reply (timeout_ms, 0 none). Returns
 * 0 with *rc and *text (malloc'ed, NUL-terminated), or a negative errno
 * with err. */
int es_ctl_request(const char *target, uint32_t verb, int32_t rank, const char *arg,
                   uint32_t flags, int timeout_ms, int *rc, char **text, char *err,
                   size_t errlen);

/* The socket --socket names, or the one job's (for messages: err). */
int es_ctl_resolve_socket(const char *given, char *out, size_t len, char *err, size_t errlen);

/* ---- subcommands --------------------------------------------------------------- */

int es_ctl_daemon_main(int argc, char **argv);
int es_ctl_run_main(int argc, char **argv);

#endif
