/* fuzz_tok_enc.c: fuzzes encode, decode and the streaming detokenizer (src/text) with real
 * tokenizers: TOKENIZER is a tokenizer.json, or several separated by ':', and each input runs
 * on each. The input's first byte holds flags (bit 0: add special tokens; 1: decode skips
 * special tokens; 2: the stream skips them; 3: also decode and stream ids read from the rest
 * as 32-bit words, bit 4: as they are, else modulo vocab + 2, so that some are out of range;
 * 5, 6: skip special there); the rest is the text. Checks that encode succeeds with every id
 * in range, that the decode of those ids succeeds, that the streamed text is well-formed
 * UTF-8 and never longer in characters than the decode (released text is never repeated),
 * that out-of-range ids are refused without a sanitizer report, and that a token's bytes
 * alone (pe_tokenizer_token_bytes), when they are UTF-8, are the decode of its id. Exits 77
 * (a skip) when TOKENIZER is unset or names a missing file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "pengine/pengine.h"

#define MAX_TOKENIZERS 4

static pe_tokenizer *g_tk[MAX_TOKENIZERS];
static int g_ntk;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *list = getenv("TOKENIZER");
    if (!list || !*list) {
        fprintf(stderr, "skipped: set TOKENIZER to a tokenizer.json (or several, ':' between)\n");
        exit(77);
    }
    char *paths = strdup(list), *save = NULL;
    for (char *p = strtok_r(paths, ":", &save); p && g_ntk < MAX_TOKENIZERS;
         p = strtok_r(NULL, ":", &save)) {
        if (access(p, R_OK) != 0) {
            fprintf(stderr, "skipped: %s is missing\n", p);
            exit(77);
        }
        if (pe_tokenizer_load(p, &g_tk[g_ntk]) != PE_OK) {
            fprintf(stderr, "fuzz_tok_enc: %s: %s\n", p, pe_last_error());
            abort();
        }
        g_ntk++;
    }
    free(paths);
    return 0;
}

/* The characters of well-formed UTF-8 text. */
static size_t utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Streams ids[0..n); every piece must be UTF-8. Returns the characters streamed. */
static size_t stream(const pe_tokenizer *tk, int skip_special, const int32_t *ids, size_t n)
{
    pe_detokenizer *dt;
    if (pe_detokenizer_create(tk, skip_special, &dt) != PE_OK)
        abort();
    const char *s;
    size_t len, chars = 0;
    for (size_t i = 0; i < n; i++)
        if (pe_detokenizer_push(dt, ids[i], &s, &len) == PE_OK) {
            if (!fuzz_utf8_valid(s, len))
                abort();
            chars += utf8_chars(s, len);
        }
    if (pe_detokenizer_flush(dt, &s, &len) == PE_OK) {
        if (!fuzz_utf8_valid(s, len))
            abort();
        chars += utf8_chars(s, len);
    }
    pe_detokenizer_free(dt);
    return chars;
}

/* A token's bytes alone: refused for an id out of range; else, when they are UTF-8, they
 * are the decode of the one id. */
static void token_bytes(const pe_tokenizer *tk, int32_t id)
{
    char *b = NULL, *text = NULL;
    size_t n = 0, tn = 0;
    pe_status st = pe_tokenizer_token_bytes(tk, id, &b, &n);
    if ((st == PE_OK) != (id >= 0 && (size_t)id < pe_tokenizer_vocab_size(tk)))
        abort();
    if (st == PE_OK && fuzz_utf8_valid(b, n) &&
        (pe_tokenizer_decode(tk, &id, 1, 0, &text, &tn) != PE_OK || tn != n ||
         memcmp(text, b, n) != 0))
        abort();
    free(b);
    free(text);
}

static void run(const pe_tokenizer *tk, int flags, const char *text, size_t len)
{
    size_t vocab = pe_tokenizer_vocab_size(tk);
    int32_t *ids = NULL;
    size_t n = 0;
    if (pe_tokenizer_encode(tk, text, len, flags & 1, &ids, &n) != PE_OK)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= vocab)
            abort();
    int skip = (flags >> 1) & 1;
    char *out = NULL;
    size_t out_len = 0;
    if (pe_tokenizer_decode(tk, ids, n, skip, &out, &out_len) != PE_OK || strlen(out) > out_len)
        abort();
    if (stream(tk, skip, ids, n) > utf8_chars(out, out_len))
        abort();
    free(out);
    stream(tk, (flags >> 2) & 1, ids, n);
    free(ids);
    if (!(flags & 8))
        return;
    size_t k = len / 4;
    int32_t *raw = malloc(k * sizeof *raw + 4);
    for (size_t i = 0; i < k; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        raw[i] = (flags & 16) ? (int32_t)v : (int32_t)(v % (vocab + 2));
    }
    if (pe_tokenizer_decode(tk, raw, k, (flags >> 5) & 1, &out, &out_len) == PE_OK)
        free(out);
    for (size_t i = 0; i < k; i++)
        token_bytes(tk, raw[i]);
    pe_detokenizer *dt;
    if (pe_detokenizer_create(tk, (flags >> 6) & 1, &dt) == PE_OK) {
        const char *s;
        size_t sl;
        for (size_t i = 0; i < k; i++)
            pe_detokenizer_push(dt, raw[i], &s, &sl);
        pe_detokenizer_flush(dt, &s, &sl);
        pe_detokenizer_free(dt);
    }
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    for (int t = 0; t < g_ntk; t++)
        run(g_tk[t], data[0], (const char *)data + 1, size - 1);
    return 0;
}
