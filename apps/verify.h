/* verify.h: compares a run's output with its reference run and reports the verdict.
 *
 * The reference is one device of the same backend, or, when the run is on CUDA, one host
 * device (the host backend's output for the same model file and inputs). The rule:
 *   host, no TP:  bit for bit (the same GEMM shapes on the same rows);
 *   host, TP:     max |got - ref| <= tol * max |ref|, tol 1e-5 in fp32 (TP's partial
 *                 sums add in another order) and 1e-3 in bf16 (an order change can flip
 *                 the bf16 rounding of a layer's input by one step, 2^-8);
 *   CUDA vs host: tol 1e-4 in fp32 (cuBLAS and OpenBLAS sum in other orders, tanhf
 *                 differs by ulps), 2e-2 in bf16 (the bound the bf16 GEMM is held to). */
#ifndef PE_APPS_VERIFY_H
#define PE_APPS_VERIFY_H

#include <stddef.h>

#include "pengine/pengine.h"
#include "report.h"

typedef struct cli_rule {
    double tol;             /* 0 = bit for bit, else max |got - ref| / max |ref| */
    const char *text;       /* "bit for bit", "within 1e-5 relative", ... */
    const char *reference;  /* "a single device", "the host backend (one device)" */
} cli_rule;

/* The rule for a run on `backend` (never AUTO) in dtype with tensor parallelism tp. */
void cli_verify_rule(pe_backend_kind backend, pe_dtype dtype, int tp, cli_rule *out);

typedef struct cli_check {
    double max_abs;   /* max |got - ref| (inf if a NaN appears) */
    double max_rel;   /* max_abs / max |ref| */
    cli_rule rule;
    int match;        /* the verdict */
} cli_check;

void cli_compare(const float *got, const float *ref, size_t n, const cli_rule *rule,
                 cli_check *out);

/* Prints the verdict under key "verify" (or a given key), e.g. "match  YES". */
void cli_report_check(cli_report *r, const char *key, const char *heading, const cli_check *c);

#endif
