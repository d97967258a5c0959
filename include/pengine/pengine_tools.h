/* pengine_tools.h: tools beside the engine, in an optional second header (as hwloc/cudart.h
 * is to hwloc): writing seeded random models in the Hugging Face layout, and a naive
 * double-precision reference forward of the decoders, the independent check of an engine's
 * logits. pengine.h stays the one header for running models.
 *
 * The same conventions as pengine.h: every function returns a pe_status, and on failure
 * pe_last_error() (this thread) says what went wrong and what to do.
 */
#ifndef PENGINE_TOOLS_H
#define PENGINE_TOOLS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pengine/pengine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- writing decoders ------------------------------------------------------------------- */

typedef enum pe_gen_arch {
    PE_GEN_GPT2 = 0, /* GPT2LMHeadModel */
    PE_GEN_LLAMA,    /* LlamaForCausalLM */
    PE_GEN_MISTRAL,  /* MistralForCausalLM: Llama with a sliding window */
    PE_GEN_QWEN2     /* Qwen2ForCausalLM: Llama with q/k/v biases */
} pe_gen_arch;

typedef enum pe_gen_rope {
    PE_GEN_ROPE_NONE = 0, /* rope_scaling null */
    PE_GEN_ROPE_LINEAR,   /* {"rope_type": "linear", "factor"} */
    PE_GEN_ROPE_LLAMA3    /* {"rope_type": "llama3", "factor", "low_freq_factor",
                           *  "high_freq_factor", "original_max_position_embeddings"} */
} pe_gen_rope;

/* A random decoder. pe_gen_init fills one from a preset; change any field after it. */
typedef struct pe_gen_spec {
    pe_gen_arch arch;
    /* shape */
    int layers;       /* n_layer / num_hidden_layers */
    int hidden;       /* n_embd / hidden_size */
    int heads;        /* query heads */
    int kv_heads;     /* key/value heads (Llama family); GPT-2: 0 (or equal to heads) */
    int head_dim;     /* Llama family: 0 = hidden / heads (not written), else written */
    int inner;        /* MLP width; GPT-2: 0 = 4 * hidden (n_inner null) */
    int vocab;
    int context;      /* n_positions / max_position_embeddings */
    /* numerics */
    double norm_eps;  /* layer_norm_epsilon / rms_norm_eps */
    double rope_theta;
    pe_gen_rope rope_scaling;
    double rope_factor;
    double rope_low_freq_factor, rope_high_freq_factor;   /* llama3 */
    int rope_original_context; /* llama3 original_max_position_embeddings; 0 = context */
    int sliding_window;        /* Mistral: 0 = null (no window) */
    int tie_embeddings;        /* the LM head is the token embedding (no lm_head.weight) */
    int32_t bos_token_id, eos_token_id;
    /* the weights: W ~ normal(0, std); norm weights 1 and biases 0 unless norm_std and
     * bias_std say otherwise */
    pe_dtype dtype;   /* FP32 or BF16 tensors (BF16: the FP32 values rounded to nearest even) */
    double std;
    double qk_std;    /* the q and k projections' std ("sharp" attention); 0 = std */
    double norm_std;  /* norm weights 1 + normal(0, norm_std) */
    double bias_std;  /* every bias (norms' and projections') normal(0, bias_std) */
    uint64_t seed;    /* the same spec writes the same bytes */
    /* the files */
    int shards;           /* 1: model.safetensors; N > 1: N shards and the index */
    int gpt2_no_prefix;   /* GPT-2 tensor names without "transformer." (h.0.ln_1.weight) */
    int gpt2_old_buffers; /* GPT-2 also writes the old attn.bias and attn.masked_bias buffers */
} pe_gen_spec;

/* Fills spec for arch with a preset's shape and the defaults (std 0.02, FP32, seed 1, one
 * file, tied embeddings for GPT-2 only, bos = eos = vocab - 1 for GPT-2, bos 1 and eos 2 for
 * the Llama family):
 *   "tiny"        2 layers, hidden 64, 4 heads (Llama family: 2 KV heads, MLP 176), vocab
 *                 256, 128 positions: for tests
 *   "124m"        GPT-2 small: hidden 768, 12 layers, 12 heads, vocab 50257, 1024 positions
 *   "llama-110m"  hidden 768, 12 layers, 12 heads, 4 KV heads, MLP 2048, vocab 32000, 2048
 *                 positions
 * PE_EINVAL for a preset that does not exist or does not fit arch. */
pe_status pe_gen_init(pe_gen_spec *spec, pe_gen_arch arch, const char *preset);

/* Writes the model into the directory dir (created if missing; its parent must exist), as
 * transformers' save_pretrained does: config.json, and model.safetensors or
 * model-0000k-of-0000N.safetensors with model.safetensors.index.json (weight_map and
 * metadata.total_size). A stale index (or model.safetensors) of the other layout is
 * removed, so the directory holds one checkpoint. Every tensor's values depend only on the
 * seed and the tensor's name: the sharded and single-file layouts, and the GPT-2 name
 * variants, hold the same numbers. */
pe_status pe_gen_write(const pe_gen_spec *spec, const char *dir);

/* ---- writing MLPs ------------------------------------------------------------------------ */

typedef enum pe_gen_act { PE_GEN_ACT_RELU = 0, PE_GEN_ACT_GELU } pe_gen_act;

typedef struct pe_gen_mlp_spec {
    size_t in, hidden, out; /* input, hidden and output widths */
    int layers;             /* Linear layers, >= 1 */
    pe_gen_act act;         /* between layers */
    int identity;           /* identity weights (square layers only) instead of normal */
    float std;              /* of the normal weights; 0 means 0.02 */
    uint64_t seed;
} pe_gen_mlp_spec;

/* Writes a seeded random MLP as one F32 safetensors file (the format pe_engine_load reads
 * for an MLP): the same spec writes the same bytes. */
pe_status pe_gen_mlp_write(const pe_gen_mlp_spec *spec, const char *path);

/* ---- the naive reference ------------------------------------------------------------------
 *
 * A plain-loop forward in double precision of GPT-2 and the Llama family (Llama, Mistral
 * with its sliding window, Qwen2 with its q/k/v biases; GQA; head_dim from the config;
 * rope_scaling linear and llama3), written from Hugging Face's modeling_gpt2.py,
 * modeling_llama.py and modeling_rope_utils.py, reading the model directory itself. It is
 * slow (every weight is converted as it is used, attention is O(n^2)) and simple on
 * purpose: it is what an engine's logits are checked against.
 *
 * dtype FP32: weights as the file holds them, exactly; every sum and activation in double.
 * dtype BF16 emulates the engine under --dtype bf16: the weight matrices (embeddings,
 * projections, LM head) rounded to bf16 (norm weights and biases are not), every GEMM
 * input activation rounded to bf16 (the inputs of q/k/v, the attention output projection,
 * the MLP's two projections and the LM head), and each key and value rounded to bf16 when
 * stored (the KV cache); queries, scores, softmax, norms and the residual stream stay in
 * double.
 */

typedef struct pe_ref_model pe_ref_model;

/* Opens the Hugging Face directory dir and checks its config and every tensor it needs
 * (names, shapes, dtypes F32, BF16 or F16). */
pe_status pe_ref_open(const char *dir, pe_dtype dtype, pe_ref_model **out);
void pe_ref_close(pe_ref_model *m);

/* Logits per position (the vocabulary size) and the most positions a sequence may hold
 * (GPT-2: n_positions; Llama family: max_position_embeddings). */
int pe_ref_vocab(const pe_ref_model *m);
int pe_ref_context(const pe_ref_model *m);

/* The logits (n, vocab) of the causal sequence tokens(n), at every position. */
pe_status pe_ref_forward(pe_ref_model *m, const int32_t *tokens, size_t n, double *logits);


/* ---- devices and cores ------------------------------------------------------------------- */

typedef struct pe_device_desc {
    int id;
    char name[128];      /* "host device 0", "NVIDIA H200" */
    size_t memory_bytes; /* device memory (host devices: the machine's RAM) */
    char bus_id[32];     /* PCI bus id, "" for host devices */
    int numa_node;       /* -1 if unknown */
    char cpulist[256];   /* the cores near the device ("0-7"), "" = any */
    char kernels[64];    /* host: the kernels that compute ("avx512", "avx2", "portable";
                          * ", bf16 on AMX tiles" where those run); "" for CUDA */
} pe_device_desc;

/* The backend kind resolves to: AUTO is CUDA when a GPU answers, else the host, and notice
 * (when not NULL) gets the one-line reason of the fallback. CUDA without a device is
 * PE_ENODEV. */
pe_status pe_backend_resolve(pe_backend_kind kind, pe_backend_kind *out, char *notice,
                             size_t notice_len);
/* The devices of a backend (kind resolved as above). */
pe_status pe_device_count(pe_backend_kind kind, int *n);
pe_status pe_device_describe(pe_backend_kind kind, int id, pe_device_desc *out);
/* PE_OK when every id exists; else PE_ENODEV naming the first that does not and listing
 * the devices there are. */
pe_status pe_devices_check(pe_backend_kind kind, const int *ids, int n);

/* The machine as hwloc sees it (cores, hardware threads, NUMA nodes), the backend's devices,
 * and the cores each worker of the device list ids(n) would be bound to (ids NULL: one
 * worker per core; threads: each host device's cores, 0 = an even share), as text or one
 * JSON object, on out (pengine --topology); the backend's notice (why auto chose the host)
 * comes first, or as the JSON's "notice". */
pe_status pe_topology_report(pe_backend_kind kind, const int *ids, int n, int threads,
                             int json, FILE *out);

/* ---- MLP files and demo inputs ------------------------------------------------------------ */

typedef struct pe_mlp_desc {
    int layers;
    size_t in, out;       /* widths of the input and of the output */
    size_t nparams;
    char shape[256];      /* "256-256-256-1": the widths, the input's first */
    char activation[8];   /* between layers: "relu", "gelu", "none" or "mixed" */
} pe_mlp_desc;

/* Reads an MLP safetensors file (every byte checked, as pe_engine_load does) and says what
 * it holds. */
pe_status pe_mlp_describe(const char *path, pe_mlp_desc *out);

/* x(n) = seeded uniform floats in [-1, 1) (splitmix64): the same seed gives the same
 * values. */
void pe_random_uniform(float *x, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif
