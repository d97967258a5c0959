/* cuda_fake_runtime.c: a fake CUDA runtime (with the cuBLAS handle calls and the peer-path
 * launchers) for the tests that run the CUDA backend's host logic without a GPU:
 * test_cuda_peer_logic (with cuda_fake_no_nccl.c) and test_cuda_engine_logic (with
 * cuda_fake_libs.c and cuda_fake_nccl.c).
 *
 * Four devices of 80 GiB; device memory is host memory; every stream runs its work at once
 * on the calling thread, which is one legal CUDA schedule (so the results depend only on
 * the order the host logic itself guarantees). Events must be recorded on a stream of
 * their own device, as CUDA requires, and are counted so a test can see that none leaks.
 * The launchers add in the same rank order as the grids of cb_peer_kernels.cu.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cb_comm.h"
#include "backend/cuda/cb_launch.h"

#define FAKE_DEVICES 4

static _Thread_local int current;
static atomic_int events_live;

struct CUstream_st {
    int dev;
};
struct CUevent_st {
    int dev;
};

int cuda_fake_events_live(void) { return atomic_load(&events_live); }

/* ---- runtime ---- */

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = FAKE_DEVICES;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "fake error" : "no error"; }
const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorFake" : "cudaSuccess"; }

cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    strcpy(p->name, "Fake GPU");
    p->totalGlobalMem = (size_t)80 << 30;
    p->pciBusID = 0x19 + d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    return cudaGetDeviceProperties_v2(p, d);
}

/* 132 multiprocessors, as an H100 SXM, or $PE_CUDA_FAKE_SMS: attention sizes its split
 * over the keys by them, and a test sets 1 to run long rows as many tiles of one block. */
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return cudaErrorInvalidDevice;
    const char *sms = getenv("PE_CUDA_FAKE_SMS");
    *v = a == cudaDevAttrMultiProcessorCount ? (sms ? atoi(sms) : 132) : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    if (d < 0 || d >= FAKE_DEVICES || len < 13)
        return cudaErrorInvalidDevice;
    strcpy(bus, d ? "0000:1A:00.0" : "0000:19:00.0");
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return cudaErrorInvalidDevice;
    current = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = current;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = malloc(sizeof **s);
    if (!*s)
        return cudaErrorMemoryAllocation;
    (*s)->dev = current;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = n > ((size_t)1 << 40) ? NULL : aligned_alloc(256, (n + 255) / 256 * 256);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    *p = malloc(n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    *free_b = (size_t)1 << 30;
    *total = (size_t)80 << 30;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)kind;
    (void)s;
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s)
{
    (void)kind;
    (void)s;
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)kind;
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                cudaStream_t s)
{
    if (dst_dev < 0 || dst_dev >= FAKE_DEVICES || src_dev < 0 || src_dev >= FAKE_DEVICES)
        return cudaErrorInvalidDevice;
    (void)s;
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    (void)p;
    memset(a, 0, sizeof *a);
    a->type = cudaMemoryTypeUnregistered;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = malloc(sizeof **e);
    if (!*e)
        return cudaErrorMemoryAllocation;
    (*e)->dev = current;
    atomic_fetch_add(&events_live, 1);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    atomic_fetch_sub(&events_live, 1);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    return e->dev == s->dev ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)e;
    (void)flags;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b)
{
    *can = a != b;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
    (void)flags;
    return peer == current ? cudaErrorInvalidDevice : cudaSuccess;
}

/* ---- cuBLAS: only the handle ---- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = (cublasHandle_t)malloc(16);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    (void)h;
    (void)s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    (void)h;
    (void)m;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) { return s ? "fake failure" : "success"; }
const char *cublasGetStatusName(cublasStatus_t s) { return s ? "CUBLAS_FAKE" : "CUBLAS_OK"; }

/* ---- the peer-path launchers, in the grids' order ---- */

cudaError_t cb_launch_reduce(cudaStream_t s, float *out, const float *const *in, int nin,
                             size_t count)
{
    (void)s;
    if (nin > CB_PEER_MAX_RANKS)
        return cudaErrorInvalidValue;
    for (size_t i = 0; i < count; i++) {
        float v = in[0][i];
        for (int r = 1; r < nin; r++)
            v = v + in[r][i];
        out[i] = v;
    }
    return cudaSuccess;
}

cudaError_t cb_launch_gather(cudaStream_t s, float *out, const float *const *src,
                             const size_t *dst_off, const size_t *len, int npieces)
{
    (void)s;
    for (int k = 0; k < npieces; k++)
        memmove(out + dst_off[k], src[k], len[k] * sizeof(float));
    return cudaSuccess;
}
