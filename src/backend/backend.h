/* backend.h: the one interface between the engine/model and a device backend.
 *
 * A backend is a table of function pointers (be_ops). The engine and the model's forward
 * pass are written once against it; src/backend/host/ (CPU) and src/backend/cuda/ (GPU)
 * implement it.
 *
 * Threading: a be_device belongs to the worker thread that opened it; every call that
 * takes a be_device runs on that thread. comm_create/comm_abort/comm_destroy and the
 * discovery calls may run on any thread. Pointers named "device pointer" come from
 * alloc on the same device.
 *
 * Ordering: like a CUDA stream, calls on one device are executed in call order; a
 * backend may return before the work is done. synchronize(dev) waits until everything
 * issued on dev is complete, including sends that a peer has not yet received.
 *
 * Errors: every call returns a pe_status; the message of the last failure on a device is
 * read with last_error(dev).
 */
#ifndef PE_BACKEND_H
#define PE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/sample.h"
#include "pengine/pengine.h"

typedef struct be_device be_device; /* one device, as owned by one worker (opaque) */
typedef struct be_comm be_comm;     /* one rank of a communicator (opaque) */
/* The processes of an MPI job a communicator spans (comm_create_procs): this process is
 * `me` of nprocs, each holding the same number of consecutive ranks. */
typedef struct be_procs {
    int nprocs, me;
} be_procs;

/* The layout every comm_create_procs takes: n ranks spread evenly over procs, devs[r] set
 * exactly for this process's ranks. PE_EINVAL naming the first rank that breaks it. */
pe_status be_procs_check(be_device *const *devs, int n, const be_procs *procs, pe_err *err);

typedef struct be_device_desc {
    int id;
    char name[128];      /* "host core set", "NVIDIA H200" */
    size_t memory_bytes; /* total device memory (host: physical RAM) */
    char bus_id[32];     /* PCI bus id, "" for host devices */
    int numa_node;       /* -1 if unknown */
    char cpulist[256];   /* cores near the device in hwloc list syntax ("0-7"), "" = any */
    char kernels[64];    /* the kernels that compute ("avx512, bf16 on AMX tiles"), or "" */
} be_device_desc;

/* The activation of a Linear layer (linear), applied in fp32 after the bias. */
typedef enum be_act { BE_ACT_NONE = 0, BE_ACT_RELU, BE_ACT_GELU } be_act;

/* A worker's paged KV pool: shape.nblocks blocks laid out as kernels/attention.h says, for
 * the layers and KV heads of shape, in dtype (fp32, or bf16: values rounded when stored). */
typedef struct be_kv {
    void *base; /* device: shape.nblocks * pe_k_kv_block_elems(shape) elements */
    pe_dtype dtype;
    pe_k_kv_shape shape;
} be_kv;

/* One layer's attention over a step (kernels/attention.h: chunks, positions, visibility).
 * Query head h of row r is q + r * q_stride + h * head_dim, and reads KV head
 * h / (heads / kv_heads); its output goes to out + r * out_stride + h * head_dim. */
typedef struct be_attn {
    size_t rows;                  /* the step's tokens */
    const float *q;               /* device (rows, q_stride) */
    size_t q_stride;
    float *out;                   /* device (rows, out_stride), out_stride >= heads * hd */
    size_t out_stride;
    int heads;                    /* query heads, a multiple of the pool's kv_heads */
    float scale;                  /* score scale, usually 1 / sqrt(head_dim) */
    int32_t window;               /* sliding window in positions, 0 = none */
    size_t nchunks;
    const int32_t *chunks;        /* device (nchunks, PE_K_CHUNK_FIELDS) */
    const int32_t *block_tables;  /* device, the chunks' block tables end to end */
    int32_t max_keys;             /* most keys any query of the step sees (max pos + 1) */
} be_attn;

typedef struct be_ops {
    const char *name;     /* "host", "cuda" */
    pe_backend_kind kind; /* PE_BACKEND_HOST or PE_BACKEND_CUDA */

    /* ---- discovery (any thread) ---- */
    pe_status (*device_count)(int *n, pe_err *err);
    pe_status (*device_describe)(int id, be_device_desc *out, pe_err *err);

    /* ---- life cycle (on the owning worker thread) ---- */
    pe_status (*open)(int id, be_device **out, pe_err *err);
    void (*close)(be_device *dev);
    const char *(*last_error)(const be_device *dev);
    /* Compute threads, host only (NULL on CUDA, where they do not apply). A host device
     * computes with a pool: the owning worker thread and one helper per further core of
     * the set that thread was bound to when it opened the device (every core it may use
     * when unbound). set_compute_threads restarts the pool with n >= 1 threads (the engine:
     * pe_config.threads for an unbound worker; tests); compute_threads reports the count
     * (pe_engine_info.threads). */
    pe_status (*set_compute_threads)(be_device *dev, int n);
    int (*compute_threads)(const be_device *dev);

    /* ---- memory; sizes in bytes ---- */
    pe_status (*alloc)(be_device *dev, size_t bytes, void **out); /* 64-byte aligned at least */
    void (*free)(be_device *dev, void *p);
    pe_status (*copy_h2d)(be_device *dev, void *dst, const void *src, size_t bytes);
    pe_status (*copy_d2h)(be_device *dev, void *dst, const void *src, size_t bytes);
    pe_status (*copy_d2d)(be_device *dev, void *dst, const void *src, size_t bytes);
    /* 2-D device-to-device copy (cudaMemcpy2D): height rows of width bytes, row i from
     * src + i * src_pitch to dst + i * dst_pitch (pitches in bytes) */
    pe_status (*copy_d2d_2d)(be_device *dev, void *dst, size_t dst_pitch, const void *src,
                             size_t src_pitch, size_t width, size_t height);

    /* ---- ordering ---- */
    pe_status (*synchronize)(be_device *dev);

    /* ---- GEMM, row-major, fp32 ----
     * C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C(M,N)
     * op(X) = X, or X^T when trans_x is nonzero; ld* are row strides in elements
     * (lda is the stored row length of A: K if not transposed, M if transposed). */
    pe_status (*gemm)(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                      float alpha, const float *A, size_t lda, const float *B, size_t ldb,
                      float beta, float *C, size_t ldc);
    /* batch GEMMs; matrix b of X starts at X + b * stride_x (elements) */
    pe_status (*gemm_strided_batched)(be_device *dev, int trans_a, int trans_b, size_t M,
                                      size_t N, size_t K, float alpha, const float *A,
                                      size_t lda, size_t stride_a, const float *B, size_t ldb,
                                      size_t stride_b, float beta, float *C, size_t ldc,
                                      size_t stride_c, size_t batch);

    /* ---- bf16 (a uint16_t holding the upper half of a float; kernels/bf16.h) ---- */
    /* As gemm, with A and B in bf16 and C in fp32: exact products, fp32 sums (cuBLAS:
     * cublasGemmEx, CUBLAS_COMPUTE_32F, on tensor cores). */
    pe_status (*gemm_bf16)(be_device *dev, int trans_a, int trans_b, size_t M, size_t N,
                           size_t K, float alpha, const uint16_t *A, size_t lda,
                           const uint16_t *B, size_t ldb, float beta, float *C, size_t ldc);
    /* out(n) = in(n) rounded to bf16, nearest even (pe_k_to_bf16) */
    pe_status (*to_bf16)(be_device *dev, uint16_t *out, const float *in, size_t n);

    /* ---- a Linear layer in one call (the forward pass's only GEMM) ----
     * y(M, N) = act(x(M, K) W(N, K)^T + b(N)), row-major and dense (rows of K, K and N).
     * dtype FP32: x and W are float; BF16: bf16, with fp32 sums. b may be NULL (no bias).
     * y is float, or, when y_bf16 (BF16 only), bf16: the fp32 result rounded as to_bf16,
     * and tmp (M, N) floats on the device holds that fp32 result on the way (NULL when not
     * y_bf16: the backend allocates nothing during a forward). Bias and activation apply in
     * fp32 to the sums. Host: gemm, bias_add, the activation, to_bf16 (be_linear_unfused);
     * CUDA: one cuBLASLt matmul whose epilogue adds the bias (and applies ReLU, and writes
     * bf16) where cuBLASLt has an algorithm for the shape. */
    pe_status (*linear)(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                        const void *x, const void *W, const float *b, be_act act, void *y,
                        int y_bf16, float *tmp);

    /* ---- kernels (element math from src/kernels/) ---- */
    /* x(rows, cols) += bias(cols) broadcast over rows */
    pe_status (*bias_add)(be_device *dev, float *x, const float *bias, size_t rows, size_t cols);
    pe_status (*relu)(be_device *dev, float *x, size_t n);
    pe_status (*gelu)(be_device *dev, float *x, size_t n); /* tanh form */
    /* out(rows, cols) = (x - mean) / sqrt(var + eps) * gamma(cols) + beta(cols), per row */
    pe_status (*layernorm)(be_device *dev, float *out, const float *x, const float *gamma,
                           const float *beta, size_t rows, size_t cols, float eps);
    /* x(rows, cols): softmax of each row, in place */
    pe_status (*softmax)(be_device *dev, float *x, size_t rows, size_t cols);
    /* x(n) += r(n) */
    pe_status (*residual_add)(be_device *dev, float *x, const float *r, size_t n);
    /* out(n, dim) = table[ids(n)], the table fp32 or bf16 (dtype), out fp32: the table holds
     * rows [row0, row0 + nrows) of a vocabulary of vocab (nrows, dim), and an id outside
     * them gets a row of zeros (a vocab-parallel shard; row0 0 and nrows vocab: the whole
     * table). ids is a device pointer; an id outside [0, vocab) is PE_EINVAL, every id
     * checked before any row is written (out untouched) */
    pe_status (*embedding)(be_device *dev, pe_dtype dtype, float *out, const void *table,
                           const int32_t *ids, size_t n, size_t dim, size_t vocab, size_t row0,
                           size_t nrows);

    /* ---- decoder operations (element math from src/kernels/: rowwise.h, rope.h,
     * elementwise.h, attention.h, sample.h); every pointer is a device pointer ---- */
    /* out(rows, cols) = x / sqrt(mean(x^2) + eps) * w(cols), per row; out may be x */
    pe_status (*rmsnorm)(be_device *dev, float *out, const float *x, const float *w,
                         size_t rows, size_t cols, float eps);
    /* Rotary embedding (rope.h), in place: heads [0, nheads) of each row of x(rows, stride),
     * head h at x + r * stride + h * head_dim, row r at position pos(r); inv_freq
     * (head_dim / 2). Query and key heads are adjacent in a fused qkv row: one call. */
    pe_status (*rope)(be_device *dev, float *x, size_t rows, size_t stride, size_t nheads,
                      size_t head_dim, const int32_t *pos, const float *inv_freq);
    /* out(rows, n) = silu(gate) * up, where gate_up(rows, 2n) holds gate in its first n
     * columns and up in the last n */
    pe_status (*silu_mul)(be_device *dev, float *out, const float *gate_up, size_t rows,
                          size_t n);
    /* Stores the keys and values of rows tokens into layer `layer` of the pool: row r's
     * KV head h is k + r * stride + h * head_dim (v likewise) and goes to slot slots(r) =
     * block * block_tokens + row in the block. */
    pe_status (*kv_append)(be_device *dev, const be_kv *kv, int layer, const float *k,
                           const float *v, size_t stride, const int32_t *slots, size_t rows);
    /* a->out = attention of a->q over the keys and values of layer `layer` in kv */
    pe_status (*attention)(be_device *dev, const be_kv *kv, int layer, const be_attn *a);
    /* idx(rows) = the first index of the largest value of each row of x(rows, n) */
    pe_status (*argmax)(be_device *dev, const float *x, size_t rows, size_t n, int32_t *idx);
    /* The k largest values of each row of x(rows, n), largest first (equal values in index
     * order): idx(rows, k), val(rows, k); lse(rows) = log(sum(exp(row))), or NULL. k <= n. */
    pe_status (*topk)(be_device *dev, const float *x, size_t rows, size_t n, size_t k,
                      int32_t *idx, float *val, float *lse);
    /* tokens(rows): row r's token from x(rows, n) by params(r) (sample.h's rule);
     * logit(rows), or NULL: the chosen token's value x(r, token) */
    pe_status (*sample)(be_device *dev, const float *x, size_t rows, size_t n,
                        const pe_k_sampling *params, int32_t *tokens, float *logit);
    /* The sampling penalties p(count) on logits x(rows, n), which hold vocabulary ids id0
     * .. id0 + n - 1 (sample.h's pe_k_penalize_rows): entries outside are left out. Each
     * (row, id) is named at most once. */
    pe_status (*penalize)(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                          const pe_k_penalty *p, size_t count);
    /* Structured output's masks on logits x(rows, n), which hold vocabulary ids id0 .. id0
     * + n - 1 (sample.h's pe_k_mask_rows): row r keeps the ids allowed by mask row_mask[r]
     * of bits (masks of `words` words each), the others become -inf; row_mask[r] < 0
     * leaves it alone. */
    pe_status (*mask)(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                      const int32_t *row_mask, const uint32_t *bits, size_t words);

    /* ---- communicators (ncclCommInitAll-like) ----
     * One call makes n ranks, rank r on devs[r]; out[r] is rank r's handle. Any thread. */
    pe_status (*comm_create)(be_device *const *devs, int n, be_comm **out, pe_err *err);
    /* The same over the processes of an MPI job (ncclCommInitRank after an MPI_Bcast of
     * the id): rank r of n lives on process r / (n / procs->nprocs) (process-major);
     * devs[r] is its device where this process holds it, NULL elsewhere, and out[r] its
     * handle (NULL elsewhere). Every process calls it, and every later comm_split and
     * comm_destroy of what it made, in the same order. NULL where the backend or the
     * build cannot span processes. */
    pe_status (*comm_create_procs)(be_device *const *devs, int n, const be_procs *procs,
                                   be_comm **out, pe_err *err);
    /* Aborts the communicator that comm belongs to: every rank blocked in it wakes with
     * PE_ECOMM, and every later call on any of its ranks returns PE_ECOMM. Any thread. */
    void (*comm_abort)(be_comm *comm);
    /* comm_abort of every communicator one of comms[0..n) belongs to, as one step: on
     * CUDA a kernel of one communicator can wait in a stream in front of another's, so
     * every NCCL communicator must be told before any abort waits (NULL entries skipped). */
    void (*comm_abort_all)(be_comm *const *comms, int n);
    /* Splits a communicator by color, as ncclCommSplit: parents[r] is rank r of one
     * communicator of n ranks; the ranks of one color (>= 0) form a new communicator,
     * ranked in parent-rank order, and out[r] is rank r's handle in it. One call for every
     * rank, from any thread (like comm_create). Aborting or destroying the parent leaves
     * the new communicators as they are. Over processes, parents[r] is NULL where another
     * process holds rank r (colors hold every rank's), and so is out[r]. */
    pe_status (*comm_split)(be_comm *const *parents, int n, const int *colors, be_comm **out,
                            pe_err *err);
    /* Frees every communicator that one of comms[0..n) belongs to, each once, and sets
     * every entry to NULL (NULL entries are skipped); no rank of them may be in a call. */
    void (*comm_destroy)(be_comm **comms, int n);

    /* ---- collectives; counts in elements; called by every rank in the same order ---- */
    /* recv(count) = sum over ranks of send(count), same bits on every rank; send == recv ok */
    pe_status (*allreduce_sum)(be_comm *c, const float *send, float *recv, size_t count);
    /* recv(n * count) = rank 0's send(count), rank 1's, ... */
    pe_status (*allgather)(be_comm *c, const float *send, float *recv, size_t count);
    /* recv(count) = slice r of the sum over ranks of send(n * count) */
    pe_status (*reduce_scatter)(be_comm *c, const float *send, float *recv, size_t count);
    /* buf(count) on every rank = buf on root */
    pe_status (*broadcast)(be_comm *c, float *buf, size_t count, int root);
    /* Point to point, matched in order per (sender, receiver) pair. send may return before
     * the peer received: buf must stay unchanged until synchronize(dev of the sender).
     * recv returns once buf holds the data (for the device's later calls). */
    pe_status (*send)(be_comm *c, const float *buf, size_t count, int peer);
    pe_status (*recv)(be_comm *c, float *buf, size_t count, int peer);
    pe_status (*barrier)(be_comm *c);
    int (*comm_rank)(const be_comm *c);
    int (*comm_size)(const be_comm *c);
} be_ops;

/* The host backend (always built). */
const be_ops *be_host_ops(void);
/* The CUDA backend, or NULL when pengine was built without it. */
const be_ops *be_cuda_ops(void);

/* Picks the backend for kind. AUTO: CUDA when built and at least one device answers,
 * else host, and notice (if not NULL) gets a one-line explanation of the fallback.
 * CUDA without a device is PE_ENODEV with a message saying so. */
pe_status be_select(pe_backend_kind kind, const be_ops **out, char *notice, size_t notice_len,
                    pe_err *err);

/* linear as separate ops of `ops` (gemm or gemm_bf16, bias_add, relu or gelu, to_bf16):
 * the host backend's linear, and the CUDA backend's where cuBLASLt has no algorithm.
 * tmp (M, N) floats on dev takes the fp32 result when y_bf16 (unused otherwise). */
pe_status be_linear_unfused(const be_ops *ops, be_device *dev, pe_dtype dtype, size_t M,
                            size_t N, size_t K, const void *x, const void *W, const float *b,
                            be_act act, void *y, int y_bf16, float *tmp);

/* The shape of a split (comm_split): parent rank r joins group group[r], numbered by the
 * first appearance of its color, as rank sub[r] of it (parent-rank order). Returns the
 * number of groups, or -1 (message in err) when a color is negative. */
int be_split_plan(const int *colors, int n, int *group, int *sub, pe_err *err);

/* Checks a device list against the backend: every id must exist. On failure the message
 * names the bad id and lists the devices that exist (index, name, memory, bus id). */
pe_status be_check_devices(const be_ops *ops, const int *ids, int n, pe_err *err);

#endif
