/* hb_kernels.c: the host backend's kernels: loops over the element math of src/kernels/. */
#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "kernels/gather.h"
#include "kernels/rowwise.h"

pe_status hb_bias_add(be_device *dev, float *x, const float *bias, size_t rows, size_t cols)
{
    HB_NEED(dev, x, rows * cols, "bias_add");
    HB_NEED(dev, bias, rows * cols, "bias_add");
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * cols; /* (cols) */
        for (size_t c = 0; c < cols; c++)
            row[c] = pe_k_add(row[c], bias[c]);
    }
    return PE_OK;
}

pe_status hb_relu(be_device *dev, float *x, size_t n)
{
    HB_NEED(dev, x, n, "relu");
    for (size_t i = 0; i < n; i++)
        x[i] = pe_k_relu(x[i]);
    return PE_OK;
}

pe_status hb_gelu(be_device *dev, float *x, size_t n)
{
    HB_NEED(dev, x, n, "gelu");
    hb_simd_get()->gelu(x, n);
    return PE_OK;
}

typedef struct ln_job {
    float *out;
    const float *x, *gamma, *beta;
    size_t cols;
    float eps;
} ln_job;

static void ln_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const ln_job *j = arg;
    (void)thread;
    for (size_t r = r0; r < r1; r++)
        pe_k_layernorm_row(j->out + r * j->cols, j->x + r * j->cols, j->gamma, j->beta, j->cols,
                           j->eps);
}

pe_status hb_layernorm(be_device *dev, float *out, const float *x, const float *gamma,
                       const float *beta, size_t rows, size_t cols, float eps)
{
    if (rows == 0)
        return PE_OK;
    if (cols == 0)
        return hb_fail(dev, PE_EINVAL,
                       "layernorm on host device %d: rows=%zu of 0 columns have no mean; "
                       "cols must be > 0",
                       dev->id, rows);
    if (!(eps >= 0.0f))
        return hb_fail(dev, PE_EINVAL, "layernorm on host device %d: eps=%g must be >= 0",
                       dev->id, (double)eps);
    HB_NEED(dev, out, 1, "layernorm");
    HB_NEED(dev, x, 1, "layernorm");
    HB_NEED(dev, gamma, 1, "layernorm");
    HB_NEED(dev, beta, 1, "layernorm");
    ln_job j = {out, x, gamma, beta, cols, eps}; /* rows split over the threads: a row's
                                                  * math is the same wherever it runs */
    hb_for(dev, rows, hb_row_grain(cols), ln_rows, &j);
    return PE_OK;
}

pe_status hb_softmax(be_device *dev, float *x, size_t rows, size_t cols)
{
    HB_NEED(dev, x, rows * cols, "softmax");
    for (size_t r = 0; r < rows; r++)
        pe_k_softmax_row(x + r * cols, cols);
    return PE_OK;
}

typedef struct add_job {
    float *x;
    const float *r;
} add_job;

static void add_range(void *arg, size_t i0, size_t i1, int thread)
{
    const add_job *j = arg;
    (void)thread;
    for (size_t i = i0; i < i1; i++)
        j->x[i] = pe_k_add(j->x[i], j->r[i]);
}

pe_status hb_residual_add(be_device *dev, float *x, const float *r, size_t n)
{
    HB_NEED(dev, x, n, "residual_add");
    HB_NEED(dev, r, n, "residual_add");
    add_job j = {x, r};
    hb_for(dev, n, 1 << 16, add_range, &j); /* a prefill's (T, C); a decode's runs inline */
    return PE_OK;
}

pe_status hb_embedding(be_device *dev, pe_dtype dtype, float *out, const void *table,
                       const int32_t *ids, size_t n, size_t dim, size_t vocab, size_t row0,
                       size_t nrows)
{
    if (n == 0)
        return PE_OK;
    HB_NEED(dev, ids, 1, "embedding");
    HB_NEED(dev, out, dim, "embedding");
    HB_NEED(dev, table, dim, "embedding");
    /* Every id is checked before any row is written: a bad id leaves out untouched. */
    for (size_t i = 0; i < n; i++)
        if (!pe_k_id_in_range(ids[i], vocab))
            return hb_fail(dev, PE_EINVAL,
                           "embedding on host device %d: token id %d at position %zu is outside "
                           "the vocabulary [0, %zu); check the tokenizer and the model's vocab",
                           dev->id, (int)ids[i], i, vocab);
    for (size_t i = 0; i < n; i++)
        pe_k_embedding_shard_row(out + i * dim, table, dtype == PE_DTYPE_BF16, (size_t)ids[i],
                                 row0, nrows, dim);
    return PE_OK;
}

typedef struct narrow_job {
    uint16_t *out;
    const float *in;
} narrow_job;

static void narrow_range(void *arg, size_t i0, size_t i1, int thread)
{
    (void)thread;
    const narrow_job *j = arg;
    hb_simd_get()->narrow(j->out + i0, j->in + i0, i1 - i0);
}

/* Pieces of 16384 values: a prefill's activations (rows x hidden) split over the threads,
 * a decode step's few rows in one piece. */
#define HB_NARROW_GRAIN 16384

pe_status hb_to_bf16(be_device *dev, uint16_t *out, const float *in, size_t n)
{
    HB_NEED(dev, out, n, "to_bf16");
    HB_NEED(dev, in, n, "to_bf16");
    narrow_job j = {out, in};
    hb_for(dev, n, HB_NARROW_GRAIN, narrow_range, &j);
    return PE_OK;
}

typedef struct silu_job {
    float *out;
    const float *gate_up;
    size_t n;
} silu_job;

static void silu_rows(void *arg, size_t r0, size_t r1, int thread)
{
    const silu_job *j = arg;
    const hb_simd *v = hb_simd_get();
    (void)thread;
    for (size_t r = r0; r < r1; r++) {
        const float *g = j->gate_up + r * 2 * j->n, *u = g + j->n; /* (n), (n) */
        v->silu_mul(j->out + r * j->n, g, u, j->n);
    }
}

pe_status hb_silu_mul(be_device *dev, float *out, const float *gate_up, size_t rows, size_t n)
{
    HB_NEED(dev, out, rows * n, "silu_mul");
    HB_NEED(dev, gate_up, rows * n, "silu_mul");
    if (rows * n == 0)
        return PE_OK;
    silu_job j = {out, gate_up, n};
    /* out may overlap gate_up (in place: row r's output lands on rows already read), which
     * only the serial order keeps right; distinct buffers split over the threads. */
    const char *o = (const char *)out, *g = (const char *)gate_up;
    int overlap = o < g + rows * 2 * n * sizeof(float) && g < o + rows * n * sizeof(float);
    hb_for(dev, rows, overlap ? rows : hb_row_grain(n), silu_rows, &j);
    return PE_OK;
}
