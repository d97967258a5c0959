/* bench_util.h: shared helpers for the benchmarks: statistics, tables, --json output. */
#ifndef PE_BENCH_UTIL_H
#define PE_BENCH_UTIL_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Sorts x in place and returns the q-quantile (0 <= q <= 1), nearest rank. */
double bu_quantile(double *x, size_t n, double q);
double bu_median(double *x, size_t n);
double bu_min(const double *x, size_t n);

/* Parses --json FILE (and --quick) from argv; returns the path or NULL. */
typedef struct bu_args {
    const char *json_path; /* --json FILE */
    int quick;             /* --quick: fewer sizes and repetitions (smoke runs) */
} bu_args;
void bu_parse_args(int argc, char **argv, bu_args *out);

/* The float sum of x(n), read once at full speed (AVX2, four streams with software
 * prefetch, where the CPU has it): the kernel of the benchmarks' memory read bandwidth.
 * x 32-byte aligned. */
float bu_sum(const float *x, size_t n);

/* Removes dir's files, then dir (the models the benchmarks write; no subfolders). */
void bu_remove_dir(const char *dir);

/* Writes root to path (pretty). Returns 0 on success, prints an error otherwise. */
int bu_write_json(const cJSON *root, const char *path);

#endif
