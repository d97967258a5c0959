/* forward.c: one pipeline stage's forward pass on one worker (see forward.h). */
#include "model/mlp/forward.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Bytes of an n-element weight in dtype, rounded up to whole floats so that a broadcast
 * (counted in floats) moves it entire. */
static size_t weight_bytes(pe_dtype dtype, size_t n)
{
    size_t bytes = n * (dtype == PE_DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float));
    return (bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float);
}

/* Copies host(n) to dev at p, rounded to bf16 first when dtype says so. */
static pe_status upload(const be_ops *ops, be_device *dev, pe_dtype dtype, const float *host,
                        size_t n, void *p, pe_err *err)
{
    if (dtype == PE_DTYPE_FP32)
        return ops->copy_h2d(dev, p, host, n * sizeof(float));
    uint16_t *h = malloc(weight_bytes(dtype, n));
    if (!h)
        return pe_fail(err, PE_ENOMEM, "out of host memory rounding %zu weights to bf16", n);
    for (size_t i = 0; i < n; i++)
        h[i] = pe_k_to_bf16(host[i]);
    if (n % 2)
        h[n] = 0; /* the padding a broadcast also moves */
    pe_status s = ops->copy_h2d(dev, p, h, weight_bytes(dtype, n));
    free(h);
    return s;
}

/* Layer l's shard on dev: uploaded from the model (source) and/or broadcast from rank 0
 * of bcast. */
static pe_status build_layer(const be_ops *ops, be_device *dev, const md_layer *l,
                             md_shard_kind kind, int t, int tp, pe_dtype dtype, be_comm *bcast,
                             md_stage_layer *sl, pe_err *err)
{
    const int source = !bcast || ops->comm_rank(bcast) == 0;
    float *w = NULL, *b = NULL;
    size_t out_t = 0, in_t = 0;
    pe_status s = md_shard_layer(l, kind, t, tp, source ? &w : NULL, source ? &b : NULL,
                                 &out_t, &in_t, err);
    if (s != PE_OK)
        return s;
    size_t nb = kind == MD_SHARD_ROW ? l->out : out_t;
    const size_t wbytes = weight_bytes(dtype, out_t * in_t);
    void *dw = NULL, *db = NULL;
    const char *step = "allocate";
    s = ops->alloc(dev, wbytes, &dw);
    if (s == PE_OK)
        s = ops->alloc(dev, nb * sizeof(float), &db);
    if (s == PE_OK && source) {
        step = "upload";
        s = upload(ops, dev, dtype, w, out_t * in_t, dw, err);
        if (s == PE_OK)
            s = ops->copy_h2d(dev, db, b, nb * sizeof(float));
    }
    if (s == PE_OK && bcast) {
        step = "broadcast";
        s = ops->broadcast(bcast, dw, wbytes / sizeof(float), 0);
        if (s == PE_OK)
            s = ops->broadcast(bcast, db, nb, 0);
    }
    free(w);
    free(b);
    sl->w = dw;
    sl->b = db;
    sl->kind = kind;
    sl->act = l->act;
    sl->in = l->in;
    sl->out = l->out;
    sl->in_t = in_t;
    sl->out_t = out_t;
    if (s != PE_OK && err && !err->msg[0])
        pe_fail(err, s, "cannot %s its %zu x %zu shard on the device: %s", step, out_t, in_t,
                ops->last_error(dev));
    return s;
}

pe_status md_stage_build(const be_ops *ops, be_device *dev, const md_mlp *m, int first,
                         int last, const md_shard_kind *kinds, int t, int tp, pe_dtype dtype,
                         be_comm *bcast, md_stage *out, pe_err *err)
{
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->first = first;
    out->last = last;
    out->nlayers = last - first;
    out->layers = calloc((size_t)out->nlayers, sizeof *out->layers);
    if (!out->layers)
        return pe_fail(err, PE_ENOMEM, "out of host memory for the stage's layer table");
    out->in = m->layers[first].in;
    out->out = m->layers[last - 1].out;
    for (int k = 0; k < out->nlayers; k++) {
        const md_layer *l = &m->layers[first + k];
        pe_err lerr = {{0}};
        pe_status s = build_layer(ops, dev, l, kinds[k], t, tp, dtype, bcast, &out->layers[k],
                                  &lerr);
        if (s != PE_OK) {
            pe_fail(err, s, "layer %d: %s", first + k, lerr.msg);
            md_stage_free(ops, dev, out);
            return s;
        }
        out->max_width = max_size(out->max_width, max_size(l->in, l->out));
        if (kinds[k] == MD_SHARD_COLUMN_GATHER)
            out->max_out_t = max_size(out->max_out_t, out->layers[k].out_t);
    }
    return PE_OK;
}

void md_stage_free(const be_ops *ops, be_device *dev, md_stage *s)
{
    for (int k = 0; s->layers && k < s->nlayers; k++) {
        if (s->layers[k].w)
            ops->free(dev, s->layers[k].w);
        if (s->layers[k].b)
            ops->free(dev, s->layers[k].b);
    }
    free(s->layers);
    memset(s, 0, sizeof *s);
}

void md_scratch_free(const be_ops *ops, be_device *dev, md_stage_scratch *sc)
{
    void *bufs[6] = {sc->a, sc->b, sc->gather, sc->partial, sc->xh, sc->tmp};
    for (int i = 0; i < 6; i++)
        if (bufs[i])
            ops->free(dev, bufs[i]);
    memset(sc, 0, sizeof *sc);
}

pe_status md_scratch_reserve(const be_ops *ops, be_device *dev, const md_stage *s, int tp,
                             size_t rows, md_stage_scratch *sc)
{
    if (sc->rows >= rows)
        return PE_OK;
    md_scratch_free(ops, dev, sc);
    size_t n = rows * s->max_width;
    int has_row = 0;
    for (int k = 0; k < s->nlayers; k++)
        has_row |= s->layers[k].kind == MD_SHARD_ROW;
    void *a = NULL, *b = NULL, *g = NULL, *p = NULL, *xh = NULL, *tmp = NULL;
    pe_status st = ops->alloc(dev, n * sizeof(float), &a);
    if (st == PE_OK)
        st = ops->alloc(dev, n * sizeof(float), &b);
    if (st == PE_OK && s->max_out_t)
        st = ops->alloc(dev, (size_t)tp * rows * s->max_out_t * sizeof(float), &g);
    if (st == PE_OK && has_row)
        st = ops->alloc(dev, n * sizeof(float), &p);
    if (st == PE_OK && s->dtype == PE_DTYPE_BF16)
        st = ops->alloc(dev, n * sizeof(uint16_t), &xh);
    if (st == PE_OK && s->dtype == PE_DTYPE_BF16)
        st = ops->alloc(dev, n * sizeof(float), &tmp);
    sc->xh = xh;
    sc->tmp = tmp;
    sc->a = a;
    sc->b = b;
    sc->gather = g;
    sc->partial = p;
    if (st != PE_OK) {
        md_scratch_free(ops, dev, sc);
        return st;
    }
    sc->rows = rows;
    return PE_OK;
}

static be_act act_of(md_activation a)
{
    switch (a) {
    case MD_ACT_NONE: return BE_ACT_NONE;
    case MD_ACT_RELU: return BE_ACT_RELU;
    case MD_ACT_GELU: return BE_ACT_GELU;
    }
    return BE_ACT_NONE;
}

static pe_status activate(const be_ops *ops, be_device *dev, md_activation act, float *x,
                          size_t n)
{
    switch (act) {
    case MD_ACT_NONE: return PE_OK;
    case MD_ACT_RELU: return ops->relu(dev, x, n);
    case MD_ACT_GELU: return ops->gelu(dev, x, n);
    }
    return PE_EINTERNAL;
}

/* An activation: fp32, or (bf16 stages) already rounded to bf16 by the layer before. */
typedef struct md_act_buf {
    const void *p; /* (rows, width) */
    int bf16;
} md_act_buf;

/* x (rows, n) as a GEMM input of the stage's dtype: itself, or rounded into sc->xh. */
static pe_status gemm_input(const be_ops *ops, be_device *dev, pe_dtype dtype,
                            md_stage_scratch *sc, md_act_buf x, size_t n, const void **out)
{
    *out = x.p;
    if (dtype == PE_DTYPE_FP32 || x.bf16)
        return PE_OK;
    *out = sc->xh;
    return ops->to_bf16(dev, sc->xh, x.p, n);
}

static pe_status timed_collective(const md_hooks *hooks, uint64_t start, pe_status s)
{
    md_collective_done(hooks, start);
    return s;
}

/* One layer: x -> y (bf16 when y_bf16, only for NONE and COLUMN layers). spare is a free
 * scratch buffer (rows, max_width) for the gather. */
static pe_status layer_forward(const be_ops *ops, be_device *dev, be_comm *tp_comm, int tp,
                               pe_dtype dtype, const md_stage_layer *l, md_stage_scratch *sc,
                               md_act_buf x, void *y, int y_bf16, float *spare, size_t rows,
                               const md_hooks *hooks)
{
    const void *in;
    pe_status s = gemm_input(ops, dev, dtype, sc, x, rows * l->in_t, &in);
    if (s != PE_OK)
        return s;
    switch (l->kind) {
    case MD_SHARD_NONE:
    case MD_SHARD_COLUMN: /* y (rows, out_t): this rank's columns of the output */
        return ops->linear(dev, dtype, rows, l->out_t, l->in_t, in, l->w, l->b, act_of(l->act),
                           y, y_bf16, y_bf16 ? sc->tmp : NULL);
    case MD_SHARD_ROW: { /* x (rows, in_t) sharded; partial sums (rows, out) all-reduced */
        s = ops->linear(dev, dtype, rows, l->out_t, l->in_t, in, l->w, NULL, BE_ACT_NONE,
                        sc->partial, 0, NULL);
        if (s != PE_OK)
            return s;
        uint64_t t0 = md_now(hooks);
        s = timed_collective(hooks, t0,
                             ops->allreduce_sum(tp_comm, sc->partial, y, rows * l->out));
        if (s == PE_OK)
            s = ops->bias_add(dev, y, l->b, rows, l->out);
        if (s == PE_OK)
            s = activate(ops, dev, l->act, y, rows * l->out);
        return s;
    }
    case MD_SHARD_COLUMN_GATHER: { /* spare (rows, out_t) -> gather (tp, rows, out_t) -> y */
        s = ops->linear(dev, dtype, rows, l->out_t, l->in_t, in, l->w, l->b, act_of(l->act),
                        spare, 0, NULL);
        if (s != PE_OK)
            return s;
        uint64_t t0 = md_now(hooks);
        s = timed_collective(hooks, t0,
                             ops->allgather(tp_comm, spare, sc->gather, rows * l->out_t));
        const size_t row_bytes = l->out_t * sizeof(float);
        for (int r = 0; s == PE_OK && r < tp; r++) /* rank r's block -> columns of y */
            s = ops->copy_d2d_2d(dev, (float *)y + (size_t)r * l->out_t,
                                 l->out * sizeof(float), sc->gather + (size_t)r * rows * l->out_t,
                                 row_bytes, row_bytes, rows);
        return s;
    }
    }
    return PE_EINTERNAL;
}

pe_status md_stage_forward(const be_ops *ops, be_device *dev, be_comm *tp_comm, int tp,
                           const md_stage *s, md_stage_scratch *sc, const float *x, float *y,
                           size_t rows, const md_hooks *hooks)
{
    /* Activations ping-pong between sc->a and sc->b; the last layer writes y. A gather
     * layer is always a stage's last (md_plan_tp pairs within the stage), so one of a/b,
     * the one that is not its input, is free for its slice. In bf16 a NONE or COLUMN
     * layer that is not the last writes its output in bf16, the next GEMM's input; a ROW
     * layer's output is fp32 (it comes out of the all-reduce) and is rounded by the next
     * layer. */
    md_act_buf cur = {x, 0};
    for (int k = 0; k < s->nlayers; k++) {
        const md_stage_layer *l = &s->layers[k];
        const int last = k == s->nlayers - 1;
        float *other = cur.p == sc->a ? sc->b : sc->a;
        void *dst = last ? (void *)y : other;
        const int dst_bf16 = s->dtype == PE_DTYPE_BF16 && !last &&
                             (l->kind == MD_SHARD_NONE || l->kind == MD_SHARD_COLUMN);
        if (l->kind == MD_SHARD_COLUMN_GATHER && !last)
            return PE_EINTERNAL;
        pe_status st = layer_forward(ops, dev, tp_comm, tp, s->dtype, l, sc, cur, dst, dst_bf16,
                                     other, rows, hooks);
        if (st != PE_OK)
            return st;
        cur = (md_act_buf){dst, dst_bf16};
    }
    return PE_OK;
}
