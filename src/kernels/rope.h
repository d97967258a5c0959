/* rope.h: rotary position embedding, rotate-half layout (Hugging Face's Llama, Mistral,
 * Qwen2): dimension i of a head pairs with dimension i + hd/2, and the pair turns by the
 * angle pos * inv_freq[i].
 *
 * HF computes q * cos + rotate_half(q) * sin in float32, with the angle pos * inv_freq in
 * float32; so do we. inv_freq (hd/2) comes from the model's rope_theta and rope_scaling
 * (computed once at load, src/model/llama/).
 */
#ifndef PE_KERNELS_ROPE_H
#define PE_KERNELS_ROPE_H

#include <math.h>
#include <stdint.h>

#include "kernels/kernel_defs.h"

/* The angle of pair i at position pos, in float32 as HF. */
PE_KFN float pe_k_rope_angle(int32_t pos, float inv_freq) { return (float)pos * inv_freq; }

/* Turns the pair (a, b) by the angle whose cosine is c and sine s:
 *   a' = a cos - b sin,  b' = b cos + a sin. */
PE_KFN void pe_k_rope_pair(float *a, float *b, float c, float s)
{
    float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x1 * c + x0 * s;
}

/* One head x(hd) at position pos, in place. */
PE_KFN void pe_k_rope_head(float *x, int hd, int32_t pos, const float *inv_freq)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float angle = pe_k_rope_angle(pos, inv_freq[i]);
        pe_k_rope_pair(&x[i], &x[i + half], cosf(angle), sinf(angle));
    }
}

#endif
