/* scheduler_internal.h: what the scheduler's files share; scheduler.h is its interface.
 *   scheduler.c       sequences, the waiting queue, promise admission, endings
 *   scheduler_kv.c    PE_KV_PREEMPT: admission on the blocks free now, preemption, drafts'
 *                     blocks, the prefix cache's registrations
 *   scheduler_step.c  building a step (its chunks and meta), taking it back (tokens, events)
 *   step_meta.c       a step's buffers and the layout of its meta
 */
#ifndef PE_ENGINE_SCHEDULER_INTERNAL_H
#define PE_ENGINE_SCHEDULER_INTERNAL_H

#include "engine/scheduler.h"

/* PE_KV_PREEMPT: blocks are taken when there are some, not promised. */
static inline int en_sched_optimistic(const en_sched *s)
{
    return s->cfg.kv_full == PE_KV_PREEMPT;
}

/* Blocks that hold `positions` positions. */
static inline int en_sched_ceil_blocks(const en_sched *s, int positions)
{
    return (positions + s->cfg.block_tokens - 1) / s->cfg.block_tokens;
}

/* Grows a buffer of *cap elements of size sz to at least want; -1 when out of memory. */
int en_grow(void **p, int *cap, int want, size_t sz);

/* ---- scheduler.c ---- */
/* Lets seq's blocks go, and its promise. */
void en_sched_return_blocks(en_sched *s, en_seq *seq);
/* Takes seq out of running and emits ev, its final event; frees or parks it. */
void en_sched_finish(en_sched *s, en_seq *seq, const pe_token_event *ev);
/* seq's event with no token, finish_reason and st. */
pe_token_event en_sched_event_of(const en_seq *seq, pe_finish finish_reason, pe_status st);
/* en_sched_finish with en_sched_event_of(seq, why, st). */
void en_sched_end_with(en_sched *s, en_seq *seq, pe_finish why, pe_status st);
/* The k-th waiting sequence; taking it out of the queue; a sequence put first in it. */
en_seq *en_sched_waiting_at(const en_sched *s, int k);
void en_sched_waiting_remove(en_sched *s, int k);
int en_sched_waiting_push_front(en_sched *s, en_seq *seq);
/* Admits waiting sequences, first come first served. */
void en_sched_admit(en_sched *s);

/* ---- scheduler_kv.c (PE_KV_PREEMPT) ---- */
void en_sched_admit_optimistic(en_sched *s);
/* Blocks for running sequence *i to cover positions up to end: the end it covers (less for
 * a cut prefill chunk), -1 when it preempted itself, -2 when out of host memory. */
int en_sched_take_optimistic(en_sched *s, en_step *st, int *i, int pos0, int end);
/* Blocks for seq's drafts at positions from..: how many drafts they cover; -1: no memory. */
int en_sched_take_draft_blocks(en_sched *s, en_seq *seq, int from, int draft);
/* Registers seq's computed full blocks in the prefix cache, in order from its first. */
void en_sched_register_blocks(en_sched *s, en_seq *seq);

#endif
