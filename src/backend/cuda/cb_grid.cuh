/* cb_grid.cuh: launch geometry, the launch helper and block reductions shared by the .cu
 * files. */
#ifndef PE_CB_GRID_CUH
#define PE_CB_GRID_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

namespace cb {

constexpr int kThreads = 256;        /* threads per block of the element-wise grids */
constexpr size_t kMaxBlocks = 1u << 20; /* grid-stride loops cover more work than this */

/* Blocks for `work` items at `threads` per block, at least 1, at most kMaxBlocks. */
inline unsigned grid_for(size_t work, int threads)
{
    size_t b = (work + (size_t)threads - 1) / (size_t)threads;
    if (b < 1)
        b = 1;
    if (b > kMaxBlocks)
        b = kMaxBlocks;
    return (unsigned)b;
}

/* Threads for one block per row of `work` items: a multiple of 32 in [32, 512]. */
inline int row_threads(size_t work)
{
    size_t t = (work + 31) / 32 * 32;
    if (t < 32)
        t = 32;
    if (t > 512)
        t = 512;
    return (int)t;
}

/* Blocks for one block per row: rows, at most kMaxBlocks (the grids' row loops stride over
 * the rest). The launchers return before a launch for rows == 0. */
inline unsigned row_blocks(size_t rows)
{
    return (unsigned)(rows < kMaxBlocks ? rows : kMaxBlocks);
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#ifndef PE_CUDA_EMU
/* Enqueues kernel k on stream s and returns the launch error. The decoder grids launch
 * through it, the one place that knows the <<<>>> syntax: tests/cuda_emu.hpp defines its
 * own, which runs the same grids on a CPU emulation of blocks and warps (test_cuda_emu). */
template <class... P, class... A>
inline cudaError_t launch(void (*k)(P...), unsigned blocks, int threads, cudaStream_t s,
                          A... args)
{
    k<<<blocks, threads, 0, s>>>(args...);
    return cudaGetLastError();
}
#endif

__device__ inline size_t thread_index() { return blockIdx.x * (size_t)blockDim.x + threadIdx.x; }
__device__ inline size_t grid_stride() { return (size_t)gridDim.x * blockDim.x; }

/* The reductions' operators, f(own, other): a lane's own value first, the value it
 * receives second. Max and Min keep the own value unless the other is strictly larger
 * (smaller), so a NaN received never replaces a number. */
struct Add {
    template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
    template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
struct Min {
    template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

/* f of v over aligned groups of W lanes (W a power of two <= 32), by xor butterflies;
 * every lane of a group gets its group's result. */
template <int W, class T, class F> __device__ inline T group_reduce(T v, F f)
{
    for (int o = W / 2; o > 0; o >>= 1)
        v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int W> __device__ inline float group_sum(float v) { return group_reduce<W>(v, Add()); }
template <int W> __device__ inline float group_max(float v) { return group_reduce<W>(v, Max()); }
__device__ inline float warp_sum(float v) { return group_reduce<32>(v, Add()); }
__device__ inline float warp_max(float v) { return group_reduce<32>(v, Max()); }

/* Inclusive prefix sum of v over the lanes of the warp (lane 0 first). */
template <class T> __device__ inline T warp_scan(T v)
{
    int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        T w = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += w;
    }
    return v;
}

/* f of v over the block; every thread gets it. identity: f's identity (the value of the
 * warps a block of fewer than 32 warps lacks). blockDim.x is a multiple of 32; red holds
 * 32 T of shared memory. */
template <class T, class F> __device__ inline T block_reduce(T v, T identity, F f, T *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = group_reduce<32>(v, f);
    __syncthreads(); /* red may still be read from the previous reduction */
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    if (w == 0) {
        v = group_reduce<32>(lane < nw ? red[lane] : identity, f);
        if (lane == 0)
            red[0] = v;
    }
    __syncthreads();
    return red[0];
}

__device__ inline float block_sum(float v, float *red) { return block_reduce(v, 0.0f, Add(), red); }
__device__ inline float block_max(float v, float *red)
{
    return block_reduce(v, -INFINITY, Max(), red);
}

} /* namespace cb */

#endif
