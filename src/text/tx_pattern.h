/* tx_pattern.h: regular expressions as a DFA over bytes, for structured output's regex and
 * choice grammars (pe_grammar_regex, pe_grammar_choice) and a JSON schema's strings
 * (pattern, minLength, maxLength: tx_pattern_text): which byte strings begin a whole
 * match, fed one byte at a time from a state that is a number, so that a mask's walk tries
 * the tokens that may come next with a table lookup a byte.
 *
 * A pattern is parsed into a tree (tx_pattern_parse.c), the tree into a Thompson NFA over
 * UTF-8 bytes, and the NFA into a DFA by subset construction (tx_pattern_dfa.c); states
 * that cannot reach a match are dropped, so every live state can still end in one.
 *
 * The syntax (what Python's re, JavaScript and PCRE share; docs/api.md):
 *   - literals (UTF-8 characters; a '{' that starts no quantifier is a literal, as in
 *     Python), '.' (any character but '\n');
 *   - classes [abc] [a-z] [^...], with escapes inside;
 *   - \d [0-9], \w [A-Za-z0-9_], \s [ \t\n\r\f\v] and \D \W \S: ASCII, as PCRE without UCP
 *     (Python's str patterns take Unicode digits and letters too);
 *   - escapes \n \t \r \f \v \a \0 \xHH \uHHHH \UHHHHHHHH \\ and any escaped punctuation;
 *     \xHH, \uHHHH and \UHHHHHHHH are characters (code points), written as UTF-8;
 *   - groups ( ), (?: ), (?P<name> ), (?<name> ); alternation |;
 *   - quantifiers * + ? {n} {n,} {n,m} {,m} (Python's {0,m}), lazy forms (*? ...) alike: a
 *     DFA matches texts, not spans; at most TX_PATTERN_MAX_REPEAT;
 *   - ^ (or \A) only first, $ (or \z, \Z) only last: the whole text matches anyway.
 * Refused, naming the construct and its byte offset: backreferences, lookaround, \b \B,
 * inline flags, atomic groups, possessive quantifiers, \p{...}, and other letter escapes.
 * Characters are Unicode scalar values: no surrogates, nothing past U+10FFFF. */
#ifndef PE_TEXT_TX_PATTERN_H
#define PE_TEXT_TX_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"

#define TX_PATTERN_MAX_LEN 65536     /* bytes of a pattern (choices: 16 times as many) */
#define TX_PATTERN_MAX_REPEAT 1000   /* m of {n,m}, n of {n,} */
#define TX_PATTERN_MAX_NFA 1000000   /* NFA states, after repeats are written out */
#define TX_PATTERN_MAX_STATES 65536  /* DFA states */
#define TX_PATTERN_MAX_WORK 50000000 /* NFA edges visited building them (about 0.2 s) */

/* A compiled pattern (read-only once made). */
typedef struct tx_pattern {
    int32_t nstates;
    int32_t start;      /* the state before the first byte */
    uint16_t nclasses;  /* bytes that every state treats alike share a class */
    uint8_t cls[256];   /* byte -> class */
    int32_t *next;      /* (nstates, nclasses) state after a byte of the class, -1: none */
    uint8_t *accept;    /* (nstates) 1: the bytes so far are a whole match */
    uint8_t *more;      /* (nstates) 1: some byte may follow */
} tx_pattern;

/* Compiles pattern (len bytes of UTF-8). PE_EINVAL names what is wrong or not supported
 * and its byte offset; PE_EINVAL also when the pattern matches no text at all, or only the
 * empty text (there would be nothing to generate), or needs
 * more than TX_PATTERN_MAX_STATES states or TX_PATTERN_MAX_WORK steps to build them. */
pe_status tx_pattern_compile(const char *pattern, size_t len, tx_pattern **out);
/* A pattern of n texts (NUL-terminated UTF-8), each escaped, joined by '|'. */
pe_status tx_pattern_choices(const char *const *choices, size_t n, tx_pattern **out);
/* The integers lo..hi in JSON's syntax (no leading zeros, no -0), as a pattern written
 * into out (cap bytes): a side without has_* is unbounded. Bounds within
 * +-TX_PATTERN_MAX_INT; PE_EINVAL when lo > hi or out of that range (or neither side is
 * given), PE_ENOMEM when out is too small (TX_PATTERN_INT_RANGE_CAP always fits). */
#define TX_PATTERN_MAX_INT 1000000000000000LL /* 10^15 */
#define TX_PATTERN_INT_RANGE_CAP 4096
pe_status tx_pattern_int_range(int has_lo, int64_t lo, int has_hi, int64_t hi, char *out,
                               size_t cap);

/* A bound of tx_pattern_num_range: a decimal of up to 15 whole digits and
 * TX_PATTERN_MAX_FRAC digits after the point. */
#define TX_PATTERN_MAX_FRAC 24
#define TX_PATTERN_MAX_FRAC_TEXT "24"
typedef struct tx_decimal {
    int neg;                            /* 1 below 0 (never for 0 itself) */
    uint64_t whole;                     /* the whole part, up to TX_PATTERN_MAX_INT */
    char frac[TX_PATTERN_MAX_FRAC + 1]; /* the digits after the point, without trailing
                                         * zeros ("" for none) */
} tx_decimal;
/* x as the shortest decimal that reads back as x (0.1 is "0" and "1", not the double's
 * 0.1000000000000000055...). PE_EINVAL when x is not finite, past +-TX_PATTERN_MAX_INT, or
 * needs more than TX_PATTERN_MAX_FRAC digits after the point (1e-30). */
pe_status tx_decimal_of(double x, tx_decimal *d);
/* The numbers from lo to hi in JSON's syntax without an exponent (-?(0|[1-9][0-9]*)
 * (\.[0-9]+)?; no -0, nor -0.0), exactly: a bound is compared as the decimal it is, and
 * 0.50 is 0.5. NULL: that side unbounded; *_excl: the bound itself left out. PE_EINVAL when
 * no number fits, a bound is malformed, or both are NULL; PE_ENOMEM when out (cap bytes) is
 * too small (TX_PATTERN_NUM_RANGE_CAP always fits). */
#define TX_PATTERN_NUM_RANGE_CAP 16384
pe_status tx_pattern_num_range(const tx_decimal *lo, int lo_excl, const tx_decimal *hi,
                               int hi_excl, char *out, size_t cap);
/* The texts a JSON schema's string allows (its characters, as UTF-8): a match of pattern
 * somewhere in them (NULL: any text), at their start when it begins with ^ (or \A), at
 * their end when it ends with $ (JSON schema's search, as ECMA-262 test()); and min_chars
 * to max_chars characters (min_chars >= 0; max_chars -1: any number). A pattern with ^ or $
 * and a | outside every group is refused (^a|b$ searches for either, which this does not
 * write). The DFA's states carry the count of characters: a pattern of S states counted up
 * to N characters needs about S x N of them, within TX_PATTERN_MAX_STATES. */
pe_status tx_pattern_text(const char *pattern, int32_t min_chars, int32_t max_chars,
                          tx_pattern **out);
void tx_pattern_free(tx_pattern *p);

/* The state after byte b from state s, or -1 when the bytes then begin no match. */
static inline int32_t tx_pattern_step(const tx_pattern *p, int32_t s, uint8_t b)
{
    return p->next[(size_t)s * p->nclasses + p->cls[b]];
}
/* The state after bytes b[0..n) from state s, or -1 when they lead to no match. */
static inline int32_t tx_pattern_bytes(const tx_pattern *p, int32_t s, const uint8_t *b,
                                       size_t n)
{
    for (size_t k = 0; k < n && s >= 0; k++)
        s = tx_pattern_step(p, s, b[k]);
    return s;
}
/* 1 when the bytes that led to s are a whole match. */
static inline int tx_pattern_accepts(const tx_pattern *p, int32_t s) { return p->accept[s]; }
/* 1 when some character lo..hi (surrogates left out) may come after state s. */
int tx_pattern_any_char(const tx_pattern *p, int32_t s, uint32_t lo, uint32_t hi);
/* 1 when the text is complete: a whole match that nothing may follow. */
static inline int tx_pattern_done(const tx_pattern *p, int32_t s)
{
    return p->accept[s] && !p->more[s];
}

#endif
