/* text_stream.h: a generated sequence's text as its ids arrive: whole characters only
 * (pe_detokenizer), cut before the first text stop string. The bytes at the end that may
 * still begin a stop string are held back until the next ids show they do not. The text of
 * the first free_ids ids (a request's min_tokens) is not searched: a stop string counts in
 * the text that comes after it. */
#ifndef PE_APPS_TEXT_STREAM_H
#define PE_APPS_TEXT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"

#define CLI_MAX_STOP_STR 4 /* --stop strings */

typedef struct cli_text {
    pe_detokenizer *d;         /* special tokens skipped */
    const char *const *stops;  /* (nstops) non-empty stop strings, borrowed */
    int nstops;
    size_t held_max;           /* the longest stop string's length - 1 */
    char *text;                /* (len) the text so far, cut before the stop once found */
    size_t len, cap;
    size_t shown;              /* bytes already handed out by cli_text_take */
    int free_ids;              /* ids still to come whose text no stop string ends (set it
                                * after cli_text_init; 0 by default) */
    size_t search_from;        /* stop strings are looked for from this byte on */
    int keep_stop;             /* 1: the text ends after the stop string found, not before
                                * (set after cli_text_init) */
    int stopped;               /* a stop string was found: the text ends before it */
    int done;                  /* cli_text_finish was called: nothing is held back */
} cli_text;

/* A text for the ids of tokenizer tk (which must outlive it). PE_ENOMEM on failure. */
pe_status cli_text_init(cli_text *t, const pe_tokenizer *tk, const char *const *stops,
                        int nstops);
void cli_text_free(cli_text *t);

/* Adds one generated id; afterwards t->stopped says whether the text now holds a stop
 * string (then every later id is ignored; the text ends before it, or after it with
 * keep_stop). An id the tokenizer does not have (a model
 * vocabulary padded past the tokenizer's) adds no text. PE_ENOMEM on failure. */
pe_status cli_text_push(cli_text *t, int32_t id);

/* No id follows: releases a character that never completed (as U+FFFD) and whatever was
 * held back for the stop strings. */
pe_status cli_text_finish(cli_text *t);

/* The text that is safe to show and was not shown yet: (*out, *n). */
void cli_text_take(cli_text *t, const char **out, size_t *n);

#endif
