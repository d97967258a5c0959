/* model_file.c: writes the demo model to a temporary file, or reads the shape of --model. */
#include "model_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pengine/pengine_tools.h"

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
    pe_gen_mlp_spec spec = {.in = DEMO_WIDTH, .hidden = DEMO_WIDTH, .out = out_width,
                            .layers = layers, .act = PE_GEN_ACT_RELU, .std = 0.02f,
                            .seed = o->seed};
    if (pe_gen_mlp_write(&spec, m->path) != PE_OK) {
        cli_errorf("writing the demo model %s failed: %s", m->path, pe_last_error());
        return CLI_RUNTIME;
    }
    return CLI_OK;
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
    pe_mlp_desc d;
    pe_status s = pe_mlp_describe(m->path, &d);
    if (s != PE_OK) {
        const char *why = pe_last_error()[0] ? pe_last_error() : pe_status_str(s);
        if (strstr(why, "; ")) /* the message already says what to do */
            cli_error(why);
        else
            cli_errorf("%s; check the file given to --model, or write one with pengine gen mlp",
                       why);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    m->nlayers = d.layers;
    m->in = d.in;
    m->out = d.out;
    m->nparams = d.nparams;
    m->act = !strcmp(d.activation, "relu") ? "relu" : !strcmp(d.activation, "gelu") ? "gelu"
             : !strcmp(d.activation, "mixed") ? "mixed" : "none";
    snprintf(m->shape, sizeof m->shape, "%s", d.shape);
    return CLI_OK;
}

void cli_model_release(cli_model *m)
{
    if (m->generated)
        unlink(m->path);
    m->generated = 0;
}
