/* hb_internal.h: the host backend's private types and the functions behind its be_ops.
 *
 * A host device is a set of cores (the runtime decides which, and binds the worker); it
 * computes with a pool of threads over them (hb_parallel.c: the worker and one helper per
 * further core). Its memory is aligned host memory; Linear is a vectorized GEMV for
 * decode-shaped calls and single-threaded OpenBLAS calls on slices of the output beyond
 * (hb_linear.c); its kernels are the element math of src/kernels/ with vectorized inner
 * loops where they matter (hb_simd.h); its collectives are shared-memory algorithms among
 * the threads of one process (hb_comm.h).
 */
#ifndef PE_BACKEND_HOST_HB_INTERNAL_H
#define PE_BACKEND_HOST_HB_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "runtime/pool.h"
#include "runtime/topology.h"

#define HB_DEVICE_COUNT 64 /* host device ids 0..63 */
#define HB_ALIGN 64        /* bytes: alignment of every allocation (a cache line) */

/* Sends posted by the ranks of one device that no receiver has consumed yet.
 * Shared (reference counted) by the device and every communicator rank on it, so that a
 * communicator may outlive the device or the other way round. */
typedef struct hb_pending {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* signalled when outstanding drops to 0 */
    size_t outstanding;  /* posted, not yet consumed (under mu) */
    size_t failed;       /* dropped by an abort or a mismatched recv since the last sync */
    int refs;            /* under mu */
    void *net;           /* sends to other processes in flight (hb_net.h), under mu */
} hb_pending;

pe_status hb_pending_create(hb_pending **out);
void hb_pending_retain(hb_pending *p);
void hb_pending_release(hb_pending *p);
void hb_pending_post(hb_pending *p);
/* One posted send is finished: consumed (failed = 0) or dropped (failed = 1). */
void hb_pending_done(hb_pending *p, int failed);

/* Per-thread scratch of a device's compute threads: one buffer per thread, grown by the
 * owning thread before a parallel region, never inside one. */
typedef struct hb_scratch {
    void *p;
    size_t bytes;
} hb_scratch;

#define HB_MAX_THREADS 256 /* compute threads of one host device */

struct be_device {
    int id;
    pe_err err;        /* the last failure on this device */
    hb_pending *pend;  /* this device's sends in flight */
    float *widened;    /* (widened_cap) gemm_bf16's operands widened to fp32 */
    size_t widened_cap;
    /* compute threads (hb_parallel.c) */
    rt_topology *topo;  /* the machine, NULL when hwloc cannot read it */
    rt_binding *cores;  /* (ncores) the cores of the opening thread, one PU set each */
    int ncores;
    int bound;          /* 1: the opening thread was bound to those cores; pin the pool */
    rt_binding home;    /* the opening thread's PUs, restored when its pin is undone */
    int owner_pinned;   /* the owner is bound to cores[0] while the pool runs */
    rt_pool *pool;      /* nthreads threads, the owning worker included */
    int nthreads;
    hb_scratch *tls;    /* (nthreads) per-thread scratch */
    hb_scratch call;    /* scratch of the owning thread for one call (unit tables, ...) */
};

/* Records a failure on dev and returns s (printf-style message). */
pe_status hb_fail(be_device *dev, pe_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A NULL pointer is allowed only for an empty operand. */
#define HB_NEED(dev, p, n, op)                                                          \
    do {                                                                                \
        if ((n) != 0 && !(p))                                                           \
            return hb_fail((dev), PE_EINVAL, "%s on host device %d: " #p " is NULL",    \
                           (op), (dev)->id);                                            \
    } while (0)

/* ---- parallel regions (hb_parallel.c) ---- */
/* fn runs items [begin, end) on compute thread `thread` (0 = the device's worker). */
typedef void (*hb_range_fn)(void *arg, size_t begin, size_t end, int thread);
/* Runs fn over [0, n) on the device's compute threads, in pieces of at least grain items
 * (n <= grain: one call on the calling thread); returns when every piece is done. */
void hb_for(be_device *dev, size_t n, size_t grain, hb_range_fn fn, void *arg);
/* Makes every compute thread's scratch at least bytes (64-byte aligned). */
pe_status hb_scratch_reserve(be_device *dev, size_t bytes, const char *op);
static inline void *hb_tls(be_device *dev, int thread) { return dev->tls[thread].p; }
/* The owning thread's scratch of at least bytes for one call, or NULL (the failure is
 * recorded, PE_ENOMEM). */
void *hb_call_scratch(be_device *dev, size_t bytes, const char *op);
/* Rows per piece of a row-wise op with cols elements a row: enough work to pay for a
 * region (hb_norm.c). */
size_t hb_row_grain(size_t cols);
/* Starts the pool over the calling (opening) thread's cores; close stops it. */
pe_status hb_threads_open(be_device *dev);
void hb_threads_close(be_device *dev);
pe_status hb_set_compute_threads(be_device *dev, int n);
int hb_compute_threads(const be_device *dev);

/* ---- GEMM (hb_gemm.c) ---- */
/* Makes OpenBLAS compute on the calling thread (once per process). */
void hb_gemm_init(void);
pe_status hb_gemm(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, const float *A, size_t lda, const float *B, size_t ldb,
                  float beta, float *C, size_t ldc);
pe_status hb_gemm_strided_batched(be_device *dev, int trans_a, int trans_b, size_t M,
                                  size_t N, size_t K, float alpha, const float *A, size_t lda,
                                  size_t stride_a, const float *B, size_t ldb, size_t stride_b,
                                  float beta, float *C, size_t ldc, size_t stride_c,
                                  size_t batch);
/* bf16 A and B: widened to fp32 (exact) in dev->widened, then hb_gemm's sgemm. */
pe_status hb_gemm_bf16(be_device *dev, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, const uint16_t *A, size_t lda, const uint16_t *B,
                       size_t ldb, float beta, float *C, size_t ldc);

/* Largest dimension a cblas call takes (blasint is int or int64 depending on the build). */
#define HB_BLAS_MAX ((size_t)(sizeof(blasint) >= 8 ? (size_t)LLONG_MAX : (size_t)INT_MAX))

/* ---- Linear (hb_linear.c) ---- */
/* Up to hb_simd's gemv_max_m rows of x (every M with AVX-512), linear runs the GEMV kernel;
 * beyond, the sgemm slices; bf16 W on AMX (hb_amx_enabled()), the tile kernel at every M. */
pe_status hb_linear(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                    const void *x, const void *W, const float *b, be_act act, void *y,
                    int y_bf16, float *tmp);
/* linear on a chosen path (the benchmark and the tests compare them): AUTO as linear; GEMV:
 * the GEMV kernel at any M; SGEMM: the per-thread OpenBLAS slices at any M; AMX: the tile
 * kernel at any M. */
typedef enum hb_linear_path {
    HB_LINEAR_AUTO = 0,
    HB_LINEAR_GEMV,
    HB_LINEAR_SGEMM,
    HB_LINEAR_AMX /* bf16 W only, where hb_amx_available() */
} hb_linear_path;
pe_status hb_linear_with(be_device *dev, hb_linear_path path, pe_dtype dtype, size_t M,
                         size_t N, size_t K, const void *x, const void *W, const float *b,
                         be_act act, void *y, int y_bf16, float *tmp);

/* ---- kernels (hb_kernels.c) ---- */
pe_status hb_bias_add(be_device *dev, float *x, const float *bias, size_t rows, size_t cols);
pe_status hb_relu(be_device *dev, float *x, size_t n);
pe_status hb_gelu(be_device *dev, float *x, size_t n);
pe_status hb_layernorm(be_device *dev, float *out, const float *x, const float *gamma,
                       const float *beta, size_t rows, size_t cols, float eps);
pe_status hb_softmax(be_device *dev, float *x, size_t rows, size_t cols);
pe_status hb_residual_add(be_device *dev, float *x, const float *r, size_t n);
pe_status hb_to_bf16(be_device *dev, uint16_t *out, const float *in, size_t n);
pe_status hb_embedding(be_device *dev, pe_dtype dtype, float *out, const void *table,
                       const int32_t *ids, size_t n, size_t dim, size_t vocab, size_t row0,
                       size_t nrows);

/* ---- decoder operations (hb_norm.c, hb_rope.c, hb_kv.c, hb_attention.c, hb_sample.c) */
pe_status hb_rmsnorm(be_device *dev, float *out, const float *x, const float *w, size_t rows,
                     size_t cols, float eps);
pe_status hb_rope(be_device *dev, float *x, size_t rows, size_t stride, size_t nheads,
                  size_t head_dim, const int32_t *pos, const float *inv_freq);
pe_status hb_silu_mul(be_device *dev, float *out, const float *gate_up, size_t rows, size_t n);
pe_status hb_kv_append(be_device *dev, const be_kv *kv, int layer, const float *k,
                       const float *v, size_t stride, const int32_t *slots, size_t rows);
/* Checks a KV pool and a layer for op; PE_OK or PE_EINVAL with a message. */
pe_status hb_kv_check(be_device *dev, const be_kv *kv, int layer, const char *op);
pe_status hb_attention(be_device *dev, const be_kv *kv, int layer, const be_attn *a);
pe_status hb_argmax(be_device *dev, const float *x, size_t rows, size_t n, int32_t *idx);
pe_status hb_topk(be_device *dev, const float *x, size_t rows, size_t n, size_t k,
                  int32_t *idx, float *val, float *lse);
pe_status hb_sample(be_device *dev, const float *x, size_t rows, size_t n,
                    const pe_k_sampling *params, int32_t *tokens, float *logit);
pe_status hb_penalize(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                      const pe_k_penalty *p, size_t count);
pe_status hb_mask(be_device *dev, float *x, size_t rows, size_t n, int32_t id0,
                  const int32_t *row_mask, const uint32_t *bits, size_t words);

/* ---- communicators (hb_comm.c, hb_coll.c, hb_p2p.c; over processes: hb_net.h) ---- */
pe_status hb_comm_create(be_device *const *devs, int n, be_comm **out, pe_err *err);
void hb_comm_abort(be_comm *comm);
void hb_comm_abort_all(be_comm *const *comms, int n);
void hb_comm_destroy(be_comm **comms, int n);
pe_status hb_comm_split(be_comm *const *parents, int n, const int *colors, be_comm **out,
                        pe_err *err);
int hb_comm_rank(const be_comm *c);
int hb_comm_size(const be_comm *c);
pe_status hb_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count);
pe_status hb_allgather(be_comm *c, const float *send, float *recv, size_t count);
pe_status hb_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count);
pe_status hb_broadcast(be_comm *c, float *buf, size_t count, int root);
pe_status hb_barrier(be_comm *c);
pe_status hb_send(be_comm *c, const float *buf, size_t count, int peer);
pe_status hb_recv(be_comm *c, float *buf, size_t count, int peer);

#endif
