/* test_topology.c: hwloc loads, plans give disjoint core sets while there are enough
 * cores and flag sharing beyond, and the printout names every device. */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/topology.h"

/* The naive twin of hwloc's list syntax: marks the PUs of "0-2,5" in pus[0..n). */
static int parse_list(const char *list, unsigned char *pus, int n)
{
    memset(pus, 0, (size_t)n);
    int count = 0;
    while (*list) {
        char *end;
        long a = strtol(list, &end, 10), b = a;
        if (end == list)
            return -1;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++) {
            if (c < 0 || c >= n)
                return -1;
            pus[c] = 1;
            count++;
        }
        list = *end == ',' ? end + 1 : end;
    }
    return count;
}

enum { MAX_PU = 4096 };

typedef struct plan_stats {
    int sizes_min, sizes_max; /* PUs per worker */
    int overlaps;             /* pairs of workers sharing a PU */
    int covered;              /* PUs used by some worker */
} plan_stats;

static plan_stats check_plan(const rt_binding *plan, int n)
{
    unsigned char(*pus)[MAX_PU] = calloc((size_t)n, MAX_PU);
    assert_non_null(pus);
    plan_stats st = {.sizes_min = MAX_PU, .sizes_max = 0};
    for (int i = 0; i < n; i++) {
        int c = parse_list(plan[i].cpulist, pus[i], MAX_PU);
        assert_true(c > 0);
        st.sizes_min = c < st.sizes_min ? c : st.sizes_min;
        st.sizes_max = c > st.sizes_max ? c : st.sizes_max;
    }
    for (int p = 0; p < MAX_PU; p++) {
        int users = 0;
        for (int i = 0; i < n; i++)
            users += pus[i][p];
        st.covered += users > 0;
    }
    for (int i = 0; i < n; i++) {
        int shares = 0;
        for (int j = 0; j < n; j++) {
            if (j == i)
                continue;
            for (int p = 0; p < MAX_PU; p++) {
                if (pus[i][p] && pus[j][p]) {
                    shares = 1;
                    if (j > i)
                        st.overlaps++;
                    break;
                }
            }
        }
        assert_int_equal(plan[i].shared, shares); /* the flag tells the truth */
    }
    free(pus);
    return st;
}

static void test_load_counts(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    assert_true(rt_topology_cores(t) >= 1);
    assert_true(rt_topology_pus(t) >= rt_topology_cores(t));
    assert_true(rt_topology_numa_nodes(t) >= 1);
    rt_topology_free(t);
}

static void test_plan_disjoint_up_to_cores_shared_beyond(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    int cores = rt_topology_cores(t), pus = rt_topology_pus(t);
    int ns[] = {1, cores, 2 * cores + 1};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        rt_binding *plan = calloc((size_t)n, sizeof *plan);
        assert_non_null(plan);
        assert_int_equal(rt_topology_plan(t, n, NULL, plan, &err), PE_OK);
        plan_stats st = check_plan(plan, n);
        if (n <= cores) {
            assert_int_equal(st.overlaps, 0);
            assert_int_equal(st.covered, pus); /* every core handed out */
            for (int i = 0; i < n; i++)
                assert_int_equal(plan[i].shared, 0);
        } else {
            assert_true(st.overlaps > 0);
            for (int i = 0; i < n; i++)
                assert_int_equal(plan[i].shared, 1); /* 2 cores + 1: every core shared */
            assert_int_equal(st.covered, pus);
        }
        if (n == 1)
            assert_int_equal(st.sizes_max, pus);
        free(plan);
    }
    /* near lists: workers with the same near set split it; "" means a host device */
    rt_binding plan[3];
    assert_int_equal(rt_topology_plan(t, 1, NULL, plan, &err), PE_OK);
    char first[16]; /* the first PU this process may use */
    snprintf(first, sizeof first, "%ld", strtol(plan[0].cpulist, NULL, 10));
    const char *near[] = {first, first, ""};
    assert_int_equal(rt_topology_plan(t, 3, near, plan, &err), PE_OK);
    assert_string_equal(plan[0].cpulist, first);
    assert_string_equal(plan[1].cpulist, first);
    assert_int_equal(plan[0].shared, 1);
    assert_int_equal(plan[1].shared, 1);
    assert_int_equal(check_plan(plan, 3).overlaps, 3); /* the host device uses all PUs */
    const char *bad[] = {"zero"};
    assert_int_equal(rt_topology_plan(t, 1, bad, plan, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "zero"));
    assert_int_equal(rt_topology_plan(t, 0, NULL, plan, &err), PE_EINVAL);
    rt_topology_free(t);
}

/* threads > 0: each host device gets that many cores, consecutive, wrapping around once
 * the cores run out (then flagged shared); all of them when it asks for more. */
static void test_plan_gives_host_devices_threads_cores(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    int cores = rt_topology_cores(t), pus = rt_topology_pus(t), per_core = pus / cores;
    rt_binding *plan = calloc((size_t)cores + 1, sizeof *plan);
    assert_non_null(plan);
    /* one device, one core */
    assert_int_equal(rt_topology_plan_cores(t, 1, NULL, 1, plan, &err), PE_OK);
    assert_int_equal(check_plan(plan, 1).sizes_max, per_core);
    /* one core each for as many devices as cores: disjoint, every core used */
    assert_int_equal(rt_topology_plan_cores(t, cores, NULL, 1, plan, &err), PE_OK);
    plan_stats st = check_plan(plan, cores);
    assert_int_equal(st.overlaps, 0);
    assert_int_equal(st.covered, pus);
    assert_int_equal(st.sizes_max, per_core);
    /* one device more: it wraps onto device 0's core, and both say so */
    assert_int_equal(rt_topology_plan_cores(t, cores + 1, NULL, 1, plan, &err), PE_OK);
    st = check_plan(plan, cores + 1);
    assert_string_equal(plan[cores].cpulist, plan[0].cpulist);
    assert_int_equal(plan[0].shared, 1);
    assert_int_equal(plan[cores].shared, 1);
    /* more threads than cores: every core, once */
    assert_int_equal(rt_topology_plan_cores(t, 1, NULL, cores + 3, plan, &err), PE_OK);
    assert_int_equal(check_plan(plan, 1).sizes_max, pus);
    /* 0 is the even share, as rt_topology_plan */
    rt_binding even;
    assert_int_equal(rt_topology_plan_cores(t, 1, NULL, 0, plan, &err), PE_OK);
    assert_int_equal(rt_topology_plan(t, 1, NULL, &even, &err), PE_OK);
    assert_string_equal(plan[0].cpulist, even.cpulist);
    free(plan);
    rt_topology_free(t);
}

typedef struct cores_probe {
    const rt_topology *t;
    rt_binding bind; /* "" = stay unbound */
    pe_status bind_status;
    int n, bound;
    rt_binding cores[64];
} cores_probe;

static void *probe_cores(void *arg)
{
    cores_probe *p = arg;
    pe_err err = {{0}};
    p->bind_status = rt_topology_bind_self(p->t, &p->bind, &err);
    p->n = rt_topology_thread_cores(p->t, p->cores, 64, &p->bound);
    return NULL;
}

/* A thread's cores are those it is bound to; an unbound thread has every core. */
static void test_thread_cores_follow_the_binding(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    int cores = rt_topology_cores(t);
    cores_probe *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->t = t;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, probe_cores, p), 0);
    pthread_join(th, NULL);
    assert_int_equal(p->n, cores < 64 ? cores : 64);
    assert_int_equal(p->bound, 0);
    if (cores >= 2) {
        rt_binding plan[2];
        assert_int_equal(rt_topology_plan_cores(t, 2, NULL, 1, plan, &err), PE_OK);
        p->bind = plan[1];
        assert_int_equal(pthread_create(&th, NULL, probe_cores, p), 0);
        pthread_join(th, NULL);
        if (p->bind_status == PE_OK) { /* else the OS refuses binding: nothing to check */
            assert_int_equal(p->n, 1);
            assert_int_equal(p->bound, 1);
            assert_string_equal(p->cores[0].cpulist, plan[1].cpulist);
        }
    }
    free(p);
    rt_topology_free(t);
}

static void test_bind_self(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    rt_binding none = {.cpulist = ""};
    assert_int_equal(rt_topology_bind_self(t, &none, &err), PE_OK);
    rt_binding bad = {.cpulist = "a-b"};
    assert_int_equal(rt_topology_bind_self(t, &bad, &err), PE_EINVAL);
    /* binding to the whole machine changes nothing and must be allowed, or be reported */
    rt_binding all;
    assert_int_equal(rt_topology_plan(t, 1, NULL, &all, &err), PE_OK);
    pe_status s = rt_topology_bind_self(t, &all, &err);
    assert_true(s == PE_OK || (s == PE_EDEVICE && strstr(err.msg, all.cpulist)));
    rt_topology_free(t);
}

static void test_print_names_every_device(void **state)
{
    (void)state;
    pe_err err = {{0}};
    rt_topology *t;
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    int n = 2 * rt_topology_cores(t) + 1;
    rt_binding *plan = calloc((size_t)n, sizeof *plan);
    const char **names = calloc((size_t)n, sizeof *names);
    char(*buf)[32] = calloc((size_t)n, sizeof *buf);
    assert_non_null(plan);
    assert_non_null(names);
    assert_non_null(buf);
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "host%d", i);
        names[i] = buf[i];
    }
    assert_int_equal(rt_topology_plan(t, n, NULL, plan, &err), PE_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    rt_topology_print(t, f, n, plan, names);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "machine: %d cores, %d PUs", rt_topology_cores(t),
             rt_topology_pus(t));
    assert_non_null(strstr(text, want));
    for (int i = 0; i < n; i++) {
        snprintf(want, sizeof want, "device %d (host%d): cores ", i, i);
        const char *line = strstr(text, want);
        assert_non_null(line);
        const char *eol = strchr(line, '\n');
        assert_non_null(eol);
        assert_non_null(strstr(line, "[shared]"));
        assert_true(strstr(line, "[shared]") < eol);
    }
    free(text);
    /* without names the lines still name the devices */
    f = open_memstream(&text, &len);
    assert_non_null(f);
    rt_topology_print(t, f, 1, plan, NULL);
    fclose(f);
    assert_non_null(strstr(text, "device 0: cores "));
    free(text);
    free(plan);
    free(names);
    free(buf);
    rt_topology_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_counts),
        cmocka_unit_test(test_plan_disjoint_up_to_cores_shared_beyond),
        cmocka_unit_test(test_plan_gives_host_devices_threads_cores),
        cmocka_unit_test(test_thread_cores_follow_the_binding),
        cmocka_unit_test(test_bind_self),
        cmocka_unit_test(test_print_names_every_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
