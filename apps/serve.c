/* serve.c: "pengine serve": the flags, the model and its tokenizer opened, and the life
 * cycle: serve until SIGINT or SIGTERM, then stop accepting (new requests get 503, new
 * connections are refused), let the requests in flight finish, and exit 0.
 *
 * The signals are blocked in every thread (the engine's workers and libmicrohttpd's threads
 * inherit the mask) and taken by the main thread with sigwait: no handler runs in a thread
 * that holds a lock. */
#include "serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "mpi_job.h"

/* ---- flags --------------------------------------------------------------------------------- */

static int apply_flag(void *ctx, const char *f, const char *v, char *msg, size_t len)
{
    serve_opts *o = ctx;
    long x = 0;
    int bad = 0;
    const int talk = cli_apply_chat_flag(&o->talk, f, v, msg, len);
    if (talk >= 0) {
        bad = talk;
    } else if (!strcmp(f, "--host")) {
        o->host = v;
    } else if (!strcmp(f, "--port")) {
        bad = cli_parse_long(f, v, 0, 65535, &x, msg, len);
        o->port = (int)x;
    } else if (!strcmp(f, "--api-key")) {
        if (!*v) {
            snprintf(msg, len, "--api-key is empty; give the key clients must send");
            bad = 1;
        }
        o->api_key = v;
    } else if (!strcmp(f, "--max-body")) {
        bad = cli_parse_long(f, v, 1, 1L << 30, &x, msg, len);
        o->max_body = (size_t)x;
    } else if (!strcmp(f, "--model-name")) {
        o->model_name = v;
    } else if (!strcmp(f, "--max-seqs")) { /* at most --max-step-tokens: step_fits_seqs */
        bad = cli_parse_long(f, v, 1, 1 << 16, &x, msg, len);
        o->dev.max_seqs = (int)x;
    } else if (!strcmp(f, "--max-step-tokens")) {
        bad = cli_parse_long(f, v, 1, 1 << 20, &x, msg, len);
        o->dev.max_step_tokens = (int)x;
    } else {
        bad = cli_apply_device_flag(&o->dev, f, v, msg, len) < 0;
    }
    return bad ? CLI_USAGE : CLI_OK;
}

/* Each running sequence decodes in every step, so --max-seqs may not pass the step's tokens
 * (the engine would lower it without a word). Returns 1, or 0 with the error printed. */
static int step_fits_seqs(const serve_opts *o)
{
    /* the engine's default step, pe_config.max_step_tokens = 0, is 512 tokens */
    int step_tokens = o->dev.max_step_tokens ? o->dev.max_step_tokens : 512;
    if (o->dev.max_seqs <= step_tokens)
        return 1;
    cli_errorf("--max-seqs %d is more than the %d tokens of a step (--max-step-tokens); give "
               "--max-seqs at most %d or a larger --max-step-tokens", o->dev.max_seqs,
               step_tokens, step_tokens);
    return 0;
}

/* Returns CLI_OK, -1 after --help, or the exit code of an error (printed). */
static int parse(int argc, char **argv, serve_opts *o)
{
    static const char *const with_value[] = {
        "--model", "--tokenizer", "--chat-template", "--host", "--port", "--api-key",
        "--max-body", "--model-name", "--gpus", "--backend", "--dtype", "--threads",
        "--kv-tokens", "--dp", "--pp", "--tp", "--max-seqs", "--max-step-tokens",
        "--spec-tokens", "--spec-ngram", "--spec-max-seqs"};
    char msg[CLI_MSG_LEN];
    int rc = cli_parse_subcommand(argc, argv, "serve", with_value,
                                  sizeof with_value / sizeof with_value[0], NULL, 0, apply_flag,
                                  o);
    if (rc != CLI_OK)
        return rc;
    if (!o->dev.model_path) {
        cli_error("serve needs --model DIR; give a decoder directory with a tokenizer, e.g. "
                  "one written by pengine gen llama --tokenizer FILE --out DIR");
        return CLI_USAGE;
    }
    if (!step_fits_seqs(o))
        return CLI_USAGE;
    if (cli_decoder_grid(&o->dev, msg, sizeof msg)) {
        cli_error(msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* ---- setup --------------------------------------------------------------------------------- */

/* The chat template: --chat-template, else the one tokenizer_config.json names (beside
 * --tokenizer, else in the model directory), as pengine chat picks it. None is no error:
 * /v1/chat/completions then says how to name one. */
static void pick_template(serve_server *s)
{
    char msg[CLI_MSG_LEN];
    s->chat = cli_chat_template_pick(&s->o->talk, msg, sizeof msg);
    if (!s->chat)
        fprintf(stderr, "pengine serve: /v1/chat/completions is off: %s\n", msg);
    if (s->chat && (s->chat_end_id = pe_tokenizer_token_id(s->tk, s->chat->end_token)) < 0) {
        fprintf(stderr, "pengine serve: /v1/chat/completions is off: the tokenizer has no %s "
                "token, which ends every reply of the %s template\n", s->chat->end_token,
                s->chat->name);
        s->chat = NULL;
    }
}

/* The id /v1/models shows: --model-name, else the model directory's last part. */
static void name_model(serve_server *s)
{
    const char *name = s->o->model_name;
    char path[4096];
    if (!name) {
        snprintf(path, sizeof path, "%s", s->o->dev.model_path);
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
            path[--n] = '\0';
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    snprintf(s->model_id, sizeof s->model_id, "%s", name);
}

static int open_server(serve_server *s, const serve_opts *o)
{
    memset(s, 0, sizeof *s);
    s->o = o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    /* under mpirun only process 0 answers, so only it reads the tokenizer (which may exist
     * only on its node) */
    int rc = cli_mpi_me() == 0
                 ? gen_load_tokenizer(o->talk.tokenizer, o->dev.model_path, NULL, &s->tk)
                 : CLI_OK;
    rc = cli_mpi_agree(rc);
    if (rc == CLI_OK)
        rc = cli_llm_open(&o->dev, &s->e);
    if (rc != CLI_OK)
        return rc;
    pe_engine_model_info(s->e, &s->m);
    rc = gen_check_vocab(&s->m, s->tk);
    if (rc == CLI_OK && s->tk && pe_grammar_json(s->tk, &s->json_grammar) != PE_OK) {
        cli_errorf("JSON mode's grammar over the tokenizer: %s", pe_last_error());
        rc = CLI_RUNTIME;
    }
    pe_engine_info info;
    pe_engine_info_get(s->e, &info);
    serve_metrics_init(&s->metrics, info.kv_blocks);
    pick_template(s);
    name_model(s);
    return rc;
}

static void close_server(serve_server *s)
{
    pe_engine_destroy(s->e);
    pe_grammar_free(s->json_grammar);
    pe_tokenizer_free(s->tk);
    serve_metrics_free(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
}

void serve_enter(serve_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->active++;
    pthread_mutex_unlock(&s->mu);
}

void serve_leave(serve_server *s)
{
    pthread_mutex_lock(&s->mu);
    if (--s->active == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the life cycle ------------------------------------------------------------------------- */

/* Serves until a signal, then drains: no new work, the requests in flight to their end. */
static int serve_until_signal(serve_server *s, const sigset_t *sigs)
{
    int port = 0;
    int rc = serve_pump_start(s);
    if (rc == CLI_OK)
        rc = serve_http_start(s, &port);
    if (rc != CLI_OK)
        return rc;
    printf("pengine serve: %s (%s template) on http://%s:%d/v1\n", s->model_id,
           s->chat ? s->chat->name : "no chat", s->o->host, port);
    pe_engine_info info;
    if (pe_engine_info_get(s->e, &info) == PE_OK && info.kernels[0])
        printf("pengine serve: kernels: %s\n", info.kernels);
    fflush(stdout);
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "pengine serve: %s: finishing the requests in flight\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s->draining, 1);
    serve_http_quiesce(s);
    pthread_mutex_lock(&s->mu);
    while (s->active > 0)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
    serve_http_stop(s);
    serve_pump_stop(s);
    fprintf(stderr, "pengine serve: stopped\n");
    return CLI_OK;
}

int cli_serve(int argc, char **argv)
{
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .max_body = 1 << 20};
    o.talk.model_path = &o.dev.model_path;
    cli_default_options(&o.dev);
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    /* blocked before any thread starts, so that every thread inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone: a failed write, not a dead server */
    serve_server s;
    rc = open_server(&s, &o);
    if (rc == CLI_OK)
        rc = serve_until_signal(&s, &sigs);
    serve_http_stop(&s);
    serve_pump_stop(&s);
    close_server(&s);
    return rc;
}
