/* worker.c: the worker thread: bind, set up, run tasks until the queue closes, tear down. */
#include "runtime/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rt_worker {
    rt_worker_desc d;
    rt_binding bind; /* the copy d.bind points to */
    pthread_t thread;
    pe_status status; /* written by the thread, read after join */
    pe_err err;
};

/* Records the failure (the first one only) and reports it through on_failure. */
static void fail(rt_worker *w, pe_status s, pe_err *err)
{
    if (!err->msg[0])
        pe_fail(err, s, "worker %d failed with %s (the callback left no message)", w->d.index,
                pe_status_str(s));
    w->status = s;
    w->err = *err;
    if (w->d.on_failure)
        w->d.on_failure(w->d.ctx, w->d.index, s, &w->err);
}

static void *worker_main(void *arg)
{
    rt_worker *w = arg;
    const rt_worker_desc *d = &w->d;
    pe_err err = {{0}};
    pe_status s = PE_OK;
    int set_up = 0;

    if (d->topo && d->bind)
        s = rt_topology_bind_self(d->topo, d->bind, &err);
    if (s == PE_OK && d->setup)
        s = d->setup(d->ctx, &err);
    if (s == PE_OK)
        set_up = 1;
    else
        fail(w, s, &err);

    void *task;
    while (rt_queue_pop(d->inq, &task) == PE_OK) {
        if (w->status != PE_OK) {
            if (d->cancel)
                d->cancel(d->ctx, task, w->status);
            continue;
        }
        err.msg[0] = '\0';
        s = d->run(d->ctx, task, &err);
        if (s != PE_OK)
            fail(w, s, &err);
    }
    if (set_up && d->teardown)
        d->teardown(d->ctx);
    return NULL;
}

pe_status rt_worker_start(const rt_worker_desc *desc, rt_worker **out, pe_err *err)
{
    *out = NULL;
    if (!desc || !desc->inq || !desc->run)
        return pe_fail(err, PE_EINVAL, "a worker needs an in-queue and a run callback");
    rt_worker *w = calloc(1, sizeof *w);
    if (!w)
        return pe_fail(err, PE_ENOMEM, "out of memory starting worker %d", desc->index);
    w->d = *desc;
    if (desc->bind) {
        w->bind = *desc->bind;
        w->d.bind = &w->bind;
    }
    w->status = PE_OK;
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        free(w);
        return pe_fail(err, rc == EAGAIN ? PE_ENOMEM : PE_EINTERNAL,
                       "cannot start the thread of worker %d: %s; lower the number of "
                       "devices or raise the thread limit (ulimit -u)",
                       desc->index, strerror(rc));
    }
    *out = w;
    return PE_OK;
}

pe_status rt_worker_join(rt_worker *w, pe_err *err)
{
    if (!w)
        return PE_OK;
    int rc = pthread_join(w->thread, NULL);
    pe_status s = w->status;
    if (rc != 0)
        s = pe_fail(err, PE_EINTERNAL, "joining worker %d failed: %s", w->d.index,
                    strerror(rc));
    else if (s != PE_OK && err)
        *err = w->err;
    free(w);
    return s;
}
