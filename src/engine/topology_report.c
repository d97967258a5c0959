/* topology_report.c: pe_topology_report (pengine_tools.h): the machine as hwloc sees it, the
 * backend's devices, and the cores each device's worker would be bound to. */
#include "pengine/pengine_tools.h"

#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "runtime/topology.h"

#define LISTED_DEVICES 8 /* host backends have a device per core: show the first few */

typedef struct topo_plan {
    int n;
    be_device_desc *desc;  /* (n), NULL without --gpus */
    char (*names)[160];    /* (n) */
    const char **name_ptr; /* (n) */
    const char **near;     /* (n) */
    rt_binding *plan;      /* (n) */
} topo_plan;

static void plan_free(topo_plan *p)
{
    free(p->desc);
    free(p->names);
    free(p->name_ptr);
    free(p->near);
    free(p->plan);
}

static int plan_alloc(topo_plan *p, int n)
{
    p->n = n;
    p->desc = calloc((size_t)n, sizeof *p->desc);
    p->names = calloc((size_t)n, sizeof *p->names);
    p->name_ptr = calloc((size_t)n, sizeof *p->name_ptr);
    p->near = calloc((size_t)n, sizeof *p->near);
    p->plan = calloc((size_t)n, sizeof *p->plan);
    return p->desc && p->names && p->name_ptr && p->near && p->plan ? 0 : -1;
}

static void print_devices(const be_ops *ops, FILE *out)
{
    int count = 0;
    if (ops->device_count(&count, NULL) != PE_OK)
        return;
    fprintf(out, "%s backend: %d device%s\n", ops->name, count, count == 1 ? "" : "s");
    for (int d = 0; d < count && d < LISTED_DEVICES; d++) {
        be_device_desc desc;
        if (ops->device_describe(d, &desc, NULL) != PE_OK)
            continue;
        fprintf(out, "  device %d: %s, %.1f GiB%s%s%s%s%s%s\n", d, desc.name,
                (double)desc.memory_bytes / (1024.0 * 1024.0 * 1024.0), desc.bus_id[0] ? ", " : "",
                desc.bus_id, desc.cpulist[0] ? ", near cores " : "", desc.cpulist,
                desc.kernels[0] ? "; kernels: " : "", desc.kernels);
    }
    if (count > LISTED_DEVICES)
        fprintf(out, "  ... devices %d to %d alike\n", LISTED_DEVICES, count - 1);
}

static pe_status print_json(const rt_topology *t, const be_ops *ops, const topo_plan *p,
                            const char *notice, FILE *out)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    ok = ok && cJSON_AddNumberToObject(root, "cores", rt_topology_cores(t));
    ok = ok && cJSON_AddNumberToObject(root, "pus", rt_topology_pus(t));
    ok = ok && cJSON_AddNumberToObject(root, "numa_nodes", rt_topology_numa_nodes(t));
    ok = ok && cJSON_AddStringToObject(root, "backend", ops ? ops->name : "none");
    ok = ok && (!notice[0] || cJSON_AddStringToObject(root, "notice", notice));
    cJSON *workers = ok ? cJSON_AddArrayToObject(root, "workers") : NULL;
    ok = ok && workers;
    for (int i = 0; ok && i < p->n; i++) {
        cJSON *w = cJSON_CreateObject();
        ok = w && cJSON_AddItemToArray(workers, w);
        if (!ok) {
            cJSON_Delete(w);
            break;
        }
        ok = ok && cJSON_AddNumberToObject(w, "worker", i);
        if (p->desc && ok) {
            ok = cJSON_AddNumberToObject(w, "device", p->desc[i].id) &&
                 cJSON_AddStringToObject(w, "name", p->desc[i].name) &&
                 cJSON_AddStringToObject(w, "kernels", p->desc[i].kernels);
        }
        ok = ok && cJSON_AddStringToObject(w, "cpulist", p->plan[i].cpulist);
        ok = ok && cJSON_AddBoolToObject(w, "shared", p->plan[i].shared);
    }
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!s) {
        pe_set_last_error("out of memory while printing the topology as JSON; try without JSON");
        return PE_ENOMEM;
    }
    fprintf(out, "%s\n", s);
    cJSON_free(s);
    return PE_OK;
}

pe_status pe_topology_report(pe_backend_kind kind, const int *ids, int n, int threads,
                             int json, FILE *out)
{
    pe_err err = {{0}};
    rt_topology *t = NULL;
    pe_status rc = rt_topology_load(&t, &err);
    if (rc != PE_OK) {
        pe_set_last_error(err.msg);
        return rc;
    }
    const be_ops *ops = NULL;
    char notice[256] = "";
    topo_plan p = {0};
    const int listed = ids && n > 0;
    if ((rc = be_select(kind, &ops, notice, sizeof notice, &err)) != PE_OK ||
        (listed && (rc = be_check_devices(ops, ids, n, &err)) != PE_OK))
        pe_set_last_error(err.msg);
    if (!listed)
        n = rt_topology_cores(t);
    if (rc == PE_OK && plan_alloc(&p, n > 0 ? n : 1) != 0) {
        pe_set_last_error("out of memory while planning the topology; list fewer devices");
        rc = PE_ENOMEM;
    }
    for (int i = 0; rc == PE_OK && i < n; i++) {
        if (listed) {
            if ((rc = ops->device_describe(ids[i], &p.desc[i], &err)) != PE_OK) {
                pe_set_last_error(err.msg);
                break;
            }
            /* rt_topology_print numbers the workers; the name says which device each has */
            snprintf(p.names[i], sizeof p.names[i], "id %d, %.100s", ids[i], p.desc[i].name);
            p.near[i] = p.desc[i].cpulist;
            p.name_ptr[i] = p.names[i];
        } else {
            p.near[i] = ""; /* one host device per core: the cores are split evenly */
            p.name_ptr[i] = NULL;
        }
    }
    if (!listed && p.desc) {
        free(p.desc);
        p.desc = NULL;
    }
    if (rc == PE_OK &&
        (rc = rt_topology_plan_cores(t, n, p.near, threads, p.plan, &err)) != PE_OK)
        pe_set_last_error(err.msg);
    if (rc == PE_OK) {
        if (json) {
            rc = print_json(t, ops, &p, notice, out);
        } else {
            if (notice[0]) /* the backend auto chose, and why */
                fprintf(out, "%s\n", notice);
            rt_topology_print(t, out, n, p.plan, p.name_ptr);
            print_devices(ops, out);
            if (fflush(out) != 0) {
                pe_set_last_error("writing the topology failed (a closed output?)");
                rc = PE_EIO;
            }
        }
    }
    plan_free(&p);
    rt_topology_free(t);
    return rc;
}
