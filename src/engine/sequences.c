/* sequences.c: the client side of decoders: pe_seq_submit, pe_seq_cancel, pe_seq_poll,
 * pe_seq_wait and pe_score.
 *
 * A submitted sequence is checked here (so bad parameters fail at the call), given an id,
 * and handed to the replica with the most room in its KV pool (then the fewest sequences);
 * from then on its replica's thread owns it, and it ends with exactly one final event.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "runtime/annotate.h"

void pe_seq_params_init(pe_seq_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->max_tokens = 16;
    p->sampling.top_p = 1.0f;
    p->sampling.repetition_penalty = 1.0f;
}

static pe_status need_decoder(pe_engine *e, const char *call, pe_err *err)
{
    if (!e->loaded)
        return pe_fail(err, PE_EINVAL, "%s: no model loaded; call pe_engine_load first", call);
    if (!e->decoder)
        return pe_fail(err, PE_EINVAL, "%s: the loaded model is an MLP, which runs rows "
                       "(pe_submit, pe_infer); sequences need a decoder (a Hugging Face "
                       "directory)", call);
    if (e->procs.me != 0)
        return pe_fail(err, PE_EINVAL, "%s: this is process %d of an MPI job; requests enter "
                       "at process 0, and the others call pe_engine_follow", call, e->procs.me);
    if (atomic_load(&e->stopping))
        return pe_fail(err, PE_ECLOSED, "%s: the engine is shutting down", call);
    pe_status f = atomic_load(&e->failed);
    if (f != PE_OK) {
        pthread_mutex_lock(&e->err_mu);
        pe_fail(err, f, "%s: the engine stopped after a failure: %s", call, e->fail_err.msg);
        pthread_mutex_unlock(&e->err_mu);
        return f;
    }
    return PE_OK;
}

/* Every id must name a row of the embedding. */
static pe_status check_tokens(const pe_engine *e, const int32_t *t, size_t n, const char *what,
                              pe_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= e->dec.cfg.V)
            return pe_fail(err, PE_EINVAL, "%s: token %d at index %zu is outside the "
                           "vocabulary [0, %d); check the tokenizer against the model", what,
                           (int)t[i], i, e->dec.cfg.V);
    return PE_OK;
}

/* p's prompt (the new tokens, for an append) and parameters, for `call`. */
static pe_status check_params(const pe_engine *e, const pe_seq_params *p, const char *call,
                              pe_err *err)
{
    const int ctx = e->dec.cfg.maxT;
    if (!p->prompt || p->prompt_len == 0)
        return pe_fail(err, PE_EINVAL, "%s: the prompt is empty; give at least "
                       "one token (e.g. the model's BOS)", call);
    if (p->prompt_len >= (size_t)ctx)
        return pe_fail(err, PE_EINVAL, "%s: the prompt has %zu tokens but the "
                       "model's context holds %d positions, so none is left to generate; "
                       "shorten the prompt", call, p->prompt_len, ctx);
    if (p->max_tokens < 1)
        return pe_fail(err, PE_EINVAL, "%s: max_tokens is %d; ask for at least "
                       "1 token", call, p->max_tokens);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return pe_fail(err, PE_EINVAL, "%s: min_tokens is %d; give 0 (off) to max_tokens (%d)",
                       call, p->min_tokens, p->max_tokens);
    const pe_sampling *s = &p->sampling;
    if (!(s->temperature >= 0.0f) || isinf(s->temperature))
        return pe_fail(err, PE_EINVAL, "%s: temperature %g must be a finite "
                       "number >= 0 (0 is greedy)", call, (double)s->temperature);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return pe_fail(err, PE_EINVAL, "%s: top_p %g must be in (0, 1] (1 keeps "
                       "every token)", call, (double)s->top_p);
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        return pe_fail(err, PE_EINVAL, "%s: min_p %g must be in [0, 1] (0 keeps every "
                       "token)", call, (double)s->min_p);
    if (s->top_k < 0)
        return pe_fail(err, PE_EINVAL, "%s: top_k %d must be >= 0 (0 keeps every "
                       "token)", call, s->top_k);
    if (!(s->repetition_penalty >= 0.0f) || isinf(s->repetition_penalty))
        return pe_fail(err, PE_EINVAL, "%s: repetition_penalty %g must be a finite number "
                       "> 0 (1 or 0: off)", call, (double)s->repetition_penalty);
    if (!isfinite(s->frequency_penalty) || !isfinite(s->presence_penalty))
        return pe_fail(err, PE_EINVAL, "%s: frequency_penalty %g and presence_penalty %g must "
                       "be finite (0: off)", call, (double)s->frequency_penalty,
                       (double)s->presence_penalty);
    if (p->logprobs < 0 || p->logprobs > PE_MAX_LOGPROBS)
        return pe_fail(err, PE_EINVAL, "%s: logprobs %d must be in 0..%d", call,
                       p->logprobs, PE_MAX_LOGPROBS);
    if (p->nlogit_bias > PE_MAX_LOGIT_BIAS || (p->nlogit_bias && !p->logit_bias))
        return pe_fail(err, PE_EINVAL, "%s: %zu logit_bias entries; give at most %d, and a "
                       "non-NULL list", call, p->nlogit_bias, PE_MAX_LOGIT_BIAS);
    for (size_t i = 0; i < p->nlogit_bias; i++) {
        const pe_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= e->dec.cfg.V || !isfinite(b->bias))
            return pe_fail(err, PE_EINVAL, "%s: logit_bias entry %zu (token %d, bias %g): the "
                           "token must be in the vocabulary [0, %d) and the bias finite", call,
                           i, (int)b->token, (double)b->bias, e->dec.cfg.V);
        for (size_t j = 0; j < i; j++)
            if (p->logit_bias[j].token == b->token)
                return pe_fail(err, PE_EINVAL, "%s: logit_bias names token %d twice (entries "
                               "%zu and %zu); give each token once", call, (int)b->token, j, i);
    }
    if (p->grammar && p->grammar->vocab > e->dec.cfg.V)
        return pe_fail(err, PE_EINVAL, "%s: the grammar's vocabulary (%d ids) is larger than "
                       "the model's (%d): make the grammar from the model's own tokenizer",
                       call, (int)p->grammar->vocab, e->dec.cfg.V);
    if (p->nstop > PE_MAX_STOP || (p->nstop && !p->stop))
        return pe_fail(err, PE_EINVAL, "%s: %zu stop tokens; give at most %d, "
                       "and a non-NULL list", call, p->nstop, PE_MAX_STOP);
    char what[64];
    snprintf(what, sizeof what, "%s: the prompt", call);
    pe_status st = check_tokens(e, p->prompt, p->prompt_len, what, err);
    snprintf(what, sizeof what, "%s: the stop tokens", call);
    if (st == PE_OK)
        st = check_tokens(e, p->stop, p->nstop, what, err);
    return st;
}

/* A replica's room and sequences as a client should see them: what it published, with the
 * sequences routed to it since (a burst of submits would otherwise all see the same). */
static int room_of(en_replica *r)
{
    return atomic_load_explicit(&r->room, memory_order_relaxed) -
           atomic_load_explicit(&r->inbound_blocks, memory_order_relaxed);
}

static int seqs_of(en_replica *r)
{
    return atomic_load_explicit(&r->seqs, memory_order_relaxed) +
           atomic_load_explicit(&r->inbound_seqs, memory_order_relaxed);
}

/* The replica with the most room for promises, then the fewest sequences; q is counted as
 * routed to it (unroute takes it back if it is not sent after all). */
static en_replica *pick_replica(pe_engine *e, const en_seq *q)
{
    en_replica *best = &e->replicas[0];
    for (int d = 1; d < e->dp; d++) {
        en_replica *r = &e->replicas[d];
        int room = room_of(r), best_room = room_of(best);
        if (room > best_room || (room == best_room && seqs_of(r) < seqs_of(best)))
            best = r;
    }
    atomic_fetch_add_explicit(&best->inbound_seqs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&best->inbound_blocks, en_sched_blocks_needed(&e->sched_cfg, q),
                              memory_order_relaxed);
    return best;
}

static void unroute(en_replica *r, int blocks)
{
    atomic_fetch_sub_explicit(&r->inbound_seqs, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&r->inbound_blocks, blocks, memory_order_relaxed);
}

/* A new sequence holding `n` tokens now and room for `cap` (its id is given once it is
 * accepted). */
static en_seq *seq_new(pe_engine *e, const int32_t *tokens, size_t n, size_t cap)
{
    en_seq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->tokens = malloc(cap * sizeof *q->tokens);
    if (!q->tokens) {
        free(q);
        return NULL;
    }
    memcpy(q->tokens, tokens, n * sizeof *tokens);
    q->hdr.kind = EN_MSG_SEQ;
    q->ntok = (int)n;
    q->cap = (int)cap;
    q->prompt_len = (int)n;
    return q;
}

/* The KV blocks q may need must fit a pool at all, or it would wait forever. */
static pe_status check_fits(const pe_engine *e, const en_seq *q, const char *call, pe_err *err)
{
    int need = en_sched_blocks_needed(&e->sched_cfg, q);
    if (need <= e->sched_cfg.nblocks)
        return PE_OK;
    return pe_fail(err, PE_EINVAL, "%s: the sequence may need %d KV blocks of %d positions, "
                   "but a replica's pool has %d; raise kv_tokens (--kv-tokens), or lower "
                   "max_tokens or the prompt", call, need, e->sched_cfg.block_tokens,
                   e->sched_cfg.nblocks);
}

/* A sequence message from p: p's prompt tokens (its new tokens, for an append to a
 * sequence holding `held` tokens) and generation parameters. NULL when out of memory. */
static en_seq *seq_from_params(pe_engine *e, const pe_seq_params *p, int held)
{
    size_t cap = (size_t)held + p->prompt_len + (size_t)p->max_tokens;
    if (cap > (size_t)e->dec.cfg.maxT)
        cap = (size_t)e->dec.cfg.maxT;
    en_seq *q = seq_new(e, p->prompt, p->prompt_len, cap - (size_t)held);
    if (!q)
        return NULL;
    q->max_tokens = p->max_tokens;
    q->min_tokens = p->min_tokens;
    q->sampling = p->sampling;
    if (p->nlogit_bias) { /* sorted, for the scheduler's lookups */
        q->bias = malloc(p->nlogit_bias * sizeof *q->bias);
        if (!q->bias) {
            en_seq_free(q);
            return NULL;
        }
        memcpy(q->bias, p->logit_bias, p->nlogit_bias * sizeof *q->bias);
        qsort(q->bias, p->nlogit_bias, sizeof *q->bias, en_bias_by_token);
        q->nbias = (int)p->nlogit_bias;
    }
    q->logprobs = p->logprobs;
    q->nstop = (int)p->nstop;
    if (p->nstop)
        memcpy(q->stop, p->stop, p->nstop * sizeof *p->stop);
    q->ignore_eos = p->ignore_eos;
    q->grammar = p->grammar;
    if (q->grammar)
        tx_grammar_start(q->grammar, &q->gstate);
    q->keep = q->tracked = p->keep != 0;
    q->user = p->user;
    return q;
}

/* Hands q to replica r with its final event's slot reserved; on failure q is freed. */
static pe_status send_seq(pe_engine *e, en_replica *r, en_seq *q, const char *call,
                          pe_err *err)
{
    if (en_events_expect(&e->events) != PE_OK) {
        en_seq_free(q);
        return pe_fail(err, PE_ENOMEM, "%s: out of host memory for the sequence's events", call);
    }
    if (rt_queue_push(r->inbox, q) != PE_OK) { /* never closed while running */
        en_events_unexpect(&e->events);
        en_seq_free(q);
        return pe_fail(err, PE_ECLOSED, "%s: the engine is shutting down", call);
    }
    return PE_OK;
}

pe_status pe_seq_submit(pe_engine *e, const pe_seq_params *p, uint64_t *id)
{
    if (!e || !p || !id) {
        pe_set_last_error("pe_seq_submit: engine, params and id must not be NULL");
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    pe_status s = need_decoder(e, "pe_seq_submit", &err);
    if (s == PE_OK)
        s = check_params(e, p, "pe_seq_submit", &err);
    if (s != PE_OK)
        return en_error(e, s, &err);
    en_seq *q = seq_from_params(e, p, 0);
    if (!q) {
        pe_fail(&err, PE_ENOMEM, "pe_seq_submit: out of host memory for a sequence");
        return en_error(e, PE_ENOMEM, &err);
    }
    s = check_fits(e, q, "pe_seq_submit", &err);
    if (s != PE_OK) {
        en_seq_free(q);
        return en_error(e, s, &err);
    }
    en_replica *r = pick_replica(e, q);
    const int blocks = en_sched_blocks_needed(&e->sched_cfg, q);
    uint64_t qid = q->id = atomic_fetch_add(&e->next_seq, 1);
    if (q->keep && en_kept_add(e, qid, r->d) != PE_OK) {
        unroute(r, blocks);
        en_seq_free(q);
        pe_fail(&err, PE_ENOMEM, "pe_seq_submit: out of host memory for a kept sequence");
        return en_error(e, PE_ENOMEM, &err);
    }
    s = send_seq(e, r, q, "pe_seq_submit", &err);
    if (s != PE_OK) {
        unroute(r, blocks);
        en_kept_forget(e, qid);
        return en_error(e, s, &err);
    }
    *id = qid;
    return PE_OK;
}

pe_status pe_seq_append(pe_engine *e, uint64_t id, const pe_seq_params *p)
{
    if (!e || !p) {
        pe_set_last_error("pe_seq_append: engine and params must not be NULL");
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    pe_status s = need_decoder(e, "pe_seq_append", &err);
    if (s == PE_OK)
        s = check_params(e, p, "pe_seq_append", &err);
    int d = 0;
    if (s == PE_OK)
        s = en_kept_take_for_append(e, id, p->prompt_len, &d, &err);
    if (s != PE_OK)
        return en_error(e, s, &err);
    const int held = en_kept_length(e, id);
    en_seq *q = seq_from_params(e, p, held);
    if (!q) {
        en_kept_untake(e, id);
        pe_fail(&err, PE_ENOMEM, "pe_seq_append: out of host memory for the tokens");
        return en_error(e, PE_ENOMEM, &err);
    }
    q->hdr.kind = EN_MSG_APPEND;
    q->id = id;
    en_seq whole = *q; /* the blocks the whole sequence may need must fit a pool */
    whole.prompt_len = held + q->ntok;
    whole.ntok = whole.prompt_len;
    s = check_fits(e, &whole, "pe_seq_append", &err);
    if (s == PE_OK)
        s = send_seq(e, &e->replicas[d], q, "pe_seq_append", &err);
    else
        en_seq_free(q);
    if (s != PE_OK) {
        en_kept_untake(e, id);
        return en_error(e, s, &err);
    }
    return PE_OK;
}

pe_status pe_seq_release(pe_engine *e, uint64_t id)
{
    if (!e) {
        pe_set_last_error("pe_seq_release: engine is NULL");
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    en_cancel *m = malloc(sizeof *m); /* first: a taken sequence must reach its replica */
    if (!m) {
        pe_fail(&err, PE_ENOMEM, "pe_seq_release: out of host memory");
        return en_error(e, PE_ENOMEM, &err);
    }
    int d = 0, parked = 0;
    pe_status s = e->decoder ? en_kept_take_for_release(e, id, &d, &parked, &err)
                             : pe_fail(&err, PE_EINVAL, "pe_seq_release: no decoder is loaded");
    if (s != PE_OK || !parked) { /* !parked: it ended with an error, nothing is held */
        free(m);
        return s == PE_OK ? PE_OK : en_error(e, s, &err);
    }
    m->hdr.kind = EN_MSG_RELEASE;
    m->id = id;
    if (rt_queue_push(e->replicas[d].inbox, m) != PE_OK)
        free(m); /* shutting down: the replica frees it anyway */
    return PE_OK;
}

pe_status pe_seq_cancel(pe_engine *e, uint64_t id)
{
    if (!e) {
        pe_set_last_error("pe_seq_cancel: engine is NULL");
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    if (!e->decoder || id >= atomic_load(&e->next_seq)) {
        pe_fail(&err, PE_EINVAL, "pe_seq_cancel: no sequence %llu was submitted to this engine",
                (unsigned long long)id);
        return en_error(e, PE_EINVAL, &err);
    }
    /* The sequence's replica is not recorded: every replica looks (dp is small). */
    for (int d = 0; d < e->dp; d++) {
        en_cancel *c = malloc(sizeof *c);
        if (!c) {
            pe_fail(&err, PE_ENOMEM, "pe_seq_cancel: out of host memory");
            return en_error(e, PE_ENOMEM, &err);
        }
        c->hdr.kind = EN_MSG_CANCEL;
        c->id = id;
        if (rt_queue_push(e->replicas[d].inbox, c) != PE_OK)
            free(c);
    }
    return PE_OK;
}

static pe_status take_event(pe_engine *e, pe_token_event *ev, int block, const char *call)
{
    if (!e || !ev) {
        pe_set_last_error(block ? "pe_seq_wait: engine and ev must not be NULL"
                                : "pe_seq_poll: engine and ev must not be NULL");
        return PE_EINVAL;
    }
    (void)call;
    if (!e->events_ready)
        return PE_EAGAIN;
    return en_events_take(&e->events, ev, block);
}

pe_status pe_seq_poll(pe_engine *e, pe_token_event *ev) { return take_event(e, ev, 0, "pe_seq_poll"); }
pe_status pe_seq_wait(pe_engine *e, pe_token_event *ev) { return take_event(e, ev, 1, "pe_seq_wait"); }

/* Why a score that reached its replica ended without logits. */
static pe_err *score_failure(pe_engine *e, pe_status s, size_t n, const char *call,
                             pe_err *err)
{
    if (s == PE_EAGAIN) {
        pe_fail(err, s, "%s: the KV pool has no room for %zu positions now and kv_full is "
                "PE_KV_REFUSE; retry when sequences have ended, or raise kv_tokens", call, n);
    } else if (s == PE_ENOMEM) {
        pe_fail(err, s, "%s: out of host memory queueing the prompt", call);
    } else {
        pthread_mutex_lock(&e->err_mu);
        pe_fail(err, s, "%s failed: %s", call,
                e->fail_err.msg[0] ? e->fail_err.msg : "the engine is shutting down");
        pthread_mutex_unlock(&e->err_mu);
    }
    return err;
}

/* What pe_score and pe_score_logprobs want of a prompt. */
typedef struct score_want {
    const char *call;
    int all_positions;
    float *logits;
    pe_logprobs *lp;
    int top;
} score_want;

/* Runs a scored prompt through a replica and waits for it. */
static pe_status score(pe_engine *e, const int32_t *tokens, size_t n, const score_want *w)
{
    pe_err err = {{0}};
    pe_status s = need_decoder(e, w->call, &err);
    if (s == PE_OK && (!tokens || n == 0 || !(w->logits || w->lp)))
        s = pe_fail(&err, PE_EINVAL, "%s: give at least one token and a buffer for the "
                    "results", w->call);
    if (s == PE_OK && (w->top < 0 || w->top > PE_MAX_LOGPROBS))
        s = pe_fail(&err, PE_EINVAL, "%s: top is %d; give 0 to %d most likely tokens",
                    w->call, w->top, PE_MAX_LOGPROBS);
    if (s == PE_OK && n > (size_t)e->dec.cfg.maxT)
        s = pe_fail(&err, PE_EINVAL, "%s: %zu tokens are more than the model's %d "
                    "positions", w->call, n, e->dec.cfg.maxT);
    if (s == PE_OK)
        s = check_tokens(e, tokens, n, w->call, &err);
    if (s != PE_OK)
        return en_error(e, s, &err);
    en_seq *q = seq_new(e, tokens, n, n);
    if (!q) {
        pe_fail(&err, PE_ENOMEM, "%s: out of host memory", w->call);
        return en_error(e, PE_ENOMEM, &err);
    }
    en_score_sync sync;
    atomic_init(&sync.done, 0);
    sync.status = PE_OK;
    RT_IGNORE_WORD(sync.done);
    q->id = EN_SCORE_ID; /* never handed out: pe_seq_cancel refuses it */
    q->score = 1;
    q->all_positions = w->all_positions;
    q->score_out = w->logits;
    q->score_lp = w->lp;
    q->score_top = w->top;
    q->sync = &sync;
    s = check_fits(e, q, w->call, &err);
    if (s != PE_OK) {
        en_seq_free(q);
        RT_UNIGNORE_WORD(sync.done);
        return en_error(e, s, &err);
    }
    en_replica *r = pick_replica(e, q);
    if (rt_queue_push(r->inbox, q) != PE_OK) {
        unroute(r, en_sched_blocks_needed(&e->sched_cfg, q));
        en_seq_free(q);
        sync.status = PE_ECLOSED;
    } else {
        pthread_mutex_lock(&e->sync_mu);
        while (!atomic_load_explicit(&sync.done, memory_order_acquire))
            pthread_cond_wait(&e->sync_cv, &e->sync_mu);
        pthread_mutex_unlock(&e->sync_mu); /* orders what emit() wrote before it set done */
    }
    RT_UNIGNORE_WORD(sync.done);
    if (sync.status != PE_OK)
        return en_error(e, sync.status, score_failure(e, sync.status, n, w->call, &err));
    return PE_OK;
}

pe_status pe_score(pe_engine *e, const int32_t *tokens, size_t n, int all_positions,
                   float *logits)
{
    if (!e) {
        pe_set_last_error("pe_score: engine is NULL");
        return PE_EINVAL;
    }
    const score_want w = {"pe_score", all_positions != 0, logits, NULL, 0};
    return score(e, tokens, n, &w);
}

pe_status pe_score_logprobs(pe_engine *e, const int32_t *tokens, size_t n, int top,
                            pe_logprobs *out)
{
    if (!e) {
        pe_set_last_error("pe_score_logprobs: engine is NULL");
        return PE_EINVAL;
    }
    const score_want w = {"pe_score_logprobs", 1, NULL, out, top};
    return score(e, tokens, n, &w);
}
