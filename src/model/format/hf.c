/* hf.c: opens a Hugging Face model directory (config.json and its safetensors weights, one
 * file or an index and its shards) and checks it as a whole; finds tensors; releases mapped
 * pages. The config getters are in hf_config.c. */
#include "model/format/hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_INDEX "model.safetensors.index.json"
#define HF_SINGLE "model.safetensors"

struct md_hf_entry {
    const char *name;     /* the st_tensor's name */
    int file;             /* index into h->files */
    const st_tensor *t;
};

char *md_hf_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int hf_is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Reads the whole file at path as a NUL-terminated string. */
static pe_status hf_slurp(const char *path, const char *fix, char **out, size_t *len,
                          pe_err *err)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return pe_fail(err, PE_EIO, "%s: cannot open: %s; %s", path, strerror(errno), fix);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    pe_status s = PE_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? 2 * cap : 8192;
            char *b = realloc(buf, nc);
            if (!b) {
                s = pe_fail(err, PE_ENOMEM, "%s: out of memory reading the file", path);
                break;
            }
            buf = b;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) {
            if (ferror(fp))
                s = pe_fail(err, PE_EIO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
    }
    fclose(fp);
    if (s != PE_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return PE_OK;
}

/* Parses the JSON file at path into an object. */
static pe_status hf_read_json(const char *path, const char *fix, cJSON **out, pe_err *err)
{
    *out = NULL;
    char *text;
    size_t n = 0;
    pe_status s = hf_slurp(path, fix, &text, &n, err);
    if (s != PE_OK)
        return s;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j) {
        size_t at = end ? (size_t)(end - text) : 0;
        s = pe_fail(err, PE_EFORMAT,
                    "%s: not valid JSON (error at byte %zu of %zu, near \"%.24s\"); the file is "
                    "damaged: fetch or write it again",
                    path, at, n, at < n ? text + at : "");
    } else {
        for (const char *c = end; c && c < text + n && s == PE_OK; c++)
            if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r')
                s = pe_fail(err, PE_EFORMAT, "%s: data after the JSON value (byte %zu of %zu); the file is "
                            "damaged: fetch or write it again",
                            path, (size_t)(c - text), n);
        if (s == PE_OK && !cJSON_IsObject(j))
            s = pe_fail(err, PE_EFORMAT, "%s: the JSON is not an object ({...}); the file is "
                        "damaged or not what its name says", path);
    }
    free(text);
    if (s != PE_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return PE_OK;
}

void md_hf_close(md_hf *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->nfiles; i++)
        st_close(&h->files[i]);
    free(h->files);
    free(h->index);
    cJSON_Delete(h->config);
    free(h->config_path);
    free(h->dir);
    memset(h, 0, sizeof *h);
}

/* A shard name from the index: a relative path that cannot leave the directory (no "..",
 * no "." and no empty component, so that one file has one name). */
static int hf_safe_name(const char *name)
{
    if (!*name || name[0] == '/' || strchr(name, '\\'))
        return 0;
    for (const char *p = name; *p;) { /* no ".." component */
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += len + (slash ? 1 : 0);
    }
    return 1;
}

/* Opens files[0..n) from names (relative to h->dir). why says who named them. */
static pe_status hf_open_files(md_hf *h, const char *const *names, int n, const char *why,
                               pe_err *err)
{
    h->files = calloc((size_t)n, sizeof *h->files);
    if (!h->files)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", h->dir);
    for (int i = 0; i < n; i++) {
        char *path = md_hf_path(h->dir, names[i]);
        if (!path)
            return pe_fail(err, PE_ENOMEM, "%s: out of memory", h->dir);
        pe_err e = {{0}};
        pe_status s = st_open(path, &h->files[i], &e);
        free(path);
        if (s != PE_OK)
            return pe_fail(err, s, "%s%s", e.msg, why);
        h->nfiles++;
    }
    return PE_OK;
}

static int hf_cmp_entry(const void *a, const void *b)
{
    return strcmp(((const md_hf_entry *)a)->name, ((const md_hf_entry *)b)->name);
}

/* The sorted index of every tensor of every file; a tensor in two files is an error. */
static pe_status hf_build_index(md_hf *h, pe_err *err)
{
    size_t n = 0;
    for (int i = 0; i < h->nfiles; i++)
        n += (size_t)h->files[i].ntensors;
    if (n > INT_MAX)
        return pe_fail(err, PE_EFORMAT, "%s: %zu tensors, more than supported", h->dir, n);
    h->index = calloc(n ? n : 1, sizeof *h->index);
    if (!h->index)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory for %zu tensors", h->dir, n);
    for (int i = 0; i < h->nfiles; i++)
        for (int k = 0; k < h->files[i].ntensors; k++)
            h->index[h->ntensors++] = (md_hf_entry){h->files[i].tensors[k].name, i,
                                                    &h->files[i].tensors[k]};
    qsort(h->index, n, sizeof *h->index, hf_cmp_entry);
    for (size_t i = 1; i < n; i++)
        if (strcmp(h->index[i - 1].name, h->index[i].name) == 0) {
            const char *a = h->files[h->index[i - 1].file].path;
            const char *b = h->files[h->index[i].file].path;
            if (strcmp(a, b) > 0) {
                const char *t = a;
                a = b;
                b = t;
            }
            return pe_fail(err, PE_EFORMAT,
                           "tensor '%s' is in two shards, %s and %s; a checkpoint holds each "
                           "tensor once: remove it from one (or write the checkpoint again)",
                           h->index[i].name, a, b);
        }
    return PE_OK;
}

static pe_status hf_open_single(md_hf *h, pe_err *err)
{
    const char *names[] = {HF_SINGLE};
    pe_status s = hf_open_files(h, names, 1, "", err);
    return s == PE_OK ? hf_build_index(h, err) : s;
}

static pe_status hf_open_sharded(md_hf *h, const char *index_path, pe_err *err)
{
    cJSON *idx;
    pe_status s = hf_read_json(index_path, "write the index again (save_pretrained does)", &idx,
                               err);
    if (s != PE_OK)
        return s;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(idx, "metadata");
    const char **names = NULL;
    int nnames = 0;
    if (!cJSON_IsObject(map))
        s = pe_fail(err, PE_EFORMAT,
                    "%s: no \"weight_map\" object (tensor name -> shard file); the index is "
                    "damaged: write it again",
                    index_path);
    else if (meta && !cJSON_IsObject(meta) && !cJSON_IsNull(meta))
        s = pe_fail(err, PE_EFORMAT, "%s: \"metadata\" is not an object; the index is damaged: "
                    "write it again", index_path);
    else if (cJSON_GetArraySize(map) == 0)
        s = pe_fail(err, PE_EFORMAT, "%s: \"weight_map\" names no tensor; the index is "
                    "damaged: write it again", index_path);
    if (s == PE_OK) {
        names = calloc((size_t)cJSON_GetArraySize(map), sizeof *names);
        if (!names)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory", index_path);
    }
    const cJSON *e;
    if (s == PE_OK)
        cJSON_ArrayForEach(e, map)
        {
            if (!cJSON_IsString(e)) {
                s = pe_fail(err, PE_EFORMAT,
                            "%s: weight_map entry '%s' is not a file name string; the index "
                            "is damaged: write it again",
                            index_path, e->string);
                break;
            }
            if (!hf_safe_name(e->valuestring)) {
                s = pe_fail(err, PE_EFORMAT,
                            "%s: weight_map puts tensor '%s' in \"%.200s\", a path outside the "
                            "model directory; shards must be files inside it (e.g. "
                            "model-00001-of-00002.safetensors)",
                            index_path, e->string, e->valuestring);
                break;
            }
            int seen = 0;
            for (int i = 0; i < nnames && !seen; i++)
                seen = strcmp(names[i], e->valuestring) == 0;
            if (!seen)
                names[nnames++] = e->valuestring;
        }
    if (s == PE_OK) {
        char why[PE_ERR_LEN];
        snprintf(why, sizeof why, " (a shard named by %s)", index_path);
        s = hf_open_files(h, names, nnames, why, err);
    }
    if (s == PE_OK)
        s = hf_build_index(h, err);
    /* every tensor the index names is in the shard it names */
    if (s == PE_OK)
        cJSON_ArrayForEach(e, map)
        {
            const st_file *f = NULL;
            const st_tensor *t = md_hf_find(h, e->string, &f);
            if (!t || strcmp(f->path + strlen(h->dir) + 1, e->valuestring) != 0) {
                s = t ? pe_fail(err, PE_EFORMAT,
                                "%s: weight_map puts tensor '%s' in %s, but it is in %s; write "
                                "the index again",
                                index_path, e->string, e->valuestring, f->path)
                      : pe_fail(err, PE_EFORMAT,
                                "%s: weight_map puts tensor '%s' in %s, but that shard has no "
                                "such tensor; the shard or the index is from another checkpoint",
                                index_path, e->string, e->valuestring);
                break;
            }
        }
    free(names);
    cJSON_Delete(idx);
    return s;
}

pe_status md_hf_open(const char *dir, md_hf *h, pe_err *err)
{
    memset(h, 0, sizeof *h);
    if (!dir || !*dir)
        return pe_fail(err, PE_EINVAL, "md_hf_open: no directory given");
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return pe_fail(err, PE_EIO, "%s: %s; give a Hugging Face model directory (config.json "
                       "and model.safetensors)", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return pe_fail(err, PE_EIO, "%s: not a directory; a decoder is a Hugging Face model "
                       "directory (config.json and model.safetensors)", dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    h->dir = strndup(dir, dl);
    h->config_path = h->dir ? md_hf_path(h->dir, "config.json") : NULL;
    char *index_path = h->dir ? md_hf_path(h->dir, HF_INDEX) : NULL;
    char *single_path = h->dir ? md_hf_path(h->dir, HF_SINGLE) : NULL;
    pe_status s = PE_OK;
    if (!h->config_path || !index_path || !single_path)
        s = pe_fail(err, PE_ENOMEM, "%s: out of memory", dir);
    cJSON *cfg = NULL;
    if (s == PE_OK)
        s = hf_read_json(h->config_path,
                         "a model directory needs the config.json that save_pretrained writes "
                         "beside the weights",
                         &cfg, err);
    h->config = cfg;
    if (s == PE_OK) {
        if (hf_is_file(index_path))
            s = hf_open_sharded(h, index_path, err);
        else if (hf_is_file(single_path))
            s = hf_open_single(h, err);
        else {
            char *bin = md_hf_path(h->dir, "pytorch_model.bin");
            int has_bin = bin && hf_is_file(bin);
            free(bin);
            s = pe_fail(err, PE_EIO,
                        "%s: no %s nor %s; %s", h->dir, HF_SINGLE, HF_INDEX,
                        has_bin ? "the weights are in pytorch_model.bin: convert them to "
                                  "safetensors (model.save_pretrained(dir, "
                                  "safe_serialization=True))"
                                : "put the weights beside config.json as save_pretrained writes "
                                  "them");
        }
    }
    free(index_path);
    free(single_path);
    if (s != PE_OK)
        md_hf_close(h);
    return s;
}

const st_tensor *md_hf_find(const md_hf *h, const char *name, const st_file **file)
{
    if (file)
        *file = NULL;
    if (!h->index || !name)
        return NULL;
    md_hf_entry key = {name, 0, NULL};
    const md_hf_entry *e =
        bsearch(&key, h->index, (size_t)h->ntensors, sizeof key, hf_cmp_entry);
    if (!e)
        return NULL;
    if (file)
        *file = &h->files[e->file];
    return e->t;
}

/* ---- memory ------------------------------------------------------------------------------ */

void md_hf_release(const st_file *f, const void *p, size_t bytes)
{
    if (!f || !f->map || !p || bytes == 0)
        return;
    uintptr_t lo = (uintptr_t)f->map, hi = lo + f->map_bytes;
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    if (b < a) /* wrapped */
        b = hi;
    a = a < lo ? lo : a;
    b = b > hi ? hi : b;
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    a = (a + page - 1) / page * page; /* only whole pages inside the range */
    b = b / page * page;
    /* the last partial page of the mapping belongs to no other range: drop it with the rest
     * when the range reaches the mapping's end */
    if ((uintptr_t)p + bytes >= hi && hi % page)
        b = (hi + page - 1) / page * page;
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
