/* llm_run.h: decoders from the command: an engine from the options, and a batch of
 * sequences run to their ends with the times the reports print (time to first token,
 * prefill and decode rates). */
#ifndef PE_APPS_LLM_RUN_H
#define PE_APPS_LLM_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "args.h"
#include "pengine/pengine.h"

/* Milliseconds on a monotonic clock. */
double cli_now_ms(void);

/* A host or CUDA engine for the decoder in o->model_path, on o's devices (dp = the number
 * of devices: one replica each). Failures are printed; returns the exit code. */
int cli_llm_open(const cli_options *o, pe_engine **out);

/* Called for every event as it arrives (e.g. to stream the tokens); may be NULL. */
typedef void (*cli_on_event)(void *ctx, int seq, const pe_token_event *ev);

typedef struct cli_batch {
    int n;                    /* sequences */
    const int32_t *const *prompts;
    const size_t *lens;
    int max_tokens;
    pe_sampling sampling;     /* sequence i uses seed sampling.seed + i */
    int logprobs;
    int ignore_eos;
    const int32_t *stop;
    size_t nstop;
    cli_on_event on_event;
    void *ctx;
    /* results, (n) each */
    int32_t **tokens;         /* (n, max_tokens) generated ids */
    int *ntok;
    pe_token_event **events;  /* (n, max_tokens) the token events (logprobs) */
    pe_finish *finish;
    pe_status *status;
    double t0;                /* ms: when the first sequence was submitted */
    double *t_first, *t_last; /* ms: each sequence's first and last token */
} cli_batch;

/* Allocates the result arrays of b (n and max_tokens set). Returns the exit code. */
int cli_batch_alloc(cli_batch *b);
void cli_batch_free(cli_batch *b);
/* Submits every sequence and takes every event until each has ended. Returns CLI_OK, or
 * CLI_RUNTIME (printed) when a submit fails or a sequence ends with an error. */
int cli_batch_run(pe_engine *e, cli_batch *b);

/* The rates of a finished batch. */
typedef struct cli_rates {
    double ttft_ms;           /* mean time to first token */
    double prefill_tok_s;     /* prompt tokens / the time until every first token */
    double decode_ms;         /* per token of a sequence after its first (the decode step) */
    double decode_tok_s;      /* tokens after the first, over the decode span, all sequences */
    long prompt_tokens, generated;
} cli_rates;
void cli_batch_rates(const cli_batch *b, cli_rates *out);

const char *cli_finish_name(pe_finish f);

#endif
