/* hb_gemm.c: row-major fp32 GEMM on OpenBLAS: sgemm, or sgemv when M or N is 1; bf16
 * operands are widened to fp32 first (exact), so only the float sums' order differs from
 * cuBLAS's bf16 GEMM.
 *
 * OpenBLAS runs with one thread, so every call computes on the calling worker's thread:
 * each worker uses the cores it is bound to and workers do not fight over a shared BLAS
 * thread pool. It is the pthread build (see CMakeLists.txt): Debian's serial build is not
 * safe when several workers call it at once.
 */
#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/hb_internal.h"
#include "kernels/bf16.h"

static size_t max1(size_t x) { return x ? x : 1; }

static void blas_one_thread(void) { openblas_set_num_threads(1); }

void hb_gemm_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_one_thread);
}

/* Checks shapes and strides of one GEMM; on failure the message names the argument. */
static pe_status check_gemm(be_device *dev, int ta, int tb, size_t M, size_t N, size_t K,
                            const void *A, size_t lda, const void *B, size_t ldb,
                            const float *C, size_t ldc)
{
    size_t a_row = ta ? M : K; /* stored row length of A: (M, K), or (K, M) if transposed */
    size_t b_row = tb ? K : N; /* B: (K, N), or (N, K) if transposed */
    if (M > HB_BLAS_MAX || N > HB_BLAS_MAX || K > HB_BLAS_MAX || lda > HB_BLAS_MAX ||
        ldb > HB_BLAS_MAX || ldc > HB_BLAS_MAX)
        return hb_fail(dev, PE_EINVAL,
                       "gemm M=%zu N=%zu K=%zu lda=%zu ldb=%zu ldc=%zu: a value exceeds what "
                       "BLAS accepts (%zu); split the product",
                       M, N, K, lda, ldb, ldc, HB_BLAS_MAX);
    if (lda < max1(a_row))
        return hb_fail(dev, PE_EINVAL,
                       "gemm: lda=%zu is shorter than a stored row of A (%zu = %s, trans_a=%d); "
                       "lda must be >= %zu",
                       lda, a_row, ta ? "M" : "K", ta, max1(a_row));
    if (ldb < max1(b_row))
        return hb_fail(dev, PE_EINVAL,
                       "gemm: ldb=%zu is shorter than a stored row of B (%zu = %s, trans_b=%d); "
                       "ldb must be >= %zu",
                       ldb, b_row, tb ? "K" : "N", tb, max1(b_row));
    if (ldc < max1(N))
        return hb_fail(dev, PE_EINVAL, "gemm: ldc=%zu is shorter than a row of C (N=%zu)", ldc,
                       N);
    if (M && N && !C)
        return hb_fail(dev, PE_EINVAL, "gemm %zux%zu: C is NULL", M, N);
    if (M && N && K && (!A || !B))
        return hb_fail(dev, PE_EINVAL, "gemm %zux%zux%zu: %s is NULL", M, N, K, A ? "B" : "A");
    return PE_OK;
}

/* C(M, N) *= beta, where beta == 0 writes zeros (BLAS semantics: C is not read). */
static void scale_c(float *C, size_t M, size_t N, size_t ldc, float beta)
{
    for (size_t i = 0; i < M; i++) {
        float *row = C + i * ldc;
        if (beta == 0.0f)
            memset(row, 0, N * sizeof *row);
        else if (beta != 1.0f)
            for (size_t j = 0; j < N; j++)
                row[j] *= beta;
    }
}

/* One GEMM whose arguments were checked. */
static void gemm_checked(int ta, int tb, size_t M, size_t N, size_t K, float alpha,
                         const float *A, size_t lda, const float *B, size_t ldb, float beta,
                         float *C, size_t ldc)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0 || alpha == 0.0f) {
        scale_c(C, M, N, ldc, beta);
        return;
    }
    if (M == 1 || N == 1) {
        /* sgemv; with beta == 0 zero y first so that NaNs in C never leak in. */
        if (beta == 0.0f)
            scale_c(C, M, N, ldc, 0.0f);
        if (M == 1) {
            /* C(1, N) row: y(N) = op(B)^T x, x = row of op(A): stride 1, or lda when A is (K, 1) */
            blasint incx = ta ? (blasint)lda : 1;
            cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? (blasint)N : (blasint)K,
                        tb ? (blasint)K : (blasint)N, alpha, B, (blasint)ldb, A, incx, beta, C, 1);
        } else {
            /* C(M, 1) column with stride ldc: y(M) = op(A) x, x = column of op(B) */
            blasint incx = tb ? 1 : (blasint)ldb;
            cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, ta ? (blasint)K : (blasint)M,
                        ta ? (blasint)M : (blasint)K, alpha, A, (blasint)lda, B, incx, beta, C,
                        (blasint)ldc);
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
}

pe_status hb_gemm(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, const float *A, size_t lda, const float *B, size_t ldb,
                  float beta, float *C, size_t ldc)
{
    pe_status s = check_gemm(dev, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (s != PE_OK)
        return s;
    gemm_checked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return PE_OK;
}

pe_status hb_gemm_strided_batched(be_device *dev, int trans_a, int trans_b, size_t M,
                                  size_t N, size_t K, float alpha, const float *A, size_t lda,
                                  size_t stride_a, const float *B, size_t ldb, size_t stride_b,
                                  float beta, float *C, size_t ldc, size_t stride_c,
                                  size_t batch)
{
    if (batch == 0)
        return PE_OK;
    pe_status s = check_gemm(dev, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (s != PE_OK)
        return s;
    /* Inputs may be shared (stride 0 broadcasts); outputs must not overlap. */
    size_t c_span = M && N ? (M - 1) * ldc + N : 0;
    if (batch > 1 && c_span && stride_c < c_span)
        return hb_fail(dev, PE_EINVAL,
                       "gemm_strided_batched: stride_c=%zu is smaller than one C matrix "
                       "((M-1)*ldc+N = %zu), so the %zu outputs would overlap",
                       stride_c, c_span, batch);
    for (size_t b = 0; b < batch; b++)
        gemm_checked(trans_a, trans_b, M, N, K, alpha, A ? A + b * stride_a : NULL, lda,
                     B ? B + b * stride_b : NULL, ldb, beta, C + b * stride_c, ldc);
    return PE_OK;
}

/* dst(rows, cols) dense = src(rows, cols) with row stride ld, widened to fp32. */
static void widen(float *dst, const uint16_t *src, size_t rows, size_t cols, size_t ld)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            dst[i * cols + j] = pe_k_from_bf16(src[i * ld + j]);
}

pe_status hb_gemm_bf16(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, const uint16_t *A, size_t lda, const uint16_t *B,
                       size_t ldb, float beta, float *C, size_t ldc)
{
    pe_status s = check_gemm(dev, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (s != PE_OK || M == 0 || N == 0)
        return s;
    size_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K; /* as stored */
    size_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    size_t need = a_rows * a_cols + b_rows * b_cols;
    if (need > dev->widened_cap) {
        float *p = realloc(dev->widened, need * sizeof *p);
        if (!p)
            return hb_fail(dev, PE_ENOMEM,
                           "gemm_bf16 %zux%zux%zu: out of host memory widening the operands",
                           M, N, K);
        dev->widened = p;
        dev->widened_cap = need;
    }
    float *a = dev->widened, *b = dev->widened + a_rows * a_cols;
    widen(a, A, a_rows, a_cols, lda);
    widen(b, B, b_rows, b_cols, ldb);
    gemm_checked(trans_a, trans_b, M, N, K, alpha, a, max1(a_cols), b, max1(b_cols), beta, C,
                 ldc);
    return PE_OK;
}
