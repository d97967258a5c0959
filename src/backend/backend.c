/* backend.c: choosing a backend and checking a device list against it. */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

#ifndef PE_HAVE_CUDA
const be_ops *be_cuda_ops(void) { return NULL; }
#endif

static int usable_devices(const be_ops *ops)
{
    int n = 0;
    if (!ops || ops->device_count(&n, NULL) != PE_OK)
        return 0;
    return n;
}

pe_status be_select(pe_backend_kind kind, const be_ops **out, char *notice, size_t notice_len,
                    pe_err *err)
{
    if (notice && notice_len)
        notice[0] = '\0';
    const be_ops *cuda = be_cuda_ops();
    switch (kind) {
    case PE_BACKEND_HOST:
        *out = be_host_ops();
        return PE_OK;
    case PE_BACKEND_CUDA:
        if (!cuda)
            return pe_fail(err, PE_ENODEV,
                           "--backend cuda: this pengine was built without the CUDA backend "
                           "(no nvcc at build time); rebuild with nvcc on the PATH or use "
                           "--backend host");
        if (usable_devices(cuda) == 0) {
            pe_err why = {{0}};
            int n = 0;
            cuda->device_count(&n, &why);
            return pe_fail(err, PE_ENODEV,
                           "--backend cuda: no CUDA device found (%s); use --backend host or "
                           "--backend auto",
                           why.msg[0] ? why.msg : "no driver or no GPU");
        }
        *out = cuda;
        return PE_OK;
    case PE_BACKEND_AUTO:
        if (usable_devices(cuda) > 0) {
            *out = cuda;
            return PE_OK;
        }
        *out = be_host_ops();
        if (notice && notice_len)
            snprintf(notice, notice_len, "notice: %s; using the host backend (CPU devices)",
                     cuda ? "no CUDA device found" : "built without CUDA");
        return PE_OK;
    }
    return pe_fail(err, PE_EINVAL, "unknown backend kind %d", (int)kind);
}

pe_status be_check_devices(const be_ops *ops, const int *ids, int n, pe_err *err)
{
    int count = 0;
    pe_status s = ops->device_count(&count, err);
    if (s != PE_OK)
        return s;
    for (int i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < count)
            continue;
        char list[PE_ERR_LEN / 2] = "";
        size_t used = 0;
        for (int d = 0; d < count && used + 1 < sizeof list; d++) {
            be_device_desc desc;
            if (ops->device_describe(d, &desc, NULL) != PE_OK)
                continue;
            int w = snprintf(list + used, sizeof list - used, "%s%d: %s, %.1f GiB%s%s",
                             d ? "; " : "", d, desc.name,
                             (double)desc.memory_bytes / (1024.0 * 1024.0 * 1024.0),
                             desc.bus_id[0] ? ", " : "", desc.bus_id);
            if (w < 0)
                break;
            used += (size_t)w;
            if (count > 8 && d == 3) { /* host backends have many devices: summarize */
                snprintf(list + used, sizeof list - used, "; ... up to %d", count - 1);
                break;
            }
        }
        return pe_fail(err, PE_ENODEV,
                       "device %d does not exist on the %s backend; it has %d device%s (%s); "
                       "pick ids from that list",
                       ids[i], ops->name, count, count == 1 ? "" : "s", list);
    }
    return PE_OK;
}
