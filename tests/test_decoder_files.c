/* test_decoder_files.c: bad Hugging Face directories get PE_EFORMAT or PE_EIO from
 * pe_engine_load, with a message naming the file, the tensor or key and the shape: an
 * unknown architecture, a missing tensor, a tensor of the wrong shape (a config that
 * disagrees with the weights), a truncated shard, an index naming a missing shard, an
 * unsupported rope_scaling or activation, a weight in an integer dtype. Run under ASan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "test_models.h"

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Sets key of dir/config.json to the JSON value `json`. */
static void set_config(const char *dir, const char *key, const char *json)
{
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_file(path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    cJSON *v = cJSON_Parse(json);
    assert_non_null(v);
    cJSON_AddItemToObject(root, key, v);
    char *out = cJSON_Print(root);
    write_file(path, out);
    free(out);
    cJSON_Delete(root);
    free(text);
}

/* pe_engine_load(dir) fails with s, and the message holds every one of the words. */
static void assert_load_fails(const char *dir, pe_status s, const char *const *words)
{
    static const int dev0 = 0;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 1;
    cfg.devices = &dev0;
    pe_engine *e = NULL;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    pe_status got = pe_engine_load(e, dir);
    const char *msg = pe_last_error();
    if (got != s)
        fail_msg("%s: load gave %s (%s), expected %s", dir, pe_status_str(got), msg,
                 pe_status_str(s));
    for (int i = 0; words[i]; i++)
        if (!strstr(msg, words[i]))
            fail_msg("the message \"%s\" does not name \"%s\"", msg, words[i]);
    /* a failed load leaves an engine that refuses sequences with a clear error */
    pe_seq_params p;
    pe_seq_params_init(&p);
    int32_t t = 1;
    p.prompt = &t;
    p.prompt_len = 1;
    uint64_t id;
    assert_int_not_equal(pe_seq_submit(e, &p, &id), PE_OK);
    pe_engine_destroy(e);
}

static void fresh(pe_gen_arch arch, const char *name, char *dir, size_t len, int shards)
{
    pe_gen_spec spec;
    tm_tiny(&spec, arch, 1);
    spec.shards = shards;
    tm_write(&spec, name, dir, len);
}

static void an_unknown_architecture_is_named(void **state)
{
    (void)state;
    char dir[512];
    fresh(PE_GEN_LLAMA, "bad_arch", dir, sizeof dir, 1);
    set_config(dir, "architectures", "[\"FalconForCausalLM\"]");
    const char *words[] = {"config.json", "FalconForCausalLM", "LlamaForCausalLM", NULL};
    assert_load_fails(dir, PE_EFORMAT, words);
    tm_remove(dir);
}

static void a_missing_tensor_is_named(void **state)
{
    (void)state;
    char dir[512];
    fresh(PE_GEN_GPT2, "bad_missing", dir, sizeof dir, 1);
    set_config(dir, "n_layer", "3"); /* the file has 2 layers */
    const char *words[] = {"missing tensor", "h.2.", NULL};
    assert_load_fails(dir, PE_EFORMAT, words);
    tm_remove(dir);
}

static void a_config_that_disagrees_with_a_tensor_names_both_shapes(void **state)
{
    (void)state;
    char dir[512];
    fresh(PE_GEN_LLAMA, "bad_shape", dir, sizeof dir, 1);
    set_config(dir, "intermediate_size", "200"); /* the file's MLP is 176 wide */
    const char *words[] = {"model.safetensors", "mlp.gate_proj.weight", "(176, 64)",
                           "(200, 64)", "disagree", NULL};
    assert_load_fails(dir, PE_EFORMAT, words);
    tm_remove(dir);
}

static void a_truncated_shard_is_named(void **state)
{
    (void)state;
    char dir[512], path[600];
    fresh(PE_GEN_LLAMA, "bad_trunc", dir, sizeof dir, 1);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 1000), 0);
    const char *words[] = {"model.safetensors", "truncated", NULL};
    assert_load_fails(dir, PE_EFORMAT, words);
    tm_remove(dir);
}

static void an_index_naming_a_missing_shard_is_named(void **state)
{
    (void)state;
    char dir[512], path[600];
    fresh(PE_GEN_GPT2, "bad_index", dir, sizeof dir, 3);
    snprintf(path, sizeof path, "%s/model-00002-of-00003.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    const char *words[] = {"model-00002-of-00003.safetensors", NULL};
    assert_load_fails(dir, PE_EIO, words);
    tm_remove(dir);
}

static void unsupported_rope_scaling_and_activation_are_named(void **state)
{
    (void)state;
    char dir[512];
    fresh(PE_GEN_LLAMA, "bad_rope", dir, sizeof dir, 1);
    set_config(dir, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}");
    const char *rope[] = {"rope_scaling", "yarn", "llama3", NULL};
    assert_load_fails(dir, PE_EFORMAT, rope);
    set_config(dir, "rope_scaling", "null");
    set_config(dir, "hidden_act", "\"gelu\"");
    const char *act[] = {"hidden_act", "gelu", "silu", NULL};
    assert_load_fails(dir, PE_EFORMAT, act);
    tm_remove(dir);
}

static void a_config_value_of_the_wrong_type_is_named(void **state)
{
    (void)state;
    char dir[512];
    fresh(PE_GEN_GPT2, "bad_type", dir, sizeof dir, 1);
    set_config(dir, "n_head", "\"four\"");
    const char *words[] = {"config.json", "n_head", NULL};
    assert_load_fails(dir, PE_EFORMAT, words);
    tm_remove(dir);
}

static void a_directory_without_config_is_an_io_error(void **state)
{
    (void)state;
    char dir[512], path[600];
    fresh(PE_GEN_LLAMA, "bad_noconfig", dir, sizeof dir, 1);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(unlink(path), 0);
    const char *words[] = {"config.json", NULL};
    assert_load_fails(dir, PE_EIO, words);
    tm_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_unknown_architecture_is_named),
        cmocka_unit_test(a_missing_tensor_is_named),
        cmocka_unit_test(a_config_that_disagrees_with_a_tensor_names_both_shapes),
        cmocka_unit_test(a_truncated_shard_is_named),
        cmocka_unit_test(an_index_naming_a_missing_shard_is_named),
        cmocka_unit_test(unsupported_rope_scaling_and_activation_are_named),
        cmocka_unit_test(a_config_value_of_the_wrong_type_is_named),
        cmocka_unit_test(a_directory_without_config_is_an_io_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
