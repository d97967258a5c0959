/* pool.c: the compute pool's threads and regions (protocol in pool.h).
 *
 * word = generation << 16 | threads of the current region (the owner counts). Helper i
 * takes part in a region when i < that count; it reads the region's description only
 * then, and the owner writes the next one only after every helper that took part has
 * counted itself out of `busy`, so the description needs no lock. A helper that sat out a
 * region may see a later generation first: it sat that one out too, or takes part now.
 */
#include "runtime/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/annotate.h"
#include "runtime/barrier.h"
#include "runtime/clock.h"
#include "runtime/park.h"

#define RT_POOL_SPIN_NS 100000u /* 100 us: longer than the gap between a step's regions */
#define GEN_ONE (UINT64_C(1) << 16)
#define ACTIVE(w) ((int)((w) & 0xffffu))
#define STOP_ACTIVE 0xffffu       /* the count that tells helpers to exit */
#define RT_POOL_MAX (int)(STOP_ACTIVE - 1)

typedef struct helper {
    rt_pool *pool;
    int index;
    pthread_t thread;
} helper;

struct rt_pool {
    alignas(64) _Atomic uint64_t word; /* generation << 16 | threads in the region */
    alignas(64) _Atomic size_t next;   /* the next unclaimed item */
    alignas(64) _Atomic int busy;      /* helpers of the region not done yet */
    alignas(64) int n;                 /* threads, the owner included */
    uint64_t spin_ns;
    /* the region, written by the owner before it bumps word */
    rt_pool_fn fn;
    void *arg;
    size_t items, grain;
    rt_park wake; /* helpers wait here for a generation */
    rt_park done; /* the owner waits here for busy == 0 */
    helper *helpers; /* (n - 1) */
    int started;     /* helpers running */
};

/* Every 64 spins: 1 once the spin budget is spent. In between, the spinner yields, so a
 * thread it waits for that the OS put on the same core (an unpinned pool on a busy
 * machine) gets to run in microseconds, not after the spinner's whole budget. */
static int spin_over(uint64_t until)
{
    sched_yield();
    return rt_now_ns() > until;
}

/* Claims pieces until the region's items run out. */
static void run_pieces(rt_pool *p, int thread)
{
    const size_t items = p->items, grain = p->grain;
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&p->next, grain, memory_order_relaxed);
        if (b >= items)
            return;
        p->fn(p->arg, b, items - b > grain ? b + grain : items, thread);
    }
}

/* Waits (spin, then park) until word's generation differs from gen; returns the word. */
static uint64_t await_generation(rt_pool *p, uint64_t gen)
{
    uint64_t w = atomic_load_explicit(&p->word, memory_order_seq_cst);
    if ((w >> 16) != gen)
        return w;
    if (p->spin_ns) {
        uint64_t until = rt_now_ns() + p->spin_ns;
        for (unsigned i = 1;; i++) {
            rt_cpu_relax();
            w = atomic_load_explicit(&p->word, memory_order_seq_cst);
            if ((w >> 16) != gen)
                return w;
            if ((i & 63) == 0 && spin_over(until))
                break;
        }
    }
    for (;;) {
        uint32_t key = rt_park_prepare(&p->wake);
        w = atomic_load_explicit(&p->word, memory_order_seq_cst);
        if ((w >> 16) != gen) {
            rt_park_cancel(&p->wake, key);
            return w;
        }
        rt_park_wait(&p->wake, key);
    }
}

static void *helper_main(void *arg)
{
    helper *h = arg;
    rt_pool *p = h->pool;
    uint64_t gen = 0;
    for (;;) {
        uint64_t w = await_generation(p, gen);
        gen = w >> 16;
        if (ACTIVE(w) == (int)STOP_ACTIVE)
            return NULL;
        if (h->index >= ACTIVE(w))
            continue; /* not in this region */
        RT_HAPPENS_AFTER(&p->word);
        run_pieces(p, h->index);
        RT_HAPPENS_BEFORE(&p->busy);
        if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_seq_cst) == 1)
            rt_park_notify(&p->done);
    }
}

/* Publishes a new generation with `active` threads and wakes parked helpers. */
static void publish(rt_pool *p, int active)
{
    RT_HAPPENS_BEFORE(&p->word);
    uint64_t w = atomic_load_explicit(&p->word, memory_order_relaxed);
    uint64_t next = ((w >> 16) + 1) << 16 | (uint64_t)active;
    atomic_store_explicit(&p->word, next, memory_order_seq_cst);
    rt_park_notify(&p->wake);
}

static void wait_helpers(rt_pool *p)
{
    if (p->spin_ns) {
        uint64_t until = rt_now_ns() + p->spin_ns;
        for (unsigned i = 1; atomic_load_explicit(&p->busy, memory_order_seq_cst) != 0; i++) {
            rt_cpu_relax();
            if ((i & 63) == 0 && spin_over(until))
                break;
        }
    }
    while (atomic_load_explicit(&p->busy, memory_order_seq_cst) != 0) {
        uint32_t key = rt_park_prepare(&p->done);
        if (atomic_load_explicit(&p->busy, memory_order_seq_cst) == 0)
            rt_park_cancel(&p->done, key);
        else
            rt_park_wait(&p->done, key);
    }
    RT_HAPPENS_AFTER(&p->busy);
}

void rt_pool_for(rt_pool *p, size_t n, size_t grain, rt_pool_fn fn, void *arg)
{
    if (n == 0)
        return;
    if (grain == 0)
        grain = 1;
    size_t pieces = (n + grain - 1) / grain;
    if (!p || p->n == 1 || pieces == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    int active = pieces < (size_t)p->n ? (int)pieces : p->n;
    p->fn = fn;
    p->arg = arg;
    p->items = n;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy, active - 1, memory_order_relaxed);
    publish(p, active);
    run_pieces(p, 0);
    wait_helpers(p);
}

int rt_pool_size(const rt_pool *p) { return p ? p->n : 1; }

static void stop_helpers(rt_pool *p)
{
    if (p->started == 0)
        return;
    publish(p, (int)STOP_ACTIVE);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->helpers[i].thread, NULL);
    p->started = 0;
}

void rt_pool_destroy(rt_pool *p)
{
    if (!p)
        return;
    stop_helpers(p);
    rt_park_destroy(&p->wake);
    rt_park_destroy(&p->done);
    RT_HAPPENS_FORGET(&p->word);
    RT_HAPPENS_FORGET(&p->busy);
    RT_UNIGNORE_WORD(p->word);
    RT_UNIGNORE_WORD(p->next);
    RT_UNIGNORE_WORD(p->busy);
    free(p->helpers);
    free(p);
}

pe_status rt_pool_create(int n, const rt_topology *topo, const rt_binding *pins,
                         rt_pool **out, pe_err *err)
{
    *out = NULL;
    if (n < 1 || n > RT_POOL_MAX)
        return pe_fail(err, PE_EINVAL, "a compute pool of %d threads: need 1 to %d", n,
                       RT_POOL_MAX);
    rt_pool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
    if (!p)
        return pe_fail(err, PE_ENOMEM, "out of memory for a pool of %d threads", n);
    memset(p, 0, sizeof *p);
    atomic_init(&p->word, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->busy, 0);
    p->n = n;
    p->spin_ns = rt_spin_budget_ns(n) ? RT_POOL_SPIN_NS : 0;
    pe_status s = rt_park_init(&p->wake, err);
    if (s != PE_OK) {
        free(p);
        return s;
    }
    s = rt_park_init(&p->done, err);
    if (s != PE_OK) {
        rt_park_destroy(&p->wake);
        free(p);
        return s;
    }
    /* synchronization words, read and written outside any lock on purpose */
    RT_IGNORE_WORD(p->word);
    RT_IGNORE_WORD(p->next);
    RT_IGNORE_WORD(p->busy);
    p->helpers = calloc((size_t)n, sizeof *p->helpers);
    if (!p->helpers) {
        rt_pool_destroy(p);
        return pe_fail(err, PE_ENOMEM, "out of memory for a pool of %d threads", n);
    }
    for (int i = 1; i < n; i++) {
        helper *h = &p->helpers[i - 1];
        h->pool = p;
        h->index = i;
        int rc = pthread_create(&h->thread, NULL, helper_main, h);
        if (rc != 0) {
            rt_pool_destroy(p);
            return pe_fail(err, rc == EAGAIN ? PE_ENOMEM : PE_EINTERNAL,
                           "cannot start compute thread %d of %d: %s; ask for fewer threads "
                           "or raise the thread limit (ulimit -u)",
                           i, n, strerror(rc));
        }
        p->started++;
        if (topo && pins && pins[i].cpulist[0])
            (void)rt_topology_bind_thread(topo, h->thread, &pins[i], NULL);
    }
    *out = p;
    return PE_OK;
}
