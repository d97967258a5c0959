/* model_file.c: writes the demo model to a temporary file, or reads the shape of --model. */
#include "model_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp/mlp.h"

#define DEMO_WIDTH 256

static int write_demo(const cli_options *o, int layers, size_t out_width, cli_model *m)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    const char *suffix = ".safetensors";
    int n = snprintf(m->path, sizeof m->path, "%s/pengine-demo-XXXXXX%s", dir, suffix);
    if (n < 0 || (size_t)n >= sizeof m->path) {
        cli_errorf("TMPDIR '%s' is too long; set TMPDIR to a short writable folder", dir);
        return CLI_USAGE;
    }
    int fd = mkstemps(m->path, (int)strlen(suffix));
    if (fd < 0) {
        cli_errorf("cannot create a temporary model file in %s (%s); set TMPDIR to a writable "
                   "folder or pass --model FILE", dir, strerror(errno));
        return CLI_RUNTIME;
    }
    close(fd);
    m->generated = 1;
    md_mlp_spec spec = {.in = DEMO_WIDTH, .hidden = DEMO_WIDTH, .out = out_width,
                        .layers = layers, .act = MD_ACT_RELU, .init = MD_INIT_NORMAL,
                        .std = 0.02f, .seed = o->seed};
    pe_err err = {{0}};
    if (md_mlp_write(&spec, m->path, &err) != PE_OK) {
        cli_errorf("writing the demo model %s failed: %s", m->path, err.msg);
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

static const char *act_name(md_activation a)
{
    return a == MD_ACT_RELU ? "relu" : a == MD_ACT_GELU ? "gelu" : "none";
}

int cli_model_prepare(const cli_options *o, int layers, size_t out_width, cli_model *m)
{
    memset(m, 0, sizeof *m);
    if (o->model_path) {
        if (snprintf(m->path, sizeof m->path, "%s", o->model_path) >= (int)sizeof m->path) {
            cli_error("--model path is too long; use a shorter path");
            return CLI_USAGE;
        }
    } else {
        int rc = write_demo(o, layers, out_width, m);
        if (rc != CLI_OK)
            return rc;
    }
    md_mlp mlp;
    pe_err err = {{0}};
    pe_status s = md_mlp_load(m->path, &mlp, &err);
    if (s != PE_OK) {
        const char *why = err.msg[0] ? err.msg : pe_status_str(s);
        if (strstr(why, "; ")) /* the message already says what to do */
            cli_error(why);
        else
            cli_errorf("%s; check the file given to --model, or write one with pengine gen mlp",
                       why);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    m->nlayers = mlp.nlayers;
    m->in = mlp.layers[0].in;
    m->out = mlp.layers[mlp.nlayers - 1].out;
    m->nparams = md_mlp_params(&mlp);
    /* activations between layers; the last layer's (usually none) is not counted */
    m->act = mlp.nlayers > 1 ? act_name(mlp.layers[0].act) : "none";
    for (int l = 1; l + 1 < mlp.nlayers; l++)
        if (mlp.layers[l].act != mlp.layers[0].act)
            m->act = "mixed";
    size_t used = (size_t)snprintf(m->shape, sizeof m->shape, "%zu", m->in);
    for (int l = 0; l < mlp.nlayers && used < sizeof m->shape; l++) {
        int w = snprintf(m->shape + used, sizeof m->shape - used, "-%zu", mlp.layers[l].out);
        if (w < 0 || (size_t)w >= sizeof m->shape - used) {
            snprintf(m->shape + sizeof m->shape - 4, 4, "...");
            break;
        }
        used += (size_t)w;
    }
    md_mlp_free(&mlp);
    return CLI_OK;
}

void cli_model_release(cli_model *m)
{
    if (m->generated)
        unlink(m->path);
    m->generated = 0;
}
