/* tx_load.c: pe_tokenizer_load / pe_tokenizer_free: finds the file(s) of a path (a
 * tokenizer.json, or a directory holding one, or GPT-2's vocab.json + merges.txt), reads
 * them, and hands each section to its loader. Also the vocabulary look-ups of the API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tx_load.h"
#include "text/tx_utf8.h"

/* GPT-2's split regex: ByteLevel's use_regex, and the vocab.json + merges.txt tokenizer. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static pe_status read_file(const char *path, char **out, size_t *len, pe_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pe_fail(err, PE_EIO, "cannot open %s (%s); give a tokenizer.json or a model "
                       "directory holding one", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return pe_fail(err, PE_ENOMEM, "out of memory reading %s", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return pe_fail(err, PE_EIO, "cannot read %s; check the file", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return PE_OK;
}

static pe_status parse_json(const char *path, cJSON **out, pe_err *err)
{
    char *text;
    size_t len;
    pe_status s = read_file(path, &text, &len, err);
    if (s != PE_OK)
        return s;
    /* JSON is UTF-8, and the tokenizer's strings (patterns, replacements, tokens) must be:
     * cJSON does not check it */
    for (size_t i = 0, k; i < len; i += k)
        if ((k = tx_utf8_valid_len((const unsigned char *)text, len, i)) == 0) {
            free(text);
            return pe_fail(err, PE_EFORMAT, "%s is not UTF-8 (an invalid byte at offset %zu); "
                           "use the file as Hugging Face wrote it", path, i);
        }
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*out) {
        size_t at = end ? (size_t)(end - text) : 0;
        free(text);
        return pe_fail(err, PE_EFORMAT, "%s is not valid JSON (near byte %zu); use the file "
                       "as Hugging Face wrote it", path, at);
    }
    free(text);
    return PE_OK;
}

static pe_status init_common(pe_tokenizer *t, tx_ctx *c)
{
    if (tx_strmap_init(&t->token_ids, 1024) != 0 || tx_strmap_init(&t->bpe.pieces, 1024) != 0 ||
        tx_pairmap_init(&t->bpe.merges, 1024) != 0)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    t->bpe.unk_id = -1;
    static const char space[] = "\\s", word[] = "[\\p{Alpha}\\p{N}_]";
    pe_status s = tx_regex_compile(space, sizeof space - 1, "the whitespace class",
                                   &t->whitespace, c->err);
    if (s == PE_OK)
        s = tx_regex_compile(word, sizeof word - 1, "the word class", &t->word_char, c->err);
    return s;
}

static pe_status load_json(pe_tokenizer *t, const char *path, pe_err *err)
{
    tx_ctx c = {path, err};
    cJSON *root = NULL;
    pe_status s = parse_json(path, &root, err);
    if (s != PE_OK)
        return s;
    if (!cJSON_IsObject(root)) {
        s = pe_fail(err, PE_EFORMAT, "%s: the top level is not an object; is this a "
                    "tokenizer.json?", path);
        goto out;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        s = pe_fail(err, PE_EFORMAT, "%s: no \"model\" object; is this a tokenizer.json?",
                    path);
        goto out;
    }
    s = init_common(t, &c);
    if (s == PE_OK)
        s = tx_load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &c);
    if (s == PE_OK)
        s = tx_load_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &c);
    if (s == PE_OK)
        s = tx_load_model(t, model, &c);
    if (s == PE_OK)
        s = tx_load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &c);
    if (s == PE_OK)
        s = tx_load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), &c);
    if (s == PE_OK)
        s = tx_load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &c);
out:
    cJSON_Delete(root);
    return s;
}

/* GPT-2 as Hugging Face converts it: ByteLevel pre-tokenizer (GPT-2's regex, no prefix
 * space), ByteLevel decoder, no post-processor tokens, <|endoftext|> a special token. */
static pe_status load_pair(pe_tokenizer *t, const char *vocab_path, const char *merges_path,
                           pe_err *err)
{
    tx_ctx c = {vocab_path, err};
    cJSON *vocab = NULL;
    char *merges = NULL;
    size_t len = 0;
    pe_status s = parse_json(vocab_path, &vocab, err);
    if (s == PE_OK)
        s = read_file(merges_path, &merges, &len, err);
    if (s == PE_OK)
        s = init_common(t, &c);
    if (s == PE_OK) {
        tx_pretok *p = &t->pre[t->npre++];
        p->kind = TX_PRE_BYTELEVEL;
        p->use_regex = 1;
        s = tx_regex_compile(gpt2_regex, sizeof gpt2_regex - 1, "GPT-2's split regex",
                             &p->pattern.regex, err);
        t->bpe.byte_level = 1;
    }
    if (s == PE_OK)
        s = tx_load_model_pair(t, vocab, merges, len, &c);
    if (s == PE_OK) {
        int32_t eot = tx_strmap_get(&t->token_ids, "<|endoftext|>", 13);
        if (eot >= 0)
            s = tx_add_token(t, "<|endoftext|>", eot, 1, &c);
    }
    if (s == PE_OK)
        s = tx_build_tries(t, &c);
    if (s == PE_OK) {
        t->dec[t->ndec++].kind = TX_DEC_BYTELEVEL;
        t->has_decoder = 1;
    }
    cJSON_Delete(vocab);
    free(merges);
    return s;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

pe_status tx_gpt2_regex(tx_regex **out, pe_err *err)
{
    return tx_regex_compile(gpt2_regex, sizeof gpt2_regex - 1, "GPT-2's split regex", out, err);
}

pe_status pe_tokenizer_load(const char *path, pe_tokenizer **out)
{
    pe_err err = {{0}};
    pe_status s;
    if (!out || !path) {
        pe_set_last_error("pe_tokenizer_load: path and out must not be NULL");
        return PE_EINVAL;
    }
    *out = NULL;
    pe_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        pe_set_last_error("out of memory loading a tokenizer");
        return PE_ENOMEM;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        s = pe_fail(&err, PE_EIO, "cannot open %s (%s); give a tokenizer.json or a model "
                    "directory holding one", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + 32;
        char *a = malloc(n), *b = malloc(n);
        if (!a || !b) {
            s = pe_fail(&err, PE_ENOMEM, "out of memory loading a tokenizer");
        } else {
            snprintf(a, n, "%s/tokenizer.json", path);
            if (is_file(a)) {
                s = load_json(t, a, &err);
            } else {
                snprintf(a, n, "%s/vocab.json", path);
                snprintf(b, n, "%s/merges.txt", path);
                if (is_file(a) && is_file(b))
                    s = load_pair(t, a, b, &err);
                else
                    s = pe_fail(&err, PE_EIO, "%s holds no tokenizer.json (nor vocab.json "
                                "with merges.txt); give the model's directory or its "
                                "tokenizer.json", path);
            }
        }
        free(a);
        free(b);
    } else {
        s = load_json(t, path, &err);
    }
    if (s != PE_OK) {
        pe_tokenizer_free(t);
        pe_set_last_error(err.msg);
        return s;
    }
    *out = t;
    return PE_OK;
}

void tx_text_pattern_free(tx_text_pattern *p)
{
    free(p->literal);
    tx_regex_free(p->regex);
    memset(p, 0, sizeof *p);
}

void pe_tokenizer_free(pe_tokenizer *t)
{
    if (!t)
        return;
    tx_strmap_free(&t->bpe.pieces);
    tx_pairmap_free(&t->bpe.merges);
    for (size_t i = 0; i < t->vocab_size; i++)
        free(t->tokens[i]);
    free(t->tokens);
    free(t->token_len);
    free(t->is_special);
    tx_strmap_free(&t->token_ids);
    for (int i = 0; i < t->nadded; i++)
        free(t->added[i].content);
    free(t->added);
    tx_pairmap_free(&t->trie_raw.edges);
    free(t->trie_raw.token);
    tx_pairmap_free(&t->trie_norm.edges);
    free(t->trie_norm.token);
    for (int i = 0; i < t->nnorm; i++) {
        free(t->norm[i].text);
        tx_text_pattern_free(&t->norm[i].pattern);
    }
    for (int i = 0; i < t->npre; i++)
        tx_text_pattern_free(&t->pre[i].pattern);
    for (int i = 0; i < t->ndec; i++) {
        free(t->dec[i].content);
        tx_text_pattern_free(&t->dec[i].pattern);
    }
    tx_regex_free(t->whitespace);
    tx_regex_free(t->word_char);
    free(t);
}

size_t pe_tokenizer_vocab_size(const pe_tokenizer *t) { return t ? t->vocab_size : 0; }

int32_t pe_tokenizer_token_id(const pe_tokenizer *t, const char *token)
{
    if (!t || !token)
        return -1;
    return tx_strmap_get(&t->token_ids, token, strlen(token));
}

pe_status tx_set_token(pe_tokenizer *t, const char *s, size_t len, int32_t id, tx_ctx *c)
{
    if (id < 0)
        return pe_fail(c->err, PE_EFORMAT, "%s: token id %d is negative", c->file, (int)id);
    if (id > TX_MAX_TOKEN_ID) /* the tables are as long as the largest id */
        return pe_fail(c->err, PE_EFORMAT, "%s: token id %d (\"%.*s\") is beyond %d; "
                       "vocabularies are numbered from 0 without large gaps", c->file,
                       (int)id, len > 40 ? 40 : (int)len, s, TX_MAX_TOKEN_ID);
    if ((size_t)id >= t->tokens_cap) {
        size_t cap = t->tokens_cap ? t->tokens_cap : 1024;
        while (cap <= (size_t)id)
            cap *= 2;
        char **tok = realloc(t->tokens, cap * sizeof *tok);
        if (tok)
            t->tokens = tok;
        uint32_t *tl = realloc(t->token_len, cap * sizeof *tl);
        if (tl)
            t->token_len = tl;
        uint8_t *sp = realloc(t->is_special, cap);
        if (sp)
            t->is_special = sp;
        if (!tok || !tl || !sp)
            return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
        for (size_t i = t->tokens_cap; i < cap; i++) {
            t->tokens[i] = NULL;
            t->token_len[i] = 0;
            t->is_special[i] = 0;
        }
        t->tokens_cap = cap;
    }
    if ((size_t)id >= t->vocab_size)
        t->vocab_size = (size_t)id + 1;
    char *copy = malloc(len + 1);
    if (!copy || tx_strmap_put(&t->token_ids, s, len, id) != 0) {
        free(copy);
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    free(t->tokens[id]);
    t->tokens[id] = copy;
    t->token_len[id] = (uint32_t)len;
    return PE_OK;
}
