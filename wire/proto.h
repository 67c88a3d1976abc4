/* The control protocol between libeasyscale.so (its control thread) and
 * easyscale-ctl (the daemon and the CLI). wire/proto.c (encoder,
 * decoder, frame reader) is compiled into both. wire/ holds everything the
 * two programs speak: this protocol and the collective digests' record
 * format (wire/digest.h); they share no other code.
 *
 * Transport: a byte stream, a unix socket (same host; the daemon checks the
 * peer's uid with SO_PEERCRED) or TCP (several hosts; the client first sends
 * an es_proto_auth_t block with the shared EASYSCALE_TOKEN, which the daemon
 * checks before it reads anything else).
 *
 * Framing: every message is a 16-byte header followed by `length` payload
 * bytes. All integers are little-endian on the wire, whatever the host; the
 * payload of each type is a fixed sequence of fields (below), strings as a
 * 16-bit length then the bytes (no NUL). A frame whose magic, version or
 * type is wrong, whose length is over its type's limit, or whose payload is
 * not exactly its type's fields (short, long, a string over its field's
 * limit or with a byte outside printable ASCII) is an error: the receiver
 * logs one line and closes the connection.
 *
 * Conversation:
 *   EST  -> daemon  REGISTER, then HEARTBEAT every EASYSCALE_HEARTBEAT_MS,
 *                   ACK for each MOVE, ERROR
 *   daemon -> EST   WELCOME (registration accepted), MOVE, RELEASE (the
 *                   scheduled events through a step are done), ERROR (then
 *                   closes: e.g. the rank is already held by another pid)
 *   CLI  -> daemon  REQUEST (one per connection)
 *   daemon -> CLI   REPLY (rc and text), then closes
 * A reply carries its request's seq.
 */
#ifndef ES_WIRE_PROTO_H
#define ES_WIRE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define ES_PROTO_MAGIC 0x31435345u /* bytes 'E' 'S' 'C' '1' */
/* Version 2: MOVE carries a rank list (time-slicing a running job).
 * Version 3: scheduled holds (RELEASE, the RELEASE verb, HEARTBEAT.held,
 * REQUEST flag ES_REQ_AGAIN).
 * Version 4: HEARTBEAT carries the EST's time-slicing figures (yields,
 * swaps and bytes out and in, resident or parked).
 * Version 5: a hold the controller sets at run time (MOVE ops HOLD_OFFER
 * and HOLD_AT, MOVE.step and ACK.step).
 * Version 6: the NODE verb (a node of a job across hosts reports to the
 * daemon on node 0 and learns the job's state).
 * A peer of another version is refused at its first frame
 * (-EPROTONOSUPPORT: the receiver logs the version it got and closes). */
#define ES_PROTO_VERSION 6u
#define ES_PROTO_HDR_SIZE 16u

/* The frame header, as it is on the wire (little-endian fields). */
typedef struct es_proto_hdr {
    uint32_t magic;   /* ES_PROTO_MAGIC */
    uint16_t version; /* ES_PROTO_VERSION */
    uint16_t type;    /* enum es_proto_type */
    uint32_t length;  /* payload bytes that follow the header */
    uint32_t seq;     /* request number; a reply carries its request's */
} es_proto_hdr_t;

_Static_assert(sizeof(es_proto_hdr_t) == ES_PROTO_HDR_SIZE, "header is 16 bytes");
_Static_assert(offsetof(es_proto_hdr_t, version) == 4 && offsetof(es_proto_hdr_t, type) == 6 &&
                   offsetof(es_proto_hdr_t, length) == 8 && offsetof(es_proto_hdr_t, seq) == 12,
               "header layout");

enum es_proto_type {
    ES_MSG_REGISTER = 1,  /* EST -> daemon */
    ES_MSG_HEARTBEAT = 2, /* EST -> daemon */
    ES_MSG_MOVE = 3,      /* daemon -> EST: place / migrate / swap-out / swap-in */
    ES_MSG_ACK = 4,       /* EST -> daemon: the answer to a MOVE, with timings */
    ES_MSG_ERROR = 5,     /* either way */
    ES_MSG_WELCOME = 6,   /* daemon -> EST: registration accepted */
    ES_MSG_REQUEST = 7,   /* CLI -> daemon */
    ES_MSG_REPLY = 8,     /* daemon -> CLI */
    ES_MSG_RELEASE = 9,   /* daemon -> EST: ESTs held at a step <= release.step go on */
    ES_MSG_NTYPES
};

/* Bit masks of the types a side accepts (es_proto_reader_t.accept). */
#define ES_PROTO_BIT(t) (1u << (t))
#define ES_PROTO_ACCEPT_DAEMON                                                            \
    (ES_PROTO_BIT(ES_MSG_REGISTER) | ES_PROTO_BIT(ES_MSG_HEARTBEAT) |                    \
     ES_PROTO_BIT(ES_MSG_ACK) | ES_PROTO_BIT(ES_MSG_ERROR) | ES_PROTO_BIT(ES_MSG_REQUEST))
#define ES_PROTO_ACCEPT_EST                                                               \
    (ES_PROTO_BIT(ES_MSG_WELCOME) | ES_PROTO_BIT(ES_MSG_MOVE) | ES_PROTO_BIT(ES_MSG_ERROR) |   \
     ES_PROTO_BIT(ES_MSG_RELEASE))
#define ES_PROTO_ACCEPT_CLI (ES_PROTO_BIT(ES_MSG_REPLY) | ES_PROTO_BIT(ES_MSG_ERROR))

/* Moves (ES_MSG_MOVE.op; also shim/move.h). */
enum es_proto_move_op {
    ES_MOVE_PLACE = 1,    /* be on slot `slot` (resident or swapped out: whatever it takes) */
    ES_MOVE_MIGRATE = 2,  /* resident EST: move to slot `slot` */
    ES_MOVE_SWAP_OUT = 3, /* park the EST's device state in host memory */
    ES_MOVE_SWAP_IN = 4,  /* swapped-out EST: back onto slot `slot` */
    ES_MOVE_TS_JOIN = 5,  /* take turns on slot `slot` with the ESTs `ranks` (this one among
                           * them): at its next collective the EST parks, joins their rotation
                           * for (job, slot, epoch), and comes back onto slot in its turns */
    ES_MOVE_TS_LEAVE = 6, /* leave the rotation, be resident on slot `slot` */
    /* A hold set at run time, for moves of a job whose collectives' staging
     * is device memory (docs/COLLECTIVES.md section 4): */
    ES_MOVE_HOLD_OFFER = 7, /* the EST stops before its next step-counting collective and
                             * answers its index (ACK.step) */
    ES_MOVE_HOLD_AT = 8,    /* it holds at the collective of index MOVE.step instead (at or
                             * after its offer), until a RELEASE; MOVE.step = UINT64_MAX:
                             * no hold (the offer withdrawn) */
    ES_MOVE_NOPS
};
/* Most ranks in one rotation (ES_MSG_MOVE.ranks). */
#define ES_PROTO_TS_MAX 64

/* CLI verbs (ES_MSG_REQUEST.verb). */
enum es_proto_verb {
    ES_VERB_STATUS = 1,   /* flags: ES_REQ_JSON */
    ES_VERB_SCALE = 2,    /* arg: GPU spec */
    ES_VERB_PREEMPT = 3,  /* arg: GPU */
    ES_VERB_GRANT = 4,    /* arg: GPU */
    ES_VERB_SWAP_OUT = 5, /* rank */
    ES_VERB_SWAP_IN = 6,  /* rank, arg: GPU */
    ES_VERB_MIGRATE = 7,  /* rank, arg: GPU */
    ES_VERB_PROGRESS = 8, /* one line for `run`'s progress display */
    ES_VERB_TIMESLICE = 9, /* arg: "GPU" (the ESTs on it), "GPU RANKS" (RANKS: "2,3", "0-3"),
                            * or "off" */
    ES_VERB_RELEASE = 10,  /* arg: STEP (decimal): the scheduled events through STEP are done;
                            * the ESTs held there go on (`run` sends it) */
    ES_VERB_NODE = 11,     /* rank: the node; arg: "STATE HOST GPUS [REASON]" (`run` of a job
                            * across hosts, every second); the reply: the job's state */
    ES_VERB_NVERBS
};
#define ES_REQ_JSON 1u
/* A request sent again (its answer was lost with a daemon that died): a
 * desired state, so one already reached is done, not refused (an EST
 * already where the event wants it is not moved). */
#define ES_REQ_AGAIN 2u
#define ES_REQ_FLAGS (ES_REQ_JSON | ES_REQ_AGAIN)

/* REGISTER.flags: the EST takes turns on its slot in a rotation the
 * controller started (a restarted daemon re-learns the rotation from
 * these). No other bit is defined. */
#define ES_REG_TIME_SLICED 1u

/* EST states (HEARTBEAT.state, as the shim sees itself). */
enum es_proto_est_state { ES_EST_RUNNING = 0, ES_EST_MOVING = 1, ES_EST_SWAPPED_OUT = 2 };

/* Where the EST's device memory is (HEARTBEAT.where): on its GPU, parked in
 * host memory (swapped out, or between its turns when time-sliced), or not
 * known (it holds nothing on a GPU yet, or this shim cannot tell). */
enum es_proto_est_where { ES_WHERE_UNKNOWN = 0, ES_WHERE_RESIDENT = 1, ES_WHERE_PARKED = 2 };

/* HEARTBEAT's payload: 11 64-bit fields and 2 32-bit ones, in the order of
 * es_proto_msg_t.u.hb (exactly this many bytes; anything else is refused). */
#define ES_PROTO_HB_LEN 96u
_Static_assert(ES_PROTO_HB_LEN == 11 * 8 + 2 * 4, "heartbeat payload layout");

/* Field limits (bytes, without a terminating NUL). */
#define ES_PROTO_SLOT_MAX 63   /* a GPU ordinal or UUID ("GPU-" + 36), or "host" */
#define ES_PROTO_HOST_MAX 63
#define ES_PROTO_REASON_MAX 255
#define ES_PROTO_ARG_MAX 255
#define ES_PROTO_TEXT_MAX (1u << 20) /* REPLY text */
#define ES_PROTO_TOKEN_MIN 16
#define ES_PROTO_TOKEN_MAX 64

/* Largest payload accepted per type (0: unknown type). */
uint32_t es_proto_max_len(unsigned type);

/* A decoded message. Strings are NUL-terminated copies, except REPLY's
 * text, which points into the payload buffer it was decoded from (not
 * NUL-terminated: text_len bytes). */
typedef struct es_proto_msg {
    uint16_t type;
    uint32_t seq;
    union {
        struct {
            uint32_t rank, world, pid, flags;
            uint64_t step, epoch, mem_bytes;
            char slot[ES_PROTO_SLOT_MAX + 1]; /* where the EST is ("" unknown, "host") */
            char host[ES_PROTO_HOST_MAX + 1];
        } reg;
        struct {
            uint64_t step;         /* see shim/step.h */
            uint64_t step_time_ns; /* mean over the last interval (0: no step yet) */
            uint64_t wait_ns;      /* of which blocked in collectives (0: unknown) */
            uint64_t mem_bytes;    /* device memory the EST holds (0: unknown) */
            uint64_t epoch;        /* last placement epoch applied */
            uint32_t state;        /* enum es_proto_est_state */
            uint64_t held;         /* waiting at a scheduled step: that step + 1; 0 not */
            /* time-slicing (version 4): the EST's figures since it started,
             * counted when it yields its GPU and comes back (move/mover.h) */
            uint64_t yields;              /* turns given up */
            uint64_t swaps_out, swaps_in; /* parks, and returns onto the GPU */
            uint64_t bytes_out, bytes_in; /* copied device -> host, host -> device */
            uint32_t where;               /* enum es_proto_est_where */
        } hb;
        struct {
            uint32_t op; /* enum es_proto_move_op */
            uint64_t epoch;
            char slot[ES_PROTO_SLOT_MAX + 1];
            /* ES_MOVE_TS_JOIN: the rotation's ranks, 2..ES_PROTO_TS_MAX of them,
             * strictly ascending; every other op: none */
            uint32_t nranks;
            uint32_t ranks[ES_PROTO_TS_MAX];
            uint64_t step; /* ES_MOVE_HOLD_AT: the collective to hold at; else 0 */
        } move;
        struct {
            uint32_t op;
            int32_t result; /* 0 or a negative errno */
            uint64_t epoch;
            uint64_t total_ns, sync_ns, copy_ns, bytes;
            char slot[ES_PROTO_SLOT_MAX + 1]; /* where the EST is now */
            char reason[ES_PROTO_REASON_MAX + 1];
            uint64_t step; /* ES_MOVE_HOLD_OFFER: the collective it stops at; else 0 */
        } ack;
        struct {
            int32_t code; /* a negative errno */
            char text[ES_PROTO_REASON_MAX + 1];
        } err;
        struct {
            uint64_t epoch;
            uint32_t daemon_pid;
        } welcome;
        struct {
            uint64_t step; /* the scheduled events through this step are done */
        } release;
        struct {
            uint32_t verb, flags;
            int32_t rank; /* -1: none */
            char arg[ES_PROTO_ARG_MAX + 1];
        } req;
        struct {
            int32_t rc; /* exit status the CLI ends with: 0, 1 or 2 */
            const char *text;
            uint32_t text_len;
        } reply;
    } u;
} es_proto_msg_t;

/* Encodes m (type, seq, fields) as one frame into buf. Returns 0 and sets
 * *len, -EMSGSIZE when cap is too small, -EINVAL when a field is out of
 * range (unknown type, a string too long or with a byte outside printable
 * ASCII; REPLY text may also hold '\n' and '\t'). */
int es_proto_encode(const es_proto_msg_t *m, uint8_t *buf, size_t cap, size_t *len);

/* Decodes a frame header. Returns 0, -EPROTO (magic), -EPROTONOSUPPORT
 * (version), -EBADMSG (a type not in `accept`, a mask of ES_PROTO_BIT) or
 * -EMSGSIZE (length over the type's limit). */
int es_proto_decode_hdr(const uint8_t *b, uint32_t accept, es_proto_hdr_t *h);

/* Decodes the payload of a frame whose header h was accepted. Returns 0 or
 * -EBADMSG (malformed: short, trailing bytes, a bad string). */
int es_proto_decode(const es_proto_hdr_t *h, const uint8_t *payload, es_proto_msg_t *m);

/* One line naming a decode error (for the log line before closing). */
const char *es_proto_strerror(int rc);

/* Incremental frame reader. Set accept and buf/cap (cap >= the largest
 * payload of the accepted types), have = 0. */
typedef struct es_proto_reader {
    uint8_t hdrb[ES_PROTO_HDR_SIZE];
    size_t have; /* bytes of the current frame received */
    es_proto_hdr_t h;
    uint32_t accept;
    uint8_t *buf;
    size_t cap;
} es_proto_reader_t;

/* Takes bytes from data (at most len; never past the end of the current
 * frame; *used says how many). Returns 1 when a whole frame is in (r->h,
 * r->buf), 0 when more is needed, or the header error of
 * es_proto_decode_hdr (or -EMSGSIZE when the payload exceeds cap). After a
 * 1, call es_proto_reader_reset before pushing more. */
int es_proto_reader_push(es_proto_reader_t *r, const uint8_t *data, size_t len, size_t *used);

/* Reads from fd what the current frame still needs (one read(2)). Returns
 * 1 (frame complete), 0 (more needed, or EAGAIN/EINTR), -ECONNRESET (end of
 * stream), another negative errno of read, or a frame error as above. */
int es_proto_reader_fill(es_proto_reader_t *r, int fd);

void es_proto_reader_reset(es_proto_reader_t *r);

/* TCP authentication block: the first bytes a TCP client sends. */
#define ES_PROTO_AUTH_MAGIC 0x31415345u /* 'E' 'S' 'A' '1' */
#define ES_PROTO_AUTH_SIZE 72u
typedef struct es_proto_auth {
    uint32_t magic;   /* ES_PROTO_AUTH_MAGIC */
    uint16_t version; /* ES_PROTO_VERSION */
    uint16_t length;  /* token bytes used */
    uint8_t token[ES_PROTO_TOKEN_MAX]; /* zero-padded */
} es_proto_auth_t;
_Static_assert(sizeof(es_proto_auth_t) == ES_PROTO_AUTH_SIZE, "auth block is 72 bytes");
_Static_assert(offsetof(es_proto_auth_t, token) == 8, "auth layout");

/* Checks a token's form: ES_PROTO_TOKEN_MIN..MAX bytes of printable ASCII
 * without spaces. Returns 0 or -EINVAL. */
int es_proto_token_valid(const char *token);

/* Writes the 72-byte block for token into b. Returns 0 or -EINVAL. */
int es_proto_auth_encode(const char *token, uint8_t *b);

/* Checks a received block against the expected token, in time independent
 * of where they differ. Returns 0, or -EACCES. */
int es_proto_auth_check(const uint8_t *b, const char *token);

/* Writes all of buf to fd (blocking or not: retries EINTR; a non-blocking
 * fd that would block returns -EAGAIN after a partial write with *done set).
 * MSG_NOSIGNAL on sockets: a closed peer is -EPIPE, never SIGPIPE. */
int es_proto_send_all(int fd, const uint8_t *buf, size_t len, size_t *done);

#endif
