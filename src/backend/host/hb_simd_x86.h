/* hb_simd_x86.h: the pieces of a dot product that the AVX2 loops (hb_simd.c) and the
 * AVX-512 GEMV (hb_simd_avx512.c) share, so that both finish a sum the same way and give
 * the same bits: 8 fp32 or bf16 values loaded as 8 floats, and a sum's end (the 8 lanes
 * added in one fixed order, then the tail in k order). Include it only where
 * __x86_64__ and a GCC-compatible compiler are given.
 */
#ifndef PE_BACKEND_HOST_HB_SIMD_X86_H
#define PE_BACKEND_HOST_HB_SIMD_X86_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

#define AVX2 __attribute__((target("avx2,fma")))
/* Unrolls a loop over accumulators so they stay in registers (GCC does not at -O2). */
#define UNROLL12 _Pragma("GCC unroll 12")
#define UNROLL8 _Pragma("GCC unroll 8")
#define UNROLL4 _Pragma("GCC unroll 4")

AVX2 static inline float hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* 8 bf16 values widened to fp32 (a shift of each into the upper half of a 32-bit lane). */
AVX2 static inline __m256 load_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2 static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

/* One dot product's end: the vector sum's lanes, then the tail [k8, K) in order. */
AVX2 static inline float finish_f32(__m256 acc, const float *x, const float *w, size_t k8,
                                    size_t K)
{
    float s = hsum(acc);
    for (size_t k = k8; k < K; k++)
        s += x[k] * w[k];
    return s;
}

AVX2 static inline float finish_bf16(__m256 acc, const float *x, const uint16_t *w, size_t k8,
                                     size_t K)
{
    float s = hsum(acc);
    for (size_t k = k8; k < K; k++)
        s += x[k] * pe_k_from_bf16(w[k]);
    return s;
}

#endif
