/* comms.c: the engine's communicators and gpipe clocks.
 *
 * One world communicator over every worker (ncclCommInitAll on CUDA), and groups split
 * from it (ncclCommSplit):
 *   TP group (d, p): the tp ranks of one stage of one replica (color d * pp + p), for the
 *                    all-reduce / all-gather inside every sharded layer;
 *   DP group (p, t): the same rank of every replica (color p * tp + t), over which replica
 *                    0 broadcasts its weights at load time.
 * Stages talk over the world communicator: stage p sends to world rank (d, p + 1, t).
 * The gpipe clock of replica d is a host barrier of its pp * tp workers (rt_barrier): it
 * orders threads, not devices, so it needs no communicator.
 */
#include <stdlib.h>

#include "engine/engine_internal.h"

/* out[r] = rank r's handle in the group of color colors[r] split from the world. */
static pe_status split(pe_engine *e, const int *colors, be_comm ***out, pe_err *err)
{
    *out = calloc((size_t)e->world, sizeof **out);
    if (!*out)
        return pe_fail(err, PE_ENOMEM, "out of host memory for communicators");
    return e->ops->comm_split(e->world_comms, e->world, colors, *out, err);
}

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
    e->world_comms = calloc((size_t)e->world, sizeof *e->world_comms);
    pe_status s = devs && colors && e->world_comms
                      ? PE_OK
                      : pe_fail(err, PE_ENOMEM, "out of host memory for communicators");
    for (int r = 0; s == PE_OK && r < e->world; r++)
        devs[r] = e->workers[r].dev;
    if (s == PE_OK)
        s = e->ops->comm_create(devs, e->world, e->world_comms, err);
    if (s == PE_OK && e->tp > 1) {
        for (int r = 0; r < e->world; r++)
            colors[r] = r / e->tp; /* d * pp + p */
        s = split(e, colors, &e->tp_comms, err);
    }
    if (s == PE_OK && e->dp > 1) {
        for (int r = 0; r < e->world; r++)
            colors[r] = r % (e->pp * e->tp); /* p * tp + t */
        s = split(e, colors, &e->dp_comms, err);
    }
    e->all_comms = s == PE_OK ? calloc(3 * (size_t)e->world, sizeof *e->all_comms) : NULL;
    if (s == PE_OK && !e->all_comms)
        s = pe_fail(err, PE_ENOMEM, "out of host memory for communicators");
    for (int r = 0; s == PE_OK && r < e->world; r++) {
        e->all_comms[r] = e->tp_comms ? e->tp_comms[r] : NULL;
        e->all_comms[e->world + r] = e->dp_comms ? e->dp_comms[r] : NULL;
        e->all_comms[2 * e->world + r] = e->world_comms[r];
    }
    for (int r = 0; s == PE_OK && r < e->world; r++) {
        en_worker *w = &e->workers[r];
        w->world_comm = e->world_comms[r];
        w->tp_comm = e->tp_comms ? e->tp_comms[r] : NULL;
        w->dp_comm = e->dp_comms ? e->dp_comms[r] : NULL;
    }
    free(devs);
    free(colors);
    return s; /* on failure, what was made is freed with the engine */
}

void en_comms_abort(pe_engine *e)
{
    if (e->all_comms) /* one call: the CUDA backend revokes every NCCL communicator at once */
        e->ops->comm_abort_all(e->all_comms, 3 * e->world);
    for (int d = 0; d < e->nclocks; d++)
        rt_barrier_abort(&e->clocks[d]);
}

static void destroy_all(pe_engine *e, be_comm ***comms)
{
    if (*comms)
        e->ops->comm_destroy(*comms, e->world);
    free(*comms);
    *comms = NULL;
}

void en_comms_destroy(pe_engine *e)
{
    free(e->all_comms);
    e->all_comms = NULL;
    destroy_all(e, &e->tp_comms);
    destroy_all(e, &e->dp_comms);
    destroy_all(e, &e->world_comms);
    for (int d = 0; d < e->nclocks; d++)
        rt_barrier_destroy(&e->clocks[d]);
    free(e->clocks);
    e->clocks = NULL;
    e->nclocks = 0;
}
