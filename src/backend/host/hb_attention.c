/* hb_attention.c: paged attention on a host device (attention.h's layout and rules).
 *
 * A work unit is (chunk, up to HB_ATTN_ROWS query rows of it, a run of KV heads, a span of
 * keys): the query heads of a KV head's group are computed together (hb_simd's scores and
 * accum take the G heads of a row at once, each key and value loaded once for all of them),
 * so each block of keys and values is read once per group and row piece (in a bf16 pool:
 * widened once into scratch for pieces of more than HB_ATTN_BF16_ROWS rows, else read as
 * bf16, widened in registers once for the group; bench_host --attention measures GQA's
 * groups of 3 beside GPT-2's heads, docs/architecture.md). A prefill piece takes one KV
 * head and all its keys. A decode-sized one (at most HB_ATTN_RUN_ROWS rows) takes a run of
 * KV heads, so that it reads each block's keys of those heads, then their values, as two
 * contiguous runs of the pool, instead of 1-4 KiB pieces of it scattered a block's size
 * apart (bench_host, one layer's step at position 1000 on 2 threads, 8 sequences: 1.1 ms
 * fp32 and 0.39 ms bf16 against 1.65 and 2.0).
 *
 * Past HB_ATTN_SPAN_BLOCKS blocks a query's keys go in spans of that many blocks, counted
 * from position 0, each with its own running max, sum and output, folded into the query's
 * result in span order (fold_span). A decode-sized chunk's spans are units of their own,
 * folded by a second pass (spans come before head runs: a unit of every KV head over a span
 * of a sequence whose blocks were taken in order reads one run of the layer-major pool,
 * which the hardware prefetcher follows); a prefill piece folds its spans as it goes. So a
 * query's output has the same bits whatever chunk it is in: alone, as a decode, or in any
 * cut of a prompt (batch invariance). Neither the spans (fixed by position) nor which heads
 * share a unit depend on the thread count, so no result does. Keys go block by
 * block (block_tokens positions, contiguous per head in the pool) with an online softmax:
 * per query a running max m, a running sum l and an unnormalized output acc; a block whose
 * max exceeds m rescales acc and l by exp(m - new max). The inner loops over head_dim are
 * hb_simd's (AVX2/FMA where the CPU has it; AVX-512 for bf16 KV groups).
 *
 * Units run on the device's threads in any order; a unit's result depends only on its
 * inputs, so the output has the same bits for any thread count.
 */
#include <math.h>
#include <string.h>

#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "kernels/attention.h"

#define HB_ATTN_ROWS 16           /* query rows of a chunk in one unit */
#define HB_ATTN_RUN_ROWS 4        /* pieces of at most this many rows take a run of KV heads */
#define HB_ATTN_BF16_ROWS 2       /* rows of a unit up to which bf16 KV is not widened */
#define HB_ATTN_INLINE_WORK 32768 /* below this many (key x head x dim) products: no region */
#define HB_ATTN_SPAN_BLOCKS 16    /* blocks of keys a decode unit reads, at most */
/* floats between one query head's scores and the next's in a unit's scratch (B: block_tokens) */
#define HB_ATTN_P_STRIDE(B) ((size_t)(B) + 16)

typedef struct attn_job {
    const be_kv *kv;
    const be_attn *a;
    int layer, bf16, group; /* group: query heads per KV head */
    int run;                /* KV heads per unit of a decode-sized piece */
    const size_t *first;    /* (nchunks + 1) first unit of each chunk */
    const size_t *parts_at; /* (nchunks + 1) where a chunk's spans' partials start in parts */
    float *parts;           /* per split chunk (spans, rows, heads, hd + 2): acc, m, l */
    const hb_simd *simd;
    be_device *dev;
} attn_job;

/* Query vectors of a unit, at most: a prefill piece's rows on one KV head, or a decode
 * piece's on a run of them. */
static size_t unit_queries(int group, int run)
{
    size_t prefill = (size_t)HB_ATTN_ROWS, decode = (size_t)HB_ATTN_RUN_ROWS * (size_t)run;
    return (prefill > decode ? prefill : decode) * (size_t)group;
}

/* Floats of per-thread scratch a unit needs: a span's acc, m, l and the folded ones, a
 * group's scores, widened K and V. */
static size_t unit_floats(int group, int run, int hd, int B)
{
    size_t q = unit_queries(group, run);
    return 2 * (q * (size_t)hd + 2 * q) + (size_t)group * HB_ATTN_P_STRIDE(B) +
           2 * (size_t)B * (size_t)hd;
}

/* KV heads per unit for a chunk of n rows: a run for decode-sized chunks, else one. */
static int heads_per_unit(int32_t n, int run) { return n <= HB_ATTN_RUN_ROWS ? run : 1; }

/* Spans of keys chunk ch's rows reach (spans are the blocks [s S, (s + 1) S), S =
 * HB_ATTN_SPAN_BLOCKS, counted from position 0), from the first row's first key's. */
static int32_t chunk_spans(const be_attn *a, const int32_t *ch, int B)
{
    const int32_t n = ch[PE_K_CHUNK_N], pos0 = ch[PE_K_CHUNK_POS0];
    const int32_t kb0 = pe_k_attn_first(pos0, a->window) / B, kb1 = (pos0 + n - 1) / B;
    return kb1 / HB_ATTN_SPAN_BLOCKS - kb0 / HB_ATTN_SPAN_BLOCKS + 1;
}

/* Whether chunk ch's spans are units of their own (a decode-sized chunk past one span), whose
 * partials a second pass folds; else a unit folds its spans as it goes. */
static int split_spans(const be_attn *a, const int32_t *ch, int B)
{
    return ch[PE_K_CHUNK_N] <= HB_ATTN_RUN_ROWS && chunk_spans(a, ch, B) > 1;
}

/* Units of a chunk of n rows over kvh KV heads, times unit_spans (its spans where they are
 * split, else 1). */
static size_t chunk_units(int32_t n, int kvh, int run, int32_t unit_spans)
{
    size_t per = (size_t)heads_per_unit(n, run);
    return (size_t)(n + HB_ATTN_ROWS - 1) / HB_ATTN_ROWS * (((size_t)kvh + per - 1) / per) *
           (size_t)unit_spans;
}

/* The chunk holding unit u: the last c with first[c] <= u. */
static size_t chunk_of(const size_t *first, size_t nchunks, size_t u)
{
    size_t lo = 0, hi = nchunks; /* first[lo] <= u < first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (first[mid] <= u)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* G query heads q(G, hd) (a row's heads of one KV head, contiguous) against nk keys K(nk, hd)
 * and values V(nk, hd), fp32 or (bf16) read as bf16, each key and value read once for the
 * G heads, folded into their online softmaxes: running maxima m(G), sums l(G) and
 * unnormalized outputs acc(G, hd). p: (G, lp) scratch for the scores, then the weights. */
static void attend_keys(const hb_simd *simd, float *acc, float *m, float *l, float *p,
                        size_t lp, const float *q, int G, const void *K, const void *V, int bf16,
                        int nk, int hd, float scale)
{
    if (bf16)
        simd->scores_bf16(p, lp, q, (size_t)hd, G, K, nk, hd, scale);
    else
        simd->scores(p, lp, q, (size_t)hd, G, K, nk, hd, scale);
    for (int g = 0; g < G; g++) {
        float *pg = p + (size_t)g * lp, mx = pg[0];
        for (int t = 1; t < nk; t++)
            mx = pg[t] > mx ? pg[t] : mx;
        if (mx > m[g]) {
            float corr = expf(m[g] - mx); /* 0 for the first keys */
            simd->rescale(acc + (size_t)g * (size_t)hd, corr, hd);
            l[g] *= corr;
            m[g] = mx;
        }
        l[g] += simd->exp_sum(pg, nk, m[g]);
    }
    if (bf16)
        simd->accum_bf16(acc, (size_t)hd, p, lp, G, V, nk, hd);
    else
        simd->accum(acc, (size_t)hd, p, lp, G, V, nk, hd);
}

/* Folds a span's unnormalized output acc(hd), max m and sum l into a query's running ones
 * o(hd), *mo, *lo, spans in order: the first span with keys is copied, a later one rescales
 * both to the larger max. A query's output is then o / lo, the same bits however its spans
 * were computed: in one unit, or as units of their own merged after. */
static void fold_span(const hb_simd *simd, float *o, float *mo, float *lo, const float *acc,
                      float m, float l, int hd)
{
    if (!(l > 0.0f)) /* the query sees no key of the span */
        return;
    if (!(*lo > 0.0f)) {
        memcpy(o, acc, (size_t)hd * sizeof *o);
        *mo = m;
        *lo = l;
        return;
    }
    const float mx = m > *mo ? m : *mo, fo = expf(*mo - mx), fs = expf(m - mx);
    simd->rescale(o, fo, hd);
    for (int d = 0; d < hd; d++)
        o[d] += acc[d] * fs;
    *lo = *lo * fo + l * fs;
    *mo = mx;
}

/* out(hd) = o(hd) / l */
static void normalize(float *out, const float *o, float l, int hd)
{
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; d++)
        out[d] = o[d] * inv;
}

/* Rows [t_lo, t_hi] of KV head g's keys and values in block `block`: pointers into the
 * pool, fp32 or bf16 (then *bf16 = 1), or, when widen is set, the rows of a bf16 pool widened
 * into kbuf and vbuf (fp32). */
static void block_rows(const attn_job *j, int32_t block, int g, int32_t t_lo, int32_t t_hi,
                       int widen, float *kbuf, float *vbuf, const void **K, const void **V,
                       int *bf16)
{
    const pe_k_kv_shape s = j->kv->shape;
    size_t ki = pe_k_kv_index(s, block, j->layer, 0, g, t_lo);
    size_t vi = pe_k_kv_index(s, block, j->layer, 1, g, t_lo);
    *bf16 = 0;
    if (j->bf16 && widen) {
        const uint16_t *pool = j->kv->base;
        size_t len = (size_t)(t_hi - t_lo + 1) * (size_t)s.head_dim;
        j->simd->widen(kbuf, pool + ki, len);
        j->simd->widen(vbuf, pool + vi, len);
        *K = kbuf;
        *V = vbuf;
    } else if (j->bf16) {
        const uint16_t *pool = j->kv->base;
        *K = pool + ki;
        *V = pool + vi;
        *bf16 = 1;
    } else {
        const float *pool = j->kv->base;
        *K = pool + ki;
        *V = pool + vi;
    }
}

/* Asks for KV heads g..g+heads-1's keys and values in block `block` ahead of their use: a
 * block is 1-4 KiB per head, too short for the hardware prefetcher to catch it before decode's
 * few FMAs per key are done (the next block of a sequence lies anywhere in the pool). */
static void prefetch_block(const attn_job *j, int32_t block, int g, int heads)
{
    const pe_k_kv_shape s = j->kv->shape;
    const size_t elem = j->bf16 ? 2 : 4;
    const size_t bytes = (size_t)heads * (size_t)s.block_tokens * (size_t)s.head_dim * elem;
    const char *k = (const char *)j->kv->base + pe_k_kv_index(s, block, j->layer, 0, g, 0) * elem;
    const char *v = (const char *)j->kv->base + pe_k_kv_index(s, block, j->layer, 1, g, 0) * elem;
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(k + o);
        __builtin_prefetch(v + o);
    }
}

/* One unit: rows [i0, i1) of chunk c on KV heads [g0, g1), over the spans [sp0, sp1] of its
 * keys (numbered from position 0; one span for a split chunk's unit), each span's online
 * softmax folded into the queries' results, or stored as a partial where split. */
static void attn_unit(const attn_job *j, size_t u, float *tls)
{
    const be_attn *a = j->a;
    const int hd = j->kv->shape.head_dim, B = j->kv->shape.block_tokens, G = j->group;
    const size_t kvh = (size_t)j->kv->shape.kv_heads, h = (size_t)hd;
    const size_t c = chunk_of(j->first, a->nchunks, u), local = u - j->first[c];
    const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
    const int32_t row0 = ch[PE_K_CHUNK_ROW0], n = ch[PE_K_CHUNK_N], pos0 = ch[PE_K_CHUNK_POS0];
    const int32_t *bt = a->block_tables + ch[PE_K_CHUNK_BT];
    const int per = heads_per_unit(n, j->run), runs = ((int)kvh + per - 1) / per;
    const int split = split_spans(a, ch, B);
    const int32_t spans = split ? chunk_spans(a, ch, B) : 1;
    const size_t rest = local / (size_t)runs;
    const int g0 = (int)(local % (size_t)runs) * per;
    const int g1 = g0 + per < (int)kvh ? g0 + per : (int)kvh; /* KV heads [g0, g1) */
    const int32_t i0 = (int32_t)(rest / (size_t)spans) * HB_ATTN_ROWS;
    const int32_t i1 = i0 + HB_ATTN_ROWS < n ? i0 + HB_ATTN_ROWS : n;
    const size_t rows = (size_t)(i1 - i0), nq = rows * (size_t)G * (size_t)(g1 - g0);
    const size_t qmax = unit_queries(G, j->run);

    float *acc = tls; /* (nq, hd): query (g - g0, i - i0, hh) at ((g - g0) rows + i - i0) G + hh */
    float *m = acc + qmax * h, *l = m + qmax;               /* (nq) a span's max and sum */
    float *o = l + qmax, *mo = o + qmax * h, *lo = mo + qmax; /* the folded acc, m, l */
    float *p = lo + qmax; /* (G, HB_ATTN_P_STRIDE(B)) scores, then weights */
    float *kbuf = p + (size_t)G * HB_ATTN_P_STRIDE(B), *vbuf = kbuf + (size_t)B * h; /* (B, hd) */
    for (size_t q = 0; q < nq; q++)
        lo[q] = 0.0f;
    /* a bf16 block is widened once when several rows read it, else read as bf16 (once for
     * a row's G query heads) */
    const int widen = rows > HB_ATTN_BF16_ROWS;
    /* blocks from the first key the piece's first row sees to its last row's position */
    const int32_t p_hi = pos0 + i1 - 1, k_lo = pe_k_attn_first(pos0 + i0, a->window);
    const int32_t first_span = pe_k_attn_first(pos0, a->window) / B / HB_ATTN_SPAN_BLOCKS;
    int32_t sp0 = k_lo / B / HB_ATTN_SPAN_BLOCKS, sp1 = p_hi / B / HB_ATTN_SPAN_BLOCKS;
    if (split) /* this unit's one span */
        sp0 = sp1 = first_span + (int32_t)(rest % (size_t)spans);
    for (int32_t sp = sp0; sp <= sp1; sp++) {
        memset(acc, 0, nq * h * sizeof *acc);
        for (size_t q = 0; q < nq; q++) {
            m[q] = -INFINITY;
            l[q] = 0.0f;
        }
        int32_t kb_lo = sp * HB_ATTN_SPAN_BLOCKS, kb_hi = kb_lo + HB_ATTN_SPAN_BLOCKS - 1;
        kb_lo = kb_lo > k_lo / B ? kb_lo : k_lo / B;
        kb_hi = kb_hi < p_hi / B ? kb_hi : p_hi / B;
        for (int32_t kb = kb_lo; kb <= kb_hi; kb++) {
            const int32_t b0 = kb * B; /* position of the block's row 0 */
            const int32_t t_lo = (k_lo > b0 ? k_lo : b0) - b0;
            const int32_t t_hi = (p_hi < b0 + B - 1 ? p_hi : b0 + B - 1) - b0;
            const void *K, *V; /* (t_hi - t_lo + 1, hd), row 0 = block row t_lo */
            int kv_bf16;
            if (kb < kb_hi)
                prefetch_block(j, bt[kb + 1], g0, g1 - g0);
            for (int g = g0; g < g1; g++) {
                block_rows(j, bt[kb], g, t_lo, t_hi, widen, kbuf, vbuf, &K, &V, &kv_bf16);
                for (int32_t i = i0; i < i1; i++) { /* the keys this row sees in the block */
                    const int32_t qpos = pos0 + i, f = pe_k_attn_first(qpos, a->window);
                    const int32_t klo = (f > b0 + t_lo ? f : b0 + t_lo) - b0;
                    const int32_t khi = (qpos < b0 + t_hi ? qpos : b0 + t_hi) - b0;
                    if (klo > khi)
                        continue;
                    const size_t at = (size_t)(klo - t_lo) * h *
                                      (kv_bf16 ? sizeof(uint16_t) : sizeof(float));
                    /* the row's G query heads of KV head g, together */
                    const size_t qi = ((size_t)(g - g0) * rows + (size_t)(i - i0)) * (size_t)G;
                    const float *qv =
                        a->q + (size_t)(row0 + i) * a->q_stride + (size_t)(g * G) * h;
                    attend_keys(j->simd, acc + qi * h, &m[qi], &l[qi], p, HB_ATTN_P_STRIDE(B),
                                qv, G, (const char *)K + at, (const char *)V + at, kv_bf16,
                                khi - klo + 1, hd, a->scale);
                }
            }
        }
        for (size_t qi = 0; qi < nq; qi++) {
            if (split) { /* a decode chunk's one piece: i0 = 0, rows = n */
                const size_t hh = qi % (size_t)G, i = qi / (size_t)G % rows;
                const size_t head = ((size_t)g0 + qi / (size_t)G / rows) * (size_t)G + hh;
                float *part = j->parts + j->parts_at[c] +
                              (((size_t)(sp - first_span) * rows + i) * (size_t)a->heads +
                               head) * (h + 2);
                memcpy(part, acc + qi * h, h * sizeof *part);
                part[h] = m[qi];
                part[h + 1] = l[qi];
            } else {
                fold_span(j->simd, o + qi * h, &mo[qi], &lo[qi], acc + qi * h, m[qi], l[qi], hd);
            }
        }
    }
    if (split)
        return;
    for (size_t qi = 0; qi < nq; qi++) {
        const size_t hh = qi % (size_t)G, i = qi / (size_t)G % rows;
        const size_t head = ((size_t)g0 + qi / (size_t)G / rows) * (size_t)G + hh;
        normalize(a->out + ((size_t)row0 + (size_t)i0 + i) * a->out_stride + head * h,
                  o + qi * h, lo[qi], hd);
    }
}

/* Chunk c's output, where its spans were units of their own: each query's spans folded in
 * their order (a span the query sees no key of has l = 0), as a unit folds them. */
static void merge_spans(const attn_job *j, size_t c, float *o)
{
    const be_attn *a = j->a;
    const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
    const int B = j->kv->shape.block_tokens;
    if (!split_spans(a, ch, B))
        return;
    const int32_t spans = chunk_spans(a, ch, B);
    const size_t n = (size_t)ch[PE_K_CHUNK_N], H = (size_t)a->heads;
    const int hd = j->kv->shape.head_dim;
    const size_t h = (size_t)hd, w = h + 2;
    const float *parts = j->parts + j->parts_at[c];
    for (size_t i = 0; i < n; i++)
        for (size_t q = 0; q < H; q++) {
            float mo = -INFINITY, lo = 0.0f;
            for (int32_t s = 0; s < spans; s++) {
                const float *p = parts + (((size_t)s * n + i) * H + q) * w;
                fold_span(j->simd, o, &mo, &lo, p, p[h], p[h + 1], hd);
            }
            normalize(a->out + ((size_t)ch[PE_K_CHUNK_ROW0] + i) * a->out_stride + q * h, o, lo,
                      hd);
        }
}

static void merge_range(void *arg, size_t c0, size_t c1, int thread)
{
    const attn_job *j = arg;
    float *o = hb_tls(j->dev, thread); /* (hd) a query's folded output */
    for (size_t c = c0; c < c1; c++)
        merge_spans(j, c, o);
}

static void attn_units(void *arg, size_t u0, size_t u1, int thread)
{
    const attn_job *j = arg;
    float *tls = hb_tls(j->dev, thread);
    for (size_t u = u0; u < u1; u++)
        attn_unit(j, u, tls);
}

/* Checks the step's chunk table and the block ids its queries read. */
static pe_status check_chunks(be_device *dev, const be_kv *kv, const be_attn *a)
{
    const int B = kv->shape.block_tokens;
    for (size_t c = 0; c < a->nchunks; c++) {
        const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
        int32_t row0 = ch[PE_K_CHUNK_ROW0], n = ch[PE_K_CHUNK_N], pos0 = ch[PE_K_CHUNK_POS0];
        int32_t bto = ch[PE_K_CHUNK_BT];
        if (row0 < 0 || n < 0 || (size_t)row0 + (size_t)n > a->rows || pos0 < 0 || bto < 0)
            return hb_fail(dev, PE_EINVAL,
                           "attention on host device %d: chunk %zu (row0=%d n=%d pos0=%d "
                           "bt=%d) does not fit the step's %zu rows; fields must be >= 0 and "
                           "row0 + n <= rows",
                           dev->id, c, row0, n, pos0, bto, a->rows);
        if (n == 0)
            continue;
        if ((int64_t)pos0 + n > a->max_keys)
            return hb_fail(dev, PE_EINVAL,
                           "attention on host device %d: chunk %zu's last token sees %lld "
                           "keys, more than max_keys=%d; set max_keys to the step's largest "
                           "position + 1",
                           dev->id, c, (long long)pos0 + n, a->max_keys);
        if (!a->block_tables)
            return hb_fail(dev, PE_EINVAL, "attention on host device %d: block_tables is NULL",
                           dev->id);
        const int32_t *bt = a->block_tables + bto;
        int32_t last = pos0 + n - 1;
        for (int32_t kb = pe_k_attn_first(pos0, a->window) / B; kb <= last / B; kb++)
            if (bt[kb] < 0 || (size_t)bt[kb] >= kv->shape.nblocks)
                return hb_fail(dev, PE_EINVAL,
                               "attention on host device %d: chunk %zu's block table entry %d "
                               "is block %d, outside the pool's %zu blocks; check the "
                               "sequence's block table",
                               dev->id, c, kb, bt[kb], kv->shape.nblocks);
    }
    return PE_OK;
}

pe_status hb_attention(be_device *dev, const be_kv *kv, int layer, const be_attn *a)
{
    if (!a)
        return hb_fail(dev, PE_EINVAL, "attention on host device %d: the step (be_attn) is "
                       "NULL", dev->id);
    if (a->rows == 0 || a->nchunks == 0)
        return PE_OK;
    pe_status st = hb_kv_check(dev, kv, layer, "attention");
    if (st != PE_OK)
        return st;
    const int kvh = kv->shape.kv_heads, hd = kv->shape.head_dim;
    if (a->heads <= 0 || a->heads % kvh != 0)
        return hb_fail(dev, PE_EINVAL,
                       "attention on host device %d: heads=%d is not a positive multiple of "
                       "the pool's kv_heads=%d (each KV head serves heads / kv_heads query "
                       "heads)",
                       dev->id, a->heads, kvh);
    size_t width = (size_t)a->heads * (size_t)hd;
    if (a->q_stride < width || a->out_stride < width)
        return hb_fail(dev, PE_EINVAL,
                       "attention on host device %d: q_stride=%zu and out_stride=%zu must be "
                       ">= heads x head_dim = %zu",
                       dev->id, a->q_stride, a->out_stride, width);
    HB_NEED(dev, a->q, 1, "attention");
    HB_NEED(dev, a->out, 1, "attention");
    HB_NEED(dev, a->chunks, 1, "attention");
    st = check_chunks(dev, kv, a);
    if (st != PE_OK)
        return st;

    /* KV heads per decode unit: all of them, split so that the decode chunks' spans make at
     * least one unit per thread */
    const int B = kv->shape.block_tokens;
    const size_t part_floats = (size_t)a->heads * ((size_t)hd + 2); /* a row's: acc, m, l */
    size_t decode_spans = 0, nparts = 0; /* floats of the split chunks' partials */
    for (size_t c = 0; c < a->nchunks; c++) {
        const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
        const int32_t spans = chunk_spans(a, ch, B);
        if (ch[PE_K_CHUNK_N] <= HB_ATTN_RUN_ROWS)
            decode_spans += (size_t)spans;
        if (split_spans(a, ch, B))
            nparts += (size_t)spans * (size_t)ch[PE_K_CHUNK_N] * part_floats;
    }
    size_t splits = decode_spans ? ((size_t)dev->nthreads + decode_spans - 1) / decode_spans : 1;
    splits = splits < (size_t)kvh ? splits : (size_t)kvh;
    const int run = (int)(((size_t)kvh + splits - 1) / splits);
    /* call scratch: first (nchunks + 1), parts_at (nchunks + 1), then the partials */
    const size_t index_bytes = (2 * (a->nchunks + 1) * sizeof(size_t) + 63) / 64 * 64;
    char *call = hb_call_scratch(dev, index_bytes + nparts * sizeof(float), "attention");
    if (!call)
        return PE_ENOMEM;
    size_t *first = (size_t *)(void *)call, *parts_at = first + a->nchunks + 1;
    double work = 0; /* key x query-head x dim products, to decide on a region */
    first[0] = parts_at[0] = 0;
    for (size_t c = 0; c < a->nchunks; c++) {
        const int32_t *ch = a->chunks + c * PE_K_CHUNK_FIELDS;
        const size_t n = (size_t)ch[PE_K_CHUNK_N];
        const int32_t spans = split_spans(a, ch, B) ? chunk_spans(a, ch, B) : 1;
        first[c + 1] = first[c] + chunk_units((int32_t)n, kvh, run, spans);
        parts_at[c + 1] = parts_at[c] + (spans > 1 ? (size_t)spans * n * part_floats : 0);
        work += (double)n * ((double)ch[PE_K_CHUNK_POS0] + (double)n) * (double)width;
    }
    st = hb_scratch_reserve(dev, unit_floats(a->heads / kvh, run, hd, kv->shape.block_tokens) *
                                     sizeof(float), "attention");
    if (st != PE_OK)
        return st;
    attn_job j = {.kv = kv,
                  .a = a,
                  .layer = layer,
                  .bf16 = kv->dtype == PE_DTYPE_BF16,
                  .group = a->heads / kvh,
                  .run = run,
                  .first = first,
                  .parts_at = parts_at,
                  .parts = (float *)(void *)(call + index_bytes),
                  .simd = hb_simd_get(),
                  .dev = dev};
    size_t units = first[a->nchunks];
    hb_for(dev, units, work < HB_ATTN_INLINE_WORK ? units : 1, attn_units, &j);
    if (nparts) /* a split chunk's merge reads (spans, n, heads, hd + 2) floats */
        hb_for(dev, a->nchunks, nparts < HB_ATTN_INLINE_WORK ? a->nchunks : 1, merge_range, &j);
    return PE_OK;
}
