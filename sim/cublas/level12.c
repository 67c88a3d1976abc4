/* simcuda cuBLAS: level 1 and level 2 routines (Sgemv, Saxpy, Sscal, Sdot,
 * Snrm2, Ssymv) on host memory, each with a fixed summation order; Ssymv
 * takes the order of its column contributions from the caller so that the
 * API layer can reproduce the atomics mode (see gemm.h). */
#include "sim/cublas/gemm.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Offset of logical element i of an n-vector with increment inc. */
static inline int64_t vi(int64_t i, int64_t n, int64_t inc)
{
    return inc > 0 ? i * inc : (n - 1 - i) * (-inc);
}

void sim_sgemv(int trans, int64_t m, int64_t n, float alpha, const float *A, int64_t lda,
               const float *x, int64_t incx, float beta, float *y, int64_t incy)
{
    int64_t leny = trans ? n : m, lenx = trans ? m : n;
    if (leny <= 0)
        return;
    if (lenx <= 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < leny; i++) {
            float *yi = &y[vi(i, leny, incy)];
            *yi = beta == 0.0f ? 0.0f : beta * *yi;
        }
        return;
    }
    float *t = calloc((size_t)leny, sizeof(float));
    if (!t)
        return;
    if (!trans) {
        /* t_i = sum_j A(i,j) x_j, j ascending. */
        for (int64_t j = 0; j < n; j++) {
            float xj = x[vi(j, n, incx)];
            const float *col = A + j * lda;
            for (int64_t i = 0; i < m; i++)
                t[i] += col[i] * xj;
        }
    } else {
        /* t_j = sum_i A(i,j) x_i, i ascending. */
        for (int64_t j = 0; j < n; j++) {
            const float *col = A + j * lda;
            float s = 0.0f;
            for (int64_t i = 0; i < m; i++)
                s += col[i] * x[vi(i, m, incx)];
            t[j] = s;
        }
    }
    for (int64_t i = 0; i < leny; i++) {
        float *yi = &y[vi(i, leny, incy)];
        *yi = beta == 0.0f ? alpha * t[i] : alpha * t[i] + beta * *yi;
    }
    free(t);
}

void sim_saxpy(int64_t n, float alpha, const float *x, int64_t incx, float *y, int64_t incy)
{
    if (alpha == 0.0f)
        return;
    for (int64_t i = 0; i < n; i++)
        y[vi(i, n, incy)] += alpha * x[vi(i, n, incx)];
}

void sim_sscal(int64_t n, float alpha, float *x, int64_t incx)
{
    for (int64_t i = 0; i < n; i++)
        x[vi(i, n, incx)] *= alpha;
}

float sim_sdot(int64_t n, const float *x, int64_t incx, const float *y, int64_t incy)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += x[vi(i, n, incx)] * y[vi(i, n, incy)];
    return s;
}

float sim_snrm2(int64_t n, const float *x, int64_t incx)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[vi(i, n, incx)];
        s += v * v;
    }
    return (float)sqrt(s);
}

int sim_ssymv(int upper, int64_t n, float alpha, const float *A, int64_t lda, const float *x,
              int64_t incx, float beta, float *y, int64_t incy, const int64_t *order)
{
    if (n <= 0)
        return 0;
    float *t = calloc((size_t)n, sizeof(float));
    if (!t)
        return -ENOMEM;
    if (alpha != 0.0f) {
        /* Contribution of column j: t_i += A(i,j) x_j for every row i, where
         * A(i,j) comes from the stored triangle. */
        for (int64_t q = 0; q < n; q++) {
            int64_t j = order ? order[q] : q;
            float xj = x[vi(j, n, incx)];
            for (int64_t i = 0; i < n; i++) {
                int stored = upper ? i <= j : i >= j;
                float aij = stored ? A[i + j * lda] : A[j + i * lda];
                t[i] += aij * xj;
            }
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float *yi = &y[vi(i, n, incy)];
        *yi = beta == 0.0f ? alpha * t[i] : alpha * t[i] + beta * *yi;
    }
    free(t);
    return 0;
}
