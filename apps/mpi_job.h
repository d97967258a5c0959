/* mpi_job.h: the command as one process of an MPI job (mpirun -np N pengine generate|serve|
 * chat ...; docs/multinode.md). Every process parses the same command line and creates and
 * loads the same engine; process 0 runs the command, the others follow its steps. Only
 * process 0 reads the prompts and the tokenizer (they may exist only on its node); the
 * others read the model alone. */
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
/* Before the engine, after process 0 read what only it reads (the prompts, the tokenizer):
 * every process passes its outcome rc (an exit code) and gets the job's, so that a failure
 * on process 0 stops every process instead of leaving them waiting in the engine's creation.
 * CLI_OK when every process is ready; else the failed process keeps its rc (it printed why)
 * and the others print that it failed and return the same kind of exit code. In one
 * process: rc. */
int cli_mpi_agree(int rc);

#endif
