/* tx_internal.h: the tokenizer's parts as plain data: the vocabulary and merges, the added
 * tokens, and the normalizer, pre-tokenizer, post-processor and decoder steps that
 * tokenizer.json describes. Every part is built once by the loader and read-only after,
 * so one pe_tokenizer serves any number of threads at once. */
#ifndef PE_TEXT_TX_INTERNAL_H
#define PE_TEXT_TX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "text/tx_map.h"
#include "text/tx_regex.h"

/* ---- the BPE model ------------------------------------------------------------------- */

typedef struct tx_bpe {
    tx_strmap pieces;      /* symbol string -> id: raw bytes for byte-level models, else UTF-8 */
    tx_pairmap merges;     /* (left id, right id) -> (rank, merged id) */
    int byte_level;        /* symbols are bytes (the pre-tokenizer has ByteLevel) */
    int32_t byte_ids[256]; /* byte-level: the id of each single byte, -1 if none */
    int32_t fallback_ids[256]; /* byte_fallback: the id of "<0xNN>", -1 if none */
    int byte_fallback;
    int ignore_merges;     /* a word found whole in the vocabulary is one token */
    int fuse_unk;
    int32_t unk_id;        /* -1: no unknown token (an unknown symbol is dropped, as HF) */
} tx_bpe;

/* ---- added tokens ---------------------------------------------------------------------- */

typedef struct tx_added {
    char *content;
    size_t len;
    int32_t id;
    unsigned special : 1, lstrip : 1, rstrip : 1, single_word : 1, normalized : 1;
} tx_added;

/* A byte trie over the contents of a set of added tokens (leftmost-longest matching). */
typedef struct tx_trie {
    tx_pairmap edges;  /* (node, byte) -> child node */
    int32_t *token;    /* (nodes) the added token ending at a node (index into added), -1 */
    int32_t nnodes, cap;
    uint8_t first[32]; /* bitmap of bytes that start a token */
} tx_trie;

/* ---- the pipeline steps ------------------------------------------------------------------ */

typedef enum tx_norm_kind {
    TX_NORM_NFC, TX_NORM_NFD, TX_NORM_NFKC, TX_NORM_NFKD, TX_NORM_PREPEND, TX_NORM_REPLACE
} tx_norm_kind;

typedef struct tx_text_pattern { /* a Split or Replace pattern: a literal, or a regex */
    char *literal;   /* NULL for a regex */
    size_t literal_len;
    tx_regex *regex;
} tx_text_pattern;

typedef struct tx_norm {
    tx_norm_kind kind;
    char *text;       /* PREPEND: the prefix; REPLACE: the content */
    size_t text_len;
    tx_text_pattern pattern; /* REPLACE */
} tx_norm;

typedef enum tx_pretok_kind { TX_PRE_SPLIT, TX_PRE_BYTELEVEL, TX_PRE_METASPACE } tx_pretok_kind;
typedef enum tx_split_behavior {
    TX_SPLIT_REMOVED, TX_SPLIT_ISOLATED, TX_SPLIT_MERGED_PREV, TX_SPLIT_MERGED_NEXT,
    TX_SPLIT_CONTIGUOUS
} tx_split_behavior;
typedef enum tx_prepend { TX_PREPEND_ALWAYS, TX_PREPEND_FIRST, TX_PREPEND_NEVER } tx_prepend;

typedef struct tx_pretok {
    tx_pretok_kind kind;
    tx_text_pattern pattern;          /* SPLIT (and BYTELEVEL with use_regex: GPT-2's regex) */
    tx_split_behavior behavior;  /* SPLIT */
    int invert;                  /* SPLIT */
    int add_prefix_space;        /* BYTELEVEL */
    int use_regex;               /* BYTELEVEL */
    char replacement[8];         /* METASPACE: the UTF-8 of the replacement character */
    size_t replacement_len;
    tx_prepend prepend;          /* METASPACE */
    int split;                   /* METASPACE */
} tx_pretok;

typedef enum tx_dec_kind {
    TX_DEC_BYTELEVEL, TX_DEC_BYTEFALLBACK, TX_DEC_METASPACE, TX_DEC_REPLACE, TX_DEC_FUSE,
    TX_DEC_STRIP
} tx_dec_kind;

typedef struct tx_dec {
    tx_dec_kind kind;
    tx_text_pattern pattern;   /* REPLACE */
    char *content;        /* REPLACE: the replacement; STRIP: the character stripped */
    size_t content_len;
    int start, stop;      /* STRIP: how many to strip at each end */
    char replacement[8];  /* METASPACE */
    size_t replacement_len;
    tx_prepend prepend;   /* METASPACE */
} tx_dec;

/* ---- the tokenizer ------------------------------------------------------------------------ */

#define TX_MAX_STEPS 16

struct pe_tokenizer {
    tx_bpe bpe;
    char **tokens;          /* (vocab_size) id -> token string as in the file (NULL: no token) */
    uint32_t *token_len;    /* (vocab_size) */
    uint8_t *is_special;    /* (vocab_size) 1 for special added tokens */
    size_t vocab_size;      /* the largest id + 1 */
    size_t tokens_cap;
    tx_strmap token_ids;    /* token string as in the file -> id (vocabulary and added) */

    tx_added *added;        /* (nadded) */
    int nadded;
    tx_trie trie_raw;       /* added tokens matched before normalization */
    tx_trie trie_norm;      /* added tokens with normalized: true, matched after it */
    int has_norm_added;

    tx_norm norm[TX_MAX_STEPS];
    int nnorm;
    tx_pretok pre[TX_MAX_STEPS];
    int npre;
    tx_dec dec[TX_MAX_STEPS];
    int ndec;
    int has_decoder;        /* 0: tokens are joined with spaces (HF without a decoder) */

    int32_t prefix_ids[8], suffix_ids[8]; /* the post-processor's tokens around the text */
    int nprefix, nsuffix;
    tx_regex *whitespace;   /* "\s": the lstrip/rstrip/single_word character classes */
    tx_regex *word_char;    /* "\w" */
};

/* The byte-level alphabet of GPT-2 (bytes_to_unicode): byte -> code point. Printable
 * Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order. */
uint32_t tx_byte_to_cp(uint8_t b);
/* The inverse: a code point -> its byte, or -1 when outside the alphabet. */
int tx_cp_to_byte(uint32_t cp);

void tx_text_pattern_free(tx_text_pattern *p);

#endif
