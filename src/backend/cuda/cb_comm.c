/* cb_comm.c: comm_create/abort/destroy of the CUDA backend and the dispatch of every
 * collective to its path: NCCL when every device of the group is distinct and serves no
 * other worker, the in-process peer path when one appears twice (NCCL refuses that:
 * "Duplicate GPU detected") or also serves workers of other groups. The choice is
 * be_comm_path_for (backend.c), unit-tested without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cb_comm.h"
#include "runtime/annotate.h"
#include "runtime/barrier.h"

/* A group of n ranks on devs (NULL: a rank of another process), with no path set up
 * yet. */
static pe_status group_new(be_device *const *devs, int n, cb_group **out, pe_err *err)
{
    *out = NULL;
    cb_group *g = calloc(1, sizeof *g);
    int *ids = calloc((size_t)n, sizeof *ids);
    be_comm *ranks = calloc((size_t)n, sizeof *ranks);
    if (!g || !ids || !ranks) {
        free(g);
        free(ids);
        free(ranks);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of host memory for %d ranks", n);
    }
    int nlocal = 0;
    for (int r = 0; r < n; r++) {
        ids[r] = devs[r] ? devs[r]->id : -1;
        nlocal += devs[r] != NULL;
        ranks[r] = (be_comm){.g = g, .rank = r, .dev = devs[r], .seq = 0};
        atomic_init(&ranks[r].in_call, 0);
        RT_IGNORE_WORD(ranks[r].in_call);
    }
    g->n = n;
    g->nlocal = nlocal;
    g->ids = ids;
    g->ranks = ranks;
    atomic_init(&g->aborted, 0);
    /* a synchronization word, read outside any lock on purpose (annotate.h) */
    RT_IGNORE_WORD(g->aborted);
    pthread_mutex_init(&g->lock, NULL);
    pe_status s = rt_barrier_init(&g->bar, nlocal, err); /* the threads of this process */
    if (s != PE_OK) {
        pthread_mutex_destroy(&g->lock);
        RT_UNIGNORE_WORD(g->aborted);
        free(ids);
        free(ranks);
        free(g);
        return s;
    }
    *out = g;
    return PE_OK;
}

/* Frees what group_new made (the path's part is freed before). */
static void group_free(cb_group *g)
{
    RT_UNIGNORE_WORD(g->aborted);
    for (int r = 0; r < g->n; r++)
        RT_UNIGNORE_WORD(g->ranks[r].in_call);
    rt_barrier_destroy(&g->bar);
    pthread_mutex_destroy(&g->lock);
    free(g->ids);
    free(g->ranks);
    free(g);
}

/* Frees g and its path (NCCL communicators or peer-path state). */
static void group_destroy(cb_group *g)
{
    if (g->path == BE_COMM_NCCL)
        cb_nccl_destroy(g);
    else
        cb_peer_destroy(g);
    group_free(g);
}

pe_status cb_comm_create(be_device *const *devs, int n, be_comm **out, pe_err *err)
{
    if (n < 1)
        return pe_fail(err, PE_EINVAL, "comm_create: %d ranks; need at least 1", n);
    for (int r = 0; r < n; r++)
        out[r] = NULL;
    cb_group *g;
    pe_status s = group_new(devs, n, &g, err);
    if (s != PE_OK)
        return s;
    /* A GPU opened by more workers than this group has ranks on it also serves other
     * groups: NCCL there could deadlock against their NCCL kernels (docs/cuda.md). */
    int shared = 0;
    for (int r = 0; r < n; r++) {
        int here = 0;
        for (int q = 0; q < n; q++)
            here += g->ids[q] == g->ids[r];
        shared |= cb_device_open_count(g->ids[r]) > here;
    }
    g->path = be_comm_path_for(PE_BACKEND_CUDA, g->ids, n, be_comm_force_peer(), shared, NULL);
    s = g->path == BE_COMM_NCCL ? cb_nccl_create(g, devs, err) : cb_peer_create(g, devs, err);
    if (s != PE_OK) {
        group_free(g);
        return s;
    }
    for (int r = 0; r < n; r++)
        out[r] = &g->ranks[r];
    return PE_OK;
}

pe_status cb_comm_prepare(be_device *const *devs, int n, cb_group **out, pe_err *err)
{
    *out = NULL;
    if (n < 1 || !devs)
        return pe_fail(err, PE_EINVAL, "comm_prepare: need n >= 1 ranks and a device array");
    int nlocal = 0;
    for (int r = 0; r < n; r++) {
        if (!devs[r])
            continue;
        nlocal++;
        int here = 0;
        for (int q = 0; q < n; q++)
            here += devs[q] && devs[q]->id == devs[r]->id;
        int workers = cb_device_open_count(devs[r]->id);
        if (here > 1 || workers > 1)
            return pe_fail(err, PE_EINVAL,
                           "CUDA device %d serves %d workers of this process, but a "
                           "communicator over processes runs on NCCL, which needs a GPU of "
                           "its own per worker; give each worker of a process its own GPU "
                           "(--gpus), or run one process per GPU",
                           devs[r]->id, here > workers ? here : workers);
    }
    if (nlocal == 0)
        return pe_fail(err, PE_EINVAL, "comm_prepare: none of the %d ranks is in this process",
                       n);
    cb_group *g;
    pe_status s = group_new(devs, n, &g, err);
    if (s != PE_OK)
        return s;
    g->path = BE_COMM_NCCL;
    s = cb_nccl_prepare(g, err);
    if (s != PE_OK) {
        cb_comm_unprepare(g);
        return s;
    }
    *out = g;
    return PE_OK;
}

void cb_comm_unprepare(cb_group *g)
{
    if (g)
        group_destroy(g); /* no communicator yet: only the words and the handles' array */
}

pe_status cb_comm_join(cb_group *g, const cb_nccl_id *id, be_comm **out, pe_err *err)
{
    for (int r = 0; r < g->n; r++)
        out[r] = NULL;
    pe_status s = cb_nccl_join(g, id, err);
    if (s != PE_OK) {
        atomic_store(&g->aborted, 1); /* half-made communicators are aborted, not finalized */
        group_destroy(g);
        return s;
    }
    for (int r = 0; r < g->n; r++)
        if (g->ranks[r].dev)
            out[r] = &g->ranks[r];
    return PE_OK;
}

/* The groups of a split take the parent's path: NCCL children come from ncclCommSplit of
 * the parent's communicators (cb_nccl_split); peer-path children are new peer groups. */
static pe_status split_groups(cb_group *parent, const int *colors, const int *group,
                              const int *sub, cb_group **groups, int ngroups, pe_err *err)
{
    int n = parent->n;
    be_device **devs = malloc((size_t)n * sizeof *devs);
    if (!devs)
        return pe_fail(err, PE_ENOMEM, "comm_split: out of host memory for %d ranks", n);
    pe_status s = PE_OK;
    for (int gi = 0; s == PE_OK && gi < ngroups; gi++) {
        int k = 0, here = 0;
        for (int r = 0; r < n; r++)
            if (group[r] == gi) {
                devs[k++] = parent->ranks[r].dev; /* NULL: another process's rank */
                here += parent->ranks[r].dev != NULL;
            }
        if (!here) /* wholly in other processes: nothing of it lives here */
            continue;
        s = group_new(devs, k, &groups[gi], err);
        if (s == PE_OK) {
            groups[gi]->path = parent->path;
            if (parent->path == BE_COMM_PEER && (s = cb_peer_create(groups[gi], devs, err)) != PE_OK) {
                group_free(groups[gi]);
                groups[gi] = NULL;
            }
        }
    }
    if (s == PE_OK && parent->path == BE_COMM_NCCL)
        s = cb_nccl_split(parent, colors, group, sub, groups, err);
    free(devs);
    return s;
}

pe_status cb_comm_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                        pe_err *err)
{
    if (n < 1 || !parents || !colors || !out)
        return pe_fail(err, PE_EINVAL, "comm_split: need n >= 1 ranks and non-NULL arrays");
    cb_group *parent = NULL;
    for (int r = 0; r < n && !parent; r++)
        parent = parents[r] ? parents[r]->g : NULL;
    if (!parent)
        return pe_fail(err, PE_EINVAL, "comm_split: every one of the %d parents is NULL", n);
    for (int r = 0; r < n; r++) {
        out[r] = NULL;
        /* over processes, the entries of the other processes' ranks are NULL */
        int local = parent->n == n && parent->ranks[r].dev != NULL;
        if (local ? !parents[r] || parents[r]->g != parent || parents[r]->rank != r
                  : parents[r] != NULL)
            return pe_fail(err, PE_EINVAL,
                           "comm_split: entry %d is not rank %d of the same %d-rank "
                           "communicator; pass every rank of one communicator this process "
                           "holds, in rank order (NULL for the ranks of other processes)",
                           r, r, n);
    }
    if (atomic_load(&parent->aborted))
        return pe_fail(err, PE_ECOMM, "comm_split: the parent communicator was aborted");
    int *group = malloc((size_t)n * sizeof *group), *sub = malloc((size_t)n * sizeof *sub);
    cb_group **groups = calloc((size_t)n, sizeof *groups);
    pe_status s = group && sub && groups
                      ? PE_OK
                      : pe_fail(err, PE_ENOMEM, "comm_split: out of host memory for %d ranks", n);
    int ngroups = s == PE_OK ? be_split_plan(colors, n, group, sub, err) : 0;
    if (ngroups < 0)
        s = PE_EINVAL;
    if (s == PE_OK)
        s = split_groups(parent, colors, group, sub, groups, ngroups, err);
    for (int gi = 0; gi < ngroups; gi++) {
        if (!groups[gi])
            continue;
        if (s != PE_OK) { /* half-made communicators are aborted, not finalized */
            atomic_store(&groups[gi]->aborted, 1);
            group_destroy(groups[gi]); /* a NULL nccl/peer part is skipped */
        } else {
            for (int r = 0; r < n; r++)
                if (group[r] == gi && parent->ranks[r].dev)
                    out[r] = &groups[gi]->ranks[sub[r]];
        }
    }
    free(group);
    free(sub);
    free(groups);
    return s;
}

/* Sets g's flag (no call starts after it) and wakes its host-side waiters; 0 when it was
 * aborted already. */
static int flag_aborted(cb_group *g)
{
    if (atomic_exchange(&g->aborted, 1))
        return 0;
    rt_barrier_abort(&g->bar); /* wakes the rank threads waiting to meet */
    return 1;
}

void cb_comm_abort_all(be_comm *const *comms, int n)
{
    /* Every group's flag first, then NCCL's revokes together: a revoke waits for its
     * streams, and a kernel of a communicator not yet revoked may sit in front. (Out of
     * host memory with more than 64 entries, the revokes go in chunks of 64 groups.) */
    cb_group *stack[64];
    cb_group **nccl = n > 64 ? malloc((size_t)n * sizeof *nccl) : NULL;
    int cap = nccl ? n : 64, nn = 0;
    if (!nccl)
        nccl = stack;
    for (int i = 0; comms && i < n; i++) {
        if (!comms[i])
            continue;
        cb_group *g = comms[i]->g;
        if (!flag_aborted(g))
            continue;
        if (g->path != BE_COMM_NCCL) {
            cb_peer_abort(g);
            continue;
        }
        nccl[nn++] = g;
        if (nn == cap) {
            cb_nccl_abort(nccl, nn);
            nn = 0;
        }
    }
    if (nn)
        cb_nccl_abort(nccl, nn);
    if (nccl != stack)
        free(nccl);
}

void cb_comm_abort(be_comm *comm) { cb_comm_abort_all(&comm, 1); }

void cb_comm_destroy(be_comm **comms, int n)
{
    for (int i = 0; comms && i < n; i++) {
        if (!comms[i])
            continue;
        cb_group *g = comms[i]->g;
        for (int r = i; r < n; r++)
            if (comms[r] && comms[r]->g == g)
                comms[r] = NULL;
        group_destroy(g);
    }
}

pe_status cb_comm_aborted(be_comm *c, const char *what)
{
    return pe_fail(&c->dev->err, PE_ECOMM,
                   "%s on rank %d of %d (CUDA device %d): the communicator was aborted "
                   "because another rank failed; see the first error of the run",
                   what, c->rank, c->g->n, c->dev->id);
}

/* Every rank of the group meets (runtime/barrier.h: spin briefly, then park; orders what
 * each did before it before what any does after, as helgrind and DRD are told). */
pe_status cb_rendezvous(be_comm *c, const char *what)
{
    if (rt_barrier_wait(&c->g->bar, 1) != PE_OK)
        return cb_comm_aborted(c, what);
    return PE_OK;
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
