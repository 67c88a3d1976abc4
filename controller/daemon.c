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
 * One thread, one poll(2) loop; every socket is non-blocking.
 *
 * This file: the connections (frames in and out, the replies), the poll
 * loop and its tick, the entry point; the rest is in the daemon_*.c files
 * (controller/daemon_int.h says which). */
#include "controller/daemon_int.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define AUTH_TIMEOUT_MS 5000
#define CLI_IDLE_TIMEOUT_MS 10000
#define TICK_MS 200

/* The daemon's state (controller/daemon_int.h). */
dmn_state_t dmn_d;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
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
void dmn_conn_send(int i, es_proto_msg_t *m)
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

void dmn_send_error(int i, int code, const char *fmt, ...)
{
    es_proto_msg_t m = { .type = ES_MSG_ERROR };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.u.err.text, sizeof(m.u.err.text), fmt, ap);
    va_end(ap);
    m.u.err.code = code;
    dmn_conn_send(i, &m);
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
    dmn_conn_send(i, &m);
    if (D.conns[i])
        D.conns[i]->closing = 1;
}

void dmn_reply_text(int i, uint32_t seq, int rc, es_ctl_buf_t *b)
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
            dmn_handle_register(i, &m);
        else if (m.type == ES_MSG_REQUEST)
            dmn_handle_request(i, &m);
        else
            conn_close(i, "a first message that is neither a registration nor a request");
        return;
    case CONN_EST:
        if (m.type == ES_MSG_HEARTBEAT)
            dmn_handle_heartbeat(i, &m);
        else if (m.type == ES_MSG_ACK)
            dmn_handle_ack(i, &m);
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
void dmn_conn_input(int i)
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
    dmn_check_unresponsive(now);
    dmn_op_check(now);
    if (D.job.nnodes > 1 && es_ctl_nodes_tick(&D.nodes, now))
        dmn_nodes_failed();
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
        dmn_persist();
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
    dmn_mask_label(D.job.slots, slots, sizeof(slots));
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
        dmn_conn_input(i);
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
