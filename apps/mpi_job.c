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

int cli_mpi_agree(int rc)
{
    if (nprocs == 1)
        return rc;
    /* the exit code travels as a status: a usage error as PE_EINVAL, a runtime one as PE_EIO */
    pe_status s = pe_mpi_agree(rc == CLI_OK ? PE_OK : rc == CLI_USAGE ? PE_EINVAL : PE_EIO);
    if (s == PE_OK || rc != CLI_OK)
        return rc;
    cli_error(pe_last_error());
    return s == PE_EINVAL ? CLI_USAGE : CLI_RUNTIME;
}

int cli_mpi_procs(void) { return nprocs; }
int cli_mpi_me(void) { return me; }
