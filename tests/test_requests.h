/* test_requests.h: the "every request gets exactly one result" check of the failure tests
 * (test_failure, test_cuda_modes). Header-only, so that test_util.c, which every test
 * links, does not need the engine. */
#ifndef PE_TEST_REQUESTS_H
#define PE_TEST_REQUESTS_H

#include <stdlib.h>

#include "pengine/pengine.h"
#include "test_util.h"

/* Submits n requests of `rows` rows each, x(n * rows, in) -> y(n * rows, out), all before
 * waiting, then waits for n results: each id comes back exactly once, and an error is one
 * that a stopped engine gives (the failure itself, an aborted collective, a closed queue).
 * Returns how many results carried an error. */
static inline int tu_submit_all_and_collect(pe_engine *e, const float *x, float *y, int n,
                                            size_t rows, size_t in, size_t out)
{
    for (int i = 0; i < n; i++) {
        pe_request q = {.id = (uint64_t)i, .rows = rows, .input = x + (size_t)i * rows * in,
                        .output = y + (size_t)i * rows * out};
        assert_int_equal(pe_submit(e, &q), PE_OK);
    }
    int *seen = calloc((size_t)n, sizeof *seen), errors = 0;
    assert_non_null(seen);
    for (int i = 0; i < n; i++) {
        pe_result res;
        assert_int_equal(pe_wait(e, &res), PE_OK);
        assert_true(res.id < (uint64_t)n);
        seen[res.id]++;
        if (res.status != PE_OK) {
            errors++;
            assert_true(res.status == PE_EDEVICE || res.status == PE_ECOMM ||
                        res.status == PE_ECLOSED);
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    return errors;
}

#endif
