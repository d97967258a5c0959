/* cb_device.c: CUDA devices: discovery (with hwloc locality), open/close on the worker
 * thread, memory, copies and synchronize.
 *
 * Copies: d2d is asynchronous on the device's stream. h2d and d2h are synchronous with
 * respect to the host buffer: when copy_h2d returns, src may be reused; when copy_d2h
 * returns, dst holds the data. (h2d from pageable memory is staged by the driver before
 * cudaMemcpyAsync returns; from pinned memory we wait for the stream.)
 */
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>
#include <hwloc/cudart.h>

#include "backend/cuda/cb_internal.h"

/* Guards every device's out_chans list, every channel's sender (see cb_internal.h) and
 * the count of opened devices per GPU. */
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
#define CB_MAX_IDS 1024
static int open_count[CB_MAX_IDS];

int cb_device_open_count(int id)
{
    if (id < 0 || id >= CB_MAX_IDS)
        return 0;
    pthread_mutex_lock(&registry);
    int n = open_count[id];
    pthread_mutex_unlock(&registry);
    return n;
}

pe_status cb_device_count(int *n, pe_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* No driver, a stub driver or no GPU: zero devices, and the reason for whoever
         * asks (be_select puts it into its message or notice). */
        (void)cudaGetLastError();
        *n = 0;
        pe_fail(err, PE_OK, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e),
                cudaGetErrorName(e));
        return PE_OK;
    }
    *n = count;
    if (count == 0)
        pe_fail(err, PE_OK, "cudaGetDeviceCount: no CUDA device");
    return PE_OK;
}

/* cpulist and numa_node of GPU id from hwloc; left "" and -1 when hwloc cannot tell. */
static void describe_locality(int id, be_device_desc *out)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    /* only the cores this process may use (a container's cpuset, taskset) */
    if (set && hwloc_cudart_get_device_cpuset(topo, id, set) == 0)
        hwloc_bitmap_and(set, set, hwloc_topology_get_allowed_cpuset(topo));
    if (set && !hwloc_bitmap_iszero(set)) {
        hwloc_bitmap_list_snprintf(out->cpulist, sizeof out->cpulist, set);
        /* The NUMA node whose cores hold the GPU's cores; with no locality information
         * the cpuset is the whole machine, and a single-node machine still answers. */
        int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        hwloc_obj_t node = NULL;
        while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != NULL) {
            if (node->cpuset && hwloc_bitmap_isincluded(set, node->cpuset)) {
                out->numa_node = (int)node->os_index;
                break;
            }
        }
        if (out->numa_node < 0 && nodes == 1)
            out->numa_node = (int)hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, 0)->os_index;
    }
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
}

pe_status cb_device_describe(int id, be_device_desc *out, pe_err *err)
{
    memset(out, 0, sizeof *out);
    out->id = id;
    out->numa_node = -1;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, id);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pe_status s = cb_cuda_fail(err, e, "cudaGetDeviceProperties", id);
        return e == cudaErrorInvalidDevice ? PE_ENODEV : s;
    }
    size_t len = strnlen(prop.name, sizeof prop.name);
    if (len >= sizeof out->name)
        len = sizeof out->name - 1;
    memcpy(out->name, prop.name, len);
    out->name[len] = '\0';
    out->memory_bytes = prop.totalGlobalMem;
    e = cudaDeviceGetPCIBusId(out->bus_id, (int)sizeof out->bus_id, id);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        out->bus_id[0] = '\0';
    }
    describe_locality(id, out);
    return PE_OK;
}

pe_status cb_open(int id, be_device **out, pe_err *err)
{
    *out = NULL;
    int count = 0;
    pe_err why = {{0}};
    cb_device_count(&count, &why);
    if (id < 0 || id >= count)
        return pe_fail(err, PE_ENODEV, "CUDA device %d does not exist (%d device%s%s%s)", id,
                       count, count == 1 ? "" : "s", why.msg[0] ? "; " : "", why.msg);
    be_device *d = calloc(1, sizeof *d);
    if (!d)
        return pe_fail(err, PE_ENOMEM, "out of host memory opening CUDA device %d", id);
    d->id = id;
    pe_status s = PE_OK;
    cudaError_t e;
    cublasStatus_t b;
    /* The one cudaSetDevice of this worker thread: every later call of the device runs on
     * this thread, so the runtime's current device stays right. */
    if ((e = cudaSetDevice(id)) != cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaSetDevice", id);
    else if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaStreamCreateWithFlags", id);
    else if ((b = cublasCreate(&d->blas)) != CUBLAS_STATUS_SUCCESS)
        s = cb_blas_fail(err, b, "cublasCreate", id);
    else if ((b = cublasSetStream(d->blas, d->stream)) != CUBLAS_STATUS_SUCCESS)
        s = cb_blas_fail(err, b, "cublasSetStream", id);
    /* Plain fp32 (no TF32 tensor-op math): the fp32 GEMM matches the host to 1e-4. */
    else if ((b = cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        s = cb_blas_fail(err, b, "cublasSetMathMode", id);
    else if ((e = cudaMalloc((void **)&d->bad_id, sizeof *d->bad_id)) != cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaMalloc (embedding check word)", id);
    else if ((e = cudaHostAlloc((void **)&d->bad_id_host, sizeof *d->bad_id_host,
                                cudaHostAllocDefault)) != cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaHostAlloc (embedding check word)", id);
    else if ((e = cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, id)) !=
             cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaDeviceGetAttribute (multiprocessors)", id);
    /* attention's split workspace: made here, as nothing is allocated during a forward */
    else if ((e = cudaMalloc((void **)&d->attn_ws, CB_ATTN_WS_FLOATS * sizeof(float))) !=
             cudaSuccess)
        s = cb_cuda_fail(err, e, "cudaMalloc (attention workspace)", id);
    else {
        d->attn_ws_floats = CB_ATTN_WS_FLOATS;
        s = cb_linear_prepare(d, err);
    }
    if (s != PE_OK) {
        (void)cudaGetLastError();
        cb_close(d);
        return s;
    }
    pthread_mutex_lock(&registry);
    if (id < CB_MAX_IDS)
        open_count[id]++;
    d->counted = id < CB_MAX_IDS;
    pthread_mutex_unlock(&registry);
    *out = d;
    return PE_OK;
}

void cb_close(be_device *dev)
{
    if (!dev)
        return;
    if (dev->stream)
        (void)cudaStreamSynchronize(dev->stream);
    cb_linear_release(dev);
    if (dev->blas)
        (void)cublasDestroy(dev->blas);
    if (dev->bad_id)
        (void)cudaFree(dev->bad_id);
    if (dev->bad_id_host)
        (void)cudaFreeHost(dev->bad_id_host);
    if (dev->attn_ws)
        (void)cudaFree(dev->attn_ws);
    if (dev->stream)
        (void)cudaStreamDestroy(dev->stream);
    (void)cudaGetLastError();
    pthread_mutex_lock(&registry); /* its groups may outlive it: detach */
    if (dev->counted)
        open_count[dev->id]--;
    for (int i = 0; i < dev->n_out_chans; i++)
        *cb_chan_sender(dev->out_chans[i]) = NULL;
    pthread_mutex_unlock(&registry);
    free(dev->out_chans);
    free(dev);
}

const char *cb_last_error(const be_device *dev) { return dev ? dev->err.msg : ""; }

pe_status cb_alloc(be_device *dev, size_t bytes, void **out)
{
    *out = NULL;
    /* cudaMalloc returns 256-byte aligned memory; a zero-byte request gets a real,
     * distinct pointer as with malloc(1). */
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        if (e == cudaErrorMemoryAllocation) {
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            (void)cudaGetLastError();
            return pe_fail(&dev->err, PE_ENOMEM,
                           "cudaMalloc(%zu bytes) on CUDA device %d failed: out of device "
                           "memory (%.2f of %.2f GiB free); use smaller batches, fewer ranks "
                           "per GPU or more GPUs",
                           bytes, dev->id, (double)free_b / (1 << 30),
                           (double)total_b / (1 << 30));
        }
        return cb_cuda_fail(&dev->err, e, "cudaMalloc", dev->id);
    }
    return PE_OK;
}

void cb_free(be_device *dev, void *p)
{
    if (!p)
        return;
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cb_cuda_fail(&dev->err, e, "cudaFree", dev->id);
    }
}

pe_status cb_copy_h2d(be_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return PE_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaMemcpyAsync (host to device)", dev->id);
    /* Pinned (or registered) host memory is read by the DMA engine later: wait, so that
     * the caller may reuse src at once in every case. */
    struct cudaPointerAttributes attr;
    e = cudaPointerGetAttributes(&attr, src);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        attr.type = cudaMemoryTypeHost; /* unknown: be safe */
    }
    if (attr.type == cudaMemoryTypeHost) {
        e = cudaStreamSynchronize(dev->stream);
        if (e != cudaSuccess)
            return cb_cuda_fail(&dev->err, e, "cudaStreamSynchronize (after a host to device "
                                "copy)", dev->id);
    }
    return PE_OK;
}

pe_status cb_copy_d2h(be_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return PE_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaMemcpyAsync (device to host)", dev->id);
    e = cudaStreamSynchronize(dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaStreamSynchronize (after a device to host copy)",
                            dev->id);
    return PE_OK;
}

pe_status cb_copy_d2d(be_device *dev, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src)
        return PE_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaMemcpyAsync (device to device)", dev->id);
    return PE_OK;
}

pe_status cb_copy_d2d_2d(be_device *dev, void *dst, size_t dst_pitch, const void *src,
                         size_t src_pitch, size_t width, size_t height)
{
    if (width == 0 || height == 0)
        return PE_OK;
    if (width > dst_pitch || width > src_pitch)
        return pe_fail(&dev->err, PE_EINVAL,
                       "copy_d2d_2d: rows of %zu bytes do not fit the pitches (dst %zu, src "
                       "%zu bytes)",
                       width, dst_pitch, src_pitch);
    cudaError_t e = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                      cudaMemcpyDeviceToDevice, dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaMemcpy2DAsync (device to device)", dev->id);
    return PE_OK;
}

/* The stream, then every peer-path send of this device: taken from the registry as a
 * snapshot, so no lock is held while waiting for a receiver. (comm_destroy must not run
 * while a member device is in synchronize: no rank may be in a call.) */
pe_status cb_synchronize(be_device *dev)
{
    cudaError_t e = cudaStreamSynchronize(dev->stream);
    if (e != cudaSuccess)
        return cb_cuda_fail(&dev->err, e, "cudaStreamSynchronize", dev->id);
    pthread_mutex_lock(&registry);
    int n = dev->n_out_chans;
    struct cb_chan **snap = n ? malloc((size_t)n * sizeof *snap) : NULL;
    if (snap)
        memcpy(snap, dev->out_chans, (size_t)n * sizeof *snap);
    pthread_mutex_unlock(&registry);
    if (n && !snap)
        return pe_fail(&dev->err, PE_ENOMEM, "synchronize: out of host memory");
    pe_status s = PE_OK;
    for (int i = 0; i < n && s == PE_OK; i++)
        s = cb_peer_wait_chan(dev, snap[i]);
    free(snap);
    return s;
}

pe_status cb_device_add_out_chan(be_device *dev, struct cb_chan *ch, pe_err *err)
{
    pthread_mutex_lock(&registry);
    if (dev->n_out_chans == dev->cap_out_chans) {
        int cap = dev->cap_out_chans ? 2 * dev->cap_out_chans : 8;
        struct cb_chan **p = realloc(dev->out_chans, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&registry);
            return pe_fail(err, PE_ENOMEM, "out of host memory for a peer-path channel");
        }
        dev->out_chans = p;
        dev->cap_out_chans = cap;
    }
    dev->out_chans[dev->n_out_chans++] = ch;
    *cb_chan_sender(ch) = dev;
    pthread_mutex_unlock(&registry);
    return PE_OK;
}

void cb_device_remove_out_chan(struct cb_chan *ch)
{
    pthread_mutex_lock(&registry);
    be_device *dev = *cb_chan_sender(ch);
    for (int i = 0; dev && i < dev->n_out_chans; i++)
        if (dev->out_chans[i] == ch) {
            dev->out_chans[i] = dev->out_chans[--dev->n_out_chans];
            break;
        }
    *cb_chan_sender(ch) = NULL;
    pthread_mutex_unlock(&registry);
}
