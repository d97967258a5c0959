/* hb_comm.c: host communicators: create (all ranks at once), abort, split, destroy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/hb_comm.h"
#include "backend/host/hb_net.h"

int hb_overlap(const float *a, size_t an, const float *b, size_t bn)
{
    if (!a || !b || !an || !bn)
        return 0;
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + bn * sizeof(float) && b0 < a0 + an * sizeof(float);
}

static void world_free(hb_world *w, int chans_ready, int bar_ready)
{
    hb_net_free(w);
    if (w->chans)
        for (int i = 0; i < chans_ready; i++)
            rt_chan_destroy(&w->chans[i].ch);
    if (w->ranks)
        for (int i = 0; i < w->nl; i++) {
            if (w->ranks[i].pend)
                hb_pending_release(w->ranks[i].pend);
            free(w->ranks[i].scratch);
        }
    if (bar_ready)
        rt_barrier_destroy(&w->bar);
    free(w->chans);
    free(w->slots);
    free(w->ranks);
    free(w);
}

/* devs (nl) must be distinct and non-NULL; lo is the first of them as a rank of n. */
static pe_status check_devs(be_device *const *devs, int nl, int lo, pe_err *err)
{
    for (int i = 0; i < nl; i++) {
        if (!devs[i])
            return pe_fail(err, PE_EINVAL, "comm_create: device of rank %d is NULL", lo + i);
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i])
                return pe_fail(err, PE_EINVAL,
                               "comm_create: ranks %d and %d are the same opened device (host "
                               "device %d); each rank needs its own worker thread and its own "
                               "open() of the device (opening one id twice is allowed)",
                               lo + j, lo + i, devs[i]->id);
    }
    return PE_OK;
}

pe_status hb_world_new(be_device *const *devs, int nl, int n, int lo, hb_world **out,
                       pe_err *err)
{
    pe_status s = check_devs(devs, nl, lo, err);
    if (s != PE_OK)
        return s;
    hb_world *w = calloc(1, sizeof *w);
    if (!w)
        return pe_fail(err, PE_ENOMEM, "comm_create: out of memory for %d ranks", n);
    w->n = n;
    w->lo = lo;
    w->nl = nl;
    w->ranks = calloc((size_t)nl, sizeof *w->ranks);
    w->slots = aligned_alloc(64, (size_t)nl * sizeof *w->slots);
    w->chans = calloc((size_t)nl * (size_t)nl, sizeof *w->chans);
    if (!w->ranks || !w->slots || !w->chans) {
        world_free(w, 0, 0);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of memory for %d ranks", n);
    }
    memset(w->slots, 0, (size_t)nl * sizeof *w->slots);
    s = rt_barrier_init(&w->bar, nl, err);
    if (s != PE_OK) {
        world_free(w, 0, 0);
        return s;
    }
    int scratch_ok = 1;
    for (int i = 0; i < nl; i++) {
        w->ranks[i] = (be_comm){.w = w, .rank = lo + i, .dev = devs[i], .pend = devs[i]->pend};
        hb_pending_retain(devs[i]->pend);
        w->ranks[i].scratch = aligned_alloc(64, HB_SMALL * sizeof(float));
        scratch_ok &= w->ranks[i].scratch != NULL;
    }
    if (!scratch_ok) {
        world_free(w, 0, 1);
        return pe_fail(err, PE_ENOMEM, "comm_create: out of memory for %d ranks", n);
    }
    int ready = 0;
    for (; ready < nl * nl; ready++) {
        hb_chan *ch = &w->chans[ready];
        if (rt_chan_init(&ch->ch, HB_RING, sizeof(hb_msg), NULL) != PE_OK)
            break;
        ch->pend = w->ranks[ready / nl].pend; /* chans[from * nl + to] */
    }
    if (ready < nl * nl) {
        world_free(w, ready, 1);
        return pe_fail(err, PE_ENOMEM, "comm_create: cannot create the %d channels of %d ranks",
                       nl * nl, nl);
    }
    *out = w;
    return PE_OK;
}

pe_status hb_comm_create(be_device *const *devs, int n, be_comm **out, pe_err *err)
{
    if (n < 1 || !devs || !out)
        return pe_fail(err, PE_EINVAL, "comm_create: need n >= 1 devices (got n=%d%s)", n,
                       devs && out ? "" : ", or a NULL array");
    hb_world *w = NULL;
    pe_status s = hb_world_new(devs, n, n, 0, &w, err);
    if (s != PE_OK)
        return s;
    for (int r = 0; r < n; r++)
        out[r] = &w->ranks[r];
    return PE_OK;
}

/* Drops every posted message nobody has started to copy (each a failed send for its
 * device's synchronize); the one being copied finishes normally. */
static void chan_abort(hb_chan *ch)
{
    for (size_t k = rt_chan_abort(&ch->ch); k > 0; k--)
        hb_pending_done(ch->pend, 1);
}

void hb_comm_abort(be_comm *comm)
{
    if (!comm)
        return;
    hb_world *w = comm->w;
    rt_barrier_abort(&w->bar); /* also what the MPI waits of a net world watch */
    for (int i = 0; i < w->nl * w->nl; i++)
        chan_abort(&w->chans[i]);
}

void hb_world_destroy(hb_world *w)
{
    /* Messages still posted were never received: their senders' synchronize must not
     * wait for them forever. */
    for (int k = 0; k < w->nl * w->nl; k++)
        chan_abort(&w->chans[k]);
    world_free(w, w->nl * w->nl, 1);
}

/* Frees the world of comms[i] and clears every entry of comms that points into it. */
static void world_destroy(be_comm **comms, int n, int i)
{
    hb_world *w = comms[i]->w;
    for (int r = i; r < n; r++)
        if (comms[r] && comms[r]->w == w)
            comms[r] = NULL;
    hb_world_destroy(w);
}

void hb_comm_abort_all(be_comm *const *comms, int n)
{
    for (int i = 0; comms && i < n; i++)
        hb_comm_abort(comms[i]); /* idempotent per world; nothing waits on a device */
}

void hb_comm_destroy(be_comm **comms, int n)
{
    for (int i = 0; comms && i < n; i++)
        if (comms[i])
            world_destroy(comms, n, i);
}

/* comm_split of a single-process world: parents holds all its n ranks. */
static pe_status split_local(be_comm *const *parents, int n, const int *colors, be_comm **out,
                             pe_err *err)
{
    for (int r = 0; r < n; r++)
        if (!parents[r] || parents[r]->w != parents[0]->w || parents[r]->rank != r ||
            parents[0]->w->n != n)
            return pe_fail(err, PE_EINVAL,
                           "comm_split: entry %d is not rank %d of the same %d-rank "
                           "communicator; pass every rank of one communicator, in rank order",
                           r, r, n);
    int *group = malloc((size_t)n * sizeof *group), *sub = malloc((size_t)n * sizeof *sub);
    be_device **devs = malloc((size_t)n * sizeof *devs);
    be_comm **made = malloc((size_t)n * sizeof *made);
    pe_status s = group && sub && devs && made ? PE_OK
                  : pe_fail(err, PE_ENOMEM, "comm_split: out of memory for %d ranks", n);
    int ngroups = s == PE_OK ? be_split_plan(colors, n, group, sub, err) : 0;
    if (ngroups < 0)
        s = PE_EINVAL;
    for (int gi = 0; s == PE_OK && gi < ngroups; gi++) {
        int k = 0;
        for (int r = 0; r < n; r++)
            if (group[r] == gi)
                devs[k++] = parents[r]->dev;
        s = hb_comm_create(devs, k, made, err);
        for (int r = 0; s == PE_OK && r < n; r++)
            if (group[r] == gi)
                out[r] = made[sub[r]];
    }
    if (s != PE_OK)
        hb_comm_destroy(out, n);
    free(group);
    free(sub);
    free(devs);
    free(made);
    return s;
}

pe_status hb_comm_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                        pe_err *err)
{
    if (n < 1 || !parents || !colors || !out)
        return pe_fail(err, PE_EINVAL, "comm_split: need n >= 1 ranks and non-NULL arrays");
    const be_comm *first = NULL; /* over processes, entries of other processes are NULL */
    for (int r = 0; r < n; r++) {
        out[r] = NULL;
        if (!first && parents[r])
            first = parents[r];
    }
    if (!first)
        return pe_fail(err, PE_EINVAL, "comm_split: every one of the %d parents is NULL", n);
    if (first->w->net)
        return hb_net_split(parents, n, colors, out, err);
    return split_local(parents, n, colors, out, err);
}

int hb_comm_rank(const be_comm *c) { return c->rank; }
int hb_comm_size(const be_comm *c) { return c->w->n; }
