/* demo.h: the three demos (one file each) and the report header they share.
 *
 * Each demo runs the engine under test and a single-device engine on the same model and
 * inputs, prints its figures through the report, and verifies the outputs. Returns the
 * exit code: CLI_OK, CLI_RUNTIME (a failure while running, or a failed verification) or
 * CLI_USAGE (a configuration the engine refused). */
#ifndef PE_APPS_DEMO_H
#define PE_APPS_DEMO_H

#include "args.h"
#include "engine_run.h"
#include "model_file.h"
#include "report.h"

/* What differs between the dp and tp demos: the words. */
typedef struct cli_compare_spec {
    const char *title;         /* "data parallel demo, dp=2" */
    const char *col_key;       /* JSON key of the engine's column: "dp" */
    const char *col_title;     /* "dp=2" */
    const char *what;          /* "the data-parallel output", for a failed verification */
    const char *speedup_label; /* "speedup (throughput)" */
} cli_compare_spec;

/* The engine under test against one device on the same requests (demo_compare.c). */
int cli_demo_compare(const cli_options *o, cli_report *r, const cli_compare_spec *spec);

int cli_demo_dp(const cli_options *o, cli_report *r);
int cli_demo_tp(const cli_options *o, cli_report *r);
int cli_demo_pp(const cli_options *o, cli_report *r);
/* The decoder demo: o->model_path is a Hugging Face directory (demo_llm.c). */
int cli_demo_llm(const cli_options *o, cli_report *r);

/* The lines every demo starts with: version, mode, backend, devices, grid, stages, model
 * and workload. info is the engine under test's. */
void cli_report_header(cli_report *r, const cli_options *o, const char *title,
                       const pe_engine_info *info, const cli_model *m, const cli_work *w,
                       int microbatches, pe_schedule schedule);

/* After a failed verification: the one-line error (the report already shows the figures). */
int cli_verification_failed(const char *what, double max_abs);

#endif
