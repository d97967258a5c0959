/* safetensors.c: maps a safetensors file and checks its header against the file. */
#include "model/format/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors reader uses F32 data in place and needs a little-endian host"
#endif

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_NDTYPES] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_U16] = {"U16", 2},         [ST_I16] = {"I16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_U32] = {"U32", 4}, [ST_I32] = {"I32", 4},
    [ST_F32] = {"F32", 4},         [ST_U64] = {"U64", 8}, [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},
};

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_NDTYPES ? st_dtypes[t].name : NULL;
}

size_t st_dtype_size(st_dtype t) { return (unsigned)t < ST_NDTYPES ? st_dtypes[t].size : 0; }

static int st_dtype_parse(const char *s, st_dtype *out)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = (st_dtype)i;
            return 1;
        }
    return 0;
}

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    }
    if (exp == 31)
        bits = sign | 0x7f800000u | (mant << 13); /* inf, or nan keeping its payload */
    else
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t st_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keeping the payload's top bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (halfway above 65504, the largest half): inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal (or zero), mant = x * 2^24 rounded */
        float v;
        memcpy(&v, &a, sizeof v);
        return (uint16_t)(sign | (uint16_t)nearbyintf(v * 0x1p24f)); /* exact scaling */
    }
    uint32_t m = a - ((uint32_t)(127 - 15) << 23); /* rebias the exponent */
    m += 0xfffu + ((m >> 13) & 1u);                  /* round the 13 dropped bits, ties even */
    return (uint16_t)(sign | (m >> 13));
}

float st_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->ntensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < 2 * f->nmeta; i++)
        free(f->meta[i]);
    free(f->meta);
    if (f->map)
        munmap(f->map, f->map_bytes);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* A JSON number that is an integer in [0, 2^53] (all doubles above are not exact). */
static int st_json_size(const cJSON *v, size_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0 && floor(d) == d))
        return 0;
    *out = (size_t)d;
    return 1;
}

static pe_status st_parse_meta(st_file *f, const cJSON *meta, pe_err *err)
{
    if (!cJSON_IsObject(meta))
        return pe_fail(err, PE_EFORMAT, "%s: \"__metadata__\" is not a JSON object of strings",
                       f->path);
    int n = cJSON_GetArraySize(meta);
    f->meta = calloc((size_t)n * 2 + 1, sizeof *f->meta);
    if (!f->meta)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory reading the metadata", f->path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta)
    {
        if (!cJSON_IsString(kv))
            return pe_fail(err, PE_EFORMAT,
                           "%s: metadata entry '%s' is not a string (safetensors metadata "
                           "maps strings to strings)",
                           f->path, kv->string);
        char *k = strdup(kv->string), *v = strdup(kv->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return pe_fail(err, PE_ENOMEM, "%s: out of memory reading the metadata", f->path);
        }
        f->meta[2 * f->nmeta] = k;
        f->meta[2 * f->nmeta + 1] = v;
        f->nmeta++;
    }
    return PE_OK;
}

static pe_status st_parse_tensor(st_file *f, const cJSON *j, st_tensor *t, pe_err *err)
{
    const char *p = f->path, *name = t->name;
    if (!cJSON_IsObject(j))
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s': header entry is not a JSON object", p,
                       name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    if (!cJSON_IsString(dt))
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s': no \"dtype\" string", p, name);
    if (!st_dtype_parse(dt->valuestring, &t->dtype))
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s': unknown dtype \"%.32s\" (safetensors dtypes: F64, F32, "
                       "F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)",
                       p, name, dt->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    if (!cJSON_IsArray(shape))
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s': no \"shape\" array", p, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s': %d dimensions, more than the %d supported", p, name,
                       ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    t->nelem = 1;
    int d = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, shape)
    {
        if (!st_json_size(e, &t->shape[d]))
            return pe_fail(err, PE_EFORMAT,
                           "%s: tensor '%s': shape entry %d is not a non-negative integer", p,
                           name, d);
        if (__builtin_mul_overflow(t->nelem, t->shape[d], &t->nelem))
            return pe_fail(err, PE_EFORMAT,
                           "%s: tensor '%s': shape entry %d (%zu) makes the element count "
                           "overflow (absurd shape; corrupt header?)",
                           p, name, d, t->shape[d]);
        d++;
    }
    size_t bytes;
    if (__builtin_mul_overflow(t->nelem, st_dtypes[t->dtype].size, &bytes))
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s': %zu elements of %s overflow the byte count (absurd "
                       "shape; corrupt header?)",
                       p, name, t->nelem, st_dtypes[t->dtype].name);

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !st_json_size(cJSON_GetArrayItem(off, 0), &t->begin) ||
        !st_json_size(cJSON_GetArrayItem(off, 1), &t->end))
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s': \"data_offsets\" is not a pair of non-negative integers "
                       "[begin, end]",
                       p, name);
    if (t->begin > t->end)
        return pe_fail(err, PE_EFORMAT, "%s: tensor '%s': begins at byte %zu after its end %zu", p,
                       name, t->begin, t->end);
    if (t->end - t->begin != bytes)
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s': data_offsets [%zu, %zu] span %zu bytes but %zu elements "
                       "of %s need %zu",
                       p, name, t->begin, t->end, t->end - t->begin, t->nelem,
                       st_dtypes[t->dtype].name, bytes);
    if (t->end > f->data_bytes)
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s' ends at byte %zu but the data section has %zu bytes (file "
                       "truncated?)",
                       p, name, t->end, f->data_bytes);
    t->data = f->data + t->begin;
    return PE_OK;
}

static int st_cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : strcmp(x->name, y->name);
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* No two tensors share a name or a byte. */
static pe_status st_check_layout(st_file *f, pe_err *err)
{
    if (f->ntensors < 2)
        return PE_OK;
    st_tensor **v = malloc((size_t)f->ntensors * sizeof *v);
    if (!v)
        return pe_fail(err, PE_ENOMEM, "%s: out of memory checking the header", f->path);
    for (int i = 0; i < f->ntensors; i++)
        v[i] = &f->tensors[i];
    pe_status s = PE_OK;
    qsort(v, (size_t)f->ntensors, sizeof *v, st_cmp_name);
    for (int i = 1; i < f->ntensors && s == PE_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            s = pe_fail(err, PE_EFORMAT, "%s: tensor '%s' appears twice in the header", f->path,
                        v[i]->name);
    qsort(v, (size_t)f->ntensors, sizeof *v, st_cmp_begin);
    const st_tensor *prev = NULL; /* the non-empty tensor that ends last so far */
    for (int i = 0; i < f->ntensors && s == PE_OK; i++) {
        if (v[i]->begin == v[i]->end)
            continue;
        if (prev && v[i]->begin < prev->end)
            s = pe_fail(err, PE_EFORMAT,
                        "%s: tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)",
                        f->path, v[i]->name, v[i]->begin, v[i]->end, prev->name, prev->begin,
                        prev->end);
        if (!prev || v[i]->end > prev->end)
            prev = v[i];
    }
    free(v);
    return s;
}

static pe_status st_parse_header(st_file *f, const char *text, size_t n, pe_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        return pe_fail(err, PE_EFORMAT,
                       "%s: the header is not valid JSON (error at byte %zu of %zu of the header, "
                       "near \"%.24s\"; not a safetensors file?)",
                       f->path, at, n, at < n ? text + at : "");
    }
    pe_status s = PE_OK;
    for (const char *c = end; c < text + n && s == PE_OK; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r')
            s = pe_fail(err, PE_EFORMAT,
                        "%s: the header has data after its JSON object (byte %zu of %zu)", f->path,
                        (size_t)(c - text), n);
    if (s == PE_OK && !cJSON_IsObject(root))
        s = pe_fail(err, PE_EFORMAT, "%s: the header is JSON but not an object", f->path);
    int count = 0;
    if (s == PE_OK)
        count = cJSON_GetArraySize(root);
    if (s == PE_OK && count > 0) {
        f->tensors = calloc((size_t)count, sizeof *f->tensors);
        if (!f->tensors)
            s = pe_fail(err, PE_ENOMEM, "%s: out of memory for %d header entries", f->path, count);
    }
    const cJSON *j;
    if (s == PE_OK)
        cJSON_ArrayForEach(j, root)
        {
            if (strcmp(j->string, "__metadata__") == 0) {
                if (f->meta)
                    s = pe_fail(err, PE_EFORMAT, "%s: \"__metadata__\" appears twice", f->path);
                else
                    s = st_parse_meta(f, j, err);
            } else {
                st_tensor *t = &f->tensors[f->ntensors];
                t->name = strdup(j->string);
                if (!t->name)
                    s = pe_fail(err, PE_ENOMEM, "%s: out of memory", f->path);
                else {
                    f->ntensors++;
                    s = st_parse_tensor(f, j, t, err);
                }
            }
            if (s != PE_OK)
                break;
        }
    cJSON_Delete(root);
    if (s == PE_OK)
        s = st_check_layout(f, err);
    return s;
}

pe_status st_open(const char *path, st_file *f, pe_err *err)
{
    memset(f, 0, sizeof *f);
    if (!path)
        return pe_fail(err, PE_EINVAL, "st_open: no path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pe_fail(err, PE_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return pe_fail(err, PE_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pe_fail(err, PE_EIO, "%s: not a regular file (a directory?); give the path of "
                       "a .safetensors file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return pe_fail(err, PE_EFORMAT,
                       "%s: the file has %zu bytes, fewer than the 8-byte header length (empty or "
                       "not a safetensors file?)",
                       path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return pe_fail(err, PE_EIO, "%s: cannot map %zu bytes: %s", path, size,
                       strerror(map_errno));
    f->map = map;
    f->map_bytes = size;
    f->path = strdup(path);
    if (!f->path) {
        st_close(f);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    }

    const unsigned char *b = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    pe_status s = PE_OK;
    if (n > ST_MAX_HEADER)
        s = pe_fail(err, PE_EFORMAT,
                    "%s: the header length is %llu bytes, more than the %zu MiB any real header "
                    "needs (not a safetensors file, or a corrupt one)",
                    path, (unsigned long long)n, ST_MAX_HEADER >> 20);
    else if (n > size - 8)
        s = pe_fail(err, PE_EFORMAT,
                    "%s: the header length is %llu bytes but only %zu bytes follow the 8-byte "
                    "length (file truncated?)",
                    path, (unsigned long long)n, size - 8);
    else if (n < 2)
        s = pe_fail(err, PE_EFORMAT, "%s: the header length is %llu bytes, too short for a JSON "
                    "object", path, (unsigned long long)n);
    if (s != PE_OK) {
        st_close(f);
        return s;
    }
    f->data = b + 8 + n;
    f->data_bytes = size - 8 - (size_t)n;

    /* A NUL-terminated copy: the JSON parser then never reads past the header. */
    const char *hdr = (const char *)b + 8;
    const char *nul = memchr(hdr, '\0', (size_t)n);
    if (nul) {
        s = pe_fail(err, PE_EFORMAT, "%s: the header has a NUL byte at byte %zu of %llu", path,
                    (size_t)(nul - hdr), (unsigned long long)n);
        st_close(f);
        return s;
    }
    char *text = malloc((size_t)n + 1);
    if (!text) {
        st_close(f);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)n);
    }
    memcpy(text, hdr, (size_t)n);
    text[n] = '\0';
    s = st_parse_header(f, text, (size_t)n, err);
    free(text);
    if (s != PE_OK)
        st_close(f);
    return s;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

pe_status st_require(const st_file *f, const char *name, const st_tensor **t, pe_err *err)
{
    *t = st_find(f, name);
    if (!*t)
        return pe_fail(err, PE_EFORMAT, "%s: missing tensor '%s'", f->path, name);
    return PE_OK;
}

const char *st_meta(const st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

pe_status st_read_f32(const st_file *f, const st_tensor *t, float *dst, pe_err *err)
{
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case ST_F32:
        if (t->nelem)
            memcpy(dst, src, t->nelem * sizeof(float));
        return PE_OK;
    case ST_F16:
        for (size_t i = 0; i < t->nelem; i++)
            dst[i] = st_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        return PE_OK;
    case ST_BF16:
        for (size_t i = 0; i < t->nelem; i++)
            dst[i] = st_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        return PE_OK;
    default:
        return pe_fail(err, PE_EFORMAT,
                       "%s: tensor '%s' has dtype %s; weights are read from F32, F16 or BF16 "
                       "(convert the file, e.g. in torch with t.float())",
                       f->path, t->name, st_dtypes[t->dtype].name);
    }
}
