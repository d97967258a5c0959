/* backend_select.h: the decisions of backend.c as plain functions a test can drive:
 * which backend a kind selects among given ops tables, and which collective path a
 * device list gets (NCCL, or the in-process peer path when a GPU appears twice).
 */
#ifndef PE_BACKEND_SELECT_H
#define PE_BACKEND_SELECT_H

#include "backend/backend.h"

/* be_select with the two candidate tables given: host must not be NULL; cuda is NULL when
 * pengine was built without CUDA. be_select(kind, ...) is
 * be_select_among(be_host_ops(), be_cuda_ops(), kind, ...). */
pe_status be_select_among(const be_ops *host, const be_ops *cuda, pe_backend_kind kind,
                          const be_ops **out, char *notice, size_t notice_len, pe_err *err);

/* How the ranks of one communicator talk. */
typedef enum be_comm_path {
    BE_COMM_HOST = 0, /* host backend: in-process shared memory */
    BE_COMM_NCCL,     /* CUDA, every device distinct: NCCL (ncclCommInitAll) */
    BE_COMM_PEER      /* CUDA, a device appears twice: in-process peer copies */
} be_comm_path;

/* The path for ranks on ids(n) of a backend of this kind. NCCL refuses a device that
 * appears twice in one communicator ("Duplicate GPU detected"), so a repeated id selects
 * the peer path. `shared` is 1 when a GPU of the list also runs workers outside this
 * group (the world's device list repeats it): NCCL kernels of two communicators on one
 * GPU, issued by different threads in no common order, can deadlock, while the peer path
 * never blocks on the GPU; so shared selects the peer path too. force_peer (a debugging
 * knob: PE_CUDA_COMM=peer) selects it always. *repeated (if not NULL) gets the first id
 * that appears twice in ids, or -1. */
be_comm_path be_comm_path_for(pe_backend_kind kind, const int *ids, int n, int force_peer,
                              int shared, int *repeated);

/* 1 when the environment asks for the peer path on every CUDA device list
 * (PE_CUDA_COMM=peer), to test it across distinct GPUs. */
int be_comm_force_peer(void);

/* "nccl", "peer", "host" */
const char *be_comm_path_name(be_comm_path p);

/* One line for a run's report, e.g. "collectives: in-process peer path (device 0 appears
 * twice in the device list; NCCL refuses a repeated GPU)". Returns buf. */
char *be_comm_path_describe(pe_backend_kind kind, const int *ids, int n, char *buf,
                            size_t len);

#endif
