/* serve_reply.c: the answer to a completion request, in OpenAI's formats: one JSON object
 * when the sequence has ended, or server-sent events ("data: {chunk}\n\n" ... "data:
 * [DONE]\n\n") as its tokens come. The text grows in whole characters (text_stream.h), and a
 * text stop string ends the answer at once: the sequence is cancelled behind it. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

/* What the answer has gathered from the sequence's events. */
typedef struct reply_acc {
    cli_text text;
    int ntok;                  /* tokens generated up to the end of the text */
    int32_t *ids;              /* (ntok) */
    int cap;
    int ended;                 /* the final event came, or a stop string was found */
    const char *finish;        /* "stop" or "length" once ended without an error */
    pe_status error;           /* the final event's error (finish ERROR) */
} reply_acc;

/* stops (nstops) must outlive a: the text borrows them. */
static int acc_init(reply_acc *a, const serve_server *s, char *const *stops, int nstops)
{
    memset(a, 0, sizeof *a);
    return cli_text_init(&a->text, s->tk, (const char *const *)stops, nstops) == PE_OK ? 0 : -1;
}

static void acc_free(reply_acc *a)
{
    cli_text_free(&a->text);
    free(a->ids);
}

static int keep_id(reply_acc *a, int32_t id)
{
    if (a->ntok == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        int32_t *p = realloc(a->ids, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        a->ids = p;
        a->cap = cap;
    }
    a->ids[a->ntok++] = id;
    return 0;
}

/* Takes q's next event into a. Out of memory counts as the sequence's error. */
static void acc_take(reply_acc *a, serve_seq *q)
{
    serve_ev ev;
    serve_seq_next(q, &ev);
    pe_status st = PE_OK;
    if (ev.token >= 0 && keep_id(a, ev.token) == 0)
        st = cli_text_push(&a->text, ev.token);
    else if (ev.token >= 0)
        st = PE_ENOMEM;
    if (st == PE_OK && ev.finish != PE_FINISH_NONE)
        st = cli_text_finish(&a->text);
    if (st != PE_OK || ev.finish == PE_FINISH_ERROR) {
        a->error = st != PE_OK ? st : ev.status;
        a->ended = 1;
        return;
    }
    if (a->text.stopped) { /* a stop string: the text ends before it, the sequence here */
        serve_seq_cancel(q);
        a->finish = "stop";
        a->ended = 1;
        return;
    }
    if (ev.finish != PE_FINISH_NONE) {
        a->finish = ev.finish == PE_FINISH_LENGTH ? "length" : "stop";
        a->ended = 1;
    }
}

static void head_init(serve_reply_head *h, serve_server *s, const serve_job *j)
{
    unsigned long n = atomic_fetch_add(&s->next_id, 1);
    snprintf(h->id, sizeof h->id, "%s-%lu", j->chat ? "chatcmpl" : "cmpl", n);
    h->created = (long)time(NULL);
    h->chat = j->chat;
    h->model = s->model_id;
}

/* {"id", "object", "created", "model"}: the start of every answer and chunk. */
static cJSON *head_json(const serve_reply_head *h, int chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", h->id);
    cJSON_AddStringToObject(o, "object", !h->chat ? "text_completion"
                                         : chunk  ? "chat.completion.chunk"
                                                  : "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)h->created);
    cJSON_AddStringToObject(o, "model", h->model);
    return o;
}

static void add_usage(cJSON *o, size_t prompt, int generated)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)prompt + generated);
}

static void add_ids(cJSON *choice, const int32_t *ids, int n)
{
    cJSON *a = cJSON_AddArrayToObject(choice, "token_ids");
    for (int k = 0; k < n; k++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[k]));
}

/* A choice of an answer or chunk: its text (a chunk's chat text goes in "delta"), and the
 * finish reason or null. */
static cJSON *choice_json(const serve_reply_head *h, int chunk, const char *text, size_t len,
                          const char *finish, int role)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = strndup(text ? text : "", len);
    if (!h->chat) {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (role || !chunk)
            cJSON_AddStringToObject(m, "role", "assistant");
        if (len || !chunk || role)
            cJSON_AddStringToObject(m, "content", t ? t : "");
    }
    free(t);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static unsigned error_status(pe_status st) { return st == PE_EAGAIN ? 503 : 500; }

static char *error_text(pe_status st)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s", st == PE_EAGAIN ? "the KV cache is full"
                                                        : "the generation failed",
             pe_status_str(st));
    return serve_error_json(error_status(st), msg);
}

/* ---- one JSON ------------------------------------------------------------------------------ */

char *serve_reply_whole(serve_server *s, const serve_job *j, serve_seq *q, unsigned *status)
{
    reply_acc a;
    if (acc_init(&a, s, j->stops, j->nstops)) {
        serve_seq_close(q);
        *status = 500;
        return serve_error_json(500, "out of memory for the answer");
    }
    while (!a.ended)
        acc_take(&a, q);
    serve_seq_close(q);
    char *body;
    if (a.error != PE_OK) {
        *status = error_status(a.error);
        body = error_text(a.error);
    } else {
        serve_reply_head h;
        head_init(&h, s, j);
        cJSON *o = head_json(&h, 0);
        cJSON *c = choice_json(&h, 0, a.text.text, a.text.len, a.finish, 0);
        if (j->return_ids)
            add_ids(c, a.ids, a.ntok);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
        add_usage(o, j->prompt_len, a.ntok);
        body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        *status = body ? 200 : 500;
    }
    acc_free(&a);
    return body;
}

/* ---- server-sent events -------------------------------------------------------------------- */

struct serve_stream {
    serve_server *s;
    serve_seq *q;
    serve_reply_head h;
    reply_acc a;
    size_t prompt_len;
    int include_usage, return_ids;
    char *stops[CLI_MAX_STOP_STR]; /* copies: the job is gone when the stream runs */
    int nstops;
    int ids_sent;              /* token ids already in a chunk */
    char *out;                 /* (out_len) bytes to send, from out_pos */
    size_t out_len, out_pos, out_cap;
    int last;                  /* out holds the end: [DONE] */
    int failed;                /* out of memory: the stream ends with an error */
};

/* Appends "data: <text>\n\n" to out. */
static void emit(serve_stream *st, const char *text)
{
    if (!text || st->failed)
        return;
    size_t n = strlen(text) + 9; /* "data: ", "\n\n" and the NUL */
    if (st->out_len + n > st->out_cap) {
        size_t cap = 2 * (st->out_len + n);
        char *p = realloc(st->out, cap);
        if (!p) {
            st->failed = 1;
            return;
        }
        st->out = p;
        st->out_cap = cap;
    }
    st->out_len += (size_t)sprintf(st->out + st->out_len, "data: %s\n\n", text);
}

static void emit_json(serve_stream *st, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        st->failed = 1;
    else
        emit(st, text);
    free(text);
}

/* A chunk of the new text (and ids), with the finish reason when it is the last. */
static void emit_chunk(serve_stream *st, const char *text, size_t len, const char *finish,
                       int role)
{
    cJSON *o = head_json(&st->h, 1);
    cJSON *c = choice_json(&st->h, 1, text, len, finish, role);
    if (st->return_ids) {
        add_ids(c, st->a.ids + st->ids_sent, st->a.ntok - st->ids_sent);
        st->ids_sent = st->a.ntok;
    }
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    emit_json(st, o);
}

/* The end: the error, or the usage chunk when asked for; then [DONE]. */
static void emit_end(serve_stream *st)
{
    if (st->a.error != PE_OK) {
        char *e = error_text(st->a.error);
        emit(st, e ? e : "{\"error\": {\"message\": \"out of memory\"}}");
        free(e);
    } else if (st->include_usage) {
        cJSON *o = head_json(&st->h, 1);
        cJSON_AddArrayToObject(o, "choices");
        add_usage(o, st->prompt_len, st->a.ntok);
        emit_json(st, o);
    }
    emit(st, "[DONE]");
    st->last = 1;
}

/* Waits for the next event and writes what it adds into out (maybe nothing). */
static void step(serve_stream *st)
{
    acc_take(&st->a, st->q);
    const char *text;
    size_t n;
    cli_text_take(&st->a.text, &text, &n);
    int new_ids = st->return_ids && st->a.ntok > st->ids_sent;
    if (st->a.ended && st->a.error == PE_OK)
        emit_chunk(st, text, n, st->a.finish, 0);
    else if (n || new_ids)
        emit_chunk(st, text, n, NULL, 0);
    if (st->a.ended)
        emit_end(st);
}

serve_stream *serve_reply_stream_new(serve_server *s, const serve_job *j, serve_seq *q)
{
    serve_stream *st = calloc(1, sizeof *st);
    int ok = st != NULL;
    for (int k = 0; ok && k < j->nstops; k++)
        ok = (st->stops[st->nstops++] = strdup(j->stops[k])) != NULL;
    if (!ok || acc_init(&st->a, s, st->stops, st->nstops)) {
        for (int k = 0; st && k < st->nstops; k++)
            free(st->stops[k]);
        free(st);
        serve_seq_close(q);
        return NULL;
    }
    st->s = s;
    st->q = q;
    st->prompt_len = j->prompt_len;
    st->include_usage = j->include_usage;
    st->return_ids = j->return_ids;
    head_init(&st->h, s, j);
    if (j->chat) /* OpenAI's first chunk: the role, no text yet */
        emit_chunk(st, "", 0, NULL, 1);
    serve_enter(s); /* the drain waits for the stream's end */
    return st;
}

ssize_t serve_reply_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    serve_stream *st = cls;
    (void)pos;
    while (st->out_pos == st->out_len) {
        if (st->last || st->failed)
            return st->failed ? MHD_CONTENT_READER_END_WITH_ERROR
                              : MHD_CONTENT_READER_END_OF_STREAM;
        st->out_pos = st->out_len = 0;
        step(st);
    }
    size_t n = st->out_len - st->out_pos < max ? st->out_len - st->out_pos : max;
    memcpy(buf, st->out + st->out_pos, n);
    st->out_pos += n;
    return (ssize_t)n;
}

void serve_reply_stream_free(void *cls)
{
    serve_stream *st = cls;
    serve_seq_close(st->q); /* a client gone mid-stream: cancelled, its KV blocks freed */
    acc_free(&st->a);
    for (int k = 0; k < st->nstops; k++)
        free(st->stops[k]);
    free(st->out);
    serve_server *s = st->s;
    free(st);
    serve_leave(s);
}
