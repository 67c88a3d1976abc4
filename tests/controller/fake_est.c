/* A stand-in EST for the controller's tests: speaks the control protocol
 * itself (wire/proto.h) from the environment `easyscale-ctl run` sets
 * (EASYSCALE_CONTROL, RANK, WORLD_SIZE, EASYSCALE_SLOT), and answers MOVE
 * commands as told, so the controller's scale paths can be tested before
 * ESTs can really move.
 *
 *   fake_est [--move ok|fail|hang|xdev] [--hold-refuse-rank R] [--hb-ms N] [--step-ns N] [--wait-ns N]
 *            [--wait-ns-by-rank N0,N1,...] [--mem BYTES] [--steps-per-hb N]
 *            [--run-ms N] [--fail-rank R] [--rejoin-rank R --rejoin-ms N]
 *            [--end-step N] [--ack-delay-ms N] [--ignore-holds 1] [--until FILE]
 *            [--ts-by-rank W:Y:SO:SI:BO:BI/W:Y:SO:SI:BO:BI/...]
 *
 * EASYSCALE_CONTROL tcp:HOST:PORT (an EST of another host, `run --nnodes`)
 * is reached over TCP with EASYSCALE_TOKEN. Registers (reconnecting with backoff when the controller goes away),
 * heartbeats every --hb-ms with the step advanced by --steps-per-hb, and
 * exits 0 after --run-ms (3 if it is rank --fail-rank); rank --rejoin-rank
 * waits --rejoin-ms before it reconnects to a controller that went away
 * (a late re-registration). Prints one line per
 * move it answers: "fake_est: rank R: OP -> SLOT: ok|refused".
 *
 * Scheduled holds as the shim keeps them (shim/step.h): at each step of
 * EASYSCALE_HOLD_STEPS the step stops advancing (heartbeats say `held`)
 * until a RELEASE of that step ("fake_est: rank R: held at step S" once);
 * --ignore-holds 1 runs past them (a negative control). --end-step N: exits
 * once the step reaches N (before --run-ms). --ack-delay-ms N: answers a
 * MOVE N ms late (a controller can be killed while it waits). --until FILE:
 * exits 0 once FILE exists (looked for at every heartbeat), so a test ends
 * the job when it is done rather than after a time that a loaded machine
 * may not leave it. --ts-by-rank: the time-slicing figures each rank's
 * heartbeats carry (entry i for rank i): where its memory is (r resident,
 * p parked, u unknown), yields, swaps out, swaps in, bytes out, bytes in;
 * without it (or past the list's end) zeros and unknown.
 *
 * A hold set at run time (HOLD_OFFER, HOLD_AT: shim/step.h): an offer
 * stops the step where it is and answers it; HOLD_AT S holds at step S as a
 * scheduled hold would ("fake_est: rank R: hold offer at step S" and
 * "... hold at step S"); UINT64_MAX withdraws the offer. --move xdev: a
 * move is refused with -EXDEV (the shim's answer when the collectives'
 * staging is device memory) unless the EST is held, then done.
 * --hold-refuse-rank R: rank R refuses HOLD_OFFER (-EBUSY);
 * --hold-at-refuse-rank R: rank R refuses HOLD_AT (-ERANGE).
 */
#include "wire/proto.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long opt_hb = 100, opt_step_ns = 1000000, opt_wait_ns = 0, opt_steps = 1, opt_run = 5000;
static long opt_fail_rank = -1, opt_rejoin_rank = -1, opt_rejoin_ms = 0;
static long opt_end_step = 0, opt_ack_delay = 0, opt_ignore_holds = 0, opt_hold_refuse = -1;
static long opt_hold_at_refuse = -1;
static int offered; /* HOLD_OFFER answered, HOLD_AT not yet: the step stays */
static uint64_t holds[256], released; /* released: step + 1 */
static int nholds, hold_next, hold_said = -1;
static unsigned long long opt_mem = 0;
static const char *opt_move = "ok", *opt_wait_list, *opt_until;
static int rank, world;
static char slot[ES_PROTO_SLOT_MAX + 1];
static uint64_t step, epoch;
static int time_sliced; /* joined a rotation (told by the controller) */
static const char *opt_ts_list;
static uint64_t ts_figs[5]; /* this rank's yields, swaps out/in, bytes out/in */
static uint32_t ts_where = ES_WHERE_UNKNOWN;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long num(const char *s)
{
    char *e;
    long v = strtol(s, &e, 10);
    if (!*s || *e || v < 0) {
        fprintf(stderr, "fake_est: bad number \"%s\"\n", s);
        exit(2);
    }
    return v;
}

static int send_msg(int fd, es_proto_msg_t *m)
{
    uint8_t b[1024];
    size_t len;
    if (es_proto_encode(m, b, sizeof(b), &len) < 0)
        return -EINVAL;
    return es_proto_send_all(fd, b, len, NULL);
}

/* The hold the step waits at (step + 1), or 0. */
static uint64_t held_at(void)
{
    while (hold_next < nholds && holds[hold_next] < released)
        hold_next++;
    if (opt_ignore_holds || hold_next >= nholds || step != holds[hold_next])
        return 0;
    if (hold_said != hold_next) {
        hold_said = hold_next;
        printf("fake_est: rank %d: held at step %llu\n", rank, (unsigned long long)step);
        fflush(stdout);
    }
    return step + 1;
}

/* The next step: at most up to the next hold. */
static void advance(void)
{
    if (held_at() || offered)
        return;
    uint64_t to = step + (uint64_t)opt_steps;
    if (!opt_ignore_holds && hold_next < nholds && step < holds[hold_next] && to > holds[hold_next])
        to = holds[hold_next];
    step = to;
}

/* HOLD_OFFER / HOLD_AT, answered in a. */
static void hold_op(const es_proto_msg_t *in, es_proto_msg_t *a)
{
    if (in->u.move.op == ES_MOVE_HOLD_OFFER) {
        if (rank == opt_hold_refuse) {
            a->u.ack.result = -EBUSY;
            snprintf(a->u.ack.reason, sizeof(a->u.ack.reason), "fake_est: no offer on purpose");
        } else {
            offered = 1;
            a->u.ack.step = step;
        }
        printf("fake_est: rank %d: hold offer at step %llu: %s\n", rank,
               (unsigned long long)step, a->u.ack.result ? "refused" : "ok");
    } else if (in->u.move.step == UINT64_MAX) {
        offered = 0;
        printf("fake_est: rank %d: hold withdrawn\n", rank);
    } else if (in->u.move.step < step || nholds >= 256 || rank == opt_hold_at_refuse) {
        a->u.ack.result = -ERANGE;
        snprintf(a->u.ack.reason, sizeof(a->u.ack.reason), "fake_est: step passed");
    } else {
        int k = nholds++; /* in order, after those over */
        while (k > hold_next && holds[k - 1] > in->u.move.step) {
            holds[k] = holds[k - 1];
            k--;
        }
        holds[k] = in->u.move.step;
        offered = 0;
        printf("fake_est: rank %d: hold at step %llu\n", rank,
               (unsigned long long)in->u.move.step);
    }
    fflush(stdout);
}

/* This rank's entry of --ts-by-rank, "W:Y:SO:SI:BO:BI". */
static void parse_ts(void)
{
    char list[4096], *save = NULL;
    int i = 0;
    snprintf(list, sizeof(list), "%s", opt_ts_list);
    for (char *t = strtok_r(list, "/", &save); t; t = strtok_r(NULL, "/", &save), i++) {
        if (i != rank)
            continue;
        char *fs = NULL, *w = strtok_r(t, ":", &fs);
        ts_where = !w ? ES_WHERE_UNKNOWN : strcmp(w, "r") == 0 ? ES_WHERE_RESIDENT
                   : strcmp(w, "p") == 0 ? ES_WHERE_PARKED : ES_WHERE_UNKNOWN;
        for (int k = 0; k < 5; k++) {
            char *f = strtok_r(NULL, ":", &fs);
            ts_figs[k] = f ? strtoull(f, NULL, 10) : 0;
        }
    }
}

/* Told to finish (--until FILE exists). */
static int finished(void)
{
    return opt_until && access(opt_until, F_OK) == 0;
}

static int session(int fd, long long end)
{
    uint8_t rx[1024];
    es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_EST, .buf = rx, .cap = sizeof(rx) };
    es_proto_msg_t m = { .type = ES_MSG_REGISTER };
    m.u.reg.rank = (uint32_t)rank;
    m.u.reg.world = (uint32_t)world;
    m.u.reg.pid = (uint32_t)getpid();
    m.u.reg.step = step;
    m.u.reg.epoch = epoch;
    m.u.reg.mem_bytes = opt_mem;
    m.u.reg.flags = time_sliced ? ES_REG_TIME_SLICED : 0;
    snprintf(m.u.reg.slot, sizeof(m.u.reg.slot), "%s", slot);
    snprintf(m.u.reg.host, sizeof(m.u.reg.host), "fake");
    if (send_msg(fd, &m) < 0)
        return 0;
    long long next = now_ms();
    for (;;) {
        long long t = now_ms();
        if (t >= end)
            return 1;
        if ((opt_end_step && step >= (uint64_t)opt_end_step) || finished())
            return 1;
        if (t >= next) {
            advance();
            es_proto_msg_t h = { .type = ES_MSG_HEARTBEAT };
            h.u.hb.held = held_at();
            h.u.hb.step = step;
            h.u.hb.step_time_ns = (uint64_t)opt_step_ns;
            h.u.hb.wait_ns = (uint64_t)opt_wait_ns;
            h.u.hb.mem_bytes = opt_mem;
            h.u.hb.epoch = epoch;
            h.u.hb.state = strcmp(slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
            h.u.hb.yields = ts_figs[0];
            h.u.hb.swaps_out = ts_figs[1];
            h.u.hb.swaps_in = ts_figs[2];
            h.u.hb.bytes_out = ts_figs[3];
            h.u.hb.bytes_in = ts_figs[4];
            h.u.hb.where = ts_where;
            if (send_msg(fd, &h) < 0)
                return 0;
            next = t + opt_hb;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        long long w = next < end ? next - t : end - t;
        if (poll(&p, 1, (int)(w > 0 ? w : 0)) <= 0)
            continue;
        int rc = es_proto_reader_fill(&rd, fd);
        if (rc == 0)
            continue;
        if (rc < 0)
            return 0;
        es_proto_msg_t in;
        rc = es_proto_decode(&rd.h, rd.buf, &in);
        es_proto_reader_reset(&rd);
        if (rc < 0)
            return 0;
        if (in.type == ES_MSG_ERROR) {
            printf("fake_est: rank %d: refused by the controller: %s\n", rank, in.u.err.text);
            fflush(stdout);
            return 1;
        }
        if (in.type == ES_MSG_RELEASE) {
            if (in.u.release.step + 1 > released)
                released = in.u.release.step + 1;
            continue;
        }
        if (in.type != ES_MSG_MOVE || strcmp(opt_move, "hang") == 0)
            continue;
        if (opt_ack_delay) {
            struct timespec d = { opt_ack_delay / 1000, (opt_ack_delay % 1000) * 1000000L };
            nanosleep(&d, NULL);
        }
        static const char *const ops[] = { "?",       "place",      "migrate",
                                           "swap-out", "swap-in",    "time-slice",
                                           "end time-slicing", "hold offer", "hold" };
        _Static_assert(sizeof(ops) / sizeof(ops[0]) == ES_MOVE_NOPS, "a name per op");
        es_proto_msg_t a = { .type = ES_MSG_ACK };
        a.u.ack.op = in.u.move.op;
        a.u.ack.epoch = in.u.move.epoch;
        snprintf(a.u.ack.slot, sizeof(a.u.ack.slot), "%s", slot);
        if (in.u.move.op == ES_MOVE_HOLD_OFFER || in.u.move.op == ES_MOVE_HOLD_AT) {
            hold_op(&in, &a);
            if (send_msg(fd, &a) < 0)
                return 0;
            continue;
        }
        int xdev = strcmp(opt_move, "xdev") == 0;
        if (xdev && !held_at()) {
            a.u.ack.result = -EXDEV;
            snprintf(a.u.ack.reason, sizeof(a.u.ack.reason), "fake_est: staging is device "
                     "memory: moves only at a hold");
        } else if (strcmp(opt_move, "ok") == 0 || xdev) {
            snprintf(slot, sizeof(slot), "%s",
                     in.u.move.op == ES_MOVE_SWAP_OUT ? "host" : in.u.move.slot);
            epoch = in.u.move.epoch;
            if (in.u.move.op == ES_MOVE_TS_JOIN || in.u.move.op == ES_MOVE_TS_LEAVE)
                time_sliced = in.u.move.op == ES_MOVE_TS_JOIN;
            a.u.ack.total_ns = 1000000;
            a.u.ack.bytes = opt_mem;
        } else {
            a.u.ack.result = -ENOTSUP;
            snprintf(a.u.ack.reason, sizeof(a.u.ack.reason), "fake_est: refused on purpose");
        }
        snprintf(a.u.ack.slot, sizeof(a.u.ack.slot), "%s", slot);
        printf("fake_est: rank %d: %s -> %s: %s\n", rank, ops[in.u.move.op < ES_MOVE_NOPS ? in.u.move.op : 0],
               in.u.move.slot[0] ? in.u.move.slot : "host", a.u.ack.result ? "refused" : "ok");
        fflush(stdout);
        if (send_msg(fd, &a) < 0)
            return 0;
    }
}

/* The controller: a unix socket path, or tcp:HOST:PORT with the 72-byte
 * block of EASYSCALE_TOKEN first (an EST of another host). Returns the
 * connected socket or -1. */
static int ctl_connect(const char *ctl)
{
    int fd = -1;
    if (strncmp(ctl, "tcp:", 4) == 0) {
        char host[128], *port;
        uint8_t auth[ES_PROTO_AUTH_SIZE];
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
        const char *tok = getenv("EASYSCALE_TOKEN");
        snprintf(host, sizeof(host), "%s", ctl + 4);
        port = strrchr(host, ':');
        if (!port || !tok || es_proto_auth_encode(tok, auth) < 0)
            return -1;
        *port++ = '\0';
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
            return -1;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
                        es_proto_send_all(fd, auth, sizeof(auth), NULL) < 0)) {
            close(fd);
            fd = -1;
        }
        freeaddrinfo(ai);
        return fd;
    }
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ctl);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "fake_est: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--move") == 0)
            opt_move = v;
        else if (strcmp(a, "--hold-refuse-rank") == 0)
            opt_hold_refuse = num(v);
        else if (strcmp(a, "--hold-at-refuse-rank") == 0)
            opt_hold_at_refuse = num(v);
        else if (strcmp(a, "--hb-ms") == 0)
            opt_hb = num(v);
        else if (strcmp(a, "--step-ns") == 0)
            opt_step_ns = num(v);
        else if (strcmp(a, "--wait-ns") == 0)
            opt_wait_ns = num(v);
        else if (strcmp(a, "--wait-ns-by-rank") == 0)
            opt_wait_list = v;
        else if (strcmp(a, "--mem") == 0)
            opt_mem = (unsigned long long)num(v);
        else if (strcmp(a, "--steps-per-hb") == 0)
            opt_steps = num(v);
        else if (strcmp(a, "--run-ms") == 0)
            opt_run = num(v);
        else if (strcmp(a, "--fail-rank") == 0)
            opt_fail_rank = num(v);
        else if (strcmp(a, "--rejoin-rank") == 0)
            opt_rejoin_rank = num(v);
        else if (strcmp(a, "--rejoin-ms") == 0)
            opt_rejoin_ms = num(v);
        else if (strcmp(a, "--end-step") == 0)
            opt_end_step = num(v);
        else if (strcmp(a, "--ack-delay-ms") == 0)
            opt_ack_delay = num(v);
        else if (strcmp(a, "--ignore-holds") == 0)
            opt_ignore_holds = num(v);
        else if (strcmp(a, "--until") == 0)
            opt_until = v;
        else if (strcmp(a, "--ts-by-rank") == 0)
            opt_ts_list = v;
        else {
            fprintf(stderr, "fake_est: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    const char *ctl = getenv("EASYSCALE_CONTROL"), *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    const char *s = getenv("EASYSCALE_SLOT");
    if (!ctl || !r || !w) {
        fprintf(stderr, "fake_est: EASYSCALE_CONTROL, RANK and WORLD_SIZE must be set\n");
        return 2;
    }
    rank = (int)num(r);
    world = (int)num(w);
    const char *hs = getenv("EASYSCALE_HOLD_STEPS");
    if (hs && *hs) {
        char list[4096], *save = NULL;
        snprintf(list, sizeof(list), "%s", hs);
        for (char *t = strtok_r(list, ",", &save); t && nholds < 256; t = strtok_r(NULL, ",", &save))
            holds[nholds++] = (uint64_t)num(t);
    }
    snprintf(slot, sizeof(slot), "%s", s ? s : "");
    if (opt_wait_list) { /* this rank's entry of the list */
        char list[512], *save = NULL;
        int i = 0;
        snprintf(list, sizeof(list), "%s", opt_wait_list);
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save), i++)
            if (i == rank)
                opt_wait_ns = num(t);
    }
    if (opt_ts_list)
        parse_ts();
    long long end = now_ms() + opt_run;
    int backoff = 20;
    while (now_ms() < end && !finished()) {
        int fd = ctl_connect(ctl);
        if (fd >= 0) {
            backoff = 20;
            int done = session(fd, end);
            close(fd);
            if (done)
                break;
            if ((opt_end_step && step >= (uint64_t)opt_end_step) || finished())
                break;
            if (rank == opt_rejoin_rank && opt_rejoin_ms > 0) {
                struct timespec rj = { opt_rejoin_ms / 1000, (opt_rejoin_ms % 1000) * 1000000L };
                nanosleep(&rj, NULL);
            }
        }
        struct timespec ts = { 0, backoff * 1000000L };
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 500 ? 500 : backoff * 2;
    }
    /* stay alive until the end even when refused (not when at --end-step) */
    long long left = end - now_ms();
    while (left > 0 && !(opt_end_step && step >= (uint64_t)opt_end_step) && !finished()) {
        struct timespec ts = { 0, 50000000L };
        nanosleep(&ts, NULL);
        left = end - now_ms();
    }
    printf("fake_est: rank %d: done at step %llu\n", rank, (unsigned long long)step);
    return rank == opt_fail_rank ? 3 : 0;
}
