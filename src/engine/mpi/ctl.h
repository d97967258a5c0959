/* ctl.h: the control channel between the processes of an MPI job (procs.h), private to
 * src/engine/mpi/.
 *
 * One MPI communicator of its own (a dup of MPI_COMM_WORLD), so that the engine's messages
 * never meet the backend's. A message's tag is its kind and its engine's generation (the
 * engines a process made before it with pe_config.mpi, the same count on every process):
 * a message left over from an earlier engine (a beat, a failure sent to a process that had
 * stopped listening) is dropped by the next engine's control thread.
 *
 * The communicator is made by the first engine and kept for every later one, never freed.
 * A left-over message still on its way when its communicator was freed would land in the
 * next communicator MPI gives the same context id, carrying the old one's sequence number:
 * OpenMPI's ob1 then matches it in place of a message of the new one, and drops that
 * message for good (seen: a step never reached a worker, so the job hung, or its TP ranks
 * ran different steps). In one communicator the left-overs keep their order and are
 * simply read and dropped.
 *
 * The body is bytes, packed field after field (the processes run one binary on one
 * architecture).
 */
#ifndef PE_ENGINE_MPI_CTL_H
#define PE_ENGINE_MPI_CTL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/engine_internal.h"

typedef enum ctl_tag {
    CTL_STEP = 1, /* 0 -> k: a step for one of k's workers (ctl_step.c) */
    CTL_RESULT,   /* k -> 0: that worker is back with it, and the writer's results */
    CTL_FAIL,     /* any -> any: the job failed (status, message) */
    CTL_STOP,     /* 0 -> k: process 0 destroys its engine; k's follower returns */
    CTL_BEAT      /* 0 -> k, k -> 0: still here (every CTL_BEAT_NS; ctl_main) */
} ctl_tag;

#define CTL_KINDS 8 /* tag = generation * CTL_KINDS + kind */

#define CTL_BEAT_NS 500000000ull    /* a process says it is alive this often */
#define CTL_SILENCE_NS 3000000000ull /* ... and is taken for lost after this long silent */
#define CTL_MAX_OUT 64               /* steps at one worker at once (decode_groups <= 64) */

/* Process 0: the steps out at one worker of another process, oldest first (it runs them in
 * order, so its results come back in that order). */
typedef struct ctl_out {
    uint64_t ids[CTL_MAX_OUT];
    int head, n;
    int lost; /* its process is lost: nothing more goes out to it */
} ctl_out;

struct en_ctl {
    MPI_Comm comm;
    int generation;       /* this engine's, in every tag (ctl_tag_of) */
    pthread_t thread;
    atomic_int started;   /* the control thread runs (read by any thread: en_procs_fail) */
    atomic_int quit;      /* the control thread ends (destroy) */
    atomic_int told;      /* this process's first failure was sent, or came from another */
    pthread_mutex_t mu;   /* follow's wait */
    pthread_cond_t cv;
    int stopped;          /* process 0 said stop (under mu) */
    char fail_body[sizeof(int32_t) + PE_ERR_LEN]; /* the failure sent (kept until destroy) */
    MPI_Request *fail_reqs; /* (n) its sends, freed by MPI once done */
    atomic_int stopping;  /* process 0 is stopping the job: silence is no loss any more */
    uint64_t *heard;      /* (n) when each process was last heard from (ctl_main's) */
    _Atomic int *lost;    /* (n) 1 once that process was taken for lost (watch) */
    pthread_mutex_t out_mu;
    ctl_out *out;         /* (world) process 0: steps out at each worker of another process */
};

/* The tag of a message of this kind from this engine. */
static inline int ctl_tag_of(const en_ctl *c, ctl_tag kind)
{
    return c->generation * CTL_KINDS + (int)kind;
}

/* One round of a polled wait idle since *idle_since (0: from now, which it sets): yields
 * for 2 ms, then sleeps 20 us a round, and 1 ms once idle for 200 ms. */
void ctl_backoff(uint64_t *idle_since);

/* A message to process q: PE_OK once MPI is done with body, PE_ECOMM when MPI fails or q is
 * taken for lost meanwhile (then MPI may still read body: keep it). Polls, so that a peer
 * that stopped receiving cannot block the sender for good. */
pe_status ctl_send(en_ctl *c, const void *body, size_t n, int q, ctl_tag kind);

/* ---- ctl_step.c ---- */
/* Process 0: the step for remote worker w, sent to its process. */
pe_status ctl_send_step(pe_engine *e, const en_worker *w, const en_step *st);
/* Process k: a CTL_STEP body -> a step on its worker's queue (or straight back, failed). */
void ctl_take_step(pe_engine *e, const void *body, size_t n);
/* Process k: worker w's part of st back to process 0; frees st. */
void ctl_send_result(en_worker *w, en_step *st);
/* Process 0: a CTL_RESULT body -> the step's results, and the part back at its replica. */
void ctl_take_result(pe_engine *e, const void *body, size_t n);
/* Process 0, process q lost: every step out at its workers back at its replica, failed
 * (after en_fail, whose status the step's writer part carries). */
void ctl_drop_process(pe_engine *e, int q);

#endif
