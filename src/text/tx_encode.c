/* tx_encode.c: pe_tokenizer_encode: text -> ids. Invalid UTF-8 becomes placeholders; the
 * added tokens matched on the raw text are cut out; each stretch between them is
 * normalized, its normalized added tokens cut out, pre-tokenized into words and each word
 * encoded by BPE; the post-processor's tokens go around it all. */
#include <stdlib.h>
#include <string.h>

#include "text/tx_pipeline.h"

typedef struct tx_enc {
    const pe_tokenizer *t;
    tx_region *region;
    tx_ids out;
    tx_segs raw_segs, norm_segs;
    tx_buf norm;
    tx_pre_scratch pre;
    tx_bpe_scratch bpe;
} tx_enc;

static int encode_words(tx_enc *e, const char *s, size_t n, int origin)
{
    if (n == 0)
        return 0;
    const tx_words *words;
    if (tx_pretokenize(e->t, s, n, origin, e->region, &e->pre, &words) != 0)
        return -1;
    for (size_t i = 0; i < words->n; i++)
        if (tx_bpe_word(&e->t->bpe, words->p[i].p, words->p[i].n, &e->bpe, &e->out) != 0)
            return -1;
    return 0;
}

/* A stretch of text between raw added tokens; origin: it starts the input. */
static int encode_section(tx_enc *e, const char *s, size_t n, int origin)
{
    const pe_tokenizer *t = e->t;
    if (t->nnorm == 0)
        return encode_words(e, s, n, origin);
    if (tx_normalize(t, s, n, e->region, &e->norm) != 0)
        return -1;
    if (!t->has_norm_added)
        return encode_words(e, e->norm.p, e->norm.n, origin);
    if (tx_added_split(t, &t->trie_norm, e->norm.p, e->norm.n, e->region, &e->norm_segs) != 0)
        return -1;
    for (size_t i = 0; i < e->norm_segs.n; i++) {
        const tx_seg *g = &e->norm_segs.p[i];
        int rc = g->added >= 0 ? tx_ids_push(&e->out, t->added[g->added].id) :
                 encode_words(e, e->norm.p + g->start, g->end - g->start,
                              origin && g->start == 0);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int encode(tx_enc *e, const char *s, size_t n, int add_special)
{
    const pe_tokenizer *t = e->t;
    for (int i = 0; add_special && i < t->nprefix; i++)
        if (tx_ids_push(&e->out, t->prefix_ids[i]) != 0)
            return -1;
    if (tx_added_split(t, &t->trie_raw, s, n, e->region, &e->raw_segs) != 0)
        return -1;
    for (size_t i = 0; i < e->raw_segs.n; i++) {
        const tx_seg *g = &e->raw_segs.p[i];
        int rc = g->added >= 0 ? tx_ids_push(&e->out, t->added[g->added].id) :
                 encode_section(e, s + g->start, g->end - g->start, g->start == 0);
        if (rc != 0)
            return -1;
    }
    for (int i = 0; add_special && i < t->nsuffix; i++)
        if (tx_ids_push(&e->out, t->suffix_ids[i]) != 0)
            return -1;
    return 0;
}

pe_status pe_tokenizer_encode(const pe_tokenizer *t, const char *text, size_t len,
                              int add_special, int32_t **ids, size_t *n)
{
    if (ids)
        *ids = NULL;
    if (n)
        *n = 0;
    if (!t || !ids || !n || (!text && len)) {
        pe_set_last_error("pe_tokenizer_encode: the tokenizer, ids and n must not be NULL "
                          "(nor text when len > 0)");
        return PE_EINVAL;
    }
    if (len > (size_t)0x7fffffff / 3) {
        pe_set_last_error("pe_tokenizer_encode: text longer than 700 MB; encode it in parts");
        return PE_EINVAL;
    }
    char *clean = NULL;
    size_t clean_n = len;
    int rc = text ? tx_sanitize(text, len, &clean, &clean_n) : 0;
    tx_enc e = {.t = t, .region = tx_region_new()};
    if (rc >= 0 && e.region)
        rc = encode(&e, clean ? clean : (text ? text : ""), clean_n, add_special);
    else
        rc = -1;
    free(clean);
    tx_region_free(e.region);
    free(e.raw_segs.p);
    free(e.norm_segs.p);
    tx_buf_free(&e.norm);
    tx_pre_scratch_free(&e.pre);
    tx_bpe_scratch_free(&e.bpe);
    if (rc != 0) {
        free(e.out.p);
        pe_set_last_error("pe_tokenizer_encode: out of memory; encode a shorter text");
        return PE_ENOMEM;
    }
    if (!e.out.p) /* no ids: still a valid pointer to free() */
        e.out.p = malloc(sizeof(int32_t));
    *ids = e.out.p;
    *n = e.out.n;
    return PE_OK;
}
