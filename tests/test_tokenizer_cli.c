/* test_tokenizer_cli.c: "pengine tokenize", run as a child process (tu_run_cmd, test_util.h):
 * text on stdin -> ids (space-separated, --json array), --decode ids -> text, --model DIR,
 * and exit 2 with one stderr line naming the problem for a missing or malformed tokenizer
 * file and for bad ids. Uses a hand-made tokenizer.json (no npm package needed).
 *
 * argv[1] is the pengine binary. */
#include "test_tokenizer_json.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RUN_LIMIT_S 30

static const char *g_bin;
static char g_dir[512], g_tok[600];


static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Runs pengine tokenize args... with input on stdin. */
static tu_run run_args(const char *input, const char *const *args)
{
    const char *argv[16] = {"tokenize"};
    int n = 1;
    for (; *args && n < 15; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    tu_cmd c = {.bin = g_bin, .input = input, .limit_s = RUN_LIMIT_S};
    return tu_run_cmd(&c, argv);
}

#define RUN(input, ...) run_args(input, (const char *const[]){__VA_ARGS__, NULL})

static void expect_ok(tu_run *r, const char *out)
{
    if (r->status != 0 || strcmp(r->out, out) != 0)
        print_message("exit %d\n--- stdout\n%s--- stderr\n%s---\n", r->status, r->out, r->err);
    assert_int_equal(r->status, 0);
    assert_string_equal(r->out, out);
    assert_string_equal(r->err, "");
    tu_run_free(r);
}

/* Exit 2, nothing on stdout, one stderr line "pengine: error: ...; ..." with every sub. */
static void expect_usage(tu_run *r, const char *const *subs)
{
    if (r->status != 2)
        print_message("exit %d\n--- stdout\n%s--- stderr\n%s---\n", r->status, r->out, r->err);
    assert_int_equal(r->status, 2);
    assert_string_equal(r->out, "");
    assert_true(strncmp(r->err, "pengine: error: ", 16) == 0);
    const char *nl = strchr(r->err, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, "");
    assert_non_null(strstr(r->err, "; "));
    for (; *subs; subs++) {
        if (!strstr(r->err, *subs))
            print_message("missing '%s' in: %s", *subs, r->err);
        assert_non_null(strstr(r->err, *subs));
    }
    tu_run_free(r);
}

#define EXPECT_USAGE(run, ...) expect_usage(&(run), (const char *const[]){__VA_ARGS__, NULL})

static int setup(void **state)
{
    (void)state;
    tu_temp_path(g_dir, sizeof g_dir, "tokcli");
    assert_int_equal(mkdir(g_dir, 0700), 0);
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer.json", g_dir);
    write_file(g_tok, tt_spm_json);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_tree(g_dir);
    return 0;
}

static void test_text_on_stdin_prints_ids(void **state)
{
    (void)state;
    tu_run r = RUN("hi hi", "--tokenizer", g_tok);
    expect_ok(&r, "1 7 7\n");
    r = RUN("hi hi", "--tokenizer", g_tok, "--json");
    expect_ok(&r, "[1, 7, 7]\n");
    r = RUN("hi", "--model", g_dir); /* the tokenizer.json of the directory */
    expect_ok(&r, "1 7\n");
    r = RUN("", "--tokenizer", g_tok);
    expect_ok(&r, "1\n");
}

static void test_decode_turns_ids_back_into_text(void **state)
{
    (void)state;
    tu_run r = RUN("7 7", "--tokenizer", g_tok, "--decode");
    expect_ok(&r, "hi hi");
    r = RUN("[1, 7, 7]\n", "--tokenizer", g_tok, "--decode");
    expect_ok(&r, "<s> hi hi");
    r = RUN("7,8", "--tokenizer", g_tok, "--decode", "--json");
    expect_ok(&r, "\"hi\\\"\"\n");
}

static void test_bad_input_is_exit_2_with_one_line(void **state)
{
    (void)state;
    tu_run r = RUN("x", "--tokenizer", "/nonexistent/tok.json");
    EXPECT_USAGE(r, "/nonexistent/tok.json");
    char bad[700];
    snprintf(bad, sizeof bad, "%s/bad.json", g_dir);
    write_file(bad, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    r = RUN("x", "--tokenizer", bad);
    EXPECT_USAGE(r, "bad.json", "model.type", "WordPiece");
    write_file(bad, "{\"model\": ");
    r = RUN("x", "--tokenizer", bad);
    EXPECT_USAGE(r, "bad.json", "JSON");
    r = RUN("7 9", "--tokenizer", g_tok, "--decode");
    EXPECT_USAGE(r, "9", "vocabulary");
    r = RUN("7 seven", "--tokenizer", g_tok, "--decode");
    EXPECT_USAGE(r, "seven");
    r = RUN("7 -1", "--tokenizer", g_tok, "--decode");
    EXPECT_USAGE(r, "-1");
    r = RUN("x", "--json");
    EXPECT_USAGE(r, "--tokenizer", "--model");
    r = RUN("x", "--tokenizer", g_tok, "--model", g_dir);
    EXPECT_USAGE(r, "exactly one");
    r = RUN("x", "--tokenizer", g_tok, "--bogus");
    EXPECT_USAGE(r, "--bogus");
    r = RUN("x", "--tokenizer");
    EXPECT_USAGE(r, "--tokenizer needs a value");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PENGINE_BINARY\n", argv[0]);
        return 2;
    }
    g_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_on_stdin_prints_ids),
        cmocka_unit_test(test_decode_turns_ids_back_into_text),
        cmocka_unit_test(test_bad_input_is_exit_2_with_one_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
