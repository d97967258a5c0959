/* test_models.h: tiny decoder models for the tests, written with pengine_tools.h into a
 * fresh directory under the test data folder, and removed after. Header-only (static), for
 * the decoder tests. */
#ifndef PE_TEST_MODELS_H
#define PE_TEST_MODELS_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"
#include "test_util.h"

/* A tiny "sharp" model: the q/k projections have a large std, so attention is far from
 * uniform and a wrong RoPE, mask or window changes the logits (random models with the
 * usual 0.02 have nearly uniform attention and hide such bugs). Returns pe_gen_init's
 * status (for test_mpi_grids, which fails without cmocka). */
static inline pe_status tm_sharp(pe_gen_spec *s, pe_gen_arch arch, uint64_t seed)
{
    pe_status st = pe_gen_init(s, arch, "tiny");
    if (st != PE_OK)
        return st;
    s->seed = seed;
    s->std = 0.08;
    s->qk_std = 0.5;
    s->norm_std = 0.1;
    s->bias_std = 0.05;
    return PE_OK;
}

/* tm_sharp, failing the test when it fails. */
static inline void tm_tiny(pe_gen_spec *s, pe_gen_arch arch, uint64_t seed)
{
    assert_int_equal(tm_sharp(s, arch, seed), PE_OK);
}

/* Writes spec into a fresh directory <data>/<name>.<pid>; dir gets its path. */
static inline void tm_write(const pe_gen_spec *s, const char *name, char *dir, size_t len)
{
    tu_temp_path(dir, len, name);
    if (pe_gen_write(s, dir) != PE_OK)
        fail_msg("pe_gen_write %s: %s", dir, pe_last_error());
}

/* Removes a model directory written by tm_write (its files, then itself). */
static inline void tm_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A host engine on `ndev` devices (dp = ndev) with the config's other fields from cfg_in
 * (may be NULL), loaded with dir. */
static inline pe_engine *tm_engine(const char *dir, int ndev, const pe_config *cfg_in)
{
    static const int devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pe_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = ndev;
    cfg.devices = devs;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("pe_engine_create: %s", pe_last_error());
    if (pe_engine_load(e, dir) != PE_OK)
        fail_msg("pe_engine_load %s: %s", dir, pe_last_error());
    return e;
}

/* max |a - b| over n values, and max |b| */
static inline void tm_diff(const float *a, const double *b, size_t n, double *maxdiff,
                           double *scale)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - b[i];
        d = fmax(d, fabs(x));
        if (x != x)
            d = INFINITY;
        m = fmax(m, fabs(b[i]));
    }
    *maxdiff = d;
    *scale = m;
}

/* Seeded random token ids in [0, vocab). */
static inline void tm_tokens(int32_t *t, size_t n, int vocab, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        t[i] = (int32_t)(s % (uint64_t)vocab);
    }
}

#endif
