/* test_gen.c: the random decoder writer (pe_gen_write) and the MLP door: the same seed
 * writes the same bytes; a sharded checkpoint holds exactly the single file's tensors; bf16
 * files hold the rounded f32 values; the tensor names, shapes and config keys of each
 * architecture are Hugging Face's; the init follows the spec; bad specs are refused; and the
 * command (pengine gen gpt2|llama, its path given as the argument) writes what the spec of
 * its flags writes. */
#include "test_util.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/bf16.h"
#include "model/format/hf.h"
#include "model/mlp/mlp.h"
#include "pengine/pengine_tools.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void temp_dir(char *dir, size_t len, const char *name)
{
    tu_temp_path(dir, len, name);
    rm_tree(dir);
}

static void write_ok(const pe_gen_spec *sp, const char *dir)
{
    pe_status s = pe_gen_write(sp, dir);
    if (s != PE_OK)
        print_error("pe_gen_write(%s): %s\n", dir, pe_last_error());
    assert_int_equal(s, PE_OK);
}

static void init_ok(pe_gen_spec *sp, pe_gen_arch arch, const char *preset)
{
    assert_int_equal(pe_gen_init(sp, arch, preset), PE_OK);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, fp), *n);
    b[*n] = 0;
    fclose(fp);
    return b;
}

static int same_file(const char *dir_a, const char *dir_b, const char *name)
{
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/%s", dir_a, name);
    snprintf(b, sizeof b, "%s/%s", dir_b, name);
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void open_ok(const char *dir, md_hf *h)
{
    pe_err err = {{0}};
    pe_status s = md_hf_open(dir, h, &err);
    if (s != PE_OK)
        print_error("md_hf_open: %s\n", err.msg);
    assert_int_equal(s, PE_OK);
}

/* The tensor name of h with the shape given (ndim entries); returns it. */
static const st_tensor *expect_shape(const md_hf *h, const char *name, int ndim, size_t d0,
                                     size_t d1)
{
    const st_tensor *t = md_hf_find(h, name, NULL);
    if (!t)
        print_error("missing tensor %s\n", name);
    assert_non_null(t);
    assert_int_equal(t->ndim, ndim);
    if (ndim > 0)
        assert_int_equal(t->shape[0], d0);
    if (ndim > 1)
        assert_int_equal(t->shape[1], d1);
    return t;
}

static float *read_tensor(const md_hf *h, const char *name)
{
    const st_file *f;
    const st_tensor *t = md_hf_find(h, name, &f);
    assert_non_null(t);
    float *x = malloc((t->nelem ? t->nelem : 1) * sizeof *x);
    assert_non_null(x);
    pe_err err = {{0}};
    assert_int_equal(st_read_f32(f, t, x, &err), PE_OK);
    return x;
}

static long cfg_int(const md_hf *h, const char *key)
{
    long v;
    pe_err err = {{0}};
    assert_int_equal(md_hf_int(h, key, &v, &err), PE_OK);
    return v;
}

static const char *cfg_str(const md_hf *h, const char *key)
{
    const char *v;
    pe_err err = {{0}};
    assert_int_equal(md_hf_str_or(h, key, NULL, &v, &err), PE_OK);
    assert_non_null(v);
    return v;
}

static double cfg_num(const md_hf *h, const char *key)
{
    double v;
    pe_err err = {{0}};
    assert_true(md_hf_has(h, key));
    assert_int_equal(md_hf_num_or(h, key, NAN, &v, &err), PE_OK);
    return v;
}

static int cfg_bool(const md_hf *h, const char *key)
{
    int v;
    pe_err err = {{0}};
    assert_true(md_hf_has(h, key));
    assert_int_equal(md_hf_bool_or(h, key, -1, &v, &err), PE_OK);
    return v;
}

/* mean and standard deviation of x(n) */
static void moments(const float *x, size_t n, double *mean, double *sd)
{
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    *sd = sqrt(q / (double)n);
}

static int all_equal(const float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &v, sizeof v) != 0) /* bits: +0 is not -0 */
            return 0;
    return 1;
}

/* ---- reproducibility --------------------------------------------------------------------------- */

static void test_same_seed_same_bytes(void **state)
{
    (void)state;
    char a[600], b[600], c[600];
    temp_dir(a, sizeof a, "gen_seed_a");
    temp_dir(b, sizeof b, "gen_seed_b");
    temp_dir(c, sizeof c, "gen_seed_c");
    for (int arch = PE_GEN_GPT2; arch <= PE_GEN_QWEN2; arch++) {
        pe_gen_spec sp;
        init_ok(&sp, (pe_gen_arch)arch, "tiny");
        sp.seed = 7;
        write_ok(&sp, a);
        write_ok(&sp, b);
        sp.seed = 8;
        write_ok(&sp, c);
        assert_true(same_file(a, b, "config.json"));
        assert_true(same_file(a, b, "model.safetensors"));
        assert_true(same_file(a, c, "config.json"));
        assert_false(same_file(a, c, "model.safetensors"));
    }
    rm_tree(a);
    rm_tree(b);
    rm_tree(c);
}

/* The sharded checkpoint holds the single file's tensors, bit for bit, and its index names
 * every tensor's shard and the total size, as save_pretrained writes them. */
static void test_sharded_equals_single(void **state)
{
    (void)state;
    char one[600], many[600];
    temp_dir(one, sizeof one, "gen_one");
    temp_dir(many, sizeof many, "gen_many");
    const pe_gen_arch archs[] = {PE_GEN_GPT2, PE_GEN_QWEN2};
    for (int k = 0; k < 2; k++) {
        pe_gen_spec sp;
        init_ok(&sp, archs[k], "tiny");
        sp.dtype = k ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
        write_ok(&sp, one);
        sp.shards = 3;
        write_ok(&sp, many);
        md_hf h1, h3;
        open_ok(one, &h1);
        open_ok(many, &h3);
        assert_int_equal(h1.nfiles, 1);
        assert_int_equal(h3.nfiles, 3);
        assert_int_equal(h1.ntensors, h3.ntensors);
        size_t total = 0;
        for (int i = 0; i < h1.files[0].ntensors; i++) {
            const st_tensor *t = &h1.files[0].tensors[i];
            const st_tensor *u = md_hf_find(&h3, t->name, NULL);
            assert_non_null(u);
            assert_int_equal(u->dtype, t->dtype);
            assert_int_equal(u->ndim, t->ndim);
            assert_memory_equal(u->shape, t->shape, sizeof t->shape);
            assert_int_equal(u->end - u->begin, t->end - t->begin);
            assert_memory_equal(u->data, t->data, t->end - t->begin);
            total += t->end - t->begin;
        }
        for (int j = 1; j <= 3; j++) { /* the shard names, each shard non-empty */
            char want[64];
            snprintf(want, sizeof want, "/model-%05d-of-00003.safetensors", j);
            int f = 0;
            while (f < 3 && !strstr(h3.files[f].path, want))
                f++;
            assert_true(f < 3);
            assert_true(h3.files[f].ntensors > 0);
            assert_string_equal(st_meta(&h3.files[f], "format"), "pt");
        }
        char p[700];
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", many);
        size_t n;
        char *text = (char *)slurp(p, &n);
        cJSON *idx = cJSON_Parse(text);
        assert_non_null(idx);
        cJSON *meta = cJSON_GetObjectItem(idx, "metadata");
        assert_true(cJSON_GetObjectItem(meta, "total_size")->valuedouble == (double)total);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(idx, "weight_map")), h1.ntensors);
        assert_non_null(strstr(text, "{\n  \"metadata\": {\n    \"total_size\": "));
        cJSON_Delete(idx);
        free(text);
        md_hf_close(&h1);
        md_hf_close(&h3);

        /* single-file again into the sharded directory: the stale index goes */
        sp.shards = 1;
        write_ok(&sp, many);
        open_ok(many, &h3);
        assert_int_equal(h3.nfiles, 1);
        md_hf_close(&h3);
        assert_true(same_file(one, many, "model.safetensors"));
        rm_tree(many);
    }
    rm_tree(one);
}

/* A bf16 file holds the f32 file's values rounded to nearest even, and says bfloat16. */
static void test_bf16_holds_rounded_f32(void **state)
{
    (void)state;
    char f32[600], b16[600];
    temp_dir(f32, sizeof f32, "gen_f32");
    temp_dir(b16, sizeof b16, "gen_b16");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_LLAMA, "tiny");
    sp.norm_std = 0.1; /* norms not all 1, so rounding shows there too */
    write_ok(&sp, f32);
    sp.dtype = PE_DTYPE_BF16;
    write_ok(&sp, b16);
    md_hf a, b;
    open_ok(f32, &a);
    open_ok(b16, &b);
    assert_string_equal(cfg_str(&a, "torch_dtype"), "float32");
    assert_string_equal(cfg_str(&b, "torch_dtype"), "bfloat16");
    size_t changed = 0, n = 0;
    for (int i = 0; i < a.files[0].ntensors; i++) {
        const st_tensor *t = &a.files[0].tensors[i];
        const st_tensor *u = md_hf_find(&b, t->name, NULL);
        assert_non_null(u);
        assert_int_equal(t->dtype, ST_F32);
        assert_int_equal(u->dtype, ST_BF16);
        assert_int_equal(u->nelem, t->nelem);
        const float *x = t->data;
        const uint16_t *y = u->data;
        for (size_t k = 0; k < t->nelem; k++) {
            assert_int_equal(y[k], pe_k_to_bf16(x[k]));
            changed += pe_k_from_bf16(y[k]) != x[k];
        }
        n += t->nelem;
    }
    assert_true(changed > n / 2); /* the f32 values are not bf16 already */
    md_hf_close(&a);
    md_hf_close(&b);
    rm_tree(f32);
    rm_tree(b16);
}

/* ---- layouts ----------------------------------------------------------------------------------- */

static void test_gpt2_tensors_and_config(void **state)
{
    (void)state;
    char dir[600];
    temp_dir(dir, sizeof dir, "gen_gpt2");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "tiny");
    sp.layers = 3;
    sp.hidden = 48;
    sp.heads = 6;
    sp.vocab = 101;
    sp.context = 40;
    sp.bos_token_id = sp.eos_token_id = 100;
    write_ok(&sp, dir);
    md_hf h;
    open_ok(dir, &h);
    const size_t C = 48, V = 101, P = 40, I = 4 * C;
    expect_shape(&h, "transformer.wte.weight", 2, V, C);
    expect_shape(&h, "transformer.wpe.weight", 2, P, C);
    char n[96];
    for (int l = 0; l < 3; l++) {
#define SHAPE(suffix, nd, a, b)                                                                  \
    do {                                                                                         \
        snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix);                                 \
        expect_shape(&h, n, nd, a, b);                                                           \
    } while (0)
        SHAPE("ln_1.weight", 1, C, 0);
        SHAPE("ln_1.bias", 1, C, 0);
        SHAPE("attn.c_attn.weight", 2, C, 3 * C); /* Conv1D: [in, out] */
        SHAPE("attn.c_attn.bias", 1, 3 * C, 0);
        SHAPE("attn.c_proj.weight", 2, C, C);
        SHAPE("attn.c_proj.bias", 1, C, 0);
        SHAPE("ln_2.weight", 1, C, 0);
        SHAPE("ln_2.bias", 1, C, 0);
        SHAPE("mlp.c_fc.weight", 2, C, I);
        SHAPE("mlp.c_fc.bias", 1, I, 0);
        SHAPE("mlp.c_proj.weight", 2, I, C);
        SHAPE("mlp.c_proj.bias", 1, C, 0);
#undef SHAPE
    }
    expect_shape(&h, "transformer.ln_f.weight", 1, C, 0);
    expect_shape(&h, "transformer.ln_f.bias", 1, C, 0);
    assert_int_equal(h.ntensors, 2 + 12 * 3 + 2); /* and nothing else: no lm_head (tied) */
    assert_null(md_hf_find(&h, "lm_head.weight", NULL));

    const char *arch;
    pe_err err = {{0}};
    assert_int_equal(md_hf_architecture(&h, &arch, &err), PE_OK);
    assert_string_equal(arch, "GPT2LMHeadModel");
    assert_string_equal(cfg_str(&h, "model_type"), "gpt2");
    assert_string_equal(cfg_str(&h, "activation_function"), "gelu_new");
    assert_string_equal(cfg_str(&h, "torch_dtype"), "float32");
    assert_int_equal(cfg_int(&h, "n_embd"), 48);
    assert_int_equal(cfg_int(&h, "n_layer"), 3);
    assert_int_equal(cfg_int(&h, "n_head"), 6);
    assert_int_equal(cfg_int(&h, "n_positions"), 40);
    assert_int_equal(cfg_int(&h, "n_ctx"), 40);
    assert_int_equal(cfg_int(&h, "vocab_size"), 101);
    assert_int_equal(cfg_int(&h, "bos_token_id"), 100);
    assert_int_equal(cfg_int(&h, "eos_token_id"), 100);
    assert_false(md_hf_has(&h, "n_inner")); /* null: 4 * n_embd */
    assert_true(cfg_num(&h, "layer_norm_epsilon") == 1e-5);
    assert_int_equal(cfg_bool(&h, "tie_word_embeddings"), 1);
    assert_int_equal(cfg_bool(&h, "scale_attn_weights"), 1);
    assert_int_equal(cfg_bool(&h, "scale_attn_by_inverse_layer_idx"), 0);
    md_hf_close(&h);

    /* n_inner given, untied: lm_head.weight (V, C) outside "transformer." */
    sp.inner = 100;
    sp.tie_embeddings = 0;
    write_ok(&sp, dir);
    open_ok(dir, &h);
    assert_int_equal(cfg_int(&h, "n_inner"), 100);
    assert_int_equal(cfg_bool(&h, "tie_word_embeddings"), 0);
    expect_shape(&h, "transformer.h.0.mlp.c_fc.weight", 2, C, 100);
    expect_shape(&h, "transformer.h.2.mlp.c_proj.weight", 2, 100, C);
    expect_shape(&h, "lm_head.weight", 2, V, C);
    assert_int_equal(h.ntensors, 2 + 12 * 3 + 2 + 1);
    md_hf_close(&h);
    rm_tree(dir);
}

/* config.json is printed as transformers prints it: json.dumps(indent=2, sort_keys=True). */
static void test_gpt2_config_text(void **state)
{
    (void)state;
    char dir[600], p[700];
    temp_dir(dir, sizeof dir, "gen_text");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "124m");
    sp.layers = 1; /* a small file; the 124m config otherwise */
    sp.hidden = 24;
    sp.context = 16;
    sp.dtype = PE_DTYPE_BF16;
    write_ok(&sp, dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    size_t n;
    char *text = (char *)slurp(p, &n);
    const char *want = "{\n"
                       "  \"activation_function\": \"gelu_new\",\n"
                       "  \"architectures\": [\n"
                       "    \"GPT2LMHeadModel\"\n"
                       "  ],\n"
                       "  \"attn_pdrop\": 0.1,\n"
                       "  \"bos_token_id\": 50256,\n"
                       "  \"embd_pdrop\": 0.1,\n"
                       "  \"eos_token_id\": 50256,\n"
                       "  \"initializer_range\": 0.02,\n"
                       "  \"layer_norm_epsilon\": 1e-05,\n"
                       "  \"model_type\": \"gpt2\",\n"
                       "  \"n_ctx\": 16,\n"
                       "  \"n_embd\": 24,\n"
                       "  \"n_head\": 12,\n"
                       "  \"n_inner\": null,\n"
                       "  \"n_layer\": 1,\n"
                       "  \"n_positions\": 16,\n"
                       "  \"reorder_and_upcast_attn\": false,\n"
                       "  \"resid_pdrop\": 0.1,\n"
                       "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                       "  \"scale_attn_weights\": true,\n"
                       "  \"tie_word_embeddings\": true,\n"
                       "  \"torch_dtype\": \"bfloat16\",\n"
                       "  \"use_cache\": true,\n"
                       "  \"vocab_size\": 50257\n"
                       "}\n";
    assert_string_equal(text, want);
    free(text);
    rm_tree(dir);
}

static void test_llama_family_tensors_and_config(void **state)
{
    (void)state;
    char dir[600];
    temp_dir(dir, sizeof dir, "gen_llama");
    for (int arch = PE_GEN_LLAMA; arch <= PE_GEN_QWEN2; arch++) {
        pe_gen_spec sp;
        init_ok(&sp, (pe_gen_arch)arch, "tiny");
        sp.hidden = 48;
        sp.heads = 6;
        sp.kv_heads = 3;
        sp.head_dim = 10; /* not hidden / heads: written */
        sp.inner = 70;
        sp.vocab = 90;
        sp.context = 64;
        sp.tie_embeddings = arch == PE_GEN_QWEN2;
        if (arch == PE_GEN_LLAMA) {
            sp.rope_scaling = PE_GEN_ROPE_LLAMA3;
            sp.rope_factor = 4;
            sp.rope_low_freq_factor = 1.5;
            sp.rope_high_freq_factor = 3;
            sp.rope_original_context = 32;
        }
        if (arch == PE_GEN_MISTRAL) {
            sp.rope_scaling = PE_GEN_ROPE_LINEAR;
            sp.rope_factor = 2;
            sp.sliding_window = 24;
        }
        write_ok(&sp, dir);
        md_hf h;
        open_ok(dir, &h);
        const size_t C = 48, V = 90, I = 70, Q = 60, KV = 30;
        expect_shape(&h, "model.embed_tokens.weight", 2, V, C);
        char n[96];
        int bias = arch == PE_GEN_QWEN2;
        for (int l = 0; l < 2; l++) {
#define SHAPE(suffix, nd, a, b)                                                                  \
    do {                                                                                         \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                  \
        expect_shape(&h, n, nd, a, b);                                                           \
    } while (0)
            SHAPE("input_layernorm.weight", 1, C, 0);
            SHAPE("self_attn.q_proj.weight", 2, Q, C); /* nn.Linear: (out, in) */
            SHAPE("self_attn.k_proj.weight", 2, KV, C);
            SHAPE("self_attn.v_proj.weight", 2, KV, C);
            SHAPE("self_attn.o_proj.weight", 2, C, Q);
            SHAPE("post_attention_layernorm.weight", 1, C, 0);
            SHAPE("mlp.gate_proj.weight", 2, I, C);
            SHAPE("mlp.up_proj.weight", 2, I, C);
            SHAPE("mlp.down_proj.weight", 2, C, I);
            if (bias) {
                SHAPE("self_attn.q_proj.bias", 1, Q, 0);
                SHAPE("self_attn.k_proj.bias", 1, KV, 0);
                SHAPE("self_attn.v_proj.bias", 1, KV, 0);
            }
#undef SHAPE
        }
        expect_shape(&h, "model.norm.weight", 1, C, 0);
        int tied = arch == PE_GEN_QWEN2;
        if (!tied)
            expect_shape(&h, "lm_head.weight", 2, V, C);
        assert_int_equal(h.ntensors, 1 + 2 * (9 + 3 * bias) + 1 + !tied);

        static const char *const archs[] = {[PE_GEN_LLAMA] = "LlamaForCausalLM",
                                            [PE_GEN_MISTRAL] = "MistralForCausalLM",
                                            [PE_GEN_QWEN2] = "Qwen2ForCausalLM"};
        static const char *const types[] = {[PE_GEN_LLAMA] = "llama",
                                            [PE_GEN_MISTRAL] = "mistral",
                                            [PE_GEN_QWEN2] = "qwen2"};
        const char *a;
        pe_err err = {{0}};
        assert_int_equal(md_hf_architecture(&h, &a, &err), PE_OK);
        assert_string_equal(a, archs[arch]);
        assert_string_equal(cfg_str(&h, "model_type"), types[arch]);
        assert_string_equal(cfg_str(&h, "hidden_act"), "silu");
        assert_int_equal(cfg_int(&h, "hidden_size"), 48);
        assert_int_equal(cfg_int(&h, "intermediate_size"), 70);
        assert_int_equal(cfg_int(&h, "num_hidden_layers"), 2);
        assert_int_equal(cfg_int(&h, "num_attention_heads"), 6);
        assert_int_equal(cfg_int(&h, "num_key_value_heads"), 3);
        assert_int_equal(cfg_int(&h, "head_dim"), 10);
        assert_int_equal(cfg_int(&h, "max_position_embeddings"), 64);
        assert_int_equal(cfg_int(&h, "vocab_size"), 90);
        assert_int_equal(cfg_int(&h, "bos_token_id"), 1);
        assert_int_equal(cfg_int(&h, "eos_token_id"), 2);
        assert_true(cfg_num(&h, "rms_norm_eps") == 1e-5);
        assert_true(cfg_num(&h, "rope_theta") == 10000.0);
        assert_int_equal(cfg_bool(&h, "tie_word_embeddings"), tied);
        const cJSON *rs;
        assert_int_equal(md_hf_object(&h, "rope_scaling", (const void **)&rs, &err), PE_OK);
        if (arch == PE_GEN_LLAMA) {
            assert_int_equal(cfg_bool(&h, "attention_bias"), 0);
            assert_string_equal(cJSON_GetObjectItem(rs, "rope_type")->valuestring, "llama3");
            assert_true(cJSON_GetObjectItem(rs, "factor")->valuedouble == 4.0);
            assert_true(cJSON_GetObjectItem(rs, "low_freq_factor")->valuedouble == 1.5);
            assert_true(cJSON_GetObjectItem(rs, "high_freq_factor")->valuedouble == 3.0);
            assert_true(
                cJSON_GetObjectItem(rs, "original_max_position_embeddings")->valuedouble == 32);
            assert_false(md_hf_has(&h, "sliding_window"));
        } else if (arch == PE_GEN_MISTRAL) {
            assert_string_equal(cJSON_GetObjectItem(rs, "rope_type")->valuestring, "linear");
            assert_true(cJSON_GetObjectItem(rs, "factor")->valuedouble == 2.0);
            assert_int_equal(cJSON_GetArraySize(rs), 2);
            assert_int_equal(cfg_int(&h, "sliding_window"), 24);
        } else {
            assert_null(rs); /* null */
            assert_int_equal(cfg_bool(&h, "use_sliding_window"), 0);
        }
        md_hf_close(&h);
    }

    /* head_dim is written only when given; mistral's window can be null */
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_MISTRAL, "tiny");
    assert_int_equal(sp.sliding_window, 4096); /* MistralConfig's default */
    sp.sliding_window = 0;
    write_ok(&sp, dir);
    md_hf h;
    open_ok(dir, &h);
    assert_false(md_hf_has(&h, "head_dim"));
    assert_false(md_hf_has(&h, "sliding_window"));
    assert_int_equal(cfg_int(&h, "num_key_value_heads"), 2);
    expect_shape(&h, "model.layers.1.self_attn.k_proj.weight", 2, 32, 64); /* 2 x 16 */
    md_hf_close(&h);
    rm_tree(dir);
}

/* The presets have the shapes they promise. */
static void test_presets(void **state)
{
    (void)state;
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "124m");
    assert_int_equal(sp.hidden, 768);
    assert_int_equal(sp.layers, 12);
    assert_int_equal(sp.heads, 12);
    assert_int_equal(sp.vocab, 50257);
    assert_int_equal(sp.context, 1024);
    assert_int_equal(sp.eos_token_id, 50256);
    assert_int_equal(sp.inner, 0);
    assert_int_equal(sp.tie_embeddings, 1);
    init_ok(&sp, PE_GEN_LLAMA, "llama-110m");
    assert_int_equal(sp.hidden, 768);
    assert_int_equal(sp.layers, 12);
    assert_int_equal(sp.heads, 12);
    assert_int_equal(sp.kv_heads, 4);
    assert_int_equal(sp.inner, 2048);
    assert_int_equal(sp.vocab, 32000);
    assert_int_equal(sp.context, 2048);
    assert_int_equal(sp.tie_embeddings, 0);
    init_ok(&sp, PE_GEN_QWEN2, "tiny");
    assert_int_equal(sp.kv_heads, 2);
    assert_int_equal(sp.hidden, 64);
    assert_int_equal(sp.vocab, 256);
    assert_int_equal(pe_gen_init(&sp, PE_GEN_GPT2, "llama-110m"), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "'llama-110m'"));
    assert_non_null(strstr(pe_last_error(), "tiny or 124m"));
    assert_int_equal(pe_gen_init(&sp, PE_GEN_LLAMA, "huge"), PE_EINVAL);
    assert_int_equal(pe_gen_init(&sp, (pe_gen_arch)9, "tiny"), PE_EINVAL);
}

/* GPT-2's variants: names without "transformer.", and the old buffers; every other tensor
 * holds the same bytes as in the plain checkpoint. */
static void test_gpt2_variants(void **state)
{
    (void)state;
    char plain[600], var[600];
    temp_dir(plain, sizeof plain, "gen_plain");
    temp_dir(var, sizeof var, "gen_var");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "tiny");
    sp.context = 24;
    write_ok(&sp, plain);
    sp.gpt2_no_prefix = 1;
    sp.gpt2_old_buffers = 1;
    write_ok(&sp, var);
    md_hf a, b;
    open_ok(plain, &a);
    open_ok(var, &b);
    assert_int_equal(b.ntensors, a.ntensors + 2 * sp.layers);
    for (int i = 0; i < a.files[0].ntensors; i++) {
        const st_tensor *t = &a.files[0].tensors[i];
        assert_int_equal(strncmp(t->name, "transformer.", 12), 0);
        const st_tensor *u = md_hf_find(&b, t->name + 12, NULL);
        assert_non_null(u);
        assert_int_equal(u->end - u->begin, t->end - t->begin);
        assert_memory_equal(u->data, t->data, t->end - t->begin);
    }
    for (int i = 0; i < b.ntensors; i++)
        assert_int_not_equal(strncmp(b.files[0].tensors[i].name, "transformer.", 12), 0);
    for (int l = 0; l < sp.layers; l++) {
        char n[64];
        snprintf(n, sizeof n, "h.%d.attn.bias", l);
        const st_tensor *t = md_hf_find(&b, n, NULL);
        assert_non_null(t);
        assert_int_equal(t->ndim, 4);
        assert_int_equal(t->shape[0], 1);
        assert_int_equal(t->shape[1], 1);
        assert_int_equal(t->shape[2], 24);
        assert_int_equal(t->shape[3], 24);
        const float *m = t->data;
        for (int r = 0; r < 24; r++)
            for (int c = 0; c < 24; c++)
                assert_true(m[r * 24 + c] == (c <= r ? 1.0f : 0.0f));
        snprintf(n, sizeof n, "h.%d.attn.masked_bias", l);
        t = md_hf_find(&b, n, NULL);
        assert_non_null(t);
        assert_int_equal(t->ndim, 0);
        assert_int_equal(t->nelem, 1);
        assert_true(*(const float *)t->data == -1e4f);
    }
    md_hf_close(&a);
    md_hf_close(&b);
    rm_tree(plain);
    rm_tree(var);
}

/* ---- the init ------------------------------------------------------------------------------------ */

static void test_init_follows_spec(void **state)
{
    (void)state;
    char dir[600];
    temp_dir(dir, sizeof dir, "gen_init");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "tiny");
    sp.qk_std = 0.5;
    write_ok(&sp, dir);
    md_hf h;
    open_ok(dir, &h);
    const size_t C = 64;
    double mean, sd;
    float *w = read_tensor(&h, "transformer.wte.weight");
    moments(w, 256 * C, &mean, &sd);
    assert_true(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.001);
    free(w);
    /* c_attn [in, out]: the q and k columns sharp, the v columns not */
    w = read_tensor(&h, "transformer.h.1.attn.c_attn.weight");
    float *qk = malloc(C * 2 * C * sizeof *qk), *v = malloc(C * C * sizeof *v);
    for (size_t r = 0; r < C; r++) {
        memcpy(qk + r * 2 * C, w + r * 3 * C, 2 * C * sizeof *w);
        memcpy(v + r * C, w + r * 3 * C + 2 * C, C * sizeof *w);
    }
    moments(qk, C * 2 * C, &mean, &sd);
    assert_true(fabs(sd - 0.5) < 0.02);
    moments(v, C * C, &mean, &sd);
    assert_true(fabs(sd - 0.02) < 0.001);
    free(qk);
    free(v);
    free(w);
    w = read_tensor(&h, "transformer.h.0.ln_2.weight");
    assert_true(all_equal(w, C, 1.0f));
    free(w);
    w = read_tensor(&h, "transformer.h.0.mlp.c_fc.bias");
    assert_true(all_equal(w, 4 * C, 0.0f)); /* +0, not -0 */
    free(w);
    md_hf_close(&h);

    /* small random norms and biases on request; Llama's q and k sharp, v not */
    init_ok(&sp, PE_GEN_QWEN2, "tiny");
    sp.qk_std = 0.3;
    sp.norm_std = 0.1;
    sp.bias_std = 0.05;
    write_ok(&sp, dir);
    open_ok(dir, &h);
    const char *names[] = {"model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.self_attn.k_proj.weight",
                           "model.layers.0.self_attn.v_proj.weight",
                           "model.layers.1.input_layernorm.weight",
                           "model.layers.1.self_attn.q_proj.bias"};
    const size_t counts[] = {64 * 64, 32 * 64, 32 * 64, 64, 64};
    const double means[] = {0, 0, 0, 1, 0}, sds[] = {0.3, 0.3, 0.02, 0.1, 0.05};
    for (int k = 0; k < 5; k++) {
        w = read_tensor(&h, names[k]);
        moments(w, counts[k], &mean, &sd);
        double tol = counts[k] > 1000 ? 0.06 : 0.3; /* relative, for the sample size */
        if (fabs(mean - means[k]) > 4 * sds[k] / sqrt((double)counts[k]) ||
            fabs(sd - sds[k]) > tol * sds[k])
            print_error("%s: mean %g sd %g, want %g and %g\n", names[k], mean, sd, means[k],
                        sds[k]);
        assert_true(fabs(mean - means[k]) <= 4 * sds[k] / sqrt((double)counts[k]));
        assert_true(fabs(sd - sds[k]) <= tol * sds[k]);
        free(w);
    }
    md_hf_close(&h);
    rm_tree(dir);
}

/* ---- errors ---------------------------------------------------------------------------------------- */

static void expect_refused(const pe_gen_spec *sp, const char *dir, pe_status s, const char *want)
{
    assert_int_equal(pe_gen_write(sp, dir), s);
    if (!strstr(pe_last_error(), want)) {
        print_error("message \"%s\" lacks \"%s\"\n", pe_last_error(), want);
        fail();
    }
}

static void test_bad_specs(void **state)
{
    (void)state;
    char dir[600];
    temp_dir(dir, sizeof dir, "gen_bad");
    pe_gen_spec sp, base;
    init_ok(&base, PE_GEN_LLAMA, "tiny");
    sp = base, sp.kv_heads = 3;
    expect_refused(&sp, dir, PE_EINVAL, "kv heads 3");
    sp = base, sp.heads = 5;
    expect_refused(&sp, dir, PE_EINVAL, "not divisible by heads 5");
    sp = base, sp.head_dim = 7;
    expect_refused(&sp, dir, PE_EINVAL, "odd");
    sp = base, sp.layers = 0;
    expect_refused(&sp, dir, PE_EINVAL, "at least 1");
    sp = base, sp.shards = 1000;
    expect_refused(&sp, dir, PE_EINVAL, "1000 shards");
    sp = base, sp.eos_token_id = 256;
    expect_refused(&sp, dir, PE_EINVAL, "eos 256");
    sp = base, sp.sliding_window = 8;
    expect_refused(&sp, dir, PE_EINVAL, "Mistral");
    sp = base, sp.rope_scaling = PE_GEN_ROPE_LLAMA3, sp.rope_high_freq_factor = 0.5;
    expect_refused(&sp, dir, PE_EINVAL, "llama3");
    sp = base, sp.std = NAN;
    expect_refused(&sp, dir, PE_EINVAL, "std");
    sp = base, sp.gpt2_old_buffers = 1;
    expect_refused(&sp, dir, PE_EINVAL, "GPT-2");
    init_ok(&base, PE_GEN_GPT2, "tiny");
    sp = base, sp.kv_heads = 2;
    expect_refused(&sp, dir, PE_EINVAL, "GPT-2 has no grouped KV heads");
    sp = base, sp.rope_scaling = PE_GEN_ROPE_LINEAR;
    expect_refused(&sp, dir, PE_EINVAL, "learned positions");
    assert_int_equal(access(dir, F_OK), -1); /* nothing was written */

    /* a file where the directory should be; a missing parent */
    FILE *fp = fopen(dir, "w");
    assert_non_null(fp);
    fclose(fp);
    expect_refused(&base, dir, PE_EIO, "not a directory");
    unlink(dir);
    char deep[700];
    snprintf(deep, sizeof deep, "%s/a/b", dir);
    expect_refused(&base, deep, PE_EIO, "parent");
    assert_int_equal(pe_gen_write(NULL, dir), PE_EINVAL);
    assert_int_equal(pe_gen_write(&base, NULL), PE_EINVAL);
}

/* The MLP door writes what md_mlp_load reads. */
static void test_mlp_door(void **state)
{
    (void)state;
    char path[600];
    tu_temp_path(path, sizeof path, "gen_mlp.safetensors");
    pe_gen_mlp_spec sp = {.in = 6, .hidden = 8, .out = 3, .layers = 3,
                          .act = PE_GEN_ACT_GELU, .std = 0.5f, .seed = 3};
    assert_int_equal(pe_gen_mlp_write(&sp, path), PE_OK);
    md_mlp m;
    pe_err err = {{0}};
    assert_int_equal(md_mlp_load(path, &m, &err), PE_OK);
    assert_int_equal(m.nlayers, 3);
    assert_int_equal(m.layers[0].in, 6);
    assert_int_equal(m.layers[0].out, 8);
    assert_int_equal(m.layers[2].out, 3);
    assert_int_equal(m.layers[0].act, MD_ACT_GELU);
    md_mlp_free(&m);
    sp.identity = 1;
    assert_int_equal(pe_gen_mlp_write(&sp, path), PE_EINVAL); /* identity needs square */
    assert_non_null(strstr(pe_last_error(), "square"));
    sp.act = (pe_gen_act)7;
    assert_int_equal(pe_gen_mlp_write(&sp, path), PE_EINVAL);
    unlink(path);
}

/* ---- the command ------------------------------------------------------------------------------ */

static const char *g_bin; /* the pengine binary (argv[1]); NULL: the command tests skip */

/* Runs the command with args (NULL-ended); returns its exit status; its stderr in err. */
static int run_cmd(const char *const *args, char *err, size_t errlen)
{
    tu_cmd c = {.bin = g_bin, .limit_s = 120};
    tu_run r = tu_run_cmd(&c, args);
    snprintf(err, errlen, "%s", r.err);
    int status = r.status;
    tu_run_free(&r);
    return status;
}

static void same_dirs(const char *a, const char *b, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!same_file(a, b, names[i])) {
            print_error("%s differs between %s and %s\n", names[i], a, b);
            fail();
        }
}

/* The flags land in the spec: the command's files equal pe_gen_write's for that spec. */
static void test_command_writes_the_spec(void **state)
{
    (void)state;
    if (!g_bin)
        skip();
    char a[600], b[600], err[1024];
    temp_dir(a, sizeof a, "gen_cmd_a");
    temp_dir(b, sizeof b, "gen_cmd_b");
    const char *g[] = {"gen", "gpt2", "--layers", "3", "--vocab", "100", "--context=40",
                       "--no-prefix", "--old-buffers", "--shards", "2", "--dtype", "bf16",
                       "--seed", "5", "--std", "0.05", "--qk-std", "0.4", "--bias-std", "0.01",
                       "--no-tie", "--out", a, NULL};
    assert_int_equal(run_cmd(g, err, sizeof err), 0);
    assert_string_equal(err, "");
    pe_gen_spec sp;
    init_ok(&sp, PE_GEN_GPT2, "tiny");
    sp.layers = 3, sp.vocab = 100, sp.context = 40;
    sp.bos_token_id = sp.eos_token_id = 99; /* follow the vocabulary */
    sp.gpt2_no_prefix = sp.gpt2_old_buffers = 1;
    sp.shards = 2, sp.dtype = PE_DTYPE_BF16, sp.seed = 5;
    sp.std = 0.05, sp.qk_std = 0.4, sp.bias_std = 0.01, sp.tie_embeddings = 0;
    write_ok(&sp, b);
    same_dirs(a, b, (const char *const[]){"config.json", "model.safetensors.index.json",
                                          "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors", NULL});
    rm_tree(a);
    rm_tree(b);

    const char *l[] = {"gen", "llama", "--preset", "tiny", "--arch", "mistral",
                       "--sliding-window", "8", "--rope-scaling", "llama3", "--rope-factor", "4",
                       "--rope-low-freq-factor", "2", "--rope-high-freq-factor", "8",
                       "--rope-original-context", "64", "--head-dim", "32", "--kv-heads", "1",
                       "--heads", "2", "--inner", "100", "--hidden", "48", "--tie", "--eps",
                       "1e-6", "--rope-theta", "500000", "--bos", "7", "--eos", "9",
                       "--norm-std", "0.1", "--out", a, NULL};
    assert_int_equal(run_cmd(l, err, sizeof err), 0);
    init_ok(&sp, PE_GEN_MISTRAL, "tiny");
    sp.sliding_window = 8, sp.rope_scaling = PE_GEN_ROPE_LLAMA3, sp.rope_factor = 4;
    sp.rope_low_freq_factor = 2, sp.rope_high_freq_factor = 8, sp.rope_original_context = 64;
    sp.head_dim = 32, sp.kv_heads = 1, sp.heads = 2, sp.inner = 100, sp.hidden = 48;
    sp.tie_embeddings = 1, sp.norm_eps = 1e-6, sp.rope_theta = 500000;
    sp.bos_token_id = 7, sp.eos_token_id = 9, sp.norm_std = 0.1;
    write_ok(&sp, b);
    same_dirs(a, b, (const char *const[]){"config.json", "model.safetensors", NULL});
    rm_tree(a);
    rm_tree(b);
}

/* Bad flags are usage errors (exit 2, one line on stderr naming the flag and the fix). */
static void test_command_usage_errors(void **state)
{
    (void)state;
    if (!g_bin)
        skip();
    char a[600], err[1024];
    temp_dir(a, sizeof a, "gen_cmd_bad");
    const struct {
        const char *args[8];
        const char *want;
    } cases[] = {
        {{"gen", "gpt2", "--kv-heads", "2", "--out", a}, "--kv-heads is not a flag of gen gpt2"},
        {{"gen", "llama", "--old-buffers", "--out", a}, "--old-buffers is not a flag of gen llama"},
        {{"gen", "llama", "--arch", "falcon", "--out", a}, "unknown architecture 'falcon'"},
        {{"gen", "gpt2", "--preset", "huge", "--out", a}, "unknown preset 'huge'"},
        {{"gen", "llama", "--heads", "3", "--out", a}, "not divisible by heads 3"},
        {{"gen", "llama", "--dtype", "f16", "--out", a}, "use --dtype f32 or --dtype bf16"},
        {{"gen", "gpt2", "--layers"}, "--layers needs a value"},
        {{"gen", "gpt2", "--width", "3"}, "unknown flag '--width'"},
        {{"gen", "llama"}, "--out is missing"},
        {{"gen", "gpt2", "--tie=1", "--out", a}, "--tie takes no value"},
        {{"gen", "llama", "--shards", "999", "--out", a}, "999 shards"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_cmd(cases[i].args, err, sizeof err);
        if (rc != 2 || !strstr(err, cases[i].want) || strncmp(err, "pengine: error: ", 16) ||
            strchr(err, '\n') != err + strlen(err) - 1) {
            print_error("case %zu: exit %d, stderr \"%s\"; want 2 and \"%s\"\n", i, rc, err,
                        cases[i].want);
            fail();
        }
    }
    assert_int_equal(access(a, F_OK), -1); /* nothing written */
}

int main(int argc, char **argv)
{
    g_bin = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_sharded_equals_single),
        cmocka_unit_test(test_bf16_holds_rounded_f32),
        cmocka_unit_test(test_gpt2_tensors_and_config),
        cmocka_unit_test(test_gpt2_config_text),
        cmocka_unit_test(test_llama_family_tensors_and_config),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_gpt2_variants),
        cmocka_unit_test(test_init_follows_spec),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_mlp_door),
        cmocka_unit_test(test_command_writes_the_spec),
        cmocka_unit_test(test_command_usage_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
