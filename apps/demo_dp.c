/* demo_dp.c: the data-parallel demo: one request per replica per iteration, against the
 * same requests on one device; throughput, speedup, and a bit-for-bit check. */
#include <stdio.h>

#include "demo.h"

int cli_demo_dp(const cli_options *o, cli_report *r)
{
    char title[64], col[32];
    snprintf(title, sizeof title, "data parallel demo, dp=%d", o->dp);
    snprintf(col, sizeof col, "dp=%d", o->dp);
    cli_compare_spec spec = {.title = title,
                             .col_key = "dp",
                             .col_title = col,
                             .what = "the data-parallel output",
                             .speedup_label = "speedup (throughput)"};
    return cli_demo_compare(o, r, &spec);
}
