/* stage_worker.c: what one worker does with its tasks: open its device, upload its
 * shards, and run micro-batches through its stage (recv -> layers -> send or write out).
 *
 * Runs on the worker's own thread (rt_worker callbacks); touches only its own device.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "runtime/clock.h"

/* Counts one more worker done with set-up or load, for the thread waiting on e->cv. */
static void count_done(pe_engine *e, int *counter)
{
    pthread_mutex_lock(&e->mu);
    (*counter)++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

pe_status en_worker_setup(void *ctx, pe_err *err)
{
    en_worker *w = ctx;
    pe_engine *e = w->e;
    pe_status s = e->ops->open(w->device_id, &w->dev, err);
    /* A bound worker's device computes with the cores of its binding (the plan gave it
     * cfg.threads); an unbound one with every core unless cfg.threads says otherwise. */
    if (s == PE_OK && !e->topo && e->cfg.threads > 0 && e->ops->set_compute_threads) {
        s = e->ops->set_compute_threads(w->dev, e->cfg.threads);
        if (s != PE_OK) { /* a failed setup undoes itself */
            pe_fail(err, s, "worker %d: %s", w->rank, e->ops->last_error(w->dev));
            e->ops->close(w->dev);
            w->dev = NULL;
        }
    }
    if (s == PE_OK && e->ops->compute_threads)
        w->threads = e->ops->compute_threads(w->dev);
    count_done(e, &e->setup_done);
    return s;
}

static void free_buffers(en_worker *w)
{
    const be_ops *ops = w->e->ops;
    if (w->in_buf)
        ops->free(w->dev, w->in_buf);
    for (int i = 0; i < EN_SEND_SLOTS; i++)
        if (w->out_buf[i])
            ops->free(w->dev, w->out_buf[i]);
    w->in_buf = NULL;
    memset(w->out_buf, 0, sizeof w->out_buf);
    md_scratch_free(ops, w->dev, &w->scratch);
    w->rows_cap = 0;
}

void en_worker_teardown(void *ctx)
{
    en_worker *w = ctx;
    if (!w->dev)
        return;
    const be_ops *ops = w->e->ops;
    ops->synchronize(w->dev); /* sends still in flight read our buffers */
    free_buffers(w);
    md_stage_free(ops, w->dev, &w->stage);
    en_decoder_unload(w);
    ops->close(w->dev);
    w->dev = NULL;
}

/* Waits for in-flight sends, so every output slot may be written again. */
static pe_status drain_sends(en_worker *w, pe_err *err)
{
    pe_status s = w->e->ops->synchronize(w->dev);
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d: synchronize: %s", w->rank,
                       w->e->ops->last_error(w->dev));
    memset(w->out_pending, 0, sizeof w->out_pending);
    return PE_OK;
}

/* Buffers for micro-batches of up to rows rows; grows by doubling. */
static pe_status reserve_rows(en_worker *w, size_t rows, pe_err *err)
{
    if (rows <= w->rows_cap)
        return PE_OK;
    pe_engine *e = w->e;
    const be_ops *ops = e->ops;
    size_t cap = w->rows_cap * 2 > rows ? w->rows_cap * 2 : rows;
    pe_status s = drain_sends(w, err);
    if (s != PE_OK)
        return s;
    free_buffers(w);
    void *p = NULL;
    s = ops->alloc(w->dev, cap * w->stage.in * sizeof(float), &p);
    w->in_buf = p;
    for (int i = 0; s == PE_OK && i < EN_SEND_SLOTS; i++) {
        s = ops->alloc(w->dev, cap * w->stage.out * sizeof(float), &p);
        w->out_buf[i] = s == PE_OK ? p : NULL;
    }
    if (s == PE_OK)
        s = md_scratch_reserve(ops, w->dev, &w->stage, e->tp, cap, &w->scratch);
    if (s != PE_OK) {
        free_buffers(w);
        return pe_fail(err, s, "worker %d (device %d): no memory for %zu-row activations: %s",
                       w->rank, w->device_id, cap, ops->last_error(w->dev));
    }
    w->rows_cap = cap;
    return PE_OK;
}

static pe_status load_shards(en_worker *w, pe_err *err)
{
    pe_engine *e = w->e;
    int first = e->stage_first[w->p], last = e->stage_first[w->p + 1];
    pe_status s = md_stage_build(e->ops, w->dev, &e->model, first, last,
                                 e->layer_kinds + first, w->t, e->tp, e->cfg.dtype, w->dp_comm,
                                 &w->stage, err); /* replica 0 uploads, the others receive */
    if (s == PE_OK)
        s = reserve_rows(w, 64, err);
    return s;
}

/* Rows [*first, *first + *rows) of r belong to micro-batch mb (balanced split). */
static void microbatch_rows(const en_request *r, int mb, size_t *first, size_t *rows)
{
    size_t base = r->req.rows / (size_t)r->m, rem = r->req.rows % (size_t)r->m;
    size_t i = (size_t)mb;
    *first = i * base + (i < rem ? i : rem);
    *rows = base + (i < rem ? 1 : 0);
}

static void collective_hook(void *ctx, uint64_t start, uint64_t end)
{
    en_worker *w = ctx;
    en_trace_record(w, PE_TRACE_COLLECTIVE, NULL, -1, start, end);
}

pe_status en_stage_run(en_worker *w, const en_request *r, int mb, pe_err *err)
{
    pe_engine *e = w->e;
    const be_ops *ops = e->ops;
    size_t first, rows;
    microbatch_rows(r, mb, &first, &rows);
    pe_status s = reserve_rows(w, rows, err);
    if (s != PE_OK)
        return s;
    const char *what = "";
    uint64_t t0 = rt_now_ns();
    if (w->p == 0) {
        what = "copy of the input to the device";
        s = ops->copy_h2d(w->dev, w->in_buf, r->req.input + first * w->stage.in,
                          rows * w->stage.in * sizeof(float));
    } else {
        what = "recv from the previous stage";
        s = ops->recv(w->world_comm, w->in_buf, rows * w->stage.in,
                      en_rank(e, w->d, w->p - 1, w->t));
        en_trace_record(w, PE_TRACE_RECV, r, mb, t0, rt_now_ns());
    }
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d (stage %d): %s failed: %s", w->rank, w->p, what,
                       ops->last_error(w->dev));

    int slot = w->next_slot;
    w->next_slot = (slot + 1) % EN_SEND_SLOTS;
    if (w->out_pending[slot] && (s = drain_sends(w, err)) != PE_OK)
        return s;
    float *y = w->out_buf[slot];
    md_hooks hooks = {rt_now_ns, collective_hook, w};
    t0 = rt_now_ns();
    s = md_stage_forward(ops, w->dev, w->tp_comm, e->tp, &w->stage, &w->scratch, w->in_buf, y,
                         rows, &hooks);
    en_trace_record(w, PE_TRACE_COMPUTE, r, mb, t0, rt_now_ns());
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d (stage %d): forward of layers %d..%d failed: %s",
                       w->rank, w->p, w->stage.first, w->stage.last - 1,
                       ops->last_error(w->dev));

    if (w->p + 1 < e->pp) {
        t0 = rt_now_ns();
        s = ops->send(w->world_comm, y, rows * w->stage.out, en_rank(e, w->d, w->p + 1, w->t));
        w->out_pending[slot] = 1;
        en_trace_record(w, PE_TRACE_SEND, r, mb, t0, rt_now_ns());
        what = "send to the next stage";
    } else if (w->t == 0) {
        s = ops->copy_d2h(w->dev, r->req.output + first * w->stage.out, y,
                          rows * w->stage.out * sizeof(float));
        what = "copy of the output to the host";
    }
    if (s != PE_OK)
        return pe_fail(err, s, "worker %d (stage %d): %s failed: %s", w->rank, w->p, what,
                       ops->last_error(w->dev));
    return PE_OK;
}

pe_status en_worker_run(void *ctx, void *task, pe_err *err)
{
    en_worker *w = ctx;
    pe_engine *e = w->e;
    en_task *t = task;
    if (t->kind == EN_TASK_LOAD) {
        pe_status s = e->decoder ? en_decoder_load(w, err) : load_shards(w, err);
        count_done(e, &e->load_done);
        return s;
    }
    pe_status failed = atomic_load(&e->failed);
    if (failed != PE_OK) {
        en_worker_cancel(w, t, failed);
        return PE_OK;
    }
    if (w->fail_at_task && ++w->tasks_run == w->fail_at_task) {
        pe_status s = pe_fail(err, PE_EDEVICE, "worker %d: injected failure at task %ld "
                              "(test hook)", w->rank, w->fail_at_task);
        if (t->kind == EN_TASK_STEP) {
            en_fail(e, s, err->msg);
            en_decoder_step_dropped(w, t->step, s);
        } else {
            en_task_end(e, t, w->p, s);
        }
        return s;
    }
    if (t->kind == EN_TASK_STEP)
        return en_decoder_step(w, t->step, err);
    pe_status s = e->sched->run(w, t, err); /* a dataflow task may move on to the next stage */
    en_task_end(e, t, w->p, s);              /* then this stage's part of it ends */
    return s;
}

void en_worker_cancel(void *ctx, void *task, pe_status why)
{
    en_worker *w = ctx;
    en_task *t = task;
    if (t->kind == EN_TASK_LOAD) { /* the loader waits for every worker's answer */
        count_done(w->e, &w->e->load_done);
        return;
    }
    if (t->kind == EN_TASK_STEP) {
        en_decoder_step_dropped(w, t->step, why);
        return;
    }
    en_task_end(w->e, t, w->p, why);
}

void en_worker_on_failure(void *ctx, int index, pe_status s, const pe_err *err)
{
    en_worker *w = ctx;
    en_fail(w->e, s, err->msg);
}
