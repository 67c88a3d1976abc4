/* The collective digests' reader and first-divergence finder
 * (controller/digest.h), and `easyscale-ctl diff RUN_A RUN_B`. */
#include "controller/digest.h"
#include "controller/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *es_digest_op_name(uint32_t op)
{
    switch (op) {
    case ES_DIGEST_ALLREDUCE: return "allreduce";
    case ES_DIGEST_BROADCAST: return "broadcast";
    case ES_DIGEST_REDUCE: return "reduce";
    case ES_DIGEST_ALLGATHER: return "allgather";
    case ES_DIGEST_REDUCESCATTER: return "reducescatter";
    case ES_DIGEST_SEND: return "send";
    case ES_DIGEST_RECV: return "recv";
    default: return "collective?";
    }
}

const char *es_digest_redop_name(uint32_t r)
{
    static const char *const n[] = { "sum", "prod", "max", "min", "avg" };
    return r < 5 ? n[r] : "custom-op";
}

const char *es_digest_dtype_name(uint32_t t)
{
    static const char *const n[] = { "int8",    "uint8",   "int32",    "uint32",
                                     "int64",   "uint64",  "float16",  "float32",
                                     "float64", "bfloat16", "fp8e4m3", "fp8e5m2" };
    return t < 12 ? n[t] : "type?";
}

unsigned es_digest_dtype_size(uint32_t t)
{
    static const unsigned s[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return t < 12 ? s[t] : 0;
}

/* ---- reading ----------------------------------------------------------------------- */

static int cmp_rec(const void *x, const void *y)
{
    const es_digest_rec_t *a = x, *b = y;
    return a->call < b->call ? -1 : a->call > b->call;
}

static int cmp_est(const void *x, const void *y)
{
    const es_digest_est_t *a = x, *b = y;
    return a->hdr.rank < b->hdr.rank ? -1 : a->hdr.rank > b->hdr.rank;
}

static int load_one(const char *path, es_digest_est_t *e, char *err, size_t errlen)
{
    int rc = -EINVAL;
    FILE *f = fopen(path, "rb");
    memset(e, 0, sizeof(*e));
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -errno;
    }
    if (fread(&e->hdr, sizeof(e->hdr), 1, f) != 1 || e->hdr.magic != ES_DIGEST_MAGIC) {
        snprintf(err, errlen, "%s is not a digest file (no ESDG header)", path);
        goto out;
    }
    if (e->hdr.version != ES_DIGEST_VERSION || e->hdr.hdr_size != sizeof(es_digest_hdr_t) ||
        e->hdr.rec_size != sizeof(es_digest_rec_t)) {
        snprintf(err, errlen, "%s: digest version %u (header %u, record %u bytes); this reader "
                 "takes version %u", path, e->hdr.version, e->hdr.hdr_size, e->hdr.rec_size,
                 ES_DIGEST_VERSION);
        goto out;
    }
    e->hdr.slot[sizeof(e->hdr.slot) - 1] = '\0';
    size_t cap = 0;
    for (;;) {
        if (e->n == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            es_digest_rec_t *nr = realloc(e->rec, nc * sizeof(*nr));
            if (!nr) {
                snprintf(err, errlen, "out of memory");
                rc = -ENOMEM;
                goto out;
            }
            e->rec = nr;
            cap = nc;
        }
        size_t got = fread(&e->rec[e->n], 1, sizeof(es_digest_rec_t), f);
        if (got == sizeof(es_digest_rec_t)) {
            e->n++;
            continue;
        }
        e->torn = got != 0;
        break;
    }
    if (e->n > 1) /* (rec may be NULL when empty) */
        qsort(e->rec, e->n, sizeof(*e->rec), cmp_rec);
    rc = 0;
out:
    fclose(f);
    if (rc < 0) {
        free(e->rec);
        e->rec = NULL;
        e->n = 0;
    }
    return rc;
}

void es_digest_run_free(es_digest_run_t *run)
{
    for (int i = 0; i < run->n; i++)
        free(run->est[i].rec);
    free(run->est);
    run->est = NULL;
    run->n = 0;
}

int es_digest_load(const char *dir, es_digest_run_t *run, char *err, size_t errlen)
{
    int rc = 0, cap = 0;
    memset(run, 0, sizeof(*run));
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot open the digest directory %s: %s", dir, strerror(errno));
        return -ENOENT;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "rank-", 5) != 0 || l < 9 || strcmp(de->d_name + l - 4, ".esd"))
            continue;
        if (run->n == cap) {
            int nc = cap ? cap * 2 : 16;
            es_digest_est_t *ne = realloc(run->est, (size_t)nc * sizeof(*ne));
            if (!ne) {
                snprintf(err, errlen, "out of memory");
                rc = -ENOMEM;
                break;
            }
            run->est = ne;
            cap = nc;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        rc = load_one(path, &run->est[run->n], err, errlen);
        if (rc < 0)
            break;
        run->n++;
    }
    closedir(d);
    if (rc == 0 && run->n == 0) {
        snprintf(err, errlen, "no digest (rank-*.esd) in %s: was the job run with "
                 "EASYSCALE_DIGEST=%s and libeasyscale.so?", dir, dir);
        rc = -ENOENT;
    }
    if (rc == 0) {
        qsort(run->est, (size_t)run->n, sizeof(*run->est), cmp_est);
        for (int i = 1; i < run->n; i++)
            if (run->est[i].hdr.rank == run->est[i - 1].hdr.rank) {
                snprintf(err, errlen, "%s holds two digests of rank %u (two runs in one "
                         "directory?)", dir, run->est[i].hdr.rank);
                rc = -EINVAL;
                break;
            }
    }
    if (rc < 0)
        es_digest_run_free(run);
    return rc;
}

/* ---- comparing ------------------------------------------------------------------------ */

static int same_call(const es_digest_rec_t *a, const es_digest_rec_t *b)
{
    return a->op == b->op && a->redop == b->redop && a->dtype == b->dtype &&
           a->count == b->count && a->rank == b->rank && a->nranks == b->nranks;
}

int es_digest_compare(const es_digest_run_t *a, const es_digest_run_t *b, es_digest_diff_t *d)
{
    memset(d, 0, sizeof(*d));
    d->nranks = a->n;
    if (a->n != b->n) {
        d->kind = ES_DIGEST_DIFF_RANKS;
        d->na = (size_t)a->n;
        d->nb = (size_t)b->n;
        return 0;
    }
    for (int i = 0; i < a->n; i++)
        if (a->est[i].hdr.rank != b->est[i].hdr.rank) {
            d->kind = ES_DIGEST_DIFF_RANKS;
            d->rank = a->est[i].hdr.rank;
            d->na = (size_t)a->n;
            d->nb = (size_t)b->n;
            return 0;
        }
    /* walk the calls in order; at each index, the ranks in order */
    size_t most = 0;
    for (int i = 0; i < a->n; i++) {
        size_t m = a->est[i].n > b->est[i].n ? a->est[i].n : b->est[i].n;
        most = m > most ? m : most;
    }
    /* At each call: a rank that made another call or stopped first, then a
     * rank whose input differs (the cause), then one whose output differs
     * (an all-reduce's output differs on every rank when one input does). */
    for (size_t k = 0; k < most; k++) {
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < a->n; i++) {
                const es_digest_est_t *ea = &a->est[i], *eb = &b->est[i];
                if (k >= ea->n || k >= eb->n) {
                    if (pass != 0 || ea->n == eb->n)
                        continue;
                    d->kind = ES_DIGEST_DIFF_LENGTH;
                    d->rank = ea->hdr.rank;
                    d->na = ea->n;
                    d->nb = eb->n;
                    d->call = k;
                    if (k < ea->n)
                        d->a = ea->rec[k];
                    if (k < eb->n)
                        d->b = eb->rec[k];
                    d->step = k < ea->n ? ea->rec[k].step : eb->rec[k].step;
                    return 0;
                }
                const es_digest_rec_t *ra = &ea->rec[k], *rb = &eb->rec[k];
                int kind = 0;
                if (pass == 0 && (!same_call(ra, rb) || ra->call != rb->call))
                    kind = ES_DIGEST_DIFF_CALL;
                else if (pass == 1 && ra->in_hash != rb->in_hash)
                    kind = ES_DIGEST_DIFF_INPUT;
                else if (pass == 2 && ra->out_hash != rb->out_hash)
                    kind = ES_DIGEST_DIFF_OUTPUT;
                if (kind) {
                    d->kind = kind;
                    d->rank = ea->hdr.rank;
                    d->call = ra->call;
                    d->step = ra->step;
                    d->a = *ra;
                    d->b = *rb;
                    return 0;
                }
            }
        }
        for (int i = 0; i < a->n; i++)
            d->ncalls += k < a->est[i].n && k < b->est[i].n;
    }
    d->agree = 1;
    return 0;
}

static void call_text(const es_digest_rec_t *r, char *out, size_t len)
{
    unsigned es = es_digest_dtype_size(r->dtype);
    int reduces = r->op == ES_DIGEST_ALLREDUCE || r->op == ES_DIGEST_REDUCE ||
                  r->op == ES_DIGEST_REDUCESCATTER;
    snprintf(out, len, "%s%s%s %s x %llu (%llu bytes; comm %u, rank %u of %u)",
             es_digest_op_name(r->op), reduces ? " " : "", reduces ? es_digest_redop_name(r->redop) : "",
             es_digest_dtype_name(r->dtype), (unsigned long long)r->count,
             (unsigned long long)r->count * es, r->comm, r->rank, r->nranks);
}

void es_digest_describe(const es_digest_diff_t *d, char *out, size_t len)
{
    char ca[256], cb[256];
    if (d->agree) {
        snprintf(out, len, "the runs agree: %zu collective calls on %d rank%s, every input and "
                 "output identical", d->ncalls, d->nranks, d->nranks == 1 ? "" : "s");
        return;
    }
    switch (d->kind) {
    case ES_DIGEST_DIFF_RANKS:
        snprintf(out, len, "the runs have other ranks (%zu digest files vs %zu): not the same job",
                 d->na, d->nb);
        return;
    case ES_DIGEST_DIFF_LENGTH:
        snprintf(out, len, "first divergence: rank %u made %zu collective calls in run A, %zu in "
                 "run B (the first missing is call %llu, step %llu)", d->rank, d->na, d->nb,
                 (unsigned long long)d->call, (unsigned long long)d->step);
        return;
    case ES_DIGEST_DIFF_CALL:
        call_text(&d->a, ca, sizeof(ca));
        call_text(&d->b, cb, sizeof(cb));
        snprintf(out, len, "first divergence: call %llu (step %llu), rank %u: run A made %s, "
                 "run B %s", (unsigned long long)d->call, (unsigned long long)d->step, d->rank,
                 ca, cb);
        return;
    case ES_DIGEST_DIFF_INPUT:
        call_text(&d->a, ca, sizeof(ca));
        snprintf(out, len, "first divergence: call %llu (step %llu), rank %u, %s: its input "
                 "differs (%016llx vs %016llx): computed differently before this collective "
                 "(a kernel or library call since the previous one)",
                 (unsigned long long)d->call, (unsigned long long)d->step, d->rank, ca,
                 (unsigned long long)d->a.in_hash, (unsigned long long)d->b.in_hash);
        return;
    case ES_DIGEST_DIFF_OUTPUT:
        call_text(&d->a, ca, sizeof(ca));
        snprintf(out, len, "first divergence: call %llu (step %llu), rank %u, %s: same input, "
                 "other output (%016llx vs %016llx): the collective itself reduced differently",
                 (unsigned long long)d->call, (unsigned long long)d->step, d->rank, ca,
                 (unsigned long long)d->a.out_hash, (unsigned long long)d->b.out_hash);
        return;
    }
    snprintf(out, len, "the runs differ");
}

int es_digest_explain(const char *dir_a, const char *dir_b, char *out, size_t len)
{
    es_digest_run_t a, b;
    es_digest_diff_t d;
    char err[512];
    int rc = es_digest_load(dir_a, &a, err, sizeof(err));
    if (rc < 0) {
        snprintf(out, len, "no digest to compare: %s", err);
        return rc;
    }
    rc = es_digest_load(dir_b, &b, err, sizeof(err));
    if (rc < 0) {
        es_digest_run_free(&a);
        snprintf(out, len, "no digest to compare: %s", err);
        return rc;
    }
    es_digest_compare(&a, &b, &d);
    es_digest_describe(&d, out, len);
    es_digest_run_free(&a);
    es_digest_run_free(&b);
    return d.agree ? 0 : 1;
}

/* ---- easyscale-ctl diff ---------------------------------------------------------------- */

static const char *const diff_usage =
    "usage: easyscale-ctl diff RUN_A RUN_B\n"
    "Compares the collective digests of two runs (directories a job wrote with\n"
    "EASYSCALE_DIGEST=DIR, one rank-R.esd per EST) and names the first collective\n"
    "whose digests differ (call, step, rank, operation, type and size, and whether\n"
    "its input already differed or only its output), or says the runs agree.\n"
    "Exit status: 0 the runs agree, 1 they differ, 2 usage or unreadable digests.\n";

int es_ctl_diff_main(int argc, char **argv)
{
    const char *pa = NULL, *pb = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(diff_usage, stdout);
            return ES_CTL_EXIT_OK;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            es_ctl_err("unknown option \"%s\"", argv[i]);
            fputs(diff_usage, stderr);
            return ES_CTL_EXIT_USAGE;
        }
        if (!pa)
            pa = argv[i];
        else if (!pb)
            pb = argv[i];
        else {
            es_ctl_err("diff takes two runs");
            fputs(diff_usage, stderr);
            return ES_CTL_EXIT_USAGE;
        }
    }
    if (!pb) {
        es_ctl_err("diff takes two runs");
        fputs(diff_usage, stderr);
        return ES_CTL_EXIT_USAGE;
    }
    char text[1024];
    int r = es_digest_explain(pa, pb, text, sizeof(text));
    if (r < 0) {
        es_ctl_err("%s", text);
        return ES_CTL_EXIT_USAGE;
    }
    printf("%s\n", text);
    return r ? ES_CTL_EXIT_FAIL : ES_CTL_EXIT_OK;
}
