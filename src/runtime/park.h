/* park.h: an eventcount, where threads wait for a condition that lives outside it.
 *
 * A waiter that found nothing to do:
 *     key = rt_park_prepare(p);      // announce: "I may sleep"
 *     if (condition holds now)       // re-check after announcing
 *         rt_park_cancel(p, key);
 *     else
 *         rt_park_wait(p, key);      // sleeps unless a notify came after prepare
 * A thread that makes the condition true (with a seq_cst store or RMW) then calls
 * rt_park_notify(p).
 *
 * One 64-bit word holds (epoch << 32 | waiters). prepare adds a waiter and takes the
 * epoch as its key. A notify that finds waiters bumps the epoch and clears the count in
 * one CAS, then broadcasts under the mutex; waiters sleep (under the same mutex) only
 * while the epoch still equals their key. Clearing the count means the pushes that follow
 * a wake-up take the fast path again at once, instead of each broadcasting until the
 * woken threads get to run. A cancel removes its waiter only if its epoch is still
 * current (else the notify already did).
 *
 * No lost wake-up: the waiter's announcement (seq_cst RMW) comes before its re-check, and
 * the notifier's seq_cst store of the condition comes before its seq_cst load of the
 * word; so either the re-check sees the condition, or the notifier sees the waiter and
 * moves the epoch, which the waiter checks under the mutex before sleeping.
 *
 * The fast path of a notify with nobody waiting is one load and a branch. Waiting is a
 * mutex and a condition variable, which helgrind and DRD understand.
 */
#ifndef PE_RUNTIME_PARK_H
#define PE_RUNTIME_PARK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/error.h"

typedef struct rt_park {
    _Atomic uint64_t word; /* epoch << 32 | waiters announced since the last notify */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} rt_park;

pe_status rt_park_init(rt_park *p, pe_err *err);
/* No thread may be waiting. */
void rt_park_destroy(rt_park *p);

uint32_t rt_park_prepare(rt_park *p);
void rt_park_cancel(rt_park *p, uint32_t key);
/* Sleeps until a notify after the prepare that returned key (returns at once if one
 * already came). */
void rt_park_wait(rt_park *p, uint32_t key);

/* Wakes every waiter; always takes the mutex. */
void rt_park_notify_all(rt_park *p);

/* Wakes every waiter, if there may be one. Call after the seq_cst store that made the
 * condition true. */
static inline void rt_park_notify(rt_park *p)
{
    if ((uint32_t)atomic_load_explicit(&p->word, memory_order_seq_cst) != 0)
        rt_park_notify_all(p);
}

/* Threads announced as waiting and not yet notified (for tests and statistics). */
static inline unsigned rt_park_waiters(const rt_park *p)
{
    return (uint32_t)atomic_load_explicit(&p->word, memory_order_seq_cst);
}

/* A spin-wait hint to the CPU (x86 pause, arm yield). */
static inline void rt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

#endif
