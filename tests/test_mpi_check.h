/* test_mpi_check.h: CHECK for the tests mpirun runs. A failed check prints what and where,
 * with the process, and ends the whole job (MPI_Abort, exit code 1): the other processes
 * would otherwise wait in a collective forever. */
#ifndef PE_TEST_MPI_CHECK_H
#define PE_TEST_MPI_CHECK_H

#include <mpi.h>
#include <stdio.h>

static inline int tmc_process(void)
{
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    return me;
}

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "[process %d] %s:%d: check failed: %s: ", tmc_process(),      \
                    __FILE__, __LINE__, #cond);                                           \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
        }                                                                                 \
    } while (0)

#endif
