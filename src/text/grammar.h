/* grammar.h: structured output for the engine: a grammar (pengine.h's pe_grammar) holds
 * the bytes every token of a vocabulary adds to a text, and a sequence's state in it says
 * which of those tokens may come next (a mask over the vocabulary) and takes the tokens
 * sampled. Three languages: JSON mode (tx_json.h), JSON that follows a JSON schema
 * (tx_schema.h), and the whole matches of a regular expression (tx_pattern.h: regexes and
 * choices). The last two share their table of token bytes with the grammar they were made
 * from.
 *
 * A token's bytes are those it adds after other tokens (a sentencepiece token's leading
 * space included), as generated text holds it; special tokens, empty ones and ones longer
 * than TX_GRAMMAR_MAX_TOKEN_BYTES are never allowed. */
#ifndef PE_TEXT_GRAMMAR_H
#define PE_TEXT_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"
#include "text/tx_json.h"
#include "text/tx_pattern.h"
#include "text/tx_schema.h"

#define TX_GRAMMAR_MAX_TOKEN_BYTES 256

struct pe_grammar {
    int32_t vocab;     /* ids 0 .. vocab - 1 */
    uint8_t *bytes;    /* every token's bytes, one after the other */
    uint32_t *off;     /* (vocab + 1) token id's bytes are bytes[off[id], off[id + 1]) */
    uint8_t *allowed;  /* (vocab) 0: never (special, no bytes, or too many) */
    /* the allowed tokens in the order of their bytes, so that tokens sharing a prefix are
     * neighbours and a mask feeds each prefix once (a trie walked in order) */
    int32_t *order;    /* (norder) ids */
    uint32_t *lcp;     /* (norder) bytes token order[i] shares with order[i - 1] */
    uint8_t *tail;     /* token order[i]'s bytes past those lcp[i], one token after the
                        * other: all a mask's walk reads, in the order it reads them */
    uint32_t *tail_off; /* (norder + 1) order[i]'s are tail[tail_off[i], tail_off[i + 1]) */
    int32_t norder;
    tx_schema *schema;          /* a JSON schema's, or */
    tx_pattern *pattern;        /* a regex's; neither: JSON mode */
    const pe_grammar *table_of; /* the grammar whose table this one shares (NULL: its own) */
};

/* A sequence's place in its grammar (compared with memcmp: tx_grammar_start zeroes it all,
 * and each machine writes only its own member). */
typedef union tx_grammar_state {
    tx_schema_state schema; /* a JSON schema's */
    tx_json json;           /* JSON mode's */
    int32_t pattern;        /* a regex's DFA state */
} tx_grammar_state;

/* Words of a mask over nbits ids: bit id % 32 of word id / 32. */
static inline size_t tx_mask_words(size_t nbits) { return (nbits + 31) / 32; }

void tx_grammar_start(const pe_grammar *g, tx_grammar_state *st);
/* The ids that may come next, as bits set in mask (tx_mask_words(nbits) words; ids from
 * g->vocab up to nbits are never set). Returns how many are set. */
int tx_grammar_mask(const pe_grammar *g, const tx_grammar_state *st, uint32_t *mask,
                    size_t nbits);
/* 1 when token id may come next. */
int tx_grammar_allows(const pe_grammar *g, const tx_grammar_state *st, int32_t id);
/* Takes token id: 0, or -1 when the grammar does not allow it (st unchanged). */
int tx_grammar_accept(const pe_grammar *g, tx_grammar_state *st, int32_t id);
/* 1 when the text is complete: the sequence ends there. */
int tx_grammar_done(const pe_grammar *g, const tx_grammar_state *st);
/* 1 when the text is complete but may go on (a regex's match that a longer one extends):
 * the model's eos tokens may come next too, and end the sequence. */
int tx_grammar_may_end(const pe_grammar *g, const tx_grammar_state *st);

/* A grammar over a table of token bytes (tokens[id], len[id]; NULL or special: never
 * allowed): what pe_grammar_json builds from a tokenizer. */
pe_status tx_grammar_json_from_tokens(const char *const *tokens, const size_t *len,
                                      const uint8_t *special, size_t vocab, pe_grammar **out);

#endif
