/* hb_amx.h: linear with bf16 weights on Intel's AMX tiles (Xeon from Sapphire Rapids on),
 * where the CPU has AMX-BF16 and the kernel grants the process the tile data.
 *
 * The tiles compute y^T = W x^T: 16 rows of W, as the file holds them (N, K), are the left
 * tile, and x, packed once per call into AMX's pairs layout (hb_amx_pack_x), the right one.
 * One tile product multiplies 16 rows of W by up to 16 rows of x over 32 values of K, so a
 * decode step of 16 sequences costs about what one sequence's does (the time it takes to
 * read W), and prefill runs at 3-4x the AVX-512 GEMV's FLOP/s (docs/architecture.md).
 *
 * Each output is its row of W against its row of x: the tile unit's sums (products of bf16
 * values, fp32 sums, denormals flushed) over the even blocks of 32 values of K, in K's
 * order, plus those over the odd blocks. Nothing else of the call enters it, so a row of y
 * never depends on M, on the other rows of x, nor on how the rows of W are split over
 * threads (batch invariance). Its bits are not the AVX2 or AVX-512 GEMV's: the tile unit's
 * arithmetic is not a chain of FMAs.
 */
#ifndef PE_BACKEND_HOST_HB_AMX_H
#define PE_BACKEND_HOST_HB_AMX_H

#include <stddef.h>
#include <stdint.h>

#define HB_AMX_ROWS 16 /* rows of W, and of x, in a tile */
#define HB_AMX_K 32    /* values of K in a tile's row (64 bytes of bf16) */

/* Whether linear runs bf16 weights on AMX: the CPU has AMX-TILE and AMX-BF16, the kernel
 * granted the tile data (arch_prctl), PE_HOST_AMX is not "0", and no test turned it off
 * (hb_amx_use). */
int hb_amx_enabled(void);
/* Whether this process can run AMX at all (as above, without PE_HOST_AMX and the hook). */
int hb_amx_available(void);
/* Test and benchmark hook: on = 0 makes linear run bf16 weights through the vector GEMV,
 * 1 brings AMX back where available. Not thread-safe: call it while no host device
 * computes. */
void hb_amx_use(int on);

/* uint16 values of x(M, K) packed: whole blocks of 16 rows by 32 values, zeros beyond. */
static inline size_t hb_amx_packed_size(size_t M, size_t K)
{
    return (M + HB_AMX_ROWS - 1) / HB_AMX_ROWS * ((K + HB_AMX_K - 1) / HB_AMX_K) *
           (HB_AMX_ROWS * HB_AMX_K);
}

/* Packs the blocks [b0, b1) of 16 rows of x(M, K) bf16 into xp: block (b, kb) is a tile of
 * 16 rows, row q holding (x[16b + t][32kb + 2q], x[16b + t][32kb + 2q + 1]) for t = 0..15,
 * zeros past M and K. */
void hb_amx_pack_x(uint16_t *xp, const uint16_t *x, size_t M, size_t K, size_t b0, size_t b1);

/* y(M, ldy)[:, 0..nrows) = x(M, K) . W(nrows, K)^T, row-major, fp32 sums; xp is x packed
 * (hb_amx_pack_x, every block); yt: for 2 <= M <= 16, scratch of nrows x 16 floats (64-byte
 * aligned), or NULL (the rows of W are then read 16 adjacent ones at a time: slower for a
 * decode step). Only where hb_amx_available(). */
void hb_amx_linear_bf16(float *y, size_t ldy, float *yt, const uint16_t *xp, size_t M,
                        const uint16_t *W, size_t K, size_t nrows);

#endif
