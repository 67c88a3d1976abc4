/* The control thread (shim/control.h): connect, register, heartbeat, answer
 * MOVE commands and RELEASE messages, reconnect with backoff. Everything
 * happens on this thread; the application's threads only bump the step
 * counter and, at a scheduled hold (shim/step.h), wake this thread so that
 * the controller hears of the hold at once. */
#include "shim/control.h"

#include "wire/proto.h"
#include "shim/move.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/step.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ES_CTL_BACKOFF_MIN_MS 50
#define ES_CTL_BACKOFF_MAX_MS 2000
#define ES_CTL_IO_TIMEOUT_MS 5000

/* Session outcomes. */
enum { ES_CTL_RETRY = 0, ES_CTL_STOP = 1 };

static struct {
    pid_t pid;
    char host[ES_PROTO_HOST_MAX + 1];
    char slot[ES_PROTO_SLOT_MAX + 1]; /* where this EST is */
    uint64_t epoch;                   /* last placement epoch applied */
    int state;                        /* enum es_proto_est_state */
    uint32_t seq;
    /* step time over the last heartbeat interval */
    uint64_t last_step, last_step_ns, step_time_ns;
    uint64_t sent_step, sent_held; /* in the last heartbeat */
    uint8_t rxbuf[1024];
} es_ctl;

/* The connection's fd (-1 none), for the fork handler. */
static int es_ctl_fd = -1;
/* Wakes the control thread (es_control_kick): non-blocking pipe. */
static int es_ctl_wake[2] = { -1, -1 };
/* While an application thread waits at a hold, the heartbeat follows the
 * step this often (the step settles as the earlier collectives end). */
#define ES_CTL_HELD_POLL_MS 10

void es_control_kick(void)
{
    int fd = __atomic_load_n(&es_ctl_wake[1], __ATOMIC_ACQUIRE);
    char c = 1;
    if (fd >= 0 && write(fd, &c, 1) < 0) { /* full: a wake-up is pending anyway */
    }
}

/* A forked child has no control thread: it must not keep the parent's
 * connection open either (the daemon would not see the parent go). */
static void es_ctl_atfork_child(void)
{
    int fd = __atomic_exchange_n(&es_ctl_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0)
        close(fd);
    /* nobody reads the wake-up pipe here, and no controller would release
     * a hold: the child has none (it registers with no controller) */
    for (int i = 1; i >= 0; i--) {
        int w = __atomic_exchange_n(&es_ctl_wake[i], -1, __ATOMIC_ACQ_REL);
        if (w >= 0)
            close(w);
    }
    es_cfg.nhold = 0;
}

static uint64_t es_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void es_sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Connects with a bounded wait. Returns the fd or a negative errno. */
static int es_ctl_connect(void)
{
    int fd = -1, rc;
    struct addrinfo *ai = NULL;
    if (strncmp(es_cfg.control, "tcp:", 4) != 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t pl = strnlen(es_cfg.control, sizeof(es_cfg.control));
        if (pl >= sizeof(sa.sun_path)) {
            rc = -ENAMETOOLONG;
            goto fail;
        }
        memcpy(sa.sun_path, es_cfg.control, pl);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            rc = -errno;
            goto fail;
        }
    } else {
        char host[sizeof(es_cfg.control)];
        size_t hl = strnlen(es_cfg.control + 4, sizeof(host) - 5);
        memcpy(host, es_cfg.control + 4, hl);
        host[hl] = '\0';
        char *port = strrchr(host, ':');
        if (!port) {
            rc = -EINVAL;
            goto fail;
        }
        *port++ = '\0';
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
            rc = -EHOSTUNREACH;
            goto fail;
        }
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = -errno;
            goto fail;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            if (errno != EINPROGRESS) {
                rc = -errno;
                goto fail;
            }
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            int err = 0;
            socklen_t el = sizeof(err);
            if (poll(&p, 1, ES_CTL_IO_TIMEOUT_MS) != 1 ||
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
                rc = err ? -err : -ETIMEDOUT;
                goto fail;
            }
        }
        if (fcntl(fd, F_SETFL, 0) < 0) {
            rc = -errno;
            goto fail;
        }
        uint8_t auth[ES_PROTO_AUTH_SIZE];
        if ((rc = es_proto_auth_encode(es_cfg.token, auth)) < 0 ||
            (rc = es_proto_send_all(fd, auth, sizeof(auth), NULL)) < 0)
            goto fail;
        freeaddrinfo(ai);
        ai = NULL;
    }
    /* A stopped controller must not hold this thread forever in send(2). */
    struct timeval tv = { .tv_sec = ES_CTL_IO_TIMEOUT_MS / 1000 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
fail:
    if (ai)
        freeaddrinfo(ai);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int es_ctl_send(int fd, es_proto_msg_t *m)
{
    uint8_t buf[1024];
    size_t len;
    m->seq = ++es_ctl.seq;
    int rc = es_proto_encode(m, buf, sizeof(buf), &len);
    if (rc < 0) {
        ES_ERROR("control: cannot encode message type %u (%d)", m->type, rc);
        return rc;
    }
    return es_proto_send_all(fd, buf, len, NULL);
}

/* The time-slicing figures of the moves seam into a heartbeat. */
static void es_ctl_ts_figures(es_proto_msg_t *m)
{
    es_move_ts_figures_t f;
    memset(&f, 0, sizeof(f));
    f.where = -1;
    es_move_ts_figures(&f);
    m->u.hb.yields = f.yields;
    m->u.hb.swaps_out = f.swaps_out;
    m->u.hb.swaps_in = f.swaps_in;
    m->u.hb.bytes_out = f.bytes_out;
    m->u.hb.bytes_in = f.bytes_in;
    m->u.hb.where = f.where > 0 ? ES_WHERE_RESIDENT : f.where == 0 ? ES_WHERE_PARKED
                                                                     : ES_WHERE_UNKNOWN;
}

static int es_ctl_heartbeat(int fd)
{
    uint64_t now = es_now_ns(), step = es_step_now();
    if (step > es_ctl.last_step) {
        es_ctl.step_time_ns = (now - es_ctl.last_step_ns) / (step - es_ctl.last_step);
        es_ctl.last_step = step;
        es_ctl.last_step_ns = now;
    } else if (step < es_ctl.last_step) {
        es_ctl.last_step = step;
        es_ctl.last_step_ns = now;
    }
    es_proto_msg_t m = { .type = ES_MSG_HEARTBEAT };
    m.u.hb.step = step;
    m.u.hb.step_time_ns = es_ctl.step_time_ns;
    m.u.hb.mem_bytes = es_move_footprint();
    m.u.hb.epoch = es_ctl.epoch;
    m.u.hb.state = (uint32_t)es_ctl.state;
    m.u.hb.held = es_step_held();
    es_ctl_ts_figures(&m);
    es_ctl.sent_step = step;
    es_ctl.sent_held = m.u.hb.held;
    return es_ctl_send(fd, &m);
}

/* HOLD_OFFER / HOLD_AT (shim/step.h): answered here, nothing moves. */
static int es_ctl_hold(int fd, const es_proto_msg_t *in)
{
    es_proto_msg_t a = { .type = ES_MSG_ACK };
    a.u.ack.op = in->u.move.op;
    a.u.ack.epoch = in->u.move.epoch;
    snprintf(a.u.ack.slot, sizeof(a.u.ack.slot), "%s", es_ctl.slot);
    if (in->u.move.op == ES_MOVE_HOLD_OFFER) {
        a.u.ack.result = es_step_offer(&a.u.ack.step);
        if (a.u.ack.result == 0)
            ES_INFO("control: stopping before collective %llu for a hold",
                    (unsigned long long)a.u.ack.step);
        else
            snprintf(a.u.ack.reason, sizeof(a.u.ack.reason), "a hold is set already");
    } else {
        a.u.ack.result = es_step_hold_at(in->u.move.step);
        if (a.u.ack.result == 0 && in->u.move.step != UINT64_MAX)
            ES_INFO("control: holding at collective %llu for the controller's moves",
                    (unsigned long long)in->u.move.step);
        else if (a.u.ack.result != 0)
            snprintf(a.u.ack.reason, sizeof(a.u.ack.reason),
                     "collective %llu has started already", (unsigned long long)in->u.move.step);
    }
    return es_ctl_send(fd, &a);
}

/* A MOVE: call the moves seam, then acknowledge with its answer. */
static int es_ctl_move(int fd, const es_proto_msg_t *in)
{
    if (in->u.move.op == ES_MOVE_HOLD_OFFER || in->u.move.op == ES_MOVE_HOLD_AT)
        return es_ctl_hold(fd, in);
    es_move_t mv = { .op = (int)in->u.move.op, .epoch = in->u.move.epoch };
    es_move_result_t res;
    memset(&res, 0, sizeof(res));
    snprintf(mv.slot, sizeof(mv.slot), "%s", in->u.move.slot);
    mv.nranks = (int)in->u.move.nranks; /* the decoder checked the list */
    for (int i = 0; i < mv.nranks; i++)
        mv.ranks[i] = (int)in->u.move.ranks[i];
    snprintf(res.slot, sizeof(res.slot), "%s", es_ctl.slot);
    ES_INFO("control: %s to \"%s\" (epoch %llu)",
            mv.op == ES_MOVE_SWAP_OUT ? "swap-out" : mv.op == ES_MOVE_SWAP_IN ? "swap-in"
            : mv.op == ES_MOVE_MIGRATE ? "migrate" : mv.op == ES_MOVE_TS_JOIN ? "time-slice"
            : mv.op == ES_MOVE_TS_LEAVE ? "end time-slicing" : "place",
            mv.slot, (unsigned long long)mv.epoch);
    int prev = es_ctl.state;
    es_ctl.state = ES_EST_MOVING;
    uint64_t t0 = es_now_ns();
    int rc = es_move_request(&mv, &res);
    if (rc > 0)
        rc = -EIO; /* the contract: 0 or a negative errno */
    uint64_t dt = es_now_ns() - t0;
    res.slot[sizeof(res.slot) - 1] = '\0';
    res.reason[sizeof(res.reason) - 1] = '\0';
    /* Only printable ASCII travels. */
    for (char *p = res.reason; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            *p = '?';
    for (char *p = res.slot; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            *p = '?';
    if (rc == 0) {
        es_ctl.epoch = mv.epoch;
        es_ctl.state = strcmp(res.slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
    } else {
        es_ctl.state = strcmp(res.slot, "host") == 0 ? ES_EST_SWAPPED_OUT : prev;
        if (!res.reason[0])
            snprintf(res.reason, sizeof(res.reason), "%s", strerror(-rc));
        ES_INFO("control: move refused: %s", res.reason);
    }
    snprintf(es_ctl.slot, sizeof(es_ctl.slot), "%s", res.slot);
    es_proto_msg_t a = { .type = ES_MSG_ACK };
    a.u.ack.op = in->u.move.op;
    a.u.ack.result = rc;
    a.u.ack.epoch = mv.epoch;
    a.u.ack.total_ns = res.total_ns ? res.total_ns : dt;
    a.u.ack.sync_ns = res.sync_ns;
    a.u.ack.copy_ns = res.copy_ns;
    a.u.ack.bytes = res.bytes;
    snprintf(a.u.ack.slot, sizeof(a.u.ack.slot), "%s", es_ctl.slot);
    snprintf(a.u.ack.reason, sizeof(a.u.ack.reason), "%s", res.reason);
    return es_ctl_send(fd, &a);
}

/* One connection: register, then heartbeats and commands until it breaks.
 * Sets *welcomed when the controller accepted the registration. */
static int es_ctl_session(int fd, int *welcomed)
{
    es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_EST, .buf = es_ctl.rxbuf,
                             .cap = sizeof(es_ctl.rxbuf) };
    es_proto_msg_t m = { .type = ES_MSG_REGISTER };
    m.u.reg.rank = (uint32_t)es_cfg.rank;
    m.u.reg.world = (uint32_t)es_cfg.world;
    m.u.reg.pid = (uint32_t)es_ctl.pid;
    m.u.reg.step = es_step_now();
    m.u.reg.epoch = es_ctl.epoch;
    m.u.reg.mem_bytes = es_move_footprint();
    m.u.reg.flags = es_move_time_sliced() ? ES_REG_TIME_SLICED : 0;
    snprintf(m.u.reg.slot, sizeof(m.u.reg.slot), "%s", es_ctl.slot);
    snprintf(m.u.reg.host, sizeof(m.u.reg.host), "%s", es_ctl.host);
    int rc = es_ctl_send(fd, &m);
    if (rc < 0)
        return ES_CTL_RETRY;
    uint64_t period = (uint64_t)es_cfg.heartbeat_ms * 1000000ull;
    uint64_t next = es_now_ns() + period;
    for (;;) {
        uint64_t now = es_now_ns();
        /* a hold begun or ended, or the step of a held EST settled: now */
        uint64_t held = es_step_held();
        if (now >= next || held != es_ctl.sent_held || (held && es_step_now() != es_ctl.sent_step)) {
            if (es_ctl_heartbeat(fd) < 0)
                return ES_CTL_RETRY;
            if (now >= next)
                next += period;
            if (next <= now)
                next = now + period;
            continue;
        }
        int wait_ms = (int)((next - now + 999999) / 1000000);
        if (held && wait_ms > ES_CTL_HELD_POLL_MS)
            wait_ms = ES_CTL_HELD_POLL_MS;
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
                               { .fd = es_ctl_wake[0], .events = POLLIN } };
        int n = poll(p, es_ctl_wake[0] >= 0 ? 2 : 1, wait_ms);
        if (n < 0 && errno != EINTR)
            return ES_CTL_RETRY;
        if (n > 0 && (p[1].revents & POLLIN)) {
            char sink[64];
            while (read(es_ctl_wake[0], sink, sizeof(sink)) > 0)
                ;
        }
        if (n <= 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        rc = es_proto_reader_fill(&rd, fd);
        if (rc == 0)
            continue;
        if (rc < 0) {
            if (rc != -ECONNRESET)
                ES_WARN("control: closing the connection to the controller: %s",
                        es_proto_strerror(rc));
            return ES_CTL_RETRY;
        }
        es_proto_msg_t in;
        rc = es_proto_decode(&rd.h, rd.buf, &in);
        es_proto_reader_reset(&rd);
        if (rc < 0) {
            ES_WARN("control: closing the connection to the controller: %s",
                    es_proto_strerror(rc));
            return ES_CTL_RETRY;
        }
        switch (in.type) {
        case ES_MSG_WELCOME:
            if (!*welcomed)
                ES_INFO("control: registered as rank %d of %d with the controller (pid %u)",
                        es_cfg.rank, es_cfg.world, in.u.welcome.daemon_pid);
            *welcomed = 1;
            break;
        case ES_MSG_MOVE:
            if (es_ctl_move(fd, &in) < 0)
                return ES_CTL_RETRY;
            /* The time spent moving is not a step interval. */
            es_ctl.last_step = es_step_now();
            es_ctl.last_step_ns = es_now_ns();
            break;
        case ES_MSG_RELEASE:
            ES_INFO("control: the scheduled events through step %llu are done",
                    (unsigned long long)in.u.release.step);
            es_step_release(in.u.release.step);
            break;
        case ES_MSG_ERROR:
            /* Refused registrations are final: another process holds this
             * rank, or the job is another one. */
            if (in.u.err.code == -EEXIST || in.u.err.code == -EINVAL) {
                ES_WARN("control: the controller refused this process: %s; no control channel",
                        in.u.err.text);
                return ES_CTL_STOP;
            }
            ES_WARN("control: the controller reports: %s", in.u.err.text);
            return ES_CTL_RETRY;
        default:
            return ES_CTL_RETRY;
        }
    }
}

static void *es_ctl_main(void *arg)
{
    (void)arg;
    unsigned backoff = ES_CTL_BACKOFF_MIN_MS;
    unsigned seed = (unsigned)es_ctl.pid;
    int had = 0; /* was connected before: log the loss once */
    for (;;) {
        int fd = es_ctl_connect();
        if (fd >= 0) {
            int welcomed = 0;
            __atomic_store_n(&es_ctl_fd, fd, __ATOMIC_RELEASE);
            int rc = es_ctl_session(fd, &welcomed);
            __atomic_store_n(&es_ctl_fd, -1, __ATOMIC_RELEASE);
            close(fd);
            es_step_hold_drop(); /* a hold in the making died with the connection */
            if (rc == ES_CTL_STOP) {
                if (es_cfg.nhold) /* nobody would release them */
                    es_step_release(UINT64_MAX / 2);
                break;
            }
            if (welcomed) {
                backoff = ES_CTL_BACKOFF_MIN_MS;
                had = 1;
                ES_INFO("control: lost the controller; reconnecting (training goes on)");
            }
        } else if (had) {
            ES_DEBUG("control: cannot reach the controller at %s: %s", es_cfg.control,
                     strerror(-fd));
        }
        /* Backoff with jitter, so restarted controllers are not stormed. */
        es_sleep_ms(backoff / 2 + (unsigned)rand_r(&seed) % (backoff / 2 + 1));
        backoff = backoff * 2 > ES_CTL_BACKOFF_MAX_MS ? ES_CTL_BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

int es_control_start(void)
{
    int rc = 0;
    if (!es_cfg.control[0])
        goto out;
    es_ctl.pid = getpid();
    /* Only the EST process itself registers, not its descendants. */
    const char *mark = getenv("EASYSCALE_EST_PID");
    if (mark) {
        char *end;
        errno = 0;
        long v = strtol(mark, &end, 10);
        if (!*mark || *end || errno || v <= 0) {
            ES_ERROR("EASYSCALE_EST_PID=\"%s\" is not a pid: no control channel", mark);
            rc = -EINVAL;
            goto out;
        }
        if ((pid_t)v != es_ctl.pid) {
            ES_DEBUG("control: a descendant of EST pid %ld: no control channel", v);
            es_cfg.nhold = 0; /* nor holds: no controller would release them */
            goto out;
        }
    } else {
        char pidbuf[24];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)es_ctl.pid);
        setenv("EASYSCALE_EST_PID", pidbuf, 1);
    }
    if (gethostname(es_ctl.host, sizeof(es_ctl.host)) < 0)
        es_ctl.host[0] = '\0';
    es_ctl.host[sizeof(es_ctl.host) - 1] = '\0';
    const char *slot = getenv("EASYSCALE_SLOT");
    if (slot && strlen(slot) <= ES_PROTO_SLOT_MAX)
        snprintf(es_ctl.slot, sizeof(es_ctl.slot), "%s", slot);
    for (char *p = es_ctl.host; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            *p = '?';
    for (char *p = es_ctl.slot; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            *p = '?';
    es_ctl.last_step_ns = es_now_ns();
    if (pipe2(es_ctl_wake, O_CLOEXEC | O_NONBLOCK) < 0) /* then held steps wait for a heartbeat */
        es_ctl_wake[0] = es_ctl_wake[1] = -1;
    pthread_atfork(NULL, NULL, es_ctl_atfork_child);

    /* The thread takes no signal of the application's. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&tid, &attr, es_ctl_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc < 0)
        ES_ERROR("control: cannot start the control thread: %s", strerror(-rc));
    else
        ES_DEBUG("control: rank %d of %d, controller at %s", es_cfg.rank, es_cfg.world,
                 es_cfg.control);
out:
    return rc;
}
