/* hb_parallel.c: a host device's compute threads: its pool (the worker thread and one
 * helper per further core of the worker's binding), parallel regions over item ranges,
 * and the scratch the kernels use inside them. */
#include <stdlib.h>
#include <string.h>

#include "backend/host/hb_internal.h"

static void free_tls(hb_scratch *tls, int n)
{
    for (int t = 0; tls && t < n; t++)
        free(tls[t].p);
    free(tls);
}

/* Frees the pool and the per-thread scratch; the owner goes back to its own cores. */
static void stop_pool(be_device *dev)
{
    rt_pool_destroy(dev->pool);
    dev->pool = NULL;
    if (dev->owner_pinned)
        (void)rt_topology_bind_self(dev->topo, &dev->home, NULL);
    dev->owner_pinned = 0;
    free_tls(dev->tls, dev->nthreads);
    dev->tls = NULL;
    dev->nthreads = 0;
}

/* A pool of n threads and its (empty) per-thread scratch, into *pool and *tls; the device
 * is not touched, so that a failure leaves its current pool working. A bound worker's
 * threads are pinned: the owner to core 0 of its set (by install_pool), helper i to core
 * i % ncores. With n <= ncores every thread has a core of its own, so no spinning thread
 * of the pool waits for one that the OS put on its core; with more threads than cores
 * (set_compute_threads) helpers share cores round-robin and can wait for each other. An
 * unbound worker's threads stay where the OS puts them (other devices may share those
 * cores). */
static pe_status make_pool(be_device *dev, int n, rt_pool **pool, hb_scratch **tls,
                           pe_err *err)
{
    *pool = NULL;
    *tls = calloc((size_t)n, sizeof **tls);
    rt_binding *pins = dev->bound ? calloc((size_t)n, sizeof *pins) : NULL;
    if (!*tls || (dev->bound && !pins)) {
        free(pins);
        free(*tls);
        *tls = NULL;
        return pe_fail(err, PE_ENOMEM, "out of memory for %d compute threads", n);
    }
    for (int i = 0; pins && i < n; i++)
        pins[i] = dev->cores[i % dev->ncores];
    pe_status s = rt_pool_create(n, dev->bound ? dev->topo : NULL, pins, pool, err);
    free(pins);
    if (s != PE_OK) {
        free(*tls);
        *tls = NULL;
    }
    return s;
}

/* Makes a pool from make_pool the device's (it has none); pins the owner. */
static void install_pool(be_device *dev, rt_pool *pool, hb_scratch *tls, int n)
{
    dev->pool = pool;
    dev->tls = tls;
    dev->nthreads = n;
    if (dev->bound && n > 1 && dev->home.cpulist[0] &&
        rt_topology_bind_self(dev->topo, &dev->cores[0], NULL) == PE_OK)
        dev->owner_pinned = 1;
}

static pe_status start_pool(be_device *dev, int n)
{
    rt_pool *pool;
    hb_scratch *tls;
    pe_err err = {{0}};
    pe_status s = make_pool(dev, n, &pool, &tls, &err);
    if (s != PE_OK)
        return hb_fail(dev, s, "host device %d: %s", dev->id, err.msg);
    install_pool(dev, pool, tls, n);
    return PE_OK;
}

pe_status hb_threads_open(be_device *dev)
{
    dev->ncores = 1;
    dev->cores = calloc(HB_MAX_THREADS, sizeof *dev->cores);
    if (!dev->cores)
        return hb_fail(dev, PE_ENOMEM, "host device %d: out of memory for its core list",
                       dev->id);
    /* Without a topology (hwloc cannot read the machine) the device computes on its
     * worker thread alone. */
    pe_err err = {{0}};
    if (rt_topology_load(&dev->topo, &err) == PE_OK) {
        dev->ncores = rt_topology_thread_cores(dev->topo, dev->cores, HB_MAX_THREADS,
                                               &dev->bound);
        rt_topology_thread_binding(dev->topo, &dev->home);
    }
    return start_pool(dev, dev->ncores);
}

void hb_threads_close(be_device *dev)
{
    stop_pool(dev);
    rt_topology_free(dev->topo);
    dev->topo = NULL;
    free(dev->cores);
    dev->cores = NULL;
    free(dev->call.p);
    dev->call = (hb_scratch){0};
}

pe_status hb_set_compute_threads(be_device *dev, int n)
{
    if (n < 1 || n > HB_MAX_THREADS)
        return hb_fail(dev, PE_EINVAL,
                       "host device %d: %d compute threads; a host device computes with 1 to "
                       "%d threads",
                       dev->id, n, HB_MAX_THREADS);
    if (n == dev->nthreads)
        return PE_OK;
    /* The new pool first: if it cannot start, the device keeps computing with the old. */
    rt_pool *pool;
    hb_scratch *tls;
    pe_err err = {{0}};
    pe_status s = make_pool(dev, n, &pool, &tls, &err);
    if (s != PE_OK)
        return hb_fail(dev, s,
                       "host device %d: %d compute threads: %s; the device keeps its %d",
                       dev->id, n, err.msg, dev->nthreads);
    stop_pool(dev);
    install_pool(dev, pool, tls, n);
    return PE_OK;
}

int hb_compute_threads(const be_device *dev) { return dev->nthreads; }

void hb_for(be_device *dev, size_t n, size_t grain, hb_range_fn fn, void *arg)
{
    rt_pool_for(dev->pool, n, grain, fn, arg);
}

/* Grows s to at least bytes (by doubling, so a growing size costs few allocations). */
static pe_status grow(be_device *dev, hb_scratch *s, size_t bytes, const char *op)
{
    if (s->bytes >= bytes)
        return PE_OK;
    void *p = NULL;
    size_t want = bytes > 2 * s->bytes ? bytes : 2 * s->bytes;
    if (posix_memalign(&p, HB_ALIGN, want) != 0)
        return hb_fail(dev, PE_ENOMEM,
                       "%s on host device %d: out of memory for %zu bytes of scratch; use "
                       "smaller steps (fewer tokens per step)",
                       op, dev->id, want);
    free(s->p);
    s->p = p;
    s->bytes = want;
    return PE_OK;
}

pe_status hb_scratch_reserve(be_device *dev, size_t bytes, const char *op)
{
    for (int t = 0; t < dev->nthreads; t++) {
        pe_status st = grow(dev, &dev->tls[t], bytes, op);
        if (st != PE_OK)
            return st;
    }
    return PE_OK;
}

void *hb_call_scratch(be_device *dev, size_t bytes, const char *op)
{
    return grow(dev, &dev->call, bytes, op) == PE_OK ? dev->call.p : NULL;
}
