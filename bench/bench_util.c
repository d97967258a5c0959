/* bench_util.c: shared helpers for the benchmarks. */
#include "bench_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
/* Sums x(n) as 4 streams at once (its quarters), with software prefetch: one stream per
 * thread leaves the memory system idle between the hardware prefetcher's requests, and
 * would understate the bandwidth a GEMV (4 rows of W at once) reaches. */
__attribute__((target("avx2"))) static float sum_avx2(const float *x, size_t n)
{
    const size_t q = n / 4 / 16 * 16; /* floats per stream, a multiple of 16 */
    const float *s0 = x, *s1 = x + q, *s2 = x + 2 * q, *s3 = x + 3 * q;
    __m256 a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm256_setzero_ps();
    for (size_t i = 0; i < q; i += 16) {
        _mm_prefetch((const char *)(s0 + i + 512), _MM_HINT_T0);
        _mm_prefetch((const char *)(s1 + i + 512), _MM_HINT_T0);
        _mm_prefetch((const char *)(s2 + i + 512), _MM_HINT_T0);
        _mm_prefetch((const char *)(s3 + i + 512), _MM_HINT_T0);
        a[0] = _mm256_add_ps(a[0], _mm256_load_ps(s0 + i));
        a[1] = _mm256_add_ps(a[1], _mm256_load_ps(s0 + i + 8));
        a[2] = _mm256_add_ps(a[2], _mm256_load_ps(s1 + i));
        a[3] = _mm256_add_ps(a[3], _mm256_load_ps(s1 + i + 8));
        a[4] = _mm256_add_ps(a[4], _mm256_load_ps(s2 + i));
        a[5] = _mm256_add_ps(a[5], _mm256_load_ps(s2 + i + 8));
        a[6] = _mm256_add_ps(a[6], _mm256_load_ps(s3 + i));
        a[7] = _mm256_add_ps(a[7], _mm256_load_ps(s3 + i + 8));
    }
    for (int k = 1; k < 8; k++)
        a[0] = _mm256_add_ps(a[0], a[k]);
    float lanes[8], s = 0.0f;
    _mm256_storeu_ps(lanes, a[0]);
    for (int k = 0; k < 8; k++)
        s += lanes[k];
    for (size_t i = 4 * q; i < n; i++)
        s += x[i];
    return s;
}
#endif

float bu_sum(const float *x, size_t n)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return sum_avx2(x, n);
#endif
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

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

void bu_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}
