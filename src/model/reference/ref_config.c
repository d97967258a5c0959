/* ref_config.c: the reference's own reading of config.json (GPT2Config, LlamaConfig,
 * MistralConfig, Qwen2Config: keys and defaults as transformers defines them) and the RoPE
 * frequencies of modeling_rope_utils.py. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/reference/ref.h"

void md_ref_config_free(md_ref_config *c)
{
    free(c->inv_freq);
    memset(c, 0, sizeof *c);
}

/* An integer key into an int, in [lo, hi]. */
static pe_status md_ref_int(const md_hf *h, const char *key, long dflt, int required, long lo,
                            long hi, int *out, pe_err *err)
{
    long v;
    pe_status s = required ? md_hf_int(h, key, &v, err) : md_hf_int_or(h, key, dflt, &v, err);
    if (s != PE_OK)
        return s;
    if (v < lo || v > hi)
        return pe_fail(err, PE_EFORMAT, "%s: \"%s\" is %ld; the reference reads %ld to %ld",
                       h->config_path, key, v, lo, hi);
    *out = (int)v;
    return PE_OK;
}

/* A numeric field of rope_scaling. */
static pe_status md_ref_rs_num(const md_hf *h, const cJSON *rs, const char *key, double *out,
                               pe_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!cJSON_IsNumber(v))
        return pe_fail(err, PE_EFORMAT, "%s: rope_scaling has no number \"%s\"; the %s scaling "
                       "needs it", h->config_path, key,
                       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "rope_type"))
                           ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "rope_type"))
                           : "given");
    *out = v->valuedouble;
    return PE_OK;
}

pe_status md_ref_inv_freq(const md_hf *h, double theta, int hd, const void *rsv,
                          float *inv_freq, pe_err *err)
{
    const cJSON *rs = rsv;
    int half = hd / 2;
    /* _compute_default_rope_parameters: 1 / base^(arange(0, dim, 2).float() / dim), float32 */
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)hd;
        inv_freq[i] = 1.0f / (float)pow((double)(float)theta, (double)e);
    }
    if (!rs)
        return PE_OK;
    /* "rope_type", or "type" in configs written before transformers 4.42 */
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!ty)
        ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(ty))
        return pe_fail(err, PE_EFORMAT, "%s: rope_scaling has no \"rope_type\" string",
                       h->config_path);
    const char *type = ty->valuestring;
    if (strcmp(type, "default") == 0)
        return PE_OK;
    double factor = 0;
    pe_status s = md_ref_rs_num(h, rs, "factor", &factor, err);
    if (s != PE_OK)
        return s;
    if (!(factor > 0.0))
        return pe_fail(err, PE_EFORMAT, "%s: rope_scaling factor %g must be positive",
                       h->config_path, factor);
    if (strcmp(type, "linear") == 0) { /* _compute_linear_scaling_rope_parameters */
        for (int i = 0; i < half; i++)
            inv_freq[i] = (float)((double)inv_freq[i] / factor);
        return PE_OK;
    }
    if (strcmp(type, "llama3") != 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: rope_scaling type \"%.40s\" is not supported by the reference (it "
                       "reads default, linear and llama3)",
                       h->config_path, type);
    /* _compute_llama3_parameters */
    double low = 0, high = 0, orig = 0;
    if ((s = md_ref_rs_num(h, rs, "low_freq_factor", &low, err)) != PE_OK ||
        (s = md_ref_rs_num(h, rs, "high_freq_factor", &high, err)) != PE_OK ||
        (s = md_ref_rs_num(h, rs, "original_max_position_embeddings", &orig, err)) != PE_OK)
        return s;
    if (!(high > low) || !(orig > 0))
        return pe_fail(err, PE_EFORMAT, "%s: llama3 rope_scaling needs high_freq_factor (%g) > "
                       "low_freq_factor (%g) and original_max_position_embeddings (%g) > 0",
                       h->config_path, high, low, orig);
    double low_wavelen = orig / low, high_wavelen = orig / high;
    for (int i = 0; i < half; i++) {
        double f = inv_freq[i], wavelen = 2.0 * M_PI / f, r;
        if (wavelen < high_wavelen) /* high frequencies: kept */
            r = f;
        else if (wavelen > low_wavelen) /* low frequencies: scaled by the factor */
            r = f / factor;
        else { /* in between: smoothed */
            double smooth = (orig / wavelen - low) / (high - low);
            r = (1.0 - smooth) * f / factor + smooth * f;
        }
        inv_freq[i] = (float)r;
    }
    return PE_OK;
}

static pe_status md_ref_read_gpt2(const md_hf *h, md_ref_config *c, pe_err *err)
{
    pe_status s;
    const long big = 1L << 24;
    if ((s = md_ref_int(h, "n_embd", 0, 1, 1, big, &c->C, err)) != PE_OK ||
        (s = md_ref_int(h, "n_layer", 0, 1, 1, big, &c->L, err)) != PE_OK ||
        (s = md_ref_int(h, "n_head", 0, 1, 1, big, &c->H, err)) != PE_OK ||
        (s = md_ref_int(h, "n_positions", 0, 1, 1, big, &c->P, err)) != PE_OK ||
        (s = md_ref_int(h, "vocab_size", 0, 1, 1, big, &c->V, err)) != PE_OK ||
        (s = md_ref_int(h, "n_inner", 4L * c->C, 0, 1, big, &c->I, err)) != PE_OK ||
        (s = md_hf_num_or(h, "layer_norm_epsilon", 1e-5, &c->eps, err)) != PE_OK ||
        (s = md_hf_bool_or(h, "scale_attn_weights", 1, &c->scale_attn, err)) != PE_OK ||
        (s = md_hf_bool_or(h, "scale_attn_by_inverse_layer_idx", 0, &c->scale_by_layer, err)) !=
            PE_OK ||
        (s = md_hf_bool_or(h, "tie_word_embeddings", 1, &c->tied, err)) != PE_OK)
        return s;
    if (c->C % c->H)
        return pe_fail(err, PE_EFORMAT, "%s: n_embd %d is not divisible by n_head %d",
                       h->config_path, c->C, c->H);
    c->KVH = c->H;
    c->hd = c->C / c->H;
    const char *act;
    if ((s = md_hf_str_or(h, "activation_function", "gelu_new", &act, err)) != PE_OK)
        return s;
    if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_fast"))
        c->act = MD_REF_GELU_TANH;
    else if (!strcmp(act, "gelu"))
        c->act = MD_REF_GELU_ERF;
    else
        return pe_fail(err, PE_EFORMAT, "%s: activation_function \"%.40s\" is not supported by "
                       "the reference (it reads gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)",
                       h->config_path, act);
    return PE_OK;
}

static pe_status md_ref_read_llama(const md_hf *h, md_ref_config *c, pe_err *err)
{
    pe_status s;
    const long big = 1L << 24;
    int mistral = !strcmp(c->arch, "MistralForCausalLM"), qwen2 = !strcmp(c->arch,
                                                                          "Qwen2ForCausalLM");
    if ((s = md_ref_int(h, "hidden_size", 0, 1, 1, big, &c->C, err)) != PE_OK ||
        (s = md_ref_int(h, "num_hidden_layers", 0, 1, 1, big, &c->L, err)) != PE_OK ||
        (s = md_ref_int(h, "num_attention_heads", 0, 1, 1, big, &c->H, err)) != PE_OK ||
        (s = md_ref_int(h, "intermediate_size", 0, 1, 1, big, &c->I, err)) != PE_OK ||
        (s = md_ref_int(h, "vocab_size", 0, 1, 1, big, &c->V, err)) != PE_OK ||
        (s = md_ref_int(h, "max_position_embeddings", 2048, 0, 1, big, &c->P, err)) != PE_OK ||
        (s = md_ref_int(h, "num_key_value_heads", c->H, 0, 1, big, &c->KVH, err)) != PE_OK ||
        (s = md_hf_num_or(h, "rms_norm_eps", 1e-6, &c->eps, err)) != PE_OK ||
        (s = md_hf_bool_or(h, "tie_word_embeddings", 0, &c->tied, err)) != PE_OK)
        return s;
    if (c->C % c->H && !md_hf_has(h, "head_dim"))
        return pe_fail(err, PE_EFORMAT, "%s: hidden_size %d is not divisible by "
                       "num_attention_heads %d and there is no head_dim", h->config_path, c->C,
                       c->H);
    if ((s = md_ref_int(h, "head_dim", c->C / c->H, 0, 2, big, &c->hd, err)) != PE_OK)
        return s;
    if (c->hd % 2)
        return pe_fail(err, PE_EFORMAT, "%s: head_dim %d is odd; RoPE turns pairs",
                       h->config_path, c->hd);
    if (c->H % c->KVH)
        return pe_fail(err, PE_EFORMAT, "%s: num_key_value_heads %d does not divide "
                       "num_attention_heads %d", h->config_path, c->KVH, c->H);
    const char *act;
    if ((s = md_hf_str_or(h, "hidden_act", "silu", &act, err)) != PE_OK)
        return s;
    if (strcmp(act, "silu") != 0)
        return pe_fail(err, PE_EFORMAT, "%s: hidden_act \"%.40s\" is not supported by the "
                       "reference (it reads silu)", h->config_path, act);
    if (qwen2) { /* Qwen2Attention: q/k/v always with bias, o without */
        c->qkv_bias = 1;
        int sw;
        if ((s = md_hf_bool_or(h, "use_sliding_window", 0, &sw, err)) != PE_OK)
            return s;
        if (sw)
            return pe_fail(err, PE_EFORMAT, "%s: use_sliding_window true is not supported by "
                           "the reference", h->config_path);
    } else if (!mistral) { /* LlamaAttention / LlamaMLP */
        int ab;
        if ((s = md_hf_bool_or(h, "attention_bias", 0, &ab, err)) != PE_OK ||
            (s = md_hf_bool_or(h, "mlp_bias", 0, &c->mlp_bias, err)) != PE_OK)
            return s;
        c->qkv_bias = c->o_bias = ab;
    } else if ((s = md_ref_int(h, "sliding_window", 0, 0, 0, 1L << 30, &c->window, err)) !=
               PE_OK)
        return s;
    double theta;
    const void *rs;
    if ((s = md_hf_num_or(h, "rope_theta", 10000.0, &theta, err)) != PE_OK ||
        (s = md_hf_object(h, "rope_scaling", &rs, err)) != PE_OK)
        return s;
    if (!(theta > 1.0) || !isfinite(theta))
        return pe_fail(err, PE_EFORMAT, "%s: rope_theta %g must be a finite number above 1",
                       h->config_path, theta);
    c->inv_freq = malloc((size_t)(c->hd / 2) * sizeof *c->inv_freq);
    if (!c->inv_freq)
        return pe_fail(err, PE_ENOMEM, "out of memory");
    return md_ref_inv_freq(h, theta, c->hd, rs, c->inv_freq, err);
}

pe_status md_ref_config_read(const md_hf *h, md_ref_config *c, pe_err *err)
{
    memset(c, 0, sizeof *c);
    const char *arch;
    pe_status s = md_hf_architecture(h, &arch, err);
    if (s != PE_OK)
        return s;
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    if (!strcmp(arch, "GPT2LMHeadModel")) {
        c->family = MD_REF_GPT2;
        s = md_ref_read_gpt2(h, c, err);
    } else if (!strcmp(arch, "LlamaForCausalLM") || !strcmp(arch, "MistralForCausalLM") ||
               !strcmp(arch, "Qwen2ForCausalLM")) {
        c->family = MD_REF_LLAMA;
        s = md_ref_read_llama(h, c, err);
    } else
        s = pe_fail(err, PE_EFORMAT,
                    "%s: architecture \"%.60s\" is not supported by the reference (it reads "
                    "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)",
                    h->config_path, arch);
    if (s == PE_OK && !(c->eps >= 0.0 && c->eps < 1.0))
        s = pe_fail(err, PE_EFORMAT, "%s: the norm epsilon %g is not in [0, 1)", h->config_path,
                    c->eps);
    if (s != PE_OK)
        md_ref_config_free(c);
    return s;
}
