/* generate.h: "pengine generate": one sequence from token ids or from text, or a batch of
 * text prompts, with the decoder's rates. generate.c parses the flags and runs token ids;
 * generate_text.c runs text. */
#ifndef PE_APPS_GENERATE_H
#define PE_APPS_GENERATE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "llm_run.h"
#include "pengine/pengine.h"
#include "text_stream.h"

/* argv[0] is "generate". Returns the exit code. */
int cli_generate(int argc, char **argv);

typedef struct gen_opts {
    cli_options dev;          /* --model, --gpus, --backend, --dtype, --threads, --kv-tokens */
    int32_t *ids;             /* --tokens: the prompt as ids */
    int nids;
    const char *prompt;       /* --prompt TEXT */
    const char *prompts_file; /* --prompts FILE: one prompt per line, run as one batch */
    const char *tokenizer;    /* --tokenizer FILE; NULL: the model directory's */
    int max_tokens;
    int min_tokens;           /* --min-tokens: no eos, stop id or stop string before these */
    pe_sampling sampling;
    int logprobs;
    int32_t stop_ids[PE_MAX_STOP]; /* --stop-ids */
    int nstop_ids;
    const char *stops[CLI_MAX_STOP_STR]; /* --stop: text stop strings */
    int nstops;
    int ignore_eos;
    const char *grammar;      /* --grammar json: the text follows it (structured output) */
    const char *schema;       /* --json-schema TEXT: ... or a JSON schema */
    const char *schema_file;  /* --json-schema-file FILE: ... the schema in a file */
    const char *regex;        /* --regex PATTERN: ... text that is one whole match */
    const char **choices;     /* --choice TEXT, once per text: ... exactly one of them
                               * (malloc'ed; the texts are argv's) */
    int nchoices;
    pe_grammar *json_mode;    /* JSON mode over the tokenizer (the base of the others) */
    pe_grammar *compiled;     /* the grammar the text follows (generate_text.c) */
    int json;
} gen_opts;

/* A decoder engine for g's model on g's devices (device 0 by default), failures printed.
 * Returns the exit code. */
int gen_open(gen_opts *g, pe_engine **e);
/* A batch of n prompts with g's sampling and stops, on_event called with ctx; allocated
 * (cli_batch_alloc). Returns the exit code. */
int gen_batch(const gen_opts *g, int n, const int32_t *const *prompts, const size_t *lens,
              cli_on_event on_event, void *ctx, cli_batch *b);
/* Adds to o the rates of a finished batch. */
void gen_json_rates(cJSON *o, const cli_rates *r);
/* Adds to o the tokens, the finish reason and the counts of sequence i of a finished batch;
 * gen_json_logprobs its log-probabilities (with --logprobs). */
void gen_json_sequence(cJSON *o, const cli_batch *b, int i);
void gen_json_logprobs(cJSON *o, const gen_opts *g, const cli_batch *b, int i);

/* The tokenizer: tokenizer (--tokenizer FILE), else model_dir's; a missing one is printed
 * with ids_hint appended to the fix (may be NULL). Returns the exit code. */
int gen_load_tokenizer(const char *tokenizer, const char *model_dir, const char *ids_hint,
                       pe_tokenizer **tk);
/* The model's vocabulary holds every id of tk (else printed, CLI_USAGE). */
int gen_check_vocab(const pe_model_info *m, const pe_tokenizer *tk);

/* The flag that gives g's grammar (--grammar, --json-schema, ...), or NULL: none. */
const char *gen_grammar_flag(const gen_opts *g);

/* Runs --prompt or --prompts (generate_text.c). Returns the exit code. */
int gen_run_text(gen_opts *g);

#endif
