/* engine_run.c: creates and loads engines, builds request workloads, runs timed loops. */
#include "engine_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_run.h"
#include "pengine/pengine_tools.h"

int cli_work_init(cli_work *w, int nreq, size_t rows, size_t in, size_t out, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->nreq = nreq;
    w->rows = rows;
    w->in = in;
    w->out = out;
    size_t n_in = (size_t)nreq * rows * in, n_out = (size_t)nreq * rows * out;
    w->input = malloc(n_in * sizeof *w->input);
    w->output = calloc(n_out, sizeof *w->output);
    w->seen = calloc((size_t)nreq, 1);
    if (!w->input || !w->output || !w->seen) {
        cli_work_free(w);
        cli_errorf("out of memory for %d requests of %zu x %zu floats; use a smaller --batch",
                   nreq, rows, in);
        return CLI_RUNTIME;
    }
    pe_random_uniform(w->input, n_in, seed ^ 0x5eed1e55ull); /* not the weights' stream */
    return CLI_OK;
}

void cli_work_free(cli_work *w)
{
    free(w->input);
    free(w->output);
    free(w->seen);
    w->input = w->output = NULL;
    w->seen = NULL;
}

void cli_config_grid(const cli_options *o, int microbatches, pe_schedule schedule,
                     const int *split, size_t trace_capacity, pe_config *cfg)
{
    pe_config_init(cfg);
    cfg->backend = o->backend;
    cfg->ndevices = o->ndevices;
    cfg->devices = o->devices;
    cfg->dp = o->dp;
    cfg->pp = o->pp;
    cfg->tp = o->tp;
    cfg->microbatches = microbatches;
    cfg->schedule = schedule;
    cfg->stage_layers = split;
    cfg->trace_capacity = trace_capacity;
    cfg->dtype = o->dtype;
    cfg->threads = o->threads;
}

void cli_config_single(const cli_options *o, int microbatches, pe_config *cfg)
{
    pe_config_init(cfg);
    cfg->backend = o->backend;
    cfg->ndevices = 1;
    cfg->devices = o->devices;
    cfg->dp = cfg->pp = cfg->tp = 1;
    cfg->microbatches = microbatches;
    cfg->schedule = microbatches > 1 ? PE_SCHED_STREAM : PE_SCHED_NAIVE;
    cfg->dtype = o->dtype;
    cfg->threads = o->threads;
}

void cli_config_reference(const cli_options *o, pe_backend_kind under_test, int microbatches,
                          pe_config *cfg)
{
    static const int host_device = 0;
    cli_config_single(o, microbatches, cfg);
    if (under_test == PE_BACKEND_CUDA) {
        cfg->backend = PE_BACKEND_HOST;
        cfg->devices = &host_device;
    }
}

int cli_pick_microbatches(const cli_options *o, int demo_default, size_t rows, int *m)
{
    if (o->microbatches > 0 && (size_t)o->microbatches > rows) {
        cli_errorf("--microbatches %d is more than the %zu rows of a request; use at most %zu "
                   "or a larger --batch", o->microbatches, rows, rows);
        return CLI_USAGE;
    }
    *m = o->microbatches > 0 ? o->microbatches : demo_default;
    if ((size_t)*m > rows)
        *m = (int)rows;
    return CLI_OK;
}

int cli_preflight(const cli_options *o)
{
    /* the auto-fallback notice is shown by the report, from the engine's info */
    pe_status s = pe_devices_check(o->backend, o->devices, o->ndevices);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    return CLI_OK;
}

static const char *engine_message(const pe_engine *e, pe_status s)
{
    const char *m = e ? pe_engine_last_error(e) : NULL;
    if (!m || !*m)
        m = pe_last_error();
    return m && *m ? m : pe_status_str(s);
}

int cli_engine_open(const pe_config *cfg, const char *model_path, pe_engine **out)
{
    *out = NULL;
    pe_engine *e = NULL;
    pe_status s = pe_engine_create(cfg, &e);
    if (s != PE_OK) {
        cli_error(engine_message(NULL, s));
        pe_engine_destroy(e);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    s = pe_engine_load(e, model_path);
    if (s != PE_OK) {
        cli_error(engine_message(e, s));
        pe_engine_destroy(e);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    *out = e;
    return CLI_OK;
}

/* One iteration: submit every request, then take exactly as many results. */
static int run_once(pe_engine *e, cli_work *w, int it)
{
    int submitted = 0, rc = CLI_OK;
    memset(w->seen, 0, (size_t)w->nreq);
    for (int r = 0; r < w->nreq; r++) {
        pe_request req = {.id = cli_request_id(w, it, r),
                          .rows = w->rows,
                          .input = w->input + (size_t)r * w->rows * w->in,
                          .output = w->output + (size_t)r * w->rows * w->out,
                          .user = NULL};
        pe_status s = pe_submit(e, &req);
        if (s != PE_OK) {
            cli_errorf("submitting request %llu failed: %s", (unsigned long long)req.id,
                       engine_message(e, s));
            rc = CLI_RUNTIME;
            break;
        }
        submitted++;
    }
    for (int k = 0; k < submitted; k++) {
        pe_result res;
        pe_status s = pe_wait(e, &res);
        if (s != PE_OK) {
            if (rc == CLI_OK)
                cli_errorf("waiting for a result failed: %s", engine_message(e, s));
            return CLI_RUNTIME;
        }
        uint64_t first = cli_request_id(w, it, 0);
        if (res.id < first || res.id >= first + (uint64_t)w->nreq || w->seen[res.id - first]) {
            cli_errorf("the engine answered request %llu, which is unknown or already "
                       "answered; this is a bug in pengine, please report it",
                       (unsigned long long)res.id);
            rc = CLI_RUNTIME;
            continue;
        }
        w->seen[res.id - first] = 1;
        if (res.status != PE_OK && rc == CLI_OK) {
            cli_errorf("request %llu failed: %s", (unsigned long long)res.id,
                       engine_message(e, res.status));
            rc = CLI_RUNTIME;
        }
    }
    return rc;
}

int cli_time(pe_engine *e, cli_work *w, int warmup, int iters, double *ms_per_iter)
{
    for (int it = 0; it < warmup; it++)
        if (run_once(e, w, it) != CLI_OK)
            return CLI_RUNTIME;
    pe_engine_trace_clear(e);
    double t0 = cli_now_ms();
    for (int it = warmup; it < warmup + iters; it++)
        if (run_once(e, w, it) != CLI_OK)
            return CLI_RUNTIME;
    *ms_per_iter = (cli_now_ms() - t0) / iters;
    return CLI_OK;
}

int cli_run_engine(const pe_config *cfg, const char *model_path, cli_work *w, int warmup,
                   int iters, double *ms_per_iter, pe_engine **out)
{
    *out = NULL;
    pe_engine *e = NULL;
    int rc = cli_engine_open(cfg, model_path, &e);
    if (rc != CLI_OK)
        return rc;
    rc = cli_time(e, w, warmup, iters, ms_per_iter);
    if (rc != CLI_OK) {
        pe_engine_destroy(e);
        return rc;
    }
    *out = e;
    return CLI_OK;
}

size_t cli_trace_capacity(const cli_work *w, int iters, int microbatches, int nlayers)
{
    const size_t cap = (size_t)1 << 18; /* ~14 MiB per worker at most */
    size_t per_iter = (size_t)w->nreq * (size_t)microbatches * (4 + (size_t)nlayers);
    size_t need = ((size_t)iters + 1) * per_iter + 64;
    return need < cap ? need : cap;
}

int cli_write_trace(pe_engine *e, const char *path)
{
    pe_status s = pe_engine_trace_write(e, path);
    if (s != PE_OK) {
        cli_errorf("writing the trace to %s failed: %s", path, engine_message(e, s));
        return CLI_RUNTIME;
    }
    return CLI_OK;
}
