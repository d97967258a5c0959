/* decoder.c: opening a Hugging Face decoder (architecture -> family, config, tensors), the
 * TP shard of a worker, and the small helpers the families share. */
#include "model/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *arch;
    const md_family *family;
} md_architectures[] = {
    {"GPT2LMHeadModel", &md_family_gpt2},
    {"LlamaForCausalLM", &md_family_llama},
    {"MistralForCausalLM", &md_family_llama},
    {"Qwen2ForCausalLM", &md_family_llama},
};
#define MD_NARCH (sizeof md_architectures / sizeof md_architectures[0])

int md_decoder_is_dir(const char *path)
{
    struct stat sb;
    return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

pe_status md_decoder_open(const char *dir, md_decoder *m, pe_err *err)
{
    memset(m, 0, sizeof *m);
    pe_status s = md_hf_open(dir, &m->hf, err);
    if (s != PE_OK)
        return s;
    const char *arch = NULL;
    s = md_hf_architecture(&m->hf, &arch, err);
    for (size_t i = 0; s == PE_OK && i < MD_NARCH && !m->family; i++)
        if (strcmp(arch, md_architectures[i].arch) == 0)
            m->family = md_architectures[i].family;
    if (s == PE_OK && !m->family)
        s = pe_fail(err, PE_EFORMAT,
                    "%s: architecture \"%s\" is not supported; pengine runs GPT2LMHeadModel, "
                    "LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM",
                    m->hf.config_path, arch);
    if (s == PE_OK) {
        snprintf(m->cfg.arch, sizeof m->cfg.arch, "%s", arch);
        s = m->family->configure(&m->hf, arch, &m->cfg, err);
    }
    if (s != PE_OK)
        md_decoder_close(m);
    return s;
}

void md_decoder_close(md_decoder *m)
{
    free(m->cfg.inv_freq);
    md_hf_close(&m->hf);
    memset(m, 0, sizeof *m);
}

void md_decoder_info(const md_decoder *m, pe_model_info *out)
{
    const md_config *c = &m->cfg;
    memset(out, 0, sizeof *out);
    out->family = c->family;
    snprintf(out->architecture, sizeof out->architecture, "%s", c->arch);
    out->nlayers = c->L;
    out->nparams = c->nparams;
    out->vocab = c->V;
    out->context = c->maxT;
    out->hidden = c->C;
    out->heads = c->NH;
    out->kv_heads = c->KVH;
    out->head_dim = c->hd;
    out->inner = c->I;
    out->bos_token_id = c->bos;
    out->eos_token_id = c->neos ? c->eos[0] : -1;
}

md_shard md_shard_of(const md_config *c, const md_part *p)
{
    md_shard s = {c->NH, c->KVH, 0, c->I, c->V, 0, 1};
    if (p->tp <= 1)
        return s;
    s.tp = p->tp;
    s.NH = c->NH / p->tp;
    if (c->KVH >= p->tp) {
        s.KVH = c->KVH / p->tp;
        s.KV0 = p->t * s.KVH;
    } else { /* fewer KV heads than ranks: each rank holds the one its query heads read */
        s.KVH = 1;
        s.KV0 = p->t * s.NH / (c->NH / c->KVH);
    }
    s.I = c->I / p->tp;
    s.V = (c->V + p->tp - 1) / p->tp; /* the vocabulary padded to a multiple of tp */
    s.V0 = p->t * s.V;
    return s;
}

/* The stages' split of costs (L blocks of `block`, the head on the last stage) whose largest
 * stage costs at most cap: greedy from the back, first[] filled. 1 when it fits in pp. */
static int fits(int L, int pp, double block, double head, double cap, int *first)
{
    int p = pp - 1, end = L;
    double cost = head;
    for (int l = L - 1; l >= 0; l--) {
        if (cost + block > cap || l + 1 <= p) { /* l + 1 <= p: leave a block per stage */
            if (p == 0 || end - (l + 1) < 1)
                return 0;
            first[p--] = l + 1;
            end = l + 1;
            cost = 0;
        }
        cost += block;
    }
    if (p > 0) /* stages left with no block */
        return 0;
    first[0] = 0;
    first[pp] = L;
    return 1;
}

pe_status md_plan_decoder_stages(const md_config *c, int pp, const int *split, int *first,
                                 pe_err *err)
{
    if (pp > c->L)
        return pe_fail(err, PE_EINVAL, "%d stages but the model has only %d blocks; use --pp <= "
                       "%d", pp, c->L, c->L);
    first[0] = 0;
    if (split) {
        long sum = 0;
        for (int p = 0; p < pp; p++) {
            if (split[p] < 1)
                return pe_fail(err, PE_EINVAL, "--split gives stage %d %d blocks; give every "
                               "stage at least 1", p, split[p]);
            sum += split[p];
            first[p + 1] = first[p] + split[p];
        }
        if (sum != c->L)
            return pe_fail(err, PE_EINVAL, "--split counts %ld blocks but the model has %d; give "
                           "counts that sum to %d", sum, c->L, c->L);
        return PE_OK;
    }
    /* cost per token: a block streams its weights once; the head streams V x C; the
     * embedding's lookup reads one row (nothing, at this scale) */
    const double tables = (c->tied ? 1.0 : 2.0) * (double)c->V * (double)c->C;
    const double block = ((double)c->nparams - tables) / c->L;
    const double head = (double)c->V * (double)c->C;
    double lo = 0, hi = block * c->L + head;
    int tmp[MD_MAX_STAGES + 1];
    if (pp > MD_MAX_STAGES)
        return pe_fail(err, PE_EINVAL, "pp=%d: at most %d stages", pp, MD_MAX_STAGES);
    for (int it = 0; it < 60; it++) { /* bisect the cap of the largest stage */
        double mid = (lo + hi) / 2;
        if (fits(c->L, pp, block, head, mid, tmp))
            hi = mid;
        else
            lo = mid;
    }
    if (!fits(c->L, pp, block, head, hi, first))
        return pe_fail(err, PE_EINVAL, "cannot split %d blocks into %d stages", c->L, pp);
    return PE_OK;
}

int md_shard_vocab_rows(const md_config *c, const md_shard *sh, int t)
{
    long rows = (long)c->V - (long)t * sh->V;
    return rows < 0 ? 0 : rows > sh->V ? sh->V : (int)rows;
}

/* Why tp ranks cannot share c's layers; NULL when they can. */
static const char *tp_misfit(const md_config *c, int tp)
{
    if (c->NH % tp)
        return "the attention heads do not split evenly";
    if (c->KVH % tp && tp % c->KVH)
        return "the KV heads neither split evenly nor replicate evenly";
    if (c->I % tp)
        return "the MLP's inner width does not split evenly";
    if ((long)(tp - 1) * ((c->V + tp - 1) / tp) >= c->V)
        return "the vocabulary leaves a rank no rows";
    return NULL;
}

int md_tp_check(const md_config *c, int tp, char *msg, size_t len)
{
    const char *why = tp_misfit(c, tp);
    if (!why)
        return 0;
    char valid[256] = "";
    size_t used = 0;
    for (int t = 1; t <= c->NH && used < sizeof valid; t++)
        if (!tp_misfit(c, t))
            used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%d", used ? ", " : "",
                                     t);
    snprintf(msg, len, "tp=%d does not fit this model (%d heads, %d KV heads, MLP width %d, "
             "vocabulary %d): %s; give a tp size that divides it (%s), or split the blocks "
             "over stages with --mode pp", tp, c->NH, c->KVH, c->I, c->V, why, valid);
    return -1;
}

size_t md_kv_block_bytes(const md_config *c, int layers, int kv_heads, int block_tokens,
                         pe_dtype dtype)
{
    pe_k_kv_shape s = {layers, kv_heads, block_tokens, c->hd, 0}; /* a block: no pool */
    return pe_k_kv_block_elems(s) * (dtype == PE_DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float));
}

/* "(768, 2304)" or "(768)" */
static void shape_str(char *buf, size_t len, const size_t *d, int n)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%zu", i ? ", " : "", d[i]);
    if (used < len)
        snprintf(buf + used, len - used, ")");
}

pe_status md_expect(const md_hf *hf, const char *name, size_t d0, size_t d1,
                    const st_tensor **t, const st_file **f, pe_err *err)
{
    const st_file *file = NULL;
    const st_tensor *x = md_hf_find(hf, name, &file);
    if (!x)
        return pe_fail(err, PE_EFORMAT, "%s: missing tensor '%s' (config.json says the model "
                       "has it); the checkpoint is incomplete or of another architecture",
                       hf->dir, name);
    if (x->dtype != ST_F32 && x->dtype != ST_BF16 && x->dtype != ST_F16)
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s' has dtype %s; weights are read from "
                       "F32, BF16 or F16", file->path, name, st_dtype_name(x->dtype));
    size_t want[2] = {d0, d1};
    int nwant = d1 ? 2 : 1;
    int ok = x->ndim == nwant && x->shape[0] == d0 && (nwant == 1 || x->shape[1] == d1);
    if (!ok) {
        char got[96], exp[96];
        shape_str(got, sizeof got, x->shape, x->ndim);
        shape_str(exp, sizeof exp, want, nwant);
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s' has shape %s but config.json makes it "
                       "%s; the config and the weights disagree", file->path, name, got, exp);
    }
    if (t)
        *t = x;
    if (f)
        *f = file;
    return PE_OK;
}

/* ---- tensor lists -------------------------------------------------------------------------- */

md_tensor *md_tensor_add(md_tensor_list *l)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        md_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    md_tensor *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    return t;
}

void md_tensor_list_free(md_tensor_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

pe_status md_plan_whole(md_tensor_list *l, const md_hf *hf, const char *name, int matrix,
                        int transposed, void **slot, pe_err *err)
{
    const st_file *f = NULL;
    const st_tensor *x = md_hf_find(hf, name, &f);
    if (!x)
        return pe_fail(err, PE_EFORMAT, "%s: missing tensor '%s'", hf->dir, name);
    md_tensor *t = md_tensor_add(l);
    if (!t)
        return pe_fail(err, PE_ENOMEM, "out of host memory planning the weights");
    snprintf(t->name, sizeof t->name, "%s", name);
    t->slot = slot;
    t->matrix = matrix;
    size_t d0 = x->shape[0], d1 = x->ndim > 1 ? x->shape[1] : 1;
    t->rows = transposed ? d1 : d0;
    t->cols = transposed ? d0 : d1;
    t->npieces = 1;
    t->pieces[0] = (md_piece){x, f, transposed, 0, t->rows, 0, t->cols};
    return PE_OK;
}

pe_status md_plan_piece(md_tensor *t, const md_hf *hf, const char *name, int transposed,
                        size_t row0, size_t rows, size_t col0, size_t cols, pe_err *err)
{
    const st_file *f = NULL;
    const st_tensor *x = md_hf_find(hf, name, &f);
    if (!x)
        return pe_fail(err, PE_EFORMAT, "%s: missing tensor '%s'", hf->dir, name);
    size_t out = x->ndim < 2 ? x->shape[0] : transposed ? x->shape[1] : x->shape[0];
    size_t in = x->ndim < 2 ? 1 : transposed ? x->shape[0] : x->shape[1];
    if (row0 + rows > out || col0 + cols > in)
        return pe_fail(err, PE_EINTERNAL, "tensor '%s': piece rows [%zu, %zu) x columns [%zu, "
                       "%zu) outside its (%zu, %zu)", name, row0, row0 + rows, col0, col0 + cols,
                       out, in);
    if (t->npieces == MD_MAX_PIECES)
        return pe_fail(err, PE_EINTERNAL, "tensor '%s': more than %d pieces", t->name,
                       MD_MAX_PIECES);
    if (t->npieces == 0)
        t->cols = cols;
    else if (t->cols != cols)
        return pe_fail(err, PE_EINTERNAL, "tensor '%s': pieces of %zu and %zu columns",
                       t->name, t->cols, cols);
    t->pieces[t->npieces++] = (md_piece){x, f, transposed, row0, rows, col0, cols};
    t->rows += rows;
    return PE_OK;
}
