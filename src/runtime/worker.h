/* worker.h: one thread per device, running tasks from its in-queue.
 *
 * The worker pops tasks (opaque pointers) from its queue and hands each to run(). When
 * run() fails, the worker stops running tasks, reports the failure once through
 * on_failure (on the worker thread), and from then on passes every task it pops to
 * cancel() instead, until the queue is closed and drained. The owner decides what a
 * failure means for the other workers (usually: close their queues too).
 *
 * In order, on the worker thread:
 *   1. binding: when desc.topo and desc.bind are given, rt_topology_bind_self; a refusal
 *      (PE_EDEVICE, e.g. a container that forbids binding) is a failure like a failed
 *      setup: an owner that prefers to run unbound passes bind = NULL;
 *   2. setup(); when binding or setup fails, that is the worker's failure: on_failure,
 *      then every task is cancelled; teardown() is not called (a failed setup undoes
 *      itself), since setup did not succeed;
 *   3. run() for each task in queue order; the task a failing run() was given belongs to
 *      run() (it is not passed to cancel());
 *   4. after the queue is closed and drained: teardown(), when setup succeeded.
 * Every task popped goes to exactly one of run() or cancel(). A failing callback that
 * leaves err empty gets a message naming the worker and the status.
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
    const rt_topology *topo;         /* with bind: the cores to run on; may be NULL; must
                                        outlive the worker */
    const rt_binding *bind;          /* copied by rt_worker_start */
} rt_worker_desc;

/* Starts the thread. The desc is copied. PE_EINVAL without inq or run; PE_ENOMEM or
 * PE_EINTERNAL when no thread can be made (nothing was started then). */
pe_status rt_worker_start(const rt_worker_desc *desc, rt_worker **out, pe_err *err);

/* Waits for the thread to end (the owner closes the in-queue first) and frees the worker.
 * Returns the worker's final status: PE_OK, or the failure it reported (message in err). */
pe_status rt_worker_join(rt_worker *w, pe_err *err);

#endif
