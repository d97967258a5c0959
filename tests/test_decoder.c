/* test_decoder.c: the decoders' logits on the host backend against the naive double
 * reference (pengine_tools.h, written from Hugging Face's modeling code, sharing no code
 * with the engine's forward), for every family and checkpoint variant; the KV cache
 * (one token per step) against a full recompute; bf16 against the reference's bf16
 * emulation.
 *
 * The models are tiny and "sharp" (test_models.h): each case first checks that its
 * reference logits move far more than the tolerance when the tokens before a position
 * change, so that a wrong mask, RoPE or window could not pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_models.h"

enum { NTOK = 40 };

typedef struct variant {
    const char *name;
    pe_gen_arch arch;
    void (*tweak)(pe_gen_spec *s);
} variant;

static void no_tweak(pe_gen_spec *s) { (void)s; }
static void gpt2_old_names(pe_gen_spec *s) { s->gpt2_no_prefix = 1, s->gpt2_old_buffers = 1; }
static void sharded(pe_gen_spec *s) { s->shards = 3; }
static void bf16_file(pe_gen_spec *s) { s->dtype = PE_DTYPE_BF16; }
static void window(pe_gen_spec *s) { s->sliding_window = 7; }
static void qwen_one_kv(pe_gen_spec *s) { s->kv_heads = 1, s->tie_embeddings = 1; }
static void head_dim(pe_gen_spec *s) { s->head_dim = 24; }
static void rope_llama3(pe_gen_spec *s)
{
    s->rope_scaling = PE_GEN_ROPE_LLAMA3, s->rope_factor = 8, s->rope_low_freq_factor = 1,
    s->rope_high_freq_factor = 4, s->rope_original_context = 32, s->rope_theta = 500000;
}
static void rope_linear(pe_gen_spec *s) { s->rope_scaling = PE_GEN_ROPE_LINEAR, s->rope_factor = 2; }
static void untied_mha(pe_gen_spec *s) { s->kv_heads = s->heads, s->tie_embeddings = 0; }

static const variant variants[] = {
    {"gpt2", PE_GEN_GPT2, no_tweak},
    {"gpt2 without prefix, old buffers", PE_GEN_GPT2, gpt2_old_names},
    {"gpt2 sharded", PE_GEN_GPT2, sharded},
    {"llama GQA", PE_GEN_LLAMA, no_tweak},
    {"llama MHA untied", PE_GEN_LLAMA, untied_mha},
    {"llama bf16 file", PE_GEN_LLAMA, bf16_file},
    {"llama head_dim 24", PE_GEN_LLAMA, head_dim},
    {"llama rope llama3", PE_GEN_LLAMA, rope_llama3},
    {"llama rope linear", PE_GEN_LLAMA, rope_linear},
    {"llama sharded", PE_GEN_LLAMA, sharded},
    {"mistral window 7", PE_GEN_MISTRAL, window},
    {"qwen2 biases, 1 KV head, tied", PE_GEN_QWEN2, qwen_one_kv},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

/* The reference's logits (n, V) of tokens. */
static double *ref_logits(const char *dir, pe_dtype dtype, const int32_t *tok, size_t n, int *V)
{
    pe_ref_model *m = NULL;
    if (pe_ref_open(dir, dtype, &m) != PE_OK)
        fail_msg("pe_ref_open %s: %s", dir, pe_last_error());
    *V = pe_ref_vocab(m);
    double *out = malloc(n * (size_t)*V * sizeof *out);
    assert_non_null(out);
    if (pe_ref_forward(m, tok, n, out) != PE_OK)
        fail_msg("pe_ref_forward: %s", pe_last_error());
    pe_ref_close(m);
    return out;
}

/* The case can fail: changing one token moves the reference logits of the positions after
 * it (within any sliding window: the next 6) by far more than the tolerance, through
 * attention alone (their own tokens do not change), so a wrong mask, RoPE or window could
 * not pass. */
static void assert_sharp(const char *dir, const int32_t *tok, size_t n, double tol)
{
    int V = 0;
    double *a = ref_logits(dir, PE_DTYPE_FP32, tok, n, &V);
    int32_t *t2 = malloc(n * sizeof *t2);
    memcpy(t2, tok, n * sizeof *t2);
    const size_t back = n > 8 ? n - 8 : 0;
    t2[back] = (t2[back] + 1) % V;
    double *b = ref_logits(dir, PE_DTYPE_FP32, t2, n, &V);
    double d = 0, scale = 0;
    for (size_t p = back + 1; p < n && p <= back + 6; p++)
        for (int v = 0; v < V; v++) {
            size_t k = p * (size_t)V + (size_t)v;
            d = fmax(d, fabs(a[k] - b[k]));
            scale = fmax(scale, fabs(a[k]));
        }
    if (!(d > 20 * tol * scale))
        fail_msg("%s: the model is not sharp enough to test the mask (%.3g vs scale %.3g)", dir,
                 d, scale);
    free(a);
    free(b);
    free(t2);
}

static void logits_match_the_reference_for_every_family_and_variant(void **state)
{
    (void)state;
    const size_t n = tu_size(NTOK, 12);
    for (size_t i = 0; i < NVARIANTS; i++) {
        if (tu_small() && i % 3) /* valgrind: a third of the variants */
            continue;
        const variant *vr = &variants[i];
        pe_gen_spec spec;
        tm_tiny(&spec, vr->arch, 100 + i);
        vr->tweak(&spec);
        char dir[512];
        tm_write(&spec, "decoder_model", dir, sizeof dir);
        int32_t tok[NTOK];
        tm_tokens(tok, n, spec.vocab, i);
        if (!tu_small())
            assert_sharp(dir, tok, n, 1e-4);
        int V = 0;
        double *ref = ref_logits(dir, PE_DTYPE_FP32, tok, n, &V);
        pe_engine *e = tm_engine(dir, 1, NULL);
        float *got = malloc(n * (size_t)V * sizeof *got);
        for (size_t k = 0; k < n * (size_t)V; k++)
            got[k] = NAN;
        assert_int_equal(pe_score(e, tok, n, 1, got), PE_OK);
        double d, scale;
        tm_diff(got, ref, n * (size_t)V, &d, &scale);
        printf("  %-34s max|logit - ref| = %.3g of max|ref| %.3g (%.2g)\n", vr->name, d, scale,
               d / scale);
        if (!(d <= 1e-4 * scale))
            fail_msg("%s: logits differ from the reference by %.3g (scale %.3g)", vr->name, d,
                     scale);
        pe_engine_destroy(e);
        free(got);
        free(ref);
        tm_remove(dir);
    }
}

/* Scoring with one token per step runs every position through the KV cache (64 decode
 * steps after the prompt); one chunk recomputes it all at once. */
static void kv_cache_decode_gives_the_full_recompute(void **state)
{
    (void)state;
    const pe_gen_arch archs[] = {PE_GEN_GPT2, PE_GEN_LLAMA, PE_GEN_MISTRAL};
    const size_t n = tu_size(16 + 64, 16 + 6);
    for (size_t i = 0; i < 3; i++) {
        pe_gen_spec spec;
        tm_tiny(&spec, archs[i], 200 + i);
        /* sharp enough that a wrong slot or position shows (checked below), not so sharp
         * that fp32's other summation order in a one-row GEMV against a many-row GEMM is
         * amplified past 1e-5 */
        spec.qk_std = 0.25;
        if (archs[i] == PE_GEN_MISTRAL)
            spec.sliding_window = 20;
        char dir[512];
        tm_write(&spec, "decoder_kv", dir, sizeof dir);
        int32_t *tok = malloc(n * sizeof *tok);
        tm_tokens(tok, n, spec.vocab, 7 + i);
        if (!tu_small())
            assert_sharp(dir, tok, n, 1e-5);
        pe_config one;
        pe_config_init(&one);
        one.max_step_tokens = 1; /* every position a decode step */
        pe_engine *inc = tm_engine(dir, 1, &one), *full = tm_engine(dir, 1, NULL);
        const size_t V = (size_t)spec.vocab;
        float *a = malloc(n * V * sizeof *a), *b = malloc(n * V * sizeof *b);
        assert_int_equal(pe_score(inc, tok, n, 1, a), PE_OK);
        assert_int_equal(pe_score(full, tok, n, 1, b), PE_OK);
        double scale = 0;
        for (size_t k = 0; k < n * V; k++)
            scale = fmax(scale, fabs((double)b[k]));
        double d = tu_max_abs_diff(a, b, n * V);
        printf("  arch %d: one token per step against one chunk: %.3g of %.3g\n", (int)archs[i],
               d, scale);
        assert_true(d <= 1e-5 * scale);
        pe_engine_destroy(inc);
        pe_engine_destroy(full);
        free(a);
        free(b);
        free(tok);
        tm_remove(dir);
    }
}

/* Greedy generation picks the argmax of the full recompute at every step, and its
 * logprobs are the recompute's log-softmax. */
static void greedy_generation_follows_the_recomputed_logits(void **state)
{
    (void)state;
    pe_gen_spec spec;
    tm_tiny(&spec, PE_GEN_LLAMA, 300);
    char dir[512];
    tm_write(&spec, "decoder_greedy", dir, sizeof dir);
    pe_engine *e = tm_engine(dir, 1, NULL);
    const int P = 9, G = (int)tu_size(48, 8);
    const size_t V = (size_t)spec.vocab;
    int32_t tok[9 + 48];
    tm_tokens(tok, (size_t)P, spec.vocab, 5);
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = tok;
    p.prompt_len = (size_t)P;
    p.max_tokens = G;
    p.ignore_eos = 1;
    p.logprobs = 3;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_OK);
    pe_token_event ev[48];
    int got = 0;
    pe_token_event x;
    while (pe_seq_wait(e, &x) == PE_OK) {
        assert_int_equal(x.seq, id);
        assert_int_equal(x.index, got);
        assert_int_equal(x.status, PE_OK);
        ev[got] = x;
        tok[P + got] = x.token;
        got++;
    }
    assert_int_equal(got, G);
    assert_int_equal(ev[G - 1].finish, PE_FINISH_LENGTH);
    float *lg = malloc((size_t)(P + G) * V * sizeof *lg);
    assert_int_equal(pe_score(e, tok, (size_t)(P + G), 1, lg), PE_OK);
    for (int k = 0; k < G; k++) {
        const float *row = lg + (size_t)(P - 1 + k) * V;
        size_t best = 0;
        double mx = row[0], s = 0;
        for (size_t v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        mx = row[best];
        for (size_t v = 0; v < V; v++)
            s += exp((double)row[v] - mx);
        double lse = mx + log(s);
        assert_int_equal(ev[k].token, (int32_t)best);
        assert_true(fabs(ev[k].logprob - ((double)row[best] - lse)) < 1e-4);
        assert_int_equal(ev[k].nlogprobs, 3);
        assert_int_equal(ev[k].top_tokens[0], (int32_t)best);
        for (int j = 1; j < 3; j++) /* sorted, and each the recompute's log-softmax */
            assert_true(ev[k].top_logprobs[j] <= ev[k].top_logprobs[j - 1]);
        for (int j = 0; j < 3; j++)
            assert_true(fabs(ev[k].top_logprobs[j] - ((double)row[ev[k].top_tokens[j]] - lse)) <
                        1e-4);
    }
    free(lg);
    pe_engine_destroy(e);
    tm_remove(dir);
}

/* bf16: the engine under --dtype bf16 against the reference's bf16 emulation (weights,
 * GEMM inputs and K/V rounded to bf16), and against fp32. */
static void bf16_logits_match_the_reference_emulation(void **state)
{
    (void)state;
    const pe_gen_arch archs[] = {PE_GEN_GPT2, PE_GEN_LLAMA};
    const size_t n = tu_size(24, 8);
    for (size_t i = 0; i < 2; i++) {
        pe_gen_spec spec;
        tm_tiny(&spec, archs[i], 400 + i);
        char dir[512];
        tm_write(&spec, "decoder_bf16", dir, sizeof dir);
        int32_t tok[24];
        tm_tokens(tok, n, spec.vocab, 11);
        int V = 0;
        double *ref16 = ref_logits(dir, PE_DTYPE_BF16, tok, n, &V);
        double *ref32 = ref_logits(dir, PE_DTYPE_FP32, tok, n, &V);
        pe_config cfg;
        pe_config_init(&cfg);
        cfg.dtype = PE_DTYPE_BF16;
        pe_engine *e = tm_engine(dir, 1, &cfg);
        float *got = malloc(n * (size_t)V * sizeof *got);
        assert_int_equal(pe_score(e, tok, n, 1, got), PE_OK);
        double d16, d32, scale;
        tm_diff(got, ref16, n * (size_t)V, &d16, &scale);
        tm_diff(got, ref32, n * (size_t)V, &d32, &scale);
        printf("  arch %d bf16: %.3g of %.3g from the bf16 emulation, %.3g from fp32\n",
               (int)archs[i], d16, scale, d32);
        /* one bf16 step is 2^-8 of a value; a GEMM input whose fp32 sum lands on the other
         * side of a rounding boundary moves by that much, so the emulation agrees to a few
         * steps; bf16 itself moves these sharp models far more (the emulation is not just
         * close to fp32, it is the same rounding) */
        assert_true(d16 <= 2e-2 * scale);
        assert_true(d16 < d32 / 10);
        pe_engine_destroy(e);
        free(got);
        free(ref16);
        free(ref32);
        tm_remove(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(logits_match_the_reference_for_every_family_and_variant),
        cmocka_unit_test(kv_cache_decode_gives_the_full_recompute),
        cmocka_unit_test(greedy_generation_follows_the_recomputed_logits),
        cmocka_unit_test(bf16_logits_match_the_reference_emulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
