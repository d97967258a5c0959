/* engine.c: the engine's life cycle: create (grid, backend, workers, communicators),
 * load (plan and upload the shards), destroy, errors and failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_select.h"
#include "engine/engine_internal.h"
#include "engine/engine_testing.h"
#include "runtime/annotate.h"
#include "runtime/clock.h"

#define EN_DEFAULT_QUEUE 1024

pe_status en_error(pe_engine *e, pe_status s, const pe_err *err)
{
    pe_set_last_error(err->msg);
    if (e) {
        pthread_mutex_lock(&e->err_mu);
        e->last_err = *err;
        pthread_mutex_unlock(&e->err_mu);
    }
    return s;
}

const char *pe_engine_last_error(const pe_engine *e)
{
    if (!e)
        return "engine is NULL";
    /* No API call failed, but the engine did (a sequence ended with the error): its
     * message, fixed once failed is set (en_fail writes it first). */
    if (!e->last_err.msg[0] && atomic_load(&((pe_engine *)e)->failed) != PE_OK)
        return e->fail_err.msg;
    return e->last_err.msg;
}

void en_fail(pe_engine *e, pe_status s, const char *msg)
{
    pthread_mutex_lock(&e->err_mu);
    int first = atomic_load(&e->failed) == PE_OK;
    if (first) {
        snprintf(e->fail_err.msg, sizeof e->fail_err.msg, "%s", msg);
        atomic_store(&e->failed, s == PE_OK ? PE_EINTERNAL : s);
    }
    pthread_mutex_unlock(&e->err_mu);
    if (!first)
        return;
    en_procs_fail(e, msg); /* the other processes' ranks may be waiting for ours */
    /* Wake everyone: peers blocked in a collective or recv, idle workers, and the decoder
     * replicas (which end their sequences with the failure). */
    en_comms_abort(e);
    for (int r = 0; r < e->world; r++)
        if (e->workers[r].inq)
            rt_queue_close(e->workers[r].inq);
    en_replicas_wake(e);
}

pe_status en_failure(pe_engine *e, pe_err *err)
{
    pe_status f = atomic_load(&e->failed);
    if (f != PE_OK) {
        pthread_mutex_lock(&e->err_mu);
        pe_fail(err, f, "%s", e->fail_err.msg);
        pthread_mutex_unlock(&e->err_mu);
    }
    return f;
}

void en_inject_failure(pe_engine *e, int rank, long at_task)
{
    e->workers[rank].fail_at_task = at_task;
}

void pe_engine_destroy(pe_engine *e)
{
    if (!e)
        return;
    if (e->inq)
        rt_queue_close(e->inq);
    if (e->router_started)
        pthread_join(e->router, NULL);
    en_replicas_stop(e); /* their sequences end; their steps come back first */
    en_procs_stop(e);    /* process 0: the other processes' followers return */
    /* Stage by stage: a stage's queue closes once the stages before it are gone, so the
     * micro-batches they passed on are all run. */
    for (int p = 0; e->workers && p < e->pp; p++) {
        for (int r = 0; r < e->world; r++)
            if (e->workers[r].p == p && e->workers[r].inq)
                rt_queue_close(e->workers[r].inq);
        for (int r = 0; r < e->world; r++)
            if (e->workers[r].p == p && e->workers[r].thread)
                rt_worker_join(e->workers[r].thread, NULL);
    }
    en_procs_destroy(e); /* its thread, which hands remote parts to inboxes, is joined */
    en_replicas_free(e); /* no worker is left to touch an inbox */
    en_comms_destroy(e);
    void *item;
    while (e->outq && rt_queue_try_pop(e->outq, &item) == PE_OK) /* results never taken */
        en_request_free(item);
    for (int r = 0; e->workers && r < e->world; r++) {
        rt_queue_destroy(e->workers[r].inq);
        free(e->workers[r].trace.ev);
    }
    rt_queue_destroy(e->inq);
    rt_queue_destroy(e->outq);
    rt_queue_destroy(e->permits);
    for (int d = 0; e->replica_load && d < e->dp; d++)
        RT_UNIGNORE_WORD(e->replica_load[d]);
    RT_UNIGNORE_WORD(e->failed);
    RT_UNIGNORE_WORD(e->outstanding);
    free(e->replica_load);
    free(e->workers);
    free(e->devices);
    if (e->loaded && !e->decoder)
        md_mlp_free(&e->model);
    free(e->layer_kinds);
    if (e->decoder)
        md_decoder_close(&e->dec);
    if (e->events_ready)
        en_events_destroy(&e->events);
    RT_UNIGNORE_WORD(e->next_seq);
    RT_UNIGNORE_WORD(e->stopping);
    RT_UNIGNORE_WORD(e->step_budget);
    rt_topology_free(e->topo);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->err_mu);
    pthread_mutex_destroy(&e->sync_mu);
    en_kept_destroy(e);
    pthread_cond_destroy(&e->sync_cv);
    free(e);
}

static pe_status make_queues(pe_engine *e, pe_err *err)
{
    size_t cap = e->cfg.queue_capacity ? e->cfg.queue_capacity : EN_DEFAULT_QUEUE;
    pe_status s = rt_queue_create(cap, &e->inq);
    if (s == PE_OK)
        s = rt_queue_create(cap, &e->outq);
    if (s == PE_OK)
        s = rt_queue_create(cap, &e->permits);
    for (size_t i = 0; s == PE_OK && i < cap; i++)
        s = rt_queue_try_push(e->permits, (void *)1);
    for (int r = 0; s == PE_OK && r < e->world; r++)
        s = rt_queue_create(cap, &e->workers[r].inq);
    if (s != PE_OK)
        return pe_fail(err, s, "cannot create the engine's queues (capacity %zu)", cap);
    return PE_OK;
}

/* The cores each worker runs on: near its GPU, or an even share of the host's. */
static pe_status plan_binding(pe_engine *e, pe_err *err)
{
    if (!e->cfg.bind_threads)
        return PE_OK;
    pe_status s = rt_topology_load(&e->topo, err);
    if (s != PE_OK)
        return s;
    const int n = e->procs.local, first = e->procs.first; /* this process's workers */
    const char **near = calloc((size_t)n, sizeof *near);
    be_device_desc *desc = calloc((size_t)n, sizeof *desc);
    rt_binding *plan = calloc((size_t)n, sizeof *plan);
    if (!near || !desc || !plan)
        s = pe_fail(err, PE_ENOMEM, "out of host memory planning thread binding");
    for (int i = 0; s == PE_OK && i < n; i++) {
        if (e->ops->device_describe(e->devices[first + i], &desc[i], NULL) != PE_OK)
            desc[i].cpulist[0] = '\0';
        near[i] = desc[i].cpulist;
    }
    if (s == PE_OK)
        s = rt_topology_plan_share(e->topo, n, near, e->cfg.threads, e->procs.node_rank,
                                   e->procs.node_procs, plan, err);
    for (int i = 0; s == PE_OK && i < n; i++)
        e->workers[first + i].bind = plan[i];
    free(near);
    free(desc);
    free(plan);
    return s;
}

static pe_status start_workers(pe_engine *e, pe_err *err)
{
    const int n = e->procs.local, first = e->procs.first; /* this process's workers */
    for (int r = first; r < first + n; r++) {
        en_worker *w = &e->workers[r];
        rt_worker_desc desc = {
            .index = r,
            .inq = w->inq,
            .ctx = w,
            .setup = en_worker_setup,
            .teardown = en_worker_teardown,
            .run = en_worker_run,
            .cancel = en_worker_cancel,
            .on_failure = en_worker_on_failure,
            .topo = e->topo,
            .bind = e->topo ? &w->bind : NULL,
        };
        pe_status s = rt_worker_start(&desc, &w->thread, err);
        if (s != PE_OK) {
            pthread_mutex_lock(&e->mu);
            e->setup_done += first + n - r; /* those never start */
            pthread_mutex_unlock(&e->mu);
            en_fail(e, s, err->msg);
            return s;
        }
    }
    pthread_mutex_lock(&e->mu);
    while (e->setup_done < n)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return en_failure(e, err);
}

pe_status pe_engine_create(const pe_config *cfg, pe_engine **out)
{
    pe_err err = {{0}};
    if (!out || !cfg) {
        pe_set_last_error("pe_engine_create: cfg and out must not be NULL");
        return PE_EINVAL;
    }
    *out = NULL;
    pe_engine *e = calloc(1, sizeof *e);
    if (!e) {
        pe_set_last_error("out of host memory for the engine");
        return PE_ENOMEM;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_init(&e->err_mu, NULL);
    pthread_mutex_init(&e->sync_mu, NULL);
    pthread_cond_init(&e->sync_cv, NULL);
    en_kept_init(e);
    atomic_init(&e->failed, PE_OK);
    atomic_init(&e->outstanding, 0);
    atomic_init(&e->next_seq, 0);
    atomic_init(&e->stopping, 0);
    atomic_init(&e->step_budget, -1);
    RT_IGNORE_WORD(e->next_seq);
    RT_IGNORE_WORD(e->stopping);
    RT_IGNORE_WORD(e->step_budget);
    RT_IGNORE_WORD(e->failed);
    RT_IGNORE_WORD(e->outstanding);
    e->t0_ns = rt_now_ns();
    e->cfg = *cfg;
    pe_status s = en_procs_init(e, &err);
    if (s == PE_OK)
        s = en_config_resolve(e, cfg, &err);
    if (s == PE_OK) {
        if (en_events_init(&e->events) == PE_OK)
            e->events_ready = 1;
        else
            s = pe_fail(&err, PE_ENOMEM, "cannot create the engine's event queue");
    }
    if (s == PE_OK)
        s = be_select(cfg->backend, &e->ops, e->notice, sizeof e->notice, &err);
    if (s == PE_OK)
        s = be_check_devices(e->ops, cfg->devices, cfg->ndevices, &err);
    if (s == PE_OK && cfg->ndevices > 1)
        be_comm_path_describe(e->ops->kind, cfg->devices, cfg->ndevices, e->collectives,
                              sizeof e->collectives);
    if (s == PE_OK && e->procs.n > 1 && !e->ops->comm_create_procs)
        s = pe_fail(&err, PE_EINVAL, "the %s backend of this build cannot span MPI "
                    "processes; rebuild with PE_WITH_MPI=ON", e->ops->name);
    if (e->procs.ctl) /* a process that got here fails with the others, or all go on */
        s = en_procs_agree(e, s, &err);
    if (s == PE_OK && e->procs.ctl) /* one backend on every node, or their calls mismatch */
        s = en_procs_same_backend(e, &err);
    if (s == PE_OK) {
        e->devices = malloc((size_t)e->world * sizeof(int));
        e->workers = calloc((size_t)e->world, sizeof(en_worker));
        e->replica_load = calloc((size_t)e->dp, sizeof(atomic_long));
        if (!e->devices || !e->workers || !e->replica_load)
            s = pe_fail(&err, PE_ENOMEM, "out of host memory for %d workers", e->world);
    }
    if (s == PE_OK)
        s = en_procs_layout(e, &err);
    be_device_desc first; /* the kernels: every device of a process runs the same */
    if (s == PE_OK && e->ops->device_describe(e->devices[0], &first, NULL) == PE_OK)
        memcpy(e->kernels, first.kernels, sizeof e->kernels);
    if (s == PE_OK) {
        e->cfg.devices = e->devices;
        e->cfg.ndevices = e->world;
        e->cfg.stage_layers = NULL; /* copied into stage_split */
        for (int d = 0; d < e->dp; d++) {
            atomic_init(&e->replica_load[d], 0);
            RT_IGNORE_WORD(e->replica_load[d]);
        }
        for (int r = 0; r < e->world; r++) {
            en_worker *w = &e->workers[r];
            w->e = e;
            w->rank = r;
            w->t = r % e->tp;
            w->p = (r / e->tp) % e->pp;
            w->d = r / (e->tp * e->pp);
            w->device_id = e->devices[r];
            if (cfg->trace_capacity) {
                w->trace.ev = calloc(cfg->trace_capacity, sizeof(pe_trace_event));
                w->trace.cap = w->trace.ev ? cfg->trace_capacity : 0;
            }
        }
        s = make_queues(e, &err);
    }
    if (s == PE_OK)
        s = plan_binding(e, &err);
    if (s == PE_OK)
        s = start_workers(e, &err);
    if (e->procs.ctl)
        s = en_procs_agree(e, s, &err);
    if (s == PE_OK)
        s = en_comms_create(e, &err);
    if (e->procs.ctl)
        s = en_procs_agree(e, s, &err);
    if (s != PE_OK) {
        pe_set_last_error(err.msg);
        pe_engine_destroy(e);
        return s;
    }
    *out = e;
    return PE_OK;
}

/* The MLP's load plan, computed once for every worker: the stages' layer ranges and each
 * layer's TP shard kind (md_plan_tp restarts its pairing at every stage). */
static pe_status plan_model(pe_engine *e, pe_err *err)
{
    pe_status s = md_plan_stages(&e->model, e->pp, e->has_split ? e->stage_split : NULL,
                                 e->stage_first, err);
    if (s == PE_OK && !(e->layer_kinds = calloc((size_t)e->model.nlayers, sizeof(md_shard_kind))))
        s = pe_fail(err, PE_ENOMEM, "out of host memory planning the shards");
    for (int p = 0; s == PE_OK && p < e->pp; p++) {
        int first = e->stage_first[p], last = e->stage_first[p + 1];
        s = md_plan_tp(&e->model, first, last, e->tp, e->layer_kinds + first, err);
    }
    return s;
}

/* Every worker runs its LOAD task (its shards, or its part of the decoder) and the caller
 * waits for all of them. */
static pe_status load_on_workers(pe_engine *e, const char *model_path, pe_err *err)
{
    en_task *tasks = calloc((size_t)e->world, sizeof *tasks);
    if (!tasks)
        return pe_fail(err, PE_ENOMEM, "out of host memory for load tasks");
    pthread_mutex_lock(&e->mu);
    e->load_done = 0;
    pthread_mutex_unlock(&e->mu);
    int pushed = 0;
    const int n = e->procs.local, first = e->procs.first; /* this process's workers */
    for (int r = first; r < first + n; r++) {
        tasks[r].kind = EN_TASK_LOAD;
        if (rt_queue_push(e->workers[r].inq, &tasks[r]) == PE_OK)
            pushed++;
    }
    pthread_mutex_lock(&e->mu);
    while (e->load_done < pushed)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    free(tasks);
    pe_status f = atomic_load(&e->failed);
    if (f != PE_OK || pushed < n) {
        pthread_mutex_lock(&e->err_mu);
        pe_fail(err, f != PE_OK ? f : PE_ECLOSED, "loading %s failed: %s", model_path,
                e->fail_err.msg);
        pthread_mutex_unlock(&e->err_mu);
        return f != PE_OK ? f : PE_ECLOSED;
    }
    return PE_OK;
}

/* The router thread, for an MLP whose requests' tasks enter several queues (router.c); with
 * one queue the client threads dispatch, and decoders run their sequences through the
 * replicas' threads: no router. */
static pe_status start_router(pe_engine *e, pe_err *err)
{
    if (en_direct_dispatch(e))
        return PE_OK;
    if (pthread_create(&e->router, NULL, en_router_main, e) != 0)
        return pe_fail(err, PE_ENOMEM, "cannot start the router thread");
    e->router_started = 1;
    return PE_OK;
}

static pe_status load_mlp(pe_engine *e, const char *path, pe_err *err)
{
    if (e->procs.ctl) /* the others may have found a decoder there: they agree on this */
        return en_procs_agree(e, pe_fail(err, PE_EINVAL, "%s is no decoder directory here: "
                                         "across MPI processes pengine runs decoders (a model "
                                         "directory, at this path on every node)", path),
                              err);
    pe_status s = md_mlp_load(path, &e->model, err);
    if (s != PE_OK)
        return s;
    s = plan_model(e, err);
    if (s == PE_OK)
        s = start_router(e, err);
    if (s != PE_OK) {
        md_mlp_free(&e->model);
        free(e->layer_kinds);
        e->layer_kinds = NULL;
        return s;
    }
    e->loaded = 1;
    e->info.family = PE_FAMILY_MLP;
    snprintf(e->info.architecture, sizeof e->info.architecture, "mlp");
    e->info.in_features = e->model.layers[0].in;
    e->info.out_features = e->model.layers[e->model.nlayers - 1].out;
    e->info.nlayers = e->model.nlayers;
    e->info.nparams = md_mlp_params(&e->model);
    e->info.bos_token_id = e->info.eos_token_id = -1;
    return load_on_workers(e, path, err);
}

/* The replicas' scheduler settings and the KV pool's size, from the config and the model. */
static pe_status plan_decoder(pe_engine *e, pe_err *err)
{
    const pe_config *c = &e->cfg;
    const md_config *m = &e->dec.cfg;
    en_sched_config *sc = &e->sched_cfg;
    memset(sc, 0, sizeof *sc);
    sc->block_tokens = c->kv_block_tokens ? c->kv_block_tokens : 16;
    sc->max_step_tokens = c->max_step_tokens ? c->max_step_tokens : 512;
    sc->max_seqs = c->max_seqs ? c->max_seqs : 256;
    if (sc->max_seqs > sc->max_step_tokens) /* each running sequence decodes in every step */
        sc->max_seqs = sc->max_step_tokens;
    sc->context = m->maxT;
    sc->vocab = m->V;
    sc->kv_full = c->kv_full;
    sc->prefix_caching = c->kv_full == PE_KV_PREEMPT && c->prefix_caching;
    sc->neos = m->neos < EN_MAX_EOS ? m->neos : EN_MAX_EOS;
    memcpy(sc->eos, m->eos, (size_t)sc->neos * sizeof *sc->eos);
    sc->spec_tokens = c->spec_tokens;
    sc->spec_max_seqs = c->spec_max_seqs;
    sc->spec_ngram_min = c->spec_ngram_min ? c->spec_ngram_min : 1;
    sc->spec_ngram_max = c->spec_ngram_max ? c->spec_ngram_max : 4;
    if (sc->spec_ngram_max < sc->spec_ngram_min) /* only min given */
        sc->spec_ngram_max = sc->spec_ngram_min;
    /* a logit row a decode, and one a draft */
    const long rows = (long)sc->max_seqs * (1 + sc->spec_tokens);
    e->max_logit_rows = rows < sc->max_step_tokens ? (int)rows : sc->max_step_tokens;
    if (m->V > 0 && e->max_logit_rows > INT32_MAX / m->V) /* a target r x V + id is an int32 */
        e->max_logit_rows = INT32_MAX / m->V;
    sc->max_logit_rows = e->max_logit_rows;
    sc->groups = c->decode_groups ? c->decode_groups : e->pp; /* steps in flight (replica.c) */
    sc->prefill_chunks = e->m; /* a prompt's micro-batches (1 under PE_SCHED_NAIVE) */
    const md_part whole = {0, m->L, 0, e->tp, 0};
    const md_shard sh = md_shard_of(m, &whole);
    int layers = 0; /* the largest stage's blocks: a worker's KV holds only its own */
    for (int p = 0; p < e->pp; p++)
        if (e->stage_first[p + 1] - e->stage_first[p] > layers)
            layers = e->stage_first[p + 1] - e->stage_first[p];
    const size_t block_bytes = md_kv_block_bytes(m, layers, sh.KVH, sc->block_tokens, c->dtype);
    size_t blocks;
    if (c->kv_tokens)
        blocks = (c->kv_tokens + (size_t)sc->block_tokens - 1) / (size_t)sc->block_tokens;
    else if (c->kv_bytes)
        blocks = c->kv_bytes / block_bytes;
    else {
        size_t tokens = m->maxT > 8192 ? (size_t)m->maxT : 8192;
        blocks = (tokens + (size_t)sc->block_tokens - 1) / (size_t)sc->block_tokens;
    }
    if (blocks < 1 || blocks > (size_t)INT32_MAX / (size_t)sc->block_tokens)
        return pe_fail(err, PE_EINVAL, "a KV pool of %zu blocks of %d positions (%zu bytes "
                       "each) cannot be made; give kv_tokens (--kv-tokens) of at least %d",
                       blocks, sc->block_tokens, block_bytes, sc->block_tokens);
    e->kv_blocks = blocks;
    sc->nblocks = (int)blocks;
    return PE_OK;
}

static pe_status load_decoder(pe_engine *e, const char *dir, pe_err *err)
{
    pe_status s = md_decoder_open(dir, &e->dec, err);
    const int opened = s == PE_OK;
    if (e->procs.ctl && (s = en_procs_agree(e, s, err)) != PE_OK && opened)
        md_decoder_close(&e->dec); /* opened here, but not by another process */
    if (s != PE_OK)
        return s;
    e->decoder = 1;
    char why[PE_ERR_LEN];
    if (md_tp_check(&e->dec.cfg, e->tp, why, sizeof why))
        s = pe_fail(err, PE_EINVAL, "%s", why);
    else
        s = md_plan_decoder_stages(&e->dec.cfg, e->pp, e->has_split ? e->stage_split : NULL,
                                   e->stage_first, err);
    if (s == PE_OK)
        s = plan_decoder(e, err);
    if (s != PE_OK) {
        md_decoder_close(&e->dec);
        e->decoder = 0;
        return s;
    }
    md_decoder_info(&e->dec, &e->info);
    e->loaded = 1;
    s = load_on_workers(e, dir, err);
    if (e->procs.ctl && (s = en_procs_agree(e, s, err)) == PE_OK)
        s = en_procs_share_loaded(e, err);
    if (s == PE_OK && e->procs.me == 0) /* the schedulers run where the requests enter */
        s = en_replicas_start(e, err);
    if (s == PE_OK)
        s = en_procs_start(e, err);
    if (e->procs.ctl) /* all serve, or all fail */
        s = en_procs_agree(e, s, err);
    if (s != PE_OK) /* loaded but unable to serve: every later call says why */
        en_fail(e, s, err->msg);
    return s;
}

pe_status pe_engine_load(pe_engine *e, const char *model_path)
{
    pe_err err = {{0}};
    if (!e || !model_path) {
        pe_set_last_error("pe_engine_load: engine and path must not be NULL");
        return PE_EINVAL;
    }
    if (e->loaded) {
        pe_fail(&err, PE_EINVAL, "a model is already loaded; create a new engine for another");
        return en_error(e, PE_EINVAL, &err);
    }
    pe_status s = md_decoder_is_dir(model_path) ? load_decoder(e, model_path, &err)
                                                 : load_mlp(e, model_path, &err);
    return s == PE_OK ? PE_OK : en_error(e, s, &err);
}

pe_status pe_engine_model_info(const pe_engine *e, pe_model_info *out)
{
    if (!e || !out || !e->loaded) {
        pe_set_last_error("pe_engine_model_info: no engine or no model loaded");
        return PE_EINVAL;
    }
    *out = e->info;
    return PE_OK;
}

pe_status pe_engine_info_get(const pe_engine *e, pe_engine_info *out)
{
    if (!e || !out) {
        pe_set_last_error("pe_engine_info_get: engine and out must not be NULL");
        return PE_EINVAL;
    }
    memset(out, 0, sizeof *out);
    out->backend = e->ops->kind;
    out->world = e->world;
    out->dp = e->dp;
    out->pp = e->pp;
    out->tp = e->tp;
    out->microbatches = e->m;
    out->schedule = e->schedule;
    out->dtype = e->cfg.dtype;
    out->processes = e->procs.n;
    out->process = e->procs.me;
    memcpy(out->kernels, e->kernels, sizeof out->kernels);
    if (e->loaded)
        memcpy(out->stage_first_layer, e->stage_first, (size_t)(e->pp + 1) * sizeof(int));
    for (int r = 0; e->loaded && e->decoder && r < e->world && r < 64; r++) {
        const en_worker *w = &e->workers[r];
        out->weight_bytes[r] = w->weights.arena_bytes;
        out->kv_bytes[r] = en_kv_pool_bytes(e, w);
    }
    if (e->decoder) {
        out->kv_blocks = e->kv_blocks;
        out->kv_block_tokens = e->sched_cfg.block_tokens;
        for (int d = 0; e->replicas && d < e->dp; d++) {
            const en_replica *r = &e->replicas[d];
            out->kv_blocks_used +=
                (size_t)atomic_load_explicit(&r->blocks_used, memory_order_relaxed);
            out->kv_preemptions += atomic_load_explicit(&r->preemptions, memory_order_relaxed);
            out->prefix_hit_tokens +=
                atomic_load_explicit(&r->prefix_hit_tokens, memory_order_relaxed);
            out->prefix_asked_tokens +=
                atomic_load_explicit(&r->prefix_asked_tokens, memory_order_relaxed);
            out->spec_drafted_tokens +=
                atomic_load_explicit(&r->spec_drafted, memory_order_relaxed);
            out->spec_accepted_tokens +=
                atomic_load_explicit(&r->spec_accepted, memory_order_relaxed);
        }
    }
    snprintf(out->notice, sizeof out->notice, "%s", e->notice);
    snprintf(out->collectives, sizeof out->collectives, "%s", e->collectives);
    for (int r = 0; r < e->world && r < 64; r++)
        out->threads[r] = e->workers[r].threads;
    return PE_OK;
}

pe_status pe_engine_follow(pe_engine *e)
{
    pe_err err = {{0}};
    if (!e) {
        pe_set_last_error("pe_engine_follow: engine is NULL");
        return PE_EINVAL;
    }
    if (!e->procs.ctl || e->procs.me == 0 || !e->decoder) {
        pe_fail(&err, PE_EINVAL, "pe_engine_follow: %s",
                !e->procs.ctl    ? "this engine is one process (pe_config.mpi is 0)"
                : e->procs.me == 0 ? "process 0 takes the requests; the others follow"
                                   : "load a decoder first (pe_engine_load on every process)");
        return en_error(e, PE_EINVAL, &err);
    }
    pe_status s = en_procs_follow(e, &err);
    return s == PE_OK ? PE_OK : en_error(e, s, &err);
}
