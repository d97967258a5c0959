/* forward.h: one pipeline stage's forward pass on one worker, written once against the
 * backend interface (host and CUDA run the same code).
 *
 * A stage is a contiguous range of layers; under TP each layer is a shard (see shard.h)
 * and the stage runs the TP group's collectives inside it. Shapes (rows = micro-batch):
 *   x (rows, in of the first layer)  ->  y (rows, out of the last layer), both full width.
 *
 * Each Linear is one backend `linear` call (GEMM, bias and activation; on CUDA one cuBLASLt
 * matmul with an epilogue where cuBLASLt allows).
 *
 * Precision: fp32 throughout, or bf16: weights are stored in bf16 and every GEMM input
 * (the layer's activation) is bf16: the layer before writes it in bf16 (its fp32 result
 * after bias and activation, rounded to nearest even), or, after an all-reduce and at the
 * stage's input, it is rounded just before the GEMM. GEMMs accumulate in fp32; bias,
 * activation, collectives and the stage's output are fp32. Either way an activation is
 * rounded exactly once, at the same point of the math, so the result does not depend on
 * where stages and shards are cut.
 */
#ifndef PE_MODEL_FORWARD_H
#define PE_MODEL_FORWARD_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/hooks.h"
#include "model/mlp/mlp.h"
#include "model/mlp/shard.h"

typedef struct md_stage_layer {
    md_shard_kind kind;
    md_activation act;
    size_t in, out;     /* full widths */
    size_t in_t, out_t; /* this rank's slice of W: (out_t, in_t) */
    void *w;            /* device (out_t, in_t), float or bf16 (uint16_t) by the stage's dtype */
    float *b;           /* device (out_t); ROW: the whole (out) bias, added after the sum */
} md_stage_layer;

typedef struct md_stage {
    pe_dtype dtype;        /* of the weights and the GEMM inputs */
    int first, last;       /* global layer range [first, last) */
    int nlayers;
    md_stage_layer *layers; /* (nlayers) */
    size_t in, out;         /* full widths at the stage's ends */
    size_t max_width;       /* widest full activation inside the stage */
    size_t max_out_t;       /* widest COLUMN_GATHER slice */
} md_stage;

/* Device scratch for a stage at up to `rows` rows. */
typedef struct md_stage_scratch {
    size_t rows;   /* capacity in rows */
    float *a, *b;  /* (rows, max_width) each: ping-pong activations (in bf16 stages a
                    * layer's bf16 output uses the first half of the bytes) */
    float *gather; /* (tp, rows, max_out_t): all-gather landing buffer, NULL if unused */
    float *partial; /* (rows, max_width): a ROW layer's partial sums, NULL if unused; the
                     * all-reduce reads them and writes the layer's output (out of place:
                     * the host's in-place form needs a third pass) */
    uint16_t *xh;   /* (rows, max_width) bf16: an fp32 input rounded for its GEMM; NULL
                     * for fp32 stages */
    float *tmp;     /* (rows, max_width): linear's fp32 result before a bf16 output; NULL
                     * for fp32 stages */
} md_stage_scratch;


/* Puts this rank's shards of layers [first, last) on dev, in dtype. kinds from md_plan_tp.
 * bcast NULL: uploaded from m. Otherwise every rank of bcast holds the same shards and
 * calls this together: its rank 0 uploads them and broadcasts each tensor to the others,
 * which do not read m. */
pe_status md_stage_build(const be_ops *ops, be_device *dev, const md_mlp *m, int first,
                         int last, const md_shard_kind *kinds, int t, int tp, pe_dtype dtype,
                         be_comm *bcast, md_stage *out, pe_err *err);
void md_stage_free(const be_ops *ops, be_device *dev, md_stage *s);

/* Grows scratch to at least rows (keeps it when big enough). */
pe_status md_scratch_reserve(const be_ops *ops, be_device *dev, const md_stage *s, int tp,
                             size_t rows, md_stage_scratch *sc);
void md_scratch_free(const be_ops *ops, be_device *dev, md_stage_scratch *sc);

/* y (rows, s->out) = stage(x (rows, s->in)). x is not modified; y must not alias the
 * scratch. tp_comm may be NULL when tp == 1. */
pe_status md_stage_forward(const be_ops *ops, be_device *dev, be_comm *tp_comm, int tp,
                           const md_stage *s, md_stage_scratch *sc, const float *x, float *y,
                           size_t rows, const md_hooks *hooks);

#endif
