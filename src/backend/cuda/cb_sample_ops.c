/* cb_sample_ops.c: argmax, topk, sample, penalize and mask on the CUDA backend: argument
 * checks, the launch on the device's stream, launch errors as pe_status. The grids (one block per
 * row) are in cb_sample.cu. No rows is PE_OK before any check, as on the host. */
#include <stdint.h>

#include "backend/cuda/cb_internal.h"

/* rows >= 1 (the callers return first for none). */
static pe_status check_rows(be_device *dev, const char *op, size_t rows, size_t n,
                            size_t max_n)
{
    if (n == 0)
        return pe_fail(&dev->err, PE_EINVAL, "%s: rows of 0 values have no largest", op);
    if (n > max_n)
        return pe_fail(&dev->err, PE_EINVAL,
                       "%s: rows of %zu values are wider than the CUDA kernel's limit of %zu",
                       op, n, max_n);
    if (rows > SIZE_MAX / n)
        return pe_fail(&dev->err, PE_EINVAL, "%s: rows %zu x n %zu overflows", op, rows, n);
    return PE_OK;
}

pe_status cb_argmax(be_device *dev, const float *x, size_t rows, size_t n, int32_t *idx)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_rows(dev, "argmax", rows, n, INT32_MAX);
    if (s != PE_OK)
        return s;
    return cb_check_launch(dev, cb_launch_argmax(dev->stream, x, rows, n, idx),
                           "argmax kernel launch");
}

pe_status cb_topk(be_device *dev, const float *x, size_t rows, size_t n, size_t k,
                  int32_t *idx, float *val, float *lse)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_rows(dev, "topk", rows, n, INT32_MAX);
    if (s != PE_OK)
        return s;
    if (k > n || k > CB_TOPK_MAX)
        return pe_fail(&dev->err, PE_EINVAL,
                       "topk: k = %zu must be <= the row's %zu values and <= %d (the CUDA "
                       "kernel's limit)",
                       k, n, CB_TOPK_MAX);
    return cb_check_launch(dev, cb_launch_topk(dev->stream, x, rows, n, k, idx, val, lse),
                           "topk kernel launch");
}

pe_status cb_penalize(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                      const pe_k_penalty *p, size_t count)
{
    if (rows == 0 || count == 0)
        return PE_OK;
    pe_status s = check_rows(dev, "penalize", rows, n, INT32_MAX);
    if (s == PE_OK && rows > INT32_MAX)
        s = pe_fail(&dev->err, PE_EINVAL, "penalize: %zu rows; at most %d", rows, INT32_MAX);
    if (s == PE_OK && (!x || !p))
        s = pe_fail(&dev->err, PE_EINVAL, "penalize: the logits and the entries must not be "
                    "NULL");
    if (s != PE_OK)
        return s;
    return cb_check_launch(dev, cb_launch_penalize(dev->stream, x, rows, n, id0, p, count),
                           "penalize kernel launch");
}

pe_status cb_mask(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                  const int32_t *row_mask, const uint32_t *bits, size_t words)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_rows(dev, "mask", rows, n, INT32_MAX);
    if (s == PE_OK && (rows > INT32_MAX || words > INT32_MAX))
        s = pe_fail(&dev->err, PE_EINVAL, "mask: %zu rows of %zu-word masks; at most %d each",
                    rows, words, INT32_MAX);
    if (s == PE_OK && (!x || !row_mask || (words && !bits)))
        s = pe_fail(&dev->err, PE_EINVAL, "mask: the logits, the rows' masks and the bits must "
                    "not be NULL");
    if (s != PE_OK)
        return s;
    return cb_check_launch(dev, cb_launch_mask(dev->stream, x, rows, n, id0, row_mask, bits,
                                               words),
                           "mask kernel launch");
}

pe_status cb_sample(be_device *dev, const float *x, size_t rows, size_t n,
                    const pe_k_sampling *params, int32_t *tokens, float *logit)
{
    if (rows == 0)
        return PE_OK;
    pe_status s = check_rows(dev, "sample", rows, n, CB_SAMPLE_MAX_N);
    if (s != PE_OK)
        return s;
    return cb_check_launch(dev,
                           cb_launch_sample(dev->stream, x, rows, n, params, tokens, logit),
                           "sample kernel launch");
}
