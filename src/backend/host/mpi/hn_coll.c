/* hn_coll.c: collectives of a net world (ranks in several processes), hierarchical.
 *
 * Every collective is: publish this rank's call in its slot; local barrier A (abortable);
 * check that the local ranks agree; the leader (local index 0) packs the local data into
 * its outgoing block(s) and exchanges blocks with the other processes' leaders, one
 * message per process pair (a 64-byte hn_wire header, then floats), and checks their
 * headers; local barrier B; every local rank computes its result from the packed and
 * received blocks. After B nobody reads a user buffer of another rank (the data were
 * packed), so there is no third barrier; the blocks are rewritten only after the next A,
 * which every local rank reaches after it is done with them.
 *
 * Blocks, per op (nl = this process's ranks, nl_q = process q's, n = all):
 *   allreduce, allgather: out (nl, count): the local sends; in from q (nl_q, count)
 *   reduce_scatter: out to q (nl, nl_q, count): each local rank's slices of q's ranks; the
 *     block to this process itself stays here; in from q (nl_q, nl, count)
 *   broadcast: the root's process sends (count) to every other one; the others send
 *     their headers only (so a disagreement on the root is seen)
 *   barrier: headers only
 * Sums are hb_sum_rows over the ranks' rows in rank order 0..n-1: the bits of the
 * single-process communicator, the same on every rank.
 *
 * A process whose ranks fail their checks still sends its header (bad = 1), so the other
 * processes fail the collective too instead of waiting for it. A collective that fails
 * leaves the world aborted (unlike a single-process world): its messages may still be in
 * flight.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/mpi/hn.h"

_Static_assert(sizeof(hn_wire) == 64, "hn_wire keeps the payload 64-byte aligned");

#define HDR sizeof(hn_wire)

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

static int reserve(char **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap)
        return 1;
    free(*buf);
    *buf = aligned_alloc(64, round64(bytes));
    *cap = *buf ? bytes : 0;
    return *buf != NULL;
}

/* ---- the leader's exchange --------------------------------------------------------------- */

/* Posts the receives rp/rb and the sends sp/sb of every other process, waits, and leaves
 * the bytes received in got. */
static pe_status exchange(hb_world *w, pe_err *err)
{
    hb_net *net = w->net;
    int P = net->nprocs, me = net->me, k = 0, rc = MPI_SUCCESS;
    for (int p = 0; p < P && rc == MPI_SUCCESS; p++)
        if (p != me && net->rp[p]) {
            int tag = hn_tag(net, w->n, net->lo[p], net->lo[me], 1);
            rc = MPI_Irecv(net->rp[p], (int)net->rb[p], MPI_BYTE, net->mpi[p], tag,
                           net->ctx->comm, &net->reqs[k]);
            net->from[k] = p;
            k += rc == MPI_SUCCESS;
        }
    int nrecv = k;
    for (int p = 0; p < P && rc == MPI_SUCCESS; p++)
        if (p != me && net->sp[p]) {
            int tag = hn_tag(net, w->n, net->lo[me], net->lo[p], 1);
            rc = MPI_Isend(net->sp[p], (int)net->sb[p], MPI_BYTE, net->mpi[p], tag,
                           net->ctx->comm, &net->reqs[k]);
            k += rc == MPI_SUCCESS;
        }
    if (rc != MPI_SUCCESS) {
        hn_cancel(net->reqs, nrecv, k);
        return hn_mpi_fail(err, rc, "posting a collective's messages");
    }
    pe_status s = hn_wait(w, net->reqs, nrecv, k, net->sts, err);
    for (int i = 0; s == PE_OK && i < nrecv; i++) {
        int got = 0;
        MPI_Get_count(&net->sts[i], MPI_BYTE, &got);
        net->got[net->from[i]] = (size_t)got;
    }
    return s;
}

/* Checks the headers received against this process's call. */
static pe_status check_headers(hb_world *w, const hn_wire *mine, pe_err *err)
{
    hb_net *net = w->net;
    for (int p = 0; p < net->nprocs; p++) {
        if (p == net->me || !net->rp[p])
            continue;
        const hn_wire *h = (const hn_wire *)net->rp[p];
        hb_op op = (hb_op)mine->op;
        if (net->got[p] < HDR)
            return pe_fail(err, PE_ECOMM, "%s: the leader of ranks %d..%d sent %zu bytes, not "
                           "even a header", hb_op_name(op), net->lo[p], net->lo[p + 1] - 1,
                           net->got[p]);
        if (h->bad)
            return pe_fail(err, PE_ECOMM, "%s: a rank of %d..%d (another process) passed "
                           "invalid arguments or disagreed with its neighbours (see its error)",
                           hb_op_name(op), net->lo[p], net->lo[p + 1] - 1);
        if (h->op != mine->op || h->count != mine->count || h->root != mine->root ||
            h->number != mine->number)
            return pe_fail(err, PE_ECOMM,
                           "rank %d called %s(count=%llu, root=%d) as its collective #%llu "
                           "while rank %d (another process) called %s(count=%llu, root=%d) as "
                           "its #%llu; every rank must call the same collectives in the same "
                           "order with the same count and root",
                           mine->from, hb_op_name(op), (unsigned long long)mine->count,
                           mine->root, (unsigned long long)mine->number, h->from,
                           hb_op_name((hb_op)h->op), (unsigned long long)h->count, h->root,
                           (unsigned long long)h->number);
        if (net->got[p] != net->rb[p])
            return pe_fail(err, PE_ECOMM, "%s: the leader of ranks %d..%d sent %zu bytes where "
                           "%zu were expected", hb_op_name(op), net->lo[p], net->lo[p + 1] - 1,
                           net->got[p], net->rb[p]);
    }
    return PE_OK;
}

/* Bytes of the block process `from` sends to process `to` (from == to: the block a
 * reduce_scatter keeps here). */
static size_t block_bytes(const hb_net *net, hb_op op, size_t count, int root, int from,
                          int to)
{
    size_t nf = (size_t)(net->lo[from + 1] - net->lo[from]);
    size_t nt = (size_t)(net->lo[to + 1] - net->lo[to]);
    switch (op) {
    case HB_OP_ALLREDUCE:
    case HB_OP_ALLGATHER: return HDR + nf * count * sizeof(float);
    case HB_OP_REDUCE_SCATTER: return HDR + nf * nt * count * sizeof(float);
    /* every process sends its header, so that processes that disagree on the root fail
     * instead of waiting or copying the wrong data */
    case HB_OP_BROADCAST: return HDR + (net->proc[root] == from ? count * sizeof(float) : 0);
    case HB_OP_BARRIER: return HDR;
    }
    return HDR;
}

/* Packs the local data of an op whose one block goes to every process: (nl, count)
 * sends, or the root's buffer (count). */
static void pack_shared(hb_world *w, hb_op op, size_t count, int root, float *dst)
{
    if (count == 0)
        return;
    if (op == HB_OP_BROADCAST && w->net->proc[root] == w->net->me)
        memcpy(dst, w->slots[root - w->lo].send, count * sizeof(float));
    if (op == HB_OP_ALLREDUCE || op == HB_OP_ALLGATHER)
        for (int i = 0; i < w->nl; i++)
            memcpy(dst + (size_t)i * count, w->slots[i].send, count * sizeof(float));
}

/* Packs reduce_scatter's block for process p: (nl, nl_p, count), each local rank's send
 * slices of p's ranks. */
static void pack_slices(hb_world *w, size_t count, int p, float *dst)
{
    const hb_net *net = w->net;
    size_t row = (size_t)(net->lo[p + 1] - net->lo[p]) * count;
    for (int i = 0; i < w->nl && row; i++)
        memcpy(dst + (size_t)i * row, w->slots[i].send + (size_t)net->lo[p] * count,
               row * sizeof(float));
}

/* Lays out and fills the blocks: sp/sb and rp/rb for every other process, base for
 * every process, with this process's header in front of each block sent. 0: out of
 * memory. */
static int plan(hb_world *w, hb_op op, size_t count, int root)
{
    hb_net *net = w->net;
    int P = net->nprocs, me = net->me, shared = op != HB_OP_REDUCE_SCATTER;
    size_t obytes = shared ? round64(block_bytes(net, op, count, root, me, me)) : 0;
    size_t ibytes = 0;
    for (int p = 0; p < P; p++) {
        if (p != me)
            ibytes += round64(block_bytes(net, op, count, root, p, me));
        if (!shared)
            obytes += round64(block_bytes(net, op, count, root, me, p));
    }
    if (!reserve(&net->out, &net->out_cap, obytes) || !reserve(&net->in, &net->in_cap, ibytes))
        return 0;
    size_t ioff = 0, ooff = 0;
    for (int p = 0; p < P; p++) {
        net->rp[p] = NULL;
        if (p != me) {
            net->rp[p] = net->in + ioff;
            net->rb[p] = block_bytes(net, op, count, root, p, me);
            net->base[p] = (const float *)(net->rp[p] + HDR);
            ioff += round64(net->rb[p]);
        }
        char *blk = net->out + ooff;
        if (!shared) {
            pack_slices(w, count, p, (float *)(blk + HDR));
            ooff += round64(block_bytes(net, op, count, root, me, p));
        } else if (p == 0) {
            pack_shared(w, op, count, root, (float *)(blk + HDR));
        }
        if (!shared || p == 0)
            memcpy(blk, &net->hdr, HDR);
        net->sp[p] = p == me ? NULL : blk;
        net->sb[p] = block_bytes(net, op, count, root, me, p);
        if (p == me)
            net->base[p] = (const float *)(blk + HDR);
    }
    return 1;
}

/* The leader's part of a collective: pack, exchange, check. bad: the local ranks failed. */
static pe_status leader(hb_world *w, hb_op op, size_t count, int root, int bad, pe_err *err)
{
    hb_net *net = w->net;
    net->hdr = (hn_wire){.op = (int32_t)op, .root = root, .bad = bad, .from = w->lo,
                         .count = (uint64_t)count, .number = net->calls++};
    pe_status s = PE_OK;
    if (!bad && !plan(w, op, count, root)) {
        s = pe_fail(err, PE_ENOMEM, "out of memory for the blocks of %zu elements", count);
        net->hdr.bad = bad = 1;
    }
    if (bad) /* headers only: the other processes learn that this collective failed */
        for (int p = 0; p < net->nprocs; p++) {
            int other = p != net->me;
            net->sp[p] = other ? (char *)&net->hdr : NULL;
            net->rp[p] = other ? (char *)&net->hin[p] : NULL;
            net->sb[p] = net->rb[p] = HDR;
        }
    pe_status x = exchange(w, err);
    if (s != PE_OK) /* our own failure says more than theirs */
        return s;
    if (x != PE_OK && err->msg[0]) { /* an MPI error, not an abort */
        pe_err why = *err;
        return pe_fail(err, x, "exchanging blocks with the other processes: %s (a block "
                       "bigger than expected means that the processes' ranks called different "
                       "collectives or counts)", why.msg);
    }
    return x != PE_OK ? x : check_headers(w, &net->hdr, err);
}

/* ---- the collective's frame ------------------------------------------------------------- */

/* Runs a collective up to the point where the blocks are ready (after barrier B). */
static pe_status net_coll(be_comm *c, hb_op op, size_t count, int root, const float *send,
                          float *recv, int bad)
{
    hb_world *w = c->w;
    hb_net *net = w->net;
    if (rt_barrier_aborted(&w->bar))
        return hb_coll_aborted(c, op);
    w->slots[c->rank - w->lo] = (hb_slot){.op = op, .count = count, .root = root, .bad = bad,
                                          .send = send, .recv = recv};
    if (rt_barrier_wait(&w->bar, 1) != PE_OK) /* A */
        return hb_coll_aborted(c, op);
    pe_status local = hb_slots_agree(c, op, count, root, bad, w->slots, w->nl, w->lo);
    if (c->rank == w->lo) {
        net->msg.msg[0] = '\0';
        net->st = leader(w, op, count, root, local != PE_OK, &net->msg);
        /* Messages of a failed exchange may still be on their way (receives cancelled,
         * blocks of another size): a later collective could match them, so the world is
         * done. B waits without abort, so every local rank still gets past it. */
        if (net->st != PE_OK || local != PE_OK)
            hb_comm_abort(c);
    }
    rt_barrier_wait(&w->bar, 0); /* B */
    if (local != PE_OK)
        return local;
    if (net->st == PE_OK)
        return PE_OK;
    if (!net->msg.msg[0])
        return hb_coll_aborted(c, op);
    return hb_fail(c->dev, net->st, "%s on rank %d: %s", hb_op_name(op), c->rank, net->msg.msg);
}

/* Whether the largest block of op fits one MPI message (an int of bytes): a process
 * sends at most n rows of count (reduce_scatter: n * n slices, broadcast: one). */
static int fits(be_comm *c, hb_op op, size_t count)
{
    size_t n = (size_t)c->w->n;
    size_t rows = op == HB_OP_REDUCE_SCATTER ? n * n : op == HB_OP_BROADCAST ? 1 : n;
    if (count > ((size_t)INT_MAX - HDR) / sizeof(float) / rows) {
        hb_fail(c->dev, PE_EINVAL, "%s on rank %d: %zu elements over %zu ranks exceed one MPI "
                "message (2 GiB) between processes", hb_op_name(op), c->rank, count, n);
        return 0;
    }
    return 1;
}

/* Rank c's row pointers (n): where each rank's data for it lie. */
static const float **rows_of(be_comm *c, hb_op op, size_t count)
{
    hb_world *w = c->w;
    hb_net *net = w->net;
    const float **rows = net->rows + (size_t)(c->rank - w->lo) * (size_t)w->n;
    for (int r = 0; r < w->n; r++) {
        int p = net->proc[r];
        size_t i = (size_t)(r - net->lo[p]);
        rows[r] = op == HB_OP_REDUCE_SCATTER
                      ? net->base[p] + (i * (size_t)w->nl + (size_t)(c->rank - w->lo)) * count
                      : net->base[p] + i * count;
    }
    return rows;
}

/* allreduce and reduce_scatter: rank c's recv (count) = the sum of its n rows. */
static pe_status net_sum(be_comm *c, hb_op op, const float *send, float *recv, size_t count,
                         int bad)
{
    pe_status s = net_coll(c, op, count, 0, send, recv, bad || !fits(c, op, count));
    if (s != PE_OK || count == 0)
        return s;
    hb_sum_rows(recv, rows_of(c, op, count), c->w->n, count);
    return PE_OK;
}

pe_status hb_net_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count,
                               int bad)
{
    return net_sum(c, HB_OP_ALLREDUCE, send, recv, count, bad);
}

pe_status hb_net_allgather(be_comm *c, const float *send, float *recv, size_t count, int bad)
{
    hb_op op = HB_OP_ALLGATHER;
    pe_status s = net_coll(c, op, count, 0, send, recv, bad || !fits(c, op, count));
    if (s != PE_OK || count == 0)
        return s;
    const float **rows = rows_of(c, op, count);
    for (int r = 0; r < c->w->n; r++)
        memcpy(recv + (size_t)r * count, rows[r], count * sizeof *recv);
    return PE_OK;
}

pe_status hb_net_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count,
                                int bad)
{
    return net_sum(c, HB_OP_REDUCE_SCATTER, send, recv, count, bad);
}

pe_status hb_net_broadcast(be_comm *c, float *buf, size_t count, int root, int bad)
{
    hb_op op = HB_OP_BROADCAST;
    pe_status s = net_coll(c, op, count, root, buf, buf, bad || !fits(c, op, count));
    if (s != PE_OK || count == 0 || c->rank == root)
        return s;
    memcpy(buf, c->w->net->base[c->w->net->proc[root]], count * sizeof *buf);
    return PE_OK;
}

pe_status hb_net_barrier(be_comm *c)
{
    return net_coll(c, HB_OP_BARRIER, 0, 0, NULL, NULL, 0);
}
