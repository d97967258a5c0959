/* hb_rope.c: rotary position embedding in place (rope.h), rows split over the device's
 * threads for large steps. The angles of a row are computed once and shared by its heads:
 * the same float operations as pe_k_rope_head per head, so the same bits. */
#include <math.h>

#include "backend/host/hb_internal.h"
#include "kernels/rope.h"

#define HB_ROPE_MAX_HALF 1024 /* head_dim / 2 handled with stack buffers */

typedef struct rope_job {
    float *x;
    size_t stride, nheads, hd;
    const int32_t *pos;
    const float *inv_freq;
} rope_job;

static void rope_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const rope_job *j = arg;
    (void)thread;
    const size_t half = j->hd / 2;
    float c[HB_ROPE_MAX_HALF], s[HB_ROPE_MAX_HALF];
    for (size_t r = r0; r < r1; r++) {
        for (size_t i = 0; i < half; i++) {
            float angle = pe_k_rope_angle(j->pos[r], j->inv_freq[i]);
            c[i] = cosf(angle);
            s[i] = sinf(angle);
        }
        float *row = j->x + r * j->stride;
        for (size_t h = 0; h < j->nheads; h++) {
            float *head = row + h * j->hd;
            for (size_t i = 0; i < half; i++)
                pe_k_rope_pair(&head[i], &head[i + half], c[i], s[i]);
        }
    }
}

pe_status hb_rope(be_device *dev, float *x, size_t rows, size_t stride, size_t nheads,
                  size_t head_dim, const int32_t *pos, const float *inv_freq)
{
    if (rows == 0 || nheads == 0)
        return PE_OK;
    if (head_dim == 0 || head_dim % 2 != 0 || head_dim / 2 > HB_ROPE_MAX_HALF)
        return hb_fail(dev, PE_EINVAL,
                       "rope on host device %d: head_dim=%zu must be even and in [2, %d] "
                       "(pairs i and i + head_dim/2 turn together)",
                       dev->id, head_dim, 2 * HB_ROPE_MAX_HALF);
    if (rows > 1 && stride < nheads * head_dim)
        return hb_fail(dev, PE_EINVAL,
                       "rope on host device %d: stride=%zu is shorter than the %zu heads x "
                       "head_dim %zu it turns; pass the row length of x",
                       dev->id, stride, nheads, head_dim);
    HB_NEED(dev, x, 1, "rope");
    HB_NEED(dev, pos, 1, "rope");
    HB_NEED(dev, inv_freq, 1, "rope");
    for (size_t r = 0; r < rows; r++)
        if (pos[r] < 0)
            return hb_fail(dev, PE_EINVAL,
                           "rope on host device %d: row %zu has position %d; positions are "
                           ">= 0",
                           dev->id, r, (int)pos[r]);
    rope_job j = {x, stride, nheads, head_dim, pos, inv_freq};
    hb_for(dev, rows, hb_row_grain(nheads * head_dim), rope_rows, &j);
    return PE_OK;
}
