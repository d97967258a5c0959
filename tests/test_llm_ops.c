/* test_llm_ops.c: the host backend's decoder operations against independent expectations:
 * RMSNorm, RoPE, SwiGLU's product, the bf16 embedding table, kv_append, paged attention,
 * argmax, top-k with log-sum-exp, the sampling penalties, structured output's masks, and
 * sampling.
 *
 * References are the naive twins of src/kernels (pe_k_attend_naive, pe_k_sample_row,
 * pe_k_rope_head) or loops written here in double; hand-computed cases where easy. Inputs
 * are random (never zeros) and outputs are poisoned with NaN first, so an element the op
 * forgets to write fails the comparison. Every op also runs with 1 and 2 compute threads,
 * which must give the same bits: no op's split over threads changes the order of a sum.
 */
#include "test_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host/hb_amx.h"
#include "backend/host/hb_simd.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"
#include "kernels/sample.h"

static const be_ops *ops;

static int setup(void **state)
{
    be_device *dev = NULL;
    pe_err err = {{0}};
    if (ops->open(0, &dev, &err) != PE_OK)
        return -1;
    *state = dev;
    return 0;
}

static int teardown(void **state)
{
    ops->close(*state);
    return 0;
}

/* The thread counts every op runs with. */
static const int thread_counts[] = {1, 2};
enum { NCOUNTS = sizeof thread_counts / sizeof thread_counts[0] };

static void use_threads(be_device *dev, int n)
{
    if (ops->set_compute_threads(dev, n) != PE_OK)
        fail_msg("set_compute_threads(%d): %s", n, ops->last_error(dev));
    assert_int_equal(ops->compute_threads(dev), n);
}

static float *fvec(size_t n, uint64_t seed, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] == 0.0f ? scale * 0.5f : x[i] * scale; /* never exactly zero */
    return x;
}

static float *poisoned(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* Asserts a[i] and b[i] have the same bits (NaNs included) for i < n. */
static void assert_same_bits(const void *a, const void *b, size_t bytes, const char *what,
                             int threads)
{
    if (memcmp(a, b, bytes) != 0)
        fail_msg("%s: %d threads gave other bits than 1 thread", what, threads);
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

static void test_rmsnorm_of_a_known_row(void **state)
{
    be_device *dev = *state;
    /* x = (1, 2, 3, 4): mean of squares 30 / 4 = 7.5 */
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f}, out[4] = {NAN, NAN, NAN, NAN};
    assert_int_equal(ops->rmsnorm(dev, out, x, w, 1, 4, 0.0f), PE_OK);
    for (int i = 0; i < 4; i++)
        assert_float_equal(out[i], w[i] * x[i] / sqrt(7.5), 1e-6);
    /* in place, with eps: 1 / sqrt(7.5 + 0.5) */
    assert_int_equal(ops->rmsnorm(dev, x, x, w, 1, 4, 0.5f), PE_OK);
    const float orig[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        assert_float_equal(x[i], w[i] * orig[i] / sqrt(8.0), 1e-6);
}

static void test_rmsnorm_matches_double_reference(void **state)
{
    be_device *dev = *state;
    const size_t shapes[][2] = {{1, 1}, {3, 7}, {5, 768}, {tu_small() ? 9 : 70, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        float *x = fvec(n, 10 + s, 3.0f), *w = fvec(cols, 20 + s, 1.5f);
        float *first = NULL;
        for (int c = 0; c < NCOUNTS; c++) {
            use_threads(dev, thread_counts[c]);
            float *out = poisoned(n);
            assert_int_equal(ops->rmsnorm(dev, out, x, w, rows, cols, 1e-5f), PE_OK);
            for (size_t r = 0; r < rows; r++) {
                double ss = 0;
                for (size_t i = 0; i < cols; i++)
                    ss += (double)x[r * cols + i] * x[r * cols + i];
                double rstd = 1.0 / sqrt(ss / (double)cols + 1e-5);
                for (size_t i = 0; i < cols; i++) {
                    double want = (double)w[i] * x[r * cols + i] * rstd;
                    double got = out[r * cols + i];
                    if (!(fabs(got - want) <= 1e-5 * fabs(want) + 1e-6))
                        fail_msg("rmsnorm %zux%zu [%zu][%zu] = %.9g, want %.9g", rows, cols, r,
                                 i, got, want);
                }
            }
            if (first)
                assert_same_bits(out, first, n * sizeof *out, "rmsnorm", thread_counts[c]);
            free(first);
            first = out;
        }
        free(first);
        free(x);
        free(w);
    }
    float v = 1.0f;
    assert_int_equal(ops->rmsnorm(dev, &v, &v, &v, 1, 0, 1e-5f), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "rmsnorm"));
    assert_int_equal(ops->rmsnorm(dev, &v, &v, NULL, 1, 1, 1e-5f), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "host device"));
    assert_int_equal(ops->rmsnorm(dev, &v, &v, &v, 1, 1, -1.0f), PE_EINVAL);
    assert_int_equal(ops->rmsnorm(dev, NULL, NULL, NULL, 0, 4, 1e-5f), PE_OK);
}

/* ---- RoPE ------------------------------------------------------------------------------- */

static void test_rope_of_a_known_vector_at_position_1(void **state)
{
    be_device *dev = *state;
    /* head_dim 4: pairs (0, 2) and (1, 3) turn by 1 * inv_freq = 0.5 and 0.25 rad */
    float x[4] = {1, 2, 3, 4}, inv_freq[2] = {0.5f, 0.25f};
    int32_t pos = 1;
    assert_int_equal(ops->rope(dev, x, 1, 4, 1, 4, &pos, inv_freq), PE_OK);
    assert_float_equal(x[0], 1 * cos(0.5) - 3 * sin(0.5), 1e-6);
    assert_float_equal(x[2], 3 * cos(0.5) + 1 * sin(0.5), 1e-6);
    assert_float_equal(x[1], 2 * cos(0.25) - 4 * sin(0.25), 1e-6);
    assert_float_equal(x[3], 4 * cos(0.25) + 2 * sin(0.25), 1e-6);
    /* position 0 turns nothing */
    float y[4] = {1, 2, 3, 4};
    pos = 0;
    assert_int_equal(ops->rope(dev, y, 1, 4, 1, 4, &pos, inv_freq), PE_OK);
    assert_true(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
}

/* Every head of every row equals pe_k_rope_head's, bit for bit; the columns past the heads
 * (the stride's gap) are not touched. */
static void test_rope_equals_the_kernel_per_head(void **state)
{
    be_device *dev = *state;
    const size_t hds[] = {2, 6, 64, 128};
    for (size_t t = 0; t < sizeof hds / sizeof hds[0]; t++) {
        size_t hd = hds[t], nheads = 5, rows = tu_small() ? 30 : 41; /* hd 128: 2 pieces */
        size_t stride = nheads * hd + 3, n = rows * stride;
        float *x = fvec(n, 30 + t, 2.0f), *inv = malloc(hd / 2 * sizeof *inv);
        for (size_t i = 0; i < hd / 2; i++) /* Llama's: theta^(-2i/hd), theta = 10000 */
            inv[i] = (float)pow(10000.0, -2.0 * (double)i / (double)hd);
        int32_t *pos = malloc(rows * sizeof *pos);
        for (size_t r = 0; r < rows; r++)
            pos[r] = (int32_t)((r * 977) % 5000);
        float *want = malloc(n * sizeof *want);
        memcpy(want, x, n * sizeof *x);
        for (size_t r = 0; r < rows; r++)
            for (size_t h = 0; h < nheads; h++)
                pe_k_rope_head(want + r * stride + h * hd, (int)hd, pos[r], inv);
        for (int c = 0; c < NCOUNTS; c++) {
            use_threads(dev, thread_counts[c]);
            float *got = malloc(n * sizeof *got);
            memcpy(got, x, n * sizeof *x);
            assert_int_equal(ops->rope(dev, got, rows, stride, nheads, hd, pos, inv), PE_OK);
            if (memcmp(got, want, n * sizeof *got) != 0)
                fail_msg("rope hd=%zu with %d threads differs from pe_k_rope_head", hd,
                         thread_counts[c]);
            free(got);
        }
        free(x);
        free(inv);
        free(pos);
        free(want);
    }
    float v[4] = {1, 2, 3, 4}, inv[2] = {1, 1};
    int32_t pos = 1, neg = -1;
    assert_int_equal(ops->rope(dev, v, 1, 4, 1, 3, &pos, inv), PE_EINVAL); /* odd head_dim */
    assert_non_null(strstr(ops->last_error(dev), "head_dim=3"));
    assert_int_equal(ops->rope(dev, v, 2, 3, 1, 4, &pos, inv), PE_EINVAL); /* short stride */
    assert_int_equal(ops->rope(dev, v, 1, 4, 1, 4, &neg, inv), PE_EINVAL);
    assert_int_equal(ops->rope(dev, v, 1, 4, 1, 4, NULL, inv), PE_EINVAL);
}

/* ---- SwiGLU's product ---------------------------------------------------------------------- */

static void test_silu_mul_matches_the_formula(void **state)
{
    be_device *dev = *state;
    size_t rows = tu_small() ? 20 : 33, n = 1000; /* pieces of 16 rows */
    float *gu = fvec(rows * 2 * n, 40, 8.0f);
    float *first = NULL;
    for (int c = 0; c < NCOUNTS; c++) {
        use_threads(dev, thread_counts[c]);
        float *out = poisoned(rows * n);
        assert_int_equal(ops->silu_mul(dev, out, gu, rows, n), PE_OK);
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < n; i++) {
                double g = gu[r * 2 * n + i], u = gu[r * 2 * n + n + i];
                double want = g / (1.0 + exp(-g)) * u, got = out[r * n + i];
                if (!(fabs(got - want) <= 4 * FLT_EPSILON * fabs(want) + 1e-30))
                    fail_msg("silu_mul [%zu][%zu] = %.9g, want %.9g", r, i, got, want);
            }
        if (first)
            assert_same_bits(out, first, rows * n * sizeof *out, "silu_mul", thread_counts[c]);
        free(first);
        first = out;
    }
    /* in place: out over gate_up's first half of the buffer */
    for (int c = 0; c < NCOUNTS; c++) {
        use_threads(dev, thread_counts[c]);
        float *buf = malloc(rows * 2 * n * sizeof *buf);
        memcpy(buf, gu, rows * 2 * n * sizeof *buf);
        assert_int_equal(ops->silu_mul(dev, buf, buf, rows, n), PE_OK);
        assert_memory_equal(buf, first, rows * n * sizeof *buf);
        free(buf);
    }
    assert_int_equal(ops->silu_mul(dev, first, NULL, rows, n), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "silu_mul"));
    free(first);
    free(gu);
}

/* ---- embedding with a bf16 table --------------------------------------------------------- */

static void test_embedding_reads_a_bf16_table_exactly(void **state)
{
    be_device *dev = *state;
    size_t vocab = 40, dim = 24, n = 6;
    float *t = fvec(vocab * dim, 50, 4.0f);
    uint16_t *tb = malloc(vocab * dim * sizeof *tb);
    for (size_t i = 0; i < vocab * dim; i++)
        tb[i] = pe_k_to_bf16(t[i]);
    int32_t ids[6] = {39, 0, 5, 5, 17, 38};
    float *out = poisoned(n * dim);
    assert_int_equal(ops->embedding(dev, PE_DTYPE_BF16, out, tb, ids, n, dim, vocab, 0, vocab), PE_OK);
    for (size_t i = 0; i < n; i++)
        for (size_t d = 0; d < dim; d++)
            assert_true(out[i * dim + d] == pe_k_from_bf16(tb[(size_t)ids[i] * dim + d]));
    int32_t bad = 40;
    assert_int_equal(ops->embedding(dev, PE_DTYPE_BF16, out, tb, &bad, 1, dim, vocab, 0, vocab),
                     PE_EINVAL);
    free(t);
    free(tb);
    free(out);
}

/* ---- the KV pool ------------------------------------------------------------------------- */

typedef struct pool {
    be_kv kv;
    size_t elems;
} pool;

/* A pool with random contents (so reads of unwritten slots give garbage, not zeros). */
static pool make_pool(pe_dtype dt, int nlayers, int kvh, int B, int hd, size_t nblocks,
                      uint64_t seed)
{
    pool p = {.kv = {.dtype = dt,
                     .shape = {.nlayers = nlayers, .kv_heads = kvh, .block_tokens = B,
                               .head_dim = hd, .nblocks = nblocks}}};
    p.elems = nblocks * pe_k_kv_block_elems(p.kv.shape);
    float *v = fvec(p.elems, seed, 1.0f);
    if (dt == PE_DTYPE_BF16) {
        uint16_t *h = malloc(p.elems * sizeof *h);
        for (size_t i = 0; i < p.elems; i++)
            h[i] = pe_k_to_bf16(v[i]);
        free(v);
        p.kv.base = h;
    } else {
        p.kv.base = v;
    }
    return p;
}

static size_t pool_bytes(const pool *p)
{
    return p->elems * (p->kv.dtype == PE_DTYPE_BF16 ? 2 : 4);
}

/* A small pool with hand-picked slots, and a prefill-sized step (300 rows of 4 heads of 64,
 * split over the threads) at scattered slots. */
static void test_kv_append_stores_at_the_slots(void **state)
{
    be_device *dev = *state;
    for (int run = 0; run < 4; run++) {
        const int big = run >> 1, bf = run & 1;
        pe_dtype dt = bf ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
        const int nlayers = 3, kvh = big ? 4 : 2, B = big ? 16 : 4, hd = big ? 64 : 6;
        const int layer = 1;
        size_t nblocks = big ? 40 : 5, rows = big ? 300 : 7;
        size_t stride = 3 * (size_t)kvh * hd; /* a fused qkv row */
        pool p = make_pool(dt, nlayers, kvh, B, hd, nblocks, 60 + bf);
        void *before = malloc(pool_bytes(&p));
        memcpy(before, p.kv.base, pool_bytes(&p));
        float *qkv = fvec(rows * stride, 61, 3.0f);
        const float *k = qkv + (size_t)kvh * hd, *v = qkv + 2 * (size_t)kvh * hd;
        int32_t *slots = malloc(rows * sizeof *slots);
        const int32_t few[7] = {0, 3, 4, 19, 10, 11, 7}; /* blocks 0, 0, 1, 4, 2, 2, 1 */
        for (size_t r = 0; r < rows; r++) /* 7 is coprime to the 640 slots: all distinct */
            slots[r] = big ? (int32_t)((r * 7 + 5) % (nblocks * (size_t)B)) : few[r];
        void *first = NULL;
        for (int c = 0; c < NCOUNTS; c++) {
            use_threads(dev, thread_counts[c]);
            memcpy(p.kv.base, before, pool_bytes(&p));
            assert_int_equal(ops->kv_append(dev, &p.kv, layer, k, v, stride, slots, rows),
                             PE_OK);
            /* every element: written ones hold the (rounded) value, the others are as before */
            unsigned char *hit = calloc(p.elems, 1);
            for (size_t r = 0; r < rows; r++)
                for (int h = 0; h < kvh; h++)
                    for (int d = 0; d < hd; d++)
                        for (int which = 0; which < 2; which++) {
                            size_t i = pe_k_kv_index(p.kv.shape, slots[r] / B, layer, which, h,
                                                     slots[r] % B) +
                                       (size_t)d;
                            float src = (which ? v : k)[r * stride + (size_t)h * hd + d];
                            float want = bf ? pe_k_round_bf16(src) : src;
                            assert_true(pe_k_load_elem(p.kv.base, bf, i) == want);
                            hit[i] = 1;
                        }
            for (size_t i = 0; i < p.elems; i++)
                if (!hit[i])
                    assert_true(pe_k_load_elem(p.kv.base, bf, i) == pe_k_load_elem(before, bf, i));
            free(hit);
            if (first)
                assert_same_bits(p.kv.base, first, pool_bytes(&p), "kv_append",
                                 thread_counts[c]);
            else {
                first = malloc(pool_bytes(&p));
                memcpy(first, p.kv.base, pool_bytes(&p));
            }
        }
        /* a slot outside the pool: PE_EINVAL, a message naming it, the pool unchanged */
        memcpy(p.kv.base, before, pool_bytes(&p));
        int32_t bad[2] = {1, (int32_t)(nblocks * (size_t)B)};
        char want[32];
        snprintf(want, sizeof want, "slot %d", (int)bad[1]);
        assert_int_equal(ops->kv_append(dev, &p.kv, layer, k, v, stride, bad, 2), PE_EINVAL);
        assert_non_null(strstr(ops->last_error(dev), want));
        assert_memory_equal(p.kv.base, before, pool_bytes(&p));
        assert_int_equal(ops->kv_append(dev, &p.kv, 3, k, v, stride, slots, 1), PE_EINVAL);
        assert_non_null(strstr(ops->last_error(dev), "layer 3"));
        assert_int_equal(ops->kv_append(dev, &p.kv, layer, k, NULL, stride, slots, 1),
                         PE_EINVAL);
        free(first);
        free(before);
        free(qkv);
        free(slots);
        free(p.kv.base);
    }
}

/* ---- attention ----------------------------------------------------------------------------- */

static void test_attention_of_two_keys_by_hand(void **state)
{
    be_device *dev = *state;
    /* one head of dim 2, keys at positions 0 and 1, the query at position 1 */
    pool p = make_pool(PE_DTYPE_FP32, 1, 1, 4, 2, 1, 70);
    float *pk = p.kv.base;
    const float k0[2] = {1, 0}, k1[2] = {0, 1}, v0[2] = {1, 2}, v1[2] = {3, 4};
    memcpy(pk + pe_k_kv_index(p.kv.shape, 0, 0, 0, 0, 0), k0, sizeof k0);
    memcpy(pk + pe_k_kv_index(p.kv.shape, 0, 0, 0, 0, 1), k1, sizeof k1);
    memcpy(pk + pe_k_kv_index(p.kv.shape, 0, 0, 1, 0, 0), v0, sizeof v0);
    memcpy(pk + pe_k_kv_index(p.kv.shape, 0, 0, 1, 0, 1), v1, sizeof v1);
    float q[2] = {2, 0}, out[2] = {NAN, NAN};
    int32_t chunk[PE_K_CHUNK_FIELDS] = {0, 1, 1, 0}, bt[1] = {0};
    be_attn a = {.rows = 1, .q = q, .q_stride = 2, .out = out, .out_stride = 2, .heads = 1,
                 .scale = 0.5f, .window = 0, .nchunks = 1, .chunks = chunk,
                 .block_tables = bt, .max_keys = 2};
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_OK);
    /* scores 0.5 * (2, 0) = (1, 0): weights e / (e + 1) and 1 / (e + 1) */
    double p0 = exp(1.0) / (exp(1.0) + 1.0), p1 = 1.0 - p0;
    assert_float_equal(out[0], p0 * 1 + p1 * 3, 1e-6);
    assert_float_equal(out[1], p0 * 2 + p1 * 4, 1e-6);
    /* a window of 1: only the key at the query's own position */
    a.window = 1;
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_OK);
    assert_float_equal(out[0], 3, 1e-6);
    assert_float_equal(out[1], 4, 1e-6);
    free(p.kv.base);
}

typedef struct attn_case {
    const char *name;
    pe_dtype dtype;
    int heads, kv_heads, head_dim, block_tokens;
    int32_t window;
    int nchunks;
    int32_t n[6], pos0[6]; /* each chunk's tokens and first position */
} attn_case;

/* A row's output has the same bits whatever chunk it is computed in (batch invariance):
 * each chunk of step a, cut into pieces of `piece` rows run as steps of their own (1: every
 * row a decode), gives the bits of the whole step, `whole`. */
static void check_rows_in_pieces(be_device *dev, const be_kv *kv, int layer, const be_attn *a,
                                 const float *whole, int32_t piece, const char *name)
{
    const size_t width = (size_t)a->heads * (size_t)kv->shape.head_dim;
    float *out = poisoned(a->rows * a->out_stride);
    for (size_t c = 0; c < a->nchunks; c++) {
        const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
        for (int32_t i = 0; i < ch[PE_K_CHUNK_N]; i += piece) {
            const int32_t n = ch[PE_K_CHUNK_N] - i < piece ? ch[PE_K_CHUNK_N] - i : piece;
            int32_t part[PE_K_CHUNK_FIELDS];
            part[PE_K_CHUNK_ROW0] = ch[PE_K_CHUNK_ROW0] + i;
            part[PE_K_CHUNK_N] = n;
            part[PE_K_CHUNK_POS0] = ch[PE_K_CHUNK_POS0] + i;
            part[PE_K_CHUNK_BT] = ch[PE_K_CHUNK_BT];
            be_attn one = *a;
            one.nchunks = 1;
            one.chunks = part;
            one.out = out;
            if (ops->attention(dev, kv, layer, &one) != PE_OK)
                fail_msg("%s: attention of rows %d..%d alone: %s", name, i, i + n - 1,
                         ops->last_error(dev));
            for (int32_t r = 0; r < n; r++) {
                const size_t at = (size_t)(part[PE_K_CHUNK_ROW0] + r) * a->out_stride;
                if (memcmp(out + at, whole + at, width * sizeof *out) != 0)
                    fail_msg("%s: chunk %zu's row %d in a piece of %d rows gave other bits "
                             "than in the whole step",
                             name, c, i + r, n);
            }
        }
    }
    free(out);
}

/* Runs one step of chunks through attention with every thread count, and checks each
 * query head of each row against pe_k_attend_naive. Rows outside every chunk and the
 * stride's gaps stay NaN. Then each row alone and in pieces of 3 rows gives its bits in the
 * step. */
static void check_attention(be_device *dev, const attn_case *tc, uint64_t seed)
{
    const int H = tc->heads, KVH = tc->kv_heads, hd = tc->head_dim, B = tc->block_tokens;
    const int nlayers = 2, layer = 1, bf = tc->dtype == PE_DTYPE_BF16;
    /* chunks laid out in order with one unused row between them */
    int32_t chunks[6][PE_K_CHUNK_FIELDS];
    size_t rows = 0, bt_len = 0, nblocks = 0;
    int32_t max_keys = 0;
    for (int c = 0; c < tc->nchunks; c++) {
        int32_t keys = tc->pos0[c] + tc->n[c];
        chunks[c][PE_K_CHUNK_ROW0] = (int32_t)rows;
        chunks[c][PE_K_CHUNK_N] = tc->n[c];
        chunks[c][PE_K_CHUNK_POS0] = tc->pos0[c];
        chunks[c][PE_K_CHUNK_BT] = (int32_t)bt_len;
        rows += (size_t)tc->n[c] + 1;
        bt_len += (size_t)(keys + B - 1) / (size_t)B;
        max_keys = keys > max_keys ? keys : max_keys;
    }
    nblocks = bt_len + 3;
    /* each chunk's blocks: a scattered permutation of the pool's blocks */
    int32_t *bt = malloc(bt_len * sizeof *bt);
    for (size_t i = 0; i < bt_len; i++)
        bt[i] = (int32_t)((i * 7 + 2) % nblocks);
    pool p = make_pool(tc->dtype, nlayers, KVH, B, hd, nblocks, seed);
    size_t q_stride = (size_t)(H + 2 * KVH) * hd + 2, out_stride = (size_t)H * hd + 5;
    float *q = fvec(rows * q_stride, seed + 1, 1.0f);
    float scale = 1.0f / sqrtf((float)hd);
    be_attn a = {.rows = rows, .q = q, .q_stride = q_stride, .out_stride = out_stride,
                 .heads = H, .scale = scale, .window = tc->window,
                 .nchunks = (size_t)tc->nchunks, .chunks = &chunks[0][0], .block_tables = bt,
                 .max_keys = max_keys};
    float *want = poisoned(rows * out_stride), *scores = malloc((size_t)max_keys * 4);
    unsigned char *in_chunk = calloc(rows, 1);
    for (int c = 0; c < tc->nchunks; c++)
        for (int32_t i = 0; i < tc->n[c]; i++) {
            size_t r = (size_t)chunks[c][PE_K_CHUNK_ROW0] + (size_t)i;
            in_chunk[r] = 1;
            for (int h = 0; h < H; h++)
                pe_k_attend_naive(want + r * out_stride + (size_t)h * hd,
                                  q + r * q_stride + (size_t)h * hd, p.kv.base, bf,
                                  p.kv.shape, layer, h / (H / KVH),
                                  bt + chunks[c][PE_K_CHUNK_BT], tc->pos0[c] + i, tc->window,
                                  scale, scores);
        }
    float *first = NULL;
    for (int c = 0; c < NCOUNTS; c++) {
        use_threads(dev, thread_counts[c]);
        float *out = poisoned(rows * out_stride);
        a.out = out;
        if (ops->attention(dev, &p.kv, layer, &a) != PE_OK)
            fail_msg("%s: attention: %s", tc->name, ops->last_error(dev));
        for (size_t r = 0; r < rows; r++)
            for (size_t e = 0; e < out_stride; e++) {
                float g = out[r * out_stride + e], w = want[r * out_stride + e];
                if (!in_chunk[r] || e >= (size_t)H * hd) {
                    if (!isnan(g))
                        fail_msg("%s: out[%zu][%zu] outside the chunks was written", tc->name,
                                 r, e);
                } else if (!(fabsf(g - w) <= 2e-5f))
                    fail_msg("%s (%d threads): out[%zu][%zu] (head %zu) = %.9g, naive %.9g",
                             tc->name, thread_counts[c], r, e, e / (size_t)hd, (double)g,
                             (double)w);
            }
        if (first)
            assert_same_bits(out, first, rows * out_stride * sizeof *out, tc->name,
                             thread_counts[c]);
        free(first);
        first = out;
    }
    check_rows_in_pieces(dev, &p.kv, layer, &a, first, 1, tc->name);
    check_rows_in_pieces(dev, &p.kv, layer, &a, first, 3, tc->name);
    free(first);
    free(want);
    free(scores);
    free(in_chunk);
    free(q);
    free(bt);
    free(p.kv.base);
}

static void test_attention_matches_the_naive_twin(void **state)
{
    be_device *dev = *state;
    const int small = tu_small();
    const attn_case cases[] = {
        /* decode steps: one token per chunk, positions in and across blocks */
        {"decode fp32 hd64", PE_DTYPE_FP32, 4, 4, 64, 16, 0, 4, {1, 1, 1, 1}, {0, 9, 16, 70}},
        {"decode bf16 hd128 GQA", PE_DTYPE_BF16, 8, 2, 128, 16, 0, 3, {1, 1, 1}, {5, 33, 47}},
        /* prefill chunks (causal inside), one starting after cached positions, with decodes */
        {"mixed fp32 GQA", PE_DTYPE_FP32, 6, 2, 64, 16, 0, 4, {1, 21, 1, 40}, {12, 0, 63, 7}},
        {"mixed bf16", PE_DTYPE_BF16, 3, 3, 64, 8, 0, 3, {17, 1, 5}, {3, 30, 0}},
        /* sliding windows shorter than the history, inside and across blocks */
        {"window fp32", PE_DTYPE_FP32, 4, 2, 64, 16, 5, 3, {1, 20, 3}, {50, 4, 17}},
        {"window bf16 GQA", PE_DTYPE_BF16, 8, 1, 64, 4, 9, 2, {26, 1}, {2, 44}},
        /* head_dim not a multiple of the vector width; tiny blocks */
        {"hd 6", PE_DTYPE_FP32, 2, 1, 6, 3, 0, 2, {7, 1}, {0, 11}},
        {"hd 10 bf16 window", PE_DTYPE_BF16, 4, 2, 10, 5, 4, 2, {9, 1}, {6, 15}},
        {"hd 72", PE_DTYPE_FP32, 2, 2, 72, 16, 0, 2, {3, 1}, {30, 2}},
        /* one decode alone: its KV heads split into runs by the thread count (1 thread: one
         * run of 3; 2 threads: runs of 2 and 1), bf16 read as bf16 (2 query heads a KV
         * head), then fp32 with a head_dim of 9 vectors */
        {"lone decode bf16", PE_DTYPE_BF16, 6, 3, 64, 16, 0, 1, {1}, {40}},
        {"lone decode fp32 hd72", PE_DTYPE_FP32, 3, 3, 72, 16, 0, 1, {1}, {37}},
        /* a long prefill chunk: several row pieces per KV head */
        {"long prefill", PE_DTYPE_FP32, 4, 2, 64, 16, 0, 1, {small ? 40 : 130}, {small ? 5 : 200}},
        /* decode chunks past one span of keys (16 blocks): their spans merged, one of 3 rows
         * whose first two rows see no key of its last span (block 16 of 4 positions starts
         * at position 64), one chunk alone in its span, the rest short */
        {"spans fp32", PE_DTYPE_FP32, 4, 2, 64, 4, 0, 4, {1, 3, 1, 1}, {200, 62, 40, 130}},
        {"spans bf16 GQA", PE_DTYPE_BF16, 6, 2, 64, 4, 0, 2, {1, 2}, {255, 300}},
        /* ... with a window: its first keys fall inside a span; a lone long decode */
        {"spans window", PE_DTYPE_FP32, 4, 4, 64, 4, 90, 2, {1, 4}, {220, 100}},
        {"spans lone bf16", PE_DTYPE_BF16, 12, 12, 64, 16, 0, 1, {1}, {small ? 300 : 700}},
        /* prefill chunks across spans, with a window that starts inside one: a row folds
         * the spans it sees as a decode's spans are merged */
        {"spans prefill", PE_DTYPE_FP32, 4, 2, 64, 4, 0, 2, {37, 2}, {40, 250}},
        {"spans prefill bf16 window", PE_DTYPE_BF16, 6, 3, 64, 4, 100, 1, {70}, {180}},
    };
    /* the vector loops this CPU runs, then the portable ones */
    const hb_simd *versions[2] = {hb_simd_best(), hb_simd_portable()};
    for (int v = 0; v < 2; v++) {
        hb_simd_use(versions[v]);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            check_attention(dev, &cases[i], 100 + i);
    }
    hb_simd_use(NULL);
}

/* Attention's exponentials (hb_simd exp_sum) against exp in double: within 3 ulp over
 * the range softmax meets (x - max in [-87, 0]), tails of any length, the sum of what it
 * wrote, and a NaN stays NaN. */
static void test_vector_exp_is_within_3_ulp(void **state)
{
    (void)state;
    const hb_simd *versions[2] = {hb_simd_best(), hb_simd_portable()};
    enum { N = 1003 };
    float p[N], x[N];
    for (int v = 0; v < 2; v++)
        for (int rep = 0; rep < 40; rep++) {
            int n = N - rep * 25; /* tails of every length mod 8 */
            for (int i = 0; i < n; i++)
                x[i] = p[i] = -87.0f * (float)((i * 37 + rep * 11) % N) / (float)N + 0.25f;
            float m = 0.25f;
            float sum = versions[v]->exp_sum(p, n, m);
            double want_sum = 0;
            for (int i = 0; i < n; i++) {
                double want = exp((double)x[i] - (double)m);
                want_sum += p[i];
                if (!(fabs(p[i] - want) <= 3 * 0x1p-24 * want))
                    fail_msg("%s exp(%.9g) = %.9g, want %.9g", versions[v]->name,
                             (double)(x[i] - m), (double)p[i], want);
            }
            assert_true(fabs(sum - want_sum) <= 1e-5 * want_sum);
        }
    p[0] = NAN;
    p[1] = 0.0f;
    hb_simd_best()->exp_sum(p, 2, 0.0f);
    assert_true(isnan(p[0]));
    assert_true(p[1] == 1.0f);
    /* below -87.34 the AVX2 version clamps its argument: about FLT_MIN where expf gives a
     * denormal or 0 (hb_simd.h) */
    if (hb_simd_avx2()) {
        p[0] = -100.0f;
        p[1] = -1000.0f;
        hb_simd_avx2()->exp_sum(p, 2, 0.0f);
        for (int i = 0; i < 2; i++)
            if (!(p[i] > 0.99f * FLT_MIN && p[i] < 1.01f * FLT_MIN))
                fail_msg("avx2 exp below -87.34 gave %g, not about FLT_MIN", (double)p[i]);
    }
}

/* Random inputs for the attention loops (seed): n keys' and values' elements in bf16, nq
 * query values, np weights (>= 0), then nacc values from which a test starts its sums;
 * returns the random buffer (free it), the nacc values at its end. */
static float *attention_inputs(uint64_t seed, size_t n, uint16_t *K, uint16_t *V, float *q,
                               size_t nq, float *p, size_t np, size_t nacc, const float **acc)
{
    float *r = fvec(2 * n + nq + np + nacc, seed, 1.0f);
    for (size_t i = 0; i < n; i++) {
        K[i] = pe_k_to_bf16(r[i]);
        V[i] = pe_k_to_bf16(r[n + i]);
    }
    memcpy(q, r + 2 * n, nq * sizeof *q);
    for (size_t i = 0; i < np; i++)
        p[i] = fabsf(r[2 * n + nq + i]);
    *acc = r + 2 * n + nq + np;
    return r;
}

/* Attention's loops over a group of G query heads sharing keys and values (scores, accum;
 * hb_attention takes GQA's groups through them):
 * - each head gets the bits of a call for it alone (G = 1), whatever G (1-4 heads a pass,
 *   then further passes) and the strides;
 * - the bf16 loops, which widen keys and values in registers, give the bits of the fp32
 *   loops on the widened rows;
 * - both agree with a double-precision sum over the same products, within 1e-5 of the sum
 *   of the products' magnitudes;
 * for head_dims with and without a tail of 8 or 16 columns, and key counts with and without
 * a tail of the 2 or 4 a pass takes. */
static void test_attention_loops_over_query_groups(void **state)
{
    (void)state;
    const hb_simd *versions[3] = {hb_simd_best(), hb_simd_portable(), hb_simd_avx2()};
    const int nversions = versions[2] ? 3 : 2;
    const int hds[] = {64, 10, 72, 128, 24}, nks[] = {1, 3, 4, 5, 16, 17}, Gs[] = {1, 2, 3,
                                                                                    4, 5, 8};
    enum { MAXK = 17, MAXD = 128, MAXG = 8, LQ = MAXD + 3, LS = MAXK + 5, LA = MAXD + 7 };
    static uint16_t K[MAXK * MAXD], V[MAXK * MAXD];
    static float Kf[MAXK * MAXD], Vf[MAXK * MAXD], q[MAXG * LQ], p[MAXG * LS];
    static float s16[MAXG * LS], s32[MAXG * LS], one[MAXK];
    static float acc16[MAXG * LA], acc32[MAXG * LA], acc1[MAXD];
    for (int v = 0; v < nversions; v++)
        for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
            for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++)
                for (size_t c = 0; c < sizeof Gs / sizeof Gs[0]; c++) {
                    const hb_simd *x = versions[v];
                    const int hd = hds[a], nk = nks[b], G = Gs[c];
                    const size_t n = (size_t)nk * (size_t)hd;
                    const float *a0;
                    float *r = attention_inputs(300 + 10 * a + b, n, K, V, q, MAXG * LQ, p,
                                                MAXG * LS, MAXG * LA, &a0);
                    x->widen(Kf, K, n);
                    x->widen(Vf, V, n);
                    x->scores_bf16(s16, LS, q, LQ, G, K, nk, hd, 0.125f);
                    x->scores(s32, LS, q, LQ, G, Kf, nk, hd, 0.125f);
                    for (int g = 0; g < G; g++) {
                        const float *sg = s32 + (size_t)g * LS, *qg = q + (size_t)g * LQ;
                        assert_memory_equal(s16 + (size_t)g * LS, sg, (size_t)nk * sizeof *sg);
                        x->scores(one, 0, qg, 0, 1, Kf, nk, hd, 0.125f);
                        assert_memory_equal(one, sg, (size_t)nk * sizeof *sg);
                        for (int t = 0; t < nk; t++) {
                            double want = 0, mag = 0;
                            for (int d = 0; d < hd; d++) {
                                want += (double)qg[d] * Kf[(size_t)t * (size_t)hd + d];
                                mag += fabs((double)qg[d] * Kf[(size_t)t * (size_t)hd + d]);
                            }
                            assert_true(fabs(sg[t] - 0.125 * want) <= 1e-5 * 0.125 * mag);
                        }
                    }
                    memcpy(acc16, a0, sizeof acc16);
                    memcpy(acc32, a0, sizeof acc32);
                    x->accum_bf16(acc16, LA, p, LS, G, V, nk, hd);
                    x->accum(acc32, LA, p, LS, G, Vf, nk, hd);
                    for (int g = 0; g < G; g++) {
                        const float *ag = acc32 + (size_t)g * LA, *pg = p + (size_t)g * LS;
                        assert_memory_equal(acc16 + (size_t)g * LA, ag, (size_t)hd * sizeof *ag);
                        memcpy(acc1, a0 + (size_t)g * LA, (size_t)hd * sizeof *acc1);
                        x->accum(acc1, 0, pg, 0, 1, Vf, nk, hd);
                        assert_memory_equal(acc1, ag, (size_t)hd * sizeof *ag);
                        for (int d = 0; d < hd; d++) {
                            double want = a0[(size_t)g * LA + d], mag = fabs(want);
                            for (int t = 0; t < nk; t++) {
                                want += (double)pg[t] * Vf[(size_t)t * (size_t)hd + d];
                                mag += fabs((double)pg[t] * Vf[(size_t)t * (size_t)hd + d]);
                            }
                            assert_true(fabs(ag[d] - want) <= 1e-5 * mag);
                        }
                    }
                    free(r);
                }
}

/* The AVX-512 scores and accum over bf16 KV (two keys a register; 16 columns a register)
 * give the AVX2 loops' bits: every head count of a pass (2-4, and 5 and 8 in passes; 1 is
 * the AVX2 loops'), head dims with a tail of 8 columns (24, 72) and none (16, 64, 128) and
 * ones the AVX2 loops take whole (10), key counts below 8, at 8 and with a tail. */
static void test_avx512_attention_gives_the_avx2_bits(void **state)
{
    (void)state;
    const hb_simd *wide = hb_simd_avx512(), *avx2 = hb_simd_avx2();
    if (!wide || !avx2)
        skip();
    const int hds[] = {64, 16, 24, 72, 128, 10}, nks[] = {1, 7, 8, 13, 16, 17, 40},
              Gs[] = {1, 2, 3, 4, 5, 8};
    enum { MAXK = 40, MAXD = 128, MAXG = 8, LQ = MAXD + 3, LS = MAXK + 5, LA = MAXD + 7 };
    static uint16_t K[MAXK * MAXD], V[MAXK * MAXD];
    static float q[MAXG * LQ], p[MAXG * LS];
    static float sw[MAXG * LS], sn[MAXG * LS], aw[MAXG * LA], an[MAXG * LA];
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
        for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++)
            for (size_t c = 0; c < sizeof Gs / sizeof Gs[0]; c++) {
                const int hd = hds[a], nk = nks[b], G = Gs[c];
                const size_t n = (size_t)nk * (size_t)hd;
                const float *a0;
                float *r = attention_inputs(700 + 10 * a + b, n, K, V, q, MAXG * LQ, p,
                                            MAXG * LS, MAXG * LA, &a0);
                memset(sw, 0, sizeof sw);
                memset(sn, 0, sizeof sn);
                wide->scores_bf16(sw, LS, q, LQ, G, K, nk, hd, 0.125f);
                avx2->scores_bf16(sn, LS, q, LQ, G, K, nk, hd, 0.125f);
                assert_memory_equal(sw, sn, sizeof sw);
                memcpy(aw, a0, sizeof aw);
                memcpy(an, aw, sizeof an);
                wide->accum_bf16(aw, LA, p, LS, G, V, nk, hd);
                avx2->accum_bf16(an, LA, p, LS, G, V, nk, hd);
                assert_memory_equal(aw, an, sizeof aw);
                free(r);
            }
}

/* The vectorized GELU and SwiGLU (hb_simd gelu, silu_mul) against the functions in double,
 * relative to max(1, |value|): within 8 ulp for GELU, the vector exponential's few ulp
 * and the division; tails of every length give the same bits as the vector body (an
 * element's bits do not depend on where a split put it); huge inputs give the tanh form's
 * limits. */
static void test_vector_gelu_and_silu_are_within_a_few_ulp(void **state)
{
    (void)state;
    const hb_simd *versions[2] = {hb_simd_best(), hb_simd_portable()};
    enum { N = 1001 };
    float x[N], g[N], u[N], y[N], full[N];
    for (int i = 0; i < N; i++) {
        x[i] = -12.0f + 24.0f * (float)((i * 389) % N) / (float)N;
        g[i] = x[i];
        u[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    for (int v = 0; v < 2; v++) {
        memcpy(full, x, sizeof x);
        versions[v]->gelu(full, N);
        versions[v]->silu_mul(y, g, u, N);
        for (int i = 0; i < N; i++) {
            double a = x[i];
            double gelu = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
            double silu = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            if (!(fabs(full[i] - gelu) <= 8 * 0x1p-24 * fmax(1.0, fabs(gelu))))
                fail_msg("%s gelu(%.9g) = %.9g, want %.9g", versions[v]->name, a,
                         (double)full[i], gelu);
            if (!(fabs(y[i] - silu) <= 8 * 0x1p-24 * fmax(1.0, fabs(silu))))
                fail_msg("%s silu_mul(%.9g, %.9g) = %.9g, want %.9g", versions[v]->name,
                         (double)g[i], (double)u[i], (double)y[i], silu);
        }
        for (int n = 1; n <= 17; n++) /* any tail has the body's bits */
            for (int at = 0; at + n <= 40; at += 7) {
                float part[17];
                memcpy(part, x + at, (size_t)n * sizeof *part);
                versions[v]->gelu(part, (size_t)n);
                assert_memory_equal(part, full + at, (size_t)n * sizeof *part);
            }
        float big[3] = {-1e4f, 1e4f, 0.0f};
        versions[v]->gelu(big, 3);
        assert_true(fabsf(big[0]) < 1e-30f && big[1] == 1e4f && big[2] == 0.0f);
    }
}

static void test_attention_rejects_bad_steps_with_a_message(void **state)
{
    be_device *dev = *state;
    pool p = make_pool(PE_DTYPE_FP32, 1, 2, 4, 8, 2, 80);
    float q[64], out[64];
    int32_t chunk[PE_K_CHUNK_FIELDS] = {0, 2, 3, 0}, bt[2] = {0, 1};
    be_attn a = {.rows = 2, .q = q, .q_stride = 32, .out = out, .out_stride = 32, .heads = 4,
                 .scale = 1.0f, .nchunks = 1, .chunks = chunk, .block_tables = bt,
                 .max_keys = 5};
    tu_fill_random(q, 64, 81);
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_OK);
    a.heads = 3; /* not a multiple of kv_heads 2 */
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "heads=3"));
    a.heads = 4;
    a.max_keys = 4; /* the last token at position 4 sees 5 keys */
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "max_keys"));
    a.max_keys = 5;
    bt[1] = 2; /* block 2 of a pool of 2 */
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "block 2"));
    bt[1] = 1;
    chunk[PE_K_CHUNK_N] = 3; /* rows 0..2 of a 2-row step */
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    chunk[PE_K_CHUNK_N] = 2;
    a.out_stride = 31;
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "out_stride"));
    a.out_stride = 32;
    assert_int_equal(ops->attention(dev, &p.kv, 1, &a), PE_EINVAL); /* layer 1 of 1 */
    assert_int_equal(ops->attention(dev, NULL, 0, &a), PE_EINVAL);
    a.q = NULL;
    assert_int_equal(ops->attention(dev, &p.kv, 0, &a), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "attention"));
    free(p.kv.base);
}

/* ---- argmax, top-k ------------------------------------------------------------------------ */

/* A host device's description names the kernels it computes with: the vector loops'
 * version, and AMX tiles for bf16 where they run (pe_device_describe, pengine --topology). */
static void test_host_device_names_its_kernels(void **state)
{
    (void)state;
    be_device_desc d;
    char want[64];
    for (int amx = 1; amx >= 0; amx--) {
        hb_amx_use(amx);
        assert_int_equal(be_host_ops()->device_describe(3, &d, NULL), PE_OK);
        assert_string_equal(d.name, "host device 3");
        snprintf(want, sizeof want, "%s%s", hb_simd_get()->name,
                 amx && hb_amx_available() ? ", bf16 on AMX tiles" : "");
        assert_string_equal(d.kernels, want);
    }
    hb_amx_use(1);
}

/* Each vector version's argmax (greedy sampling's) against the row rule of
 * pe_k_argmax_row: rows of 1 to 40 values and of 5003 (tails after the vectors), drawn
 * from a few values so that ties are common: +0 and -0 (equal: the first wins), -inf, +inf,
 * NaNs (never win; a row of NaNs gives 0), and random values. */
static void test_argmax_vector_loops_match_the_row_rule(void **state)
{
    (void)state;
    const float values[] = {0.0f, -0.0f, -INFINITY, INFINITY, NAN, 1.0f, -1.0f, 2.5f};
    const hb_simd *versions[3] = {hb_simd_avx512(), hb_simd_avx2(), hb_simd_portable()};
    uint64_t seed = 7;
    float *x = malloc(5003 * sizeof *x);
    for (int trial = 0; trial < 4000; trial++) {
        const int32_t n = trial % 50 == 49 ? 5003 : 1 + trial % 40;
        const int mix = trial % 5; /* 0: random values; 1-4: more and more of the pool */
        for (int32_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(seed >> 33);
            x[i] = (int)(r % 5) < mix ? values[(r >> 3) % 8] : (float)((r >> 8) % 1000) - 500.0f;
            if (trial % 97 == 5) /* a row of NaNs */
                x[i] = NAN;
        }
        const int32_t want = pe_k_argmax_row(x, n);
        for (int v = 0; v < 3; v++)
            if (versions[v] && versions[v]->argmax(x, n) != want)
                fail_msg("%s argmax of a row of %d (trial %d) = %d, want %d", versions[v]->name,
                         (int)n, trial, (int)versions[v]->argmax(x, n), (int)want);
    }
    free(x);
}

/* hb_simd's narrow (fp32 to bf16, the linear's input on AMX and bf16 W) against
 * pe_k_to_bf16, bit for bit, in every version this CPU runs: hand-computed ties, overflow
 * and NaNs, then random bit patterns (every class of float) in runs of 0-40 and 1000 values
 * (the vector loops' tails). */
static void test_narrow_vector_loops_match_pe_k_to_bf16(void **state)
{
    (void)state;
    const hb_simd *versions[3] = {hb_simd_avx512(), hb_simd_avx2(), hb_simd_portable()};
    /* bits in, bf16 out: ties to even (down, then up), the largest float up to inf, a
     * negative NaN kept negative and quiet, a signalling NaN quieted, a denormal tie, -0 */
    const uint32_t in[9] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff800001u, 0x7f800001u,
                            0x00008000u, 0x80000000u, 0x3f800001u, 0xbf80c000u};
    const uint16_t out[9] = {0x3f80u, 0x3f82u, 0x7f80u, 0xffc0u, 0x7fc0u,
                             0x0000u, 0x8000u, 0x3f80u, 0xbf81u};
    float x[1000];
    uint16_t got[1000];
    for (int i = 0; i < 9; i++)
        memcpy(&x[i], &in[i], sizeof x[i]);
    for (int v = 0; v < 3; v++)
        if (versions[v]) {
            versions[v]->narrow(got, x, 9);
            for (int i = 0; i < 9; i++)
                if (got[i] != out[i])
                    fail_msg("%s narrow of 0x%08x = 0x%04x, want 0x%04x", versions[v]->name,
                             in[i], got[i], out[i]);
        }
    uint64_t seed = 11;
    for (int trial = 0; trial < 2000; trial++) {
        const size_t n = trial % 100 == 99 ? 1000 : (size_t)(trial % 41);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t u = (uint32_t)(seed >> 32);
            if (trial % 3 == 1) /* the dropped half a tie */
                u = (u & 0xffff0000u) | 0x8000u;
            memcpy(&x[i], &u, sizeof u);
        }
        for (int v = 0; v < 3; v++) {
            if (!versions[v])
                continue;
            versions[v]->narrow(got, x, n);
            for (size_t i = 0; i < n; i++)
                if (got[i] != pe_k_to_bf16(x[i]))
                    fail_msg("%s narrow: value %zu of %zu (trial %d) = 0x%04x, want 0x%04x",
                             versions[v]->name, i, n, trial, got[i], pe_k_to_bf16(x[i]));
        }
    }
}

static void test_argmax_is_the_first_largest(void **state)
{
    be_device *dev = *state;
    size_t rows = tu_small() ? 6 : 37, n = 5003;
    float *x = fvec(rows * n, 90, 10.0f);
    /* ties: row 1's max appears twice; NaNs never win; a row of -inf picks index 0 */
    x[1 * n + 100] = 50.0f;
    x[1 * n + 4000] = 50.0f;
    x[2 * n + 0] = NAN;
    x[2 * n + 7] = 60.0f;
    for (size_t i = 0; i < n; i++)
        x[3 * n + i] = -INFINITY;
    int32_t *first = NULL;
    for (int c = 0; c < NCOUNTS; c++) {
        use_threads(dev, thread_counts[c]);
        int32_t *idx = malloc(rows * sizeof *idx);
        for (size_t r = 0; r < rows; r++)
            idx[r] = -7;
        assert_int_equal(ops->argmax(dev, x, rows, n, idx), PE_OK);
        for (size_t r = 0; r < rows; r++) {
            int32_t best = -1;
            for (size_t i = 0; i < n; i++)
                if (!isnan(x[r * n + i]) && (best < 0 || x[r * n + i] > x[r * n + best]))
                    best = (int32_t)i;
            assert_int_equal(idx[r], best);
        }
        assert_int_equal(idx[1], 100);
        assert_int_equal(idx[2], 7);
        assert_int_equal(idx[3], 0);
        if (first)
            assert_memory_equal(idx, first, rows * sizeof *idx);
        free(first);
        first = idx;
    }
    free(first);
    assert_int_equal(ops->argmax(dev, x, 1, 0, (int32_t[1]){0}), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "argmax"));
    free(x);
}

/* The logit bias and penalties by hand on 2 rows of a rank's 6 ids (10 .. 15): add added, a
 * positive logit then divided by rep, a negative one multiplied, then sub taken off;
 * entries of other ranks' ids or of rows past the step's change nothing. */
static void test_penalize_changes_the_named_logits_by_hand(void **state)
{
    be_device *dev = *state;
    float x[12] = {1, 3, -1, 0, 4, 5, /* row 0 */ -2, 2, 6, 0.5f, 4, 7};
    const float before[12] = {1, 3, -1, 0, 4, 5, -2, 2, 6, 0.5f, 4, 7};
    const pe_k_penalty p[] = {
        /* row, id, add, rep, sub */
        {0, 11, 0.0f, 2.0f, 0.0f},   /* 3 / 2 = 1.5 */
        {0, 12, 0.0f, 2.0f, 0.5f},   /* -1 * 2 - 0.5 = -2.5 */
        {0, 13, 0.0f, 1.5f, 0.0f},   /* 0: multiplied, stays 0 */
        {0, 14, -6.0f, 1.0f, 0.0f},  /* 4 - 6 = -2 */
        {0, 15, -6.0f, 2.0f, 0.25f}, /* (5 - 6) * 2 - 0.25 = -2.25 */
        {1, 10, 0.0f, 1.0f, 1.25f},  /* -2 - 1.25 = -3.25 */
        {1, 11, 3.0f, 2.5f, 0.0f},   /* (2 + 3) / 2.5 = 2 */
        {1, 15, 0.0f, 4.0f, -1.0f},  /* 7 / 4 + 1 = 2.75 */
        {1, 9, 1.0f, 2.0f, 1.0f},    /* id 9: another rank's */
        {1, 16, 1.0f, 2.0f, 1.0f},   /* id 16: another rank's */
        {2, 11, 1.0f, 2.0f, 1.0f},   /* row 2: past the step's 2 */
    };
    assert_int_equal(ops->penalize(dev, x, 2, 6, 10, p, sizeof p / sizeof p[0]), PE_OK);
    const float want[12] = {1, 1.5f, -2.5f, 0, -2, -2.25f, -3.25f, 2, 6, 0.5f, 4, 2.75f};
    for (int i = 0; i < 12; i++)
        if (x[i] != want[i])
            fail_msg("logit %d: %g, want %g (was %g)", i, (double)x[i], (double)want[i],
                     (double)before[i]);
    assert_int_equal(ops->penalize(dev, x, 0, 6, 10, p, 2), PE_OK); /* no rows */
    assert_int_equal(ops->penalize(dev, x, 2, 6, 10, NULL, 0), PE_OK); /* no entries */
    assert_int_equal(ops->penalize(dev, x, 2, 0, 10, p, 2), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "penalize"));
}

/* Structured output's masks by hand on 3 rows of a rank's 6 ids (40 .. 45), masks of 2 words
 * (ids 0 .. 63; 40 .. 45 are bits 8 .. 13 of word 1): row 0 keeps mask 1's ids, row 1
 * (row_mask -1) is left alone, row 2 keeps mask 0's; the others become -inf. Word 0 of
 * mask 1 holds bits 8, 11, 13 (ids 8, 11, 13), so a mask read at the wrong word fails. Ids
 * past the 2 words are never allowed, even where the next mask's bits would say so. */
static void test_mask_sets_the_disallowed_logits_to_minus_inf_by_hand(void **state)
{
    be_device *dev = *state;
    const float inf = INFINITY;
    float x[18] = {1, 3, -1, 0, 4, 5, /* row 0 */ -2, 2, 6, 0.5f, 4, 7, /* row 1 */
                   0.25f, -3, 8, 1.5f, -inf, 2};
    const float before[18] = {1,     3,  -1, 0,    4,    5, -2, 2, 6, 0.5f, 4, 7,
                              0.25f, -3, 8,  1.5f, -inf, 2};
    const uint32_t bits[2 * 2] = {
        /* mask 0: every id of word 0; ids 40, 42, 45 and 60 .. 63 of word 1 */
        0xffffffffu, 1u << 8 | 1u << 10 | 1u << 13 | 0xf0000000u,
        /* mask 1: ids 0, 1, 8, 11, 13 of word 0; ids 41, 42, 44 of word 1 */
        1u << 0 | 1u << 1 | 1u << 8 | 1u << 11 | 1u << 13, 1u << 9 | 1u << 10 | 1u << 12,
    };
    const int32_t row_mask[3] = {1, -1, 0};
    assert_int_equal(ops->mask(dev, x, 3, 6, 40, row_mask, bits, 2), PE_OK);
    const float want[18] = {-inf,  3,    -1, -inf, 4,    -inf, /* row 0: ids 41, 42, 44 */
                            -2,    2,    6,  0.5f, 4,    7,    /* row 1: left alone */
                            0.25f, -inf, 8,  -inf, -inf, 2};   /* row 2: ids 40, 42, 45 */
    int changed = 0, stayed = 0;
    for (int i = 0; i < 18; i++) {
        if (x[i] != want[i])
            fail_msg("logit %d: %g, want %g (was %g)", i, (double)x[i], (double)want[i],
                     (double)before[i]);
        changed += x[i] != before[i];
        stayed += x[i] == before[i];
    }
    assert_int_equal(changed, 5); /* 6 disallowed; row 2's id 44 was -inf already */
    assert_int_equal(stayed, 13);
    /* ids 60 .. 65 under mask 0: 60 .. 63 kept, 64 and 65 past the mask's 2 words (mask 1's
     * word 0 after them allows bits 0 and 1) */
    float past[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(ops->mask(dev, past, 1, 6, 60, row_mask + 2, bits, 2), PE_OK);
    const float want_past[6] = {1, 2, 3, 4, -inf, -inf};
    for (int i = 0; i < 6; i++)
        if (past[i] != want_past[i])
            fail_msg("id %d: %g, want %g", 60 + i, (double)past[i], (double)want_past[i]);
    memcpy(x, before, sizeof x);
    assert_int_equal(ops->mask(dev, x, 0, 6, 40, row_mask, bits, 2), PE_OK); /* no rows */
    assert_memory_equal(x, before, sizeof x);
    assert_int_equal(ops->mask(dev, x, 3, 0, 40, row_mask, bits, 2), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "mask"));
    assert_int_equal(ops->mask(dev, NULL, 3, 6, 40, row_mask, bits, 2), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "mask"));
    assert_memory_equal(x, before, sizeof x);
}

static const float *sort_row; /* qsort has no context argument */

/* Larger values first, equal values in index order. */
static int by_value_then_index(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float va = sort_row[a], vb = sort_row[b];
    if (va != vb)
        return va > vb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void test_topk_matches_a_sort_and_lse_a_double_sum(void **state)
{
    be_device *dev = *state;
    size_t rows = tu_small() ? 5 : 19, n = 3001;
    float *x = fvec(rows * n, 91, 6.0f);
    for (size_t i = 0; i < 20; i++) /* duplicates of row 0's values: ties in index order */
        x[(i * 131) % n] = 5.5f;
    for (size_t k = 0; k <= 9; k += 3) {
        for (int c = 0; c < NCOUNTS; c++) {
            use_threads(dev, thread_counts[c]);
            int32_t *idx = malloc((rows * k + 1) * sizeof *idx);
            float *val = poisoned(rows * k), *lse = poisoned(rows);
            assert_int_equal(ops->topk(dev, x, rows, n, k, idx, val, lse), PE_OK);
            int32_t *order = malloc(n * sizeof *order);
            for (size_t r = 0; r < rows; r++) {
                sort_row = x + r * n;
                for (size_t i = 0; i < n; i++)
                    order[i] = (int32_t)i;
                qsort(order, n, sizeof *order, by_value_then_index);
                for (size_t j = 0; j < k; j++) {
                    assert_int_equal(idx[r * k + j], order[j]);
                    assert_true(val[r * k + j] == x[r * n + (size_t)order[j]]);
                }
                double mx = x[r * n + (size_t)order[0]], s = 0;
                for (size_t i = 0; i < n; i++)
                    s += exp((double)x[r * n + i] - mx);
                assert_float_equal(lse[r], mx + log(s), 1e-5 * fabs(mx + log(s)) + 1e-6);
            }
            free(order);
            free(idx);
            free(val);
            free(lse);
        }
    }
    int32_t idx[4];
    float val[4];
    assert_int_equal(ops->topk(dev, x, 1, n, 2, idx, val, NULL), PE_OK); /* lse optional */
    assert_int_equal(ops->topk(dev, x, 1, 3, 4, idx, val, NULL), PE_EINVAL); /* k > n */
    assert_non_null(strstr(ops->last_error(dev), "k=4"));
    free(x);
}

/* ---- sampling ---------------------------------------------------------------------------- */

static void test_sampling_rules(void **state)
{
    be_device *dev = *state;
    size_t rows = tu_small() ? 16 : 64, n = 1000;
    float *x = fvec(rows * n, 92, 4.0f);
    pe_k_sampling *p = malloc(rows * sizeof *p);
    int32_t *tok = malloc(rows * sizeof *tok), *again = malloc(rows * sizeof *again);
    int32_t *greedy = malloc(rows * sizeof *greedy);
    float *logit = poisoned(rows);
    assert_int_equal(ops->argmax(dev, x, rows, n, greedy), PE_OK);
    /* temperature 0 is argmax, whatever u, top-k, top-p and min-p say */
    for (size_t r = 0; r < rows; r++)
        p[r] = (pe_k_sampling){0.0f, (int32_t)(r % 5), r % 2 ? 0.5f : 1.0f,
                               pe_k_uniform(1, r), r % 3 ? 0.2f : 0.0f};
    assert_int_equal(ops->sample(dev, x, rows, n, p, tok, logit), PE_OK);
    for (size_t r = 0; r < rows; r++) {
        assert_int_equal(tok[r], greedy[r]);
        assert_true(logit[r] == x[r * n + (size_t)tok[r]]);
    }
    /* top_k = 1 is greedy at any temperature and u */
    for (size_t r = 0; r < rows; r++)
        p[r] = (pe_k_sampling){0.3f + (float)r, 1, 1.0f, pe_k_uniform(2, r), 0.0f};
    assert_int_equal(ops->sample(dev, x, rows, n, p, tok, NULL), PE_OK);
    for (size_t r = 0; r < rows; r++)
        assert_int_equal(tok[r], greedy[r]);
    /* any rule: the naive twin's token; the same u gives the same token on any thread count */
    float *w = malloc(n * sizeof *w), mass[256];
    uint32_t hist[256];
    for (size_t r = 0; r < rows; r++)
        p[r] = (pe_k_sampling){0.5f + (float)(r % 4) * 0.5f, (int32_t)(r % 3) * 20,
                               r % 2 ? 0.9f : 1.0f, pe_k_uniform(3, r),
                               r % 5 ? 0.0f : 0.02f};
    for (int c = 0; c < NCOUNTS; c++) {
        use_threads(dev, thread_counts[c]);
        assert_int_equal(ops->sample(dev, x, rows, n, p, tok, logit), PE_OK);
        assert_int_equal(ops->sample(dev, x, rows, n, p, again, NULL), PE_OK);
        for (size_t r = 0; r < rows; r++) {
            assert_int_equal(tok[r], pe_k_sample_row(x + r * n, (int32_t)n, p[r], w, hist, mass));
            assert_int_equal(again[r], tok[r]);
            assert_true(logit[r] == x[r * n + (size_t)tok[r]]);
        }
    }
    p[0].top_p = 0.0f;
    assert_int_equal(ops->sample(dev, x, 1, n, p, tok, NULL), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "top_p"));
    p[0].top_p = 1.0f;
    p[0].u = 1.0f;
    assert_int_equal(ops->sample(dev, x, 1, n, p, tok, NULL), PE_EINVAL);
    assert_int_equal(ops->sample(dev, x, 1, n, NULL, tok, NULL), PE_EINVAL);
    free(x);
    free(p);
    free(tok);
    free(again);
    free(greedy);
    free(logit);
    free(w);
}

/* 10,000 draws at temperature T from one row of 16 logits (u from pe_k_uniform) land on
 * each token as often as softmax(x / T) says: Pearson's chi-square with 15 degrees of
 * freedom below 37.7 (p = 0.001). */
static void test_temperature_sampling_follows_the_softmax(void **state)
{
    be_device *dev = *state;
    enum { N = 16 };
    const size_t draws = tu_small() ? 2000 : 10000;
    const float T = 0.8f;
    float row[N];
    for (int i = 0; i < N; i++)
        row[i] = 0.15f * (float)i - 0.01f * (float)(i * i) + 0.05f; /* probs ~0.03 .. 0.1 */
    float *x = malloc(draws * N * sizeof *x);
    pe_k_sampling *p = malloc(draws * sizeof *p);
    int32_t *tok = malloc(draws * sizeof *tok);
    for (size_t d = 0; d < draws; d++) {
        memcpy(x + d * N, row, sizeof row);
        p[d] = (pe_k_sampling){T, 0, 1.0f, pe_k_uniform(12345, d), 0.0f};
    }
    assert_int_equal(ops->sample(dev, x, draws, N, p, tok, NULL), PE_OK);
    double z = 0, prob[N], count[N] = {0};
    for (int i = 0; i < N; i++)
        z += exp(row[i] / T);
    for (int i = 0; i < N; i++)
        prob[i] = exp(row[i] / T) / z;
    for (size_t d = 0; d < draws; d++) {
        assert_true(tok[d] >= 0 && tok[d] < N);
        count[tok[d]]++;
    }
    double chi2 = 0;
    for (int i = 0; i < N; i++) {
        double e = prob[i] * (double)draws;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    if (!(chi2 < 37.7))
        fail_msg("chi-square %.2f over %zu draws exceeds 37.7 (15 dof, p = 0.001)", chi2, draws);
    free(x);
    free(p);
    free(tok);
}

/* DRAWS draws from one distribution of NTOK = 4 tokens, probabilities 0.5, 0.3, 0.15, 0.05:
 * x (DRAWS, NTOK) the row of their logs repeated, p (DRAWS) each draw's sampling (for the test
 * to set) and tok (DRAWS) its token. */
enum { NTOK = 4, DRAWS = 2000 };
typedef struct draws {
    float *x;
    pe_k_sampling *p;
    int32_t *tok;
} draws;

static draws draws_of_four(void)
{
    const double probs[NTOK] = {0.5, 0.3, 0.15, 0.05};
    draws d = {malloc(DRAWS * NTOK * sizeof *d.x), malloc(DRAWS * sizeof *d.p),
               malloc(DRAWS * sizeof *d.tok)};
    assert_true(d.x && d.p && d.tok);
    for (size_t k = 0; k < DRAWS; k++)
        for (int i = 0; i < NTOK; i++)
            d.x[k * NTOK + i] = (float)log(probs[i]);
    return d;
}

static void draws_free(draws *d)
{
    free(d->x);
    free(d->p);
    free(d->tok);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 (T = 1): top_p 0.7 keeps the smallest nucleus with at
 * least 0.7 of the mass, {0, 1}, and draws within it by the renormalized weights. */
static void test_top_p_keeps_the_smallest_nucleus(void **state)
{
    be_device *dev = *state;
    draws dr = draws_of_four();
    float *x = dr.x;
    pe_k_sampling *p = dr.p;
    int32_t *tok = dr.tok;
    for (size_t d = 0; d < DRAWS; d++)
        p[d] = (pe_k_sampling){1.0f, 0, 0.7f, pe_k_uniform(777, d), 0.0f};
    assert_int_equal(ops->sample(dev, x, DRAWS, NTOK, p, tok, NULL), PE_OK);
    size_t ones = 0;
    for (size_t d = 0; d < DRAWS; d++) {
        assert_true(tok[d] == 0 || tok[d] == 1);
        /* within the nucleus: token 0 when u * (0.5 + 0.3) falls below 0.5 */
        int want = (double)p[d].u * 0.8 < 0.5 ? 0 : 1;
        if (fabs((double)p[d].u * 0.8 - 0.5) > 1e-6)
            assert_int_equal(tok[d], want);
        ones += tok[d] == 1;
    }
    assert_true(ones > DRAWS / 5 && ones < DRAWS / 2); /* 3/8 expected */
    /* top_p 0.85: {0, 1, 2} (0.95); token 3 never */
    for (size_t d = 0; d < DRAWS; d++)
        p[d].top_p = 0.85f;
    assert_int_equal(ops->sample(dev, x, DRAWS, NTOK, p, tok, NULL), PE_OK);
    size_t twos = 0;
    for (size_t d = 0; d < DRAWS; d++) {
        assert_true(tok[d] >= 0 && tok[d] <= 2);
        twos += tok[d] == 2;
    }
    assert_true(twos > 0);
    draws_free(&dr);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05: min_p keeps the tokens at least min_p times as likely
 * as token 0 after the temperature, draws among them by their renormalized weights, and
 * comes before top_p (vLLM's order), which then takes its nucleus of what min_p kept. */
static void test_min_p_keeps_the_tokens_near_the_most_likely(void **state)
{
    be_device *dev = *state;
    const struct {
        float t, min_p, top_p;
        double kept[NTOK]; /* the weights drawn among, by hand; 0: never drawn */
    } cases[] = {
        /* T 1, min_p 0.25: 0.15 >= 0.125 stays, 0.05 goes */
        {1.0f, 0.25f, 1.0f, {0.5, 0.3, 0.15, 0}},
        /* T 0.5: weights (p / 0.5)^2 = 1, 0.36, 0.09, 0.01 of the max: 0.09 < 0.25 goes */
        {0.5f, 0.25f, 1.0f, {1, 0.36, 0, 0}},
        /* min_p 0.25, then top_p 0.84 of the 0.95 kept (0.798): {0, 1}, which hold 0.8;
         * top_p first would have kept {0, 1, 2} (0.84 of 1.0 needs token 2) */
        {1.0f, 0.25f, 0.84f, {0.5, 0.3, 0, 0}},
        /* min_p 1: the most likely token alone */
        {1.3f, 1.0f, 1.0f, {1, 0, 0, 0}},
    };
    draws dr = draws_of_four();
    float *x = dr.x;
    pe_k_sampling *p = dr.p;
    int32_t *tok = dr.tok;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double kept = 0;
        for (int i = 0; i < NTOK; i++)
            kept += cases[c].kept[i];
        for (size_t d = 0; d < DRAWS; d++)
            p[d] = (pe_k_sampling){cases[c].t, 0, cases[c].top_p, pe_k_uniform(99 + c, d),
                                   cases[c].min_p};
        assert_int_equal(ops->sample(dev, x, DRAWS, NTOK, p, tok, NULL), PE_OK);
        size_t seen[NTOK] = {0};
        for (size_t d = 0; d < DRAWS; d++) {
            /* the first token whose running sum of kept weights passes u x kept */
            double r = (double)p[d].u * kept, run = 0;
            int want = -1, near = 0;
            for (int i = 0; i < NTOK && want < 0; i++) {
                run += cases[c].kept[i];
                near |= cases[c].kept[i] > 0 && fabs(run - r) < 1e-5 * kept;
                if (cases[c].kept[i] > 0 && run > r)
                    want = i;
            }
            if (!near && tok[d] != want)
                fail_msg("case %zu draw %zu (u %g): token %d, by hand %d", c, d,
                         (double)p[d].u, tok[d], want);
            seen[tok[d]]++;
        }
        for (int i = 0; i < NTOK; i++) /* every kept token comes up, and no other */
            assert_true((cases[c].kept[i] > 0) == (seen[i] > 0));
    }
    p[0].min_p = 1.5f;
    assert_int_equal(ops->sample(dev, x, 1, NTOK, p, tok, NULL), PE_EINVAL);
    assert_non_null(strstr(ops->last_error(dev), "min_p"));
    draws_free(&dr);
}

/* pthread_create, interposed (the pool's calls bind to this definition): while
 * refuse_threads is set it fails as glibc does when no thread can start (EAGAIN), without
 * calling the real one; otherwise it is the real one (or a sanitizer's interceptor, next
 * in the lookup order). */
static atomic_int refuse_threads;
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *restrict t, const pthread_attr_t *restrict attr,
                   void *(*fn)(void *), void *restrict arg)
{
    static _Atomic(create_fn) real;
    if (atomic_load(&refuse_threads))
        return EAGAIN;
    create_fn f = atomic_load(&real);
    if (!f) {
        *(void **)&f = dlsym(RTLD_NEXT, "pthread_create");
        if (!f)
            abort();
        atomic_store(&real, f);
    }
    return f(t, attr, fn, arg);
}

/* A pool that cannot start (pthread_create fails) fails set_compute_threads with a
 * message, and the device keeps the pool it had: the same thread count, and an op that
 * uses every thread's scratch still runs and gives the rule's tokens. The change then
 * succeeds once threads can start again. */
static void test_a_failed_thread_change_keeps_the_pool(void **state)
{
    be_device *dev = *state;
    use_threads(dev, 2);
    atomic_store(&refuse_threads, 1);
    pe_status st = ops->set_compute_threads(dev, 3);
    atomic_store(&refuse_threads, 0);
    assert_int_equal(st, PE_ENOMEM);
    if (!strstr(ops->last_error(dev), "3 compute threads") ||
        !strstr(ops->last_error(dev), "keeps its 2"))
        fail_msg("message '%s' lacks the count asked or the one kept",
                 ops->last_error(dev));
    assert_int_equal(ops->compute_threads(dev), 2);
    /* rows of 8192 logits: pieces of 2 rows (hb_row_grain), so both threads sample */
    const size_t rows = 8, n = 8192;
    float *x = fvec(rows * n, 77, 4.0f), *w = malloc(n * sizeof *w), mass[256];
    uint32_t hist[256];
    pe_k_sampling p[8];
    int32_t tok[8];
    assert_non_null(w);
    for (size_t r = 0; r < rows; r++)
        p[r] = (pe_k_sampling){.temperature = 0.8f, .top_k = 50, .top_p = 0.9f,
                               .u = (float)r / (float)rows};
    for (int round = 0; round < 2; round++) {
        memset(tok, 0xff, sizeof tok);
        assert_int_equal(ops->sample(dev, x, rows, n, p, tok, NULL), PE_OK);
        for (size_t r = 0; r < rows; r++)
            assert_int_equal(tok[r], pe_k_sample_row(x + r * n, (int32_t)n, p[r], w, hist, mass));
        if (round == 0)
            use_threads(dev, 3); /* threads start again: the change goes through */
    }
    free(x);
    free(w);
}

int main(void)
{
    ops = be_host_ops();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rmsnorm_of_a_known_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rmsnorm_matches_double_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rope_of_a_known_vector_at_position_1, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rope_equals_the_kernel_per_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silu_mul_matches_the_formula, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedding_reads_a_bf16_table_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kv_append_stores_at_the_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_of_two_keys_by_hand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_matches_the_naive_twin, setup, teardown),
        cmocka_unit_test(test_vector_exp_is_within_3_ulp),
        cmocka_unit_test_setup_teardown(test_attention_rejects_bad_steps_with_a_message, setup,
                                        teardown),
        cmocka_unit_test(test_vector_gelu_and_silu_are_within_a_few_ulp),
        cmocka_unit_test(test_attention_loops_over_query_groups),
        cmocka_unit_test_setup_teardown(test_argmax_is_the_first_largest, setup, teardown),
        cmocka_unit_test(test_argmax_vector_loops_match_the_row_rule),
        cmocka_unit_test(test_narrow_vector_loops_match_pe_k_to_bf16),
        cmocka_unit_test(test_avx512_attention_gives_the_avx2_bits),
        cmocka_unit_test(test_host_device_names_its_kernels),
        cmocka_unit_test_setup_teardown(test_penalize_changes_the_named_logits_by_hand, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mask_sets_the_disallowed_logits_to_minus_inf_by_hand,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_topk_matches_a_sort_and_lse_a_double_sum, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sampling_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_thread_change_keeps_the_pool, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_temperature_sampling_follows_the_softmax, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_top_p_keeps_the_smallest_nucleus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_min_p_keeps_the_tokens_near_the_most_likely, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
