/* trace_stats.c: first-result latency and bubble fraction per request, from trace events. */
#include "trace_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pe_trace_event *g_sort_events; /* qsort has no context argument in C11 */

typedef struct span_of {
    double span;
    uint64_t id;
} span_of;

static int by_span(const void *a, const void *b)
{
    const span_of *x = a, *y = b;
    return (x->span > y->span) - (x->span < y->span);
}

static int by_request_then_start(const void *a, const void *b)
{
    const pe_trace_event *x = &g_sort_events[*(const size_t *)a];
    const pe_trace_event *y = &g_sort_events[*(const size_t *)b];
    if (x->request != y->request)
        return x->request < y->request ? -1 : 1;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

double cli_bubble_theory(int pp, int m) { return (double)(pp - 1) / (double)(m + pp - 1); }

int cli_pipe_stats_compute(const pe_trace_event *ev, size_t n, int pp, cli_pipe_stats *out)
{
    memset(out, 0, sizeof *out);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    span_of *spans = malloc((n ? n : 1) * sizeof *spans); /* at most one per event */
    if (!idx || !spans) {
        free(idx);
        free(spans);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].t == 0)
            idx[k++] = i;
    g_sort_events = ev;
    qsort(idx, k, sizeof *idx, by_request_then_start);

    double sum_first = 0, sum_span = 0, sum_busy = 0;
    for (size_t g = 0; g < k;) {
        uint64_t id = ev[idx[g]].request;
        double start = INFINITY, c_lo = INFINITY, c_hi = -INFINITY, first = INFINITY, busy = 0;
        int computes = 0, max_mb = -1;
        size_t h = g;
        for (; h < k && ev[idx[h]].request == id; h++) {
            const pe_trace_event *e = &ev[idx[h]];
            start = fmin(start, e->start_us);
            if (e->kind != PE_TRACE_COMPUTE)
                continue;
            computes++;
            if (e->microbatch > max_mb)
                max_mb = e->microbatch;
            busy += e->end_us - e->start_us;
            c_lo = fmin(c_lo, e->start_us);
            c_hi = fmax(c_hi, e->end_us);
            if (e->p == pp - 1)
                first = fmin(first, e->end_us);
        }
        g = h;
        if (max_mb < 0 || computes != pp * (max_mb + 1) || !isfinite(first) || c_hi <= c_lo)
            continue; /* partly recorded (trace full) or not a pipeline request */
        out->requests++;
        sum_first += first - start;
        sum_span += c_hi - c_lo;
        sum_busy += busy;
        spans[out->requests - 1] = (span_of){c_hi - c_lo, id};
    }
    free(idx);
    if (out->requests == 0) {
        free(spans);
        return -1;
    }
    /* the timeline shows a typical request, not an outlier the machine's noise made */
    qsort(spans, (size_t)out->requests, sizeof *spans, by_span);
    out->typical_request = spans[out->requests / 2].id;
    free(spans);
    out->first_result_ms = sum_first * 1e-3 / out->requests;
    out->span_ms = sum_span * 1e-3 / out->requests;
    out->busy_ms = sum_busy * 1e-3 / out->requests;
    out->bubble = 1.0 - sum_busy / (pp * sum_span);
    return 0;
}
