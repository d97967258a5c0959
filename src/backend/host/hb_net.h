/* hb_net.h: the hook of the host communicators into MPI (src/backend/host/mpi/): worlds
 * whose ranks live in several processes ("net" worlds, hb_world.net != NULL).
 *
 * Built only with PE_HAVE_MPI; without it every function here is a stub (no world is ever
 * a net world, no send is ever an MPI send) and the host ops table has no
 * comm_create_procs. No MPI header is seen outside src/backend/host/mpi/.
 */
#ifndef PE_BACKEND_HOST_HB_NET_H
#define PE_BACKEND_HOST_HB_NET_H

#include "backend/host/hb_comm.h"

typedef struct hb_net hb_net; /* a world's processes, buffers and MPI ids (mpi/hn.h) */

#if defined(PE_HAVE_MPI)

/* be_ops.comm_create_procs (backend.h): one process is a plain single-process world. */
pe_status hb_net_create_procs(be_device *const *devs, int n, const be_procs *procs,
                              be_comm **out, pe_err *err);
/* comm_split of a net world (parents: this process's ranks, NULL elsewhere). */
pe_status hb_net_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                       pe_err *err);
/* Frees w->net (MPI sends of its ranks still in flight are dropped, each a failed send). */
void hb_net_free(hb_world *w);

/* The collectives and point to point of a net world (backend.h's semantics). The
 * collectives come from hb_coll.c's, after its argument checks: bad says they failed for
 * this rank (its message is in c->dev), so that every rank fails alike. */
pe_status hb_net_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count,
                               int bad);
pe_status hb_net_allgather(be_comm *c, const float *send, float *recv, size_t count, int bad);
pe_status hb_net_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count,
                                int bad);
pe_status hb_net_broadcast(be_comm *c, float *buf, size_t count, int root, int bad);
pe_status hb_net_barrier(be_comm *c);
/* Whether peer (a valid rank of c) lives in another process. */
int hb_net_remote(const be_comm *c, int peer);
pe_status hb_net_send(be_comm *c, const float *buf, size_t count, int peer);
pe_status hb_net_recv(be_comm *c, float *buf, size_t count, int peer);

/* Waits until every MPI send posted on p finished (or its world was aborted); returns
 * how many failed. synchronize's part for sends to other processes. */
size_t hb_net_sync(hb_pending *p);
/* Frees p's list of MPI sends (at p's last release; it is empty then). */
void hb_net_pending_free(hb_pending *p);

#else

static inline pe_status hb_net_split(be_comm *const *parents, int n, const int *colors,
                                     be_comm **out, pe_err *err)
{
    (void)parents, (void)n, (void)colors, (void)out;
    return pe_fail(err, PE_EINVAL, "comm_split: built without MPI");
}
static inline void hb_net_free(hb_world *w) { (void)w; }
static inline pe_status hb_net_allreduce_sum(be_comm *c, const float *send, float *recv,
                                             size_t count, int bad)
{
    (void)c, (void)send, (void)recv, (void)count, (void)bad;
    return PE_EINVAL;
}
static inline pe_status hb_net_allgather(be_comm *c, const float *send, float *recv,
                                         size_t count, int bad)
{
    (void)c, (void)send, (void)recv, (void)count, (void)bad;
    return PE_EINVAL;
}
static inline pe_status hb_net_reduce_scatter(be_comm *c, const float *send, float *recv,
                                              size_t count, int bad)
{
    (void)c, (void)send, (void)recv, (void)count, (void)bad;
    return PE_EINVAL;
}
static inline pe_status hb_net_broadcast(be_comm *c, float *buf, size_t count, int root,
                                         int bad)
{
    (void)c, (void)buf, (void)count, (void)root, (void)bad;
    return PE_EINVAL;
}
static inline pe_status hb_net_barrier(be_comm *c)
{
    (void)c;
    return PE_EINVAL;
}
static inline int hb_net_remote(const be_comm *c, int peer)
{
    (void)c, (void)peer;
    return 0;
}
static inline pe_status hb_net_send(be_comm *c, const float *buf, size_t count, int peer)
{
    (void)c, (void)buf, (void)count, (void)peer;
    return PE_EINVAL;
}
static inline pe_status hb_net_recv(be_comm *c, float *buf, size_t count, int peer)
{
    (void)c, (void)buf, (void)count, (void)peer;
    return PE_EINVAL;
}
static inline size_t hb_net_sync(hb_pending *p)
{
    (void)p;
    return 0;
}
static inline void hb_net_pending_free(hb_pending *p) { (void)p; }

#endif

#endif
