/* gen_gpt2.c: the plan of a GPT2LMHeadModel checkpoint: its tensors, in state_dict order,
 * and its config.json as transformers writes GPT2Config.
 *
 * Shapes (C hidden, I inner, V vocab, P positions). GPT-2's projections are Conv1D layers,
 * stored [in, out]:
 *   transformer.wte.weight (V, C), transformer.wpe.weight (P, C)
 *   transformer.h.{l}.ln_1.{weight,bias} (C)
 *   transformer.h.{l}.attn.c_attn.weight (C, 3C) [in, out], columns q | k | v; .bias (3C)
 *   transformer.h.{l}.attn.c_proj.weight (C, C) [in, out]; .bias (C)
 *   transformer.h.{l}.ln_2.{weight,bias} (C)
 *   transformer.h.{l}.mlp.c_fc.weight (C, I) [in, out]; .bias (I)
 *   transformer.h.{l}.mlp.c_proj.weight (I, C) [in, out]; .bias (C)
 *   transformer.ln_f.{weight,bias} (C)
 *   lm_head.weight (V, C) only when the embeddings are not tied
 * Old checkpoints also hold the buffers transformer.h.{l}.attn.bias (1, 1, P, P) (the causal
 * mask as ones below the diagonal) and attn.masked_bias (a scalar, -1e4).
 */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "model/gen/gen.h"

/* Adds "<prefix><name>", seeded by "transformer.<name>" whatever the prefix. */
static md_gen_tensor *md_gpt2_add(md_gen_plan *p, const pe_gen_spec *sp, const char *name,
                                  md_gen_fill fill, double std, int ndim, const size_t *shape)
{
    char full[MD_GEN_NAME + 16], key[MD_GEN_NAME + 16]; /* names are far shorter */
    snprintf(full, sizeof full, "%s%s", sp->gpt2_no_prefix ? "" : "transformer.", name);
    snprintf(key, sizeof key, "transformer.%s", name);
    return md_gen_add(p, full, key, fill, std, ndim, shape);
}

static pe_status md_gpt2_tensors(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    size_t C = (size_t)sp->hidden, V = (size_t)sp->vocab, P = (size_t)sp->context;
    size_t I = sp->inner ? (size_t)sp->inner : 4 * C;
    double w = sp->std, b = sp->bias_std, g = sp->norm_std;
    double qk = sp->qk_std > 0 ? sp->qk_std : sp->std;
    int ok = md_gpt2_add(p, sp, "wte.weight", MD_FILL_NORMAL, w, 2, (size_t[]){V, C}) &&
             md_gpt2_add(p, sp, "wpe.weight", MD_FILL_NORMAL, w, 2, (size_t[]){P, C});
    char n[MD_GEN_NAME];
#define ADD(fill, std, nd, ...)                                                                  \
    (ok = ok && md_gpt2_add(p, sp, n, fill, std, nd, (size_t[]){__VA_ARGS__}) != NULL)
    for (int l = 0; l < sp->layers && ok; l++) {
        snprintf(n, sizeof n, "h.%d.ln_1.weight", l);
        ADD(MD_FILL_NORM, g, 1, C);
        snprintf(n, sizeof n, "h.%d.ln_1.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, C);
        if (sp->gpt2_old_buffers) {
            snprintf(n, sizeof n, "h.%d.attn.bias", l);
            ADD(MD_FILL_TRIL, 0.0, 4, 1, 1, P, P);
            snprintf(n, sizeof n, "h.%d.attn.masked_bias", l);
            if (ADD(MD_FILL_CONST, 0.0, 0, 0))
                p->t[p->n - 1].value = -1e4;
        }
        snprintf(n, sizeof n, "h.%d.attn.c_attn.weight", l);
        if (ADD(MD_FILL_NORMAL, w, 2, C, 3 * C)) {
            p->t[p->n - 1].qk_std = qk; /* the q and k columns of every row */
            p->t[p->n - 1].qk_cols = 2 * C;
        }
        snprintf(n, sizeof n, "h.%d.attn.c_attn.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, 3 * C);
        snprintf(n, sizeof n, "h.%d.attn.c_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, C, C);
        snprintf(n, sizeof n, "h.%d.attn.c_proj.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, C);
        snprintf(n, sizeof n, "h.%d.ln_2.weight", l);
        ADD(MD_FILL_NORM, g, 1, C);
        snprintf(n, sizeof n, "h.%d.ln_2.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, C);
        snprintf(n, sizeof n, "h.%d.mlp.c_fc.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, C, I);
        snprintf(n, sizeof n, "h.%d.mlp.c_fc.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, I);
        snprintf(n, sizeof n, "h.%d.mlp.c_proj.weight", l);
        ADD(MD_FILL_NORMAL, w, 2, I, C);
        snprintf(n, sizeof n, "h.%d.mlp.c_proj.bias", l);
        ADD(MD_FILL_NORMAL, b, 1, C);
    }
    snprintf(n, sizeof n, "ln_f.weight");
    ADD(MD_FILL_NORM, g, 1, C);
    snprintf(n, sizeof n, "ln_f.bias");
    ADD(MD_FILL_NORMAL, b, 1, C);
#undef ADD
    if (ok && !sp->tie_embeddings) /* GPT2LMHeadModel's head sits outside "transformer." */
        ok = md_gen_add(p, "lm_head.weight", NULL, MD_FILL_NORMAL, w, 2, (size_t[]){V, C}) != NULL;
    return ok ? PE_OK : pe_fail(err, PE_ENOMEM, "out of memory planning the GPT-2 tensors");
}

static pe_status md_gpt2_config(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    cJSON *c = cJSON_CreateObject();
    p->config = c;
    cJSON *arch = cJSON_CreateStringArray((const char *[]){"GPT2LMHeadModel"}, 1);
    int ok = c && arch && cJSON_AddItemToObject(c, "architectures", arch);
    if (!ok)
        cJSON_Delete(arch);
#define NUM(k, v) (ok = ok && cJSON_AddNumberToObject(c, k, (double)(v)) != NULL)
#define FLT(k, v) (ok = ok && cJSON_AddItemToObject(c, k, md_json_float(v)))
#define STR(k, v) (ok = ok && cJSON_AddStringToObject(c, k, v) != NULL)
#define BOOL(k, v) (ok = ok && cJSON_AddBoolToObject(c, k, v) != NULL)
    STR("activation_function", "gelu_new");
    FLT("attn_pdrop", 0.1);
    NUM("bos_token_id", sp->bos_token_id);
    FLT("embd_pdrop", 0.1);
    NUM("eos_token_id", sp->eos_token_id);
    FLT("initializer_range", sp->std);
    FLT("layer_norm_epsilon", sp->norm_eps);
    STR("model_type", "gpt2");
    NUM("n_ctx", sp->context);
    NUM("n_embd", sp->hidden);
    NUM("n_head", sp->heads);
    if (sp->inner)
        NUM("n_inner", sp->inner);
    else
        ok = ok && cJSON_AddNullToObject(c, "n_inner");
    NUM("n_layer", sp->layers);
    NUM("n_positions", sp->context);
    BOOL("reorder_and_upcast_attn", 0);
    FLT("resid_pdrop", 0.1);
    BOOL("scale_attn_by_inverse_layer_idx", 0);
    BOOL("scale_attn_weights", 1);
    BOOL("tie_word_embeddings", sp->tie_embeddings != 0);
    STR("torch_dtype", sp->dtype == PE_DTYPE_BF16 ? "bfloat16" : "float32");
    BOOL("use_cache", 1);
    NUM("vocab_size", sp->vocab);
#undef NUM
#undef FLT
#undef STR
#undef BOOL
    return ok ? PE_OK : pe_fail(err, PE_ENOMEM, "out of memory building config.json");
}

pe_status md_gen_plan_gpt2(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err)
{
    pe_status s = md_gpt2_tensors(sp, p, err);
    return s == PE_OK ? md_gpt2_config(sp, p, err) : s;
}
