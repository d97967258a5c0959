/* cb_error.c: CUDA and cuBLAS error codes -> pe_status and a message naming the call, the
 * device, the error string and, where one is known, what to do. (NCCL: cb_nccl.c.) */
#include "backend/cuda/cb_internal.h"

pe_status cb_cuda_status(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? PE_ENOMEM : PE_EDEVICE;
}

static const char *cuda_hint(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "; free device memory (smaller batches, fewer ranks per GPU)";
    case cudaErrorInsufficientDriver:
        return "; install an NVIDIA driver that supports this CUDA runtime";
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
        return "; check the device list against nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=native (or this GPU's sm_XX)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "; the device context is lost: this is a bug in pengine, run it under "
               "compute-sanitizer and report it";
    default:
        return "";
    }
}

pe_status cb_cuda_fail(pe_err *err, cudaError_t e, const char *call, int dev)
{
    /* The error is reported here: clear it, or the next cudaGetLastError (a kernel launch's
     * check) would answer with it again. Sticky errors stay, as they must. */
    (void)cudaGetLastError();
    return pe_fail(err, cb_cuda_status(e), "%s on CUDA device %d failed: %s (%s)%s", call, dev,
                   cudaGetErrorString(e), cudaGetErrorName(e), cuda_hint(e));
}

pe_status cb_blas_fail(pe_err *err, cublasStatus_t s, const char *call, int dev)
{
    const char *hint = "";
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        hint = "; free device memory";
    else if (s == CUBLAS_STATUS_INVALID_VALUE)
        hint = "; a size or leading dimension is out of range (this is a bug in the caller)";
    return pe_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? PE_ENOMEM : PE_EDEVICE,
                   "%s on CUDA device %d failed: %s (%s)%s", call, dev,
                   cublasGetStatusString(s), cublasGetStatusName(s), hint);
}

pe_status cb_check_launch(be_device *dev, cudaError_t e, const char *kernel)
{
    if (e == cudaSuccess)
        return PE_OK;
    return cb_cuda_fail(&dev->err, e, kernel, dev->id);
}
