/* queue.c: the bounded MPMC ring (Vyukov's per-slot sequence numbers) with parking.
 *
 * Slot i of lap L is free for the producer that claims position p = L*cap + i when its
 * seq == p, and holds an item for the consumer of position p when seq == p + 1; the
 * consumer hands it back to the next lap by setting seq = p + cap. Producers claim
 * positions by CAS on tail, consumers by CAS on head.
 *
 * Close sets RT_CLOSED, the top bit of tail, with one atomic OR: from then on no producer
 * can claim a position (its CAS compares against a tail without the bit), so every push
 * is ordered either before the close (and will be drained) or after it (and fails). A
 * consumer that finds the slot at head empty reports PE_ECLOSED only when tail is closed
 * and equal to head; a claimed but unfinished push keeps it waiting for that item.
 *
 * Blocking: a push or pop that finds the queue full or empty spins (bounded, with
 * growing pauses), then announces itself on an eventcount (park.h) and re-checks the
 * positions, not the slots: a consumer sleeps only when tail == head (nothing claimed by
 * any producer), a producer only when tail - head == capacity (no slot claimed by any
 * consumer). Producers read the consumers' eventcount right after their CAS on tail, and
 * consumers the producers' right after their CAS on head (seq_cst RMW, then seq_cst
 * load: the Dekker pairing described in park.h), and notify after they publish when
 * someone was announced. So the fast path pays no fence beyond the CAS it already does;
 * slots are published with plain release stores.
 *
 * A claimed but unpublished slot (its owner preempted between CAS and publish) makes the
 * others retry (spin, yield) rather than sleep: it is a few instructions from done.
 */
#include "runtime/queue.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/annotate.h"
#include "runtime/park.h"

#define RT_CACHE_LINE 64
#define RT_CLOSED (UINT64_C(1) << 63)
/* The spin before parking; see spin_pause. */
#ifndef RT_SPIN_ROUNDS
#define RT_SPIN_ROUNDS 6
#endif
#ifndef RT_SPIN_MAX_SHIFT
#define RT_SPIN_MAX_SHIFT 6
#endif

typedef struct rt_slot {
    _Atomic uint64_t seq;
    void *item;
} rt_slot;

struct rt_queue {
    /* read-only after creation */
    rt_slot *slots; /* (capacity) */
    uint64_t mask;  /* capacity - 1 */
    /* each hot word on its own cache line: producers write tail, consumers write head */
    alignas(RT_CACHE_LINE) _Atomic uint64_t tail; /* next position to push | RT_CLOSED */
    alignas(RT_CACHE_LINE) _Atomic uint64_t head; /* next position to pop */
    alignas(RT_CACHE_LINE) rt_park not_empty;     /* consumers wait here */
    alignas(RT_CACHE_LINE) rt_park not_full;      /* producers wait here */
};

pe_status rt_queue_create(size_t capacity, rt_queue **out)
{
    *out = NULL;
    if (capacity < 2 || (capacity & (capacity - 1)) != 0)
        return PE_EINVAL;
    if (capacity > ((size_t)1 << 40))
        return PE_EINVAL;
    rt_queue *q = aligned_alloc(RT_CACHE_LINE, sizeof *q);
    if (!q)
        return PE_ENOMEM;
    memset(q, 0, sizeof *q);
    size_t bytes = capacity * sizeof(rt_slot);
    bytes = (bytes + RT_CACHE_LINE - 1) / RT_CACHE_LINE * RT_CACHE_LINE;
    q->slots = aligned_alloc(RT_CACHE_LINE, bytes);
    if (!q->slots) {
        free(q);
        return PE_ENOMEM;
    }
    if (rt_park_init(&q->not_empty, NULL) != PE_OK) {
        free(q->slots);
        free(q);
        return PE_ENOMEM;
    }
    if (rt_park_init(&q->not_full, NULL) != PE_OK) {
        rt_park_destroy(&q->not_empty);
        free(q->slots);
        free(q);
        return PE_ENOMEM;
    }
    q->mask = capacity - 1;
    atomic_init(&q->tail, 0);
    atomic_init(&q->head, 0);
    RT_IGNORE_WORD(q->tail);
    RT_IGNORE_WORD(q->head);
    for (size_t i = 0; i < capacity; i++) {
        atomic_init(&q->slots[i].seq, i);
        q->slots[i].item = NULL;
        RT_IGNORE_WORD(q->slots[i].seq);
        /* No happens-before here: the slots reach their first producer through what hands
         * it the queue (its thread's creation, a lock), which both tools see. Annotating
         * every slot kept a DRD segment alive per slot (thousands per engine) and made the
         * decoder tests 4x slower under DRD. */
    }
    *out = q;
    return PE_OK;
}

void rt_queue_destroy(rt_queue *q)
{
    if (!q)
        return;
    rt_park_destroy(&q->not_empty);
    rt_park_destroy(&q->not_full);
    for (uint64_t i = 0; i <= q->mask; i++) {
        RT_HAPPENS_FORGET(&q->slots[i]);
        RT_UNIGNORE_WORD(q->slots[i].seq);
    }
    RT_HAPPENS_FORGET(&q->tail);
    RT_UNIGNORE_WORD(q->tail);
    RT_UNIGNORE_WORD(q->head);
    free(q->slots);
    free(q);
}

pe_status rt_queue_try_push(rt_queue *q, void *item)
{
    uint64_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
    rt_slot *s;
    for (;;) {
        if (pos & RT_CLOSED)
            return PE_ECLOSED;
        s = &q->slots[pos & q->mask];
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t diff = (int64_t)(seq - pos);
        if (diff == 0) {
            /* on failure pos is reloaded (and may carry RT_CLOSED now) */
            if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
                                                      memory_order_seq_cst,
                                                      memory_order_relaxed))
                break;
        } else if (diff < 0) { /* the consumer of the previous lap has not freed it: full */
            pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
            return (pos & RT_CLOSED) ? PE_ECLOSED : PE_EAGAIN;
        } else { /* another producer took pos */
            pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
        }
    }
    unsigned sleepers = rt_park_waiters(&q->not_empty); /* after the CAS: see park.h */
    RT_HAPPENS_AFTER(s); /* pairs with the consumer that freed the slot (none on lap 0) */
    s->item = item;
    RT_HAPPENS_BEFORE(s);
    atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
    if (sleepers)
        rt_park_notify_all(&q->not_empty);
    return PE_OK;
}

pe_status rt_queue_try_pop(rt_queue *q, void **item)
{
    uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
    rt_slot *s;
    for (;;) {
        s = &q->slots[pos & q->mask];
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t diff = (int64_t)(seq - (pos + 1));
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
                                                      memory_order_seq_cst,
                                                      memory_order_relaxed))
                break;
        } else if (diff < 0) {
            /* Not filled yet, so nobody popped past it: pos is the current head. */
            uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
            if ((tail & RT_CLOSED) && (tail & ~RT_CLOSED) == pos) {
                RT_HAPPENS_AFTER(&q->tail); /* pairs with rt_queue_close */
                return PE_ECLOSED;
            }
            return PE_EAGAIN;
        } else { /* another consumer took pos */
            pos = atomic_load_explicit(&q->head, memory_order_relaxed);
        }
    }
    unsigned sleepers = rt_park_waiters(&q->not_full); /* after the CAS: see park.h */
    RT_HAPPENS_AFTER(s); /* pairs with the producer that published the item */
    *item = s->item;
    RT_HAPPENS_BEFORE(s);
    atomic_store_explicit(&s->seq, pos + q->mask + 1, memory_order_release);
    if (sleepers)
        rt_park_notify_all(&q->not_full);
    return PE_OK;
}

/* Round i of a blocked push or pop waits 2^i pauses (at most 2^RT_SPIN_MAX_SHIFT) before
 * the next try; after RT_SPIN_ROUNDS rounds (6: 63 pauses, about 1.3 us at 20 ns a
 * pause) it parks. Short on purpose: a partner that is running right now is caught
 * without a sleep, while a long spin loses twice on a busy machine (it takes the CPU
 * the partner needs) and in 1P1C streaming (a consumer that parks lets the producer
 * run ahead, and then drains a batch without fighting over the same cache line):
 * 12 rounds measured 1.7x the mutex queue's items/s at 1P1C, 0 to 7 rounds 2-5x. */
static void spin_pause(int round)
{
    int n = 1 << (round < RT_SPIN_MAX_SHIFT ? round : RT_SPIN_MAX_SHIFT);
    for (int i = 0; i < n; i++)
        rt_cpu_relax();
}

/* Whether a blocked push may sleep: every slot is queued and no consumer has claimed one
 * it is about to free. Reads head with seq_cst after the announcement (park.h). */
static int may_sleep_full(rt_queue *q)
{
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&q->head, memory_order_seq_cst);
    return !(tail & RT_CLOSED) && tail - head > q->mask;
}

/* Whether a blocked pop may sleep: no producer has claimed a position (tail == head). */
static int may_sleep_empty(rt_queue *q)
{
    uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_seq_cst);
    return tail == head; /* a closed tail carries RT_CLOSED, so never equal */
}

pe_status rt_queue_push(rt_queue *q, void *item)
{
    for (;;) {
        pe_status s = rt_queue_try_push(q, item);
        for (int i = 0; s == PE_EAGAIN && i < RT_SPIN_ROUNDS; i++) {
            spin_pause(i);
            s = rt_queue_try_push(q, item);
        }
        if (s != PE_EAGAIN)
            return s;
        uint32_t key = rt_park_prepare(&q->not_full);
        if (may_sleep_full(q)) {
            rt_park_wait(&q->not_full, key);
        } else {
            rt_park_cancel(&q->not_full, key);
            sched_yield(); /* a consumer is freeing a slot: let it run */
        }
    }
}

pe_status rt_queue_pop(rt_queue *q, void **item)
{
    for (;;) {
        pe_status s = rt_queue_try_pop(q, item);
        for (int i = 0; s == PE_EAGAIN && i < RT_SPIN_ROUNDS; i++) {
            spin_pause(i);
            s = rt_queue_try_pop(q, item);
        }
        if (s != PE_EAGAIN)
            return s;
        uint32_t key = rt_park_prepare(&q->not_empty);
        if (may_sleep_empty(q)) {
            rt_park_wait(&q->not_empty, key);
        } else {
            rt_park_cancel(&q->not_empty, key);
            sched_yield(); /* items are queued or being published: retry */
        }
    }
}

void rt_queue_close(rt_queue *q)
{
    /* What the closer did before is seen by a consumer that finds the queue closed (the
     * OR releases, the consumer's load of tail acquires): a worker that exits on it may
     * then free what its owner read before closing. */
    RT_HAPPENS_BEFORE(&q->tail);
    atomic_fetch_or_explicit(&q->tail, RT_CLOSED, memory_order_seq_cst);
    rt_park_notify_all(&q->not_empty);
    rt_park_notify_all(&q->not_full);
}

size_t rt_queue_capacity(const rt_queue *q) { return (size_t)q->mask + 1; }

size_t rt_queue_size(const rt_queue *q)
{
    uint64_t head = atomic_load_explicit(&q->head, memory_order_seq_cst);
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_seq_cst) & ~RT_CLOSED;
    return tail > head ? (size_t)(tail - head) : 0;
}

unsigned rt_queue_waiting_pops(const rt_queue *q)
{
    return rt_park_waiters(&q->not_empty);
}

unsigned rt_queue_waiting_pushes(const rt_queue *q)
{
    return rt_park_waiters(&q->not_full);
}
