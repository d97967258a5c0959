/* cb_kernel_ops.c: the kernel ops of the CUDA backend: argument checks, the launch on the
 * device's stream, and launch errors as pe_status. The grids are in cb_kernels.cu. */
#include <stdint.h>

#include "backend/cuda/cb_internal.h"

pe_status cb_bias_add(be_device *dev, float *x, const float *bias, size_t rows, size_t cols)
{
    if (rows && cols && rows > SIZE_MAX / cols)
        return pe_fail(&dev->err, PE_EINVAL, "bias_add: rows %zu x cols %zu overflows", rows,
                       cols);
    return cb_check_launch(dev, cb_launch_bias_add(dev->stream, x, bias, rows, cols),
                           "bias_add kernel launch");
}

pe_status cb_relu(be_device *dev, float *x, size_t n)
{
    return cb_check_launch(dev, cb_launch_relu(dev->stream, x, n), "relu kernel launch");
}

pe_status cb_gelu(be_device *dev, float *x, size_t n)
{
    return cb_check_launch(dev, cb_launch_gelu(dev->stream, x, n), "gelu kernel launch");
}

pe_status cb_layernorm(be_device *dev, float *out, const float *x, const float *gamma,
                       const float *beta, size_t rows, size_t cols, float eps)
{
    if (!(eps >= 0.0f))
        return pe_fail(&dev->err, PE_EINVAL, "layernorm: eps %g must be >= 0", (double)eps);
    return cb_check_launch(dev,
                           cb_launch_layernorm(dev->stream, out, x, gamma, beta, rows, cols, eps),
                           "layernorm kernel launch");
}

pe_status cb_softmax(be_device *dev, float *x, size_t rows, size_t cols)
{
    return cb_check_launch(dev, cb_launch_softmax(dev->stream, x, rows, cols),
                           "softmax kernel launch");
}

pe_status cb_residual_add(be_device *dev, float *x, const float *r, size_t n)
{
    return cb_check_launch(dev, cb_launch_residual_add(dev->stream, x, r, n),
                           "residual_add kernel launch");
}

/* The ids live on the device, so the range check runs in a grid, before the gather grid
 * (which writes nothing after a bad id: out untouched, as the interface says); the call
 * waits for it (one small copy and a stream synchronize) to return PE_EINVAL at the call.
 * Embedding runs once per forward, before the layers. */
pe_status cb_embedding(be_device *dev, pe_dtype dtype, float *out, const void *table,
                       const int32_t *ids, size_t n, size_t dim, size_t vocab, size_t row0,
                       size_t nrows)
{
    if (n == 0 || dim == 0)
        return PE_OK;
    const int32_t none = INT32_MAX;
    cudaError_t e = cudaMemcpyAsync(dev->bad_id, &none, sizeof none, cudaMemcpyHostToDevice,
                                    dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaMemcpyAsync (embedding check word)", dev->id);
    pe_status s = cb_check_launch(dev,
                                  cb_launch_embedding(dev->stream, out, table,
                                                      dtype == PE_DTYPE_BF16, ids, n, dim, vocab,
                                                      row0, nrows, dev->bad_id),
                                  "embedding kernel launch");
    if (s != PE_OK)
        return s;
    e = cudaMemcpyAsync(dev->bad_id_host, dev->bad_id, sizeof *dev->bad_id,
                        cudaMemcpyDeviceToHost, dev->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "embedding range check", dev->id);
    if (*dev->bad_id_host != INT32_MAX) {
        int32_t row = *dev->bad_id_host, id = 0;
        e = cudaMemcpy(&id, ids + row, sizeof id, cudaMemcpyDeviceToHost);
        (void)cudaGetLastError();
        return pe_fail(&dev->err, PE_EINVAL,
                       "embedding: id %ld at row %ld is outside the table [0, %zu); check the "
                       "token ids against the model's vocabulary",
                       e == cudaSuccess ? (long)id : -1L, (long)row, vocab);
    }
    return PE_OK;
}

pe_status cb_to_bf16(be_device *dev, uint16_t *out, const float *in, size_t n)
{
    return cb_check_launch(dev, cb_launch_to_bf16(dev->stream, out, in, n),
                           "to_bf16 kernel launch");
}
