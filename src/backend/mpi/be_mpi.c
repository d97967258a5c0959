/* be_mpi.c: the MPI state communicators over processes need (be_mpi.h). */
#include <mpi.h>

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
