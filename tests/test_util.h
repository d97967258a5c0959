/* test_util.h: shared helpers for the cmocka tests. */
#ifndef PE_TEST_UTIL_H
#define PE_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

/* 1 when PE_TEST_SMALL is set (the valgrind runs): tests shrink their sizes. */
int tu_small(void);
/* big when running normally, small under PE_TEST_SMALL. */
size_t tu_size(size_t big, size_t small);

/* Deterministic pseudo-random floats in [-1, 1) (splitmix64). */
void tu_fill_random(float *x, size_t n, uint64_t seed);

/* A fresh path under the test data folder ($PE_TEST_DATA or /tmp): "<dir>/<name>.<pid>". */
void tu_temp_path(char *buf, size_t len, const char *name);

/* max |a - b| and max |a - b| / max(|b|, floor). */
double tu_max_abs_diff(const float *a, const float *b, size_t n);
double tu_max_rel_diff(const float *a, const float *b, size_t n, double floor);

#endif
