/* shard.h: how an MLP is cut over the grid: layer ranges for PP, weight slices for TP.
 *
 * TP (Megatron pairing): layers are paired (0,1), (2,3), ...; the first of a pair is
 * column-parallel (W split by output rows, the activation stays sharded), the second
 * row-parallel (W split by input columns, partial sums all-reduced, then bias and
 * activation). A layer with no partner (an odd last layer of a stage) is column-parallel
 * followed by an all-gather. With tp = 1 every layer is whole (MD_SHARD_NONE).
 * Pairing restarts at each PP stage's first layer, so no sharded activation crosses a stage.
 */
#ifndef PE_MODEL_SHARD_H
#define PE_MODEL_SHARD_H

#include "model/mlp/mlp.h"

typedef enum md_shard_kind {
    MD_SHARD_NONE = 0,   /* whole layer on every rank */
    MD_SHARD_COLUMN,     /* out split: rank t owns rows [t*out/tp, (t+1)*out/tp) of W and b */
    MD_SHARD_ROW,        /* in split: rank t owns columns [t*in/tp, ...) of W; b whole */
    MD_SHARD_COLUMN_GATHER /* column split, then all-gather of the outputs */
} md_shard_kind;

/* PP: stage p owns layers [first[p], first[p+1]); first has pp + 1 entries.
 * split (may be NULL): the layer count of each stage, pinned by hand (--split 3,5).
 * Otherwise stages are contiguous and balanced by FLOPs (the max stage cost is minimal;
 * among such cuts, the one with the least sum of squared stage costs). Every stage has at
 * least one layer: pp > nlayers is PE_EINVAL, as is a split that does not sum to nlayers. */
pe_status md_plan_stages(const md_mlp *m, int pp, const int *split, int *first, pe_err *err);

/* TP: the shard kind of every layer in [first, last) for degree tp; checks divisibility
 * and names the width and a fix when it fails. kinds has last - first entries. */
pe_status md_plan_tp(const md_mlp *m, int first, int last, int tp, md_shard_kind *kinds,
                     pe_err *err);

/* Rank t's slice of layer l under kind: w (out_t, in_t) and b (out_t). For ROW, b is the
 * whole bias (out), which every rank adds after the all-reduce. The split width must be
 * divisible by tp (PE_EINVAL otherwise; md_plan_tp checks it first). The caller frees *w
 * and *b with free(); on failure both are NULL. With w or b NULL only the shape
 * (out_t, in_t) is computed. */
pe_status md_shard_layer(const md_layer *l, md_shard_kind kind, int t, int tp, float **w,
                         float **b, size_t *out_t, size_t *in_t, pe_err *err);

#endif
