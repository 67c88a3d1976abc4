/* Collective digests: the file format the shim writes with
 * EASYSCALE_DIGEST=DIR (coll/digest.c, one file per EST) and the controller
 * reads (controller/digest.h: the reader and first-divergence finder behind
 * `easyscale-ctl diff` and the harness's explanations).
 *
 * DIR/rank-RRRRR.esd: an es_digest_hdr_t, then one es_digest_rec_t per
 * collective call of the process, appended as each call completes on its
 * stream (so possibly out of call order across streams; readers sort by
 * call). Both structures are little-endian, fixed-size, their sizes in the
 * header; a reader refuses another magic or version and skips a torn last
 * record. Hashes are computed on the device (kernels/digest.cu): a 64-bit
 * sum over the buffer's 8-byte words of a mix of (word index, word), one
 * pass, the same whatever the grid, so equal bytes give equal hashes on
 * every GPU and on simcuda. */
#ifndef ES_WIRE_DIGEST_H
#define ES_WIRE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define ES_DIGEST_MAGIC 0x47445345u /* "ESDG" */
#define ES_DIGEST_VERSION 1

typedef struct es_digest_hdr {
    uint32_t magic;       /* ES_DIGEST_MAGIC */
    uint16_t version;     /* ES_DIGEST_VERSION */
    uint16_t hdr_size;    /* sizeof(es_digest_hdr_t) */
    uint32_t rec_size;    /* sizeof(es_digest_rec_t) */
    uint32_t rank;        /* the EST's rank (RANK) */
    uint32_t world;       /* WORLD_SIZE (0: unknown) */
    uint32_t pid;
    uint32_t level;       /* EASYSCALE_DETERMINISM: 0 off, 1 d1, 2 d2 */
    uint32_t flags;       /* ES_DIGEST_F_* */
    char slot[48];        /* the EST's GPU at start (EASYSCALE_SLOT), NUL-terminated */
} es_digest_hdr_t;
_Static_assert(sizeof(es_digest_hdr_t) == 80, "digest header layout");

#define ES_DIGEST_F_VIRTUAL 0x1u /* the shim's virtual collectives (else NCCL's) */

/* Collective kinds (es_digest_rec_t.op). */
enum {
    ES_DIGEST_ALLREDUCE = 1,
    ES_DIGEST_BROADCAST = 2,
    ES_DIGEST_REDUCE = 3,
    ES_DIGEST_ALLGATHER = 4,
    ES_DIGEST_REDUCESCATTER = 5,
    ES_DIGEST_SEND = 6,
    ES_DIGEST_RECV = 7,
};

typedef struct es_digest_rec {
    uint64_t call;        /* the process's collective calls before this one */
    uint64_t step;        /* the controller's step at the call (all-reduces so far) */
    uint32_t op;          /* ES_DIGEST_* */
    uint32_t redop;       /* ncclRedOp_t (sum 0, prod 1, max 2, min 3, avg 4; others custom) */
    uint32_t dtype;       /* ncclDataType_t */
    uint32_t comm;        /* the communicator's index in the process (creation order) */
    uint32_t rank;        /* rank in that communicator */
    uint32_t nranks;      /* its size */
    uint64_t count;       /* elements (per rank for all-gather / reduce-scatter input) */
    uint64_t in_hash;     /* of the send buffer before the call (0: none, e.g. recv) */
    uint64_t out_hash;    /* of the receive buffer after it (0: none, e.g. send) */
} es_digest_rec_t;
_Static_assert(sizeof(es_digest_rec_t) == 64, "digest record layout");

#endif
