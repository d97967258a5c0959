/* decoder.h: what the decoder families (GPT-2, Llama) share: the config, the part of the
 * model one worker holds, its weights in one device arena, and the family table that the
 * engine calls without knowing which family it runs.
 *
 * Dimension names, as llm.c: L layers, C hidden width, NH query heads, KVH key/value heads,
 * hd head dim, I MLP inner width, V vocabulary, maxT positions. A worker holds layers
 * [first, last) of them (its pipeline stage) and, under TP, its share of the heads, the MLP
 * columns and the vocabulary (its rank t of tp).
 *
 * Loading: md_decoder_open reads config.json, checks every tensor of the checkpoint against
 * it and keeps the files mapped; md_weights_load then uploads one worker's part into one
 * device allocation, converting tensor by tensor (a slice at a time) to the engine's dtype,
 * so a bf16 checkpoint is never held whole in fp32.
 */
#ifndef PE_MODEL_DECODER_H
#define PE_MODEL_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/format/hf.h"

#define MD_MAX_EOS 8
/* The largest dimension a config may give (layers, widths, heads, positions, vocab): every
 * index and product the forward pass forms from them then fits its integer types. */
#define MD_MAX_DIM (1L << 24)

/* ---- config ----------------------------------------------------------------------------- */

typedef struct md_config {
    pe_model_family family;
    char arch[64];      /* config.json's architectures[0] */
    int L, C, NH, KVH, hd, I, V, maxT;
    float eps;          /* of the norms */
    int tied;           /* the LM head is the token embedding */
    int qkv_bias;       /* q/k/v projections have biases (GPT-2, Qwen2) */
    int window;         /* sliding-window attention in positions (Mistral), 0 = none */
    float *inv_freq;    /* (hd / 2) RoPE frequencies after rope_scaling; NULL: learned
                         * positions (GPT-2) */
    int32_t bos;        /* -1 when none */
    int32_t eos[MD_MAX_EOS];
    int neos;
    size_t nparams;
} md_config;

/* ---- one worker's part ---------------------------------------------------------------------- */

typedef struct md_part {
    int first, last;    /* layers [first, last): this worker's pipeline stage */
    int t, tp;          /* TP rank and degree */
    int split_embedding; /* TP: the token table split by vocabulary (else whole on each rank) */
} md_part;

static inline int md_part_first_stage(const md_part *p) { return p->first == 0; }
static inline int md_part_last_stage(const md_part *p, const md_config *c)
{
    return p->last == c->L;
}

/* This worker's heads and widths under TP (tp = 1: the whole model). */
typedef struct md_shard {
    int NH, KVH;        /* query and KV heads of this rank */
    int KV0;            /* its first KV head (its first query head is t * NH) */
    int I;              /* MLP inner columns of this rank */
    int V, V0;          /* vocabulary rows of this rank, from row V0 (the vocabulary padded
                         * to a multiple of tp: the last rank's padding rows are zeros) */
    int tp;             /* ranks the vocabulary is split over (1: none) */
} md_shard;
md_shard md_shard_of(const md_config *c, const md_part *p);
/* The real (unpadded) vocabulary rows of rank t: V - t * V_t, between 0 and V_t. */
int md_shard_vocab_rows(const md_config *c, const md_shard *sh, int t);
#define MD_MAX_STAGES 64
/* The pipeline's stages: first[p] .. first[p + 1] are stage p's blocks (first[0] = 0,
 * first[pp] = L). With split (pp block counts, each >= 1, summing to L), as given; else
 * balanced by cost per token: a block's weights, the head's V x C on the last stage, the
 * embedding's lookup on the first (the largest stage as small as it can be). PE_EINVAL with
 * a message for more stages than blocks, or a split that does not fit. */
pe_status md_plan_decoder_stages(const md_config *c, int pp, const int *split, int *first,
                                 pe_err *err);

/* 0 when tp ranks can share the model's layers (heads, KV heads, MLP, vocabulary split
 * evenly); else -1 with why in msg and the degrees that can, listed. */
int md_tp_check(const md_config *c, int tp, char *msg, size_t len);

/* ---- weights ------------------------------------------------------------------------------- */

/* y (rows, out) = x (rows, in) W^T + b: W (out, in) in the model's dtype, b (out) fp32 or
 * NULL. Row-parallel layers (TP) hold their input columns: W (out, in / tp). */
typedef struct md_linear {
    void *w;
    float *b;
    size_t out, in;
} md_linear;

/* A norm's weight (and LayerNorm's bias), fp32 (C). */
typedef struct md_norm {
    float *w;
    float *b; /* NULL for RMSNorm */
} md_norm;

/* A token (or position) table (rows, C) in the model's dtype: rows [row0, row0 + rows) of
 * a vocabulary of vocab (a vocab-parallel shard, padded; else row0 0 and vocab = rows). */
typedef struct md_table {
    void *w;
    size_t rows, cols;
    size_t row0, vocab;
    int split;          /* a vocab-parallel shard: the lookups of the ranks are summed */
} md_table;

/* A worker's weights: the family's struct (gpt2_weights, llama_weights) with every pointer
 * in one device allocation. */
typedef struct md_weights {
    void *family;         /* the family's struct */
    void *arena;          /* device: every tensor */
    size_t arena_bytes;
    pe_dtype dtype;
    md_part part;
} md_weights;

/* ---- the family table -------------------------------------------------------------------- */

#define MD_MAX_PIECES 3

/* Part of a checkpoint tensor: logical rows [row0, row0 + rows) and columns [col0, col0 +
 * cols) of the (out, in) matrix it stands for. transposed: stored (in, out) (GPT-2's
 * Conv1D), so the loader reads it transposed. */
typedef struct md_piece {
    const st_tensor *src;
    const st_file *file;
    int transposed;
    size_t row0, rows;
    size_t col0, cols;
} md_piece;

/* One tensor of a worker: its pieces stacked by rows (fused q|k|v, gate|up), then pad_rows
 * zero rows (a vocabulary padded to a multiple of tp); or, for a tensor the checkpoint does
 * not hold (RoPE's frequencies), host values. A 1-D tensor of n values is (n, 1). The
 * loader writes its device address into *slot (and *slot2, a tied alias, when not NULL).
 * matrix: stored in the model's dtype; otherwise fp32 (norms, biases). */
typedef struct md_tensor {
    char name[128];
    void **slot, **slot2;
    int matrix;
    size_t rows, cols;
    size_t pad_rows;
    int npieces;
    md_piece pieces[MD_MAX_PIECES];
    const float *host; /* (rows, cols) when not from the checkpoint */
} md_tensor;

/* A growable list of tensors (a family's plan fills it). */
typedef struct md_tensor_list {
    md_tensor *v;
    int n, cap;
} md_tensor_list;

/* A zeroed new entry at the end of l, or NULL when out of memory. */
md_tensor *md_tensor_add(md_tensor_list *l);
void md_tensor_list_free(md_tensor_list *l);

/* Adds a tensor made of one whole checkpoint tensor (2-D (out, in), or 1-D as (n, 1)),
 * stored transposed when transposed; slot gets its address. */
pe_status md_plan_whole(md_tensor_list *l, const md_hf *hf, const char *name, int matrix,
                        int transposed, void **slot, pe_err *err);
/* Appends a piece of checkpoint tensor `name` to t: logical rows [row0, row0 + rows) and
 * columns [col0, col0 + cols) of its (out, in) matrix (stored transposed when transposed).
 * t->rows grows by rows; t->cols is set from the first piece. */
pe_status md_plan_piece(md_tensor *t, const md_hf *hf, const char *name, int transposed,
                        size_t row0, size_t rows, size_t col0, size_t cols, pe_err *err);

typedef struct md_ctx md_ctx;

typedef struct md_family {
    const char *name; /* "gpt2", "llama" */
    /* Fills cfg from config.json and checks every tensor the model needs against it
     * (messages name the file, the tensor, the shape found and the shape expected). */
    pe_status (*configure)(const md_hf *hf, const char *arch, md_config *cfg, pe_err *err);
    /* Allocates the family's weights struct for part (host; its pointers are filled by the
     * loader through the slots) and lists the tensors the part needs. */
    pe_status (*plan)(const md_hf *hf, const md_config *cfg, const md_part *part, void **family,
                      md_tensor_list *list, pe_err *err);
    void (*free_family)(void *family);
    /* The forward over one step (blocks.h): the part's layers; embedding on the first
     * stage, the final norm, the head and the logits' consumers on the last. */
    void (*forward)(md_ctx *c, const md_config *cfg, const void *family);
} md_family;

extern const md_family md_family_gpt2;
extern const md_family md_family_llama;

/* ---- a loaded decoder (host side) --------------------------------------------------------- */

typedef struct md_decoder {
    md_hf hf;              /* the directory, mapped */
    md_config cfg;
    const md_family *family;
} md_decoder;

/* 1 when path looks like a Hugging Face directory (a directory holding config.json). */
int md_decoder_is_dir(const char *path);

/* Opens a Hugging Face directory: architecture -> family, config, every tensor checked.
 * An unknown architecture is PE_EFORMAT naming it and the ones supported. */
pe_status md_decoder_open(const char *dir, md_decoder *m, pe_err *err);
void md_decoder_close(md_decoder *m);

/* Public model info from the config. */
void md_decoder_info(const md_decoder *m, pe_model_info *out);

/* Uploads part of the model to dev in dtype (matrices; norms and biases stay fp32): one
 * allocation, filled tensor by tensor a slice at a time, the checkpoint's pages released as
 * they are used. */
pe_status md_weights_load(const md_decoder *m, const md_part *part, pe_dtype dtype,
                          const be_ops *ops, be_device *dev, md_weights *out, pe_err *err);
void md_weights_free(const md_decoder *m, const be_ops *ops, be_device *dev, md_weights *w);

/* KV elements per position for one layer and one KV head: K and V of hd each. The bytes
 * of one block of a worker holding `layers` layers and `kv_heads` heads. */
size_t md_kv_block_bytes(const md_config *c, int layers, int kv_heads, int block_tokens,
                         pe_dtype dtype);

/* A parsing helper for the families: the tensor `name`, required, with shape (d0, d1) (or
 * (d0) when d1 == 0); messages name the file, the tensor and both shapes. */
pe_status md_expect(const md_hf *hf, const char *name, size_t d0, size_t d1,
                    const st_tensor **t, const st_file **f, pe_err *err);

#endif
