/* pool.h: a pool of compute threads for parallel regions.
 *
 * A region runs fn over the items [0, n): the calling thread (thread 0) and the pool's
 * helpers (threads 1 .. size-1) claim pieces of `grain` items in turn from a shared
 * counter until none is left, and the call returns when every piece is done. Everything
 * the caller wrote before the region is visible to fn on every thread, and everything fn
 * wrote is visible to the caller after it. Regions come from one thread at a time (the
 * owner).
 *
 * A region must be cheap (a decode step runs ~100): the owner publishes it by bumping a
 * generation word; a helper spins on that word for a while after its last region
 * (rt_spin_budget_ns decides: never under valgrind, nor when the pool has more threads than
 * the machine has CPUs), then parks on an eventcount (park.h). The owner waits for the
 * helpers the same way. A pool of one thread runs every region inline and has no threads.
 *
 * helgrind/DRD: the generation word, the piece counter and the count of busy helpers are
 * ignored as data; the hand-offs carry happens-before annotations (annotate.h).
 */
#ifndef PE_RUNTIME_POOL_H
#define PE_RUNTIME_POOL_H

#include <stddef.h>

#include "common/error.h"
#include "runtime/topology.h"

typedef struct rt_pool rt_pool;

/* Runs the items [begin, end) on pool thread `thread` (0 = the owner). */
typedef void (*rt_pool_fn)(void *arg, size_t begin, size_t end, int thread);

/* Starts n - 1 helpers (n >= 1). With topo and pins (n entries), helper i is bound to
 * pins[i] (pins[0], the owner's, is not used; "" = leave that helper unbound); a binding
 * the OS refuses leaves the helper where it was created (inside the owner's cores). */
pe_status rt_pool_create(int n, const rt_topology *topo, const rt_binding *pins,
                         rt_pool **out, pe_err *err);
/* Stops and joins the helpers (no region may be running). NULL is ok. */
void rt_pool_destroy(rt_pool *p);

int rt_pool_size(const rt_pool *p);

/* One region: fn over [0, n) in pieces of grain (>= 1) items. n <= grain, or a pool of one
 * thread: a single call fn(arg, 0, n, 0) on the caller. */
void rt_pool_for(rt_pool *p, size_t n, size_t grain, rt_pool_fn fn, void *arg);

#endif
