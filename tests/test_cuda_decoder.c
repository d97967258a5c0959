/* test_cuda_decoder.c: the decoders on the CUDA backend against the host backend: logits of
 * every position (prefill, and one token per step through the KV cache), greedy tokens, and
 * the tokens of a fixed sampling seed; fp32 and bf16; GPT-2 and Llama; TP 2 and 4, PP 2 and
 * PP 2 x TP 2 on a repeated device (the same-GPU path) against one host device. Skips (exit 77)
 * where no CUDA device answers.
 *
 * Built twice, as test_cuda_modes is: on the real libraries (label cuda: a GPU machine),
 * and as test_cuda_decoder_fake on the fakes of tests/cuda_fake_*.c (CI): there the CUDA
 * backend's whole decoder path runs on the host (the ops' argument checks, the launchers'
 * pointers, the step's metadata on the "device"), with the fake launchers looping over the
 * same src/kernels math as the host (their GEMMs sum in double).
 *
 * Tolerances, relative to max |host logit|: fp32 1e-4 (cuBLAS, or the fakes' double sums,
 * against OpenBLAS's float sums: the host itself is ~1e-5 from a double reference on these
 * models); bf16 2e-2 (an order change flips a bf16 rounding by 2^-8, and flips add up). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test_models.h"

#define TOL_FP32 1e-4
#define TOL_BF16 2e-2

enum { NTOK = 40, NGEN = 16 };

/* tm_engine makes host engines; this one picks the backend, and a pp x tp grid on device 0
 * (the same-GPU path: the workers share the device). */
static pe_engine *open_grid(pe_backend_kind backend, const char *dir, pe_dtype dt,
                            int max_step_tokens, int pp, int tp)
{
    static const int dev0[4] = {0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = backend;
    cfg.ndevices = pp * tp;
    cfg.devices = dev0;
    cfg.dp = 1;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.dtype = dt;
    cfg.max_step_tokens = max_step_tokens;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK)
        fail_msg("engine on %s, pp=%d tp=%d: %s", backend == PE_BACKEND_CUDA ? "cuda" : "host",
                 pp, tp, pe_last_error());
    return e;
}

static pe_engine *open_engine(pe_backend_kind backend, const char *dir, pe_dtype dt,
                              int max_step_tokens)
{
    return open_grid(backend, dir, dt, max_step_tokens, 1, 1);
}

static void logits_match(pe_gen_arch arch, pe_dtype dt, int max_step_tokens)
{
    pe_gen_spec spec;
    tm_tiny(&spec, arch, 500 + (uint64_t)arch);
    char dir[512];
    tm_write(&spec, "cuda_decoder", dir, sizeof dir);
    int32_t tok[NTOK];
    tm_tokens(tok, NTOK, spec.vocab, 3);
    const size_t V = (size_t)spec.vocab;
    pe_engine *h = open_engine(PE_BACKEND_HOST, dir, dt, 512);
    pe_engine *g = open_engine(PE_BACKEND_CUDA, dir, dt, max_step_tokens);
    float *a = malloc(NTOK * V * sizeof *a), *b = malloc(NTOK * V * sizeof *b);
    for (size_t i = 0; i < NTOK * V; i++)
        b[i] = NAN;
    assert_int_equal(pe_score(h, tok, NTOK, 1, a), PE_OK);
    if (pe_score(g, tok, NTOK, 1, b) != PE_OK)
        fail_msg("pe_score on cuda: %s", pe_last_error());
    double scale = 0;
    for (size_t i = 0; i < NTOK * V; i++)
        scale = fmax(scale, fabs((double)a[i]));
    double d = tu_max_abs_diff(b, a, NTOK * V);
    double tol = dt == PE_DTYPE_BF16 ? TOL_BF16 : TOL_FP32;
    printf("  arch %d %s, %d tokens a step: max |cuda - host| %.3g of %.3g\n", (int)arch,
           dt == PE_DTYPE_BF16 ? "bf16" : "fp32", max_step_tokens, d, scale);
    assert_true(d <= tol * scale);
    pe_engine_destroy(h);
    pe_engine_destroy(g);
    free(a);
    free(b);
    tm_remove(dir);
}

static void prefill_logits_match_the_host(void **state)
{
    (void)state;
    logits_match(PE_GEN_GPT2, PE_DTYPE_FP32, 512);
    logits_match(PE_GEN_LLAMA, PE_DTYPE_FP32, 512);
    logits_match(PE_GEN_LLAMA, PE_DTYPE_BF16, 512);
    logits_match(PE_GEN_MISTRAL, PE_DTYPE_FP32, 512);
}

static void decode_logits_match_the_host(void **state)
{
    (void)state;
    logits_match(PE_GEN_GPT2, PE_DTYPE_FP32, 1); /* every position a decode step */
    logits_match(PE_GEN_LLAMA, PE_DTYPE_BF16, 1);
    logits_match(PE_GEN_LLAMA, PE_DTYPE_FP32, 7); /* chunks mixed with decodes */
}

/* The tokens of n sequences (prompts of different lengths) on engine e. */
static void generate(pe_engine *e, int n, const pe_sampling *s, int vocab,
                     int32_t out[][NGEN])
{
    for (int i = 0; i < n; i++) {
        int32_t prompt[24];
        size_t len = (size_t)(3 + 5 * i);
        tm_tokens(prompt, len, vocab, 40 + (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = len;
        p.max_tokens = NGEN;
        p.ignore_eos = 1;
        p.sampling = *s;
        p.sampling.seed = s->seed + (uint64_t)i;
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit: %s", pe_last_error());
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        assert_int_equal(ev.status, PE_OK);
        if (ev.token >= 0)
            out[(intptr_t)ev.user][ev.index] = ev.token;
    }
}

/* Greedy with the three penalties (each rank's ids penalized on the device before its
 * pick). */
#define PENALIZED                                                                              \
    {                                                                                          \
        .top_p = 1.0f, .repetition_penalty = 1.3f, .frequency_penalty = 0.5f,                 \
        .presence_penalty = 0.3f                                                               \
    }

/* Greedy, a fixed seed with temperature, top-k and top-p, and greedy with the penalties:
 * the same tokens on both backends (these sharp models keep their top logits apart; on a
 * GPU a draw landing within rounding of a boundary may still differ: at most one sequence
 * may). */
static void the_same_seed_gives_the_same_tokens_on_both_backends(void **state)
{
    (void)state;
    pe_gen_spec spec;
    tm_tiny(&spec, PE_GEN_LLAMA, 600);
    char dir[512];
    tm_write(&spec, "cuda_decoder_tokens", dir, sizeof dir);
    pe_engine *h = open_engine(PE_BACKEND_HOST, dir, PE_DTYPE_FP32, 512);
    pe_engine *g = open_engine(PE_BACKEND_CUDA, dir, PE_DTYPE_FP32, 512);
    enum { N = 4 };
    const pe_sampling modes[3] = {{.top_p = 1.0f},
                                  {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 9},
                                  PENALIZED};
    for (int m = 0; m < 3; m++) {
        int32_t a[N][NGEN], b[N][NGEN];
        memset(a, 0xff, sizeof a);
        memset(b, 0xff, sizeof b);
        generate(h, N, &modes[m], spec.vocab, a);
        generate(g, N, &modes[m], spec.vocab, b);
        int differ = 0;
        for (int i = 0; i < N; i++)
            differ += memcmp(a[i], b[i], sizeof a[i]) != 0;
#ifdef PE_CUDA_FAKE
        assert_int_equal(differ, 0);
#else
        assert_true(differ <= 1);
#endif
    }
    pe_engine_destroy(h);
    pe_engine_destroy(g);
    tm_remove(dir);
}

/* Grids on a repeated device against one host device: TP 2 and 4 (a vocab-parallel head with
 * a padded last shard, KV heads replicated at tp 4), PP 2 (the residual stream sent stage to
 * stage) and PP 2 x TP 2; logits at every position, greedy and seeded tokens. */
static void grids_on_a_repeated_device_match_the_host(void **state)
{
    (void)state;
    if (tu_small()) /* under valgrind: each step's collectives rendezvous on the fakes' host
                     * threads, which DRD runs for half an hour; test_decoder_grids checks the
                     * engine's grid paths under the tools, test_cuda_modes_fake the CUDA
                     * backend's collectives */
        return;
    for (int arch = 0; arch < 2; arch++) {
        pe_gen_spec spec;
        tm_tiny(&spec, arch ? PE_GEN_LLAMA : PE_GEN_GPT2, 700 + (uint64_t)arch);
        if (!arch) {
            spec.vocab = 255; /* not a multiple of tp */
            spec.bos_token_id = spec.eos_token_id = 254;
        }
        char dir[512];
        tm_write(&spec, "cuda_decoder_tp", dir, sizeof dir);
        const size_t V = (size_t)spec.vocab;
        int32_t tok[NTOK];
        tm_tokens(tok, NTOK, spec.vocab, 5);
        pe_engine *h = open_engine(PE_BACKEND_HOST, dir, PE_DTYPE_FP32, 512);
        float *a = malloc(NTOK * V * sizeof *a), *b = malloc(NTOK * V * sizeof *b);
        assert_int_equal(pe_score(h, tok, NTOK, 1, a), PE_OK);
        double scale = 0;
        for (size_t i = 0; i < NTOK * V; i++)
            scale = fmax(scale, fabs((double)a[i]));
        const pe_sampling modes[3] = {
            {.top_p = 1.0f}, {.temperature = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 9},
            PENALIZED};
        enum { N = 4 };
        int32_t want[3][N][NGEN];
        for (int m = 0; m < 3; m++)
            generate(h, N, &modes[m], spec.vocab, want[m]);
        static const int grids[][2] = {{1, 2}, {2, 2}, {1, 4}, {2, 1}}; /* pp, tp */
        for (int k = 0; k < 4; k++) {
            const int pp = grids[k][0], tp = grids[k][1];
            pe_engine *g = open_grid(PE_BACKEND_CUDA, dir, PE_DTYPE_FP32, 512, pp, tp);
            if (pe_score(g, tok, NTOK, 1, b) != PE_OK)
                fail_msg("pe_score on cuda pp=%d tp=%d: %s", pp, tp, pe_last_error());
            double d = tu_max_abs_diff(b, a, NTOK * V);
            printf("  arch %d, pp %d x tp %d on device 0: max |cuda - host| %.3g of %.3g\n",
                   arch, pp, tp, d, scale);
            assert_true(d <= TOL_FP32 * scale);
            for (int m = 0; m < 3; m++) {
                int32_t got[N][NGEN];
                memset(got, 0xff, sizeof got);
                generate(g, N, &modes[m], spec.vocab, got);
                int differ = 0;
                for (int i = 0; i < N; i++)
                    differ += memcmp(got[i], want[m][i], sizeof got[i]) != 0;
#ifdef PE_CUDA_FAKE
                assert_int_equal(differ, 0);
#else
                assert_true(differ <= 1);
#endif
            }
            pe_engine_destroy(g);
        }
        pe_engine_destroy(h);
        free(a);
        free(b);
        tm_remove(dir);
    }
}

#define EXIT_SKIPPED 77

int main(void)
{
    const be_ops *cuda = be_cuda_ops();
    int n = 0;
    pe_err err = {{0}};
    if (!cuda || cuda->device_count(&n, &err) != PE_OK || n < 1) {
        printf("test_cuda_decoder: skipped: no CUDA device (%s)\n",
               cuda ? err.msg : "pengine was built without CUDA");
        return EXIT_SKIPPED;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefill_logits_match_the_host),
        cmocka_unit_test(decode_logits_match_the_host),
        cmocka_unit_test(the_same_seed_gives_the_same_tokens_on_both_backends),
        cmocka_unit_test(grids_on_a_repeated_device_match_the_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
