/* test_util.c: shared helpers for the cmocka tests. */
#include "test_util.h"

#include "kernels/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int tu_small(void)
{
    const char *s = getenv("PE_TEST_SMALL");
    return s && *s && *s != '0';
}

size_t tu_size(size_t big, size_t small) { return tu_small() ? small : big; }

void tu_fill_random(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(pe_k_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

void tu_temp_path(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("PE_TEST_DATA");
    snprintf(buf, len, "%s/%s.%ld", dir && *dir ? dir : "/tmp", name, (long)getpid());
}

double tu_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

double tu_max_rel_diff(const float *a, const float *b, size_t n, double floor)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), floor);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}
