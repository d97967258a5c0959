/* hb_device.c: host devices: discovery, life cycle, memory, synchronize, the ops table. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/host/hb_amx.h"
#include "backend/host/hb_internal.h"
#include "backend/host/hb_net.h"
#include "backend/host/hb_simd.h"

pe_status hb_fail(be_device *dev, pe_status s, const char *fmt, ...)
{
    if (dev) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(dev->err.msg, sizeof dev->err.msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* ---- sends in flight ---------------------------------------------------------------- */

pe_status hb_pending_create(hb_pending **out)
{
    hb_pending *p = calloc(1, sizeof *p);
    if (!p)
        return PE_ENOMEM;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return PE_ENOMEM;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return PE_ENOMEM;
    }
    p->refs = 1;
    *out = p;
    return PE_OK;
}

void hb_pending_retain(hb_pending *p)
{
    pthread_mutex_lock(&p->mu);
    p->refs++;
    pthread_mutex_unlock(&p->mu);
}

void hb_pending_release(hb_pending *p)
{
    pthread_mutex_lock(&p->mu);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    hb_net_pending_free(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void hb_pending_post(hb_pending *p)
{
    pthread_mutex_lock(&p->mu);
    p->outstanding++;
    pthread_mutex_unlock(&p->mu);
}

void hb_pending_done(hb_pending *p, int failed)
{
    pthread_mutex_lock(&p->mu);
    p->outstanding--;
    p->failed += failed ? 1 : 0;
    if (p->outstanding == 0)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- discovery ---------------------------------------------------------------------- */

static pe_status hb_device_count(int *n, pe_err *err)
{
    (void)err;
    *n = HB_DEVICE_COUNT;
    return PE_OK;
}

static size_t physical_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static pe_status hb_device_describe(int id, be_device_desc *out, pe_err *err)
{
    if (id < 0 || id >= HB_DEVICE_COUNT)
        return pe_fail(err, PE_ENODEV, "host device %d does not exist; host devices are 0..%d",
                       id, HB_DEVICE_COUNT - 1);
    memset(out, 0, sizeof *out);
    out->id = id;
    snprintf(out->name, sizeof out->name, "host device %d", id);
    out->memory_bytes = physical_ram();
    out->numa_node = -1;
    snprintf(out->kernels, sizeof out->kernels, "%s%s", hb_simd_get()->name,
             hb_amx_enabled() ? ", bf16 on AMX tiles" : "");
    /* bus_id and cpulist stay "": the runtime's topology plan picks each worker's cores. */
    return PE_OK;
}

/* ---- life cycle --------------------------------------------------------------------- */

/* Host devices open one at a time. Opening loads an hwloc topology, and hwloc dlopens its
 * plugins; DRD once reported a device's first store, to memory it had just allocated, as
 * conflicting with another opening thread's accesses inside dlopen (test_collectives_drd:
 * memory the allocator handed from one thread to the other without an order DRD sees).
 * One open at a time orders them; hwloc's calls take turns anyway (runtime/topology.c). */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;

static pe_status open_device(int id, be_device **out, pe_err *err);

static pe_status hb_open(int id, be_device **out, pe_err *err)
{
    pthread_mutex_lock(&open_mu);
    pe_status s = open_device(id, out, err);
    pthread_mutex_unlock(&open_mu);
    return s;
}

static pe_status open_device(int id, be_device **out, pe_err *err)
{
    *out = NULL;
    if (id < 0 || id >= HB_DEVICE_COUNT)
        return pe_fail(err, PE_ENODEV, "host device %d does not exist; host devices are 0..%d",
                       id, HB_DEVICE_COUNT - 1);
    be_device *dev = calloc(1, sizeof *dev);
    if (!dev || hb_pending_create(&dev->pend) != PE_OK) {
        free(dev);
        return pe_fail(err, PE_ENOMEM, "cannot open host device %d: out of memory", id);
    }
    dev->id = id;
    hb_gemm_init();
    pe_status s = hb_threads_open(dev);
    if (s != PE_OK) {
        pe_fail(err, s, "%s", dev->err.msg);
        hb_threads_close(dev);
        hb_pending_release(dev->pend);
        free(dev);
        return s;
    }
    *out = dev;
    return PE_OK;
}

/* Sends still in flight keep their hb_pending alive through their communicator. */
static void hb_close(be_device *dev)
{
    if (!dev)
        return;
    hb_threads_close(dev);
    hb_pending_release(dev->pend);
    free(dev->widened);
    free(dev);
}

static const char *hb_last_error(const be_device *dev) { return dev ? dev->err.msg : ""; }

/* ---- memory ------------------------------------------------------------------------- */

/* Device memory of HB_HUGE_MIN bytes or more (weights, the KV pool) is asked for in
 * transparent huge pages: decode reads all of it every step, in long runs (the GEMV's
 * streams) and scattered ones (a sequence's KV blocks), and with 4 KiB pages those reads
 * miss the TLB. Measured with pengine generate on the 124m GPT-2, bf16: 7.1-7.7 against
 * 6.5-6.8 ms a token near position 10, 9.6 against 7.9-9.2 near 950. */
#define HB_HUGE_PAGE ((size_t)2 << 20)
#define HB_HUGE_MIN ((size_t)4 << 20)

static pe_status hb_alloc(be_device *dev, size_t bytes, void **out)
{
    *out = NULL;
    void *p = NULL;
    const int huge = bytes >= HB_HUGE_MIN;
    /* whole huge pages, so that the advice covers the block and nothing else; 0 bytes
     * still gives a unique pointer that free accepts */
    size_t size = huge ? (bytes + HB_HUGE_PAGE - 1) / HB_HUGE_PAGE * HB_HUGE_PAGE
                       : bytes ? bytes : 1;
    int rc = posix_memalign(&p, huge ? HB_HUGE_PAGE : HB_ALIGN, size);
    if (rc == 0 && huge)
        (void)madvise(p, size, MADV_HUGEPAGE); /* advice: without THP, 4 KiB pages */
    if (rc != 0)
        return hb_fail(dev, PE_ENOMEM,
                       "cannot allocate %zu bytes on host device %d (%s); use a smaller batch "
                       "or model, or more devices",
                       bytes, dev->id, strerror(rc));
    *out = p;
    return PE_OK;
}

static void hb_free(be_device *dev, void *p)
{
    (void)dev;
    free(p);
}

static pe_status hb_copy(be_device *dev, void *dst, const void *src, size_t bytes,
                         const char *what)
{
    if (bytes == 0)
        return PE_OK;
    if (!dst || !src)
        return hb_fail(dev, PE_EINVAL, "%s of %zu bytes on host device %d: %s pointer is NULL",
                       what, bytes, dev->id, dst ? "source" : "destination");
    memmove(dst, src, bytes);
    return PE_OK;
}

static pe_status hb_copy_h2d(be_device *dev, void *dst, const void *src, size_t bytes)
{
    return hb_copy(dev, dst, src, bytes, "copy_h2d");
}

static pe_status hb_copy_d2h(be_device *dev, void *dst, const void *src, size_t bytes)
{
    return hb_copy(dev, dst, src, bytes, "copy_d2h");
}

static pe_status hb_copy_d2d(be_device *dev, void *dst, const void *src, size_t bytes)
{
    return hb_copy(dev, dst, src, bytes, "copy_d2d");
}

static pe_status hb_copy_d2d_2d(be_device *dev, void *dst, size_t dst_pitch, const void *src,
                                size_t src_pitch, size_t width, size_t height)
{
    if (height > 1 && (dst_pitch < width || src_pitch < width))
        return hb_fail(dev, PE_EINVAL,
                       "copy_d2d_2d on host device %d: pitches %zu/%zu are below the row "
                       "width %zu bytes", dev->id, dst_pitch, src_pitch, width);
    for (size_t i = 0; i < height; i++) {
        pe_status s = hb_copy(dev, (char *)dst + i * dst_pitch, (const char *)src + i * src_pitch,
                              width, "copy_d2d_2d");
        if (s != PE_OK)
            return s;
    }
    return PE_OK;
}

/* ---- ordering ----------------------------------------------------------------------- */

/* Host work is done when its call returns; only sends can be in flight. */
static pe_status hb_synchronize(be_device *dev)
{
    hb_pending *p = dev->pend;
    size_t net_failed = hb_net_sync(p); /* sends to other processes */
    pthread_mutex_lock(&p->mu);
    while (p->outstanding > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    size_t failed = p->failed + net_failed;
    p->failed = 0;
    pthread_mutex_unlock(&p->mu);
    if (failed)
        return hb_fail(dev, PE_ECOMM,
                       "host device %d: %zu send%s never reached the receiver (the communicator "
                       "was aborted, or the receiver asked for a different count); see the "
                       "receiver's error",
                       dev->id, failed, failed == 1 ? "" : "s");
    return PE_OK;
}

/* ---- the table ---------------------------------------------------------------------- */

static const be_ops hb_ops = {
    .name = "host",
    .kind = PE_BACKEND_HOST,
    .device_count = hb_device_count,
    .device_describe = hb_device_describe,
    .open = hb_open,
    .close = hb_close,
    .last_error = hb_last_error,
    .set_compute_threads = hb_set_compute_threads,
    .compute_threads = hb_compute_threads,
    .alloc = hb_alloc,
    .free = hb_free,
    .copy_h2d = hb_copy_h2d,
    .copy_d2h = hb_copy_d2h,
    .copy_d2d = hb_copy_d2d,
    .copy_d2d_2d = hb_copy_d2d_2d,
    .synchronize = hb_synchronize,
    .gemm = hb_gemm,
    .gemm_strided_batched = hb_gemm_strided_batched,
    .gemm_bf16 = hb_gemm_bf16,
    .to_bf16 = hb_to_bf16,
    .linear = hb_linear,
    .bias_add = hb_bias_add,
    .relu = hb_relu,
    .gelu = hb_gelu,
    .layernorm = hb_layernorm,
    .softmax = hb_softmax,
    .residual_add = hb_residual_add,
    .embedding = hb_embedding,
    .rmsnorm = hb_rmsnorm,
    .rope = hb_rope,
    .silu_mul = hb_silu_mul,
    .kv_append = hb_kv_append,
    .attention = hb_attention,
    .argmax = hb_argmax,
    .topk = hb_topk,
    .sample = hb_sample,
    .penalize = hb_penalize,
    .mask = hb_mask,
    .comm_create = hb_comm_create,
#if defined(PE_HAVE_MPI)
    .comm_create_procs = hb_net_create_procs,
#endif
    .comm_abort = hb_comm_abort,
    .comm_abort_all = hb_comm_abort_all,
    .comm_split = hb_comm_split,
    .comm_destroy = hb_comm_destroy,
    .allreduce_sum = hb_allreduce_sum,
    .allgather = hb_allgather,
    .reduce_scatter = hb_reduce_scatter,
    .broadcast = hb_broadcast,
    .send = hb_send,
    .recv = hb_recv,
    .barrier = hb_barrier,
    .comm_rank = hb_comm_rank,
    .comm_size = hb_comm_size,
};

const be_ops *be_host_ops(void) { return &hb_ops; }
