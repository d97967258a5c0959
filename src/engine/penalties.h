/* penalties.h: a sequence's token counts for the sampling penalties (pe_sampling's
 * repetition, frequency and presence penalties), kept as its tokens come, and the entries
 * (sample.h's pe_k_penalty) they and its logit bias give the logit row it samples from.
 *
 * A token counts as generated at positions from gen_start (the prompt's end: since the
 * last submit or append), as in the prompt before. The counts grow with the sequence
 * (each step adds its new tokens), so a step's entries cost the distinct tokens, not the
 * sequence's length. */
#ifndef PE_ENGINE_PENALTIES_H
#define PE_ENGINE_PENALTIES_H

#include <stdint.h>

#include "kernels/sample.h"
#include "pengine/pengine.h"

typedef struct en_counts {
    int32_t *ids;       /* (n) the distinct tokens, in the order first seen */
    int32_t *gen;       /* (n) times each was generated */
    uint8_t *prompt;    /* (n) 1: it is in the prompt */
    int n, cap;
    int32_t *slots;     /* (nslots, a power of 2) open addressing: index + 1 in ids, 0 empty */
    int nslots;
    int seen;           /* the sequence's tokens counted */
    int gen_start;      /* the position generated tokens start at, as counted */
} en_counts;

/* 1 when s changes any logit. */
int en_penalties_on(const pe_sampling *s);

/* Counts tokens[seen .. ntok) of a sequence whose generated tokens start at gen_start; a
 * gen_start other than the counted one (an append) counts everything again. 0, or -1 when
 * out of memory (the counts are then empty, to be made again). */
int en_counts_update(en_counts *c, const int32_t *tokens, int ntok, int gen_start);
/* Takes tokens[n .. seen) back out of the counts (a decode's drafts, counted for its rows;
 * speculate.h), as if only tokens[0 .. n) had been counted. */
void en_counts_forget(en_counts *c, const int32_t *tokens, int n);

/* The entries of logit row `row` into out (room for c->n + nbias): the penalties of s on
 * the tokens counted in c (NULL: none), and bias (nbias, sorted by token, each once).
 * Returns how many. */
int en_counts_entries(const en_counts *c, const pe_sampling *s, const pe_logit_bias *bias,
                      int nbias, int row, pe_k_penalty *out);

/* Bans ids (nids; repeats allowed) on logit row `row`: a ban sets the logit to -inf. The
 * row's entries e (n, room for n + nids) keep one entry per id: a banned id's own entry
 * gets add = -inf, another gets one. Returns the entries now. */
int en_ban_tokens(pe_k_penalty *e, int n, const int32_t *ids, int nids, int row);

void en_counts_free(en_counts *c);

/* qsort/bsearch order of pe_logit_bias entries: by token. */
int en_bias_by_token(const void *a, const void *b);

#endif
