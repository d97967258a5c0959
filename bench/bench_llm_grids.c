/* bench_llm_grids.c: the decoders on grids of host devices against one device and against
 * ideals built from the same run's raw kernels on the same cores: the seeds' table.
 *
 *   bench_llm_grids [--quick] [--json FILE] [--markdown] [--only gpt2|llama] [--model DIR]
 *                   [--trials N]
 *
 * Shapes: the 124m GPT-2 and the llama-110m, fp32, written seeded into a temporary folder
 * (--quick: 4-block, hidden-256 versions; --model DIR: that checkpoint only). Each host device
 * computes with one core (threads 1), as each GPU has its own SMs. Configurations:
 *   one device x 1 core (the reference), one device x 2 cores, tp 2, pp 2 (two groups in
 *   flight, one a stage), dp 2;
 * each at batch 1 (latency: ms between sequence 0's tokens) and at batch 8 and 64
 * (throughput: tokens after the last first token / the time they took). A trial runs, batch
 * by batch, the reference, then every grid, then the raw kernels; the figures are the medians
 * over N trials (default 3) of each trial's ratios, since the machine is shared and noisy.
 *
 * The raw kernels: the Linears of one decode step (every block's projections and the LM head;
 * not attention, norms or sampling), each the backend's own Linear (be_ops.linear: the GEMV
 * kernel at M <= 8, OpenBLAS sgemm above it, one thread), looped for a fixed time by plain
 * threads, one host device each, bound to the cores the engine's workers get, no engine and
 * no collective:
 *   1 core: the whole step on one thread, at M = batch;
 *   tp 2 and 2 cores: each thread its tp shard (half the heads, half the MLP, half the
 *     vocabulary) at M = batch, both at once;
 *   pp 2: each thread half the blocks (cut where the GEMV bytes balance; the head on the
 *     second) at M = batch / 2, both at once: a group of batch / 2 leaves per step;
 *   dp 2: each thread the whole step on its own copy of the weights at M = batch / 2;
 *   at batch 1, pp 2 and dp 2 have the 1-core ideal (the token passes both stages; one
 *   replica holds the sequence).
 * The ideal of a grid is its raw figure; the hardware's ratio is raw(grid) / raw(1 core).
 * Targets (issue 10, section 7):
 *   - tp 2, batch 1: ms/token <= 0.75 x one device, and <= 1.15 x the ideal;
 *   - pp 2, batch 8: tok/s >= 1.7 x one device, and ideal <= 1.15 x pp 2's tok/s;
 *   - dp 2, batch 8 and 64: tok/s >= 1.8 x one device;
 *   - the greedy tokens of every grid equal to one device's (an error if not).
 * --markdown prints the tables of docs/modes.md ("Decoders on grids") at the end.
 * A MISS does not change the exit status (1 only on errors).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"
#include "runtime/topology.h"

enum {
    MAXB = 64,   /* the largest batch */
    MAXG = 32,   /* the most tokens a sequence generates */
    PROMPT = 8,  /* prompt tokens of every sequence */
    NB = 3,      /* batches: 1, 8, 64 */
    NC = 5,      /* configurations: the reference and four others */
    MAXT = 16,   /* trials */
    MAXLIN = 512 /* Linears of a step */
};
static const int BATCH[NB] = {1, 8, 64};

typedef struct config {
    const char *name;
    int dp, pp, tp, threads;
} config;
static const config CONF[NC] = {{"1 device x 1 core", 1, 1, 1, 1},
                                {"1 device x 2 cores", 1, 1, 1, 2},
                                {"tp 2", 1, 1, 2, 1},
                                {"pp 2", 1, 2, 1, 1},
                                {"dp 2", 2, 1, 1, 1}};
enum { C_ONE, C_CORES2, C_TP, C_PP, C_DP };

static int g_quick, g_pass, g_miss;
static double g_load_max; /* the highest load1() read */
static rt_topology *g_topo;

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
    g_load_max = fmax(g_load_max, l);
    return l;
}

static const char *verdict(int ok)
{
    ok ? g_pass++ : g_miss++;
    return ok ? "PASS" : "MISS";
}

/* ---- the engine ---------------------------------------------------------------------------- */

static pe_engine *open_config_sched(const char *dir, const config *c, pe_tp_embedding emb,
                                    pe_schedule sched, int m)
{
    static const int dev0[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = c->dp * c->pp * c->tp;
    cfg.devices = dev0;
    cfg.dp = c->dp;
    cfg.pp = c->pp;
    cfg.tp = c->tp;
    cfg.threads = c->threads;
    cfg.kv_tokens = 2048; /* 64 sequences of 2 blocks (PROMPT + the tokens <= 32) */
    cfg.prefix_caching = 0; /* every run computes its prompts: runs repeat the same prompts,
                             * which the cache would skip (the prefill's time to first token) */
    cfg.tp_embedding = emb;
    cfg.schedule = sched;
    cfg.microbatches = m;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK) {
        fprintf(stderr, "error: %s: %s\n", c->name, pe_last_error());
        pe_engine_destroy(e);
        return NULL;
    }
    return e;
}

static pe_engine *open_config_with(const char *dir, const config *c, pe_tp_embedding emb)
{
    return open_config_sched(dir, c, emb, PE_SCHED_NAIVE, 1);
}

static pe_engine *open_config(const char *dir, const config *c)
{
    return open_config_with(dir, c, PE_TP_EMBED_VOCAB);
}

typedef struct result {
    double gap_ms; /* median ms between sequence 0's tokens after its first */
    double tok_s;  /* tokens after the last first token / the time they took */
    int32_t tok[MAXB][MAXG];
} result;

/* B sequences of PROMPT-token prompts, G greedy tokens each. */
static int run(pe_engine *e, int B, int G, int vocab, result *out)
{
    memset(out, 0, sizeof *out);
    int32_t prompt[PROMPT];
    for (int i = 0; i < B; i++) {
        uint64_t s = 1000 + (uint64_t)i;
        for (int k = 0; k < PROMPT; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            prompt[k] = (int32_t)((s >> 33) % (uint64_t)vocab);
        }
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = PROMPT;
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

/* ---- the raw kernels ----------------------------------------------------------------------- */

typedef struct lin {
    size_t N, K; /* W (N, K): y(M, N) = x(M, K) W^T */
} lin;

/* The Linears of one decode step of blocks [first, last) (and the head when last is the
 * model's end), as one rank of a tp-way split holds them (every rank's are the same size):
 * the column-parallel ones (QKV, the MLP's up and gate, the vocab-parallel head) keep N / tp
 * rows of W, the row-parallel ones (the attention's output, the MLP's down) K / tp columns.
 * Returns how many. */
static int step_linears(const pe_model_info *mi, int first, int last, int tp, lin *out)
{
    const size_t C = (size_t)mi->hidden, hd = (size_t)mi->head_dim, T = (size_t)tp;
    const size_t q = (size_t)mi->heads * hd, kv = (size_t)mi->kv_heads * hd;
    const int gpt2 = mi->family == PE_FAMILY_GPT2;
    const size_t inner = gpt2 ? 4 * C : (size_t)mi->inner;
    int n = 0;
    for (int l = first; l < last; l++) {
        out[n++] = (lin){gpt2 ? 3 * C / T : (q + 2 * kv) / T, C}; /* QKV */
        out[n++] = (lin){C, q / T};                              /* attention's output */
        out[n++] = (lin){(gpt2 ? 1 : 2) * inner / T, C};         /* up (and gate) */
        out[n++] = (lin){C, inner / T};                          /* down */
    }
    if (last == mi->nlayers)
        out[n++] = (lin){((size_t)mi->vocab + T - 1) / T, C}; /* the head */
    return n;
}

static double lin_bytes(const lin *l, int n)
{
    double b = 0;
    for (int i = 0; i < n; i++)
        b += (double)l[i].N * (double)l[i].K * sizeof(float);
    return b;
}

typedef struct raw_team raw_team;

typedef struct raw_worker {
    raw_team *team;
    lin lins[MAXLIN]; /* its Linears, in order */
    int nlin;
    pthread_t th;
    rt_binding bind;  /* the cores an engine's worker of the same rank gets */
    be_device *dev;
    void *w[MAXLIN];  /* (N, K) each, on dev */
    float *x, *y;     /* (MAXB, the largest K), (MAXB, the largest N) on dev */
    double ms;        /* the last round: its median ms per step */
    pe_status status;
    char msg[PE_ERR_LEN];
} raw_worker;

struct raw_team {
    int n;
    raw_worker wk[2];
    pthread_barrier_t go, done; /* n + 1 parties */
    int M, stop;                /* set by main before `go` */
    double round_ms;            /* how long each worker loops */
};

/* One decode step of this worker's Linears at M rows: x -> y, the shapes' own sizes. */
static pe_status raw_step(raw_worker *me, size_t M)
{
    const be_ops *ops = be_host_ops();
    for (int i = 0; i < me->nlin; i++) {
        pe_status s = ops->linear(me->dev, PE_DTYPE_FP32, M, me->lins[i].N, me->lins[i].K, me->x,
                                  me->w[i], NULL, BE_ACT_NONE, me->y, 0, NULL);
        if (s != PE_OK)
            return s;
    }
    return PE_OK;
}

static pe_status raw_setup(raw_worker *me, pe_err *err)
{
    const be_ops *ops = be_host_ops();
    pe_status s = rt_topology_bind_self(g_topo, &me->bind, err);
    if (s == PE_OK)
        s = ops->open(0, &me->dev, err);
    if (s == PE_OK)
        s = ops->set_compute_threads(me->dev, 1);
    size_t kmax = 0, nmax = 0, most = 0;
    for (int i = 0; i < me->nlin; i++) {
        kmax = me->lins[i].K > kmax ? me->lins[i].K : kmax;
        nmax = me->lins[i].N > nmax ? me->lins[i].N : nmax;
        most = me->lins[i].N * me->lins[i].K > most ? me->lins[i].N * me->lins[i].K : most;
    }
    most = most > MAXB * kmax ? most : MAXB * kmax;
    float *host = s == PE_OK ? malloc(most * sizeof *host) : NULL;
    if (s == PE_OK && !host)
        return pe_fail(err, PE_ENOMEM, "out of memory");
    if (host)
        pe_random_uniform(host, most, 3);
    void *p = NULL;
    for (int i = 0; s == PE_OK && i < me->nlin; i++) {
        size_t bytes = me->lins[i].N * me->lins[i].K * sizeof(float);
        s = ops->alloc(me->dev, bytes, &me->w[i]);
        if (s == PE_OK) /* written: untouched pages would all read the one zero page */
            s = ops->copy_h2d(me->dev, me->w[i], host, bytes);
    }
    if (s == PE_OK && (s = ops->alloc(me->dev, MAXB * kmax * sizeof(float), &p)) == PE_OK) {
        me->x = p;
        s = ops->copy_h2d(me->dev, me->x, host, MAXB * kmax * sizeof(float));
    }
    if (s == PE_OK && (s = ops->alloc(me->dev, MAXB * nmax * sizeof(float), &p)) == PE_OK)
        me->y = p;
    free(host);
    if (s == PE_OK) /* warm-up: page faults, BLAS buffers */
        s = raw_step(me, MAXB);
    if (s != PE_OK && !err->msg[0])
        return pe_fail(err, s, "raw Linears: %s", me->dev ? ops->last_error(me->dev) : "");
    return s;
}

static void raw_teardown(raw_worker *me)
{
    const be_ops *ops = be_host_ops();
    if (!me->dev)
        return;
    for (int i = 0; i < me->nlin; i++)
        if (me->w[i])
            ops->free(me->dev, me->w[i]);
    if (me->x)
        ops->free(me->dev, me->x);
    if (me->y)
        ops->free(me->dev, me->y);
    ops->close(me->dev);
}

static void *raw_main(void *arg)
{
    raw_worker *me = arg;
    raw_team *team = me->team;
    pe_err err = {{0}};
    me->status = raw_setup(me, &err);
    if (me->status != PE_OK)
        snprintf(me->msg, sizeof me->msg, "%s", err.msg);
    pthread_barrier_wait(&team->done);
    for (;;) {
        pthread_barrier_wait(&team->go);
        if (team->stop)
            break;
        /* Steps for round_ms (3 at least): the workers run side by side all along; the
         * median step, as the engine's latency is its median gap. */
        double t0 = now_ms(), t = t0, step[256];
        int steps = 0;
        while (me->status == PE_OK && steps < 256 && (steps < 3 || t - t0 < team->round_ms)) {
            double ts = t;
            me->status = raw_step(me, (size_t)team->M);
            t = now_ms();
            step[steps++] = t - ts;
        }
        if (me->status != PE_OK)
            snprintf(me->msg, sizeof me->msg, "raw Linears: %s",
                     be_host_ops()->last_error(me->dev));
        me->ms = bu_median(step, (size_t)steps);
        pthread_barrier_wait(&team->done);
    }
    raw_teardown(me);
    return NULL;
}

static void raw_team_stop(raw_team *team)
{
    if (!team)
        return;
    team->stop = 1;
    pthread_barrier_wait(&team->go);
    for (int i = 0; i < team->n; i++)
        pthread_join(team->wk[i].th, NULL);
    pthread_barrier_destroy(&team->go);
    pthread_barrier_destroy(&team->done);
    free(team);
}

static int raw_failed(const raw_team *team)
{
    for (int i = 0; i < team->n; i++)
        if (team->wk[i].status != PE_OK) {
            fprintf(stderr, "error: raw thread %d: %s\n", i, team->wk[i].msg);
            return 1;
        }
    return 0;
}

/* n threads (1 or 2), worker i on its own host device with Linears lins[i] (nlin[i]),
 * bound to the cores the engine gives its worker i at one core a device; set up and warmed;
 * NULL on failure. */
static raw_team *raw_team_start(int n, lin (*lins)[MAXLIN], const int *nlin)
{
    rt_binding plan[2];
    pe_err err = {{0}};
    if (rt_topology_plan_cores(g_topo, n, NULL, 1, plan, &err) != PE_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return NULL;
    }
    raw_team *team = calloc(1, sizeof *team);
    if (!team)
        return NULL;
    team->n = n;
    team->round_ms = g_quick ? 40 : 300;
    pthread_barrier_init(&team->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&team->done, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++) {
        raw_worker *w = &team->wk[i];
        w->team = team;
        w->bind = plan[i];
        w->nlin = nlin[i];
        memcpy(w->lins, lins[i], (size_t)nlin[i] * sizeof(lin));
        if (pthread_create(&w->th, NULL, raw_main, w) != 0) {
            fprintf(stderr, "error: cannot start a raw thread\n");
            exit(1); /* the barriers wait for it: nothing to unwind */
        }
    }
    pthread_barrier_wait(&team->done);
    if (raw_failed(team)) {
        raw_team_stop(team);
        return NULL;
    }
    return team;
}

/* One round at M rows: the slowest worker's median ms per step (-1 on failure). */
static double raw_round(raw_team *team, int M)
{
    team->M = M;
    pthread_barrier_wait(&team->go);
    pthread_barrier_wait(&team->done);
    if (raw_failed(team))
        return -1;
    double ms = 0;
    for (int i = 0; i < team->n; i++)
        ms = fmax(ms, team->wk[i].ms);
    return ms;
}

/* The raw teams of a model: 1 core, tp shards, pp halves, dp copies. */
typedef struct raw_set {
    raw_team *one, *tp, *pp, *dp;
    int pp_cut; /* the pp halves' first block of the second */
} raw_set;

static void raw_set_stop(raw_set *r)
{
    raw_team_stop(r->one);
    raw_team_stop(r->tp);
    raw_team_stop(r->pp);
    raw_team_stop(r->dp);
    memset(r, 0, sizeof *r);
}

static int raw_set_start(const pe_model_info *mi, raw_set *r)
{
    static lin l[2][MAXLIN];
    int n[2];
    memset(r, 0, sizeof *r);
    if (4 * mi->nlayers + 1 > MAXLIN) {
        fprintf(stderr, "error: %d blocks: too many for the raw Linears\n", mi->nlayers);
        return -1;
    }
    n[0] = step_linears(mi, 0, mi->nlayers, 1, l[0]);
    n[1] = n[0];
    memcpy(l[1], l[0], sizeof l[0]);
    r->one = raw_team_start(1, l, n);
    r->dp = raw_team_start(2, l, n);
    n[0] = step_linears(mi, 0, mi->nlayers, 2, l[0]);
    n[1] = n[0];
    memcpy(l[1], l[0], sizeof l[0]);
    r->tp = raw_team_start(2, l, n);
    /* pp: the cut where the two halves' bytes are closest */
    const double total = lin_bytes(l[0], step_linears(mi, 0, mi->nlayers, 1, l[0]));
    double best = 1e300;
    for (int cut = 1; cut < mi->nlayers; cut++) {
        double a = lin_bytes(l[0], step_linears(mi, 0, cut, 1, l[0]));
        if (fmax(a, total - a) < best) {
            best = fmax(a, total - a);
            r->pp_cut = cut;
        }
    }
    n[0] = step_linears(mi, 0, r->pp_cut, 1, l[0]);
    n[1] = step_linears(mi, r->pp_cut, mi->nlayers, 1, l[1]);
    r->pp = raw_team_start(2, l, n);
    if (!r->one || !r->dp || !r->tp || !r->pp) {
        raw_set_stop(r);
        return -1;
    }
    return 0;
}

/* ---- one model ----------------------------------------------------------------------------- */

/* fig[c][b][t]: configuration c at batch b in trial t: ms/token at batch 1, tok/s above;
 * ideal[c][b][t] the same from the raw kernels. */
typedef struct figures {
    double fig[NC][NB][MAXT], ideal[NC][NB][MAXT];
} figures;

/* The raw figures of trial t at batch b into f->ideal; 0 or -1. */
static int raw_trial(raw_set *r, int b, int t, figures *f)
{
    const int B = BATCH[b];
    double one = raw_round(r->one, B), tp = raw_round(r->tp, B);
    double pp = B > 1 ? raw_round(r->pp, B / 2) : one; /* at batch 1, a pass through both */
    double dp = B > 1 ? raw_round(r->dp, B / 2) : one; /* at batch 1, one replica works */
    if (one < 0 || tp < 0 || pp < 0 || dp < 0)
        return -1;
    const double ms[NC] = {one, tp, tp, pp, dp};
    const double per_step[NC] = {B, B, B, B > 1 ? B / 2 : 1, B};
    for (int c = 0; c < NC; c++)
        f->ideal[c][b][t] = B == 1 ? ms[c] : per_step[c] / (ms[c] * 1e-3);
    return 0;
}

/* The medians over trials of x[t] and of x[t] / ref[t]. */
static double med(const double *x, int trials)
{
    double v[MAXT];
    memcpy(v, x, (size_t)trials * sizeof *v);
    return bu_median(v, (size_t)trials);
}

static double med_ratio(const double *x, const double *ref, int trials)
{
    double v[MAXT];
    for (int t = 0; t < trials; t++)
        v[t] = x[t] / ref[t];
    return bu_median(v, (size_t)trials);
}

/* Speedup of configuration c over the reference at batch b in trial t's figures v. */
static double speedup(const double (*v)[NB][MAXT], int c, int b, int t)
{
    return b == 0 ? v[0][b][t] / v[c][b][t] : v[c][b][t] / v[0][b][t];
}

static double med_speedup(const double (*v)[NB][MAXT], int c, int b, int trials)
{
    double x[MAXT];
    for (int t = 0; t < trials; t++)
        x[t] = speedup(v, c, b, t);
    return bu_median(x, (size_t)trials);
}

static void print_table(const figures *f, int trials, cJSON *o)
{
    printf("\n  %-20s | %-31s | %-31s | %-31s\n", "", "batch 1: ms/token", "batch 8: tok/s",
           "batch 64: tok/s");
    printf("  %-20s | %-31s | %-31s | %-31s\n", "", "measured (x 1 core) / ideal (x)",
           "measured (x 1 core) / ideal (x)", "measured (x 1 core) / ideal (x)");
    cJSON *rows = cJSON_AddArrayToObject(o, "table");
    for (int c = 0; c < NC; c++) {
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "config", CONF[c].name);
        printf("  %-20s", CONF[c].name);
        for (int b = 0; b < NB; b++) {
            double m = med(f->fig[c][b], trials), i = med(f->ideal[c][b], trials);
            double sm = med_speedup(f->fig, c, b, trials), si = med_speedup(f->ideal, c, b, trials);
            printf(" | %7.*f (%.2fx) / %7.*f (%.2fx)", b ? 1 : 2, m, sm, b ? 1 : 2, i, si);
            char key[64];
            cJSON *cell = cJSON_CreateObject();
            cJSON_AddNumberToObject(cell, b ? "tok_s" : "ms_per_token", m);
            cJSON_AddNumberToObject(cell, "speedup_over_one_core", sm);
            cJSON_AddNumberToObject(cell, b ? "ideal_tok_s" : "ideal_ms_per_token", i);
            cJSON_AddNumberToObject(cell, "ideal_speedup_over_one_core", si);
            snprintf(key, sizeof key, "batch%d", BATCH[b]);
            cJSON_AddItemToObject(row, key, cell);
        }
        printf("\n");
        cJSON_AddItemToArray(rows, row);
    }
    printf("  (x: speedup over 1 device x 1 core, median of the trials' ratios; ideal: the "
           "step's Linears alone, raw, on the same cores)\n");
}

/* A target's verdict; hw_what (or NULL) names the raw threads whose speedup over one is hw. */
static void target(cJSON *arr, const char *what, double v, const char *cmp, double bound,
                   const char *hw_what, double hw)
{
    int ok = !strcmp(cmp, "<=") ? v <= bound : v >= bound;
    const char *vd = verdict(ok);
    printf("  %-52s %5.2f (target %s %.2f)  %s", what, v, cmp, bound, vd);
    if (hw_what)
        printf("  (hardware: %s on 2 threads %.2fx of 1)", hw_what, hw);
    printf("\n");
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "figure", what);
    cJSON_AddNumberToObject(t, "value", v);
    cJSON_AddStringToObject(t, "target", cmp);
    cJSON_AddNumberToObject(t, "bound", bound);
    cJSON_AddBoolToObject(t, "pass", ok);
    if (hw_what) {
        cJSON_AddStringToObject(t, "hardware", hw_what);
        cJSON_AddNumberToObject(t, "hardware_speedup", hw);
    }
    cJSON_AddItemToArray(arr, t);
}

static void print_targets(const figures *f, int trials, cJSON *o)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "targets");
    printf("\n");
    target(arr, "tp 2, batch 1: ms/token, tp 2 / one device",
           1 / med_speedup(f->fig, C_TP, 0, trials), "<=", 0.75, "the raw shards",
           med_speedup(f->ideal, C_TP, 0, trials));
    target(arr, "tp 2, batch 1: ms/token, tp 2 / ideal",
           med_ratio(f->fig[C_TP][0], f->ideal[C_TP][0], trials), "<=", 1.15, NULL, 0);
    target(arr, "pp 2, batch 8: tok/s, pp 2 / one device", med_speedup(f->fig, C_PP, 1, trials),
           ">=", 1.7, "the raw halves", med_speedup(f->ideal, C_PP, 1, trials));
    target(arr, "pp 2, batch 8: tok/s, ideal / pp 2",
           med_ratio(f->ideal[C_PP][1], f->fig[C_PP][1], trials), "<=", 1.15, NULL, 0);
    for (int b = 1; b < NB; b++) {
        char what[96];
        snprintf(what, sizeof what, "dp 2, batch %d: tok/s, dp 2 / one device", BATCH[b]);
        target(arr, what, med_speedup(f->fig, C_DP, b, trials), ">=", 1.8, "the raw replicas",
               med_speedup(f->ideal, C_DP, b, trials));
    }
}

static int bench_embedding(const char *dir, int vocab, int trials, cJSON *o);
static int bench_prefill(const char *dir, int vocab, int trials, cJSON *o);

/* Every configuration and the raw kernels, trials times; the table and the targets. */
static int bench_model(const char *name, const char *dir, int trials, cJSON *o)
{
    pe_engine *e[NC] = {0};
    raw_set raw = {0};
    static figures f;
    static result res[NC];
    int rc = 0, same = 1;
    for (int c = 0; rc == 0 && c < NC; c++)
        if (!(e[c] = open_config(dir, &CONF[c])))
            rc = -1;
    pe_model_info mi;
    memset(&mi, 0, sizeof mi);
    if (rc == 0) {
        pe_engine_model_info(e[0], &mi);
        printf("\n== %s: %s, %d blocks, hidden %d, %d heads (%d KV), vocab %d, fp32; load %.2f\n",
               name, mi.architecture, mi.nlayers, mi.hidden, mi.heads, mi.kv_heads, mi.vocab,
               load1());
        fflush(stdout);
        rc = raw_set_start(&mi, &raw);
    }
    const int G[NB] = {g_quick ? 12 : 16, g_quick ? 12 : 16, g_quick ? 8 : 16};
    for (int c = 0; rc == 0 && c < NC; c++) /* warm-up */
        rc = run(e[c], 1, 4, mi.vocab, &res[c]);
    for (int t = 0; rc == 0 && t < trials; t++) {
        printf("  trial %d (1 core, 2 cores, tp 2, pp 2, dp 2; ideals in brackets):\n", t + 1);
        for (int b = 0; rc == 0 && b < NB; b++) {
            for (int c = 0; rc == 0 && c < NC; c++) {
                rc = run(e[c], BATCH[b], G[b], mi.vocab, &res[c]);
                f.fig[c][b][t] = b == 0 ? res[c].gap_ms : res[c].tok_s;
                for (int i = 0; rc == 0 && c > 0 && i < BATCH[b]; i++)
                    if (memcmp(res[c].tok[i], res[0].tok[i], (size_t)G[b] * sizeof(int32_t))) {
                        fprintf(stderr, "error: %s, batch %d: sequence %d's greedy tokens "
                                "differ from one device's\n", CONF[c].name, BATCH[b], i);
                        same = 0;
                        break;
                    }
            }
            if (rc == 0)
                rc = raw_trial(&raw, b, t, &f);
            printf("    batch %2d, %-8s", BATCH[b], b ? "tok/s:" : "ms/token:");
            for (int c = 0; rc == 0 && c < NC; c++)
                printf(" %7.*f [%7.*f]", b ? 1 : 2, f.fig[c][b][t], b ? 1 : 2, f.ideal[c][b][t]);
            printf("\n");
        }
        printf("    load %.2f\n", load1());
        fflush(stdout);
    }
    raw_set_stop(&raw);
    for (int c = 0; c < NC; c++)
        pe_engine_destroy(e[c]);
    if (rc)
        return -1;
    cJSON_AddStringToObject(o, "architecture", mi.architecture);
    cJSON_AddNumberToObject(o, "blocks", mi.nlayers);
    cJSON_AddNumberToObject(o, "hidden", mi.hidden);
    cJSON_AddNumberToObject(o, "vocab", mi.vocab);
    cJSON_AddNumberToObject(o, "pp_ideal_cut", raw.pp_cut);
    print_table(&f, trials, o);
    print_targets(&f, trials, o);
    printf("  greedy tokens of every configuration = one device's: %s\n", same ? "yes" : "NO");
    cJSON_AddBoolToObject(o, "greedy_tokens_identical", same);
    if (same && bench_embedding(dir, mi.vocab, trials, o) != 0)
        return -1;
    if (same && bench_prefill(dir, mi.vocab, trials, o) != 0)
        return -1;
    return same ? 0 : -1;
}

/* ---- TP's token embedding: vocab-parallel or replicated ------------------------------------- */

/* The largest worker's weights of e, in MiB. */
static double worker_weights_mib(pe_engine *e)
{
    pe_engine_info info;
    double most = 0;
    if (pe_engine_info_get(e, &info) == PE_OK)
        for (int w = 0; w < info.world; w++)
            most = fmax(most, (double)info.weight_bytes[w] / 1048576.0);
    return most;
}

/* tp 2 with the token table split by vocabulary (the default: one all-reduce of (T, C) a
 * step) against whole on both ranks (no collective, V x C more bytes a rank), alternating:
 * batch-1 ms/token and batch-64 tok/s, the medians of the ratios, and the weights a rank. */
static int bench_embedding(const char *dir, int vocab, int trials, cJSON *o)
{
    const config *tp = &CONF[C_TP];
    pe_engine *e[2] = {open_config_with(dir, tp, PE_TP_EMBED_VOCAB),
                       open_config_with(dir, tp, PE_TP_EMBED_REPLICATED)};
    static result res[2];
    double lat[2][MAXT], tput[2][MAXT];
    const int G = g_quick ? 8 : 16;
    int rc = e[0] && e[1] ? 0 : -1;
    for (int k = 0; rc == 0 && k < 2; k++)
        rc = run(e[k], 1, 4, vocab, &res[k]); /* warm-up */
    for (int t = 0; rc == 0 && t < trials; t++)
        for (int k = 0; rc == 0 && k < 2; k++) {
            rc = run(e[k], 1, G, vocab, &res[k]);
            lat[k][t] = res[k].gap_ms;
            if (rc == 0)
                rc = run(e[k], 64, G, vocab, &res[k]);
            tput[k][t] = res[k].tok_s;
        }
    if (rc == 0) {
        const double wv = worker_weights_mib(e[0]), wr = worker_weights_mib(e[1]);
        const double lat_r = med_ratio(lat[1], lat[0], trials);
        const double tput_r = med_ratio(tput[1], tput[0], trials);
        printf("\n  tp 2, token embedding: vocab-parallel (default) against replicated\n");
        printf("    batch 1 ms/token: %.2f vs %.2f (replicated / vocab %.2fx)\n",
               med(lat[0], trials), med(lat[1], trials), lat_r);
        printf("    batch 64 tok/s:   %.1f vs %.1f (replicated / vocab %.2fx)\n",
               med(tput[0], trials), med(tput[1], trials), tput_r);
        printf("    weights a rank:   %.1f vs %.1f MiB\n", wv, wr);
        cJSON *x = cJSON_AddObjectToObject(o, "tp2_embedding");
        cJSON_AddNumberToObject(x, "vocab_ms_per_token", med(lat[0], trials));
        cJSON_AddNumberToObject(x, "replicated_ms_per_token", med(lat[1], trials));
        cJSON_AddNumberToObject(x, "latency_replicated_over_vocab", lat_r);
        cJSON_AddNumberToObject(x, "vocab_tok_s_b64", med(tput[0], trials));
        cJSON_AddNumberToObject(x, "replicated_tok_s_b64", med(tput[1], trials));
        cJSON_AddNumberToObject(x, "throughput_replicated_over_vocab", tput_r);
        cJSON_AddNumberToObject(x, "vocab_weight_mib_per_rank", wv);
        cJSON_AddNumberToObject(x, "replicated_weight_mib_per_rank", wr);
    }
    pe_engine_destroy(e[0]);
    pe_engine_destroy(e[1]);
    return rc;
}

/* ---- PP prefill: a lone prompt in micro-batches ------------------------------------------- */

enum { LONE_PROMPT = 512 };

/* ms from the submit of one LONE_PROMPT-token prompt to its first token (its prefill). */
static double lone_ttft_ms(pe_engine *e, int vocab)
{
    static int32_t prompt[LONE_PROMPT];
    uint64_t s = 99;
    for (int k = 0; k < LONE_PROMPT; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        prompt[k] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = prompt;
    p.prompt_len = LONE_PROMPT;
    p.max_tokens = 1;
    uint64_t id;
    const double t0 = now_ms();
    double first = -1;
    if (pe_seq_submit(e, &p, &id) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        return -1;
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        if (ev.status != PE_OK) {
            fprintf(stderr, "error: %s\n", pe_engine_last_error(e));
            return -1;
        }
        if (ev.token >= 0)
            first = now_ms() - t0;
    }
    return first;
}

/* pp 2's time to first token of a lone 512-token prompt: in one chunk (naive: stage 1 waits
 * for stage 0's whole prompt), in 4 micro-batches streaming through the stages, and in 4
 * under gpipe; one 1-core device beside them. Alternating, medians of the ratios. */
static int bench_prefill(const char *dir, int vocab, int trials, cJSON *o)
{
    enum { K = 4 };
    static const char *const names[K] = {"1 device x 1 core", "pp 2, naive (1 chunk)",
                                         "pp 2, stream (4 chunks)", "pp 2, gpipe (4 chunks)"};
    const config one = CONF[C_ONE], pp = CONF[C_PP];
    pe_engine *e[K] = {open_config(dir, &one),
                       open_config_sched(dir, &pp, PE_TP_EMBED_VOCAB, PE_SCHED_NAIVE, 1),
                       open_config_sched(dir, &pp, PE_TP_EMBED_VOCAB, PE_SCHED_STREAM, 4),
                       open_config_sched(dir, &pp, PE_TP_EMBED_VOCAB, PE_SCHED_GPIPE, 4)};
    double ms[K][MAXT];
    int rc = 0;
    for (int k = 0; k < K; k++)
        if (!e[k] || lone_ttft_ms(e[k], vocab) < 0) /* warm-up */
            rc = -1;
    for (int t = 0; rc == 0 && t < trials; t++)
        for (int k = 0; rc == 0 && k < K; k++)
            if ((ms[k][t] = lone_ttft_ms(e[k], vocab)) < 0)
                rc = -1;
    if (rc == 0) {
        printf("\n  pp 2, time to first token of a lone %d-token prompt (prefill):\n",
               LONE_PROMPT);
        cJSON *arr = cJSON_AddArrayToObject(o, "pp2_lone_prefill");
        for (int k = 0; k < K; k++) {
            const double m = med(ms[k], trials), x = med_ratio(ms[1], ms[k], trials);
            printf("    %-26s %8.1f ms  (pp 2 naive / this %.2fx)\n", names[k], m, x);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "config", names[k]);
            cJSON_AddNumberToObject(row, "ttft_ms", m);
            cJSON_AddNumberToObject(row, "naive_over_this", x);
            cJSON_AddItemToArray(arr, row);
        }
    }
    for (int k = 0; k < K; k++)
        pe_engine_destroy(e[k]);
    return rc;
}

/* ---- the tables of docs/modes.md ------------------------------------------------------------ */

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const cJSON *target_row(const cJSON *model, int r)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(model, "targets"), r);
}

/* --markdown: the models' tables and their targets, from what the run put in root. */
static void print_markdown(const cJSON *root)
{
    const cJSON *m, *ms[4], *row;
    int nm = 0;
    cJSON_ArrayForEach(m, root) if (nm < 4 && cJSON_GetObjectItemCaseSensitive(m, "targets"))
        ms[nm++] = m;
    for (int k = 0; k < nm; k++) {
        printf("\n| %s, fp32 | batch 1: ms/token | batch 8: tok/s | batch 64: tok/s |\n"
               "| --- | --- | --- | --- |\n", ms[k]->string);
        const cJSON *table = cJSON_GetObjectItemCaseSensitive(ms[k], "table");
        cJSON_ArrayForEach(row, table)
        {
            printf("| %s |", cJSON_GetObjectItemCaseSensitive(row, "config")->valuestring);
            for (int b = 0; b < NB; b++) {
                char key[32];
                snprintf(key, sizeof key, "batch%d", BATCH[b]);
                const cJSON *c = cJSON_GetObjectItemCaseSensitive(row, key);
                double v = num(c, b ? "tok_s" : "ms_per_token");
                double i = num(c, b ? "ideal_tok_s" : "ideal_ms_per_token");
                if (row == table->child) /* the reference */
                    printf(" %.1f / %.1f |", v, i);
                else
                    printf(" %.1f (%.2fx) / %.1f (%.2fx) |", v, num(c, "speedup_over_one_core"),
                           i, num(c, "ideal_speedup_over_one_core"));
            }
            printf("\n");
        }
    }
    if (nm == 0)
        return;
    printf("\n| target (issue 10, section 7) |");
    for (int k = 0; k < nm; k++)
        printf(" %s |", ms[k]->string);
    printf(" target |\n| --- |");
    for (int k = 0; k < nm; k++)
        printf(" --- |");
    printf(" --- |\n");
    const int rows = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ms[0], "targets"));
    for (int r = 0; r < rows; r++) {
        const cJSON *t0 = target_row(ms[0], r);
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(t0, "hardware");
        printf("| %s |", cJSON_GetObjectItemCaseSensitive(t0, "figure")->valuestring);
        for (int k = 0; k < nm; k++) {
            const cJSON *t = target_row(ms[k], r);
            printf(" %.2f: %s |", num(t, "value"),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "pass")) ? "PASS" : "MISS");
        }
        printf(" %s %.3g |\n", cJSON_GetObjectItemCaseSensitive(t0, "target")->valuestring,
               num(t0, "bound"));
        if (!cJSON_IsString(hw))
            continue;
        printf("| (hardware: %s on 2 threads / 1) |", hw->valuestring);
        for (int k = 0; k < nm; k++) {
            const cJSON *t = target_row(ms[k], r);
            printf(" %.2fx |", num(t, "hardware_speedup"));
        }
        printf(" |\n");
    }
    printf("| greedy tokens of every configuration = one device's |");
    for (int k = 0; k < nm; k++)
        printf(" %s |",
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ms[k], "greedy_tokens_identical"))
                   ? "yes"
                   : "no");
    printf(" yes |\n");
}

/* ---- main ---------------------------------------------------------------------------------- */

static int write_model(pe_gen_arch arch, const char *preset, const char *dir)
{
    pe_gen_spec s;
    if (pe_gen_init(&s, arch, preset) != PE_OK)
        return -1;
    s.seed = 7;
    if (g_quick) {
        s.layers = 4;
        s.hidden = 256;
        s.heads = 4;
        s.kv_heads = arch == PE_GEN_LLAMA ? 2 : 0;
        s.inner = arch == PE_GEN_LLAMA ? 704 : 0;
        s.vocab = 8000;
        if (arch == PE_GEN_GPT2) /* GPT-2's are 50256 */
            s.bos_token_id = s.eos_token_id = s.vocab - 1;
    }
    printf("writing %s ...\n", dir);
    fflush(stdout);
    if (pe_gen_write(&s, dir) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    g_quick = args.quick;
    const char *model_dir = NULL, *only = NULL;
    int trials = 3, markdown = 0;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--model"))
            model_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--trials"))
            trials = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
    }
    for (int i = 1; i < argc; i++)
        markdown |= !strcmp(argv[i], "--markdown");
    trials = trials < 1 ? 1 : trials > MAXT ? MAXT : trials;
    const struct {
        const char *name;
        pe_gen_arch arch;
        const char *preset, *key;
    } models[2] = {{"gpt2-124m", PE_GEN_GPT2, "124m", "gpt2"},
                   {"llama-110m", PE_GEN_LLAMA, "llama-110m", "llama"}};
    const double t0 = now_ms();
    pe_err err = {{0}};
    if (rt_topology_load(&g_topo, &err) != PE_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    printf("bench_llm_grids: %d trials; each host device one core unless said; load %.2f\n",
           trials, load1());
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trials", trials);
    cJSON_AddNumberToObject(root, "load_start", load1());
    int ok = 1;
    if (model_dir) {
        ok = bench_model(model_dir, model_dir, trials, cJSON_AddObjectToObject(root, "model")) == 0;
    } else {
        const char *tmp = getenv("TMPDIR");
        for (int m = 0; m < 2; m++) {
            if (only && strcmp(only, models[m].key))
                continue;
            char dir[512];
            snprintf(dir, sizeof dir, "%s/pengine-bench-grids-%ld-%s", tmp && *tmp ? tmp : "/tmp",
                     (long)getpid(), models[m].key);
            if (write_model(models[m].arch, models[m].preset, dir) ||
                bench_model(models[m].name, dir, trials,
                            cJSON_AddObjectToObject(root, models[m].name)))
                ok = 0;
            bu_remove_dir(dir);
        }
    }
    printf("\n%d PASS, %d MISS (load %.2f, %.0f s)\n", g_pass, g_miss, load1(),
           (now_ms() - t0) * 1e-3);
    /* This run's own threads make a load of 1 to 2; above the cores, others ran too. */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int contended = g_load_max > (double)cores + 0.5;
    if (contended)
        printf("contended: the load reached %.2f on %ld cores; other processes took cores "
               "from the 2-core configurations: measure again on a quiet machine\n",
               g_load_max, cores);
    cJSON_AddNumberToObject(root, "load_end", load1());
    cJSON_AddNumberToObject(root, "load_max", g_load_max);
    cJSON_AddBoolToObject(root, "contended", contended);
    cJSON_AddNumberToObject(root, "pass", g_pass);
    cJSON_AddNumberToObject(root, "miss", g_miss);
    if (markdown)
        print_markdown(root);
    if (args.json_path && bu_write_json(root, args.json_path))
        ok = 0;
    cJSON_Delete(root);
    rt_topology_free(g_topo);
    return ok ? 0 : 1;
}
