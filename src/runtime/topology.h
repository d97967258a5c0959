/* topology.h: the machine seen by hwloc, and which cores each device's worker uses.
 *
 * A host device gets its own set of cores; devices beyond the number of cores share cores
 * round-robin (reported, not refused). A GPU's worker gets the cores near the GPU
 * (be_device_desc.cpulist, from the CUDA backend).
 */
#ifndef PE_RUNTIME_TOPOLOGY_H
#define PE_RUNTIME_TOPOLOGY_H

#include <pthread.h>
#include <stdio.h>

#include "common/error.h"

typedef struct rt_topology rt_topology;

typedef struct rt_binding {
    char cpulist[256]; /* cores in hwloc list syntax, e.g. "0-3"; "" = do not bind */
    int shared;        /* 1 when these cores are shared with another device's worker */
} rt_binding;

pe_status rt_topology_load(rt_topology **out, pe_err *err);
void rt_topology_free(rt_topology *t);

int rt_topology_cores(const rt_topology *t);      /* physical cores */
int rt_topology_pus(const rt_topology *t);        /* hardware threads */
int rt_topology_numa_nodes(const rt_topology *t); /* >= 1 */

/* Plans the cores of n workers. near[i] (may be NULL, or "" entries) is the cpulist of the
 * cores near worker i's device; NULL/"" means a host device: the cores are split evenly,
 * and round-robin once there are more workers than cores. */
pe_status rt_topology_plan(const rt_topology *t, int n, const char *const *near,
                           rt_binding *out, pe_err *err);
/* As rt_topology_plan, with `threads` cores for each host device (near NULL or "") when
 * threads > 0: worker k of those gets the next `threads` cores, round-robin once the cores
 * run out (then shared); all of them when threads >= the cores. GPU workers as before. */
pe_status rt_topology_plan_cores(const rt_topology *t, int n, const char *const *near,
                                 int threads, rt_binding *out, pe_err *err);
/* As rt_topology_plan_cores inside share `share` of `shares` of the cores this process may
 * use, unless mpirun, Slurm or taskset bound it to some already: the processes of an MPI
 * job on one node (node-local rank, their number) then do not bind to the same cores.
 * plan_cores is share 0 of 1: every core the calling thread may run on. */
pe_status rt_topology_plan_share(const rt_topology *t, int n, const char *const *near,
                                 int threads, int share, int shares, rt_binding *out,
                                 pe_err *err);

/* Binds the calling thread to b's cores (no-op for an empty cpulist). */
pe_status rt_topology_bind_self(const rt_topology *t, const rt_binding *b, pe_err *err);

/* Binds thread th (any thread of this process) to b's cores (no-op for an empty cpulist). */
pe_status rt_topology_bind_thread(const rt_topology *t, pthread_t th, const rt_binding *b,
                                  pe_err *err);

/* The cores the calling thread runs on: those of its binding, or every core this process
 * may use when it is not bound. cores[i] gets core i's PUs within the binding; returns the
 * count (at most max, >= 1). *bound = 1 when the thread was bound with
 * rt_topology_bind_self (to any set, all of the machine included), or runs on fewer PUs
 * than the process may use. A binding hwloc cannot read counts as unbound. */
int rt_topology_thread_cores(const rt_topology *t, rt_binding *cores, int max, int *bound);

/* The PUs the calling thread may run on, in out->cpulist ("" when hwloc cannot tell). */
void rt_topology_thread_binding(const rt_topology *t, rt_binding *out);

/* Prints the machine (cores, PUs, NUMA nodes) and each planned binding, for --topology. */
void rt_topology_print(const rt_topology *t, FILE *out, int n, const rt_binding *plan,
                       const char *const *device_names);

#endif
