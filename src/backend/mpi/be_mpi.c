/* be_mpi.c: the MPI state communicators over processes need (be_mpi.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backend/mpi/be_mpi.h"

pe_status be_mpi_check(const be_procs *procs, pe_err *err)
{
    int inited = 0, level = 0, size = 0, me = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return pe_fail(err, PE_EINVAL, "comm_create_procs: MPI is not initialized; call "
                       "MPI_Init_thread(MPI_THREAD_MULTIPLE) first (pe_mpi_init)");
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        return pe_fail(err, PE_EINVAL, "comm_create_procs: MPI was initialized without "
                       "MPI_THREAD_MULTIPLE (level %d); the engine's threads call MPI",
                       level);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != procs->nprocs || me != procs->me)
        return pe_fail(err, PE_EINVAL, "comm_create_procs: procs says process %d of %d but "
                       "MPI_COMM_WORLD says %d of %d", procs->me, procs->nprocs, me, size);
    return PE_OK;
}

pe_status be_mpi_agree(MPI_Comm comm, int nprocs, int me, pe_status s, pe_err *err)
{
    /* the smallest (process, status) of a failure is the first in process order; a status
     * fits in 8 bits. No allocation: nothing here fails on one process alone. */
    int mine = s == PE_OK ? INT_MAX : me << 8 | (int)s, first = INT_MAX;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return pe_fail(err, PE_ECOMM, "MPI_Allreduce of the processes' outcomes failed");
    if (first == INT_MAX)
        return PE_OK;
    const int from = first >> 8;
    const pe_status agreed = (pe_status)(first & 0xff);
    char msg[PE_ERR_LEN];
    memcpy(msg, err->msg, sizeof msg);
    if (MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, from, comm) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "(its message was lost: MPI_Bcast failed)");
    msg[sizeof msg - 1] = '\0';
    if (from != me)
        pe_fail(err, agreed, "process %d of %d: %s", from, nprocs, msg);
    return agreed;
}
