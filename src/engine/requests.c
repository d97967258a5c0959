/* requests.c: the client side: submit, poll, wait, infer, and completing a request.
 *
 * Every request accepted by pe_submit gets exactly one result: the last of its parts to
 * finish (or be dropped after a failure) pushes it to the out-queue. A permit queue
 * bounds the requests outstanding to the out-queue's capacity, so that push never waits.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "runtime/annotate.h"
#include "runtime/clock.h"
#include "runtime/park.h"

#define EN_PERMIT ((void *)1)

static en_request *request_new(pe_engine *e, const pe_request *q)
{
    const en_schedule *sc = e->sched;
    int m = (size_t)e->m < q->rows ? e->m : (int)q->rows;
    int ntasks = sc->ntasks(e, m);
    en_request *r = malloc(sizeof *r + (size_t)ntasks * sizeof(en_task));
    if (!r)
        return NULL;
    r->req = *q;
    r->replica = -1;
    r->m = m;
    r->sync = NULL;
    r->ntasks = ntasks;
    int parts = 0;
    for (int i = 0; i < ntasks; i++) {
        en_task *t = &r->tasks[i];
        memset(t, 0, sizeof *t);
        t->kind = sc->clocked ? EN_TASK_REQUEST : EN_TASK_MICROBATCH;
        t->req = r;
        t->mb = sc->clocked ? -1 : i / e->tp; /* dataflow: (m, tp), micro-batch major */
        parts += sc->parts_from(e, t, en_task_first_stage(e, i));
    }
    atomic_init(&r->remaining, parts);
    atomic_init(&r->status, PE_OK);
    RT_IGNORE_WORD(r->remaining);
    RT_IGNORE_WORD(r->status);
    return r;
}

void en_request_free(en_request *r)
{
    RT_UNIGNORE_WORD(r->remaining);
    RT_UNIGNORE_WORD(r->status);
    RT_HAPPENS_FORGET(&r->remaining);
    free(r);
}

void en_request_done(pe_engine *e, en_request *r, int parts, pe_status s)
{
    if (s != PE_OK) {
        pe_status ok = PE_OK;
        atomic_compare_exchange_strong(&r->status, &ok, s);
    }
    RT_HAPPENS_BEFORE(&r->remaining);
    if (atomic_fetch_sub_explicit(&r->remaining, parts, memory_order_acq_rel) != parts)
        return;
    RT_HAPPENS_AFTER(&r->remaining);
    if (r->replica >= 0)
        atomic_fetch_sub_explicit(&e->replica_load[r->replica], r->m, memory_order_relaxed);
    if (r->sync) {
        en_sync *sync = r->sync;
        pthread_mutex_lock(&e->sync_mu);
        /* sync_mu orders this for the waiter (no annotation on its stack: see replica.c) */
        atomic_store_explicit(&sync->done, 1, memory_order_release);
        pthread_cond_broadcast(&e->sync_cv); /* every pe_infer caller sleeps on it */
        pthread_mutex_unlock(&e->sync_mu);
        return;
    }
    if (rt_queue_push(e->outq, r) != PE_OK) /* closed: the engine is being destroyed */
        en_request_free(r);
}

/* Hands r to the router, or dispatches it on this thread when that keeps every queue's
 * order (see router.c). PE_ECLOSED when the engine is shutting down. */
static pe_status enqueue(pe_engine *e, en_request *r)
{
    if (!en_direct_dispatch(e))
        return rt_queue_push(e->inq, r);
    pe_status f = atomic_load(&e->failed);
    if (f != PE_OK)
        en_request_drop(e, r, f);
    else
        en_route(e, r);
    return PE_OK;
}

/* Spins a little before sleeping: a short forward completes in a few microseconds, and a
 * thread that parks pays a wake-up of about 10 us on these machines. */
#define EN_WAIT_SPIN_NS 30000u

static pe_status check_request(pe_engine *e, const pe_request *q, pe_err *err)
{
    if (!q || !q->input || !q->output)
        return pe_fail(err, PE_EINVAL, "request: input and output must not be NULL");
    if (q->rows == 0)
        return pe_fail(err, PE_EINVAL, "request %llu: rows is 0; send at least one row",
                       (unsigned long long)q->id);
    if (!e->loaded)
        return pe_fail(err, PE_EINVAL, "no model loaded: call pe_engine_load before submitting");
    if (e->decoder)
        return pe_fail(err, PE_EINVAL, "the loaded model is a decoder, which runs sequences "
                       "(pe_seq_submit, pe_score), not rows");
    return PE_OK;
}

static pe_status submit(pe_engine *e, const pe_request *q, int block)
{
    if (!e) {
        pe_set_last_error("engine is NULL");
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    pe_status s = check_request(e, q, &err);
    if (s != PE_OK)
        return en_error(e, s, &err);
    void *permit = NULL;
    s = block ? rt_queue_pop(e->permits, &permit) : rt_queue_try_pop(e->permits, &permit);
    if (s == PE_EAGAIN) {
        pe_fail(&err, s, "%zu requests are outstanding (the queue capacity); take results "
                         "with pe_poll/pe_wait, or submit with pe_submit to wait",
                rt_queue_capacity(e->permits));
        return en_error(e, s, &err);
    }
    if (s != PE_OK) {
        pe_fail(&err, PE_ECLOSED, "the engine is shutting down");
        return en_error(e, PE_ECLOSED, &err);
    }
    en_request *r = request_new(e, q);
    if (!r) {
        rt_queue_push(e->permits, permit);
        pe_fail(&err, PE_ENOMEM, "out of host memory for request %llu",
                (unsigned long long)q->id);
        return en_error(e, PE_ENOMEM, &err);
    }
    atomic_fetch_add(&e->outstanding, 1);
    s = enqueue(e, r);
    if (s != PE_OK) {
        atomic_fetch_sub(&e->outstanding, 1);
        rt_queue_push(e->permits, permit);
        en_request_free(r);
        pe_fail(&err, PE_ECLOSED, "the engine is shutting down");
        return en_error(e, PE_ECLOSED, &err);
    }
    return PE_OK;
}

pe_status pe_submit(pe_engine *e, const pe_request *r) { return submit(e, r, 1); }
pe_status pe_try_submit(pe_engine *e, const pe_request *r) { return submit(e, r, 0); }

static void take_result(pe_engine *e, en_request *r, pe_result *out)
{
    out->id = r->req.id;
    out->status = atomic_load(&r->status);
    out->user = r->req.user;
    en_request_free(r);
    atomic_fetch_sub(&e->outstanding, 1);
    rt_queue_push(e->permits, EN_PERMIT);
}

pe_status pe_poll(pe_engine *e, pe_result *out)
{
    if (!e || !out) {
        pe_set_last_error("pe_poll: engine and out must not be NULL");
        return PE_EINVAL;
    }
    void *item = NULL;
    pe_status s = rt_queue_try_pop(e->outq, &item);
    if (s != PE_OK)
        return s; /* PE_EAGAIN: nothing ready (not an error worth a message) */
    take_result(e, item, out);
    return PE_OK;
}

pe_status pe_wait(pe_engine *e, pe_result *out)
{
    if (!e || !out) {
        pe_set_last_error("pe_wait: engine and out must not be NULL");
        return PE_EINVAL;
    }
    if (atomic_load(&e->outstanding) == 0)
        return PE_EAGAIN;
    void *item = NULL;
    pe_status s = PE_EAGAIN;
    for (uint64_t until = rt_now_ns() + EN_WAIT_SPIN_NS; s == PE_EAGAIN && rt_now_ns() < until;)
        if ((s = rt_queue_try_pop(e->outq, &item)) == PE_EAGAIN)
            rt_cpu_relax();
    if (s == PE_EAGAIN)
        s = rt_queue_pop(e->outq, &item);
    if (s != PE_OK)
        return s;
    take_result(e, item, out);
    return PE_OK;
}

pe_status pe_infer(pe_engine *e, const float *in, size_t rows, float *out)
{
    if (!e) {
        pe_set_last_error("engine is NULL");
        return PE_EINVAL;
    }
    pe_request q = {.id = 0, .rows = rows, .input = in, .output = out, .user = NULL};
    pe_err err = {{0}};
    pe_status s = check_request(e, &q, &err);
    if (s != PE_OK)
        return en_error(e, s, &err);
    en_request *r = request_new(e, &q);
    if (!r) {
        pe_fail(&err, PE_ENOMEM, "out of host memory for a request");
        return en_error(e, PE_ENOMEM, &err);
    }
    en_sync sync;
    atomic_init(&sync.done, 0);
    RT_IGNORE_WORD(sync.done);
    r->sync = &sync;
    s = enqueue(e, r);
    if (s == PE_OK) {
        uint64_t until = rt_now_ns() + EN_WAIT_SPIN_NS;
        while (!atomic_load_explicit(&sync.done, memory_order_acquire) && rt_now_ns() < until)
            rt_cpu_relax();
        /* Taken even when the spin saw done: the completer may still hold it, and our
         * stack (sync) must outlive its last access. */
        pthread_mutex_lock(&e->sync_mu);
        while (!atomic_load_explicit(&sync.done, memory_order_acquire))
            pthread_cond_wait(&e->sync_cv, &e->sync_mu);
        pthread_mutex_unlock(&e->sync_mu);
        s = atomic_load(&r->status);
    } else {
        s = PE_ECLOSED;
    }
    en_request_free(r);
    RT_UNIGNORE_WORD(sync.done);
    if (s != PE_OK) {
        pthread_mutex_lock(&e->err_mu);
        pe_fail(&err, s, "inference failed: %s",
                e->fail_err.msg[0] ? e->fail_err.msg : "the engine is shutting down");
        pthread_mutex_unlock(&e->err_mu);
        return en_error(e, s, &err);
    }
    return PE_OK;
}
