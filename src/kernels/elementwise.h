/* elementwise.h: one-element math: activations, bias, residual, SwiGLU. */
#ifndef PE_KERNELS_ELEMENTWISE_H
#define PE_KERNELS_ELEMENTWISE_H

#include <math.h>

#include "kernels/kernel_defs.h"

PE_KFN float pe_k_relu(float x) { return x > 0.0f ? x : 0.0f; }

/* GELU, tanh form (GPT-2's gelu_new): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715
 * x^3), computed as x * sigmoid(2u) = x / (1 + e^(-2u)), the same function: one exponential
 * (which the host vectorizes within a few ulp of expf), and no cancellation in 1 + tanh(u)
 * where u is very negative. e^(-2u) = inf gives -0, as the tanh form's limit. */
PE_KFN float pe_k_gelu(float x)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    float inner = k * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * inner));
}

PE_KFN float pe_k_add(float a, float b) { return a + b; }

/* SiLU (swish): x * sigmoid(x), written x / (1 + e^-x) (e^-x = inf gives -0, not NaN). */
PE_KFN float pe_k_silu(float x) { return x / (1.0f + expf(-x)); }

/* SwiGLU's product: silu(gate) * up (Llama's MLP: down(silu(gate(x)) * up(x))). */
PE_KFN float pe_k_silu_mul(float gate, float up) { return pe_k_silu(gate) * up; }

#endif
