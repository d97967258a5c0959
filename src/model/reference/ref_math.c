/* ref_math.c: the naive reference's math, plain loops in double precision: bf16 rounding,
 * weight rows, Linear and Conv1D, LayerNorm, RMSNorm, the activations, RoPE, attention. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/reference/ref.h"

double md_ref_bf16(double x)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int e;
    frexp(x, &e);                        /* x = m 2^e, 0.5 <= |m| < 1 */
    double q = nearbyint(ldexp(x, 8 - e)); /* 8 significant bits, ties to even */
    return ldexp(q, e - 8);
}

void md_ref_row(const md_ref_w *w, size_t r, size_t len, double *out, int bf16)
{
    const st_tensor *t = w->t;
    const unsigned char *p = (const unsigned char *)t->data;
    for (size_t i = 0; i < len; i++) {
        size_t k = r * len + i;
        double v;
        if (t->dtype == ST_F32) {
            float f;
            memcpy(&f, p + 4 * k, sizeof f);
            v = f;
        } else {
            uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
            v = t->dtype == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
        }
        out[i] = bf16 ? md_ref_bf16(v) : v;
    }
}

pe_status md_ref_linear(double *y, const double *x, size_t n, size_t in, size_t out,
                        const md_ref_w *w, md_ref_layout layout, const md_ref_w *b, int bf16,
                        pe_err *err)
{
    size_t rowlen = layout == MD_REF_OUT_IN ? in : out;
    double *row = malloc((rowlen > out ? rowlen : out) * sizeof *row);
    double *xr = bf16 ? malloc(n * in * sizeof *xr) : NULL;
    if (!row || (bf16 && !xr)) {
        free(row);
        free(xr);
        return pe_fail(err, PE_ENOMEM, "the reference: out of memory for a %zu x %zu layer", out,
                       in);
    }
    if (bf16) /* the GEMM's input activation, rounded as the engine rounds it */
        for (size_t i = 0; i < n * in; i++)
            xr[i] = md_ref_bf16(x[i]);
    else
        xr = (double *)x;
    /* biases stay as the file holds them */
    if (b && b->t)
        md_ref_row(b, 0, out, row, 0);
    for (size_t t = 0; t < n; t++)
        for (size_t o = 0; o < out; o++)
            y[t * out + o] = b && b->t ? row[o] : 0.0;
    if (layout == MD_REF_OUT_IN) {
        for (size_t o = 0; o < out; o++) { /* y[t][o] += sum_i x[t][i] W[o][i] */
            md_ref_row(w, o, in, row, bf16);
            for (size_t t = 0; t < n; t++) {
                double s = 0.0;
                for (size_t i = 0; i < in; i++)
                    s += xr[t * in + i] * row[i];
                y[t * out + o] += s;
            }
        }
    } else {
        for (size_t i = 0; i < in; i++) { /* y[t][o] += x[t][i] W[i][o] */
            md_ref_row(w, i, out, row, bf16);
            for (size_t t = 0; t < n; t++)
                for (size_t o = 0; o < out; o++)
                    y[t * out + o] += xr[t * in + i] * row[o];
        }
    }
    if (bf16)
        free(xr);
    free(row);
    return PE_OK;
}

/* Element i of a (C) norm parameter, as the file holds it (norm weights are not rounded). */
static double md_ref_at(const md_ref_w *w, size_t i)
{
    double v;
    md_ref_row(w, i, 1, &v, 0);
    return v;
}

void md_ref_layernorm(double *y, const double *x, size_t n, size_t C, const md_ref_w *w,
                      const md_ref_w *b, double eps)
{
    for (size_t t = 0; t < n; t++) {
        const double *xt = x + t * C;
        double mean = 0.0, var = 0.0;
        for (size_t i = 0; i < C; i++)
            mean += xt[i];
        mean /= (double)C;
        for (size_t i = 0; i < C; i++)
            var += (xt[i] - mean) * (xt[i] - mean);
        var /= (double)C;
        double inv = 1.0 / sqrt(var + eps);
        for (size_t i = 0; i < C; i++)
            y[t * C + i] = (xt[i] - mean) * inv * md_ref_at(w, i) + md_ref_at(b, i);
    }
}

void md_ref_rmsnorm(double *y, const double *x, size_t n, size_t C, const md_ref_w *w,
                    double eps)
{
    for (size_t t = 0; t < n; t++) {
        const double *xt = x + t * C;
        double ms = 0.0;
        for (size_t i = 0; i < C; i++)
            ms += xt[i] * xt[i];
        ms /= (double)C;
        double inv = 1.0 / sqrt(ms + eps);
        for (size_t i = 0; i < C; i++)
            y[t * C + i] = md_ref_at(w, i) * (xt[i] * inv);
    }
}

double md_ref_gelu_tanh(double x)
{
    const double k = 0.7978845608028654; /* sqrt(2 / pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

double md_ref_gelu_erf(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

double md_ref_silu(double x) { return x / (1.0 + exp(-x)); }

void md_ref_rope(double *x, size_t n, int nheads, int hd, const float *inv_freq)
{
    int half = hd / 2;
    for (size_t pos = 0; pos < n; pos++)
        for (int h = 0; h < nheads; h++) {
            double *v = x + (pos * (size_t)nheads + (size_t)h) * (size_t)hd;
            for (int i = 0; i < half; i++) {
                /* HF: freqs = inv_freq @ position_ids in float32, cos/sin of that float */
                float angle = (float)pos * inv_freq[i];
                double c = cos((double)angle), s = sin((double)angle);
                double a = v[i], b = v[i + half]; /* rotate_half: (-x2, x1) */
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
}

pe_status md_ref_attention(double *out, const double *q, const double *k, const double *v,
                           size_t n, int H, int KVH, int hd, double scale, int window,
                           pe_err *err)
{
    double *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return pe_fail(err, PE_ENOMEM, "the reference: out of memory for %zu scores", n);
    int rep = H / KVH; /* repeat_kv: KV head g serves query heads g rep .. g rep + rep - 1 */
    size_t qw = (size_t)H * (size_t)hd, kw = (size_t)KVH * (size_t)hd;
    for (size_t t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const double *qt = q + t * qw + (size_t)h * (size_t)hd;
            size_t g = (size_t)(h / rep) * (size_t)hd;
            size_t first = window > 0 && t + 1 > (size_t)window ? t + 1 - (size_t)window : 0;
            double mx = -INFINITY, z = 0.0;
            for (size_t j = first; j <= t; j++) {
                double s = 0.0;
                for (int d = 0; d < hd; d++)
                    s += qt[d] * k[j * kw + g + (size_t)d];
                p[j] = s * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (size_t j = first; j <= t; j++) {
                p[j] = exp(p[j] - mx);
                z += p[j];
            }
            double *ot = out + t * qw + (size_t)h * (size_t)hd;
            for (int d = 0; d < hd; d++) {
                double s = 0.0;
                for (size_t j = first; j <= t; j++)
                    s += p[j] * v[j * kw + g + (size_t)d];
                ot[d] = s / z;
            }
        }
    free(p);
    return PE_OK;
}
