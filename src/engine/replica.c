/* replica.c: a decoder replica's thread. It feeds the scheduler (new sequences, cancels,
 * steps back from the workers), sends the next step to the replica's workers as soon as the
 * last one is back, and hands token events to the clients.
 *
 * The thread blocks only on its inbox: workers push finished steps into it, clients push
 * sequences and cancels. Events go to an unbounded FIFO, so a slow client never stalls it.
 * A failed engine or a stopping one ends every sequence (with the failure, or PE_ECLOSED)
 * once its step is back; a step's memory is the replica's and never freed while a worker
 * may touch it.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "runtime/annotate.h"

static const en_msg en_wake_msg = {EN_MSG_WAKE};

/* The scheduler's counts (pe_engine_info). */
static void publish_counts(en_replica *r)
{
    atomic_store_explicit(&r->preemptions, r->sched.preemptions, memory_order_relaxed);
    atomic_store_explicit(&r->prefix_hit_tokens, r->sched.prefix_hit_tokens,
                          memory_order_relaxed);
    atomic_store_explicit(&r->prefix_asked_tokens, r->sched.prefix_asked_tokens,
                          memory_order_relaxed);
    atomic_store_explicit(&r->spec_drafted, r->sched.spec_drafted, memory_order_relaxed);
    atomic_store_explicit(&r->spec_accepted, r->sched.spec_accepted, memory_order_relaxed);
}

/* The scheduler's events: to pe_score's waiter, or to the clients' FIFO. */
static pe_status emit(void *ctx, en_seq *seq, const pe_token_event *ev)
{
    en_replica *r = ctx;
    pe_engine *e = r->e;
    if (ev->finish != PE_FINISH_NONE) /* a client that saw its end sees the counts with it */
        publish_counts(r);
    if (seq->tracked && ev->finish != PE_FINISH_NONE) { /* before the client sees the end */
        if (seq->keep) /* parked, or DEAD after an error until the client releases it */
            en_kept_ended(e, seq->id, en_sched_keeps(seq, ev), seq->ntok);
        else /* its last turn: kept no more */
            en_kept_forget(e, seq->id);
    }
    if (seq->score) {
        pthread_mutex_lock(&e->sync_mu);
        seq->sync->status = ev->finish == PE_FINISH_ERROR        ? ev->status
                            : ev->finish == PE_FINISH_CANCELLED ? PE_ECLOSED
                                                                : PE_OK;
        /* sync_mu orders this for the waiter; no annotation on sync, which lives on the
         * waiter's stack and DRD would keep as an order object after the frame is gone */
        atomic_store_explicit(&seq->sync->done, 1, memory_order_release);
        pthread_cond_broadcast(&e->sync_cv);
        pthread_mutex_unlock(&e->sync_mu);
        return PE_OK;
    }
    return en_events_push(&e->events, ev);
}

/* What the clients route by: the room and the sequences, now counting the ones taken in
 * since the last publish (no longer inbound). */
static void publish(en_replica *r)
{
    atomic_store_explicit(&r->room, en_sched_room(&r->sched) - en_sched_waiting_need(&r->sched),
                          memory_order_relaxed);
    atomic_store_explicit(&r->seqs, en_sched_sequences(&r->sched), memory_order_relaxed);
    atomic_store_explicit(&r->blocks_used, en_sched_blocks_held(&r->sched),
                          memory_order_relaxed);
    publish_counts(r);
    atomic_fetch_sub_explicit(&r->inbound_seqs, r->taken_seqs, memory_order_relaxed);
    atomic_fetch_sub_explicit(&r->inbound_blocks, r->taken_blocks, memory_order_relaxed);
    r->taken_seqs = r->taken_blocks = 0;
}

/* Whether a step holds prompt tokens (a chunk before its sequence's first generated one). */
static int holds_prompt(const en_step *st)
{
    for (int i = 0; i < st->nchunks; i++)
        if (st->chunks[i].pos0 < st->chunks[i].seq->prompt_len)
            return 1;
    return 0;
}

/* The step's labels in the trace: its number, its group, prefill or decode. */
static void label_step(en_replica *r, en_flight *f)
{
    f->step->number = r->steps++;
    f->step->group = (int)(f - r->flights);
    f->step->prefill = holds_prompt(f->step);
}

/* Sends the step to every worker of the replica: its stages (each runs its blocks, from the
 * previous stage's activations to the next's) and their TP ranks (each on its shard); the
 * last stage's rank 0 writes the results. A closed queue (the engine failed or is closing)
 * brings the step back with that status, once every worker that got it is back. */
static void dispatch(en_replica *r, en_flight *f)
{
    pe_engine *e = r->e;
    label_step(r, f);
    f->parts = 0;
    f->dispatch_status = PE_OK;
    for (int k = 0; k < e->pp * e->tp; k++) { /* stage by stage: each worker's queue is FIFO */
        en_worker *w = &e->workers[en_rank(e, r->d, k / e->tp, k % e->tp)];
        f->tasks[k] = (en_task){.kind = EN_TASK_STEP, .step = f->step};
        pe_status s = !en_procs_holds(&e->procs, w->rank) /* a worker of another process */
                          ? (atomic_load(&e->failed) != PE_OK
                                 ? PE_ECLOSED
                                 : en_procs_send_step(e, w, f->step))
                          : rt_queue_push(w->inq, &f->tasks[k]);
        if (s == PE_OK) {
            f->parts++;
            continue;
        }
        if (s != PE_ECLOSED) /* the step could not reach another process */
            en_fail(e, s, "process 0 could not send a step to another process (MPI_Send)");
        pe_status failed = atomic_load(&e->failed);
        f->dispatch_status = failed != PE_OK ? failed : PE_ECLOSED;
    }
    if (f->parts > 0) {
        f->out = 1;
        r->inflight++;
        return;
    }
    f->step->status = f->dispatch_status;
    en_sched_complete(&r->sched, f->step);
}

static en_flight *flight_of(en_replica *r, const en_step *st)
{
    for (int i = 0; i < r->nflights; i++)
        if (r->flights[i].step == st)
            return &r->flights[i];
    return NULL;
}

static en_flight *free_flight(en_replica *r)
{
    for (int i = 0; i < r->nflights; i++)
        if (!r->flights[i].out)
            return &r->flights[i];
    return NULL;
}

/* The flight the next step may take, or NULL. Steps stream into free flights as they come
 * back; under PE_SCHED_GPIPE they go in rounds instead: a round fills the flights (or takes
 * what there is), then drains, and the next starts when every step is back (fill-drain). */
static en_flight *next_flight(en_replica *r)
{
    en_flight *f = free_flight(r);
    if (r->e->cfg.schedule != PE_SCHED_GPIPE)
        return f;
    if (r->inflight == 0)
        r->round_open = 1;
    if (!f)
        r->round_open = 0;
    return r->round_open ? f : NULL;
}

/* A worker is back with a step; the last one completes it. */
static void step_back(en_replica *r, en_step *st)
{
    en_flight *f = flight_of(r, st);
    if (--f->parts > 0)
        return;
    f->out = 0;
    r->inflight--;
    if (st->status == PE_OK && f->dispatch_status != PE_OK)
        st->status = f->dispatch_status;
    en_sched_complete(&r->sched, st);
}

/* More tokens for a kept sequence; when the scheduler cannot take them, the append still
 * gets its one final event, an error (the sequence stays kept as it was, if it was). */
static void append(en_replica *r, en_seq *more)
{
    const uint64_t id = more->id;
    void *user = more->user;
    pe_status s = en_sched_append(&r->sched, more);
    if (s == PE_OK)
        return;
    en_kept_ended(r->e, id, s == PE_ENOMEM, en_kept_length(r->e, id));
    pe_token_event ev = {.seq = id, .token = -1, .finish = PE_FINISH_ERROR, .status = s,
                         .user = user};
    (void)en_events_push(&r->e->events, &ev); /* its slot was reserved at the append */
}

static void handle(en_replica *r, en_msg *m)
{
    switch (m->kind) {
    case EN_MSG_SEQ: /* routed here by a client (sequences.c, pick_replica) */
        r->taken_seqs++;
        r->taken_blocks += en_sched_blocks_needed(&r->sched.cfg, (const en_seq *)m);
        en_sched_add(&r->sched, (en_seq *)m);
        break;
    case EN_MSG_CANCEL:
        en_sched_cancel(&r->sched, ((en_cancel *)m)->id);
        free(m);
        break;
    case EN_MSG_STEP:
        step_back(r, (en_step *)m);
        break;
    case EN_MSG_APPEND:
        append(r, (en_seq *)m);
        break;
    case EN_MSG_RELEASE:
        en_sched_release(&r->sched, ((en_cancel *)m)->id);
        free(m);
        break;
    case EN_MSG_WAKE:
        break;
    }
}

/* One step from the tests' budget (en_allow_steps); always one when there is no limit. */
static int take_step(pe_engine *e)
{
    long b = atomic_load(&e->step_budget);
    while (b != 0)
        if (b < 0 || atomic_compare_exchange_weak(&e->step_budget, &b, b - 1))
            return 1;
    return 0;
}

static void give_back_step(pe_engine *e)
{
    long b = atomic_load(&e->step_budget);
    while (b >= 0 && !atomic_compare_exchange_weak(&e->step_budget, &b, b + 1))
        ;
}

static void *replica_main(void *arg)
{
    en_replica *r = arg;
    pe_engine *e = r->e;
    for (;;) {
        void *item = NULL;
        while (rt_queue_try_pop(r->inbox, &item) == PE_OK)
            handle(r, item);
        pe_status failed = atomic_load(&e->failed);
        int stop = atomic_load(&e->stopping);
        if (failed != PE_OK || stop)
            en_sched_end_all(&r->sched, failed != PE_OK ? failed : PE_ECLOSED);
        publish(r);
        if (stop && r->inflight == 0)
            break;
        en_flight *f = next_flight(r); /* PP: a step per stage, each on its own group */
        if (failed == PE_OK && !stop && f && take_step(e)) {
            int built = en_sched_build(&r->sched, f->step);
            if (built > 0) {
                dispatch(r, f);
                continue;
            }
            r->round_open = 0; /* nothing to add: the round drains */
            give_back_step(e);
            if (built < 0)
                en_fail(e, PE_ENOMEM, "out of host memory building a decoder step");
        }
        if (rt_queue_pop(r->inbox, &item) == PE_OK) /* wait for a step, a sequence, a wake */
            handle(r, item);
    }
    return NULL;
}

pe_status en_replicas_start(pe_engine *e, pe_err *err)
{
    e->replicas = calloc((size_t)e->dp, sizeof *e->replicas);
    if (!e->replicas)
        return pe_fail(err, PE_ENOMEM, "out of host memory for %d replicas", e->dp);
    size_t cap = e->cfg.queue_capacity ? e->cfg.queue_capacity : 1024;
    for (int d = 0; d < e->dp; d++) {
        en_replica *r = &e->replicas[d];
        r->e = e;
        r->d = d;
        atomic_init(&r->room, 0);
        atomic_init(&r->seqs, 0);
        atomic_init(&r->blocks_used, 0);
        atomic_init(&r->preemptions, 0);
        atomic_init(&r->prefix_hit_tokens, 0);
        atomic_init(&r->prefix_asked_tokens, 0);
        atomic_init(&r->spec_drafted, 0);
        atomic_init(&r->spec_accepted, 0);
        atomic_init(&r->inbound_seqs, 0);
        atomic_init(&r->inbound_blocks, 0);
        RT_IGNORE_WORD(r->room);
        RT_IGNORE_WORD(r->seqs);
        RT_IGNORE_WORD(r->blocks_used);
        RT_IGNORE_WORD(r->preemptions);
        RT_IGNORE_WORD(r->prefix_hit_tokens);
        RT_IGNORE_WORD(r->prefix_asked_tokens);
        RT_IGNORE_WORD(r->spec_drafted);
        RT_IGNORE_WORD(r->spec_accepted);
        RT_IGNORE_WORD(r->inbound_seqs);
        RT_IGNORE_WORD(r->inbound_blocks);
        r->nflights = e->sched_cfg.groups; /* a step buffer per group in flight */
        r->flights = calloc((size_t)r->nflights, sizeof *r->flights);
        for (int i = 0; r->flights && i < r->nflights; i++) {
            en_flight *f = &r->flights[i];
            f->step = calloc(1, sizeof *f->step);
            f->tasks = calloc((size_t)(e->pp * e->tp), sizeof *f->tasks);
            if (!f->step || !f->tasks)
                return pe_fail(err, PE_ENOMEM, "out of host memory for replica %d's steps", d);
            f->step->hdr.kind = EN_MSG_STEP;
        }
        if (!r->flights || en_sched_init(&r->sched, &e->sched_cfg, emit, r) != PE_OK ||
            rt_queue_create(cap, &r->inbox) != PE_OK)
            return pe_fail(err, PE_ENOMEM, "out of host memory for replica %d's scheduler", d);
        publish(r);
        if (pthread_create(&r->thread, NULL, replica_main, r) != 0)
            return pe_fail(err, PE_ENOMEM, "cannot start replica %d's scheduler thread", d);
        r->started = 1;
    }
    return PE_OK;
}

void en_replicas_wake(pe_engine *e)
{
    for (int d = 0; e->replicas && d < e->dp; d++)
        if (e->replicas[d].inbox) /* a full inbox will be looked at anyway */
            rt_queue_try_push(e->replicas[d].inbox, (void *)&en_wake_msg);
}

int en_replica_sequences(pe_engine *e, int d)
{
    en_replica *r = &e->replicas[d];
    return atomic_load(&r->seqs) + atomic_load(&r->inbound_seqs);
}

void en_allow_steps(pe_engine *e, long n)
{
    atomic_store(&e->step_budget, n < 0 ? -1 : n);
    en_replicas_wake(e);
}

void en_replicas_stop(pe_engine *e)
{
    if (!e->replicas)
        return;
    atomic_store(&e->stopping, 1);
    for (int d = 0; d < e->dp; d++) {
        en_replica *r = &e->replicas[d];
        if (!r->started)
            continue;
        rt_queue_push(r->inbox, (void *)&en_wake_msg);
        pthread_join(r->thread, NULL);
        r->started = 0;
    }
}

void en_replicas_free(pe_engine *e)
{
    if (!e->replicas)
        return;
    for (int d = 0; d < e->dp; d++) {
        en_replica *r = &e->replicas[d];
        void *item;
        while (r->inbox && rt_queue_try_pop(r->inbox, &item) == PE_OK) { /* after the stop */
            en_msg *m = item;
            if (m->kind == EN_MSG_SEQ || m->kind == EN_MSG_APPEND)
                en_seq_free((en_seq *)m);
            else if (m->kind == EN_MSG_CANCEL || m->kind == EN_MSG_RELEASE)
                free(m);
        }
        en_sched_free(&r->sched);
        rt_queue_destroy(r->inbox);
        for (int i = 0; r->flights && i < r->nflights; i++) {
            en_step_free(r->flights[i].step);
            free(r->flights[i].tasks);
        }
        free(r->flights);
        RT_UNIGNORE_WORD(r->room);
        RT_UNIGNORE_WORD(r->seqs);
        RT_UNIGNORE_WORD(r->blocks_used);
        RT_UNIGNORE_WORD(r->preemptions);
        RT_UNIGNORE_WORD(r->prefix_hit_tokens);
        RT_UNIGNORE_WORD(r->prefix_asked_tokens);
        RT_UNIGNORE_WORD(r->spec_drafted);
        RT_UNIGNORE_WORD(r->spec_accepted);
        RT_UNIGNORE_WORD(r->inbound_seqs);
        RT_UNIGNORE_WORD(r->inbound_blocks);
    }
    free(e->replicas);
    e->replicas = NULL;
}
