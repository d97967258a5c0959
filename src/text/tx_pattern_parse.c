/* tx_pattern_parse.c: a regular expression's text into its tree (tx_pattern_tree.h), by
 * recursive descent over tx_pattern.h's syntax:
 *   alt  := cat ('|' cat)*
 *   cat  := (atom quantifier?)*
 *   atom := char | '.' | class | escape | '(' group-prefix? alt ')'
 * What a DFA cannot match, or what the flavours disagree on, is refused with its offset. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tx_pattern.h"
#include "text/tx_pattern_tree.h"
#include "text/tx_utf8.h"

#define PT_MAX_CP 0x10FFFFu
#define PT_SURROGATE_LO 0xD800u
#define PT_SURROGATE_HI 0xDFFFu

typedef struct pp {
    const unsigned char *s;
    size_t n, i;      /* the pattern, and where the parse is */
    pt_tree *t;
    int depth;        /* groups open */
    pt_range *set;    /* a set being gathered */
    int32_t nset, capset;
    int failed;       /* the last error is set */
    int nomem;        /* ... and it is out of memory */
} pp;

static int fail(pp *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(pp *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    char what[PE_ERR_LEN - 64], msg[PE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "regex at byte %zu: %s", at, what);
    pe_set_last_error(msg);
    p->failed = 1;
    return -1;
}

static int out_of_memory(pp *p)
{
    if (!p->failed)
        pe_set_last_error("out of memory parsing a regex");
    p->failed = p->nomem = 1;
    return -1;
}

static int32_t new_node(pp *p, pt_kind kind)
{
    pt_tree *t = p->t;
    pt_node *node = tx_grow(t->node, &t->capnode, t->nnode, sizeof *node);
    if (!node)
        return out_of_memory(p);
    t->node = node;
    node[t->nnode] = (pt_node){.kind = kind, .child = -1, .next = -1};
    return t->nnode++;
}

/* ---- sets of characters ------------------------------------------------------------------ */

static int add_range(pp *p, uint32_t lo, uint32_t hi)
{
    pt_range *r = tx_grow(p->set, &p->capset, p->nset, sizeof *r);
    if (!r)
        return out_of_memory(p);
    p->set = r;
    r[p->nset++] = (pt_range){lo, hi};
    return 0;
}

/* \d \w \s, or with negate their complements. */
static int add_class(pp *p, char letter)
{
    static const pt_range digit[] = {{'0', '9'}};
    static const pt_range word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const pt_range space[] = {{'\t', '\r'}, {' ', ' '}};
    const char lower = (char)(letter | 0x20);
    const pt_range *r = lower == 'd' ? digit : lower == 'w' ? word : space;
    const int n = lower == 'd' ? 1 : lower == 'w' ? 4 : 2;
    if (letter == lower) {
        for (int k = 0; k < n; k++)
            if (add_range(p, r[k].lo, r[k].hi) != 0)
                return -1;
        return 0;
    }
    uint32_t from = 0; /* the gaps between them, up to the last code point */
    for (int k = 0; k <= n; k++) {
        const uint32_t to = k < n ? r[k].lo : PT_MAX_CP + 1;
        if (from < to && add_range(p, from, to - 1) != 0)
            return -1;
        if (k < n)
            from = r[k].hi + 1;
    }
    return 0;
}

static int by_lo(const void *a, const void *b)
{
    const pt_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The gathered set (sorted, merged, complemented with negate, surrogates taken out) as a
 * PT_SET node. */
static int32_t set_node(pp *p, int negate)
{
    qsort(p->set, (size_t)p->nset, sizeof *p->set, by_lo);
    int32_t m = 0;
    for (int32_t k = 0; k < p->nset; k++) { /* merge what overlaps or touches */
        if (m > 0 && p->set[k].lo <= p->set[m - 1].hi + 1) {
            if (p->set[k].hi > p->set[m - 1].hi)
                p->set[m - 1].hi = p->set[k].hi;
        } else {
            p->set[m++] = p->set[k];
        }
    }
    p->nset = m;
    const int32_t id = new_node(p, PT_SET);
    if (id < 0)
        return -1;
    pt_tree *t = p->t;
    t->node[id].set = t->nrange;
    /* the ranges kept: each, or the gaps between them, less the surrogates */
    uint32_t from = 0;
    for (int32_t k = 0; k <= m; k++) {
        uint32_t lo = 0, hi = 0;
        if (negate) {
            const uint32_t to = k < m ? p->set[k].lo : PT_MAX_CP + 1;
            lo = from, hi = to - 1;
            if (k < m)
                from = p->set[k].hi + 1;
            if (to == 0 || lo > hi)
                continue;
        } else if (k < m) {
            lo = p->set[k].lo, hi = p->set[k].hi;
        } else {
            break;
        }
        const uint32_t part[2][2] = {
            {lo, hi < PT_SURROGATE_LO ? hi : PT_SURROGATE_LO - 1},
            {lo > PT_SURROGATE_HI ? lo : PT_SURROGATE_HI + 1, hi}};
        for (int h = 0; h < 2; h++) {
            if (part[h][0] > part[h][1])
                continue;
            pt_range *r = tx_grow(t->range, &t->caprange, t->nrange, sizeof *r);
            if (!r)
                return out_of_memory(p);
            t->range = r;
            r[t->nrange++] = (pt_range){part[h][0], part[h][1]};
        }
    }
    t->node[id].nset = t->nrange - t->node[id].set;
    p->nset = 0;
    return id;
}

static int32_t char_node(pp *p, uint32_t cp)
{
    return add_range(p, cp, cp) != 0 ? -1 : set_node(p, 0);
}

/* ---- characters and escapes -------------------------------------------------------------- */

/* The UTF-8 character at the parse into *cp. */
static int read_char(pp *p, uint32_t *cp)
{
    const size_t k = tx_utf8_valid_len(p->s, p->n, p->i);
    if (k == 0)
        return fail(p, p->i, "the pattern is not valid UTF-8 (byte 0x%02X)", p->s[p->i]);
    *cp = tx_utf8_decode(p->s, p->n, p->i);
    p->i += k;
    return 0;
}

static int hex_digits(pp *p, size_t at, int count, uint32_t *cp)
{
    uint32_t v = 0;
    for (int k = 0; k < count; k++) {
        const int d = tx_hex_value(p->i < p->n ? p->s[p->i] : 0);
        if (d < 0)
            return fail(p, at, "\\%c needs %d hex digits", p->s[at + 1], count);
        v = v * 16 + (uint32_t)d;
        p->i++;
    }
    if (v > PT_MAX_CP || (v >= PT_SURROGATE_LO && v <= PT_SURROGATE_HI))
        return fail(p, at, "\\%c gives U+%04X, which is not a character (a surrogate or past "
                    "U+10FFFF)", p->s[at + 1], (unsigned)v);
    *cp = v;
    return 0;
}

enum { ESC_CHAR, ESC_CLASS, ESC_START, ESC_END };

/* The escape at the parse ('\\' first): a character (*cp), a class (*letter: d D w W s S),
 * or, outside a class, an anchor. Returns an ESC_*, or -1. */
static int read_escape(pp *p, int in_class, uint32_t *cp, char *letter)
{
    const size_t at = p->i++;
    if (p->i >= p->n)
        return fail(p, at, "the pattern ends in a lone backslash; write \\\\ for one");
    const unsigned char c = p->s[p->i];
    if (c >= 0x80)
        return read_char(p, cp) == 0 ? ESC_CHAR : -1; /* an escaped non-ASCII character */
    p->i++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *letter = (char)c;
        return ESC_CLASS;
    case 'n': *cp = '\n'; return ESC_CHAR;
    case 't': *cp = '\t'; return ESC_CHAR;
    case 'r': *cp = '\r'; return ESC_CHAR;
    case 'f': *cp = '\f'; return ESC_CHAR;
    case 'v': *cp = '\v'; return ESC_CHAR;
    case 'a': *cp = 7; return ESC_CHAR;
    case 'x': return hex_digits(p, at, 2, cp) == 0 ? ESC_CHAR : -1;
    case 'u': return hex_digits(p, at, 4, cp) == 0 ? ESC_CHAR : -1;
    case 'U': return hex_digits(p, at, 8, cp) == 0 ? ESC_CHAR : -1;
    case '0':
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            return fail(p, at, "octal escapes (\\0%c...) are not supported; write \\xHH",
                        p->s[p->i]);
        *cp = 0;
        return ESC_CHAR;
    case 'b':
        if (in_class) {
            *cp = 8; /* a backspace, inside a class */
            return ESC_CHAR;
        }
        return fail(p, at, "word boundaries (\\b) are not supported: the whole text is "
                    "matched, with no lookaround");
    case 'B':
        return fail(p, at, "\\B (not a word boundary) is not supported: no lookaround");
    case 'A': case 'z': case 'Z':
        if (in_class)
            return fail(p, at, "\\%c is an anchor, not a character, inside [...]", c);
        return c == 'A' ? ESC_START : ESC_END;
    case 'p': case 'P':
        return fail(p, at, "Unicode properties (\\%c{...}) are not supported; write the "
                    "characters as a class, e.g. [a-zA-Z\\u00c0-\\u024f]", c);
    case 'k': case 'g':
        return fail(p, at, "backreferences (\\%c) are not supported: a DFA cannot match "
                    "them", c);
    default:
        break;
    }
    if (c >= '1' && c <= '9')
        return fail(p, at, "backreferences (\\%c) are not supported: a DFA cannot match "
                    "them", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return fail(p, at, "unknown escape \\%c; escape only punctuation, or write the "
                    "character", c);
    *cp = c; /* escaped punctuation (or a digit-free ASCII character): itself */
    return ESC_CHAR;
}

/* ---- classes ----------------------------------------------------------------------------- */

/* One item of a class: a character (*cp, 0 returned) or a class escape (added, 1). */
static int class_item(pp *p, uint32_t *cp)
{
    if (p->s[p->i] != '\\')
        return read_char(p, cp);
    char letter = 0;
    const int e = read_escape(p, 1, cp, &letter);
    if (e == ESC_CLASS)
        return add_class(p, letter) == 0 ? 1 : -1;
    return e == ESC_CHAR ? 0 : -1;
}

/* [...] at the parse: a ']' first is itself; a '-' between two characters makes a range. */
static int32_t parse_class(pp *p)
{
    const size_t at = p->i++;
    const int negate = p->i < p->n && p->s[p->i] == '^';
    p->i += (size_t)negate;
    for (int first = 1;; first = 0) {
        if (p->i >= p->n)
            return fail(p, at, "the class [ is never closed; add ]");
        if (p->s[p->i] == ']' && !first) {
            p->i++;
            return set_node(p, negate);
        }
        const size_t item_at = p->i;
        uint32_t lo = 0, hi = 0;
        const int k = class_item(p, &lo);
        if (k < 0)
            return -1;
        const int range = p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']';
        if (range && k == 1)
            return fail(p, item_at, "a range in [...] cannot start at a class escape");
        if (!range) {
            if (k == 0 && add_range(p, lo, lo) != 0)
                return -1;
            continue;
        }
        p->i++; /* '-' */
        const size_t hi_at = p->i;
        const int kh = class_item(p, &hi);
        if (kh < 0)
            return -1;
        if (kh == 1)
            return fail(p, hi_at, "a range in [...] cannot end at a class escape");
        if (hi < lo)
            return fail(p, item_at, "the range %.*s is backwards; write the smaller end first",
                        (int)(p->i - item_at), (const char *)p->s + item_at);
        if (add_range(p, lo, hi) != 0)
            return -1;
    }
}

/* ---- quantifiers ------------------------------------------------------------------------- */

/* Reads decimal digits at the parse into *v (none: *v unchanged). Returns how many. */
static int read_count(pp *p, long *v)
{
    int k = 0;
    long x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (x <= 1000000000L)
            x = x * 10 + (p->s[p->i] - '0');
        p->i++, k++;
    }
    if (k)
        *v = x;
    return k;
}

/* {n} {n,} {n,m} {,m} at the parse: 1 with the bounds (parse past it), 0 when the '{'
 * starts no quantifier (a literal, as in Python; parse unmoved). */
static int read_braces(pp *p, long *min, long *max)
{
    const size_t at = p->i;
    p->i++;
    long lo = 0, hi = PT_ANY_REPEAT;
    const int nlo = read_count(p, &lo);
    int ok;
    if (p->i < p->n && p->s[p->i] == '}') {
        ok = nlo > 0, hi = lo;
    } else if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        read_count(p, &hi);
        ok = p->i < p->n && p->s[p->i] == '}';
    } else {
        ok = 0;
    }
    if (!ok) {
        p->i = at;
        return 0;
    }
    p->i++;
    *min = lo, *max = hi;
    return 1;
}

static int is_quantifier_at(pp *p)
{
    if (p->i >= p->n)
        return 0;
    const unsigned char c = p->s[p->i];
    if (c == '*' || c == '+' || c == '?')
        return 1;
    long a, b;
    const size_t at = p->i;
    const int braces = c == '{' && read_braces(p, &a, &b);
    p->i = at;
    return braces;
}

/* The quantifier after atom, if any: atom, or a PT_REPEAT of it. */
static int32_t quantify(pp *p, int32_t atom)
{
    if (p->i >= p->n)
        return atom;
    const size_t at = p->i;
    long min, max;
    switch (p->s[p->i]) {
    case '*': min = 0, max = PT_ANY_REPEAT, p->i++; break;
    case '+': min = 1, max = PT_ANY_REPEAT, p->i++; break;
    case '?': min = 0, max = 1, p->i++; break;
    case '{':
        if (!read_braces(p, &min, &max))
            return atom;
        break;
    default:
        return atom;
    }
    if (min > TX_PATTERN_MAX_REPEAT || max > TX_PATTERN_MAX_REPEAT)
        return fail(p, at, "a repeat count of %ld is over the limit of %d",
                    min > max ? min : max, TX_PATTERN_MAX_REPEAT);
    if (max != PT_ANY_REPEAT && max < min)
        return fail(p, at, "the repeat {%ld,%ld} has its bounds backwards", min, max);
    if (p->i < p->n && p->s[p->i] == '?')
        p->i++; /* lazy: the same texts */
    else if (p->i < p->n && p->s[p->i] == '+')
        return fail(p, p->i, "possessive quantifiers (%.*s+) are not supported",
                    (int)(p->i - at), (const char *)p->s + at);
    if (is_quantifier_at(p))
        return fail(p, p->i, "a repeat of a repeat; put the first in a group, (?:...)");
    const int32_t r = new_node(p, PT_REPEAT);
    if (r < 0)
        return -1;
    p->t->node[r].child = atom;
    p->t->node[r].min = (int32_t)min;
    p->t->node[r].max = (int32_t)max;
    return r;
}

/* ---- groups, sequences, alternatives ----------------------------------------------------- */

static int32_t parse_alt(pp *p);

/* After '(': the group's kind (capturing or not, named: all plain groups here). */
static int group_prefix(pp *p, size_t at)
{
    if (p->i >= p->n || p->s[p->i] != '?')
        return 0;
    const unsigned char c = p->i + 1 < p->n ? p->s[p->i + 1] : 0;
    const unsigned char d = p->i + 2 < p->n ? p->s[p->i + 2] : 0;
    if (c == ':') {
        p->i += 2;
        return 0;
    }
    if (c == '=' || c == '!' || (c == '<' && (d == '=' || d == '!')))
        return fail(p, at, "lookaround ((?%c%s...)) is not supported: the whole text is matched",
                    c, c == '<' ? (d == '=' ? "=" : "!") : "");
    if (c == 'P' && (d == '=' || d == '>'))
        return fail(p, at, "backreferences ((?P%c...)) are not supported: a DFA cannot match "
                    "them", d);
    if (c == '>')
        return fail(p, at, "atomic groups ((?>...)) are not supported");
    if (c == '<' || (c == 'P' && d == '<')) { /* a named group */
        p->i += c == '<' ? 2 : 3;
        const size_t name = p->i;
        while (p->i < p->n && (p->s[p->i] == '_' || (p->s[p->i] >= '0' && p->s[p->i] <= '9') ||
                               ((p->s[p->i] | 0x20) >= 'a' && (p->s[p->i] | 0x20) <= 'z')))
            p->i++;
        if (p->i == name || p->i >= p->n || p->s[p->i] != '>' ||
            (p->s[name] >= '0' && p->s[name] <= '9'))
            return fail(p, at, "a group's name must be letters, digits and _ (not a digit "
                        "first), closed by >");
        p->i++;
        return 0;
    }
    return fail(p, at, "(?%c...) is not supported: inline flags, comments and conditionals "
                "are not; groups are ( ), (?: ), (?P<name> ) and (?<name> )", c ? c : ' ');
}

/* One atom at the parse, or -1; *none = 1 for an anchor (no node). */
static int32_t parse_atom(pp *p, int *none)
{
    const size_t at = p->i;
    const unsigned char c = p->s[p->i];
    *none = 0;
    uint32_t cp = 0;
    char letter = 0;
    switch (c) {
    case '(': {
        if (++p->depth > PT_MAX_NESTING)
            return fail(p, at, "groups nest more than %d deep", PT_MAX_NESTING);
        p->i++;
        if (group_prefix(p, at) != 0)
            return -1;
        const int32_t inner = parse_alt(p);
        if (inner < 0)
            return -1;
        if (p->i >= p->n || p->s[p->i] != ')')
            return fail(p, at, "the group ( is never closed; add )");
        p->i++;
        p->depth--;
        return inner;
    }
    case '[':
        return parse_class(p);
    case '.':
        p->i++;
        return add_range(p, '\n', '\n') != 0 ? -1 : set_node(p, 1);
    case '^':
        if (at != 0)
            return fail(p, at, "^ is only supported first: the whole text is matched anyway");
        p->i++, *none = 1;
        p->t->anchored_start = 1;
        return 0;
    case '$':
        if (at + 1 != p->n)
            return fail(p, at, "$ is only supported last: the whole text is matched anyway");
        p->i++, *none = 1;
        p->t->anchored_end = 1;
        return 0;
    case '*': case '+': case '?':
        return fail(p, at, "%c has nothing to repeat", c);
    case '{':
        if (is_quantifier_at(p))
            return fail(p, at, "{ has nothing to repeat");
        p->i++;
        return char_node(p, '{');
    case '\\':
        switch (read_escape(p, 0, &cp, &letter)) {
        case ESC_CHAR:
            return char_node(p, cp);
        case ESC_CLASS:
            return add_class(p, letter) != 0 ? -1 : set_node(p, 0);
        case ESC_START:
            if (at != 0)
                return fail(p, at, "\\A is only supported first");
            *none = 1;
            p->t->anchored_start = 1;
            return 0;
        case ESC_END:
            if (p->i != p->n)
                return fail(p, at, "\\%c is only supported last", p->s[at + 1]);
            *none = 1;
            p->t->anchored_end = 1;
            return 0;
        default:
            return -1;
        }
    default:
        return read_char(p, &cp) != 0 ? -1 : char_node(p, cp);
    }
}

/* A node of kind over the list first..last (linked by next); a list of one is itself. */
static int32_t list_node(pp *p, pt_kind kind, int32_t first, int32_t count)
{
    if (count == 1)
        return first;
    const int32_t id = new_node(p, count == 0 ? PT_EMPTY : kind);
    if (id >= 0)
        p->t->node[id].child = first;
    return id;
}

static int32_t parse_cat(pp *p)
{
    int32_t first = -1, last = -1, count = 0;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        int none;
        const int32_t atom = parse_atom(p, &none);
        if (atom < 0)
            return -1;
        if (none) {
            if (is_quantifier_at(p))
                return fail(p, p->i, "an anchor has nothing to repeat");
            continue;
        }
        const int32_t q = quantify(p, atom);
        if (q < 0)
            return -1;
        if (last >= 0)
            p->t->node[last].next = q;
        else
            first = q;
        last = q;
        count++;
    }
    return list_node(p, PT_CAT, first, count);
}

static int32_t parse_alt(pp *p)
{
    int32_t first = parse_cat(p), last = first, count = 1;
    while (first >= 0 && p->i < p->n && p->s[p->i] == '|') {
        p->t->top_alt |= p->depth == 0;
        p->i++;
        const int32_t c = parse_cat(p);
        if (c < 0)
            return -1;
        p->t->node[last].next = c;
        last = c;
        count++;
    }
    return first < 0 ? -1 : list_node(p, PT_ALT, first, count);
}

pe_status pt_parse(const char *pattern, size_t len, pt_tree *t)
{
    memset(t, 0, sizeof *t);
    pp p = {.s = (const unsigned char *)pattern, .n = len, .t = t};
    t->root = parse_alt(&p);
    if (t->root >= 0 && p.i < p.n) /* (only a ')' stops the top level early) */
        t->root = fail(&p, p.i, "this ) closes no group; escape it as \\)");
    free(p.set);
    if (t->root < 0) {
        pt_tree_free(t);
        return p.nomem ? PE_ENOMEM : PE_EINVAL;
    }
    return PE_OK;
}

void pt_tree_free(pt_tree *t)
{
    free(t->node);
    free(t->range);
    memset(t, 0, sizeof *t);
}
