/* reference.c: the naive reference's public API (pengine_tools.h): open a Hugging Face
 * directory, run a token list, close. */
#include <stdlib.h>
#include <string.h>

#include "model/reference/ref.h"

void pe_ref_close(pe_ref_model *m)
{
    if (!m)
        return;
    md_ref_config_free(&m->c);
    md_hf_close(&m->hf);
    free(m->layers);
    free(m);
}

static pe_status md_ref_open(const char *dir, pe_dtype dtype, pe_ref_model **out, pe_err *err)
{
    *out = NULL;
    if (dtype != PE_DTYPE_FP32 && dtype != PE_DTYPE_BF16)
        return pe_fail(err, PE_EINVAL, "pe_ref_open: unknown dtype %d; use PE_DTYPE_FP32 or "
                       "PE_DTYPE_BF16", (int)dtype);
    pe_ref_model *m = calloc(1, sizeof *m);
    if (!m)
        return pe_fail(err, PE_ENOMEM, "out of memory");
    m->bf16 = dtype == PE_DTYPE_BF16;
    pe_status s = md_hf_open(dir, &m->hf, err);
    if (s == PE_OK)
        s = md_ref_config_read(&m->hf, &m->c, err);
    if (s == PE_OK) {
        m->layers = calloc((size_t)m->c.L, sizeof *m->layers);
        if (!m->layers)
            s = pe_fail(err, PE_ENOMEM, "out of memory for %d layers", m->c.L);
    }
    if (s == PE_OK)
        s = md_ref_bind(m, err);
    if (s != PE_OK) {
        pe_ref_close(m);
        return s;
    }
    *out = m;
    return PE_OK;
}

pe_status pe_ref_open(const char *dir, pe_dtype dtype, pe_ref_model **out)
{
    pe_err err = {{0}};
    pe_status s = out ? md_ref_open(dir, dtype, out, &err)
                      : pe_fail(&err, PE_EINVAL, "pe_ref_open: no out pointer");
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}

int pe_ref_vocab(const pe_ref_model *m) { return m ? m->c.V : 0; }

int pe_ref_context(const pe_ref_model *m) { return m ? m->c.P : 0; }

pe_status pe_ref_forward(pe_ref_model *m, const int32_t *tokens, size_t n, double *logits)
{
    pe_err err = {{0}};
    pe_status s = PE_OK;
    if (!m || !tokens || !logits || n == 0)
        s = pe_fail(&err, PE_EINVAL, "pe_ref_forward: no model, tokens or logits, or no "
                    "tokens (n = 0)");
    else if (n > (size_t)m->c.P)
        s = pe_fail(&err, PE_EINVAL, "pe_ref_forward: %zu tokens, more than the model's %d "
                    "positions; give at most %d", n, m->c.P, m->c.P);
    for (size_t i = 0; s == PE_OK && i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->c.V)
            s = pe_fail(&err, PE_EINVAL, "pe_ref_forward: token %zu is %d, outside the "
                        "vocabulary [0, %d)", i, (int)tokens[i], m->c.V);
    if (s == PE_OK)
        s = m->c.family == MD_REF_GPT2 ? md_ref_gpt2_forward(m, tokens, n, logits, &err)
                                       : md_ref_llama_forward(m, tokens, n, logits, &err);
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}
