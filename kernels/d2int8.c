/* d2's int8 GEMM: the plain C reference of the definition (see d2int8.h
 * and kernels/d2int8_kernels.h), and an exact dot product for the error
 * measurements. Host memory only; 128-bit integers. */
#include "kernels/d2int8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* op(A)(i, p) and op(B)(p, j) of batch b. */
static float es_ref_a(const es_gemm_args_t *a, long long i, long long p, long long b)
{
    return es_ld(a->A, b * a->sA + (a->ta ? p + i * a->lda : i + p * a->lda), a->at);
}

static float es_ref_b(const es_gemm_args_t *a, long long p, long long j, long long b)
{
    return es_ld(a->B, b * a->sB + (a->tb ? j + p * a->ldb : p + j * a->ldb), a->bt);
}

/* The scaled integers of one side: n vectors of k (rows of op(A) when
 * rows, else columns of op(B)), their exponents and non-finite flags. */
static void es_ref_side(const es_gemm_args_t *a, long long b, int rows, int *q, int *e, int *nf)
{
    long long n = rows ? a->m : a->n;
    int s = es_i8_slices(rows ? a->at : a->bt);
    for (long long v = 0; v < n; v++) {
        unsigned mx = 0;
        nf[v] = 0;
        for (long long p = 0; p < a->k; p++) {
            unsigned m = es_i8_mag(rows ? es_ref_a(a, v, p, b) : es_ref_b(a, p, v, b));
            if (m >= 0x7f800000u)
                nf[v] = 1;
            else if (m > mx)
                mx = m;
        }
        e[v] = es_i8_exp(mx);
        for (long long p = 0; p < a->k; p++)
            q[v * a->k + p] = es_i8_quant(rows ? es_ref_a(a, v, p, b) : es_ref_b(a, p, v, b),
                                          e[v], s);
    }
}

/* The quantised sides of one product (steps 1 and 2): rows x depth
 * integers of op(A) and cols x depth of op(B), each row's and column's
 * exponent and non-finite flag. */
typedef struct es_ref_q {
    int *qa, *qb, *ea, *eb, *nfa, *nfb;
} es_ref_q_t;

static void es_ref_q_free(es_ref_q_t *q)
{
    free(q->qa);
    free(q->qb);
    free(q->ea);
    free(q->eb);
    free(q->nfa);
    free(q->nfb);
}

/* 0, or -ENOMEM (nothing held). One spare row, column and term: no zero
 * sizes. */
static int es_ref_q_alloc(es_ref_q_t *q, size_t rows, size_t cols, size_t depth)
{
    rows++, cols++, depth++;
    q->qa = malloc(rows * depth * sizeof(int));
    q->qb = malloc(cols * depth * sizeof(int));
    q->ea = malloc(rows * sizeof(int));
    q->nfa = malloc(rows * sizeof(int));
    q->eb = malloc(cols * sizeof(int));
    q->nfb = malloc(cols * sizeof(int));
    if (q->qa && q->qb && q->ea && q->eb && q->nfa && q->nfb)
        return 0;
    es_ref_q_free(q);
    return -ENOMEM;
}

/* A row or column with Inf or NaN: 1 and the IEEE value of element
 * (i, j) of batch b in *sp when the products make it non-finite, else 0
 * (the finite path decides). */
static int es_ref_special(const es_gemm_args_t *a, long long i, long long j, long long b,
                          float *sp)
{
    int st = 0;
    for (long long p = 0; p < a->k; p++)
        st = es_i8_sp_add(st, es_ref_a(a, i, p, b), es_ref_b(a, p, j, b));
    return es_i8_sp_value(st, sp) != 0;
}

/* acc of element (i, j) of batch b (steps 3 to 5). */
static float es_ref_acc(const es_gemm_args_t *a, long long i, long long j, long long b,
                        const int *qa, const int *ea, const int *nfa, const int *qb,
                        const int *eb, const int *nfb)
{
    float sp;
    if ((nfa[i] || nfb[j]) && es_ref_special(a, i, j, b, &sp))
        return sp;
    es_i128_t t = 0;
    for (long long p = 0; p < a->k; p++)
        t += (es_i128_t)((long long)qa[i * a->k + p] * qb[j * a->k + p]);
    int w = ES_I8_DIGIT * (es_i8_slices(a->at) + es_i8_slices(a->bt));
    return es_i8_to_f32(t, ea[i] + eb[j] - w);
}

int es_d2int8_ref_gemm(const es_gemm_args_t *a, int batch)
{
    es_ref_q_t Q;
    if (a->m < 0 || a->n < 0 || a->k < 0 || batch < 0)
        return -EINVAL;
    if (es_ref_q_alloc(&Q, (size_t)a->m, (size_t)a->n, (size_t)a->k) < 0)
        return -ENOMEM;
    int *qa = Q.qa, *qb = Q.qb, *ea = Q.ea, *eb = Q.eb, *nfa = Q.nfa, *nfb = Q.nfb;
    float alpha = a->palpha ? *a->palpha : a->alpha;
    for (long long b = 0; b < batch; b++) {
        if (alpha != 0.0f) {
            es_ref_side(a, b, 1, qa, ea, nfa);
            es_ref_side(a, b, 0, qb, eb, nfb);
        }
        for (long long j = 0; j < a->n; j++)
            for (long long i = 0; i < a->m; i++) {
                float acc = alpha != 0.0f ? es_ref_acc(a, i, j, b, qa, ea, nfa, qb, eb, nfb)
                                          : 0.0f;
                es_gemm_finish(a, i, j, b, acc);
            }
    }
    es_ref_q_free(&Q);
    return 0;
}

/* The exponent and non-finite flag of row i of op(A) (rows) or column j
 * of op(B). */
static int es_ref_vec_exp(const es_gemm_args_t *a, long long v, long long b, int rows, int *nf)
{
    unsigned mx = 0;
    *nf = 0;
    for (long long p = 0; p < a->k; p++) {
        unsigned m = es_i8_mag(rows ? es_ref_a(a, v, p, b) : es_ref_b(a, p, v, b));
        if (m >= 0x7f800000u)
            *nf = 1;
        else if (m > mx)
            mx = m;
    }
    return es_i8_exp(mx);
}

float es_d2int8_ref_acc(const es_gemm_args_t *a, long long i, long long j, long long b)
{
    float alpha = a->palpha ? *a->palpha : a->alpha, sp;
    int nfa, nfb, sa = es_i8_slices(a->at), sb = es_i8_slices(a->bt);
    if (alpha == 0.0f)
        return 0.0f;
    int ea = es_ref_vec_exp(a, i, b, 1, &nfa), eb = es_ref_vec_exp(a, j, b, 0, &nfb);
    if ((nfa || nfb) && es_ref_special(a, i, j, b, &sp))
        return sp;
    es_i128_t t = 0;
    for (long long p = 0; p < a->k; p++)
        t += (es_i128_t)((long long)es_i8_quant(es_ref_a(a, i, p, b), ea, sa) *
                         es_i8_quant(es_ref_b(a, p, j, b), eb, sb));
    return es_i8_to_f32(t, ea + eb - ES_I8_DIGIT * (sa + sb));
}

/* ---- convolutions ------------------------------------------------------------------------ */

/* One side of group g's implicit GEMM: n vectors (rows of A when rows,
 * else columns of B) of depth d: scaled integers (0 for skipped taps),
 * exponents, non-finite flags. */
static void es_ref_conv_side(const es_conv_args_t *a, int dir, int g, int rows, long long n,
                             long long d, int *q, int *e, int *nf)
{
    int s = es_i8_slices(rows == (dir == 2) ? a->t_in1 : a->t_in0);
    for (long long v = 0; v < n; v++) {
        unsigned mx = 0;
        float x;
        nf[v] = 0;
        for (long long t = 0; t < d; t++) {
            int ok = rows ? es_conv_ia(a, dir, g, v, t, a->t_in0, a->t_in1, &x)
                          : es_conv_ib(a, dir, g, t, v, a->t_in0, a->t_in1, &x);
            unsigned m = ok ? es_i8_mag(x) : 0;
            if (m >= 0x7f800000u)
                nf[v] = 1;
            else if (m > mx)
                mx = m;
        }
        e[v] = es_i8_exp(mx);
        for (long long t = 0; t < d; t++) {
            int ok = rows ? es_conv_ia(a, dir, g, v, t, a->t_in0, a->t_in1, &x)
                          : es_conv_ib(a, dir, g, t, v, a->t_in0, a->t_in1, &x);
            q[v * d + t] = ok ? es_i8_quant(x, e[v], s) : 0;
        }
    }
}

/* acc of output (row, col) of group g. */
static float es_ref_conv_acc(const es_conv_args_t *a, int dir, int g, long long row,
                             long long col, long long d, const int *qa, const int *ea,
                             const int *nfa, const int *qb, const int *eb, const int *nfb)
{
    float x, y, sp;
    if (nfa[row] || nfb[col]) {
        int st = 0;
        for (long long t = 0; t < d; t++)
            if (es_conv_ia(a, dir, g, row, t, a->t_in0, a->t_in1, &x) &&
                es_conv_ib(a, dir, g, t, col, a->t_in0, a->t_in1, &y))
                st = es_i8_sp_add(st, x, y);
        if (es_i8_sp_value(st, &sp))
            return sp;
    }
    es_i128_t t = 0;
    for (long long p = 0; p < d; p++)
        t += (es_i128_t)((long long)qa[row * d + p] * qb[col * d + p]);
    int w = ES_I8_DIGIT * (es_i8_slices(a->t_in0) + es_i8_slices(a->t_in1));
    return es_i8_to_f32(t, ea[row] + eb[col] - w);
}

int es_d2int8_ref_conv(int dir, const es_conv_args_t *a)
{
    es_ref_q_t Q;
    if (dir < 0 || dir > 2 || a->groups < 1)
        return -EINVAL;
    long long rows = es_conv_rows(a, dir), cols = es_conv_cols(a, dir);
    long long d = es_conv_depth(a, dir);
    if (es_ref_q_alloc(&Q, (size_t)rows, (size_t)cols, (size_t)d) < 0)
        return -ENOMEM;
    int *qa = Q.qa, *qb = Q.qb, *ea = Q.ea, *eb = Q.eb, *nfa = Q.nfa, *nfb = Q.nfb;
    for (int g = 0; g < a->groups; g++) {
        es_ref_conv_side(a, dir, g, 1, rows, d, qa, ea, nfa);
        es_ref_conv_side(a, dir, g, 0, cols, d, qb, eb, nfb);
        for (long long col = 0; col < cols; col++)
            for (long long row = 0; row < rows; row++)
                es_conv_ifinish(a, dir, g, row, col,
                                es_ref_conv_acc(a, dir, g, row, col, d, qa, ea, nfa, qb, eb, nfb));
    }
    es_ref_q_free(&Q);
    return 0;
}

int es_d2int8_ref_conv_path(int dir, const es_conv_args_t *a, int int8)
{
    if (int8)
        return es_d2int8_ref_conv(dir, a);
    if (dir < 0 || dir > 2 || a->groups < 1)
        return -EINVAL;
    long long total = dir == 0   ? (long long)a->n * a->k * a->p * a->q
                      : dir == 1 ? (long long)a->n * a->c * a->h * a->w
                                 : (long long)a->k * (a->c / a->groups) * a->r * a->s;
    for (long long i = 0; i < total; i++) {
        if (dir == 0)
            es_conv_fwd_elem(a, i);
        else if (dir == 1)
            es_conv_bwd_data_elem(a, i);
        else
            es_conv_bwd_filter_elem(a, i);
    }
    return 0;
}

int es_d2int8_env_int8(void)
{
    const char *p = getenv("EASYSCALE_D2_GEMM");
    return !p || strcmp(p, "fma") != 0;
}

/* ---- the exact dot product --------------------------------------------------------------- */

#define ES_X_LIMBS 20  /* 32-bit limbs: 2^-300 .. 2^340 */
#define ES_X_LOW 300   /* the accumulator's unit is 2^-300 */

/* x = m 2^e with m a 24-bit integer (0 for 0). */
static void es_x_split(float x, long long *m, int *e)
{
    unsigned u = es_half_fbits(x), mag = u & 0x7fffffffu, eb = mag >> 23;
    long long v = eb ? (long long)((mag & 0x7fffffu) | 0x800000u) : (long long)mag;
    *e = (eb ? (int)eb : 1) - 150;
    *m = (u >> 31) ? -v : v;
}

long double es_d2int8_exact_dot(const es_gemm_args_t *a, long long i, long long j, long long b)
{
    long long limb[ES_X_LIMBS] = { 0 };
    for (long long p = 0; p < a->k; p++) {
        long long mx, my;
        int ex, ey;
        es_x_split(es_ref_a(a, i, p, b), &mx, &ex);
        es_x_split(es_ref_b(a, p, j, b), &my, &ey);
        long long pr = mx * my; /* 48 bits */
        if (!pr)
            continue;
        int sh = ex + ey + ES_X_LOW; /* >= 2 for fp32 operands */
        es_i128_t v = (es_i128_t)pr * ((es_i128_t)1 << (sh % 32)); /* no shift of a negative */
        for (int l = sh / 32; v != 0 && l < ES_X_LIMBS; l++) {
            limb[l] += (long long)(v % ((es_i128_t)1 << 32));
            v /= ((es_i128_t)1 << 32);
        }
        /* keep limbs small: carry when they grow */
        for (int l = 0; l + 1 < ES_X_LIMBS; l++) {
            long long c = limb[l] / (1LL << 32);
            limb[l] -= c * (1LL << 32);
            limb[l + 1] += c;
        }
    }
    long double r = 0.0L;
    for (int l = ES_X_LIMBS - 1; l >= 0; l--)
        r = r * 4294967296.0L + (long double)limb[l];
    for (int l = 0; l < ES_X_LOW; l++)
        r /= 2.0L;
    return r;
}
