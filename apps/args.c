/* args.c: parses the pengine flags into cli_options and checks that they fit together. */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_job.h"

static int fail(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

int cli_parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *msg,
                   size_t msg_len)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return fail(msg, msg_len, "%s '%s' is not a whole number; give an integer from %ld to %ld",
                    flag, s, lo, hi);
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return fail(msg, msg_len, "%s '%s' is not a whole number; give an integer from %ld to %ld",
                    flag, s, lo, hi);
    if (errno == ERANGE || v < lo || v > hi)
        return fail(msg, msg_len, "%s %s is out of range; give an integer from %ld to %ld", flag,
                    s, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out, char *msg, size_t msg_len)
{
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return fail(msg, msg_len, "%s '%s' is not a non-negative integer; e.g. %s 42", flag,
                        s, flag);
    if (!*s)
        return fail(msg, msg_len, "%s is empty; give a non-negative integer, e.g. %s 42", flag,
                    flag);
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return fail(msg, msg_len, "%s %s does not fit in 64 bits; give a smaller integer", flag,
                    s);
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                     char *msg, size_t msg_len)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
        return fail(msg, msg_len, "%s '%s' is not a number; give a number from %g to %g", flag, s,
                    lo, hi);
    if (v < lo || v > hi)
        return fail(msg, msg_len, "%s %s is out of range; give a number from %g to %g", flag, s,
                    lo, hi);
    *out = v;
    return 0;
}

int cli_parse_int_list(const char *flag, const char *s, int *ids, int max, int min_value, int *n,
                       char *msg, size_t msg_len)
{
    *n = 0;
    if (!*s)
        return fail(msg, msg_len, "%s is empty; list integers separated by commas, e.g. %s 0,1",
                    flag, flag);
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return fail(msg, msg_len,
                        "%s '%s' has an empty entry; list integers separated by single commas, "
                        "e.g. %s 0,1",
                        flag, s, flag);
        char item[32];
        if (len >= sizeof item)
            return fail(msg, msg_len, "%s '%s': entry '%.*s...' is too long; use small integers",
                        flag, s, 20, p);
        memcpy(item, p, len);
        item[len] = '\0';
        const char *d = item[0] == '-' ? item + 1 : item;
        for (const char *q = d; *q; q++)
            if (!isdigit((unsigned char)*q))
                return fail(msg, msg_len,
                            "%s '%s': '%s' is not an integer; list integers separated by "
                            "commas, e.g. %s 0,1",
                            flag, s, item, flag);
        if (!*d)
            return fail(msg, msg_len, "%s '%s': '%s' is not an integer; e.g. %s 0,1", flag, s,
                        item, flag);
        long v = strtol(item, NULL, 10);
        if (v < min_value)
            return fail(msg, msg_len, "%s '%s': %ld is below %d; use integers >= %d, e.g. %s 0,1",
                        flag, s, v, min_value, min_value, flag);
        if (v > 1000000)
            return fail(msg, msg_len, "%s '%s': %ld is too large; use ids the backend has", flag,
                        s, v);
        if (*n == max)
            return fail(msg, msg_len, "%s '%s' has more than %d entries; list at most %d", flag, s,
                        max, max);
        ids[(*n)++] = (int)v;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

/* One token id of a --tokens or --stop list: digits only, below 2^31. */
static int parse_token_id(const char *flag, const char *list, const char *p, size_t len,
                          int32_t *id, char *msg, size_t msg_len)
{
    int shown = len > 20 ? 20 : (int)len;
    const char *more = len > 20 ? "..." : "";
    for (size_t k = 0; k < len; k++)
        if (!isdigit((unsigned char)p[k]))
            return fail(msg, msg_len,
                        "%s '%.40s%s': '%.*s%s' is not a token id; list ids (integers >= 0) "
                        "separated by commas, e.g. %s 1,2,3",
                        flag, list, strlen(list) > 40 ? "..." : "", shown, p, more, flag);
    long v = 0;
    for (size_t k = 0; k < len && v <= INT32_MAX; k++)
        v = v * 10 + (p[k] - '0');
    if (v > INT32_MAX)
        return fail(msg, msg_len,
                    "%s: token id %.*s%s is too large; give ids below the model's vocabulary "
                    "size (at most 2^31 - 1)",
                    flag, shown, p, more);
    *id = (int32_t)v;
    return 0;
}

int cli_parse_token_ids(const char *flag, const char *s, int32_t *ids, int max, int *n,
                        char *msg, size_t msg_len)
{
    *n = 0;
    if (!*s)
        return fail(msg, msg_len, "%s is empty; list token ids separated by commas, e.g. %s 1,2,3",
                    flag, flag);
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return fail(msg, msg_len,
                        "%s '%.40s%s' has an empty entry; list token ids separated by single "
                        "commas, e.g. %s 1,2,3",
                        flag, s, strlen(s) > 40 ? "..." : "", flag);
        if (*n == max)
            return fail(msg, msg_len, "%s has more than %d ids; give at most %d", flag, max, max);
        if (parse_token_id(flag, s, p, len, &ids[*n], msg, msg_len))
            return -1;
        (*n)++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* ---- the flag table ---------------------------------------------------------------------- */

/* The demos a flag is for: every one, the MLP demos only, or the decoder demo only. A flag
 * the demo that runs would ignore is refused (cli_check_demo_flags). */
typedef enum flag_use { FOR_ALL = 0, FOR_MLP, FOR_DECODER } flag_use;

typedef struct flag_def {
    const char *name;
    int takes_value;
    flag_use use;
} flag_def;

static const flag_def flags[] = {
    {"--mode", 1, FOR_ALL},        {"--gpus", 1, FOR_ALL},        {"--dp", 1, FOR_ALL},
    {"--pp", 1, FOR_ALL},          {"--tp", 1, FOR_ALL},          {"--model", 1, FOR_ALL},
    {"--batch", 1, FOR_ALL},       {"--microbatches", 1, FOR_ALL}, {"--schedule", 1, FOR_ALL},
    {"--split", 1, FOR_ALL},       {"--iters", 1, FOR_MLP},       {"--warmup", 1, FOR_ALL},
    {"--seed", 1, FOR_ALL},        {"--backend", 1, FOR_ALL},     {"--trace", 1, FOR_ALL},
    {"--json", 0, FOR_ALL},        {"--verify", 0, FOR_ALL},      {"--no-verify", 0, FOR_ALL},
    {"--topology", 0, FOR_ALL},    {"--help", 0, FOR_ALL},        {"-h", 0, FOR_ALL},
    {"--version", 0, FOR_ALL},     {"--dtype", 1, FOR_ALL},       {"--threads", 1, FOR_ALL},
    {"--kv-tokens", 1, FOR_DECODER}, {"--prompt-len", 1, FOR_DECODER},
    {"--max-tokens", 1, FOR_DECODER}, {"--mlp", 0, FOR_ALL},
    {"--tp-embedding", 1, FOR_DECODER},
};

static const flag_def *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

static int set_int(const char *flag, const char *v, long lo, long hi, int *out, char *msg,
                   size_t len)
{
    long x;
    if (cli_parse_long(flag, v, lo, hi, &x, msg, len))
        return -1;
    *out = (int)x;
    return 0;
}

/* Applies one flag with its value (NULL for switches). */
static int apply(cli_options *o, const char *f, const char *v, char *msg, size_t len)
{
    if (!strcmp(f, "--mode")) {
        if (!strcmp(v, "dp")) o->mode = CLI_MODE_DP;
        else if (!strcmp(v, "tp")) o->mode = CLI_MODE_TP;
        else if (!strcmp(v, "pp")) o->mode = CLI_MODE_PP;
        else return fail(msg, len, "unknown mode '%s'; use --mode dp, --mode tp or --mode pp", v);
    } else if (!strcmp(f, "--gpus")) {
        if (cli_parse_int_list("--gpus", v, o->devices, CLI_MAX_DEVICES, 0, &o->ndevices, msg,
                               len))
            return -1;
    } else if (!strcmp(f, "--dp")) {
        return set_int(f, v, 1, CLI_MAX_DEVICES, &o->dp, msg, len);
    } else if (!strcmp(f, "--pp")) {
        return set_int(f, v, 1, CLI_MAX_DEVICES - 1, &o->pp, msg, len);
    } else if (!strcmp(f, "--tp")) {
        return set_int(f, v, 1, CLI_MAX_DEVICES, &o->tp, msg, len);
    } else if (!strcmp(f, "--model")) {
        if (!*v)
            return fail(msg, len, "--model is empty; give a .safetensors file, e.g. one written "
                                  "by pengine gen mlp");
        o->model_path = v;
    } else if (!strcmp(f, "--batch")) {
        long x;
        if (cli_parse_long(f, v, 1, 1L << 20, &x, msg, len))
            return -1;
        o->batch = (size_t)x;
    } else if (!strcmp(f, "--microbatches")) {
        return set_int(f, v, 1, 4096, &o->microbatches, msg, len);
    } else if (!strcmp(f, "--schedule")) {
        if (!strcmp(v, "naive")) o->schedule = PE_SCHED_NAIVE;
        else if (!strcmp(v, "gpipe")) o->schedule = PE_SCHED_GPIPE;
        else if (!strcmp(v, "stream")) o->schedule = PE_SCHED_STREAM;
        else return fail(msg, len, "unknown schedule '%s'; use --schedule naive, gpipe or stream",
                         v);
        o->schedule_set = 1;
    } else if (!strcmp(f, "--tp-embedding")) {
        if (!strcmp(v, "vocab")) o->tp_embedding = PE_TP_EMBED_VOCAB;
        else if (!strcmp(v, "replicated")) o->tp_embedding = PE_TP_EMBED_REPLICATED;
        else return fail(msg, len, "unknown --tp-embedding '%s'; use vocab (split by vocabulary, "
                         "the default) or replicated (the whole table on every rank)", v);
    } else if (!strcmp(f, "--split")) {
        return cli_parse_int_list("--split", v, o->split, CLI_MAX_DEVICES, 1, &o->nsplit, msg,
                                  len);
    } else if (!strcmp(f, "--iters")) {
        return set_int(f, v, 1, 10000000, &o->iters, msg, len);
    } else if (!strcmp(f, "--warmup")) {
        return set_int(f, v, 0, 10000000, &o->warmup, msg, len);
    } else if (!strcmp(f, "--seed")) {
        return cli_parse_u64(f, v, &o->seed, msg, len);
    } else if (!strcmp(f, "--backend")) {
        if (!strcmp(v, "auto")) o->backend = PE_BACKEND_AUTO;
        else if (!strcmp(v, "host")) o->backend = PE_BACKEND_HOST;
        else if (!strcmp(v, "cuda")) o->backend = PE_BACKEND_CUDA;
        else return fail(msg, len, "unknown backend '%s'; use --backend auto, host or cuda", v);
    } else if (!strcmp(f, "--dtype")) {
        if (!strcmp(v, "fp32")) o->dtype = PE_DTYPE_FP32;
        else if (!strcmp(v, "bf16")) o->dtype = PE_DTYPE_BF16;
        else return fail(msg, len, "unknown dtype '%s'; use --dtype fp32 or bf16", v);
    } else if (!strcmp(f, "--threads")) {
        return set_int(f, v, 0, 256, &o->threads, msg, len);
    } else if (!strcmp(f, "--spec-tokens")) {
        return set_int(f, v, 0, PE_MAX_SPEC_TOKENS, &o->spec_tokens, msg, len);
    } else if (!strcmp(f, "--spec-ngram")) {
        return set_int(f, v, 1, 64, &o->spec_ngram, msg, len);
    } else if (!strcmp(f, "--spec-max-seqs")) {
        return set_int(f, v, 1, 1 << 16, &o->spec_max_seqs, msg, len);
    } else if (!strcmp(f, "--kv-tokens")) {
        long x;
        if (cli_parse_long(f, v, 1, 1L << 30, &x, msg, len))
            return -1;
        o->kv_tokens = (size_t)x;
    } else if (!strcmp(f, "--prompt-len")) {
        return set_int(f, v, 1, 1 << 20, &o->prompt_len, msg, len);
    } else if (!strcmp(f, "--max-tokens")) {
        return set_int(f, v, 1, 1 << 20, &o->max_tokens, msg, len);
    } else if (!strcmp(f, "--trace")) {
        if (!*v)
            return fail(msg, len, "--trace is empty; give a file name, e.g. --trace trace.json");
        o->trace_path = v;
    } else if (!strcmp(f, "--mlp")) {
        o->mlp = 1;
    } else if (!strcmp(f, "--json")) {
        o->json = 1;
    } else if (!strcmp(f, "--verify")) {
        o->verify = 1;
    } else if (!strcmp(f, "--no-verify")) {
        o->verify = 0;
    } else if (!strcmp(f, "--topology")) {
        o->topology = 1;
    } else if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
        o->help = 1;
    } else if (!strcmp(f, "--version")) {
        o->version = 1;
    }
    return 0;
}

/* Derives the grid from --mode and --dp/--pp/--tp and checks it against --gpus. */
static int resolve_grid(cli_options *o, char *msg, size_t len)
{
    int grid_given = o->dp || o->pp || o->tp;
    if (!o->mode && !grid_given && !o->mlp && o->ndevices)
        o->mode = CLI_MODE_DP; /* pengine [--model DIR] --gpus 0: one replica per device */
    if (!o->mode && !grid_given && o->model_path)
        return fail(msg, len, "no devices given for --model %s; add --gpus 0 (one device; "
                              "--gpus 0,1: one replica on each)", o->model_path);
    if (!o->mode && !grid_given)
        return fail(msg, len, "nothing to run; give a mode and devices, e.g. pengine %s--mode "
                              "pp --gpus 0,1 (see pengine --help)", o->mlp ? "--mlp " : "");
    if (o->ndevices == 0)
        return fail(msg, len, "no devices given; list them with --gpus, e.g. --gpus 0,1");
    if (!grid_given) {
        o->dp = o->mode == CLI_MODE_DP ? o->ndevices : 1;
        o->tp = o->mode == CLI_MODE_TP ? o->ndevices : 1;
        o->pp = o->mode == CLI_MODE_PP ? o->ndevices : 1;
    } else {
        if (!o->dp) o->dp = 1;
        if (!o->pp) o->pp = 1;
        if (!o->tp) o->tp = 1;
        long world = (long)o->dp * o->pp * o->tp;
        if (world != o->ndevices)
            return fail(msg, len,
                        "grid dp=%d x pp=%d x tp=%d needs %ld devices but --gpus lists %d; list "
                        "%ld device ids (they may repeat) or change --dp/--pp/--tp",
                        o->dp, o->pp, o->tp, world, o->ndevices, world);
        if (!o->mode)
            o->mode = o->pp > 1 ? CLI_MODE_PP : o->tp > 1 ? CLI_MODE_TP : CLI_MODE_DP;
    }
    if (o->nsplit && o->nsplit != o->pp)
        return fail(msg, len,
                    "--split lists %d stage size%s but the grid has pp=%d stage%s; give %d layer "
                    "counts, one per stage",
                    o->nsplit, o->nsplit == 1 ? "" : "s", o->pp, o->pp == 1 ? "" : "s", o->pp);
    return 0;
}

void cli_default_options(cli_options *o)
{
    memset(o, 0, sizeof *o);
    o->iters = 100;
    o->warmup = 10;
    o->seed = 1;
    o->backend = PE_BACKEND_AUTO;
    o->verify = 1;
}

int cli_apply_device_flag(cli_options *o, const char *flag, const char *value, char *msg,
                          size_t msg_len)
{
    static const char *const device_flags[] = {"--gpus", "--backend", "--dtype", "--threads",
                                               "--kv-tokens", "--dp", "--pp", "--tp",
                                               "--spec-tokens", "--spec-ngram",
                                               "--spec-max-seqs"};
    for (size_t i = 0; i < sizeof device_flags / sizeof device_flags[0]; i++)
        if (!strcmp(flag, device_flags[i]))
            return apply(o, flag, value, msg, msg_len) ? -1 : 1;
    return 0;
}

int cli_decoder_grid(cli_options *o, char *msg, size_t msg_len)
{
    const int procs = cli_mpi_procs(); /* each process of an MPI job lists its own devices */
    if (o->ndevices == 0) { /* device 0, or as many as the grid asks for */
        long world = (long)(o->dp ? o->dp : 1) * (o->pp ? o->pp : 1) * (o->tp ? o->tp : 1);
        if (procs > 1 && world % procs == 0)
            world /= procs;
        if (world > CLI_MAX_DEVICES)
            return fail(msg, msg_len, "the grid needs %ld devices, more than %d; give smaller "
                        "--dp/--pp/--tp", world, CLI_MAX_DEVICES);
        o->ndevices = (int)world;
        for (int i = 0; i < o->ndevices; i++)
            o->devices[i] = 0;
    }
    if (!o->dp && !o->pp && !o->tp) { /* a replica per device */
        o->dp = o->ndevices * procs;
        o->pp = o->tp = 1;
        return 0;
    }
    if (!o->dp) o->dp = 1;
    if (!o->pp) o->pp = 1;
    if (!o->tp) o->tp = 1;
    long world = (long)o->dp * o->pp * o->tp;
    if (procs > 1) /* the engine checks the job's devices and names the fix */
        return 0;
    if (world != o->ndevices)
        return fail(msg, msg_len,
                    "grid dp=%d x pp=%d x tp=%d needs %ld devices but --gpus lists %d; list "
                    "%ld device ids (they may repeat) or change --dp/--pp/--tp",
                    o->dp, o->pp, o->tp, world, o->ndevices, world);
    return 0;
}

int cli_parse(int argc, char **argv, cli_options *o, char *msg, size_t msg_len)
{
    cli_default_options(o);
    msg[0] = '\0';

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-') {
            fail(msg, msg_len, "unexpected argument '%s'; flags start with --, see pengine --help",
                 arg);
            return CLI_USAGE;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag_def *f = find_flag(arg, name_len);
        if (!f) {
            fail(msg, msg_len, "unknown flag '%.*s'; see pengine --help for the flags",
                 (int)name_len, arg);
            return CLI_USAGE;
        }
        const char *value = NULL;
        if (f->takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else {
                fail(msg, msg_len, "%s needs a value; e.g. %s %s", f->name, f->name,
                     !strcmp(f->name, "--gpus") ? "0,1" : "<value> (see pengine --help)");
                return CLI_USAGE;
            }
        } else if (eq) {
            fail(msg, msg_len, "%s takes no value; write just %s", f->name, f->name);
            return CLI_USAGE;
        }
        if (apply(o, f->name, value, msg, msg_len))
            return CLI_USAGE;
        const char **only = f->use == FOR_MLP ? &o->mlp_only_flag
                            : f->use == FOR_DECODER ? &o->decoder_only_flag : NULL;
        if (only && !*only)
            *only = f->name;
    }
    if (o->help || o->version)
        return CLI_OK;
    if (o->topology)
        return CLI_OK; /* --topology needs no grid; --gpus is optional */
    if (resolve_grid(o, msg, msg_len))
        return CLI_USAGE;
    return CLI_OK;
}

int cli_parse_subcommand(int argc, char **argv, const char *cmd,
                         const char *const *with_value, size_t n_values,
                         const cli_switch *switches, size_t n_switches, cli_flag_fn apply_value,
                         void *ctx)
{
    char msg[CLI_MSG_LEN];
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            cli_usage(stdout);
            return -1;
        }
        int is_switch = 0, known = 0;
        for (size_t k = 0; k < n_switches && !is_switch; k++)
            if (!strcmp(f, switches[k].name))
                *switches[k].on = is_switch = 1;
        if (is_switch)
            continue;
        for (size_t k = 0; k < n_values; k++)
            known |= !strcmp(f, with_value[k]);
        if (!known || i + 1 >= argc) {
            if (!known)
                cli_errorf("unknown flag '%s' for %s; see pengine --help", f, cmd);
            else
                cli_errorf("%s needs a value; see pengine --help", f);
            return CLI_USAGE;
        }
        int rc = apply_value(ctx, f, argv[++i], msg, sizeof msg);
        if (rc != CLI_OK) {
            cli_error(msg);
            return rc;
        }
    }
    return CLI_OK;
}

int cli_check_demo_flags(const cli_options *o, int decoder)
{
    if (decoder && o->mlp) {
        cli_errorf("--mlp runs an MLP demo but --model %s is a decoder directory; drop --mlp, "
                   "or give --model an MLP file (pengine gen mlp)", o->model_path);
        return CLI_USAGE;
    }
    if (decoder && o->mlp_only_flag && !o->model_path) {
        cli_errorf("%s is a flag of the MLP demos, not of the decoder demo (which runs "
                   "without --model); add --mlp for an MLP demo, or drop it", o->mlp_only_flag);
        return CLI_USAGE;
    }
    if (decoder && o->mlp_only_flag) {
        cli_errorf("%s is a flag of the MLP demos, not of the decoder demo (--model %s is a "
                   "decoder directory); drop it", o->mlp_only_flag, o->model_path);
        return CLI_USAGE;
    }
    if (!decoder && o->decoder_only_flag) {
        cli_errorf("%s is a flag of the decoder demo, not of the MLP demos; drop it, or run "
                   "the decoder demo (without --mlp; --model a decoder directory, e.g. one "
                   "written by pengine gen llama, or none)", o->decoder_only_flag);
        return CLI_USAGE;
    }
    return CLI_OK;
}
