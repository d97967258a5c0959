/* test_cuda_modes.c: every mode and hybrid grid of the engine on the CUDA backend against
 * the host backend's output for the same model file and inputs; skips where no CUDA device
 * answers (CI has none).
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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "model/mlp.h"
#include "pengine/pengine.h"

static int ngpus;
static char model_path[256];
static const md_mlp_spec spec = {.in = 64, .hidden = 256, .out = 32, .layers = 4,
                                 .act = MD_ACT_GELU, .std = 0.08f, .seed = 21};

enum { NREQ = 4 };
static const size_t req_rows[NREQ] = {9, 1, 16, 5};
#define TOTAL_ROWS (9 + 1 + 16 + 5)

static int setup(void **state)
{
    (void)state;
    const be_ops *cuda = be_cuda_ops();
    if (!cuda || cuda->device_count(&ngpus, NULL) != PE_OK)
        ngpus = 0;
    tu_temp_path(model_path, sizeof model_path, "cuda_modes.safetensors");
    pe_err err = {{0}};
    if (md_mlp_write(&spec, model_path, &err) != PE_OK) {
        fprintf(stderr, "md_mlp_write: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(model_path);
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

/* NREQ requests submitted at once; the outputs concatenated (TOTAL_ROWS, out). The
 * collective path the engine chose goes to `collectives` (if not NULL). */
static float *run(const run_spec *rs, char *collectives, size_t clen)
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
    if (collectives) {
        pe_engine_info info;
        assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
        snprintf(collectives, clen, "%s", info.collectives);
    }
    float *x = malloc(TOTAL_ROWS * spec.in * sizeof(float));
    float *y = malloc(TOTAL_ROWS * spec.out * sizeof(float));
    tu_fill_random(x, TOTAL_ROWS * spec.in, 5);
    for (size_t i = 0; i < TOTAL_ROWS * spec.out; i++)
        y[i] = NAN; /* every element must be written */
    size_t off = 0;
    for (int i = 0; i < NREQ; i++) {
        pe_request q = {.id = (uint64_t)i, .rows = req_rows[i], .input = x + off * spec.in,
                        .output = y + off * spec.out};
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
static void check_grids(const grid *grids, size_t n, const int *devices, pe_dtype dtype,
                        const char *path_word)
{
    static const int host0[] = {0};
    const double tol = dtype == PE_DTYPE_BF16 ? 2e-2 : 1e-4;
    const size_t nout = TOTAL_ROWS * spec.out;
    const pe_schedule scheds[] = {PE_SCHED_NAIVE, PE_SCHED_GPIPE, PE_SCHED_STREAM};
    run_spec host = {PE_BACKEND_HOST, dtype, 1, 1, 1, host0, PE_SCHED_STREAM, 3};
    float *ref = run(&host, NULL, 0);
    for (size_t g = 0; g < n; g++)
        for (int si = 0; si < 3; si++) {
            int m = scheds[si] == PE_SCHED_NAIVE ? 1 : 3;
            run_spec rs = {PE_BACKEND_CUDA, dtype,         grids[g].dp, grids[g].pp,
                           grids[g].tp,     devices,       scheds[si],  m};
            char coll[256];
            float *y = run(&rs, coll, sizeof coll);
            double d = scaled_diff(y, ref, nout);
            if (!(d <= tol))
                fail_msg("cuda dp%d pp%d tp%d sched %d dtype %d: %g from the host (> %g)",
                         rs.dp, rs.pp, rs.tp, si, (int)dtype, d, tol);
            int world = rs.dp * rs.pp * rs.tp;
            if (world > 1 && !strstr(coll, path_word))
                fail_msg("dp%d pp%d tp%d: collectives '%s' do not name '%s'", rs.dp, rs.pp,
                         rs.tp, coll, path_word);
            free(y);
        }
    free(ref);
}

static const grid grids[] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2},
                             {1, 4, 1}, {1, 1, 4}, {2, 2, 1}, {1, 2, 2}, {2, 1, 2}};
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
    double d = scaled_diff(y16, y32, TOTAL_ROWS * spec.out);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grids_on_one_gpu_match_the_host_fp32),
        cmocka_unit_test(grids_on_one_gpu_match_the_host_bf16),
        cmocka_unit_test(grids_on_distinct_gpus_use_nccl_and_match_the_host),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
