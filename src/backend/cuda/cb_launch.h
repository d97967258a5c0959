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
/* table fp32 (bf16 = 0) or bf16 (bf16 = 1). bad: a device int32 set to INT32_MAX before; afterwards the smallest row whose id is
 * outside [0, vocab), or still INT32_MAX (such rows of out are zeroed). */
cudaError_t cb_launch_embedding(cudaStream_t s, float *out, const void *table, int bf16,
                                const int32_t *ids, size_t n, size_t dim, size_t vocab,
                                int32_t *bad);

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
