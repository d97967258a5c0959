/* hb_simd_avx512.c: the AVX-512 version of hb_simd.h: the AVX2 loops, with the GEMV at
 * M >= 3 in AVX-512F (a target attribute, chosen at run time with __builtin_cpu_supports,
 * so the build needs no -mavx512f), for decode batches and prefill alike, and attention's
 * scores and accum over bf16 KV for GQA's groups; each gives the AVX2 loops' bits.
 */
#include "backend/host/hb_simd.h"

#include <pthread.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/host/hb_simd_x86.h"

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* The AVX2 loops, which this version keeps where AVX-512 gains nothing. */
static const hb_simd *avx2_loops;

/* ---- the GEMV at M >= 3 ---------------------------------------------------------------
 * The AVX2 GEMV (hb_simd.c) sums each output in 8 lanes over k in steps of 8; at M = 8 one
 * core ran it at about 32 GFMA/s, half of what a packed GEMM reached, so decode batches
 * were bound by the FMAs, not by W's bytes (bench_host). Here a 512-bit register holds the
 * same 8-lane step of two rows of W (lanes 0-7 one row, 8-15 the other), and x's step is
 * broadcast to both halves: each lane runs the AVX2 kernel's chain of FMAs, and each half
 * is finished as the AVX2 kernel finishes it. So the outputs keep their bits, and every
 * instruction does twice the FMAs.
 *
 * Decode batches (M < HB_GEMV_WIDE_M): a call's rows of W are taken 4 at a time, from its
 * 4 quarters (rows i, q + i, 2q + i, 3q + i of 4q), as the AVX2 kernel does at M <= 2: 4
 * long streams. Up to 12 rows of x per pass (2 x 12 accumulators); more take further
 * passes, as even as can be, over the same rows of W, from the caches. M <= 2, bound by W's
 * bytes, and the rows beyond the 4 quarters go to the AVX2 kernel.
 *
 * Prefill (M >= HB_GEMV_WIDE_M): 8 adjacent rows of W (4 registers, from L1 after the first
 * pass) against 6 rows of x at a time, 24 accumulators: 24 FMAs to 14 loads, where the
 * decode kernel does 16 to 12. Its 8 sums of a row of x are finished together (finish8), in
 * the tree the AVX2 kernel uses for each, and stored as one vector. With it the GEMV kept
 * up with the packed GEMM (12 x 32 micro-tile, BLIS's loops) that linear ran beyond 32 rows
 * until 2026-12-03, within 1-5% at M = 1024 and ahead at M = 128 (bench_host), so linear now
 * takes every M here, and a row's bits never depend on the other rows of its step. */

/* Steps k..k+7 of rows a and b of W as one register (a in lanes 0-7, b in 8-15). */
AVX512 static inline __m512 pair_f32(const float *a, const float *b)
{
    __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a)));
    return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

AVX512 static inline __m512 pair_bf16(const uint16_t *a, const uint16_t *b)
{
    __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
        _mm_loadu_si128((const __m128i *)(const void *)b), 1);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows of x from which a call takes the W rows 8 adjacent ones at a time, from L1, rather
 * than from 4 streams. */
#define HB_GEMV_WIDE_M 24

/* x's 8 floats at p in both halves. */
AVX512 static inline __m512 both_halves(const float *p)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

AVX512 static inline __m256 low_half(__m512 v) { return _mm512_castps512_ps256(v); }

AVX512 static inline __m256 high_half(__m512 v)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* The 8 sums of 4 registers of pairs (rows 2j and 2j + 1 in r[j]), each half summed in the
 * tree hsum uses: h_t = a_t + a_(t+4), then (h_0 + h_2) + (h_1 + h_3), 8 at a time. */
AVX512 static inline __m256 finish8(__m512 r0, __m512 r1, __m512 r2, __m512 r3)
{
    /* 128-bit group t of h: h_0..h_3 of row t (h) and of row 4 + t (g) */
    const __m512 h = _mm512_add_ps(_mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 g = _mm512_add_ps(_mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(3, 1, 3, 1)));
    /* group t: h_0 + h_2, h_1 + h_3 of row t, then of row 4 + t */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(h, g, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(h, g, _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 0 and 2 of group t: the sums of rows t and 4 + t */
    const __m512 s = _mm512_add_ps(e, _mm512_permute_ps(e, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(at, s));
}

/* Rows of x a pass of the decode kernel takes at most: 2 x 12 accumulators, 2 registers of
 * W and x's step fill 27 of the 32 registers. */
#define HB_GEMV_PASS_M 12

/* y(MM, ldy) at columns 0, q, 2q, 3q = x(MM, K) . rows 0, q, 2q, 3q of W, MM <= 12 */
#define GEMV512_KERNELS(SUF, WT, PAIR, FINISH, WIDEN)                                          \
    AVX512 static inline __attribute__((always_inline)) void gemv_4xm_##SUF(                  \
        float *y, size_t ldy, const float *x, const WT *W, size_t K, size_t q, const int MM)  \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7, ahead = q == 1 ? 4 * K : 2 * K;                     \
        const WT *w0 = W, *w1 = W + q * K, *w2 = W + 2 * q * K, *w3 = W + 3 * q * K;          \
        __m512 a[HB_GEMV_PASS_M], b[HB_GEMV_PASS_M]; /* a[m]: rows 0 and q against x row m;   \
                                                      * b[m]: rows 2q and 3q */               \
        UNROLL12 for (int m = 0; m < MM; m++)                                                  \
            a[m] = b[m] = _mm512_setzero_ps();                                                 \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            _mm_prefetch((const char *)(w0 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w1 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w2 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w3 + k + ahead), _MM_HINT_T0);                        \
            const __m512 v01 = PAIR(w0 + k, w1 + k), v23 = PAIR(w2 + k, w3 + k);              \
            UNROLL12 for (int m = 0; m < MM; m++) {                                            \
                const __m512 u = both_halves(x + (size_t)m * K + k);                           \
                a[m] = _mm512_fmadd_ps(u, v01, a[m]);                                          \
                b[m] = _mm512_fmadd_ps(u, v23, b[m]);                                          \
            }                                                                                  \
        }                                                                                      \
        UNROLL12 for (int m = 0; m < MM; m++) {                                                \
            const float *xm = x + (size_t)m * K;                                               \
            float *ym = y + (size_t)m * ldy;                                                   \
            ym[0] = FINISH(low_half(a[m]), xm, w0, k8, K);                                     \
            ym[q] = FINISH(high_half(a[m]), xm, w1, k8, K);                                    \
            ym[2 * q] = FINISH(low_half(b[m]), xm, w2, k8, K);                                 \
            ym[3 * q] = FINISH(high_half(b[m]), xm, w3, k8, K);                                \
        }                                                                                      \
    }                                                                                          \
    AVX512 static void gemv_4xM_##SUF(float *y, size_t ldy, const float *x, size_t M,         \
                                      const WT *W, size_t K, size_t q)                         \
    {                                                                                          \
        switch (M) {                                                                           \
        case 3: gemv_4xm_##SUF(y, ldy, x, W, K, q, 3); break;                                  \
        case 4: gemv_4xm_##SUF(y, ldy, x, W, K, q, 4); break;                                  \
        case 5: gemv_4xm_##SUF(y, ldy, x, W, K, q, 5); break;                                  \
        case 6: gemv_4xm_##SUF(y, ldy, x, W, K, q, 6); break;                                  \
        case 7: gemv_4xm_##SUF(y, ldy, x, W, K, q, 7); break;                                  \
        case 8: gemv_4xm_##SUF(y, ldy, x, W, K, q, 8); break;                                  \
        case 9: gemv_4xm_##SUF(y, ldy, x, W, K, q, 9); break;                                  \
        case 10: gemv_4xm_##SUF(y, ldy, x, W, K, q, 10); break;                                \
        case 11: gemv_4xm_##SUF(y, ldy, x, W, K, q, 11); break;                                \
        default: gemv_4xm_##SUF(y, ldy, x, W, K, q, 12); break;                                \
        }                                                                                      \
    }                                                                                          \
    /* passes of at most HB_GEMV_PASS_M rows of x, as even as can be (M = 13: 7 and 6), so   \
     * that no pass is a short one (M = 9 ran 8 rows, then 1 through the AVX2 kernel) */     \
    AVX512 static void gemv_narrow_##SUF(float *y, size_t ldy, const float *x, size_t M,      \
                                         const WT *W, size_t K, size_t nrows)                 \
    {                                                                                          \
        const size_t q = nrows / 4;                                                            \
        const size_t passes = (M + HB_GEMV_PASS_M - 1) / HB_GEMV_PASS_M;                      \
        for (size_t p = 0, m0 = 0, mm = 0; p < passes; p++, m0 += mm) {                       \
            mm = (M - m0) / (passes - p) + ((M - m0) % (passes - p) != 0);                     \
            float *ym = y + m0 * ldy;                                                          \
            const float *xm = x + m0 * K;                                                      \
            if (mm < 3 || q == 0) {                                                            \
                avx2_loops->gemv_##SUF(ym, ldy, xm, mm, W, K, nrows);                          \
                continue;                                                                      \
            }                                                                                  \
            for (size_t i = 0; i < q; i++)                                                     \
                gemv_4xM_##SUF(ym + i, ldy, xm, mm, W + i * K, K, q);                          \
            if (4 * q < nrows)                                                                 \
                avx2_loops->gemv_##SUF(ym + 4 * q, ldy, xm, mm, W + 4 * q * K, K,              \
                                       nrows - 4 * q);                                         \
        }                                                                                      \
    }                                                                                          \
    /* y(MM, ldy)[:, 0..8) = x(MM, K) . 8 adjacent rows of W, MM <= 6: 4 registers of W    \
     * against each row of x, W from L1 */                                                     \
    AVX512 static inline __attribute__((always_inline)) void gemv_8xm_##SUF(                  \
        float *y, size_t ldy, const float *x, const WT *W, size_t K, const int MM)            \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7;                                                     \
        __m512 a[6][4]; /* a[m][j]: rows 2j and 2j + 1 of W against x row m */                \
        UNROLL8 for (int m = 0; m < MM; m++)                                                   \
            UNROLL8 for (int j = 0; j < 4; j++)                                                \
                a[m][j] = _mm512_setzero_ps();                                                 \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            __m512 v[4];                                                                       \
            UNROLL8 for (int j = 0; j < 4; j++)                                                \
                v[j] = PAIR(W + 2 * (size_t)j * K + k, W + (2 * (size_t)j + 1) * K + k);        \
            UNROLL8 for (int m = 0; m < MM; m++) {                                             \
                const __m512 u = both_halves(x + (size_t)m * K + k);                           \
                UNROLL8 for (int j = 0; j < 4; j++)                                            \
                    a[m][j] = _mm512_fmadd_ps(u, v[j], a[m][j]);                               \
            }                                                                                  \
        }                                                                                      \
        UNROLL8 for (int m = 0; m < MM; m++) {                                                 \
            float *ym = y + (size_t)m * ldy;                                                   \
            _mm256_storeu_ps(ym, finish8(a[m][0], a[m][1], a[m][2], a[m][3]));                 \
            for (size_t k = k8; k < K; k++) /* the tail, as FINISH adds it */                  \
                for (int r = 0; r < 8; r++)                                                    \
                    ym[r] += x[(size_t)m * K + k] * WIDEN(W[(size_t)r * K + k]);              \
        }                                                                                      \
    }                                                                                          \
    AVX512 static void gemv_8xM_##SUF(float *y, size_t ldy, const float *x, size_t M,         \
                                      const WT *W, size_t K)                                   \
    {                                                                                          \
        switch (M) {                                                                           \
        case 1: gemv_8xm_##SUF(y, ldy, x, W, K, 1); break;                                     \
        case 2: gemv_8xm_##SUF(y, ldy, x, W, K, 2); break;                                     \
        case 3: gemv_8xm_##SUF(y, ldy, x, W, K, 3); break;                                     \
        case 4: gemv_8xm_##SUF(y, ldy, x, W, K, 4); break;                                     \
        case 5: gemv_8xm_##SUF(y, ldy, x, W, K, 5); break;                                     \
        default: gemv_8xm_##SUF(y, ldy, x, W, K, 6); break;                                    \
        }                                                                                      \
    }                                                                                          \
    /* prefill-sized M: 8 adjacent rows of W (from L1) against all of x, 6 rows at a time */  \
    AVX512 static void gemv_wide_##SUF(float *y, size_t ldy, const float *x, size_t M,        \
                                       const WT *W, size_t K, size_t nrows)                   \
    {                                                                                          \
        size_t n = 0;                                                                          \
        for (; n + 8 <= nrows; n += 8)                                                         \
            for (size_t m = 0; m < M; m += 6)                                                  \
                gemv_8xM_##SUF(y + m * ldy + n, ldy, x + m * K, M - m < 6 ? M - m : 6,         \
                               W + n * K, K);                                                  \
        if (n < nrows)                                                                         \
            gemv_narrow_##SUF(y + n, ldy, x, M, W + n * K, K, nrows - n);                      \
    }                                                                                          \
    AVX512 static void gemv_##SUF##_avx512(float *y, size_t ldy, const float *x, size_t M,    \
                                           const WT *W, size_t K, size_t nrows)               \
    {                                                                                          \
        if (M >= HB_GEMV_WIDE_M)                                                               \
            gemv_wide_##SUF(y, ldy, x, M, W, K, nrows);                                        \
        else                                                                                   \
            gemv_narrow_##SUF(y, ldy, x, M, W, K, nrows);                                      \
    }

#define WIDEN_F32(v) (v)
#define WIDEN_BF16(v) pe_k_from_bf16(v)
GEMV512_KERNELS(f32, float, pair_f32, finish_f32, WIDEN_F32)
GEMV512_KERNELS(bf16, uint16_t, pair_bf16, finish_bf16, WIDEN_BF16)

/* ---- attention: scores and accum -----------------------------------------------------
 * Scores: a register holds the 8-lane step of two keys (keys 2j and 2j + 1 of 8), q's step
 * broadcast to both halves; each lane runs the AVX2 scores' chain of FMAs over d, and
 * finish8 sums each half in hsum's tree: the AVX2 bits, 8 keys a pass, half the FMA and
 * reduction instructions. Accum: 16 columns a register, each lane the AVX2 chain over the
 * keys. For bf16 KV and GQA's groups (G >= 2): bench_host --attention, 4 KV heads of 3 at
 * position 1000, 16-18% faster for 1 and 8 sequences. fp32 KV (bound by its bytes) was
 * 5-8% slower for 8 sequences, and a lone head (MHA, G = 1) 17% slower for 8 sequences at
 * position 10 and no faster at 1000: both keep the AVX2 loops, as do head dims that are
 * not a multiple of 8 (scores) or 16 (accum), and the last nk % 8 keys. */

/* 16 bf16 values widened to fp32 (a shift into each lane's upper half). */
AVX512 static inline __m512 load16_bf16(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* A pass of NH heads, scores and accum, as functions of their own (one per head count). */
#define ATTN512_PASS(SUF, KT, NH)                                                              \
    AVX512 static void scores##NH##_##SUF(float *s, size_t ls, const float *q, size_t lq,     \
                                          const KT *K, int n8, size_t h, float scale)          \
    {                                                                                          \
        pass_##SUF(s, ls, q, lq, K, n8, h, scale, NH);                                         \
    }                                                                                          \
    AVX512 static void accum##NH##_##SUF(float *acc, size_t la, const float *p, size_t lp,    \
                                         const KT *V, int nk, size_t h)                        \
    {                                                                                          \
        accum_pass_##SUF(acc, la, p, lp, V, nk, h, NH);                                        \
    }

#define ATTN512_KERNELS(SUF, KT, PAIR, LOAD16)                                                 \
    /* s(NH, ls)[t..t+7] = scale (q(NH, lq) . keys t..t+7 of K(nk, h)), h a multiple of 8 */ \
    AVX512 static inline __attribute__((always_inline)) void scores8_##SUF(                   \
        float *s, size_t ls, const float *q, size_t lq, const KT *K, int t, size_t h,         \
        float scale, const int NH)                                                             \
    {                                                                                          \
        __m512 a[4][4];                                                                        \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL4 for (int j = 0; j < 4; j++)                                                \
                a[i][j] = _mm512_setzero_ps();                                                 \
        const KT *k0 = K + (size_t)t * h;                                                      \
        for (size_t d = 0; d < h; d += 8) {                                                    \
            __m512 kv[4];                                                                      \
            UNROLL4 for (int j = 0; j < 4; j++)                                                \
                kv[j] = PAIR(k0 + (size_t)(2 * j) * h + d, k0 + (size_t)(2 * j + 1) * h + d);  \
            UNROLL4 for (int i = 0; i < NH; i++) {                                             \
                const __m512 u = both_halves(q + (size_t)i * lq + d);                          \
                UNROLL4 for (int j = 0; j < 4; j++)                                            \
                    a[i][j] = _mm512_fmadd_ps(u, kv[j], a[i][j]);                              \
            }                                                                                  \
        }                                                                                      \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            _mm256_storeu_ps(s + (size_t)i * ls + (size_t)t,                                   \
                             _mm256_mul_ps(finish8(a[i][0], a[i][1], a[i][2], a[i][3]),        \
                                           _mm256_set1_ps(scale)));                            \
    }                                                                                          \
                                                                                               \
    /* acc(NH, la)[d..d+16 NW) += sum over t < nk, in order, of p(i, t) V(t)[d..] */          \
    AVX512 static inline __attribute__((always_inline)) void accum16_##SUF(                   \
        float *acc, size_t la, const float *p, size_t lp, const KT *V, int nk, size_t h,      \
        size_t d, const int NH, const int NW)                                                  \
    {                                                                                          \
        __m512 a[4][4];                                                                        \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL4 for (int w = 0; w < NW; w++)                                               \
                a[i][w] = _mm512_loadu_ps(acc + (size_t)i * la + d + 16 * (size_t)w);         \
        for (int t = 0; t < nk; t++) {                                                         \
            const KT *v = V + (size_t)t * h + d;                                               \
            __m512 pv[4];                                                                      \
            UNROLL4 for (int i = 0; i < NH; i++)                                               \
                pv[i] = _mm512_set1_ps(p[(size_t)i * lp + (size_t)t]);                         \
            UNROLL4 for (int w = 0; w < NW; w++) {                                             \
                const __m512 vw = LOAD16(v + 16 * w);                                          \
                UNROLL4 for (int i = 0; i < NH; i++)                                           \
                    a[i][w] = _mm512_fmadd_ps(pv[i], vw, a[i][w]);                             \
            }                                                                                  \
        }                                                                                      \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL4 for (int w = 0; w < NW; w++)                                               \
                _mm512_storeu_ps(acc + (size_t)i * la + d + 16 * (size_t)w, a[i][w]);         \
    }                                                                                          \
                                                                                               \
    /* a pass of NH heads (1-4): every 8 keys of the first n8; every column */                \
    AVX512 static inline __attribute__((always_inline)) void pass_##SUF(                      \
        float *s, size_t ls, const float *q, size_t lq, const KT *K, int n8, size_t h,        \
        float scale, const int NH)                                                             \
    {                                                                                          \
        for (int t = 0; t < n8; t += 8)                                                        \
            scores8_##SUF(s, ls, q, lq, K, t, h, scale, NH);                                   \
    }                                                                                          \
    AVX512 static inline __attribute__((always_inline)) void accum_pass_##SUF(                \
        float *acc, size_t la, const float *p, size_t lp, const KT *V, int nk, size_t h,      \
        const int NH)                                                                          \
    {                                                                                          \
        size_t d = 0;                                                                          \
        for (; d + 64 <= h; d += 64)                                                           \
            accum16_##SUF(acc, la, p, lp, V, nk, h, d, NH, 4);                                 \
        for (; d < h; d += 16)                                                                 \
            accum16_##SUF(acc, la, p, lp, V, nk, h, d, NH, 1);                                 \
    }                                                                                          \
    ATTN512_PASS(SUF, KT, 1)                                                                   \
    ATTN512_PASS(SUF, KT, 2)                                                                   \
    ATTN512_PASS(SUF, KT, 3)                                                                   \
    ATTN512_PASS(SUF, KT, 4)

ATTN512_KERNELS(bf16, uint16_t, pair_bf16, load16_bf16)

/* The entry points: G query heads 4 at a time; what the passes leave, to the AVX2 loops. */
#define ATTN512_ENTRY(SCORES, ACCUM, SUF, KT)                                                      \
    AVX512 static void scores_##SUF##_avx512(float *s, size_t ls, const float *q, size_t lq,  \
                                             int G, const KT *K, int nk, int hd, float scale)  \
    {                                                                                          \
        static void (*const pass[4])(float *, size_t, const float *, size_t, const KT *, int, \
                                     size_t, float) = {scores1_##SUF, scores2_##SUF,           \
                                                       scores3_##SUF, scores4_##SUF};          \
        const int n8 = hd % 8 || G == 1 ? 0 : nk / 8 * 8;                                      \
        if (n8)                                                                                \
            for (int g = 0; g < G; g += 4)                                                     \
                pass[(G - g < 4 ? G - g : 4) - 1](s + (size_t)g * ls, ls, q + (size_t)g * lq, \
                                                  lq, K, n8, (size_t)hd, scale);              \
        if (n8 < nk)                                                                           \
            avx2_loops->SCORES(s + n8, ls, q, lq, G, K + (size_t)n8 * (size_t)hd, nk - n8, hd,   \
                             scale);                                                           \
    }                                                                                          \
    AVX512 static void accum_##SUF##_avx512(float *acc, size_t la, const float *p, size_t lp, \
                                            int G, const KT *V, int nk, int hd)                \
    {                                                                                          \
        static void (*const pass[4])(float *, size_t, const float *, size_t, const KT *, int, \
                                     size_t) = {accum1_##SUF, accum2_##SUF, accum3_##SUF,      \
                                                accum4_##SUF};                                 \
        if (hd % 16 || G == 1) {                                                               \
            avx2_loops->ACCUM(acc, la, p, lp, G, V, nk, hd);                      \
            return;                                                                            \
        }                                                                                      \
        for (int g = 0; g < G; g += 4)                                                         \
            pass[(G - g < 4 ? G - g : 4) - 1](acc + (size_t)g * la, la, p + (size_t)g * lp,   \
                                              lp, V, nk, (size_t)hd);                          \
    }

ATTN512_ENTRY(scores_bf16, accum_bf16, bf16, uint16_t)

static hb_simd avx512;
static const hb_simd *found;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void find(void)
{
    const hb_simd *avx2 = hb_simd_avx2();
    __builtin_cpu_init();
    if (!avx2 || !__builtin_cpu_supports("avx512f"))
        return;
    avx2_loops = avx2;
    avx512 = *avx2;
    avx512.name = "avx512";
    avx512.gemv_f32 = gemv_f32_avx512;
    avx512.gemv_bf16 = gemv_bf16_avx512;
    avx512.scores_bf16 = scores_bf16_avx512;
    avx512.accum_bf16 = accum_bf16_avx512;
    /* every M, as AVX2; a bf16 W is widened in registers at every M: the prefill kernel
     * keeps within 3% of its fp32 figure (bench_host, M = 1024) */
    avx512.gemv_widen_m = SIZE_MAX;
    found = &avx512;
}

const hb_simd *hb_simd_avx512(void)
{
    pthread_once(&once, find);
    return found;
}
#else
const hb_simd *hb_simd_avx512(void) { return NULL; }
#endif
