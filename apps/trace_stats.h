/* trace_stats.h: pipeline figures measured from an engine's trace events.
 *
 * Per request (only the workers with TP rank 0, one per stage, are counted):
 *   start         = the earliest event of the request;
 *   first result  = end of the first COMPUTE on the last stage - start;
 *   span          = last COMPUTE end - first COMPUTE start;
 *   busy          = sum of COMPUTE durations over the stages;
 *   bubble        = 1 - busy / (stages * span), summed over requests before dividing.
 * With equal stages this is (p-1)/(m+p-1), the GPipe bubble. */
#ifndef PE_APPS_TRACE_STATS_H
#define PE_APPS_TRACE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"

typedef struct cli_pipe_stats {
    int requests;           /* requests with a complete record (pp x m COMPUTE events) */
    double first_result_ms; /* mean over those requests */
    double span_ms;         /* mean compute span */
    double busy_ms;         /* mean busy time summed over stages */
    double bubble;          /* measured bubble fraction */
    uint64_t typical_request; /* id of the complete request with the median span */
} cli_pipe_stats;

/* Returns 0, or -1 when no request has a complete record (or out of memory). */
int cli_pipe_stats_compute(const pe_trace_event *ev, size_t n, int pp, cli_pipe_stats *out);

/* The theory: (p - 1) / (m + p - 1). */
double cli_bubble_theory(int pp, int m);

#endif
