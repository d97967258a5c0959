/* test_queue.c: the MPMC queue moves every item exactly once, in order per producer,
 * blocks and wakes at full/empty, and closes without losing or duplicating items. */
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/queue.h"

/* An item names its producer and its sequence number: ((producer + 1) << 32) | seq. */
static void *encode(int producer, uint64_t seq)
{
    return (void *)(uintptr_t)(((uint64_t)(producer + 1) << 32) | seq);
}
static int item_producer(void *item) { return (int)(((uintptr_t)item >> 32)) - 1; }
static uint64_t item_seq(void *item) { return (uintptr_t)item & 0xffffffffu; }

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (up to 20 s) until the queue reports `want` parked pops (or pushes). */
static int wait_for_waiters(rt_queue *q, unsigned want, int pushes)
{
    for (int i = 0; i < 20000; i++) {
        unsigned n = pushes ? rt_queue_waiting_pushes(q) : rt_queue_waiting_pops(q);
        if (n == want)
            return 1;
        sleep_ms(1);
    }
    return 0;
}

/* ---- many producers, many consumers ---------------------------------------------- */

typedef struct producer {
    rt_queue *q;
    int id;
    uint64_t n;       /* items to push */
    int use_try;      /* try_push + yield instead of push */
    uint64_t pushed;  /* items accepted */
    int stop_on_close;/* PE_ECLOSED ends the run early (expected) */
    pe_status bad;    /* an unexpected status, or PE_OK */
} producer;

typedef struct consumer {
    rt_queue *q;
    int nprod;
    uint64_t stride; /* max items per producer */
    int use_try;
    unsigned char *count; /* (nprod, stride) times each item was received */
    int64_t last[64];     /* last sequence seen per producer */
    uint64_t got;
    int order_broken, garbage;
    pe_status bad;
} consumer;

static void *producer_main(void *arg)
{
    producer *p = arg;
    for (uint64_t i = 0; i < p->n; i++) {
        pe_status s;
        if (p->use_try) {
            while ((s = rt_queue_try_push(p->q, encode(p->id, i))) == PE_EAGAIN)
                sched_yield();
        } else {
            s = rt_queue_push(p->q, encode(p->id, i));
        }
        if (s == PE_ECLOSED && p->stop_on_close)
            break;
        if (s != PE_OK) {
            p->bad = s;
            break;
        }
        p->pushed++;
    }
    return NULL;
}

static void *consumer_main(void *arg)
{
    consumer *c = arg;
    for (int i = 0; i < c->nprod; i++)
        c->last[i] = -1;
    for (;;) {
        void *item;
        pe_status s;
        if (c->use_try) {
            while ((s = rt_queue_try_pop(c->q, &item)) == PE_EAGAIN)
                sched_yield();
        } else {
            s = rt_queue_pop(c->q, &item);
        }
        if (s == PE_ECLOSED)
            break;
        if (s != PE_OK) {
            c->bad = s;
            break;
        }
        int p = item_producer(item);
        uint64_t seq = item_seq(item);
        if (p < 0 || p >= c->nprod || seq >= c->stride) {
            c->garbage++;
            continue;
        }
        if ((int64_t)seq <= c->last[p])
            c->order_broken++;
        c->last[p] = (int64_t)seq;
        if (c->count[(uint64_t)p * c->stride + seq] < 255)
            c->count[(uint64_t)p * c->stride + seq]++;
        c->got++;
    }
    return NULL;
}

/* Runs np producers and nc consumers over one queue. With close_early, each producer
 * pushes up to `total` items, and the queue is closed under them soon after the first
 * item went through; otherwise they push `total` items in all and the queue is closed
 * once they are done. Checks every accepted
 * item was received exactly once, in order per producer (each consumer sees each
 * producer's items in increasing order), and nothing else was received. */
static void run_mpmc(int np, int nc, uint64_t total, size_t capacity, int use_try,
                     int close_early)
{
    rt_queue *q;
    assert_int_equal(rt_queue_create(capacity, &q), PE_OK);
    uint64_t stride = close_early ? total : (total + (uint64_t)np - 1) / (uint64_t)np;
    producer *ps = calloc((size_t)np, sizeof *ps);
    consumer *cs = calloc((size_t)nc, sizeof *cs);
    pthread_t *pt = calloc((size_t)np, sizeof *pt), *ct = calloc((size_t)nc, sizeof *ct);
    assert_non_null(ps);
    assert_non_null(cs);
    assert_non_null(pt);
    assert_non_null(ct);
    for (int i = 0; i < nc; i++) {
        cs[i] = (consumer){.q = q, .nprod = np, .stride = stride, .use_try = use_try};
        cs[i].count = calloc((size_t)(np * stride), 1);
        assert_non_null(cs[i].count);
        assert_int_equal(pthread_create(&ct[i], NULL, consumer_main, &cs[i]), 0);
    }
    for (int i = 0; i < np; i++) {
        uint64_t n = close_early ? total
                                 : total / (uint64_t)np + ((uint64_t)i < total % (uint64_t)np);
        ps[i] = (producer){.q = q, .id = i, .n = n, .use_try = use_try,
                           .stop_on_close = close_early};
        assert_int_equal(pthread_create(&pt[i], NULL, producer_main, &ps[i]), 0);
    }
    if (close_early) {
        /* close while producers are busy, once items flow */
        for (int i = 0; i < 100000 && rt_queue_size(q) == 0; i++)
            sched_yield();
        sleep_ms(1);
        rt_queue_close(q);
    }
    for (int i = 0; i < np; i++)
        assert_int_equal(pthread_join(pt[i], NULL), 0);
    rt_queue_close(q);
    for (int i = 0; i < nc; i++)
        assert_int_equal(pthread_join(ct[i], NULL), 0);

    uint64_t pushed = 0, got = 0;
    for (int i = 0; i < np; i++) {
        assert_int_equal(ps[i].bad, PE_OK);
        assert_true(ps[i].pushed <= stride);
        pushed += ps[i].pushed;
    }
    if (!close_early)
        assert_int_equal(pushed, total);
    for (int i = 0; i < nc; i++) {
        assert_int_equal(cs[i].bad, PE_OK);
        assert_int_equal(cs[i].garbage, 0);
        assert_int_equal(cs[i].order_broken, 0);
        got += cs[i].got;
    }
    assert_int_equal(got, pushed);
    /* every accepted item exactly once, nothing that was not accepted */
    for (int p = 0; p < np; p++) {
        for (uint64_t s = 0; s < stride; s++) {
            unsigned times = 0;
            for (int i = 0; i < nc; i++)
                times += cs[i].count[(uint64_t)p * stride + s];
            if (times != (s < ps[p].pushed ? 1u : 0u))
                fail_msg("producer %d item %llu received %u times (pushed %llu)", p,
                         (unsigned long long)s, times, (unsigned long long)ps[p].pushed);
        }
    }
    assert_int_equal(rt_queue_size(q), 0);
    for (int i = 0; i < nc; i++)
        free(cs[i].count);
    free(ps);
    free(cs);
    free(pt);
    free(ct);
    rt_queue_destroy(q);
}

/* Every producers x consumers pair from 1x1 to 8x8 moves 1,000,000 items exactly once,
 * in order per producer (the 64 runs take about 11 s on a busy 2-core machine). Under
 * PE_TEST_SMALL (valgrind) a handful of configurations move 2,000 items. */
static void test_mpmc_matrix_exactly_once_in_order(void **state)
{
    (void)state;
    if (tu_small()) {
        static const int cfg[][2] = {{1, 1}, {2, 2}, {1, 4}, {4, 1}, {3, 5}, {8, 8}};
        for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
            run_mpmc(cfg[i][0], cfg[i][1], 2000, 16, 0, 0);
        return;
    }
    uint64_t items = 1000000;
#if defined(__SANITIZE_THREAD__)
    items /= 10; /* TSan runs this ~10x slower; a tenth still interleaves plenty */
#endif
    for (int np = 1; np <= 8; np++)
        for (int nc = 1; nc <= 8; nc++)
            run_mpmc(np, nc, items, 64, 0, 0);
}

/* The try variants (with yields) under contention also move items exactly once. */
static void test_mpmc_try_variants(void **state)
{
    (void)state;
    uint64_t n = tu_size(200000, 1000);
    run_mpmc(1, 1, n, 8, 1, 0);
    run_mpmc(3, 2, n, 8, 1, 0);
    run_mpmc(4, 4, n, 64, 1, 0);
}

/* Closing while producers push: accepted items all arrive exactly once, none other. */
static void test_close_under_load_loses_nothing(void **state)
{
    (void)state;
    uint64_t n = tu_size(100000, 500);
    run_mpmc(1, 1, n, 16, 0, 1);
    run_mpmc(4, 3, n, 16, 0, 1);
    run_mpmc(2, 2, n, 16, 1, 1);
}

/* ---- edge cases, single thread ------------------------------------------------------ */

static void test_capacity_must_be_power_of_two(void **state)
{
    (void)state;
    static const size_t bad[] = {0, 1, 3, 6, 100, 1000, ((size_t)1 << 20) + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_queue *q = (rt_queue *)1;
        assert_int_equal(rt_queue_create(bad[i], &q), PE_EINVAL);
        assert_null(q);
    }
    static const size_t good[] = {2, 4, 64, 1024};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        rt_queue *q;
        assert_int_equal(rt_queue_create(good[i], &q), PE_OK);
        assert_int_equal(rt_queue_capacity(q), good[i]);
        assert_int_equal(rt_queue_size(q), 0);
        rt_queue_destroy(q);
    }
}

static void test_full_and_empty(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    void *item = (void *)1;
    assert_int_equal(rt_queue_try_pop(q, &item), PE_EAGAIN);
    assert_ptr_equal(item, (void *)1); /* untouched */
    for (uintptr_t i = 1; i <= 4; i++)
        assert_int_equal(rt_queue_try_push(q, (void *)i), PE_OK);
    assert_int_equal(rt_queue_size(q), 4);
    assert_int_equal(rt_queue_try_push(q, (void *)5), PE_EAGAIN);
    assert_int_equal(rt_queue_size(q), 4);
    for (uintptr_t i = 1; i <= 4; i++) {
        assert_int_equal(rt_queue_try_pop(q, &item), PE_OK);
        assert_ptr_equal(item, (void *)i);
    }
    assert_int_equal(rt_queue_try_pop(q, &item), PE_EAGAIN);
    /* many laps around the ring, at every fill level, keep FIFO order (NULL is an item) */
    uintptr_t next_in = 0, next_out = 0;
    for (int lap = 0; lap < 1000; lap++) {
        int fill = lap % 5;
        for (int k = 0; k < fill; k++)
            assert_int_equal(rt_queue_try_push(q, (void *)next_in++), PE_OK);
        assert_int_equal(rt_queue_size(q), (size_t)fill);
        for (int k = 0; k < fill; k++) {
            assert_int_equal(rt_queue_try_pop(q, &item), PE_OK);
            assert_ptr_equal(item, (void *)next_out++);
        }
    }
    rt_queue_destroy(q);
}

static void test_close_drains_then_reports_closed(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(8, &q), PE_OK);
    for (uintptr_t i = 1; i <= 3; i++)
        assert_int_equal(rt_queue_push(q, (void *)i), PE_OK);
    rt_queue_close(q);
    rt_queue_close(q); /* idempotent */
    assert_int_equal(rt_queue_try_push(q, (void *)9), PE_ECLOSED);
    assert_int_equal(rt_queue_push(q, (void *)9), PE_ECLOSED);
    void *item;
    for (uintptr_t i = 1; i <= 3; i++) {
        assert_int_equal(i % 2 ? rt_queue_pop(q, &item) : rt_queue_try_pop(q, &item), PE_OK);
        assert_ptr_equal(item, (void *)i);
    }
    assert_int_equal(rt_queue_try_pop(q, &item), PE_ECLOSED);
    assert_int_equal(rt_queue_pop(q, &item), PE_ECLOSED);
    rt_queue_destroy(q);

    /* a full queue that is closed reports closed, not full, to pushes */
    assert_int_equal(rt_queue_create(2, &q), PE_OK);
    assert_int_equal(rt_queue_push(q, (void *)1), PE_OK);
    assert_int_equal(rt_queue_push(q, (void *)2), PE_OK);
    assert_int_equal(rt_queue_try_push(q, (void *)3), PE_EAGAIN);
    rt_queue_close(q);
    assert_int_equal(rt_queue_try_push(q, (void *)3), PE_ECLOSED);
    rt_queue_destroy(q); /* items left queued are the caller's; nothing to free here */
}

/* ---- parking ------------------------------------------------------------------------- */

typedef struct blocked {
    rt_queue *q;
    void *item;
    pe_status status;
} blocked;

static void *blocked_pop(void *arg)
{
    blocked *b = arg;
    b->status = rt_queue_pop(b->q, &b->item);
    return NULL;
}

static void *blocked_push(void *arg)
{
    blocked *b = arg;
    b->status = rt_queue_push(b->q, b->item);
    return NULL;
}

static void test_consumer_parks_on_empty_and_push_wakes_it(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    blocked b = {.q = q, .status = PE_EINTERNAL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocked_pop, &b), 0);
    assert_true(wait_for_waiters(q, 1, 0));
    sleep_ms(20); /* most likely asleep in the condvar by now; correct either way */
    assert_int_equal(rt_queue_try_push(q, (void *)42), PE_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(b.status, PE_OK);
    assert_ptr_equal(b.item, (void *)42);
    assert_int_equal(rt_queue_waiting_pops(q), 0);
    assert_int_equal(rt_queue_size(q), 0);
    rt_queue_destroy(q);
}

static void test_producer_parks_on_full_and_pop_wakes_it(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(2, &q), PE_OK);
    assert_int_equal(rt_queue_push(q, (void *)1), PE_OK);
    assert_int_equal(rt_queue_push(q, (void *)2), PE_OK);
    blocked b = {.q = q, .item = (void *)3, .status = PE_EINTERNAL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, blocked_push, &b), 0);
    assert_true(wait_for_waiters(q, 1, 1));
    sleep_ms(20);
    void *item;
    assert_int_equal(rt_queue_try_pop(q, &item), PE_OK);
    assert_ptr_equal(item, (void *)1);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(b.status, PE_OK);
    assert_int_equal(rt_queue_waiting_pushes(q), 0);
    for (uintptr_t i = 2; i <= 3; i++) {
        assert_int_equal(rt_queue_try_pop(q, &item), PE_OK);
        assert_ptr_equal(item, (void *)i);
    }
    rt_queue_destroy(q);
}

/* Ping-pong over two capacity-2 queues: every hand-off parks or nearly parks, so a lost
 * wake-up would hang here (ctest's timeout fails it). */
typedef struct pingpong {
    rt_queue *in, *out;
    int rounds;
    int bad;
} pingpong;

static void *ponger(void *arg)
{
    pingpong *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        void *item;
        if (rt_queue_pop(p->in, &item) != PE_OK || (uintptr_t)item != (uintptr_t)i + 1)
            p->bad++;
        if (rt_queue_push(p->out, item) != PE_OK)
            p->bad++;
    }
    return NULL;
}

static void test_ping_pong_never_loses_a_wakeup(void **state)
{
    (void)state;
    rt_queue *a, *b;
    assert_int_equal(rt_queue_create(2, &a), PE_OK);
    assert_int_equal(rt_queue_create(2, &b), PE_OK);
    pingpong p = {.in = a, .out = b, .rounds = (int)tu_size(20000, 300)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ponger, &p), 0);
    for (int i = 0; i < p.rounds; i++) {
        void *item;
        assert_int_equal(rt_queue_push(a, (void *)((uintptr_t)i + 1)), PE_OK);
        assert_int_equal(rt_queue_pop(b, &item), PE_OK);
        assert_ptr_equal(item, (void *)((uintptr_t)i + 1));
        if (i % 1000 == 999)
            sleep_ms(1); /* let the ponger reach its condvar now and then */
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(p.bad, 0);
    rt_queue_destroy(a);
    rt_queue_destroy(b);
}

static void test_close_wakes_waiters_on_both_sides(void **state)
{
    (void)state;
    enum { N = 3 };
    rt_queue *empty, *full;
    assert_int_equal(rt_queue_create(4, &empty), PE_OK);
    assert_int_equal(rt_queue_create(2, &full), PE_OK);
    assert_int_equal(rt_queue_push(full, (void *)1), PE_OK);
    assert_int_equal(rt_queue_push(full, (void *)2), PE_OK);

    blocked pops[N], pushes[N];
    pthread_t pt[N], ut[N];
    for (int i = 0; i < N; i++) {
        pops[i] = (blocked){.q = empty, .status = PE_EINTERNAL};
        pushes[i] = (blocked){.q = full, .item = (void *)(uintptr_t)(10 + i),
                              .status = PE_EINTERNAL};
        assert_int_equal(pthread_create(&pt[i], NULL, blocked_pop, &pops[i]), 0);
        assert_int_equal(pthread_create(&ut[i], NULL, blocked_push, &pushes[i]), 0);
    }
    assert_true(wait_for_waiters(empty, N, 0));
    assert_true(wait_for_waiters(full, N, 1));
    sleep_ms(20);
    rt_queue_close(empty);
    rt_queue_close(full);
    for (int i = 0; i < N; i++) {
        assert_int_equal(pthread_join(pt[i], NULL), 0);
        assert_int_equal(pthread_join(ut[i], NULL), 0);
        assert_int_equal(pops[i].status, PE_ECLOSED);
        assert_int_equal(pushes[i].status, PE_ECLOSED);
    }
    /* what was queued before the close still drains, in order */
    void *item;
    assert_int_equal(rt_queue_pop(full, &item), PE_OK);
    assert_ptr_equal(item, (void *)1);
    assert_int_equal(rt_queue_pop(full, &item), PE_OK);
    assert_ptr_equal(item, (void *)2);
    assert_int_equal(rt_queue_pop(full, &item), PE_ECLOSED);
    assert_int_equal(rt_queue_waiting_pops(empty), 0);
    assert_int_equal(rt_queue_waiting_pushes(full), 0);
    rt_queue_destroy(empty);
    rt_queue_destroy(full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity_must_be_power_of_two),
        cmocka_unit_test(test_full_and_empty),
        cmocka_unit_test(test_close_drains_then_reports_closed),
        cmocka_unit_test(test_consumer_parks_on_empty_and_push_wakes_it),
        cmocka_unit_test(test_producer_parks_on_full_and_pop_wakes_it),
        cmocka_unit_test(test_ping_pong_never_loses_a_wakeup),
        cmocka_unit_test(test_close_wakes_waiters_on_both_sides),
        cmocka_unit_test(test_mpmc_try_variants),
        cmocka_unit_test(test_close_under_load_loses_nothing),
        cmocka_unit_test(test_mpmc_matrix_exactly_once_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
