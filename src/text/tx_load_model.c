/* tx_load_model.c: the "model" section of tokenizer.json (BPE: vocab, merges, unk_token,
 * byte_fallback, fuse_unk, ignore_merges), and the same from GPT-2's vocab.json and
 * merges.txt. Other model types are refused with a message naming them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tx_load.h"
#include "text/tx_utf8.h"

/* The raw bytes a byte-level token stands for; 0 when a character is outside the alphabet. */
static int token_bytes(const char *s, size_t len, tx_buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    out->n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = tx_utf8_valid_len(u, len, i);
        if (!cl)
            return 0;
        int b = tx_cp_to_byte(tx_utf8_decode(u, len, i));
        if (b < 0 || tx_buf_addc(out, (char)b) != 0)
            return 0;
        i += cl;
    }
    return 1;
}

static pe_status add_vocab_entry(pe_tokenizer *t, const char *key, double v, tx_ctx *c,
                                 tx_buf *scratch)
{
    if (v < 0 || v > 0x7fffffff || v != (double)(int32_t)v)
        return pe_fail(c->err, PE_EFORMAT, "%s: model.vocab[\"%.60s\"] = %g is not a token id "
                       "(an integer >= 0)", c->file, key, v);
    int32_t id = (int32_t)v;
    size_t len = strlen(key);
    pe_status s = tx_set_token(t, key, len, id, c);
    if (s != PE_OK)
        return s;
    const char *piece = key;
    size_t plen = len;
    if (t->bpe.byte_level) {
        if (!token_bytes(key, len, scratch))
            return PE_OK; /* not made of byte symbols: BPE can never produce it */
        piece = scratch->p;
        plen = scratch->n;
    }
    if (tx_strmap_put(&t->bpe.pieces, piece, plen, id) != 0)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    return PE_OK;
}

static pe_status load_vocab(pe_tokenizer *t, const cJSON *vocab, const char *what, tx_ctx *c)
{
    if (!cJSON_IsObject(vocab))
        return pe_fail(c->err, PE_EFORMAT, "%s: %s is missing or not an object of token -> id",
                       c->file, what);
    tx_buf scratch = {0};
    pe_status s = PE_OK;
    for (const cJSON *e = vocab->child; e && s == PE_OK; e = e->next) {
        if (!cJSON_IsNumber(e))
            s = pe_fail(c->err, PE_EFORMAT, "%s: %s[\"%.60s\"] is not a number", c->file, what,
                        e->string);
        else
            s = add_vocab_entry(t, e->string, e->valuedouble, c, &scratch);
    }
    tx_buf_free(&scratch);
    return s;
}

static pe_status add_merge(pe_tokenizer *t, const char *a, size_t alen, const char *b,
                           size_t blen, size_t rank, tx_ctx *c, tx_buf *scratch)
{
    int32_t ia = tx_strmap_get(&t->token_ids, a, alen);
    int32_t ib = tx_strmap_get(&t->token_ids, b, blen);
    scratch->n = 0;
    if (tx_buf_add(scratch, a, alen) != 0 || tx_buf_add(scratch, b, blen) != 0)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    int32_t im = tx_strmap_get(&t->token_ids, scratch->p, scratch->n);
    if (ia < 0 || ib < 0 || im < 0)
        return pe_fail(c->err, PE_EFORMAT, "%s: merge %zu (\"%.*s\" \"%.*s\") uses a token that "
                       "is not in the vocabulary (\"%.*s\"); the vocab and merges do not belong "
                       "together", c->file, rank, (int)(alen > 40 ? 40 : alen), a,
                       (int)(blen > 40 ? 40 : blen), b, ia < 0 ? (int)alen : ib < 0 ?
                       (int)blen : (int)scratch->n, ia < 0 ? a : ib < 0 ? b : scratch->p);
    /* a pair listed twice keeps its last rank, as Hugging Face's map does */
    if (tx_pairmap_put(&t->bpe.merges, tx_pair_key(ia, ib), ((uint64_t)rank << 32) |
                       (uint32_t)im) != 0)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    return PE_OK;
}

static pe_status load_merges(pe_tokenizer *t, const cJSON *merges, tx_ctx *c)
{
    if (!cJSON_IsArray(merges))
        return pe_fail(c->err, PE_EFORMAT, "%s: model.merges is missing or not a list",
                       c->file);
    tx_buf scratch = {0};
    pe_status s = PE_OK;
    size_t rank = 0;
    for (const cJSON *m = merges->child; m && s == PE_OK; m = m->next, rank++) {
        if (cJSON_IsString(m)) { /* "a b": split at the first space */
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) {
                s = pe_fail(c->err, PE_EFORMAT, "%s: model.merges[%zu] \"%.60s\" is not two "
                            "tokens separated by a space", c->file, rank, m->valuestring);
                break;
            }
            s = add_merge(t, m->valuestring, (size_t)(sp - m->valuestring), sp + 1,
                          strlen(sp + 1), rank, c, &scratch);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            const char *a = m->child->valuestring, *b = m->child->next->valuestring;
            s = add_merge(t, a, strlen(a), b, strlen(b), rank, c, &scratch);
        } else {
            s = pe_fail(c->err, PE_EFORMAT, "%s: model.merges[%zu] is neither \"a b\" nor "
                        "[\"a\", \"b\"]", c->file, rank);
        }
    }
    tx_buf_free(&scratch);
    return s;
}

/* The ids of single bytes (byte-level) and of "<0xNN>" (byte fallback). */
static void byte_tables(pe_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char ch = (char)b, hex[8];
        t->bpe.byte_ids[b] = t->bpe.byte_level ? tx_strmap_get(&t->bpe.pieces, &ch, 1) : -1;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->bpe.fallback_ids[b] = tx_strmap_get(&t->token_ids, hex, 6);
    }
}

static pe_status check_empty_or_null(const cJSON *model, const char *key, tx_ctx *c)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, key);
    if (!j || cJSON_IsNull(j) || (cJSON_IsString(j) && !j->valuestring[0]))
        return PE_OK;
    return pe_fail(c->err, PE_EFORMAT, "%s: model.%s is set; pengine supports BPE models "
                   "without it (GPT-2, Llama, Mistral, Qwen2)", c->file, key);
}

pe_status tx_load_model(pe_tokenizer *t, const cJSON *model, tx_ctx *c)
{
    const char *type = tx_json_str(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return pe_fail(c->err, PE_EFORMAT, "%s: model.type \"%s\" is not supported; pengine "
                       "reads BPE tokenizers only (GPT-2, Llama 2/3, Mistral, Qwen2)", c->file,
                       type);
    if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return pe_fail(c->err, PE_EFORMAT, "%s: model has no \"type\" and no \"merges\"; "
                       "pengine reads BPE tokenizers only", c->file);
    pe_status s = PE_OK;
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2 && s == PE_OK; i++)
        s = check_empty_or_null(model, keys[i], c);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (s == PE_OK && dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        s = pe_fail(c->err, PE_EFORMAT, "%s: model.dropout is set; BPE dropout is random and "
                    "meant for training: set it to null", c->file);
    if (s == PE_OK)
        s = tx_json_bool(model, "byte_fallback", 0, "model.byte_fallback", &t->bpe.byte_fallback,
                         c);
    if (s == PE_OK)
        s = tx_json_bool(model, "fuse_unk", 0, "model.fuse_unk", &t->bpe.fuse_unk, c);
    if (s == PE_OK)
        s = tx_json_bool(model, "ignore_merges", 0, "model.ignore_merges",
                         &t->bpe.ignore_merges, c);
    if (s == PE_OK)
        s = load_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), "model.vocab", c);
    if (s == PE_OK)
        s = load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), c);
    if (s != PE_OK)
        return s;
    const char *unk = tx_json_str(model, "unk_token");
    if (unk) {
        t->bpe.unk_id = tx_strmap_get(&t->token_ids, unk, strlen(unk));
        if (t->bpe.unk_id < 0)
            return pe_fail(c->err, PE_EFORMAT, "%s: model.unk_token \"%.60s\" is not in "
                           "model.vocab", c->file, unk);
    }
    byte_tables(t);
    return PE_OK;
}

pe_status tx_load_model_pair(pe_tokenizer *t, const cJSON *vocab, char *merges, size_t len,
                             tx_ctx *c)
{
    pe_status s = load_vocab(t, vocab, "vocab.json", c);
    if (s != PE_OK)
        return s;
    tx_buf scratch = {0};
    size_t rank = 0, line = 0;
    for (char *p = merges, *end = merges + len; p < end && s == PE_OK; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r')
            e--;
        /* "#version: 0.2" first, then "a b" per line; blank lines are skipped */
        if (e > p && !(line == 0 && *p == '#')) {
            char *sp = memchr(p, ' ', (size_t)(e - p));
            if (!sp)
                s = pe_fail(c->err, PE_EFORMAT, "merges.txt line %zu is not two tokens "
                            "separated by a space", line + 1);
            else
                s = add_merge(t, p, (size_t)(sp - p), sp + 1, (size_t)(e - sp - 1), rank++, c,
                              &scratch);
        }
        p = nl ? nl + 1 : end;
    }
    tx_buf_free(&scratch);
    if (s == PE_OK)
        byte_tables(t);
    return s;
}
