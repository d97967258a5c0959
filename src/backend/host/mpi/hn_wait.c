/* hn_wait.c: the MPI plumbing of net worlds: tags, MPI errors as messages, waits that an
 * abort interrupts, and the MPI sends a device's synchronize waits for. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "backend/host/mpi/hn.h"

/* ---- tags ------------------------------------------------------------------------------ */

int hn_tag(const hb_net *net, int n, int from, int to, int kind)
{
    return net->tag0 + (from * n + to) * 2 + kind; /* below MPI_TAG_UB: hn_tags_take */
}

pe_status hn_tags_take(hn_ctx *ctx, int n, int *tag0, pe_err *err)
{
    int64_t span = 2 * (int64_t)n * n;
    pthread_mutex_lock(&ctx->mu);
    int64_t first = ctx->next_tag;
    ctx->next_tag += span;
    pthread_mutex_unlock(&ctx->mu);
    if (first + span - 1 > ctx->tag_ub)
        return pe_fail(err, PE_ECOMM,
                       "comm over processes: a communicator of %d ranks needs MPI tags %lld.."
                       "%lld, beyond this MPI's MPI_TAG_UB (%d); the process has made too many "
                       "communicators across processes",
                       n, (long long)first, (long long)(first + span - 1), ctx->tag_ub);
    *tag0 = (int)first;
    return PE_OK;
}

pe_status hn_mpi_fail(pe_err *err, int rc, const char *what)
{
    char words[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, words, &len) != MPI_SUCCESS)
        words[0] = '\0';
    return pe_fail(err, PE_ECOMM, "%s failed: MPI error %d (%s)", what, rc, words);
}

/* ---- waits ----------------------------------------------------------------------------- */

void hn_backoff(unsigned long spins)
{
    if (spins < 4096) { /* a few milliseconds of yielding, then sleep: 2-core machines */
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

void hn_cancel(MPI_Request *reqs, int nrecv, int k)
{
    for (int i = 0; i < k; i++) {
        if (reqs[i] == MPI_REQUEST_NULL)
            continue;
        if (i < nrecv) {
            MPI_Cancel(&reqs[i]);
            MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
        } else {
            MPI_Request_free(&reqs[i]);
        }
    }
}

pe_status hn_wait(hb_world *w, MPI_Request *reqs, int nrecv, int k, MPI_Status *sts,
                  pe_err *err)
{
    for (unsigned long spins = 0;; spins++) {
        int left = 0;
        for (int i = 0; i < k; i++) {
            if (reqs[i] == MPI_REQUEST_NULL)
                continue;
            int done = 0;
            MPI_Status st;
            int rc = MPI_Test(&reqs[i], &done, &st);
            if (rc != MPI_SUCCESS) {
                hn_cancel(reqs, nrecv, k);
                return hn_mpi_fail(err, rc, i < nrecv ? "MPI receive" : "MPI send");
            }
            if (done && i < nrecv && sts)
                sts[i] = st;
            left += !done;
        }
        if (!left)
            return PE_OK;
        if (rt_barrier_aborted(&w->bar)) {
            hn_cancel(reqs, nrecv, k);
            return PE_ECOMM;
        }
        hn_backoff(spins);
    }
}

/* ---- sends in flight, per device ------------------------------------------------------- */

/* hb_pending.net: the MPI sends of one device not yet seen complete (under its mu). */
typedef struct hn_sends {
    struct hn_send {
        MPI_Request req;
        hb_world *w; /* whose abort drops it */
    } *v;
    size_t n, cap;
} hn_sends;

/* Tests every send of s once: drops the finished ones, and (when drop_aborted) frees
 * those of aborted worlds. Returns how many failed. Under the pending's mu. */
static size_t sweep(hn_sends *s, int drop_aborted)
{
    size_t failed = 0, k = 0;
    for (size_t i = 0; i < s->n; i++) {
        struct hn_send e = s->v[i];
        int done = 0;
        if (MPI_Test(&e.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            done = 1;
            failed++;
        } else if (!done && drop_aborted && rt_barrier_aborted(&e.w->bar)) {
            done = 1;
            failed++;
        }
        if (done && e.req != MPI_REQUEST_NULL)
            MPI_Request_free(&e.req);
        if (!done)
            s->v[k++] = e;
    }
    s->n = k;
    return failed;
}

pe_status hn_pending_add(be_comm *c, MPI_Request req)
{
    hb_pending *p = c->pend;
    pthread_mutex_lock(&p->mu);
    hn_sends *s = p->net;
    if (!s)
        s = p->net = calloc(1, sizeof *s);
    if (s && s->n == s->cap) /* a sender that seldom synchronizes: reap the finished ones */
        p->failed += sweep(s, 0);
    if (s && s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct hn_send *v = realloc(s->v, cap * sizeof *v);
        if (v) {
            s->v = v;
            s->cap = cap;
        }
    }
    int added = s && s->n < s->cap;
    if (added)
        s->v[s->n++] = (struct hn_send){req, c->w};
    pthread_mutex_unlock(&p->mu);
    if (added)
        return PE_OK;
    /* No memory to remember it: finish it now. */
    pe_err err = {{0}};
    if (hn_wait(c->w, &req, 0, 1, NULL, &err) != PE_OK)
        return hb_fail(c->dev, PE_ECOMM, "send on rank %d: %s", c->rank,
                       err.msg[0] ? err.msg : "the communicator was aborted");
    return PE_OK;
}

size_t hb_net_sync(hb_pending *p)
{
    size_t failed = 0;
    for (unsigned long spins = 0;; spins++) {
        pthread_mutex_lock(&p->mu);
        hn_sends *s = p->net;
        size_t left = 0;
        if (s) {
            failed += sweep(s, 1);
            left = s->n;
        }
        pthread_mutex_unlock(&p->mu);
        if (!left)
            return failed;
        hn_backoff(spins);
    }
}

void hn_pending_forget(hb_world *w)
{
    for (int i = 0; i < w->nl; i++) {
        hb_pending *p = w->ranks[i].pend;
        if (!p)
            continue;
        pthread_mutex_lock(&p->mu);
        hn_sends *s = p->net;
        size_t k = 0;
        for (size_t j = 0; s && j < s->n; j++) {
            struct hn_send e = s->v[j];
            if (e.w != w) {
                s->v[k++] = e;
                continue;
            }
            int done = 0;
            if (MPI_Test(&e.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
                p->failed++; /* never seen received: synchronize reports it */
                if (e.req != MPI_REQUEST_NULL)
                    MPI_Request_free(&e.req);
            }
        }
        if (s)
            s->n = k;
        pthread_mutex_unlock(&p->mu);
    }
}

void hb_net_pending_free(hb_pending *p)
{
    hn_sends *s = p->net;
    if (s)
        free(s->v);
    free(s);
    p->net = NULL;
}
