/* test_kernels.c: the host backend's kernels against naive references written here
 * (double precision where rounding matters): bias, ReLU, GELU (tanh form), layernorm,
 * softmax, residual add, embedding (with its id range check), and rounding to bf16 against
 * hand-computed bit patterns. */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/bf16.h"

static const be_ops *ops;

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

static float *fvec(size_t n, uint64_t seed, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, seed);
    for (size_t i = 0; i < n; i++)
        x[i] *= scale;
    return x;
}

/* ---- elementwise ------------------------------------------------------------------------ */

static void test_relu_is_max_with_zero_exactly(void **state)
{
    be_device *dev = *state;
    size_t n = 1000;
    float *x = fvec(n, 1, 10.0f);
    x[0] = -0.0f;
    x[1] = 0.0f;
    x[2] = INFINITY;
    x[3] = -INFINITY;
    x[4] = FLT_MIN;
    x[5] = -FLT_MIN;
    float *orig = malloc(n * sizeof *orig);
    memcpy(orig, x, n * sizeof *x);
    assert_int_equal(ops->relu(dev, x, n), PE_OK);
    for (size_t i = 0; i < n; i++) {
        float want = orig[i] > 0.0f ? orig[i] : 0.0f;
        assert_memory_equal(&x[i], &want, sizeof want); /* also +0, never -0 */
    }
    assert_int_equal(ops->relu(dev, NULL, 0), PE_OK);
    assert_int_equal(ops->relu(dev, NULL, 3), PE_EINVAL);
    free(x);
    free(orig);
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in double */
static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_gelu_matches_tanh_formula(void **state)
{
    be_device *dev = *state;
    size_t n = 4001;
    float *x = malloc(n * sizeof *x), *orig = malloc(n * sizeof *orig);
    for (size_t i = 0; i < n; i++) /* a dense grid over [-10, 10] */
        x[i] = orig[i] = -10.0f + 20.0f * (float)i / (float)(n - 1);
    assert_int_equal(ops->gelu(dev, x, n), PE_OK);
    /* float evaluation of the formula: a few ulp of max(1, |x|) */
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)x[i] - gelu_ref(orig[i])) / fmax(1.0, fabs(orig[i]));
        worst = fmax(worst, err);
    }
    print_message("gelu: max error %.3g x max(1, |x|)\n", worst);
    assert_true(worst <= 4.0 * FLT_EPSILON);
    /* known values of the tanh form */
    float v[3] = {0.0f, 1.0f, -1.0f};
    assert_int_equal(ops->gelu(dev, v, 3), PE_OK);
    assert_true(v[0] == 0.0f);
    assert_float_equal(v[1], 0.8411920f, 1e-6);
    assert_float_equal(v[2], -0.1588080f, 1e-6);
    free(x);
    free(orig);
}

/* Rounding to bf16 keeps the upper 16 bits, to nearest with ties to even: worked by hand
 * from the float bit patterns. */
static void test_to_bf16_rounds_to_nearest_even(void **state)
{
    be_device *dev = *state;
    const uint32_t in_bits[] = {
        0x3f800000u, /* 1.0: exact -> 0x3f80 */
        0x3f808000u, /* 1 + 2^-8: a tie, 0x3f80 is even -> 0x3f80 */
        0x3f818000u, /* 1 + 3 * 2^-8: a tie, 0x3f81 is odd -> 0x3f82 */
        0x3f808001u, /* just above the tie -> 0x3f81 */
        0x3f807fffu, /* just below the tie -> 0x3f80 */
        0xbfc00000u, /* -1.5: exact -> 0xbfc0 */
        0x7f7fffffu, /* FLT_MAX rounds up to infinity -> 0x7f80 */
        0x7f800000u, /* +inf -> 0x7f80 */
        0x7f800001u, /* a signalling NaN stays NaN (quiet) -> 0x7fc0 */
        0x00000001u, /* the smallest subnormal rounds to +0 -> 0x0000 */
    };
    const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80,
                             0xbfc0, 0x7f80, 0x7f80, 0x7fc0, 0x0000};
    enum { N = sizeof want / sizeof want[0] };
    float in[N];
    uint16_t out[N];
    for (size_t i = 0; i < N; i++)
        memcpy(&in[i], &in_bits[i], sizeof in[i]);
    assert_int_equal(ops->to_bf16(dev, out, in, N), PE_OK);
    for (size_t i = 0; i < N; i++) {
        if (out[i] != want[i])
            fail_msg("to_bf16(0x%08x) = 0x%04x, want 0x%04x", in_bits[i], out[i], want[i]);
        if (i != 8) /* widening back is exact: the upper half of the float */
            assert_true(pe_k_from_bf16(out[i]) == pe_k_round_bf16(in[i]));
    }
}

static void test_bias_add_broadcasts_over_rows(void **state)
{
    be_device *dev = *state;
    size_t rows = 13, cols = 37;
    float *x = fvec(rows * cols, 2, 3.0f), *b = fvec(cols, 3, 1.0f);
    float *want = malloc(rows * cols * sizeof *want);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            want[r * cols + c] = x[r * cols + c] + b[c];
    assert_int_equal(ops->bias_add(dev, x, b, rows, cols), PE_OK);
    assert_memory_equal(x, want, rows * cols * sizeof *x);
    assert_int_equal(ops->bias_add(dev, x, NULL, rows, cols), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "bias"));
    assert_int_equal(ops->bias_add(dev, NULL, NULL, 0, cols), PE_OK);
    free(x);
    free(b);
    free(want);
}

static void test_residual_add_is_elementwise_sum(void **state)
{
    be_device *dev = *state;
    size_t n = 1031;
    float *x = fvec(n, 4, 2.0f), *r = fvec(n, 5, 5.0f), *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++)
        want[i] = x[i] + r[i];
    assert_int_equal(ops->residual_add(dev, x, r, n), PE_OK);
    assert_memory_equal(x, want, n * sizeof *x);
    assert_int_equal(ops->residual_add(dev, x, NULL, n), PE_EINVAL);
    free(x);
    free(r);
    free(want);
}

/* ---- rowwise ------------------------------------------------------------------------------ */

static void layernorm_ref(double *out, const float *x, const float *g, const float *b,
                          size_t cols, double eps)
{
    double m = 0, v = 0;
    for (size_t i = 0; i < cols; i++)
        m += x[i];
    m /= (double)cols;
    for (size_t i = 0; i < cols; i++)
        v += (x[i] - m) * (x[i] - m);
    v /= (double)cols;
    for (size_t i = 0; i < cols; i++)
        out[i] = (x[i] - m) / sqrt(v + eps) * g[i] + b[i];
}

static void check_layernorm(be_device *dev, size_t rows, size_t cols, float offset)
{
    float *x = fvec(rows * cols, 6 + cols, 2.0f), *g = fvec(cols, 7, 1.5f);
    float *b = fvec(cols, 8, 0.5f), *out = malloc(rows * cols * sizeof *out);
    for (size_t i = 0; i < rows * cols; i++)
        x[i] += offset; /* a large mean tests the two-pass variance */
    const float eps = 1e-5f;
    assert_int_equal(ops->layernorm(dev, out, x, g, b, rows, cols, eps), PE_OK);
    double *ref = malloc(cols * sizeof *ref);
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        layernorm_ref(ref, x + r * cols, g, b, cols, eps);
        for (size_t i = 0; i < cols; i++)
            worst = fmax(worst, fabs(out[r * cols + i] - ref[i]));
    }
    /* outputs are O(1..5); float two-pass moments over cols values, plus the offset's
     * rounding of x itself (|offset| * eps_float relative to a unit spread) */
    double tol = 1e-5 + 4.0 * fabs(offset) * FLT_EPSILON;
    if (worst > tol)
        fail_msg("layernorm %zux%zu offset %g: max error %g > %g", rows, cols, (double)offset,
                 worst, tol);
    free(x);
    free(g);
    free(b);
    free(out);
    free(ref);
}

static void test_layernorm_matches_double_reference(void **state)
{
    be_device *dev = *state;
    check_layernorm(dev, 1, 1, 0.0f);
    check_layernorm(dev, 5, 7, 0.0f);
    check_layernorm(dev, 17, 768, 0.0f);
    check_layernorm(dev, 3, 1000, 1000.0f);
    /* one column: x - mean = 0, so the output is beta exactly */
    float x = 3.0f, g = 2.0f, b = 0.25f, out = 0;
    assert_int_equal(ops->layernorm(dev, &out, &x, &g, &b, 1, 1, 1e-5f), PE_OK);
    assert_true(out == 0.25f);
    /* bad arguments */
    assert_int_equal(ops->layernorm(dev, &out, &x, &g, &b, 1, 0, 1e-5f), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "cols"));
    assert_int_equal(ops->layernorm(dev, &out, &x, &g, &b, 1, 1, -1.0f), PE_EINVAL);
    assert_int_equal(ops->layernorm(dev, &out, &x, NULL, &b, 1, 1, 1e-5f), PE_EINVAL);
    assert_int_equal(ops->layernorm(dev, NULL, NULL, NULL, NULL, 0, 8, 1e-5f), PE_OK);
}

static void check_softmax(be_device *dev, size_t rows, size_t cols, float scale, float shift)
{
    float *x = fvec(rows * cols, 9 + cols, scale), *orig = malloc(rows * cols * sizeof *orig);
    for (size_t i = 0; i < rows * cols; i++)
        orig[i] = x[i] += shift;
    if (cols > 2)
        x[1] = orig[1] = -INFINITY; /* a masked entry */
    assert_int_equal(ops->softmax(dev, x, rows, cols), PE_OK);
    double worst = 0, worst_sum = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *o = orig + r * cols;
        double mx = -INFINITY, s = 0, sum = 0;
        for (size_t i = 0; i < cols; i++)
            mx = fmax(mx, o[i]);
        for (size_t i = 0; i < cols; i++)
            s += exp((double)o[i] - mx);
        for (size_t i = 0; i < cols; i++) {
            double want = exp((double)o[i] - mx) / s;
            worst = fmax(worst, fabs(x[r * cols + i] - want) / fmax(want, 1e-30));
            sum += x[r * cols + i];
        }
        worst_sum = fmax(worst_sum, fabs(sum - 1.0));
    }
    /* per element: expf and one division, a few ulp relative, plus the float sum of the
     * row's exps (cols additions); rows sum to 1 within cols rounding steps */
    double tol = (8.0 + (double)cols) * FLT_EPSILON;
    if (worst > tol || worst_sum > tol)
        fail_msg("softmax %zux%zu: max relative error %g, row sum error %g (tol %g)", rows,
                 cols, worst, worst_sum, tol);
    if (cols > 2)
        assert_true(x[1] == 0.0f);
    free(x);
    free(orig);
}

static void test_softmax_rows_match_double_reference(void **state)
{
    be_device *dev = *state;
    check_softmax(dev, 1, 1, 1.0f, 0.0f);
    check_softmax(dev, 4, 10, 3.0f, 0.0f);
    check_softmax(dev, 7, 1000, 5.0f, 0.0f);
    check_softmax(dev, 3, 100, 20.0f, 1000.0f); /* exp(1000) would overflow unshifted */
    assert_int_equal(ops->softmax(dev, NULL, 3, 0), PE_OK);
    assert_int_equal(ops->softmax(dev, NULL, 3, 4), PE_EINVAL);
}

/* ---- embedding ---------------------------------------------------------------------------- */

static void test_embedding_copies_rows_and_checks_ids(void **state)
{
    be_device *dev = *state;
    size_t vocab = 50, dim = 12, n = 9;
    float *table = fvec(vocab * dim, 10, 1.0f), *out = malloc(n * dim * sizeof *out);
    int32_t ids[9] = {0, 49, 7, 7, 3, 0, 25, 48, 1};
    assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, out, table, ids, n, dim, vocab, 0, vocab), PE_OK);
    for (size_t i = 0; i < n; i++)
        assert_memory_equal(out + i * dim, table + (size_t)ids[i] * dim, dim * sizeof *out);

    /* an id outside [0, vocab): PE_EINVAL, a message naming it, and out left alone */
    int32_t bad[3][2] = {{3, 50}, {-1, 2}, {4, INT32_MAX}};
    int32_t culprit[3] = {50, -1, INT32_MAX};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < 2 * dim; i++)
            out[i] = 7.0f;
        assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, out, table, bad[k], 2, dim, vocab, 0, vocab), PE_EINVAL);
        char want[32];
        snprintf(want, sizeof want, "token id %d", (int)culprit[k]);
        assert_non_null(strstr(ops->last_error(dev), want));
        for (size_t i = 0; i < 2 * dim; i++)
            assert_true(out[i] == 7.0f);
    }
    assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, out, table, NULL, 0, dim, vocab, 0, vocab), PE_OK);
    assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, out, table, NULL, 2, dim, vocab, 0, vocab), PE_EINVAL);
    free(table);
    free(out);
}

/* A vocab-parallel shard: a table of rows [row0, row0 + nrows) of the vocabulary gives
 * those ids' rows and zeros for the others; the shards' lookups summed are the whole
 * table's, exactly; an id outside the whole vocabulary is still PE_EINVAL. */
static void test_embedding_of_a_vocabulary_shard(void **state)
{
    be_device *dev = *state;
    enum { VOCAB = 50, DIM = 8, N = 7 };
    float *table = fvec(VOCAB * DIM, 11, 1.0f);
    int32_t ids[N] = {0, 24, 25, 49, 13, 25, 37};
    float whole[N * DIM], sum[N * DIM], part[N * DIM];
    assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, whole, table, ids, N, DIM, VOCAB, 0,
                                    VOCAB),
                     PE_OK);
    memset(sum, 0, sizeof sum);
    static const size_t row0[2] = {0, 25}, nrows[2] = {25, 25};
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, part, table + row0[r] * DIM, ids, N,
                                        DIM, VOCAB, row0[r], nrows[r]),
                         PE_OK);
        for (size_t i = 0; i < N; i++) {
            int mine = (size_t)ids[i] >= row0[r] && (size_t)ids[i] < row0[r] + nrows[r];
            for (size_t d = 0; d < DIM; d++) {
                float want = mine ? table[(size_t)ids[i] * DIM + d] : 0.0f;
                assert_true(part[i * DIM + d] == want);
                sum[i * DIM + d] += part[i * DIM + d];
            }
        }
    }
    assert_memory_equal(sum, whole, sizeof sum);
    int32_t bad = VOCAB;
    assert_int_equal(ops->embedding(dev, PE_DTYPE_FP32, part, table, &bad, 1, DIM, VOCAB, 25, 25),
                     PE_EINVAL);
    free(table);
}

int main(void)
{
    ops = be_host_ops();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relu_is_max_with_zero_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gelu_matches_tanh_formula, setup, teardown),
        cmocka_unit_test_setup_teardown(test_to_bf16_rounds_to_nearest_even, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bias_add_broadcasts_over_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_residual_add_is_elementwise_sum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layernorm_matches_double_reference, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_softmax_rows_match_double_reference, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_embedding_copies_rows_and_checks_ids, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_embedding_of_a_vocabulary_shard, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
