/* Unit tests of examples/kernels.cu on the CPU: the kernels themselves,
 * compiled by the host compiler through the CUDA-on-CPU layer (sim/cucpu),
 * called through their twin entry points with launch configurations like
 * train.py's: the SM-count-sized reduction is exact to rounding and its bits
 * depend on the grid, the float-atomic scatter-add changes with the
 * launch's nondet_seed while its ordered alternative does not, the shared
 * exponential is accurate, dropout keeps the expected fraction, draws the
 * same mask for a global batch however it is split over ranks and matches
 * train.py's host reference, ids out of range are never written, and the
 * elementwise kernels' grid-stride loops cover any grid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "examples/es_kmath.h"
#include "sim/include/simcuda_twin.h"

int simcuda_twin_es_bias_relu_dropout(const simcuda_launch_t *L);
int simcuda_twin_es_softmax_xent(const simcuda_launch_t *L);
int simcuda_twin_es_table_grad_atomic(const simcuda_launch_t *L);
int simcuda_twin_es_table_grad_det(const simcuda_launch_t *L);
int simcuda_twin_es_reduce_partial(const simcuda_launch_t *L);
int simcuda_twin_es_reduce_final(const simcuda_launch_t *L);
int simcuda_twin_es_sgd_momentum(const simcuda_launch_t *L);

static simcuda_launch_t cfg(unsigned gx, unsigned gy, unsigned bx, void **params)
{
    simcuda_launch_t L;
    memset(&L, 0, sizeof L);
    L.abi = SIMCUDA_TWIN_ABI;
    L.grid[0] = gx;
    L.grid[1] = gy;
    L.grid[2] = 1;
    L.block[0] = bx;
    L.block[1] = L.block[2] = 1;
    L.params = params;
    L.sm_count = 108;
    L.cc_major = 8;
    return L;
}

static uint64_t rs = 88172645463325252ull;
static float frand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Per-channel sum of x[outer, channels, inner] by the two passes with
 * nparts partial sums per channel. */
static void two_pass(const float *x, int outer, int channels, int inner, unsigned nparts,
                     float *out)
{
    float *partial = calloc((size_t)nparts * channels, sizeof *partial);
    assert_non_null(partial);
    int vt = 128; /* the tree of train.py's reductions, one-thread blocks */
    void *p1[] = {&x, &partial, &outer, &channels, &inner, &vt};
    simcuda_launch_t L = cfg(nparts, (unsigned)channels, 1, p1);
    assert_int_equal(simcuda_twin_es_reduce_partial(&L), 0);
    int np = (int)nparts;
    void *p2[] = {&partial, &out, &np, &vt};
    L = cfg((unsigned)channels, 1, 1, p2);
    assert_int_equal(simcuda_twin_es_reduce_final(&L), 0);
    free(partial);
}

static void test_reduction_exact_and_grid_dependent(void **state)
{
    (void)state;
    enum { OUTER = 8, CH = 8, INNER = 144 };
    static float x[OUTER * CH * INNER];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = frand();
    float a100[CH], v100[CH], again[CH];
    two_pass(x, OUTER, CH, INNER, 108 * 2, a100);
    two_pass(x, OUTER, CH, INNER, 80 * 2, v100);
    two_pass(x, OUTER, CH, INNER, 108 * 2, again);
    int differ = 0;
    for (int k = 0; k < CH; k++) {
        double ref = 0;
        for (int o = 0; o < OUTER; o++)
            for (int s = 0; s < INNER; s++)
                ref += x[(o * CH + k) * INNER + s];
        assert_true(fabs(a100[k] - ref) < 1e-4);
        assert_true(fabs(v100[k] - ref) < 1e-4);
        assert_memory_equal(&a100[k], &again[k], sizeof(float));
        differ += memcmp(&a100[k], &v100[k], sizeof(float)) != 0;
    }
    /* Negative control for the SM-count dependence: another grid, other
     * bits (for at least one channel of this input). */
    assert_true(differ > 0);
}

static void test_atomic_order_varies_det_does_not(void **state)
{
    (void)state;
    enum { ROWS = 64, COLS = 6, BUCKETS = 4 };
    float dl[ROWS * COLS];
    int ids[ROWS];
    for (int i = 0; i < ROWS * COLS; i++)
        dl[i] = frand() * 1e-2f + (i % 3 ? 1.0f : -1.0f) * 1e-6f;
    for (int r = 0; r < ROWS; r++)
        ids[r] = r % BUCKETS;
    float first[BUCKETS * COLS], t[BUCKETS * COLS], det1[BUCKETS * COLS],
        det2[BUCKETS * COLS];
    float *tp = first, *dlp = dl;
    int *idp = ids;
    int rows = ROWS, cols = COLS, buckets = BUCKETS;
    void *pa[] = {&dlp, &idp, &tp, &rows, &cols, &buckets};
    simcuda_launch_t L = cfg((ROWS * COLS + 255) / 256, 1, 256, pa);
    memset(first, 0, sizeof first);
    L.nondet_seed = 1;
    assert_int_equal(simcuda_twin_es_table_grad_atomic(&L), 0);
    int varied = 0;
    for (uint64_t s = 2; s < 12; s++) {
        tp = t;
        memset(t, 0, sizeof t);
        L.nondet_seed = s;
        assert_int_equal(simcuda_twin_es_table_grad_atomic(&L), 0);
        varied += memcmp(first, t, sizeof t) != 0;
    }
    assert_true(varied > 0);
    /* Same seed, same bits: the order is the launch's, nothing else. */
    tp = t;
    memset(t, 0, sizeof t);
    L.nondet_seed = 1;
    assert_int_equal(simcuda_twin_es_table_grad_atomic(&L), 0);
    assert_memory_equal(first, t, sizeof t);
    /* Ordered kernel: row order, whatever the seed. */
    float *dp = det1;
    void *pd[] = {&dlp, &idp, &dp, &rows, &cols, &buckets};
    L = cfg(1, 1, 256, pd);
    memset(det1, 0, sizeof det1);
    L.nondet_seed = 5;
    assert_int_equal(simcuda_twin_es_table_grad_det(&L), 0);
    dp = det2;
    memset(det2, 0, sizeof det2);
    L.nondet_seed = 6;
    assert_int_equal(simcuda_twin_es_table_grad_det(&L), 0);
    assert_memory_equal(det1, det2, sizeof det1);
    for (int b = 0; b < BUCKETS; b++)
        for (int c = 0; c < COLS; c++) {
            float acc = 0.0f;
            for (int r = 0; r < ROWS; r++)
                if (ids[r] == b)
                    acc += dl[r * COLS + c];
            assert_memory_equal(&acc, &det1[b * COLS + c], sizeof acc);
            assert_true(fabsf(first[b * COLS + c] - acc) < 1e-5f);
        }
    /* Ids outside [0, buckets) are skipped by both kernels, never written
     * out of bounds (the address sanitizer build checks the stack arrays). */
    ids[0] = BUCKETS;
    ids[1] = -1;
    L = cfg((ROWS * COLS + 255) / 256, 1, 256, pa);
    tp = t;
    memset(t, 0, sizeof t);
    assert_int_equal(simcuda_twin_es_table_grad_atomic(&L), 0);
    L = cfg(1, 1, 256, pd);
    dp = det1;
    memset(det1, 0, sizeof det1);
    assert_int_equal(simcuda_twin_es_table_grad_det(&L), 0);
    for (int i = 0; i < BUCKETS * COLS; i++)
        assert_true(fabsf(t[i] - det1[i]) < 1e-5f);
    /* Bucket 0 lost row 0's contribution. */
    assert_true(fabsf(det1[0] - first[0]) > 0.0f);
}

static void test_exp_accuracy(void **state)
{
    (void)state;
    for (float x = -86.0f; x <= 0.0f; x += 0.0137f) {
        double ref = exp((double)x);
        assert_true(fabs(es_exp(x) - ref) <= 4e-7 * ref);
    }
    assert_true(es_exp(-100.0f) == 0.0f);
    assert_true(es_exp(0.0f) == 1.0f);
}

/* Dropout keeps about 1-p of the elements, and the mask of a global batch
 * is the same whether one rank draws all of it or two ranks draw a half
 * each (first_row = rank x local batch): the property that lets 1, 2 and 4
 * ranks run the same mathematical update. Negative controls: another step
 * and another seed draw other masks, and rank 1 starting at row 0 (a
 * rank-local counter) would not reproduce the single rank's second half. */
static void test_dropout_fraction_and_stream(void **state)
{
    (void)state;
    enum { ROWS = 64, COLS = 32, N = ROWS * COLS, HALF = N / 2 };
    static float h[N], m[N], m2[N];
    float bias[COLS];
    for (int c = 0; c < COLS; c++)
        bias[c] = 0.0f;
    for (int i = 0; i < N; i++)
        h[i] = 1.0f;
    float *hp = h, *bp = bias, *mp = m;
    int rows = ROWS, cols = COLS, train = 1;
    float p = 0.25f, keep = 1.0f / 0.75f;
    unsigned seed = 7, first_row = 0, step = 3;
    void *pr[] = {&hp, &bp, &mp, &rows, &cols, &p, &keep, &seed, &first_row, &step, &train};
    simcuda_launch_t L = cfg(N / 256, 1, 256, pr);
    assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    int dropped = 0;
    for (int i = 0; i < N; i++) {
        assert_true(m[i] == 0.0f || m[i] == keep);
        assert_true(h[i] == m[i]);
        dropped += m[i] == 0.0f;
    }
    assert_true(dropped > N * 0.2 && dropped < N * 0.3);

    /* Two "ranks" of ROWS/2 rows each: rank 0 from row 0, rank 1 from row
     * ROWS/2, into the two halves of m2. */
    rows = ROWS / 2;
    L = cfg(HALF / 256, 1, 256, pr);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < N; i++)
            h[i] = 1.0f;
        first_row = (unsigned)(r * ROWS / 2);
        mp = m2 + r * HALF;
        hp = h + r * HALF;
        assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    }
    assert_memory_equal(m, m2, sizeof m);

    /* A rank-local counter (rank 1 starting at row 0) draws rank 0's mask
     * again, not the second half of the global one. */
    first_row = 0;
    mp = m2 + HALF;
    hp = h;
    assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    assert_memory_not_equal(m + HALF, m2 + HALF, HALF * sizeof(float));

    /* Another step, another seed: other masks. */
    rows = ROWS;
    L = cfg(N / 256, 1, 256, pr);
    mp = m2;
    step = 4;
    for (int i = 0; i < N; i++)
        h[i] = 1.0f;
    assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    assert_memory_not_equal(m, m2, sizeof m);
    step = 3;
    seed = 8;
    for (int i = 0; i < N; i++)
        h[i] = 1.0f;
    assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    assert_memory_not_equal(m, m2, sizeof m);
}

/* The host reference of the mask (train.dropout_mask in examples/train.py,
 * used by examples/torch_ddp.py) must draw the same bits as the kernel:
 * tests/examples/train_test.c checks the Python side against the same
 * fingerprint (FNV-1a over kept = 1 / dropped = 0) of seed 7, step 3,
 * rows 5..20 of 32 columns, p = 0.25. */
#define ES_DROPOUT_FINGERPRINT 0x6abb585e62bca156ull
#define ES_DROPOUT_FP_DROPPED 139

static void test_dropout_matches_host_reference(void **state)
{
    (void)state;
    enum { ROWS = 16, COLS = 32, N = ROWS * COLS };
    static float h[N], m[N];
    float bias[COLS] = {0};
    for (int i = 0; i < N; i++)
        h[i] = 1.0f;
    float *hp = h, *bp = bias, *mp = m;
    int rows = ROWS, cols = COLS, train = 1;
    float p = 0.25f, keep = 1.0f / 0.75f;
    unsigned seed = 7, first_row = 5, step = 3;
    void *pr[] = {&hp, &bp, &mp, &rows, &cols, &p, &keep, &seed, &first_row, &step, &train};
    simcuda_launch_t L = cfg(2, 1, 256, pr);
    assert_int_equal(simcuda_twin_es_bias_relu_dropout(&L), 0);
    uint64_t fp = 0xcbf29ce484222325ull;
    int dropped = 0;
    for (int i = 0; i < N; i++) {
        fp = (fp ^ (m[i] != 0.0f ? 1u : 0u)) * 0x100000001b3ull;
        dropped += m[i] == 0.0f;
    }
    assert_int_equal(dropped, ES_DROPOUT_FP_DROPPED);
    assert_true(fp == ES_DROPOUT_FINGERPRINT);
}

static void test_softmax_and_coverage(void **state)
{
    (void)state;
    enum { ROWS = 4, COLS = 6 };
    float z[ROWS * COLS], dz[ROWS * COLS], loss[ROWS], corr[ROWS];
    int lab[ROWS] = {0, 5, 2, 3};
    for (int i = 0; i < ROWS * COLS; i++)
        z[i] = frand() * 3.0f;
    for (int i = 0; i < ROWS; i++)
        loss[i] = -1.0f;
    float *zp = z, *dp = dz, *lp = loss, *cp = corr, scale = 0.25f;
    int *labp = lab, rows = ROWS, cols = COLS;
    void *pp[] = {&zp, &labp, &dp, &lp, &cp, &rows, &cols, &scale};
    /* Grid-stride loops: an empty grid is refused (as cuLaunchKernel does)
     * and touches nothing; a grid of 2 threads still covers all 4 rows. */
    simcuda_launch_t L = cfg(0, 1, 32, pp);
    assert_int_not_equal(simcuda_twin_es_softmax_xent(&L), 0);
    assert_true(loss[0] == -1.0f && loss[3] == -1.0f);
    L = cfg(1, 1, 2, pp);
    assert_int_equal(simcuda_twin_es_softmax_xent(&L), 0);
    assert_true(loss[2] != -1.0f && loss[3] != -1.0f);
    for (int r = 0; r < ROWS; r++) {
        double s = 0, mx = -1e30, se = 0;
        for (int c = 0; c < COLS; c++) {
            s += dz[r * COLS + c];
            mx = fmax(mx, z[r * COLS + c]);
        }
        for (int c = 0; c < COLS; c++)
            se += exp(z[r * COLS + c] - mx);
        assert_true(fabs(s) < 1e-6);
        assert_true(fabs(loss[r] - (log(se) - (z[r * COLS + lab[r]] - mx))) < 1e-5);
    }
}

static void test_sgd_step(void **state)
{
    (void)state;
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.2f, 0.4f, -0.6f}, buf[3] = {0, 0, 0};
    float *pp = p, *gp = g, *bp = buf, lr = 0.1f, mom = 0.9f, wd = 0.01f, gs = 0.5f;
    int n = 3;
    void *pr[] = {&pp, &gp, &bp, &n, &lr, &mom, &wd, &gs};
    simcuda_launch_t L = cfg(1, 1, 256, pr);
    assert_int_equal(simcuda_twin_es_sgd_momentum(&L), 0);
    assert_true(fabsf(p[0] - (1.0f - 0.1f * (0.1f + 0.01f))) < 1e-7f);
    assert_true(fabsf(buf[2] - (-0.3f + 0.005f)) < 1e-7f);
}

static void test_bad_launch_rejected(void **state)
{
    (void)state;
    float *x = NULL, *partial = NULL;
    int outer = 1, channels = 1, inner = 1, vt = 96; /* not a power of two */
    void *p1[] = {&x, &partial, &outer, &channels, &inner, &vt};
    simcuda_launch_t L = cfg(4, 1, 1, p1);
    assert_int_not_equal(simcuda_twin_es_reduce_partial(&L), 0);
    vt = 2048; /* above the shared arrays */
    assert_int_not_equal(simcuda_twin_es_reduce_partial(&L), 0);
    vt = 128;
    L = cfg(4, 1, 128, p1); /* not one-thread blocks */
    assert_int_not_equal(simcuda_twin_es_reduce_partial(&L), 0);
    L = cfg(4, 1, 1, p1);
    L.abi = 99;
    assert_int_not_equal(simcuda_twin_es_reduce_partial(&L), 0);
}

int main(void)
{
    /* One OS thread per launch: a launch is then a pure function of its
     * seed (test_atomic_order_varies_det_does_not). */
    setenv("SIMCUDA_CPU_THREADS", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduction_exact_and_grid_dependent),
        cmocka_unit_test(test_atomic_order_varies_det_does_not),
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_dropout_fraction_and_stream),
        cmocka_unit_test(test_dropout_matches_host_reference),
        cmocka_unit_test(test_softmax_and_coverage),
        cmocka_unit_test(test_sgd_step),
        cmocka_unit_test(test_bad_launch_rejected),
    };
    return cmocka_run_group_tests_name("train_twins", tests, NULL, NULL);
}
