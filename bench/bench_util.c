/* bench_util.c: shared helpers for the benchmarks. */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bu_quantile(double *x, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(x, n, sizeof *x, cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return x[i < n ? i : n - 1];
}

double bu_median(double *x, size_t n) { return bu_quantile(x, n, 0.5); }

double bu_min(const double *x, size_t n)
{
    double m = n ? x[0] : 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] < m)
            m = x[i];
    return m;
}

void bu_parse_args(int argc, char **argv, bu_args *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            out->json_path = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            out->quick = 1;
    }
}

int bu_write_json(const cJSON *root, const char *path)
{
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "error: cannot write %s\n", path);
    free(text);
    return ok ? 0 : -1;
}
