/* park.c: the eventcount's slow paths (see park.h for the protocol). */
#include "runtime/park.h"

#include <string.h>

#include "runtime/annotate.h"

#define EPOCH(w) ((uint32_t)((w) >> 32))
#define ONE_EPOCH (UINT64_C(1) << 32)

pe_status rt_park_init(rt_park *p, pe_err *err)
{
    atomic_init(&p->word, 0);
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc != 0)
        return pe_fail(err, PE_ENOMEM, "cannot create a mutex for a queue: %s", strerror(rc));
    rc = pthread_cond_init(&p->cv, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&p->mu);
        return pe_fail(err, PE_ENOMEM, "cannot create a condition variable for a queue: %s",
                       strerror(rc));
    }
    /* Read outside the mutex on purpose: not data for helgrind/DRD. */
    RT_IGNORE_WORD(p->word);
    return PE_OK;
}

void rt_park_destroy(rt_park *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    RT_UNIGNORE_WORD(p->word);
}

uint32_t rt_park_prepare(rt_park *p)
{
    return EPOCH(atomic_fetch_add_explicit(&p->word, 1, memory_order_seq_cst));
}

void rt_park_cancel(rt_park *p, uint32_t key)
{
    uint64_t w = atomic_load_explicit(&p->word, memory_order_relaxed);
    while (EPOCH(w) == key) /* else a notify already cleared the count */
        if (atomic_compare_exchange_weak_explicit(&p->word, &w, w - 1, memory_order_seq_cst,
                                                  memory_order_relaxed))
            return;
}

void rt_park_wait(rt_park *p, uint32_t key)
{
    pthread_mutex_lock(&p->mu);
    while (EPOCH(atomic_load_explicit(&p->word, memory_order_acquire)) == key)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void rt_park_notify_all(rt_park *p)
{
    /* new epoch, no waiters: wakes everyone who announced so far */
    uint64_t w = atomic_load_explicit(&p->word, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&p->word, &w,
                                                  (w & ~UINT64_C(0xffffffff)) + ONE_EPOCH,
                                                  memory_order_seq_cst, memory_order_relaxed))
        ;
    /* The broadcast is under the mutex: a waiter that read the old epoch holds the mutex
     * until it sleeps, so the broadcast finds it asleep. */
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}
