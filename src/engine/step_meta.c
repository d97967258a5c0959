/* step_meta.c: a step's buffers (scheduler.h): the layout of its meta, which the devices
 * read, and the outputs they write back. */
#include <stdlib.h>

#include "engine/scheduler_internal.h"
#include "kernels/attention.h"

en_meta_layout en_meta_layout_of(int ntok, int nchunks, int nbt, int nlogits, int npen,
                                 int nmask, int mask_words)
{
    en_meta_layout L;
    L.tokens = 0;
    L.positions = (size_t)ntok;
    L.slots = 2 * (size_t)ntok;
    L.chunks = 3 * (size_t)ntok;
    L.block_tables = L.chunks + (size_t)nchunks * PE_K_CHUNK_FIELDS;
    L.logit_rows = L.block_tables + (size_t)nbt;
    L.targets = L.logit_rows + (size_t)nlogits;
    L.sampling = L.targets + (size_t)nlogits;
    L.row_masks = L.sampling + (size_t)nlogits * (sizeof(pe_k_sampling) / sizeof(int32_t));
    L.masks = L.row_masks + (nmask > 0 ? (size_t)nlogits : 0);
    L.penalties = L.masks + (size_t)nmask * (size_t)mask_words;
    L.words = L.penalties + (size_t)npen * (sizeof(pe_k_penalty) / sizeof(int32_t));
    return L;
}

en_meta_layout en_meta_layout_of_step(const en_step *st)
{
    return en_meta_layout_of(st->ntok, st->nchunks, st->nbt, st->nlogits, st->npen, st->nmask,
                             st->mask_words);
}

void en_step_free(en_step *st)
{
    if (!st)
        return;
    free(st->meta);
    free(st->chunks);
    free(st->logit_dst);
    free(st->out_tokens);
    free(st->out_logit);
    free(st->out_top);
    free(st->out_topv);
    free(st->out_lse);
    free(st->out_target);
    free(st);
}

/* Grows a buffer of n elements of size sz to at least want. */
int en_grow(void **p, int *cap, int want, size_t sz)
{
    if (want <= *cap)
        return 0;
    int c = *cap ? *cap : 16;
    while (c < want)
        c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int en_step_reserve(en_step *st, int ntok, int nchunks, int nbt, int nlogits, int npen,
                    int nmask, int mask_words, int topk)
{
    en_meta_layout L = en_meta_layout_of(ntok, nchunks, nbt, nlogits, npen, nmask, mask_words);
    if (L.words > st->meta_cap) {
        int32_t *m = realloc(st->meta, L.words * sizeof *m);
        if (!m)
            return -1;
        st->meta = m;
        st->meta_cap = L.words;
    }
    st->meta_words = L.words;
    if (en_grow((void **)&st->logit_dst, &st->logit_cap, nlogits, sizeof(float *)))
        return -1;
    if (nlogits > st->out_cap || nlogits * topk > st->out_topk_cap) {
        int cap = nlogits > st->out_cap ? nlogits : st->out_cap;
        int tcap = nlogits * topk > st->out_topk_cap ? nlogits * topk : st->out_topk_cap;
        int32_t *t = realloc(st->out_tokens, (size_t)cap * sizeof *t);
        if (t) st->out_tokens = t;
        float *l = t ? realloc(st->out_logit, (size_t)cap * sizeof *l) : NULL;
        if (l) st->out_logit = l;
        float *e = l ? realloc(st->out_lse, (size_t)cap * sizeof *e) : NULL;
        if (e) st->out_lse = e;
        float *g = e ? realloc(st->out_target, (size_t)cap * sizeof *g) : NULL;
        if (g) st->out_target = g;
        int32_t *tp = g ? realloc(st->out_top, (size_t)(tcap ? tcap : 1) * sizeof *tp) : NULL;
        if (tp) st->out_top = tp;
        float *tv = tp ? realloc(st->out_topv, (size_t)(tcap ? tcap : 1) * sizeof *tv) : NULL;
        if (tv) st->out_topv = tv;
        if (!tv)
            return -1;
        st->out_cap = cap;
        st->out_topk_cap = tcap;
    }
    return 0;
}
