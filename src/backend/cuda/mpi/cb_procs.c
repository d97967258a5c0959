/* cb_procs.c: comm_create_procs of the CUDA backend, NCCL across the processes of an MPI
 * job (built only with PE_HAVE_MPI).
 *
 *   1. The processes compare where their GPUs are (host name and PCI bus id, one
 *      MPI_Allgather): NCCL refuses a GPU twice in one communicator, but says so only from
 *      inside its initialization, on one process, as "Duplicate GPU detected"; here every
 *      process refuses alike, naming both ranks.
 *   2. Process 0 makes one ncclUniqueId and MPI_Bcast sends it, with process 0's status,
 *      so that a failure there fails everyone instead of stranding them.
 *   3. Each process joins its own ranks (cb_comm_join: ncclCommInitRank, one NCCL group
 *      call); the groups come later from ncclCommSplit (cb_comm_split), every process
 *      splitting its ranks in the same order.
 *
 * The MPI calls here are blocking collectives on a private duplicate of MPI_COMM_WORLD:
 * every process makes its comm_create_procs at the same point (the engine agrees first),
 * and a process that dies in between is MPI's to report (mpirun ends the job).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend/cuda/cb_comm.h"
#include "backend/mpi/be_mpi.h"

enum { WHERE_LEN = MPI_MAX_PROCESSOR_NAME + 32 }; /* "host bus-id" */

/* What process 0 sends to the others: its status, its message, and the id. */
typedef struct id_msg {
    int32_t status;
    char msg[PE_ERR_LEN];
    cb_nccl_id id;
} id_msg;

/* where(n, WHERE_LEN): "host bus-id" of every rank's GPU, gathered from every process
 * (this process's `per` ranks start at lo). */
static pe_status gather_where(MPI_Comm comm, be_device *const *devs, int lo, int per,
                              char *where, pe_err *err)
{
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(host, &len);
    char *mine = calloc((size_t)per, WHERE_LEN);
    if (!mine)
        return pe_fail(err, PE_ENOMEM, "comm_create_procs: out of host memory");
    for (int i = 0; i < per; i++) {
        char bus[32] = "?";
        if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, devs[lo + i]->id) != cudaSuccess)
            snprintf(bus, sizeof bus, "device %d", devs[lo + i]->id);
        snprintf(mine + (size_t)i * WHERE_LEN, WHERE_LEN, "%s %s", host, bus);
    }
    int rc = MPI_Allgather(mine, per * WHERE_LEN, MPI_CHAR, where, per * WHERE_LEN, MPI_CHAR,
                           comm);
    free(mine);
    return rc == MPI_SUCCESS ? PE_OK
                             : pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Allgather of "
                                       "the GPUs' places failed (MPI error %d)", rc);
}

/* PE_EINVAL when two ranks of where(n, WHERE_LEN) sit on one GPU (the same on every
 * process, since every process has the same table). */
static pe_status check_distinct(const char *where, int n, int per, pe_err *err)
{
    for (int r = 0; r < n; r++)
        for (int q = 0; q < r; q++)
            if (!strcmp(where + (size_t)q * WHERE_LEN, where + (size_t)r * WHERE_LEN))
                return pe_fail(err, PE_EINVAL,
                               "rank %d (process %d) and rank %d (process %d) are on the same "
                               "GPU (%s), but NCCL needs a GPU of its own per rank across "
                               "processes; give each process different GPUs (--gpus, or "
                               "CUDA_VISIBLE_DEVICES per local rank), or use --backend host",
                               q, q / per, r, r / per, where + (size_t)r * WHERE_LEN);
    return PE_OK;
}

/* id on every process: made on process 0 and broadcast with its status. */
static pe_status share_id(MPI_Comm comm, int me, cb_nccl_id *id, pe_err *err)
{
    id_msg *m = calloc(1, sizeof *m);
    if (!m)
        return pe_fail(err, PE_ENOMEM, "comm_create_procs: out of host memory");
    if (me == 0) {
        pe_err e0 = {{0}};
        m->status = cb_nccl_new_id(&m->id, &e0);
        snprintf(m->msg, sizeof m->msg, "%s", e0.msg);
    }
    int rc = MPI_Bcast(m, (int)sizeof *m, MPI_BYTE, 0, comm);
    pe_status s = PE_OK;
    if (rc != MPI_SUCCESS)
        s = pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Bcast of the NCCL id failed "
                    "(MPI error %d)", rc);
    else if (m->status != PE_OK)
        s = pe_fail(err, (pe_status)m->status, "%s%s", me ? "process 0: " : "", m->msg);
    else
        *id = m->id;
    free(m);
    return s;
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
    int per = n / procs->nprocs, lo = procs->me * per;
    MPI_Comm comm;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "comm_create_procs: MPI_Comm_dup failed (MPI error %d)",
                       rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    char *where = calloc((size_t)n, WHERE_LEN);
    cb_nccl_id id;
    s = where ? gather_where(comm, devs, lo, per, where, err)
              : pe_fail(err, PE_ENOMEM, "comm_create_procs: out of host memory");
    if (s == PE_OK)
        s = check_distinct(where, n, per, err);
    /* every process takes part in the broadcast, even one whose gather failed, so that
     * none waits in it for ever */
    pe_status s_id = share_id(comm, procs->me, &id, s == PE_OK ? err : &(pe_err){{0}});
    if (s == PE_OK)
        s = s_id;
    free(where);
    MPI_Comm_free(&comm);
    return s == PE_OK ? cb_comm_join(devs, n, &id, out, err) : s;
}
