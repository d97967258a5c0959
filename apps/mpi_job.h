/* mpi_job.h: the command as one process of an MPI job (mpirun -np N pengine generate|serve|
 * chat ...; docs/multinode.md). Every process parses the same command line and creates and
 * loads the same engine; process 0 runs the command, the others follow its steps. */
#ifndef PE_APPS_MPI_JOB_H
#define PE_APPS_MPI_JOB_H

/* Returned by a command on a process other than 0 once it has followed to the end. */
#define CLI_FOLLOWED 100

/* Starts MPI when launched by mpirun or Slurm (pe_mpi_init). CLI_OK, or CLI_USAGE with the
 * error printed. */
int cli_mpi_start(int *argc, char ***argv);
void cli_mpi_end(void);
/* The job's processes (1 when not launched by MPI) and this one. */
int cli_mpi_procs(void);
int cli_mpi_me(void);

#endif
