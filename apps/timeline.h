/* timeline.h: an ASCII picture of what each worker did during one request.
 *
 * One row per worker of the request's replica (ordered by stage, then TP rank); time is cut
 * into columns; a column shows the micro-batch (0-9, a-z, A-Z) whose COMPUTE overlaps it
 * most, or '.' when the worker computed nothing then (idle, waiting or sending). */
#ifndef PE_APPS_TIMELINE_H
#define PE_APPS_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"

/* Time from the request's first event to its last, in microseconds (0 if none). */
double cli_request_span_us(const pe_trace_event *ev, size_t n, uint64_t id);

/* Draws request id with us_per_col microseconds per column (0 = fit its span into width
 * columns); rows are at most width columns of picture. *lines is malloc'ed (free with
 * cli_lines_free): one line per worker, then a time axis. Returns 0, or -1 when the
 * request has no events or memory runs out. */
int cli_timeline_draw(const pe_trace_event *ev, size_t n, uint64_t id, int width,
                      double us_per_col, char ***lines, int *nlines);
void cli_lines_free(char **lines, int n);

#endif
