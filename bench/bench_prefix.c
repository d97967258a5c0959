/* bench_prefix.c: sequences that arrive together with one prompt prefix, with the prefix
 * cache (a sequence whose next block another one is computing waits for it, then starts
 * from it) against without (each computes the whole prompt), side by side in one run.
 *
 *   bench_prefix [--quick] [--json FILE] [--model DIR] [--threads N]
 *
 * Model: DIR, or the llama-110m shape in fp32 written (seeded) into a temporary folder.
 * One host device with its cores. Workloads, B = 8 sequences submitted at once, G = 8
 * tokens each (greedy, eos ignored), prompts drawn afresh for every run (no run finds
 * another's blocks):
 *   - "n 8":           one prompt of T = 512 tokens, 8 times (OpenAI's n);
 *   - "system prompt": 448 shared tokens, then 64 of each sequence's own;
 *   - "distinct":      8 prompts of 512 tokens that share nothing (the waiting rule must
 *                      cost nothing there).
 * Each workload runs with pe_config.prefix_caching on and off in turn, --trials times
 * (3; 1 with --quick, on T = 128). Figures: the time until every sequence has its first
 * token and until all have ended (medians), the prompt positions found in the cache, and
 * the ratios off / on. Before the waiting rule, sequences that arrived together found
 * nothing in the cache (each computed its prompt, as with the cache off).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_decoder.h"
#include "bench_util.h"

enum { B = 8, G = 8, MAX_TRIALS = 9 };

static pe_engine *open_engine(const char *dir, int caching, int threads, int T)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.threads = threads;
    cfg.prefix_caching = caching;
    cfg.kv_tokens = (size_t)(B * (T + G) * 2); /* no preemption: the pool holds every run */
    return bd_host_engine(dir, &cfg);
}

typedef enum workload { W_SAME, W_SYSTEM, W_DISTINCT, NWORKLOADS } workload;
static const char *const workload_names[NWORKLOADS] = {"n 8", "system prompt", "distinct"};

/* Sequence i's prompt (T tokens) of workload w in run `run`: ids below vocab, fresh per run. */
static void make_prompt(int32_t *p, int T, workload w, int i, int run, int vocab)
{
    const int shared = w == W_SAME ? T : w == W_SYSTEM ? T - T / 8 : 0;
    for (int k = 0; k < T; k++) {
        uint64_t s = (uint64_t)run * 1000003u + (uint64_t)k * 7919u +
                     (k < shared ? 0 : (uint64_t)(i + 1) * 104729u);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[k] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

typedef struct result {
    double first_ms, end_ms; /* from the submits to every first token, and to every end */
    long hits;               /* prompt positions found in the cache */
} result;

/* One run of workload w: B sequences submitted at once, every event taken. */
static int run_once(pe_engine *e, workload w, int T, int run, int vocab, result *r)
{
    memset(r, 0, sizeof *r);
    pe_engine_info before, after;
    pe_engine_info_get(e, &before);
    int32_t *prompt = malloc((size_t)T * sizeof *prompt);
    if (!prompt)
        return -1;
    const double t0 = bd_now_ms();
    for (int i = 0; i < B; i++) {
        make_prompt(prompt, T, w, i, run, vocab);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = (size_t)T;
        p.max_tokens = G;
        p.ignore_eos = 1;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            free(prompt);
            return -1;
        }
    }
    free(prompt);
    int firsts = 0, ends = 0, seen[B] = {0};
    uint64_t ids[B];
    int nids = 0;
    while (ends < B) {
        pe_token_event ev;
        if (pe_seq_wait(e, &ev) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return -1;
        }
        int k = 0;
        while (k < nids && ids[k] != ev.seq)
            k++;
        if (k == nids)
            ids[nids++] = ev.seq;
        if (ev.token >= 0 && !seen[k]++ && ++firsts == B)
            r->first_ms = bd_now_ms() - t0;
        if (ev.finish != PE_FINISH_NONE) {
            if (ev.finish != PE_FINISH_LENGTH) {
                fprintf(stderr, "error: a sequence ended with finish %d\n", (int)ev.finish);
                return -1;
            }
            ends++;
        }
    }
    r->end_ms = bd_now_ms() - t0;
    pe_engine_info_get(e, &after);
    r->hits = after.prefix_hit_tokens - before.prefix_hit_tokens;
    return 0;
}

int main(int argc, char **argv)
{
    bu_args a;
    bu_parse_args(argc, argv, &a);
    const char *model_dir = NULL;
    int threads = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--model"))
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
    }
    const int T = a.quick ? 128 : 512, trials = a.quick ? 1 : 3;
    char tmp[512] = "";
    if (!model_dir) {
        if (bd_write_preset(PE_GEN_LLAMA, "llama-110m", 7, "bench_prefix", tmp, sizeof tmp))
            return 1;
        model_dir = tmp;
    }
    pe_engine *eng[2] = {open_engine(model_dir, 0, threads, T),
                         open_engine(model_dir, 1, threads, T)};
    int rc = 1;
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "workloads");
    if (!eng[0] || !eng[1])
        goto out;
    pe_model_info mi;
    pe_engine_model_info(eng[0], &mi);
    pe_engine_info info;
    pe_engine_info_get(eng[0], &info);
    printf("bench_prefix: %s, %d sequences of %d prompt tokens submitted at once, %d tokens "
           "each; 1 host device, %d threads; %d trials, cache off and on in turn\n\n",
           model_dir, B, T, G, info.threads[0], trials);
    printf("| workload | first tokens, off / on (ms) | all ended, off / on (ms) | positions found "
           "(on) | first: off / on | ended: off / on |\n| --- | --- | --- | --- | --- | --- |\n");
    int run = 1;
    for (int w = 0; w < NWORKLOADS; w++) {
        double first[2][MAX_TRIALS], end[2][MAX_TRIALS];
        long hits = 0;
        for (int t = 0; t < trials; t++)
            for (int c = 0; c < 2; c++) {
                result r;
                if (run_once(eng[c], (workload)w, T, run++, mi.vocab, &r) != 0)
                    goto out;
                first[c][t] = r.first_ms;
                end[c][t] = r.end_ms;
                if (c == 1)
                    hits = r.hits;
                else if (r.hits != 0) {
                    fprintf(stderr, "error: the cache is off but %ld positions were found\n",
                            r.hits);
                    goto out;
                }
            }
        double f0 = bu_median(first[0], (size_t)trials), f1 = bu_median(first[1], (size_t)trials);
        double e0 = bu_median(end[0], (size_t)trials), e1 = bu_median(end[1], (size_t)trials);
        printf("| %s | %.0f / %.0f | %.0f / %.0f | %ld | %.2fx | %.2fx |\n", workload_names[w], f0,
               f1, e0, e1, hits, f0 / f1, e0 / e1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "workload", workload_names[w]);
        cJSON_AddNumberToObject(o, "first_ms_off", f0);
        cJSON_AddNumberToObject(o, "first_ms_on", f1);
        cJSON_AddNumberToObject(o, "end_ms_off", e0);
        cJSON_AddNumberToObject(o, "end_ms_on", e1);
        cJSON_AddNumberToObject(o, "positions_found", (double)hits);
        cJSON_AddItemToArray(rows, o);
    }
    printf("\n(positions found: of the last trial with the cache on; a sequence finds at most "
           "the whole blocks before its last prompt token)\n");
    rc = a.json_path && bu_write_json(root, a.json_path) != 0 ? 1 : 0;
out:
    cJSON_Delete(root);
    pe_engine_destroy(eng[0]);
    pe_engine_destroy(eng[1]);
    if (tmp[0])
        bu_remove_dir(tmp);
    return rc;
}
