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

/* The first byte a stop string may start at: past what was shown and what is exempt. */
static size_t searched_from(const cli_text *t)
{
    return t->shown > t->search_from ? t->shown : t->search_from;
}

/* The bytes at the end of the text that begin some stop string (at most held_max). */
static size_t held_back(const cli_text *t)
{
    size_t held = 0;
    const size_t from = searched_from(t), open = t->len > from ? t->len - from : 0;
    for (int k = 0; k < t->nstops && t->free_ids == 0; k++) {
        size_t m = strlen(t->stops[k]);
        if (m == 0)
            continue;
        for (size_t n = m - 1 < open ? m - 1 : open; n > held; n--)
            if (!memcmp(t->text + t->len - n, t->stops[k], n)) {
                held = n;
                break;
            }
    }
    return held;
}

/* Cuts the text before (keep_stop: after) the first stop string that starts at or after
 * byte from, if any; of two that start there, the first given. */
static void find_stop(cli_text *t, size_t from)
{
    const char *first = NULL;
    size_t first_len = 0;
    for (int k = 0; k < t->nstops; k++) {
        const size_t m = strlen(t->stops[k]);
        const char *p = memmem(t->text + from, t->len - from, t->stops[k], m);
        if (p && (!first || p < first))
            first = p, first_len = m;
    }
    if (first) {
        t->len = (size_t)(first - t->text) + (t->keep_stop ? first_len : 0);
        t->text[t->len] = '\0';
        t->stopped = 1;
    }
}

/* Appends s (n bytes); the stop strings are looked for in it unless free_ids says not. */
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
    if (t->free_ids > 0)
        t->search_from = t->len; /* this id's text is exempt */
    else
        find_stop(t, from > searched_from(t) ? from : searched_from(t));
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
        s = PE_OK, piece = "", n = 0;
    if (s == PE_OK)
        s = append(t, piece, n);
    if (t->free_ids > 0)
        t->free_ids--;
    return s;
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
