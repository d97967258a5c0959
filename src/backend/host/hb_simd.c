/* hb_simd.c: the vectorized inner loops of hb_simd.h: a portable C version and an
 * AVX2/FMA version (compiled with a target attribute, chosen at run time with
 * __builtin_cpu_supports, so the build needs no -mavx2 and runs on any x86-64). */
#include "backend/host/hb_simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/sample.h"

/* ---- portable ------------------------------------------------------------------------ */

/* The portable loops, G heads one after the other; KT float or uint16_t (bf16). */
#define SCORES_C(NAME, KT, ELEM)                                                               \
    static void NAME(float *s, size_t ls, const float *q, size_t lq, int G, const KT *K,      \
                     int nk, int hd, float scale)                                              \
    {                                                                                          \
        for (int g = 0; g < G; g++)                                                            \
            for (int t = 0; t < nk; t++) {                                                     \
                const KT *k = K + (size_t)t * (size_t)hd;                                      \
                const float *qg = q + (size_t)g * lq;                                          \
                float dot = 0.0f;                                                              \
                for (int d = 0; d < hd; d++)                                                   \
                    dot += qg[d] * ELEM(k[d]);                                                 \
                s[(size_t)g * ls + (size_t)t] = dot * scale;                                   \
            }                                                                                  \
    }

#define ACCUM_C(NAME, VT, ELEM)                                                                \
    static void NAME(float *acc, size_t la, const float *p, size_t lp, int G, const VT *V,    \
                     int nk, int hd)                                                           \
    {                                                                                          \
        for (int g = 0; g < G; g++)                                                            \
            for (int t = 0; t < nk; t++) {                                                     \
                const VT *v = V + (size_t)t * (size_t)hd;                                      \
                const float w = p[(size_t)g * lp + (size_t)t];                                 \
                float *ag = acc + (size_t)g * la;                                              \
                for (int d = 0; d < hd; d++)                                                   \
                    ag[d] += w * ELEM(v[d]);                                                   \
            }                                                                                  \
    }

#define AS_FLOAT(x) (x)
SCORES_C(scores_c, float, AS_FLOAT)
SCORES_C(scores_bf16_c, uint16_t, pe_k_from_bf16)
ACCUM_C(accum_c, float, AS_FLOAT)
ACCUM_C(accum_bf16_c, uint16_t, pe_k_from_bf16)

static float exp_sum_c(float *p, int n, float m)
{
    float sum = 0.0f;
    for (int t = 0; t < n; t++) {
        p[t] = expf(p[t] - m);
        sum += p[t];
    }
    return sum;
}

static void rescale_c(float *acc, float c, int hd)
{
    for (int d = 0; d < hd; d++)
        acc[d] *= c;
}

static void widen_c(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = pe_k_from_bf16(src[i]);
}

static void narrow_c(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = pe_k_to_bf16(src[i]);
}

static void gemv_f32_c(float *y, size_t ldy, const float *x, size_t M, const float *W, size_t K,
                       size_t nrows)
{
    for (size_t n = 0; n < nrows; n++)
        for (size_t m = 0; m < M; m++) {
            const float *w = W + n * K, *xm = x + m * K;
            float s = 0.0f;
            for (size_t k = 0; k < K; k++)
                s += xm[k] * w[k];
            y[m * ldy + n] = s;
        }
}

static void gemv_bf16_c(float *y, size_t ldy, const float *x, size_t M, const uint16_t *W,
                        size_t K, size_t nrows)
{
    for (size_t n = 0; n < nrows; n++)
        for (size_t m = 0; m < M; m++) {
            const uint16_t *w = W + n * K;
            const float *xm = x + m * K;
            float s = 0.0f;
            for (size_t k = 0; k < K; k++)
                s += xm[k] * pe_k_from_bf16(w[k]);
            y[m * ldy + n] = s;
        }
}

static void gelu_c(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_gelu(x[i]);
}

static void silu_mul_c(float *out, const float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = pe_k_silu_mul(g[i], u[i]);
}

static int32_t argmax_c(const float *x, int32_t n) { return pe_k_argmax_row(x, n); }

static const hb_simd portable = {
    .name = "portable",
    .scores = scores_c,
    .scores_bf16 = scores_bf16_c,
    .exp_sum = exp_sum_c,
    .rescale = rescale_c,
    .accum = accum_c,
    .accum_bf16 = accum_bf16_c,
    .widen = widen_c,
    .narrow = narrow_c,
    .gelu = gelu_c,
    .silu_mul = silu_mul_c,
    .argmax = argmax_c,
    .gemv_f32 = gemv_f32_c,
    .gemv_bf16 = gemv_bf16_c,
    .gemv_max_m = {HB_GEMV_MAX_M_PORTABLE, HB_GEMV_MAX_M_BF16_PORTABLE},
    .gemv_widen_m = SIZE_MAX, /* the sgemm path takes M > 16 */
};

const hb_simd *hb_simd_portable(void) { return &portable; }

/* ---- AVX2 + FMA -------------------------------------------------------------------- */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/host/hb_simd_x86.h"

/* A pass of NH heads and NK keys at a time over all the keys, as a function of its own. */
#define SCORES_PASS(SUF, KT, NH, NK)                                                           \
    AVX2 static void scores##NH##_##SUF(float *s, size_t ls, const float *q, size_t lq,       \
                                        const KT *K, int nk, size_t h, float scale)            \
    {                                                                                          \
        scores_heads_##SUF(s, ls, q, lq, K, nk, h, scale, NH, NK);                             \
    }

/* Scores of NH query heads against keys t..t+NK-1: NH x NK accumulators, each key loaded
 * once for the NH heads; KT float or uint16_t (bf16, widened in registers: the same FMAs as
 * on the widened keys). Each score is one FMA chain over d, finished as finish_f32 does,
 * whatever NH and NK. */
#define SCORES_KERNEL(SUF, KT, LOAD_K, FINISH)                                                 \
    AVX2 static inline __attribute__((always_inline)) void scores_tile_##SUF(                 \
        float *s, size_t ls, const float *q, size_t lq, const KT *K, int t, size_t h,         \
        float scale, const int NH, const int NK)                                               \
    {                                                                                          \
        const size_t h8 = h & ~(size_t)7;                                                      \
        __m256 a[4][4];                                                                        \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL4 for (int k = 0; k < NK; k++)                                               \
                a[i][k] = _mm256_setzero_ps();                                                 \
        for (size_t d = 0; d < h8; d += 8) {                                                   \
            __m256 qv[4];                                                                      \
            UNROLL4 for (int i = 0; i < NH; i++)                                               \
                qv[i] = load_f32(q + (size_t)i * lq + d);                                      \
            UNROLL4 for (int k = 0; k < NK; k++) {                                             \
                const __m256 kv = LOAD_K(K + (size_t)(t + k) * h + d);                         \
                UNROLL4 for (int i = 0; i < NH; i++)                                           \
                    a[i][k] = _mm256_fmadd_ps(qv[i], kv, a[i][k]);                             \
            }                                                                                  \
        }                                                                                      \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL4 for (int k = 0; k < NK; k++)                                               \
                s[(size_t)i * ls + (size_t)(t + k)] =                                          \
                    FINISH(a[i][k], q + (size_t)i * lq, K + (size_t)(t + k) * h, h8, h) *      \
                    scale;                                                                     \
    }                                                                                          \
                                                                                               \
    AVX2 static inline __attribute__((always_inline)) void scores_heads_##SUF(                \
        float *s, size_t ls, const float *q, size_t lq, const KT *K, int nk, size_t h,        \
        float scale, const int NH, const int NK)                                               \
    {                                                                                          \
        int t = 0;                                                                             \
        for (; t + NK <= nk; t += NK)                                                          \
            scores_tile_##SUF(s, ls, q, lq, K, t, h, scale, NH, NK);                           \
        for (; t < nk; t++)                                                                    \
            scores_tile_##SUF(s, ls, q, lq, K, t, h, scale, NH, 1);                            \
    }                                                                                          \
                                                                                               \
    /* up to 4 heads a pass, with 4 keys (1 to 3 heads) or 2 (4): 4 to 12 chains; one        \
     * function per pass shape, each with its own short prologue, and a lone head (MHA)      \
     * inline: the calls are per block of keys, 16 by default */                              \
    SCORES_PASS(SUF, KT, 1, 4)                                                                 \
    SCORES_PASS(SUF, KT, 2, 4)                                                                 \
    SCORES_PASS(SUF, KT, 3, 4)                                                                 \
    SCORES_PASS(SUF, KT, 4, 2)                                                                 \
                                                                                               \
    AVX2 static void scores_##SUF(float *s, size_t ls, const float *q, size_t lq, int G,      \
                                  const KT *K, int nk, int hd, float scale)                    \
    {                                                                                          \
        static void (*const pass[4])(float *, size_t, const float *, size_t, const KT *, int, \
                                     size_t, float) = {scores1_##SUF, scores2_##SUF,           \
                                                       scores3_##SUF, scores4_##SUF};          \
        if (G == 1) {                                                                          \
            scores_heads_##SUF(s, ls, q, lq, K, nk, (size_t)hd, scale, 1, 4);                 \
            return;                                                                            \
        }                                                                                      \
        for (int g = 0; g < G; g += 4)                                                         \
            pass[(G - g < 4 ? G - g : 4) - 1](s + (size_t)g * ls, ls, q + (size_t)g * lq, lq, \
                                              K, nk, (size_t)hd, scale);                      \
    }

SCORES_KERNEL(avx2, float, load_f32, finish_f32)
SCORES_KERNEL(bf16_avx2, uint16_t, load_bf16, finish_bf16)

/* exp(x), 8 lanes (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial in
 * r, times 2^n). Arguments below -87.3 give about 1e-38 instead of a denormal or 0; NaN
 * stays NaN (min/max return their second operand for a NaN). */
AVX2 static inline __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
    x = _mm256_max_ps(_mm256_set1_ps(-87.3365478515625f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* pe_k_gelu's operations in its order, 8 lanes: x / (1 + e^(-2 k (x + 0.044715 x x x))) */
AVX2 static inline __m256 gelu8(__m256 x)
{
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x);
    __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, t));
    __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), inner));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* silu(g) * u = g / (1 + e^-g) * u, 8 lanes */
AVX2 static inline __m256 silu_mul8(__m256 g, __m256 u)
{
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* Every element through the vector path (a short tail through a padded lane buffer), so an
 * element's bits do not depend on where a split of the work put it. */
AVX2 static void gelu_avx2(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float buf[8] = {0};
        for (size_t k = 0; k < n - i; k++)
            buf[k] = x[i + k];
        _mm256_storeu_ps(buf, gelu8(_mm256_loadu_ps(buf)));
        for (size_t k = 0; k < n - i; k++)
            x[i + k] = buf[k];
    }
}

AVX2 static void silu_mul_avx2(float *out, const float *g, const float *u, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float bg[8] = {0}, bu[8] = {0};
        for (size_t k = 0; k < n - i; k++)
            bg[k] = g[i + k], bu[k] = u[i + k];
        _mm256_storeu_ps(bg, silu_mul8(_mm256_loadu_ps(bg), _mm256_loadu_ps(bu)));
        for (size_t k = 0; k < n - i; k++)
            out[i + k] = bg[k];
    }
}

/* pe_k_argmax_row in two passes: the largest value that is not a NaN (max_ps keeps its
 * second operand, the running maximum, where x is a NaN), then the first index that equals
 * it (+0 and -0 equal, as for the row's > and ==). */
AVX2 static int32_t argmax_avx2(const float *x, int32_t n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    __m256 any = _mm256_setzero_ps(); /* lanes that met a value that is not a NaN */
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_max_ps(v, m);
        any = _mm256_or_ps(any, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    int found = _mm256_movemask_ps(any) != 0;
    for (int32_t k = i; k < n; k++)
        if (x[k] == x[k]) {
            found = 1;
            mx = x[k] > mx ? x[k] : mx;
        }
    if (!found)
        return 0;
    const __m256 want = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), want, _CMP_EQ_OQ));
        if (hit)
            return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0; /* not reached: mx is one of the values */
}

AVX2 static float exp_sum_avx2(float *p, int n, float m)
{
    const __m256 mv = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + t), mv));
        _mm256_storeu_ps(p + t, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (t < n) { /* the tail through a padded lane buffer: the same polynomial */
        float buf[8];
        int r = n - t;
        for (int i = 0; i < 8; i++)
            buf[i] = i < r ? p[t + i] : m - 1000.0f;
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(buf), mv));
        _mm256_storeu_ps(buf, e);
        for (int i = 0; i < r; i++)
            p[t + i] = buf[i];
        acc = _mm256_add_ps(acc, _mm256_blendv_ps(_mm256_setzero_ps(), e,
                                                   _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                                       _mm256_set1_epi32(r),
                                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6,
                                                                         7)))));
    }
    return hsum(acc);
}

AVX2 static void rescale_avx2(float *acc, float c, int hd)
{
    const __m256 cv = _mm256_set1_ps(c);
    int d = 0;
    for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_mul_ps(cv, _mm256_loadu_ps(acc + d)));
    for (; d < hd; d++)
        acc[d] *= c;
}

/* A pass of NH heads over NW x 8 columns at a time, as a function of its own. */
#define ACCUM_PASS(SUF, VT, NH, NW)                                                            \
    AVX2 static void accum##NH##_##SUF(float *acc, size_t la, const float *p, size_t lp,      \
                                       const VT *V, int nk, size_t h)                          \
    {                                                                                          \
        accum_heads_##SUF(acc, la, p, lp, V, nk, h, NH, NW);                                   \
    }

/* acc(i) += p(i, t) V(t) over t, for NH heads and the columns [d, d + 8 NW): NH x NW
 * accumulators, each value loaded once for the NH heads; VT float or uint16_t (bf16,
 * widened in registers: the same FMAs as on the widened values). Each output is one FMA
 * chain over t from acc's value, whatever NH and NW. */
#define ACCUM_KERNEL(SUF, VT, LOAD_V, ELEM)                                                    \
    AVX2 static inline __attribute__((always_inline)) void accum_tile_##SUF(                  \
        float *acc, size_t la, const float *p, size_t lp, const VT *V, int nk, size_t h,      \
        size_t d, const int NH, const int NW)                                                  \
    {                                                                                          \
        __m256 a[4][8];                                                                        \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL8 for (int w = 0; w < NW; w++)                                               \
                a[i][w] = _mm256_loadu_ps(acc + (size_t)i * la + d + 8 * (size_t)w);           \
        for (int t = 0; t < nk; t++) {                                                         \
            const VT *v = V + (size_t)t * h + d;                                               \
            __m256 pv[4];                                                                      \
            UNROLL4 for (int i = 0; i < NH; i++)                                               \
                pv[i] = _mm256_set1_ps(p[(size_t)i * lp + (size_t)t]);                         \
            UNROLL8 for (int w = 0; w < NW; w++) {                                             \
                const __m256 vw = LOAD_V(v + 8 * w);                                           \
                UNROLL4 for (int i = 0; i < NH; i++)                                           \
                    a[i][w] = _mm256_fmadd_ps(pv[i], vw, a[i][w]);                             \
            }                                                                                  \
        }                                                                                      \
        UNROLL4 for (int i = 0; i < NH; i++)                                                   \
            UNROLL8 for (int w = 0; w < NW; w++)                                               \
                _mm256_storeu_ps(acc + (size_t)i * la + d + 8 * (size_t)w, a[i][w]);           \
    }                                                                                          \
                                                                                               \
    AVX2 static inline __attribute__((always_inline)) void accum_heads_##SUF(                 \
        float *acc, size_t la, const float *p, size_t lp, const VT *V, int nk, size_t h,      \
        const int NH, const int NW)                                                            \
    {                                                                                          \
        size_t d = 0;                                                                          \
        for (; d + 8 * (size_t)NW <= h; d += 8 * (size_t)NW)                                   \
            accum_tile_##SUF(acc, la, p, lp, V, nk, h, d, NH, NW);                             \
        for (; d + 8 <= h; d += 8)                                                             \
            accum_tile_##SUF(acc, la, p, lp, V, nk, h, d, NH, 1);                              \
        for (; d < h; d++)                                                                     \
            for (int i = 0; i < NH; i++) {                                                     \
                float a = acc[(size_t)i * la + d];                                             \
                for (int t = 0; t < nk; t++)                                                   \
                    a += p[(size_t)i * lp + (size_t)t] * ELEM(V[(size_t)t * h + d]);           \
                acc[(size_t)i * la + d] = a;                                                   \
            }                                                                                  \
    }                                                                                          \
                                                                                               \
    /* up to 4 heads a pass, over 64 columns (1 head), 32 (2 or 3) or 16 (4): 8 to 12 chains \
     * (16 registers: 3 heads x 4 columns of 8, 3 weights and a value); one function per    \
     * pass shape, and a lone head inline, as for the scores */                                \
    ACCUM_PASS(SUF, VT, 1, 8)                                                                  \
    ACCUM_PASS(SUF, VT, 2, 4)                                                                  \
    ACCUM_PASS(SUF, VT, 3, 4)                                                                  \
    ACCUM_PASS(SUF, VT, 4, 2)                                                                  \
                                                                                               \
    AVX2 static void accum_##SUF(float *acc, size_t la, const float *p, size_t lp, int G,     \
                                 const VT *V, int nk, int hd)                                  \
    {                                                                                          \
        static void (*const pass[4])(float *, size_t, const float *, size_t, const VT *, int, \
                                     size_t) = {accum1_##SUF, accum2_##SUF, accum3_##SUF,      \
                                                accum4_##SUF};                                 \
        if (G == 1) {                                                                          \
            accum_heads_##SUF(acc, la, p, lp, V, nk, (size_t)hd, 1, 8);                        \
            return;                                                                            \
        }                                                                                      \
        for (int g = 0; g < G; g += 4)                                                         \
            pass[(G - g < 4 ? G - g : 4) - 1](acc + (size_t)g * la, la, p + (size_t)g * lp,   \
                                              lp, V, nk, (size_t)hd);                          \
    }

ACCUM_KERNEL(avx2, float, load_f32, AS_FLOAT)
ACCUM_KERNEL(bf16_avx2, uint16_t, load_bf16, pe_k_from_bf16)

AVX2 static void widen_avx2(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16(src + i));
    for (; i < n; i++)
        dst[i] = pe_k_from_bf16(src[i]);
}

/* pe_k_to_bf16 on 8 lanes: u + 0x7fff + (u >> 16 & 1), then the high halves, packed; NaN
 * lanes take (u >> 16) | 0x40 instead. */
AVX2 static void narrow_avx2(uint16_t *dst, const float *src, size_t n)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x40), abs = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(hi, one)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i h = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
        /* 8 halves in 32-bit lanes to 8 uint16: pack within 128-bit lanes, then order */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++)
        dst[i] = pe_k_to_bf16(src[i]);
}

/* Prefetches the lines of 4 rows of W at element k, ahead of the loads (the next rows:
 * rows of W are short, 768 elements, so the hardware prefetcher has little time to catch
 * each row's stream before it ends). */
#define PREFETCH4(w0, w1, w2, w3, k)                                                          \
    do {                                                                                       \
        _mm_prefetch((const char *)((w0) + (k)), _MM_HINT_T0);                                \
        _mm_prefetch((const char *)((w1) + (k)), _MM_HINT_T0);                                \
        _mm_prefetch((const char *)((w2) + (k)), _MM_HINT_T0);                                \
        _mm_prefetch((const char *)((w3) + (k)), _MM_HINT_T0);                                \
    } while (0)

/* The GEMV kernels. M = 1 and 2: 4 rows of W against 1 or 2 rows of x (4 or 8 independent
 * accumulators), the 4 rows from the 4 quarters of the call's rows (rows i, q + i, 2q + i
 * and 3q + i of 4q), so that W is read as 4 long sequential streams: 4 adjacent rows made 4
 * streams of one row each, which reached 0.55-0.62 of the read bandwidth on an AMD EPYC
 * (0.87-1.1 now; bench_host); M = 3..8: one row of W against every row of x (M
 * accumulators), so W is read once and in order; M > 8 (hb_linear.c passes at most
 * HB_GEMV_ROWS a call): 4 adjacent rows of W by 3 rows of x (fp32 W; the last 4 rows of x 2
 * at a time) or by 2 (bf16 W, widened in registers), the rows of W from L1 after the first
 * call on them; with 4x3 tiles the GEMV keeps up with single-threaded OpenBLAS sgemm calls
 * at every M (bench_host), so linear takes it at every M. Every output is the same
 * sequence of FMAs over k in steps of 8, then its lanes' sum and the tail, in every kernel,
 * and in the AVX-512 GEMV (hb_simd_avx512.c) too. LOAD_W is load_f32 or load_bf16; BY3
 * whether M > 8 takes 4x3 tiles. */
#define GEMV_KERNELS(SUF, WT, LOAD_W, FINISH, BY3)                                            \
    AVX2 static void gemv_4x2_##SUF(float *y, size_t ldy, const float *x, const WT *W,        \
                                    size_t K, size_t q)                                       \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7, ahead = q == 1 ? 4 * K : 2 * K;                     \
        const WT *w0 = W, *w1 = W + q * K, *w2 = W + 2 * q * K, *w3 = W + 3 * q * K;          \
        const float *x0 = x, *x1 = x + K;                                                      \
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;                    \
        __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;                                    \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            PREFETCH4(w0, w1, w2, w3, k + ahead);                                             \
            __m256 v0 = LOAD_W(w0 + k), v1 = LOAD_W(w1 + k), v2 = LOAD_W(w2 + k),             \
                   v3 = LOAD_W(w3 + k);                                                       \
            __m256 u0 = load_f32(x0 + k), u1 = load_f32(x1 + k);                              \
            a00 = _mm256_fmadd_ps(u0, v0, a00);                                               \
            a01 = _mm256_fmadd_ps(u0, v1, a01);                                               \
            a02 = _mm256_fmadd_ps(u0, v2, a02);                                               \
            a03 = _mm256_fmadd_ps(u0, v3, a03);                                               \
            a10 = _mm256_fmadd_ps(u1, v0, a10);                                               \
            a11 = _mm256_fmadd_ps(u1, v1, a11);                                               \
            a12 = _mm256_fmadd_ps(u1, v2, a12);                                               \
            a13 = _mm256_fmadd_ps(u1, v3, a13);                                               \
        }                                                                                      \
        y[0] = FINISH(a00, x0, w0, k8, K);                                                    \
        y[q] = FINISH(a01, x0, w1, k8, K);                                                    \
        y[2 * q] = FINISH(a02, x0, w2, k8, K);                                                \
        y[3 * q] = FINISH(a03, x0, w3, k8, K);                                                \
        y[ldy] = FINISH(a10, x1, w0, k8, K);                                                  \
        y[ldy + q] = FINISH(a11, x1, w1, k8, K);                                              \
        y[ldy + 2 * q] = FINISH(a12, x1, w2, k8, K);                                          \
        y[ldy + 3 * q] = FINISH(a13, x1, w3, k8, K);                                          \
    }                                                                                          \
    AVX2 static void gemv_4x1_##SUF(float *y, const float *x, const WT *W, size_t K,          \
                                    size_t q)                                                 \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7, ahead = q == 1 ? 4 * K : 2 * K;                     \
        const WT *w0 = W, *w1 = W + q * K, *w2 = W + 2 * q * K, *w3 = W + 3 * q * K;          \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                           \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            PREFETCH4(w0, w1, w2, w3, k + ahead);                                             \
            __m256 u = load_f32(x + k);                                                        \
            a0 = _mm256_fmadd_ps(u, LOAD_W(w0 + k), a0);                                      \
            a1 = _mm256_fmadd_ps(u, LOAD_W(w1 + k), a1);                                      \
            a2 = _mm256_fmadd_ps(u, LOAD_W(w2 + k), a2);                                      \
            a3 = _mm256_fmadd_ps(u, LOAD_W(w3 + k), a3);                                      \
        }                                                                                      \
        y[0] = FINISH(a0, x, w0, k8, K);                                                      \
        y[q] = FINISH(a1, x, w1, k8, K);                                                      \
        y[2 * q] = FINISH(a2, x, w2, k8, K);                                                  \
        y[3 * q] = FINISH(a3, x, w3, k8, K);                                                  \
    }                                                                                          \
    /* 4 adjacent rows of W (from L1 after the first call on them) against 3 rows of x:     \
     * 12 accumulators and the 4 rows of W fill the 16 registers; 12 FMAs to 7 loads */       \
    AVX2 static void gemv_4x3_##SUF(float *y, size_t ldy, const float *x, const WT *W,        \
                                    size_t K)                                                 \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7;                                                     \
        __m256 a[3][4];                                                                        \
        UNROLL4 for (int m = 0; m < 3; m++)                                                    \
            UNROLL4 for (int r = 0; r < 4; r++)                                                \
                a[m][r] = _mm256_setzero_ps();                                                 \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            __m256 v[4];                                                                       \
            UNROLL4 for (int r = 0; r < 4; r++)                                                \
                v[r] = LOAD_W(W + (size_t)r * K + k);                                          \
            UNROLL4 for (int m = 0; m < 3; m++) {                                              \
                const __m256 u = load_f32(x + (size_t)m * K + k);                              \
                UNROLL4 for (int r = 0; r < 4; r++)                                            \
                    a[m][r] = _mm256_fmadd_ps(u, v[r], a[m][r]);                               \
            }                                                                                  \
        }                                                                                      \
        UNROLL4 for (int m = 0; m < 3; m++)                                                    \
            UNROLL4 for (int r = 0; r < 4; r++)                                                \
                y[(size_t)m * ldy + r] = FINISH(a[m][r], x + (size_t)m * K, W + (size_t)r * K, \
                                                k8, K);                                        \
    }                                                                                          \
    AVX2 static void gemv_1x1_##SUF(float *y, const float *x, const WT *w, size_t K)          \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7;                                                     \
        __m256 a = _mm256_setzero_ps();                                                        \
        for (size_t k = 0; k < k8; k += 8)                                                     \
            a = _mm256_fmadd_ps(load_f32(x + k), LOAD_W(w + k), a);                           \
        y[0] = FINISH(a, x, w, k8, K);                                                        \
    }                                                                                          \
    /* one row of W against MM (3..8) rows of x: W read once, in order */                    \
    AVX2 static inline __attribute__((always_inline)) void gemv_1xm_##SUF(                    \
        float *y, size_t ldy, const float *x, const WT *w, size_t K, const int MM)            \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7;                                                     \
        __m256 a[8];                                                                           \
        UNROLL8 for (int m = 0; m < MM; m++)                                                   \
            a[m] = _mm256_setzero_ps();                                                        \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            _mm_prefetch((const char *)(w + k + 2 * K), _MM_HINT_T0);                         \
            __m256 v = LOAD_W(w + k);                                                          \
            UNROLL8 for (int m = 0; m < MM; m++)                                               \
                a[m] = _mm256_fmadd_ps(load_f32(x + (size_t)m * K + k), v, a[m]);             \
        }                                                                                      \
        UNROLL8 for (int m = 0; m < MM; m++)                                                   \
            y[(size_t)m * ldy] = FINISH(a[m], x + (size_t)m * K, w, k8, K);                   \
    }                                                                                          \
    AVX2 static void gemv_1xM_##SUF(float *y, size_t ldy, const float *x, size_t M,           \
                                    const WT *w, size_t K)                                    \
    {                                                                                          \
        switch (M) {                                                                           \
        case 3: gemv_1xm_##SUF(y, ldy, x, w, K, 3); break;                                     \
        case 4: gemv_1xm_##SUF(y, ldy, x, w, K, 4); break;                                     \
        case 5: gemv_1xm_##SUF(y, ldy, x, w, K, 5); break;                                     \
        case 6: gemv_1xm_##SUF(y, ldy, x, w, K, 6); break;                                     \
        case 7: gemv_1xm_##SUF(y, ldy, x, w, K, 7); break;                                     \
        default: gemv_1xm_##SUF(y, ldy, x, w, K, 8); break;                                    \
        }                                                                                      \
    }                                                                                          \
    AVX2 static void gemv_##SUF##_avx2(float *y, size_t ldy, const float *x, size_t M,        \
                                       const WT *W, size_t K, size_t nrows)                   \
    {                                                                                          \
        if (M >= 3 && M <= 8) { /* decode batches: every row of W once, all of x per row */   \
            for (size_t n = 0; n < nrows; n++)                                                 \
                gemv_1xM_##SUF(y + n, ldy, x, M, W + n * K, K);                               \
            return;                                                                            \
        }                                                                                      \
        size_t n = 0;                                                                          \
        if (M <= 2) { /* 4 streams: rows i, q + i, 2q + i, 3q + i of the call's 4q */         \
            const size_t q = nrows / 4;                                                       \
            for (size_t i = 0; i < q; i++) {                                                   \
                if (M == 2)                                                                    \
                    gemv_4x2_##SUF(y + i, ldy, x, W + i * K, K, q);                           \
                else                                                                           \
                    gemv_4x1_##SUF(y + i, x, W + i * K, K, q);                                \
            }                                                                                  \
            n = 4 * q;                                                                         \
        } else                                                                                 \
            for (; n + 4 <= nrows; n += 4) {                                                   \
                size_t m = 0;                                                                  \
                if (BY3) /* 3 rows of x a call, the last 4 (if so many are left) 2 a call */  \
                    for (; M - m >= 3 && M - m != 4; m += 3)                                   \
                        gemv_4x3_##SUF(y + m * ldy + n, ldy, x + m * K, W + n * K, K);        \
                for (; m + 2 <= M; m += 2)                                                     \
                    gemv_4x2_##SUF(y + m * ldy + n, ldy, x + m * K, W + n * K, K, 1);         \
                if (m < M)                                                                     \
                    gemv_4x1_##SUF(y + m * ldy + n, x + m * K, W + n * K, K, 1);              \
            }                                                                                  \
        for (; n < nrows; n++)                                                                 \
            for (size_t m = 0; m < M; m++)                                                     \
                gemv_1x1_##SUF(y + m * ldy + n, x + m * K, W + n * K, K);                     \
    }

GEMV_KERNELS(f32, float, load_f32, finish_f32, 1)
GEMV_KERNELS(bf16, uint16_t, load_bf16, finish_bf16, 0)

static const hb_simd avx2 = {
    .name = "avx2",
    .scores = scores_avx2,
    .scores_bf16 = scores_bf16_avx2,
    .exp_sum = exp_sum_avx2,
    .rescale = rescale_avx2,
    .accum = accum_avx2,
    .accum_bf16 = accum_bf16_avx2,
    .widen = widen_avx2,
    .narrow = narrow_avx2,
    .gelu = gelu_avx2,
    .silu_mul = silu_mul_avx2,
    .argmax = argmax_avx2,
    .gemv_f32 = gemv_f32_avx2,
    .gemv_bf16 = gemv_bf16_avx2,
    .gemv_max_m = {HB_GEMV_MAX_M_VECTOR, HB_GEMV_MAX_M_VECTOR},
    /* bf16 W from 17 rows of x: widened tiles through the fp32 kernels' 4x3 tiles, whose 12
     * accumulators leave no registers to widen in; below, 4x2 tiles widen in registers */
    .gemv_widen_m = 17,
};

const hb_simd *hb_simd_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &avx2 : NULL;
}
#else
const hb_simd *hb_simd_avx2(void) { return NULL; }
#endif

static const hb_simd *best;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

/* PE_HOST_SIMD=avx2|portable picks a lesser version than the CPU's best (to test or
 * measure what an older CPU runs); a version the CPU lacks, or any other value, is ignored. */
static void find_best(void)
{
    const char *want = getenv("PE_HOST_SIMD");
    if (want && !strcmp(want, "portable")) {
        best = &portable;
        return;
    }
    if (!want || strcmp(want, "avx2"))
        best = hb_simd_avx512();
    if (!best)
        best = hb_simd_avx2();
    if (!best)
        best = &portable;
}

const hb_simd *hb_simd_best(void)
{
    pthread_once(&best_once, find_best);
    return best;
}

static const hb_simd *chosen; /* NULL: the best */

const hb_simd *hb_simd_get(void) { return chosen ? chosen : hb_simd_best(); }

void hb_simd_use(const hb_simd *s) { chosen = s; }
