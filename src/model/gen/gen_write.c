/* gen_write.c: pe_gen_write, a random decoder written as save_pretrained writes it: the plan
 * of the family, its values drawn tensor by tensor, split into shards, and the index and
 * config.json beside them.
 *
 * Values: tensor t draws from its own generator, seeded by the spec's seed and the FNV-1a
 * hash of t's key (its canonical name), row after row, so a tensor's values do not depend
 * on the file it lands in, on the tensors before it, or on GPT-2's naming variant. Each
 * value is (float)(std * z), z a standard normal in double; a BF16 file holds those floats
 * rounded to nearest even.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/sample.h"
#include "model/format/hf.h"
#include "model/format/safetensors.h"
#include "model/gen/gen.h"
#include "model/gen/rng.h"

md_gen_tensor *md_gen_add(md_gen_plan *p, const char *name, const char *key, md_gen_fill fill,
                          double std, int ndim, const size_t *shape)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        md_gen_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        p->t = t;
        p->cap = cap;
    }
    md_gen_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->key, sizeof t->key, "%s", key ? key : name);
    t->fill = fill;
    t->std = t->qk_std = std;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    return t;
}

void md_gen_plan_free(md_gen_plan *p)
{
    free(p->t);
    cJSON_Delete(p->config);
    memset(p, 0, sizeof *p);
}

static size_t md_gen_nelem(const md_gen_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static uint64_t md_fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Fills row r (len elements) of t. z draws every element, so std 0 changes no other value. */
static void md_gen_row(const md_gen_tensor *t, md_rng *rng, size_t r, float *row, size_t len)
{
    for (size_t j = 0; j < len; j++) {
        double v;
        switch (t->fill) {
        case MD_FILL_TRIL: v = j <= r % len ? 1.0 : 0.0; break; /* rows of (P, P) */
        case MD_FILL_CONST: v = t->value; break;
        case MD_FILL_NORM: v = 1.0 + t->std * md_rng_normal(rng); break;
        default: v = (j < t->qk_cols ? t->qk_std : t->std) * md_rng_normal(rng); break;
        }
        row[j] = v == 0.0 ? 0.0f : (float)v; /* no -0 from a zero std */
    }
}

/* Writes the tensors [a, b) of the plan into one file. */
static pe_status md_gen_write_file(const pe_gen_spec *sp, const md_gen_plan *p, int a, int b,
                                   const char *path, float *row, pe_err *err)
{
    st_out_tensor *ts = calloc((size_t)(b - a), sizeof *ts);
    if (!ts)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    for (int i = a; i < b; i++) {
        ts[i - a].name = p->t[i].name;
        ts[i - a].ndim = p->t[i].ndim;
        for (int d = 0; d < p->t[i].ndim; d++)
            ts[i - a].shape[d] = p->t[i].shape[d];
    }
    const st_kv meta[] = {{"format", "pt"}}; /* as transformers writes it */
    st_writer *w;
    pe_status s = st_writer_open_as(&w, path, sp->dtype == PE_DTYPE_BF16 ? ST_BF16 : ST_F32,
                                    meta, 1, ts, b - a, err);
    free(ts);
    for (int i = a; i < b && s == PE_OK; i++) {
        const md_gen_tensor *t = &p->t[i];
        size_t n = md_gen_nelem(t), len = t->ndim ? t->shape[t->ndim - 1] : 1;
        uint64_t x = sp->seed;
        md_rng rng;
        md_rng_seed(&rng, pe_k_splitmix64(&x) ^ md_fnv1a(t->key));
        for (size_t r = 0; len && r < n / len && s == PE_OK; r++) {
            md_gen_row(t, &rng, r, row, len);
            s = st_writer_put(w, row, len, err);
        }
    }
    if (s == PE_OK)
        return st_writer_close(w, err);
    st_writer_abort(w);
    return s;
}

/* The first tensor of each shard, shard k holding [first[k], first[k + 1]): contiguous in
 * state_dict order, split near equal bytes, none empty. */
static void md_gen_split(const md_gen_plan *p, int nshards, size_t esize, int *first)
{
    double total = 0, cum = 0;
    for (int i = 0; i < p->n; i++)
        total += (double)(md_gen_nelem(&p->t[i]) * esize);
    int k = 0;
    first[0] = 0;
    for (int i = 0; i < p->n && k < nshards - 1; i++) {
        cum += (double)(md_gen_nelem(&p->t[i]) * esize);
        if (cum >= total * (k + 1) / nshards || p->n - 1 - i == nshards - 1 - k)
            first[++k] = i + 1;
    }
    first[nshards] = p->n;
}

/* Removes dir/name if it exists. */
static pe_status md_gen_remove(const char *dir, const char *name, pe_err *err)
{
    char *path = md_hf_path(dir, name);
    if (!path)
        return pe_fail(err, PE_ENOMEM, "out of memory");
    pe_status s = PE_OK;
    if (unlink(path) != 0 && errno != ENOENT)
        s = pe_fail(err, PE_EIO, "%s: cannot remove the stale file: %s", path, strerror(errno));
    free(path);
    return s;
}

static pe_status md_gen_weights(const pe_gen_spec *sp, const md_gen_plan *p, const char *dir,
                                pe_err *err)
{
    int N = sp->shards;
    size_t esize = sp->dtype == PE_DTYPE_BF16 ? 2 : 4, maxrow = 1;
    for (int i = 0; i < p->n; i++)
        if (p->t[i].ndim && p->t[i].shape[p->t[i].ndim - 1] > maxrow)
            maxrow = p->t[i].shape[p->t[i].ndim - 1];
    int *first = malloc((size_t)(N + 1) * sizeof *first);
    float *row = malloc(maxrow * sizeof *row);
    cJSON *index = N > 1 ? cJSON_CreateObject() : NULL;
    cJSON *map = index ? cJSON_CreateObject() : NULL;
    pe_status s = PE_OK;
    if (!first || !row || (N > 1 && !map))
        s = pe_fail(err, PE_ENOMEM, "%s: out of memory", dir);
    if (s == PE_OK)
        md_gen_split(p, N, esize, first);
    if (s == PE_OK) /* one checkpoint in the directory: no stale file of the other layout */
        s = md_gen_remove(dir, N > 1 ? "model.safetensors" : "model.safetensors.index.json",
                          err);
    size_t total = 0;
    for (int k = 0; k < N && s == PE_OK; k++) {
        char name[64];
        if (N > 1)
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, N);
        else
            snprintf(name, sizeof name, "model.safetensors");
        char *path = md_hf_path(dir, name);
        s = path ? md_gen_write_file(sp, p, first[k], first[k + 1], path, row, err)
                 : pe_fail(err, PE_ENOMEM, "out of memory");
        free(path);
        for (int i = first[k]; i < first[k + 1] && s == PE_OK; i++) {
            total += md_gen_nelem(&p->t[i]) * esize;
            if (map && !cJSON_AddStringToObject(map, p->t[i].name, name))
                s = pe_fail(err, PE_ENOMEM, "out of memory building the index");
        }
    }
    if (s == PE_OK && index) {
        cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
        if (!meta || !cJSON_AddNumberToObject(meta, "total_size", (double)total) ||
            !cJSON_AddItemToObject(index, "weight_map", map))
            s = pe_fail(err, PE_ENOMEM, "out of memory building the index");
        else {
            map = NULL; /* owned by index */
            char *path = md_hf_path(dir, "model.safetensors.index.json");
            s = path ? md_json_write_file(path, index, err)
                     : pe_fail(err, PE_ENOMEM, "out of memory");
            free(path);
        }
    }
    cJSON_Delete(map);
    cJSON_Delete(index);
    free(row);
    free(first);
    return s;
}

static pe_status md_gen_write(const pe_gen_spec *sp, const char *dir, pe_err *err)
{
    if (!dir || !*dir)
        return pe_fail(err, PE_EINVAL, "pe_gen_write: no directory given");
    pe_status s = md_gen_check(sp, err);
    if (s != PE_OK)
        return s;
    md_gen_plan p = {0};
    s = sp->arch == PE_GEN_GPT2 ? md_gen_plan_gpt2(sp, &p, err) : md_gen_plan_llama(sp, &p, err);
    if (s == PE_OK && sp->shards > p.n)
        s = pe_fail(err, PE_EINVAL, "%d shards for a model of %d tensors; use at most %d",
                    sp->shards, p.n, p.n);
    struct stat sb;
    if (s == PE_OK && mkdir(dir, 0755) != 0 && errno != EEXIST)
        s = pe_fail(err, PE_EIO, "%s: cannot create the directory: %s; check that its parent "
                    "exists and is writable", dir, strerror(errno));
    if (s == PE_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        s = pe_fail(err, PE_EIO, "%s: exists and is not a directory; give a directory for the "
                    "model", dir);
    if (s == PE_OK)
        s = md_gen_weights(sp, &p, dir, err);
    if (s == PE_OK) {
        char *path = md_hf_path(dir, "config.json");
        s = path ? md_json_write_file(path, p.config, err)
                 : pe_fail(err, PE_ENOMEM, "out of memory");
        free(path);
    }
    md_gen_plan_free(&p);
    return s;
}

pe_status pe_gen_write(const pe_gen_spec *sp, const char *dir)
{
    pe_err err = {{0}};
    pe_status s = md_gen_write(sp, dir, &err);
    if (s != PE_OK)
        pe_set_last_error(err.msg);
    return s;
}
