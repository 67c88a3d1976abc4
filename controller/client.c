/* Requests to a job's daemon: one and its reply, blocking (the CLI verbs),
 * or in flight without blocking (`run`'s event loop: es_ctl_areq_*). */
#include "controller/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int es_ctl_request(const char *target, uint32_t verb, int32_t rank, const char *arg,
                   uint32_t flags, int timeout_ms, int *rc, char **text, char *err,
                   size_t errlen)
{
    uint8_t out[1024];
    size_t len;
    int fd = -1, r;
    uint8_t *buf = NULL;
    es_proto_msg_t m = { .type = ES_MSG_REQUEST, .seq = 1 };
    *text = NULL;
    m.u.req.verb = verb;
    m.u.req.flags = flags;
    m.u.req.rank = rank;
    snprintf(m.u.req.arg, sizeof(m.u.req.arg), "%s", arg ? arg : "");
    if ((r = es_proto_encode(&m, out, sizeof(out), &len)) < 0) {
        snprintf(err, errlen, "cannot encode the request");
        goto out;
    }
    const char *token = getenv("EASYSCALE_TOKEN");
    if (strncmp(target, "tcp:", 4) == 0 && (!token || es_proto_token_valid(token) < 0)) {
        snprintf(err, errlen, "%s needs EASYSCALE_TOKEN (%d to %d printable characters, no "
                 "spaces)", target, ES_PROTO_TOKEN_MIN, ES_PROTO_TOKEN_MAX);
        r = -EINVAL;
        goto out;
    }
    fd = es_ctl_connect(target, token);
    if (fd < 0) {
        r = fd;
        if (r == -ENOENT || r == -ECONNREFUSED)
            snprintf(err, errlen, "no controller at %s (%s): is the job running?", target,
                     strerror(-r));
        else
            snprintf(err, errlen, "cannot connect to %s: %s", target, strerror(-r));
        goto out;
    }
    if ((r = es_proto_send_all(fd, out, len, NULL)) < 0) {
        if (r == -EPIPE || r == -ECONNRESET)
            snprintf(err, errlen, "the controller at %s closed the connection without an answer "
                     "(refused: another user, or a bad token?)", target);
        else
            snprintf(err, errlen, "cannot send to %s: %s", target, strerror(-r));
        goto out;
    }
    size_t cap = es_proto_max_len(ES_MSG_REPLY);
    buf = malloc(cap);
    if (!buf) {
        r = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_CLI, .buf = buf, .cap = cap };
    int64_t deadline = timeout_ms > 0 ? es_ctl_now_ms() + timeout_ms : 0;
    for (;;) {
        int wait = -1;
        if (deadline) {
            int64_t left = deadline - es_ctl_now_ms();
            if (left <= 0) {
                r = -ETIMEDOUT;
                snprintf(err, errlen, "no answer from the controller at %s within %.1f s",
                         target, timeout_ms / 1000.0);
                goto out;
            }
            wait = (int)left;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int k = poll(&p, 1, wait);
        if (k < 0 && errno != EINTR) {
            r = -errno;
            snprintf(err, errlen, "poll: %s", strerror(errno));
            goto out;
        }
        if (k <= 0)
            continue;
        r = es_proto_reader_fill(&rd, fd);
        if (r == 0)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "the controller at %s closed the connection without an "
                     "answer (%s; refused: another user, or a bad token?)", target,
                     r == -ECONNRESET || r == -EPIPE ? "closed" : es_proto_strerror(r));
            goto out;
        }
        break;
    }
    es_proto_msg_t in;
    if ((r = es_proto_decode(&rd.h, rd.buf, &in)) < 0) {
        snprintf(err, errlen, "bad answer from the controller: %s", es_proto_strerror(r));
        goto out;
    }
    if (in.type == ES_MSG_ERROR) {
        snprintf(err, errlen, "the controller refused the request: %s", in.u.err.text);
        r = -EPROTO;
        goto out;
    }
    *text = malloc(in.u.reply.text_len + 1);
    if (!*text) {
        r = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    memcpy(*text, in.u.reply.text, in.u.reply.text_len);
    (*text)[in.u.reply.text_len] = '\0';
    *rc = in.u.reply.rc;
    r = 0;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    return r;
}

/* ---- a request in flight ---------------------------------------------------------- */

void es_ctl_areq_close(es_ctl_areq_t *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    es_proto_reader_reset(&a->rd);
}

void es_ctl_areq_free(es_ctl_areq_t *a)
{
    es_ctl_areq_close(a);
    free(a->buf);
    a->buf = NULL;
}

int es_ctl_areq_start(es_ctl_areq_t *a, const char *target, const char *token, uint32_t verb,
                      int32_t rank, const char *arg, uint32_t flags, int timeout_ms)
{
    uint8_t out[1024];
    size_t len;
    es_proto_msg_t m = { .type = ES_MSG_REQUEST, .seq = 1 };
    m.u.req.verb = verb;
    m.u.req.rank = rank;
    m.u.req.flags = flags;
    snprintf(m.u.req.arg, sizeof(m.u.req.arg), "%s", arg ? arg : "");
    if (!a->buf && !(a->buf = malloc(es_proto_max_len(ES_MSG_REPLY))))
        return -ENOMEM;
    a->rd.accept = ES_PROTO_ACCEPT_CLI;
    a->rd.buf = a->buf;
    a->rd.cap = es_proto_max_len(ES_MSG_REPLY);
    es_proto_reader_reset(&a->rd);
    int rc = es_proto_encode(&m, out, sizeof(out), &len);
    if (rc < 0)
        return rc;
    a->fd = es_ctl_connect(target, token);
    if (a->fd < 0)
        return a->fd;
    if ((rc = es_proto_send_all(a->fd, out, len, NULL)) < 0) {
        es_ctl_areq_close(a);
        return rc;
    }
    fcntl(a->fd, F_SETFL, O_NONBLOCK);
    a->deadline = es_ctl_now_ms() + timeout_ms;
    return 0;
}

int es_ctl_areq_poll(es_ctl_areq_t *a, int *rc, const char **text, size_t *len)
{
    int r = es_proto_reader_fill(&a->rd, a->fd);
    if (r == 0)
        return es_ctl_now_ms() > a->deadline ? -ETIMEDOUT : 0;
    if (r < 0)
        return r;
    es_proto_msg_t m;
    if ((r = es_proto_decode(&a->rd.h, a->rd.buf, &m)) < 0)
        return r;
    if (m.type != ES_MSG_REPLY)
        return -EPROTO;
    *rc = m.u.reply.rc;
    *text = m.u.reply.text;
    *len = m.u.reply.text_len;
    return 1;
}
