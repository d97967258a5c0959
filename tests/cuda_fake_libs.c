/* cuda_fake_libs.c: fake cuBLAS GEMMs, a fake cuBLASLt and the kernel launchers of
 * cb_kernels.cu, cb_decoder.cu, cb_attention.cu and cb_sample.cu, for test_cuda_engine_logic: the CUDA backend's whole host side (and the
 * engine on it) runs without a GPU.
 *
 * The GEMMs are naive column-major loops with double sums, written from cuBLAS's
 * definitions (C = alpha op(A) op(B) + beta C; beta = 0 never reads C), so a wrong
 * transpose, leading dimension or type in our calls shows as a wrong result. The fake
 * cuBLASLt checks what the real one checks before it runs: attribute sizes, that op(A) is
 * (m, k), op(B) (k, n) and D (m, n), a bias of D's type (as cublasLt.h says), the epilogues
 * we use; cuda_fake_lt_refuse(1) makes its heuristic find no algorithm, as the real one
 * may for a shape. The launchers loop over the same src/kernels/ functions as the grids.
 * Streams run work at once (cuda_fake_runtime.c), so every call computes when made.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cb_launch.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/rope.h"
#include "kernels/rowwise.h"
#include "kernels/sample.h"

/* ---- GEMM ------------------------------------------------------------------------------ */

/* Element (i, j) of op(X) for column-major X with leading dimension ld, of type t. */
static double elem(const void *X, cudaDataType t, int trans, size_t ld, size_t i, size_t j)
{
    size_t at = trans ? j + i * ld : i + j * ld;
    return t == CUDA_R_16BF ? (double)pe_k_from_bf16(((const uint16_t *)X)[at])
                            : (double)((const float *)X)[at];
}

/* C(m, n) = alpha op(A)(m, k) op(B)(k, n) + beta C, column-major; C float or bf16. */
static void gemm_cm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const void *A,
                    cudaDataType at, size_t lda, const void *B, cudaDataType bt, size_t ldb,
                    float beta, void *C, cudaDataType ct, size_t ldc)
{
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t l = 0; l < k; l++)
                s += elem(A, at, ta, lda, i, l) * elem(B, bt, tb, ldb, l, j);
            double c = beta == 0.0f ? 0.0 : elem(C, ct, 0, ldc, i, j);
            float v = (float)((double)alpha * s + (double)beta * c);
            if (ct == CUDA_R_16BF)
                ((uint16_t *)C)[i + j * ldc] = pe_k_to_bf16(v);
            else
                ((float *)C)[i + j * ldc] = v;
        }
}

static int bad_dims(int m, int n, int k, int lda, int ldb, int ldc, int ta, int tb)
{
    return m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) ||
           ldb < 1 || ldc < m || ldc < 1;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc)
{
    (void)h;
    int tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    if (bad_dims(m, n, k, lda, ldb, ldc, tA, tB))
        return CUBLAS_STATUS_INVALID_VALUE;
    gemm_cm(tA, tB, (size_t)m, (size_t)n, (size_t)k, *alpha, A, CUDA_R_32F, (size_t)lda, B,
            CUDA_R_32F, (size_t)ldb, *beta, C, CUDA_R_32F, (size_t)ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batch)
{
    for (int b = 0; b < batch; b++) {
        cublasStatus_t s = cublasSgemm_v2(h, ta, tb, m, n, k, alpha, A + b * sa, lda,
                                          B + b * sb, ldb, beta, C + b * sc, ldc);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)h;
    (void)algo;
    int tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    /* the one combination the backend uses: bf16 inputs, fp32 output and sums */
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F ||
        compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bad_dims(m, n, k, lda, ldb, ldc, tA, tB))
        return CUBLAS_STATUS_INVALID_VALUE;
    gemm_cm(tA, tB, (size_t)m, (size_t)n, (size_t)k, *(const float *)alpha, A, at, (size_t)lda,
            B, bt, (size_t)ldb, *(const float *)beta, C, ct, (size_t)ldc);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ---------------------------------------------------------------------------- */

static atomic_int lt_refuse;
void cuda_fake_lt_refuse(int on) { atomic_store(&lt_refuse, on); }

typedef struct fake_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; /* -1: D's type */
} fake_desc;

typedef struct fake_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
} fake_layout;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = malloc(16);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    fake_desc *f = calloc(1, sizeof *f);
    if (!f)
        return CUBLAS_STATUS_ALLOC_FAILED;
    f->compute = compute;
    f->scale = scale;
    f->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    f->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)(void *)f;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

/* Copies an attribute whose size must be exactly `size`, as the real library checks. */
#define SET_ATTR(field, size)                                                                 \
    do {                                                                                      \
        if (n != (size) || !buf)                                                              \
            return CUBLAS_STATUS_INVALID_VALUE;                                               \
        memcpy(&(field), buf, (size));                                                        \
        return CUBLAS_STATUS_SUCCESS;                                                         \
    } while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
    fake_desc *f = (fake_desc *)(void *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: SET_ATTR(f->transa, sizeof(int32_t));
    case CUBLASLT_MATMUL_DESC_TRANSB: SET_ATTR(f->transb, sizeof(int32_t));
    case CUBLASLT_MATMUL_DESC_EPILOGUE: SET_ATTR(f->epilogue, sizeof(uint32_t));
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET_ATTR(f->bias, sizeof(void *));
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: SET_ATTR(f->bias_type, sizeof(int32_t));
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* nothing else is used */
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)rows || ld < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    fake_layout *f = malloc(sizeof *f);
    if (!f)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *f = (fake_layout){type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)(void *)f;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = malloc(16);
    return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n)
{
    (void)p;
    size_t want = a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? sizeof(uint64_t)
                                                                 : sizeof(uint32_t);
    return buf && n == want ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* The checks of a matmul: shapes agree, the types are a combination we use, the epilogue is
 * one we use and has a bias when it adds one. */
static cublasStatus_t lt_check(const fake_desc *f, const fake_layout *A, const fake_layout *B,
                               const fake_layout *C, const fake_layout *D)
{
    uint64_t am = f->transa ? A->cols : A->rows, ak = f->transa ? A->rows : A->cols;
    uint64_t bk = f->transb ? B->cols : B->rows, bn = f->transb ? B->rows : B->cols;
    if (ak != bk || D->rows != am || D->cols != bn || C->rows != D->rows || C->cols != D->cols ||
        C->type != D->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (f->compute != CUBLAS_COMPUTE_32F || f->scale != CUDA_R_32F || A->type != B->type ||
        (A->type != CUDA_R_32F && A->type != CUDA_R_16BF) ||
        (A->type == CUDA_R_32F && D->type != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const int bias = f->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                     f->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    if (!bias && f->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
        f->epilogue != CUBLASLT_EPILOGUE_RELU)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the bias has D's type (the
     * exceptions are int8 and fp8 kernels, which we do not use) */
    if (bias && f->bias_type != -1 && f->bias_type != (int32_t)D->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *found)
{
    (void)h;
    (void)p;
    *found = 0;
    if (want < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s = lt_check((fake_desc *)(void *)d, (fake_layout *)(void *)A,
                                (fake_layout *)(void *)B, (fake_layout *)(void *)C,
                                (fake_layout *)(void *)D);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (atomic_load(&lt_refuse))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                              cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream)
{
    (void)h;
    (void)ws;
    (void)ws_bytes;
    (void)stream;
    const fake_desc *f = (const fake_desc *)(const void *)d;
    const fake_layout *a = (const void *)Ad, *b = (const void *)Bd, *c = (const void *)Cd;
    const fake_layout *o = (const void *)Dd;
    cublasStatus_t s = lt_check(f, a, b, c, o);
    if (s != CUBLAS_STATUS_SUCCESS || !algo)
        return s != CUBLAS_STATUS_SUCCESS ? s : CUBLAS_STATUS_INVALID_VALUE;
    if (*(const float *)beta != 0.0f || C != D) /* the backend's only use */
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const int bias = f->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                     f->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    const int relu = f->epilogue == CUBLASLT_EPILOGUE_RELU ||
                     f->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    if (bias && !f->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t m = o->rows, n = o->cols, k = f->transa ? a->rows : a->cols;
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            double acc = 0;
            for (size_t l = 0; l < k; l++)
                acc += elem(A, a->type, f->transa, (size_t)a->ld, i, l) *
                       elem(B, b->type, f->transb, (size_t)b->ld, l, j);
            float v = (float)((double)*(const float *)alpha * acc);
            if (bias) /* along D's rows */
                v += f->bias_type == CUDA_R_16BF ? pe_k_from_bf16(((const uint16_t *)f->bias)[i])
                                                 : ((const float *)f->bias)[i];
            if (relu)
                v = pe_k_relu(v);
            if (o->type == CUDA_R_16BF)
                ((uint16_t *)D)[i + j * (size_t)o->ld] = pe_k_to_bf16(v);
            else
                ((float *)D)[i + j * (size_t)o->ld] = v;
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the kernel launchers of cb_kernels.cu, as loops over src/kernels/ ---------------- */

cudaError_t cb_launch_bias_add(cudaStream_t s, float *x, const float *bias, size_t rows,
                               size_t cols)
{
    (void)s;
    for (size_t i = 0; i < rows * cols; i++)
        x[i] = pe_k_add(x[i], bias[i % cols]);
    return cudaSuccess;
}

cudaError_t cb_launch_relu(cudaStream_t s, float *x, size_t n)
{
    (void)s;
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_relu(x[i]);
    return cudaSuccess;
}

cudaError_t cb_launch_gelu(cudaStream_t s, float *x, size_t n)
{
    (void)s;
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_gelu(x[i]);
    return cudaSuccess;
}

cudaError_t cb_launch_residual_add(cudaStream_t s, float *x, const float *r, size_t n)
{
    (void)s;
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_add(x[i], r[i]);
    return cudaSuccess;
}

cudaError_t cb_launch_layernorm(cudaStream_t s, float *out, const float *x, const float *gamma,
                                const float *beta, size_t rows, size_t cols, float eps)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        pe_k_layernorm_row(out + r * cols, x + r * cols, gamma, beta, cols, eps);
    return cudaSuccess;
}

cudaError_t cb_launch_softmax(cudaStream_t s, float *x, size_t rows, size_t cols)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        pe_k_softmax_row(x + r * cols, cols);
    return cudaSuccess;
}

cudaError_t cb_launch_embedding(cudaStream_t s, float *out, const void *table, int bf16,
                                const int32_t *ids, size_t n, size_t dim, size_t vocab,
                                size_t row0, size_t nrows, int32_t *bad)
{
    (void)s;
    for (size_t r = 0; r < n; r++) /* every id first, as the check grid */
        if (!pe_k_id_in_range(ids[r], vocab) && (int32_t)r < *bad)
            *bad = (int32_t)r;
    for (size_t r = 0; r < n && *bad == INT32_MAX; r++)
        pe_k_embedding_shard_row(out + r * dim, table, bf16, (size_t)ids[r], row0, nrows, dim);
    return cudaSuccess;
}

cudaError_t cb_launch_to_bf16(cudaStream_t s, uint16_t *out, const float *in, size_t n)
{
    (void)s;
    for (size_t i = 0; i < n; i++)
        out[i] = pe_k_to_bf16(in[i]);
    return cudaSuccess;
}

/* ---- the decoder launchers (cb_decoder.cu, cb_attention.cu, cb_sample.cu) ---------------- */

#ifndef PE_CUDA_EMU /* test_cuda_emu runs the grids themselves, emulated (cuda_emu.hpp) */

cudaError_t cb_launch_rmsnorm(cudaStream_t s, float *out, const float *x, const float *w,
                              size_t rows, size_t cols, float eps)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        pe_k_rmsnorm_row(out + r * cols, x + r * cols, w, cols, eps);
    return cudaSuccess;
}

cudaError_t cb_launch_rope(cudaStream_t s, float *x, size_t rows, size_t stride, size_t nheads,
                           size_t head_dim, const int32_t *pos, const float *inv_freq)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        for (size_t h = 0; h < nheads; h++)
            pe_k_rope_head(x + r * stride + h * head_dim, (int)head_dim, pos[r], inv_freq);
    return cudaSuccess;
}

cudaError_t cb_launch_silu_mul(cudaStream_t s, float *out, const float *gate_up, size_t rows,
                               size_t n)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < n; c++)
            out[r * n + c] = pe_k_silu_mul(gate_up[r * 2 * n + c], gate_up[r * 2 * n + n + c]);
    return cudaSuccess;
}

cudaError_t cb_launch_kv_append(cudaStream_t s, void *pool, int bf16, pe_k_kv_shape shape,
                                int layer, const float *k, const float *v, size_t stride,
                                const int32_t *slots, size_t rows)
{
    (void)s;
    const size_t hd = (size_t)shape.head_dim;
    for (size_t r = 0; r < rows; r++) {
        int32_t slot = slots[r];
        if (slot < 0 || (size_t)slot >= shape.nblocks * (size_t)shape.block_tokens)
            continue; /* as the grid: never outside the pool */
        int32_t block = slot / shape.block_tokens;
        int row = (int)(slot % shape.block_tokens);
        for (int h = 0; h < shape.kv_heads; h++)
            for (size_t d = 0; d < hd; d++) {
                size_t src = r * stride + (size_t)h * hd + d;
                pe_k_kv_store(pool, bf16, pe_k_kv_index(shape, block, layer, 0, h, row) + d,
                              k[src]);
                pe_k_kv_store(pool, bf16, pe_k_kv_index(shape, block, layer, 1, h, row) + d,
                              v[src]);
            }
    }
    return cudaSuccess;
}

/* Every row through the naive twin, the chunk found as the grids find it (the first that
 * holds the row). The split workspace is not used. */
cudaError_t cb_launch_attention(cudaStream_t s, const cb_attn_args *a, float *ws,
                                size_t ws_floats, int sms)
{
    (void)s, (void)ws, (void)ws_floats, (void)sms;
    const int group = a->heads / a->shape.kv_heads, hd = a->shape.head_dim;
    for (size_t r = 0; r < a->rows; r++) {
        const int32_t *c = NULL;
        for (size_t i = 0; i < a->nchunks && !c; i++) {
            const int32_t *f = a->chunks + i * PE_K_CHUNK_FIELDS;
            if (f[PE_K_CHUNK_ROW0] >= 0 && f[PE_K_CHUNK_N] > 0 &&
                (size_t)f[PE_K_CHUNK_ROW0] <= r &&
                r < (size_t)f[PE_K_CHUNK_ROW0] + (size_t)f[PE_K_CHUNK_N])
                c = f;
        }
        if (!c)
            continue;
        int32_t qpos = c[PE_K_CHUNK_POS0] + (int32_t)(r - (size_t)c[PE_K_CHUNK_ROW0]);
        if (qpos < 0)
            continue;
        float *scores = malloc(((size_t)qpos + 1) * sizeof *scores);
        if (!scores)
            return cudaErrorMemoryAllocation;
        for (int h = 0; h < a->heads; h++)
            pe_k_attend_naive(a->out + r * a->out_stride + (size_t)h * (size_t)hd,
                              a->q + r * a->q_stride + (size_t)h * (size_t)hd, a->pool, a->bf16,
                              a->shape, a->layer, h / group, a->block_tables + c[PE_K_CHUNK_BT],
                              qpos, a->window, a->scale, scores);
        free(scores);
    }
    return cudaSuccess;
}

cudaError_t cb_launch_argmax(cudaStream_t s, const float *x, size_t rows, size_t n,
                             int32_t *idx)
{
    (void)s;
    for (size_t r = 0; r < rows; r++)
        idx[r] = pe_k_argmax_row(x + r * n, (int32_t)n);
    return cudaSuccess;
}

cudaError_t cb_launch_topk(cudaStream_t s, const float *x, size_t rows, size_t n, size_t k,
                           int32_t *idx, float *val, float *lse)
{
    (void)s;
    for (size_t r = 0; r < rows; r++) {
        if (k)
            pe_k_topk_row(x + r * n, (int32_t)n, (int32_t)k, idx + r * k, val + r * k);
        if (lse)
            lse[r] = pe_k_logsumexp_row(x + r * n, (int32_t)n);
    }
    return cudaSuccess;
}

cudaError_t cb_launch_penalize(cudaStream_t s, float *x, size_t rows, size_t n, int32_t id0,
                               const pe_k_penalty *p, size_t count)
{
    (void)s;
    pe_k_penalize_rows(x, (int32_t)rows, (int32_t)n, id0, p, (int32_t)count);
    return cudaSuccess;
}

cudaError_t cb_launch_mask(cudaStream_t s, float *x, size_t rows, size_t n, int32_t id0,
                           const int32_t *row_mask, const uint32_t *bits, size_t words)
{
    (void)s;
    pe_k_mask_rows(x, (int32_t)rows, (int32_t)n, id0, row_mask, bits, (int32_t)words);
    return cudaSuccess;
}

cudaError_t cb_launch_sample(cudaStream_t s, const float *x, size_t rows, size_t n,
                             const pe_k_sampling *params, int32_t *tokens, float *logit)
{
    (void)s;
    float *w = malloc((n ? n : 1) * sizeof *w), mass[256];
    uint32_t hist[256];
    if (!w)
        return cudaErrorMemoryAllocation;
    for (size_t r = 0; r < rows; r++) {
        tokens[r] = pe_k_sample_row(x + r * n, (int32_t)n, params[r], w, hist, mass);
        if (logit)
            logit[r] = x[r * n + (size_t)tokens[r]];
    }
    free(w);
    return cudaSuccess;
}
#endif
