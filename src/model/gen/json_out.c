/* json_out.c: prints JSON as transformers writes config.json and the shard index (Python's
 * json.dumps(indent=2, sort_keys=True) and a newline), and Python-style float values. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gen/gen.h"

/* Python's repr of a float: the shortest digits that read back, ".0" on integral values. */
static void md_json_float_text(double x, char *buf, size_t len)
{
    if (isnan(x) || isinf(x)) { /* json.dumps writes these, though they are not JSON */
        snprintf(buf, len, "%s", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (floor(x) == x && fabs(x) < 1e16) {
        snprintf(buf, len, "%.1f", x);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, x);
        if (strtod(buf, NULL) == x)
            break;
    }
}

void *md_json_float(double x)
{
    char buf[40];
    md_json_float_text(x, buf, sizeof buf);
    return cJSON_CreateRaw(buf);
}

typedef struct md_str {
    char *p;
    size_t n, cap;
    int oom;
} md_str;

static void md_put(md_str *s, const char *x, size_t n)
{
    if (s->oom)
        return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (s->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->oom = 1;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->n, x, n);
    s->n += n;
    s->p[s->n] = '\0';
}

static void md_puts(md_str *s, const char *x) { md_put(s, x, strlen(x)); }

static void md_indent(md_str *s, int depth)
{
    md_puts(s, "\n");
    for (int i = 0; i < depth; i++)
        md_puts(s, "  ");
}

static void md_string(md_str *s, const char *x)
{
    md_puts(s, "\"");
    for (const unsigned char *c = (const unsigned char *)x; *c; c++) {
        char esc[8];
        switch (*c) {
        case '"': md_puts(s, "\\\""); break;
        case '\\': md_puts(s, "\\\\"); break;
        case '\n': md_puts(s, "\\n"); break;
        case '\r': md_puts(s, "\\r"); break;
        case '\t': md_puts(s, "\\t"); break;
        case '\b': md_puts(s, "\\b"); break;
        case '\f': md_puts(s, "\\f"); break;
        default:
            if (*c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *c);
                md_puts(s, esc);
            } else
                md_put(s, (const char *)c, 1);
        }
    }
    md_puts(s, "\"");
}

static int md_cmp_key(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static void md_value(md_str *s, const cJSON *v, int depth)
{
    char buf[40];
    if (cJSON_IsRaw(v))
        md_puts(s, v->valuestring);
    else if (cJSON_IsNull(v))
        md_puts(s, "null");
    else if (cJSON_IsBool(v))
        md_puts(s, cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsString(v))
        md_string(s, v->valuestring);
    else if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (floor(x) == x && fabs(x) <= 9007199254740992.0)
            snprintf(buf, sizeof buf, "%.0f", x); /* a Python int */
        else
            md_json_float_text(x, buf, sizeof buf);
        md_puts(s, buf);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v), n = cJSON_GetArraySize(v);
        if (n == 0) {
            md_puts(s, obj ? "{}" : "[]");
            return;
        }
        const cJSON **items = malloc((size_t)n * sizeof *items);
        if (!items) {
            s->oom = 1;
            return;
        }
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) items[i++] = e;
        if (obj)
            qsort(items, (size_t)n, sizeof *items, md_cmp_key);
        md_puts(s, obj ? "{" : "[");
        for (i = 0; i < n; i++) {
            md_indent(s, depth + 1);
            if (obj) {
                md_string(s, items[i]->string);
                md_puts(s, ": ");
            }
            md_value(s, items[i], depth + 1);
            if (i + 1 < n)
                md_puts(s, ",");
        }
        md_indent(s, depth);
        md_puts(s, obj ? "}" : "]");
        free(items);
    }
}

pe_status md_json_write_file(const char *path, const void *json, pe_err *err)
{
    md_str s = {0};
    md_value(&s, json, 0);
    md_puts(&s, "\n");
    if (s.oom) {
        free(s.p);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory printing the JSON", path);
    }
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) {
        free(s.p);
        return pe_fail(err, PE_ENOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    pe_status st = PE_OK;
    FILE *fp = fopen(tmp, "wb");
    if (!fp)
        st = pe_fail(err, PE_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    else {
        int bad = fwrite(s.p, 1, s.n, fp) != s.n;
        bad |= fclose(fp) != 0;
        if (bad)
            st = pe_fail(err, PE_EIO, "%s: write failed: %s (disk full?)", tmp, strerror(errno));
        else if (rename(tmp, path) != 0)
            st = pe_fail(err, PE_EIO, "%s: cannot rename %s to it: %s", path, tmp,
                         strerror(errno));
        if (st != PE_OK)
            unlink(tmp);
    }
    free(tmp);
    free(s.p);
    return st;
}
