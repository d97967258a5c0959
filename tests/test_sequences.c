/* test_sequences.c: the sequence API on the host backend: mixed batches give each sequence
 * what it gets alone (bit for bit where the backend is batch-invariant); KV paging (blocks
 * freed, a pool filled exactly, waiting and refusal); sampling (greedy, top-k 1, seeds,
 * the penalties against a reference, the softmax's distribution, the nucleus); 1,000
 * sequences from 4 threads each get all of their tokens and one final event; cancel; bad
 * parameters; a worker failing mid-decode; kept sequences (append, release); a prompt's own
 * logprobs (pe_score_logprobs) against pe_score's logits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/host/hb_amx.h"
#include "backend/host/hb_simd.h"
#include "engine/engine_testing.h"
#include "kernels/sample.h"
#include "test_generate.h"
#include "test_models.h"

static char llama_dir[512];
static pe_gen_spec llama_spec;

static int setup(void **state)
{
    (void)state;
    tm_tiny(&llama_spec, PE_GEN_LLAMA, 77);
    tm_write(&llama_spec, "seq_llama", llama_dir, sizeof llama_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tm_remove(llama_dir);
    return 0;
}

/* ---- collecting events ---------------------------------------------------------------- */

enum { MAXSEQ = 1100, MAXTOK = 64 };

typedef struct run {
    int ntok[MAXSEQ];             /* token events */
    int32_t tok[MAXSEQ][MAXTOK];
    float top[MAXSEQ][MAXTOK][5]; /* top logprobs */
    int finals[MAXSEQ];
    pe_finish finish[MAXSEQ];
    pe_status status[MAXSEQ];
} run;

static void record(run *r, const pe_token_event *ev, int slot)
{
    assert_true(slot >= 0 && slot < MAXSEQ);
    assert_int_equal(r->finals[slot], 0); /* nothing after the final event */
    if (ev->token >= 0) {
        assert_int_equal(ev->index, r->ntok[slot]);
        if (r->ntok[slot] < MAXTOK) {
            r->tok[slot][r->ntok[slot]] = ev->token;
            for (int j = 0; j < ev->nlogprobs && j < 5; j++)
                r->top[slot][r->ntok[slot]][j] = ev->top_logprobs[j];
        }
        r->ntok[slot]++;
    }
    if (ev->finish != PE_FINISH_NONE) {
        r->finals[slot]++;
        r->finish[slot] = ev->finish;
        r->status[slot] = ev->status;
    }
}

/* Waits for every outstanding event; the slot of a sequence is its user pointer. */
static void drain(pe_engine *e, run *r)
{
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK)
        record(r, &ev, (int)(intptr_t)ev.user);
}

/* A sequence of max_tokens ignoring EOS, with 5 logprobs, sampling s (NULL: greedy) and the
 * logit bias (nbias), in slot. */
static uint64_t submit_biased(pe_engine *e, const int32_t *prompt, size_t n, int max_tokens,
                              int slot, const pe_sampling *s, const pe_logit_bias *bias,
                              size_t nbias)
{
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = n;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    p.logprobs = 5;
    p.user = (void *)(intptr_t)slot;
    if (s)
        p.sampling = *s;
    p.logit_bias = bias;
    p.nlogit_bias = nbias;
    uint64_t id = 0;
    if (pe_seq_submit(e, &p, &id) != PE_OK)
        fail_msg("pe_seq_submit: %s", pe_last_error());
    return id;
}

static uint64_t submit(pe_engine *e, const int32_t *prompt, size_t n, int max_tokens, int slot,
                       const pe_sampling *s)
{
    return submit_biased(e, prompt, n, max_tokens, slot, s, NULL, 0);
}

/* ---- mixed batches --------------------------------------------------------------------- */

/* Each of 6 sequences gets in a mixed batch what it gets alone: the same tokens, and where
 * `exact` (a batch-invariant backend) the same logprobs bit for bit, else within 1e-4. The
 * steps take 16 tokens, so the prompts go in chunks cut at other places alone and together;
 * the longest reaches past 256 positions, attention's first span of keys (16 blocks of 16).
 * In dtype dt. */
static void mixed_batch_against_alone(pe_dtype dt, int exact)
{
    enum { N = 6, LONGEST = 290 };
    const size_t lens[N] = {1, 5, 17, 33, 3, LONGEST};
    const int G = (int)tu_size(12, 4);
    int32_t prompts[N][LONGEST];
    pe_gen_spec spec = llama_spec;
    spec.context = LONGEST + 16;
    char dir[512];
    tm_write(&spec, "seq_llama_long", dir, sizeof dir);
    for (int i = 0; i < N; i++)
        tm_tokens(prompts[i], lens[i], spec.vocab, 30 + i);
    static run alone, mixed;
    memset(&alone, 0, sizeof alone);
    memset(&mixed, 0, sizeof mixed);
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.max_step_tokens = 16; /* long prompts take several steps, beside the decodes */
    cfg.prefix_caching = 0;   /* together, the prompts are computed again */
    cfg.dtype = dt;
    pe_engine *e = tm_engine(dir, 1, &cfg);
    for (int i = 0; i < N; i++) { /* alone: one at a time */
        submit(e, prompts[i], lens[i], G, i, NULL);
        drain(e, &alone);
    }
    for (int i = 0; i < N; i++) /* together */
        submit(e, prompts[i], lens[i], G, i, NULL);
    drain(e, &mixed);
    for (int i = 0; i < N; i++) {
        assert_int_equal(mixed.ntok[i], G);
        assert_int_equal(mixed.finals[i], 1);
        assert_memory_equal(mixed.tok[i], alone.tok[i], (size_t)G * sizeof(int32_t));
        if (exact)
            assert_memory_equal(mixed.top[i], alone.top[i], (size_t)G * sizeof mixed.top[i][0]);
        for (int k = 0; k < G; k++)
            for (int j = 0; j < 5; j++)
                assert_true(fabsf(mixed.top[i][k][j] - alone.top[i][k][j]) < 1e-4f);
    }
    pe_engine_destroy(e);
    tm_remove(dir);
}

/* With each version of the vector loops this CPU runs (AVX-512, AVX2: batch-invariant) and
 * the portable one (OpenBLAS beyond 8 rows: within 1e-4). */
static void a_mixed_batch_gives_each_sequence_what_it_gets_alone(void **state)
{
    (void)state;
    const hb_simd *versions[3] = {hb_simd_avx512(), hb_simd_avx2(), hb_simd_portable()};
    for (int v = 0; v < 3; v++)
        if (versions[v]) {
            hb_simd_use(versions[v]); /* no engine runs now */
            mixed_batch_against_alone(PE_DTYPE_FP32, hb_simd_batch_invariant(versions[v]));
        }
    hb_simd_use(NULL);
}

/* bf16 weights on AMX tiles (hb_amx.h), where the CPU has them: the tile kernel takes every
 * step's rows, so a sequence's logprobs are bit for bit its own alone here too. */
static void a_mixed_bf16_batch_on_amx_gives_each_sequence_what_it_gets_alone(void **state)
{
    (void)state;
    if (!hb_amx_enabled())
        skip();
    mixed_batch_against_alone(PE_DTYPE_BF16, 1);
}

/* The engine says which host kernels run it: the vector loops' version, and the AMX tiles
 * for bf16 where they run (pe_engine_info.kernels). */
static void the_engine_names_its_host_kernels(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 2, NULL);
    pe_engine_info info;
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    char want[64];
    snprintf(want, sizeof want, "%s%s", hb_simd_get()->name,
             hb_amx_enabled() ? ", bf16 on AMX tiles" : "");
    assert_string_equal(info.kernels, want);
    pe_engine_destroy(e);
}

/* ---- paging --------------------------------------------------------------------------- */

/* A sequence of prompt 20 + 44 tokens needs 64 positions: 4 blocks of 16. */
static void ended_sequences_free_their_blocks_and_an_exact_pool_works(void **state)
{
    (void)state;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.kv_tokens = 64; /* exactly one such sequence */
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    pe_engine_info info;
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    assert_int_equal(info.kv_blocks, 4);
    assert_int_equal(info.kv_block_tokens, 16);
    int32_t prompt[20];
    tm_tokens(prompt, 20, llama_spec.vocab, 3);
    static run r;
    memset(&r, 0, sizeof r);
    const int rounds = (int)tu_size(5, 2);
    for (int i = 0; i < rounds; i++) /* each needs the whole pool: only freed blocks let it run */
        submit(e, prompt, 20, 44, i, NULL);
    drain(e, &r);
    for (int i = 0; i < rounds; i++) {
        assert_int_equal(r.ntok[i], 44);
        assert_int_equal(r.finals[i], 1);
        assert_int_equal(r.finish[i], PE_FINISH_LENGTH);
        assert_memory_equal(r.tok[i], r.tok[0], 44 * sizeof(int32_t)); /* same tokens each time */
    }
    /* one more stored position than the pool holds can never run: refused at submit (the
     * last generated token is never stored: 20 + 45 tokens store 64 positions) */
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = 20;
    p.max_tokens = 46;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "KV blocks"));
    pe_engine_destroy(e);
}

/* Three sequences, room for two: the third waits for a free pool, or is refused. */
static void a_full_pool_makes_a_new_sequence_wait_or_refuses_it(void **state)
{
    (void)state;
    for (int refuse = 0; refuse < 2; refuse++) {
        pe_config cfg;
        pe_config_init(&cfg);
        cfg.kv_tokens = 128; /* 8 blocks; each sequence needs 4 */
        cfg.kv_full = refuse ? PE_KV_REFUSE : PE_KV_WAIT;
        pe_engine *e = tm_engine(llama_dir, 1, &cfg);
        int32_t prompt[20];
        tm_tokens(prompt, 20, llama_spec.vocab, 4);
        static run r;
        memset(&r, 0, sizeof r);
        en_allow_steps(e, 0); /* all three reach the replica before a step can end one */
        for (int i = 0; i < 3; i++)
            submit(e, prompt, 20, 40, i, NULL);
        en_allow_steps(e, -1);
        /* the order of events: a waiting third sequence starts after a final event */
        int finals_seen = 0, third_started_after = -1;
        pe_token_event ev;
        while (pe_seq_wait(e, &ev) == PE_OK) {
            int slot = (int)(intptr_t)ev.user;
            if (slot == 2 && ev.token >= 0 && third_started_after < 0)
                third_started_after = finals_seen;
            if (ev.finish != PE_FINISH_NONE)
                finals_seen++;
            record(&r, &ev, slot);
        }
        for (int i = 0; i < 2; i++) {
            assert_int_equal(r.ntok[i], 40);
            assert_int_equal(r.finals[i], 1);
        }
        assert_int_equal(r.finals[2], 1);
        if (refuse) {
            assert_int_equal(r.ntok[2], 0);
            assert_int_equal(r.finish[2], PE_FINISH_ERROR);
            assert_int_equal(r.status[2], PE_EAGAIN);
        } else {
            assert_int_equal(r.ntok[2], 40);
            assert_true(third_started_after >= 1);
            assert_memory_equal(r.tok[2], r.tok[0], 40 * sizeof(int32_t));
        }
        pe_engine_destroy(e);
    }
}

/* pengine.h: pe_score takes blocks as sequences do, "PE_EAGAIN when the pool is full and
 * cfg.kv_full is PE_KV_REFUSE"; the message says so; with room again it scores. */
static void a_score_that_finds_the_pool_promised_is_refused_with_eagain(void **state)
{
    (void)state;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.kv_tokens = 128; /* 8 blocks */
    cfg.kv_full = PE_KV_REFUSE;
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    int32_t prompt[20];
    tm_tokens(prompt, 20, llama_spec.vocab, 6);
    static run r;
    memset(&r, 0, sizeof r);
    en_allow_steps(e, 0); /* the sequence waits, its 8 blocks spoken for */
    submit(e, prompt, 20, 100, 0, NULL);
    static float logits[4096];
    assert_true(llama_spec.vocab <= 4096);
    assert_int_equal(pe_score(e, prompt, 20, 0, logits), PE_EAGAIN);
    assert_non_null(strstr(pe_last_error(), "kv_full"));
    en_allow_steps(e, -1);
    drain(e, &r);
    assert_int_equal(r.ntok[0], 100);
    assert_int_equal(pe_score(e, prompt, 20, 0, logits), PE_OK);
    pe_engine_destroy(e);
}

/* ---- prompt logprobs ------------------------------------------------------------------- */

/* lp (n - 1) of prompt (n) against the log-softmax, in double, of pe_score's logits at every
 * position: each next token's logprob, and the k-th most likely's, within 1e-5; the k-th
 * token any whose logprob is that close to the k-th value. */
static void expect_log_softmax_of_the_logits(pe_engine *e, const int32_t *prompt, int n,
                                             const pe_logprobs *lp, int top)
{
    const int V = llama_spec.vocab;
    float *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(pe_score(e, prompt, (size_t)n, 1, lg), PE_OK);
    char why[TG_WHY];
    const int ok = tg_log_softmax_matches(lg, prompt, n, V, lp, top, 1e-5, 0, why);
    free(lg);
    if (!ok)
        fail_msg("%s", why);
}

/* pe_score_logprobs: each prompt token's logprob and the top 20 against the log-softmax of
 * pe_score's logits, with the prompt cut into many steps (4 logit rows a step); run again
 * beside 3 decoding sequences (their rows sample in the same steps), it gives the same (bit
 * for bit where the backend is batch-invariant) and so do they: the tokens and logprobs
 * they get alone. Its full blocks stay in the prefix cache for a sequence of the prompt. A
 * prompt of 1 token writes nothing; bad parameters are refused. */
static void prompt_logprobs_are_the_log_softmax_of_the_logits_beside_other_sequences(
    void **state)
{
    (void)state;
    enum { N = 50, NS = 3 };
    const int G = (int)tu_size(24, 6);
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.max_seqs = 4; /* 4 logit rows a step: the 49 positions take 13 steps */
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    int32_t prompt[N], seqs[NS][9];
    tm_tokens(prompt, N, llama_spec.vocab, 70);
    static pe_logprobs alone[N - 1], beside[N - 1];
    assert_int_equal(pe_score_logprobs(e, prompt, N, PE_MAX_LOGPROBS, alone), PE_OK);
    expect_log_softmax_of_the_logits(e, prompt, N, alone, PE_MAX_LOGPROBS);

    static run one, mixed;
    memset(&one, 0, sizeof one);
    memset(&mixed, 0, sizeof mixed);
    for (int i = 0; i < NS; i++) {
        tm_tokens(seqs[i], 9, llama_spec.vocab, 80 + i);
        submit(e, seqs[i], 9, G, i, NULL);
        drain(e, &one);
    }
    for (int i = 0; i < NS; i++)
        submit(e, seqs[i], 9, G, i, NULL);
    assert_int_equal(pe_score_logprobs(e, prompt, N, PE_MAX_LOGPROBS, beside), PE_OK);
    drain(e, &mixed);
    const int exact = hb_simd_batch_invariant(hb_simd_get());
    if (exact)
        assert_memory_equal(beside, alone, sizeof alone);
    expect_log_softmax_of_the_logits(e, prompt, N, beside, PE_MAX_LOGPROBS);
    for (int i = 0; i < NS; i++) {
        assert_int_equal(mixed.ntok[i], G);
        assert_memory_equal(mixed.tok[i], one.tok[i], (size_t)G * sizeof(int32_t));
        for (int k = 0; k < G; k++)
            for (int j = 0; j < 5; j++)
                assert_true(fabsf(mixed.top[i][k][j] - one.top[i][k][j]) < 1e-4f);
    }

    /* the scored prompt's full blocks stay in the prefix cache: a sequence of it finds the
     * 3 before its last token (48 positions) */
    pe_engine_info before, after;
    assert_int_equal(pe_engine_info_get(e, &before), PE_OK);
    memset(&one, 0, sizeof one);
    submit(e, prompt, N, 1, 0, NULL);
    drain(e, &one);
    for (int k = 0; k < 500; k++) { /* the replica publishes its counts between steps */
        assert_int_equal(pe_engine_info_get(e, &after), PE_OK);
        if (after.prefix_hit_tokens - before.prefix_hit_tokens >= 48)
            break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    assert_int_equal(after.prefix_hit_tokens - before.prefix_hit_tokens, 48);

    pe_logprobs none = {.token = -7};
    assert_int_equal(pe_score_logprobs(e, prompt, 1, 3, &none), PE_OK);
    assert_int_equal(none.token, -7); /* nothing written */
    assert_int_equal(pe_score_logprobs(e, prompt, N, 0, alone), PE_OK); /* no top list */
    assert_int_equal(alone[0].nlogprobs, 0);
    assert_true(fabsf(alone[5].logprob - beside[5].logprob) < 1e-5f);
    assert_int_equal(pe_score_logprobs(e, prompt, N, PE_MAX_LOGPROBS + 1, alone), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "most likely"));
    assert_int_equal(pe_score_logprobs(e, prompt, N, 1, NULL), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "pe_score_logprobs"));
    int32_t bad[2] = {1, (int32_t)llama_spec.vocab};
    assert_int_equal(pe_score_logprobs(e, bad, 2, 1, alone), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "vocab"));
    pe_engine_destroy(e);
}

/* ---- sampling -------------------------------------------------------------------------- */

static void generate(pe_engine *e, const int32_t *prompt, size_t n, int G, const pe_sampling *s,
                     int32_t *out)
{
    static run r;
    memset(&r, 0, sizeof r);
    submit(e, prompt, n, G, 0, s);
    drain(e, &r);
    assert_int_equal(r.ntok[0], G);
    memcpy(out, r.tok[0], (size_t)G * sizeof *out);
}

static void top_k_1_is_greedy_and_a_seed_repeats_its_tokens(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    int32_t prompt[7];
    tm_tokens(prompt, 7, llama_spec.vocab, 9);
    const int G = (int)tu_size(24, 6);
    int32_t greedy[24], k1[24], a[24], b[24], c[24];
    generate(e, prompt, 7, G, NULL, greedy);
    pe_sampling s = {.temperature = 1.5f, .top_k = 1, .top_p = 1.0f, .seed = 5};
    generate(e, prompt, 7, G, &s, k1);
    assert_memory_equal(greedy, k1, (size_t)G * sizeof(int32_t));
    s = (pe_sampling){.temperature = 1.0f, .top_k = 50, .top_p = 0.95f, .seed = 42};
    generate(e, prompt, 7, G, &s, a);
    generate(e, prompt, 7, G, &s, b);
    assert_memory_equal(a, b, (size_t)G * sizeof(int32_t));
    s.seed = 43;
    generate(e, prompt, 7, G, &s, c);
    assert_memory_not_equal(a, c, (size_t)G * sizeof(int32_t));
    pe_engine_destroy(e);
}

/* The next token by a reference: pe_score's logits of ctx (n tokens, the first np the
 * prompt), biased by bias (nbias) and penalized here from the counts of ctx's tokens as
 * pengine.h words it, then the largest (greedy) or sample.h's rule with draw number k of
 * s's seed. *margin: the gap between the two largest changed logits. */
static int32_t reference_token(pe_engine *e, const int32_t *ctx, int n, int np, int k,
                               const pe_sampling *s, const pe_logit_bias *bias, size_t nbias,
                               float *lg, float *margin)
{
    const int V = llama_spec.vocab;
    const float r = s->repetition_penalty > 0.0f ? s->repetition_penalty : 1.0f; /* 0: off */
    assert_int_equal(pe_score(e, ctx, (size_t)n, 0, lg), PE_OK);
    for (size_t i = 0; i < nbias; i++)
        lg[bias[i].token] += bias[i].bias;
    for (int v = 0; v < V; v++) {
        int generated = 0, in_prompt = 0;
        for (int i = 0; i < n; i++) {
            generated += i >= np && ctx[i] == v;
            in_prompt |= i < np && ctx[i] == v;
        }
        if (generated || in_prompt)
            lg[v] = lg[v] > 0.0f ? lg[v] / r : lg[v] * r;
        if (generated)
            lg[v] -= s->frequency_penalty * (float)generated + s->presence_penalty;
    }
    float a = -INFINITY, b = -INFINITY;
    for (int v = 0; v < V; v++)
        if (lg[v] > a)
            b = a, a = lg[v];
        else if (lg[v] > b)
            b = lg[v];
    *margin = a - b;
    float *w = malloc((size_t)V * sizeof *w), mass[256];
    uint32_t hist[256];
    pe_k_sampling p = {s->temperature, s->top_k, s->top_p, pe_k_uniform(s->seed, (uint64_t)k),
                       s->min_p};
    int32_t t = pe_k_sample_row(lg, V, p, w, hist, mass);
    free(w);
    return t;
}

/* The repetition, frequency and presence penalties, each alone, all three, and negative
 * ones, greedy and sampled, min-p sampling, and the logit bias alone and with the
 * penalties: every token is the
 * reference's (reference_token, which follows the engine's tokens), up to a near-tie where
 * the backend is not batch-invariant; with drafts (spec_tokens 4: each row's penalties
 * count the drafts before it) as without. */
static void penalties_against_the_reference(int spec_tokens)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.spec_tokens = spec_tokens;
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    const int V = llama_spec.vocab, G = (int)tu_size(24, 6), NP = 7;
    int32_t prompt[7], got[24], plain[24], ctx[7 + 24];
    tm_tokens(prompt, NP, V, 31);
    generate(e, prompt, NP, G, NULL, plain);
    const struct {
        pe_sampling s;
        pe_logit_bias bias[2];
        size_t nbias;
    } cases[] = {
        {{.top_p = 1.0f, .repetition_penalty = 1.8f}, {{0}}, 0},
        {{.top_p = 1.0f, .frequency_penalty = 0.9f}, {{0}}, 0},
        {{.top_p = 1.0f, .presence_penalty = 1.1f}, {{0}}, 0},
        {{.top_p = 1.0f, .repetition_penalty = 1.3f, .frequency_penalty = -0.5f,
          .presence_penalty = 0.7f}, {{0}}, 0},
        {{.top_p = 1.0f, .frequency_penalty = -2.0f}, {{0}}, 0}, /* repeats */
        {{.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 3,
          .repetition_penalty = 1.4f, .frequency_penalty = 0.6f, .presence_penalty = 0.3f},
         {{0}}, 0},
        {{.temperature = 1.1f, .top_p = 1.0f, .min_p = 0.3f, .seed = 4}, {{0}}, 0},
        /* plain's first token banned, another lifted */
        {{.top_p = 1.0f}, {{plain[0], -100.0f}, {5, 2.5f}}, 2},
        /* the same with the penalties: the biased tokens are counted ones too */
        {{.top_p = 1.0f, .repetition_penalty = 1.5f, .frequency_penalty = 0.8f},
         {{plain[0], -100.0f}, {prompt[2], 1.5f}}, 2},
    };
    const int exact = hb_simd_batch_invariant(hb_simd_get());
    float *lg = malloc((size_t)V * sizeof *lg);
    int changed = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        static run r;
        memset(&r, 0, sizeof r);
        submit_biased(e, prompt, NP, G, 0, &cases[c].s, cases[c].bias, cases[c].nbias);
        drain(e, &r);
        assert_int_equal(r.ntok[0], G);
        memcpy(got, r.tok[0], (size_t)G * sizeof *got);
        changed += memcmp(got, plain, (size_t)G * sizeof *got) != 0;
        memcpy(ctx, prompt, sizeof prompt);
        for (int k = 0; k < G; k++) {
            float margin;
            int32_t want = reference_token(e, ctx, NP + k, NP, k, &cases[c].s, cases[c].bias,
                                           cases[c].nbias, lg, &margin);
            if (got[k] != want) {
                if (!exact && margin <= 1e-4f)
                    break; /* another order of the same sums: the two part here */
                fail_msg("case %zu token %d: %d, the reference's %d (margin %g)", c, k, got[k],
                         want, (double)margin);
            }
            ctx[NP + k] = got[k];
        }
    }
    /* and they do change the tokens: every case here on this model in 24 tokens; in the 6
     * of a valgrind run, where repeats are few, the bias's bans (at the first token) */
    if (tu_small())
        assert_true(changed >= 2);
    else
        assert_int_equal(changed, (int)(sizeof cases / sizeof cases[0]));
    pe_engine_info info;
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    if (spec_tokens) {
        print_message("drafts: %ld of %ld accepted\n", info.spec_accepted_tokens,
                      info.spec_drafted_tokens);
        assert_true(info.spec_drafted_tokens > 0);
    }
    free(lg);
    pe_engine_destroy(e);
}

static void penalties_give_the_tokens_of_a_reference_on_pe_score(void **state)
{
    (void)state;
    penalties_against_the_reference(0);
}

/* (not under valgrind: the scheduler is the only part that differs, and test_scheduler runs
 * it there) */
static void penalties_give_the_reference_tokens_with_drafts_too(void **state)
{
    (void)state;
    if (tu_small())
        skip();
    penalties_against_the_reference(4);
}

/* min_tokens bans the eos and the stop tokens until that many are generated: with the
 * first two greedy tokens as stop ids, a sequence that would stop at once goes on, its
 * tokens a reference's on pe_score with those logits at -inf for its first min_tokens
 * tokens and as they are after, and it ends when the reference meets a stop or eos. */
static void min_tokens_hold_back_the_eos_and_the_stop_tokens(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    const int V = llama_spec.vocab, G = (int)tu_size(16, 6), NP = 7, M = 3;
    int32_t prompt[7], plain[16], ctx[7 + 16];
    tm_tokens(prompt, NP, V, 41);
    generate(e, prompt, NP, G, NULL, plain);
    const int32_t stop[2] = {plain[0], plain[1]}, eos = (int32_t)llama_spec.eos_token_id;
    static run r;
    for (int min_tokens = 0; min_tokens <= M; min_tokens += M) {
        memset(&r, 0, sizeof r);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = NP;
        p.max_tokens = G;
        p.min_tokens = min_tokens;
        p.stop = stop;
        p.nstop = 2;
        p.user = (void *)(intptr_t)0;
        uint64_t id;
        assert_int_equal(pe_seq_submit(e, &p, &id), PE_OK);
        drain(e, &r);
        assert_int_equal(r.finals[0], 1);
        if (min_tokens == 0) { /* plain's first token is a stop id: it ends there */
            assert_int_equal(r.ntok[0], 1);
            assert_int_equal(r.finish[0], PE_FINISH_STOP);
        }
    }
    const pe_sampling greedy = {.top_p = 1.0f};
    const pe_logit_bias ban[3] = {{stop[0], -INFINITY}, {stop[1], -INFINITY}, {eos, -INFINITY}};
    const size_t nban = stop[1] == stop[0] ? 1 : 2; /* each token once */
    pe_logit_bias bans[3];
    memcpy(bans, ban, nban * sizeof *bans);
    size_t nb = nban;
    if (eos != stop[0] && eos != stop[1] && eos >= 0)
        bans[nb++] = ban[2];
    const int exact = hb_simd_batch_invariant(hb_simd_get());
    float *lg = malloc((size_t)V * sizeof *lg), margin;
    memcpy(ctx, prompt, sizeof prompt);
    int k = 0;
    for (; k < G; k++) {
        int32_t want = reference_token(e, ctx, NP + k, NP, k, &greedy, bans, k < M ? nb : 0,
                                       lg, &margin);
        if (k >= r.ntok[0] || r.tok[0][k] != want) {
            if (!exact && margin <= 1e-4f)
                break; /* another order of the same sums: the two part here */
            fail_msg("token %d: %d (of %d), the reference's %d", k,
                     k < r.ntok[0] ? r.tok[0][k] : -1, r.ntok[0], want);
        }
        ctx[NP + k] = want;
        const int ends = want == stop[0] || want == stop[1] || want == eos;
        assert_true(k >= M || !ends); /* banned before M */
        if (ends) {
            assert_int_equal(r.ntok[0], k + 1);
            assert_int_equal(r.finish[0], want == eos ? PE_FINISH_EOS : PE_FINISH_STOP);
            break;
        }
    }
    if (k == G)
        assert_int_equal(r.finish[0], PE_FINISH_LENGTH);
    assert_int_not_equal(r.tok[0][0], plain[0]);
    free(lg);
    pe_engine_destroy(e);
}

/* The 0.999 quantile of chi-square with k degrees of freedom (Wilson-Hilferty). */
static double chi2_999(int k)
{
    double z = 3.0902, h = 2.0 / (9.0 * k);
    double c = 1 - h + z * sqrt(h);
    return k * c * c * c;
}

/* 10,000 first tokens at temperature T from seeds 0..9999 follow softmax(logits / T). */
static void temperature_sampling_follows_the_softmax(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    const int V = llama_spec.vocab, N = (int)tu_size(10000, 400);
    const float T = 0.7f;
    int32_t prompt[5];
    tm_tokens(prompt, 5, V, 12);
    float *lg = malloc((size_t)V * sizeof *lg);
    assert_int_equal(pe_score(e, prompt, 5, 0, lg), PE_OK);
    double *p = calloc((size_t)V, sizeof *p), z = 0, mx = -INFINITY;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, lg[v]);
    for (int v = 0; v < V; v++)
        z += p[v] = exp(((double)lg[v] - mx) / T);
    long *count = calloc((size_t)V, sizeof *count);
    static run r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        pe_sampling s = {.temperature = T, .top_p = 1.0f, .seed = (uint64_t)i};
        pe_seq_params q;
        pe_seq_params_init(&q);
        q.prompt = prompt;
        q.prompt_len = 5;
        q.max_tokens = 1;
        q.sampling = s;
        uint64_t id;
        assert_int_equal(pe_seq_submit(e, &q, &id), PE_OK);
    }
    pe_token_event ev;
    int got = 0;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        assert_true(ev.token >= 0 && ev.token < V);
        count[ev.token]++;
        got++;
    }
    assert_int_equal(got, N);
    /* chi-square over bins of expected count >= 5 (the rare tokens pooled into one) */
    double chi = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int v = 0; v < V; v++) {
        double ex = N * p[v] / z;
        if (ex >= 5) {
            chi += (count[v] - ex) * (count[v] - ex) / ex;
            bins++;
        } else {
            pool_e += ex;
            pool_o += (double)count[v];
        }
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    printf("  chi-square %.1f over %d bins (0.999 quantile %.1f)\n", chi, bins, chi2_999(bins - 1));
    assert_true(bins >= 2);
    assert_true(chi < chi2_999(bins - 1));
    free(lg);
    free(p);
    free(count);
    pe_engine_destroy(e);
}

/* Every token sampled with top_p = 0.5 lies in the smallest set of tokens holding half of
 * the probability (computed here from the scored logits). */
static void top_p_keeps_the_nucleus(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    const int V = llama_spec.vocab, N = (int)tu_size(600, 60);
    int32_t prompt[6];
    tm_tokens(prompt, 6, V, 13);
    float *lg = malloc((size_t)V * sizeof *lg);
    assert_int_equal(pe_score(e, prompt, 6, 0, lg), PE_OK);
    /* the nucleus: tokens by probability, until half the mass */
    int *order = malloc((size_t)V * sizeof *order);
    for (int v = 0; v < V; v++)
        order[v] = v;
    for (int i = 0; i < V; i++) /* selection sort: V is small */
        for (int j = i + 1; j < V; j++)
            if (lg[order[j]] > lg[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    double z = 0, acc = 0;
    for (int v = 0; v < V; v++)
        z += exp((double)lg[v] - lg[order[0]]);
    char *in = calloc((size_t)V, 1);
    int size = 0;
    for (int i = 0; i < V && acc < 0.5 * z; i++, size++) {
        in[order[i]] = 1;
        acc += exp((double)lg[order[i]] - lg[order[0]]);
    }
    assert_true(size >= 2); /* else the test says little */
    int seen_outside = 0, distinct = 0;
    char *seen = calloc((size_t)V, 1);
    for (int i = 0; i < N; i++) {
        pe_seq_params q;
        pe_seq_params_init(&q);
        q.prompt = prompt;
        q.prompt_len = 6;
        q.max_tokens = 1;
        q.sampling = (pe_sampling){.temperature = 1.0f, .top_p = 0.5f, .seed = (uint64_t)i};
        uint64_t id;
        assert_int_equal(pe_seq_submit(e, &q, &id), PE_OK);
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        seen_outside += !in[ev.token];
        distinct += !seen[ev.token];
        seen[ev.token] = 1;
    }
    assert_int_equal(seen_outside, 0);
    assert_true(distinct >= 2); /* it did sample, not only the top token */
    free(lg);
    free(order);
    free(in);
    free(seen);
    pe_engine_destroy(e);
}

/* ---- through the API, from threads ------------------------------------------------------ */

typedef struct submitter {
    pe_engine *e;
    int first, count;
} submitter;

static void *submit_many(void *arg)
{
    submitter *s = arg;
    for (int i = s->first; i < s->first + s->count; i++) {
        int32_t prompt[8];
        tm_tokens(prompt, (size_t)(1 + i % 8), llama_spec.vocab, (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = (size_t)(1 + i % 8);
        p.max_tokens = 1 + i % 5;
        p.ignore_eos = 1;
        p.sampling.temperature = (i % 3) ? 0.9f : 0.0f;
        p.sampling.seed = (uint64_t)i;
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(s->e, &p, &id) != PE_OK)
            return (void *)1;
    }
    return NULL;
}

static void a_thousand_sequences_from_four_threads_each_end_once(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    const int per = (int)tu_size(250, 10), N = 4 * per;
    static run r;
    memset(&r, 0, sizeof r);
    pthread_t th[4];
    submitter sub[4];
    for (int t = 0; t < 4; t++) {
        sub[t] = (submitter){e, t * per, per};
        assert_int_equal(pthread_create(&th[t], NULL, submit_many, &sub[t]), 0);
    }
    /* events are taken while the submitters run */
    int finals = 0;
    pe_token_event ev;
    while (finals < N) {
        pe_status s = pe_seq_wait(e, &ev);
        if (s == PE_EAGAIN) /* nothing outstanding yet: the submitters are behind */
            continue;
        assert_int_equal(s, PE_OK);
        record(&r, &ev, (int)(intptr_t)ev.user);
        finals += ev.finish != PE_FINISH_NONE;
    }
    for (int t = 0; t < 4; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    assert_int_equal(pe_seq_poll(e, &ev), PE_EAGAIN);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r.finals[i], 1);
        assert_int_equal(r.ntok[i], 1 + i % 5);
        assert_int_equal(r.finish[i], PE_FINISH_LENGTH);
    }
    pe_engine_destroy(e);
}

/* ---- cancel ------------------------------------------------------------------------------- */

static void cancel_ends_a_sequence_once_mid_way(void **state)
{
    (void)state;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.kv_tokens = 96; /* one long sequence (6 blocks); a second must wait */
    cfg.kv_full = PE_KV_WAIT; /* (on promises: preemption would start it) */
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    int32_t prompt[4];
    tm_tokens(prompt, 4, llama_spec.vocab, 21);
    static run r;
    memset(&r, 0, sizeof r);
    en_allow_steps(e, 3); /* a's prefill and 2 decodes: a is mid-way after its 3rd token */
    uint64_t a = submit(e, prompt, 4, 90, 0, NULL);
    uint64_t b = submit(e, prompt, 4, 90, 1, NULL); /* waits for a's blocks */
    pe_token_event ev;
    int a_tokens = 0;
    while (a_tokens < 3 && pe_seq_wait(e, &ev) == PE_OK) {
        record(&r, &ev, (int)(intptr_t)ev.user);
        a_tokens += (int)(intptr_t)ev.user == 0;
    }
    assert_int_equal(pe_seq_cancel(e, b), PE_OK); /* the waiting one */
    assert_int_equal(pe_seq_cancel(e, a), PE_OK); /* the running one */
    drain(e, &r);
    en_allow_steps(e, -1);
    assert_int_equal(r.finals[0], 1);
    assert_int_equal(r.finish[0], PE_FINISH_CANCELLED);
    assert_int_equal(r.ntok[0], 3);
    assert_int_equal(r.finals[1], 1);
    assert_int_equal(r.finish[1], PE_FINISH_CANCELLED);
    assert_int_equal(r.ntok[1], 0);
    /* an ended id: fine, nothing more; an id never given: PE_EINVAL */
    assert_int_equal(pe_seq_cancel(e, a), PE_OK);
    assert_int_equal(pe_seq_poll(e, &ev), PE_EAGAIN);
    assert_int_equal(pe_seq_cancel(e, 1000000), PE_EINVAL);
    /* the pool is whole again: a sequence that needs all of it runs */
    submit(e, prompt, 4, 90, 2, NULL);
    drain(e, &r);
    assert_int_equal(r.ntok[2], 90);
    pe_engine_destroy(e);
}

/* ---- kept sequences ------------------------------------------------------------------------ */

static uint64_t submit_kept(pe_engine *e, const int32_t *prompt, size_t n, int max_tokens,
                            int slot)
{
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = n;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    p.keep = 1;
    p.user = (void *)(intptr_t)slot;
    uint64_t id = 0;
    if (pe_seq_submit(e, &p, &id) != PE_OK)
        fail_msg("pe_seq_submit: %s", pe_last_error());
    return id;
}

static pe_status append(pe_engine *e, uint64_t id, const int32_t *more, size_t n,
                        int max_tokens, int slot, int keep)
{
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = more;
    p.prompt_len = n;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    p.keep = keep;
    p.user = (void *)(intptr_t)slot;
    return pe_seq_append(e, id, &p);
}

/* pengine.h: an append generates "with only the new tokens prefilled, the rest in the KV
 * cache": two turns of a kept sequence give, token for token (greedy), what one fresh
 * sequence holding the whole conversation gives; each turn ends with one final event and
 * counts its tokens from 0; the id stays. */
static void a_kept_sequence_continues_as_the_whole_conversation_would(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    static run r;
    memset(&r, 0, sizeof r);
    int32_t prompt[5], more[3], whole[5 + 7 + 3];
    tm_tokens(prompt, 5, llama_spec.vocab, 31);
    tm_tokens(more, 3, llama_spec.vocab, 32);
    uint64_t id = submit_kept(e, prompt, 5, 7, 0);
    drain(e, &r);
    assert_int_equal(r.finals[0], 1);
    assert_int_equal(r.ntok[0], 7);
    assert_int_equal(append(e, id, more, 3, 9, 1, 1), PE_OK); /* turn 2 records in slot 1 */
    drain(e, &r);
    assert_int_equal(r.finals[1], 1);
    assert_int_equal(r.finish[1], PE_FINISH_LENGTH);
    assert_int_equal(r.ntok[1], 9);
    memcpy(whole, prompt, sizeof prompt);
    memcpy(whole + 5, r.tok[0], 7 * sizeof(int32_t));
    memcpy(whole + 12, more, sizeof more);
    submit(e, whole, 15, 9, 2, NULL);
    drain(e, &r);
    assert_int_equal(r.ntok[2], 9);
    assert_memory_equal(r.tok[1], r.tok[2], 9 * sizeof(int32_t));
    /* a third turn, not kept: it ends for good */
    assert_int_equal(append(e, id, more, 2, 3, 3, 0), PE_OK);
    drain(e, &r);
    assert_int_equal(r.ntok[3], 3);
    assert_int_equal(append(e, id, more, 1, 3, 4, 1), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "not a kept sequence"));
    pe_engine_destroy(e);
}

/* pe_engine_info's blocks in use, once the replica has published want (it publishes after
 * the events it sends, so the count may lag them briefly); fails after 10 s. */
static void expect_blocks_used(pe_engine *e, size_t want)
{
    pe_engine_info info;
    for (int i = 0; i < 10000; i++) {
        assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
        if (info.kv_blocks_used == want)
            return;
        usleep(1000);
    }
    fail_msg("%zu KV blocks in use, expected %zu", info.kv_blocks_used, want);
}

/* A parked sequence holds its KV blocks: a sequence that needs the whole pool is refused
 * (PE_KV_REFUSE) until it is released, and then runs. Destroy frees what is still kept.
 * pe_engine_info counts the kept blocks, and none once all is released. */
static void a_kept_sequence_holds_its_blocks_until_released(void **state)
{
    (void)state;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.kv_tokens = 128; /* 8 blocks */
    cfg.kv_full = PE_KV_REFUSE;
    pe_engine *e = tm_engine(llama_dir, 1, &cfg);
    static run r;
    memset(&r, 0, sizeof r);
    int32_t prompt[20];
    tm_tokens(prompt, 20, llama_spec.vocab, 33);
    uint64_t kept = submit_kept(e, prompt, 20, 40, 0); /* 59 positions: 4 blocks */
    drain(e, &r);
    assert_int_equal(r.ntok[0], 40);
    expect_blocks_used(e, 4);
    submit(e, prompt, 20, 100, 1, NULL); /* 119 positions: all 8 blocks */
    drain(e, &r);
    assert_int_equal(r.finish[1], PE_FINISH_ERROR);
    assert_int_equal(r.status[1], PE_EAGAIN);
    assert_int_equal(pe_seq_release(e, kept), PE_OK);
    submit(e, prompt, 20, 100, 2, NULL);
    drain(e, &r);
    assert_int_equal(r.ntok[2], 100);
    expect_blocks_used(e, 0);
    assert_int_equal(pe_seq_release(e, kept), PE_EINVAL); /* released: gone */
    submit_kept(e, prompt, 20, 4, 3); /* left kept: destroy frees it */
    drain(e, &r);
    pe_engine_destroy(e);
}

/* Appends and releases that cannot be done are PE_EINVAL with a message saying why. */
static void appends_and_releases_that_cannot_be_done_are_refused(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    static run r;
    memset(&r, 0, sizeof r);
    int32_t prompt[6];
    tm_tokens(prompt, 6, llama_spec.vocab, 34);
    const struct {
        uint64_t id;
        const char *why;
    } unknown[] = {{999, "not a kept sequence"}};
    assert_int_equal(append(e, unknown[0].id, prompt, 2, 2, 0, 1), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), unknown[0].why));
    assert_int_equal(pe_seq_release(e, unknown[0].id), PE_EINVAL);
    uint64_t plain = submit(e, prompt, 6, 2, 0, NULL); /* not kept */
    drain(e, &r);
    assert_int_equal(append(e, plain, prompt, 2, 2, 1, 1), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "not a kept sequence"));
    en_allow_steps(e, 0); /* a kept one still generating */
    uint64_t kept = submit_kept(e, prompt, 6, 4, 2);
    assert_int_equal(append(e, kept, prompt, 2, 2, 3, 1), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "still generating"));
    assert_int_equal(pe_seq_release(e, kept), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "still generating"));
    en_allow_steps(e, -1);
    drain(e, &r);
    assert_int_equal(r.ntok[2], 4);
    static int32_t longer[128];
    tm_tokens(longer, 128, llama_spec.vocab, 35);
    assert_int_equal(append(e, kept, longer, 118, 2, 3, 1), PE_EINVAL); /* 10 + 118 = 128 */
    assert_non_null(strstr(pe_last_error(), "context"));
    int32_t bad = (int32_t)llama_spec.vocab;
    assert_int_equal(append(e, kept, &bad, 1, 2, 3, 1), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "pe_seq_append: the prompt"));
    assert_int_equal(append(e, kept, prompt, 1, 2, 3, 1), PE_OK); /* still kept after all that */
    drain(e, &r);
    assert_int_equal(r.ntok[3], 2);
    assert_int_equal(pe_seq_release(e, kept), PE_OK);
    pe_engine_destroy(e);
}

/* ---- bad parameters ------------------------------------------------------------------------ */

static void bad_parameters_are_refused_with_a_message(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    int32_t prompt[3] = {1, 2, 3};
    static int32_t longp[200];
    const struct {
        const char *why;
        void (*set)(pe_seq_params *p);
    } cases[] = {
        {"top_p", NULL}, {"temperature", NULL}, {"empty", NULL}, {"context", NULL},
        {"vocabulary", NULL}, {"max_tokens", NULL}, {"top_k", NULL}, {"logprobs", NULL},
        {"repetition_penalty", NULL}, {"frequency_penalty", NULL}, {"presence_penalty", NULL},
        {"twice", NULL}, {"logit_bias entry 0", NULL}, {"logit_bias entries", NULL},
        {"min_p", NULL}, {"min_tokens", NULL},
    };
    const pe_logit_bias twice[2] = {{4, 1.0f}, {4, 2.0f}}, outside[1] = {{-1, 1.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = 3;
        switch (i) {
        case 0: p.sampling.top_p = 1.5f; break;
        case 1: p.sampling.temperature = -1.0f; break;
        case 2: p.prompt_len = 0; break;
        case 3: p.prompt = longp, p.prompt_len = 200; break; /* context 128 */
        case 4: prompt[1] = llama_spec.vocab; break;
        case 5: p.max_tokens = 0; break;
        case 6: p.sampling.top_k = -2; break;
        case 7: p.logprobs = PE_MAX_LOGPROBS + 1; break;
        case 8: p.sampling.repetition_penalty = -1.0f; break;
        case 9: p.sampling.frequency_penalty = INFINITY; break;
        case 10: p.sampling.presence_penalty = NAN; break;
        case 11: p.logit_bias = twice, p.nlogit_bias = 2; break;
        case 12: p.logit_bias = outside, p.nlogit_bias = 1; break;
        case 13: p.logit_bias = twice, p.nlogit_bias = PE_MAX_LOGIT_BIAS + 1; break;
        case 14: p.sampling.min_p = 1.01f; break;
        case 15: p.min_tokens = p.max_tokens + 1; break;
        }
        uint64_t id;
        assert_int_equal(pe_seq_submit(e, &p, &id), PE_EINVAL);
        if (!strstr(pe_last_error(), cases[i].why))
            fail_msg("case %zu: message \"%s\" does not name %s", i, pe_last_error(),
                     cases[i].why);
        prompt[1] = 2;
    }
    pe_token_event ev;
    assert_int_equal(pe_seq_poll(e, &ev), PE_EAGAIN);
    assert_int_equal(pe_seq_wait(e, &ev), PE_EAGAIN); /* none outstanding */
    /* rows on a decoder, sequences on an MLP */
    float x = 0;
    assert_int_equal(pe_infer(e, &x, 1, &x), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "decoder"));
    pe_engine_destroy(e);
}

/* ---- a worker fails mid-decode ------------------------------------------------------------- */

static void a_worker_failing_mid_decode_ends_every_sequence_with_an_error(void **state)
{
    (void)state;
    pe_engine *e = tm_engine(llama_dir, 1, NULL);
    en_inject_failure(e, 0, 5); /* its 5th step: sequence 0 has decoded by then */
    int32_t prompt[4];
    tm_tokens(prompt, 4, llama_spec.vocab, 8);
    static run r;
    memset(&r, 0, sizeof r);
    /* submit until the failure refuses one (it may come before all 8 are in) */
    int submitted = 0;
    pe_status refused = PE_OK;
    for (; submitted < 8; submitted++) {
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = 4;
        p.max_tokens = 30;
        p.ignore_eos = 1;
        p.user = (void *)(intptr_t)submitted;
        uint64_t id;
        if ((refused = pe_seq_submit(e, &p, &id)) != PE_OK)
            break;
    }
    drain(e, &r);
    assert_true(submitted >= 1);
    assert_true(r.ntok[0] >= 1 && r.ntok[0] < 30); /* the failure came mid-decode */
    for (int i = 0; i < submitted; i++) {
        assert_int_equal(r.finals[i], 1);
        assert_int_equal(r.finish[i], PE_FINISH_ERROR);
        assert_int_equal(r.status[i], PE_EDEVICE);
    }
    /* later submits get the error, naming it */
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = 4;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_EDEVICE);
    assert_non_null(strstr(pe_last_error(), "injected"));
    assert_true(refused == PE_OK || refused == PE_EDEVICE);
    pe_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_mixed_batch_gives_each_sequence_what_it_gets_alone),
        cmocka_unit_test(a_mixed_bf16_batch_on_amx_gives_each_sequence_what_it_gets_alone),
        cmocka_unit_test(the_engine_names_its_host_kernels),
        cmocka_unit_test(ended_sequences_free_their_blocks_and_an_exact_pool_works),
        cmocka_unit_test(a_full_pool_makes_a_new_sequence_wait_or_refuses_it),
        cmocka_unit_test(a_score_that_finds_the_pool_promised_is_refused_with_eagain),
        cmocka_unit_test(prompt_logprobs_are_the_log_softmax_of_the_logits_beside_other_sequences),
        cmocka_unit_test(top_k_1_is_greedy_and_a_seed_repeats_its_tokens),
        cmocka_unit_test(min_tokens_hold_back_the_eos_and_the_stop_tokens),
        cmocka_unit_test(penalties_give_the_tokens_of_a_reference_on_pe_score),
        cmocka_unit_test(penalties_give_the_reference_tokens_with_drafts_too),
        cmocka_unit_test(temperature_sampling_follows_the_softmax),
        cmocka_unit_test(top_p_keeps_the_nucleus),
        cmocka_unit_test(a_thousand_sequences_from_four_threads_each_end_once),
        cmocka_unit_test(cancel_ends_a_sequence_once_mid_way),
        cmocka_unit_test(bad_parameters_are_refused_with_a_message),
        cmocka_unit_test(a_worker_failing_mid_decode_ends_every_sequence_with_an_error),
        cmocka_unit_test(a_kept_sequence_continues_as_the_whole_conversation_would),
        cmocka_unit_test(a_kept_sequence_holds_its_blocks_until_released),
        cmocka_unit_test(appends_and_releases_that_cannot_be_done_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
