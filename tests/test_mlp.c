/* test_mlp.c: MLP files: seeded writing, loading (F32 in place, copies, F16/BF16), checks
 * with clear errors, and the naive reference forward against hand-computed values. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp/mlp.h"
#include "model/format/safetensors.h"

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, fp), *n);
    fclose(fp);
    return b;
}

static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    size_t hl = strlen(header);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 8; i++)
        fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, fp);
    assert_int_equal(fwrite(header, 1, hl, fp), hl);
    assert_int_equal(fwrite(data, 1, ndata, fp), ndata);
    assert_int_equal(fclose(fp), 0);
}

static md_mlp_spec small_spec(uint64_t seed)
{
    md_mlp_spec s = {.in = 12, .hidden = 32, .out = 5, .layers = 3, .act = MD_ACT_GELU,
                     .init = MD_INIT_NORMAL, .std = 0.5f, .seed = seed};
    return s;
}

static void test_write_is_deterministic(void **state)
{
    (void)state;
    char p1[512], p2[512], p3[512];
    tu_temp_path(p1, sizeof p1, "mlp_a.safetensors");
    tu_temp_path(p2, sizeof p2, "mlp_b.safetensors");
    tu_temp_path(p3, sizeof p3, "mlp_c.safetensors");
    pe_err err = {{0}};
    md_mlp_spec s = small_spec(1234);
    assert_int_equal(md_mlp_write(&s, p1, &err), PE_OK);
    assert_int_equal(md_mlp_write(&s, p2, &err), PE_OK);
    s.seed = 1235;
    assert_int_equal(md_mlp_write(&s, p3, &err), PE_OK);
    size_t n1, n2, n3;
    unsigned char *a = read_all(p1, &n1), *b = read_all(p2, &n2), *c = read_all(p3, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_int_equal(n1, n3); /* same shapes, same header */
    assert_memory_not_equal(a, c, n1);
    free(a);
    free(b);
    free(c);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}

/* The generator is part of the file format: these values (recorded from it) must come
 * out on every machine, or the same seed would give different models on different hosts. */
static void test_write_golden_values(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_golden.safetensors");
    md_mlp_spec s = {.in = 4, .hidden = 4, .out = 2, .layers = 2, .act = MD_ACT_RELU,
                     .init = MD_INIT_NORMAL, .std = 1.0f, .seed = 42};
    pe_err err = {{0}};
    assert_int_equal(md_mlp_write(&s, path, &err), PE_OK);
    md_mlp m;
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    const float want[4] = {-0x1.9cfc3cp+0f, 0x1.88d42ap+0f, 0x1.9039fp-1f, -0x1.99cc52p-2f};
    assert_memory_equal(m.layers[0].w, want, sizeof want);
    assert_true(fabsf(m.layers[1].w[7] - -0.770285428f) < 1e-7f); /* the 24th draw */
    md_mlp_free(&m);
    unlink(path);
}

static void test_load_shapes_and_metadata(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_load.safetensors");
    pe_err err = {{0}};
    md_mlp_spec s = small_spec(7);
    assert_int_equal(md_mlp_write(&s, path, &err), PE_OK);
    md_mlp m;
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    assert_int_equal(m.nlayers, 3);
    const size_t in[] = {12, 32, 32}, out[] = {32, 32, 5};
    for (int l = 0; l < 3; l++) {
        assert_int_equal(m.layers[l].in, in[l]);
        assert_int_equal(m.layers[l].out, out[l]);
        assert_int_equal(m.layers[l].act, l < 2 ? MD_ACT_GELU : MD_ACT_NONE);
        assert_true(md_layer_flops(&m.layers[l]) == 2.0 * (double)(in[l] * out[l]));
        /* aligned F32: used in place, inside the mapping */
        assert_int_equal((uintptr_t)m.layers[l].w % 4, 0);
        for (size_t o = 0; o < out[l]; o++)
            assert_true(m.layers[l].b[o] == 0.0f);
    }
    assert_int_equal(md_mlp_params(&m), 12 * 32 + 32 + 32 * 32 + 32 + 32 * 5 + 5);

    /* the weights are normal(0, 0.5): check the sample moments of all 1568 */
    double sum = 0, sq = 0;
    size_t n = 0;
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; i < in[l] * out[l]; i++, n++) {
            sum += m.layers[l].w[i];
            sq += (double)m.layers[l].w[i] * m.layers[l].w[i];
        }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    assert_true(fabs(mean) < 4 * 0.5 / sqrt((double)n)); /* 4 standard errors */
    assert_true(fabs(sd - 0.5) < 0.05);
    md_mlp_free(&m);
    md_mlp_free(&m); /* harmless twice */
    unlink(path);
}

static void test_identity_forward_returns_input(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_id.safetensors");
    size_t w = tu_size(64, 16), rows = tu_size(9, 3);
    md_mlp_spec s = {.in = w, .hidden = w, .out = w, .layers = 4, .act = MD_ACT_RELU,
                     .init = MD_INIT_IDENTITY, .seed = 1};
    pe_err err = {{0}};
    assert_int_equal(md_mlp_write(&s, path, &err), PE_OK);
    md_mlp m;
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    float *x = malloc(rows * w * sizeof *x), *y = malloc(rows * w * sizeof *y);
    tu_fill_random(x, rows * w, 3);
    for (size_t i = 0; i < rows * w; i++)
        x[i] = fabsf(x[i]); /* ReLU keeps non-negative values */
    assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, rows, y, &err), PE_OK);
    assert_memory_equal(x, y, rows * w * sizeof *x);
    md_mlp_free(&m);
    free(x);
    free(y);

    s.hidden = w + 1; /* not square */
    assert_int_equal(md_mlp_write(&s, path, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "identity init needs square layers but layer 0 is"));
    unlink(path);
}

/* The two-layer model worked out by hand below. */
static const float W0[3 * 2] = {1, 2, -1, 0.5f, 0, -3}; /* (3, 2) */
static const float B0[3] = {0.5f, -1, 2};
static const float W1[2 * 3] = {1, 1, 1, 2, -1, 0.5f}; /* (2, 3) */
static const float B1[2] = {0, 1};

static void write_hand_model(const char *path, const char *act, const char *final_act)
{
    st_kv meta[] = {{"architecture", "mlp"}, {"activation", act}, {"final_activation", final_act}};
    st_out_tensor ts[] = {{"layers.0.weight", 2, {3, 2}, W0},
                          {"layers.0.bias", 1, {3}, B0},
                          {"layers.1.weight", 2, {2, 3}, W1},
                          {"layers.1.bias", 1, {2}, B1}};
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(path, meta, final_act ? 3 : 2, ts, 4, &err), PE_OK);
}

static void test_reference_forward_by_hand(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_hand.safetensors");
    write_hand_model(path, "relu", NULL);
    md_mlp m;
    pe_err err = {{0}};
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    assert_int_equal(m.nlayers, 2);
    assert_int_equal(m.layers[0].act, MD_ACT_RELU);
    assert_int_equal(m.layers[1].act, MD_ACT_NONE);
    /* row 0: x = (1, 2):  h = relu(5.5, -1, -4) = (5.5, 0, 0);   y = (5.5, 11 + 1)
     * row 1: x = (-1, 1): h = relu(1.5, 0.5, -1) = (1.5, 0.5, 0); y = (2, 3 - 0.5 + 1) */
    const float x[4] = {1, 2, -1, 1}, want[4] = {5.5f, 12, 2, 3.5f};
    float y[4];
    assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, 2, y, &err), PE_OK);
    assert_memory_equal(y, want, sizeof want);
    md_mlp_free(&m);

    /* "final_activation" applies to the last layer */
    write_hand_model(path, "none", "relu");
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    assert_int_equal(m.layers[0].act, MD_ACT_NONE);
    assert_int_equal(m.layers[1].act, MD_ACT_RELU);
    /* no activation in between: x = (1, 2): h = (5.5, -1, -4); y = relu(0.5, 11 + 1 - 2 + 1) */
    const float want2[2] = {0.5f, 11.0f};
    assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, 1, y, &err), PE_OK);
    assert_memory_equal(y, want2, sizeof want2);
    md_mlp_free(&m);
    unlink(path);
}

static double gelu_double(double v)
{
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

static void test_reference_forward_gelu(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_gelu.safetensors");
    write_hand_model(path, "gelu", NULL);
    md_mlp m;
    pe_err err = {{0}};
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    const float x[4] = {1, 2, -1, 1};
    float y[4], want[4];
    for (int r = 0; r < 2; r++) {
        double h[3];
        for (int o = 0; o < 3; o++)
            h[o] = gelu_double(B0[o] + W0[2 * o] * x[2 * r] + W0[2 * o + 1] * x[2 * r + 1]);
        for (int o = 0; o < 2; o++)
            want[2 * r + o] =
                (float)(B1[o] + W1[3 * o] * h[0] + W1[3 * o + 1] * h[1] + W1[3 * o + 2] * h[2]);
    }
    assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, 2, y, &err), PE_OK);
    assert_true(tu_max_rel_diff(y, want, 4, 1e-3) < 1e-5);
    md_mlp_free(&m);
    unlink(path);
}

static void test_load_half_precision_and_unaligned(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_half.safetensors");
    /* one layer (2, 2): W in BF16 (1, -2, 0.5, 3), b in F16 (0.25, -1) */
    const unsigned char data[] = {0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F, 0x40, 0x40,
                                  0x00, 0x34, 0x00, 0xBC};
    write_st(path,
             "{\"__metadata__\":{\"activation\":\"relu\"},"
             "\"layers.0.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
             "\"layers.0.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]}}",
             data, sizeof data);
    md_mlp m;
    pe_err err = {{0}};
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    const float w[4] = {1, -2, 0.5f, 3}, b[2] = {0.25f, -1};
    assert_memory_equal(m.layers[0].w, w, sizeof w);
    assert_memory_equal(m.layers[0].b, b, sizeof b);
    /* the only layer is the last: no activation. y = (1 - 2 + 0.25, 0.5 + 3 - 1) */
    const float x[2] = {1, 1}, want[2] = {-0.75f, 2.5f};
    float y[2];
    assert_int_equal(md_mlp_forward_reference(&m, PE_DTYPE_FP32, x, 1, y, &err), PE_OK);
    assert_memory_equal(y, want, sizeof want);
    md_mlp_free(&m);

    /* F32 at an odd address (header of 8 + 2 mod 4 bytes): loaded through a copy */
    float f[6] = {1, 2, 3, 4, 5, 6};
    char header[256];
    snprintf(header, sizeof header,
             "{\"__metadata__\":{\"activation\":\"none\"},"
             "\"layers.0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
             "\"layers.0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}");
    size_t hl = strlen(header);
    while ((8 + hl) % 4 != 2)
        header[hl++] = ' ';
    header[hl] = '\0';
    write_st(path, header, f, sizeof f);
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    assert_int_equal((uintptr_t)m.layers[0].w % 4, 0);
    assert_memory_equal(m.layers[0].w, f, 4 * sizeof *f);
    assert_memory_equal(m.layers[0].b, f + 4, 2 * sizeof *f);
    md_mlp_free(&m);
    unlink(path);
}

typedef struct bad_model {
    const char *header;
    const char *want;
} bad_model;

static void test_load_errors(void **state)
{
    (void)state;
#define T(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape \
                                 ",\"data_offsets\":[" #b "," #e "]}"
#define META "\"__metadata__\":{\"activation\":\"relu\"}"
    static const bad_model cases[] = {
        {"{" META "," T("layers.0.weight", "F32", "[2,2]", 0, 16) "}",
         "missing tensor 'layers.0.bias'"},
        {"{" META "}", "missing tensor 'layers.0.weight'"},
        {"{\"__metadata__\":{\"activation\":\"relu\",\"layers\":\"2\"}," T(
             "layers.0.weight", "F32", "[2,2]", 0, 16) "," T("layers.0.bias", "F32", "[2]", 16,
                                                             24) "}",
         "missing tensor 'layers.1.weight'"},
        {"{" META "," T("layers.0.weight", "F32", "[2,2]", 0, 16) "," T(
             "layers.0.bias", "F32", "[2]", 16, 24) "," T("layers.1.weight", "F32", "[1,3]", 24,
                                                          36) "," T("layers.1.bias", "F32", "[1]",
                                                                    36, 40) "}",
         "layer 1 takes 3 inputs ('layers.1.weight' is (1, 3)) but layer 0 gives 2 outputs"},
        {"{" META "," T("layers.0.weight", "F32", "[2,2]", 0, 16) "," T(
             "layers.0.bias", "F32", "[3]", 16, 28) "}",
         "tensor 'layers.0.bias' should have shape (2)"},
        {"{" META "," T("layers.0.weight", "F32", "[4]", 0, 16) "," T("layers.0.bias", "F32",
                                                                      "[2]", 16, 24) "}",
         "tensor 'layers.0.weight' has 1 dimensions"},
        {"{" META "," T("layers.0.weight", "I64", "[2,2]", 0, 32) "," T("layers.0.bias", "F32",
                                                                        "[2]", 32, 40) "}",
         "tensor 'layers.0.weight' has dtype I64"},
        {"{" META "," T("layers.0.weight", "F32", "[2,2]", 0, 16) "," T(
             "layers.0.bias", "F32", "[2]", 16, 24) "," T("extra", "F32", "[1]", 24, 28) "}",
         "unexpected tensor 'extra'"},
        {"{" T("layers.0.weight", "F32", "[2,2]", 0, 16) "," T("layers.0.bias", "F32", "[2]", 16,
                                                               24) "}",
         "__metadata__ has no \"activation\""},
        {"{\"__metadata__\":{\"activation\":\"swish\"}}", "activation \"swish\" is unknown"},
        {"{\"__metadata__\":{\"activation\":\"relu\",\"architecture\":\"llama\"}}",
         "architecture is \"llama\""},
        {"{\"__metadata__\":{\"activation\":\"relu\",\"layers\":\"-1\"}}",
         "layers \"-1\" is not a positive layer count"},
    };
#undef T
#undef META
    char path[512];
    tu_temp_path(path, sizeof path, "mlp_bad.safetensors");
    unsigned char data[64] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].header, data, sizeof data);
        md_mlp m;
        pe_err err = {{0}};
        pe_status s = md_mlp_load(path, &m, &err);
        if (s != PE_EFORMAT || !strstr(err.msg, cases[i].want) || !strstr(err.msg, path))
            fail_msg("case %zu: status %d, message \"%s\" (want \"%s\")", i, s, err.msg,
                     cases[i].want);
        assert_null(m.layers);
        assert_null(m.storage);
        md_mlp_free(&m);
    }
    md_mlp m;
    pe_err err = {{0}};
    assert_int_equal(md_mlp_load("/nonexistent/m.safetensors", &m, &err), PE_EIO);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_is_deterministic),
        cmocka_unit_test(test_write_golden_values),
        cmocka_unit_test(test_load_shapes_and_metadata),
        cmocka_unit_test(test_identity_forward_returns_input),
        cmocka_unit_test(test_reference_forward_by_hand),
        cmocka_unit_test(test_reference_forward_gelu),
        cmocka_unit_test(test_load_half_precision_and_unaligned),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
