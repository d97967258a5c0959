/* tx_schema.c: JSON schema's machine over bytes (tx_schema.h), on a compiled schema
 * (tx_schema_nodes.h). The schema's objects and arrays are frames on a stack; keys and enum
 * values are matched against their literals; a string with a pattern or lengths goes
 * through their DFA, its escapes decoded; other scalars and values the schema leaves free
 * are read by JSON mode's own machine (tx_json), started at the value. */
#include <string.h>

#include "text/tx_utf8.h"

#include "text/tx_schema_nodes.h"

enum {
    S_START,    /* nothing yet: the root's '{' */
    S_OBJ_OPEN, /* after '{': a key or '}' */
    S_KEY,      /* after ',' in an object: a key */
    S_COLON,    /* after a key: ':' */
    S_VALUE,    /* after ':', or ',' in an array: a value */
    S_ARR_OPEN, /* after '[': a value or ']' */
    S_AFTER,    /* after a value: ',' or the container's closer */
    S_KEY_LIT,  /* in a key: cand, off of the object's keys */
    S_ENUM_LIT, /* in an enum's value: cand, off of node's literals */
    S_MAP_KEY,  /* in a map's key: a string, read by st->value */
    S_JSON,     /* in a scalar or free value, read by st->value */
    S_TEXT,     /* in a string with a pattern or lengths, read by st->text */
    S_DIGITS,   /* in a number or integer with bounds, its bytes read by st->text.dfa */
    S_DONE      /* the root object is closed */
};

void tx_schema_start(const tx_schema *s, tx_schema_state *st)
{
    (void)s;
    memset(st, 0, sizeof *st);
    st->phase = S_START;
}

int tx_schema_done(const tx_schema_state *st) { return st->phase == S_DONE; }

static const ts_node *node_of(const tx_schema *s, int id) { return &s->node[id]; }
static tx_schema_frame *top(tx_schema_state *st) { return &st->frame[st->depth - 1]; }

static int gap(tx_schema_state *st, int phase)
{
    st->phase = (uint8_t)phase;
    st->ws = 0;
    return 0;
}

/* A value just ended: the text is done when it was the root object. */
static int value_end(tx_schema_state *st)
{
    st->node = st->cand = st->off = 0;
    memset(&st->value, 0, sizeof st->value);
    return st->depth == 0 ? gap(st, S_DONE) : gap(st, S_AFTER);
}

static int open_frame(tx_schema_state *st, int node, int phase)
{
    if (st->depth >= TX_SCHEMA_MAX_DEPTH)
        return -1;
    st->frame[st->depth++] = (tx_schema_frame){.node = (uint16_t)node, .n = 0};
    return gap(st, phase);
}

static int close_frame(tx_schema_state *st)
{
    st->frame[--st->depth] = (tx_schema_frame){0};
    return value_end(st);
}

/* The node a value of node id starting with byte b follows: anyOf's alternative for b, a
 * $ref's schema; -1 when b cannot start one. */
static int resolve(const tx_schema *s, int id, uint8_t b)
{
    for (;;) {
        const ts_node *n = node_of(s, id);
        if (!ts_first_has(n, b))
            return -1;
        if (n->kind == TS_REF) {
            id = n->child[0];
        } else if (n->kind == TS_ANYOF) {
            int32_t k = 0;
            while (!ts_first_has(node_of(s, n->child[k]), b))
                k++; /* (one has b: n's first bytes are its alternatives') */
            id = n->child[k];
        } else {
            return id;
        }
    }
}

/* Matches byte b in a literal of lits[st->cand .. hi]: cand is the first the bytes so far
 * fit, off how many of them have come. 0 when b fits one (cand, off advanced), -1 when
 * not. */
static int literal_byte(tx_schema_state *st, const ts_lit *lits, int hi, uint8_t b)
{
    const ts_lit *c = &lits[st->cand];
    for (int k = st->cand; k <= hi; k++) {
        const ts_lit *l = &lits[k];
        if (l->n > st->off && l->p[st->off] == b &&
            (k == st->cand || memcmp(l->p, c->p, st->off) == 0)) {
            st->cand = (uint16_t)k;
            st->off++;
            return 0;
        }
    }
    return -1;
}

/* After a byte of an enum's value: the value ends at its last byte unless that is a
 * number's (more digits could make another value: enum [1, 10]). */
static int enum_end(const tx_schema *s, tx_schema_state *st)
{
    const ts_lit *l = &node_of(s, st->node)->lit[st->cand];
    const uint8_t last = l->p[l->n - 1];
    return st->off == l->n && !(last >= '0' && last <= '9') ? value_end(st) : 0;
}

/* After a byte of a value read by JSON's rules: the value ends where tx_json is done (a
 * number ends later, at the first byte that is not its own). */
static int json_end(tx_schema_state *st)
{
    return tx_json_done(&st->value) ? value_end(st) : 0;
}

/* 1 when the bytes so far are the whole of one of enum e's values: cand's, or a later
 * one's that they fit (enum [123, 1] after "1": cand is 123's). */
static int literal_whole(const ts_node *e, const tx_schema_state *st)
{
    const ts_lit *c = &e->lit[st->cand];
    for (int32_t k = st->cand; k < e->nlit; k++)
        if (e->lit[k].n == st->off && memcmp(e->lit[k].p, c->p, st->off) == 0)
            return 1;
    return 0;
}

/* ---- strings with a pattern or lengths ----------------------------------------------------- */

/* Feeds the n bytes of a character (decoded from the JSON text) to the string's DFA: 0, or
 * -1 when they lead to no match. */
static int text_feed(const tx_pattern *p, tx_schema_text *t, const uint8_t *b, size_t n)
{
    const int32_t at = tx_pattern_bytes(p, t->dfa, b, n);
    if (at < 0)
        return -1;
    t->dfa = at;
    return 0;
}

/* Starts a value of node id read by its DFA p (a patterned string's characters, a bounded
 * integer's bytes), in phase. */
static void dfa_begin(tx_schema_state *st, int id, int phase, const tx_pattern *p)
{
    st->node = (uint16_t)id;
    st->phase = (uint8_t)phase;
    memset(&st->text, 0, sizeof st->text);
    st->text.dfa = p->start;
}

/* JSON's two-character escapes and the bytes they stand for. */
static const char escape_from[] = "\"\\/bfnrt", escape_to[] = "\"\\/\b\f\n\r\t";

/* After a backslash: 1 when some escape may come (a two-character one, or \uXXXX of a
 * character the DFA takes next). */
static int escape_may_come(const tx_pattern *p, int32_t s)
{
    for (size_t k = 0; k < sizeof escape_to - 1; k++)
        if (tx_pattern_step(p, s, (uint8_t)escape_to[k]) >= 0)
            return 1;
    return tx_pattern_any_char(p, s, 0, 0xFFFF);
}

/* Byte b of a string read by its DFA (the opening quote read). Escapes are decoded before
 * the DFA sees them, and each prefix of one is taken only when a character it may still
 * become goes on: after \u0 the characters U+0000..U+0FFF. Surrogates (\uD800..\uDFFF)
 * are refused: a character past U+FFFF is written as itself. */
static int text_byte(const tx_schema *s, tx_schema_state *st, uint8_t b)
{
    const tx_pattern *p = node_of(s, st->node)->text;
    tx_schema_text *t = &st->text;
    if (t->esc == 0) {
        if (b == '"')
            return tx_pattern_accepts(p, t->dfa) ? value_end(st) : -1;
        if (b == '\\') {
            t->esc = 1;
            return escape_may_come(p, t->dfa) ? 0 : -1;
        }
        return b < 0x20 ? -1 : text_feed(p, t, &b, 1); /* (the DFA takes UTF-8 only) */
    }
    if (t->esc == 1) {
        if (b == 'u') {
            t->esc = 2, t->hex = 0;
            return tx_pattern_any_char(p, t->dfa, 0, 0xFFFF) ? 0 : -1;
        }
        const char *e = b ? memchr(escape_from, b, sizeof escape_from - 1) : NULL;
        if (!e)
            return -1;
        t->esc = 0;
        const uint8_t d = (uint8_t)escape_to[e - escape_from];
        return text_feed(p, t, &d, 1);
    }
    const int v = tx_hex_value(b);
    if (v < 0)
        return -1;
    t->hex = (uint16_t)(t->hex * 16 + v);
    const int digits = ++t->esc - 2, left = 4 - digits; /* (esc 2 + digits read) */
    const uint32_t lo = (uint32_t)t->hex << (4 * left), hi = lo + (1u << (4 * left)) - 1;
    if (left > 0)
        return tx_pattern_any_char(p, t->dfa, lo, hi) ? 0 : -1;
    char u[4];
    const size_t n = tx_utf8_encode(t->hex, u);
    t->esc = 0, t->hex = 0;
    if (lo >= 0xD800 && lo <= 0xDFFF)
        return -1;
    return text_feed(p, t, (const uint8_t *)u, n);
}

/* The first byte of a value of node id. */
static int value_start(const tx_schema *s, tx_schema_state *st, int id, uint8_t b)
{
    id = resolve(s, id, b);
    if (id < 0)
        return -1;
    const ts_node *n = node_of(s, id);
    switch (n->kind) {
    case TS_OBJECT:
    case TS_MAP: return open_frame(st, id, S_OBJ_OPEN);
    case TS_ARRAY: return open_frame(st, id, S_ARR_OPEN);
    case TS_ENUM:
        st->node = (uint16_t)id;
        st->cand = st->off = 0;
        st->phase = S_ENUM_LIT;
        return literal_byte(st, n->lit, n->nlit - 1, b) == 0 ? enum_end(s, st) : -1;
    case TS_STRING:
        if (!n->text)
            goto json;
        dfa_begin(st, id, S_TEXT, n->text);
        return b == '"' ? 0 : -1;
    case TS_INTEGER:
    case TS_NUMBER:
        if (!n->text)
            goto json;
        dfa_begin(st, id, S_DIGITS, n->text);
        return text_feed(n->text, &st->text, &b, 1);
    default: /* a scalar, or a value the schema leaves free */
    json:
        st->node = (uint16_t)id;
        st->phase = S_JSON;
        tx_json_start_value(&st->value);
        return tx_json_byte(&st->value, b) == 0 ? json_end(st) : -1;
    }
}

/* Object frame f's properties that may come next: those from f->n to the first required
 * one (included). hi < f->n when none may. */
static int last_key(const ts_node *obj, const tx_schema_frame *f)
{
    if (f->n >= obj->nchild)
        return (int)f->n - 1;
    return obj->next_required[f->n] < obj->nchild ? obj->next_required[f->n]
                                                  : obj->nchild - 1;
}

/* '}' may close object frame f: no required property is left. */
static int may_close(const ts_node *obj, const tx_schema_frame *f)
{
    return obj->next_required[f->n] == obj->nchild;
}

int tx_schema_step(const tx_schema *s, tx_schema_state *st, uint8_t b)
{
    for (;;) {
        if (st->phase >= S_OBJ_OPEN && st->phase <= S_AFTER && tx_json_is_ws(b))
            return tx_json_gap_byte(&st->ws, b); /* (JSON mode's rule) */
        tx_schema_frame *f = st->depth ? top(st) : NULL;
        const ts_node *c = f ? node_of(s, f->node) : NULL; /* the container open */
        switch (st->phase) {
        case S_START: return value_start(s, st, s->root, b);
        case S_OBJ_OPEN:
            if (b == '}')
                return c->kind == TS_MAP || may_close(c, f) ? close_frame(st) : -1;
            /* fall through */
        case S_KEY:
            if (b == '"' && c->kind == TS_MAP) { /* any key: a string by JSON's rules */
                st->phase = S_MAP_KEY;
                tx_json_start_value(&st->value);
                return tx_json_byte(&st->value, b);
            }
            if (b != '"' || last_key(c, f) < f->n)
                return -1;
            st->cand = f->n;
            st->off = 0;
            st->phase = S_KEY_LIT;
            return literal_byte(st, c->lit, last_key(c, f), b);
        case S_KEY_LIT:
            if (literal_byte(st, c->lit, last_key(c, f), b) != 0)
                return -1;
            if (st->off < c->lit[st->cand].n)
                return 0;
            f->n = (uint16_t)(st->cand + 1); /* (a key ends at its '"': no other goes on) */
            st->cand = st->off = 0;
            return gap(st, S_COLON);
        case S_MAP_KEY:
            if (tx_json_byte(&st->value, b) != 0)
                return -1;
            if (!tx_json_done(&st->value))
                return 0;
            memset(&st->value, 0, sizeof st->value);
            return gap(st, S_COLON);
        case S_COLON: return b == ':' ? gap(st, S_VALUE) : -1;
        case S_ARR_OPEN:
            if (b == ']')
                return c->min_items == 0 ? close_frame(st) : -1;
            if (c->max_items == 0)
                return -1;
            f->n = 1;
            return value_start(s, st, c->child[0], b);
        case S_VALUE:
            return value_start(s, st, c->kind == TS_OBJECT ? c->child[f->n - 1] : c->child[0],
                               b);
        case S_AFTER:
            if (b == ',' && c->kind == TS_MAP)
                return gap(st, S_KEY);
            if (b == ',' && c->kind == TS_OBJECT)
                return f->n < c->nchild ? gap(st, S_KEY) : -1;
            if (b == ',') {
                if (c->max_items != TS_UNBOUNDED && f->n >= c->max_items)
                    return -1;
                f->n = f->n < TS_UNBOUNDED - 1 ? (uint16_t)(f->n + 1) : f->n;
                return gap(st, S_VALUE);
            }
            if (b == '}' && c->kind != TS_ARRAY)
                return c->kind == TS_MAP || may_close(c, f) ? close_frame(st) : -1;
            if (b == ']' && c->kind == TS_ARRAY)
                return f->n >= c->min_items ? close_frame(st) : -1;
            return -1;
        case S_ENUM_LIT: {
            const ts_node *e = node_of(s, st->node);
            if (literal_byte(st, e->lit, e->nlit - 1, b) == 0)
                return enum_end(s, st);
            if (!literal_whole(e, st))
                return -1;
            value_end(st); /* a whole value that b does not go on: b comes after it */
            continue;
        }
        case S_JSON: {
            const int integer = node_of(s, st->node)->kind == TS_INTEGER;
            if (!(integer && (b == '.' || b == 'e' || b == 'E')) &&
                tx_json_byte(&st->value, b) == 0)
                return json_end(st);
            if (!tx_json_ended(&st->value))
                return -1;
            value_end(st); /* (a number ends at the first byte that is not its own) */
            continue;
        }
        case S_TEXT: return text_byte(s, st, b);
        case S_DIGITS: {
            const tx_pattern *p = node_of(s, st->node)->text;
            if (text_feed(p, &st->text, &b, 1) == 0)
                return 0;
            /* the number ends at the first byte that is not its own: a byte that would go
             * on a number (a digit past the bounds, '.', an exponent) is refused */
            if (memchr("-0123456789.eE", b, 14) || !tx_pattern_accepts(p, st->text.dfa))
                return -1;
            value_end(st);
            continue;
        }
        default: return -1; /* S_DONE */
        }
    }
}

int tx_schema_bytes(const tx_schema *s, tx_schema_state *st, const uint8_t *b, size_t n)
{
    tx_schema_state next = *st;
    for (size_t i = 0; i < n; i++)
        if (tx_schema_step(s, &next, b[i]) != 0)
            return -1;
    *st = next;
    return 0;
}
