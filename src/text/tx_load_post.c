/* tx_load_post.c: the "post_processor" section of tokenizer.json: the special tokens that
 * encoding with add_special puts before and after the text (TemplateProcessing's single
 * template, RobertaProcessing's and BertProcessing's cls/sep; ByteLevel adds none). */
#include <string.h>

#include "text/tx_load.h"

static pe_status add_ids(int32_t *list, int *n, const int32_t *ids, int k, tx_ctx *c)
{
    if (*n + k > 8)
        return pe_fail(c->err, PE_EFORMAT, "%s: post_processor adds more than 8 tokens on a "
                       "side", c->file);
    memcpy(list + *n, ids, (size_t)k * sizeof *ids);
    *n += k;
    return PE_OK;
}

static pe_status check_id(const pe_tokenizer *t, double v, const char *what, int32_t *out,
                          tx_ctx *c)
{
    if (v < 0 || v >= (double)t->vocab_size || v != (double)(int32_t)v)
        return pe_fail(c->err, PE_EFORMAT, "%s: %s names id %g, which is not in the "
                       "vocabulary", c->file, what, v);
    *out = (int32_t)v;
    return PE_OK;
}

/* TemplateProcessing: "single" is a list of {"SpecialToken": {"id": NAME}} and
 * {"Sequence": {"id": "A"}}; "special_tokens"[NAME]["ids"] lists a name's ids. */
static pe_status load_template(pe_tokenizer *t, const cJSON *j, int32_t *pre, int *npre,
                               int32_t *suf, int *nsuf, tx_ctx *c)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return pe_fail(c->err, PE_EFORMAT, "%s: post_processor(TemplateProcessing).single is "
                       "not a list", c->file);
    int seen_a = 0;
    for (const cJSON *e = single->child; e; e = e->next) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            seen_a = 1;
            continue;
        }
        const char *name = tx_json_str(sp, "id");
        const cJSON *entry = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
        if (!cJSON_IsArray(ids))
            return pe_fail(c->err, PE_EFORMAT, "%s: post_processor(TemplateProcessing): the "
                           "special token \"%s\" has no entry with ids in special_tokens",
                           c->file, name ? name : "(no id)");
        for (const cJSON *i = ids->child; i; i = i->next) {
            int32_t id = 0;
            pe_status s = check_id(t, cJSON_IsNumber(i) ? i->valuedouble : -1,
                                   "post_processor(TemplateProcessing)", &id, c);
            if (s == PE_OK)
                s = seen_a ? add_ids(suf, nsuf, &id, 1, c) : add_ids(pre, npre, &id, 1, c);
            if (s != PE_OK)
                return s;
        }
    }
    return PE_OK;
}

/* RobertaProcessing / BertProcessing: "cls": [token, id] before, "sep": [token, id] after. */
static pe_status load_cls_sep(pe_tokenizer *t, const cJSON *j, int32_t *pre, int *npre,
                              int32_t *suf, int *nsuf, tx_ctx *c)
{
    const char *keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        const cJSON *pair = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        const cJSON *id = cJSON_GetArrayItem(pair, 1);
        int32_t v = 0;
        pe_status s = check_id(t, cJSON_IsNumber(id) ? id->valuedouble : -1,
                               k ? "post_processor.sep" : "post_processor.cls", &v, c);
        if (s == PE_OK)
            s = k ? add_ids(suf, nsuf, &v, 1, c) : add_ids(pre, npre, &v, 1, c);
        if (s != PE_OK)
            return s;
    }
    return PE_OK;
}

/* One processor wraps what the ones before it made: its prefix goes in front of theirs,
 * its suffix after theirs. */
static pe_status load_one(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    const char *type = tx_json_str(j, "type");
    if (!cJSON_IsObject(j) || !type)
        return pe_fail(c->err, PE_EFORMAT, "%s: post_processor is not an object with a "
                       "\"type\"", c->file);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(list))
            return pe_fail(c->err, PE_EFORMAT, "%s: post_processor.processors is not a list",
                           c->file);
        for (const cJSON *e = list->child; e; e = e->next) {
            pe_status s = load_one(t, e, c);
            if (s != PE_OK)
                return s;
        }
        return PE_OK;
    }
    int32_t pre[8], suf[8];
    int npre = 0, nsuf = 0;
    pe_status s = PE_OK;
    if (!strcmp(type, "TemplateProcessing"))
        s = load_template(t, j, pre, &npre, suf, &nsuf, c);
    else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))
        s = load_cls_sep(t, j, pre, &npre, suf, &nsuf, c);
    else if (strcmp(type, "ByteLevel") != 0)
        return pe_fail(c->err, PE_EFORMAT, "%s: post_processor type \"%s\" is not supported "
                       "(supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                       "BertProcessing, Sequence)", c->file, type);
    if (s != PE_OK)
        return s;
    /* new prefix = pre + old prefix; new suffix = old suffix + suf */
    int32_t merged[16];
    memcpy(merged, pre, (size_t)npre * sizeof *pre);
    memcpy(merged + npre, t->prefix_ids, (size_t)t->nprefix * sizeof *pre);
    int n = 0;
    s = add_ids(t->prefix_ids, &n, merged, npre + t->nprefix, c);
    t->nprefix = n;
    if (s == PE_OK)
        s = add_ids(t->suffix_ids, &t->nsuffix, suf, nsuf, c);
    return s;
}

pe_status tx_load_post(pe_tokenizer *t, const cJSON *j, tx_ctx *c)
{
    return !j || cJSON_IsNull(j) ? PE_OK : load_one(t, j, c);
}
