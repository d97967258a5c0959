/* test_reference.c: the naive reference (pe_ref_*): hand-computed tiny GPT-2 and Llama cases
 * (fp32 and the bf16 emulation), RoPE frequencies with linear and llama3 scaling, and the
 * invariances a correct forward keeps: causality, attention-free positions, GQA against
 * duplicated KV heads, the sliding window, tied heads, the scale flags, the checkpoint
 * layouts; and the errors for what it does not read. */
#include "test_util.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "kernels/sample.h"
#include "model/format/hf.h"
#include "model/format/safetensors.h"
#include "model/reference/ref.h"
#include "pengine/pengine_tools.h"

/* ---- a model written by the test ------------------------------------------------------------ */

#define TM_MAX 96

typedef struct tmodel {
    int n;
    char name[TM_MAX][96];
    int ndim[TM_MAX];
    size_t shape[TM_MAX][4];
    float *data[TM_MAX];
} tmodel;

static size_t tm_nelem(const tmodel *m, int i)
{
    size_t n = 1;
    for (int d = 0; d < m->ndim[i]; d++)
        n *= m->shape[i][d];
    return n;
}

/* Adds a zero tensor (d1 = 0: one dimension) and returns its data. */
static float *tm_add(tmodel *m, size_t d0, size_t d1, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static float *tm_add(tmodel *m, size_t d0, size_t d1, const char *fmt, ...)
{
    assert_true(m->n < TM_MAX);
    int i = m->n++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name[i], sizeof m->name[i], fmt, ap);
    va_end(ap);
    m->ndim[i] = d1 ? 2 : 1;
    m->shape[i][0] = d0;
    m->shape[i][1] = d1;
    m->data[i] = calloc(tm_nelem(m, i), sizeof(float));
    assert_non_null(m->data[i]);
    return m->data[i];
}

static float *tm_get(tmodel *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static float *tm_get(tmodel *m, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->name[i], name))
            return m->data[i];
    print_error("no tensor %s in the test model\n", name);
    fail();
    return NULL;
}

static void tm_drop(tmodel *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->name[i], name)) {
            free(m->data[i]);
            m->n--;
            memmove(m->name[i], m->name[i + 1], (size_t)(m->n - i) * sizeof m->name[0]);
            memmove(&m->ndim[i], &m->ndim[i + 1], (size_t)(m->n - i) * sizeof m->ndim[0]);
            memmove(m->shape[i], m->shape[i + 1], (size_t)(m->n - i) * sizeof m->shape[0]);
            memmove(&m->data[i], &m->data[i + 1], (size_t)(m->n - i) * sizeof m->data[0]);
            return;
        }
    fail();
}

static void tm_free(tmodel *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->data[i]);
    m->n = 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

/* Writes m and config into a fresh directory dir. */
static void tm_write(const tmodel *m, const char *dir, const char *config)
{
    rm_tree(dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    st_out_tensor ts[TM_MAX];
    for (int i = 0; i < m->n; i++) {
        ts[i] = (st_out_tensor){.name = m->name[i], .ndim = m->ndim[i], .data = m->data[i]};
        memcpy(ts[i].shape, m->shape[i], sizeof m->shape[i]);
    }
    char p[700];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(p, NULL, 0, ts, m->n, &err), PE_OK);
    write_text(dir, "config.json", config);
}

static void fill(float *x, size_t n, uint64_t seed, double scale, double offset)
{
    tu_fill_random(x, n, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(offset + scale * x[i]);
}

/* Copies every tensor of the checkpoint in dir into m, as F32. */
static void load_tm(const char *dir, tmodel *m)
{
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    for (int f = 0; f < h.nfiles; f++)
        for (int i = 0; i < h.files[f].ntensors; i++) {
            const st_tensor *t = &h.files[f].tensors[i];
            assert_true(t->ndim == 1 || t->ndim == 2);
            float *x = tm_add(m, t->shape[0], t->ndim > 1 ? t->shape[1] : 0, "%s", t->name);
            assert_int_equal(st_read_f32(&h.files[f], t, x, &err), PE_OK);
        }
    md_hf_close(&h);
}

/* ---- running the reference -------------------------------------------------------------------- */

static pe_ref_model *open_ok(const char *dir, pe_dtype dt)
{
    pe_ref_model *m = NULL;
    pe_status s = pe_ref_open(dir, dt, &m);
    if (s != PE_OK)
        print_error("pe_ref_open(%s): %s\n", dir, pe_last_error());
    assert_int_equal(s, PE_OK);
    return m;
}

/* The logits (n, V) of tokens, a new array. */
static double *run(const char *dir, pe_dtype dt, const int32_t *tokens, size_t n)
{
    pe_ref_model *m = open_ok(dir, dt);
    double *lg = malloc(n * (size_t)pe_ref_vocab(m) * sizeof *lg);
    assert_non_null(lg);
    pe_status s = pe_ref_forward(m, tokens, n, lg);
    if (s != PE_OK)
        print_error("pe_ref_forward: %s\n", pe_last_error());
    assert_int_equal(s, PE_OK);
    pe_ref_close(m);
    return lg;
}

static double max_abs_diff(const double *a, const double *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static void expect_close(const double *got, const double *want, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol)) {
            print_error("logit %zu: got %.17g, want %.17g (tolerance %g)\n", i, got[i], want[i],
                        tol);
            fail();
        }
}

/* ---- hand arithmetic for the hand-computed cases ------------------------------------------------ */

static double dot4(const double *a, const double *b)
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
}

static void ln4(double *y, const double *x, const double *w, const double *b, double eps)
{
    double mean = (x[0] + x[1] + x[2] + x[3]) / 4, var = 0;
    for (int i = 0; i < 4; i++)
        var += (x[i] - mean) * (x[i] - mean) / 4;
    for (int i = 0; i < 4; i++)
        y[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i];
}

static void rms4(double *y, const double *x, const double *w, double eps)
{
    double r = sqrt(dot4(x, x) / 4 + eps);
    for (int i = 0; i < 4; i++)
        y[i] = w[i] * x[i] / r;
}

static double gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* bf16 rounding of the bf16 emulation (or none): the engine's own rounding of a float */
static int g_bf16;
static double rb(double x) { return g_bf16 ? pe_k_round_bf16((float)x) : x; }

/* The values as the F32 file holds them. */
static void to_f32(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)x[i];
}

static void tm_set(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* ---- hand-computed cases ------------------------------------------------------------------------ */

/* GPT-2, 1 layer, C 4, 2 heads of 2, V 3, 3 positions. q = 1.5 h, k = h, v = h (+ 0.05 on
 * dim 0) through c_attn's [in, out] blocks; c_proj a permutation; the MLP a bias and one
 * weight; the expected logits written out below. */
static void test_gpt2_by_hand(void **state)
{
    (void)state;
    double wte[3][4] = {{0.5, -1, 0.25, 2}, {1, 0, -0.5, 0.75}, {-0.3, 0.8, 1.2, -1}};
    double wpe[3][4] = {{0.1, 0.2, -0.1, 0}, {0, -0.3, 0.2, 0.1}, {0.4, 0, 0, -0.2}};
    double ln1w[4] = {1, 0.5, 2, 1}, ln1b[4] = {0, 0.1, -0.1, 0};
    double projb[4] = {0.1, 0, 0, -0.1}, fcb[4] = {1, -1, 0.5, 2};
    double lnfw[4] = {1, 2, 1, 0.5}, lnfb[4] = {0, 0.1, 0, 0};
    const double ones[4] = {1, 1, 1, 1}, zeros[4] = {0};
    const double eps = 1e-5;
    to_f32(&wte[0][0], 12), to_f32(&wpe[0][0], 12), to_f32(ln1w, 4), to_f32(ln1b, 4);
    to_f32(projb, 4), to_f32(fcb, 4), to_f32(lnfw, 4), to_f32(lnfb, 4);
    tmodel m = {0};
    tm_set(tm_add(&m, 3, 4, "transformer.wte.weight"), &wte[0][0], 12);
    tm_set(tm_add(&m, 3, 4, "transformer.wpe.weight"), &wpe[0][0], 12);
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.ln_1.weight"), ln1w, 4);
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.ln_1.bias"), ln1b, 4);
    float *ca = tm_add(&m, 4, 12, "transformer.h.0.attn.c_attn.weight"); /* [in, out] */
    float *cab = tm_add(&m, 12, 0, "transformer.h.0.attn.c_attn.bias");
    for (int i = 0; i < 4; i++) {
        ca[i * 12 + i] = 1.5f;    /* q */
        ca[i * 12 + 4 + i] = 1;   /* k */
        ca[i * 12 + 8 + i] = 1;   /* v */
    }
    cab[8] = 0.05f;
    float *cp = tm_add(&m, 4, 4, "transformer.h.0.attn.c_proj.weight");
    for (int i = 0; i < 4; i++)
        cp[i * 4 + (i + 1) % 4] = 1; /* out (i + 1) % 4 takes in i */
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.attn.c_proj.bias"), projb, 4);
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.ln_2.weight"), ones, 4);
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.ln_2.bias"), zeros, 4);
    tm_add(&m, 4, 4, "transformer.h.0.mlp.c_fc.weight")[0 * 4 + 1] = 0.5f; /* f1 += 0.5 g0 */
    tm_set(tm_add(&m, 4, 0, "transformer.h.0.mlp.c_fc.bias"), fcb, 4);
    float *mp = tm_add(&m, 4, 4, "transformer.h.0.mlp.c_proj.weight");
    for (int j = 0; j < 4; j++)
        mp[j * 4 + j] = 1;
    mp[1 * 4 + 3] = 2; /* z3 += 2 m1 */
    tm_add(&m, 4, 0, "transformer.h.0.mlp.c_proj.bias");
    tm_set(tm_add(&m, 4, 0, "transformer.ln_f.weight"), lnfw, 4);
    tm_set(tm_add(&m, 4, 0, "transformer.ln_f.bias"), lnfb, 4);
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_gpt2_hand");
    tm_write(&m, dir,
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 4, \"n_layer\": 1, "
             "\"n_head\": 2, \"n_positions\": 3, \"vocab_size\": 3, \"n_inner\": 4, "
             "\"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\"}");
    tm_free(&m);

    const int32_t tok[3] = {2, 0, 1};
    double x[3][4], h[3][4], want[3][3];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 4; i++)
            x[t][i] = wte[tok[t]][i] + wpe[t][i];
    for (int t = 0; t < 3; t++)
        ln4(h[t], x[t], ln1w, ln1b, eps);
    for (int t = 0; t < 3; t++) {
        double a[4], y[4], g[4], f[4], z[4], xf[4];
        for (int hh = 0; hh < 2; hh++) { /* head hh: dims 2hh, 2hh + 1 */
            int d0 = 2 * hh, d1 = d0 + 1;
            double s[3], mx = -INFINITY, zsum = 0;
            for (int j = 0; j <= t; j++) {
                s[j] = (1.5 * h[t][d0] * h[j][d0] + 1.5 * h[t][d1] * h[j][d1]) / sqrt(2.0);
                mx = fmax(mx, s[j]);
            }
            a[d0] = a[d1] = 0;
            for (int j = 0; j <= t; j++)
                zsum += exp(s[j] - mx);
            for (int j = 0; j <= t; j++) {
                double p = exp(s[j] - mx) / zsum;
                a[d0] += p * (h[j][d0] + (d0 == 0 ? (double)0.05f : 0));
                a[d1] += p * h[j][d1];
            }
        }
        for (int o = 0; o < 4; o++)
            y[o] = a[(o + 3) % 4] + projb[o];
        for (int i = 0; i < 4; i++)
            x[t][i] += y[i];
        ln4(g, x[t], ones, zeros, eps);
        for (int j = 0; j < 4; j++)
            f[j] = fcb[j] + (j == 1 ? 0.5 * g[0] : 0);
        for (int o = 0; o < 4; o++)
            z[o] = gelu_tanh(f[o]) + (o == 3 ? 2 * gelu_tanh(f[1]) : 0);
        for (int i = 0; i < 4; i++)
            x[t][i] += z[i];
        ln4(xf, x[t], lnfw, lnfb, eps);
        for (int v = 0; v < 3; v++)
            want[t][v] = dot4(xf, wte[v]);
    }
    double *got = run(dir, PE_DTYPE_FP32, tok, 3);
    expect_close(got, &want[0][0], 9, 1e-12);
    free(got);
    rm_tree(dir);
}

/* Llama, 1 layer, C 4, one head of 4, rope_theta 16 (inv_freq 1 and 1/4: exact angles), a
 * tied head; fp32, then the bf16 emulation with its rounding points written out. */
enum { LH_N = 8 };
static double lh_E[3][4] = {{0.3, -1.7, 0.9, 0.2}, {1.1, 0.4, -0.6, -1.3}, {-0.8, 0.5, 0.7, 1.9}};
static double lh_w1[4] = {1, 2, 0.5, 1}, lh_w2[4] = {1, 1, 1, 1}, lh_wf[4] = {0.3, 1, 1, 2};
static const int32_t lh_tok[LH_N] = {2, 0, 1, 1, 2, 0, 0, 1};

/* The expected logits (LH_N, 3); round_k, round_v: the KV cache's bf16 rounding (bf16 only),
 * switchable to check that the case can tell. */
static void llama_hand_want(double want[LH_N][3], int round_k, int round_v)
{
    const double eps = 1e-6;
    double x[LH_N][4], kk[LH_N][4], vv[LH_N][4], qq[LH_N][4], Er[3][4];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 4; i++)
            Er[t][i] = rb(lh_E[t][i]); /* the embedding as held (bf16: rounded) */
    for (int t = 0; t < LH_N; t++) {
        double h[4];
        for (int i = 0; i < 4; i++)
            x[t][i] = Er[lh_tok[t]][i];
        rms4(h, x[t], lh_w1, eps);
        for (int i = 0; i < 4; i++)
            h[i] = rb(h[i]); /* a GEMM input */
        double qv[4] = {2 * h[0] + 0.5 * h[3], 1.5 * h[1], 1.5 * h[2], 1.5 * h[3]};
        double kv[4] = {h[0], h[1], h[2], h[3]};
        double c0 = cos(t * 1.0), s0 = sin(t * 1.0), c1 = cos(t * 0.25), s1 = sin(t * 0.25);
        double *dst[2] = {qq[t], kk[t]}, *src[2] = {qv, kv};
        for (int r = 0; r < 2; r++) { /* rotate-half: (0, 2) by t, (1, 3) by t / 4 */
            dst[r][0] = src[r][0] * c0 - src[r][2] * s0;
            dst[r][2] = src[r][2] * c0 + src[r][0] * s0;
            dst[r][1] = src[r][1] * c1 - src[r][3] * s1;
            dst[r][3] = src[r][3] * c1 + src[r][1] * s1;
        }
        for (int i = 0; i < 4; i++) { /* the KV cache */
            kk[t][i] = round_k ? rb(kk[t][i]) : kk[t][i];
            vv[t][i] = h[(i + 1) % 4] + 0.375 * h[i];
            vv[t][i] = round_v ? rb(vv[t][i]) : vv[t][i];
        }
    }
    for (int t = 0; t < LH_N; t++) {
        double s[LH_N], mx = -INFINITY, z = 0, a[4] = {0}, h2[4], xf[4];
        for (int j = 0; j <= t; j++) {
            s[j] = dot4(qq[t], kk[j]) * 0.5; /* 1 / sqrt(hd) */
            mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= t; j++)
            z += exp(s[j] - mx);
        for (int j = 0; j <= t; j++)
            for (int i = 0; i < 4; i++)
                a[i] += exp(s[j] - mx) / z * vv[j][i];
        for (int i = 0; i < 4; i++)
            a[i] = rb(a[i]);
        double y[4] = {a[0], a[1], a[2], a[3] - 0.5 * a[1]};
        for (int i = 0; i < 4; i++)
            x[t][i] += y[i];
        rms4(h2, x[t], lh_w2, eps);
        for (int i = 0; i < 4; i++)
            h2[i] = rb(h2[i]);
        double mm[2] = {rb(silu(h2[0]) * 2 * h2[3]), rb(silu(h2[1] - h2[2]) * h2[0])};
        x[t][0] += mm[0];
        x[t][2] += 0.5 * mm[1];
        rms4(xf, x[t], lh_wf, eps); /* norm weights as the file holds them */
        for (int i = 0; i < 4; i++)
            xf[i] = rb(xf[i]);
        for (int v = 0; v < 3; v++)
            want[t][v] = dot4(xf, Er[v]);
    }
}

static void llama_by_hand(pe_dtype dt)
{
    to_f32(&lh_E[0][0], 12), to_f32(lh_wf, 4); /* the values as the F32 file holds them */
    tmodel m = {0};
    tm_set(tm_add(&m, 3, 4, "model.embed_tokens.weight"), &lh_E[0][0], 12);
    tm_set(tm_add(&m, 4, 0, "model.layers.0.input_layernorm.weight"), lh_w1, 4);
    float *q = tm_add(&m, 4, 4, "model.layers.0.self_attn.q_proj.weight"); /* (out, in) */
    float *k = tm_add(&m, 4, 4, "model.layers.0.self_attn.k_proj.weight");
    float *v = tm_add(&m, 4, 4, "model.layers.0.self_attn.v_proj.weight");
    float *o = tm_add(&m, 4, 4, "model.layers.0.self_attn.o_proj.weight");
    for (int i = 0; i < 4; i++) {
        q[i * 4 + i] = i == 0 ? 2 : 1.5f; /* attention neither flat nor one-hot */
        k[i * 4 + i] = 1;
        v[i * 4 + (i + 1) % 4] = 1; /* v_i = h_(i+1)%4 + 0.375 h_i */
        v[i * 4 + i] = 0.375f;
        o[i * 4 + i] = 1;
    }
    q[0 * 4 + 3] = 0.5f;  /* q0 = 2 h0 + 0.5 h3 */
    o[3 * 4 + 1] = -0.5f; /* y3 = a3 - 0.5 a1 */
    tm_set(tm_add(&m, 4, 0, "model.layers.0.post_attention_layernorm.weight"), lh_w2, 4);
    float *g = tm_add(&m, 2, 4, "model.layers.0.mlp.gate_proj.weight");
    float *u = tm_add(&m, 2, 4, "model.layers.0.mlp.up_proj.weight");
    float *d = tm_add(&m, 4, 2, "model.layers.0.mlp.down_proj.weight");
    g[0 * 4 + 0] = 1;                       /* gate0 = h0 */
    g[1 * 4 + 1] = 1, g[1 * 4 + 2] = -1;    /* gate1 = h1 - h2 */
    u[0 * 4 + 3] = 2, u[1 * 4 + 0] = 1;     /* up0 = 2 h3, up1 = h0 */
    d[0 * 2 + 0] = 1, d[2 * 2 + 1] = 0.5f;  /* x0 += m0, x2 += 0.5 m1 */
    tm_set(tm_add(&m, 4, 0, "model.norm.weight"), lh_wf, 4);
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_llama_hand");
    tm_write(&m, dir,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4, "
             "\"intermediate_size\": 2, \"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
             "\"num_key_value_heads\": 1, \"vocab_size\": 3, \"max_position_embeddings\": 8, "
             "\"rms_norm_eps\": 1e-06, \"rope_theta\": 16.0, \"rope_scaling\": null, "
             "\"tie_word_embeddings\": true, \"hidden_act\": \"silu\"}");
    tm_free(&m);

    g_bf16 = dt == PE_DTYPE_BF16;
    double want[LH_N][3], other[LH_N][3];
    llama_hand_want(want, 1, 1);
    if (g_bf16) { /* the case tells whether keys and values are rounded */
        llama_hand_want(other, 0, 1);
        assert_true(max_abs_diff(&want[0][0], &other[0][0], LH_N * 3) > 1e-6);
        llama_hand_want(other, 1, 0);
        assert_true(max_abs_diff(&want[0][0], &other[0][0], LH_N * 3) > 1e-6);
    }
    double *got = run(dir, dt, lh_tok, LH_N);
    expect_close(got, &want[0][0], LH_N * 3, 1e-12);
    free(got);
    g_bf16 = 0;
    rm_tree(dir);
}

static void test_llama_by_hand(void **state)
{
    (void)state;
    llama_by_hand(PE_DTYPE_FP32);
}

static void test_llama_by_hand_bf16(void **state)
{
    (void)state;
    llama_by_hand(PE_DTYPE_BF16);
}

/* Qwen2, 1 layer: C 6, 4 query heads and 2 KV heads of head_dim 2 (not C / H = 1.5: from
 * the config), q/k/v biases, an untied head, the MLP off (gate 0: silu(0) * up = 0); the
 * expected logits by explicit loops: query head h reads KV head h / 2, scores / sqrt(2). */
static void matvec(double *y, const float *W, const float *b, const double *x, int rows,
                   int cols)
{
    for (int r = 0; r < rows; r++) {
        y[r] = b ? b[r] : 0;
        for (int c = 0; c < cols; c++)
            y[r] += (double)W[r * cols + c] * x[c];
    }
}

static void rmsn(double *y, const double *x, const float *w, int C, double eps)
{
    double ms = 0;
    for (int i = 0; i < C; i++)
        ms += x[i] * x[i] / C;
    for (int i = 0; i < C; i++)
        y[i] = w[i] * (x[i] / sqrt(ms + eps));
}

static void test_qwen2_gqa_by_hand(void **state)
{
    (void)state;
    enum { C = 6, H = 4, KVH = 2, HD = 2, V = 5, N = 6 };
    tmodel m = {0};
    float *E = tm_add(&m, V, C, "model.embed_tokens.weight");
    float *w1 = tm_add(&m, C, 0, "model.layers.0.input_layernorm.weight");
    float *Wq = tm_add(&m, H * HD, C, "model.layers.0.self_attn.q_proj.weight");
    float *bq = tm_add(&m, H * HD, 0, "model.layers.0.self_attn.q_proj.bias");
    float *Wk = tm_add(&m, KVH * HD, C, "model.layers.0.self_attn.k_proj.weight");
    float *bk = tm_add(&m, KVH * HD, 0, "model.layers.0.self_attn.k_proj.bias");
    float *Wv = tm_add(&m, KVH * HD, C, "model.layers.0.self_attn.v_proj.weight");
    float *bv = tm_add(&m, KVH * HD, 0, "model.layers.0.self_attn.v_proj.bias");
    float *Wo = tm_add(&m, C, H * HD, "model.layers.0.self_attn.o_proj.weight");
    fill(tm_add(&m, C, 0, "model.layers.0.post_attention_layernorm.weight"), C, 9, 0.2, 1);
    tm_add(&m, 3, C, "model.layers.0.mlp.gate_proj.weight"); /* zero */
    fill(tm_add(&m, 3, C, "model.layers.0.mlp.up_proj.weight"), 3 * C, 10, 1, 0);
    fill(tm_add(&m, C, 3, "model.layers.0.mlp.down_proj.weight"), 3 * C, 11, 1, 0);
    float *wf = tm_add(&m, C, 0, "model.norm.weight");
    float *head = tm_add(&m, V, C, "lm_head.weight");
    fill(E, V * C, 1, 1, 0);
    fill(w1, C, 2, 0.3, 1);
    fill(Wq, H * HD * C, 3, 1, 0);
    fill(bq, H * HD, 4, 0.5, 0);
    fill(Wk, KVH * HD * C, 5, 1, 0);
    fill(bk, KVH * HD, 6, 0.5, 0);
    fill(Wv, KVH * HD * C, 7, 1, 0);
    fill(bv, KVH * HD, 8, 0.5, 0);
    fill(Wo, C * H * HD, 12, 0.5, 0);
    fill(wf, C, 13, 0.3, 1);
    fill(head, V * C, 14, 1, 0);
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_qwen2_hand");
    tm_write(&m, dir,
             "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 6, "
             "\"intermediate_size\": 3, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 2, \"head_dim\": 2, \"vocab_size\": 5, "
             "\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-06, "
             "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": false, "
             "\"use_sliding_window\": false, \"sliding_window\": 16}");

    const int32_t tok[N] = {4, 1, 1, 3, 0, 2};
    double x[N][C], q[N][H * HD], k[N][KVH * HD], v[N][KVH * HD], want[N][V];
    for (int t = 0; t < N; t++) {
        double hn[C], xe[C];
        for (int i = 0; i < C; i++)
            xe[i] = x[t][i] = E[tok[t] * C + i];
        rmsn(hn, xe, w1, C, 1e-6);
        matvec(q[t], Wq, bq, hn, H * HD, C);
        matvec(k[t], Wk, bk, hn, KVH * HD, C);
        matvec(v[t], Wv, bv, hn, KVH * HD, C);
        double c = cos(t * 1.0), sn = sin(t * 1.0); /* head_dim 2: inv_freq = [1] */
        for (int hh = 0; hh < H; hh++) {
            double a0 = q[t][2 * hh], a1 = q[t][2 * hh + 1];
            q[t][2 * hh] = a0 * c - a1 * sn;
            q[t][2 * hh + 1] = a1 * c + a0 * sn;
        }
        for (int g = 0; g < KVH; g++) {
            double a0 = k[t][2 * g], a1 = k[t][2 * g + 1];
            k[t][2 * g] = a0 * c - a1 * sn;
            k[t][2 * g + 1] = a1 * c + a0 * sn;
        }
    }
    for (int t = 0; t < N; t++) {
        double att[H * HD] = {0}, y[C], xf[C];
        for (int hh = 0; hh < H; hh++) {
            int g = hh / 2; /* heads 0, 1 read KV head 0; heads 2, 3 KV head 1 */
            double sc[N], mx = -INFINITY, z = 0;
            for (int j = 0; j <= t; j++) {
                sc[j] = (q[t][2 * hh] * k[j][2 * g] + q[t][2 * hh + 1] * k[j][2 * g + 1]) /
                        sqrt(2.0);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= t; j++)
                z += exp(sc[j] - mx);
            for (int j = 0; j <= t; j++)
                for (int d = 0; d < 2; d++)
                    att[2 * hh + d] += exp(sc[j] - mx) / z * v[j][2 * g + d];
        }
        matvec(y, Wo, NULL, att, C, H * HD);
        for (int i = 0; i < C; i++)
            x[t][i] += y[i];
        rmsn(xf, x[t], wf, C, 1e-6);
        matvec(want[t], head, NULL, xf, V, C);
    }
    tm_free(&m);
    double *got = run(dir, PE_DTYPE_FP32, tok, N);
    expect_close(got, &want[0][0], N * V, 1e-12);
    free(got);
    rm_tree(dir);
}

/* The reference's bf16 rounding agrees with the engine's (an independent implementation),
 * ties to even included. */
static void test_bf16_rounding(void **state)
{
    (void)state;
    size_t n = tu_size(200000, 20000);
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, 5);
    for (size_t i = 0; i < n; i++) {
        float f = x[i] * ldexpf(1.0f, (int)(i % 60) - 30);
        if (i % 7 == 0) { /* exact ties: the low 16 bits 0x8000 */
            uint32_t b;
            memcpy(&b, &f, sizeof b);
            b = (b & 0xffff0000u) | 0x8000u;
            memcpy(&f, &b, sizeof b);
        }
        double want = pe_k_round_bf16(f), got = md_ref_bf16(f);
        if (got != want) {
            print_error("%a: got %a, want %a\n", (double)f, got, want);
            fail();
        }
    }
    assert_true(md_ref_bf16(0.0) == 0.0);
    assert_true(md_ref_bf16(1.0 + 0x1p-8) == 1.0);          /* tie: to even */
    assert_true(md_ref_bf16(1.0 + 3 * 0x1p-8) == 1.0 + 0x1p-6); /* tie: to even, up */
    free(x);
}

/* ---- RoPE frequencies ----------------------------------------------------------------------- */

static pe_ref_model *llama_with_rope(const char *dir, const char *rope_scaling, pe_status want)
{
    tmodel m = {0};
    size_t C = 16, I = 8, V = 5;
    fill(tm_add(&m, V, C, "model.embed_tokens.weight"), V * C, 1, 1, 0);
    fill(tm_add(&m, C, 0, "model.layers.0.input_layernorm.weight"), C, 2, 0, 1);
    fill(tm_add(&m, C, C, "model.layers.0.self_attn.q_proj.weight"), C * C, 3, 0.3, 0);
    fill(tm_add(&m, C, C, "model.layers.0.self_attn.k_proj.weight"), C * C, 4, 0.3, 0);
    fill(tm_add(&m, C, C, "model.layers.0.self_attn.v_proj.weight"), C * C, 5, 0.3, 0);
    fill(tm_add(&m, C, C, "model.layers.0.self_attn.o_proj.weight"), C * C, 6, 0.3, 0);
    fill(tm_add(&m, C, 0, "model.layers.0.post_attention_layernorm.weight"), C, 7, 0, 1);
    fill(tm_add(&m, I, C, "model.layers.0.mlp.gate_proj.weight"), I * C, 8, 0.3, 0);
    fill(tm_add(&m, I, C, "model.layers.0.mlp.up_proj.weight"), I * C, 9, 0.3, 0);
    fill(tm_add(&m, C, I, "model.layers.0.mlp.down_proj.weight"), C * I, 10, 0.3, 0);
    fill(tm_add(&m, C, 0, "model.norm.weight"), C, 11, 0, 1);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16, "
             "\"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
             "\"vocab_size\": 5, \"max_position_embeddings\": 64, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": true, \"rope_scaling\": %s}",
             rope_scaling);
    tm_write(&m, dir, cfg);
    tm_free(&m);
    pe_ref_model *r = NULL;
    assert_int_equal(pe_ref_open(dir, PE_DTYPE_FP32, &r), want);
    return r;
}

/* head_dim 8, theta 10000: inv_freq 1, 0.1, 0.01, 0.001 (float32); linear / factor; llama3
 * with factor 8, low 1, high 4, original 64: wavelengths 6.28 (< 16: kept), 62.8 (between 16
 * and 64: smoothed, (1 - s) f / 8 + s f with s = (64 / 62.83 - 1) / 3), 628 and 6283 (> 64:
 * divided by 8). */
static void test_rope_frequencies(void **state)
{
    (void)state;
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_rope");
    const double plain[4] = {1, 0.1, 0.01, 0.001};
    const double llama3[4] = {1, 0.013042256043820465, 0.00125, 0.000125};
    const char *cases[] = {"null", "{\"rope_type\": \"default\"}",
                           "{\"rope_type\": \"linear\", \"factor\": 2.0}",
                           "{\"type\": \"linear\", \"factor\": 4.0}", /* the old key */
                           "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                           "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"};
    for (int c = 0; c < 5; c++) {
        pe_ref_model *m = llama_with_rope(dir, cases[c], PE_OK);
        assert_int_equal(m->c.hd, 8);
        for (int i = 0; i < 4; i++) {
            double want = c == 4 ? llama3[i] : plain[i] / (c == 2 ? 2 : c == 3 ? 4 : 1);
            double got = m->c.inv_freq[i];
            if (fabs(got - want) > 2e-7 * want) { /* float32, as HF holds it */
                print_error("case %d, inv_freq[%d]: got %.9g, want %.9g\n", c, i, got, want);
                fail();
            }
        }
        pe_ref_close(m);
    }
    /* scaling changes the logits: linear 2 against none */
    const int32_t tok[6] = {1, 4, 2, 2, 0, 3};
    pe_ref_close(llama_with_rope(dir, "null", PE_OK));
    double *a = run(dir, PE_DTYPE_FP32, tok, 6);
    pe_ref_close(llama_with_rope(dir, "{\"rope_type\": \"linear\", \"factor\": 2.0}", PE_OK));
    double *b = run(dir, PE_DTYPE_FP32, tok, 6);
    assert_true(max_abs_diff(a, b, 5) == 0.0);       /* position 0: angle 0 either way */
    assert_true(max_abs_diff(a + 5, b + 5, 25) > 1e-4); /* later positions turn less */
    free(a);
    free(b);
    /* what the reference does not read */
    const char *bad[] = {"{\"rope_type\": \"dynamic\", \"factor\": 2.0}",
                         "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
                         "{\"rope_type\": \"linear\"}", "{\"factor\": 2.0}",
                         "{\"rope_type\": \"llama3\", \"factor\": 8.0}", "[1]"};
    const char *why[] = {"\"dynamic\"", "\"yarn\"", "\"factor\"", "rope_type",
                         "low_freq_factor", "rope_scaling"};
    for (int c = 0; c < 6; c++) {
        assert_null(llama_with_rope(dir, bad[c], PE_EFORMAT));
        if (!strstr(pe_last_error(), why[c]) || !strstr(pe_last_error(), "config.json")) {
            print_error("case %d: message \"%s\" lacks \"%s\"\n", c, pe_last_error(), why[c]);
            fail();
        }
    }
    rm_tree(dir);
}

/* ---- random models built by the test ---------------------------------------------------------- */

typedef struct lspec {
    const char *arch;
    int C, H, KVH, hd, I, V, L, P;
    int qkv_bias, tied, window;
    uint64_t seed;
} lspec;

static void build_llama(tmodel *m, const lspec *s)
{
    size_t C = (size_t)s->C, Q = (size_t)(s->H * s->hd), KV = (size_t)(s->KVH * s->hd);
    size_t I = (size_t)s->I, V = (size_t)s->V;
    uint64_t k = s->seed * 1000;
    fill(tm_add(m, V, C, "model.embed_tokens.weight"), V * C, k++, 1, 0);
    for (int l = 0; l < s->L; l++) {
        fill(tm_add(m, C, 0, "model.layers.%d.input_layernorm.weight", l), C, k++, 0.2, 1);
        fill(tm_add(m, Q, C, "model.layers.%d.self_attn.q_proj.weight", l), Q * C, k++, 0.6, 0);
        fill(tm_add(m, KV, C, "model.layers.%d.self_attn.k_proj.weight", l), KV * C, k++, 0.6, 0);
        fill(tm_add(m, KV, C, "model.layers.%d.self_attn.v_proj.weight", l), KV * C, k++, 0.3, 0);
        if (s->qkv_bias) {
            fill(tm_add(m, Q, 0, "model.layers.%d.self_attn.q_proj.bias", l), Q, k++, 0.2, 0);
            fill(tm_add(m, KV, 0, "model.layers.%d.self_attn.k_proj.bias", l), KV, k++, 0.2, 0);
            fill(tm_add(m, KV, 0, "model.layers.%d.self_attn.v_proj.bias", l), KV, k++, 0.2, 0);
        }
        fill(tm_add(m, C, Q, "model.layers.%d.self_attn.o_proj.weight", l), C * Q, k++, 0.3, 0);
        fill(tm_add(m, C, 0, "model.layers.%d.post_attention_layernorm.weight", l), C, k++, 0.2,
             1);
        fill(tm_add(m, I, C, "model.layers.%d.mlp.gate_proj.weight", l), I * C, k++, 0.3, 0);
        fill(tm_add(m, I, C, "model.layers.%d.mlp.up_proj.weight", l), I * C, k++, 0.3, 0);
        fill(tm_add(m, C, I, "model.layers.%d.mlp.down_proj.weight", l), C * I, k++, 0.3, 0);
    }
    fill(tm_add(m, C, 0, "model.norm.weight"), C, k++, 0.2, 1);
    if (!s->tied)
        fill(tm_add(m, V, C, "lm_head.weight"), V * C, k++, 1, 0);
}

static void llama_config(char *buf, size_t len, const lspec *s)
{
    char window[64] = "";
    if (s->window)
        snprintf(window, sizeof window, ", \"sliding_window\": %d", s->window);
    snprintf(buf, len,
             "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 100.0, "
             "\"tie_word_embeddings\": %s, \"hidden_act\": \"silu\"%s}",
             s->arch, s->C, s->I, s->L, s->H, s->KVH, s->hd, s->V, s->P,
             s->tied ? "true" : "false", window);
}

static void write_llama(const lspec *s, const char *dir)
{
    tmodel m = {0};
    build_llama(&m, s);
    char cfg[1024];
    llama_config(cfg, sizeof cfg, s);
    tm_write(&m, dir, cfg);
    tm_free(&m);
}

static void random_tokens(int32_t *tok, size_t n, int V, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = seed + i;
        tok[i] = (int32_t)(pe_k_splitmix64(&x) % (uint64_t)V);
    }
}

/* GQA: kv_heads 2 of 4 query heads equals 4 KV heads whose weights repeat each KV head for
 * its two query heads (repeat_kv), biases included. */
static void test_gqa_equals_repeated_heads(void **state)
{
    (void)state;
    char a[600], b[600];
    tu_temp_path(a, sizeof a, "ref_gqa");
    tu_temp_path(b, sizeof b, "ref_mha");
    lspec s = {"Qwen2ForCausalLM", 32, 4, 2, 8, 24, 40, 2, 16, 1, 0, 0, 3};
    write_llama(&s, a);
    tmodel m = {0};
    build_llama(&m, &s);
    lspec s4 = s;
    s4.KVH = 4;
    for (int l = 0; l < s.L; l++)
        for (int kv = 0; kv < 2; kv++) {
            const char *p = kv ? "v" : "k";
            char wn[96], bn[96];
            snprintf(wn, sizeof wn, "model.layers.%d.self_attn.%s_proj.weight", l, p);
            snprintf(bn, sizeof bn, "model.layers.%d.self_attn.%s_proj.bias", l, p);
            const float *w2 = tm_get(&m, "%s", wn), *b2 = tm_get(&m, "%s", bn);
            float *w4 = malloc(4 * 8 * 32 * sizeof *w4), *b4 = malloc(4 * 8 * sizeof *b4);
            for (int h = 0; h < 4; h++) { /* KV head h of 4 is head h / 2 of 2 */
                memcpy(w4 + h * 8 * 32, w2 + (h / 2) * 8 * 32, 8 * 32 * sizeof *w4);
                memcpy(b4 + h * 8, b2 + (h / 2) * 8, 8 * sizeof *b4);
            }
            tm_drop(&m, wn);
            tm_drop(&m, bn);
            memcpy(tm_add(&m, 32, 32, "%s", wn), w4, 4 * 8 * 32 * sizeof *w4);
            memcpy(tm_add(&m, 32, 0, "%s", bn), b4, 4 * 8 * sizeof *b4);
            free(w4);
            free(b4);
        }
    char cfg[1024];
    llama_config(cfg, sizeof cfg, &s4);
    tm_write(&m, b, cfg);
    tm_free(&m);
    int32_t tok[12];
    random_tokens(tok, 12, s.V, 9);
    double *x = run(a, PE_DTYPE_FP32, tok, 12), *y = run(b, PE_DTYPE_FP32, tok, 12);
    assert_true(max_abs_diff(x, y, 12 * 40) <= 1e-12);
    free(x);
    free(y);
    rm_tree(a);
    rm_tree(b);
}

/* A zero attention output projection: the logits at a position depend on its token (and,
 * for GPT-2, its position) only, whatever came before; with the projection, they do not. */
static void test_attention_free_positions(void **state)
{
    (void)state;
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_noattn");
    lspec s = {"LlamaForCausalLM", 16, 2, 1, 8, 12, 20, 2, 16, 0, 1, 0, 4};
    int32_t t1[8] = {3, 7, 1, 9, 9, 2, 5, 11}, t2[8] = {4, 0, 13, 2, 9, 6, 19, 11};
    for (int zero = 0; zero < 2; zero++) {
        tmodel m = {0};
        build_llama(&m, &s);
        for (int l = 0; zero && l < s.L; l++)
            memset(tm_get(&m, "model.layers.%d.self_attn.o_proj.weight", l), 0,
                   16 * 16 * sizeof(float));
        char cfg[1024];
        llama_config(cfg, sizeof cfg, &s);
        tm_write(&m, dir, cfg);
        tm_free(&m);
        double *a = run(dir, PE_DTYPE_FP32, t1, 8), *b = run(dir, PE_DTYPE_FP32, t2, 8);
        /* positions 4 and 7 hold the same token in both */
        double d4 = max_abs_diff(a + 4 * 20, b + 4 * 20, 20), d7 = max_abs_diff(a + 7 * 20,
                                                                                  b + 7 * 20, 20);
        if (zero)
            assert_true(d4 == 0.0 && d7 == 0.0);
        else
            assert_true(d4 > 1e-6 && d7 > 1e-6);
        free(a);
        free(b);
    }

    /* GPT-2 through the generator: c_proj weights and biases zeroed */
    pe_gen_spec sp;
    assert_int_equal(pe_gen_init(&sp, PE_GEN_GPT2, "tiny"), PE_OK);
    sp.vocab = 20;
    sp.bos_token_id = sp.eos_token_id = 19;
    sp.qk_std = 0.5;
    sp.bias_std = 0.1;
    for (int zero = 0; zero < 2; zero++) {
        assert_int_equal(pe_gen_write(&sp, dir), PE_OK);
        if (zero) { /* the checkpoint again, with the attention projections zeroed */
            tmodel m = {0};
            load_tm(dir, &m);
            for (int l = 0; l < sp.layers; l++) {
                memset(tm_get(&m, "transformer.h.%d.attn.c_proj.weight", l), 0,
                       64 * 64 * sizeof(float));
                memset(tm_get(&m, "transformer.h.%d.attn.c_proj.bias", l), 0, 64 * sizeof(float));
            }
            char cfg[1024];
            snprintf(cfg, sizeof cfg,
                     "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 64, "
                     "\"n_layer\": 2, \"n_head\": 4, \"n_positions\": 128, "
                     "\"vocab_size\": 20}");
            tm_write(&m, dir, cfg);
            tm_free(&m);
        }
        double *a = run(dir, PE_DTYPE_FP32, t1, 8), *b = run(dir, PE_DTYPE_FP32, t2, 8);
        double d4 = max_abs_diff(a + 4 * 20, b + 4 * 20, 20);
        if (zero)
            assert_true(d4 == 0.0);
        else
            assert_true(d4 > 1e-6);
        free(a);
        free(b);
    }
    rm_tree(dir);
}

/* Causality: the logits at positions < 6 do not change when the tokens from 6 on do. */
static void test_causal(void **state)
{
    (void)state;
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_causal");
    for (int arch = PE_GEN_GPT2; arch <= PE_GEN_QWEN2; arch++) {
        pe_gen_spec sp;
        assert_int_equal(pe_gen_init(&sp, (pe_gen_arch)arch, "tiny"), PE_OK);
        sp.qk_std = 0.3;
        sp.bias_std = 0.05;
        sp.norm_std = 0.1;
        if (arch == PE_GEN_MISTRAL)
            sp.sliding_window = 4;
        assert_int_equal(pe_gen_write(&sp, dir), PE_OK);
        int32_t a[12], b[12];
        random_tokens(a, 12, 256, 1);
        memcpy(b, a, sizeof a);
        for (int i = 6; i < 12; i++)
            b[i] = (a[i] + 17) % 256;
        double *x = run(dir, PE_DTYPE_FP32, a, 12), *y = run(dir, PE_DTYPE_FP32, b, 12);
        assert_true(max_abs_diff(x, y, 6 * 256) == 0.0);
        assert_true(max_abs_diff(x + 6 * 256, y + 6 * 256, 256) > 1e-6);
        free(x);
        free(y);
        /* and the prefix alone gives the same logits as the longer sequence */
        double *p = run(dir, PE_DTYPE_FP32, a, 6);
        assert_true(max_abs_diff(x = run(dir, PE_DTYPE_FP32, a, 12), p, 6 * 256) == 0.0);
        free(x);
        free(p);
    }
    rm_tree(dir);
}

/* Mistral's window: with one layer, the query at t sees t - w + 1 .. t only; a window wider
 * than the sequence is plain causal attention, and Llama's own logits. */
static void test_sliding_window(void **state)
{
    (void)state;
    char dir[600], llama[600];
    tu_temp_path(dir, sizeof dir, "ref_window");
    tu_temp_path(llama, sizeof llama, "ref_window_llama");
    lspec s = {"MistralForCausalLM", 16, 2, 2, 8, 12, 20, 1, 32, 0, 1, 3, 5};
    write_llama(&s, dir);
    int32_t a[10], b[10], c[10];
    random_tokens(a, 10, 20, 2);
    memcpy(b, a, sizeof a);
    memcpy(c, a, sizeof a);
    b[5] = (a[5] + 1) % 20; /* 3 before position 8: outside its window */
    c[6] = (a[6] + 1) % 20; /* 2 before: inside */
    double *x = run(dir, PE_DTYPE_FP32, a, 10), *y = run(dir, PE_DTYPE_FP32, b, 10),
           *z = run(dir, PE_DTYPE_FP32, c, 10);
    assert_true(max_abs_diff(x + 8 * 20, y + 8 * 20, 20) == 0.0);
    assert_true(max_abs_diff(x + 7 * 20, y + 7 * 20, 20) > 1e-6); /* position 7 sees 5 */
    assert_true(max_abs_diff(x + 8 * 20, z + 8 * 20, 20) > 1e-6);
    free(x);
    free(y);
    free(z);

    s.window = 10; /* covers the whole sequence */
    write_llama(&s, dir);
    s.arch = "LlamaForCausalLM";
    s.window = 0;
    write_llama(&s, llama);
    x = run(dir, PE_DTYPE_FP32, a, 10);
    y = run(llama, PE_DTYPE_FP32, a, 10);
    assert_true(max_abs_diff(x, y, 10 * 20) == 0.0);
    free(x);
    free(y);
    rm_tree(dir);
    rm_tree(llama);
}

/* An untied head holding a copy of the embedding equals the tied head. */
static void test_tied_head(void **state)
{
    (void)state;
    char a[600], b[600];
    tu_temp_path(a, sizeof a, "ref_tied");
    tu_temp_path(b, sizeof b, "ref_untied");
    lspec s = {"LlamaForCausalLM", 16, 2, 2, 8, 12, 20, 1, 32, 0, 1, 0, 6};
    write_llama(&s, a);
    tmodel m = {0};
    build_llama(&m, &s);
    memcpy(tm_add(&m, 20, 16, "lm_head.weight"), tm_get(&m, "model.embed_tokens.weight"),
           20 * 16 * sizeof(float));
    s.tied = 0;
    char cfg[1024];
    llama_config(cfg, sizeof cfg, &s);
    tm_write(&m, b, cfg);
    tm_free(&m);
    int32_t tok[5] = {1, 2, 3, 4, 5};
    double *x = run(a, PE_DTYPE_FP32, tok, 5), *y = run(b, PE_DTYPE_FP32, tok, 5);
    assert_true(max_abs_diff(x, y, 5 * 20) == 0.0);
    free(x);
    free(y);
    /* the untied model without its lm_head is refused, naming it */
    tm_free(&m);
    build_llama(&m, &s);
    tm_drop(&m, "lm_head.weight");
    tm_write(&m, b, cfg);
    tm_free(&m);
    pe_ref_model *r = NULL;
    assert_int_equal(pe_ref_open(b, PE_DTYPE_FP32, &r), PE_EFORMAT);
    assert_null(r);
    assert_non_null(strstr(pe_last_error(), "'lm_head.weight'"));
    rm_tree(a);
    rm_tree(b);
}

/* Divides the q columns of layer l's c_attn (weight [64, 192] and bias) of a tiny GPT-2. */
static void scale_q(tmodel *m, int l, double div)
{
    float *w = tm_get(m, "transformer.h.%d.attn.c_attn.weight", l);
    float *b = tm_get(m, "transformer.h.%d.attn.c_attn.bias", l);
    for (size_t col = 0; col < 64; col++) {
        for (size_t row = 0; row < 64; row++)
            w[row * 192 + col] = (float)(w[row * 192 + col] / div);
        b[col] = (float)(b[col] / div);
    }
}

static void gpt2_tiny_config(char *buf, size_t len, const char *extra)
{
    snprintf(buf, len,
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 64, \"n_layer\": 2, "
             "\"n_head\": 4, \"n_positions\": 128, \"vocab_size\": 256, %s}",
             extra);
}

/* GPT-2's scale flags: scale_attn_weights false with q / sqrt(hd) = q / 4 gives the default's
 * logits; scale_attn_by_inverse_layer_idx gives those of layer l's q divided by l + 1
 * (powers of two: exact). */
static void test_gpt2_scale_flags(void **state)
{
    (void)state;
    char orig[600], dir[600], cfg[1024];
    tu_temp_path(orig, sizeof orig, "ref_scale_orig");
    tu_temp_path(dir, sizeof dir, "ref_scale");
    pe_gen_spec sp;
    assert_int_equal(pe_gen_init(&sp, PE_GEN_GPT2, "tiny"), PE_OK);
    sp.qk_std = 0.4;
    sp.bias_std = 0.1;
    assert_int_equal(pe_gen_write(&sp, orig), PE_OK);
    int32_t tok[7];
    random_tokens(tok, 7, 256, 3);
    double *base = run(orig, PE_DTYPE_FP32, tok, 7);

    tmodel m = {0};
    load_tm(orig, &m);
    scale_q(&m, 0, 4);
    scale_q(&m, 1, 4);
    gpt2_tiny_config(cfg, sizeof cfg, "\"scale_attn_weights\": false");
    tm_write(&m, dir, cfg);
    tm_free(&m);
    double *x = run(dir, PE_DTYPE_FP32, tok, 7);
    assert_true(max_abs_diff(x, base, 7 * 256) <= 1e-12);
    free(x);

    load_tm(orig, &m);
    gpt2_tiny_config(cfg, sizeof cfg, "\"scale_attn_by_inverse_layer_idx\": true");
    tm_write(&m, dir, cfg);
    double *flagged = run(dir, PE_DTYPE_FP32, tok, 7);
    assert_true(max_abs_diff(flagged, base, 7 * 256) > 1e-6);
    scale_q(&m, 1, 2);
    gpt2_tiny_config(cfg, sizeof cfg, "\"scale_attn_by_inverse_layer_idx\": false");
    tm_write(&m, dir, cfg);
    tm_free(&m);
    x = run(dir, PE_DTYPE_FP32, tok, 7);
    assert_true(max_abs_diff(flagged, x, 7 * 256) <= 1e-12);
    free(x);
    free(flagged);
    free(base);
    rm_tree(orig);
    rm_tree(dir);
}

/* ---- checkpoint layouts and dtypes ---------------------------------------------------------- */

/* The same numbers in other files give the same logits: sharded, GPT-2's names without
 * "transformer." with the old buffers; and the bf16 emulation rounds f32 weights exactly as
 * a bf16 checkpoint holds them. */
static void test_layouts_and_bf16(void **state)
{
    (void)state;
    char a[600], b[600];
    tu_temp_path(a, sizeof a, "ref_lay_a");
    tu_temp_path(b, sizeof b, "ref_lay_b");
    int32_t tok[9];
    random_tokens(tok, 9, 256, 4);
    for (int arch = PE_GEN_GPT2; arch <= PE_GEN_LLAMA; arch++) {
        pe_gen_spec sp;
        assert_int_equal(pe_gen_init(&sp, (pe_gen_arch)arch, "tiny"), PE_OK);
        sp.qk_std = 0.3;
        assert_int_equal(pe_gen_write(&sp, a), PE_OK);
        sp.shards = 4;
        if (arch == PE_GEN_GPT2)
            sp.gpt2_no_prefix = sp.gpt2_old_buffers = 1;
        assert_int_equal(pe_gen_write(&sp, b), PE_OK);
        double *x = run(a, PE_DTYPE_FP32, tok, 9), *y = run(b, PE_DTYPE_FP32, tok, 9);
        assert_true(max_abs_diff(x, y, 9 * 256) == 0.0);
        free(y);
        /* bf16: an f32 checkpoint under the emulation equals the bf16 checkpoint */
        sp.shards = 1;
        sp.gpt2_no_prefix = sp.gpt2_old_buffers = 0;
        sp.dtype = PE_DTYPE_BF16;
        assert_int_equal(pe_gen_write(&sp, b), PE_OK);
        double *e32 = run(a, PE_DTYPE_BF16, tok, 9), *e16 = run(b, PE_DTYPE_BF16, tok, 9);
        double *f16 = run(b, PE_DTYPE_FP32, tok, 9);
        assert_true(max_abs_diff(e32, e16, 9 * 256) == 0.0);
        /* the activations' rounding moves the logits, a little */
        double d = max_abs_diff(e16, f16, 9 * 256), scale = 0;
        for (size_t i = 0; i < 9 * 256; i++)
            scale = fmax(scale, fabs(f16[i]));
        assert_true(d > 1e-6 * scale && d < 5e-2 * scale);
        /* and the weights' rounding too: f32 against bf16 checkpoints in fp32 */
        assert_true(max_abs_diff(x, f16, 9 * 256) > 1e-6 * scale);
        free(x);
        free(e32);
        free(e16);
        free(f16);
    }
    rm_tree(a);
    rm_tree(b);
}

/* The 124m shape (hidden 768, vocab 50257, 1024 positions; 2 of its 12 layers to keep the
 * test short) runs a few tokens in both dtypes. */
static void test_124m_shape(void **state)
{
    (void)state;
    if (tu_small())
        skip();
    char dir[600];
    tu_temp_path(dir, sizeof dir, "ref_124m");
    pe_gen_spec sp;
    assert_int_equal(pe_gen_init(&sp, PE_GEN_GPT2, "124m"), PE_OK);
    sp.layers = 2;
    sp.dtype = PE_DTYPE_BF16;
    assert_int_equal(pe_gen_write(&sp, dir), PE_OK);
    int32_t tok[4] = {50256, 464, 3290, 318};
    for (int dt = 0; dt < 2; dt++) {
        pe_dtype d = dt ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
        pe_ref_model *m = open_ok(dir, d);
        assert_int_equal(pe_ref_vocab(m), 50257);
        assert_int_equal(pe_ref_context(m), 1024);
        double *lg = malloc(4 * 50257 * sizeof *lg), *p = malloc(2 * 50257 * sizeof *p);
        assert_int_equal(pe_ref_forward(m, tok, 4, lg), PE_OK);
        assert_int_equal(pe_ref_forward(m, tok, 2, p), PE_OK);
        for (size_t i = 0; i < 4 * 50257; i++)
            assert_true(isfinite(lg[i]));
        assert_true(max_abs_diff(lg, p, 2 * 50257) == 0.0);
        free(lg);
        free(p);
        pe_ref_close(m);
    }
    rm_tree(dir);
}

/* ---- errors ------------------------------------------------------------------------------------- */

static void expect_open_fails(const char *dir, const char *want)
{
    pe_ref_model *m = (pe_ref_model *)1;
    pe_status s = pe_ref_open(dir, PE_DTYPE_FP32, &m);
    if (s != PE_EFORMAT)
        print_error("expected a failure with \"%s\", got status %d (%s)\n", want, (int)s,
                    pe_last_error());
    assert_int_equal(s, PE_EFORMAT);
    assert_null(m);
    if (!strstr(pe_last_error(), want)) {
        print_error("message \"%s\" lacks \"%s\"\n", pe_last_error(), want);
        fail();
    }
}

static void test_errors(void **state)
{
    (void)state;
    char dir[600], p[700];
    tu_temp_path(dir, sizeof dir, "ref_err");
    lspec s = {"LlamaForCausalLM", 16, 2, 2, 8, 12, 20, 1, 32, 0, 1, 0, 7};
    tmodel m = {0};
    build_llama(&m, &s);
    char cfg[1024];
    llama_config(cfg, sizeof cfg, &s);
    tm_write(&m, dir, cfg);
    tm_free(&m);
    snprintf(p, sizeof p, "%s/config.json", dir);

    /* architectures the reference does not know */
    write_text(dir, "config.json", "{\"architectures\": [\"FalconForCausalLM\"]}");
    expect_open_fails(dir, "\"FalconForCausalLM\" is not supported");
    write_text(dir, "config.json", "{\"hidden_size\": 16}");
    expect_open_fails(dir, "architectures");
    /* a config the weights do not match, a missing tensor, an activation it does not read */
    s.C = 24;
    llama_config(cfg, sizeof cfg, &s);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, "'model.embed_tokens.weight' has shape [20, 16]");
    s.C = 16;
    s.L = 2;
    llama_config(cfg, sizeof cfg, &s);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, "'model.layers.1.input_layernorm.weight'");
    s.L = 1;
    llama_config(cfg, sizeof cfg, &s);
    memcpy(strstr(cfg, "\"silu\""), "\"gelu\"", 6);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, "hidden_act \"gelu\"");
    s.arch = "Qwen2ForCausalLM";
    llama_config(cfg, sizeof cfg, &s);
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, "'model.layers.0.self_attn.q_proj.bias'"); /* Qwen2 needs biases */
    cfg[strlen(cfg) - 1] = 0;
    strcat(cfg, ", \"use_sliding_window\": true}");
    write_text(dir, "config.json", cfg);
    expect_open_fails(dir, "use_sliding_window");

    /* bad forwards */
    s.arch = "LlamaForCausalLM";
    llama_config(cfg, sizeof cfg, &s);
    write_text(dir, "config.json", cfg);
    pe_ref_model *r = open_ok(dir, PE_DTYPE_FP32);
    double lg[40 * 20];
    int32_t tok[40] = {0};
    assert_int_equal(pe_ref_forward(r, tok, 33, lg), PE_EINVAL); /* 32 positions */
    assert_non_null(strstr(pe_last_error(), "32 positions"));
    tok[3] = 20;
    assert_int_equal(pe_ref_forward(r, tok, 5, lg), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "token 3 is 20"));
    tok[3] = -1;
    assert_int_equal(pe_ref_forward(r, tok, 5, lg), PE_EINVAL);
    assert_int_equal(pe_ref_forward(r, tok, 0, lg), PE_EINVAL);
    pe_ref_close(r);
    pe_ref_close(NULL);
    assert_int_equal(pe_ref_open(dir, (pe_dtype)5, &r), PE_EINVAL);

    /* a tensor of a dtype it does not read */
    rm_tree(dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_text(dir, "config.json",
               "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 4, \"n_layer\": 1, "
               "\"n_head\": 2, \"n_positions\": 3, \"vocab_size\": 3}");
    const char *hdr = "{\"transformer.wte.weight\":{\"dtype\":\"I32\",\"shape\":[3,4],"
                      "\"data_offsets\":[0,48]}}";
    unsigned char buf[8 + 256 + 48] = {0};
    size_t hl = strlen(hdr);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *fp = fopen(p, "wb");
    fwrite(buf, 1, 8 + hl + 48, fp);
    fclose(fp);
    expect_open_fails(dir, "dtype I32");
    rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_by_hand),
        cmocka_unit_test(test_llama_by_hand),
        cmocka_unit_test(test_llama_by_hand_bf16),
        cmocka_unit_test(test_qwen2_gqa_by_hand),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_rope_frequencies),
        cmocka_unit_test(test_gqa_equals_repeated_heads),
        cmocka_unit_test(test_attention_free_positions),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_tied_head),
        cmocka_unit_test(test_gpt2_scale_flags),
        cmocka_unit_test(test_layouts_and_bf16),
        cmocka_unit_test(test_124m_shape),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
