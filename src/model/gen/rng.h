/* rng.h: the model writers' random numbers: xoshiro256** seeded by splitmix64, and standard
 * normals by Box-Muller in double.
 *
 * Every draw is integer arithmetic except the normals' log, sqrt, cos and sin, so a seed
 * gives the same numbers on every machine whose libm rounds those correctly (glibc does).
 */
#ifndef PE_MODEL_GEN_RNG_H
#define PE_MODEL_GEN_RNG_H

#include <stdint.h>

typedef struct md_rng {
    uint64_t s[4];
    double spare; /* the second Box-Muller normal */
    int has_spare;
} md_rng;

/* The state from a 64-bit seed (four splitmix64 outputs, pe_k_splitmix64). */
void md_rng_seed(md_rng *r, uint64_t seed);
/* The next 64 random bits (xoshiro256**). */
uint64_t md_rng_next(md_rng *r);
/* A standard normal. */
double md_rng_normal(md_rng *r);

#endif
