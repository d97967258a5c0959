/* llm_compare.h: the decoder demo's grid against one device (llm_compare.c). */
#ifndef PE_APPS_LLM_COMPARE_H
#define PE_APPS_LLM_COMPARE_H

#include "llm_run.h"
#include "report.h"

/* Runs grid's batch again on one device of o's backend and reports both side by side (the
 * grid's figures: info, grid_rates). Returns the exit code. */
int cli_llm_compare(cli_report *r, const cli_options *o, const pe_engine_info *info,
                    const pe_model_info *m, const cli_batch *grid, const cli_rates *grid_rates);

#endif
