/* test_structured.c: structured output (pe_seq_params.grammar, JSON mode) in the engine,
 * against a reference that knows nothing of its masks, its steps or its grids.
 *
 * The model is the tiny GPT-2 with a vocabulary of 253 (not a multiple of 2: the TP head's
 * last shard is padded, and each rank masks its own ids from its first). Its grammar is
 * made over a table of token bytes written here: JSON's pieces ("{", "\":", "true", "\\u",
 * a UTF-8 character whole and split, a surrogate and a control byte that never fit, ...),
 * two special tokens, and seeded letters for the rest.
 *
 * The reference decodes greedily with pe_score: at each step the last position's logits,
 * the test's logit bias added, and the largest among the tokens whose bytes tx_json (the
 * byte machine, test_grammar checks it against a parser) takes after the text so far; it
 * ends where the object closes. The engine's JSON-mode answers must be the reference's on
 * one device, and one device's on tp 2 (a repeated device), pp 2, dp 2 and pp 2 x tp 2,
 * greedy and sampled (with and without a top-k: TP gathers candidates, or the rows whole),
 * and with drafts. Every sampled token keeps the text a JSON object's beginning, and a
 * sequence ends with PE_FINISH_GRAMMAR exactly where the object closes.
 *
 * A JSON schema's grammar (pe_grammar_json_schema over the same table) likewise: greedy
 * against the reference (tx_grammar_allows in place of tx_json), and tp 2 and drafts against
 * one device, greedy and sampled. And a regex's (pe_grammar_regex), with the model's eos
 * allowed: where its text is a whole match that may go on, the reference takes eos among
 * the candidates, and a sequence that samples it ends there with PE_FINISH_EOS.
 *
 * And: a grammar over more ids than the model has is refused at submit, naming both; a
 * vocabulary in which no token continues the text ends the sequence with PE_EINVAL.
 *
 * Under valgrind (PE_TEST_SMALL): 4 sequences of 12 tokens, greedy and sampled with a
 * top-k, pp 2 x tp 2 alone. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_generate.h"
#include "kernels/sample.h"
#include "test_models.h"
#include "text/grammar.h"

enum { V = 253, NSPECIAL = 2, MAXPIECE = 8 };

static char dir[512];
static pe_gen_spec spec;
static char *bytes[V];
static size_t lens[V];
static uint8_t special[V];
static pe_grammar *grammar;  /* JSON mode */
static pe_grammar *schema;   /* a JSON schema over grammar's table (schema_text) */
static pe_grammar *regex;    /* a regex over grammar's table (regex_text) */
static const pe_grammar *active; /* the one the runs use */
static int with_eos;         /* the runs' sequences may end at the model's eos (V - 1) */

/* Properties in order, some optional, of every kind the table's tokens can write (a map
 * too, and integers and numbers with bounds). */
static const char *const schema_text =
    "{\"type\": \"object\", \"required\": [\"name\"], \"properties\": {"
    "\"name\": {\"type\": \"string\"}, \"key\": {\"enum\": [true, null, \"a\"]}, "
    "\"value\": {\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": -5, "
    "\"maximum\": 120}, \"maxItems\": 3},"
    "\"b\": {\"anyOf\": [{\"type\": \"number\", \"minimum\": -2.5, "
    "\"exclusiveMaximum\": 10}, {\"type\": \"object\", "
    "\"additionalProperties\": {\"type\": \"integer\"}}]}}}";

/* Up to 4 values, the numbers unbounded: a whole match may go on after each digit. */
static const char *const regex_text =
    "(true|false|null|-?[0-9]+)(, ?(true|false|null|-?[0-9]+)){0,3}";

/* The bias every sequence (and the reference) gives: closers and short values are pushed,
 * so that some objects close within the run. */
static const pe_logit_bias bias[] = {{1, 2.5f}, {4, 1.0f}, {5, 1.0f}, {33, 3.0f}};

static const char *const pieces[] = {
    "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\n  ", "\n    ", "\t", "0", "1", "2", "5",
    "9", "-", ".", "e", "E", "+", "true", "false", "null", "tr", "ue", "fa", "lse", "nu", "ll",
    "{\"", "\"}", "\":", "\",", "\": ", ", \"", "[1", "],", "}]", "}}", "\\", "\\n", "\\\"",
    "\\u", "00e9", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\xf0\x9f\x98\x80",
    "\xed\xa0\x80", "\x01", "a", "b", "key", "name", "value", " x", "\r"};

static int setup(void **state)
{
    (void)state;
    tm_tiny(&spec, PE_GEN_GPT2, 41);
    spec.vocab = V;
    spec.bos_token_id = spec.eos_token_id = V - 1;
    tm_write(&spec, "structured", dir, sizeof dir);
    const size_t np = sizeof pieces / sizeof pieces[0];
    uint64_t rng = 99;
    for (int id = 0; id < V; id++) {
        if (id < (int)np) {
            bytes[id] = strdup(pieces[id]);
        } else { /* 1 to 5 letters, some after a space */
            char w[MAXPIECE];
            int n = 1 + (int)(pe_k_splitmix64(&rng) % 5), k = 0;
            if (pe_k_splitmix64(&rng) % 3 == 0)
                w[k++] = ' ';
            while (k < n + (w[0] == ' '))
                w[k++] = (char)('a' + pe_k_splitmix64(&rng) % 26);
            w[k] = '\0';
            bytes[id] = strdup(w);
        }
        assert_non_null(bytes[id]);
        lens[id] = strlen(bytes[id]);
        special[id] = id >= V - NSPECIAL; /* e.g. "<|endoftext|>": never in the text */
    }
    assert_int_equal(tx_grammar_json_from_tokens((const char *const *)bytes, lens, special, V,
                                                 &grammar),
                     PE_OK);
    if (pe_grammar_json_schema(grammar, schema_text, &schema) != PE_OK)
        fail_msg("the test's schema: %s", pe_last_error());
    if (pe_grammar_regex(grammar, regex_text, &regex) != PE_OK)
        fail_msg("the test's regex: %s", pe_last_error());
    active = grammar;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pe_grammar_free(schema);
    pe_grammar_free(regex);
    pe_grammar_free(grammar);
    for (int id = 0; id < V; id++)
        free(bytes[id]);
    tm_remove(dir);
    return 0;
}

static int nseq(void) { return tu_small() ? 4 : TG_NSEQ; }
static int ntokens(void) { return (int)tu_size(40, 12); }

static pe_engine *engine(int dp, int pp, int tp, const int *devs, int spec_tokens)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp * tp;
    cfg.devices = devs;
    cfg.dp = dp, cfg.pp = pp, cfg.tp = tp;
    cfg.threads = 1;
    cfg.spec_tokens = spec_tokens;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK)
        fail_msg("engine dp=%d pp=%d tp=%d: %s", dp, pp, tp, pe_last_error());
    return e;
}

/* One run's answers: tokens, how each sequence ended. */
typedef struct answers {
    int32_t tok[TG_NSEQ][TG_MAXG];
    int ntok[TG_NSEQ];
    pe_finish finish[TG_NSEQ];
} answers;

typedef enum how { GREEDY, SAMPLED_TOP_K, SAMPLED_ALL } how;

/* Every sequence in the active grammar with the test's bias, `how`, seed 5 + i; all events
 * taken. */
static void run(pe_engine *e, how h, answers *out)
{
    memset(out, 0, sizeof *out);
    int32_t prompts[TG_NSEQ][TG_MAXPROMPT];
    for (int i = 0; i < nseq(); i++) {
        pe_seq_params p;
        tg_params(&p, prompts[i], i, V - NSPECIAL, 17, ntokens());
        p.grammar = active;
        p.ignore_eos = !with_eos;
        p.logit_bias = bias;
        p.nlogit_bias = sizeof bias / sizeof bias[0];
        if (h != GREEDY) {
            p.sampling.temperature = 0.8f;
            p.sampling.top_k = h == SAMPLED_TOP_K ? 40 : 0;
            p.sampling.seed = 5 + (uint64_t)i;
        }
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            fail_msg("pe_seq_submit: %s", pe_last_error());
    }
    for (int ended = 0; ended < nseq();) {
        pe_token_event ev;
        assert_int_equal(pe_seq_wait(e, &ev), PE_OK);
        const int i = (int)(intptr_t)ev.user;
        if (ev.finish == PE_FINISH_ERROR)
            fail_msg("sequence %d failed: %s", i, pe_status_str(ev.status));
        assert_true(ev.token >= 0 && out->ntok[i] < TG_MAXG);
        out->tok[i][out->ntok[i]++] = ev.token;
        if (ev.finish != PE_FINISH_NONE) {
            out->finish[i] = ev.finish;
            ended++;
        }
    }
}

/* 1 when eos may be sampled after state j (the reference's rule, from the machine's
 * verdicts). */
static int eos_allowed(const tx_grammar_state *j)
{
    return with_eos && tx_grammar_may_end(active, j);
}

/* Each sequence's tokens keep the text in the active grammar (the byte machine's own
 * verdict on the token's bytes), and it ends with PE_FINISH_GRAMMAR exactly where the
 * text is complete, with PE_FINISH_EOS at an eos where it may end, or at its token limit.
 * Returns the texts completed (by either). */
static int expect_json(const answers *a, const char *what)
{
    int closed = 0;
    for (int i = 0; i < nseq(); i++) {
        tx_grammar_state j;
        tx_grammar_start(active, &j);
        for (int k = 0; k < a->ntok[i]; k++) {
            const int32_t t = a->tok[i][k];
            if (t == V - 1 && k == a->ntok[i] - 1 && a->finish[i] == PE_FINISH_EOS) {
                if (!eos_allowed(&j))
                    fail_msg("%s: sequence %d ended at eos where its text may not", what, i);
                break;
            }
            if (special[t] || tx_grammar_accept(active, &j, t) != 0)
                fail_msg("%s: sequence %d token %d (%d, \"%s\") does not continue its JSON",
                         what, i, k, t, bytes[t]);
            const int done = tx_grammar_done(active, &j);
            if (done != (k == a->ntok[i] - 1 && a->finish[i] == PE_FINISH_GRAMMAR))
                fail_msg("%s: sequence %d: the object %s at token %d of %d, finish %d", what, i,
                         done ? "closed" : "is open", k, a->ntok[i], a->finish[i]);
        }
        if (a->finish[i] != PE_FINISH_GRAMMAR && a->finish[i] != PE_FINISH_EOS &&
            (a->finish[i] != PE_FINISH_LENGTH || a->ntok[i] != ntokens()))
            fail_msg("%s: sequence %d ended with finish %d after %d tokens", what, i,
                     a->finish[i], a->ntok[i]);
        closed += a->finish[i] != PE_FINISH_LENGTH;
    }
    return closed;
}

static void expect_same(const answers *want, const answers *got, const char *what)
{
    for (int i = 0; i < nseq(); i++) {
        if (got->ntok[i] != want->ntok[i] || got->finish[i] != want->finish[i])
            fail_msg("%s: sequence %d: %d tokens, finish %d; want %d, finish %d", what, i,
                     got->ntok[i], got->finish[i], want->ntok[i], want->finish[i]);
        for (int k = 0; k < want->ntok[i]; k++)
            if (got->tok[i][k] != want->tok[i][k])
                fail_msg("%s: sequence %d token %d is %d; want %d", what, i, k,
                         got->tok[i][k], want->tok[i][k]);
    }
}

/* The reference's greedy JSON-mode answer of sequence i, from pe_score's logits; stops
 * comparing (*agreed = tokens checked) where its best two allowed logits are within 1e-4
 * of each other and the engine chose the other (a step's sums differ from pe_score's in
 * their last bits). */
static void reference(pe_engine *e, int i, const answers *got, int *agreed)
{
    int32_t tokens[TG_MAXPROMPT + TG_MAXG];
    size_t n = tg_prompt(tokens, i, V - NSPECIAL, 17);
    float logits[V];
    tx_grammar_state j;
    tx_grammar_start(active, &j);
    *agreed = 0;
    for (int k = 0; k < ntokens(); k++) {
        assert_int_equal(pe_score(e, tokens, n, 0, logits), PE_OK);
        for (size_t b = 0; b < sizeof bias / sizeof bias[0]; b++)
            logits[bias[b].token] += bias[b].bias;
        int best = -1, second = -1;
        for (int id = 0; id < V; id++) {
            if (special[id] ? !(id == V - 1 && eos_allowed(&j))
                            : !tx_grammar_allows(active, &j, id))
                continue;
            if (best < 0 || logits[id] > logits[best])
                second = best, best = id;
            else if (second < 0 || logits[id] > logits[second])
                second = id;
        }
        if (best < 0)
            fail_msg("reference: sequence %d token %d: no token continues the JSON", i, k);
        if (k >= got->ntok[i])
            fail_msg("sequence %d ended after %d tokens; the reference goes on", i, k);
        if (got->tok[i][k] != best) {
            if (got->tok[i][k] == second && logits[best] - logits[second] <= 1e-4f)
                return; /* a near tie */
            fail_msg("sequence %d token %d: the engine chose %d (\"%s\"), the reference %d "
                     "(\"%s\")", i, k, got->tok[i][k], bytes[got->tok[i][k]], best,
                     bytes[best]);
        }
        ++*agreed;
        if (best == V - 1) /* eos: the text ends */
            break;
        (void)tx_grammar_accept(active, &j, best);
        tokens[n++] = best;
        if (tx_grammar_done(active, &j))
            break;
    }
    if (*agreed != got->ntok[i])
        fail_msg("sequence %d: %d tokens, the reference %d", i, got->ntok[i], *agreed);
}

static const int one[1] = {0}, two[2] = {0, 0}, four[4] = {0, 1, 2, 3};

static void greedy_json_mode_is_the_references_argmax_over_the_allowed_tokens(void **state)
{
    (void)state;
    pe_engine *e = engine(1, 1, 1, one, 0);
    static answers got;
    run(e, GREEDY, &got);
    const int closed = expect_json(&got, "greedy");
    int checked = 0;
    for (int i = 0; i < nseq(); i++) {
        int agreed;
        reference(e, i, &got, &agreed);
        checked += agreed;
    }
    print_message("greedy: %d of %d objects closed, %d tokens checked against the reference\n",
                  closed, nseq(), checked);
    if (!tu_small())
        assert_true(closed > 0 && closed < nseq()); /* both ends are exercised */
    pe_engine_destroy(e);
}

typedef struct grid {
    int dp, pp, tp;
    const int *devs;
} grid;

static void every_grid_and_drafts_give_one_devices_json_answers(void **state)
{
    (void)state;
    static const grid grids[] = {
        {1, 1, 2, two}, {1, 2, 1, four}, {2, 1, 1, four}, {1, 2, 2, four}};
    static answers want[3], got;
    static const char *const names[3] = {"greedy", "sampled, top-k 40", "sampled"};
    const int hows = tu_small() ? 2 : 3;
    pe_engine *e = engine(1, 1, 1, one, 0);
    for (int h = 0; h < hows; h++) {
        run(e, (how)h, &want[h]);
        print_message("%s: %d of %d objects closed on one device\n", names[h],
                      expect_json(&want[h], names[h]), nseq());
    }
    pe_engine_destroy(e);
    const size_t ngrids = sizeof grids / sizeof grids[0];
    for (size_t g = 0; g <= ngrids; g++) { /* the last: one device with 4 drafts a decode */
        if (tu_small() && g != ngrids - 1)
            continue; /* (the drafts' rows: test_scheduler's hand case under the tools) */
        const int drafts = g == ngrids;
        const grid gr = drafts ? (grid){1, 1, 1, one} : grids[g];
        e = engine(gr.dp, gr.pp, gr.tp, gr.devs, drafts ? 4 : 0);
        for (int h = 0; h < hows; h++) {
            char what[96];
            snprintf(what, sizeof what, "%s, dp=%d pp=%d tp=%d%s", names[h], gr.dp, gr.pp,
                     gr.tp, drafts ? " with drafts" : "");
            run(e, (how)h, &got);
            expect_json(&got, what);
            expect_same(&want[h], &got, what);
        }
        if (drafts) {
            pe_engine_info info;
            assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
            print_message("drafts: %ld of %ld accepted\n", info.spec_accepted_tokens,
                          info.spec_drafted_tokens);
        }
        pe_engine_destroy(e);
    }
}

/* Grammar g: greedy answers are the reference's argmax over the tokens its machine allows;
 * tp 2 and drafts give one device's, greedy and sampled. Counts one device's answers by
 * how they ended into ends (by pe_finish). */
static void follow_on_one_device_tp_and_with_drafts(const pe_grammar *g, const char *name,
                                                    int ends[PE_FINISH_GRAMMAR + 1])
{
    active = g;
    static answers want[2], got;
    char what[96];
    pe_engine *e = engine(1, 1, 1, one, 0);
    run(e, GREEDY, &want[0]);
    snprintf(what, sizeof what, "%s, greedy", name);
    const int closed = expect_json(&want[0], what);
    int checked = 0;
    for (int i = 0; i < nseq(); i++) {
        int agreed;
        reference(e, i, &want[0], &agreed);
        checked += agreed;
    }
    run(e, SAMPLED_TOP_K, &want[1]);
    snprintf(what, sizeof what, "%s, sampled", name);
    print_message("%s: greedy %d of %d texts complete (%d tokens checked against the "
                  "reference), sampled %d\n", name, closed, nseq(), checked,
                  expect_json(&want[1], what));
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < nseq(); i++)
            ends[want[h].finish[i]]++;
    pe_engine_destroy(e);
    for (int drafts = 0; drafts < 2; drafts++) {
        e = drafts ? engine(1, 1, 1, one, 4) : engine(1, 1, 2, two, 0);
        for (int h = 0; h < 2; h++) {
            snprintf(what, sizeof what, "%s%s", name, drafts ? " with drafts" : ", tp=2");
            run(e, h ? SAMPLED_TOP_K : GREEDY, &got);
            expect_json(&got, what);
            expect_same(&want[h], &got, what);
        }
        pe_engine_destroy(e);
    }
    active = grammar;
}

static void a_json_schema_is_followed_on_one_device_tp_and_with_drafts(void **state)
{
    (void)state;
    int ends[PE_FINISH_GRAMMAR + 1] = {0};
    follow_on_one_device_tp_and_with_drafts(schema, "schema", ends);
}

/* A regex, eos allowed where its match may end: eos among the reference's candidates. */
static void a_regex_is_followed_and_may_end_at_eos(void **state)
{
    (void)state;
    with_eos = 1;
    int ends[PE_FINISH_GRAMMAR + 1] = {0};
    follow_on_one_device_tp_and_with_drafts(regex, "regex", ends);
    with_eos = 0;
    print_message("regex: %d ended at eos, %d at the last value, %d at the limit\n",
                  ends[PE_FINISH_EOS], ends[PE_FINISH_GRAMMAR], ends[PE_FINISH_LENGTH]);
    if (!tu_small()) /* both ends are exercised */
        assert_true(ends[PE_FINISH_EOS] > 0 && ends[PE_FINISH_GRAMMAR] > 0);
}

/* A grammar over more ids than the model has is refused at submit, naming both counts. */
static void a_grammar_over_a_larger_vocabulary_is_refused(void **state)
{
    (void)state;
    const char *big[V + 1];
    size_t big_len[V + 1];
    for (int id = 0; id <= V; id++)
        big[id] = "a", big_len[id] = 1;
    pe_grammar *g = NULL;
    assert_int_equal(tx_grammar_json_from_tokens(big, big_len, NULL, V + 1, &g), PE_OK);
    pe_engine *e = engine(1, 1, 1, one, 0);
    int32_t prompt[TG_MAXPROMPT];
    pe_seq_params p;
    tg_params(&p, prompt, 0, V - NSPECIAL, 17, 4);
    p.grammar = g;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "254 ids"));
    assert_non_null(strstr(pe_last_error(), "(253)"));
    pe_engine_destroy(e);
    pe_grammar_free(g);
}

/* A vocabulary with "{" and letters only: after "{" no token fits, and the sequence ends
 * with PE_EINVAL after that one token (its event never comes). */
static void no_token_that_continues_the_text_ends_the_sequence_with_einval(void **state)
{
    (void)state;
    const char *few[V];
    size_t few_len[V];
    for (int id = 0; id < V; id++)
        few[id] = id == 7 ? "{" : "ab", few_len[id] = id == 7 ? 1 : 2;
    pe_grammar *g = NULL;
    assert_int_equal(tx_grammar_json_from_tokens(few, few_len, NULL, V, &g), PE_OK);
    pe_engine *e = engine(1, 1, 1, one, 0);
    int32_t prompt[TG_MAXPROMPT];
    pe_seq_params p;
    tg_params(&p, prompt, 1, V - NSPECIAL, 17, 8);
    p.grammar = g;
    uint64_t id;
    assert_int_equal(pe_seq_submit(e, &p, &id), PE_OK);
    pe_token_event ev;
    assert_int_equal(pe_seq_wait(e, &ev), PE_OK);
    assert_int_equal(ev.token, 7); /* "{": the one token allowed first */
    assert_int_equal(ev.finish, PE_FINISH_NONE);
    assert_int_equal(pe_seq_wait(e, &ev), PE_OK);
    assert_int_equal(ev.finish, PE_FINISH_ERROR);
    assert_int_equal(ev.status, PE_EINVAL);
    pe_engine_destroy(e);
    pe_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_json_mode_is_the_references_argmax_over_the_allowed_tokens),
        cmocka_unit_test(every_grid_and_drafts_give_one_devices_json_answers),
        cmocka_unit_test(a_json_schema_is_followed_on_one_device_tp_and_with_drafts),
        cmocka_unit_test(a_regex_is_followed_and_may_end_at_eos),
        cmocka_unit_test(a_grammar_over_a_larger_vocabulary_is_refused),
        cmocka_unit_test(no_token_that_continues_the_text_ends_the_sequence_with_einval),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
