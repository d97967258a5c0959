/* gen.c: "pengine gen mlp": parses its flags and writes a seeded random MLP (md_mlp_write). */
#include "gen.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "model/mlp/mlp.h"

static int gen_usage_error(const char *msg)
{
    cli_error(msg);
    return CLI_USAGE;
}

int cli_gen(int argc, char **argv)
{
    char msg[CLI_MSG_LEN];
    if (argc < 2 || strcmp(argv[1], "mlp") != 0) {
        snprintf(msg, sizeof msg, "unknown model kind '%s' for gen; use pengine gen mlp --hidden "
                 "256 --layers 4 --out m.safetensors", argc < 2 ? "" : argv[1]);
        return gen_usage_error(msg);
    }
    md_mlp_spec spec = {.act = MD_ACT_RELU, .init = MD_INIT_NORMAL, .std = 0.02f, .seed = 1};
    long hidden = 0, layers = 0, in = 0, out = 0;
    const char *path = NULL;
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            cli_usage(stdout);
            return CLI_OK;
        }
        static const char *const known[] = {"--hidden", "--layers", "--in", "--out-dim", "--act",
                                            "--init", "--std", "--seed", "--out"};
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            ok |= !strcmp(f, known[k]);
        if (!ok) {
            snprintf(msg, sizeof msg, "unknown flag '%s' for gen mlp; see pengine --help", f);
            return gen_usage_error(msg);
        }
        if (i + 1 >= argc) {
            snprintf(msg, sizeof msg, "%s needs a value; see pengine --help", f);
            return gen_usage_error(msg);
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(f, "--hidden"))
            bad = cli_parse_long(f, v, 1, 1L << 20, &hidden, msg, sizeof msg);
        else if (!strcmp(f, "--layers"))
            bad = cli_parse_long(f, v, 1, 4096, &layers, msg, sizeof msg);
        else if (!strcmp(f, "--in"))
            bad = cli_parse_long(f, v, 1, 1L << 20, &in, msg, sizeof msg);
        else if (!strcmp(f, "--out-dim"))
            bad = cli_parse_long(f, v, 1, 1L << 20, &out, msg, sizeof msg);
        else if (!strcmp(f, "--seed"))
            bad = cli_parse_u64(f, v, &spec.seed, msg, sizeof msg);
        else if (!strcmp(f, "--std")) {
            double std;
            bad = cli_parse_double(f, v, 0.0, 1e3, &std, msg, sizeof msg);
            spec.std = (float)std;
        } else if (!strcmp(f, "--act")) {
            if (!strcmp(v, "relu")) spec.act = MD_ACT_RELU;
            else if (!strcmp(v, "gelu")) spec.act = MD_ACT_GELU;
            else {
                snprintf(msg, sizeof msg, "unknown activation '%s'; use --act relu or --act gelu",
                         v);
                bad = 1;
            }
        } else if (!strcmp(f, "--init")) {
            if (!strcmp(v, "normal")) spec.init = MD_INIT_NORMAL;
            else if (!strcmp(v, "identity")) spec.init = MD_INIT_IDENTITY;
            else {
                snprintf(msg, sizeof msg,
                         "unknown init '%s'; use --init normal or --init identity", v);
                bad = 1;
            }
        } else if (!strcmp(f, "--out")) {
            if (!*v) {
                snprintf(msg, sizeof msg, "--out is empty; give a file, e.g. --out m.safetensors");
                bad = 1;
            }
            path = v;
        }
        if (bad)
            return gen_usage_error(msg);
    }
    if (!hidden || !layers || !path)
        return gen_usage_error(!hidden   ? "--hidden is missing; e.g. pengine gen mlp --hidden 256 "
                                           "--layers 4 --out m.safetensors"
                               : !layers ? "--layers is missing; e.g. pengine gen mlp --hidden 256 "
                                           "--layers 4 --out m.safetensors"
                                         : "--out is missing; give the file to write, e.g. --out "
                                           "m.safetensors");
    spec.hidden = (size_t)hidden;
    spec.layers = (int)layers;
    spec.in = in ? (size_t)in : spec.hidden;
    spec.out = out ? (size_t)out : spec.hidden;

    pe_err err = {{0}};
    pe_status s = md_mlp_write(&spec, path, &err);
    if (s != PE_OK) {
        const char *why = err.msg[0] ? err.msg : pe_status_str(s);
        if (strstr(why, "; ")) /* the message already says what to do */
            cli_error(why);
        else
            cli_errorf("%s; check that the folder of --out exists and is writable", why);
        /* a bad spec or an unwritable path is the user's to fix */
        return s == PE_EINVAL || s == PE_EIO ? CLI_USAGE : CLI_RUNTIME;
    }
    return CLI_OK;
}
