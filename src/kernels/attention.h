/* attention.h: the paged KV cache's layout, a step's chunk table, which keys a query sees,
 * and the naive twin of the attention kernels.
 *
 * A worker's KV pool holds nblocks blocks of block_tokens (16) positions each, for the
 * layers and KV heads this worker holds, layer by layer:
 *   pool (nlayers, nblocks, 2, kv_heads, block_tokens, head_dim)
 *                                            -- [layer][block][K|V][head][token][dim]
 * so that one layer's blocks lie together: a decode step reads a layer's keys and values of
 * a sequence whose blocks were taken in order as one run of memory (a block of all layers
 * put consecutive blocks of a layer 0.6 MiB apart in GPT-2's bf16 pool). A block id names
 * the same block in every layer. A sequence's block table maps its
 * position pos to block bt[pos / block_tokens], row pos % block_tokens. Elements are fp32
 * or bf16 (the pool's dtype).
 *
 * A step is a batch of chunks; chunk c is one row of PE_K_CHUNK_FIELDS int32: its first
 * row among the step's tokens, its token count, the position of its first token, and
 * where its block table starts in the step's concatenated block tables. Token row
 * row0 + i is at position pos0 + i and attends to the positions [0, pos0 + i] of its own
 * sequence (within the sliding window, if any), read from the cache after this step's
 * keys and values were appended.
 */
#ifndef PE_KERNELS_ATTENTION_H
#define PE_KERNELS_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"
#include "kernels/kernel_defs.h"

typedef struct pe_k_kv_shape {
    int nlayers;      /* layers this worker holds */
    int kv_heads;     /* KV heads this worker holds */
    int block_tokens; /* positions per block */
    int head_dim;
    size_t nblocks; /* blocks in the pool */
} pe_k_kv_shape;

/* Elements of one block, over all the layers. */
PE_KFN size_t pe_k_kv_block_elems(pe_k_kv_shape s)
{
    return (size_t)s.nlayers * 2 * (size_t)s.kv_heads * (size_t)s.block_tokens *
           (size_t)s.head_dim;
}

/* Element offset of dimension 0 of (block, layer, K (v = 0) or V (v = 1), head, row). */
PE_KFN size_t pe_k_kv_index(pe_k_kv_shape s, int32_t block, int layer, int v, int head,
                            int row)
{
    return (((((size_t)layer * s.nblocks + (size_t)block) * 2 + (size_t)v) *
                  (size_t)s.kv_heads +
              (size_t)head) *
                 (size_t)s.block_tokens +
             (size_t)row) *
           (size_t)s.head_dim;
}

/* Stores x at element i: fp32, or rounded to bf16. */
PE_KFN void pe_k_kv_store(void *pool, int bf16, size_t i, float x)
{
    if (bf16)
        ((uint16_t *)pool)[i] = pe_k_to_bf16(x);
    else
        ((float *)pool)[i] = x;
}

/* The fields of a chunk-table row. */
enum {
    PE_K_CHUNK_ROW0 = 0, /* first row of the chunk's tokens in the step */
    PE_K_CHUNK_N,        /* its token count */
    PE_K_CHUNK_POS0,     /* the position of its first token */
    PE_K_CHUNK_BT,       /* where its block table starts in the step's block tables */
    PE_K_CHUNK_FIELDS
};

/* 1 when a query at position qpos sees the key at kpos: kpos <= qpos, and, with a sliding
 * window w > 0 (Mistral), qpos - kpos < w. */
PE_KFN int pe_k_attn_visible(int32_t qpos, int32_t kpos, int32_t window)
{
    return kpos <= qpos && (window <= 0 || qpos - kpos < window);
}

/* The first position a query at qpos sees. */
PE_KFN int32_t pe_k_attn_first(int32_t qpos, int32_t window)
{
    return window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
}

/* The naive twin of the attention kernels, for one query head: out(hd) = softmax over the
 * visible keys j of (q . K_j) * scale, times V. Keys in position order, scores kept in
 * scores (qpos + 1 floats), two passes, float. kvh is the KV head the query head reads
 * (query head h reads KV head h / (heads / kv_heads)). */
PE_KFN void pe_k_attend_naive(float *out, const float *q, const void *pool, int bf16,
                              pe_k_kv_shape s, int layer, int kvh, const int32_t *bt,
                              int32_t qpos, int32_t window, float scale, float *scores)
{
    const int hd = s.head_dim, B = s.block_tokens;
    const int32_t first = pe_k_attn_first(qpos, window);
    float mx = -INFINITY;
    for (int32_t j = first; j <= qpos; j++) {
        size_t k = pe_k_kv_index(s, bt[j / B], layer, 0, kvh, j % B);
        float dot = 0.0f;
        for (int d = 0; d < hd; d++)
            dot += q[d] * pe_k_load_elem(pool, bf16, k + (size_t)d);
        scores[j] = dot * scale;
        mx = scores[j] > mx ? scores[j] : mx;
    }
    float sum = 0.0f;
    for (int32_t j = first; j <= qpos; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    for (int d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int32_t j = first; j <= qpos; j++) {
        size_t v = pe_k_kv_index(s, bt[j / B], layer, 1, kvh, j % B);
        float p = scores[j] / sum;
        for (int d = 0; d < hd; d++)
            out[d] += p * pe_k_load_elem(pool, bf16, v + (size_t)d);
    }
}

#endif
