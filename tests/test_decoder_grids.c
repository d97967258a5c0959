/* test_decoder_grids.c: decoders on grids against one device: tensor parallelism (heads
 * split, KV heads split or replicated, MLP columns/rows split, a vocab-parallel head),
 * pipeline stages (the residual stream sent stage to stage), replicas, and their products.
 *
 * Models (4 blocks): GPT-2 tiny with a vocabulary of 255 (not a multiple of tp: the head's
 * last shard is padded) and its head tied to wte (on another stage than the embedding under
 * PP); Llama tiny with 4 heads and 2 KV heads (tp 4 replicates each KV head on two ranks)
 * and an untied head. Grids: tp 2 on a repeated device (0,0), tp 4, pp 2, pp 4, dp 2 x tp 2,
 * dp 2 x pp 2, pp 2 x tp 2, dp 2 x pp 2 x tp 2. Each grid must give one device's answers:
 *   - greedy: the same 32 tokens for 8 sequences of different prompt lengths (the greedy
 *     path gathers only each rank's best token);
 *   - sampled with a seed, with top-k logprobs (the path that gathers whole rows): the same
 *     tokens, and logprobs within 1e-4;
 *   - pe_score's logits at every position within 1e-4 of their scale.
 * And a tp that does not divide the heads is refused with the sizes that do.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine_testing.h"
#include "test_models.h"

static char gpt2_dir[512], llama_dir[512];
static pe_gen_spec gpt2_spec, llama_spec;

static int setup(void **state)
{
    (void)state;
    tm_tiny(&gpt2_spec, PE_GEN_GPT2, 21);
    gpt2_spec.layers = 4;
    gpt2_spec.vocab = 255;
    gpt2_spec.bos_token_id = gpt2_spec.eos_token_id = 254;
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

/* A host engine on the grid dp x pp x tp over devs, loaded with dir. */
static pe_engine *grid_engine(const char *dir, int dp, int pp, int tp, const int *devs)
{
    pe_config cfg;
    pe_config_init(&cfg);
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

enum { NSEQ = 8, MAXG = 32, MAXPROMPT = 40, TOPK = 5 };

/* The sequences of a run: 8, or 4 under valgrind (the tools' time is short). */
static int nseq(void) { return tu_small() ? 4 : NSEQ; }

typedef struct answers {
    int ntok[NSEQ];
    int32_t tok[NSEQ][MAXG];
    float top[NSEQ][MAXG][TOPK];
    int32_t top_ids[NSEQ][MAXG][TOPK];
} answers;

/* 8 sequences of different prompt lengths, G tokens each, greedy or sampled (seeded) with
 * top-k logprobs. */
static void generate(pe_engine *e, int vocab, int G, int sampled, answers *out)
{
    static const size_t lens[NSEQ] = {1, 40, 7, 25, 12, 18, 3, 31};
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nseq(); i++) {
        int32_t prompt[MAXPROMPT];
        tm_tokens(prompt, lens[i], vocab, 100 + (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = lens[i];
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.user = (void *)(intptr_t)i;
        if (sampled) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_k = 40;
            p.sampling.top_p = 0.95f;
            p.sampling.seed = 7 + (uint64_t)i;
            p.logprobs = TOPK;
        }
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit: %s", pe_last_error());
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        assert_true(ev.finish == PE_FINISH_NONE || ev.finish == PE_FINISH_LENGTH);
        if (ev.token < 0)
            continue;
        int k = out->ntok[i]++;
        assert_true(k < MAXG);
        out->tok[i][k] = ev.token;
        for (int j = 0; j < ev.nlogprobs && j < TOPK; j++) {
            out->top[i][k][j] = ev.top_logprobs[j];
            out->top_ids[i][k][j] = ev.top_tokens[j];
        }
    }
}

static void expect_same_answers(const answers *one, const answers *grid, int G,
                                const char *what)
{
    for (int i = 0; i < nseq(); i++) {
        assert_int_equal(grid->ntok[i], G);
        for (int k = 0; k < G; k++) {
            if (grid->tok[i][k] != one->tok[i][k])
                fail_msg("%s: sequence %d token %d is %d, one device's %d", what, i, k,
                         grid->tok[i][k], one->tok[i][k]);
            for (int j = 0; j < TOPK; j++) {
                assert_int_equal(grid->top_ids[i][k][j], one->top_ids[i][k][j]);
                if (fabsf(grid->top[i][k][j] - one->top[i][k][j]) > 1e-4f)
                    fail_msg("%s: sequence %d token %d logprob %d: %g vs one device's %g", what,
                             i, k, j, (double)grid->top[i][k][j], (double)one->top[i][k][j]);
            }
        }
    }
}

/* pe_score at every position of a 20-token prompt: (20, vocab) logits. */
static float *score_all(pe_engine *e, int vocab)
{
    enum { N = 20 };
    int32_t prompt[N];
    tm_tokens(prompt, N, vocab, 55);
    float *logits = malloc((size_t)N * (size_t)vocab * sizeof *logits);
    assert_non_null(logits);
    if (pe_score(e, prompt, N, 1, logits) != PE_OK)
        fail_msg("pe_score: %s", pe_last_error());
    return logits;
}

/* Every grid; under valgrind only grid number `small`, none when it is negative (the
 * tools' time is short: the other model's grid covers the same code). */
static void every_grid_gives_one_devices_answers(const char *dir, int vocab, int small)
{
    if (tu_small() && small < 0)
        return;
    static const int repeated[2] = {0, 0}, eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const struct {
        int dp, pp, tp;
        const int *devs;
    } grids[] = {{1, 1, 2, repeated}, {1, 1, 4, eight}, {1, 2, 1, eight}, {1, 4, 1, eight},
                 {2, 1, 2, eight},    {2, 2, 1, eight}, {1, 2, 2, eight}, {2, 2, 2, eight}};
    const int G = (int)tu_size(MAXG, 6);
    static answers one_greedy, one_sampled, got;
    static const int single[1] = {0};
    pe_engine *e = grid_engine(dir, 1, 1, 1, single);
    generate(e, vocab, G, 0, &one_greedy);
    generate(e, vocab, G, 1, &one_sampled);
    float *one_logits = score_all(e, vocab);
    pe_engine_destroy(e);
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        if (tu_small() && (int)g != small)
            continue;
        char what[96];
        snprintf(what, sizeof what, "%s dp=%d pp=%d tp=%d", dir, grids[g].dp, grids[g].pp,
                 grids[g].tp);
        e = grid_engine(dir, grids[g].dp, grids[g].pp, grids[g].tp, grids[g].devs);
        generate(e, vocab, G, 0, &got);
        expect_same_answers(&one_greedy, &got, G, what);
        generate(e, vocab, G, 1, &got);
        expect_same_answers(&one_sampled, &got, G, what);
        float *logits = score_all(e, vocab);
        double d = 0, m = 0;
        for (size_t i = 0; i < (size_t)20 * (size_t)vocab; i++) {
            d = fmax(d, fabs((double)logits[i] - one_logits[i]));
            m = fmax(m, fabs((double)one_logits[i]));
        }
        if (!(d <= 1e-4 * m))
            fail_msg("%s: logits differ by %g, scale %g", what, d, m);
        free(logits);
        pe_engine_destroy(e);
    }
    free(one_logits);
}

static void gpt2_with_a_padded_vocabulary_matches_one_device_on_every_grid(void **state)
{
    (void)state;
    every_grid_gives_one_devices_answers(gpt2_dir, gpt2_spec.vocab, 6); /* pp2 x tp2 */
}

static void llama_with_replicated_kv_heads_matches_one_device_on_every_grid(void **state)
{
    (void)state;
    every_grid_gives_one_devices_answers(llama_dir, llama_spec.vocab, -1);
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
    assert_int_equal(en_replica_sequences(e, 0), 4);
    assert_int_equal(en_replica_sequences(e, 1), 4);
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
        cmocka_unit_test(a_tp_that_does_not_divide_the_heads_lists_the_ones_that_do),
        cmocka_unit_test(stages_are_planned_by_blocks),
        cmocka_unit_test(a_burst_of_sequences_is_spread_over_the_replicas),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
