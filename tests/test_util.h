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

/* Reads a whole file, NUL-terminated; its size in *n (n may be NULL). Fails the test when
 * the file cannot be read. */
char *tu_slurp(const char *path, size_t *n);

/* Removes dir and everything under it (no error when it is missing). */
void tu_rm_tree(const char *dir);

/* The absolute path of the folder a test takes as its one argument (tests/tokenizer), or
 * NULL after printing "usage: PROG WHAT" when it is missing or does not exist. */
const char *tu_dir_arg(int argc, char **argv, const char *what);

/* A command for tu_run_cmd. */
typedef struct tu_cmd {
    const char *bin;    /* the program */
    const char *input;  /* its stdin; NULL = empty */
    const char *tmpdir; /* its TMPDIR; NULL = inherited */
    int limit_s;        /* killed, and the test failed, after this many seconds */
} tu_cmd;

/* What a command did. */
typedef struct tu_run {
    int status; /* exit code, or 128 + the signal that ended it */
    char *out;  /* stdout, NUL-terminated */
    char *err;  /* stderr, NUL-terminated */
} tu_run;

/* Runs c->bin with args (NULL-ended, without argv[0]) as a child process. stdin, stdout and
 * stderr go through files, so a chatty child never blocks on a full pipe. */
tu_run tu_run_cmd(const tu_cmd *c, const char *const *args);
void tu_run_free(tu_run *r);

#endif
