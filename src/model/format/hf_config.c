/* hf_config.c: the config.json getters of a Hugging Face model directory (hf.h): typed
 * values by key, with messages naming config.json, the key, the type found and wanted. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>

#include "model/format/hf.h"

static const char *hf_type_name(const cJSON *v)
{
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (floor(d) != d)
            return "a number";
        return fabs(d) <= 9007199254740992.0 ? "an integer" : "an integer beyond 2^53";
    }
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "a list";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsNull(v))
        return "null";
    return "an unknown JSON value";
}

/* The value of key, NULL when missing or null. */
static const cJSON *hf_get(const md_hf *h, const char *key)
{
    const cJSON *v = h->config ? cJSON_GetObjectItemCaseSensitive(h->config, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static pe_status hf_wrong_type(const md_hf *h, const char *key, const cJSON *v,
                               const char *wanted, pe_err *err)
{
    return pe_fail(err, PE_EFORMAT,
                   "%s: \"%s\" is %s, but %s is wanted; correct the value in config.json",
                   h->config_path, key, hf_type_name(v), wanted);
}

/* 1 when v is a number that is an exact integer representable as a long. */
static int hf_as_long(const cJSON *v, long *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(floor(d) == d && d >= -9007199254740992.0 && d <= 9007199254740992.0))
        return 0;
    *out = (long)d;
    return 1;
}

int md_hf_has(const md_hf *h, const char *key) { return hf_get(h, key) != NULL; }

pe_status md_hf_int(const md_hf *h, const char *key, long *out, pe_err *err)
{
    const cJSON *v = hf_get(h, key);
    if (!v)
        return pe_fail(err, PE_EFORMAT, "%s: no \"%s\"; add the integer to config.json",
                       h->config_path, key);
    if (!hf_as_long(v, out))
        return hf_wrong_type(h, key, v, "an integer", err);
    return PE_OK;
}

pe_status md_hf_int_or(const md_hf *h, const char *key, long dflt, long *out, pe_err *err)
{
    if (!hf_get(h, key)) {
        *out = dflt;
        return PE_OK;
    }
    return md_hf_int(h, key, out, err);
}

pe_status md_hf_num_or(const md_hf *h, const char *key, double dflt, double *out, pe_err *err)
{
    const cJSON *v = hf_get(h, key);
    if (!v) {
        *out = dflt;
        return PE_OK;
    }
    if (!cJSON_IsNumber(v))
        return hf_wrong_type(h, key, v, "a number", err);
    *out = v->valuedouble;
    return PE_OK;
}

pe_status md_hf_str_or(const md_hf *h, const char *key, const char *dflt, const char **out,
                       pe_err *err)
{
    const cJSON *v = hf_get(h, key);
    if (!v) {
        *out = dflt;
        return PE_OK;
    }
    if (!cJSON_IsString(v))
        return hf_wrong_type(h, key, v, "a string", err);
    *out = v->valuestring;
    return PE_OK;
}

pe_status md_hf_bool_or(const md_hf *h, const char *key, int dflt, int *out, pe_err *err)
{
    const cJSON *v = hf_get(h, key);
    if (!v) {
        *out = dflt;
        return PE_OK;
    }
    if (!cJSON_IsBool(v))
        return hf_wrong_type(h, key, v, "a boolean (true or false)", err);
    *out = cJSON_IsTrue(v);
    return PE_OK;
}

/* Stores up to max values; a longer list keeps its first max (the count in *n is what was
 * stored). */
pe_status md_hf_int_list(const md_hf *h, const char *key, int32_t *out, int max, int *n,
                         pe_err *err)
{
    *n = 0;
    const cJSON *v = hf_get(h, key);
    if (!v)
        return PE_OK;
    long x;
    if (cJSON_IsNumber(v)) {
        if (!hf_as_long(v, &x) || x < INT32_MIN || x > INT32_MAX)
            return hf_wrong_type(h, key, v, "an integer or a list of integers", err);
        if (max > 0)
            out[(*n)++] = (int32_t)x;
        return PE_OK;
    }
    if (!cJSON_IsArray(v))
        return hf_wrong_type(h, key, v, "an integer or a list of integers", err);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v)
    {
        if (!hf_as_long(e, &x) || x < INT32_MIN || x > INT32_MAX)
            return pe_fail(err, PE_EFORMAT,
                           "%s: \"%s\" entry %d is %s, but a list of integers is wanted; "
                           "correct the value in config.json",
                           h->config_path, key, i, hf_type_name(e));
        if (*n < max)
            out[(*n)++] = (int32_t)x;
        i++;
    }
    return PE_OK;
}

pe_status md_hf_architecture(const md_hf *h, const char **out, pe_err *err)
{
    const cJSON *v = hf_get(h, "architectures");
    if (!v)
        return pe_fail(err, PE_EFORMAT,
                       "%s: no \"architectures\" list; add the model class, e.g. "
                       "\"architectures\": [\"LlamaForCausalLM\"]",
                       h->config_path);
    const cJSON *first = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 0) : NULL;
    if (!cJSON_IsArray(v) || !cJSON_IsString(first))
        return pe_fail(err, PE_EFORMAT,
                       "%s: \"architectures\" is %s, but a list of class names is wanted, e.g. "
                       "[\"LlamaForCausalLM\"]",
                       h->config_path,
                       cJSON_IsArray(v) ? (first ? "a list whose first entry is not a string"
                                                 : "an empty list")
                                        : hf_type_name(v));
    *out = first->valuestring;
    return PE_OK;
}

pe_status md_hf_object(const md_hf *h, const char *key, const void **out, pe_err *err)
{
    *out = NULL;
    const cJSON *v = hf_get(h, key);
    if (!v)
        return PE_OK;
    if (!cJSON_IsObject(v))
        return hf_wrong_type(h, key, v, "an object ({...}) or null", err);
    *out = v;
    return PE_OK;
}
