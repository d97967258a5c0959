/* serve_reply.c: the answer to a completion request, in OpenAI's formats: one JSON object
 * when its sequences have ended, or server-sent events ("data: {chunk}\n\n" ... "data:
 * [DONE]\n\n") as their tokens come, a chunk for one choice at a time; with the tokens'
 * log-probabilities when asked. A choice's text grows in whole characters (text_stream.h),
 * and a text stop string ends the choice at once: its sequence is cancelled behind it. An
 * error in any choice is the answer's. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

/* What a choice of the answer has gathered from its sequence's events. */
typedef struct reply_acc {
    cli_text text;
    int ntok;                  /* tokens generated up to the end of the text */
    int32_t *ids;              /* (ntok) */
    int logprobs;              /* the job's: -1, or the top entries to show per token */
    const serve_prompt *echo;  /* "echo": the prompt it repeats before its text, or NULL */
    long echo_chars;           /* characters of echo->text, before the generated text's */
    serve_logprobs *lps;       /* (ntok) when logprobs >= 0 */
    long *offsets;             /* (ntok) when logprobs >= 0: the characters of the text
                                * before each token's */
    int cap;
    int sent;                  /* streamed: tokens already in a chunk (ids, logprobs) */
    size_t counted;            /* bytes of text whose characters are counted in chars */
    long chars;
    int ended;                 /* the final event came, or a stop string was found */
    const char *finish;        /* "stop" or "length" once ended without an error */
    pe_status error;           /* the final event's error (finish ERROR) */
} reply_acc;

static long utf8_chars(const char *t)
{
    long n = 0;
    for (; *t; t++)
        n += ((unsigned char)*t & 0xC0) != 0x80;
    return n;
}

/* stops (j's, or copies of them) and echo (NULL: none) must outlive a: a borrows them. */
static int acc_init(reply_acc *a, const serve_server *s, const serve_job *j,
                    char *const *stops, const serve_prompt *echo)
{
    memset(a, 0, sizeof *a);
    a->logprobs = j->logprobs;
    a->echo = echo;
    a->echo_chars = echo ? utf8_chars(echo->text) : 0;
    if (cli_text_init(&a->text, s->tk, (const char *const *)stops, j->nstops) != PE_OK)
        return -1;
    a->text.free_ids = j->min_tokens; /* no stop string in the first min_tokens' text */
    a->text.keep_stop = j->include_stop;
    return 0;
}

static void acc_free(reply_acc *a)
{
    cli_text_free(&a->text);
    free(a->ids);
    free(a->lps);
    free(a->offsets);
}

/* Characters (code points) of the text so far: where the next token's text starts. */
static long text_chars(reply_acc *a)
{
    if (a->counted > a->text.len) { /* cut before a stop string: count again */
        a->counted = 0;
        a->chars = 0;
    }
    for (; a->counted < a->text.len; a->counted++)
        a->chars += ((unsigned char)a->text.text[a->counted] & 0xC0) != 0x80;
    return a->chars;
}

static int grow(reply_acc *a)
{
    int cap = a->cap ? 2 * a->cap : 64;
    int32_t *ids = realloc(a->ids, (size_t)cap * sizeof *ids);
    if (!ids)
        return -1;
    a->ids = ids;
    if (a->logprobs >= 0) {
        serve_logprobs *lps = realloc(a->lps, (size_t)cap * sizeof *lps);
        if (lps)
            a->lps = lps;
        long *offsets = realloc(a->offsets, (size_t)cap * sizeof *offsets);
        if (offsets)
            a->offsets = offsets;
        if (!lps || !offsets)
            return -1;
    }
    a->cap = cap;
    return 0;
}

static int keep_token(reply_acc *a, const serve_ev *ev)
{
    if (a->ntok == a->cap && grow(a) != 0)
        return -1;
    if (a->logprobs >= 0) {
        a->lps[a->ntok] = ev->lp;
        a->offsets[a->ntok] = text_chars(a);
    }
    a->ids[a->ntok++] = ev->token;
    return 0;
}

/* Takes ev, an event of a's choice of q, into a. A stop or end-of-sequence token that ends
 * the choice adds its id but no text, unless the text keeps its stop (vLLM's
 * include_stop_str_in_output). Out of memory counts as the sequence's error. */
static void acc_take(reply_acc *a, serve_seq *q, const serve_ev *ev)
{
    pe_status st = PE_OK;
    const int ends_on_it = ev->finish == PE_FINISH_STOP || ev->finish == PE_FINISH_EOS;
    if (ev->token >= 0 && keep_token(a, ev) == 0)
        st = ends_on_it && !a->text.keep_stop ? PE_OK : cli_text_push(&a->text, ev->token);
    else if (ev->token >= 0)
        st = PE_ENOMEM;
    if (st == PE_OK && ev->finish != PE_FINISH_NONE)
        st = cli_text_finish(&a->text);
    if (st != PE_OK || ev->finish == PE_FINISH_ERROR) {
        a->error = st != PE_OK ? st : ev->status;
        a->ended = 1;
        return;
    }
    if (a->text.stopped) { /* a stop string: the text ends before it, the sequence here */
        serve_seq_cancel_choice(q, ev->choice);
        a->finish = "stop";
        a->ended = 1;
        return;
    }
    if (ev->finish != PE_FINISH_NONE) {
        a->finish = ev->finish == PE_FINISH_LENGTH ? "length" : "stop";
        a->ended = 1;
    }
}

/* The choices' accumulators: (n), for the job's stops and prompts (which must outlive them:
 * copies, for a stream) and logprobs; NULL when out of memory. */
static reply_acc *accs_new(const serve_server *s, const serve_job *j, char *const *stops,
                           const serve_prompt *prompts, int n)
{
    reply_acc *a = calloc((size_t)n, sizeof *a);
    int ok = a != NULL, made = 0;
    for (; ok && made < n; made++)
        ok = acc_init(&a[made], s, j, stops, j->echo ? &prompts[made / j->n] : NULL) == 0;
    if (!ok && a) {
        for (int c = 0; c < made; c++)
            acc_free(&a[c]);
        free(a);
        a = NULL;
    }
    return a;
}

static void accs_free(reply_acc *a, int n)
{
    for (int c = 0; a && c < n; c++)
        acc_free(&a[c]);
    free(a);
}

/* Takes q's next event into its choice's accumulator. Returns that choice, or -1 for an
 * event of a choice already ended (its sequence's last events after a stop string). */
static int accs_take(reply_acc *a, serve_seq *q)
{
    serve_ev ev;
    serve_seq_next(q, &ev);
    if (a[ev.choice].ended)
        return -1;
    acc_take(&a[ev.choice], q, &ev);
    return ev.choice;
}

/* usage: the prompts' tokens (each prompt once, whatever n) and all choices' tokens. */
static void add_usage(cJSON *o, const serve_job *j, const reply_acc *a, int n)
{
    size_t prompt = 0;
    long generated = 0;
    for (int i = 0; i < j->nprompts; i++)
        prompt += j->prompts[i].len;
    for (int c = 0; c < n; c++)
        generated += a[c].ntok;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)prompt + (double)generated);
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

static void add_ids(cJSON *choice, const int32_t *ids, int n)
{
    cJSON *a = cJSON_AddArrayToObject(choice, "token_ids");
    for (int k = 0; k < n; k++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[k]));
}

/* ---- logprobs ------------------------------------------------------------------------------ */

/* Token id's text alone (malloc'ed; NULL when out of memory): the decode of the one id,
 * special tokens shown; part of a character reads U+FFFD (its bytes say which). "" for an
 * id the tokenizer lacks (a vocabulary padded past it). */
static char *token_text(const serve_server *s, int32_t id)
{
    char *t = NULL;
    size_t n;
    if (pe_tokenizer_decode(s->tk, &id, 1, 0, &t, &n) == PE_OK)
        return t;
    free(t);
    return strdup("");
}

/* o[name], or the array o's next item when name is NULL: token id's text. */
static void add_token_text(cJSON *o, const char *name, const serve_server *s, int32_t id)
{
    char *t = token_text(s, id);
    cJSON *v = cJSON_CreateString(t ? t : "");
    free(t);
    if (name)
        cJSON_AddItemToObject(o, name, v);
    else
        cJSON_AddItemToArray(o, v);
}

/* {"token", "logprob", "bytes"}: one token of a chat's logprobs; bytes as they are, which
 * need not be a whole character. */
static cJSON *chat_entry(const serve_server *s, int32_t id, float logprob)
{
    cJSON *e = cJSON_CreateObject();
    add_token_text(e, "token", s, id);
    cJSON_AddNumberToObject(e, "logprob", logprob);
    cJSON *b = cJSON_AddArrayToObject(e, "bytes");
    char *bytes = NULL;
    size_t n = 0;
    if (pe_tokenizer_token_bytes(s->tk, id, &bytes, &n) == PE_OK)
        for (size_t k = 0; k < n; k++)
            cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)bytes[k]));
    free(bytes);
    return e;
}

/* The top entries of token k to show: as many as asked, as many as the engine gave. */
static int top_count(const reply_acc *a, int k)
{
    return a->lps[k].ntop < a->logprobs ? a->lps[k].ntop : a->logprobs;
}

/* A chat's logprobs of tokens [from, to): {"content": [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]}, as OpenAI's. */
static cJSON *chat_logprobs(const serve_server *s, const reply_acc *a, int from, int to)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    for (int k = from; k < to; k++) {
        const serve_logprobs *l = &a->lps[k];
        cJSON *e = chat_entry(s, a->ids[k], l->logprob);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int j = 0; j < top_count(a, k); j++)
            cJSON_AddItemToArray(top, chat_entry(s, l->top[j], l->top_logprob[j]));
        cJSON_AddItemToArray(content, e);
    }
    return o;
}

/* d[token id's text] = logprob, unless the text is there already (two ids can read the
 * same, e.g. U+FFFD): the more likely one's stays. */
static void add_top(cJSON *d, const serve_server *s, int32_t id, float logprob)
{
    char *t = token_text(s, id);
    if (t && !cJSON_GetObjectItemCaseSensitive(d, t))
        cJSON_AddNumberToObject(d, t, logprob);
    free(t);
}

/* The echoed prompt's entries of a completion's logprobs: its first token has none (null),
 * the others pe_score_logprobs'; each offset is the characters of the tokens' texts before
 * it (as vLLM's). */
static void add_prompt_entries(const serve_server *s, const reply_acc *a, cJSON *tokens,
                               cJSON *lps, cJSON *tops, cJSON *offsets)
{
    const serve_prompt *p = a->echo;
    long chars = 0;
    for (size_t i = 0; i < p->len; i++) {
        char *t = token_text(s, p->ids[i]);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t ? t : ""));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)chars));
        chars += t ? utf8_chars(t) : 0;
        free(t);
        if (i == 0) {
            cJSON_AddItemToArray(lps, cJSON_CreateNull());
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
            continue;
        }
        const pe_logprobs *l = &p->lp[i - 1];
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(l->logprob));
        cJSON *d = cJSON_CreateObject();
        for (int j = 0; j < l->nlogprobs && j < a->logprobs; j++)
            add_top(d, s, l->top_tokens[j], l->top_logprobs[j]);
        add_top(d, s, p->ids[i], l->logprob);
        cJSON_AddItemToArray(tops, d);
    }
}

/* A completion's logprobs of tokens [from, to), after the echoed prompt's (with_echo), as
 * OpenAI's legacy ones: {"tokens", "token_logprobs", "top_logprobs" (per token {text:
 * logprob} of the most likely, and of the chosen token, so up to logprobs + 1),
 * "text_offset" (characters before the token's text in the whole answer)}. */
static cJSON *completion_logprobs(const serve_server *s, const reply_acc *a, int with_echo,
                                  int from, int to)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(o, "text_offset");
    if (with_echo && a->echo && a->echo->lp)
        add_prompt_entries(s, a, tokens, lps, tops, offsets);
    for (int k = from; k < to; k++) {
        const serve_logprobs *l = &a->lps[k];
        add_token_text(tokens, NULL, s, a->ids[k]);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(l->logprob));
        cJSON *d = cJSON_CreateObject();
        for (int j = 0; j < top_count(a, k); j++)
            add_top(d, s, l->top[j], l->top_logprob[j]);
        add_top(d, s, a->ids[k], l->logprob);
        cJSON_AddItemToArray(tops, d);
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(a->echo_chars + a->offsets[k])));
    }
    return o;
}

/* The logprobs of tokens [from, to), after the echoed prompt's (with_echo), for the answer
 * or chunk, or NULL (null): none asked for, or no token. */
static cJSON *logprobs_json(const serve_server *s, const reply_acc *a, int chat, int with_echo,
                            int from, int to)
{
    with_echo = with_echo && a->echo;
    if (a->logprobs < 0 || (from >= to && !with_echo))
        return NULL;
    return chat ? chat_logprobs(s, a, from, to)
                : completion_logprobs(s, a, with_echo, from, to);
}

/* ---- answers and chunks -------------------------------------------------------------------- */

/* Choice `index` of an answer or chunk: its text (a chunk's chat text goes in "delta"), its
 * logprobs (taken; NULL: null), and the finish reason or null. */
static cJSON *choice_json(const serve_reply_head *h, int index, int chunk, const char *text,
                          size_t len, cJSON *logprobs, const char *finish, int role)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
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
    if (logprobs)
        cJSON_AddItemToObject(c, "logprobs", logprobs);
    else
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

/* The echoed prompt's text and a's after it (malloc'ed), or NULL: no echo (or no memory). */
static char *with_echo(const reply_acc *a)
{
    if (!a->echo)
        return NULL;
    const size_t n = strlen(a->echo->text);
    char *t = malloc(n + a->text.len + 1);
    if (t) {
        memcpy(t, a->echo->text, n);
        memcpy(t + n, a->text.text, a->text.len);
        t[n + a->text.len] = '\0';
    }
    return t;
}

char *serve_reply_whole(serve_server *s, const serve_job *j, serve_seq *q, unsigned *status)
{
    const int nch = j->nprompts * j->n;
    reply_acc *a = accs_new(s, j, j->stops, j->prompts, nch);
    if (!a) {
        serve_seq_close(q);
        *status = 500;
        return serve_error_json(500, "out of memory for the answer");
    }
    pe_status error = PE_OK;
    for (int open = nch; open > 0 && error == PE_OK;) {
        int c = accs_take(a, q);
        if (c >= 0 && a[c].ended)
            open--, error = a[c].error;
    }
    serve_seq_close(q); /* after an error: the other choices cancelled */
    char *body;
    if (error != PE_OK) {
        *status = error_status(error);
        body = error_text(error);
    } else {
        serve_reply_head h;
        head_init(&h, s, j);
        cJSON *o = head_json(&h, 0);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        for (int c = 0; c < nch; c++) {
            char *text = with_echo(&a[c]);
            cJSON *ch = choice_json(&h, c, 0, text ? text : a[c].text.text,
                                    text ? strlen(text) : a[c].text.len,
                                    logprobs_json(s, &a[c], j->chat, 1, 0, a[c].ntok),
                                    a[c].finish, 0);
            free(text);
            if (j->return_ids)
                add_ids(ch, a[c].ids, a[c].ntok);
            cJSON_AddItemToArray(choices, ch);
        }
        add_usage(o, j, a, nch);
        body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        *status = body ? 200 : 500;
    }
    accs_free(a, nch);
    return body;
}

/* ---- server-sent events -------------------------------------------------------------------- */

struct serve_stream {
    serve_server *s;
    serve_seq *q;
    serve_reply_head h;
    serve_job usage;           /* the prompts' lengths, for the usage (no ids, no stops) */
    reply_acc *a;              /* (nch) */
    int nch, open;             /* choices, and those not ended */
    pe_status error;           /* a choice's error: the stream's */
    int include_usage, return_ids;
    char *stops[CLI_MAX_STOP_STR]; /* copies: the job is gone when the stream runs */
    int nstops;
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

/* A chunk of choice c's new text (and its new tokens' ids and logprobs), with the finish
 * reason when it is the choice's last. */
static void emit_chunk(serve_stream *st, int c, const char *text, size_t len,
                       const char *finish, int role)
{
    reply_acc *a = &st->a[c];
    cJSON *o = head_json(&st->h, 1);
    cJSON *lp = logprobs_json(st->s, a, st->h.chat, 0, a->sent, a->ntok);
    cJSON *ch = choice_json(&st->h, c, 1, text, len, lp, finish, role);
    if (st->return_ids)
        add_ids(ch, a->ids + a->sent, a->ntok - a->sent);
    a->sent = a->ntok;
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    emit_json(st, o);
}

/* Choice c's first chunk under "echo": its prompt's text, and its tokens' logprobs. */
static void emit_echo(serve_stream *st, int c)
{
    const reply_acc *a = &st->a[c];
    cJSON *o = head_json(&st->h, 1);
    cJSON *ch = choice_json(&st->h, c, 1, a->echo->text, strlen(a->echo->text),
                            logprobs_json(st->s, a, 0, 1, 0, 0), NULL, 0);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    emit_json(st, o);
}

/* The end: the error, or the usage chunk when asked for; then [DONE]. */
static void emit_end(serve_stream *st)
{
    if (st->error != PE_OK) {
        char *e = error_text(st->error);
        emit(st, e ? e : "{\"error\": {\"message\": \"out of memory\"}}");
        free(e);
    } else if (st->include_usage) {
        cJSON *o = head_json(&st->h, 1);
        cJSON_AddArrayToObject(o, "choices");
        add_usage(o, &st->usage, st->a, st->nch);
        emit_json(st, o);
    }
    emit(st, "[DONE]");
    st->last = 1;
}

/* Waits for the next event and writes what it adds into out (maybe nothing). */
static void step(serve_stream *st)
{
    const int c = accs_take(st->a, st->q);
    if (c < 0)
        return;
    reply_acc *a = &st->a[c];
    const char *text;
    size_t n;
    cli_text_take(&a->text, &text, &n);
    int new_ids = (st->return_ids || a->logprobs >= 0) && a->ntok > a->sent;
    if (a->ended && a->error == PE_OK)
        emit_chunk(st, c, text, n, a->finish, 0);
    else if (n || new_ids)
        emit_chunk(st, c, text, n, NULL, 0);
    if (a->ended) {
        st->open--;
        if (a->error != PE_OK)
            st->error = a->error;
    }
    if (st->open == 0 || st->error != PE_OK)
        emit_end(st);
}

/* The stream's copy of what the usage needs of j, the prompts' lengths, and what an echo
 * needs: their ids, texts and logprobs. */
static int copy_prompts(serve_job *u, const serve_job *j)
{
    u->prompts = calloc((size_t)j->nprompts, sizeof *u->prompts);
    if (!u->prompts)
        return -1;
    u->nprompts = j->nprompts;
    for (int i = 0; i < j->nprompts; i++) {
        const serve_prompt *p = &j->prompts[i];
        serve_prompt *q = &u->prompts[i];
        q->len = p->len;
        if (!j->echo)
            continue;
        const size_t nlp = p->len > 1 ? p->len - 1 : 1;
        q->ids = malloc(p->len * sizeof *q->ids);
        q->text = strdup(p->text);
        q->lp = p->lp ? malloc(nlp * sizeof *q->lp) : NULL;
        if (!q->ids || !q->text || (p->lp && !q->lp))
            return -1;
        memcpy(q->ids, p->ids, p->len * sizeof *q->ids);
        if (p->lp)
            memcpy(q->lp, p->lp, nlp * sizeof *q->lp);
    }
    return 0;
}

static void stream_free(serve_stream *st)
{
    accs_free(st->a, st->nch);
    for (int k = 0; k < st->nstops; k++)
        free(st->stops[k]);
    serve_prompts_free(st->usage.prompts, st->usage.nprompts);
    free(st->out);
    free(st);
}

serve_stream *serve_reply_stream_new(serve_server *s, const serve_job *j, serve_seq *q)
{
    serve_stream *st = calloc(1, sizeof *st);
    int ok = st != NULL;
    for (int k = 0; ok && k < j->nstops; k++)
        ok = (st->stops[st->nstops++] = strdup(j->stops[k])) != NULL;
    if (ok)
        st->nch = j->nprompts * j->n;
    if (!ok || copy_prompts(&st->usage, j) ||
        !(st->a = accs_new(s, j, st->stops, st->usage.prompts, st->nch))) {
        if (st)
            stream_free(st);
        serve_seq_close(q);
        return NULL;
    }
    st->s = s;
    st->q = q;
    st->open = st->nch;
    st->include_usage = j->include_usage;
    st->return_ids = j->return_ids;
    head_init(&st->h, s, j);
    for (int c = 0; j->chat && c < st->nch; c++) /* OpenAI's first chunks: the role, no text */
        emit_chunk(st, c, "", 0, NULL, 1);
    for (int c = 0; j->echo && c < st->nch; c++)
        emit_echo(st, c);
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
    serve_server *s = st->s;
    serve_seq_close(st->q); /* a client gone mid-stream: cancelled, its KV blocks freed */
    stream_free(st);
    serve_leave(s);
}
