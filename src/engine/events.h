/* events.h: the engine's token events, from the replicas' threads to the clients.
 *
 * An unbounded FIFO (a growable ring under a mutex, a condition variable for waiters): a
 * replica never blocks on a client that is slow to take its events, so generation and
 * cancels always make progress. A client that never takes its events holds their memory.
 * `outstanding` counts the sequences whose final event has not been taken yet; `reserved`
 * those whose final event has not been pushed yet, each of which holds a free slot of the
 * ring from its submit on, so a final event is never lost to a ring that cannot grow.
 */
#ifndef PE_ENGINE_EVENTS_H
#define PE_ENGINE_EVENTS_H

#include <pthread.h>
#include <stddef.h>

#include "pengine/pengine.h"

typedef struct en_events {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pe_token_event *ring; /* (cap) */
    size_t head, n, cap;
    long outstanding;     /* sequences submitted whose final event was not taken */
    size_t reserved;      /* sequences whose final event was not pushed: free slots kept */
} en_events;

pe_status en_events_init(en_events *q);
void en_events_destroy(en_events *q);

/* One more sequence will deliver a final event: its slot is reserved now (PE_ENOMEM when
 * the ring cannot grow to hold it; the sequence must then not be submitted). */
pe_status en_events_expect(en_events *q);
/* A sequence that was counted will not deliver one after all (its submit failed). */
void en_events_unexpect(en_events *q);
/* Appends ev and wakes a waiter. A final event always fits (its slot was reserved); a
 * token event gets PE_ENOMEM when the ring cannot grow. */
pe_status en_events_push(en_events *q, const pe_token_event *ev);
/* Takes the oldest event: PE_EAGAIN when none (block: 0), or when none is outstanding. */
pe_status en_events_take(en_events *q, pe_token_event *ev, int block);

#endif
