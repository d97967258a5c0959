/* cb_internal.h: the CUDA backend's private types and helpers, shared by its .c files.
 *
 * A be_device is one GPU as owned by one worker thread: cudaSetDevice ran once on that
 * thread in open(); every call of the device is issued on its one stream, and its cuBLAS
 * handle is bound to that stream. Error helpers turn CUDA, cuBLAS and NCCL codes into a
 * pe_status and a message naming the call, the device and the error string.
 */
#ifndef PE_CB_INTERNAL_H
#define PE_CB_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cb_launch.h"

struct cb_chan; /* a peer-path send/recv channel (cb_peer.c) */
struct cb_lt;   /* cuBLASLt handle, workspace and cached plans of linear (cb_linear.c) */

struct be_device {
    int id;               /* CUDA device ordinal */
    cudaStream_t stream;  /* every call of this device runs on it */
    cublasHandle_t blas;  /* bound to stream */
    int32_t *bad_id;      /* device int: first out-of-range embedding row, or -1 */
    int32_t *bad_id_host; /* pinned host copy of *bad_id */
    pe_err err;           /* the last failure on this device */
    int counted;          /* counted in the registry's opened devices per GPU */
    struct cb_lt *lt;     /* linear's cuBLASLt state: made by open, freed by close */
    float *attn_ws;       /* attention's split workspace (CB_ATTN_WS_FLOATS), made by open */
    size_t attn_ws_floats;
    int sms;              /* multiprocessors: attention sizes its split by them */
    /* Peer-path channels this device sends on: synchronize() waits until the receivers
     * took every send. Edited under the registry lock of cb_device.c (comm_create and
     * comm_destroy run on any thread; a device may be closed before its groups are
     * destroyed, which detaches it from their channels). */
    struct cb_chan **out_chans; /* (n_out_chans) */
    int n_out_chans, cap_out_chans;
};

/* Floats of attention's workspace: the partial outputs of a decode step split over the keys
 * (rows x heads x splits x (head_dim + 2)); a larger step splits less. 16 MiB. */
#define CB_ATTN_WS_FLOATS ((size_t)4 << 20)

/* ---- errors: each fills dev->err (or err) and returns the status ---- */
pe_status cb_cuda_fail(pe_err *err, cudaError_t e, const char *call, int dev);
pe_status cb_blas_fail(pe_err *err, cublasStatus_t s, const char *call, int dev);
/* Status for a CUDA error: PE_ENOMEM for allocation failures, PE_EDEVICE otherwise. */
pe_status cb_cuda_status(cudaError_t e);
/* Launch check: the error of the last launch on this thread, as cb_cuda_fail. */
pe_status cb_check_launch(be_device *dev, cudaError_t e, const char *kernel);

/* How many opened devices (workers) this process has on CUDA device id (cb_device.c). */
int cb_device_open_count(int id);

/* Registers a peer-path channel that dev sends on, and unregisters it (from whichever
 * device it is still registered with). cb_device.c; the channel's `sender` field is
 * set and cleared under the same lock. */
pe_status cb_device_add_out_chan(be_device *dev, struct cb_chan *ch, pe_err *err);
void cb_device_remove_out_chan(struct cb_chan *ch);
/* Where cb_device.c keeps a channel's registration (cb_peer.c defines the channel). */
be_device **cb_chan_sender(struct cb_chan *ch);

/* Waits until every send issued on the channel was taken and copied by its receiver
 * (cb_peer.c); PE_ECOMM when the communicator was aborted first. */
pe_status cb_peer_wait_chan(be_device *dev, struct cb_chan *ch);

/* ---- the op groups, for the table in cb_ops.c ---- */
pe_status cb_device_count(int *n, pe_err *err);
pe_status cb_device_describe(int id, be_device_desc *out, pe_err *err);
pe_status cb_open(int id, be_device **out, pe_err *err);
void cb_close(be_device *dev);
const char *cb_last_error(const be_device *dev);
pe_status cb_alloc(be_device *dev, size_t bytes, void **out);
void cb_free(be_device *dev, void *p);
pe_status cb_copy_h2d(be_device *dev, void *dst, const void *src, size_t bytes);
pe_status cb_copy_d2h(be_device *dev, void *dst, const void *src, size_t bytes);
pe_status cb_copy_d2d(be_device *dev, void *dst, const void *src, size_t bytes);
pe_status cb_copy_d2d_2d(be_device *dev, void *dst, size_t dst_pitch, const void *src,
                         size_t src_pitch, size_t width, size_t height);
pe_status cb_synchronize(be_device *dev);

pe_status cb_gemm(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, const float *A, size_t lda, const float *B, size_t ldb,
                  float beta, float *C, size_t ldc);
pe_status cb_gemm_strided_batched(be_device *dev, int trans_a, int trans_b, size_t M,
                                  size_t N, size_t K, float alpha, const float *A, size_t lda,
                                  size_t stride_a, const float *B, size_t ldb, size_t stride_b,
                                  float beta, float *C, size_t ldc, size_t stride_c,
                                  size_t batch);

pe_status cb_gemm_bf16(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, const uint16_t *A, size_t lda, const uint16_t *B,
                       size_t ldb, float beta, float *C, size_t ldc);
pe_status cb_to_bf16(be_device *dev, uint16_t *out, const float *in, size_t n);
pe_status cb_linear(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                    const void *x, const void *W, const float *b, be_act act, void *y,
                    int y_bf16, float *tmp);
/* linear's cuBLASLt handle and 32 MiB workspace, made by cb_open. */
pe_status cb_linear_prepare(be_device *dev, pe_err *err);
/* Frees what linear made on dev (cb_close calls it). */
void cb_linear_release(be_device *dev);
/* The linear plans dev made, by how their layers run. */
typedef struct cb_linear_counts {
    long fused;   /* one cuBLASLt matmul, its epilogue writes the output (GELU: + our kernel) */
    long rounded; /* the same, but the epilogue writes fp32 and to_bf16 rounds it: cuBLASLt
                   * refused a bf16 output with the fp32 bias */
    long unfused; /* separate ops: cuBLASLt had no algorithm */
} cb_linear_counts;
void cb_linear_plans(const be_device *dev, cb_linear_counts *out);

pe_status cb_bias_add(be_device *dev, float *x, const float *bias, size_t rows, size_t cols);
pe_status cb_relu(be_device *dev, float *x, size_t n);
pe_status cb_gelu(be_device *dev, float *x, size_t n);
pe_status cb_layernorm(be_device *dev, float *out, const float *x, const float *gamma,
                       const float *beta, size_t rows, size_t cols, float eps);
pe_status cb_softmax(be_device *dev, float *x, size_t rows, size_t cols);
pe_status cb_residual_add(be_device *dev, float *x, const float *r, size_t n);
pe_status cb_embedding(be_device *dev, pe_dtype dtype, float *out, const void *table,
                       const int32_t *ids, size_t n, size_t dim, size_t vocab, size_t row0,
                       size_t nrows);

pe_status cb_rmsnorm(be_device *dev, float *out, const float *x, const float *w, size_t rows,
                     size_t cols, float eps);
pe_status cb_rope(be_device *dev, float *x, size_t rows, size_t stride, size_t nheads,
                  size_t head_dim, const int32_t *pos, const float *inv_freq);
pe_status cb_silu_mul(be_device *dev, float *out, const float *gate_up, size_t rows, size_t n);
pe_status cb_kv_append(be_device *dev, const be_kv *kv, int layer, const float *k,
                       const float *v, size_t stride, const int32_t *slots, size_t rows);
pe_status cb_attention(be_device *dev, const be_kv *kv, int layer, const be_attn *a);
pe_status cb_argmax(be_device *dev, const float *x, size_t rows, size_t n, int32_t *idx);
pe_status cb_topk(be_device *dev, const float *x, size_t rows, size_t n, size_t k,
                  int32_t *idx, float *val, float *lse);
pe_status cb_sample(be_device *dev, const float *x, size_t rows, size_t n,
                    const pe_k_sampling *params, int32_t *tokens, float *logit);
pe_status cb_penalize(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                      const pe_k_penalty *p, size_t count);
pe_status cb_mask(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                  const int32_t *row_mask, const uint32_t *bits, size_t words);

pe_status cb_comm_create(be_device *const *devs, int n, be_comm **out, pe_err *err);
#if defined(PE_HAVE_MPI)
/* NCCL across MPI processes (mpi/cb_procs.c); the table has none without MPI. */
pe_status cb_comm_create_procs(be_device *const *devs, int n, const be_procs *procs,
                               be_comm **out, pe_err *err);
#endif
void cb_comm_abort(be_comm *comm);
void cb_comm_abort_all(be_comm *const *comms, int n);
void cb_comm_destroy(be_comm **comms, int n);
pe_status cb_comm_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                        pe_err *err);
pe_status cb_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_allgather(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count);
pe_status cb_broadcast(be_comm *c, float *buf, size_t count, int root);
pe_status cb_send(be_comm *c, const float *buf, size_t count, int peer);
pe_status cb_recv(be_comm *c, float *buf, size_t count, int peer);
pe_status cb_barrier(be_comm *c);
int cb_comm_rank(const be_comm *c);
int cb_comm_size(const be_comm *c);

#endif
