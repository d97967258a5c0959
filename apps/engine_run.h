/* engine_run.h: engines for the demos: configs from the options, create + load with the
 * command's exit codes, request workloads, and the timed submit/wait loop. */
#ifndef PE_APPS_ENGINE_RUN_H
#define PE_APPS_ENGINE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "args.h"
#include "pengine/pengine.h"

/* nreq requests of rows rows each; the same inputs every iteration. */
typedef struct cli_work {
    int nreq;
    size_t rows, in, out;
    float *input;  /* (nreq, rows, in) */
    float *output; /* (nreq, rows, out) */
    unsigned char *seen; /* (nreq) result bookkeeping */
} cli_work;

/* Inputs are uniform in [-1, 1), seeded: the same seed gives the same inputs. */
int cli_work_init(cli_work *w, int nreq, size_t rows, size_t in, size_t out, uint64_t seed);
void cli_work_free(cli_work *w);

/* The engine under test: the grid, devices and backend of o. trace_capacity 0 = off. */
void cli_config_grid(const cli_options *o, int microbatches, pe_schedule schedule,
                     const int *split, size_t trace_capacity, pe_config *cfg);
/* A one-device engine on the first listed device and the same backend: the baseline of the
 * speedups. It cuts requests into the same microbatches, so its GEMMs have the same row
 * counts as the engine under test (OpenBLAS rounds a row differently depending on M). */
void cli_config_single(const cli_options *o, int microbatches, pe_config *cfg);
/* The reference of --verify for an engine that runs on under_test: cli_config_single, but
 * on host device 0 when under_test is CUDA (the host backend checks the GPU's output). */
void cli_config_reference(const cli_options *o, pe_backend_kind under_test, int microbatches,
                          pe_config *cfg);

/* A demo's micro-batch count against its rows: more micro-batches than rows is a usage
 * error (printed) when the user asked for them; the demo's default is clamped instead. */
int cli_pick_microbatches(const cli_options *o, int demo_default, size_t rows, int *m);

/* Checks the backend and the device list before any engine exists (exit code; printed). */
int cli_preflight(const cli_options *o);

/* Creates the engine and loads the model. Failures here are configuration errors:
 * printed, CLI_USAGE (CLI_RUNTIME for out of memory). */
int cli_engine_open(const pe_config *cfg, const char *model_path, pe_engine **out);

/* Runs warmup untimed then iters timed iterations; each submits every request of w through
 * pe_submit and waits for all results. The trace is cleared after the warm-up. Returns
 * CLI_OK with the mean milliseconds per timed iteration, or CLI_RUNTIME (printed). */
int cli_time(pe_engine *e, cli_work *w, int warmup, int iters, double *ms_per_iter);

/* cli_engine_open + cli_time: the engine is handed back in *out (destroy it) so the caller
 * can read its info and trace; *out is NULL on failure. */
int cli_run_engine(const pe_config *cfg, const char *model_path, cli_work *w, int warmup,
                   int iters, double *ms_per_iter, pe_engine **out);

/* Trace events per worker that a timed run of w needs: every micro-batch of every
 * request may leave a COMPUTE, SEND, RECV, CLOCK_WAIT and a COLLECTIVE per layer. */
size_t cli_trace_capacity(const cli_work *w, int iters, int microbatches, int nlayers);

/* Writes the engine's trace to path (--trace). Returns CLI_OK or CLI_RUNTIME (printed). */
int cli_write_trace(pe_engine *e, const char *path);

/* The id of request r of iteration it: requests are numbered it * nreq + r. */
static inline uint64_t cli_request_id(const cli_work *w, int it, int r)
{
    return (uint64_t)it * (uint64_t)w->nreq + (uint64_t)r;
}

#endif
