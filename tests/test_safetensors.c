/* test_safetensors.c: the safetensors reader and writer: round trips, F16/BF16 decoding,
 * BF16/F16 writing, and corrupt files that must be refused with a message naming the fault. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "model/format/safetensors.h"

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* A file whose 8-byte length says declared, followed by header and ndata bytes of data. */
static void write_raw(const char *path, uint64_t declared, const char *header,
                      const void *data, size_t ndata)
{
    size_t hl = strlen(header), n = 8 + hl + ndata;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(declared >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (ndata)
        memcpy(buf + 8 + hl, data, ndata);
    write_bytes(path, buf, n);
    free(buf);
}

static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    write_raw(path, strlen(header), header, data, ndata);
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, fp), *n);
    fclose(fp);
    return b;
}

static void test_round_trip_f32(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "st_round_trip.safetensors");
    size_t rows = tu_size(37, 5), cols = 19;
    float *a = malloc(rows * cols * sizeof *a), b[3] = {1.5f, -0.0f, INFINITY}, c = 42.0f;
    tu_fill_random(a, rows * cols, 7);
    st_kv meta[] = {{"architecture", "mlp"}, {"note", "quote \" and \\ survive"}};
    st_out_tensor ts[] = {{"a.weight", 2, {rows, cols}, a},
                          {"b", 1, {3}, b},
                          {"scalar", 0, {0}, &c},
                          {"empty", 2, {0, 4}, NULL}};
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(path, meta, 2, ts, 4, &err), PE_OK);

    size_t n;
    unsigned char *raw = read_all(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | raw[i];
    assert_int_equal(hl % 8, 0); /* padded like the reference implementation */
    assert_int_equal(n, 8 + hl + (rows * cols + 3 + 1) * sizeof(float));
    assert_int_equal(raw[8], '{');
    free(raw);

    st_file f;
    assert_int_equal(st_open(path, &f, &err), PE_OK);
    assert_int_equal(f.ntensors, 4);
    const st_tensor *t = st_find(&f, "a.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], rows);
    assert_int_equal(t->shape[1], cols);
    assert_int_equal(t->nelem, rows * cols);
    assert_memory_equal(t->data, a, rows * cols * sizeof *a);
    float got[3];
    assert_int_equal(st_require(&f, "b", &t, &err), PE_OK);
    assert_int_equal(st_read_f32(&f, t, got, &err), PE_OK);
    assert_memory_equal(got, b, sizeof b);
    t = st_find(&f, "scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nelem, 1);
    assert_int_equal(st_read_f32(&f, t, got, &err), PE_OK);
    assert_true(got[0] == 42.0f);
    t = st_find(&f, "empty");
    assert_non_null(t);
    assert_int_equal(t->nelem, 0);
    assert_int_equal(t->begin, t->end);
    assert_null(st_find(&f, "nope"));
    assert_string_equal(st_meta(&f, "architecture"), "mlp");
    assert_string_equal(st_meta(&f, "note"), "quote \" and \\ survive");
    assert_null(st_meta(&f, "missing"));
    st_close(&f);
    st_close(&f); /* harmless twice */
    unlink(path);
    free(a);
}

static void test_f16_values(void **state)
{
    (void)state;
    const uint16_t h[] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x03FF, 0x8001,
                          0x0400, 0x3555, 0x8000, 0x7C00, 0xFC00};
    const float want[] = {1.0f, -2.0f, 0.5f, 65504.0f,
                          5.9604644775390625e-08f /* 2^-24: the smallest subnormal */,
                          6.0975551605224609375e-05f /* 1023 * 2^-24 */,
                          -5.9604644775390625e-08f, 6.103515625e-05f /* 2^-14 */,
                          0.333251953125f, -0.0f, INFINITY, -INFINITY};
    enum { N = sizeof h / sizeof h[0] };
    unsigned char data[2 * N + 2];
    for (int i = 0; i < N; i++) {
        data[2 * i] = (unsigned char)(h[i] & 0xff);
        data[2 * i + 1] = (unsigned char)(h[i] >> 8);
    }
    data[2 * N] = 0x00; /* a quiet nan as its own tensor */
    data[2 * N + 1] = 0x7E;
    char path[512], header[256];
    tu_temp_path(path, sizeof path, "st_f16.safetensors");
    snprintf(header, sizeof header,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"nan\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[%d,%d]}}",
             N, 2 * N, 2 * N, 2 * N + 2);
    write_st(path, header, data, sizeof data);
    st_file f;
    pe_err err = {{0}};
    assert_int_equal(st_open(path, &f, &err), PE_OK);
    float got[N];
    assert_int_equal(st_read_f32(&f, st_find(&f, "h"), got, &err), PE_OK);
    for (int i = 0; i < N; i++) {
        assert_true(got[i] == want[i]);
        assert_int_equal(signbit(got[i]) != 0, signbit(want[i]) != 0);
    }
    assert_int_equal(st_read_f32(&f, st_find(&f, "nan"), got, &err), PE_OK);
    assert_true(isnan(got[0]));
    st_close(&f);
    unlink(path);
}

static void test_bf16_values(void **state)
{
    (void)state;
    const uint16_t h[] = {0x3F80, 0xC000, 0x4049, 0x0001, 0x7F80, 0xFF80, 0x8000, 0x3E80};
    const float want[] = {1.0f, -2.0f, 3.140625f, 9.18354961579912115600575419704879e-41f,
                          INFINITY, -INFINITY, -0.0f, 0.25f};
    enum { N = sizeof h / sizeof h[0] };
    unsigned char data[2 * N];
    for (int i = 0; i < N; i++) {
        data[2 * i] = (unsigned char)(h[i] & 0xff);
        data[2 * i + 1] = (unsigned char)(h[i] >> 8);
    }
    char path[512], header[128];
    tu_temp_path(path, sizeof path, "st_bf16.safetensors");
    snprintf(header, sizeof header,
             "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2,%d],\"data_offsets\":[0,%d]}}", N / 2,
             2 * N);
    write_st(path, header, data, sizeof data);
    st_file f;
    pe_err err = {{0}};
    assert_int_equal(st_open(path, &f, &err), PE_OK);
    const st_tensor *t = st_find(&f, "b");
    assert_int_equal(t->dtype, ST_BF16);
    float got[N];
    assert_int_equal(st_read_f32(&f, t, got, &err), PE_OK);
    assert_true(want[3] == ldexpf(1.0f, -133));
    for (int i = 0; i < N; i++) {
        assert_true(got[i] == want[i]);
        assert_int_equal(signbit(got[i]) != 0, signbit(want[i]) != 0);
    }
    assert_true(isnan(st_bf16_to_f32(0x7FC0)));
    st_close(&f);
    unlink(path);
}

/* ---- corrupt files ----------------------------------------------------------------------- */

/* Opens path and expects failure with status s and a message containing want. */
static void expect_open_fails(const char *path, pe_status s, const char *want)
{
    st_file f;
    pe_err err = {{0}};
    pe_status got = st_open(path, &f, &err);
    if (got != s || !strstr(err.msg, want))
        fail_msg("st_open: status %d (want %d), message \"%s\" (want \"%s\")", got, s, err.msg,
                 want);
    assert_null(f.map); /* left empty */
    assert_int_equal(f.ntensors, 0);
    st_close(&f);
}

typedef struct bad_header {
    const char *header;
    size_t ndata;
    const char *want;
} bad_header;

static void test_corrupt_headers(void **state)
{
    (void)state;
    static const bad_header cases[] = {
        /* a header that lies: the tensor ends beyond the data */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[0,4096]}}", 16,
         "tensor 'w' ends at byte 4096 but the data section has 16 bytes (file truncated?)"},
        /* offsets that disagree with the shape */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}", 16,
         "span 8 bytes but 4 elements of F32 need 16"},
        {"{\"w\":{\"dtype\":\"F99\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
         "tensor 'w': unknown dtype \"F99\""},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
         "\"data_offsets\":[0,16]}}",
         16, "overflow"},
        {"{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],"
         "\"data_offsets\":[0,16]}}",
         16, "overflow the byte count"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,16]}}", 16,
         "shape entry 0 is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", 16,
         "shape entry 0 is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}", 16,
         "shape entry 0 is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0.5,16]}}", 16,
         "\"data_offsets\" is not a pair"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16,
         "\"data_offsets\" is not a pair"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16,
         "begins at byte 16 after its end 0"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[1e300,1e300]}}", 16,
         "\"data_offsets\" is not a pair"},
        {"{\"w\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "tensor 'w': no \"dtype\""},
        {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", 16, "tensor 'w': no \"shape\""},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 16,
         "9 dimensions"},
        {"{\"w\":7}", 0, "tensor 'w': header entry is not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, "tensor 'b' (bytes 8..16) overlaps tensor 'a' (bytes 0..16)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "tensor 'a' appears twice"},
        {"{\"__metadata__\":{\"layers\":3}}", 0, "metadata entry 'layers' is not a string"},
        {"{\"__metadata__\":[1]}", 0, "\"__metadata__\" is not a JSON object"},
        /* not JSON at all, JSON but not an object, an object with trailing bytes */
        {"{\"w\": [1, 2", 0, "the header is not valid JSON"},
        {"not json", 0, "the header is not valid JSON"},
        {"[1, 2, 3]", 0, "the header is JSON but not an object"},
        {"{} trailing", 0, "the header has data after its JSON object"},
        {"{", 0, "too short"},
    };
    char path[512];
    tu_temp_path(path, sizeof path, "st_bad.safetensors");
    unsigned char data[64] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].header, data, cases[i].ndata);
        expect_open_fails(path, PE_EFORMAT, cases[i].want);
    }
    /* every message names the file */
    write_st(path, cases[0].header, data, cases[0].ndata);
    st_file f;
    pe_err err = {{0}};
    assert_int_equal(st_open(path, &f, &err), PE_EFORMAT);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
}

static void test_truncated_file(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "st_trunc.safetensors");
    float a[64], b[32];
    tu_fill_random(a, 64, 1);
    tu_fill_random(b, 32, 2);
    st_out_tensor ts[] = {{"layers.0.weight", 2, {8, 8}, a}, {"layers.1.weight", 2, {4, 8}, b}};
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(path, NULL, 0, ts, 2, &err), PE_OK);
    size_t n;
    unsigned char *raw = read_all(path, &n);
    /* the data cut by 12 bytes: the last tensor runs past the end */
    write_bytes(path, raw, n - 12);
    expect_open_fails(path, PE_EFORMAT,
                      "tensor 'layers.1.weight' ends at byte 384 but the data section has 372 "
                      "bytes (file truncated?)");
    /* cut inside the header */
    write_bytes(path, raw, 30);
    expect_open_fails(path, PE_EFORMAT, "only 22 bytes follow the 8-byte length");
    /* cut inside the length */
    write_bytes(path, raw, 5);
    expect_open_fails(path, PE_EFORMAT, "the file has 5 bytes, fewer than the 8-byte");
    write_bytes(path, raw, 0);
    expect_open_fails(path, PE_EFORMAT, "the file has 0 bytes");
    free(raw);
    unlink(path);
}

static void test_header_length(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "st_hlen.safetensors");
    write_raw(path, 1000, "{}", NULL, 0);
    expect_open_fails(path, PE_EFORMAT,
                      "the header length is 1000 bytes but only 2 bytes follow the 8-byte length");
    write_raw(path, (uint64_t)1 << 62, "{}", NULL, 0);
    expect_open_fails(path, PE_EFORMAT, "more than the 100 MiB");
    write_raw(path, UINT64_MAX, "{}", NULL, 0);
    expect_open_fails(path, PE_EFORMAT, "more than the 100 MiB");
    /* a NUL inside the header */
    unsigned char raw[8 + 4] = {4, 0, 0, 0, 0, 0, 0, 0, '{', 0, ' ', '}'};
    write_bytes(path, raw, sizeof raw);
    expect_open_fails(path, PE_EFORMAT, "NUL byte at byte 1");
    /* an empty object with spaces around it is a valid, empty file */
    write_st(path, "  {}    ", NULL, 0);
    st_file f;
    pe_err err = {{0}};
    assert_int_equal(st_open(path, &f, &err), PE_OK);
    assert_int_equal(f.ntensors, 0);
    assert_int_equal(f.data_bytes, 0);
    st_close(&f);
    unlink(path);
}

static void test_missing_file_and_tensor(void **state)
{
    (void)state;
    expect_open_fails("/nonexistent/dir/model.safetensors", PE_EIO,
                      "/nonexistent/dir/model.safetensors: cannot open");
    expect_open_fails("/tmp", PE_EIO, "/tmp: not a regular file");

    char path[512];
    tu_temp_path(path, sizeof path, "st_missing.safetensors");
    float a[4] = {1, 2, 3, 4};
    st_out_tensor ts[] = {{"present", 1, {4}, a}};
    pe_err err = {{0}};
    assert_int_equal(st_write_f32(path, NULL, 0, ts, 1, &err), PE_OK);
    st_file f;
    assert_int_equal(st_open(path, &f, &err), PE_OK);
    const st_tensor *t = (const st_tensor *)1;
    assert_int_equal(st_require(&f, "layers.0.bias", &t, &err), PE_EFORMAT);
    assert_null(t);
    assert_non_null(strstr(err.msg, "missing tensor 'layers.0.bias'"));
    assert_non_null(strstr(err.msg, path));
    st_close(&f);
    unlink(path);
}

static void test_unreadable_dtype(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "st_i64.safetensors");
    unsigned char data[32] = {1};
    write_st(path, "{\"w\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[0,32]}}", data,
             sizeof data);
    st_file f;
    pe_err err = {{0}};
    assert_int_equal(st_open(path, &f, &err), PE_OK); /* a valid file ... */
    const st_tensor *t = st_find(&f, "w");
    assert_int_equal(t->dtype, ST_I64);
    assert_int_equal(st_dtype_size(t->dtype), 8);
    float got[4];
    /* ... whose weights pengine does not read */
    assert_int_equal(st_read_f32(&f, t, got, &err), PE_EFORMAT);
    assert_non_null(strstr(err.msg, "tensor 'w' has dtype I64"));
    assert_non_null(strstr(err.msg, "F32, F16 or BF16"));
    st_close(&f);
    unlink(path);
}

static void test_writer_counts_elements(void **state)
{
    (void)state;
    char path[512];
    tu_temp_path(path, sizeof path, "st_writer.safetensors");
    unlink(path);
    float a[6] = {0};
    st_out_tensor ts[] = {{"a", 2, {2, 3}, NULL}};
    st_writer *w;
    pe_err err = {{0}};
    assert_int_equal(st_writer_open(&w, path, NULL, 0, ts, 1, &err), PE_OK);
    assert_int_equal(st_writer_put(w, a, 4, &err), PE_OK);
    assert_int_equal(st_writer_put(w, a, 3, &err), PE_EINVAL); /* one too many */
    assert_non_null(strstr(err.msg, "more elements than the 6"));
    assert_int_equal(st_writer_close(w, &err), PE_EINVAL); /* 4 of 6 */
    assert_non_null(strstr(err.msg, "4 of the 6 declared elements"));
    assert_int_equal(access(path, F_OK), -1); /* nothing published */

    st_out_tensor dup[] = {{"a", 1, {1}, a}, {"a", 1, {1}, a}};
    assert_int_equal(st_write_f32(path, NULL, 0, dup, 2, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "tensor 'a' is given twice"));
    assert_int_equal(access(path, F_OK), -1);
}

/* Float to binary16: every half survives the round trip; a value between two neighbouring
 * halves goes to the nearer one, a tie to the one with an even mantissa; past 65504 + half
 * a step is inf. */
static void test_f32_to_f16_rounding(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true(isnan(st_f16_to_f32(st_f32_to_f16(f))));
            continue;
        }
        assert_int_equal(st_f32_to_f16(f), h);
    }
    for (uint32_t h = 0; h < 0x7bffu; h++) { /* positive finite neighbours h, h + 1 */
        float lo = st_f16_to_f32((uint16_t)h), hi = st_f16_to_f32((uint16_t)(h + 1));
        float mid = (lo + hi) / 2; /* exact: 12 significant bits */
        assert_int_equal(st_f32_to_f16(mid), (h & 1u) ? h + 1 : h);
        assert_int_equal(st_f32_to_f16(nextafterf(mid, 0.0f)), h);
        assert_int_equal(st_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
        assert_int_equal(st_f32_to_f16(-nextafterf(mid, INFINITY)), (h + 1) | 0x8000u);
    }
    assert_int_equal(st_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(st_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(st_f32_to_f16(-1e30f), 0xfc00);
    assert_int_equal(st_f32_to_f16(1e-30f), 0x0000);
    assert_int_equal(st_f32_to_f16(0x1p-25f), 0x0000);                 /* tie to even: 0 */
    assert_int_equal(st_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001); /* above the tie */
}

/* BF16 and F16 files: the header says the dtype, the data is the rounded floats. */
static void test_write_bf16_f16(void **state)
{
    (void)state;
    size_t n = tu_size(1000, 100);
    float *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got);
    assert_non_null(x);
    assert_non_null(got);
    tu_fill_random(x, n, 11);
    for (size_t i = 0; i < n; i++)
        x[i] *= 100.0f;
    const st_dtype dts[] = {ST_BF16, ST_F16};
    for (int k = 0; k < 2; k++) {
        char path[512];
        tu_temp_path(path, sizeof path, k ? "st_f16.safetensors" : "st_bf16.safetensors");
        st_out_tensor ts[] = {{"x", 2, {n / 10, 10}, x}, {"y", 1, {3}, x + 5}};
        pe_err err = {{0}};
        assert_int_equal(st_write_as(path, dts[k], NULL, 0, ts, 2, &err), PE_OK);
        st_file f;
        assert_int_equal(st_open(path, &f, &err), PE_OK);
        assert_int_equal(f.data_bytes, 2 * (n + 3)); /* 2 bytes an element */
        for (int t = 0; t < 2; t++) {
            const st_tensor *tt = &f.tensors[t];
            assert_int_equal(tt->dtype, dts[k]);
            const float *src = t ? x + 5 : x;
            const uint16_t *bits = tt->data;
            for (size_t i = 0; i < tt->nelem; i++) {
                uint16_t want = dts[k] == ST_BF16 ? pe_k_to_bf16(src[i]) : st_f32_to_f16(src[i]);
                assert_int_equal(bits[i], want);
            }
            assert_int_equal(st_read_f32(&f, tt, got, &err), PE_OK);
            double step = dts[k] == ST_BF16 ? 0x1p-8 : 0x1p-11; /* half an ulp, relative */
            for (size_t i = 0; i < tt->nelem; i++)
                assert_true(fabs(got[i] - src[i]) <= step * fabs(src[i]));
        }
        st_close(&f);
        unlink(path);
    }
    char path[512];
    tu_temp_path(path, sizeof path, "st_i32.safetensors");
    st_out_tensor t1[] = {{"x", 1, {3}, x}};
    pe_err err = {{0}};
    assert_int_equal(st_write_as(path, ST_I32, NULL, 0, t1, 1, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "cannot write dtype I32"));
    assert_int_equal(access(path, F_OK), -1);
    free(x);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_f32),
        cmocka_unit_test(test_f16_values),
        cmocka_unit_test(test_bf16_values),
        cmocka_unit_test(test_corrupt_headers),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_missing_file_and_tensor),
        cmocka_unit_test(test_unreadable_dtype),
        cmocka_unit_test(test_writer_counts_elements),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_write_bf16_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
