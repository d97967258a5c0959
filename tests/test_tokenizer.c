/* test_tokenizer.c: every feature of the tokenizer on hand-made tokenizer.json files whose
 * ids are worked out by hand: merges applied by rank (leftmost first on ties), byte
 * fallback and fused unknowns, added tokens (lstrip, rstrip, single_word, normalized),
 * NFC/NFKC, ignore_merges, the split regex and its behaviours, Metaspace, the
 * post-processor's BOS/EOS, decoding and streaming, invalid UTF-8, GPT-2's vocab.json +
 * merges.txt, the errors that name the part at fault, and one tokenizer shared by threads.
 * Needs no npm package (test_tokenizer_ref.c compares with the real tokenizers). */
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pengine/pengine.h"

static char g_path[512];

/* Writes json to a temporary tokenizer.json and loads it. */
static pe_status load_json(const char *json, pe_tokenizer **t)
{
    tu_temp_path(g_path, sizeof g_path, "tokenizer.json");
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    pe_status s = pe_tokenizer_load(g_path, t);
    unlink(g_path);
    return s;
}

static pe_tokenizer *must_load(const char *json)
{
    pe_tokenizer *t = NULL;
    pe_status s = load_json(json, &t);
    if (s != PE_OK)
        print_message("load: %s\n", pe_last_error());
    assert_int_equal(s, PE_OK);
    return t;
}

/* encode(text) must be exactly want (n ids). */
static void expect_ids(const pe_tokenizer *t, const char *text, size_t len, int special,
                       const int32_t *want, size_t n)
{
    int32_t *ids;
    size_t got;
    assert_int_equal(pe_tokenizer_encode(t, text, len, special, &ids, &got), PE_OK);
    if (got != n || memcmp(ids, want, n * sizeof *ids) != 0) {
        print_message("encode \"%.*s\": got", (int)len, text);
        for (size_t i = 0; i < got; i++)
            print_message(" %d", ids[i]);
        print_message(", want");
        for (size_t i = 0; i < n; i++)
            print_message(" %d", want[i]);
        print_message("\n");
    }
    assert_int_equal(got, n);
    assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);
}

#define EXPECT(t, text, special, ...)                                                          \
    do {                                                                                       \
        const int32_t want_[] = {__VA_ARGS__};                                                 \
        expect_ids(t, text, strlen(text), special, want_, sizeof want_ / sizeof want_[0]);     \
    } while (0)

static void expect_decode(const pe_tokenizer *t, const int32_t *ids, size_t n, int skip,
                          const char *want)
{
    char *text;
    size_t len;
    assert_int_equal(pe_tokenizer_decode(t, ids, n, skip, &text, &len), PE_OK);
    assert_int_equal(len, strlen(want));
    assert_string_equal(text, want);
    free(text);
}

/* A character-level BPE model (no pre-tokenizer) over the given vocab and merges. */
static pe_tokenizer *char_bpe(const char *vocab, const char *merges, const char *extra)
{
    char json[4096];
    snprintf(json, sizeof json, "{\"added_tokens\": [], \"normalizer\": null, "
             "\"pre_tokenizer\": null, \"post_processor\": null, \"decoder\": null, "
             "\"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": [%s]%s}}", vocab,
             merges, extra ? extra : "");
    return must_load(json);
}

/* ---- merges ------------------------------------------------------------------------------- */

static void test_merges_apply_lowest_rank_first(void **state)
{
    (void)state;
    const char *vocab = "\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4";
    /* "b c" ranks first: abc -> a bc */
    pe_tokenizer *t = char_bpe(vocab, "\"b c\", \"a b\"", NULL);
    EXPECT(t, "abc", 0, 0, 4);
    pe_tokenizer_free(t);
    /* the other order: abc -> ab c (the new merge format, a list of pairs) */
    t = char_bpe(vocab, "[\"a\", \"b\"], [\"b\", \"c\"]", NULL);
    EXPECT(t, "abc", 0, 3, 2);
    pe_tokenizer_free(t);
}

static void test_equal_ranks_merge_leftmost_first(void **state)
{
    (void)state;
    pe_tokenizer *t = char_bpe("\"a\": 0, \"aa\": 1, \"aaa\": 2", "\"a a\", \"aa a\"", NULL);
    /* aaa: (a a) at 0 and at 1 tie; the left one wins -> aa a -> (aa a) -> aaa */
    EXPECT(t, "aaa", 0, 2);
    /* aaaa: aa aa (the second pair at 1 is gone after the first merge, 2-3 merges next) */
    EXPECT(t, "aaaa", 0, 1, 1);
    /* aaaaa: aa aa a -> (aa a) only joins the last two: aa aaa */
    EXPECT(t, "aaaaa", 0, 1, 2);
    pe_tokenizer_free(t);
}

static void test_ignore_merges_takes_whole_words_from_the_vocabulary(void **state)
{
    (void)state;
    const char *vocab = "\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4";
    pe_tokenizer *t = char_bpe(vocab, "\"a b\"", ", \"ignore_merges\": false");
    EXPECT(t, "abc", 0, 3, 2); /* no merge makes abc */
    pe_tokenizer_free(t);
    t = char_bpe(vocab, "\"a b\"", ", \"ignore_merges\": true");
    EXPECT(t, "abc", 0, 4);
    EXPECT(t, "abcc", 0, 3, 2, 2); /* not a vocabulary word: merges as usual */
    pe_tokenizer_free(t);
}

/* ---- byte fallback, unknowns ------------------------------------------------------------------ */

static const char *g_fallback_vocab =
    "\"<unk>\": 0, \"<0xE6>\": 1, \"<0x97>\": 2, \"<0xA5>\": 3, \"a\": 4, \"<0xFF>\": 5";

static void test_byte_fallback_spells_unknown_characters_in_bytes(void **state)
{
    (void)state;
    pe_tokenizer *t = char_bpe(g_fallback_vocab, "",
                               ", \"unk_token\": \"<unk>\", \"byte_fallback\": true");
    EXPECT(t, "a\xE6\x97\xA5" "a", 0, 4, 1, 2, 3, 4); /* 日 is not in the vocabulary */
    /* é (C3 A9): <0xC3> is missing, so the whole character is <unk> */
    EXPECT(t, "a\xC3\xA9", 0, 4, 0);
    pe_tokenizer_free(t);
}

static void test_fuse_unk_joins_consecutive_unknowns(void **state)
{
    (void)state;
    pe_tokenizer *t = char_bpe(g_fallback_vocab, "", ", \"unk_token\": \"<unk>\"");
    EXPECT(t, "xyaz", 0, 0, 0, 4, 0);
    pe_tokenizer_free(t);
    t = char_bpe(g_fallback_vocab, "", ", \"unk_token\": \"<unk>\", \"fuse_unk\": true");
    EXPECT(t, "xyaz", 0, 0, 4, 0);
    pe_tokenizer_free(t);
}

/* ---- added tokens -------------------------------------------------------------------------------- */

static pe_tokenizer *added_tok(const char *flags)
{
    char json[2048];
    snprintf(json, sizeof json, "{\"added_tokens\": [{\"id\": 5, \"content\": \"<m>\", %s, "
             "\"special\": true}], \"normalizer\": null, \"pre_tokenizer\": null, "
             "\"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"BPE\", "
             "\"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"<\": 3, \"m\": 4, \">\": 6, "
             "\"x\": 7}, \"merges\": []}}", flags);
    return must_load(json);
}

static void test_added_tokens_split_out_with_lstrip_and_rstrip(void **state)
{
    (void)state;
    pe_tokenizer *t = added_tok("\"lstrip\": false, \"rstrip\": false, \"single_word\": false, "
                                "\"normalized\": false");
    EXPECT(t, "a <m> b", 0, 0, 2, 5, 2, 1);
    pe_tokenizer_free(t);
    t = added_tok("\"lstrip\": true, \"rstrip\": false, \"single_word\": false, "
                  "\"normalized\": false");
    EXPECT(t, "a  <m> b", 0, 0, 5, 2, 1);
    pe_tokenizer_free(t);
    t = added_tok("\"lstrip\": true, \"rstrip\": true, \"single_word\": false, "
                  "\"normalized\": false");
    EXPECT(t, "a \t<m>\n b", 0, 0, 5, 1);
    EXPECT(t, "<m><m>", 0, 5, 5);
    pe_tokenizer_free(t);
}

static void test_single_word_added_tokens_match_whole_words_only(void **state)
{
    (void)state;
    pe_tokenizer *t = added_tok("\"lstrip\": false, \"rstrip\": false, \"single_word\": true, "
                                "\"normalized\": false");
    EXPECT(t, "x<m>", 0, 7, 3, 4, 6);  /* glued to a word: plain text */
    EXPECT(t, "x <m>", 0, 7, 2, 5);
    pe_tokenizer_free(t);
}

/* ---- normalizers ------------------------------------------------------------------------------ */

static pe_tokenizer *nfc_tok(const char *norm, int normalized)
{
    char json[2048];
    /* é precomposed is 10; e is 11; U+0301 is 12; the added token é (content precomposed) 20 */
    snprintf(json, sizeof json, "{\"added_tokens\": [{\"id\": 20, \"content\": \"\xC3\xA9\", "
             "\"lstrip\": false, \"rstrip\": false, \"single_word\": false, \"normalized\": %s, "
             "\"special\": false}], \"normalizer\": %s, \"pre_tokenizer\": null, "
             "\"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"BPE\", "
             "\"vocab\": {\"\xC3\xA9\": 10, \"e\": 11, \"\xCC\x81\": 12, \"f\": 13, \"i\": 14}, "
             "\"merges\": []}}", normalized ? "true" : "false", norm);
    return must_load(json);
}

static void test_nfc_composes_before_the_model_and_normalized_added_tokens(void **state)
{
    (void)state;
    const char *decomposed = "e\xCC\x81";
    pe_tokenizer *t = nfc_tok("null", 0);
    EXPECT(t, decomposed, 0, 11, 12);   /* no normalizer: two characters */
    pe_tokenizer_free(t);
    t = nfc_tok("{\"type\": \"NFC\"}", 0);
    EXPECT(t, decomposed, 0, 10);       /* composed, then the model's é */
    EXPECT(t, "\xC3\xA9", 0, 20);       /* the raw text matches the added token */
    pe_tokenizer_free(t);
    t = nfc_tok("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}", 1);
    EXPECT(t, decomposed, 0, 20);       /* normalized: true matches after NFC */
    pe_tokenizer_free(t);
    t = nfc_tok("{\"type\": \"NFKC\"}", 0);
    EXPECT(t, "\xEF\xAC\x81", 0, 13, 14); /* the ligature U+FB01 is "fi" under NFKC */
    pe_tokenizer_free(t);
}

/* ---- byte-level BPE with the split regex of the file ------------------------------------------------- */

/* GPT-2's bytes_to_unicode, written out from its definition. */
static unsigned byte_char(unsigned b)
{
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (keep)
        return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 256 + n;
}

static size_t put_utf8(unsigned cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Byte-level: byte b is id b; "12" 256, "123" 257, "34" 258, "45" 259, "Ġa" 260. The
 * split regex is pre (a JSON string); the merges rank 34 first. */
static pe_tokenizer *bytelevel_tok(const char *split, const char *extra_pre)
{
    size_t cap = 64 * 1024, n = 0;
    char *json = malloc(cap);
    n += (size_t)snprintf(json + n, cap - n, "{\"added_tokens\": [], \"normalizer\": null, "
                          "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [");
    if (split)
        n += (size_t)snprintf(json + n, cap - n, "{\"type\": \"Split\", \"pattern\": {\"Regex\":"
                              " \"%s\"}, \"behavior\": \"Isolated\", \"invert\": false}, ", split);
    n += (size_t)snprintf(json + n, cap - n, "{\"type\": \"ByteLevel\", \"add_prefix_space\": "
                          "false, \"use_regex\": %s}]}, \"post_processor\": null, \"decoder\": "
                          "{\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {",
                          extra_pre ? extra_pre : "false");
    for (unsigned b = 0; b < 256; b++) {
        char ch[4];
        size_t l = put_utf8(byte_char(b), ch);
        json[n++] = '"';
        if (ch[0] == '"' || ch[0] == '\\')
            json[n++] = '\\';
        memcpy(json + n, ch, l);
        n += l;
        n += (size_t)snprintf(json + n, cap - n, "\": %u, ", b);
    }
    n += (size_t)snprintf(json + n, cap - n, "\"12\": 256, \"123\": 257, \"34\": 258, \"45\": "
                          "259, \"\xC4\xA0" "a\": 260}, \"merges\": [\"3 4\", \"1 2\", \"12 3\", "
                          "\"4 5\", \"\xC4\xA0 a\"]}}");
    pe_tokenizer *t = must_load(json);
    free(json);
    return t;
}

static void test_split_regex_from_the_file_decides_the_words(void **state)
{
    (void)state;
    pe_tokenizer *t = bytelevel_tok(NULL, NULL);
    EXPECT(t, "12345", 0, 256, 258, 53); /* one word: 34 ranks first */
    pe_tokenizer_free(t);
    t = bytelevel_tok("\\\\p{N}{1,3}", NULL);
    EXPECT(t, "12345", 0, 257, 259);     /* Llama 3's digit groups: 123 | 45 */
    pe_tokenizer_free(t);
    t = bytelevel_tok(NULL, "true");     /* ByteLevel's own GPT-2 regex */
    EXPECT(t, "a a", 0, 97, 260);
    pe_tokenizer_free(t);
}

/* Split on " " with each delimiter behaviour: a 0, " " 1, "a " 2, " a" 3, "  " 5. */
static pe_tokenizer *split_tok(const char *behavior, int invert)
{
    char json[2048];
    snprintf(json, sizeof json, "{\"added_tokens\": [], \"normalizer\": null, "
             "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
             "\"behavior\": \"%s\", \"invert\": %s}, \"post_processor\": null, \"decoder\": "
             "null, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \" \": 1, \"a \": 2, "
             "\" a\": 3, \"  \": 5}, \"merges\": [[\"a\", \" \"], [\" \", \"a\"], "
             "[\" \", \" \"]]}}", behavior, invert ? "true" : "false");
    return must_load(json);
}

static void test_split_behaviours_cut_words_as_hugging_face(void **state)
{
    (void)state;
    /* as one word "a a" would be: (a, " ") ranks first -> "a " a */
    pe_tokenizer *t = split_tok("Isolated", 0);
    EXPECT(t, "a a", 0, 0, 1, 0);
    EXPECT(t, "a  a", 0, 0, 1, 1, 0);
    pe_tokenizer_free(t);
    t = split_tok("Removed", 0);
    EXPECT(t, "a a", 0, 0, 0);
    pe_tokenizer_free(t);
    t = split_tok("MergedWithPrevious", 0);
    EXPECT(t, "a a", 0, 2, 0);
    pe_tokenizer_free(t);
    t = split_tok("MergedWithNext", 0);
    EXPECT(t, "a a", 0, 0, 3);
    pe_tokenizer_free(t);
    t = split_tok("Contiguous", 0);
    EXPECT(t, "a  a", 0, 0, 5, 0);
    pe_tokenizer_free(t);
    /* inverted: the text between spaces is what is removed; each space stays its own piece */
    t = split_tok("Removed", 1);
    EXPECT(t, "a  a", 0, 1, 1);
    pe_tokenizer_free(t);
}

static void test_invalid_utf8_is_encoded_by_its_bytes(void **state)
{
    (void)state;
    pe_tokenizer *t = bytelevel_tok("\\\\p{N}{1,3}", NULL);
    const char bad[] = "1\xFF" "2\xE6\x97" "3";
    const int32_t want[] = {49, 255, 50, 0xE6, 0x97, 51};
    expect_ids(t, bad, sizeof bad - 1, 0, want, 6);
    expect_decode(t, want, 6, 0, "1\xEF\xBF\xBD" "2\xEF\xBF\xBD" "3"); /* as from_utf8_lossy */
    pe_tokenizer_free(t);
    /* byte fallback: <0xFF> for the lone byte */
    t = char_bpe(g_fallback_vocab, "", ", \"unk_token\": \"<unk>\", \"byte_fallback\": true");
    const int32_t want2[] = {4, 5, 4};
    expect_ids(t, "a\xFF" "a", 3, 0, want2, 3);
    pe_tokenizer_free(t);
}

/* ---- SentencePiece style: Metaspace, byte fallback decode, post-processor ------------------------- */

static const char *g_spm =
    "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"lstrip\": false, "
    "\"rstrip\": false, \"normalized\": false, \"single_word\": false}, {\"id\": 2, \"content\": "
    "\"</s>\", \"special\": true, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
    "\"single_word\": false}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
    "\"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"first\", \"split\": false}, "
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
    "{\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
    "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": "
    "{\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}, \"</s>\": {\"id\": \"</s>\", "
    "\"ids\": [2], \"tokens\": [\"</s>\"]}}}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": "
    "[{\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": "
    "\"first\"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}, \"model\": {\"type\": "
    "\"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true, \"vocab\": "
    "{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"\xE2\x96\x81\": 3, \"h\": 4, \"i\": 5, "
    "\"\xE2\x96\x81h\": 6, \"\xE2\x96\x81hi\": 7, \"<0xF0>\": 8, \"<0x9F>\": 9, \"<0x98>\": 10, "
    "\"<0x80>\": 11}, \"merges\": [\"\xE2\x96\x81 h\", \"\xE2\x96\x81h i\"]}}";

static void test_metaspace_prepends_on_the_first_word_and_decodes_back(void **state)
{
    (void)state;
    pe_tokenizer *t = must_load(g_spm);
    EXPECT(t, "hi hi", 0, 7, 7);
    EXPECT(t, "hi hi", 1, 1, 7, 7, 2);
    /* after a special token the text does not start the input: no ▁ ("first") */
    EXPECT(t, "<s>hi", 0, 1, 4, 5);
    const int32_t ids[] = {1, 7, 7, 2};
    expect_decode(t, ids, 4, 1, "hi hi");
    expect_decode(t, ids, 4, 0, "<s> hi hi</s>");
    /* 😀 is F0 9F 98 80: four byte tokens, decoded as one character */
    EXPECT(t, "hi\xF0\x9F\x98\x80", 0, 7, 8, 9, 10, 11);
    const int32_t emoji[] = {7, 8, 9, 10, 11};
    expect_decode(t, emoji, 5, 0, "hi\xF0\x9F\x98\x80");
    pe_tokenizer_free(t);
}

static void test_streaming_holds_a_character_until_its_last_byte(void **state)
{
    (void)state;
    pe_tokenizer *t = must_load(g_spm);
    pe_detokenizer *d;
    assert_int_equal(pe_detokenizer_create(t, 1, &d), PE_OK);
    const char *text;
    size_t len;
    assert_int_equal(pe_detokenizer_push(d, 7, &text, &len), PE_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(text, "hi", 2);
    for (int32_t id = 8; id <= 10; id++) { /* the first three bytes of 😀: nothing yet */
        assert_int_equal(pe_detokenizer_push(d, id, &text, &len), PE_OK);
        assert_int_equal(len, 0);
    }
    assert_int_equal(pe_detokenizer_push(d, 11, &text, &len), PE_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(text, "\xF0\x9F\x98\x80", 4);
    assert_int_equal(pe_detokenizer_push(d, 7, &text, &len), PE_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(text, " hi", 3);
    /* a character cut short: flush gives U+FFFD */
    assert_int_equal(pe_detokenizer_push(d, 8, &text, &len), PE_OK);
    assert_int_equal(len, 0);
    assert_int_equal(pe_detokenizer_flush(d, &text, &len), PE_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(text, "\xEF\xBF\xBD", 3);
    assert_int_equal(pe_detokenizer_push(d, 99, &text, &len), PE_EINVAL);
    pe_detokenizer_free(d);
    pe_tokenizer_free(t);
}

/* g_spm's decoders over a vocabulary of "hi", "h", "i" and the 256 byte tokens (<0xNN>: id
 * 8 + NN). */
static pe_tokenizer *load_bytes_spm(void)
{
    static char json[16384];
    int n = snprintf(json, sizeof json, "%.*s", (int)(strstr(g_spm, "\"<0xF0>\"") - g_spm),
                     g_spm);
    for (int b = 0; b < 256; b++)
        n += snprintf(json + n, sizeof json - (size_t)n, "%s\"<0x%02X>\": %d", b ? ", " : "",
                      b, 8 + b);
    snprintf(json + n, sizeof json - (size_t)n, "}, \"merges\": [\"\xE2\x96\x81 h\", "
             "\"\xE2\x96\x81h i\"]}}");
    return must_load(json);
}

/* Streams ids through a detokenizer and returns all it released (pushes and the flush). */
static size_t stream_all(const pe_tokenizer *t, const int32_t *ids, size_t n, char *out,
                         size_t cap)
{
    pe_detokenizer *d;
    assert_int_equal(pe_detokenizer_create(t, 1, &d), PE_OK);
    size_t got = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *text;
        size_t len;
        if (i < n)
            assert_int_equal(pe_detokenizer_push(d, ids[i], &text, &len), PE_OK);
        else
            assert_int_equal(pe_detokenizer_flush(d, &text, &len), PE_OK);
        assert_true(got + len <= cap);
        memcpy(out + got, text, len);
        got += len;
    }
    pe_detokenizer_free(d);
    return got;
}

/* Streams ids and checks that the text released is their full decode; returns its length. */
static size_t expect_stream_is_decode(const pe_tokenizer *t, const int32_t *ids, size_t n,
                                      char *out, size_t cap)
{
    size_t got = stream_all(t, ids, n, out, cap);
    char *text;
    size_t len;
    assert_int_equal(pe_tokenizer_decode(t, ids, n, 1, &text, &len), PE_OK);
    assert_int_equal(got, len);
    assert_memory_equal(out, text, len);
    free(text);
    return got;
}

static int valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] >> 6) != 2)
                return 0;
        i += k;
    }
    return 1;
}

/* Whole characters in any mix of byte tokens and word tokens stream as the full decode
 * gives them. Bytes that make a run invalid never take back or repeat released text:
 * "짧" (EC A7 A7) released, then two stray A7 give one U+FFFD each, where the full decode
 * gives the whole invalid run as 5 U+FFFD (Hugging Face's ByteFallback); three D4 (each
 * the start of a character that never comes) stream as the full decode, 3 U+FFFD. Random
 * bytes stream as valid UTF-8, never longer than the full decode. Long invalid runs stream
 * in short windows (before, each push decoded all the run since the last release), and
 * skipped special tokens never enter the window. */
static void test_streaming_never_takes_back_or_repeats_text(void **state)
{
    (void)state;
    pe_tokenizer *t = load_bytes_spm();
    static char got[1 << 16];
    const int32_t jjap[] = {8 + 0xEC, 8 + 0xA7, 8 + 0xA7, 8 + 0xA7, 8 + 0xA7};
    size_t n = stream_all(t, jjap, 5, got, sizeof got);
    assert_int_equal(n, 9);
    assert_memory_equal(got, "\xEC\xA7\xA7\xEF\xBF\xBD\xEF\xBF\xBD", 9);
    expect_decode(t, jjap, 5, 1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    const int32_t d4[] = {8 + 0xD4, 8 + 0xD4, 8 + 0xD4};
    n = stream_all(t, d4, 3, got, sizeof got);
    assert_int_equal(n, 9);
    assert_memory_equal(got, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 9);
    expect_decode(t, d4, 3, 1, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    /* an invalid run as long as its text with U+FFFD (F1 84 8F, a character cut short, is 3
     * bytes, as U+FFFD is) is still invalid: one U+FFFD a byte, never the raw bytes */
    const int32_t cut[] = {8 + 0xF1, 8 + 0x84, 8 + 0x8F, 8 + 0x5E};
    expect_decode(t, cut, 4, 1,
                  "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    enum { LONG = 4000 };
    static int32_t ids[LONG];
    for (int lead = 0; lead < 2; lead++) { /* EC A7 A7 then A7s; D4s */
        for (int i = 0; i < LONG; i++)
            ids[i] = 8 + (lead ? 0xD4 : i == 0 ? 0xEC : 0xA7);
        n = stream_all(t, ids, LONG, got, sizeof got);
        size_t fffd = lead ? LONG : LONG - 3;
        assert_int_equal(n, 3 * fffd + (lead ? 0 : 3));
        for (size_t i = lead ? 0 : 3; i < n; i += 3)
            assert_memory_equal(got + i, "\xEF\xBF\xBD", 3);
    }
    /* skipped special tokens, many in a row, then words: the decode drops them, and so does
     * the stream (its window would otherwise grow with each) */
    for (int i = 0; i < LONG; i++)
        ids[i] = i < LONG - 2 ? 1 : 7;
    n = expect_stream_is_decode(t, ids, LONG, got, sizeof got);
    assert_int_equal(n, 5);
    assert_memory_equal(got, "hi hi", 5);
    /* whole characters: the stream is the full decode */
    static const char *const chars[] = {"a", "\xC3\xA9", "\xE2\x82\xAC", "\xEC\xA7\xA7",
                                        "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"};
    unsigned seed = 7;
    for (int round = 0; round < 300; round++) {
        size_t m = 0;
        int units = (int)(rand_r(&seed) % 24);
        for (int u = 0; u < units; u++) {
            unsigned r = (unsigned)rand_r(&seed) % 9;
            if (r < 3) {
                ids[m++] = r < 2 ? 7 : 4; /* "▁hi", "h" */
                continue;
            }
            const char *c = chars[r - 3];
            for (size_t k = 0; k < strlen(c); k++)
                ids[m++] = 8 + (unsigned char)c[k];
        }
        expect_stream_is_decode(t, ids, m, got, sizeof got);
    }
    /* random bytes and words: valid UTF-8, never more than the full decode */
    for (int round = 0; round < 300; round++) {
        size_t m = (size_t)(rand_r(&seed) % 40);
        for (size_t i = 0; i < m; i++) {
            unsigned r = (unsigned)rand_r(&seed) % 20;
            ids[i] = r == 0 ? 7 : r == 1 ? 4 : (int32_t)(8 + rand_r(&seed) % 256);
        }
        n = stream_all(t, ids, m, got, sizeof got);
        char *text;
        size_t len;
        assert_int_equal(pe_tokenizer_decode(t, ids, m, 1, &text, &len), PE_OK);
        if (!valid_utf8(got, n) || n > len) {
            print_message("ids:");
            for (size_t i = 0; i < m; i++)
                print_message(" %d", ids[i]);
            print_message("\nstream %zu:", n);
            for (size_t i = 0; i < n; i++)
                print_message(" %02X", (unsigned char)got[i]);
            print_message("\ndecode %zu:", len);
            for (size_t i = 0; i < len; i++)
                print_message(" %02X", (unsigned char)text[i]);
            print_message("\n");
        }
        assert_true(valid_utf8(got, n));
        assert_true(n <= len);
        free(text);
    }
    pe_tokenizer_free(t);
}

static void test_vocabulary_lookups_and_bad_ids(void **state)
{
    (void)state;
    pe_tokenizer *t = must_load(g_spm);
    assert_int_equal(pe_tokenizer_vocab_size(t), 12);
    assert_int_equal(pe_tokenizer_token_id(t, "</s>"), 2);
    assert_int_equal(pe_tokenizer_token_id(t, "\xE2\x96\x81hi"), 7);
    assert_int_equal(pe_tokenizer_token_id(t, "nope"), -1);
    const int32_t bad[] = {7, 12};
    char *text = (char *)1;
    size_t len;
    assert_int_equal(pe_tokenizer_decode(t, bad, 2, 0, &text, &len), PE_EINVAL);
    assert_null(text);
    assert_non_null(strstr(pe_last_error(), "12"));
    pe_tokenizer_free(t);
}

/* token_bytes(id) must be exactly want (n bytes). */
static void expect_token_bytes(const pe_tokenizer *t, int32_t id, const char *want, size_t n)
{
    char *b = NULL;
    size_t len = 0;
    assert_int_equal(pe_tokenizer_token_bytes(t, id, &b, &len), PE_OK);
    assert_int_equal(len, n);
    assert_memory_equal(b, want, n);
    assert_int_equal(b[len], '\0');
    free(b);
}

/* A token's bytes alone are decode([id]) but for the bytes of a partial character, which
 * come as they are (decode gives U+FFFD). */
static void test_token_bytes_give_a_partial_character_as_its_bytes(void **state)
{
    (void)state;
    pe_tokenizer *t = must_load(g_spm);
    expect_token_bytes(t, 7, "hi", 2);              /* ▁hi: the first token drops its space */
    expect_token_bytes(t, 8, "\xF0", 1);            /* <0xF0>: decode gives U+FFFD */
    expect_decode(t, (const int32_t[]){8}, 1, 0, "\xEF\xBF\xBD");
    expect_token_bytes(t, 2, "</s>", 4);            /* special tokens are shown */
    char *b = (char *)1;
    size_t len = 1;
    assert_int_equal(pe_tokenizer_token_bytes(t, 12, &b, &len), PE_EINVAL);
    assert_null(b);
    assert_int_equal(len, 0);
    assert_non_null(strstr(pe_last_error(), "12"));
    assert_int_equal(pe_tokenizer_token_bytes(t, 7, NULL, &len), PE_EINVAL);
    pe_tokenizer_free(t);
    /* byte level: the symbols of E6 97 (part of 日) and of "1" */
    t = bytelevel_tok("\\\\p{N}{1,3}", NULL);
    expect_token_bytes(t, 0xE6, "\xE6", 1);
    expect_token_bytes(t, 49, "1", 1);
    pe_tokenizer_free(t);
}

/* ---- GPT-2's vocab.json + merges.txt ------------------------------------------------------------ */

static void test_vocab_json_and_merges_txt_load_as_gpt2(void **state)
{
    (void)state;
    char dir[512], p[600];
    tu_temp_path(dir, sizeof dir, "gpt2dir");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"h\": 0, \"i\": 1, \"\xC4\xA0\": 2, \"hi\": 3, \"\xC4\xA0hi\": 4, "
          "\"<|endoftext|>\": 5, \"<\": 6, \"|\": 7}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    f = fopen(p, "w");
    fputs("#version: 0.2\nh i\n\xC4\xA0 hi\n", f);
    fclose(f);
    pe_tokenizer *t;
    assert_int_equal(pe_tokenizer_load(dir, &t), PE_OK);
    EXPECT(t, "hi hi<|endoftext|>", 0, 3, 4, 5);
    const int32_t ids[] = {3, 4, 5};
    expect_decode(t, ids, 3, 0, "hi hi<|endoftext|>");
    expect_decode(t, ids, 3, 1, "hi hi");
    pe_tokenizer_free(t);
    unlink(p);
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    unlink(p);
    rmdir(dir);
}

/* ---- errors --------------------------------------------------------------------------------------- */

static void expect_error(const char *json, pe_status want, const char *const *subs)
{
    pe_tokenizer *t = (pe_tokenizer *)1;
    pe_status s = load_json(json, &t);
    assert_int_equal(s, want);
    assert_null(t);
    for (; *subs; subs++) {
        if (!strstr(pe_last_error(), *subs))
            print_message("missing '%s' in: %s\n", *subs, pe_last_error());
        assert_non_null(strstr(pe_last_error(), *subs));
    }
}

#define EXPECT_ERROR(json, status, ...)                                                        \
    expect_error(json, status, (const char *const[]){__VA_ARGS__, NULL})

static void test_unsupported_or_malformed_files_fail_naming_the_part(void **state)
{
    (void)state;
    EXPECT_ERROR("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", PE_EFORMAT,
                 "model.type", "WordPiece", "BPE");
    EXPECT_ERROR("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", PE_EFORMAT,
                 "model.type", "Unigram");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
                 PE_EFORMAT, "merge 0", "\"b\"");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                 "\"normalizer\": {\"type\": \"Lowercase\"}}", PE_EFORMAT, "normalizer",
                 "Lowercase");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                 "\"behavior\": \"Isolated\"}}", PE_EFORMAT, "pre_tokenizer(Split).pattern");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}",
                 PE_EFORMAT, "model.vocab", "\"a\"");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                 "\"decoder\": {\"type\": \"WordPiece\"}}", PE_EFORMAT, "decoder", "WordPiece");
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", PE_EFORMAT,
                 "not valid JSON");
    EXPECT_ERROR("[1, 2]", PE_EFORMAT, "top level");
    /* an id that would make the id tables gigabytes long (found by fuzzing) */
    EXPECT_ERROR("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, "
                 "\"merges\": []}}", PE_EFORMAT, "token id 2000000000", "\"a\"", "16777215");
    /* a raw byte that is not UTF-8 in a string (a Replace pattern that would cut characters) */
    EXPECT_ERROR("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": "
                 "\"\xFF\"}, \"content\": \"\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                 "{\"a\": 0}, \"merges\": []}}", PE_EFORMAT, "not UTF-8", "offset 58");
    /* the empty token is a token like any other */
    pe_tokenizer *e = must_load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\": 0, "
                                "\"a\": 1}, \"merges\": []}}");
    assert_int_equal(pe_tokenizer_token_id(e, ""), 0);
    assert_int_equal(pe_tokenizer_token_id(e, "a"), 1);
    pe_tokenizer_free(e);
    pe_tokenizer *t = (pe_tokenizer *)1;
    assert_int_equal(pe_tokenizer_load("/nonexistent/tokenizer.json", &t), PE_EIO);
    assert_null(t);
    assert_non_null(strstr(pe_last_error(), "/nonexistent/tokenizer.json"));
    char dir[512];
    tu_temp_path(dir, sizeof dir, "emptydir");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(pe_tokenizer_load(dir, &t), PE_EIO);
    assert_non_null(strstr(pe_last_error(), "tokenizer.json"));
    rmdir(dir);
}

/* ---- threads ---------------------------------------------------------------------------------------- */

typedef struct worker_arg {
    const pe_tokenizer *t;
    int id, iters, bad;
} worker_arg;

static const char *g_texts[] = {"12345 678 90", "a a a 1234", "\xE6\x97\xA5 31 4159",
                                "999 a 12 a a"};

static void *worker(void *p)
{
    worker_arg *a = p;
    for (int it = 0; it < a->iters; it++) {
        const char *s = g_texts[(a->id + it) % 4];
        int32_t *ids;
        size_t n, len;
        char *text;
        if (pe_tokenizer_encode(a->t, s, strlen(s), 0, &ids, &n) != PE_OK) {
            a->bad++;
            continue;
        }
        if (pe_tokenizer_decode(a->t, ids, n, 0, &text, &len) != PE_OK || strcmp(text, s) != 0)
            a->bad++;
        else
            free(text);
        free(ids);
    }
    return NULL;
}

static void test_threads_share_one_tokenizer(void **state)
{
    (void)state;
    pe_tokenizer *t = bytelevel_tok("\\\\p{N}{1,3}| ?[a-z]+|\\\\s+", NULL);
    enum { NT = 4 };
    pthread_t th[NT];
    worker_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (worker_arg){t, i, (int)tu_size(2000, 20), 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    pe_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_apply_lowest_rank_first),
        cmocka_unit_test(test_equal_ranks_merge_leftmost_first),
        cmocka_unit_test(test_ignore_merges_takes_whole_words_from_the_vocabulary),
        cmocka_unit_test(test_byte_fallback_spells_unknown_characters_in_bytes),
        cmocka_unit_test(test_fuse_unk_joins_consecutive_unknowns),
        cmocka_unit_test(test_added_tokens_split_out_with_lstrip_and_rstrip),
        cmocka_unit_test(test_single_word_added_tokens_match_whole_words_only),
        cmocka_unit_test(test_nfc_composes_before_the_model_and_normalized_added_tokens),
        cmocka_unit_test(test_split_regex_from_the_file_decides_the_words),
        cmocka_unit_test(test_split_behaviours_cut_words_as_hugging_face),
        cmocka_unit_test(test_invalid_utf8_is_encoded_by_its_bytes),
        cmocka_unit_test(test_metaspace_prepends_on_the_first_word_and_decodes_back),
        cmocka_unit_test(test_streaming_holds_a_character_until_its_last_byte),
        cmocka_unit_test(test_streaming_never_takes_back_or_repeats_text),
        cmocka_unit_test(test_vocabulary_lookups_and_bad_ids),
        cmocka_unit_test(test_token_bytes_give_a_partial_character_as_its_bytes),
        cmocka_unit_test(test_vocab_json_and_merges_txt_load_as_gpt2),
        cmocka_unit_test(test_unsupported_or_malformed_files_fail_naming_the_part),
        cmocka_unit_test(test_threads_share_one_tokenizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
