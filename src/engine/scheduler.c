/* scheduler.c: one replica's scheduler (scheduler.h): its sequences, the waiting queue,
 * admission on promises, and how sequences end. PE_KV_PREEMPT's admission and preemption
 * are in scheduler_kv.c, the steps in scheduler_step.c (scheduler_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler_internal.h"

void en_seq_free(en_seq *seq)
{
    if (!seq)
        return;
    free(seq->tokens);
    free(seq->blocks);
    free(seq->bias);
    free(seq->last_mask);
    en_counts_free(&seq->counts);
    free(seq);
}


/* ---- life cycle ---------------------------------------------------------------------------- */

pe_status en_sched_init(en_sched *s, const en_sched_config *cfg, en_emit_fn emit, void *ctx)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->emit = emit;
    s->emit_ctx = ctx;
    const int caching = cfg->kv_full == PE_KV_PREEMPT && cfg->prefix_caching;
    s->running = malloc((size_t)(cfg->max_seqs > 0 ? cfg->max_seqs : 1) * sizeof *s->running);
    if (!s->running || en_kv_init(&s->kv, cfg->nblocks, cfg->block_tokens, caching) != PE_OK) {
        free(s->running);
        memset(s, 0, sizeof *s);
        return PE_ENOMEM;
    }
    return PE_OK;
}

void en_sched_free(en_sched *s)
{
    en_kv_free(&s->kv);
    free(s->running);
    free(s->waiting);
    memset(s, 0, sizeof *s);
}

int en_sched_blocks_needed(const en_sched_config *cfg, const en_seq *seq)
{
    long positions = seq->ntok;
    if (!seq->score) { /* the last token of a sequence is never fed back */
        long total = (long)seq->prompt_len + seq->max_tokens;
        positions = (total < cfg->context ? total : cfg->context) - 1;
        if (positions < seq->prompt_len)
            positions = seq->prompt_len;
    }
    return (int)((positions + cfg->block_tokens - 1) / cfg->block_tokens);
}

int en_sched_room(const en_sched *s)
{
    return en_sched_optimistic(s) ? en_kv_available(&s->kv) : s->cfg.nblocks - s->promised;
}

int en_sched_blocks_held(const en_sched *s) { return en_kv_held(&s->kv); }

int en_sched_sequences(const en_sched *s) { return s->nwaiting + s->nrunning; }

/* ---- ending a sequence ------------------------------------------------------------------ */

/* Lets seq's blocks go (its last first: a cached chain is evicted from its tail), and its
 * promise. */
void en_sched_return_blocks(en_sched *s, en_seq *seq)
{
    for (int i = seq->nblocks - 1; i >= 0; i--)
        en_kv_put(&s->kv, seq->blocks[i]);
    seq->nblocks = 0;
    seq->nreg = 0;
    s->promised -= seq->promised;
    seq->promised = 0;
}

int en_sched_keeps(const en_seq *seq, const pe_token_event *ev)
{
    return seq->keep && !seq->score && (ev->finish != PE_FINISH_ERROR || ev->status == PE_EAGAIN);
}

/* Takes seq out of running, emits ev (its final event), and frees it with its blocks, or
 * parks it with them (a kept sequence: its promise shrinks to the blocks it holds). */
void en_sched_finish(en_sched *s, en_seq *seq, const pe_token_event *ev)
{
    const int keep = en_sched_keeps(seq, ev);
    if (keep && !en_sched_optimistic(s)) {
        s->promised -= seq->promised - seq->nblocks;
        seq->promised = seq->nblocks;
    } else if (!keep) {
        en_sched_return_blocks(s, seq);
    }
    for (int i = 0; i < s->nrunning; i++)
        if (s->running[i] == seq) {
            memmove(&s->running[i], &s->running[i + 1],
                    (size_t)(s->nrunning - i - 1) * sizeof *s->running);
            s->nrunning--;
            break;
        }
    (void)s->emit(s->emit_ctx, seq, ev); /* a final event is always delivered */
    if (keep) {
        seq->parked_next = s->parked;
        s->parked = seq;
    } else {
        en_seq_free(seq);
    }
}

/* Takes the parked sequence id off the list; NULL when none. */
static en_seq *unpark(en_sched *s, uint64_t id)
{
    for (en_seq **p = &s->parked; *p; p = &(*p)->parked_next)
        if ((*p)->id == id) {
            en_seq *seq = *p;
            *p = seq->parked_next;
            seq->parked_next = NULL;
            return seq;
        }
    return NULL;
}

pe_status en_sched_release(en_sched *s, uint64_t id)
{
    en_seq *seq = unpark(s, id);
    if (!seq)
        return PE_EINVAL;
    en_sched_return_blocks(s, seq);
    en_seq_free(seq);
    return PE_OK;
}

pe_token_event en_sched_event_of(const en_seq *seq, pe_finish finish_reason, pe_status st)
{
    pe_token_event ev;
    memset(&ev, 0, sizeof ev);
    ev.seq = seq->id;
    ev.token = -1;
    ev.index = seq->generated;
    ev.finish = finish_reason;
    ev.status = st;
    ev.user = seq->user;
    return ev;
}

void en_sched_end_with(en_sched *s, en_seq *seq, pe_finish why, pe_status st)
{
    pe_token_event ev = en_sched_event_of(seq, why, st);
    en_sched_finish(s, seq, &ev);
}

/* ---- the waiting queue -------------------------------------------------------------------- */

static int waiting_push(en_sched *s, en_seq *seq)
{
    if (s->nwaiting == s->waiting_cap) {
        int cap = s->waiting_cap ? 2 * s->waiting_cap : 16;
        en_seq **v = malloc((size_t)cap * sizeof *v);
        if (!v)
            return -1;
        for (int i = 0; i < s->nwaiting; i++)
            v[i] = s->waiting[(s->waiting_head + i) % s->waiting_cap];
        free(s->waiting);
        s->waiting = v;
        s->waiting_cap = cap;
        s->waiting_head = 0;
    }
    s->waiting[(s->waiting_head + s->nwaiting) % s->waiting_cap] = seq;
    s->nwaiting++;
    return 0;
}

static en_seq *waiting_front(const en_sched *s)
{
    return s->nwaiting ? s->waiting[s->waiting_head] : NULL;
}

static void waiting_pop(en_sched *s)
{
    s->waiting_head = (s->waiting_head + 1) % s->waiting_cap;
    s->nwaiting--;
}

/* The k-th waiting sequence (k < nwaiting). */
en_seq *en_sched_waiting_at(const en_sched *s, int k)
{
    return s->waiting[(s->waiting_head + k) % s->waiting_cap];
}

/* Takes the k-th waiting sequence out of the queue, the others keeping their order. */
void en_sched_waiting_remove(en_sched *s, int k)
{
    for (int i = k; i > 0; i--) /* the k before it move back by one */
        s->waiting[(s->waiting_head + i) % s->waiting_cap] =
            s->waiting[(s->waiting_head + i - 1) % s->waiting_cap];
    waiting_pop(s);
}

/* Puts seq first in the queue (a preempted sequence: it came before those waiting). */
int en_sched_waiting_push_front(en_sched *s, en_seq *seq)
{
    if (waiting_push(s, seq) != 0)
        return -1;
    for (int i = s->nwaiting - 1; i > 0; i--) /* rotate it from the back to the front */
        s->waiting[(s->waiting_head + i) % s->waiting_cap] =
            s->waiting[(s->waiting_head + i - 1) % s->waiting_cap];
    s->waiting[s->waiting_head] = seq;
    return 0;
}

/* Blocks seq's admission adds to the promises: its need, less what it holds (an append).
 * PE_KV_PREEMPT: the blocks of its known tokens it does not hold (before the prefix cache). */
static int admission_need(const en_sched *s, const en_seq *seq)
{
    if (en_sched_optimistic(s))
        return en_sched_ceil_blocks(s, seq->ntok) - seq->nblocks;
    return en_sched_blocks_needed(&s->cfg, seq) - seq->promised;
}

/* Blocks promised to the waiting sequences ahead, if they were all admitted. */
int en_sched_waiting_need(const en_sched *s)
{
    int need = 0;
    for (int i = 0; i < s->nwaiting; i++)
        need += admission_need(s, s->waiting[(s->waiting_head + i) % s->waiting_cap]);
    return need;
}

void en_sched_add(en_sched *s, en_seq *seq)
{
    if (s->cfg.kv_full == PE_KV_REFUSE &&
        admission_need(s, seq) > en_sched_room(s) - en_sched_waiting_need(s)) {
        en_sched_end_with(s, seq, PE_FINISH_ERROR, PE_EAGAIN);
        return;
    }
    if (waiting_push(s, seq) != 0)
        en_sched_end_with(s, seq, PE_FINISH_ERROR, PE_ENOMEM);
}

pe_status en_sched_append(en_sched *s, en_seq *more)
{
    en_seq *seq = unpark(s, more->id);
    pe_status st = seq && seq->ntok + more->ntok < s->cfg.context ? PE_OK : PE_EINVAL;
    int cap = seq ? seq->ntok + more->ntok + more->max_tokens : 0;
    cap = cap < s->cfg.context ? cap : s->cfg.context;
    int32_t *t = st == PE_OK ? realloc(seq->tokens, (size_t)cap * sizeof *t) : NULL;
    if (st == PE_OK && !t)
        st = PE_ENOMEM;
    if (st != PE_OK) { /* not parked, past the context, or out of memory */
        if (seq) {
            seq->parked_next = s->parked; /* still kept, as it was */
            s->parked = seq;
        }
        en_seq_free(more);
        return st;
    }
    seq->tokens = t;
    memcpy(seq->tokens + seq->ntok, more->tokens, (size_t)more->ntok * sizeof *t);
    seq->ntok += more->ntok;
    seq->cap = cap;
    seq->prompt_len = seq->ntok;
    seq->generated = 0;
    seq->max_tokens = more->max_tokens;
    seq->min_tokens = more->min_tokens;
    seq->sampling = more->sampling;
    free(seq->bias); /* the new generation's */
    seq->bias = more->bias;
    seq->nbias = more->nbias;
    more->bias = NULL;
    seq->logprobs = more->logprobs;
    memcpy(seq->stop, more->stop, sizeof seq->stop);
    seq->nstop = more->nstop;
    seq->ignore_eos = more->ignore_eos;
    seq->grammar = more->grammar;
    seq->gstate = more->gstate;
    seq->last_made = 0; /* (the last generation's grammar's) */
    seq->keep = more->keep;
    seq->user = more->user;
    seq->cancelled = 0;
    seq->ending = PE_OK;
    en_seq_free(more);
    en_sched_add(s, seq);
    return PE_OK;
}

void en_sched_cancel(en_sched *s, uint64_t id)
{
    for (int i = 0; i < s->nwaiting; i++) {
        en_seq *seq = s->waiting[(s->waiting_head + i) % s->waiting_cap];
        if (seq->id != id)
            continue;
        for (int j = i; j + 1 < s->nwaiting; j++) /* close the gap, order kept */
            s->waiting[(s->waiting_head + j) % s->waiting_cap] =
                s->waiting[(s->waiting_head + j + 1) % s->waiting_cap];
        s->nwaiting--;
        en_sched_end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        return;
    }
    for (int i = 0; i < s->nrunning; i++) {
        en_seq *seq = s->running[i];
        if (seq->id != id)
            continue;
        seq->cancelled = 1;
        if (!seq->busy)
            en_sched_end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        return;
    }
}

void en_sched_end_all(en_sched *s, pe_status why)
{
    while (s->parked) {
        en_seq *seq = unpark(s, s->parked->id);
        en_sched_return_blocks(s, seq);
        en_seq_free(seq);
    }
    while (s->nwaiting) {
        en_seq *seq = waiting_front(s);
        waiting_pop(s);
        en_sched_end_with(s, seq, PE_FINISH_ERROR, why);
    }
    for (int i = s->nrunning - 1; i >= 0; i--) {
        if (s->running[i]->busy)
            s->running[i]->ending = why; /* ends when its step comes back */
        else
            en_sched_end_with(s, s->running[i], PE_FINISH_ERROR, why);
    }
}

/* Admits waiting sequences, first come first served, while their promise fits. */
void en_sched_admit(en_sched *s)
{
    if (en_sched_optimistic(s)) {
        en_sched_admit_optimistic(s);
        return;
    }
    while (s->nwaiting && s->nrunning < s->cfg.max_seqs) {
        en_seq *seq = waiting_front(s);
        int need = admission_need(s, seq);
        if (need > en_sched_room(s))
            break;
        waiting_pop(s);
        seq->promised += need;
        s->promised += need;
        s->running[s->nrunning++] = seq;
    }
}

int en_sched_has_work(const en_sched *s)
{
    for (int i = 0; i < s->nrunning; i++) {
        const en_seq *seq = s->running[i];
        if (!seq->busy || (!seq->score && seq->cached + seq->inflight < seq->ntok))
            return 1;
    }
    return s->nwaiting > 0 && s->nrunning < s->cfg.max_seqs &&
           admission_need(s, waiting_front(s)) <= en_sched_room(s);
}

