/* be_mpi.h: what both backends' communicators over MPI processes check before they talk
 * (built only with PE_HAVE_MPI). */
#ifndef PE_BACKEND_MPI_BE_MPI_H
#define PE_BACKEND_MPI_BE_MPI_H

#include <mpi.h>

#include "backend/backend.h"

/* PE_OK when MPI is initialized with MPI_THREAD_MULTIPLE (the engine's threads call MPI:
 * the host backend's ranks, the control threads) and MPI_COMM_WORLD agrees with procs;
 * else PE_EINVAL saying what to call or fix. */
pe_status be_mpi_check(const be_procs *procs, pe_err *err);

/* Every process's outcome s of a phase, over comm (nprocs processes, this one me): the
 * first failure in process order becomes every process's, with its message ("process K of
 * N: ..." on the others), so that all stop or all go on. A collective: every process of
 * comm calls it. */
pe_status be_mpi_agree(MPI_Comm comm, int nprocs, int me, pe_status s, pe_err *err);

#endif
