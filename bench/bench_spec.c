/* bench_spec.c: speculative decoding by prompt lookup (pe_config.spec_tokens) against plain
 * decoding, side by side in one run.
 *
 *   bench_spec [--quick] [--json FILE] [--model DIR] [--threads N] [--spec-tokens K]
 *
 * Model: DIR, or the llama-110m shape in fp32 written (seeded) into a temporary folder.
 * One host device with its cores. Each workload submits B sequences at once, with prompts
 * of 32 random tokens drawn afresh for every run (no run finds another's blocks), and G
 * tokens each (eos ignored):
 *   - "greedy, 1":    B = 1, greedy: one sequence's latency;
 *   - "greedy, 8":    B = 8, greedy: a batch, whose decodes carry drafts side by side;
 *   - "sampled, 8":   B = 8, temperature 1 (seeded): drafts nearly all miss, so this is
 *                     what drafting costs when it gains nothing.
 * Each workload runs with spec_tokens K (4) and 0 in turn, --trials times (3; 1 with
 * --quick, G 32 instead of 128). Figures: generated tokens per second of wall time from the
 * submits to the last end (medians), the ratio on / off, and the drafts accepted. The
 * tokens of both runs must be the same (drafts never change a token): the bench fails if
 * they are not.
 *
 * What the figures mean: a random model's greedy answers fall into loops (llama-110m's soon
 * repeat one token), which drafts predict; a trained model's text repeats itself less, so
 * the greedy rows here are an upper end, and the acceptance printed beside each ratio is
 * what it stands on.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_decoder.h"
#include "bench_util.h"

enum { MAXB = 8, T = 32, MAX_G = 128, MAX_TRIALS = 9 };

static pe_engine *open_engine(const char *dir, int spec_tokens, int threads)
{
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.threads = threads;
    cfg.spec_tokens = spec_tokens;
    cfg.kv_tokens = (size_t)(MAXB * (T + MAX_G) * 2); /* no preemption */
    return bd_host_engine(dir, &cfg);
}

typedef struct workload {
    const char *name;
    int B;
    float temperature;
} workload;
static const workload workloads[] = {
    {"greedy, 1", 1, 0.0f}, {"greedy, 2", 2, 0.0f}, {"greedy, 4", 4, 0.0f},
    {"greedy, 8", 8, 0.0f}, {"sampled, 8", 8, 1.0f}};
#define NWORKLOADS (sizeof workloads / sizeof workloads[0])

typedef struct result {
    double ms;                     /* from the submits to the last end */
    long drafted, accepted;        /* the engine's counts over the run */
    int32_t tok[MAXB][MAX_G];      /* each sequence's tokens, by submit order */
} result;

/* One run of workload w: its B sequences submitted at once, every event taken. */
static int run_once(pe_engine *e, const workload *w, int G, int run, int vocab, result *r)
{
    memset(r, 0, sizeof *r);
    pe_engine_info before, after;
    pe_engine_info_get(e, &before);
    uint64_t ids[MAXB];
    const double t0 = bd_now_ms();
    for (int i = 0; i < w->B; i++) {
        int32_t prompt[T];
        bd_random_prompt(prompt, T, run, i, vocab);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = T;
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.sampling.temperature = w->temperature;
        p.sampling.seed = 11 + (uint64_t)i;
        if (pe_seq_submit(e, &p, &ids[i]) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return -1;
        }
    }
    int ends = 0, n[MAXB] = {0};
    while (ends < w->B) {
        pe_token_event ev;
        if (pe_seq_wait(e, &ev) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return -1;
        }
        int i = 0;
        while (i < w->B && ids[i] != ev.seq)
            i++;
        if (i == w->B || (ev.finish != PE_FINISH_NONE && ev.finish != PE_FINISH_LENGTH)) {
            fprintf(stderr, "error: an event of another sequence, or finish %d\n",
                    (int)ev.finish);
            return -1;
        }
        if (ev.token >= 0 && n[i] < MAX_G)
            r->tok[i][n[i]++] = ev.token;
        ends += ev.finish != PE_FINISH_NONE;
    }
    r->ms = bd_now_ms() - t0;
    pe_engine_info_get(e, &after);
    r->drafted = after.spec_drafted_tokens - before.spec_drafted_tokens;
    r->accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
    return 0;
}

int main(int argc, char **argv)
{
    bu_args a;
    bu_parse_args(argc, argv, &a);
    const char *model_dir = NULL;
    int threads = 0, K = 4;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--model"))
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spec-tokens"))
            K = atoi(argv[++i]);
    }
    const int G = a.quick ? 32 : MAX_G, trials = a.quick ? 1 : 3;
    char tmp[512] = "";
    if (!model_dir) {
        if (bd_write_preset(PE_GEN_LLAMA, "llama-110m", 7, "bench_spec", tmp, sizeof tmp))
            return 1;
        model_dir = tmp;
    }
    pe_engine *eng[2] = {open_engine(model_dir, 0, threads), open_engine(model_dir, K, threads)};
    static result r[2];
    int rc = 1;
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "workloads");
    if (!eng[0] || !eng[1])
        goto out;
    pe_model_info mi;
    pe_engine_model_info(eng[0], &mi);
    pe_engine_info info;
    pe_engine_info_get(eng[0], &info);
    printf("bench_spec: %s, prompts of %d tokens, %d tokens each; 1 host device, %d threads; "
           "%d trials, %d drafts a decode and none in turn\n\n",
           model_dir, T, G, info.threads[0], trials, K);
    printf("| workload | tok/s, no drafts / drafts | drafts / no drafts | drafts accepted |\n"
           "| --- | --- | --- | --- |\n");
    int run = 1;
    for (size_t w = 0; w < NWORKLOADS; w++) {
        double tps[2][MAX_TRIALS];
        long drafted = 0, accepted = 0;
        for (int t = 0; t < trials; t++, run++) {
            for (int c = 0; c < 2; c++) {
                if (run_once(eng[c], &workloads[w], G, run, mi.vocab, &r[c]) != 0)
                    goto out;
                tps[c][t] = (double)(workloads[w].B * G) / (r[c].ms / 1e3);
            }
            if (memcmp(r[0].tok, r[1].tok, sizeof r[0].tok)) {
                fprintf(stderr, "error: %s: drafts changed the tokens\n", workloads[w].name);
                goto out;
            }
            drafted += r[1].drafted;
            accepted += r[1].accepted;
        }
        const double off = bu_median(tps[0], (size_t)trials);
        const double on = bu_median(tps[1], (size_t)trials);
        const double rate = drafted ? (double)accepted / (double)drafted : 0.0;
        printf("| %s | %.1f / %.1f | %.2fx | %ld of %ld (%.0f%%) |\n", workloads[w].name, off,
               on, on / off, accepted, drafted, 100.0 * rate);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "workload", workloads[w].name);
        cJSON_AddNumberToObject(o, "tok_s_off", off);
        cJSON_AddNumberToObject(o, "tok_s_on", on);
        cJSON_AddNumberToObject(o, "ratio", on / off);
        cJSON_AddNumberToObject(o, "drafted", (double)drafted);
        cJSON_AddNumberToObject(o, "accepted", (double)accepted);
        cJSON_AddItemToArray(rows, o);
    }
    printf("\n(tokens: the same with and without drafts in every run, checked)\n");
    rc = a.json_path && bu_write_json(root, a.json_path) != 0 ? 1 : 0;
out:
    cJSON_Delete(root);
    pe_engine_destroy(eng[0]);
    pe_engine_destroy(eng[1]);
    if (tmp[0])
        bu_remove_dir(tmp);
    return rc;
}
