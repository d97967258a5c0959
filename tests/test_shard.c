/* test_shard.c: PP stage plans (balanced against a brute-force search), TP plans with
 * their divisibility errors, and weight shards that rebuild the layer and its forward. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "model/mlp/shard.h"

/* An in-memory MLP whose layer l is (widths[l + 1], widths[l]), with random weights. */
static md_mlp make_model(int L, const size_t *widths, uint64_t seed)
{
    md_mlp m = {.nlayers = L, .layers = calloc((size_t)L, sizeof(md_layer))};
    assert_non_null(m.layers);
    for (int l = 0; l < L; l++) {
        md_layer *ly = &m.layers[l];
        ly->in = widths[l];
        ly->out = widths[l + 1];
        float *w = malloc(ly->in * ly->out * sizeof *w), *b = malloc(ly->out * sizeof *b);
        assert_true(w && b);
        tu_fill_random(w, ly->in * ly->out, seed + 2 * (uint64_t)l);
        tu_fill_random(b, ly->out, seed + 2 * (uint64_t)l + 1);
        ly->w = w;
        ly->b = b;
    }
    return m;
}

static void free_model(md_mlp *m)
{
    for (int l = 0; l < m->nlayers; l++) {
        free((float *)m->layers[l].w);
        free((float *)m->layers[l].b);
    }
    free(m->layers);
}

static md_mlp equal_model(int L, size_t w)
{
    size_t widths[17];
    assert_true(L <= 16);
    for (int i = 0; i <= L; i++)
        widths[i] = w;
    return make_model(L, widths, 1);
}

static double stage_cost(const md_mlp *m, int a, int b)
{
    double c = 0;
    for (int l = a; l < b; l++)
        c += md_layer_flops(&m->layers[l]);
    return c;
}

static void assert_valid_plan(const md_mlp *m, int pp, const int *first)
{
    assert_int_equal(first[0], 0);
    assert_int_equal(first[pp], m->nlayers);
    for (int p = 0; p < pp; p++)
        assert_true(first[p + 1] > first[p]);
}

/* The least max stage cost over every cut of layers [a, L) into pp stages. */
static double brute_min_max(const md_mlp *m, int a, int pp)
{
    int L = m->nlayers;
    if (pp == 1)
        return stage_cost(m, a, L);
    double best = -1;
    for (int e = a + 1; e <= L - (pp - 1); e++) {
        double c = stage_cost(m, a, e), rest = brute_min_max(m, e, pp - 1);
        double v = c > rest ? c : rest;
        if (best < 0 || v < best)
            best = v;
    }
    return best;
}

static void test_stages_equal_layers(void **state)
{
    (void)state;
    md_mlp m = equal_model(8, 4);
    int first[9];
    pe_err err = {{0}};
    assert_int_equal(md_plan_stages(&m, 4, NULL, first, &err), PE_OK);
    const int want4[5] = {0, 2, 4, 6, 8};
    assert_memory_equal(first, want4, sizeof want4);
    assert_int_equal(md_plan_stages(&m, 8, NULL, first, &err), PE_OK);
    for (int p = 0; p <= 8; p++)
        assert_int_equal(first[p], p);
    assert_int_equal(md_plan_stages(&m, 1, NULL, first, &err), PE_OK);
    assert_int_equal(first[0], 0);
    assert_int_equal(first[1], 8);
    free_model(&m);

    /* 7 equal layers on 3 stages: counts 3, 2, 2 in some order, never 3, 3, 1 */
    m = equal_model(7, 4);
    assert_int_equal(md_plan_stages(&m, 3, NULL, first, &err), PE_OK);
    assert_valid_plan(&m, 3, first);
    for (int p = 0; p < 3; p++)
        assert_in_range(first[p + 1] - first[p], 2, 3);
    free_model(&m);
}

static void test_stages_heavy_layer_alone(void **state)
{
    (void)state;
    /* costs 2 * (1, 100, 10000, 100, 1): layer 2 outweighs all the others together */
    const size_t widths[6] = {1, 1, 100, 100, 1, 1};
    md_mlp m = make_model(5, widths, 3);
    int first[4];
    pe_err err = {{0}};
    assert_int_equal(md_plan_stages(&m, 3, NULL, first, &err), PE_OK);
    const int want[4] = {0, 2, 3, 5};
    assert_memory_equal(first, want, sizeof want);
    free_model(&m);
}

static void test_stages_match_brute_force(void **state)
{
    (void)state;
    int trials = (int)tu_size(300, 40);
    uint64_t rng = 99;
    for (int trial = 0; trial < trials; trial++) {
        float r[10];
        tu_fill_random(r, 10, rng++);
        int L = 1 + (int)((r[0] + 1) * 4) % 8; /* 1..8 layers */
        size_t widths[9];
        for (int i = 0; i <= L; i++)
            widths[i] = 1 + (size_t)((r[i + 1] + 1) * 32);
        md_mlp m = make_model(L, widths, rng);
        for (int pp = 1; pp <= L; pp++) {
            int first[9];
            pe_err err = {{0}};
            assert_int_equal(md_plan_stages(&m, pp, NULL, first, &err), PE_OK);
            assert_valid_plan(&m, pp, first);
            double worst = 0;
            for (int p = 0; p < pp; p++) {
                double c = stage_cost(&m, first[p], first[p + 1]);
                worst = c > worst ? c : worst;
            }
            assert_true(worst == brute_min_max(&m, 0, pp));
        }
        free_model(&m);
    }
}

static void test_stages_split_and_errors(void **state)
{
    (void)state;
    md_mlp m = equal_model(8, 4);
    int first[9];
    pe_err err = {{0}};
    const int split[2] = {3, 5};
    assert_int_equal(md_plan_stages(&m, 2, split, first, &err), PE_OK);
    assert_int_equal(first[0], 0);
    assert_int_equal(first[1], 3);
    assert_int_equal(first[2], 8);

    const int short_split[2] = {3, 4};
    assert_int_equal(md_plan_stages(&m, 2, short_split, first, &err), PE_EINVAL);
    assert_string_equal(err.msg, "--split 3,4 sums to 7 layers but the model has 8; give 2 "
                                 "counts that sum to 8");
    const int empty_stage[2] = {0, 8};
    assert_int_equal(md_plan_stages(&m, 2, empty_stage, first, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "stage 0 has 0 layers; every stage needs at least 1"));
    assert_int_equal(md_plan_stages(&m, 0, NULL, first, &err), PE_EINVAL);
    free_model(&m);

    m = equal_model(4, 4);
    assert_int_equal(md_plan_stages(&m, 5, NULL, first, &err), PE_EINVAL);
    assert_string_equal(err.msg, "5 stages but the model has only 4 layers; use --pp <= 4");
    free_model(&m);
}

static void test_tp_pairing(void **state)
{
    (void)state;
    md_mlp m = equal_model(5, 8);
    md_shard_kind k[5];
    pe_err err = {{0}};
    const md_shard_kind N = MD_SHARD_NONE, C = MD_SHARD_COLUMN, R = MD_SHARD_ROW,
                        G = MD_SHARD_COLUMN_GATHER;

    assert_int_equal(md_plan_tp(&m, 0, 4, 2, k, &err), PE_OK); /* even count: pairs only */
    md_shard_kind even[4] = {C, R, C, R};
    assert_memory_equal(k, even, sizeof even);
    assert_int_equal(md_plan_tp(&m, 0, 5, 4, k, &err), PE_OK); /* odd: a lone last layer */
    md_shard_kind odd[5] = {C, R, C, R, G};
    assert_memory_equal(k, odd, sizeof odd);
    assert_int_equal(md_plan_tp(&m, 0, 5, 1, k, &err), PE_OK);
    md_shard_kind none[5] = {N, N, N, N, N};
    assert_memory_equal(k, none, sizeof none);

    /* pairing restarts at each stage's first layer: stages [0, 1), [1, 4), [4, 5) */
    assert_int_equal(md_plan_tp(&m, 0, 1, 2, k, &err), PE_OK);
    assert_int_equal(k[0], G);
    assert_int_equal(md_plan_tp(&m, 1, 4, 2, k, &err), PE_OK);
    md_shard_kind mid[3] = {C, R, G};
    assert_memory_equal(k, mid, sizeof mid);
    assert_int_equal(md_plan_tp(&m, 3, 5, 2, k, &err), PE_OK);
    md_shard_kind last[2] = {C, R};
    assert_memory_equal(k, last, sizeof last);

    assert_int_equal(md_plan_tp(&m, 2, 2, 2, k, &err), PE_EINVAL); /* empty range */
    assert_int_equal(md_plan_tp(&m, 0, 6, 2, k, &err), PE_EINVAL);
    assert_int_equal(md_plan_tp(&m, 0, 5, 0, k, &err), PE_EINVAL);
    free_model(&m);
}

static void test_tp_divisibility(void **state)
{
    (void)state;
    /* layer 3 is (255, 16), layer 4 (16, 255) */
    const size_t widths[6] = {16, 16, 16, 16, 255, 16};
    md_mlp m = make_model(5, widths, 5);
    md_shard_kind k[5];
    pe_err err = {{0}};
    /* [0, 5): layer 3 is row-parallel (its output is whole) and layer 4 splits its 16 */
    assert_int_equal(md_plan_tp(&m, 0, 5, 2, k, &err), PE_OK);
    /* [1, 5): layer 3 is column-parallel and must split 255 */
    assert_int_equal(md_plan_tp(&m, 1, 5, 2, k, &err), PE_EINVAL);
    assert_string_equal(err.msg, "layer 3: width 255 is not divisible by tp=2; use a tp that "
                                 "divides 255 (e.g. 3, 5) or split the layers with --pp instead");
    assert_int_equal(md_plan_tp(&m, 1, 5, 3, k, &err), PE_EINVAL); /* 16 on layer 1 */
    assert_non_null(strstr(err.msg, "layer 1: width 16 is not divisible by tp=3"));
    free_model(&m);

    const size_t prime[2] = {4, 7};
    m = make_model(1, prime, 5);
    assert_int_equal(md_plan_tp(&m, 0, 1, 2, k, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "width 7 is not divisible by tp=2; use a tp that divides 7 "
                                    "(e.g. 7)"));
    free_model(&m);
}

static void test_shards_rebuild_the_layer(void **state)
{
    (void)state;
    const size_t widths[2] = {24, 12};
    md_mlp m = make_model(1, widths, 11);
    const md_layer *l = &m.layers[0];
    float *W = malloc(l->out * l->in * sizeof *W), *B = malloc(l->out * sizeof *B);
    const int tps[] = {1, 2, 3, 4, 6, 12};
    pe_err err = {{0}};
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
        int tp = tps[i];
        for (int kind = MD_SHARD_NONE; kind <= MD_SHARD_COLUMN_GATHER; kind++) {
            memset(W, 0, l->out * l->in * sizeof *W);
            memset(B, 0, l->out * sizeof *B);
            for (int t = 0; t < tp; t++) {
                float *w, *b;
                size_t ot, it;
                assert_int_equal(md_shard_layer(l, (md_shard_kind)kind, t, tp, &w, &b, &ot, &it,
                                                &err),
                                 PE_OK);
                if (kind == MD_SHARD_ROW) { /* columns [t * it, ...) of W, the whole bias */
                    assert_int_equal(ot, l->out);
                    assert_int_equal(it * (size_t)tp, l->in);
                    for (size_t r = 0; r < ot; r++)
                        memcpy(W + r * l->in + (size_t)t * it, w + r * it, it * sizeof *w);
                    assert_memory_equal(b, l->b, l->out * sizeof *b);
                    memcpy(B, b, ot * sizeof *b);
                } else if (kind == MD_SHARD_NONE) {
                    assert_int_equal(ot, l->out);
                    assert_int_equal(it, l->in);
                    memcpy(W, w, ot * it * sizeof *w);
                    memcpy(B, b, ot * sizeof *b);
                } else { /* rows [t * ot, ...) of W and b */
                    assert_int_equal(ot * (size_t)tp, l->out);
                    assert_int_equal(it, l->in);
                    memcpy(W + (size_t)t * ot * it, w, ot * it * sizeof *w);
                    memcpy(B + (size_t)t * ot, b, ot * sizeof *b);
                }
                free(w);
                free(b);
            }
            assert_memory_equal(W, l->w, l->out * l->in * sizeof *W);
            assert_memory_equal(B, l->b, l->out * sizeof *B);
        }
    }
    float *w, *b;
    size_t ot, it;
    assert_int_equal(md_shard_layer(l, MD_SHARD_COLUMN, 5, 5, &w, &b, &ot, &it, &err), PE_EINVAL);
    assert_int_equal(md_shard_layer(l, MD_SHARD_COLUMN, 0, 5, &w, &b, &ot, &it, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "not divisible by tp=5"));
    assert_null(w);
    free(W);
    free(B);
    free_model(&m);
}

/* y (rows, out) = x (rows, in) W^T + b, double accumulation; relu if asked. */
static void naive_linear(const float *x, size_t rows, const float *w, const float *b, size_t out,
                         size_t in, int relu, float *y)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t o = 0; o < out; o++) {
            double acc = b ? b[o] : 0.0;
            for (size_t k = 0; k < in; k++)
                acc += (double)x[r * in + k] * w[o * in + k];
            float v = (float)acc;
            y[r * out + o] = relu && v < 0 ? 0.0f : v;
        }
}

static void test_sharded_pair_matches_forward(void **state)
{
    (void)state;
    size_t in = tu_size(48, 8), hid = tu_size(96, 24), out = tu_size(40, 12);
    size_t rows = tu_size(7, 3);
    const size_t widths[4] = {in, hid, out, out};
    md_mlp m = make_model(3, widths, 21);
    m.layers[0].act = MD_ACT_RELU;
    float *x = malloc(rows * in * sizeof *x), *ref = malloc(rows * out * sizeof *ref);
    float *y = malloc(rows * out * sizeof *y), *h = malloc(rows * hid * sizeof *h);
    float *part = malloc(rows * out * sizeof *part);
    tu_fill_random(x, rows * in, 5);
    pe_err err = {{0}};
    md_mlp pair = {.nlayers = 2, .layers = m.layers}; /* layers 0 and 1 */
    assert_int_equal(md_mlp_forward_reference(&pair, PE_DTYPE_FP32, x, rows, ref, &err), PE_OK);

    const int tps[] = {2, 4};
    for (size_t i = 0; i < 2; i++) {
        int tp = tps[i];
        md_shard_kind k[3];
        assert_int_equal(md_plan_tp(&m, 0, 3, tp, k, &err), PE_OK);
        assert_int_equal(k[0], MD_SHARD_COLUMN);
        assert_int_equal(k[1], MD_SHARD_ROW);
        memset(y, 0, rows * out * sizeof *y);
        for (int t = 0; t < tp; t++) { /* the partial sums, all-reduced in rank order */
            float *w0, *b0, *w1, *b1;
            size_t o0, i0, o1, i1;
            assert_int_equal(md_shard_layer(&m.layers[0], k[0], t, tp, &w0, &b0, &o0, &i0, &err),
                             PE_OK);
            assert_int_equal(md_shard_layer(&m.layers[1], k[1], t, tp, &w1, &b1, &o1, &i1, &err),
                             PE_OK);
            assert_int_equal(o0, i1); /* the sharded activation lines up */
            naive_linear(x, rows, w0, b0, o0, i0, 1, h);
            naive_linear(h, rows, w1, NULL, o1, i1, 0, part);
            for (size_t j = 0; j < rows * out; j++)
                y[j] += part[j];
            free(w0);
            free(b0);
            free(w1);
            free(b1);
        }
        for (size_t r = 0; r < rows; r++)
            for (size_t o = 0; o < out; o++)
                y[r * out + o] += m.layers[1].b[o]; /* bias once, after the all-reduce */
        assert_true(tu_max_rel_diff(y, ref, rows * out, 1e-1) < 1e-5);

        /* the lone last layer: column shards, all-gathered, equal the whole layer */
        float *whole = malloc(rows * out * sizeof *whole);
        float *gath = malloc(rows * out * sizeof *gath);
        naive_linear(ref, rows, m.layers[2].w, m.layers[2].b, out, out, 0, whole);
        for (int t = 0; t < tp; t++) {
            float *w, *b;
            size_t ot, it;
            assert_int_equal(md_shard_layer(&m.layers[2], k[2], t, tp, &w, &b, &ot, &it, &err),
                             PE_OK);
            naive_linear(ref, rows, w, b, ot, it, 0, part);
            for (size_t r = 0; r < rows; r++)
                memcpy(gath + r * out + (size_t)t * ot, part + r * ot, ot * sizeof *part);
            free(w);
            free(b);
        }
        assert_memory_equal(gath, whole, rows * out * sizeof *gath);
        free(whole);
        free(gath);
    }
    free(x);
    free(ref);
    free(y);
    free(h);
    free(part);
    free_model(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_equal_layers),
        cmocka_unit_test(test_stages_heavy_layer_alone),
        cmocka_unit_test(test_stages_match_brute_force),
        cmocka_unit_test(test_stages_split_and_errors),
        cmocka_unit_test(test_tp_pairing),
        cmocka_unit_test(test_tp_divisibility),
        cmocka_unit_test(test_shards_rebuild_the_layer),
        cmocka_unit_test(test_sharded_pair_matches_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
