/* mlp.c: loads an MLP from safetensors (checked layer by layer), sizes it, and runs a naive
 * reference forward pass. Writing random models is in mlp_write.c. */
#include "model/mlp/mlp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "model/format/safetensors.h"

typedef struct md_storage {
    st_file file;  /* the mapping: aligned F32 weights point into it */
    float *copies; /* converted (F16, BF16) or unaligned tensors */
} md_storage;

const char *md_act_name(md_activation a)
{
    switch (a) {
    case MD_ACT_NONE: return "none";
    case MD_ACT_RELU: return "relu";
    case MD_ACT_GELU: return "gelu";
    }
    return NULL;
}

int md_act_parse(const char *s, md_activation *out)
{
    for (int a = MD_ACT_NONE; a <= MD_ACT_GELU; a++)
        if (strcmp(s, md_act_name((md_activation)a)) == 0) {
            *out = (md_activation)a;
            return 1;
        }
    return 0;
}

void md_mlp_free(md_mlp *m)
{
    if (!m)
        return;
    md_storage *st = m->storage;
    if (st) {
        st_close(&st->file);
        free(st->copies);
        free(st);
    }
    free(m->layers);
    memset(m, 0, sizeof *m);
}

size_t md_mlp_params(const md_mlp *m)
{
    size_t n = 0;
    for (int l = 0; l < m->nlayers; l++)
        n += m->layers[l].out * m->layers[l].in + m->layers[l].out;
    return n;
}

double md_layer_flops(const md_layer *l) { return 2.0 * (double)l->in * (double)l->out; }

/* "123" -> 123 (digits only, no sign, no leading zero, at most 9 digits). */
static int md_parse_count(const char *s, size_t n, int *out)
{
    if (n == 0 || n > 9 || (s[0] == '0' && n > 1))
        return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* Is name "layers.<l>.weight" or "layers.<l>.bias" with l < L? */
static int md_expected_name(const char *name, int L)
{
    if (strncmp(name, "layers.", 7) != 0)
        return 0;
    const char *num = name + 7, *dot = strchr(num, '.');
    int l;
    if (!dot || !md_parse_count(num, (size_t)(dot - num), &l) || l >= L)
        return 0;
    return strcmp(dot, ".weight") == 0 || strcmp(dot, ".bias") == 0;
}

/* The activations and layer count named by the metadata (or counted from the tensors). */
static pe_status md_read_meta(const st_file *f, int *L, md_activation *act,
                              md_activation *last_act, pe_err *err)
{
    const char *arch = st_meta(f, "architecture");
    if (arch && strcmp(arch, "mlp") != 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: __metadata__ architecture is \"%.64s\"; pengine reads \"mlp\"", f->path,
                       arch);
    const char *a = st_meta(f, "activation");
    if (!a)
        return pe_fail(err, PE_EFORMAT,
                       "%s: __metadata__ has no \"activation\" (relu, gelu or none); add it to "
                       "the file's metadata",
                       f->path);
    if (!md_act_parse(a, act))
        return pe_fail(err, PE_EFORMAT,
                       "%s: __metadata__ activation \"%.64s\" is unknown; use relu, gelu or none",
                       f->path, a);
    const char *fa = st_meta(f, "final_activation");
    *last_act = MD_ACT_NONE;
    if (fa && !md_act_parse(fa, last_act))
        return pe_fail(err, PE_EFORMAT,
                       "%s: __metadata__ final_activation \"%.64s\" is unknown; use relu, gelu or "
                       "none",
                       f->path, fa);
    const char *ls = st_meta(f, "layers");
    if (ls) {
        if (!md_parse_count(ls, strlen(ls), L) || *L < 1)
            return pe_fail(err, PE_EFORMAT,
                           "%s: __metadata__ layers \"%.32s\" is not a positive layer count",
                           f->path, ls);
    } else {
        char name[64];
        for (*L = 0;; (*L)++) {
            snprintf(name, sizeof name, "layers.%d.weight", *L);
            if (!st_find(f, name))
                break;
        }
        if (*L == 0)
            return pe_fail(err, PE_EFORMAT,
                           "%s: missing tensor 'layers.0.weight' (an MLP file holds "
                           "layers.<l>.weight (out, in) and layers.<l>.bias (out))",
                           f->path);
    }
    for (int i = 0; i < f->ntensors; i++)
        if (!md_expected_name(f->tensors[i].name, *L))
            return pe_fail(err, PE_EFORMAT,
                           "%s: unexpected tensor '%s' (a %d-layer MLP file holds only "
                           "layers.<l>.weight and layers.<l>.bias for l < %d)",
                           f->path, f->tensors[i].name, *L, *L);
    return PE_OK;
}

/* Finds and checks the shapes of layer l's tensors; in_prev is the previous layer's out. */
static pe_status md_check_layer(const st_file *f, int l, size_t in_prev, const st_tensor **wt,
                                const st_tensor **bt, pe_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "layers.%d.weight", l);
    pe_status s = st_require(f, name, wt, err);
    if (s != PE_OK)
        return s;
    snprintf(name, sizeof name, "layers.%d.bias", l);
    if ((s = st_require(f, name, bt, err)) != PE_OK)
        return s;
    const st_tensor *w = *wt, *b = *bt;
    if (w->ndim != 2 || w->shape[0] == 0 || w->shape[1] == 0)
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s' has %d dimensions%s; a Linear weight is (out, in), both "
                       "non-zero",
                       f->path, w->name, w->ndim, w->ndim == 2 ? " with a zero width" : "");
    if (b->ndim != 1 || b->shape[0] != w->shape[0])
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s' should have shape (%zu) to match '%s' (%zu, %zu)", f->path,
                       b->name, w->shape[0], w->name, w->shape[0], w->shape[1]);
    if (l > 0 && w->shape[1] != in_prev)
        return pe_fail(err, PE_EFORMAT,
                       "%s: layer %d takes %zu inputs ('%s' is (%zu, %zu)) but layer %d gives %zu "
                       "outputs",
                       f->path, l, w->shape[1], w->name, w->shape[0], w->shape[1], l - 1, in_prev);
    return PE_OK;
}

/* F32 tensors aligned in the mapping are used in place; others need a copy. */
static int md_in_place(const st_tensor *t)
{
    return t->dtype == ST_F32 && (uintptr_t)t->data % sizeof(float) == 0;
}

pe_status md_mlp_load(const char *path, md_mlp *out, pe_err *err)
{
    memset(out, 0, sizeof *out);
    md_storage *st = calloc(1, sizeof *st);
    if (!st)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path ? path : "(null)");
    out->storage = st;
    pe_status s = st_open(path, &st->file, err);
    const st_file *f = &st->file;
    int L = 0;
    md_activation act = MD_ACT_NONE, last_act = MD_ACT_NONE;
    if (s == PE_OK)
        s = md_read_meta(f, &L, &act, &last_act, err);
    const st_tensor **ts = NULL; /* (L, 2): weight, bias */
    if (s == PE_OK) {
        ts = calloc((size_t)L * 2, sizeof *ts);
        out->layers = calloc((size_t)L, sizeof *out->layers);
        if (!ts || !out->layers)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory for %d layers", path, L);
    }
    size_t ncopy = 0;
    for (int l = 0; l < L && s == PE_OK; l++) {
        s = md_check_layer(f, l, l ? out->layers[l - 1].out : 0, &ts[2 * l], &ts[2 * l + 1], err);
        if (s != PE_OK)
            break;
        md_layer *ly = &out->layers[l];
        ly->out = ts[2 * l]->shape[0];
        ly->in = ts[2 * l]->shape[1];
        ly->act = l == L - 1 ? last_act : act;
        for (int k = 0; k < 2; k++)
            if (!md_in_place(ts[2 * l + k]))
                ncopy += ts[2 * l + k]->nelem; /* sums the file's byte counts: no overflow */
    }
    if (s == PE_OK && ncopy) {
        st->copies = malloc(ncopy * sizeof(float));
        if (!st->copies)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory converting %zu weights to F32", path,
                        ncopy);
    }
    size_t at = 0;
    for (int l = 0; l < L && s == PE_OK; l++)
        for (int k = 0; k < 2 && s == PE_OK; k++) {
            const st_tensor *t = ts[2 * l + k];
            const float *p = (const float *)t->data;
            if (!md_in_place(t)) {
                s = st_read_f32(f, t, st->copies + at, err);
                p = st->copies + at;
                at += t->nelem;
            }
            if (k == 0)
                out->layers[l].w = p;
            else
                out->layers[l].b = p;
        }
    free(ts);
    if (s != PE_OK) {
        md_mlp_free(out);
        return s;
    }
    out->nlayers = L;
    return PE_OK;
}

/* x as a GEMM input in dtype: itself, or rounded to bf16. */
static double gemm_input(pe_dtype dtype, float x)
{
    return dtype == PE_DTYPE_BF16 ? (double)pe_k_round_bf16(x) : (double)x;
}

pe_status md_mlp_forward_reference(const md_mlp *m, pe_dtype dtype, const float *x,
                                   size_t rows, float *y, pe_err *err)
{
    if (!m || m->nlayers < 1 || (rows && (!x || !y)))
        return pe_fail(err, PE_EINVAL, "md_mlp_forward_reference: no model, input or output");
    size_t wmax = 0;
    for (int l = 0; l < m->nlayers; l++)
        wmax = m->layers[l].out > wmax ? m->layers[l].out : wmax;
    size_t n;
    if (__builtin_mul_overflow(rows, wmax, &n) || n > SIZE_MAX / sizeof(float) / 2)
        return pe_fail(err, PE_EINVAL, "md_mlp_forward_reference: %zu rows are too many", rows);
    float *buf = malloc(2 * n * sizeof(float) + 1); /* two (rows, wmax) activations */
    if (!buf)
        return pe_fail(err, PE_ENOMEM, "md_mlp_forward_reference: out of memory for %zu rows",
                       rows);
    const float *cur = x; /* (rows, in of layer l) */
    for (int l = 0; l < m->nlayers; l++) {
        const md_layer *ly = &m->layers[l];
        float *nxt = l == m->nlayers - 1 ? y : buf + (size_t)(l % 2) * n; /* (rows, out) */
        for (size_t r = 0; r < rows; r++)
            for (size_t o = 0; o < ly->out; o++) {
                double acc = ly->b[o];
                for (size_t k = 0; k < ly->in; k++)
                    acc += gemm_input(dtype, cur[r * ly->in + k]) *
                           gemm_input(dtype, ly->w[o * ly->in + k]);
                float v = (float)acc;
                if (ly->act == MD_ACT_RELU)
                    v = pe_k_relu(v);
                else if (ly->act == MD_ACT_GELU)
                    v = pe_k_gelu(v);
                nxt[r * ly->out + o] = v;
            }
        cur = nxt;
    }
    free(buf);
    return PE_OK;
}
