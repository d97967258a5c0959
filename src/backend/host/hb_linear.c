/* hb_linear.c: a Linear layer on a host device, y(M, N) = act(x(M, K) W(N, K)^T + b),
 * over the device's threads, with W in fp32 or bf16 (then x is bf16 too).
 *
 * Up to hb_simd's gemv_max_m rows of x (every M with AVX2 or AVX-512; 8 or 16 with the
 * portable loops): hb_simd's GEMV kernels, the output columns split over the threads in
 * tiles of rows of W, so W is read once, at the memory's pace; a bf16 W is read as bf16 and
 * widened in registers, or, from gemv_widen_m rows of x, a tile at a time into the thread's
 * scratch. Each output is the same sum whatever the tile, the thread count or M: with AVX2
 * or AVX-512, a row of y never depends on the other rows of x (batch invariance).
 * Beyond (portable loops): the output columns in pieces of about 512 (fixed by N: the
 * thread count never changes a result), each an OpenBLAS sgemm (single-threaded) on its
 * rows of W, spread over the threads; a bf16 W is widened tile by tile into the thread's
 * scratch, never all of W at once.
 * docs/architecture.md has the measurements behind the choices.
 *
 * bf16 W on a CPU with AMX (hb_amx.h): x packed once into the tiles' layout, then the tile
 * kernel at every M over tiles of rows of W as the GEMV's (at M <= 16, 2 a thread); a step
 * of up to 16 rows of x costs about what one row does.
 *
 * Bias, activation and the bf16 rounding of y apply to each tile right after its sums, on
 * the thread that computed it, in the order be_linear_unfused applies them.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "backend/host/hb_amx.h"
#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"

#define HB_GEMV_TILE 64                 /* rows of W per GEMV piece (M <= 8: at least) */
#define HB_GEMV_ROWS 48                 /* rows of x per pass over a tile (AVX-512's prefill
                                         * kernel takes them 6 at a time) */
#define HB_GEMV_LONG_M 8                /* rows of x up to which the kernels pass over a piece
                                         * of W once, so pieces are long (below) */
#define HB_GEMV_PIECES 4                /* GEMV pieces per thread at M <= 8, at least */
#define HB_AMX_PIECES 2                 /* AMX pieces per thread at M <= 16 */
#define HB_GEMV_INLINE_WORK (64 * 1024) /* M x N x K below which no region is worth it */
#define HB_SGEMM_COLS 512               /* output columns per sgemm call, about */
#define HB_WIDEN_TILE_FLOATS (1u << 20) /* a thread's widened tile of bf16 W: 4 MiB */

typedef struct lin_job {
    be_device *dev;
    const hb_simd *simd;
    int bf16;
    size_t M, N, K;
    const float *x;     /* (M, K) fp32: the input, or the bf16 input widened */
    const uint16_t *xp; /* the bf16 input packed for AMX (hb_amx_pack_x), or NULL */
    const void *W;      /* (N, K) fp32 or bf16 */
    const float *b;     /* (N) or NULL */
    be_act act;
    float *sums;        /* (M, N) the fp32 results: y, or tmp when y is bf16 */
    uint16_t *ybf;      /* (M, N) bf16 y, or NULL */
    size_t cols;        /* output columns per sgemm call (sgemm_cols) */
    size_t wtile;       /* rows of W per widened tile (bf16 GEMM) */
    size_t tile;        /* rows of W per GEMV (or AMX) tile */
    int widen_tile;     /* bf16 W: widen each GEMV tile into the thread's scratch first */
} lin_job;

/* Bias (unless the sums hold it already), activation and rounding of the columns [n0, n0 +
 * nn) of every row. */
static void epilogue_with(const lin_job *j, size_t n0, size_t nn, int with_bias)
{
    if ((!j->b || !with_bias) && j->act == BE_ACT_NONE && !j->ybf)
        return; /* the sums are y already */
    const hb_simd *simd = hb_simd_get();
    for (size_t m = 0; m < j->M; m++) {
        float *s = j->sums + m * j->N + n0;
        for (size_t c = 0; c < nn; c++) {
            float v = s[c];
            if (j->b && with_bias)
                v = pe_k_add(v, j->b[n0 + c]);
            if (j->act == BE_ACT_RELU)
                v = pe_k_relu(v);
            s[c] = v;
        }
        if (j->act == BE_ACT_GELU) /* vectorized: GELU's exponential is most of a prefill's
                                    * non-GEMM time */
            simd->gelu(s, nn);
        if (j->ybf)
            for (size_t c = 0; c < nn; c++)
                j->ybf[m * j->N + n0 + c] = pe_k_to_bf16(s[c]);
    }
}

static void epilogue(const lin_job *j, size_t n0, size_t nn) { epilogue_with(j, n0, nn, 1); }

/* A tile of W against the rows of x, HB_GEMV_ROWS at a time (at large M, when the GEMV path
 * is chosen, a block of x and the tile stay in L2 while they meet). */
static void gemv_cols(void *arg, size_t n0, size_t n1, int thread)
{
    const lin_job *j = arg;
    float *wt = j->widen_tile ? hb_tls(j->dev, thread) : NULL; /* (tile, K) */
    for (size_t nb = n0; nb < n1; nb += j->tile) {
        size_t nn = n1 - nb < j->tile ? n1 - nb : j->tile;
        const float *wf = (const float *)j->W + nb * j->K;
        if (j->xp) { /* AMX: every row of x in one call */
            float *yt = j->M <= HB_AMX_ROWS ? hb_tls(j->dev, thread) : NULL;
            hb_amx_linear_bf16(j->sums + nb, j->N, yt, j->xp, j->M,
                               (const uint16_t *)j->W + nb * j->K, j->K, nn);
            epilogue(j, nb, nn);
            continue;
        }
        if (wt) { /* the same values as the bf16 kernel widens in registers: the same bits */
            j->simd->widen(wt, (const uint16_t *)j->W + nb * j->K, nn * j->K);
            wf = wt;
        }
        for (size_t mb = 0; mb < j->M; mb += HB_GEMV_ROWS) {
            size_t mm = j->M - mb < HB_GEMV_ROWS ? j->M - mb : HB_GEMV_ROWS;
            float *out = j->sums + mb * j->N + nb;
            const float *x = j->x + mb * j->K;
            if (j->bf16 && !wt)
                j->simd->gemv_bf16(out, j->N, x, mm, (const uint16_t *)j->W + nb * j->K, j->K,
                                   nn);
            else
                j->simd->gemv_f32(out, j->N, x, mm, wf, j->K, nn);
        }
        epilogue(j, nb, nn);
    }
}

/* C(M, nn) = b + x(M, K) . Wt(nn, K)^T into the sums' columns from n0, one OpenBLAS call:
 * the bias is written first and the GEMM adds to it (beta 1), so no pass over C zeroes it
 * and no pass adds the bias after. Then the epilogue's activation and rounding. */
static void sgemm_call(const lin_job *j, const float *Wt, size_t n0, size_t nn)
{
    float beta = 0.0f;
    if (j->b) {
        for (size_t m = 0; m < j->M; m++)
            memcpy(j->sums + m * j->N + n0, j->b + n0, nn * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->M, (blasint)nn,
                (blasint)j->K, 1.0f, j->x, (blasint)j->K, Wt, (blasint)j->K, beta,
                j->sums + n0, (blasint)j->N);
    epilogue_with(j, n0, nn, 0);
}

/* Columns [n0, n1), n0 a multiple of the call width: one sgemm per call width (fp32 W), or
 * per widened tile of each (bf16 W), at boundaries that depend on N and K alone. */
static void gemm_cols(void *arg, size_t n0, size_t n1, int thread)
{
    const lin_job *j = arg;
    float *wt = hb_tls(j->dev, thread); /* (wtile, K) */
    for (size_t cb = n0; cb < n1; cb += j->cols) {
        size_t ce = n1 - cb < j->cols ? n1 : cb + j->cols;
        if (!j->bf16) {
            sgemm_call(j, (const float *)j->W + cb * j->K, cb, ce - cb);
            continue;
        }
        for (size_t nb = cb; nb < ce; nb += j->wtile) {
            size_t nn = ce - nb < j->wtile ? ce - nb : j->wtile;
            j->simd->widen(wt, (const uint16_t *)j->W + nb * j->K, nn * j->K);
            sgemm_call(j, wt, nb, nn);
        }
    }
}

typedef struct pack_job {
    uint16_t *xp;
    const uint16_t *x;
    size_t M, K;
} pack_job;

static void pack_blocks(void *arg, size_t b0, size_t b1, int thread)
{
    const pack_job *j = arg;
    (void)thread;
    hb_amx_pack_x(j->xp, j->x, j->M, j->K, b0, b1);
}

typedef struct widen_job {
    const hb_simd *simd;
    float *dst;
    const uint16_t *src;
    size_t K;
} widen_job;

static void widen_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const widen_job *j = arg;
    (void)thread;
    j->simd->widen(j->dst + r0 * j->K, j->src + r0 * j->K, (r1 - r0) * j->K);
}

/* Output columns per sgemm call: about HB_SGEMM_COLS, an even number of calls, multiples
 * of 16, from N alone. OpenBLAS's result for a column depends on the call it is in (its
 * small-matrix kernels sum in another order; measured: one slice per thread gave other
 * bits on 1, 2 and 3 threads for 3 shapes in 25), so the calls must not depend on the
 * thread count. */
static size_t sgemm_cols(size_t N)
{
    size_t n = (N + HB_SGEMM_COLS - 1) / HB_SGEMM_COLS;
    if (n > 1 && n % 2)
        n++;
    size_t w = (N + n - 1) / n;
    return (w + 15) / 16 * 16;
}

pe_status hb_linear(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                    const void *x, const void *W, const float *b, be_act act, void *y,
                    int y_bf16, float *tmp)
{
    return hb_linear_with(dev, HB_LINEAR_AUTO, dtype, M, N, K, x, W, b, act, y, y_bf16, tmp);
}

pe_status hb_linear_with(be_device *dev, hb_linear_path path, pe_dtype dtype, size_t M,
                         size_t N, size_t K, const void *x, const void *W, const float *b,
                         be_act act, void *y, int y_bf16, float *tmp)
{
    if (y_bf16 && (dtype != PE_DTYPE_BF16 || !tmp))
        return hb_fail(dev, PE_EINVAL, "linear: a bf16 output needs dtype bf16 and a tmp "
                                       "buffer of M x N floats");
    if (dtype != PE_DTYPE_FP32 && dtype != PE_DTYPE_BF16)
        return hb_fail(dev, PE_EINVAL, "linear on host device %d: dtype %d is not fp32 or bf16",
                       dev->id, (int)dtype);
    if (M > HB_BLAS_MAX || N > HB_BLAS_MAX || K > HB_BLAS_MAX)
        return hb_fail(dev, PE_EINVAL,
                       "linear on host device %d: M=%zu N=%zu K=%zu exceeds what BLAS accepts "
                       "(%zu); split the layer",
                       dev->id, M, N, K, (size_t)HB_BLAS_MAX);
    if (M == 0 || N == 0)
        return PE_OK;
    HB_NEED(dev, y, 1, "linear");
    HB_NEED(dev, x, K, "linear");
    HB_NEED(dev, W, K, "linear");
    const int bf16 = dtype == PE_DTYPE_BF16;
    lin_job j = {dev,  hb_simd_get(), bf16, M, N, K, x, NULL, W, b, act,
                 y_bf16 ? tmp : y, y_bf16 ? y : NULL, 0, 0, 0, 0};
    if (K == 0) { /* empty sums: y = act(b) */
        for (size_t m = 0; m < M; m++)
            for (size_t n = 0; n < N; n++)
                j.sums[m * N + n] = 0.0f;
        epilogue(&j, 0, N);
        return PE_OK;
    }
    j.cols = sgemm_cols(N);
    if (path == HB_LINEAR_AMX && (!bf16 || !hb_amx_available()))
        return hb_fail(dev, PE_EINVAL, "linear on host device %d: the AMX path takes bf16 W, "
                       "on a CPU and kernel that run AMX tiles (%s)", dev->id,
                       !bf16 ? "W is fp32" : "this one has no AMX");
    const int amx =
        bf16 && (path == HB_LINEAR_AMX || (path == HB_LINEAR_AUTO && hb_amx_enabled()));
    const int gemv = amx || path == HB_LINEAR_GEMV ||
                     (path == HB_LINEAR_AUTO && M <= j.simd->gemv_max_m[bf16]);
    if (amx) { /* x packed into the tiles' layout, M x K: small next to W */
        size_t blocks = (M + HB_AMX_ROWS - 1) / HB_AMX_ROWS;
        uint16_t *xp = hb_call_scratch(dev, hb_amx_packed_size(M, K) * sizeof *xp, "linear");
        if (!xp)
            return PE_ENOMEM;
        pack_job pj = {xp, x, M, K};
        hb_for(dev, blocks, (hb_row_grain(K) + HB_AMX_ROWS - 1) / HB_AMX_ROWS, pack_blocks,
               &pj);
        j.xp = xp;
    } else if (bf16) { /* x widened to fp32 (exact), M x K: small next to W */
        float *xf = hb_call_scratch(dev, M * K * sizeof *xf, "linear");
        if (!xf)
            return PE_ENOMEM;
        widen_job wj = {j.simd, xf, x, K};
        hb_for(dev, M, hb_row_grain(K), widen_rows, &wj);
        j.x = xf;
    }
    if (gemv) {
        double work = (double)M * (double)N * (double)K;
        j.tile = HB_GEMV_TILE;
        /* up to 8 rows of x, every kernel reads a piece of W once (M <= 2: 4 streams from
         * its quarters; AVX-512 at 3-8: the same 4 streams by every row of x; AVX2 at 3-8:
         * one stream), so pieces of N / (HB_GEMV_PIECES x threads) rows let the streams run
         * long (decode steps of 3-8 sequences up to 19% faster than in pieces of 64 rows:
         * docs/architecture.md); beyond, further passes of x re-read a piece, from the
         * caches while it is 64 rows */
        if (M <= HB_GEMV_LONG_M || (amx && M <= HB_AMX_ROWS)) {
            size_t pieces = (size_t)(amx ? HB_AMX_PIECES : HB_GEMV_PIECES) *
                            (size_t)hb_compute_threads(dev);
            size_t tile = (N + pieces - 1) / pieces;
            j.tile = tile > HB_GEMV_TILE ? (tile + 15) / 16 * 16 : HB_GEMV_TILE;
            if (amx) { /* the tile's y^T, 16 floats a row of W (hb_amx_linear_bf16) */
                pe_status s = hb_scratch_reserve(dev, j.tile * HB_AMX_ROWS * sizeof(float),
                                                 "linear");
                if (s != PE_OK)
                    return s;
            }
        }
        if (bf16 && !amx && M >= j.simd->gemv_widen_m) {
            /* tiles of 64 rows, or fewer where K is long (a multiple of 8, which every
             * version's tiles of W divide), so that a widened tile stays within
             * HB_WIDEN_TILE_FLOATS */
            size_t rows = HB_WIDEN_TILE_FLOATS / K / 8 * 8;
            j.tile = rows < 8 ? 8 : rows < j.tile ? rows : j.tile;
            pe_status s = hb_scratch_reserve(dev, j.tile * K * sizeof(float), "linear");
            if (s != PE_OK)
                return s;
            j.widen_tile = 1;
        }
        hb_for(dev, N, work < HB_GEMV_INLINE_WORK ? N : j.tile, gemv_cols, &j);
        return PE_OK;
    }
    if (bf16) {
        size_t rows = HB_WIDEN_TILE_FLOATS / K;
        j.wtile = rows < 16 ? 16 : rows / 16 * 16;
        pe_status s = hb_scratch_reserve(dev, j.wtile * K * sizeof(float), "linear");
        if (s != PE_OK)
            return s;
    }
    hb_for(dev, N, j.cols, gemm_cols, &j);
    return PE_OK;
}
