/* cb_sample.cu: the next token from rows of logits (kernels/sample.h's rule), the top-k
 * list with the row's log-sum-exp, and the argmax; one block per row.
 *
 * Thresholds are found as the host finds them, by radix selection on the values' bits,
 * 8 bits a pass from the top, each pass a block histogram in shared memory (warp-
 * aggregated: the lanes of a warp that fall in one bucket add once):
 *   - the top-k threshold counts values: integer counts, so the very threshold
 *     pe_k_kth_largest finds;
 *   - the top-p threshold and every other sum of weights (Z, the kept mass, the running sum
 *     of the draw) add the weights in 2^-40 fixed point, 64-bit integers: exact and
 *     independent of the order of the additions, so a row gives the same token on every
 *     run. The host adds the same weights as floats, left to right; the two agree except
 *     where the float rounding of the host's sums (or one ulp of difference between the
 *     device's and the host's expf in a weight) moves a threshold or the draw across a
 *     boundary: the top-p mass landing exactly at top_p * Z, or u * kept landing within
 *     rounding of the running sum at a token's edge. A weight below 2^-40 (a logit more than
 *     27.7 temperatures below the max) adds nothing here.
 * The kept weights are then scanned in index order (a block prefix sum per tile of the
 * row) for the first index whose running sum passes u * kept.
 *
 * The weights are recomputed from the logits in each pass instead of being stored (a row
 * of 50257 floats does not fit in shared memory); the row stays in L2 across the passes.
 */
#include <stdint.h>

#include "backend/cuda/cb_grid.cuh"
#include "backend/cuda/cb_launch.h"
#include "kernels/sample.h"

namespace {

typedef unsigned long long u64;
constexpr unsigned kFull = 0xffffffffu;
constexpr int32_t kNone = INT32_MAX;

/* A running argmax: the value and the first index holding it; i = kNone: nothing yet (a
 * NaN never enters). */
struct Best {
    float v;
    int32_t i;
};

__device__ inline Best better(Best a, Best b)
{
    if (a.i == kNone)
        return b;
    if (b.i == kNone)
        return a;
    if (a.v > b.v)
        return a;
    if (b.v > a.v)
        return b;
    return a.i < b.i ? a : b;
}

__device__ inline Best warp_best(Best b)
{
    for (int o = 16; o > 0; o >>= 1) {
        Best c;
        c.v = __shfl_xor_sync(kFull, b.v, o);
        c.i = __shfl_xor_sync(kFull, b.i, o);
        b = better(b, c);
    }
    return b;
}

using cb::Add;
using cb::block_reduce;
using cb::Max;
using cb::Min;
using cb::row_blocks;

/* Inclusive prefix sum over the block in thread order; *total gets the block's sum. */
__device__ u64 block_scan(u64 v, u64 *red, u64 *total)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u64 incl = cb::warp_scan(v);
    __syncthreads();
    if (lane == 31)
        red[w] = incl;
    __syncthreads();
    if (w == 0) {
        u64 t = lane < nw ? red[lane] : 0;
        u64 ti = cb::warp_scan(t);
        red[lane] = ti - t; /* the warps before this one */
        if (lane == 31)
            *total = ti;
    }
    __syncthreads();
    return incl + red[w];
}

/* Shared state of one block. */
struct Shared {
    uint32_t hist[256];
    u64 mass[256];
    u64 stage[32][32]; /* a warp's values for the aggregated histogram adds */
    Best best[32];
    u64 red64[32];
    int32_t red32[32];
    float redf[32];
    u64 total;
    int bucket;     /* the last radix pass's bucket */
    uint32_t above; /* values above the selected range (counts) */
    u64 above_mass; /* mass above it (fixed point) */
    int32_t count;
    int32_t cand[CB_TOPK_MAX];
};

/* The first index of the largest non-NaN value of x(n); kNone for an all-NaN row. */
__device__ Best block_argmax(const float *x, int32_t n, Shared &sh)
{
    Best b = {-INFINITY, kNone};
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (v == v && (b.i == kNone || v > b.v))
            b = Best{v, i};
    }
    b = warp_best(b);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh.best[w] = b;
    __syncthreads();
    if (w == 0) {
        b = warp_best(lane < nw ? sh.best[lane] : Best{-INFINITY, kNone});
        if (lane == 0)
            sh.best[0] = b;
    }
    __syncthreads();
    return sh.best[0];
}

/* Warp 0: the bucket of a radix pass, scanning from 255 down as the host's loop
 *   for (b = 255; b > 0; b--) { if (above + hist[b] >= target) break; above += hist[b]; }
 * does: lane L holds buckets 255 - 8L .. 248 - 8L; a prefix sum over the lanes finds the
 * lane where the running sum reaches target, and that lane walks its eight. */
template <class T> __device__ void find_bucket(const T *hist, T target, T above, int *b_out,
                                               T *above_out)
{
    int lane = threadIdx.x & 31;
    T loc[8], s = 0;
    for (int j = 0; j < 8; j++) {
        loc[j] = hist[255 - 8 * lane - j];
        s += loc[j];
    }
    T incl = cb::warp_scan(s);
    unsigned hit = __ballot_sync(kFull, above + incl >= target);
    int at = hit ? __ffs(hit) - 1 : 31; /* no lane: the loop runs down to bucket 0 */
    if (lane == at) {
        T acc = above + incl - s;
        int b = 0;
        for (int j = 0; j < 8; j++) {
            int bk = 255 - 8 * lane - j;
            if (bk == 0)
                break;
            if (acc + loc[j] >= target) {
                b = bk;
                break;
            }
            acc += loc[j];
        }
        *b_out = b;
        *above_out = acc;
    }
}

/* One aggregated add per bucket and warp: hist[bucket] += count of the lanes in it (or,
 * for mass, the sum of their values). Every lane of the warp calls. */
__device__ inline void add_count(uint32_t *hist, bool in, int bucket)
{
    unsigned act = __ballot_sync(kFull, in);
    if (in) {
        unsigned peers = __match_any_sync(act, bucket);
        if ((int)(threadIdx.x & 31) == __ffs(peers) - 1)
            atomicAdd(&hist[bucket], (uint32_t)__popc(peers));
    }
}

__device__ inline void add_mass(u64 *hist, bool in, int bucket, u64 v, u64 *stage)
{
    int lane = threadIdx.x & 31;
    stage[lane] = in ? v : 0;
    __syncwarp();
    unsigned act = __ballot_sync(kFull, in);
    if (in) {
        unsigned peers = __match_any_sync(act, bucket);
        if (lane == __ffs(peers) - 1) {
            u64 s = 0;
            for (unsigned m = peers; m; m &= m - 1)
                s += stage[__ffs(m) - 1];
            atomicAdd(&hist[bucket], s);
        }
    }
    __syncwarp(); /* stage is rewritten by the next round */
}

/* The order key of a value for top-k: -0 and +0 are one value (the host compares floats);
 * NaNs are left out (0 returned: not counted). */
__device__ inline bool topk_key(float x, uint32_t *key)
{
    if (x != x)
        return false;
    *key = pe_k_order_key(x == 0.0f ? 0.0f : x);
    return true;
}

/* The order key of the k-th largest value of x(n), 1 <= k <= the values counted: radix
 * selection as pe_k_kth_largest. TOPK: topk_key's keys; otherwise the host's own keys
 * (pe_k_order_key of every value, NaNs included, as pe_k_sample_row's top-k). */
template <bool TOPK> __device__ uint32_t block_kth_key(const float *x, int32_t n, int32_t k,
                                                       Shared &sh)
{
    uint32_t prefix = 0, mask = 0, above = 0; /* counted values above the range */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            sh.hist[b] = 0;
        __syncthreads();
        for (int32_t base = 0; base < n; base += blockDim.x) {
            int32_t i = base + (int32_t)threadIdx.x;
            uint32_t key = 0;
            bool in = false;
            if (i < n) {
                if (TOPK)
                    in = topk_key(x[i], &key);
                else {
                    key = pe_k_order_key(x[i]);
                    in = true;
                }
                in = in && (key & mask) == prefix;
            }
            add_count(sh.hist, in, (int)((key >> shift) & 255u));
        }
        __syncthreads();
        if (threadIdx.x < 32)
            find_bucket<uint32_t>(sh.hist, (uint32_t)k, above, &sh.bucket, &sh.above);
        __syncthreads();
        const int b = sh.bucket;
        above = sh.above;
        prefix |= (uint32_t)b << shift;
        mask |= 255u << shift;
        __syncthreads(); /* hist is cleared by the next pass */
    }
    return prefix;
}

/* A weight's fixed-point form (w in [0, 1]: the max logit has weight 1; the weights are
 * pe_k_sample_weight's). */
__device__ inline u64 fixed40(float w)
{
    return w > 0.0f ? (u64)((w < 1.0f ? w : 1.0f) * 0x1p40f) : 0ull;
}

/* The bits of the top-p threshold: the largest weight t such that the weights >= t hold
 * at least target, as pe_k_mass_threshold (with the bucket masses in fixed point). */
__device__ uint32_t block_mass_bits(const float *x, int32_t n, float tk, float mx, float t,
                                    float mp, u64 target, Shared &sh)
{
    uint32_t prefix = 0, mask = 0;
    u64 above = 0;
    const int w = threadIdx.x >> 5;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            sh.mass[b] = 0;
        __syncthreads();
        for (int32_t base = 0; base < n; base += blockDim.x) {
            int32_t i = base + (int32_t)threadIdx.x;
            uint32_t key = 0;
            u64 v = 0;
            bool in = false;
            if (i < n) {
                float wi = pe_k_sample_weight(x[i], tk, mx, t, mp);
                key = __float_as_uint(wi);
                v = fixed40(wi);
                in = (key & mask) == prefix;
            }
            add_mass(sh.mass, in, (int)((key >> shift) & 255u), v, sh.stage[w]);
        }
        __syncthreads();
        if (threadIdx.x < 32)
            find_bucket<u64>(sh.mass, target, above, &sh.bucket, &sh.above_mass);
        __syncthreads();
        above = sh.above_mass;
        prefix |= (uint32_t)sh.bucket << shift;
        mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

/* One row of pe_k_sample_row's rule; returns the token (thread 0's value is the one). */
__device__ int32_t sample_row(const float *x, int32_t n, pe_k_sampling p, Shared &sh)
{
    const Best best = block_argmax(x, n, sh);
    const int32_t am = best.i == kNone ? 0 : best.i;
    if (!(p.temperature > 0.0f))
        return am;
    const float t = p.temperature;
    float tk = -INFINITY;
    if (p.top_k > 0 && p.top_k < n)
        tk = pe_k_from_order_key(block_kth_key<false>(x, n, p.top_k, sh));
    const float mx = x[am], mp = p.min_p;
    float tp = 0.0f;
    if (p.top_p < 1.0f) {
        u64 z = 0;
        for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
            z += fixed40(pe_k_sample_weight(x[i], tk, mx, t, mp));
        z = block_reduce<u64>(z, 0, Add(), sh.red64);
        const float frac = p.top_p > 0.0f ? p.top_p : 0.0f;
        const u64 target = (u64)((double)frac * (double)z);
        tp = __uint_as_float(block_mass_bits(x, n, tk, mx, t, mp, target, sh));
    }
    u64 kept = 0;
    int32_t last = -1;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float w = pe_k_sample_weight(x[i], tk, mx, t, mp);
        if (w > 0.0f && w >= tp) {
            kept += fixed40(w);
            last = i;
        }
    }
    kept = block_reduce<u64>(kept, 0, Add(), sh.red64);
    last = block_reduce<int32_t>(last, -1, Max(), sh.red32);
    if (last < 0)
        return am;
    const float u = p.u > 0.0f ? (p.u < 1.0f ? p.u : 1.0f) : 0.0f;
    const u64 r = (u64)((double)u * (double)kept);
    u64 run = 0;
    for (int32_t base = 0; base < n; base += blockDim.x) {
        int32_t i = base + (int32_t)threadIdx.x;
        u64 v = 0;
        if (i < n) {
            float w = pe_k_sample_weight(x[i], tk, mx, t, mp);
            v = w > 0.0f && w >= tp ? fixed40(w) : 0;
        }
        u64 incl = block_scan(v, sh.red64, &sh.total);
        bool pass = i < n && v > 0 && run + incl > r;
        int32_t first = block_reduce<int32_t>(pass ? i : kNone, kNone, Min(), sh.red32);
        if (first != kNone)
            return first;
        run += sh.total;
    }
    return last;
}

__global__ void __launch_bounds__(1024) sample_rows(const float *x, size_t rows, int32_t n,
                                                    const pe_k_sampling *params,
                                                    int32_t *tokens, float *logit)
{
    __shared__ Shared sh;
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *xr = x + row * (size_t)n;
        int32_t tok = sample_row(xr, n, params[row], sh);
        if (threadIdx.x == 0) {
            tokens[row] = tok;
            if (logit)
                logit[row] = xr[tok];
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(1024) argmax_rows(const float *x, size_t rows, int32_t n,
                                                    int32_t *idx)
{
    __shared__ Shared sh;
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        Best b = block_argmax(x + row * (size_t)n, n, sh);
        if (threadIdx.x == 0)
            idx[row] = b.i == kNone ? 0 : b.i;
    }
}

/* One row of pe_k_topk_row: the k-th largest key (NaNs left out), every larger value, then
 * the equal ones in index order up to k, ranked by (value, index); lse as
 * pe_k_logsumexp_row. */
__global__ void __launch_bounds__(1024) topk_rows(const float *x, size_t rows, int32_t n, int k,
                                                  int32_t *idx, float *val, float *lse)
{
    __shared__ Shared sh;
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *xr = x + row * (size_t)n;
        int32_t cnt = 0;
        for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
            cnt += xr[i] == xr[i];
        cnt = block_reduce<int32_t>(cnt, 0, Add(), sh.red32);
        const int kk = cnt < k ? (int)cnt : k;
        if (kk > 0) {
            const uint32_t tkey = block_kth_key<true>(xr, n, kk, sh);
            if (threadIdx.x == 0)
                sh.count = 0;
            __syncthreads();
            for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
                uint32_t key;
                if (topk_key(xr[i], &key) && key > tkey)
                    sh.cand[atomicAdd(&sh.count, 1)] = i;
            }
            __syncthreads();
            const int32_t ngt = sh.count, need = kk - ngt;
            int32_t taken = 0;
            for (int32_t base = 0; base < n && taken < need; base += blockDim.x) {
                int32_t i = base + (int32_t)threadIdx.x;
                uint32_t key;
                bool eq = i < n && topk_key(xr[i], &key) && key == tkey;
                u64 incl = block_scan(eq ? 1 : 0, sh.red64, &sh.total);
                int32_t pos = taken + (int32_t)incl - 1;
                if (eq && pos < need)
                    sh.cand[ngt + pos] = i;
                taken += (int32_t)sh.total;
            }
            __syncthreads();
            if ((int)threadIdx.x < kk) {
                const int32_t ia = sh.cand[threadIdx.x];
                uint32_t ka = 0;
                topk_key(xr[ia], &ka);
                int rank = 0;
                for (int b = 0; b < kk; b++) {
                    const int32_t ib = sh.cand[b];
                    uint32_t kb = 0;
                    topk_key(xr[ib], &kb);
                    rank += kb > ka || (kb == ka && ib < ia);
                }
                idx[row * (size_t)k + (size_t)rank] = ia;
                val[row * (size_t)k + (size_t)rank] = xr[ia];
            }
        }
        for (int j = kk + (int)threadIdx.x; j < k; j += blockDim.x) {
            idx[row * (size_t)k + (size_t)j] = -1;
            val[row * (size_t)k + (size_t)j] = -INFINITY;
        }
        if (lse) {
            float m = -INFINITY;
            for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
                m = xr[i] > m ? xr[i] : m;
            m = block_reduce<float>(m, -INFINITY, Max(), sh.redf);
            float s = 0.0f;
            for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
                s += expf(xr[i] - m);
            s = block_reduce<float>(s, 0.0f, Add(), sh.redf);
            if (threadIdx.x == 0)
                lse[row] = m + logf(s);
        }
        __syncthreads(); /* cand and count are rewritten by the next row */
    }
}

/* sample.h's pe_k_penalize_rows, a thread per entry. */
__global__ void penalize_entries(float *x, int32_t rows, int32_t n, int32_t id0,
                                 const pe_k_penalty *p, size_t count)
{
    for (size_t i = cb::thread_index(); i < count; i += cb::grid_stride()) {
        const pe_k_penalty e = p[i];
        const int32_t c = e.id - id0;
        if (e.row >= 0 && e.row < rows && c >= 0 && c < n) {
            float *v = x + (size_t)e.row * (size_t)n + (size_t)c;
            *v = pe_k_penalize(*v, e.add, e.rep, e.sub);
        }
    }
}

/* sample.h's pe_k_mask_rows, a thread per logit. */
__global__ void mask_logits(float *x, int32_t rows, int32_t n, int32_t id0,
                            const int32_t *row_mask, const uint32_t *bits, int32_t words)
{
    const size_t total = (size_t)rows * (size_t)n;
    for (size_t i = cb::thread_index(); i < total; i += cb::grid_stride()) {
        const int32_t r = (int32_t)(i / (size_t)n), c = (int32_t)(i % (size_t)n);
        if (row_mask[r] >= 0 &&
            !pe_k_mask_allows(bits + (size_t)row_mask[r] * (size_t)words, words, id0 + c))
            x[i] = -INFINITY;
    }
}

int row_threads(size_t n) { return n >= 4096 ? 1024 : 256; }

} /* namespace */

extern "C" cudaError_t cb_launch_argmax(cudaStream_t s, const float *x, size_t rows, size_t n,
                                        int32_t *idx)
{
    if (rows == 0 || n == 0)
        return cudaSuccess;
    return cb::launch(argmax_rows, row_blocks(rows), row_threads(n), s, x, rows, (int32_t)n, idx);
}

extern "C" cudaError_t cb_launch_topk(cudaStream_t s, const float *x, size_t rows, size_t n,
                                      size_t k, int32_t *idx, float *val, float *lse)
{
    if (rows == 0 || n == 0 || (k == 0 && !lse))
        return cudaSuccess;
    return cb::launch(topk_rows, row_blocks(rows), row_threads(n), s, x, rows, (int32_t)n, (int)k,
                      idx, val, lse);
}

extern "C" cudaError_t cb_launch_penalize(cudaStream_t s, float *x, size_t rows, size_t n,
                                          int32_t id0, const pe_k_penalty *p, size_t count)
{
    if (rows == 0 || n == 0 || count == 0)
        return cudaSuccess;
    return cb::launch(penalize_entries, cb::grid_for(count, cb::kThreads), cb::kThreads, s, x,
                      (int32_t)rows, (int32_t)n, id0, p, count);
}

extern "C" cudaError_t cb_launch_mask(cudaStream_t s, float *x, size_t rows, size_t n,
                                      int32_t id0, const int32_t *row_mask,
                                      const uint32_t *bits, size_t words)
{
    if (rows == 0 || n == 0)
        return cudaSuccess;
    return cb::launch(mask_logits, cb::grid_for(rows * n, cb::kThreads), cb::kThreads, s, x,
                      (int32_t)rows, (int32_t)n, id0, row_mask, bits, (int32_t)words);
}

extern "C" cudaError_t cb_launch_sample(cudaStream_t s, const float *x, size_t rows, size_t n,
                                        const pe_k_sampling *params, int32_t *tokens,
                                        float *logit)
{
    if (rows == 0 || n == 0)
        return cudaSuccess;
    return cb::launch(sample_rows, row_blocks(rows), row_threads(n), s, x, rows, (int32_t)n,
                      params, tokens, logit);
}
