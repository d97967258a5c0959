/* fuzz_replay.c: a main() for the fuzz targets without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on each file named on the command line, and on each file of
 * each directory named (sorted by name; dot-files left out). ctest runs every target this
 * way over its seed corpus in tests/fuzz/corpus; a crash, an abort() of a target's check or a
 * sanitizer's report fails the test. Exits 1 when no input was found (a wrong path). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

/* Runs the target on the file at path, read into a buffer of exactly its size (so that a
 * read past the end is an AddressSanitizer report). Returns 0, or -1 when unreadable. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *data = malloc(n ? n : 1);
    if (!data || fread(data, 1, n, f) != n) {
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    return 0;
}

static int visible(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    long inputs = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "fuzz_replay: %s: no such file or directory\n", argv[a]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[a]) != 0) {
                fprintf(stderr, "fuzz_replay: cannot read %s\n", argv[a]);
                return 1;
            }
            inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[a], &names, visible, alphasort);
        if (n < 0) {
            fprintf(stderr, "fuzz_replay: cannot list %s\n", argv[a]);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) != 0) {
                    fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
                    return 1;
                }
                inputs++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("fuzz_replay: %ld inputs, no failure\n", inputs);
    return inputs > 0 ? 0 : 1;
}
