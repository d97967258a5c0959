/* hb_internal.h: the host backend's private types and the functions behind its be_ops.
 *
 * A host device is a set of cores (the runtime decides which, and binds the worker);
 * its memory is aligned host memory, its GEMM is serial OpenBLAS, its kernels are the
 * element math of src/kernels/, and its collectives are shared-memory algorithms among
 * the threads of one process (hb_comm.h).
 */
#ifndef PE_BACKEND_HOST_HB_INTERNAL_H
#define PE_BACKEND_HOST_HB_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

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
} hb_pending;

pe_status hb_pending_create(hb_pending **out);
void hb_pending_retain(hb_pending *p);
void hb_pending_release(hb_pending *p);
void hb_pending_post(hb_pending *p);
/* One posted send is finished: consumed (failed = 0) or dropped (failed = 1). */
void hb_pending_done(hb_pending *p, int failed);

struct be_device {
    int id;
    pe_err err;        /* the last failure on this device */
    hb_pending *pend;  /* this device's sends in flight */
    float *widened;    /* (widened_cap) gemm_bf16's operands widened to fp32 */
    size_t widened_cap;
};

/* Records a failure on dev and returns s (printf-style message). */
pe_status hb_fail(be_device *dev, pe_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* gemm, bias, activation and rounding as separate loops (be_linear_unfused). */
pe_status hb_linear(be_device *dev, pe_dtype dtype, size_t M, size_t N, size_t K,
                    const void *x, const void *W, const float *b, be_act act, void *y,
                    int y_bf16, float *tmp);

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
                       const int32_t *ids, size_t n, size_t dim, size_t vocab);

/* ---- communicators (hb_comm.c, hb_coll.c, hb_p2p.c) ---- */
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
