/* test_worker.c: a worker runs its tasks in order, reports a failure once, cancels the
 * rest, tears down, and joins with the failure; an owner that closes every queue on a
 * failure stops every worker. */
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/queue.h"
#include "runtime/topology.h"
#include "runtime/worker.h"

#define MAX_TASKS 20000

/* What one worker's callbacks saw. Written on the worker thread only, read after join. */
typedef struct seen {
    int fail_at;           /* run() fails on this task number (-1: never) */
    pe_status fail_with;
    int fail_silently;     /* fail without a message */
    pe_status setup_with;  /* setup() returns this */
    int setups, teardowns, failures;
    int ran[MAX_TASKS];    /* task numbers in the order run() got them */
    int nran;
    int cancelled[MAX_TASKS];
    int ncancelled;
    pe_status cancel_why;
    int run_before_setup, run_after_teardown;
    int failure_index;
    pe_status failure_status;
    char failure_msg[PE_ERR_LEN];
    pthread_t failure_thread, run_thread;
    int set_up_now;
    void *owner; /* for the owner test */
} seen;

static void *task_of(int i) { return (void *)(uintptr_t)(i + 1); }
static int number_of(void *task) { return (int)(uintptr_t)task - 1; }

static pe_status cb_setup(void *ctx, pe_err *err)
{
    seen *s = ctx;
    s->setups++;
    if (s->setup_with != PE_OK)
        return pe_fail(err, s->setup_with, "device 7 is gone; plug it back in");
    s->set_up_now = 1;
    return PE_OK;
}

static void cb_teardown(void *ctx)
{
    seen *s = ctx;
    s->teardowns++;
    s->set_up_now = 0;
}

static pe_status cb_run(void *ctx, void *task, pe_err *err)
{
    seen *s = ctx;
    int i = number_of(task);
    s->run_thread = pthread_self();
    if (!s->set_up_now)
        s->run_before_setup++;
    if (s->nran < MAX_TASKS)
        s->ran[s->nran++] = i;
    if (i == s->fail_at) {
        if (s->fail_silently)
            return s->fail_with;
        return pe_fail(err, s->fail_with, "task %d broke", i);
    }
    return PE_OK;
}

static void cb_cancel(void *ctx, void *task, pe_status why)
{
    seen *s = ctx;
    if (s->ncancelled < MAX_TASKS)
        s->cancelled[s->ncancelled++] = number_of(task);
    s->cancel_why = why;
}

static void cb_failure(void *ctx, int index, pe_status st, const pe_err *err)
{
    seen *s = ctx;
    s->failures++;
    s->failure_index = index;
    s->failure_status = st;
    s->failure_thread = pthread_self();
    snprintf(s->failure_msg, sizeof s->failure_msg, "%s", err->msg);
}

static rt_worker_desc desc_for(seen *s, rt_queue *q, int index)
{
    return (rt_worker_desc){.index = index, .inq = q, .ctx = s, .setup = cb_setup,
                            .teardown = cb_teardown, .run = cb_run, .cancel = cb_cancel,
                            .on_failure = cb_failure};
}

static seen *new_seen(void)
{
    seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->fail_at = -1;
    return s;
}

static void test_start_validates_desc(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    rt_worker *w = (rt_worker *)1;
    pe_err err = {{0}};
    rt_worker_desc d = {.inq = q}; /* no run */
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_EINVAL);
    assert_null(w);
    assert_true(strlen(err.msg) > 0);
    d = (rt_worker_desc){.run = cb_run}; /* no queue */
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_EINVAL);
    rt_queue_destroy(q);
}

static void test_start_stop_join(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    seen *s = new_seen();
    rt_worker_desc d = desc_for(s, q, 0);
    rt_worker *w;
    pe_err err = {{0}};
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_OK);
    assert_int_equal(s->setups, 1);
    assert_int_equal(s->teardowns, 1);
    assert_int_equal(s->nran, 0);
    assert_int_equal(s->failures, 0);
    rt_queue_destroy(q);
    free(s);
}

static void test_tasks_run_in_order_between_setup_and_teardown(void **state)
{
    (void)state;
    int n = (int)tu_size(MAX_TASKS, 500);
    rt_queue *q;
    assert_int_equal(rt_queue_create(16, &q), PE_OK); /* small: the producer blocks too */
    seen *s = new_seen();
    rt_worker_desc d = desc_for(s, q, 0);
    d.setup = NULL; /* optional callbacks may be left out */
    d.teardown = NULL;
    d.cancel = NULL;
    d.on_failure = NULL;
    s->set_up_now = 1;
    rt_worker *w;
    pe_err err = {{0}};
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(rt_queue_push(q, task_of(i)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_OK);
    assert_int_equal(s->nran, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(s->ran[i], i);
    assert_false(pthread_equal(s->run_thread, pthread_self()));
    rt_queue_destroy(q);
    free(s);

    /* with setup and teardown: every task runs after setup and before teardown */
    assert_int_equal(rt_queue_create(16, &q), PE_OK);
    s = new_seen();
    d = desc_for(s, q, 0);
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    for (int i = 0; i < 100; i++)
        assert_int_equal(rt_queue_push(q, task_of(i)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_OK);
    assert_int_equal(s->nran, 100);
    assert_int_equal(s->run_before_setup, 0);
    assert_int_equal(s->setups, 1);
    assert_int_equal(s->teardowns, 1);
    rt_queue_destroy(q);
    free(s);
}

/* Tasks before the failing one ran, the failing one went to run() only, every later
 * one went to cancel() with the failure's status, on_failure ran once on the worker
 * thread, teardown still ran, join returns the failure and its message. */
static void test_failure_reported_once_and_rest_cancelled(void **state)
{
    (void)state;
    int n = (int)tu_size(2000, 200), k = n / 3;
    rt_queue *q;
    assert_int_equal(rt_queue_create(8, &q), PE_OK);
    seen *s = new_seen();
    s->fail_at = k;
    s->fail_with = PE_EDEVICE;
    rt_worker_desc d = desc_for(s, q, 5);
    rt_worker *w;
    pe_err err = {{0}};
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(rt_queue_push(q, task_of(i)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_EDEVICE);
    char want[64];
    snprintf(want, sizeof want, "task %d broke", k);
    assert_string_equal(err.msg, want);

    assert_int_equal(s->failures, 1);
    assert_int_equal(s->failure_index, 5);
    assert_int_equal(s->failure_status, PE_EDEVICE);
    assert_string_equal(s->failure_msg, want);
    assert_false(pthread_equal(s->failure_thread, pthread_self()));
    assert_true(pthread_equal(s->failure_thread, s->run_thread));
    assert_int_equal(s->nran, k + 1);
    for (int i = 0; i <= k; i++)
        assert_int_equal(s->ran[i], i);
    assert_int_equal(s->ncancelled, n - k - 1);
    for (int i = 0; i < s->ncancelled; i++)
        assert_int_equal(s->cancelled[i], k + 1 + i);
    assert_int_equal(s->cancel_why, PE_EDEVICE);
    assert_int_equal(s->setups, 1);
    assert_int_equal(s->teardowns, 1);
    rt_queue_destroy(q);
    free(s);
}

static void test_failure_without_message_gets_one(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    seen *s = new_seen();
    s->fail_at = 0;
    s->fail_with = PE_EIO;
    s->fail_silently = 1;
    rt_worker_desc d = desc_for(s, q, 3);
    rt_worker *w;
    pe_err err = {{0}};
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    assert_int_equal(rt_queue_push(q, task_of(0)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_EIO);
    assert_non_null(strstr(err.msg, "worker 3"));
    assert_non_null(strstr(err.msg, "PE_EIO"));
    assert_int_equal(s->failures, 1);
    rt_queue_destroy(q);
    free(s);
}

/* A failed setup is the worker's failure: no task runs, all are cancelled, teardown is
 * not called, join returns setup's status and message. */
static void test_setup_failure(void **state)
{
    (void)state;
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    seen *s = new_seen();
    s->setup_with = PE_ENODEV;
    rt_worker_desc d = desc_for(s, q, 1);
    rt_worker *w;
    pe_err err = {{0}};
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(rt_queue_push(q, task_of(i)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_ENODEV);
    assert_string_equal(err.msg, "device 7 is gone; plug it back in");
    assert_int_equal(s->setups, 1);
    assert_int_equal(s->teardowns, 0);
    assert_int_equal(s->nran, 0);
    assert_int_equal(s->ncancelled, 10);
    assert_int_equal(s->cancel_why, PE_ENODEV);
    assert_int_equal(s->failures, 1);
    assert_int_equal(s->failure_status, PE_ENODEV);
    rt_queue_destroy(q);
    free(s);
}

/* ---- an owner that stops everything on the first failure ------------------------ */

enum { NW = 4 };

typedef struct owner {
    rt_queue *queues[NW];
    pthread_mutex_t mu;
    int failures; /* under mu */
} owner;

static void owner_on_failure(void *ctx, int index, pe_status st, const pe_err *err)
{
    seen *s = ctx;
    owner *o = s->owner;
    cb_failure(ctx, index, st, err);
    pthread_mutex_lock(&o->mu);
    o->failures++;
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < NW; i++)
        rt_queue_close(o->queues[i]);
}

/* The owner feeds all workers until its pushes fail: only the failure of worker 2 (at
 * its task k) closes the queues, so every join returning proves the close reached every
 * worker. Each accepted task went to exactly one of run() or cancel(). */
static void test_owner_closing_all_queues_stops_every_worker(void **state)
{
    (void)state;
    int k = (int)tu_size(500, 20);
    owner o = {.failures = 0};
    pthread_mutex_init(&o.mu, NULL);
    seen *s[NW];
    rt_worker *w[NW];
    pe_err err = {{0}};
    for (int i = 0; i < NW; i++)
        assert_int_equal(rt_queue_create(8, &o.queues[i]), PE_OK);
    for (int i = 0; i < NW; i++) {
        s[i] = new_seen();
        s[i]->owner = &o;
        if (i == 2) {
            s[i]->fail_at = k;
            s[i]->fail_with = PE_ECOMM;
        }
        rt_worker_desc d = desc_for(s[i], o.queues[i], i);
        d.on_failure = owner_on_failure;
        assert_int_equal(rt_worker_start(&d, &w[i], &err), PE_OK);
    }
    int accepted[NW] = {0}, open = NW, pushed_total = 0;
    int is_open[NW] = {1, 1, 1, 1};
    while (open > 0 && pushed_total < 4 * MAX_TASKS - 8) {
        for (int i = 0; i < NW; i++) {
            if (!is_open[i])
                continue;
            pe_status st = rt_queue_push(o.queues[i], task_of(accepted[i]));
            if (st == PE_ECLOSED) {
                is_open[i] = 0;
                open--;
                continue;
            }
            assert_int_equal(st, PE_OK);
            accepted[i]++;
            pushed_total++;
        }
    }
    assert_int_equal(open, 0); /* the failure closed every queue */
    for (int i = 0; i < NW; i++) {
        pe_status st = rt_worker_join(w[i], &err);
        assert_int_equal(st, i == 2 ? PE_ECOMM : PE_OK);
        if (i == 2) {
            char want[64];
            snprintf(want, sizeof want, "task %d broke", k);
            assert_string_equal(err.msg, want);
        }
    }
    assert_int_equal(o.failures, 1);
    for (int i = 0; i < NW; i++) {
        assert_int_equal(s[i]->nran + s[i]->ncancelled, accepted[i]);
        for (int j = 0; j < s[i]->nran; j++)
            assert_int_equal(s[i]->ran[j], j);
        if (i == 2) {
            assert_int_equal(s[i]->nran, k + 1);
            assert_int_equal(s[i]->failures, 1);
        } else {
            assert_int_equal(s[i]->ncancelled, 0);
            assert_int_equal(s[i]->failures, 0);
        }
        assert_int_equal(s[i]->teardowns, 1);
        rt_queue_destroy(o.queues[i]);
        free(s[i]);
    }
    pthread_mutex_destroy(&o.mu);
}

/* ---- binding ---------------------------------------------------------------------- */

typedef struct bind_check {
    seen s;
    const char *want; /* cpulist the thread should be bound to */
    char got[256];
} bind_check;

static pe_status bind_check_setup(void *ctx, pe_err *err)
{
    bind_check *b = ctx;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0)
        return pe_fail(err, PE_EINTERNAL, "pthread_getaffinity_np failed");
    /* the affinity as a list, "0,1,..." (naive: one number per CPU) */
    size_t len = 0;
    b->got[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && len + 8 < sizeof b->got; c++)
        if (CPU_ISSET(c, &set))
            len += (size_t)snprintf(b->got + len, sizeof b->got - len, "%s%d", len ? "," : "", c);
    return cb_setup(ctx, err);
}

/* Expands "0-2,5" to "0,1,2,5" (the naive twin of hwloc's list syntax). */
static void expand_list(const char *list, char *out, size_t outlen)
{
    size_t len = 0;
    out[0] = '\0';
    while (*list) {
        char *end;
        long a = strtol(list, &end, 10), b = a;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && len + 8 < outlen; c++)
            len += (size_t)snprintf(out + len, outlen - len, "%s%ld", len ? "," : "", c);
        list = *end == ',' ? end + 1 : end;
    }
}

static void test_worker_binds_to_its_planned_cores(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    rt_binding plan[1];
    assert_int_equal(rt_topology_plan(t, 1, NULL, plan, &err), PE_OK);
    snprintf(plan[0].cpulist, sizeof plan[0].cpulist, "0"); /* one PU: a real restriction */
    rt_queue *q;
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    bind_check *b = calloc(1, sizeof *b);
    assert_non_null(b);
    b->s.fail_at = -1;
    rt_worker_desc d = desc_for(&b->s, q, 0);
    d.setup = bind_check_setup;
    d.topo = t;
    d.bind = plan;
    rt_worker *w;
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    plan[0].cpulist[0] = 'x'; /* the worker keeps its own copy */
    rt_queue_close(q);
    pe_status st = rt_worker_join(w, &err);
    if (st == PE_EDEVICE) {
        /* a container that refuses binding: reported, with what to do */
        print_message("binding refused here: %s\n", err.msg);
        assert_non_null(strstr(err.msg, "bind"));
        assert_int_equal(b->s.setups, 0);
    } else {
        assert_int_equal(st, PE_OK);
        char want[256];
        expand_list("0", want, sizeof want);
        assert_string_equal(b->got, want);
        assert_int_equal(b->s.setups, 1);
    }
    free(b);
    rt_queue_destroy(q);

    /* a cpulist that is not a list fails the worker like a failed setup */
    assert_int_equal(rt_queue_create(4, &q), PE_OK);
    seen *s = new_seen();
    rt_binding bad = {.cpulist = "zero-three"};
    d = desc_for(s, q, 4);
    d.topo = t;
    d.bind = &bad;
    assert_int_equal(rt_worker_start(&d, &w, &err), PE_OK);
    assert_int_equal(rt_queue_push(q, task_of(0)), PE_OK);
    rt_queue_close(q);
    assert_int_equal(rt_worker_join(w, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "zero-three"));
    assert_int_equal(s->setups, 0);
    assert_int_equal(s->nran, 0);
    assert_int_equal(s->ncancelled, 1);
    assert_int_equal(s->failures, 1);
    free(s);
    rt_queue_destroy(q);
    rt_topology_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_validates_desc),
        cmocka_unit_test(test_start_stop_join),
        cmocka_unit_test(test_tasks_run_in_order_between_setup_and_teardown),
        cmocka_unit_test(test_failure_reported_once_and_rest_cancelled),
        cmocka_unit_test(test_failure_without_message_gets_one),
        cmocka_unit_test(test_setup_failure),
        cmocka_unit_test(test_owner_closing_all_queues_stops_every_worker),
        cmocka_unit_test(test_worker_binds_to_its_planned_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
