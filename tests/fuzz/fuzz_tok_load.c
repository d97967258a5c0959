/* fuzz_tok_load.c: fuzzes tokenizer.json loading (src/text): the input is the file. When
 * pe_tokenizer_load accepts it, encodes fixed texts (ASCII, CJK, invalid UTF-8, special-token
 * names, blanks, combining marks), decodes and streams the ids back, and decodes every id
 * below 4096 alone. Checks that every id encode returns is below the vocabulary's size and
 * that the streamed text is well-formed UTF-8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pengine/pengine.h"

static const char *const texts[] = {
    "hi hi",
    "Hello, world! 12345  \n\n  x",
    "\xE6\x97\xA5\xE6\x9C\xAC caf\xC3\xA9",
    "\xff\xfe a\x80 \xed\xb2\x80 \xf0\x9f\x98\x80",
    "<s> </s> <|endoftext|> <unk>",
    "   ",
    "",
    "a\xcc\x81 \xef\xac\x81 \xe2\x96\x81x",
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    return 0;
}

/* Streams ids[0..n) through a detokenizer; every piece must be UTF-8. */
static void stream(const pe_tokenizer *tk, const int32_t *ids, size_t n)
{
    pe_detokenizer *dt;
    if (pe_detokenizer_create(tk, 0, &dt) != PE_OK)
        return;
    const char *s;
    size_t len;
    for (size_t i = 0; i < n; i++)
        if (pe_detokenizer_push(dt, ids[i], &s, &len) == PE_OK && !fuzz_utf8_valid(s, len))
            abort();
    if (pe_detokenizer_flush(dt, &s, &len) == PE_OK && !fuzz_utf8_valid(s, len))
        abort();
    pe_detokenizer_free(dt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_path(path, sizeof path, "tokenizer.json");
    fuzz_write("tokenizer.json", data, size);
    pe_tokenizer *tk = NULL;
    if (pe_tokenizer_load(path, &tk) != PE_OK)
        return 0;
    size_t vocab = pe_tokenizer_vocab_size(tk);
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pe_tokenizer_encode(tk, texts[t], strlen(texts[t]), (int)(t & 1), &ids, &n) != PE_OK)
            continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (size_t)ids[i] >= vocab)
                abort();
        char *out = NULL;
        size_t len;
        if (pe_tokenizer_decode(tk, ids, n, (int)(t & 2), &out, &len) == PE_OK)
            free(out);
        stream(tk, ids, n);
        free(ids);
    }
    for (size_t i = 0; i < vocab && i < 4096; i++) {
        int32_t id = (int32_t)i;
        char *out = NULL;
        size_t len;
        if (pe_tokenizer_decode(tk, &id, 1, 0, &out, &len) == PE_OK)
            free(out);
    }
    pe_tokenizer_token_id(tk, "<s>");
    pe_tokenizer_free(tk);
    return 0;
}
