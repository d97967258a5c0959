/* hb_packed.c: the packed GEMM behind linear's larger batches, structured as BLIS
 * structures one: C(M, nn) = bias + x(M, K) . W(nn, K)^T for one slab of output columns,
 * on the calling thread.
 *
 *   x is packed once per layer, shared by every slab and thread: panels of HB_MR rows,
 *   each (K, HB_MR) (hb_packed_x);
 *   for each HB_KC-deep slice of K:
 *     pack the slab's rows of W into panels of HB_NR, each (kc, HB_NR), fp32     (L2)
 *     for each HB_MC rows of x (their slices of the x panels: L2):
 *       for each W panel (L1), for each x panel: the micro-kernel's tile of C
 *
 * A bf16 W is widened as it is packed, the one copy of W that a GEMM makes anyway: no
 * separate widening pass, as the OpenBLAS path needs. Each element of C is one chain of
 * multiply-adds, a slice of K at a time in k order, so the result depends neither on M,
 * nor on the slab, nor on the thread.
 */
#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"

/* A W panel (kc, HB_NR) of 24 KiB stays in L1 (48 KiB here) beside the x panel streaming
 * through; HB_MC rows of x's slice (72 KiB) and the slab's packed W (about 512 columns:
 * 384 KiB) stay in L2 (1.25 MiB). */
#define HB_KC 192
#define HB_MC 96 /* a multiple of HB_MR */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

size_t hb_packed_work_floats(size_t nn) { return round_up(nn, HB_NR) * HB_KC; }

size_t hb_packed_x_floats(size_t M, size_t K) { return round_up(M, HB_MR) * K; }

void hb_packed_x(const hb_simd *simd, float *Xp, const void *x, int x_bf16, size_t K,
                 size_t r0, size_t r1)
{
    const size_t xsize = x_bf16 ? sizeof(uint16_t) : sizeof(float);
    for (size_t ir = r0; ir < r1; ir += HB_MR)
        simd->pack_x(Xp + ir * K, (const char *)x + ir * K * xsize, x_bf16, K, K,
                     (int)min_size(HB_MR, r1 - ir));
}

/* Asks for the C tile after (ir, jr) in the loop order below while (ir, jr) computes: a tile
 * of C comes back once per slice of K, after the whole of C went by, so from memory. */
static void prefetch_next_tile(const float *C, size_t ldc, size_t M, size_t ic, size_t ir,
                               size_t jr, size_t nn)
{
#if defined(__GNUC__)
    size_t r = ir + HB_MR, c = jr;
    if (r >= M || r >= ic + HB_MC) {
        r = ic;
        c = jr + HB_NR;
        if (c >= nn)
            return;
    }
    for (size_t i = 0; i < HB_MR && r + i < M; i++) {
        __builtin_prefetch(C + (r + i) * ldc + c, 1);
        __builtin_prefetch(C + (r + i) * ldc + c + 16, 1);
    }
#else
    (void)C, (void)ldc, (void)M, (void)ic, (void)ir, (void)jr, (void)nn;
#endif
}

/* Asks for part `part` of `parts` of the next slice of W, columns [p0, p1) of its nn rows,
 * into L2 while this slice's tiles compute, so that packing it reads L2 rather than memory
 * (in perf, packing W was 20-30% of the tiles' time at M = 128; from L2 it costs half). */
static void prefetch_w(const char *W, size_t K, size_t wsize, size_t nn, size_t p0, size_t p1,
                       size_t part, size_t parts)
{
#if defined(__GNUC__)
    const size_t r0 = nn * part / parts, r1 = nn * (part + 1) / parts;
    for (size_t r = r0; r < r1; r++)
        for (size_t b = p0 * wsize; b < p1 * wsize; b += 64)
            __builtin_prefetch(W + r * K * wsize + b, 0, 2);
#else
    (void)W, (void)K, (void)wsize, (void)nn, (void)p0, (void)p1, (void)part, (void)parts;
#endif
}

void hb_packed_gemm(const hb_simd *simd, float *C, size_t ldc, const float *Xp, size_t M,
                    size_t K, const void *W, int w_bf16, size_t nn, const float *bias,
                    float *work)
{
    float *Bp = work; /* (nn / HB_NR panels, kc, HB_NR) */
    const size_t wsize = w_bf16 ? sizeof(uint16_t) : sizeof(float);
    for (size_t pc = 0; pc < K; pc += HB_KC) {
        const size_t kc = min_size(HB_KC, K - pc);
        const int add_k = pc > 0; /* the first slice starts from the bias */
        for (size_t jr = 0; jr < nn; jr += HB_NR)
            simd->pack_w(Bp + jr * kc, (const char *)W + (jr * K + pc) * wsize, w_bf16, K, kc,
                         (int)min_size(HB_NR, nn - jr));
        const size_t next = pc + kc, next_end = min_size(next + HB_KC, K);
        const size_t tiles = (M + HB_MR - 1) / HB_MR * ((nn + HB_NR - 1) / HB_NR);
        size_t tile = 0;
        /* the x panels' slice pc: (kc, HB_MR) each, at a stride of K x HB_MR */
        for (size_t ic = 0; ic < M; ic += HB_MC)
            for (size_t jr = 0; jr < nn; jr += HB_NR)
                for (size_t ir = ic; ir < M && ir < ic + HB_MC; ir += HB_MR) {
                    if (add_k)
                        prefetch_next_tile(C, ldc, M, ic, ir, jr, nn);
                    if (next < K)
                        prefetch_w(W, K, wsize, nn, next, next_end, tile++, tiles);
                    simd->gemm_tile(C + ir * ldc + jr, ldc, Xp + ir * K + pc * HB_MR,
                                    Bp + jr * kc, kc, (int)min_size(HB_MR, M - ir),
                                    (int)min_size(HB_NR, nn - jr), add_k,
                                    bias ? bias + jr : NULL);
                }
    }
}
