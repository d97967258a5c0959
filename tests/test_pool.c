/* test_pool.c: the compute pool: every item of a region runs exactly once whatever the
 * pool size and grain, on threads numbered within the pool; what the helpers write is
 * seen by the caller after the region, and what the caller wrote before it by the
 * helpers, over many regions in a row; a pool of one runs inline; helpers are bound to
 * the cores they are given. */
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pool.h"
#include "runtime/topology.h"

typedef struct count_job {
    unsigned *hits;      /* (n) times each item ran */
    int *thread_of;      /* (n) the thread that ran it */
    int size;            /* pool size */
    int bad_thread;      /* set when a thread index was out of range */
} count_job;

static void count_items(void *arg, size_t b, size_t e, int thread)
{
    count_job *j = arg;
    if (thread < 0 || thread >= j->size)
        j->bad_thread = 1;
    for (size_t i = b; i < e; i++) {
        j->hits[i]++;
        j->thread_of[i] = thread;
    }
}

static void test_every_item_runs_once(void **state)
{
    (void)state;
    const int sizes[] = {1, 2, 3, 5};
    const size_t ns[] = {0, 1, 2, 7, 64, 1000, 4097};
    const size_t grains[] = {1, 3, 64, 5000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        rt_pool *p = NULL;
        pe_err err = {{0}};
        assert_int_equal(rt_pool_create(sizes[s], NULL, NULL, &p, &err), PE_OK);
        assert_int_equal(rt_pool_size(p), sizes[s]);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
                size_t n = ns[k];
                count_job j = {calloc(n + 1, sizeof(unsigned)), calloc(n + 1, sizeof(int)),
                               sizes[s], 0};
                rt_pool_for(p, n, grains[g], count_items, &j);
                assert_int_equal(j.bad_thread, 0);
                for (size_t i = 0; i < n; i++)
                    if (j.hits[i] != 1)
                        fail_msg("pool %d, n=%zu grain=%zu: item %zu ran %u times", sizes[s],
                                 n, grains[g], i, j.hits[i]);
                /* one piece, or a pool of one: the caller runs it all */
                if (n <= grains[g] || sizes[s] == 1)
                    for (size_t i = 0; i < n; i++)
                        assert_int_equal(j.thread_of[i], 0);
                free(j.hits);
                free(j.thread_of);
            }
        rt_pool_destroy(p);
    }
    rt_pool_destroy(NULL);
    rt_pool *p = NULL;
    pe_err err = {{0}};
    assert_int_equal(rt_pool_create(0, NULL, NULL, &p, &err), PE_EINVAL);
    assert_null(p);
}

typedef struct chain_job {
    uint64_t *x;     /* (n) */
    uint64_t round;
} chain_job;

/* x[i] = x[i] * 3 + round: each region reads what the previous one wrote. */
static void step(void *arg, size_t b, size_t e, int thread)
{
    chain_job *j = arg;
    (void)thread;
    for (size_t i = b; i < e; i++)
        j->x[i] = j->x[i] * 3 + j->round + i;
}

static void test_regions_see_each_others_writes(void **state)
{
    (void)state;
    const size_t n = 96, rounds = tu_size(20000, 300);
    uint64_t *x = calloc(n, sizeof *x), *want = calloc(n, sizeof *want);
    rt_pool *p = NULL;
    pe_err err = {{0}};
    assert_int_equal(rt_pool_create(3, NULL, NULL, &p, &err), PE_OK);
    for (uint64_t r = 0; r < rounds; r++) {
        chain_job j = {x, r};
        rt_pool_for(p, n, 1 + r % 40, step, &j);
        for (size_t i = 0; i < n; i++)
            want[i] = want[i] * 3 + r + i;
        /* the caller writes between regions too */
        x[r % n] ^= 1;
        want[r % n] ^= 1;
    }
    assert_memory_equal(x, want, n * sizeof *x);
    rt_pool_destroy(p);
    free(x);
    free(want);
}

typedef struct pin_job {
    const rt_topology *t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int helper_ran;
    rt_binding seen; /* the helper's cores as it sees them */
    int seen_n;
} pin_job;

/* Piece 0 (the caller) waits until a helper took piece 1, so a helper surely runs. */
static void report_cores(void *arg, size_t b, size_t e, int thread)
{
    pin_job *j = arg;
    (void)e;
    if (thread != 0) {
        int bound;
        rt_binding cores[4];
        int n = rt_topology_thread_cores(j->t, cores, 4, &bound);
        pthread_mutex_lock(&j->mu);
        j->seen = cores[0];
        j->seen_n = n;
        j->helper_ran = 1;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    } else if (b == 0) {
        pthread_mutex_lock(&j->mu);
        while (!j->helper_ran)
            pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
    }
}

static void test_helpers_run_on_their_cores(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    if (rt_topology_cores(t) < 2) {
        rt_topology_free(t);
        skip();
    }
    rt_binding pins[2];
    assert_int_equal(rt_topology_plan_cores(t, 2, NULL, 1, pins, &err), PE_OK);
    rt_pool *p = NULL;
    assert_int_equal(rt_pool_create(2, t, pins, &p, &err), PE_OK);
    pin_job j = {.t = t};
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    rt_pool_for(p, 2, 1, report_cores, &j);
    assert_int_equal(j.helper_ran, 1);
    assert_int_equal(j.seen_n, 1);
    assert_string_equal(j.seen.cpulist, pins[1].cpulist);
    rt_pool_destroy(p);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    rt_topology_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_runs_once),
        cmocka_unit_test(test_regions_see_each_others_writes),
        cmocka_unit_test(test_helpers_run_on_their_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
