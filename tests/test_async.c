/* test_async.c: 100,000 requests from 4 client threads through pe_submit, collected by
 * pe_wait/pe_poll: each gets exactly one result, and each result is its own request's.
 *
 * The model is an identity MLP (W = I, b = 0, ReLU): a non-negative input row comes back
 * unchanged, so every output row must equal the row its request sent — a request
 * answered with another's data, or twice, or never, is caught. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp/mlp.h"
#include "pengine/pengine.h"
#include "test_util.h"

enum { CLIENTS = 4, WIDTH = 8 };

typedef struct shared {
    pe_engine *e;
    size_t per_client;
    float *in;  /* (total, WIDTH) */
    float *out; /* (total, WIDTH) */
    unsigned char *seen; /* (total) */
} shared;

typedef struct client {
    shared *sh;
    int index;
    int submit_errors;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    shared *sh = c->sh;
    for (size_t i = 0; i < sh->per_client; i++) {
        size_t id = (size_t)c->index * sh->per_client + i;
        pe_request q = {.id = id, .rows = 1, .input = sh->in + id * WIDTH,
                        .output = sh->out + id * WIDTH, .user = (void *)(sh->in + id * WIDTH)};
        if (pe_submit(sh->e, &q) != PE_OK)
            c->submit_errors++;
    }
    return NULL;
}

static void run(int dp, int pp, pe_schedule sched, size_t total)
{
    char path[256];
    tu_temp_path(path, sizeof path, "async_identity.safetensors");
    md_mlp_spec spec = {.in = WIDTH, .hidden = WIDTH, .out = WIDTH, .layers = 2,
                        .act = MD_ACT_RELU, .init = MD_INIT_IDENTITY, .seed = 1};
    pe_err err = {{0}};
    assert_int_equal(md_mlp_write(&spec, path, &err), PE_OK);

    int devices[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp;
    cfg.devices = devices;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.schedule = sched;
    cfg.queue_capacity = 256; /* small, so clients really block on a full engine */
    cfg.bind_threads = 0;
    shared sh = {.per_client = total / CLIENTS};
    total = sh.per_client * CLIENTS;
    assert_int_equal(pe_engine_create(&cfg, &sh.e), PE_OK);
    assert_int_equal(pe_engine_load(sh.e, path), PE_OK);
    unlink(path);
    sh.in = malloc(total * WIDTH * sizeof(float));
    sh.out = calloc(total * WIDTH, sizeof(float));
    sh.seen = calloc(total, 1);
    for (size_t i = 0; i < total * WIDTH; i++)
        sh.in[i] = (float)(i % 1000003); /* non-negative, exact, distinct per request */

    pthread_t th[CLIENTS];
    client cl[CLIENTS];
    for (int c = 0; c < CLIENTS; c++) {
        cl[c] = (client){.sh = &sh, .index = c};
        assert_int_equal(pthread_create(&th[c], NULL, client_main, &cl[c]), 0);
    }
    size_t got = 0, wrong = 0, dup = 0, failed = 0, polls = 0;
    while (got < total) {
        pe_result res;
        pe_status s = (got & 1) ? pe_poll(sh.e, &res) : pe_wait(sh.e, &res);
        if (s == PE_EAGAIN) { /* nothing outstanding yet, or nothing ready */
            polls++;
            sched_yield();
            continue;
        }
        assert_int_equal(s, PE_OK);
        assert_true(res.id < total);
        if (res.status != PE_OK)
            failed++;
        if (sh.seen[res.id]++)
            dup++;
        if (res.user != sh.in + res.id * WIDTH ||
            memcmp(sh.out + res.id * WIDTH, sh.in + res.id * WIDTH, WIDTH * sizeof(float)))
            wrong++;
        got++;
    }
    for (int c = 0; c < CLIENTS; c++) {
        pthread_join(th[c], NULL);
        assert_int_equal(cl[c].submit_errors, 0);
    }
    pe_result extra;
    assert_int_equal(pe_poll(sh.e, &extra), PE_EAGAIN); /* exactly one result each */
    assert_int_equal(dup, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(wrong, 0);
    for (size_t i = 0; i < total; i++)
        assert_int_equal(sh.seen[i], 1);
    pe_engine_destroy(sh.e);
    free(sh.in);
    free(sh.out);
    free(sh.seen);
}

static void test_100k_requests_from_4_threads_dp2(void **state)
{
    (void)state;
    run(2, 1, PE_SCHED_NAIVE, tu_size(100000, 2000));
}

static void test_requests_through_a_pipeline_stream(void **state)
{
    (void)state;
    run(1, 2, PE_SCHED_STREAM, tu_size(20000, 1000));
}

static void test_requests_through_a_pipeline_gpipe(void **state)
{
    (void)state;
    run(1, 2, PE_SCHED_GPIPE, tu_size(20000, 1000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_100k_requests_from_4_threads_dp2),
        cmocka_unit_test(test_requests_through_a_pipeline_stream),
        cmocka_unit_test(test_requests_through_a_pipeline_gpipe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
