/* tx_regex.h: the regular expressions of tokenizer.json (Split patterns, Replace patterns),
 * run by Oniguruma in Ruby syntax with UTF-8, as Hugging Face's tokenizers run them.
 * A compiled regex is read-only: searches from several threads at once are safe, each with
 * its own tx_region. */
#ifndef PE_TEXT_TX_REGEX_H
#define PE_TEXT_TX_REGEX_H

#include <stddef.h>

#include "common/error.h"

typedef struct tx_regex tx_regex;
typedef struct tx_region tx_region; /* per-call match state */

/* Compiles pattern (len bytes). what names it in the message ("pre_tokenizer.pattern.Regex"). */
pe_status tx_regex_compile(const char *pattern, size_t len, const char *what, tx_regex **out,
                           pe_err *err);
void tx_regex_free(tx_regex *re);

tx_region *tx_region_new(void);
void tx_region_free(tx_region *r);

/* The first match in s[start, n): 1 and [*ms, *me), or 0 when there is none. */
int tx_regex_search(const tx_regex *re, tx_region *r, const char *s, size_t n, size_t start,
                    size_t *ms, size_t *me);
/* The length of the match anchored at s[at], or -1 when it does not match there. */
long tx_regex_match_at(const tx_regex *re, tx_region *r, const char *s, size_t n, size_t at);

#endif
