/* test_cuda.c: the CUDA backend against the host math, on a GPU; every test skips where
 * no CUDA device answers (CI has none). CI also builds this file as test_cuda_fake,
 * against the fake CUDA runtime, libraries and NCCL (tests/cuda_fake_*.c, 4 fake GPUs), so
 * that every check here runs, and is known to pass on correct code, before a GPU sees it.
 *
 * - kernels: every kernel against the src/kernels/ functions run serially on the host,
 *   on float4-friendly and unaligned shapes (both code paths of each grid);
 * - to_bf16 bit for bit against pe_k_to_bf16, aligned and not;
 * - GEMM bf16 (bf16 inputs, fp32 accumulation and output) against the host's gemm_bf16 on
 *   the same bf16 inputs: the products are exact in fp32 on both, only the order of the
 *   fp32 sums differs, so the fp32 bound 1e-4 applies; and against the fp32 product of the
 *   unrounded inputs within 2e-2 (each input moves by up to 2^-9 relative: a K-term dot
 *   product of random signs moves by ~2^-8 of its scale, 2e-2 leaves 5x margin);
 * - linear (cuBLASLt with a bias/ReLU/bf16 epilogue) against the host's linear, fp32 and
 *   bf16, with and without bias, every activation; at least one plan fused;
 * - decoder ops: rmsnorm, rope, silu_mul against the src/kernels/ functions; kv_append
 *   bit for bit against pe_k_kv_store into a host copy of the pool; attention against its
 *   naive twin pe_k_attend_naive (decode, prefill and mixed steps of several chunks, GQA,
 *   sliding window, fp32 and bf16 pools, normwise 1e-5); argmax and topk exactly, lse to
 *   1e-5; sample against pe_k_sample_row over many rows, a different token allowed only
 *   where the host's draw sits within 1e-4 of the mass from a boundary; bad arguments;
 *   embedding with a bf16 table; outputs poisoned (NaN) before each run;
 * - GEMM fp32 against a naive double-accumulated GEMM, all transpose combinations;
 *   tolerance 1e-4 relative to max|C|: fp32 accumulation over K = 512 terms of size ~1
 *   errs by about sqrt(K) * 2^-24 ~ 1e-6 relative, so 1e-4 leaves 100x margin while still
 *   catching a wrong transpose, stride or a TF32 (10-bit mantissa, ~1e-3) math mode;
 * - collectives on the peer path with 2 and 4 ranks on GPU 0 (sums bit-exact against the
 *   host's rank-order float sum), on NCCL with one rank on GPU 0 (with a split and an
 *   abort: the NCCL a one-GPU machine can run) and when two distinct GPUs exist, and the
 *   peer path across distinct GPUs (PE_CUDA_COMM=peer);
 * - NCCL over processes (cb_comm_prepare and cb_comm_join, what comm_create_procs does
 *   around the MPI_Bcast of the id), with two processes simulated by threads that see only
 *   their own ranks: the world, groups split inside and across processes, send/recv
 *   between them, and a barrier on each group that nobody leaves before all arrived; a
 *   GPU serving two workers of a process refused before NCCL;
 * - errors name the call and the device; abort wakes a blocked rank.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/backend_select.h"
#ifdef PE_HAVE_CUDA /* this file builds without CUDA too (every test then skips) */
#include "backend/cuda/cb_comm.h"     /* cb_comm_join: NCCL over processes, simulated */
#include "backend/cuda/cb_internal.h" /* cb_linear_plans: which linear plans were fused */
#endif
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/rope.h"
#include "kernels/rowwise.h"
#include "kernels/sample.h"

#define MAXR 8

static const be_ops *ops;
static int ngpus;

static int setup(void **state)
{
    (void)state;
    ops = be_cuda_ops();
    ngpus = 0;
    if (ops && ops->device_count(&ngpus, NULL) != PE_OK)
        ngpus = 0;
    return 0;
}

#define NEED_GPUS(k)                                                                          \
    do {                                                                                      \
        if (!ops || ngpus < (k))                                                              \
            skip();                                                                           \
    } while (0)

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- device helpers (main thread) ---- */

static float *upload(be_device *d, const float *x, size_t n)
{
    void *p = NULL;
    assert_int_equal(ops->alloc(d, (n ? n : 1) * sizeof(float), &p), PE_OK);
    assert_int_equal(ops->copy_h2d(d, p, x, n * sizeof(float)), PE_OK);
    return p;
}

static void download(be_device *d, float *x, const float *p, size_t n)
{
    assert_int_equal(ops->synchronize(d), PE_OK);
    assert_int_equal(ops->copy_d2h(d, x, p, n * sizeof(float)), PE_OK);
}

static float *host_random(size_t n, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, seed);
    return x;
}

static void expect_close(const char *what, const float *got, const float *ref, size_t n,
                         double tol, double floor)
{
    double d = tu_max_rel_diff(got, ref, n, floor);
    if (!(d <= tol))
        print_error("%s: max relative difference %g > %g\n", what, d, tol);
    assert_true(d <= tol);
}

/* ---- discovery and memory ---- */

static void describe_gives_name_memory_and_bus_id(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device_desc d;
    pe_err err = {{0}};
    assert_int_equal(ops->device_describe(0, &d, &err), PE_OK);
    assert_true(d.name[0] != '\0');
    assert_true(d.memory_bytes > ((size_t)1 << 30));
    assert_true(d.bus_id[0] != '\0');
    print_message("GPU 0: %s, %.1f GiB, bus %s, NUMA node %d, cores %s\n", d.name,
                  (double)d.memory_bytes / (1 << 30), d.bus_id, d.numa_node,
                  d.cpulist[0] ? d.cpulist : "(any)");
    assert_int_not_equal(ops->device_describe(ngpus + 3, &d, &err), PE_OK);
}

static void copies_round_trip_and_alloc_is_aligned(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    pe_err err = {{0}};
    assert_int_equal(ops->open(0, &d, &err), PE_OK);
    size_t n = 100003;
    float *x = host_random(n, 1), *y = calloc(n, sizeof *y);
    float *a = upload(d, x, n);
    void *b = NULL;
    assert_int_equal(ops->alloc(d, n * sizeof(float), &b), PE_OK);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    assert_int_equal(ops->copy_d2d(d, b, a, n * sizeof(float)), PE_OK);
    memset(x, 0, sizeof(float)); /* h2d returned: the source may be reused at once */
    download(d, y, b, n);
    float *ref = host_random(n, 1);
    assert_memory_equal(y, ref, n * sizeof(float));
    ops->free(d, a);
    ops->free(d, b);
    ops->close(d);
    free(x);
    free(y);
    free(ref);
}

static void errors_name_the_call_and_the_device(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    pe_err err = {{0}};
    assert_int_equal(ops->open(ngpus, &d, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "does not exist"));
    assert_int_equal(ops->open(0, &d, &err), PE_OK);
    void *p = NULL;
    assert_int_equal(ops->alloc(d, (size_t)1 << 60, &p), PE_ENOMEM);
    assert_null(p);
    assert_non_null(strstr(ops->last_error(d), "cudaMalloc"));
    assert_non_null(strstr(ops->last_error(d), "CUDA device 0"));
    /* A leading dimension smaller than the row: refused before cuBLAS sees it. */
    float *a = NULL;
    assert_int_equal(ops->alloc(d, 64 * sizeof(float), (void **)&a), PE_OK);
    assert_int_equal(ops->gemm(d, 0, 0, 4, 4, 4, 1.0f, a, 2, a, 4, 0.0f, a, 4), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(d), "gemm"));
    ops->free(d, a);
    /* The device still works after those failures. */
    assert_int_equal(ops->synchronize(d), PE_OK);
    ops->close(d);
}

/* ---- kernels against the host math ---- */

typedef struct shape {
    size_t rows, cols;
} shape;

static const shape shapes[] = {{1, 1}, {3, 5}, {7, 64}, {33, 257}, {4, 1024}, {2, 4099}, {130, 768}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Runs the device kernel on x(rows, cols) at element offset `skew` (1 = unaligned path)
 * and compares with the host math. */
static void check_elementwise(be_device *d, size_t rows, size_t cols, size_t skew, uint64_t seed)
{
    size_t n = rows * cols;
    float *x = host_random(n + skew, seed), *r = host_random(n + skew, seed + 1);
    float *bias = host_random(cols + skew, seed + 2), *got = malloc((n + skew) * sizeof *got);
    float *ref = malloc(n * sizeof *ref);
    float *dx = upload(d, x, n + skew), *dr = upload(d, r, n + skew);
    float *db = upload(d, bias, cols + skew);
    char what[128];

    /* relu: exact */
    assert_int_equal(ops->relu(d, dx + skew, n), PE_OK);
    download(d, got, dx, n + skew);
    for (size_t i = 0; i < n; i++)
        ref[i] = pe_k_relu(x[skew + i]);
    assert_memory_equal(got + skew, ref, n * sizeof(float));
    if (skew) /* the element before the range is untouched */
        assert_memory_equal(got, x, sizeof(float));

    /* bias_add on the relu output: one IEEE add, exact */
    assert_int_equal(ops->bias_add(d, dx + skew, db + skew, rows, cols), PE_OK);
    download(d, got, dx, n + skew);
    for (size_t i = 0; i < n; i++)
        ref[i] = pe_k_add(pe_k_relu(x[skew + i]), bias[skew + i % cols]);
    assert_memory_equal(got + skew, ref, n * sizeof(float));

    /* residual_add: exact */
    assert_int_equal(ops->residual_add(d, dx + skew, dr + skew, n), PE_OK);
    download(d, got, dx, n + skew);
    for (size_t i = 0; i < n; i++)
        ref[i] = pe_k_add(ref[i], r[skew + i]);
    assert_memory_equal(got + skew, ref, n * sizeof(float));

    /* gelu: tanhf on the device is within 2 ulp of the host's */
    assert_int_equal(ops->gelu(d, dx + skew, n), PE_OK);
    download(d, got, dx, n + skew);
    for (size_t i = 0; i < n; i++)
        ref[i] = pe_k_gelu(ref[i]);
    snprintf(what, sizeof what, "gelu %zux%zu skew %zu", rows, cols, skew);
    expect_close(what, got + skew, ref, n, 1e-5, 1e-6);

    ops->free(d, dx);
    ops->free(d, dr);
    ops->free(d, db);
    free(x);
    free(r);
    free(bias);
    free(got);
    free(ref);
}

static void check_rowwise(be_device *d, size_t rows, size_t cols, size_t skew, uint64_t seed)
{
    size_t n = rows * cols;
    float *x = host_random(n + skew, seed), *gamma = host_random(cols + skew, seed + 1);
    float *beta = host_random(cols + skew, seed + 2);
    for (size_t i = 0; i < n + skew; i++)
        x[i] = 3.0f * x[i] + 0.5f; /* a mean away from 0 tests the two-pass variance */
    float *got = malloc((n + skew) * sizeof *got), *ref = malloc(n * sizeof *ref);
    float *dx = upload(d, x, n + skew), *dg = upload(d, gamma, cols + skew);
    float *db = upload(d, beta, cols + skew);
    void *dout = NULL;
    assert_int_equal(ops->alloc(d, (n + skew) * sizeof(float), &dout), PE_OK);
    char what[128];

    const float eps = 1e-5f;
    assert_int_equal(ops->layernorm(d, (float *)dout + skew, dx + skew, dg + skew, db + skew,
                                    rows, cols, eps),
                     PE_OK);
    download(d, got, dout, n + skew);
    for (size_t row = 0; row < rows; row++)
        pe_k_layernorm_row(ref + row * cols, x + skew + row * cols, gamma + skew, beta + skew,
                           cols, eps);
    /* Outputs are O(1); the reductions run in another order: 1e-4 absolute. */
    snprintf(what, sizeof what, "layernorm %zux%zu skew %zu", rows, cols, skew);
    expect_close(what, got + skew, ref, n, 1e-4, 1.0);

    assert_int_equal(ops->softmax(d, dx + skew, rows, cols), PE_OK);
    download(d, got, dx, n + skew);
    memcpy(ref, x + skew, n * sizeof(float));
    for (size_t row = 0; row < rows; row++)
        pe_k_softmax_row(ref + row * cols, cols);
    snprintf(what, sizeof what, "softmax %zux%zu skew %zu", rows, cols, skew);
    expect_close(what, got + skew, ref, n, 1e-4, 1e-3 / (double)cols);
    for (size_t row = 0; row < rows; row++) { /* and each row still sums to 1 */
        double s = 0;
        for (size_t i = 0; i < cols; i++)
            s += got[skew + row * cols + i];
        assert_true(s > 1.0 - 1e-4 && s < 1.0 + 1e-4);
    }

    ops->free(d, dx);
    ops->free(d, dg);
    ops->free(d, db);
    ops->free(d, dout);
    free(x);
    free(gamma);
    free(beta);
    free(got);
    free(ref);
}

static void elementwise_kernels_match_host_math(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    for (size_t i = 0; i < NSHAPES; i++)
        for (size_t skew = 0; skew < 2; skew++)
            check_elementwise(d, shapes[i].rows, shapes[i].cols, skew, 10 + i);
    ops->close(d);
}

static void row_kernels_match_host_math(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    for (size_t i = 0; i < NSHAPES; i++)
        for (size_t skew = 0; skew < 2; skew++)
            check_rowwise(d, shapes[i].rows, shapes[i].cols, skew, 20 + i);
    ops->close(d);
}

static void embedding_copies_rows_and_rejects_bad_ids(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t dims[] = {1, 3, 64, 130};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        size_t vocab = 50, dim = dims[k], n = 37;
        float *table = host_random(vocab * dim, 30 + k);
        int32_t ids[37];
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)((i * 7 + k) % vocab);
        float *dt = upload(d, table, vocab * dim);
        int32_t *did = NULL;
        assert_int_equal(ops->alloc(d, sizeof ids, (void **)&did), PE_OK);
        assert_int_equal(ops->copy_h2d(d, did, ids, sizeof ids), PE_OK);
        void *dout = NULL;
        assert_int_equal(ops->alloc(d, n * dim * sizeof(float), &dout), PE_OK);
        assert_int_equal(ops->embedding(d, PE_DTYPE_FP32, dout, dt, did, n, dim, vocab, 0, vocab), PE_OK);
        float *got = malloc(n * dim * sizeof *got), *ref = malloc(n * dim * sizeof *ref);
        download(d, got, dout, n * dim);
        for (size_t i = 0; i < n; i++) {
            assert_true(pe_k_id_in_range(ids[i], vocab));
            pe_k_embedding_row(ref + i * dim, table, 0, (size_t)ids[i], dim);
        }
        assert_memory_equal(got, ref, n * dim * sizeof(float));
        /* An id outside [0, vocab) is PE_EINVAL naming it, and out is left untouched. */
        ids[5] = (int32_t)vocab;
        ids[9] = -3;
        assert_int_equal(ops->copy_h2d(d, did, ids, sizeof ids), PE_OK);
        assert_int_equal(ops->embedding(d, PE_DTYPE_FP32, dout, dt, did, n, dim, vocab, 0, vocab), PE_EINVAL);
        assert_non_null(strstr(ops->last_error(d), "id 50 at row 5"));
        /* every id is checked before any row is written: out keeps the previous rows */
        download(d, got, dout, n * dim);
        assert_memory_equal(got, ref, n * dim * sizeof(float));
        /* a bf16 table: every element widened exactly, as pe_k_load_elem */
        ids[5] = 4;
        ids[9] = 49;
        assert_int_equal(ops->copy_h2d(d, did, ids, sizeof ids), PE_OK);
        uint16_t *t16 = malloc(vocab * dim * sizeof *t16);
        for (size_t i = 0; i < vocab * dim; i++)
            t16[i] = pe_k_to_bf16(table[i]);
        void *dt16 = NULL;
        assert_int_equal(ops->alloc(d, vocab * dim * sizeof *t16, &dt16), PE_OK);
        assert_int_equal(ops->copy_h2d(d, dt16, t16, vocab * dim * sizeof *t16), PE_OK);
        assert_int_equal(ops->embedding(d, PE_DTYPE_BF16, dout, dt16, did, n, dim, vocab, 0, vocab), PE_OK);
        download(d, got, dout, n * dim);
        for (size_t i = 0; i < n; i++)
            pe_k_embedding_row(ref + i * dim, t16, 1, (size_t)ids[i], dim);
        assert_memory_equal(got, ref, n * dim * sizeof(float));
        ops->free(d, dt16);
        free(t16);
        ops->free(d, dt);
        ops->free(d, did);
        ops->free(d, dout);
        free(table);
        free(got);
        free(ref);
    }
    ops->close(d);
}

/* ---- GEMM ---- */

/* C(M,N) = alpha op(A) op(B) + beta C, row-major with row strides, in double. */
static void naive_gemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha,
                       const float *A, size_t lda, const float *B, size_t ldb, float beta,
                       float *C, size_t ldc)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (size_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            C[i * ldc + j] = (float)(alpha * s + beta * (double)C[i * ldc + j]);
        }
}

static double normwise_rel(const float *got, const float *ref, size_t n)
{
    double mref = 0;
    for (size_t i = 0; i < n; i++)
        mref = fmax(mref, fabs((double)ref[i]));
    return tu_max_abs_diff(got, ref, n) / (mref > 0 ? mref : 1.0);
}

/* (M, N, K): scalars, odd sizes, K long enough for rounding to show, and gemv shapes. */
static const size_t gemm_dims[][3] = {{1, 1, 1},     {7, 13, 5},   {64, 96, 512},
                                      {129, 65, 300}, {1, 1024, 512}};

static void gemm_fp32_matches_naive_gemm(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    for (size_t s = 0; s < sizeof gemm_dims / sizeof gemm_dims[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                size_t M = gemm_dims[s][0], N = gemm_dims[s][1], K = gemm_dims[s][2];
                size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                size_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
                float *A = host_random(na, 40 + s), *B = host_random(nb, 50 + s);
                float *C = host_random(nc, 60 + s), *got = malloc(nc * sizeof *got);
                float *dA = upload(d, A, na), *dB = upload(d, B, nb), *dC = upload(d, C, nc);
                assert_int_equal(ops->gemm(d, ta, tb, M, N, K, 0.75f, dA, lda, dB, ldb, 0.5f,
                                           dC, ldc),
                                 PE_OK);
                download(d, got, dC, nc);
                naive_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, ldc);
                double rel = normwise_rel(got, C, nc);
                if (rel > 1e-4)
                    print_error("gemm M=%zu N=%zu K=%zu ta=%d tb=%d: %g\n", M, N, K, ta, tb,
                                rel);
                assert_true(rel <= 1e-4);
                ops->free(d, dA);
                ops->free(d, dB);
                ops->free(d, dC);
                free(A);
                free(B);
                free(C);
                free(got);
            }
    ops->close(d);
}

/* x rounded by the device (at element offset skew) is bit for bit pe_k_to_bf16(x). */
static void to_bf16_matches_host_rounding(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t n = 4099;
    for (size_t skew = 0; skew < 2; skew++) {
        float *x = host_random(n + skew, 80 + skew);
        x[skew] = 1.00390625f; /* 1 + 2^-8: a tie, rounds to even (1.0) */
        uint16_t *got = malloc(n * sizeof *got), *dh = NULL;
        float *dx = upload(d, x, n + skew);
        assert_int_equal(ops->alloc(d, (n + 1) * sizeof(uint16_t), (void **)&dh), PE_OK);
        assert_int_equal(ops->to_bf16(d, dh + skew, dx + skew, n), PE_OK);
        assert_int_equal(ops->synchronize(d), PE_OK);
        assert_int_equal(ops->copy_d2h(d, got, dh + skew, n * sizeof(uint16_t)), PE_OK);
        for (size_t i = 0; i < n; i++)
            if (got[i] != pe_k_to_bf16(x[skew + i]))
                fail_msg("to_bf16 skew %zu: element %zu: 0x%04x, host 0x%04x", skew, i, got[i],
                         pe_k_to_bf16(x[skew + i]));
        ops->free(d, dx);
        ops->free(d, dh);
        free(x);
        free(got);
    }
    ops->close(d);
}

static uint16_t *upload_bf16(be_device *d, const uint16_t *x, size_t n)
{
    void *p = NULL;
    assert_int_equal(ops->alloc(d, (n ? n : 1) * sizeof(uint16_t), &p), PE_OK);
    assert_int_equal(ops->copy_h2d(d, p, x, n * sizeof(uint16_t)), PE_OK);
    return p;
}

static void gemm_bf16_matches_host_gemm_bf16(void **state)
{
    (void)state;
    NEED_GPUS(1);
    const be_ops *host = be_host_ops();
    be_device *d = NULL, *h = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    assert_int_equal(host->open(0, &h, NULL), PE_OK);
    for (size_t s = 0; s < sizeof gemm_dims / sizeof gemm_dims[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                size_t M = gemm_dims[s][0], N = gemm_dims[s][1], K = gemm_dims[s][2];
                size_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 4, ldc = N + 1;
                size_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
                float *A = host_random(na, 90 + s), *B = host_random(nb, 95 + s);
                float *C = host_random(nc, 99 + s), *got = malloc(nc * sizeof *got);
                float *ref = malloc(nc * sizeof *ref), *ref32 = malloc(nc * sizeof *ref32);
                uint16_t *Ah = malloc(na * sizeof *Ah), *Bh = malloc(nb * sizeof *Bh);
                for (size_t i = 0; i < na; i++)
                    Ah[i] = pe_k_to_bf16(A[i]);
                for (size_t i = 0; i < nb; i++)
                    Bh[i] = pe_k_to_bf16(B[i]);
                memcpy(ref, C, nc * sizeof *C);
                memcpy(ref32, C, nc * sizeof *C);
                uint16_t *dA = upload_bf16(d, Ah, na), *dB = upload_bf16(d, Bh, nb);
                float *dC = upload(d, C, nc);
                assert_int_equal(ops->gemm_bf16(d, ta, tb, M, N, K, 0.75f, dA, lda, dB, ldb,
                                                0.5f, dC, ldc),
                                 PE_OK);
                download(d, got, dC, nc);
                assert_int_equal(host->gemm_bf16(h, ta, tb, M, N, K, 0.75f, Ah, lda, Bh, ldb,
                                                 0.5f, ref, ldc),
                                 PE_OK);
                naive_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, ref32, ldc);
                double rel = normwise_rel(got, ref, nc), rel32 = normwise_rel(got, ref32, nc);
                if (rel > 1e-4 || rel32 > 2e-2)
                    print_error("gemm_bf16 M=%zu N=%zu K=%zu ta=%d tb=%d: %g vs host bf16, %g "
                                "vs fp32\n", M, N, K, ta, tb, rel, rel32);
                assert_true(rel <= 1e-4);
                assert_true(rel32 <= 2e-2);
                ops->free(d, dA);
                ops->free(d, dB);
                ops->free(d, dC);
                free(A);
                free(B);
                free(C);
                free(Ah);
                free(Bh);
                free(got);
                free(ref);
                free(ref32);
            }
    host->close(h);
    ops->close(d);
}

/* linear on the GPU (cuBLASLt with its epilogue, or separate ops where it has no
 * algorithm) against the host's linear on the same inputs: fp32 within 1e-4 of max |y|
 * (sum order; the bias is added to the unrounded sum on the GPU), bf16 outputs within one
 * bf16 step of max |y| plus that (a sum that lands on the other side of a rounding boundary
 * moves one step, 2^-7 of a value's magnitude at most). GELU is our kernel on both. At
 * least one plan must have been fused: cuBLASLt takes plain fp32 layers with a bias. */
static void linear_matches_host_linear(void **state)
{
    (void)state;
    NEED_GPUS(1);
    const be_ops *host = be_host_ops();
    be_device *d = NULL, *h = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    assert_int_equal(host->open(0, &h, NULL), PE_OK);
    const size_t dims[][3] = {{1, 64, 256}, {7, 13, 5}, {33, 256, 96}, {128, 1024, 512}};
    const be_act acts[] = {BE_ACT_NONE, BE_ACT_RELU, BE_ACT_GELU};
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
        for (int a = 0; a < 3; a++)
            for (int mode = 0; mode < 3; mode++) { /* fp32; bf16 -> fp32; bf16 -> bf16 */
                size_t M = dims[s][0], N = dims[s][1], K = dims[s][2];
                pe_dtype dt = mode ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
                int y16 = mode == 2, with_bias = (s + (size_t)a) % 2 == 0 || a == 1;
                size_t es = mode ? sizeof(uint16_t) : sizeof(float);
                float *x = host_random(M * K, 110 + s), *W = host_random(N * K, 120 + s);
                float *b = host_random(N, 130 + s);
                uint16_t *xh = malloc(M * K * sizeof *xh), *Wh = malloc(N * K * sizeof *Wh);
                for (size_t i = 0; i < M * K; i++)
                    xh[i] = pe_k_to_bf16(x[i]);
                for (size_t i = 0; i < N * K; i++)
                    Wh[i] = pe_k_to_bf16(W[i]);
                const void *hx = mode ? (const void *)xh : x, *hW = mode ? (const void *)Wh : W;
                void *dx = NULL, *dW = NULL, *dy = NULL;
                assert_int_equal(ops->alloc(d, M * K * es, &dx), PE_OK);
                assert_int_equal(ops->alloc(d, N * K * es, &dW), PE_OK);
                assert_int_equal(ops->alloc(d, M * N * sizeof(float), &dy), PE_OK);
                assert_int_equal(ops->copy_h2d(d, dx, hx, M * K * es), PE_OK);
                assert_int_equal(ops->copy_h2d(d, dW, hW, N * K * es), PE_OK);
                float *db = upload(d, b, N);
                float *dtmp = NULL, *htmp = malloc(M * N * sizeof *htmp);
                assert_int_equal(ops->alloc(d, M * N * sizeof(float), (void **)&dtmp), PE_OK);
                assert_int_equal(ops->linear(d, dt, M, N, K, dx, dW, with_bias ? db : NULL,
                                             acts[a], dy, y16, dtmp),
                                 PE_OK);
                float *got = malloc(M * N * sizeof *got), *ref = malloc(M * N * sizeof *ref);
                uint16_t *g16 = malloc(M * N * sizeof *g16), *r16 = malloc(M * N * sizeof *r16);
                assert_int_equal(ops->synchronize(d), PE_OK);
                assert_int_equal(ops->copy_d2h(d, y16 ? (void *)g16 : got, dy,
                                               M * N * (y16 ? sizeof *g16 : sizeof *got)),
                                 PE_OK);
                assert_int_equal(host->linear(h, dt, M, N, K, hx, hW, with_bias ? b : NULL,
                                              acts[a], y16 ? (void *)r16 : ref, y16, htmp),
                                 PE_OK);
                if (y16)
                    for (size_t i = 0; i < M * N; i++) {
                        got[i] = pe_k_from_bf16(g16[i]);
                        ref[i] = pe_k_from_bf16(r16[i]);
                    }
                double rel = normwise_rel(got, ref, M * N), tol = 1e-4 + (y16 ? 0x1p-7 : 0);
                if (!(rel <= tol))
                    print_error("linear M=%zu N=%zu K=%zu act=%d mode=%d bias=%d: %g > %g\n",
                                M, N, K, (int)acts[a], mode, with_bias, rel, tol);
                assert_true(rel <= tol);
                ops->free(d, dx);
                ops->free(d, dW);
                ops->free(d, dy);
                ops->free(d, db);
                ops->free(d, dtmp);
                free(htmp);
                free(x);
                free(W);
                free(b);
                free(xh);
                free(Wh);
                free(got);
                free(ref);
                free(g16);
                free(r16);
            }
    long fused = 0;
#ifdef PE_HAVE_CUDA
    cb_linear_counts n;
    cb_linear_plans(d, &n);
    print_message("linear plans: %ld fused (cuBLASLt epilogue), %ld fused with an fp32 output "
                  "and to_bf16, %ld as separate ops\n",
                  n.fused, n.rounded, n.unfused);
    fused = n.fused + n.rounded;
#endif
    assert_true(fused > 0);
    host->close(h);
    ops->close(d);
}

static void gemm_strided_batched_matches_naive_gemm(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    size_t M = 17, N = 33, K = 40, batch = 5;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            size_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
            size_t sa = (ta ? K : M) * lda + 8, sb = (tb ? N : K) * ldb + 4, sc = M * ldc + 12;
            float *A = host_random(sa * batch, 70), *B = host_random(sb * batch, 71);
            float *C = host_random(sc * batch, 72), *got = malloc(sc * batch * sizeof *got);
            float *dA = upload(d, A, sa * batch), *dB = upload(d, B, sb * batch);
            float *dC = upload(d, C, sc * batch);
            assert_int_equal(ops->gemm_strided_batched(d, ta, tb, M, N, K, 1.0f, dA, lda, sa, dB,
                                                       ldb, sb, 0.0f, dC, ldc, sc, batch),
                             PE_OK);
            download(d, got, dC, sc * batch);
            for (size_t b = 0; b < batch; b++)
                naive_gemm(ta, tb, M, N, K, 1.0f, A + b * sa, lda, B + b * sb, ldb, 0.0f,
                           C + b * sc, ldc);
            assert_true(normwise_rel(got, C, sc * batch) <= 1e-4);
            ops->free(d, dA);
            ops->free(d, dB);
            ops->free(d, dC);
            free(A);
            free(B);
            free(C);
            free(got);
        }
    ops->close(d);
}

/* ---- decoder operations ---- */

/* Fills bytes of device memory with 0xff (a NaN in every float, -1 in every int32), so an
 * output the op failed to write shows. */
static void poison(be_device *d, void *p, size_t bytes)
{
    unsigned char *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    memset(h, 0xff, bytes);
    assert_int_equal(ops->copy_h2d(d, p, h, bytes), PE_OK);
    free(h);
}

static void *dev_bytes(be_device *d, size_t bytes)
{
    void *p = NULL;
    assert_int_equal(ops->alloc(d, bytes ? bytes : 1, &p), PE_OK);
    return p;
}

static void *upload_bytes(be_device *d, const void *x, size_t bytes)
{
    void *p = dev_bytes(d, bytes);
    assert_int_equal(ops->copy_h2d(d, p, x, bytes), PE_OK);
    return p;
}

static void download_bytes(be_device *d, void *x, const void *p, size_t bytes)
{
    assert_int_equal(ops->synchronize(d), PE_OK);
    assert_int_equal(ops->copy_d2h(d, x, p, bytes), PE_OK);
}

/* rmsnorm (also in place), rope and silu_mul against the src/kernels/ functions run on the
 * host, on float4-friendly and unaligned shapes. rmsnorm sums the squares in another order
 * (1e-5 of outputs of size ~1); rope's and silu's cosf/sinf/expf on the device are within
 * 2 ulp of the host's (1e-5 relative). */
static void rmsnorm_rope_and_silu_mul_match_host_math(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    char what[128];
    for (size_t si = 0; si < NSHAPES; si++)
        for (size_t skew = 0; skew < 2; skew++) {
            const size_t rows = shapes[si].rows, cols = shapes[si].cols, n = rows * cols;
            float *x = host_random(n + skew, 300 + si), *w = host_random(cols + skew, 310 + si);
            for (size_t i = 0; i < n + skew; i++)
                x[i] = 2.0f * x[i] + 0.25f;
            float *got = malloc((n + skew) * sizeof *got), *ref = malloc(n * sizeof *ref);
            float *dx = upload(d, x, n + skew), *dw = upload(d, w, cols + skew);
            float *dout = dev_bytes(d, (n + skew) * sizeof(float));
            for (size_t r = 0; r < rows; r++)
                pe_k_rmsnorm_row(ref + r * cols, x + skew + r * cols, w + skew, cols, 1e-6f);
            poison(d, dout, (n + skew) * sizeof(float));
            assert_int_equal(ops->rmsnorm(d, dout + skew, dx + skew, dw + skew, rows, cols, 1e-6f),
                             PE_OK);
            download(d, got, dout, n + skew);
            snprintf(what, sizeof what, "rmsnorm %zux%zu skew %zu", rows, cols, skew);
            expect_close(what, got + skew, ref, n, 1e-5, 1.0);
            /* in place */
            assert_int_equal(ops->rmsnorm(d, dx + skew, dx + skew, dw + skew, rows, cols, 1e-6f),
                             PE_OK);
            download(d, got, dx, n + skew);
            expect_close(what, got + skew, ref, n, 1e-5, 1.0);

            /* silu_mul: gate_up (rows, 2 * cols) -> out (rows, cols) */
            float *gu = host_random(2 * n + skew, 320 + si);
            for (size_t i = 0; i < 2 * n + skew; i++)
                gu[i] *= 6.0f;
            float *dgu = upload(d, gu, 2 * n + skew);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    ref[r * cols + c] = pe_k_silu_mul(gu[skew + r * 2 * cols + c],
                                                      gu[skew + r * 2 * cols + cols + c]);
            poison(d, dout, (n + skew) * sizeof(float));
            assert_int_equal(ops->silu_mul(d, dout + skew, dgu + skew, rows, cols), PE_OK);
            download(d, got, dout, n + skew);
            snprintf(what, sizeof what, "silu_mul %zux%zu skew %zu", rows, cols, skew);
            expect_close(what, got + skew, ref, n, 1e-5, 1e-3);
            ops->free(d, dgu);
            free(gu);
            ops->free(d, dx);
            ops->free(d, dw);
            ops->free(d, dout);
            free(x);
            free(w);
            free(got);
            free(ref);
        }

    /* rope: query and key heads of a fused row (stride > heads * hd), positions up to 8191
     * (large angles), inv_freq as Llama's (theta 500000); the padding stays untouched */
    const size_t hds[] = {64, 128, 6};
    for (size_t k = 0; k < sizeof hds / sizeof hds[0]; k++) {
        const size_t hd = hds[k], nheads = 5, rows = 9, stride = nheads * hd + 7;
        float *x = host_random(rows * stride, 330 + k), *inv = malloc(hd / 2 * sizeof *inv);
        float *got = malloc(rows * stride * sizeof *got), *ref = malloc(rows * stride * sizeof *ref);
        int32_t pos[9];
        for (size_t r = 0; r < rows; r++)
            pos[r] = (int32_t)((r * 977 + k) % 8192);
        for (size_t i = 0; i < hd / 2; i++)
            inv[i] = 1.0f / powf(500000.0f, (float)(2 * i) / (float)hd);
        memcpy(ref, x, rows * stride * sizeof *ref);
        for (size_t r = 0; r < rows; r++)
            for (size_t h = 0; h < nheads; h++)
                pe_k_rope_head(ref + r * stride + h * hd, (int)hd, pos[r], inv);
        float *dx = upload(d, x, rows * stride), *dinv = upload(d, inv, hd / 2);
        int32_t *dpos = upload_bytes(d, pos, sizeof pos);
        assert_int_equal(ops->rope(d, dx, rows, stride, nheads, hd, dpos, dinv), PE_OK);
        download(d, got, dx, rows * stride);
        snprintf(what, sizeof what, "rope hd %zu", hd);
        expect_close(what, got, ref, rows * stride, 1e-5, 1.0);
        for (size_t r = 0; r < rows; r++) /* the columns after the heads: untouched */
            assert_memory_equal(got + r * stride + nheads * hd, x + r * stride + nheads * hd,
                                7 * sizeof(float));
        ops->free(d, dx);
        ops->free(d, dinv);
        ops->free(d, dpos);
        free(x);
        free(inv);
        free(got);
        free(ref);
    }
    ops->close(d);
}

/* kv_append: every element of the pool after the append equals the host's pe_k_kv_store
 * of the same rows into a copy of the pool (bf16: the same rounding), bit for bit; slots
 * outside the pool change nothing. */
static void kv_append_stores_rows_at_their_slots(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t nblocks = 6;
    const pe_k_kv_shape s = {.nlayers = 3, .kv_heads = 2, .block_tokens = 16, .head_dim = 24,
                             .nblocks = nblocks};
    const size_t elems = nblocks * pe_k_kv_block_elems(s);
    const size_t rows = 7, stride = (size_t)s.kv_heads * (size_t)s.head_dim + 5;
    const int32_t slots[7] = {17, 0, 95, -1, 40, 96, 63}; /* -1 and 96 are outside the pool */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const size_t es = bf16 ? 2 : 4;
        unsigned char *pool = malloc(elems * es), *got = malloc(elems * es);
        float *init = host_random(elems, 400 + (uint64_t)bf16);
        for (size_t i = 0; i < elems; i++)
            pe_k_kv_store(pool, bf16, i, init[i]);
        float *k = host_random(rows * stride, 410), *v = host_random(rows * stride, 411);
        void *dpool = upload_bytes(d, pool, elems * es);
        float *dk = upload(d, k, rows * stride), *dv = upload(d, v, rows * stride);
        int32_t *dslots = upload_bytes(d, slots, sizeof slots);
        be_kv kv = {.base = dpool, .dtype = bf16 ? PE_DTYPE_BF16 : PE_DTYPE_FP32, .shape = s};
        assert_int_equal(ops->kv_append(d, &kv, 1, dk, dv, stride, dslots, rows), PE_OK);
        download_bytes(d, got, dpool, elems * es);
        for (size_t r = 0; r < rows; r++) {
            if (slots[r] < 0 || (size_t)slots[r] >= nblocks * 16)
                continue;
            for (int h = 0; h < s.kv_heads; h++)
                for (int dd = 0; dd < s.head_dim; dd++) {
                    size_t src = r * stride + (size_t)h * (size_t)s.head_dim + (size_t)dd;
                    int32_t b = slots[r] / 16;
                    int row = slots[r] % 16;
                    pe_k_kv_store(pool, bf16, pe_k_kv_index(s, b, 1, 0, h, row) + (size_t)dd, k[src]);
                    pe_k_kv_store(pool, bf16, pe_k_kv_index(s, b, 1, 1, h, row) + (size_t)dd, v[src]);
                }
        }
        assert_memory_equal(got, pool, elems * es);
        ops->free(d, dpool);
        ops->free(d, dk);
        ops->free(d, dv);
        ops->free(d, dslots);
        free(pool);
        free(got);
        free(init);
        free(k);
        free(v);
    }
    ops->close(d);
}

/* ---- attention ---- */

typedef struct attn_case {
    int heads, kv_heads, head_dim;
    int32_t window;
} attn_case;

/* A step: chunk c has n[c] tokens at positions pos0[c].. of its own sequence. */
typedef struct attn_step {
    const char *name;
    int nchunks;
    int32_t n[6], pos0[6];
} attn_step;

/* Runs one step of one case on a pool of dtype bf16 and compares every output with
 * pe_k_attend_naive on the host over the same pool and tables. The sequences' blocks are
 * a shuffled set, so no table is contiguous; the tested layer is 1 of 2. Normwise 1e-5:
 * the kernels sum in another order (tiles, splits, sum(e v) / sum(e)) in fp32. */
static void check_attention(be_device *d, const attn_case *ac, const attn_step *st, int bf16,
                            uint64_t seed)
{
    pe_k_kv_shape s = {.nlayers = 2, .kv_heads = ac->kv_heads, .block_tokens = 16,
                       .head_dim = ac->head_dim};
    const int hd = ac->head_dim, B = 16, layer = 1;
    size_t rows = 0, ntables = 0;
    int32_t max_keys = 0, chunks[6 * PE_K_CHUNK_FIELDS], bt_at[6];
    for (int c = 0; c < st->nchunks; c++) {
        int32_t len = st->pos0[c] + st->n[c];
        chunks[c * PE_K_CHUNK_FIELDS + PE_K_CHUNK_ROW0] = (int32_t)rows;
        chunks[c * PE_K_CHUNK_FIELDS + PE_K_CHUNK_N] = st->n[c];
        chunks[c * PE_K_CHUNK_FIELDS + PE_K_CHUNK_POS0] = st->pos0[c];
        chunks[c * PE_K_CHUNK_FIELDS + PE_K_CHUNK_BT] = (int32_t)ntables;
        bt_at[c] = (int32_t)ntables;
        rows += (size_t)st->n[c];
        ntables += (size_t)((len + B - 1) / B);
        max_keys = len > max_keys ? len : max_keys;
    }
    const size_t nblocks = ntables + 3; /* three blocks nobody uses */
    s.nblocks = nblocks;
    int32_t *tables = malloc(ntables * sizeof *tables);
    for (size_t i = 0; i < ntables; i++)
        tables[i] = (int32_t)i;
    uint64_t rs = seed;
    for (size_t i = ntables; i > 1; i--) { /* shuffle */
        size_t j = (size_t)(pe_k_splitmix64(&rs) % i);
        int32_t t = tables[i - 1];
        tables[i - 1] = tables[j];
        tables[j] = t;
    }
    for (size_t i = 0; i < ntables; i++)
        tables[i] += 2; /* and skip blocks 0 and 1 */
    const size_t elems = nblocks * pe_k_kv_block_elems(s), es = bf16 ? 2 : 4;
    unsigned char *pool = malloc(elems * es);
    float *init = host_random(elems, seed + 1);
    for (size_t i = 0; i < elems; i++)
        pe_k_kv_store(pool, bf16, i, init[i]);
    const size_t q_stride = (size_t)ac->heads * (size_t)hd + 3;
    const size_t out_stride = (size_t)ac->heads * (size_t)hd + 5;
    float *q = host_random(rows * q_stride, seed + 2);
    for (size_t i = 0; i < rows * q_stride; i++)
        q[i] *= 3.0f; /* scores of a few units: a softmax that is neither flat nor one-hot */
    float *ref = malloc(rows * out_stride * sizeof *ref), *got = malloc(rows * out_stride * sizeof *got);
    float *scores = malloc((size_t)max_keys * sizeof *scores);
    const float scale = 1.0f / sqrtf((float)hd);
    memset(ref, 0xff, rows * out_stride * sizeof *ref);
    for (int c = 0; c < st->nchunks; c++)
        for (int32_t i = 0; i < st->n[c]; i++) {
            size_t r = (size_t)chunks[c * PE_K_CHUNK_FIELDS] + (size_t)i;
            for (int h = 0; h < ac->heads; h++)
                pe_k_attend_naive(ref + r * out_stride + (size_t)h * (size_t)hd,
                                  q + r * q_stride + (size_t)h * (size_t)hd, pool, bf16, s, layer,
                                  h / (ac->heads / ac->kv_heads), tables + bt_at[c],
                                  st->pos0[c] + i, ac->window, scale, scores);
        }
    void *dpool = upload_bytes(d, pool, elems * es);
    float *dq = upload(d, q, rows * q_stride);
    float *dout = dev_bytes(d, rows * out_stride * sizeof(float));
    int32_t *dchunks = upload_bytes(d, chunks, (size_t)st->nchunks * PE_K_CHUNK_FIELDS * 4);
    int32_t *dtables = upload_bytes(d, tables, ntables * sizeof *tables);
    poison(d, dout, rows * out_stride * sizeof(float));
    be_kv kv = {.base = dpool, .dtype = bf16 ? PE_DTYPE_BF16 : PE_DTYPE_FP32, .shape = s};
    be_attn a = {.rows = rows, .q = dq, .q_stride = q_stride, .out = dout,
                 .out_stride = out_stride, .heads = ac->heads, .scale = scale,
                 .window = ac->window, .nchunks = (size_t)st->nchunks, .chunks = dchunks,
                 .block_tables = dtables, .max_keys = max_keys};
    pe_status sst = ops->attention(d, &kv, layer, &a);
    if (sst != PE_OK)
        print_error("attention: %s\n", ops->last_error(d));
    assert_int_equal(sst, PE_OK);
    download(d, got, dout, rows * out_stride);
    double mref = 0, merr = 0;
    for (size_t r = 0; r < rows; r++) {
        for (size_t j = 0; j < (size_t)ac->heads * (size_t)hd; j++) {
            double g = got[r * out_stride + j], e = ref[r * out_stride + j];
            mref = fmax(mref, fabs(e));
            merr = isnan(g) ? INFINITY : fmax(merr, fabs(g - e));
        }
        for (size_t j = (size_t)ac->heads * (size_t)hd; j < out_stride; j++) /* padding */
            assert_true(isnan(got[r * out_stride + j]));
    }
    if (!(merr <= 1e-5 * mref))
        print_error("attention %s: %d heads / %d KV heads x %d, window %ld, %s pool: max error "
                    "%g of max %g\n",
                    st->name, ac->heads, ac->kv_heads, hd, (long)ac->window,
                    bf16 ? "bf16" : "fp32", merr, mref);
    assert_true(merr <= 1e-5 * mref);
    ops->free(d, dpool);
    ops->free(d, dq);
    ops->free(d, dout);
    ops->free(d, dchunks);
    ops->free(d, dtables);
    free(tables);
    free(pool);
    free(init);
    free(q);
    free(ref);
    free(got);
    free(scores);
}

/* Decode steps (one token per chunk; positions far apart, one long enough to split its
 * keys), a prefill chunk after a cached prefix, and mixed steps of chunks of several
 * lengths; MHA, GQA (groups of 4 and of 6), head dims 64, 128, 80 (padded) and 256;
 * sliding windows; fp32 and bf16 pools. */
static void attention_matches_naive_twin(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const attn_case cases[] = {
        {12, 12, 64, 0}, {8, 2, 128, 0}, {6, 1, 80, 0}, {4, 2, 256, 0}, {8, 2, 128, 7},
        {12, 12, 64, 40},
    };
    const int32_t long_pos = tu_small() ? 150 : 1200;
    const attn_step steps[] = {
        {"decode", 5, {1, 1, 1, 1, 1}, {0, 3, 17, 40, long_pos}},
        {"decode-one", 1, {1}, {long_pos}},
        {"prefill", 1, {37}, {20}},
        {"prefill-new", 1, {70}, {0}},
        {"mixed", 4, {1, 9, 1, 20}, {50, 0, 5, 33}},
        {"mixed-2", 3, {3, 2, 5}, {0, 30, 16}},
    };
    const size_t ncases = sizeof cases / sizeof cases[0], nsteps = sizeof steps / sizeof steps[0];
    for (size_t c = 0; c < ncases; c++)
        for (size_t k = 0; k < nsteps; k++)
            for (int bf16 = 0; bf16 < 2; bf16++) {
                if (tu_small() && (c + k + (size_t)bf16) % 3 != 0)
                    continue; /* valgrind: a third of the grid, every case and step in it */
                check_attention(d, &cases[c], &steps[k], bf16, 500 + 31 * c + 7 * k);
            }
    ops->close(d);
#ifdef PE_CUDA_FAKE
    /* A fake GPU of one multiprocessor: the decode grid hardly splits, so a long row runs as
     * many key tiles of one block (the online softmax's rescaling across tiles), which the
     * 132 of the default fake (splits of one tile each, at small sizes) do not reach. */
    setenv("PE_CUDA_FAKE_SMS", "1", 1);
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    for (size_t c = 0; c < ncases; c++)
        for (int bf16 = 0; bf16 < 2; bf16++)
            check_attention(d, &cases[c], &steps[(c + (size_t)bf16) % 2], bf16, 900 + c);
    ops->close(d);
    unsetenv("PE_CUDA_FAKE_SMS");
#endif
}

/* ---- argmax, topk, sample ---- */

#define TOPK_K 64 /* the largest k of the CUDA topk */

/* Row r of a test matrix x(rows, n): random logits of a few units, some rows with many
 * ties (values on a grid of 0.5), NaNs, -0/+0 and a repeated maximum. */
static float *logit_rows(size_t rows, size_t n, uint64_t seed)
{
    float *x = host_random(rows * n, seed);
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        for (size_t i = 0; i < n; i++)
            xr[i] *= 6.0f;
        if (r % 3 == 1)
            for (size_t i = 0; i < n; i++)
                xr[i] = roundf(xr[i] * 2.0f) / 2.0f;
        if (r % 4 == 2 && n > 3) {
            xr[n / 2] = NAN;
            xr[1] = -0.0f;
            xr[2] = 0.0f;
        }
        if (r % 5 == 3 && n > 2)
            xr[n - 1] = xr[n / 3] = 9.0f; /* the max twice: the first index wins */
    }
    return x;
}

static void argmax_topk_and_lse_match_host(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t widths[] = {1, 5, 1000, 50257};
    const size_t nw = tu_small() ? 3 : 4, rows = 11;
    for (size_t wi = 0; wi < nw; wi++) {
        const size_t n = widths[wi];
        float *x = logit_rows(rows, n, 600 + wi);
        float *dx = upload(d, x, rows * n);
        int32_t *didx = dev_bytes(d, rows * TOPK_K * sizeof(int32_t));
        float *dval = dev_bytes(d, rows * TOPK_K * sizeof(float));
        float *dlse = dev_bytes(d, rows * sizeof(float));
        int32_t gi[11 * TOPK_K], ri[TOPK_K];
        float gv[11 * TOPK_K], rv[TOPK_K], glse[11];
        poison(d, didx, rows * sizeof(int32_t));
        assert_int_equal(ops->argmax(d, dx, rows, n, didx), PE_OK);
        download_bytes(d, gi, didx, rows * sizeof(int32_t));
        for (size_t r = 0; r < rows; r++)
            assert_int_equal(gi[r], pe_k_argmax_row(x + r * n, (int32_t)n));
        const size_t ks[] = {1, 5, TOPK_K};
        for (size_t ki = 0; ki < 3; ki++) {
            const size_t k = ks[ki] < n ? ks[ki] : n;
            poison(d, didx, rows * k * sizeof(int32_t));
            poison(d, dval, rows * k * sizeof(float));
            poison(d, dlse, rows * sizeof(float));
            assert_int_equal(ops->topk(d, dx, rows, n, k, didx, dval, dlse), PE_OK);
            download_bytes(d, gi, didx, rows * k * sizeof(int32_t));
            download_bytes(d, gv, dval, rows * k * sizeof(float));
            download_bytes(d, glse, dlse, rows * sizeof(float));
            for (size_t r = 0; r < rows; r++) {
                pe_k_topk_row(x + r * n, (int32_t)n, (int32_t)k, ri, rv);
                for (size_t j = 0; j < k; j++)
                    if (gi[r * k + j] != ri[j] || memcmp(&gv[r * k + j], &rv[j], sizeof rv[j]))
                        fail_msg("topk n %zu k %zu row %zu: entry %zu is (%d, %g), host (%d, %g)",
                                 n, k, r, j, gi[r * k + j], (double)gv[r * k + j], ri[j],
                                 (double)rv[j]);
                float l = pe_k_logsumexp_row(x + r * n, (int32_t)n);
                if (isnan(l))
                    assert_true(isnan(glse[r]));
                else
                    assert_true(fabs((double)glse[r] - l) <= 1e-5 * fmax(1.0, fabs(l)));
            }
        }
        ops->free(d, dx);
        ops->free(d, didx);
        ops->free(d, dval);
        ops->free(d, dlse);
        free(x);
    }
    ops->close(d);
}

/* The host's rule in double (from the host's float weights) says how close row x's draw
 * is to a boundary, relative to the mass involved: the smaller of |running sum - u kept|
 * over the kept tokens, |mass at or above the top-p threshold - target| and, with min_p,
 * |a weight - min_p| (weights are relative to the max's 1). A token that
 * differs from the host's is allowed only where this is below 1e-4: another summation
 * order (or an ulp of expf) can move the draw across such a boundary, nothing else can. */
static double draw_margin(const float *x, int32_t n, pe_k_sampling p, float *w, uint32_t *hist,
                          float *mass)
{
    if (!(p.temperature > 0.0f))
        return INFINITY;
    float tk = -INFINITY;
    if (p.top_k > 0 && p.top_k < n)
        tk = pe_k_kth_largest(x, n, p.top_k, hist);
    float mx = x[pe_k_argmax_row(x, n)];
    double z = 0, margin = INFINITY;
    float zf = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float raw = x[i] >= tk ? expf((x[i] - mx) / p.temperature) : 0.0f;
        if (p.min_p > 0.0f && raw > 0.0f) /* a weight at min_p is kept or not by an ulp */
            margin = fmin(margin, fabs((double)raw - (double)p.min_p));
        w[i] = pe_k_sample_weight(x[i], tk, mx, p.temperature, p.min_p);
        z += w[i];
        zf += w[i];
    }
    float tp = 0.0f;
    if (p.top_p < 1.0f) {
        tp = pe_k_mass_threshold(w, n, p.top_p * zf, mass);
        double ge = 0, gt = 0, target = (double)p.top_p * z;
        for (int32_t i = 0; i < n; i++) {
            ge += w[i] >= tp ? w[i] : 0.0;
            gt += w[i] > tp ? w[i] : 0.0;
        }
        margin = fmin(margin, fmin(fabs(ge - target), fabs(gt - target)) / z);
    }
    double kept = 0, c = 0;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0f && w[i] >= tp)
            kept += w[i];
    const double r = (double)p.u * kept;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0f && w[i] >= tp) {
            c += w[i];
            margin = fmin(margin, fabs(c - r) / kept);
        }
    return margin;
}

/* penalize against sample.h's pe_k_penalize_rows (the host's loop): a thread an entry, each
 * logit changed by its entry alone (a rank's ids from id0: entries outside left out), bit
 * for bit (an addition, a division or product, a subtraction). */
static void penalize_agrees_with_host_rule(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t rows = 9, n = 3000, count = tu_small() ? 200 : 2000;
    const int32_t id0 = 1500; /* a second rank's ids: 1500 .. 4499 */
    float *x = logit_rows(rows, n, 812), *want = malloc(rows * n * sizeof *want);
    for (size_t i = 0; i < rows * n; i++)
        if (isnan(x[i]))
            x[i] = -1.0f;
    memcpy(want, x, rows * n * sizeof *want);
    pe_k_penalty *p = malloc(count * sizeof *p);
    /* distinct (row, id): a row's ids step through 1000 .. 5000, so some are another rank's */
    const size_t step = 4000 / (count / (rows + 1) + 1);
    for (size_t i = 0; i < count; i++) {
        const size_t r = i % (rows + 1); /* row 9: past the step */
        p[i] = (pe_k_penalty){(int32_t)r, (int32_t)(1000 + i / (rows + 1) * step + i % 3),
                              (float)(i % 4) - 1.5f, 1.0f + (float)(i % 5) * 0.25f,
                              (float)(i % 7) * 0.3f - 0.9f};
    }
    pe_k_penalize_rows(want, (int32_t)rows, (int32_t)n, id0, p, (int32_t)count);
    float *dx = upload(d, x, rows * n);
    void *dp = upload_bytes(d, p, count * sizeof *p);
    assert_int_equal(ops->penalize(d, dx, rows, n, id0, dp, count), PE_OK);
    float *got = malloc(rows * n * sizeof *got);
    download_bytes(d, got, dx, rows * n * sizeof(float));
    assert_memory_equal(got, want, rows * n * sizeof(float));
    size_t changed = 0;
    for (size_t i = 0; i < rows * n; i++)
        changed += memcmp(&got[i], &x[i], sizeof(float)) != 0;
    print_message("penalize: %zu of %zu entries changed a logit\n", changed, count);
    assert_true(changed > count / 4 && changed < count); /* some outside the rank's ids */
    assert_int_equal(ops->penalize(d, dx, rows, 0, id0, dp, count), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(d), "penalize"));
    ops->free(d, dx);
    ops->free(d, dp);
    free(x), free(want), free(got), free(p);
    ops->close(d);
}

/* mask against sample.h's pe_k_mask_rows (the host's loop): a thread a logit, bit for bit
 * (a logit is kept or set to -inf, nothing else). A rank's ids 1500 .. 2496 (n not a multiple
 * of 32, id0 not on a word) under random masks of 70 words (ids 0 .. 2239: the ids past them
 * are never allowed); some rows left alone (row_mask -1), NaNs kept where allowed. */
static void mask_agrees_with_host_rule(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t rows = tu_small() ? 6 : 13, n = 997, words = 70, nmasks = 3;
    const int32_t id0 = 1500;
    float *x = logit_rows(rows, n, 913), *want = malloc(rows * n * sizeof *want);
    memcpy(want, x, rows * n * sizeof *want);
    uint32_t *bits = malloc(nmasks * words * sizeof *bits);
    int32_t *row_mask = malloc(rows * sizeof *row_mask);
    uint64_t rs = 914;
    for (size_t i = 0; i < nmasks * words; i++)
        bits[i] = (uint32_t)pe_k_splitmix64(&rs);
    for (size_t r = 0; r < rows; r++) /* -1 .. nmasks - 1 */
        row_mask[r] = (int32_t)(pe_k_splitmix64(&rs) % (nmasks + 1)) - 1;
    row_mask[0] = -1; /* at least one row left alone and one under the last mask */
    row_mask[1] = (int32_t)nmasks - 1;
    pe_k_mask_rows(want, (int32_t)rows, (int32_t)n, id0, row_mask, bits, (int32_t)words);
    float *dx = upload(d, x, rows * n);
    void *drm = upload_bytes(d, row_mask, rows * sizeof *row_mask);
    void *dbits = upload_bytes(d, bits, nmasks * words * sizeof *bits);
    assert_int_equal(ops->mask(d, dx, rows, n, id0, drm, dbits, words), PE_OK);
    float *got = malloc(rows * n * sizeof *got);
    download_bytes(d, got, dx, rows * n * sizeof(float));
    assert_memory_equal(got, want, rows * n * sizeof(float));
    size_t changed = 0, stayed = 0;
    for (size_t i = 0; i < rows * n; i++) {
        const int same = memcmp(&got[i], &x[i], sizeof(float)) == 0;
        changed += !same;
        stayed += same && row_mask[i / n] >= 0; /* kept under a mask */
    }
    print_message("mask: %zu of %zu logits set to -inf, %zu kept under a mask\n", changed,
                  rows * n, stayed);
    assert_true(changed > 0 && stayed > 0);
    assert_int_equal(ops->mask(d, dx, 0, n, id0, drm, dbits, words), PE_OK); /* no rows */
    download_bytes(d, got, dx, rows * n * sizeof(float));
    assert_memory_equal(got, want, rows * n * sizeof(float));
    assert_int_equal(ops->mask(d, dx, rows, 0, id0, drm, dbits, words), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(d), "mask"));
    assert_int_equal(ops->mask(d, NULL, rows, n, id0, drm, dbits, words), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(d), "mask"));
    ops->free(d, dx);
    ops->free(d, drm);
    ops->free(d, dbits);
    free(x), free(want), free(got), free(bits), free(row_mask);
    ops->close(d);
}

/* sample against pe_k_sample_row on the same logits and draws, over many rows: greedy,
 * temperatures, top-k (1, 40, the whole row), top-p (0.5, 0.9, 1), min-p (0, 0.05, 0.3),
 * together; the token
 * the same except at a boundary (draw_margin), the logit output the chosen one's, and on
 * the GPU the same tokens on a second run (fixed-point sums: no order dependence). */
static void sample_agrees_with_host_rule(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    const size_t widths[] = {7, 1000, 50257};
    const size_t nw = tu_small() ? 2 : 3;
    const float temps[] = {0.0f, 0.7f, 1.0f, 1.6f};
    const int32_t topks[] = {0, 1, 40, 1000000};
    const float topps[] = {1.0f, 0.9f, 0.5f};
    const float minps[] = {0.0f, 0.05f, 0.3f};
    for (size_t wi = 0; wi < nw; wi++) {
        const size_t n = widths[wi], rows = tu_small() ? 24 : (n > 10000 ? 96 : 480);
        float *x = logit_rows(rows, n, 700 + wi);
        for (size_t i = 0; i < rows * n; i++) /* no NaNs here: the host's rule is */
            if (isnan(x[i]))                  /* undefined on them */
                x[i] = -1.0f;
        pe_k_sampling *ps = malloc(rows * sizeof *ps);
        for (size_t r = 0; r < rows; r++) {
            ps[r].temperature = temps[r % 4];
            ps[r].top_k = topks[(r / 4) % 4];
            ps[r].top_p = topps[(r / 16) % 3];
            ps[r].u = pe_k_uniform(0x5eed + wi, r);
            ps[r].min_p = minps[(r + r / 3) % 3];
        }
        float *dx = upload(d, x, rows * n), *dlogit = dev_bytes(d, rows * sizeof(float));
        void *dps = upload_bytes(d, ps, rows * sizeof *ps);
        int32_t *dtok = dev_bytes(d, rows * sizeof(int32_t));
        int32_t *tok = malloc(rows * sizeof *tok), *tok2 = malloc(rows * sizeof *tok2);
        float *logit = malloc(rows * sizeof *logit), *w = malloc(n * sizeof *w), mass[256];
        uint32_t hist[256];
        poison(d, dtok, rows * sizeof(int32_t));
        poison(d, dlogit, rows * sizeof(float));
        assert_int_equal(ops->sample(d, dx, rows, n, dps, dtok, dlogit), PE_OK);
        download_bytes(d, tok, dtok, rows * sizeof(int32_t));
        download_bytes(d, logit, dlogit, rows * sizeof(float));
        poison(d, dtok, rows * sizeof(int32_t));
        assert_int_equal(ops->sample(d, dx, rows, n, dps, dtok, NULL), PE_OK);
        download_bytes(d, tok2, dtok, rows * sizeof(int32_t));
        assert_memory_equal(tok, tok2, rows * sizeof(int32_t));
        size_t differ = 0;
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * n;
            int32_t h = pe_k_sample_row(xr, (int32_t)n, ps[r], w, hist, mass);
            assert_true(tok[r] >= 0 && (size_t)tok[r] < n);
            assert_memory_equal(&logit[r], &xr[tok[r]], sizeof(float));
            if (tok[r] == h)
                continue;
            differ++;
            double m = draw_margin(xr, (int32_t)n, ps[r], w, hist, mass);
            if (!(m < 1e-4))
                fail_msg("sample n %zu row %zu (T %g, top_k %d, top_p %g, min_p %g, u %g): "
                         "token %d, host %d, and the draw is %g of the mass from any boundary",
                         n, r, (double)ps[r].temperature, ps[r].top_k, (double)ps[r].top_p,
                         (double)ps[r].min_p, (double)ps[r].u, tok[r], h, m);
        }
        print_message("sample n %zu: %zu of %zu rows differ from the host, each at a boundary\n",
                      n, differ, rows);
        assert_true(differ * 50 <= rows); /* boundaries are rare: at most 2% */
        ops->free(d, dx);
        ops->free(d, dlogit);
        ops->free(d, dps);
        ops->free(d, dtok);
        free(x);
        free(ps);
        free(tok);
        free(tok2);
        free(logit);
        free(w);
    }
    ops->close(d);
}

/* Arguments the ops cannot run with are PE_EINVAL with a message naming the op. */
static void decoder_ops_refuse_bad_arguments(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d = NULL;
    assert_int_equal(ops->open(0, &d, NULL), PE_OK);
    float *buf = dev_bytes(d, 4096 * sizeof(float));
    int32_t *ibuf = dev_bytes(d, 64 * sizeof(int32_t));
    const pe_k_kv_shape s = {.nlayers = 2, .kv_heads = 2, .block_tokens = 16, .head_dim = 8,
                             .nblocks = 4};
    be_kv kv = {.base = buf, .dtype = PE_DTYPE_FP32, .shape = s};
    be_attn a = {.rows = 1, .q = buf, .q_stride = 32, .out = buf, .out_stride = 32, .heads = 4,
                 .scale = 0.5f, .nchunks = 1, .chunks = ibuf, .block_tables = ibuf,
                 .max_keys = 1};
#define REFUSED(call, word)                                                                   \
    do {                                                                                      \
        assert_int_equal((call), PE_EINVAL);                                                  \
        if (!strstr(ops->last_error(d), word))                                                \
            fail_msg("%s: message '%s' lacks '%s'", #call, ops->last_error(d), word);         \
    } while (0)
    REFUSED(ops->rmsnorm(d, buf, buf, buf, 2, 4, -1.0f), "rmsnorm");
    REFUSED(ops->rmsnorm(d, buf, buf, buf, 2, 0, 1e-5f), "cols"); /* as the host */
    REFUSED(ops->rope(d, buf, 2, 16, 2, 7, ibuf, buf), "odd");
    REFUSED(ops->rope(d, buf, 2, 16, 2, 16, ibuf, buf), "stride");
    REFUSED(ops->kv_append(d, &kv, 2, buf, buf, 16, ibuf, 1), "layer 2");
    REFUSED(ops->kv_append(d, &kv, 0, buf, buf, 15, ibuf, 1), "stride");
    REFUSED(ops->attention(d, &kv, 5, &a), "layer 5");
    kv.shape.head_dim = 7; /* odd, as the host refuses it: RoPE turns pairs of dimensions */
    a.q_stride = a.out_stride = 4 * 7;
    REFUSED(ops->attention(d, &kv, 0, &a), "even");
    REFUSED(ops->kv_append(d, &kv, 0, buf, buf, 14, ibuf, 1), "even");
    kv.shape.head_dim = 8;
    a.q_stride = a.out_stride = 32;
    a.heads = 3;
    REFUSED(ops->attention(d, &kv, 0, &a), "multiple");
    a.heads = 4;
    a.q_stride = 31;
    REFUSED(ops->attention(d, &kv, 0, &a), "stride");
    a.q_stride = 32;
    a.max_keys = 0;
    REFUSED(ops->attention(d, &kv, 0, &a), "max_keys");
    kv.shape.head_dim = 512;
    a.q_stride = a.out_stride = 4 * 512;
    REFUSED(ops->attention(d, &kv, 0, &a), "head_dim 512");
    REFUSED(ops->argmax(d, buf, 2, 0, ibuf), "argmax");
    REFUSED(ops->topk(d, buf, 1, 100, 65, ibuf, buf, NULL), "k = 65");
    REFUSED(ops->topk(d, buf, 1, 3, 4, ibuf, buf, NULL), "k = 4");
    REFUSED(ops->sample(d, buf, 1, (size_t)1 << 24, NULL, ibuf, NULL), "sample");
#undef REFUSED
    /* the device still works */
    assert_int_equal(ops->synchronize(d), PE_OK);
    ops->free(d, buf);
    ops->free(d, ibuf);
    ops->close(d);
}

/* No rows is PE_OK before any other check, on both backends alike: rows of 0 values (the
 * CUDA check once divided by them) and a k wider than the empty rows; nothing is written. */
static void sample_ops_accept_no_rows(void **state)
{
    (void)state;
    NEED_GPUS(1);
    const be_ops *backends[2] = {be_host_ops(), ops};
    for (int b = 0; b < 2; b++) {
        const be_ops *o = backends[b];
        be_device *d = NULL;
        assert_int_equal(o->open(0, &d, NULL), PE_OK);
        float *buf = NULL;
        int32_t *ibuf = NULL;
        int32_t mark[16], got[16];
        float fmark[16], fgot[16];
        for (int i = 0; i < 16; i++) {
            mark[i] = -7 - i;
            fmark[i] = 0.5f + (float)i;
        }
        assert_int_equal(o->alloc(d, sizeof fmark, (void **)&buf), PE_OK);
        assert_int_equal(o->alloc(d, sizeof mark, (void **)&ibuf), PE_OK);
        assert_int_equal(o->copy_h2d(d, buf, fmark, sizeof fmark), PE_OK);
        assert_int_equal(o->copy_h2d(d, ibuf, mark, sizeof mark), PE_OK);
        for (size_t n = 0; n <= 4; n += 4) {
            assert_int_equal(o->argmax(d, buf, 0, n, ibuf), PE_OK);
            assert_int_equal(o->topk(d, buf, 0, n, n + 1, ibuf, buf, buf), PE_OK);
            assert_int_equal(o->sample(d, buf, 0, n, NULL, ibuf, buf), PE_OK);
        }
        assert_int_equal(o->synchronize(d), PE_OK);
        assert_int_equal(o->copy_d2h(d, got, ibuf, sizeof got), PE_OK);
        assert_int_equal(o->copy_d2h(d, fgot, buf, sizeof fgot), PE_OK);
        assert_memory_equal(got, mark, sizeof mark);
        assert_memory_equal(fgot, fmark, sizeof fmark);
        o->free(d, buf);
        o->free(d, ibuf);
        o->close(d);
    }
}

/* ---- collectives: n rank threads, each opening its own device ---- */

typedef struct harness harness;
typedef void (*body_fn)(harness *h, int rank);

struct harness {
    int n;
    const int *ids;
    be_device *devs[MAXR];
    be_comm *comms[MAXR];
    pthread_barrier_t pb;
    pe_status create_status;
    char create_msg[PE_ERR_LEN];
    body_fn body;
    pe_status st[MAXR];
    char msg[MAXR][PE_ERR_LEN];
    float *out[MAXR][8]; /* host copies of each rank's results, per check */
    atomic_int counter;
};

typedef struct rank_arg {
    harness *h;
    int rank;
} rank_arg;

static void record(harness *h, int rank, pe_status s)
{
    if (s != PE_OK && h->st[rank] == PE_OK) {
        h->st[rank] = s;
        snprintf(h->msg[rank], sizeof h->msg[rank], "%s", ops->last_error(h->devs[rank]));
    }
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    harness *h = a->h;
    pe_err err = {{0}};
    if (ops->open(h->ids[a->rank], &h->devs[a->rank], &err) != PE_OK) {
        h->devs[a->rank] = NULL;
        h->st[a->rank] = PE_ENODEV;
        snprintf(h->msg[a->rank], sizeof h->msg[a->rank], "%s", err.msg);
    }
    pthread_barrier_wait(&h->pb);
    if (a->rank == 0) {
        int all = 1;
        for (int r = 0; r < h->n; r++)
            all &= h->devs[r] != NULL;
        h->create_status = all ? ops->comm_create(h->devs, h->n, h->comms, &err) : PE_ENODEV;
        snprintf(h->create_msg, sizeof h->create_msg, "%s", err.msg);
    }
    pthread_barrier_wait(&h->pb);
    if (h->create_status == PE_OK)
        h->body(h, a->rank);
    pthread_barrier_wait(&h->pb);
    if (a->rank == 0 && h->create_status == PE_OK)
        ops->comm_destroy(h->comms, h->n);
    pthread_barrier_wait(&h->pb);
    if (h->devs[a->rank])
        ops->close(h->devs[a->rank]);
    return NULL;
}

static void run_ranks(harness *h, const int *ids, int n, body_fn body)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    h->ids = ids;
    h->body = body;
    atomic_init(&h->counter, 0);
    assert_int_equal(pthread_barrier_init(&h->pb, NULL, (unsigned)n), 0);
    pthread_t t[MAXR];
    rank_arg a[MAXR];
    for (int r = 0; r < n; r++) {
        a[r] = (rank_arg){h, r};
        assert_int_equal(pthread_create(&t[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&h->pb);
    if (h->create_status != PE_OK)
        print_error("comm_create: %s\n", h->create_msg);
    assert_int_equal(h->create_status, PE_OK);
}

static void assert_all_ok(const harness *h)
{
    for (int r = 0; r < h->n; r++) {
        if (h->st[r] != PE_OK)
            print_error("rank %d: %s: %s\n", r, pe_status_str(h->st[r]), h->msg[r]);
        assert_int_equal(h->st[r], PE_OK);
    }
}

static void free_outputs(harness *h)
{
    for (int r = 0; r < MAXR; r++)
        for (int k = 0; k < 8; k++) {
            free(h->out[r][k]);
            h->out[r][k] = NULL;
        }
}

static const size_t counts[] = {1, 5, 1000, 65537};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Rank q's data for count c, scaled by rank so that the order of a sum shows in its bits. */
static float *rank_data(size_t n, int q, size_t c)
{
    float *x = host_random(n, 1000u * c + (uint64_t)q * 7919u + 1u);
    static const float scale[] = {1.0f, 1.7f, 0.3f, 7.0f, 0.05f, 2.5f, 13.0f, 0.6f};
    for (size_t i = 0; i < n; i++)
        x[i] *= scale[q % 8];
    return x;
}

/* ref(count) = sum over q < n of rank q's data at off, in rank order, in float. */
static void rank_order_sum(float *ref, int n, size_t total, size_t off, size_t count, size_t c)
{
    for (size_t i = 0; i < count; i++)
        ref[i] = 0.0f;
    for (int q = 0; q < n; q++) {
        float *x = rank_data(total, q, c);
        for (size_t i = 0; i < count; i++)
            ref[i] = q == 0 ? x[off + i] : pe_k_add(ref[i], x[off + i]);
        free(x);
    }
}

/* Uploads rank data, runs the collectives for count index c; keeps results in h->out. */
static void collectives_body(harness *h, int r, size_t c)
{
    be_device *d = h->devs[r];
    be_comm *cm = h->comms[r];
    int n = h->n;
    size_t count = counts[c];
    float *x = rank_data(count * (size_t)n, r, c);
    void *send = NULL, *recv = NULL, *inplace = NULL;
    size_t big = count * (size_t)n;
    record(h, r, ops->alloc(d, big * sizeof(float), &send));
    record(h, r, ops->alloc(d, big * sizeof(float), &recv));
    record(h, r, ops->alloc(d, big * sizeof(float), &inplace));
    if (h->st[r] != PE_OK)
        goto out;
    record(h, r, ops->copy_h2d(d, send, x, big * sizeof(float)));
    record(h, r, ops->copy_h2d(d, inplace, x, count * sizeof(float)));
    /* 0: allreduce out of place; 1: in place */
    record(h, r, ops->allreduce_sum(cm, send, recv, count));
    record(h, r, ops->allreduce_sum(cm, inplace, inplace, count));
    for (int k = 0; k < 6; k++)
        h->out[r][k] = calloc(big, sizeof(float));
    record(h, r, ops->synchronize(d));
    record(h, r, ops->copy_d2h(d, h->out[r][0], recv, count * sizeof(float)));
    record(h, r, ops->copy_d2h(d, h->out[r][1], inplace, count * sizeof(float)));
    /* 2: reduce_scatter of send(n * count) */
    record(h, r, ops->reduce_scatter(cm, send, recv, count));
    record(h, r, ops->synchronize(d));
    record(h, r, ops->copy_d2h(d, h->out[r][2], recv, count * sizeof(float)));
    /* 3: allgather of the first count of send; 4: in place (send is recv + r * count) */
    record(h, r, ops->allgather(cm, send, recv, count));
    record(h, r, ops->copy_d2d(d, (float *)inplace + (size_t)r * count, send,
                               count * sizeof(float)));
    record(h, r, ops->allgather(cm, (float *)inplace + (size_t)r * count, inplace, count));
    record(h, r, ops->synchronize(d));
    record(h, r, ops->copy_d2h(d, h->out[r][3], recv, big * sizeof(float)));
    record(h, r, ops->copy_d2h(d, h->out[r][4], inplace, big * sizeof(float)));
    /* 5: broadcast from the last rank */
    record(h, r, ops->copy_h2d(d, recv, x, count * sizeof(float)));
    record(h, r, ops->broadcast(cm, recv, count, n - 1));
    record(h, r, ops->synchronize(d));
    record(h, r, ops->copy_d2h(d, h->out[r][5], recv, count * sizeof(float)));
out:
    ops->free(d, send);
    ops->free(d, recv);
    ops->free(d, inplace);
    free(x);
}

static size_t body_count;
static void collectives_body_at(harness *h, int r) { collectives_body(h, r, body_count); }

/* exact: the peer path sums in rank order (bits known); NCCL picks its own order. */
static void check_collectives(const int *ids, int n, int exact)
{
    harness h;
    for (size_t c = 0; c < NCOUNTS; c++) {
        body_count = c;
        run_ranks(&h, ids, n, collectives_body_at);
        assert_all_ok(&h);
        size_t count = counts[c], big = count * (size_t)n;
        float *ref = malloc(big * sizeof *ref);
        /* allreduce: the same bits on every rank, in and out of place */
        rank_order_sum(ref, n, big, 0, count, c);
        for (int r = 0; r < n; r++) {
            assert_memory_equal(h.out[r][0], h.out[0][0], count * sizeof(float));
            assert_memory_equal(h.out[r][1], h.out[0][0], count * sizeof(float));
        }
        if (exact)
            assert_memory_equal(h.out[0][0], ref, count * sizeof(float));
        else
            expect_close("nccl allreduce", h.out[0][0], ref, count, 1e-5, 1e-3);
        /* reduce_scatter: slice r of the sum */
        for (int r = 0; r < n; r++) {
            rank_order_sum(ref, n, big, (size_t)r * count, count, c);
            if (exact)
                assert_memory_equal(h.out[r][2], ref, count * sizeof(float));
            else
                expect_close("nccl reduce_scatter", h.out[r][2], ref, count, 1e-5, 1e-3);
        }
        /* allgather: rank q's first count elements at q * count, on every rank */
        for (int q = 0; q < n; q++) {
            float *x = rank_data(big, q, c);
            for (int r = 0; r < n; r++) {
                assert_memory_equal(h.out[r][3] + (size_t)q * count, x, count * sizeof(float));
                assert_memory_equal(h.out[r][4] + (size_t)q * count, x, count * sizeof(float));
            }
            if (q == n - 1)
                for (int r = 0; r < n; r++) /* broadcast: the root's data everywhere */
                    assert_memory_equal(h.out[r][5], x, count * sizeof(float));
            free(x);
        }
        free(ref);
        free_outputs(&h);
    }
}

/* send/recv around a ring, everyone sending first, three messages in order. */
static void ring_body(harness *h, int r)
{
    be_device *d = h->devs[r];
    int n = h->n;
    size_t count = 4099;
    void *sb[3] = {NULL, NULL, NULL}, *rb[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        float *x = rank_data(count, r, 10 + (size_t)k);
        record(h, r, ops->alloc(d, count * sizeof(float), &sb[k]));
        record(h, r, ops->alloc(d, count * sizeof(float), &rb[k]));
        if (h->st[r] == PE_OK)
            record(h, r, ops->copy_h2d(d, sb[k], x, count * sizeof(float)));
        free(x);
    }
    if (h->st[r] != PE_OK)
        goto out;
    for (int k = 0; k < 3; k++)
        record(h, r, ops->send(h->comms[r], sb[k], count, (r + 1) % n));
    for (int k = 0; k < 3; k++)
        record(h, r, ops->recv(h->comms[r], rb[k], count, (r + n - 1) % n));
    record(h, r, ops->synchronize(d));
    for (int k = 0; k < 3; k++) {
        h->out[r][k] = malloc(count * sizeof(float));
        record(h, r, ops->copy_d2h(d, h->out[r][k], rb[k], count * sizeof(float)));
    }
    /* barrier: nobody passes before everyone arrived */
    atomic_fetch_add(&h->counter, 1);
    record(h, r, ops->barrier(h->comms[r]));
    if (atomic_load(&h->counter) != n)
        record(h, r, PE_EINTERNAL);
out:
    for (int k = 0; k < 3; k++) {
        ops->free(d, sb[k]);
        ops->free(d, rb[k]);
    }
}

static void check_ring(const int *ids, int n)
{
    harness h;
    run_ranks(&h, ids, n, ring_body);
    assert_all_ok(&h);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 3; k++) {
            float *x = rank_data(4099, (r + n - 1) % n, 10 + (size_t)k);
            assert_memory_equal(h.out[r][k], x, 4099 * sizeof(float));
            free(x);
        }
    free_outputs(&h);
}

/* Rank 0 waits for a message that never comes; the main thread aborts. */
static harness *abort_h;
static void *abort_later(void *p)
{
    (void)p;
    sleep_ms(200);
    ops->comm_abort(abort_h->comms[1]);
    return NULL;
}

static void abort_body(harness *h, int r)
{
    void *buf = NULL;
    record(h, r, ops->alloc(h->devs[r], 64 * sizeof(float), &buf));
    if (r == 0) {
        pthread_t t;
        abort_h = h;
        pthread_create(&t, NULL, abort_later, NULL);
        h->st[0] = ops->recv(h->comms[0], buf, 64, 1); /* blocks until the abort */
        pthread_join(t, NULL);
    } else {
        sleep_ms(400);
        h->st[r] = ops->allreduce_sum(h->comms[r], buf, buf, 64); /* after: refused */
    }
    ops->free(h->devs[r], buf);
}

static void check_abort(const int *ids, int n)
{
    harness h;
    run_ranks(&h, ids, n, abort_body);
    for (int r = 0; r < n; r++)
        assert_int_equal(h.st[r], PE_ECOMM);
}

static const int gpu0x2[] = {0, 0}, gpu0x4[] = {0, 0, 0, 0}, gpu01[] = {0, 1},
                 gpu0011[] = {0, 0, 1, 1};

static void peer_path_collectives_two_ranks_one_gpu(void **state)
{
    (void)state;
    NEED_GPUS(1);
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, gpu0x2, 2, 0, 0, NULL), BE_COMM_PEER);
    check_collectives(gpu0x2, 2, 1);
    check_ring(gpu0x2, 2);
}

static void peer_path_collectives_four_ranks_one_gpu(void **state)
{
    (void)state;
    NEED_GPUS(1);
    check_collectives(gpu0x4, 4, 1);
    check_ring(gpu0x4, 4);
}

static void peer_path_abort_wakes_a_blocked_rank(void **state)
{
    (void)state;
    NEED_GPUS(1);
    check_abort(gpu0x2, 2);
}

static void peer_path_across_two_gpus(void **state)
{
    (void)state;
    NEED_GPUS(2);
    check_collectives(gpu0011, 4, 1); /* repeated ids: peer path, half of it cross-GPU */
    setenv("PE_CUDA_COMM", "peer", 1);
    check_collectives(gpu01, 2, 1);
    check_ring(gpu01, 2);
    unsetenv("PE_CUDA_COMM");
}

/* A split of the world into one group, an all-reduce on it, then an abort of the world:
 * later calls on it are refused. */
static void split_then_abort_body(harness *h, int r)
{
    be_device *d = h->devs[r];
    const int color = 0;
    be_comm *sub[1] = {NULL};
    pe_err err = {{0}};
    pe_status s = ops->comm_split(&h->comms[r], 1, &color, sub, &err);
    if (s != PE_OK) {
        h->st[r] = s;
        snprintf(h->msg[r], sizeof h->msg[r], "comm_split: %.480s", err.msg);
        return;
    }
    float *x = rank_data(77, r, 20), got[77];
    void *buf = NULL;
    record(h, r, ops->alloc(d, sizeof got, &buf));
    if (h->st[r] == PE_OK) {
        record(h, r, ops->copy_h2d(d, buf, x, sizeof got));
        record(h, r, ops->allreduce_sum(sub[0], buf, buf, 77));
        record(h, r, ops->synchronize(d));
        record(h, r, ops->copy_d2h(d, got, buf, sizeof got));
        if (h->st[r] == PE_OK && memcmp(got, x, sizeof got) != 0)
            record(h, r, PE_EINTERNAL); /* one rank: the sum is the input */
        ops->comm_abort(h->comms[r]);
        s = ops->allreduce_sum(h->comms[r], buf, buf, 77);
        if (s != PE_ECOMM) { /* refused after the abort; the split group is not aborted */
            h->st[r] = PE_EINTERNAL;
            snprintf(h->msg[r], sizeof h->msg[r], "allreduce after abort: %s",
                     pe_status_str(s));
        }
        record(h, r, ops->allreduce_sum(sub[0], buf, buf, 77));
        record(h, r, ops->synchronize(d));
    }
    ops->comm_destroy(sub, 1);
    ops->free(d, buf);
    free(x);
}

/* The NCCL path on one GPU: a world of one rank (NCCL refuses a GPU twice in one
 * communicator, so this is all of NCCL a one-GPU machine can run). Every collective is
 * then a copy, exact; ncclCommInitAll, ncclCommSplit, the group calls, the revoke and the
 * destroy all go through the real library. */
static void nccl_with_one_rank_on_one_gpu(void **state)
{
    (void)state;
    NEED_GPUS(1);
    static const int gpu0[] = {0};
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, gpu0, 1, 0, 0, NULL), BE_COMM_NCCL);
    check_collectives(gpu0, 1, 1);
    harness h;
    run_ranks(&h, gpu0, 1, split_then_abort_body);
    assert_all_ok(&h);
}

static void nccl_collectives_on_distinct_gpus(void **state)
{
    (void)state;
    NEED_GPUS(2);
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, gpu01, 2, 0, 0, NULL), BE_COMM_NCCL);
    check_collectives(gpu01, 2, 0);
    if (ngpus >= 4) {
        static const int gpu0123[] = {0, 1, 2, 3};
        check_collectives(gpu0123, 4, 0);
    }
}

#ifdef PE_HAVE_CUDA
/* ---- NCCL over processes, two simulated in this one: ranks [0, per) are process 0's and
 * [per, 2 per) process 1's. Each process's first rank thread does what cb_procs.c does
 * around the shared id (cb_comm_prepare and cb_comm_join of its own ranks, then the
 * engine's splits, NULL for
 * the other process's ranks), concurrently with the other process's. ---- */
enum { PROCS_N = 4, PROCS_PER = 2, PROCS_COUNT = 1000 };

typedef struct procs_harness {
    const int *ids;
    cb_nccl_id id;
    be_device *devs[PROCS_N];
    be_comm *world[PROCS_N], *inside[PROCS_N], *across[PROCS_N]; /* by world rank */
    pthread_barrier_t pb;
    pe_status st[PROCS_N];
    char msg[PROCS_N][PE_ERR_LEN];
    pe_status refused; /* process 0's split with another process's rank in it */
    atomic_int at_world, at_inside[2], at_across[2]; /* ranks that reached each barrier */
    float world_sum[PROCS_N][PROCS_COUNT], inside_sum[PROCS_N][PROCS_COUNT];
    float across_all[PROCS_N][2 * PROCS_COUNT], received[PROCS_N][PROCS_COUNT];
} procs_harness;

typedef struct procs_arg {
    procs_harness *h;
    int rank;
} procs_arg;

/* Rank q's input: small integers and halves, so every sum is exact in any order. */
static float procs_value(int q, size_t i) { return (float)(q + 1) + 0.5f * (float)(i % 64); }

static void procs_record(procs_harness *h, int r, pe_status s, const char *what)
{
    if (s != PE_OK && h->st[r] == PE_OK) {
        h->st[r] = s;
        snprintf(h->msg[r], sizeof h->msg[r], "%s: %.400s", what,
                 h->devs[r] ? ops->last_error(h->devs[r]) : "");
    }
}

/* Process p's part of comm_create_procs and the engine's splits (rank r leads it). */
static void procs_make(procs_harness *h, int r)
{
    int p = r / PROCS_PER, lo = p * PROCS_PER;
    be_device *view[PROCS_N] = {0};
    be_comm *world[PROCS_N] = {0}, *sub[PROCS_N] = {0};
    int colors[PROCS_N];
    pe_err err = {{0}};
    for (int q = lo; q < lo + PROCS_PER; q++)
        view[q] = h->devs[q];
    cb_group *g = NULL;
    pe_status s = cb_comm_prepare(view, PROCS_N, &g, &err);
    if (s == PE_OK)
        s = cb_comm_join(g, &h->id, world, &err);
    if (s == PE_OK && p == 0) { /* an entry for a rank of process 1: refused */
        be_comm *wrong[PROCS_N] = {world[0], world[1], world[0], NULL};
        for (int q = 0; q < PROCS_N; q++)
            colors[q] = 0;
        pe_err e2 = {{0}};
        h->refused = ops->comm_split(wrong, PROCS_N, colors, sub, &e2);
    }
    for (int q = 0; q < PROCS_N; q++)
        colors[q] = q / PROCS_PER; /* inside each process, like TP within a node */
    if (s == PE_OK)
        s = ops->comm_split(world, PROCS_N, colors, sub, &err);
    for (int q = lo; s == PE_OK && q < lo + PROCS_PER; q++)
        h->inside[q] = sub[q];
    for (int q = 0; q < PROCS_N; q++)
        colors[q] = q % PROCS_PER; /* across the processes, like PP across nodes */
    if (s == PE_OK)
        s = ops->comm_split(world, PROCS_N, colors, sub, &err);
    for (int q = lo; s == PE_OK && q < lo + PROCS_PER; q++)
        h->across[q] = sub[q];
    for (int q = lo; q < lo + PROCS_PER; q++) {
        h->world[q] = world[q];
        if (s != PE_OK) {
            h->st[q] = s;
            snprintf(h->msg[q], sizeof h->msg[q], "process %d: %.480s", p, err.msg);
        }
    }
}

static void procs_body(procs_harness *h, int r)
{
    be_device *d = h->devs[r];
    const size_t c = PROCS_COUNT, bytes = c * sizeof(float);
    float x[PROCS_COUNT];
    for (size_t i = 0; i < c; i++)
        x[i] = procs_value(r, i);
    void *a = NULL, *b = NULL, *g = NULL;
    procs_record(h, r, ops->alloc(d, bytes, &a), "alloc");
    procs_record(h, r, ops->alloc(d, bytes, &b), "alloc");
    procs_record(h, r, ops->alloc(d, 2 * bytes, &g), "alloc");
    if (h->st[r] != PE_OK)
        goto out;
    procs_record(h, r, ops->copy_h2d(d, a, x, bytes), "copy_h2d");
    procs_record(h, r, ops->allreduce_sum(h->world[r], a, b, c), "world allreduce");
    procs_record(h, r, ops->copy_d2h(d, h->world_sum[r], b, bytes), "copy_d2h");
    procs_record(h, r, ops->allreduce_sum(h->inside[r], a, b, c), "inside allreduce");
    procs_record(h, r, ops->copy_d2h(d, h->inside_sum[r], b, bytes), "copy_d2h");
    procs_record(h, r, ops->allgather(h->across[r], a, g, c), "across allgather");
    procs_record(h, r, ops->copy_d2h(d, h->across_all[r], g, 2 * bytes), "copy_d2h");
    /* world rank r and r +- per trade inputs across the processes: process 0's rank sends
     * first, so a send waiting for its receive (as NCCL's may) never waits on a send */
    int peer = (r + PROCS_PER) % PROCS_N;
    if (r < PROCS_PER) {
        procs_record(h, r, ops->send(h->world[r], a, c, peer), "send");
        procs_record(h, r, ops->recv(h->world[r], b, c, peer), "recv");
    } else {
        procs_record(h, r, ops->recv(h->world[r], b, c, peer), "recv");
        procs_record(h, r, ops->send(h->world[r], a, c, peer), "send");
    }
    procs_record(h, r, ops->synchronize(d), "synchronize");
    procs_record(h, r, ops->copy_d2h(d, h->received[r], b, bytes), "copy_d2h");
    /* every barrier: nobody leaves before each rank of its group arrived */
    atomic_fetch_add(&h->at_world, 1);
    procs_record(h, r, ops->barrier(h->world[r]), "world barrier");
    if (atomic_load(&h->at_world) != PROCS_N)
        procs_record(h, r, PE_EINTERNAL, "left the world barrier early");
    atomic_fetch_add(&h->at_inside[r / PROCS_PER], 1);
    procs_record(h, r, ops->barrier(h->inside[r]), "barrier inside a process");
    if (atomic_load(&h->at_inside[r / PROCS_PER]) != PROCS_PER)
        procs_record(h, r, PE_EINTERNAL, "left the barrier inside a process early");
    atomic_fetch_add(&h->at_across[r % PROCS_PER], 1);
    procs_record(h, r, ops->barrier(h->across[r]), "barrier across processes");
    if (atomic_load(&h->at_across[r % PROCS_PER]) != PROCS_N / PROCS_PER)
        procs_record(h, r, PE_EINTERNAL, "left the barrier across processes early");
out:
    ops->free(d, a);
    ops->free(d, b);
    ops->free(d, g);
}

static void *procs_rank_main(void *p)
{
    procs_arg *a = p;
    procs_harness *h = a->h;
    int r = a->rank;
    pe_err err = {{0}};
    if (ops->open(h->ids[r], &h->devs[r], &err) != PE_OK) {
        h->devs[r] = NULL;
        h->st[r] = PE_ENODEV;
        snprintf(h->msg[r], sizeof h->msg[r], "%s", err.msg);
    }
    pthread_barrier_wait(&h->pb);
    int all = 1;
    for (int q = 0; q < PROCS_N; q++)
        all &= h->devs[q] != NULL;
    if (all && r % PROCS_PER == 0)
        procs_make(h, r);
    pthread_barrier_wait(&h->pb);
    int made = 1;
    for (int q = 0; q < PROCS_N; q++)
        made &= h->across[q] != NULL;
    if (made)
        procs_body(h, r);
    pthread_barrier_wait(&h->pb);
    if (r % PROCS_PER == 0) { /* each process frees its own ranks' communicators */
        int lo = r;
        ops->comm_destroy(h->inside + lo, PROCS_PER);
        ops->comm_destroy(h->across + lo, PROCS_PER);
        ops->comm_destroy(h->world + lo, PROCS_PER);
    }
    pthread_barrier_wait(&h->pb);
    if (h->devs[r])
        ops->close(h->devs[r]);
    return NULL;
}

static void nccl_across_two_simulated_processes(void **state)
{
    (void)state;
    NEED_GPUS(PROCS_N);
    static const int gpus[PROCS_N] = {0, 1, 2, 3};
    procs_harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    atomic_init(&h->at_world, 0);
    for (int i = 0; i < 2; i++) {
        atomic_init(&h->at_inside[i], 0);
        atomic_init(&h->at_across[i], 0);
    }
    h->ids = gpus;
    pe_err err = {{0}};
    assert_int_equal(cb_nccl_new_id(&h->id, &err), PE_OK);
    assert_int_equal(pthread_barrier_init(&h->pb, NULL, PROCS_N), 0);
    pthread_t t[PROCS_N];
    procs_arg a[PROCS_N];
    for (int r = 0; r < PROCS_N; r++) {
        a[r] = (procs_arg){h, r};
        assert_int_equal(pthread_create(&t[r], NULL, procs_rank_main, &a[r]), 0);
    }
    for (int r = 0; r < PROCS_N; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&h->pb);
    for (int r = 0; r < PROCS_N; r++) {
        if (h->st[r] != PE_OK)
            print_error("rank %d: %s: %s\n", r, pe_status_str(h->st[r]), h->msg[r]);
        assert_int_equal(h->st[r], PE_OK);
    }
    assert_int_equal(h->refused, PE_EINVAL);
    for (int r = 0; r < PROCS_N; r++) {
        int lo = r / PROCS_PER * PROCS_PER, twin = r % PROCS_PER;
        int peer = (r + PROCS_PER) % PROCS_N;
        for (size_t i = 0; i < PROCS_COUNT; i++) {
            float all = 0.0f, inside = 0.0f;
            for (int q = 0; q < PROCS_N; q++)
                all += procs_value(q, i);
            for (int q = lo; q < lo + PROCS_PER; q++)
                inside += procs_value(q, i);
            assert_true(h->world_sum[r][i] == all);
            assert_true(h->inside_sum[r][i] == inside);
            assert_true(h->across_all[r][i] == procs_value(twin, i));
            assert_true(h->across_all[r][PROCS_COUNT + i] == procs_value(twin + PROCS_PER, i));
            assert_true(h->received[r][i] == procs_value(peer, i));
        }
    }
    free(h);
}

/* A GPU serving two workers of one process cannot join NCCL over processes (NCCL refuses
 * it twice, and the peer path does not leave the process): refused before NCCL, whether
 * both workers are ranks of this communicator or one serves elsewhere in the process. */
static void nccl_over_processes_refuses_a_gpu_twice_in_a_process(void **state)
{
    (void)state;
    NEED_GPUS(1);
    be_device *d[2] = {NULL, NULL};
    pe_err err = {{0}};
    assert_int_equal(ops->open(0, &d[0], &err), PE_OK);
    assert_int_equal(ops->open(0, &d[1], &err), PE_OK);
    be_device *both[4] = {d[0], d[1], NULL, NULL}, *one[4] = {d[0], NULL, NULL, NULL};
    cb_group *g = NULL;
    assert_int_equal(cb_comm_prepare(both, 4, &g, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "CUDA device 0 serves 2 workers"));
    assert_null(g);
    memset(&err, 0, sizeof err);
    assert_int_equal(cb_comm_prepare(one, 4, &g, &err), PE_EINVAL); /* d[1] is open too */
    assert_non_null(strstr(err.msg, "CUDA device 0 serves 2 workers"));
    assert_null(g);
    ops->close(d[1]);
    assert_int_equal(cb_comm_prepare(one, 4, &g, &err), PE_OK); /* now it serves one */
    cb_comm_unprepare(g);
    ops->close(d[0]);
}
#endif

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define EXIT_SKIPPED 77

int main(void)
{
    /* No device (a machine without a GPU, or a build without CUDA): the whole program is a
     * skip, which ctest reports as such instead of a silent pass. The fake builds have
     * four fake GPUs and run everything. */
    const be_ops *cuda = be_cuda_ops();
    int n = 0;
    pe_err err = {{0}};
    if (!cuda || cuda->device_count(&n, &err) != PE_OK || n < 1) {
        printf("%s: skipped: no CUDA device (%s)\n", "test_cuda",
               cuda ? err.msg : "pengine was built without CUDA");
        return EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(describe_gives_name_memory_and_bus_id),
        cmocka_unit_test(copies_round_trip_and_alloc_is_aligned),
        cmocka_unit_test(errors_name_the_call_and_the_device),
        cmocka_unit_test(elementwise_kernels_match_host_math),
        cmocka_unit_test(row_kernels_match_host_math),
        cmocka_unit_test(embedding_copies_rows_and_rejects_bad_ids),
        cmocka_unit_test(gemm_fp32_matches_naive_gemm),
        cmocka_unit_test(gemm_strided_batched_matches_naive_gemm),
        cmocka_unit_test(to_bf16_matches_host_rounding),
        cmocka_unit_test(gemm_bf16_matches_host_gemm_bf16),
        cmocka_unit_test(linear_matches_host_linear),
        cmocka_unit_test(rmsnorm_rope_and_silu_mul_match_host_math),
        cmocka_unit_test(kv_append_stores_rows_at_their_slots),
        cmocka_unit_test(attention_matches_naive_twin),
        cmocka_unit_test(argmax_topk_and_lse_match_host),
        cmocka_unit_test(sample_agrees_with_host_rule),
        cmocka_unit_test(penalize_agrees_with_host_rule),
        cmocka_unit_test(mask_agrees_with_host_rule),
        cmocka_unit_test(decoder_ops_refuse_bad_arguments),
        cmocka_unit_test(sample_ops_accept_no_rows),
        cmocka_unit_test(peer_path_collectives_two_ranks_one_gpu),
        cmocka_unit_test(peer_path_collectives_four_ranks_one_gpu),
        cmocka_unit_test(peer_path_abort_wakes_a_blocked_rank),
        cmocka_unit_test(peer_path_across_two_gpus),
        cmocka_unit_test(nccl_with_one_rank_on_one_gpu),
        cmocka_unit_test(nccl_collectives_on_distinct_gpus),
#ifdef PE_HAVE_CUDA
        cmocka_unit_test(nccl_across_two_simulated_processes),
        cmocka_unit_test(nccl_over_processes_refuses_a_gpu_twice_in_a_process),
#endif
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
