/* hb_norm.c: RMSNorm over rows (rowwise.h's pe_k_rmsnorm_row), rows split over the
 * device's threads when the step is large enough to pay for a parallel region. */
#include "backend/host/hb_internal.h"
#include "kernels/rowwise.h"

#define HB_ROW_GRAIN_ELEMS 16384 /* elements per piece: below this a region costs more */

typedef struct rms_job {
    float *out;
    const float *x, *w;
    size_t cols;
    float eps;
} rms_job;

static void rms_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const rms_job *j = arg;
    (void)thread;
    for (size_t r = r0; r < r1; r++)
        pe_k_rmsnorm_row(j->out + r * j->cols, j->x + r * j->cols, j->w, j->cols, j->eps);
}

/* Rows per piece so that a piece holds at least HB_ROW_GRAIN_ELEMS elements. */
size_t hb_row_grain(size_t cols)
{
    return cols >= HB_ROW_GRAIN_ELEMS ? 1 : HB_ROW_GRAIN_ELEMS / (cols ? cols : 1);
}

pe_status hb_rmsnorm(be_device *dev, float *out, const float *x, const float *w, size_t rows,
                     size_t cols, float eps)
{
    if (rows == 0)
        return PE_OK;
    if (cols == 0)
        return hb_fail(dev, PE_EINVAL,
                       "rmsnorm on host device %d: rows=%zu of 0 columns have no mean square; "
                       "cols must be > 0",
                       dev->id, rows);
    if (!(eps >= 0.0f))
        return hb_fail(dev, PE_EINVAL,
                       "rmsnorm on host device %d: eps=%g must be >= 0 (the model's "
                       "rms_norm_eps)",
                       dev->id, (double)eps);
    HB_NEED(dev, out, 1, "rmsnorm");
    HB_NEED(dev, x, 1, "rmsnorm");
    HB_NEED(dev, w, 1, "rmsnorm");
    rms_job j = {out, x, w, cols, eps};
    hb_for(dev, rows, hb_row_grain(cols), rms_rows, &j);
    return PE_OK;
}
