/* cb_peer_kernels.cu: the grids of the same-GPU peer path: a sum of several buffers in a
 * fixed rank order (so every rank that reads the result gets the same bits) and a gather
 * of several buffers into one, both in one launch. */
#include "backend/cuda/cb_grid.cuh"
#include "backend/cuda/cb_launch.h"
#include "kernels/elementwise.h"

namespace {

using cb::aligned16;
using cb::grid_for;
using cb::grid_stride;
using cb::kThreads;
using cb::thread_index;

struct Inputs {
    const float *p[CB_PEER_MAX_RANKS];
};

struct Pieces {
    const float *src[CB_PEER_MAX_RANKS];
    size_t off[CB_PEER_MAX_RANKS];
    size_t len[CB_PEER_MAX_RANKS];
};

/* out(n) = ((in0 + in1) + in2) + ... per element. */
__global__ void reduce1(float *out, Inputs in, int nin, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        float s = in.p[0][i];
        for (int r = 1; r < nin; r++)
            s = pe_k_add(s, in.p[r][i]);
        out[i] = s;
    }
}

/* The same in float4 units: each lane adds in the same rank order as reduce1. */
__global__ void reduce4(float4 *out, Inputs in, int nin, size_t n4)
{
    for (size_t i = thread_index(); i < n4; i += grid_stride()) {
        float4 s = reinterpret_cast<const float4 *>(in.p[0])[i];
        for (int r = 1; r < nin; r++) {
            float4 v = reinterpret_cast<const float4 *>(in.p[r])[i];
            s.x = pe_k_add(s.x, v.x);
            s.y = pe_k_add(s.y, v.y);
            s.z = pe_k_add(s.z, v.z);
            s.w = pe_k_add(s.w, v.w);
        }
        out[i] = s;
    }
}

/* Piece blockIdx.y: out + off[k] receives len[k] elements of src[k]. */
__global__ void gather1(float *out, Pieces p)
{
    int k = blockIdx.y;
    const float *src = p.src[k];
    float *dst = out + p.off[k];
    for (size_t i = thread_index(); i < p.len[k]; i += grid_stride())
        dst[i] = src[i];
}

__global__ void gather4(float *out, Pieces p)
{
    int k = blockIdx.y;
    const float4 *src = reinterpret_cast<const float4 *>(p.src[k]);
    float4 *dst = reinterpret_cast<float4 *>(out + p.off[k]);
    for (size_t i = thread_index(); i < p.len[k] / 4; i += grid_stride())
        dst[i] = src[i];
}

} /* namespace */

extern "C" cudaError_t cb_launch_reduce(cudaStream_t s, float *out, const float *const *in,
                                        int nin, size_t count)
{
    if (count == 0 || nin < 1)
        return cudaSuccess;
    if (nin > CB_PEER_MAX_RANKS)
        return cudaErrorInvalidValue;
    Inputs a;
    bool vec = aligned16(out);
    for (int r = 0; r < nin; r++) {
        a.p[r] = in[r];
        vec = vec && aligned16(in[r]);
    }
    size_t n4 = vec ? count / 4 : 0;
    if (n4)
        reduce4<<<grid_for(n4, kThreads), kThreads, 0, s>>>(reinterpret_cast<float4 *>(out),
                                                             a, nin, n4);
    if (n4 * 4 < count) {
        for (int r = 0; r < nin; r++)
            a.p[r] = in[r] + n4 * 4;
        reduce1<<<grid_for(count - n4 * 4, kThreads), kThreads, 0, s>>>(out + n4 * 4, a, nin,
                                                                         count - n4 * 4);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cb_launch_gather(cudaStream_t s, float *out, const float *const *src,
                                        const size_t *dst_off, const size_t *len, int npieces)
{
    if (npieces < 1)
        return cudaSuccess;
    if (npieces > CB_PEER_MAX_RANKS)
        return cudaErrorInvalidValue;
    Pieces p;
    bool vec = true;
    size_t most = 0;
    for (int k = 0; k < npieces; k++) {
        p.src[k] = src[k];
        p.off[k] = dst_off[k];
        p.len[k] = len[k];
        vec = vec && len[k] % 4 == 0 && aligned16(src[k]) && aligned16(out + dst_off[k]);
        most = len[k] > most ? len[k] : most;
    }
    if (most == 0)
        return cudaSuccess;
    dim3 grid(grid_for(vec ? most / 4 : most, kThreads), (unsigned)npieces);
    if (vec)
        gather4<<<grid, kThreads, 0, s>>>(out, p);
    else
        gather1<<<grid, kThreads, 0, s>>>(out, p);
    return cudaGetLastError();
}
