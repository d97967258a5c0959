/* blocks.h: the building blocks of a decoder's forward, one line of the forward each.
 *
 * A family's forward (gpt2.c, llama.c) reads like llm.c: blk_layernorm, blk_linear,
 * blk_attention, ... each a few backend calls on one worker's device. Blocks hide what is
 * not math: the bf16 rounding of GEMM inputs, the KV cache's writes, the step's metadata
 * and (under TP) the collectives, so a transformer block is a dozen readable lines.
 *
 * Errors are sticky, as in a CUDA stream: the first failing block records its status and
 * message in the context, and every block after it does nothing; the forward returns
 * c->st at its end. So the forward needs no error checks between its lines.
 *
 * Shapes: rows = the step's tokens (every token of every chunk is a row of the GEMMs); R =
 * the rows whose logits are wanted; the widths are this worker's (md_shard).
 */
#ifndef PE_MODEL_BLOCKS_H
#define PE_MODEL_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/decoder.h"
#include "model/hooks.h"

/* TP: how the step's logit rows meet on rank 0 (each rank computes V_t columns of them). */
typedef enum md_gather {
    MD_GATHER_BEST = 0,   /* every row greedy: each rank's best (token, logit), 2 words a row */
    MD_GATHER_CANDIDATES, /* every sampled row has a top-k: each rank's K best (index, logit)
                           * and its log-sum-exp, 2 K + 1 words a row */
    MD_GATHER_ROWS        /* the rows whole, V words a row (a sample without top-k, scoring) */
} md_gather;

/* The most candidates a rank sends a row under MD_GATHER_CANDIDATES; a larger top-k
 * gathers the rows whole. */
#define MD_TP_MAX_CANDIDATES 64

/* One step as the forward sees it: the chunks of sequences to run, already on the device. */
typedef struct md_step {
    size_t rows;                    /* tokens in the step */
    size_t nchunks;
    size_t nlogits;                 /* R: rows whose logits are computed */
    int32_t max_keys;               /* most keys a query of the step sees */
    const int32_t *tokens;          /* device (rows) token ids */
    const int32_t *positions;       /* device (rows) */
    const int32_t *slots;           /* device (rows) KV slot of each token */
    const int32_t *chunks;          /* device (nchunks, PE_K_CHUNK_FIELDS) */
    const int32_t *block_tables;    /* device, the chunks' tables end to end */
    const int32_t *logit_rows;      /* device (R) rows of the step */
    const pe_k_sampling *sampling;  /* device (R): sample a token per logit row; NULL: none */
    const int32_t *targets;         /* device (R): row r's given token as r * V + id, its logit
                                     * read into target_logit (a scored prompt's next token);
                                     * NULL: none. Rows whole: the full (R, V) logits */
    const pe_k_penalty *penalties;  /* device (npen): logits changed before any pick */
    size_t npen;
    const int32_t *row_masks;       /* device (R): row r's grammar mask (an index into masks;
                                     * -1: none), applied after the penalties; NULL: no row
                                     * has one */
    const uint32_t *masks;          /* device (masks, mask_words): bits of the vocabulary */
    size_t mask_words;
    int topk;                       /* > 0: the top-k of each logit row and its lse */
    md_gather gather;               /* TP: what of the logit rows is gathered */
    int candidates;                 /* K under MD_GATHER_CANDIDATES (>= topk) */
} md_step;

/* Device scratch of a worker for steps of up to T rows and R logit rows. */
typedef struct md_acts {
    size_t T, R, K;     /* capacity: rows, logit rows, top-k */
    float *x;           /* (T, C) the residual stream */
    float *h;           /* (T, C) a norm's output */
    float *qkv;         /* (T, (NH + 2 KVH) hd) fused q | k | v of this rank's heads */
    float *att;         /* (T, NH hd) attention output */
    float *ff;          /* (T, 2 I) the MLP's up projection (gate | up for SwiGLU) */
    float *ffa;         /* (T, I) silu(gate) * up */
    float *y;           /* (T, C) a row-parallel layer's output before the residual */
    uint16_t *xh;       /* (T, max input width) bf16: a GEMM input rounded (bf16 only) */
    float *hl;          /* (R, C) hidden states of the logit rows */
    float *logits;      /* (R, V_r) this rank's logit columns (V_r: md_shard_vocab_rows) */
    float *cand;        /* TP (R, 2 K + 1): this rank's candidates, packed for the gather:
                         * K indices (int32 bits) | K logits | the row's log-sum-exp */
    float *gath;        /* TP (tp, R, V_t): every rank's logits; or its best tokens (tp, R)
                         * then their logits (tp, R); or its candidates (tp, R, 2 K + 1) */
    float *full;        /* TP (R, V): the logit rows whole, from gath */
    int32_t *tokens;    /* (R) sampled tokens */
    float *token_logit; /* (R) the sampled token's logit */
    float *target_logit; /* (R) the logit of md_step.targets' token */
    int32_t *top_idx;   /* (R, K) */
    float *top_val;     /* (R, K) */
    float *lse;         /* (R) log-sum-exp of each logit row */
} md_acts;

/* Grows acts to at least (T, R, K); keeps it when big enough. */
pe_status md_acts_reserve(const be_ops *ops, be_device *dev, const md_config *cfg,
                          const md_shard *sh, pe_dtype dtype, size_t T, size_t R, size_t K,
                          md_acts *a);
void md_acts_free(const be_ops *ops, be_device *dev, md_acts *a);

/* TP, greedy rows (md_step.gather 0): the tokens (R) and their logits (R) from gath as the
 * step left it, copied to the host: each row's best over the ranks, the first on a tie (the
 * lowest vocabulary index, as one device's argmax). */
void md_tp_greedy_pick(const float *gath, size_t R, int tp, int Vt, int32_t *tokens,
                       float *logits);

/* TP, rows with candidates (MD_GATHER_CANDIDATES): from gath (tp, R, 2 K + 1) as the step
 * left it, copied to the host, each row's candidates merged in vocabulary order, then:
 * tokens/logits (R) sampled by sampling (R) with sample.h's rule (NULL: none), which picks
 * exactly one device's token (the top-k threshold, the weights, the nucleus and the draw
 * depend only on the candidates, and every kept token is one); top_idx/top_val (R, topk)
 * and lse (R) when topk > 0. PE_ENOMEM when the scratch cannot be had. */
pe_status md_tp_candidates_pick(const float *gath, size_t R, int tp, int Vt, int K,
                                const pe_k_sampling *sampling, int topk, int32_t *tokens,
                                float *logits, int32_t *top_idx, float *top_val, float *lse);


/* Everything a forward needs, in one place (llama2.c's RunState). */
struct md_ctx {
    const be_ops *ops;
    be_device *dev;
    pe_dtype dtype;         /* of the weights and the GEMM inputs */
    const md_config *cfg;
    md_shard sh;            /* this rank's heads and widths */
    md_part part;
    be_comm *tp;            /* TP group of the stage; NULL when tp == 1 */
    const md_step *step;
    md_acts *a;
    const be_kv *kv;        /* this worker's KV pool (its layers, its KV heads) */
    const md_hooks *hooks;  /* may be NULL */
    int layer;              /* the layer running (global index), for messages */
    pe_status st;           /* first failure; blocks after it do nothing */
    pe_err err;
};

/* Runs the family's forward over c->step; PE_OK or the first failure (c->err). */
pe_status md_forward(const md_decoder *m, const md_weights *w, md_ctx *c);

/* ---- blocks (sticky errors: each does nothing once c->st is set) ---- */

/* x (rows, C) = table[ids] (a token or position table); a vocab-parallel shard looks up its
 * rows into y, zeros for the other ids, and the TP group's all-reduce sums them into x */
void blk_embed(md_ctx *c, float *x, const md_table *table, const int32_t *ids);
/* x (rows, C) += table[ids], tmp (rows, C) scratch */
void blk_embed_add(md_ctx *c, float *x, const md_table *table, const int32_t *ids,
                   float *tmp);
/* out (rows, C) = LayerNorm(x) */
void blk_layernorm(md_ctx *c, float *out, const float *x, const md_norm *n);
/* out (rows, C) = RMSNorm(x) */
void blk_rmsnorm(md_ctx *c, float *out, const float *x, const md_norm *n);
/* y (rows, W->out) = act(x (rows, W->in) W^T + b): a whole or column-parallel layer */
void blk_linear(md_ctx *c, float *y, const float *x, const md_linear *W, be_act act);
/* x (rows, C) += in (rows, W->in) W^T + b: a row-parallel layer and the residual add
 * (under TP the partial sums are all-reduced first, and b is added once) */
void blk_linear_residual(md_ctx *c, float *x, const float *in, const md_linear *W);
/* Rotary embedding of the q and k heads of qkv (rows, (NH + 2 KVH) hd), in place;
 * inv_freq (hd / 2) on the device */
void blk_rope(md_ctx *c, float *qkv, const float *inv_freq);
/* out (rows, NH hd) = attention of qkv's queries over the cache, after appending qkv's
 * keys and values at the step's slots (layer: this worker's layer index, from 0) */
void blk_attention(md_ctx *c, float *out, const float *qkv, int layer);
/* out (rows, I) = silu(gate) * up, gu (rows, 2 I) = gate | up */
void blk_silu_mul(md_ctx *c, float *out, const float *gu);
/* The step's logit rows of h (rows, C), through head (V, C): a->logits (R, V), and by the
 * step's wishes the sampled tokens and the top-k with the log-sum-exp. */
void blk_logits(md_ctx *c, const float *h, const md_linear *head);

#endif
