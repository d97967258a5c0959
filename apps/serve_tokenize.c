/* serve_tokenize.c: POST /tokenize and POST /detokenize (vLLM's): the server's own
 * tokenizer, so that a client counts a prompt's tokens, or reads ids, as the server does. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* o printed (and deleted), with status 200; 500 when out of memory. */
static char *answer(cJSON *o, unsigned *status)
{
    char *body = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    *status = body ? 200 : 500;
    return body ? body : serve_error_json(500, "out of memory for the answer");
}

char *serve_tokenize(const serve_server *s, const char *body, size_t len, unsigned *status)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[CLI_MSG_LEN];
    unsigned st = serve_parse_tokenize(s, body, len, &ids, &n, msg, sizeof msg);
    if (st) {
        *status = st;
        return serve_error_json(st, msg);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)n);
    cJSON_AddNumberToObject(o, "max_model_len", s->m.context);
    cJSON *t = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
    free(ids);
    return answer(o, status);
}

/* {"tokens": [ids]}: ids of the vocabulary into *ids (malloc'ed, *n). 0, or 400 / 500 with
 * msg set. */
static unsigned parse_ids(const serve_server *s, const char *body, size_t len, int32_t **ids,
                          size_t *n, char *msg, size_t msg_len)
{
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *t = o ? cJSON_GetObjectItemCaseSensitive(o, "tokens") : NULL;
    unsigned st = 0;
    if (!cJSON_IsArray(t)) {
        snprintf(msg, msg_len, "the body must be {\"tokens\": [token ids]}");
        st = 400;
    } else if (!(*ids = malloc(((size_t)cJSON_GetArraySize(t) + 1) * sizeof **ids))) {
        snprintf(msg, msg_len, "out of memory for the tokens");
        st = 500;
    }
    const cJSON *x;
    if (!st)
        cJSON_ArrayForEach(x, t)
        {
            double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
            if (v != floor(v) || v < 0 || v >= s->m.vocab) {
                snprintf(msg, msg_len, "'tokens' entries must be token ids from 0 to %d",
                         s->m.vocab - 1);
                st = 400;
                break;
            }
            (*ids)[(*n)++] = (int32_t)v;
        }
    cJSON_Delete(o);
    return st;
}

char *serve_detokenize(const serve_server *s, const char *body, size_t len, unsigned *status)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[CLI_MSG_LEN], *text = NULL;
    size_t tlen = 0;
    unsigned st = parse_ids(s, body, len, &ids, &n, msg, sizeof msg);
    if (!st && pe_tokenizer_decode(s->tk, ids, n, 0, &text, &tlen) != PE_OK) {
        snprintf(msg, sizeof msg, "cannot decode the tokens: %s", pe_last_error());
        st = 400;
    }
    free(ids);
    if (st) {
        free(text);
        *status = st;
        return serve_error_json(st, msg);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text ? text : "");
    free(text);
    return answer(o, status);
}
