/* text_stream.c: a generated sequence's text as its ids arrive, cut before the first text
 * stop string (text_stream.h).
 *
 * Nothing shown can begin a stop string: what is taken leaves out the longest end of the
 * text that is the beginning of some stop string. So the text shown never has to be taken
 * back, and each id's text is searched only with the few bytes before it. */
#include "text_stream.h"

#include <stdlib.h>
#include <string.h>

pe_status cli_text_init(cli_text *t, const pe_tokenizer *tk, const char *const *stops,
                        int nstops)
{
    memset(t, 0, sizeof *t);
    t->stops = stops;
    t->nstops = nstops;
    for (int k = 0; k < nstops; k++) {
        size_t m = strlen(stops[k]);
        if (m > 0 && m - 1 > t->held_max)
            t->held_max = m - 1;
    }
    return pe_detokenizer_create(tk, 1, &t->d);
}

void cli_text_free(cli_text *t)
{
    pe_detokenizer_free(t->d);
    free(t->text);
    memset(t, 0, sizeof *t);
}

/* The bytes at the end of the text that begin some stop string (at most held_max). */
static size_t held_back(const cli_text *t)
{
    size_t held = 0;
    for (int k = 0; k < t->nstops; k++) {
        size_t m = strlen(t->stops[k]);
        if (m == 0)
            continue;
        for (size_t n = m - 1 < t->len - t->shown ? m - 1 : t->len - t->shown; n > held; n--)
            if (!memcmp(t->text + t->len - n, t->stops[k], n)) {
                held = n;
                break;
            }
    }
    return held;
}

/* Cuts the text before the first stop string that starts at or after byte from, if any. */
static void find_stop(cli_text *t, size_t from)
{
    const char *first = NULL;
    for (int k = 0; k < t->nstops; k++) {
        const char *p = memmem(t->text + from, t->len - from, t->stops[k], strlen(t->stops[k]));
        if (p && (!first || p < first))
            first = p;
    }
    if (first) {
        t->len = (size_t)(first - t->text);
        t->text[t->len] = '\0';
        t->stopped = 1;
    }
}

static pe_status append(cli_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->text, cap);
        if (!p)
            return PE_ENOMEM;
        t->text = p;
        t->cap = cap;
    }
    /* a stop string found now holds a new byte: it starts at most held_max bytes back */
    size_t from = t->len > t->held_max ? t->len - t->held_max : 0;
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = '\0';
    find_stop(t, from > t->shown ? from : t->shown);
    return PE_OK;
}

pe_status cli_text_push(cli_text *t, int32_t id)
{
    if (t->stopped || t->done)
        return PE_OK;
    const char *piece;
    size_t n;
    pe_status s = pe_detokenizer_push(t->d, id, &piece, &n);
    if (s == PE_EINVAL) /* not the tokenizer's: no text */
        return PE_OK;
    return s == PE_OK ? append(t, piece, n) : s;
}

pe_status cli_text_finish(cli_text *t)
{
    if (t->stopped || t->done)
        return PE_OK;
    const char *piece;
    size_t n;
    pe_status s = pe_detokenizer_flush(t->d, &piece, &n);
    if (s == PE_OK)
        s = append(t, piece, n);
    t->done = 1;
    return s;
}

void cli_text_take(cli_text *t, const char **out, size_t *n)
{
    size_t end = t->stopped || t->done ? t->len : t->len - held_back(t);
    *out = t->text ? t->text + t->shown : "";
    *n = end > t->shown ? end - t->shown : 0;
    if (end > t->shown)
        t->shown = end;
}
