/* The control protocol's encoder, decoder and frame reader (controller/
 * proto.h), compiled into both libeasyscale.so and easyscale-ctl. Every
 * field is written and read byte by byte in little-endian order, so the
 * wire format does not depend on the host or the compiler's layout. */
#include "wire/proto.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

uint32_t es_proto_max_len(unsigned type)
{
    /* Fixed fields plus (2 + limit) per string, rounded up generously:
     * anything longer is malformed anyway. */
    switch (type) {
    case ES_MSG_REGISTER: return 4 * 4 + 3 * 8 + 2 * (2 + ES_PROTO_SLOT_MAX);
    case ES_MSG_HEARTBEAT: return ES_PROTO_HB_LEN;
    case ES_MSG_MOVE: return 4 + 8 + 2 + ES_PROTO_SLOT_MAX + 4 + 4 * ES_PROTO_TS_MAX + 8;
    case ES_MSG_ACK:
        return 4 + 4 + 6 * 8 + 2 + ES_PROTO_SLOT_MAX + 2 + ES_PROTO_REASON_MAX;
    case ES_MSG_ERROR: return 4 + 2 + ES_PROTO_REASON_MAX;
    case ES_MSG_WELCOME: return 8 + 4;
    case ES_MSG_RELEASE: return 8;
    case ES_MSG_REQUEST: return 3 * 4 + 2 + ES_PROTO_ARG_MAX;
    case ES_MSG_REPLY: return 4 + 4 + ES_PROTO_TEXT_MAX;
    default: return 0;
    }
}

/* A MOVE's rank list: 2..ES_PROTO_TS_MAX ranks, strictly ascending, for a
 * join; none for any other op. */
static int move_ranks_ok(uint32_t op, uint32_t n, const uint32_t *ranks)
{
    if (op != ES_MOVE_TS_JOIN)
        return n == 0;
    if (n < 2 || n > ES_PROTO_TS_MAX)
        return 0;
    for (uint32_t i = 1; i < n; i++)
        if (ranks[i] <= ranks[i - 1])
            return 0;
    return 1;
}

/* ---- writer ---------------------------------------------------------------- */

typedef struct wr {
    uint8_t *p;
    size_t cap, n;
    int err;
} wr_t;

static void put(wr_t *w, const void *src, size_t len)
{
    if (w->err)
        return;
    if (len > w->cap - w->n) {
        w->err = -EMSGSIZE;
        return;
    }
    memcpy(w->p + w->n, src, len);
    w->n += len;
}

static void put_u16(wr_t *w, uint16_t v)
{
    uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    put(w, b, 2);
}

static void put_u32(wr_t *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}

static void put_u64(wr_t *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}

/* Printable ASCII; text also allows newline and tab. */
static int good_bytes(const uint8_t *s, size_t len, int text)
{
    for (size_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c < 0x7f)
            continue;
        if (text && (c == '\n' || c == '\t'))
            continue;
        return 0;
    }
    return 1;
}

static void put_str(wr_t *w, const char *s, size_t max)
{
    size_t len = strnlen(s, max + 1);
    if (len > max || !good_bytes((const uint8_t *)s, len, 0)) {
        if (!w->err)
            w->err = -EINVAL;
        return;
    }
    put_u16(w, (uint16_t)len);
    put(w, s, len);
}

int es_proto_encode(const es_proto_msg_t *m, uint8_t *buf, size_t cap, size_t *len)
{
    wr_t w = { .p = buf, .cap = cap };
    if (!m || !buf || !len || es_proto_max_len(m->type) == 0)
        return -EINVAL;
    put_u32(&w, ES_PROTO_MAGIC);
    put_u16(&w, ES_PROTO_VERSION);
    put_u16(&w, m->type);
    put_u32(&w, 0); /* length, filled in below */
    put_u32(&w, m->seq);
    switch (m->type) {
    case ES_MSG_REGISTER:
        put_u32(&w, m->u.reg.rank);
        put_u32(&w, m->u.reg.world);
        put_u32(&w, m->u.reg.pid);
        put_u32(&w, m->u.reg.flags);
        put_u64(&w, m->u.reg.step);
        put_u64(&w, m->u.reg.epoch);
        put_u64(&w, m->u.reg.mem_bytes);
        put_str(&w, m->u.reg.slot, ES_PROTO_SLOT_MAX);
        put_str(&w, m->u.reg.host, ES_PROTO_HOST_MAX);
        break;
    case ES_MSG_HEARTBEAT:
        put_u64(&w, m->u.hb.step);
        put_u64(&w, m->u.hb.step_time_ns);
        put_u64(&w, m->u.hb.wait_ns);
        put_u64(&w, m->u.hb.mem_bytes);
        put_u64(&w, m->u.hb.epoch);
        put_u32(&w, m->u.hb.state);
        put_u64(&w, m->u.hb.held);
        put_u64(&w, m->u.hb.yields);
        put_u64(&w, m->u.hb.swaps_out);
        put_u64(&w, m->u.hb.swaps_in);
        put_u64(&w, m->u.hb.bytes_out);
        put_u64(&w, m->u.hb.bytes_in);
        put_u32(&w, m->u.hb.where);
        break;
    case ES_MSG_MOVE:
        if (m->u.move.op == 0 || m->u.move.op >= ES_MOVE_NOPS)
            return -EINVAL;
        if (!move_ranks_ok(m->u.move.op, m->u.move.nranks, m->u.move.ranks) ||
            (m->u.move.op != ES_MOVE_HOLD_AT && m->u.move.step != 0))
            return -EINVAL;
        put_u32(&w, m->u.move.op);
        put_u64(&w, m->u.move.epoch);
        put_str(&w, m->u.move.slot, ES_PROTO_SLOT_MAX);
        put_u32(&w, m->u.move.nranks);
        for (uint32_t i = 0; i < m->u.move.nranks; i++)
            put_u32(&w, m->u.move.ranks[i]);
        put_u64(&w, m->u.move.step);
        break;
    case ES_MSG_ACK:
        put_u32(&w, m->u.ack.op);
        put_u32(&w, (uint32_t)m->u.ack.result);
        put_u64(&w, m->u.ack.epoch);
        put_u64(&w, m->u.ack.total_ns);
        put_u64(&w, m->u.ack.sync_ns);
        put_u64(&w, m->u.ack.copy_ns);
        put_u64(&w, m->u.ack.bytes);
        put_str(&w, m->u.ack.slot, ES_PROTO_SLOT_MAX);
        put_str(&w, m->u.ack.reason, ES_PROTO_REASON_MAX);
        put_u64(&w, m->u.ack.step);
        break;
    case ES_MSG_ERROR:
        put_u32(&w, (uint32_t)m->u.err.code);
        put_str(&w, m->u.err.text, ES_PROTO_REASON_MAX);
        break;
    case ES_MSG_WELCOME:
        put_u64(&w, m->u.welcome.epoch);
        put_u32(&w, m->u.welcome.daemon_pid);
        break;
    case ES_MSG_RELEASE:
        put_u64(&w, m->u.release.step);
        break;
    case ES_MSG_REQUEST:
        if (m->u.req.verb == 0 || m->u.req.verb >= ES_VERB_NVERBS)
            return -EINVAL;
        put_u32(&w, m->u.req.verb);
        put_u32(&w, m->u.req.flags);
        put_u32(&w, (uint32_t)m->u.req.rank);
        put_str(&w, m->u.req.arg, ES_PROTO_ARG_MAX);
        break;
    case ES_MSG_REPLY:
        if (m->u.reply.text_len > ES_PROTO_TEXT_MAX ||
            (m->u.reply.text_len && !m->u.reply.text) ||
            !good_bytes((const uint8_t *)m->u.reply.text, m->u.reply.text_len, 1))
            return -EINVAL;
        put_u32(&w, (uint32_t)m->u.reply.rc);
        put_u32(&w, m->u.reply.text_len);
        put(&w, m->u.reply.text, m->u.reply.text_len);
        break;
    }
    if (w.err)
        return w.err;
    uint32_t plen = (uint32_t)(w.n - ES_PROTO_HDR_SIZE);
    if (plen > es_proto_max_len(m->type))
        return -EINVAL;
    for (int i = 0; i < 4; i++)
        buf[8 + i] = (uint8_t)(plen >> (8 * i));
    *len = w.n;
    return 0;
}

/* ---- reader ---------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t len, n;
    int err;
} rd_t;

static const uint8_t *take(rd_t *r, size_t len)
{
    if (r->err || len > r->len - r->n) {
        r->err = -EBADMSG;
        return NULL;
    }
    const uint8_t *p = r->p + r->n;
    r->n += len;
    return p;
}

static uint16_t ld16(const uint8_t *b)
{
    return (uint16_t)(b[0] | (b[1] << 8));
}

static uint32_t ld32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t ld64(const uint8_t *b)
{
    return (uint64_t)ld32(b) | (uint64_t)ld32(b + 4) << 32;
}

static uint32_t get_u32(rd_t *r)
{
    const uint8_t *b = take(r, 4);
    return b ? ld32(b) : 0;
}

static uint64_t get_u64(rd_t *r)
{
    const uint8_t *b = take(r, 8);
    return b ? ld64(b) : 0;
}

/* A string into out (cap = max + 1). */
static void get_str(rd_t *r, char *out, size_t max)
{
    out[0] = '\0';
    const uint8_t *lb = take(r, 2);
    if (!lb)
        return;
    size_t len = ld16(lb);
    if (len > max) {
        r->err = -EBADMSG;
        return;
    }
    const uint8_t *s = take(r, len);
    if (!s)
        return;
    if (!good_bytes(s, len, 0)) {
        r->err = -EBADMSG;
        return;
    }
    memcpy(out, s, len);
    out[len] = '\0';
}

int es_proto_decode_hdr(const uint8_t *b, uint32_t accept, es_proto_hdr_t *h)
{
    h->magic = ld32(b);
    h->version = ld16(b + 4);
    h->type = ld16(b + 6);
    h->length = ld32(b + 8);
    h->seq = ld32(b + 12);
    if (h->magic != ES_PROTO_MAGIC)
        return -EPROTO;
    if (h->version != ES_PROTO_VERSION)
        return -EPROTONOSUPPORT;
    if (h->type == 0 || h->type >= ES_MSG_NTYPES || !(accept & ES_PROTO_BIT(h->type)))
        return -EBADMSG;
    if (h->length > es_proto_max_len(h->type))
        return -EMSGSIZE;
    return 0;
}

int es_proto_decode(const es_proto_hdr_t *h, const uint8_t *payload, es_proto_msg_t *m)
{
    rd_t r = { .p = payload, .len = h->length };
    memset(m, 0, sizeof(*m));
    m->type = h->type;
    m->seq = h->seq;
    if (h->length > es_proto_max_len(h->type) || (h->length && !payload))
        return -EBADMSG;
    switch (h->type) {
    case ES_MSG_REGISTER:
        m->u.reg.rank = get_u32(&r);
        m->u.reg.world = get_u32(&r);
        m->u.reg.pid = get_u32(&r);
        m->u.reg.flags = get_u32(&r);
        m->u.reg.step = get_u64(&r);
        m->u.reg.epoch = get_u64(&r);
        m->u.reg.mem_bytes = get_u64(&r);
        get_str(&r, m->u.reg.slot, ES_PROTO_SLOT_MAX);
        get_str(&r, m->u.reg.host, ES_PROTO_HOST_MAX);
        if (!r.err && (m->u.reg.flags & ~ES_REG_TIME_SLICED))
            r.err = -EBADMSG;
        break;
    case ES_MSG_HEARTBEAT:
        m->u.hb.step = get_u64(&r);
        m->u.hb.step_time_ns = get_u64(&r);
        m->u.hb.wait_ns = get_u64(&r);
        m->u.hb.mem_bytes = get_u64(&r);
        m->u.hb.epoch = get_u64(&r);
        m->u.hb.state = get_u32(&r);
        m->u.hb.held = get_u64(&r);
        m->u.hb.yields = get_u64(&r);
        m->u.hb.swaps_out = get_u64(&r);
        m->u.hb.swaps_in = get_u64(&r);
        m->u.hb.bytes_out = get_u64(&r);
        m->u.hb.bytes_in = get_u64(&r);
        m->u.hb.where = get_u32(&r);
        if (!r.err && (m->u.hb.state > ES_EST_SWAPPED_OUT || m->u.hb.where > ES_WHERE_PARKED))
            r.err = -EBADMSG;
        break;
    case ES_MSG_MOVE:
        m->u.move.op = get_u32(&r);
        m->u.move.epoch = get_u64(&r);
        get_str(&r, m->u.move.slot, ES_PROTO_SLOT_MAX);
        m->u.move.nranks = get_u32(&r);
        if (!r.err && m->u.move.nranks > ES_PROTO_TS_MAX)
            r.err = -EBADMSG;
        for (uint32_t i = 0; !r.err && i < m->u.move.nranks; i++)
            m->u.move.ranks[i] = get_u32(&r);
        m->u.move.step = get_u64(&r);
        if (!r.err && (m->u.move.op == 0 || m->u.move.op >= ES_MOVE_NOPS ||
                       !move_ranks_ok(m->u.move.op, m->u.move.nranks, m->u.move.ranks) ||
                       (m->u.move.op != ES_MOVE_HOLD_AT && m->u.move.step != 0)))
            r.err = -EBADMSG;
        break;
    case ES_MSG_ACK:
        m->u.ack.op = get_u32(&r);
        m->u.ack.result = (int32_t)get_u32(&r);
        m->u.ack.epoch = get_u64(&r);
        m->u.ack.total_ns = get_u64(&r);
        m->u.ack.sync_ns = get_u64(&r);
        m->u.ack.copy_ns = get_u64(&r);
        m->u.ack.bytes = get_u64(&r);
        get_str(&r, m->u.ack.slot, ES_PROTO_SLOT_MAX);
        get_str(&r, m->u.ack.reason, ES_PROTO_REASON_MAX);
        m->u.ack.step = get_u64(&r);
        if (!r.err && (m->u.ack.op == 0 || m->u.ack.op >= ES_MOVE_NOPS || m->u.ack.result > 0))
            r.err = -EBADMSG;
        break;
    case ES_MSG_ERROR:
        m->u.err.code = (int32_t)get_u32(&r);
        get_str(&r, m->u.err.text, ES_PROTO_REASON_MAX);
        break;
    case ES_MSG_WELCOME:
        m->u.welcome.epoch = get_u64(&r);
        m->u.welcome.daemon_pid = get_u32(&r);
        break;
    case ES_MSG_RELEASE:
        m->u.release.step = get_u64(&r);
        break;
    case ES_MSG_REQUEST:
        m->u.req.verb = get_u32(&r);
        m->u.req.flags = get_u32(&r);
        m->u.req.rank = (int32_t)get_u32(&r);
        get_str(&r, m->u.req.arg, ES_PROTO_ARG_MAX);
        if (!r.err && (m->u.req.verb == 0 || m->u.req.verb >= ES_VERB_NVERBS ||
                       (m->u.req.flags & ~ES_REQ_FLAGS) || m->u.req.rank < -1))
            r.err = -EBADMSG;
        break;
    case ES_MSG_REPLY: {
        m->u.reply.rc = (int32_t)get_u32(&r);
        uint32_t tl = get_u32(&r);
        const uint8_t *t = r.err ? NULL : take(&r, tl);
        if (t && !good_bytes(t, tl, 1))
            r.err = -EBADMSG;
        if (!r.err && (m->u.reply.rc < 0 || m->u.reply.rc > 2))
            r.err = -EBADMSG;
        m->u.reply.text = (const char *)t;
        m->u.reply.text_len = r.err ? 0 : tl;
        break;
    }
    default:
        return -EBADMSG;
    }
    if (!r.err && r.n != r.len)
        r.err = -EBADMSG; /* trailing bytes */
    return r.err;
}

const char *es_proto_strerror(int rc)
{
    switch (rc) {
    case -EPROTO: return "bad magic (not an easyscale control frame)";
    case -EPROTONOSUPPORT:
        return "unsupported protocol version (the peer is another EasyScale release: the shim "
               "and easyscale-ctl must come from one build)";
    case -EBADMSG: return "unknown, unexpected or malformed message";
    case -EMSGSIZE: return "frame over the size limit";
    case -ECONNRESET: return "connection closed";
    case -EACCES: return "authentication failed";
    case -ETIMEDOUT: return "timed out";
    default: return "I/O error";
    }
}

/* ---- incremental frame reader ---------------------------------------------- */

void es_proto_reader_reset(es_proto_reader_t *r)
{
    r->have = 0;
    memset(&r->h, 0, sizeof(r->h));
}

/* Where the next bytes go and how many the frame still needs. */
static size_t need(es_proto_reader_t *r, uint8_t **dst)
{
    if (r->have < ES_PROTO_HDR_SIZE) {
        *dst = r->hdrb + r->have;
        return ES_PROTO_HDR_SIZE - r->have;
    }
    size_t got = r->have - ES_PROTO_HDR_SIZE;
    *dst = r->buf + got;
    return r->h.length - got;
}

/* After n more bytes landed: validate a completed header; say whether the
 * frame is whole. */
static int advance(es_proto_reader_t *r, size_t n)
{
    int was_hdr = r->have < ES_PROTO_HDR_SIZE;
    r->have += n;
    if (was_hdr && r->have == ES_PROTO_HDR_SIZE) {
        int rc = es_proto_decode_hdr(r->hdrb, r->accept, &r->h);
        if (rc < 0)
            return rc;
        if (r->h.length > r->cap || (r->h.length && !r->buf))
            return -EMSGSIZE;
    }
    return r->have >= ES_PROTO_HDR_SIZE && r->have == ES_PROTO_HDR_SIZE + r->h.length;
}

int es_proto_reader_push(es_proto_reader_t *r, const uint8_t *data, size_t len, size_t *used)
{
    size_t u = 0;
    int rc = 0;
    while (u < len) {
        uint8_t *dst;
        size_t want = need(r, &dst);
        size_t n = len - u < want ? len - u : want;
        memcpy(dst, data + u, n);
        u += n;
        rc = advance(r, n);
        if (rc != 0)
            break;
    }
    if (used)
        *used = u;
    return rc;
}

int es_proto_reader_fill(es_proto_reader_t *r, int fd)
{
    uint8_t *dst;
    size_t want = need(r, &dst);
    if (want == 0)
        return advance(r, 0);
    ssize_t n = read(fd, dst, want);
    if (n == 0)
        return -ECONNRESET;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
    return advance(r, (size_t)n);
}

/* ---- TCP authentication ---------------------------------------------------- */

int es_proto_token_valid(const char *token)
{
    if (!token)
        return -EINVAL;
    size_t len = strnlen(token, ES_PROTO_TOKEN_MAX + 1);
    if (len < ES_PROTO_TOKEN_MIN || len > ES_PROTO_TOKEN_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        if (token[i] <= 0x20 || token[i] >= 0x7f)
            return -EINVAL;
    return 0;
}

int es_proto_auth_encode(const char *token, uint8_t *b)
{
    if (es_proto_token_valid(token) < 0)
        return -EINVAL;
    size_t len = strlen(token);
    memset(b, 0, ES_PROTO_AUTH_SIZE);
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(ES_PROTO_AUTH_MAGIC >> (8 * i));
    b[4] = (uint8_t)ES_PROTO_VERSION;
    b[5] = (uint8_t)(ES_PROTO_VERSION >> 8);
    b[6] = (uint8_t)len;
    b[7] = (uint8_t)(len >> 8);
    memcpy(b + 8, token, len);
    return 0;
}

int es_proto_auth_check(const uint8_t *b, const char *token)
{
    uint8_t want[ES_PROTO_AUTH_SIZE];
    if (es_proto_auth_encode(token, want) < 0)
        return -EACCES;
    /* Every byte compared whatever differs first (no early exit). */
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < ES_PROTO_AUTH_SIZE; i++)
        diff |= (uint8_t)(b[i] ^ want[i]);
    return diff ? -EACCES : 0;
}

int es_proto_send_all(int fd, const uint8_t *buf, size_t len, size_t *done)
{
    size_t off = 0;
    int rc = 0;
    while (off < len) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            if (rc == -EWOULDBLOCK)
                rc = -EAGAIN;
            break;
        }
        off += (size_t)n;
    }
    if (done)
        *done = off;
    return rc;
}
