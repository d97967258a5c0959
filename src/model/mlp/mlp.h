/* mlp.h: an MLP model described as data: a list of Linear layers with activations.
 *
 * Layer l computes y(rows, out) = act(x(rows, in) * W^T + b), W (out, in), b (out), as
 * torch.nn.Linear stores them. The last layer has no activation unless the file says so.
 *
 * On disk: safetensors with tensors "layers.<l>.weight" (out, in) and "layers.<l>.bias"
 * (out), and __metadata__ {"architecture": "mlp", "activation": "relu"|"gelu"|"none",
 * "layers": "<L>"}. "activation" is required; "architecture" (if present) must be "mlp";
 * without "layers" the layers are counted from layers.0.weight up; the optional
 * "final_activation" (default "none") is the last layer's. Any other tensor is an error.
 * F32, F16 and BF16 are read (converted to F32); F32 is written.
 */
#ifndef PE_MODEL_MLP_H
#define PE_MODEL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef enum md_activation { MD_ACT_NONE = 0, MD_ACT_RELU, MD_ACT_GELU } md_activation;

/* "none", "relu", "gelu" (NULL for an unknown value) and back (0 if s is unknown). */
const char *md_act_name(md_activation a);
int md_act_parse(const char *s, md_activation *out);

typedef struct md_layer {
    size_t in, out;
    md_activation act; /* applied after the bias */
    const float *w;    /* (out, in) */
    const float *b;    /* (out) */
} md_layer;

typedef struct md_mlp {
    int nlayers;
    md_layer *layers; /* (nlayers) */
    void *storage;    /* private: the mapping or converted copies behind w and b */
} md_mlp;

/* Reads and validates a model file: every offset, size, dtype and shape is checked
 * against the file before use. Messages name the tensor and the offset at fault.
 * Aligned F32 weights point into the read-only mapping; others are converted copies.
 * On failure *out is empty. md_mlp_free releases everything (a zeroed md_mlp is fine). */
pe_status md_mlp_load(const char *path, md_mlp *out, pe_err *err);
void md_mlp_free(md_mlp *m);

size_t md_mlp_params(const md_mlp *m);
/* Forward FLOPs of layer l for one row: 2 * in * out. */
double md_layer_flops(const md_layer *l);

typedef enum md_init { MD_INIT_NORMAL = 0, MD_INIT_IDENTITY } md_init;

typedef struct md_mlp_spec {
    size_t in;          /* input width */
    size_t hidden;      /* width of every hidden layer */
    size_t out;         /* output width */
    int layers;         /* number of Linear layers, >= 1 */
    md_activation act;  /* between layers */
    md_init init;       /* normal(0, std) weights and zero bias, or identity (square only) */
    float std;          /* standard deviation of the normal init; 0 means 0.02 */
    uint64_t seed;
} md_mlp_spec;

/* Writes a seeded random model: the same spec gives the same bytes. Layer 0 is
 * (hidden, in), the middle ones (hidden, hidden), the last (out, hidden); one layer is
 * (out, in). Identity init needs every layer square (PE_EINVAL otherwise). */
pe_status md_mlp_write(const md_mlp_spec *spec, const char *path, pe_err *err);

/* Naive single-threaded reference forward (plain loops, no BLAS, double accumulation,
 * activations from kernels/elementwise.h), for tests:
 * x (rows, in of layer 0) -> y (rows, out of the last layer); x and y must not overlap.
 * dtype BF16 rounds both GEMM operands (weights and the layer's input) to bf16, as the
 * engine does. */
pe_status md_mlp_forward_reference(const md_mlp *m, pe_dtype dtype, const float *x,
                                   size_t rows, float *y, pe_err *err);

#endif
