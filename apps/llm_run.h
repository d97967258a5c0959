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
/* The same with decode_groups steps in flight per replica (0: one per stage; 1: naive) and
 * trace_events kept per worker (0: no trace). */
int cli_llm_open_with(const cli_options *o, int decode_groups, size_t trace_events,
                      pe_engine **out);

/* Called for every event as it arrives (e.g. to stream the tokens); may be NULL. Returns 1
 * to end sequence seq at this event (its text holds a stop string): the batch cancels it,
 * keeps none of its later tokens, calls no more for it, and reports it finished by
 * PE_FINISH_STOP. Returns 0 otherwise. */
typedef int (*cli_on_event)(void *ctx, int seq, const pe_token_event *ev);

typedef struct cli_batch {
    int n;                    /* sequences */
    const int32_t *const *prompts;
    const size_t *lens;
    int max_tokens;
    int min_tokens;           /* no eos or stop token before this many (pe_seq_params) */
    pe_sampling sampling;     /* sequence i uses seed sampling.seed + i */
    int logprobs;
    int ignore_eos;
    const int32_t *stop;
    size_t nstop;
    const pe_grammar *grammar; /* structured output (pe_seq_params.grammar); NULL: none */
    cli_on_event on_event;
    void *ctx;
    /* results, (n) each */
    int32_t **tokens;         /* (n, max_tokens) generated ids */
    int *ntok;
    pe_token_event **events;  /* (n, max_tokens) the token events (logprobs) */
    pe_finish *finish;
    pe_status *status;
    int *stopped;             /* on_event ended it (finish PE_FINISH_STOP) */
    double t0;                /* ms: when the first sequence was submitted */
    double **t_tok;           /* (n, max_tokens) ms: when each token's event arrived */
} cli_batch;

/* Allocates the result arrays of b (n and max_tokens set). Returns the exit code. */
int cli_batch_alloc(cli_batch *b);
void cli_batch_free(cli_batch *b);
/* An untimed run of one sequence of b's first prompt for 2 tokens: pages, caches and the
 * pools' threads warmed before a timed run. Returns the exit code. */
int cli_batch_warmup(pe_engine *e, const cli_batch *b);
/* b: like's batch again on e (prompts, lengths, tokens, sampling), with results of its own
 * (freed by cli_batch_free also on failure), after an untimed warm-up when warmup is
 * nonzero; e's trace is cleared before the timed run. Returns the exit code. */
int cli_batch_rerun(pe_engine *e, const cli_batch *like, int warmup, cli_batch *b);
/* Submits every sequence and takes every event until each has ended. Returns CLI_OK, or
 * CLI_RUNTIME (printed) when a submit fails or a sequence ends with an error. */
int cli_batch_run(pe_engine *e, cli_batch *b);

/* The rates of a finished batch, from the client's arrival times of the token events.
 * last_first is when the last sequence got its first token: every prompt is prefilled by
 * then. The decode phase runs from last_first to the batch's last token; tokens and gaps
 * before it came while prompts were still being prefilled and are not counted. */
typedef struct cli_rates {
    double ttft_ms;           /* mean over the sequences of (first token - t0) */
    double prefill_tok_s;     /* prompt tokens / (last_first - t0) */
    double decode_ms;         /* mean gap between two consecutive tokens of a sequence, over
                               * the gaps inside the decode phase: one decode step when the
                               * batch decodes together */
    double decode_tok_s;      /* tokens that arrived after last_first, all sequences, / the
                               * decode phase's length */
    double wall_ms;           /* from t0 to the batch's last token */
    double tok_s;             /* generated / wall_ms: the batch's throughput */
    long prompt_tokens, generated;
    long spec_drafted, spec_accepted; /* the engine's drafts and accepted ones (--spec-tokens),
                               * set by cli_spec_counts */
} cli_rates;
void cli_batch_rates(const cli_batch *b, cli_rates *out);
/* Sets out's draft counts from e's (pe_engine_info), and prints them on stderr when `print`
 * and there were drafts. */
void cli_spec_counts(pe_engine *e, int print, cli_rates *out);

const char *cli_finish_name(pe_finish f);

#endif
