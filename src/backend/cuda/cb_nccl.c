/* cb_nccl.c: collectives on NCCL for a group of distinct GPUs: one communicator per rank
 * from ncclCommInitAll, every call enqueued on the rank's own stream.
 *
 * Ordering: NCCL kernels block until their peers arrive, and one stream per worker runs
 * them in issue order, so the ranks of every communicator must issue their NCCL calls in
 * the same global order (docs/cuda.md says why that suffices); the engine does.
 * Abort: ncclCommRevoke (NCCL >= 2.28) stops in-flight operations without freeing the
 * communicators, so a rank racing with the abort never touches freed memory; comm_destroy
 * then frees them with ncclCommAbort. Older NCCL: ncclCommAbort at once.
 */
#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

#include "backend/cuda/cb_comm.h"

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define CB_HAVE_REVOKE 1
#else
#define CB_HAVE_REVOKE 0
#endif

struct cb_nccl {
    ncclComm_t *comms; /* (n) */
};

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
        int w = snprintf(buf + used, len - used, "%s%d", r ? "," : "", g->ids[r]);
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

pe_status cb_nccl_split(cb_group *parent, const int *colors, const int *group, const int *sub,
                        cb_group **groups, pe_err *err)
{
    int n = parent->n, ngroups = 0;
    for (int r = 0; r < n; r++)
        ngroups = group[r] + 1 > ngroups ? group[r] + 1 : ngroups;
    pe_status s = PE_OK;
    for (int gi = 0; gi < ngroups && s == PE_OK; gi++) {
        struct cb_nccl *x = calloc(1, sizeof *x);
        if (x)
            x->comms = calloc((size_t)groups[gi]->n, sizeof *x->comms);
        if (!x || !x->comms) {
            free(x);
            s = pe_fail(err, PE_ENOMEM, "comm_split: out of host memory");
        } else {
            groups[gi]->nccl = x;
        }
    }
    if (s != PE_OK)
        return s; /* the caller destroys the groups; a NULL comm is skipped */
    /* One thread splits every rank: inside one NCCL group, or the first call would wait
     * for ranks this thread has not reached yet. key = parent rank keeps its order. */
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; k < n && r == ncclSuccess; k++)
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

void cb_nccl_abort(cb_group *g)
{
    struct cb_nccl *x = g->nccl;
    for (int k = 0; x && k < g->n; k++) {
        if (!x->comms[k])
            continue;
#if CB_HAVE_REVOKE
        if (ncclCommRevoke(x->comms[k], NCCL_REVOKE_DEFAULT) == ncclSuccess)
            continue;
#endif
        (void)ncclCommAbort(x->comms[k]); /* frees it: comm_destroy skips NULL */
        x->comms[k] = NULL;
    }
}

void cb_nccl_destroy(cb_group *g)
{
    struct cb_nccl *x = g->nccl;
    if (!x)
        return;
    int prev = 0, whole = 1; /* a failed split leaves some ranks without a communicator */
    (void)cudaGetDevice(&prev);
    for (int k = 0; k < g->n; k++)
        whole &= x->comms[k] != NULL;
    if (atomic_load(&g->aborted) || !whole) {
        for (int k = 0; k < g->n; k++)
            if (x->comms[k])
                (void)ncclCommAbort(x->comms[k]);
    } else {
        /* One thread finalizes every rank: inside one group, or it would wait for ranks
         * it has not reached yet. */
        ncclResult_t r = ncclGroupStart();
        for (int k = 0; k < g->n && r == ncclSuccess; k++)
            r = ncclCommFinalize(x->comms[k]);
        ncclResult_t r2 = ncclGroupEnd();
        for (int k = 0; k < g->n; k++) {
            if (r == ncclSuccess && r2 == ncclSuccess)
                (void)ncclCommDestroy(x->comms[k]);
            else
                (void)ncclCommAbort(x->comms[k]);
        }
    }
    (void)cudaGetLastError();
    (void)cudaSetDevice(prev);
    free(x->comms);
    free(x);
    g->nccl = NULL;
}

#define COMM(c) ((c)->g->nccl->comms[(c)->rank])

pe_status cb_nccl_allreduce(be_comm *c, const float *send, float *recv, size_t count)
{
    ncclResult_t r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, COMM(c),
                                   c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclAllReduce");
}

pe_status cb_nccl_allgather(be_comm *c, const float *send, float *recv, size_t count)
{
    ncclResult_t r = ncclAllGather(send, recv, count, ncclFloat32, COMM(c), c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclAllGather");
}

pe_status cb_nccl_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count)
{
    ncclResult_t r = ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, COMM(c),
                                       c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclReduceScatter");
}

pe_status cb_nccl_broadcast(be_comm *c, float *buf, size_t count, int root)
{
    ncclResult_t r = ncclBroadcast(buf, buf, count, ncclFloat32, root, COMM(c), c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclBroadcast");
}

pe_status cb_nccl_send(be_comm *c, const float *buf, size_t count, int peer)
{
    ncclResult_t r = ncclSend(buf, count, ncclFloat32, peer, COMM(c), c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclSend");
}

pe_status cb_nccl_recv(be_comm *c, float *buf, size_t count, int peer)
{
    ncclResult_t r = ncclRecv(buf, count, ncclFloat32, peer, COMM(c), c->dev->stream);
    return r == ncclSuccess ? PE_OK : rank_fail(c, r, "ncclRecv");
}

/* The ranks are threads of this process: a host-side meeting, as on the host backend and
 * the peer path. (A one-element all-reduce plus a stream synchronize would also wait for
 * this rank's earlier sends to be received, which a barrier must not require.) */
pe_status cb_nccl_barrier(be_comm *c) { return cb_rendezvous(c, "barrier"); }
