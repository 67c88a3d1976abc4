/* Internals of the virtual collectives (coll/: private to its files; the
 * API is coll.h): the shared segment of a communicator, the communicator,
 * the steps that order the ranks on their streams (host functions; the
 * device transport's are stream memory operations), the transport
 * interface, and the prototypes each file offers the others.
 *
 * Files and the one way their calls go (no file calls one above it; the
 * transports' order hook is called through the transport struct):
 *   comm.c (communicators: init, split, shrink, finalize, destroy, abort),
 *   xhost.c (a communicator across hosts: the levels above a host; the
 *     operations' entry, es_coll_enqueue)
 *   enqueue.c (operations: checks, the scheduled hold)
 *     -> group.c (ncclGroupStart/End: the thread's queued inits and ops)
 *     -> defer.c (a time-sliced EST's collectives, kept until it yields)
 *     -> xhost_mem.c (an operation across hosts in host memory, whole: its
 *        parts inside the host through launch.c, between the hosts over
 *        xsock.c's links; time-sliced ESTs)
 *     -> launch.c (a batch of one communicator on its stream: stream joins,
 *        digests, dispatch to the transport)
 *     -> jobhold.c (a hold of the whole job a process asks for itself)
 *     -> init.c (a communicator's life: registry, context, rendezvous,
 *        transport choice, the initialisation thread)
 *     -> transport/host.c, transport/dev.c, transport/nccl.c (on dev.c's
 *        staging: transport/dev.h) (es_coll_transport_t)
 *     -> step.c (steps, point-to-point rounds)
 *     -> seg.c (the shared segment), tslice.c (time-slicing), xsock.c (the
 *        links between the hosts' leaders, wire/xhost.h)
 *     -> util.c (errors, clock, sizes, shards, progress).
 *   digest.c (EASYSCALE_DIGEST) is called by launch.c only.
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
#define ES_COLL_ID_MAGIC_X 0x584c4c4f43534545ULL /* "EESCOLLX": across hosts (xhost.c) */
/* across hosts, the levels above a host in host memory (made with
 * EASYSCALE_TIME_SLICE: xhost_mem.c); the id carries wire/xhost.h's
 * es_xw_addr_t */
#define ES_COLL_ID_MAGIC_XM 0x4d4c4c4f43534545ULL /* "EESCOLLM" */
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
#define ES_SEG_VERSION 4

enum { ES_FAIL_NONE = 0, ES_FAIL_ABORT, ES_FAIL_DEAD, ES_FAIL_TIMEOUT, ES_FAIL_DEPARTED,
       ES_FAIL_LOCAL, ES_FAIL_CARRIER };

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
    _Atomic uint32_t jh_req;      /* jobhold.c: the requesting rank + 1, 0 none */
    uint32_t spare1;              /* (waits use the ranks' own futex words) */
    _Atomic uint32_t fail;        /* ES_FAIL_*: the communicator is dead */
    _Atomic int32_t fail_rank;
    int32_t pad0;
    uint8_t carrier_id[128];      /* nccl transport: the carriers' ncclUniqueId (rank 0's) */
    _Atomic uint64_t jh_at;       /* jobhold.c: counting collective + 1 every rank holds at */
    _Atomic uint64_t jh_go;       /* ... the jh_at every rank reached: staging down */
    _Atomic uint64_t jh_done;     /* ... the jh_at whose move is done (its ranks go on) */
    uint64_t pad_jh;
} es_seg_hdr_t;
_Static_assert(sizeof(es_seg_hdr_t) == 272, "es_seg_hdr_t layout");

typedef struct es_seg_rank {
    _Atomic uint32_t state;       /* 0 free, 1 claimed, 2 joined */
    _Atomic uint32_t departed;
    int32_t pid;
    int32_t can_device;           /* this rank can map every peer's device memory */
    uint64_t starttime;           /* /proc/<pid>/stat field 22, against pid reuse */
    uint8_t uuid[16];             /* its GPU */
    int32_t split_color[2], split_key[2];
    int32_t setup_ok;             /* device transport set up (vote) */
    int32_t fixed_ts;             /* in a fixed time-slicing rotation (defer.c: fusion) */
    _Atomic uint32_t bell;        /* futex word this rank sleeps on */
    _Atomic uint32_t sleeping;    /* its threads asleep on bell (a ringer wakes them) */
    int32_t tp_pref;              /* its EASYSCALE_COLL_TRANSPORT (rank 0's decides) */
    int32_t can_nccl;             /* this rank could carry over NCCL (libnccl loads) */
    uint64_t dev_chunk;           /* its device staging chunk (rank 0's is used) */
    /* device transport, written by this rank's streams (stream memory
     * operations), read by its watchdog: steps begun and ended (a step
     * waits between the two), gradient all-reduces completed */
    _Atomic uint64_t dpos, ddone, dprog;
    char pad1[16];
    _Atomic uint64_t arrive;      /* data barriers passed (stream side) */
    _Atomic uint64_t prop_seq;    /* defer.c: the kept all-reduce this rank's proposal is for */
    _Atomic uint64_t prop_n;      /* ... and how many from it it could fuse */
    char pad2[40];
    _Atomic uint64_t ctrl;        /* control barriers (host threads) */
    _Atomic uint64_t jh_issued;   /* jobhold.c: counting collectives this rank reached */
    _Atomic uint64_t jh_held;     /* ... the jh_at it waits at (0: none) */
    _Atomic uint64_t jh_down;     /* ... the jh_at it took its staging down for */
    char pad3[32];
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

/* The PreMulSum operator op of c for a call of nm on dtype, copied into
 * *out (the call keeps it: NCCL lets the application destroy the operator
 * once the call returned). ncclInvalidArgument, with the reason, when op
 * is not one of c's live operators or was made for another datatype
 * (comm.c). */
ncclResult_t es_coll_premul_get(es_comm_t *c, int op, int dtype, const char *nm,
                                es_premul_t *out);

typedef struct es_xhost es_xhost_t;

struct es_comm {
    uint64_t magic;
    int rank, nranks;             /* in the engine: of this host's ranks (all, on one host) */
    es_xhost_t *x;                /* across hosts: the levels above this host (NULL: none) */
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
    const struct es_coll_tp *tp;
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
    int ts_fuse;                  /* every rank in a fixed rotation: kept all-reduces may fuse */
    int hold_tp;                  /* the transport taken down at a scheduled hold (init.c) */
    int host_tp;                  /* the host transport whatever the preference (xhost_mem.c) */
    uint64_t ts_seq;              /* kept operations so far (defer.c) */
    es_premul_t premul[ES_COLL_MAX_PREMUL];
    /* initialisation */
    int init_rank, init_nranks;
    pthread_mutex_t init_mu;      /* guards joining init_thread */
    pthread_t init_thread;
    int init_threaded;
    struct es_comm *next;         /* registry */
};

/* ---- util.c: helpers every file may call --------------------------------------------- */

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t es_coll_now_ms(void);

/* Balanced shard [lo, hi) of n elements for rank r of nr, in units of 64
 * bytes. */
void es_coll_shard(size_t n, size_t esize, int r, int nr, size_t *lo, size_t *hi);

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

/* Whether operation o's completion counts (the transports): as above,
 * unless an operation across hosts counts for it (es_coll_op_t.quiet_done). */
static inline int es_coll_op_done_counts(const es_coll_op_t *o)
{
    return !o->quiet_done && es_coll_counts_step(o->kind, o->dtype);
}

/* ---- seg.c: the segment ------------------------------------------------------------------ */

/* Sets the communicator's asynchronous error (first fault wins) and the
 * segment's failure (so the peers see it). */
void es_comm_fail(es_comm_t *c, int reason, ncclResult_t status);
/* es_comm_fail by the transport's carriers' error (status): a dead or
 * departed peer is named where there is one (ncclRemoteError), else
 * ES_FAIL_CARRIER with status. */
void es_comm_fail_carrier(es_comm_t *c, ncclResult_t status);

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

/* The next control barrier of the host threads (set-up, split). */
static inline int es_ctrl_barrier(es_comm_t *c)
{
    return es_seg_barrier(c, ++c->ctrl, 0);
}

/* Point-to-point counters: waits until pair(from,to).<field> >= v (field 0
 * sent, 1 consumed) / publishes v. Same returns as es_seg_barrier. */
int es_seg_pair_wait(es_comm_t *c, int from, int to, int field, uint64_t v);
void es_seg_pair_set(es_comm_t *c, int from, int to, int field, uint64_t v);

/* A joined peer that left or died: -EPIPE with the reason (ES_FAIL_*) and
 * the rank, nothing recorded; else 0. */
int es_seg_gone(es_comm_t *c, int *why, int *who);

/* Looks at the peers (es_seg_gone): a dead or departed one marks the
 * segment failed and gives -EPIPE; else 0. */
int es_seg_check_peers(es_comm_t *c);
/* Only a dead peer (a process gone without leaving) marks the segment
 * failed and gives -EPIPE. For a wait that cannot tell whether a departed
 * peer already gave what it waits for (the device transport's watchdog):
 * a peer leaves only once its own operations finished, which needed every
 * rank's part of them, so such a wait ends by itself; one for an operation
 * the peer never issued ends at the collective timeout. */
int es_seg_check_dead(es_comm_t *c);

/* Wakes every rank of the segment (after a change every rank may wait
 * for), or one. */
void es_seg_ring(es_seg_t *s);
void es_seg_ring_rank(es_seg_t *s, int r);

/* The failure reason recorded in the segment (ES_FAIL_*) and its rank. */
int es_seg_failed(const es_seg_t *s, int *rank);

/* ---- tslice.c: time-slicing (docs/MOVING.md, section 6) ------------------------------- */

/* The virtual device of the parked EST whose collective this thread runs
 * (time-slicing: its memory is in its host copies, move/swap.h), or -1:
 * the copies and steps then run in the calling thread, no driver call. */
int es_coll_parked_vdev(void);
/* Set by launch.c around a parked EST's batch (-1 after). */
void es_coll_set_parked_vdev(int vdev);
/* While parked: 1 when the batch's buffers are plain host memory of this
 * process (defer.c's fused all-reduces), not the EST's device addresses. */
int es_coll_parked_host(void);
void es_coll_set_parked_host(int on);
/* At a collective or a rendezvous: 1 yielded (parked), 0 not
 * time-sliced, -1 failed (message set). */
int es_coll_ts_yield(void);
/* 1 when this EST takes part in a fixed rotation (EASYSCALE_TIME_SLICE). */
int es_coll_ts_fixed(void);
/* The same without applying a pending rotation change (defer.c: what was
 * kept runs in the rotation it was kept in). */
int es_coll_ts_park(void);
/* Back in its turn after es_coll_ts_yield returned 1: 0, or -1 (message
 * set). */
int es_coll_ts_resume(void);
/* A rotation change (es_mover_ts_apply) at the start of a collective: once
 * per collective, made either at its hold (es_coll_ts_apply_early, the
 * calling thread's next es_coll_ts_apply then does nothing) or here. */
void es_coll_ts_apply_early(void);
void es_coll_ts_apply(void);
/* A device-to-device copy of a parked EST, through the host. */
CUresult es_coll_parked_copy(int vdev, void *dst, const void *src, size_t n);

/* ---- step.c: steps -------------------------------------------------------------------------
 * A step is a short program of ordering actions on the stream: run by one
 * host function, or turned into stream memory operations by the
 * transport's order hook (device transport). */

enum { ES_A_BARRIER = 0,      /* a: target */
       ES_A_HOST_FN,          /* fn(arg) on the host (the host transport's CPU work) */
       ES_A_PAIR_WAIT,        /* a: value, peer, field, from */
       ES_A_PAIR_SET,
       ES_A_DONE_ALLREDUCE }; /* progress counter */

typedef struct es_action {
    int kind;
    int peer, field, from;
    uint64_t a;
    void (*fn)(void *arg);        /* ES_A_HOST_FN */
    void *arg;                    /* malloc'ed, owned (freed) by the step */
} es_action_t;

#define ES_STEP_MAX 24
typedef struct es_step {
    es_comm_t *c;
    int n;
    es_action_t act[ES_STEP_MAX];
} es_step_t;

/* Starts a step (NULL on allocation failure). */
es_step_t *es_step_new(es_comm_t *c);
/* Appends an action; 0 or -ENOSPC (full: flush first). */
int es_step_add(es_step_t *st, const es_action_t *a);
/* Enqueues the step on s: through the transport's order hook when it has
 * one, else as a host function (for a parked EST: run here). Frees it. */
CUresult es_step_launch(es_step_t *st, CUstream s);

typedef struct es_p2p {
    int send;                     /* 1 send, 0 recv */
    int peer;
    char *buf;                    /* device pointer */
    size_t bytes;
} es_p2p_t;

/* Common pieces of the transports: the rounds of a point-to-point batch.
 * copy_in(c, op, chunk, slot, off, bytes, s) / copy_out(...) move one
 * chunk into / out of staging. */
typedef CUresult (*es_p2p_copy_fn)(es_comm_t *c, const es_p2p_t *op, uint64_t chunk_idx,
                                   size_t off, size_t bytes, CUstream s);
CUresult es_p2p_rounds(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s,
                       es_p2p_copy_fn copy_in, es_p2p_copy_fn copy_out);

/* ---- the transport interface ---------------------------------------------------------------
 * One implementation per file of coll/transport/, each exporting one const
 * instance below. init.c picks one per communicator at its set-up (c->tp,
 * c->tp_id; c->tpd is the transport's own state) and the engine calls it
 * only through this struct. A transport may call step.c, seg.c, tslice.c
 * and util.c (and move/, device/, kernels/), never the engine's files.
 *
 * Threads: setup runs in the initialising thread (the caller's, a
 * non-blocking communicator's or a group's), coll and p2p in the
 * application's thread that enqueues (under c->mu), order in the thread
 * that launches a step (the same), teardown in the thread that destroys
 * or aborts (under c->mu) or that failed the set-up. The context of c is
 * current for each, except for a parked EST (tslice.c: then coll and p2p
 * make no driver call; only a transport without an order hook serves
 * parked ESTs, launch.c yields only for the host transport). */
typedef struct es_coll_tp {
    /* In the set-up log line ("host", "device"). */
    const char *name;
    /* Optional (NULL: always possible). Whether this rank could use the
     * transport, from what the ranks published in the segment (their GPUs'
     * UUIDs): called once every rank joined, before the choice. No waits.
     * 1 or 0. The nccl transport's is asked only where the device
     * transport's said 1 (it builds on its staging). */
    int (*possible)(es_comm_t *c);
    /* Collective: every rank calls it; it may wait for the others in
     * control barriers (es_seg_barrier, data 0: bounded by 10 times
     * EASYSCALE_COLL_TIMEOUT) and exchange what it needs with them. Sets
     * c->tpd. 0; -EAGAIN when some rank could not set it up (the same
     * answer on every rank: init.c then falls back to the host
     * transport); another -errno with its message (es_coll_error): the
     * communicator fails. On failure its own work is undone. */
    int (*setup)(es_comm_t *c);
    /* Frees what setup made, c->tpd NULL after (also when it is NULL
     * already). Never waits for other ranks; after a destroy, only once
     * c's operations finished on their streams. */
    void (*teardown)(es_comm_t *c);
    /* Enqueues one checked collective of count > 0 on s (rop: ES_RO_*; pm:
     * the PreMulSum operator when rop is ES_RO_PREMUL): copies, kernels or
     * host work, and steps for the waits (never a wait in the calling
     * thread). Advances c->bar (data barriers) and c->nchunks (staging set)
     * by what it used, alike on every rank. CUDA_SUCCESS, or the failing
     * CUresult (part may be queued: launch.c fails the communicator). */
    CUresult (*coll)(es_comm_t *c, const es_coll_op_t *op, int rop, const es_premul_t *pm,
                     CUstream s);
    /* Enqueues one batch of point-to-point operations (a group's, peers
     * other than this rank, bytes > 0), as coll (es_p2p_rounds). */
    CUresult (*p2p)(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s);
    /* Optional: keeps a step's ordering actions (barriers, pair waits and
     * sets, progress) in stream order on the device instead of running the
     * step in a host function; called by es_step_launch (which frees the
     * step). ES_A_HOST_FN has no place there: CUDA_ERROR_INVALID_VALUE.
     * A transport with this hook watches for faults itself while its
     * streams wait (seg.c's waits do it for host-function steps). */
    CUresult (*order)(es_comm_t *c, const es_step_t *st, CUstream s);
    /* Optional: a failure of what carries the bytes that the communicator
     * has not recorded yet (the carriers' NCCL communicator's asynchronous
     * error: its failed operations end on their streams with outputs that
     * mean nothing), ncclSuccess when none. Never waits. The engine asks
     * under c->mu (ncclCommGetAsyncError); the nccl transport's watchdog
     * asks it too (dev.h's check hook, under the watchdog's lock). */
    ncclResult_t (*async_error)(es_comm_t *c);
} es_coll_transport_t;

extern const es_coll_transport_t es_coll_tp_host;   /* transport/host.c */
extern const es_coll_transport_t es_coll_tp_dev;    /* transport/dev.c */
extern const es_coll_transport_t es_coll_tp_nccl;   /* transport/nccl.c */

/* ---- init.c: a communicator's life -------------------------------------------------------- */

/* Once per process (pthread_once): the registry's fork handler. */
void es_comm_global_init(void);
/* The registry of live communicators (es_coll_valid reads it). */
void es_comm_register(es_comm_t *c);
void es_comm_unregister(es_comm_t *c);
/* A new communicator (not registered; NULL on allocation failure), and
 * its release. */
es_comm_t *es_comm_alloc(int nranks, int rank, const es_coll_id_t *id, int blocking);
void es_comm_free(es_comm_t *c);
/* Binds c to ctx (NULL: the primary context of virtual device 0); reads
 * its device. CUresult (message set). */
CUresult es_comm_bind(es_comm_t *c, CUcontext ctx);
/* Makes c's context current for the engine's calls; *pushed says whether
 * es_comm_ctx_leave must pop it. */
CUresult es_comm_ctx_enter(const es_comm_t *c, int *pushed);
void es_comm_ctx_leave(int pushed);
/* The NCCL status of a -errno of seg.c or a transport's set-up. */
ncclResult_t es_comm_status_of(int err);
/* Takes c's transport down (its staging freed; the count of device staging
 * the mover's gate reads kept). */
void es_comm_tp_down(es_comm_t *c);
/* At a scheduled hold (enqueue.c, every EST at the same collective): every
 * communicator whose staging is device memory is drained on every rank and
 * its transport taken down (collective, in creation order), so that the
 * controller's moves leave nothing behind; es_comm_hold_end sets them up
 * again where the ESTs are then (a GPU that cannot, or a job with an EST
 * time-sliced: host transport). es_comm_hold_begin returns how many
 * communicators it took down. */
int es_comm_hold_begin(void);
void es_comm_hold_end(void);
/* Whether a communicator of this process has device staging now. */
int es_comm_devmem_live(void);
/* The board of a job hold (jobhold.c): the largest live communicator with
 * device staging (ties: the lowest nonce), or NULL. */
es_comm_t *es_comm_board(void);

/* jobhold.c: a hold of the whole job a process asks for itself (its move
 * signal, easyscale_move) while staging is device memory. es_jobhold_issue:
 * before each counting collective (enqueue.c), publishes its index and
 * holds there when a hold is due. es_jobhold_request: the mover's deferral
 * hook (move/mover.h: -EINPROGRESS, the move then runs at the hold).
 * es_jobhold_global_init: sets the hook (comm.c, group.c). */
void es_jobhold_issue(uint64_t idx, int in_group);
int es_jobhold_request(int dev, char *msg, size_t msglen);
void es_jobhold_global_init(void);
/* Rendezvous and transport: runs in the caller's thread (blocking), a
 * background thread (non-blocking) or a group's thread; stores the result
 * in c->async. */
ncclResult_t es_comm_setup(es_comm_t *c);
/* pthread body: es_comm_setup in c's context. */
void *es_comm_init_thread(void *arg);
/* Joins c's initialisation thread, if any. */
void es_comm_join_init(es_comm_t *c);
/* The wait of an operation on a communicator still initialising: its
 * status (ncclInvalidUsage while it cannot finish, inside a group). */
ncclResult_t es_comm_ready(es_comm_t *c);

/* ---- group.c, launch.c: queued operations ------------------------------------------------- */

typedef struct es_qop {
    es_coll_op_t op;
    int rop;                      /* ES_RO_* */
    es_premul_t pm;
} es_qop_t;

/* The calling thread's group (ncclGroupStart/End). */
typedef struct es_group {
    int depth;
    es_qop_t *ops;
    int nops, capops;
    es_comm_t **inits;
    int ninits, capinits;
    ncclResult_t err;             /* first error inside the group */
} es_group_t;

/* Starts the initialisation of c: now, in a thread, or at ncclGroupEnd. */
ncclResult_t es_group_start_init(es_comm_t *c);
/* The depth of the calling thread's group (0: none). */
int es_group_depth(void);
/* ncclGroupEnd and ncclGroupSimulateEnd of the operations of one host
 * (xhost.c's es_coll_group_end and _discard run them, then its own). */
ncclResult_t es_group_end_local(void);
ncclResult_t es_group_discard_local(void);
/* Inside a group: records the group's first error. */
void es_group_note_error(ncclResult_t res);
/* Queues a checked operation until ncclGroupEnd; 0 or -ENOMEM. */
int es_group_queue_op(const es_qop_t *q);
/* A group of the engine's own (ncclCommInitAll) inside whatever group the
 * thread is in: es_group_isolate saves the thread's group and starts an
 * empty one; es_group_end_isolated ends it (ncclGroupEnd) and restores. */
void es_group_isolate(es_group_t *saved);
ncclResult_t es_group_end_isolated(const es_group_t *saved);

/* Runs checked operations of one communicator (issue order; collectives
 * first, then the point-to-point batch) on the first one's stream. */
ncclResult_t es_coll_launch(es_comm_t *c, es_qop_t **ops, int n);
/* The same for a parked EST (time-slicing, after es_coll_ts_yield): run
 * in the calling thread on its host copies; the stream is not touched. */
ncclResult_t es_coll_launch_parked(es_comm_t *c, es_qop_t **ops, int n);

/* util.c: the NCCL name of an operation kind (ES_OP_*; "?" for another). */
const char *es_coll_op_name(int kind);

/* ---- transport/host.c: the CPU's fold --------------------------------------------------- */

/* The kernel's element arithmetic on the CPU over a->count elements
 * (a->out apart from the inputs; scalar: PreMulSum's, in the datatype's
 * storage), in IEEE mode whatever the thread's (xhost_mem.c's fold steps;
 * the host transport's own reductions use the same loop). */
void es_coll_cpu_fold(const es_red_args_t *a, es_u64 scalar);

/* ---- xhost.c: a communicator across hosts ------------------------------------------------- */

/* Whether the job spans hosts (GROUP_WORLD_SIZE > 1). */
int es_xhost_wanted(void);
/* Makes e an id across hosts: it carries the leaders' real NCCL id. */
ncclResult_t es_xhost_make_id(es_coll_id_t *e);
/* For an id across hosts (ES_COLL_ID_MAGIC_X): checks *rank of *nranks
 * against the environment, turns e into the id of this host's own
 * communicator and *nranks, *rank into its size and this rank's place in
 * it, and returns the levels above it in *out (freed with free() when the
 * host's communicator is not made). */
ncclResult_t es_xhost_plan(es_coll_id_t *e, int *nranks, int *rank, const ncclConfig_t *config,
                           es_xhost_t **out);
/* The host's communicator c made (c->x set): the leaders' communicator. */
ncclResult_t es_xhost_connect(es_comm_t *c);
/* ncclCommSplit of the communicator across hosts p (every rank of p
 * calls it, blocking): every rank's (color, key) over p; this rank's
 * communicator of its color is its ranks ordered by key, then p's rank.
 * Returns ncclSuccess with *nlocal 0 (NCCL_SPLIT_NOCOLOR), or with the
 * size of this host's communicator in it and this rank's place there
 * (*nlocal, *lrank) and, when it spans hosts, its levels above the host in
 * *x (NULL: one host). Its ranks must come in blocks of equal size per
 * host (ncclInvalidUsage otherwise, with the reason). */
ncclResult_t es_xhost_split(es_comm_t *p, int color, int key, es_xhost_t **x, int *nlocal,
                            int *lrank);
/* Destroys (abort: aborts) the levels above the host; c->x NULL after. */
void es_xhost_free(es_comm_t *c, int abort);
/* The leaders' communicator's asynchronous error (ncclSuccess: none). */
ncclResult_t es_xhost_async_error(es_comm_t *c);
/* At a hold of the whole job (every EST of every host at the same
 * collective), around the moves: down hands the leaders' communicator's
 * successor id on over it and destroys it (leaders; moves are allowed
 * until up), up makes it again where the leader is now. 0 or -EIO (the
 * reason kept for ncclGetLastError). */
int es_xhost_hold_down(es_comm_t *c);
int es_xhost_hold_up(es_comm_t *c);
/* init.c: the same for every communicator across hosts of the process. */
void es_comm_xhost_down(void);
void es_comm_xhost_up(void);
/* Whether the levels above the host run in host memory (xhost_mem.c). */
int es_xhost_in_memory(const es_xhost_t *x);
/* The rank and size across hosts. */
int es_xhost_rank(const es_comm_t *c);
int es_xhost_nranks(const es_comm_t *c);
/* ---- enqueue.c ---------------------------------------------------------------------------- */

/* An operation of c's own ranks (es_coll_enqueue for a communicator of
 * one host; xhost.c's steps inside a host); _valid: o->comm is known to be
 * a live communicator (es_coll_valid, a lock and a walk, once per call). */
ncclResult_t es_coll_enqueue_local(const es_coll_op_t *o);
ncclResult_t es_coll_enqueue_valid(const es_coll_op_t *o);

/* ---- defer.c: a time-sliced EST's collectives kept until it yields ---------------------- */

/* Where the operations of enqueue.c and group.c go: kept (a time-sliced
 * EST: contribution and completion at its next yield), or launched (after
 * whatever is kept, which is flushed first). */
ncclResult_t es_coll_submit(es_comm_t *c, es_qop_t **ops, int n);
/* Whether c's collectives are kept (time-sliced, host transport). */
int es_coll_ts_keeps(es_comm_t *c);
/* The same for one operation across hosts in host memory (xhost_mem.c):
 * kept, or run now (es_xhost_run_now) after what is kept. */
ncclResult_t es_coll_submit_xhost(es_comm_t *c, es_qop_t *q);
/* xhost_mem.c: an operation across hosts in host memory, whole, in this
 * thread: kept by a time-sliced EST, run at its yield, parked (_kept), or
 * now, from and to the GPU (_now). */
ncclResult_t es_xhost_run_kept(es_comm_t *c, const es_qop_t *q);
ncclResult_t es_xhost_run_now(es_comm_t *c, const es_qop_t *q);

#endif
