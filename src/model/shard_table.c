/* shard_table.c: a family's sharding table into one worker's tensor list (shard_table.h). */
#include "model/shard_table.h"

#include <stdio.h>
#include <string.h>

/* The logical (out, in) shape of checkpoint tensor x read as `transposed` says. */
static void logical_shape(const st_tensor *x, int transposed, size_t *out, size_t *in)
{
    if (x->ndim < 2) {
        *out = x->shape[0];
        *in = 1;
        return;
    }
    *out = transposed ? x->shape[1] : x->shape[0];
    *in = transposed ? x->shape[0] : x->shape[1];
}

/* The rows [*r0, *r0 + *nr) x columns [*c0, *c0 + *nc) of a piece that this rank holds, and
 * the zero rows to pad it with. */
static pe_status piece_box(const md_piece_rule *pr, size_t out, size_t in, const md_config *c,
                           const md_part *part, size_t *r0, size_t *nr, size_t *c0, size_t *nc,
                           size_t *pad, const char *name, pe_err *err)
{
    const md_shard sh = md_shard_of(c, part);
    const size_t hd = (size_t)c->hd, tp = (size_t)part->tp, t = (size_t)part->t;
    size_t base = 0, rows = out;
    if (pr->nsegments) { /* a third of a fused tensor */
        rows = out / (size_t)pr->nsegments;
        base = (size_t)pr->segment * rows;
    }
    *r0 = base, *nr = rows, *c0 = 0, *nc = in, *pad = 0;
    md_split split = pr->split;
    if (split == MD_SPLIT_EMBEDDING)
        split = part->split_embedding && part->tp > 1 ? MD_SPLIT_VOCAB : MD_SPLIT_REPLICATED;
    switch (split) {
    case MD_SPLIT_EMBEDDING: /* resolved above */
    case MD_SPLIT_REPLICATED: break;
    case MD_SPLIT_COLUMN:
        if (rows % tp)
            return pe_fail(err, PE_EINVAL, "%s: %zu output rows do not split over tp=%zu",
                           name, rows, tp);
        *nr = rows / tp, *r0 = base + t * *nr;
        break;
    case MD_SPLIT_ROW:
        if (in % tp)
            return pe_fail(err, PE_EINVAL, "%s: %zu input columns do not split over tp=%zu",
                           name, in, tp);
        *nc = in / tp, *c0 = t * *nc;
        break;
    case MD_SPLIT_Q_HEADS:
        *nr = (size_t)sh.NH * hd, *r0 = base + t * *nr;
        break;
    case MD_SPLIT_KV_HEADS:
        *nr = (size_t)sh.KVH * hd, *r0 = base + (size_t)sh.KV0 * hd;
        break;
    case MD_SPLIT_ROW_HEADS:
        *nc = (size_t)sh.NH * hd, *c0 = t * *nc;
        break;
    case MD_SPLIT_VOCAB: {
        size_t v0 = (size_t)sh.V0, vt = (size_t)sh.V;
        *r0 = v0 < rows ? v0 : rows;
        *nr = v0 + vt <= rows ? vt : rows > v0 ? rows - v0 : 0;
        *pad = vt - *nr;
        break;
    }
    }
    return PE_OK;
}

pe_status md_plan_table(md_tensor_list *l, const md_hf *hf, const md_config *c,
                        const md_part *part, const md_tensor_rule *rules, size_t n,
                        const char *prefix, int layer, void *base, unsigned have, pe_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const md_tensor_rule *r = &rules[i];
        if ((r->needs & have) != r->needs)
            continue;
        md_tensor *t = md_tensor_add(l);
        if (!t)
            return pe_fail(err, PE_ENOMEM, "out of host memory planning the weights");
        char *slot = (char *)base + r->slot;
        t->matrix = r->kind == MD_SLOT_LINEAR || r->kind == MD_SLOT_TABLE;
        t->slot = r->kind == MD_SLOT_LINEAR  ? &((md_linear *)(void *)slot)->w
                  : r->kind == MD_SLOT_TABLE ? &((md_table *)(void *)slot)->w
                                             : (void **)(void *)slot;
        for (int k = 0; k < MD_MAX_PIECES && r->pieces[k].name; k++) {
            char pattern[128], name[128];
            snprintf(pattern, sizeof pattern, "%s%s", prefix, r->pieces[k].name);
            snprintf(name, sizeof name, pattern, layer);
            if (k == 0)
                snprintf(t->name, sizeof t->name, "%s", name);
            if (k == 0 && r->kind == MD_SLOT_TABLE) { /* the vocabulary rows it holds */
                md_table *tab = (md_table *)(void *)slot;
                const md_shard sh = md_shard_of(c, part);
                tab->split = r->pieces[k].split == MD_SPLIT_EMBEDDING && part->split_embedding &&
                             part->tp > 1;
                tab->row0 = tab->split ? (size_t)sh.V0 : 0;
            }
            const st_tensor *x = md_hf_find(hf, name, NULL);
            if (!x)
                return pe_fail(err, PE_EFORMAT, "%s: missing tensor '%s'", hf->dir, name);
            size_t out, in, r0, nr, c0, nc, pad;
            logical_shape(x, r->transposed, &out, &in);
            pe_status s = piece_box(&r->pieces[k], out, in, c, part, &r0, &nr, &c0, &nc, &pad,
                                    name, err);
            if (s == PE_OK)
                s = md_plan_piece(t, hf, name, r->transposed, r0, nr, c0, nc, err);
            if (s != PE_OK)
                return s;
            t->pad_rows += pad;
        }
        size_t rows = t->rows + t->pad_rows;
        if (r->kind == MD_SLOT_LINEAR) {
            md_linear *lin = (md_linear *)(void *)slot;
            lin->out = rows;
            lin->in = t->cols;
        } else if (r->kind == MD_SLOT_TABLE) {
            md_table *tab = (md_table *)(void *)slot;
            tab->rows = rows;
            tab->cols = t->cols;
            tab->vocab = tab->split ? (size_t)c->V : rows;
        }
    }
    return PE_OK;
}
