/* timeline.c: draws one request's trace as rows of micro-batch ids over time. */
#include "timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 64
#define LABEL_W 16

static const char mb_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

double cli_request_span_us(const pe_trace_event *ev, size_t n, uint64_t id)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (ev[i].request == id) {
            lo = fmin(lo, ev[i].start_us);
            hi = fmax(hi, ev[i].end_us);
        }
    return hi > lo ? hi - lo : 0;
}

void cli_lines_free(char **lines, int n)
{
    if (!lines)
        return;
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

typedef struct row_id {
    int worker, p, t;
} row_id;

static int row_cmp(const void *a, const void *b)
{
    const row_id *x = a, *y = b;
    if (x->p != y->p)
        return x->p - y->p;
    return x->t - y->t;
}

/* The micro-batch whose COMPUTE on worker overlaps [a, b) most, or -1. */
static int busiest(const pe_trace_event *ev, size_t n, uint64_t id, int worker, double a,
                   double b)
{
    int mb = -1;
    double best = 0;
    for (size_t i = 0; i < n; i++) {
        const pe_trace_event *e = &ev[i];
        if (e->request != id || e->worker != worker || e->kind != PE_TRACE_COMPUTE)
            continue;
        double ov = fmin(b, e->end_us) - fmax(a, e->start_us);
        if (ov > best) {
            best = ov;
            mb = e->microbatch;
        }
    }
    return mb;
}

int cli_timeline_draw(const pe_trace_event *ev, size_t n, uint64_t id, int width,
                      double us_per_col, char ***lines, int *nlines)
{
    *lines = NULL;
    *nlines = 0;
    row_id rows[MAX_ROWS];
    int nrows = 0, tp_max = 0;
    double t0 = INFINITY, t1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].request != id)
            continue;
        t0 = fmin(t0, ev[i].start_us);
        t1 = fmax(t1, ev[i].end_us);
        if (ev[i].t > tp_max)
            tp_max = ev[i].t;
        int known = 0;
        for (int r = 0; r < nrows; r++)
            known |= rows[r].worker == ev[i].worker;
        if (!known && nrows < MAX_ROWS)
            rows[nrows++] = (row_id){ev[i].worker, ev[i].p, ev[i].t};
    }
    if (nrows == 0 || width < 8)
        return -1;
    qsort(rows, (size_t)nrows, sizeof rows[0], row_cmp);
    double span = t1 - t0;
    if (us_per_col <= 0)
        us_per_col = span > 0 ? span / width : 1;
    int cols = (int)ceil(span / us_per_col);
    if (cols < 1)
        cols = 1;
    if (cols > width)
        cols = width;

    char **out = calloc((size_t)nrows + 1, sizeof *out);
    if (!out)
        return -1;
    size_t line_len = LABEL_W + (size_t)width + 48;
    for (int r = 0; r <= nrows; r++) {
        out[r] = malloc(line_len);
        if (!out[r]) {
            cli_lines_free(out, r);
            return -1;
        }
    }
    for (int r = 0; r < nrows; r++) {
        char label[LABEL_W + 1];
        if (tp_max > 0)
            snprintf(label, sizeof label, "stage %d rank %d", rows[r].p, rows[r].t);
        else
            snprintf(label, sizeof label, "stage %d", rows[r].p);
        int used = snprintf(out[r], line_len, "  %-*s |", LABEL_W - 2, label);
        for (int c = 0; c < cols; c++) {
            double a = t0 + c * us_per_col;
            int mb = busiest(ev, n, id, rows[r].worker, a, a + us_per_col);
            out[r][used++] = mb < 0 ? '.' : mb < (int)sizeof mb_chars - 1 ? mb_chars[mb] : '#';
        }
        snprintf(out[r] + used, line_len - (size_t)used, "|");
    }
    /* the axis: 0 under the left edge, the span under the right one */
    char end[32];
    snprintf(end, sizeof end, "%.3f ms", span * 1e-3);
    int field = cols - 1 > (int)strlen(end) ? cols - 1 : (int)strlen(end) + 1;
    snprintf(out[nrows], line_len, "  %-*s  0%*s", LABEL_W - 2, "", field, end);
    *lines = out;
    *nlines = nrows + 1;
    return 0;
}
