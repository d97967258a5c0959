/* tx_pattern_dfa.c: a pattern's tree (tx_pattern_tree.h) into tx_pattern.h's DFA.
 *   1. A Thompson NFA over bytes: each set of characters becomes the byte ranges of its
 *      UTF-8 forms (RE2's split of a code point range into ranges of equal-length forms),
 *      repeats are written out, and every piece is joined by empty edges.
 *   2. Subset construction: a DFA state is the set of NFA states with a byte edge (or the
 *      match) that the bytes so far reach; bytes every edge treats alike share a class.
 *   3. States that cannot reach a match are dropped (their edges become -1), and the rest
 *      renumbered, so a state the walk holds can always still end in a match. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tx_pattern.h"
#include "text/tx_pattern_tree.h"
#include "text/tx_utf8.h"

/* ---- 1. the NFA --------------------------------------------------------------------------- */

typedef struct nfa_edge {
    int32_t from, to;
    int16_t lo, hi; /* bytes lo..hi; -1: an empty edge */
} nfa_edge;

typedef struct nfa {
    int32_t nstates;
    nfa_edge *edge;
    int32_t nedge, capedge;
    int32_t *off;  /* (nstates + 1) state s's edges are by_from[off[s], off[s + 1]) */
    int32_t *by_from;
    int too_big, nomem;
} nfa;

static int32_t new_state(nfa *n)
{
    if (n->nstates >= TX_PATTERN_MAX_NFA) {
        n->too_big = 1;
        return -1;
    }
    return n->nstates++;
}

static int add_edge(nfa *n, int32_t from, int32_t to, int lo, int hi)
{
    if (n->nedge == n->capedge) {
        const int32_t cap = n->capedge ? 2 * n->capedge : 256;
        nfa_edge *e = realloc(n->edge, (size_t)cap * sizeof *e);
        if (!e) {
            n->nomem = 1;
            return -1;
        }
        n->edge = e, n->capedge = cap;
    }
    n->edge[n->nedge++] = (nfa_edge){from, to, (int16_t)lo, (int16_t)hi};
    return 0;
}

static int add_empty(nfa *n, int32_t from, int32_t to) { return add_edge(n, from, to, -1, -1); }

/* ---- UTF-8 byte ranges ------------------------------------------------------------------ */

/* A piece of a range of code points: the characters whose UTF-8 byte k is in lo[k]..hi[k]
 * for every k < len. fn returns 0 to go on, else stops the split with that value. */
typedef int (*piece_fn)(void *ctx, const uint8_t *lo, const uint8_t *hi, size_t len);

/* Code points lo..hi, all of one UTF-8 length, as pieces: split until each is a product of
 * byte ranges (its forms agree above the bytes that span whole ranges; RE2's split). */
static int same_length_pieces(uint32_t lo, uint32_t hi, piece_fn fn, void *ctx)
{
    char a[4], b[4];
    const size_t len = tx_utf8_encode(lo, a);
    for (size_t i = 1; i < len; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m))
            continue;
        int r;
        if ((lo & m) != 0)
            return (r = same_length_pieces(lo, lo | m, fn, ctx))
                       ? r
                       : same_length_pieces((lo | m) + 1, hi, fn, ctx);
        if ((hi & m) != m)
            return (r = same_length_pieces(lo, (hi & ~m) - 1, fn, ctx))
                       ? r
                       : same_length_pieces(hi & ~m, hi, fn, ctx);
    }
    (void)tx_utf8_encode(hi, b);
    return fn(ctx, (const uint8_t *)a, (const uint8_t *)b, len);
}

/* Code points lo..hi (surrogates left out) as pieces of each UTF-8 length. */
static int utf8_pieces(uint32_t lo, uint32_t hi, piece_fn fn, void *ctx)
{
    static const uint32_t first[5] = {0, 0x80, 0x800, 0x10000, 0x110000};
    static const uint32_t gap_lo = 0xD800, gap_hi = 0xDFFF;
    for (int len = 0; len < 4; len++) {
        uint32_t a = lo > first[len] ? lo : first[len];
        const uint32_t z = hi < first[len + 1] - 1 ? hi : first[len + 1] - 1;
        int r;
        if (a <= z && a < gap_lo && (r = same_length_pieces(a, z < gap_lo ? z : gap_lo - 1,
                                                            fn, ctx)))
            return r;
        a = a > gap_hi ? a : gap_hi + 1;
        if (a <= z && (r = same_length_pieces(a, z, fn, ctx)))
            return r;
    }
    return 0;
}

/* A state made for a piece's tail: from it, bytes lo..hi lead to state to. */
typedef struct tail_state {
    int32_t from, to;
    uint8_t lo, hi;
} tail_state;

/* The pieces of one set of characters, from s to e, with their tails shared (RE2's suffix
 * cache): every piece that ends in bytes 80..BF goes through one state before them, and so
 * on back, so that the DFA does not tell apart states that only differ in which piece's
 * continuation bytes are left. */
typedef struct chain_ctx {
    nfa *n;
    int32_t s, e;
    tail_state tail[64];
    int ntail;
} chain_ctx;

/* The state from which bytes lo..hi lead to state to: one made before, or a new one. */
static int32_t tail_from(chain_ctx *c, int32_t to, uint8_t lo, uint8_t hi)
{
    for (int k = 0; k < c->ntail; k++)
        if (c->tail[k].to == to && c->tail[k].lo == lo && c->tail[k].hi == hi)
            return c->tail[k].from;
    const int32_t from = new_state(c->n);
    if (from < 0 || add_edge(c->n, from, to, lo, hi) != 0)
        return -1;
    if (c->ntail < (int)(sizeof c->tail / sizeof c->tail[0]))
        c->tail[c->ntail++] = (tail_state){from, to, lo, hi};
    return from;
}

/* A piece as a chain of byte edges from s to e, built from its end. */
static int chain_piece(void *ctx, const uint8_t *lo, const uint8_t *hi, size_t len)
{
    chain_ctx *c = ctx;
    int32_t to = c->e;
    for (size_t k = len - 1; k > 0; k--)
        if ((to = tail_from(c, to, lo[k], hi[k])) < 0)
            return -1;
    return add_edge(c->n, c->s, to, lo[0], hi[0]);
}

/* One character of the ranges (n of them), from s to e. */
static int range_edges(nfa *n, const pt_range *r, int32_t nr, int32_t s, int32_t e)
{
    chain_ctx c = {.n = n, .s = s, .e = e};
    for (int32_t k = 0; k < nr; k++)
        if (utf8_pieces(r[k].lo, r[k].hi, chain_piece, &c) != 0)
            return -1;
    return 0;
}

/* One character of the set's ranges, from s to e. */
static int set_edges(nfa *n, const pt_tree *t, const pt_node *node, int32_t s, int32_t e)
{
    return range_edges(n, t->range + node->set, node->nset, s, e);
}

/* Node id's fragment: fresh states *s and *e, with the node's texts from one to the
 * other. */
static int build(nfa *n, const pt_tree *t, int32_t id, int32_t *s, int32_t *e)
{
    const pt_node *node = &t->node[id];
    if ((*s = new_state(n)) < 0 || (*e = new_state(n)) < 0)
        return -1;
    switch ((pt_kind)node->kind) {
    case PT_EMPTY:
        return add_empty(n, *s, *e);
    case PT_SET:
        return set_edges(n, t, node, *s, *e);
    case PT_CAT: {
        int32_t at = *s;
        for (int32_t c = node->child; c >= 0; c = t->node[c].next) {
            int32_t cs, ce;
            if (build(n, t, c, &cs, &ce) != 0 || add_empty(n, at, cs) != 0)
                return -1;
            at = ce;
        }
        return add_empty(n, at, *e);
    }
    case PT_ALT:
        for (int32_t c = node->child; c >= 0; c = t->node[c].next) {
            int32_t cs, ce;
            if (build(n, t, c, &cs, &ce) != 0 || add_empty(n, *s, cs) != 0 ||
                add_empty(n, ce, *e) != 0)
                return -1;
        }
        return 0;
    case PT_REPEAT: {
        int32_t at = *s, cs, ce;
        for (int32_t k = 0; k < node->min; k++) { /* the copies it must have */
            if (build(n, t, node->child, &cs, &ce) != 0 || add_empty(n, at, cs) != 0)
                return -1;
            at = ce;
        }
        if (node->max == PT_ANY_REPEAT) { /* then a loop: at -> child -> at */
            if (build(n, t, node->child, &cs, &ce) != 0 || add_empty(n, at, cs) != 0 ||
                add_empty(n, ce, at) != 0)
                return -1;
            return add_empty(n, at, *e);
        }
        for (int32_t k = node->min; k < node->max; k++) { /* copies it may leave out */
            if (build(n, t, node->child, &cs, &ce) != 0 || add_empty(n, at, *e) != 0 ||
                add_empty(n, at, cs) != 0)
                return -1;
            at = ce;
        }
        return add_empty(n, at, *e);
    }
    }
    return -1;
}

/* n->off and n->by_from: each state's edges. */
static int index_edges(nfa *n)
{
    n->off = calloc((size_t)n->nstates + 1, sizeof *n->off);
    n->by_from = malloc(((size_t)n->nedge + 1) * sizeof *n->by_from);
    if (!n->off || !n->by_from)
        return -1;
    for (int32_t k = 0; k < n->nedge; k++)
        n->off[n->edge[k].from + 1]++;
    for (int32_t s = 0; s < n->nstates; s++)
        n->off[s + 1] += n->off[s];
    int32_t *fill = malloc(((size_t)n->nstates + 1) * sizeof *fill);
    if (!fill)
        return -1;
    memcpy(fill, n->off, ((size_t)n->nstates + 1) * sizeof *fill);
    for (int32_t k = 0; k < n->nedge; k++)
        n->by_from[fill[n->edge[k].from]++] = k;
    free(fill);
    return 0;
}

static void nfa_free(nfa *n)
{
    free(n->edge);
    free(n->off);
    free(n->by_from);
}

/* ---- 2. subset construction --------------------------------------------------------------- */

typedef struct dfa_build {
    const nfa *n;
    int32_t match;       /* the NFA's final state */
    uint8_t *kept;       /* (nfa states) 1: has a byte edge, or is the match: kept in keys */
    int32_t *stamp;      /* (nfa states) closure's visits */
    int32_t now;         /* this closure's stamp */
    int32_t *stack, *seeds, *key;  /* (nfa states) scratch */
    int32_t *pool;       /* every state's key, one after the other */
    size_t npool, cappool;
    size_t *koff;        /* (states + 1) state d's key is pool[koff[d], koff[d + 1]) */
    int32_t nstates, capstates;
    int32_t *table;      /* (captable) state ids + 1, 0: empty (open addressing) */
    size_t captable;
    uint16_t nclasses;
    uint8_t cls[256], rep[256]; /* byte -> class; class -> a byte of it */
    int32_t *next;       /* (capstates, nclasses) */
    int32_t *count;      /* (capstates) characters so far (counting only; else 0) */
    int counting;        /* states count characters: min_chars > 0 or max_chars >= 0 */
    int32_t min_chars, max_chars; /* a match has min_chars .. max_chars (-1: any) of them */
    int64_t work;        /* edges and ids visited, against TX_PATTERN_MAX_WORK */
    int too_big, nomem;
} dfa_build;

static int by_value(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The kept NFA states that the seeds reach by empty edges, sorted, into b->key: how many. */
static int32_t closure(dfa_build *b, int32_t nseeds)
{
    const nfa *n = b->n;
    b->now++;
    int32_t top = 0, nkey = 0;
    for (int32_t k = 0; k < nseeds; k++)
        if (b->stamp[b->seeds[k]] != b->now) {
            b->stamp[b->seeds[k]] = b->now;
            b->stack[top++] = b->seeds[k];
        }
    while (top > 0) {
        const int32_t s = b->stack[--top];
        b->work += 1 + n->off[s + 1] - n->off[s];
        if (b->kept[s])
            b->key[nkey++] = s;
        for (int32_t k = n->off[s]; k < n->off[s + 1]; k++) {
            const nfa_edge *e = &n->edge[n->by_from[k]];
            if (e->lo < 0 && b->stamp[e->to] != b->now) {
                b->stamp[e->to] = b->now;
                b->stack[top++] = e->to;
            }
        }
    }
    qsort(b->key, (size_t)nkey, sizeof *b->key, by_value);
    return nkey;
}

/* A state is its key (NFA states) and its count of characters. */
static uint64_t key_hash(const int32_t *key, int32_t n, int32_t count)
{
    uint64_t h = 1469598103934665603ull ^ (uint32_t)count; /* FNV-1a over the ids */
    for (int32_t k = 0; k < n; k++)
        h = (h ^ (uint32_t)key[k]) * 1099511628211ull;
    return h;
}

static int key_is(const dfa_build *b, int32_t d, const int32_t *key, int32_t n, int32_t count)
{
    const size_t len = b->koff[d + 1] - b->koff[d];
    return len == (size_t)n && b->count[d] == count &&
           !memcmp(b->pool + b->koff[d], key, (size_t)n * sizeof *key);
}

static int table_put(dfa_build *b, int32_t d)
{
    const int32_t *key = b->pool + b->koff[d];
    const int32_t n = (int32_t)(b->koff[d + 1] - b->koff[d]);
    size_t at = key_hash(key, n, b->count[d]) & (b->captable - 1);
    while (b->table[at])
        at = (at + 1) & (b->captable - 1);
    b->table[at] = d + 1;
    return 0;
}

/* Room for one more state (its key of n ids, its row of next). */
static int make_room(dfa_build *b, int32_t n)
{
    if (b->npool + (size_t)n > b->cappool) {
        size_t cap = b->cappool ? 2 * b->cappool : 1024;
        while (cap < b->npool + (size_t)n)
            cap *= 2;
        int32_t *p = realloc(b->pool, cap * sizeof *p);
        if (!p)
            return -1;
        b->pool = p, b->cappool = cap;
    }
    if (b->nstates + 1 >= b->capstates) {
        const int32_t cap = b->capstates ? 2 * b->capstates : 64;
        size_t *koff = realloc(b->koff, ((size_t)cap + 1) * sizeof *koff);
        if (!koff)
            return -1;
        b->koff = koff;
        int32_t *next = realloc(b->next, (size_t)cap * b->nclasses * sizeof *next);
        if (!next)
            return -1;
        b->next = next;
        int32_t *count = realloc(b->count, (size_t)cap * sizeof *count);
        if (!count)
            return -1;
        b->count = count, b->capstates = cap;
    }
    if ((size_t)(b->nstates + 1) * 2 > b->captable) { /* the table at most half full */
        free(b->table);
        b->captable *= 2;
        if (!(b->table = calloc(b->captable, sizeof *b->table)))
            return -1;
        for (int32_t d = 0; d < b->nstates; d++)
            table_put(b, d);
    }
    return 0;
}

/* The state of key b->key (n ids) after count characters: found, or added. -1 when too
 * many or out of memory. */
static int32_t intern(dfa_build *b, int32_t n, int32_t count)
{
    size_t at = key_hash(b->key, n, count) & (b->captable - 1);
    for (; b->table[at]; at = (at + 1) & (b->captable - 1))
        if (key_is(b, b->table[at] - 1, b->key, n, count))
            return b->table[at] - 1;
    if (b->nstates >= TX_PATTERN_MAX_STATES) {
        b->too_big = 1;
        return -1;
    }
    if (make_room(b, n) != 0) {
        b->nomem = 1;
        return -1;
    }
    const int32_t d = b->nstates++;
    if (n > 0) /* (only the start's key may be empty: a pattern that matches nothing) */
        memcpy(b->pool + b->npool, b->key, (size_t)n * sizeof *b->key);
    b->koff[d] = b->npool;
    b->npool += (size_t)n;
    b->koff[d + 1] = b->npool;
    b->count[d] = count;
    table_put(b, d);
    return d;
}

/* Bytes that no edge's range tells apart share a class (and, counting characters, no class
 * holds both a UTF-8 continuation byte and another). */
static void byte_classes(dfa_build *b)
{
    uint8_t cut[257] = {0};
    cut[0x80] = cut[0xC0] = (uint8_t)b->counting;
    for (int32_t k = 0; k < b->n->nedge; k++) {
        const nfa_edge *e = &b->n->edge[k];
        if (e->lo >= 0)
            cut[e->lo] = cut[e->hi + 1] = 1;
    }
    int c = 0;
    b->rep[0] = 0;
    for (int x = 0; x < 256; x++) {
        if (x > 0 && cut[x])
            b->rep[++c] = (uint8_t)x;
        b->cls[x] = (uint8_t)c;
    }
    b->nclasses = (uint16_t)(c + 1);
}

/* Every state's next states, from the start's (its key already b->key, n ids). */
static int subsets(dfa_build *b, int32_t n)
{
    if (intern(b, n, 0) < 0)
        return -1;
    for (int32_t d = 0; d < b->nstates; d++) {
        for (int c = 0; c < b->nclasses; c++) {
            const int byte = b->rep[c];
            int32_t count = b->count[d] + (b->counting && (byte & 0xC0) != 0x80);
            if (b->max_chars < 0 && count > b->min_chars)
                count = b->min_chars; /* (more than min_chars are all alike) */
            if (b->max_chars >= 0 && count > b->max_chars) {
                b->next[(size_t)d * b->nclasses + (size_t)c] = -1;
                continue;
            }
            int32_t nseeds = 0;
            for (size_t k = b->koff[d]; k < b->koff[d + 1]; k++) {
                const int32_t s = b->pool[k];
                b->work += 1 + b->n->off[s + 1] - b->n->off[s];
                for (int32_t j = b->n->off[s]; j < b->n->off[s + 1]; j++) {
                    const nfa_edge *e = &b->n->edge[b->n->by_from[j]];
                    if (e->lo >= 0 && e->lo <= byte && byte <= e->hi)
                        b->seeds[nseeds++] = e->to;
                }
            }
            if (b->work > TX_PATTERN_MAX_WORK) {
                b->too_big = 1;
                return -1;
            }
            const int32_t nkey = nseeds > 0 ? closure(b, nseeds) : 0;
            int32_t to = -1; /* (an empty key: no match ahead) */
            if (nkey > 0 && (to = intern(b, nkey, count)) < 0)
                return -1;
            b->next[(size_t)d * b->nclasses + (size_t)c] = to;
        }
    }
    return 0;
}

/* ---- 3. the states that can still match --------------------------------------------------- */

/* p from b: accept, live states only (renumbered), more. */
static int keep_live(const dfa_build *b, tx_pattern *p)
{
    const int32_t N = b->nstates, C = b->nclasses;
    int32_t *indeg = calloc((size_t)N + 1, sizeof *indeg);
    int32_t *from = malloc(((size_t)N * (size_t)C + 1) * sizeof *from);
    int32_t *queue = malloc((size_t)N * sizeof *queue);
    int32_t *id = malloc((size_t)N * sizeof *id);
    uint8_t *accept = malloc((size_t)N);
    int ok = indeg && from && queue && id && accept;
    for (int32_t d = 0; ok && d < N; d++) { /* the edges into each state (reversed) */
        accept[d] = 0;
        for (size_t k = b->koff[d]; k < b->koff[d + 1]; k++)
            accept[d] |= b->pool[k] == b->match && b->count[d] >= b->min_chars;
        for (int32_t c = 0; c < C; c++)
            if (b->next[(size_t)d * C + c] >= 0)
                indeg[b->next[(size_t)d * C + c] + 1]++;
    }
    for (int32_t d = 0; ok && d < N; d++)
        indeg[d + 1] += indeg[d];
    for (int32_t d = 0; ok && d < N; d++)
        for (int32_t c = 0; c < C; c++) {
            const int32_t to = b->next[(size_t)d * C + c];
            if (to >= 0)
                from[indeg[to]++] = d; /* (indeg[to] walks to to's end: its start is below) */
        }
    /* live: a match, or an edge into a live state (a walk back from the matches) */
    int32_t head = 0, tail = 0;
    for (int32_t d = 0; ok && d < N; d++) {
        id[d] = accept[d] ? 0 : -1;
        if (accept[d])
            queue[tail++] = d;
    }
    while (ok && head < tail) {
        const int32_t d = queue[head++];
        for (int32_t k = d ? indeg[d - 1] : 0; k < indeg[d]; k++)
            if (id[from[k]] < 0) {
                id[from[k]] = 0;
                queue[tail++] = from[k];
            }
    }
    int32_t nlive = 0;
    for (int32_t d = 0; ok && d < N; d++)
        if (id[d] >= 0)
            id[d] = nlive++;
    if (ok && nlive > 0) {
        p->nstates = nlive, p->nclasses = (uint16_t)C, p->start = id[0];
        memcpy(p->cls, b->cls, sizeof p->cls);
        p->next = malloc((size_t)nlive * (size_t)C * sizeof *p->next);
        p->accept = malloc((size_t)nlive);
        p->more = calloc((size_t)nlive, 1);
        ok = p->next && p->accept && p->more;
    }
    for (int32_t d = 0; ok && nlive > 0 && d < N; d++) {
        if (id[d] < 0)
            continue;
        p->accept[id[d]] = accept[d];
        for (int32_t c = 0; c < C; c++) {
            const int32_t to = b->next[(size_t)d * C + c];
            const int32_t live = to >= 0 ? id[to] : -1;
            p->next[(size_t)id[d] * C + c] = live;
            p->more[id[d]] |= live >= 0;
        }
    }
    free(indeg), free(from), free(queue), free(id), free(accept);
    return ok ? nlive : -1;
}

/* ---- compiling ----------------------------------------------------------------------------- */

static void dfa_build_free(dfa_build *b)
{
    free(b->kept), free(b->stamp), free(b->stack), free(b->seeds), free(b->key);
    free(b->pool), free(b->koff), free(b->table), free(b->next), free(b->count);
}

static pe_status failed(pe_status s, const char *msg)
{
    pe_set_last_error(msg);
    return s;
}

/* What a compile asks beyond the pattern's whole matches (a JSON schema's string). */
typedef struct text_rules {
    int search;                   /* a match anywhere: any characters may come before it
                                   * unless the pattern starts with ^, after it unless $ */
    int32_t min_chars, max_chars; /* characters in all (max -1: any number) */
} text_rules;

/* A loop of any character before s (after e), where a search asks: the new s (e). */
static int search_loops(nfa *n, const pt_tree *t, const text_rules *r, int32_t *s, int32_t *e)
{
    int32_t l;
    const int before = r->search && !t->anchored_start, after = r->search && !t->anchored_end;
    static const pt_range any = {0, 0x10FFFF};
    if (before && ((l = new_state(n)) < 0 || range_edges(n, &any, 1, l, l) != 0 ||
                   add_empty(n, l, *s) != 0))
        return -1;
    if (before)
        *s = l;
    if (after && ((l = new_state(n)) < 0 || range_edges(n, &any, 1, l, l) != 0 ||
                  add_empty(n, *e, l) != 0))
        return -1;
    if (after)
        *e = l;
    return 0;
}

/* The tree into p's DFA. */
static pe_status compile_tree(const pt_tree *t, const text_rules *r, tx_pattern *p)
{
    nfa n = {0};
    int32_t s, e;
    dfa_build b = {.n = &n, .counting = r->min_chars > 0 || r->max_chars >= 0,
                   .min_chars = r->min_chars, .max_chars = r->max_chars};
    pe_status st = PE_OK;
    if (build(&n, t, t->root, &s, &e) != 0 || search_loops(&n, t, r, &s, &e) != 0 ||
        index_edges(&n) != 0) {
        st = n.too_big ? failed(PE_EINVAL, "the regex is too big: its repeats write out more "
                                           "than 1000000 NFA states; make bounded repeats "
                                           "smaller, or unbounded")
                       : failed(PE_ENOMEM, "out of memory compiling a regex");
        nfa_free(&n);
        return st;
    }
    const size_t N = (size_t)n.nstates;
    b.match = e;
    b.kept = calloc(N, 1), b.stamp = calloc(N, sizeof *b.stamp);
    b.stack = malloc(N * sizeof *b.stack), b.seeds = malloc((N + (size_t)n.nedge) *
                                                            sizeof *b.seeds);
    b.key = malloc(N * sizeof *b.key);
    b.captable = 256;
    b.table = calloc(b.captable, sizeof *b.table);
    if (!b.kept || !b.stamp || !b.stack || !b.seeds || !b.key || !b.table) {
        st = failed(PE_ENOMEM, "out of memory compiling a regex");
    } else {
        for (int32_t k = 0; k < n.nedge; k++)
            if (n.edge[k].lo >= 0)
                b.kept[n.edge[k].from] = 1;
        b.kept[e] = 1;
        byte_classes(&b);
        b.seeds[0] = s;
        if (subsets(&b, closure(&b, 1)) != 0)
            st = b.too_big ? PE_EINVAL : PE_ENOMEM;
        if (b.too_big && b.counting) { /* (a state per count of characters) */
            char msg[PE_ERR_LEN];
            snprintf(msg, sizeof msg, "the pattern counted up to %d characters needs more "
                     "than %d DFA states, or more than %d M steps to build them (its states "
                     "times the count); give a smaller maxLength or minLength",
                     r->max_chars >= 0 ? r->max_chars : r->min_chars, TX_PATTERN_MAX_STATES,
                     (int)(TX_PATTERN_MAX_WORK / 1000000));
            pe_set_last_error(msg);
        } else if (b.too_big) {
            char msg[PE_ERR_LEN];
            snprintf(msg, sizeof msg, "the regex needs more than %d DFA states, or more "
                     "than %d M steps to build them (repeats inside repeats, or a repeat "
                     "after an alternative still open, as in (a|b)*a(a|b){20}, multiply "
                     "them); simplify it", TX_PATTERN_MAX_STATES,
                     (int)(TX_PATTERN_MAX_WORK / 1000000));
            pe_set_last_error(msg);
        } else if (b.nomem) {
            st = failed(PE_ENOMEM, "out of memory compiling a regex");
        }
    }
    if (st == PE_OK) {
        const int32_t live = keep_live(&b, p);
        if (live < 0)
            st = failed(PE_ENOMEM, "out of memory compiling a regex");
        else if (live == 0)
            st = failed(PE_EINVAL, "the regex matches no text at all (an empty class such "
                                   "as [^\\s\\S] on every path, or lengths its texts cannot "
                                   "have); fix the pattern");
    }
    dfa_build_free(&b);
    nfa_free(&n);
    return st;
}

static pe_status compile_text(const char *pattern, size_t len, const text_rules *r,
                              tx_pattern **out)
{
    pt_tree t;
    pe_status st = pt_parse(pattern, len, &t);
    if (st != PE_OK)
        return st;
    tx_pattern *p = NULL;
    if (r->search && t.top_alt && (t.anchored_start || t.anchored_end))
        /* (^a|b$ is (^a)|(b$) when searching) */
        st = failed(PE_EINVAL, "a pattern with ^ or $ and a | outside every group: put the "
                               "alternatives in a group, as ^(a|b)$");
    else if (!(p = calloc(1, sizeof *p)))
        st = failed(PE_ENOMEM, "out of memory compiling a regex");
    else
        st = compile_tree(&t, r, p);
    if (st == PE_OK && !r->search && tx_pattern_done(p, p->start))
        st = failed(PE_EINVAL, "the regex matches the empty text alone: there is nothing to "
                               "generate");
    pt_tree_free(&t);
    if (st != PE_OK) {
        tx_pattern_free(p);
        return st;
    }
    *out = p;
    return PE_OK;
}

static const text_rules whole_match = {.search = 0, .min_chars = 0, .max_chars = -1};

pe_status tx_pattern_compile(const char *pattern, size_t len, tx_pattern **out)
{
    *out = NULL;
    if (len > TX_PATTERN_MAX_LEN) {
        char msg[PE_ERR_LEN];
        snprintf(msg, sizeof msg, "the regex is %zu bytes, over the limit of %d", len,
                 TX_PATTERN_MAX_LEN);
        return failed(PE_EINVAL, msg);
    }
    return compile_text(pattern, len, &whole_match, out);
}

pe_status tx_pattern_text(const char *pattern, int32_t min_chars, int32_t max_chars,
                          tx_pattern **out)
{
    *out = NULL;
    const size_t len = pattern ? strlen(pattern) : 0;
    if (len > TX_PATTERN_MAX_LEN) {
        char msg[PE_ERR_LEN];
        snprintf(msg, sizeof msg, "the pattern is %zu bytes, over the limit of %d", len,
                 TX_PATTERN_MAX_LEN);
        return failed(PE_EINVAL, msg);
    }
    const text_rules r = {.search = 1, .min_chars = min_chars, .max_chars = max_chars};
    return compile_text(len > 0 ? pattern : "", len, &r, out);
}

pe_status tx_pattern_choices(const char *const *choices, size_t n, tx_pattern **out)
{
    *out = NULL;
    tx_buf re = {0};
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = (const unsigned char *)choices[i];
        const size_t len = strlen(choices[i]);
        for (size_t k = 0; k < len;) {
            const size_t w = tx_utf8_valid_len(c, len, k);
            if (w == 0) {
                char msg[PE_ERR_LEN];
                snprintf(msg, sizeof msg, "choice %zu is not valid UTF-8 (byte %zu)", i, k);
                tx_buf_free(&re);
                return failed(PE_EINVAL, msg);
            }
            k += w;
        }
        int bad = i > 0 && tx_buf_addc(&re, '|');
        for (size_t k = 0; !bad && k < len; k++) { /* ASCII punctuation escaped */
            const int plain = c[k] >= 0x80 || (c[k] >= '0' && c[k] <= '9') ||
                              ((c[k] | 0x20) >= 'a' && (c[k] | 0x20) <= 'z');
            bad = (!plain && tx_buf_addc(&re, '\\')) || tx_buf_addc(&re, (char)c[k]);
        }
        if (bad) {
            tx_buf_free(&re);
            return failed(PE_ENOMEM, "out of memory compiling choices");
        }
        if (re.n > 16 * (size_t)TX_PATTERN_MAX_LEN) {
            tx_buf_free(&re);
            return failed(PE_EINVAL, "the choices are too long: over 1 MB escaped");
        }
    }
    const pe_status st = compile_text(re.p ? re.p : "", re.n, &whole_match, out);
    tx_buf_free(&re);
    return st;
}

/* 1 when some character whose UTF-8 form has bytes lo[k]..hi[k] from byte k on leads from
 * s to a state (one step of each class in a range: its bytes go alike). */
static int piece_from(const tx_pattern *p, int32_t s, const uint8_t *lo, const uint8_t *hi,
                      size_t k, size_t len)
{
    if (k == len)
        return 1;
    uint8_t seen[32] = {0};
    for (int b = lo[k]; b <= hi[k]; b++) {
        const uint8_t c = p->cls[b];
        if (seen[c >> 3] & (1u << (c & 7)))
            continue;
        seen[c >> 3] |= (uint8_t)(1u << (c & 7));
        const int32_t to = p->next[(size_t)s * p->nclasses + c];
        if (to >= 0 && piece_from(p, to, lo, hi, k + 1, len))
            return 1;
    }
    return 0;
}

typedef struct live_ctx {
    const tx_pattern *p;
    int32_t s;
} live_ctx;

static int live_piece(void *ctx, const uint8_t *lo, const uint8_t *hi, size_t len)
{
    const live_ctx *c = ctx;
    return piece_from(c->p, c->s, lo, hi, 0, len);
}

int tx_pattern_any_char(const tx_pattern *p, int32_t s, uint32_t lo, uint32_t hi)
{
    live_ctx c = {p, s};
    return utf8_pieces(lo, hi, live_piece, &c);
}

void tx_pattern_free(tx_pattern *p)
{
    if (!p)
        return;
    free(p->next);
    free(p->accept);
    free(p->more);
    free(p);
}
