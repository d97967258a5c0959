/* hn.h: net worlds, the inside: host communicators whose ranks live in several MPI
 * processes (the hook is hb_net.h).
 *
 * Layout. A world's ranks are process-major: process p (0..P-1 among the world's
 * processes) holds ranks [lo[p], lo[p + 1]); their counts may differ. Inside a process the
 * ranks meet as in a single-process world (slots, the barrier over the local ranks,
 * channels). Between processes only leaders talk: the lowest local rank of the world in
 * each process does the MPI calls of a collective, one message per process pair, while
 * the other local ranks wait at the local barrier.
 *
 * MPI. One MPI_Comm_dup of MPI_COMM_WORLD (hn_ctx), made by the first comm_create_procs,
 * carries every net world of the process, and is never freed: a freed communicator's
 * context id is reused by the next MPI_Comm_dup, and messages of an aborted or failed
 * exchange still on their way would land in the new one (seen with OpenMPI 4.1: a later
 * communicator's point-to-point messages then arrived out of order). Each world owns a
 * range of tags, [base, base + 2 n^2), the same on every process: a process-wide counter
 * hands out the ranges in creation order, also for the groups of a split that have no
 * rank here, so it stays in step because every process makes the same comm_create_procs
 * and splits in the same order. A message's tag is
 *     base + (from * n + to) * 2 + kind
 * kind 0 for point to point (from, to: the ranks) and 1 for a collective (from, to: the
 * two leaders); ranges of dead worlds are never reused, so nothing stale can match. MPI
 * keeps messages of one (source, tag) in order, which is all the matching needed.
 *
 * Waiting. Every MPI wait is a loop of MPI_Test that also watches the world's abort flag
 * (the local barrier's), so comm_abort wakes a rank blocked on another process.
 */
#ifndef PE_BACKEND_HOST_MPI_HN_H
#define PE_BACKEND_HOST_MPI_HN_H

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>

#include "backend/host/hb_net.h"

/* What every net world of the process shares (made once, never freed). */
typedef struct hn_ctx {
    MPI_Comm comm;     /* MPI_Comm_dup(MPI_COMM_WORLD), MPI_ERRORS_RETURN */
    int nprocs;        /* processes of MPI_COMM_WORLD */
    int tag_ub;        /* MPI_TAG_UB */
    pthread_mutex_t mu;
    int64_t next_tag;  /* the first tag of the next world's range (under mu) */
} hn_ctx;

/* The header of a collective's message (64 bytes, so the payload after it stays aligned):
 * what the sending process's ranks called, checked by the receiver. */
typedef struct hn_wire {
    int32_t op, root, bad, from; /* bad: a rank of the sender failed its checks */
    uint64_t count;
    uint64_t number; /* the world's collectives before this one (0, 1, ...) */
    char pad[32];
} hn_wire;

struct hb_net {
    hn_ctx *ctx;
    int tag0;           /* its tags: [tag0, tag0 + 2 n^2), the same on every process */
    int nprocs, me;     /* processes of this world; me is this process's index */
    int *lo;            /* (nprocs + 1): process p holds ranks [lo[p], lo[p + 1]) */
    int *mpi;           /* (nprocs): process p's rank in ctx->comm */
    int *proc;          /* (n): the process index of each rank */
    /* The leader's exchange (written by the leader between the local barriers of a
     * collective, read by every local rank after the second one): */
    char *out, *in;     /* outgoing and incoming blocks, each a hn_wire then floats */
    size_t out_cap, in_cap; /* bytes */
    char **sp, **rp;    /* (nprocs) the block sent to / received from process p, or NULL */
    size_t *sb, *rb;    /* (nprocs) their bytes */
    size_t *got;        /* (nprocs) the bytes received from p */
    hn_wire *hin;       /* (nprocs) where headers land when the blocks could not be had */
    hn_wire hdr;        /* this process's header, sent alone when its ranks failed */
    const float **base; /* (nprocs) process p's payload, this collective */
    const float **rows; /* (nl, n) each local rank's row pointers */
    MPI_Request *reqs;  /* (2 * nprocs) */
    MPI_Status *sts;    /* (nprocs) */
    int *from;          /* (nprocs) the process of each receive posted */
    uint64_t calls;     /* collectives run so far (the leader's count, in hdr.number) */
    pe_status st;       /* the leader's result */
    pe_err msg;         /* and its message when st != PE_OK ("" for an abort) */
};

/* ---- tags, errors and waits (hn_wait.c) ---- */
/* The tag of a message of a world of n ranks from `from` to `to` (kind 0: p2p, 1:
 * collective). */
int hn_tag(const hb_net *net, int n, int from, int to, int kind);
/* Takes the next range of tags for a world of n ranks: its first tag in *tag0, or
 * PE_ECOMM (message in err, when not NULL) once MPI_TAG_UB is passed. The range is taken
 * even then, so the counter stays in step with the other processes. */
pe_status hn_tags_take(hn_ctx *ctx, int n, int *tag0, pe_err *err);
/* Writes "what: MPI_Error_string(rc)" into err; returns PE_ECOMM. */
pe_status hn_mpi_fail(pe_err *err, int rc, const char *what);
/* Waits for reqs[0..nrecv) (receives) and reqs[nrecv..k) (sends), watching w's abort.
 * On abort: receives are cancelled, sends freed; returns PE_ECOMM with no message (the
 * caller words it, as hb_p2p.c does). An MPI error: PE_ECOMM with its words in err.
 * sts (nrecv) gets the receives' statuses. */
pe_status hn_wait(hb_world *w, MPI_Request *reqs, int nrecv, int k, MPI_Status *sts,
                  pe_err *err);
/* Abandons the requests of reqs (as hn_wait's) still active: receives cancelled (and
 * completed, as MPI asks), sends freed (MPI finishes or drops them on its own). */
void hn_cancel(MPI_Request *reqs, int nrecv, int k);
/* One round of backing off in a wait loop that has run `spins` times. */
void hn_backoff(unsigned long spins);
/* Registers an MPI send of rank c, finished when synchronize(c's device) sees it done. */
pe_status hn_pending_add(be_comm *c, MPI_Request req);
/* Drops w's sends still in flight from its ranks' devices (each a failed send). */
void hn_pending_forget(hb_world *w);

#endif
