/* cb_launch.h: the kernel launchers of the .cu files, callable from C.
 *
 * Each launcher enqueues its grid on stream s and returns the launch error (cudaSuccess,
 * or what cudaGetLastError said right after the launch). Arguments were checked by the
 * caller (cb_kernel_ops.c, cb_peer.c); shapes as in backend.h.
 */
#ifndef PE_CB_LAUNCH_H
#define PE_CB_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/attention.h"
#include "kernels/sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most ranks of one peer-path communicator: the reduce kernel takes its inputs by value. */
#define CB_PEER_MAX_RANKS 32

cudaError_t cb_launch_bias_add(cudaStream_t s, float *x, const float *bias, size_t rows,
                               size_t cols);
cudaError_t cb_launch_relu(cudaStream_t s, float *x, size_t n);
cudaError_t cb_launch_gelu(cudaStream_t s, float *x, size_t n);
cudaError_t cb_launch_residual_add(cudaStream_t s, float *x, const float *r, size_t n);
cudaError_t cb_launch_layernorm(cudaStream_t s, float *out, const float *x, const float *gamma,
                                const float *beta, size_t rows, size_t cols, float eps);
cudaError_t cb_launch_softmax(cudaStream_t s, float *x, size_t rows, size_t cols);
/* out(n) = in(n) rounded to bf16 (pe_k_to_bf16) */
cudaError_t cb_launch_to_bf16(cudaStream_t s, uint16_t *out, const float *in, size_t n);
/* out(n, dim) = table[ids(n)], table fp32 (bf16 = 0) or bf16 (bf16 = 1) holding rows [row0,
 * row0 + nrows) of the vocabulary; an id outside them gets zeros (pe_k_embedding_shard_row).
 * bad: a device int32 set to INT32_MAX before; afterwards the smallest row whose id is
 * outside [0, vocab), or still INT32_MAX. Every id is checked before any row is written:
 * with a bad id, out is left untouched. */
cudaError_t cb_launch_embedding(cudaStream_t s, float *out, const void *table, int bf16,
                                const int32_t *ids, size_t n, size_t dim, size_t vocab,
                                size_t row0, size_t nrows, int32_t *bad);

/* ---- decoder operations (cb_decoder.cu, cb_attention.cu, cb_sample.cu) ---- */

/* out(rows, cols) = rmsnorm of x(rows, cols) times w(cols); out may be x */
cudaError_t cb_launch_rmsnorm(cudaStream_t s, float *out, const float *x, const float *w,
                              size_t rows, size_t cols, float eps);
/* rope of heads [0, nheads) of each row of x(rows, stride), in place; pos(rows),
 * inv_freq(head_dim / 2) */
cudaError_t cb_launch_rope(cudaStream_t s, float *x, size_t rows, size_t stride, size_t nheads,
                           size_t head_dim, const int32_t *pos, const float *inv_freq);
/* out(rows, n) = silu(gate_up[:, :n]) * gate_up[:, n:] */
cudaError_t cb_launch_silu_mul(cudaStream_t s, float *out, const float *gate_up, size_t rows,
                               size_t n);
/* k and v rows (rows, stride) into layer `layer` of a pool of shape.nblocks blocks, at
 * slots(rows); a slot outside the pool is skipped */
cudaError_t cb_launch_kv_append(cudaStream_t s, void *pool, int bf16, pe_k_kv_shape shape,
                                int layer, const float *k, const float *v, size_t stride,
                                const int32_t *slots, size_t rows);

/* One attention call as the grids take it (backend.h's be_kv and be_attn, flattened). */
typedef struct cb_attn_args {
    const void *pool; /* (shape.nblocks, pe_k_kv_block_elems(shape)), fp32 or bf16 */
    int bf16;
    pe_k_kv_shape shape;
    int layer;
    const float *q; /* (rows, q_stride) */
    size_t q_stride;
    float *out; /* (rows, out_stride) */
    size_t out_stride;
    size_t rows;
    int heads;
    float scale;
    int32_t window;
    size_t nchunks;
    const int32_t *chunks;       /* (nchunks, PE_K_CHUNK_FIELDS) */
    const int32_t *block_tables; /* the chunks' block tables end to end */
    int32_t max_keys;
} cb_attn_args;

/* Largest head_dim the attention grids take. */
#define CB_ATTN_MAX_HEAD_DIM 256

/* a->out = attention of a->q over the pool. ws (ws_floats floats of device memory) holds
 * the partial results of a split over the keys (flash-decoding); sms is the device's
 * multiprocessor count, which sizes the split. */
cudaError_t cb_launch_attention(cudaStream_t s, const cb_attn_args *a, float *ws,
                                size_t ws_floats, int sms);

/* idx(rows) = the first index of the largest value of each row of x(rows, n) */
cudaError_t cb_launch_argmax(cudaStream_t s, const float *x, size_t rows, size_t n,
                             int32_t *idx);
/* the k (<= CB_TOPK_MAX) largest of each row of x(rows, n), largest first, ties in index
 * order: idx(rows, k), val(rows, k); lse(rows) or NULL */
#define CB_TOPK_MAX 64
cudaError_t cb_launch_topk(cudaStream_t s, const float *x, size_t rows, size_t n, size_t k,
                           int32_t *idx, float *val, float *lse);
/* tokens(rows) by sample.h's rule with params(rows); logit(rows) or NULL. n <= CB_SAMPLE_MAX_N:
 * the grid sums the weights in 2^-40 fixed point, in 64 bits. */
#define CB_SAMPLE_MAX_N ((size_t)1 << 23)
cudaError_t cb_launch_sample(cudaStream_t s, const float *x, size_t rows, size_t n,
                             const pe_k_sampling *params, int32_t *tokens, float *logit);
/* sample.h's pe_k_penalize_rows: a thread per entry (entries name each (row, id) once). */
cudaError_t cb_launch_penalize(cudaStream_t s, float *x, size_t rows, size_t n, int32_t id0,
                               const pe_k_penalty *p, size_t count);
/* sample.h's pe_k_mask_rows: a thread per logit. */
cudaError_t cb_launch_mask(cudaStream_t s, float *x, size_t rows, size_t n, int32_t id0,
                           const int32_t *row_mask, const uint32_t *bits, size_t words);

/* out(count) = in[0] + in[1] + ... + in[nin-1], added in that order for every element, so
 * every caller gets the same bits. out may be one of the inputs. nin <= CB_PEER_MAX_RANKS. */
cudaError_t cb_launch_reduce(cudaStream_t s, float *out, const float *const *in, int nin,
                             size_t count);
/* For each piece i < npieces: out + dst_off[i] receives len[i] elements from src[i]
 * (same device). One grid for all pieces. npieces <= CB_PEER_MAX_RANKS. */
cudaError_t cb_launch_gather(cudaStream_t s, float *out, const float *const *src,
                             const size_t *dst_off, const size_t *len, int npieces);

#ifdef __cplusplus
}
#endif

#endif
