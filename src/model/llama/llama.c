/* llama.c: the Llama family (LlamaForCausalLM, and with the same code MistralForCausalLM
 * and Qwen2ForCausalLM): config, weights, and the forward.
 *
 * Hugging Face layout: model.embed_tokens (V, C); per layer model.layers.{l}.
 * input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}
 * _proj; model.norm; lm_head (V, C) unless tie_word_embeddings. RMSNorm, RoPE in the
 * rotate-half layout (rope_theta, rope_scaling llama3 or linear), SwiGLU, GQA. Qwen2 adds
 * q/k/v biases; Llama's attention_bias adds q/k/v/o biases and mlp_bias the MLP's; Mistral
 * has a sliding window. q|k|v and gate|up are fused into one matrix each at load.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/blocks.h"
#include "model/decoder.h"
#include "model/shard_table.h"

typedef struct llama_layer {
    md_norm input_norm;  /* (C) */
    md_linear qkv;       /* ((NH_t + 2 KVH_t) hd, C): q | k | v of this rank's heads */
    md_linear o;         /* (C, NH_t hd): row-parallel */
    md_norm post_norm;   /* (C) */
    md_linear gate_up;   /* (2 I_t, C): gate | up */
    md_linear down;      /* (C, I_t): row-parallel */
} llama_layer;

typedef struct llama_weights {
    md_table embed;      /* (V_t, C) this rank's vocabulary rows, or (V, C) on every rank
                          * (pe_tp_embedding) (first stage) */
    float *inv_freq;     /* (hd / 2) RoPE frequencies */
    int nlayers;
    llama_layer *layers; /* (nlayers) this stage's layers */
    md_norm norm;        /* (C) (last stage) */
    md_linear head;      /* (V_t, C): lm_head, or embed_tokens when tied (last stage) */
} llama_weights;

/* Which optional biases the checkpoint has (from the config and the architecture). */
typedef struct llama_biases {
    int qkv, o, mlp;
} llama_biases;

static llama_biases biases_of(const md_hf *hf, const char *arch, pe_err *err, pe_status *s)
{
    llama_biases b = {0, 0, 0};
    int attention_bias = 0, mlp_bias = 0;
    *s = md_hf_bool_or(hf, "attention_bias", 0, &attention_bias, err);
    if (*s == PE_OK)
        *s = md_hf_bool_or(hf, "mlp_bias", 0, &mlp_bias, err);
    b.qkv = attention_bias || strcmp(arch, "Qwen2ForCausalLM") == 0;
    b.o = attention_bias;
    b.mlp = mlp_bias;
    return b;
}

/* ---- RoPE frequencies (transformers' modeling_rope_utils.py) ------------------------------ */

static pe_status rope_frequencies(const md_hf *hf, md_config *c, pe_err *err)
{
    double theta = 10000.0;
    pe_status s = md_hf_num_or(hf, "rope_theta", 10000.0, &theta, err);
    if (s != PE_OK)
        return s;
    const int half = c->hd / 2;
    c->inv_freq = malloc((size_t)half * sizeof *c->inv_freq);
    if (!c->inv_freq)
        return pe_fail(err, PE_ENOMEM, "out of host memory for the RoPE table");
    double *f = malloc((size_t)half * sizeof *f);
    if (!f)
        return pe_fail(err, PE_ENOMEM, "out of host memory for the RoPE table");
    for (int i = 0; i < half; i++) /* 1 / theta^(2i / hd) */
        f[i] = 1.0 / pow(theta, (double)(2 * i) / (double)c->hd);

    const void *obj = NULL;
    s = md_hf_object(hf, "rope_scaling", &obj, err);
    const cJSON *rs = obj;
    const cJSON *type = rs ? cJSON_GetObjectItemCaseSensitive(rs, "rope_type") : NULL;
    if (rs && !cJSON_IsString(type))
        type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *kind = rs && cJSON_IsString(type) ? type->valuestring : "default";
    const cJSON *jf = rs ? cJSON_GetObjectItemCaseSensitive(rs, "factor") : NULL;
    double factor = cJSON_IsNumber(jf) ? jf->valuedouble : 1.0;
    if (s == PE_OK && rs && (!cJSON_IsNumber(jf) || factor <= 0.0) &&
        strcmp(kind, "default") != 0)
        s = pe_fail(err, PE_EFORMAT, "%s: rope_scaling of type \"%s\" needs a positive "
                    "\"factor\"", hf->config_path, kind);
    if (s == PE_OK && strcmp(kind, "linear") == 0) {
        for (int i = 0; i < half; i++)
            f[i] /= factor;
    } else if (s == PE_OK && strcmp(kind, "llama3") == 0) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(rs, "low_freq_factor");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(rs, "high_freq_factor");
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
        if (!cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) || !cJSON_IsNumber(old) ||
            hi->valuedouble <= lo->valuedouble) {
            s = pe_fail(err, PE_EFORMAT, "%s: rope_scaling llama3 needs numbers "
                        "low_freq_factor < high_freq_factor and "
                        "original_max_position_embeddings", hf->config_path);
        } else {
            const double lf = lo->valuedouble, hf_ = hi->valuedouble, ctx = old->valuedouble;
            const double low_wavelen = ctx / lf, high_wavelen = ctx / hf_;
            for (int i = 0; i < half; i++) {
                double wavelen = 2.0 * M_PI / f[i];
                if (wavelen > low_wavelen) {
                    f[i] /= factor; /* low frequencies: scaled */
                } else if (wavelen >= high_wavelen) { /* medium: interpolated */
                    double smooth = (ctx / wavelen - lf) / (hf_ - lf);
                    f[i] = (1.0 - smooth) * f[i] / factor + smooth * f[i];
                }
            }
        }
    } else if (s == PE_OK && strcmp(kind, "default") != 0) {
        s = pe_fail(err, PE_EFORMAT, "%s: rope_scaling type \"%s\" is not supported; pengine "
                    "reads rope_scaling of type llama3 or linear (or none)", hf->config_path,
                    kind);
    }
    for (int i = 0; s == PE_OK && i < half; i++)
        c->inv_freq[i] = (float)f[i];
    free(f);
    return s;
}

/* ---- config ----------------------------------------------------------------------------- */

static pe_status expect(const md_hf *hf, const char *name, size_t d0, size_t d1, size_t *np,
                        pe_err *err)
{
    const st_tensor *t = NULL;
    pe_status s = md_expect(hf, name, d0, d1, &t, NULL, err);
    if (s == PE_OK && np)
        *np += t->nelem;
    return s;
}

static pe_status check_tensors(const md_hf *hf, const md_config *c, llama_biases b,
                               size_t *np, pe_err *err)
{
    const size_t C = (size_t)c->C, I = (size_t)c->I, V = (size_t)c->V;
    const size_t q = (size_t)c->NH * (size_t)c->hd, kv = (size_t)c->KVH * (size_t)c->hd;
    pe_status s = expect(hf, "model.embed_tokens.weight", V, C, np, err);
    for (int l = 0; s == PE_OK && l < c->L; l++) {
        const struct {
            const char *name;
            size_t d0, d1;
            int present;
        } t[] = {
            {"input_layernorm.weight", C, 0, 1},
            {"self_attn.q_proj.weight", q, C, 1},
            {"self_attn.k_proj.weight", kv, C, 1},
            {"self_attn.v_proj.weight", kv, C, 1},
            {"self_attn.q_proj.bias", q, 0, b.qkv},
            {"self_attn.k_proj.bias", kv, 0, b.qkv},
            {"self_attn.v_proj.bias", kv, 0, b.qkv},
            {"self_attn.o_proj.weight", C, q, 1},
            {"self_attn.o_proj.bias", C, 0, b.o},
            {"post_attention_layernorm.weight", C, 0, 1},
            {"mlp.gate_proj.weight", I, C, 1},
            {"mlp.up_proj.weight", I, C, 1},
            {"mlp.down_proj.weight", C, I, 1},
            {"mlp.gate_proj.bias", I, 0, b.mlp},
            {"mlp.up_proj.bias", I, 0, b.mlp},
            {"mlp.down_proj.bias", C, 0, b.mlp},
        };
        for (size_t k = 0; s == PE_OK && k < sizeof t / sizeof t[0]; k++) {
            if (!t[k].present)
                continue;
            char n[128];
            snprintf(n, sizeof n, "model.layers.%d.%s", l, t[k].name);
            s = expect(hf, n, t[k].d0, t[k].d1, np, err);
        }
    }
    if (s == PE_OK)
        s = expect(hf, "model.norm.weight", C, 0, np, err);
    if (s == PE_OK && !c->tied)
        s = expect(hf, "lm_head.weight", V, C, np, err);
    return s;
}

static pe_status llama_configure(const md_hf *hf, const char *arch, md_config *c, pe_err *err)
{
    long C = 0, I = 0, L = 0, NH = 0, KVH = 0, hd = 0, P = 0, V = 0, window = 0;
    double eps = 1e-6;
    const char *act = NULL;
    int tied = 0, use_window = 0;
    pe_status s = md_hf_int(hf, "hidden_size", &C, err);
    if (s == PE_OK) s = md_hf_int(hf, "intermediate_size", &I, err);
    if (s == PE_OK) s = md_hf_int(hf, "num_hidden_layers", &L, err);
    if (s == PE_OK) s = md_hf_int(hf, "num_attention_heads", &NH, err);
    if (s == PE_OK) s = md_hf_int_or(hf, "num_key_value_heads", NH, &KVH, err);
    if (s == PE_OK) s = md_hf_int_or(hf, "head_dim", NH > 0 ? C / NH : 0, &hd, err);
    if (s == PE_OK) s = md_hf_int(hf, "max_position_embeddings", &P, err);
    if (s == PE_OK) s = md_hf_int(hf, "vocab_size", &V, err);
    if (s == PE_OK) s = md_hf_num_or(hf, "rms_norm_eps", 1e-6, &eps, err);
    if (s == PE_OK) s = md_hf_str_or(hf, "hidden_act", "silu", &act, err);
    if (s == PE_OK) s = md_hf_bool_or(hf, "tie_word_embeddings", 0, &tied, err);
    if (s == PE_OK) s = md_hf_int_or(hf, "sliding_window", 0, &window, err);
    if (s == PE_OK) s = md_hf_bool_or(hf, "use_sliding_window", 0, &use_window, err);
    if (s != PE_OK)
        return s;
    const long dims[] = {C, I, L, NH, KVH, hd, P, V, window};
    int in_range = 1;
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        in_range &= dims[i] <= MD_MAX_DIM;
    if (C <= 0 || I <= 0 || L <= 0 || NH <= 0 || KVH <= 0 || hd <= 0 || P <= 0 || V <= 0 ||
        !in_range || NH % KVH != 0 || hd % 2 != 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: hidden_size %ld, intermediate_size %ld, num_hidden_layers %ld, "
                       "num_attention_heads %ld, num_key_value_heads %ld, head_dim %ld, "
                       "max_position_embeddings %ld, vocab_size %ld, sliding_window %ld: each "
                       "must be > 0 (the window may be 0) and at most %ld, the heads a multiple "
                       "of the KV heads and head_dim even",
                       hf->config_path, C, I, L, NH, KVH, hd, P, V, window, MD_MAX_DIM);
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return pe_fail(err, PE_EFORMAT, "%s: hidden_act \"%s\" is not supported; Llama-family "
                       "models use silu", hf->config_path, act);
    int qwen2 = strcmp(arch, "Qwen2ForCausalLM") == 0;
    if (qwen2 && use_window)
        return pe_fail(err, PE_EFORMAT, "%s: use_sliding_window is true; pengine does not "
                       "implement Qwen2's per-layer sliding window (max_window_layers)",
                       hf->config_path);
    c->family = PE_FAMILY_LLAMA;
    c->L = (int)L;
    c->C = (int)C;
    c->NH = (int)NH;
    c->KVH = (int)KVH;
    c->hd = (int)hd;
    c->I = (int)I;
    c->V = (int)V;
    c->maxT = (int)P;
    c->eps = (float)eps;
    c->tied = tied;
    c->window = qwen2 ? 0 : (int)(window > 0 ? window : 0);
    llama_biases b = biases_of(hf, arch, err, &s);
    c->qkv_bias = b.qkv;
    long bos = -1;
    if (s == PE_OK) s = md_hf_int_or(hf, "bos_token_id", -1, &bos, err);
    c->bos = (int32_t)bos;
    if (s == PE_OK) s = md_hf_int_list(hf, "eos_token_id", c->eos, MD_MAX_EOS, &c->neos, err);
    if (s == PE_OK) s = rope_frequencies(hf, c, err);
    size_t np = 0;
    if (s == PE_OK) s = check_tensors(hf, c, b, &np, err);
    c->nparams = np;
    return s;
}

/* ---- the part of a worker: the sharding table --------------------------------------------- */

static void llama_free(void *family)
{
    llama_weights *w = family;
    if (w)
        free(w->layers);
    free(w);
}

#define L_(f) offsetof(llama_layer, f)
#define W_(f) offsetof(llama_weights, f)
enum { QKV_BIAS = 1u, O_BIAS = 2u, MLP_BIAS = 4u }; /* the optional tensors */
#define P_(name, split) {"model.layers.%d." name, MD_SPLIT_##split, 0, 0}

/* q|k|v and gate|up are fused: each rank's rows of each, stacked */
static const md_tensor_rule llama_layer_rules[] = {
    {L_(input_norm.w), MD_SLOT_NORM, 0, 0, {P_("input_layernorm.weight", REPLICATED)}},
    {L_(qkv), MD_SLOT_LINEAR, 0, 0,
     {P_("self_attn.q_proj.weight", Q_HEADS), P_("self_attn.k_proj.weight", KV_HEADS),
      P_("self_attn.v_proj.weight", KV_HEADS)}},
    {L_(qkv.b), MD_SLOT_BIAS, 0, QKV_BIAS,
     {P_("self_attn.q_proj.bias", Q_HEADS), P_("self_attn.k_proj.bias", KV_HEADS),
      P_("self_attn.v_proj.bias", KV_HEADS)}},
    {L_(o), MD_SLOT_LINEAR, 0, 0, {P_("self_attn.o_proj.weight", ROW_HEADS)}},
    {L_(o.b), MD_SLOT_BIAS, 0, O_BIAS, {P_("self_attn.o_proj.bias", REPLICATED)}},
    {L_(post_norm.w), MD_SLOT_NORM, 0, 0, {P_("post_attention_layernorm.weight", REPLICATED)}},
    {L_(gate_up), MD_SLOT_LINEAR, 0, 0,
     {P_("mlp.gate_proj.weight", COLUMN), P_("mlp.up_proj.weight", COLUMN)}},
    {L_(gate_up.b), MD_SLOT_BIAS, 0, MLP_BIAS,
     {P_("mlp.gate_proj.bias", COLUMN), P_("mlp.up_proj.bias", COLUMN)}},
    {L_(down), MD_SLOT_LINEAR, 0, 0, {P_("mlp.down_proj.weight", ROW)}},
    {L_(down.b), MD_SLOT_BIAS, 0, MLP_BIAS, {P_("mlp.down_proj.bias", REPLICATED)}},
};
static const md_tensor_rule llama_embed_rules[] = {
    {W_(embed), MD_SLOT_TABLE, 0, 0,
     {{"model.embed_tokens.weight", MD_SPLIT_EMBEDDING, 0, 0}}}, /* vocab-parallel or whole */
};
static const md_tensor_rule llama_final_rules[] = {
    {W_(norm.w), MD_SLOT_NORM, 0, 0, {{"model.norm.weight", MD_SPLIT_REPLICATED, 0, 0}}},
};
static const md_tensor_rule llama_head_rules[] = {
    {W_(head), MD_SLOT_LINEAR, 0, 0, {{"lm_head.weight", MD_SPLIT_VOCAB, 0, 0}}},
};
static const md_tensor_rule llama_tied_head_rules[] = {
    {W_(head), MD_SLOT_LINEAR, 0, 0, {{"model.embed_tokens.weight", MD_SPLIT_VOCAB, 0, 0}}},
};
#define NRULES(r) (sizeof(r) / sizeof((r)[0]))

static pe_status llama_plan(const md_hf *hf, const md_config *c, const md_part *part,
                            void **family, md_tensor_list *l, pe_err *err)
{
    llama_weights *w = calloc(1, sizeof *w);
    if (w)
        w->layers = calloc((size_t)(part->last - part->first), sizeof *w->layers);
    if (!w || !w->layers) {
        llama_free(w);
        return pe_fail(err, PE_ENOMEM, "out of host memory for the Llama weight table");
    }
    *family = w;
    w->nlayers = part->last - part->first;
    pe_status s = PE_OK;
    llama_biases b = biases_of(hf, c->arch, err, &s);
    const unsigned have = (b.qkv ? QKV_BIAS : 0u) | (b.o ? O_BIAS : 0u) | (b.mlp ? MLP_BIAS : 0u);
    const int first = md_part_first_stage(part), last = md_part_last_stage(part, c);
    if (s == PE_OK && first) {
        s = md_plan_table(l, hf, c, part, llama_embed_rules, NRULES(llama_embed_rules), "", -1,
                          w, have, err);
        if (s == PE_OK && last && c->tied) { /* the head is the token table itself */
            l->v[l->n - 1].slot2 = &w->head.w;
            w->head.out = w->embed.rows;
            w->head.in = w->embed.cols;
        }
    }
    if (s == PE_OK) { /* RoPE's frequencies: computed from the config, not in the checkpoint */
        md_tensor *x = md_tensor_add(l);
        if (!x)
            return pe_fail(err, PE_ENOMEM, "out of host memory planning the weights");
        snprintf(x->name, sizeof x->name, "RoPE inv_freq");
        x->slot = (void **)&w->inv_freq;
        x->rows = (size_t)c->hd / 2;
        x->cols = 1;
        x->host = c->inv_freq;
    }
    for (int k = 0; s == PE_OK && k < w->nlayers; k++)
        s = md_plan_table(l, hf, c, part, llama_layer_rules, NRULES(llama_layer_rules), "",
                          part->first + k, &w->layers[k], have, err);
    if (s == PE_OK && last)
        s = md_plan_table(l, hf, c, part, llama_final_rules, NRULES(llama_final_rules), "", -1, w,
                          have, err);
    if (s == PE_OK && last && !(first && c->tied))
        s = md_plan_table(l, hf, c, part, c->tied ? llama_tied_head_rules : llama_head_rules, 1,
                          "", -1, w, have, err);
    return s;
}

/* ---- the forward ----------------------------------------------------------------------- */

static void llama_forward(md_ctx *c, const md_config *cfg, const void *family)
{
    const llama_weights *w = family;
    md_acts *a = c->a;
    if (md_part_first_stage(&c->part))
        blk_embed(c, a->x, &w->embed, c->step->tokens);      /* x (T, C) = embed[tokens] */
    for (int l = 0; l < w->nlayers; l++) {
        const llama_layer *L = &w->layers[l];
        c->layer = c->part.first + l;
        blk_rmsnorm(c, a->h, a->x, &L->input_norm);           /* h (T, C) */
        blk_linear(c, a->qkv, a->h, &L->qkv, BE_ACT_NONE);    /* qkv (T, (NH+2KVH)_t hd) */
        blk_rope(c, a->qkv, w->inv_freq);                     /* q, k rotated in place */
        blk_attention(c, a->att, a->qkv, l);                  /* att (T, NH_t hd) */
        blk_linear_residual(c, a->x, a->att, &L->o);          /* x += att Wo^T */
        blk_rmsnorm(c, a->h, a->x, &L->post_norm);            /* h (T, C) */
        blk_linear(c, a->ff, a->h, &L->gate_up, BE_ACT_NONE); /* ff (T, 2 I_t) = gate | up */
        blk_silu_mul(c, a->ffa, a->ff);                       /* ffa (T, I_t) */
        blk_linear_residual(c, a->x, a->ffa, &L->down);       /* x += ffa Wd^T */
    }
    if (md_part_last_stage(&c->part, cfg)) {
        c->layer = cfg->L;
        blk_rmsnorm(c, a->h, a->x, &w->norm);                 /* h (T, C) */
        blk_logits(c, a->h, &w->head);                        /* logits (R, V_t) */
    }
}

const md_family md_family_llama = {
    .name = "llama",
    .configure = llama_configure,
    .plan = llama_plan,
    .free_family = llama_free,
    .forward = llama_forward,
};
