/* test_gemm.c: host GEMM against a naive triple loop in double: all four transpose
 * combinations, odd shapes, the M = 1 and N = 1 (gemv) paths, alpha/beta (beta = 0 never
 * reads C), row strides longer than the rows, strided batches, argument checks, and the
 * bf16-input GEMM against the same loop over the rounded inputs, and linear (GEMM, bias,
 * activation, rounding to bf16) against a naive Linear: both of its paths (the GEMV kernel
 * for decode-shaped M, the sliced sgemm beyond), fp32 and bf16 weights, on 1 and 2
 * threads, and the GEMV's independence of M and of the thread count.
 *
 * Tolerance, per element: |C - ref| <= 2 (K + 2) eps_float (|alpha| sum_k |a_ik b_kj| +
 * |beta c_ij|) + tiny, the classic bound for a float dot product of length K.
 */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host/hb_amx.h"
#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"

static const be_ops *ops;
static hb_linear_path linear_path; /* check_linear's path: AUTO is ops->linear */
static const float SENTINEL = 12345.5f; /* fills the gaps between ld and the row length */

static int setup(void **state)
{
    be_device *dev = NULL;
    pe_err err = {{0}};
    if (ops->open(0, &dev, &err) != PE_OK)
        return -1;
    *state = dev;
    return 0;
}

static int teardown(void **state)
{
    ops->close(*state);
    return 0;
}

/* A stored matrix of rows x cols with row stride ld, random inside, SENTINEL in the gap. */
static float *matrix(size_t rows, size_t cols, size_t ld, uint64_t seed)
{
    size_t n = rows * ld;
    float *m = malloc((n ? n : 1) * sizeof *m);
    assert_non_null(m);
    tu_fill_random(m, n, seed);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = cols; c < ld; c++)
            m[r * ld + c] = SENTINEL;
    return m;
}

/* op(X)[i][k] for X stored with row stride ld */
static double at(const float *X, size_t ld, int trans, size_t i, size_t k)
{
    return trans ? X[k * ld + i] : X[i * ld + k];
}

/* Checks C (after the call) against the naive product computed from A, B and C0 (before). */
static void check_product(int ta, int tb, size_t M, size_t N, size_t K, float alpha,
                          const float *A, size_t lda, const float *B, size_t ldb, float beta,
                          const float *C0, const float *C, size_t ldc, const char *what)
{
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (size_t k = 0; k < K; k++) {
                double p = at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
                s += p;
                mag += fabs(p);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)C0[i * ldc + j];
            double ref = (double)alpha * s + (double)beta * c0;
            double tol = 2.0 * (double)(K + 2) * FLT_EPSILON *
                             (fabs((double)alpha) * mag + fabs((double)beta * c0)) +
                         1e-30;
            double got = C[i * ldc + j];
            if (!(fabs(got - ref) <= tol))
                fail_msg("%s: ta=%d tb=%d M=%zu N=%zu K=%zu alpha=%g beta=%g: C[%zu][%zu] = "
                         "%.9g, want %.9g (tol %.3g)",
                         what, ta, tb, M, N, K, (double)alpha, (double)beta, i, j, got, ref, tol);
        }
        for (size_t j = N; j < ldc; j++) /* the gap past each row is not written */
            assert_true(C[i * ldc + j] == SENTINEL);
    }
}

/* X(n) rounded to bf16: the bits in h, their (exact) float values back in X. */
static uint16_t *round_to_bf16(float *X, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        h[i] = pe_k_to_bf16(X[i]);
        X[i] = pe_k_from_bf16(h[i]);
    }
    return h;
}

/* One product through gemm, or through gemm_bf16 with A and B rounded to bf16 (the naive
 * reference then multiplies the rounded values: the products are exact, only the fp32
 * sums round, so the same bound holds). */
static void run_case_in(be_device *dev, int bf16, int ta, int tb, size_t M, size_t N, size_t K,
                        float alpha, float beta, size_t pad)
{
    size_t a_rows = ta ? K : M, a_cols = ta ? M : K;
    size_t b_rows = tb ? N : K, b_cols = tb ? K : N;
    size_t lda = (a_cols ? a_cols : 1) + pad, ldb = (b_cols ? b_cols : 1) + pad;
    size_t ldc = (N ? N : 1) + pad;
    uint64_t seed = M * 1000003u + N * 1009u + K * 7u + (uint64_t)(ta * 2 + tb);
    float *A = matrix(a_rows, a_cols, lda, seed), *B = matrix(b_rows, b_cols, ldb, seed + 1);
    float *C = matrix(M, N, ldc, seed + 2);
    if (beta == 0.0f) /* BLAS: with beta = 0, C is not read, so NaNs there do not matter */
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++)
                C[i * ldc + j] = NAN;
    float *C0 = malloc((M * ldc + 1) * sizeof *C0);
    memcpy(C0, C, M * ldc * sizeof *C);
    pe_status s;
    if (bf16) {
        uint16_t *Ah = round_to_bf16(A, a_rows * lda), *Bh = round_to_bf16(B, b_rows * ldb);
        s = ops->gemm_bf16(dev, ta, tb, M, N, K, alpha, Ah, lda, Bh, ldb, beta, C, ldc);
        free(Ah);
        free(Bh);
    } else {
        s = ops->gemm(dev, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    if (s != PE_OK)
        fail_msg("%s failed: %s", bf16 ? "gemm_bf16" : "gemm", ops->last_error(dev));
    check_product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc,
                  bf16 ? "gemm_bf16" : "gemm");
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void run_case(be_device *dev, int ta, int tb, size_t M, size_t N, size_t K, float alpha,
                     float beta, size_t pad)
{
    run_case_in(dev, 0, ta, tb, M, N, K, alpha, beta, pad);
}

typedef struct shape {
    size_t M, N, K;
} shape;

static const shape shapes[] = {
    {1, 1, 1},   {7, 13, 5},   {64, 3, 129}, {1, 37, 50},  /* M = 1: gemv */
    {45, 1, 33}, {1, 1, 64},   {33, 17, 1},  {16, 16, 16}, /* N = 1: gemv; dot; K = 1 */
    {33, 17, 0}, {0, 5, 3},    {5, 0, 3},    {100, 70, 90},
};

static void test_all_transposes_and_shapes(void **state)
{
    be_device *dev = *state;
    const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -2.0f}, {-1.5f, 1.0f}, {0.0f, 3.0f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (size_t k = 0; k < sizeof ab / sizeof ab[0]; k++)
                for (size_t pad = 0; pad <= 3; pad += 3)
                    run_case(dev, t >> 1, t & 1, shapes[s].M, shapes[s].N, shapes[s].K,
                             ab[k][0], ab[k][1], pad);
}

static void test_bf16_inputs_match_the_product_of_the_rounded_values(void **state)
{
    be_device *dev = *state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (size_t pad = 0; pad <= 3; pad += 3)
                run_case_in(dev, 1, t >> 1, t & 1, shapes[s].M, shapes[s].N, shapes[s].K,
                            pad ? 0.5f : 1.0f, pad ? -2.0f : 0.0f, pad);
}

/* ---- linear: y = act(x W^T + b) in one call ---- */

/* The naive Linear: double sums of the (rounded, in bf16) inputs, then bias and the
 * activation in float, as the interface says. mag gets sum |x w| + |b| per element. */
static void naive_linear(pe_dtype dt, size_t M, size_t N, size_t K, const float *x,
                         const float *W, const float *b, be_act act, float *y, double *mag)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (size_t k = 0; k < K; k++) {
                double xv = x[i * K + k], wv = W[j * K + k];
                if (dt == PE_DTYPE_BF16) {
                    xv = pe_k_round_bf16(x[i * K + k]);
                    wv = pe_k_round_bf16(W[j * K + k]);
                }
                s += xv * wv;
                m += fabs(xv * wv);
            }
            float v = (float)s + (b ? b[j] : 0.0f);
            v = act == BE_ACT_RELU ? pe_k_relu(v) : act == BE_ACT_GELU ? pe_k_gelu(v) : v;
            y[i * N + j] = v;
            mag[i * N + j] = m + (b ? fabs((double)b[j]) : 0.0);
        }
}

/* One linear call against naive_linear. fp32 output: the dot-product bound of
 * check_product (scaled by GELU's slope, at most 1.13); bf16 output: that plus one bf16
 * step of the value (2^-8 relative): the float sum and the naive double sum can fall on
 * the two sides of a rounding boundary. */
static void check_linear(be_device *dev, pe_dtype dt, int y_bf16, size_t M, size_t N, size_t K,
                         int with_bias, be_act act)
{
    float *x = matrix(M, K, K, M * 31 + K), *W = matrix(N, K, K, N * 17 + K + 1);
    float *b = with_bias ? matrix(1, N, N, N + 5) : NULL;
    float *ref = malloc((M * N + 1) * sizeof *ref), *got = malloc((M * N + 1) * sizeof *got);
    double *mag = malloc((M * N + 1) * sizeof *mag);
    uint16_t *xh = NULL, *Wh = NULL, *yh = malloc((M * N + 1) * sizeof *yh);
    const void *xin = x, *Win = W;
    if (dt == PE_DTYPE_BF16) {
        float *xc = malloc((M * K + 1) * sizeof *xc), *Wc = malloc((N * K + 1) * sizeof *Wc);
        memcpy(xc, x, M * K * sizeof *x);
        memcpy(Wc, W, N * K * sizeof *W);
        xin = xh = round_to_bf16(xc, M * K);
        Win = Wh = round_to_bf16(Wc, N * K);
        free(xc);
        free(Wc);
    }
    naive_linear(dt, M, N, K, x, W, b, act, ref, mag);
    float *tmp = malloc((M * N + 1) * sizeof *tmp);
    void *y = y_bf16 ? (void *)yh : got;
    pe_status s = linear_path == HB_LINEAR_AUTO
                      ? ops->linear(dev, dt, M, N, K, xin, Win, b, act, y, y_bf16,
                                    y_bf16 ? tmp : NULL)
                      : hb_linear_with(dev, linear_path, dt, M, N, K, xin, Win, b, act, y,
                                       y_bf16, y_bf16 ? tmp : NULL);
    free(tmp);
    if (s != PE_OK)
        fail_msg("linear: %s", ops->last_error(dev));
    for (size_t i = 0; i < M * N; i++) {
        double g = y_bf16 ? (double)pe_k_from_bf16(yh[i]) : (double)got[i];
        double tol = 1.13 * 2.0 * (double)(K + 3) * FLT_EPSILON * mag[i] + 1e-30;
        if (y_bf16)
            tol += fabs((double)ref[i]) * 0x1p-8;
        if (!(fabs(g - ref[i]) <= tol))
            fail_msg("linear dt=%d y_bf16=%d M=%zu N=%zu K=%zu bias=%d act=%d: y[%zu] = %.9g, "
                     "want %.9g (tol %.3g)",
                     (int)dt, y_bf16, M, N, K, with_bias, (int)act, i, g, (double)ref[i], tol);
    }
    free(x);
    free(W);
    free(b);
    free(ref);
    free(got);
    free(mag);
    free(xh);
    free(Wh);
    free(yh);
}

static void test_linear_is_gemm_bias_activation_and_rounding(void **state)
{
    be_device *dev = *state;
    const size_t dims[][3] = {{1, 1, 1}, {1, 64, 33}, {7, 13, 5}, {40, 24, 96}};
    const be_act acts[] = {BE_ACT_NONE, BE_ACT_RELU, BE_ACT_GELU};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int a = 0; a < 3; a++)
            for (int bias = 0; bias < 2; bias++) {
                check_linear(dev, PE_DTYPE_FP32, 0, dims[d][0], dims[d][1], dims[d][2], bias,
                             acts[a]);
                check_linear(dev, PE_DTYPE_BF16, 0, dims[d][0], dims[d][1], dims[d][2], bias,
                             acts[a]);
                check_linear(dev, PE_DTYPE_BF16, 1, dims[d][0], dims[d][1], dims[d][2], bias,
                             acts[a]);
            }
    uint16_t y;
    float one = 1.0f;
    float tmp;
    assert_int_equal(ops->linear(dev, PE_DTYPE_FP32, 1, 1, 1, &one, &one, NULL, BE_ACT_NONE,
                                 &y, 1, &tmp),
                     PE_EINVAL); /* a bf16 output of an fp32 layer */
    assert_non_null(strstr(ops->last_error(dev), "needs dtype bf16"));
    assert_int_equal(ops->linear(dev, PE_DTYPE_BF16, 1, 1, 1, &y, &y, NULL, BE_ACT_NONE, &y, 1,
                                 NULL),
                     PE_EINVAL); /* no tmp for the fp32 result */
    assert_non_null(strstr(ops->last_error(dev), "tmp buffer"));
}

/* Both of linear's paths (the GEMV kernels, up to gemv_max_m, and the sliced sgemm beyond;
 * and each path forced at every M), fp32 and bf16 weights, widths that are not multiples
 * of the vector width, 1 and 2 threads, the vector loops this CPU runs and the portable
 * ones, against the naive Linear in double. */
static void test_linear_paths_match_a_naive_double_gemm(void **state)
{
    be_device *dev = *state;
    const size_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 128};
    const size_t NK[][2] = {{37, 29}, {131, 75}, {70, 264}};
    const size_t nM = tu_small() ? 6 : sizeof Ms / sizeof Ms[0];
    const hb_simd *versions[2] = {hb_simd_best(), hb_simd_portable()};
    for (int v = 0; v < 2; v++) {
        hb_simd_use(versions[v]);
        for (int threads = 1; threads <= 2; threads++) {
            assert_int_equal(ops->set_compute_threads(dev, threads), PE_OK);
            for (int p = HB_LINEAR_AUTO; p <= HB_LINEAR_SGEMM; p++) {
                linear_path = (hb_linear_path)p;
                for (size_t i = 0; i < nM; i++)
                    for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
                        size_t M = Ms[i], N = NK[s][0], K = NK[s][1];
                        be_act act = (be_act)((i + s) % 3);
                        check_linear(dev, PE_DTYPE_FP32, 0, M, N, K, (int)(i & 1), act);
                        check_linear(dev, PE_DTYPE_BF16, 0, M, N, K, (int)(s & 1), act);
                        check_linear(dev, PE_DTYPE_BF16, 1, M, N, K, 1, act);
                    }
            }
        }
    }
    linear_path = HB_LINEAR_AUTO;
    hb_simd_use(NULL);
}

/* amx: bf16 W on the tiles, up to 100 rows of x (prefill's two slabs at a time from
 * HB_AMX_PAIR_M rows); else up to 60, fewer where the GEMV takes fewer. */
static void gemv_rows_do_not_depend_on_the_batch_or_threads(be_device *dev, int amx)
{
    const size_t N = 203, K = 333;
    const size_t firsts[] = {0, 1, 5, 23, 30}, counts[] = {1, 2, 3, 7, 8, 12, 24, 29, 64, 70};
    for (int bf = 0; bf < 2; bf++) {
        pe_dtype dt = bf ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
        const size_t most = hb_simd_get()->gemv_max_m[bf];
        const size_t M = amx && bf ? 100 : most < 60 ? most : 60;
        float *x = matrix(M, K, K, 501), *W = matrix(N, K, K, 502), *b = matrix(1, N, N, 503);
        uint16_t *xh = round_to_bf16(x, M * K), *Wh = round_to_bf16(W, N * K);
        const void *xin = bf ? (const void *)xh : x, *Win = bf ? (const void *)Wh : W;
        size_t xelem = bf ? sizeof(uint16_t) : sizeof(float);
        float *all = malloc(M * N * sizeof *all);
        assert_int_equal(ops->set_compute_threads(dev, 1), PE_OK);
        assert_int_equal(ops->linear(dev, dt, M, N, K, xin, Win, b, BE_ACT_GELU, all, 0, NULL),
                         PE_OK);
        for (int threads = 1; threads <= 2; threads++) {
            assert_int_equal(ops->set_compute_threads(dev, threads), PE_OK);
            for (size_t fi = 0; fi < sizeof firsts / sizeof firsts[0]; fi++)
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    const size_t m = firsts[fi], rows = counts[ci];
                    if (m + rows > M)
                        continue;
                    float *part = malloc(rows * N * sizeof *part);
                    const char *xr = (const char *)xin + m * K * xelem;
                    assert_int_equal(ops->linear(dev, dt, rows, N, K, xr, Win, b, BE_ACT_GELU,
                                                 part, 0, NULL),
                                     PE_OK);
                    assert_memory_equal(part, all + m * N, rows * N * sizeof *part);
                    free(part);
                }
        }
        free(x);
        free(W);
        free(b);
        free(xh);
        free(Wh);
        free(all);
    }
}

/* The GEMV path computes each output the same way whatever M (up to the GEMV's limit: every
 * M with AVX2 and AVX-512) and the thread count: row m of a call with M rows has the bits of
 * a call with fewer rows. Up to 60 rows, AVX-512 runs both its decode kernels (4 streams of
 * W) and its prefill kernel (8 adjacent rows of W, 6 rows of x); AVX2 its one-row kernel
 * (3-8 rows of x) and its 4x3, 4x2 and 4x1 tiles, and from 17 rows with bf16 W the widened
 * tiles; N = 203 leaves rows of W to the other kernels, K = 333 a tail after the steps of 8.
 * Each version this CPU runs, and the portable one up to its limit. */
static void test_gemv_rows_do_not_depend_on_the_batch_or_threads(void **state)
{
    be_device *dev = *state;
    const hb_simd *versions[3] = {hb_simd_avx512(), hb_simd_avx2(), hb_simd_portable()};
    hb_amx_use(0); /* bf16 W through the GEMV too (AMX: the next test) */
    for (int v = 0; v < 3; v++)
        if (versions[v]) {
            hb_simd_use(versions[v]);
            gemv_rows_do_not_depend_on_the_batch_or_threads(dev, 0);
        }
    hb_simd_use(NULL);
    hb_amx_use(1);
}

/* ---- AMX (hb_amx.h): bf16 W on tiles, where the CPU has them ---- */

/* The tile kernel against the naive Linear in double, through linear's AMX path: M across
 * the blocks of 16 rows of x (1, 2 and 3 blocks, and pairs of them with one left over),
 * N across the slabs of 16 rows of W (a last slab of 1 to 15 rows, its own configuration),
 * K across the tiles' 32 values (a tail: the zero-padded block), with bias, activations
 * and a bf16 output, on 1 and 2 threads; and an AMX linear refused without AMX or for
 * fp32 W. */
static void test_amx_linear_matches_a_naive_double_gemm(void **state)
{
    be_device *dev = *state;
    float x[32] = {0}, W[32] = {0}, y[4];
    assert_int_equal(hb_linear_with(dev, HB_LINEAR_AMX, PE_DTYPE_FP32, 1, 1, 8, x, W, NULL,
                                    BE_ACT_NONE, y, 0, NULL),
                     PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "bf16"));
    if (!hb_amx_available()) {
        assert_int_equal(hb_linear_with(dev, HB_LINEAR_AMX, PE_DTYPE_BF16, 1, 1, 8, x, W, NULL,
                                        BE_ACT_NONE, y, 0, NULL),
                         PE_EINVAL);
        assert_non_null(strstr(ops->last_error(dev), "no AMX"));
        skip(); /* the kernel itself needs AMX */
    }
    const size_t Ms[] = {1, 3, 15, 16, 17, 32, 33, 48, 50, 64, 100};
    const size_t NK[][2] = {{1, 32}, {16, 64}, {37, 29}, {131, 75}, {70, 264}, {203, 333},
                            {48, 1}};
    const size_t nM = tu_small() ? 5 : sizeof Ms / sizeof Ms[0];
    linear_path = HB_LINEAR_AMX;
    for (int threads = 1; threads <= 2; threads++) {
        assert_int_equal(ops->set_compute_threads(dev, threads), PE_OK);
        for (size_t i = 0; i < nM; i++)
            for (size_t s = 0; s < sizeof NK / sizeof NK[0]; s++) {
                size_t M = Ms[i], N = NK[s][0], K = NK[s][1];
                be_act act = (be_act)((i + s) % 3);
                check_linear(dev, PE_DTYPE_BF16, 0, M, N, K, (int)(s & 1), act);
                check_linear(dev, PE_DTYPE_BF16, 1, M, N, K, 1, act);
            }
    }
    linear_path = HB_LINEAR_AUTO;
}

/* With AMX, linear runs bf16 W on the tiles at every M, so a row of y has the same bits
 * whatever the other rows of its call and the thread count (the GEMV test's check, on the
 * tiles: row offsets that move a row of x to another place in its tile, counts across
 * blocks of 16). */
static void test_amx_rows_do_not_depend_on_the_batch_or_threads(void **state)
{
    be_device *dev = *state;
    if (!hb_amx_enabled())
        skip();
    gemv_rows_do_not_depend_on_the_batch_or_threads(dev, 1);
}

/* The sgemm path (M beyond the portable GEMV's) gives the same bits on 1, 2 and 3 threads: its
 * calls to OpenBLAS are fixed by N, not by the thread count (with one slice per thread,
 * M = 17, N = 131 and M = 64 or 128, N = 37 came out differently: OpenBLAS's small-matrix
 * kernels sum in another order). */
static void test_sgemm_path_does_not_depend_on_threads(void **state)
{
    be_device *dev = *state;
    const size_t mn[][2] = {{17, 131}, {64, 37}, {128, 37}, {40, 768}, {33, 2304}};
    const size_t K = tu_small() ? 96 : 768;
    for (size_t i = 0; i < sizeof mn / sizeof mn[0]; i++)
        for (int bf = 0; bf < 2; bf++) {
            size_t M = mn[i][0] + 16, N = mn[i][1];
            pe_dtype dt = bf ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
            float *x = matrix(M, K, K, 600 + i), *W = matrix(N, K, K, 700 + i);
            uint16_t *xh = round_to_bf16(x, M * K), *Wh = round_to_bf16(W, N * K);
            const void *xin = bf ? (const void *)xh : x, *Win = bf ? (const void *)Wh : W;
            float *first = NULL;
            for (int threads = 1; threads <= 3; threads++) {
                float *y = malloc(M * N * sizeof *y);
                assert_int_equal(ops->set_compute_threads(dev, threads), PE_OK);
                assert_int_equal(hb_linear_with(dev, HB_LINEAR_SGEMM, dt, M, N, K, xin, Win,
                                                NULL, BE_ACT_NONE, y, 0, NULL),
                                 PE_OK);
                if (first && memcmp(y, first, M * N * sizeof *y) != 0)
                    fail_msg("linear M=%zu N=%zu K=%zu %s: %d threads gave other bits than 1",
                             M, N, K, bf ? "bf16" : "fp32", threads);
                if (first)
                    free(y);
                else
                    first = y;
            }
            free(first);
            free(x);
            free(W);
            free(xh);
            free(Wh);
        }
}

/* The AVX-512 GEMV gives the AVX2 GEMV's bits at every M: each half of its registers runs
 * the AVX2 kernel's chain of FMAs on one row of W, and is finished as the AVX2 kernel
 * finishes it. Rows of W in its 4 quarters and beyond them, K with and without a tail,
 * more than 8 rows of x (further passes), and from 24 rows the prefill kernel (8 rows of W
 * by 6 of x, the rest of each to the others). */
static void test_avx512_gemv_gives_the_avx2_bits(void **state)
{
    (void)state;
    const hb_simd *wide = hb_simd_avx512(), *avx2 = hb_simd_avx2();
    if (!wide || !avx2) {
        print_message("    (no AVX-512F on this CPU: nothing to compare)\n");
        return;
    }
    const size_t Ns[] = {1, 5, 64, 67}, Ks[] = {8, 29, 333}, maxM = 31;
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++) {
            const size_t N = Ns[a], K = Ks[c];
            float *x = matrix(maxM, K, K, 800 + a), *W = matrix(N, K, K, 900 + c);
            uint16_t *Wh = round_to_bf16(W, N * K);
            float *y[2] = {malloc(maxM * N * sizeof(float)), malloc(maxM * N * sizeof(float))};
            for (size_t M = 1; M <= maxM; M++)
                for (int bf = 0; bf < 2; bf++) {
                    const hb_simd *v[2] = {wide, avx2};
                    for (int i = 0; i < 2; i++)
                        if (bf)
                            v[i]->gemv_bf16(y[i], N, x, M, Wh, K, N);
                        else
                            v[i]->gemv_f32(y[i], N, x, M, W, K, N);
                    if (memcmp(y[0], y[1], M * N * sizeof(float)) != 0)
                        fail_msg("GEMV M=%zu N=%zu K=%zu %s W: AVX-512 gave other bits than "
                                 "AVX2", M, N, K, bf ? "bf16" : "fp32");
                }
            free(y[0]);
            free(y[1]);
            free(x);
            free(W);
            free(Wh);
        }
}

static void test_strided_batched_matches_each_product(void **state)
{
    be_device *dev = *state;
    size_t M = 6, N = 5, K = 7, batch = 4;
    for (int t = 0; t < 4; t++) {
        int ta = t >> 1, tb = t & 1;
        size_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 1;
        size_t a_rows = ta ? K : M, b_rows = tb ? N : K;
        /* A's matrices 3 rows apart from their ends; B shared by every batch (stride 0) */
        size_t stride_a = a_rows * lda + 3 * lda, stride_b = 0, stride_c = M * ldc + 5;
        float *A = matrix(batch, stride_a, stride_a, 21), *B = matrix(b_rows, ldb, ldb, 22);
        float *C = matrix(batch, stride_c, stride_c, 23);
        float *C0 = malloc(batch * stride_c * sizeof *C0);
        memcpy(C0, C, batch * stride_c * sizeof *C);
        pe_status s = ops->gemm_strided_batched(dev, ta, tb, M, N, K, 0.75f, A, lda, stride_a,
                                                B, ldb, stride_b, 0.5f, C, ldc, stride_c, batch);
        assert_int_equal(s, PE_OK);
        for (size_t b = 0; b < batch; b++)
            for (size_t i = 0; i < M; i++)
                for (size_t j = 0; j < N; j++) {
                    double ref = 0.5 * C0[b * stride_c + i * ldc + j], mag = fabs(ref);
                    for (size_t k = 0; k < K; k++) {
                        double p = 0.75 * at(A + b * stride_a, lda, ta, i, k) *
                                   at(B, ldb, tb, k, j);
                        ref += p;
                        mag += fabs(p);
                    }
                    double got = C[b * stride_c + i * ldc + j];
                    assert_true(fabs(got - ref) <= 2.0 * (double)(K + 2) * FLT_EPSILON * mag);
                }
        /* nothing outside the C matrices was written: the gaps keep their values */
        for (size_t b = 0; b < batch; b++)
            for (size_t e = 0; e < stride_c; e++) {
                size_t i = e / ldc, j = e % ldc;
                if (i >= M || j >= N)
                    assert_true(C[b * stride_c + e] == C0[b * stride_c + e]);
            }
        free(A);
        free(B);
        free(C);
        free(C0);
    }
}

static void test_bad_arguments_are_rejected_with_a_message(void **state)
{
    be_device *dev = *state;
    float a[64] = {0}, b[64] = {0}, c[64] = {0};
    /* A is 4x5 (K = 5): lda 4 is too short */
    assert_int_equal(ops->gemm(dev, 0, 0, 4, 3, 5, 1.0f, a, 4, b, 3, 0.0f, c, 3), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "lda=4"));
    /* transposed A is stored 5x4 (K x M): lda 4 is fine there */
    assert_int_equal(ops->gemm(dev, 1, 0, 4, 3, 5, 1.0f, a, 4, b, 3, 0.0f, c, 3), PE_OK);
    /* B is 5x3: ldb 2 too short; transposed B is 3x5: ldb 3 too short */
    assert_int_equal(ops->gemm(dev, 0, 0, 4, 3, 5, 1.0f, a, 5, b, 2, 0.0f, c, 3), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "ldb=2"));
    assert_int_equal(ops->gemm(dev, 0, 1, 4, 3, 5, 1.0f, a, 5, b, 3, 0.0f, c, 3), PE_EINVAL);
    assert_int_equal(ops->gemm(dev, 0, 0, 4, 3, 5, 1.0f, a, 5, b, 3, 0.0f, c, 2), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "ldc=2"));
    assert_int_equal(ops->gemm(dev, 0, 0, 4, 3, 5, 1.0f, NULL, 5, b, 3, 0.0f, c, 3), PE_EINVAL);
    /* batched outputs that overlap */
    assert_int_equal(ops->gemm_strided_batched(dev, 0, 0, 2, 3, 2, 1.0f, a, 2, 4, b, 3, 6, 0.0f,
                                               c, 3, 5, 2),
                     PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "stride_c=5"));
    /* batch 0 does nothing */
    assert_int_equal(ops->gemm_strided_batched(dev, 0, 0, 2, 3, 2, 1.0f, NULL, 2, 4, NULL, 3, 6,
                                               0.0f, NULL, 3, 6, 0),
                     PE_OK);
}

int main(void)
{
    ops = be_host_ops();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_all_transposes_and_shapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16_inputs_match_the_product_of_the_rounded_values,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_linear_is_gemm_bias_activation_and_rounding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_linear_paths_match_a_naive_double_gemm, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gemv_rows_do_not_depend_on_the_batch_or_threads,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sgemm_path_does_not_depend_on_threads, setup,
                                        teardown),
        cmocka_unit_test(test_avx512_gemv_gives_the_avx2_bits),
        cmocka_unit_test_setup_teardown(test_amx_linear_matches_a_naive_double_gemm, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_amx_rows_do_not_depend_on_the_batch_or_threads,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_strided_batched_matches_each_product, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments_are_rejected_with_a_message, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
