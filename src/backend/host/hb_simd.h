/* hb_simd.h: the host backend's vectorized inner loops (attention's score and value
 * loops, bf16 widening, the GEMV kernels behind linear), in an AVX-512 or AVX2/FMA version
 * chosen at run time where the CPU has it, and a portable C version otherwise.
 *
 * Every output of a kernel is computed by the same sequence of operations whatever the
 * tile it falls in, so results do not depend on how the work is split over threads (nor,
 * for the GEMV, on M).
 */
#ifndef PE_BACKEND_HOST_HB_SIMD_H
#define PE_BACKEND_HOST_HB_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* Rows of x up to which linear prefers a version's GEMV to a GEMM (gemv_max_m). The AVX2
 * and AVX-512 GEMVs have prefill-sized kernels that keep up with OpenBLAS's sgemm (AVX2) and
 * with the packed GEMM that AVX-512 ran until 2026-12-03 (bench_host; docs/architecture.md):
 * they take every M, so that a row's bits never depend on the rows beside it (batch
 * invariance). The portable GEMV, plain C, stops where the AVX2 GEMV once did: 8 rows of x
 * with fp32 W, 16 with bf16 W (half the bytes to read); beyond, OpenBLAS. */
#define HB_GEMV_MAX_M_PORTABLE 8
#define HB_GEMV_MAX_M_BF16_PORTABLE 16
#define HB_GEMV_MAX_M_VECTOR SIZE_MAX

typedef struct hb_simd {
    const char *name; /* "avx512", "avx2" or "portable" */
    /* s(G, ls): s(g, t) = scale * (q(g) . K(t)), for G query heads q(g) = q + g lq (hd)
     * that share the keys K(nk, hd) (GQA's group), each key read once for all of them;
     * each score the same sum, in the same order, as with G = 1 */
    void (*scores)(float *s, size_t ls, const float *q, size_t lq, int G, const float *K, int nk,
                   int hd, float scale);
    /* the same with bf16 keys, widened in registers: scores' bits on the widened keys */
    void (*scores_bf16)(float *s, size_t ls, const float *q, size_t lq, int G,
                        const uint16_t *K, int nk, int hd, float scale);
    /* p(n) = exp(p(n) - m); returns their sum (portable: expf; AVX2: a degree-6 polynomial
     * after range reduction, within 2 ulp of expf for p - m >= -87.34; below, where expf is
     * a denormal or 0, the argument is clamped and the result is about 1.2e-38, FLT_MIN) */
    float (*exp_sum)(float *p, int n, float m);
    /* acc(hd) = c * acc(hd) */
    void (*rescale)(float *acc, float c, int hd);
    /* acc(G, la): acc(g) += sum over t < nk, in order, of p(g, t) * V(t), for G query heads'
     * weights p(g) = p + g lp (nk) over the values V(nk, hd) they share, each value read once
     * for all of them; each output the same sum, in the same order, as with G = 1 */
    void (*accum)(float *acc, size_t la, const float *p, size_t lp, int G, const float *V,
                  int nk, int hd);
    /* the same with bf16 values, widened in registers: accum's bits on the widened values */
    void (*accum_bf16)(float *acc, size_t la, const float *p, size_t lp, int G,
                       const uint16_t *V, int nk, int hd);
    /* dst(n) = src(n) widened from bf16 (exact) */
    void (*widen)(float *dst, const uint16_t *src, size_t n);
    /* dst(n) = pe_k_to_bf16(src(n)): rounded half to even, NaNs kept quiet, bit for bit */
    void (*narrow)(uint16_t *dst, const float *src, size_t n);
    /* x(n) = pe_k_gelu(x), in place (AVX2: the exponential above, within a few ulp) */
    void (*gelu)(float *x, size_t n);
    /* out(n) = pe_k_silu_mul(g, u) */
    void (*silu_mul)(float *out, const float *g, const float *u, size_t n);
    /* pe_k_argmax_row(x, n): the first index of the largest value, NaNs never winning */
    int32_t (*argmax)(const float *x, int32_t n);
    /* y(M, ldy)[:, 0..nrows) = x(M, K) . W(nrows, K)^T, row-major; fp32 sums */
    void (*gemv_f32)(float *y, size_t ldy, const float *x, size_t M, const float *W, size_t K,
                     size_t nrows);
    void (*gemv_bf16)(float *y, size_t ldy, const float *x, size_t M, const uint16_t *W,
                      size_t K, size_t nrows);
    /* rows of x up to which linear runs this version's GEMV rather than a GEMM, for fp32
     * and bf16 W (measured: bench_host; docs/architecture.md) */
    size_t gemv_max_m[2];
    /* rows of x from which linear widens a tile of bf16 W to fp32 (exact) before the GEMV,
     * where re-widening the tile's rows from L1 for every few rows of x costs more */
    size_t gemv_widen_m;
} hb_simd;

/* Whether linear gives a row of x the same bits whatever the other rows of its call: the
 * version's GEMV takes every M (AVX2 and AVX-512). Attention's rows never depend on the
 * others (hb_attention.c), so the host backend is then batch-invariant: a sequence's tokens
 * and logprobs have the same bits alone or batched with any others, on one device or on a
 * grid without TP. */
static inline int hb_simd_batch_invariant(const hb_simd *s)
{
    return s->gemv_max_m[0] == SIZE_MAX && s->gemv_max_m[1] == SIZE_MAX;
}

/* The best version this CPU runs (AVX-512, else AVX2 with FMA, else portable). */
const hb_simd *hb_simd_best(void);
/* The portable version (the tests check it too). */
const hb_simd *hb_simd_portable(void);
/* The AVX2 version, or NULL when the CPU lacks AVX2 or FMA. */
const hb_simd *hb_simd_avx2(void);
/* The AVX-512 version (the AVX2 loops, with AVX-512F GEMV kernels), or NULL when the CPU
 * lacks AVX-512F or AVX2 (hb_simd_avx512.c). */
const hb_simd *hb_simd_avx512(void);

/* The version the host backend's kernels use: hb_simd_best() unless a test chose another. */
const hb_simd *hb_simd_get(void);
/* Test hook: make the kernels use s (NULL: back to the best). Not thread-safe: call it
 * while no host device computes. */
void hb_simd_use(const hb_simd *s);

#endif
