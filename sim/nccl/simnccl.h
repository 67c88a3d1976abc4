/* simcuda NCCL internals: the reduction engine (element kernels and the
 * ordering rules that reproduce NCCL's sources of nondeterminism) and the
 * shared-memory transport (one segment per communicator, barriers, point to
 * point rings, fault detection). libnccl.so.2's public API (nccl.c) is built
 * on these; the unit tests call them directly.
 *
 * Ordering rules (what decides the bits of a floating-point reduction):
 *   ring      ring position p -> rank: the communicator's ranks sorted by
 *             their device's PCI bus id (then ordinal, then rank), as NCCL's
 *             topology search orders GPUs by PCI/NVLink placement.
 *   channels  nch = comm channels (min over ranks of clamp(SMs/16, 1, 32),
 *             clamped into [minCh, maxCh]), then, unless min == max, reduced
 *             while bytes < nch * threshold(proto) (Simple 64 KiB, LL128
 *             16 KiB, LL 4 KiB), never below minCh.
 *   ring allreduce  the count elements are split into nch contiguous channel
 *             ranges of ceil(count/nch) elements (rounded up to 16 bytes);
 *             each channel runs loops of nranks chunks of C elements
 *             (C = chunk(proto)/elemsize: Simple 128 KiB, LL128 32 KiB,
 *             LL 8 KiB); the last loop of a channel uses the chunk
 *             ceil(rest/nranks) (rounded up to 16 bytes). Chunk j of a loop is
 *             owned by ring position j; its elements are folded left to right
 *             over ring positions j+1, j+2, ..., j+nranks (mod nranks).
 *   tree allreduce  chain in ring order: positions nranks-1, ..., 1, 0.
 *   reduce    ring positions root+1, ..., root (root's position).
 *   reduce-scatter  block d (rank d's output) folds positions pos(d)+1, ...,
 *             pos(d).
 *   avg       floating types: each input times (type)(1/nranks), then sum;
 *             integer types: sum, then divided by nranks.
 *   default algorithm: Tree for allreduce when nranks >= 3 and bytes <=
 *             64 KiB, else Ring; protocol LL up to 64 KiB, LL128 up to 1 MiB,
 *             Simple above. NCCL_ALGO / NCCL_PROTO restrict the choice.
 *   (bytes = count * elemsize, times nranks for allgather/reduce-scatter.)
 * Only the ring order (placement), and for ring allreduce the chunking (size,
 * protocol, channels, hence GPU models), change the bits; rank 0's
 * environment decides for the whole communicator. With NCCL_ALGO=Ring,
 * NCCL_PROTO=Simple and NCCL_MIN_CTAS == NCCL_MAX_CTAS (what the shim sets)
 * the chunking is fixed by size alone and the order still depends on
 * placement, as with NVIDIA's NCCL.
 *
 * Environment (parsed strictly; a bad value fails ncclCommInit* with
 * ncclInvalidArgument and a message): NCCL_ALGO, NCCL_PROTO,
 * NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS, NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS
 * (1..64; they override ncclConfig_t minCTAs/maxCTAs), NCCL_DEBUG (WARN is
 * the default here; NONE silences), NCCL_SIM_TIMEOUT_MS (longest wait for
 * peers inside an operation, default 60000), NCCL_SIM_INIT_TIMEOUT_MS (the
 * rendezvous, default 120000), NCCL_SIM_BUFFSIZE (staging bytes per rank and
 * set, default 1 MiB; does not change results).
 */
#ifndef SIM_NCCL_H
#define SIM_NCCL_H

#include "sim/common/f16.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- reduction engine ---------------------------------------------------- */

enum { SIM_NCCL_NTYPES = 12 };   /* ncclInt8 .. ncclFloat8e5m2 */
enum { SIM_OP_SUM = 0, SIM_OP_PROD, SIM_OP_MAX, SIM_OP_MIN, SIM_OP_AVG, SIM_NOPS };

/* Element size of an ncclDataType_t, 0 for an invalid one. */
size_t sim_nccl_type_size(int dtype);
/* Whether dtype can be reduced here (every type but the FP8 ones). */
int sim_nccl_type_reducible(int dtype);

/* out[i] = in[0][i] op in[1][i] op ... op in[nin-1][i], folded left to right
 * (nin >= 1); for SIM_OP_AVG, scale_n is nranks. The same values also go to
 * out2 unless it is NULL. Outputs may alias inputs at the same positions
 * (in place); other overlaps are not allowed. */
void sim_nccl_reduce(int dtype, int op, int scale_n, void *out, void *out2,
                     const void *const *in, int nin, size_t n);

/* half / bfloat16 elements are converted by sim/common/f16.h's double entry
 * points (sim_f16_half_to_double, sim_f16_double_to_half, ...). */

enum { SIM_ALGO_RING = 0, SIM_ALGO_TREE = 1, SIM_NALGOS };
enum { SIM_PROTO_LL = 0, SIM_PROTO_LL128 = 1, SIM_PROTO_SIMPLE = 2, SIM_NPROTOS };
enum { SIM_COLL_ALLREDUCE = 0, SIM_COLL_BROADCAST, SIM_COLL_REDUCE, SIM_COLL_ALLGATHER,
       SIM_COLL_REDUCESCATTER };

/* Communicator-level tuning, identical on every rank (rank 0's environment). */
typedef struct sim_nccl_tuning {
    int algo_mask;    /* bit per SIM_ALGO_* allowed */
    int proto_mask;   /* bit per SIM_PROTO_* allowed */
    int min_ch, max_ch;
    int base_ch;      /* from the devices: min over ranks of clamp(SMs/16, 1, 32) */
} sim_nccl_tuning_t;

/* The order of one collective. */
typedef struct sim_nccl_plan {
    int kind, nranks, algo, proto, nch;
    size_t count;          /* elements in the reduced index space */
    size_t chunk;          /* C, elements */
    size_t align;          /* elements per 16 bytes (>= 1) */
    size_t chan_elems;     /* elements per channel */
    size_t block;          /* reduce-scatter: elements per rank block */
    int root_pos;          /* reduce: root's ring position */
    const int *pos_of;     /* rank -> ring position (set by the caller) */
} sim_nccl_plan_t;

/* Chooses algorithm, protocol, channels for a collective of `count` elements
 * of `dtype` (for reduce-scatter `count` is the per-rank count; for reduce
 * root_pos is the root's ring position). */
void sim_nccl_plan(sim_nccl_plan_t *p, const sim_nccl_tuning_t *t, int kind, int nranks,
                   size_t count, int dtype, int root_pos);

/* For element e (e < p->count) of the reduced index space: the first ring
 * position of its fold, the direction (+1/-1), and the end (exclusive) of the
 * run of elements from e that share that order. */
void sim_nccl_plan_segment(const sim_nccl_plan_t *p, size_t e, int *start, int *dir,
                           size_t *end);

/* Parses NCCL_ALGO / NCCL_PROTO style lists ("Ring,Tree", "^Tree", case
 * insensitive). Returns the mask or -1 for an unknown name. */
int sim_nccl_parse_algo(const char *s);
int sim_nccl_parse_proto(const char *s);

/* ---- shared-memory transport --------------------------------------------- */

#define SIM_NCCL_MAGIC 0x4c43434e4d495353ULL   /* "SSIMNCCL" */
#define SIM_NCCL_SHM_VERSION 3
#define SIM_NCCL_MAX_RANKS 64 /* = SIMNCCL_MAX_RANKS of nkern.h (the kernels') */
#define SIM_NCCL_ID_MAGIC 0x53494d4e43434c31ULL

/* What an ncclUniqueId carries (must fit its 128 bytes). */
typedef struct sim_nccl_id {
    uint64_t magic;     /* SIM_NCCL_ID_MAGIC */
    uint64_t nonce;
    char name[64];      /* shm_open name, "/simnccl-..." (no bootstrap) */
    uint32_t boot_addr; /* the root's IPv4 address, network order; 0: no bootstrap, the
                         * ranks meet by name on one host (ncclCommInitAll, split) */
    uint16_t boot_port; /* network order */
    uint16_t flags;     /* SIM_NCCL_ID_COMM_ID: the address is NCCL_COMM_ID's */
    uint64_t boot_magic;/* random (NCCL_COMM_ID: from the address); checked by the root */
    char pad[32];
} sim_nccl_id_t;
#define SIM_NCCL_ID_COMM_ID 1u
_Static_assert(sizeof(sim_nccl_id_t) == 128, "sim_nccl_id_t must be 128 bytes");

/* One rank's slot in the segment header area. */
typedef struct sim_nccl_rank {
    _Atomic uint32_t state;       /* 0 free, 1 claimed, 2 ready */
    _Atomic uint32_t departed;    /* left the communicator (destroy) */
    int32_t pid;
    int32_t dev_ordinal;
    uint64_t starttime;           /* /proc/<pid>/stat starttime, against pid reuse */
    int32_t sm_count;
    int32_t cc_major, cc_minor;
    int32_t split_color[2], split_key[2];
    int32_t pad0;
    char bus_id[32];
    uint8_t uuid[16];
    char model[16];
    char pad1[72];
    _Atomic uint64_t arrive;      /* data-path barrier counter (stream side) */
    char pad2[56];
    _Atomic uint64_t ctrl;        /* control barrier counter (host side) */
    char pad3[56];
} sim_nccl_rank_t;
_Static_assert(sizeof(sim_nccl_rank_t) == 320, "sim_nccl_rank_t layout");
_Static_assert(offsetof(sim_nccl_rank_t, arrive) == 192, "sim_nccl_rank_t layout");

/* SIM_FAIL_NET: a rank of another host is unreachable (net.h; the header
 * says which in net_msg). */
enum { SIM_FAIL_NONE = 0, SIM_FAIL_ABORT = 1, SIM_FAIL_DEAD = 2, SIM_FAIL_TIMEOUT = 3,
       SIM_FAIL_NET = 4 };

/* The segment header. Layout: header, ranks[nranks], p2p (nranks x nranks
 * head/tail pairs of the send rings); sections page aligned. Only control
 * lives here: the data moves through the ranks' staging buffers in device
 * memory (staging.h), whose sizes (slot_bytes, p2p_bytes: each rank's
 * two slots and two result areas, each send ring) rank 0 fixes here. */
typedef struct sim_nccl_shm {
    _Atomic uint64_t magic;       /* SIM_NCCL_MAGIC, stored last by the creator */
    uint32_t version;
    uint32_t header_size;         /* sizeof(sim_nccl_shm_t) */
    uint64_t size;                /* whole segment */
    uint64_t nonce;
    uint32_t nranks;
    uint32_t pad0;
    uint64_t slot_bytes, p2p_bytes;
    uint64_t off_ranks, reserved[2], off_p2p;
    _Atomic uint32_t joined;
    _Atomic uint32_t bell;        /* futex word, bumped on every change */
    _Atomic uint32_t waiters;
    _Atomic uint32_t fail;        /* SIM_FAIL_*: the communicator is dead */
    int32_t fail_rank;
    _Atomic uint32_t tuning_ready;
    int32_t algo_mask, proto_mask, min_ch, max_ch;
    _Atomic uint32_t net_set;     /* net_msg written (first writer wins: 1 claimed, 2 set) */
    uint32_t pad1;
    char net_msg[120];            /* which rank of another host is unreachable */
} sim_nccl_shm_t;
_Static_assert(sizeof(sim_nccl_shm_t) == 256, "sim_nccl_shm_t layout");
_Static_assert(offsetof(sim_nccl_shm_t, joined) == 88, "sim_nccl_shm_t layout");

typedef struct sim_nccl_pair {
    _Atomic uint64_t head;        /* bytes written by the sender */
    char pad0[56];
    _Atomic uint64_t tail;        /* bytes consumed by the receiver */
    char pad1[56];
} sim_nccl_pair_t;
_Static_assert(sizeof(sim_nccl_pair_t) == 128, "sim_nccl_pair_t layout");

/* A process's (or thread-rank's) mapping of a segment. */
typedef struct sim_nccl_seg {
    sim_nccl_shm_t *h;
    size_t map_size;
    int rank, nranks;
    int timeout_ms;
    _Atomic int *local_abort;     /* set by ncclCommAbort in this process */
    const int *comm_rank;         /* segment index -> communicator rank, for messages
                                   * (NULL: the same; across hosts a segment holds
                                   * only its host's ranks) */
} sim_nccl_seg_t;

/* Creates or joins the segment named by id as `rank` of `nranks`;
 * slot_bytes/p2p_bytes are used only by the creator. Fills the rank's slot
 * from *me (state, pid, starttime are set here) and waits (bounded) until all
 * ranks joined. Returns 0, -EINVAL (header mismatch), -EEXIST (rank taken),
 * -ETIMEDOUT, -EPIPE (a rank died), or another negative errno. Rank 0
 * publishes tuning (algo mask, proto mask, min/max channels) in the header
 * before it counts as joined. */
int sim_nccl_seg_join(sim_nccl_seg_t *s, const sim_nccl_id_t *id, int nranks, int rank,
                      size_t slot_bytes, size_t p2p_bytes, const sim_nccl_rank_t *me,
                      const int tuning[4], int timeout_ms);
void sim_nccl_seg_leave(sim_nccl_seg_t *s);   /* marks departed, unmaps */

static inline sim_nccl_rank_t *sim_nccl_rank(const sim_nccl_seg_t *s, int r)
{
    return (sim_nccl_rank_t *)((char *)s->h + s->h->off_ranks) + r;
}
static inline sim_nccl_pair_t *sim_nccl_pair(const sim_nccl_seg_t *s, int from, int to)
{
    return (sim_nccl_pair_t *)((char *)s->h + s->h->off_p2p) +
           ((size_t)from * (size_t)s->nranks + (size_t)to);
}

/* Wakes every waiter of the segment (after changing shared state). */
void sim_nccl_ring_bell(sim_nccl_seg_t *s);

/* Waits until cond(arg) returns > 0, bounded: returns 0, or the negative
 * result of cond, -ECONNABORTED (communicator failed or aborted: the
 * SIM_FAIL_* reason is in *why when non-NULL), -EPIPE (a peer process died;
 * the segment is marked failed), -ETIMEDOUT (segment marked failed). */
int sim_nccl_wait(sim_nccl_seg_t *s, int (*cond)(void *), void *arg, int *why);

/* Barrier number b over all ranks on the data path (counter `arrive`) or the
 * control path (counter `ctrl`). Same return values as sim_nccl_wait. */
int sim_nccl_barrier(sim_nccl_seg_t *s, uint64_t b, int ctrl, int *why);

/* Marks the communicator failed with reason (first one wins) and wakes all. */
void sim_nccl_fail(sim_nccl_seg_t *s, int reason);

/* Every rank gives its file descriptor fd to every other rank: fds[r] is
 * rank r's (a new descriptor, the caller closes it; fds[me] is -1). Over
 * abstract unix sockets named from the communicator's nonce (SCM_RIGHTS),
 * after a control barrier (*ctrl_bar is advanced). Returns 0, or a negative
 * errno (the communicator is then marked failed); *why as sim_nccl_wait. */
int sim_nccl_fd_exchange(sim_nccl_seg_t *s, uint64_t nonce, uint64_t *ctrl_bar, int fd, int *fds,
                         int *why);

/* Whether process pid (with that starttime, 0 = unknown) is alive. */
int sim_nccl_pid_alive(pid_t pid, uint64_t starttime);
uint64_t sim_nccl_pid_starttime(pid_t pid);

/* Strict environment parsing: returns 0 and *out (default when unset), or
 * -EINVAL with a message on stderr. */
int sim_nccl_env_int(const char *name, long lo, long hi, long def, long *out);

/* NCCL_DEBUG as a level, read once: 0 NONE, 1 VERSION, 2 WARN (also when
 * unset), 3 INFO or TRACE. Any other value is said once on stderr and read
 * as WARN. sim_nccl_debug_reset() makes the next call read it again
 * (ncclResetDebugInit). */
int sim_nccl_debug_level(void);
void sim_nccl_debug_reset(void);

#endif
