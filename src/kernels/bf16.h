/* bf16.h: bfloat16 conversions. A bf16 is the upper 16 bits of an IEEE-754 float (sign,
 * 8 exponent bits, 7 mantissa bits), kept in a uint16_t.
 *
 * Float to bf16 rounds to nearest, ties to even, as __float2bfloat16_rn and cuBLAS do;
 * NaN stays a (quiet) NaN. bf16 to float is exact. A product of two bf16 values is exact
 * in float (8 + 8 significant bits < 24), so a bf16 GEMM with fp32 accumulation differs
 * between backends only in the order of its float sums.
 */
#ifndef PE_KERNELS_BF16_H
#define PE_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernel_defs.h"

PE_KFN uint16_t pe_k_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, force a quiet NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round half to even on the dropped 16 bits */
    return (uint16_t)(u >> 16);
}

PE_KFN float pe_k_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Element i of an array of fp32 (bf16 = 0) or bf16 (bf16 = 1) values, as a float: an
 * embedding table's or a KV pool's. */
PE_KFN float pe_k_load_elem(const void *p, int bf16, size_t i)
{
    return bf16 ? pe_k_from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* x rounded to the nearest bf16, as a float. */
PE_KFN float pe_k_round_bf16(float x) { return pe_k_from_bf16(pe_k_to_bf16(x)); }

#endif
