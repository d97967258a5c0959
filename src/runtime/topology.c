/* topology.c: the machine as hwloc sees it, core plans for workers, thread binding.
 *
 * cpulists are in hwloc list syntax over OS PU numbers ("0-3,8"), the same numbers
 * taskset and /sys use. hwloc's default topology only holds what this process may use,
 * so in a container restricted to some CPUs the plan only uses those.
 */
#include "runtime/topology.h"

#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rt_topology {
    hwloc_topology_t topo;
    int cores; /* physical cores (PUs when hwloc reports no cores) */
    int pus;
    int numa;
};

/* libhwloc keeps globals it fills in lazily without a lock (helgrind and DRD see two
 * threads race on them in hwloc_topology_load and in the Linux cpubind calls), and host
 * devices load a topology and read or set bindings from several workers at once: those
 * calls take turns on this mutex. */
static pthread_mutex_t hwloc_mu = PTHREAD_MUTEX_INITIALIZER;

static int get_cpubind(const rt_topology *t, hwloc_bitmap_t set)
{
    pthread_mutex_lock(&hwloc_mu);
    int rc = hwloc_get_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD);
    pthread_mutex_unlock(&hwloc_mu);
    return rc;
}

/* Binds thread th (the caller when self) to set; errno as hwloc left it. */
static int set_cpubind(const rt_topology *t, int self, pthread_t th, hwloc_const_bitmap_t set)
{
    pthread_mutex_lock(&hwloc_mu);
    int rc = self ? hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD)
                  : hwloc_set_thread_cpubind(t->topo, th, set, 0);
    int e = errno;
    pthread_mutex_unlock(&hwloc_mu);
    errno = e;
    return rc;
}

pe_status rt_topology_load(rt_topology **out, pe_err *err)
{
    *out = NULL;
    rt_topology *t = calloc(1, sizeof *t);
    if (!t)
        return pe_fail(err, PE_ENOMEM, "out of memory for the topology");
    pthread_mutex_lock(&hwloc_mu);
    if (hwloc_topology_init(&t->topo) != 0) {
        int e = errno;
        pthread_mutex_unlock(&hwloc_mu);
        free(t);
        return pe_fail(err, PE_ENOMEM, "hwloc_topology_init failed: %s", strerror(e));
    }
    int rc = hwloc_topology_load(t->topo), e = errno;
    pthread_mutex_unlock(&hwloc_mu);
    if (rc != 0) {
        hwloc_topology_destroy(t->topo);
        free(t);
        return pe_fail(err, PE_EDEVICE,
                       "hwloc could not read the machine's topology: %s; check that /sys "
                       "and /proc are mounted (containers), or set HWLOC_XMLFILE",
                       strerror(e));
    }
    t->pus = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_PU);
    t->cores = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_CORE);
    if (t->cores <= 0)
        t->cores = t->pus;
    t->numa = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE);
    if (t->numa < 1)
        t->numa = 1;
    if (t->pus <= 0) {
        hwloc_topology_destroy(t->topo);
        free(t);
        return pe_fail(err, PE_EDEVICE, "hwloc found no processing unit this process may use");
    }
    *out = t;
    return PE_OK;
}

void rt_topology_free(rt_topology *t)
{
    if (!t)
        return;
    hwloc_topology_destroy(t->topo);
    free(t);
}

int rt_topology_cores(const rt_topology *t) { return t->cores; }
int rt_topology_pus(const rt_topology *t) { return t->pus; }
int rt_topology_numa_nodes(const rt_topology *t) { return t->numa; }

/* The i-th core (by logical index), or the i-th PU when hwloc has no cores. */
static hwloc_obj_t core_obj(const rt_topology *t, int i)
{
    hwloc_obj_type_t type =
        hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    return hwloc_get_obj_by_type(t->topo, type, (unsigned)i);
}

/* Fills out with the PUs of the cores [first, last) among those that meet set. */
static void take_cores(const rt_topology *t, hwloc_const_bitmap_t set, int first, int last,
                       hwloc_bitmap_t out)
{
    hwloc_bitmap_zero(out);
    int k = 0;
    for (int c = 0; c < t->cores && k < last; c++) {
        hwloc_obj_t core = core_obj(t, c);
        if (!core || !hwloc_bitmap_intersects(core->cpuset, set))
            continue;
        if (k >= first) {
            hwloc_bitmap_t part = hwloc_bitmap_dup(core->cpuset);
            if (part) {
                hwloc_bitmap_and(part, part, set);
                hwloc_bitmap_or(out, out, part);
                hwloc_bitmap_free(part);
            }
        }
        k++;
    }
}

static int count_cores(const rt_topology *t, hwloc_const_bitmap_t set)
{
    int k = 0;
    for (int c = 0; c < t->cores; c++) {
        hwloc_obj_t core = core_obj(t, c);
        if (core && hwloc_bitmap_intersects(core->cpuset, set))
            k++;
    }
    return k;
}

pe_status rt_topology_plan(const rt_topology *t, int n, const char *const *near,
                           rt_binding *out, pe_err *err)
{
    return rt_topology_plan_cores(t, n, near, 0, out, err);
}

pe_status rt_topology_plan_cores(const rt_topology *t, int n, const char *const *near,
                                 int threads, rt_binding *out, pe_err *err)
{
    return rt_topology_plan_share(t, n, near, threads, 0, 1, out, err);
}

/* The PUs this process plans on: those the calling thread may run on (mpirun, Slurm or
 * taskset bound it); when that is the whole machine, share `share` of `shares` of its
 * cores (the processes of one node split them). */
static void plan_set(const rt_topology *t, int share, int shares, hwloc_bitmap_t all)
{
    hwloc_const_bitmap_t machine = hwloc_get_root_obj(t->topo)->cpuset;
    if (get_cpubind(t, all) != 0 ||
        (hwloc_bitmap_and(all, all, machine), hwloc_bitmap_iszero(all)))
        hwloc_bitmap_copy(all, machine); /* unknown: the whole machine */
    if (shares <= 1 || !hwloc_bitmap_isequal(all, machine))
        return;
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    if (!mine)
        return;
    int ncores = count_cores(t, all);
    int first = (int)((long)share * ncores / shares), last = (int)((long)(share + 1) * ncores / shares);
    if (first == last) /* more processes than cores: one each, round-robin */
        first = share % ncores, last = first + 1;
    take_cores(t, all, first, last, mine);
    if (!hwloc_bitmap_iszero(mine))
        hwloc_bitmap_copy(all, mine);
    hwloc_bitmap_free(mine);
}

/* Workers with the same candidate set (all of the planned PUs for host devices, plan_set)
 * split its cores: evenly while there are at least as many cores as workers, round-robin
 * beyond; or, for host devices with threads > 0, `threads` consecutive cores each, wrapping. */
pe_status rt_topology_plan_share(const rt_topology *t, int n, const char *const *near,
                                 int threads, int share, int shares, rt_binding *out,
                                 pe_err *err)
{
    if (n < 1 || !out)
        return pe_fail(err, PE_EINVAL, "plan for %d workers: need at least one worker", n);
    pe_status st = PE_OK;
    hwloc_bitmap_t *cand = calloc((size_t)n, sizeof *cand); /* (n) candidate PUs */
    hwloc_bitmap_t *mine = calloc((size_t)n, sizeof *mine); /* (n) planned PUs */
    hwloc_bitmap_t all = hwloc_bitmap_alloc(); /* the PUs this process plans on */
    hwloc_bitmap_t one = hwloc_bitmap_alloc(); /* one core's PUs */
    if (all)
        plan_set(t, share, shares, all);
    if (!cand || !mine || !one || !all) {
        st = pe_fail(err, PE_ENOMEM, "out of memory planning %d workers", n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        cand[i] = hwloc_bitmap_alloc();
        mine[i] = hwloc_bitmap_alloc();
        if (!cand[i] || !mine[i]) {
            st = pe_fail(err, PE_ENOMEM, "out of memory planning %d workers", n);
            goto done;
        }
        const char *list = near ? near[i] : NULL;
        if (!list || !*list) {
            hwloc_bitmap_copy(cand[i], all);
            continue;
        }
        if (hwloc_bitmap_list_sscanf(cand[i], list) != 0) {
            st = pe_fail(err, PE_EINVAL,
                         "device %d: cpulist '%s' is not in list syntax (e.g. \"0-3,8\")", i,
                         list);
            goto done;
        }
        /* Near cores this process may not use are dropped; none left: not bound. */
        hwloc_bitmap_and(cand[i], cand[i], all);
    }
    for (int i = 0; i < n; i++) {
        int rank = 0, members = 0;
        for (int j = 0; j < n; j++) {
            if (hwloc_bitmap_isequal(cand[i], cand[j])) {
                rank += j < i;
                members++;
            }
        }
        int ncores = count_cores(t, cand[i]);
        if (ncores == 0)
            continue; /* mine[i] stays empty: do not bind */
        int host = !near || !near[i] || !*near[i];
        if (host && threads > 0) {
            int take = threads < ncores ? threads : ncores;
            for (int k = 0; k < take; k++) {
                int c = (int)(((long)rank * threads + k) % ncores);
                take_cores(t, cand[i], c, c + 1, one);
                hwloc_bitmap_or(mine[i], mine[i], one);
            }
        } else if (members <= ncores) {
            int first = (int)((long)rank * ncores / members);
            int last = (int)((long)(rank + 1) * ncores / members);
            take_cores(t, cand[i], first, last, mine[i]);
        } else {
            take_cores(t, cand[i], rank % ncores, rank % ncores + 1, mine[i]);
        }
    }
    for (int i = 0; i < n; i++) {
        out[i].shared = 0;
        for (int j = 0; j < n; j++)
            if (j != i && hwloc_bitmap_intersects(mine[i], mine[j]))
                out[i].shared = 1;
        out[i].cpulist[0] = '\0';
        if (hwloc_bitmap_iszero(mine[i]))
            continue;
        int len = hwloc_bitmap_list_snprintf(out[i].cpulist, sizeof out[i].cpulist, mine[i]);
        if (len < 0 || (size_t)len >= sizeof out[i].cpulist) {
            out[i].cpulist[0] = '\0';
            st = pe_fail(err, PE_EINVAL,
                         "device %d: its core list needs %d characters, more than the %zu an "
                         "rt_binding holds; give it fewer or contiguous cores",
                         i, len, sizeof out[i].cpulist - 1);
            goto done;
        }
    }
done:
    for (int i = 0; i < n && cand && mine; i++) {
        hwloc_bitmap_free(cand[i]);
        hwloc_bitmap_free(mine[i]);
    }
    free(cand);
    free(mine);
    hwloc_bitmap_free(one);
    hwloc_bitmap_free(all);
    return st;
}

/* 1 once this thread was bound with rt_topology_bind_self (rt_topology_thread_cores). */
static _Thread_local int self_bound;

pe_status rt_topology_bind_self(const rt_topology *t, const rt_binding *b, pe_err *err)
{
    if (!b || !b->cpulist[0])
        return PE_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return pe_fail(err, PE_ENOMEM, "out of memory binding to cores %s", b->cpulist);
    pe_status st = PE_OK;
    if (hwloc_bitmap_list_sscanf(set, b->cpulist) != 0 || hwloc_bitmap_iszero(set)) {
        st = pe_fail(err, PE_EINVAL, "cpulist '%s' is not in list syntax (e.g. \"0-3,8\")",
                     b->cpulist);
    } else if (set_cpubind(t, 1, pthread_self(), set) != 0) {
        int e = errno;
        st = pe_fail(err, PE_EDEVICE,
                     "cannot bind this thread to PUs %s: %s; the OS or the container refuses "
                     "CPU binding (check its cpuset), so run without binding",
                     b->cpulist, strerror(e));
    } else {
        self_bound = 1;
    }
    hwloc_bitmap_free(set);
    return st;
}

pe_status rt_topology_bind_thread(const rt_topology *t, pthread_t th, const rt_binding *b,
                                  pe_err *err)
{
    if (!b || !b->cpulist[0])
        return PE_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return pe_fail(err, PE_ENOMEM, "out of memory binding a thread to cores %s",
                       b->cpulist);
    pe_status st = PE_OK;
    if (hwloc_bitmap_list_sscanf(set, b->cpulist) != 0 || hwloc_bitmap_iszero(set))
        st = pe_fail(err, PE_EINVAL, "cpulist '%s' is not in list syntax (e.g. \"0-3,8\")",
                     b->cpulist);
    else if (set_cpubind(t, 0, th, set) != 0)
        st = pe_fail(err, PE_EDEVICE, "cannot bind a thread to PUs %s: %s", b->cpulist,
                     strerror(errno));
    hwloc_bitmap_free(set);
    return st;
}

int rt_topology_thread_cores(const rt_topology *t, rt_binding *cores, int max, int *bound)
{
    hwloc_const_bitmap_t all = hwloc_get_root_obj(t->topo)->cpuset;
    hwloc_bitmap_t mine = hwloc_bitmap_alloc(), part = hwloc_bitmap_alloc();
    int n = 0;
    *bound = 0;
    if (mine && part && get_cpubind(t, mine) == 0) {
        hwloc_bitmap_and(mine, mine, all);
        *bound = !hwloc_bitmap_iszero(mine) &&
                 (self_bound || !hwloc_bitmap_isincluded(all, mine));
    }
    if (mine && !*bound)
        hwloc_bitmap_copy(mine, all);
    for (int c = 0; mine && part && c < t->cores && n < max; c++) {
        hwloc_obj_t core = core_obj(t, c);
        if (!core || !hwloc_bitmap_intersects(core->cpuset, mine))
            continue;
        hwloc_bitmap_and(part, core->cpuset, mine);
        cores[n].shared = 0;
        if (hwloc_bitmap_list_snprintf(cores[n].cpulist, sizeof cores[n].cpulist, part) < 0)
            cores[n].cpulist[0] = '\0';
        n++;
    }
    hwloc_bitmap_free(mine);
    hwloc_bitmap_free(part);
    if (n == 0) { /* nothing readable: one core, not bound */
        cores[0].cpulist[0] = '\0';
        cores[0].shared = 0;
        n = 1;
    }
    return n;
}

void rt_topology_thread_binding(const rt_topology *t, rt_binding *out)
{
    out->cpulist[0] = '\0';
    out->shared = 0;
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    if (mine && get_cpubind(t, mine) == 0) {
        int n = hwloc_bitmap_list_snprintf(out->cpulist, sizeof out->cpulist, mine);
        if (n < 0 || (size_t)n >= sizeof out->cpulist)
            out->cpulist[0] = '\0';
    }
    hwloc_bitmap_free(mine);
}

/* Writes the logical indexes of the cores that meet the PUs of cpulist into buf. */
static void core_list(const rt_topology *t, const char *cpulist, char *buf, size_t len)
{
    buf[0] = '\0';
    hwloc_bitmap_t pus = hwloc_bitmap_alloc(), cores = hwloc_bitmap_alloc();
    if (pus && cores && hwloc_bitmap_list_sscanf(pus, cpulist) == 0) {
        for (int c = 0; c < t->cores; c++) {
            hwloc_obj_t core = core_obj(t, c);
            if (core && hwloc_bitmap_intersects(core->cpuset, pus))
                hwloc_bitmap_set(cores, (unsigned)c);
        }
        hwloc_bitmap_list_snprintf(buf, len, cores);
    }
    hwloc_bitmap_free(pus);
    hwloc_bitmap_free(cores);
}

void rt_topology_print(const rt_topology *t, FILE *out, int n, const rt_binding *plan,
                       const char *const *device_names)
{
    fprintf(out, "machine: %d cores, %d PUs, %d NUMA node%s\n", t->cores, t->pus, t->numa,
            t->numa == 1 ? "" : "s");
    for (int i = 0; plan && i < n; i++) {
        const char *name = device_names && device_names[i] ? device_names[i] : NULL;
        fprintf(out, "device %d", i);
        if (name)
            fprintf(out, " (%s)", name);
        if (!plan[i].cpulist[0]) {
            fprintf(out, ": not bound\n");
            continue;
        }
        char cores[sizeof plan[i].cpulist];
        core_list(t, plan[i].cpulist, cores, sizeof cores);
        fprintf(out, ": cores %s", cores);
        if (strcmp(cores, plan[i].cpulist) != 0)
            fprintf(out, " (PUs %s)", plan[i].cpulist);
        fprintf(out, "%s\n", plan[i].shared ? " [shared]" : "");
    }
}
