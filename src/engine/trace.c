/* trace.c: per-worker task events and their Chrome trace-event JSON.
 *
 * Each worker appends to its own fixed array (no locks, no allocation while running);
 * readers look only when no request is outstanding, after the results handed the
 * workers' writes over (the completion counter orders them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Appends one event to the worker's buffer (counted as dropped when it is full). */
static void record(en_worker *w, pe_trace_kind kind, pe_trace_phase phase, uint64_t request,
                   int mb, uint64_t start_ns, uint64_t end_ns)
{
    en_trace_buf *tb = &w->trace;
    if (!tb->cap)
        return;
    if (tb->n == tb->cap) {
        tb->dropped++;
        return;
    }
    const pe_engine *e = w->e;
    pe_trace_event *ev = &tb->ev[tb->n++];
    ev->worker = w->rank;
    ev->d = w->d;
    ev->p = w->p;
    ev->t = w->t;
    ev->kind = kind;
    ev->phase = phase;
    ev->request = request;
    ev->microbatch = mb;
    ev->start_us = (double)(start_ns - e->t0_ns) * 1e-3;
    ev->end_us = (double)(end_ns - e->t0_ns) * 1e-3;
}

void en_trace_record(en_worker *w, pe_trace_kind kind, const en_request *r, int mb,
                     uint64_t start_ns, uint64_t end_ns)
{
    record(w, kind, PE_TRACE_MLP, r ? r->req.id : 0, mb, start_ns, end_ns);
}

void en_trace_step(en_worker *w, pe_trace_kind kind, const en_step *st, uint64_t start_ns,
                   uint64_t end_ns)
{
    record(w, kind, st->prefill ? PE_TRACE_PREFILL : PE_TRACE_DECODE, st->number, st->group,
           start_ns, end_ns);
}

static int by_start(const void *a, const void *b)
{
    const pe_trace_event *x = a, *y = b;
    if (x->start_us != y->start_us)
        return x->start_us < y->start_us ? -1 : 1;
    return (x->worker > y->worker) - (x->worker < y->worker);
}

pe_status pe_engine_trace(pe_engine *e, pe_trace_event **events, size_t *n)
{
    if (!e || !events || !n) {
        pe_set_last_error("pe_engine_trace: engine, events and n must not be NULL");
        return PE_EINVAL;
    }
    size_t total = 0;
    for (int r = 0; r < e->world; r++)
        total += e->workers[r].trace.n;
    pe_trace_event *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) {
        pe_set_last_error("out of host memory copying the trace");
        return PE_ENOMEM;
    }
    size_t k = 0;
    for (int r = 0; r < e->world; r++) {
        memcpy(all + k, e->workers[r].trace.ev, e->workers[r].trace.n * sizeof *all);
        k += e->workers[r].trace.n;
    }
    qsort(all, total, sizeof *all, by_start);
    *events = all;
    *n = total;
    return PE_OK;
}

void pe_engine_trace_clear(pe_engine *e)
{
    for (int r = 0; e && r < e->world; r++) {
        e->workers[r].trace.n = 0;
        e->workers[r].trace.dropped = 0;
    }
}

static const char *kind_name(pe_trace_kind k)
{
    switch (k) {
    case PE_TRACE_COMPUTE: return "compute";
    case PE_TRACE_SEND: return "send";
    case PE_TRACE_RECV: return "recv";
    case PE_TRACE_COLLECTIVE: return "collective";
    case PE_TRACE_CLOCK_WAIT: return "clock wait";
    }
    return "?";
}

/* One span: an MLP micro-batch's ("compute mb 2", args request and microbatch) or a decoder
 * step's ("compute decode step 12", args step, group and phase). */
static void write_event(FILE *f, const pe_trace_event *ev)
{
    const char *kind = kind_name(ev->kind);
    if (ev->phase == PE_TRACE_MLP) {
        fprintf(f,
                ",\n{\"name\":\"%s mb %d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"request\":%llu,\"microbatch\":%d}}",
                kind, ev->microbatch, kind, ev->worker, ev->start_us,
                ev->end_us - ev->start_us, (unsigned long long)ev->request, ev->microbatch);
        return;
    }
    const char *phase = ev->phase == PE_TRACE_PREFILL ? "prefill" : "decode";
    fprintf(f,
            ",\n{\"name\":\"%s %s step %llu\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,"
            "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%llu,\"group\":%d,"
            "\"phase\":\"%s\"}}",
            kind, phase, (unsigned long long)ev->request, kind, ev->worker, ev->start_us,
            ev->end_us - ev->start_us, (unsigned long long)ev->request, ev->microbatch, phase);
}

pe_status pe_engine_trace_write(pe_engine *e, const char *path)
{
    pe_trace_event *ev = NULL;
    size_t n = 0;
    pe_status s = pe_engine_trace(e, &ev, &n);
    if (s != PE_OK)
        return s;
    pe_err err = {{0}};
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) {
        free(ev);
        pe_fail(&err, PE_EIO, "cannot write the trace to '%s'; check the path",
                path ? path : "(null)");
        return en_error(e, PE_EIO, &err);
    }
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    for (int r = 0; r < e->world; r++) { /* names the rows in Perfetto */
        const en_worker *w = &e->workers[r];
        fprintf(f,
                "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                "\"args\":{\"name\":\"worker %d (d%d p%d t%d, device %d)\"}}",
                r ? "," : "", r, r, w->d, w->p, w->t, w->device_id);
    }
    for (size_t i = 0; i < n; i++)
        write_event(f, &ev[i]);
    fprintf(f, "\n]}\n");
    free(ev);
    if (fclose(f) != 0) {
        pe_fail(&err, PE_EIO, "error writing the trace to '%s' (disk full?)", path);
        return en_error(e, PE_EIO, &err);
    }
    return PE_OK;
}
