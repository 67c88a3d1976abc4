/* libFuzzer harness for the control protocol's decoder (wire/proto.c):
 * every input is a byte stream as a daemon, an EST or a CLI would receive
 * it, pushed through the frame reader in pieces whose sizes come from the
 * input, each whole frame decoded from an exactly-sized heap copy (the
 * address sanitizer sees any read past its end). Built and run by `make
 * fuzz` (clang -fsanitize=fuzzer,address,undefined), never by `make test`.
 *
 * Properties besides "no crash, no over-read": the reader and decoder
 * return only documented errors; a decoded message encodes again and
 * decodes to the same fields (the decoder accepts nothing the encoder
 * could not have written); the token check accepts only the exact block. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"

static void check_rc(int rc)
{
    if (rc == 0 || rc == 1 || rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EBADMSG ||
        rc == -EMSGSIZE)
        return;
    abort();
}

static void same(const es_proto_msg_t *a, const es_proto_msg_t *b)
{
    if (a->type != b->type || a->seq != b->seq)
        abort();
    if (a->type == ES_MSG_REPLY) {
        if (a->u.reply.rc != b->u.reply.rc || a->u.reply.text_len != b->u.reply.text_len ||
            memcmp(a->u.reply.text, b->u.reply.text, a->u.reply.text_len) != 0)
            abort();
        return;
    }
    if (memcmp(&a->u, &b->u, sizeof(a->u)) != 0)
        abort();
}

static uint8_t *payload, *again;

static void one_frame(const es_proto_reader_t *r)
{
    /* exactly-sized copy */
    uint8_t *p = malloc(r->h.length ? r->h.length : 1);
    if (!p)
        return;
    memcpy(p, r->buf, r->h.length);
    es_proto_msg_t m;
    memset(&m, 0, sizeof(m));
    int rc = es_proto_decode(&r->h, p, &m);
    check_rc(rc);
    if (rc == 0) {
        size_t len = 0;
        size_t cap = ES_PROTO_HDR_SIZE + es_proto_max_len(m.type);
        if (es_proto_encode(&m, again, cap, &len) != 0)
            abort();
        es_proto_hdr_t h2;
        if (es_proto_decode_hdr(again, 0xffffffffu, &h2) != 0 ||
            len != ES_PROTO_HDR_SIZE + h2.length || h2.length != r->h.length)
            abort();
        es_proto_msg_t m2;
        memset(&m2, 0, sizeof(m2));
        if (es_proto_decode(&h2, again + ES_PROTO_HDR_SIZE, &m2) != 0)
            abort();
        same(&m, &m2);
        if (memcmp(again + ES_PROTO_HDR_SIZE, p, r->h.length) != 0)
            abort(); /* one encoding per message */
    }
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t sides[4] = { ES_PROTO_ACCEPT_DAEMON, ES_PROTO_ACCEPT_EST,
                                       ES_PROTO_ACCEPT_CLI, 0xffffffffu };
    if (!payload) {
        payload = malloc(ES_PROTO_HDR_SIZE + ES_PROTO_TEXT_MAX + 64);
        again = malloc(ES_PROTO_HDR_SIZE + ES_PROTO_TEXT_MAX + 64);
        if (!payload || !again)
            abort();
    }
    if (size < 2)
        return 0;
    uint32_t accept = sides[data[0] & 3];
    unsigned piece = (unsigned)(data[1] % 17) + 1; /* 1..17 bytes per push */
    data += 2;
    size -= 2;

    if (size >= ES_PROTO_AUTH_SIZE) {
        const char *tok = "0123456789abcdef";
        uint8_t want[ES_PROTO_AUTH_SIZE];
        es_proto_auth_encode(tok, want);
        int ok = es_proto_auth_check(data, tok) == 0;
        if (ok != (memcmp(data, want, ES_PROTO_AUTH_SIZE) == 0))
            abort();
    }

    es_proto_reader_t r = { .accept = accept, .buf = payload,
                            .cap = ES_PROTO_TEXT_MAX + 64 };
    size_t off = 0;
    while (off < size) {
        size_t n = size - off < piece ? size - off : piece, used = 0;
        int rc = es_proto_reader_push(&r, data + off, n, &used);
        check_rc(rc);
        if (used > n || (rc == 0 && used != n))
            abort();
        off += used;
        if (rc < 0)
            break; /* the connection would be closed here */
        if (rc == 1) {
            one_frame(&r);
            es_proto_reader_reset(&r);
        }
    }
    return 0;
}
