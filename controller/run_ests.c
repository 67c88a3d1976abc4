/* easyscale-ctl run's processes (run_int.h): the signals (a self-pipe
 * wakes the event loop), the daemon (started, and started again when it
 * dies, unless daemons keep dying before they serve), the ESTs (forked and
 * held until the go, with the variables a torchrun user expects and the
 * shim preloaded; reaped; stopped on a signal or a failure, SIGKILL after
 * the grace time). Called by run.c (its steps) and the event loop
 * (run_loop.c: the children's round, stopping the ESTs); calls run_out.c
 * (messages). */
#include "controller/run_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t g_sig, g_chld;
int run_selfpipe[2] = { -1, -1 };

static void on_sig(int s)
{
    int e = errno;
    if (s == SIGCHLD)
        g_chld = 1;
    else
        g_sig = s;
    char c = 0;
    if (write(run_selfpipe[1], &c, 1) < 0) { /* full: a wakeup is pending anyway */
    }
    errno = e;
}

/* ---- the daemon -------------------------------------------------------------------- */

pid_t run_start_daemon(char *err, size_t errlen)
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
        run_say("the controller (pid %d) %s; not restarting it again (%d died within %d s before "
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
    pid_t p = run_start_daemon(err, sizeof(err));
    if (p < 0) {
        run_say("the controller (pid %d) %s, and a new one did not start (%s): training goes on "
                "without a controller", (int)old, how, err);
        return;
    }
    R.daemon = p;
    R.daemon_gen++;
    R.all_registered = 0;
    R.rel_sent = 0; /* the new daemon has released nothing */
    run_say("the controller (pid %d) %s; started a new one (pid %d), which re-learns the job from "
            "the ESTs (training went on)", (int)old, how, (int)p);
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
int run_find_shim(const char *given, char *out, size_t len, char *err, size_t errlen)
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

void run_stop_ests(int sig)
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
                        run_say("EST %d (pid %d) was killed by signal %d; stopping the others",
                                R.base + r, (int)p, WTERMSIG(st));
                    else
                        run_say("EST %d (pid %d) exited with status %d; stopping the others",
                                R.base + r, (int)p, WEXITSTATUS(st));
                }
            }
        }
    }
}

/* ---- run's steps: the ESTs, held ---------------------------------------------------- */

/* What the ESTs need before they fork: their table, the self-pipe and
 * the signal handlers, the go pipe, the rendezvous directory and port.
 * Returns 0 or a negative errno. */
int run_prepare(run_ctx_t *x)
{
    R.e = calloc((size_t)R.n, sizeof(*R.e));
    if (!R.e || pipe2(run_selfpipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(x->go, O_CLOEXEC) < 0) {
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
int run_spawn_ests(run_ctx_t *x)
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

/* ---- run's event loop: the children --------------------------------------------------- */

/* The children that ended, and stopping the ESTs: on SIGINT/SIGTERM or
 * when one failed; SIGKILL after the grace time. */
void run_loop_children(run_loop_t *l, int64_t now)
{
    if (g_chld) {
        g_chld = 0;
        reap(&l->live, &l->failed_rank, &l->fail_status);
    }
    if (g_sig && !l->stopping) {
        run_say("%s: stopping the ESTs", g_sig == SIGINT ? "interrupted" : "terminated");
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        if (l->failed_rank < 0)
            l->failed_rank = -2;
        run_stop_ests(SIGTERM);
    }
    if (l->failed_rank >= 0 && !l->stopping && l->live > 0) {
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        run_stop_ests(SIGTERM);
    }
    if (l->stopping && l->stop_at && now > l->stop_at && l->live > 0) {
        run_stop_ests(SIGKILL);
        l->stop_at = 0;
    }
}
