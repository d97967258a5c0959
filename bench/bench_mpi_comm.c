/* bench_mpi_comm.c: the host communicator across 2 MPI processes (one rank each, so every
 * collective is one MPI exchange between the two leaders), against plain MPI calls on
 * MPI_COMM_WORLD in the same run:
 *   allreduce_sum of 768 floats (a decode step's hidden state) and of 1 MiB (262144
 *   floats): microseconds per call, median and best of several batches;
 *   send/recv of 16 MiB: one way, rank 0 sends, rank 1 receives and answers with one
 *   float; bandwidth = bytes / (time to the answer), median and best.
 *
 *   mpirun -np 2 bench_mpi_comm [--quick] [--json FILE]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "runtime/clock.h"

#define BATCHES 7

static const be_ops *ops;
static be_device *dev;
static be_comm *comm;
static int me;

static void die(const char *what, pe_status s)
{
    fprintf(stderr, "bench_mpi_comm (process %d): %s: %s: %s\n", me, what, pe_status_str(s),
            dev ? ops->last_error(dev) : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Microseconds per all-reduce of count floats (per batch of iters), ours or MPI's. */
static void time_allreduce(size_t count, int iters, int mpi, double *us)
{
    float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
    for (size_t i = 0; i < count; i++)
        x[i] = (float)(i % 97) * 0.25f;
    for (int b = -1; b < BATCHES; b++) { /* batch -1 warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = rt_now_us();
        for (int i = 0; i < iters; i++) {
            if (mpi) {
                MPI_Allreduce(x, y, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                continue;
            }
            pe_status s = ops->allreduce_sum(comm, x, y, count);
            if (s != PE_OK)
                die("allreduce_sum", s);
        }
        if (b >= 0)
            us[b] = (rt_now_us() - t0) / iters;
    }
    free(x);
    free(y);
}

/* GB/s of one-way 16 MiB messages (per repetition), ours or MPI's. */
static void time_p2p(size_t bytes, int mpi, double *gbs)
{
    size_t count = bytes / sizeof(float);
    float *x = calloc(count, sizeof *x), ack = 0;
    for (int b = -1; b < BATCHES; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = rt_now_us();
        pe_status s = PE_OK;
        if (mpi && me == 0) {
            MPI_Send(x, (int)count, MPI_FLOAT, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(&ack, 1, MPI_FLOAT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (mpi) {
            MPI_Recv(x, (int)count, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&ack, 1, MPI_FLOAT, 0, 8, MPI_COMM_WORLD);
        } else if (me == 0) {
            if ((s = ops->send(comm, x, count, 1)) == PE_OK &&
                (s = ops->synchronize(dev)) == PE_OK)
                s = ops->recv(comm, &ack, 1, 1);
        } else {
            if ((s = ops->recv(comm, x, count, 0)) == PE_OK &&
                (s = ops->send(comm, &ack, 1, 0)) == PE_OK)
                s = ops->synchronize(dev);
        }
        if (s != PE_OK)
            die("send/recv", s);
        if (b >= 0)
            gbs[b] = (double)bytes / ((rt_now_us() - t0) * 1e3);
    }
    free(x);
}

int main(int argc, char **argv)
{
    int level = 0, nprocs = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    bu_args args;
    bu_parse_args(argc, argv, &args);
    if (nprocs != 2 || level < MPI_THREAD_MULTIPLE) {
        if (me == 0)
            fprintf(stderr, "bench_mpi_comm: run it with mpirun -np 2 (got %d processes, "
                    "thread level %d)\n", nprocs, level);
        MPI_Finalize();
        return 2;
    }
    ops = be_host_ops();
    pe_err err = {{0}};
    be_device *devs[2] = {NULL, NULL};
    be_comm *comms[2] = {NULL, NULL};
    be_procs procs = {.nprocs = 2, .me = me};
    if (ops->open(0, &dev, &err) != PE_OK)
        die(err.msg, PE_ENODEV);
    ops->set_compute_threads(dev, 1);
    devs[me] = dev;
    pe_status s = ops->comm_create_procs(devs, 2, &procs, comms, &err);
    if (s != PE_OK)
        die(err.msg, s);
    comm = comms[me];

    int q = args.quick;
    struct { const char *name; size_t count; int iters; } ar[] = {
        {"allreduce 768 floats", 768, q ? 200 : 2000},
        {"allreduce 1 MiB", (size_t)1 << 18, q ? 5 : 40},
    };
    cJSON *root = cJSON_CreateObject();
    if (me == 0)
        printf("%-22s %8s %12s %12s\n", "2 processes", "", "median", "best");
    for (int i = 0; i < 2; i++)
        for (int mpi = 0; mpi < 2; mpi++) {
            double us[BATCHES];
            time_allreduce(ar[i].count, ar[i].iters, mpi, us);
            double best = bu_min(us, BATCHES), med = bu_median(us, BATCHES);
            if (me == 0) {
                printf("%-22s %8s %9.1f us %9.1f us\n", ar[i].name, mpi ? "MPI" : "pengine", med,
                       best);
                char key[64];
                snprintf(key, sizeof key, "%s_%s_us", mpi ? "mpi" : "pengine",
                         i == 0 ? "allreduce_768" : "allreduce_1MiB");
                cJSON_AddNumberToObject(root, key, med);
            }
        }
    for (int mpi = 0; mpi < 2; mpi++) {
        double gbs[BATCHES];
        time_p2p((size_t)16 << 20, mpi, gbs);
        double best = 0;
        for (int b = 0; b < BATCHES; b++)
            best = gbs[b] > best ? gbs[b] : best;
        double med = bu_median(gbs, BATCHES);
        if (me == 0) {
            printf("%-22s %8s %7.2f GB/s %7.2f GB/s\n", "send/recv 16 MiB", mpi ? "MPI" : "pengine",
                   med, best);
            cJSON_AddNumberToObject(root, mpi ? "mpi_p2p_16MiB_GBs" : "pengine_p2p_16MiB_GBs",
                                    med);
        }
    }
    if (me == 0 && args.json_path)
        bu_write_json(root, args.json_path);
    cJSON_Delete(root);
    ops->comm_destroy(comms, 2);
    ops->close(dev);
    MPI_Finalize();
    return 0;
}
