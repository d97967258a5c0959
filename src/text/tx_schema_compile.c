/* tx_schema_compile.c: a JSON schema's text into nodes (tx_schema_nodes.h), refusing what
 * pengine does not enforce (tx_schema.h lists what a schema may say). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tx_schema_format.h"
#include "text/tx_schema_nodes.h"
#include "text/tx_utf8.h"

#define TS_MAX_NESTING 64 /* schemas inside schemas, in the text */
#define TS_MAX_LENGTH 4096 /* minLength, maxLength (the DFA counts every character) */
#define TS_MAX_LENGTH_TEXT "4096"
#define TS_PATH 256

typedef struct ts_ref {
    char *name; /* "#/$defs/X" as written */
    uint16_t node;
} ts_ref;

typedef struct ts_ctx {
    tx_schema *s;
    const cJSON *doc;
    ts_ref *refs;
    int32_t nrefs, caprefs;
    uint8_t *visit; /* (nnode) first sets: 0 not yet, 1 in progress, 2 done */
} ts_ctx;

/* Keywords that constrain values in ways pengine does not enforce: refused, not ignored. */
static const char *const refused[] = {
    "multipleOf", "minProperties", "maxProperties", "patternProperties",
    "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "unevaluatedItems", "prefixItems", "additionalItems", "contains",
    "minContains", "maxContains", "uniqueItems", "not", "if", "then", "else", "contentSchema"};

static int fail(const char *path, const char *fmt, const char *arg)
    __attribute__((format(printf, 2, 0)));
static int fail(const char *path, const char *fmt, const char *arg)
{
    char what[256], msg[PE_ERR_LEN];
    snprintf(what, sizeof what, fmt, arg);
    snprintf(msg, sizeof msg, "JSON schema at '%s': %s", *path ? path : "/", what);
    pe_set_last_error(msg);
    return -1;
}

/* ---- nodes -------------------------------------------------------------------------------- */

static int new_node(ts_ctx *c, int kind, const char *path)
{
    tx_schema *s = c->s;
    if (s->nnode >= TX_SCHEMA_MAX_NODES)
        return fail(path, "the schema has more than %s parts", "65535");
    ts_node *nodes = tx_grow(s->node, &s->cap, s->nnode, sizeof *nodes);
    if (!nodes)
        return fail(path, "%s", "out of memory");
    s->node = nodes;
    ts_node *n = &s->node[s->nnode];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    return s->nnode++;
}

static void set_first(ts_node *n, const char *bytes)
{
    for (const char *p = bytes; *p; p++)
        n->first[(uint8_t)*p >> 3] |= (uint8_t)(1u << ((uint8_t)*p & 7));
}

static int add_child(ts_ctx *c, int id, int child, const char *path)
{
    ts_node *n = &c->s->node[id];
    uint16_t *p = realloc(n->child, (size_t)(n->nchild + 1) * sizeof *p);
    if (!p)
        return fail(path, "%s", "out of memory");
    n->child = p;
    n->child[n->nchild++] = (uint16_t)child;
    return 0;
}

/* Adds value v, as JSON written without whitespace, to node id's literals. */
static int add_lit(ts_ctx *c, int id, const cJSON *v, const char *path)
{
    ts_node *n = &c->s->node[id];
    char *text = cJSON_PrintUnformatted(v);
    ts_lit *p = text ? realloc(n->lit, (size_t)(n->nlit + 1) * sizeof *p) : NULL;
    if (!p) {
        cJSON_free(text);
        return fail(path, "%s", "out of memory");
    }
    n->lit = p;
    const size_t len = strlen(text);
    if (len == 0 || len > UINT16_MAX) {
        cJSON_free(text);
        return fail(path, "%s", "a value or a key is over 65535 bytes written as JSON");
    }
    n->lit[n->nlit].p = (uint8_t *)text;
    n->lit[n->nlit++].n = (uint32_t)len;
    return 0;
}

/* ---- schemas ------------------------------------------------------------------------------ */

static int has(const cJSON *j, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(j, key) != NULL;
}

/* 1 when value v is of JSON schema's type named type. */
static int of_type(const cJSON *v, const char *type)
{
    if (!strcmp(type, "integer"))
        return cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
               v->valuedouble == floor(v->valuedouble);
    return (!strcmp(type, "string") && cJSON_IsString(v)) ||
           (!strcmp(type, "number") && cJSON_IsNumber(v)) ||
           (!strcmp(type, "boolean") && cJSON_IsBool(v)) ||
           (!strcmp(type, "null") && cJSON_IsNull(v)) ||
           (!strcmp(type, "object") && cJSON_IsObject(v)) ||
           (!strcmp(type, "array") && cJSON_IsArray(v));
}

/* Every value of enum (or const) j is of one of j's types, if it gives any. */
static int enum_of_its_type(const cJSON *j, const char *path)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "const");
    const cJSON *v = e ? e->child : k;
    for (; type && v; v = e ? v->next : NULL) {
        int fits = cJSON_IsString(type) && of_type(v, type->valuestring);
        for (const cJSON *t = cJSON_IsArray(type) ? type->child : NULL; t && !fits; t = t->next)
            fits = cJSON_IsString(t) && of_type(v, t->valuestring);
        if (!fits)
            return fail(path, "a value of %s is not of the schema's 'type'",
                        e ? "'enum'" : "'const'");
    }
    return 0;
}

static int compile(ts_ctx *c, const cJSON *j, const char *path, int nesting);

/* A node for any value. */
static int any_value(ts_ctx *c, const char *path)
{
    const int id = new_node(c, TS_ANY, path);
    if (id >= 0)
        set_first(&c->s->node[id], "{[\"-0123456789tfn");
    return id;
}

/* A whole number of 0 or more (below 2^31, else no count pengine takes). */
static int is_count(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483648.0 &&
           v->valuedouble == (double)(int32_t)v->valuedouble;
}

static int compile_object(ts_ctx *c, const cJSON *j, const char *path, int nesting)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    char sub[TS_PATH];
    if (props && !cJSON_IsObject(props))
        return fail(path, "%s must be an object", "'properties'");
    if (req && !cJSON_IsArray(req))
        return fail(path, "%s must be a list of property names", "'required'");
    const int nprops = props ? cJSON_GetArraySize(props) : 0;
    if (extra && !cJSON_IsFalse(extra) && nprops > 0)
        return fail(path, "'additionalProperties' must be false or absent beside %s: pengine "
                          "writes only the properties listed",
                    "'properties'");
    if (nprops == 0 && !cJSON_IsFalse(extra) && req && cJSON_GetArraySize(req) > 0)
        return fail(path, "%s names properties the schema does not list", "'required'");
    if (extra && !cJSON_IsBool(extra) && nprops == 0) { /* a map: any keys, typed values */
        const int id = new_node(c, TS_MAP, path);
        if (id < 0)
            return -1;
        set_first(&c->s->node[id], "{");
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        const int values = compile(c, extra, sub, nesting + 1);
        return values < 0 || add_child(c, id, values, path) < 0 ? -1 : id;
    }
    if (nprops == 0 && !cJSON_IsFalse(extra)) { /* any object */
        const int id = new_node(c, TS_ANY, path);
        if (id >= 0)
            set_first(&c->s->node[id], "{");
        return id;
    }
    const int id = new_node(c, TS_OBJECT, path);
    if (id < 0)
        return -1;
    set_first(&c->s->node[id], "{");
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        for (const cJSON *q = props->child; q != p; q = q->next)
            if (!strcmp(q->string, p->string))
                return fail(path, "property '%.64s' is listed twice", p->string);
        cJSON *key = cJSON_CreateString(p->string);
        if (!key)
            return fail(path, "%s", "out of memory");
        const int r = add_lit(c, id, key, path);
        cJSON_Delete(key);
        snprintf(sub, sizeof sub, "%s/properties/%s", path, p->string);
        const int child = r < 0 ? -1 : compile(c, p, sub, nesting + 1);
        if (child < 0 || add_child(c, id, child, path) < 0)
            return -1;
    }
    ts_node *n = &c->s->node[id];
    uint8_t *required = calloc((size_t)nprops + 1, 1);
    n->next_required = malloc(((size_t)nprops + 1) * sizeof *n->next_required);
    if (!required || !n->next_required) {
        free(required);
        return fail(path, "%s", "out of memory");
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        int k = 0;
        const cJSON *q = props ? props->child : NULL;
        for (; q && (!cJSON_IsString(r) || strcmp(q->string, r->valuestring)); q = q->next)
            k++;
        if (!q) {
            free(required);
            return fail(path, "'required' names '%.64s', which 'properties' does not list",
                        cJSON_IsString(r) ? r->valuestring : "(not a string)");
        }
        required[k] = 1;
    }
    n->next_required[nprops] = (uint16_t)nprops;
    for (int k = nprops - 1; k >= 0; k--)
        n->next_required[k] = required[k] ? (uint16_t)k : n->next_required[k + 1];
    free(required);
    return id;
}

static int compile_array(ts_ctx *c, const cJSON *j, const char *path, int nesting)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(j, "minItems");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(j, "maxItems");
    char sub[TS_PATH];
    if (cJSON_IsArray(items))
        return fail(path, "%s as a list (a tuple) is not supported", "'items'");
    if ((lo && !is_count(lo)) || (hi && !is_count(hi)))
        return fail(path, "%s must be whole numbers of 0 or more",
                    "'minItems' and 'maxItems'");
    if ((lo && lo->valuedouble >= TS_UNBOUNDED) || (hi && hi->valuedouble >= TS_UNBOUNDED))
        return fail(path, "%s must be under 65535", "'minItems' and 'maxItems'");
    if (lo && hi && lo->valuedouble > hi->valuedouble)
        return fail(path, "%s: no array fits", "'minItems' is over 'maxItems'");
    const int id = new_node(c, TS_ARRAY, path);
    if (id < 0)
        return -1;
    snprintf(sub, sizeof sub, "%s/items", path);
    const int item = items ? compile(c, items, sub, nesting + 1) : any_value(c, sub);
    if (item < 0 || add_child(c, id, item, path) < 0)
        return -1;
    ts_node *n = &c->s->node[id];
    set_first(n, "[");
    n->min_items = lo ? (uint16_t)lo->valuedouble : 0;
    n->max_items = hi ? (uint16_t)hi->valuedouble : TS_UNBOUNDED;
    return id;
}

/* A string's node: with a pattern or lengths, their DFA over its characters. */
static int compile_string(ts_ctx *c, const cJSON *j, const char *path)
{
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(j, "minLength");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(j, "maxLength");
    if (pattern && !cJSON_IsString(pattern))
        return fail(path, "%s must be a string (a regular expression)", "'pattern'");
    if (format && !cJSON_IsString(format))
        return fail(path, "%s must be a string (a format's name)", "'format'");
    const char *format_regex = format ? tx_schema_format_regex(format->valuestring) : NULL;
    if (format_regex && pattern)
        return fail(path, "'format' \"%.40s\" beside 'pattern': pengine enforces one of them; "
                          "give the pattern alone",
                    format->valuestring);
    if ((lo && !is_count(lo)) || (hi && !is_count(hi)))
        return fail(path, "%s must be whole numbers of 0 or more",
                    "'minLength' and 'maxLength'");
    if ((lo && lo->valuedouble > TS_MAX_LENGTH) || (hi && hi->valuedouble > TS_MAX_LENGTH))
        return fail(path, "%s must be at most " TS_MAX_LENGTH_TEXT,
                    "'minLength' and 'maxLength'");
    if (lo && hi && lo->valuedouble > hi->valuedouble)
        return fail(path, "%s: no string fits", "'minLength' is over 'maxLength'");
    const int id = new_node(c, TS_STRING, path);
    if (id < 0)
        return -1;
    set_first(&c->s->node[id], "\"");
    if (!pattern && !format_regex && !lo && !hi)
        return id;
    tx_pattern *text;
    const char *regex = pattern ? pattern->valuestring : format_regex;
    if (tx_pattern_text(regex, lo ? (int32_t)lo->valuedouble : 0,
                        hi ? (int32_t)hi->valuedouble : -1, &text) != PE_OK)
        return fail(path, pattern ? "'pattern': %s"
                          : format_regex ? "'format' with 'minLength', 'maxLength': %s"
                                         : "'minLength', 'maxLength': %s",
                    pe_last_error());
    c->s->node[id].text = text;
    return id;
}

/* A number's or an integer's bounds: minimum, exclusiveMinimum, maximum, exclusiveMaximum
 * (numbers, as JSON schema draft 6 and later write them), the tighter of each side kept. */
typedef struct ts_bounds {
    int has_lo, has_hi, lo_excl, hi_excl;
    double lo, hi;
    const char *lo_key, *hi_key; /* the keywords they came from */
} ts_bounds;

static int read_bounds(const cJSON *j, const char *path, ts_bounds *b)
{
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum",
                                        "exclusiveMaximum"};
    memset(b, 0, sizeof *b);
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        if (!v)
            continue;
        if (cJSON_IsBool(v))
            return fail(path, "'%s' must be a number (JSON schema draft 6 and later); draft "
                              "4's true/false form is not supported",
                        keys[k]);
        if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= (double)TX_PATTERN_MAX_INT))
            return fail(path, "'%s' must be a number within +-10^15", keys[k]);
        const double x = v->valuedouble;
        const int excl = k == 1 || k == 3;
        if (k < 2 && (!b->has_lo || x > b->lo || (x == b->lo && excl))) {
            *b = (ts_bounds){1, b->has_hi, excl, b->hi_excl, x, b->hi, keys[k], b->hi_key};
        } else if (k >= 2 && (!b->has_hi || x < b->hi || (x == b->hi && excl))) {
            *b = (ts_bounds){b->has_lo, 1, b->lo_excl, excl, b->lo, x, b->lo_key, keys[k]};
        }
    }
    return 0;
}

/* A bounded node's DFA, from the regex of the values its bounds allow, and its first bytes
 * from the DFA (so that an anyOf may split numbers by sign). */
static int bounded_by(ts_ctx *c, int id, const char *re, const char *path)
{
    tx_pattern *p;
    if (tx_pattern_compile(re, strlen(re), &p) != PE_OK)
        return fail(path, "'minimum', 'maximum': the range could not be compiled: %s",
                    pe_last_error());
    ts_node *n = &c->s->node[id];
    n->text = p;
    for (const char *b = "-0123456789"; *b; b++)
        if (tx_pattern_step(p, p->start, (uint8_t)*b) >= 0)
            n->first[(uint8_t)*b >> 3] |= (uint8_t)(1u << (*b & 7));
    return id;
}

/* An integer's node: with bounds, the DFA of the integers they allow (no -0). */
static int compile_integer(ts_ctx *c, const cJSON *j, const char *path)
{
    ts_bounds b;
    if (read_bounds(j, path, &b) < 0)
        return -1;
    /* the whole numbers allowed: >= ceil(lo), > lo, <= floor(hi), < hi */
    const double lo = b.lo_excl ? floor(b.lo) + 1 : ceil(b.lo);
    const double hi = b.hi_excl ? ceil(b.hi) - 1 : floor(b.hi);
    if ((b.has_lo && lo > (double)TX_PATTERN_MAX_INT) ||
        (b.has_hi && hi < -(double)TX_PATTERN_MAX_INT))
        return fail(path, "'%s': the integers it allows lie past +-10^15, beyond what pengine "
                          "bounds",
                    b.has_lo && lo > (double)TX_PATTERN_MAX_INT ? b.lo_key : b.hi_key);
    if (b.has_lo && b.has_hi && lo > hi)
        return fail(path, "%s: no integer fits", "no whole number lies between the bounds");
    const int id = new_node(c, TS_INTEGER, path);
    if (id < 0)
        return -1;
    if (!b.has_lo && !b.has_hi) {
        set_first(&c->s->node[id], "-0123456789");
        return id;
    }
    char re[TX_PATTERN_INT_RANGE_CAP];
    if (tx_pattern_int_range(b.has_lo, (int64_t)lo, b.has_hi, (int64_t)hi, re, sizeof re) !=
        PE_OK)
        return fail(path, "'minimum', 'maximum': %s", "the range could not be written");
    return bounded_by(c, id, re, path);
}

/* A number's node: with bounds, the DFA of the numbers they allow, written without an
 * exponent (no -0), each bound compared as the shortest decimal of its double. */
static int compile_number(ts_ctx *c, const cJSON *j, const char *path)
{
    ts_bounds b;
    if (read_bounds(j, path, &b) < 0)
        return -1;
    if (!b.has_lo && !b.has_hi) {
        const int id = new_node(c, TS_NUMBER, path);
        if (id >= 0)
            set_first(&c->s->node[id], "-0123456789");
        return id;
    }
    if (b.has_lo && b.has_hi && (b.lo > b.hi || (b.lo == b.hi && (b.lo_excl || b.hi_excl))))
        return fail(path, "%s: no number fits", "the lower bound is over the upper bound, or "
                                                "equal to it with one of them exclusive");
    tx_decimal lo, hi;
    const char *bad = b.has_lo && tx_decimal_of(b.lo, &lo) != PE_OK   ? b.lo_key
                      : b.has_hi && tx_decimal_of(b.hi, &hi) != PE_OK ? b.hi_key
                                                                      : NULL;
    if (bad)
        return fail(path, "'%s' must be written with at most " TX_PATTERN_MAX_FRAC_TEXT
                          " digits after the point (pengine bounds numbers as decimals)",
                    bad);
    const int id = new_node(c, TS_NUMBER, path);
    if (id < 0)
        return -1;
    char *re = malloc(TX_PATTERN_NUM_RANGE_CAP);
    if (!re)
        return fail(path, "%s", "out of memory");
    const int written = tx_pattern_num_range(b.has_lo ? &lo : NULL, b.lo_excl,
                                             b.has_hi ? &hi : NULL, b.hi_excl, re,
                                             TX_PATTERN_NUM_RANGE_CAP) == PE_OK;
    const int r = written ? bounded_by(c, id, re, path)
                          : fail(path, "'minimum', 'maximum': %s", "the range could not be "
                                                                  "written");
    free(re);
    return r;
}

/* A schema of one type, given by name. */
static int compile_type(ts_ctx *c, const cJSON *j, const char *type, const char *path,
                        int nesting)
{
    static const struct {
        const char *name;
        int kind;
        const char *first;
    } scalars[] = {{"boolean", TS_BOOLEAN, "tf"}, {"null", TS_NULL, "n"}};
    if (!strcmp(type, "object"))
        return compile_object(c, j, path, nesting);
    if (!strcmp(type, "array"))
        return compile_array(c, j, path, nesting);
    if (!strcmp(type, "string"))
        return compile_string(c, j, path);
    if (!strcmp(type, "integer"))
        return compile_integer(c, j, path);
    if (!strcmp(type, "number"))
        return compile_number(c, j, path);
    for (size_t k = 0; k < sizeof scalars / sizeof *scalars; k++)
        if (!strcmp(type, scalars[k].name)) {
            const int id = new_node(c, scalars[k].kind, path);
            if (id >= 0)
                set_first(&c->s->node[id], scalars[k].first);
            return id;
        }
    return fail(path, "type '%.64s' is unknown; JSON schema's types are object, array, "
                      "string, number, integer, boolean and null",
                type);
}

static int compile_enum(ts_ctx *c, const cJSON *j, const char *path)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "const");
    if (e && (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0))
        return fail(path, "%s must be a list of one value or more", "'enum'");
    if (e && cJSON_GetArraySize(e) > UINT16_MAX)
        return fail(path, "%s lists more than 65535 values", "'enum'");
    const int id = new_node(c, TS_ENUM, path);
    if (id < 0)
        return -1;
    const cJSON *v;
    if (e) {
        cJSON_ArrayForEach(v, e) {
            if (add_lit(c, id, v, path) < 0)
                return -1;
        }
    } else if (add_lit(c, id, k, path) < 0) {
        return -1;
    }
    ts_node *n = &c->s->node[id];
    for (int32_t i = 0; i < n->nlit; i++)
        n->first[n->lit[i].p[0] >> 3] |= (uint8_t)(1u << (n->lit[i].p[0] & 7));
    return id;
}

/* anyOf / oneOf (the same here: alternatives with different first bytes cannot overlap). */
static int compile_anyof(ts_ctx *c, const cJSON *alts, const char *key, const char *path,
                         int nesting)
{
    char sub[TS_PATH];
    if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) == 0)
        return fail(path, "'%s' must be a list of one schema or more", key);
    const int id = new_node(c, TS_ANYOF, path);
    if (id < 0)
        return -1;
    if (!(c->s->node[id].where = strdup(*path ? path : "/")))
        return fail(path, "%s", "out of memory");
    int k = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        snprintf(sub, sizeof sub, "%s/%s/%d", path, key, k++);
        const int alt = compile(c, a, sub, nesting + 1);
        if (alt < 0 || add_child(c, id, alt, path) < 0)
            return -1;
    }
    return id;
}

/* "type": ["string", "null"]: one alternative per type. */
static int compile_types(ts_ctx *c, const cJSON *j, const cJSON *types, const char *path,
                         int nesting)
{
    if (cJSON_GetArraySize(types) == 0)
        return fail(path, "%s must name one type or more", "'type'");
    const int id = new_node(c, TS_ANYOF, path);
    if (id < 0)
        return -1;
    if (!(c->s->node[id].where = strdup(*path ? path : "/")))
        return fail(path, "%s", "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, types) {
        if (!cJSON_IsString(t))
            return fail(path, "%s must be a type's name or a list of them", "'type'");
        const int alt = compile_type(c, j, t->valuestring, path, nesting);
        if (alt < 0 || add_child(c, id, alt, path) < 0)
            return -1;
    }
    return id;
}

/* The schema a $ref names: "#", "#/$defs/NAME" or "#/definitions/NAME". */
static const cJSON *ref_target(const ts_ctx *c, const char *ref)
{
    if (!strcmp(ref, "#"))
        return c->doc;
    const char *names[2] = {"#/$defs/", "#/definitions/"}, *keys[2] = {"$defs", "definitions"};
    for (int k = 0; k < 2; k++) {
        const size_t n = strlen(names[k]);
        if (strncmp(ref, names[k], n) != 0)
            continue;
        char name[TS_PATH];
        size_t o = 0;
        for (const char *p = ref + n; *p && o + 1 < sizeof name; p++) {
            if (*p == '/')
                return NULL; /* deeper pointers are not supported */
            if (*p == '~' && (p[1] == '0' || p[1] == '1'))
                name[o++] = *++p == '0' ? '~' : '/';
            else
                name[o++] = *p;
        }
        name[o] = '\0';
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->doc, keys[k]);
        return cJSON_GetObjectItemCaseSensitive(defs, name);
    }
    return NULL;
}

static int compile_ref(ts_ctx *c, const char *ref, const char *path, int nesting)
{
    for (int32_t i = 0; i < c->nrefs; i++)
        if (!strcmp(c->refs[i].name, ref))
            return c->refs[i].node;
    const cJSON *target = ref_target(c, ref);
    if (!target)
        return fail(path, "'$ref' '%.128s' names no schema; pengine follows '#', "
                          "'#/$defs/NAME' and '#/definitions/NAME'",
                    ref);
    const int id = new_node(c, TS_REF, path);
    if (id < 0)
        return -1;
    ts_ref *refs = tx_grow(c->refs, &c->caprefs, c->nrefs, sizeof *refs);
    if (refs)
        c->refs = refs;
    if (!refs || !(c->refs[c->nrefs].name = strdup(ref)))
        return fail(path, "%s", "out of memory");
    c->refs[c->nrefs++].node = (uint16_t)id;
    const int to = compile(c, target, ref + 1, nesting + 1);
    return to < 0 || add_child(c, id, to, path) < 0 ? -1 : id;
}

/* 1 when type (a name or a list of them) names name. */
static int names(const cJSON *type, const char *name)
{
    if (cJSON_IsString(type))
        return !strcmp(type->valuestring, name);
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : NULL; t; t = t->next)
        if (cJSON_IsString(t) && !strcmp(t->valuestring, name))
            return 1;
    return 0;
}

static int compile(ts_ctx *c, const cJSON *j, const char *path, int nesting)
{
    if (nesting > TS_MAX_NESTING)
        return fail(path, "schemas are nested more than %s deep", "64");
    if (cJSON_IsTrue(j))
        return any_value(c, path);
    if (!cJSON_IsObject(j))
        return fail(path, "%s", cJSON_IsFalse(j) ? "the schema false accepts no value"
                                                 : "a schema must be an object or true");
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (cJSON_GetObjectItemCaseSensitive(j, refused[k]))
            return fail(path, "'%s' is not supported: pengine does not enforce it, and does "
                              "not ignore it either; remove it from the schema",
                        refused[k]);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(j, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(j, "oneOf");
    const int is_enum = has(j, "enum") || has(j, "const");
    const int nvalue = !!ref + !!type + !!all + !!any + !!one + is_enum;
    if (nvalue > 1 && !(type && is_enum && nvalue == 2))
        return fail(path, "%s", "give one of '$ref', 'type', 'enum' (or 'const'), 'anyOf', "
                                "'oneOf' and 'allOf' in a schema: pengine does not combine "
                                "them");
    if ((has(j, "pattern") || has(j, "minLength") || has(j, "maxLength")) &&
        (is_enum || !names(type, "string")))
        return fail(path, "%s constrain strings: give them beside \"type\": \"string\" (or a "
                          "list of types holding it), not beside an enum, $ref or anyOf",
                    "'pattern', 'minLength' and 'maxLength'");
    if ((has(j, "minimum") || has(j, "maximum") || has(j, "exclusiveMinimum") ||
         has(j, "exclusiveMaximum")) &&
        (is_enum || !(names(type, "integer") || names(type, "number"))))
        return fail(path, "%s bound numbers: give them beside \"type\": \"integer\" or "
                          "\"number\" (or a list of types holding one), not beside an enum, "
                          "$ref or anyOf",
                    "'minimum', 'maximum', 'exclusiveMinimum' and 'exclusiveMaximum'");
    if (ref)
        return cJSON_IsString(ref) ? compile_ref(c, ref->valuestring, path, nesting)
                                   : fail(path, "%s must be a string", "'$ref'");
    if (is_enum)
        return enum_of_its_type(j, path) < 0 ? -1 : compile_enum(c, j, path);
    if (any || one)
        return compile_anyof(c, any ? any : one, any ? "anyOf" : "oneOf", path, nesting);
    if (all) {
        char sub[TS_PATH];
        snprintf(sub, sizeof sub, "%s/allOf/0", path);
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1)
            return fail(path, "%s is supported with one schema only", "'allOf'");
        return compile(c, all->child, sub, nesting + 1);
    }
    if (cJSON_IsArray(type))
        return compile_types(c, j, type, path, nesting);
    if (type && !cJSON_IsString(type))
        return fail(path, "%s must be a type's name or a list of them", "'type'");
    if (type)
        return compile_type(c, j, type->valuestring, path, nesting);
    if (has(j, "properties") || has(j, "required") || has(j, "additionalProperties"))
        return compile_object(c, j, path, nesting);
    if (has(j, "items") || has(j, "minItems") || has(j, "maxItems"))
        return compile_array(c, j, path, nesting);
    return any_value(c, path); /* {} and annotations alone */
}

/* ---- first bytes ---------------------------------------------------------------------------- */

/* Fills the first bytes of anyOf and $ref nodes (the others have theirs), and checks that
 * an anyOf's alternatives start differently. */
static int first_bytes(ts_ctx *c, int id)
{
    ts_node *n = &c->s->node[id];
    if (n->kind != TS_ANYOF && n->kind != TS_REF)
        return 0;
    if (c->visit[id] == 2)
        return 0;
    if (c->visit[id] == 1)
        return fail("/", "%s", "a $ref leads back to itself before any byte of a value "
                               "(left recursion through anyOf or $ref)");
    c->visit[id] = 1;
    for (int32_t k = 0; k < n->nchild; k++) {
        const int alt = n->child[k];
        if (first_bytes(c, alt) < 0)
            return -1;
        const ts_node *a = &c->s->node[alt];
        for (int b = 0; b < 256; b++) {
            if (!ts_first_has(a, (uint8_t)b))
                continue;
            if (ts_first_has(n, (uint8_t)b)) {
                char what[8];
                snprintf(what, sizeof what, b >= 0x20 && b < 0x7F ? "'%c'" : "0x%02x", b);
                return fail(n->where, "alternatives (anyOf, oneOf or a list of types) can "
                                      "both start with %s: pengine needs alternatives whose "
                                      "values start differently (their types differ)",
                            what);
            }
            n->first[b >> 3] |= (uint8_t)(1u << (b & 7));
        }
    }
    c->visit[id] = 2;
    return 0;
}

pe_status tx_schema_compile(const char *text, size_t len, tx_schema **out)
{
    *out = NULL;
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        pe_set_last_error("the JSON schema is not valid JSON");
        return PE_EINVAL;
    }
    ts_ctx c = {.s = calloc(1, sizeof *c.s), .doc = doc};
    int root = c.s ? compile(&c, doc, "", 0) : -1;
    if (!c.s)
        pe_set_last_error("out of memory compiling a JSON schema");
    if (root >= 0 && !(c.visit = calloc((size_t)c.s->nnode, 1))) {
        pe_set_last_error("out of memory compiling a JSON schema");
        root = -1;
    }
    for (int32_t id = 0; root >= 0 && id < c.s->nnode; id++)
        if (first_bytes(&c, id) < 0)
            root = -1;
    if (root >= 0) {
        const ts_node *r = &c.s->node[root];
        int only_brace = ts_first_has(r, '{');
        for (int b = 0; b < 256 && only_brace; b++)
            only_brace = b == '{' || !ts_first_has(r, (uint8_t)b);
        if (!only_brace) {
            pe_set_last_error("JSON schema at '/': the root must be an object (\"type\": "
                              "\"object\"), as OpenAI's structured outputs require");
            root = -1;
        }
    }
    for (int32_t i = 0; i < c.nrefs; i++)
        free(c.refs[i].name);
    free(c.refs);
    free(c.visit);
    cJSON_Delete(doc);
    if (root < 0) {
        tx_schema_free(c.s);
        return PE_EINVAL; /* (out of memory is rare here, and said in the message) */
    }
    c.s->root = (uint16_t)root;
    *out = c.s;
    return PE_OK;
}

void tx_schema_free(tx_schema *s)
{
    if (!s)
        return;
    for (int32_t i = 0; i < s->nnode; i++) {
        ts_node *n = &s->node[i];
        for (int32_t k = 0; k < n->nlit; k++)
            cJSON_free(n->lit[k].p);
        free(n->lit);
        free(n->child);
        free(n->next_required);
        free(n->where);
        tx_pattern_free(n->text);
    }
    free(s->node);
    free(s);
}
