/* tx_load_steps.c: the "normalizer", "pre_tokenizer" and "decoder" sections of
 * tokenizer.json, flattened from their Sequences into arrays of steps. An unsupported type
 * is refused with a message naming the section, the type and what is supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tx_load.h"
#include "text/tx_utf8.h"

const char *tx_json_str(const cJSON *obj, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

pe_status tx_json_bool(const cJSON *obj, const char *key, int dflt, const char *what, int *out,
                       tx_ctx *c)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = dflt;
    if (!j || cJSON_IsNull(j))
        return PE_OK;
    if (!cJSON_IsBool(j))
        return pe_fail(c->err, PE_EFORMAT, "%s: %s is not true or false", c->file, what);
    *out = cJSON_IsTrue(j);
    return PE_OK;
}

static pe_status dup_str(const char *s, char **out, size_t *len, tx_ctx *c)
{
    *len = strlen(s);
    *out = malloc(*len + 1);
    if (!*out)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    memcpy(*out, s, *len + 1);
    return PE_OK;
}

static pe_status need_str(const cJSON *obj, const char *key, const char *what, const char **out,
                          tx_ctx *c)
{
    *out = tx_json_str(obj, key);
    if (!*out)
        return pe_fail(c->err, PE_EFORMAT, "%s: %s.%s is missing or not a string", c->file,
                       what, key);
    return PE_OK;
}

pe_status tx_load_pattern(const cJSON *j, const char *what, tx_text_pattern *out, tx_ctx *c)
{
    memset(out, 0, sizeof *out);
    const char *lit = tx_json_str(j, "String"), *re = tx_json_str(j, "Regex");
    if (lit && *lit)
        return dup_str(lit, &out->literal, &out->literal_len, c);
    if (re) {
        char name[128];
        snprintf(name, sizeof name, "%s: %s.pattern", c->file, what);
        return tx_regex_compile(re, strlen(re), name, &out->regex, c->err);
    }
    return pe_fail(c->err, PE_EFORMAT, "%s: %s.pattern is neither {\"String\": ...} nor "
                   "{\"Regex\": ...} (or is empty)", c->file, what);
}

/* One character (the Metaspace replacement) into buf. */
static pe_status load_char(const cJSON *obj, const char *what, char *buf, size_t *len,
                           tx_ctx *c)
{
    const char *s;
    pe_status st = need_str(obj, "replacement", what, &s, c);
    if (st != PE_OK)
        return st;
    size_t n = strlen(s);
    if (n == 0 || n > 4 || tx_utf8_valid_len((const unsigned char *)s, n, 0) != n)
        return pe_fail(c->err, PE_EFORMAT, "%s: %s.replacement \"%s\" is not one character",
                       c->file, what, s);
    memcpy(buf, s, n);
    *len = n;
    return PE_OK;
}

/* prepend_scheme "always" | "first" | "never", or the older add_prefix_space. */
static pe_status load_prepend(const cJSON *obj, const char *what, tx_prepend *out, tx_ctx *c)
{
    const char *scheme = tx_json_str(obj, "prepend_scheme");
    if (scheme) {
        if (!strcmp(scheme, "always"))
            *out = TX_PREPEND_ALWAYS;
        else if (!strcmp(scheme, "first"))
            *out = TX_PREPEND_FIRST;
        else if (!strcmp(scheme, "never"))
            *out = TX_PREPEND_NEVER;
        else
            return pe_fail(c->err, PE_EFORMAT, "%s: %s.prepend_scheme \"%s\" is not always, "
                           "first or never", c->file, what, scheme);
        return PE_OK;
    }
    int add;
    pe_status s = tx_json_bool(obj, "add_prefix_space", 1, "Metaspace.add_prefix_space", &add,
                               c);
    *out = add ? TX_PREPEND_ALWAYS : TX_PREPEND_NEVER;
    return s;
}

static pe_status check_object(const cJSON *j, const char *what, const char **type, tx_ctx *c)
{
    if (!cJSON_IsObject(j))
        return pe_fail(c->err, PE_EFORMAT, "%s: %s is not an object", c->file, what);
    *type = tx_json_str(j, "type");
    if (!*type)
        return pe_fail(c->err, PE_EFORMAT, "%s: %s has no \"type\"", c->file, what);
    return PE_OK;
}

static pe_status too_many(const char *what, tx_ctx *c)
{
    return pe_fail(c->err, PE_EFORMAT, "%s: %s has more than %d steps", c->file, what,
                   TX_MAX_STEPS);
}

/* ---- normalizer ----------------------------------------------------------------------------- */

static pe_status load_norm(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    const char *type;
    pe_status s = check_object(j, "normalizer", &type, c);
    if (s != PE_OK)
        return s;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(list))
            return pe_fail(c->err, PE_EFORMAT, "%s: normalizer.normalizers is not a list",
                           c->file);
        for (const cJSON *e = list->child; e && s == PE_OK; e = e->next)
            s = load_norm(t, e, c);
        return s;
    }
    if (t->nnorm == TX_MAX_STEPS)
        return too_many("normalizer", c);
    tx_norm *n = &t->norm[t->nnorm];
    const char *str;
    if (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") ||
        !strcmp(type, "NFKD")) {
        n->kind = !strcmp(type, "NFC") ? TX_NORM_NFC : !strcmp(type, "NFD") ? TX_NORM_NFD :
                  !strcmp(type, "NFKC") ? TX_NORM_NFKC : TX_NORM_NFKD;
    } else if (!strcmp(type, "Prepend")) {
        n->kind = TX_NORM_PREPEND;
        s = need_str(j, "prepend", "normalizer(Prepend)", &str, c);
        if (s == PE_OK)
            s = dup_str(str, &n->text, &n->text_len, c);
    } else if (!strcmp(type, "Replace")) {
        n->kind = TX_NORM_REPLACE;
        s = need_str(j, "content", "normalizer(Replace)", &str, c);
        if (s == PE_OK)
            s = dup_str(str, &n->text, &n->text_len, c);
        if (s == PE_OK)
            s = tx_load_pattern(cJSON_GetObjectItemCaseSensitive(j, "pattern"),
                                "normalizer(Replace)", &n->pattern, c);
    } else {
        return pe_fail(c->err, PE_EFORMAT, "%s: normalizer type \"%s\" is not supported "
                       "(supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace)", c->file,
                       type);
    }
    t->nnorm++; /* counted even on failure: free() releases what was set */
    return s;
}

pe_status tx_load_norm(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    return !j || cJSON_IsNull(j) ? PE_OK : load_norm(t, j, c);
}

/* ---- pre-tokenizer ------------------------------------------------------------------------- */

static pe_status load_behavior(const cJSON *j, tx_split_behavior *out, tx_ctx *c)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    const char *b = tx_json_str(j, "behavior");
    for (int i = 0; b && i < 5; i++)
        if (!strcmp(b, names[i])) {
            *out = (tx_split_behavior)i;
            return PE_OK;
        }
    return pe_fail(c->err, PE_EFORMAT, "%s: pre_tokenizer(Split).behavior \"%s\" is not "
                   "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
                   c->file, b ? b : "(missing)");
}

static pe_status load_pretok(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    const char *type;
    pe_status s = check_object(j, "pre_tokenizer", &type, c);
    if (s != PE_OK)
        return s;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(list))
            return pe_fail(c->err, PE_EFORMAT, "%s: pre_tokenizer.pretokenizers is not a list",
                           c->file);
        for (const cJSON *e = list->child; e && s == PE_OK; e = e->next)
            s = load_pretok(t, e, c);
        return s;
    }
    if (t->npre == TX_MAX_STEPS)
        return too_many("pre_tokenizer", c);
    if (t->bpe.byte_level)
        return pe_fail(c->err, PE_EFORMAT, "%s: pre_tokenizer \"%s\" after ByteLevel is not "
                       "supported (ByteLevel must be the last pre-tokenizer)", c->file, type);
    tx_pretok *p = &t->pre[t->npre];
    if (!strcmp(type, "Split")) {
        p->kind = TX_PRE_SPLIT;
        s = tx_load_pattern(cJSON_GetObjectItemCaseSensitive(j, "pattern"),
                            "pre_tokenizer(Split)", &p->pattern, c);
        if (s == PE_OK)
            s = load_behavior(j, &p->behavior, c);
        if (s == PE_OK)
            s = tx_json_bool(j, "invert", 0, "pre_tokenizer(Split).invert", &p->invert, c);
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = TX_PRE_BYTELEVEL;
        t->bpe.byte_level = 1;
        s = tx_json_bool(j, "add_prefix_space", 1, "pre_tokenizer(ByteLevel).add_prefix_space",
                         &p->add_prefix_space, c);
        if (s == PE_OK)
            s = tx_json_bool(j, "use_regex", 1, "pre_tokenizer(ByteLevel).use_regex",
                             &p->use_regex, c);
        if (s == PE_OK && p->use_regex)
            s = tx_gpt2_regex(&p->pattern.regex, c->err);
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = TX_PRE_METASPACE;
        s = load_char(j, "pre_tokenizer(Metaspace)", p->replacement, &p->replacement_len, c);
        if (s == PE_OK)
            s = load_prepend(j, "pre_tokenizer(Metaspace)", &p->prepend, c);
        if (s == PE_OK)
            s = tx_json_bool(j, "split", 1, "pre_tokenizer(Metaspace).split", &p->split, c);
    } else {
        return pe_fail(c->err, PE_EFORMAT, "%s: pre_tokenizer type \"%s\" is not supported "
                       "(supported: Sequence, Split, ByteLevel, Metaspace)", c->file, type);
    }
    t->npre++;
    return s;
}

pe_status tx_load_pretok(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    return !j || cJSON_IsNull(j) ? PE_OK : load_pretok(t, j, c);
}

/* ---- decoder ------------------------------------------------------------------------------- */

static pe_status load_int(const cJSON *obj, const char *key, const char *what, int *out,
                          tx_ctx *c)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 1e6)
        return pe_fail(c->err, PE_EFORMAT, "%s: %s.%s is missing or not a count", c->file,
                       what, key);
    *out = (int)j->valuedouble;
    return PE_OK;
}

static pe_status load_dec(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    const char *type, *str;
    pe_status s = check_object(j, "decoder", &type, c);
    if (s != PE_OK)
        return s;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(list))
            return pe_fail(c->err, PE_EFORMAT, "%s: decoder.decoders is not a list", c->file);
        for (const cJSON *e = list->child; e && s == PE_OK; e = e->next)
            s = load_dec(t, e, c);
        return s;
    }
    if (t->ndec == TX_MAX_STEPS)
        return too_many("decoder", c);
    tx_dec *d = &t->dec[t->ndec];
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TX_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TX_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TX_DEC_FUSE;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TX_DEC_METASPACE;
        s = load_char(j, "decoder(Metaspace)", d->replacement, &d->replacement_len, c);
        if (s == PE_OK)
            s = load_prepend(j, "decoder(Metaspace)", &d->prepend, c);
    } else if (!strcmp(type, "Replace")) {
        d->kind = TX_DEC_REPLACE;
        s = need_str(j, "content", "decoder(Replace)", &str, c);
        if (s == PE_OK)
            s = dup_str(str, &d->content, &d->content_len, c);
        if (s == PE_OK)
            s = tx_load_pattern(cJSON_GetObjectItemCaseSensitive(j, "pattern"),
                                "decoder(Replace)", &d->pattern, c);
    } else if (!strcmp(type, "Strip")) {
        d->kind = TX_DEC_STRIP;
        s = need_str(j, "content", "decoder(Strip)", &str, c);
        if (s == PE_OK)
            s = dup_str(str, &d->content, &d->content_len, c);
        if (s == PE_OK && tx_utf8_valid_len((const unsigned char *)str, d->content_len, 0) !=
                              d->content_len)
            s = pe_fail(c->err, PE_EFORMAT, "%s: decoder(Strip).content is not one character",
                        c->file);
        if (s == PE_OK)
            s = load_int(j, "start", "decoder(Strip)", &d->start, c);
        if (s == PE_OK)
            s = load_int(j, "stop", "decoder(Strip)", &d->stop, c);
    } else {
        return pe_fail(c->err, PE_EFORMAT, "%s: decoder type \"%s\" is not supported (supported: "
                       "Sequence, ByteLevel, ByteFallback, Metaspace, Replace, Fuse, Strip)",
                       c->file, type);
    }
    t->ndec++;
    return s;
}

pe_status tx_load_decoder(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    if (!j || cJSON_IsNull(j))
        return PE_OK;
    t->has_decoder = 1;
    return load_dec(t, j, c);
}
