/* config.c: configuration defaults and validation; the grid world = dp x pp x tp. */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

void pe_config_init(pe_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->backend = PE_BACKEND_AUTO;
    cfg->microbatches = 1;
    cfg->schedule = PE_SCHED_NAIVE;
    cfg->dtype = PE_DTYPE_FP32;
    cfg->bind_threads = 1;
    cfg->kv_full = PE_KV_PREEMPT;
    cfg->prefix_caching = 1;
}

static int is_pow2(size_t x) { return x >= 2 && (x & (x - 1)) == 0; }

pe_status en_config_resolve(pe_engine *e, const pe_config *cfg, pe_err *err)
{
    if (cfg->ndevices < 1 || !cfg->devices)
        return pe_fail(err, PE_EINVAL,
                       "no devices: list at least one device id (e.g. --gpus 0,1)");
    int dp = cfg->dp, pp = cfg->pp, tp = cfg->tp;
    if (dp < 0 || pp < 0 || tp < 0)
        return pe_fail(err, PE_EINVAL, "grid dp=%d pp=%d tp=%d: sizes must be >= 1", dp, pp,
                       tp);
    const int nprocs = e->procs.n, devices = cfg->ndevices * nprocs; /* every process's */
    if (dp == 0 && pp == 0 && tp == 0)
        dp = devices;
    dp = dp ? dp : 1;
    pp = pp ? pp : 1;
    tp = tp ? tp : 1;
    long world = (long)dp * pp * tp;
    if (nprocs > 1 && world != devices) {
        char np[96] = "", per[96] = "";
        if (world % cfg->ndevices == 0)
            snprintf(np, sizeof np, "start %ld processes (mpirun -np %ld), ",
                     world / cfg->ndevices, world / cfg->ndevices);
        if (world % nprocs == 0)
            snprintf(per, sizeof per, "give each of the %d processes %ld devices, ", nprocs,
                     world / nprocs);
        return pe_fail(err, PE_EINVAL,
                       "grid dp=%d x pp=%d x tp=%d needs %ld devices but %d processes x %d "
                       "device%s each (--gpus) give %d; %s%sor change --dp/--pp/--tp so that "
                       "their product is %d",
                       dp, pp, tp, world, nprocs, cfg->ndevices, cfg->ndevices == 1 ? "" : "s",
                       devices, np, per, devices);
    }
    if (world != devices)
        return pe_fail(err, PE_EINVAL,
                       "grid dp=%d x pp=%d x tp=%d needs %ld devices but %d %s listed; list "
                       "%ld device ids or change --dp/--pp/--tp so their product is %d",
                       dp, pp, tp, world, cfg->ndevices, cfg->ndevices == 1 ? "was" : "were",
                       world, cfg->ndevices);
    if (pp > EN_MAX_STAGES)
        return pe_fail(err, PE_EINVAL, "pp=%d: at most %d pipeline stages are supported", pp,
                       EN_MAX_STAGES);
    if (cfg->microbatches < 1)
        return pe_fail(err, PE_EINVAL, "microbatches=%d: use 1 or more",
                       cfg->microbatches);
    if (cfg->schedule != PE_SCHED_NAIVE && cfg->schedule != PE_SCHED_GPIPE &&
        cfg->schedule != PE_SCHED_STREAM)
        return pe_fail(err, PE_EINVAL, "unknown schedule %d: use naive, gpipe or stream",
                       (int)cfg->schedule);
    if (cfg->queue_capacity && !is_pow2(cfg->queue_capacity))
        return pe_fail(err, PE_EINVAL,
                       "queue_capacity=%zu: use a power of two >= 2 (or 0 for the default)",
                       cfg->queue_capacity);
    if (cfg->dtype != PE_DTYPE_FP32 && cfg->dtype != PE_DTYPE_BF16)
        return pe_fail(err, PE_EINVAL, "unknown dtype %d: use fp32 or bf16", (int)cfg->dtype);
    if (cfg->kv_block_tokens < 0 || cfg->max_seqs < 0 || cfg->max_step_tokens < 0)
        return pe_fail(err, PE_EINVAL, "kv_block_tokens %d, max_seqs %d, max_step_tokens %d: "
                       "use 0 for the default or a positive number",
                       cfg->kv_block_tokens, cfg->max_seqs, cfg->max_step_tokens);
    if (cfg->kv_block_tokens > 65536)
        return pe_fail(err, PE_EINVAL, "kv_block_tokens %d: a KV block holds at most 65536 "
                       "positions (16, the default, suits most models)", cfg->kv_block_tokens);
    if (cfg->kv_full != PE_KV_WAIT && cfg->kv_full != PE_KV_REFUSE &&
        cfg->kv_full != PE_KV_PREEMPT)
        return pe_fail(err, PE_EINVAL,
                       "unknown kv_full %d: use PE_KV_PREEMPT, PE_KV_WAIT or PE_KV_REFUSE",
                       (int)cfg->kv_full);
    if (cfg->tp_embedding != PE_TP_EMBED_VOCAB && cfg->tp_embedding != PE_TP_EMBED_REPLICATED)
        return pe_fail(err, PE_EINVAL, "unknown tp_embedding %d: use PE_TP_EMBED_VOCAB or "
                       "PE_TP_EMBED_REPLICATED", (int)cfg->tp_embedding);
    if (cfg->decode_groups < 0 || cfg->decode_groups > 64)
        return pe_fail(err, PE_EINVAL,
                       "decode_groups=%d: give 1 to 64 steps in flight, or 0 for one per stage",
                       cfg->decode_groups);
    if (cfg->spec_tokens < 0 || cfg->spec_tokens > PE_MAX_SPEC_TOKENS)
        return pe_fail(err, PE_EINVAL, "spec_tokens=%d: give 1 to %d draft tokens a decode, or "
                       "0 for none", cfg->spec_tokens, PE_MAX_SPEC_TOKENS);
    if (cfg->spec_max_seqs < 0)
        return pe_fail(err, PE_EINVAL, "spec_max_seqs=%d: give a number of sequences, or 0 for "
                       "drafts at any batch", cfg->spec_max_seqs);
    if (cfg->spec_ngram_min < 0 || cfg->spec_ngram_max < 0 ||
        (cfg->spec_ngram_max && cfg->spec_ngram_min > cfg->spec_ngram_max))
        return pe_fail(err, PE_EINVAL, "spec_ngram_min=%d, spec_ngram_max=%d: give 1 <= min <= "
                       "max (0 for the defaults, 1 and 4)", cfg->spec_ngram_min,
                       cfg->spec_ngram_max);
    if (cfg->threads < 0 || cfg->threads > 256)
        return pe_fail(err, PE_EINVAL,
                       "threads=%d: give a host device 1 to 256 cores, or 0 for an even share",
                       cfg->threads);
    if (cfg->stage_layers) {
        for (int p = 0; p < pp; p++)
            if (cfg->stage_layers[p] < 1)
                return pe_fail(err, PE_EINVAL,
                               "split: stage %d has %d layers; every stage needs at least one",
                               p, cfg->stage_layers[p]);
        memcpy(e->stage_split, cfg->stage_layers, (size_t)pp * sizeof(int));
        e->has_split = 1;
    }
    e->dp = dp;
    e->pp = pp;
    e->tp = tp;
    e->world = (int)world;
    e->schedule = cfg->schedule;
    e->sched = en_schedule_get(cfg->schedule);
    e->m = cfg->schedule == PE_SCHED_NAIVE ? 1 : cfg->microbatches;
    return PE_OK;
}
