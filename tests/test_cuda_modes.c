/* test_cuda_modes.c: every mode and hybrid grid of the engine on the CUDA backend against
 * the host backend's output for the same model file and inputs, and a failing worker on
 * either collective path; skips where no CUDA device answers.
 *
 * Built twice: test_cuda_modes on the real libraries (label cuda: a GPU machine), and
 * test_cuda_modes_fake on the fakes of tests/cuda_fake_*.c (CI, four fake GPUs, PE_CUDA_FAKE):
 * there the CUDA backend's whole host side runs (engine, peer path, NCCL path with
 * ncclCommSplit, cuBLASLt plans) with naive double-sum GEMMs, so the tolerances are the
 * host's own (1e-5 fp32, 1e-3 bf16), and cuBLASLt can be told to find no algorithm.
 *
 * Grids run on GPU 0 repeated (the in-process peer path: "--gpus 0,0"), and on distinct
 * GPUs where the machine has them (NCCL: one ncclCommInitAll world, TP and DP groups from
 * ncclCommSplit). Every schedule; fp32 and bf16.
 *
 * Tolerances, relative to the output's scale max |ref|:
 *   fp32 1e-4: cuBLAS and OpenBLAS sum K = 256 products in other orders (~sqrt(K) 2^-24
 *              per layer, 1e-6), tanhf differs by ulps; 1e-4 still catches a wrong shard,
 *              a stale buffer or TF32 math (~1e-3);
 *   bf16 2e-2: the bf16 GEMM bound; both backends round the same GEMM inputs, but an fp32
 *              order change can flip one rounding by 2^-8, and flips add up over layers.
 * The bf16 output must also differ from fp32 by more than fp32 noise (bf16 is in effect).
 */
#include "test_util.h"
#include "test_requests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "model/mlp/mlp.h"
#include "pengine/pengine.h"

#ifdef PE_CUDA_FAKE
#include "backend/cuda/cb_internal.h" /* cb_linear_plans */
#include "kernels/bf16.h"
void cuda_fake_lt_refuse(int on);     /* cuda_fake_libs.c */
#define TOL_FP32 1e-5
#define TOL_BF16 1e-3
#else
#define TOL_FP32 1e-4
#define TOL_BF16 2e-2
#endif

#include "engine/engine_testing.h"

static int ngpus;

/* A: Megatron pairs only (4 layers, GELU). B: 3 layers, ReLU: an odd last layer is
 * column-parallel plus all-gather, laid out by copy_d2d_2d. Both 64 in, 32 out. */
typedef struct model_case {
    md_mlp_spec spec;
    char path[256];
} model_case;
static model_case models[] = {
    {{.in = 64, .hidden = 256, .out = 32, .layers = 4, .act = MD_ACT_GELU, .std = 0.08f,
      .seed = 21}, ""},
    {{.in = 64, .hidden = 128, .out = 32, .layers = 3, .act = MD_ACT_RELU, .std = 0.1f,
      .seed = 22}, ""},
};
#define NMODELS (sizeof models / sizeof models[0])
static const char *model_path; /* the model the next run() loads */
static const md_mlp_spec *model; /* its spec */

enum { NREQ = 4 };
static const size_t req_rows[NREQ] = {9, 1, 16, 5};
#define TOTAL_ROWS (9 + 1 + 16 + 5)

static int setup(void **state)
{
    (void)state;
    const be_ops *cuda = be_cuda_ops();
    if (!cuda || cuda->device_count(&ngpus, NULL) != PE_OK)
        ngpus = 0;
    for (size_t k = 0; k < NMODELS; k++) {
        char name[64];
        snprintf(name, sizeof name, "cuda_modes_%zu.safetensors", k);
        tu_temp_path(models[k].path, sizeof models[k].path, name);
        pe_err err = {{0}};
        if (md_mlp_write(&models[k].spec, models[k].path, &err) != PE_OK) {
            fprintf(stderr, "md_mlp_write: %s\n", err.msg);
            return -1;
        }
    }
    model_path = models[0].path;
    model = &models[0].spec;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t k = 0; k < NMODELS; k++)
        unlink(models[k].path);
    return 0;
}

typedef struct run_spec {
    pe_backend_kind backend;
    pe_dtype dtype;
    int dp, pp, tp;
    const int *devices;
    pe_schedule schedule;
    int m;
} run_spec;

/* An engine for rs with the current model loaded. */
static pe_engine *open_engine(const run_spec *rs)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = rs->backend;
    cfg.ndevices = rs->dp * rs->pp * rs->tp;
    cfg.devices = rs->devices;
    cfg.dp = rs->dp;
    cfg.pp = rs->pp;
    cfg.tp = rs->tp;
    cfg.schedule = rs->schedule;
    cfg.microbatches = rs->m;
    cfg.dtype = rs->dtype;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("create dp%d pp%d tp%d: %s", rs->dp, rs->pp, rs->tp, pe_last_error());
    if (pe_engine_load(e, model_path) != PE_OK)
        fail_msg("load on dp%d pp%d tp%d: %s", rs->dp, rs->pp, rs->tp, pe_last_error());
    return e;
}

/* NREQ requests submitted at once; the outputs concatenated (TOTAL_ROWS, out). The
 * collective path the engine chose goes to `collectives` (if not NULL). */
static float *run(const run_spec *rs, char *collectives, size_t clen)
{
    pe_engine *e = open_engine(rs);
    if (collectives) {
        pe_engine_info info;
        assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
        snprintf(collectives, clen, "%s", info.collectives);
    }
    float *x = malloc(TOTAL_ROWS * model->in * sizeof(float));
    float *y = malloc(TOTAL_ROWS * model->out * sizeof(float));
    tu_fill_random(x, TOTAL_ROWS * model->in, 5);
    for (size_t i = 0; i < TOTAL_ROWS * model->out; i++)
        y[i] = NAN; /* every element must be written */
    size_t off = 0;
    for (int i = 0; i < NREQ; i++) {
        pe_request q = {.id = (uint64_t)i, .rows = req_rows[i], .input = x + off * model->in,
                        .output = y + off * model->out};
        assert_int_equal(pe_submit(e, &q), PE_OK);
        off += req_rows[i];
    }
    for (int i = 0; i < NREQ; i++) {
        pe_result res;
        assert_int_equal(pe_wait(e, &res), PE_OK);
        if (res.status != PE_OK)
            fail_msg("request %llu: %s", (unsigned long long)res.id, pe_engine_last_error(e));
    }
    pe_engine_destroy(e);
    free(x);
    return y;
}

static double scaled_diff(const float *y, const float *ref, size_t n)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    return tu_max_abs_diff(y, ref, n) / (scale > 0 ? scale : 1);
}

typedef struct grid {
    int dp, pp, tp;
} grid;

/* Every grid on devices (world entries each) in dtype, every schedule, against one host
 * device in the same dtype. path_word: what the report's collectives line must name. */
static void check_grids_of(const grid *grids, size_t n, const int *devices, pe_dtype dtype,
                           const char *path_word)
{
    static const int host0[] = {0};
    const double tol = dtype == PE_DTYPE_BF16 ? TOL_BF16 : TOL_FP32;
    const size_t nout = TOTAL_ROWS * model->out;
    const pe_schedule scheds[] = {PE_SCHED_NAIVE, PE_SCHED_GPIPE, PE_SCHED_STREAM};
    run_spec host = {PE_BACKEND_HOST, dtype, 1, 1, 1, host0, PE_SCHED_STREAM, 3};
    float *ref = run(&host, NULL, 0);
    const int first_sched = tu_small() ? 2 : 0; /* under valgrind: stream only */
    for (size_t g = 0; g < n; g++)
        for (int si = first_sched; si < 3 && grids[g].pp <= model->layers; si++) {
            int m = scheds[si] == PE_SCHED_NAIVE ? 1 : 3;
            run_spec rs = {PE_BACKEND_CUDA, dtype,         grids[g].dp, grids[g].pp,
                           grids[g].tp,     devices,       scheds[si],  m};
            char coll[256];
            float *y = run(&rs, coll, sizeof coll);
            double d = scaled_diff(y, ref, nout);
            if (!(d <= tol))
                fail_msg("model %d layers, cuda dp%d pp%d tp%d sched %d dtype %d: %g from the "
                         "host (> %g)",
                         model->layers, rs.dp, rs.pp, rs.tp, si, (int)dtype, d, tol);
            int world = rs.dp * rs.pp * rs.tp;
            if (world > 1 && !strstr(coll, path_word))
                fail_msg("dp%d pp%d tp%d: collectives '%s' do not name '%s'", rs.dp, rs.pp,
                         rs.tp, coll, path_word);
            free(y);
        }
    free(ref);
}

/* check_grids_of on every model (under valgrind, PE_TEST_SMALL: model B, the one with an
 * all-gather layer, and the first four grids). */
static void check_grids(const grid *grids, size_t n, const int *devices, pe_dtype dtype,
                        const char *path_word)
{
    if (tu_small() && n > 4)
        n = 4;
    for (size_t k = tu_small() ? 1 : 0; k < NMODELS; k++) {
        model_path = models[k].path;
        model = &models[k].spec;
        check_grids_of(grids, n, devices, dtype, path_word);
    }
    model_path = models[0].path;
    model = &models[0].spec;
}

static const grid grids[] = {{1, 1, 2}, {1, 2, 2}, {2, 1, 1}, {1, 2, 1},
                             {1, 1, 1}, {1, 4, 1}, {1, 1, 4}, {2, 2, 1}, {2, 1, 2}};
static const int gpu0x4[] = {0, 0, 0, 0}, gpu0123[] = {0, 1, 2, 3}, gpu01[] = {0, 1};

static void grids_on_one_gpu_match_the_host_fp32(void **state)
{
    (void)state;
    if (ngpus < 1)
        skip();
    check_grids(grids, sizeof grids / sizeof grids[0], gpu0x4, PE_DTYPE_FP32, "peer");
}

static void grids_on_one_gpu_match_the_host_bf16(void **state)
{
    (void)state;
    if (ngpus < 1)
        skip();
    check_grids(grids, sizeof grids / sizeof grids[0], gpu0x4, PE_DTYPE_BF16, "peer");
    /* and bf16 is not fp32 */
    run_spec a = {PE_BACKEND_CUDA, PE_DTYPE_BF16, 1, 1, 1, gpu0x4, PE_SCHED_NAIVE, 1};
    run_spec b = a;
    b.dtype = PE_DTYPE_FP32;
    float *y16 = run(&a, NULL, 0), *y32 = run(&b, NULL, 0);
    double d = scaled_diff(y16, y32, TOTAL_ROWS * model->out);
    if (!(d > 1e-4))
        fail_msg("bf16 is only %g from fp32 on the GPU: bf16 is not in effect", d);
    free(y16);
    free(y32);
}

static void grids_on_distinct_gpus_use_nccl_and_match_the_host(void **state)
{
    (void)state;
    if (ngpus < 2)
        skip();
    const grid two[] = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}};
    check_grids(two, 3, gpu01, PE_DTYPE_FP32, "NCCL");
    check_grids(two, 3, gpu01, PE_DTYPE_BF16, "NCCL");
    if (ngpus >= 4) {
        const grid four[] = {{2, 2, 1}, {1, 2, 2}, {2, 1, 2}, {1, 1, 4}};
        check_grids(four, 4, gpu0123, PE_DTYPE_FP32, "NCCL");
    }
}

/* ---- a failing worker stops the engine on either path ---- */

/* Worker `rank` fails its 3rd task while 24 requests stream through: every request gets
 * exactly one result, some carry the failure, a later submit fails fast, and destroy
 * returns (the NCCL path revokes its communicators, the peer path wakes its waiters). */
static void fail_mid_run(const int *devices, int dp, int pp, int tp, int rank)
{
    run_spec rs = {PE_BACKEND_CUDA, PE_DTYPE_FP32, dp, pp, tp, devices, PE_SCHED_STREAM, 2};
    pe_engine *e = open_engine(&rs);
    en_inject_failure(e, rank, 3);
    enum { N = 24, ROWS = 4 };
    float *x = malloc(N * ROWS * model->in * sizeof(float));
    float *y = malloc(N * ROWS * model->out * sizeof(float));
    tu_fill_random(x, N * ROWS * model->in, 8);
    assert_true(tu_submit_all_and_collect(e, x, y, N, ROWS, model->in, model->out) > 0);
    float one[64 * 4];
    tu_fill_random(one, model->in * 4, 9);
    float out[32 * 4];
    assert_true(pe_infer(e, one, 4, out) != PE_OK); /* the engine stays failed */
    assert_non_null(strstr(pe_last_error(), "injected failure"));
    pe_engine_destroy(e);
    free(x);
    free(y);
}

static void a_failing_worker_on_the_peer_path_answers_every_request(void **state)
{
    (void)state;
    if (ngpus < 1)
        skip();
    fail_mid_run(gpu0x4, 1, 1, 2, 1);
    fail_mid_run(gpu0x4, 1, 2, 1, 0);
}

static void a_failing_worker_on_nccl_answers_every_request(void **state)
{
    (void)state;
    if (ngpus < 2)
        skip();
    fail_mid_run(gpu01, 1, 1, 2, 1);
    fail_mid_run(gpu01, 1, 2, 1, 0);
}

#ifdef PE_CUDA_FAKE
/* Where cuBLASLt finds no algorithm, linear runs as separate ops with the same bits (the
 * fake computes both the same way); where it refuses a bf16 output with the fp32 bias (as
 * cublasLt.h says it does), the epilogue writes fp32 and to_bf16 rounds it, with the same
 * bits again. The plan counts show which path ran. */
static void linear_without_a_cublaslt_algorithm_gives_the_same_bits(void **state)
{
    (void)state;
    const be_ops *cuda = be_cuda_ops();
    be_device *d = NULL;
    assert_int_equal(cuda->open(0, &d, NULL), PE_OK);
    float x[3 * 4], w[5 * 4], b[5], y1[15], y2[15], tmp[15];
    uint16_t x16[3 * 4], w16[5 * 4], y16[15], ref16[15];
    tu_fill_random(x, 12, 1);
    tu_fill_random(w, 20, 2);
    tu_fill_random(b, 5, 3);
    cb_linear_counts n;
    assert_int_equal(cuda->linear(d, PE_DTYPE_FP32, 3, 5, 4, x, w, b, BE_ACT_RELU, y1, 0, NULL),
                     PE_OK);
    cb_linear_plans(d, &n);
    assert_int_equal(n.fused, 1);
    assert_int_equal(n.rounded + n.unfused, 0);
    cuda_fake_lt_refuse(1);
    assert_int_equal(cuda->linear(d, PE_DTYPE_FP32, 3, 5, 4, x, w, b, BE_ACT_RELU, y2, 0, NULL),
                     PE_OK);
    cb_linear_plans(d, &n);
    assert_int_equal(n.fused, 1); /* the cached plan: same key */
    assert_memory_equal(y1, y2, sizeof y1);
    assert_int_equal(cuda->linear(d, PE_DTYPE_FP32, 3, 5, 4, x, w, NULL, BE_ACT_RELU, y2, 0,
                                  NULL),
                     PE_OK);
    cb_linear_plans(d, &n);
    assert_int_equal(n.unfused, 1); /* a new key: no algorithm, separate ops */
    cuda_fake_lt_refuse(0);

    /* bf16 in and out with a bias: the fp32-output retry, against the separate ops */
    for (int i = 0; i < 12; i++)
        x16[i] = pe_k_to_bf16(x[i]);
    for (int i = 0; i < 20; i++)
        w16[i] = pe_k_to_bf16(w[i]);
    assert_int_equal(cuda->linear(d, PE_DTYPE_BF16, 3, 5, 4, x16, w16, b, BE_ACT_RELU, y16, 1,
                                  tmp),
                     PE_OK);
    cb_linear_plans(d, &n);
    assert_int_equal(n.rounded, 1);
    assert_int_equal(be_linear_unfused(cuda, d, PE_DTYPE_BF16, 3, 5, 4, x16, w16, b,
                                       BE_ACT_RELU, ref16, 1, tmp),
                     PE_OK);
    assert_memory_equal(y16, ref16, sizeof y16);
    /* without a bias the epilogue writes bf16 itself */
    assert_int_equal(cuda->linear(d, PE_DTYPE_BF16, 3, 5, 4, x16, w16, NULL, BE_ACT_RELU, y16,
                                  1, tmp),
                     PE_OK);
    cb_linear_plans(d, &n);
    assert_int_equal(n.fused, 2);
    assert_int_equal(be_linear_unfused(cuda, d, PE_DTYPE_BF16, 3, 5, 4, x16, w16, NULL,
                                       BE_ACT_RELU, ref16, 1, tmp),
                     PE_OK);
    assert_memory_equal(y16, ref16, sizeof y16);
    cuda->close(d);

    static const grid g[] = {{1, 1, 2}, {1, 2, 1}};
    for (int k = 0; k < 2; k++) {
        run_spec rs = {PE_BACKEND_CUDA, PE_DTYPE_BF16, g[k].dp, g[k].pp, g[k].tp,
                       gpu0x4, PE_SCHED_STREAM, 2};
        cuda_fake_lt_refuse(0);
        float *fused_y = run(&rs, NULL, 0);
        cuda_fake_lt_refuse(1);
        float *ops_y = run(&rs, NULL, 0);
        assert_memory_equal(fused_y, ops_y, TOTAL_ROWS * model->out * sizeof(float));
        free(fused_y);
        free(ops_y);
    }
    cuda_fake_lt_refuse(0);
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
        printf("%s: skipped: no CUDA device (%s)\n", "test_cuda_modes",
               cuda ? err.msg : "pengine was built without CUDA");
        return EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grids_on_one_gpu_match_the_host_fp32),
        cmocka_unit_test(grids_on_one_gpu_match_the_host_bf16),
        cmocka_unit_test(grids_on_distinct_gpus_use_nccl_and_match_the_host),
        cmocka_unit_test(a_failing_worker_on_the_peer_path_answers_every_request),
        cmocka_unit_test(a_failing_worker_on_nccl_answers_every_request),
#ifdef PE_CUDA_FAKE
        cmocka_unit_test(linear_without_a_cublaslt_algorithm_gives_the_same_bits),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
