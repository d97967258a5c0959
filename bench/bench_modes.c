/* bench_modes.c: what the engine itself costs in DP, PP and TP, and per task.
 *
 *   bench_modes [--quick] [--json FILE] [--only dp|pp|tp|overhead]
 *
 * Every figure is a ratio measured side by side in one run, because these machines are
 * shared and noisy: the engine against an "ideal" computed from raw compute times that the
 * same run measures with no engine around them. Raw = md_stage_forward (the exact
 * per-stage forward a worker runs) called directly on host devices from plain threads,
 * bound to cores the way the engine binds its workers (rt_topology_plan). Engine runs and
 * raw runs are interleaved round by round so that both see the same interference.
 *
 * Sections (targets from issue 3): DP(2) vs 1 device; PP(2) gpipe and stream at m = 4 and
 * 8 vs naive; TP(2) vs 1 device at batch 1; the round trip of an empty forward. Each prints
 * a table with PASS/MISS. A MISS does not change the exit status (1 only on errors).
 * Temporary models go to $TMPDIR (default /tmp) and are removed.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "model/mlp/forward.h"
#include "model/mlp/mlp.h"
#include "model/mlp/shard.h"
#include "pengine/pengine.h"
#include "runtime/clock.h"
#include "runtime/topology.h"

#define PP_STAGES 2
#define TARGET_RATIO 1.15 /* engine / ideal, for PP total, PP first result, TP latency */

static int g_quick;
static rt_topology *g_topo;
static int g_pass, g_miss;

/* ---- small helpers ------------------------------------------------------------------ */

static const char *verdict(int ok)
{
    if (ok)
        g_pass++;
    else
        g_miss++;
    return ok ? "PASS" : "MISS";
}

/* The 1-minute load average (-1 if unknown): > 2 on this 2-core machine means others run. */
static double load1(void)
{
    double a = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &a) != 1)
            a = -1;
        fclose(f);
    }
    return a;
}

static void note_load(cJSON *sec, const char *key)
{
    double l = load1();
    cJSON_AddNumberToObject(sec, key, l);
    printf("  (load average %.2f on %ld cores%s)\n", l, sysconf(_SC_NPROCESSORS_ONLN),
           l > (double)sysconf(_SC_NPROCESSORS_ONLN) ? ": others are busy, figures are noisy"
                                                     : "");
}

/* Deterministic values in [-1, 1). */
static void fill_input(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static double max_abs(const float *a, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i]));
    return d;
}

/* Median of x(n) without reordering x. */
static double median_of(const double *x, int n)
{
    double *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    if (!c)
        return NAN;
    memcpy(c, x, (size_t)n * sizeof *c);
    double v = bu_median(c, (size_t)n);
    free(c);
    return v;
}

static double sum_of(const double *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return s;
}

static double elapsed_us(uint64_t t0) { return (double)(rt_now_ns() - t0) * 1e-3; }

/* ---- temporary model files -------------------------------------------------------------- */

#define MAX_TMP 8
static char g_tmp[MAX_TMP][512];

/* Writes a seeded relu MLP to a fresh temporary path (slot); 0 or -1. */
static int write_model(int slot, const char *name, size_t in, size_t hidden, size_t out,
                       int layers)
{
    const char *dir = getenv("TMPDIR");
    snprintf(g_tmp[slot], sizeof g_tmp[slot], "%s/pe_bench_modes_%ld_%s.safetensors",
             dir && *dir ? dir : "/tmp", (long)getpid(), name);
    md_mlp_spec sp = {.in = in,
                      .hidden = hidden,
                      .out = out,
                      .layers = layers,
                      .act = MD_ACT_RELU,
                      .init = MD_INIT_NORMAL,
                      .seed = 1234};
    pe_err err = {{0}};
    if (md_mlp_write(&sp, g_tmp[slot], &err) != PE_OK) {
        fprintf(stderr, "bench_modes: cannot write the %s model: %s\n", name, err.msg);
        return -1;
    }
    return 0;
}

static void remove_model(int slot)
{
    if (g_tmp[slot][0])
        remove(g_tmp[slot]);
    g_tmp[slot][0] = '\0';
}

static int load_model(int slot, md_mlp *m)
{
    pe_err err = {{0}};
    if (md_mlp_load(g_tmp[slot], m, &err) != PE_OK) {
        fprintf(stderr, "bench_modes: cannot load %s: %s\n", g_tmp[slot], err.msg);
        return -1;
    }
    return 0;
}

/* ---- raw compute: plain threads running a stage's forward, no engine ----------------- */

typedef struct raw_job {
    const md_mlp *m;
    int first, last; /* layers [first, last) */
    int tp, t;       /* rank t's shards of a tp-way split (tp = 1: whole layers) */
    size_t rows;
    int gemm_only;   /* 1: each layer's GEMM, bias and activation, no collective (TP ideal) */
} raw_job;

typedef struct raw_team raw_team;

typedef struct raw_thread {
    raw_team *team;
    int dev_id;
    raw_job job;
    rt_binding bind;
    pthread_t th;
    pe_status status;    /* written by the thread, read by main after a barrier */
    char msg[PE_ERR_LEN];
    double *times_us;    /* (max_iters): each forward of the last round */
    /* the thread's own device state */
    be_device *dev;
    md_stage st;
    md_stage_scratch sc;
    float *x, *y;        /* device (rows, st.in), (rows, st.out) */
} raw_thread;

struct raw_team {
    int n;
    raw_thread *th; /* (n) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go_ahead;   /* under mu: 0 wait, 1 run, -1 quit (not every thread started) */
    pthread_barrier_t go, done; /* n + 1 parties: the threads and main */
    int iters, stop;            /* set by main before `go` */
    int max_iters;
};

/* TP ideal: what md_stage_forward computes on this rank's shard, layer by layer (GEMM, bias,
 * activation) without the all-reduce / all-gather. A ROW layer's partial sums (rows, out)
 * have the full width the next layer reads, so every shape stays the real one. */
static pe_status raw_gemm_only(raw_thread *me)
{
    const be_ops *ops = be_host_ops();
    const size_t rows = me->job.rows;
    const float *cur = me->x;
    for (int k = 0; k < me->st.nlayers; k++) {
        const md_stage_layer *l = &me->st.layers[k];
        float *dst = cur == me->sc.a ? me->sc.b : me->sc.a;
        pe_status s = ops->gemm(me->dev, 0, 1, rows, l->out_t, l->in_t, 1.0f, cur, l->in_t,
                                l->w, l->in_t, 0.0f, dst, l->out_t);
        if (s == PE_OK)
            s = ops->bias_add(me->dev, dst, l->b, rows, l->out_t);
        if (s == PE_OK && l->act == MD_ACT_RELU)
            s = ops->relu(me->dev, dst, rows * l->out_t);
        if (s == PE_OK && l->act == MD_ACT_GELU)
            s = ops->gelu(me->dev, dst, rows * l->out_t);
        if (s != PE_OK)
            return s;
        cur = dst;
    }
    return PE_OK;
}

static pe_status raw_forward(raw_thread *me)
{
    if (me->job.gemm_only)
        return raw_gemm_only(me);
    return md_stage_forward(be_host_ops(), me->dev, NULL, 1, &me->st, &me->sc, me->x, me->y,
                            me->job.rows, NULL);
}

static pe_status raw_setup(raw_thread *me, pe_err *err)
{
    const be_ops *ops = be_host_ops();
    const raw_job *j = &me->job;
    pe_status s = rt_topology_bind_self(g_topo, &me->bind, err);
    if (s == PE_OK)
        s = ops->open(me->dev_id, &me->dev, err);
    if (s != PE_OK)
        return s;
    md_shard_kind *kinds = calloc((size_t)(j->last - j->first), sizeof *kinds);
    if (!kinds)
        return pe_fail(err, PE_ENOMEM, "out of memory");
    s = md_plan_tp(j->m, j->first, j->last, j->tp, kinds, err);
    if (s == PE_OK)
        s = md_stage_build(ops, me->dev, j->m, j->first, j->last, kinds, j->t, j->tp,
                           PE_DTYPE_FP32, NULL, &me->st, err);
    free(kinds);
    if (s != PE_OK)
        return s;
    void *x = NULL, *y = NULL;
    s = md_scratch_reserve(ops, me->dev, &me->st, j->tp, j->rows, &me->sc);
    if (s == PE_OK)
        s = ops->alloc(me->dev, j->rows * me->st.in * sizeof(float), &x);
    me->x = x;
    if (s == PE_OK)
        s = ops->alloc(me->dev, j->rows * me->st.out * sizeof(float), &y);
    me->y = y;
    float *host = s == PE_OK ? malloc(j->rows * me->st.in * sizeof *host) : NULL;
    if (s == PE_OK && !host)
        s = PE_ENOMEM;
    if (host) {
        fill_input(host, j->rows * me->st.in, 7);
        s = ops->copy_h2d(me->dev, me->x, host, j->rows * me->st.in * sizeof *host);
        free(host);
    }
    for (int i = 0; s == PE_OK && i < 2; i++) /* warm-up: page faults, BLAS buffers */
        s = raw_forward(me);
    if (s != PE_OK)
        return pe_fail(err, s, "raw stage [%d, %d) at %zu rows: %s", j->first, j->last, j->rows,
                       ops->last_error(me->dev));
    return PE_OK;
}

static void raw_teardown(raw_thread *me)
{
    const be_ops *ops = be_host_ops();
    if (!me->dev)
        return;
    if (me->x)
        ops->free(me->dev, me->x);
    if (me->y)
        ops->free(me->dev, me->y);
    md_scratch_free(ops, me->dev, &me->sc);
    md_stage_free(ops, me->dev, &me->st);
    ops->close(me->dev);
    me->dev = NULL;
}

static void *raw_main(void *arg)
{
    raw_thread *me = arg;
    raw_team *team = me->team;
    pthread_mutex_lock(&team->mu);
    while (team->go_ahead == 0)
        pthread_cond_wait(&team->cv, &team->mu);
    int quit = team->go_ahead < 0;
    pthread_mutex_unlock(&team->mu);
    if (quit)
        return NULL;
    pe_err err = {{0}};
    me->status = raw_setup(me, &err);
    if (me->status != PE_OK)
        snprintf(me->msg, sizeof me->msg, "%s", err.msg);
    pthread_barrier_wait(&team->done);
    for (;;) {
        pthread_barrier_wait(&team->go);
        if (team->stop)
            break;
        for (int i = 0; me->status == PE_OK && i < team->iters; i++) {
            uint64_t t0 = rt_now_ns();
            pe_status s = raw_forward(me);
            me->times_us[i] = elapsed_us(t0);
            if (s != PE_OK) {
                me->status = s;
                snprintf(me->msg, sizeof me->msg, "raw forward failed: %s",
                         be_host_ops()->last_error(me->dev));
            }
        }
        pthread_barrier_wait(&team->done);
    }
    raw_teardown(me);
    return NULL;
}

static int raw_team_failed(raw_team *team)
{
    for (int i = 0; i < team->n; i++)
        if (team->th[i].status != PE_OK) {
            fprintf(stderr, "bench_modes: raw thread %d: %s\n", i, team->th[i].msg);
            return 1;
        }
    return 0;
}

static void raw_team_free(raw_team *team)
{
    for (int i = 0; i < team->n; i++)
        free(team->th[i].times_us);
    free(team->th);
    free(team);
}

static void raw_team_stop(raw_team *team)
{
    if (!team)
        return;
    team->stop = 1;
    pthread_barrier_wait(&team->go);
    for (int i = 0; i < team->n; i++)
        pthread_join(team->th[i].th, NULL);
    pthread_barrier_destroy(&team->go);
    pthread_barrier_destroy(&team->done);
    pthread_mutex_destroy(&team->mu);
    pthread_cond_destroy(&team->cv);
    raw_team_free(team);
}

/* Starts n threads, thread i on host device i running jobs[i], bound like n engine
 * workers; returns once every one has built its stage and warmed up (NULL on failure). */
static raw_team *raw_team_start(const raw_job *jobs, int n, int max_iters)
{
    raw_team *team = calloc(1, sizeof *team);
    rt_binding *plan = calloc((size_t)n, sizeof *plan);
    pe_err err = {{0}};
    if (!team || !plan || !(team->th = calloc((size_t)n, sizeof *team->th))) {
        fprintf(stderr, "bench_modes: out of memory for raw threads\n");
        free(plan);
        free(team);
        return NULL;
    }
    team->n = n;
    team->max_iters = max_iters;
    int ok = rt_topology_plan(g_topo, n, NULL, plan, &err) == PE_OK;
    for (int i = 0; ok && i < n; i++) {
        raw_thread *t = &team->th[i];
        t->team = team;
        t->dev_id = i;
        t->job = jobs[i];
        t->bind = plan[i];
        t->times_us = calloc((size_t)max_iters, sizeof *t->times_us);
        ok = t->times_us != NULL;
    }
    free(plan);
    if (!ok) {
        fprintf(stderr, "bench_modes: cannot plan raw threads: %s\n",
                err.msg[0] ? err.msg : "out of memory");
        raw_team_free(team);
        return NULL;
    }
    pthread_mutex_init(&team->mu, NULL);
    pthread_cond_init(&team->cv, NULL);
    pthread_barrier_init(&team->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&team->done, NULL, (unsigned)n + 1);
    int started = 0;
    while (started < n &&
           pthread_create(&team->th[started].th, NULL, raw_main, &team->th[started]) == 0)
        started++;
    pthread_mutex_lock(&team->mu);
    team->go_ahead = started == n ? 1 : -1;
    pthread_cond_broadcast(&team->cv);
    pthread_mutex_unlock(&team->mu);
    if (started < n) {
        fprintf(stderr, "bench_modes: cannot start raw thread %d\n", started);
        for (int i = 0; i < started; i++)
            pthread_join(team->th[i].th, NULL);
        team->n = n;
        pthread_barrier_destroy(&team->go);
        pthread_barrier_destroy(&team->done);
        pthread_mutex_destroy(&team->mu);
        pthread_cond_destroy(&team->cv);
        raw_team_free(team);
        return NULL;
    }
    pthread_barrier_wait(&team->done); /* every thread set up */
    if (raw_team_failed(team)) {
        raw_team_stop(team);
        return NULL;
    }
    return team;
}

/* One round: every thread runs iters forwards, all starting together. 0 or -1. */
static int raw_team_round(raw_team *team, int iters)
{
    team->iters = iters < team->max_iters ? iters : team->max_iters;
    pthread_barrier_wait(&team->go);
    pthread_barrier_wait(&team->done);
    return raw_team_failed(team) ? -1 : 0;
}

/* Busy time of thread i in the last round (sum of its forwards), microseconds. */
static double raw_busy_us(const raw_team *team, int i)
{
    return sum_of(team->th[i].times_us, team->iters);
}

/* ---- engines ------------------------------------------------------------------------------ */

static pe_engine *engine_open(const char *what, int slot, int ndev, int dp, int pp, int tp,
                              int m, pe_schedule sched, size_t trace_cap)
{
    static const int devs[] = {0, 1, 2, 3};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = ndev;
    cfg.devices = devs;
    cfg.dp = dp;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.microbatches = m;
    cfg.schedule = sched;
    cfg.bind_threads = 1;
    cfg.trace_capacity = trace_cap;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK) {
        fprintf(stderr, "bench_modes: %s: cannot create the engine: %s\n", what, pe_last_error());
        return NULL;
    }
    if (pe_engine_load(e, g_tmp[slot]) != PE_OK) {
        fprintf(stderr, "bench_modes: %s: cannot load %s: %s\n", what, g_tmp[slot],
                pe_engine_last_error(e));
        pe_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* Submits one request of `rows` rows per replica, waits for all; iters times.
 * Returns the samples per second, or -1 on failure. */
static double engine_dp_loop(pe_engine *e, int replicas, size_t rows, size_t in_f,
                             size_t out_f, int iters, const float *in, float *out,
                             uint64_t *sub, uint64_t *fin)
{
    uint64_t t0 = rt_now_ns();
    for (int it = 0; it < iters; it++) {
        if (sub)
            sub[it] = rt_now_ns();
        for (int r = 0; r < replicas; r++) {
            pe_request q = {.id = (uint64_t)it * (uint64_t)replicas + (uint64_t)r + 1,
                            .rows = rows,
                            .input = in + (size_t)r * rows * in_f,
                            .output = out + (size_t)r * rows * out_f};
            if (pe_submit(e, &q) != PE_OK) {
                fprintf(stderr, "bench_modes: submit: %s\n", pe_engine_last_error(e));
                return -1;
            }
        }
        for (int r = 0; r < replicas; r++) {
            pe_result res;
            if (pe_wait(e, &res) != PE_OK || res.status != PE_OK) {
                fprintf(stderr, "bench_modes: wait: %s\n", pe_engine_last_error(e));
                return -1;
            }
        }
        if (fin)
            fin[it] = rt_now_ns();
    }
    return (double)replicas * (double)rows * iters / (elapsed_us(t0) * 1e-6);
}

/* Splits submit -> result into: to the worker's COMPUTE start, the COMPUTE, and from its end
 * to pe_wait's return, with the trace clock mapped as in pp_stats_compute (window in *win). */
static int overhead_split(pe_engine *e, const uint64_t *sub, const uint64_t *done, int calls,
                          double *to_start, double *fwd, double *to_done, double *win)
{
    pe_trace_event *ev = NULL;
    size_t n = 0;
    if (pe_engine_trace(e, &ev, &n) != PE_OK) {
        fprintf(stderr, "bench_modes: trace: %s\n", pe_last_error());
        return -1;
    }
    double *f = malloc((size_t)calls * sizeof *f), *g = malloc((size_t)calls * sizeof *g);
    double *h = malloc((size_t)calls * sizeof *h);
    int found = 0;
    for (size_t k = 0; f && g && h && k < n; k++) {
        uint64_t id = ev[k].request;
        if (ev[k].kind != PE_TRACE_COMPUTE || id < 1 || id > (uint64_t)calls)
            continue;
        f[id - 1] = ev[k].start_us; /* one COMPUTE per request: 1 device */
        g[id - 1] = ev[k].end_us;
        found++;
    }
    int rc = found == calls ? 0 : -1;
    if (rc)
        fprintf(stderr, "bench_modes: overhead: %d of %d requests traced\n", found, calls);
    double lo = -INFINITY, hi = INFINITY;
    for (int i = 0; rc == 0 && i < calls; i++) {
        lo = fmax(lo, (double)sub[i] * 1e-3 - f[i]);
        hi = fmin(hi, (double)done[i] * 1e-3 - g[i]);
    }
    if (rc == 0) {
        double o = hi < lo ? lo : 0.5 * (lo + hi);
        for (int i = 0; i < calls; i++) {
            double s_us = (double)sub[i] * 1e-3, d_us = (double)done[i] * 1e-3;
            h[i] = d_us - (g[i] + o);
            g[i] -= f[i];
            f[i] += o - s_us;
        }
        *to_start = bu_median(f, (size_t)calls);
        *fwd = bu_median(g, (size_t)calls);
        *to_done = bu_median(h, (size_t)calls);
        *win = hi - lo;
    }
    free(f);
    free(g);
    free(h);
    free(ev);
    return rc;
}

/* Median duration of the COMPUTE events in e's trace (all workers), microseconds; -1. */
static double trace_compute_median(pe_engine *e)
{
    pe_trace_event *ev = NULL;
    size_t n = 0, k = 0;
    if (pe_engine_trace(e, &ev, &n) != PE_OK)
        return -1;
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; d && i < n; i++)
        if (ev[i].kind == PE_TRACE_COMPUTE)
            d[k++] = ev[i].end_us - ev[i].start_us;
    double v = d && k ? bu_median(d, k) : -1;
    free(d);
    free(ev);
    return v;
}

/* ---- DP(2) vs 1 device ---------------------------------------------------------------- */

static int section_dp(cJSON *root)
{
    const size_t rows = 64, in_f = 256, out_f = 1;
    const int iters = g_quick ? 60 : 400, trials = g_quick ? 1 : 5, warm = g_quick ? 5 : 20;
    const size_t trace_cap = (size_t)iters + 16; /* one trial's COMPUTE events per worker */
    cJSON *sec = cJSON_AddObjectToObject(root, "dp");
    printf("\n== DP(2) vs 1 device: MLP 256-256-256-256-1 relu, %zu rows per replica per "
           "iteration, %d iterations, best of %d trials ==\n",
           rows, iters, trials);
    note_load(sec, "load_start");
    int rc = -1;
    md_mlp m = {0};
    raw_team *r1 = NULL, *r2 = NULL;
    pe_engine *e1 = NULL, *e2 = NULL;
    float *in = malloc(2 * rows * in_f * sizeof *in), *out1 = calloc(2 * rows, sizeof *out1),
          *out2 = calloc(2 * rows, sizeof *out2);
    uint64_t *sub = calloc((size_t)iters, sizeof *sub), *fin = calloc((size_t)iters, sizeof *fin);
    if (!in || !out1 || !out2 || !sub || !fin || write_model(0, "dp", in_f, 256, out_f, 4) ||
        load_model(0, &m))
        goto done;
    fill_input(in, 2 * rows * in_f, 1);
    raw_job job = {.m = &m, .first = 0, .last = m.nlayers, .tp = 1, .rows = rows};
    raw_job jobs2[2] = {job, job};
    if (!(r1 = raw_team_start(&job, 1, iters)) || !(r2 = raw_team_start(jobs2, 2, iters)) ||
        !(e1 = engine_open("DP 1 device", 0, 1, 1, 1, 1, 1, PE_SCHED_NAIVE, trace_cap)) ||
        !(e2 = engine_open("DP dp=2", 0, 2, 2, 1, 1, 1, PE_SCHED_NAIVE, trace_cap)))
        goto done;
    if (engine_dp_loop(e1, 1, rows, in_f, out_f, warm, in, out1, NULL, NULL) < 0 ||
        engine_dp_loop(e2, 2, rows, in_f, out_f, warm, in, out2, NULL, NULL) < 0)
        goto done;
    double raw1 = 0, raw2 = 0, eng1 = 0, eng2 = 0, per_trial[8] = {0};
    cJSON *tr = cJSON_AddArrayToObject(sec, "trials");
    for (int k = 0; k < trials; k++) {
        if (raw_team_round(r1, iters) || raw_team_round(r2, iters))
            goto done;
        double t_raw1 = (double)rows * iters / (raw_busy_us(r1, 0) * 1e-6);
        double t_raw2 = 2.0 * (double)rows * iters /
                        (fmax(raw_busy_us(r2, 0), raw_busy_us(r2, 1)) * 1e-6);
        pe_engine_trace_clear(e1);
        pe_engine_trace_clear(e2);
        double t_e1 = engine_dp_loop(e1, 1, rows, in_f, out_f, iters, in, out1, sub, fin);
        double t_e2 = engine_dp_loop(e2, 2, rows, in_f, out_f, iters, in, out2, NULL, NULL);
        if (t_e1 < 0 || t_e2 < 0)
            goto done;
        raw1 = fmax(raw1, t_raw1);
        raw2 = fmax(raw2, t_raw2);
        eng1 = fmax(eng1, t_e1);
        eng2 = fmax(eng2, t_e2);
        per_trial[k] = t_e2 / t_e1;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "raw_1_samples_s", t_raw1);
        cJSON_AddNumberToObject(t, "raw_2_samples_s", t_raw2);
        cJSON_AddNumberToObject(t, "engine_1_samples_s", t_e1);
        cJSON_AddNumberToObject(t, "engine_dp2_samples_s", t_e2);
        cJSON_AddNumberToObject(t, "speedup", t_e2 / t_e1);
        cJSON_AddItemToArray(tr, t);
    }
    /* the last trial: the forward inside the engine against the raw one */
    double c1 = trace_compute_median(e1), c2 = trace_compute_median(e2);
    double to_start, in_fwd, to_done, win;
    if (overhead_split(e1, sub, fin, iters, &to_start, &in_fwd, &to_done, &win))
        goto done;
    double f1 = median_of(r1->th[0].times_us, iters), f2 = median_of(r2->th[0].times_us, iters);
    /* The same rows through both engines: a replica runs the whole model, so the bits match. */
    for (int r = 0; r < 2; r++)
        if (pe_infer(e1, in + (size_t)r * rows * in_f, rows, out1 + (size_t)r * rows) != PE_OK) {
            fprintf(stderr, "bench_modes: infer: %s\n", pe_engine_last_error(e1));
            goto done;
        }
    double diff = max_abs_diff(out1, out2, 2 * rows * out_f);

    double speedup = eng2 / eng1, ideal = raw2 / raw1;
    printf("  %-34s %14s %14s %10s\n", "", "engine", "raw (ideal)", "engine/raw");
    printf("  %-34s %14.0f %14.0f %10.3f\n", "1 device, samples/s", eng1, raw1, eng1 / raw1);
    printf("  %-34s %14.0f %14.0f %10.3f\n", "dp=2 (devices 0,1), samples/s", eng2, raw2,
           eng2 / raw2);
    printf("  %-34s %13.2fx %13.2fx %10.3f   target >= 1.70x  %s\n", "speedup dp=2 / 1 device",
           speedup, ideal, speedup / ideal, verdict(speedup >= 1.7));
    if (ideal < 1.8)
        printf("  note: 2 raw threads reach only %.2fx of one: other work holds a core, so the "
               "2-worker figures of this\n  run are unreliable; rerun on a quiet machine\n",
               ideal);
    cJSON_AddBoolToObject(sec, "contended", ideal < 1.8);
    printf("  speedup per trial (side by side):");
    for (int k = 0; k < trials; k++)
        printf(" %.2fx", per_trial[k]);
    printf("; median %.2fx\n", median_of(per_trial, trials));
    printf("  per iteration: engine 1 dev %.1f us, raw %.1f us; engine dp=2 %.1f us, raw "
           "(2 threads) %.1f us\n",
           rows / eng1 * 1e6, rows / raw1 * 1e6, 2 * rows / eng2 * 1e6, 2 * rows / raw2 * 1e6);
    printf("  forward alone (median, last trial): in the 1-device engine %.1f us vs raw %.1f us; "
           "in dp=2 %.1f us vs raw %.1f us\n",
           c1, f1, c2, f2);
    printf("  1-device engine, per iteration (medians, last trial): submit -> forward starts %.1f "
           "us, forward %.1f us,\n  its end -> pe_wait returns %.1f us (trace clock mapped "
           "within +-%.1f us)\n",
           to_start, in_fwd, to_done, 0.5 * win);
    printf("  output check: dp=2 vs 1 device, max |diff| = %g (of max |y| %g)\n", diff,
           max_abs(out1, 2 * rows));
    cJSON_AddNumberToObject(sec, "rows_per_replica", (double)rows);
    cJSON_AddNumberToObject(sec, "iterations", iters);
    cJSON_AddNumberToObject(sec, "engine_1_samples_s", eng1);
    cJSON_AddNumberToObject(sec, "engine_dp2_samples_s", eng2);
    cJSON_AddNumberToObject(sec, "raw_1_samples_s", raw1);
    cJSON_AddNumberToObject(sec, "raw_2_samples_s", raw2);
    cJSON_AddNumberToObject(sec, "speedup", speedup);
    cJSON_AddNumberToObject(sec, "speedup_median_of_trials", median_of(per_trial, trials));
    cJSON_AddNumberToObject(sec, "ideal_speedup", ideal);
    cJSON_AddNumberToObject(sec, "engine_over_ideal", speedup / ideal);
    cJSON_AddNumberToObject(sec, "engine_dp2_over_raw2", eng2 / raw2);
    cJSON_AddNumberToObject(sec, "target_speedup", 1.7);
    cJSON_AddBoolToObject(sec, "pass", speedup >= 1.7);
    cJSON_AddNumberToObject(sec, "max_abs_diff_vs_1_device", diff);
    cJSON_AddNumberToObject(sec, "engine_1_compute_median_us", c1);
    cJSON_AddNumberToObject(sec, "engine_dp2_compute_median_us", c2);
    cJSON_AddNumberToObject(sec, "raw_1_forward_median_us", f1);
    cJSON_AddNumberToObject(sec, "raw_2_forward_median_us", f2);
    cJSON_AddNumberToObject(sec, "engine_1_submit_to_compute_us", to_start);
    cJSON_AddNumberToObject(sec, "engine_1_compute_end_to_result_us", to_done);
    note_load(sec, "load_end");
    rc = 0;
done:
    pe_engine_destroy(e1);
    pe_engine_destroy(e2);
    raw_team_stop(r1);
    raw_team_stop(r2);
    md_mlp_free(&m);
    remove_model(0);
    free(in);
    free(out1);
    free(out2);
    free(sub);
    free(fin);
    return rc;
}

/* ---- PP(2): gpipe and stream, m = 4 and 8, vs naive -------------------------------------- */

typedef struct pp_config {
    const char *name;
    pe_schedule sched;
    int m;
    pe_engine *e;
    float *out;                  /* (256, 2048) */
    uint64_t *submit_ns, *done_ns; /* (iters) per measured request */
} pp_config;

typedef struct pp_stats {
    double total_us;     /* median wall time, pe_submit -> pe_wait's return */
    double first_us;     /* median first result: last stage's first COMPUTE end - submit */
    double dispatch_us;  /* median submit -> the request's first trace event */
    double bubble;       /* 1 - busy / (pp * span), over all requests */
    double window_us;    /* width of the trace-clock calibration window */
    double kind_us[PP_STAGES][PE_TRACE_CLOCK_WAIT + 1]; /* mean per request, by stage and kind */
} pp_stats;

/* The trace clock is the engine's (microseconds since its creation, origin unknown here),
 * the submit times are rt_now_ns(). Both are CLOCK_MONOTONIC, so rt = trace + o for one
 * constant o. Every event of request i lies inside [submit_i, done_i], so
 *   max_i(submit_i - first event start_i) <= o <= min_i(done_i - last event end_i);
 * o is taken as the middle of that window and its width is reported. */
static int pp_stats_compute(const pp_config *c, int iters, pp_stats *st)
{
    pe_trace_event *ev = NULL;
    size_t n = 0;
    if (pe_engine_trace(c->e, &ev, &n) != PE_OK) {
        fprintf(stderr, "bench_modes: %s: trace: %s\n", c->name, pe_last_error());
        return -1;
    }
    const size_t ni = (size_t)iters;
    double *first = calloc(ni, sizeof *first), *start = calloc(ni, sizeof *start);
    double *total = calloc(ni, sizeof *total), *disp = calloc(ni, sizeof *disp);
    double lo = -INFINITY, hi = INFINITY, busy = 0, span = 0;
    memset(st, 0, sizeof *st);
    int rc = first && start && total && disp ? 0 : -1;
    for (int i = 0; rc == 0 && i < iters; i++) {
        double s_us = (double)c->submit_ns[i] * 1e-3, d_us = (double)c->done_ns[i] * 1e-3;
        double f = INFINITY, e_end = -INFINITY, c_lo = INFINITY, c_hi = -INFINITY;
        double last_first = INFINITY;
        int computes = 0;
        for (size_t k = 0; k < n; k++) {
            const pe_trace_event *x = &ev[k];
            if (x->request != (uint64_t)i + 1000 || x->kind == PE_TRACE_COLLECTIVE)
                continue;
            f = fmin(f, x->start_us);
            e_end = fmax(e_end, x->end_us);
            if (x->p >= 0 && x->p < PP_STAGES && (int)x->kind <= (int)PE_TRACE_CLOCK_WAIT)
                st->kind_us[x->p][x->kind] += (x->end_us - x->start_us) / iters;
            if (x->kind != PE_TRACE_COMPUTE)
                continue;
            computes++;
            busy += x->end_us - x->start_us;
            c_lo = fmin(c_lo, x->start_us);
            c_hi = fmax(c_hi, x->end_us);
            if (x->p == PP_STAGES - 1)
                last_first = fmin(last_first, x->end_us);
        }
        if (computes != PP_STAGES * c->m) {
            fprintf(stderr, "bench_modes: %s: request %d has %d COMPUTE events, expected %d "
                            "(trace full?)\n", c->name, i, computes, PP_STAGES * c->m);
            rc = -1;
            break;
        }
        span += c_hi - c_lo;
        lo = fmax(lo, s_us - f);
        hi = fmin(hi, d_us - e_end);
        first[i] = last_first - s_us; /* + o below */
        start[i] = f - s_us;
        total[i] = d_us - s_us;
    }
    if (rc == 0) {
        if (hi < lo)
            printf("  warning: %s: trace clock window is empty (%.1f us); using its low end\n",
                   c->name, hi - lo);
        double o = hi < lo ? lo : 0.5 * (lo + hi);
        for (int i = 0; i < iters; i++) {
            first[i] += o;
            disp[i] = start[i] + o;
        }
        st->total_us = median_of(total, iters);
        st->first_us = median_of(first, iters);
        st->dispatch_us = median_of(disp, iters);
        st->bubble = 1.0 - busy / (PP_STAGES * span);
        st->window_us = hi - lo;
    }
    free(first);
    free(start);
    free(total);
    free(disp);
    free(ev);
    return rc;
}

static int pp_request(pp_config *c, const float *in, size_t rows, uint64_t id,
                      uint64_t *submit_ns, uint64_t *done_ns)
{
    pe_request q = {.id = id, .rows = rows, .input = in, .output = c->out};
    pe_result res;
    uint64_t t0 = rt_now_ns();
    if (pe_submit(c->e, &q) != PE_OK || pe_wait(c->e, &res) != PE_OK || res.status != PE_OK) {
        fprintf(stderr, "bench_modes: %s: request failed: %s\n", c->name,
                pe_engine_last_error(c->e));
        return -1;
    }
    if (submit_ns) {
        *submit_ns = t0;
        *done_ns = rt_now_ns();
    }
    return 0;
}

#define PP_ROWS_N 3
static const size_t pp_rows[PP_ROWS_N] = {256, 64, 32}; /* 256 / m for m = 1, 4, 8 */

static int pp_rows_index(int m)
{
    for (int i = 0; i < PP_ROWS_N; i++)
        if (pp_rows[i] == 256 / (size_t)m)
            return i;
    return 0;
}

static int section_pp(cJSON *root)
{
    const size_t batch = 256, width = 2048;
    const int iters = g_quick ? 2 : 6, warm = 1;
    enum { NCFG = 5 };
    pp_config cfg[NCFG] = {{"naive", PE_SCHED_NAIVE, 1, NULL, NULL, NULL, NULL},
                           {"gpipe m=4", PE_SCHED_GPIPE, 4, NULL, NULL, NULL, NULL},
                           {"gpipe m=8", PE_SCHED_GPIPE, 8, NULL, NULL, NULL, NULL},
                           {"stream m=4", PE_SCHED_STREAM, 4, NULL, NULL, NULL, NULL},
                           {"stream m=8", PE_SCHED_STREAM, 8, NULL, NULL, NULL, NULL}};
    cJSON *sec = cJSON_AddObjectToObject(root, "pp");
    printf("\n== PP(2): MLP 8 x 2048 relu, batch %zu, one request per iteration, %d iterations "
           "(medians), devices 0,1 ==\n",
           batch, iters);
    note_load(sec, "load_start");
    int rc = -1, first_layer[PP_STAGES + 1];
    md_mlp m = {0};
    raw_team *alone[PP_STAGES][PP_ROWS_N] = {{NULL}}, *both[PP_ROWS_N] = {NULL};
    double *t_alone[PP_STAGES][PP_ROWS_N] = {{NULL}}, *t_both[PP_ROWS_N] = {NULL};
    float *in = malloc(batch * width * sizeof *in);
    pe_err err = {{0}};
    if (!in || write_model(1, "pp", width, width, width, 8) || load_model(1, &m))
        goto done;
    fill_input(in, batch * width, 2);
    if (md_plan_stages(&m, PP_STAGES, NULL, first_layer, &err) != PE_OK) {
        fprintf(stderr, "bench_modes: plan stages: %s\n", err.msg);
        goto done;
    }
    for (int r = 0; r < PP_ROWS_N; r++) {
        raw_job jb[PP_STAGES];
        for (int p = 0; p < PP_STAGES; p++) {
            jb[p] = (raw_job){.m = &m, .first = first_layer[p], .last = first_layer[p + 1],
                              .tp = 1, .rows = pp_rows[r]};
            if (!(alone[p][r] = raw_team_start(&jb[p], 1, 1)) ||
                !(t_alone[p][r] = calloc((size_t)iters, sizeof(double))))
                goto done;
        }
        if (!(both[r] = raw_team_start(jb, PP_STAGES, 1)) ||
            !(t_both[r] = calloc((size_t)iters, sizeof(double))))
            goto done;
    }
    for (int c = 0; c < NCFG; c++) {
        pp_config *k = &cfg[c];
        k->out = malloc(batch * width * sizeof *k->out);
        k->submit_ns = calloc((size_t)iters, sizeof *k->submit_ns);
        k->done_ns = calloc((size_t)iters, sizeof *k->done_ns);
        if (!k->out || !k->submit_ns || !k->done_ns ||
            !(k->e = engine_open(k->name, 1, 2, 1, PP_STAGES, 1, k->m, k->sched, 4096)))
            goto done;
        pe_engine_info info;
        if (pe_engine_info_get(k->e, &info) == PE_OK &&
            memcmp(info.stage_first_layer, first_layer, sizeof first_layer) != 0)
            printf("  warning: %s: the engine's stages differ from md_plan_stages'\n", k->name);
        for (int w = 0; w < warm; w++)
            if (pp_request(k, in, batch, (uint64_t)w + 1, NULL, NULL))
                goto done;
        pe_engine_trace_clear(k->e);
    }
    /* Interleaved: each iteration runs every raw measurement and one request per config,
     * raw first on even iterations and engines first on odd ones (no order bias). */
    for (int i = 0; i < iters; i++) {
        for (int half = 0; half < 2; half++) {
            if ((half ^ (i & 1)) == 1) {
                for (int c = 0; c < NCFG; c++)
                    if (pp_request(&cfg[c], in, batch, (uint64_t)i + 1000, &cfg[c].submit_ns[i],
                                   &cfg[c].done_ns[i]))
                        goto done;
                continue;
            }
            for (int r = 0; r < PP_ROWS_N; r++) {
                for (int p = 0; p < PP_STAGES; p++) {
                    if (raw_team_round(alone[p][r], 1))
                        goto done;
                    t_alone[p][r][i] = alone[p][r]->th[0].times_us[0];
                }
                if (raw_team_round(both[r], 1))
                    goto done;
                t_both[r][i] = fmax(both[r]->th[0].times_us[0], both[r]->th[1].times_us[0]);
            }
        }
    }

    double raw[PP_STAGES][PP_ROWS_N], raw_both[PP_ROWS_N];
    printf("  raw stage time (md_stage_forward on one thread, alone; median of %d):\n", iters);
    printf("  %6s %11s %11s %12s %12s %15s %17s\n", "rows", "stage0 ms", "stage1 ms",
           "s0 us/row", "s1 us/row", "us/row vs 256", "both at once ms");
    cJSON *jraw = cJSON_AddArrayToObject(sec, "raw_stage");
    for (int r = 0; r < PP_ROWS_N; r++) {
        for (int p = 0; p < PP_STAGES; p++)
            raw[p][r] = median_of(t_alone[p][r], iters);
        raw_both[r] = median_of(t_both[r], iters);
        double per_row = (raw[0][r] + raw[1][r]) / (double)pp_rows[r];
        double per_row256 = (raw[0][0] + raw[1][0]) / (double)pp_rows[0];
        printf("  %6zu %11.2f %11.2f %12.2f %12.2f %14.2fx %17.2f\n", pp_rows[r],
               raw[0][r] * 1e-3, raw[1][r] * 1e-3, raw[0][r] / (double)pp_rows[r],
               raw[1][r] / (double)pp_rows[r], per_row / per_row256, raw_both[r] * 1e-3);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rows", (double)pp_rows[r]);
        cJSON_AddNumberToObject(o, "stage0_us", raw[0][r]);
        cJSON_AddNumberToObject(o, "stage1_us", raw[1][r]);
        cJSON_AddNumberToObject(o, "per_row_cost_vs_256", per_row / per_row256);
        cJSON_AddNumberToObject(o, "both_concurrently_slowest_us", raw_both[r]);
        cJSON_AddItemToArray(jraw, o);
    }
    double busy_core = raw_both[0] / fmax(raw[0][0], raw[1][0]);
    if (busy_core > 1.15)
        printf("  note: both stages at once take %.2fx the slower stage alone: other work holds "
               "a core, so the\n  2-worker figures of this run are unreliable; rerun on a quiet "
               "machine\n",
               busy_core);
    cJSON_AddBoolToObject(sec, "contended", busy_core > 1.15);
    double slow32 = (raw[0][2] + raw[1][2]) / 32.0 / ((raw[0][0] + raw[1][0]) / 256.0);
    printf("  small micro-batches make the GEMMs themselves slower: at 32 rows a row costs "
           "%.2fx what it costs at 256 rows\n  (64 rows: %.2fx). The ideals below use the raw "
           "times at 256/m rows, so this loss is in the ideal, not charged to the engine.\n",
           slow32, (raw[0][1] + raw[1][1]) / 64.0 / ((raw[0][0] + raw[1][0]) / 256.0));
    cJSON_AddNumberToObject(sec, "per_row_cost_32_vs_256", slow32);

    pp_stats st[NCFG];
    for (int c = 0; c < NCFG; c++)
        if (pp_stats_compute(&cfg[c], iters, &st[c]))
            goto done;
    printf("\n  %-11s %9s %9s %6s %5s  %9s %9s %6s %5s  %8s %7s %7s %9s\n", "config", "total ms",
           "ideal ms", "ratio", "", "first ms", "ideal ms", "ratio", "", "vs naive", "bubble",
           "theory", "dispatch");
    cJSON *jc = cJSON_AddArrayToObject(sec, "configs");
    for (int c = 0; c < NCFG; c++) {
        const pp_config *k = &cfg[c];
        int ri = pp_rows_index(k->m);
        double slowest = fmax(raw[0][ri], raw[1][ri]);
        double ideal_total = (k->m + PP_STAGES - 1) * slowest;
        double ideal_first = raw[0][ri] + raw[1][ri];
        double theory = (double)(PP_STAGES - 1) / (k->m + PP_STAGES - 1);
        double rt = st[c].total_us / ideal_total, rf = st[c].first_us / ideal_first;
        int ok_t = rt <= TARGET_RATIO, ok_f = rf <= TARGET_RATIO;
        printf("  %-11s %9.2f %9.2f %6.3f %5s  %9.2f %9.2f %6.3f %5s  %7.2fx %7.3f %7.3f %7.0fus\n",
               k->name, st[c].total_us * 1e-3, ideal_total * 1e-3, rt, verdict(ok_t),
               st[c].first_us * 1e-3, ideal_first * 1e-3, rf, verdict(ok_f),
               st[0].total_us / st[c].total_us, st[c].bubble, theory, st[c].dispatch_us);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "config", k->name);
        cJSON_AddNumberToObject(o, "microbatches", k->m);
        cJSON_AddNumberToObject(o, "total_us", st[c].total_us);
        cJSON_AddNumberToObject(o, "ideal_total_us", ideal_total);
        cJSON_AddNumberToObject(o, "total_over_ideal", rt);
        cJSON_AddBoolToObject(o, "total_pass", ok_t);
        cJSON_AddNumberToObject(o, "first_result_us", st[c].first_us);
        cJSON_AddNumberToObject(o, "ideal_first_result_us", ideal_first);
        cJSON_AddNumberToObject(o, "first_over_ideal", rf);
        cJSON_AddBoolToObject(o, "first_pass", ok_f);
        cJSON_AddNumberToObject(o, "speedup_vs_naive", st[0].total_us / st[c].total_us);
        cJSON_AddNumberToObject(o, "bubble", st[c].bubble);
        cJSON_AddNumberToObject(o, "bubble_theory", theory);
        cJSON_AddNumberToObject(o, "dispatch_us", st[c].dispatch_us);
        cJSON_AddNumberToObject(o, "clock_window_us", st[c].window_us);
        cJSON_AddItemToArray(jc, o);
    }
    double win = 0;
    for (int c = 0; c < NCFG; c++)
        win = fmax(win, st[c].window_us);
    printf("  target: ratio <= %.2f for the total and the first result. ideal total = (m+p-1) x "
           "slowest raw stage at 256/m rows;\n  ideal first = sum of the raw stages at 256/m "
           "rows. total = pe_submit -> pe_wait (wall). first = end of the last stage's first\n"
           "  COMPUTE - pe_submit, the trace clock mapped onto rt_now_ns within +-%.0f us (each "
           "request's events lie between its\n  submit and its result). bubble = 1 - sum "
           "COMPUTE / (p x (last COMPUTE end - first COMPUTE start)); dispatch = submit ->\n"
           "  the request's first trace event (gpipe: stage 1's first clock wait; naive and "
           "stream: stage 0's first COMPUTE,\n  which comes after its input copy).\n",
           TARGET_RATIO, 0.5 * win);
    printf("\n  where each stage's time goes, mean per request in ms (from the trace): compute "
           "(per micro-batch vs the raw\n  stage alone) / recv (includes waiting for the previous "
           "stage) / send / gpipe clock wait:\n");
    cJSON *jb = cJSON_AddArrayToObject(sec, "breakdown_ms");
    for (int c = 0; c < NCFG; c++) {
        printf("  %-11s", cfg[c].name);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "config", cfg[c].name);
        for (int p = 0; p < PP_STAGES; p++) {
            const double *k = st[c].kind_us[p];
            double vs_raw = k[PE_TRACE_COMPUTE] / cfg[c].m / raw[p][pp_rows_index(cfg[c].m)];
            printf("   stage %d: %7.2f (%4.2fx raw) / %5.2f / %4.2f / %6.2f", p,
                   k[PE_TRACE_COMPUTE] * 1e-3, vs_raw, k[PE_TRACE_RECV] * 1e-3,
                   k[PE_TRACE_SEND] * 1e-3, k[PE_TRACE_CLOCK_WAIT] * 1e-3);
            static const char *const names[] = {"compute", "recv", "send", "collective",
                                                "clock_wait"};
            cJSON *sp = cJSON_CreateObject();
            for (int q = 0; q <= (int)PE_TRACE_CLOCK_WAIT; q++)
                cJSON_AddNumberToObject(sp, names[q], k[q] * 1e-3);
            cJSON_AddNumberToObject(sp, "compute_vs_raw", vs_raw);
            cJSON_AddItemToObject(o, p ? "stage1" : "stage0", sp);
        }
        printf("\n");
        cJSON_AddItemToArray(jb, o);
    }
    /* gpipe and stream at the same m run the same GEMMs: the same bits. Across m the GEMMs
     * have other row counts, and OpenBLAS's sums depend on M, so naive is matched to 1e-5. */
    double scale = max_abs(cfg[0].out, batch * width), worst = 0;
    for (int c = 1; c < NCFG; c++)
        worst = fmax(worst, max_abs_diff(cfg[0].out, cfg[c].out, batch * width));
    int same4 = !memcmp(cfg[1].out, cfg[3].out, batch * width * sizeof(float));
    int same8 = !memcmp(cfg[2].out, cfg[4].out, batch * width * sizeof(float));
    printf("  output check: gpipe == stream bit for bit: m=4 %s, m=8 %s; micro-batched vs naive "
           "max |diff| %g of max |y| %g%s\n",
           same4 ? "yes" : "NO", same8 ? "yes" : "NO", worst, scale,
           worst <= 1e-5 * scale ? "" : " (MORE THAN 1e-5 OF THE SCALE)");
    cJSON_AddBoolToObject(sec, "gpipe_equals_stream_bits", same4 && same8);
    cJSON_AddNumberToObject(sec, "max_abs_diff_vs_naive", worst);
    note_load(sec, "load_end");
    rc = 0;
done:
    for (int c = 0; c < NCFG; c++) {
        pe_engine_destroy(cfg[c].e);
        free(cfg[c].out);
        free(cfg[c].submit_ns);
        free(cfg[c].done_ns);
    }
    for (int r = 0; r < PP_ROWS_N; r++) {
        for (int p = 0; p < PP_STAGES; p++) {
            raw_team_stop(alone[p][r]);
            free(t_alone[p][r]);
        }
        raw_team_stop(both[r]);
        free(t_both[r]);
    }
    md_mlp_free(&m);
    remove_model(1);
    free(in);
    return rc;
}

/* ---- TP(2) vs 1 device at batch 1 ------------------------------------------------------ */

static int infer_timed(pe_engine *e, const float *in, float *out, double *us)
{
    uint64_t t0 = rt_now_ns();
    if (pe_infer(e, in, 1, out) != PE_OK) {
        fprintf(stderr, "bench_modes: infer: %s\n", pe_engine_last_error(e));
        return -1;
    }
    *us = elapsed_us(t0);
    return 0;
}

static int section_tp(cJSON *root)
{
    const size_t width = 4096;
    const int iters = g_quick ? 5 : 30, warm = 2;
    cJSON *sec = cJSON_AddObjectToObject(root, "tp");
    printf("\n== TP(2) vs 1 device: MLP 8 x 4096 relu (512 MiB of weights), batch 1, %d "
           "forwards each (medians) ==\n",
           iters);
    note_load(sec, "load_start");
    int rc = -1;
    md_mlp m = {0};
    raw_team *ideal = NULL, *raw1 = NULL;
    pe_engine *e1 = NULL, *e2 = NULL;
    float *in = malloc(width * sizeof *in), *out1 = malloc(width * sizeof *out1),
          *out2 = malloc(width * sizeof *out2);
    const size_t ni = (size_t)iters;
    double *t_e1 = calloc(ni, sizeof(double)), *t_e2 = calloc(ni, sizeof(double));
    double *t_id = calloc(ni, sizeof(double)), *t_r1 = calloc(ni, sizeof(double));
    double *t_rank[2] = {calloc(ni, sizeof(double)), calloc(ni, sizeof(double))};
    pe_trace_event *ev = NULL;
    size_t nev = 0;
    if (!in || !out1 || !out2 || !t_e1 || !t_e2 || !t_id || !t_r1 || !t_rank[0] ||
        !t_rank[1] ||
        write_model(2, "tp", width, width, width, 8) || load_model(2, &m))
        goto done;
    fill_input(in, width, 3);
    raw_job jid[2] = {{.m = &m, .first = 0, .last = 8, .tp = 2, .t = 0, .rows = 1, .gemm_only = 1},
                      {.m = &m, .first = 0, .last = 8, .tp = 2, .t = 1, .rows = 1, .gemm_only = 1}};
    raw_job j1 = {.m = &m, .first = 0, .last = 8, .tp = 1, .rows = 1};
    if (!(ideal = raw_team_start(jid, 2, 1)) || !(raw1 = raw_team_start(&j1, 1, 1)) ||
        !(e1 = engine_open("TP 1 device", 2, 1, 1, 1, 1, 1, PE_SCHED_NAIVE, 0)) ||
        !(e2 = engine_open("TP tp=2", 2, 2, 1, 1, 2, 1, PE_SCHED_NAIVE, 1024)))
        goto done;
    double dummy;
    for (int w = 0; w < warm; w++)
        if (infer_timed(e1, in, out1, &dummy) || infer_timed(e2, in, out2, &dummy))
            goto done;
    pe_engine_trace_clear(e2);
    for (int i = 0; i < iters; i++) {
        for (int step = 0; step < 4; step++) { /* the order rotates: no position bias */
            int bad = 0;
            switch ((step + i) % 4) {
            case 0: bad = infer_timed(e1, in, out1, &t_e1[i]); break;
            case 1: bad = infer_timed(e2, in, out2, &t_e2[i]); break;
            case 2: /* each rank's own forward time; the slower one is the pair's latency */
                bad = raw_team_round(ideal, 1);
                t_id[i] = fmax(ideal->th[0].times_us[0], ideal->th[1].times_us[0]);
                t_rank[0][i] = ideal->th[0].times_us[0];
                t_rank[1][i] = ideal->th[1].times_us[0];
                break;
            default:
                bad = raw_team_round(raw1, 1);
                t_r1[i] = raw1->th[0].times_us[0];
            }
            if (bad)
                goto done;
        }
    }
    if (pe_engine_trace(e2, &ev, &nev) != PE_OK) {
        fprintf(stderr, "bench_modes: trace: %s\n", pe_last_error());
        goto done;
    }
    /* per rank: COMPUTE (the stage, collectives included) and the all-reduces inside it */
    double coll[2] = {0, 0}, comp_med = 0;
    int ncomp[2] = {0, 0};
    double *comp_t = calloc(nev ? nev : 1, sizeof *comp_t);
    if (!comp_t)
        goto done;
    for (size_t k = 0; k < nev; k++) {
        int w = ev[k].worker;
        if (w < 0 || w > 1)
            continue;
        if (ev[k].kind == PE_TRACE_COLLECTIVE)
            coll[w] += ev[k].end_us - ev[k].start_us;
        if (ev[k].kind == PE_TRACE_COMPUTE) {
            if (w == 0)
                comp_t[ncomp[0]] = ev[k].end_us - ev[k].start_us;
            ncomp[w]++;
        }
    }
    comp_med = median_of(comp_t, ncomp[0]);
    free(comp_t);
    double coll_per = ncomp[0] ? coll[0] / ncomp[0] : 0;
    double coll_per1 = ncomp[1] ? coll[1] / ncomp[1] : 0;
    double rank0 = median_of(t_rank[0], iters), rank1 = median_of(t_rank[1], iters);

    double l1 = median_of(t_e1, iters), l2 = median_of(t_e2, iters);
    double li = median_of(t_id, iters), lr = median_of(t_r1, iters);
    double ratio = l2 / li;
    double scale = max_abs(out1, width), diff = max_abs_diff(out1, out2, width);
    printf("  %-52s %10.3f ms\n", "1 device engine (pe_infer)", l1 * 1e-3);
    printf("  %-52s %10.3f ms   engine/raw %.3f\n", "1 device raw (md_stage_forward, 1 thread)",
           lr * 1e-3, l1 / lr);
    printf("  %-52s %10.3f ms\n", "tp=2 engine (pe_infer)", l2 * 1e-3);
    printf("  %-52s %10.3f ms\n", "tp=2 ideal (2 threads, shard GEMVs, no collective)", li * 1e-3);
    printf("  %-52s %10.3f      target <= %.2f  %s\n", "tp=2 engine / ideal", ratio, TARGET_RATIO,
           verdict(ratio <= TARGET_RATIO));
    printf("  %-52s %10.3f      (issue 3 expects ~0.67; this machine's own ratio is next)\n",
           "tp=2 engine / 1 device engine", l2 / l1);
    printf("  %-52s %10.3f\n", "tp=2 ideal / 1 device raw (the hardware's ratio)", li / lr);
    printf("  tp=2 engine, worker 0: COMPUTE median %.3f ms, inside it the all-reduces take "
           "%.0f us per forward\n  (rank 1: %.0f us; 4 per forward, mostly waiting for the "
           "other rank); outside COMPUTE: %.0f us\n  (queues, wake-ups, copies). Ideal per "
           "rank: rank 0 %.3f ms, rank 1 %.3f ms.\n",
           comp_med * 1e-3, coll_per, coll_per1, l2 - comp_med, rank0 * 1e-3, rank1 * 1e-3);
    printf("  ideal = each rank's layers as GEMV + bias + relu on its own shard (md_plan_tp, "
           "md_stage_build), both ranks\n  at once on 2 bound threads, no all-reduce: the "
           "latency of the slower rank, median per forward.\n");
    printf("  output check: tp=2 vs 1 device, max |diff| = %g (max |y| %g)\n", diff, scale);
    cJSON_AddNumberToObject(sec, "engine_1_us", l1);
    cJSON_AddNumberToObject(sec, "raw_1_us", lr);
    cJSON_AddNumberToObject(sec, "engine_tp2_us", l2);
    cJSON_AddNumberToObject(sec, "ideal_tp2_us", li);
    cJSON_AddNumberToObject(sec, "engine_tp2_over_ideal", ratio);
    cJSON_AddNumberToObject(sec, "target_ratio", TARGET_RATIO);
    cJSON_AddBoolToObject(sec, "pass", ratio <= TARGET_RATIO);
    cJSON_AddNumberToObject(sec, "engine_tp2_over_engine_1", l2 / l1);
    cJSON_AddNumberToObject(sec, "ideal_tp2_over_raw_1", li / lr);
    cJSON_AddNumberToObject(sec, "engine_1_over_raw_1", l1 / lr);
    cJSON_AddNumberToObject(sec, "tp2_compute_median_us", comp_med);
    cJSON_AddNumberToObject(sec, "tp2_allreduce_per_forward_us", coll_per);
    cJSON_AddNumberToObject(sec, "tp2_allreduce_per_forward_rank1_us", coll_per1);
    cJSON_AddNumberToObject(sec, "ideal_rank0_us", rank0);
    cJSON_AddNumberToObject(sec, "ideal_rank1_us", rank1);
    cJSON_AddNumberToObject(sec, "max_abs_diff_vs_1_device", diff);
    note_load(sec, "load_end");
    rc = 0;
done:
    free(ev);
    pe_engine_destroy(e1);
    pe_engine_destroy(e2);
    raw_team_stop(ideal);
    raw_team_stop(raw1);
    md_mlp_free(&m);
    remove_model(2);
    free(in);
    free(out1);
    free(out2);
    free(t_e1);
    free(t_e2);
    free(t_id);
    free(t_r1);
    free(t_rank[0]);
    free(t_rank[1]);
    return rc;
}

/* ---- engine overhead: an empty forward through the queues ------------------------------- */

/* The machine's price of one hop to a sleeping thread: two threads hand a token back and
 * forth through a mutex and condition variable; each hand-over wakes a sleeper. */
typedef struct hop_pingpong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn, rounds;
} hop_pingpong;

static void *hop_peer(void *arg)
{
    hop_pingpong *h = arg;
    for (int i = 0; i < h->rounds; i++) {
        pthread_mutex_lock(&h->mu);
        while (h->turn != 1)
            pthread_cond_wait(&h->cv, &h->mu);
        h->turn = 0;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

/* Median microseconds of one sleep-and-wake hop (half a round trip), or -1. */
static double hop_wake_us(int rounds)
{
    hop_pingpong h = {.turn = 0, .rounds = rounds};
    double *t = calloc((size_t)rounds, sizeof *t);
    pthread_t th;
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    double v = -1;
    if (t && pthread_create(&th, NULL, hop_peer, &h) == 0) {
        for (int i = 0; i < rounds; i++) {
            uint64_t t0 = rt_now_ns();
            pthread_mutex_lock(&h.mu);
            h.turn = 1;
            pthread_cond_signal(&h.cv);
            while (h.turn != 0)
                pthread_cond_wait(&h.cv, &h.mu);
            pthread_mutex_unlock(&h.mu);
            t[i] = elapsed_us(t0);
        }
        pthread_join(th, NULL);
        v = 0.5 * bu_median(t, (size_t)rounds);
    }
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    free(t);
    return v;
}

static int section_overhead(cJSON *root)
{
    const int calls = g_quick ? 2000 : 20000, warm = g_quick ? 200 : 1000;
    cJSON *sec = cJSON_AddObjectToObject(root, "overhead");
    printf("\n== engine overhead: 1 device, a 1-layer 4x4 MLP, 1 row, %d round trips ==\n", calls);
    note_load(sec, "load_start");
    int rc = -1;
    md_mlp m = {0};
    raw_team *raw = NULL;
    pe_engine *e = NULL;
    double *t_inf = calloc((size_t)calls, sizeof(double));
    double *t_sw = calloc((size_t)calls, sizeof(double));
    uint64_t *sub = calloc((size_t)calls, sizeof *sub), *fin = calloc((size_t)calls, sizeof *fin);
    float in[4] = {0.5f, -0.25f, 1.0f, 0.125f}, out[4];
    if (!t_inf || !t_sw || !sub || !fin || write_model(3, "tiny", 4, 4, 4, 1) ||
        load_model(3, &m))
        goto done;
    raw_job j = {.m = &m, .first = 0, .last = 1, .tp = 1, .rows = 1};
    if (!(raw = raw_team_start(&j, 1, 1000)) ||
        !(e = engine_open("overhead", 3, 1, 1, 1, 1, 1, PE_SCHED_NAIVE,
                          (size_t)calls + (size_t)warm + 64)))
        goto done;
    double dummy;
    for (int i = 0; i < warm; i++)
        if (infer_timed(e, in, out, &dummy))
            goto done;
    for (int i = 0; i < calls; i++)
        if (infer_timed(e, in, out, &t_inf[i]))
            goto done;
    pe_engine_trace_clear(e);
    for (int i = 0; i < calls; i++) {
        pe_request q = {.id = (uint64_t)i + 1, .rows = 1, .input = in, .output = out};
        pe_result res;
        sub[i] = rt_now_ns();
        if (pe_submit(e, &q) != PE_OK || pe_wait(e, &res) != PE_OK || res.status != PE_OK) {
            fprintf(stderr, "bench_modes: submit/wait: %s\n", pe_engine_last_error(e));
            goto done;
        }
        fin[i] = rt_now_ns();
        t_sw[i] = (double)(fin[i] - sub[i]) * 1e-3;
    }
    double to_start, in_fwd, to_done, win;
    if (overhead_split(e, sub, fin, calls, &to_start, &in_fwd, &to_done, &win) ||
        raw_team_round(raw, 1000))
        goto done;
    double hop = hop_wake_us(g_quick ? 1000 : 5000);
    double fwd = median_of(raw->th[0].times_us, 1000);
    double med = bu_median(t_inf, (size_t)calls), p99 = bu_quantile(t_inf, (size_t)calls, 0.99);
    double smed = bu_median(t_sw, (size_t)calls), sp99 = bu_quantile(t_sw, (size_t)calls, 0.99);
    printf("  %-44s %9s %9s\n", "", "median", "p99");
    printf("  %-44s %7.2fus %7.2fus   target median <= 20 us  %s\n", "pe_infer round trip",
           med, p99, verdict(med <= 20.0));
    printf("  %-44s %7.2fus %7.2fus\n", "pe_submit + pe_wait round trip", smed, sp99);
    printf("  %-44s %7.2fus\n", "  submit -> the worker starts the forward", to_start);
    printf("  %-44s %7.2fus\n", "  the forward in the worker (trace COMPUTE)", in_fwd);
    printf("  %-44s %7.2fus\n", "  its end -> pe_wait returns", to_done);
    printf("  %-44s %7.3fus\n", "raw forward (md_stage_forward, 1 row)", fwd);
    printf("  %-44s %7.2fus\n", "one hop to a sleeping thread (mutex+condvar)", hop);
    printf("  a round trip is: client -> worker queue -> worker -> completion -> client (with one\n"
           "  device the client dispatches itself, no router hop): 2 hand-offs, each a wake-up\n"
           "  when its consumer is parked; the client spins 30 us before it parks. The split is\n"
           "  the trace clock mapped within +-%.1f us (medians of each part, so they need not\n"
           "  add up to the round trip's median).\n",
           0.5 * win);
    cJSON_AddNumberToObject(sec, "calls", calls);
    cJSON_AddNumberToObject(sec, "infer_median_us", med);
    cJSON_AddNumberToObject(sec, "infer_p99_us", p99);
    cJSON_AddNumberToObject(sec, "submit_wait_median_us", smed);
    cJSON_AddNumberToObject(sec, "submit_wait_p99_us", sp99);
    cJSON_AddNumberToObject(sec, "raw_forward_us", fwd);
    cJSON_AddNumberToObject(sec, "submit_to_compute_start_us", to_start);
    cJSON_AddNumberToObject(sec, "compute_us", in_fwd);
    cJSON_AddNumberToObject(sec, "compute_end_to_result_us", to_done);
    cJSON_AddNumberToObject(sec, "split_window_us", win);
    cJSON_AddNumberToObject(sec, "sleep_wake_hop_us", hop);
    cJSON_AddNumberToObject(sec, "target_median_us", 20.0);
    cJSON_AddBoolToObject(sec, "pass", med <= 20.0);
    note_load(sec, "load_end");
    rc = 0;
done:
    pe_engine_destroy(e);
    raw_team_stop(raw);
    md_mlp_free(&m);
    remove_model(3);
    free(t_inf);
    free(t_sw);
    free(sub);
    free(fin);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    g_quick = args.quick;
    pe_err err = {{0}};
    if (rt_topology_load(&g_topo, &err) != PE_OK) {
        fprintf(stderr, "bench_modes: %s\n", err.msg);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    if (!root) {
        rt_topology_free(g_topo);
        return 1;
    }
    printf("bench_modes: host backend, %d cores, %s run; engine vs raw compute measured "
           "side by side\n",
           rt_topology_cores(g_topo), g_quick ? "quick" : "full");
    cJSON_AddBoolToObject(root, "quick", g_quick);
    cJSON_AddNumberToObject(root, "cores", rt_topology_cores(g_topo));
    const char *only = NULL; /* --only dp|pp|tp|overhead: one section (reruns) */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
    static const struct {
        const char *name;
        int (*run)(cJSON *root);
    } sections[] = {{"dp", section_dp},
                    {"pp", section_pp},
                    {"tp", section_tp},
                    {"overhead", section_overhead}};
    uint64_t t0 = rt_now_ns();
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        if (only && strcmp(only, sections[i].name) != 0)
            continue;
        uint64_t ts = rt_now_ns();
        failed |= sections[i].run(root) != 0;
        printf("  (section %s: %.1f s)\n", sections[i].name, elapsed_us(ts) * 1e-6);
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "bench_modes: --only %s: no such section; use dp, pp, tp or overhead\n",
                only);
        failed = 1;
    }
    double secs = elapsed_us(t0) * 1e-6;
    printf("\nbench_modes: %d PASS, %d MISS%s, %.1f s\n", g_pass, g_miss,
           failed ? ", SOME SECTIONS FAILED (see errors above)" : "", secs);
    cJSON_AddNumberToObject(root, "pass_count", g_pass);
    cJSON_AddNumberToObject(root, "miss_count", g_miss);
    cJSON_AddBoolToObject(root, "errors", failed);
    cJSON_AddNumberToObject(root, "seconds", secs);
    if (args.json_path && bu_write_json(root, args.json_path) != 0)
        failed = 1;
    cJSON_Delete(root);
    rt_topology_free(g_topo);
    for (int i = 0; i < MAX_TMP; i++)
        remove_model(i);
    return failed ? 1 : 0;
}
