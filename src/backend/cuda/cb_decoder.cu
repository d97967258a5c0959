/* cb_decoder.cu: the grids of a decoder layer's small operations, over the element math of
 * src/kernels/: RMSNorm (rowwise.h), rotary embedding (rope.h), SwiGLU's product
 * (elementwise.h) and the paged KV cache's append (attention.h).
 *
 * RMSNorm runs one block per row with a block reduction, as layernorm; the others are
 * grid-stride loops in which consecutive threads touch consecutive elements.
 */
#include <stdint.h>

#include "backend/cuda/cb_grid.cuh"
#include "backend/cuda/cb_launch.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"
#include "kernels/rowwise.h"

namespace {

using cb::aligned16;
using cb::grid_for;
using cb::grid_stride;
using cb::kThreads;
using cb::row_blocks;
using cb::thread_index;

/* One block per row: out(rows, cols) = x * rstd * w, rstd from the row's sum of squares
 * (a block sum; pe_k_rms_rstd's formula). VEC: cols % 4 == 0 and every pointer 16-byte
 * aligned. out may be x: every element is read and written by the same thread, after the
 * reduction. */
template <bool VEC>
__global__ void rmsnorm_rows(float *out, const float *x, const float *w, size_t rows,
                             size_t cols, float eps)
{
    __shared__ float red[32];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *xr = x + row * cols;
        float *orow = out + row * cols;
        float s = 0.0f;
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 v = reinterpret_cast<const float4 *>(xr)[i];
                s += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                s += xr[i] * xr[i];
        }
        const float rstd = 1.0f / sqrtf(cb::block_sum(s, red) / (float)cols + eps);
        if (VEC) {
            for (size_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
                float4 v = reinterpret_cast<const float4 *>(xr)[i];
                float4 g = reinterpret_cast<const float4 *>(w)[i];
                v.x = pe_k_rmsnorm_elem(v.x, rstd, g.x);
                v.y = pe_k_rmsnorm_elem(v.y, rstd, g.y);
                v.z = pe_k_rmsnorm_elem(v.z, rstd, g.z);
                v.w = pe_k_rmsnorm_elem(v.w, rstd, g.w);
                reinterpret_cast<float4 *>(orow)[i] = v;
            }
        } else {
            for (size_t i = threadIdx.x; i < cols; i += blockDim.x)
                orow[i] = pe_k_rmsnorm_elem(xr[i], rstd, w[i]);
        }
    }
}

/* One thread per rotated pair: pair i of head h of row r, at position pos(r). */
__global__ void rope_pairs(float *x, size_t rows, size_t stride, size_t nheads, size_t hd,
                           const int32_t *pos, const float *inv_freq)
{
    const size_t half = hd / 2, per_row = nheads * half, n = rows * per_row;
    for (size_t t = thread_index(); t < n; t += grid_stride()) {
        size_t r = t / per_row, rem = t % per_row, h = rem / half, i = rem % half;
        float *head = x + r * stride + h * hd;
        float angle = pe_k_rope_angle(pos[r], inv_freq[i]);
        pe_k_rope_pair(&head[i], &head[i + half], cosf(angle), sinf(angle));
    }
}

/* out(rows, n) = silu(gate) * up from gate_up(rows, 2n); in float4 units (n4 = n / 4). */
__global__ void silu_mul4(float4 *out, const float4 *gate_up, size_t rows, size_t n4)
{
    for (size_t t = thread_index(); t < rows * n4; t += grid_stride()) {
        size_t r = t / n4, c = t % n4;
        float4 g = gate_up[r * 2 * n4 + c], u = gate_up[r * 2 * n4 + n4 + c], o;
        o.x = pe_k_silu_mul(g.x, u.x);
        o.y = pe_k_silu_mul(g.y, u.y);
        o.z = pe_k_silu_mul(g.z, u.z);
        o.w = pe_k_silu_mul(g.w, u.w);
        out[t] = o;
    }
}

__global__ void silu_mul1(float *out, const float *gate_up, size_t rows, size_t n)
{
    for (size_t t = thread_index(); t < rows * n; t += grid_stride()) {
        size_t r = t / n, c = t % n;
        out[t] = pe_k_silu_mul(gate_up[r * 2 * n + c], gate_up[r * 2 * n + n + c]);
    }
}

/* One thread per (row, KV head, dimension): the key and the value of that element go to
 * slot slots(r) of layer `layer`, stored as pe_k_kv_store does (bf16: rounded). A slot
 * outside [0, nslots) is skipped: the grid never writes outside the pool. */
__global__ void kv_append_elems(void *pool, int bf16, pe_k_kv_shape s, size_t nslots, int layer,
                                const float *k, const float *v, size_t stride,
                                const int32_t *slots, size_t rows)
{
    const size_t hd = (size_t)s.head_dim, per_row = (size_t)s.kv_heads * hd;
    for (size_t t = thread_index(); t < rows * per_row; t += grid_stride()) {
        size_t r = t / per_row, rem = t % per_row;
        int h = (int)(rem / hd);
        size_t d = rem % hd;
        int32_t slot = slots[r];
        if (slot < 0 || (size_t)slot >= nslots)
            continue;
        int32_t block = slot / s.block_tokens;
        int row = (int)(slot % s.block_tokens);
        size_t src = r * stride + rem;
        pe_k_kv_store(pool, bf16, pe_k_kv_index(s, block, layer, 0, h, row) + d, k[src]);
        pe_k_kv_store(pool, bf16, pe_k_kv_index(s, block, layer, 1, h, row) + d, v[src]);
    }
}

} /* namespace */

extern "C" cudaError_t cb_launch_rmsnorm(cudaStream_t s, float *out, const float *x,
                                         const float *w, size_t rows, size_t cols, float eps)
{
    if (rows == 0 || cols == 0)
        return cudaSuccess;
    bool vec = cols % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(w);
    int threads = cb::row_threads(vec ? cols / 4 : cols);
    if (vec)
        return cb::launch(rmsnorm_rows<true>, row_blocks(rows), threads, s, out, x, w, rows,
                          cols, eps);
    return cb::launch(rmsnorm_rows<false>, row_blocks(rows), threads, s, out, x, w, rows, cols,
                      eps);
}

extern "C" cudaError_t cb_launch_rope(cudaStream_t s, float *x, size_t rows, size_t stride,
                                      size_t nheads, size_t head_dim, const int32_t *pos,
                                      const float *inv_freq)
{
    size_t n = rows * nheads * (head_dim / 2);
    if (n == 0)
        return cudaSuccess;
    return cb::launch(rope_pairs, grid_for(n, kThreads), kThreads, s, x, rows, stride, nheads,
                      head_dim, pos, inv_freq);
}

extern "C" cudaError_t cb_launch_silu_mul(cudaStream_t s, float *out, const float *gate_up,
                                          size_t rows, size_t n)
{
    if (rows == 0 || n == 0)
        return cudaSuccess;
    if (n % 4 == 0 && aligned16(out) && aligned16(gate_up))
        return cb::launch(silu_mul4, grid_for(rows * n / 4, kThreads), kThreads, s,
                          reinterpret_cast<float4 *>(out),
                          reinterpret_cast<const float4 *>(gate_up), rows, n / 4);
    return cb::launch(silu_mul1, grid_for(rows * n, kThreads), kThreads, s, out, gate_up, rows,
                      n);
}

extern "C" cudaError_t cb_launch_kv_append(cudaStream_t s, void *pool, int bf16,
                                           pe_k_kv_shape shape, int layer, const float *k,
                                           const float *v, size_t stride, const int32_t *slots,
                                           size_t rows)
{
    size_t n = rows * (size_t)shape.kv_heads * (size_t)shape.head_dim;
    if (n == 0)
        return cudaSuccess;
    return cb::launch(kv_append_elems, grid_for(n, kThreads), kThreads, s, pool, bf16, shape,
                      shape.nblocks * (size_t)shape.block_tokens, layer, k, v, stride, slots,
                      rows);
}
