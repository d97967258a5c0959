/* hb_amx.c: linear with bf16 weights on AMX tiles (hb_amx.h), chosen at run time: a target
 * attribute on the kernels, so the build needs no -mamx-tile, and CPUID with the kernel's
 * grant before any of them runs.
 *
 * Tiles (8, each up to 16 rows of 64 bytes):
 *   0-3   sums, (R, 16) fp32 (or (R, 1) at M = 1): y^T of the first block of 16 rows of x
 *         over the even steps of K (0) and the odd ones (1), and of the second block (2, 3)
 *   4, 5  a step of K of the slab: (R, 32) bf16, R rows of W by 32 values (even, odd steps)
 *   6, 7  a step of K of x's blocks, packed: 16 pairs of K by 16 rows of x
 * A call walks W in slabs of 16 rows (the last one may have fewer, with a configuration of
 * its own); for each slab, the blocks of x two at a time, each step of K loading the slab's
 * W once for both. A decode step is bound by W's bytes; its slabs are 16 rows q apart
 * (hb_amx_linear_bf16). A prefill of HB_AMX_PAIR_M rows or more takes two slabs at a time
 * (slab_pair: four sums, one chain per pass over K).
 */
#include "backend/host/hb_amx.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void hb_amx_pack_x(uint16_t *xp, const uint16_t *x, size_t M, size_t K, size_t b0, size_t b1)
{
    const size_t nkb = (K + HB_AMX_K - 1) / HB_AMX_K;
    for (size_t b = b0; b < b1; b++)
        for (size_t kb = 0; kb < nkb; kb++) {
            uint16_t *tile = xp + (b * nkb + kb) * (HB_AMX_ROWS * HB_AMX_K);
            const size_t m0 = b * HB_AMX_ROWS, k0 = kb * HB_AMX_K;
            const size_t rows = M - m0 < HB_AMX_ROWS ? M - m0 : HB_AMX_ROWS;
            const size_t vals = K - k0 < HB_AMX_K ? K - k0 : HB_AMX_K;
            if (rows < HB_AMX_ROWS || vals < HB_AMX_K)
                memset(tile, 0, HB_AMX_ROWS * HB_AMX_K * sizeof *tile);
            for (size_t t = 0; t < rows; t++) { /* row t's values 2q, 2q + 1 to pair q */
                const uint16_t *src = x + (m0 + t) * K + k0;
                for (size_t q = 0; q < vals / 2; q++)
                    memcpy(tile + q * (2 * HB_AMX_ROWS) + 2 * t, src + 2 * q, 2 * sizeof *src);
                if (vals % 2)
                    tile[(vals / 2) * (2 * HB_AMX_ROWS) + 2 * t] = src[vals - 1];
            }
        }
}

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* GCC's tile intrinsics are asm statements that name no memory: this keeps the compiler from
 * moving our loads and stores of the buffers they read or write across them. */
#define TILE_FENCE() __asm__ volatile("" ::: "memory")

/* The 64-byte tile configuration (palette 1) for slabs of R rows of W. */
typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved0[14];
    uint16_t colsb[16];
    uint8_t rows[16];
    uint8_t reserved1[16];
} tile_config;

/* [one][R], R = 1..16: tiles of 16 columns of x's rows, or (one) of 1, for M = 1; written
 * once, before use */
static tile_config configs[2][HB_AMX_ROWS + 1];
static int available;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int turned_off; /* hb_amx_use(0) */
static int env_off;    /* PE_HOST_AMX=0 */

static void fill_configs(void)
{
    for (int one = 0; one < 2; one++)
        for (int R = 1; R <= HB_AMX_ROWS; R++) {
            tile_config *c = &configs[one][R];
            memset(c, 0, sizeof *c);
            c->palette = 1;
            for (int t = 0; t < 8; t++) { /* 0-3: sums, 4-5: W, R rows; 6-7: x, 16 rows */
                c->rows[t] = t < 6 ? (uint8_t)R : HB_AMX_ROWS;
                c->colsb[t] = one && t != 4 && t != 5 ? 4 : 64; /* one column: 4 bytes */
            }
        }
}

/* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 22 AMX-BF16; the OS enables the tile state in XCR0
 * (bits 17 and 18); Linux then grants the tile data per process, on request. valgrind's
 * CPUID shows no AMX, so the valgrind runs take the vector GEMV. */
static void probe(void)
{
    const char *env = getenv("PE_HOST_AMX");
    env_off = env && !strcmp(env, "0");
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)))
        return;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE: xgetbv works */
        return;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return;
    unsigned long long granted = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &granted) != 0 ||
        !(granted & (1ull << XFEATURE_XTILEDATA)))
        return;
    fill_configs();
    available = 1;
}

int hb_amx_available(void)
{
    pthread_once(&once, probe);
    return available;
}

int hb_amx_enabled(void) { return hb_amx_available() && !env_off && !turned_off; }

void hb_amx_use(int on) { turned_off = !on; }

/* 0, 1, ..., 15 in the lanes. */
AMX static inline __m512i lane_ids(void)
{
    return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

/* Rows t < mt of block c(R, 16) (y^T: c[r][t] = y[t][r]) into y's rows from y0, columns
 * r < R: each row of y one masked gather from c and one masked store. */
AMX static void store_block(float *y0, size_t ldy, const float *c, size_t mt, size_t R)
{
    const __mmask16 mask = (__mmask16)((1u << R) - 1);
    const __m512i rows = _mm512_mullo_epi32(lane_ids(), _mm512_set1_epi32(HB_AMX_ROWS));
    for (size_t t = 0; t < mt; t++) {
        __m512i at = _mm512_add_epi32(rows, _mm512_set1_epi32((int)t));
        __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, at, c, 4);
        _mm512_mask_storeu_ps(y0 + t * ldy, mask, v);
    }
}

/* A decode step (one block of x) prefetches each row of the slab this many steps of K
 * ahead (llama-110m, batch 1: 4-8% faster decode than none; 4 to 16 steps alike). */
#define HB_AMX_AHEAD 8

/* Rows of x from which prefill takes W's slabs two at a time (slab_pair): bench_host, K 768,
 * 2 threads, against one at a time: M = 1024 20-30% faster, 128 5-10% (N 2304, 3072),
 * 32 alike; with W of 77 MB, 50257 rows, M = 32 12% slower. */
#define HB_AMX_PAIR_M 64

/* One step of K: the slab's block kb of W into tile A, x's block kb of the first block
 * into tile X0, its products added to tile C0; with two blocks, the second's (tile 7) to
 * C1. Even steps of K go to one pair of tiles, odd ones to another, so that a decode step
 * (one block) runs two chains of tile products, each with its own tiles of W and x. */
#define STEP(C0, C1, A, X0, kb)                                                                \
    do {                                                                                       \
        if (ahead)                                                                             \
            for (size_t l = 0; l < R; l++)                                                     \
                _mm_prefetch((const char *)(W + l * gap * K + ((kb) + ahead) * HB_AMX_K),      \
                             _MM_HINT_T0);                                                     \
        if ((kb) < full)                                                                       \
            _tile_loadd(A, W + (kb)*HB_AMX_K, gap * K * sizeof(uint16_t));                     \
        else                                                                                   \
            _tile_loadd(A, tail, HB_AMX_K * sizeof(uint16_t));                                 \
        _tile_loadd(X0, x0 + (kb) * (HB_AMX_ROWS * HB_AMX_K), 64);                             \
        _tile_dpbf16ps(C0, A, X0);                                                             \
        if (two) {                                                                             \
            _tile_loadd(7, x1 + (kb) * (HB_AMX_ROWS * HB_AMX_K), 64);                          \
            _tile_dpbf16ps(C1, A, 7);                                                          \
        }                                                                                      \
    } while (0)

/* sum(R, 16) = even(R, 16) + odd(R, 16): a block's two chains added (even first). */
AMX static void add_chains(float *sum, const float *even, const float *odd, size_t R)
{
    for (size_t r = 0; r < R; r++)
        _mm512_store_ps(sum + r * HB_AMX_ROWS, _mm512_add_ps(_mm512_load_ps(even + r * 16),
                                                             _mm512_load_ps(odd + r * 16)));
}

/* y(M, ldy)[:, r gap] for r < R from the rows r gap of W, the configuration for (M, R)
 * loaded (gap > 1: M = 1, or yt); or, with yt (2 <= M <= 16: one block of x), y^T's R rows
 * into yt's rows r gap (16 floats each, the lanes past M unused). Each output: its sums over
 * the even steps of K plus those over the odd steps, each in K's order. */
AMX static void slab(float *y, size_t ldy, float *yt, const uint16_t *xp, size_t M,
                     const uint16_t *W, size_t K, size_t R, size_t gap)
{
    const size_t full = K / HB_AMX_K, nkb = (K + HB_AMX_K - 1) / HB_AMX_K;
    const size_t ahead = M <= HB_AMX_ROWS ? HB_AMX_AHEAD : 0; /* steps of K prefetched */
    const size_t blocks = (M + HB_AMX_ROWS - 1) / HB_AMX_ROWS;
    _Alignas(64) uint16_t tail[HB_AMX_ROWS * HB_AMX_K]; /* K's last block, zeros past K */
    _Alignas(64) float c[4][HB_AMX_ROWS * HB_AMX_ROWS]; /* tiles 0-3 */
    if (full < nkb) {
        memset(tail, 0, sizeof tail);
        for (size_t r = 0; r < R; r++)
            memcpy(tail + r * HB_AMX_K, W + r * gap * K + full * HB_AMX_K,
                   (K - full * HB_AMX_K) * sizeof(uint16_t));
        TILE_FENCE();
    }
    for (size_t b = 0; b < blocks; b += 2) {
        const int two = b + 1 < blocks;
        const uint16_t *x0 = xp + b * nkb * (HB_AMX_ROWS * HB_AMX_K);
        const uint16_t *x1 = x0 + nkb * (HB_AMX_ROWS * HB_AMX_K);
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        size_t kb = 0;
        if (two) /* x's tiles 6 and 7 hold the two blocks */
            for (; kb + 1 < nkb; kb += 2) {
                STEP(0, 2, 4, 6, kb);
                STEP(1, 3, 5, 6, kb + 1);
            }
        else /* one block: the chains take turns with 6 and 7 */
            for (; kb + 1 < nkb; kb += 2) {
                STEP(0, 2, 4, 6, kb);
                STEP(1, 3, 5, 7, kb + 1);
            }
        if (kb < nkb)
            STEP(0, 2, 4, 6, kb);
        if (M == 1) { /* one column: R sums in each chain, into y's columns r gap */
            _tile_stored(0, c[0], sizeof(float));
            _tile_stored(1, c[1], sizeof(float));
            TILE_FENCE();
            const __mmask16 mask = (__mmask16)((1u << R) - 1);
            __m512 v = _mm512_add_ps(_mm512_maskz_load_ps(mask, c[0]),
                                     _mm512_maskz_load_ps(mask, c[1]));
            if (gap == 1)
                _mm512_mask_storeu_ps(y, mask, v);
            else
                _mm512_mask_i32scatter_ps(
                    y, mask, _mm512_mullo_epi32(lane_ids(), _mm512_set1_epi32((int)gap)), v, 4);
            return;
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        if (two) {
            _tile_stored(2, c[2], 64);
            _tile_stored(3, c[3], 64);
        }
        TILE_FENCE();
        add_chains(c[0], c[0], c[1], R);
        if (yt) { /* one block */
            for (size_t r = 0; r < R; r++)
                _mm512_store_ps(yt + r * gap * HB_AMX_ROWS, _mm512_load_ps(c[0] + r * 16));
            return;
        }
        if (two)
            add_chains(c[2], c[2], c[3], R);
        for (int i = 0; i <= two; i++) {
            const size_t m0 = (b + (size_t)i) * HB_AMX_ROWS;
            const size_t mt = M - m0 < HB_AMX_ROWS ? M - m0 : HB_AMX_ROWS;
            store_block(y + m0 * ldy, ldy, c[2 * i], mt, R);
        }
    }
}

/* Prefill: y(M, ldy)[:, 0..32) from two slabs of 16 adjacent rows of W (W0, W0 + 16 K),
 * against the blocks of x two at a time, the configuration for 16 rows loaded. Tiles 0-3:
 * the four (slab, block) sums; 4, 5: the slabs' step of K; 6, 7: the blocks'. A pass runs
 * one chain: the even steps of K, stored, then the odd ones, so that each step loads 2 tiles
 * of W and 2 of x for 4 products (a slab alone loads 3 for 2) and every output is still its
 * even sum plus its odd sum, each in K's order: the bits slab() gives. */
AMX static void slab_pair(float *y, size_t ldy, const uint16_t *xp, size_t M, const uint16_t *W0,
                          size_t K)
{
    const size_t full = K / HB_AMX_K, nkb = (K + HB_AMX_K - 1) / HB_AMX_K;
    const size_t blocks = (M + HB_AMX_ROWS - 1) / HB_AMX_ROWS, slab_k = HB_AMX_ROWS * K;
    const size_t stride = K * sizeof(uint16_t), tile = HB_AMX_ROWS * HB_AMX_K;
    _Alignas(64) uint16_t tail[2][HB_AMX_ROWS * HB_AMX_K]; /* K's last block, zeros past K */
    _Alignas(64) float c[2][4][HB_AMX_ROWS * HB_AMX_ROWS]; /* [chain][tile 0-3] */
    if (full < nkb) {
        memset(tail, 0, sizeof tail);
        for (size_t s = 0; s < 2; s++)
            for (size_t r = 0; r < HB_AMX_ROWS; r++)
                memcpy(tail[s] + r * HB_AMX_K, W0 + s * slab_k + r * K + full * HB_AMX_K,
                       (K - full * HB_AMX_K) * sizeof(uint16_t));
        TILE_FENCE();
    }
    for (size_t b = 0; b < blocks; b += 2) {
        const int two = b + 1 < blocks;
        const uint16_t *x0 = xp + b * nkb * tile, *x1 = x0 + nkb * tile;
        for (size_t chain = 0; chain < 2; chain++) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (size_t kb = chain; kb < nkb; kb += 2) {
                if (b == 0 && chain == 0) /* W's first pass: its even and odd steps ahead */
                    for (size_t l = 0; l < 2 * HB_AMX_ROWS; l++) {
                        const uint16_t *at = W0 + l * K + (kb + HB_AMX_AHEAD) * HB_AMX_K;
                        _mm_prefetch((const char *)at, _MM_HINT_T0);
                        _mm_prefetch((const char *)(at + HB_AMX_K), _MM_HINT_T0);
                    }
                if (kb < full) {
                    _tile_loadd(4, W0 + kb * HB_AMX_K, stride);
                    _tile_loadd(5, W0 + slab_k + kb * HB_AMX_K, stride);
                } else {
                    _tile_loadd(4, tail[0], HB_AMX_K * sizeof(uint16_t));
                    _tile_loadd(5, tail[1], HB_AMX_K * sizeof(uint16_t));
                }
                _tile_loadd(6, x0 + kb * tile, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(2, 5, 6);
                if (two) {
                    _tile_loadd(7, x1 + kb * tile, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, c[chain][0], 64);
            _tile_stored(1, c[chain][1], 64);
            _tile_stored(2, c[chain][2], 64);
            _tile_stored(3, c[chain][3], 64);
        }
        TILE_FENCE();
        for (int t = 0; t < 4; t++) {
            const size_t i = (size_t)(t & 1), s = (size_t)(t >> 1); /* tile t: block i, slab s */
            if (i && !two)
                continue;
            const size_t m0 = (b + i) * HB_AMX_ROWS;
            const size_t mt = M - m0 < HB_AMX_ROWS ? M - m0 : HB_AMX_ROWS;
            add_chains(c[0][t], c[0][t], c[1][t], HB_AMX_ROWS);
            store_block(y + m0 * ldy + s * HB_AMX_ROWS, ldy, c[0][t], mt, HB_AMX_ROWS);
        }
    }
}

AMX static void load_config(size_t M, size_t R) { _tile_loadconfig(&configs[M == 1][R]); }

/* r(16, 16) transposed in registers: unpacks of pairs, shuffles of 64-bit halves, then two
 * rounds of 128-bit lane shuffles. */
AMX static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

/* y(M, ldy)[:, 0..span) = yt(span, 16)^T's first M columns, span a multiple of 16: each
 * 16 rows of yt transposed in registers (from 4 rows of x; below, gathers). */
AMX static void transpose_out(float *y, size_t ldy, const float *yt, size_t M, size_t span)
{
    if (M < 4) {
        const __m512i rows = _mm512_mullo_epi32(lane_ids(), _mm512_set1_epi32(HB_AMX_ROWS));
        for (size_t t = 0; t < M; t++)
            for (size_t n = 0; n < span; n += HB_AMX_ROWS)
                _mm512_storeu_ps(y + t * ldy + n,
                                 _mm512_i32gather_ps(rows, yt + n * HB_AMX_ROWS + t, 4));
        return;
    }
    for (size_t n = 0; n < span; n += HB_AMX_ROWS) {
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = _mm512_load_ps(yt + (n + (size_t)i) * HB_AMX_ROWS);
        transpose16(r);
        for (size_t t = 0; t < M; t++)
            _mm512_storeu_ps(y + t * ldy + n, r[t]);
    }
}

/* A decode step (M = 1, or up to 16 with yt) takes the rows of W as q = nrows / 16 slabs of
 * 16 rows q apart (slab i: rows i, q + i, ..., 15q + i), so that the tiles read 16 streams
 * that each run through a 16th of the call's rows in order (a slab of 16 adjacent rows
 * starts 16 short streams: 16 rows of 768 values are 24 lines each). At M = 1 the tiles
 * have one column, and each slab's 16 sums go to y's columns i, q + i, ...; up to 16 rows,
 * each slab's y^T goes into its rows of yt, then yt, transposed, into y. More rows of x
 * (prefill), or no yt: slabs of adjacent rows, y stored from each. The last nrows % 16 rows:
 * one slab, with a configuration of its own. */
AMX void hb_amx_linear_bf16(float *y, size_t ldy, float *yt, const uint16_t *xp, size_t M,
                            const uint16_t *W, size_t K, size_t nrows)
{
    if (M == 0 || nrows == 0)
        return;
    const size_t q = nrows / HB_AMX_ROWS;
    if (q) {
        load_config(M, HB_AMX_ROWS);
        if (M == 1) {
            for (size_t i = 0; i < q; i++)
                slab(y + i, ldy, NULL, xp, M, W + i * K, K, HB_AMX_ROWS, q);
        } else if (yt && M <= HB_AMX_ROWS) {
            for (size_t i = 0; i < q; i++)
                slab(NULL, 0, yt + i * HB_AMX_ROWS, xp, M, W + i * K, K, HB_AMX_ROWS, q);
            transpose_out(y, ldy, yt, M, q * HB_AMX_ROWS);
        } else {
            size_t i = 0;
            for (; M >= HB_AMX_PAIR_M && i + 1 < q; i += 2)
                slab_pair(y + i * HB_AMX_ROWS, ldy, xp, M, W + i * HB_AMX_ROWS * K, K);
            for (; i < q; i++)
                slab(y + i * HB_AMX_ROWS, ldy, NULL, xp, M, W + i * HB_AMX_ROWS * K, K,
                     HB_AMX_ROWS, 1);
        }
    }
    const size_t n = q * HB_AMX_ROWS;
    if (n < nrows) {
        load_config(M, nrows - n);
        slab(y + n, ldy, NULL, xp, M, W + n * K, K, nrows - n, 1);
    }
    _tile_release();
}

#else /* not x86-64 Linux with GCC or clang: no AMX */

int hb_amx_available(void) { return 0; }
int hb_amx_enabled(void) { return 0; }
void hb_amx_use(int on) { (void)on; }

void hb_amx_linear_bf16(float *y, size_t ldy, float *yt, const uint16_t *xp, size_t M,
                        const uint16_t *W, size_t K, size_t nrows)
{
    (void)y, (void)ldy, (void)yt, (void)xp, (void)M, (void)W, (void)K, (void)nrows;
}
#endif
