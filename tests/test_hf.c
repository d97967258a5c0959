/* test_hf.c: Hugging Face model directories (md_hf): a single-file and a sharded checkpoint
 * open and find every tensor in its file; every broken directory is refused with
 * PE_EIO/PE_EFORMAT and a message naming the file and the part at fault; the config getters
 * name the key; md_hf_release gives the pages of a range back. */
#include "test_util.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/format/hf.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh empty directory under the test data folder. */
static void make_dir(char *dir, size_t len, const char *name)
{
    tu_temp_path(dir, len, name);
    rm_tree(dir);
    assert_int_equal(mkdir(dir, 0755), 0);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

static const char *config_text =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"rms_norm_eps\": 1e-05,"
    " \"model_type\": \"llama\", \"tie_word_embeddings\": false, \"eos_token_id\": [2, 7, 9],"
    " \"bos_token_id\": 1, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0},"
    " \"head_dim\": null, \"rope_theta\": 10000, \"name\": 3.5, \"flag\": 1, \"obj\": [1]}";

static float a_data[6] = {1, 2, 3, 4, 5, 6}, b_data[4] = {-1, -2, -3, -4}, c_data[3] = {7, 8, 9};

/* Writes the safetensors file dir/name holding the listed tensors (of a, b, c). */
static void write_shard(const char *dir, const char *name, const char *tensors)
{
    st_out_tensor all[] = {{"a", 2, {2, 3}, a_data}, {"b", 1, {4}, b_data},
                           {"c", 1, {3}, c_data}};
    st_out_tensor ts[3];
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (strchr(tensors, all[i].name[0]))
            ts[n++] = all[i];
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    pe_err err = {{0}};
    st_kv meta[] = {{"format", "pt"}};
    assert_int_equal(st_write_f32(p, meta, 1, ts, n, &err), PE_OK);
}

/* md_hf_open(dir) fails with s and a message holding every string of want (NULL-ended). */
static void expect_open_fails(const char *dir, pe_status s, const char *const *want)
{
    md_hf h;
    pe_err err = {{0}};
    pe_status got = md_hf_open(dir, &h, &err);
    if (got != s)
        print_error("md_hf_open(%s): got status %d, want %d; message: %s\n", dir, (int)got,
                    (int)s, err.msg);
    assert_int_equal(got, s);
    for (int i = 0; want[i]; i++)
        if (!strstr(err.msg, want[i])) {
            print_error("message \"%s\" lacks \"%s\"\n", err.msg, want[i]);
            fail();
        }
    assert_null(h.files); /* left empty */
    assert_int_equal(h.ntensors, 0);
    md_hf_close(&h); /* harmless */
}

#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_tensor(const md_hf *h, const char *name, const char *file,
                          const float *want, size_t n)
{
    const st_file *f = NULL;
    const st_tensor *t = md_hf_find(h, name, &f);
    assert_non_null(t);
    assert_non_null(f);
    assert_non_null(strstr(f->path, file));
    assert_ptr_equal(st_find(f, name), t); /* the shard's own entry */
    assert_int_equal(t->nelem, n);
    float got[8];
    pe_err err = {{0}};
    assert_int_equal(st_read_f32(f, t, got, &err), PE_OK);
    assert_memory_equal(got, want, n * sizeof *want);
}

/* ---- good directories ----------------------------------------------------------------------- */

static void test_single_file_directory(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_single");
    write_text(dir, "config.json", config_text);
    write_shard(dir, "model.safetensors", "abc");
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    assert_string_equal(h.dir, dir);
    assert_int_equal(h.nfiles, 1);
    assert_int_equal(h.ntensors, 3);
    expect_tensor(&h, "a", "/model.safetensors", a_data, 6);
    expect_tensor(&h, "b", "/model.safetensors", b_data, 4);
    expect_tensor(&h, "c", "/model.safetensors", c_data, 3);
    assert_null(md_hf_find(&h, "d", NULL));
    assert_null(md_hf_find(&h, "", NULL));

    /* the getters read the values as written */
    const char *arch, *str;
    long v;
    double d;
    int b, n;
    int32_t ids[4];
    assert_int_equal(md_hf_architecture(&h, &arch, &err), PE_OK);
    assert_string_equal(arch, "LlamaForCausalLM");
    assert_int_equal(md_hf_int(&h, "hidden_size", &v, &err), PE_OK);
    assert_int_equal(v, 64);
    assert_int_equal(md_hf_int_or(&h, "missing", -3, &v, &err), PE_OK);
    assert_int_equal(v, -3);
    assert_int_equal(md_hf_int_or(&h, "head_dim", 16, &v, &err), PE_OK); /* null: default */
    assert_int_equal(v, 16);
    assert_int_equal(md_hf_num_or(&h, "rms_norm_eps", 0.0, &d, &err), PE_OK);
    assert_true(d == 1e-5);
    assert_int_equal(md_hf_num_or(&h, "rope_theta", 0.0, &d, &err), PE_OK); /* int is a number */
    assert_true(d == 10000.0);
    assert_int_equal(md_hf_num_or(&h, "nope", 0.25, &d, &err), PE_OK);
    assert_true(d == 0.25);
    assert_int_equal(md_hf_str_or(&h, "model_type", "x", &str, &err), PE_OK);
    assert_string_equal(str, "llama");
    assert_int_equal(md_hf_str_or(&h, "nope", "dflt", &str, &err), PE_OK);
    assert_string_equal(str, "dflt");
    assert_int_equal(md_hf_bool_or(&h, "tie_word_embeddings", 1, &b, &err), PE_OK);
    assert_int_equal(b, 0);
    assert_int_equal(md_hf_bool_or(&h, "nope", 1, &b, &err), PE_OK);
    assert_int_equal(b, 1);
    assert_int_equal(md_hf_int_list(&h, "eos_token_id", ids, 4, &n, &err), PE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[2], 9);
    assert_int_equal(md_hf_int_list(&h, "eos_token_id", ids, 2, &n, &err), PE_OK);
    assert_int_equal(n, 2); /* the first max */
    assert_int_equal(md_hf_int_list(&h, "bos_token_id", ids, 4, &n, &err), PE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    assert_int_equal(md_hf_int_list(&h, "pad_token_id", ids, 4, &n, &err), PE_OK);
    assert_int_equal(n, 0);
    const void *o;
    assert_int_equal(md_hf_object(&h, "rope_scaling", &o, &err), PE_OK);
    assert_non_null(o);
    assert_int_equal(md_hf_object(&h, "head_dim", &o, &err), PE_OK); /* null */
    assert_null(o);
    assert_int_equal(md_hf_has(&h, "hidden_size"), 1);
    assert_int_equal(md_hf_has(&h, "head_dim"), 0); /* null is absent */
    assert_int_equal(md_hf_has(&h, "nope"), 0);
    md_hf_close(&h);
    md_hf_close(&h); /* harmless twice */

    /* a trailing slash names the same directory */
    char slash[620];
    snprintf(slash, sizeof slash, "%s/", dir);
    assert_int_equal(md_hf_open(slash, &h, &err), PE_OK);
    assert_string_equal(h.dir, dir);
    md_hf_close(&h);
    rm_tree(dir);
}

static const char *index_text =
    "{\"metadata\": {\"total_size\": 52},\n"
    " \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\",\n"
    "                \"b\": \"model-00002-of-00002.safetensors\",\n"
    "                \"c\": \"model-00002-of-00002.safetensors\"}}\n";

static void test_sharded_directory(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_sharded");
    write_text(dir, "config.json", config_text);
    write_shard(dir, "model-00001-of-00002.safetensors", "a");
    write_shard(dir, "model-00002-of-00002.safetensors", "bc");
    write_text(dir, "model.safetensors.index.json", index_text);
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    assert_int_equal(h.nfiles, 2);
    assert_int_equal(h.ntensors, 3);
    expect_tensor(&h, "a", "/model-00001-of-00002.safetensors", a_data, 6);
    expect_tensor(&h, "b", "/model-00002-of-00002.safetensors", b_data, 4);
    expect_tensor(&h, "c", "/model-00002-of-00002.safetensors", c_data, 3);
    md_hf_close(&h);

    /* the index wins over a stray model.safetensors beside it */
    write_shard(dir, "model.safetensors", "b");
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    assert_int_equal(h.nfiles, 2);
    md_hf_close(&h);
    rm_tree(dir);
}

/* ---- broken directories ---------------------------------------------------------------------- */

static void test_missing_parts(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_missing");
    expect_open_fails(dir, PE_EIO, WANT("config.json", "No such file"));
    write_text(dir, "config.json", config_text);
    expect_open_fails(dir, PE_EIO, WANT(dir, "model.safetensors", "index.json"));
    write_text(dir, "pytorch_model.bin", "x");
    expect_open_fails(dir, PE_EIO, WANT("pytorch_model.bin", "convert"));

    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s/nope", dir);
    expect_open_fails(nodir, PE_EIO, WANT(nodir));
    snprintf(nodir, sizeof nodir, "%s/config.json", dir);
    expect_open_fails(nodir, PE_EIO, WANT(nodir, "not a directory"));
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(NULL, &h, &err), PE_EINVAL);
    rm_tree(dir);
}

static void test_bad_config(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_badcfg");
    write_shard(dir, "model.safetensors", "abc");
    write_text(dir, "config.json", "{\"hidden_size\": 64,, }");
    expect_open_fails(dir, PE_EFORMAT, WANT("config.json", "not valid JSON"));
    write_text(dir, "config.json", "[1, 2, 3]");
    expect_open_fails(dir, PE_EFORMAT, WANT("config.json", "not an object"));
    write_text(dir, "config.json", "{\"a\": 1} {\"b\": 2}");
    expect_open_fails(dir, PE_EFORMAT, WANT("config.json", "after the JSON"));
    write_text(dir, "config.json", "");
    expect_open_fails(dir, PE_EFORMAT, WANT("config.json"));
    rm_tree(dir);
}

static void test_bad_index(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_badidx");
    write_text(dir, "config.json", config_text);
    write_shard(dir, "s1.safetensors", "a");
    write_shard(dir, "s2.safetensors", "bc");
    const char *I = "model.safetensors.index.json";

    /* a shard that does not exist */
    write_text(dir, I, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\"}}");
    expect_open_fails(dir, PE_EIO, WANT("s3.safetensors", I, "No such file"));
    /* a tensor that is not in the shard the index names */
    write_text(dir, I, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s1.safetensors\","
                       " \"b\": \"s2.safetensors\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "'c'", "s1.safetensors", "s2.safetensors"));
    write_text(dir, I, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"z\": \"s2.safetensors\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "'z'", "s2.safetensors", "no such tensor"));
    /* a tensor in two shards */
    write_shard(dir, "s3.safetensors", "cb");
    write_text(dir, I, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\","
                       " \"c\": \"s3.safetensors\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT("'b'", "two shards", "s2.safetensors",
                                            "s3.safetensors"));
    /* paths outside the directory */
    write_text(dir, I, "{\"weight_map\": {\"a\": \"../x\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "'a'", "../x", "outside"));
    write_text(dir, I, "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "/etc/passwd", "outside"));
    write_text(dir, I, "{\"weight_map\": {\"a\": \"sub/../../x\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "outside"));
    /* a damaged index */
    write_text(dir, I, "{\"metadata\": {}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "weight_map"));
    write_text(dir, I, "{\"weight_map\": {}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "no tensor"));
    write_text(dir, I, "{\"weight_map\": {\"a\": 3}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "'a'", "not a file name"));
    write_text(dir, I, "{\"weight_map\": ");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "not valid JSON"));
    write_text(dir, I, "{\"metadata\": 3, \"weight_map\": {\"a\": \"s1.safetensors\"}}");
    expect_open_fails(dir, PE_EFORMAT, WANT(I, "metadata"));
    /* and once fixed, it opens */
    write_text(dir, I, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\","
                       " \"c\": \"s2.safetensors\"}}");
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    md_hf_close(&h);
    rm_tree(dir);
}

/* A truncated shard is refused by the safetensors checks, with the shard named. */
static void test_truncated_shard(void **state)
{
    (void)state;
    char dir[600], p[700];
    make_dir(dir, sizeof dir, "hf_trunc");
    write_text(dir, "config.json", config_text);
    write_shard(dir, "s1.safetensors", "a");
    write_shard(dir, "s2.safetensors", "bc");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\","
               " \"c\": \"s2.safetensors\"}}");
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size - 5), 0);
    expect_open_fails(dir, PE_EFORMAT, WANT("s2.safetensors", "truncated", "index.json"));
    rm_tree(dir);

    make_dir(dir, sizeof dir, "hf_trunc1");
    write_text(dir, "config.json", config_text);
    write_shard(dir, "model.safetensors", "abc");
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size - 1), 0);
    expect_open_fails(dir, PE_EFORMAT, WANT("model.safetensors", "truncated"));
    rm_tree(dir);
}

/* Each getter on a value of the wrong type: PE_EFORMAT naming config.json, the key, the type
 * found and the type wanted. */
static void test_getter_types(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "hf_types");
    write_text(dir, "config.json",
               "{\"architectures\": \"GPT2LMHeadModel\", \"n_embd\": \"768\", \"eps\": 1.5,"
               " \"eps_s\": \"1e-5\", \"tp\": 1, \"eos\": [1, \"2\"], \"eos2\": {\"a\": 1},"
               " \"obj\": [1, 2], \"big\": 1e300}");
    write_shard(dir, "model.safetensors", "a");
    md_hf h;
    pe_err err = {{0}};
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    long v;
    double d;
    const char *s;
    int b, n;
    int32_t ids[4];
    const void *o;
#define EXPECT_BAD(call, ...)                                                                    \
    do {                                                                                         \
        err.msg[0] = 0;                                                                          \
        assert_int_equal((call), PE_EFORMAT);                                                    \
        const char *const *w_ = WANT("config.json", __VA_ARGS__);                                \
        for (int i_ = 0; w_[i_]; i_++)                                                           \
            if (!strstr(err.msg, w_[i_])) {                                                      \
                print_error("message \"%s\" lacks \"%s\"\n", err.msg, w_[i_]);                   \
                fail();                                                                          \
            }                                                                                    \
    } while (0)
    EXPECT_BAD(md_hf_int(&h, "n_embd", &v, &err), "\"n_embd\"", "a string", "an integer");
    EXPECT_BAD(md_hf_int(&h, "eps", &v, &err), "\"eps\"", "a number", "an integer");
    EXPECT_BAD(md_hf_int(&h, "big", &v, &err), "\"big\"", "beyond 2^53", "an integer");
    EXPECT_BAD(md_hf_int(&h, "n_layer", &v, &err), "\"n_layer\"");
    EXPECT_BAD(md_hf_int_or(&h, "n_embd", 1, &v, &err), "\"n_embd\"", "a string");
    EXPECT_BAD(md_hf_num_or(&h, "eps_s", 1, &d, &err), "\"eps_s\"", "a string", "a number");
    EXPECT_BAD(md_hf_str_or(&h, "eps", "x", &s, &err), "\"eps\"", "a number", "a string");
    EXPECT_BAD(md_hf_bool_or(&h, "tp", 0, &b, &err), "\"tp\"", "an integer", "a boolean");
    EXPECT_BAD(md_hf_int_list(&h, "eos", ids, 4, &n, &err), "\"eos\"", "entry 1", "a string");
    EXPECT_BAD(md_hf_int_list(&h, "eos2", ids, 4, &n, &err), "\"eos2\"", "an object");
    EXPECT_BAD(md_hf_int_list(&h, "eps", ids, 4, &n, &err), "\"eps\"", "a number");
    EXPECT_BAD(md_hf_architecture(&h, &s, &err), "\"architectures\"", "a string", "list");
    EXPECT_BAD(md_hf_object(&h, "obj", &o, &err), "\"obj\"", "a list", "an object");
    md_hf_close(&h);

    write_text(dir, "config.json", "{\"architectures\": []}");
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    EXPECT_BAD(md_hf_architecture(&h, &s, &err), "\"architectures\"", "an empty list");
    md_hf_close(&h);
    write_text(dir, "config.json", "{}");
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    EXPECT_BAD(md_hf_architecture(&h, &s, &err), "\"architectures\"", "LlamaForCausalLM");
    md_hf_close(&h);
#undef EXPECT_BAD
    rm_tree(dir);
}

/* ---- md_hf_release ------------------------------------------------------------------------- */

/* Resident bytes of the mapping that holds address p, from /proc/self/smaps; -1 if unknown. */
static long rss_of_mapping(const void *p)
{
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp)
        return -1;
    char line[512];
    int in = 0;
    long rss = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = a >= lo && a < hi;
        else if (in && strncmp(line, "Rss:", 4) == 0) {
            rss = strtol(line + 4, NULL, 10) * 1024;
            break;
        }
    }
    fclose(fp);
    return rss;
}

static void test_release_drops_pages(void **state)
{
    (void)state;
    char dir[600], p[700];
    make_dir(dir, sizeof dir, "hf_release");
    write_text(dir, "config.json", "{}");
    size_t n = tu_size((size_t)4 << 20, (size_t)1 << 20) / sizeof(float); /* 1-4 MiB */
    float *w = malloc(n * sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < n; i++)
        w[i] = (float)i;
    st_out_tensor t = {"w", 1, {n}, w};
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(p, NULL, 0, &t, 1, &err), PE_OK);
    md_hf h;
    assert_int_equal(md_hf_open(dir, &h, &err), PE_OK);
    const st_file *f;
    const st_tensor *tt = md_hf_find(&h, "w", &f);
    assert_non_null(tt);
    volatile float sum = 0;
    for (size_t i = 0; i < n; i += 256) /* touch every page */
        sum += ((const float *)tt->data)[i];
    long before = rss_of_mapping(tt->data);
    if (before < 0) {
        md_hf_close(&h);
        rm_tree(dir);
        free(w);
        skip(); /* no /proc/self/smaps */
    }
    assert_true(before >= (long)(n * sizeof(float)));
    md_hf_release(f, tt->data, n * sizeof(float));
    long after = rss_of_mapping(tt->data);
    assert_true(after <= before - (long)(n * sizeof(float)) + 8192); /* all but edge pages */
    /* the data reads back from the file, unchanged */
    assert_memory_equal(tt->data, w, n * sizeof(float));
    /* ranges at and past the edges are harmless */
    md_hf_release(f, f->map, f->map_bytes + 12345);
    md_hf_release(f, (const char *)tt->data + 3, 5);
    md_hf_release(f, NULL, 10);
    md_hf_release(NULL, tt->data, 10);
    assert_memory_equal(tt->data, w, n * sizeof(float));
    md_hf_close(&h);
    rm_tree(dir);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file_directory),
        cmocka_unit_test(test_sharded_directory),
        cmocka_unit_test(test_missing_parts),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_bad_index),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_getter_types),
        cmocka_unit_test(test_release_drops_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
