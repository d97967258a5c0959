/* queue.h: bounded multi-producer multi-consumer queue of pointers.
 *
 * A ring of per-slot sequence numbers on C11 atomics (Vyukov's bounded MPMC design),
 * power-of-two capacity, no allocation after creation. A waiting producer or consumer
 * spins briefly, then parks, so an idle queue burns no CPU. Nothing is dropped or
 * duplicated; items from one producer come out in the order it pushed them.
 */
#ifndef PE_RUNTIME_QUEUE_H
#define PE_RUNTIME_QUEUE_H

#include <stddef.h>

#include "common/error.h"

typedef struct rt_queue rt_queue;

/* capacity: a power of two >= 2, else PE_EINVAL (PE_ENOMEM when memory runs out). */
pe_status rt_queue_create(size_t capacity, rt_queue **out);
/* No thread may be inside a call. Items still queued are not freed (they are the caller's). */
void rt_queue_destroy(rt_queue *q);

/* PE_OK, PE_EAGAIN when full, PE_ECLOSED when closed (the item was not queued). */
pe_status rt_queue_try_push(rt_queue *q, void *item);
/* Blocks while full. PE_OK, or PE_ECLOSED when closed before there was room. */
pe_status rt_queue_push(rt_queue *q, void *item);

/* PE_OK, PE_EAGAIN when empty, PE_ECLOSED when closed and drained. */
pe_status rt_queue_try_pop(rt_queue *q, void **item);
/* Blocks while empty and open. PE_OK, or PE_ECLOSED once closed and drained. */
pe_status rt_queue_pop(rt_queue *q, void **item);

/* Closes the queue and wakes every waiter. Pushes fail from now on; pops drain what is
 * queued, then report PE_ECLOSED. Idempotent, any thread. */
void rt_queue_close(rt_queue *q);

size_t rt_queue_capacity(const rt_queue *q);
/* Items queued right now; exact only when no other thread is pushing or popping. */
size_t rt_queue_size(const rt_queue *q);

/* Threads blocked (or about to block) in rt_queue_pop / rt_queue_push right now; for
 * tests and statistics. */
unsigned rt_queue_waiting_pops(const rt_queue *q);
unsigned rt_queue_waiting_pushes(const rt_queue *q);

#endif
