/* easyscale-ctl run's internals, private to run's files (controller/run.c
 * and controller/run_*.c; the entry point, es_ctl_run_main, is ctl.h's):
 * the run's state R (the ESTs, the daemon, progress, the schedule), what
 * es_ctl_run_main works with (run_ctx_t) and the event loop's state
 * (run_loop_t), and the prototypes each file offers the others.
 *
 * Files and the one way their calls go (no file calls one above it):
 *   run.c (es_ctl_run_main: the options, the GPUs and the first placement,
 *     the socket, the job's start; the teardown; defines R)
 *     -> run_loop.c (the event loop, the node link of a job across hosts,
 *        the report)
 *     -> run_ests.c (the processes: the signals and the self-pipe, the
 *        daemon, the ESTs)
 *     -> run_sched.c (the schedule, its requests to the daemon, progress)
 *     -> run_out.c (the ESTs' output, run's messages, the progress line). */
#ifndef ES_CONTROLLER_RUN_INT_H
#define ES_CONTROLLER_RUN_INT_H

#include "controller/ctl.h"

#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LINE_MAX_BYTES 65536
#define MAX_EVENTS 256
#define DAEMON_RESTARTS 5        /* at most this many deaths before serving ... */
#define DAEMON_RESTART_WINDOW_MS 60000 /* ... within this window */
#define STOP_GRACE_MS 5000

typedef struct event {
    int by_step; /* else by time */
    uint64_t step;
    double time_s;
    uint32_t verb;
    int32_t rank;
    char arg[ES_PROTO_ARG_MAX + 1];
    char text[300]; /* the line, for messages */
    int tries;      /* sent again after its answer was lost with a daemon */
} event_t;

/* Sends of one event whose answer a dying daemon took with it. */
#define EVENT_TRIES 20

typedef struct outpipe {
    int fd;     /* read end, -1 at EOF */
    int to;     /* 1 or 2 */
    char *buf;
    size_t len;
} outpipe_t;

typedef struct est_proc {
    pid_t pid;
    int done;
    int status; /* wait status */
    outpipe_t out[2];
} est_proc_t;

/* The run's state: the ESTs, the daemon, progress and the schedule (R). */
typedef struct run_state {
    int n;
    est_proc_t *e;
    char sock[4096];     /* the daemon: its socket, or "tcp:HOST:PORT" on nodes 1.. */
    char token[80];      /* for a TCP daemon ("" none) */
    /* a job across hosts: nnodes > 1; this node's ranks are base .. base + n - 1 of world */
    int nnodes, node, base, world;
    int hb_timeout_ms;   /* node 0 waits that long for a silent daemon */
    char host[64];       /* this host's name (output prefix, node reports) */
    char master[96];     /* --master HOST:PORT */
    es_ctl_nlink_t nlink;
    char self[PATH_MAX];
    pid_t daemon;
    int64_t restarts[DAEMON_RESTARTS];
    int nrestarts;
    int stopping_daemon;
    int tty;
    int progress_mode; /* 0 off, 1 tty line, 2 plain lines */
    double progress_every;
    int line_shown;
    char line[512];
    /* progress */
    uint64_t step_min, last_rate_step;
    int64_t last_rate_ms;
    double rate;
    int have_progress;
    /* Every EST has registered with the daemon now running (the
     * schedule waits for it: a daemon started or restarted has not
     * re-learned the job until then, and would refuse a move of an EST
     * it has not heard from yet). daemon_gen counts daemons started, so
     * an answer of one that has died since is not taken for the next. */
    int all_registered;
    unsigned daemon_gen, prog_gen;
    /* The daemon now running answered a request: its death does not count
     * toward the restart limit (only a daemon that dies before it serves
     * does, a crash loop). */
    int daemon_served;
    char placement[1024];
    int64_t last_plain_ms;
    /* schedule */
    event_t ev[MAX_EVENTS];
    int nev, next_ev, ev_failed;
    int64_t start_ms;
    uint64_t step_max; /* the greatest step of the ESTs (progress) */
    /* the steps the ESTs wait at (EASYSCALE_HOLD_STEPS), and the release:
     * the last step whose events are done (rel_step + 1; 0 none), and
     * whether the daemon now running took it */
    char hold_steps[4096];
    double hold_timeout_s;
    uint64_t rel_step;
    int rel_sent;
} run_state_t;

/* What es_ctl_run_main works with: the options, the job it plans, and what
 * it holds until run_teardown releases it. The ESTs, the daemon, progress
 * and the schedule are in R. */
typedef struct run_ctx {
    /* the command line */
    const char *spec, *schedule, *sock, *shim_opt, *tcp, *progress;
    const char *master, *token_file;
    long n, nnodes, node_rank, kpn; /* --nnodes, --node-rank (-1 unset), --ests-per-node */
    double join;
    double hb, mv, hold;
    char **cmd;          /* CMD ARGS... (NULL: none given) */
    /* the plan */
    es_ctl_job_t job;
    char canonical[128]; /* d2: EASYSCALE_CANONICAL_DEVICE of the ESTs */
    char d2_gemm[8];     /* d2: EASYSCALE_D2_GEMM of the ESTs (int8, fma) */
    char shim[PATH_MAX]; /* "" not preloaded */
    /* what the run holds */
    char rdzv[64];       /* the rendezvous directory ("" none) */
    int port;            /* MASTER_PORT */
    int lockfd;          /* the job's lock until the daemon takes it */
    int go[2];           /* the held ESTs exec when it closes */
    int made_files;      /* the socket, job file and lock file are to be removed */
    char err[2300];
    int rc;              /* the exit status */
} run_ctx_t;

/* The event loop's state. */
typedef struct run_loop {
    es_ctl_areq_t prog, sched; /* the progress request and the schedule's, in flight */
    int live;              /* ESTs not reaped yet */
    int failed_rank;       /* the first EST that failed; -1 none, -2 stopped by a signal,
                            * -3 the job failed on another host */
    int fail_status;       /* its wait status */
    int stopping;          /* the ESTs were told to stop */
    int64_t stop_at;       /* then SIGKILL (0: sent) */
    int64_t next_progress; /* the next progress request */
    int64_t drain_until;   /* every EST ended: their pipes are cut off then */
    struct pollfd *pf;
    int *who;              /* per pf: rank * 2 + stream, -1 self-pipe, -2 progress, -3 schedule,
                            * -4 the node link */
} run_loop_t;

/* The run's state, one object (run.c); the code calls it R. */
extern run_state_t es_ctl_run_state;
#define R es_ctl_run_state

/* ---- run_loop.c ---- */

/* A job across hosts: this node's link to the daemon (run.c's start_job). */
void run_start_node_link(run_ctx_t *x);
/* The loop: output, children, progress, schedule, until every EST has
 * ended. Returns 0 or -ENOMEM. */
int run_loop(run_ctx_t *x, run_loop_t *l);
/* The job's end: how it went, and the exit status into x->rc. */
void run_report(run_ctx_t *x, const run_loop_t *l);

/* ---- run_ests.c ---- */

/* The self-pipe: the signal handler's wakeup of the event loop. */
extern int run_selfpipe[2];
/* Starts the job's daemon on R.sock and waits (30 s at most) until it is
 * ready. Returns its pid, or -1 with the reason in err. */
pid_t run_start_daemon(char *err, size_t errlen);
/* The shim path: --shim, else ../lib/libeasyscale.so beside this program. */
int run_find_shim(const char *given, char *out, size_t len, char *err, size_t errlen);
/* Signal sig to the ESTs not reaped yet. */
void run_stop_ests(int sig);
/* The event loop's round of the children (reaping, stopping the ESTs). */
void run_loop_children(run_loop_t *l, int64_t now);
/* What the ESTs need before they fork. Returns 0 or a negative errno. */
int run_prepare(run_ctx_t *x);
/* Forks the N ESTs, held until the go pipe closes. Returns 0 or a
 * negative errno. */
int run_spawn_ests(run_ctx_t *x);

/* ---- run_sched.c ---- */

/* --schedule FILE into R.ev, and the steps the ESTs wait at. Returns 0 or
 * a negative errno (the message in err). */
int run_parse_schedule(const char *path, char *err, size_t errlen);
/* The event loop's round of progress: the answer, or the next request. */
void run_loop_progress(run_loop_t *l, int64_t now);
/* One round of the schedule. Returns 1 when an event ended. */
int run_schedule_round(es_ctl_areq_t *a, int running, int move_timeout_ms);

/* ---- run_out.c ---- */

/* The progress line (a terminal's) off, and on again. */
void run_progress_clear(void);
void run_progress_show(void);
/* A message of run itself, between EST lines. */
void run_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One line of EST rank (its stdout or stderr: to), prefixed with its rank. */
void run_emit_line(int rank, int to, const char *p, size_t n);
/* Reads what the pipe has; emits whole lines (and over-long pieces). */
void run_pipe_input(int rank, outpipe_t *o);

#endif
