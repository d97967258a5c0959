/* schedule.c: the dataflow (naive, stream) and clocked (gpipe) schedules of schedule.h. */
#include "engine/schedule.h"

#include "engine/engine_internal.h"
#include "runtime/clock.h"

/* ---- dataflow: one task per micro-batch and TP lane, stage to stage ---------------------- */

static int dataflow_ntasks(const pe_engine *e, int m) { return m * e->tp; }

/* task i = (micro-batch i / tp, lane i % tp) starts at stage 0 of its lane */
static int dataflow_first_rank(const pe_engine *e, int d, int i) { return en_rank(e, d, 0, i % e->tp); }

static int dataflow_parts_from(const pe_engine *e, const en_task *t, int p)
{
    (void)t;
    return e->pp - p;
}

/* Hands a task whose stage is done to the same lane of the next stage. */
static void pass_on(en_worker *w, en_task *t)
{
    pe_engine *e = w->e;
    en_worker *next = &e->workers[en_rank(e, w->d, w->p + 1, w->t)];
    if (rt_queue_push(next->inq, t) != PE_OK) /* closed: the engine failed or is closing */
        en_task_end(e, t, next->p, PE_ECLOSED);
}

static pe_status dataflow_run(en_worker *w, en_task *t, pe_err *err)
{
    pe_status s = en_stage_run(w, t->req, t->mb, err);
    if (s == PE_OK && w->p + 1 < w->e->pp)
        pass_on(w, t);
    return s;
}

/* ---- gpipe: the whole request on every worker, clock by clock ----------------------------- */

static int gpipe_ntasks(const pe_engine *e, int m)
{
    (void)m;
    return e->pp * e->tp;
}

/* task i = (stage i / tp, lane i % tp) */
static int gpipe_first_rank(const pe_engine *e, int d, int i)
{
    return en_rank(e, d, i / e->tp, i % e->tp);
}

static int gpipe_parts_from(const pe_engine *e, const en_task *t, int p)
{
    (void)e, (void)t, (void)p;
    return 1;
}

/* Clock c runs micro-batch c - p on stage p; then every worker of the replica meets. */
static pe_status gpipe_run(en_worker *w, en_task *t, pe_err *err)
{
    pe_engine *e = w->e;
    const en_request *r = t->req;
    const int clocks = r->m + e->pp - 1;
    for (int c = 0; c < clocks; c++) {
        int mb = c - w->p;
        if (mb >= 0 && mb < r->m) {
            pe_status s = en_stage_run(w, r, mb, err);
            if (s != PE_OK)
                return s;
        }
        if (e->clocks) {
            uint64_t t0 = rt_now_ns();
            pe_status s = rt_barrier_wait(&e->clocks[w->d], 1);
            en_trace_record(w, PE_TRACE_CLOCK_WAIT, r, mb, t0, rt_now_ns());
            if (s != PE_OK)
                return pe_fail(err, s, "worker %d: clock %d of replica %d was aborted because "
                               "another worker failed", w->rank, c, w->d);
        }
    }
    return PE_OK;
}

static const en_schedule en_dataflow = {"dataflow", 0, dataflow_ntasks, dataflow_first_rank,
                                        dataflow_parts_from, dataflow_run};
static const en_schedule en_gpipe = {"gpipe", 1, gpipe_ntasks, gpipe_first_rank,
                                     gpipe_parts_from, gpipe_run};

const en_schedule *en_schedule_get(pe_schedule s)
{
    return s == PE_SCHED_GPIPE ? &en_gpipe : &en_dataflow;
}

/* ---- completion ----------------------------------------------------------------------------- */

void en_task_end(pe_engine *e, en_task *t, int p, pe_status s)
{
    en_request_done(e, t->req, s == PE_OK ? 1 : e->sched->parts_from(e, t, p), s);
}

int en_task_first_stage(const pe_engine *e, int i)
{
    return (e->sched->first_rank(e, 0, i) / e->tp) % e->pp;
}

void en_request_drop(pe_engine *e, en_request *r, pe_status s)
{
    const int n = r->ntasks; /* r lives until the last task's parts end: read it first */
    en_task *tasks = r->tasks;
    for (int i = 0; i < n; i++)
        en_task_end(e, &tasks[i], en_task_first_stage(e, i), s);
}
