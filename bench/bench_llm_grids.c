/* bench_llm_grids.c: a decoder on grids of host devices against one device, side by side.
 *
 *   bench_llm_grids [--quick] [--json FILE] [--model DIR] [--trials N]
 *
 * Each host device computes with one core (--threads 1 for every worker), as each GPU has
 * its own SMs: one device is one core, tp 2 and dp 2 are two. The model is the llama-110m
 * shape (written seeded into a temporary folder, or --model DIR); --quick a smaller one.
 * Runs alternate one device / grid, N trials each (default 3), and the figures are the
 * medians of the ratios, since the machine is shared and noisy:
 *   - TP 2 (devices 0,0): decode latency at batch 1 (ms between tokens), one device / tp 2;
 *     target >= 1.3x (the layers' bytes are halved per core, the all-reduces cost a little);
 *   - DP 2 (devices 0,0): decode throughput of 64 sequences (32 a replica: the GEMMs are
 *     compute-bound, as on a GPU's own memory), dp 2 / one device; target >= 1.7x (as the
 *     MLP's DP); and of 8, printed: there the host's devices share one memory bus, and two
 *     replicas read the weights twice;
 *   - PP 2 (devices 0,0): decode throughput of 64 sequences (two groups of 32 in flight, one
 *     a stage), pp 2 / one device, printed; and the largest worker's weights / one
 *     device's;
 *   - the greedy tokens of every grid equal to one device's.
 * A MISS does not change the exit status (1 only on errors).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"

enum { MAXB = 64, MAXG = 64 };

static int g_pass, g_miss;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double load1(void)
{
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    return l;
}

static const char *verdict(int ok)
{
    ok ? g_pass++ : g_miss++;
    return ok ? "PASS" : "MISS";
}

/* A host engine on dp x pp x tp workers of device 0, one core each. */
static pe_engine *open_grid(const char *dir, int dp, int pp, int tp)
{
    static const int dev0[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = dp * pp * tp;
    cfg.devices = dev0;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.threads = 1;
    cfg.kv_tokens = 2048;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK) {
        fprintf(stderr, "error: dp=%d pp=%d tp=%d: %s\n", dp, pp, tp, pe_last_error());
        pe_engine_destroy(e);
        return NULL;
    }
    return e;
}

typedef struct result {
    double gap_ms;    /* median ms between sequence 0's tokens after its first */
    double tok_s;     /* tokens after the last first token / the time they took */
    int32_t tok[MAXB][MAXG];
} result;

/* B sequences of 16-token prompts, G greedy tokens each. */
static int run(pe_engine *e, int B, int G, int vocab, result *out)
{
    memset(out, 0, sizeof *out);
    int32_t prompt[16];
    for (int i = 0; i < B; i++) {
        uint64_t s = 1000 + (uint64_t)i;
        for (int k = 0; k < 16; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            prompt[k] = (int32_t)((s >> 33) % (uint64_t)vocab);
        }
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = 16;
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return -1;
        }
    }
    double tick[MAXG], t_all_first = 0, t_end = 0;
    int firsts = 0, nt = 0;
    long after = 0;
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        double t = now_ms();
        if (ev.status != PE_OK) {
            fprintf(stderr, "error: a sequence failed: %s\n", pe_engine_last_error(e));
            return -1;
        }
        if (ev.token < 0)
            continue;
        int i = (int)(intptr_t)ev.user;
        out->tok[i][ev.index] = ev.token;
        if (firsts == B)
            after++;
        if (ev.index == 0 && ++firsts == B)
            t_all_first = t;
        t_end = t;
        if (i == 0)
            tick[nt++] = t;
    }
    double gaps[MAXG];
    for (int k = 1; k < nt; k++)
        gaps[k - 1] = tick[k] - tick[k - 1];
    out->gap_ms = bu_median(gaps, (size_t)(nt - 1));
    out->tok_s = after / ((t_end - t_all_first) * 1e-3);
    return 0;
}

/* The most weight bytes a worker of e holds. */
static double worker_weights(const pe_engine *e)
{
    pe_engine_info info;
    pe_engine_info_get(e, &info);
    double most = 0;
    for (int w = 0; w < info.world && w < 64; w++)
        most = fmax(most, (double)info.weight_bytes[w]);
    return most;
}

typedef struct ratios {
    double latency;    /* one device's decode gap / the grid's */
    double throughput; /* the grid's decode tok/s / one device's */
    double weights;    /* the grid's largest worker's weight bytes / one device's */
    int same;          /* the grid's greedy tokens are one device's */
} ratios;

/* One device against the grid, alternating, trials times: the medians of the ratios. */
static int compare(const char *dir, int vocab, int dp, int pp, int tp, int B, int G,
                   int trials, ratios *out, cJSON *o)
{
    pe_engine *one = open_grid(dir, 1, 1, 1), *grid = open_grid(dir, dp, pp, tp);
    if (!one || !grid) {
        pe_engine_destroy(one);
        pe_engine_destroy(grid);
        return -1;
    }
    out->weights = worker_weights(grid) / worker_weights(one);
    static result a, b;
    double lat[16], tput[16], gap_one[16], gap_grid[16];
    int rc = run(one, 1, 4, vocab, &a) || run(grid, 1, 4, vocab, &b); /* warm-up */
    out->same = 1;
    for (int t = 0; rc == 0 && t < trials; t++) {
        rc = run(one, B, G, vocab, &a) || run(grid, B, G, vocab, &b);
        lat[t] = a.gap_ms / b.gap_ms;
        tput[t] = b.tok_s / a.tok_s;
        gap_one[t] = a.gap_ms;
        gap_grid[t] = b.gap_ms;
        for (int i = 0; i < B; i++)
            out->same &= !memcmp(a.tok[i], b.tok[i], (size_t)G * sizeof(int32_t));
        printf("    trial %d: one device %.2f ms/token, %.1f tok/s; dp=%d pp=%d tp=%d %.2f "
               "ms/token, %.1f tok/s\n", t + 1, a.gap_ms, a.tok_s, dp, pp, tp, b.gap_ms,
               b.tok_s);
    }
    pe_engine_destroy(one);
    pe_engine_destroy(grid);
    if (rc)
        return -1;
    out->latency = bu_median(lat, (size_t)trials);
    out->throughput = bu_median(tput, (size_t)trials);
    cJSON_AddNumberToObject(o, "one_device_ms_per_token", bu_median(gap_one, (size_t)trials));
    cJSON_AddNumberToObject(o, "grid_ms_per_token", bu_median(gap_grid, (size_t)trials));
    cJSON_AddNumberToObject(o, "latency_one_over_grid", out->latency);
    cJSON_AddNumberToObject(o, "throughput_grid_over_one", out->throughput);
    cJSON_AddNumberToObject(o, "weights_per_worker_grid_over_one", out->weights);
    cJSON_AddBoolToObject(o, "greedy_tokens_identical", out->same);
    printf("  greedy tokens identical to one device: %s  %s\n", out->same ? "yes" : "no",
           verdict(out->same));
    return 0;
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    const char *model_dir = NULL;
    int trials = 3;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--model"))
            model_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--trials"))
            trials = atoi(argv[i + 1]);
    }
    trials = trials < 1 ? 1 : trials > 16 ? 16 : trials;
    char dir[512];
    if (!model_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/pengine-bench-grids-%ld", t && *t ? t : "/tmp",
                 (long)getpid());
        pe_gen_spec s;
        if (pe_gen_init(&s, PE_GEN_LLAMA, "llama-110m") != PE_OK)
            return 1;
        s.seed = 7;
        if (args.quick) {
            s.layers = 4;
            s.hidden = 256;
            s.heads = 4;
            s.kv_heads = 2;
            s.inner = 704;
            s.vocab = 8000;
        }
        printf("writing %s ...\n", dir);
        fflush(stdout);
        if (pe_gen_write(&s, dir) != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_last_error());
            return 1;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", model_dir);
    }
    pe_engine *probe = open_grid(dir, 1, 1, 1);
    if (!probe)
        return 1;
    pe_model_info mi;
    pe_engine_model_info(probe, &mi);
    pe_engine_destroy(probe);
    printf("\nbench_llm_grids: %s, %d layers, hidden %d, %d heads (%d KV), vocab %d; one core "
           "per device; load %.2f\n", mi.architecture, mi.nlayers, mi.hidden, mi.heads,
           mi.kv_heads, mi.vocab, load1());
    cJSON *root = cJSON_CreateObject();
    const int G = args.quick ? 16 : 32;
    int ok = 1;
    ratios q;

    printf("\nTP 2 (devices 0,0), batch 1, %d tokens, %d trials:\n", G, trials);
    if (compare(dir, mi.vocab, 1, 1, 2, 1, G, trials, &q, cJSON_AddObjectToObject(root, "tp2")))
        ok = 0;
    else
        printf("  decode latency one device / tp 2: %.2fx (target >= 1.3)  %s\n", q.latency,
               verdict(q.latency >= 1.3));

    const int B = args.quick ? 16 : MAXB, GB = args.quick ? 8 : 16; /* the big batches */
    printf("\nDP 2 (devices 0,0), batch %d, %d tokens, %d trials:\n", B, GB, trials);
    if (compare(dir, mi.vocab, 2, 1, 1, B, GB, trials, &q, cJSON_AddObjectToObject(root, "dp2")))
        ok = 0;
    else
        printf("  decode throughput dp 2 / one device: %.2fx (target >= 1.7)  %s\n",
               q.throughput, verdict(q.throughput >= 1.7));
    printf("\nDP 2 (devices 0,0), batch 8, %d tokens, %d trials:\n", G, trials);
    if (compare(dir, mi.vocab, 2, 1, 1, 8, G, trials, &q,
                cJSON_AddObjectToObject(root, "dp2_batch8")))
        ok = 0;
    else
        printf("  decode throughput dp 2 / one device: %.2fx (memory-bound: no target on one "
               "memory bus)\n", q.throughput);

    printf("\nPP 2 (devices 0,0), batch %d, %d tokens, %d trials (2 groups in flight):\n", B,
           GB, trials);
    if (compare(dir, mi.vocab, 1, 2, 1, B, GB, trials, &q, cJSON_AddObjectToObject(root, "pp2"))) {
        ok = 0;
    } else {
        printf("  decode throughput pp 2 / one device: %.2fx\n", q.throughput);
        printf("  weights of the largest stage / one device: %.2f (the stages are balanced by "
               "cost per token: the embedding's table weighs on stage 0 but costs a lookup)\n",
               q.weights);
    }

    printf("\n%d PASS, %d MISS (load %.2f)\n", g_pass, g_miss, load1());
    cJSON_AddNumberToObject(root, "pass", g_pass);
    cJSON_AddNumberToObject(root, "miss", g_miss);
    if (args.json_path)
        bu_write_json(root, args.json_path);
    cJSON_Delete(root);
    if (!model_dir) { /* what pe_gen_write wrote, then the folder */
        DIR *d = opendir(dir);
        struct dirent *ent;
        char path[1024];
        while (d && (ent = readdir(d)))
            if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
                unlink(path);
            }
        if (d)
            closedir(d);
        rmdir(dir);
    }
    return ok ? 0 : 1;
}
