/* test_cli.c: the pengine command, run as a child process: exit codes and one-line errors
 * for every bad input, gen's reproducibility, each demo's verdict, --json and --trace.
 *
 * argv[1] is the pengine binary. Each run (tu_run_cmd, test_util.h) captures stdout and
 * stderr separately and is killed after a time limit. */
#include "test_tokenizer_json.h"
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

static const char *g_bin;    /* the pengine binary */
static char g_dir[512];      /* scratch folder for models, traces and captured output */

static void path_in_dir(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
}

/* Runs pengine with args (NULL-terminated); fails the test if it outlives the limit. */
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

/* Exit 2, nothing on stdout, exactly one stderr line "pengine: error: ...; ..." holding
 * every given substring. */
static void expect_usage_error(const tu_run *r, const char *const *subs)
{
    if (r->status != 2)
        print_run(r);
    assert_int_equal(r->status, 2);
    assert_string_equal(r->out, "");
    assert_true(strncmp(r->err, "pengine: error: ", 16) == 0);
    const char *nl = strchr(r->err, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, ""); /* one line */
    assert_non_null(strstr(r->err, "; ")); /* a problem, then what to do */
    for (; *subs; subs++) {
        if (!strstr(r->err, *subs))
            print_message("missing '%s' in: %s", *subs, r->err);
        assert_non_null(strstr(r->err, *subs));
    }
}

#define EXPECT_USAGE(run, ...) expect_usage_error(&(run), (const char *const[]){__VA_ARGS__, NULL})

static void gen_model(const char *name, const char *hidden, const char *layers, char *path,
                      size_t len)
{
    path_in_dir(path, len, name);
    tu_run r = RUN("gen", "mlp", "--hidden", hidden, "--layers", layers, "--out", path);
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
}

/* ---- help, version --------------------------------------------------------------------- */

static void test_help_and_version_exit_0(void **state)
{
    (void)state;
    tu_run r = RUN("--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--mode dp|tp|pp"));
    assert_non_null(strstr(r.out, "--gpus"));
    assert_non_null(strstr(r.out, "--threads N"));
    assert_non_null(strstr(r.out, "exit codes"));
    /* every subcommand and demo in the usage lines has its options listed */
    const char *listed[] = {"generate options", "--tokens LIST", "--prompt TEXT",
                            "--prompts FILE", "--stop STR", "--stop-ids LIST",
                            "--tokenizer FILE", "--temperature T", "--logprobs K", "decoder demo (the default",
                            "--mlp", "--prompt-len N",
                            "--max-tokens N", "--kv-tokens N", "tokenize options",
                            "serve options", "--api-key KEY", "--max-body BYTES",
                            "perplexity options", "--stride N", "--parallel N"};
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
        if (!strstr(r.out, listed[i]))
            fail_msg("--help does not list '%s'", listed[i]);
    assert_string_equal(r.err, "");
    tu_run_free(&r);

    r = RUN("--version");
    assert_int_equal(r.status, 0);
    char want[64];
    snprintf(want, sizeof want, "pengine %s\n", pe_version());
    assert_string_equal(r.out, want);
    tu_run_free(&r);
}

/* ---- bad input: parsing ------------------------------------------------------------------ */

static void test_unknown_mode_or_flag_is_usage_error(void **state)
{
    (void)state;
    tu_run r = RUN("--mode", "xx", "--gpus", "0,1");
    EXPECT_USAGE(r, "unknown mode 'xx'", "--mode dp");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--frobnicate");
    EXPECT_USAGE(r, "unknown flag '--frobnicate'");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--schedule", "fast");
    EXPECT_USAGE(r, "unknown schedule 'fast'");
    tu_run_free(&r);
    r = RUN("--mode", "tp", "--gpus", "0,1", "--tp-embedding", "both");
    EXPECT_USAGE(r, "unknown --tp-embedding 'both'", "vocab", "replicated");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--iters", "ten");
    EXPECT_USAGE(r, "--iters 'ten'");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--dtype", "fp16");
    EXPECT_USAGE(r, "unknown dtype 'fp16'", "--dtype fp32 or bf16");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--threads", "257");
    EXPECT_USAGE(r, "--threads");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--threads", "two");
    EXPECT_USAGE(r, "--threads 'two'");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus"); /* a value is missing */
    EXPECT_USAGE(r, "--gpus needs a value");
    tu_run_free(&r);
    r = RUN("stray");
    EXPECT_USAGE(r, "unexpected argument 'stray'");
    tu_run_free(&r);
}

static void test_malformed_device_lists_are_usage_errors(void **state)
{
    (void)state;
    tu_run r = RUN("--mode", "dp", "--gpus", "");
    EXPECT_USAGE(r, "--gpus is empty");
    tu_run_free(&r);
    r = RUN("--mode", "dp", "--gpus", "0,,1");
    EXPECT_USAGE(r, "'0,,1' has an empty entry");
    tu_run_free(&r);
    r = RUN("--mode", "dp", "--gpus", "0,");
    EXPECT_USAGE(r, "empty entry");
    tu_run_free(&r);
    r = RUN("--mode", "dp", "--gpus", "a");
    EXPECT_USAGE(r, "'a' is not an integer");
    tu_run_free(&r);
    r = RUN("--mode", "dp", "--gpus", "-1");
    EXPECT_USAGE(r, "-1 is below 0");
    tu_run_free(&r);
    r = RUN("--mode", "dp");
    EXPECT_USAGE(r, "no devices given", "--gpus");
    tu_run_free(&r);
}

static void test_missing_device_lists_the_existing_ones(void **state)
{
    (void)state;
    tu_run r = RUN("--mode", "dp", "--gpus", "0,999999", "--backend", "host");
    EXPECT_USAGE(r, "device 999999 does not exist", "0: ", "pick ids from that list");
    tu_run_free(&r);
}

static void test_grid_product_must_match_devices(void **state)
{
    (void)state;
    tu_run r = RUN("--dp", "2", "--tp", "2", "--gpus", "0,1");
    EXPECT_USAGE(r, "dp=2 x pp=1 x tp=2", "needs 4 devices", "lists 2");
    tu_run_free(&r);
    r = RUN("--pp", "3", "--gpus", "0,1");
    EXPECT_USAGE(r, "needs 3 devices");
    tu_run_free(&r);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--split", "3,4,1");
    EXPECT_USAGE(r, "--split lists 3", "pp=2");
    tu_run_free(&r);
    r = RUN("--mlp", "--mode", "pp", "--gpus", "0,1", "--backend", "host", "--microbatches", "65");
    EXPECT_USAGE(r, "--microbatches 65 is more than the 64 rows");
    tu_run_free(&r);
}

/* ---- bad input: what the engine or the model file refuses -------------------------------- */

static void test_width_not_divisible_by_tp_suggests_a_fix(void **state)
{
    (void)state;
    char model[600];
    gen_model("w12.safetensors", "12", "2", model, sizeof model);
    tu_run r = RUN("--mode", "tp", "--gpus", "0,0,0,0,0", "--backend", "host", "--model", model,
                    "--iters", "1", "--warmup", "0");
    EXPECT_USAGE(r, "12", "divisible", "pp");
    tu_run_free(&r);
}

static void test_more_stages_than_layers_is_usage_error(void **state)
{
    (void)state;
    char model[600];
    gen_model("l2.safetensors", "16", "2", model, sizeof model);
    tu_run r = RUN("--mode", "pp", "--gpus", "0,1,0", "--backend", "host", "--model", model,
                    "--iters", "1", "--warmup", "0");
    EXPECT_USAGE(r, "3 stages", "2 layers");
    tu_run_free(&r);
}

static void write_bytes(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_bad_model_files_name_the_fault(void **state)
{
    (void)state;
    char good[600], bad[600];
    gen_model("good.safetensors", "12", "2", good, sizeof good);
    char *bytes = tu_slurp(good, NULL);
    struct stat st;
    assert_int_equal(stat(good, &st), 0);
    size_t size = (size_t)st.st_size;

    /* missing */
    path_in_dir(bad, sizeof bad, "missing.safetensors");
    tu_run r = RUN("--mode", "dp", "--gpus", "0", "--backend", "host", "--model", bad);
    EXPECT_USAGE(r, "missing.safetensors");
    tu_run_free(&r);

    /* truncated inside the tensor data: the message names a tensor and a byte offset */
    path_in_dir(bad, sizeof bad, "truncated.safetensors");
    write_bytes(bad, bytes, size - 100);
    r = RUN("--mode", "dp", "--gpus", "0", "--backend", "host", "--model", bad);
    EXPECT_USAGE(r, "truncated.safetensors", "tensor 'layers.", "byte");
    tu_run_free(&r);

    /* a header that lies about a tensor's offsets */
    char *lie = strstr(bytes + 8, "[624,1200]"); /* after the 8-byte length */
    assert_non_null(lie); /* 12x12 weight of layer 1 starts at byte 624 */
    memcpy(lie, "[624,9200]", 10);
    path_in_dir(bad, sizeof bad, "lying.safetensors");
    write_bytes(bad, bytes, size);
    r = RUN("--mode", "dp", "--gpus", "0", "--backend", "host", "--model", bad);
    EXPECT_USAGE(r, "layers.1.weight", "9200");
    tu_run_free(&r);
    memcpy(lie, "[624,1200]", 10);

    /* garbage where the header length should be */
    memset(bytes, 'X', 8);
    path_in_dir(bad, sizeof bad, "corrupt.safetensors");
    write_bytes(bad, bytes, size);
    r = RUN("--mode", "pp", "--gpus", "0,1", "--backend", "host", "--model", bad);
    EXPECT_USAGE(r, "corrupt.safetensors", "header");
    tu_run_free(&r);
    free(bytes);
}

static void test_unwritable_trace_path_is_usage_error(void **state)
{
    (void)state;
    tu_run r = RUN("--mode", "dp", "--gpus", "0", "--backend", "host", "--trace",
                    "/nonexistent-dir/t.json");
    EXPECT_USAGE(r, "--trace /nonexistent-dir/t.json");
    tu_run_free(&r);
}

static void test_gen_bad_input_is_usage_error(void **state)
{
    (void)state;
    tu_run r = RUN("gen", "cnn", "--hidden", "8");
    EXPECT_USAGE(r, "unknown model kind 'cnn'");
    tu_run_free(&r);
    r = RUN("gen", "mlp", "--hidden", "8", "--layers", "2");
    EXPECT_USAGE(r, "--out is missing");
    tu_run_free(&r);
    r = RUN("gen", "mlp", "--hidden", "0", "--layers", "2", "--out", "x");
    EXPECT_USAGE(r, "--hidden 0 is out of range");
    tu_run_free(&r);
}

/* ---- gen ----------------------------------------------------------------------------------- */

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    assert_int_equal(stat(a, &sa), 0);
    assert_int_equal(stat(b, &sb), 0);
    if (sa.st_size != sb.st_size)
        return 0;
    char *x = tu_slurp(a, NULL), *y = tu_slurp(b, NULL);
    int same = memcmp(x, y, (size_t)sa.st_size) == 0;
    free(x);
    free(y);
    return same;
}

static void test_gen_same_seed_same_bytes(void **state)
{
    (void)state;
    char a[600], b[600], c[600];
    path_in_dir(a, sizeof a, "seed7a.safetensors");
    path_in_dir(b, sizeof b, "seed7b.safetensors");
    path_in_dir(c, sizeof c, "seed8.safetensors");
    const char *seeds[] = {"7", "7", "8"};
    const char *paths[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        tu_run r = RUN("gen", "mlp", "--hidden", "64", "--layers", "3", "--in", "32",
                        "--out-dim", "5", "--seed", seeds[i], "--out", paths[i]);
        assert_int_equal(r.status, 0);
        assert_string_equal(r.err, "");
        tu_run_free(&r);
    }
    assert_true(same_file(a, b));
    assert_false(same_file(a, c));
}

/* ---- demos ------------------------------------------------------------------------------- */

static size_t count(const char *s, const char *sub)
{
    size_t n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

static void expect_demo_ok(const tu_run *r, size_t verdicts)
{
    if (r->status != 0)
        print_run(r);
    assert_int_equal(r->status, 0);
    assert_int_equal(count(r->out, "match                          YES"), verdicts);
    assert_null(strstr(r->out, " NO\n"));
}

static void test_dp_demo_matches_bit_for_bit(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--mode", "dp", "--gpus", "0,1", "--backend", "host", "--iters", "3",
                    "--warmup", "1");
    expect_demo_ok(&r, 1);
    assert_non_null(strstr(r.out, "single device"));
    assert_non_null(strstr(r.out, "samples per second"));
    assert_non_null(strstr(r.out, "speedup"));
    assert_non_null(strstr(r.out, "bit for bit"));
    tu_run_free(&r);
}

static void test_tp_demo_matches_within_tolerance(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--mode", "tp", "--gpus", "0,1", "--backend", "host", "--iters", "3",
                    "--warmup", "1");
    expect_demo_ok(&r, 1);
    assert_non_null(strstr(r.out, "within 1e-5 relative"));
    assert_non_null(strstr(r.out, "max abs error"));
    tu_run_free(&r);
}

/* bf16 on the host: TP within the bf16 rule, PP bit for bit (both round every GEMM input
 * where one device does). */
static void test_bf16_demos_verify_against_one_device(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--mode", "tp", "--gpus", "0,1", "--backend", "host", "--dtype", "bf16",
                    "--iters", "2", "--warmup", "1");
    expect_demo_ok(&r, 1);
    assert_non_null(strstr(r.out, "dtype                          bf16"));
    assert_non_null(strstr(r.out, "within 1e-3 relative"));
    tu_run_free(&r);
    r = RUN("--mlp", "--mode", "pp", "--gpus", "0,1", "--backend", "host", "--dtype", "bf16", "--iters",
            "2", "--warmup", "1");
    expect_demo_ok(&r, 2);
    assert_non_null(strstr(r.out, "bit for bit"));
    tu_run_free(&r);
}

static void test_pp_demo_prints_bubbles_and_timeline(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--mode", "pp", "--gpus", "0,1", "--backend", "host", "--iters", "3",
                    "--warmup", "1");
    expect_demo_ok(&r, 2); /* naive and micro-batched both checked */
    assert_non_null(strstr(r.out, "naive (m=1)"));
    assert_non_null(strstr(r.out, "gpipe (m=4)"));
    assert_non_null(strstr(r.out, "first result"));
    assert_non_null(strstr(r.out, "bubble, theory"));
    /* one timeline row per stage for each of the two runs, micro-batches 0..3 drawn */
    assert_int_equal(count(r.out, "  stage 0 "), 2);
    assert_int_equal(count(r.out, "  stage 1 "), 2);
    /* each stage's row of the gpipe picture shows micro-batches 0..3 and nothing else */
    const char *tl = strstr(r.out, "gpipe (m=4), request");
    assert_non_null(tl);
    for (int stage = 0; stage < 2; stage++) {
        tl = strchr(tl, '\n') + 1;
        const char *open = strchr(tl, '|'), *close = strchr(open + 1, '|');
        assert_true(open && close && close < strchr(tl, '\n'));
        char row[128] = "";
        snprintf(row, sizeof row, "%.*s", (int)(close - open - 1), open + 1);
        assert_true(strlen(row) >= 8 && strlen(row) <= 80);
        assert_int_equal(strspn(row, "0123."), strlen(row));
        for (const char *mb = "0123"; *mb; mb++)
            assert_non_null(strchr(row, *mb));
    }
    tu_run_free(&r);
}

static void test_stream_schedule_and_hybrid_grid_verify(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--dp", "2", "--pp", "2", "--gpus", "0,1,0,1", "--backend", "host",
                    "--schedule", "stream", "--microbatches", "3", "--batch", "10",
                    "--iters", "2", "--warmup", "1");
    expect_demo_ok(&r, 2);
    assert_non_null(strstr(r.out, "stream (m=3)"));
    assert_non_null(strstr(r.out, "dp=2 x pp=2 x tp=1"));
    tu_run_free(&r);
}

/* ---- --json and --trace --------------------------------------------------------------------- */

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        fail_msg("JSON key '%s' is missing or not a number", key);
    return v->valuedouble;
}

static const cJSON *obj(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsObject(v))
        fail_msg("JSON key '%s' is missing or not an object", key);
    return v;
}

static void test_dp_json_holds_every_figure_and_nothing_else(void **state)
{
    (void)state;
    tu_run r = RUN("--mlp", "--mode", "dp", "--gpus", "0,1", "--backend", "host", "--iters", "3",
                    "--warmup", "1", "--json");
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(r.out, &end, 0);
    assert_non_null(j); /* stdout is the JSON object and nothing else */
    while (*end == '\n' || *end == ' ')
        end++;
    assert_int_equal(*end, '\0');
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "mode")->valuestring, "dp");
    assert_int_equal((int)num(obj(j, "grid"), "dp"), 2);
    assert_int_equal((int)num(obj(j, "workload"), "batch"), 16);
    assert_int_equal((int)num(obj(j, "workload"), "requests_per_iter"), 2);
    assert_true(num(j, "parameters") == 256 * 256 * 3 + 256 * 3 + 256 + 1);
    double s_ms = num(obj(j, "single"), "ms_per_iter"), d_ms = num(obj(j, "dp"), "ms_per_iter");
    assert_true(s_ms > 0 && d_ms > 0);
    /* the figures agree with each other: samples/s = 2 requests x 16 rows / time */
    assert_true(fabs(num(obj(j, "dp"), "samples_per_s") - 32 / d_ms * 1e3) < 1e-6 * 32e3 / d_ms);
    assert_true(fabs(num(j, "speedup") - s_ms / d_ms) < 1e-9 * s_ms / d_ms);
    const cJSON *v = obj(j, "verify");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "match")));
    assert_true(num(v, "max_abs_error") == 0);
    cJSON_Delete(j);
    tu_run_free(&r);
}

static void test_pp_json_and_trace_file(void **state)
{
    (void)state;
    char trace[600];
    path_in_dir(trace, sizeof trace, "trace.json");
    tu_run r = RUN("--mlp", "--mode", "pp", "--gpus", "0,1", "--backend", "host", "--iters", "3",
                    "--warmup", "1", "--json", "--trace", trace);
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    cJSON *j = cJSON_Parse(r.out);
    assert_non_null(j);
    const cJSON *naive = obj(j, "naive"), *mb = obj(j, "microbatched");
    /* theory (p-1)/(m+p-1) with p = 2: 1/2 for m = 1, 1/5 for m = 4 */
    assert_true(fabs(num(naive, "bubble_theory") - 0.5) < 1e-12);
    assert_true(fabs(num(mb, "bubble_theory") - 0.2) < 1e-12);
    for (int i = 0; i < 2; i++) {
        const cJSON *c = i ? mb : naive;
        double b = num(c, "bubble_measured");
        assert_true(b >= 0 && b < 1);
        assert_true(num(c, "first_result_ms") > 0);
        assert_true(num(c, "total_ms") > 0);
        assert_int_equal((int)num(c, "requests_traced"), 3);
    }
    /* naive: the first result leaves only after both stages did the whole batch */
    assert_true(num(naive, "bubble_measured") > 0.3);
    const cJSON *tl = obj(j, "timeline");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tl, "naive")), 3);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj(j, "verify"), "match")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj(j, "verify_naive"), "match")));
    cJSON_Delete(j);
    tu_run_free(&r);

    char *text = tu_slurp(trace, NULL);
    cJSON *t = cJSON_Parse(text);
    assert_non_null(t);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(t, "traceEvents");
    assert_true(cJSON_IsArray(ev));
    /* at least a COMPUTE per stage per micro-batch per timed request: 2 x 4 x 3 */
    int complete = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        complete += cJSON_IsString(ph) && strcmp(ph->valuestring, "X") == 0;
    }
    assert_true(complete >= 2 * 4 * 3);
    cJSON_Delete(t);
    free(text);
}

/* ---- decoders: the demo and generate ------------------------------------------------------ */

/* A tiny random Llama (2 layers, hidden 64, vocab 256, context 128) in the scratch folder. */
static void gen_llama(char *dir, size_t len)
{
    path_in_dir(dir, len, "tiny-llama");
    tu_run r = RUN("gen", "llama", "--preset", "tiny", "--out", dir);
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
}

/* stdout is one JSON object and nothing else; returns it. */
static cJSON *parse_json_only(const tu_run *r)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(r->out, &end, 0);
    if (!j)
        print_run(r);
    assert_non_null(j);
    while (*end == '\n' || *end == ' ')
        end++;
    assert_int_equal(*end, '\0');
    return j;
}

static void test_decoder_demo_verifies_against_the_reference(void **state)
{
    (void)state;
    char dir[600];
    gen_llama(dir, sizeof dir);
    tu_run r = RUN("--model", dir, "--gpus", "0", "--backend", "host", "--prompt-len", "8",
                   "--max-tokens", "4", "--batch", "2");
    expect_demo_ok(&r, 1);
    assert_non_null(strstr(r.out, "2 sequences x 8 prompt tokens, then 4 generated"));
    assert_non_null(strstr(r.out, "greedy tokens = reference argmax 4 of 4"));
    /* the host kernels that computed: avx512, avx2 or portable */
    const char *k = strstr(r.out, "\n  kernels ");
    assert_non_null(k);
    k += strlen("\n  kernels ");
    k += strspn(k, " ");
    assert_true(!strncmp(k, "avx512", 6) || !strncmp(k, "avx2", 4) ||
                !strncmp(k, "portable", 8));
    assert_string_equal(r.err, "");
    tu_run_free(&r);

    r = RUN("--model", dir, "--gpus", "0", "--backend", "host", "--prompt-len", "8",
            "--max-tokens", "4", "--batch", "2", "--json");
    assert_int_equal(r.status, 0);
    cJSON *j = parse_json_only(&r);
    const cJSON *rates = obj(j, "rates");
    assert_int_equal((int)num(rates, "generated"), 2 * 4);
    assert_true(num(rates, "ttft_ms") > 0);
    assert_true(num(rates, "decode_ms_per_token") > 0 && num(rates, "decode_tok_s") > 0);
    const cJSON *kj = cJSON_GetObjectItemCaseSensitive(j, "kernels");
    assert_true(cJSON_IsString(kj));
    assert_true(!strncmp(kj->valuestring, "avx", 3) || !strcmp(kj->valuestring, "portable"));
    const cJSON *v = obj(j, "verify");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "match")));
    assert_int_equal((int)num(v, "positions"), 8 + 4);
    assert_int_equal((int)num(v, "greedy_agree"), 4);
    assert_int_equal((int)num(v, "greedy_checked"), 4);
    cJSON_Delete(j);
    tu_run_free(&r);
}

/* A pp2 x tp2 trace holds every kind of span of a decoder's steps, prefill and decode. */
static void expect_decoder_trace(const char *path)
{
    char *text = tu_slurp(path, NULL);
    cJSON *t = cJSON_Parse(text);
    assert_non_null(t);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(t, "traceEvents"), *e;
    assert_true(cJSON_IsArray(ev));
    int compute = 0, collective = 0, send = 0, recv = 0, prefill = 0, decode = 0;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
        if (!cJSON_IsString(cat))
            continue; /* the thread names */
        compute += !strcmp(cat->valuestring, "compute");
        collective += !strcmp(cat->valuestring, "collective");
        send += !strcmp(cat->valuestring, "send");
        recv += !strcmp(cat->valuestring, "recv");
        const cJSON *phase = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(e, "args"), "phase");
        assert_true(cJSON_IsString(phase));
        prefill += !strcmp(phase->valuestring, "prefill");
        decode += !strcmp(phase->valuestring, "decode");
        assert_true(cJSON_GetObjectItemCaseSensitive(e, "dur")->valuedouble >= 0);
    }
    /* the 4 workers compute every step (at least one per generated token after the first,
     * which the prefill makes); the TP ranks meet at 2 all-reduces a block, every step */
    assert_true(compute >= 4 * 3 && compute % 4 == 0);
    assert_true(collective >= 2 * compute);
    assert_true(send > 0 && send == recv); /* stage 0's ranks send, stage 1's receive */
    assert_true(prefill > 0 && decode > 0);
    cJSON_Delete(t);
    free(text);
}

/* pp > 1: the same batch with one step in flight (naive) beside the grid's run. */
static void expect_pipeline_figures(const cJSON *j)
{
    const cJSON *pipe = obj(j, "pipeline");
    const cJSON *naive = obj(pipe, "naive"), *flight = obj(pipe, "in_flight");
    assert_int_equal((int)num(naive, "groups"), 1);
    assert_int_equal((int)num(flight, "groups"), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *c = i ? flight : naive;
        double b = num(c, "bubble_measured");
        assert_true(b > 0 && b < 1);
        assert_true(num(c, "ttft_ms") > 0 && num(c, "decode_tok_s") > 0);
    }
    assert_true(fabs(num(naive, "bubble_theory") - 0.5) < 1e-12);
    assert_true(num(flight, "bubble_theory") == 0);
    double speedup = num(flight, "decode_tok_s") / num(naive, "decode_tok_s");
    assert_true(fabs(num(pipe, "throughput_speedup") - speedup) < 1e-9 * speedup);
    /* the in-flight column is the grid's own run */
    assert_true(num(flight, "decode_tok_s") == num(obj(j, "rates"), "decode_tok_s"));
    assert_int_equal((int)num(pipe, "greedy_sequences_identical"), 2);
}

/* On a grid the demo also runs one device: the same greedy tokens, less weight per worker,
 * the stages --split gave; with pp > 1 also one step in flight at a time; --trace writes the
 * timed run's spans. A tp that does not fit is a usage error naming the ones that do. */
static void test_decoder_demo_on_grids_compares_with_one_device(void **state)
{
    (void)state;
    char dir[600], trace[600];
    gen_llama(dir, sizeof dir);
    path_in_dir(trace, sizeof trace, "decoder-trace.json");
    tu_run r = RUN("--model", dir, "--dp", "1", "--pp", "2", "--tp", "2", "--gpus", "0,0,0,0",
                   "--backend", "host", "--threads", "1", "--split", "1,1", "--prompt-len", "8",
                   "--max-tokens", "4", "--batch", "2", "--json", "--trace", trace);
    assert_int_equal(r.status, 0);
    cJSON *j = parse_json_only(&r);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stage_first_block");
    assert_int_equal(cJSON_GetArraySize(stages), 3);
    assert_int_equal(cJSON_GetArrayItem(stages, 1)->valueint, 1);
    const cJSON *one = obj(j, "one_device");
    assert_int_equal((int)num(one, "greedy_sequences_identical"), 2);
    const cJSON *single = obj(one, "one_device"), *grid = obj(one, "grid");
    assert_true(num(grid, "weight_mib_per_worker") < num(single, "weight_mib_per_worker"));
    /* stage 0, the most: tp, 2 all-reduces of 64 floats in its 1 block and the embedding's
     * (vocab-parallel); pp, 64 floats to stage 1 (stage 1: its block's 2 + 8 bytes) */
    assert_int_equal((int)num(grid, "bytes_sent_per_token"), 2 * 64 * 4 + 64 * 4 + 64 * 4);
    assert_int_equal((int)num(single, "bytes_sent_per_token"), 0);
    expect_pipeline_figures(j);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj(j, "verify"), "match")));
    cJSON_Delete(j);
    tu_run_free(&r);
    expect_decoder_trace(trace);

    r = RUN("--model", dir, "--tp", "3", "--gpus", "0,0,0", "--backend", "host");
    EXPECT_USAGE(r, "tp=3 does not fit this model", "(1, 2, 4)", "--mode pp");
    tu_run_free(&r);
}

/* Without --model the demo is a decoder's, on a Llama it writes to $TMPDIR and removes. */
static void test_default_demo_is_a_decoder_on_a_generated_model(void **state)
{
    (void)state;
    tu_run r = RUN("--mode", "pp", "--gpus", "0,0", "--backend", "host", "--threads", "1",
                   "--prompt-len", "4", "--max-tokens", "3", "--batch", "2", "--no-verify");
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "decoder demo"));
    assert_non_null(strstr(r.out, "LlamaForCausalLM: 8 layers"));
    assert_non_null(strstr(r.out, "pipeline: naive against in-flight decode"));
    assert_non_null(strstr(r.out, "bubble in decode, measured"));
    const char *line = strstr(r.out, "generated model");
    assert_non_null(line);
    const char *in = strstr(line, " in "), *end = strstr(line, ", removed at the end");
    assert_true(in && end && in < end);
    char dir[600];
    snprintf(dir, sizeof dir, "%.*s", (int)(end - in - 4), in + 4);
    assert_int_equal(strncmp(dir, g_dir, strlen(g_dir)), 0); /* in $TMPDIR */
    struct stat sb;
    assert_int_not_equal(stat(dir, &sb), 0); /* and gone */
    tu_run_free(&r);
}

/* The flags one kind of demo would ignore are refused, before anything runs or is written. */
static void test_demos_refuse_flags_they_would_ignore(void **state)
{
    (void)state;
    char dir[600];
    gen_llama(dir, sizeof dir);
    const char *mlp_only[][2] = {{"--iters", "3"}};
    tu_run r;
    for (size_t i = 0; i < sizeof mlp_only / sizeof mlp_only[0]; i++) {
        r = RUN("--model", dir, "--gpus", "0", "--backend", "host", mlp_only[i][0],
                mlp_only[i][1]);
        EXPECT_USAGE(r, mlp_only[i][0], "not of the decoder demo");
        tu_run_free(&r);
        r = RUN("--mode", "pp", "--gpus", "0,1", "--backend", "host", mlp_only[i][0],
                mlp_only[i][1]); /* no --model: the decoder demo */
        EXPECT_USAGE(r, mlp_only[i][0], "not of the decoder demo", "add --mlp");
        tu_run_free(&r);
    }
    r = RUN("--mlp", "--mode", "dp", "--model", dir, "--gpus", "0", "--backend", "host");
    EXPECT_USAGE(r, "--mlp runs an MLP demo", "decoder directory");
    tu_run_free(&r);
    const char *decoder_only[] = {"--prompt-len", "--max-tokens", "--kv-tokens"};
    for (size_t i = 0; i < sizeof decoder_only / sizeof decoder_only[0]; i++) {
        r = RUN("--mlp", "--mode", "dp", "--gpus", "0", "--backend", "host", decoder_only[i],
                "8");
        EXPECT_USAGE(r, decoder_only[i], "a flag of the decoder demo", "--model");
        tu_run_free(&r);
    }
}

static void test_model_without_devices_suggests_gpus_0(void **state)
{
    (void)state;
    char dir[600];
    gen_llama(dir, sizeof dir);
    tu_run r = RUN("--model", dir);
    EXPECT_USAGE(r, "no devices given for --model", "add --gpus 0");
    assert_null(strstr(r.err, "--mode pp")); /* a decoder runs no pp demo */
    tu_run_free(&r);
}

static void test_generate_json_holds_the_sequence(void **state)
{
    (void)state;
    char dir[600];
    gen_llama(dir, sizeof dir);
    tu_run r = RUN("generate", "--model", dir, "--backend", "host", "--tokens", "1,2,3",
                   "--max-tokens", "4", "--json");
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    cJSON *j = parse_json_only(&r);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    assert_int_equal(cJSON_GetArraySize(toks), 4);
    char streamed[128] = "";
    const cJSON *t;
    cJSON_ArrayForEach(t, toks)
    {
        assert_true(cJSON_IsNumber(t) && t->valueint >= 0 && t->valueint < 256);
        snprintf(streamed + strlen(streamed), sizeof streamed - strlen(streamed), "%s%d",
                 streamed[0] ? " " : "", t->valueint);
    }
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(j, "finish_reason");
    assert_true(cJSON_IsString(finish));
    assert_string_equal(finish->valuestring, "length");
    assert_int_equal((int)num(j, "prompt_tokens"), 3);
    assert_int_equal((int)num(j, "completion_tokens"), 4);
    assert_true(num(j, "ttft_ms") > 0 && num(j, "prefill_tok_s") > 0);
    /* one sequence: both decode rates measure the same 3 gaps after the first token */
    double product = num(j, "decode_ms_per_token") * num(j, "decode_tok_s");
    assert_true(fabs(product - 1000.0) < 1e-6 * 1000.0);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* without --json the same greedy tokens stream on one line, the rates go to stderr */
    r = RUN("generate", "--model", dir, "--backend", "host", "--tokens", "1,2,3",
            "--max-tokens", "4");
    assert_int_equal(r.status, 0);
    strcat(streamed, "\n");
    assert_string_equal(r.out, streamed);
    assert_non_null(strstr(r.err, "3 prompt tokens, 4 generated (finish: length)"));
    tu_run_free(&r);

    /* on a grid (its devices on device 0 without --gpus): the same greedy tokens */
    r = RUN("generate", "--model", dir, "--backend", "host", "--tokens", "1,2,3",
            "--max-tokens", "4", "--pp", "2", "--tp", "2");
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, streamed);
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--backend", "host", "--tokens", "1,2,3", "--tp", "2",
            "--gpus", "0");
    EXPECT_USAGE(r, "tp=2 needs 2 devices but --gpus lists 1");
    tu_run_free(&r);

    /* with drafts (--spec-tokens): the same greedy tokens, and the drafts counted (none
     * without); this random model's answer falls into a loop within its 60 tokens */
    cJSON *plain = NULL, *drafted = NULL;
    for (int spec = 0; spec < 2; spec++) {
        r = RUN("generate", "--model", dir, "--backend", "host", "--tokens", "1,2,3",
                "--max-tokens", "60", "--ignore-eos", "--json", "--spec-tokens",
                spec ? "4" : "0");
        assert_int_equal(r.status, 0);
        *(spec ? &drafted : &plain) = parse_json_only(&r);
        tu_run_free(&r);
    }
    assert_true(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(plain, "tokens"),
                              cJSON_GetObjectItemCaseSensitive(drafted, "tokens"), 1));
    assert_int_equal((int)num(plain, "spec_draft_tokens"), 0);
    assert_true(num(drafted, "spec_accepted_tokens") > 0);
    assert_true(num(drafted, "spec_accepted_tokens") < num(drafted, "spec_draft_tokens"));
    cJSON_Delete(plain);
    cJSON_Delete(drafted);
}

static void test_generate_bad_input_names_the_problem(void **state)
{
    (void)state;
    char dir[600];
    gen_llama(dir, sizeof dir);
    tu_run r = RUN("generate", "--model", dir, "--tokens", "1,x");
    EXPECT_USAGE(r, "--tokens '1,x'", "'x' is not a token id");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--top-p", "0");
    EXPECT_USAGE(r, "--top-p 0 keeps no token");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--repetition-penalty", "0");
    EXPECT_USAGE(r, "--repetition-penalty 0 would divide by 0");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--frequency-penalty", "2.5");
    EXPECT_USAGE(r, "--frequency-penalty");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--min-p", "1.5");
    EXPECT_USAGE(r, "--min-p");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--spec-tokens", "17");
    EXPECT_USAGE(r, "--spec-tokens");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--spec-ngram", "0");
    EXPECT_USAGE(r, "--spec-ngram");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--spec-max-seqs", "0");
    EXPECT_USAGE(r, "--spec-max-seqs 0 is out of range");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--max-tokens", "4", "--min-tokens",
            "5");
    EXPECT_USAGE(r, "--min-tokens 5 is more than --max-tokens 4");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,99999999999");
    EXPECT_USAGE(r, "token id 99999999999 is too large");
    assert_null(strstr(r.err, "backend")); /* a token id, not a device id */
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,,2");
    EXPECT_USAGE(r, "empty entry");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--logprobs", "2");
    EXPECT_USAGE(r, "--logprobs", "add --json");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--stop-ids", "7,-1");
    EXPECT_USAGE(r, "--stop-ids", "'-1' is not a token id");
    tu_run_free(&r);
    r = RUN("generate", "--tokens", "1,2");
    EXPECT_USAGE(r, "generate needs --model DIR");
    tu_run_free(&r);
}

/* ---- generate with text: a hand-made tokenizer (the real ones: test_generate_text) ------------ */


static void hand_tokenizer(char *path, size_t len)
{
    path_in_dir(path, len, "hand-tokenizer.json");
    write_bytes(path, tt_spm_json, strlen(tt_spm_json));
}

static void test_gen_tokenizer_sets_vocab_and_generate_takes_text(void **state)
{
    (void)state;
    char tok[600], dir[600], copy[700];
    hand_tokenizer(tok, sizeof tok);
    path_in_dir(dir, sizeof dir, "hand-llama");
    tu_run r = RUN("gen", "llama", "--tokenizer", tok, "--out", dir);
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    snprintf(copy, sizeof copy, "%s/tokenizer.json", dir);
    assert_true(same_file(tok, copy));
    snprintf(copy, sizeof copy, "%s/config.json", dir);
    char *text = tu_slurp(copy, NULL);
    cJSON *c = cJSON_Parse(text);
    assert_int_equal((int)num(c, "vocab_size"), 9); /* the tokenizer's */
    assert_int_equal((int)num(c, "bos_token_id"), 1); /* <s>, which its post-processor adds */
    assert_int_equal((int)num(c, "eos_token_id"), 2); /* </s> */
    cJSON_Delete(c);
    free(text);

    r = RUN("generate", "--model", dir, "--backend", "host", "--prompt", "hi hi", "--max-tokens",
            "4", "--ignore-eos", "--json");
    assert_int_equal(r.status, 0);
    cJSON *j = parse_json_only(&r);
    assert_int_equal((int)num(j, "prompt_tokens"), 3); /* <s> ▁hi ▁hi */
    assert_int_equal((int)num(j, "completion_tokens"), 4);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
    assert_true(cJSON_IsString(t));
    char *want = malloc(strlen(t->valuestring) + 2);
    sprintf(want, "%s\n", t->valuestring);
    cJSON_Delete(j);
    tu_run_free(&r);
    /* streamed, the same text (greedy), then a newline */
    r = RUN("generate", "--model", dir, "--backend", "host", "--prompt", "hi hi", "--max-tokens",
            "4", "--ignore-eos");
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, want);
    assert_non_null(strstr(r.err, "3 prompt tokens, 4 generated (finish: length)"));
    free(want);
    tu_run_free(&r);
}

static void test_gen_tokenizer_bad_input_is_usage_error(void **state)
{
    (void)state;
    char tok[600], bad[600], dir[600];
    struct stat st;
    hand_tokenizer(tok, sizeof tok);
    path_in_dir(dir, sizeof dir, "never-written");
    tu_run r = RUN("gen", "gpt2", "--tokenizer", "/nonexistent/tokenizer.json", "--out", dir);
    EXPECT_USAGE(r, "--tokenizer", "/nonexistent/tokenizer.json");
    tu_run_free(&r);
    path_in_dir(bad, sizeof bad, "bad-tokenizer.json");
    write_bytes(bad, "{\"model\": ", 10);
    r = RUN("gen", "llama", "--tokenizer", bad, "--out", dir);
    EXPECT_USAGE(r, "bad-tokenizer.json", "JSON");
    tu_run_free(&r);
    r = RUN("gen", "llama", "--tokenizer", tok, "--vocab", "5", "--out", dir);
    EXPECT_USAGE(r, "--vocab 5 is smaller than the tokenizer's 9 tokens");
    tu_run_free(&r);
    r = RUN("gen", "llama", "--tokenizer", "", "--out", dir);
    EXPECT_USAGE(r, "--tokenizer is empty");
    tu_run_free(&r);
    assert_int_equal(stat(dir, &st), -1); /* nothing was written */
}

static void test_generate_text_bad_input_names_the_problem(void **state)
{
    (void)state;
    char dir[600], tok[600], bad[600], file[600];
    gen_llama(dir, sizeof dir); /* no tokenizer in it; context 128 */
    hand_tokenizer(tok, sizeof tok);
    tu_run r = RUN("generate", "--model", dir, "--backend", "host", "--prompt", "hi");
    EXPECT_USAGE(r, "has no tokenizer", "--tokenizer FILE");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokenizer", "/nonexistent/tokenizer.json", "--prompt",
            "hi");
    EXPECT_USAGE(r, "/nonexistent/tokenizer.json");
    tu_run_free(&r);
    path_in_dir(bad, sizeof bad, "bad-tokenizer.json");
    write_bytes(bad, "{\"model\": ", 10);
    r = RUN("generate", "--model", dir, "--tokenizer", bad, "--prompt", "hi");
    EXPECT_USAGE(r, "bad-tokenizer.json", "JSON");
    tu_run_free(&r);

    /* longer than the context: <s> and 200 x "▁hi" */
    char prompt[700] = "";
    for (int i = 0; i < 200; i++)
        strcat(prompt, i ? " hi" : "hi");
    r = RUN("generate", "--model", dir, "--backend", "host", "--tokenizer", tok, "--prompt",
            prompt);
    EXPECT_USAGE(r, "the prompt is 201 tokens", "context holds 128", "at most 127 tokens");
    tu_run_free(&r);
    path_in_dir(file, sizeof file, "prompts.txt");
    char lines[800];
    snprintf(lines, sizeof lines, "hi\n\n%s\n", prompt);
    write_bytes(file, lines, strlen(lines));
    r = RUN("generate", "--model", dir, "--backend", "host", "--tokenizer", tok, "--prompts",
            file);
    EXPECT_USAGE(r, "prompt 2 (line 3 of", "is 201 tokens");
    tu_run_free(&r);

    const char *none[] = {"0", "-3"};
    for (int i = 0; i < 2; i++) {
        r = RUN("generate", "--model", dir, "--tokenizer", tok, "--prompt", "hi", "--max-tokens",
                none[i]);
        EXPECT_USAGE(r, "generates nothing", "at least 1");
        tu_run_free(&r);
    }
    r = RUN("generate", "--model", dir, "--tokenizer", tok, "--prompt", "hi", "--stop", "");
    EXPECT_USAGE(r, "--stop is empty");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--stop", "x");
    EXPECT_USAGE(r, "--stop matches text", "--stop-ids");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--tokens", "1,2", "--prompt", "x");
    EXPECT_USAGE(r, "give one of them");
    tu_run_free(&r);
    r = RUN("generate", "--model", dir, "--prompts", "/nonexistent/prompts.txt");
    EXPECT_USAGE(r, "cannot open --prompts /nonexistent/prompts.txt");
    tu_run_free(&r);
    write_bytes(file, "\n\r\n", 3);
    r = RUN("generate", "--model", dir, "--tokenizer", tok, "--prompts", file);
    EXPECT_USAGE(r, "holds no prompt");
    tu_run_free(&r);
}

static void test_topology_report(void **state)
{
    (void)state;
    tu_run r = RUN("--topology", "--gpus", "0,1", "--backend", "host");
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    assert_true(strlen(r.out) > 0);
    /* each host device names the kernels that compute */
    assert_true(strstr(r.out, "host device 0, ") && strstr(r.out, "; kernels: "));
    assert_true(strstr(r.out, "; kernels: avx512") || strstr(r.out, "; kernels: avx2") ||
                strstr(r.out, "; kernels: portable"));
    tu_run_free(&r);
    /* --threads 1: the device's worker gets one core, core 0 */
    r = RUN("--topology", "--gpus", "0", "--backend", "host", "--threads", "1");
    assert_int_equal(r.status, 0);
    assert_true(strstr(r.out, "): cores 0\n") || strstr(r.out, "): cores 0 (PUs"));
    tu_run_free(&r);
    /* and a demo runs with it */
    r = RUN("--mlp", "--mode", "dp", "--gpus", "0,1", "--backend", "host", "--threads", "1", "--iters",
            "2", "--warmup", "0");
    if (r.status != 0)
        print_run(&r);
    assert_int_equal(r.status, 0);
    tu_run_free(&r);
    r = RUN("--topology", "--json", "--backend", "host");
    assert_int_equal(r.status, 0);
    cJSON *j = cJSON_Parse(r.out);
    assert_non_null(j);
    assert_true(num(j, "cores") >= 1);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workers");
    assert_int_equal(cJSON_GetArraySize(w), (int)num(j, "cores"));
    cJSON_Delete(j);
    tu_run_free(&r);
    /* with devices, each worker's device and its kernels */
    r = RUN("--topology", "--json", "--backend", "host", "--gpus", "0");
    assert_int_equal(r.status, 0);
    j = cJSON_Parse(r.out);
    assert_non_null(j);
    w = cJSON_GetObjectItemCaseSensitive(j, "workers");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(w, 0), "kernels");
    assert_true(cJSON_IsString(k) && k->valuestring[0]);
    cJSON_Delete(j);
    tu_run_free(&r);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cli PENGINE_BINARY\n");
        return 2;
    }
    g_bin = argv[1];
    char base[400];
    tu_temp_path(base, sizeof base, "test_cli");
    snprintf(g_dir, sizeof g_dir, "%s.d", base);
    if (mkdir(g_dir, 0700) != 0) {
        perror(g_dir);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_version_exit_0),
        cmocka_unit_test(test_unknown_mode_or_flag_is_usage_error),
        cmocka_unit_test(test_malformed_device_lists_are_usage_errors),
        cmocka_unit_test(test_missing_device_lists_the_existing_ones),
        cmocka_unit_test(test_grid_product_must_match_devices),
        cmocka_unit_test(test_width_not_divisible_by_tp_suggests_a_fix),
        cmocka_unit_test(test_more_stages_than_layers_is_usage_error),
        cmocka_unit_test(test_bad_model_files_name_the_fault),
        cmocka_unit_test(test_unwritable_trace_path_is_usage_error),
        cmocka_unit_test(test_gen_bad_input_is_usage_error),
        cmocka_unit_test(test_gen_same_seed_same_bytes),
        cmocka_unit_test(test_dp_demo_matches_bit_for_bit),
        cmocka_unit_test(test_tp_demo_matches_within_tolerance),
        cmocka_unit_test(test_pp_demo_prints_bubbles_and_timeline),
        cmocka_unit_test(test_stream_schedule_and_hybrid_grid_verify),
        cmocka_unit_test(test_bf16_demos_verify_against_one_device),
        cmocka_unit_test(test_dp_json_holds_every_figure_and_nothing_else),
        cmocka_unit_test(test_pp_json_and_trace_file),
        cmocka_unit_test(test_topology_report),
        cmocka_unit_test(test_decoder_demo_verifies_against_the_reference),
        cmocka_unit_test(test_decoder_demo_on_grids_compares_with_one_device),
        cmocka_unit_test(test_default_demo_is_a_decoder_on_a_generated_model),
        cmocka_unit_test(test_demos_refuse_flags_they_would_ignore),
        cmocka_unit_test(test_model_without_devices_suggests_gpus_0),
        cmocka_unit_test(test_generate_json_holds_the_sequence),
        cmocka_unit_test(test_generate_bad_input_names_the_problem),
        cmocka_unit_test(test_gen_tokenizer_sets_vocab_and_generate_takes_text),
        cmocka_unit_test(test_gen_tokenizer_bad_input_is_usage_error),
        cmocka_unit_test(test_generate_text_bad_input_names_the_problem),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_rm_tree(g_dir);
    return failed;
}
