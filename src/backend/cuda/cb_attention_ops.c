/* cb_attention_ops.c: the paged KV cache's ops on the CUDA backend, kv_append and
 * attention: argument checks, the launch on the device's stream (attention with the
 * device's split workspace, made at open), launch errors as pe_status. The grids are in
 * cb_decoder.cu (append) and cb_attention.cu. */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cb_internal.h"

/* The pool's dtype and shape, and the layer: what the host's hb_kv_check refuses. */
static pe_status check_pool(be_device *dev, const char *op, const be_kv *kv, int layer)
{
    const pe_k_kv_shape s = kv->shape;
    if (kv->dtype != PE_DTYPE_FP32 && kv->dtype != PE_DTYPE_BF16)
        return pe_fail(&dev->err, PE_EINVAL, "%s: the KV pool's dtype %d is neither fp32 nor bf16",
                       op, (int)kv->dtype);
    if (s.nlayers < 1 || s.kv_heads < 1 || s.block_tokens < 1 || s.head_dim < 1 ||
        s.head_dim % 2 != 0) /* even, as on the host: RoPE turns pairs of dimensions */
        return pe_fail(&dev->err, PE_EINVAL,
                       "%s: KV pool shape (%d layers, %d KV heads, %d tokens a block, head_dim "
                       "%d); all must be >= 1 and head_dim even",
                       op, s.nlayers, s.kv_heads, s.block_tokens, s.head_dim);
    if (layer < 0 || layer >= s.nlayers)
        return pe_fail(&dev->err, PE_EINVAL, "%s: layer %d is outside the pool's %d layers", op,
                       layer, s.nlayers);
    if (s.nblocks > SIZE_MAX / pe_k_kv_block_elems(s) / 4)
        return pe_fail(&dev->err, PE_EINVAL, "%s: a pool of %zu blocks overflows", op,
                       s.nblocks);
    return PE_OK;
}

pe_status cb_kv_append(be_device *dev, const be_kv *kv, int layer, const float *k,
                       const float *v, size_t stride, const int32_t *slots, size_t rows)
{
    pe_status st = check_pool(dev, "kv_append", kv, layer);
    if (st != PE_OK)
        return st;
    const size_t width = (size_t)kv->shape.kv_heads * (size_t)kv->shape.head_dim;
    if (rows && stride < width)
        return pe_fail(&dev->err, PE_EINVAL,
                       "kv_append: %d KV heads of %d do not fit in a row of stride %zu",
                       kv->shape.kv_heads, kv->shape.head_dim, stride);
    if (rows && stride > SIZE_MAX / rows)
        return pe_fail(&dev->err, PE_EINVAL, "kv_append: rows %zu x stride %zu overflows", rows,
                       stride);
    return cb_check_launch(dev,
                           cb_launch_kv_append(dev->stream, kv->base, kv->dtype == PE_DTYPE_BF16,
                                               kv->shape, layer, k, v, stride, slots,
                                               rows),
                           "kv_append kernel launch");
}

pe_status cb_attention(be_device *dev, const be_kv *kv, int layer, const be_attn *a)
{
    pe_status st = check_pool(dev, "attention", kv, layer);
    if (st != PE_OK)
        return st;
    const pe_k_kv_shape s = kv->shape;
    if (a->heads < 1 || a->heads % s.kv_heads)
        return pe_fail(&dev->err, PE_EINVAL,
                       "attention: %d query heads are not a positive multiple of the pool's %d "
                       "KV heads",
                       a->heads, s.kv_heads);
    if (s.head_dim > CB_ATTN_MAX_HEAD_DIM)
        return pe_fail(&dev->err, PE_EINVAL,
                       "attention: head_dim %d is above the CUDA kernels' limit of %d",
                       s.head_dim, CB_ATTN_MAX_HEAD_DIM);
    const size_t width = (size_t)a->heads * (size_t)s.head_dim;
    if (a->rows && (a->q_stride < width || a->out_stride < width))
        return pe_fail(&dev->err, PE_EINVAL,
                       "attention: %d heads of %d do not fit in rows of stride %zu (q) and %zu "
                       "(out)",
                       a->heads, s.head_dim, a->q_stride, a->out_stride);
    if (a->window < 0 || !isfinite(a->scale))
        return pe_fail(&dev->err, PE_EINVAL, "attention: window %ld must be >= 0 and scale %g "
                       "finite", (long)a->window, (double)a->scale);
    if (a->rows > INT32_MAX || a->nchunks > INT32_MAX ||
        (a->rows && a->q_stride > SIZE_MAX / a->rows) ||
        (a->rows && a->out_stride > SIZE_MAX / a->rows))
        return pe_fail(&dev->err, PE_EINVAL, "attention: %zu rows in %zu chunks overflow",
                       a->rows, a->nchunks);
    if (a->rows && (a->nchunks == 0 || a->max_keys < 1))
        return pe_fail(&dev->err, PE_EINVAL,
                       "attention: %zu rows need at least one chunk (have %zu) and max_keys >= "
                       "1 (have %ld)",
                       a->rows, a->nchunks, (long)a->max_keys);
    const cb_attn_args args = {
        .pool = kv->base,
        .bf16 = kv->dtype == PE_DTYPE_BF16,
        .shape = s,
        .layer = layer,
        .q = a->q,
        .q_stride = a->q_stride,
        .out = a->out,
        .out_stride = a->out_stride,
        .rows = a->rows,
        .heads = a->heads,
        .scale = a->scale,
        .window = a->window,
        .nchunks = a->nchunks,
        .chunks = a->chunks,
        .block_tables = a->block_tables,
        .max_keys = a->max_keys,
    };
    return cb_check_launch(dev,
                           cb_launch_attention(dev->stream, &args, dev->attn_ws,
                                               dev->attn_ws_floats, dev->sms),
                           "attention kernel launch");
}
