/* hb_p2p.c: send and recv between two ranks of a host communicator.
 *
 * Stream-like, as in NCCL: send posts (buffer, count) into the (sender, receiver) channel
 * and returns (it blocks only while HB_RING messages of that pair are in flight); recv
 * takes the next message of that pair, copies once straight from the sender's buffer,
 * then marks it consumed. The sender's synchronize waits until each of its sends was
 * consumed, so the sender keeps its buffer unchanged until then. Two ranks that both
 * send before they receive do not deadlock.
 *
 * In a net world, a peer in another process is reached through MPI (hb_net.h); the
 * channels connect the ranks of this process (indexed by rank - lo).
 */
#include <string.h>

#include "backend/host/hb_comm.h"
#include "backend/host/hb_net.h"

static pe_status check_peer(be_comm *c, int peer, const char *op, const float *buf,
                            size_t count)
{
    if (peer < 0 || peer >= c->w->n)
        return hb_fail(c->dev, PE_EINVAL, "%s on rank %d: peer %d is not a rank (0..%d)", op,
                       c->rank, peer, c->w->n - 1);
    if (count && !buf)
        return hb_fail(c->dev, PE_EINVAL, "%s on rank %d: buf is NULL with count %zu", op,
                       c->rank, count);
    if (rt_barrier_aborted(&c->w->bar))
        return hb_fail(c->dev, PE_ECOMM,
                       "%s on rank %d (peer %d): the communicator was aborted (a peer worker "
                       "failed); the first failing worker's error says why",
                       op, c->rank, peer);
    return PE_OK;
}

/* The channel from rank `from` to rank `to`, both of this process. */
static hb_chan *chan_of(hb_world *w, int from, int to)
{
    return &w->chans[(size_t)(from - w->lo) * (size_t)w->nl + (size_t)(to - w->lo)];
}

pe_status hb_send(be_comm *c, const float *buf, size_t count, int peer)
{
    pe_status s = check_peer(c, peer, "send", buf, count);
    if (s != PE_OK)
        return s;
    if (hb_net_remote(c, peer))
        return hb_net_send(c, buf, count, peer);
    hb_chan *ch = chan_of(c->w, c->rank, peer);
    /* Count it before a receiver can see it, so that consumed never runs ahead. */
    hb_pending_post(ch->pend);
    void *slot = NULL;
    int dead = rt_chan_send_begin(&ch->ch, &slot) != PE_OK;
    if (!dead) {
        *(hb_msg *)slot = (hb_msg){.buf = buf, .count = count};
        dead = rt_chan_send_end(&ch->ch) != PE_OK;
    }
    if (dead) {
        hb_pending_done(ch->pend, 0); /* never posted: nothing for synchronize to report */
        return hb_fail(c->dev, PE_ECOMM,
                       "send on rank %d to rank %d: the communicator was aborted (a peer worker "
                       "failed); the first failing worker's error says why",
                       c->rank, peer);
    }
    return PE_OK;
}

pe_status hb_recv(be_comm *c, float *buf, size_t count, int peer)
{
    pe_status s = check_peer(c, peer, "recv", buf, count);
    if (s != PE_OK)
        return s;
    if (hb_net_remote(c, peer))
        return hb_net_recv(c, buf, count, peer);
    hb_chan *ch = chan_of(c->w, peer, c->rank);
    void *slot = NULL;
    if (rt_chan_recv_begin(&ch->ch, &slot) != PE_OK) /* an abort now leaves a taken one to us */
        return hb_fail(c->dev, PE_ECOMM,
                       "recv on rank %d from rank %d: the communicator was aborted (a peer "
                       "worker failed); the first failing worker's error says why",
                       c->rank, peer);
    hb_msg m = *(const hb_msg *)slot;
    int match = m.count == count;
    if (match && count && m.buf != buf)
        memcpy(buf, m.buf, count * sizeof *buf);
    rt_chan_recv_end(&ch->ch);
    hb_pending_done(ch->pend, !match);
    if (!match)
        return hb_fail(c->dev, PE_ECOMM,
                       "recv on rank %d from rank %d: expected %zu elements but the matching "
                       "send has %zu; sends and recvs of a pair are matched in order and "
                       "their counts must agree",
                       c->rank, peer, count, m.count);
    return PE_OK;
}
