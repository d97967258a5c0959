/* demo_tp.c: the tensor-parallel demo: every layer split over the TP group (column- then
 * row-parallel pairs), timed against one device, checked to 1e-5 relative. */
#include <stdio.h>

#include "demo.h"

int cli_demo_tp(const cli_options *o, cli_report *r)
{
    char title[64], col[32];
    snprintf(title, sizeof title, "tensor parallel demo, tp=%d", o->tp);
    snprintf(col, sizeof col, "tp=%d", o->tp);
    cli_compare_spec spec = {.title = title,
                             .col_key = "tp",
                             .col_title = col,
                             .what = "the tensor-parallel output",
                             .speedup_label = "speedup (single ms / tp ms)"};
    return cli_demo_compare(o, r, &spec);
}
