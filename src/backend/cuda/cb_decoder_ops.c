/* cb_decoder_ops.c: a decoder layer's small ops on the CUDA backend (rmsnorm, rope,
 * silu_mul): argument checks, the launch on the device's stream, launch errors as
 * pe_status. The grids are in cb_decoder.cu. */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cb_internal.h"

/* 1 when a * b overflows size_t (either may be 0). */
static int mul_overflows(size_t a, size_t b) { return a && b > SIZE_MAX / a; }

pe_status cb_rmsnorm(be_device *dev, float *out, const float *x, const float *w, size_t rows,
                     size_t cols, float eps)
{
    if (rows && cols == 0) /* as on the host */
        return pe_fail(&dev->err, PE_EINVAL,
                       "rmsnorm: %zu rows of 0 columns have no mean square; cols must be > 0",
                       rows);
    if (!(eps >= 0.0f))
        return pe_fail(&dev->err, PE_EINVAL, "rmsnorm: eps %g must be >= 0", (double)eps);
    if (mul_overflows(rows, cols))
        return pe_fail(&dev->err, PE_EINVAL, "rmsnorm: rows %zu x cols %zu overflows", rows,
                       cols);
    return cb_check_launch(dev, cb_launch_rmsnorm(dev->stream, out, x, w, rows, cols, eps),
                           "rmsnorm kernel launch");
}

pe_status cb_rope(be_device *dev, float *x, size_t rows, size_t stride, size_t nheads,
                  size_t head_dim, const int32_t *pos, const float *inv_freq)
{
    if (head_dim % 2)
        return pe_fail(&dev->err, PE_EINVAL,
                       "rope: head_dim %zu is odd; rotary embedding turns pairs (i, i + "
                       "head_dim / 2)",
                       head_dim);
    if (mul_overflows(nheads, head_dim) || mul_overflows(rows, stride))
        return pe_fail(&dev->err, PE_EINVAL, "rope: %zu rows x %zu heads x %zu overflows",
                       rows, nheads, head_dim);
    if (rows && nheads * head_dim > stride)
        return pe_fail(&dev->err, PE_EINVAL,
                       "rope: %zu heads of %zu do not fit in a row of stride %zu", nheads,
                       head_dim, stride);
    return cb_check_launch(
        dev, cb_launch_rope(dev->stream, x, rows, stride, nheads, head_dim, pos, inv_freq),
        "rope kernel launch");
}

pe_status cb_silu_mul(be_device *dev, float *out, const float *gate_up, size_t rows, size_t n)
{
    if (mul_overflows(rows, n) || rows * n > SIZE_MAX / 2)
        return pe_fail(&dev->err, PE_EINVAL, "silu_mul: rows %zu x 2n %zu overflows", rows,
                       n);
    return cb_check_launch(dev, cb_launch_silu_mul(dev->stream, out, gate_up, rows, n),
                           "silu_mul kernel launch");
}
