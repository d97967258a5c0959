/* cb_nccl.c: collectives on NCCL for a group of distinct GPUs: one communicator per rank
 * from ncclCommInitAll, every call enqueued on the rank's own stream.
 *
 * Ordering: NCCL kernels block until their peers arrive, and one stream per worker runs
 * them in issue order, so the ranks of every communicator must issue their NCCL calls in
 * the same global order (docs/cuda.md says why that suffices); the engine does.
 * Abort (cb_comm_abort_all): the groups' flags first, so no call starts; then a wait for
 * the calls in flight to leave NCCL; then ncclCommRevoke (NCCL >= 2.28) of every
 * communicator in one group call, which stops in-flight operations without freeing the
 * communicators; comm_destroy frees them with ncclCommAbort. Older NCCL: ncclCommAbort at
 * once, after the wait.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "backend/cuda/cb_comm.h"
#include "runtime/clock.h"

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define CB_HAVE_REVOKE 1
#else
#define CB_HAVE_REVOKE 0
#endif

struct cb_nccl {
    ncclComm_t *comms; /* (n); NULL for the ranks of other processes */
    float **scratch;   /* (n) one float on each local rank's GPU, for the barrier of a
                        * group that spans processes (NULL entries otherwise) */
};

_Static_assert(sizeof(ncclUniqueId) == sizeof(cb_nccl_id), "cb_nccl_id is NCCL's id");

static pe_status nccl_fail(pe_err *err, ncclResult_t r, const char *call, ncclComm_t comm,
                           int rank, int dev)
{
    const char *detail = ncclGetLastError(comm);
    return pe_fail(err, r == ncclSystemError ? PE_EDEVICE : PE_ECOMM,
                   "%s on rank %d (CUDA device %d) failed: %s%s%s", call, rank, dev,
                   ncclGetErrorString(r), detail && *detail ? "; NCCL says: " : "",
                   detail ? detail : "");
}

/* The failure of a call on rank c: aborted communicators say so instead. */
static pe_status rank_fail(be_comm *c, ncclResult_t r, const char *call)
{
    if (atomic_load(&c->g->aborted))
        return cb_comm_aborted(c, call);
    return nccl_fail(&c->dev->err, r, call, c->g->nccl->comms[c->rank], c->rank, c->dev->id);
}

static void list_ids(const cb_group *g, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < g->n && used + 1 < len; r++) {
        if (g->ids[r] < 0) /* a rank of another process */
            continue;
        int w = snprintf(buf + used, len - used, "%s%d", used ? "," : "", g->ids[r]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

pe_status cb_nccl_create(cb_group *g, be_device *const *devs, pe_err *err)
{
    (void)devs;
    struct cb_nccl *x = calloc(1, sizeof *x);
    if (x)
        x->comms = calloc((size_t)g->n, sizeof *x->comms);
    if (!x || !x->comms) {
        free(x);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of host memory");
    }
    char ids[128];
    list_ids(g, ids, sizeof ids);
    int prev = 0;
    (void)cudaGetDevice(&prev);
    pe_status s = PE_OK;
    ncclResult_t r = ncclCommInitAll(x->comms, g->n, g->ids);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        s = pe_fail(err, PE_ECOMM,
                    "ncclCommInitAll on CUDA devices %s failed: %s%s%s; run with NCCL_DEBUG=WARN "
                    "for details",
                    ids, ncclGetErrorString(r), detail && *detail ? "; NCCL says: " : "",
                    detail ? detail : "");
        free(x->comms);
        free(x);
    } else {
        g->nccl = x;
    }
    (void)cudaSetDevice(prev);
    return s;
}

pe_status cb_nccl_new_id(cb_nccl_id *id, pe_err *err)
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        return pe_fail(err, PE_ECOMM, "ncclGetUniqueId failed: %s%s%s; run with "
                       "NCCL_DEBUG=WARN for details", ncclGetErrorString(r),
                       detail && *detail ? "; NCCL says: " : "", detail ? detail : "");
    }
    memcpy(id->bytes, &u, sizeof u);
    return PE_OK;
}

/* g's NCCL part with no communicator yet: the handles, and for a group that spans
 * processes one float on each local rank's GPU for the barrier. */
pe_status cb_nccl_prepare(cb_group *g, pe_err *err)
{
    struct cb_nccl *x = calloc(1, sizeof *x);
    if (x) {
        x->comms = calloc((size_t)g->n, sizeof *x->comms);
        x->scratch = calloc((size_t)g->n, sizeof *x->scratch);
    }
    if (!x || !x->comms || !x->scratch) {
        if (x) {
            free(x->comms);
            free(x->scratch);
        }
        free(x);
        return pe_fail(err, PE_ENOMEM, "NCCL communicator: out of host memory");
    }
    g->nccl = x; /* from here on, cb_nccl_destroy frees what was made */
    if (g->nlocal == g->n)
        return PE_OK;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    pe_status s = PE_OK;
    for (int r = 0; r < g->n && s == PE_OK; r++) {
        if (g->ids[r] < 0)
            continue;
        cudaError_t e = cudaSetDevice(g->ids[r]);
        if (e == cudaSuccess)
            e = cudaMalloc((void **)&x->scratch[r], sizeof(float));
        if (e != cudaSuccess)
            s = cb_cuda_fail(err, e, "cudaMalloc (barrier word)", g->ids[r]);
    }
    (void)cudaSetDevice(prev);
    return s;
}

pe_status cb_nccl_join(cb_group *g, const cb_nccl_id *id, pe_err *err)
{
    struct cb_nccl *x = g->nccl;
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    int prev = 0;
    (void)cudaGetDevice(&prev);
    /* One thread joins every local rank: inside one NCCL group, or the first
     * ncclCommInitRank would wait for the ranks this thread has not reached yet. */
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < g->n && r == ncclSuccess; k++) {
        if (g->ids[k] < 0)
            continue;
        (void)cudaSetDevice(g->ids[k]); /* NCCL takes the current device */
        r = ncclCommInitRank(&x->comms[k], g->n, u, k);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess)
        r = r2;
    (void)cudaSetDevice(prev);
    if (r == ncclSuccess)
        return PE_OK;
    char ids[128];
    list_ids(g, ids, sizeof ids);
    const char *detail = ncclGetLastError(NULL);
    return pe_fail(err, PE_ECOMM,
                   "ncclCommInitRank of %d of the %d ranks on CUDA devices %s of this process "
                   "failed: %s%s%s; every process must join with the same id (check that the "
                   "nodes reach each other: NCCL_SOCKET_IFNAME, NCCL_DEBUG=WARN)",
                   g->nlocal, g->n, ids, ncclGetErrorString(r),
                   detail && *detail ? "; NCCL says: " : "", detail ? detail : "");
}

pe_status cb_nccl_split(cb_group *parent, const int *colors, const int *group, const int *sub,
                        cb_group **groups, pe_err *err)
{
    int n = parent->n, ngroups = 0;
    for (int r = 0; r < n; r++)
        ngroups = group[r] + 1 > ngroups ? group[r] + 1 : ngroups;
    pe_status s = PE_OK;
    for (int gi = 0; gi < ngroups && s == PE_OK; gi++)
        if (groups[gi]) /* NULL: only other processes' ranks */
            s = cb_nccl_prepare(groups[gi], err);
    if (s != PE_OK)
        return s; /* the caller destroys the groups; a NULL comm is skipped */
    /* One thread splits every local rank: inside one NCCL group, or the first call would
     * wait for ranks this thread has not reached yet. key = parent rank keeps its order.
     * Over processes, the other processes split their own ranks in the same order. */
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < n && r == ncclSuccess; k++)
        if (parent->ids[k] >= 0)
            r = ncclCommSplit(parent->nccl->comms[k], colors[k], k,
                              &groups[group[k]]->nccl->comms[sub[k]], NULL);
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess)
        r = r2;
    if (r != ncclSuccess) {
        char ids[128];
        list_ids(parent, ids, sizeof ids);
        const char *detail = ncclGetLastError(NULL);
        return pe_fail(err, PE_ECOMM,
                       "ncclCommSplit of the communicator on CUDA devices %s failed: %s%s%s; "
                       "run with NCCL_DEBUG=WARN for details",
                       ids, ncclGetErrorString(r), detail && *detail ? "; NCCL says: " : "",
                       detail ? detail : "");
    }
    return PE_OK;
}

/* Waits until no thread of g's ranks is inside an NCCL call (bounded: a call blocked on a
 * dead peer must not hold the abort forever; the revoke that follows wakes it). */
static void drain_calls(cb_group *g, uint64_t deadline_ns)
{
    for (int k = 0; k < g->n; k++)
        while (atomic_load(&g->ranks[k].in_call) && rt_now_ns() < deadline_ns) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
}

void cb_nccl_abort(cb_group *const *gs, int n)
{
    /* The flags are set, so no NCCL call starts any more: once the calls in flight left
     * NCCL, nothing enqueues behind the revokes (a revoked communicator runs new work
     * normally again once it is quiescent). */
    uint64_t deadline = rt_now_ns() + 2000000000ull;
    for (int i = 0; i < n; i++)
        drain_calls(gs[i], deadline);
#if CB_HAVE_REVOKE
    /* One group call: each revoke sets its communicator's abort flags at once and waits
     * for its streams only at ncclGroupEnd, when every flag is set. */
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && r == ncclSuccess; i++)
        for (int k = 0; k < gs[i]->n && r == ncclSuccess; k++)
            if (gs[i]->nccl->comms[k])
                r = ncclCommRevoke(gs[i]->nccl->comms[k], NCCL_REVOKE_DEFAULT);
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess && r2 == ncclSuccess)
        return;
#endif
    /* No revoke (NCCL < 2.28) or it failed: abort and free them now; the calls drained,
     * and comm_destroy skips NULL. */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < gs[i]->n; k++) {
            if (gs[i]->nccl->comms[k])
                (void)ncclCommAbort(gs[i]->nccl->comms[k]);
            gs[i]->nccl->comms[k] = NULL;
        }
}

void cb_nccl_destroy(cb_group *g)
{
    struct cb_nccl *x = g->nccl;
    if (!x)
        return;
    int prev = 0, whole = 1; /* a failed split or join leaves local ranks without one */
    (void)cudaGetDevice(&prev);
    for (int k = 0; k < g->n; k++)
        whole &= g->ids[k] < 0 || x->comms[k] != NULL;
    if (atomic_load(&g->aborted) || !whole) {
        for (int k = 0; k < g->n; k++)
            if (x->comms[k])
                (void)ncclCommAbort(x->comms[k]);
    } else {
        /* One thread finalizes every rank: inside one group, or it would wait for ranks
         * it has not reached yet. */
        ncclResult_t r = ncclGroupStart();
        for (int k = 0; k < g->n && r == ncclSuccess; k++)
            if (x->comms[k])
                r = ncclCommFinalize(x->comms[k]);
        ncclResult_t r2 = ncclGroupEnd();
        for (int k = 0; k < g->n; k++) {
            if (!x->comms[k])
                continue;
            if (r == ncclSuccess && r2 == ncclSuccess)
                (void)ncclCommDestroy(x->comms[k]);
            else
                (void)ncclCommAbort(x->comms[k]);
        }
    }
    for (int k = 0; x->scratch && k < g->n; k++)
        if (x->scratch[k]) {
            (void)cudaSetDevice(g->ids[k]);
            (void)cudaFree(x->scratch[k]);
        }
    (void)cudaGetLastError();
    (void)cudaSetDevice(prev);
    free(x->comms);
    free(x->scratch);
    free(x);
    g->nccl = NULL;
}

#define COMM(c) ((c)->g->nccl->comms[(c)->rank])

/* One NCCL call on rank c, with c->in_call raised around it: an abort sets the group's
 * flag, then waits for in_call to drop, so no call enqueues after its revoke. */
#define NCCL_CALL(c, name, call)                                                              \
    do {                                                                                      \
        atomic_fetch_add(&(c)->in_call, 1);                                                   \
        pe_status s_ = PE_OK;                                                                 \
        if (atomic_load(&(c)->g->aborted)) {                                                  \
            s_ = cb_comm_aborted((c), (name));                                                \
        } else {                                                                              \
            ncclResult_t r_ = (call);                                                         \
            if (r_ != ncclSuccess)                                                            \
                s_ = rank_fail((c), r_, (name));                                              \
        }                                                                                     \
        atomic_fetch_sub(&(c)->in_call, 1);                                                   \
        return s_;                                                                            \
    } while (0)

pe_status cb_nccl_allreduce(be_comm *c, const float *send, float *recv, size_t count)
{
    NCCL_CALL(c, "ncclAllReduce",
              ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, COMM(c), c->dev->stream));
}

pe_status cb_nccl_allgather(be_comm *c, const float *send, float *recv, size_t count)
{
    NCCL_CALL(c, "ncclAllGather",
              ncclAllGather(send, recv, count, ncclFloat32, COMM(c), c->dev->stream));
}

pe_status cb_nccl_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count)
{
    NCCL_CALL(c, "ncclReduceScatter",
              ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, COMM(c),
                                c->dev->stream));
}

pe_status cb_nccl_broadcast(be_comm *c, float *buf, size_t count, int root)
{
    NCCL_CALL(c, "ncclBroadcast",
              ncclBroadcast(buf, buf, count, ncclFloat32, root, COMM(c), c->dev->stream));
}

pe_status cb_nccl_send(be_comm *c, const float *buf, size_t count, int peer)
{
    NCCL_CALL(c, "ncclSend", ncclSend(buf, count, ncclFloat32, peer, COMM(c), c->dev->stream));
}

pe_status cb_nccl_recv(be_comm *c, float *buf, size_t count, int peer)
{
    NCCL_CALL(c, "ncclRecv", ncclRecv(buf, count, ncclFloat32, peer, COMM(c), c->dev->stream));
}

/* The ranks are threads of this process: a host-side meeting, as on the host backend and
 * the peer path. (A one-element all-reduce plus a stream synchronize would also wait for
 * this rank's earlier sends to be received, which a barrier must not require.)
 * Over processes there is no shared host memory to meet in, so it is that all-reduce on
 * a word of the rank's GPU, then a wait for the rank's stream: there, a send not yet
 * received ahead of the barrier holds it back (its peer must post the receive first). */
pe_status cb_nccl_barrier(be_comm *c)
{
    if (c->g->nlocal == c->g->n)
        return cb_rendezvous(c, "barrier");
    pe_status s = cb_nccl_allreduce(c, c->g->nccl->scratch[c->rank],
                                    c->g->nccl->scratch[c->rank], 1);
    if (s != PE_OK)
        return s;
    cudaError_t e = cudaStreamSynchronize(c->dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&c->dev->err, e, "barrier", c->dev->id);
    /* a revoke ends the all-reduce early, without the peers */
    return atomic_load(&c->g->aborted) ? cb_comm_aborted(c, "barrier") : PE_OK;
}
