/* mlp_describe.c: pe_mlp_describe and pe_random_uniform (pengine_tools.h): what an MLP file
 * holds, and seeded demo inputs, for the command and for users. */
#include <stdio.h>
#include <string.h>

#include "kernels/sample.h"
#include "model/mlp/mlp.h"
#include "pengine/pengine_tools.h"

pe_status pe_mlp_describe(const char *path, pe_mlp_desc *out)
{
    if (!path || !out) {
        pe_set_last_error("pe_mlp_describe: path and out must not be NULL");
        return PE_EINVAL;
    }
    memset(out, 0, sizeof *out);
    md_mlp m;
    pe_err err = {{0}};
    pe_status s = md_mlp_load(path, &m, &err);
    if (s != PE_OK) {
        pe_set_last_error(err.msg);
        return s;
    }
    out->layers = m.nlayers;
    out->in = m.layers[0].in;
    out->out = m.layers[m.nlayers - 1].out;
    out->nparams = md_mlp_params(&m);
    /* the activations between layers; the last layer's (usually none) is not counted */
    const char *act = m.nlayers > 1 ? md_act_name(m.layers[0].act) : "none";
    for (int l = 1; l + 1 < m.nlayers; l++)
        if (m.layers[l].act != m.layers[0].act)
            act = "mixed";
    snprintf(out->activation, sizeof out->activation, "%s", act ? act : "none");
    size_t used = (size_t)snprintf(out->shape, sizeof out->shape, "%zu", out->in);
    for (int l = 0; l < m.nlayers && used < sizeof out->shape; l++) {
        int w = snprintf(out->shape + used, sizeof out->shape - used, "-%zu", m.layers[l].out);
        if (w < 0 || (size_t)w >= sizeof out->shape - used) {
            snprintf(out->shape + sizeof out->shape - 4, 4, "...");
            break;
        }
        used += (size_t)w;
    }
    md_mlp_free(&m);
    return PE_OK;
}

void pe_random_uniform(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(pe_k_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
