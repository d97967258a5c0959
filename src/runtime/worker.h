/* worker.h: one thread per device, running tasks from its in-queue.
 *
 * The worker pops tasks (opaque pointers) from its queue and hands each to run(). When
 * run() fails, the worker stops running tasks, reports the failure once through
 * on_failure (on the worker thread), and from then on passes every task it pops to
 * cancel() instead, until the queue is closed and drained. The owner decides what a
 * failure means for the other workers (usually: close their queues too).
 */
#ifndef PE_RUNTIME_WORKER_H
#define PE_RUNTIME_WORKER_H

#include "common/error.h"
#include "runtime/queue.h"
#include "runtime/topology.h"

typedef struct rt_worker rt_worker;

typedef struct rt_worker_desc {
    int index;                       /* the owner's number for this worker */
    rt_queue *inq;                   /* tasks; the owner creates, closes and destroys it */
    void *ctx;                       /* handed to every callback */
    /* Runs on the worker thread before the first task (open the device, ...); optional. */
    pe_status (*setup)(void *ctx, pe_err *err);
    /* Runs on the worker thread after the last task (close the device, ...); optional. */
    void (*teardown)(void *ctx);
    pe_status (*run)(void *ctx, void *task, pe_err *err);
    void (*cancel)(void *ctx, void *task, pe_status why); /* optional */
    void (*on_failure)(void *ctx, int index, pe_status s, const pe_err *err); /* optional */
    const rt_topology *topo;         /* with bind: the cores to run on; may be NULL */
    const rt_binding *bind;
} rt_worker_desc;

/* Starts the thread. The desc is copied. */
pe_status rt_worker_start(const rt_worker_desc *desc, rt_worker **out, pe_err *err);

/* Waits for the thread to end (the owner closes the in-queue first) and frees the worker.
 * Returns the worker's final status: PE_OK, or the failure it reported (message in err). */
pe_status rt_worker_join(rt_worker *w, pe_err *err);

#endif
