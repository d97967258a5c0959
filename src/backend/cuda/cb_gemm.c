/* cb_gemm.c: row-major GEMM on cuBLAS (column-major) by the transpose identity: fp32
 * (cublasSgemm) and bf16 inputs with fp32 output and accumulation (cublasGemmEx).
 *
 * A row-major X(r, c) with row stride ld is, read column-major, X^T(c, r) with leading
 * dimension ld. So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
 * cuBLAS gets (B, A) swapped, m = N, n = M, and the same transpose flags.
 */
#include <limits.h>

#include "backend/cuda/cb_internal.h"

static cublasOperation_t op_of(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* Sizes and leading dimensions: cuBLAS takes int; rows of at least the stored length. */
static pe_status check_shape(be_device *dev, const char *what, int trans_a, int trans_b,
                             size_t M, size_t N, size_t K, size_t lda, size_t ldb, size_t ldc)
{
    size_t need_a = trans_a ? M : K, need_b = trans_b ? K : N;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return pe_fail(&dev->err, PE_EINVAL,
                       "%s: M=%zu N=%zu K=%zu (lda %zu, ldb %zu, ldc %zu) exceed cuBLAS's int "
                       "range; split the product",
                       what, M, N, K, lda, ldb, ldc);
    if (lda < (need_a ? need_a : 1) || ldb < (need_b ? need_b : 1) || ldc < (N ? N : 1))
        return pe_fail(&dev->err, PE_EINVAL,
                       "%s: leading dimensions too small (lda %zu < %zu, ldb %zu < %zu or "
                       "ldc %zu < %zu) for M=%zu N=%zu K=%zu trans_a=%d trans_b=%d",
                       what, lda, need_a, ldb, need_b, ldc, N, M, N, K, trans_a, trans_b);
    return PE_OK;
}

pe_status cb_gemm(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, const float *A, size_t lda, const float *B, size_t ldb,
                  float beta, float *C, size_t ldc)
{
    pe_status s = check_shape(dev, "gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (s != PE_OK || M == 0 || N == 0)
        return s;
    cublasStatus_t b = cublasSgemm(dev->blas, op_of(trans_b), op_of(trans_a), (int)N, (int)M,
                                   (int)K, &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
    if (b != CUBLAS_STATUS_SUCCESS)
        return cb_blas_fail(&dev->err, b, "cublasSgemm", dev->id);
    return PE_OK;
}

pe_status cb_gemm_strided_batched(be_device *dev, int trans_a, int trans_b, size_t M,
                                  size_t N, size_t K, float alpha, const float *A, size_t lda,
                                  size_t stride_a, const float *B, size_t ldb, size_t stride_b,
                                  float beta, float *C, size_t ldc, size_t stride_c,
                                  size_t batch)
{
    pe_status s = check_shape(dev, "gemm_strided_batched", trans_a, trans_b, M, N, K, lda, ldb,
                              ldc);
    if (s != PE_OK)
        return s;
    if (batch > INT_MAX || stride_a > LLONG_MAX || stride_b > LLONG_MAX || stride_c > LLONG_MAX)
        return pe_fail(&dev->err, PE_EINVAL,
                       "gemm_strided_batched: batch %zu or a stride exceeds cuBLAS's range",
                       batch);
    if (M == 0 || N == 0 || batch == 0)
        return PE_OK;
    cublasStatus_t b = cublasSgemmStridedBatched(
        dev->blas, op_of(trans_b), op_of(trans_a), (int)N, (int)M, (int)K, &alpha, B, (int)ldb,
        (long long)stride_b, A, (int)lda, (long long)stride_a, &beta, C, (int)ldc,
        (long long)stride_c, (int)batch);
    if (b != CUBLAS_STATUS_SUCCESS)
        return cb_blas_fail(&dev->err, b, "cublasSgemmStridedBatched", dev->id);
    return PE_OK;
}

/* bf16 A, B; fp32 C; CUBLAS_COMPUTE_32F: tensor cores, fp32 accumulation. */
pe_status cb_gemm_bf16(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, const uint16_t *A, size_t lda, const uint16_t *B,
                       size_t ldb, float beta, float *C, size_t ldc)
{
    pe_status s = check_shape(dev, "gemm_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (s != PE_OK || M == 0 || N == 0)
        return s;
    cublasStatus_t b = cublasGemmEx(dev->blas, op_of(trans_b), op_of(trans_a), (int)N, (int)M,
                                    (int)K, &alpha, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF,
                                    (int)lda, &beta, C, CUDA_R_32F, (int)ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (b != CUBLAS_STATUS_SUCCESS)
        return cb_blas_fail(&dev->err, b, "cublasGemmEx (bf16)", dev->id);
    return PE_OK;
}
