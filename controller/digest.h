/* Collective digests: the file format the shim writes with
 * EASYSCALE_DIGEST=DIR (context/digest.c, one file per EST), and the
 * reader and first-divergence finder behind `easyscale-ctl diff` and the
 * harness's explanations (controller/digest.c).
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
#ifndef ES_CONTROLLER_DIGEST_H
#define ES_CONTROLLER_DIGEST_H

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

/* One EST's digest, records sorted by call. */
typedef struct es_digest_est {
    es_digest_hdr_t hdr;
    es_digest_rec_t *rec;
    size_t n;
    int torn;             /* a partial last record was dropped */
} es_digest_est_t;

/* One run: every rank-*.esd of a directory, sorted by rank. */
typedef struct es_digest_run {
    es_digest_est_t *est;
    int n;
} es_digest_run_t;

/* Reads DIR. Returns 0, -ENOENT (no such directory, or no digest in it),
 * -EINVAL (a file of another format; err says which) or -ENOMEM. */
int es_digest_load(const char *dir, es_digest_run_t *run, char *err, size_t errlen);
void es_digest_run_free(es_digest_run_t *run);

/* The first divergence between two runs. */
typedef struct es_digest_diff {
    int agree;            /* 1: every rank's records are equal */
    int kind;             /* ES_DIGEST_DIFF_* when !agree */
    uint64_t call, step;
    uint32_t rank;
    es_digest_rec_t a, b; /* the two records (kind CALL / INPUT / OUTPUT) */
    size_t na, nb;        /* records of that rank in each run (kind LENGTH) */
    size_t ncalls;        /* records compared, all ranks */
    int nranks;
} es_digest_diff_t;

enum {
    ES_DIGEST_DIFF_RANKS = 1,  /* the runs have other ranks */
    ES_DIGEST_DIFF_CALL,       /* the call itself differs (op, type, count, ...) */
    ES_DIGEST_DIFF_INPUT,      /* same call, other input: computed differently before it */
    ES_DIGEST_DIFF_OUTPUT,     /* same input, other output: the collective reduced differently */
    ES_DIGEST_DIFF_LENGTH,     /* one run made fewer calls */
};

/* Compares run a with run b: the earliest call (then the lowest rank) at
 * which the records differ. Returns 0 (agree or not, in d). */
int es_digest_compare(const es_digest_run_t *a, const es_digest_run_t *b, es_digest_diff_t *d);

/* One line: "first divergence: call 12 (step 4), rank 0, allreduce sum
 * float32 x 9550 (38200 bytes): same input, other output: ...", or "the
 * runs agree: ...". */
void es_digest_describe(const es_digest_diff_t *d, char *out, size_t len);

/* Loads both directories, compares, describes (out); returns 1 differ, 0
 * agree, or a negative errno with the reason in out. */
int es_digest_explain(const char *dir_a, const char *dir_b, char *out, size_t len);

const char *es_digest_op_name(uint32_t op);
const char *es_digest_redop_name(uint32_t redop);
const char *es_digest_dtype_name(uint32_t dtype);
/* Bytes per element of an ncclDataType_t (0: unknown). */
unsigned es_digest_dtype_size(uint32_t dtype);

int es_ctl_diff_main(int argc, char **argv);

#endif
