/* cb_procs.c: comm_create_procs of the CUDA backend, NCCL across the processes of an MPI
 * job (built only with PE_HAVE_MPI).
 *
 *   1. Each process checks and prepares its own ranks (cb_comm_prepare: a GPU of its own
 *      per worker, every allocation), and the processes agree on the outcome: after this
 *      point nothing fails on one process alone but NCCL itself, which would leave the
 *      others waiting inside NCCL.
 *   2. They compare where their GPUs are (host name, boot id and PCI bus id, one
 *      MPI_Allgather): NCCL refuses a GPU twice in one communicator, but says so only from
 *      inside its initialization, on one process, as "Duplicate GPU detected"; here every
 *      process refuses alike, naming both ranks.
 *   3. Process 0 makes one ncclUniqueId and MPI_Bcast sends it, with process 0's status.
 *   4. Each process joins its own ranks (cb_comm_join: ncclCommInitRank, one NCCL group
 *      call); the groups come later from ncclCommSplit (cb_comm_split), every process
 *      splitting its ranks in the same order.
 *
 * The MPI calls are blocking collectives on a private duplicate of MPI_COMM_WORLD: every
 * process makes its comm_create_procs at the same point (the engine agrees first), and a
 * process that dies in between is MPI's to report (mpirun ends the job).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend/cuda/cb_comm.h"
#include "backend/mpi/be_mpi.h"

enum { WHERE_LEN = MPI_MAX_PROCESSOR_NAME + 80 }; /* "host boot-id bus-id" */

/* What process 0 sends to the others: its status, its message, and the id. */
typedef struct id_msg {
    int32_t status;
    char msg[PE_ERR_LEN];
    cb_nccl_id id;
} id_msg;

/* This machine: its host name and boot id (/proc/sys/kernel/random/boot_id, as NCCL
 * identifies a host), so that two nodes or containers that share a name differ. */
static void this_machine(char *buf, size_t len)
{
    char host[MPI_MAX_PROCESSOR_NAME] = "", boot[64] = "";
    int n = 0;
    MPI_Get_processor_name(host, &n);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(buf, len, "%s%s%s", host, *boot ? " boot " : "", boot);
}

/* where(n, WHERE_LEN): "host boot-id bus-id" of every rank's GPU, from every process
 * (this process's `per` ranks start at lo, its own row written here first). */
static pe_status gather_where(MPI_Comm comm, be_device *const *devs, int lo, int per,
                              char *where, pe_err *err)
{
    char machine[WHERE_LEN - 32];
    this_machine(machine, sizeof machine);
    for (int i = 0; i < per; i++) {
        char bus[32] = "?";
        if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, devs[lo + i]->id) != cudaSuccess)
            snprintf(bus, sizeof bus, "device %d", devs[lo + i]->id);
        snprintf(where + (size_t)(lo + i) * WHERE_LEN, WHERE_LEN, "%s, GPU %s", machine, bus);
    }
    int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, where, per * WHERE_LEN, MPI_CHAR,
                           comm);
    return rc == MPI_SUCCESS ? PE_OK
                             : pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Allgather of "
                                       "the GPUs' places failed (MPI error %d)", rc);
}

/* PE_EINVAL when two ranks of where(n, WHERE_LEN) sit on one GPU (the same on every
 * process, since every process has the same table). */
static pe_status check_distinct(const char *where, int n, int per, pe_err *err)
{
    for (int r = 0; r < n; r++)
        for (int q = 0; q < r; q++) {
            const char *at = where + (size_t)r * WHERE_LEN;
            if (strcmp(where + (size_t)q * WHERE_LEN, at))
                continue;
            if (q / per == r / per) /* cb_comm_prepare refused it already; kept exact */
                return pe_fail(err, PE_EINVAL, "ranks %d and %d of process %d are on the "
                               "same GPU (%s); give each worker of a process its own GPU",
                               q, r, r / per, at);
            return pe_fail(err, PE_EINVAL,
                           "rank %d (process %d) and rank %d (process %d) are on the same GPU "
                           "(%s), but NCCL needs a GPU of its own per rank across processes; "
                           "give each process different GPUs (--gpus, or CUDA_VISIBLE_DEVICES "
                           "per local rank), or use --backend host",
                           q, q / per, r, r / per, at);
        }
    return PE_OK;
}

/* id on every process: made on process 0 and broadcast with its status (a message on the
 * stack: nothing here fails on one process alone before the broadcast). */
static pe_status share_id(MPI_Comm comm, int me, cb_nccl_id *id, pe_err *err)
{
    id_msg m;
    memset(&m, 0, sizeof m);
    if (me == 0) {
        pe_err e0 = {{0}};
        m.status = cb_nccl_new_id(&m.id, &e0);
        snprintf(m.msg, sizeof m.msg, "%s", e0.msg);
    }
    int rc = MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, 0, comm);
    if (rc != MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Bcast of the NCCL id failed "
                       "(MPI error %d)", rc);
    if (m.status != PE_OK)
        return pe_fail(err, (pe_status)m.status, "%s%s", me ? "process 0: " : "", m.msg);
    *id = m.id;
    return PE_OK;
}

pe_status cb_comm_create_procs(be_device *const *devs, int n, const be_procs *procs,
                               be_comm **out, pe_err *err)
{
    pe_status s = out ? be_procs_check(devs, n, procs, err)
                      : pe_fail(err, PE_EINVAL, "comm_create_procs: NULL out");
    if (s != PE_OK)
        return s;
    for (int r = 0; r < n; r++)
        out[r] = NULL;
    if (procs->nprocs == 1) /* no other process: NCCL or the peer path, as comm_create */
        return cb_comm_create(devs, n, out, err);
    if ((s = be_mpi_check(procs, err)) != PE_OK)
        return s;
    int P = procs->nprocs, me = procs->me, per = n / P;
    MPI_Comm comm;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Comm_dup failed (MPI error %d)",
                       rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    /* 1. everything that can fail here alone, then the agreement */
    cb_group *g = NULL;
    char *where = calloc((size_t)n, WHERE_LEN);
    s = where ? cb_comm_prepare(devs, n, &g, err)
              : pe_fail(err, PE_ENOMEM, "comm_create_procs: out of host memory");
    s = be_mpi_agree(comm, P, me, s, err);
    /* 2. the GPUs' places; 3. the id */
    if (s == PE_OK)
        s = gather_where(comm, devs, me * per, per, where, err);
    if (s == PE_OK)
        s = check_distinct(where, n, per, err);
    cb_nccl_id id;
    if (s == PE_OK)
        s = share_id(comm, me, &id, err);
    free(where);
    MPI_Comm_free(&comm);
    /* 4. NCCL */
    if (s != PE_OK) {
        cb_comm_unprepare(g);
        return s;
    }
    return cb_comm_join(g, &id, out, err);
}
