/* demo_pp.c: the pipeline-parallel demo: naive (m = 1) against micro-batched, with total
 * time, first-result latency and the bubble fraction measured from the trace next to the
 * theory, an ASCII timeline of each, and a bit-for-bit check against one device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "timeline.h"
#include "trace_stats.h"
#include "verify.h"

/* The demo model: 8 layers of 256 -> 256; batch 64 = 4 micro-batches of 16 rows. */
#define PP_LAYERS 8
#define PP_OUT 256
#define PP_BATCH 64
#define PP_MICROBATCHES 4
#define TIMELINE_COLS 80

typedef struct pipe_run {
    const char *key;       /* JSON key: "naive" or "microbatched" */
    char title[32];        /* column title: "naive (m=1)", "gpipe (m=4)" */
    int m;
    pe_schedule schedule;
    cli_work w;
    pe_engine *e;
    double ms;             /* wall time per iteration */
    pe_trace_event *ev;    /* the timed iterations' trace */
    size_t nev;
    cli_pipe_stats st;
} pipe_run;

static int run_traced(const cli_options *o, pipe_run *p)
{
    int rc = cli_time(p->e, &p->w, o->warmup, o->iters, &p->ms);
    if (rc != CLI_OK)
        return rc;
    pe_status s = pe_engine_trace(p->e, &p->ev, &p->nev);
    if (s != PE_OK) {
        cli_errorf("reading the trace of the %s run failed: %s", p->title,
                   pe_engine_last_error(p->e));
        return CLI_RUNTIME;
    }
    if (cli_pipe_stats_compute(p->ev, p->nev, o->pp, &p->st) != 0) {
        cli_errorf("the trace of the %s run holds no complete request (%zu events); this is a "
                   "bug in pengine's tracing, please report it", p->title, p->nev);
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

static void report_timeline(cli_report *r, pipe_run *p, double us_per_col)
{
    char **lines = NULL;
    int n = 0;
    if (cli_timeline_draw(p->ev, p->nev, p->st.typical_request, TIMELINE_COLS, us_per_col, &lines,
                          &n) != 0) {
        report_line(r, "  (no timeline: request %llu left no events)",
                    (unsigned long long)p->st.typical_request);
        return;
    }
    report_line(r, "%s, request %llu (the median span):", p->title,
                (unsigned long long)p->st.typical_request);
    report_lines(r, p->key, lines, n);
    cli_lines_free(lines, n);
}

static void report_figures(cli_report *r, const cli_options *o, pipe_run *runs)
{
    const char *keys[] = {runs[0].key, runs[1].key};
    const char *titles[] = {runs[0].title, runs[1].title};
    report_line(r, "%s", "");
    report_table(r, 2, keys, titles);
    double total[] = {runs[0].ms, runs[1].ms};
    double first[] = {runs[0].st.first_result_ms, runs[1].st.first_result_ms};
    double bubble[] = {runs[0].st.bubble, runs[1].st.bubble};
    double theory[] = {cli_bubble_theory(o->pp, runs[0].m), cli_bubble_theory(o->pp, runs[1].m)};
    double traced[] = {(double)runs[0].st.requests, (double)runs[1].st.requests};
    report_row(r, "total_ms", "total", total, 3, "ms per iteration");
    report_row(r, "first_result_ms", "first result", first, 3, "ms");
    report_row(r, "bubble_measured", "bubble, measured", bubble, 3, NULL);
    report_row(r, "bubble_theory", "bubble, theory (p-1)/(m+p-1)", theory, 3, NULL);
    report_row(r, "requests_traced", "requests in the trace", traced, 0, NULL);
    report_table_end(r);
    report_num(r, "speedup", "speedup over naive", runs[0].ms / runs[1].ms, 2, "x");
    report_num(r, "first_result_speedup", "first-result speedup",
               runs[0].st.first_result_ms / runs[1].st.first_result_ms, 2, "x");

    /* one time scale for both pictures, so their lengths compare */
    double span = cli_request_span_us(runs[0].ev, runs[0].nev, runs[0].st.typical_request);
    double span1 = cli_request_span_us(runs[1].ev, runs[1].nev, runs[1].st.typical_request);
    double us_per_col = (span > span1 ? span : span1) / TIMELINE_COLS;
    if (us_per_col <= 0)
        us_per_col = 1;
    report_line(r, "%s", "");
    report_line(r, "timeline (one column = %.1f us; 0-9a-z = micro-batch computing, . = idle)",
                us_per_col);
    report_push(r, "timeline", NULL);
    report_num(r, "us_per_column", NULL, us_per_col, 3, NULL);
    report_timeline(r, &runs[0], us_per_col);
    report_timeline(r, &runs[1], us_per_col);
    report_pop(r);
}

int cli_demo_pp(const cli_options *o, cli_report *r)
{
    size_t rows = o->batch ? o->batch : PP_BATCH;
    int mb;
    int rc = cli_pick_microbatches(o, PP_MICROBATCHES, rows, &mb);
    if (rc != CLI_OK)
        return rc;
    cli_model m;
    rc = cli_model_prepare(o, PP_LAYERS, PP_OUT, &m);
    if (rc != CLI_OK)
        return rc;
    pipe_run runs[2];
    memset(runs, 0, sizeof runs);
    runs[0].key = "naive";
    runs[0].m = 1;
    runs[0].schedule = PE_SCHED_NAIVE;
    runs[1].key = "microbatched";
    runs[1].m = mb;
    runs[1].schedule = o->schedule_set ? o->schedule : PE_SCHED_GPIPE;
    snprintf(runs[0].title, sizeof runs[0].title, "naive (m=1)");
    snprintf(runs[1].title, sizeof runs[1].title, "%s (m=%d)",
             cli_schedule_name(runs[1].schedule), runs[1].m);
    cli_work single_w[2] = {{0}, {0}};
    pe_engine *single = NULL;

    /* the micro-batched engine first: a configuration it refuses fails fast */
    for (int i = 1; i >= 0 && rc == CLI_OK; i--) {
        rc = cli_work_init(&runs[i].w, o->dp, rows, m.in, m.out, o->seed);
        if (rc != CLI_OK)
            break;
        pe_config cfg;
        cli_config_grid(o, runs[i].m, runs[i].schedule, o->nsplit ? o->split : NULL,
                        cli_trace_capacity(&runs[i].w, o->iters, runs[i].m, m.nlayers), &cfg);
        rc = cli_engine_open(&cfg, m.path, &runs[i].e);
    }
    for (int i = 0; i < 2 && rc == CLI_OK; i++)
        rc = run_traced(o, &runs[i]);
    pe_engine_info info;
    if (rc == CLI_OK && pe_engine_info_get(runs[1].e, &info) != PE_OK) {
        cli_errorf("reading the engine's info failed: %s", pe_engine_last_error(runs[1].e));
        rc = CLI_RUNTIME;
    }
    if (rc == CLI_OK && o->trace_path)
        rc = cli_write_trace(runs[1].e, o->trace_path);
    for (int i = 0; i < 2; i++) {
        pe_engine_destroy(runs[i].e);
        runs[i].e = NULL;
    }
    /* each run against one device cutting its requests into the same micro-batches */
    for (int i = 0; i < 2 && rc == CLI_OK && o->verify; i++) {
        double ms;
        pe_config cfg;
        cli_config_reference(o, info.backend, runs[i].m, &cfg);
        rc = cli_work_init(&single_w[i], o->dp, rows, m.in, m.out, o->seed);
        if (rc == CLI_OK)
            rc = cli_run_engine(&cfg, m.path, &single_w[i], 0, 1, &ms, &single);
        pe_engine_destroy(single);
        single = NULL;
    }

    if (rc == CLI_OK) {
        char title[96];
        snprintf(title, sizeof title, "pipeline parallel demo, pp=%d, naive against %s",
                 o->pp, runs[1].title);
        cli_report_header(r, o, title, &info, &m, &runs[1].w, runs[1].m, runs[1].schedule);
        report_figures(r, o, runs);
        if (o->verify) {
            size_t n = (size_t)o->dp * rows * m.out;
            cli_rule rule;
            cli_verify_rule(info.backend, o->dtype, o->tp, &rule);
            cli_check c[2];
            for (int i = 0; i < 2; i++)
                cli_compare(runs[i].w.output, single_w[i].output, n, &rule, &c[i]);
            report_line(r, "%s", "");
            char heading[128];
            snprintf(heading, sizeof heading, "verification of naive against %s",
                     rule.reference);
            cli_report_check(r, "verify_naive", heading, &c[0]);
            snprintf(heading, sizeof heading, "verification of %s against %s, same micro-batches",
                     runs[1].title, rule.reference);
            cli_report_check(r, "verify", heading, &c[1]);
            if (!c[0].match || !c[1].match)
                rc = cli_verification_failed(!c[1].match ? "the micro-batched pipeline output"
                                                         : "the naive pipeline output",
                                             !c[1].match ? c[1].max_abs : c[0].max_abs);
        }
    }
    for (int i = 0; i < 2; i++) {
        pe_engine_destroy(runs[i].e);
        free(runs[i].ev);
        cli_work_free(&runs[i].w);
    }
    cli_work_free(&single_w[0]);
    cli_work_free(&single_w[1]);
    cli_model_release(&m);
    return rc;
}
