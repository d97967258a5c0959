/* gen_llama.c: the plan of a Llama-family checkpoint (LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM): its tensors, in state_dict order, and its config.json as transformers
 * writes LlamaConfig, MistralConfig and Qwen2Config.
 *
 * Shapes (C hidden, H heads, KVH kv heads, hd head dim, I intermediate, V vocab), nn.Linear
 * weights stored (out, in):
 *   model.embed_tokens.weight (V, C)
 *   model.layers.{l}.self_attn.q_proj.weight (H hd, C)   [.bias (H hd): Qwen2]
 *   model.layers.{l}.self_attn.k_proj.weight (KVH hd, C) [.bias (KVH hd): Qwen2]
 *   model.layers.{l}.self_attn.v_proj.weight (KVH hd, C) [.bias (KVH hd): Qwen2]
 *   model.layers.{l}.self_attn.o_proj.weight (C, H hd)
 *   model.layers.{l}.mlp.{gate,up}_proj.weight (I, C), mlp.down_proj.weight (C, I)
 *   model.layers.{l}.input_layernorm.weight (C), .post_attention_layernorm.weight (C)
 *   model.norm.weight (C)
 *   lm_head.weight (V, C) unless tie_word_embeddings
 */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "model/gen/gen.h"

static pe_status md_llama_tensors(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    size_t C = (size_t)sp->hidden, V = (size_t)sp->vocab, I = (size_t)sp->inner;
    size_t hd = sp->head_dim ? (size_t)sp->head_dim : C / (size_t)sp->heads;
    size_t Q = (size_t)sp->heads * hd, KV = (size_t)sp->kv_heads * hd;
    double w = sp->std, b = sp->bias_std, g = sp->norm_std;
    double qk = sp->qk_std > 0 ? sp->qk_std : sp->std;
    int bias = sp->arch == PE_GEN_QWEN2;
    char n[MD_GEN_NAME];
    int ok = 1;
#define ADD(fill, std, nd, ...)                                                                  \
    (ok = ok && md_gen_add(p, n, NULL, fill, std, nd, (size_t[]){__VA_ARGS__}) != NULL)
    snprintf(n, sizeof n, "model.embed_tokens.weight");
    ADD(MD_FILL_NORMAL, w, 2, V, C);
    for (int l = 0; l < sp->layers && ok; l++) {
        const char *proj[3] = {"q", "k", "v"};
        const size_t out[3] = {Q, KV, KV};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.weight", l, proj[k]);
            ADD(MD_FILL_NORMAL, k < 2 ? qk : w, 2, out[k], C);
            if (bias) {
                snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.bias", l, proj[k]);
                ADD(MD_FILL_NORMAL, b, 1, out[k]);
            }
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, C, Q);
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, I, C);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, I, C);
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, C, I);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        ADD(MD_FILL_NORM, g, 1, C);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(MD_FILL_NORM, g, 1, C);
    }
    snprintf(n, sizeof n, "model.norm.weight");
    ADD(MD_FILL_NORM, g, 1, C);
    if (!sp->tie_embeddings) {
        snprintf(n, sizeof n, "lm_head.weight");
        ADD(MD_FILL_NORMAL, w, 2, V, C);
    }
#undef ADD
    return ok ? PE_OK : pe_fail(err, PE_ENOMEM, "out of memory planning the tensors");
}

/* rope_scaling: null, or the object modeling_rope_utils.py reads. */
static cJSON *md_llama_rope_scaling(const pe_gen_spec *sp)
{
    if (sp->rope_scaling == PE_GEN_ROPE_NONE)
        return cJSON_CreateNull();
    cJSON *r = cJSON_CreateObject();
    int ok = r && cJSON_AddItemToObject(r, "factor", md_json_float(sp->rope_factor));
    if (sp->rope_scaling == PE_GEN_ROPE_LLAMA3) {
        int orig = sp->rope_original_context ? sp->rope_original_context : sp->context;
        ok = ok &&
             cJSON_AddItemToObject(r, "low_freq_factor", md_json_float(sp->rope_low_freq_factor)) &&
             cJSON_AddItemToObject(r, "high_freq_factor",
                                   md_json_float(sp->rope_high_freq_factor)) &&
             cJSON_AddNumberToObject(r, "original_max_position_embeddings", orig) &&
             cJSON_AddStringToObject(r, "rope_type", "llama3");
    } else
        ok = ok && cJSON_AddStringToObject(r, "rope_type", "linear");
    if (!ok) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static pe_status md_llama_config(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    static const char *const arch[] = {[PE_GEN_LLAMA] = "LlamaForCausalLM",
                                       [PE_GEN_MISTRAL] = "MistralForCausalLM",
                                       [PE_GEN_QWEN2] = "Qwen2ForCausalLM"};
    static const char *const type[] = {[PE_GEN_LLAMA] = "llama", [PE_GEN_MISTRAL] = "mistral",
                                       [PE_GEN_QWEN2] = "qwen2"};
    cJSON *c = cJSON_CreateObject();
    p->config = c;
    cJSON *a = cJSON_CreateStringArray(&arch[sp->arch], 1);
    int ok = c && a && cJSON_AddItemToObject(c, "architectures", a);
    if (!ok)
        cJSON_Delete(a);
    cJSON *rs = md_llama_rope_scaling(sp);
    if (!(ok = ok && rs && cJSON_AddItemToObject(c, "rope_scaling", rs)))
        cJSON_Delete(rs);
#define NUM(k, v) (ok = ok && cJSON_AddNumberToObject(c, k, (double)(v)) != NULL)
#define FLT(k, v) (ok = ok && cJSON_AddItemToObject(c, k, md_json_float(v)))
#define STR(k, v) (ok = ok && cJSON_AddStringToObject(c, k, v) != NULL)
#define BOOL(k, v) (ok = ok && cJSON_AddBoolToObject(c, k, v) != NULL)
    FLT("attention_dropout", 0.0);
    NUM("bos_token_id", sp->bos_token_id);
    NUM("eos_token_id", sp->eos_token_id);
    if (sp->head_dim)
        NUM("head_dim", sp->head_dim);
    STR("hidden_act", "silu");
    NUM("hidden_size", sp->hidden);
    FLT("initializer_range", sp->std);
    NUM("intermediate_size", sp->inner);
    NUM("max_position_embeddings", sp->context);
    STR("model_type", type[sp->arch]);
    NUM("num_attention_heads", sp->heads);
    NUM("num_hidden_layers", sp->layers);
    NUM("num_key_value_heads", sp->kv_heads);
    FLT("rms_norm_eps", sp->norm_eps);
    FLT("rope_theta", sp->rope_theta);
    BOOL("tie_word_embeddings", sp->tie_embeddings != 0);
    STR("torch_dtype", sp->dtype == PE_DTYPE_BF16 ? "bfloat16" : "float32");
    BOOL("use_cache", 1);
    NUM("vocab_size", sp->vocab);
    if (sp->arch == PE_GEN_LLAMA) {
        BOOL("attention_bias", 0);
        BOOL("mlp_bias", 0);
        NUM("pretraining_tp", 1);
    } else if (sp->arch == PE_GEN_MISTRAL) {
        if (sp->sliding_window)
            NUM("sliding_window", sp->sliding_window);
        else
            ok = ok && cJSON_AddNullToObject(c, "sliding_window");
    } else { /* Qwen2: the window is off, as in Qwen2's released configs */
        BOOL("use_sliding_window", 0);
        NUM("sliding_window", sp->context);
        NUM("max_window_layers", sp->layers);
    }
#undef NUM
#undef FLT
#undef STR
#undef BOOL
    return ok ? PE_OK : pe_fail(err, PE_ENOMEM, "out of memory building config.json");
}

pe_status md_gen_plan_llama(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    pe_status s = md_llama_tensors(sp, p, err);
    return s == PE_OK ? md_llama_config(sp, p, err) : s;
}
