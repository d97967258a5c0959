/* tx_pretok.c: the pre-tokenizers: Split (a literal or a regex, with Hugging Face's five
 * delimiter behaviours and invert), ByteLevel (GPT-2's regex, the prefix space) and
 * Metaspace (spaces to the replacement character, the prepend scheme, the split). Each
 * step turns a list of words into a new list; words point into the text or into the
 * step's own buffer. ByteLevel's byte-to-character mapping is not done here: the BPE model
 * of a byte-level tokenizer reads raw bytes. */
#include <stdlib.h>
#include <string.h>

#include "text/tx_pipeline.h"

static int push_word(tx_words *v, const char *p, size_t n, int origin)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        tx_word *np = realloc(v->p, cap * sizeof *np);
        if (!np)
            return -1;
        v->p = np;
        v->cap = cap;
    }
    v->p[v->n++] = (tx_word){p, n, origin};
    return 0;
}

static int push_match(tx_segs *v, size_t a, size_t b, int is_match)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        tx_seg *np = realloc(v->p, cap * sizeof *np);
        if (!np)
            return -1;
        v->p = np;
        v->cap = cap;
    }
    v->p[v->n++] = (tx_seg){a, b, is_match};
    return 0;
}

/* Pieces of w: the matches of the pattern and the stretches between them (is_match 0/1). An
 * empty match still cuts the text there, as Hugging Face's find_matches does. */
static int find_matches(const tx_text_pattern *pat, const char *w, size_t n, tx_region *r,
                        tx_segs *out)
{
    out->n = 0;
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        size_t ms, me;
        if (pat->literal) {
            const char *hit = pat->literal_len <= n - pos ?
                memmem(w + pos, n - pos, pat->literal, pat->literal_len) : NULL;
            if (!hit)
                break;
            ms = (size_t)(hit - w);
            me = ms + pat->literal_len;
        } else if (!tx_regex_search(pat->regex, r, w, n, pos, &ms, &me)) {
            break;
        }
        if (prev < ms && push_match(out, prev, ms, 0) != 0)
            return -1;
        if (push_match(out, ms, me, 1) != 0)
            return -1;
        prev = me;
        pos = me > ms ? me : me + (me < n ? tx_utf8_char_len((const unsigned char *)w, n, me) :
                                            1);
    }
    if (prev < n && push_match(out, prev, n, 0) != 0)
        return -1;
    return 0;
}

/* Hugging Face's SplitDelimiterBehavior on a list of (range, is_match), in place. */
static void apply_behavior(tx_segs *m, tx_split_behavior b)
{
    size_t k = 0;
    int prev_match = 0;
    switch (b) {
    case TX_SPLIT_ISOLATED:
        return;
    case TX_SPLIT_REMOVED:
        for (size_t i = 0; i < m->n; i++)
            if (!m->p[i].added)
                m->p[k++] = m->p[i];
        break;
    case TX_SPLIT_MERGED_PREV: /* a match joins the piece before it */
        for (size_t i = 0; i < m->n; i++) {
            int is = m->p[i].added;
            if (is && !prev_match && k > 0)
                m->p[k - 1].end = m->p[i].end;
            else
                m->p[k++] = m->p[i];
            prev_match = is;
        }
        break;
    case TX_SPLIT_MERGED_NEXT: { /* a match joins the piece after it: walk backwards */
        size_t w = m->n;
        for (size_t i = m->n; i-- > 0;) {
            int is = m->p[i].added;
            if (is && !prev_match && w < m->n)
                m->p[w].start = m->p[i].start;
            else
                m->p[--w] = m->p[i];
            prev_match = is;
        }
        memmove(m->p, m->p + w, (m->n - w) * sizeof *m->p);
        k = m->n - w;
        break;
    }
    case TX_SPLIT_CONTIGUOUS: /* runs of matches, and runs of non-matches, become one piece */
        for (size_t i = 0; i < m->n; i++) {
            int is = m->p[i].added;
            if (k > 0 && is == prev_match)
                m->p[k - 1].end = m->p[i].end;
            else
                m->p[k++] = m->p[i];
            prev_match = is;
        }
        break;
    }
    m->n = k;
}

static int split_words(const tx_text_pattern *pat, tx_split_behavior behavior, int invert,
                       const tx_words *in, tx_words *out, tx_region *r, tx_segs *m)
{
    for (size_t i = 0; i < in->n; i++) {
        const tx_word *w = &in->p[i];
        if (find_matches(pat, w->p, w->n, r, m) != 0)
            return -1;
        if (invert)
            for (size_t k = 0; k < m->n; k++)
                m->p[k].added = !m->p[k].added;
        apply_behavior(m, behavior);
        for (size_t k = 0; k < m->n; k++)
            if (m->p[k].end > m->p[k].start &&
                push_word(out, w->p + m->p[k].start, m->p[k].end - m->p[k].start,
                          w->origin && m->p[k].start == 0) != 0)
                return -1;
    }
    return 0;
}

static int prefix_space(const tx_words *in, tx_words *out, tx_buf *buf)
{
    size_t need = 0;
    for (size_t i = 0; i < in->n; i++)
        need += in->p[i].n + 1;
    buf->n = 0;
    if (tx_buf_reserve(buf, need) != 0)
        return -1;
    for (size_t i = 0; i < in->n; i++) {
        const tx_word *w = &in->p[i];
        if (w->n && w->p[0] == ' ') {
            if (push_word(out, w->p, w->n, w->origin) != 0)
                return -1;
            continue;
        }
        char *dst = buf->p + buf->n;
        dst[0] = ' ';
        memcpy(dst + 1, w->p, w->n);
        buf->n += w->n + 1;
        if (push_word(out, dst, w->n + 1, w->origin) != 0)
            return -1;
    }
    return 0;
}

static int metaspace(const tx_pretok *p, const tx_words *in, tx_words *out, tx_buf *buf,
                     tx_region *r, tx_segs *m)
{
    size_t rl = p->replacement_len, need = 0;
    for (size_t i = 0; i < in->n; i++)
        need += in->p[i].n * rl + rl;
    buf->n = 0;
    if (tx_buf_reserve(buf, need) != 0)
        return -1;
    tx_words rewritten = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const tx_word *w = &in->p[i];
        char *dst = buf->p + buf->n, *o = dst;
        int starts = w->n >= rl && memcmp(w->p, p->replacement, rl) == 0;
        int pre = (p->prepend == TX_PREPEND_ALWAYS || (p->prepend == TX_PREPEND_FIRST &&
                                                       w->origin)) && !starts;
        /* a word starting with a space starts with the replacement once rewritten */
        if (pre && w->n && w->p[0] == ' ')
            pre = 0;
        if (pre) {
            memcpy(o, p->replacement, rl);
            o += rl;
        }
        for (size_t k = 0; k < w->n; k++) {
            if (w->p[k] == ' ') {
                memcpy(o, p->replacement, rl);
                o += rl;
            } else {
                *o++ = w->p[k];
            }
        }
        buf->n += (size_t)(o - dst);
        rc = push_word(p->split ? &rewritten : out, dst, (size_t)(o - dst), w->origin);
    }
    if (rc == 0 && p->split) {
        tx_text_pattern lit = {(char *)p->replacement, rl, NULL};
        rc = split_words(&lit, TX_SPLIT_MERGED_NEXT, 0, &rewritten, out, r, m);
    }
    free(rewritten.p);
    return rc;
}

int tx_pretokenize(const pe_tokenizer *t, const char *s, size_t n, int origin, tx_region *r,
                   tx_pre_scratch *sc, const tx_words **out)
{
    tx_words *cur = &sc->lists[0], *next = &sc->lists[1];
    cur->n = 0;
    if (push_word(cur, s, n, origin) != 0)
        return -1;
    for (int k = 0; k < t->npre; k++) {
        const tx_pretok *p = &t->pre[k];
        next->n = 0;
        int rc = 0;
        switch (p->kind) {
        case TX_PRE_SPLIT:
            rc = split_words(&p->pattern, p->behavior, p->invert, cur, next, r, &sc->matches);
            break;
        case TX_PRE_BYTELEVEL:
            if (!p->add_prefix_space && !p->use_regex)
                continue;
            if (p->add_prefix_space) {
                rc = prefix_space(cur, next, &sc->bufs[k]);
                tx_words *tmp = cur;
                cur = next;
                next = tmp;
                next->n = 0;
            }
            if (rc == 0 && p->use_regex)
                rc = split_words(&p->pattern, TX_SPLIT_ISOLATED, 0, cur, next, r,
                                 &sc->matches);
            else if (rc == 0)
                continue; /* cur already holds the result */
            break;
        case TX_PRE_METASPACE:
            rc = metaspace(p, cur, next, &sc->bufs[k], r, &sc->matches);
            break;
        }
        if (rc != 0)
            return -1;
        tx_words *tmp = cur;
        cur = next;
        next = tmp;
    }
    *out = cur;
    return 0;
}

void tx_pre_scratch_free(tx_pre_scratch *sc)
{
    free(sc->lists[0].p);
    free(sc->lists[1].p);
    for (int k = 0; k < TX_MAX_STEPS; k++)
        tx_buf_free(&sc->bufs[k]);
    free(sc->matches.p);
    memset(sc, 0, sizeof *sc);
}
