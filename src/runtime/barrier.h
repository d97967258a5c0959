/* barrier.h: a barrier of n threads, abortable, spin then park: the host communicators'
 * collectives and the engine's gpipe clock.
 *
 * One 64-bit word holds (generation << 32 | arrived). A thread arrives with a CAS; the
 * CAS that brings arrived to n completes the barrier (arrived = 0, generation + 1). A
 * waiter spins on the generation for a few microseconds, then parks (rt_park: mutex and
 * condition variable).
 *
 * Abort: an abortable wait that sees the abort flag before its barrier completed takes
 * its arrival back with a CAS, and returns PE_ECOMM. Arrival, completion and withdrawal
 * are single CASes on one word, so a barrier completes only if all n threads were present
 * at once and none left: either every waiter passes or none does. A collective therefore
 * waits abortably only at its first barrier; once that passed, every rank is inside the
 * collective and reaches the later barriers, which wait without abort (peers may still be
 * reading this rank's buffers, so leaving early would be unsafe).
 */
#ifndef PE_RUNTIME_BARRIER_H
#define PE_RUNTIME_BARRIER_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/error.h"
#include "runtime/park.h"

typedef struct rt_barrier {
    alignas(64) _Atomic uint64_t word; /* generation << 32 | arrived */
    _Atomic int aborted;
    int n;
    uint64_t spin_ns; /* how long a waiter spins before it parks; 0 = park at once */
    rt_park park;
} rt_barrier;

pe_status rt_barrier_init(rt_barrier *b, int n, pe_err *err);
void rt_barrier_destroy(rt_barrier *b);

/* PE_OK once all n arrived; PE_ECOMM (only when abortable) if aborted before that. */
pe_status rt_barrier_wait(rt_barrier *b, int abortable);

/* Sets the abort flag and wakes every waiter. Idempotent, any thread. */
void rt_barrier_abort(rt_barrier *b);
int rt_barrier_aborted(rt_barrier *b);

/* How long a waiter of a group of n threads spins: 0 under valgrind (it runs one thread
 * at a time) and when the group has more threads than the machine has CPUs. */
uint64_t rt_spin_budget_ns(int n);

#endif
