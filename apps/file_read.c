/* file_read.c: a whole file into memory, for the commands' file flags. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        char *nb = n == cap ? realloc(buf, 2 * cap + 1) : buf;
        if (!nb) {
            free(buf);
            errno = ENOMEM;
        }
        cap = n == cap ? 2 * cap : cap;
        buf = nb;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = n;
    }
    return buf;
}
