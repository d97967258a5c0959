/* demo_compare.c: the engine under test against one device on the same requests: the timing
 * table, the speedup and the verdict (against the host backend when it runs on CUDA). The dp and tp demos are this with their own words. */
#include <stdio.h>

#include "demo.h"
#include "verify.h"

/* The demo model of dp and tp: 256 -> 256 -> 256 -> 256 -> 1, batch 16 per replica. */
#define CMP_LAYERS 4
#define CMP_OUT 1
#define CMP_BATCH 16

int cli_demo_compare(const cli_options *o, cli_report *r, const cli_compare_spec *spec)
{
    size_t rows = o->batch ? o->batch : CMP_BATCH;
    int mb;
    int rc = cli_pick_microbatches(o, 1, rows, &mb);
    if (rc != CLI_OK)
        return rc;
    pe_schedule sched = o->schedule_set ? o->schedule : mb > 1 ? PE_SCHED_GPIPE : PE_SCHED_NAIVE;
    cli_model m;
    rc = cli_model_prepare(o, CMP_LAYERS, CMP_OUT, &m);
    if (rc != CLI_OK)
        return rc;
    cli_work single_w = {0}, grid_w = {0}, ref_w = {0};
    pe_engine *single = NULL, *grid = NULL;
    double single_ms = 0, grid_ms = 0;

    rc = cli_work_init(&single_w, o->dp, rows, m.in, m.out, o->seed);
    if (rc == CLI_OK)
        rc = cli_work_init(&grid_w, o->dp, rows, m.in, m.out, o->seed);
    /* the engine under test first, so that a configuration it refuses fails fast */
    pe_config cfg;
    if (rc == CLI_OK) {
        size_t cap = o->trace_path ? cli_trace_capacity(&grid_w, o->iters, mb, m.nlayers) : 0;
        cli_config_grid(o, mb, sched, o->nsplit ? o->split : NULL, cap, &cfg);
        rc = cli_engine_open(&cfg, m.path, &grid);
    }
    if (rc == CLI_OK) {
        cli_config_single(o, mb, &cfg);
        rc = cli_run_engine(&cfg, m.path, &single_w, o->warmup, o->iters, &single_ms, &single);
    }
    pe_engine_destroy(single);
    if (rc == CLI_OK)
        rc = cli_time(grid, &grid_w, o->warmup, o->iters, &grid_ms);
    pe_engine_info info;
    if (rc == CLI_OK && pe_engine_info_get(grid, &info) != PE_OK) {
        cli_errorf("reading the engine's info failed: %s", pe_engine_last_error(grid));
        rc = CLI_RUNTIME;
    }
    if (rc == CLI_OK && o->trace_path)
        rc = cli_write_trace(grid, o->trace_path);

    if (rc == CLI_OK) {
        cli_report_header(r, o, spec->title, &info, &m, &grid_w, mb, sched);
        double samples = (double)grid_w.nreq * (double)rows;
        const char *keys[] = {"single", spec->col_key};
        const char *titles[] = {"single device", spec->col_title};
        report_line(r, "%s", "");
        report_table(r, 2, keys, titles);
        double ms[] = {single_ms, grid_ms};
        double sps[] = {samples / single_ms * 1e3, samples / grid_ms * 1e3};
        report_row(r, "ms_per_iter", "ms per iteration", ms, 3, NULL);
        report_row(r, "samples_per_s", "samples per second", sps, 0, NULL);
        report_table_end(r);
        report_num(r, "speedup", spec->speedup_label, single_ms / grid_ms, 2, "x");

        if (o->verify) {
            cli_rule rule;
            cli_verify_rule(info.backend, o->dtype, o->tp, &rule);
            const float *ref = single_w.output; /* same backend: the timed single device */
            if (info.backend == PE_BACKEND_CUDA) {
                cli_config_reference(o, info.backend, mb, &cfg);
                rc = cli_work_init(&ref_w, o->dp, rows, m.in, m.out, o->seed);
                pe_engine *host = NULL;
                double host_ms;
                if (rc == CLI_OK)
                    rc = cli_run_engine(&cfg, m.path, &ref_w, 0, 1, &host_ms, &host);
                pe_engine_destroy(host);
                ref = ref_w.output;
            }
            if (rc == CLI_OK) {
                cli_check c;
                char heading[96];
                snprintf(heading, sizeof heading, "verification against %s", rule.reference);
                cli_compare(grid_w.output, ref, (size_t)grid_w.nreq * rows * m.out, &rule, &c);
                report_line(r, "%s", "");
                cli_report_check(r, "verify", heading, &c);
                if (!c.match)
                    rc = cli_verification_failed(spec->what, c.max_abs);
            }
        }
    }
    pe_engine_destroy(grid);
    cli_work_free(&single_w);
    cli_work_free(&grid_w);
    cli_work_free(&ref_w);
    cli_model_release(&m);
    return rc;
}
