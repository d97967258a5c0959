/* bench_collectives.c: host all-reduce and all-gather bandwidth with 2 ranks (threads),
 * 4 KiB .. 64 MiB, against memcpy bandwidth measured in the same run as the ceiling.
 *
 * Figures as nccl-tests defines them: algbw = bytes / time; busbw = algbw * 2(n-1)/n for
 * all-reduce and algbw * (n-1)/n for all-gather, where bytes is the buffer size
 * (all-gather: the total output). memcpy: one thread copying `bytes` between two
 * buffers. Each figure is the median of several repetitions.
 *
 *   bench_collectives [--quick] [--json FILE]
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "runtime/clock.h"

#define NRANKS 2
#define MAXREPS 9

typedef enum { OP_ALLREDUCE, OP_ALLGATHER } op_kind;

typedef struct shared {
    const be_ops *ops;
    be_device *devs[NRANKS];
    be_comm *comms[NRANKS];
    pthread_barrier_t pb;
    int cpus[NRANKS]; /* core each rank is bound to, -1 = unbound */
    /* the current measurement, set by the main thread between pb waits */
    op_kind op;
    size_t bytes; /* all-reduce: buffer size; all-gather: total output size */
    int iters;
    int stop;
    double seconds; /* rank 0's time for iters operations */
    pe_status status[NRANKS];
} shared;

typedef struct rank_arg {
    shared *sh;
    int rank;
} rank_arg;

static void bind_to(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    shared *sh = a->sh;
    const be_ops *ops = sh->ops;
    int r = a->rank;
    bind_to(sh->cpus[r]);
    pe_err err = {{0}};
    if (ops->open(r, &sh->devs[r], &err) != PE_OK)
        sh->status[r] = PE_ENODEV;
    pthread_barrier_wait(&sh->pb);
    if (r == 0 && sh->status[0] == PE_OK && sh->status[1] == PE_OK)
        sh->status[0] = ops->comm_create(sh->devs, NRANKS, sh->comms, &err);
    pthread_barrier_wait(&sh->pb);
    float *send = NULL, *recv = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_barrier_wait(&sh->pb); /* a new measurement is set up, or stop */
        if (sh->stop)
            break;
        size_t out = sh->bytes / sizeof(float); /* elements of the output */
        size_t count = sh->op == OP_ALLREDUCE ? out : out / NRANKS;
        if (out > cap) {
            free(send);
            free(recv);
            send = aligned_alloc(64, out * sizeof(float));
            recv = aligned_alloc(64, out * sizeof(float));
            cap = send && recv ? out : 0;
        }
        pe_status s = cap ? PE_OK : PE_ENOMEM;
        for (size_t i = 0; i < out && s == PE_OK; i++)
            send[i] = recv[i] = (float)(i % 1000) * 0.001f; /* touched: no page faults timed */
        if (s == PE_OK)
            s = ops->barrier(sh->comms[r]);
        uint64_t t0 = rt_now_ns();
        for (int it = 0; it < sh->iters && s == PE_OK; it++)
            s = sh->op == OP_ALLREDUCE ? ops->allreduce_sum(sh->comms[r], send, recv, count)
                                       : ops->allgather(sh->comms[r], send, recv, count);
        if (s == PE_OK)
            s = ops->barrier(sh->comms[r]);
        uint64_t t1 = rt_now_ns();
        if (r == 0)
            sh->seconds = (double)(t1 - t0) * 1e-9;
        sh->status[r] = s;
        pthread_barrier_wait(&sh->pb); /* measurement done */
    }
    free(send);
    free(recv);
    pthread_barrier_wait(&sh->pb);
    if (r == 0 && sh->comms[0])
        ops->comm_destroy(sh->comms, NRANKS);
    pthread_barrier_wait(&sh->pb);
    if (sh->devs[r])
        ops->close(sh->devs[r]);
    return NULL;
}

/* Seconds per operation, median over reps; iters sized to ~target seconds per rep. */
static double measure(shared *sh, op_kind op, size_t bytes, int reps, double target)
{
    double t[MAXREPS];
    sh->op = op;
    sh->bytes = bytes;
    sh->iters = 1;
    pthread_barrier_wait(&sh->pb); /* calibrate with one op */
    pthread_barrier_wait(&sh->pb);
    double one = sh->seconds > 1e-9 ? sh->seconds : 1e-9;
    int iters = (int)(target / one);
    sh->iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
    for (int k = 0; k < reps; k++) {
        pthread_barrier_wait(&sh->pb);
        pthread_barrier_wait(&sh->pb);
        t[k] = sh->seconds / sh->iters;
    }
    return bu_median(t, (size_t)reps);
}

static double memcpy_seconds(size_t bytes, int reps, double target)
{
    char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    uint64_t t0 = rt_now_ns();
    memcpy(b, a, bytes);
    double one = (double)(rt_now_ns() - t0) * 1e-9;
    int iters = (int)(target / (one > 1e-9 ? one : 1e-9));
    iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
    double t[MAXREPS];
    for (int k = 0; k < reps; k++) {
        t0 = rt_now_ns();
        for (int i = 0; i < iters; i++) {
            memcpy(i & 1 ? a : b, i & 1 ? b : a, bytes);
            __asm__ __volatile__("" : : "r"(a), "r"(b) : "memory"); /* keep every copy */
        }
        t[k] = (double)(rt_now_ns() - t0) * 1e-9 / iters;
    }
    free(a);
    free(b);
    return bu_median(t, (size_t)reps);
}

/* The first two CPUs this process may run on, or -1. */
static void pick_cpus(int cpus[NRANKS])
{
    cpu_set_t set;
    cpus[0] = cpus[1] = -1;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    int k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < NRANKS; c++)
        if (CPU_ISSET(c, &set))
            cpus[k++] = c;
    if (k < NRANKS)
        cpus[0] = cpus[1] = -1;
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    int reps = args.quick ? 3 : 7;
    double target = args.quick ? 0.01 : 0.05; /* seconds per repetition */
    size_t max_bytes = args.quick ? ((size_t)1 << 20) : ((size_t)64 << 20);

    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.ops = be_host_ops();
    pick_cpus(sh.cpus);
    pthread_barrier_init(&sh.pb, NULL, NRANKS + 1);
    pthread_t t[NRANKS];
    rank_arg ra[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        ra[r] = (rank_arg){&sh, r};
        pthread_create(&t[r], NULL, rank_main, &ra[r]);
    }
    pthread_barrier_wait(&sh.pb); /* devices open */
    pthread_barrier_wait(&sh.pb); /* communicator made */
    int failed = 0;
    if (sh.status[0] != PE_OK || sh.status[1] != PE_OK) {
        fprintf(stderr, "error: cannot set up 2 host ranks: %s\n",
                pe_status_str(sh.status[0] ? sh.status[0] : sh.status[1]));
        failed = 1;
    }

    cJSON *root = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "bench", "collectives");
    cJSON_AddStringToObject(root, "backend", "host");
    cJSON_AddNumberToObject(root, "ranks", NRANKS);
    cJSON_AddNumberToObject(root, "cpu_rank0", sh.cpus[0]);
    cJSON_AddNumberToObject(root, "cpu_rank1", sh.cpus[1]);
    cJSON_AddItemToObject(root, "results", rows);

    printf("host collectives, %d ranks (threads on cpus %d and %d), median of %d\n", NRANKS,
           sh.cpus[0], sh.cpus[1], reps);
    printf("%-10s %10s %10s %12s %12s %12s %8s\n", "op", "bytes", "time_us", "algbw_GB/s",
           "busbw_GB/s", "memcpy_GB/s", "bus/mem");
    for (size_t bytes = 4096; bytes <= max_bytes && !failed; bytes *= 4) {
        double mc = memcpy_seconds(bytes, reps, target);
        double mem_bw = mc > 0 ? (double)bytes / mc * 1e-9 : 0;
        for (int o = 0; o < 2; o++) {
            op_kind op = o == 0 ? OP_ALLREDUCE : OP_ALLGATHER;
            double sec = measure(&sh, op, bytes, reps, target);
            if (sh.status[0] != PE_OK || sh.status[1] != PE_OK) {
                fprintf(stderr, "error: %s failed: %s\n", o ? "allgather" : "allreduce",
                        pe_status_str(sh.status[0] ? sh.status[0] : sh.status[1]));
                failed = 1;
                break;
            }
            double alg = (double)bytes / sec * 1e-9;
            double factor = op == OP_ALLREDUCE ? 2.0 * (NRANKS - 1) / NRANKS
                                               : (double)(NRANKS - 1) / NRANKS;
            double bus = alg * factor;
            const char *name = op == OP_ALLREDUCE ? "allreduce" : "allgather";
            printf("%-10s %10zu %10.2f %12.2f %12.2f %12.2f %8.2f\n", name, bytes, sec * 1e6, alg,
                   bus, mem_bw, mem_bw > 0 ? bus / mem_bw : 0);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "op", name);
            cJSON_AddNumberToObject(row, "bytes", (double)bytes);
            cJSON_AddNumberToObject(row, "time_us", sec * 1e6);
            cJSON_AddNumberToObject(row, "algbw_GBps", alg);
            cJSON_AddNumberToObject(row, "busbw_GBps", bus);
            cJSON_AddNumberToObject(row, "memcpy_GBps", mem_bw);
            cJSON_AddNumberToObject(row, "busbw_over_memcpy", mem_bw > 0 ? bus / mem_bw : 0);
            cJSON_AddItemToArray(rows, row);
        }
    }
    sh.stop = 1;
    pthread_barrier_wait(&sh.pb); /* release the ranks from their loop */
    pthread_barrier_wait(&sh.pb); /* their buffers are freed */
    pthread_barrier_wait(&sh.pb); /* the communicator is destroyed */
    for (int r = 0; r < NRANKS; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&sh.pb);
    int rc = failed ? 1 : 0;
    if (args.json_path && bu_write_json(root, args.json_path) != 0)
        rc = 1;
    cJSON_Delete(root);
    return rc;
}
