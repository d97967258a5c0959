/* bench_collectives.c: host all-reduce and all-gather bandwidth with 2 ranks (threads),
 * 4 KiB .. 64 MiB, against memcpy bandwidth measured in the same run as the ceiling.
 *
 * allred_ip is the all-reduce in place (send == recv), which takes the sliced algorithm.
 * Figures as nccl-tests defines them: algbw = bytes / time; busbw = algbw * 2(n-1)/n for
 * all-reduce and algbw * (n-1)/n for all-gather, where bytes is the buffer size
 * (all-gather: the total output). memcpy: one thread copying `bytes` between two
 * buffers. Each figure comes from several repetitions: the median, and the best (least
 * time), which is what the hardware can do when no other process takes the cores; the
 * busbw/memcpy ratio is given for both (best against best, median against median).
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
#define MAXREPS 15

typedef enum { OP_ALLREDUCE, OP_ALLREDUCE_IN_PLACE, OP_ALLGATHER } op_kind;
static const char *const op_names[] = {"allreduce", "allred_ip", "allgather"};

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
        size_t count = sh->op == OP_ALLGATHER ? out / NRANKS : out;
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
            s = sh->op == OP_ALLGATHER ? ops->allgather(sh->comms[r], send, recv, count)
                : sh->op == OP_ALLREDUCE
                    ? ops->allreduce_sum(sh->comms[r], send, recv, count)
                    : ops->allreduce_sum(sh->comms[r], recv, recv, count);
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

typedef struct timing {
    double median, best; /* seconds per operation */
} timing;

static timing summarize(double *t, int reps)
{
    timing r = {.best = bu_min(t, (size_t)reps)};
    r.median = bu_median(t, (size_t)reps);
    return r;
}

/* Seconds per operation over reps; iters sized to ~target seconds per rep. */
static timing measure(shared *sh, op_kind op, size_t bytes, int reps, double target)
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
    return summarize(t, reps);
}

static timing memcpy_seconds(size_t bytes, int reps, double target)
{
    char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return (timing){0, 0};
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
    return summarize(t, reps);
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
    int reps = args.quick ? 3 : MAXREPS;
    double target = args.quick ? 0.005 : 0.02; /* seconds per repetition */
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

    printf("host collectives, %d ranks (threads on cpus %d and %d), %d repetitions; "
           "GB/s = 1e9 bytes/s; med = median, best = least time\n",
           NRANKS, sh.cpus[0], sh.cpus[1], reps);
    printf("%-9s %9s %9s %9s %8s %8s %8s %8s %7s %7s\n", "op", "bytes", "us_med", "us_best",
           "bus_med", "bus_best", "mem_med", "mem_best", "r_med", "r_best");
    for (size_t bytes = 4096; bytes <= max_bytes && !failed; bytes *= 4) {
        timing mc = memcpy_seconds(bytes, reps, target);
        double mem_med = mc.median > 0 ? (double)bytes / mc.median * 1e-9 : 0;
        double mem_best = mc.best > 0 ? (double)bytes / mc.best * 1e-9 : 0;
        for (int o = 0; o < 3; o++) {
            op_kind op = (op_kind)o;
            timing tm = measure(&sh, op, bytes, reps, target);
            if (sh.status[0] != PE_OK || sh.status[1] != PE_OK) {
                fprintf(stderr, "error: %s failed: %s\n", op_names[op],
                        pe_status_str(sh.status[0] ? sh.status[0] : sh.status[1]));
                failed = 1;
                break;
            }
            double factor = op == OP_ALLGATHER ? (double)(NRANKS - 1) / NRANKS
                                               : 2.0 * (NRANKS - 1) / NRANKS;
            double alg_med = (double)bytes / tm.median * 1e-9;
            double alg_best = (double)bytes / tm.best * 1e-9;
            double bus_med = alg_med * factor, bus_best = alg_best * factor;
            double r_med = mem_med > 0 ? bus_med / mem_med : 0;
            double r_best = mem_best > 0 ? bus_best / mem_best : 0;
            const char *name = op_names[op];
            printf("%-9s %9zu %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %7.2f %7.2f\n", name, bytes,
                   tm.median * 1e6, tm.best * 1e6, bus_med, bus_best, mem_med, mem_best, r_med,
                   r_best);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "op", name);
            cJSON_AddNumberToObject(row, "bytes", (double)bytes);
            cJSON_AddNumberToObject(row, "time_us_median", tm.median * 1e6);
            cJSON_AddNumberToObject(row, "time_us_best", tm.best * 1e6);
            cJSON_AddNumberToObject(row, "algbw_GBps_median", alg_med);
            cJSON_AddNumberToObject(row, "algbw_GBps_best", alg_best);
            cJSON_AddNumberToObject(row, "busbw_GBps_median", bus_med);
            cJSON_AddNumberToObject(row, "busbw_GBps_best", bus_best);
            cJSON_AddNumberToObject(row, "memcpy_GBps_median", mem_med);
            cJSON_AddNumberToObject(row, "memcpy_GBps_best", mem_best);
            cJSON_AddNumberToObject(row, "busbw_over_memcpy_median", r_med);
            cJSON_AddNumberToObject(row, "busbw_over_memcpy_best", r_best);
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
