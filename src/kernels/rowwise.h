/* rowwise.h: one-row math: layernorm, RMSNorm and softmax over a row of n elements.
 *
 * The reductions run in a fixed left-to-right order in float, so a serial caller gets
 * the same bits every time. A parallel (CUDA) caller sums the row in a tree of partial
 * sums (same formulas, another order) and then uses the *_elem helpers below for each
 * element; its results match within a few ulp.
 */
#ifndef PE_KERNELS_ROWWISE_H
#define PE_KERNELS_ROWWISE_H

#include <math.h>
#include <stddef.h>

#include "kernels/kernel_defs.h"

/* The correction of pe_k_moments (below), given m0 and the second pass's sums c = sum(d)
 * and v = sum(d^2); the GPU's row grid sums them with block reductions, then calls this. */
PE_KFN void pe_k_moments_finish(float m0, float c, float v, size_t n, float eps, float *mean,
                                float *rstd)
{
    float var = (v - c * c / (float)n) / (float)n;
    *mean = m0 + c / (float)n;
    *rstd = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
}

/* mean and 1/sqrt(var + eps) of x(n), corrected two-pass (Bjorck): the first pass gives a
 * rough mean m0 (its float sum loses digits when |mean| >> std); the second sums the
 * deviations d = x - m0, which are small and exact enough, and corrects both moments:
 *   mean = m0 + sum(d) / n,  var = (sum(d^2) - sum(d)^2 / n) / n. */
PE_KFN void pe_k_moments(const float *x, size_t n, float eps, float *mean, float *rstd)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    float m0 = s / (float)n;
    float c = 0.0f, v = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = x[i] - m0;
        c += d;
        v += d * d;
    }
    pe_k_moments_finish(m0, c, v, n, eps, mean, rstd);
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

/* 1 / sqrt(mean(x^2) + eps) of x(n): the scale of RMSNorm (sum of squares left to right). */
PE_KFN float pe_k_rms_rstd(const float *x, size_t n, float eps)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return 1.0f / sqrtf(s / (float)n + eps);
}

/* One RMSNorm element, in Hugging Face's order: w * (x * rstd). */
PE_KFN float pe_k_rmsnorm_elem(float x, float rstd, float w) { return w * (x * rstd); }

/* out(n) = x(n) / sqrt(mean(x^2) + eps) * w(n) */
PE_KFN void pe_k_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps)
{
    float rstd = pe_k_rms_rstd(x, n, eps);
    for (size_t i = 0; i < n; i++)
        out[i] = pe_k_rmsnorm_elem(x[i], rstd, w[i]);
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
