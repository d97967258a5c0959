/* llm_pipeline.h: the decoder demo on a pipeline, naive against in flight (llm_pipeline.c). */
#ifndef PE_APPS_LLM_PIPELINE_H
#define PE_APPS_LLM_PIPELINE_H

#include "llm_run.h"
#include "report.h"

/* The grid's run as measured: its rates and its decode bubble (NaN: not measured). */
typedef struct cli_pipe_run {
    const cli_batch *batch;
    cli_rates rates;
    double bubble;
} cli_pipe_run;

/* For pp > 1: runs the grid's batch again with one step in flight at a time (naive) and
 * reports both side by side (grid: the run with a step in flight per stage). trace_events:
 * per worker, for the naive run's bubble. Returns the exit code. */
int cli_llm_pipeline(cli_report *r, const cli_options *o, const pe_engine_info *info,
                     const cli_pipe_run *grid, size_t trace_events);

#endif
