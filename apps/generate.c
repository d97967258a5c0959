/* generate.c: "pengine generate": one sequence from a prompt of token ids, its tokens
 * printed as they arrive (or one JSON object with --json), its rates on stderr. */
#include "generate.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "llm_run.h"

#define GEN_MAX_PROMPT 65536

typedef struct gen_opts {
    cli_options dev;          /* --model, --gpus, --backend, --dtype, --threads, --kv-tokens */
    int32_t *prompt;
    int nprompt;
    int max_tokens;
    pe_sampling sampling;
    int logprobs;
    int32_t stop[PE_MAX_STOP];
    int nstop;
    int ignore_eos;
    int json;
} gen_opts;

static int usage_error(const char *msg)
{
    cli_error(msg);
    return CLI_USAGE;
}

/* --tokens: the prompt (a later --tokens replaces it). Returns the exit code, msg set. */
static int set_prompt(gen_opts *g, const char *v, char *msg, size_t len)
{
    size_t entries = 1;
    for (const char *p = v; *p; p++)
        entries += *p == ',';
    free(g->prompt);
    g->nprompt = 0;
    g->prompt = malloc((entries < GEN_MAX_PROMPT ? entries : GEN_MAX_PROMPT) * sizeof *g->prompt);
    if (!g->prompt) {
        snprintf(msg, len, "out of memory for a prompt of %zu tokens; give a shorter --tokens",
                 entries);
        return CLI_RUNTIME;
    }
    if (cli_parse_token_ids("--tokens", v, g->prompt, GEN_MAX_PROMPT, &g->nprompt, msg, len))
        return CLI_USAGE;
    return CLI_OK;
}

/* Applies one flag with its value. Returns the exit code, msg set on a failure. */
static int apply_flag(gen_opts *g, const char *f, const char *v, char *msg, size_t len)
{
    long x = 0;
    double d = 0;
    int bad = 0;
    if (!strcmp(f, "--model")) {
        g->dev.model_path = v;
    } else if (!strcmp(f, "--tokens")) {
        return set_prompt(g, v, msg, len);
    } else if (!strcmp(f, "--max-tokens")) {
        bad = cli_parse_long(f, v, 1, 1L << 24, &x, msg, len);
        g->max_tokens = (int)x;
    } else if (!strcmp(f, "--temperature")) {
        bad = cli_parse_double(f, v, 0.0, 100.0, &d, msg, len);
        g->sampling.temperature = (float)d;
    } else if (!strcmp(f, "--top-k")) {
        bad = cli_parse_long(f, v, 0, 1L << 30, &x, msg, len);
        g->sampling.top_k = (int)x;
    } else if (!strcmp(f, "--top-p")) {
        bad = cli_parse_double(f, v, 0.0, 1.0, &d, msg, len);
        if (!bad && d <= 0.0) {
            snprintf(msg, len, "--top-p 0 keeps no token; give a number in (0, 1]");
            bad = 1;
        }
        g->sampling.top_p = (float)d;
    } else if (!strcmp(f, "--seed")) {
        bad = cli_parse_u64(f, v, &g->sampling.seed, msg, len);
    } else if (!strcmp(f, "--logprobs")) {
        bad = cli_parse_long(f, v, 0, PE_MAX_LOGPROBS, &x, msg, len);
        g->logprobs = (int)x;
    } else if (!strcmp(f, "--stop")) {
        bad = cli_parse_token_ids("--stop", v, g->stop, PE_MAX_STOP, &g->nstop, msg, len);
    } else { /* the device flags, as the main command parses them */
        bad = cli_apply_device_flag(&g->dev, f, v, msg, len) < 0;
    }
    return bad ? CLI_USAGE : CLI_OK;
}

/* Returns CLI_OK, -1 after --help, or the exit code of an error (printed). */
static int parse(int argc, char **argv, gen_opts *g)
{
    char msg[CLI_MSG_LEN];
    static const char *const with_value[] = {
        "--model", "--tokens", "--max-tokens", "--temperature", "--top-k", "--top-p", "--seed",
        "--logprobs", "--stop", "--gpus", "--backend", "--dtype", "--threads", "--kv-tokens"};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--json")) { g->json = 1; continue; }
        if (!strcmp(f, "--ignore-eos")) { g->ignore_eos = 1; continue; }
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { cli_usage(stdout); return -1; }
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(f, with_value[k]);
        if (!known) {
            snprintf(msg, sizeof msg, "unknown flag '%s' for generate; see pengine --help", f);
            return usage_error(msg);
        }
        if (i + 1 >= argc) {
            snprintf(msg, sizeof msg, "%s needs a value; see pengine --help", f);
            return usage_error(msg);
        }
        int rc = apply_flag(g, f, argv[++i], msg, sizeof msg);
        if (rc != CLI_OK) {
            cli_error(msg);
            return rc;
        }
    }
    if (!g->dev.model_path)
        return usage_error("generate needs --model DIR; give a decoder directory, e.g. one "
                           "written by pengine gen llama --out DIR");
    if (g->nprompt == 0)
        return usage_error("generate needs a prompt; give its token ids, e.g. --tokens 1,2,3 "
                           "(pengine tokenize turns text into ids)");
    if (g->logprobs > 0 && !g->json)
        return usage_error("--logprobs is printed only in the JSON output; add --json, or drop "
                           "--logprobs");
    return CLI_OK;
}

typedef struct stream_ctx {
    int json;
    int printed;
} stream_ctx;

static void print_token(void *ctx, int seq, const pe_token_event *ev)
{
    stream_ctx *s = ctx;
    (void)seq;
    if (s->json || ev->token < 0)
        return;
    printf("%s%d", s->printed++ ? " " : "", (int)ev->token);
    fflush(stdout);
}

static void print_json(const gen_opts *g, const cli_batch *b, const cli_rates *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (int k = 0; k < b->ntok[0]; k++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(b->tokens[0][k]));
    cJSON_AddStringToObject(o, "finish_reason", cli_finish_name(b->finish[0]));
    cJSON_AddNumberToObject(o, "prompt_tokens", g->nprompt);
    cJSON_AddNumberToObject(o, "completion_tokens", b->ntok[0]);
    cJSON_AddNumberToObject(o, "ttft_ms", r->ttft_ms);
    cJSON_AddNumberToObject(o, "prefill_tok_s", r->prefill_tok_s);
    cJSON_AddNumberToObject(o, "decode_ms_per_token", r->decode_ms);
    cJSON_AddNumberToObject(o, "decode_tok_s", r->decode_tok_s);
    if (g->logprobs) { /* as OpenAI's chat completions return them, with ids for tokens */
        cJSON *lp = cJSON_AddObjectToObject(o, "logprobs");
        cJSON *content = cJSON_AddArrayToObject(lp, "content");
        for (int k = 0; k < b->ntok[0]; k++) {
            const pe_token_event *ev = &b->events[0][k];
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
    char *text = cJSON_Print(o);
    if (text)
        puts(text);
    free(text);
    cJSON_Delete(o);
}

int cli_generate(int argc, char **argv)
{
    gen_opts g;
    memset(&g, 0, sizeof g);
    cli_default_options(&g.dev);
    g.max_tokens = 16;
    g.sampling.top_p = 1.0f;
    int rc = parse(argc, argv, &g);
    if (rc != CLI_OK) {
        free(g.prompt);
        return rc < 0 ? CLI_OK : rc;
    }
    if (g.dev.ndevices == 0) { /* one device by default */
        g.dev.ndevices = 1;
        g.dev.devices[0] = 0;
    }
    g.dev.dp = g.dev.ndevices;
    g.dev.pp = g.dev.tp = 1;
    pe_engine *e = NULL;
    rc = cli_llm_open(&g.dev, &e);
    if (rc != CLI_OK) {
        free(g.prompt);
        return rc;
    }
    const int32_t *prompts[1] = {g.prompt};
    size_t lens[1] = {(size_t)g.nprompt};
    stream_ctx sc = {g.json, 0};
    cli_batch b = {.n = 1, .prompts = prompts, .lens = lens, .max_tokens = g.max_tokens,
                   .sampling = g.sampling, .logprobs = g.logprobs, .ignore_eos = g.ignore_eos,
                   .stop = g.stop, .nstop = (size_t)g.nstop, .on_event = print_token, .ctx = &sc};
    rc = cli_batch_alloc(&b);
    if (rc == CLI_OK)
        rc = cli_batch_run(e, &b);
    if (!g.json && (rc == CLI_OK || sc.printed)) {
        printf("\n"); /* ends the streamed line, also when the sequence failed */
        fflush(stdout);  /* before the rates on stderr */
    }
    if (rc == CLI_OK) {
        cli_rates r;
        cli_batch_rates(&b, &r);
        if (g.json) {
            print_json(&g, &b, &r);
        } else {
            fprintf(stderr, "pengine: %d prompt tokens, %d generated (finish: %s); time to "
                    "first token %.2f ms, prefill %.1f tok/s, decode %.3f ms/token (%.1f tok/s)\n",
                    g.nprompt, b.ntok[0], cli_finish_name(b.finish[0]), r.ttft_ms,
                    r.prefill_tok_s, r.decode_ms, r.decode_tok_s);
        }
    }
    cli_batch_free(&b);
    pe_engine_destroy(e);
    free(g.prompt);
    return rc;
}
