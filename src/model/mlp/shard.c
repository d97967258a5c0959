/* shard.c: cuts an MLP over the grid: balanced PP stage ranges, Megatron TP pairing,
 * and each rank's weight slices. */
#include "model/mlp/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "3,5,2" into buf. */
static const char *md_list(const int *v, int n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < len; i++) {
        int k = snprintf(buf + at, len - at, "%s%d", i ? "," : "", v[i]);
        if (k < 0)
            break;
        at += (size_t)k;
    }
    return buf;
}

static pe_status md_check_split(const md_mlp *m, int pp, const int *split, pe_err *err)
{
    char buf[128];
    long sum = 0;
    for (int p = 0; p < pp; p++) {
        if (split[p] < 1)
            return pe_fail(err, PE_EINVAL,
                           "--split %s: stage %d has %d layers; every stage needs at least 1",
                           md_list(split, pp, buf, sizeof buf), p, split[p]);
        sum += split[p];
    }
    if (sum != m->nlayers)
        return pe_fail(err, PE_EINVAL,
                       "--split %s sums to %ld layers but the model has %d; give %d counts that "
                       "sum to %d",
                       md_list(split, pp, buf, sizeof buf), sum, m->nlayers, pp, m->nlayers);
    return PE_OK;
}

/* Balanced cut: first the least possible max stage cost C (DP over prefix sums), then,
 * among the cuts with every stage <= C, the one with the least sum of squared stage costs
 * (so 7 equal layers on 3 stages get 2,2,3, not 3,3,1). Ties go to the earliest cut. */
static pe_status md_balance(const md_mlp *m, int pp, int *first, pe_err *err)
{
    int L = m->nlayers;
    size_t w = (size_t)L + 1;
    double *pre = malloc(w * sizeof *pre);          /* (L + 1) prefix costs */
    double *best = malloc((size_t)(pp + 1) * w * sizeof *best); /* (pp + 1, L + 1) */
    int *from = malloc((size_t)(pp + 1) * w * sizeof *from);    /* (pp + 1, L + 1) */
    if (!pre || !best || !from) {
        free(pre);
        free(best);
        free(from);
        return pe_fail(err, PE_ENOMEM, "stage plan: out of memory for %d layers", L);
    }
    pre[0] = 0;
    for (int l = 0; l < L; l++)
        pre[l + 1] = pre[l] + md_layer_flops(&m->layers[l]);
#define B(p, i) best[(size_t)(p) * w + (size_t)(i)]
#define F(p, i) from[(size_t)(p) * w + (size_t)(i)]
    /* pass 0: B(p, i) = least max cost of the first i layers on p stages;
     * pass 1: B(p, i) = least sum of squares with every stage <= C */
    double C = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i <= L; i++) {
            double c = pre[i];
            B(1, i) = pass == 0 ? c : (c <= C ? c * c : -1);
            F(1, i) = 0;
        }
        for (int p = 2; p <= pp; p++)
            for (int i = p; i <= L; i++) {
                B(p, i) = -1;
                for (int j = p - 1; j < i; j++) { /* stage p - 1 is [j, i) */
                    double c = pre[i] - pre[j], prev = B(p - 1, j), v;
                    if (prev < 0 || (pass == 1 && c > C))
                        continue;
                    v = pass == 0 ? (prev > c ? prev : c) : prev + c * c;
                    if (B(p, i) < 0 || v < B(p, i)) {
                        B(p, i) = v;
                        F(p, i) = j;
                    }
                }
            }
        C = B(pp, L);
    }
    first[pp] = L;
    for (int p = pp; p >= 1; p--)
        first[p - 1] = F(p, first[p]);
#undef B
#undef F
    free(pre);
    free(best);
    free(from);
    return PE_OK;
}

pe_status md_plan_stages(const md_mlp *m, int pp, const int *split, int *first, pe_err *err)
{
    if (!m || m->nlayers < 1 || !first)
        return pe_fail(err, PE_EINVAL, "stage plan: no model or no output array");
    if (pp < 1)
        return pe_fail(err, PE_EINVAL, "pp=%d: the pipeline needs at least 1 stage", pp);
    if (pp > m->nlayers)
        return pe_fail(err, PE_EINVAL,
                       "%d stages but the model has only %d layers; use --pp <= %d", pp,
                       m->nlayers, m->nlayers);
    if (split) {
        pe_status s = md_check_split(m, pp, split, err);
        if (s != PE_OK)
            return s;
        first[0] = 0;
        for (int p = 0; p < pp; p++)
            first[p + 1] = first[p] + split[p];
        return PE_OK;
    }
    return md_balance(m, pp, first, err);
}

static pe_status md_not_divisible(int l, size_t width, int tp, pe_err *err)
{
    char hint[96] = "";
    int found = 0;
    size_t at = 0;
    for (size_t d = 2; d <= width && found < 2; d++)
        if (width % d == 0) {
            at += (size_t)snprintf(hint + at, sizeof hint - at, "%s%zu", found ? ", " : "", d);
            found++;
        }
    if (found)
        return pe_fail(err, PE_EINVAL,
                       "layer %d: width %zu is not divisible by tp=%d; use a tp that divides %zu "
                       "(e.g. %s) or split the layers with --pp instead",
                       l, width, tp, width, hint);
    return pe_fail(err, PE_EINVAL,
                   "layer %d: width %zu is not divisible by tp=%d; use tp=1 or split the layers "
                   "with --pp instead",
                   l, width, tp);
}

pe_status md_plan_tp(const md_mlp *m, int first, int last, int tp, md_shard_kind *kinds,
                     pe_err *err)
{
    if (!m || !kinds || first < 0 || last > m->nlayers || first >= last)
        return pe_fail(err, PE_EINVAL, "tp plan: layer range [%d, %d) is not inside the %d layers",
                       first, last, m ? m->nlayers : 0);
    if (tp < 1)
        return pe_fail(err, PE_EINVAL, "tp=%d: the tensor-parallel degree must be at least 1", tp);
    for (int l = first; l < last; l++) {
        md_shard_kind k = MD_SHARD_NONE;
        if (tp > 1)
            k = (l - first) % 2 ? MD_SHARD_ROW
                : l + 1 < last  ? MD_SHARD_COLUMN
                                : MD_SHARD_COLUMN_GATHER;
        kinds[l - first] = k;
        /* a ROW layer's in is its COLUMN partner's out, checked there */
        if (k != MD_SHARD_NONE && k != MD_SHARD_ROW && m->layers[l].out % (size_t)tp)
            return md_not_divisible(l, m->layers[l].out, tp, err);
    }
    return PE_OK;
}

pe_status md_shard_layer(const md_layer *l, md_shard_kind kind, int t, int tp, float **w,
                         float **b, size_t *out_t, size_t *in_t, pe_err *err)
{
    if (w && b)
        *w = *b = NULL;
    if (!l || tp < 1 || t < 0 || t >= tp || (unsigned)kind > MD_SHARD_COLUMN_GATHER)
        return pe_fail(err, PE_EINVAL, "shard: rank %d of tp=%d (or the kind) is out of range",
                       t, tp);
    size_t T = (size_t)tp, r0 = 0, rn = l->out, c0 = 0, cn = l->in; /* rows, columns of W */
    if (kind == MD_SHARD_COLUMN || kind == MD_SHARD_COLUMN_GATHER) {
        if (l->out % T)
            return pe_fail(err, PE_EINVAL, "shard: out width %zu is not divisible by tp=%d",
                           l->out, tp);
        rn = l->out / T;
        r0 = (size_t)t * rn;
    } else if (kind == MD_SHARD_ROW) {
        if (l->in % T)
            return pe_fail(err, PE_EINVAL, "shard: in width %zu is not divisible by tp=%d", l->in,
                           tp);
        cn = l->in / T;
        c0 = (size_t)t * cn;
    }
    *out_t = rn;
    *in_t = cn;
    if (!w || !b) /* the shape alone */
        return PE_OK;
    *w = malloc(rn * cn * sizeof **w); /* (rn, cn) */
    *b = malloc(rn * sizeof **b);      /* (rn) */
    if (!*w || !*b) {
        free(*w);
        free(*b);
        *w = *b = NULL;
        return pe_fail(err, PE_ENOMEM, "shard: out of memory for a (%zu, %zu) slice", rn, cn);
    }
    for (size_t r = 0; r < rn; r++)
        memcpy(*w + r * cn, l->w + (r0 + r) * l->in + c0, cn * sizeof **w);
    memcpy(*b, l->b + r0, rn * sizeof **b);
    return PE_OK;
}
