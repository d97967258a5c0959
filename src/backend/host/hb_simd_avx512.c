/* hb_simd_avx512.c: the AVX-512 version of hb_simd.h: the AVX2 loops, with the packed
 * GEMM's micro-kernel, its packing of W and x, and the GEMV at M >= 3 in AVX-512F (a target
 * attribute, chosen at run time with __builtin_cpu_supports, so the build needs no
 * -mavx512f).
 *
 * The micro-kernel keeps a 12 x 32 tile of C in 24 registers. Each step of k loads one row
 * of the W panel (2 registers) and broadcasts the 12 values of the x panel, 24 fused
 * multiply-adds: the FMA units, not the loads, set the pace. Each element of C is one FMA
 * chain in k order, as in hb_gemm_tile_c, so the two give the same bits.
 */
#include "backend/host/hb_simd.h"

#include <pthread.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/host/hb_simd_x86.h"

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

#if HB_MR != 12 || HB_NR != 32
#error "the AVX-512 micro-kernel is written for a 12 x 32 tile"
#endif

/* Unrolls a loop over an array of registers, so that it stays in registers (GCC does not
 * at -O2). */
#define UNROLL16 _Pragma("GCC unroll 16")

/* The AVX2 loops, which this version keeps where AVX-512 gains nothing. */
static const hb_simd *avx2_loops;

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* Lanes of the tile's two column vectors that hold one of the nr columns. */
AVX512 static inline __mmask16 lanes(int nr, int half)
{
    int n = nr - 16 * half;
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

AVX512 static void gemm_tile_avx512(float *C, size_t ldc, const float *A, const float *B,
                                    size_t kc, int mr, int nr, int add, const float *bias)
{
    const __mmask16 m0 = lanes(nr, 0), m1 = lanes(nr, 1);
    const __m512 b0 = !add && bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = !add && bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#define INIT(i)                                                                                \
    __m512 lo##i = b0, hi##i = b1;                                                             \
    if (add && (i) < mr) {                                                                     \
        lo##i = _mm512_maskz_loadu_ps(m0, C + (size_t)(i) * ldc);                              \
        hi##i = _mm512_maskz_loadu_ps(m1, C + (size_t)(i) * ldc + 16);                         \
    }
    ROWS(INIT)
#undef INIT
#define STEP(i)                                                                                \
    {                                                                                          \
        __m512 a = _mm512_set1_ps(A[i]);                                                       \
        lo##i = _mm512_fmadd_ps(a, w0, lo##i);                                                 \
        hi##i = _mm512_fmadd_ps(a, w1, hi##i);                                                 \
    }
    for (size_t k = 0; k < kc; k++, A += HB_MR, B += HB_NR) {
        const __m512 w0 = _mm512_load_ps(B), w1 = _mm512_load_ps(B + 16);
        ROWS(STEP)
    }
#undef STEP
#define STORE(i)                                                                               \
    if ((i) < mr) {                                                                            \
        _mm512_mask_storeu_ps(C + (size_t)(i) * ldc, m0, lo##i);                               \
        _mm512_mask_storeu_ps(C + (size_t)(i) * ldc + 16, m1, hi##i);                          \
    }
    ROWS(STORE)
#undef STORE
}

/* Transposes the 16 x 16 block r in place (r[i] lane j -> r[j] lane i): pairs, then
 * quads within 128-bit lanes, then the lanes themselves (64 shuffles). */
AVX512 static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    UNROLL16 for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    UNROLL16 for (int i = 0; i < 16; i += 4) { /* r[i + c], lane L: column 4L + c of rows i..i+3 */
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    UNROLL16 for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        __m512 v2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        __m512 v3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        t[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        t[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
    UNROLL16 for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* 16 values of a row of W from column k, as fp32 (bf16 widened: exact). */
AVX512 static inline __m512 row16(const void *W, int w_bf16, size_t at)
{
    if (!w_bf16)
        return _mm512_loadu_ps((const float *)W + at);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)W + at));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* dst(cols, width) = the first cols columns of src(rows, ld)^T, as hb_pack_w_c/hb_pack_x_c:
 * columns in steps of 16; each 16 rows of the panel are loaded as rows of 16, transposed in
 * registers and stored as 16 rows of dst (width <= 32 lanes); the rest of cols by the
 * portable loop. W comes from memory, 32 short rows at once (a slice of K): too many
 * streams for the hardware prefetcher, so each load also asks for the same place 32 rows
 * on (the next W panel; a prefetch never faults, past the end of src too). Measured from
 * memory, bf16: 0.36-0.39 ns an element with, 0.52 without. */
AVX512 static inline __attribute__((always_inline)) void
pack_panel_avx512(float *dst, int width, const void *src, int bf16, size_t ld, size_t cols,
                  int rows)
{
    const size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float);
    size_t k = 0;
    for (; k + 16 <= cols; k += 16)
        for (int half = 0; 16 * half < width; half++) {
            __m512 r[16];
            UNROLL16 for (int i = 0; i < 16; i++) {
                int row = 16 * half + i;
                size_t at = (size_t)row * ld + k;
                _mm_prefetch((const char *)src + (at + HB_NR * ld) * esize, _MM_HINT_T0);
                r[i] = row < rows ? row16(src, bf16, at) : _mm512_setzero_ps();
            }
            transpose16(r);
            float *d = dst + k * (size_t)width + 16 * half;
            if (width == HB_NR) /* whole rows of 16 */
                UNROLL16 for (int i = 0; i < 16; i++)
                    _mm512_storeu_ps(d + (size_t)i * HB_NR, r[i]);
            else
                UNROLL16 for (int i = 0; i < 16; i++)
                    _mm512_mask_storeu_ps(d + (size_t)i * (size_t)width, lanes(width, half),
                                          r[i]);
        }
    if (k < cols) {
        if (width == HB_NR)
            hb_pack_w_c(dst + k * HB_NR, (const char *)src + k * esize, bf16, ld, cols - k, rows);
        else
            hb_pack_x_c(dst + k * HB_MR, (const char *)src + k * esize, bf16, ld, cols - k, rows);
    }
}

AVX512 static void pack_w_avx512(float *B, const void *W, int w_bf16, size_t ldw, size_t kc,
                                 int nr)
{
    pack_panel_avx512(B, HB_NR, W, w_bf16, ldw, kc, nr);
}

AVX512 static void pack_x_avx512(float *A, const void *x, int x_bf16, size_t ldx, size_t K,
                                 int mr)
{
    pack_panel_avx512(A, HB_MR, x, x_bf16, ldx, K, mr);
}

/* ---- the GEMV at M >= 3 ---------------------------------------------------------------
 * The AVX2 GEMV (hb_simd.c) sums each output in 8 lanes over k in steps of 8; at M = 8 one
 * core ran it at about 32 GFMA/s, half of what the packed GEMM reaches, so decode batches
 * were bound by the FMAs, not by W's bytes (bench_host). Here a 512-bit register holds the
 * same 8-lane step of two rows of W (lanes 0-7 one row, 8-15 the other), and x's step is
 * broadcast to both halves: each lane runs the AVX2 kernel's chain of FMAs, and each half
 * is finished as the AVX2 kernel finishes it. So the outputs keep their bits, and every
 * instruction does twice the FMAs.
 *
 * A call's rows of W are taken 4 at a time, from its 4 quarters (rows i, q + i, 2q + i,
 * 3q + i of 4q), as the AVX2 kernel does at M <= 2: 4 long streams. Up to 8 rows of x per
 * pass (2 x 8 accumulators); more take further passes over the same rows of W, from the
 * caches. M <= 2, bound by W's bytes, and the rows beyond the 4 quarters go to the AVX2
 * kernel. */

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

/* y(MM, ldy) at columns 0, q, 2q, 3q = x(MM, K) . rows 0, q, 2q, 3q of W, MM <= 8 */
#define GEMV512_KERNELS(SUF, WT, PAIR, FINISH)                                                 \
    AVX512 static inline __attribute__((always_inline)) void gemv_4xm_##SUF(                  \
        float *y, size_t ldy, const float *x, const WT *W, size_t K, size_t q, const int MM)  \
    {                                                                                          \
        const size_t k8 = K & ~(size_t)7, ahead = q == 1 ? 4 * K : 2 * K;                     \
        const WT *w0 = W, *w1 = W + q * K, *w2 = W + 2 * q * K, *w3 = W + 3 * q * K;          \
        __m512 a[8], b[8]; /* a[m]: rows 0 and q against x row m; b[m]: rows 2q and 3q */     \
        UNROLL8 for (int m = 0; m < MM; m++)                                                   \
            a[m] = b[m] = _mm512_setzero_ps();                                                 \
        for (size_t k = 0; k < k8; k += 8) {                                                   \
            _mm_prefetch((const char *)(w0 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w1 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w2 + k + ahead), _MM_HINT_T0);                        \
            _mm_prefetch((const char *)(w3 + k + ahead), _MM_HINT_T0);                        \
            const __m512 v01 = PAIR(w0 + k, w1 + k), v23 = PAIR(w2 + k, w3 + k);              \
            UNROLL8 for (int m = 0; m < MM; m++) {                                             \
                const __m512 u = both_halves(x + (size_t)m * K + k);                           \
                a[m] = _mm512_fmadd_ps(u, v01, a[m]);                                          \
                b[m] = _mm512_fmadd_ps(u, v23, b[m]);                                          \
            }                                                                                  \
        }                                                                                      \
        UNROLL8 for (int m = 0; m < MM; m++) {                                                 \
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
        default: gemv_4xm_##SUF(y, ldy, x, W, K, q, 8); break;                                 \
        }                                                                                      \
    }                                                                                          \
    AVX512 static void gemv_##SUF##_avx512(float *y, size_t ldy, const float *x, size_t M,    \
                                           const WT *W, size_t K, size_t nrows)               \
    {                                                                                          \
        const size_t q = nrows / 4;                                                            \
        for (size_t m0 = 0; m0 < M; m0 += 8) {                                                 \
            const size_t mm = M - m0 < 8 ? M - m0 : 8;                                         \
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
    }

GEMV512_KERNELS(f32, float, pair_f32, finish_f32)
GEMV512_KERNELS(bf16, uint16_t, pair_bf16, finish_bf16)

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
    avx512.gemm_tile = gemm_tile_avx512;
    avx512.pack_w = pack_w_avx512;
    avx512.pack_x = pack_x_avx512;
    avx512.packed_first = 1;
    avx512.gemv_max_m[0] = HB_GEMV_MAX_M_AVX512;
    avx512.gemv_max_m[1] = HB_GEMV_MAX_M_AVX512;
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
