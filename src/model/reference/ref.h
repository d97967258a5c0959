/* ref.h: inside the naive reference (pe_ref_*): the model as the reference reads it from a
 * Hugging Face directory, and its plain-loop math in double precision.
 *
 * Independent of the engine on purpose: nothing here comes from src/model/gpt2,
 * src/model/llama or src/kernels; the files are read through md_hf, and config.json is
 * parsed here again, from Hugging Face's definitions (modeling_gpt2.py, modeling_llama.py,
 * modeling_mistral.py, modeling_qwen2.py, modeling_rope_utils.py).
 *
 * Dimension names: n tokens, C hidden, H query heads, KVH key/value heads, hd head dim,
 * I MLP width, V vocab, P positions.
 */
#ifndef PE_MODEL_REFERENCE_REF_H
#define PE_MODEL_REFERENCE_REF_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/format/hf.h"
#include "pengine/pengine_tools.h"

typedef enum md_ref_family { MD_REF_GPT2 = 0, MD_REF_LLAMA } md_ref_family;
typedef enum md_ref_act { MD_REF_GELU_TANH = 0, MD_REF_GELU_ERF } md_ref_act;

typedef struct md_ref_config {
    md_ref_family family;
    char arch[64];
    int L, C, H, KVH, hd, I, V, P;
    double eps;
    int tied;             /* the LM head is the token embedding */
    /* GPT-2 */
    md_ref_act act;       /* activation_function */
    int scale_attn;       /* scale_attn_weights: scores / sqrt(hd) */
    int scale_by_layer;   /* scale_attn_by_inverse_layer_idx: scores / (layer + 1) */
    /* Llama family */
    int qkv_bias;         /* q/k/v projections have biases (Qwen2; Llama's attention_bias) */
    int o_bias;           /* o_proj has a bias (Llama's attention_bias) */
    int mlp_bias;         /* gate/up/down have biases (Llama's mlp_bias) */
    int window;           /* Mistral's sliding_window; 0 = none */
    float *inv_freq;      /* (hd / 2) RoPE frequencies after rope_scaling, float32 as HF */
} md_ref_config;

/* Reads config.json into c (inv_freq allocated; md_ref_config_free frees it). Unknown
 * architectures and rope_scaling types are PE_EFORMAT, naming the value and what is read. */
pe_status md_ref_config_read(const md_hf *h, md_ref_config *c, pe_err *err);
void md_ref_config_free(md_ref_config *c);

/* RoPE frequencies (hd / 2) as modeling_rope_utils.py computes them for rope_scaling rs (a
 * cJSON object, NULL for none): inv_freq[i] = 1 / theta^(2i / hd) in float32, then the
 * scaling's rule. PE_EFORMAT for a type other than default, linear or llama3. */
pe_status md_ref_inv_freq(const md_hf *h, double theta, int hd, const void *rs,
                          float *inv_freq, pe_err *err);

/* A tensor in the mapped files. */
typedef struct md_ref_w {
    const st_file *f;
    const st_tensor *t; /* NULL: absent (an optional bias) */
} md_ref_w;

/* One layer's tensors; each family uses its own. GPT-2's Conv1D weights are [in, out]. */
typedef struct md_ref_layer {
    md_ref_w norm1_w, norm1_b, norm2_w, norm2_b; /* ln_1, ln_2 / input_, post_attention_ */
    md_ref_w c_attn_w, c_attn_b;                 /* GPT-2: (C, 3C), (3C) */
    md_ref_w attn_proj_w, attn_proj_b;           /* GPT-2: (C, C), (C) */
    md_ref_w c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b; /* GPT-2: (C, I), (I), (I, C), (C) */
    md_ref_w q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b; /* Llama: (H hd, C), (KVH hd, C), ... */
    md_ref_w gate_w, gate_b, up_w, up_b, down_w, down_b; /* Llama: (I, C), (I, C), (C, I) */
} md_ref_layer;

struct pe_ref_model {
    md_hf hf;
    md_ref_config c;
    int bf16;              /* emulate the engine under --dtype bf16 (pengine_tools.h) */
    md_ref_w wte, wpe;     /* token (V, C) and GPT-2's position (P, C) embeddings */
    md_ref_w normf_w, normf_b;
    md_ref_w head;         /* (V, C): lm_head.weight, or wte when tied */
    md_ref_layer *layers;  /* (L) */
};

/* Finds every tensor the config needs and checks its shape and dtype. */
pe_status md_ref_bind(pe_ref_model *m, pe_err *err);

/* The forwards: logits (n, V) of tokens (n), checked by the caller. */
pe_status md_ref_gpt2_forward(const pe_ref_model *m, const int32_t *tokens, size_t n,
                              double *logits, pe_err *err);
pe_status md_ref_llama_forward(const pe_ref_model *m, const int32_t *tokens, size_t n,
                               double *logits, pe_err *err);

/* ---- the math (ref_math.c) --------------------------------------------------------------- */

/* x rounded to the nearest bfloat16 (8 significant bits), ties to even, in double. */
double md_ref_bf16(double x);

/* Row r (len elements) of the tensor w as doubles; bf16: each rounded to bf16 (md_ref_bf16). */
void md_ref_row(const md_ref_w *w, size_t r, size_t len, double *out, int bf16);

typedef enum md_ref_layout {
    MD_REF_OUT_IN = 0, /* nn.Linear: W (out, in), y = x W^T */
    MD_REF_IN_OUT      /* GPT-2's Conv1D: W (in, out), y = x W */
} md_ref_layout;

/* y (n, out) = x (n, in) W + b, every sum in double. b may be absent. bf16: the weights and
 * the input x rounded to bf16 first (x is not changed). PE_ENOMEM only. */
pe_status md_ref_linear(double *y, const double *x, size_t n, size_t in, size_t out,
                        const md_ref_w *w, md_ref_layout layout, const md_ref_w *b, int bf16,
                        pe_err *err);

/* y (n, C) = LayerNorm(x): (x - mean) / sqrt(var + eps) * w + b, var the biased variance. */
void md_ref_layernorm(double *y, const double *x, size_t n, size_t C, const md_ref_w *w,
                      const md_ref_w *b, double eps);
/* y (n, C) = w * x / sqrt(mean(x^2) + eps). */
void md_ref_rmsnorm(double *y, const double *x, size_t n, size_t C, const md_ref_w *w,
                    double eps);

double md_ref_gelu_tanh(double x); /* gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
double md_ref_gelu_erf(double x);  /* gelu: 0.5 x (1 + erf(x / sqrt(2))) */
double md_ref_silu(double x);      /* x / (1 + exp(-x)) */

/* Rotates each head of x (n, nheads * hd) in place, rotate-half layout: dimension i pairs
 * with i + hd/2 and turns by the angle pos * inv_freq[i] (pos = the row), the angle in
 * float32 as HF computes it, cos and sin in double. */
void md_ref_rope(double *x, size_t n, int nheads, int hd, const float *inv_freq);

/* Causal attention: out (n, H hd) from q (n, H hd), k and v (n, KVH hd); query head h reads
 * KV head h / (H / KVH); the query at t sees keys j <= t (and t - j < window when window >
 * 0); softmax(q.k * scale) over them, in double. PE_ENOMEM only. */
pe_status md_ref_attention(double *out, const double *q, const double *k, const double *v,
                           size_t n, int H, int KVH, int hd, double scale, int window,
                           pe_err *err);

#endif
