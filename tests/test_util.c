/* test_util.c: shared helpers for the cmocka tests. */
#include "test_util.h"

#include "kernels/sample.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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

char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    assert_true(size >= 0);
    char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    buf[size] = '\0';
    fclose(f);
    if (n)
        *n = (size_t)size;
    return buf;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

#define TU_MAX_ARGS 64

/* In the child: the files as stdin, stdout and stderr, then exec. Never returns. */
_Noreturn static void exec_child(const tu_cmd *c, char **argv, const char *in, const char *out,
                       const char *err)
{
    if (!freopen(in, "r", stdin) || !freopen(out, "w", stdout) || !freopen(err, "w", stderr))
        _exit(126);
    if (c->tmpdir)
        setenv("TMPDIR", c->tmpdir, 1);
    execv(c->bin, argv);
    _exit(127);
}

/* Waits for pid; kills it and fails the test after limit_s seconds. */
static int wait_limited(pid_t pid, const tu_cmd *c, const char *what)
{
    int ws = 0;
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (long waited = 0; waitpid(pid, &ws, WNOHANG) != pid; waited++) {
        if (waited > (long)c->limit_s * 100) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            fail_msg("%s %s ran longer than %d s", c->bin, what, c->limit_s);
        }
        nanosleep(&nap, NULL);
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

tu_run tu_run_cmd(const tu_cmd *c, const char *const *args)
{
    char in[600], out[600], err[600];
    tu_temp_path(in, sizeof in, "tu_run_stdin");
    tu_temp_path(out, sizeof out, "tu_run_stdout");
    tu_temp_path(err, sizeof err, "tu_run_stderr");
    FILE *f = fopen(in, "wb");
    assert_non_null(f);
    fputs(c->input ? c->input : "", f);
    assert_int_equal(fclose(f), 0);
    char *argv[TU_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = (char *)c->bin;
    for (; args[n - 1]; n++) {
        if (n > TU_MAX_ARGS)
            fail_msg("more than %d arguments; raise TU_MAX_ARGS", TU_MAX_ARGS);
        argv[n] = (char *)args[n - 1];
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        exec_child(c, argv, in, out, err);
    tu_run r;
    r.status = wait_limited(pid, c, args[0] ? args[0] : "");
    r.out = tu_slurp(out, NULL);
    r.err = tu_slurp(err, NULL);
    unlink(in);
    unlink(out);
    unlink(err);
    return r;
}

void tu_run_free(tu_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const char *tu_dir_arg(int argc, char **argv, const char *what)
{
    static char dir[PATH_MAX];
    if (argc < 2 || !realpath(argv[1], dir)) {
        fprintf(stderr, "usage: %s %s\n", argv[0], what);
        return NULL;
    }
    return dir;
}
