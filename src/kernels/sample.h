/* sample.h: choosing the next token from a row of logits: greedy, temperature, top-k,
 * min-p, top-p; the top-k list and log-sum-exp behind logprobs; the random draws; and the logit
 * bias with the repetition, frequency and presence penalties, then structured output's
 * masks, applied to the logits before.
 *
 * The rule (both backends implement exactly this; the CUDA grids in parallel, the host
 * with the sequential functions below):
 *   temperature == 0: greedy, the first index of the row's largest logit.
 *   otherwise, over logits x(n), with T = temperature:
 *     1. top_k in (0, n): keep x_i >= t_k, t_k the k-th largest logit (ties all kept);
 *     2. w_i = exp((x_i - max x) / T) for kept i, 0 for the others; min_p > 0: w_i = 0
 *        where w_i < min_p (a token less likely than min_p times the most likely one, as
 *        vLLM's min_p, which commutes with top-k); Z = sum w;
 *     3. top_p < 1: keep w_i >= t_p, t_p the largest w such that the w_j >= t_p sum to at
 *        least top_p * Z (the smallest nucleus holding top_p of the mass);
 *     4. with u in [0, 1): the first index i, in index order, at which the running sum of
 *        the kept w passes u * (sum of kept w); the last kept index if rounding leaves
 *        none.
 * Thresholds are found by radix selection on the values' bits (exact values of the row,
 * no sort), so a parallel grid finds the same thresholds.
 *
 * u comes from (the sequence's seed, the token's index) through a counter-based draw,
 * pe_k_uniform: a sequence's tokens do not depend on what else shares its batch, its
 * replica or its grid.
 */
#ifndef PE_KERNELS_SAMPLE_H
#define PE_KERNELS_SAMPLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernel_defs.h"

/* ---- random ---------------------------------------------------------------------------- */

/* splitmix64 (Steele, Lea, Flood 2014): advances *state and returns the next output. */
PE_KFN uint64_t pe_k_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Draw number `index` of the stream `seed`: uniform in [0, 1), 24 random bits. */
PE_KFN float pe_k_uniform(uint64_t seed, uint64_t index)
{
    uint64_t s = seed ^ (index * 0xD1B54A32D192ED03ull);
    pe_k_splitmix64(&s);
    return (float)(pe_k_splitmix64(&s) >> 40) * 0x1.0p-24f;
}

/* ---- one row ----------------------------------------------------------------------------- */

typedef struct pe_k_sampling {
    float temperature; /* 0: greedy */
    int32_t top_k;     /* 0: no top-k */
    float top_p;       /* 1: no top-p; (0, 1] */
    float u;           /* this token's draw, in [0, 1) */
    float min_p;       /* 0: no min-p; [0, 1] */
} pe_k_sampling;

/* The first index of the largest value (NaNs never win); 0 for an all-NaN row. */
PE_KFN int32_t pe_k_argmax_row(const float *x, int32_t n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    int found = 0;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > bv || (!found && x[i] == bv)) {
            bv = x[i];
            best = i;
            found = 1;
        }
    return best;
}

/* A uint32 that orders as the float does (-inf < ... < -0 < +0 < ... < inf). */
PE_KFN uint32_t pe_k_order_key(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

PE_KFN float pe_k_from_order_key(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The k-th largest value of x(n), 1 <= k <= n, counting duplicates: radix selection over
 * pe_k_order_key, 8 bits a pass (4 passes). hist: 256 counters of scratch. */
PE_KFN float pe_k_kth_largest(const float *x, int32_t n, int32_t k, uint32_t *hist)
{
    uint32_t prefix = 0, mask = 0;
    int32_t above = 0; /* values known to be larger than the current range */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = 0; b < 256; b++)
            hist[b] = 0;
        for (int32_t i = 0; i < n; i++) {
            uint32_t key = pe_k_order_key(x[i]);
            if ((key & mask) == prefix)
                hist[(key >> shift) & 255u]++;
        }
        int b = 255;
        for (; b > 0; b--) {
            if (above + (int32_t)hist[b] >= k)
                break;
            above += (int32_t)hist[b];
        }
        prefix |= (uint32_t)b << shift;
        mask |= 255u << shift;
    }
    return pe_k_from_order_key(prefix);
}

/* For weights w(n) >= 0: the largest value t of w such that the w_i >= t sum to at least
 * target; 0.0f if none does (target above the weights' sum as the buckets add it), which
 * keeps every weight. Radix selection on the bits of w (which order as the values for
 * w >= 0), summing each bucket's mass in index order. hist: 256 floats of scratch. */
PE_KFN float pe_k_mass_threshold(const float *w, int32_t n, float target, float *hist)
{
    uint32_t prefix = 0, mask = 0;
    float above = 0.0f; /* mass of the weights larger than the current range */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = 0; b < 256; b++)
            hist[b] = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            uint32_t key;
            memcpy(&key, &w[i], sizeof key);
            if ((key & mask) == prefix)
                hist[(key >> shift) & 255u] += w[i];
        }
        int b = 255;
        for (; b > 0; b--) {
            if (above + hist[b] >= target)
                break;
            above += hist[b];
        }
        prefix |= (uint32_t)b << shift;
        mask |= 255u << shift;
    }
    float t;
    memcpy(&t, &prefix, sizeof t);
    return t;
}

/* Step 2's weight of logit xi: tk the top-k threshold, mx the row's max, t the
 * temperature (the max logit has weight 1). */
PE_KFN float pe_k_sample_weight(float xi, float tk, float mx, float t, float min_p)
{
    const float w = xi >= tk ? expf((xi - mx) / t) : 0.0f;
    return w >= min_p ? w : 0.0f;
}

/* The token the rule above picks from x(n). Scratch: w (n) floats for the weights, hist
 * (256) counters and mass (256) floats for the radix selections. */
PE_KFN int32_t pe_k_sample_row(const float *x, int32_t n, pe_k_sampling p, float *w,
                               uint32_t *hist, float *mass)
{
    const int32_t am = pe_k_argmax_row(x, n);
    if (!(p.temperature > 0.0f))
        return am;
    float tk = -INFINITY;
    if (p.top_k > 0 && p.top_k < n)
        tk = pe_k_kth_largest(x, n, p.top_k, hist);
    float mx = x[am];
    float z = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        w[i] = pe_k_sample_weight(x[i], tk, mx, p.temperature, p.min_p);
        z += w[i];
    }
    float tp = 0.0f;
    if (p.top_p < 1.0f)
        tp = pe_k_mass_threshold(w, n, p.top_p * z, mass);
    float kept = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0f && w[i] >= tp)
            kept += w[i];
    float r = p.u * kept, c = 0.0f;
    int32_t last = am;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > 0.0f && w[i] >= tp) {
            c += w[i];
            last = i;
            if (c > r)
                return i;
        }
    return last;
}

/* ---- penalties ----------------------------------------------------------------------------- */

/* One changed logit of a step: vocabulary id `id` of logit row `row` becomes
 * pe_k_penalize(x, add, rep, sub). A step names each (row, id) at most once. */
typedef struct pe_k_penalty {
    int32_t row, id;
    float add;         /* the logit bias (0: none) */
    float rep;         /* the repetition penalty (1: none) */
    float sub;         /* frequency x count + presence (0: none) */
} pe_k_penalty;

/* A logit after the logit bias and the penalties, in vLLM's order: plus add; then
 * repetition (a positive logit divided by rep, another multiplied, as Hugging Face's);
 * then minus sub. */
PE_KFN float pe_k_penalize(float x, float add, float rep, float sub)
{
    x += add;
    return (x > 0.0f ? x / rep : x * rep) - sub;
}

/* The penalties p(count) on logits x(rows, n) that hold vocabulary ids id0 .. id0 + n - 1
 * (a TP rank's rows): entries outside those ids or rows are another rank's, left alone. */
PE_KFN void pe_k_penalize_rows(float *x, int32_t rows, int32_t n, int32_t id0,
                               const pe_k_penalty *p, int32_t count)
{
    for (int32_t i = 0; i < count; i++) {
        int32_t c = p[i].id - id0;
        if (p[i].row >= 0 && p[i].row < rows && c >= 0 && c < n) {
            float *v = x + (size_t)p[i].row * (size_t)n + (size_t)c;
            *v = pe_k_penalize(*v, p[i].add, p[i].rep, p[i].sub);
        }
    }
}

/* ---- grammar masks ------------------------------------------------------------------------- */

/* Bit id of a mask over a vocabulary (bit id % 32 of word id / 32, `words` words): 1 when
 * the token may be sampled. Ids past the mask are not. */
PE_KFN int pe_k_mask_allows(const uint32_t *bits, int32_t words, int32_t id)
{
    return id >= 0 && (id >> 5) < words && ((bits[id >> 5] >> (id & 31)) & 1u);
}

/* Structured output's masks on logits x(rows, n) that hold vocabulary ids id0 .. id0 + n - 1
 * (a TP rank's rows): row r with row_mask[r] >= 0 keeps the logits of the ids its mask
 * (bits + row_mask[r] x words) allows, and the others become -inf; a row with
 * row_mask[r] < 0 is left alone. After the penalties, before any pick. */
PE_KFN void pe_k_mask_rows(float *x, int32_t rows, int32_t n, int32_t id0,
                           const int32_t *row_mask, const uint32_t *bits, int32_t words)
{
    for (int32_t r = 0; r < rows; r++) {
        if (row_mask[r] < 0)
            continue;
        const uint32_t *m = bits + (size_t)row_mask[r] * (size_t)words;
        for (int32_t c = 0; c < n; c++)
            if (!pe_k_mask_allows(m, words, id0 + c))
                x[(size_t)r * (size_t)n + (size_t)c] = -INFINITY;
    }
}

/* log(sum exp(x)) of x(n), max-subtracted. */
PE_KFN float pe_k_logsumexp_row(const float *x, int32_t n)
{
    float mx = x[pe_k_argmax_row(x, n)];
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++)
        s += expf(x[i] - mx);
    return mx + logf(s);
}

/* The k largest values of x(n) (k <= n) with their indices, largest first; equal values in
 * index order. Insertion into a sorted list of k: for small k (logprobs, TP candidates). */
PE_KFN void pe_k_topk_row(const float *x, int32_t n, int32_t k, int32_t *idx, float *val)
{
    int32_t have = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i];
        if (v != v) /* NaN */
            continue;
        if (have == k && !(v > val[k - 1]))
            continue;
        int32_t j = have < k ? have++ : k - 1;
        while (j > 0 && v > val[j - 1]) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        val[j] = v;
        idx[j] = i;
    }
    for (int32_t j = have; j < k; j++) { /* rows of NaNs: pad */
        val[j] = -INFINITY;
        idx[j] = -1;
    }
}

#endif
