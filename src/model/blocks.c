/* blocks.c: the blocks of a decoder's forward (blocks.h) over the backend's operations. */
#include "model/blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Records the first failure: its status and a message naming the block and the layer. */
static void check(md_ctx *c, pe_status s, const char *what)
{
    if (s == PE_OK || c->st != PE_OK)
        return;
    c->st = s;
    pe_fail(&c->err, s, "%s (layer %d): %s", what, c->layer, c->ops->last_error(c->dev));
}

static size_t rows_of(const md_ctx *c) { return c->step->rows; }

pe_status md_forward(const md_decoder *m, const md_weights *w, md_ctx *c)
{
    c->st = PE_OK;
    c->err.msg[0] = '\0';
    c->layer = -1;
    m->family->forward(c, &m->cfg, w->family);
    return c->st;
}

void blk_embed(md_ctx *c, float *x, const md_table *table, const int32_t *ids)
{
    if (c->st)
        return;
    const size_t n = rows_of(c) * table->cols;
    float *out = table->split ? c->a->y : x; /* a shard's rows, zeros for the others' ids */
    check(c, c->ops->embedding(c->dev, c->dtype, out, table->w, ids, rows_of(c), table->cols,
                               table->vocab, table->row0, table->rows),
          "embedding");
    if (c->st || !table->split)
        return;
    /* vocab-parallel: one rank holds each id's row, the others add zeros (exact) */
    uint64_t t0 = md_now(c->hooks);
    check(c, c->ops->allreduce_sum(c->tp, out, x, n), "all-reduce of the embedding");
    md_collective_done(c->hooks, t0);
}

void blk_embed_add(md_ctx *c, float *x, const md_table *table, const int32_t *ids, float *tmp)
{
    blk_embed(c, tmp, table, ids);
    if (c->st)
        return;
    check(c, c->ops->residual_add(c->dev, x, tmp, rows_of(c) * table->cols), "embedding add");
}

void blk_layernorm(md_ctx *c, float *out, const float *x, const md_norm *n)
{
    if (c->st)
        return;
    check(c, c->ops->layernorm(c->dev, out, x, n->w, n->b, rows_of(c), (size_t)c->cfg->C,
                               c->cfg->eps),
          "layernorm");
}

void blk_rmsnorm(md_ctx *c, float *out, const float *x, const md_norm *n)
{
    if (c->st)
        return;
    check(c, c->ops->rmsnorm(c->dev, out, x, n->w, rows_of(c), (size_t)c->cfg->C, c->cfg->eps),
          "rmsnorm");
}

/* x (rows, n) as the GEMM input of the model's dtype: itself, or rounded into a->xh. */
static const void *gemm_input(md_ctx *c, const float *x, size_t rows, size_t n)
{
    if (c->dtype == PE_DTYPE_FP32 || c->st)
        return x;
    check(c, c->ops->to_bf16(c->dev, c->a->xh, x, rows * n), "rounding to bf16");
    return c->a->xh;
}

/* y (rows, W->out) = act(x W^T + b), b skipped when with_bias is 0. */
static void linear_rows(md_ctx *c, float *y, const float *x, size_t rows, const md_linear *W,
                        int with_bias, be_act act)
{
    const void *in = gemm_input(c, x, rows, W->in);
    if (c->st)
        return;
    check(c, c->ops->linear(c->dev, c->dtype, rows, W->out, W->in, in, W->w,
                            with_bias ? W->b : NULL, act, y, 0, NULL),
          "linear");
}

void blk_linear(md_ctx *c, float *y, const float *x, const md_linear *W, be_act act)
{
    linear_rows(c, y, x, rows_of(c), W, 1, act);
}

void blk_linear_residual(md_ctx *c, float *x, const float *in, const md_linear *W)
{
    const size_t rows = rows_of(c), n = W->out;
    float *y = c->a->y;
    if (!c->tp) { /* y = in W^T + b; x += y */
        linear_rows(c, y, in, rows, W, 1, BE_ACT_NONE);
        if (!c->st)
            check(c, c->ops->residual_add(c->dev, x, y, rows * n), "residual add");
        return;
    }
    /* TP: each rank holds some input columns; the partial sums meet in an all-reduce into
     * h, which no block reads again before the next norm writes it, then b once. */
    linear_rows(c, y, in, rows, W, 0, BE_ACT_NONE);
    if (c->st)
        return;
    uint64_t t0 = md_now(c->hooks);
    check(c, c->ops->allreduce_sum(c->tp, y, c->a->h, rows * n), "all-reduce");
    md_collective_done(c->hooks, t0);
    if (!c->st && W->b)
        check(c, c->ops->bias_add(c->dev, c->a->h, W->b, rows, n), "bias");
    if (!c->st)
        check(c, c->ops->residual_add(c->dev, x, c->a->h, rows * n), "residual add");
}

static size_t qkv_width(const md_ctx *c)
{
    return (size_t)(c->sh.NH + 2 * c->sh.KVH) * (size_t)c->cfg->hd;
}

void blk_rope(md_ctx *c, float *qkv, const float *inv_freq)
{
    if (c->st)
        return;
    /* the q heads and then the k heads, adjacent in each row */
    check(c, c->ops->rope(c->dev, qkv, rows_of(c), qkv_width(c), (size_t)(c->sh.NH + c->sh.KVH),
                          (size_t)c->cfg->hd, c->step->positions, inv_freq),
          "rope");
}

void blk_attention(md_ctx *c, float *out, const float *qkv, int layer)
{
    if (c->st)
        return;
    const md_step *s = c->step;
    const size_t hd = (size_t)c->cfg->hd, stride = qkv_width(c);
    const float *q = qkv, *k = qkv + (size_t)c->sh.NH * hd, *v = k + (size_t)c->sh.KVH * hd;
    check(c, c->ops->kv_append(c->dev, c->kv, layer, k, v, stride, s->slots, s->rows),
          "KV append");
    if (c->st)
        return;
    be_attn at = {
        .rows = s->rows,
        .q = q,
        .q_stride = stride,
        .out = out,
        .out_stride = (size_t)c->sh.NH * hd,
        .heads = c->sh.NH,
        .scale = 1.0f / sqrtf((float)hd),
        .window = c->cfg->window,
        .nchunks = s->nchunks,
        .chunks = s->chunks,
        .block_tables = s->block_tables,
        .max_keys = s->max_keys,
    };
    check(c, c->ops->attention(c->dev, c->kv, layer, &at), "attention");
}

void blk_silu_mul(md_ctx *c, float *out, const float *gu)
{
    if (c->st)
        return;
    check(c, c->ops->silu_mul(c->dev, out, gu, rows_of(c), (size_t)c->sh.I), "silu_mul");
}

/* The sampling penalties, then the grammar masks, on logits (R, n), which hold vocabulary
 * ids id0 .. id0 + n - 1: before the top-k and the picks, so that logprobs are of the
 * distribution sampled. */
static void penalize_and_mask(md_ctx *c, size_t R, size_t n, int id0)
{
    const md_step *s = c->step;
    if (!c->st && s->npen > 0)
        check(c, c->ops->penalize(c->dev, c->a->logits, R, n, id0, s->penalties, s->npen),
              "the sampling penalties");
    if (!c->st && s->row_masks)
        check(c, c->ops->mask(c->dev, c->a->logits, R, n, id0, s->row_masks, s->masks,
                              s->mask_words),
              "the grammar masks");
}

/* The sampled tokens, the given tokens' logits and the top-k of logits (R, n). */
static void pick_tokens(md_ctx *c, const float *logits, size_t R, size_t n)
{
    const md_step *s = c->step;
    md_acts *a = c->a;
    if (!c->st && s->sampling)
        check(c, c->ops->sample(c->dev, logits, R, n, s->sampling, a->tokens, a->token_logit),
              "sampling");
    if (!c->st && s->targets) /* logits (R, V) read as a table of R V one-float rows */
        check(c, c->ops->embedding(c->dev, PE_DTYPE_FP32, a->target_logit, logits, s->targets,
                                   R, 1, R * n, 0, R * n),
              "reading the given tokens' logits");
    if (!c->st && s->topk > 0)
        check(c, c->ops->topk(c->dev, logits, R, n, (size_t)s->topk, a->top_idx, a->top_val,
                              a->lse),
              "top-k of the logits");
}

/* TP, rows whole: every rank's logits (R, V_r) -> full (R, V) on every rank, sampled and
 * ranked on rank 0. */
static void gather_rows(md_ctx *c, size_t R)
{
    md_acts *a = c->a;
    const size_t Vt = (size_t)c->sh.V, V = (size_t)c->cfg->V, tp = (size_t)c->sh.tp;
    uint64_t t0 = md_now(c->hooks);
    check(c, c->ops->allgather(c->tp, a->logits, a->gath, R * Vt), "all-gather of logits");
    for (size_t r = 0; r < tp && !c->st; r++) { /* rank r's (R, V_r) block -> columns */
        const size_t w = (size_t)md_shard_vocab_rows(c->cfg, &c->sh, (int)r);
        check(c, c->ops->copy_d2d_2d(c->dev, a->full + r * Vt, V * sizeof(float),
                                     a->gath + r * R * Vt, w * sizeof(float), w * sizeof(float),
                                     R),
              "placing the gathered logits");
    }
    md_collective_done(c->hooks, t0);
    if (c->part.t == 0)
        pick_tokens(c, a->full, R, V);
}

/* TP, candidates: each rank's K best (index, logit) of a row and the row's log-sum-exp,
 * packed (R, 2 K + 1) and gathered: 2 K + 1 words a row, not V. Rank 0's host merges them
 * (md_tp_candidates_pick). */
static void gather_candidates(md_ctx *c, size_t R, size_t Vr)
{
    md_acts *a = c->a;
    const size_t K = (size_t)c->step->candidates, W = 2 * K + 1, f = sizeof(float);
    check(c, c->ops->topk(c->dev, a->logits, R, Vr, K, a->top_idx, a->top_val, a->lse),
          "candidates of the logits");
    if (!c->st) /* int32 bits, copied as they are */
        check(c, c->ops->copy_d2d_2d(c->dev, a->cand, W * f, a->top_idx, K * f, K * f, R),
              "packing the candidates");
    if (!c->st)
        check(c, c->ops->copy_d2d_2d(c->dev, a->cand + K, W * f, a->top_val, K * f, K * f, R),
              "packing the candidates");
    if (!c->st)
        check(c, c->ops->copy_d2d_2d(c->dev, a->cand + 2 * K, W * f, a->lse, f, f, R),
              "packing the candidates");
    uint64_t t0 = md_now(c->hooks);
    check(c, c->ops->allgather(c->tp, a->cand, a->gath, R * W), "all-gather of candidates");
    md_collective_done(c->hooks, t0);
}

/* TP, greedy rows: each rank's best token and its logit in gath, for rank 0 to pick the
 * best of (md_tp_greedy_pick): 2 words a row. */
static void gather_best(md_ctx *c, size_t R, size_t Vr)
{
    md_acts *a = c->a;
    const size_t tp = (size_t)c->sh.tp;
    pick_tokens(c, a->logits, R, Vr); /* this rank's first best */
    uint64_t t0 = md_now(c->hooks);
    check(c, c->ops->allgather(c->tp, (const float *)(const void *)a->tokens, a->gath, R),
          "all-gather of the best tokens"); /* int32 bits, copied as they are */
    check(c, c->ops->allgather(c->tp, a->token_logit, a->gath + tp * R, R),
          "all-gather of the best logits");
    md_collective_done(c->hooks, t0);
}

/* TP, after each rank's logits (R, V_r): what the step's rows need of the other ranks. */
static void gather_logits(md_ctx *c, size_t R)
{
    const size_t Vr = (size_t)md_shard_vocab_rows(c->cfg, &c->sh, c->part.t);
    switch (c->step->gather) {
    case MD_GATHER_ROWS: gather_rows(c, R); break;
    case MD_GATHER_CANDIDATES: gather_candidates(c, R, Vr); break;
    case MD_GATHER_BEST: gather_best(c, R, Vr); break;
    }
}

void md_tp_greedy_pick(const float *gath, size_t R, int tp, int Vt, int32_t *tokens,
                       float *logits)
{
    for (size_t i = 0; i < R; i++) {
        int best = -1;
        float v = 0.0f;
        for (int r = 0; r < tp; r++) { /* ranks in vocabulary order: the first best wins */
            float x = gath[(size_t)tp * R + (size_t)r * R + i];
            if (x == x && (best < 0 || x > v)) /* NaNs never win */
                best = r, v = x;
        }
        int32_t local;
        memcpy(&local, &gath[(size_t)(best < 0 ? 0 : best) * R + i], sizeof local);
        tokens[i] = best < 0 ? 0 : best * Vt + local;
        logits[i] = best < 0 ? gath[(size_t)tp * R + i] : v;
    }
}

/* Orders candidates by vocabulary index (n <= tp x MD_TP_MAX_CANDIDATES). */
typedef struct cand_entry {
    int32_t id;
    float v;
} cand_entry;

static int by_id(const void *a, const void *b)
{
    int32_t x = ((const cand_entry *)a)->id, y = ((const cand_entry *)b)->id;
    return (x > y) - (x < y);
}

pe_status md_tp_candidates_pick(const float *gath, size_t R, int tp, int Vt, int K,
                                const pe_k_sampling *sampling, int topk, int32_t *tokens,
                                float *logits, int32_t *top_idx, float *top_val, float *lse)
{
    const size_t W = 2 * (size_t)K + 1, n = (size_t)tp * (size_t)K;
    cand_entry *e = malloc(n * sizeof *e);
    float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), mass[256];
    int32_t *ids = malloc(n * sizeof *ids), at[PE_MAX_LOGPROBS];
    uint32_t hist[256];
    if (!e || !x || !w || !ids) {
        free(e), free(x), free(w), free(ids);
        return PE_ENOMEM;
    }
    for (size_t i = 0; i < R; i++) {
        size_t m = 0;
        float lmax = -INFINITY, lsum = 0.0f;
        for (int r = 0; r < tp; r++) { /* rank r's row i: K indices | K logits | lse */
            const float *p = gath + ((size_t)r * R + i) * W;
            for (int k = 0; k < K; k++) {
                int32_t local;
                memcpy(&local, &p[k], sizeof local);
                if (local >= 0) /* -1: a padded slot of a row with NaNs */
                    e[m++] = (cand_entry){r * Vt + local, p[K + k]};
            }
            lmax = fmaxf(lmax, p[2 * K]);
        }
        for (int r = 0; r < tp; r++)
            lsum += expf(gath[((size_t)r * R + i) * W + 2 * (size_t)K] - lmax);
        qsort(e, m, sizeof *e, by_id); /* vocabulary order: the draw walks it */
        for (size_t j = 0; j < m; j++)
            ids[j] = e[j].id, x[j] = e[j].v;
        if (lse)
            lse[i] = lmax + logf(lsum);
        if (sampling && m > 0) {
            int32_t j = pe_k_sample_row(x, (int32_t)m, sampling[i], w, hist, mass);
            tokens[i] = ids[j];
            logits[i] = x[j];
        } else if (sampling) {
            tokens[i] = 0, logits[i] = NAN;
        }
        if (topk > 0) { /* the row's top-k, largest first, equal values in index order */
            pe_k_topk_row(x, (int32_t)m, topk, at, top_val + i * (size_t)topk);
            for (int k = 0; k < topk; k++)
                top_idx[i * (size_t)topk + k] = at[k] < 0 ? -1 : ids[at[k]];
        }
    }
    free(e), free(x), free(w), free(ids);
    return PE_OK;
}

void blk_logits(md_ctx *c, const float *h, const md_linear *head)
{
    const md_step *s = c->step;
    md_acts *a = c->a;
    if (c->st || s->nlogits == 0)
        return;
    const size_t R = s->nlogits, C = (size_t)c->cfg->C;
    /* hl (R, C) = the logit rows of h: a gather, which is an embedding over h's rows */
    check(c, c->ops->embedding(c->dev, PE_DTYPE_FP32, a->hl, h, s->logit_rows, R, C, s->rows, 0,
                               s->rows),
          "gathering the logit rows");
    if (!c->tp) {
        linear_rows(c, a->logits, a->hl, R, head, 1, BE_ACT_NONE); /* logits (R, V) */
        penalize_and_mask(c, R, head->out, 0);
        pick_tokens(c, a->logits, R, head->out);
        return;
    }
    /* TP: this rank's vocabulary rows, its padding left out: logits (R, V_r). A head tied
     * to the token table on the same rank is that whole (V, C) table (the embedding is
     * replicated): its rows start at V0. */
    md_linear mine = *head;
    mine.out = (size_t)md_shard_vocab_rows(c->cfg, &c->sh, c->part.t);
    if (head->out == (size_t)c->cfg->V && c->sh.V0 > 0)
        mine.w = (char *)head->w + (size_t)c->sh.V0 * head->in *
                                            (c->dtype == PE_DTYPE_BF16 ? 2u : 4u);
    linear_rows(c, a->logits, a->hl, R, &mine, 1, BE_ACT_NONE);
    penalize_and_mask(c, R, mine.out, c->sh.V0); /* this rank's ids: before any gather */
    if (!c->st)
        gather_logits(c, R);
}

/* ---- scratch ---------------------------------------------------------------------------- */

void md_acts_free(const be_ops *ops, be_device *dev, md_acts *a)
{
    void *bufs[] = {a->x,      a->h,           a->qkv,     a->att,     a->ff,
                    a->ffa,    a->y,           a->xh,      a->hl,      a->logits,
                    a->tokens, a->token_logit, a->top_idx, a->top_val, a->lse,
                    a->gath,   a->full,        a->cand,    a->target_logit};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            ops->free(dev, bufs[i]);
    memset(a, 0, sizeof *a);
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

pe_status md_acts_reserve(const be_ops *ops, be_device *dev, const md_config *cfg,
                          const md_shard *sh, pe_dtype dtype, size_t T, size_t R, size_t K,
                          md_acts *a)
{
    if (a->x && a->T >= T && a->R >= R && a->K >= K)
        return PE_OK;
    md_acts_free(ops, dev, a);
    T = T ? T : 1;
    R = R ? R : 1;
    K = K ? K : 1;
    const size_t C = (size_t)cfg->C, hd = (size_t)cfg->hd, I = (size_t)sh->I;
    const size_t qkv = (size_t)(sh->NH + 2 * sh->KVH) * hd, att = (size_t)sh->NH * hd;
    const size_t widest_in = max3(C, att, I), V = (size_t)sh->V, tp = (size_t)sh->tp;
    struct {
        void **p;
        size_t bytes;
    } want[] = {
        {(void **)&a->x, T * C * sizeof(float)},
        {(void **)&a->h, T * C * sizeof(float)},
        {(void **)&a->qkv, T * qkv * sizeof(float)},
        {(void **)&a->att, T * att * sizeof(float)},
        {(void **)&a->ff, T * 2 * I * sizeof(float)},
        {(void **)&a->ffa, T * I * sizeof(float)},
        {(void **)&a->y, T * C * sizeof(float)},
        {(void **)&a->xh, dtype == PE_DTYPE_BF16 ? T * widest_in * sizeof(uint16_t) : 0},
        {(void **)&a->hl, R * C * sizeof(float)},
        {(void **)&a->logits, R * V * sizeof(float)},
        {(void **)&a->tokens, R * sizeof(int32_t)},
        {(void **)&a->token_logit, R * sizeof(float)},
        {(void **)&a->target_logit, R * sizeof(float)},
        {(void **)&a->top_idx, R * K * sizeof(int32_t)},
        {(void **)&a->top_val, R * K * sizeof(float)},
        {(void **)&a->lse, R * sizeof(float)},
        /* TP: the gathered logits (or 2 words a row of each rank, or 2 K + 1), the rows
         * whole, and this rank's candidates */
        {(void **)&a->gath, tp > 1 ? tp * R * max3(V, 2, 2 * K + 1) * sizeof(float) : 0},
        {(void **)&a->full, tp > 1 ? R * (size_t)cfg->V * sizeof(float) : 0},
        {(void **)&a->cand, tp > 1 ? R * (2 * K + 1) * sizeof(float) : 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!want[i].bytes)
            continue;
        pe_status s = ops->alloc(dev, want[i].bytes, want[i].p);
        if (s != PE_OK) {
            md_acts_free(ops, dev, a);
            return s;
        }
    }
    a->T = T;
    a->R = R;
    a->K = K;
    return PE_OK;
}
