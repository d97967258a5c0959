/* verify.c: max error against the reference run and the YES/NO verdict (rules: verify.h). */
#include "verify.h"

#include <math.h>
#include <string.h>

void cli_verify_rule(pe_backend_kind backend, pe_dtype dtype, int tp, cli_rule *out)
{
    const int bf16 = dtype == PE_DTYPE_BF16;
    if (backend == PE_BACKEND_CUDA) {
        out->tol = bf16 ? 2e-2 : 1e-4;
        out->text = bf16 ? "within 2e-2 relative" : "within 1e-4 relative";
        out->reference = "the host backend (one device)";
    } else if (tp == 1) {
        out->tol = 0;
        out->text = "bit for bit";
        out->reference = "a single device";
    } else {
        out->tol = bf16 ? 1e-3 : 1e-5;
        out->text = bf16 ? "within 1e-3 relative" : "within 1e-5 relative";
        out->reference = "a single device";
    }
}

void cli_compare(const float *got, const float *ref, size_t n, const cli_rule *rule,
                 cli_check *out)
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
    out->rule = *rule;
    if (rule->tol == 0)
        out->match = n == 0 || memcmp(got, ref, n * sizeof *got) == 0;
    else
        out->match = isfinite(max_abs) && out->max_rel <= rule->tol;
}

void cli_report_check(cli_report *r, const char *key, const char *heading, const cli_check *c)
{
    report_push(r, key, heading);
    report_str(r, "reference", "reference", c->rule.reference);
    report_num(r, "max_abs_error", "max abs error", c->max_abs, -3, NULL);
    report_num(r, "max_rel_error", "max rel error (to max |ref|)", c->max_rel, -3, NULL);
    report_str(r, "rule", "rule", c->rule.text);
    report_bool(r, "match", "match", c->match, "YES", "NO");
    report_pop(r);
}
