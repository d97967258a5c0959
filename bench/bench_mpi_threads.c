/* bench_mpi_threads.c: MPI_THREAD_MULTIPLE (every worker thread calls MPI, as pengine does)
 * against one progress thread per process (the workers hand their messages to it), on the
 * traffic of the grid across 2 processes (bench/bench_mpi.sh runs it, mpirun -np 2).
 *
 * One or two worker threads a process (argv[2]; 2 by default), each in a ping-pong with its
 * twin in the other process, at once: 3 KiB (a TP all-reduce of 768 floats at batch 1) and 16 KiB (a PP activation of
 * 512 floats at batch 8). The figure is the median round trip. The process runs one way:
 *   multiple  MPI_Init_thread(MPI_THREAD_MULTIPLE); each worker posts and tests its own
 *             requests;
 *   progress  MPI_Init_thread(MPI_THREAD_SERIALIZED), which lets the library drop its
 *             locks; only a progress thread calls MPI: a worker hands it a message through
 *             a slot and spins until it is done.
 * Usage: mpirun -np 2 bench_mpi_threads multiple|progress [1|2]
 */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { WORKERS = 2, REPS = 2000, WARM = 100, NSIZES = 2 };
static int nworkers = WORKERS; /* argv[2]: 1 or 2 */
static const int SIZES[NSIZES] = {3 << 10, 16 << 10};

static int me, progress_mode;

/* A worker's request to the progress thread: a send then a recv, or a recv then a send. */
typedef struct slot {
    _Atomic int state; /* 0 idle, 1 posted, 2 done */
    char *buf;
    int bytes, tag, send_first;
} slot;

static slot slots[WORKERS];
static _Atomic int quit;

/* One round trip of worker w: process 0 sends first, process 1 answers. */
static void round_trip_direct(char *buf, int bytes, int tag)
{
    MPI_Request req;
    int done = 0;
    if (me == 0)
        MPI_Isend(buf, bytes, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &req);
    else
        MPI_Irecv(buf, bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req);
    while (!done)
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    done = 0;
    if (me == 0)
        MPI_Irecv(buf, bytes, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &req);
    else
        MPI_Isend(buf, bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req);
    while (!done)
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
}

static void round_trip_handed(int w, char *buf, int bytes, int tag)
{
    slot *s = &slots[w];
    s->buf = buf;
    s->bytes = bytes;
    s->tag = tag;
    atomic_store_explicit(&s->state, 1, memory_order_release);
    while (atomic_load_explicit(&s->state, memory_order_acquire) != 2)
        sched_yield();
    atomic_store_explicit(&s->state, 0, memory_order_relaxed);
}

/* The progress thread: runs each posted round trip, several at once. */
static void *progress_main(void *arg)
{
    (void)arg;
    MPI_Request req[WORKERS];
    int step[WORKERS] = {0}; /* 0 none, 1 first half out, 2 second half out */
    for (int w = 0; w < WORKERS; w++)
        req[w] = MPI_REQUEST_NULL;
    while (!atomic_load(&quit)) {
        sched_yield(); /* its core is shared with the workers, as the waits' are */
        for (int w = 0; w < nworkers; w++) {
            slot *s = &slots[w];
            if (step[w] == 0 && atomic_load_explicit(&s->state, memory_order_acquire) == 1) {
                if (me == 0)
                    MPI_Isend(s->buf, s->bytes, MPI_BYTE, 1, s->tag, MPI_COMM_WORLD, &req[w]);
                else
                    MPI_Irecv(s->buf, s->bytes, MPI_BYTE, 0, s->tag, MPI_COMM_WORLD, &req[w]);
                step[w] = 1;
            }
            if (step[w] == 0)
                continue;
            int done = 0;
            MPI_Test(&req[w], &done, MPI_STATUS_IGNORE);
            if (!done)
                continue;
            if (step[w] == 1) {
                if (me == 0)
                    MPI_Irecv(s->buf, s->bytes, MPI_BYTE, 1, s->tag, MPI_COMM_WORLD, &req[w]);
                else
                    MPI_Isend(s->buf, s->bytes, MPI_BYTE, 0, s->tag, MPI_COMM_WORLD, &req[w]);
                step[w] = 2;
            } else {
                step[w] = 0;
                atomic_store_explicit(&s->state, 2, memory_order_release);
            }
        }
    }
    return NULL;
}

typedef struct worker_arg {
    int w, bytes;
    double median_us;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *a = p;
    char *buf = calloc((size_t)a->bytes, 1);
    static double t[WORKERS][REPS];
    for (int i = 0; i < WARM + REPS; i++) {
        double t0 = MPI_Wtime(); /* MPI_Wtime is callable from any thread at any level */
        if (progress_mode)
            round_trip_handed(a->w, buf, a->bytes, a->w);
        else
            round_trip_direct(buf, a->bytes, a->w);
        if (i >= WARM)
            t[a->w][i - WARM] = (MPI_Wtime() - t0) * 1e6;
    }
    a->median_us = bu_median(t[a->w], REPS);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    progress_mode = argc > 1 && strcmp(argv[1], "progress") == 0;
    nworkers = argc > 2 && atoi(argv[2]) == 1 ? 1 : WORKERS;
    int provided = 0, n = 0;
    MPI_Init_thread(&argc, &argv, progress_mode ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE,
                    &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (n != 2 || provided < (progress_mode ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE)) {
        if (me == 0)
            fprintf(stderr, "bench_mpi_threads: run with mpirun -np 2 (thread level %d)\n",
                    provided);
        MPI_Finalize();
        return 2;
    }
    for (int k = 0; k < NSIZES; k++) {
        /* SERIALIZED: main calls MPI only while no progress thread runs */
        MPI_Barrier(MPI_COMM_WORLD);
        pthread_t prog;
        atomic_store(&quit, 0);
        if (progress_mode)
            pthread_create(&prog, NULL, progress_main, NULL);
        pthread_t th[WORKERS];
        worker_arg args[WORKERS];
        for (int w = 0; w < nworkers; w++) {
            args[w] = (worker_arg){.w = w, .bytes = SIZES[k]};
            pthread_create(&th[w], NULL, worker_main, &args[w]);
        }
        for (int w = 0; w < nworkers; w++)
            pthread_join(th[w], NULL);
        if (progress_mode) {
            atomic_store(&quit, 1);
            pthread_join(prog, NULL);
        }
        if (me == 0)
            printf("%-9s %d worker%s a process x %5d bytes: round trip %8.1f us (median of "
                   "worker 0)\n", progress_mode ? "progress" : "multiple", nworkers,
                   nworkers == 1 ? " " : "s", SIZES[k], args[0].median_us);
    }
    MPI_Finalize();
    return 0;
}
