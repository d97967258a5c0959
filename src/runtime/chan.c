/* chan.c: the one-way, abortable channel of chan.h. */
#include "runtime/chan.h"

#include <stdlib.h>
#include <string.h>

pe_status rt_chan_init(rt_chan *c, size_t nslots, size_t slot_bytes, pe_err *err)
{
    memset(c, 0, sizeof *c);
    c->nslots = nslots ? nslots : 1;
    c->slot_bytes = slot_bytes;
    c->slots = calloc(c->nslots, slot_bytes ? slot_bytes : 1);
    if (!c->slots)
        return pe_fail(err, PE_ENOMEM, "out of memory for a channel of %zu slots", c->nslots);
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->slots);
        c->slots = NULL;
        return pe_fail(err, PE_ENOMEM, "cannot create a channel's mutex");
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c->slots);
        c->slots = NULL;
        return pe_fail(err, PE_ENOMEM, "cannot create a channel's condition variable");
    }
    return PE_OK;
}

void rt_chan_destroy(rt_chan *c)
{
    if (!c->slots)
        return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    memset(c, 0, sizeof *c);
}

static void *slot_at(const rt_chan *c, uint64_t i)
{
    return c->slots + (size_t)(i % c->nslots) * c->slot_bytes;
}

pe_status rt_chan_send_begin(rt_chan *c, void **slot)
{
    pthread_mutex_lock(&c->mu);
    while (c->posted - c->done >= c->nslots && !c->aborted)
        pthread_cond_wait(&c->cv, &c->mu);
    int dead = c->aborted;
    *slot = dead ? NULL : slot_at(c, c->posted);
    pthread_mutex_unlock(&c->mu);
    return dead ? PE_ECOMM : PE_OK;
}

pe_status rt_chan_send_end(rt_chan *c)
{
    pthread_mutex_lock(&c->mu);
    int dead = c->aborted; /* an abort since send_begin: the slot is dropped unposted */
    if (!dead)
        c->posted++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return dead ? PE_ECOMM : PE_OK;
}

pe_status rt_chan_recv_begin(rt_chan *c, void **slot)
{
    pthread_mutex_lock(&c->mu);
    while (c->taken == c->posted && !c->aborted)
        pthread_cond_wait(&c->cv, &c->mu);
    int none = c->taken == c->posted; /* aborted, and abort dropped what was posted */
    *slot = none ? NULL : slot_at(c, c->taken++);
    pthread_mutex_unlock(&c->mu);
    return none ? PE_ECOMM : PE_OK;
}

void rt_chan_recv_end(rt_chan *c)
{
    pthread_mutex_lock(&c->mu);
    c->done++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

pe_status rt_chan_drain(rt_chan *c, void **last)
{
    pthread_mutex_lock(&c->mu);
    while (c->done < c->posted) /* after an abort, only slots being received: they finish */
        pthread_cond_wait(&c->cv, &c->mu);
    int lost = c->dropped != 0;
    if (last)
        *last = c->posted ? slot_at(c, c->posted - 1) : NULL;
    pthread_mutex_unlock(&c->mu);
    return lost ? PE_ECOMM : PE_OK;
}

size_t rt_chan_abort(rt_chan *c)
{
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    size_t dropped = (size_t)(c->posted - c->taken);
    c->posted = c->taken; /* untaken slots are gone; a taken one finishes */
    c->dropped += dropped;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return dropped;
}

int rt_chan_aborted(rt_chan *c)
{
    pthread_mutex_lock(&c->mu);
    int a = c->aborted;
    pthread_mutex_unlock(&c->mu);
    return a;
}
