/* test_generate.h: the runs that the grid tests compare with one device's: up to 8
 * sequences of seeded prompts of different lengths, generated greedy or sampled with every
 * token and its top-k logprobs kept; pe_score's logits over 20 positions and
 * pe_score_logprobs' logprobs of those positions' next tokens; and the checks
 * that two runs agree. Header-only (static), for test_decoder_grids (one process) and
 * test_mpi_grids (an MPI job).
 *
 * These helpers never fail the test themselves: each returns 0 and says why in `why` (TG_WHY
 * chars), so that test_mpi_grids can end its whole job (MPI_Abort) where test_decoder_grids
 * fails its cmocka test.
 */
#ifndef PE_TEST_GENERATE_H
#define PE_TEST_GENERATE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pengine/pengine.h"
#include "test_models.h"

/* TG_G tokens a sequence in the grid runs, at most TG_MAXG in a run */
enum { TG_NSEQ = 8, TG_G = 32, TG_MAXG = 128, TG_MAXPROMPT = 40, TG_TOPK = 5, TG_NSCORE = 20,
       TG_WHY = 256 };

/* Sequence i's prompt (i < TG_NSEQ): seeded tokens (seed + i), as many as its length of
 * {1, 40, 7, 25, 12, 18, 3, 31}, which it returns. */
static inline size_t tg_prompt(int32_t prompt[TG_MAXPROMPT], int i, int vocab, uint64_t seed)
{
    static const size_t lens[TG_NSEQ] = {1, 40, 7, 25, 12, 18, 3, 31};
    tm_tokens(prompt, lens[i], vocab, seed + (uint64_t)i);
    return lens[i];
}

/* Sequence i's params: its prompt (tg_prompt with seed, written into prompt), max_tokens
 * tokens ignoring EOS, greedy, user = i. */
static inline void tg_params(pe_seq_params *p, int32_t prompt[TG_MAXPROMPT], int i, int vocab,
                             uint64_t seed, int max_tokens)
{
    pe_seq_params_init(p);
    p->prompt = prompt;
    p->prompt_len = tg_prompt(prompt, i, vocab, seed);
    p->max_tokens = max_tokens;
    p->ignore_eos = 1;
    p->user = (void *)(intptr_t)i;
}

/* How tg_generate samples: greedy; with a temperature, top-k, min-p, top-p and the three
 * penalties (TP gathers each rank's top-k candidates, each rank penalizing its own ids);
 * with a temperature, min-p and top-p (TP gathers the rows whole); greedy with the penalties
 * (TP gathers each rank's best). */
typedef enum tg_sampling {
    TG_GREEDY = 0,
    TG_SAMPLED_TOP_K,
    TG_SAMPLED_ALL,
    TG_GREEDY_PENALIZED
} tg_sampling;

static inline int tg_greedy(tg_sampling how)
{
    return how == TG_GREEDY || how == TG_GREEDY_PENALIZED;
}

/* The tokens of a run's nseq sequences, G asked of each. */
typedef struct tg_answers {
    int nseq, G;
    tg_sampling how;
    int ntok[TG_NSEQ];
    int32_t tok[TG_NSEQ][TG_MAXG];
    float lp[TG_NSEQ][TG_MAXG];                 /* each token's logprob */
    float top[TG_NSEQ][TG_MAXG][TG_TOPK];       /* top-k logprobs */
    int32_t top_ids[TG_NSEQ][TG_MAXG][TG_TOPK]; /* ... and their tokens */
} tg_answers;

/* nseq sequences (prompts tg_prompt(i, seed 100)), G tokens each (ignoring EOS), sampled
 * `how` (seed 7 + i), with TG_TOPK logprobs; every event taken. 0: a submit failed, a
 * sequence ended otherwise than by its length, or got more than G tokens. */
static inline int tg_generate(pe_engine *e, int vocab, int nseq, int G, tg_sampling how,
                              tg_answers *out, char why[TG_WHY])
{
    memset(out, 0, sizeof *out);
    out->how = how;
    out->nseq = nseq;
    out->G = G;
    for (int i = 0; i < nseq; i++) {
        int32_t prompt[TG_MAXPROMPT];
        pe_seq_params p;
        tg_params(&p, prompt, i, vocab, 100, G);
        if (how == TG_SAMPLED_TOP_K || how == TG_SAMPLED_ALL) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_k = how == TG_SAMPLED_TOP_K ? 40 : 0;
            p.sampling.top_p = 0.95f;
            p.sampling.min_p = how == TG_SAMPLED_TOP_K ? 0.3f : 0.25f; /* cuts some */
            p.sampling.seed = 7 + (uint64_t)i;
        }
        if (how == TG_SAMPLED_TOP_K || how == TG_GREEDY_PENALIZED) {
            p.sampling.repetition_penalty = 1.3f;
            p.sampling.frequency_penalty = 0.4f;
            p.sampling.presence_penalty = 0.2f;
        }
        p.logprobs = TG_TOPK;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK) {
            snprintf(why, TG_WHY, "pe_seq_submit: %s", pe_last_error());
            return 0;
        }
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        if (ev.finish != PE_FINISH_NONE && ev.finish != PE_FINISH_LENGTH) {
            snprintf(why, TG_WHY, "sequence %d ended with finish %d, status %s: %s", i,
                     (int)ev.finish, pe_status_str(ev.status), pe_engine_last_error(e));
            return 0;
        }
        if (ev.token < 0)
            continue;
        int k = out->ntok[i]++;
        if (k >= G) {
            snprintf(why, TG_WHY, "sequence %d got more than %d tokens", i, G);
            return 0;
        }
        out->tok[i][k] = ev.token;
        out->lp[i][k] = ev.logprob;
        for (int j = 0; j < ev.nlogprobs && j < TG_TOPK; j++) {
            out->top[i][k][j] = ev.top_logprobs[j];
            out->top_ids[i][k][j] = ev.top_tokens[j];
        }
        if (tg_greedy(how) && (ev.nlogprobs < 1 || ev.token != ev.top_tokens[0])) {
            snprintf(why, TG_WHY, "sequence %d token %d: greedy chose %d, its top logprob is "
                     "token %d's (%d logprobs)", i, k, ev.token,
                     ev.nlogprobs ? ev.top_tokens[0] : -1, ev.nlogprobs);
            return 0;
        }
    }
    return 1;
}

/* Whether the reference's top-k logprob j is within 1e-4 of its neighbour's: a near-tie,
 * whose two ids another order of the same sums may swap. */
static inline int tg_near_tie(const float top[TG_TOPK], int j)
{
    return (j > 0 && fabsf(top[j] - top[j - 1]) <= 1e-4f) ||
           (j + 1 < TG_TOPK && fabsf(top[j] - top[j + 1]) <= 1e-4f);
}

/* The reference's logprob of token t at step k of sequence i, if t is among its top k
 * (else 1: no logprob is positive). */
static inline float tg_ref_logprob(const tg_answers *one, int i, int k, int32_t t)
{
    for (int j = 0; j < TG_TOPK; j++)
        if (one->top_ids[i][k][j] == t)
            return one->top[i][k][j];
    return 1.0f;
}

/* Whether got's token k of sequence i, other than the reference's, is one that another
 * order of the same sums (another kernel, for a step of other rows: the GEMV's and the
 * GEMM's last bits differ) may pick instead, after which the two sequences part:
 * - greedy: a near-tie, both among the reference's top k with logprobs within 1e-4;
 * - sampled: a draw on the boundary between them, which the sampler's walk over the kept
 *   tokens in index order (kernels/sample.h) meets where the two tokens are neighbours. */
static inline int tg_parts_at_a_near_tie(const tg_answers *one, const tg_answers *got, int i,
                                         int k)
{
    int32_t a = one->tok[i][k], b = got->tok[i][k];
    if (!tg_greedy(one->how))
        return a == b + 1 || b == a + 1;
    float la = tg_ref_logprob(one, i, k, a), lb = tg_ref_logprob(one, i, k, b);
    return la <= 0.0f && lb <= 0.0f && fabsf(la - lb) <= 1e-4f;
}

/* got has G tokens a sequence, the reference one's, with its top-k logprobs within 1e-4 and
 * their ids in the same order, except where two of them are a near-tie; a sequence may
 * part from the reference at a near-tie (tg_parts_at_a_near_tie), and is compared up to
 * there. */
static inline int tg_same_answers(const tg_answers *one, const tg_answers *got, char why[TG_WHY])
{
    for (int i = 0; i < one->nseq; i++) {
        if (got->ntok[i] != one->G) {
            snprintf(why, TG_WHY, "sequence %d got %d tokens, not %d", i, got->ntok[i], one->G);
            return 0;
        }
        for (int k = 0; k < one->G; k++) {
            if (got->tok[i][k] != one->tok[i][k]) {
                if (tg_parts_at_a_near_tie(one, got, i, k)) {
                    printf("    (sequence %d parts from the reference at token %d, %s: %d %.7g "
                           "and %d %.7g)\n",
                           i, k,
                           tg_greedy(one->how) ? "a near-tie" : "a draw between neighbours",
                           one->tok[i][k], (double)one->lp[i][k], got->tok[i][k],
                           (double)got->lp[i][k]);
                    break;
                }
                snprintf(why, TG_WHY,
                         "sequence %d token %d is %d, the reference's %d (the reference's best "
                         "two: %d %.7g, %d %.7g; got's: %d %.7g, %d %.7g)",
                         i, k, got->tok[i][k], one->tok[i][k], one->top_ids[i][k][0],
                         (double)one->top[i][k][0], one->top_ids[i][k][1],
                         (double)one->top[i][k][1], got->top_ids[i][k][0],
                         (double)got->top[i][k][0], got->top_ids[i][k][1],
                         (double)got->top[i][k][1]);
                return 0;
            }
            for (int j = 0; j < TG_TOPK; j++)
                if ((got->top_ids[i][k][j] != one->top_ids[i][k][j] &&
                     !tg_near_tie(one->top[i][k], j)) ||
                    fabsf(got->top[i][k][j] - one->top[i][k][j]) > 1e-4f) {
                    snprintf(why, TG_WHY, "sequence %d token %d logprob %d: %d %g, the "
                             "reference's %d %g", i, k, j, got->top_ids[i][k][j],
                             (double)got->top[i][k][j], one->top_ids[i][k][j],
                             (double)one->top[i][k][j]);
                    return 0;
                }
        }
    }
    return 1;
}

/* got has the reference's answers bit for bit: every token, its logprob, and its top-k ids
 * and logprobs. What a grid without TP gives on a batch-invariant host backend
 * (hb_simd_batch_invariant), whichever sequences share its steps. */
static inline int tg_identical_answers(const tg_answers *one, const tg_answers *got,
                                       char why[TG_WHY])
{
    for (int i = 0; i < one->nseq; i++) {
        if (got->ntok[i] != one->G) {
            snprintf(why, TG_WHY, "sequence %d got %d tokens, not %d", i, got->ntok[i], one->G);
            return 0;
        }
        for (int k = 0; k < one->G; k++)
            if (got->tok[i][k] != one->tok[i][k] ||
                memcmp(&got->lp[i][k], &one->lp[i][k], sizeof got->lp[i][k]) != 0 ||
                memcmp(got->top[i][k], one->top[i][k], sizeof got->top[i][k]) != 0 ||
                memcmp(got->top_ids[i][k], one->top_ids[i][k], sizeof got->top_ids[i][k])) {
                snprintf(why, TG_WHY,
                         "sequence %d token %d: %d (logprob %.9g, best %d %.9g) where the "
                         "reference has %d (%.9g, best %d %.9g): not the same bits",
                         i, k, got->tok[i][k], (double)got->lp[i][k], got->top_ids[i][k][0],
                         (double)got->top[i][k][0], one->tok[i][k], (double)one->lp[i][k],
                         one->top_ids[i][k][0], (double)one->top[i][k][0]);
                return 0;
            }
    }
    return 1;
}

/* pe_score at every position of a TG_NSCORE-token prompt (seed 55): (TG_NSCORE, vocab)
 * logits, to free; NULL when out of memory or pe_score failed. */
static inline float *tg_score(pe_engine *e, int vocab, char why[TG_WHY])
{
    int32_t prompt[TG_NSCORE];
    tm_tokens(prompt, TG_NSCORE, vocab, 55);
    float *logits = malloc((size_t)TG_NSCORE * (size_t)vocab * sizeof *logits);
    if (!logits) {
        snprintf(why, TG_WHY, "out of memory for the logits");
        return NULL;
    }
    if (pe_score(e, prompt, TG_NSCORE, 1, logits) != PE_OK) {
        snprintf(why, TG_WHY, "pe_score: %s", pe_last_error());
        free(logits);
        return NULL;
    }
    return logits;
}

/* tg_score's logits within 1e-4 of their scale (the largest |one|) of the reference's, or,
 * when bits is set, with the same bits. */
static inline int tg_same_logits(const float *one, const float *got, int vocab, int bits,
                                 char why[TG_WHY])
{
    if (bits) {
        for (size_t i = 0; i < (size_t)TG_NSCORE * (size_t)vocab; i++)
            if (memcmp(&got[i], &one[i], sizeof *got) != 0) {
                snprintf(why, TG_WHY, "pe_score's logit %zu is %.9g, the reference's %.9g: "
                         "not the same bits", i, (double)got[i], (double)one[i]);
                return 0;
            }
        return 1;
    }
    double d = 0, scale = 0;
    for (size_t i = 0; i < (size_t)TG_NSCORE * (size_t)vocab; i++) {
        d = fmax(d, fabs((double)got[i] - one[i]));
        scale = fmax(scale, fabs((double)one[i]));
    }
    if (!(d <= 1e-4 * scale)) {
        snprintf(why, TG_WHY, "pe_score's logits differ by %g, scale %g", d, scale);
        return 0;
    }
    return 1;
}

/* pe_score_logprobs of tg_score's prompt with the TG_TOPK most likely tokens: out
 * (TG_NSCORE - 1). 0 with why when it failed. */
static inline int tg_prompt_logprobs(pe_engine *e, int vocab, pe_logprobs *out,
                                     char why[TG_WHY])
{
    int32_t prompt[TG_NSCORE];
    tm_tokens(prompt, TG_NSCORE, vocab, 55);
    memset(out, 0, (TG_NSCORE - 1) * sizeof *out);
    if (pe_score_logprobs(e, prompt, TG_NSCORE, TG_TOPK, out) != PE_OK) {
        snprintf(why, TG_WHY, "pe_score_logprobs: %s", pe_last_error());
        return 0;
    }
    return 1;
}

/* got[p], p < n - 1 (pe_score_logprobs of prompt's n tokens with `top` most likely),
 * against the log-softmax in double of logits' row p ((n, vocab), pe_score's at every
 * position): the token prompt[p + 1], its logprob, and the k-th most likely's logprob, each
 * within tol (times the row's scale, the largest |logit| or 1, when `scaled`); the k-th
 * token may be any whose reference logprob is that close to the k-th value (a near tie may
 * swap two). 0 with why when not. */
static inline int tg_log_softmax_matches(const float *logits, const int32_t *prompt, int n,
                                         int vocab, const pe_logprobs *got, int top,
                                         double tol, int scaled, char why[TG_WHY])
{
    double *lp = malloc((size_t)vocab * sizeof *lp);
    double *sorted = malloc((size_t)vocab * sizeof *sorted);
    int ok = lp && sorted;
    if (!ok)
        snprintf(why, TG_WHY, "out of memory for the reference");
    for (int p = 0; ok && p + 1 < n; p++) {
        const float *row = logits + (size_t)p * (size_t)vocab;
        double mx = -INFINITY, sum = 0, scale = 1;
        for (int v = 0; v < vocab; v++)
            mx = fmax(mx, row[v]), scale = fmax(scale, fabs(row[v]));
        for (int v = 0; v < vocab; v++)
            sum += exp(row[v] - mx);
        for (int v = 0; v < vocab; v++)
            sorted[v] = lp[v] = row[v] - mx - log(sum);
        for (int k = 0; k < top; k++) /* the `top` largest first */
            for (int v = k + 1; v < vocab; v++)
                if (sorted[v] > sorted[k]) {
                    double t = sorted[k];
                    sorted[k] = sorted[v], sorted[v] = t;
                }
        const double within = scaled ? tol * scale : tol;
        const pe_logprobs *g = &got[p];
        if (g->token != prompt[p + 1] || !(fabs(g->logprob - lp[prompt[p + 1]]) <= within) ||
            g->nlogprobs != top) {
            snprintf(why, TG_WHY, "prompt logprobs at %d: token %d logprob %.8g with %d top, "
                     "the reference's token %d %.8g", p, (int)g->token, (double)g->logprob,
                     g->nlogprobs, (int)prompt[p + 1], lp[prompt[p + 1]]);
            ok = 0;
        }
        for (int k = 0; ok && k < top; k++) {
            const int32_t t = g->top_tokens[k];
            if (t < 0 || t >= vocab || !(fabs(g->top_logprobs[k] - sorted[k]) <= within) ||
                !(fabs(lp[t] - sorted[k]) <= within)) {
                snprintf(why, TG_WHY, "prompt logprobs at %d: top %d is token %d at %.8g, the "
                         "reference's %d-th most likely is at %.8g", p, k, (int)t,
                         (double)g->top_logprobs[k], k, sorted[k]);
                ok = 0;
            }
        }
    }
    free(lp);
    free(sorted);
    return ok;
}

/* got (tg_prompt_logprobs) against the log-softmax of one device's logits (tg_score's), each
 * value within 1e-4 of the logits' scale. */
static inline int tg_same_prompt_logprobs(const float *one, const pe_logprobs *got, int vocab,
                                          char why[TG_WHY])
{
    int32_t prompt[TG_NSCORE];
    tm_tokens(prompt, TG_NSCORE, vocab, 55);
    return tg_log_softmax_matches(one, prompt, TG_NSCORE, vocab, got, TG_TOPK, 1e-4, 1, why);
}

#endif
