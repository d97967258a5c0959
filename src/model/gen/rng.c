/* rng.c: xoshiro256** (Blackman, Vigna 2018) seeded by splitmix64, and Box-Muller normals. */
#include "model/gen/rng.h"

#include <math.h>

#include "kernels/sample.h"

void md_rng_seed(md_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = pe_k_splitmix64(&seed);
    r->has_spare = 0;
    r->spare = 0.0;
}

static uint64_t md_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t md_rng_next(md_rng *r)
{
    uint64_t *s = r->s, out = md_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = md_rotl(s[3], 45);
    return out;
}

/* Two uniforms give two normals; the second is kept for the next call. */
double md_rng_normal(md_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = (double)((md_rng_next(r) >> 11) + 1) * 0x1.0p-53; /* (0, 1]: log is finite */
    double u2 = (double)(md_rng_next(r) >> 11) * 0x1.0p-53;       /* [0, 1) */
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return rad * cos(th);
}
