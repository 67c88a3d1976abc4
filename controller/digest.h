/* Collective digests, the reader's side: loads the files of a run
 * (format: wire/digest.h), finds the first collective where two runs
 * differ (`easyscale-ctl diff`, the harness's explanations). Implemented in
 * controller/digest.c. */
#ifndef ES_CONTROLLER_DIGEST_H
#define ES_CONTROLLER_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "wire/digest.h"

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
