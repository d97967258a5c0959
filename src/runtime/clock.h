/* clock.h: monotonic time for traces, benchmarks and spin budgets. */
#ifndef PE_RUNTIME_CLOCK_H
#define PE_RUNTIME_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double rt_now_us(void) { return (double)rt_now_ns() * 1e-3; }

#endif
