/* verify.h: compares a run's output with the single-device reference and reports the verdict.
 *
 * Without tensor parallelism the outputs must be equal bit for bit (the same GEMM shapes
 * on the same rows); with TP the partial sums are added in another order, so the rule is
 * max |got - ref| <= 1e-5 * max |ref| ("1e-5 relative"). */
#ifndef PE_APPS_VERIFY_H
#define PE_APPS_VERIFY_H

#include <stddef.h>

#include "report.h"

#define CLI_TP_TOLERANCE 1e-5

typedef struct cli_check {
    double max_abs;   /* max |got - ref| (inf if a NaN appears) */
    double max_rel;   /* max_abs / max |ref| */
    int bitwise;      /* the rule: 1 = bit for bit, 0 = within CLI_TP_TOLERANCE relative */
    int match;        /* the verdict */
} cli_check;

void cli_compare(const float *got, const float *ref, size_t n, int bitwise, cli_check *out);

/* Prints the verdict under key "verify" (or a given key), e.g. "match  YES". */
void cli_report_check(cli_report *r, const char *key, const char *heading, const cli_check *c);

#endif
