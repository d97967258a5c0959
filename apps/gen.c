/* gen.c: "pengine gen mlp|gpt2|llama": parses the flags and writes a seeded random model
 * through the public tools API (pengine_tools.h: pe_gen_mlp_write, pe_gen_write); with
 * --tokenizer, a decoder gets a real tokenizer's vocabulary and its files. */
#include "gen.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "gen_tokenizer.h"
#include "pengine/pengine_tools.h"

static int gen_usage_error(const char *msg)
{
    cli_error(msg);
    return CLI_USAGE;
}

/* Reports a failed write: a bad spec or an unwritable path is the user's to fix. */
static int gen_failed(pe_status s, const char *what)
{
    const char *why = pe_last_error()[0] ? pe_last_error() : pe_status_str(s);
    if (strstr(why, "; ")) /* the message already says what to do */
        cli_error(why);
    else
        cli_errorf("%s; check that the folder of %s exists and is writable", why, what);
    return s == PE_EINVAL || s == PE_EIO ? CLI_USAGE : CLI_RUNTIME;
}

/* ---- gen mlp --------------------------------------------------------------------------------- */

static int gen_mlp(int argc, char **argv)
{
    char msg[CLI_MSG_LEN];
    pe_gen_mlp_spec spec = {.act = PE_GEN_ACT_RELU, .std = 0.02f, .seed = 1};
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
            if (!strcmp(v, "relu")) spec.act = PE_GEN_ACT_RELU;
            else if (!strcmp(v, "gelu")) spec.act = PE_GEN_ACT_GELU;
            else {
                snprintf(msg, sizeof msg, "unknown activation '%s'; use --act relu or --act gelu",
                         v);
                bad = 1;
            }
        } else if (!strcmp(f, "--init")) {
            if (!strcmp(v, "normal")) spec.identity = 0;
            else if (!strcmp(v, "identity")) spec.identity = 1;
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
    pe_status s = pe_gen_mlp_write(&spec, path);
    return s == PE_OK ? CLI_OK : gen_failed(s, "--out");
}

/* ---- gen gpt2 | llama ------------------------------------------------------------------------ */

enum { G_INT, G_I32, G_U64, G_DBL, G_ON, G_OFF, G_OTHER };
enum { G_BOTH, G_GPT2, G_LLAMA }; /* which command takes the flag */

typedef struct gen_flag {
    const char *flag;
    int kind, family;
    size_t off; /* of the field in pe_gen_spec */
    double lo, hi;
} gen_flag;

#define F(field) offsetof(pe_gen_spec, field)
static const gen_flag gen_flags[] = {
    {"--preset", G_OTHER, G_BOTH, 0, 0, 0},
    {"--arch", G_OTHER, G_LLAMA, 0, 0, 0},
    {"--dtype", G_OTHER, G_BOTH, 0, 0, 0},
    {"--rope-scaling", G_OTHER, G_LLAMA, 0, 0, 0},
    {"--out", G_OTHER, G_BOTH, 0, 0, 0},
    {"--tokenizer", G_OTHER, G_BOTH, 0, 0, 0},
    {"--layers", G_INT, G_BOTH, F(layers), 1, 4096},
    {"--hidden", G_INT, G_BOTH, F(hidden), 1, 1 << 20},
    {"--heads", G_INT, G_BOTH, F(heads), 1, 4096},
    {"--kv-heads", G_INT, G_LLAMA, F(kv_heads), 1, 4096},
    {"--head-dim", G_INT, G_LLAMA, F(head_dim), 2, 1 << 16},
    {"--inner", G_INT, G_BOTH, F(inner), 1, 1 << 22},
    {"--vocab", G_INT, G_BOTH, F(vocab), 1, 1 << 24},
    {"--context", G_INT, G_BOTH, F(context), 1, 1 << 24},
    {"--eps", G_DBL, G_BOTH, F(norm_eps), 0, 1},
    {"--rope-theta", G_DBL, G_LLAMA, F(rope_theta), 1.0, 1e12},
    {"--rope-factor", G_DBL, G_LLAMA, F(rope_factor), 1, 1e6},
    {"--rope-low-freq-factor", G_DBL, G_LLAMA, F(rope_low_freq_factor), 1e-6, 1e6},
    {"--rope-high-freq-factor", G_DBL, G_LLAMA, F(rope_high_freq_factor), 1e-6, 1e6},
    {"--rope-original-context", G_INT, G_LLAMA, F(rope_original_context), 1, 1 << 24},
    {"--sliding-window", G_INT, G_LLAMA, F(sliding_window), 0, 1 << 24},
    {"--bos", G_I32, G_BOTH, F(bos_token_id), 0, 1 << 24},
    {"--eos", G_I32, G_BOTH, F(eos_token_id), 0, 1 << 24},
    {"--std", G_DBL, G_BOTH, F(std), 0, 1e3},
    {"--qk-std", G_DBL, G_BOTH, F(qk_std), 0, 1e3},
    {"--norm-std", G_DBL, G_BOTH, F(norm_std), 0, 1e3},
    {"--bias-std", G_DBL, G_BOTH, F(bias_std), 0, 1e3},
    {"--seed", G_U64, G_BOTH, F(seed), 0, 0},
    {"--shards", G_INT, G_BOTH, F(shards), 1, 99999},
    {"--tie", G_ON, G_BOTH, F(tie_embeddings), 0, 0},
    {"--no-tie", G_OFF, G_BOTH, F(tie_embeddings), 0, 0},
    {"--no-prefix", G_ON, G_GPT2, F(gpt2_no_prefix), 0, 0},
    {"--old-buffers", G_ON, G_GPT2, F(gpt2_old_buffers), 0, 0},
};
#undef F

static const gen_flag *gen_find(const char *f)
{
    for (size_t k = 0; k < sizeof gen_flags / sizeof gen_flags[0]; k++)
        if (!strcmp(gen_flags[k].flag, f))
            return &gen_flags[k];
    return NULL;
}

/* One decoder flag: f (without "=value") and its value v (NULL for a switch). */
static int gen_apply(pe_gen_spec *sp, const gen_flag *g, const char *v, const char **out,
                     char *msg, size_t len)
{
    char *field = (char *)sp + g->off;
    long x;
    double d;
    if (g->kind == G_ON || g->kind == G_OFF) {
        *(int *)field = g->kind == G_ON;
        return 0;
    }
    if (g->kind == G_INT || g->kind == G_I32) {
        if (cli_parse_long(g->flag, v, (long)g->lo, (long)g->hi, &x, msg, len))
            return -1;
        if (g->kind == G_INT)
            *(int *)field = (int)x;
        else
            *(int32_t *)field = (int32_t)x;
        return 0;
    }
    if (g->kind == G_U64)
        return cli_parse_u64(g->flag, v, (uint64_t *)field, msg, len);
    if (g->kind == G_DBL) {
        if (cli_parse_double(g->flag, v, g->lo, g->hi, &d, msg, len))
            return -1;
        *(double *)field = d;
        return 0;
    }
    if (!strcmp(g->flag, "--dtype")) {
        if (!strcmp(v, "f32") || !strcmp(v, "fp32")) sp->dtype = PE_DTYPE_FP32;
        else if (!strcmp(v, "bf16")) sp->dtype = PE_DTYPE_BF16;
        else {
            snprintf(msg, len, "unknown dtype '%s'; use --dtype f32 or --dtype bf16", v);
            return -1;
        }
    } else if (!strcmp(g->flag, "--rope-scaling")) {
        if (!strcmp(v, "none")) sp->rope_scaling = PE_GEN_ROPE_NONE;
        else if (!strcmp(v, "linear")) sp->rope_scaling = PE_GEN_ROPE_LINEAR;
        else if (!strcmp(v, "llama3")) sp->rope_scaling = PE_GEN_ROPE_LLAMA3;
        else {
            snprintf(msg, len, "unknown rope scaling '%s'; use --rope-scaling none, linear or "
                     "llama3", v);
            return -1;
        }
    } else if (!strcmp(g->flag, "--out")) {
        if (!*v) {
            snprintf(msg, len, "--out is empty; give the model directory, e.g. --out tiny-llama");
            return -1;
        }
        *out = v;
    }
    return 0; /* --preset, --arch and --tokenizer were read before */
}

/* The value of flag i ("--flag value" or "--flag=value"); NULL with msg set if missing. */
static const char *gen_value(int argc, char **argv, int *i, const gen_flag *g, char *msg,
                             size_t len)
{
    const char *eq = strchr(argv[*i], '=');
    if (eq)
        return eq + 1;
    if (g->kind == G_ON || g->kind == G_OFF)
        return "";
    if (*i + 1 >= argc) {
        snprintf(msg, len, "%s needs a value; see pengine --help", g->flag);
        return NULL;
    }
    return argv[++*i];
}

static int gen_decoder(int argc, char **argv, int llama)
{
    char msg[CLI_MSG_LEN], name[64];
    const char *kind = argv[1], *preset = "tiny", *out = NULL, *tokenizer = NULL;
    pe_gen_arch arch = llama ? PE_GEN_LLAMA : PE_GEN_GPT2;
    /* pass 1: the flags' names and values, the preset and the architecture */
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            cli_usage(stdout);
            return CLI_OK;
        }
        size_t n = strcspn(argv[i], "=");
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), argv[i]);
        const gen_flag *g = gen_find(name);
        if (!g) {
            snprintf(msg, sizeof msg, "unknown flag '%s' for gen %s; see pengine --help", name,
                     kind);
            return gen_usage_error(msg);
        }
        if ((g->family == G_GPT2 && llama) || (g->family == G_LLAMA && !llama)) {
            snprintf(msg, sizeof msg, "%s is not a flag of gen %s (it is gen %s's); see "
                     "pengine --help", name, kind, llama ? "gpt2" : "llama");
            return gen_usage_error(msg);
        }
        if ((g->kind == G_ON || g->kind == G_OFF) && strchr(argv[i], '=')) {
            snprintf(msg, sizeof msg, "%s takes no value; write it alone", name);
            return gen_usage_error(msg);
        }
        const char *v = gen_value(argc, argv, &i, g, msg, sizeof msg);
        if (!v)
            return gen_usage_error(msg);
        if (!strcmp(name, "--preset"))
            preset = v;
        else if (!strcmp(name, "--tokenizer")) {
            if (!*v)
                return gen_usage_error("--tokenizer is empty; give a tokenizer.json, e.g. "
                                       "--tokenizer llama2/tokenizer.json");
            tokenizer = v;
        } else if (!strcmp(name, "--arch")) {
            if (!strcmp(v, "llama")) arch = PE_GEN_LLAMA;
            else if (!strcmp(v, "mistral")) arch = PE_GEN_MISTRAL;
            else if (!strcmp(v, "qwen2")) arch = PE_GEN_QWEN2;
            else {
                snprintf(msg, sizeof msg, "unknown architecture '%s'; use --arch llama, mistral "
                         "or qwen2", v);
                return gen_usage_error(msg);
            }
        }
    }
    pe_gen_spec spec;
    if (pe_gen_init(&spec, arch, preset) != PE_OK) {
        snprintf(msg, sizeof msg, "%s (--preset)", pe_last_error());
        return gen_usage_error(msg);
    }
    /* pass 2: every other flag overrides the preset */
    int vocab_set = 0, bos_set = 0, eos_set = 0;
    for (int i = 2; i < argc; i++) {
        size_t n = strcspn(argv[i], "=");
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), argv[i]);
        const gen_flag *g = gen_find(name);
        const char *v = gen_value(argc, argv, &i, g, msg, sizeof msg);
        if (gen_apply(&spec, g, v, &out, msg, sizeof msg))
            return gen_usage_error(msg);
        vocab_set |= !strcmp(name, "--vocab");
        bos_set |= !strcmp(name, "--bos");
        eos_set |= !strcmp(name, "--eos");
    }
    if (arch == PE_GEN_GPT2 && vocab_set) { /* GPT-2's ids are the last token of the vocab */
        if (!bos_set)
            spec.bos_token_id = spec.vocab - 1;
        if (!eos_set)
            spec.eos_token_id = spec.vocab - 1;
    }
    if (!out) {
        snprintf(msg, sizeof msg, "--out is missing; give the model directory, e.g. pengine gen "
                 "%s --preset tiny --out tiny-%s", kind, kind);
        return gen_usage_error(msg);
    }
    if (tokenizer) {
        int rc = gen_fit_tokenizer(&spec, tokenizer, vocab_set, bos_set, eos_set);
        if (rc != CLI_OK)
            return rc;
    }
    pe_status s = pe_gen_write(&spec, out);
    if (s != PE_OK)
        return gen_failed(s, "--out");
    return tokenizer ? gen_copy_tokenizer(tokenizer, out) : CLI_OK;
}

int cli_gen(int argc, char **argv)
{
    char msg[CLI_MSG_LEN];
    const char *kind = argc < 2 ? "" : argv[1];
    if (!strcmp(kind, "mlp"))
        return gen_mlp(argc, argv);
    if (!strcmp(kind, "gpt2") || !strcmp(kind, "llama"))
        return gen_decoder(argc, argv, !strcmp(kind, "llama"));
    snprintf(msg, sizeof msg, "unknown model kind '%s' for gen; use pengine gen mlp, gen gpt2 or "
             "gen llama, e.g. pengine gen llama --preset tiny --out tiny-llama", kind);
    return gen_usage_error(msg);
}
