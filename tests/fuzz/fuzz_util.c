/* fuzz_util.c: the fuzz targets' scratch directory and UTF-8 check (fuzz_util.h). */
#include "fuzz_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[512];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Runs at exit, also when libFuzzer stops on -runs or -max_total_time. */
static void remove_dir(void)
{
    nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void)
{
    if (g_dir[0])
        return g_dir;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/pe_fuzz_XXXXXX", tmp);
    if (!mkdtemp(g_dir)) {
        perror(g_dir);
        abort();
    }
    atexit(remove_dir);
    return g_dir;
}

void fuzz_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", fuzz_dir(), name);
}

void fuzz_write(const char *name, const void *data, size_t n)
{
    char path[1024];
    fuzz_path(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

int fuzz_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;            /* continuation bytes */
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            return 0;
        }
        if (n - i <= k || p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (size_t j = 2; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80)
                return 0;
        i += k + 1;
    }
    return 1;
}
