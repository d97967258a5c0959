/* ref_gpt2.c: the reference forward of GPT2LMHeadModel (modeling_gpt2.py), plain loops in
 * double:
 *   x = wte[token] + wpe[pos]
 *   per layer:  x += c_proj(attn(c_attn(ln_1(x))));  x += mlp.c_proj(act(c_fc(ln_2(x))))
 *   logits = ln_f(x) wte^T  (or lm_head when untied)
 * c_attn's output columns are q | k | v; attention scores are q.k / sqrt(hd) (when
 * scale_attn_weights) / (layer + 1) (when scale_attn_by_inverse_layer_idx), causal.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/reference/ref.h"

/* The activations of one forward (n tokens). */
typedef struct md_ref_gpt2_acts {
    double *x;   /* (n, C) the residual stream */
    double *h;   /* (n, C) a norm's output */
    double *qkv; /* (n, 3C) */
    double *q, *k, *v; /* (n, C) each */
    double *att; /* (n, C) attention output */
    double *y;   /* (n, C) a projection's output */
    double *ff;  /* (n, I) */
    double *row; /* (C) */
} md_ref_gpt2_acts;

static void md_ref_gpt2_acts_free(md_ref_gpt2_acts *a)
{
    free(a->x);
    free(a->h);
    free(a->qkv);
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->att);
    free(a->y);
    free(a->ff);
    free(a->row);
}

static pe_status md_ref_gpt2_acts_alloc(md_ref_gpt2_acts *a, size_t n, size_t C, size_t I,
                                        pe_err *err)
{
    memset(a, 0, sizeof *a);
    a->x = malloc(n * C * sizeof(double));
    a->h = malloc(n * C * sizeof(double));
    a->qkv = malloc(n * 3 * C * sizeof(double));
    a->q = malloc(n * C * sizeof(double));
    a->k = malloc(n * C * sizeof(double));
    a->v = malloc(n * C * sizeof(double));
    a->att = malloc(n * C * sizeof(double));
    a->y = malloc(n * C * sizeof(double));
    a->ff = malloc(n * I * sizeof(double));
    a->row = malloc(C * sizeof(double));
    if (!a->x || !a->h || !a->qkv || !a->q || !a->k || !a->v || !a->att || !a->y || !a->ff ||
        !a->row) {
        md_ref_gpt2_acts_free(a);
        return pe_fail(err, PE_ENOMEM, "the reference: out of memory for %zu tokens", n);
    }
    return PE_OK;
}

static void md_ref_add(double *x, const double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

static pe_status md_ref_gpt2_layer(const pe_ref_model *m, int l, md_ref_gpt2_acts *a, size_t n,
                                   pe_err *err)
{
    const md_ref_config *c = &m->c;
    const md_ref_layer *y = &m->layers[l];
    size_t C = (size_t)c->C, I = (size_t)c->I;
    int bf16 = m->bf16;
    /* attention */
    md_ref_layernorm(a->h, a->x, n, C, &y->norm1_w, &y->norm1_b, c->eps);
    pe_status s = md_ref_linear(a->qkv, a->h, n, C, 3 * C, &y->c_attn_w, MD_REF_IN_OUT,
                                &y->c_attn_b, bf16, err);
    if (s != PE_OK)
        return s;
    for (size_t t = 0; t < n; t++)
        for (size_t i = 0; i < C; i++) {
            a->q[t * C + i] = a->qkv[t * 3 * C + i];
            a->k[t * C + i] = a->qkv[t * 3 * C + C + i];
            a->v[t * C + i] = a->qkv[t * 3 * C + 2 * C + i];
            if (bf16) { /* the KV cache holds bf16 */
                a->k[t * C + i] = md_ref_bf16(a->k[t * C + i]);
                a->v[t * C + i] = md_ref_bf16(a->v[t * C + i]);
            }
        }
    double scale = c->scale_attn ? 1.0 / sqrt((double)c->hd) : 1.0;
    if (c->scale_by_layer)
        scale /= (double)(l + 1);
    if ((s = md_ref_attention(a->att, a->q, a->k, a->v, n, c->H, c->H, c->hd, scale, 0, err)) !=
            PE_OK ||
        (s = md_ref_linear(a->y, a->att, n, C, C, &y->attn_proj_w, MD_REF_IN_OUT, &y->attn_proj_b,
                           bf16, err)) != PE_OK)
        return s;
    md_ref_add(a->x, a->y, n * C);
    /* MLP */
    md_ref_layernorm(a->h, a->x, n, C, &y->norm2_w, &y->norm2_b, c->eps);
    if ((s = md_ref_linear(a->ff, a->h, n, C, I, &y->c_fc_w, MD_REF_IN_OUT, &y->c_fc_b, bf16,
                           err)) != PE_OK)
        return s;
    for (size_t i = 0; i < n * I; i++)
        a->ff[i] = c->act == MD_REF_GELU_TANH ? md_ref_gelu_tanh(a->ff[i])
                                              : md_ref_gelu_erf(a->ff[i]);
    if ((s = md_ref_linear(a->y, a->ff, n, I, C, &y->mlp_proj_w, MD_REF_IN_OUT, &y->mlp_proj_b,
                           bf16, err)) != PE_OK)
        return s;
    md_ref_add(a->x, a->y, n * C);
    return PE_OK;
}

pe_status md_ref_gpt2_forward(const pe_ref_model *m, const int32_t *tokens, size_t n,
                              double *logits, pe_err *err)
{
    const md_ref_config *c = &m->c;
    size_t C = (size_t)c->C;
    md_ref_gpt2_acts a;
    pe_status s = md_ref_gpt2_acts_alloc(&a, n, C, (size_t)c->I, err);
    if (s != PE_OK)
        return s;
    for (size_t t = 0; t < n; t++) { /* token and position embeddings */
        md_ref_row(&m->wte, (size_t)tokens[t], C, a.x + t * C, m->bf16);
        md_ref_row(&m->wpe, t, C, a.row, m->bf16);
        md_ref_add(a.x + t * C, a.row, C);
    }
    for (int l = 0; l < c->L && s == PE_OK; l++)
        s = md_ref_gpt2_layer(m, l, &a, n, err);
    if (s == PE_OK) {
        md_ref_layernorm(a.h, a.x, n, C, &m->normf_w, &m->normf_b, c->eps);
        s = md_ref_linear(logits, a.h, n, C, (size_t)c->V, &m->head, MD_REF_OUT_IN, NULL,
                          m->bf16, err);
    }
    md_ref_gpt2_acts_free(&a);
    return s;
}
