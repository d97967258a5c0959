/* router.c: turns each request into tasks for one replica.
 *
 * DP: the replica with the fewest outstanding micro-batches takes the request.
 * When a request's tasks go to more than one queue (a TP group's lanes, or every stage
 * under gpipe), one router thread dispatches all requests, so that every worker sees
 * them in the same order, which the TP collectives and gpipe clock barriers rely on.
 * Otherwise (tp = 1, naive or stream) a request's tasks all enter one queue, stage 0 of
 * its replica, and the submitting thread dispatches them itself (en_route_direct): one
 * thread hand-off less per request. The stages after it receive tasks from a single
 * producer, the stage before, in the order they are sent.
 */
#include "engine/engine_internal.h"

static int least_loaded_replica(pe_engine *e)
{
    int best = 0;
    long best_load = atomic_load_explicit(&e->replica_load[0], memory_order_relaxed);
    for (int d = 1; d < e->dp; d++) {
        long load = atomic_load_explicit(&e->replica_load[d], memory_order_relaxed);
        if (load < best_load) {
            best = d;
            best_load = load;
        }
    }
    return best;
}

/* Queues task on worker `rank`; a closed queue means the engine stopped: the task's
 * parts end with that status at once. */
static void dispatch(pe_engine *e, int rank, en_task *t)
{
    if (rt_queue_push(e->workers[rank].inq, t) == PE_OK)
        return;
    pe_status f = atomic_load(&e->failed);
    en_task_end(e, t, e->workers[rank].p, f != PE_OK ? f : PE_ECLOSED);
}

void en_route(pe_engine *e, en_request *r)
{
    int d = least_loaded_replica(e);
    r->replica = d;
    atomic_fetch_add_explicit(&e->replica_load[d], r->m, memory_order_relaxed);
    /* r may complete and be freed as soon as its last task is out: read nothing of it
     * after the last dispatch. */
    const int ntasks = r->ntasks;
    en_task *tasks = r->tasks;
    for (int i = 0; i < ntasks; i++)
        dispatch(e, e->sched->first_rank(e, d, i), &tasks[i]);
}

void *en_router_main(void *arg)
{
    pe_engine *e = arg;
    void *item = NULL;
    while (rt_queue_pop(e->inq, &item) == PE_OK) {
        en_request *r = item;
        pe_status f = atomic_load(&e->failed);
        if (f != PE_OK)
            en_request_drop(e, r, f);
        else
            en_route(e, r);
    }
    return NULL;
}
