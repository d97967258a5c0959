/* generate.c: "pengine generate": parses its flags, and runs one sequence from a prompt of
 * token ids, its ids printed as they arrive (or one JSON object with --json), its rates on
 * stderr. Text prompts (--prompt, --prompts) run in generate_text.c. */
#include "generate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling_flags.h"

#define GEN_MAX_PROMPT 65536

static int usage_error(const char *msg)
{
    cli_error(msg);
    return CLI_USAGE;
}

/* --tokens: the prompt (a later --tokens replaces it). Returns the exit code, msg set. */
static int set_ids(gen_opts *g, const char *v, char *msg, size_t len)
{
    size_t entries = 1;
    for (const char *p = v; *p; p++)
        entries += *p == ',';
    free(g->ids);
    g->nids = 0;
    g->ids = malloc((entries < GEN_MAX_PROMPT ? entries : GEN_MAX_PROMPT) * sizeof *g->ids);
    if (!g->ids) {
        snprintf(msg, len, "out of memory for a prompt of %zu tokens; give a shorter --tokens",
                 entries);
        return CLI_RUNTIME;
    }
    if (cli_parse_token_ids("--tokens", v, g->ids, GEN_MAX_PROMPT, &g->nids, msg, len))
        return CLI_USAGE;
    return CLI_OK;
}

/* --max-tokens: at least 1; 0 or a negative count is named as such. */
static int set_max_tokens(gen_opts *g, const char *v, char *msg, size_t len)
{
    long x;
    char other[CLI_MSG_LEN];
    if (!cli_parse_long("--max-tokens", v, 1, 1L << 24, &x, msg, len)) {
        g->max_tokens = (int)x;
        return 0;
    }
    if (!cli_parse_long("--max-tokens", v, LONG_MIN, 0, &x, other, sizeof other))
        snprintf(msg, len, "--max-tokens %s generates nothing; give a count of at least 1 (the "
                 "default is 16)", v);
    return -1;
}

/* --stop: one more text stop string. */
static int add_stop(gen_opts *g, const char *v, char *msg, size_t len)
{
    if (!*v) {
        snprintf(msg, len, "--stop is empty, and every text holds the empty string; give the "
                 "text that ends generation, e.g. --stop '.'");
        return -1;
    }
    if (g->nstops == CLI_MAX_STOP_STR) {
        snprintf(msg, len, "more than %d --stop strings; give at most %d", CLI_MAX_STOP_STR,
                 CLI_MAX_STOP_STR);
        return -1;
    }
    g->stops[g->nstops++] = v;
    return 0;
}

/* --choice: one more text the generated text may be. Returns the exit code, msg set. */
static int add_choice(gen_opts *g, const char *v, char *msg, size_t len)
{
    if ((g->nchoices & (g->nchoices - 1)) == 0) { /* 0, 1, 2, 4, ...: full, double it */
        const char **c = realloc(g->choices, (g->nchoices ? 2 * (size_t)g->nchoices : 1) *
                                             sizeof *c);
        if (!c) {
            snprintf(msg, len, "out of memory for %d --choice texts; give fewer",
                     g->nchoices + 1);
            return CLI_RUNTIME;
        }
        g->choices = c;
    }
    g->choices[g->nchoices++] = v;
    return CLI_OK;
}

/* Applies one flag with its value. Returns the exit code, msg set on a failure. */
static int apply_flag(void *ctx, const char *f, const char *v, char *msg, size_t len)
{
    gen_opts *g = ctx;
    long x = 0;
    int bad = 0;
    if (!strcmp(f, "--model")) {
        g->dev.model_path = v;
    } else if (!strcmp(f, "--tokens")) {
        return set_ids(g, v, msg, len);
    } else if (!strcmp(f, "--prompt")) {
        g->prompt = v;
    } else if (!strcmp(f, "--prompts")) {
        g->prompts_file = v;
    } else if (!strcmp(f, "--tokenizer")) {
        if (!*v) {
            snprintf(msg, len, "--tokenizer is empty; give a tokenizer.json, e.g. --tokenizer "
                     "DIR/tokenizer.json");
            bad = 1;
        }
        g->tokenizer = v;
    } else if (!strcmp(f, "--max-tokens")) {
        bad = set_max_tokens(g, v, msg, len);
    } else if (!strcmp(f, "--min-tokens")) {
        bad = cli_parse_long(f, v, 0, 1L << 24, &x, msg, len);
        g->min_tokens = (int)x;
    } else if ((bad = cli_apply_sampling_flag(&g->sampling, f, v, msg, len)) >= 0) {
        /* applied */
    } else if (!strcmp(f, "--logprobs")) {
        bad = cli_parse_long(f, v, 0, PE_MAX_LOGPROBS, &x, msg, len);
        g->logprobs = (int)x;
    } else if (!strcmp(f, "--stop")) {
        bad = add_stop(g, v, msg, len);
    } else if (!strcmp(f, "--grammar")) {
        if ((bad = strcmp(v, "json") != 0))
            snprintf(msg, len, "--grammar %s is not a grammar pengine knows; give --grammar json "
                     "(the text is one JSON object)", v);
        g->grammar = v;
    } else if (!strcmp(f, "--json-schema")) {
        g->schema = v;
        bad = 0;
    } else if (!strcmp(f, "--json-schema-file")) {
        g->schema_file = v;
        bad = 0;
    } else if (!strcmp(f, "--regex")) {
        g->regex = v;
        bad = 0;
    } else if (!strcmp(f, "--choice")) {
        return add_choice(g, v, msg, len);
    } else if (!strcmp(f, "--stop-ids")) {
        bad = cli_parse_token_ids(f, v, g->stop_ids, PE_MAX_STOP, &g->nstop_ids, msg, len);
    } else { /* the device flags, as the main command parses them */
        bad = cli_apply_device_flag(&g->dev, f, v, msg, len) < 0;
    }
    return bad ? CLI_USAGE : CLI_OK;
}

/* The flags that fit together: a model, one prompt, and what its kind takes. */
static int check(const gen_opts *g)
{
    if (!g->dev.model_path)
        return usage_error("generate needs --model DIR; give a decoder directory, e.g. one "
                           "written by pengine gen llama --out DIR");
    int sources = (g->nids > 0) + (g->prompt != NULL) + (g->prompts_file != NULL);
    if (sources == 0)
        return usage_error("generate needs a prompt; give text with --prompt TEXT, a file of "
                           "prompts with --prompts FILE, or token ids with --tokens 1,2,3");
    if (sources > 1)
        return usage_error("--prompt, --prompts and --tokens each give the prompt; give one of "
                           "them");
    if (g->nids > 0 && g->nstops > 0)
        return usage_error("--stop matches text, and a --tokens prompt generates ids; give "
                           "stop ids with --stop-ids LIST, or the prompt as text with --prompt");
    const int grammars = !!g->grammar + !!g->schema + !!g->schema_file + !!g->regex +
                         (g->nchoices > 0);
    if (grammars > 1)
        return usage_error("--grammar, --json-schema, --json-schema-file, --regex and --choice "
                           "each give the grammar the text follows; give one of them (--choice "
                           "once per text)");
    if (g->nids > 0 && grammars) {
        char msg[CLI_MSG_LEN];
        snprintf(msg, sizeof msg, "%s makes a grammar, which needs each token's text, and a "
                 "--tokens prompt runs on ids alone; give the prompt as text with --prompt",
                 gen_grammar_flag(g));
        return usage_error(msg);
    }
    if (g->nids > 0 && g->tokenizer)
        return usage_error("--tokenizer turns text into ids, and --tokens gives ids; drop "
                           "--tokenizer, or give the prompt as text with --prompt");
    if (g->min_tokens > g->max_tokens) {
        char msg[CLI_MSG_LEN];
        snprintf(msg, sizeof msg, "--min-tokens %d is more than --max-tokens %d; give at most "
                 "as many", g->min_tokens, g->max_tokens);
        return usage_error(msg);
    }
    if (g->logprobs > 0 && !g->json)
        return usage_error("--logprobs is printed only in the JSON output; add --json, or drop "
                           "--logprobs");
    return CLI_OK;
}

/* Returns CLI_OK, -1 after --help, or the exit code of an error (printed). */
static int parse(int argc, char **argv, gen_opts *g)
{
    static const char *const with_value[] = {
        "--model", "--tokens", "--prompt", "--prompts", "--tokenizer", "--max-tokens",
        "--min-tokens", CLI_SAMPLING_FLAGS, "--logprobs", "--stop", "--stop-ids",
        "--gpus", "--backend", "--dtype", "--threads", "--kv-tokens", "--dp", "--pp", "--tp",
        "--spec-tokens", "--spec-ngram", "--spec-max-seqs", "--grammar", "--json-schema",
        "--json-schema-file", "--regex", "--choice"};
    const cli_switch switches[] = {{"--json", &g->json}, {"--ignore-eos", &g->ignore_eos}};
    int rc = cli_parse_subcommand(argc, argv, "generate", with_value,
                                  sizeof with_value / sizeof with_value[0], switches,
                                  sizeof switches / sizeof switches[0], apply_flag, g);
    return rc != CLI_OK ? rc : check(g);
}

/* ---- shared by the ids and the text runs ------------------------------------------------ */

const char *gen_grammar_flag(const gen_opts *g)
{
    return g->grammar       ? "--grammar"
           : g->schema      ? "--json-schema"
           : g->schema_file ? "--json-schema-file"
           : g->regex       ? "--regex"
           : g->nchoices    ? "--choice"
                            : NULL;
}

int gen_open(gen_opts *g, pe_engine **e)
{
    char msg[CLI_MSG_LEN];
    if (cli_decoder_grid(&g->dev, msg, sizeof msg)) {
        cli_error(msg);
        return CLI_USAGE;
    }
    return cli_llm_open(&g->dev, e);
}

int gen_batch(const gen_opts *g, int n, const int32_t *const *prompts, const size_t *lens,
              cli_on_event on_event, void *ctx, cli_batch *b)
{
    *b = (cli_batch){.n = n, .prompts = prompts, .lens = lens, .max_tokens = g->max_tokens,
                     .min_tokens = g->min_tokens, .sampling = g->sampling, .logprobs = g->logprobs,
                     .ignore_eos = g->ignore_eos, .grammar = g->compiled, .stop = g->stop_ids,
                     .nstop = (size_t)g->nstop_ids, .on_event = on_event, .ctx = ctx};
    return cli_batch_alloc(b);
}

void gen_json_rates(cJSON *o, const cli_rates *r)
{
    cJSON_AddNumberToObject(o, "ttft_ms", r->ttft_ms);
    cJSON_AddNumberToObject(o, "prefill_tok_s", r->prefill_tok_s);
    cJSON_AddNumberToObject(o, "decode_ms_per_token", r->decode_ms);
    cJSON_AddNumberToObject(o, "decode_tok_s", r->decode_tok_s);
    cJSON_AddNumberToObject(o, "spec_draft_tokens", (double)r->spec_drafted);
    cJSON_AddNumberToObject(o, "spec_accepted_tokens", (double)r->spec_accepted);
}

void gen_json_sequence(cJSON *o, const cli_batch *b, int i)
{
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (int k = 0; k < b->ntok[i]; k++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(b->tokens[i][k]));
    cJSON_AddStringToObject(o, "finish_reason", cli_finish_name(b->finish[i]));
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)b->lens[i]);
    cJSON_AddNumberToObject(o, "completion_tokens", b->ntok[i]);
}

/* As OpenAI's chat completions return them, with ids for tokens. */
void gen_json_logprobs(cJSON *o, const gen_opts *g, const cli_batch *b, int i)
{
    if (!g->logprobs)
        return;
    cJSON *lp = cJSON_AddObjectToObject(o, "logprobs");
    cJSON *content = cJSON_AddArrayToObject(lp, "content");
    for (int k = 0; k < b->ntok[i]; k++) {
        const pe_token_event *ev = &b->events[i][k];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "token", ev->token);
        cJSON_AddNumberToObject(t, "logprob", ev->logprob);
        cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
        for (int j = 0; j < ev->nlogprobs; j++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "token", ev->top_tokens[j]);
            cJSON_AddNumberToObject(x, "logprob", ev->top_logprobs[j]);
            cJSON_AddItemToArray(top, x);
        }
        cJSON_AddItemToArray(content, t);
    }
}

/* ---- a prompt of token ids ---------------------------------------------------------------- */

typedef struct stream_ctx {
    int json;
    int printed;
} stream_ctx;

static int print_token(void *ctx, int seq, const pe_token_event *ev)
{
    stream_ctx *s = ctx;
    (void)seq;
    if (s->json || ev->token < 0)
        return 0;
    printf("%s%d", s->printed++ ? " " : "", (int)ev->token);
    fflush(stdout);
    return 0;
}

static void print_json(const gen_opts *g, const cli_batch *b, const cli_rates *r)
{
    cJSON *o = cJSON_CreateObject();
    gen_json_sequence(o, b, 0);
    gen_json_rates(o, r);
    gen_json_logprobs(o, g, b, 0);
    char *text = cJSON_Print(o);
    if (text)
        puts(text);
    free(text);
    cJSON_Delete(o);
}

static int run_ids(gen_opts *g)
{
    pe_engine *e = NULL;
    int rc = gen_open(g, &e);
    if (rc != CLI_OK)
        return rc;
    const int32_t *prompts[1] = {g->ids};
    size_t lens[1] = {(size_t)g->nids};
    stream_ctx sc = {g->json, 0};
    cli_batch b;
    rc = gen_batch(g, 1, prompts, lens, print_token, &sc, &b);
    if (rc == CLI_OK)
        rc = cli_batch_run(e, &b);
    if (!g->json && (rc == CLI_OK || sc.printed)) {
        printf("\n"); /* ends the streamed line, also when the sequence failed */
        fflush(stdout);  /* before the rates on stderr */
    }
    if (rc == CLI_OK) {
        cli_rates r;
        cli_batch_rates(&b, &r);
        cli_spec_counts(e, 0, &r);
        if (g->json) {
            print_json(g, &b, &r);
        } else {
            fprintf(stderr, "pengine: %d prompt tokens, %d generated (finish: %s); time to "
                    "first token %.2f ms, prefill %.1f tok/s, decode %.3f ms/token (%.1f tok/s)\n",
                    g->nids, b.ntok[0], cli_finish_name(b.finish[0]), r.ttft_ms,
                    r.prefill_tok_s, r.decode_ms, r.decode_tok_s);
            cli_spec_counts(e, 1, &r);
        }
    }
    cli_batch_free(&b);
    pe_engine_destroy(e);
    return rc;
}

int cli_generate(int argc, char **argv)
{
    gen_opts g;
    memset(&g, 0, sizeof g);
    cli_default_options(&g.dev);
    g.max_tokens = 16;
    cli_sampling_init(&g.sampling);
    int rc = parse(argc, argv, &g);
    if (rc == CLI_OK)
        rc = g.nids > 0 ? run_ids(&g) : gen_run_text(&g);
    free(g.ids);
    free(g.choices);
    return rc < 0 ? CLI_OK : rc;
}
