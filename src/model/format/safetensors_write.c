/* safetensors_write.c: writes safetensors files (F32, BF16 or F16), streaming the data after
 * the header and converting it from floats on the way. */
#include "model/format/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"

enum { ST_CHUNK = 4096 }; /* elements converted per fwrite */

struct st_writer {
    FILE *fp;
    st_dtype dtype; /* F32, BF16 or F16 */
    uint16_t *half; /* (ST_CHUNK) converted elements (BF16, F16) */
    char *path; /* the final name */
    char *tmp;  /* written here, renamed to path at close */
    size_t total, written; /* elements */
};

/* The JSON header: "__metadata__" first, then the tensors in order, packed back to back. */
static pe_status st_header_json(const char *path, st_dtype dtype, const st_kv *meta,
                                int nmeta, const st_out_tensor *ts, int n, char **json,
                                size_t *total, pe_err *err)
{
    pe_status s = PE_OK;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory building the header", path);
    if (nmeta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < nmeta; i++)
            if (!meta[i].key || !meta[i].value ||
                !cJSON_AddStringToObject(m, meta[i].key, meta[i].value))
                m = NULL;
        if (!m)
            s = pe_fail(err, PE_EINVAL, "%s: a metadata key or value is NULL (or out of memory)",
                        path);
    }
    size_t offset = 0, elems = 0;
    for (int i = 0; i < n && s == PE_OK; i++) {
        const st_out_tensor *t = &ts[i];
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0) {
            s = pe_fail(err, PE_EINVAL, "%s: tensor %d has no usable name", path, i);
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, t->name)) {
            s = pe_fail(err, PE_EINVAL, "%s: tensor '%s' is given twice", path, t->name);
            break;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            s = pe_fail(err, PE_EINVAL, "%s: tensor '%s' has %d dimensions (0..%d supported)", path,
                        t->name, t->ndim, ST_MAX_DIMS);
            break;
        }
        size_t ne = 1, bytes, end;
        int bad = 0;
        for (int d = 0; d < t->ndim; d++)
            bad |= __builtin_mul_overflow(ne, t->shape[d], &ne);
        bad |= __builtin_mul_overflow(ne, st_dtype_size(dtype), &bytes);
        bad |= __builtin_add_overflow(offset, bytes, &end);
        /* JSON numbers are doubles: keep every offset exact */
        if (bad || end > ((size_t)1 << 53)) {
            s = pe_fail(err, PE_EINVAL, "%s: tensor '%s' is too large to write", path, t->name);
            break;
        }
        cJSON *o = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = o ? cJSON_AddArrayToObject(o, "shape") : NULL;
        cJSON *offs = o ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
        int ok = o && shape && offs && cJSON_AddStringToObject(o, "dtype", st_dtype_name(dtype));
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset)) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end));
        if (!ok)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory building the header", path);
        offset = end;
        elems += ne;
    }
    if (s == PE_OK) {
        *json = cJSON_PrintUnformatted(root);
        if (!*json)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory printing the header", path);
        *total = elems;
    }
    cJSON_Delete(root);
    return s;
}

void st_writer_abort(st_writer *w)
{
    if (!w)
        return;
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    free(w->half);
    free(w);
}

pe_status st_writer_open_as(st_writer **out, const char *path, st_dtype dtype,
                            const st_kv *meta, int nmeta, const st_out_tensor *tensors,
                            int ntensors, pe_err *err)
{
    *out = NULL;
    if (!path || ntensors < 0 || (ntensors > 0 && !tensors) || nmeta < 0 || (nmeta > 0 && !meta))
        return pe_fail(err, PE_EINVAL, "st_writer_open: bad arguments (path, tensors or meta)");
    if (dtype != ST_F32 && dtype != ST_BF16 && dtype != ST_F16)
        return pe_fail(err, PE_EINVAL, "%s: cannot write dtype %s; the writer writes F32, BF16 "
                       "or F16", path, st_dtype_name(dtype) ? st_dtype_name(dtype) : "?");
    char *json = NULL;
    size_t total = 0;
    pe_status s = st_header_json(path, dtype, meta, nmeta, tensors, ntensors, &json, &total, err);
    if (s != PE_OK)
        return s;
    st_writer *w = calloc(1, sizeof *w);
    size_t tl = strlen(path) + 32;
    if (w) {
        w->dtype = dtype;
        w->path = strdup(path);
        w->tmp = malloc(tl);
        if (dtype != ST_F32)
            w->half = malloc(ST_CHUNK * sizeof *w->half);
    }
    if (!w || !w->path || !w->tmp || (dtype != ST_F32 && !w->half)) {
        cJSON_free(json);
        st_writer_abort(w);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    w->total = total;
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        s = pe_fail(err, PE_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
        cJSON_free(json);
        st_writer_abort(w);
        return s;
    }
    size_t len = strlen(json), pad = (8 - len % 8) % 8;
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)((uint64_t)(len + pad) >> (8 * i));
    int ok = fwrite(n8, 1, 8, w->fp) == 8 && fwrite(json, 1, len, w->fp) == len &&
             fwrite("        ", 1, pad, w->fp) == pad;
    cJSON_free(json);
    if (!ok) {
        s = pe_fail(err, PE_EIO, "%s: write failed: %s", w->tmp, strerror(errno));
        st_writer_abort(w);
        return s;
    }
    *out = w;
    return PE_OK;
}

pe_status st_writer_put(st_writer *w, const float *x, size_t n, pe_err *err)
{
    if (n > w->total - w->written)
        return pe_fail(err, PE_EINVAL, "%s: %zu more elements than the %zu the header declares",
                       w->path, n - (w->total - w->written), w->total);
    int bad = 0;
    if (w->dtype == ST_F32)
        bad = n && fwrite(x, sizeof *x, n, w->fp) != n;
    for (size_t i = 0; w->dtype != ST_F32 && i < n && !bad; i += ST_CHUNK) {
        size_t m = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        for (size_t k = 0; k < m; k++) /* little-endian host (safetensors.h) */
            w->half[k] = w->dtype == ST_BF16 ? pe_k_to_bf16(x[i + k]) : st_f32_to_f16(x[i + k]);
        bad = fwrite(w->half, sizeof *w->half, m, w->fp) != m;
    }
    if (bad)
        return pe_fail(err, PE_EIO, "%s: write failed: %s (disk full?)", w->tmp, strerror(errno));
    w->written += n;
    return PE_OK;
}

pe_status st_writer_close(st_writer *w, pe_err *err)
{
    pe_status s = PE_OK;
    if (w->written != w->total)
        s = pe_fail(err, PE_EINVAL, "%s: %zu of the %zu declared elements were written", w->path,
                    w->written, w->total);
    else {
        int bad = fflush(w->fp) != 0 || ferror(w->fp);
        bad |= fclose(w->fp) != 0;
        w->fp = NULL;
        if (bad)
            s = pe_fail(err, PE_EIO, "%s: write failed: %s (disk full?)", w->tmp, strerror(errno));
        else if (rename(w->tmp, w->path) != 0)
            s = pe_fail(err, PE_EIO, "%s: cannot rename %s to it: %s", w->path, w->tmp,
                        strerror(errno));
        if (s != PE_OK)
            unlink(w->tmp);
    }
    st_writer_abort(w);
    return s;
}

pe_status st_writer_open(st_writer **w, const char *path, const st_kv *meta, int nmeta,
                         const st_out_tensor *tensors, int ntensors, pe_err *err)
{
    return st_writer_open_as(w, path, ST_F32, meta, nmeta, tensors, ntensors, err);
}

pe_status st_write_as(const char *path, st_dtype dtype, const st_kv *meta, int nmeta,
                      const st_out_tensor *tensors, int ntensors, pe_err *err)
{
    st_writer *w;
    pe_status s = st_writer_open_as(&w, path, dtype, meta, nmeta, tensors, ntensors, err);
    if (s != PE_OK)
        return s;
    for (int i = 0; i < ntensors; i++) {
        size_t ne = 1;
        for (int d = 0; d < tensors[i].ndim; d++)
            ne *= tensors[i].shape[d]; /* checked by st_writer_open */
        if (ne && !tensors[i].data) {
            st_writer_abort(w);
            return pe_fail(err, PE_EINVAL, "%s: tensor '%s' has no data", path, tensors[i].name);
        }
        s = st_writer_put(w, tensors[i].data, ne, err);
        if (s != PE_OK) {
            st_writer_abort(w);
            return s;
        }
    }
    return st_writer_close(w, err);
}

pe_status st_write_f32(const char *path, const st_kv *meta, int nmeta,
                       const st_out_tensor *tensors, int ntensors, pe_err *err)
{
    return st_write_as(path, ST_F32, meta, nmeta, tensors, ntensors, err);
}
