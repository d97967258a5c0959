/* fuzz_util.h: what the fuzz targets share: a private directory for the files the parsers
 * read (made once per process under $TMPDIR or /tmp, removed at exit), and a UTF-8 check. */
#ifndef PE_TESTS_FUZZ_UTIL_H
#define PE_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The entry points libFuzzer calls; fuzz_replay.c calls them without it. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process's directory (created on the first call; aborts when it cannot be). */
const char *fuzz_dir(void);
/* "<fuzz_dir()>/<name>" into out (size bytes). */
void fuzz_path(char *out, size_t size, const char *name);
/* Writes n bytes as the file <fuzz_dir()>/<name> (aborts when it cannot). */
void fuzz_write(const char *name, const void *data, size_t n);
/* 1 when the n bytes of s are well-formed UTF-8 (no overlong forms, surrogates or code
 * points above U+10FFFF), else 0. */
int fuzz_utf8_valid(const char *s, size_t n);

#endif
