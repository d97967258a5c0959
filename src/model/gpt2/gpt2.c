/* gpt2.c: the GPT-2 family (GPT2LMHeadModel): config, weights, and the forward.
 *
 * Hugging Face layout: transformer.wte (V, C), transformer.wpe (maxT, C), and per layer
 * h.{l}.ln_1, attn.c_attn (C, 3C), attn.c_proj (C, C), ln_2, mlp.c_fc (C, I), mlp.c_proj
 * (I, C), then ln_f; the "transformer." prefix is optional. The projections are Conv1D:
 * stored [in, out], so the loader reads them transposed into our (out, in). The LM head is
 * wte (tied). The attn.bias / attn.masked_bias buffers of old checkpoints are ignored.
 * LayerNorm, gelu_new (the tanh form), learned positions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/blocks.h"
#include "model/decoder.h"

typedef struct gpt2_layer {
    md_norm ln_1, ln_2;  /* (C) */
    md_linear c_attn;    /* (3 C_t, C): q | k | v of this rank's heads */
    md_linear c_proj;    /* (C, C_t): row-parallel */
    md_linear c_fc;      /* (I_t, C) */
    md_linear mlp_proj;  /* (C, I_t): row-parallel */
} gpt2_layer;

typedef struct gpt2_weights {
    md_table wte;        /* (V_t, C) token embedding (first stage) */
    md_table wpe;        /* (maxT, C) position embedding (first stage) */
    int nlayers;
    gpt2_layer *h;       /* (nlayers) this stage's layers */
    md_norm ln_f;        /* (C) (last stage) */
    md_linear head;      /* (V_t, C): wte, tied (last stage) */
} gpt2_weights;

/* ---- config --------------------------------------------------------------------------- */

/* The checkpoint's name for `name` (e.g. "h.0.ln_1.weight"): with the "transformer."
 * prefix when the checkpoint uses it. */
static void tname(char *buf, size_t len, const md_hf *hf, const char *name)
{
    int prefixed = md_hf_find(hf, "transformer.wte.weight", NULL) != NULL;
    snprintf(buf, len, "%s%s", prefixed ? "transformer." : "", name);
}

static pe_status expect(const md_hf *hf, const char *name, size_t d0, size_t d1, size_t *np,
                        pe_err *err)
{
    char n[128];
    tname(n, sizeof n, hf, name);
    const st_tensor *t = NULL;
    pe_status s = md_expect(hf, n, d0, d1, &t, NULL, err);
    if (s == PE_OK && np)
        *np += t->nelem;
    return s;
}

static pe_status gpt2_configure(const md_hf *hf, const char *arch, md_config *c, pe_err *err)
{
    (void)arch;
    long C = 0, L = 0, NH = 0, P = 0, V = 0, I = 0;
    double eps = 1e-5;
    const char *act = NULL;
    int tied = 1;
    pe_status s = md_hf_int(hf, "n_embd", &C, err);
    if (s == PE_OK) s = md_hf_int(hf, "n_layer", &L, err);
    if (s == PE_OK) s = md_hf_int(hf, "n_head", &NH, err);
    if (s == PE_OK) s = md_hf_int(hf, "n_positions", &P, err);
    if (s == PE_OK) s = md_hf_int(hf, "vocab_size", &V, err);
    if (s == PE_OK) s = md_hf_int_or(hf, "n_inner", 4 * C, &I, err);
    if (s == PE_OK) s = md_hf_num_or(hf, "layer_norm_epsilon", 1e-5, &eps, err);
    if (s == PE_OK) s = md_hf_str_or(hf, "activation_function", "gelu_new", &act, err);
    if (s == PE_OK) s = md_hf_bool_or(hf, "tie_word_embeddings", 1, &tied, err);
    if (s != PE_OK)
        return s;
    if (C <= 0 || L <= 0 || NH <= 0 || P <= 0 || V <= 0 || I <= 0 || C % NH != 0 ||
        (C / NH) % 2 != 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: n_embd %ld, n_layer %ld, n_head %ld, n_positions %ld, vocab_size %ld, "
                       "n_inner %ld: each must be > 0 and n_embd a multiple of n_head with an "
                       "even head size", hf->config_path, C, L, NH, P, V, I);
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return pe_fail(err, PE_EFORMAT, "%s: activation_function \"%s\" is not supported; "
                       "GPT-2 models use gelu_new (the tanh form)", hf->config_path, act);
    c->family = PE_FAMILY_GPT2;
    c->L = (int)L;
    c->C = (int)C;
    c->NH = c->KVH = (int)NH;
    c->hd = (int)(C / NH);
    c->I = (int)I;
    c->V = (int)V;
    c->maxT = (int)P;
    c->eps = (float)eps;
    c->qkv_bias = 1;
    c->tied = 1;
    long bos = -1;
    s = md_hf_int_or(hf, "bos_token_id", -1, &bos, err);
    c->bos = (int32_t)bos;
    if (s == PE_OK)
        s = md_hf_int_list(hf, "eos_token_id", c->eos, MD_MAX_EOS, &c->neos, err);
    if (s != PE_OK)
        return s;
    if (!tied)
        return pe_fail(err, PE_EFORMAT, "%s: tie_word_embeddings is false, but GPT-2's LM head "
                       "is its token embedding; pengine reads only tied GPT-2 checkpoints",
                       hf->config_path);

    size_t np = 0, uC = (size_t)C, uI = (size_t)I;
    s = expect(hf, "wte.weight", (size_t)V, uC, &np, err);
    if (s == PE_OK) s = expect(hf, "wpe.weight", (size_t)P, uC, &np, err);
    for (int l = 0; s == PE_OK && l < L; l++) {
        static const struct {
            const char *name;
            int d0, d1; /* in units: 1 = C, 3 = 3C, -1 = I, 0 = none */
        } t[] = {
            {"ln_1.weight", 1, 0},      {"ln_1.bias", 1, 0},       {"attn.c_attn.weight", 1, 3},
            {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
            {"ln_2.weight", 1, 0},      {"ln_2.bias", 1, 0},       {"mlp.c_fc.weight", 1, -1},
            {"mlp.c_fc.bias", -1, 0},   {"mlp.c_proj.weight", -1, 1}, {"mlp.c_proj.bias", 1, 0},
        };
        for (size_t k = 0; s == PE_OK && k < sizeof t / sizeof t[0]; k++) {
            char n[96];
            snprintf(n, sizeof n, "h.%d.%s", l, t[k].name);
            size_t d0 = t[k].d0 < 0 ? uI : (size_t)t[k].d0 * uC;
            size_t d1 = t[k].d1 < 0 ? uI : (size_t)t[k].d1 * uC;
            s = expect(hf, n, d0, d1, &np, err);
        }
    }
    if (s == PE_OK) s = expect(hf, "ln_f.weight", uC, 0, &np, err);
    if (s == PE_OK) s = expect(hf, "ln_f.bias", uC, 0, &np, err);
    c->nparams = np;
    return s;
}

/* ---- the part of a worker -------------------------------------------------------------- */

static void gpt2_free(void *family)
{
    gpt2_weights *w = family;
    if (w)
        free(w->h);
    free(w);
}

/* Adds tensor `what` made of pieces of the checkpoint's `name` (its logical (out, in)
 * rows [r0, r0 + nr) x columns [c0, c0 + nc) for each of the nseg row segments starting at
 * seg[i]). */
static pe_status plan_rows(md_tensor_list *l, const md_hf *hf, const char *name, int matrix,
                           int transposed, const size_t *seg, int nseg, size_t nr, size_t c0,
                           size_t nc, void **slot, pe_err *err)
{
    char n[128];
    tname(n, sizeof n, hf, name);
    md_tensor *t = md_tensor_add(l);
    if (!t)
        return pe_fail(err, PE_ENOMEM, "out of host memory planning the weights");
    snprintf(t->name, sizeof t->name, "%s", n);
    t->slot = slot;
    t->matrix = matrix;
    pe_status s = PE_OK;
    for (int i = 0; s == PE_OK && i < nseg; i++)
        s = md_plan_piece(t, hf, n, transposed, seg[i], nr, c0, nc, err);
    return s;
}

static pe_status gpt2_plan(const md_hf *hf, const md_config *c, const md_part *part,
                           void **family, md_tensor_list *l, pe_err *err)
{
    const md_shard sh = md_shard_of(c, part);
    gpt2_weights *w = calloc(1, sizeof *w);
    if (w)
        w->h = calloc((size_t)(part->last - part->first), sizeof *w->h);
    if (!w || !w->h) {
        gpt2_free(w);
        return pe_fail(err, PE_ENOMEM, "out of host memory for the GPT-2 weight table");
    }
    *family = w;
    w->nlayers = part->last - part->first;
    const size_t C = (size_t)c->C, hd = (size_t)c->hd;
    const size_t q0 = (size_t)part->t * (size_t)sh.NH * hd, qn = (size_t)sh.NH * hd;
    const size_t f0 = (size_t)part->t * (size_t)sh.I, fn = (size_t)sh.I;
    const size_t vn = (size_t)sh.V0 + (size_t)sh.V <= (size_t)c->V ? (size_t)sh.V
                      : (size_t)c->V > (size_t)sh.V0 ? (size_t)c->V - (size_t)sh.V0 : 0;
    pe_status s = PE_OK;
    md_tensor *wte = NULL;
    if (md_part_first_stage(part) || md_part_last_stage(part, c)) {
        size_t v0 = (size_t)sh.V0;
        s = plan_rows(l, hf, "wte.weight", 1, 0, &v0, 1, vn, 0, C, &w->wte.w, err);
        if (s == PE_OK) {
            wte = &l->v[l->n - 1];
            wte->pad_rows = (size_t)sh.V - vn;
            w->wte.rows = (size_t)sh.V;
            w->wte.cols = C;
            if (md_part_last_stage(part, c))
                wte->slot2 = &w->head.w;
            if (!md_part_first_stage(part))
                wte->slot = &w->head.w; /* only the head's copy on a last stage */
        }
    }
    if (s == PE_OK && md_part_first_stage(part)) {
        size_t zero = 0;
        s = plan_rows(l, hf, "wpe.weight", 1, 0, &zero, 1, (size_t)c->maxT, 0, C, &w->wpe.w,
                      err);
        w->wpe.rows = (size_t)c->maxT;
        w->wpe.cols = C;
    }
    for (int k = 0; s == PE_OK && k < w->nlayers; k++) {
        gpt2_layer *L = &w->h[k];
        char n[96];
        const int gl = part->first + k;
        const size_t qkv[3] = {q0, C + q0, 2 * C + q0}; /* q | k | v rows of this rank */
        const size_t whole = 0;
#define NAME(x) (snprintf(n, sizeof n, "h.%d.%s", gl, (x)), n)
        s = plan_rows(l, hf, NAME("ln_1.weight"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->ln_1.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("ln_1.bias"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->ln_1.b, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("attn.c_attn.weight"), 1, 1, qkv, 3, qn, 0, C, &L->c_attn.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("attn.c_attn.bias"), 0, 0, qkv, 3, qn, 0, 1, (void **)&L->c_attn.b, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("attn.c_proj.weight"), 1, 1, &whole, 1, C, q0, qn, &L->c_proj.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("attn.c_proj.bias"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->c_proj.b, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("ln_2.weight"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->ln_2.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("ln_2.bias"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->ln_2.b, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("mlp.c_fc.weight"), 1, 1, &f0, 1, fn, 0, C, &L->c_fc.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("mlp.c_fc.bias"), 0, 0, &f0, 1, fn, 0, 1, (void **)&L->c_fc.b, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("mlp.c_proj.weight"), 1, 1, &whole, 1, C, f0, fn, &L->mlp_proj.w, err);
        if (s == PE_OK) s = plan_rows(l, hf, NAME("mlp.c_proj.bias"), 0, 0, &whole, 1, C, 0, 1, (void **)&L->mlp_proj.b, err);
#undef NAME
        L->c_attn.out = 3 * qn, L->c_attn.in = C;
        L->c_proj.out = C, L->c_proj.in = qn;
        L->c_fc.out = fn, L->c_fc.in = C;
        L->mlp_proj.out = C, L->mlp_proj.in = fn;
    }
    if (s == PE_OK && md_part_last_stage(part, c)) {
        const size_t whole = 0;
        s = plan_rows(l, hf, "ln_f.weight", 0, 0, &whole, 1, C, 0, 1, (void **)&w->ln_f.w, err);
        if (s == PE_OK)
            s = plan_rows(l, hf, "ln_f.bias", 0, 0, &whole, 1, C, 0, 1, (void **)&w->ln_f.b, err);
        w->head.out = (size_t)sh.V;
        w->head.in = C;
    }
    return s;
}

/* ---- the forward ----------------------------------------------------------------------- */

static void gpt2_forward(md_ctx *c, const md_config *cfg, const void *family)
{
    const gpt2_weights *w = family;
    const md_step *s = c->step;
    md_acts *a = c->a;
    if (md_part_first_stage(&c->part)) {
        blk_embed(c, a->x, &w->wte, s->tokens);              /* x (T, C) = wte[tokens] */
        blk_embed_add(c, a->x, &w->wpe, s->positions, a->y); /*         + wpe[positions] */
    }
    for (int l = 0; l < w->nlayers; l++) {
        const gpt2_layer *L = &w->h[l];
        c->layer = c->part.first + l;
        blk_layernorm(c, a->h, a->x, &L->ln_1);                /* h (T, C) */
        blk_linear(c, a->qkv, a->h, &L->c_attn, BE_ACT_NONE);  /* qkv (T, 3 C_t) */
        blk_attention(c, a->att, a->qkv, l);                   /* att (T, C_t) */
        blk_linear_residual(c, a->x, a->att, &L->c_proj);      /* x += att W^T + b */
        blk_layernorm(c, a->h, a->x, &L->ln_2);                /* h (T, C) */
        blk_linear(c, a->ff, a->h, &L->c_fc, BE_ACT_GELU);     /* ff (T, I_t) */
        blk_linear_residual(c, a->x, a->ff, &L->mlp_proj);     /* x += ff W^T + b */
    }
    if (md_part_last_stage(&c->part, cfg)) {
        c->layer = cfg->L;
        blk_layernorm(c, a->h, a->x, &w->ln_f);                /* h (T, C) */
        blk_logits(c, a->h, &w->head);                         /* logits (R, V_t) */
    }
}

const md_family md_family_gpt2 = {
    .name = "gpt2",
    .configure = gpt2_configure,
    .plan = gpt2_plan,
    .free_family = gpt2_free,
    .forward = gpt2_forward,
};
