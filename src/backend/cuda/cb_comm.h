/* cb_comm.h: communicators of the CUDA backend: one group of n ranks made by one
 * comm_create, on NCCL (cb_nccl.c) or on the in-process peer path (cb_peer.c). cb_comm.c
 * picks the path and dispatches.
 *
 * Over MPI processes (mpi/cb_procs.c) a group holds all n ranks but only this process's
 * have a device (ranks[r].dev != NULL); the others are placeholders, and the group is
 * NCCL's: one ncclUniqueId for every process, each joining its own ranks
 * (ncclCommInitRank). */
#ifndef PE_CB_COMM_H
#define PE_CB_COMM_H

#include <stdatomic.h>

#include "backend/backend_select.h"
#include "backend/cuda/cb_internal.h"
#include "runtime/barrier.h"

typedef struct cb_group cb_group;
struct cb_nccl;
struct cb_peer;

struct be_comm {
    cb_group *g;
    int rank;
    be_device *dev; /* the device of this rank, owned by the rank's worker */
    unsigned seq;   /* collectives this rank has entered (peer path: event parity) */
    atomic_int in_call; /* NCCL path: 1 while this rank's thread is inside an NCCL call */
};

struct cb_group {
    be_comm_path path; /* BE_COMM_NCCL or BE_COMM_PEER */
    int n;
    int nlocal;        /* the ranks in this process (n unless the group spans processes) */
    int *ids;          /* (n) device ids, -1 for a rank of another process */
    be_comm *ranks;    /* (n) */
    atomic_int aborted;
    rt_barrier bar;       /* the rank threads' meeting (cb_rendezvous); aborted with g */
    pthread_mutex_t lock; /* the peer path's scratch bookkeeping */
    struct cb_nccl *nccl;
    struct cb_peer *peer;
};

/* NCCL's ncclUniqueId, opaque here (cb_nccl.c checks the size) so that the MPI part and
 * the fake-runtime tests need no nccl.h. */
typedef struct cb_nccl_id {
    char bytes[128]; /* NCCL_UNIQUE_ID_BYTES */
} cb_nccl_id;

/* comm_create for this process's ranks of an n-rank communicator spanning processes, in
 * two steps, so that every local check and allocation can fail (and the processes agree
 * on it) before NCCL is called, which would leave the other processes waiting in it:
 * cb_comm_prepare: devs[r] is rank r's device here, NULL where another process holds it;
 *   each local device must serve exactly one worker of this process (NCCL refuses a GPU
 *   twice in one communicator, and the peer path cannot leave the process). *out: the
 *   group, without communicators.
 * cb_comm_join: every process calls it with the same id; this process's ranks join with
 *   ncclCommInitRank, all in one NCCL group call. out[r] is rank r's handle, NULL
 *   elsewhere. On failure the group is freed.
 * cb_comm_unprepare frees a prepared group that will not join. */
pe_status cb_comm_prepare(be_device *const *devs, int n, cb_group **out, pe_err *err);
pe_status cb_comm_join(cb_group *g, const cb_nccl_id *id, be_comm **out, pe_err *err);
void cb_comm_unprepare(cb_group *g);

/* ---- NCCL (cb_nccl.c) ---- */
pe_status cb_nccl_create(cb_group *g, be_device *const *devs, pe_err *err);
/* A fresh id (ncclGetUniqueId) for a communicator that ranks will join with cb_comm_join. */
pe_status cb_nccl_new_id(cb_nccl_id *id, pe_err *err);
/* The NCCL parts of cb_comm_prepare (the handles and the barrier words) and cb_comm_join
 * (g's local ranks join, in one NCCL group call). */
pe_status cb_nccl_prepare(cb_group *g, pe_err *err);
pe_status cb_nccl_join(cb_group *g, const cb_nccl_id *id, pe_err *err);
/* ncclCommSplit of every local rank of parent in one NCCL group call: parent rank r becomes
 * rank sub[r] of groups[group[r]], whose nccl part it fills (a group with no local rank is
 * NULL and not made here). */
pe_status cb_nccl_split(cb_group *parent, const int *colors, const int *group, const int *sub,
                        cb_group **groups, pe_err *err);
/* Revokes every NCCL communicator of groups gs (flags already set), after waiting for the
 * calls in flight to leave NCCL; all revokes in one NCCL group call. */
void cb_nccl_abort(cb_group *const *gs, int n);
void cb_nccl_destroy(cb_group *g);
pe_status cb_nccl_allreduce(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_nccl_allgather(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_nccl_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_nccl_broadcast(be_comm *c, float *buf, size_t count, int root);
pe_status cb_nccl_send(be_comm *c, const float *buf, size_t count, int peer);
pe_status cb_nccl_recv(be_comm *c, float *buf, size_t count, int peer);
pe_status cb_nccl_barrier(be_comm *c);

/* ---- peer path (cb_peer.c) ---- */
pe_status cb_peer_create(cb_group *g, be_device *const *devs, pe_err *err);
void cb_peer_abort(cb_group *g);
void cb_peer_destroy(cb_group *g);
pe_status cb_peer_allreduce(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_peer_allgather(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_peer_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_peer_broadcast(be_comm *c, float *buf, size_t count, int root);
pe_status cb_peer_send(be_comm *c, const float *buf, size_t count, int peer);
pe_status cb_peer_recv(be_comm *c, float *buf, size_t count, int peer);
pe_status cb_peer_barrier(be_comm *c);

/* Returns once every rank of c's group called it (the rank threads are in this
 * process); PE_ECOMM when the group is aborted first. */
pe_status cb_rendezvous(be_comm *c, const char *what);

/* PE_ECOMM with "<what>: the communicator was aborted" in the rank's device error. */
pe_status cb_comm_aborted(be_comm *c, const char *what);

#endif
