/* Writes one valid frame of every message type (and an auth block) into
 * DIR, as the seeds of the protocol fuzzer (`make fuzz`). Each file starts
 * with the fuzzer's two control bytes (side, piece size). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "wire/proto.h"

static int put(const char *dir, const char *name, unsigned side, const uint8_t *b, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -errno;
    uint8_t ctl[2] = { (uint8_t)side, 16 };
    fwrite(ctl, 1, 2, f);
    fwrite(b, 1, n, f);
    return fclose(f) == 0 ? 0 : -errno;
}

int main(int argc, char **argv)
{
    uint8_t b[4096];
    size_t n;
    int rc = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    es_proto_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REGISTER;
    m.u.reg.rank = 1;
    m.u.reg.world = 4;
    m.u.reg.pid = 100;
    strcpy(m.u.reg.slot, "GPU-a9a57be3-4a8a-4caa-9893-de3201f72ae9");
    strcpy(m.u.reg.host, "host");
    size_t n1;
    rc |= es_proto_encode(&m, b, sizeof(b), &n1);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_HEARTBEAT;
    m.u.hb.step = 10;
    m.u.hb.step_time_ns = 1000;
    rc |= es_proto_encode(&m, b + n1, sizeof(b) - n1, &n);
    rc |= put(argv[1], "est-register-heartbeat", 0, b, n1 + n);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_ACK;
    m.u.ack.op = ES_MOVE_MIGRATE;
    m.u.ack.result = -95;
    strcpy(m.u.ack.slot, "1");
    strcpy(m.u.ack.reason, "not supported");
    rc |= es_proto_encode(&m, b, sizeof(b), &n);
    rc |= put(argv[1], "ack", 0, b, n);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REQUEST;
    m.u.req.verb = ES_VERB_SCALE;
    m.u.req.rank = -1;
    strcpy(m.u.req.arg, "0,1");
    rc |= es_proto_encode(&m, b, sizeof(b), &n);
    rc |= put(argv[1], "request", 0, b, n);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_WELCOME;
    m.u.welcome.epoch = 3;
    rc |= es_proto_encode(&m, b, sizeof(b), &n1);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_MOVE;
    m.u.move.op = ES_MOVE_PLACE;
    strcpy(m.u.move.slot, "GPU-a9a57be3-4a8a-4caa-9893-de3201f72ae9");
    rc |= es_proto_encode(&m, b + n1, sizeof(b) - n1, &n);
    rc |= put(argv[1], "welcome-move", 1, b, n1 + n);
    m.u.move.op = ES_MOVE_TS_JOIN; /* a time-slice join: the rank list */
    m.u.move.nranks = 3;
    m.u.move.ranks[0] = 0;
    m.u.move.ranks[1] = 2;
    m.u.move.ranks[2] = 3;
    rc |= es_proto_encode(&m, b, sizeof(b), &n);
    rc |= put(argv[1], "move-tslice", 1, b, n);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_REPLY;
    m.u.reply.text = "{\"job\":1}\n";
    m.u.reply.text_len = 10;
    rc |= es_proto_encode(&m, b, sizeof(b), &n);
    rc |= put(argv[1], "reply", 2, b, n);
    memset(&m, 0, sizeof(m));
    m.type = ES_MSG_ERROR;
    m.u.err.code = -17;
    strcpy(m.u.err.text, "rank held");
    rc |= es_proto_encode(&m, b, sizeof(b), &n);
    rc |= put(argv[1], "error", 3, b, n);
    es_proto_auth_encode("0123456789abcdef", b);
    rc |= put(argv[1], "auth", 0, b, ES_PROTO_AUTH_SIZE);
    if (rc) {
        fprintf(stderr, "fuzz_seeds: cannot write the seeds\n");
        return 1;
    }
    return 0;
}
