/* Internals of the virtual collectives (context/coll*.c): the shared
 * segment of a communicator, the communicator, the steps that order the
 * ranks on their streams (host functions; the device transport's are
 * stream memory operations), and the transport interface.
 *
 * Segment layout (one per communicator, POSIX shared memory, page-aligned
 * sections): header, ranks[N], pairs[N][N] (point-to-point counters), then
 * the host transport's staging: two sets of { in[N][C], out[C],
 * scal[N][64 bytes] } and p2p[N][N][2][Cp]. Pages are touched only when used
 * (the host transport's area stays untouched under the device transport).
 *
 * Orders on a stream: every rank issues the same collectives in the same
 * order, so the k-th data barrier of every rank belongs to the same chunk of
 * the same operation. A barrier is "my counter := k, wait until every
 * rank's counter >= k" run in a host function (host transport) or as
 * stream memory operations (device transport). Staging comes in two sets:
 * a rank writes a set only after it passed a barrier that every rank
 * reaches after it finished reading that set, so no extra barrier guards
 * reuse. Consecutive chunks alternate sets, except that the host
 * transport's all-reduce and reduce chunks (two barriers, every read of the
 * set done before the next chunk's first one) leave the next chunk on the
 * same set.
 */
#ifndef ES_COLL_COLL_INT_H
#define ES_COLL_COLL_INT_H

#include "coll/coll.h"
#include "kernels/reduce_kernels.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <pthread.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ES_COLL_MAX_RANKS ES_RED_MAX_IN   /* 64: the kernel takes one pointer per rank */
#define ES_COLL_MAX_PREMUL 64

/* ---- the unique id ------------------------------------------------------------ */

#define ES_COLL_ID_MAGIC 0x314c4c4f43534545ULL   /* "EESCOLL1" */
typedef struct es_coll_id {
    uint64_t magic;
    uint64_t nonce;       /* names the segment and the sockets */
    uint32_t uid;         /* the user whose segments these are */
    uint32_t version;
    char pad[104];
} es_coll_id_t;
_Static_assert(sizeof(es_coll_id_t) == sizeof(ncclUniqueId), "es_coll_id_t is an ncclUniqueId");

/* ---- the shared segment -------------------------------------------------------- */

#define ES_SEG_MAGIC 0x4745534c4c4f4345ULL        /* "ECOLLSEG" */
#define ES_SEG_VERSION 1

enum { ES_FAIL_NONE = 0, ES_FAIL_ABORT, ES_FAIL_DEAD, ES_FAIL_TIMEOUT, ES_FAIL_DEPARTED,
       ES_FAIL_LOCAL };

typedef struct es_seg_hdr {
    _Atomic uint64_t magic;       /* ES_SEG_MAGIC, stored last by the creator */
    uint32_t version;             /* ES_SEG_VERSION */
    uint32_t header_size;         /* sizeof(es_seg_hdr_t) */
    uint64_t size;                /* the whole segment */
    uint64_t nonce;
    uint32_t nranks;
    int32_t pad_tp;
    uint64_t chunk, p2p_chunk;    /* host staging bytes (the creator's choice: they size
                                     the segment) */
    uint64_t off_ranks, off_pairs, off_data, data_size;
    _Atomic uint32_t joined;
    uint32_t spare0, spare1;      /* (waits use the ranks' own futex words) */
    _Atomic uint32_t fail;        /* ES_FAIL_*: the communicator is dead */
    _Atomic int32_t fail_rank;
    int32_t pad0;
    char pad[128];
} es_seg_hdr_t;
_Static_assert(sizeof(es_seg_hdr_t) == 240, "es_seg_hdr_t layout");

typedef struct es_seg_rank {
    _Atomic uint32_t state;       /* 0 free, 1 claimed, 2 joined */
    _Atomic uint32_t departed;
    int32_t pid;
    int32_t can_device;           /* this rank can map every peer's device memory */
    uint64_t starttime;           /* /proc/<pid>/stat field 22, against pid reuse */
    uint8_t uuid[16];             /* its GPU */
    int32_t split_color[2], split_key[2];
    int32_t setup_ok;             /* device transport set up (vote) */
    int32_t pad0;
    _Atomic uint32_t bell;        /* futex word this rank sleeps on */
    _Atomic uint32_t sleeping;    /* its threads asleep on bell (a ringer wakes them) */
    int32_t tp_pref;              /* its EASYSCALE_COLL_TRANSPORT (rank 0's decides) */
    int32_t pad2a;
    uint64_t dev_chunk;           /* its device staging chunk (rank 0's is used) */
    /* device transport, written by this rank's streams (stream memory
     * operations), read by its watchdog: steps begun and ended (a step
     * waits between the two), gradient all-reduces completed */
    _Atomic uint64_t dpos, ddone, dprog;
    char pad1[16];
    _Atomic uint64_t arrive;      /* data barriers passed (stream side) */
    char pad2[56];
    _Atomic uint64_t ctrl;        /* control barriers (host threads) */
    char pad3[56];
} es_seg_rank_t;
_Static_assert(sizeof(es_seg_rank_t) == 256, "es_seg_rank_t layout");
_Static_assert(offsetof(es_seg_rank_t, arrive) == 128, "es_seg_rank_t layout");
_Static_assert(offsetof(es_seg_rank_t, dpos) == 88, "es_seg_rank_t layout");

typedef struct es_seg_pair {
    _Atomic uint64_t sent;        /* chunks posted by `from` for `to` */
    char pad0[56];
    _Atomic uint64_t consumed;    /* chunks `to` has copied out */
    char pad1[56];
} es_seg_pair_t;
_Static_assert(sizeof(es_seg_pair_t) == 128, "es_seg_pair_t layout");

typedef struct es_seg {
    es_seg_hdr_t *h;
    size_t map_size;
    int fd;                       /* the segment's descriptor, open while joined (-1: none) */
    int rank, nranks;
    char name[64];
} es_seg_t;

static inline es_seg_rank_t *es_seg_rank(const es_seg_t *s, int r)
{
    return (es_seg_rank_t *)((char *)s->h + s->h->off_ranks) + r;
}
static inline es_seg_pair_t *es_seg_pair(const es_seg_t *s, int from, int to)
{
    return (es_seg_pair_t *)((char *)s->h + s->h->off_pairs) + (size_t)from * s->nranks + to;
}
static inline char *es_seg_data(const es_seg_t *s)
{
    return (char *)s->h + s->h->off_data;
}

/* ---- the communicator ------------------------------------------------------------ */

#define ES_COMM_MAGIC 0x4d4d4f43534545ULL

typedef struct es_premul {
    int used;
    int dtype;
    int on_device;
    uint64_t value;               /* host-immediate scalar (storage bits) */
    const void *dev;              /* device scalar */
} es_premul_t;

struct es_comm {
    uint64_t magic;
    int rank, nranks;
    int vdev;                     /* the application's device ordinal */
    CUdevice dev;                 /* physical */
    CUcontext ctx;
    int blocking;
    _Atomic int async;            /* ncclResult_t: InProgress while initialising */
    _Atomic int failed;           /* a fault was seen (async holds the status) */
    _Atomic int aborted;          /* ncclCommAbort / Revoke in this process */
    uint64_t nonce;
    es_coll_id_t id;
    es_seg_t seg;
    int tp_id;                    /* ES_COLL_TP_DEVICE or ES_COLL_TP_HOST */
    const struct es_tp *tp;
    void *tpd;                    /* transport state */
    size_t chunk, p2p_chunk;
    int timeout_ms;
    /* enqueue side (application thread, under mu) */
    pthread_mutex_t mu;
    uint64_t bar;                 /* data barriers issued */
    uint64_t nchunks;             /* collective chunks issued (staging set parity) */
    uint64_t ctrl;                /* control barriers issued */
    uint64_t *p2p_sent, *p2p_recv;/* per peer: chunks issued */
    CUstream last_stream;
    CUevent ev_last;              /* recorded after every operation */
    int have_ops;
    uint64_t splits, shrinks;
    es_premul_t premul[ES_COLL_MAX_PREMUL];
    /* initialisation */
    int init_rank, init_nranks;
    pthread_mutex_t init_mu;      /* guards joining init_thread */
    pthread_t init_thread;
    int init_threaded;
    struct es_comm *next;         /* registry */
};

/* Sets the communicator's asynchronous error (first fault wins) and the
 * segment's failure (so the peers see it). */
void es_comm_fail(es_comm_t *c, int reason, ncclResult_t status);

/* ---- segment (coll_seg.c) --------------------------------------------------------- */

/* Creates or joins the segment of id as rank/nranks; the creator sizes it
 * (chunk, p2p_chunk: the host staging); every rank publishes its transport
 * preference and device chunk in its slot (rank 0's decide). Returns 0 or
 * -errno (message set). */
int es_seg_join(es_seg_t *s, const es_coll_id_t *id, int nranks, int rank, size_t chunk,
                size_t p2p_chunk, int tp_pref, size_t dev_chunk, const uint8_t uuid[16],
                int timeout_ms);
void es_seg_leave(es_seg_t *s);
/* Once joined: waits (bounded) until every rank joined, then removes the
 * segment's name (its memory lives while mapped). 0 or -errno. */
int es_seg_wait_joined(es_comm_t *c, int timeout_ms);

/* Removes segments of this user whose creator is gone (left by crashes
 * before every rank joined). */
void es_seg_sweep(void);

/* Waits until every rank's counter (arrive: data, else ctrl) >= target,
 * after setting this rank's to target. Returns 0, or -ECONNABORTED (the
 * communicator failed: *why set), -EPIPE (a peer died or left), -ETIMEDOUT.
 * A failure also marks the segment failed. */
int es_seg_barrier(es_comm_t *c, uint64_t target, int data);

/* Point-to-point counters: waits until pair(from,to).<field> >= v (field 0
 * sent, 1 consumed) / publishes v. Same returns as es_seg_barrier. */
int es_seg_pair_wait(es_comm_t *c, int from, int to, int field, uint64_t v);
void es_seg_pair_set(es_comm_t *c, int from, int to, int field, uint64_t v);

/* Looks at the peers: a dead or departed one marks the segment failed
 * and gives -EPIPE; else 0. */
int es_seg_check_peers(es_comm_t *c);

/* Wakes every rank of the segment (after a change every rank may wait
 * for), or one. */
void es_seg_ring(es_seg_t *s);
void es_seg_ring_rank(es_seg_t *s, int r);

/* The failure reason recorded in the segment (ES_FAIL_*) and its rank. */
int es_seg_failed(const es_seg_t *s, int *rank);

/* ---- steps (coll.c) ---------------------------------------------------------------------
 * A step is a short program of ordering actions on the stream: run by one
 * host function, or turned into stream memory operations by the
 * transport's order hook (device transport). */

enum { ES_A_BARRIER = 0,      /* a: target */
       ES_A_HOST_REDUCE,      /* the host transport's CPU reduction (red) */
       ES_A_PUBLISH_SCALAR,   /* host transport: my PreMulSum scalar into scal[me][set] */
       ES_A_PAIR_WAIT,        /* a: value, peer, field, from */
       ES_A_PAIR_SET,
       ES_A_DONE_ALLREDUCE }; /* progress counter */

typedef struct es_host_red {
    char *out;                    /* host memory */
    const char *in[ES_COLL_MAX_RANKS];
    const char *scal[ES_COLL_MAX_RANKS];   /* PreMulSum: each rank's scalar, or NULL */
    size_t count;
    int nin, dtype, op, divisor;
} es_host_red_t;

typedef struct es_action {
    int kind;
    int peer, field, from;
    uint64_t a;
    es_host_red_t *red;           /* owned by the step */
} es_action_t;

#define ES_STEP_MAX 24
typedef struct es_step {
    es_comm_t *c;
    int n;
    es_action_t act[ES_STEP_MAX];
} es_step_t;

/* The virtual device of the parked EST whose collective this thread runs
 * (time-slicing: its memory is in its host copies, move/swap.h), or -1:
 * the copies and steps then run in the calling thread, no driver call. */
int es_coll_parked_vdev(void);

/* Starts a step (NULL on allocation failure). */
es_step_t *es_step_new(es_comm_t *c);
/* Appends an action; 0 or -ENOSPC (full: flush first). */
int es_step_add(es_step_t *st, const es_action_t *a);
/* Enqueues the step on s: through the transport's order hook when it has
 * one, else as a host function. Frees it. */
CUresult es_step_launch(es_step_t *st, CUstream s);

/* The CPU reduction of the host transport (same arithmetic as the kernel). */
void es_host_reduce(const es_host_red_t *r);

/* ---- transports -------------------------------------------------------------------- */

typedef struct es_p2p {
    int send;                     /* 1 send, 0 recv */
    int peer;
    char *buf;                    /* device pointer */
    size_t bytes;
} es_p2p_t;

typedef struct es_tp {
    const char *name;
    /* Collective over the ranks; every rank calls it. 0 or -errno. */
    int (*setup)(es_comm_t *c);
    void (*teardown)(es_comm_t *c);
    /* Enqueues one collective (resolved: op is ES_RO_*, scalar ready). */
    CUresult (*coll)(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                     CUstream s);
    /* Enqueues one batch of point-to-point operations (a group's). */
    CUresult (*p2p)(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s);
    /* When set: keeps a step's ordering actions (barriers, pair waits and
     * sets, progress) in stream order on the device instead of running the
     * step in a host function (es_step_launch). */
    CUresult (*order)(es_comm_t *c, const es_step_t *st, CUstream s);
} es_tp_t;

extern const es_tp_t es_tp_host;
extern const es_tp_t es_tp_device;

/* Whether this rank could use the device transport (its GPU can map every
 * peer's): computed from the UUIDs the ranks published. */
int es_tp_device_possible(es_comm_t *c);

/* Balanced shard [lo, hi) of n elements for rank r of nr, in units of 64
 * bytes. */
void es_coll_shard(size_t n, size_t esize, int r, int nr, size_t *lo, size_t *hi);

/* Common pieces of the transports: the rounds of a point-to-point batch.
 * copy_in(c, op, chunk, slot, off, bytes, s) / copy_out(...) move one
 * chunk into / out of staging. */
typedef CUresult (*es_p2p_copy_fn)(es_comm_t *c, const es_p2p_t *op, uint64_t chunk_idx,
                                   size_t off, size_t bytes, CUstream s);
CUresult es_p2p_rounds(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s,
                       es_p2p_copy_fn copy_in, es_p2p_copy_fn copy_out);

/* A gradient all-reduce completed (progress counters, shim/step.h). */
void es_coll_progress_add(void);

/* Whether an operation counts as a step (shim/step.h): an all-reduce of
 * floating-point data. Its last chunk completes the step; one of count 0
 * is not run and does not count. */
static inline int es_coll_counts_step(int kind, int dtype)
{
    return kind == ES_OP_ALLREDUCE && (dtype == ES_RT_F16 || dtype == ES_RT_F32 ||
                                       dtype == ES_RT_F64 || dtype == ES_RT_BF16);
}

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t es_coll_now_ms(void);

#endif
