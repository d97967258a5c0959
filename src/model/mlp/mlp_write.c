/* mlp_write.c: writes a seeded random (or identity) MLP as an F32 safetensors file.
 *
 * The weights come from the writers' generator (model/gen/rng.h: xoshiro256** seeded by
 * splitmix64, normals by Box-Muller in double, rounded once to float), drawn layer by
 * layer, row by row, so one spec gives the same bytes on every machine whose libm rounds
 * log, sqrt, cos and sin correctly (glibc does).
 */
#include "model/mlp/mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/format/safetensors.h"
#include "model/gen/rng.h"

static pe_status md_check_spec(const md_mlp_spec *sp, const char *path, pe_err *err)
{
    if (!sp || !path)
        return pe_fail(err, PE_EINVAL, "md_mlp_write: no spec or path");
    if (sp->layers < 1 || sp->in == 0 || sp->out == 0 || (sp->layers > 1 && sp->hidden == 0))
        return pe_fail(err, PE_EINVAL,
                       "%s: model spec in=%zu hidden=%zu out=%zu layers=%d: every width and the "
                       "layer count must be at least 1",
                       path, sp->in, sp->hidden, sp->out, sp->layers);
    if ((unsigned)sp->act > MD_ACT_GELU || (unsigned)sp->init > MD_INIT_IDENTITY)
        return pe_fail(err, PE_EINVAL, "%s: unknown activation or init in the model spec", path);
    if (!(sp->std >= 0.0f) || isinf(sp->std))
        return pe_fail(err, PE_EINVAL, "%s: std %g must be finite and >= 0", path,
                       (double)sp->std);
    return PE_OK;
}

pe_status md_mlp_write(const md_mlp_spec *sp, const char *path, pe_err *err)
{
    pe_status s = md_check_spec(sp, path, err);
    if (s != PE_OK)
        return s;
    int L = sp->layers;
    st_out_tensor *ts = calloc((size_t)L * 2, sizeof *ts);
    char *names = calloc((size_t)L * 2, 32);
    if (!ts || !names) {
        free(ts);
        free(names);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    }
    size_t wmax = 0; /* widest weight row */
    for (int l = 0; l < L && s == PE_OK; l++) {
        size_t in = l == 0 ? sp->in : sp->hidden, out = l == L - 1 ? sp->out : sp->hidden;
        if (sp->init == MD_INIT_IDENTITY && in != out)
            s = pe_fail(err, PE_EINVAL,
                        "%s: identity init needs square layers but layer %d is (out %zu, in %zu); "
                        "use in = hidden = out",
                        path, l, out, in);
        char *wn = names + 64 * (size_t)l, *bn = wn + 32;
        snprintf(wn, 32, "layers.%d.weight", l);
        snprintf(bn, 32, "layers.%d.bias", l);
        ts[2 * l] = (st_out_tensor){.name = wn, .ndim = 2, .shape = {out, in}};
        ts[2 * l + 1] = (st_out_tensor){.name = bn, .ndim = 1, .shape = {out}};
        wmax = in > wmax ? in : wmax;
        wmax = out > wmax ? out : wmax;
    }
    char nl[16];
    snprintf(nl, sizeof nl, "%d", L);
    const st_kv meta[] = {{"architecture", "mlp"},
                          {"activation", md_act_name(sp->act)},
                          {"layers", nl},
                          {"init", sp->init == MD_INIT_IDENTITY ? "identity" : "normal"}};
    st_writer *w = NULL;
    if (s == PE_OK)
        s = st_writer_open(&w, path, meta, 4, ts, 2 * L, err);
    float *row = s == PE_OK ? malloc(wmax * sizeof *row) : NULL;
    if (s == PE_OK && !row)
        s = pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    md_rng rng;
    md_rng_seed(&rng, sp->seed);
    double std = sp->std > 0.0f ? sp->std : 0.02;
    for (int l = 0; l < L && s == PE_OK; l++) {
        size_t out = ts[2 * l].shape[0], in = ts[2 * l].shape[1];
        for (size_t o = 0; o < out && s == PE_OK; o++) { /* W (out, in), row o */
            for (size_t k = 0; k < in; k++)
                row[k] = sp->init == MD_INIT_IDENTITY ? (float)(o == k)
                                                      : (float)(std * md_rng_normal(&rng));
            s = st_writer_put(w, row, in, err);
        }
        memset(row, 0, out * sizeof *row); /* b (out) */
        if (s == PE_OK)
            s = st_writer_put(w, row, out, err);
    }
    free(row);
    free(ts);
    free(names);
    if (s == PE_OK)
        return st_writer_close(w, err);
    st_writer_abort(w);
    return s;
}
