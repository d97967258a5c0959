/* chan.h: a one-way channel between two threads of one process, for messages that stay the
 * sender's until the receiver is done with them (the buffers of a send, read in place).
 *
 * A ring of nslots fixed-size slots. The sender fills the next free slot and posts it; the
 * receiver takes the oldest posted slot, uses it, and marks it done, which frees it for the
 * sender again. send_begin blocks while nslots are posted and not done; recv_begin blocks
 * while nothing is posted; drain blocks until every posted slot is done. abort wakes them
 * all: waiting sends and receives fail, and the posted slots no receiver has taken are
 * dropped (the one being received finishes normally, since its receiver is not blocked).
 *
 * This is the in-process meeting point of point-to-point messages, for the host
 * backend's send/recv and the CUDA backend's peer path (which keeps its events in the
 * slots). Everything is under one mutex and condition variable, which helgrind and DRD
 * understand.
 */
#ifndef PE_RUNTIME_CHAN_H
#define PE_RUNTIME_CHAN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct rt_chan {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* any change: a post, a take, a done, an abort */
    uint64_t posted;     /* slots posted so far */
    uint64_t taken;      /* of those, taken by the receiver */
    uint64_t done;       /* of those, done (free again) */
    int aborted;
    uint64_t dropped;    /* posted slots an abort dropped untaken */
    size_t nslots, slot_bytes;
    unsigned char *slots; /* (nslots, slot_bytes), zeroed at init */
} rt_chan;

/* PE_ENOMEM (and a message) when it cannot be made. */
pe_status rt_chan_init(rt_chan *c, size_t nslots, size_t slot_bytes, pe_err *err);
/* No thread may be inside a call. */
void rt_chan_destroy(rt_chan *c);

/* Sender: the next free slot (blocks while every slot is in flight), or PE_ECOMM when the
 * channel is aborted. Fill it, then post it with send_end, which is PE_ECOMM (the slot not
 * posted) when an abort came in between. */
pe_status rt_chan_send_begin(rt_chan *c, void **slot);
pe_status rt_chan_send_end(rt_chan *c);

/* Receiver: the oldest posted slot (blocks while none), or PE_ECOMM when the channel is
 * aborted with nothing left to take. Use it, then free it with recv_end. */
pe_status rt_chan_recv_begin(rt_chan *c, void **slot);
void rt_chan_recv_end(rt_chan *c);

/* Sender: waits until every slot it posted is done (after an abort: the ones being
 * received); PE_ECOMM when an abort dropped some. last (may be NULL) gets the most recently
 * posted slot, or NULL if none was. */
pe_status rt_chan_drain(rt_chan *c, void **last);

/* Aborts the channel (idempotent, any thread): wakes every waiter; returns how many posted
 * slots were dropped untaken. */
size_t rt_chan_abort(rt_chan *c);
int rt_chan_aborted(rt_chan *c);

#endif
