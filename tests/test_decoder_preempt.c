/* test_decoder_preempt.c: PE_KV_PREEMPT on a real decoder (host backend). Eight prompts share
 * a 40-token prefix (a system prompt) and differ after it; they run on a KV pool far too
 * small for all of them at their full length, so that sequences are preempted and computed
 * again, and their shared prefix is found in the prefix cache. Each must get the tokens it
 * gets on one device with a pool that holds everything under promises (PE_KV_WAIT, no
 * prefix caching), whose steps never preempt nor share, with the logprob of each token
 * within 1e-3 (a greedy token of this tiny model can survive keys and values read from the
 * wrong block; its logprob does not):
 *   - greedy, on one device and on tp 2, pp 2 (stream, 2 micro-batches) and dp 2;
 *   - sampled (temperature, top-k, a seed each), on one device: a recomputed sequence draws
 *     as it would have;
 * and pe_engine_info must count preemptions and prefix hits, with no block held at the end;
 * PE_KV_PREEMPT with prefix caching is pe_config_init's, and a kv_full that names no mode is
 * refused with the modes there are.
 */
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "test_models.h"

static char llama_dir[512];
static pe_gen_spec llama_spec;

enum { NSEQ = 8, G = 24, PREFIX = 40 };

static int setup(void **state)
{
    (void)state;
    tm_tiny(&llama_spec, PE_GEN_LLAMA, 41);
    llama_spec.layers = 2;
    tm_write(&llama_spec, "preempt_llama", llama_dir, sizeof llama_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tm_remove(llama_dir);
    return 0;
}

/* An engine on the grid; small_pool: 160 positions (10 blocks) under PE_KV_PREEMPT with
 * prefix caching; else the default pool under PE_KV_WAIT without it. */
static pe_engine *engine(int dp, int pp, int tp, int small_pool)
{
    static const int devs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp * tp;
    cfg.devices = devs;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.threads = 1;
    if (pp > 1) {
        cfg.schedule = PE_SCHED_STREAM;
        cfg.microbatches = 2;
    }
    if (small_pool) {
        cfg.kv_tokens = 160;
    } else {
        cfg.kv_full = PE_KV_WAIT;
        cfg.prefix_caching = 0;
    }
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("pe_engine_create dp=%d pp=%d tp=%d: %s", dp, pp, tp, pe_last_error());
    if (pe_engine_load(e, llama_dir) != PE_OK)
        fail_msg("pe_engine_load: %s", pe_last_error());
    return e;
}

typedef struct tokens {
    int32_t id[NSEQ][G];
    float logprob[NSEQ][G];
} tokens;

/* The tokens of the prompts, all submitted at once: the shared prefix, then a tail of 1 to
 * 22 tokens of each; sampled: temperature 0.8, top-k 20, a seed each. */
static void generate(pe_engine *e, int sampled, tokens *out)
{
    const int n = tu_small() ? 4 : NSEQ;
    int32_t prefix[PREFIX];
    tm_tokens(prefix, PREFIX, llama_spec.vocab, 500);
    memset(out, 0xff, sizeof *out);
    for (int i = 0; i < n; i++) {
        int32_t prompt[PREFIX + 22];
        const size_t tail = 1 + (size_t)(i * 3) % 22;
        memcpy(prompt, prefix, sizeof prefix);
        tm_tokens(prompt + PREFIX, tail, llama_spec.vocab, 600 + (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = PREFIX + tail;
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.logprobs = 1;
        if (sampled) {
            p.sampling.temperature = 0.8f;
            p.sampling.top_k = 20;
            p.sampling.seed = 70 + (uint64_t)i;
        }
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit: %s", pe_last_error());
    }
    int got[NSEQ] = {0};
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        const int i = (int)(intptr_t)ev.user;
        if (ev.status != PE_OK)
            fail_msg("sequence %d ended with %d: %s", i, (int)ev.status, pe_last_error());
        if (ev.token >= 0) {
            assert_true(got[i] < G);
            out->logprob[i][got[i]] = ev.logprob;
            out->id[i][got[i]++] = ev.token;
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(got[i], G);
}

static void assert_same(const tokens *want, const tokens *got, const char *what)
{
    for (int i = 0; i < NSEQ; i++)
        for (int k = 0; k < G; k++)
            if (got->id[i][k] != want->id[i][k] ||
                fabsf(got->logprob[i][k] - want->logprob[i][k]) > 1e-3f)
                fail_msg("%s: sequence %d token %d is %d (logprob %.6f), %d (%.6f) with a pool "
                         "that holds all", what, i, k, (int)got->id[i][k], got->logprob[i][k],
                         (int)want->id[i][k], want->logprob[i][k]);
}

/* The engine's counts, once every replica published its idle state (at most 5 s). */
static void assert_preempted_found_and_idle(pe_engine *e, const char *what)
{
    pe_engine_info info;
    for (int tries = 0; tries < 500; tries++) {
        assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
        if (info.kv_blocks_used == 0)
            break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (info.kv_preemptions <= 0 || info.prefix_hit_tokens <= 0 || info.kv_blocks_used != 0)
        fail_msg("%s: %ld preemptions, %ld prefix positions found of %ld, %zu blocks held",
                 what, info.kv_preemptions, info.prefix_hit_tokens, info.prefix_asked_tokens,
                 info.kv_blocks_used);
    assert_true(info.prefix_hit_tokens <= info.prefix_asked_tokens);
}

static void a_small_pool_preempts_shares_prefixes_and_keeps_every_greedy_token(void **state)
{
    (void)state;
    static tokens whole, small;
    pe_engine *e = engine(1, 1, 1, 0);
    generate(e, 0, &whole);
    pe_engine_destroy(e);
    const struct {
        int dp, pp, tp;
        const char *name;
    } grids[] = {{1, 1, 1, "one device"}, {1, 1, 2, "tp 2"}, {1, 2, 1, "pp 2"}, {2, 1, 1, "dp 2"}};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        if (tu_small() && g != 0 && g != 2)
            continue;
        e = engine(grids[g].dp, grids[g].pp, grids[g].tp, 1);
        generate(e, 0, &small);
        assert_same(&whole, &small, grids[g].name);
        if (grids[g].dp == 1) /* dp 2: two pools, each may hold its half */
            assert_preempted_found_and_idle(e, grids[g].name);
        pe_engine_destroy(e);
    }
}

static void a_recomputed_sequence_draws_as_it_would_have(void **state)
{
    (void)state;
    static tokens whole, small;
    pe_engine *e = engine(1, 1, 1, 0);
    generate(e, 1, &whole);
    pe_engine_destroy(e);
    e = engine(1, 1, 1, 1);
    generate(e, 1, &small);
    assert_same(&whole, &small, "sampled, one device");
    assert_preempted_found_and_idle(e, "sampled, one device");
    pe_engine_destroy(e);
}

/* A kv_full that names no mode is refused at create, with the modes there are. */
static void an_unknown_kv_full_is_refused_with_the_modes(void **state)
{
    (void)state;
    static const int devs[1] = {0};
    pe_config cfg;
    pe_config_init(&cfg);
    assert_int_equal(cfg.kv_full, PE_KV_PREEMPT); /* the default */
    assert_int_equal(cfg.prefix_caching, 1);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 1;
    cfg.devices = devs;
    cfg.kv_full = (pe_kv_full)7;
    pe_engine *e = NULL;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_EINVAL);
    assert_null(e);
    assert_non_null(strstr(pe_last_error(), "unknown kv_full 7"));
    assert_non_null(strstr(pe_last_error(), "PE_KV_PREEMPT, PE_KV_WAIT or PE_KV_REFUSE"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_small_pool_preempts_shares_prefixes_and_keeps_every_greedy_token),
        cmocka_unit_test(a_recomputed_sequence_draws_as_it_would_have),
        cmocka_unit_test(an_unknown_kv_full_is_refused_with_the_modes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
