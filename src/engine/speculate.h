/* speculate.h: draft tokens by prompt lookup (n-gram speculation, as vLLM's "ngram" method
 * and llama.cpp's lookup decoding). A sequence that repeats itself, or copies from its
 * prompt (code edits, quoting, extraction), often goes on as it went on the last time its
 * latest tokens appeared. Those continuations are drafts: the device checks all of them in
 * one step (one chunk, one logit row per token), and the scheduler keeps the tokens the
 * model itself samples, up to the first draft it disagrees with (scheduler_step.c). A draft
 * never changes a token: row k samples with the draw the token would have had anyway. */
#ifndef PE_ENGINE_SPECULATE_H
#define PE_ENGINE_SPECULATE_H

#include <stdint.h>

/* Finds the latest earlier place where tokens' last n tokens appeared, for n from nmax down
 * to nmin (the longest match wins), and drafts the `most` tokens that followed it there:
 * where those run past the end, the drafts go on with the same period (a loop repeats).
 * Returns `most`, or 0 when nothing matched (or most <= 0).
 * tokens: (ntok) a sequence's prompt and generated tokens. out: (most). */
int en_ngram_draft(const int32_t *tokens, int ntok, int nmin, int nmax, int most,
                   int32_t *out);

#endif
