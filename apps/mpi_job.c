/* mpi_job.c: the command's MPI job (mpi_job.h). */
#include "mpi_job.h"

#include <pengine/pengine.h>

#include "args.h"

static int nprocs = 1, me = 0;

int cli_mpi_start(int *argc, char ***argv)
{
    if (pe_mpi_init(argc, argv, &nprocs, &me) != PE_OK) {
        cli_error(pe_last_error());
        return CLI_USAGE;
    }
    return CLI_OK;
}

void cli_mpi_end(void) { pe_mpi_finalize(); }
int cli_mpi_procs(void) { return nprocs; }
int cli_mpi_me(void) { return me; }
