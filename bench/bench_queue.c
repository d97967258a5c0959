/* bench_queue.c: the lock-free queue against a mutex + condvar bounded queue, side by side.
 *
 * Throughput: P producers push N items in all, C consumers pop until the queue is closed
 * and drained; items/s = N / (time from the start barrier to the last consumer's end).
 * Latency: ping-pong over two queues (a pinger pushes a timestamp, a ponger pops it and
 * pushes it back); the figure is round trip / 2 per hand-off, median and p99. Both
 * queues block the same way (spin briefly, then sleep), same capacity.
 *
 *   bench_queue [--quick] [--json FILE]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "runtime/clock.h"
#include "runtime/queue.h"

/* ---- the reference: a plain bounded ring under one mutex ---------------------------- */

typedef struct mx_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    void **ring; /* (cap) */
    size_t cap, head, count;
    int closed;
    int waiting_pops, waiting_pushes; /* signal only when someone waits */
} mx_queue;

static mx_queue *mx_create(size_t cap)
{
    mx_queue *q = calloc(1, sizeof *q);
    q->ring = calloc(cap, sizeof *q->ring);
    q->cap = cap;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    return q;
}

static void mx_destroy(mx_queue *q)
{
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q);
}

static pe_status mx_push(mx_queue *q, void *item)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == q->cap && !q->closed) {
        q->waiting_pushes++;
        pthread_cond_wait(&q->not_full, &q->mu);
        q->waiting_pushes--;
    }
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return PE_ECLOSED;
    }
    q->ring[(q->head + q->count++) % q->cap] = item;
    if (q->waiting_pops)
        pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return PE_OK;
}

static pe_status mx_pop(mx_queue *q, void **item)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->closed) {
        q->waiting_pops++;
        pthread_cond_wait(&q->not_empty, &q->mu);
        q->waiting_pops--;
    }
    if (q->count == 0) {
        pthread_mutex_unlock(&q->mu);
        return PE_ECLOSED;
    }
    *item = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    if (q->waiting_pushes)
        pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return PE_OK;
}

static void mx_close(mx_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

/* ---- one interface over both ---------------------------------------------------------- */

typedef struct anyq {
    int lockfree;
    rt_queue *rt;
    mx_queue *mx;
} anyq;

static anyq aq_create(int lockfree, size_t cap)
{
    anyq q = {.lockfree = lockfree};
    if (lockfree) {
        if (rt_queue_create(cap, &q.rt) != PE_OK) {
            fprintf(stderr, "error: rt_queue_create(%zu) failed\n", cap);
            exit(1);
        }
    } else {
        q.mx = mx_create(cap);
    }
    return q;
}
static void aq_destroy(anyq q) { q.lockfree ? rt_queue_destroy(q.rt) : mx_destroy(q.mx); }
static pe_status aq_push(anyq q, void *x) { return q.lockfree ? rt_queue_push(q.rt, x) : mx_push(q.mx, x); }
static pe_status aq_pop(anyq q, void **x) { return q.lockfree ? rt_queue_pop(q.rt, x) : mx_pop(q.mx, x); }
static void aq_close(anyq q) { q.lockfree ? rt_queue_close(q.rt) : mx_close(q.mx); }

/* ---- throughput ----------------------------------------------------------------------- */

typedef struct tp_arg {
    anyq q;
    uint64_t n; /* producer: items to push */
    uint64_t got;
    pthread_barrier_t *start;
} tp_arg;

static void *tp_producer(void *p)
{
    tp_arg *a = p;
    pthread_barrier_wait(a->start);
    for (uint64_t i = 1; i <= a->n; i++)
        aq_push(a->q, (void *)(uintptr_t)i);
    return NULL;
}

static void *tp_consumer(void *p)
{
    tp_arg *a = p;
    void *x;
    pthread_barrier_wait(a->start);
    while (aq_pop(a->q, &x) == PE_OK)
        a->got++;
    return NULL;
}

static double throughput(int lockfree, int np, int nc, uint64_t total, size_t cap)
{
    anyq q = aq_create(lockfree, cap);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)(np + nc + 1));
    tp_arg args[16];
    pthread_t th[16];
    for (int i = 0; i < np + nc; i++) {
        args[i] = (tp_arg){.q = q, .start = &start};
        if (i < np)
            args[i].n = total / (uint64_t)np + ((uint64_t)i < total % (uint64_t)np);
        pthread_create(&th[i], NULL, i < np ? tp_producer : tp_consumer, &args[i]);
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = rt_now_ns();
    for (int i = 0; i < np; i++)
        pthread_join(th[i], NULL);
    aq_close(q);
    uint64_t got = 0;
    for (int i = np; i < np + nc; i++) {
        pthread_join(th[i], NULL);
        got += args[i].got;
    }
    uint64_t t1 = rt_now_ns();
    if (got != total) {
        fprintf(stderr, "error: %llu of %llu items arrived\n", (unsigned long long)got,
                (unsigned long long)total);
        exit(1);
    }
    pthread_barrier_destroy(&start);
    aq_destroy(q);
    return (double)total / ((double)(t1 - t0) * 1e-9);
}

/* ---- latency: ping-pong ----------------------------------------------------------------- */

typedef struct pp_arg {
    anyq ping, pong;
    int rounds;
    double *half_rtt_ns; /* (rounds) pinger only */
    pthread_barrier_t *start;
} pp_arg;

static void *pinger(void *p)
{
    pp_arg *a = p;
    pthread_barrier_wait(a->start);
    for (int i = 0; i < a->rounds; i++) {
        void *x;
        aq_push(a->ping, (void *)(uintptr_t)rt_now_ns());
        aq_pop(a->pong, &x);
        /* the item that came back may be another pinger's: its own send time counts */
        a->half_rtt_ns[i] = (double)(rt_now_ns() - (uint64_t)(uintptr_t)x) * 0.5;
    }
    return NULL;
}

static void *ponger(void *p)
{
    pp_arg *a = p;
    void *x;
    pthread_barrier_wait(a->start);
    while (aq_pop(a->ping, &x) == PE_OK)
        aq_push(a->pong, x);
    return NULL;
}

/* npairs pingers and npairs pongers over one ping and one pong queue. */
static void latency(int lockfree, int npairs, int rounds, size_t cap, double *median,
                    double *p99)
{
    anyq ping = aq_create(lockfree, cap), pong = aq_create(lockfree, cap);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)(2 * npairs));
    pp_arg args[16];
    pthread_t th[16];
    double *samples = calloc((size_t)npairs * (size_t)rounds, sizeof *samples);
    for (int i = 0; i < 2 * npairs; i++) {
        args[i] = (pp_arg){.ping = ping, .pong = pong, .rounds = rounds, .start = &start,
                           .half_rtt_ns = samples + (size_t)(i % npairs) * (size_t)rounds};
        pthread_create(&th[i], NULL, i < npairs ? pinger : ponger, &args[i]);
    }
    for (int i = 0; i < npairs; i++)
        pthread_join(th[i], NULL);
    aq_close(ping);
    for (int i = npairs; i < 2 * npairs; i++)
        pthread_join(th[i], NULL);
    size_t n = (size_t)npairs * (size_t)rounds;
    *median = bu_quantile(samples, n, 0.5);
    *p99 = bu_quantile(samples, n, 0.99);
    free(samples);
    pthread_barrier_destroy(&start);
    aq_destroy(ping);
    aq_destroy(pong);
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct result {
    double ips[8]; /* items/s per repetition */
    double ips_median, lat_median, lat_p99;
} result;

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    const size_t cap = 1024;
    const uint64_t items = args.quick ? 200000 : 4000000;
    const int reps = args.quick ? 1 : 3;
    const int rounds = args.quick ? 5000 : 100000;
    static const int cfg[][2] = {{1, 1}, {2, 2}};
    static const char *names[] = {"mutex", "lockfree"};
    result r[2][2]; /* [config][lockfree] */

    for (int c = 0; c < 2; c++) {
        for (int rep = 0; rep < reps; rep++)
            for (int lf = 0; lf < 2; lf++) /* interleaved, so drift hits both alike */
                r[c][lf].ips[rep] = throughput(lf, cfg[c][0], cfg[c][1], items, cap);
        for (int lf = 0; lf < 2; lf++) {
            double tmp[8];
            memcpy(tmp, r[c][lf].ips, sizeof tmp);
            r[c][lf].ips_median = bu_median(tmp, (size_t)reps);
            latency(lf, cfg[c][0], rounds, cap, &r[c][lf].lat_median, &r[c][lf].lat_p99);
        }
    }

    printf("queue benchmark: capacity %zu, %llu items per run, median of %d runs; latency is\n"
           "ping-pong round trip / 2 over %d round trips per pinger\n\n",
           cap, (unsigned long long)items, reps, rounds);
    printf("%-8s %-9s %14s %14s %12s %12s\n", "config", "queue", "items/s", "(runs min-max)",
           "median ns", "p99 ns");
    for (int c = 0; c < 2; c++) {
        for (int lf = 1; lf >= 0; lf--) {
            const result *x = &r[c][lf];
            double lo = bu_min(x->ips, (size_t)reps), hi = lo;
            for (int i = 0; i < reps; i++)
                hi = x->ips[i] > hi ? x->ips[i] : hi;
            char range[64];
            snprintf(range, sizeof range, "%.2fM-%.2fM", lo * 1e-6, hi * 1e-6);
            printf("%dP%dC     %-9s %14.0f %14s %12.0f %12.0f\n", cfg[c][0], cfg[c][1],
                   names[lf], x->ips_median, range, x->lat_median, x->lat_p99);
        }
        printf("%dP%dC     ratio lock-free / mutex: items/s %.2fx, median latency %.2fx\n",
               cfg[c][0], cfg[c][1], r[c][1].ips_median / r[c][0].ips_median,
               r[c][1].lat_median / r[c][0].lat_median);
    }

    if (args.json_path) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "benchmark", "queue");
        cJSON_AddNumberToObject(root, "capacity", (double)cap);
        cJSON_AddNumberToObject(root, "items_per_run", (double)items);
        cJSON_AddNumberToObject(root, "runs", reps);
        cJSON_AddStringToObject(root, "latency", "ping-pong round trip / 2, ns");
        cJSON *res = cJSON_AddArrayToObject(root, "results");
        for (int c = 0; c < 2; c++) {
            char config[16];
            snprintf(config, sizeof config, "%dP%dC", cfg[c][0], cfg[c][1]);
            for (int lf = 1; lf >= 0; lf--) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "config", config);
                cJSON_AddStringToObject(o, "queue", names[lf]);
                cJSON_AddNumberToObject(o, "items_per_s", r[c][lf].ips_median);
                cJSON_AddItemToObject(o, "items_per_s_runs",
                                      cJSON_CreateDoubleArray(r[c][lf].ips, reps));
                cJSON_AddNumberToObject(o, "latency_median_ns", r[c][lf].lat_median);
                cJSON_AddNumberToObject(o, "latency_p99_ns", r[c][lf].lat_p99);
                cJSON_AddItemToArray(res, o);
            }
            cJSON *ratio = cJSON_CreateObject();
            cJSON_AddStringToObject(ratio, "config", config);
            cJSON_AddStringToObject(ratio, "queue", "ratio lockfree/mutex");
            cJSON_AddNumberToObject(ratio, "items_per_s",
                                    r[c][1].ips_median / r[c][0].ips_median);
            cJSON_AddNumberToObject(ratio, "latency_median",
                                    r[c][1].lat_median / r[c][0].lat_median);
            cJSON_AddItemToArray(res, ratio);
        }
        int rc = bu_write_json(root, args.json_path);
        cJSON_Delete(root);
        if (rc != 0)
            return 1;
    }
    return 0;
}
