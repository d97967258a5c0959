/* procs.h: the grid across the processes of an MPI job (pe_config.mpi, docs/multinode.md).
 *
 * One process per node, each running the workers of its own devices, one thread each, as
 * in one process. World rank r lives on process r / local (process-major), so TP groups
 * (consecutive ranks) stay inside a node and PP stages or DP replicas cross nodes.
 *
 * Process 0 runs the API, the router and every replica's scheduler. It sends each step to
 * the workers of the other processes as one control message per worker (the step's
 * metadata: tokens, positions, slots, chunks, block tables, sampling), and the step's one
 * writer (the last stage's TP rank 0) sends its results back (tokens, logits, top-k). The
 * activations between stages and the collectives go through the backend's communicators,
 * which span the processes (comm_create_procs). Each process has one control thread that
 * receives: steps (on processes 1..), results (on process 0), and the failure or stop of
 * the job. The first failure anywhere is sent to every other process, which fails its
 * engine with that message, so no rank waits for a peer that will not come.
 *
 * Without MPI in the build (PE_HAVE_MPI undefined), procs_none.c refuses pe_config.mpi
 * and every process is alone: n = 1, me = 0, local = world.
 */
#ifndef PE_ENGINE_PROCS_H
#define PE_ENGINE_PROCS_H

#include "common/error.h"

typedef struct pe_engine pe_engine;
typedef struct en_worker en_worker;
typedef struct en_step en_step;
typedef struct en_ctl en_ctl;

typedef struct en_procs {
    int n, me;    /* the job's processes, this one (1, 0 in one process) */
    int local;    /* ranks of each process (the world in one process) */
    int first;    /* this process's first world rank */
    int node_rank, node_procs; /* this process among those of its node (0 of 1 alone): they
                                * split the node's cores when mpirun did not bind them */
    en_ctl *ctl;  /* the control channel (MPI), NULL in one process */
} en_procs;

/* Whether world rank r runs in this process. */
static inline int en_procs_holds(const en_procs *p, int r)
{
    return r >= p->first && r < p->first + p->local;
}

/* From cfg.mpi: the processes (before the grid is resolved). PE_EINVAL with a message when
 * MPI is not running with MPI_THREAD_MULTIPLE or pengine was built without it. */
pe_status en_procs_init(pe_engine *e, pe_err *err);
/* After the grid: local and first from the world, the node's processes, and every
 * process's device ids into e->devices (world). */
pe_status en_procs_layout(pe_engine *e, pe_err *err);
/* Every process's outcome of a phase (create, load): the first failure, in process order,
 * with its message, becomes every process's (so that all stop, or all go on). */
pe_status en_procs_agree(pe_engine *e, pe_status s, pe_err *err);
/* Whether every process selected the same backend (--backend auto picks on each node):
 * PE_EINVAL on every process naming the first that differs from process 0. */
pe_status en_procs_same_backend(pe_engine *e, pe_err *err);
/* After load: the other processes' workers' weight bytes and cores, for pe_engine_info. */
pe_status en_procs_share_loaded(pe_engine *e, pe_err *err);
/* Starts the control thread (after load). */
pe_status en_procs_start(pe_engine *e, pe_err *err);
/* Process 0: step st to remote worker w (its part of the step comes back as a result). */
pe_status en_procs_send_step(pe_engine *e, const en_worker *w, const en_step *st);
/* Processes 1..: a step worker w ran (or dropped) goes back to process 0, then is freed. */
void en_procs_step_back(en_worker *w, en_step *st);
/* en_fail's first failure: told to every other process (any thread). */
void en_procs_fail(pe_engine *e, const char *msg);
/* Process 0, destroy: the others' followers return; then the control thread ends. */
void en_procs_stop(pe_engine *e);
/* Processes 1..: until process 0 stops the job or it fails. */
pe_status en_procs_follow(pe_engine *e, pe_err *err);
/* Ends the control thread and frees the channel (after the workers are joined). */
void en_procs_destroy(pe_engine *e);

#endif
