/* cb_kernels.cu: thin grid wrappers over the element math of src/kernels/ (bias, ReLU,
 * GELU, residual, layernorm, softmax, embedding, rounding to bf16): the host backend runs the same inline
 * functions, so the host tests check what these grids compute.
 *
 * Element-wise grids read and write float4 when the pointers are 16-byte aligned (always,
 * for cudaMalloc'ed buffers at offsets that are multiples of 4 elements), and fall back to
 * one float per thread for the rest. Row grids (layernorm, softmax) run one block per row
 * with block reductions; consecutive threads touch consecutive elements (coalesced).
 */
#include <stdint.h>

#include "backend/cuda/cb_grid.cuh"
#include "backend/cuda/cb_launch.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/rowwise.h"

namespace {

using cb::aligned16;
using cb::grid_for;
using cb::grid_stride;
using cb::kThreads;
using cb::row_blocks;
using cb::thread_index;

struct Relu {
    __device__ float operator()(float x) const { return pe_k_relu(x); }
};
struct Gelu {
    __device__ float operator()(float x) const { return pe_k_gelu(x); }
};

/* x(n) = f(x(n)) */
template <class F> __global__ void map4(float4 *x, size_t n4, F f)
{
    for (size_t i = thread_index(); i < n4; i += grid_stride()) {
        float4 v = x[i];
        v.x = f(v.x);
        v.y = f(v.y);
        v.z = f(v.z);
        v.w = f(v.w);
        x[i] = v;
    }
}

template <class F> __global__ void map1(float *x, size_t n, F f)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        x[i] = f(x[i]);
}

template <class F> cudaError_t launch_map(cudaStream_t s, float *x, size_t n, F f)
{
    if (n == 0) /* nothing launched: cudaGetLastError would answer for an earlier call */
        return cudaSuccess;
    size_t n4 = aligned16(x) ? n / 4 : 0;
    if (n4)
        map4<<<grid_for(n4, kThreads), kThreads, 0, s>>>(reinterpret_cast<float4 *>(x), n4, f);
    if (n4 * 4 < n)
        map1<<<grid_for(n - n4 * 4, kThreads), kThreads, 0, s>>>(x + n4 * 4, n - n4 * 4, f);
    return cudaGetLastError();
}

/* x(n) += r(n) */
__global__ void add4(float4 *x, const float4 *r, size_t n4)
{
    for (size_t i = thread_index(); i < n4; i += grid_stride()) {
        float4 v = x[i], w = r[i];
        v.x = pe_k_add(v.x, w.x);
        v.y = pe_k_add(v.y, w.y);
        v.z = pe_k_add(v.z, w.z);
        v.w = pe_k_add(v.w, w.w);
        x[i] = v;
    }
}

__global__ void add1(float *x, const float *r, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        x[i] = pe_k_add(x[i], r[i]);
}

/* x(rows, cols) += bias(cols); in float4 units when cols % 4 == 0 (c4 = cols / 4). */
__global__ void bias4(float4 *x, const float4 *bias, size_t n4, size_t c4)
{
    for (size_t i = thread_index(); i < n4; i += grid_stride()) {
        float4 v = x[i], b = bias[i % c4];
        v.x = pe_k_add(v.x, b.x);
        v.y = pe_k_add(v.y, b.y);
        v.z = pe_k_add(v.z, b.z);
        v.w = pe_k_add(v.w, b.w);
        x[i] = v;
    }
}

__global__ void bias1(float *x, const float *bias, size_t n, size_t cols)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        x[i] = pe_k_add(x[i], bias[i % cols]);
}

/* One block per row: out(rows, cols) = layernorm(x) * gamma + beta, with the corrected
 * two-pass moments of pe_k_moments (the sums in block order, then the same
 * pe_k_moments_finish). VEC: cols % 4 == 0 and every pointer 16-byte aligned. */
template <bool VEC>
__global__ void layernorm_rows(float *out, const float *x, const float *gamma,
                               const float *beta, size_t rows, size_t cols, float eps)
{
    __shared__ float red[32];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *xr = x + row * cols;
        float *orow = out + row * cols;
        float s = 0.0f;
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 v = reinterpret_cast<const float4 *>(xr)[i];
                s += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                s += xr[i];
        }
        const float m0 = cb::block_sum(s, red) / (float)cols; /* the rough mean */
        float c = 0.0f, v = 0.0f; /* sums of the deviations from m0 and of their squares */
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 q = reinterpret_cast<const float4 *>(xr)[i];
                float a = q.x - m0, b = q.y - m0, e = q.z - m0, d = q.w - m0;
                c += (a + b) + (e + d);
                v += (a * a + b * b) + (e * e + d * d);
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x) {
                float d = xr[i] - m0;
                c += d;
                v += d * d;
            }
        }
        const float csum = cb::block_sum(c, red);
        const float vsum = cb::block_sum(v, red);
        float mean, rstd;
        pe_k_moments_finish(m0, csum, vsum, cols, eps, &mean, &rstd);
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 q = reinterpret_cast<const float4 *>(xr)[i];
                float4 g = reinterpret_cast<const float4 *>(gamma)[i];
                float4 b = reinterpret_cast<const float4 *>(beta)[i];
                float4 o;
                o.x = pe_k_layernorm_elem(q.x, mean, rstd, g.x, b.x);
                o.y = pe_k_layernorm_elem(q.y, mean, rstd, g.y, b.y);
                o.z = pe_k_layernorm_elem(q.z, mean, rstd, g.z, b.z);
                o.w = pe_k_layernorm_elem(q.w, mean, rstd, g.w, b.w);
                reinterpret_cast<float4 *>(orow)[i] = o;
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                orow[i] = pe_k_layernorm_elem(xr[i], mean, rstd, gamma[i], beta[i]);
        }
    }
}

/* One block per row: x(rows, cols) = softmax of each row, max-subtracted as
 * pe_k_softmax_row. VEC as for layernorm. */
template <bool VEC> __global__ void softmax_rows(float *x, size_t rows, size_t cols)
{
    __shared__ float red[32];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float *xr = x + row * cols;
        float m = -INFINITY;
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 q = reinterpret_cast<const float4 *>(xr)[i];
                m = q.x > m ? q.x : m;
                m = q.y > m ? q.y : m;
                m = q.z > m ? q.z : m;
                m = q.w > m ? q.w : m;
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                m = xr[i] > m ? xr[i] : m;
        }
        m = cb::block_max(m, red);
        float s = 0.0f;
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 q = reinterpret_cast<const float4 *>(xr)[i];
                s += (expf(q.x - m) + expf(q.y - m)) + (expf(q.z - m) + expf(q.w - m));
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                s += expf(xr[i] - m);
        }
        float inv = 1.0f / cb::block_sum(s, red);
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 q = reinterpret_cast<float4 *>(xr)[i];
                q.x = pe_k_softmax_elem(q.x, m, inv);
                q.y = pe_k_softmax_elem(q.y, m, inv);
                q.z = pe_k_softmax_elem(q.z, m, inv);
                q.w = pe_k_softmax_elem(q.w, m, inv);
                reinterpret_cast<float4 *>(xr)[i] = q;
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                xr[i] = pe_k_softmax_elem(xr[i], m, inv);
        }
    }
}

/* *bad = the smallest row whose id is outside [0, vocab) (min with what it holds). */
__global__ void embedding_check(const int32_t *ids, size_t n, size_t vocab, int32_t *bad)
{
    for (size_t row = thread_index(); row < n; row += grid_stride())
        if (!pe_k_id_in_range(ids[row], vocab))
            atomicMin(bad, row < (size_t)INT32_MAX ? (int32_t)row : INT32_MAX - 1);
}

/* One block per row: out(n, dim) = table[ids(n)] (the table's rows [row0, row0 + nrows) of
 * the vocabulary; zeros for another id), after embedding_check on the same stream: nothing
 * is written when it found a bad id (*bad != INT32_MAX). */
template <bool VEC>
__global__ void embedding_rows(float *out, const void *table, int bf16, const int32_t *ids,
                               size_t n, size_t dim, size_t vocab, size_t row0, size_t nrows,
                               const int32_t *bad)
{
    if (*bad != INT32_MAX)
        return;
    for (size_t row = blockIdx.x; row < n; row += gridDim.x) {
        int32_t id = ids[row];
        float *o = out + row * dim;
        if (!pe_k_id_in_range(id, vocab)) /* checked above; never read outside the table */
            continue;
        if ((size_t)id < row0 || (size_t)id - row0 >= nrows) { /* another rank's row */
            for (size_t i = threadIdx.x; i < dim; i += blockDim.x)
                o[i] = 0.0f;
            continue;
        }
        id -= (int32_t)row0;
        if (VEC) { /* fp32 table */
            const float *t = static_cast<const float *>(table) + (size_t)id * dim;
            for (size_t i = threadIdx.x; i < dim / 4; i += blockDim.x)
                reinterpret_cast<float4 *>(o)[i] = reinterpret_cast<const float4 *>(t)[i];
        } else {
            for (size_t i = threadIdx.x; i < dim; i += blockDim.x)
                o[i] = pe_k_load_elem(table, bf16, (size_t)id * dim + i);
        }
    }
}

/* out(n) = bf16(in(n)); four elements per thread when in is 16- and out 8-byte aligned. */
__global__ void to_bf16_4(ushort4 *out, const float4 *in, size_t n4)
{
    for (size_t i = thread_index(); i < n4; i += grid_stride()) {
        float4 v = in[i];
        out[i] = make_ushort4(pe_k_to_bf16(v.x), pe_k_to_bf16(v.y), pe_k_to_bf16(v.z),
                              pe_k_to_bf16(v.w));
    }
}

__global__ void to_bf16_1(uint16_t *out, const float *in, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        out[i] = pe_k_to_bf16(in[i]);
}

} /* namespace */

extern "C" cudaError_t cb_launch_relu(cudaStream_t s, float *x, size_t n)
{
    return launch_map(s, x, n, Relu());
}

extern "C" cudaError_t cb_launch_gelu(cudaStream_t s, float *x, size_t n)
{
    return launch_map(s, x, n, Gelu());
}

extern "C" cudaError_t cb_launch_residual_add(cudaStream_t s, float *x, const float *r, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    size_t n4 = (aligned16(x) && aligned16(r)) ? n / 4 : 0;
    if (n4)
        add4<<<grid_for(n4, kThreads), kThreads, 0, s>>>(
            reinterpret_cast<float4 *>(x), reinterpret_cast<const float4 *>(r), n4);
    if (n4 * 4 < n)
        add1<<<grid_for(n - n4 * 4, kThreads), kThreads, 0, s>>>(x + n4 * 4, r + n4 * 4,
                                                                 n - n4 * 4);
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_bias_add(cudaStream_t s, float *x, const float *bias,
                                          size_t rows, size_t cols)
{
    size_t n = rows * cols;
    if (n == 0)
        return cudaSuccess;
    if (cols % 4 == 0 && aligned16(x) && aligned16(bias))
        bias4<<<grid_for(n / 4, kThreads), kThreads, 0, s>>>(
            reinterpret_cast<float4 *>(x), reinterpret_cast<const float4 *>(bias), n / 4,
            cols / 4);
    else
        bias1<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, bias, n, cols);
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_layernorm(cudaStream_t s, float *out, const float *x,
                                           const float *gamma, const float *beta, size_t rows,
                                           size_t cols, float eps)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bool vec = cols % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(gamma) &&
               aligned16(beta);
    int threads = cb::row_threads(vec ? cols / 4 : cols);
    if (vec)
        layernorm_rows<true><<<row_blocks(rows), threads, 0, s>>>(out, x, gamma, beta, rows,
                                                                   cols, eps);
    else
        layernorm_rows<false><<<row_blocks(rows), threads, 0, s>>>(out, x, gamma, beta, rows,
                                                                    cols, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_softmax(cudaStream_t s, float *x, size_t rows, size_t cols)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bool vec = cols % 4 == 0 && aligned16(x);
    int threads = cb::row_threads(vec ? cols / 4 : cols);
    if (vec)
        softmax_rows<true><<<row_blocks(rows), threads, 0, s>>>(x, rows, cols);
    else
        softmax_rows<false><<<row_blocks(rows), threads, 0, s>>>(x, rows, cols);
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_embedding(cudaStream_t s, float *out, const void *table,
                                           int bf16, const int32_t *ids, size_t n, size_t dim,
                                           size_t vocab, size_t row0, size_t nrows,
                                           int32_t *bad)
{
    if (n == 0 || dim == 0)
        return cudaSuccess;
    embedding_check<<<grid_for(n, kThreads), kThreads, 0, s>>>(ids, n, vocab, bad);
    bool vec = !bf16 && dim % 4 == 0 && aligned16(out) && aligned16(table);
    int threads = cb::row_threads(vec ? dim / 4 : dim);
    if (vec)
        embedding_rows<true><<<row_blocks(n), threads, 0, s>>>(out, table, bf16, ids, n, dim,
                                                                vocab, row0, nrows, bad);
    else
        embedding_rows<false><<<row_blocks(n), threads, 0, s>>>(out, table, bf16, ids, n,
                                                                 dim, vocab, row0, nrows, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_to_bf16(cudaStream_t s, uint16_t *out, const float *in,
                                         size_t n)
{
    if (n == 0)
        return cudaSuccess;
    size_t n4 = aligned16(in) && reinterpret_cast<uintptr_t>(out) % 8 == 0 ? n / 4 : 0;
    if (n4)
        to_bf16_4<<<grid_for(n4, kThreads), kThreads, 0, s>>>(
            reinterpret_cast<ushort4 *>(out), reinterpret_cast<const float4 *>(in), n4);
    if (n4 * 4 < n)
        to_bf16_1<<<grid_for(n - n4 * 4, kThreads), kThreads, 0, s>>>(out + n4 * 4,
                                                                        in + n4 * 4,
                                                                        n - n4 * 4);
    return cudaGetLastError();
}
