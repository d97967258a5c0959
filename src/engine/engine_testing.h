/* engine_testing.h: test hooks into the engine (not part of the public API). */
#ifndef PE_ENGINE_TESTING_H
#define PE_ENGINE_TESTING_H

#include "pengine/pengine.h"

/* Makes worker `rank` fail its at_task-th task (1-based) with PE_EDEVICE, as a device
 * error would. Call before submitting. */
void en_inject_failure(pe_engine *e, int rank, long at_task);

/* The replicas start at most n more steps (the one in flight comes back), so that a test
 * can submit or cancel sequences that no step moves meanwhile; n < 0: no limit (the
 * default). */
void en_allow_steps(pe_engine *e, long n);

/* The sequences replica d holds as the clients' routing sees them: published, plus routed
 * there since. */
int en_replica_sequences(pe_engine *e, int d);

/* MPI builds (test_mpi_grids): a process other than 0 sends process 0 one more control
 * message of e's (a beat), as one late on the network would be: call it once process 0 has
 * destroyed e, before destroying e here. Every later engine must drop it and lose none of
 * its own messages. PE_OK and nothing sent on process 0. */
pe_status en_send_late_message(pe_engine *e);

#endif
