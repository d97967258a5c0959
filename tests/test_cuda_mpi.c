/* test_cuda_mpi.c: the CUDA backend's comm_create_procs (src/backend/cuda/mpi/cb_procs.c)
 * under mpirun, on the fake CUDA runtime and NCCL (4 fake GPUs a process, each process on
 * the same fake host, so a device id names the same bus id in every process).
 *
 * The fake NCCL lives in one process, so no communicator can be completed across two; what
 * runs here is the MPI part that precedes NCCL: the processes compare where their GPUs are
 * and refuse alike, naming both ranks, when two of them would share one GPU (what a one-GPU
 * machine gives `mpirun -np 2 pengine --backend cuda --gpus 0`), instead of one process
 * failing inside ncclCommInitRank and the others waiting there; an engine whose processes
 * chose different backends is refused on every process. One process alone makes a
 * plain communicator (the in-process path) and runs an all-reduce on it. NCCL itself across
 * processes is tested in test_cuda (nccl_across_two_simulated_processes) with the
 * processes simulated by threads.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "pengine/pengine.h"
#include "test_mpi_check.h"

static int P, ME;

/* Every process opens device `id` for its one rank and asks for a P-rank communicator. */
static pe_status create_one_rank_each(const be_ops *ops, int id, be_device **dev, be_comm **out,
                                      pe_err *err)
{
    pe_err open_err = {{0}};
    pe_status s = ops->open(id, dev, &open_err);
    CHECK(s == PE_OK, "open device %d: %s", id, open_err.msg);
    be_device *devs[64] = {0};
    devs[ME] = *dev;
    const be_procs procs = {P, ME};
    return ops->comm_create_procs(devs, P, &procs, out, err);
}

static void a_gpu_shared_by_two_processes_is_refused_by_every_process(const be_ops *ops)
{
    be_device *dev = NULL;
    be_comm *out[64] = {0};
    pe_err err = {{0}};
    pe_status s = create_one_rank_each(ops, 0, &dev, out, &err);
    CHECK(s == PE_EINVAL, "got %s: %s", pe_status_str(s), err.msg);
    CHECK(strstr(err.msg, "rank 0 (process 0) and rank 1 (process 1) are on the same GPU"),
          "the message names both ranks: %s", err.msg);
    CHECK(strstr(err.msg, "0000:19:00.0") && strstr(err.msg, "--gpus"),
          "the message names the GPU and the fix: %s", err.msg);
    for (int r = 0; r < P; r++)
        CHECK(out[r] == NULL, "no handle on a refusal (rank %d)", r);
    ops->close(dev);
    if (ME == 0)
        printf("refused on every process: %s\n", err.msg);
}

/* --backend auto picks on each node: a node without a usable GPU would take the host while
 * the others take CUDA, and their communicators' calls would not match. The engine refuses
 * the mix on every process before any communicator. */
static void mixed_backends_are_refused_by_every_process(void)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.mpi = 1;
    cfg.backend = ME == 0 ? PE_BACKEND_HOST : PE_BACKEND_CUDA;
    cfg.devices = (int[]){ME}; /* distinct GPUs (and host devices) */
    cfg.ndevices = 1;
    cfg.pp = P;
    pe_engine *e = NULL;
    pe_status s = pe_engine_create(&cfg, &e);
    CHECK(s == PE_EINVAL && e == NULL, "got %s", pe_status_str(s));
    CHECK(strstr(pe_last_error(), "process 0 runs the host backend but process 1 the cuda one") &&
              strstr(pe_last_error(), "same --backend"),
          "the message names the processes and the fix: %s", pe_last_error());
}

static void one_process_makes_a_plain_communicator(const be_ops *ops)
{
    be_device *dev = NULL;
    be_comm *out[1] = {NULL};
    pe_err err = {{0}};
    CHECK(create_one_rank_each(ops, 0, &dev, out, &err) == PE_OK, "%s", err.msg);
    float x[3] = {1.0f, 2.0f, 3.0f}, y[3] = {0};
    void *buf = NULL;
    CHECK(ops->alloc(dev, sizeof x, &buf) == PE_OK, "alloc");
    CHECK(ops->copy_h2d(dev, buf, x, sizeof x) == PE_OK, "copy_h2d");
    CHECK(ops->allreduce_sum(out[0], buf, buf, 3) == PE_OK, "%s", ops->last_error(dev));
    CHECK(ops->copy_d2h(dev, y, buf, sizeof y) == PE_OK, "copy_d2h");
    CHECK(!memcmp(x, y, sizeof x), "a one-rank sum is its input");
    ops->comm_destroy(out, 1);
    ops->free(dev, buf);
    ops->close(dev);
}

int main(int argc, char **argv)
{
    int level = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &ME);
    CHECK(P <= 64, "at most 64 processes");
    const be_ops *ops = be_cuda_ops();
    CHECK(ops && ops->comm_create_procs, "the CUDA backend spans processes in an MPI build");
    if (P == 1)
        one_process_makes_a_plain_communicator(ops);
    else {
        a_gpu_shared_by_two_processes_is_refused_by_every_process(ops);
        mixed_backends_are_refused_by_every_process();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (ME == 0)
        printf("test_cuda_mpi: %d process(es): ok\n", P);
    MPI_Finalize();
    return 0;
}
