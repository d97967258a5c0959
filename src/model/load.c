/* load.c: one worker's weights into one device allocation.
 *
 * The family's plan lists the worker's tensors, each made of pieces of checkpoint tensors
 * (stacked by rows: fused q|k|v, gate|up; a TP rank's rows or columns). The arena holds them
 * all, each 256-byte aligned. A tensor is filled a slice of rows at a time: the slice is
 * converted from the checkpoint's F32/BF16/F16 to the device dtype in a small host buffer,
 * copied to the device, and the checkpoint pages it came from are released, so loading a
 * bf16 checkpoint never holds it twice, nor in fp32.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "model/decoder.h"

#define MD_ARENA_ALIGN 256
#define MD_STAGING_BYTES ((size_t)4 << 20)

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t elem_bytes(const md_tensor *t, pe_dtype dtype)
{
    return t->matrix && dtype == PE_DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float);
}

static size_t tensor_bytes(const md_tensor *t, pe_dtype dtype)
{
    return (t->rows + t->pad_rows) * t->cols * elem_bytes(t, dtype);
}

/* count elements of checkpoint tensor x from element `start` into dst, element k at
 * dst[k * stride], as fp32 or (dst_bf16) bf16 rounded to nearest even. Copies bytes where
 * the types agree; converts in one loop per dtype otherwise. */
static void convert_run(void *dst, int dst_bf16, size_t stride, const st_tensor *x,
                        size_t start, size_t count)
{
    const unsigned char *src = (const unsigned char *)x->data + start * st_dtype_size(x->dtype);
    if (stride == 1 && ((x->dtype == ST_F32 && !dst_bf16) || (x->dtype == ST_BF16 && dst_bf16))) {
        memcpy(dst, src, count * st_dtype_size(x->dtype));
        return;
    }
    float *df = dst;
    uint16_t *dh = dst;
    for (size_t k = 0; k < count; k++) {
        float v;
        if (x->dtype == ST_F32)
            memcpy(&v, src + 4 * k, sizeof v);
        else if (x->dtype == ST_BF16)
            v = st_bf16_to_f32((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
        else /* F16: md_expect refused every other dtype */
            v = st_f16_to_f32((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
        if (dst_bf16)
            dh[k * stride] = pe_k_to_bf16(v);
        else
            df[k * stride] = v;
    }
}

/* Rows [r0, r0 + n) of a piece's (out, in) matrix into buf (n, cols) of the tensor's type.
 * A row-major piece is n runs; a transposed one (stored (in, out)) is read a stored row at
 * a time, each run scattered down one column of buf. */
static void convert_rows(void *buf, int bf16, size_t cols, const md_piece *pc, size_t r0,
                         size_t n)
{
    const st_tensor *x = pc->src;
    const size_t eb = bf16 ? sizeof(uint16_t) : sizeof(float);
    if (x->ndim < 2) { /* a vector: (n, 1) */
        convert_run(buf, bf16, 1, x, pc->row0 + r0, n);
    } else if (!pc->transposed) {
        for (size_t r = 0; r < n; r++)
            convert_run((char *)buf + r * cols * eb, bf16, 1, x,
                        (pc->row0 + r0 + r) * x->shape[1] + pc->col0, cols);
    } else {
        for (size_t c = 0; c < cols; c++)
            convert_run((char *)buf + c * eb, bf16, cols, x,
                        (pc->col0 + c) * x->shape[1] + pc->row0 + r0, n);
    }
}

/* Writes v as element i of the staging buffer in the tensor's device type. */
static void put(void *buf, int bf16, size_t i, float v)
{
    if (bf16)
        ((uint16_t *)buf)[i] = pe_k_to_bf16(v);
    else
        ((float *)buf)[i] = v;
}

/* Releases the checkpoint bytes of rows [r0, r1) of a piece (row-major pieces only; a
 * transposed piece's rows are spread over the whole tensor: released at its end). */
static void release_rows(const md_piece *pc, size_t r0, size_t r1)
{
    const st_tensor *x = pc->src;
    if (pc->transposed || x->ndim < 2 || pc->col0 != 0 || pc->cols != x->shape[1])
        return;
    size_t row_bytes = x->shape[1] * st_dtype_size(x->dtype);
    md_hf_release(pc->file, (const unsigned char *)x->data + (pc->row0 + r0) * row_bytes,
                  (r1 - r0) * row_bytes);
}

/* Fills tensor t at dst on dev: rows of its pieces, then pad rows of zeros. */
static pe_status upload_tensor(const md_tensor *t, pe_dtype dtype, const be_ops *ops,
                               be_device *dev, char *dst, void *staging, size_t staging_bytes,
                               pe_err *err)
{
    const int bf16 = t->matrix && dtype == PE_DTYPE_BF16;
    const size_t eb = elem_bytes(t, dtype), row_bytes = t->cols * eb;
    size_t chunk = row_bytes ? staging_bytes / row_bytes : 1; /* >= 1: see md_weights_load */
    size_t done = 0; /* rows written */
    pe_status s = PE_OK;
    for (int p = 0; s == PE_OK && p <= t->npieces; p++) {
        /* piece p, or (p == npieces) the host values / the zero padding */
        const md_piece *pc = p < t->npieces ? &t->pieces[p] : NULL;
        size_t rows = pc ? pc->rows : (t->host ? t->rows : t->pad_rows);
        for (size_t r0 = 0; s == PE_OK && r0 < rows; r0 += chunk) {
            size_t n = rows - r0 < chunk ? rows - r0 : chunk;
            if (!pc && t->host)
                for (size_t i = 0; i < n * t->cols; i++)
                    put(staging, bf16, i, t->host[r0 * t->cols + i]);
            else if (!pc)
                memset(staging, 0, n * row_bytes);
            else
                convert_rows(staging, bf16, t->cols, pc, r0, n);
            s = ops->copy_h2d(dev, dst + (done + r0) * row_bytes, staging, n * row_bytes);
            if (s == PE_OK && pc)
                release_rows(pc, r0, r0 + n);
        }
        if (s == PE_OK && pc && pc->transposed)
            md_hf_release(pc->file, pc->src->data, pc->src->end - pc->src->begin);
        done += rows;
    }
    /* copy_h2d may be asynchronous on a GPU: the staging buffer is reused only after the
     * device has it */
    if (s == PE_OK)
        s = ops->synchronize(dev);
    if (s != PE_OK)
        return pe_fail(err, s, "cannot upload tensor '%s' (%zu x %zu): %s", t->name, t->rows,
                       t->cols, ops->last_error(dev));
    return PE_OK;
}

pe_status md_weights_load(const md_decoder *m, const md_part *part, pe_dtype dtype,
                          const be_ops *ops, be_device *dev, md_weights *out, pe_err *err)
{
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->part = *part;
    md_tensor_list list = {0};
    pe_status s = m->family->plan(&m->hf, &m->cfg, part, &out->family, &list, err);
    size_t total = 0, staging_bytes = MD_STAGING_BYTES;
    for (int i = 0; s == PE_OK && i < list.n; i++) {
        total += align_up(tensor_bytes(&list.v[i], dtype), MD_ARENA_ALIGN);
        size_t row = list.v[i].cols * elem_bytes(&list.v[i], dtype);
        staging_bytes = row > staging_bytes ? row : staging_bytes;
    }
    if (s == PE_OK) {
        s = ops->alloc(dev, total, &out->arena);
        if (s != PE_OK)
            s = pe_fail(err, s, "no device memory for the weights of layers %d..%d (%zu MiB): "
                        "%s; use more devices (--pp, --tp) or --dtype bf16",
                        part->first, part->last - 1, total >> 20, ops->last_error(dev));
    }
    void *staging = NULL;
    if (s == PE_OK && !(staging = malloc(staging_bytes)))
        s = pe_fail(err, PE_ENOMEM, "out of host memory for the upload buffer");
    size_t off = 0;
    for (int i = 0; s == PE_OK && i < list.n; i++) {
        md_tensor *t = &list.v[i];
        char *dst = (char *)out->arena + off;
        s = upload_tensor(t, dtype, ops, dev, dst, staging, staging_bytes, err);
        *t->slot = dst;
        if (t->slot2)
            *t->slot2 = dst;
        off += align_up(tensor_bytes(t, dtype), MD_ARENA_ALIGN);
    }
    free(staging);
    md_tensor_list_free(&list);
    out->arena_bytes = total;
    if (s != PE_OK)
        md_weights_free(m, ops, dev, out);
    return s;
}

void md_weights_free(const md_decoder *m, const be_ops *ops, be_device *dev, md_weights *w)
{
    if (w->arena)
        ops->free(dev, w->arena);
    if (w->family)
        m->family->free_family(w->family);
    memset(w, 0, sizeof *w);
}
