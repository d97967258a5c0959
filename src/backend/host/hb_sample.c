/* hb_sample.c: choosing tokens from logits on a host device: argmax, the top-k list with
 * log-sum-exp, and sampling by sample.h's rule (pe_k_sample_row per row, with per-thread
 * scratch), rows split over the device's threads; and the penalties and masks before them. */
#include <stdint.h>

#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "kernels/sample.h"

/* Checks a (rows, n) logits operand; n must fit sample.h's int32 indices. */
static pe_status check_logits(be_device *dev, const float *x, size_t rows, size_t n,
                              const char *op)
{
    if (n == 0 || n > INT32_MAX)
        return hb_fail(dev, PE_EINVAL,
                       "%s on host device %d: rows of n=%zu logits; n must be in [1, %d]", op,
                       dev->id, n, INT32_MAX);
    HB_NEED(dev, x, rows, op);
    return PE_OK;
}

/* ---- argmax ------------------------------------------------------------------------- */

typedef struct argmax_job {
    const float *x;
    size_t n;
    int32_t *idx;
} argmax_job;

static void argmax_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const argmax_job *j = arg;
    (void)thread;
    const hb_simd *simd = hb_simd_get();
    for (size_t r = r0; r < r1; r++)
        j->idx[r] = simd->argmax(j->x + r * j->n, (int32_t)j->n);
}

pe_status hb_argmax(be_device *dev, const float *x, size_t rows, size_t n, int32_t *idx)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_logits(dev, x, rows, n, "argmax");
    if (s != PE_OK)
        return s;
    HB_NEED(dev, idx, rows, "argmax");
    argmax_job j = {x, n, idx};
    hb_for(dev, rows, hb_row_grain(n), argmax_rows, &j);
    return PE_OK;
}

/* ---- top-k -------------------------------------------------------------------------- */

typedef struct topk_job {
    const float *x;
    size_t n, k;
    int32_t *idx;
    float *val, *lse;
} topk_job;

static void topk_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const topk_job *j = arg;
    (void)thread;
    for (size_t r = r0; r < r1; r++) {
        const float *row = j->x + r * j->n;
        if (j->k)
            pe_k_topk_row(row, (int32_t)j->n, (int32_t)j->k, j->idx + r * j->k,
                          j->val + r * j->k);
        if (j->lse)
            j->lse[r] = pe_k_logsumexp_row(row, (int32_t)j->n);
    }
}

pe_status hb_topk(be_device *dev, const float *x, size_t rows, size_t n, size_t k,
                  int32_t *idx, float *val, float *lse)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_logits(dev, x, rows, n, "topk");
    if (s != PE_OK)
        return s;
    if (k > n)
        return hb_fail(dev, PE_EINVAL,
                       "topk on host device %d: k=%zu is larger than the row's n=%zu; ask for "
                       "at most n",
                       dev->id, k, n);
    HB_NEED(dev, idx, k, "topk");
    HB_NEED(dev, val, k, "topk");
    topk_job j = {x, n, k, idx, val, lse};
    hb_for(dev, rows, hb_row_grain(n), topk_rows, &j);
    return PE_OK;
}

/* ---- penalties ---------------------------------------------------------------------- */

pe_status hb_penalize(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                      const pe_k_penalty *p, size_t count)
{
    if (rows == 0 || count == 0)
        return PE_OK;
    pe_status s = check_logits(dev, x, rows, n, "penalize");
    if (s != PE_OK)
        return s;
    HB_NEED(dev, p, count, "penalize");
    if (rows > INT32_MAX || count > INT32_MAX)
        return hb_fail(dev, PE_EINVAL, "penalize on host device %d: %zu rows and %zu entries; "
                       "at most %d each", dev->id, rows, count, INT32_MAX);
    /* a few entries a row that samples: one thread */
    pe_k_penalize_rows(x, (int32_t)rows, (int32_t)n, id0, p, (int32_t)count);
    return PE_OK;
}

pe_status hb_mask(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                  const int32_t *row_mask, const uint32_t *bits, size_t words)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_logits(dev, x, rows, n, "mask");
    if (s != PE_OK)
        return s;
    HB_NEED(dev, row_mask, rows, "mask");
    HB_NEED(dev, bits, words, "mask");
    if (rows > INT32_MAX || words > INT32_MAX)
        return hb_fail(dev, PE_EINVAL, "mask on host device %d: %zu rows of %zu-word masks; "
                       "at most %d each", dev->id, rows, words, INT32_MAX);
    /* a pass over the masked rows: one thread */
    pe_k_mask_rows(x, (int32_t)rows, (int32_t)n, id0, row_mask, bits, (int32_t)words);
    return PE_OK;
}

/* ---- sampling ----------------------------------------------------------------------- */

typedef struct sample_job {
    const float *x;
    size_t n;
    const pe_k_sampling *params;
    int32_t *tokens;
    float *logit;
    be_device *dev;
} sample_job;

static void sample_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const sample_job *j = arg;
    float *w = hb_tls(j->dev, thread);         /* (n) weights */
    uint32_t *hist = (uint32_t *)(w + j->n);    /* (256) */
    float *mass = (float *)(hist + 256);        /* (256) */
    const hb_simd *simd = hb_simd_get();
    for (size_t r = r0; r < r1; r++) {
        const float *row = j->x + r * j->n;
        int32_t t = j->params[r].temperature > 0.0f /* else greedy: pe_k_sample_row's argmax */
                        ? pe_k_sample_row(row, (int32_t)j->n, j->params[r], w, hist, mass)
                        : simd->argmax(row, (int32_t)j->n);
        j->tokens[r] = t;
        if (j->logit)
            j->logit[r] = row[t];
    }
}

pe_status hb_sample(be_device *dev, const float *x, size_t rows, size_t n,
                    const pe_k_sampling *params, int32_t *tokens, float *logit)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_logits(dev, x, rows, n, "sample");
    if (s != PE_OK)
        return s;
    HB_NEED(dev, params, rows, "sample");
    HB_NEED(dev, tokens, rows, "sample");
    for (size_t r = 0; r < rows; r++) {
        pe_k_sampling p = params[r];
        if (!(p.temperature >= 0.0f) || p.top_k < 0 || !(p.top_p > 0.0f && p.top_p <= 1.0f) ||
            !(p.u >= 0.0f && p.u < 1.0f) || !(p.min_p >= 0.0f && p.min_p <= 1.0f))
            return hb_fail(dev, PE_EINVAL,
                           "sample on host device %d: row %zu has temperature=%g top_k=%d "
                           "top_p=%g u=%g min_p=%g; need temperature >= 0, top_k >= 0, top_p "
                           "in (0, 1], u in [0, 1) and min_p in [0, 1]",
                           dev->id, r, (double)p.temperature, (int)p.top_k, (double)p.top_p,
                           (double)p.u, (double)p.min_p);
    }
    s = hb_scratch_reserve(dev, (n + 512) * sizeof(float), "sample");
    if (s != PE_OK)
        return s;
    sample_job j = {x, n, params, tokens, logit, dev};
    hb_for(dev, rows, hb_row_grain(n), sample_rows, &j);
    return PE_OK;
}
