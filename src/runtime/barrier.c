/* barrier.c: the abortable spin-then-park barrier (protocol in barrier.h). */
#include "runtime/barrier.h"

#include <unistd.h>

#include "runtime/annotate.h"
#include "runtime/clock.h"

#ifdef PE_ANNOTATE
#include <valgrind/valgrind.h>
#endif

#define RT_SPIN_NS 20000u /* 20 us: a peer that is running arrives well within this */
#define GEN(w) ((uint32_t)((w) >> 32))
#define ARRIVED(w) ((uint32_t)(w))

uint64_t rt_spin_budget_ns(int n)
{
#ifdef PE_ANNOTATE
    if (RUNNING_ON_VALGRIND)
        return 0;
#endif
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && n <= cpus ? RT_SPIN_NS : 0;
}

pe_status rt_barrier_init(rt_barrier *b, int n, pe_err *err)
{
    atomic_init(&b->word, 0);
    atomic_init(&b->aborted, 0);
    b->n = n;
    b->spin_ns = rt_spin_budget_ns(n);
    pe_status s = rt_park_init(&b->park, err);
    if (s != PE_OK)
        return s;
    /* Read and written outside any lock on purpose: synchronization words, not data. */
    RT_IGNORE_WORD(b->word);
    RT_IGNORE_WORD(b->aborted);
    return PE_OK;
}

void rt_barrier_destroy(rt_barrier *b)
{
    rt_park_destroy(&b->park);
    RT_HAPPENS_FORGET(&b->word);
    RT_UNIGNORE_WORD(b->word);
    RT_UNIGNORE_WORD(b->aborted);
}

int rt_barrier_aborted(rt_barrier *b)
{
    return atomic_load_explicit(&b->aborted, memory_order_seq_cst);
}

/* Takes back this thread's arrival at generation gen. Returns 1 if withdrawn, 0 if the
 * barrier completed first (then the caller has passed it). */
static int withdraw(rt_barrier *b, uint32_t gen)
{
    uint64_t w = atomic_load_explicit(&b->word, memory_order_seq_cst);
    while (GEN(w) == gen) {
        if (atomic_compare_exchange_weak_explicit(&b->word, &w, w - 1, memory_order_seq_cst,
                                                  memory_order_seq_cst))
            return 1;
    }
    return 0;
}

/* 1 when the wait is over: the generation moved on, or an abortable wait saw the abort. */
static int done(rt_barrier *b, uint32_t gen, int abortable)
{
    return GEN(atomic_load_explicit(&b->word, memory_order_seq_cst)) != gen ||
           (abortable && rt_barrier_aborted(b));
}

pe_status rt_barrier_wait(rt_barrier *b, int abortable)
{
    if (abortable && rt_barrier_aborted(b))
        return PE_ECOMM;
    /* Everything this thread wrote before arriving is seen by all threads after. */
    RT_HAPPENS_BEFORE(&b->word);
    uint64_t w = atomic_load_explicit(&b->word, memory_order_seq_cst), next;
    do {
        next = ARRIVED(w) + 1 == (uint32_t)b->n ? ((uint64_t)(GEN(w) + 1) << 32) : w + 1;
    } while (!atomic_compare_exchange_weak_explicit(&b->word, &w, next, memory_order_seq_cst,
                                                    memory_order_seq_cst));
    uint32_t gen = GEN(w);
    if (GEN(next) != gen) { /* this thread completed the barrier */
        rt_park_notify(&b->park);
        RT_HAPPENS_AFTER(&b->word);
        return PE_OK;
    }
    if (b->spin_ns) {
        uint64_t until = rt_now_ns() + b->spin_ns;
        for (unsigned i = 1; !done(b, gen, abortable); i++) {
            rt_cpu_relax();
            if ((i & 63) == 0 && rt_now_ns() > until)
                break;
        }
    }
    while (!done(b, gen, abortable)) {
        uint32_t key = rt_park_prepare(&b->park);
        if (done(b, gen, abortable))
            rt_park_cancel(&b->park, key);
        else
            rt_park_wait(&b->park, key);
    }
    if (GEN(atomic_load_explicit(&b->word, memory_order_seq_cst)) == gen && withdraw(b, gen))
        return PE_ECOMM; /* aborted before everyone arrived */
    RT_HAPPENS_AFTER(&b->word);
    return PE_OK;
}

void rt_barrier_abort(rt_barrier *b)
{
    atomic_store_explicit(&b->aborted, 1, memory_order_seq_cst);
    rt_park_notify_all(&b->park);
}
