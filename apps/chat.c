/* chat.c: "pengine chat": an interactive conversation with a decoder.
 *
 * The conversation is one kept sequence (pe_seq_params.keep): the first turn is submitted
 * with the tokenizer's BOS, every later turn is appended to it (pe_seq_append), so the
 * engine prefills only the new turn's tokens; the conversation so far stays in the KV cache.
 * Each turn's text is the chat template's (chat_template.h), each reply ends at the
 * template's end-of-turn token (a stop id), at --max-tokens, or at Ctrl-C, and streams on
 * stdout as whole characters (text_stream.h). The turn's figures go to stderr.
 *
 * Lines on stdin are the user's turns; "/reset" starts a new conversation, "/exit" or the
 * end of input ends. On a terminal each turn is asked for with "> ".
 */
#include "chat.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_template.h"
#include "generate.h"
#include "mpi_job.h"
#include "sampling_flags.h"

typedef struct chat_opts {
    cli_options dev;           /* --model, --gpus, --pp, --tp, --backend, --dtype, ... */
    cli_chat_flags talk;       /* --model (into dev), --tokenizer, --chat-template */
    const char *system;        /* --system TEXT: the first turn's system message */
    int max_tokens;            /* --max-tokens: the longest reply (default 256) */
    pe_sampling sampling;
} chat_opts;

typedef struct chat {
    const chat_opts *o;
    pe_engine *e;
    pe_tokenizer *tk;
    const cli_chat_template *t;
    pe_model_info m;
    int32_t end_id; /* the template's end-of-turn token: ends a reply */
    int live;       /* a conversation is kept in the engine under id */
    uint64_t id;
    int closed;     /* the last reply ended with end_id (else the next turn closes it) */
    long used;      /* the conversation's tokens: turns and replies */
    int tty;        /* stdin is a terminal: prompts and a banner */
} chat;

static volatile sig_atomic_t interrupted; /* Ctrl-C: cancels the reply being generated */

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* ---- flags ----------------------------------------------------------------------------- */

static int apply_flag(void *ctx, const char *f, const char *v, char *msg, size_t len)
{
    chat_opts *o = ctx;
    long x = 0;
    int bad = 0;
    const int talk = cli_apply_chat_flag(&o->talk, f, v, msg, len);
    if (talk >= 0) {
        bad = talk;
    } else if (!strcmp(f, "--system")) {
        o->system = v;
    } else if (!strcmp(f, "--max-tokens")) {
        bad = cli_parse_long(f, v, 1, 1L << 24, &x, msg, len);
        if (bad && !cli_parse_long(f, v, -(1L << 30), 0, &x, msg, len))
            snprintf(msg, len, "--max-tokens %s allows no reply; give a count of at least 1 "
                     "(the default is 256)", v);
        o->max_tokens = (int)x;
    } else if ((bad = cli_apply_sampling_flag(&o->sampling, f, v, msg, len)) >= 0) {
        /* applied */
    } else {
        bad = cli_apply_device_flag(&o->dev, f, v, msg, len) < 0;
    }
    return bad ? CLI_USAGE : CLI_OK;
}

/* Returns CLI_OK, -1 after --help, or the exit code of an error (printed). */
static int parse(int argc, char **argv, chat_opts *o)
{
    static const char *const with_value[] = {
        "--model", "--tokenizer", "--chat-template", "--system", "--max-tokens",
        CLI_SAMPLING_FLAGS, "--gpus", "--backend", "--dtype",
        "--threads", "--kv-tokens", "--pp", "--tp", "--spec-tokens", "--spec-ngram"};
    char msg[CLI_MSG_LEN];
    int rc = cli_parse_subcommand(argc, argv, "chat", with_value,
                                  sizeof with_value / sizeof with_value[0], NULL, 0, apply_flag,
                                  o);
    if (rc != CLI_OK)
        return rc;
    if (!o->dev.model_path) {
        cli_error("chat needs --model DIR; give a decoder directory with a tokenizer, e.g. one "
                  "written by pengine gen llama --tokenizer FILE --out DIR");
        return CLI_USAGE;
    }
    if (o->dev.dp == 0) /* one conversation: one replica, its stages and TP ranks the grid */
        o->dev.dp = 1;
    if (cli_decoder_grid(&o->dev, msg, sizeof msg)) {
        cli_error(msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* ---- setup ----------------------------------------------------------------------------- */

/* The template (cli_chat_template_pick), or the usage error saying how to name one. */
static int pick_template(const chat_opts *o, const cli_chat_template **t)
{
    char msg[CLI_MSG_LEN];
    *t = cli_chat_template_pick(&o->talk, msg, sizeof msg);
    if (*t)
        return CLI_OK;
    cli_error(msg);
    return CLI_USAGE;
}

/* The tokenizer and the template, checked against each other. Returns the exit code. */
static int open_talk(chat *c, const chat_opts *o)
{
    int rc = gen_load_tokenizer(o->talk.tokenizer, o->dev.model_path, NULL, &c->tk);
    if (rc == CLI_OK)
        rc = pick_template(o, &c->t);
    if (rc != CLI_OK)
        return rc;
    c->end_id = pe_tokenizer_token_id(c->tk, c->t->end_token);
    if (c->end_id >= 0)
        return CLI_OK;
    cli_errorf("the tokenizer has no %s token, which ends every reply of the %s template; "
               "give the template of this model's tokenizer with --chat-template (%s)",
               c->t->end_token, c->t->name, cli_chat_template_names());
    return CLI_USAGE;
}

/* The engine, the tokenizer and the template, checked against each other. Under mpirun
 * only process 0 talks, so only it reads the tokenizer and the template (which may exist
 * only on its node). */
static int chat_open(chat *c, const chat_opts *o)
{
    memset(c, 0, sizeof *c);
    c->o = o;
    c->tty = isatty(STDIN_FILENO);
    int rc = cli_mpi_agree(cli_mpi_me() == 0 ? open_talk(c, o) : CLI_OK);
    if (rc == CLI_OK)
        rc = cli_llm_open(&o->dev, &c->e);
    if (rc == CLI_OK) {
        pe_engine_model_info(c->e, &c->m);
        rc = gen_check_vocab(&c->m, c->tk);
    }
    return rc;
}

static void chat_close(chat *c)
{
    if (c->live)
        pe_seq_release(c->e, c->id);
    pe_engine_destroy(c->e);
    pe_tokenizer_free(c->tk);
}

/* Ends the conversation in the engine: the next turn starts a new one. */
static void chat_reset(chat *c)
{
    if (c->live)
        pe_seq_release(c->e, c->id);
    c->live = 0;
    c->closed = 0;
    c->used = 0;
}

/* ---- a turn ---------------------------------------------------------------------------- */

/* The reply's figures, for the line on stderr. */
typedef struct turn_stats {
    size_t prompt;       /* the turn's tokens, prefilled */
    int generated;
    double t0, t_first, t_end; /* ms */
    pe_finish finish;
    int cancelled;       /* a Ctrl-C asked to cancel it (it may have ended first) */
} turn_stats;

/* The next event of the reply. A Ctrl-C cancels the reply: the handler only sets a flag,
 * which this loop sees within a nap. */
static pe_status next_event(chat *c, pe_token_event *ev, turn_stats *st)
{
    for (;;) {
        pe_status s = pe_seq_poll(c->e, ev);
        if (s != PE_EAGAIN)
            return s;
        if (interrupted && !st->cancelled) {
            st->cancelled = 1;
            pe_seq_cancel(c->e, c->id);
        }
        interrupted = 0;
        struct timespec nap = {0, 200 * 1000}; /* 0.2 ms: far under one decode step */
        nanosleep(&nap, NULL);
    }
}

/* Streams the reply of the turn just queued. Returns the exit code; a reply that failed
 * without failing the engine (the KV pool was full) is printed and ends the conversation. */
static int stream_reply(chat *c, turn_stats *st)
{
    cli_text text;
    if (cli_text_init(&text, c->tk, NULL, 0) != PE_OK) {
        cli_error("out of memory for the reply's text");
        return CLI_RUNTIME;
    }
    pe_token_event ev = {.finish = PE_FINISH_NONE};
    int32_t last = -1;
    pe_status s = PE_OK;
    do {
        s = next_event(c, &ev, st);
        if (s != PE_OK)
            break;
        if (ev.token >= 0) {
            if (st->generated++ == 0)
                st->t_first = cli_now_ms();
            c->used++;
            last = ev.token;
            if (ev.token != c->end_id)
                s = cli_text_push(&text, ev.token);
        }
        const char *out;
        size_t n;
        if (ev.finish != PE_FINISH_NONE && s == PE_OK)
            s = cli_text_finish(&text);
        cli_text_take(&text, &out, &n);
        fwrite(out, 1, n, stdout);
        fflush(stdout);
    } while (s == PE_OK && ev.finish == PE_FINISH_NONE);
    cli_text_free(&text);
    fputc('\n', stdout);
    fflush(stdout);
    st->t_end = cli_now_ms();
    st->finish = ev.finish;
    c->closed = last == c->end_id;
    if (s != PE_OK) { /* the text could not grow, or no event came (a bug: it is ours) */
        cli_errorf("the reply was lost: %s", pe_status_str(s));
        return CLI_RUNTIME;
    }
    if (ev.finish != PE_FINISH_ERROR)
        return CLI_OK;
    chat_reset(c); /* its KV is gone (or the pool could not grow it): start over */
    if (ev.status == PE_EAGAIN) {
        cli_errorf("the KV cache is full: this conversation needs more than --kv-tokens holds; "
                   "a new conversation starts (give a larger --kv-tokens to keep longer ones)");
        return CLI_OK;
    }
    cli_errorf("the reply failed: %s (%s)", pe_status_str(ev.status),
               pe_engine_last_error(c->e));
    return CLI_RUNTIME;
}

static void print_stats(const chat *c, const turn_stats *st)
{
    double decode_ms = st->t_end - st->t_first;
    fprintf(stderr, "[%zu prompt tokens prefilled, first token in %.0f ms; %d tokens",
            st->prompt, st->t_first - st->t0, st->generated);
    if (st->generated > 1 && decode_ms > 0)
        fprintf(stderr, " at %.1f tok/s", (st->generated - 1) * 1000.0 / decode_ms);
    fprintf(stderr, "%s; %ld of %d positions]\n",
            st->finish == PE_FINISH_CANCELLED ? ", cancelled"
            : st->finish == PE_FINISH_LENGTH  ? ", cut by the length"
                                              : "",
            c->used, c->m.context);
    if (c->used >= c->m.context)
        fputs("pengine: the conversation fills the model's context; /reset starts a new one\n",
              stderr);
}

/* One turn: the user's line in, the reply streamed out. Returns the exit code. */
static int chat_turn(chat *c, const char *line)
{
    const chat_opts *o = c->o;
    char *turn = cli_chat_turn_text(c->t, !c->live, c->closed, o->system, line);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!turn || pe_tokenizer_encode(c->tk, turn, strlen(turn), !c->live, &ids, &n) != PE_OK) {
        free(turn);
        cli_error("out of memory for the turn's tokens");
        return CLI_RUNTIME;
    }
    free(turn);
    if (c->used + (long)n >= c->m.context) { /* the reply needs a position too */
        fprintf(stderr, "pengine: this turn is %zu tokens and the conversation holds %ld of the "
                "model's %d positions; /reset starts a new conversation, or write less\n",
                n, c->used, c->m.context);
        free(ids);
        return CLI_OK;
    }
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = ids;
    p.prompt_len = n;
    p.max_tokens = o->max_tokens;
    p.sampling = o->sampling;
    p.stop = &c->end_id;
    p.nstop = 1;
    p.keep = 1;
    turn_stats st = {.prompt = n, .t0 = cli_now_ms()};
    pe_status s = c->live ? pe_seq_append(c->e, c->id, &p) : pe_seq_submit(c->e, &p, &c->id);
    free(ids);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        return CLI_RUNTIME;
    }
    c->live = 1;
    c->used += (long)n;
    int rc = stream_reply(c, &st);
    if (rc == CLI_OK && c->live)
        print_stats(c, &st);
    return rc;
}

/* ---- the loop -------------------------------------------------------------------------- */

/* The next line of stdin without its line end; 0 at the end of input. A Ctrl-C at the prompt
 * gives an empty line. */
static int read_turn(const chat *c, char **line, size_t *cap)
{
    if (c->tty) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    interrupted = 0; /* a Ctrl-C from here on drops the line, or stops its reply */
    errno = 0;
    ssize_t n = getline(line, cap, stdin);
    if (n < 0 && errno == EINTR) { /* Ctrl-C: the terminal dropped the line */
        clearerr(stdin);
        interrupted = 0;
        fputc('\n', stdout);
        (*line)[0] = '\0';
        return 1;
    }
    if (n < 0) {
        if (c->tty) /* Ctrl-D: end the prompt's line, as a shell does */
            fputc('\n', stdout);
        return 0;
    }
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
        (*line)[--n] = '\0';
    return 1;
}

static int chat_loop(chat *c)
{
    if (c->tty)
        fprintf(stderr, "pengine chat: %s, %s template, %d positions. /reset starts over, "
                "/exit or Ctrl-D ends, Ctrl-C stops a reply.\n", c->m.architecture,
                c->t->name, c->m.context);
    char *line = NULL;
    size_t cap = 0;
    int rc = CLI_OK;
    while (rc == CLI_OK && read_turn(c, &line, &cap)) {
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit"))
            break;
        if (!strcmp(line, "/reset")) {
            chat_reset(c);
            fputs("[a new conversation]\n", stderr);
            continue;
        }
        if (line[0])
            rc = chat_turn(c, line);
    }
    if (rc == CLI_OK && ferror(stdin)) {
        cli_errorf("cannot read stdin (%s)", strerror(errno));
        rc = CLI_RUNTIME;
    }
    free(line);
    return rc;
}

int cli_chat(int argc, char **argv)
{
    chat_opts o = {.max_tokens = 256};
    o.talk.model_path = &o.dev.model_path;
    cli_default_options(&o.dev);
    cli_sampling_init(&o.sampling); /* greedy, as pe_seq_params_init */
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    chat c;
    rc = chat_open(&c, &o);
    if (rc == CLI_OK) {
        struct sigaction sa = {.sa_handler = on_sigint}, old; /* no SA_RESTART: EINTR */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old);
        rc = chat_loop(&c);
        sigaction(SIGINT, &old, NULL);
    }
    chat_close(&c);
    return rc;
}
