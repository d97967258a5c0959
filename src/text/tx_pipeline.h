/* tx_pipeline.h: the steps of encoding, in the order they run (tx_encode.c drives them):
 * added tokens are split out, the rest is normalized, pre-tokenized into words, and each
 * word is turned into ids by BPE. Every step keeps its state in per-call scratch, never in
 * the tokenizer, so that encodes on one tokenizer can run in parallel. All return 0, or -1
 * when out of memory. */
#ifndef PE_TEXT_TX_PIPELINE_H
#define PE_TEXT_TX_PIPELINE_H

#include "text/tx_internal.h"
#include "text/tx_utf8.h"

typedef struct tx_ids {
    int32_t *p;
    size_t n, cap;
} tx_ids;
int tx_ids_push(tx_ids *v, int32_t id);

/* ---- added tokens (tx_added.c) ---------------------------------------------------------- */

typedef struct tx_seg {
    size_t start, end; /* bytes of the text */
    int32_t added;     /* the added token (index into t->added) or -1 for text */
} tx_seg;
typedef struct tx_segs {
    tx_seg *p;
    size_t n, cap;
} tx_segs;

/* Cuts s into text and the added tokens of trie (leftmost-longest, as Hugging Face's
 * Aho-Corasick), honouring single_word, lstrip and rstrip; out is cleared first. */
int tx_added_split(const pe_tokenizer *t, const tx_trie *trie, const char *s, size_t n,
                   tx_region *r, tx_segs *out);

/* ---- normalizers (tx_normalize.c) --------------------------------------------------------- */

/* out = the normalizers applied to s (out is cleared first). */
int tx_normalize(const pe_tokenizer *t, const char *s, size_t n, tx_region *r, tx_buf *out);
/* Appends s to out with every match of p replaced by with (Replace, normalizer and decoder). */
int tx_replace(const tx_text_pattern *p, const char *with, size_t with_len, const char *s,
               size_t n, tx_region *r, tx_buf *out);

/* ---- pre-tokenizers (tx_pretok.c) ----------------------------------------------------------- */

typedef struct tx_word {
    const char *p;
    size_t n;
    int origin; /* starts at offset 0 of the original text (Metaspace's "first") */
} tx_word;
typedef struct tx_words {
    tx_word *p;
    size_t n, cap;
} tx_words;

typedef struct tx_pre_scratch {
    tx_words lists[2];
    tx_buf bufs[TX_MAX_STEPS]; /* text a step rewrote (Metaspace, a ByteLevel prefix space) */
    tx_segs matches;
} tx_pre_scratch;
void tx_pre_scratch_free(tx_pre_scratch *sc);

/* The words of s (the pre-tokenizers in order); *out points into sc or s. */
int tx_pretokenize(const pe_tokenizer *t, const char *s, size_t n, int origin, tx_region *r,
                   tx_pre_scratch *sc, const tx_words **out);

/* ---- BPE (tx_bpe.c) ------------------------------------------------------------------------ */

typedef struct tx_sym {
    int32_t id;
    int32_t prev, next; /* neighbours in the word, -1 at the ends */
    int32_t alive;
} tx_sym;

typedef struct tx_bpe_scratch {
    tx_sym *sym;
    size_t sym_cap;
    uint64_t *heap; /* (rank << 32 | position) of candidate merges, a min-heap */
    size_t heap_n, heap_cap;
    tx_buf raw;     /* a word with its placeholders turned back into bytes */
} tx_bpe_scratch;
void tx_bpe_scratch_free(tx_bpe_scratch *sc);

/* Appends the ids of one word to out. */
int tx_bpe_word(const tx_bpe *m, const char *w, size_t n, tx_bpe_scratch *sc, tx_ids *out);

#endif
