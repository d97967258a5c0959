/* devices.c: the public door to the backends' devices (pengine_tools.h): which backend a kind
 * resolves to, how many devices it has, what each is, and whether a device list exists. */
#include <string.h>

#include "backend/backend.h"
#include "pengine/pengine_tools.h"

/* The ops of kind, resolved (AUTO: CUDA when a device answers, else the host). */
static pe_status ops_of(pe_backend_kind kind, const be_ops **ops, char *notice, size_t len)
{
    pe_err err = {{0}};
    pe_status s = be_select(kind, ops, notice, len, &err);
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}

pe_status pe_backend_resolve(pe_backend_kind kind, pe_backend_kind *out, char *notice,
                             size_t notice_len)
{
    const be_ops *ops = NULL;
    if (!out) {
        pe_set_last_error("pe_backend_resolve: out must not be NULL");
        return PE_EINVAL;
    }
    pe_status s = ops_of(kind, &ops, notice, notice_len);
    if (s == PE_OK)
        *out = ops->kind;
    return s;
}

pe_status pe_device_count(pe_backend_kind kind, int *n)
{
    const be_ops *ops = NULL;
    if (!n) {
        pe_set_last_error("pe_device_count: n must not be NULL");
        return PE_EINVAL;
    }
    pe_status s = ops_of(kind, &ops, NULL, 0);
    if (s != PE_OK)
        return s;
    pe_err err = {{0}};
    s = ops->device_count(n, &err);
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}

pe_status pe_device_describe(pe_backend_kind kind, int id, pe_device_desc *out)
{
    const be_ops *ops = NULL;
    if (!out) {
        pe_set_last_error("pe_device_describe: out must not be NULL");
        return PE_EINVAL;
    }
    pe_status s = ops_of(kind, &ops, NULL, 0);
    if (s != PE_OK)
        return s;
    be_device_desc d;
    pe_err err = {{0}};
    s = ops->device_describe(id, &d, &err);
    if (s != PE_OK) {
        pe_set_last_error(err.msg);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->id = d.id;
    memcpy(out->name, d.name, sizeof out->name);
    out->memory_bytes = d.memory_bytes;
    memcpy(out->bus_id, d.bus_id, sizeof out->bus_id);
    out->numa_node = d.numa_node;
    memcpy(out->cpulist, d.cpulist, sizeof out->cpulist);
    memcpy(out->kernels, d.kernels, sizeof out->kernels);
    return PE_OK;
}

pe_status pe_devices_check(pe_backend_kind kind, const int *ids, int n)
{
    const be_ops *ops = NULL;
    pe_status s = ops_of(kind, &ops, NULL, 0);
    if (s != PE_OK)
        return s;
    pe_err err = {{0}};
    s = be_check_devices(ops, ids, n, &err);
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}
