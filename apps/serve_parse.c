/* serve_parse.c: the JSON body of a completion request, checked and turned into a serve_job:
 * the prompt's ids (a chat's messages rendered with the chat template first), max_tokens,
 * the sampling, the stops and the grammar the text follows (structured output). Fields the
 * server does not know are ignored, as OpenAI's clients send many; a known field of the
 * wrong type or out of range is a 400 that names it.
 */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

/* A failure: msg written, the status returned. */
#define BAD(...) (snprintf(msg, msg_len, __VA_ARGS__), 400u)

static const cJSON *field(const cJSON *o, const char *name)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(f) ? NULL : f; /* null is as absent, as OpenAI takes it */
}

/* Optional boolean name of o into *out. Returns 0 or 400. */
static unsigned get_bool(const cJSON *o, const char *name, int *out, char *msg, size_t msg_len)
{
    const cJSON *f = field(o, name);
    if (!f)
        return 0;
    if (!cJSON_IsBool(f))
        return BAD("'%s' must be a boolean (true or false)", name);
    *out = cJSON_IsTrue(f);
    return 0;
}

/* Optional number name of o in [lo, hi] into *out (kept when absent). Returns 0 or 400. */
static unsigned get_number(const cJSON *o, const char *name, double lo, double hi, double *out,
                           char *msg, size_t msg_len)
{
    const cJSON *f = field(o, name);
    if (!f)
        return 0;
    if (!cJSON_IsNumber(f))
        return BAD("'%s' must be a number", name);
    double x = f->valuedouble;
    if (!(x >= lo && x <= hi))
        return BAD("'%s' is %g; give a number from %g to %g", name, x, lo, hi);
    *out = x;
    return 0;
}

/* Optional integer name of o in [lo, hi] into *out (kept when absent); *given set when
 * present. Returns 0 or 400. */
static unsigned get_int(const cJSON *o, const char *name, double lo, double hi, double *out,
                        int *given, char *msg, size_t msg_len)
{
    const cJSON *f = field(o, name);
    if (!f)
        return 0;
    if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble))
        return BAD("'%s' must be an integer", name);
    if (!(f->valuedouble >= lo && f->valuedouble <= hi))
        return BAD("'%s' is %.15g; give an integer from %.15g to %.15g", name, f->valuedouble,
                   lo, hi);
    *out = f->valuedouble;
    if (given)
        *given = 1;
    return 0;
}

/* presence_penalty and frequency_penalty (-2 to 2, as OpenAI's), repetition_penalty (an
 * extension, as vLLM's: > 0, 1 off). */
static unsigned parse_penalties(const cJSON *o, pe_sampling *s, char *msg, size_t msg_len)
{
    double pres = 0, freq = 0, rep = 1;
    unsigned st = get_number(o, "presence_penalty", -2.0, 2.0, &pres, msg, msg_len);
    if (!st)
        st = get_number(o, "frequency_penalty", -2.0, 2.0, &freq, msg, msg_len);
    if (!st)
        st = get_number(o, "repetition_penalty", 0.0, 100.0, &rep, msg, msg_len);
    if (!st && rep <= 0.0)
        st = BAD("'repetition_penalty' 0 would divide by 0; give a number above 0 (1: off)");
    s->presence_penalty = (float)pres;
    s->frequency_penalty = (float)freq;
    s->repetition_penalty = (float)rep;
    return st;
}

/* logit_bias: {"token id": bias from -100 to 100}, at most PE_MAX_LOGIT_BIAS of them, as
 * OpenAI's (the engine checks the ids against the vocabulary). */
static unsigned parse_logit_bias(const cJSON *o, serve_job *j, char *msg, size_t msg_len)
{
    const cJSON *f = field(o, "logit_bias");
    if (!f)
        return 0;
    if (!cJSON_IsObject(f))
        return BAD("'logit_bias' must be an object of token ids (as strings) to biases");
    const cJSON *b;
    cJSON_ArrayForEach(b, f) {
        char *end = NULL;
        long id = strtol(b->string, &end, 10);
        if (!*b->string || *end || id < 0 || id > INT32_MAX)
            return BAD("'logit_bias' key \"%.40s\" is not a token id; give ids as strings, "
                       "e.g. {\"50256\": -100}", b->string);
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100.0 && b->valuedouble <= 100.0))
            return BAD("'logit_bias' of token %ld must be a number from -100 to 100", id);
        if (j->nbias == PE_MAX_LOGIT_BIAS)
            return BAD("'logit_bias' has more than %d tokens; give at most %d",
                       PE_MAX_LOGIT_BIAS, PE_MAX_LOGIT_BIAS);
        j->bias[j->nbias++] = (pe_logit_bias){(int32_t)id, (float)b->valuedouble};
    }
    return 0;
}

/* temperature, top_p, top_k and min_p (extensions; top_k -1 or 0: off), seed (absent: a
 * fresh one), the penalties and the logit bias. */
static unsigned parse_sampling(const cJSON *o, serve_job *j, char *msg, size_t msg_len)
{
    double t = 1.0, p = 1.0, k = 0, mp = 0, seed = 0;
    int seeded = 0;
    unsigned st = get_number(o, "temperature", 0.0, 2.0, &t, msg, msg_len);
    if (!st)
        st = get_number(o, "top_p", 0.0, 1.0, &p, msg, msg_len);
    if (!st && p <= 0.0)
        st = BAD("'top_p' 0 keeps no token; give a number in (0, 1]");
    if (!st)
        st = get_int(o, "top_k", -1, 1 << 30, &k, NULL, msg, msg_len);
    if (!st)
        st = get_number(o, "min_p", 0.0, 1.0, &mp, msg, msg_len);
    if (!st)
        st = get_int(o, "seed", -9.2e18, 1.8e19, &seed, &seeded, msg, msg_len);
    if (!st)
        st = parse_penalties(o, &j->sampling, msg, msg_len);
    if (!st)
        st = parse_logit_bias(o, j, msg, msg_len);
    if (st)
        return st;
    j->sampling.temperature = (float)t;
    j->sampling.top_p = (float)p;
    j->sampling.top_k = k < 0 ? 0 : (int)k;
    j->sampling.min_p = (float)mp;
    if (seeded) {
        j->sampling.seed = seed < 0 ? (uint64_t)(int64_t)seed : (uint64_t)seed;
    } else { /* OpenAI samples afresh without a seed */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->sampling.seed = (uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec;
    }
    return 0;
}

/* Log-probabilities. A completion's "logprobs": an integer 0..PE_MAX_LOGPROBS, the most
 * likely tokens to list beside each chosen one's. A chat's "logprobs": true, with
 * "top_logprobs" 0..PE_MAX_LOGPROBS (which needs "logprobs": true, as OpenAI's). */
static unsigned parse_logprobs(const cJSON *o, serve_job *j, char *msg, size_t msg_len)
{
    j->logprobs = -1;
    double k = -1;
    int given = 0;
    unsigned st;
    if (!j->chat) {
        st = get_int(o, "logprobs", 0, PE_MAX_LOGPROBS, &k, &given, msg, msg_len);
        if (!st && given)
            j->logprobs = (int)k;
        return st;
    }
    int on = 0;
    st = get_bool(o, "logprobs", &on, msg, msg_len);
    if (!st)
        st = get_int(o, "top_logprobs", 0, PE_MAX_LOGPROBS, &k, &given, msg, msg_len);
    if (st)
        return st;
    if (given && !on)
        return BAD("'top_logprobs' needs \"logprobs\": true");
    if (on)
        j->logprobs = given ? (int)k : 0;
    return 0;
}

/* Most "stop_token_ids": with the stop strings' ids (CLI_MAX_STOP_STR) and a chat's end of
 * turn they stay within PE_MAX_STOP. */
#define SERVE_MAX_STOP_IDS (PE_MAX_STOP - CLI_MAX_STOP_STR - 1)

/* stop_token_ids (vLLM's): token ids that end the sequence, as its eos does. */
static unsigned parse_stop_ids(const serve_server *s, const cJSON *o, serve_job *j, char *msg,
                               size_t msg_len)
{
    const cJSON *f = field(o, "stop_token_ids");
    if (!f)
        return 0;
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > SERVE_MAX_STOP_IDS)
        return BAD("'stop_token_ids' must be an array of at most %d token ids",
                   SERVE_MAX_STOP_IDS);
    const cJSON *x;
    cJSON_ArrayForEach(x, f)
    {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v != floor(v) || v < 0 || v >= s->m.vocab)
            return BAD("'stop_token_ids' entries must be token ids from 0 to %d",
                       s->m.vocab - 1);
        j->stop_ids[j->nstop_ids++] = (int32_t)v;
    }
    return 0;
}

/* stop: a string or an array of at most CLI_MAX_STOP_STR strings. A stop string that is one
 * token also becomes a stop id, so the engine ends there without a wasted step. */
static unsigned parse_stops(const serve_server *s, const cJSON *o, serve_job *j, char *msg,
                            size_t msg_len)
{
    unsigned st = parse_stop_ids(s, o, j, msg, msg_len);
    const cJSON *f = field(o, "stop");
    if (st || !f)
        return st;
    if (!cJSON_IsString(f) && !cJSON_IsArray(f))
        return BAD("'stop' must be a string or an array of strings");
    int n = cJSON_IsString(f) ? 1 : cJSON_GetArraySize(f);
    if (n > CLI_MAX_STOP_STR)
        return BAD("'stop' has %d strings; give at most %d", n, CLI_MAX_STOP_STR);
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_IsString(f) ? f : cJSON_GetArrayItem(f, i);
        if (!cJSON_IsString(x) || !x->valuestring[0])
            return BAD("'stop' entries must be non-empty strings");
        if (!(j->stops[j->nstops] = strdup(x->valuestring))) {
            snprintf(msg, msg_len, "out of memory");
            return 500;
        }
        j->nstops++;
        int32_t *ids = NULL;
        size_t nids = 0;
        if (pe_tokenizer_encode(s->tk, x->valuestring, strlen(x->valuestring), 0, &ids,
                                &nids) == PE_OK && nids == 1 && j->nstop_ids < PE_MAX_STOP)
            j->stop_ids[j->nstop_ids++] = ids[0];
        free(ids);
    }
    return 0;
}

/* ---- the prompt ---------------------------------------------------------------------------- */

static unsigned encode(const serve_server *s, const char *text, serve_prompt *p, char *msg,
                       size_t msg_len)
{
    if (pe_tokenizer_encode(s->tk, text, strlen(text), 1, &p->ids, &p->len) != PE_OK) {
        snprintf(msg, msg_len, "cannot encode the prompt: %s", pe_last_error());
        return 500;
    }
    return 0;
}

/* j's room for np prompts (zeroed). Returns 0 or 500. */
static unsigned new_prompts(serve_job *j, int np, char *msg, size_t msg_len)
{
    if (!(j->prompts = calloc((size_t)np, sizeof *j->prompts))) {
        snprintf(msg, msg_len, "out of memory for the prompt");
        return 500;
    }
    j->nprompts = np;
    return 0;
}

/* One prompt from x, named `name` in messages: a string (kept for an echo) or an array of
 * token ids. */
static unsigned one_prompt(const serve_server *s, const cJSON *x, const char *name, int echo,
                           serve_prompt *p, char *msg, size_t msg_len)
{
    if (cJSON_IsString(x) && echo && !(p->text = strdup(x->valuestring))) {
        snprintf(msg, msg_len, "out of memory for the prompt");
        return 500;
    }
    if (cJSON_IsString(x))
        return encode(s, x->valuestring, p, msg, msg_len);
    if (!cJSON_IsArray(x))
        return BAD("'%s' must be a string or an array of token ids (or an array of those: "
                   "several prompts)", name);
    int n = cJSON_GetArraySize(x);
    if (n == 0)
        return BAD("'%s' is an empty array; give some text or token ids", name);
    if (!(p->ids = malloc((size_t)n * sizeof *p->ids))) {
        snprintf(msg, msg_len, "out of memory for the prompt");
        return 500;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, x)
    {
        double id = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (id != floor(id) || id < 0 || id >= s->m.vocab)
            return BAD("'%s' entries must be token ids from 0 to %d", name, s->m.vocab - 1);
        p->ids[p->len++] = (int32_t)id;
    }
    return 0;
}

/* "prompt": a string or an array of token ids (one prompt), or an array of several of
 * those (OpenAI's batch: each prompt gets n choices, in order). */
static unsigned parse_prompt(const serve_server *s, const cJSON *o, serve_job *j, char *msg,
                             size_t msg_len)
{
    const cJSON *f = field(o, "prompt");
    if (!f)
        return BAD("'prompt' is required: a string (or an array of token ids)");
    const int several = cJSON_IsArray(f) && f->child &&
                        (cJSON_IsString(f->child) || cJSON_IsArray(f->child));
    const int np = several ? cJSON_GetArraySize(f) : 1;
    if (np > SERVE_MAX_CHOICES)
        return BAD("'prompt' holds %d prompts; give at most %d", np, SERVE_MAX_CHOICES);
    unsigned st = new_prompts(j, np, msg, msg_len);
    for (int i = 0; !st && i < np; i++) {
        char name[32] = "prompt";
        if (several)
            snprintf(name, sizeof name, "prompt[%d]", i);
        st = one_prompt(s, several ? cJSON_GetArrayItem(f, i) : f, name, j->echo,
                        &j->prompts[i], msg, msg_len);
    }
    return st;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts
 * (joined). Returns a malloc'ed string, or NULL with msg set (*st the status). */
static char *message_text(const cJSON *content, int i, unsigned *st, char *msg, size_t msg_len)
{
    if (cJSON_IsString(content))
        return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        *st = BAD("messages[%d].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *text = field(part, "text");
        if (!cJSON_IsString(text)) {
            *st = BAD("messages[%d].content holds a part without text; only text parts are "
                      "supported", i);
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    out[0] = '\0';
    cJSON_ArrayForEach(part, content)
        strcat(out, field(part, "text")->valuestring);
    return out;
}

/* Appends s2 to *s (both malloc'ed strings; s2 freed). Returns 0, or -1 out of memory. */
static int append(char **s, char *s2)
{
    if (!s2)
        return -1;
    size_t a = *s ? strlen(*s) : 0, b = strlen(s2);
    char *r = realloc(*s, a + b + 1);
    if (r) {
        memcpy(r + a, s2, b + 1);
        *s = r;
    }
    free(s2);
    return r ? 0 : -1;
}

/* A message's role: 0 system, 1 user, 2 assistant, -1 none of them. */
static int role_of(const cJSON *m)
{
    const cJSON *r = field(m, "role");
    if (!cJSON_IsString(r))
        return -1;
    return !strcmp(r->valuestring, "system") ? 0 : !strcmp(r->valuestring, "user") ? 1
         : !strcmp(r->valuestring, "assistant") ? 2 : -1;
}

/* The conversation's text: the first user turn with the system message, each assistant
 * reply after its turn, each later turn closing the reply before it (its end token). */
static unsigned render_chat(const serve_server *s, const cJSON *msgs, char **text, char *msg,
                            size_t msg_len)
{
    int n = cJSON_GetArraySize(msgs), i = 0, turn = 0;
    unsigned st = 0;
    char *system = NULL;
    if (n > 0 && role_of(cJSON_GetArrayItem(msgs, 0)) == 0) {
        system = message_text(field(cJSON_GetArrayItem(msgs, 0), "content"), 0, &st, msg,
                              msg_len);
        i = 1;
    }
    for (; !st && i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(msgs, i);
        int role = role_of(m), want = turn % 2 == 0 ? 1 : 2;
        if (role != want) {
            st = BAD("messages[%d] must have role '%s': the messages are an optional system "
                     "message, then user and assistant turns in turn, ending with a user's",
                     i, want == 1 ? "user" : "assistant");
            break;
        }
        char *content = message_text(field(m, "content"), i, &st, msg, msg_len);
        if (!content) {
            if (!st)
                st = 500, snprintf(msg, msg_len, "out of memory");
            break;
        }
        char *piece = role == 2 ? content
                                : cli_chat_turn_text(s->chat, turn == 0, 0, system, content);
        if (role == 1)
            free(content);
        if (append(text, piece))
            st = 500, snprintf(msg, msg_len, "out of memory");
        turn++;
    }
    free(system);
    if (!st && turn % 2 == 0)
        st = BAD("the last message must be the user's (give at least one user message)");
    return st;
}

static unsigned parse_messages(const serve_server *s, const cJSON *o, serve_job *j, char *msg,
                               size_t msg_len)
{
    const cJSON *f = field(o, "messages");
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0)
        return BAD("'messages' is required: an array of {\"role\", \"content\"} objects");
    if (!s->chat)
        return BAD("this model has no chat template; restart the server with --chat-template "
                   "NAME (%s), or use /v1/completions", cli_chat_template_names());
    char *text = NULL;
    unsigned st = render_chat(s, f, &text, msg, msg_len);
    if (!st)
        st = new_prompts(j, 1, msg, msg_len);
    if (!st)
        st = encode(s, text, &j->prompts[0], msg, msg_len);
    free(text);
    if (!st) /* a reply ends at the template's end of turn */
        j->stop_ids[j->nstop_ids++] = s->chat_end_id;
    return st;
}

unsigned serve_parse_tokenize(const serve_server *s, const char *body, size_t len,
                              int32_t **ids, size_t *n, char *msg, size_t msg_len)
{
    *ids = NULL;
    *n = 0;
    cJSON *o = cJSON_ParseWithLength(body, len);
    serve_job j;
    memset(&j, 0, sizeof j);
    int special = 1;
    unsigned st = 0;
    const cJSON *prompt = o ? field(o, "prompt") : NULL;
    if (!o || !cJSON_IsObject(o))
        st = BAD("the body must be a JSON object with \"prompt\" or \"messages\"");
    else if (!prompt && !field(o, "messages"))
        st = BAD("give \"prompt\" (a string) or \"messages\" (a chat) to tokenize");
    else if (prompt && !cJSON_IsString(prompt))
        st = BAD("'prompt' must be a string");
    else if (!(st = get_bool(o, "add_special_tokens", &special, msg, msg_len)) && prompt &&
             pe_tokenizer_encode(s->tk, prompt->valuestring, strlen(prompt->valuestring),
                                 special, ids, n) != PE_OK)
        st = 500, snprintf(msg, msg_len, "cannot encode the prompt: %s", pe_last_error());
    if (!st && !prompt && !(st = parse_messages(s, o, &j, msg, msg_len))) {
        *ids = j.prompts[0].ids; /* handed over */
        *n = j.prompts[0].len;
        j.prompts[0].ids = NULL;
    }
    serve_job_free(&j);
    cJSON_Delete(o);
    return st;
}

/* A chat's default max_tokens at most: a default of the whole context would let a chat that
 * never ends hold a slot and its KV blocks for as long as the context lasts. */
#define SERVE_CHAT_DEFAULT_MAX 1024

/* max_tokens (chat: also max_completion_tokens): each prompt and the tokens must fit the
 * context, as OpenAI requires; the default is 16 for completions (OpenAI's), the rest of
 * the context up to SERVE_CHAT_DEFAULT_MAX for a chat. */
static unsigned parse_max_tokens(const serve_server *s, const cJSON *o, serve_job *j,
                                 char *msg, size_t msg_len)
{
    size_t longest = 0;
    for (int i = 0; i < j->nprompts; i++) {
        if (j->prompts[i].len == 0)
            return BAD("the prompt is empty and the tokenizer adds no BOS token; give some "
                       "text");
        if (j->prompts[i].len > longest)
            longest = j->prompts[i].len;
    }
    long room = (long)s->m.context - (long)longest;
    if (room <= 0)
        return BAD("the prompt is %zu tokens but the model's context holds %d positions, one "
                   "of them for the first generated token; shorten it to at most %d tokens",
                   longest, s->m.context, s->m.context - 1);
    long dflt = j->chat ? SERVE_CHAT_DEFAULT_MAX : 16;
    double x = (double)(room < dflt ? room : dflt);
    const char *name = j->chat && field(o, "max_completion_tokens") ? "max_completion_tokens"
                                                                    : "max_tokens";
    unsigned st = get_int(o, name, -1e300, 1e300, &x, NULL, msg, msg_len);
    if (st)
        return st;
    if (x < 1)
        return BAD("'%s' is %.15g; give at least 1", name, x);
    if (x > (double)room)
        return BAD("'%s' is %.15g, but the prompt (%zu tokens) leaves %ld of the model's %d "
                   "positions; give at most %ld", name, x, longest, room, s->m.context,
                   room);
    j->max_tokens = (int)x;
    double m = 0; /* min_tokens (vLLM's): no end before it */
    st = get_int(o, "min_tokens", 0, x, &m, NULL, msg, msg_len);
    j->min_tokens = (int)m;
    return st;
}

/* ---- structured output ------------------------------------------------------------------ */

/* Most "guided_choice" texts. */
#define SERVE_MAX_GUIDED_CHOICES 4096

/* What a request constrains its text to: at most one field of response_format, guided_*
 * and structured_outputs says it. */
typedef enum { CON_NONE, CON_JSON_OBJECT, CON_SCHEMA, CON_REGEX, CON_CHOICE } con_kind;

typedef struct constraint {
    con_kind kind;
    const char *field;  /* the field that says it, for messages */
    const char *where;  /* ... and where its value is (a schema's: inside response_format) */
    const cJSON *v;     /* the value: the schema, the pattern, the array of choices */
} constraint;

/* The constraint of field (at where, value v) into *c: a 400 when *c has one already. */
static unsigned add_constraint(constraint *c, con_kind kind, const char *field,
                               const char *where, const cJSON *v, char *msg, size_t msg_len)
{
    if (c->kind != CON_NONE)
        return BAD("'%s' and '%s' each constrain the text, and a request takes one; give one "
                   "of them", c->field, field);
    *c = (constraint){kind, field, where, v};
    return 0;
}

/* "response_format" (OpenAI's): {"type": "text"} (the default), {"type": "json_object"}
 * (JSON mode: the text is one JSON object) or {"type": "json_schema", "json_schema":
 * {"name": ..., "schema": {...}, "strict": ...}} (one the schema accepts). */
static unsigned parse_response_format(const cJSON *o, constraint *c, char *msg,
                                      size_t msg_len)
{
    const cJSON *rf = field(o, "response_format");
    if (!rf)
        return 0;
    const cJSON *type = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    if (!cJSON_IsString(type))
        return BAD("'response_format' must be an object with a string 'type': {\"type\": "
                   "\"json_object\"}, {\"type\": \"json_schema\", ...} or {\"type\": "
                   "\"text\"}");
    if (!strcmp(type->valuestring, "json_object"))
        return add_constraint(c, CON_JSON_OBJECT, "response_format", "response_format", NULL,
                              msg, msg_len);
    if (!strcmp(type->valuestring, "json_schema")) {
        const cJSON *js = field(rf, "json_schema");
        const cJSON *schema = cJSON_IsObject(js) ? field(js, "schema") : NULL;
        if (!cJSON_IsObject(schema))
            return BAD("'response_format' type 'json_schema' needs 'json_schema': {\"name\": "
                       "..., \"schema\": {...}}, the schema an object");
        return add_constraint(c, CON_SCHEMA, "response_format",
                              "response_format.json_schema.schema", schema, msg, msg_len);
    }
    if (strcmp(type->valuestring, "text") != 0)
        return BAD("'response_format' type '%.64s' is unknown; give 'json_object', "
                   "'json_schema' or 'text'",
                   type->valuestring);
    return 0;
}

/* vLLM's guided_json, guided_regex and guided_choice, and its newer structured_outputs
 * {"json", "regex", "choice"}: their values are checked when compiled. */
static unsigned parse_guided(const cJSON *o, constraint *c, char *msg, size_t msg_len)
{
    static const struct {
        const char *guided, *key, *structured;
        con_kind kind;
    } fields[] = {{"guided_json", "json", "structured_outputs.json", CON_SCHEMA},
                  {"guided_regex", "regex", "structured_outputs.regex", CON_REGEX},
                  {"guided_choice", "choice", "structured_outputs.choice", CON_CHOICE}};
    const cJSON *so = field(o, "structured_outputs");
    if (so && !cJSON_IsObject(so))
        return BAD("'structured_outputs' must be an object: {\"regex\": PATTERN}, {\"choice\": "
                   "[TEXT, ...]} or {\"json\": SCHEMA}");
    unsigned st = 0;
    for (size_t k = 0; !st && k < sizeof fields / sizeof fields[0]; k++) {
        const cJSON *v = field(o, fields[k].guided), *w = so ? field(so, fields[k].key) : NULL;
        if (v)
            st = add_constraint(c, fields[k].kind, fields[k].guided, fields[k].guided, v, msg,
                                msg_len);
        if (!st && w)
            st = add_constraint(c, fields[k].kind, fields[k].structured, fields[k].structured,
                                w, msg, msg_len);
    }
    return st;
}

/* The texts of c's array of choices (malloc'ed, *n of them; pointers into the array's
 * strings). Returns 0, or the status with msg set. */
static unsigned choice_texts(const constraint *c, const char ***out, size_t *n, char *msg,
                             size_t msg_len)
{
    const int size = cJSON_IsArray(c->v) ? cJSON_GetArraySize(c->v) : 0;
    if (size < 1 || size > SERVE_MAX_GUIDED_CHOICES)
        return BAD("'%s' must be an array of 1 to %d strings, the texts the answer may be",
                   c->field, SERVE_MAX_GUIDED_CHOICES);
    if (!(*out = malloc((size_t)size * sizeof **out))) {
        snprintf(msg, msg_len, "out of memory for a request's '%s'", c->field);
        return 500;
    }
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, c->v) {
        if (!cJSON_IsString(x))
            return BAD("'%s' entries must be strings, the texts the answer may be", c->field);
        (*out)[(*n)++] = x->valuestring;
    }
    return 0;
}

/* c's value checked for its kind: a pattern is a string; choices are an array of strings
 * (into *texts, malloc'ed, *n of them); a schema is an object (printed into *schema, to
 * cJSON_free) or a string holding one (guided_json may give it so). Returns 0, or the status
 * with msg set. */
static unsigned check_value(const constraint *c, const char ***texts, size_t *n,
                            char **schema, char *msg, size_t msg_len)
{
    switch (c->kind) {
    case CON_REGEX:
        if (!cJSON_IsString(c->v))
            return BAD("'%s' must be a string: a regular expression the whole text matches",
                       c->field);
        return 0;
    case CON_CHOICE:
        return choice_texts(c, texts, n, msg, msg_len);
    default: /* CON_SCHEMA */
        if (cJSON_IsString(c->v))
            return 0;
        if (!cJSON_IsObject(c->v))
            return BAD("'%s' must be a JSON schema: an object, or a string holding one",
                       c->field);
        if (!(*schema = cJSON_PrintUnformatted(c->v))) {
            snprintf(msg, msg_len, "out of memory for a request's schema");
            return 500;
        }
        return 0;
    }
}

/* c's grammar into j: JSON mode is the server's own (j->json_object); a schema's, a regex's
 * or the choices' is compiled over its table (well under a millisecond for a small one).
 * Returns 0, or the status with msg set: 400 for a value of the wrong type or one the
 * library refuses (its message after where the value is), 500 when out of memory. */
static unsigned compile_constraint(const serve_server *s, const constraint *c, serve_job *j,
                                   char *msg, size_t msg_len)
{
    if (c->kind == CON_NONE)
        return 0;
    if (!s->json_grammar)
        return BAD("'%s' needs the model's tokenizer, and this server runs without one",
                   c->field);
    if (c->kind == CON_JSON_OBJECT) {
        j->json_object = 1;
        return 0;
    }
    const char **texts = NULL;
    size_t n = 0;
    char *schema = NULL;
    pe_status ps = PE_OK;
    unsigned st = check_value(c, &texts, &n, &schema, msg, msg_len);
    if (!st)
        ps = c->kind == CON_REGEX  ? pe_grammar_regex(s->json_grammar, c->v->valuestring,
                                                      &j->grammar)
           : c->kind == CON_CHOICE ? pe_grammar_choice(s->json_grammar, texts, n, &j->grammar)
           : pe_grammar_json_schema(s->json_grammar, schema ? schema : c->v->valuestring,
                                    &j->grammar);
    free(texts);
    cJSON_free(schema);
    if (st || ps == PE_OK)
        return st;
    if (ps == PE_ENOMEM) {
        snprintf(msg, msg_len, "%s", pe_last_error());
        return 500;
    }
    return BAD("'%s': %s", c->where, pe_last_error());
}

/* The one constraint on the text, if any (parse_response_format, parse_guided), compiled. */
static unsigned parse_constraint(const serve_server *s, const cJSON *o, serve_job *j,
                                 char *msg, size_t msg_len)
{
    constraint c = {CON_NONE, NULL, NULL, NULL};
    unsigned st = parse_response_format(o, &c, msg, msg_len);
    if (!st)
        st = parse_guided(o, &c, msg, msg_len);
    return st ? st : compile_constraint(s, &c, j, msg, msg_len);
}

static unsigned parse_fields(const serve_server *s, const cJSON *o, serve_job *j, char *msg,
                             size_t msg_len)
{
    if (!cJSON_IsObject(o))
        return BAD("the body must be a JSON object");
    double n = 1;
    unsigned st = get_int(o, "n", 1, SERVE_MAX_CHOICES, &n, NULL, msg, msg_len);
    if (st)
        return st;
    j->n = (int)n;
    if ((st = get_bool(o, "stream", &j->stream, msg, msg_len)) ||
        (st = get_bool(o, "return_token_ids", &j->return_ids, msg, msg_len)) ||
        (st = get_bool(o, "ignore_eos", &j->ignore_eos, msg, msg_len)) ||
        (st = get_bool(o, "include_stop_str_in_output", &j->include_stop, msg, msg_len)) ||
        (!j->chat && (st = get_bool(o, "echo", &j->echo, msg, msg_len))))
        return st;
    const cJSON *so = field(o, "stream_options");
    if (so && !cJSON_IsObject(so))
        return BAD("'stream_options' must be an object");
    if (so && (st = get_bool(so, "include_usage", &j->include_usage, msg, msg_len)))
        return st;
    if ((st = parse_sampling(o, j, msg, msg_len)) || (st = parse_logprobs(o, j, msg, msg_len)) ||
        (st = parse_stops(s, o, j, msg, msg_len)) ||
        (st = parse_constraint(s, o, j, msg, msg_len)))
        return st;
    st = j->chat ? parse_messages(s, o, j, msg, msg_len) : parse_prompt(s, o, j, msg, msg_len);
    if (!st && j->nprompts * j->n > SERVE_MAX_CHOICES)
        st = BAD("%d prompts with 'n' %d make %d choices; give at most %d", j->nprompts, j->n,
                 j->nprompts * j->n, SERVE_MAX_CHOICES);
    return st ? st : parse_max_tokens(s, o, j, msg, msg_len);
}

unsigned serve_parse(const serve_server *s, int chat, const char *body, size_t len,
                     serve_job *j, char *msg, size_t msg_len)
{
    memset(j, 0, sizeof *j);
    j->chat = chat;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    unsigned st;
    if (!o) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        st = BAD("the body is not valid JSON (near byte %zu)", at);
    } else {
        st = parse_fields(s, o, j, msg, msg_len);
    }
    cJSON_Delete(o);
    if (st)
        serve_job_free(j);
    return st;
}

void serve_prompts_free(serve_prompt *p, int n)
{
    for (int i = 0; p && i < n; i++) {
        free(p[i].ids);
        free(p[i].text);
        free(p[i].lp);
    }
    free(p);
}

void serve_job_free(serve_job *j)
{
    serve_prompts_free(j->prompts, j->nprompts);
    for (int i = 0; i < j->nstops; i++)
        free(j->stops[i]);
    pe_grammar_free(j->grammar);
    memset(j, 0, sizeof *j);
}
