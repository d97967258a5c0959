/* decoder_worker.c: what a worker does for a decoder: load its part of the model, its KV
 * pool and its step buffers; run a step (metadata to the device in one copy, the family's
 * forward, the sampled tokens, top-k and scored logits back); send the step back to its
 * replica.
 *
 * Runs on the worker's own thread; touches only its own device. The step belongs to the
 * replica: the worker reads its inputs and writes its results, then hands it back through
 * the replica's inbox (on another process of an MPI job: to process 0, procs.h), after
 * which it touches it no more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "runtime/clock.h"

static md_part part_of(const en_worker *w)
{
    const pe_engine *e = w->e;
    md_part p = {e->stage_first[w->p], e->stage_first[w->p + 1], w->t, e->tp,
                 e->cfg.tp_embedding == PE_TP_EMBED_VOCAB};
    return p;
}

/* The one worker of a replica that writes a step's results and status: the last stage's
 * TP rank 0 (the others only take part; a failure of theirs fails the engine). */
static int writes_results(const en_worker *w)
{
    return w->p == w->e->pp - 1 && w->t == 0;
}

/* PP: the residual stream x (T, C) from the previous stage, before this stage's blocks. */
static pe_status recv_stream(en_worker *w, const en_step *st, size_t T, pe_err *err)
{
    const pe_engine *e = w->e;
    uint64_t t0 = rt_now_ns();
    pe_status s = e->ops->recv(w->world_comm, w->acts.x, T * (size_t)e->dec.cfg.C,
                               en_rank(e, w->d, w->p - 1, w->t));
    en_trace_step(w, PE_TRACE_RECV, st, t0, rt_now_ns());
    if (s != PE_OK)
        pe_fail(err, s, "worker %d: recv of a step's activations from stage %d: %s", w->rank,
                w->p - 1, e->ops->last_error(w->dev));
    return s;
}

/* PP: x (T, C) to the next stage, and wait for the send (the next step writes x again). */
static pe_status send_stream(en_worker *w, const en_step *st, size_t T, pe_err *err)
{
    const pe_engine *e = w->e;
    uint64_t t0 = rt_now_ns();
    pe_status s = e->ops->send(w->world_comm, w->acts.x, T * (size_t)e->dec.cfg.C,
                               en_rank(e, w->d, w->p + 1, w->t));
    if (s == PE_OK)
        s = e->ops->synchronize(w->dev);
    en_trace_step(w, PE_TRACE_SEND, st, t0, rt_now_ns());
    if (s != PE_OK)
        pe_fail(err, s, "worker %d: send of a step's activations to stage %d: %s", w->rank,
                w->p + 1, e->ops->last_error(w->dev));
    return s;
}

size_t en_kv_pool_bytes(const pe_engine *e, const en_worker *w)
{
    return w->kv.shape.nblocks * md_kv_block_bytes(&e->dec.cfg, w->kv.shape.nlayers,
                                             w->kv.shape.kv_heads, w->kv.shape.block_tokens,
                                             w->kv.dtype);
}

pe_status en_decoder_load(en_worker *w, pe_err *err)
{
    pe_engine *e = w->e;
    const be_ops *ops = e->ops;
    const md_config *cfg = &e->dec.cfg;
    const md_part part = part_of(w);
    const md_shard sh = md_shard_of(cfg, &part);
    pe_status s = md_weights_load(&e->dec, &part, e->cfg.dtype, ops, w->dev, &w->weights, err);
    if (s != PE_OK)
        return s;
    w->kv.dtype = e->cfg.dtype;
    w->kv.shape = (pe_k_kv_shape){part.last - part.first, sh.KVH, e->sched_cfg.block_tokens,
                                  cfg->hd, e->kv_blocks};
    size_t kv_bytes = en_kv_pool_bytes(e, w);
    s = ops->alloc(w->dev, kv_bytes, &w->kv.base);
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d (device %d): no memory for a KV pool of %zu blocks "
                       "(%zu MiB): %s; lower kv_tokens / --kv-tokens", w->rank, w->device_id,
                       e->kv_blocks, kv_bytes >> 20, ops->last_error(w->dev));
    s = md_acts_reserve(ops, w->dev, cfg, &sh, e->cfg.dtype,
                        (size_t)e->sched_cfg.max_step_tokens, (size_t)e->max_logit_rows,
                        PE_MAX_LOGPROBS, &w->acts);
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d (device %d): no memory for the activations of a "
                       "%d-token step: %s; lower max_step_tokens", w->rank, w->device_id,
                       e->sched_cfg.max_step_tokens, ops->last_error(w->dev));
    return PE_OK;
}

void en_decoder_unload(en_worker *w)
{
    const be_ops *ops = w->e->ops;
    md_acts_free(ops, w->dev, &w->acts);
    if (w->kv.base)
        ops->free(w->dev, w->kv.base);
    memset(&w->kv, 0, sizeof w->kv);
    if (w->meta_dev)
        ops->free(w->dev, w->meta_dev);
    w->meta_dev = NULL;
    w->meta_cap = 0;
    if (w->weights.family || w->weights.arena)
        md_weights_free(&w->e->dec, ops, w->dev, &w->weights);
}

/* The step's metadata on the device: one copy of st->meta. */
static pe_status upload_meta(en_worker *w, const en_step *st, pe_err *err)
{
    const be_ops *ops = w->e->ops;
    pe_status s = PE_OK;
    if (st->meta_words > w->meta_cap) {
        if (w->meta_dev)
            ops->free(w->dev, w->meta_dev);
        w->meta_dev = NULL;
        w->meta_cap = 0;
        void *p = NULL;
        s = ops->alloc(w->dev, st->meta_words * 2 * sizeof(int32_t), &p);
        if (s != PE_OK)
            return pe_fail(err, s, "worker %d: no device memory for a step's metadata: %s",
                           w->rank, ops->last_error(w->dev));
        w->meta_dev = p;
        w->meta_cap = st->meta_words * 2;
    }
    s = ops->copy_h2d(w->dev, w->meta_dev, st->meta, st->meta_words * sizeof(int32_t));
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d: copying a step's metadata to the device: %s",
                       w->rank, ops->last_error(w->dev));
    return PE_OK;
}

/* TP, greedy rows: each rank's best (token, logit) -> the step's tokens. */
static pe_status download_greedy_picks(en_worker *w, en_step *st, const md_shard *sh)
{
    const be_ops *ops = w->e->ops;
    const size_t R = (size_t)st->nlogits, n = 2 * (size_t)sh->tp * R;
    float *picks = malloc(n * sizeof *picks);
    if (!picks)
        return PE_ENOMEM;
    pe_status s = ops->copy_d2h(w->dev, picks, w->acts.gath, n * sizeof *picks);
    if (s == PE_OK)
        md_tp_greedy_pick(picks, R, sh->tp, sh->V, st->out_tokens, st->out_logit);
    free(picks);
    return s;
}

/* TP, rows with candidates: every rank's K best of each row -> the step's tokens, top-k and
 * log-sum-exp (md_tp_candidates_pick, with the rows' sampling from the step's metadata). */
static pe_status download_candidates(en_worker *w, en_step *st, const md_shard *sh, int K)
{
    const be_ops *ops = w->e->ops;
    const size_t R = (size_t)st->nlogits, n = (size_t)sh->tp * R * (2 * (size_t)K + 1);
    const en_meta_layout L = en_meta_layout_of_step(st);
    float *cands = malloc(n * sizeof *cands);
    if (!cands)
        return PE_ENOMEM;
    pe_status s = ops->copy_d2h(w->dev, cands, w->acts.gath, n * sizeof *cands);
    if (s == PE_OK)
        s = md_tp_candidates_pick(
            cands, R, sh->tp, sh->V, K,
            st->sample ? (const pe_k_sampling *)(const void *)(st->meta + L.sampling) : NULL,
            st->topk, st->out_tokens, st->out_logit, st->out_top, st->out_topv,
            st->topk ? st->out_lse : NULL);
    free(cands);
    return s;
}

/* The logit rows' results, device -> the step's host arrays and the scored rows (rank 0's:
 * under TP it holds the rows whole, or the ranks' greedy picks or candidates). */
static pe_status download_results(en_worker *w, en_step *st, const md_shard *sh,
                                  md_gather gather, int ncand)
{
    if (sh->tp > 1 && gather == MD_GATHER_CANDIDATES)
        return download_candidates(w, st, sh, ncand);
    const be_ops *ops = w->e->ops;
    const md_acts *a = &w->acts;
    const size_t R = (size_t)st->nlogits, K = (size_t)st->topk;
    const size_t V = (size_t)w->e->dec.cfg.V;
    const float *logits = sh->tp > 1 ? a->full : a->logits; /* (R, V) */
    pe_status s = PE_OK;
    if (sh->tp > 1 && gather == MD_GATHER_BEST && st->sample)
        s = download_greedy_picks(w, st, sh);
    else if (st->sample) {
        s = ops->copy_d2h(w->dev, st->out_tokens, a->tokens, R * sizeof(int32_t));
        if (s == PE_OK)
            s = ops->copy_d2h(w->dev, st->out_logit, a->token_logit, R * sizeof(float));
    }
    if (s == PE_OK && K) {
        s = ops->copy_d2h(w->dev, st->out_top, a->top_idx, R * K * sizeof(int32_t));
        if (s == PE_OK)
            s = ops->copy_d2h(w->dev, st->out_topv, a->top_val, R * K * sizeof(float));
        if (s == PE_OK)
            s = ops->copy_d2h(w->dev, st->out_lse, a->lse, R * sizeof(float));
    }
    if (s == PE_OK && st->targeted)
        s = ops->copy_d2h(w->dev, st->out_target, a->target_logit, R * sizeof(float));
    for (size_t i = 0; s == PE_OK && i < R; i++)
        if (st->logit_dst[i])
            s = ops->copy_d2h(w->dev, st->logit_dst[i], logits + i * V, V * sizeof(float));
    if (s == PE_OK)
        s = ops->synchronize(w->dev);
    return s;
}

static uint64_t now_ns(void) { return rt_now_ns(); }

/* The step back where it came from: its replica's inbox, or process 0 (procs.h). */
static void step_home(en_worker *w, en_step *st)
{
    if (w->e->procs.me != 0)
        en_procs_step_back(w, st);
    else
        rt_queue_push(w->e->replicas[w->d].inbox, st);
}

/* The trace's view of a forward: its worker and its step, for the collectives' spans. */
typedef struct step_span {
    en_worker *w;
    const en_step *st;
} step_span;

static void collective_done(void *ctx, uint64_t start_ns, uint64_t end_ns)
{
    const step_span *sp = ctx;
    en_trace_step(sp->w, PE_TRACE_COLLECTIVE, sp->st, start_ns, end_ns);
}

/* TP: what of the step's logit rows the ranks gather, from the step's host copy of its
 * metadata: the rows whole for a scored row (logits or logprobs), or a row that samples
 * with a temperature and no top-k that candidates can hold; each rank's K best for rows that
 * sample with a top-k or want logprobs (K the largest of those); else each rank's best
 * token. *K gets K. */
static md_gather gather_of(const en_step *st, const md_config *cfg, const md_shard *sh, int *K)
{
    *K = st->topk;
    for (int i = 0; i < st->nlogits; i++)
        if (st->logit_dst[i])
            return MD_GATHER_ROWS;
    if (st->targeted) /* a given token's logit may be on any rank */
        return MD_GATHER_ROWS;
    if (st->sample) {
        const en_meta_layout L = en_meta_layout_of_step(st);
        const pe_k_sampling *smp = (const pe_k_sampling *)(const void *)(st->meta + L.sampling);
        for (int i = 0; i < st->nlogits; i++) {
            if (!(smp[i].temperature > 0.0f))
                continue;
            if (smp[i].top_k <= 0 || smp[i].top_k >= cfg->V)
                return MD_GATHER_ROWS; /* the whole distribution counts */
            if (smp[i].top_k > *K)
                *K = smp[i].top_k;
        }
    }
    if (*K == 0)
        return MD_GATHER_BEST;
    /* every rank's list must hold K: the last rank has the fewest real rows */
    if (*K > MD_TP_MAX_CANDIDATES || *K > md_shard_vocab_rows(cfg, sh, sh->tp - 1))
        return MD_GATHER_ROWS;
    return MD_GATHER_CANDIDATES;
}

pe_status en_decoder_step(en_worker *w, en_step *st, pe_err *err)
{
    pe_engine *e = w->e;
    const be_ops *ops = e->ops;
    const md_config *cfg = &e->dec.cfg;
    const md_part part = part_of(w);
    const md_shard sh = md_shard_of(cfg, &part);
    int K = 0; /* candidates a row under MD_GATHER_CANDIDATES */
    const md_gather gather = e->tp > 1 ? gather_of(st, cfg, &sh, &K) : MD_GATHER_BEST;
    const int topk = gather == MD_GATHER_CANDIDATES ? K : st->topk; /* top-k lists per row */
    pe_status s = upload_meta(w, st, err);
    if (s == PE_OK)
        s = md_acts_reserve(ops, w->dev, cfg, &sh, e->cfg.dtype, (size_t)st->ntok,
                            (size_t)st->nlogits, (size_t)(topk ? topk : 1), &w->acts);
    if (s != PE_OK) {
        if (!err->msg[0])
            pe_fail(err, s, "worker %d: no device memory for a %d-token step: %s", w->rank,
                    st->ntok, ops->last_error(w->dev));
    } else {
        const en_meta_layout L = en_meta_layout_of_step(st);
        const int32_t *m = w->meta_dev;
        md_step ms = {
            .rows = (size_t)st->ntok,
            .nchunks = (size_t)st->nchunks,
            .nlogits = (size_t)st->nlogits,
            .max_keys = st->max_keys,
            .tokens = m + L.tokens,
            .positions = m + L.positions,
            .slots = m + L.slots,
            .chunks = m + L.chunks,
            .block_tables = m + L.block_tables,
            .logit_rows = m + L.logit_rows,
            .sampling = st->sample ? (const pe_k_sampling *)(const void *)(m + L.sampling) : NULL,
            .targets = st->targeted ? m + L.targets : NULL, /* rows whole (gather_of) */
            .penalties = (const pe_k_penalty *)(const void *)(m + L.penalties),
            .npen = (size_t)st->npen,
            .row_masks = st->nmask ? m + L.row_masks : NULL,
            .masks = (const uint32_t *)(const void *)(m + L.masks),
            .mask_words = (size_t)st->mask_words,
            .topk = st->topk,
            .gather = gather,
            .candidates = K,
        };
        step_span span = {w, st};
        md_hooks hooks = {now_ns, collective_done, &span};
        md_ctx c = {
            .ops = ops,
            .dev = w->dev,
            .dtype = e->cfg.dtype,
            .cfg = cfg,
            .sh = sh,
            .part = part,
            .tp = e->tp > 1 ? w->tp_comm : NULL,
            .step = &ms,
            .a = &w->acts,
            .kv = &w->kv,
            .hooks = &hooks,
        };
        if (w->p > 0)
            s = recv_stream(w, st, ms.rows, err);
        uint64_t t0 = rt_now_ns();
        if (s == PE_OK) {
            s = md_forward(&e->dec, &w->weights, &c);
            if (s != PE_OK)
                pe_fail(err, s, "worker %d (device %d): decoder step %llu (%d tokens) failed: "
                        "%s", w->rank, w->device_id, (unsigned long long)st->number, st->ntok,
                        c.err.msg);
        }
        en_trace_step(w, PE_TRACE_COMPUTE, st, t0, rt_now_ns());
        if (s == PE_OK && w->p < e->pp - 1)
            s = send_stream(w, st, ms.rows, err);
        if (s == PE_OK && writes_results(w) && (s = download_results(w, st, &sh, gather, K)))
            pe_fail(err, s, "worker %d (device %d): copying a step's results to the host: %s",
                    w->rank, w->device_id, ops->last_error(w->dev));
    }
    if (s != PE_OK) { /* the engine fails before the step's sequences end with the error, so
                       * that no client sees its final event and then a working engine */
        en_fail(e, s, err->msg);
        /* The step's one writer ends its sequences with the engine's first failure, as the
         * replica ends the others: a peer's, when ours is the abort it caused (PE_ECOMM). */
        if (writes_results(w))
            st->status = atomic_load(&e->failed);
    }
    step_home(w, st);
    return s;
}

void en_decoder_step_dropped(en_worker *w, en_step *st, pe_status why)
{
    if (writes_results(w))
        st->status = why;
    step_home(w, st);
}
