/* backend.c: choosing a backend, checking a device list against it, and choosing the
 * collective path (NCCL or peer copies) for a device list. */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_select.h"

#ifndef PE_HAVE_CUDA
const be_ops *be_cuda_ops(void) { return NULL; }
#endif

/* The device count of ops, 0 when it has none or cannot tell; why gets the reason. */
static int usable_devices(const be_ops *ops, pe_err *why)
{
    int n = 0;
    if (!ops)
        return 0;
    if (ops->device_count(&n, why) != PE_OK || n < 0)
        return 0;
    return n;
}

/* Copies a reason into one line (a notice is printed as one line). */
static void one_line(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < len; i++)
        dst[i] = (src[i] == '\n' || src[i] == '\r') ? ' ' : src[i];
    if (len)
        dst[i] = '\0';
}

pe_status be_select_among(const be_ops *host, const be_ops *cuda, pe_backend_kind kind,
                          const be_ops **out, char *notice, size_t notice_len, pe_err *err)
{
    if (notice && notice_len)
        notice[0] = '\0';
    pe_err why = {{0}};
    char reason[PE_ERR_LEN];
    switch (kind) {
    case PE_BACKEND_HOST:
        *out = host;
        return PE_OK;
    case PE_BACKEND_CUDA:
        if (!cuda)
            return pe_fail(err, PE_ENODEV,
                           "--backend cuda: this pengine was built without the CUDA backend "
                           "(no nvcc at build time); rebuild with nvcc on the PATH or use "
                           "--backend host");
        if (usable_devices(cuda, &why) == 0) {
            one_line(reason, sizeof reason, why.msg[0] ? why.msg : "no driver or no GPU");
            return pe_fail(err, PE_ENODEV,
                           "--backend cuda: no CUDA device found (%s); use --backend host or "
                           "--backend auto",
                           reason);
        }
        *out = cuda;
        return PE_OK;
    case PE_BACKEND_AUTO:
        if (usable_devices(cuda, &why) > 0) {
            *out = cuda;
            return PE_OK;
        }
        *out = host;
        if (notice && notice_len) {
            if (!cuda)
                snprintf(reason, sizeof reason, "built without CUDA");
            else {
                char detail[PE_ERR_LEN / 2];
                one_line(detail, sizeof detail, why.msg);
                snprintf(reason, sizeof reason, "no CUDA device found%s%s%s",
                         detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
            }
            snprintf(notice, notice_len, "notice: %s; using the host backend (CPU devices)",
                     reason);
        }
        return PE_OK;
    }
    return pe_fail(err, PE_EINVAL, "unknown backend kind %d", (int)kind);
}

pe_status be_select(pe_backend_kind kind, const be_ops **out, char *notice, size_t notice_len,
                    pe_err *err)
{
    return be_select_among(be_host_ops(), be_cuda_ops(), kind, out, notice, notice_len, err);
}

pe_status be_check_devices(const be_ops *ops, const int *ids, int n, pe_err *err)
{
    int count = 0;
    pe_err why = {{0}};
    pe_status s = ops->device_count(&count, &why);
    if (s != PE_OK)
        return pe_fail(err, s, "%s", why.msg);
    for (int i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < count)
            continue;
        char list[PE_ERR_LEN / 2] = "";
        size_t used = 0;
        if (count == 0)
            one_line(list, sizeof list, why.msg[0] ? why.msg : "none found");
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
            if (used >= sizeof list)
                break;
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

int be_comm_force_peer(void)
{
    const char *v = getenv("PE_CUDA_COMM");
    return v && strcmp(v, "peer") == 0;
}

be_comm_path be_comm_path_for(pe_backend_kind kind, const int *ids, int n, int force_peer,
                              int shared, int *repeated)
{
    int rep = -1;
    for (int i = 0; i < n && rep < 0; i++)
        for (int j = 0; j < i; j++)
            if (ids[j] == ids[i]) {
                rep = ids[i];
                break;
            }
    if (repeated)
        *repeated = rep;
    if (kind != PE_BACKEND_CUDA)
        return BE_COMM_HOST;
    return (rep >= 0 || shared || force_peer) ? BE_COMM_PEER : BE_COMM_NCCL;
}

const char *be_comm_path_name(be_comm_path p)
{
    switch (p) {
    case BE_COMM_HOST: return "host";
    case BE_COMM_NCCL: return "nccl";
    case BE_COMM_PEER: return "peer";
    }
    return "?";
}

char *be_comm_path_describe(pe_backend_kind kind, const int *ids, int n, char *buf,
                            size_t len)
{
    int rep = -1;
    int force = be_comm_force_peer();
    be_comm_path p = be_comm_path_for(kind, ids, n, force, 0, &rep);
    switch (p) {
    case BE_COMM_HOST:
        snprintf(buf, len, "collectives: host shared memory");
        break;
    case BE_COMM_NCCL:
        snprintf(buf, len, "collectives: NCCL (every device distinct)");
        break;
    case BE_COMM_PEER:
        if (rep >= 0)
            snprintf(buf, len,
                     "collectives: in-process peer path (device %d appears twice in the "
                     "device list; NCCL refuses a repeated GPU)",
                     rep);
        else
            snprintf(buf, len, "collectives: in-process peer path (PE_CUDA_COMM=peer)");
        break;
    }
    return buf;
}

int be_split_plan(const int *colors, int n, int *group, int *sub, pe_err *err)
{
    int ngroups = 0;
    for (int r = 0; r < n; r++) {
        if (colors[r] < 0) {
            pe_fail(err, PE_EINVAL, "comm_split: rank %d has color %d; colors must be >= 0",
                    r, colors[r]);
            return -1;
        }
        group[r] = -1;
        sub[r] = 0;
        for (int q = 0; q < r; q++) /* the first rank of this color names the group */
            if (colors[q] == colors[r]) {
                if (group[r] < 0)
                    group[r] = group[q];
                sub[r]++;
            }
        if (group[r] < 0)
            group[r] = ngroups++;
    }
    return ngroups;
}

pe_status be_linear_unfused(const be_ops *ops, be_device *dev, pe_dtype dtype, size_t M,
                            size_t N, size_t K, const void *x, const void *W, const float *b,
                            be_act act, void *y, int y_bf16, float *tmp)
{
    float *out = y_bf16 ? tmp : y; /* (M, N) fp32 */
    pe_status s = dtype == PE_DTYPE_BF16
                      ? ops->gemm_bf16(dev, 0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, out, N)
                      : ops->gemm(dev, 0, 1, M, N, K, 1.0f, x, K, W, K, 0.0f, out, N);
    if (s == PE_OK && b)
        s = ops->bias_add(dev, out, b, M, N);
    if (s == PE_OK && act == BE_ACT_RELU)
        s = ops->relu(dev, out, M * N);
    if (s == PE_OK && act == BE_ACT_GELU)
        s = ops->gelu(dev, out, M * N);
    if (s == PE_OK && y_bf16)
        s = ops->to_bf16(dev, y, out, M * N);
    return s;
}

pe_status be_procs_check(be_device *const *devs, int n, const be_procs *procs, pe_err *err)
{
    if (n < 1 || !devs || !procs)
        return pe_fail(err, PE_EINVAL, "comm_create_procs: need n >= 1 and non-NULL arrays");
    int P = procs->nprocs, me = procs->me;
    if (P < 1 || me < 0 || me >= P || n % P != 0)
        return pe_fail(err, PE_EINVAL, "comm_create_procs: %d ranks cannot spread evenly over "
                       "%d processes (this one %d)", n, P, me);
    int per = n / P;
    for (int r = 0; r < n; r++)
        if ((r / per == me) != (devs[r] != NULL))
            return pe_fail(err, PE_EINVAL, "comm_create_procs: the device of rank %d is %s, "
                           "but rank %d lives on process %d and this is process %d",
                           r, devs[r] ? "set" : "NULL", r, r / per, me);
    return PE_OK;
}
