/* cb_peer.c: the in-process peer path: collectives for a group whose device list repeats
 * a GPU (NCCL refuses that) or shares a GPU with other groups, with the interface and the
 * results of the NCCL path.
 *
 * Every rank is a worker thread with its own stream. A collective is:
 *   enter: the rank publishes its arguments, records `ready` on its stream, and meets the
 *          others on the host (rendezvous R1); its stream then waits on every `ready`, so
 *          it reads the others' buffers only once their producers are done;
 *   work:  on the rank's own stream: device-to-device copies (same GPU), peer copies
 *          (another GPU), the reduce kernel;
 *   leave: records `mid`, meets the others (R2) and waits on every `mid`, so no rank
 *          overwrites a buffer that another still reads once the call returned.
 * A barrier is the host meeting alone (as on NCCL and the host backend).
 * Events and published arguments alternate between two sets by the parity of the
 * collective's number: a set is recorded again only two collectives later, when every
 * rank has provably enqueued its waits on the previous record.
 *
 * All-reduce is reduce-scatter then all-gather through per-rank scratch: rank r sums
 * chunk r of every rank's input in rank order 0, 1, ..., n-1 into its scratch; after R2
 * every rank copies all chunks. Each element is summed once, by one rank, so every rank
 * gets the same bits, and in-place calls (send == recv) are safe. Scratch is written only
 * after R1 of a later collective, when every reader of its previous contents is done.
 *
 * send/recv: a channel per (sender, receiver) pair, a ring of slots; send records an
 * event and posts the buffer; recv waits for the post, makes its stream wait on the
 * event, copies, and records `done`. synchronize() of the sender waits for every `done`.
 *
 * A failure inside a collective aborts the group, so its peers wake with PE_ECOMM
 * instead of waiting for a rank that left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cb_comm.h"
#include "runtime/chan.h"

#define CB_CHAN_SLOTS 64 /* sends in flight per (sender, receiver) before send waits */

typedef struct cb_chan_slot {
    const float *buf;  /* the sender's buffer */
    size_t count;
    cudaEvent_t ready; /* sender's device: buf is ready */
    cudaEvent_t done;  /* receiver's device: buf was copied */
} cb_chan_slot;

/* Sender -> receiver messages (runtime/chan.h: slots of cb_chan_slot, whose events stay
 * made for the slot's next message). */
struct cb_chan {
    be_device *sender; /* registered with this device (NULL once it closed); cb_device.c */
    int from, to;
    rt_chan ch;
};

typedef enum { OP_ALLREDUCE = 1, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BROADCAST, OP_BARRIER } op_kind;

typedef struct cb_args {
    op_kind kind;
    const float *send;
    float *recv;
    size_t count;
    int root;
} cb_args;

struct cb_peer {
    cudaEvent_t *ready[2], *mid[2]; /* [parity](n), rank r's on its device */
    cb_args *args[2];               /* [parity](n) */
    float **scratch;                /* (n) rank r's, on its device */
    size_t *scratch_cap;            /* (n) elements */
    void **retired;                 /* outgrown scratch, freed at destroy (under lock) */
    int *retired_dev;
    int n_retired, cap_retired;
    struct cb_chan *chans; /* (n * n): [from * n + to] */
};

/* A CUDA failure inside a collective: the message, and the group aborted. */
static pe_status fail(be_comm *c, cudaError_t e, const char *call)
{
    (void)cudaGetLastError();
    pe_status s = cb_cuda_fail(&c->dev->err, e, call, c->dev->id);
    cb_comm_abort(c);
    return s;
}

static int same_device(const be_comm *c, int s) { return c->g->ids[s] == c->dev->id; }

/* Makes this rank's stream wait on event ev[s] of every other rank. */
static pe_status wait_all(be_comm *c, cudaEvent_t *ev, const char *what)
{
    for (int s = 0; s < c->g->n; s++) {
        if (s == c->rank)
            continue;
        cudaError_t e = cudaStreamWaitEvent(c->dev->stream, ev[s], 0);
        if (e != cudaSuccess)
            return fail(c, e, what);
    }
    return PE_OK;
}

static const char *op_name(op_kind k)
{
    switch (k) {
    case OP_ALLREDUCE: return "allreduce";
    case OP_ALLGATHER: return "allgather";
    case OP_REDUCE_SCATTER: return "reduce_scatter";
    case OP_BROADCAST: return "broadcast";
    case OP_BARRIER: return "barrier";
    }
    return "?";
}

/* Publish, record ready, R1, check that every rank called the same thing, wait on the
 * others' ready. A barrier only meets the others (as on NCCL and the host). */
static pe_status enter(be_comm *c, cb_args a)
{
    struct cb_peer *p = c->g->peer;
    int par = (int)(c->seq & 1u);
    const char *what = op_name(a.kind);
    p->args[par][c->rank] = a;
    int data = a.kind != OP_BARRIER;
    cudaError_t e = data ? cudaEventRecord(p->ready[par][c->rank], c->dev->stream) : cudaSuccess;
    if (e != cudaSuccess)
        return fail(c, e, "cudaEventRecord (peer path entry)");
    pe_status s = cb_rendezvous(c, what);
    if (s != PE_OK)
        return s;
    const cb_args *all = p->args[par];
    for (int r = 1; r < c->g->n; r++) {
        if (all[r].kind != all[0].kind || all[r].count != all[0].count ||
            all[r].root != all[0].root) {
            s = pe_fail(&c->dev->err, PE_EINVAL,
                        "peer path: collective #%u differs between ranks: rank 0 called %s "
                        "(%zu elements, root %d), rank %d called %s (%zu elements, root %d); "
                        "every rank must make the same calls in the same order",
                        c->seq, op_name(all[0].kind), all[0].count, all[0].root, r,
                        op_name(all[r].kind), all[r].count, all[r].root);
            cb_comm_abort(c);
            return s;
        }
    }
    return data ? wait_all(c, p->ready[par], "cudaStreamWaitEvent (peer path entry)") : PE_OK;
}

/* Record mid, R2, wait on the others' mid; the collective is done for this rank. */
static pe_status leave(be_comm *c, const char *what)
{
    struct cb_peer *p = c->g->peer;
    int par = (int)(c->seq & 1u);
    cudaError_t e = cudaEventRecord(p->mid[par][c->rank], c->dev->stream);
    if (e != cudaSuccess)
        return fail(c, e, "cudaEventRecord (peer path exit)");
    pe_status s = cb_rendezvous(c, what);
    if (s != PE_OK)
        return s;
    return wait_all(c, p->mid[par], "cudaStreamWaitEvent (peer path exit)");
}

/* dst (on this rank's device) = src (on rank s's device), on this rank's stream. */
static pe_status copy_from(be_comm *c, int s, float *dst, const float *src, size_t count)
{
    if (count == 0 || dst == src)
        return PE_OK;
    cudaError_t e = same_device(c, s)
                        ? cudaMemcpyAsync(dst, src, count * sizeof(float),
                                          cudaMemcpyDeviceToDevice, c->dev->stream)
                        : cudaMemcpyPeerAsync(dst, c->dev->id, src, c->g->ids[s],
                                              count * sizeof(float), c->dev->stream);
    if (e != cudaSuccess)
        return fail(c, e, same_device(c, s) ? "cudaMemcpyAsync (peer path)"
                                            : "cudaMemcpyPeerAsync (peer path)");
    return PE_OK;
}

/* This rank's scratch, at least elems floats; called on the rank's thread. */
static pe_status scratch_reserve(be_comm *c, size_t elems, float **out)
{
    cb_group *g = c->g;
    struct cb_peer *p = g->peer;
    int r = c->rank;
    if (p->scratch_cap[r] < elems) {
        size_t cap = elems < 1024 ? 1024 : elems;
        float *fresh = NULL;
        cudaError_t e = cudaMalloc((void **)&fresh, cap * sizeof(float));
        if (e != cudaSuccess)
            return fail(c, e, "cudaMalloc (peer path scratch)");
        pthread_mutex_lock(&g->lock);
        int ok = 1;
        if (p->scratch[r]) {
            if (p->n_retired == p->cap_retired) {
                int ncap = p->cap_retired ? 2 * p->cap_retired : 8;
                void **a = realloc(p->retired, (size_t)ncap * sizeof *a);
                int *d = a ? realloc(p->retired_dev, (size_t)ncap * sizeof *d) : NULL;
                if (a)
                    p->retired = a;
                if (d)
                    p->retired_dev = d;
                if (a && d)
                    p->cap_retired = ncap;
                else
                    ok = 0;
            }
            if (ok) {
                p->retired[p->n_retired] = p->scratch[r];
                p->retired_dev[p->n_retired++] = c->dev->id;
            }
        }
        if (ok) {
            p->scratch[r] = fresh;
            p->scratch_cap[r] = cap;
        }
        pthread_mutex_unlock(&g->lock);
        if (!ok) {
            (void)cudaFree(fresh);
            pe_status s = pe_fail(&c->dev->err, PE_ENOMEM, "out of host memory (peer path)");
            cb_comm_abort(c);
            return s;
        }
    }
    *out = p->scratch[r];
    return PE_OK;
}

/* The inputs of a sum over ranks: element `off` of every rank's send buffer, staged
 * into stage(n, len) for ranks on another GPU. */
static pe_status sum_inputs(be_comm *c, const cb_args *all, size_t off, size_t len,
                            float *stage, const float **in)
{
    for (int s = 0; s < c->g->n; s++) {
        if (same_device(c, s)) {
            in[s] = all[s].send + off;
            continue;
        }
        float *dst = stage + (size_t)s * len;
        pe_status st = copy_from(c, s, dst, all[s].send + off, len);
        if (st != PE_OK)
            return st;
        in[s] = dst;
    }
    return PE_OK;
}

static int any_remote(const be_comm *c)
{
    for (int s = 0; s < c->g->n; s++)
        if (!same_device(c, s))
            return 1;
    return 0;
}

/* Where chunk r of count elements split over n ranks starts. The split is in groups of 4
 * elements, [g * r / n, g * (r + 1) / n) of the g = ceil(count / 4) groups, so that every
 * chunk starts 16-byte aligned and the reduce and gather grids take their float4 path. */
static size_t chunk_off(size_t count, int n, int r)
{
    size_t g = (count + 3) / 4;
    size_t groups = g / (size_t)n * (size_t)r + g % (size_t)n * (size_t)r / (size_t)n;
    return groups * 4 < count ? groups * 4 : count;
}

/* Elements of the longest chunk at most. */
static size_t chunk_most(size_t count, int n) { return ((count + 3) / 4 / (size_t)n + 1) * 4; }

pe_status cb_peer_allreduce(be_comm *c, const float *send, float *recv, size_t count)
{
    struct cb_peer *p = c->g->peer;
    int n = c->g->n, r = c->rank, par = (int)(c->seq & 1u);
    pe_status s = enter(c, (cb_args){OP_ALLREDUCE, send, recv, count, 0});
    if (s != PE_OK)
        return s;
    const cb_args *all = p->args[par];
    size_t off = chunk_off(count, n, r), len = chunk_off(count, n, r + 1) - off;
    size_t most = chunk_most(count, n);
    float *scratch;
    /* scratch: (most) this rank's chunk of the sum, then (n, most) staged inputs */
    s = scratch_reserve(c, most * (any_remote(c) ? 1 + (size_t)n : 1), &scratch);
    if (s != PE_OK)
        return s;
    const float *in[CB_PEER_MAX_RANKS];
    s = sum_inputs(c, all, off, len, scratch + most, in);
    if (s != PE_OK)
        return s;
    cudaError_t e = cb_launch_reduce(c->dev->stream, scratch, in, n, len);
    if (e != cudaSuccess)
        return fail(c, e, "peer reduce kernel launch");
    s = leave(c, "allreduce");
    if (s != PE_OK)
        return s;
    /* Every rank's chunk into recv: one gather grid for the same GPU, peer copies else. */
    const float *src[CB_PEER_MAX_RANKS];
    size_t dst_off[CB_PEER_MAX_RANKS], lens[CB_PEER_MAX_RANKS];
    int local = 0;
    for (int q = 0; q < n; q++) {
        size_t qoff = chunk_off(count, n, q), qlen = chunk_off(count, n, q + 1) - qoff;
        if (same_device(c, q)) {
            src[local] = p->scratch[q];
            dst_off[local] = qoff;
            lens[local++] = qlen;
        } else if ((s = copy_from(c, q, recv + qoff, p->scratch[q], qlen)) != PE_OK) {
            return s;
        }
    }
    e = cb_launch_gather(c->dev->stream, recv, src, dst_off, lens, local);
    if (e != cudaSuccess)
        return fail(c, e, "peer gather kernel launch");
    c->seq++;
    return PE_OK;
}

pe_status cb_peer_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count)
{
    struct cb_peer *p = c->g->peer;
    int n = c->g->n, r = c->rank, par = (int)(c->seq & 1u);
    pe_status s = enter(c, (cb_args){OP_REDUCE_SCATTER, send, recv, count, 0});
    if (s != PE_OK)
        return s;
    const cb_args *all = p->args[par];
    float *stage = NULL;
    if (any_remote(c) && (s = scratch_reserve(c, (size_t)n * count, &stage)) != PE_OK)
        return s;
    const float *in[CB_PEER_MAX_RANKS];
    s = sum_inputs(c, all, (size_t)r * count, count, stage, in);
    if (s != PE_OK)
        return s;
    cudaError_t e = cb_launch_reduce(c->dev->stream, recv, in, n, count);
    if (e != cudaSuccess)
        return fail(c, e, "peer reduce kernel launch");
    s = leave(c, "reduce_scatter");
    if (s == PE_OK)
        c->seq++;
    return s;
}

pe_status cb_peer_allgather(be_comm *c, const float *send, float *recv, size_t count)
{
    struct cb_peer *p = c->g->peer;
    int n = c->g->n, par = (int)(c->seq & 1u);
    pe_status s = enter(c, (cb_args){OP_ALLGATHER, send, recv, count, 0});
    if (s != PE_OK)
        return s;
    const cb_args *all = p->args[par];
    const float *src[CB_PEER_MAX_RANKS];
    size_t dst_off[CB_PEER_MAX_RANKS], lens[CB_PEER_MAX_RANKS];
    int local = 0;
    for (int q = 0; q < n; q++) {
        float *dst = recv + (size_t)q * count;
        if (all[q].send == dst) /* in place */
            continue;
        if (same_device(c, q)) {
            src[local] = all[q].send;
            dst_off[local] = (size_t)q * count;
            lens[local++] = count;
        } else if ((s = copy_from(c, q, dst, all[q].send, count)) != PE_OK) {
            return s;
        }
    }
    cudaError_t e = cb_launch_gather(c->dev->stream, recv, src, dst_off, lens, local);
    if (e != cudaSuccess)
        return fail(c, e, "peer gather kernel launch");
    s = leave(c, "allgather");
    if (s == PE_OK)
        c->seq++;
    return s;
}

pe_status cb_peer_broadcast(be_comm *c, float *buf, size_t count, int root)
{
    struct cb_peer *p = c->g->peer;
    int par = (int)(c->seq & 1u);
    pe_status s = enter(c, (cb_args){OP_BROADCAST, buf, buf, count, root});
    if (s != PE_OK)
        return s;
    if (c->rank != root && (s = copy_from(c, root, buf, p->args[par][root].send, count)) != PE_OK)
        return s;
    s = leave(c, "broadcast");
    if (s == PE_OK)
        c->seq++;
    return s;
}

pe_status cb_peer_barrier(be_comm *c)
{
    pe_status s = enter(c, (cb_args){OP_BARRIER, NULL, NULL, 0, 0});
    if (s == PE_OK)
        c->seq++;
    return s;
}

/* ---- send / recv ---- */

pe_status cb_peer_send(be_comm *c, const float *buf, size_t count, int peer)
{
    struct cb_chan *ch = &c->g->peer->chans[c->rank * c->g->n + peer];
    void *slot = NULL;
    if (rt_chan_send_begin(&ch->ch, &slot) != PE_OK)
        return cb_comm_aborted(c, "send");
    cb_chan_slot *sl = slot;
    cudaError_t e = cudaSuccess;
    if (!sl->ready)
        e = cudaEventCreateWithFlags(&sl->ready, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(sl->ready, c->dev->stream);
    if (e != cudaSuccess) /* the slot stays unposted */
        return fail(c, e, "cudaEventRecord (peer send)");
    sl->buf = buf;
    sl->count = count;
    if (rt_chan_send_end(&ch->ch) != PE_OK)
        return cb_comm_aborted(c, "send");
    return PE_OK;
}

pe_status cb_peer_recv(be_comm *c, float *buf, size_t count, int peer)
{
    struct cb_chan *ch = &c->g->peer->chans[peer * c->g->n + c->rank];
    void *slot = NULL;
    if (rt_chan_recv_begin(&ch->ch, &slot) != PE_OK)
        return cb_comm_aborted(c, "recv");
    cb_chan_slot *sl = slot;
    pe_status s = PE_OK;
    cudaError_t e = cudaSuccess;
    if (sl->count != count) {
        s = pe_fail(&c->dev->err, PE_EINVAL,
                    "recv on rank %d: rank %d sent %zu elements, this rank expects %zu; sends "
                    "and receives must match in order and size",
                    c->rank, peer, sl->count, count);
        cb_comm_abort(c);
    } else if ((e = cudaStreamWaitEvent(c->dev->stream, sl->ready, 0)) != cudaSuccess) {
        s = fail(c, e, "cudaStreamWaitEvent (peer recv)");
    } else if ((s = copy_from(c, peer, buf, sl->buf, count)) == PE_OK) {
        if (!sl->done)
            e = cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventRecord(sl->done, c->dev->stream);
        if (e != cudaSuccess)
            s = fail(c, e, "cudaEventRecord (peer recv)");
    }
    rt_chan_recv_end(&ch->ch); /* taken either way: the sender's synchronize must not wait */
    return s;
}

be_device **cb_chan_sender(struct cb_chan *ch) { return &ch->sender; }

pe_status cb_peer_wait_chan(be_device *dev, struct cb_chan *ch)
{
    void *slot = NULL;
    int pending = rt_chan_drain(&ch->ch, &slot) != PE_OK;
    cudaEvent_t last = slot ? ((cb_chan_slot *)slot)->done : NULL;
    if (pending)
        return pe_fail(&dev->err, PE_ECOMM,
                       "synchronize on CUDA device %d: a send to rank %d was never received: "
                       "the communicator was aborted",
                       dev->id, ch->to);
    if (last) {
        cudaError_t e = cudaEventSynchronize(last);
        if (e != cudaSuccess)
            return cb_cuda_fail(&dev->err, e, "cudaEventSynchronize (peer send)", dev->id);
    }
    return PE_OK;
}

/* ---- life cycle ---- */

static void free_peer(cb_group *g, int registered)
{
    struct cb_peer *p = g->peer;
    int n = g->n;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    /* In-flight copies may still read scratch: let every device of the group finish. */
    for (int r = 0; r < n; r++) {
        int seen = 0;
        for (int q = 0; q < r; q++)
            seen |= g->ids[q] == g->ids[r];
        if (!seen && cudaSetDevice(g->ids[r]) == cudaSuccess)
            (void)cudaDeviceSynchronize();
    }
    if (p->chans) {
        for (int i = 0; i < n * n; i++) {
            struct cb_chan *ch = &p->chans[i];
            if (registered && ch->from != ch->to)
                cb_device_remove_out_chan(ch);
            for (size_t k = 0; ch->ch.slots && k < ch->ch.nslots; k++) {
                cb_chan_slot *sl = (cb_chan_slot *)(void *)(ch->ch.slots + k * ch->ch.slot_bytes);
                if (sl->ready)
                    (void)cudaEventDestroy(sl->ready);
                if (sl->done)
                    (void)cudaEventDestroy(sl->done);
            }
            rt_chan_destroy(&ch->ch);
        }
    }
    for (int par = 0; par < 2; par++)
        for (int r = 0; r < n; r++) {
            if (p->ready[par] && p->ready[par][r])
                (void)cudaEventDestroy(p->ready[par][r]);
            if (p->mid[par] && p->mid[par][r])
                (void)cudaEventDestroy(p->mid[par][r]);
        }
    for (int r = 0; r < n; r++)
        if (p->scratch && p->scratch[r] && cudaSetDevice(g->ids[r]) == cudaSuccess)
            (void)cudaFree(p->scratch[r]);
    for (int i = 0; i < p->n_retired; i++)
        if (cudaSetDevice(p->retired_dev[i]) == cudaSuccess)
            (void)cudaFree(p->retired[i]);
    (void)cudaGetLastError();
    (void)cudaSetDevice(prev);
    for (int par = 0; par < 2; par++) {
        free(p->ready[par]);
        free(p->mid[par]);
        free(p->args[par]);
    }
    free(p->scratch);
    free(p->scratch_cap);
    free(p->retired);
    free(p->retired_dev);
    free(p->chans);
    free(p);
    g->peer = NULL;
}

pe_status cb_peer_create(cb_group *g, be_device *const *devs, pe_err *err)
{
    int n = g->n;
    if (n > CB_PEER_MAX_RANKS)
        return pe_fail(err, PE_EINVAL,
                       "comm_create: %d ranks on the peer path (a repeated GPU); at most %d", n,
                       CB_PEER_MAX_RANKS);
    for (int r = 0; r < n; r++)
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return pe_fail(err, PE_EINVAL,
                               "comm_create: ranks %d and %d got the same opened device; every "
                               "rank needs its own (opened by its own worker thread)",
                               q, r);
    struct cb_peer *p = calloc(1, sizeof *p);
    if (!p)
        return pe_fail(err, PE_ENOMEM, "comm_create: out of host memory");
    g->peer = p;
    int ok = 1;
    for (int par = 0; par < 2; par++) {
        p->ready[par] = calloc((size_t)n, sizeof *p->ready[par]);
        p->mid[par] = calloc((size_t)n, sizeof *p->mid[par]);
        p->args[par] = calloc((size_t)n, sizeof *p->args[par]);
        ok = ok && p->ready[par] && p->mid[par] && p->args[par];
    }
    p->scratch = calloc((size_t)n, sizeof *p->scratch);
    p->scratch_cap = calloc((size_t)n, sizeof *p->scratch_cap);
    p->chans = calloc((size_t)n * (size_t)n, sizeof *p->chans);
    if (!ok || !p->scratch || !p->scratch_cap || !p->chans) {
        free_peer(g, 0);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of host memory");
    }
    int prev = 0;
    (void)cudaGetDevice(&prev);
    pe_status s = PE_OK;
    for (int r = 0; r < n && s == PE_OK; r++) {
        cudaError_t e = cudaSetDevice(g->ids[r]);
        for (int par = 0; par < 2 && e == cudaSuccess; par++) {
            e = cudaEventCreateWithFlags(&p->ready[par][r], cudaEventDisableTiming);
            if (e == cudaSuccess)
                e = cudaEventCreateWithFlags(&p->mid[par][r], cudaEventDisableTiming);
        }
        /* Direct peer access where the GPUs allow it; cudaMemcpyPeerAsync works (through
         * the host) where they do not. */
        for (int q = 0; q < n && e == cudaSuccess; q++) {
            int can = 0;
            if (g->ids[q] == g->ids[r] ||
                cudaDeviceCanAccessPeer(&can, g->ids[r], g->ids[q]) != cudaSuccess || !can)
                continue;
            e = cudaDeviceEnablePeerAccess(g->ids[q], 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                e = cudaSuccess;
        }
        (void)cudaGetLastError();
        if (e != cudaSuccess)
            s = cb_cuda_fail(err, e, "peer path setup (cudaEventCreate/EnablePeerAccess)",
                             g->ids[r]);
    }
    (void)cudaSetDevice(prev);
    int registered = 0;
    for (int from = 0; from < n && s == PE_OK; from++)
        for (int to = 0; to < n && s == PE_OK; to++) {
            struct cb_chan *ch = &p->chans[from * n + to];
            ch->from = from;
            ch->to = to;
            s = rt_chan_init(&ch->ch, CB_CHAN_SLOTS, sizeof(cb_chan_slot), err);
        }
    if (s == PE_OK) {
        registered = 1;
        for (int from = 0; from < n && s == PE_OK; from++)
            for (int to = 0; to < n && s == PE_OK; to++)
                if (from != to)
                    s = cb_device_add_out_chan(devs[from], &p->chans[from * n + to], err);
    }
    if (s != PE_OK) {
        free_peer(g, registered);
        return s;
    }
    return PE_OK;
}

/* Wakes the channels' waiters (the flag is set, the rendezvous aborted): the peer path
 * never blocks on the GPU, since a stream that waits on an event never recorded waits for
 * nothing. */
void cb_peer_abort(cb_group *g)
{
    struct cb_peer *p = g->peer;
    for (int i = 0; p && p->chans && i < g->n * g->n; i++)
        if (p->chans[i].ch.slots)
            rt_chan_abort(&p->chans[i].ch);
}

void cb_peer_destroy(cb_group *g)
{
    if (g->peer)
        free_peer(g, 1);
}
