/* safetensors.h: reading (mmap, every byte checked) and writing (F32, BF16, F16) of
 * safetensors files.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON header, then the data.
 * The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]},
 * with offsets relative to the start of the data section, and may carry a
 * "__metadata__" object of string -> string.
 *
 * st_open checks the whole header against the file before anything is used: the header
 * length, the JSON, every dtype, shape and offset (no overflow, inside the data section,
 * no two tensors overlapping). After a successful st_open every st_tensor.data points to
 * end - begin readable bytes. Messages name the file, the tensor and the byte at fault.
 * (A file truncated by someone else while it is mapped can still fault; nothing can
 * check for that.)
 *
 * The host must be little-endian (checked at compile time): F32 data is used in place.
 */
#ifndef PE_MODEL_SAFETENSORS_H
#define PE_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ST_MAX_DIMS 8
/* Larger headers are refused as absurd (the reference implementation caps at 100 MB). */
#define ST_MAX_HEADER ((size_t)100 << 20)

typedef enum st_dtype {
    ST_BOOL = 0, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2, ST_U16, ST_I16, ST_F16, ST_BF16,
    ST_U32, ST_I32, ST_F32, ST_U64, ST_I64, ST_F64, ST_NDTYPES
} st_dtype;

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;
    size_t shape[ST_MAX_DIMS]; /* (ndim) */
    size_t nelem;              /* product of shape (1 for a scalar) */
    size_t begin, end;         /* byte offsets in the data section */
    const void *data;          /* end - begin bytes inside the mapping */
} st_tensor;

typedef struct st_file {
    char *path;
    void *map;                 /* the whole file, read-only */
    size_t map_bytes;
    const unsigned char *data; /* the data section */
    size_t data_bytes;
    int ntensors;
    st_tensor *tensors;        /* (ntensors), in header order */
    int nmeta;
    char **meta;               /* (nmeta, 2): key, value, key, value, ... */
} st_file;

/* "F32", "BF16", ...; NULL for an unknown name. */
const char *st_dtype_name(st_dtype t);
/* Bytes per element. */
size_t st_dtype_size(st_dtype t);

/* Maps and validates path. On failure f is left empty (st_close is harmless). A missing or
 * unreadable file is PE_EIO; a malformed one PE_EFORMAT. */
pe_status st_open(const char *path, st_file *f, pe_err *err);
void st_close(st_file *f);

/* The tensor named name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* Like st_find, but a missing tensor is a PE_EFORMAT error that names it and the file. */
pe_status st_require(const st_file *f, const char *name, const st_tensor **t, pe_err *err);
/* The metadata value of key, or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* Converts t (F32, F16 or BF16) to t->nelem floats in dst. Any other dtype is PE_EFORMAT
 * with a message saying which dtypes are read. */
pe_status st_read_f32(const st_file *f, const st_tensor *t, float *dst, pe_err *err);

/* IEEE binary16 (with subnormals, inf, nan) and bfloat16 bit patterns to float. */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t h);
/* A float to the nearest binary16, ties to even (overflow to inf, subnormals kept, NaN stays
 * a quiet NaN). (Float to bf16 is pe_k_to_bf16, kernels/bf16.h.) */
uint16_t st_f32_to_f16(float x);

/* ---- writing ---------------------------------------------------------------------------- */

typedef struct st_kv {
    const char *key, *value;
} st_kv;

typedef struct st_out_tensor {
    const char *name;
    int ndim;
    size_t shape[ST_MAX_DIMS]; /* (ndim) */
    const float *data;         /* product(shape) floats; unused by st_writer_open */
} st_out_tensor;

/* Streaming writer of a file whose tensors all have one dtype, F32, BF16 or F16: the header
 * is written at open (padded with spaces to a multiple of 8 bytes, as the reference
 * implementation does), then the data of the tensors in order through any number of
 * st_writer_put calls, given as floats and rounded to the dtype (to nearest, ties to even:
 * pe_k_to_bf16, st_f32_to_f16). The file appears under its name only at a successful
 * st_writer_close; st_writer_abort drops it. */
typedef struct st_writer st_writer;

pe_status st_writer_open_as(st_writer **w, const char *path, st_dtype dtype,
                            const st_kv *meta, int nmeta, const st_out_tensor *tensors,
                            int ntensors, pe_err *err);
/* st_writer_open_as with F32. */
pe_status st_writer_open(st_writer **w, const char *path, const st_kv *meta, int nmeta,
                         const st_out_tensor *tensors, int ntensors, pe_err *err);
/* Appends the next n floats of the data (tensor after tensor, row-major). */
pe_status st_writer_put(st_writer *w, const float *x, size_t n, pe_err *err);
/* Checks every declared element was written, then publishes the file. Frees w. */
pe_status st_writer_close(st_writer *w, pe_err *err);
/* Frees w and removes the partial file. */
void st_writer_abort(st_writer *w);

/* One call: writes tensors[i].data for every tensor, as dtype or as F32. */
pe_status st_write_as(const char *path, st_dtype dtype, const st_kv *meta, int nmeta,
                      const st_out_tensor *tensors, int ntensors, pe_err *err);
pe_status st_write_f32(const char *path, const st_kv *meta, int nmeta,
                       const st_out_tensor *tensors, int ntensors, pe_err *err);

#endif
