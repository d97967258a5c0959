/* ref_llama.c: the reference forward of LlamaForCausalLM, MistralForCausalLM and
 * Qwen2ForCausalLM (modeling_llama.py and its copies), plain loops in double:
 *   x = embed_tokens[token]
 *   per layer:  h = rmsnorm(x);  q, k, v = h Wq^T (+ bq), h Wk^T (+ bk), h Wv^T (+ bv)
 *               q, k = rope(q), rope(k);  x += attn(q, k, v) Wo^T (+ bo)
 *               h = rmsnorm(x);  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 *   logits = rmsnorm(x) lm_head^T  (or embed_tokens when tied)
 * Attention: GQA (query head h reads KV head h / (H / KVH)), scores scaled by hd^-0.5,
 * causal, within Mistral's sliding window.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/reference/ref.h"

typedef struct md_ref_llama_acts {
    double *x;        /* (n, C) the residual stream */
    double *h;        /* (n, C) a norm's output */
    double *q;        /* (n, H hd) */
    double *k, *v;    /* (n, KVH hd) */
    double *att;      /* (n, H hd) */
    double *y;        /* (n, C) */
    double *g, *u;    /* (n, I) gate and up */
} md_ref_llama_acts;

static void md_ref_llama_acts_free(md_ref_llama_acts *a)
{
    free(a->x);
    free(a->h);
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->att);
    free(a->y);
    free(a->g);
    free(a->u);
}

static pe_status md_ref_llama_acts_alloc(md_ref_llama_acts *a, size_t n, const md_ref_config *c,
                                         pe_err *err)
{
    size_t C = (size_t)c->C, Q = (size_t)c->H * (size_t)c->hd;
    size_t KV = (size_t)c->KVH * (size_t)c->hd, I = (size_t)c->I;
    memset(a, 0, sizeof *a);
    a->x = malloc(n * C * sizeof(double));
    a->h = malloc(n * C * sizeof(double));
    a->q = malloc(n * Q * sizeof(double));
    a->k = malloc(n * KV * sizeof(double));
    a->v = malloc(n * KV * sizeof(double));
    a->att = malloc(n * Q * sizeof(double));
    a->y = malloc(n * C * sizeof(double));
    a->g = malloc(n * I * sizeof(double));
    a->u = malloc(n * I * sizeof(double));
    if (!a->x || !a->h || !a->q || !a->k || !a->v || !a->att || !a->y || !a->g || !a->u) {
        md_ref_llama_acts_free(a);
        return pe_fail(err, PE_ENOMEM, "the reference: out of memory for %zu tokens", n);
    }
    return PE_OK;
}

static pe_status md_ref_llama_layer(const pe_ref_model *m, int l, md_ref_llama_acts *a,
                                    size_t n, pe_err *err)
{
    const md_ref_config *c = &m->c;
    const md_ref_layer *y = &m->layers[l];
    size_t C = (size_t)c->C, Q = (size_t)c->H * (size_t)c->hd;
    size_t KV = (size_t)c->KVH * (size_t)c->hd, I = (size_t)c->I;
    int bf16 = m->bf16;
    pe_status s;
    /* attention */
    md_ref_rmsnorm(a->h, a->x, n, C, &y->norm1_w, c->eps);
    if ((s = md_ref_linear(a->q, a->h, n, C, Q, &y->q_w, MD_REF_OUT_IN, &y->q_b, bf16, err)) !=
            PE_OK ||
        (s = md_ref_linear(a->k, a->h, n, C, KV, &y->k_w, MD_REF_OUT_IN, &y->k_b, bf16, err)) !=
            PE_OK ||
        (s = md_ref_linear(a->v, a->h, n, C, KV, &y->v_w, MD_REF_OUT_IN, &y->v_b, bf16, err)) !=
            PE_OK)
        return s;
    md_ref_rope(a->q, n, c->H, c->hd, c->inv_freq);
    md_ref_rope(a->k, n, c->KVH, c->hd, c->inv_freq);
    if (bf16) /* the KV cache holds bf16: keys after RoPE, values */
        for (size_t i = 0; i < n * KV; i++) {
            a->k[i] = md_ref_bf16(a->k[i]);
            a->v[i] = md_ref_bf16(a->v[i]);
        }
    if ((s = md_ref_attention(a->att, a->q, a->k, a->v, n, c->H, c->KVH, c->hd,
                              1.0 / sqrt((double)c->hd), c->window, err)) != PE_OK ||
        (s = md_ref_linear(a->y, a->att, n, Q, C, &y->o_w, MD_REF_OUT_IN, &y->o_b, bf16, err)) !=
            PE_OK)
        return s;
    for (size_t i = 0; i < n * C; i++)
        a->x[i] += a->y[i];
    /* MLP: down(silu(gate(h)) * up(h)) */
    md_ref_rmsnorm(a->h, a->x, n, C, &y->norm2_w, c->eps);
    if ((s = md_ref_linear(a->g, a->h, n, C, I, &y->gate_w, MD_REF_OUT_IN, &y->gate_b, bf16,
                           err)) != PE_OK ||
        (s = md_ref_linear(a->u, a->h, n, C, I, &y->up_w, MD_REF_OUT_IN, &y->up_b, bf16, err)) !=
            PE_OK)
        return s;
    for (size_t i = 0; i < n * I; i++)
        a->g[i] = md_ref_silu(a->g[i]) * a->u[i];
    if ((s = md_ref_linear(a->y, a->g, n, I, C, &y->down_w, MD_REF_OUT_IN, &y->down_b, bf16,
                           err)) != PE_OK)
        return s;
    for (size_t i = 0; i < n * C; i++)
        a->x[i] += a->y[i];
    return PE_OK;
}

pe_status md_ref_llama_forward(const pe_ref_model *m, const int32_t *tokens, size_t n,
                               double *logits, pe_err *err)
{
    const md_ref_config *c = &m->c;
    size_t C = (size_t)c->C;
    md_ref_llama_acts a;
    pe_status s = md_ref_llama_acts_alloc(&a, n, c, err);
    if (s != PE_OK)
        return s;
    for (size_t t = 0; t < n; t++)
        md_ref_row(&m->wte, (size_t)tokens[t], C, a.x + t * C, m->bf16);
    for (int l = 0; l < c->L && s == PE_OK; l++)
        s = md_ref_llama_layer(m, l, &a, n, err);
    if (s == PE_OK) {
        md_ref_rmsnorm(a.h, a.x, n, C, &m->normf_w, c->eps);
        s = md_ref_linear(logits, a.h, n, C, (size_t)c->V, &m->head, MD_REF_OUT_IN, NULL,
                          m->bf16, err);
    }
    md_ref_llama_acts_free(&a);
    return s;
}
