/* procs_none.c: procs.h in a build without MPI: every engine is one process, and
 * pe_config.mpi says how to get MPI. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

#if !PE_HAVE_MPI

pe_status pe_mpi_init(int *argc, char ***argv, int *nprocs, int *me)
{
    (void)argc;
    (void)argv;
    *nprocs = 1;
    *me = 0;
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size && atoi(size) > 1) {
        pe_set_last_error("started by mpirun with several processes, but this pengine was "
                          "built without MPI; install libopenmpi-dev (scripts/install-deps.sh) "
                          "and rebuild (PE_WITH_MPI)");
        return PE_EINVAL;
    }
    return PE_OK;
}

void pe_mpi_finalize(void) {}
pe_status pe_mpi_agree(pe_status s) { return s; }

pe_status en_procs_init(pe_engine *e, pe_err *err)
{
    e->procs.n = 1;
    e->procs.me = 0;
    if (e->cfg.mpi)
        return pe_fail(err, PE_EINVAL, "pe_config.mpi: this pengine was built without MPI; "
                       "install libopenmpi-dev (scripts/install-deps.sh) and rebuild with "
                       "-DPE_WITH_MPI=ON");
    return PE_OK;
}

pe_status en_procs_same_backend(pe_engine *e, pe_err *err)
{
    (void)e, (void)err;
    return PE_OK;
}

pe_status en_procs_layout(pe_engine *e, pe_err *err)
{
    (void)err;
    e->procs.local = e->world;
    e->procs.first = 0;
    e->procs.node_rank = 0;
    e->procs.node_procs = 1;
    memcpy(e->devices, e->cfg.devices, (size_t)e->world * sizeof *e->devices);
    return PE_OK;
}

pe_status en_procs_agree(pe_engine *e, pe_status s, pe_err *err)
{
    (void)e;
    (void)err;
    return s;
}

pe_status en_procs_share_loaded(pe_engine *e, pe_err *err) { return (void)e, (void)err, PE_OK; }
pe_status en_procs_start(pe_engine *e, pe_err *err) { return (void)e, (void)err, PE_OK; }

pe_status en_procs_send_step(pe_engine *e, const en_worker *w, const en_step *st)
{
    (void)e, (void)w, (void)st;
    return PE_EINTERNAL; /* every worker is local */
}

void en_procs_step_back(en_worker *w, en_step *st) { (void)w, (void)st; }
void en_procs_fail(pe_engine *e, const char *msg) { (void)e, (void)msg; }
void en_procs_stop(pe_engine *e) { (void)e; }

pe_status en_procs_follow(pe_engine *e, pe_err *err)
{
    (void)e;
    return pe_fail(err, PE_EINTERNAL, "no processes to follow in a build without MPI");
}

void en_procs_destroy(pe_engine *e) { (void)e; }

#else
typedef int pe_procs_none_unused; /* MPI builds: src/engine/mpi/procs_mpi.c */
#endif
