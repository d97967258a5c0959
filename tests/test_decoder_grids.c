/* test_decoder_grids.c: decoders on grids against one device: tensor parallelism (heads
 * split, KV heads split or replicated, MLP columns/rows split, a vocab-parallel head),
 * pipeline stages (the residual stream sent stage to stage), replicas, and their products;
 * what each worker holds; and a worker failing mid-decode.
 *
 * Models (4 blocks): GPT-2 tiny with 12 heads of 8 (tp 3 splits them) and a vocabulary of
 * 253 (not a multiple of 2, 3 or 4: the head's last shard is padded), its head tied to wte
 * (on another stage than the embedding under PP); Llama tiny with 4 heads and 2 KV heads
 * (tp 4 replicates each KV head on two ranks) and an untied head. Grids: every mode at sizes
 * 1 to 4 (tp 2 on a repeated device (0,0), tp 3 (GPT-2 only: the Llama's 4 heads refuse it),
 * tp 4, pp 2, 3 and 4, dp 2, 3 and 4) and the products dp 2 x tp 2, dp 2 x pp 2, pp 2 x tp 2,
 * dp 2 x pp 2 x tp 2. Each grid must give one device's answers:
 *   - greedy: the same 32 tokens for 8 sequences of different prompt lengths (the greedy
 *     path gathers only each rank's best token);
 *   - sampled with a seed (temperature, top-k 40, top-p) with top-k logprobs (TP gathers each
 *     rank's 40 candidates): the same tokens, and logprobs within 1e-4;
 *   - sampled without a top-k (TP gathers the rows whole): the same;
 *   - pe_score's logits at every position within 1e-4 of their scale;
 *   - pe_score_logprobs (the next token's logprob and the top 5, read where the logits are:
 *     TP gathers the rows whole) against the log-softmax of one device's logits.
 * Without TP, where the host backend is batch-invariant (hb_simd_batch_invariant: AVX2 or
 * AVX-512), all of it bit for bit: tokens, logprobs and logits.
 * The token embedding is vocab-parallel (the default) on all of them, and replicated on tp 3,
 * pp 2 x tp 2 and the Llama's tp 4.
 * Memory, from pe_engine_info_get: each worker's weights lie between its share of its
 * stage's split tensors and that plus the replicated parts (both from the spec), and its KV
 * pool is exactly its stage's blocks times its KV heads.
 * Failures injected mid-decode into a TP rank, a PP stage and a DP replica: no hang, every
 * sequence ends once with the failure (PE_EDEVICE), later submits are refused naming it.
 * And a tp that does not divide the heads is refused with the sizes that do.
 * Speculative decoding (drafts by prompt lookup) on one device and on tp 2, pp 2, dp 2 and
 * pp 2 x tp 2 gives one device's answers without it, on a model whose greedy answers loop
 * (many drafts taken, many missed); spec settings out of range are refused.
 *
 * Under valgrind (PE_TEST_SMALL): the GPT-2 pp 2 x tp 2 grid with 4 sequences, on the
 * preset's narrower 4 heads, the TP failure, and the drafts on pp 2 x tp 2 (6 tokens).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "backend/host/hb_simd.h"
#include "engine/engine_testing.h"
#include "test_generate.h"
#include "test_models.h"

static char gpt2_dir[512], llama_dir[512];
static pe_gen_spec gpt2_spec, llama_spec;

static int setup(void **state)
{
    (void)state;
    tm_tiny(&gpt2_spec, PE_GEN_GPT2, 21);
    gpt2_spec.layers = 4; /* pp 4: a block a stage */
    gpt2_spec.vocab = 253; /* 11 x 23: the head's last shard is padded at every tp */
    gpt2_spec.bos_token_id = gpt2_spec.eos_token_id = 252;
    if (!tu_small()) { /* 12 heads of 8: tp 2, 3 and 4 split them. Under valgrind, whose
                        * one GPT-2 grid is pp 2 x tp 2, the preset's 4 heads of 16 (the
                        * wider model takes the tools half as long again) */
        gpt2_spec.hidden = 96;
        gpt2_spec.heads = 12;
    }
    tm_write(&gpt2_spec, "tp_gpt2", gpt2_dir, sizeof gpt2_dir);
    tm_tiny(&llama_spec, PE_GEN_LLAMA, 22);
    llama_spec.layers = 4;
    assert_int_equal(llama_spec.heads, 4);
    assert_int_equal(llama_spec.kv_heads, 2);
    tm_write(&llama_spec, "tp_llama", llama_dir, sizeof llama_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tm_remove(gpt2_dir);
    tm_remove(llama_dir);
    return 0;
}

/* A host engine on the grid dp x pp x tp over devs, loaded with dir; decodes carry up to
 * spec_tokens drafts. */
static pe_engine *grid_engine_spec(const char *dir, int dp, int pp, int tp, const int *devs,
                                   pe_tp_embedding embedding, int spec_tokens)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.tp_embedding = embedding;
    cfg.spec_tokens = spec_tokens;
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp * tp;
    cfg.devices = devs;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.threads = 1;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("pe_engine_create dp=%d pp=%d tp=%d: %s", dp, pp, tp, pe_last_error());
    if (pe_engine_load(e, dir) != PE_OK)
        fail_msg("pe_engine_load %s dp=%d pp=%d tp=%d: %s", dir, dp, pp, tp, pe_last_error());
    return e;
}

/* ... without drafts. */
static pe_engine *grid_engine_with(const char *dir, int dp, int pp, int tp, const int *devs,
                                   pe_tp_embedding embedding)
{
    return grid_engine_spec(dir, dp, pp, tp, devs, embedding, 0);
}

/* ... with the default, vocab-parallel, token embedding. */
static pe_engine *grid_engine(const char *dir, int dp, int pp, int tp, const int *devs)
{
    return grid_engine_with(dir, dp, pp, tp, devs, PE_TP_EMBED_VOCAB);
}

/* The sequences of a run: 8, or 4 under valgrind (the tools' time is short). */
static int nseq(void) { return tu_small() ? 4 : TG_NSEQ; }

/* tg_generate, tg_same_answers and tg_score (test_generate.h), failing the test with their
 * message. */
static void generate(pe_engine *e, int vocab, int G, tg_sampling how, tg_answers *out)
{
    char why[TG_WHY];
    if (!tg_generate(e, vocab, nseq(), G, how, out, why))
        fail_msg("%s", why);
}

/* The grid's answers against one device's: the same bits where exact (no TP on a
 * batch-invariant backend), else tg_same_answers. */
static void expect_same_answers(const tg_answers *one, const tg_answers *grid, int exact,
                                const char *what)
{
    char why[TG_WHY];
    if (!(exact ? tg_identical_answers(one, grid, why) : tg_same_answers(one, grid, why)))
        fail_msg("%s, against one device: %s", what, why);
}

static float *score_all(pe_engine *e, int vocab)
{
    char why[TG_WHY];
    float *logits = tg_score(e, vocab, why);
    if (!logits)
        fail_msg("%s", why);
    return logits;
}

typedef struct grid {
    int dp, pp, tp;
    const int *devs;
} grid;

static const int repeated[2] = {0, 0}, eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};

/* Every mode at sizes 1 to 4, and their products. GPT-2's 12 heads split over tp 3; the
 * Llama's 4 heads do not (its list has no tp 3: a test below checks the refusal). */
static const grid gpt2_grids[] = {
    {1, 1, 2, repeated}, {1, 1, 3, eight}, {1, 1, 4, eight}, {1, 2, 1, eight},
    {1, 3, 1, eight},    {1, 4, 1, eight}, {2, 1, 1, eight}, {3, 1, 1, eight},
    {4, 1, 1, eight},    {2, 1, 2, eight}, {2, 2, 1, eight}, {1, 2, 2, eight},
    {2, 2, 2, eight}};
enum { GPT2_PP2_TP2 = 11 }; /* the one grid the valgrind runs take */
static const grid llama_grids[] = {
    {1, 1, 2, repeated}, {1, 1, 4, eight}, {1, 2, 1, eight}, {1, 3, 1, eight},
    {1, 4, 1, eight},    {2, 1, 1, eight}, {3, 1, 1, eight}, {4, 1, 1, eight},
    {2, 1, 2, eight},    {2, 2, 1, eight}, {1, 2, 2, eight}, {2, 2, 2, eight}};
#define NGRIDS(g) (sizeof(g) / sizeof((g)[0]))

/* Every grid of the list; under valgrind only grid number `small`, none when it is negative
 * (the tools' time is short: the other model's grid covers the same code). */
static void every_grid_gives_one_devices_answers(const char *dir, int vocab, const grid *grids,
                                                 size_t ngrids, int small,
                                                 pe_tp_embedding embedding)
{
    if (tu_small() && small < 0)
        return;
    const int G = (int)tu_size(TG_G, 6);
    static tg_answers one_greedy, one_sampled, one_sampled_all, one_penalized, got;
    static const int single[1] = {0};
    pe_engine *e = grid_engine(dir, 1, 1, 1, single);
    generate(e, vocab, G, TG_GREEDY, &one_greedy);
    generate(e, vocab, G, TG_SAMPLED_TOP_K, &one_sampled);
    generate(e, vocab, G, TG_SAMPLED_ALL, &one_sampled_all);
    generate(e, vocab, G, TG_GREEDY_PENALIZED, &one_penalized);
    float *one_logits = score_all(e, vocab);
    pe_engine_destroy(e);
    for (size_t g = 0; g < ngrids; g++) {
        if (tu_small() && (int)g != small)
            continue;
        char what[640]; /* dir (up to 511 bytes) and the grid */
        snprintf(what, sizeof what, "%s dp=%d pp=%d tp=%d", dir, grids[g].dp, grids[g].pp,
                 grids[g].tp);
        e = grid_engine_with(dir, grids[g].dp, grids[g].pp, grids[g].tp, grids[g].devs,
                             embedding);
        /* without TP every sum keeps one device's order: bit for bit */
        const int exact = grids[g].tp == 1 && hb_simd_batch_invariant(hb_simd_get());
        generate(e, vocab, G, TG_GREEDY, &got);
        expect_same_answers(&one_greedy, &got, exact, what);
        generate(e, vocab, G, TG_SAMPLED_TOP_K, &got);
        expect_same_answers(&one_sampled, &got, exact, what);
        if (!tu_small()) { /* the rows-whole path, which the candidates path shares most of,
                            * and the penalties before each rank's best */
            generate(e, vocab, G, TG_SAMPLED_ALL, &got);
            expect_same_answers(&one_sampled_all, &got, exact, what);
            generate(e, vocab, G, TG_GREEDY_PENALIZED, &got);
            expect_same_answers(&one_penalized, &got, exact, what);
        }
        float *logits = score_all(e, vocab);
        char why[TG_WHY];
        if (!tg_same_logits(one_logits, logits, vocab, exact, why))
            fail_msg("%s, against one device: %s", what, why);
        static pe_logprobs prompt_lp[TG_NSCORE - 1];
        if (!tg_prompt_logprobs(e, vocab, prompt_lp, why) ||
            !tg_same_prompt_logprobs(one_logits, prompt_lp, vocab, why))
            fail_msg("%s, against one device: %s", what, why);
        free(logits);
        pe_engine_destroy(e);
    }
    free(one_logits);
}

static void gpt2_with_a_padded_vocabulary_matches_one_device_on_every_grid(void **state)
{
    (void)state;
    const grid *small = &gpt2_grids[GPT2_PP2_TP2];
    assert_true(small->dp == 1 && small->pp == 2 && small->tp == 2);
    every_grid_gives_one_devices_answers(gpt2_dir, gpt2_spec.vocab, gpt2_grids,
                                         NGRIDS(gpt2_grids), GPT2_PP2_TP2, PE_TP_EMBED_VOCAB);
}

static void llama_with_replicated_kv_heads_matches_one_device_on_every_grid(void **state)
{
    (void)state;
    every_grid_gives_one_devices_answers(llama_dir, llama_spec.vocab, llama_grids,
                                         NGRIDS(llama_grids), -1, PE_TP_EMBED_VOCAB);
}

/* The token table whole on every TP rank (PE_TP_EMBED_REPLICATED) gives the same answers:
 * tp 3 and pp 2 x tp 2 on the GPT-2 (its tied head then reads its rows of the whole
 * table), tp 4 on the Llama. */
static void a_replicated_embedding_matches_one_device(void **state)
{
    (void)state;
    static const grid gpt2[] = {{1, 1, 3, eight}, {1, 2, 2, eight}}, llama[] = {{1, 1, 4, eight}};
    every_grid_gives_one_devices_answers(gpt2_dir, gpt2_spec.vocab, gpt2, NGRIDS(gpt2), -1,
                                         PE_TP_EMBED_REPLICATED);
    every_grid_gives_one_devices_answers(llama_dir, llama_spec.vocab, llama, NGRIDS(llama), -1,
                                         PE_TP_EMBED_REPLICATED);
}

/* ---- memory per worker ---------------------------------------------------------------------- */

/* A worker's weights in floats, from the spec, by how the shard plan places them: */
typedef struct weight_parts {
    size_t split; /* per block: this rank's share of the tensors split over tp (exact) */
    size_t repl;  /* per block: what every rank holds whole (norms, biases after a row split) */
    size_t first; /* the first stage: the token table (and GPT-2's positions), at most whole */
    size_t last;  /* the last stage: the final norm and the head, at most V x C */
    size_t any;   /* every worker (Llama: RoPE's frequencies) */
} weight_parts;

/* KV heads a rank holds: its share, or the one its query heads read when tp > KV heads. */
static size_t kv_heads_of_rank(const pe_gen_spec *s, int tp)
{
    size_t kvh = s->kv_heads ? (size_t)s->kv_heads : (size_t)s->heads;
    return kvh >= (size_t)tp ? kvh / (size_t)tp : 1;
}

static size_t head_dim_of(const pe_gen_spec *s) { return (size_t)(s->hidden / s->heads); }

static weight_parts weight_parts_of(const pe_gen_spec *s, int tp)
{
    const size_t C = (size_t)s->hidden, V = (size_t)s->vocab, hd = head_dim_of(s);
    const size_t t = (size_t)tp, q = C / t, kv = kv_heads_of_rank(s, tp) * hd;
    weight_parts w = {0};
    if (s->arch == PE_GEN_GPT2) {
        const size_t I = s->inner ? (size_t)s->inner : 4 * C, i = I / t;
        w.split = (q + 2 * kv) * C + (q + 2 * kv) /* c_attn (q | k | v) and its bias */
                  + C * q                         /* c_proj: the rank's input columns */
                  + i * C + i + C * i;            /* c_fc and its bias, mlp c_proj */
        w.repl = 6 * C; /* ln_1, ln_2 (weight and bias), both c_proj biases */
        w.first = V * C + (size_t)s->context * C;
        w.last = 2 * C + V * C;
    } else {
        const size_t i = (size_t)s->inner / t;
        w.split = (q + 2 * kv) * C + C * q + 2 * i * C + C * i; /* qkv, o, gate | up, down */
        w.repl = 2 * C;
        w.first = V * C;
        w.last = C + V * C;
        w.any = hd / 2;
    }
    return w;
}

/* Bounds of the weight bytes of a worker with `layers` blocks: at least its share of the
 * split tensors; at most that, the replicated parts, its stage's tables, and each tensor's
 * rounding up in the arena (256 bytes; at most 12 tensors a block and 8 others). */
static void weight_bounds(const pe_gen_spec *s, int tp, int layers, int first, int last,
                          size_t *lo, size_t *hi)
{
    const weight_parts w = weight_parts_of(s, tp);
    const size_t n = (size_t)layers;
    *lo = n * w.split * sizeof(float);
    *hi = (n * (w.split + w.repl) + (first ? w.first : 0) + (last ? w.last : 0) + w.any) *
              sizeof(float) + (12 * n + 8) * 256;
}

/* The KV pool's bytes: every worker has the same blocks, each holding its stage's blocks'
 * K and V of its KV heads (FP32). Exact. */
static size_t kv_pool_bytes(const pe_gen_spec *s, const pe_engine_info *info, int tp,
                            int layers)
{
    return info->kv_blocks * (size_t)info->kv_block_tokens * (size_t)layers * 2 *
           kv_heads_of_rank(s, tp) * head_dim_of(s) * sizeof(float);
}

/* Each worker of a grid holds its share of one device's memory: its stage's blocks' split
 * tensors over tp (not the whole model: the upper bound is far below one device's), and KV
 * for its blocks and KV heads only (exactly; a Llama rank at tp 4 holds 1 of the 2 KV
 * heads, replicated on two ranks). One device's own numbers are checked against the same
 * formulas, so that the formulas count what the engine holds. */
static void expect_a_share_per_worker(const char *dir, const pe_gen_spec *s, int dp, int pp,
                                      int tp)
{
    static const int single[1] = {0};
    pe_engine_info one, info;
    pe_engine *e = grid_engine(dir, 1, 1, 1, single);
    assert_int_equal(pe_engine_info_get(e, &one), PE_OK);
    pe_engine_destroy(e);
    size_t lo, hi;
    weight_bounds(s, 1, s->layers, 1, 1, &lo, &hi);
    if (one.weight_bytes[0] < lo || one.weight_bytes[0] > hi)
        fail_msg("%s on one device: %zu weight bytes, not in [%zu, %zu]", dir,
                 one.weight_bytes[0], lo, hi);
    assert_int_equal(one.kv_bytes[0], kv_pool_bytes(s, &one, 1, s->layers));

    e = grid_engine(dir, dp, pp, tp, eight);
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    pe_engine_destroy(e);
    assert_int_equal(info.kv_blocks, one.kv_blocks); /* the pool's positions do not shrink */
    for (int r = 0; r < dp * pp * tp; r++) {
        const int p = (r / tp) % pp; /* rank = (d * pp + p) * tp + t */
        const int layers = info.stage_first_layer[p + 1] - info.stage_first_layer[p];
        weight_bounds(s, tp, layers, p == 0, p == pp - 1, &lo, &hi);
        assert_true(hi < one.weight_bytes[0]); /* so that holding everything fails */
        if (info.weight_bytes[r] < lo || info.weight_bytes[r] > hi)
            fail_msg("%s dp=%d pp=%d tp=%d: worker %d (stage %d, %d blocks) holds %zu weight "
                     "bytes, not in [%zu, %zu] (one device: %zu)", dir, dp, pp, tp, r, p, layers,
                     info.weight_bytes[r], lo, hi, one.weight_bytes[0]);
        assert_int_equal(info.kv_bytes[r], kv_pool_bytes(s, &info, tp, layers));
    }
}

static void each_worker_holds_its_share_of_the_weights_and_the_kv_cache(void **state)
{
    (void)state;
    if (tu_small())
        return;
    expect_a_share_per_worker(gpt2_dir, &gpt2_spec, 1, 1, 3);
    expect_a_share_per_worker(gpt2_dir, &gpt2_spec, 1, 1, 4);
    expect_a_share_per_worker(gpt2_dir, &gpt2_spec, 1, 3, 1);
    expect_a_share_per_worker(gpt2_dir, &gpt2_spec, 1, 2, 2);
    expect_a_share_per_worker(llama_dir, &llama_spec, 1, 1, 4); /* KV heads replicated */
    expect_a_share_per_worker(llama_dir, &llama_spec, 2, 2, 2);
}

/* ---- a worker fails mid-decode ------------------------------------------------------------ */

enum { FAIL_AT_STEP = 5, FAIL_MAX_TOKENS = 60 }; /* 40 + 60 positions fit the context, 128 */

typedef struct endings {
    int ntok[TG_NSEQ]; /* token events */
    int finals[TG_NSEQ];
    pe_finish finish[TG_NSEQ];
    pe_status status[TG_NSEQ];
} endings;

/* The sequences of generate() (prompts seeded 300 on), greedy, FAIL_MAX_TOKENS each, submitted while no step runs
 * (en_allow_steps), so that all of them are in before the failure; then the steps run and
 * every event is taken. */
static void submit_and_drain(pe_engine *e, int vocab, int failing_replica, int *routed,
                             endings *out)
{
    memset(out, 0, sizeof *out);
    en_allow_steps(e, 0);
    for (int i = 0; i < nseq(); i++) {
        int32_t prompt[TG_MAXPROMPT];
        pe_seq_params p;
        tg_params(&p, prompt, i, vocab, 300, FAIL_MAX_TOKENS);
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit before any step: %s", pe_last_error());
    }
    *routed = en_replica_sequences(e, failing_replica); /* nothing ends while steps wait */
    en_allow_steps(e, -1);
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        assert_int_equal(out->finals[i], 0); /* nothing after the final event */
        if (ev.token >= 0)
            out->ntok[i]++;
        if (ev.finish != PE_FINISH_NONE) {
            out->finals[i]++;
            out->finish[i] = ev.finish;
            out->status[i] = ev.status;
        }
    }
}

/* Worker `rank` of the grid fails at its FAIL_AT_STEP-th step. Every sequence ends exactly
 * once. The failing replica's sequences were all prefilled (a token each) in the steps
 * before, and cannot have reached FAIL_MAX_TOKENS: each ends with the error, PE_EDEVICE,
 * whatever a peer blocked in a collective, a recv or a send saw. Another replica runs on
 * until the failure reaches it: its sequences end with the error too, or with every token
 * (LENGTH) when it got that far first. Then the engine refuses new sequences with the
 * failure's message, and destroy returns. */
static void a_failure_mid_decode_ends_every_sequence(const char *dir, int vocab, int dp,
                                                     int pp, int tp, int rank)
{
    const int failing_replica = rank / (pp * tp); /* rank = (d * pp + p) * tp + t */
    pe_engine *e = grid_engine(dir, dp, pp, tp, eight);
    en_inject_failure(e, rank, FAIL_AT_STEP);
    static endings got;
    int routed = 0;
    submit_and_drain(e, vocab, failing_replica, &routed, &got);
    assert_true(routed >= 1);
    int errors_after_tokens = 0;
    for (int i = 0; i < nseq(); i++) {
        if (got.finals[i] != 1)
            fail_msg("dp=%d pp=%d tp=%d: sequence %d got %d final events", dp, pp, tp, i,
                     got.finals[i]);
        if (got.finish[i] == PE_FINISH_LENGTH && dp > 1) { /* the healthy replica's */
            assert_int_equal(got.status[i], PE_OK);
            assert_int_equal(got.ntok[i], FAIL_MAX_TOKENS);
            continue;
        }
        if (got.finish[i] != PE_FINISH_ERROR || got.status[i] != PE_EDEVICE)
            fail_msg("dp=%d pp=%d tp=%d: sequence %d ended with finish %d, status %s (%d "
                     "tokens); want the failure, PE_EDEVICE", dp, pp, tp, i, (int)got.finish[i],
                     pe_status_str(got.status[i]), got.ntok[i]);
        assert_true(got.ntok[i] < FAIL_MAX_TOKENS);
        errors_after_tokens += got.ntok[i] >= 1;
    }
    /* mid-decode: the failing replica's sequences had tokens when the error ended them */
    if (errors_after_tokens < routed)
        fail_msg("dp=%d pp=%d tp=%d: %d sequences ended with the error after a token; the "
                 "failing replica held %d", dp, pp, tp, errors_after_tokens, routed);

    pe_seq_params p;
    pe_seq_params_init(&p);
    int32_t prompt[1] = {1};
    p.prompt = prompt;
    p.prompt_len = 1;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_EDEVICE);
    if (!strstr(pe_last_error(), "injected"))
        fail_msg("a submit after the failure: %s", pe_last_error());
    pe_engine_destroy(e);
}

/* TP: lane 1 fails while lane 0 waits for it in the step's first all-reduce. The one
 * failure case under valgrind (where a hang or a race in the abort would show). */
static void a_tp_rank_failing_mid_decode_ends_every_sequence_with_the_error(void **state)
{
    (void)state;
    a_failure_mid_decode_ends_every_sequence(gpt2_dir, gpt2_spec.vocab, 1, 1, 2, 1);
}

/* PP: stage 1 fails while stage 0 sends it the next step's activations (or waits). */
static void a_pp_stage_failing_mid_decode_ends_every_sequence_with_the_error(void **state)
{
    (void)state;
    if (tu_small())
        return;
    a_failure_mid_decode_ends_every_sequence(gpt2_dir, gpt2_spec.vocab, 1, 2, 1, 1);
}

/* DP: replica 1 fails; replica 0, which shares no communicator with it in a step, is
 * stopped by the engine's failure. */
static void a_dp_replica_failing_mid_decode_ends_every_sequence(void **state)
{
    (void)state;
    if (tu_small())
        return;
    a_failure_mid_decode_ends_every_sequence(llama_dir, llama_spec.vocab, 2, 1, 1, 1);
}

static void a_tp_that_does_not_divide_the_heads_lists_the_ones_that_do(void **state)
{
    (void)state;
    static const int three[3] = {0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 3;
    cfg.devices = three;
    cfg.dp = 1;
    cfg.pp = 1;
    cfg.tp = 3;
    pe_engine *e = NULL;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, llama_dir), PE_EINVAL);
    const char *msg = pe_last_error();
    if (!strstr(msg, "tp=3") || !strstr(msg, "heads do not split evenly") ||
        !strstr(msg, "(1, 2, 4)"))
        fail_msg("unexpected message: %s", msg);
    pe_engine_destroy(e);
}

/* Stages: balanced when not given (every stage holds a block; the head's stage no more
 * blocks than the others), as --split gives them, and more stages than blocks refused. */
static void stages_are_planned_by_blocks(void **state)
{
    (void)state;
    static const int four[4] = {0, 0, 0, 0};
    pe_engine *e = grid_engine(llama_dir, 1, 2, 1, four);
    pe_engine_info info;
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    assert_int_equal(info.stage_first_layer[0], 0);
    assert_int_equal(info.stage_first_layer[2], 4);
    int last = 4 - info.stage_first_layer[1], first = info.stage_first_layer[1];
    assert_true(last >= 1 && first >= last); /* the head weighs on the last stage */
    pe_engine_destroy(e);

    const int split[2] = {3, 1};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 2;
    cfg.devices = four;
    cfg.dp = 1;
    cfg.pp = 2;
    cfg.tp = 1;
    cfg.stage_layers = split;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, llama_dir), PE_OK);
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    assert_int_equal(info.stage_first_layer[1], 3);
    pe_engine_destroy(e);

    cfg.stage_layers = NULL;
    cfg.pp = 4;
    cfg.ndevices = 4;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK); /* 4 stages of 1 block: fine */
    assert_int_equal(pe_engine_load(e, llama_dir), PE_OK);
    pe_engine_destroy(e);

    static const int five[5] = {0, 0, 0, 0, 0};
    cfg.pp = 5;
    cfg.ndevices = 5;
    cfg.devices = five;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, llama_dir), PE_EINVAL);
    if (!strstr(pe_last_error(), "5 stages but the model has only 4 blocks"))
        fail_msg("unexpected message: %s", pe_last_error());
    pe_engine_destroy(e);
}

/* Speculative decoding (pe_config.spec_tokens): the drafts a decode carries are checked in
 * its step, and never change a token. One device, and the TP, PP, DP and PP x TP grids,
 * each with up to 4 drafts a decode, give one device's answers without drafts, greedy and
 * sampled, each with and without the penalties (a row's counts hold the drafts before it):
 * the same 80 tokens, logprobs within 1e-4 (a decode with drafts sums its rows as a
 * prefill chunk does). The
 * model is the plain Llama preset (2 blocks, pengine gen's weights, not tm_sharp's), whose
 * greedy answers soon fall into loops (the sharp 4-block one's mostly do not within 80
 * tokens), so many drafts are taken and many missed.
 * Under valgrind: pp 2 x tp 2 alone, 6 tokens, greedy and sampled with penalties. */
static void drafts_never_change_an_answer_on_any_grid(void **state)
{
    (void)state;
    static const int single[1] = {0};
    pe_gen_spec spec;
    char dir[512];
    assert_int_equal(pe_gen_init(&spec, PE_GEN_LLAMA, "tiny"), PE_OK);
    spec.seed = 23;
    assert_int_equal(spec.layers, 2);
    tm_write(&spec, "spec_llama", dir, sizeof dir);
    static const grid grids[] = {
        {1, 1, 1, eight}, {1, 1, 2, repeated}, {1, 2, 1, eight}, {2, 1, 1, eight},
        {1, 2, 2, eight}};
    /* 80 tokens: the longest prompt (TG_MAXPROMPT) and they fill the tiny context of 128 */
    const int G = (int)tu_size(80, 6), vocab = spec.vocab;
    static tg_answers one_greedy, one_sampled, one_penalized, one_sampled_pen, got;
    pe_engine *e = grid_engine(dir, 1, 1, 1, single);
    generate(e, vocab, G, TG_GREEDY, &one_greedy);
    generate(e, vocab, G, TG_SAMPLED_TOP_K, &one_sampled_pen);
    if (!tu_small()) {
        generate(e, vocab, G, TG_SAMPLED_ALL, &one_sampled);
        generate(e, vocab, G, TG_GREEDY_PENALIZED, &one_penalized);
    }
    pe_engine_destroy(e);
    for (size_t g = 0; g < NGRIDS(grids); g++) {
        if (tu_small() && g != NGRIDS(grids) - 1)
            continue;
        char what[96];
        snprintf(what, sizeof what, "with drafts, dp=%d pp=%d tp=%d", grids[g].dp, grids[g].pp,
                 grids[g].tp);
        e = grid_engine_spec(dir, grids[g].dp, grids[g].pp, grids[g].tp, grids[g].devs,
                             PE_TP_EMBED_VOCAB, 4);
        generate(e, vocab, G, TG_GREEDY, &got);
        expect_same_answers(&one_greedy, &got, 0, what);
        pe_engine_info greedy;
        assert_int_equal(pe_engine_info_get(e, &greedy), PE_OK);
        generate(e, vocab, G, TG_SAMPLED_TOP_K, &got);
        expect_same_answers(&one_sampled_pen, &got, 0, what);
        if (!tu_small()) {
            generate(e, vocab, G, TG_SAMPLED_ALL, &got);
            expect_same_answers(&one_sampled, &got, 0, what);
            generate(e, vocab, G, TG_GREEDY_PENALIZED, &got);
            expect_same_answers(&one_penalized, &got, 0, what);
        }
        pe_engine_info info;
        assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
        print_message("%s: greedy %ld of %ld drafts accepted, then sampled and penalized %ld "
                      "of %ld\n", what, greedy.spec_accepted_tokens, greedy.spec_drafted_tokens,
                      info.spec_accepted_tokens - greedy.spec_accepted_tokens,
                      info.spec_drafted_tokens - greedy.spec_drafted_tokens);
        /* taken and missed: a third of them at least, not all (6 tokens under valgrind may
         * draft nothing) */
        const long drafted = greedy.spec_drafted_tokens, accepted = greedy.spec_accepted_tokens;
        if (!tu_small() && (drafted == 0 || 3 * accepted < drafted || accepted == drafted))
            fail_msg("%s: %ld of %ld drafts accepted", what, accepted, drafted);
        pe_engine_destroy(e);
    }
    tm_remove(dir);
}

/* spec_tokens past PE_MAX_SPEC_TOKENS, a negative spec_max_seqs and n-grams whose least is
 * past their most are refused at create, with the ranges. */
static void spec_settings_out_of_range_are_refused_with_the_ranges(void **state)
{
    (void)state;
    static const int devs[1] = {0};
    static const struct {
        int tokens, nmin, nmax, max_seqs;
        const char *says;
    } bad[] = {{PE_MAX_SPEC_TOKENS + 1, 0, 0, 0, "give 1 to 16 draft tokens"},
               {-1, 0, 0, 0, "spec_tokens=-1"},
               {4, 3, 2, 0, "give 1 <= min <= max"},
               {4, 0, 0, -2, "spec_max_seqs=-2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pe_config cfg;
        pe_config_init(&cfg);
        assert_int_equal(cfg.spec_tokens, 0); /* off unless asked */
        cfg.backend = PE_BACKEND_HOST;
        cfg.ndevices = 1;
        cfg.devices = devs;
        cfg.spec_tokens = bad[i].tokens;
        cfg.spec_ngram_min = bad[i].nmin;
        cfg.spec_ngram_max = bad[i].nmax;
        cfg.spec_max_seqs = bad[i].max_seqs;
        pe_engine *e = NULL;
        assert_int_equal(pe_engine_create(&cfg, &e), PE_EINVAL);
        assert_null(e);
        if (!strstr(pe_last_error(), bad[i].says))
            fail_msg("case %zu: unexpected message: %s", i, pe_last_error());
    }
}

/* DP: a burst of submits, faster than the replicas publish what they hold, is still spread
 * evenly (each submit counts the ones routed before it). */
static void a_burst_of_sequences_is_spread_over_the_replicas(void **state)
{
    (void)state;
    static const int two[2] = {0, 1};
    pe_engine *e = grid_engine(llama_dir, 2, 1, 1, two);
    en_allow_steps(e, 0); /* nothing ends while we look */
    int32_t prompt[4] = {1, 2, 3, 4};
    for (int i = 0; i < 8; i++) {
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = 4;
        p.max_tokens = 2;
        uint64_t id;
        assert_int_equal(pe_seq_submit(e, &p, &id), PE_OK);
    }
    /* The count is two published words (taken in, routed since) that a replica thread
     * updates one after the other: read until both replicas show the burst, for 10 s. */
    int got0 = 0, got1 = 0;
    for (int tries = 0; tries < 10000; tries++) {
        got0 = en_replica_sequences(e, 0);
        got1 = en_replica_sequences(e, 1);
        if (got0 == 4 && got1 == 4)
            break;
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    assert_int_equal(got0, 4);
    assert_int_equal(got1, 4);
    en_allow_steps(e, -1);
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK)
        assert_int_equal(ev.status, PE_OK);
    pe_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_with_a_padded_vocabulary_matches_one_device_on_every_grid),
        cmocka_unit_test(llama_with_replicated_kv_heads_matches_one_device_on_every_grid),
        cmocka_unit_test(a_replicated_embedding_matches_one_device),
        cmocka_unit_test(each_worker_holds_its_share_of_the_weights_and_the_kv_cache),
        cmocka_unit_test(a_tp_rank_failing_mid_decode_ends_every_sequence_with_the_error),
        cmocka_unit_test(a_pp_stage_failing_mid_decode_ends_every_sequence_with_the_error),
        cmocka_unit_test(a_dp_replica_failing_mid_decode_ends_every_sequence),
        cmocka_unit_test(a_tp_that_does_not_divide_the_heads_lists_the_ones_that_do),
        cmocka_unit_test(stages_are_planned_by_blocks),
        cmocka_unit_test(a_burst_of_sequences_is_spread_over_the_replicas),
        cmocka_unit_test(drafts_never_change_an_answer_on_any_grid),
        cmocka_unit_test(spec_settings_out_of_range_are_refused_with_the_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
