/* hb_comm.h: a host communicator: n ranks that are threads of one process.
 *
 * One comm_create makes an hb_world shared by all n ranks (like ncclCommInitAll); rank r's
 * handle is &world->ranks[r]. Collectives work on the callers' own buffers: each rank
 * publishes its arguments in its slot, the barrier makes them visible, and every rank
 * reads its peers' buffers directly, so data is copied once (hb_coll.c). Point-to-point
 * messages go through one channel per (sender, receiver) pair (hb_p2p.c).
 */
#ifndef PE_BACKEND_HOST_HB_COMM_H
#define PE_BACKEND_HOST_HB_COMM_H

#include <stdalign.h>
#include <stdatomic.h>

#include "backend/host/hb_internal.h"
#include "runtime/barrier.h"
#include "runtime/chan.h"

#define HB_RING 16    /* sends one pair may have in flight before send blocks */
#define HB_SMALL 2048 /* elements: an all-reduce up to this size is direct for any n */

typedef enum hb_op {
    HB_OP_ALLREDUCE = 1,
    HB_OP_ALLGATHER,
    HB_OP_REDUCE_SCATTER,
    HB_OP_BROADCAST,
    HB_OP_BARRIER
} hb_op;

/* What rank r called, written by r before the first barrier of a collective and read by
 * every rank between that barrier and the last one. */
typedef struct hb_slot {
    alignas(64) hb_op op;
    size_t count;
    int root;
    int bad;           /* this rank's arguments failed its own checks */
    const float *send; /* (count or n * count, per op) */
    float *recv;
} hb_slot;

/* One message: the sender's buffer, read in place by the receiver. */
typedef struct hb_msg {
    const float *buf; /* (count) */
    size_t count;
} hb_msg;

/* Sender -> receiver messages, in order (runtime/chan.h: slots of hb_msg). */
typedef struct hb_chan {
    rt_chan ch;
    hb_pending *pend; /* the sender's device's sends in flight */
} hb_chan;

typedef struct hb_world hb_world;

struct be_comm {
    hb_world *w;
    int rank;
    be_device *dev;   /* for error messages; touched only by this rank's thread */
    hb_pending *pend; /* dev's sends in flight; the world holds a reference */
    float *scratch;   /* (HB_SMALL) this rank's sums before they go into an in-place recv */
};

struct hb_world {
    int n;
    rt_barrier bar;
    hb_slot *slots; /* (n) */
    hb_chan *chans; /* (n senders, n receivers): chans[from * n + to] */
    be_comm *ranks; /* (n) */
};

/* Whether [a, a + an) and [b, b + bn) (in floats) share memory. */
int hb_overlap(const float *a, size_t an, const float *b, size_t bn);

#endif
