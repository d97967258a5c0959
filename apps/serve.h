/* serve.h: "pengine serve": an OpenAI-compatible HTTP server over one engine.
 *
 * The rooms:
 *   serve.c          the flags, opening the model, the life cycle (signals, draining);
 *   serve_http.c     libmicrohttpd: bodies, routes, the API key, error responses;
 *   serve_parse.c    a request's JSON checked into a serve_job (prompt ids, sampling, stops);
 *   serve_seq.c      sequences: the event pump thread and each request's event queue;
 *   serve_reply.c    the answers: one JSON, or server-sent events streamed as tokens come;
 *   serve_metrics.c  counters and histograms, written in Prometheus' text format;
 *   serve_tokenize.c /tokenize and /detokenize: the server's tokenizer, for clients;
 *   serve_echo.c     "echo": a completion's prompt and its tokens' logprobs, first.
 *
 * Threads: libmicrohttpd runs a thread per connection, which may block on its request's
 * queue; one pump thread takes every token event of the engine (pe_seq_wait) and hands it to
 * its request (ev.user).
 */
#ifndef PE_APPS_SERVE_H
#define PE_APPS_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "args.h"
#include "chat_template.h"
#include "pengine/pengine.h"
#include "text_stream.h"

/* argv[0] is "serve". Serves until SIGINT or SIGTERM. Returns the exit code. */
int cli_serve(int argc, char **argv);

typedef struct serve_opts {
    cli_options dev;           /* --model, --gpus, --dp/--pp/--tp, --backend, ... */
    cli_chat_flags talk;       /* --model (into dev), --tokenizer, --chat-template */
    const char *host;          /* --host, default 127.0.0.1 */
    int port;                  /* --port, default 8080; 0: any free port (printed) */
    const char *api_key;       /* --api-key: /v1/ needs "Authorization: Bearer KEY" */
    size_t max_body;           /* --max-body BYTES, default 1 MiB */
    const char *model_name;    /* --model-name: the id /v1/models shows (default: the
                                * model directory's last part) */
} serve_opts;

/* ---- metrics (serve_metrics.c) -------------------------------------------------------- */

#define SERVE_HIST_BUCKETS 14

typedef struct serve_hist {
    long counts[SERVE_HIST_BUCKETS + 1]; /* per bucket (not cumulative); the last: +Inf */
    double sum;
    long n;
} serve_hist;

/* The figures, copied out under the lock for a scrape. */
typedef struct serve_counts {
    long by_status[8];         /* responses by status, in the order of serve_metrics.c */
    long prompt_tokens, generated_tokens;
    long running;              /* sequences submitted, final event not yet taken */
    long waiting;              /* ... of them without their first token (queued, prefill) */
    long http_active;          /* requests being received or answered */
    serve_hist ttft;           /* seconds from submit to the first token */
    serve_hist tpot;           /* seconds between two tokens of a sequence */
    size_t kv_blocks;          /* blocks in each worker's KV pool */
} serve_counts;

typedef struct serve_metrics {
    pthread_mutex_t mu;
    serve_counts c;
} serve_metrics;

void serve_metrics_init(serve_metrics *m, size_t kv_blocks);
void serve_metrics_free(serve_metrics *m);
void serve_metrics_status(serve_metrics *m, unsigned status);
/* Counts x in h (its metrics' mu held). */
void serve_hist_add(serve_hist *h, double x);
/* The text of GET /metrics (malloc'ed; NULL when out of memory). */
char *serve_metrics_text(serve_metrics *m, const pe_engine_info *info);

/* ---- the server ------------------------------------------------------------------------ */

typedef struct serve_pump {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long outstanding;          /* sequences submitted (or being submitted), no final event */
    int stop;
    int started;
} serve_pump;

typedef struct serve_server {
    const serve_opts *o;
    pe_engine *e;
    pe_tokenizer *tk;
    pe_grammar *json_grammar;      /* JSON mode over tk's tokens ("response_format") */
    pe_model_info m;
    const cli_chat_template *chat; /* NULL: the model has none; chat completions answer 400 */
    int32_t chat_end_id;           /* the template's end-of-turn token, a stop id */
    char model_id[256];
    serve_pump pump;
    serve_metrics metrics;
    atomic_int draining;           /* a signal came: new requests are answered 503 */
    atomic_ulong next_id;          /* for the response ids */
    pthread_mutex_t mu;            /* active, with idle */
    pthread_cond_t idle;
    long active;                   /* requests and streams not finished (draining waits) */
    struct MHD_Daemon *daemon;
} serve_server;

/* active + 1; and - 1, waking the drain when it reaches 0 */
void serve_enter(serve_server *s);
void serve_leave(serve_server *s);

/* ---- HTTP (serve_http.c) -------------------------------------------------------------- */

/* Starts libmicrohttpd on o->host:o->port; *port is the port bound. Returns the exit code
 * (printed on failure). */
int serve_http_start(serve_server *s, int *port);
/* Stops accepting connections (the listening socket is closed). */
void serve_http_quiesce(serve_server *s);
/* Closes every connection and joins the threads (after the requests have finished). */
void serve_http_stop(serve_server *s);

/* An error body as OpenAI writes it: {"error": {"message", "type", "param", "code"}}
 * (malloc'ed). type and code from the status. */
char *serve_error_json(unsigned status, const char *message);

/* ---- the chat page (serve_page.c) -------------------------------------------------------- */

/* The HTML of GET / (apps/serve_page.html, compiled in; static, not NUL-terminated): its
 * bytes, *len of them. */
const char *serve_page_html(size_t *len);

/* ---- a request (serve_parse.c) ---------------------------------------------------------- */

/* Most choices a request may ask for: its prompts times "n" (OpenAI takes n up to 128). */
#define SERVE_MAX_CHOICES 64

typedef struct serve_prompt {
    int32_t *ids;              /* (len) with the tokenizer's BOS (malloc'ed) */
    size_t len;
    /* "echo" (serve_echo_prepare): what the answer repeats of it before its choices' text */
    char *text;                /* the prompt string as given, or its ids' text (malloc'ed) */
    pe_logprobs *lp;           /* with logprobs: (len - 1) tokens 1.. of ids under the model
                                * (token 0 has none) (malloc'ed); else NULL */
} serve_prompt;

typedef struct serve_job {
    int chat;                  /* /v1/chat/completions (else /v1/completions) */
    int stream;                /* "stream": true */
    int include_usage;         /* "stream_options": {"include_usage": true} */
    int return_ids;            /* "return_token_ids": true (extension, as vLLM's) */
    int ignore_eos;            /* "ignore_eos": true (extension, as vLLM's): eos ends nothing */
    int include_stop;          /* "include_stop_str_in_output" (vLLM's): the text keeps the
                                * stop string that ended it */
    int logprobs;              /* -1: none; else each token's log-probability and this many
                                * of the most likely ("logprobs"; a chat's "top_logprobs") */
    int echo;                  /* "echo" (completions): each choice's text, and logprobs,
                                * begin with its prompt's */
    serve_prompt *prompts;     /* (nprompts): a chat's one, a completion's one or more
                                * (malloc'ed) */
    int nprompts;
    int n;                     /* "n": choices per prompt; choice c answers prompt c / n with
                                * the seed + c % n */
    int max_tokens;
    int min_tokens;            /* "min_tokens" (an extension, as vLLM's) */
    pe_sampling sampling;
    pe_logit_bias bias[PE_MAX_LOGIT_BIAS]; /* "logit_bias" */
    size_t nbias;
    char *stops[CLI_MAX_STOP_STR]; /* text stop strings (malloc'ed) */
    int nstops;
    int32_t stop_ids[PE_MAX_STOP]; /* stop tokens: the chat's end of turn, one-token stops */
    size_t nstop_ids;
    int json_object;           /* "response_format": {"type": "json_object"}: JSON mode */
    pe_grammar *grammar;       /* a schema's (response_format json_schema, guided_json), a
                                * regex's or choices' (guided_regex, guided_choice, or
                                * structured_outputs'), over json_grammar's table;
                                * serve_seq_start takes it from the job */
} serve_job;

/* Parses and checks body (len bytes) for the route (chat or not) into j. Returns 0, or the
 * HTTP status (400, or 500 when out of memory) with msg set; j is freed either way on
 * failure. */
unsigned serve_parse(const serve_server *s, int chat, const char *body, size_t len,
                     serve_job *j, char *msg, size_t msg_len);
void serve_job_free(serve_job *j);
void serve_prompts_free(serve_prompt *p, int n);

/* A /tokenize body: "prompt" (a string; "add_special_tokens", default true, adds the
 * tokenizer's BOS as a completion's prompt has it) or "messages" (a chat's prompt, rendered
 * as /v1/chat/completions renders it) into *ids (malloc'ed, *n of them). Returns 0, or the
 * HTTP status with msg set. */
unsigned serve_parse_tokenize(const serve_server *s, const char *body, size_t len,
                              int32_t **ids, size_t *n, char *msg, size_t msg_len);

/* ---- tokenizing (serve_tokenize.c) --------------------------------------------------------- */

/* POST /tokenize: {"count", "max_model_len", "tokens"} (vLLM's), or an error; *status set.
 * POST /detokenize: {"tokens": [ids]} -> {"prompt": text}. Bodies malloc'ed. */
char *serve_tokenize(const serve_server *s, const char *body, size_t len, unsigned *status);
char *serve_detokenize(const serve_server *s, const char *body, size_t len, unsigned *status);

/* ---- echo (serve_echo.c) ---------------------------------------------------------------- */

/* j->echo: each prompt's text (the ids' decode, special tokens shown, where no string was
 * given) and, with logprobs, its tokens' log-probabilities (pe_score_logprobs). Returns 0,
 * or the HTTP status (503 when the KV cache has no room now, 400, 500) with msg set. */
unsigned serve_echo_prepare(serve_server *s, serve_job *j, char *msg, size_t msg_len);

/* ---- sequences (serve_seq.c) ------------------------------------------------------------ */

/* A token's log-probability and the most likely tokens' at its place (a request with
 * logprobs). */
typedef struct serve_logprobs {
    float logprob;
    int ntop;                  /* entries of top and top_logprob, most likely first */
    int32_t top[PE_MAX_LOGPROBS];
    float top_logprob[PE_MAX_LOGPROBS];
} serve_logprobs;

typedef struct serve_ev {
    int choice;                /* the request's choice (sequence) it belongs to */
    int32_t token;             /* -1: no token (CANCELLED, ERROR) */
    pe_finish finish;
    pe_status status;
    serve_logprobs lp;         /* the job asked for logprobs */
} serve_ev;

typedef struct serve_seq serve_seq;

/* Starts the pump thread. Returns the exit code (printed). */
int serve_pump_start(serve_server *s);
/* Waits until no sequence is outstanding, then stops and joins the pump. */
void serve_pump_stop(serve_server *s);

/* Submits j's sequences, one per choice (j->nprompts x j->n), taking j->grammar (the request
 * frees it once its sequences have ended). Returns 0 with *out, or the HTTP status (400 for
 * parameters the engine refuses, 503 when it cannot take more, 500) with msg set; then none
 * of them runs on. */
unsigned serve_seq_start(serve_server *s, serve_job *j, serve_seq **out, char *msg,
                         size_t msg_len);
/* Watches the request's connection fd while serve_seq_next waits: a client gone cancels. */
void serve_seq_watch(serve_seq *q, int fd);
/* The request's next event, of any of its choices, waiting for it. After every choice's
 * final event: the last one again. */
void serve_seq_next(serve_seq *q, serve_ev *ev);
/* Asks the engine to end every choice's sequence (their final events still come). */
void serve_seq_cancel(serve_seq *q);
/* ... the sequence of one choice. */
void serve_seq_cancel_choice(serve_seq *q, int choice);
/* Cancels the sequences not ended, waits for their final events, and frees q. NULL is ok. */
void serve_seq_close(serve_seq *q);

/* ---- answers (serve_reply.c) ------------------------------------------------------------ */

/* What the answer says besides the text: its id, the time and the route. */
typedef struct serve_reply_head {
    char id[48];
    long created;              /* seconds since the epoch */
    int chat;
    const char *model;
} serve_reply_head;

/* Runs q to its end and closes it; *status and the body (malloc'ed) to send. */
char *serve_reply_whole(serve_server *s, const serve_job *j, serve_seq *q, unsigned *status);

/* A streamed answer: state for serve_reply_read (owned: freed by serve_reply_stream_free,
 * which closes q). NULL when out of memory (q is closed then). */
typedef struct serve_stream serve_stream;
serve_stream *serve_reply_stream_new(serve_server *s, const serve_job *j, serve_seq *q);
/* libmicrohttpd's content reader: the next bytes of server-sent events (blocks for tokens). */
ssize_t serve_reply_read(void *cls, uint64_t pos, char *buf, size_t max);
void serve_reply_stream_free(void *cls);

#endif
