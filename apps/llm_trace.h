/* llm_trace.h: the decoder demo's trace: how many events a run may leave per worker, the
 * bubble of its decode phase, and the --trace file (llm_trace.c). */
#ifndef PE_APPS_LLM_TRACE_H
#define PE_APPS_LLM_TRACE_H

#include <stddef.h>

#include "pengine/pengine.h"

/* Events a worker may record in a run of batch sequences of prompt + gen tokens on the
 * decoder in dir: every step computes at least one token, and a worker records per step a
 * recv, a compute, a send and its collectives (2 a block, a few at the embedding and the
 * head). Capped at CLI_TRACE_MAX_EVENTS. */
#define CLI_TRACE_MAX_EVENTS ((size_t)1 << 18)
size_t cli_llm_trace_events(const char *dir, int batch, int prompt, int gen);

/* The bubble of the decode phase, from e's trace (world workers, trace_events each at
 * most): the window runs from the first decode step's compute to the last one's end, and
 * bubble = 1 - (compute time of every worker inside it) / (world x window). Compute spans
 * hold the TP collectives (a rank waiting at an all-reduce counts as busy). Returns 0, or -1
 * when nothing was measured: no decode step, a worker's trace full, out of memory. */
int cli_llm_decode_bubble(pe_engine *e, int world, size_t trace_events, double *bubble);

/* Writes e's trace to path as Chrome trace-event JSON. Returns the exit code (printed). */
int cli_llm_trace_write(pe_engine *e, const char *path);

#endif
