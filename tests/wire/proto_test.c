/* Unit tests of the control protocol (wire/proto.h) and of what sits
 * around it on both sides: every message encoded and decoded back, the wire
 * layout byte by byte, every class of bad frame refused with its error, the
 * frame reader fed byte by byte and with frames back to back, the TCP
 * token block, the peer-credential check through its seam (another uid is
 * refused; a real socketpair gives our own uid), and the shim's strict
 * parsing of its control variables (shim/config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "controller/ctl.h"
#include "wire/proto.h"
#include "shim/config.h"
#include "shim/step.h"

#include <pthread.h>
#include <time.h>

static void msleep_(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static size_t enc(es_proto_msg_t *m, uint8_t *b, size_t cap)
{
    size_t len = 0;
    assert_int_equal(es_proto_encode(m, b, cap, &len), 0);
    return len;
}

/* Decodes a whole frame; returns the decode result. */
static int dec(const uint8_t *b, size_t len, uint32_t accept, es_proto_msg_t *out)
{
    es_proto_hdr_t h;
    int rc = es_proto_decode_hdr(b, accept, &h);
    if (rc < 0)
        return rc;
    if (len != ES_PROTO_HDR_SIZE + h.length)
        return -EBADMSG;
    return es_proto_decode(&h, b + ES_PROTO_HDR_SIZE, out);
}

static const uint32_t ALL = 0xffffffffu;

static void test_roundtrip(void **state)
{
    (void)state;
    uint8_t b[2048];
    es_proto_msg_t m, d;

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REGISTER;
    m.seq = 7;
    m.u.reg.rank = 3;
    m.u.reg.world = 4;
    m.u.reg.pid = 12345;
    m.u.reg.step = 1ull << 40;
    m.u.reg.epoch = 9;
    m.u.reg.mem_bytes = 256ull << 20;
    strcpy(m.u.reg.slot, "GPU-a9a57be3-4a8a-4caa-9893-de3201f72ae9");
    strcpy(m.u.reg.host, "node-1");
    size_t n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), 0);
    assert_int_equal(d.type, ES_MSG_REGISTER);
    assert_int_equal(d.seq, 7);
    assert_int_equal(d.u.reg.rank, 3);
    assert_int_equal(d.u.reg.world, 4);
    assert_int_equal(d.u.reg.pid, 12345);
    assert_true(d.u.reg.step == 1ull << 40);
    assert_true(d.u.reg.mem_bytes == 256ull << 20);
    assert_string_equal(d.u.reg.slot, m.u.reg.slot);
    assert_string_equal(d.u.reg.host, "node-1");

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_HEARTBEAT;
    m.u.hb.step = 99;
    m.u.hb.step_time_ns = 12345678;
    m.u.hb.wait_ns = 55;
    m.u.hb.epoch = 2;
    m.u.hb.state = ES_EST_SWAPPED_OUT;
    m.u.hb.held = 41;
    m.u.hb.yields = 17;
    m.u.hb.swaps_out = 18;
    m.u.hb.swaps_in = 16;
    m.u.hb.bytes_out = 5ull << 32;
    m.u.hb.bytes_in = (3ull << 30) + 1;
    m.u.hb.where = ES_WHERE_PARKED;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(n, ES_PROTO_HDR_SIZE + es_proto_max_len(ES_MSG_HEARTBEAT));
    assert_int_equal(dec(b, n, ALL, &d), 0);
    assert_true(d.u.hb.step == 99 && d.u.hb.step_time_ns == 12345678 && d.u.hb.wait_ns == 55);
    assert_int_equal(d.u.hb.state, ES_EST_SWAPPED_OUT);
    assert_true(d.u.hb.held == 41);
    assert_true(d.u.hb.yields == 17 && d.u.hb.swaps_out == 18 && d.u.hb.swaps_in == 16);
    assert_true(d.u.hb.bytes_out == 5ull << 32 && d.u.hb.bytes_in == (3ull << 30) + 1);
    assert_int_equal(d.u.hb.where, ES_WHERE_PARKED);

    /* a release: the ESTs take it, the daemon does not */
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_RELEASE;
    m.u.release.step = 0x0102030405060708ull;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(n, ES_PROTO_HDR_SIZE + 8);
    assert_int_equal(b[ES_PROTO_HDR_SIZE], 0x08); /* little-endian */
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    assert_true(d.u.release.step == 0x0102030405060708ull);
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), -EBADMSG);

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_MOVE;
    m.u.move.op = ES_MOVE_MIGRATE;
    m.u.move.epoch = 5;
    strcpy(m.u.move.slot, "1");
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    assert_int_equal(d.u.move.op, ES_MOVE_MIGRATE);
    assert_string_equal(d.u.move.slot, "1");

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_ACK;
    m.u.ack.op = ES_MOVE_SWAP_OUT;
    m.u.ack.result = -ENOTSUP;
    m.u.ack.epoch = 5;
    m.u.ack.total_ns = 1;
    m.u.ack.sync_ns = 2;
    m.u.ack.copy_ns = 3;
    m.u.ack.bytes = 4;
    strcpy(m.u.ack.slot, "host");
    strcpy(m.u.ack.reason, "swap-out: not supported");
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), 0);
    assert_int_equal(d.u.ack.result, -ENOTSUP);
    assert_true(d.u.ack.copy_ns == 3 && d.u.ack.bytes == 4);
    assert_string_equal(d.u.ack.reason, "swap-out: not supported");

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REQUEST;
    m.u.req.verb = ES_VERB_MIGRATE;
    m.u.req.rank = 2;
    m.u.req.flags = ES_REQ_JSON | ES_REQ_AGAIN;
    strcpy(m.u.req.arg, "GPU-x");
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), 0);
    assert_int_equal(d.u.req.rank, 2);
    assert_int_equal(d.u.req.flags, ES_REQ_JSON | ES_REQ_AGAIN);
    assert_string_equal(d.u.req.arg, "GPU-x");

    const char *text = "line one\n\tline two\n";
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REPLY;
    m.u.reply.rc = 1;
    m.u.reply.text = text;
    m.u.reply.text_len = (uint32_t)strlen(text);
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_CLI, &d), 0);
    assert_int_equal(d.u.reply.rc, 1);
    assert_int_equal(d.u.reply.text_len, strlen(text));
    assert_memory_equal(d.u.reply.text, text, strlen(text));

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_WELCOME;
    m.u.welcome.epoch = 77;
    m.u.welcome.daemon_pid = 4242;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    assert_true(d.u.welcome.epoch == 77 && d.u.welcome.daemon_pid == 4242);

    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_ERROR;
    m.u.err.code = -EEXIST;
    strcpy(m.u.err.text, "held");
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), 0);
    assert_int_equal(d.u.err.code, -EEXIST);
}

static void test_wire_layout(void **state)
{
    (void)state;
    uint8_t b[256];
    es_proto_msg_t m = { .type = ES_MSG_MOVE, .seq = 0x01020304 };
    m.u.move.op = ES_MOVE_PLACE;
    m.u.move.epoch = 0x1122334455667788ull;
    strcpy(m.u.move.slot, "ab");
    size_t n = enc(&m, b, sizeof(b));
    /* header: "ESC1", version 6, type 3, length, seq; all little-endian */
    static const uint8_t hdr[16] = { 'E', 'S', 'C', '1', 6, 0, 3, 0, 4 + 8 + 2 + 2 + 4 + 8, 0, 0,
                                     0, 4, 3, 2, 1 };
    assert_memory_equal(b, hdr, 16);
    static const uint8_t body[28] = { 1, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                                      2, 0, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    assert_int_equal(n, 44);
    assert_memory_equal(b + 16, body, 28);
    /* a hold at run time: the step last (version 5); only HOLD_AT has one */
    m.u.move.op = ES_MOVE_HOLD_AT;
    m.u.move.step = 0x0102030405060708ull;
    n = enc(&m, b, sizeof(b));
    static const uint8_t step[8] = { 8, 7, 6, 5, 4, 3, 2, 1 };
    assert_int_equal(n, 44);
    assert_memory_equal(b + 36, step, 8);
    es_proto_hdr_t hh;
    es_proto_msg_t dd;
    assert_int_equal(es_proto_decode_hdr(b, ALL, &hh), 0);
    assert_int_equal(es_proto_decode(&hh, b + 16, &dd), 0);
    assert_int_equal(dd.u.move.step, 0x0102030405060708ull);
    m.u.move.op = ES_MOVE_MIGRATE; /* a step on another op: refused both ways */
    size_t len;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.op = ES_MOVE_HOLD_AT;
    n = enc(&m, b, sizeof(b));
    b[16] = ES_MOVE_MIGRATE;
    assert_int_equal(es_proto_decode(&hh, b + 16, &dd), -EBADMSG);
    m.u.move.step = 0;
    /* a time-slice join: the rank list after the slot (count, then each) */
    m.u.move.op = ES_MOVE_TS_JOIN;
    m.u.move.nranks = 2;
    m.u.move.ranks[0] = 2;
    m.u.move.ranks[1] = 0x0103;
    n = enc(&m, b, sizeof(b));
    static const uint8_t tail[12] = { 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 0, 0 };
    assert_int_equal(n, 52);
    assert_int_equal(b[16], ES_MOVE_TS_JOIN);
    assert_memory_equal(b + 32, tail, 12);
    /* the auth block: "ESA1", version, length, zero-padded token */
    uint8_t a[ES_PROTO_AUTH_SIZE];
    assert_int_equal(es_proto_auth_encode("0123456789abcdef", a), 0);
    assert_memory_equal(a, "ESA1\x06\x00\x10\x00" "0123456789abcdef", 24);
    for (size_t i = 24; i < sizeof(a); i++)
        assert_int_equal(a[i], 0);
}

static void test_bad_frames(void **state)
{
    (void)state;
    uint8_t b[2048], c[2048];
    es_proto_msg_t m = { .type = ES_MSG_HEARTBEAT }, d;
    es_proto_hdr_t h;
    size_t n = enc(&m, b, sizeof(b));

    memcpy(c, b, n);
    c[0] = 'X'; /* magic */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTO);
    memcpy(c, b, n);
    c[4] = 1; /* version 1: a peer of an older release */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    assert_int_equal(h.version, 1);
    assert_non_null(strstr(es_proto_strerror(-EPROTONOSUPPORT), "one build"));
    c[4] = 2; /* version 2: no scheduled holds */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    c[4] = 3; /* version 3: heartbeats without the time-slicing figures */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    assert_int_equal(h.version, 3);
    c[4] = 4; /* version 4: no holds set at run time */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    c[4] = 5; /* version 5: no node reports (jobs across hosts) */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    c[4] = 7;
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EPROTONOSUPPORT);
    memcpy(c, b, n);
    c[6] = 99; /* unknown type */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EBADMSG);
    c[6] = 0;
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EBADMSG);
    /* a type the receiver does not take: a heartbeat sent to an EST */
    assert_int_equal(es_proto_decode_hdr(b, ES_PROTO_ACCEPT_EST, &h), -EBADMSG);
    assert_int_equal(es_proto_decode_hdr(b, ES_PROTO_ACCEPT_CLI, &h), -EBADMSG);
    memcpy(c, b, n);
    c[8] = 0xff; /* length over the type's limit */
    c[9] = 0xff;
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EMSGSIZE);
    /* a reply over 1 MiB */
    es_proto_msg_t r = { .type = ES_MSG_REPLY };
    r.u.reply.text = "x";
    r.u.reply.text_len = 1;
    n = enc(&r, c, sizeof(c));
    c[8] = 0;
    c[9] = 0;
    c[10] = 0x20; /* 2 MiB */
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EMSGSIZE);

    /* payload faults: short, trailing bytes, a string past its limit, a
     * non-printable byte, a bad op / state / verb / rc */
    m = (es_proto_msg_t){ .type = ES_MSG_ACK };
    m.u.ack.op = ES_MOVE_PLACE;
    strcpy(m.u.ack.reason, "why");
    n = enc(&m, b, sizeof(b));
    assert_int_equal(es_proto_decode_hdr(b, ALL, &h), 0);
    h.length--;
    assert_int_equal(es_proto_decode(&h, b + 16, &d), -EBADMSG);
    h.length += 2;
    assert_int_equal(es_proto_decode(&h, b + 16, &d), -EBADMSG);
    h.length--;
    assert_int_equal(es_proto_decode(&h, b + 16, &d), 0);
    memcpy(c, b, n);
    c[n - 9] = 0x07; /* BEL in the reason (the step's 8 bytes follow it) */
    assert_int_equal(es_proto_decode(&h, c + 16, &d), -EBADMSG);
    memcpy(c, b, n);
    c[16] = 9; /* op 9 */
    assert_int_equal(es_proto_decode(&h, c + 16, &d), -EBADMSG);
    memcpy(c, b, n);
    c[20] = 1; /* a positive result */
    assert_int_equal(es_proto_decode(&h, c + 16, &d), -EBADMSG);
    /* the reason's length field claims more than the frame holds */
    memcpy(c, b, n);
    c[n - 13] = 0xff; /* (the step's 8 bytes after the reason) */
    assert_int_equal(es_proto_decode(&h, c + 16, &d), -EBADMSG);

    m = (es_proto_msg_t){ .type = ES_MSG_HEARTBEAT };
    m.u.hb.state = 7;
    n = enc(&m, b, sizeof(b)); /* the encoder does not judge the state */
    assert_int_equal(dec(b, n, ALL, &d), -EBADMSG);
    m = (es_proto_msg_t){ .type = ES_MSG_REQUEST };
    m.u.req.verb = ES_VERB_STATUS;
    m.u.req.flags = 4; /* unknown flag */
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), -EBADMSG);
    r.u.reply.rc = 5;
    n = enc(&r, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), -EBADMSG);

    /* the encoder refuses what the decoder would refuse */
    size_t len;
    m = (es_proto_msg_t){ .type = ES_MSG_REGISTER };
    memset(m.u.reg.slot, 'a', ES_PROTO_SLOT_MAX);
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), 0);
    m.u.reg.host[0] = '\n';
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.reg.host[0] = 'h';
    assert_int_equal(es_proto_encode(&m, b, 20, &len), -EMSGSIZE);
    m.type = 0;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m = (es_proto_msg_t){ .type = ES_MSG_MOVE };
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL); /* op 0 */
}

/* MOVE's rank list: a join names 2..ES_PROTO_TS_MAX ascending ranks, every
 * other op none; anything else is refused both ways. */
static void test_move_ranks(void **state)
{
    (void)state;
    uint8_t b[2048];
    size_t len;
    es_proto_msg_t m = { .type = ES_MSG_MOVE, .seq = 9 }, d;
    m.u.move.op = ES_MOVE_TS_JOIN;
    m.u.move.epoch = 7;
    strcpy(m.u.move.slot, "GPU-a9a57be3-4a8a-4caa-9893-de3201f72ae9");
    m.u.move.nranks = ES_PROTO_TS_MAX;
    for (uint32_t i = 0; i < ES_PROTO_TS_MAX; i++)
        m.u.move.ranks[i] = 3 * i;
    size_t n = enc(&m, b, sizeof(b));
    assert_int_equal(n, ES_PROTO_HDR_SIZE + es_proto_max_len(ES_MSG_MOVE) -
                            (ES_PROTO_SLOT_MAX - strlen(m.u.move.slot)));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    assert_int_equal(d.u.move.op, ES_MOVE_TS_JOIN);
    assert_int_equal(d.u.move.nranks, ES_PROTO_TS_MAX);
    assert_int_equal(d.u.move.ranks[ES_PROTO_TS_MAX - 1], 3 * (ES_PROTO_TS_MAX - 1));
    /* the encoder refuses: one rank, a repeat, descending, too many, a
     * list on another op */
    m.u.move.nranks = 1;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.nranks = 2;
    m.u.move.ranks[1] = 0;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.ranks[0] = 5;
    m.u.move.ranks[1] = 4;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.nranks = ES_PROTO_TS_MAX + 1;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.op = ES_MOVE_TS_LEAVE;
    m.u.move.nranks = 2;
    m.u.move.ranks[0] = 1;
    m.u.move.ranks[1] = 2;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &len), -EINVAL);
    m.u.move.nranks = 0;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    assert_int_equal(d.u.move.op, ES_MOVE_TS_LEAVE);
    /* the decoder too: a valid join, then its list made descending on the
     * wire; then a count over the limit; then a leave with a list */
    m.u.move.op = ES_MOVE_TS_JOIN;
    m.u.move.nranks = 2;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), 0);
    b[n - 8] = 9; /* ranks 9, 2 */
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), -EBADMSG);
    b[n - 8] = 1;
    size_t cnt = n - 12; /* the count's offset */
    b[cnt] = ES_PROTO_TS_MAX + 1;
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), -EBADMSG);
    b[cnt] = 2;
    b[ES_PROTO_HDR_SIZE] = ES_MOVE_TS_LEAVE;
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), -EBADMSG);
    b[ES_PROTO_HDR_SIZE] = ES_MOVE_NOPS; /* an op this build does not know */
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_EST, &d), -EBADMSG);

    /* REGISTER's flags: a member of a rotation says so; no other bit */
    es_proto_msg_t g = { .type = ES_MSG_REGISTER };
    g.u.reg.world = 4;
    g.u.reg.flags = ES_REG_TIME_SLICED;
    n = enc(&g, b, sizeof(b));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), 0);
    assert_int_equal(d.u.reg.flags, ES_REG_TIME_SLICED);
    b[ES_PROTO_HDR_SIZE + 12] |= 2; /* flags: the fourth field */
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), -EBADMSG);
}

/* HEARTBEAT's time-slicing figures (version 4): their place on the wire,
 * and a heartbeat of any other size or with an unknown `where` refused. */
static void test_heartbeat_figures(void **state)
{
    (void)state;
    uint8_t b[256], c[256];
    es_proto_msg_t m = { .type = ES_MSG_HEARTBEAT }, d;
    es_proto_hdr_t h;
    m.u.hb.held = 0x0909;
    m.u.hb.yields = 0x0102;
    m.u.hb.swaps_out = 3;
    m.u.hb.swaps_in = 4;
    m.u.hb.bytes_out = 0x0506070809ull;
    m.u.hb.bytes_in = 6;
    m.u.hb.where = ES_WHERE_RESIDENT;
    size_t n = enc(&m, b, sizeof(b));
    assert_int_equal(n, ES_PROTO_HDR_SIZE + ES_PROTO_HB_LEN);
    assert_int_equal(b[4], ES_PROTO_VERSION);
    assert_int_equal(b[8], ES_PROTO_HB_LEN); /* the length field */
    /* after version 3's fields (5 x 8, state 4, held 8: 52 bytes), in order */
    const uint8_t *p = b + ES_PROTO_HDR_SIZE + 52;
    static const uint8_t figs[44] = { 2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
                                      4, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 0, 0, 0,
                                      6, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 };
    assert_int_equal(p[-8], 0x09); /* held, just before */
    assert_memory_equal(p, figs, sizeof(figs));
    assert_int_equal(dec(b, n, ES_PROTO_ACCEPT_DAEMON, &d), 0);
    assert_int_equal(d.u.hb.where, ES_WHERE_RESIDENT);
    assert_true(d.u.hb.bytes_out == 0x0506070809ull);
    /* a version 3 heartbeat's size (52 bytes) under this version: malformed */
    memcpy(c, b, n);
    c[8] = 52;
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), 0);
    assert_int_equal(es_proto_decode(&h, c + ES_PROTO_HDR_SIZE, &d), -EBADMSG);
    assert_int_equal(dec(c, ES_PROTO_HDR_SIZE + 52, ALL, &d), -EBADMSG);
    /* one byte short, and one over the limit (refused on the header) */
    c[8] = ES_PROTO_HB_LEN - 1;
    assert_int_equal(dec(c, n - 1, ALL, &d), -EBADMSG);
    c[8] = ES_PROTO_HB_LEN + 1;
    assert_int_equal(es_proto_decode_hdr(c, ALL, &h), -EMSGSIZE);
    /* an unknown `where` (the encoder does not judge it) */
    m.u.hb.where = ES_WHERE_PARKED + 1;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), -EBADMSG);
    m.u.hb.where = ES_WHERE_UNKNOWN;
    n = enc(&m, b, sizeof(b));
    assert_int_equal(dec(b, n, ALL, &d), 0);
    assert_int_equal(d.u.hb.where, ES_WHERE_UNKNOWN);
}

static void test_reader(void **state)
{
    (void)state;
    uint8_t b[4096], buf[1024];
    size_t n1, n2, used;
    es_proto_msg_t m = { .type = ES_MSG_REGISTER, .seq = 1 }, d;
    m.u.reg.rank = 1;
    m.u.reg.world = 2;
    strcpy(m.u.reg.slot, "0");
    n1 = enc(&m, b, sizeof(b));
    es_proto_msg_t h = { .type = ES_MSG_HEARTBEAT, .seq = 2 };
    h.u.hb.step = 42;
    n2 = enc(&h, b + n1, sizeof(b) - n1);

    /* byte by byte */
    es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_DAEMON, .buf = buf, .cap = sizeof(buf) };
    size_t off = 0;
    int got = 0;
    while (off < n1 + n2) {
        int rc = es_proto_reader_push(&rd, b + off, 1, &used);
        assert_true(rc >= 0);
        off += used;
        if (rc == 1) {
            assert_int_equal(es_proto_decode(&rd.h, rd.buf, &d), 0);
            if (got == 0)
                assert_int_equal(d.u.reg.rank, 1);
            else
                assert_true(d.u.hb.step == 42);
            got++;
            es_proto_reader_reset(&rd);
        }
    }
    assert_int_equal(got, 2);

    /* both at once: the reader stops at the end of the first */
    assert_int_equal(es_proto_reader_push(&rd, b, n1 + n2, &used), 1);
    assert_int_equal(used, n1);
    es_proto_reader_reset(&rd);
    assert_int_equal(es_proto_reader_push(&rd, b + used, n2, &used), 1);
    es_proto_reader_reset(&rd);

    /* an oversized header is refused before any payload is taken */
    uint8_t big[16];
    memcpy(big, b, 16);
    big[8] = 0;
    big[9] = 0;
    big[10] = 0x10; /* 1 MiB for a REGISTER */
    assert_int_equal(es_proto_reader_push(&rd, big, 16, &used), -EMSGSIZE);
    assert_int_equal(used, 16);
    es_proto_reader_reset(&rd);
    /* a payload over the reader's buffer */
    es_proto_reader_t small = { .accept = ALL, .buf = buf, .cap = 8 };
    assert_int_equal(es_proto_reader_push(&small, b, n1, &used), -EMSGSIZE);

    /* from a socket: fill reads exactly up to the frame's end */
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(es_proto_send_all(sv[0], b, n1 + n2, NULL), 0);
    close(sv[0]);
    int rc, frames = 0;
    while ((rc = es_proto_reader_fill(&rd, sv[1])) >= 0) {
        if (rc == 1) {
            frames++;
            es_proto_reader_reset(&rd);
        }
    }
    assert_int_equal(frames, 2);
    assert_int_equal(rc, -ECONNRESET);
    close(sv[1]);
    /* writing to a closed peer is -EPIPE, not SIGPIPE */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    assert_int_equal(es_proto_send_all(sv[0], b, n1, NULL), -EPIPE);
    close(sv[0]);
}

static void test_token(void **state)
{
    (void)state;
    uint8_t a[ES_PROTO_AUTH_SIZE];
    assert_int_equal(es_proto_token_valid("0123456789abcdef"), 0);
    assert_int_equal(es_proto_token_valid("short"), -EINVAL);
    assert_int_equal(es_proto_token_valid("0123456789 abcdef"), -EINVAL);
    char longt[80];
    memset(longt, 'x', 65);
    longt[65] = '\0';
    assert_int_equal(es_proto_token_valid(longt), -EINVAL);
    longt[64] = '\0';
    assert_int_equal(es_proto_token_valid(longt), 0);
    assert_int_equal(es_proto_auth_encode("0123456789abcdef", a), 0);
    assert_int_equal(es_proto_auth_check(a, "0123456789abcdef"), 0);
    assert_int_equal(es_proto_auth_check(a, "0123456789abcdeg"), -EACCES);
    assert_int_equal(es_proto_auth_check(a, "0123456789abcdef0"), -EACCES); /* longer */
    assert_int_equal(es_proto_auth_check(a, "bad"), -EACCES);
    a[70] = 1; /* padding must be zero */
    assert_int_equal(es_proto_auth_check(a, "0123456789abcdef"), -EACCES);
}

/* ---- the peer check's seam ------------------------------------------------------- */

static int fake_other_uid(int fd, uid_t *uid, pid_t *pid)
{
    (void)fd;
    *uid = geteuid() + 1;
    *pid = 4321;
    return 0;
}

static int fake_same_uid(int fd, uid_t *uid, pid_t *pid)
{
    (void)fd;
    *uid = geteuid();
    *pid = 4321;
    return 0;
}

static int fake_fails(int fd, uid_t *uid, pid_t *pid)
{
    (void)fd;
    (void)uid;
    (void)pid;
    return -ENOTSOCK;
}

static void test_peer_check(void **state)
{
    (void)state;
    pid_t pid = 0;
    assert_int_equal(es_ctl_peer_check(3, geteuid(), fake_other_uid, &pid), -EACCES);
    assert_int_equal(pid, 0);
    assert_int_equal(es_ctl_peer_check(3, geteuid(), fake_same_uid, &pid), 0);
    assert_int_equal(pid, 4321);
    assert_int_equal(es_ctl_peer_check(3, geteuid(), fake_fails, &pid), -ENOTSOCK);
    assert_int_equal(es_ctl_peer_check(3, geteuid(), NULL, &pid), -EINVAL);
    /* the real getter on a real socket: our own uid and pid */
    int sv[2];
    uid_t u;
    pid_t p;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(es_ctl_peercred_sys(sv[0], &u, &p), 0);
    assert_int_equal(u, geteuid());
    assert_int_equal(p, getpid());
    assert_int_equal(es_ctl_peer_check(sv[0], geteuid(), es_ctl_peercred_sys, &pid), 0);
    assert_int_equal(es_ctl_peer_check(sv[0], geteuid() + 1, es_ctl_peercred_sys, &pid), -EACCES);
    close(sv[0]);
    close(sv[1]);
    /* not a socket */
    int pp[2];
    assert_int_equal(pipe(pp), 0);
    assert_int_equal(es_ctl_peercred_sys(pp[0], &u, &p), -ENOTSOCK);
    close(pp[0]);
    close(pp[1]);
}

/* ---- the shim's control variables ------------------------------------------------ */

static int parse_with(const char *const *vars, es_config_t *c, char *msg, size_t len)
{
    static const char *const names[] = { "EASYSCALE_CONTROL", "EASYSCALE_TOKEN",
                                         "EASYSCALE_HEARTBEAT_MS", "RANK", "WORLD_SIZE" };
    for (size_t i = 0; i < 5; i++) {
        if (vars[i])
            setenv(names[i], vars[i], 1);
        else
            unsetenv(names[i]);
    }
    msg[0] = '\0';
    return es_config_parse(c, msg, len);
}

static void test_shim_config(void **state)
{
    (void)state;
    es_config_t c;
    char msg[512];
    const char *tok = "0123456789abcdef";
    unsetenv("EASYSCALE_DETERMINISM");
    unsetenv("EASYSCALE_LOG_FILE");
    /* nothing set: no control channel, the default heartbeat */
    assert_int_equal(parse_with((const char *[]){ NULL, NULL, NULL, NULL, NULL }, &c, msg,
                                sizeof(msg)), 0);
    assert_string_equal(c.control, "");
    assert_int_equal(c.heartbeat_ms, 1000);
    /* a unix path, plain and with unix: */
    assert_int_equal(parse_with((const char *[]){ "/run/x.sock", NULL, "250", "2", "4" }, &c, msg,
                                sizeof(msg)), 0);
    assert_string_equal(c.control, "/run/x.sock");
    assert_int_equal(c.heartbeat_ms, 250);
    assert_int_equal(c.rank, 2);
    assert_int_equal(c.world, 4);
    assert_int_equal(parse_with((const char *[]){ "unix:/run/y.sock", NULL, NULL, "0", "1" }, &c,
                                msg, sizeof(msg)), 0);
    assert_string_equal(c.control, "/run/y.sock");
    /* tcp with a token */
    assert_int_equal(parse_with((const char *[]){ "tcp:10.0.0.1:7000", tok, NULL, "0", "1" }, &c,
                                msg, sizeof(msg)), 0);
    assert_string_equal(c.control, "tcp:10.0.0.1:7000");
    assert_string_equal(c.token, tok);
    /* each bad value: an error with a message naming the variable */
    struct {
        const char *v[5];
        const char *needle;
    } bad[] = {
        { { "relative.sock", NULL, NULL, "0", "1" }, "EASYSCALE_CONTROL" },
        { { "", NULL, NULL, "0", "1" }, "EASYSCALE_CONTROL" },
        { { "unix:", NULL, NULL, "0", "1" }, "EASYSCALE_CONTROL" },
        { { "tcp:host", tok, NULL, "0", "1" }, "tcp:HOST:PORT" },
        { { "tcp:host:0", tok, NULL, "0", "1" }, "tcp:HOST:PORT" },
        { { "tcp:host:99999", tok, NULL, "0", "1" }, "tcp:HOST:PORT" },
        { { "tcp:host:7000", NULL, NULL, "0", "1" }, "EASYSCALE_TOKEN" },
        { { "tcp:host:7000", "short", NULL, "0", "1" }, "EASYSCALE_TOKEN" },
        { { "/x.sock", NULL, "5", "0", "1" }, "EASYSCALE_HEARTBEAT_MS" },
        { { "/x.sock", NULL, "1000ms", "0", "1" }, "EASYSCALE_HEARTBEAT_MS" },
        { { NULL, NULL, "", NULL, NULL }, "EASYSCALE_HEARTBEAT_MS" },
        { { "/x.sock", NULL, NULL, NULL, "1" }, "RANK" },
        { { "/x.sock", NULL, NULL, "0", NULL }, "WORLD_SIZE" },
        { { "/x.sock", NULL, NULL, "4", "4" }, "RANK" },
        { { "/x.sock", NULL, NULL, "-1", "4" }, "RANK" },
        { { "/x.sock", NULL, NULL, "1", "0" }, "WORLD_SIZE" },
        { { "/x.sock", NULL, NULL, "1", "2x" }, "WORLD_SIZE" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse_with(bad[i].v, &c, msg, sizeof(msg)), -EINVAL);
        if (!strstr(msg, bad[i].needle))
            fail_msg("case %zu: \"%s\" does not name %s", i, msg, bad[i].needle);
    }
    char longp[200];
    memset(longp, 'a', sizeof(longp));
    longp[0] = '/';
    longp[120] = '\0'; /* over a unix socket path's 107 bytes */
    assert_int_equal(parse_with((const char *[]){ longp, NULL, NULL, "0", "1" }, &c, msg,
                                sizeof(msg)), -EINVAL);
    parse_with((const char *[]){ NULL, NULL, NULL, NULL, NULL }, &c, msg, sizeof(msg));
}

/* ---- scheduled holds: the shim's side (shim/step.h) --------------------------------- */

static void test_hold_config(void **state)
{
    (void)state;
    es_config_t c;
    char msg[512];
    unsetenv("EASYSCALE_HOLD_TIMEOUT");
    setenv("EASYSCALE_HOLD_STEPS", "0,7,30", 1);
    assert_int_equal(parse_with((const char *[]){ "/x.sock", NULL, NULL, "0", "2" }, &c, msg,
                                sizeof(msg)), 0);
    assert_int_equal(c.nhold, 3);
    assert_true(c.hold[0] == 0 && c.hold[1] == 7 && c.hold[2] == 30);
    assert_int_equal(c.hold_timeout_s, 600);
    setenv("EASYSCALE_HOLD_TIMEOUT", "5", 1);
    assert_int_equal(parse_with((const char *[]){ "/x.sock", NULL, NULL, "0", "2" }, &c, msg,
                                sizeof(msg)), 0);
    assert_int_equal(c.hold_timeout_s, 5);
    struct {
        const char *steps, *timeout, *ctl, *needle;
    } bad[] = {
        { "7,7", NULL, "/x.sock", "strictly ascending" },
        { "9,3", NULL, "/x.sock", "strictly ascending" },
        { "", NULL, "/x.sock", "EASYSCALE_HOLD_STEPS" },
        { "3,", NULL, "/x.sock", "EASYSCALE_HOLD_STEPS" },
        { "-1", NULL, "/x.sock", "EASYSCALE_HOLD_STEPS" },
        { "1;2", NULL, "/x.sock", "EASYSCALE_HOLD_STEPS" },
        { "5", NULL, NULL, "EASYSCALE_CONTROL is not" },
        { "5", "0", "/x.sock", "EASYSCALE_HOLD_TIMEOUT" },
        { "5", "1s", "/x.sock", "EASYSCALE_HOLD_TIMEOUT" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("EASYSCALE_HOLD_STEPS", bad[i].steps, 1);
        if (bad[i].timeout)
            setenv("EASYSCALE_HOLD_TIMEOUT", bad[i].timeout, 1);
        else
            unsetenv("EASYSCALE_HOLD_TIMEOUT");
        assert_int_equal(parse_with((const char *[]){ bad[i].ctl, NULL, NULL,
                                                       bad[i].ctl ? "0" : NULL,
                                                       bad[i].ctl ? "2" : NULL },
                                    &c, msg, sizeof(msg)), -EINVAL);
        if (!strstr(msg, bad[i].needle))
            fail_msg("case %zu: \"%s\" does not name %s", i, msg, bad[i].needle);
    }
    /* more steps than a schedule has events */
    char many[4096];
    size_t o = 0;
    for (int i = 0; i <= ES_CFG_HOLD_MAX; i++)
        o += (size_t)snprintf(many + o, sizeof(many) - o, "%s%d", i ? "," : "", i);
    setenv("EASYSCALE_HOLD_STEPS", many, 1);
    assert_int_equal(parse_with((const char *[]){ "/x.sock", NULL, NULL, "0", "2" }, &c, msg,
                                sizeof(msg)), -EINVAL);
    unsetenv("EASYSCALE_HOLD_STEPS");
    unsetenv("EASYSCALE_HOLD_TIMEOUT");
}

/* The control thread's wake-up (shim/control.c), here counted. */
static int g_kicks;
void es_control_kick(void)
{
    g_kicks++;
}

static void *release_later(void *arg)
{
    msleep_(200);
    es_step_release(*(uint64_t *)arg);
    return NULL;
}

static int g_polls;
static int poll_stop_after_3(void *arg)
{
    (void)arg;
    return ++g_polls >= 3;
}

static void test_hold_wait(void **state)
{
    (void)state;
    es_config_t saved = es_cfg;
    es_cfg.nhold = 3;
    es_cfg.hold[0] = 2;
    es_cfg.hold[1] = 5;
    es_cfg.hold[2] = 9;
    es_cfg.hold_timeout_s = 1;
    es_cfg.log_level = ES_LOG_ERROR; /* the timeout's warning is expected */
    uint64_t s = 0;
    /* collectives 0 and 1 go on; 2 waits for the release of step 2 */
    assert_int_equal(es_step_hold_due(0, &s), 0);
    assert_int_equal(es_step_hold_due(1, &s), 0);
    assert_int_equal(es_step_hold_due(2, &s), 1);
    assert_true(s == 2);
    uint64_t rel = 2;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, &rel), 0);
    g_kicks = 0;
    assert_int_equal(es_step_hold_wait(2, NULL, NULL), 0);
    pthread_join(th, NULL);
    assert_true(g_kicks >= 2);          /* at the start and the end */
    assert_true(es_step_held() == 0);   /* not waiting any more */
    assert_int_equal(es_step_hold_due(3, &s), 0);
    /* step 5: nobody releases it, the wait times out and the hold is over */
    assert_int_equal(es_step_hold_due(6, &s), 1); /* at or after: a collective inside a group */
    assert_true(s == 5);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(es_step_hold_wait(5, NULL, NULL), -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 990);
    assert_int_equal(es_step_hold_due(6, &s), 0);
    /* step 9: the poll ends it (a time-slicing change for this EST) */
    assert_int_equal(es_step_hold_due(9, &s), 1);
    g_polls = 0;
    assert_int_equal(es_step_hold_wait(9, poll_stop_after_3, NULL), 1);
    assert_int_equal(g_polls, 3);
    assert_int_equal(es_step_hold_due(100, &s), 0);
    /* a release of a later step covers the earlier ones too */
    es_cfg.hold[0] = 20;
    es_cfg.hold[1] = 21;
    es_cfg.nhold = 2;
    es_step_release(21);
    assert_int_equal(es_step_hold_due(25, &s), 0);
    es_cfg = saved;
}

/* A hold set at run time (shim/step.h): the offer stops the collective it
 * names until HOLD_AT says where the hold is; then that collective holds
 * as a scheduled one does. */
static uint64_t g_blocked_idx;
static volatile int g_passed;
static void *hold_due_in_thread(void *arg)
{
    (void)arg;
    uint64_t s;
    es_step_hold_due(g_blocked_idx, &s);
    g_passed = 1;
    return NULL;
}

static void test_hold_at_run_time(void **state)
{
    (void)state;
    es_config_t saved = es_cfg;
    es_cfg.nhold = 0;
    es_cfg.hold_timeout_s = 30;
    uint64_t idx, o = 0, o2 = 0, s = 0;
    while ((idx = es_step_issue()) < 40) /* past every release of the tests before */
        ;
    assert_int_equal(es_step_offer(&o), 0);
    assert_true(o == idx + 1);            /* the next one issued */
    assert_int_equal(es_step_offer(&o2), 0);
    assert_true(o2 == o);                 /* the same answer until the hold is set */
    assert_int_equal(es_step_hold_due(o - 1, &s), 0); /* an earlier one goes on */
    /* the offered collective waits */
    g_blocked_idx = o;
    g_passed = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_due_in_thread, NULL), 0);
    msleep_(200);
    assert_int_equal(g_passed, 0);
    assert_int_equal(es_step_hold_at(o - 1), -ERANGE); /* before the offer: it may have run */
    assert_int_equal(g_passed, 0);
    assert_int_equal(es_step_hold_at(o + 2), 0);       /* the greatest offer of the job */
    pthread_join(th, NULL);
    assert_int_equal(g_passed, 1);
    assert_int_equal(es_step_offer(&o2), -EBUSY);      /* one hold at a time */
    assert_int_equal(es_step_hold_due(o + 1, &s), 0);
    assert_int_equal(es_step_hold_due(o + 2, &s), 1);  /* there it holds */
    assert_true(s == o + 2);
    es_step_release(o + 2);
    assert_int_equal(es_step_hold_wait(o + 2, NULL, NULL), 0);
    assert_int_equal(es_step_hold_due(o + 3, &s), 0);
    /* withdrawn: nothing stops */
    assert_int_equal(es_step_offer(&o2), 0);
    assert_int_equal(es_step_hold_at(UINT64_MAX), 0);
    assert_int_equal(es_step_hold_due(o2 + 5, &s), 0);
    /* the controller gone: an offer and a hold set are dropped */
    assert_int_equal(es_step_offer(&o2), 0);
    assert_int_equal(es_step_hold_at(o2 + 1), 0);
    es_step_hold_drop();
    assert_int_equal(es_step_hold_due(o2 + 1, &s), 0);
    assert_int_equal(es_step_offer(&o2), 0);
    es_step_hold_drop();
    assert_int_equal(es_step_hold_due(o2, &s), 0);
    es_cfg = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_wire_layout),
        cmocka_unit_test(test_bad_frames),  cmocka_unit_test(test_reader),
        cmocka_unit_test(test_move_ranks),  cmocka_unit_test(test_heartbeat_figures),
        cmocka_unit_test(test_token),       cmocka_unit_test(test_peer_check),
        cmocka_unit_test(test_shim_config),
        cmocka_unit_test(test_hold_config), cmocka_unit_test(test_hold_wait),
        cmocka_unit_test(test_hold_at_run_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
