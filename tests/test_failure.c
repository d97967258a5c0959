/* test_failure.c: a worker that fails mid-run stops the engine cleanly: no hang, every
 * request submitted before and after gets exactly one result, the failure's message
 * reaches the caller, and destroy joins everything (valgrind checks nothing leaks).
 * Also the engine's configuration and load errors, with their messages. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_testing.h"
#include "model/mlp/mlp.h"
#include "pengine/pengine.h"
#include "test_util.h"
#include "test_requests.h"

static char model_path[256];
static const md_mlp_spec spec = {.in = 16, .hidden = 16, .out = 16, .layers = 4,
                                 .act = MD_ACT_RELU, .std = 0.2f, .seed = 5};

static int setup(void **state)
{
    (void)state;
    tu_temp_path(model_path, sizeof model_path, "failure.safetensors");
    pe_err err = {{0}};
    return md_mlp_write(&spec, model_path, &err) == PE_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(model_path);
    return 0;
}

static pe_engine *make(int dp, int pp, int tp, pe_schedule sched, int m)
{
    int devices[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp * tp;
    cfg.devices = devices;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.schedule = sched;
    cfg.microbatches = m;
    cfg.bind_threads = 0;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK)
        fail_msg("create: %s", pe_last_error());
    if (pe_engine_load(e, model_path) != PE_OK)
        fail_msg("load: %s", pe_last_error());
    return e;
}

/* Fails worker `rank` at its task number at_task while requests stream through; checks
 * that every request is answered once, some with the error, and that later calls fail
 * fast. The failing worker must be sure to get that many tasks: with dp > 1 the router
 * sends each request to the least-loaded replica (ties to replica 0), so a worker of
 * replica 0 gets the first request, but no worker is sure to get a third. */
static void fail_mid_run(int dp, int pp, int tp, pe_schedule sched, int m, int rank,
                         long at_task)
{
    pe_engine *e = make(dp, pp, tp, sched, m);
    en_inject_failure(e, rank, at_task);
    enum { N = 40, ROWS = 8 };
    size_t in = spec.in, out = spec.out;
    float *x = malloc(N * ROWS * in * sizeof(float));
    float *y = malloc(N * ROWS * out * sizeof(float));
    tu_fill_random(x, N * ROWS * in, 3);
    assert_true(tu_submit_all_and_collect(e, x, y, N, ROWS, in, out) >= 1);
    pe_result none;
    assert_int_equal(pe_poll(e, &none), PE_EAGAIN);

    /* Later requests complete at once with the failure, through both APIs. */
    pe_status s = pe_infer(e, x, ROWS, y);
    assert_int_equal(s, PE_EDEVICE);
    assert_non_null(strstr(pe_last_error(), "injected failure"));
    assert_non_null(strstr(pe_engine_last_error(e), "injected failure"));
    pe_request q = {.id = 77, .rows = ROWS, .input = x, .output = y};
    assert_int_equal(pe_submit(e, &q), PE_OK);
    pe_result res;
    assert_int_equal(pe_wait(e, &res), PE_OK);
    assert_int_equal(res.id, 77);
    assert_int_equal(res.status, PE_EDEVICE);
    pe_engine_destroy(e);
    free(x);
    free(y);
}

static void test_pp_stage_failure_answers_every_request(void **state)
{
    (void)state;
    fail_mid_run(1, 2, 1, PE_SCHED_STREAM, 4, 1, 3);
    fail_mid_run(1, 4, 1, PE_SCHED_STREAM, 2, 2, 3);
}

static void test_gpipe_failure_wakes_the_clock_barrier(void **state)
{
    (void)state;
    fail_mid_run(1, 2, 1, PE_SCHED_GPIPE, 4, 0, 3);
}

static void test_tp_rank_failure_wakes_its_peer_in_allreduce(void **state)
{
    (void)state;
    fail_mid_run(1, 1, 2, PE_SCHED_NAIVE, 1, 1, 3);
    fail_mid_run(2, 2, 2, PE_SCHED_STREAM, 2, 1, 1); /* replica 0, stage 0, lane 1 */
}

static void test_dp_replica_failure_stops_the_engine(void **state)
{
    (void)state;
    fail_mid_run(2, 1, 1, PE_SCHED_NAIVE, 1, 0, 1); /* replica 0 takes the first request */
}

static void expect_create_error(pe_config *cfg, pe_status want, const char *substr)
{
    pe_engine *e = (pe_engine *)1;
    assert_int_equal(pe_engine_create(cfg, &e), want);
    assert_null(e);
    if (!strstr(pe_last_error(), substr))
        fail_msg("message '%s' lacks '%s'", pe_last_error(), substr);
}

static void test_config_errors_name_the_problem(void **state)
{
    (void)state;
    int devices[3] = {0, 1, 2};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.bind_threads = 0;
    expect_create_error(&cfg, PE_EINVAL, "no devices");
    cfg.devices = devices;
    cfg.ndevices = 3;
    cfg.dp = 2;
    cfg.tp = 2;
    expect_create_error(&cfg, PE_EINVAL, "needs 4 devices but 3 were listed");
    cfg.dp = cfg.tp = 0;
    cfg.microbatches = 0;
    expect_create_error(&cfg, PE_EINVAL, "microbatches=0");
    cfg.microbatches = 1;
    cfg.queue_capacity = 1000;
    expect_create_error(&cfg, PE_EINVAL, "power of two");
    cfg.queue_capacity = 0;
    int bad[2] = {0, 4096};
    cfg.devices = bad;
    cfg.ndevices = 2;
    expect_create_error(&cfg, PE_ENODEV, "device 4096 does not exist");
}

static void test_load_errors_name_the_problem(void **state)
{
    (void)state;
    int devices[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.bind_threads = 0;
    cfg.devices = devices;
    pe_engine *e = NULL;

    cfg.ndevices = cfg.tp = 3; /* 16 is not divisible by 3 */
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, model_path), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "16"));
    assert_non_null(strstr(pe_last_error(), "tp=3"));
    float x[16] = {0}, y[16];
    assert_int_equal(pe_infer(e, x, 1, y), PE_EINVAL); /* nothing loaded */
    pe_engine_destroy(e);

    cfg.tp = 1;
    cfg.ndevices = cfg.pp = 5; /* 5 stages, 4 layers */
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, model_path), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "4 layers"));
    pe_engine_destroy(e);

    cfg.ndevices = cfg.pp = 1;
    assert_int_equal(pe_engine_create(&cfg, &e), PE_OK);
    assert_int_equal(pe_engine_load(e, "/nonexistent/m.safetensors"), PE_EIO);
    assert_int_equal(pe_engine_load(e, model_path), PE_OK);
    assert_int_equal(pe_engine_load(e, model_path), PE_EINVAL); /* already loaded */
    pe_request q = {.id = 1, .rows = 0, .input = x, .output = y};
    assert_int_equal(pe_submit(e, &q), PE_EINVAL);
    assert_non_null(strstr(pe_last_error(), "rows is 0"));
    pe_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pp_stage_failure_answers_every_request),
        cmocka_unit_test(test_gpipe_failure_wakes_the_clock_barrier),
        cmocka_unit_test(test_tp_rank_failure_wakes_its_peer_in_allreduce),
        cmocka_unit_test(test_dp_replica_failure_stops_the_engine),
        cmocka_unit_test(test_config_errors_name_the_problem),
        cmocka_unit_test(test_load_errors_name_the_problem),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
