/* test_modes.c: every mode and hybrid grid on the host backend gives the single-device
 * answer: bit for bit for DP and PP, within 1e-5 relative for TP; every schedule agrees;
 * odd widths, and batches not divisible by the micro-batch count; the same in bf16, and
 * bf16 on one device matches a naive bf16 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp/mlp.h"
#include "pengine/pengine.h"
#include "test_util.h"

typedef struct model_case {
    const char *name;
    md_mlp_spec spec;
    char path[256];
} model_case;

/* Model A: 4 layers, odd input and output widths, ReLU. Every TP degree 1..4 divides 24.
 * Model B: 3 layers (a lone last layer: column-parallel + all-gather), GELU. */
static model_case models[] = {
    {"A", {.in = 13, .hidden = 24, .out = 7, .layers = 4, .act = MD_ACT_RELU, .std = 0.3f,
           .seed = 11}, ""},
    {"B", {.in = 13, .hidden = 24, .out = 12, .layers = 3, .act = MD_ACT_GELU, .std = 0.3f,
           .seed = 12}, ""},
};
#define NMODELS (sizeof models / sizeof models[0])

enum { NREQ = 6 };
static const size_t req_rows[NREQ] = {10, 1, 7, 10, 2, 5}; /* none divisible by 3 or 4 */

static int setup_models(void **state)
{
    (void)state;
    for (size_t i = 0; i < NMODELS; i++) {
        char name[64];
        snprintf(name, sizeof name, "modes_%s.safetensors", models[i].name);
        tu_temp_path(models[i].path, sizeof models[i].path, name);
        pe_err err = {{0}};
        if (md_mlp_write(&models[i].spec, models[i].path, &err) != PE_OK) {
            fprintf(stderr, "md_mlp_write: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

static int teardown_models(void **state)
{
    (void)state;
    for (size_t i = 0; i < NMODELS; i++)
        unlink(models[i].path);
    return 0;
}

typedef struct grid {
    int dp, pp, tp;
} grid;

/* Runs NREQ requests concurrently (submit all, then wait all) and returns the outputs
 * concatenated: (sum of rows, out). */
static float *run_grid(const model_case *mc, pe_dtype dt, grid g, pe_schedule sched, int m)
{
    int n = g.dp * g.pp * g.tp;
    int devices[16];
    for (int i = 0; i < n; i++)
        devices[i] = i;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = n;
    cfg.devices = devices;
    cfg.dp = g.dp;
    cfg.pp = g.pp;
    cfg.tp = g.tp;
    cfg.schedule = sched;
    cfg.microbatches = m;
    cfg.bind_threads = 0;
    cfg.dtype = dt;
    pe_engine *e = NULL;
    pe_status s = pe_engine_create(&cfg, &e);
    if (s != PE_OK)
        fail_msg("create dp%d pp%d tp%d: %s", g.dp, g.pp, g.tp, pe_last_error());
    s = pe_engine_load(e, mc->path);
    if (s != PE_OK)
        fail_msg("load %s on dp%d pp%d tp%d: %s", mc->name, g.dp, g.pp, g.tp, pe_last_error());

    size_t in = mc->spec.in, out = mc->spec.out, total = 0;
    for (int i = 0; i < NREQ; i++)
        total += req_rows[i];
    float *x = malloc(total * in * sizeof(float));
    float *y = malloc(total * out * sizeof(float));
    tu_fill_random(x, total * in, 99);
    for (size_t i = 0; i < total * out; i++)
        y[i] = NAN; /* every element must be written */
    size_t off = 0;
    for (int i = 0; i < NREQ; i++) {
        pe_request q = {.id = (uint64_t)i, .rows = req_rows[i], .input = x + off * in,
                        .output = y + off * out};
        assert_int_equal(pe_submit(e, &q), PE_OK);
        off += req_rows[i];
    }
    int seen[NREQ] = {0};
    for (int i = 0; i < NREQ; i++) {
        pe_result res;
        assert_int_equal(pe_wait(e, &res), PE_OK);
        assert_int_equal(res.status, PE_OK);
        assert_true(res.id < NREQ);
        seen[res.id]++;
    }
    for (int i = 0; i < NREQ; i++)
        assert_int_equal(seen[i], 1);
    pe_result none;
    assert_int_equal(pe_wait(e, &none), PE_EAGAIN); /* nothing outstanding */
    pe_engine_destroy(e);
    free(x);
    return y;
}

static size_t total_out(const model_case *mc)
{
    size_t total = 0;
    for (int i = 0; i < NREQ; i++)
        total += req_rows[i];
    return total * mc->spec.out;
}

/* max |y - ref| relative to the output's scale, max |ref|: summation order changes (TP's
 * partial sums, OpenBLAS kernels picked by M) move each element by a few ulp of the
 * largest terms it sums, not of itself, so an element-wise ratio near zero means nothing. */
static double scaled_diff(const float *y, const float *ref, size_t n)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    return tu_max_abs_diff(y, ref, n) / (scale > 0 ? scale : 1);
}

/* The single-device engine in precision dt against the naive reference (plain loops,
 * double sums, the same bf16 rounding): within tol of the output's scale; returns the
 * output's distance from the fp32 reference, to show what bf16 changes. */
static double check_reference(pe_dtype dt, double tol)
{
    double from_fp32 = 0;
    for (size_t k = 0; k < NMODELS; k++) {
        const model_case *mc = &models[k];
        float *y = run_grid(mc, dt, (grid){1, 1, 1}, PE_SCHED_NAIVE, 1);
        md_mlp m;
        pe_err err = {{0}};
        assert_int_equal(md_mlp_load(mc->path, &m, &err), PE_OK);
        size_t total = total_out(mc) / mc->spec.out;
        float *x = malloc(total * mc->spec.in * sizeof(float));
        float *ref = malloc(total_out(mc) * sizeof(float));
        float *ref32 = malloc(total_out(mc) * sizeof(float));
        tu_fill_random(x, total * mc->spec.in, 99);
        assert_int_equal(md_mlp_forward_reference(&m, dt, x, total, ref, &err), PE_OK);
        assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, total, ref32, &err),
                         PE_OK);
        double rel = scaled_diff(y, ref, total_out(mc));
        if (rel > tol)
            fail_msg("model %s: single device vs naive reference: rel diff %g > %g", mc->name,
                     rel, tol);
        from_fp32 = fmax(from_fp32, scaled_diff(y, ref32, total_out(mc)));
        md_mlp_free(&m);
        free(x);
        free(ref);
        free(ref32);
        free(y);
    }
    return from_fp32;
}

static void test_single_device_matches_naive_reference(void **state)
{
    (void)state;
    check_reference(PE_DTYPE_FP32, 1e-5);
}

/* Every grid against one device at the same m, in precision dt: bit for bit (exact) or
 * within tol of the output's scale. */
static void check_grids(pe_dtype dt, const grid *grids, size_t ngrids, int exact, double tol)
{
    const pe_schedule scheds[] = {PE_SCHED_NAIVE, PE_SCHED_GPIPE, PE_SCHED_STREAM};
    const int ms[] = {1, 3, 4};
    size_t nm = tu_small() ? 2 : 3;
    for (size_t k = 0; k < NMODELS; k++) {
        const model_case *mc = &models[k];
        size_t n = total_out(mc);
        for (size_t mi = 0; mi < nm; mi++) {
            /* single device, same micro-batching: the GEMM shapes are the same */
            float *ref = run_grid(mc, dt, (grid){1, 1, 1}, PE_SCHED_STREAM, ms[mi]);
            for (size_t gi = 0; gi < ngrids; gi++) {
                for (size_t si = 0; si < 3; si++) {
                    if (scheds[si] == PE_SCHED_NAIVE && ms[mi] != 1)
                        continue;
                    if (grids[gi].pp > mc->spec.layers)
                        continue;
                    float *y = run_grid(mc, dt, grids[gi], scheds[si], ms[mi]);
                    if (exact) {
                        if (memcmp(y, ref, n * sizeof(float)) != 0)
                            fail_msg("model %s dp%d pp%d tp%d sched %d m %d: not bit-identical "
                                     "to one device (max abs diff %g)",
                                     mc->name, grids[gi].dp, grids[gi].pp, grids[gi].tp,
                                     (int)scheds[si], ms[mi], tu_max_abs_diff(y, ref, n));
                    } else {
                        double rel = scaled_diff(y, ref, n);
                        if (rel > tol)
                            fail_msg("model %s dp%d pp%d tp%d sched %d m %d: rel diff %g > %g",
                                     mc->name, grids[gi].dp, grids[gi].pp, grids[gi].tp,
                                     (int)scheds[si], ms[mi], rel, tol);
                    }
                    free(y);
                }
            }
            free(ref);
        }
    }
}

static void test_dp_is_bit_identical_to_one_device(void **state)
{
    (void)state;
    const grid g[] = {{1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {4, 1, 1}};
    check_grids(PE_DTYPE_FP32, g, tu_small() ? 2 : 4, 1, 0);
}

static void test_pp_is_bit_identical_to_one_device(void **state)
{
    (void)state;
    const grid g[] = {{1, 2, 1}, {1, 3, 1}, {1, 4, 1}, {2, 2, 1}};
    check_grids(PE_DTYPE_FP32, g, tu_small() ? 1 : 4, 1, 0);
}

static void test_tp_matches_one_device(void **state)
{
    (void)state;
    const grid g[] = {{1, 1, 2}, {1, 1, 3}, {1, 1, 4}, {2, 1, 2}, {1, 2, 2}, {2, 2, 2}};
    check_grids(PE_DTYPE_FP32, g, tu_small() ? 1 : 6, 0, 1e-5);
}

/* bf16: one device against the naive loops with the same rounding. Rounding a layer's
 * output to bf16 for the next GEMM can land on the other side of a rounding boundary when
 * the two fp32 sums differ in their last bit; one such flip moves the next layer's input
 * by one bf16 step (2^-8 relative), hence a tolerance of 1e-3 of the output's scale. The
 * output must also differ from the fp32 reference by more than fp32 noise: bf16 is in
 * effect. */
static void test_bf16_single_device_matches_bf16_reference(void **state)
{
    (void)state;
    double from_fp32 = check_reference(PE_DTYPE_BF16, 1e-3);
    if (!(from_fp32 > 1e-4))
        fail_msg("bf16 output is only %g from fp32: bf16 rounding is not applied", from_fp32);
}

/* bf16 rounds every GEMM input where the single device rounds it, so DP and PP stay bit
 * for bit; TP's partial sums change the fp32 order before a rounding (see above). */
static void test_bf16_dp_and_pp_are_bit_identical_to_one_device(void **state)
{
    (void)state;
    const grid g[] = {{2, 1, 1}, {1, 2, 1}, {1, 3, 1}, {2, 2, 1}};
    check_grids(PE_DTYPE_BF16, g, tu_small() ? 1 : 4, 1, 0);
}

static void test_bf16_tp_matches_one_device(void **state)
{
    (void)state;
    const grid g[] = {{1, 1, 2}, {1, 1, 4}, {1, 2, 2}, {2, 1, 2}};
    check_grids(PE_DTYPE_BF16, g, tu_small() ? 1 : 4, 0, 1e-3);
}

/* Micro-batching changes only how rows are grouped into GEMMs. At one m every schedule
 * gives the same bits; across m (naive m = 1 against m = 4) the GEMMs have other row
 * counts, and OpenBLAS's sgemm rounds a row differently depending on M (its kernels block
 * M), so the outputs agree to 1e-5 of their scale, not bit for bit. */
static void test_schedules_agree_across_microbatch_counts(void **state)
{
    (void)state;
    for (size_t k = 0; k < NMODELS; k++) {
        const model_case *mc = &models[k];
        size_t n = total_out(mc);
        float *naive = run_grid(mc, PE_DTYPE_FP32, (grid){1, 2, 1}, PE_SCHED_NAIVE, 1);
        float *gpipe = run_grid(mc, PE_DTYPE_FP32, (grid){1, 2, 1}, PE_SCHED_GPIPE, 4);
        float *stream = run_grid(mc, PE_DTYPE_FP32, (grid){1, 2, 1}, PE_SCHED_STREAM, 4);
        double a = scaled_diff(gpipe, naive, n);
        double b = scaled_diff(stream, naive, n);
        assert_true(memcmp(gpipe, stream, n * sizeof(float)) == 0);
        if (a > 1e-5 || b > 1e-5)
            fail_msg("model %s: m=4 vs naive differ by %g / %g", mc->name, a, b);
        free(naive);
        free(gpipe);
        free(stream);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_device_matches_naive_reference),
        cmocka_unit_test(test_dp_is_bit_identical_to_one_device),
        cmocka_unit_test(test_pp_is_bit_identical_to_one_device),
        cmocka_unit_test(test_tp_matches_one_device),
        cmocka_unit_test(test_schedules_agree_across_microbatch_counts),
        cmocka_unit_test(test_bf16_single_device_matches_bf16_reference),
        cmocka_unit_test(test_bf16_dp_and_pp_are_bit_identical_to_one_device),
        cmocka_unit_test(test_bf16_tp_matches_one_device),
    };
    return cmocka_run_group_tests(tests, setup_models, teardown_models);
}
