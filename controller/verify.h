/* easyscale-ctl verify: the checksum harness. Runs one training command
 * under `easyscale-ctl run` in a matrix of configurations (placements,
 * GPU orders, GPU models, scale events, time-slicing, migrations, and
 * negative controls), takes each run's checksum from its output with a
 * regular expression, and judges: every checksum of a determinism level
 * equal, every negative control different.
 *
 * The matrix is text, one configuration a line (`verify --list` prints the
 * built-in one; `verify --matrix FILE` reads one):
 *
 *   KIND NAME [KEY=VALUE | FLAG]...
 *
 * KIND `check` (its checksum must equal its level's reference: the first
 * check of the level with a checksum) or `control` (must differ from it).
 * NAME: letters, digits, - _ . + (at most 47). Keys: level=d1|d2 (d1),
 * gpus=LIST (the job's GPUs, in this order: ordinals as `easyscale-ctl
 * gpus` numbers them, ranges a-b, or UUIDs, comma-separated; the job's
 * processes see only these, through CUDA_VISIBLE_DEVICES by UUID, so a
 * placement cannot leak onto other GPUs; default: every GPU),
 * env=VAR=VALUE (repeatable, at most 16; applied after gpus=),
 * schedule=EVENTS (easyscale-ctl run schedule lines separated by ';'; their
 * GPUs are positions in the gpus= list), est-memory=SIZE, ests=N (this
 * configuration's number of ESTs, e.g. a control where the job shrinks to
 * its GPUs as elastic training without EasyScale does), desc=TEXT;
 * flags: no-time-slicing, shim-none (libeasyscale.so not loaded), shim-off
 * (loaded, at EASYSCALE_DETERMINISM=off: run --determinism off), moves
 * (needs ESTs that move: skipped once a run shows this libeasyscale.so
 * cannot move them). A value may be double-quoted (key="a b"); no
 * escapes. `#` starts a comment line. */
#ifndef ES_CONTROLLER_VERIFY_H
#define ES_CONTROLLER_VERIFY_H

#include <regex.h>
#include <stddef.h>

#include "controller/ctl.h"

#define ES_VCFG_NAME_MAX 48
#define ES_VCFG_MAX_ENV 16
#define ES_VCFG_MAX 256
#define ES_VSUM_MAX 160

enum { ES_VCFG_CHECK = 0, ES_VCFG_CONTROL = 1 };

typedef struct es_vcfg {
    char name[ES_VCFG_NAME_MAX];
    int role;                   /* ES_VCFG_CHECK or ES_VCFG_CONTROL */
    int level;                  /* 1 (d1) or 2 (d2) */
    char *gpus;                 /* LIST, or NULL: all */
    char *env[ES_VCFG_MAX_ENV]; /* "VAR=VALUE" */
    int nenv;
    char *schedule;             /* events separated by ';', or NULL */
    char *est_mem;              /* SIZE, or NULL */
    char *desc;                 /* or NULL */
    int no_tslice, shim_none, shim_off, moves;
    int ests;                   /* ESTs of this configuration (0: verify's --ests) */
} es_vcfg_t;

typedef struct es_vmatrix {
    es_vcfg_t c[ES_VCFG_MAX];
    int n;
} es_vmatrix_t;

/* Parses matrix text (origin names it in messages). Returns 0, or -EINVAL
 * with "ORIGIN:LINE: reason" in err (m is then freed). Names are unique. */
int es_vmatrix_parse(const char *text, const char *origin, es_vmatrix_t *m, char *err,
                     size_t errlen);
void es_vmatrix_free(es_vmatrix_t *m);
/* Frees one configuration's strings and zeroes it. */
void es_vcfg_free(es_vcfg_t *c);
/* Writes one configuration as a matrix line (what --list prints). */
void es_vcfg_format(const es_vcfg_t *c, es_ctl_buf_t *b);

/* gpus=LIST as CUDA_VISIBLE_DEVICES: the UUIDs of the listed GPUs of g, in
 * list order ("GPU-...,GPU-..."). Returns 0, or -EINVAL (syntax, a GPU
 * listed twice) / -ENOENT (no such GPU) with err. */
int es_verify_gpus_visible(const char *list, const es_ctl_gpu_t *g, int ng, char *out,
                           size_t len, char *err, size_t errlen);

/* Parameters of the built-in matrix. */
typedef struct es_vmatrix_opts {
    int nests;          /* ESTs of the job */
    long job_steps;     /* the job's length in the controller's steps
                         * (all-reduce calls); <= 0: unknown, so no
                         * configuration with scheduled events */
    int reduced;        /* the CI subset */
} es_vmatrix_opts_t;

/* The built-in matrix for these GPUs, as matrix text appended to out:
 * on the model with the most GPUs (K = min(N, its count)): N ESTs on K,
 * K/2 and 1 GPUs, the same K in reverse order, scale events, time-slicing
 * with room for one EST, migrations every few steps (d1); with a second
 * model, d2 on each model and on a mix; controls: when K >= N the shim not
 * loaded and NCCL's own collectives (EASYSCALE_COLLECTIVES=nccl) on the K
 * GPUs, and, when fewer GPUs than ESTs are used, the elastic job without
 * EasyScale (as many ESTs as GPUs, shim not loaded: what elastic training
 * does when GPUs go).
 * Returns 0 or -ENOENT (no GPU). */
int es_vmatrix_builtin(const es_ctl_gpu_t *g, int ngpus, const es_vmatrix_opts_t *o,
                       es_ctl_buf_t *out);

/* The checksum of a run's output: every match of re (its first
 * parenthesised group when it has one, else the whole match), line by
 * line. Sets sum (the first, truncated to sumlen - 1), *nmatch and
 * *ndistinct (different values seen: more than 1 means the ranks
 * disagree). Returns 0, or -ENOENT when nothing matched. */
int es_verify_checksum(const char *text, size_t len, const regex_t *re, char *sum,
                       size_t sumlen, int *nmatch, int *ndistinct);

/* What happened to one configuration, and the judgement of it. */
enum {
    ES_VRUN_NOT_RUN = 0,  /* not run (skipped: why says) */
    ES_VRUN_OK,           /* ran, exit 0, one checksum */
    ES_VRUN_FAILED,       /* ran, failed or no checksum (why says) */
};
typedef struct es_vresult {
    int state;                  /* ES_VRUN_* */
    int exit_status;            /* the run's (or -signal) */
    char sum[ES_VSUM_MAX];
    int nmatch, ndistinct;
    double seconds;
    char why[512];              /* skip or failure reason */
    /* set by es_verify_judge */
    int reference;              /* this is its level's reference */
    int good;                   /* judged as expected */
    char verdict[48];
    char explain[512];          /* a mismatch's first divergent collective, when known */
} es_vresult_t;

/* Judges every result against its level's reference: sets reference,
 * good and verdict of each ("reference", "match", "MISMATCH", "differs
 * (expected)", "SAME AS REFERENCE", "FAILED", "skipped: ..."). Returns 1
 * when the matrix passes: no check failed or mismatched, every level with
 * checks has a reference, at least one control ran and every control that
 * ran differs from its reference (a control that failed to run fails the
 * matrix). Skipped configurations do not count either way. */
int es_verify_judge(const es_vmatrix_t *m, es_vresult_t *r, char *summary, size_t len);

int es_ctl_verify_main(int argc, char **argv);

#endif
