/* hb_kv.c: the paged KV pool on a host device: its argument checks, and kv_append (a
 * step's keys and values stored at their slots, rounded to bf16 in a bf16 pool). */
#include "backend/host/hb_internal.h"
#include "kernels/attention.h"

pe_status hb_kv_check(be_device *dev, const be_kv *kv, int layer, const char *op)
{
    if (!kv)
        return hb_fail(dev, PE_EINVAL, "%s on host device %d: the KV pool is NULL", op,
                       dev->id);
    const pe_k_kv_shape s = kv->shape;
    if (s.nlayers <= 0 || s.kv_heads <= 0 || s.block_tokens <= 0 || s.head_dim <= 0 ||
        s.head_dim % 2 != 0)
        return hb_fail(dev, PE_EINVAL,
                       "%s on host device %d: KV pool shape nlayers=%d kv_heads=%d "
                       "block_tokens=%d head_dim=%d; all must be > 0 and head_dim even",
                       op, dev->id, s.nlayers, s.kv_heads, s.block_tokens, s.head_dim);
    if (kv->dtype != PE_DTYPE_FP32 && kv->dtype != PE_DTYPE_BF16)
        return hb_fail(dev, PE_EINVAL, "%s on host device %d: KV pool dtype %d is not fp32 or "
                       "bf16", op, dev->id, (int)kv->dtype);
    if (kv->shape.nblocks && !kv->base)
        return hb_fail(dev, PE_EINVAL, "%s on host device %d: the KV pool of %zu blocks has "
                       "no memory (base is NULL)", op, dev->id, kv->shape.nblocks);
    if (layer < 0 || layer >= s.nlayers)
        return hb_fail(dev, PE_EINVAL,
                       "%s on host device %d: layer %d is outside the pool's layers [0, %d); "
                       "pass the layer's index within this worker's stage",
                       op, dev->id, layer, s.nlayers);
    return PE_OK;
}

typedef struct append_job {
    const be_kv *kv;
    int layer, bf16;
    const float *k, *v;
    size_t stride;
    const int32_t *slots;
} append_job;

static void append_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const append_job *j = arg;
    (void)thread;
    const pe_k_kv_shape s = j->kv->shape;
    const size_t hd = (size_t)s.head_dim;
    for (size_t r = r0; r < r1; r++) {
        int32_t block = j->slots[r] / s.block_tokens, row = j->slots[r] % s.block_tokens;
        for (int h = 0; h < s.kv_heads; h++) {
            const float *kr = j->k + r * j->stride + (size_t)h * hd; /* (hd) */
            const float *vr = j->v + r * j->stride + (size_t)h * hd;
            size_t ki = pe_k_kv_index(s, block, j->layer, 0, h, row);
            size_t vi = pe_k_kv_index(s, block, j->layer, 1, h, row);
            for (size_t d = 0; d < hd; d++) {
                pe_k_kv_store(j->kv->base, j->bf16, ki + d, kr[d]);
                pe_k_kv_store(j->kv->base, j->bf16, vi + d, vr[d]);
            }
        }
    }
}

pe_status hb_kv_append(be_device *dev, const be_kv *kv, int layer, const float *k,
                       const float *v, size_t stride, const int32_t *slots, size_t rows)
{
    if (rows == 0)
        return PE_OK;
    pe_status st = hb_kv_check(dev, kv, layer, "kv_append");
    if (st != PE_OK)
        return st;
    HB_NEED(dev, k, 1, "kv_append");
    HB_NEED(dev, v, 1, "kv_append");
    HB_NEED(dev, slots, 1, "kv_append");
    size_t width = (size_t)kv->shape.kv_heads * (size_t)kv->shape.head_dim;
    if (rows > 1 && stride < width)
        return hb_fail(dev, PE_EINVAL,
                       "kv_append on host device %d: stride=%zu is shorter than the %d KV "
                       "heads x head_dim %d of a row; pass the row length of k and v",
                       dev->id, stride, kv->shape.kv_heads, kv->shape.head_dim);
    /* Every slot is checked before anything is stored: a bad one leaves the pool as it was. */
    size_t slots_in_pool = kv->shape.nblocks * (size_t)kv->shape.block_tokens;
    for (size_t r = 0; r < rows; r++)
        if (slots[r] < 0 || (size_t)slots[r] >= slots_in_pool)
            return hb_fail(dev, PE_EINVAL,
                           "kv_append on host device %d: row %zu's slot %d is outside the "
                           "pool's %zu slots (%zu blocks of %d); check the sequence's block "
                           "table",
                           dev->id, r, (int)slots[r], slots_in_pool, kv->shape.nblocks,
                           kv->shape.block_tokens);
    append_job j = {kv, layer, kv->dtype == PE_DTYPE_BF16, k, v, stride, slots};
    hb_for(dev, rows, hb_row_grain(2 * width), append_rows, &j);
    return PE_OK;
}
