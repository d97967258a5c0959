/* procs_mpi.c: the engine across the processes of an MPI job (procs.h): start-up
 * agreement, the control thread, failure and stop.
 *
 * Every phase that can fail on one process and not another (create, load) ends with
 * en_procs_agree (be_mpi_agree: an MPI_Allreduce of the outcomes), so that every process
 * takes the same branch before the next collective call. After load, one control thread
 * per process receives what the others send (ctl.h); the engine's threads send directly
 * (MPI is initialized with MPI_THREAD_MULTIPLE).
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/mpi/be_mpi.h"
#include "engine/engine_testing.h"
#include "engine/mpi/ctl.h"
#include "engine/procs.h"
#include "runtime/clock.h"

static int started_mpi; /* pe_mpi_init called MPI_Init_thread (main thread only) */
static atomic_int lost_process; /* a process of the job was lost: MPI cannot finalize */
static int generations; /* engines made with pe_config.mpi so far (their creators' thread) */
/* The control channel's communicator, made by the first such engine and never freed (ctl.h
 * says why). */
static MPI_Comm ctl_comm = MPI_COMM_NULL;
/* Such engines between en_procs_init and en_procs_destroy: at most one works, since their
 * control threads would take each other's messages from ctl_comm. */
static atomic_int live_engines;

/* Whether a launcher started this process as part of a job (OpenMPI, PMIx, Slurm's PMI). */
static int launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

pe_status pe_mpi_init(int *argc, char ***argv, int *nprocs, int *me)
{
    *nprocs = 1;
    *me = 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && !launched_by_mpi())
        return PE_OK;
    int provided = 0;
    if (inited)
        MPI_Query_thread(&provided);
    else if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        pe_set_last_error("MPI_Init_thread failed; is this process started by mpirun?");
        return PE_EINVAL;
    } else {
        started_mpi = 1;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        pe_set_last_error("the MPI library gives no MPI_THREAD_MULTIPLE (every worker thread "
                          "calls MPI); use an MPI built with thread support (Debian's "
                          "OpenMPI has it)");
        pe_mpi_finalize(); /* if it was ours to start */
        return PE_EINVAL;
    }
    MPI_Comm_size(MPI_COMM_WORLD, nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, me);
    return PE_OK;
}

void pe_mpi_finalize(void)
{
    if (started_mpi && !atomic_load(&lost_process)) /* else MPI_Finalize waits for it */
        MPI_Finalize();
    started_mpi = 0;
}

pe_status pe_mpi_agree(pe_status s)
{
    int inited = 0, finalized = 0, n = 1, me = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return s;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    /* the smallest (process, status) of a failure is the first in process order; a status
     * fits in 8 bits (pe_status has a dozen values) */
    int mine = s == PE_OK ? INT_MAX : me << 8 | (int)s, first = INT_MAX;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) {
        pe_set_last_error("MPI_Allreduce of the processes' outcomes failed (pe_mpi_agree)");
        return PE_ECOMM;
    }
    if (first == INT_MAX)
        return PE_OK;
    const pe_status agreed = (pe_status)(first & 0xff);
    if (first >> 8 != me) {
        char msg[PE_ERR_LEN];
        snprintf(msg, sizeof msg, "process %d of %d failed (%s); its own message says why",
                 first >> 8, n, pe_status_str(agreed));
        pe_set_last_error(msg);
    }
    return agreed;
}

void ctl_backoff(uint64_t *idle_since)
{
    const uint64_t now = rt_now_ns();
    if (*idle_since == 0)
        *idle_since = now;
    const uint64_t idle = now - *idle_since;
    if (idle < 2000000) { /* steps come back to back while the engine works: yield */
        sched_yield();
        return;
    }
    struct timespec ts = {0, idle < 200000000 ? 20000 : 1000000}; /* then 20 us, then 1 ms */
    nanosleep(&ts, NULL);
}

pe_status en_procs_init(pe_engine *e, pe_err *err)
{
    en_procs *p = &e->procs;
    p->n = 1;
    p->me = 0;
    if (!e->cfg.mpi)
        return PE_OK;
    if (e->cfg.mpi != 1)
        return pe_fail(err, PE_EINVAL, "pe_config.mpi=%d: use 1 (the grid spans the processes "
                       "of MPI_COMM_WORLD) or 0 (this process alone)", e->cfg.mpi);
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return pe_fail(err, PE_EINVAL, "pe_config.mpi is set but MPI is not initialized: "
                       "call pe_mpi_init first and launch with mpirun (docs/multinode.md)");
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
        return pe_fail(err, PE_EINVAL, "pe_config.mpi needs MPI initialized with "
                       "MPI_THREAD_MULTIPLE (pe_mpi_init does it): every worker thread calls "
                       "MPI");
    MPI_Comm_size(MPI_COMM_WORLD, &p->n);
    MPI_Comm_rank(MPI_COMM_WORLD, &p->me);
    en_ctl *c = calloc(1, sizeof *c);
    if (c)
        c->fail_reqs = calloc((size_t)p->n, sizeof *c->fail_reqs);
    if (!c || !c->fail_reqs) {
        free(c);
        return pe_fail(err, PE_ENOMEM, "out of host memory for the control channel");
    }
    if (ctl_comm == MPI_COMM_NULL) {
        if (MPI_Comm_dup(MPI_COMM_WORLD, &ctl_comm) != MPI_SUCCESS) {
            ctl_comm = MPI_COMM_NULL;
            free(c->fail_reqs);
            free(c);
            return pe_fail(err, PE_ECOMM, "MPI_Comm_dup of MPI_COMM_WORLD failed");
        }
        MPI_Comm_set_errhandler(ctl_comm, MPI_ERRORS_RETURN);
    }
    c->comm = ctl_comm;
    int *ub = NULL, has_ub = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
    const int most = has_ub && ub ? *ub / CTL_KINDS : 4096; /* MPI promises 32767 */
    c->generation = generations++ % most;
    for (int q = 0; q < p->n; q++)
        c->fail_reqs[q] = MPI_REQUEST_NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_mutex_init(&c->out_mu, NULL);
    atomic_init(&c->quit, 0);
    atomic_init(&c->told, 0);
    atomic_init(&c->stopping, 0);
    atomic_init(&c->started, 0);
    p->ctl = c; /* from here on, a failure is agreed with the other processes */
    if (atomic_fetch_add(&live_engines, 1) > 0)
        return pe_fail(err, PE_EINVAL, "another engine with pe_config.mpi exists in this "
                       "process: destroy it first (one MPI engine at a time per process; "
                       "docs/multinode.md)");
    return PE_OK;
}

pe_status en_procs_layout(pe_engine *e, pe_err *err)
{
    en_procs *p = &e->procs;
    p->local = e->world / p->n;
    p->first = p->me * p->local;
    p->node_rank = 0;
    p->node_procs = 1;
    if (!p->ctl) {
        memcpy(e->devices, e->cfg.devices, (size_t)e->world * sizeof *e->devices);
        return PE_OK;
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(p->ctl->comm, MPI_COMM_TYPE_SHARED, p->me, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "MPI_Comm_split_type (the processes of this node) failed");
    MPI_Comm_rank(node, &p->node_rank);
    MPI_Comm_size(node, &p->node_procs);
    MPI_Comm_free(&node);
    if (MPI_Allgather(e->cfg.devices, p->local, MPI_INT, e->devices, p->local, MPI_INT,
                      p->ctl->comm) != MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "MPI_Allgather of the processes' device ids failed");
    return PE_OK;
}

pe_status en_procs_agree(pe_engine *e, pe_status s, pe_err *err)
{
    en_procs *p = &e->procs;
    return p->ctl ? be_mpi_agree(p->ctl->comm, p->n, p->me, s, err) : s;
}

pe_status en_procs_same_backend(pe_engine *e, pe_err *err)
{
    en_procs *p = &e->procs;
    if (!p->ctl)
        return PE_OK;
    int *all = malloc((size_t)p->n * sizeof *all);
    int mine = (int)e->ops->kind;
    if (!all || MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, p->ctl->comm) != MPI_SUCCESS) {
        free(all);
        return pe_fail(err, PE_ECOMM, "MPI_Allgather of the processes' backends failed");
    }
    int other = -1;
    for (int q = 1; q < p->n && other < 0; q++)
        if (all[q] != all[0])
            other = q;
    pe_status s = PE_OK;
    if (other >= 0)
        s = pe_fail(err, PE_EINVAL, "process 0 runs the %s backend but process %d the %s one "
                    "(--backend auto picks on each node, and one without a usable GPU takes "
                    "the host); give every process the same --backend",
                    all[0] == PE_BACKEND_CUDA ? "cuda" : "host", other,
                    all[other] == PE_BACKEND_CUDA ? "cuda" : "host");
    free(all);
    return s;
}

/* What pe_engine_info reports of a worker of another process. */
typedef struct loaded_worker {
    uint64_t weight_bytes;
    pe_k_kv_shape kv_shape;
    int32_t kv_dtype, threads;
} loaded_worker;

pe_status en_procs_share_loaded(pe_engine *e, pe_err *err)
{
    en_procs *p = &e->procs;
    if (!p->ctl)
        return PE_OK;
    loaded_worker *all = calloc((size_t)e->world, sizeof *all);
    if (!all)
        return pe_fail(err, PE_ENOMEM, "out of host memory sharing the workers' sizes");
    for (int i = 0; i < p->local; i++) {
        const en_worker *w = &e->workers[p->first + i];
        all[p->first + i] = (loaded_worker){w->weights.arena_bytes, w->kv.shape,
                                            (int32_t)w->kv.dtype, w->threads};
    }
    const int bytes = (int)(p->local * sizeof *all);
    pe_status s = PE_OK;
    if (MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, bytes, MPI_BYTE,
                      p->ctl->comm) != MPI_SUCCESS)
        s = pe_fail(err, PE_ECOMM, "MPI_Allgather of the workers' sizes failed");
    for (int r = 0; s == PE_OK && r < e->world; r++) {
        en_worker *w = &e->workers[r];
        if (en_procs_holds(p, r))
            continue;
        w->weights.arena_bytes = all[r].weight_bytes; /* no arena here: nothing to free */
        w->kv.shape = all[r].kv_shape;
        w->kv.dtype = (pe_dtype)all[r].kv_dtype;
        w->threads = all[r].threads;
    }
    free(all);
    return s;
}

/* One message: a step, a result, a failure or the stop. */
static void handle(pe_engine *e, int tag, int from, const char *body, size_t n)
{
    en_ctl *c = e->procs.ctl;
    switch (tag) {
    case CTL_STEP:
        ctl_take_step(e, body, n);
        break;
    case CTL_RESULT:
        ctl_take_result(e, body, n);
        break;
    case CTL_FAIL: {
        int32_t s = PE_ECOMM;
        char msg[PE_ERR_LEN + 64];
        if (n >= sizeof s)
            memcpy(&s, body, sizeof s);
        size_t len = n > sizeof s ? n - sizeof s : 0;
        int head = snprintf(msg, sizeof msg, "process %d: ", from);
        if (len > sizeof msg - 1 - (size_t)head)
            len = sizeof msg - 1 - (size_t)head;
        memcpy(msg + head, body + sizeof s, len);
        msg[(size_t)head + len] = '\0';
        atomic_store(&c->told, 1); /* not sent on: every process got it from its source */
        en_fail(e, (pe_status)s, msg);
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        break;
    }
    case CTL_STOP:
        pthread_mutex_lock(&c->mu);
        c->stopped = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        break;
    default:
        en_fail(e, PE_ECOMM, "an unknown control message came (a mixed build?)");
    }
}

pe_status ctl_send(en_ctl *c, const void *body, size_t n, int q, ctl_tag kind)
{
    MPI_Request req;
    if (MPI_Isend(body, (int)n, MPI_BYTE, q, ctl_tag_of(c, kind), c->comm, &req) != MPI_SUCCESS)
        return PE_ECOMM;
    uint64_t idle = 0;
    for (int done = 0; !done; ctl_backoff(&idle)) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return PE_ECOMM;
        if (!done && atomic_load(&c->lost[q])) {
            MPI_Request_free(&req);
            return PE_ECOMM;
        }
    }
    return PE_OK;
}

/* Process 0 beats to every other process, and they to it. */
static void beat(pe_engine *e)
{
    en_ctl *c = e->procs.ctl;
    for (int q = 0; q < e->procs.n; q++) {
        if (q == e->procs.me || (e->procs.me != 0 && q != 0))
            continue;
        MPI_Request req;
        if (MPI_Isend(NULL, 0, MPI_BYTE, q, ctl_tag_of(c, CTL_BEAT), c->comm, &req) ==
            MPI_SUCCESS)
            MPI_Request_free(&req);
    }
}

/* A process silent for CTL_SILENCE_NS is lost: the job fails with a message naming it,
 * and process 0 hands back the steps out at it. heard[q] 0: given up on already. */
static void watch(pe_engine *e, uint64_t now)
{
    en_ctl *c = e->procs.ctl;
    for (int q = 0; q < e->procs.n && !atomic_load(&c->stopping); q++) {
        if (q == e->procs.me || (e->procs.me != 0 && q != 0) || !c->heard[q] ||
            now - c->heard[q] < CTL_SILENCE_NS)
            continue;
        c->heard[q] = 0;
        atomic_store(&c->lost[q], 1);
        if (atomic_load(&e->failed) != PE_OK) /* a process stops beating once its engine */
            continue;                         /* failed: that is not a loss */
        atomic_store(&lost_process, 1);
        char msg[PE_ERR_LEN];
        snprintf(msg, sizeof msg, "process %d of %d has sent nothing for %.0f s: it died or its "
                 "node is unreachable, so the job stops (every open request ends with this "
                 "error)", q, e->procs.n, (double)CTL_SILENCE_NS * 1e-9);
        en_fail(e, PE_ECOMM, msg);
        if (e->procs.me == 0)
            ctl_drop_process(e, q);
    }
}

static void *ctl_main(void *arg)
{
    pe_engine *e = arg;
    en_ctl *c = e->procs.ctl;
    char *buf = NULL;
    size_t cap = 0;
    uint64_t idle = 0, next_beat = 0;
    for (int q = 0; q < e->procs.n; q++)
        c->heard[q] = rt_now_ns();
    while (!atomic_load(&c->quit)) {
        const uint64_t now = rt_now_ns();
        if (now >= next_beat) {
            beat(e);
            watch(e, now);
            next_beat = now + CTL_BEAT_NS;
        }
        int flag = 0, count = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, &m, &st) != MPI_SUCCESS) {
            en_fail(e, PE_ECOMM, "MPI_Improbe on the control channel failed");
            break;
        }
        if (!flag) {
            ctl_backoff(&idle);
            continue;
        }
        idle = 0; /* busy again */
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count > cap) {
            char *b = realloc(buf, (size_t)count);
            if (!b) {
                en_fail(e, PE_ENOMEM, "out of host memory for a control message");
                break;
            }
            buf = b;
            cap = (size_t)count;
        }
        if (MPI_Mrecv(buf, count, MPI_BYTE, &m, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            en_fail(e, PE_ECOMM, "MPI_Mrecv on the control channel failed");
            break;
        }
        if (st.MPI_TAG / CTL_KINDS != c->generation)
            continue; /* left over from an earlier engine */
        const int kind = st.MPI_TAG % CTL_KINDS;
        if (c->heard[st.MPI_SOURCE]) /* not given up on */
            c->heard[st.MPI_SOURCE] = rt_now_ns();
        if (kind == CTL_BEAT)
            continue;
        handle(e, kind, st.MPI_SOURCE, buf, (size_t)count);
        if (kind == CTL_STOP)
            break;
    }
    free(buf);
    /* Broken off (the engine failed on an MPI error here): process 0 hears nothing more,
     * so the steps out at the others come back now, failed. */
    for (int q = 1; e->procs.me == 0 && !atomic_load(&c->quit) && q < e->procs.n; q++) {
        atomic_store(&c->lost[q], 1);
        ctl_drop_process(e, q);
    }
    return NULL;
}

pe_status en_procs_start(pe_engine *e, pe_err *err)
{
    en_ctl *c = e->procs.ctl;
    if (!c)
        return PE_OK;
    c->heard = calloc((size_t)e->procs.n, sizeof *c->heard);
    c->out = calloc((size_t)e->world, sizeof *c->out);
    c->lost = calloc((size_t)e->procs.n, sizeof *c->lost);
    if (!c->heard || !c->out || !c->lost)
        return pe_fail(err, PE_ENOMEM, "out of host memory for the control thread");
    atomic_store(&c->started, 1); /* before the thread, which reads it (en_procs_fail) */
    if (pthread_create(&c->thread, NULL, ctl_main, e) != 0) {
        atomic_store(&c->started, 0);
        return pe_fail(err, PE_ENOMEM, "cannot start the control thread");
    }
    return PE_OK;
}

pe_status en_procs_send_step(pe_engine *e, const en_worker *w, const en_step *st)
{
    return ctl_send_step(e, w, st);
}

void en_procs_step_back(en_worker *w, en_step *st) { ctl_send_result(w, st); }

void en_procs_fail(pe_engine *e, const char *msg)
{
    en_ctl *c = e->procs.ctl;
    if (!c || !atomic_load(&c->started) || atomic_exchange(&c->told, 1))
        return;
    int32_t s = (int32_t)atomic_load(&e->failed);
    size_t len = strlen(msg) < PE_ERR_LEN ? strlen(msg) : PE_ERR_LEN;
    memcpy(c->fail_body, &s, sizeof s);
    memcpy(c->fail_body + sizeof s, msg, len);
    for (int q = 0; q < e->procs.n; q++) /* not waited for: a peer may be gone */
        if (q != e->procs.me)
            MPI_Isend(c->fail_body, (int)(sizeof s + len), MPI_BYTE, q, ctl_tag_of(c, CTL_FAIL),
                      c->comm,
                      &c->fail_reqs[q]);
    pthread_mutex_lock(&c->mu); /* a follower returns with it */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void en_procs_stop(pe_engine *e)
{
    en_ctl *c = e->procs.ctl;
    if (!c || !atomic_load(&c->started) || e->procs.me != 0)
        return;
    atomic_store(&c->stopping, 1); /* the others go quiet now */
    for (int q = 1; q < e->procs.n; q++)
        MPI_Send(NULL, 0, MPI_BYTE, q, ctl_tag_of(c, CTL_STOP), c->comm);
}

pe_status en_procs_follow(pe_engine *e, pe_err *err)
{
    en_ctl *c = e->procs.ctl;
    pthread_mutex_lock(&c->mu);
    while (!c->stopped && atomic_load(&e->failed) == PE_OK)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return en_failure(e, err);
}

void en_procs_destroy(pe_engine *e)
{
    en_ctl *c = e->procs.ctl;
    if (!c)
        return;
    atomic_store(&c->quit, 1);
    if (atomic_load(&c->started))
        pthread_join(c->thread, NULL);
    /* The failure's sends are buffered at once when their peers live; one to a peer that
     * is gone may never end: then MPI keeps fail_body, and so must we. */
    int done = 0;
    const uint64_t t0 = rt_now_ns();
    for (uint64_t idle = 0; !done && rt_now_ns() - t0 < 1000000000; ctl_backoff(&idle))
        MPI_Testall(e->procs.n, c->fail_reqs, &done, MPI_STATUSES_IGNORE);
    for (int q = 0; !done && q < e->procs.n; q++)
        if (c->fail_reqs[q] != MPI_REQUEST_NULL)
            MPI_Request_free(&c->fail_reqs[q]);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->out_mu);
    free(c->fail_reqs);
    free(c->heard);
    free(c->out);
    free(c->lost);
    if (done)
        free(c);
    e->procs.ctl = NULL;
    atomic_fetch_sub(&live_engines, 1);
}

pe_status en_send_late_message(pe_engine *e)
{
    en_ctl *c = e->procs.ctl;
    if (!c || e->procs.me == 0)
        return PE_OK;
    return MPI_Send(NULL, 0, MPI_BYTE, 0, ctl_tag_of(c, CTL_BEAT), c->comm) == MPI_SUCCESS
               ? PE_OK
               : PE_ECOMM;
}
