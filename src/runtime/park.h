/* park.h: an eventcount, where threads wait for a condition that lives outside it.
 *
 * A waiter that found nothing to do:
 *     key = rt_park_prepare(p);         // announce: "I may sleep" (seq_cst RMW)
 *     if (anything may still come now)  // re-check, with a seq_cst load
 *         rt_park_cancel(p, key);
 *     else
 *         rt_park_wait(p, key);         // sleeps unless a notify came after prepare
 * A thread that makes the condition come true does a seq_cst store or RMW (the queue's
 * CAS on its position), then rt_park_notify(p); or, to finish its work in between,
 * n = rt_park_waiters(p) (a seq_cst load) right after the RMW and rt_park_notify_all(p)
 * later if n was not 0. Each side's seq_cst write comes before its seq_cst load, so at
 * least one sees the other: the waiter sees the condition (or the claim) and does not
 * sleep, or the notifier sees the waiter and wakes it. The fast path, nobody waiting, costs one load
 * of a word that only changes when someone parks, and a branch.
 *
 * One 64-bit word holds (epoch << 32 | waiters). prepare adds a waiter and takes the
 * epoch as its key. A notify bumps the epoch and clears the count in one CAS, then
 * broadcasts under the mutex; waiters sleep (under the same mutex) only while the epoch
 * still equals their key. Clearing the count means the operations that follow a wake-up
 * take the fast path again at once, instead of each broadcasting until the woken threads
 * get to run. A cancel removes its waiter only if its epoch is still current (else a
 * notify already did).
 *
 * Waiting is a mutex and a condition variable, which helgrind and DRD understand.
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

/* Wakes every waiter, if there may be one: for a notifier with nothing to do between its
 * seq_cst store or RMW and the wake-up (the queue splits this into rt_park_waiters after
 * its CAS and rt_park_notify_all after it publishes). */
static inline void rt_park_notify(rt_park *p)
{
    if ((uint32_t)atomic_load_explicit(&p->word, memory_order_seq_cst) != 0)
        rt_park_notify_all(p);
}

/* Threads announced as waiting and not yet notified (seq_cst load). */
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
