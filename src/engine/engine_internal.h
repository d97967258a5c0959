/* engine_internal.h: the engine's own structures, shared by the files of src/engine/.
 *
 * Threads: the client threads (pe_submit, pe_poll, ...), one router thread that turns
 * requests into tasks (an MLP's, under TP or gpipe: engine.c, start_router), and one worker
 * thread per device (rt_worker). Requests travel:
 *   pe_submit -> in-queue -> router -> worker in-queues (stage 0, or every stage for gpipe)
 *   -> stage to stage (stream) -> the last part done completes the request -> out-queue.
 */
#ifndef PE_ENGINE_INTERNAL_H
#define PE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/events.h"
#include "engine/procs.h"
#include "engine/schedule.h"
#include "engine/scheduler.h"
#include "model/blocks.h"
#include "model/decoder.h"
#include "model/mlp/forward.h"
#include "model/mlp/mlp.h"
#include "runtime/barrier.h"
#include "runtime/queue.h"
#include "runtime/topology.h"
#include "runtime/worker.h"

#define EN_MAX_STAGES 63 /* pe_engine_info.stage_first_layer holds pp + 1 */
#define EN_SEND_SLOTS 2

/* A pe_infer caller waiting for its request. It sleeps on the engine's sync_mu/sync_cv,
 * which outlive every caller, so a completer never touches a waiter's stack after the
 * waiter may have returned (only the done flag, under sync_mu). */
typedef struct en_sync {
    atomic_int done; /* 1 once the request completed */
} en_sync;

typedef enum en_task_kind {
    EN_TASK_MICROBATCH = 0, /* stream/naive: one micro-batch of one lane, moves stage to stage */
    EN_TASK_REQUEST,        /* gpipe: a whole request, every worker of the replica runs clocks */
    EN_TASK_LOAD,           /* upload this worker's shards */
    EN_TASK_STEP            /* a decoder step (en_step) of this worker's replica */
} en_task_kind;

typedef struct en_request en_request;

typedef struct en_task {
    en_task_kind kind;
    en_request *req; /* MICROBATCH, REQUEST */
    int mb;          /* micro-batch index (MICROBATCH) */
    en_step *step;   /* STEP */
} en_task;

struct en_request {
    pe_request req;
    int replica;
    int m;                    /* micro-batches actually used: min(config m, rows) */
    atomic_int remaining;     /* parts still to run; the worker that takes it to 0 completes */
    _Atomic pe_status status; /* PE_OK, or the first error */
    en_sync *sync;            /* pe_infer's waiter, or NULL: result goes to the out-queue */
    int ntasks;
    en_task tasks[];          /* MICROBATCH: (m, tp) lane-major per mb; REQUEST: (pp * tp) */
};

typedef struct en_trace_buf {
    pe_trace_event *ev; /* (cap) */
    size_t n, cap;
    size_t dropped;
} en_trace_buf;

typedef struct pe_engine pe_engine;

typedef struct en_worker {
    pe_engine *e;
    int rank, d, p, t; /* world rank and grid coordinates (t fastest) */
    int device_id;
    rt_queue *inq;
    rt_worker *thread;
    rt_binding bind;
    be_device *dev;
    int threads;         /* the cores its device computes with (host; 0 on CUDA), from setup */
    be_comm *world_comm; /* every worker; this one is its world rank (stage send/recv) */
    be_comm *tp_comm;    /* TP group of (d, p): tp ranks, this one is rank t; NULL if tp 1 */
    be_comm *dp_comm;    /* DP group of (p, t): dp ranks, this one is rank d; NULL if dp 1 */
    md_stage stage;     /* this rank's shards of stage p's layers */
    md_stage_scratch scratch;
    float *in_buf;                  /* (rows_cap, stage.in): received / uploaded input */
    float *out_buf[EN_SEND_SLOTS];  /* (rows_cap, stage.out): outputs, sent from here */
    int out_pending[EN_SEND_SLOTS]; /* a send from this slot may still be in flight */
    size_t rows_cap;
    int next_slot;
    /* decoders */
    md_weights weights;        /* this worker's part of the model */
    md_acts acts;              /* activations for a step */
    be_kv kv;                  /* its KV pool */
    int32_t *meta_dev;         /* (meta_cap) a step's metadata on the device */
    size_t meta_cap;
    en_trace_buf trace;
    long tasks_run;
    long fail_at_task; /* test hook: fail the Nth task (1-based); 0 = never */
} en_worker;

/* One DP replica of a decoder: its scheduler and the thread that drives it. */
/* A step out at a replica's workers, the replica's own (its thread alone touches it). */
typedef struct en_flight {
    en_step *step;
    en_task *tasks;            /* (pp * tp) the step's task for each worker of the replica */
    int out;                   /* dispatched and not complete */
    int parts;                 /* workers it has not come back from */
    pe_status dispatch_status; /* why a worker could not be sent it (the step comes back
                                * with it once the others are back) */
} en_flight;

typedef struct en_replica {
    pe_engine *e;
    int d;
    rt_queue *inbox;        /* en_msg*: sequences, cancels, steps back, wake-ups */
    pthread_t thread;
    int started;
    en_sched sched;         /* owned by the thread */
    en_flight *flights;     /* (nflights) step buffers, one per group in flight: pp of them
                             * by default, so that each stage works on another group of
                             * sequences (pe_config.decode_groups); one without PP */
    int nflights;
    int inflight;           /* steps out at the workers */
    int round_open;         /* PE_SCHED_GPIPE: steps may join the round (it fills the flights,
                             * then drains before the next) */
    uint64_t steps;         /* steps sent out so far (their numbers in the trace) */
    atomic_int room;        /* published: blocks left once the waiting sequences are promised
                             * theirs (negative: a backlog) */
    atomic_int seqs;        /* published: sequences waiting or running */
    atomic_int blocks_used; /* published: KV blocks held by its sequences (running or kept) */
    atomic_long preemptions, prefix_hit_tokens, prefix_asked_tokens, spec_drafted,
        spec_accepted;      /* published: its scheduler's counts (en_sched) */
    atomic_int inbound_seqs;   /* routed here by clients, not yet in what was published */
    atomic_int inbound_blocks; /* ... and the blocks they need (en_sched_blocks_needed) */
    int taken_seqs, taken_blocks; /* the thread's: taken in since the last publish */
} en_replica;

/* A kept sequence's state in the engine's table (kept.c). */
typedef enum en_kept_state { EN_KEPT_RUNNING, EN_KEPT_PARKED, EN_KEPT_DEAD } en_kept_state;

typedef struct en_kept {
    uint64_t id;
    int replica;         /* the one holding it */
    int ntok;            /* its tokens when it parked */
    en_kept_state state;
} en_kept;

struct pe_engine {
    pe_config cfg;
    en_procs procs; /* the MPI job's processes (procs.h); one process: n 1, local = world */
    int *devices; /* (world) copy of cfg.devices; over processes, every process's */
    int stage_split[EN_MAX_STAGES];
    int has_split;
    const be_ops *ops;
    char notice[256];
    char collectives[256]; /* be_comm_path_describe of the device list */
    char kernels[64];      /* device 0's be_device_desc.kernels, read at create, or "" */
    int world, dp, pp, tp, m;
    pe_schedule schedule;
    const en_schedule *sched; /* how a request travels (schedule.h) */
    rt_topology *topo;

    en_worker *workers; /* (world), rank = (d * pp + p) * tp + t; over processes, those of
                         * others have no thread, device or memory (en_procs_holds) */
    be_comm **comms;       /* (3, world) by rank: the TP groups' handles, the DP groups',
                            * the world's (comms.c); NULL entries where a group is not
                            * made; NULL when world is 1 */
    rt_barrier *clocks;    /* (dp): replica d's gpipe clock, pp * tp threads */
    int nclocks;           /* clocks initialized */

    md_mlp model;
    md_shard_kind *layer_kinds; /* (model.nlayers) each MLP layer's TP shard kind */
    int loaded;
    int decoder;          /* the loaded model is a decoder (dec), not an MLP (model) */
    md_decoder dec;
    en_sched_config sched_cfg;
    size_t kv_blocks;     /* per worker (every worker of a replica: the same block ids) */
    int max_logit_rows;
    en_replica *replicas; /* (dp) */
    en_events events;
    int events_ready;
    atomic_ullong next_seq; /* the next sequence id */
    atomic_int stopping;  /* destroy: replicas end their sequences and stop */
    atomic_long step_budget; /* tests (en_allow_steps): steps left to start; < 0: no limit */
    pthread_mutex_t kept_mu; /* the kept sequences (kept.c) */
    en_kept *kept;           /* (nkept) */
    size_t nkept, kept_cap;
    int stage_first[EN_MAX_STAGES + 1];
    pe_model_info info;

    rt_queue *inq;     /* en_request*: clients -> router */
    rt_queue *outq;    /* en_request*: finished, for pe_poll/pe_wait */
    rt_queue *permits; /* tokens: one per request that may be outstanding (out-queue room) */
    pthread_t router;
    int router_started;
    atomic_long outstanding;      /* submitted to the out-queue path and not yet taken */
    atomic_long *replica_load;    /* (dp) micro-batches routed and not yet finished */

    /* Start-up and load hand-shakes between the creating thread and the workers. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t sync_mu; /* pe_infer waiters (en_sync) */
    pthread_cond_t sync_cv;
    int setup_done;
    int load_done;
    pe_status load_status;

    /* The first failure stops the engine; later requests complete with it. */
    _Atomic pe_status failed;
    pthread_mutex_t err_mu;
    pe_err fail_err; /* message of the first failure */
    pe_err last_err; /* message of the last failed API call */

    uint64_t t0_ns; /* trace time origin */
};

/* ---- config.c ---- */
/* Validates cfg and fills the grid fields of e (world, dp, pp, tp, m, schedule, split). */
pe_status en_config_resolve(pe_engine *e, const pe_config *cfg, pe_err *err);

/* ---- grid ---- */
static inline int en_rank(const pe_engine *e, int d, int p, int t)
{
    return (d * e->pp + p) * e->tp + t;
}

/* ---- comms.c ---- */
/* The world communicator, the TP and DP groups split from it, and the gpipe clocks. */
pe_status en_comms_create(pe_engine *e, pe_err *err);
/* Wakes every rank blocked in a collective, a recv or a clock. Any thread. */
void en_comms_abort(pe_engine *e);
void en_comms_destroy(pe_engine *e);

/* ---- worker.c ---- */
pe_status en_worker_setup(void *ctx, pe_err *err);
void en_worker_teardown(void *ctx);
pe_status en_worker_run(void *ctx, void *task, pe_err *err);
void en_worker_cancel(void *ctx, void *task, pe_status why);
void en_worker_on_failure(void *ctx, int index, pe_status s, const pe_err *err);

/* ---- requests.c ---- */
/* Frees a request nobody will touch again (and tells valgrind to forget its words). */
void en_request_free(en_request *r);
/* Marks `parts` parts of r done with status s (PE_OK or the error); completes r at zero.
 * Called only by en_task_end (schedule.c), which knows how many parts a task stands for. */
void en_request_done(pe_engine *e, en_request *r, int parts, pe_status s);

/* ---- stage_worker.c ---- */
/* One micro-batch of r through worker w's stage: input (copied, or received from the
 * previous stage), the layers, output (sent on, or copied to the request). */
pe_status en_stage_run(en_worker *w, const en_request *r, int mb, pe_err *err);

/* ---- router.c ---- */
void *en_router_main(void *arg);
/* Dispatches r's tasks to its replica (or completes it with the failure). */
void en_route(pe_engine *e, en_request *r);
/* 1 when a request's tasks all enter one queue, so any thread may dispatch them. */
static inline int en_direct_dispatch(const pe_engine *e)
{
    return e->tp == 1 && !e->sched->clocked;
}

/* ---- failure ---- */
/* Records the first failure, aborts every communicator and closes every worker queue, so
 * every blocked thread wakes. Any thread. */
void en_fail(pe_engine *e, pe_status s, const char *msg);
/* The engine's first failure, with its message in err; PE_OK (err untouched) when none. */
pe_status en_failure(pe_engine *e, pe_err *err);
/* Sets the engine's last error (and this thread's) and returns s. */
pe_status en_error(pe_engine *e, pe_status s, const pe_err *err);

/* ---- decoders: decoder_worker.c, replica.c ---- */
/* Loads this worker's part of the decoder, its KV pool and its step buffers. */
pe_status en_decoder_load(en_worker *w, pe_err *err);
void en_decoder_unload(en_worker *w);
/* Runs a step on this worker; the step goes back to its replica either way. */
pe_status en_decoder_step(en_worker *w, en_step *st, pe_err *err);
/* Bytes of worker w's KV pool. */
size_t en_kv_pool_bytes(const pe_engine *e, const en_worker *w);
/* A step a worker will not run: back to the replica with why. */
void en_decoder_step_dropped(en_worker *w, en_step *st, pe_status why);
/* Starts every replica's thread (after load). Destroy stops them (their sequences end,
 * their steps come back), then joins the workers, then frees the replicas: a worker that
 * handed a step back may still be waking the inbox after the replica took the step. */
pe_status en_replicas_start(pe_engine *e, pe_err *err);
void en_replicas_stop(pe_engine *e);
void en_replicas_free(pe_engine *e);
/* Wakes every replica (after a failure) so it ends its sequences. */
void en_replicas_wake(pe_engine *e);

/* ---- kept.c: kept sequences (pe_seq_append, pe_seq_release) ---- */
void en_kept_init(pe_engine *e);
void en_kept_destroy(pe_engine *e);
/* A kept sequence starts RUNNING on replica (its submit); PE_ENOMEM when the table cannot
 * grow. */
pe_status en_kept_add(pe_engine *e, uint64_t id, int replica);
/* Its submit failed after all. */
void en_kept_forget(pe_engine *e, uint64_t id);
/* Its final event: PARKED with ntok tokens, or DEAD (the replica, before the event). */
void en_kept_ended(pe_engine *e, uint64_t id, int parked, int ntok);
/* PARKED -> RUNNING for an append of n tokens, with the replica holding it; PE_EINVAL with
 * a message when it is not parked or n more tokens reach the context. */
pe_status en_kept_take_for_append(pe_engine *e, uint64_t id, size_t n, int *replica,
                                  pe_err *err);
/* The append was not sent after all: PARKED again. */
void en_kept_untake(pe_engine *e, uint64_t id);
/* Tokens of a parked sequence (0 when unknown). */
int en_kept_length(pe_engine *e, uint64_t id);
/* Takes a PARKED or DEAD sequence out of the table for a release (*parked: its replica
 * must free its blocks); PE_EINVAL with a message when unknown or RUNNING. */
pe_status en_kept_take_for_release(pe_engine *e, uint64_t id, int *replica, int *parked,
                                   pe_err *err);

/* ---- trace.c ---- */
void en_trace_record(en_worker *w, pe_trace_kind kind, const en_request *r, int mb,
                     uint64_t start_ns, uint64_t end_ns);
/* A span of a decoder step: its number, group and phase (prefill or decode) label it. */
void en_trace_step(en_worker *w, pe_trace_kind kind, const en_step *st, uint64_t start_ns,
                   uint64_t end_ns);

#endif
