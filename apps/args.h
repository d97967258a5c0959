/* args.h: the pengine command line, parsed into a cli_options struct; exit codes; errors. */
#ifndef PE_APPS_ARGS_H
#define PE_APPS_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pengine/pengine.h"

/* Exit codes of the command. */
enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

#define CLI_MAX_DEVICES 64 /* pe_engine_info keeps pp + 1 <= 64 stage boundaries */
#define CLI_MSG_LEN 768

typedef enum cli_mode { CLI_MODE_NONE = 0, CLI_MODE_DP, CLI_MODE_TP, CLI_MODE_PP } cli_mode;

typedef struct cli_options {
    cli_mode mode;             /* the demo that runs (from --mode, or from the grid) */
    int ndevices;              /* --gpus entries; 0 = not given */
    int devices[CLI_MAX_DEVICES];
    int dp, pp, tp;            /* the grid; after cli_parse, dp * pp * tp == ndevices */
    const char *model_path;    /* --model, NULL = the demo's generated model */
    int mlp;                   /* --mlp: an MLP demo on its generated MLP (no --model) */
    int model_generated;       /* model_path was written for this run (no --model given) */
    size_t batch;              /* rows per request; 0 = the demo's default */
    int microbatches;          /* --microbatches, 0 = the demo's default */
    pe_schedule schedule;      /* --schedule, when schedule_set */
    int schedule_set;
    pe_tp_embedding tp_embedding; /* --tp-embedding, default vocab-parallel */
    int nsplit;                /* --split entries, 0 = balanced by FLOPs */
    int split[CLI_MAX_DEVICES];
    int iters, warmup;         /* timed iterations (default 100) and warm-up (default 10) */
    uint64_t seed;             /* model and input seed, default 1 */
    pe_backend_kind backend;   /* --backend, default auto */
    pe_dtype dtype;            /* --dtype, default fp32 */
    int threads;               /* --threads: cores per host device, 0 = an even share */
    int json;                  /* --json: one JSON object on stdout, nothing else */
    const char *trace_path;    /* --trace FILE, NULL = none */
    int verify;                /* 1 (default) = compare against a reference run (verify.h) */
    int topology;              /* --topology: print the machine and the core plan */
    size_t kv_tokens;          /* --kv-tokens: a decoder replica's KV pool, 0 = default */
    int max_seqs;              /* serve --max-seqs: pe_config.max_seqs, 0 = the engine's */
    int max_step_tokens;       /* serve --max-step-tokens: its namesake in pe_config, 0 = ditto */
    int spec_tokens;           /* --spec-tokens: pe_config.spec_tokens (0: no drafts) */
    int spec_ngram;            /* --spec-ngram: pe_config.spec_ngram_max, 0 = the engine's */
    int spec_max_seqs;         /* --spec-max-seqs: pe_config.spec_max_seqs, 0 = any batch */
    int prompt_len;            /* --prompt-len: the decoder demo's prompts (default 32) */
    int max_tokens;            /* --max-tokens: the decoder demo's generated tokens (32) */
    const char *mlp_only_flag;     /* the first flag given that only the MLP demos use */
    const char *decoder_only_flag; /* the first flag given that only the decoder demo uses */
    int help, version;
} cli_options;

/* Parses argv (without the "gen" subcommand) into o and checks that the flags fit
 * together (grid product, --split count). Returns CLI_OK, or CLI_USAGE with a one-line
 * "<problem>; <fix>" in msg. */
int cli_parse(int argc, char **argv, cli_options *o, char *msg, size_t msg_len);

/* Refuses a flag that the demo about to run would ignore: an MLP demo's (--iters,
 * --microbatches, --schedule) for the decoder demo (decoder = 1), the decoder demo's
 * (--prompt-len, --max-tokens, --kv-tokens) for an MLP demo, and --mlp with a decoder
 * directory. Returns CLI_OK, or CLI_USAGE with the error printed. */
int cli_check_demo_flags(const cli_options *o, int decoder);

/* The options before any flag. */
void cli_default_options(cli_options *o);
/* Applies one device flag (--gpus, --backend, --dtype, --threads, --kv-tokens, --dp, --pp,
 * --tp) to o, for subcommands. Returns 1 when flag is one of them (0 otherwise), -1 with msg on a bad
 * value. */
int cli_apply_device_flag(cli_options *o, const char *flag, const char *value, char *msg,
                          size_t msg_len);

/* One flag of a subcommand with its value, applied to the subcommand's options ctx:
 * CLI_OK, or an exit code with msg set. */
typedef int (*cli_flag_fn)(void *ctx, const char *flag, const char *value, char *msg,
                           size_t msg_len);
/* A flag without a value that sets an int. */
typedef struct cli_switch {
    const char *name;
    int *on;
} cli_switch;
/* The flags of subcommand cmd (generate, chat, serve): --help prints the usage; each of
 * switches (n_switches) sets its int; each of with_value (n_values) takes the next argument,
 * given to apply_value; anything else is a usage error naming it. Returns CLI_OK, -1 after
 * --help, or the exit code of an error (printed). */
int cli_parse_subcommand(int argc, char **argv, const char *cmd,
                         const char *const *with_value, size_t n_values,
                         const cli_switch *switches, size_t n_switches,
                         cli_flag_fn apply_value, void *ctx);

/* The decoder subcommands' grid (generate, chat): --dp/--pp/--tp over --gpus (default: a
 * replica per listed device; without --gpus, the grid's devices all on device 0). Returns
 * 0, or -1 with msg set. */
int cli_decoder_grid(cli_options *o, char *msg, size_t msg_len);
/* Parses a device list "0,1,3" into ids (at most max). Returns 0, or -1 with msg set. */
int cli_parse_int_list(const char *flag, const char *s, int *ids, int max, int min_value,
                       int *n, char *msg, size_t msg_len);

/* Parses a token id list "1,2,3" into ids (at most max): integers from 0 to 2^31 - 1 (the
 * vocabulary is checked by the library). Returns 0, or -1 with msg set. */
int cli_parse_token_ids(const char *flag, const char *s, int32_t *ids, int max, int *n,
                        char *msg, size_t msg_len);

/* Strict number parsing: the whole string, in [lo, hi]. Return 0, or -1 with msg set. */
int cli_parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *msg,
                   size_t msg_len);
int cli_parse_u64(const char *flag, const char *s, uint64_t *out, char *msg, size_t msg_len);
int cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                     char *msg, size_t msg_len);

/* Prints "pengine: error: <msg>" as one line on stderr (newlines become spaces). */
/* The whole of a file, NUL-terminated (malloc'ed; *len bytes, len may be NULL); NULL with
 * errno set when it cannot be read (apps/file_read.c). */
char *cli_read_file(const char *path, size_t *len);

void cli_error(const char *msg);
void cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the --help text to out. */
void cli_usage(FILE *out);

const char *cli_mode_name(cli_mode m);
const char *cli_schedule_name(pe_schedule s);
const char *cli_backend_name(pe_backend_kind b);
const char *cli_dtype_name(pe_dtype d);

#endif
