/* test_cuda_peer_logic.c: the CUDA backend's peer path (cb_peer.c, cb_comm.c, cb_device.c)
 * on a fake CUDA runtime (cuda_fake_runtime.c), so its host logic is checked in CI without
 * a GPU: the rendezvous, the chunking of all-reduce, in-place calls, scratch growth, the
 * cross-GPU copies, send/recv channels, synchronize waiting for receivers, abort, argument
 * mismatch, and devices closed before their communicator is destroyed.
 *
 * The fake runs every stream's work at once on the calling thread; the results then depend
 * only on the order the host logic guarantees, and a naive reference (the rank-order float
 * sum, the ranks' own data) must match bit for bit. What it cannot check is the GPU-side
 * ordering by events; test_cuda does that on a GPU. */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cb_comm.h" /* to check the path a split group took */

int cuda_fake_events_live(void);

#define MAXR 4
#define NOUT 7

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Rank q's data, scaled by rank so that the order of a float sum shows in its bits. */
static float *rank_data(size_t n, int q, size_t salt)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, salt * 1000003u + (uint64_t)q * 7919u + 1u);
    static const float scale[] = {1.0f, 1.7f, 0.3f, 7.0f};
    for (size_t i = 0; i < n; i++)
        x[i] *= scale[q % 4];
    return x;
}

/* ---- harness: a thread per rank, each opening its own (fake) device ---- */

typedef struct harness harness;
typedef void (*body_fn)(harness *h, int rank);

struct harness {
    int n;
    const int *ids;
    be_device *devs[MAXR];
    be_comm *comms[MAXR];
    pthread_barrier_t pb;
    pe_status create_status;
    body_fn body;
    size_t count;
    int close_first; /* close the devices before comm_destroy, as the engine does */
    pe_status st[MAXR], extra[MAXR];
    float *out[MAXR][NOUT];
    double ms;
    atomic_int counter;
};

typedef struct rank_arg {
    harness *h;
    int rank;
} rank_arg;

static void record(harness *h, int r, pe_status s)
{
    if (s != PE_OK && h->st[r] == PE_OK) {
        h->st[r] = s;
        print_error("rank %d: %s\n", r, h->devs[r]->err.msg);
    }
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    harness *h = a->h;
    pe_err err = {{0}};
    if (cb_open(h->ids[a->rank], &h->devs[a->rank], &err) != PE_OK)
        h->st[a->rank] = PE_ENODEV;
    pthread_barrier_wait(&h->pb);
    if (a->rank == 0) {
        int all = 1;
        for (int r = 0; r < h->n; r++)
            all &= h->devs[r] != NULL;
        h->create_status = all ? cb_comm_create(h->devs, h->n, h->comms, &err) : PE_ENODEV;
    }
    pthread_barrier_wait(&h->pb);
    if (h->create_status == PE_OK)
        h->body(h, a->rank);
    pthread_barrier_wait(&h->pb);
    if (h->close_first) {
        cb_close(h->devs[a->rank]);
        pthread_barrier_wait(&h->pb);
    }
    if (a->rank == 0 && h->create_status == PE_OK)
        cb_comm_destroy(h->comms, h->n);
    pthread_barrier_wait(&h->pb);
    if (!h->close_first)
        cb_close(h->devs[a->rank]);
    return NULL;
}

static void run_ranks(harness *h, const int *ids, int n, body_fn body, size_t count,
                      int close_first)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    h->ids = ids;
    h->body = body;
    h->count = count;
    h->close_first = close_first;
    atomic_init(&h->counter, 0);
    assert_int_equal(pthread_barrier_init(&h->pb, NULL, (unsigned)n), 0);
    pthread_t t[MAXR];
    rank_arg a[MAXR];
    for (int r = 0; r < n; r++) {
        a[r] = (rank_arg){h, r};
        assert_int_equal(pthread_create(&t[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&h->pb);
    assert_int_equal(h->create_status, PE_OK);
}

static void free_outputs(harness *h)
{
    for (int r = 0; r < MAXR; r++)
        for (int k = 0; k < NOUT; k++)
            free(h->out[r][k]);
}

/* ---- collectives against the naive reference ---- */

static void collectives_body(harness *h, int r)
{
    be_device *d = h->devs[r];
    be_comm *c = h->comms[r];
    size_t count = h->count, big = count * (size_t)h->n, bytes = big * sizeof(float);
    float *x = rank_data(big, r, count);
    void *send = NULL, *recv = NULL, *ip = NULL;
    record(h, r, cb_alloc(d, bytes, &send));
    record(h, r, cb_alloc(d, bytes, &recv));
    record(h, r, cb_alloc(d, bytes, &ip));
    for (int k = 0; k < NOUT; k++)
        h->out[r][k] = calloc(big + 1, sizeof(float));
    record(h, r, cb_copy_h2d(d, send, x, bytes));
    record(h, r, cb_copy_h2d(d, ip, x, count * sizeof(float)));
    /* 0, 1: all-reduce out of place and in place */
    record(h, r, cb_allreduce_sum(c, send, recv, count));
    record(h, r, cb_allreduce_sum(c, ip, ip, count));
    record(h, r, cb_copy_d2h(d, h->out[r][0], recv, count * sizeof(float)));
    record(h, r, cb_copy_d2h(d, h->out[r][1], ip, count * sizeof(float)));
    /* 2: reduce-scatter */
    record(h, r, cb_reduce_scatter(c, send, recv, count));
    record(h, r, cb_copy_d2h(d, h->out[r][2], recv, count * sizeof(float)));
    /* 3, 4: all-gather out of place and in place */
    record(h, r, cb_allgather(c, send, recv, count));
    record(h, r, cb_copy_d2d(d, (float *)ip + (size_t)r * count, send, count * sizeof(float)));
    record(h, r, cb_allgather(c, (float *)ip + (size_t)r * count, ip, count));
    record(h, r, cb_copy_d2h(d, h->out[r][3], recv, bytes));
    record(h, r, cb_copy_d2h(d, h->out[r][4], ip, bytes));
    /* 5, 6: broadcast from the last rank, then from rank 0 */
    record(h, r, cb_copy_h2d(d, recv, x, count * sizeof(float)));
    record(h, r, cb_broadcast(c, recv, count, h->n - 1));
    record(h, r, cb_copy_d2h(d, h->out[r][5], recv, count * sizeof(float)));
    record(h, r, cb_copy_h2d(d, recv, x, count * sizeof(float)));
    record(h, r, cb_broadcast(c, recv, count, 0));
    record(h, r, cb_copy_d2h(d, h->out[r][6], recv, count * sizeof(float)));
    record(h, r, cb_barrier(c));
    cb_free(d, send);
    cb_free(d, recv);
    cb_free(d, ip);
    free(x);
}

/* ref(count) = sum over ranks of their data at off, in rank order, in float. */
static void rank_order_sum(float *ref, int n, size_t big, size_t off, size_t count, size_t salt)
{
    for (int q = 0; q < n; q++) {
        float *x = rank_data(big, q, salt);
        for (size_t i = 0; i < count; i++)
            ref[i] = q == 0 ? x[off + i] : ref[i] + x[off + i];
        free(x);
    }
}

static void check_collectives(const int *ids, int n)
{
    /* 0 and counts below n leave ranks with empty chunks; 65537 grows the scratch */
    static const size_t counts[] = {0, 1, 3, 5, 1000, 65537, 7};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        harness h;
        size_t count = counts[ci], big = count * (size_t)n;
        run_ranks(&h, ids, n, collectives_body, count, 0);
        for (int r = 0; r < n; r++)
            assert_int_equal(h.st[r], PE_OK);
        float *ref = malloc((big + 1) * sizeof *ref);
        rank_order_sum(ref, n, big, 0, count, count);
        for (int r = 0; r < n; r++) {
            assert_memory_equal(h.out[r][0], ref, count * sizeof(float));
            assert_memory_equal(h.out[r][1], ref, count * sizeof(float));
        }
        for (int r = 0; r < n; r++) {
            rank_order_sum(ref, n, big, (size_t)r * count, count, count);
            assert_memory_equal(h.out[r][2], ref, count * sizeof(float));
        }
        for (int q = 0; q < n; q++) {
            float *x = rank_data(big, q, count);
            for (int r = 0; r < n; r++) {
                assert_memory_equal(h.out[r][3] + (size_t)q * count, x, count * sizeof(float));
                assert_memory_equal(h.out[r][4] + (size_t)q * count, x, count * sizeof(float));
                if (q == n - 1)
                    assert_memory_equal(h.out[r][5], x, count * sizeof(float));
                if (q == 0)
                    assert_memory_equal(h.out[r][6], x, count * sizeof(float));
            }
            free(x);
        }
        free(ref);
        free_outputs(&h);
    }
}

static const int gpu00[] = {0, 0}, gpu000[] = {0, 0, 0}, gpu0000[] = {0, 0, 0, 0},
                 gpu0011[] = {0, 0, 1, 1}, gpu01[] = {0, 1};

static void collectives_two_ranks_one_gpu(void **state)
{
    (void)state;
    check_collectives(gpu00, 2);
}

static void collectives_three_and_four_ranks_one_gpu(void **state)
{
    (void)state;
    check_collectives(gpu000, 3);
    check_collectives(gpu0000, 4);
}

static void collectives_across_two_gpus(void **state)
{
    (void)state;
    check_collectives(gpu0011, 4);
    setenv("PE_CUDA_COMM", "peer", 1);
    check_collectives(gpu01, 2);
    unsetenv("PE_CUDA_COMM");
}

/* ---- send / recv ---- */

#define RING_MSGS 40 /* fewer than a channel's 64 slots: no send has to wait */

/* Everyone sends RING_MSGS messages to the next rank before receiving from the previous. */
static void ring_body(harness *h, int r)
{
    be_device *d = h->devs[r];
    int n = h->n;
    size_t count = 100;
    void *sb[RING_MSGS], *rb[RING_MSGS];
    for (int k = 0; k < RING_MSGS; k++) {
        float *x = rank_data(count, r, 10 + (size_t)k);
        sb[k] = rb[k] = NULL;
        record(h, r, cb_alloc(d, count * sizeof(float), &sb[k]));
        record(h, r, cb_alloc(d, count * sizeof(float), &rb[k]));
        record(h, r, cb_copy_h2d(d, sb[k], x, count * sizeof(float)));
        free(x);
    }
    for (int k = 0; k < RING_MSGS; k++)
        record(h, r, cb_send(h->comms[r], sb[k], count, (r + 1) % n));
    for (int k = 0; k < RING_MSGS; k++)
        record(h, r, cb_recv(h->comms[r], rb[k], count, (r + n - 1) % n));
    record(h, r, cb_synchronize(d));
    h->out[r][0] = malloc(RING_MSGS * count * sizeof(float));
    for (int k = 0; k < RING_MSGS; k++)
        record(h, r, cb_copy_d2h(d, h->out[r][0] + (size_t)k * count, rb[k],
                                 count * sizeof(float)));
    /* barrier: nobody leaves before everyone arrived, twice over */
    atomic_fetch_add(&h->counter, 1);
    record(h, r, cb_barrier(h->comms[r]));
    if (atomic_load(&h->counter) != n)
        record(h, r, PE_EINTERNAL);
    record(h, r, cb_barrier(h->comms[r]));
    atomic_fetch_add(&h->counter, 1);
    record(h, r, cb_barrier(h->comms[r]));
    if (atomic_load(&h->counter) != 2 * n)
        record(h, r, PE_EINTERNAL);
    for (int k = 0; k < RING_MSGS; k++) {
        cb_free(d, sb[k]);
        cb_free(d, rb[k]);
    }
}

static void check_ring(const int *ids, int n, int close_first)
{
    harness h;
    run_ranks(&h, ids, n, ring_body, 0, close_first);
    for (int r = 0; r < n; r++) {
        assert_int_equal(h.st[r], PE_OK);
        for (int k = 0; k < RING_MSGS; k++) {
            float *x = rank_data(100, (r + n - 1) % n, 10 + (size_t)k);
            assert_memory_equal(h.out[r][0] + (size_t)k * 100, x, 100 * sizeof(float));
            free(x);
        }
    }
    free_outputs(&h);
}

static void send_recv_ring_with_everyone_sending_first(void **state)
{
    (void)state;
    check_ring(gpu0000, 4, 0);
    check_ring(gpu0011, 4, 0);
}

static void devices_closed_before_the_communicator_is_destroyed(void **state)
{
    (void)state;
    check_ring(gpu0011, 4, 1); /* the engine closes devices first; nothing dangles */
    assert_int_equal(cuda_fake_events_live(), 0);
}

/* synchronize on the sender returns only once the receiver took the send. */
static void sync_body(harness *h, int r)
{
    void *b = NULL;
    record(h, r, cb_alloc(h->devs[r], 64, &b));
    if (r == 0) {
        record(h, r, cb_send(h->comms[0], b, 16, 1));
        double t0 = now_ms();
        record(h, r, cb_synchronize(h->devs[0]));
        h->ms = now_ms() - t0;
    } else {
        sleep_ms(200);
        record(h, r, cb_recv(h->comms[1], b, 16, 0));
    }
    cb_free(h->devs[r], b);
}

static void synchronize_waits_until_sends_are_received(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, gpu00, 2, sync_body, 0, 0);
    assert_int_equal(h.st[0], PE_OK);
    assert_int_equal(h.st[1], PE_OK);
    assert_true(h.ms > 150.0);
}

/* ---- failures ---- */

static harness *abort_h;
static void *abort_later(void *p)
{
    (void)p;
    sleep_ms(100);
    cb_comm_abort(abort_h->comms[1]);
    return NULL;
}

/* Rank 0 waits in recv, rank 1 in an all-reduce's rendezvous; rank 2 arrives late. */
static void abort_body(harness *h, int r)
{
    void *b = NULL;
    cb_alloc(h->devs[r], 64, &b);
    if (r == 0) {
        pthread_t t;
        abort_h = h;
        pthread_create(&t, NULL, abort_later, NULL);
        h->st[0] = cb_recv(h->comms[0], b, 16, 1);
        pthread_join(t, NULL);
        h->extra[0] = cb_send(h->comms[0], b, 16, 1);
    } else if (r == 1) {
        h->st[1] = cb_allreduce_sum(h->comms[1], b, b, 16);
    } else {
        sleep_ms(300);
        h->st[r] = cb_barrier(h->comms[r]);
    }
    cb_free(h->devs[r], b);
}

static void abort_wakes_every_blocked_rank(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, gpu000, 3, abort_body, 0, 0);
    assert_int_equal(h.st[0], PE_ECOMM);
    assert_int_equal(h.st[1], PE_ECOMM);
    assert_int_equal(h.st[2], PE_ECOMM);
    assert_int_equal(h.extra[0], PE_ECOMM);
}

static void mismatch_body(harness *h, int r)
{
    void *b = NULL;
    cb_alloc(h->devs[r], 64, &b);
    h->st[r] = cb_allreduce_sum(h->comms[r], b, b, 5 + (size_t)r);
    cb_free(h->devs[r], b);
}

static void ranks_calling_different_collectives_fail_with_a_message(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, gpu00, 2, mismatch_body, 0, 0);
    assert_int_equal(h.st[0], PE_EINVAL);
    assert_int_equal(h.st[1], PE_EINVAL);
}

/* A send that will never be received: synchronize returns PE_ECOMM after the abort. */
static void pending_body(harness *h, int r)
{
    void *b = NULL;
    cb_alloc(h->devs[r], 64, &b);
    if (r == 0)
        record(h, r, cb_send(h->comms[0], b, 16, 1));
    pthread_barrier_wait(&h->pb);
    if (r == 1)
        cb_comm_abort(h->comms[1]);
    pthread_barrier_wait(&h->pb);
    if (r == 0)
        h->extra[0] = cb_synchronize(h->devs[0]);
    cb_free(h->devs[r], b);
}

static void synchronize_after_abort_reports_the_lost_send(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, gpu00, 2, pending_body, 0, 0);
    assert_int_equal(h.st[0], PE_OK);
    assert_int_equal(h.extra[0], PE_ECOMM);
}

/* A group of distinct GPUs whose GPU 0 also serves another worker takes the peer path
 * (the fake has no NCCL: comm_create would fail on the NCCL path). */
static void distinct_gpus_shared_with_another_worker_take_the_peer_path(void **state)
{
    (void)state;
    be_device *other = NULL;
    assert_int_equal(cb_open(0, &other, NULL), PE_OK);
    check_collectives(gpu01, 2);
    cb_close(other);
}

/* ---- comm_split on the peer path ---- */

/* Rank 0 splits {0,0,1,1} by rank parity; each group all-reduces rank-scaled data. The
 * groups have distinct GPUs, yet keep the parent's peer path (the fake has no NCCL). */
static void split_body(harness *h, int r)
{
    static be_comm *sub[MAXR];
    static const int colors[MAXR] = {0, 1, 0, 1};
    if (r == 0) {
        pe_err err = {{0}};
        h->extra[0] = cb_comm_split(h->comms, h->n, colors, sub, &err);
    }
    pthread_barrier_wait(&h->pb);
    if (h->extra[0] != PE_OK)
        return;
    be_comm *g = sub[r];
    h->extra[r] = g->g->path == BE_COMM_PEER && cb_comm_size(g) == 2 &&
                          cb_comm_rank(g) == r / 2
                      ? PE_OK
                      : PE_EINTERNAL;
    size_t n = h->count;
    float *x = rank_data(n, r, 11), *dx = NULL, *dy = NULL;
    h->out[r][0] = calloc(n, sizeof(float));
    record(h, r, cb_alloc(h->devs[r], n * sizeof(float), (void **)&dx));
    record(h, r, cb_alloc(h->devs[r], n * sizeof(float), (void **)&dy));
    record(h, r, cb_copy_h2d(h->devs[r], dx, x, n * sizeof(float)));
    record(h, r, cb_allreduce_sum(g, dx, dy, n));
    record(h, r, cb_copy_d2h(h->devs[r], h->out[r][0], dy, n * sizeof(float)));
    record(h, r, cb_synchronize(h->devs[r]));
    cb_free(h->devs[r], dx);
    cb_free(h->devs[r], dy);
    free(x);
    pthread_barrier_wait(&h->pb);
    if (r == 0)
        cb_comm_destroy(sub, h->n);
}

static void split_keeps_the_peer_path_and_sums_within_each_group(void **state)
{
    (void)state;
    const size_t n = 1000;
    harness h;
    run_ranks(&h, gpu0011, 4, split_body, n, 0);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(h.st[r], PE_OK);
        assert_int_equal(h.extra[r], PE_OK);
    }
    for (int r = 0; r < 4; r++) {
        int lo = r % 2; /* the group's first member; the other is lo + 2 */
        float *a = rank_data(n, lo, 11), *b = rank_data(n, lo + 2, 11);
        for (size_t i = 0; i < n; i++)
            assert_true(h.out[r][0][i] == a[i] + b[i]); /* rank order: lo, then lo + 2 */
        free(a);
        free(b);
    }
    free_outputs(&h);
    assert_int_equal(cuda_fake_events_live(), 0);
}

static void same_opened_device_twice_is_refused(void **state)
{
    (void)state;
    be_device *d = NULL;
    assert_int_equal(cb_open(0, &d, NULL), PE_OK);
    be_device *devs[2] = {d, d};
    be_comm *comms[2];
    pe_err err = {{0}};
    assert_int_equal(cb_comm_create(devs, 2, comms, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "same opened device"));
    cb_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives_two_ranks_one_gpu),
        cmocka_unit_test(collectives_three_and_four_ranks_one_gpu),
        cmocka_unit_test(collectives_across_two_gpus),
        cmocka_unit_test(send_recv_ring_with_everyone_sending_first),
        cmocka_unit_test(devices_closed_before_the_communicator_is_destroyed),
        cmocka_unit_test(synchronize_waits_until_sends_are_received),
        cmocka_unit_test(abort_wakes_every_blocked_rank),
        cmocka_unit_test(ranks_calling_different_collectives_fail_with_a_message),
        cmocka_unit_test(synchronize_after_abort_reports_the_lost_send),
        cmocka_unit_test(distinct_gpus_shared_with_another_worker_take_the_peer_path),
        cmocka_unit_test(same_opened_device_twice_is_refused),
        cmocka_unit_test(split_keeps_the_peer_path_and_sums_within_each_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
