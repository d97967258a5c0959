/* hn_world.c: net worlds' life cycle: comm_create_procs (the root world, and the first
 * time the process's MPI communicator), comm_split over processes, free. */
#include <stdlib.h>
#include <string.h>

#include "backend/host/mpi/hn.h"
#include "backend/mpi/be_mpi.h"

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static hn_ctx *ctx_of_process; /* made by the first comm_create_procs, never freed (hn.h) */

static void net_arrays_free(hb_net *net)
{
    free(net->lo);
    free(net->mpi);
    free(net->proc);
    free(net->sp);
    free(net->rp);
    free(net->sb);
    free(net->rb);
    free(net->got);
    free(net->hin);
    free(net->base);
    free(net->rows);
    free(net->reqs);
    free(net->sts);
    free(net->from);
}

void hb_net_free(hb_world *w)
{
    hb_net *net = w->net;
    if (!net)
        return;
    hn_pending_forget(w);
    free(net->out);
    free(net->in);
    net_arrays_free(net);
    free(net);
    w->net = NULL;
}

int hb_net_remote(const be_comm *c, int peer)
{
    const hb_world *w = c->w;
    return w->net && (peer < w->lo || peer >= w->lo + w->nl);
}

/* A net world of n ranks with the tags from tag0 on: rank r lives on MPI process
 * mpi_of[r] (process-major), this process is me_mpi and holds nl of them, on devs (nl). */
static pe_status net_new(hn_ctx *ctx, int tag0, int n, const int *mpi_of, int me_mpi,
                         be_device *const *devs, int nl, hb_world **out, pe_err *err)
{
    pe_status s = PE_OK;
    hb_net *net = calloc(1, sizeof *net);
    if (!net)
        return pe_fail(err, PE_ENOMEM, "comm over processes: out of memory");
    net->ctx = ctx;
    net->tag0 = tag0;
    net->lo = malloc(((size_t)n + 1) * sizeof *net->lo);
    net->mpi = malloc((size_t)n * sizeof *net->mpi);
    net->proc = malloc((size_t)n * sizeof *net->proc);
    /* per process: n is enough */
    net->sp = calloc((size_t)n, sizeof *net->sp);
    net->rp = calloc((size_t)n, sizeof *net->rp);
    net->sb = calloc((size_t)n, sizeof *net->sb);
    net->rb = calloc((size_t)n, sizeof *net->rb);
    net->got = calloc((size_t)n, sizeof *net->got);
    net->hin = calloc((size_t)n, sizeof *net->hin);
    net->base = calloc((size_t)n, sizeof *net->base);
    net->rows = calloc((size_t)n * (size_t)nl, sizeof *net->rows);
    net->reqs = calloc(2 * (size_t)n, sizeof *net->reqs);
    net->sts = calloc((size_t)n, sizeof *net->sts);
    net->from = calloc((size_t)n, sizeof *net->from);
    if (!net->lo || !net->mpi || !net->proc || !net->sp || !net->rp || !net->sb || !net->rb ||
        !net->got || !net->hin || !net->base || !net->rows || !net->reqs || !net->sts ||
        !net->from) {
        s = pe_fail(err, PE_ENOMEM, "comm over processes: out of memory for %d ranks", n);
        goto fail;
    }
    int P = 0;
    net->me = -1;
    for (int r = 0; r < n; r++) {
        if (r == 0 || mpi_of[r] != mpi_of[r - 1]) {
            for (int p = 0; p < P; p++)
                if (net->mpi[p] == mpi_of[r]) {
                    s = pe_fail(err, PE_EINVAL,
                                "comm over processes: rank %d is on process %d again after "
                                "other processes; the ranks of a process must be "
                                "consecutive (process-major)",
                                r, mpi_of[r]);
                    goto fail;
                }
            net->lo[P] = r;
            net->mpi[P] = mpi_of[r];
            if (mpi_of[r] == me_mpi)
                net->me = P;
            P++;
        }
        net->proc[r] = P - 1;
    }
    net->lo[P] = n;
    net->nprocs = P;
    if (net->me < 0 || net->lo[net->me + 1] - net->lo[net->me] != nl) {
        s = pe_fail(err, PE_EINVAL, "comm over processes: process %d holds %d ranks here but "
                    "the layout gives it others", me_mpi, nl);
        goto fail;
    }
    hb_world *w = NULL;
    s = hb_world_new(devs, nl, n, net->lo[net->me], &w, err);
    if (s != PE_OK)
        goto fail;
    w->net = net;
    *out = w;
    return PE_OK;
fail:
    net_arrays_free(net);
    free(net);
    return s;
}

/* The process's MPI communicator for net worlds: made by the first call (every process
 * makes its first comm_create_procs together: MPI_Comm_dup is collective), then reused. */
static pe_status ctx_get(int nprocs, hn_ctx **out, pe_err *err)
{
    pthread_mutex_lock(&ctx_mu);
    hn_ctx *ctx = ctx_of_process;
    pe_status s = PE_OK;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        int rc = ctx ? MPI_Comm_dup(MPI_COMM_WORLD, &ctx->comm) : MPI_SUCCESS;
        if (!ctx || rc != MPI_SUCCESS || pthread_mutex_init(&ctx->mu, NULL) != 0) {
            s = !ctx || rc == MPI_SUCCESS
                    ? pe_fail(err, PE_ENOMEM, "comm_create_procs: out of memory")
                    : hn_mpi_fail(err, rc, "comm_create_procs: MPI_Comm_dup(MPI_COMM_WORLD)");
            free(ctx);
            ctx = NULL;
        } else {
            MPI_Comm_set_errhandler(ctx->comm, MPI_ERRORS_RETURN);
            int *ub = NULL, flag = 0;
            MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
            ctx->tag_ub = flag && ub ? *ub : 32767; /* the least the standard allows */
            ctx->nprocs = nprocs;
            ctx_of_process = ctx;
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    *out = ctx;
    return s;
}

pe_status hb_net_create_procs(be_device *const *devs, int n, const be_procs *procs,
                              be_comm **out, pe_err *err)
{
    pe_status s = out ? be_procs_check(devs, n, procs, err)
                      : pe_fail(err, PE_EINVAL, "comm_create_procs: NULL out");
    if (s != PE_OK)
        return s;
    int P = procs->nprocs, me = procs->me, per = n / P, lo = me * per;
    for (int r = 0; r < n; r++)
        out[r] = NULL;
    if (P == 1) /* no other process: a plain world, no MPI */
        return hb_comm_create(devs, n, out, err);
    s = be_mpi_check(procs, err);
    if (s != PE_OK)
        return s;
    int *mpi_of = malloc((size_t)n * sizeof *mpi_of);
    if (!mpi_of)
        return pe_fail(err, PE_ENOMEM, "comm_create_procs: out of memory");
    for (int r = 0; r < n; r++)
        mpi_of[r] = r / per;
    hn_ctx *ctx = NULL;
    hb_world *w = NULL;
    int tag0 = 0;
    s = ctx_get(P, &ctx, err);
    if (s == PE_OK)
        s = hn_tags_take(ctx, n, &tag0, err);
    if (s == PE_OK)
        s = net_new(ctx, tag0, n, mpi_of, me, devs + lo, per, &w, err);
    free(mpi_of);
    if (s != PE_OK)
        return s;
    for (int i = 0; i < per; i++)
        out[lo + i] = &w->ranks[i];
    return PE_OK;
}

/* Checks that parents are exactly this process's ranks of one n-rank net world. */
static pe_status split_check(be_comm *const *parents, int n, hb_world **wout, pe_err *err)
{
    hb_world *w = NULL;
    for (int r = 0; r < n && !w; r++)
        if (parents[r])
            w = parents[r]->w;
    for (int r = 0; r < n; r++) {
        int local = r >= w->lo && r < w->lo + w->nl;
        if (w->n != n || parents[r] != (local ? &w->ranks[r - w->lo] : NULL))
            return pe_fail(err, PE_EINVAL,
                           "comm_split: entry %d is not %s of the same %d-rank communicator; "
                           "pass this process's ranks of one communicator in rank order, NULL "
                           "for the others",
                           r, local ? "this process's rank" : "NULL (another process's rank)",
                           n);
    }
    if (w->net->nprocs != w->net->ctx->nprocs)
        return pe_fail(err, PE_EINVAL,
                       "comm_split: the communicator spans %d of the %d processes; splitting "
                       "one that spans only some is not supported (the tag counters of the "
                       "other processes would go out of step)",
                       w->net->nprocs, w->net->ctx->nprocs);
    *wout = w;
    return PE_OK;
}

/* Makes group gi (ranks with group[r] == gi, sub[r] their new ranks) of parent world w,
 * whose tag range starts at tag0 (took: whether it could be taken): nothing when no rank
 * is here, a plain world when all are. */
static pe_status split_group(hb_world *w, int gi, int tag0, pe_status took, const int *group,
                             const int *sub, int *mpi_of, be_device **devs, be_comm **out,
                             pe_err *err)
{
    hb_net *net = w->net;
    int k = 0, here = 0;
    for (int r = 0; r < w->n; r++) {
        if (group[r] != gi)
            continue;
        mpi_of[k++] = net->mpi[net->proc[r]];
        if (r >= w->lo && r < w->lo + w->nl)
            devs[here++] = w->ranks[r - w->lo].dev;
    }
    if (here == 0)
        return PE_OK;
    hb_world *g = NULL;
    pe_status s;
    if (here == k)
        s = hb_world_new(devs, k, k, 0, &g, err);
    else if ((s = took) == PE_OK)
        s = net_new(net->ctx, tag0, k, mpi_of, net->mpi[net->me], devs, here, &g, err);
    if (s != PE_OK)
        return s;
    for (int r = 0; r < w->n; r++)
        if (group[r] == gi && r >= w->lo && r < w->lo + w->nl)
            out[r] = &g->ranks[sub[r] - g->lo];
    return PE_OK;
}

pe_status hb_net_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                       pe_err *err)
{
    hb_world *w = NULL;
    pe_status s = split_check(parents, n, &w, err);
    if (s != PE_OK)
        return s;
    int *group = malloc((size_t)n * sizeof *group), *sub = malloc((size_t)n * sizeof *sub);
    int *mpi_of = malloc((size_t)n * sizeof *mpi_of);
    be_device **devs = malloc((size_t)n * sizeof *devs);
    if (!group || !sub || !mpi_of || !devs)
        s = pe_fail(err, PE_ENOMEM, "comm_split: out of memory for %d ranks", n);
    int ngroups = s == PE_OK ? be_split_plan(colors, n, group, sub, err) : 0;
    if (ngroups < 0)
        s = PE_EINVAL;
    /* A tag range for every group on every process, whatever happens here: the counters
     * stay in step (groups inside one process do not use theirs). */
    int *size = calloc((size_t)n, sizeof *size), *tag0 = calloc((size_t)n, sizeof *tag0);
    pe_status *took = calloc((size_t)n, sizeof *took);
    if (s == PE_OK && (!size || !tag0 || !took))
        s = pe_fail(err, PE_ENOMEM, "comm_split: out of memory for %d ranks", n);
    for (int r = 0; s == PE_OK && r < n; r++)
        size[group[r]]++;
    pe_err tag_err = {{0}}; /* why a range could not be had */
    for (int gi = 0; s == PE_OK && gi < ngroups; gi++)
        took[gi] = hn_tags_take(w->net->ctx, size[gi], &tag0[gi], &tag_err);
    for (int gi = 0; s == PE_OK && gi < ngroups; gi++) {
        s = split_group(w, gi, tag0[gi], took[gi], group, sub, mpi_of, devs, out, err);
        if (s != PE_OK && took[gi] != PE_OK && err)
            *err = tag_err;
    }
    free(size);
    free(tag0);
    free(took);
    if (s != PE_OK)
        hb_comm_destroy(out, n);
    free(group);
    free(sub);
    free(mpi_of);
    free(devs);
    return s;
}
