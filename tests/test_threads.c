/* test_threads.c: the cores a host engine's workers compute with (pe_config.threads,
 * reported in pe_engine_info.threads): an even share of the machine by default, `threads`
 * cores each when set (capped at the machine's cores while bound), and, unbound, every
 * core or `threads`. The machine's cores come from hwloc, as the engine's plan does. */
#include <stdlib.h>
#include <string.h>

#include "pengine/pengine.h"
#include "runtime/topology.h"
#include "test_util.h"

static int machine_cores(void)
{
    rt_topology *t = NULL;
    pe_err err = {{0}};
    assert_int_equal(rt_topology_load(&t, &err), PE_OK);
    int n = rt_topology_cores(t);
    rt_topology_free(t);
    return n;
}

/* Opens a host engine of `workers` DP workers and returns each worker's threads. */
static void engine_threads(int workers, int threads, int bind, int *out)
{
    int devices[4] = {0, 1, 2, 3};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = workers;
    cfg.devices = devices;
    cfg.threads = threads;
    cfg.bind_threads = bind;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("pe_engine_create: %s", pe_last_error());
    pe_engine_info info;
    assert_int_equal(pe_engine_info_get(e, &info), PE_OK);
    for (int r = 0; r < workers; r++)
        out[r] = info.threads[r];
    pe_engine_destroy(e);
}

static void test_default_is_an_even_share_of_the_cores(void **state)
{
    (void)state;
    int cores = machine_cores(), got[4];
    engine_threads(1, 0, 1, got);
    assert_int_equal(got[0], cores);
    engine_threads(2, 0, 1, got);
    for (int r = 0; r < 2; r++) /* 2 workers split the cores; beyond, they share one each */
        assert_int_equal(got[r], cores >= 2 ? (r + 1) * cores / 2 - r * cores / 2 : 1);
}

static void test_threads_gives_each_device_that_many_cores(void **state)
{
    (void)state;
    int cores = machine_cores(), got[4];
    engine_threads(1, 1, 1, got);
    assert_int_equal(got[0], 1);
    engine_threads(2, 1, 1, got);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 1);
    engine_threads(1, cores + 1, 1, got); /* bound: no more than the machine has */
    assert_int_equal(got[0], cores);
}

static void test_unbound_workers_use_every_core_or_threads(void **state)
{
    (void)state;
    int cores = machine_cores(), got[4];
    engine_threads(2, 0, 0, got);
    assert_int_equal(got[0], cores);
    assert_int_equal(got[1], cores);
    engine_threads(1, 3, 0, got);
    assert_int_equal(got[0], 3);
}

static void test_bad_threads_is_rejected(void **state)
{
    (void)state;
    int devices[1] = {0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 1;
    cfg.devices = devices;
    cfg.threads = -1;
    pe_engine *e = NULL;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_EINVAL);
    assert_null(e);
    assert_non_null(strstr(pe_last_error(), "threads=-1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_an_even_share_of_the_cores),
        cmocka_unit_test(test_threads_gives_each_device_that_many_cores),
        cmocka_unit_test(test_unbound_workers_use_every_core_or_threads),
        cmocka_unit_test(test_bad_threads_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
