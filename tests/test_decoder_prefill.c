/* test_decoder_prefill.c: PP prefill in micro-batches. Under the stream and gpipe schedules
 * a prompt is cut into m chunks (pe_config.microbatches) that go through the stages in the
 * steps in flight (scheduler.h); gpipe runs them in fill-drain rounds. Each must give one
 * device's answers, and the trace must show the prompt's chunks:
 *   - greedy: the same 16 tokens for 6 sequences of prompt lengths 1 to 97 (a prompt of 97
 *     in 4 chunks of 25, 25, 25, 22; of 5 in 4 of 2, 2, 1), on pp 2 (devices 0,0), pp 4
 *     and pp 2 x tp 2;
 *   - a lone prompt of 60 tokens under m = 4 runs as 4 prefill steps at every stage (the
 *     trace's compute spans by phase), and its first token is one device's.
 */
#include <stdint.h>
#include <string.h>

#include "test_models.h"

static char llama_dir[512];
static pe_gen_spec llama_spec;

static int setup(void **state)
{
    (void)state;
    tm_tiny(&llama_spec, PE_GEN_LLAMA, 31);
    llama_spec.layers = 4;
    tm_write(&llama_spec, "prefill_llama", llama_dir, sizeof llama_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tm_remove(llama_dir);
    return 0;
}

static pe_engine *engine(int pp, int tp, pe_schedule sched, int m, size_t trace)
{
    static const int devs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = pp * tp;
    cfg.devices = devs;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.threads = 1;
    cfg.schedule = sched;
    cfg.microbatches = m;
    cfg.trace_capacity = trace;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("pe_engine_create pp=%d tp=%d: %s", pp, tp, pe_last_error());
    if (pe_engine_load(e, llama_dir) != PE_OK)
        fail_msg("pe_engine_load: %s", pe_last_error());
    return e;
}

enum { NSEQ = 6, G = 16 };

/* Greedy tokens (NSEQ, G) of prompts of different lengths, all submitted at once. */
static void generate(pe_engine *e, int32_t out[NSEQ][G])
{
    static const size_t lens[NSEQ] = {1, 97, 5, 40, 13, 64};
    const int n = tu_small() ? 3 : NSEQ;
    memset(out, 0xff, sizeof(int32_t) * NSEQ * G);
    for (int i = 0; i < n; i++) {
        int32_t prompt[97];
        tm_tokens(prompt, lens[i], llama_spec.vocab, 300 + (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = lens[i];
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit: %s", pe_last_error());
    }
    int got[NSEQ] = {0};
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        if (ev.status != PE_OK)
            fail_msg("sequence %d ended with %d: %s", i, (int)ev.status, pe_last_error());
        if (ev.token >= 0) {
            assert_true(got[i] < G);
            out[i][got[i]++] = ev.token;
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(got[i], G);
}

static void prompts_in_micro_batches_give_one_devices_tokens(void **state)
{
    (void)state;
    static int32_t one[NSEQ][G], grid[NSEQ][G];
    pe_engine *e = engine(1, 1, PE_SCHED_NAIVE, 1, 0);
    generate(e, one);
    pe_engine_destroy(e);
    const struct {
        int pp, tp;
        pe_schedule sched;
        int m;
    } cases[] = {{2, 1, PE_SCHED_STREAM, 4}, {2, 1, PE_SCHED_GPIPE, 4}, {4, 1, PE_SCHED_STREAM, 3},
                 {4, 1, PE_SCHED_GPIPE, 8}, {2, 2, PE_SCHED_STREAM, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (tu_small() && c != 0 && c != 1)
            continue;
        e = engine(cases[c].pp, cases[c].tp, cases[c].sched, cases[c].m, 0);
        generate(e, grid);
        pe_engine_destroy(e);
        for (int i = 0; i < NSEQ; i++)
            for (int k = 0; k < G; k++)
                if (grid[i][k] != one[i][k])
                    fail_msg("pp=%d tp=%d %s m=%d: sequence %d token %d is %d, one device's %d",
                             cases[c].pp, cases[c].tp,
                             cases[c].sched == PE_SCHED_GPIPE ? "gpipe" : "stream", cases[c].m,
                             i, k, (int)grid[i][k], (int)one[i][k]);
    }
}

/* The first token of a lone prompt of 60 tokens, and the prefill steps each worker ran. */
static int32_t lone_prompt(pe_engine *e, int pp, int want_steps)
{
    int32_t prompt[60];
    tm_tokens(prompt, 60, llama_spec.vocab, 77);
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = 60;
    p.max_tokens = 1;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_OK);
    int32_t first = -1;
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK)
        if (ev.token >= 0)
            first = ev.token;
    if (want_steps > 0) {
        pe_trace_event *tr = NULL;
        size_t n = 0;
        assert_int_equal(pe_engine_trace(e, &tr, &n), PE_OK);
        int steps[8] = {0};
        for (size_t i = 0; i < n; i++)
            if (tr[i].kind == PE_TRACE_COMPUTE && tr[i].phase == PE_TRACE_PREFILL)
                steps[tr[i].p]++;
        free(tr);
        for (int s = 0; s < pp; s++)
            if (steps[s] != want_steps)
                fail_msg("stage %d ran %d prefill steps, expected %d", s, steps[s], want_steps);
    }
    return first;
}

static void a_lone_prompt_is_cut_into_its_micro_batches(void **state)
{
    (void)state;
    pe_engine *e = engine(1, 1, PE_SCHED_NAIVE, 1, 0);
    int32_t one = lone_prompt(e, 1, 0);
    pe_engine_destroy(e);
    e = engine(2, 1, PE_SCHED_STREAM, 4, 4096);
    assert_int_equal(lone_prompt(e, 2, 4), one); /* 4 chunks of 15 */
    pe_engine_destroy(e);
    e = engine(2, 1, PE_SCHED_NAIVE, 4, 4096); /* naive: one micro-batch, the whole prompt */
    assert_int_equal(lone_prompt(e, 2, 1), one);
    pe_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prompts_in_micro_batches_give_one_devices_tokens),
        cmocka_unit_test(a_lone_prompt_is_cut_into_its_micro_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
