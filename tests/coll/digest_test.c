/* Tests of the collective digests written by the shim (EASYSCALE_DIGEST,
 * coll/digest.c) and of the first-divergence finder on them
 * (`easyscale-ctl diff`, controller/digest.c), with examples/train.py and 4
 * ESTs under easyscale-ctl run on simcuda:
 *  - a digest file per EST, one record per collective call of the trainer
 *    (its weight broadcast, then 3 gradient all-reduces per step, with the
 *    buckets' sizes); none without EASYSCALE_DIGEST; an empty value refused
 *    at start-up;
 *  - identical runs agree, and so do runs on other placements (4 GPUs, 1,
 *    and 1 that holds one EST at a time, time-sliced: the hashes do not
 *    depend on where an EST ran, nor on whether it was parked);
 *  - determinism broken on purpose, the finder names the first affected
 *    collective: the trainer's float-atomic kernel (its bucket-table
 *    gradient lands in the first bucket: an all-reduce of 384 floats whose
 *    INPUT differs), and the job with the shim's determinism off (NCCL's
 *    own collectives: the first gradient all-reduce, call 1 of step 0);
 *  - verify explains a control's difference with the first divergence.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/digest.h"
#include "tests/harness.h"

/* The trainer's first gradient bucket (examples/train.py: DDP-style
 * buckets of at most 16 KiB, tensors in reverse order, each tensor's
 * offset 256-byte aligned): the bucket table (4 x 6), fc2's bias (6) and
 * weight (6 x 32), fc1's bias (32), from fc1.bias at 9408 to the end of the
 * table at 9792: 384 floats. */
#define FIRST_BUCKET 384
#define STEPS 6

static char g_tmp[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/es-digest-test.XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

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

/* One job of the trainer, 4 ESTs on DEVICES, digests into g_tmp/NAME
 * (none when name is NULL); extra: easyscale-ctl run options and env. */
static void job(const char *name, const char *devices, const char *runopts, const char *env,
                const char *trainopts)
{
    es_proc_result_t r;
    char dir[400] = "";
    if (name)
        snprintf(dir, sizeof(dir), "EASYSCALE_DIGEST=%s/%s", g_tmp, name);
    sh(&r, 300,
       "SIMCUDA_DEVICES=%s %s %s '%s' run --ests 4 --progress off %s -- python3 '%s' --steps %d "
       "--log-every 100000 %s",
       devices, dir, env, es_build_path("bin/easyscale-ctl"), runopts,
       es_root_path("examples/train.py"), STEPS, trainopts);
    if (r.status != 0)
        fail_msg("the job %s failed (exit %d):\n%s", name ? name : "", r.status, r.out);
    es_proc_result_free(&r);
}

static int diff(const char *a, const char *b, char *out, size_t len)
{
    es_proc_result_t r;
    sh(&r, 60, "'%s' diff '%s/%s' '%s/%s'", es_build_path("bin/easyscale-ctl"), g_tmp, a, g_tmp,
       b);
    snprintf(out, len, "%s", r.out);
    int st = r.status;
    es_proc_result_free(&r);
    return st;
}

#define A100X4 "a100:8G,a100:8G,a100:8G,a100:8G"

static void test_records(void **state)
{
    (void)state;
    job("rec", A100X4, "--gpus 0-3", "", "--deterministic-kernels");
    es_digest_run_t run;
    char err[512], d[400];
    snprintf(d, sizeof(d), "%s/rec", g_tmp);
    if (es_digest_load(d, &run, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(run.n, 4);
    for (int i = 0; i < 4; i++) {
        const es_digest_est_t *e = &run.est[i];
        assert_int_equal(e->hdr.rank, i);
        assert_int_equal(e->hdr.world, 4);
        assert_int_equal(e->hdr.level, 1);
        assert_false(e->torn);
        /* the weights' broadcast, then 3 bucket all-reduces per step */
        assert_true(e->n >= 1 + 3 * STEPS);
        assert_int_equal(e->rec[0].op, ES_DIGEST_BROADCAST);
        assert_int_equal(e->rec[0].call, 0);
        for (int s = 0; s < STEPS; s++)
            for (int k = 0; k < 3; k++) {
                const es_digest_rec_t *x = &e->rec[1 + 3 * s + k];
                assert_int_equal(x->call, 1 + 3 * s + k);
                assert_int_equal(x->op, ES_DIGEST_ALLREDUCE);
                assert_int_equal(x->dtype, 7); /* float32 */
                assert_int_equal(x->rank, i);
                assert_int_equal(x->nranks, 4);
                assert_int_equal(x->step, 3 * s + k);
                if (k == 0)
                    assert_int_equal(x->count, FIRST_BUCKET);
                /* an all-reduce: every rank's output is the same */
                assert_int_equal(x->out_hash, run.est[0].rec[1 + 3 * s + k].out_hash);
            }
        /* inputs are each rank's own gradients */
        if (i > 0)
            assert_true(e->rec[1].in_hash != run.est[0].rec[1].in_hash);
    }
    es_digest_run_free(&run);

    /* without EASYSCALE_DIGEST nothing is written; an empty one is refused */
    job(NULL, A100X4, "--gpus 0-3", "", "--deterministic-kernels");
    es_proc_result_t r;
    char pre[4200];
    sh(&r, 60, "EASYSCALE_DIGEST= env '%s' true",
       es_preload_env(es_build_path("lib/libeasyscale.so"), pre, sizeof(pre)));
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "EASYSCALE_DIGEST is set but empty"));
    es_proc_result_free(&r);
}

static void test_agree(void **state)
{
    (void)state;
    char out[2048];
    job("a", A100X4, "--gpus 0-3", "", "--deterministic-kernels");
    job("b", A100X4, "--gpus 0-3", "", "--deterministic-kernels");
    if (diff("a", "b", out, sizeof(out)) != 0)
        fail_msg("identical runs differ:\n%s", out);
    assert_non_null(strstr(out, "the runs agree"));
    /* 4 ESTs on one GPU: the same calls, the same bits */
    job("one", "a100:8G", "", "", "--deterministic-kernels");
    if (diff("a", "one", out, sizeof(out)) != 0)
        fail_msg("4 ESTs on 4 GPUs and on 1 differ:\n%s", out);
    /* 4 ESTs time-sliced on a GPU that holds one: collectives taken part in
     * while parked are hashed from the host copies, to the same values */
    job("ts", "a100:32M", "", "EASYSCALE_TIME_SLICE=on", "--deterministic-kernels");
    if (diff("a", "ts", out, sizeof(out)) != 0)
        fail_msg("4 ESTs on 4 GPUs and time-sliced on 1 differ:\n%s", out);
    assert_non_null(strstr(out, "the runs agree"));
}

static void test_atomics_found(void **state)
{
    (void)state;
    char out[2048];
    int st = 0;
    /* float atomics reorder in nearly every run; a few tries for the rare
     * pair that happens to agree */
    for (int t = 0; t < 3 && st == 0; t++) {
        char na[32], nb[32];
        snprintf(na, sizeof(na), "at%d", 2 * t);
        snprintf(nb, sizeof(nb), "at%d", 2 * t + 1);
        job(na, A100X4, "--gpus 0-3", "", "");
        job(nb, A100X4, "--gpus 0-3", "", "");
        st = diff(na, nb, out, sizeof(out));
    }
    if (st != 1)
        fail_msg("the float-atomic runs were not found to differ (exit %d):\n%s", st, out);
    /* the first affected collective: the first bucket's all-reduce of some
     * step, its input already different */
    unsigned long long call, step;
    unsigned rank;
    if (sscanf(out, "first divergence: call %llu (step %llu), rank %u", &call, &step, &rank) != 3)
        fail_msg("no first divergence named:\n%s", out);
    assert_int_equal((call - 1) % 3, 0);
    assert_int_equal(step, call - 1);
    char want[128];
    snprintf(want, sizeof(want), "allreduce sum float32 x %d ", FIRST_BUCKET);
    if (!strstr(out, want) || !strstr(out, "its input differs"))
        fail_msg("not the first bucket's input:\n%s", out);
}

static void test_shim_off_found(void **state)
{
    (void)state;
    char out[2048];
    job("d1", A100X4, "--gpus 0-3", "", "--deterministic-kernels");
    job("off", A100X4, "--gpus 0-3 --determinism off", "", "--deterministic-kernels");
    if (diff("d1", "off", out, sizeof(out)) != 1)
        fail_msg("d1 and the shim off were not found to differ:\n%s", out);
    /* NCCL's ring order: the first gradient all-reduce already differs */
    char want[128];
    snprintf(want, sizeof(want), "allreduce sum float32 x %d ", FIRST_BUCKET);
    if (!strstr(out, "first divergence: call 1 (step 0), rank") || !strstr(out, want))
        fail_msg("not the first gradient all-reduce:\n%s", out);
}

static void test_verify_explains(void **state)
{
    (void)state;
    char mp[400];
    es_proc_result_t r;
    snprintf(mp, sizeof(mp), "%s/matrix", g_tmp);
    FILE *f = fopen(mp, "w");
    assert_non_null(f);
    fputs("check a gpus=0-3\ncheck b gpus=0\ncontrol nccl gpus=0-3 env=EASYSCALE_COLLECTIVES=nccl\n",
          f);
    fclose(f);
    sh(&r, 300, "SIMCUDA_DEVICES=%s '%s' verify --ests 4 --steps %d --matrix '%s' -- python3 '%s' "
       "--steps %d --log-every 100000 --deterministic-kernels", A100X4,
       es_build_path("bin/easyscale-ctl"), STEPS, mp, es_root_path("examples/train.py"), STEPS);
    if (r.status != 0)
        fail_msg("verify failed (exit %d):\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "differs (expected)"));
    assert_non_null(strstr(r.out, "first divergence: call 1 (step 0)"));
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_agree),
        cmocka_unit_test(test_atomics_found),
        cmocka_unit_test(test_shim_off_found),
        cmocka_unit_test(test_verify_explains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
