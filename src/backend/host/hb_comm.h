/* hb_comm.h: a host communicator: n ranks that are threads of one process, or (a "net"
 * world, hb_net.h) n ranks spread over MPI processes.
 *
 * One comm_create makes an hb_world shared by all n ranks (like ncclCommInitAll); rank r's
 * handle is &world->ranks[r]. Collectives work on the callers' own buffers: each rank
 * publishes its arguments in its slot, the barrier makes them visible, and every rank
 * reads its peers' buffers directly, so data is copied once (hb_coll.c). Point-to-point
 * messages go through one channel per (sender, receiver) pair (hb_p2p.c).
 *
 * A net world holds here only the ranks [lo, lo + nl) of this process (nl == n, lo == 0 in
 * a single-process world): slots, channels, rank handles and the barrier are over those
 * local ranks, indexed by rank - lo; w->net (src/backend/host/mpi/) does the rest.
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
    int n;            /* ranks in all processes */
    int lo, nl;       /* this process's ranks: [lo, lo + nl) */
    rt_barrier bar;   /* over the nl local ranks */
    hb_slot *slots;   /* (nl) */
    hb_chan *chans;   /* (nl senders, nl receivers): chans[(from - lo) * nl + to - lo] */
    be_comm *ranks;   /* (nl): rank r's handle is ranks[r - lo] */
    struct hb_net *net; /* NULL: every rank is in this process (hb_net.h) */
};

/* Whether [a, a + an) and [b, b + bn) (in floats) share memory. */
int hb_overlap(const float *a, size_t an, const float *b, size_t bn);

/* A world of n ranks whose ranks [lo, lo + nl) are this process's, on devs (nl), without
 * handles handed out yet (w->ranks) and without w->net. */
pe_status hb_world_new(be_device *const *devs, int nl, int n, int lo, hb_world **out,
                       pe_err *err);
/* Frees a world nobody uses (its net part too), dropping messages still posted. */
void hb_world_destroy(hb_world *w);

/* dst(len) = sum over q in 0..n-1 of rows[q](len), added in rank order in float: the bits
 * of an all-reduce, same as hb_coll.c's. dst may be one of the rows. */
void hb_sum_rows(float *dst, const float *const *rows, int n, size_t len);

/* The collectives' shared pieces (hb_coll.c), for net worlds too (mpi/hn_coll.c). */
const char *hb_op_name(hb_op op);
/* PE_ECOMM with the message of a collective on an aborted communicator. */
pe_status hb_coll_aborted(be_comm *c, hb_op op);
/* Whether the n calls in slots (ranks first_rank, ...) agree with this rank's (op, count,
 * root); bad: this rank's own arguments failed. Else the message goes to c->dev. */
pe_status hb_slots_agree(be_comm *c, hb_op op, size_t count, int root, int bad,
                         const hb_slot *slots, int n, int first_rank);

#endif
