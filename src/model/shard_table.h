/* shard_table.h: how a decoder family's tensors are cut over the TP ranks, as a table.
 *
 * Each family lists its tensors once: where each lands in the family's weights struct,
 * which checkpoint tensors it is made of (pieces stacked by rows: q|k|v, gate|up), and how
 * each piece is split over the ranks:
 *
 *   REPLICATED  every rank holds it whole (norms, a row-parallel layer's bias, positions)
 *   COLUMN      output rows split evenly (column-parallel: c_fc, gate, up, and their biases)
 *   ROW         input columns split evenly (row-parallel: mlp c_proj, down)
 *   Q_HEADS     output rows of this rank's query heads (q, GPT-2's c_attn q third)
 *   KV_HEADS    output rows of this rank's KV heads (k, v; the one its query heads read
 *               when there are fewer KV heads than ranks: replicated as vLLM does)
 *   ROW_HEADS   input columns of this rank's query heads (o_proj, attn c_proj)
 *   VOCAB       rows of this rank's range of the vocabulary, padded with zero rows to a
 *               multiple of tp (the LM head)
 *   EMBEDDING   the token table: VOCAB when the part splits it (md_part.split_embedding),
 *               else REPLICATED
 *
 * md_plan_table turns a table into the loader's tensor list for one worker.
 */
#ifndef PE_MODEL_SHARD_TABLE_H
#define PE_MODEL_SHARD_TABLE_H

#include <stddef.h>

#include "model/decoder.h"

typedef enum md_split {
    MD_SPLIT_REPLICATED = 0,
    MD_SPLIT_COLUMN,
    MD_SPLIT_ROW,
    MD_SPLIT_Q_HEADS,
    MD_SPLIT_KV_HEADS,
    MD_SPLIT_ROW_HEADS,
    MD_SPLIT_VOCAB,
    MD_SPLIT_EMBEDDING
} md_split;

/* What a tensor's slot in the weights struct is. */
typedef enum md_slot_kind {
    MD_SLOT_LINEAR = 0, /* an md_linear: its w, and out/in from the tensor's shape */
    MD_SLOT_BIAS,       /* a float * (a linear's b) */
    MD_SLOT_NORM,       /* a float * (a norm's weight or bias) */
    MD_SLOT_TABLE       /* an md_table: its w, rows and cols */
} md_slot_kind;

/* One checkpoint tensor (or a third of one: segment k of n row segments, GPT-2's fused
 * c_attn) and its split. The name may hold one %d: the layer. */
typedef struct md_piece_rule {
    const char *name;
    md_split split;
    int segment, nsegments; /* nsegments 0: the whole tensor */
} md_piece_rule;

typedef struct md_tensor_rule {
    size_t slot;          /* offsetof the field in the layer struct (or the weights struct) */
    md_slot_kind kind;
    int transposed;       /* stored (in, out): GPT-2's Conv1D */
    unsigned needs;       /* a flag of the family's (an optional bias); 0: always there */
    md_piece_rule pieces[MD_MAX_PIECES];
} md_tensor_rule;

/* Adds to l the tensors of `rules` (n of them) for layer `layer` (names get prefix first, and
 * the layer for their %d), with slots relative to base; a rule whose `needs` flags are not
 * all in `have` is skipped. Returns the last tensor added in *last (may be NULL). */
pe_status md_plan_table(md_tensor_list *l, const md_hf *hf, const md_config *c,
                        const md_part *part, const md_tensor_rule *rules, size_t n,
                        const char *prefix, int layer, void *base, unsigned have, pe_err *err);

#endif
