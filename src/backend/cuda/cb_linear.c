/* cb_linear.c: a Linear layer, y = act(x W^T + b), as one cuBLASLt matmul whose epilogue
 * adds the bias, applies ReLU and writes bf16 when the next GEMM wants it: one pass over
 * the output instead of the GEMM's plus one per bias, activation and rounding.
 *
 * Row-major y(M, N) = x(M, K) W(N, K)^T is, read column-major, y^T(N, M) = W x^T with W
 * (stored (N, K), ld K) transposed and x^T (K, M, ld K) as it is: cuBLASLt's A is W with
 * TRANSA = T, its B is x, its D is y (N rows of the column-major view, ld N), and the
 * epilogue's bias runs along D's rows, i.e. along N: the layer's bias.
 *
 * GELU is not left to cuBLASLt: its epilogue's GELU is NVIDIA's, not pe_k_gelu, and the
 * host tests check only our math. A GELU layer gets the bias in the epilogue, then our
 * gelu kernel and, for a bf16 output, to_bf16. ReLU is max(x, 0) everywhere.
 *
 * The bias is fp32 (the model's), and cublasLt.h (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)
 * says a bf16 kernel's bias has D's type. When the heuristic refuses a bf16 D with our
 * bias, the plan is made again with an fp32 D written into tmp, and to_bf16 rounds it:
 * bias and ReLU still in the epilogue, one rounding pass more (cb_linear_counts.rounded).
 *
 * Plans (descriptors and the algorithm cuBLASLt's heuristic picked) are cached per device
 * by shape, types, epilogue and pointer alignment; a decode step calls the same few shapes
 * again and again, and the heuristic query costs tens of microseconds. Where cuBLASLt has
 * no algorithm (CUBLAS_STATUS_NOT_SUPPORTED, or none returned), or the matmul itself
 * refuses, the plan is marked unfused and the layer runs as separate ops
 * (be_linear_unfused): same results, more passes; cb_linear_plans counts each kind so the
 * benchmark can say which ran. The handle and the workspace are made when the device
 * opens, and the fp32 buffer a bf16 output may pass through is the caller's: nothing is
 * allocated on the device during a forward, where a cudaMalloc/cudaFree could wait behind
 * NCCL kernels of other workers.
 */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "backend/cuda/cb_internal.h"

#define CB_LT_PLANS 32                     /* cached plans per device */
#define CB_LT_WORKSPACE ((size_t)32 << 20) /* bytes: what Hopper's kernels ask for at most */

typedef struct cb_lt_plan {
    /* the key */
    size_t M, N, K;
    pe_dtype dtype;
    int out_bf16, has_bias, relu;
    unsigned align;      /* bytes, the smallest alignment of x, W and D (at most 256) */
    unsigned bias_align; /* bytes, of b: the heuristic reads the bias pointer's too */
    /* the plan */
    int used, fused;
    int d_fp32; /* out_bf16, but D is fp32 (into tmp) and to_bf16 follows: see the top */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} cb_lt_plan;

struct cb_lt {
    cublasLtHandle_t handle;
    void *workspace; /* (CB_LT_WORKSPACE) bytes on the device */
    cb_lt_plan plans[CB_LT_PLANS];
    int next;                /* the slot the next new plan replaces */
    cb_linear_counts counts; /* plans made of each kind */
};

static unsigned alignment(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    unsigned a = 256;
    while (a > 1 && u % a)
        a /= 2;
    return a;
}

static void plan_free_descriptors(cb_lt_plan *p)
{
    if (p->d)
        (void)cublasLtMatrixLayoutDestroy(p->d);
    if (p->b)
        (void)cublasLtMatrixLayoutDestroy(p->b);
    if (p->a)
        (void)cublasLtMatrixLayoutDestroy(p->a);
    if (p->op)
        (void)cublasLtMatmulDescDestroy(p->op);
    p->d = p->b = p->a = NULL;
    p->op = NULL;
}

static void plan_free(cb_lt_plan *p)
{
    plan_free_descriptors(p);
    memset(p, 0, sizeof *p);
}

void cb_linear_release(be_device *dev)
{
    struct cb_lt *lt = dev->lt;
    if (!lt)
        return;
    for (int i = 0; i < CB_LT_PLANS; i++)
        plan_free(&lt->plans[i]);
    if (lt->workspace)
        (void)cudaFree(lt->workspace);
    if (lt->handle)
        (void)cublasLtDestroy(lt->handle);
    free(lt);
    dev->lt = NULL;
}

void cb_linear_plans(const be_device *dev, cb_linear_counts *out)
{
    *out = dev->lt ? dev->lt->counts : (cb_linear_counts){0, 0, 0};
}

pe_status cb_linear_prepare(be_device *dev, pe_err *err)
{
    struct cb_lt *lt = calloc(1, sizeof *lt);
    if (!lt)
        return pe_fail(err, PE_ENOMEM, "out of host memory for cuBLASLt on CUDA device %d",
                       dev->id);
    dev->lt = lt;
    cublasStatus_t b = cublasLtCreate(&lt->handle);
    if (b != CUBLAS_STATUS_SUCCESS) {
        lt->handle = NULL;
        cb_linear_release(dev);
        return cb_blas_fail(err, b, "cublasLtCreate", dev->id);
    }
    cudaError_t e = cudaMalloc(&lt->workspace, CB_LT_WORKSPACE);
    if (e != cudaSuccess) {
        lt->workspace = NULL;
        cb_linear_release(dev);
        return cb_cuda_fail(err, e, "cudaMalloc (cuBLASLt workspace, 32 MiB)", dev->id);
    }
    return PE_OK;
}

#define LT_SET(call)                                                                          \
    do {                                                                                      \
        if (b == CUBLAS_STATUS_SUCCESS)                                                       \
            b = (call);                                                                       \
    } while (0)

/* Fills p's descriptors, D of type `out`, and asks the heuristic for an algorithm;
 * p->fused says whether it gave one. Returns the status of the first descriptor call that
 * failed for another reason than "not supported" (those are our bugs, not the shape's). */
static cublasStatus_t plan_try(struct cb_lt *lt, cb_lt_plan *p, const float *bias,
                               cudaDataType_t out)
{
    const cudaDataType_t in = p->dtype == PE_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType_t bias_type = CUDA_R_32F;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->has_bias ? (p->relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                    : CUBLASLT_EPILOGUE_BIAS)
                                         : (p->relu ? CUBLASLT_EPILOGUE_RELU
                                                    : CUBLASLT_EPILOGUE_DEFAULT);
    cublasStatus_t b = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    LT_SET(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_SET(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_SET(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                          sizeof epi));
    if (p->has_bias) {
        LT_SET(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &bias_type, sizeof bias_type));
        LT_SET(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    }
    /* column-major views: A = W^T (K, N), B = x^T (K, M), D = y^T (N, M) */
    LT_SET(cublasLtMatrixLayoutCreate(&p->a, in, p->K, p->N, (int64_t)p->K));
    LT_SET(cublasLtMatrixLayoutCreate(&p->b, in, p->K, p->M, (int64_t)p->K));
    LT_SET(cublasLtMatrixLayoutCreate(&p->d, out, p->N, p->M, (int64_t)p->N));
    cublasLtMatmulPreference_t pref = NULL;
    LT_SET(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = CB_LT_WORKSPACE; /* the attribute is a uint64_t */
    const uint32_t al = p->align;
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws, sizeof ws));
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al, sizeof al));
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al, sizeof al));
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al, sizeof al));
    LT_SET(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al, sizeof al));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    /* Any answer but an algorithm means separate ops: the heuristic also answers
     * CUBLAS_STATUS_INVALID_VALUE for shapes and types it will not take. */
    cublasStatus_t h = b;
    if (b == CUBLAS_STATUS_SUCCESS)
        h = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->a, p->b, p->d, p->d, pref, 1,
                                           &r, &found);
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    p->fused = h == CUBLAS_STATUS_SUCCESS && found > 0 && r.state == CUBLAS_STATUS_SUCCESS;
    if (p->fused)
        p->algo = r.algo;
    return b == CUBLAS_STATUS_NOT_SUPPORTED ? CUBLAS_STATUS_SUCCESS : b;
}

/* p's descriptors and algorithm: D in the layer's output type, else (a bf16 output with a
 * bias, which cuBLASLt may want in bf16) an fp32 D that to_bf16 rounds afterwards. */
static cublasStatus_t plan_make(struct cb_lt *lt, cb_lt_plan *p, const float *bias)
{
    cublasStatus_t b = plan_try(lt, p, bias, p->out_bf16 ? CUDA_R_16BF : CUDA_R_32F);
    if (b == CUBLAS_STATUS_SUCCESS && !p->fused && p->out_bf16 && p->has_bias) {
        plan_free_descriptors(p);
        b = plan_try(lt, p, bias, CUDA_R_32F);
        p->d_fp32 = p->fused;
    }
    return b;
}

/* The counter of p's kind in lt->counts. */
static long *plan_kind(struct cb_lt *lt, const cb_lt_plan *p)
{
    if (!p->fused)
        return &lt->counts.unfused;
    return p->d_fp32 ? &lt->counts.rounded : &lt->counts.fused;
}

/* The cached plan for this call, made on first use (host-side descriptors only). */
static pe_status plan_for(be_device *dev, struct cb_lt *lt, const cb_lt_plan *key,
                          const float *bias, cb_lt_plan **out)
{
    for (int i = 0; i < CB_LT_PLANS; i++) {
        cb_lt_plan *p = &lt->plans[i];
        if (p->used && p->M == key->M && p->N == key->N && p->K == key->K &&
            p->dtype == key->dtype && p->out_bf16 == key->out_bf16 &&
            p->has_bias == key->has_bias && p->relu == key->relu && p->align == key->align &&
            p->bias_align == key->bias_align) {
            *out = p;
            return PE_OK;
        }
    }
    cb_lt_plan *p = &lt->plans[lt->next];
    lt->next = (lt->next + 1) % CB_LT_PLANS;
    plan_free(p);
    *p = *key;
    cublasStatus_t b = plan_make(lt, p, bias);
    if (b != CUBLAS_STATUS_SUCCESS) {
        plan_free(p);
        return cb_blas_fail(&dev->err, b, "cuBLASLt plan for linear", dev->id);
    }
    p->used = 1;
    (*plan_kind(lt, p))++;
    *out = p;
    return PE_OK;
}

pe_status cb_linear(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                    const void *x, const void *W, const float *b, be_act act, void *y,
                    int y_bf16, float *tmp)
{
    if (y_bf16 && (dtype != PE_DTYPE_BF16 || !tmp))
        return pe_fail(&dev->err, PE_EINVAL, "linear: a bf16 output needs dtype bf16 and a "
                                             "tmp buffer of M x N floats");
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return pe_fail(&dev->err, PE_EINVAL,
                       "linear: M=%zu N=%zu K=%zu exceed cuBLASLt's range; split the layer",
                       M, N, K);
    if (M == 0 || N == 0)
        return PE_OK;
    struct cb_lt *lt = dev->lt;
    const int gelu = act == BE_ACT_GELU;
    const int out_bf16 = y_bf16 && !gelu; /* GELU runs on fp32, then rounds */
    cb_lt_plan key = {.M = M, .N = N, .K = K, .dtype = dtype, .out_bf16 = out_bf16,
                      .has_bias = b != NULL, .relu = act == BE_ACT_RELU,
                      .align = alignment(x), .bias_align = b ? alignment(b) : 256};
    if (alignment(W) < key.align)
        key.align = alignment(W);
    if (alignment(y) < key.align)
        key.align = alignment(y);
    if (y_bf16 && alignment(tmp) < key.align) /* D is tmp for GELU and for d_fp32 plans */
        key.align = alignment(tmp);
    cb_lt_plan *p = NULL;
    pe_status s = K == 0 ? PE_OK : plan_for(dev, lt, &key, b, &p); /* K = 0: no cuBLASLt */
    if (s != PE_OK)
        return s;
    if (!p || !p->fused)
        return be_linear_unfused(be_cuda_ops(), dev, dtype, M, N, K, x, W, b, act, y, y_bf16,
                                 tmp);
    const int d_bf16 = out_bf16 && !p->d_fp32;
    float *d32 = y_bf16 ? tmp : (float *)y; /* the fp32 result when the epilogue cannot
                                              * finish: GELU and/or the rounding follow */
    void *d = d_bf16 ? y : (void *)d32;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (b)
        st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b,
                                            sizeof b);
    const float one = 1.0f, zero = 0.0f;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(lt->handle, p->op, &one, W, p->a, x, p->b, &zero, d, p->d, d, p->d,
                            &p->algo, lt->workspace, CB_LT_WORKSPACE, dev->stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* the algorithm refused these pointers */
        (*plan_kind(lt, p))--;
        p->fused = 0;
        (*plan_kind(lt, p))++;
        return be_linear_unfused(be_cuda_ops(), dev, dtype, M, N, K, x, W, b, act, y, y_bf16,
                                 tmp);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return cb_blas_fail(&dev->err, st, "cublasLtMatmul (linear)", dev->id);
    if (gelu && (s = cb_gelu(dev, d32, M * N)) != PE_OK)
        return s;
    if (y_bf16 && !d_bf16)
        s = cb_to_bf16(dev, y, d32, M * N);
    return s;
}
