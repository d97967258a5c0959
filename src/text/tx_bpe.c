/* tx_bpe.c: BPE on one word, as Hugging Face's tokenizers does it: the word becomes
 * symbols (bytes for a byte-level model, else characters, with byte fallback to "<0xNN>"
 * or the unknown token), then the pair of lowest merge rank is merged, leftmost first,
 * until no pair has a merge. Candidate merges wait in a min-heap keyed by (rank,
 * position); an entry whose symbols changed since it was pushed is skipped when popped.
 * O(n log n) in the word's length. */
#include <stdlib.h>
#include <string.h>

#include "text/tx_pipeline.h"

int tx_ids_push(tx_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p)
            return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = id;
    return 0;
}

void tx_bpe_scratch_free(tx_bpe_scratch *sc)
{
    free(sc->sym);
    free(sc->heap);
    tx_buf_free(&sc->raw);
    memset(sc, 0, sizeof *sc);
}

/* ---- the heap of candidate merges --------------------------------------------------------- */

static void heap_push(tx_bpe_scratch *sc, uint64_t key)
{
    size_t i = sc->heap_n++;
    uint64_t *h = sc->heap;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= key)
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = key;
}

static uint64_t heap_pop(tx_bpe_scratch *sc)
{
    uint64_t *h = sc->heap, top = h[0], last = h[--sc->heap_n];
    size_t n = sc->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1] < h[c])
            c++;
        if (h[c] >= last)
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

/* Pushes the merge of symbol pos with its right neighbour, if there is one. */
static void push_pair(const tx_bpe *m, tx_bpe_scratch *sc, int32_t pos)
{
    int32_t next = sc->sym[pos].next;
    uint64_t v;
    if (next >= 0 && tx_pairmap_get(&m->merges, tx_pair_key(sc->sym[pos].id, sc->sym[next].id),
                                    &v))
        heap_push(sc, (v & 0xffffffff00000000ULL) | (uint32_t)pos);
}

/* ---- symbols ------------------------------------------------------------------------------------ */

typedef struct sym_builder {
    tx_bpe_scratch *sc;
    size_t n;
    int unk_pending; /* the last symbol is an unknown token that fuse_unk may extend */
} sym_builder;

static void add_sym(sym_builder *b, int32_t id)
{
    tx_sym *s = &b->sc->sym[b->n];
    s->id = id;
    s->prev = (int32_t)b->n - 1;
    s->next = (int32_t)b->n + 1;
    s->alive = 1;
    b->n++;
}

/* A symbol missing from the vocabulary: byte fallback, else the unknown token (fused with
 * the one before under fuse_unk), else nothing (Hugging Face drops it). */
static void add_unknown(const tx_bpe *m, sym_builder *b, const unsigned char *bytes,
                        size_t nbytes)
{
    if (m->byte_fallback) {
        size_t k = 0;
        while (k < nbytes && m->fallback_ids[bytes[k]] >= 0)
            k++;
        if (k == nbytes) {
            for (k = 0; k < nbytes; k++)
                add_sym(b, m->fallback_ids[bytes[k]]);
            b->unk_pending = 0;
            return;
        }
    }
    if (m->unk_id < 0)
        return;
    if (!(m->fuse_unk && b->unk_pending))
        add_sym(b, m->unk_id);
    b->unk_pending = 1;
}

static void add_known(sym_builder *b, int32_t id)
{
    add_sym(b, id);
    b->unk_pending = 0;
}

static void build_symbols(const tx_bpe *m, const unsigned char *w, size_t n, sym_builder *b)
{
    if (m->byte_level) {
        for (size_t i = 0; i < n; i++) {
            if (m->byte_ids[w[i]] >= 0)
                add_known(b, m->byte_ids[w[i]]);
            else
                add_unknown(m, b, w + i, 1);
        }
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t len = tx_utf8_char_len(w, n, i);
        int raw = tx_placeholder_byte(w, n, i);
        if (raw >= 0) { /* an invalid input byte: its own byte, by fallback */
            unsigned char byte = (unsigned char)raw;
            add_unknown(m, b, &byte, 1);
        } else {
            int32_t id = tx_strmap_get(&m->pieces, (const char *)w + i, len);
            if (id >= 0)
                add_known(b, id);
            else
                add_unknown(m, b, w + i, len);
        }
        i += len;
    }
}

/* A byte-level word with its placeholders turned back into the bytes they stand for. */
static const unsigned char *raw_bytes(const unsigned char *w, size_t *n, tx_buf *raw)
{
    size_t i = 0;
    while (i < *n && tx_placeholder_byte(w, *n, i) < 0)
        i++;
    if (i == *n)
        return w;
    raw->n = 0;
    if (tx_buf_reserve(raw, *n) != 0)
        return NULL;
    for (i = 0; i < *n;) {
        int b = tx_placeholder_byte(w, *n, i);
        raw->p[raw->n++] = (char)(b >= 0 ? b : w[i]);
        i += b >= 0 ? 3 : 1;
    }
    *n = raw->n;
    return (const unsigned char *)raw->p;
}

int tx_bpe_word(const tx_bpe *m, const char *word, size_t n, tx_bpe_scratch *sc, tx_ids *out)
{
    const unsigned char *w = (const unsigned char *)word;
    if (m->byte_level && !(w = raw_bytes(w, &n, &sc->raw)))
        return -1;
    if (n == 0)
        return 0;
    if (m->ignore_merges) {
        int32_t id = tx_strmap_get(&m->pieces, (const char *)w, n);
        if (id >= 0)
            return tx_ids_push(out, id);
    }
    /* at most one symbol per byte (a placeholder: 3 bytes, 1 symbol) */
    if (n > sc->sym_cap) {
        size_t cap = n < 64 ? 64 : n;
        tx_sym *s = realloc(sc->sym, cap * sizeof *s);
        uint64_t *h = s ? realloc(sc->heap, 3 * cap * sizeof *h) : NULL;
        if (s)
            sc->sym = s;
        if (h)
            sc->heap = h;
        if (!s || !h)
            return -1;
        sc->sym_cap = cap;
        sc->heap_cap = 3 * cap; /* n - 1 pushes, then at most 2 per merge */
    }
    sym_builder b = {sc, 0, 0};
    build_symbols(m, w, n, &b);
    if (b.n == 0)
        return 0;
    sc->sym[b.n - 1].next = -1;
    sc->heap_n = 0;
    for (int32_t i = 0; i + 1 < (int32_t)b.n; i++)
        push_pair(m, sc, i);
    while (sc->heap_n) {
        uint64_t top = heap_pop(sc);
        int32_t pos = (int32_t)(uint32_t)top, next = sc->sym[pos].next;
        tx_sym *s = &sc->sym[pos];
        uint64_t v;
        /* stale: the left symbol was merged away, or its pair changed since the push */
        if (!s->alive || next < 0 ||
            !tx_pairmap_get(&m->merges, tx_pair_key(s->id, sc->sym[next].id), &v) ||
            (v >> 32) != (top >> 32))
            continue;
        s->id = (int32_t)(uint32_t)v;
        sc->sym[next].alive = 0;
        s->next = sc->sym[next].next;
        if (s->next >= 0)
            sc->sym[s->next].prev = pos;
        if (s->prev >= 0)
            push_pair(m, sc, s->prev);
        push_pair(m, sc, pos);
    }
    for (int32_t i = 0; i >= 0; i = sc->sym[i].next)
        if (tx_ids_push(out, sc->sym[i].id) != 0)
            return -1;
    return 0;
}
