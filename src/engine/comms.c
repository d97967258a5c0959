/* comms.c: the engine's communicators and gpipe clocks.
 *
 * One world communicator over every worker (ncclCommInitAll on CUDA), and groups split
 * from it (ncclCommSplit):
 *   TP group (d, p): the tp ranks of one stage of one replica (color d * pp + p), for the
 *                    all-reduce / all-gather inside every sharded layer;
 *   DP group (p, t): the same rank of every replica (color p * tp + t), over which replica
 *                    0 broadcasts its weights at load time.
 * Stages talk over the world communicator: stage p sends to world rank (d, p + 1, t).
 * Over the processes of an MPI job, every process makes them all (comm_create_procs), with
 * NULL for the ranks of the others, which it skips.
 * The gpipe clock of replica d is a host barrier of its pp * tp workers (rt_barrier): it
 * orders threads, not devices, so it needs no communicator.
 */
#include <stdlib.h>

#include "engine/engine_internal.h"

enum { EN_TP = 0, EN_DP = 1, EN_WORLD = 2 }; /* rows of e->comms */

static be_comm **comms_row(pe_engine *e, int row) { return e->comms + (size_t)row * e->world; }

pe_status en_comms_create(pe_engine *e, pe_err *err)
{
    if (e->pp * e->tp > 1) {
        e->clocks = calloc((size_t)e->dp, sizeof *e->clocks);
        if (!e->clocks)
            return pe_fail(err, PE_ENOMEM, "out of host memory for the gpipe clocks");
        for (; e->nclocks < e->dp; e->nclocks++) {
            pe_status s = rt_barrier_init(&e->clocks[e->nclocks], e->pp * e->tp, err);
            if (s != PE_OK)
                return s;
        }
    }
    if (e->world == 1)
        return PE_OK;
    be_device **devs = calloc((size_t)e->world, sizeof *devs);
    int *colors = calloc((size_t)e->world, sizeof *colors);
    e->comms = calloc(3 * (size_t)e->world, sizeof *e->comms);
    pe_status s = devs && colors && e->comms
                      ? PE_OK
                      : pe_fail(err, PE_ENOMEM, "out of host memory for communicators");
    be_comm **world = s == PE_OK ? comms_row(e, EN_WORLD) : NULL;
    for (int r = 0; s == PE_OK && r < e->world; r++)
        devs[r] = e->workers[r].dev; /* NULL where another process holds the rank */
    const be_procs procs = {e->procs.n, e->procs.me};
    if (s == PE_OK)
        s = e->procs.n > 1 ? e->ops->comm_create_procs(devs, e->world, &procs, world, err)
                           : e->ops->comm_create(devs, e->world, world, err);
    if (s == PE_OK && e->tp > 1) {
        for (int r = 0; r < e->world; r++)
            colors[r] = r / e->tp; /* d * pp + p */
        s = e->ops->comm_split(world, e->world, colors, comms_row(e, EN_TP), err);
    }
    if (s == PE_OK && e->dp > 1) {
        for (int r = 0; r < e->world; r++)
            colors[r] = r % (e->pp * e->tp); /* p * tp + t */
        s = e->ops->comm_split(world, e->world, colors, comms_row(e, EN_DP), err);
    }
    for (int r = 0; s == PE_OK && r < e->world; r++) {
        en_worker *w = &e->workers[r];
        w->world_comm = world[r];
        w->tp_comm = comms_row(e, EN_TP)[r];
        w->dp_comm = comms_row(e, EN_DP)[r];
    }
    free(devs);
    free(colors);
    return s; /* on failure, what was made is freed with the engine */
}

void en_comms_abort(pe_engine *e)
{
    if (e->comms) /* one call: the CUDA backend revokes every NCCL communicator at once */
        e->ops->comm_abort_all(e->comms, 3 * e->world);
    for (int d = 0; d < e->nclocks; d++)
        rt_barrier_abort(&e->clocks[d]);
}

void en_comms_destroy(pe_engine *e)
{
    if (e->comms) /* each group once; the groups split from the world before the world */
        e->ops->comm_destroy(e->comms, 3 * e->world);
    free(e->comms);
    e->comms = NULL;
    for (int d = 0; d < e->nclocks; d++)
        rt_barrier_destroy(&e->clocks[d]);
    free(e->clocks);
    e->clocks = NULL;
    e->nclocks = 0;
}
