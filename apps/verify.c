/* verify.c: max error against the single-device reference and the YES/NO verdict. */
#include "verify.h"

#include <math.h>
#include <string.h>

void cli_compare(const float *got, const float *ref, size_t n, int bitwise, cli_check *out)
{
    double max_abs = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (isnan(d))
            d = INFINITY;
        if (d > max_abs)
            max_abs = d;
        if (fabs((double)ref[i]) > max_ref)
            max_ref = fabs((double)ref[i]);
    }
    out->max_abs = max_abs;
    out->max_rel = max_abs == 0 ? 0 : max_ref > 0 ? max_abs / max_ref : INFINITY;
    out->bitwise = bitwise;
    if (bitwise)
        out->match = n == 0 || memcmp(got, ref, n * sizeof *got) == 0;
    else
        out->match = isfinite(max_abs) && out->max_rel <= CLI_TP_TOLERANCE;
}

void cli_report_check(cli_report *r, const char *key, const char *heading, const cli_check *c)
{
    report_push(r, key, heading);
    report_num(r, "max_abs_error", "max abs error", c->max_abs, -3, NULL);
    report_num(r, "max_rel_error", "max rel error (to max |ref|)", c->max_rel, -3, NULL);
    report_str(r, "rule", "rule", c->bitwise ? "bit for bit" : "within 1e-5 relative");
    report_bool(r, "match", "match", c->match, "YES", "NO");
    report_pop(r);
}
