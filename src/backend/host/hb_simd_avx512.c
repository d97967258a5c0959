/* hb_simd_avx512.c: the AVX-512 version of hb_simd.h: the AVX2 loops, with the packed
 * GEMM's micro-kernel and its packing of W and x in AVX-512F (a target attribute, chosen at
 * run time with __builtin_cpu_supports, so the build needs no -mavx512f).
 *
 * The micro-kernel keeps a 12 x 32 tile of C in 24 registers. Each step of k loads one row
 * of the W panel (2 registers) and broadcasts the 12 values of the x panel, 24 fused
 * multiply-adds: the FMA units, not the loads, set the pace. Each element of C is one FMA
 * chain in k order, as in hb_gemm_tile_c, so the two give the same bits.
 */
#include "backend/host/hb_simd.h"

#include <pthread.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))

#if HB_MR != 12 || HB_NR != 32
#error "the AVX-512 micro-kernel is written for a 12 x 32 tile"
#endif

/* Unrolls a loop over an array of registers, so that it stays in registers (GCC does not
 * at -O2). */
#define UNROLL16 _Pragma("GCC unroll 16")

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

static hb_simd avx512;
static const hb_simd *found;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void find(void)
{
    const hb_simd *avx2 = hb_simd_avx2();
    __builtin_cpu_init();
    if (!avx2 || !__builtin_cpu_supports("avx512f"))
        return;
    avx512 = *avx2;
    avx512.name = "avx512";
    avx512.gemm_tile = gemm_tile_avx512;
    avx512.pack_w = pack_w_avx512;
    avx512.pack_x = pack_x_avx512;
    avx512.packed_first = 1;
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
