/* cb_attention.cu: attention over the paged KV cache (kernels/attention.h: the pool's
 * layout, the chunk table, which keys a query sees). Scores, maxima and sums in fp32; the
 * pool fp32 or bf16 (widened on load). Two grids and a reduction:
 *
 *   decode   one block per (row, KV head, group of its query heads, split of the keys):
 *            the query heads of a KV head (GQA) share every key and value load; the keys
 *            run in tiles of 64 with an online softmax; a long context is split over
 *            several blocks (flash-decoding), each writing an unnormalized partial output
 *            with its max and sum to the workspace, and
 *   combine  merges the splits of each (row, head) in split order.
 *   prefill  one block per (tile of a chunk's queries, KV head, group of query heads): the
 *            tile's rows (tokens x query heads of the KV head) against tiles of keys
 *            staged in shared memory, an online softmax per row.
 *
 * A step whose rows are one per chunk runs the decode grid alone; a single chunk runs the
 * prefill grid alone; a mixed step runs both, each taking the chunks of its kind (one
 * token, or more). Either grid is correct for any row; the choice is about speed.
 *
 * The summation order differs from pe_k_attend_naive (the naive twin: two passes, p = e /
 * sum, then sum p v): here sum(e v) / sum(e), tiled and split; the results agree within a
 * few ulp of the output's scale.
 *
 * The chunk table and the block tables live on the device and are not checked on the host
 * (the host backend checks its own). The grids check: a block id outside [0, nblocks)
 * reads as zeros; a chunk with row0 < 0 or n <= 0, a row outside [0, rows) and a negative
 * position are skipped. They do not check the block tables' extent: key position j of a
 * chunk reads block_tables[bt + j / block_tokens] unguarded, so a chunk's bt (>= 0) and
 * its last position must stay inside the step's tables, as the engine builds them; nor
 * chunks whose rows overlap (those rows are written by more than one), nor pos0 + n
 * overflowing int32.
 */
#include <stdint.h>

#include "backend/cuda/cb_grid.cuh"
#include "backend/cuda/cb_launch.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace {

constexpr int kT = 128;           /* threads of every attention block */
constexpr int kDecodeKeys = 64;   /* keys per tile of the decode grid */
constexpr int kMaxSplits = 64;    /* splits of one row's keys, at most */
constexpr int kMinSplitKeys = 64; /* keys per split, at least */

/* What every grid takes: the call and the launcher's plan. */
struct Plan {
    cb_attn_args a;
    int group;   /* query heads per KV head */
    int gh;      /* query heads per block */
    int hgroups; /* blocks per KV head: ceil(group / gh) */
    int splits;  /* decode: blocks per row and head group, over the keys */
    int32_t kps; /* decode: keys per split (the last split takes the rest) */
    int mixed;   /* both grids run: decode takes one-token chunks, prefill the others */
    int vec;     /* head_dim % 4 == 0 and the pool 16-byte aligned: pool loads in fours */
    float *ws_o; /* (rows, heads, splits, head_dim) partial outputs */
    float *ws_ml; /* (rows, heads, splits, 2) their max and sum */
};

__device__ inline int32_t imin(int32_t x, int32_t y) { return x < y ? x : y; }

struct Chunk {
    int32_t row0, n, pos0, bt; /* n = 0: no chunk */
};

__device__ inline Chunk chunk_at(const int32_t *chunks, size_t c)
{
    const int32_t *f = chunks + c * PE_K_CHUNK_FIELDS;
    return Chunk{f[PE_K_CHUNK_ROW0], f[PE_K_CHUNK_N], f[PE_K_CHUNK_POS0], f[PE_K_CHUNK_BT]};
}

/* The chunk that holds step row r (n = 0 when none does). Every warp scans the chunks
 * itself, 32 at a time, so the answer needs no shared slot and no barrier. (A slot that
 * warp 0 wrote and all read after a barrier shared its bytes with attn_combine's inv_l,
 * written by thread 0 with no barrier after those reads: racecheck, on an H200.) Every
 * thread of a warp calls it. */
__device__ Chunk find_chunk(const int32_t *chunks, size_t nchunks, size_t r)
{
    const int lane = threadIdx.x & 31;
    for (size_t base = 0; base < nchunks; base += 32) {
        size_t c = base + (size_t)lane;
        bool hit = false;
        if (c < nchunks) {
            Chunk k = chunk_at(chunks, c);
            hit = k.row0 >= 0 && k.n > 0 && (size_t)k.row0 <= r &&
                  r < (size_t)k.row0 + (size_t)k.n;
        }
        unsigned m = __ballot_sync(0xffffffffu, hit);
        if (m)
            return chunk_at(chunks, base + (size_t)(__ffs(m) - 1));
    }
    return Chunk{0, 0, 0, 0};
}

/* Elements i .. i+3 of the pool, dimensions d .. d+3 of a row of hd: zeros beyond hd.
 * vec: hd % 4 == 0 and the pool 16-byte aligned, so one load reads all four. */
__device__ inline float4 load4(const void *pool, int bf16, bool vec, size_t i, int d, int hd)
{
    if (vec) {
        if (d >= hd)
            return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (bf16) {
            uint2 u = *reinterpret_cast<const uint2 *>(static_cast<const uint16_t *>(pool) + i);
            return make_float4(pe_k_from_bf16((uint16_t)(u.x & 0xffffu)),
                               pe_k_from_bf16((uint16_t)(u.x >> 16)),
                               pe_k_from_bf16((uint16_t)(u.y & 0xffffu)),
                               pe_k_from_bf16((uint16_t)(u.y >> 16)));
        }
        return *reinterpret_cast<const float4 *>(static_cast<const float *>(pool) + i);
    }
    float4 o;
    o.x = d < hd ? pe_k_load_elem(pool, bf16, i) : 0.0f;
    o.y = d + 1 < hd ? pe_k_load_elem(pool, bf16, i + 1) : 0.0f;
    o.z = d + 2 < hd ? pe_k_load_elem(pool, bf16, i + 2) : 0.0f;
    o.w = d + 3 < hd ? pe_k_load_elem(pool, bf16, i + 3) : 0.0f;
    return o;
}

/* Element index of dimension 0 of key position j (K: v = 0, V: v = 1) of KV head kh, or
 * SIZE_MAX when its block id is outside the pool. */
__device__ inline size_t key_at(const cb_attn_args &a, const int32_t *bt, int32_t j, int v,
                                int kh)
{
    int32_t b = bt[j / a.shape.block_tokens];
    if (b < 0 || (size_t)b >= a.shape.nblocks)
        return SIZE_MAX;
    return pe_k_kv_index(a.shape, b, a.layer, v, kh, (int)(j % a.shape.block_tokens));
}

__device__ inline float4 load_key4(const cb_attn_args &a, bool vec, size_t at, int d)
{
    if (at == SIZE_MAX)
        return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return load4(a.pool, a.bf16, vec, at + (size_t)d, d, a.shape.head_dim);
}

/* Prefill: stages K (v = 0) or V (v = 1) of the keys at positions k0 .. k0 + nk - 1 of KV
 * head kh into tile(KT, HDP + 1), 4 dimensions a thread and step; rows from nk on are
 * zeros. Every thread of the block calls. */
template <int KT, int HDP>
__device__ inline void stage_tile(float (*tile)[HDP + 1], const cb_attn_args &a,
                                  const int32_t *bt, int32_t k0, int nk, int v, int kh, bool vec)
{
    for (int e = threadIdx.x; e < KT * (HDP / 4); e += kT) {
        int kk = e / (HDP / 4), d = 4 * (e % (HDP / 4));
        float4 x = kk < nk ? load_key4(a, vec, key_at(a, bt, k0 + kk, v, kh), d)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        tile[kk][d] = x.x;
        tile[kk][d + 1] = x.y;
        tile[kk][d + 2] = x.z;
        tile[kk][d + 3] = x.w;
    }
}

/* Decode: one block per (row, KV head kh, head group hg, split sp), blockIdx.x in that
 * order (split fastest). HDP: the head dim padded to 64, 128 or 256; GH: query heads per
 * block (1, 2, 4, 8).
 *   scores  LPK lanes per key, 4 dimensions a lane per load, every query head of the block
 *           dotted with the loaded key;
 *   softmax one warp per query head: the tile's max, p = exp(s - m), the running sum, the
 *           factor alpha that rescales the accumulated output;
 *   values  each thread 4 dimensions of every KL-th key, for every query head. */
template <int HDP, int GH> __global__ void __launch_bounds__(kT) attn_decode(Plan p)
{
    constexpr int KT = kDecodeKeys;
    constexpr int LPK = HDP / 4 < 32 ? HDP / 4 : 32; /* lanes per key (scores) */
    constexpr int KPW = 32 / LPK;                    /* keys per warp and step */
    constexpr int V4 = HDP / (4 * LPK);              /* float4 loads per lane and key */
    constexpr int DT4 = HDP / 4;                     /* threads per value row */
    constexpr int KL = kT / DT4;                     /* keys in flight (values) */
    __shared__ __align__(16) float qs[GH][HDP];
    __shared__ float sc[GH][KT];
    __shared__ __align__(16) float red[KL][GH][HDP];
    __shared__ float m_s[GH], l_s[GH], alpha_s[GH];

    const cb_attn_args &a = p.a;
    size_t bid = blockIdx.x;
    const int sp = (int)(bid % (size_t)p.splits);
    bid /= (size_t)p.splits;
    const int hg = (int)(bid % (size_t)p.hgroups);
    bid /= (size_t)p.hgroups;
    const int kh = (int)(bid % (size_t)a.shape.kv_heads);
    const size_t r = bid / (size_t)a.shape.kv_heads;

    const Chunk c = find_chunk(a.chunks, a.nchunks, r);
    if (c.n == 0 || (p.mixed && c.n != 1))
        return; /* the whole block: another grid (or nobody) owns the row */
    const int32_t qpos = c.pos0 + (int32_t)(r - (size_t)c.row0);
    if (qpos < 0)
        return;
    const int32_t first = pe_k_attn_first(qpos, a.window);
    const int32_t lo = first + sp * p.kps;
    const int32_t hi = sp == p.splits - 1 ? qpos + 1 : imin(qpos + 1, lo + p.kps);
    const int32_t *bt = a.block_tables + c.bt;
    const int hd = a.shape.head_dim;
    const int ng = imin(GH, p.group - hg * GH); /* query heads of this block */
    const int h0 = kh * p.group + hg * GH;
    const bool vec = p.vec;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int e = threadIdx.x; e < GH * HDP; e += kT) {
        int g = e / HDP, d = e % HDP;
        qs[g][d] = g < ng && d < hd ? a.q[r * a.q_stride + (size_t)(h0 + g) * hd + d] : 0.0f;
    }
    if (threadIdx.x < GH) {
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
    }
    float acc[GH][4];
    for (int g = 0; g < GH; g++)
        acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
    const int dt = threadIdx.x % DT4, kl = threadIdx.x / DT4;
    __syncthreads();

    for (int32_t k0 = lo; k0 < hi; k0 += KT) {
        const int nk = imin(KT, hi - k0);
        /* scores of the tile: key jj by the LPK lanes of a warp segment */
        for (int jj = warp * KPW + lane / LPK; jj < KT; jj += 4 * KPW) {
            float dot[GH];
            for (int g = 0; g < GH; g++)
                dot[g] = 0.0f;
            if (jj < nk) {
                size_t at = key_at(a, bt, k0 + jj, 0, kh);
                for (int v = 0; v < V4; v++) {
                    int d = 4 * (lane % LPK) + 4 * LPK * v;
                    float4 kv = load_key4(a, vec, at, d);
                    for (int g = 0; g < GH; g++) {
                        float4 qv = *reinterpret_cast<const float4 *>(&qs[g][d]);
                        dot[g] += (qv.x * kv.x + qv.y * kv.y) + (qv.z * kv.z + qv.w * kv.w);
                    }
                }
            }
            for (int g = 0; g < GH; g++)
                dot[g] = cb::group_sum<LPK>(dot[g]);
            if (jj < nk && lane % LPK == 0)
                for (int g = 0; g < GH; g++)
                    sc[g][jj] = dot[g] * a.scale;
        }
        __syncthreads();
        /* online softmax: one warp per query head */
        for (int g = warp; g < GH; g += kT / 32) {
            float mt = -INFINITY;
            for (int jj = lane; jj < nk; jj += 32)
                mt = sc[g][jj] > mt ? sc[g][jj] : mt;
            mt = cb::warp_max(mt);
            const float mo = m_s[g], mn = mt > mo ? mt : mo;
            const float base = mn == -INFINITY ? 0.0f : mn;
            float lt = 0.0f;
            for (int jj = lane; jj < nk; jj += 32) {
                float e = expf(sc[g][jj] - base);
                sc[g][jj] = e;
                lt += e;
            }
            lt = cb::warp_sum(lt);
            __syncwarp(); /* every lane has read m_s[g] before lane 0 rewrites it */
            if (lane == 0) {
                float al = expf(mo - base);
                alpha_s[g] = al;
                l_s[g] = l_s[g] * al + lt;
                m_s[g] = mn;
            }
        }
        __syncthreads();
        /* values: 4 dimensions of every KL-th key, all query heads at once */
        for (int g = 0; g < GH; g++) {
            float al = alpha_s[g];
            acc[g][0] *= al;
            acc[g][1] *= al;
            acc[g][2] *= al;
            acc[g][3] *= al;
        }
        for (int jj = kl; jj < nk; jj += KL) {
            float4 vv = load_key4(a, vec, key_at(a, bt, k0 + jj, 1, kh), 4 * dt);
            for (int g = 0; g < GH; g++) {
                float pj = sc[g][jj];
                acc[g][0] += pj * vv.x;
                acc[g][1] += pj * vv.y;
                acc[g][2] += pj * vv.z;
                acc[g][3] += pj * vv.w;
            }
        }
        __syncthreads(); /* sc is rewritten by the next tile */
    }

    for (int g = 0; g < GH; g++)
        *reinterpret_cast<float4 *>(&red[kl][g][4 * dt]) =
            make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    __syncthreads();
    for (int e = threadIdx.x; e < GH * HDP; e += kT) {
        int g = e / HDP, d = e % HDP;
        if (g >= ng || d >= hd)
            continue;
        float o = red[0][g][d];
        for (int k = 1; k < KL; k++)
            o += red[k][g][d];
        size_t h = (size_t)(h0 + g);
        if (p.splits == 1) {
            a.out[r * a.out_stride + h * (size_t)hd + (size_t)d] = o / l_s[g];
        } else {
            size_t at = (r * (size_t)a.heads + h) * (size_t)p.splits + (size_t)sp;
            p.ws_o[at * (size_t)hd + (size_t)d] = o;
            if (d == 0) {
                p.ws_ml[2 * at] = m_s[g];
                p.ws_ml[2 * at + 1] = l_s[g];
            }
        }
    }
}

/* One block per (row, head): out = sum_s o_s exp(m_s - M) / sum_s l_s exp(m_s - M), in
 * split order, M the largest m_s. An empty split has m = -inf, l = 0, o = 0. */
__global__ void __launch_bounds__(kT) attn_combine(Plan p)
{
    __shared__ float wt[kMaxSplits];
    __shared__ float inv_l;
    const cb_attn_args &a = p.a;
    const size_t r = blockIdx.x / (size_t)a.heads, h = blockIdx.x % (size_t)a.heads;
    const Chunk c = find_chunk(a.chunks, a.nchunks, r);
    if (c.n == 0 || (p.mixed && c.n != 1) || c.pos0 + (int32_t)(r - (size_t)c.row0) < 0)
        return;
    const size_t at = (r * (size_t)a.heads + h) * (size_t)p.splits;
    const size_t hd = (size_t)a.shape.head_dim;
    if (threadIdx.x == 0) {
        float M = -INFINITY;
        for (int s = 0; s < p.splits; s++) {
            float m = p.ws_ml[2 * (at + (size_t)s)];
            M = m > M ? m : M;
        }
        const float base = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int s = 0; s < p.splits; s++) {
            float w = expf(p.ws_ml[2 * (at + (size_t)s)] - base);
            wt[s] = w;
            L += p.ws_ml[2 * (at + (size_t)s) + 1] * w;
        }
        inv_l = 1.0f / L;
    }
    __syncthreads();
    for (size_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < p.splits; s++)
            o += p.ws_o[(at + (size_t)s) * hd + d] * wt[s];
        a.out[r * a.out_stride + h * hd + d] = o * inv_l;
    }
}

/* Prefill: one block per (query tile, KV head kh, head group hg), blockIdx.x in that
 * order (head group fastest); tiles are numbered chunk by chunk, ceil(n / QT) per chunk
 * (none for a one-token chunk when the decode grid runs beside). A tile's R rows are QT
 * tokens x gh query heads (row = token * gh + head); keys come in tiles of KT, staged in
 * shared memory (rows padded by one float against bank conflicts), K then V in one buffer.
 *   scores  thread i: key i % KT against rows i / KT, + kT / KT, ...;
 *   softmax SP threads per row;
 *   values  thread i: dimensions i % DT (+ DT), rows i / DT (+ kT / DT). */
template <int HDP> __global__ void __launch_bounds__(kT) attn_prefill(Plan p)
{
    constexpr int R = HDP <= 128 ? 32 : 16;  /* query rows per block */
    constexpr int KT = HDP <= 128 ? 32 : 16; /* keys per tile */
    constexpr int HS = HDP + 1;              /* padded shared row */
    constexpr int E = R * KT / kT;           /* scores per thread */
    constexpr int RS = kT / KT;              /* row step of the score mapping */
    constexpr int SP = kT / R;               /* softmax threads per row */
    constexpr int DT = HDP < kT ? HDP : kT;  /* threads across dimensions (values) */
    constexpr int DPT = HDP / DT;            /* dimensions per thread */
    constexpr int RG = kT / DT;              /* row groups (values) */
    constexpr int RPT = R / RG;              /* rows per thread (values) */
    __shared__ float qs[R][HS];
    __shared__ float kv[KT][HS];
    __shared__ float sc[R][KT + 1];
    __shared__ float m_s[R], l_s[R], alpha_s[R];
    __shared__ int32_t qpos_s[R];

    const cb_attn_args &a = p.a;
    const int gh = p.gh, qt = R / gh; /* query heads and tokens per tile */
    size_t bid = blockIdx.x;
    const int hg = (int)(bid % (size_t)p.hgroups);
    bid /= (size_t)p.hgroups;
    const int kh = (int)(bid % (size_t)a.shape.kv_heads);
    const size_t tile = bid / (size_t)a.shape.kv_heads;
    const int lane = threadIdx.x & 31;

    /* which chunk and which of its tiles: a prefix sum of the chunks' tile counts, by every
     * warp for itself (as find_chunk) */
    Chunk c = Chunk{0, 0, 0, 0};
    int32_t t0 = 0;
    unsigned long long before = 0;
    for (size_t base = 0; base < a.nchunks; base += 32) {
        size_t ci = base + (size_t)lane;
        unsigned long long t = 0;
        Chunk k = Chunk{0, 0, 0, 0};
        if (ci < a.nchunks) {
            k = chunk_at(a.chunks, ci);
            if (k.n > 0 && !(p.mixed && k.n == 1))
                t = (unsigned long long)((k.n + qt - 1) / qt);
        }
        unsigned long long incl = cb::warp_scan(t);
        bool hit = t > 0 && before + incl - t <= tile && tile < before + incl;
        unsigned m = __ballot_sync(0xffffffffu, hit);
        if (m) {
            int src = __ffs(m) - 1;
            if (lane == src) {
                c = k;
                t0 = (int32_t)(tile - (before + incl - t)) * qt;
            }
            c.row0 = __shfl_sync(0xffffffffu, c.row0, src);
            c.n = __shfl_sync(0xffffffffu, c.n, src);
            c.pos0 = __shfl_sync(0xffffffffu, c.pos0, src);
            c.bt = __shfl_sync(0xffffffffu, c.bt, src);
            t0 = __shfl_sync(0xffffffffu, t0, src);
            break;
        }
        before += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (c.n == 0 || c.row0 < 0)
        return;
    const int hd = a.shape.head_dim;
    const int32_t *bt = a.block_tables + c.bt;
    const int h0 = kh * p.group + hg * gh;
    const bool vec = p.vec;
    const int32_t ntok = imin(qt, c.n - t0); /* tokens of this tile */

    for (int e = threadIdx.x; e < R * HDP; e += kT) {
        int rho = e / HDP, d = e % HDP, tok = rho / gh, g = rho % gh;
        size_t row = (size_t)c.row0 + (size_t)(t0 + tok);
        bool ok = tok < ntok && hg * gh + g < p.group && row < a.rows;
        qs[rho][d] = ok && d < hd ? a.q[row * a.q_stride + (size_t)(h0 + g) * hd + d] : 0.0f;
        if (d == 0) {
            int32_t qpos = c.pos0 + t0 + tok;
            qpos_s[rho] = ok && qpos >= 0 ? qpos : -1;
            m_s[rho] = -INFINITY;
            l_s[rho] = 0.0f;
        }
    }
    const int32_t p_lo = c.pos0 + t0, p_hi = c.pos0 + t0 + ntok - 1;
    const int32_t k_lo = pe_k_attn_first(p_lo < 0 ? 0 : p_lo, a.window);
    float acc[RPT][DPT];
    for (int j = 0; j < RPT; j++)
        for (int i = 0; i < DPT; i++)
            acc[j][i] = 0.0f;
    __syncthreads();

    for (int32_t k0 = k_lo; k0 <= p_hi; k0 += KT) {
        const int nk = imin(KT, p_hi + 1 - k0);
        /* K tile */
        stage_tile<KT, HDP>(kv, a, bt, k0, nk, 0, kh, vec);
        __syncthreads();
        /* scores */
        {
            const int kk = threadIdx.x % KT;
            float dot[E];
            for (int j = 0; j < E; j++)
                dot[j] = 0.0f;
            for (int d = 0; d < hd; d++) {
                float kd = kv[kk][d];
                for (int j = 0; j < E; j++)
                    dot[j] += qs[threadIdx.x / KT + RS * j][d] * kd;
            }
            for (int j = 0; j < E; j++) {
                int rho = threadIdx.x / KT + RS * j;
                int32_t qpos = qpos_s[rho];
                bool vis = kk < nk && qpos >= 0 && pe_k_attn_visible(qpos, k0 + kk, a.window);
                sc[rho][kk] = vis ? dot[j] * a.scale : -INFINITY;
            }
        }
        __syncthreads();
        /* online softmax, SP threads per row */
        {
            const int rho = threadIdx.x / SP, part = threadIdx.x % SP;
            float mt = -INFINITY;
            for (int kk = part; kk < KT; kk += SP)
                mt = sc[rho][kk] > mt ? sc[rho][kk] : mt;
            mt = cb::group_max<SP>(mt);
            const float mo = m_s[rho], mn = mt > mo ? mt : mo;
            const float base = mn == -INFINITY ? 0.0f : mn;
            float lt = 0.0f;
            for (int kk = part; kk < KT; kk += SP) {
                float e = expf(sc[rho][kk] - base);
                sc[rho][kk] = e;
                lt += e;
            }
            lt = cb::group_sum<SP>(lt);
            __syncwarp();
            if (part == 0) {
                float al = expf(mo - base);
                alpha_s[rho] = al;
                l_s[rho] = l_s[rho] * al + lt;
                m_s[rho] = mn;
            }
        }
        /* V tile, into the same buffer (the scores are done with K) */
        stage_tile<KT, HDP>(kv, a, bt, k0, nk, 1, kh, vec);
        __syncthreads();
        /* values */
        for (int j = 0; j < RPT; j++) {
            const int rho = threadIdx.x / DT + RG * j;
            const float al = alpha_s[rho];
            for (int i = 0; i < DPT; i++) {
                const int d = threadIdx.x % DT + DT * i;
                float o = acc[j][i] * al;
                for (int kk = 0; kk < nk; kk++)
                    o += sc[rho][kk] * kv[kk][d];
                acc[j][i] = o;
            }
        }
        __syncthreads(); /* kv and sc are rewritten by the next tile */
    }

    for (int j = 0; j < RPT; j++) {
        const int rho = threadIdx.x / DT + RG * j;
        if (qpos_s[rho] < 0)
            continue;
        const int tok = rho / gh, g = rho % gh;
        const size_t row = (size_t)c.row0 + (size_t)(t0 + tok);
        const float inv = 1.0f / l_s[rho];
        for (int i = 0; i < DPT; i++) {
            const int d = threadIdx.x % DT + DT * i;
            if (d < hd)
                a.out[row * a.out_stride + (size_t)(h0 + g) * hd + d] = acc[j][i] * inv;
        }
    }
}

size_t smin(size_t x, size_t y) { return x < y ? x : y; }

int pow2_at_least(int x)
{
    int p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

template <int HDP> cudaError_t launch_decode(cudaStream_t s, const Plan &p, size_t blocks)
{
    switch (p.gh) {
    case 1:
        return cb::launch(attn_decode<HDP, 1>, (unsigned)blocks, kT, s, p);
    case 2:
        return cb::launch(attn_decode<HDP, 2>, (unsigned)blocks, kT, s, p);
    case 4:
        return cb::launch(attn_decode<HDP, 4>, (unsigned)blocks, kT, s, p);
    default:
        return cb::launch(attn_decode<HDP, 8>, (unsigned)blocks, kT, s, p);
    }
}

/* The decode grid (and the combine when the keys are split): the split count fills about
 * two blocks per multiprocessor, keeps at least kMinSplitKeys keys a split, and fits the
 * partial results in the workspace. */
cudaError_t run_decode(cudaStream_t s, Plan p, int hdp, float *ws, size_t ws_floats, int sms)
{
    const cb_attn_args &a = p.a;
    p.gh = (int)smin((size_t)pow2_at_least(p.group), 8);
    p.hgroups = (p.group + p.gh - 1) / p.gh;
    const size_t base = a.rows * (size_t)a.shape.kv_heads * (size_t)p.hgroups;
    int32_t keys = a.max_keys > 0 ? a.max_keys : 1;
    if (a.window > 0 && a.window < keys)
        keys = a.window;
    const size_t target = 2 * (size_t)(sms > 0 ? sms : 132);
    size_t splits = base < target ? (target + base - 1) / base : 1;
    splits = smin(splits, (size_t)((keys + kMinSplitKeys - 1) / kMinSplitKeys));
    splits = smin(splits, (size_t)kMaxSplits);
    const size_t per = a.rows * (size_t)a.heads * ((size_t)a.shape.head_dim + 2);
    if (splits > 1 && (ws == NULL || per * splits > ws_floats))
        splits = ws ? ws_floats / per : 1;
    if (splits < 1)
        splits = 1;
    p.splits = (int)splits;
    p.kps = (int32_t)(((size_t)keys + splits - 1) / splits);
    p.ws_o = ws;
    p.ws_ml = ws ? ws + a.rows * (size_t)a.heads * splits * (size_t)a.shape.head_dim : NULL;
    const size_t blocks = base * splits;
    cudaError_t e = hdp == 64    ? launch_decode<64>(s, p, blocks)
                    : hdp == 128 ? launch_decode<128>(s, p, blocks)
                                 : launch_decode<256>(s, p, blocks);
    if (e != cudaSuccess || splits == 1)
        return e;
    return cb::launch(attn_combine, (unsigned)(a.rows * (size_t)a.heads), kT, s, p);
}

cudaError_t run_prefill(cudaStream_t s, Plan p, int hdp)
{
    const cb_attn_args &a = p.a;
    const int R = hdp <= 128 ? 32 : 16;
    p.gh = (int)smin((size_t)p.group, (size_t)R);
    p.hgroups = (p.group + p.gh - 1) / p.gh;
    const size_t qt = (size_t)(R / p.gh);
    const size_t tiles = a.rows / qt + a.nchunks + 1; /* >= the sum of ceil(n / qt) */
    const size_t blocks = tiles * (size_t)a.shape.kv_heads * (size_t)p.hgroups;
    if (hdp == 64)
        return cb::launch(attn_prefill<64>, (unsigned)blocks, kT, s, p);
    if (hdp == 128)
        return cb::launch(attn_prefill<128>, (unsigned)blocks, kT, s, p);
    return cb::launch(attn_prefill<256>, (unsigned)blocks, kT, s, p);
}

} /* namespace */

extern "C" cudaError_t cb_launch_attention(cudaStream_t s, const cb_attn_args *a, float *ws,
                                           size_t ws_floats, int sms)
{
    if (a->rows == 0 || a->nchunks == 0 || a->heads == 0)
        return cudaSuccess;
    Plan p = {};
    p.a = *a;
    p.group = a->heads / a->shape.kv_heads;
    const int hd = a->shape.head_dim, hdp = hd <= 64 ? 64 : hd <= 128 ? 128 : 256;
    const bool decode = a->rows == a->nchunks, prefill = a->nchunks == 1 && a->rows > 1;
    p.mixed = !decode && !prefill;
    p.vec = hd % 4 == 0 && cb::aligned16(a->pool);
    cudaError_t e = cudaSuccess;
    if (!decode)
        e = run_prefill(s, p, hdp);
    if (e == cudaSuccess && !prefill)
        e = run_decode(s, p, hdp, ws, ws_floats, sms);
    return e;
}
