/* hb_parallel.c: a host device's compute threads: parallel regions over item ranges and
 * the per-thread scratch the kernels use inside them. */
#include <stdlib.h>
#include <string.h>

#include "backend/host/hb_internal.h"

pe_status hb_threads_open(be_device *dev)
{
    dev->nthreads = 1;
    dev->tls = calloc(1, sizeof *dev->tls);
    if (!dev->tls)
        return hb_fail(dev, PE_ENOMEM, "host device %d: out of memory for its threads",
                       dev->id);
    return PE_OK;
}

void hb_threads_close(be_device *dev)
{
    for (int t = 0; dev->tls && t < dev->nthreads; t++)
        free(dev->tls[t].p);
    free(dev->tls);
    dev->tls = NULL;
    free(dev->call.p);
    dev->call = (hb_scratch){0};
}

void hb_for(be_device *dev, size_t n, size_t grain, hb_range_fn fn, void *arg)
{
    (void)grain;
    if (n)
        fn(arg, 0, n, 0);
    (void)dev;
}

/* Grows s to at least bytes (by doubling, so a growing size costs few allocations). */
static pe_status grow(be_device *dev, hb_scratch *s, size_t bytes, const char *op)
{
    if (s->bytes >= bytes)
        return PE_OK;
    void *p = NULL;
    size_t want = bytes > 2 * s->bytes ? bytes : 2 * s->bytes;
    if (posix_memalign(&p, HB_ALIGN, want) != 0)
        return hb_fail(dev, PE_ENOMEM,
                       "%s on host device %d: out of memory for %zu bytes of scratch; use "
                       "smaller steps (fewer tokens per step)",
                       op, dev->id, want);
    free(s->p);
    s->p = p;
    s->bytes = want;
    return PE_OK;
}

pe_status hb_scratch_reserve(be_device *dev, size_t bytes, const char *op)
{
    for (int t = 0; t < dev->nthreads; t++) {
        pe_status st = grow(dev, &dev->tls[t], bytes, op);
        if (st != PE_OK)
            return st;
    }
    return PE_OK;
}

void *hb_call_scratch(be_device *dev, size_t bytes, const char *op)
{
    return grow(dev, &dev->call, bytes, op) == PE_OK ? dev->call.p : NULL;
}
