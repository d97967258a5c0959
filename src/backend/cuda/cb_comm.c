/* cb_comm.c: comm_create/abort/destroy of the CUDA backend and the dispatch of every
 * collective to its path: NCCL when every device of the group is distinct and serves no
 * other worker, the in-process peer path when one appears twice (NCCL refuses that:
 * "Duplicate GPU detected") or also serves workers of other groups. The choice is
 * be_comm_path_for (backend.c), unit-tested without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cb_comm.h"

pe_status cb_comm_create(be_device *const *devs, int n, be_comm **out, pe_err *err)
{
    if (n < 1)
        return pe_fail(err, PE_EINVAL, "comm_create: %d ranks; need at least 1", n);
    for (int r = 0; r < n; r++)
        out[r] = NULL;
    cb_group *g = calloc(1, sizeof *g);
    int *ids = calloc((size_t)n, sizeof *ids);
    be_comm *ranks = calloc((size_t)n, sizeof *ranks);
    if (!g || !ids || !ranks) {
        free(g);
        free(ids);
        free(ranks);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of host memory for %d ranks", n);
    }
    for (int r = 0; r < n; r++) {
        ids[r] = devs[r]->id;
        ranks[r] = (be_comm){.g = g, .rank = r, .dev = devs[r], .seq = 0};
    }
    g->n = n;
    g->ids = ids;
    g->ranks = ranks;
    atomic_init(&g->aborted, 0);
    atomic_init(&g->arrived, 0);
    atomic_init(&g->gen, 0);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    /* A GPU opened by more workers than this group has ranks on it also serves other
     * groups: NCCL there could deadlock against their NCCL kernels (docs/cuda.md). */
    int shared = 0;
    for (int r = 0; r < n; r++) {
        int here = 0;
        for (int q = 0; q < n; q++)
            here += ids[q] == ids[r];
        shared |= cb_device_open_count(ids[r]) > here;
    }
    g->path = be_comm_path_for(PE_BACKEND_CUDA, ids, n, be_comm_force_peer(), shared, NULL);
    pe_status s = g->path == BE_COMM_NCCL ? cb_nccl_create(g, devs, err)
                                          : cb_peer_create(g, devs, err);
    if (s != PE_OK) {
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->lock);
        free(ids);
        free(ranks);
        free(g);
        return s;
    }
    for (int r = 0; r < n; r++)
        out[r] = &ranks[r];
    return PE_OK;
}

void cb_comm_abort(be_comm *comm)
{
    if (!comm)
        return;
    cb_group *g = comm->g;
    if (atomic_exchange(&g->aborted, 1))
        return;
    pthread_mutex_lock(&g->lock); /* wakes rendezvous and peer-path waiters */
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    if (g->path == BE_COMM_NCCL)
        cb_nccl_abort(g);
    else
        cb_peer_abort(g);
}

void cb_comm_destroy(be_comm **comms, int n)
{
    if (!comms || n < 1 || !comms[0])
        return;
    cb_group *g = comms[0]->g;
    if (g->path == BE_COMM_NCCL)
        cb_nccl_destroy(g);
    else
        cb_peer_destroy(g);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g->ids);
    free(g->ranks);
    free(g);
    for (int r = 0; r < n; r++)
        comms[r] = NULL;
}

pe_status cb_comm_aborted(be_comm *c, const char *what)
{
    return pe_fail(&c->dev->err, PE_ECOMM,
                   "%s on rank %d of %d (CUDA device %d): the communicator was aborted "
                   "because another rank failed; see the first error of the run",
                   what, c->rank, c->g->n, c->dev->id);
}

#define CB_SPINS 4000 /* rendezvous polls (about 100 us) before sleeping */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A generation counter: the last rank to arrive resets the count and bumps gen; the
 * others poll gen briefly, then sleep on cond (gen changes under lock, so no wake-up is
 * lost). */
pe_status cb_rendezvous(be_comm *c, const char *what)
{
    cb_group *g = c->g;
    unsigned g0 = atomic_load(&g->gen);
    if (atomic_fetch_add(&g->arrived, 1) + 1 == (unsigned)g->n) {
        atomic_store(&g->arrived, 0);
        pthread_mutex_lock(&g->lock);
        atomic_fetch_add(&g->gen, 1);
        pthread_cond_broadcast(&g->cond);
        pthread_mutex_unlock(&g->lock);
        return PE_OK;
    }
    for (int i = 0; i < CB_SPINS; i++) {
        if (atomic_load(&g->gen) != g0)
            return PE_OK;
        if (atomic_load(&g->aborted))
            return cb_comm_aborted(c, what);
        cpu_relax();
    }
    pthread_mutex_lock(&g->lock);
    while (atomic_load(&g->gen) == g0 && !atomic_load(&g->aborted))
        pthread_cond_wait(&g->cond, &g->lock);
    int ok = atomic_load(&g->gen) != g0;
    pthread_mutex_unlock(&g->lock);
    return ok ? PE_OK : cb_comm_aborted(c, what);
}

static int is_aborted(const be_comm *c) { return atomic_load(&c->g->aborted) != 0; }

static pe_status check_peer(be_comm *c, const char *what, int peer)
{
    if (peer < 0 || peer >= c->g->n || peer == c->rank)
        return pe_fail(&c->dev->err, PE_EINVAL, "%s: peer %d is not another rank of this "
                       "%d-rank communicator (this is rank %d)", what, peer, c->g->n, c->rank);
    return PE_OK;
}

pe_status cb_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "allreduce");
    return c->g->path == BE_COMM_NCCL ? cb_nccl_allreduce(c, send, recv, count)
                                      : cb_peer_allreduce(c, send, recv, count);
}

pe_status cb_allgather(be_comm *c, const float *send, float *recv, size_t count)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "allgather");
    if (count > SIZE_MAX / sizeof(float) / (size_t)c->g->n)
        return pe_fail(&c->dev->err, PE_EINVAL, "allgather: %zu elements x %d ranks overflows",
                       count, c->g->n);
    return c->g->path == BE_COMM_NCCL ? cb_nccl_allgather(c, send, recv, count)
                                      : cb_peer_allgather(c, send, recv, count);
}

pe_status cb_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "reduce_scatter");
    if (count > SIZE_MAX / sizeof(float) / (size_t)c->g->n)
        return pe_fail(&c->dev->err, PE_EINVAL,
                       "reduce_scatter: %zu elements x %d ranks overflows", count, c->g->n);
    return c->g->path == BE_COMM_NCCL ? cb_nccl_reduce_scatter(c, send, recv, count)
                                      : cb_peer_reduce_scatter(c, send, recv, count);
}

pe_status cb_broadcast(be_comm *c, float *buf, size_t count, int root)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "broadcast");
    if (root < 0 || root >= c->g->n)
        return pe_fail(&c->dev->err, PE_EINVAL, "broadcast: root %d is not a rank of this "
                       "%d-rank communicator", root, c->g->n);
    return c->g->path == BE_COMM_NCCL ? cb_nccl_broadcast(c, buf, count, root)
                                      : cb_peer_broadcast(c, buf, count, root);
}

pe_status cb_send(be_comm *c, const float *buf, size_t count, int peer)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "send");
    pe_status s = check_peer(c, "send", peer);
    if (s != PE_OK)
        return s;
    return c->g->path == BE_COMM_NCCL ? cb_nccl_send(c, buf, count, peer)
                                      : cb_peer_send(c, buf, count, peer);
}

pe_status cb_recv(be_comm *c, float *buf, size_t count, int peer)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "recv");
    pe_status s = check_peer(c, "recv", peer);
    if (s != PE_OK)
        return s;
    return c->g->path == BE_COMM_NCCL ? cb_nccl_recv(c, buf, count, peer)
                                      : cb_peer_recv(c, buf, count, peer);
}

pe_status cb_barrier(be_comm *c)
{
    if (is_aborted(c))
        return cb_comm_aborted(c, "barrier");
    return c->g->path == BE_COMM_NCCL ? cb_nccl_barrier(c) : cb_peer_barrier(c);
}

int cb_comm_rank(const be_comm *c) { return c->rank; }
int cb_comm_size(const be_comm *c) { return c->g->n; }
