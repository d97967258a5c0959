/* hooks.h: what the model layer asks of its caller for timing. The model knows no threads
 * and no clocks: the engine hands a forward a clock and a callback for its trace. */
#ifndef PE_MODEL_HOOKS_H
#define PE_MODEL_HOOKS_H

#include <stdint.h>

typedef struct md_hooks {
    uint64_t (*now)(void);                                    /* a clock in ns; may be NULL */
    void (*collective)(void *ctx, uint64_t start_ns, uint64_t end_ns); /* may be NULL */
    void *ctx;
} md_hooks;

/* The hooks' clock, 0 without one. */
static inline uint64_t md_now(const md_hooks *h) { return h && h->now ? h->now() : 0; }

/* Reports a collective that ran from start_ns until now. */
static inline void md_collective_done(const md_hooks *h, uint64_t start_ns)
{
    if (h && h->collective)
        h->collective(h->ctx, start_ns, md_now(h));
}

#endif
