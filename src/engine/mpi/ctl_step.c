/* ctl_step.c: steps to the other processes' workers, and their results back.
 *
 * CTL_STEP (0 -> k):   step_head | meta (meta_words int32) | scored (nlogits int32: 1 where
 *                      the row's logits go back whole, pe_score), the last only if nscored
 * CTL_RESULT (k -> 0): result_head | when the worker is the step's writer and it ran:
 *                      tokens (R int32) | logit (R) | top (R, topk int32) | topv (R, topk) |
 *                      lse (R) | target (R, only if targeted: the given tokens' logits) |
 *                      the scored rows (nscored, V) | else, failed: the message
 *
 * A step's id is its address on process 0, which keeps the step until every worker of its
 * replica is back; process k builds its own copy (remote_step) and frees it once sent back.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/mpi/ctl.h"
#include "engine/procs.h"

typedef struct step_head {
    uint64_t id, number;
    int32_t rank;
    int32_t ntok, nchunks, nlogits, nbt, npen, nmask, mask_words, max_keys, topk, sample,
        targeted, group, prefill, nscored;
} step_head;

typedef struct result_head {
    uint64_t id;
    int32_t rank, status, writer, nlogits, topk, nscored, msg_len;
} result_head;

/* Process k's copy of a step: the step, the task that carries it, and its id on 0. */
typedef struct remote_step {
    en_step st; /* first: the worker hands back &st */
    en_task task;
    uint64_t id;
    float *scored; /* (nscored, V) the rows pe_score wants whole */
    int nscored;
} remote_step;

/* ---- packing ---- */

typedef struct packer {
    char *p;
} packer;

static void put(packer *k, const void *src, size_t n)
{
    if (n)
        memcpy(k->p, src, n);
    k->p += n;
}

typedef struct reader {
    const char *p, *end;
} reader;

/* 0 when the body holds n more bytes (copied to dst, if not NULL). */
static int get(reader *r, void *dst, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return -1;
    if (dst && n)
        memcpy(dst, r->p, n);
    r->p += n;
    return 0;
}

static int is_writer(const pe_engine *e, int rank)
{
    return (rank / e->tp) % e->pp == e->pp - 1 && rank % e->tp == 0;
}

static int count_scored(const en_step *st)
{
    int n = 0;
    for (int i = 0; i < st->nlogits; i++)
        n += st->logit_dst[i] != NULL;
    return n;
}

/* ---- process 0's record of the steps out at other processes' workers ---- */

static int out_push(en_ctl *c, int rank, uint64_t id)
{
    pthread_mutex_lock(&c->out_mu);
    ctl_out *o = &c->out[rank];
    int ok = o->n < CTL_MAX_OUT && !o->lost;
    if (ok)
        o->ids[(o->head + o->n++) % CTL_MAX_OUT] = id;
    pthread_mutex_unlock(&c->out_mu);
    return ok ? 0 : -1;
}

/* 0 when step id was out at rank and is taken off; -1 when it is not there (never sent, or
 * handed back already by ctl_drop_process). Results mostly come back oldest first, but a
 * step its process refused at once (ctl_take_step) may pass those its worker still drops. */
static int out_remove(en_ctl *c, int rank, uint64_t id)
{
    pthread_mutex_lock(&c->out_mu);
    ctl_out *o = &c->out[rank];
    int i = 0;
    while (i < o->n && o->ids[(o->head + i) % CTL_MAX_OUT] != id)
        i++;
    const int found = i < o->n;
    for (; found && i + 1 < o->n; i++) /* the later ones move up, in order */
        o->ids[(o->head + i) % CTL_MAX_OUT] = o->ids[(o->head + i + 1) % CTL_MAX_OUT];
    if (found)
        o->n--;
    pthread_mutex_unlock(&c->out_mu);
    return found ? 0 : -1;
}

void ctl_drop_process(pe_engine *e, int q)
{
    en_ctl *c = e->procs.ctl;
    for (int rank = q * e->procs.local; rank < (q + 1) * e->procs.local; rank++) {
        uint64_t ids[CTL_MAX_OUT];
        pthread_mutex_lock(&c->out_mu);
        ctl_out *o = &c->out[rank];
        const int n = o->n;
        for (int i = 0; i < n; i++)
            ids[i] = o->ids[(o->head + i) % CTL_MAX_OUT];
        o->head = o->n = 0;
        o->lost = 1;
        pthread_mutex_unlock(&c->out_mu);
        for (int i = 0; i < n; i++) { /* the part of a worker that will not answer */
            en_step *st = (en_step *)(uintptr_t)ids[i];
            if (is_writer(e, rank))
                st->status = atomic_load(&e->failed);
            rt_queue_push(e->replicas[e->workers[rank].d].inbox, st);
        }
    }
}

pe_status ctl_send_step(pe_engine *e, const en_worker *w, const en_step *st)
{
    const int nscored = count_scored(st);
    step_head h = {
        .id = (uint64_t)(uintptr_t)st, .number = st->number, .rank = w->rank,
        .ntok = st->ntok, .nchunks = st->nchunks, .nlogits = st->nlogits, .nbt = st->nbt,
        .npen = st->npen, .nmask = st->nmask, .mask_words = st->mask_words,
        .max_keys = st->max_keys, .topk = st->topk, .sample = st->sample,
        .targeted = st->targeted,
        .group = st->group, .prefill = st->prefill, .nscored = nscored,
    };
    const size_t n = sizeof h + st->meta_words * sizeof(int32_t) +
                     (nscored ? (size_t)st->nlogits * sizeof(int32_t) : 0);
    char *body = malloc(n);
    if (!body)
        return PE_ENOMEM;
    packer k = {body};
    put(&k, &h, sizeof h);
    put(&k, st->meta, st->meta_words * sizeof(int32_t));
    for (int i = 0; nscored && i < st->nlogits; i++) {
        int32_t wants = st->logit_dst[i] != NULL;
        put(&k, &wants, sizeof wants);
    }
    en_ctl *c = e->procs.ctl;
    if (out_push(c, w->rank, h.id) != 0) { /* its process is lost */
        free(body);
        return PE_ECOMM;
    }
    const int q = w->rank / e->procs.local;
    pe_status s = ctl_send(c, body, n, q, CTL_STEP);
    if (s != PE_OK && out_remove(c, w->rank, h.id) != 0)
        s = PE_OK; /* its process was lost meanwhile: ctl_drop_process handed the part back */
    if (s != PE_ECOMM || !atomic_load(&c->lost[q]))
        free(body); /* else MPI may still read it: a small leak, once, for a lost process */
    return s;
}

static void remote_step_free(remote_step *rs)
{
    free(rs->scored);
    en_step_free(&rs->st); /* frees rs itself: st is its first member */
}

/* A step that could not be built or queued: straight back to process 0, failed. */
static void refuse(pe_engine *e, const step_head *h, pe_status why)
{
    remote_step *rs = calloc(1, sizeof *rs);
    if (!rs)
        return; /* the engine has failed already or is out of memory; 0 hears of the failure */
    rs->id = h->id;
    rs->st.nlogits = h->nlogits; /* the shape process 0 checks the answer against */
    rs->st.topk = h->topk;
    rs->st.status = why;
    ctl_send_result(&e->workers[h->rank], &rs->st);
}

void ctl_take_step(pe_engine *e, const void *body, size_t n)
{
    reader r = {body, (const char *)body + n};
    step_head h;
    if (get(&r, &h, sizeof h) != 0 || !en_procs_holds(&e->procs, h.rank)) {
        en_fail(e, PE_ECOMM, "a step message from process 0 is malformed (a mixed build?)");
        return;
    }
    remote_step *rs = calloc(1, sizeof *rs);
    pe_status s = rs ? PE_OK : PE_ENOMEM;
    if (s == PE_OK && en_step_reserve(&rs->st, h.ntok, h.nchunks, h.nbt, h.nlogits, h.npen,
                                     h.nmask, h.mask_words, h.topk))
        s = PE_ENOMEM;
    if (s == PE_OK) {
        en_step *st = &rs->st;
        rs->id = h.id;
        st->hdr.kind = EN_MSG_STEP;
        st->ntok = h.ntok, st->nchunks = h.nchunks, st->nlogits = h.nlogits, st->nbt = h.nbt;
        st->npen = h.npen, st->nmask = h.nmask, st->mask_words = h.mask_words;
        st->max_keys = h.max_keys, st->topk = h.topk, st->sample = h.sample;
        st->targeted = h.targeted;
        st->number = h.number, st->group = h.group, st->prefill = h.prefill;
        memset(st->logit_dst, 0, (size_t)h.nlogits * sizeof *st->logit_dst);
        if (get(&r, st->meta, st->meta_words * sizeof(int32_t)) != 0)
            s = PE_ECOMM;
        if (s == PE_OK && h.nscored) {
            const size_t V = (size_t)e->dec.cfg.V;
            rs->nscored = h.nscored;
            rs->scored = malloc((size_t)h.nscored * V * sizeof(float));
            s = rs->scored ? PE_OK : PE_ENOMEM;
            for (int i = 0, j = 0; s == PE_OK && i < h.nlogits; i++) {
                int32_t wants = 0;
                if (get(&r, &wants, sizeof wants) != 0 || j + wants > h.nscored)
                    s = PE_ECOMM;
                else if (wants)
                    st->logit_dst[i] = rs->scored + (size_t)j++ * V;
            }
        }
    }
    if (s == PE_OK) {
        rs->task = (en_task){.kind = EN_TASK_STEP, .step = &rs->st};
        if (rt_queue_push(e->workers[h.rank].inq, &rs->task) == PE_OK)
            return;
        pe_status f = atomic_load(&e->failed);
        s = f != PE_OK ? f : PE_ECLOSED;
    } else if (s == PE_ECOMM) {
        en_fail(e, s, "a step message from process 0 is malformed (a mixed build?)");
    } else {
        en_fail(e, s, "out of host memory for a step from process 0");
    }
    if (rs)
        remote_step_free(rs);
    refuse(e, &h, s);
}

void ctl_send_result(en_worker *w, en_step *st)
{
    pe_engine *e = w->e;
    remote_step *rs = (remote_step *)st;
    const int writer = is_writer(e, w->rank) && st->status == PE_OK;
    const size_t R = (size_t)st->nlogits, K = (size_t)st->topk, V = (size_t)e->dec.cfg.V;
    char msg[PE_ERR_LEN] = "";
    if (st->status != PE_OK) {
        pthread_mutex_lock(&e->err_mu);
        memcpy(msg, e->fail_err.msg, sizeof msg);
        pthread_mutex_unlock(&e->err_mu);
    }
    result_head h = {
        .id = rs->id, .rank = w->rank, .status = st->status, .writer = writer,
        .nlogits = st->nlogits, .topk = st->topk, .nscored = rs->nscored,
        .msg_len = st->status != PE_OK ? (int32_t)strlen(msg) : 0,
    };
    size_t n = sizeof h + (size_t)h.msg_len;
    if (writer)
        n += R * (2 * sizeof(int32_t) + 2 * sizeof(float)) + R * K * 2 * sizeof(float) +
             (st->targeted ? R * sizeof(float) : 0) +
             (size_t)rs->nscored * V * sizeof(float);
    char *body = malloc(n);
    if (body) {
        packer k = {body};
        put(&k, &h, sizeof h);
        if (writer) {
            put(&k, st->out_tokens, R * sizeof(int32_t));
            put(&k, st->out_logit, R * sizeof(float));
            put(&k, st->out_top, R * K * sizeof(int32_t));
            put(&k, st->out_topv, R * K * sizeof(float));
            put(&k, st->out_lse, R * sizeof(float));
            put(&k, st->out_target, st->targeted ? R * sizeof(float) : 0);
            put(&k, rs->scored, (size_t)rs->nscored * V * sizeof(float));
        }
        put(&k, msg, (size_t)h.msg_len);
        en_ctl *c = e->procs.ctl;
        if (ctl_send(c, body, (size_t)(k.p - body), 0, CTL_RESULT) != PE_OK)
            en_fail(e, PE_ECOMM, "cannot send a step's results to process 0 (MPI_Isend)");
        if (!atomic_load(&c->lost[0])) /* else MPI may still read it (see ctl_send_step) */
            free(body);
    } else {
        en_fail(e, PE_ENOMEM, "out of host memory for a step's results to process 0");
    }
    remote_step_free(rs);
}

void ctl_take_result(pe_engine *e, const void *body, size_t n)
{
    reader r = {body, (const char *)body + n};
    result_head h;
    if (get(&r, &h, sizeof h) != 0 || h.rank < 0 || h.rank >= e->world ||
        out_remove(e->procs.ctl, h.rank, h.id) != 0) {
        en_fail(e, PE_ECOMM, "a result message from another process is malformed, or names a "
                "step not out at that worker");
        return;
    }
    en_step *st = (en_step *)(uintptr_t)h.id; /* out at the replica until this part is back */
    const size_t R = (size_t)st->nlogits, K = (size_t)st->topk, V = (size_t)e->dec.cfg.V;
    int ok = h.nlogits == st->nlogits && h.topk == st->topk;
    if (ok && h.writer) {
        ok = get(&r, st->out_tokens, R * sizeof(int32_t)) == 0 &&
             get(&r, st->out_logit, R * sizeof(float)) == 0 &&
             get(&r, st->out_top, R * K * sizeof(int32_t)) == 0 &&
             get(&r, st->out_topv, R * K * sizeof(float)) == 0 &&
             get(&r, st->out_lse, R * sizeof(float)) == 0 &&
             get(&r, st->out_target, st->targeted ? R * sizeof(float) : 0) == 0;
        for (size_t i = 0; ok && i < R; i++)
            if (st->logit_dst[i])
                ok = get(&r, st->logit_dst[i], V * sizeof(float)) == 0;
    }
    if (!ok) {
        en_fail(e, PE_ECOMM, "a step's results from another process do not match the step");
        if (is_writer(e, h.rank))
            st->status = PE_ECOMM;
    } else if (h.status != PE_OK) {
        char msg[PE_ERR_LEN];
        size_t len = (size_t)h.msg_len < sizeof msg - 1 ? (size_t)h.msg_len : sizeof msg - 1;
        if (get(&r, msg, len) != 0)
            len = 0;
        msg[len] = '\0';
        en_fail(e, (pe_status)h.status, len ? msg : "a worker of another process failed");
        if (is_writer(e, h.rank))
            st->status = atomic_load(&e->failed);
    }
    rt_queue_push(e->replicas[e->workers[h.rank].d].inbox, st);
}
