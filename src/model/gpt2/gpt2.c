/* gpt2.c: the GPT-2 family (GPT2LMHeadModel): config, weights, and the forward.
 *
 * Hugging Face layout: transformer.wte (V, C), transformer.wpe (maxT, C), and per layer
 * h.{l}.ln_1, attn.c_attn (C, 3C), attn.c_proj (C, C), ln_2, mlp.c_fc (C, I), mlp.c_proj
 * (I, C), then ln_f; the "transformer." prefix is optional. The projections are Conv1D:
 * stored [in, out], so the loader reads them transposed into our (out, in). The LM head is
 * wte (tied). The attn.bias / attn.masked_bias buffers of old checkpoints are ignored.
 * LayerNorm, gelu_new (the tanh form), learned positions.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/blocks.h"
#include "model/decoder.h"
#include "model/shard_table.h"

typedef struct gpt2_layer {
    md_norm ln_1, ln_2;  /* (C) */
    md_linear c_attn;    /* (3 C_t, C): q | k | v of this rank's heads */
    md_linear c_proj;    /* (C, C_t): row-parallel */
    md_linear c_fc;      /* (I_t, C) */
    md_linear mlp_proj;  /* (C, I_t): row-parallel */
} gpt2_layer;

typedef struct gpt2_weights {
    md_table wte;        /* (V_t, C) token embedding, this rank's vocabulary rows, or (V, C)
                          * on every rank (pe_tp_embedding) (first stage) */
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
    const long dims[] = {C, L, NH, P, V, I};
    int in_range = 1;
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        in_range &= dims[i] > 0 && dims[i] <= MD_MAX_DIM;
    if (!in_range || C % NH != 0 || (C / NH) % 2 != 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: n_embd %ld, n_layer %ld, n_head %ld, n_positions %ld, vocab_size %ld, "
                       "n_inner %ld: each must be > 0 and at most %ld, and n_embd a multiple of "
                       "n_head with an even head size", hf->config_path, C, L, NH, P, V, I,
                       MD_MAX_DIM);
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

/* ---- the part of a worker: the sharding table --------------------------------------------- */

static void gpt2_free(void *family)
{
    gpt2_weights *w = family;
    if (w)
        free(w->h);
    free(w);
}

#define L_(f) offsetof(gpt2_layer, f)
#define W_(f) offsetof(gpt2_weights, f)
#define CONV1D 1 /* stored [in, out] */

/* c_attn holds q | k | v as thirds of its output rows: each rank takes its heads of each. */
static const md_tensor_rule gpt2_layer_rules[] = {
    {L_(ln_1.w), MD_SLOT_NORM, 0, 0, {{"h.%d.ln_1.weight", MD_SPLIT_REPLICATED, 0, 0}}},
    {L_(ln_1.b), MD_SLOT_NORM, 0, 0, {{"h.%d.ln_1.bias", MD_SPLIT_REPLICATED, 0, 0}}},
    {L_(c_attn), MD_SLOT_LINEAR, CONV1D, 0,
     {{"h.%d.attn.c_attn.weight", MD_SPLIT_Q_HEADS, 0, 3},
      {"h.%d.attn.c_attn.weight", MD_SPLIT_KV_HEADS, 1, 3},
      {"h.%d.attn.c_attn.weight", MD_SPLIT_KV_HEADS, 2, 3}}},
    {L_(c_attn.b), MD_SLOT_BIAS, 0, 0,
     {{"h.%d.attn.c_attn.bias", MD_SPLIT_Q_HEADS, 0, 3},
      {"h.%d.attn.c_attn.bias", MD_SPLIT_KV_HEADS, 1, 3},
      {"h.%d.attn.c_attn.bias", MD_SPLIT_KV_HEADS, 2, 3}}},
    {L_(c_proj), MD_SLOT_LINEAR, CONV1D, 0, {{"h.%d.attn.c_proj.weight", MD_SPLIT_ROW_HEADS, 0, 0}}},
    {L_(c_proj.b), MD_SLOT_BIAS, 0, 0, {{"h.%d.attn.c_proj.bias", MD_SPLIT_REPLICATED, 0, 0}}},
    {L_(ln_2.w), MD_SLOT_NORM, 0, 0, {{"h.%d.ln_2.weight", MD_SPLIT_REPLICATED, 0, 0}}},
    {L_(ln_2.b), MD_SLOT_NORM, 0, 0, {{"h.%d.ln_2.bias", MD_SPLIT_REPLICATED, 0, 0}}},
    {L_(c_fc), MD_SLOT_LINEAR, CONV1D, 0, {{"h.%d.mlp.c_fc.weight", MD_SPLIT_COLUMN, 0, 0}}},
    {L_(c_fc.b), MD_SLOT_BIAS, 0, 0, {{"h.%d.mlp.c_fc.bias", MD_SPLIT_COLUMN, 0, 0}}},
    {L_(mlp_proj), MD_SLOT_LINEAR, CONV1D, 0, {{"h.%d.mlp.c_proj.weight", MD_SPLIT_ROW, 0, 0}}},
    {L_(mlp_proj.b), MD_SLOT_BIAS, 0, 0, {{"h.%d.mlp.c_proj.bias", MD_SPLIT_REPLICATED, 0, 0}}},
};
/* the first stage: the token table (which is also the tied LM head) and the positions */
static const md_tensor_rule gpt2_embed_rules[] = {
    {W_(wte), MD_SLOT_TABLE, 0, 0, {{"wte.weight", MD_SPLIT_EMBEDDING, 0, 0}}},
    {W_(wpe), MD_SLOT_TABLE, 0, 0, {{"wpe.weight", MD_SPLIT_REPLICATED, 0, 0}}},
};
/* the last stage: the final norm, and the head when the first stage is elsewhere */
static const md_tensor_rule gpt2_final_rules[] = {
    {W_(ln_f.w), MD_SLOT_NORM, 0, 0, {{"ln_f.weight", MD_SPLIT_REPLICATED, 0, 0}}},
    {W_(ln_f.b), MD_SLOT_NORM, 0, 0, {{"ln_f.bias", MD_SPLIT_REPLICATED, 0, 0}}},
};
static const md_tensor_rule gpt2_head_rules[] = {
    {W_(head), MD_SLOT_LINEAR, 0, 0, {{"wte.weight", MD_SPLIT_VOCAB, 0, 0}}},
};
#define NRULES(r) (sizeof(r) / sizeof((r)[0]))

static pe_status gpt2_plan(const md_hf *hf, const md_config *c, const md_part *part,
                           void **family, md_tensor_list *l, pe_err *err)
{
    gpt2_weights *w = calloc(1, sizeof *w);
    if (w)
        w->h = calloc((size_t)(part->last - part->first), sizeof *w->h);
    if (!w || !w->h) {
        gpt2_free(w);
        return pe_fail(err, PE_ENOMEM, "out of host memory for the GPT-2 weight table");
    }
    *family = w;
    w->nlayers = part->last - part->first;
    const char *prefix = md_hf_find(hf, "transformer.wte.weight", NULL) ? "transformer." : "";
    const int first = md_part_first_stage(part), last = md_part_last_stage(part, c);
    pe_status s = PE_OK;
    if (first) {
        s = md_plan_table(l, hf, c, part, gpt2_embed_rules, NRULES(gpt2_embed_rules), prefix,
                          -1, w, 0, err);
        if (s == PE_OK && last) { /* the tied head is the token table itself */
            l->v[l->n - 2].slot2 = &w->head.w;
            w->head.out = w->wte.rows;
            w->head.in = w->wte.cols;
        }
    }
    for (int k = 0; s == PE_OK && k < w->nlayers; k++)
        s = md_plan_table(l, hf, c, part, gpt2_layer_rules, NRULES(gpt2_layer_rules), prefix,
                          part->first + k, &w->h[k], 0, err);
    if (s == PE_OK && last)
        s = md_plan_table(l, hf, c, part, gpt2_final_rules, NRULES(gpt2_final_rules), prefix, -1,
                          w, 0, err);
    if (s == PE_OK && last && !first)
        s = md_plan_table(l, hf, c, part, gpt2_head_rules, NRULES(gpt2_head_rules), prefix, -1,
                          w, 0, err);
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
