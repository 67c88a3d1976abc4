/* easyscale-ctl run: starts a job. Probes the GPUs, plans the first
 * placement, writes the job file, starts the job's daemon (restarting it if
 * it dies), launches N EST processes with libeasyscale.so preloaded and the
 * variables a torchrun user expects, prefixes their output with their rank,
 * shows progress, replays a schedule of scale events, and exits with the
 * job's status when every EST has ended.
 *
 * The ESTs are forked first and held on a pipe until the job file names
 * their pids and the daemon listens, so no registration races the start.
 *
 * es_ctl_run_main takes its steps in order, each a short function on one
 * run_ctx_t: the options, the GPUs and the first placement, the socket,
 * the held ESTs, the job's files and the daemon, the event loop (output,
 * children, progress, schedule: run_loop_t), the report; run_teardown
 * releases whatever the steps took. */
#include "controller/ctl.h"
#include "controller/sched.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536
#define MAX_EVENTS 256
#define DAEMON_RESTARTS 5        /* at most this many deaths before serving ... */
#define DAEMON_RESTART_WINDOW_MS 60000 /* ... within this window */
#define STOP_GRACE_MS 5000

extern char **environ;

static const char *const usage =
    "usage: easyscale-ctl run --ests N [--gpus SPEC] [--determinism d1|d2|off]\n"
    "           [--schedule FILE] [--socket PATH] [--est-memory SIZE] [--no-time-slicing]\n"
    "           [--tcp HOST:PORT] [--heartbeat-timeout S] [--move-timeout S]\n"
    "           [--hold-timeout S]\n"
    "           [--nnodes N --node-rank R --master HOST:PORT --ests-per-node K\n"
    "            [--token-file F] [--join-timeout S]]\n"
    "           [--shim PATH|none] [--progress auto|off|SECONDS] -- CMD ARGS...\n"
    "Starts a job of N ESTs: N processes of CMD with libeasyscale.so preloaded\n"
    "(--shim, default ../lib/libeasyscale.so beside this program; none: not\n"
    "preloaded) and RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,\n"
    "MASTER_PORT (a free local port), ES_RDZV_DIR (a fresh directory),\n"
    "EASYSCALE_CONTROL (the job's socket), EASYSCALE_SLOT (the EST's GPU, by UUID),\n"
    "EASYSCALE_DETERMINISM and, in d2, EASYSCALE_CANONICAL_DEVICE (the models of the\n"
    "job's GPUs, unless set already) and EASYSCALE_D2_GEMM (int8 or fma, one value\n"
    "for the whole job: int8 unless set). Serves the job (a daemon on --socket, default\n"
    "$XDG_RUNTIME_DIR/easyscale/job-PID.sock, restarted if it dies) until every EST\n"
    "has ended. Each output line of an EST is prefixed with [RANK].\n"
    "  --gpus SPEC          the job's GPUs: all (default), ordinals, ranges, UUIDs\n"
    "  --determinism        d1 (default), d2, or off (the shim passes calls through)\n"
    "  --schedule FILE      scale events, one a line: 'step N|time SECONDS VERB ARGS'\n"
    "                       with VERB scale SPEC, preempt GPU, grant GPU, migrate RANK\n"
    "                       GPU, swap-out RANK, swap-in RANK GPU, timeslice GPU [RANKS]\n"
    "                       (RANKS: 2,3 or 0-3), timeslice off; in order, each once its\n"
    "                       step (the least step of the ESTs) or time (since launch)\n"
    "                       is reached; the ESTs wait at a step event's step until its\n"
    "                       events are done; step events in ascending order; '#' starts\n"
    "                       a comment\n"
    "  --est-memory SIZE    GPU memory one EST needs (e.g. 256M, 2G), for placement\n"
    "  --no-time-slicing    never place more ESTs on a GPU than fit in its memory\n"
    "  --tcp HOST:PORT      also listen on TCP (ESTs on other hosts; EASYSCALE_TOKEN)\n"
    "  --heartbeat-timeout  seconds without heartbeat before an EST is unresponsive (10)\n"
    "  --move-timeout       seconds a move may take before it counts as failed (300)\n"
    "  --hold-timeout       seconds the ESTs wait at a scheduled step for its events\n"
    "                       before they go on without them (the move timeout + 60)\n"
    "  --progress           auto (default: one updating line on a terminal, else a\n"
    "                       line every 30 s and on placement changes), off, or SECONDS\n"
    "A job across hosts: run it on every host with the same --nnodes, --master,\n"
    "--ests-per-node and token, and that host's --node-rank (0..N-1). Node 0 (the\n"
    "host of HOST) serves the job on TCP HOST:PORT; node R runs ranks R*K..R*K+K-1\n"
    "on its own GPUs with RANK, WORLD_SIZE (N*K), LOCAL_RANK, LOCAL_WORLD_SIZE (K),\n"
    "GROUP_RANK (R), GROUP_WORLD_SIZE (N), MASTER_ADDR (HOST) and MASTER_PORT\n"
    "(PORT + 1: the application's rendezvous); output lines are prefixed\n"
    "[HOSTNAME:RANK]. A node that fails, or is not heard from for the heartbeat\n"
    "timeout, fails the job on every host (exit 1 everywhere). Node R's GPUs are\n"
    "R:ORDINAL (1:0); migrations, preempt and grant act inside a host; --schedule:\n"
    "the same file on every host (node 0 asks for its events, every node's ESTs\n"
    "wait at its steps).\n"
    "  --nnodes N           hosts of the job (1..64; 1: this host only)\n"
    "  --node-rank R        this host's node (0..N-1)\n"
    "  --master HOST:PORT   node 0's address and the job's control port (not 0, < 65535)\n"
    "  --ests-per-node K    ESTs on every host (instead of --ests)\n"
    "  --token-file F       the job's token (first line; mode 0600), else EASYSCALE_TOKEN\n"
    "  --join-timeout S     seconds node 0 waits for a node's first report (120)\n"
    "Exit status: 0 every EST exited 0 (and every scheduled event succeeded), 1 an\n"
    "EST failed (named on stderr) or an event failed, 2 usage.\n";

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

static struct {
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
} R;

static volatile sig_atomic_t g_sig, g_chld;
static int g_selfpipe[2] = { -1, -1 };

static void on_sig(int s)
{
    int e = errno;
    if (s == SIGCHLD)
        g_chld = 1;
    else
        g_sig = s;
    char c = 0;
    if (write(g_selfpipe[1], &c, 1) < 0) { /* full: a wakeup is pending anyway */
    }
    errno = e;
}

static int bad_usage(const char *fmt, const char *a)
{
    char m[600];
    snprintf(m, sizeof(m), fmt, a ? a : "");
    es_ctl_err("%s", m);
    fputs(usage, stderr);
    return ES_CTL_EXIT_USAGE;
}

/* ---- schedule ---------------------------------------------------------------------- */

/* The steps the ESTs wait at: each step event's, ascending (a step event
 * before one of a smaller step could never be done at its step). */
static int schedule_holds(const char *path, char *err, size_t errlen)
{
    size_t o = 0;
    const event_t *last = NULL;
    R.hold_steps[0] = '\0';
    for (int i = 0; i < R.nev; i++) {
        const event_t *e = &R.ev[i];
        if (!e->by_step)
            continue;
        if (last && e->step < last->step) {
            snprintf(err, errlen, "%s: step events must be in ascending order (\"%s\" comes "
                     "after \"%s\")", path, e->text, last->text);
            return -EINVAL;
        }
        if (!last || e->step != last->step) {
            int w = snprintf(R.hold_steps + o, sizeof(R.hold_steps) - o, "%s%llu", o ? "," : "",
                             (unsigned long long)e->step);
            if (w < 0 || (size_t)w >= sizeof(R.hold_steps) - o) {
                snprintf(err, errlen, "%s: too many distinct steps", path);
                return -EINVAL;
            }
            o += (size_t)w;
        }
        last = e;
    }
    return 0;
}

/* A verb of the schedule: its protocol verb and how many tokens its line
 * has. Returns 0 or -EINVAL. */
static int schedule_verb(char **tok, int nt, uint32_t *verb, int *want)
{
    static const struct {
        const char *name;
        uint32_t verb;
        int want;
    } verbs[] = {
        { "scale", ES_VERB_SCALE, 4 },       { "preempt", ES_VERB_PREEMPT, 4 },
        { "grant", ES_VERB_GRANT, 4 },       { "swap-out", ES_VERB_SWAP_OUT, 4 },
        { "swap-in", ES_VERB_SWAP_IN, 5 },   { "migrate", ES_VERB_MIGRATE, 5 },
    };
    if (strcmp(tok[2], "timeslice") == 0) {
        *verb = ES_VERB_TIMESLICE;
        *want = nt == 5 && strcmp(tok[3], "off") != 0 ? 5 : 4;
        return 0;
    }
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(tok[2], verbs[i].name) == 0) {
            *verb = verbs[i].verb;
            *want = verbs[i].want;
            return 0;
        }
    return -EINVAL;
}

/* One event from a line's tokens ('step N|time SECONDS VERB ARGS').
 * Returns 0 or -EINVAL. */
static int schedule_event(char **tok, int nt, event_t *e)
{
    int want;
    long v;
    memset(e, 0, sizeof(*e));
    e->rank = -1;
    if (nt < 3)
        return -EINVAL;
    if (strcmp(tok[0], "step") == 0) {
        e->by_step = 1;
        if (es_ctl_parse_long(tok[1], 0, LONG_MAX, &v) < 0)
            return -EINVAL;
        e->step = (uint64_t)v;
    } else if (strcmp(tok[0], "time") != 0 || es_ctl_parse_seconds(tok[1], 0, 1e7, &e->time_s) < 0) {
        return -EINVAL;
    }
    if (schedule_verb(tok, nt, &e->verb, &want) < 0 || nt != want)
        return -EINVAL;
    if (e->verb == ES_VERB_TIMESLICE) {
        /* "GPU", "GPU RANKS" or "off": the daemon checks GPU and RANKS */
        if (strlen(tok[3]) + (nt == 5 ? 1 + strlen(tok[4]) : 0) > ES_PROTO_ARG_MAX)
            return -EINVAL;
        snprintf(e->arg, sizeof(e->arg), "%s%s%s", tok[3], nt == 5 ? " " : "",
                 nt == 5 ? tok[4] : "");
    } else if (e->verb == ES_VERB_SWAP_OUT || e->verb == ES_VERB_SWAP_IN ||
               e->verb == ES_VERB_MIGRATE) {
        if (es_ctl_parse_long(tok[3], 0, R.n - 1, &v) < 0)
            return -EINVAL;
        e->rank = (int32_t)v;
        if (want == 5)
            snprintf(e->arg, sizeof(e->arg), "%s", tok[4]);
    } else {
        if (strlen(tok[3]) > ES_PROTO_ARG_MAX)
            return -EINVAL;
        snprintf(e->arg, sizeof(e->arg), "%s", tok[3]);
    }
    size_t o = 0;
    for (int k = 0; k < nt && o < sizeof(e->text); k++) {
        int w = snprintf(e->text + o, sizeof(e->text) - o, "%s%s", k ? " " : "", tok[k]);
        if (w > 0)
            o += (size_t)w;
    }
    return 0;
}

static int parse_schedule(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    char line[1024];
    int lineno = 0, rc = 0;
    if (!f) {
        snprintf(err, errlen, "cannot read the schedule %s: %s", path, strerror(errno));
        return -errno;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok[8], *save = NULL;
        int nt = 0;
        for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
            if (nt == 8) {
                nt = 9;
                break;
            }
            tok[nt++] = t;
        }
        if (nt == 0)
            continue;
        if (R.nev >= MAX_EVENTS) {
            snprintf(err, errlen, "%s:%d: more than %d events", path, lineno, MAX_EVENTS);
            rc = -EINVAL;
            goto out;
        }
        if (schedule_event(tok, nt, &R.ev[R.nev]) < 0) {
            snprintf(err, errlen, "%s:%d: expected 'step N|time SECONDS' then scale SPEC, "
                     "preempt GPU, grant GPU, swap-out RANK, swap-in RANK GPU, migrate RANK GPU, "
                     "timeslice GPU [RANKS] or timeslice off (RANK < %d)",
                     path, lineno, R.n);
            rc = -EINVAL;
            goto out;
        }
        R.nev++;
    }
    rc = schedule_holds(path, err, errlen);
out:
    fclose(f);
    return rc;
}

/* ---- output ------------------------------------------------------------------------ */

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void progress_clear(void)
{
    if (R.line_shown) {
        write_all(2, "\r\033[K", 4);
        R.line_shown = 0;
    }
}

static void progress_show(void)
{
    if (R.progress_mode == 1 && R.line[0]) {
        char b[600];
        int n = snprintf(b, sizeof(b), "\r\033[K%s", R.line);
        write_all(2, b, (size_t)(n < (int)sizeof(b) ? n : (int)sizeof(b) - 1));
        R.line_shown = 1;
    }
}

/* A message of run itself, between EST lines. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char m[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    progress_clear();
    es_ctl_err("%s", m);
    progress_show();
}

static void emit_line(int rank, int to, const char *p, size_t n)
{
    char pre[96];
    int pl = R.nnodes > 1 ? snprintf(pre, sizeof(pre), "[%s:%d] ", R.host, R.base + rank)
                          : snprintf(pre, sizeof(pre), "[%d] ", rank);
    progress_clear();
    /* one write per line: lines of ESTs never interleave mid-line */
    char *b = malloc((size_t)pl + n + 1);
    if (b) {
        memcpy(b, pre, (size_t)pl);
        memcpy(b + pl, p, n);
        b[pl + n] = '\n';
        write_all(to, b, (size_t)pl + n + 1);
        free(b);
    }
    progress_show();
}

/* Reads what the pipe has; emits whole lines (and over-long pieces). */
static void pipe_input(int rank, outpipe_t *o)
{
    if (!o->buf && !(o->buf = malloc(LINE_MAX_BYTES)))
        return;
    ssize_t n = read(o->fd, o->buf + o->len, LINE_MAX_BYTES - o->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        if (o->len)
            emit_line(rank, o->to, o->buf, o->len);
        o->len = 0;
        close(o->fd);
        o->fd = -1;
        return;
    }
    o->len += (size_t)n;
    size_t start = 0;
    for (size_t k = 0; k < o->len; k++)
        if (o->buf[k] == '\n') {
            emit_line(rank, o->to, o->buf + start, k - start);
            start = k + 1;
        }
    if (start == 0 && o->len == LINE_MAX_BYTES) {
        emit_line(rank, o->to, o->buf, o->len);
        start = o->len;
    }
    memmove(o->buf, o->buf + start, o->len - start);
    o->len -= start;
}

/* ---- the daemon -------------------------------------------------------------------- */

static pid_t start_daemon(char *err, size_t errlen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        char fdb[16];
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(p[0]);
        fcntl(p[1], F_SETFD, 0);
        snprintf(fdb, sizeof(fdb), "%d", p[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, 0);
            close(devnull);
        }
        char *argv[] = { "easyscale-ctl", "daemon", "--socket", R.sock, "--managed",
                         "--ready-fd", fdb, NULL };
        execv(R.self, argv);
        fprintf(stderr, "easyscale-ctl: cannot start the daemon %s: %s\n", R.self, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    char c;
    struct pollfd pf = { .fd = p[0], .events = POLLIN };
    int k;
    do
        k = poll(&pf, 1, 30000);
    while (k < 0 && errno == EINTR);
    ssize_t r = k == 1 ? read(p[0], &c, 1) : -1;
    close(p[0]);
    if (r != 1) {
        snprintf(err, errlen, "the controller daemon did not start (see above)");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void daemon_ended(int status)
{
    int64_t now = es_ctl_now_ms();
    char how[64], err[600];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
    pid_t old = R.daemon;
    R.daemon = 0;
    if (R.stopping_daemon)
        return;
    /* only daemons that died before serving a request count (a crash loop) */
    int recent = 0;
    for (int i = 0; i < R.nrestarts; i++)
        if (now - R.restarts[i] < DAEMON_RESTART_WINDOW_MS)
            recent++;
    if (!R.daemon_served && recent >= DAEMON_RESTARTS) {
        say("the controller (pid %d) %s; not restarting it again (%d died within %d s before "
            "serving a request): training goes on without a controller", (int)old, how, recent,
            DAEMON_RESTART_WINDOW_MS / 1000);
        return;
    }
    if (!R.daemon_served) {
        R.restarts[R.nrestarts++ % DAEMON_RESTARTS] = now;
        if (R.nrestarts > DAEMON_RESTARTS)
            R.nrestarts = DAEMON_RESTARTS;
    }
    R.daemon_served = 0;
    pid_t p = start_daemon(err, sizeof(err));
    if (p < 0) {
        say("the controller (pid %d) %s, and a new one did not start (%s): training goes on "
            "without a controller", (int)old, how, err);
        return;
    }
    R.daemon = p;
    R.daemon_gen++;
    R.all_registered = 0;
    R.rel_sent = 0; /* the new daemon has released nothing */
    say("the controller (pid %d) %s; started a new one (pid %d), which re-learns the job from "
        "the ESTs (training went on)", (int)old, how, (int)p);
}

/* ---- requests to the daemon without blocking ----------------------------------------- */

/* A request to the job's daemon (R.sock; over TCP with R.token). */
static int ac_start(es_ctl_areq_t *a, uint32_t verb, int32_t rank, const char *arg, uint32_t flags,
                    int timeout_ms)
{
    return es_ctl_areq_start(a, R.sock, R.token[0] ? R.token : NULL, verb, rank, arg, flags,
                             timeout_ms);
}

/* ---- progress and schedule ----------------------------------------------------------- */

static void progress_update(const char *t, size_t len)
{
    char buf[2048];
    unsigned long long mn, mx;
    int reg, n, unresp, held;
    if (len >= sizeof(buf))
        len = sizeof(buf) - 1;
    memcpy(buf, t, len);
    buf[len] = '\0';
    char *pl = strstr(buf, "\nplacement");
    if (R.prog_gen != R.daemon_gen ||
        sscanf(buf, "steps %llu %llu %d %d %d %d", &mn, &mx, &reg, &n, &unresp, &held) != 6 ||
        !pl)
        return;
    R.daemon_served = 1;
    if (reg == n)
        R.all_registered = 1;
    R.step_max = mx;
    char *nl = strchr(pl + 1, '\n');
    if (nl)
        *nl = '\0';
    const char *place = pl + strlen("\nplacement");
    while (*place == ' ')
        place++;
    int64_t now = es_ctl_now_ms();
    if (!R.have_progress || mn < R.last_rate_step) {
        R.last_rate_step = mn;
        R.last_rate_ms = now;
    } else if (now - R.last_rate_ms >= 1000) {
        R.rate = (double)(mn - R.last_rate_step) * 1000.0 / (double)(now - R.last_rate_ms);
        R.last_rate_step = mn;
        R.last_rate_ms = now;
    }
    int changed = R.have_progress && strcmp(place, R.placement) != 0;
    R.have_progress = 1;
    R.step_min = mn;
    snprintf(R.placement, sizeof(R.placement), "%s", place);
    if (snprintf(R.line, sizeof(R.line), "step %llu (%.1f steps/s) | %d/%d ESTs%s | %s", mn,
                 R.rate, reg, n, unresp ? " | some unresponsive" : "", R.placement) < 0)
        R.line[0] = '\0';
    if (R.progress_mode == 1) {
        progress_clear();
        progress_show();
    } else if (R.progress_mode == 2 &&
               (changed || (R.progress_every > 0 && now - R.last_plain_ms >= R.progress_every * 1000))) {
        R.last_plain_ms = now;
        say("%s", R.line);
    }
}

static int event_due(const event_t *e, int64_t now)
{
    if (!R.all_registered)
        return 0;
    if (e->by_step)
        return R.have_progress && R.step_min >= e->step;
    return now - R.start_ms >= (int64_t)(e->time_s * 1000);
}

/* What the schedule's request in flight is. */
enum { SCHED_NONE = 0, SCHED_EVENT, SCHED_RELEASE };
static int g_sched_kind;
static unsigned g_sched_gen; /* the daemon generation it went to */

/* An event's answer, or none: the next event, and the release of its step
 * when it was the step's last event. */
static void event_done(event_t *e, int r, int rrc, const char *t, size_t tl)
{
    if (r == 1) {
        char txt[4096];
        size_t l = tl < sizeof(txt) - 1 ? tl : sizeof(txt) - 1;
        memcpy(txt, t, l);
        txt[l] = '\0';
        while (l && txt[l - 1] == '\n')
            txt[--l] = '\0';
        say("schedule: %s: %s", e->text, txt);
        if (rrc != 0) {
            R.ev_failed++;
        } else if (e->by_step && R.step_max > e->step) {
            say("schedule: %s: not at its step: an EST was at step %llu (its wait at step %llu "
                "timed out, see --hold-timeout)", e->text, (unsigned long long)R.step_max,
                (unsigned long long)e->step);
            R.ev_failed++;
        }
    } else {
        say("schedule: %s: no answer from the controller (%s)", e->text, es_proto_strerror(r));
        R.ev_failed++;
    }
    R.next_ev++;
    const event_t *n = R.next_ev < R.nev ? &R.ev[R.next_ev] : NULL;
    if (e->by_step && !(n && n->by_step && n->step == e->step)) {
        R.rel_step = e->step + 1;
        R.rel_sent = 0;
    }
}

/* The answer to the request in flight. Returns 1 when an event ended. */
static int schedule_answer(es_ctl_areq_t *a)
{
    int rrc = 0;
    const char *t = NULL;
    size_t tl = 0;
    int r = es_ctl_areq_poll(a, &rrc, &t, &tl);
    if (r == 0)
        return 0;
    es_ctl_areq_close(a);
    if (g_sched_kind == SCHED_RELEASE) {
        if (r == 1 && rrc == 0)
            R.rel_sent = g_sched_gen == R.daemon_gen;
        else if (r == 1)
            say("schedule: release of step %llu refused (%.*s)",
                (unsigned long long)(R.rel_step - 1), (int)tl, t); /* again next round */
        g_sched_kind = SCHED_NONE;
        return 0;
    }
    g_sched_kind = SCHED_NONE;
    event_t *e = &R.ev[R.next_ev];
    if (r < 0 && r != -ETIMEDOUT && e->tries < EVENT_TRIES) {
        /* the daemon died with it: the restarted one gets it as a desired state */
        e->tries++;
        say("schedule: %s: no answer from the controller (%s); sending it again once the "
            "ESTs have registered with the next one", e->text, es_proto_strerror(r));
        if (R.daemon_gen == g_sched_gen)
            R.all_registered = 0; /* the daemon may not be reaped yet: wait for its successor */
        return 0;
    }
    event_done(e, r, rrc, t, tl);
    return 1;
}

/* One round of the schedule: the answer in flight, else the release of a
 * step whose events are done, else the next event when it is due. Returns
 * 1 when an event ended. */
static int schedule_round(es_ctl_areq_t *a, int running, int move_timeout_ms)
{
    if (a->fd >= 0)
        return schedule_answer(a);
    if (!running || R.daemon <= 0 || !R.all_registered)
        return 0;
    char arg[32];
    if (R.rel_step && !R.rel_sent) {
        snprintf(arg, sizeof(arg), "%llu", (unsigned long long)(R.rel_step - 1));
        if (ac_start(a, ES_VERB_RELEASE, -1, arg, 0, 10000) < 0) {
            es_ctl_areq_close(a); /* the daemon restarting: again next round */
            return 0;
        }
        g_sched_kind = SCHED_RELEASE;
        g_sched_gen = R.daemon_gen;
        return 0;
    }
    if (R.next_ev >= R.nev || !event_due(&R.ev[R.next_ev], es_ctl_now_ms()))
        return 0;
    event_t *e = &R.ev[R.next_ev];
    if (ac_start(a, e->verb, e->rank, e->arg, e->tries ? ES_REQ_AGAIN : 0,
                 move_timeout_ms + 30000) < 0) {
        es_ctl_areq_close(a);
        return 0;
    }
    g_sched_kind = SCHED_EVENT;
    g_sched_gen = R.daemon_gen;
    return 0;
}

/* nftw callback: the rendezvous directory's files, then the directory. */
static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)f;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* ---- EST processes -------------------------------------------------------------------- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t l = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The shim path: --shim, else ../lib/libeasyscale.so beside this program. */
static int find_shim(const char *given, char *out, size_t len, char *err, size_t errlen)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    if (given && strcmp(given, "none") == 0) {
        out[0] = '\0';
        return 0;
    }
    if (!given) {
        snprintf(dir, sizeof(dir), "%s", R.self);
        if (snprintf(tmp, sizeof(tmp), "%s/../lib/libeasyscale.so", dirname(dir)) < 0)
            tmp[0] = '\0';
        given = tmp;
    }
    char *rp = realpath(given, NULL);
    if (!rp) {
        int e = errno;
        if (snprintf(err, errlen, "cannot find libeasyscale.so at %s (%s); name it with --shim "
                     "PATH", given, strerror(e)) < 0)
            err[0] = '\0';
        return -ENOENT;
    }
    snprintf(out, len, "%s", rp);
    free(rp);
    return 0;
}

/* The EST's environment, set in the forked child before exec. */
static void est_env(int r, const es_ctl_job_t *job, const char *shim, const char *rdzv, int port,
                    const char *canonical, const char *d2_gemm)
{
    char b[128];
    snprintf(b, sizeof(b), "%d", R.base + r);
    setenv("RANK", b, 1);
    snprintf(b, sizeof(b), "%d", r);
    setenv("LOCAL_RANK", b, 1);
    snprintf(b, sizeof(b), "%d", R.world);
    setenv("WORLD_SIZE", b, 1);
    snprintf(b, sizeof(b), "%d", R.n);
    setenv("LOCAL_WORLD_SIZE", b, 1);
    snprintf(b, sizeof(b), "%d", R.node);
    setenv("GROUP_RANK", b, 1);
    snprintf(b, sizeof(b), "%d", R.nnodes);
    setenv("GROUP_WORLD_SIZE", b, 1);
    if (R.nnodes > 1) {
        snprintf(b, sizeof(b), "%.*s", (int)(strrchr(R.master, ':') - R.master), R.master);
        setenv("MASTER_ADDR", b, 1);
        unsetenv("ES_RDZV_DIR"); /* no directory the hosts share */
    } else {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("ES_RDZV_DIR", rdzv, 1);
    }
    snprintf(b, sizeof(b), "%d", port);
    setenv("MASTER_PORT", b, 1);
    setenv("EASYSCALE_CONTROL", R.sock, 1);
    if (R.hold_steps[0]) { /* the ESTs wait at these steps for the schedule's events */
        setenv("EASYSCALE_HOLD_STEPS", R.hold_steps, 1);
        snprintf(b, sizeof(b), "%d", (int)(R.hold_timeout_s + 0.999));
        setenv("EASYSCALE_HOLD_TIMEOUT", b, 1);
    } else {
        unsetenv("EASYSCALE_HOLD_STEPS");
    }
    if (job->shim_time_slice) /* one GPU (checked): the shim's rotation */
        unsetenv("EASYSCALE_SLOT");
    else
        setenv("EASYSCALE_SLOT", job->place[r] >= 0 ? job->gpus[job->place[r]].uuid : "", 1);
    setenv("EASYSCALE_DETERMINISM", es_ctl_level_name(job->determinism), 1);
    if (job->determinism == 2) {
        setenv("EASYSCALE_CANONICAL_DEVICE", canonical, 1);
        setenv("EASYSCALE_D2_GEMM", d2_gemm, 1); /* one path for every EST: one set of bits */
    }
    unsetenv("EASYSCALE_EST_PID");
    if (strncmp(R.sock, "tcp:", 4) == 0)
        setenv("EASYSCALE_TOKEN", R.token, 1); /* ESTs of nodes 1..: node 0's daemon over TCP */
    else
        unsetenv("EASYSCALE_TOKEN"); /* local ESTs use the unix socket */
    if (shim[0]) {
        const char *cur = getenv("LD_PRELOAD");
        if (!cur || !strstr(cur, "libeasyscale.so")) {
            char *v = malloc((cur ? strlen(cur) : 0) + strlen(shim) + 2);
            if (v) {
                sprintf(v, "%s%s%s", cur ? cur : "", cur && *cur ? ":" : "", shim);
                setenv("LD_PRELOAD", v, 1);
                free(v);
            }
        }
    }
}

static void stop_ests(int sig)
{
    for (int r = 0; r < R.n; r++)
        if (R.e[r].pid > 0 && !R.e[r].done)
            kill(R.e[r].pid, sig);
}

static void reap(int *live, int *failed_rank, int *first_fail_status)
{
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (p == R.daemon) {
            daemon_ended(st);
            continue;
        }
        for (int r = 0; r < R.n; r++) {
            if (R.e[r].pid != p || R.e[r].done)
                continue;
            R.e[r].done = 1;
            R.e[r].status = st;
            (*live)--;
            int bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            if (bad && *failed_rank == -1) {
                *failed_rank = r;
                *first_fail_status = st;
                if (*live > 0) {
                    if (WIFSIGNALED(st))
                        say("EST %d (pid %d) was killed by signal %d; stopping the others",
                            R.base + r, (int)p, WTERMSIG(st));
                    else
                        say("EST %d (pid %d) exited with status %d; stopping the others",
                            R.base + r, (int)p, WEXITSTATUS(st));
                }
            }
        }
    }
}

/* ---- run's steps ------------------------------------------------------------------------ */

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
    int *who;              /* per pf: rank * 2 + stream, -1 self-pipe, -2 progress, -3 schedule */
} run_loop_t;

static void run_ctx_init(run_ctx_t *x)
{
    memset(&R, 0, sizeof(R));
    memset(x, 0, sizeof(*x));
    x->spec = "all";
    x->progress = "auto";
    x->hb = 10;
    x->mv = 300;
    x->hold = -1;
    x->nnodes = 1;
    x->node_rank = -1;
    x->join = 120;
    x->job.determinism = 1;
    x->job.time_slicing = 1;
    x->lockfd = x->go[0] = x->go[1] = -1;
    x->rc = ES_CTL_EXIT_FAIL;
}

/* A usage error: the message and the usage on stderr, exit status 2. */
static int usage_fail(run_ctx_t *x, const char *fmt, const char *a)
{
    x->rc = bad_usage(fmt, a);
    return -EINVAL;
}

/* An error that ends the run with exit status rc. */
static int run_fail(run_ctx_t *x, int rc, int err)
{
    x->rc = rc;
    return err;
}

static const struct option run_opts[] = {
    { "ests", required_argument, NULL, 'n' },
    { "gpus", required_argument, NULL, 'g' },
    { "determinism", required_argument, NULL, 'd' },
    { "schedule", required_argument, NULL, 'S' },
    { "socket", required_argument, NULL, 's' },
    { "est-memory", required_argument, NULL, 'm' },
    { "no-time-slicing", no_argument, NULL, 'T' },
    { "tcp", required_argument, NULL, 't' },
    { "heartbeat-timeout", required_argument, NULL, 'H' },
    { "move-timeout", required_argument, NULL, 'M' },
    { "hold-timeout", required_argument, NULL, 'W' },
    { "shim", required_argument, NULL, 'L' },
    { "progress", required_argument, NULL, 'p' },
    { "nnodes", required_argument, NULL, 'N' },
    { "node-rank", required_argument, NULL, 'R' },
    { "master", required_argument, NULL, 'A' },
    { "ests-per-node", required_argument, NULL, 'K' },
    { "token-file", required_argument, NULL, 'F' },
    { "join-timeout", required_argument, NULL, 'J' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 }
};

/* The options into x. Returns 0, -EINVAL (usage) or -ECANCELED (--help
 * shown: exit 0). */
static int run_getopt(run_ctx_t *x, int argc, char **argv)
{
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", run_opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &x->n) < 0)
                return usage_fail(x, "bad --ests \"%s\" (1 to 1024)", optarg);
            break;
        case 'g': x->spec = optarg; break;
        case 'd':
            if (strcmp(optarg, "d1") && strcmp(optarg, "d2") && strcmp(optarg, "off"))
                return usage_fail(x, "bad --determinism \"%s\" (d1, d2 or off)", optarg);
            x->job.determinism = strcmp(optarg, "off") == 0 ? 0 : optarg[1] - '0';
            break;
        case 'S': x->schedule = optarg; break;
        case 's': x->sock = optarg; break;
        case 'm':
            if (es_ctl_parse_size(optarg, &x->job.est_mem) < 0)
                return usage_fail(x, "bad --est-memory \"%s\" (e.g. 256M, 2G)", optarg);
            break;
        case 'T': x->job.time_slicing = 0; break;
        case 't': x->tcp = optarg; break;
        case 'H':
            if (es_ctl_parse_seconds(optarg, 0.1, 3600, &x->hb) < 0)
                return usage_fail(x, "bad --heartbeat-timeout \"%s\" (0.1 to 3600 s)", optarg);
            break;
        case 'M':
            if (es_ctl_parse_seconds(optarg, 0.1, 86400, &x->mv) < 0)
                return usage_fail(x, "bad --move-timeout \"%s\" (0.1 to 86400 s)", optarg);
            break;
        case 'W':
            if (es_ctl_parse_seconds(optarg, 1, 86400, &x->hold) < 0)
                return usage_fail(x, "bad --hold-timeout \"%s\" (1 to 86400 s)", optarg);
            break;
        case 'L': x->shim_opt = optarg; break;
        case 'p': x->progress = optarg; break;
        case 'N':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_NODES, &x->nnodes) < 0)
                return usage_fail(x, "bad --nnodes \"%s\" (1 to 64)", optarg);
            break;
        case 'R':
            if (es_ctl_parse_long(optarg, 0, ES_CTL_MAX_NODES - 1, &x->node_rank) < 0)
                return usage_fail(x, "bad --node-rank \"%s\" (0 to 63)", optarg);
            break;
        case 'A': x->master = optarg; break;
        case 'K':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &x->kpn) < 0)
                return usage_fail(x, "bad --ests-per-node \"%s\" (1 to 1024)", optarg);
            break;
        case 'F': x->token_file = optarg; break;
        case 'J':
            if (es_ctl_parse_seconds(optarg, 1, 86400, &x->join) < 0)
                return usage_fail(x, "bad --join-timeout \"%s\" (1 to 86400 s)", optarg);
            break;
        case 'h': fputs(usage, stdout); return run_fail(x, ES_CTL_EXIT_OK, -ECANCELED);
        default: return usage_fail(x, "unknown or incomplete option \"%s\"", argv[optind - 1]);
        }
    }
    x->cmd = optind < argc ? argv + optind : NULL;
    return 0;
}

/* The token of a job across hosts: --token-file's first line (a file
 * others may read is refused), else EASYSCALE_TOKEN; into R.token and the
 * environment (the daemon reads it there). Returns 0 or -EINVAL (usage). */
static int read_token(run_ctx_t *x)
{
    const char *tok = getenv("EASYSCALE_TOKEN");
    char line[128] = "";
    if (x->token_file) {
        struct stat st;
        FILE *f = fopen(x->token_file, "re");
        if (!f) {
            es_ctl_err("--token-file %s: %s", x->token_file, strerror(errno));
            return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
        }
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
            fclose(f);
            es_ctl_err("--token-file %s can be read by others (mode %04o): chmod 600 it",
                       x->token_file, (unsigned)(st.st_mode & 07777));
            return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
        }
        if (!fgets(line, sizeof(line), f))
            line[0] = '\0';
        fclose(f);
        line[strcspn(line, "\r\n")] = '\0';
        tok = line;
    }
    if (!tok || es_proto_token_valid(tok) < 0)
        return usage_fail(x, "a job across hosts needs its token in --token-file or "
                          "EASYSCALE_TOKEN (16 to 64 printable characters, no spaces)%s", NULL);
    snprintf(R.token, sizeof(R.token), "%s", tok);
    setenv("EASYSCALE_TOKEN", R.token, 1);
    return 0;
}

/* --master HOST:PORT: its port (1..65534: PORT + 1 is the application's)
 * into *port. Returns 0 or -EINVAL. */
static int master_port(const char *m, int *port)
{
    char host[64], ps[16];
    long p;
    if (strlen(m) >= sizeof(R.master) ||
        es_ctl_split_hostport(m, host, sizeof(host), ps, sizeof(ps)) < 0 ||
        es_ctl_parse_long(ps, 1, 65534, &p) < 0)
        return -EINVAL;
    *port = (int)p;
    return 0;
}

/* A job across hosts (--nnodes > 1): its options, this node's ranks, the
 * token; one host: --ests-per-node is --ests. Returns 0 or -EINVAL. */
static int run_check_nodes(run_ctx_t *x)
{
    R.nnodes = (int)x->nnodes;
    if (x->nnodes == 1) {
        if (x->node_rank > 0 || x->master || x->token_file)
            return usage_fail(x, "--node-rank, --master and --token-file are for a job across "
                              "hosts (--nnodes 2 or more)%s", NULL);
        if (x->kpn && x->n && x->n != x->kpn)
            return usage_fail(x, "--ests and --ests-per-node differ on one host%s", NULL);
        if (x->kpn)
            x->n = x->kpn;
        R.world = (int)x->n;
        return 0;
    }
    if (x->node_rank < 0 || !x->master || !x->kpn)
        return usage_fail(x, "a job across hosts needs --node-rank, --master and "
                          "--ests-per-node%s", NULL);
    if (x->node_rank >= x->nnodes)
        return usage_fail(x, "--node-rank must be below --nnodes (0 to N-1)%s", NULL);
    if (x->n && x->n != x->nnodes * x->kpn)
        return usage_fail(x, "--ests is not --nnodes x --ests-per-node%s", NULL);
    if (x->nnodes * x->kpn > ES_CTL_MAX_ESTS)
        return usage_fail(x, "a job of more than 1024 ESTs%s", NULL);
    if (x->tcp)
        return usage_fail(x, "--tcp: a job across hosts listens on --master%s", NULL);
    int port;
    if (master_port(x->master, &port) < 0)
        return usage_fail(x, "bad --master \"%s\" (HOST:PORT, PORT 1 to 65534)", x->master);
    if (read_token(x) < 0)
        return -EINVAL;
    R.node = (int)x->node_rank;
    R.base = R.node * (int)x->kpn;
    R.world = (int)(x->nnodes * x->kpn);
    x->n = x->kpn;
    x->port = port + 1; /* MASTER_PORT: the application's rendezvous */
    snprintf(R.master, sizeof(R.master), "%s", x->master);
    if (gethostname(R.host, sizeof(R.host)) < 0 || !R.host[0])
        snprintf(R.host, sizeof(R.host), "node%d", R.node);
    R.host[sizeof(R.host) - 1] = '\0';
    for (char *h = R.host; *h; h++) /* one word in the node's reports */
        if (*h <= ' ' || *h >= 0x7f)
            *h = '_';
    snprintf(x->job.tcp, sizeof(x->job.tcp), "%s", x->master);
    x->job.nnodes = R.nnodes;
    x->job.ests_per_node = (int)x->kpn;
    x->job.join_timeout_ms = (int)(x->join * 1000);
    return 0;
}

/* What the options mean together: the job's size, the hold timeout,
 * progress, TCP. Returns 0 or -EINVAL (usage). */
static int run_check_opts(run_ctx_t *x)
{
    if (run_check_nodes(x) < 0)
        return -EINVAL;
    if (!x->n)
        return usage_fail(x, "run needs --ests N (or --ests-per-node K)%s", NULL);
    R.hold_timeout_s = x->hold > 0 ? x->hold : (x->mv + 60 < 86400 ? x->mv + 60 : 86400);
    if (!x->cmd)
        return usage_fail(x, "run needs a command: -- CMD ARGS...%s", NULL);
    R.n = (int)x->n;
    if (R.nnodes <= 1)
        R.world = R.n;
    R.tty = isatty(2);
    if (strcmp(x->progress, "auto") == 0) {
        R.progress_mode = R.tty ? 1 : 2;
        R.progress_every = R.tty ? 0 : 30;
    } else if (strcmp(x->progress, "off") == 0) {
        R.progress_mode = 0;
    } else if (es_ctl_parse_seconds(x->progress, 0.1, 86400, &R.progress_every) == 0) {
        R.progress_mode = 2;
    } else {
        return usage_fail(x, "bad --progress \"%s\" (auto, off or seconds)", x->progress);
    }
    if (x->tcp) {
        const char *tok = getenv("EASYSCALE_TOKEN");
        if (strlen(x->tcp) >= sizeof(x->job.tcp) || !strchr(x->tcp, ':'))
            return usage_fail(x, "bad --tcp \"%s\" (HOST:PORT)", x->tcp);
        if (!tok || es_proto_token_valid(tok) < 0)
            return usage_fail(x, "--tcp needs EASYSCALE_TOKEN (16 to 64 printable characters, "
                              "no spaces)%s", NULL);
        snprintf(x->job.tcp, sizeof(x->job.tcp), "%s", x->tcp);
    }
    return 0;
}

/* The schedule (parsed before anything starts), this program and the
 * shim. Returns 0 or a negative errno (x->rc set). */
static int run_locate(run_ctx_t *x)
{
    if (x->schedule && parse_schedule(x->schedule, x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    }
    /* across hosts: node 0 asks for the events; the other nodes' ESTs only
     * wait at their steps (released by node 0's daemon) */
    if (R.node > 0)
        R.nev = 0;
    ssize_t sl = readlink("/proc/self/exe", R.self, sizeof(R.self) - 1);
    if (sl <= 0) {
        es_ctl_err("cannot find this program (/proc/self/exe): %s", strerror(errno));
        return -ENOENT;
    }
    R.self[sl] = '\0';
    if (find_shim(x->shim_opt, x->shim, sizeof(x->shim), x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return -ENOENT;
    }
    return 0;
}

/* d2's canonical device: EASYSCALE_CANONICAL_DEVICE, else the models of
 * the job's GPUs, each once. Returns 0 or -ENOTSUP (a model d2 does not
 * know). */
static int d2_canonical(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    const char *env = getenv("EASYSCALE_CANONICAL_DEVICE");
    if (env && *env) {
        snprintf(x->canonical, sizeof(x->canonical), "%s", env);
        goto out;
    }
    size_t o = 0;
    for (int g = 0; g < job->ngpus; g++) {
        if (!(job->slots & (1ull << g)))
            continue;
        if (!es_ctl_d2_model_known(job->gpus[g].model)) {
            es_ctl_err("GPU %d (%s) is of a model d2 does not know (t4 a100 a10 l4 h100 h200 "
                       "b200); set EASYSCALE_CANONICAL_DEVICE", job->gpus[g].ordinal,
                       job->gpus[g].name);
            return -ENOTSUP;
        }
        char key[20], have[140];
        snprintf(key, sizeof(key), ",%s,", job->gpus[g].model);
        snprintf(have, sizeof(have), ",%s,", x->canonical);
        if (strstr(have, key))
            continue;
        int w = snprintf(x->canonical + o, sizeof(x->canonical) - o, "%s%s", o ? "," : "",
                         job->gpus[g].model);
        if (w > 0)
            o += (size_t)w;
    }
out:
    snprintf(job->canonical, sizeof(job->canonical), "%s", x->canonical);
    return 0;
}

/* d2's GEMM path, one for the whole job (a GPU of the job choosing its own
 * would give the job mixed bits): EASYSCALE_D2_GEMM as the shim parses it
 * (int8 or fma; unset: int8). Returns 0 or -EINVAL (named). */
static int d2_gemm_path(run_ctx_t *x)
{
    const char *env = getenv("EASYSCALE_D2_GEMM");
    if (!env)
        env = "int8";
    if (strcmp(env, "int8") != 0 && strcmp(env, "fma") != 0) {
        es_ctl_err("EASYSCALE_D2_GEMM=\"%s\" is not valid: expected int8 or fma", env);
        return -EINVAL;
    }
    snprintf(x->d2_gemm, sizeof(x->d2_gemm), "%s", env);
    return 0;
}

/* The machine's GPUs, the job's (--gpus), d2's canonical device, and the
 * shim's own time-slicing's limits. Returns 0 or a negative errno (x->rc
 * set). */
static int run_gpus(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    if (es_ctl_gpus_probe(job->gpus, ES_CTL_MAX_GPUS, &job->ngpus, x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return -ENODEV;
    }
    int prc = es_ctl_gpus_parse(x->spec, job->gpus, job->ngpus, &job->slots, x->err,
                                sizeof(x->err));
    if (prc < 0) {
        es_ctl_err("--gpus: %s", x->err);
        return run_fail(x, prc == -EINVAL ? ES_CTL_EXIT_USAGE : ES_CTL_EXIT_FAIL, prc);
    }
    if (job->determinism == 2 && d2_canonical(x) < 0)
        return -ENOTSUP;
    if (job->determinism == 2 && d2_gemm_path(x) < 0)
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    /* The shim's time-slicing (EASYSCALE_TIME_SLICE=on or overlap, docs/MOVING.md) groups
     * the ESTs of a GPU by local rank modulo the GPUs it sees, without
     * EASYSCALE_SLOT: under the controller that is the same placement only
     * when the job has one GPU and sees only it. The job file says so: the
     * daemon counts every EST (which reports no slot) on that GPU. */
    const char *ts = getenv("EASYSCALE_TIME_SLICE");
    job->shim_time_slice = ts && (strcmp(ts, "on") == 0 || strcmp(ts, "overlap") == 0);
    if (job->shim_time_slice && (__builtin_popcountll(job->slots) != 1 || job->ngpus != 1)) {
        es_ctl_err("EASYSCALE_TIME_SLICE=%s: the controller runs time-sliced jobs on one GPU "
                   "that is the only one visible (CUDA_VISIBLE_DEVICES); this job has %d of %d "
                   "(on several GPUs: 'easyscale-ctl timeslice' while it runs, or a timeslice "
                   "event of --schedule)", ts, __builtin_popcountll(job->slots), job->ngpus);
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    }
    return 0;
}

/* The job's timeouts and first placement (the scheduler, with the prior
 * speeds). Returns 0 or a negative errno. */
static int run_plan(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    es_sched_slot_t slots[ES_CTL_MAX_GPUS];
    int idx[ES_CTL_MAX_GPUS], ns = 0, place[ES_CTL_MAX_ESTS], moves, rc;
    uint64_t maxl;
    job->nests = R.n;
    job->hb_timeout_ms = (int)(x->hb * 1000);
    R.hb_timeout_ms = job->hb_timeout_ms;
    job->move_timeout_ms = (int)(x->mv * 1000);
    for (int g = 0; g < job->ngpus; g++)
        if (job->slots & (1ull << g)) {
            idx[ns] = g;
            slots[ns].est_ns = es_ctl_gpu_prior_ns(&job->gpus[g]);
            slots[ns].mem = job->gpus[g].mem;
            ns++;
        }
    es_sched_in_t in = { .nslots = ns, .slots = slots, .nests = R.n, .est_mem = job->est_mem,
                         .time_slicing = job->time_slicing, .swap_ns = job->est_mem / 5 };
    if ((rc = es_sched_place(&in, place, &maxl, &moves, x->err, sizeof(x->err))) < 0) {
        es_ctl_err("cannot place the job: %s", x->err);
        return rc;
    }
    for (int r = 0; r < R.n; r++)
        job->place[r] = idx[place[r]];
    /* node 0 of a job across hosts: the other hosts' ESTs are on GPUs of theirs */
    job->nests = R.nnodes > 1 ? R.world : R.n;
    for (int r = R.n; r < job->nests; r++)
        job->place[r] = -1;
    return 0;
}

/* The job's socket: --socket (made absolute), else job-PID.sock in the
 * default directory (its stale jobs' files removed). Returns 0 or a
 * negative errno (x->rc set). */
static int run_socket_path(run_ctx_t *x)
{
    if (R.nnodes > 1 && R.node > 0) { /* node 0's daemon */
        snprintf(R.sock, sizeof(R.sock), "tcp:%s", R.master);
        return 0;
    }
    if (x->sock && x->sock[0] == '/') {
        snprintf(R.sock, sizeof(R.sock), "%s", x->sock);
    } else if (x->sock) {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd))) {
            es_ctl_err("getcwd: %s", strerror(errno));
            return -ENOENT;
        }
        if (snprintf(R.sock, sizeof(R.sock), "%s/%s", cwd, x->sock) >= (int)sizeof(R.sock)) {
            es_ctl_err("socket path too long");
            return run_fail(x, ES_CTL_EXIT_USAGE, -ENAMETOOLONG);
        }
    } else {
        char dir[4096];
        if (es_ctl_default_dir(dir, sizeof(dir), x->err, sizeof(x->err)) < 0) {
            es_ctl_err("%s", x->err);
            return -ENOENT;
        }
        es_ctl_clean_stale(dir);
        if (snprintf(R.sock, sizeof(R.sock), "%s/job-%d.sock", dir, (int)getpid()) >=
            (int)sizeof(R.sock)) {
            es_ctl_err("socket path too long");
            return -ENAMETOOLONG;
        }
    }
    if (strlen(R.sock) >= 108) {
        es_ctl_err("socket path too long (over 107 bytes): %s", R.sock);
        return run_fail(x, ES_CTL_EXIT_USAGE, -ENAMETOOLONG);
    }
    return 0;
}

/* What the ESTs need before they fork: their table, the self-pipe and
 * the signal handlers, the go pipe, the rendezvous directory and port.
 * Returns 0 or a negative errno. */
static int run_prepare(run_ctx_t *x)
{
    R.e = calloc((size_t)R.n, sizeof(*R.e));
    if (!R.e || pipe2(g_selfpipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(x->go, O_CLOEXEC) < 0) {
        es_ctl_err("out of resources");
        return -ENOMEM;
    }
    struct sigaction sa = { .sa_handler = on_sig };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (R.nnodes > 1) /* no directory the hosts share: MASTER_ADDR/MASTER_PORT */
        return 0;
    snprintf(x->rdzv, sizeof(x->rdzv), "/tmp/es-rdzv-XXXXXX");
    if (!mkdtemp(x->rdzv)) {
        es_ctl_err("cannot create a rendezvous directory: %s", strerror(errno));
        x->rdzv[0] = '\0';
        return -EIO;
    }
    x->port = free_port();
    if (x->port < 0) {
        es_ctl_err("no free local port for MASTER_PORT");
        return -EADDRNOTAVAIL;
    }
    return 0;
}

/* The forked EST r: waits for the go, then execs CMD with its
 * environment, stdin /dev/null, stdout and stderr into po and pe. */
static void est_child(run_ctx_t *x, int r, int po, int pe) __attribute__((noreturn));
static void est_child(run_ctx_t *x, int r, int po, int pe)
{
    char c;
    signal(SIGCHLD, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    close(x->go[1]);
    /* wait for the go: the pipe closing (or run dying) */
    while (read(x->go[0], &c, 1) < 0 && errno == EINTR)
        ;
    if (getppid() == 1)
        _exit(127);
    est_env(r, &x->job, x->shim, x->rdzv, x->port, x->canonical, x->d2_gemm);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    dup2(po, 1);
    dup2(pe, 2);
    execvp(x->cmd[0], x->cmd);
    fprintf(stderr, "cannot run %s: %s\n", x->cmd[0], strerror(errno));
    _exit(127);
}

/* Forks the N ESTs, held until the go pipe closes. Returns 0 or a
 * negative errno. */
static int spawn_ests(run_ctx_t *x)
{
    for (int r = 0; r < R.n; r++) {
        int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, e;
        if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
            e = errno;
            es_ctl_err("pipe: %s", strerror(e));
            goto fail;
        }
        pid_t p = fork();
        if (p < 0) {
            e = errno;
            es_ctl_err("fork: %s", strerror(e));
            goto fail;
        }
        if (p == 0)
            est_child(x, r, po[1], pe[1]);
        close(po[1]);
        close(pe[1]);
        R.e[r].pid = p;
        R.e[r].out[0] = (outpipe_t){ .fd = po[0], .to = 1 };
        R.e[r].out[1] = (outpipe_t){ .fd = pe[0], .to = 2 };
        x->job.pids[r] = p;
        continue;
    fail:
        for (int k = 0; k < 2; k++) {
            if (po[k] >= 0)
                close(po[k]);
            if (pe[k] >= 0)
                close(pe[k]);
        }
        return -e;
    }
    close(x->go[0]);
    x->go[0] = -1;
    return 0;
}

/* The job's lock and file, the daemon, then the go for the held ESTs.
 * Returns 0 or a negative errno. */
/* A job across hosts: this node's link to the daemon (node 0: over its own
 * socket; it restarts the daemon, so its link never gives up), reporting
 * this host's GPUs as "model:MiB,..." (at most 100 characters: with the
 * host name and a GPU's description a report fits the protocol's 255),
 * and, from node 1 on, each GPU in turn (the daemon moves the node's ESTs
 * between them). */
static void start_node_link(run_ctx_t *x)
{
    char gpus[101] = "";
    size_t o = 0;
    for (int g = 0; g < x->job.ngpus; g++) {
        const es_ctl_gpu_t *d = &x->job.gpus[g];
        if (!(x->job.slots & (1ull << g)))
            continue;
        int k = snprintf(gpus + o, sizeof(gpus) - o, "%s%s:%llu", o ? "," : "",
                         d->model[0] ? d->model : "gpu", (unsigned long long)(d->mem >> 20));
        if (k < 0 || (size_t)k >= sizeof(gpus) - o) {
            gpus[o] = '\0'; /* the list ends at its last whole GPU */
            break;
        }
        o += (size_t)k;
    }
    es_ctl_nlink_init(&R.nlink, R.sock, R.token, R.node, R.host, gpus[0] ? gpus : "-",
                      R.node > 0 ? x->job.hb_timeout_ms : 0, es_ctl_now_ms());
    for (int g = 0; R.node > 0 && g < x->job.ngpus; g++)
        (void)es_ctl_nlink_add_gpu(&R.nlink, g, x->job.ngpus, &x->job.gpus[g],
                                   !!(x->job.slots & (1ull << g)));
}

static int start_job(run_ctx_t *x)
{
    pid_t holder = 0;
    if (R.nnodes > 1)
        start_node_link(x);
    if (R.nnodes > 1 && R.node > 0) { /* node 0 serves the job */
        R.start_ms = es_ctl_now_ms();
        close(x->go[1]); /* go */
        x->go[1] = -1;
        return 0;
    }
    x->lockfd = es_ctl_lock(R.sock, &holder);
    if (x->lockfd < 0) {
        int rc = x->lockfd;
        if (rc == -EBUSY)
            es_ctl_err("a job is already running at %s (controller pid %d)", R.sock, (int)holder);
        else
            es_ctl_err("cannot lock %s: %s", R.sock, strerror(-rc));
        return rc;
    }
    x->made_files = 1;
    int wr = es_ctl_job_write(R.sock, &x->job);
    if (wr < 0) {
        es_ctl_err("cannot write the job file: %s", strerror(-wr));
        return wr;
    }
    close(x->lockfd); /* the daemon takes the lock from here on */
    x->lockfd = -1;
    R.daemon = start_daemon(x->err, sizeof(x->err));
    if (R.daemon < 0) {
        R.daemon = 0;
        es_ctl_err("%s", x->err);
        return -ECHILD;
    }
    R.start_ms = es_ctl_now_ms();
    close(x->go[1]); /* go */
    x->go[1] = -1;
    return 0;
}

/* ---- run's event loop ---------------------------------------------------------------------- */

static int node_linger(run_loop_t *l, int64_t now);

/* The ESTs' open pipes into l->pf. Returns how many. */
static int loop_pipes(run_loop_t *l)
{
    int k = 0;
    for (int r = 0; r < R.n; r++)
        for (int s = 0; s < 2; s++)
            if (R.e[r].out[s].fd >= 0) {
                l->pf[k] = (struct pollfd){ .fd = R.e[r].out[s].fd, .events = POLLIN };
                l->who[k++] = r * 2 + s;
            }
    return k;
}

/* What the ESTs left running writes no more: the rest of each pipe is
 * shown and the pipe closed. */
static void cut_pipes(void)
{
    for (int r = 0; r < R.n; r++)
        for (int s = 0; s < 2; s++)
            if (R.e[r].out[s].fd >= 0) {
                outpipe_t *o = &R.e[r].out[s];
                if (o->len)
                    emit_line(r, o->to, o->buf, o->len);
                o->len = 0;
                close(o->fd);
                o->fd = -1;
            }
}

/* Waits (at most 250 ms) for output, a signal or an answer, and takes
 * the output. Returns 1, or 0 when the loop ends: every EST has ended
 * and its pipes are closed (or cut off after 2 s), or poll failed. */
static int loop_wait(run_loop_t *l)
{
    int k = loop_pipes(l);
    /* every EST has ended: what they left running (a background child
     * holding the pipe) gets 2 s to finish writing, then is cut off */
    if (l->live == 0 && k > 0 && !l->drain_until)
        l->drain_until = es_ctl_now_ms() + 2000;
    if (l->live == 0 && k > 0 && es_ctl_now_ms() > l->drain_until) {
        cut_pipes();
        k = 0;
    }
    if (l->live == 0 && k == 0 && !node_linger(l, es_ctl_now_ms()))
        return 0;
    l->pf[k] = (struct pollfd){ .fd = g_selfpipe[0], .events = POLLIN };
    l->who[k++] = -1;
    if (l->prog.fd >= 0) {
        l->pf[k] = (struct pollfd){ .fd = l->prog.fd, .events = POLLIN };
        l->who[k++] = -2;
    }
    if (l->sched.fd >= 0) {
        l->pf[k] = (struct pollfd){ .fd = l->sched.fd, .events = POLLIN };
        l->who[k++] = -3;
    }
    if (R.nnodes > 1 && es_ctl_nlink_fd(&R.nlink) >= 0) {
        l->pf[k] = (struct pollfd){ .fd = es_ctl_nlink_fd(&R.nlink), .events = POLLIN };
        l->who[k++] = -4;
    }
    int np = poll(l->pf, (nfds_t)k, 250);
    if (np < 0 && errno != EINTR)
        return 0;
    for (int j = 0; np > 0 && j < k; j++) {
        if (!l->pf[j].revents)
            continue;
        if (l->who[j] >= 0) {
            int r = l->who[j] / 2;
            pipe_input(r, &R.e[r].out[l->who[j] % 2]);
        } else if (l->who[j] == -1) {
            char sink[64];
            while (read(g_selfpipe[0], sink, sizeof(sink)) > 0)
                ;
        }
    }
    return 1;
}

/* The children that ended, and stopping the ESTs: on SIGINT/SIGTERM or
 * when one failed; SIGKILL after the grace time. */
static void loop_children(run_loop_t *l, int64_t now)
{
    if (g_chld) {
        g_chld = 0;
        reap(&l->live, &l->failed_rank, &l->fail_status);
    }
    if (g_sig && !l->stopping) {
        say("%s: stopping the ESTs", g_sig == SIGINT ? "interrupted" : "terminated");
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        if (l->failed_rank < 0)
            l->failed_rank = -2;
        stop_ests(SIGTERM);
    }
    if (l->failed_rank >= 0 && !l->stopping && l->live > 0) {
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        stop_ests(SIGTERM);
    }
    if (l->stopping && l->stop_at && now > l->stop_at && l->live > 0) {
        stop_ests(SIGKILL);
        l->stop_at = 0;
    }
}

/* A job across hosts: this node's state into its reports (a failed EST,
 * a stop, every EST done), and the job's from the answers: when it failed
 * elsewhere (or node 0 cannot be reached) the ESTs here are stopped. */
static void loop_node(run_loop_t *l, int64_t now)
{
    es_ctl_nlink_t *nl = &R.nlink;
    char why[200];
    if (l->failed_rank >= 0 && nl->state != ES_NODE_FAILED) {
        int r = l->failed_rank, st = l->fail_status;
        if (WIFSIGNALED(st))
            snprintf(why, sizeof(why), "EST %d (pid %d) was killed by signal %d", R.base + r,
                     (int)R.e[r].pid, WTERMSIG(st));
        else
            snprintf(why, sizeof(why), "EST %d (pid %d) exited with status %d", R.base + r,
                     (int)R.e[r].pid, WEXITSTATUS(st));
        es_ctl_nlink_set(nl, ES_NODE_FAILED, why);
    } else if (l->failed_rank == -2 && nl->state != ES_NODE_FAILED) {
        es_ctl_nlink_set(nl, ES_NODE_FAILED, "its run was stopped by a signal");
    } else if (l->failed_rank == -3 && l->live == 0 && nl->state == ES_NODE_RUNNING) {
        /* its ESTs stopped for the job's failure elsewhere: this node ended too */
        es_ctl_nlink_set(nl, ES_NODE_FAILED, "its ESTs were stopped (the job failed elsewhere)");
    } else if (l->live == 0 && l->failed_rank == -1 && nl->state == ES_NODE_RUNNING) {
        es_ctl_nlink_set(nl, ES_NODE_DONE, NULL);
    }
    if (!es_ctl_nlink_step(nl, now) || nl->job != ES_NODE_FAILED || l->failed_rank != -1)
        return;
    l->failed_rank = -3; /* the job failed elsewhere */
    if (l->live > 0 && !l->stopping) {
        say("the job failed: %s; stopping the ESTs", nl->job_reason);
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        stop_ests(SIGTERM);
    }
}

/* Whether the loop goes on after this node's ESTs ended (a job across
 * hosts): node R until its last report is answered (or the link is given
 * up); node 0, whose daemon tells the others, until every node ended (the
 * daemon fails a silent one), or the daemon has not answered for the
 * heartbeat timeout. */
static int node_linger(run_loop_t *l, int64_t now)
{
    es_ctl_nlink_t *nl = &R.nlink;
    if (R.nnodes <= 1 || nl->lost)
        return 0;
    loop_node(l, now);
    if (R.node > 0)
        return !nl->told && !nl->lost;
    if (nl->told && nl->ended >= nl->n)
        return 0;
    return now - nl->last_ok_ms <= R.hb_timeout_ms;
}

/* The progress request: its answer, or the next one when it is time. */
static void loop_progress(run_loop_t *l, int64_t now)
{
    if (l->prog.fd >= 0) {
        int rrc;
        const char *t;
        size_t tl;
        int r = es_ctl_areq_poll(&l->prog, &rrc, &t, &tl);
        if (r == 1)
            progress_update(t, tl);
        if (r != 0)
            es_ctl_areq_close(&l->prog);
    } else if (now >= l->next_progress && R.daemon > 0 && l->live > 0) {
        /* a pending scheduled step is watched more closely */
        l->next_progress = now + (R.next_ev < R.nev ? 100 : 1000);
        R.prog_gen = R.daemon_gen;
        ac_start(&l->prog, ES_VERB_PROGRESS, -1, NULL, 0, 5000);
    }
}

/* The loop: output, children, progress, schedule, until every EST has
 * ended. Returns 0 or -ENOMEM. */
static int run_loop(run_ctx_t *x, run_loop_t *l)
{
    *l = (run_loop_t){ .prog = { .fd = -1 }, .sched = { .fd = -1 }, .live = R.n,
                       .failed_rank = -1 };
    l->pf = calloc((size_t)(2 * R.n + 4), sizeof(*l->pf));
    l->who = calloc((size_t)(2 * R.n + 4), sizeof(int));
    if (!l->pf || !l->who) {
        es_ctl_err("out of memory");
        free(l->pf);
        free(l->who);
        return -ENOMEM;
    }
    while (loop_wait(l)) {
        int64_t now = es_ctl_now_ms();
        loop_children(l, now);
        if (R.nnodes > 1)
            loop_node(l, now);
        loop_progress(l, now);
        if (schedule_round(&l->sched, l->live > 0 && !l->stopping, x->job.move_timeout_ms))
            l->next_progress = 0; /* show the new placement soon */
    }
    free(l->pf);
    free(l->who);
    es_ctl_areq_close(&l->prog);
    es_ctl_areq_close(&l->sched);
    es_ctl_areq_free(&l->prog);
    es_ctl_areq_free(&l->sched);
    progress_clear();
    return 0;
}

/* The job's end: how it went, and the exit status into x->rc. */
static void run_report(run_ctx_t *x, const run_loop_t *l)
{
    double took = (es_ctl_now_ms() - R.start_ms) / 1000.0;
    int fr = l->failed_rank, st = l->fail_status;
    if (fr == -3) {
        es_ctl_err("the job failed after %.1f s: %s", took, R.nlink.job_reason);
    } else if (fr == -2) {
        es_ctl_err("the job was stopped after %.1f s", took);
    } else if (fr >= 0) {
        if (WIFSIGNALED(st))
            es_ctl_err("the job failed after %.1f s: EST %d (pid %d) was killed by signal %d",
                       took, R.base + fr, (int)R.e[fr].pid, WTERMSIG(st));
        else
            es_ctl_err("the job failed after %.1f s: EST %d (pid %d) exited with status %d", took,
                       R.base + fr, (int)R.e[fr].pid, WEXITSTATUS(st));
    } else {
        if (R.next_ev < R.nev) {
            es_ctl_err("schedule: %d of %d events did not happen (the job ended first)",
                       R.nev - R.next_ev, R.nev);
            R.ev_failed += R.nev - R.next_ev;
        }
        if (R.ev_failed) {
            es_ctl_err("the ESTs completed in %.1f s, but %d scheduled event%s failed", took,
                       R.ev_failed, R.ev_failed == 1 ? "" : "s");
        } else {
            if (R.nnodes > 1)
                es_ctl_err("the job completed in %.1f s: the %d ESTs of this host (node %d of "
                           "%d, %d ESTs in all) exited with status 0", took, R.n, R.node,
                           R.nnodes, R.world);
            else
                es_ctl_err("the job completed in %.1f s: %d EST%s exited with status 0", took,
                           R.n, R.n == 1 ? "" : "s");
            x->rc = ES_CTL_EXIT_OK;
        }
    }
}

/* ---- teardown --------------------------------------------------------------------------- */

/* SIGTERM to the daemon, SIGKILL after the grace time. */
static void stop_daemon(void)
{
    R.stopping_daemon = 1;
    kill(R.daemon, SIGTERM);
    int64_t until = es_ctl_now_ms() + STOP_GRACE_MS;
    while (waitpid(R.daemon, NULL, WNOHANG) == 0) {
        if (es_ctl_now_ms() > until) {
            kill(R.daemon, SIGKILL);
            waitpid(R.daemon, NULL, 0);
            break;
        }
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
}

/* Releases what the run holds (whichever step it got to). */
static void run_teardown(run_ctx_t *x)
{
    if (x->go[0] >= 0)
        close(x->go[0]);
    if (x->go[1] >= 0)
        close(x->go[1]); /* held ESTs see the pipe close... */
    if (R.e && x->rc != ES_CTL_EXIT_OK) {
        /* ... and must not run when the start failed */
        for (int r = 0; r < R.n; r++)
            if (R.e[r].pid > 0 && !R.e[r].done) {
                kill(R.e[r].pid, SIGKILL);
                waitpid(R.e[r].pid, NULL, 0);
                R.e[r].done = 1;
            }
    }
    if (R.daemon > 0)
        stop_daemon();
    if (x->made_files) {
        char jobf[4200], lockf[4200];
        es_ctl_job_paths(R.sock, jobf, lockf, sizeof(jobf));
        unlink(R.sock);
        unlink(jobf);
        unlink(lockf);
    }
    if (x->lockfd >= 0)
        close(x->lockfd);
    if (x->rdzv[0])
        nftw(x->rdzv, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (R.e)
        for (int r = 0; r < R.n; r++)
            for (int s = 0; s < 2; s++) {
                if (R.e[r].out[s].fd >= 0)
                    close(R.e[r].out[s].fd);
                free(R.e[r].out[s].buf);
            }
    free(R.e);
    es_ctl_nlink_free(&R.nlink);
    if (g_selfpipe[0] >= 0) {
        close(g_selfpipe[0]);
        close(g_selfpipe[1]);
        g_selfpipe[0] = g_selfpipe[1] = -1;
    }
}

int es_ctl_run_main(int argc, char **argv)
{
    static run_ctx_t x; /* the job table is large */
    run_loop_t l;
    run_ctx_init(&x);
    /* options, GPUs, the plan and the socket: nothing held yet */
    if (run_getopt(&x, argc, argv) < 0 || run_check_opts(&x) < 0 || run_locate(&x) < 0)
        goto out;
    if (run_gpus(&x) < 0 || run_plan(&x) < 0 || run_socket_path(&x) < 0)
        goto out;
    /* the ESTs (held), the job's files, the daemon, the go */
    if (run_prepare(&x) < 0 || spawn_ests(&x) < 0 || start_job(&x) < 0)
        goto out;
    if (run_loop(&x, &l) == 0)
        run_report(&x, &l);
out:
    run_teardown(&x);
    return x.rc;
}
