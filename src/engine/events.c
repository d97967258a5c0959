/* events.c: the engine's token-event FIFO (events.h). */
#include "engine/events.h"

#include <stdlib.h>
#include <string.h>

pe_status en_events_init(en_events *q)
{
    memset(q, 0, sizeof *q);
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return PE_ENOMEM;
    if (pthread_cond_init(&q->cv, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        return PE_ENOMEM;
    }
    return PE_OK;
}

void en_events_destroy(en_events *q)
{
    free(q->ring);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    memset(q, 0, sizeof *q);
}

/* Grows the ring (under mu) to hold at least need events; PE_ENOMEM when it cannot. */
static pe_status make_room(en_events *q, size_t need)
{
    if (need <= q->cap)
        return PE_OK;
    size_t cap = q->cap ? q->cap : 256;
    while (cap < need)
        cap *= 2;
    pe_token_event *r = malloc(cap * sizeof *r);
    if (!r)
        return PE_ENOMEM;
    for (size_t i = 0; i < q->n; i++)
        r[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = r;
    q->cap = cap;
    q->head = 0;
    return PE_OK;
}

pe_status en_events_expect(en_events *q)
{
    pthread_mutex_lock(&q->mu);
    pe_status s = make_room(q, q->n + q->reserved + 1);
    if (s == PE_OK) {
        q->reserved++;
        q->outstanding++;
    }
    pthread_mutex_unlock(&q->mu);
    return s;
}

void en_events_unexpect(en_events *q)
{
    pthread_mutex_lock(&q->mu);
    q->reserved--;
    q->outstanding--;
    pthread_cond_broadcast(&q->cv); /* a waiter may now have nothing to wait for */
    pthread_mutex_unlock(&q->mu);
}

pe_status en_events_push(en_events *q, const pe_token_event *ev)
{
    pthread_mutex_lock(&q->mu);
    if (ev->finish != PE_FINISH_NONE) {
        q->reserved--; /* its slot: n + reserved <= cap held before */
    } else if (make_room(q, q->n + q->reserved + 1) != PE_OK) {
        pthread_mutex_unlock(&q->mu);
        return PE_ENOMEM;
    }
    q->ring[(q->head + q->n) % q->cap] = *ev;
    q->n++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return PE_OK;
}

pe_status en_events_take(en_events *q, pe_token_event *ev, int block)
{
    pthread_mutex_lock(&q->mu);
    while (block && q->n == 0 && q->outstanding > 0)
        pthread_cond_wait(&q->cv, &q->mu);
    if (q->n == 0) {
        pthread_mutex_unlock(&q->mu);
        return PE_EAGAIN;
    }
    *ev = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    if (ev->finish != PE_FINISH_NONE)
        q->outstanding--;
    pthread_mutex_unlock(&q->mu);
    return PE_OK;
}
