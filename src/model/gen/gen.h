/* gen.h: inside the decoder writer (pe_gen_write): the plan of a checkpoint, i.e. its
 * tensors in the order the model's state_dict lists them, how each is filled, and its
 * config.json; the families' planners; the JSON printer.
 */
#ifndef PE_MODEL_GEN_GEN_H
#define PE_MODEL_GEN_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "pengine/pengine_tools.h"

#define MD_GEN_NAME 96

typedef enum md_gen_fill {
    MD_FILL_NORMAL = 0, /* normal(0, std); columns [0, qk_cols) of a row: normal(0, qk_std) */
    MD_FILL_NORM,       /* 1 + normal(0, std): a norm's weight */
    MD_FILL_TRIL,       /* (1, 1, P, P) lower-triangular ones: GPT-2's old attn.bias buffer */
    MD_FILL_CONST       /* every element value: GPT-2's old attn.masked_bias */
} md_gen_fill;

typedef struct md_gen_tensor {
    char name[MD_GEN_NAME]; /* as written */
    char key[MD_GEN_NAME];  /* the name that seeds its values (GPT-2: with "transformer.") */
    int ndim;
    size_t shape[4];        /* (ndim) */
    md_gen_fill fill;
    double std, qk_std;
    size_t qk_cols;
    double value;           /* MD_FILL_CONST */
} md_gen_tensor;

typedef struct md_gen_plan {
    int n, cap;
    md_gen_tensor *t;       /* (n) in state_dict order */
    void *config;           /* config.json, a cJSON object */
} md_gen_plan;

/* Checks the spec (shapes that fit together, values in range). */
pe_status md_gen_check(const pe_gen_spec *sp, pe_err *err);

/* The families: fill p's tensors and config for sp (checked). */
pe_status md_gen_plan_gpt2(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err);
pe_status md_gen_plan_llama(const pe_gen_spec *sp, md_gen_plan *p, pe_err *err);

/* Appends a tensor (shape of ndim entries) and returns it, or NULL when out of memory.
 * key NULL: the name. */
md_gen_tensor *md_gen_add(md_gen_plan *p, const char *name, const char *key, md_gen_fill fill,
                          double std, int ndim, const size_t *shape);
void md_gen_plan_free(md_gen_plan *p);

/* ---- JSON ---------------------------------------------------------------------------------- */

/* A float-typed value for a config, printed as Python prints a float (10000.0, 1e-05, 0.02),
 * so that config.json reads as transformers writes it. NULL when out of memory. */
void *md_json_float(double x);

/* Writes the cJSON value json to path as Python's json.dumps(indent=2, sort_keys=True) plus
 * a newline (how transformers writes config.json and the index), through a temporary file
 * renamed into place. */
pe_status md_json_write_file(const char *path, const void *json, pe_err *err);

#endif
