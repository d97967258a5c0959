/* generate_text.c: "pengine generate --prompt TEXT" and "--prompts FILE": text in (the
 * model directory's tokenizer, or --tokenizer), text out. One prompt streams its completion
 * on stdout as the tokens arrive; a file of prompts runs as one batch, with a progress bar
 * on a terminal's stderr, and prints each completion after the run. --stop strings end a
 * sequence when its text holds one (text_stream.h): the sequence is cancelled and reported
 * finished by "stop", its text cut before the string. */
#include "generate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_job.h"

/* The prompts: their text, where they come from and their ids. */
typedef struct text_prompts {
    int n;
    char **text;     /* (n) */
    int *line;       /* (n) line in --prompts FILE, 0 for --prompt */
    int32_t **ids;   /* (n, lens[i]) with the BOS the post-processor adds */
    size_t *lens;
} text_prompts;

static void prompts_free(text_prompts *p)
{
    for (int i = 0; i < p->n; i++) {
        free(p->text ? p->text[i] : NULL);
        free(p->ids ? p->ids[i] : NULL);
    }
    free(p->text);
    free(p->line);
    free(p->ids);
    free(p->lens);
    memset(p, 0, sizeof *p);
}

static int prompts_alloc(text_prompts *p, int n)
{
    p->n = n;
    p->text = calloc((size_t)n, sizeof *p->text);
    p->line = calloc((size_t)n, sizeof *p->line);
    p->ids = calloc((size_t)n, sizeof *p->ids);
    p->lens = calloc((size_t)n, sizeof *p->lens);
    if (p->text && p->line && p->ids && p->lens)
        return CLI_OK;
    cli_errorf("out of memory for %d prompts; give fewer", n);
    return CLI_RUNTIME;
}

/* The non-empty lines of path (without their "\n" or "\r\n"). */
static int read_prompts(const char *path, text_prompts *p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_errorf("cannot open --prompts %s (%s); give a text file with one prompt per line",
                   path, strerror(errno));
        return CLI_USAGE;
    }
    char *line = NULL, **text = NULL;
    int *where = NULL, n = 0, max = 0, lines = 0, rc = CLI_OK;
    size_t cap = 0;
    ssize_t got;
    while (rc == CLI_OK && (got = getline(&line, &cap, f)) >= 0) {
        lines++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (got == 0)
            continue;
        if (n == max) {
            max = max ? 2 * max : 16;
            char **t = realloc(text, (size_t)max * sizeof *t);
            text = t ? t : text;
            int *w = realloc(where, (size_t)max * sizeof *w);
            where = w ? w : where;
            if (!t || !w)
                rc = CLI_RUNTIME;
        }
        if (rc == CLI_OK && !(text[n] = strdup(line)))
            rc = CLI_RUNTIME;
        if (rc == CLI_OK)
            where[n++] = lines;
    }
    if (rc != CLI_OK) {
        cli_error("out of memory reading --prompts; give fewer prompts");
    } else if (ferror(f)) {
        cli_errorf("cannot read --prompts %s (%s); check the file", path, strerror(errno));
        rc = CLI_USAGE;
    } else if (n == 0) {
        cli_errorf("--prompts %s holds no prompt (it has no line with text); give one prompt "
                   "per line", path);
        rc = CLI_USAGE;
    }
    if (rc == CLI_OK)
        rc = prompts_alloc(p, n);
    for (int i = 0; i < n; i++) { /* the prompts own the lines now, or they are freed */
        if (rc == CLI_OK) {
            p->text[i] = text[i];
            p->line[i] = where[i];
        } else {
            free(text[i]);
        }
    }
    free(text);
    free(where);
    free(line);
    fclose(f);
    return rc;
}

/* Where prompt i comes from, for messages: "the prompt" or "prompt 3 (line 5 of FILE)". */
static void prompt_name(const gen_opts *g, const text_prompts *p, int i, char *buf, size_t len)
{
    if (!g->prompts_file)
        snprintf(buf, len, "the prompt");
    else
        snprintf(buf, len, "prompt %d (line %d of %s)", i + 1, p->line[i], g->prompts_file);
}

int gen_load_tokenizer(const char *tokenizer, const char *model_dir, const char *ids_hint,
                       pe_tokenizer **tk)
{
    pe_status s = pe_tokenizer_load(tokenizer ? tokenizer : model_dir, tk);
    if (s == PE_OK)
        return CLI_OK;
    if (s == PE_EIO && !tokenizer)
        cli_errorf("--model %s has no tokenizer (tokenizer.json, or vocab.json with "
                   "merges.txt); give one with --tokenizer FILE, or write the model with "
                   "pengine gen ... --tokenizer FILE%s", model_dir, ids_hint ? ids_hint : "");
    else
        cli_errorf("--tokenizer: %s", pe_last_error());
    return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
}

int gen_check_vocab(const pe_model_info *m, const pe_tokenizer *tk)
{
    size_t tv = pe_tokenizer_vocab_size(tk);
    if (tv <= (size_t)m->vocab)
        return CLI_OK;
    cli_errorf("the tokenizer has %zu tokens but the model's vocabulary only %d; give the "
               "model's own tokenizer (--tokenizer), or write the model with pengine gen ... "
               "--tokenizer FILE", tv, m->vocab);
    return CLI_USAGE;
}

static int encode_prompts(const pe_tokenizer *tk, text_prompts *p)
{
    for (int i = 0; i < p->n; i++) {
        if (pe_tokenizer_encode(tk, p->text[i], strlen(p->text[i]), 1, &p->ids[i],
                                &p->lens[i]) != PE_OK) {
            cli_error(pe_last_error());
            return CLI_RUNTIME;
        }
        if (p->lens[i] == 0) { /* only an empty --prompt, with a tokenizer that adds no BOS */
            cli_error("--prompt is empty and the tokenizer adds no BOS token, so there is "
                      "nothing to generate from; give some text");
            return CLI_USAGE;
        }
    }
    return CLI_OK;
}

/* The prompts fit the model: its vocabulary holds the tokenizer's ids, its context each
 * prompt and a generated token. */
static int check_fit(const gen_opts *g, pe_engine *e, const pe_tokenizer *tk,
                     const text_prompts *p)
{
    pe_model_info m;
    pe_engine_model_info(e, &m);
    if (gen_check_vocab(&m, tk) != CLI_OK)
        return CLI_USAGE;
    char name[CLI_MSG_LEN / 2];
    for (int i = 0; i < p->n; i++) {
        if (p->lens[i] < (size_t)m.context)
            continue;
        prompt_name(g, p, i, name, sizeof name);
        cli_errorf("%s is %zu tokens but the model's context holds %d positions, one of them "
                   "for the first generated token; shorten it to at most %d tokens", name,
                   p->lens[i], m.context, m.context - 1);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* ---- the run: texts, streaming, progress ----------------------------------------------- */

typedef struct text_run {
    cli_text *texts;   /* (n) */
    char *ended;       /* (n) sequence i had its final event, or its stop string */
    const cli_batch *b;
    int stream;        /* one prompt without --json: print the text as it comes */
    int printed;       /* bytes streamed */
    int progress;      /* stderr is a terminal: draw a progress bar on it */
    double drawn_ms;   /* when it was last drawn */
    pe_status failed;  /* a text could not grow */
} text_run;

/* "pengine: [#####.....] 120/384 tokens" in place; expected counts max_tokens for every
 * sequence still running and the tokens it got for one that ended. */
static void draw_progress(text_run *r, int last)
{
    double now = cli_now_ms();
    if (!last && now - r->drawn_ms < 100.0)
        return;
    r->drawn_ms = now;
    long done = 0, expected = 0;
    for (int i = 0; i < r->b->n; i++) {
        done += r->b->ntok[i];
        expected += r->ended[i] ? r->b->ntok[i] : r->b->max_tokens;
    }
    enum { W = 30 };
    char bar[W + 1];
    int full = expected ? (int)(W * done / expected) : W;
    for (int k = 0; k < W; k++)
        bar[k] = k < full ? '#' : '.';
    bar[W] = '\0';
    fprintf(stderr, "\rpengine: [%s] %ld/%ld tokens%s", bar, done, expected, last ? "\n" : "");
    fflush(stderr);
}

static int on_text_event(void *ctx, int i, const pe_token_event *ev)
{
    text_run *r = ctx;
    cli_text *t = &r->texts[i];
    pe_status s = ev->token >= 0 ? cli_text_push(t, ev->token) : PE_OK;
    if (s == PE_OK && ev->finish != PE_FINISH_NONE)
        s = cli_text_finish(t);
    if (s != PE_OK && r->failed == PE_OK)
        r->failed = s;
    r->ended[i] |= ev->finish != PE_FINISH_NONE || t->stopped;
    if (r->stream) {
        const char *piece;
        size_t n;
        cli_text_take(t, &piece, &n);
        if (n) {
            fwrite(piece, 1, n, stdout);
            fflush(stdout);
            r->printed += (int)n;
        }
    }
    if (r->progress)
        draw_progress(r, 0);
    return t->stopped;
}

static int text_run_init(text_run *r, const pe_tokenizer *tk, const gen_opts *g, int n)
{
    memset(r, 0, sizeof *r);
    const size_t count = n > 0 ? (size_t)n : 1; /* n >= 1 from the caller */
    r->texts = calloc(count, sizeof *r->texts);
    r->ended = calloc(count, 1);
    pe_status s = r->texts && r->ended ? PE_OK : PE_ENOMEM;
    for (int i = 0; s == PE_OK && i < n; i++) {
        s = cli_text_init(&r->texts[i], tk, g->stops, g->nstops);
        r->texts[i].free_ids = g->min_tokens; /* no stop string before min_tokens ids */
    }
    if (s == PE_OK)
        return CLI_OK;
    cli_errorf("out of memory for the texts of %d sequence%s; give fewer prompts", n,
               n == 1 ? "" : "s");
    return CLI_RUNTIME;
}

static void text_run_free(text_run *r, int n)
{
    for (int i = 0; r->texts && i < n; i++)
        cli_text_free(&r->texts[i]);
    free(r->texts);
    free(r->ended);
}

/* ---- the output -------------------------------------------------------------------------- */

static int print_json(const gen_opts *g, const text_prompts *p, const cli_batch *b,
                      const text_run *r, const cli_rates *rt)
{
    cJSON *o = cJSON_CreateObject();
    if (!g->prompts_file) {
        cJSON_AddStringToObject(o, "text", r->texts[0].text ? r->texts[0].text : "");
        gen_json_sequence(o, b, 0);
        gen_json_rates(o, rt);
        gen_json_logprobs(o, g, b, 0);
    } else {
        cJSON *all = cJSON_AddArrayToObject(o, "completions");
        for (int i = 0; i < p->n; i++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "prompt", p->text[i]);
            cJSON_AddStringToObject(c, "text", r->texts[i].text ? r->texts[i].text : "");
            gen_json_sequence(c, b, i);
            gen_json_logprobs(c, g, b, i);
            cJSON_AddItemToArray(all, c);
        }
        cJSON_AddNumberToObject(o, "prompts", p->n);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)rt->prompt_tokens);
        cJSON_AddNumberToObject(o, "completion_tokens", (double)rt->generated);
        cJSON_AddNumberToObject(o, "wall_ms", rt->wall_ms);
        cJSON_AddNumberToObject(o, "tok_s", rt->tok_s);
        gen_json_rates(o, rt);
    }
    char *text = cJSON_Print(o);
    if (text)
        puts(text);
    free(text);
    cJSON_Delete(o);
    return text ? CLI_OK : CLI_RUNTIME;
}

/* Each prompt's completion after a batch, under a header line naming the prompt. */
static void print_completions(const text_prompts *p, const cli_batch *b, const text_run *r)
{
    for (int i = 0; i < p->n; i++) {
        const cli_text *t = &r->texts[i];
        printf("%s==> prompt %d of %d (%d tokens, finish: %s): %s\n", i ? "\n" : "", i + 1, p->n,
               b->ntok[i], cli_finish_name(b->finish[i]), p->text[i]);
        fwrite(t->text ? t->text : "", 1, t->len, stdout);
        fputc('\n', stdout);
    }
}

static void print_rates(const gen_opts *g, const text_prompts *p, const cli_batch *b,
                        const cli_rates *rt)
{
    if (!g->prompts_file)
        fprintf(stderr, "pengine: %zu prompt tokens, %d generated (finish: %s); time to first "
                "token %.2f ms, prefill %.1f tok/s, decode %.3f ms/token (%.1f tok/s)\n",
                p->lens[0], b->ntok[0], cli_finish_name(b->finish[0]), rt->ttft_ms,
                rt->prefill_tok_s, rt->decode_ms, rt->decode_tok_s);
    else
        fprintf(stderr, "pengine: %d prompts, %ld prompt tokens, %ld generated in %.1f ms "
                "(%.1f tok/s); time to first token %.2f ms, prefill %.1f tok/s, decode %.3f "
                "ms/token (%.1f tok/s, all sequences)\n", p->n, rt->prompt_tokens,
                rt->generated, rt->wall_ms, rt->tok_s, rt->ttft_ms, rt->prefill_tok_s,
                rt->decode_ms, rt->decode_tok_s);
}

static int run(const gen_opts *g, pe_engine *e, const pe_tokenizer *tk, const text_prompts *p)
{
    text_run r;
    cli_batch b = {0};
    int rc = text_run_init(&r, tk, g, p->n);
    if (rc == CLI_OK)
        rc = gen_batch(g, p->n, (const int32_t *const *)p->ids, p->lens, on_text_event, &r, &b);
    r.b = &b;
    r.stream = !g->json && !g->prompts_file;
    r.progress = g->prompts_file && isatty(STDERR_FILENO);
    if (rc == CLI_OK)
        rc = cli_batch_run(e, &b);
    if (r.progress && b.ntok && rc != CLI_USAGE)
        draw_progress(&r, 1);
    if (r.stream && (rc == CLI_OK || r.printed)) {
        printf("\n"); /* ends the streamed text, also when the sequence failed */
        fflush(stdout); /* before the rates on stderr */
    }
    if (rc == CLI_OK && r.failed != PE_OK) {
        cli_error("out of memory for the generated text; generate fewer tokens (--max-tokens)");
        rc = CLI_RUNTIME;
    }
    if (rc == CLI_OK) {
        cli_rates rt;
        cli_batch_rates(&b, &rt);
        cli_spec_counts(e, 0, &rt);
        if (g->json) {
            rc = print_json(g, p, &b, &r, &rt);
        } else {
            if (g->prompts_file)
                print_completions(p, &b, &r);
            fflush(stdout);
            print_rates(g, p, &b, &rt);
            cli_spec_counts(e, 1, &rt);
        }
    }
    cli_batch_free(&b);
    text_run_free(&r, p->n);
    return rc;
}

/* The prompts read (--prompts FILE, or --prompt) and turned into ids by the tokenizer.
 * Returns the exit code. */
static int prepare_prompts(const gen_opts *g, text_prompts *p, pe_tokenizer **tk)
{
    int rc;
    if (g->prompts_file) {
        rc = read_prompts(g->prompts_file, p);
    } else {
        rc = prompts_alloc(p, 1);
        if (rc == CLI_OK && !(p->text[0] = strdup(g->prompt))) {
            cli_error("out of memory for the prompt; give a shorter one");
            rc = CLI_RUNTIME;
        }
    }
    if (rc == CLI_OK)
        rc = gen_load_tokenizer(g->tokenizer, g->dev.model_path,
                                ", or give the prompt as ids with --tokens", tk);
    if (rc == CLI_OK)
        rc = encode_prompts(*tk, p);
    return rc;
}

/* --json-schema(-file), --regex or --choice: their grammar over g->json_mode's table into
 * g->compiled; text: the schema (NULL: --json-schema's own). */
static pe_status derive_grammar(gen_opts *g, const char *text)
{
    if (g->regex)
        return pe_grammar_regex(g->json_mode, g->regex, &g->compiled);
    if (g->nchoices)
        return pe_grammar_choice(g->json_mode, g->choices, (size_t)g->nchoices, &g->compiled);
    return pe_grammar_json_schema(g->json_mode, text ? text : g->schema, &g->compiled);
}

/* The grammar of --grammar json, --json-schema, --json-schema-file, --regex or --choice over
 * tk's tokens: JSON mode, or one derived from it. Returns the exit code. */
static int make_grammar(gen_opts *g, const pe_tokenizer *tk)
{
    const char *flag = gen_grammar_flag(g);
    if (!flag)
        return CLI_OK;
    if (pe_grammar_json(tk, &g->json_mode) != PE_OK) {
        cli_errorf("%s: %s", flag, pe_last_error());
        return CLI_RUNTIME;
    }
    if (g->grammar) {
        g->compiled = g->json_mode;
        g->json_mode = NULL;
        return CLI_OK;
    }
    char *text = g->schema_file ? cli_read_file(g->schema_file, NULL) : NULL;
    if (g->schema_file && !text) {
        cli_errorf("cannot read --json-schema-file %s (%s); give a file holding a JSON schema",
                   g->schema_file, strerror(errno));
        return CLI_USAGE;
    }
    const pe_status s = derive_grammar(g, text);
    free(text);
    if (s == PE_OK)
        return CLI_OK;
    /* (the library's messages on patterns say the fix; on schemas, what is not enforced) */
    cli_errorf("%s: %s%s", flag, pe_last_error(), g->regex || g->nchoices ? ""
               : "; docs/api.md lists what a schema may say");
    return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
}

int gen_run_text(gen_opts *g)
{
    text_prompts p = {0};
    pe_tokenizer *tk = NULL;
    pe_engine *e = NULL;
    /* under mpirun only process 0 reads the prompts and the tokenizer (they may exist only on
     * its node); the others follow with ids alone */
    int rc = cli_mpi_me() == 0 ? prepare_prompts(g, &p, &tk) : CLI_OK;
    if (rc == CLI_OK && tk)
        rc = make_grammar(g, tk);
    rc = cli_mpi_agree(rc);
    if (rc == CLI_OK)
        rc = gen_open(g, &e);
    if (rc == CLI_OK)
        rc = check_fit(g, e, tk, &p);
    if (rc == CLI_OK)
        rc = run(g, e, tk, &p);
    pe_engine_destroy(e);
    pe_grammar_free(g->compiled);
    pe_grammar_free(g->json_mode); /* (after the derived grammar, which shares its table) */
    g->compiled = g->json_mode = NULL;
    pe_tokenizer_free(tk);
    prompts_free(&p);
    return rc;
}
