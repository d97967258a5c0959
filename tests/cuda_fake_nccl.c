/* cuda_fake_nccl.c: a fake NCCL for test_cuda_engine_logic: the CUDA backend's NCCL path
 * (cb_nccl.c, with the engine's world communicator and the groups split from it) runs
 * without GPUs.
 *
 * The fake keeps NCCL's rules that our calls depend on, so breaking one fails the test:
 * ncclCommInitAll and ncclCommInitRank refuse a repeated device ("Duplicate GPU
 * detected"); ncclCommSplit or ncclCommInitRank of a multi-rank communicator from one
 * thread must sit inside ncclGroupStart/End (NCCL would wait there forever for the other
 * ranks); every rank of the parent must split (from this thread's group or from other
 * threads', as ranks of other processes do) and every rank of an id must join, or the
 * waiters fail after FAKE_WAIT_S seconds instead of hanging; ncclCommFinalize after
 * ncclCommRevoke is an error; every rank of a collective must call the same collective
 * with the same count.
 *
 * Streams run work at once (cuda_fake_runtime.c), so a collective runs when its last rank
 * arrives: each rank publishes its arguments, waits for the others, reads their buffers,
 * and waits again before it returns (nobody leaves while a peer may still read its
 * buffers). A send copies its data eagerly into the channel and returns, as a GPU's send
 * kernel may run as soon as its input is ready; recv takes the oldest message of the pair.
 * Revoke wakes every waiter with ncclRemoteError.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

/* How long a rank waits for the others of a split or a join before it calls the wait
 * endless, which NCCL would make it. */
#define FAKE_WAIT_S 10

typedef struct fake_msg {
    float *data; /* (count), a copy */
    size_t count;
    struct fake_msg *next;
} fake_msg;

typedef enum { OP_ALLREDUCE = 1, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BROADCAST } fake_op;

typedef struct fake_slot {
    fake_op op;
    const float *send;
    float *recv;
    size_t count;
    int root;
} fake_slot;

/* One rank's part of a split in progress. */
typedef struct split_req {
    int color, key;
    ncclComm_t *out;
} split_req;

typedef struct fake_world {
    int n;
    int *devs;   /* (n) */
    int refs;    /* ranks not yet destroyed */
    int revoked;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, computed, departed;
    unsigned gen_in, gen_mid, gen_out;
    fake_slot *slots;             /* (n) */
    fake_msg **head, **tail;      /* (n * n): [from * n + to] */
    /* the split in progress: each rank's request; done when all n are in */
    split_req *split;             /* (n), out == NULL: not asked yet */
    int split_asked;
    unsigned split_gen;           /* splits completed */
    ncclResult_t split_result;    /* of the last one */
    char split_msg[256];          /* and its error */
} fake_world;

struct ncclComm {
    fake_world *w;
    int rank;
};

static _Thread_local char last_error[256];
static _Thread_local int group_depth;

/* A communicator being made by ncclCommInitRank: ranks join under one id until all n are
 * in; the last one makes the world. */
typedef struct fake_join {
    ncclUniqueId id;
    int n, joined, left;  /* left: ranks that saw the result and no longer need it */
    int *devs;            /* (n) */
    ncclComm_t **outs;    /* (n) */
    int done;
    ncclResult_t result;
    char msg[256]; /* its error, for every rank (the last one in made it) */
    struct fake_join *next;
} fake_join;

static pthread_mutex_t joins_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t joins_cv = PTHREAD_COND_INITIALIZER;
static fake_join *joins;

/* A call queued inside a group: a split (parent != NULL) or a join. */
typedef struct pending_call {
    ncclComm_t parent;  /* a split: its parent, its color and key */
    int color, key;
    ncclComm_t *out;
    unsigned gen0;      /* the parent's split_gen when asked */
    ncclUniqueId id;    /* a join: its id, rank count, rank and device (the current one
                         * at the call, as NCCL takes it) */
    int nranks, rank, dev;
    fake_join *join;    /* and, once asked, its record */
} pending_call;

static _Thread_local pending_call *pending;
static _Thread_local int npending, cap_pending;

static ncclResult_t fail(ncclResult_t r, const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s", msg);
    return r;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage: return "invalid usage (fake NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake)";
    default: return "fake NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

static fake_world *world_new(int n, const int *devs)
{
    fake_world *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->n = n;
    w->refs = n;
    w->devs = malloc((size_t)n * sizeof *w->devs);
    w->slots = calloc((size_t)n, sizeof *w->slots);
    w->head = calloc((size_t)n * (size_t)n, sizeof *w->head);
    w->tail = calloc((size_t)n * (size_t)n, sizeof *w->tail);
    w->split = calloc((size_t)n, sizeof *w->split);
    if (!w->devs || !w->slots || !w->head || !w->tail || !w->split) {
        free(w->devs);
        free(w->slots);
        free(w->head);
        free(w->tail);
        free(w->split);
        free(w);
        return NULL;
    }
    memcpy(w->devs, devs, (size_t)n * sizeof *devs);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    return w;
}

static void world_free(fake_world *w)
{
    for (int i = 0; i < w->n * w->n; i++)
        for (fake_msg *m = w->head[i], *next; m; m = next) {
            next = m->next;
            free(m->data);
            free(m);
        }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->devs);
    free(w->slots);
    free(w->head);
    free(w->tail);
    free(w->split);
    free(w);
}

/* n handles of a new world on devs; *comms[r] is rank r. */
static ncclResult_t make_world(ncclComm_t *comms, int n, const int *devs)
{
    fake_world *w = world_new(n, devs);
    if (!w)
        return fail(ncclSystemError, "out of memory");
    for (int r = 0; r < n; r++) {
        comms[r] = malloc(sizeof *comms[r]);
        if (!comms[r]) {
            for (int q = 0; q < r; q++)
                free(comms[q]);
            world_free(w);
            return fail(ncclSystemError, "out of memory");
        }
        comms[r]->w = w;
        comms[r]->rank = r;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devlist)
{
    if (n < 1 || !comms || !devlist)
        return fail(ncclInvalidArgument, "ncclCommInitAll: bad arguments");
    for (int r = 0; r < n; r++)
        for (int q = 0; q < r; q++)
            if (devlist[q] == devlist[r])
                return fail(ncclInvalidUsage, "Duplicate GPU detected");
    return make_world(comms, n, devlist);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

/* The deadline of a wait that starts now. */
static struct timespec deadline(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += FAKE_WAIT_S;
    return t;
}

/* ---- splits ---- */

/* The children of pw once all n ranks asked (pw->mu held): ordered by (key, parent rank). */
static ncclResult_t split_world(fake_world *pw)
{
    int n = pw->n;
    if (n > 64)
        return fail(ncclInvalidUsage, "fake NCCL: at most 64 ranks");
    int done[64] = {0};
    for (int r = 0; r < n; r++) {
        if (done[r])
            continue;
        int color = pw->split[r].color, members[64], k = 0;
        if (color == NCCL_SPLIT_NOCOLOR) {
            *pw->split[r].out = NULL;
            done[r] = 1;
            continue;
        }
        for (int q = 0; q < n; q++) /* in parent order, then stable-sorted by key */
            if (!done[q] && pw->split[q].color == color) {
                members[k++] = q;
                done[q] = 1;
            }
        for (int i = 1; i < k; i++)
            for (int j = i; j > 0 && pw->split[members[j - 1]].key > pw->split[members[j]].key;
                 j--) {
                int t = members[j];
                members[j] = members[j - 1];
                members[j - 1] = t;
            }
        int devs[64];
        ncclComm_t made[64];
        for (int i = 0; i < k; i++)
            devs[i] = pw->devs[members[i]];
        ncclResult_t res = make_world(made, k, devs);
        if (res != ncclSuccess)
            return res;
        for (int i = 0; i < k; i++)
            *pw->split[members[i]].out = made[i];
    }
    return ncclSuccess;
}

/* Rank p->parent's request joins the split of its world; the last rank makes it. */
static ncclResult_t split_ask(pending_call *p)
{
    fake_world *w = p->parent->w;
    int r = p->parent->rank;
    pthread_mutex_lock(&w->mu);
    ncclResult_t res = ncclSuccess;
    if (w->split[r].out) {
        res = fail(ncclInvalidUsage, "ncclCommSplit: a rank split twice in one split");
    } else {
        w->split[r] = (split_req){p->color, p->key, p->out};
        p->gen0 = w->split_gen;
        if (++w->split_asked == w->n) {
            w->split_result = split_world(w);
            snprintf(w->split_msg, sizeof w->split_msg, "%s", last_error);
            memset(w->split, 0, (size_t)w->n * sizeof *w->split);
            w->split_asked = 0;
            w->split_gen++;
            pthread_cond_broadcast(&w->cv);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return res;
}

/* Waits until the split p asked for is made. */
static ncclResult_t split_wait(pending_call *p)
{
    fake_world *w = p->parent->w;
    struct timespec until = deadline();
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (w->split_gen == p->gen0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    ncclResult_t res;
    if (w->split_gen == p->gen0) { /* given up: the request leaves, so no late split writes
                                    * into handles the caller has freed by then */
        w->split[p->parent->rank] = (split_req){0, 0, NULL};
        w->split_asked--;
        res = fail(ncclInvalidUsage, "ncclCommSplit: not every rank of the communicator "
                   "split; NCCL would wait for the others forever");
    } else {
        res = w->split_result != ncclSuccess ? fail(w->split_result, w->split_msg) : ncclSuccess;
    }
    pthread_mutex_unlock(&w->mu);
    return res;
}

/* ---- joins (ncclCommInitRank) ---- */

/* Joins rank `rank` of an n-rank communicator under id, on the calling thread's device; the
 * last rank in makes the world. */
static ncclResult_t join_ask(const ncclUniqueId *id, int n, int rank, int dev, ncclComm_t *out,
                             fake_join **joined)
{
    if (n < 1 || n > 64 || rank < 0 || rank >= n)
        return fail(ncclInvalidArgument, "ncclCommInitRank: bad rank count or rank");
    pthread_mutex_lock(&joins_mu);
    fake_join *j = joins;
    while (j && memcmp(&j->id, id, sizeof *id))
        j = j->next;
    ncclResult_t res = ncclSuccess;
    if (!j) {
        j = calloc(1, sizeof *j);
        if (j) {
            j->devs = calloc((size_t)n, sizeof *j->devs);
            j->outs = calloc((size_t)n, sizeof *j->outs);
        }
        if (!j || !j->devs || !j->outs) {
            if (j) {
                free(j->devs);
                free(j->outs);
            }
            free(j);
            pthread_mutex_unlock(&joins_mu);
            return fail(ncclSystemError, "out of memory");
        }
        j->id = *id;
        j->n = n;
        j->next = joins;
        joins = j;
    }
    if (j->n != n || j->outs[rank] || j->done)
        res = fail(ncclInvalidUsage, "ncclCommInitRank: a rank joined twice, or with another "
                                     "rank count");
    if (res == ncclSuccess) {
        j->devs[rank] = dev;
        j->outs[rank] = out;
        if (++j->joined == n) {
            j->result = ncclSuccess;
            for (int r = 0; r < n && j->result == ncclSuccess; r++)
                for (int q = 0; q < r; q++)
                    if (j->devs[q] == j->devs[r]) {
                        j->result = fail(ncclInvalidUsage, "Duplicate GPU detected");
                        break;
                    }
            snprintf(j->msg, sizeof j->msg, "%s", last_error);
            ncclComm_t *made = j->result == ncclSuccess ? calloc((size_t)n, sizeof *made) : NULL;
            if (j->result == ncclSuccess)
                j->result = made ? make_world(made, n, j->devs)
                                 : fail(ncclSystemError, "out of memory");
            for (int r = 0; made && j->result == ncclSuccess && r < n; r++)
                *j->outs[r] = made[r];
            free(made);
            j->done = 1;
            pthread_cond_broadcast(&joins_cv);
        }
    }
    *joined = res == ncclSuccess ? j : NULL;
    pthread_mutex_unlock(&joins_mu);
    return res;
}

/* Waits until j's communicator is made (or never will be: then rank leaves it, so no late
 * join writes into its handle); the last rank to leave frees j. */
static ncclResult_t join_wait(fake_join *j, int rank)
{
    struct timespec until = deadline();
    pthread_mutex_lock(&joins_mu);
    int rc = 0;
    while (!j->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&joins_cv, &joins_mu, &until);
    ncclResult_t res = !j->done ? fail(ncclInvalidUsage, "ncclCommInitRank: not every rank of "
                                       "the id joined; NCCL would wait for the others forever")
                       : j->result != ncclSuccess ? fail(j->result, j->msg)
                                                  : ncclSuccess;
    if (!j->done) {
        j->outs[rank] = NULL;
        j->joined--;
    }
    if (j->done ? ++j->left == j->n : j->joined == 0) {
        fake_join **at = &joins;
        while (*at != j)
            at = &(*at)->next;
        *at = j->next;
        free(j->devs);
        free(j->outs);
        free(j);
    }
    pthread_mutex_unlock(&joins_mu);
    return res;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static atomic_uint next;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake nccl id %u", atomic_fetch_add(&next, 1));
    return ncclSuccess;
}

static ncclResult_t queue_call(pending_call call)
{
    if (npending == cap_pending) {
        int cap = cap_pending ? 2 * cap_pending : 16;
        pending_call *p = realloc(pending, (size_t)cap * sizeof *p);
        if (!p)
            return fail(ncclSystemError, "out of memory");
        pending = p;
        cap_pending = cap;
    }
    pending[npending++] = call;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth < 1)
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0)
        return ncclSuccess;
    /* Every call of the group is asked first and waited for after, as NCCL runs a group's
     * calls together: one thread may hold several ranks of one communicator. */
    ncclResult_t res = ncclSuccess;
    int asked = 0;
    for (; asked < npending && res == ncclSuccess; asked++)
        res = pending[asked].parent ? split_ask(&pending[asked])
                                    : join_ask(&pending[asked].id, pending[asked].nranks,
                                               pending[asked].rank, pending[asked].dev,
                                               pending[asked].out, &pending[asked].join);
    if (res != ncclSuccess)
        asked--; /* the failed one holds nothing */
    for (int i = 0; i < asked; i++) {
        ncclResult_t r = pending[i].parent ? split_wait(&pending[i])
                                           : join_wait(pending[i].join, pending[i].rank);
        if (res == ncclSuccess)
            res = r;
    }
    /* the list is per thread: freed here, or a thread that splits and exits leaks it */
    free(pending);
    pending = NULL;
    npending = cap_pending = 0;
    return res;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    (void)config;
    if (!comm || !newcomm)
        return fail(ncclInvalidArgument, "ncclCommSplit: NULL argument");
    if (comm->w->revoked)
        return fail(ncclInvalidUsage, "ncclCommSplit of a revoked communicator");
    if (group_depth == 0 && comm->w->n > 1)
        return fail(ncclInvalidUsage,
                    "ncclCommSplit of a multi-rank communicator from one thread outside a "
                    "group would wait for the other ranks forever");
    ncclResult_t res = queue_call((pending_call){.parent = comm, .color = color, .key = key,
                                                 .out = newcomm});
    if (res == ncclSuccess && group_depth == 0) { /* a one-rank communicator: split at once */
        group_depth = 1;
        return ncclGroupEnd();
    }
    return res;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRank: bad arguments");
    if (group_depth == 0 && nranks > 1)
        return fail(ncclInvalidUsage,
                    "ncclCommInitRank of a multi-rank communicator from one thread outside a "
                    "group would wait for the other ranks forever (this fake's rule: our "
                    "code always joins a process's ranks in one group)");
    int dev = 0;
    (void)cudaGetDevice(&dev);
    ncclResult_t res = queue_call((pending_call){.out = comm, .id = id, .nranks = nranks,
                                                 .rank = rank, .dev = dev});
    if (res == ncclSuccess && group_depth == 0) {
        group_depth = 1;
        return ncclGroupEnd();
    }
    return res;
}

static void release(ncclComm_t comm)
{
    fake_world *w = comm->w;
    pthread_mutex_lock(&w->mu);
    int last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    free(comm);
    if (last)
        world_free(w);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm->w->revoked ? fail(ncclInvalidUsage, "ncclCommFinalize after ncclCommRevoke")
                            : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (comm)
        release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    (void)flags;
    fake_world *w = comm->w;
    pthread_mutex_lock(&w->mu);
    w->revoked = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return ncclSuccess;
}

/* ---- collectives ---- */

/* Waits, under w->mu, until *gen moves from g0 or the world is revoked. */
static int wait_gen(fake_world *w, const unsigned *gen, unsigned g0)
{
    while (*gen == g0 && !w->revoked)
        pthread_cond_wait(&w->cv, &w->mu);
    return *gen != g0;
}

/* Rank me's result of the collective in the slots, into out (count elements, n * count for
 * an all-gather); reads the other ranks' buffers only, so in-place calls (send == recv, or
 * an all-gather's send inside recv) see every input before anyone writes. 0: no result
 * (the root of a broadcast in place). */
static int compute(fake_world *w, int me, float *out)
{
    const fake_slot *s = &w->slots[me];
    size_t c = s->count;
    switch (s->op) {
    case OP_ALLREDUCE:
    case OP_REDUCE_SCATTER: {
        size_t off = s->op == OP_REDUCE_SCATTER ? (size_t)me * c : 0;
        for (size_t i = 0; i < c; i++) { /* rank order, as NCCL's ring may not: any order */
            float v = w->slots[0].send[off + i];
            for (int r = 1; r < w->n; r++)
                v += w->slots[r].send[off + i];
            out[i] = v;
        }
        return 1;
    }
    case OP_ALLGATHER:
        for (int r = 0; r < w->n; r++)
            memcpy(out + (size_t)r * c, w->slots[r].send, c * sizeof(float));
        return 1;
    case OP_BROADCAST:
        if (me == s->root && s->send == s->recv)
            return 0;
        memcpy(out, w->slots[s->root].send, c * sizeof(float));
        return 1;
    }
    return 0;
}

/* Waits (w->mu held) until all n ranks have come to this point; the last one wakes them. */
static int rendezvous(fake_world *w, int *count, unsigned *gen)
{
    unsigned g0 = *gen;
    if (++*count == w->n) {
        *count = 0;
        (*gen)++;
        pthread_cond_broadcast(&w->cv);
        return 1;
    }
    return wait_gen(w, gen, g0);
}

static ncclResult_t collective(ncclComm_t comm, fake_op op, const void *send, void *recv,
                               size_t count, int root)
{
    fake_world *w = comm->w;
    pthread_mutex_lock(&w->mu);
    w->slots[comm->rank] = (fake_slot){op, send, recv, count, root};
    int ok = rendezvous(w, &w->arrived, &w->gen_in); /* every slot is filled */
    for (int r = 0; ok && r < w->n; r++)
        if (w->slots[r].op != op || w->slots[r].count != count || w->slots[r].root != root) {
            pthread_mutex_unlock(&w->mu);
            return fail(ncclInvalidUsage, "ranks called different collectives or counts");
        }
    pthread_mutex_unlock(&w->mu);
    if (!ok)
        return fail(ncclRemoteError, "the communicator was revoked");
    size_t elems = op == OP_ALLGATHER ? count * (size_t)w->n : count;
    float *result = malloc((elems ? elems : 1) * sizeof *result);
    int have = result && compute(w, comm->rank, result);
    pthread_mutex_lock(&w->mu); /* every rank has read its inputs: now the writes */
    ok = rendezvous(w, &w->computed, &w->gen_mid);
    pthread_mutex_unlock(&w->mu);
    if (ok && have)
        memcpy(recv, result, elems * sizeof *result);
    const int nomem = !result; /* still through the last rendezvous, or the others wait */
    free(result);
    pthread_mutex_lock(&w->mu); /* every rank has written: the slots may be reused */
    ok = rendezvous(w, &w->departed, &w->gen_out) && ok;
    pthread_mutex_unlock(&w->mu);
    if (nomem)
        return fail(ncclSystemError, "fake NCCL: out of host memory");
    return ok ? ncclSuccess : fail(ncclRemoteError, "the communicator was revoked");
}

#define FLOAT_ONLY(t)                                                                         \
    do {                                                                                      \
        if ((t) != ncclFloat32)                                                               \
            return fail(ncclInvalidArgument, "fake NCCL: float32 only");                      \
    } while (0)

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    if (op != ncclSum)
        return fail(ncclInvalidArgument, "fake NCCL: sum only");
    return collective(comm, OP_ALLREDUCE, send, recv, count, 0);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    return collective(comm, OP_ALLGATHER, send, recv, count, 0);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    if (op != ncclSum)
        return fail(ncclInvalidArgument, "fake NCCL: sum only");
    return collective(comm, OP_REDUCE_SCATTER, send, recv, count, 0);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    if (root < 0 || root >= comm->w->n)
        return fail(ncclInvalidArgument, "ncclBroadcast: root out of range");
    return collective(comm, OP_BROADCAST, send, recv, count, root);
}

/* ---- point to point ---- */

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    fake_world *w = comm->w;
    if (peer < 0 || peer >= w->n || peer == comm->rank)
        return fail(ncclInvalidArgument, "ncclSend: bad peer");
    fake_msg *m = malloc(sizeof *m);
    float *copy = malloc((count ? count : 1) * sizeof *copy);
    if (!m || !copy) {
        free(m);
        free(copy);
        return fail(ncclSystemError, "out of memory");
    }
    memcpy(copy, buf, count * sizeof *copy);
    *m = (fake_msg){copy, count, NULL};
    pthread_mutex_lock(&w->mu);
    int ch = comm->rank * w->n + peer;
    if (w->tail[ch])
        w->tail[ch]->next = m;
    else
        w->head[ch] = m;
    w->tail[ch] = m;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return ncclSuccess;
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    (void)stream;
    FLOAT_ONLY(t);
    fake_world *w = comm->w;
    if (peer < 0 || peer >= w->n || peer == comm->rank)
        return fail(ncclInvalidArgument, "ncclRecv: bad peer");
    int ch = peer * w->n + comm->rank;
    pthread_mutex_lock(&w->mu);
    while (!w->head[ch] && !w->revoked)
        pthread_cond_wait(&w->cv, &w->mu);
    fake_msg *m = w->head[ch];
    if (m) {
        w->head[ch] = m->next;
        if (!w->head[ch])
            w->tail[ch] = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    if (!m)
        return fail(ncclRemoteError, "the communicator was revoked");
    ncclResult_t r = m->count == count ? ncclSuccess
                                       : fail(ncclInvalidUsage, "ncclRecv: count differs from "
                                                                "the matching ncclSend");
    if (r == ncclSuccess)
        memcpy(buf, m->data, count * sizeof(float));
    free(m->data);
    free(m);
    return r;
}
