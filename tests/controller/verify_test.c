/* Tests of the checksum harness (easyscale-ctl verify, controller/verify.h)
 * and of the first-divergence finder's reader (easyscale-ctl diff,
 * controller/digest.h):
 *  - the matrix text: every key and flag, quotes, comments; each kind of
 *    bad line refused with its line number; a configuration formatted and
 *    parsed again is the same;
 *  - the built-in matrix for several machines (4+2 GPUs of two models, one
 *    GPU, no known length, the reduced form);
 *  - gpus= lists as CUDA_VISIBLE_DEVICES (order kept, ranges, UUIDs, bad
 *    and repeated GPUs refused);
 *  - checksums from output (ranks agreeing and not, the pattern's group);
 *  - the judgement: a passing matrix, and each way it must fail (a
 *    mismatch, a failed check, a control equal to its reference, no
 *    control run, a control that failed, ranks disagreeing);
 *  - digests: identical runs agree; a changed output, input, call, or a
 *    shorter run is found at the right call and rank; other formats
 *    refused; a torn last record dropped;
 *  - whole processes: `easyscale-ctl verify` on a stand-in command whose
 *    checksum the matrix sets (passes; fails on a mismatch and when the
 *    control does not differ; --json; --list; usage errors), `easyscale-ctl
 *    diff` on digest directories, and verify on the real trainer with 4
 *    ESTs: repeated runs agree and the shim-off control differs, while the
 *    trainer's float-atomic kernel makes the repeat differ (verify fails).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/digest.h"
#include "controller/verify.h"
#include "tests/harness.h"

static char g_tmp[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/es-verify-test.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the matrix text --------------------------------------------------------------- */

static void test_parse_keys(void **state)
{
    (void)state;
    static const char text[] =
        "# a comment\n"
        "\n"
        "check a level=d2 gpus=0,1 env=X=1 env=Y=\"two words\" schedule=\"step 3 scale 0; step 6 "
        "scale all\" est-memory=2G no-time-slicing moves desc=\"first one\"\n"
        "   control b-2.x+ shim-none ests=2\n"
        "control c shim-off\n";
    es_vmatrix_t *m = calloc(1, sizeof(*m));
    char err[256] = "";
    assert_non_null(m);
    assert_int_equal(es_vmatrix_parse(text, "t", m, err, sizeof(err)), 0);
    assert_int_equal(m->n, 3);
    es_vcfg_t *a = &m->c[0], *b = &m->c[1];
    assert_true(m->c[2].shim_off && !m->c[2].shim_none);
    assert_int_equal(a->ests, 0);
    assert_int_equal(b->ests, 2);
    assert_string_equal(a->name, "a");
    assert_int_equal(a->role, ES_VCFG_CHECK);
    assert_int_equal(a->level, 2);
    assert_string_equal(a->gpus, "0,1");
    assert_int_equal(a->nenv, 2);
    assert_string_equal(a->env[0], "X=1");
    assert_string_equal(a->env[1], "Y=two words");
    assert_string_equal(a->schedule, "step 3 scale 0; step 6 scale all");
    assert_string_equal(a->est_mem, "2G");
    assert_string_equal(a->desc, "first one");
    assert_true(a->no_tslice && a->moves && !a->shim_none);
    assert_string_equal(b->name, "b-2.x+");
    assert_int_equal(b->role, ES_VCFG_CONTROL);
    assert_int_equal(b->level, 1);
    assert_null(b->gpus);
    assert_true(b->shim_none && !b->moves);

    /* formatted and parsed again: the same */
    es_ctl_buf_t t = { 0 };
    es_vcfg_format(a, &t);
    es_vcfg_format(b, &t);
    es_vmatrix_t *m2 = calloc(1, sizeof(*m2));
    assert_non_null(m2);
    assert_int_equal(es_vmatrix_parse(t.p, "again", m2, err, sizeof(err)), 0);
    assert_int_equal(m2->n, 2);
    assert_string_equal(m2->c[0].env[1], "Y=two words");
    assert_string_equal(m2->c[0].schedule, a->schedule);
    assert_string_equal(m2->c[0].desc, a->desc);
    assert_int_equal(m2->c[0].level, 2);
    assert_true(m2->c[1].shim_none);
    assert_int_equal(m2->c[1].ests, 2);
    es_ctl_buf_free(&t);
    es_vmatrix_free(m2);
    es_vmatrix_free(m);
    free(m2);
    free(m);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } bad[] = {
        { "check a\nbogus b\n", "t:2: \"bogus\" is neither check nor control" },
        { "check\n", "t:1: a configuration needs a NAME" },
        { "check a/b\n", "t:1: a configuration needs a NAME" },
        { "check a level=d3\n", "t:1: level=d3: d1 or d2" },
        { "check a colour=red\n", "t:1: unknown key \"colour\"" },
        { "check a fast\n", "t:1: unknown flag \"fast\"" },
        { "check a env=1X=2\n", "t:1: env=1X=2: VAR=VALUE" },
        { "check a env=X\n", "t:1: env=X: VAR=VALUE" },
        { "check a est-memory=lots\n", "t:1: est-memory=lots: a size" },
        { "check a desc=\"open\n", "t:1: unterminated quote" },
        { "check a gpus=\n", "t:1: gpus= needs a value" },
        { "check a ests=0\n", "t:1: ests=0: 1 to" },
        { "control a shim-none shim-off\n", "t:1: shim-none and shim-off" },
        { "check a\ncontrol a\n", "t:2: a second configuration named a" },
        { "# nothing\n\n", "t: no configuration" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        es_vmatrix_t *m = calloc(1, sizeof(*m));
        char err[256] = "";
        assert_non_null(m);
        assert_int_equal(es_vmatrix_parse(bad[i].text, "t", m, err, sizeof(err)), -EINVAL);
        if (strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
            fail_msg("case %zu: \"%s\" does not start with \"%s\"", i, err, bad[i].want);
        assert_int_equal(m->n, 0);
        free(m);
    }
}

/* ---- the built-in matrix ------------------------------------------------------------- */

static void gpu(es_ctl_gpu_t *g, int i, const char *model, unsigned long long mem)
{
    memset(g, 0, sizeof(*g));
    g->ordinal = i;
    snprintf(g->uuid, sizeof(g->uuid), "GPU-%08d-0000-0000-0000-000000000000", i);
    snprintf(g->model, sizeof(g->model), "%s", model);
    snprintf(g->name, sizeof(g->name), "sim %s", model);
    g->mem = mem;
}

static void names_of(const es_vmatrix_t *m, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < m->n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? " " : "", m->c[i].name);
}

static void builtin(const es_ctl_gpu_t *g, int n, int nests, long steps, int reduced,
                    es_vmatrix_t *m)
{
    es_ctl_buf_t b = { 0 };
    es_vmatrix_opts_t o = { .nests = nests, .job_steps = steps, .reduced = reduced };
    char err[256] = "";
    assert_int_equal(es_vmatrix_builtin(g, n, &o, &b), 0);
    if (es_vmatrix_parse(b.p, "built-in", m, err, sizeof(err)) != 0)
        fail_msg("the built-in matrix does not parse: %s\n%s", err, b.p);
    es_ctl_buf_free(&b);
}

static const es_vcfg_t *find(const es_vmatrix_t *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->c[i].name, name) == 0)
            return &m->c[i];
    fail_msg("no configuration %s", name);
    return NULL;
}

static void test_builtin(void **state)
{
    (void)state;
    es_ctl_gpu_t g[6];
    for (int i = 0; i < 4; i++)
        gpu(&g[i], i, "a100", 8ull << 30);
    gpu(&g[4], 4, "t4", 16ull << 30);
    gpu(&g[5], 5, "t4", 16ull << 30);
    es_vmatrix_t *m = calloc(1, sizeof(*m));
    char names[1024];
    assert_non_null(m);

    builtin(g, 6, 4, 600, 0, m);
    names_of(m, names, sizeof(names));
    assert_string_equal(names, "d1-4on4 d1-4on2 d1-4on1 d1-order d1-scale d1-swap d1-migrate "
                               "d1-tslice d2-a100 d2-t4 d2-mix-t4 off nccl elastic");
    assert_string_equal(find(m, "d1-4on4")->gpus, "0,1,2,3");
    assert_string_equal(find(m, "d1-4on2")->gpus, "0,1");
    assert_string_equal(find(m, "d1-4on1")->gpus, "0");
    assert_string_equal(find(m, "d1-order")->gpus, "3,2,1,0");
    const es_vcfg_t *c = find(m, "d1-scale");
    assert_true(c->moves);
    assert_string_equal(c->schedule, "step 100 scale 0-1; step 200 scale 0; step 300 scale all");
    assert_string_equal(find(m, "d1-swap")->schedule, "step 200 swap-out 3; step 200 swap-in 3 0");
    assert_string_equal(find(m, "d1-migrate")->schedule,
                        "step 100 migrate 0 1; step 200 migrate 1 0; step 300 migrate 2 1");
    c = find(m, "d1-tslice");
    assert_string_equal(c->gpus, "0");
    assert_string_equal(c->est_mem, "8388608K"); /* one EST fills the GPU */
    assert_int_equal(c->nenv, 1); /* the shim's rotation: one resident at a time */
    assert_string_equal(c->env[0], "EASYSCALE_TIME_SLICE=on");
    c = find(m, "d2-mix-t4");
    assert_int_equal(c->level, 2);
    assert_string_equal(c->gpus, "0,1,4,5");
    assert_string_equal(c->env[0], "EASYSCALE_CANONICAL_DEVICE=a100,t4");
    assert_string_equal(find(m, "d2-t4")->env[0], "EASYSCALE_CANONICAL_DEVICE=a100,t4");
    c = find(m, "off");
    assert_int_equal(c->role, ES_VCFG_CONTROL);
    assert_true(c->shim_none);
    c = find(m, "nccl");
    assert_string_equal(c->env[0], "EASYSCALE_COLLECTIVES=nccl");
    es_vmatrix_free(m);

    /* the reduced form */
    builtin(g, 6, 4, 600, 1, m);
    names_of(m, names, sizeof(names));
    assert_string_equal(names, "d1-4on4 d1-4on1 d1-order d1-scale d1-migrate d1-tslice d2-a100 "
                               "d2-mix-t4 off nccl elastic");
    es_vmatrix_free(m);

    /* no known length: no scheduled events */
    builtin(g, 6, 4, 0, 0, m);
    names_of(m, names, sizeof(names));
    assert_string_equal(names, "d1-4on4 d1-4on2 d1-4on1 d1-order d1-tslice d2-a100 d2-t4 "
                               "d2-mix-t4 off nccl elastic");
    es_vmatrix_free(m);

    /* one GPU: 4 ESTs on it, swapped, time-sliced; NCCL cannot take 4 ranks on
     * 1: the control is the job shrunk to one worker */
    builtin(g, 1, 4, 600, 0, m);
    names_of(m, names, sizeof(names));
    assert_string_equal(names, "d1-4on1 d1-swap d1-tslice elastic");
    c = find(m, "elastic");
    assert_int_equal(c->ests, 1);
    assert_true(c->shim_none);
    assert_string_equal(c->gpus, "0");
    es_vmatrix_free(m);

    /* 8 ESTs on 4 GPUs of one model */
    builtin(g, 4, 8, 600, 0, m);
    names_of(m, names, sizeof(names));
    assert_string_equal(names, "d1-8on4 d1-8on2 d1-8on1 d1-order d1-scale d1-swap d1-migrate "
                               "d1-tslice elastic");
    es_vmatrix_free(m);
    es_ctl_buf_t b = { 0 };
    es_vmatrix_opts_t o = { .nests = 4 };
    assert_int_equal(es_vmatrix_builtin(g, 0, &o, &b), -ENOENT);
    free(m);
}

static void test_gpus_visible(void **state)
{
    (void)state;
    es_ctl_gpu_t g[4];
    for (int i = 0; i < 4; i++)
        gpu(&g[i], i, "a100", 8ull << 30);
    char out[512], err[256];
    assert_int_equal(es_verify_gpus_visible("2,0", g, 4, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "GPU-00000002-0000-0000-0000-000000000000,"
                             "GPU-00000000-0000-0000-0000-000000000000");
    assert_int_equal(es_verify_gpus_visible("1-2,GPU-00000000-0000-0000-0000-000000000000", g, 4,
                                            out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "GPU-00000001-0000-0000-0000-000000000000,"
                             "GPU-00000002-0000-0000-0000-000000000000,"
                             "GPU-00000000-0000-0000-0000-000000000000");
    assert_int_equal(es_verify_gpus_visible("4", g, 4, out, sizeof(out), err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "no such GPU \"4\""));
    assert_int_equal(es_verify_gpus_visible("0,1,0", g, 4, out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "listed twice"));
    assert_int_equal(es_verify_gpus_visible("3-1", g, 4, out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(es_verify_gpus_visible("x", g, 4, out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
}

/* ---- checksums and the judgement ---------------------------------------------------- */

static void test_checksum(void **state)
{
    (void)state;
    regex_t re, whole;
    assert_int_equal(regcomp(&re, "checksum ([0-9a-f]+)", REG_EXTENDED), 0);
    assert_int_equal(regcomp(&whole, "[0-9a-f]{8}$", REG_EXTENDED), 0);
    const char *four = "[0] step 1\n[2] checksum abc123\n[0] checksum abc123\nnoise\n"
                       "[1] checksum abc123\n[3] checksum abc123";
    char sum[ES_VSUM_MAX];
    int n, d;
    assert_int_equal(es_verify_checksum(four, strlen(four), &re, sum, sizeof(sum), &n, &d), 0);
    assert_string_equal(sum, "abc123");
    assert_int_equal(n, 4);
    assert_int_equal(d, 1);
    const char *split = "checksum aa\nchecksum bb\nchecksum aa\nchecksum cc\n";
    assert_int_equal(es_verify_checksum(split, strlen(split), &re, sum, sizeof(sum), &n, &d), 0);
    assert_string_equal(sum, "aa");
    assert_int_equal(n, 4);
    assert_int_equal(d, 3);
    const char *none = "no sum here\n";
    assert_int_equal(es_verify_checksum(none, strlen(none), &re, sum, sizeof(sum), &n, &d),
                     -ENOENT);
    assert_int_equal(n, 0);
    const char *tail = "weights 0123abcd\n";
    assert_int_equal(es_verify_checksum(tail, strlen(tail), &whole, sum, sizeof(sum), &n, &d), 0);
    assert_string_equal(sum, "0123abcd");
    regfree(&re);
    regfree(&whole);
}

/* A matrix of two levels with results set by the test. */
static void judge_matrix(es_vmatrix_t *m)
{
    static const char text[] = "check a\ncheck b\ncheck c level=d2\ncheck d level=d2\n"
                               "check e moves\ncontrol off shim-none\ncontrol nccl\n";
    char err[256];
    assert_int_equal(es_vmatrix_parse(text, "j", m, err, sizeof(err)), 0);
}

static void ok(es_vresult_t *r, const char *sum)
{
    memset(r, 0, sizeof(*r));
    r->state = ES_VRUN_OK;
    snprintf(r->sum, sizeof(r->sum), "%s", sum);
    r->nmatch = 4;
    r->ndistinct = 1;
}

static void good_results(es_vresult_t *r)
{
    ok(&r[0], "11");
    ok(&r[1], "11");
    ok(&r[2], "22");
    ok(&r[3], "22");
    memset(&r[4], 0, sizeof(r[4]));
    r[4].state = ES_VRUN_NOT_RUN;
    snprintf(r[4].why, sizeof(r[4].why), "moves not available");
    ok(&r[5], "33");
    ok(&r[6], "44");
}

static void test_judge(void **state)
{
    (void)state;
    es_vmatrix_t *m = calloc(1, sizeof(*m));
    es_vresult_t r[7];
    char s[512];
    assert_non_null(m);
    judge_matrix(m);

    good_results(r);
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 1);
    assert_string_equal(r[0].verdict, "reference");
    assert_true(r[0].reference);
    assert_string_equal(r[1].verdict, "match");
    assert_string_equal(r[2].verdict, "reference");
    assert_string_equal(r[3].verdict, "match");
    assert_string_equal(r[4].verdict, "skipped");
    assert_string_equal(r[5].verdict, "differs (expected)");
    assert_string_equal(r[6].verdict, "differs (expected)");
    assert_non_null(strstr(s, "d1: 2 of 2 checks give 11"));
    assert_non_null(strstr(s, "d2: 2 of 2 checks give 22"));
    assert_non_null(strstr(s, "controls: 2 of 2 differ"));
    assert_non_null(strstr(s, "PASS"));

    /* a mismatch */
    good_results(r);
    snprintf(r[3].sum, sizeof(r[3].sum), "23");
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_string_equal(r[3].verdict, "MISMATCH");
    assert_non_null(strstr(s, "FAIL"));

    /* a check that failed to run */
    good_results(r);
    r[1].state = ES_VRUN_FAILED;
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_string_equal(r[1].verdict, "FAILED");

    /* a control that does not differ */
    good_results(r);
    snprintf(r[6].sum, sizeof(r[6].sum), "11");
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_string_equal(r[6].verdict, "SAME AS REFERENCE");

    /* a control that failed to run */
    good_results(r);
    r[5].state = ES_VRUN_FAILED;
    r[5].sum[0] = '\0';
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);

    /* no control ran at all */
    good_results(r);
    r[5].state = r[6].state = ES_VRUN_NOT_RUN;
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_non_null(strstr(s, "none ran"));

    /* ranks that disagree within one run */
    good_results(r);
    r[1].ndistinct = 2;
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_string_equal(r[1].verdict, "RANKS DISAGREE");

    /* the first check failed: the next one is the reference */
    good_results(r);
    r[0].state = ES_VRUN_FAILED;
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_true(r[1].reference);
    assert_string_equal(r[1].verdict, "reference");

    /* every check of a level failed: no reference */
    good_results(r);
    r[2].state = r[3].state = ES_VRUN_FAILED;
    assert_int_equal(es_verify_judge(m, r, s, sizeof(s)), 0);
    assert_non_null(strstr(s, "d2: no check gave a checksum"));
    es_vmatrix_free(m);
    free(m);
}

/* ---- digests ---------------------------------------------------------------------- */

static void rec(es_digest_rec_t *r, uint64_t call, uint64_t in, uint64_t out)
{
    memset(r, 0, sizeof(*r));
    r->call = call;
    r->step = call / 3;
    r->op = ES_DIGEST_ALLREDUCE;
    r->redop = 0;
    r->dtype = 7;
    r->count = 4096;
    r->nranks = 4;
    r->in_hash = in;
    r->out_hash = out;
}

/* DIR/rank-R.esd for ranks 0..3 with n records each; tweak changes one. */
static void write_run(const char *dir, int n, int tweak_rank, int tweak_call, int what,
                      int reverse)
{
    mkdir(dir, 0700);
    for (int rk = 0; rk < 4; rk++) {
        char p[512];
        snprintf(p, sizeof(p), "%s/rank-%05d.esd", dir, rk);
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        es_digest_hdr_t h = { .magic = ES_DIGEST_MAGIC, .version = ES_DIGEST_VERSION,
                              .hdr_size = sizeof(es_digest_hdr_t),
                              .rec_size = sizeof(es_digest_rec_t), .rank = (uint32_t)rk,
                              .world = 4, .level = 1 };
        assert_int_equal(fwrite(&h, sizeof(h), 1, f), 1);
        int cnt = what == 4 && rk == tweak_rank ? tweak_call : n;
        for (int k0 = 0; k0 < cnt; k0++) {
            int k = reverse ? cnt - 1 - k0 : k0;
            es_digest_rec_t r;
            /* inputs differ per rank, outputs agree (an all-reduce) */
            rec(&r, (uint64_t)k, 1000u * (uint64_t)k + (uint64_t)rk, 7000u + (uint64_t)k);
            r.rank = (uint32_t)rk;
            if (what == 5 && k == tweak_call) {
                /* one rank's input, so every rank's all-reduced output */
                r.out_hash ^= 1;
                if (rk == tweak_rank)
                    r.in_hash ^= 1;
            }
            if (rk == tweak_rank && k == tweak_call) {
                if (what == 1)
                    r.out_hash ^= 1;
                else if (what == 2)
                    r.in_hash ^= 1;
                else if (what == 3)
                    r.count = 100;
            }
            assert_int_equal(fwrite(&r, sizeof(r), 1, f), 1);
        }
        fclose(f);
    }
}

static void test_digest_compare(void **state)
{
    (void)state;
    char a[400], b[400], text[1024];
    snprintf(a, sizeof(a), "%s/a", g_tmp);
    write_run(a, 12, -1, -1, 0, 0);

    snprintf(b, sizeof(b), "%s/same", g_tmp);
    write_run(b, 12, -1, -1, 0, 1); /* written in reverse call order: sorted on reading */
    assert_int_equal(es_digest_explain(a, b, text, sizeof(text)), 0);
    assert_non_null(strstr(text, "the runs agree: 48 collective calls on 4 ranks"));

    snprintf(b, sizeof(b), "%s/out", g_tmp);
    write_run(b, 12, 2, 7, 1, 0);
    assert_int_equal(es_digest_explain(a, b, text, sizeof(text)), 1);
    assert_non_null(strstr(text, "first divergence: call 7 (step 2), rank 2, allreduce sum "
                                 "float32 x 4096 (16384 bytes"));
    assert_non_null(strstr(text, "same input, other output"));

    /* two divergences: the earlier call wins, then the lower rank */
    es_digest_run_t ra, rb;
    es_digest_diff_t d;
    char err[256];
    snprintf(b, sizeof(b), "%s/in", g_tmp);
    write_run(b, 12, 3, 4, 2, 0);
    assert_int_equal(es_digest_load(a, &ra, err, sizeof(err)), 0);
    assert_int_equal(es_digest_load(b, &rb, err, sizeof(err)), 0);
    assert_int_equal(ra.n, 4);
    es_digest_compare(&ra, &rb, &d);
    assert_false(d.agree);
    assert_int_equal(d.kind, ES_DIGEST_DIFF_INPUT);
    assert_int_equal(d.call, 4);
    assert_int_equal(d.rank, 3);
    es_digest_describe(&d, text, sizeof(text));
    assert_non_null(strstr(text, "its input differs"));
    es_digest_run_free(&rb);

    /* an input that differs on rank 2 changes every rank's output: the
     * finder names the input, not rank 0's output */
    snprintf(b, sizeof(b), "%s/cause", g_tmp);
    write_run(b, 12, 2, 5, 5, 0);
    assert_int_equal(es_digest_load(b, &rb, err, sizeof(err)), 0);
    es_digest_compare(&ra, &rb, &d);
    assert_int_equal(d.kind, ES_DIGEST_DIFF_INPUT);
    assert_int_equal(d.call, 5);
    assert_int_equal(d.rank, 2);
    es_digest_run_free(&rb);

    snprintf(b, sizeof(b), "%s/call", g_tmp);
    write_run(b, 12, 0, 9, 3, 0);
    assert_int_equal(es_digest_load(b, &rb, err, sizeof(err)), 0);
    es_digest_compare(&ra, &rb, &d);
    assert_int_equal(d.kind, ES_DIGEST_DIFF_CALL);
    assert_int_equal(d.call, 9);
    assert_int_equal(d.rank, 0);
    es_digest_run_free(&rb);

    snprintf(b, sizeof(b), "%s/short", g_tmp);
    write_run(b, 12, 1, 5, 4, 0);
    assert_int_equal(es_digest_load(b, &rb, err, sizeof(err)), 0);
    es_digest_compare(&ra, &rb, &d);
    assert_int_equal(d.kind, ES_DIGEST_DIFF_LENGTH);
    assert_int_equal(d.rank, 1);
    assert_int_equal(d.na, 12);
    assert_int_equal(d.nb, 5);
    es_digest_run_free(&rb);
    es_digest_run_free(&ra);
}

static void test_digest_files(void **state)
{
    (void)state;
    char d[400], p[512], err[512];
    es_digest_run_t r;
    snprintf(d, sizeof(d), "%s/none", g_tmp);
    assert_int_equal(es_digest_load(d, &r, err, sizeof(err)), -ENOENT);
    mkdir(d, 0700);
    assert_int_equal(es_digest_load(d, &r, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "no digest"));

    /* another format */
    snprintf(p, sizeof(p), "%s/rank-00000.esd", d);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("not a digest at all, but long enough to fill a header of eighty bytes......", f);
    fclose(f);
    assert_int_equal(es_digest_load(d, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not a digest file"));

    /* another version */
    es_digest_hdr_t h = { .magic = ES_DIGEST_MAGIC, .version = ES_DIGEST_VERSION + 1,
                          .hdr_size = sizeof(h), .rec_size = sizeof(es_digest_rec_t) };
    f = fopen(p, "wb");
    assert_non_null(f);
    fwrite(&h, sizeof(h), 1, f);
    fclose(f);
    assert_int_equal(es_digest_load(d, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "this reader takes version"));

    /* a torn last record is dropped */
    h.version = ES_DIGEST_VERSION;
    f = fopen(p, "wb");
    assert_non_null(f);
    fwrite(&h, sizeof(h), 1, f);
    es_digest_rec_t x;
    rec(&x, 0, 1, 2);
    fwrite(&x, sizeof(x), 1, f);
    fwrite(&x, 20, 1, f);
    fclose(f);
    assert_int_equal(es_digest_load(d, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.est[0].n, 1);
    assert_true(r.est[0].torn);
    es_digest_run_free(&r);
}

/* ---- whole processes ------------------------------------------------------------------- */

static const char *ctl_bin(void)
{
    static char p[4096];
    snprintf(p, sizeof(p), "%s", es_build_path("bin/easyscale-ctl"));
    return p;
}

/* Runs a shell command line built from a format; the result in *r. */
static int sh(es_proc_result_t *r, int timeout, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sh(es_proc_result_t *r, int timeout, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    assert_true(n > 0);
    memset(r, 0, sizeof(*r));
    assert_int_equal(es_run_sh(cmd, NULL, timeout, r), 0);
    free(cmd);
    return r->status;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* easyscale-ctl verify --matrix FILE ARGS... -- sh -c 'echo checksum $SUM': the
 * stand-in's checksum is whatever the configuration's env= says. */
static int verify_stub(const char *matrix_text, const char *extra, es_proc_result_t *r)
{
    char mp[400];
    static int seq;
    snprintf(mp, sizeof(mp), "%s/m%d", g_tmp, seq++);
    write_file(mp, matrix_text);
    return sh(r, 120, "'%s' verify --ests 2 --matrix '%s' %s -- sh -c 'echo \"checksum $SUM\"'",
              ctl_bin(), mp, extra);
}

static void test_verify_stub(void **state)
{
    (void)state;
    es_proc_result_t r;
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=aa\n"
                                 "control c env=SUM=bb\n", "", &r), 0);
    assert_non_null(strstr(r.out, "reference"));
    assert_non_null(strstr(r.out, "match"));
    assert_non_null(strstr(r.out, "differs (expected)"));
    assert_non_null(strstr(r.out, "verify: d1: 2 of 2 checks give aa; controls: 1 of 1 differ; "
                                  "PASS"));
    es_proc_result_free(&r);

    /* a check that differs */
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=ab\n"
                                 "control c env=SUM=bb\n", "", &r), 1);
    assert_non_null(strstr(r.out, "MISMATCH"));
    assert_non_null(strstr(r.out, "FAIL"));
    es_proc_result_free(&r);

    /* a control that does not differ: the matrix proves nothing */
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=aa\n"
                                 "control c env=SUM=aa\n", "", &r), 1);
    assert_non_null(strstr(r.out, "SAME AS REFERENCE"));
    es_proc_result_free(&r);

    /* no checksum in the output: failed */
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=\ncontrol c env=SUM=bb\n",
                                 "", &r), 1);
    assert_non_null(strstr(r.out, "no checksum in the output"));
    es_proc_result_free(&r);

    /* --json; a pattern of the user's */
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=aa\ncontrol c env=SUM=bb\n",
                                 "--json --pattern 'sum ([a-z]+)'", &r), 0);
    assert_non_null(strstr(r.out, "{\"pass\":true,"));
    assert_non_null(strstr(r.out, "\"name\":\"b\",\"kind\":\"check\",\"level\":\"d1\""));
    assert_non_null(strstr(r.out, "\"checksum\":\"aa\",\"ranks_agree\":true"));
    assert_non_null(strstr(r.out, "\"verdict\":\"differs (expected)\""));
    es_proc_result_free(&r);

    /* shim-off runs the job at EASYSCALE_DETERMINISM=off, ests= with its own
     * number of ESTs: the stand-in prints what it was given */
    char mp[400];
    snprintf(mp, sizeof(mp), "%s/m-env", g_tmp);
    write_file(mp, "check a\ncheck b\ncontrol o shim-off\ncontrol e ests=1\n");
    sh(&r, 120, "'%s' verify --ests 2 --matrix '%s' --pattern 'checksum ([a-z0-9-]+)' -- sh -c "
       "'echo \"checksum $EASYSCALE_DETERMINISM-$WORLD_SIZE\"'", ctl_bin(), mp);
    if (r.status != 0)
        fail_msg("exit %d:\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "d1-2"));
    assert_non_null(strstr(r.out, "off-2"));
    assert_non_null(strstr(r.out, "d1-1"));
    es_proc_result_free(&r);

    /* --only */
    assert_int_equal(verify_stub("check a env=SUM=aa\ncheck b env=SUM=zz\ncontrol c env=SUM=bb\n",
                                 "--only a,c", &r), 0);
    assert_null(strstr(r.out, "zz"));
    es_proc_result_free(&r);
}

static void test_verify_usage(void **state)
{
    (void)state;
    es_proc_result_t r;
    char mp[400];
    static const char *const bad[] = {
        "verify --ests 0", "verify --steps x", "verify --pattern '('", "verify --bogus",
        "verify --matrix /nonexistent/m", "verify stray",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sh(&r, 60, "'%s' %s", ctl_bin(), bad[i]);
        if (r.status != 2)
            fail_msg("%s: exit %d, not 2:\n%s", bad[i], r.status, r.out);
        es_proc_result_free(&r);
    }
    snprintf(mp, sizeof(mp), "%s/bad-matrix", g_tmp);
    write_file(mp, "check a\ncheck a\n");
    sh(&r, 60, "'%s' verify --matrix '%s' -- true", ctl_bin(), mp);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, ":2: a second configuration named a"));
    es_proc_result_free(&r);
    write_file(mp, "check a gpus=0,9\n");
    sh(&r, 60, "'%s' verify --matrix '%s' -- true", ctl_bin(), mp);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "no such GPU \"9\""));
    es_proc_result_free(&r);
    write_file(mp, "check a\n");
    sh(&r, 60, "'%s' verify --matrix '%s' --only zz -- true", ctl_bin(), mp);
    assert_int_equal(r.status, 2);
    es_proc_result_free(&r);
    sh(&r, 60, "'%s' verify --help", ctl_bin());
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: easyscale-ctl verify"));
    es_proc_result_free(&r);
}

static void test_verify_list(void **state)
{
    (void)state;
    es_proc_result_t r;
    sh(&r, 60, "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G,t4:8G '%s' verify "
             "--list", ctl_bin());
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "check   d1-4on4        level=d1 gpus=0,1,2,3"));
    assert_non_null(strstr(r.out, "check   d2-mix-t4      level=d2 gpus=0,1,4"));
    assert_non_null(strstr(r.out, "control off            level=d1 gpus=0,1,2,3 shim-none"));
    /* what --list prints is a matrix verify reads */
    char mp[400];
    snprintf(mp, sizeof(mp), "%s/listed", g_tmp);
    write_file(mp, r.out);
    es_proc_result_free(&r);
    sh(&r, 60, "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G,t4:8G '%s' verify "
             "--matrix '%s' --list", ctl_bin(), mp);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "d1-tslice"));
    es_proc_result_free(&r);
}

static void test_diff_cli(void **state)
{
    (void)state;
    char a[400], b[400];
    es_proc_result_t r;
    snprintf(a, sizeof(a), "%s/cli-a", g_tmp);
    snprintf(b, sizeof(b), "%s/cli-b", g_tmp);
    write_run(a, 6, -1, -1, 0, 0);
    write_run(b, 6, 1, 3, 1, 0);
    sh(&r, 60, "'%s' diff '%s' '%s'", ctl_bin(), a, a);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "the runs agree"));
    es_proc_result_free(&r);
    sh(&r, 60, "'%s' diff '%s' '%s'", ctl_bin(), a, b);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "first divergence: call 3 (step 1), rank 1"));
    es_proc_result_free(&r);
    sh(&r, 60, "'%s' diff '%s' %s/missing", ctl_bin(), a, g_tmp);
    assert_int_equal(r.status, 2);
    es_proc_result_free(&r);
    sh(&r, 60, "'%s' diff '%s'", ctl_bin(), a);
    assert_int_equal(r.status, 2);
    es_proc_result_free(&r);
}

/* The real trainer, 4 ESTs on 4 simulated A100s: two runs of the same
 * placement agree and the shim-off control differs; without
 * --deterministic-kernels the trainer's float-atomic scatter-add makes the
 * repeat differ, and verify fails. */
static void test_verify_trainer(void **state)
{
    (void)state;
    char mp[400];
    es_proc_result_t r;
    snprintf(mp, sizeof(mp), "%s/trainer", g_tmp);
    write_file(mp, "check a gpus=0-3\ncheck b gpus=0-3\ncontrol off gpus=0-3 shim-none\n");
    const char *env = "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G";
    sh(&r, 300, "%s '%s' verify --ests 4 --matrix '%s' -- python3 '%s' --steps 40 "
             "--log-every 1000 --deterministic-kernels", env, ctl_bin(), mp,
             es_root_path("examples/train.py"));
    if (r.status != 0)
        fail_msg("verify on the trainer failed:\n%s", r.out);
    assert_non_null(strstr(r.out, "d1: 2 of 2 checks give"));
    assert_non_null(strstr(r.out, "controls: 1 of 1 differ"));
    es_proc_result_free(&r);

    sh(&r, 300, "%s '%s' verify --ests 4 --matrix '%s' --only a,b,off -- python3 "
             "'%s' --steps 40 --log-every 1000", env, ctl_bin(), mp,
             es_root_path("examples/train.py"));
    if (r.status != 1 || !strstr(r.out, "MISMATCH"))
        fail_msg("float atomics did not make the repeat differ (exit %d):\n%s", r.status, r.out);
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_keys),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_builtin),
        cmocka_unit_test(test_gpus_visible),
        cmocka_unit_test(test_checksum),
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_digest_compare),
        cmocka_unit_test(test_digest_files),
        cmocka_unit_test(test_verify_stub),
        cmocka_unit_test(test_verify_usage),
        cmocka_unit_test(test_verify_list),
        cmocka_unit_test(test_diff_cli),
        cmocka_unit_test(test_verify_trainer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
