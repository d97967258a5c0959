/* ref_bind.c: finds every tensor the reference needs in the directory and checks its shape
 * and dtype against config.json, before any forward. */
#include <stdio.h>
#include <string.h>

#include "model/reference/ref.h"

/* The tensor name with the shape (d0[, d1]), dims of 1 or 2 entries; optional: may be
 * absent (then w->t is NULL). */
static pe_status md_ref_find(pe_ref_model *m, const char *name, int ndim, size_t d0, size_t d1,
                             int optional, md_ref_w *w, pe_err *err)
{
    w->t = md_hf_find(&m->hf, name, &w->f);
    if (!w->t) {
        if (optional)
            return PE_OK;
        return pe_fail(err, PE_EFORMAT, "%s: no tensor '%s', which %s needs; the checkpoint "
                       "does not match its config.json", m->hf.dir, name, m->c.arch);
    }
    const st_tensor *t = w->t;
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s' has dtype %s; the reference reads F32, "
                       "BF16 and F16", w->f->path, name, st_dtype_name(t->dtype));
    size_t want[2] = {d0, d1};
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = t->shape[d] == want[d];
    if (!ok) {
        char got[96] = "", exp[64];
        for (int d = 0; d < t->ndim && strlen(got) < 64; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%zu", d ? ", " : "",
                     t->shape[d]);
        if (ndim == 1)
            snprintf(exp, sizeof exp, "%zu", d0);
        else
            snprintf(exp, sizeof exp, "%zu, %zu", d0, d1);
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s' has shape [%s] but config.json makes "
                       "it [%s]", w->f->path, name, got, exp);
    }
    return PE_OK;
}

static pe_status md_ref_bind_gpt2(pe_ref_model *m, pe_err *err)
{
    const md_ref_config *c = &m->c;
    size_t C = (size_t)c->C, I = (size_t)c->I;
    /* GPT2LMHeadModel saves "transformer.wte.weight"; the original checkpoints "wte.weight" */
    const char *pre = md_hf_find(&m->hf, "transformer.wte.weight", NULL) ? "transformer." : "";
    char n[160];
    pe_status s = PE_OK;
#define FIND(w, nd, a, b, name_fmt, ...)                                                         \
    do {                                                                                         \
        snprintf(n, sizeof n, name_fmt, __VA_ARGS__);                                            \
        if (s == PE_OK)                                                                          \
            s = md_ref_find(m, n, nd, a, b, 0, w, err);                                          \
    } while (0)
    FIND(&m->wte, 2, (size_t)c->V, C, "%swte.weight", pre);
    FIND(&m->wpe, 2, (size_t)c->P, C, "%swpe.weight", pre);
    for (int l = 0; l < c->L && s == PE_OK; l++) {
        md_ref_layer *y = &m->layers[l];
        FIND(&y->norm1_w, 1, C, 0, "%sh.%d.ln_1.weight", pre, l);
        FIND(&y->norm1_b, 1, C, 0, "%sh.%d.ln_1.bias", pre, l);
        FIND(&y->c_attn_w, 2, C, 3 * C, "%sh.%d.attn.c_attn.weight", pre, l);
        FIND(&y->c_attn_b, 1, 3 * C, 0, "%sh.%d.attn.c_attn.bias", pre, l);
        FIND(&y->attn_proj_w, 2, C, C, "%sh.%d.attn.c_proj.weight", pre, l);
        FIND(&y->attn_proj_b, 1, C, 0, "%sh.%d.attn.c_proj.bias", pre, l);
        FIND(&y->norm2_w, 1, C, 0, "%sh.%d.ln_2.weight", pre, l);
        FIND(&y->norm2_b, 1, C, 0, "%sh.%d.ln_2.bias", pre, l);
        FIND(&y->c_fc_w, 2, C, I, "%sh.%d.mlp.c_fc.weight", pre, l);
        FIND(&y->c_fc_b, 1, I, 0, "%sh.%d.mlp.c_fc.bias", pre, l);
        FIND(&y->mlp_proj_w, 2, I, C, "%sh.%d.mlp.c_proj.weight", pre, l);
        FIND(&y->mlp_proj_b, 1, C, 0, "%sh.%d.mlp.c_proj.bias", pre, l);
    }
    FIND(&m->normf_w, 1, C, 0, "%sln_f.weight", pre);
    FIND(&m->normf_b, 1, C, 0, "%sln_f.bias", pre);
    if (c->tied)
        m->head = m->wte;
    else
        FIND(&m->head, 2, (size_t)c->V, C, "%s", "lm_head.weight");
#undef FIND
    return s;
}

static pe_status md_ref_bind_llama(pe_ref_model *m, pe_err *err)
{
    const md_ref_config *c = &m->c;
    size_t C = (size_t)c->C, I = (size_t)c->I, Q = (size_t)c->H * (size_t)c->hd;
    size_t KV = (size_t)c->KVH * (size_t)c->hd;
    char n[160];
    pe_status s = PE_OK;
#define FIND(w, nd, a, b, opt, name_fmt, ...)                                                    \
    do {                                                                                         \
        snprintf(n, sizeof n, name_fmt, __VA_ARGS__);                                            \
        if (s == PE_OK)                                                                          \
            s = md_ref_find(m, n, nd, a, b, opt, w, err);                                        \
    } while (0)
#define LAYER(w, nd, a, b, opt, suffix) FIND(w, nd, a, b, opt, "model.layers.%d.%s", l, suffix)
    FIND(&m->wte, 2, (size_t)c->V, C, 0, "%s", "model.embed_tokens.weight");
    for (int l = 0; l < c->L && s == PE_OK; l++) {
        md_ref_layer *y = &m->layers[l];
        LAYER(&y->norm1_w, 1, C, 0, 0, "input_layernorm.weight");
        LAYER(&y->q_w, 2, Q, C, 0, "self_attn.q_proj.weight");
        LAYER(&y->k_w, 2, KV, C, 0, "self_attn.k_proj.weight");
        LAYER(&y->v_w, 2, KV, C, 0, "self_attn.v_proj.weight");
        LAYER(&y->o_w, 2, C, Q, 0, "self_attn.o_proj.weight");
        if (c->qkv_bias) {
            LAYER(&y->q_b, 1, Q, 0, 0, "self_attn.q_proj.bias");
            LAYER(&y->k_b, 1, KV, 0, 0, "self_attn.k_proj.bias");
            LAYER(&y->v_b, 1, KV, 0, 0, "self_attn.v_proj.bias");
        }
        if (c->o_bias)
            LAYER(&y->o_b, 1, C, 0, 0, "self_attn.o_proj.bias");
        LAYER(&y->norm2_w, 1, C, 0, 0, "post_attention_layernorm.weight");
        LAYER(&y->gate_w, 2, I, C, 0, "mlp.gate_proj.weight");
        LAYER(&y->up_w, 2, I, C, 0, "mlp.up_proj.weight");
        LAYER(&y->down_w, 2, C, I, 0, "mlp.down_proj.weight");
        if (c->mlp_bias) {
            LAYER(&y->gate_b, 1, I, 0, 0, "mlp.gate_proj.bias");
            LAYER(&y->up_b, 1, I, 0, 0, "mlp.up_proj.bias");
            LAYER(&y->down_b, 1, C, 0, 0, "mlp.down_proj.bias");
        }
    }
    FIND(&m->normf_w, 1, C, 0, 0, "%s", "model.norm.weight");
    if (c->tied)
        m->head = m->wte;
    else
        FIND(&m->head, 2, (size_t)c->V, C, 0, "%s", "lm_head.weight");
#undef LAYER
#undef FIND
    return s;
}

pe_status md_ref_bind(pe_ref_model *m, pe_err *err)
{
    return m->c.family == MD_REF_GPT2 ? md_ref_bind_gpt2(m, err) : md_ref_bind_llama(m, err);
}
