/* hn_p2p.c: send and recv between ranks of a net world that live in different processes.
 *
 * send posts an MPI_Isend straight from the caller's buffer and returns; the request is
 * kept with the sender's device, whose synchronize waits for it (hn_wait.c), so the
 * buffer stays untouched until then, as backend.h asks. Two ranks that both send first do
 * not deadlock: nothing waits for the receiver. recv probes for the next message of its
 * (sender, receiver) tag, watching the abort flag, checks its count, then receives it.
 * MPI keeps the messages of one (source process, tag) in order, and only one thread sends
 * and one receives on a tag: messages of a pair are matched in order.
 */
#include <limits.h>
#include <stdlib.h>

#include "backend/host/mpi/hn.h"

static pe_status aborted(be_comm *c, const char *op, const char *dir, int peer)
{
    return hb_fail(c->dev, PE_ECOMM,
                   "%s on rank %d %s rank %d: the communicator was aborted (a peer worker "
                   "failed); the first failing worker's error says why",
                   op, c->rank, dir, peer);
}

static int too_big(be_comm *c, const char *op, size_t count)
{
    if (count <= INT_MAX)
        return 0;
    hb_fail(c->dev, PE_EINVAL, "%s on rank %d: %zu elements exceed one MPI message between "
            "processes (at most %d)", op, c->rank, count, INT_MAX);
    return 1;
}

pe_status hb_net_send(be_comm *c, const float *buf, size_t count, int peer)
{
    if (too_big(c, "send", count))
        return PE_EINVAL;
    hb_net *net = c->w->net;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Isend(buf, (int)count, MPI_FLOAT, net->mpi[net->proc[peer]],
                       hn_tag(net, c->w->n, c->rank, peer, 0), net->ctx->comm, &req);
    if (rc != MPI_SUCCESS) {
        pe_err err = {{0}};
        hn_mpi_fail(&err, rc, "MPI_Isend");
        return hb_fail(c->dev, PE_ECOMM, "send on rank %d to rank %d: %s", c->rank, peer,
                       err.msg);
    }
    return hn_pending_add(c, req);
}

/* Takes the next message of the pair, already matched (msg, st), whose count is not
 * count: receives it into a throwaway buffer so that the next recv sees the next one. */
static pe_status mismatch(be_comm *c, MPI_Message *msg, MPI_Status *st, size_t count, int peer)
{
    int bytes = 0;
    MPI_Get_count(st, MPI_BYTE, &bytes);
    void *junk = malloc(bytes > 0 ? (size_t)bytes : 1);
    MPI_Mrecv(junk, junk ? bytes : 0, MPI_BYTE, msg, MPI_STATUS_IGNORE);
    free(junk);
    return hb_fail(c->dev, PE_ECOMM,
                   "recv on rank %d from rank %d: expected %zu elements but the matching "
                   "send has %d; sends and recvs of a pair are matched in order and their "
                   "counts must agree",
                   c->rank, peer, count, bytes / (int)sizeof(float));
}

pe_status hb_net_recv(be_comm *c, float *buf, size_t count, int peer)
{
    if (too_big(c, "recv", count))
        return PE_EINVAL;
    hb_net *net = c->w->net;
    int src = net->mpi[net->proc[peer]], tag = hn_tag(net, c->w->n, peer, c->rank, 0);
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    for (unsigned long spins = 0;; spins++) {
        int found = 0, rc = MPI_Improbe(src, tag, net->ctx->comm, &found, &msg, &st);
        if (rc != MPI_SUCCESS) {
            pe_err err = {{0}};
            hn_mpi_fail(&err, rc, "MPI_Improbe");
            return hb_fail(c->dev, PE_ECOMM, "recv on rank %d from rank %d: %s", c->rank,
                           peer, err.msg);
        }
        if (found)
            break;
        if (rt_barrier_aborted(&c->w->bar))
            return aborted(c, "recv", "from", peer);
        hn_backoff(spins);
    }
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    if (got == MPI_UNDEFINED || (size_t)got != count)
        return mismatch(c, &msg, &st, count, peer);
    /* Matched: the data are on their way, so this wait ends without the abort flag. */
    int rc = MPI_Mrecv(buf, got, MPI_FLOAT, &msg, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        pe_err err = {{0}};
        hn_mpi_fail(&err, rc, "MPI_Mrecv");
        return hb_fail(c->dev, PE_ECOMM, "recv on rank %d from rank %d: %s", c->rank, peer,
                       err.msg);
    }
    return PE_OK;
}
