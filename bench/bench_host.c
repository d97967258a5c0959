/* bench_host.c: the host backend on one device's cores, side by side in one run:
 *   - memory read bandwidth: a vectorized sum over 1 GiB on every thread of the device, 4
 *     streams per thread (the ceiling of a decode step, which reads every weight once);
 *   - Linear FLOP/s at M = 1, 8, 16, 32, 128, 1024 for K = 768 and N = 2304, 3072, 50257 (GPT-2
 *     small's qkv, MLP and LM head), by the three ways of part 3 of the design:
 *       blis   BLIS's bli_sgemm_ex with an rntm_t of T threads (one call; libblis.so.4 is
 *              dlopen'ed with RTLD_DEEPBIND, so its BLAS symbols never meet OpenBLAS's);
 *       slice  single-threaded OpenBLAS sgemm calls over the pool on slices of N (the
 *              host backend's path beyond the GEMV without AVX-512), fp32 W; slice16:
 *              bf16 W widened per tile;
 *       own    the host backend's GEMV kernels at every M (its path at every M with
 *              AVX-512, for small M with AVX2), fp32 W; own16: bf16 W read as bf16;
 *       amx16  bf16 W on AMX tiles (hb_amx.h; linear's path for bf16 W where the CPU has
 *              them), NaN elsewhere;
 *     W rotates through copies that together exceed the caches, so every call reads W
 *     from memory, as a forward pass does; the ways take turns, one call each per round;
 *   - the GEMV's bytes of W per second, fp32 and bf16, M = 1 and 8, as a ratio to the
 *     bandwidth;
 *   - attention per decode step (one layer, 12 query heads of 64 over 12 KV heads, GPT-2's,
 *     or 4, llama-110m's; fp32 and bf16 KV) at positions 10 and 1000, for one sequence and
 *     for 8, on T threads and on one, each step timed alone (best and median of 300);
 *   - the pool's empty region: back to back (helpers spinning) and after 1 ms idle
 *     (helpers parked).
 * Every figure is the best of several repetitions (the least disturbed by other processes
 * on a shared machine) with the median beside it in the JSON; the load average is printed
 * before and after.
 *
 *   bench_host [--threads T] [--quick] [--attention] [--json FILE]
 *     (T: default every core; --attention: the attention figures alone)
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/host/hb_amx.h"
#include "backend/host/hb_internal.h"
#include "backend/host/hb_simd.h"
#include "bench_util.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "runtime/clock.h"
#include "runtime/topology.h"

#ifdef PE_HAVE_BLIS_H
#include <blis.h>
#endif

#define MAXREPS 9

static const be_ops *ops;
static be_device *dev;
static int threads;
static int quick;

/* ---- timing ---------------------------------------------------------------------------- */

typedef struct timing {
    double best, median; /* seconds per call */
} timing;

typedef void (*bench_fn)(void *arg);

/* Runs fn once to warm up, then repeats until `budget` seconds or MAXREPS runs. */
static timing measure(bench_fn fn, void *arg, double budget)
{
    double t[MAXREPS];
    fn(arg);
    int n = 0;
    double start = rt_now_us();
    while (n < MAXREPS && (n < 3 || (rt_now_us() - start) * 1e-6 < budget)) {
        double t0 = rt_now_us();
        fn(arg);
        t[n++] = (rt_now_us() - t0) * 1e-6;
    }
    timing r = {bu_min(t, (size_t)n), bu_median(t, (size_t)n)};
    return r;
}

static void loadavg(char *buf, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, (int)len, f))
            buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* ---- memory bandwidth ------------------------------------------------------------------- */

typedef struct sum_job {
    const float *x;
    size_t n;
    float partial[HB_MAX_THREADS * 16]; /* one cache line per thread */
} sum_job;

static void sum_slice(void *arg, size_t b, size_t e, int thread)
{
    sum_job *j = arg;
    /* pieces are multiples of 64 floats, so every slice starts 256-byte aligned */
    const float *x = j->x + b * 64;
    size_t n = (e - b) * 64;
    j->partial[thread * 16] += bu_sum(x, n);
}

static void run_sum(void *arg)
{
    sum_job *j = arg;
    size_t lines = j->n / 64, per = (lines + (size_t)threads - 1) / (size_t)threads;
    hb_for(dev, lines, per, sum_slice, j);
}

/* ---- Linear ----------------------------------------------------------------------------- */

typedef enum {
    WAY_BLIS = 0,
    WAY_SLICE,
    WAY_SLICE16,
    WAY_OWN,
    WAY_OWN16,
    WAY_AMX16,
    NWAYS
} way;
static const char *const way_names[NWAYS] = {"blis", "slice", "slice16", "own", "own16", "amx16"};

#ifdef PE_HAVE_BLIS_H
typedef __typeof__(&bli_sgemm_ex) blis_sgemm_ex_fn;
static blis_sgemm_ex_fn blis_sgemm;
static void *blis_lib;
#endif

typedef struct lin_bench {
    way w;
    size_t M, N, K;
    const float *x;     /* (M, K) */
    const uint16_t *xh; /* (M, K) */
    float *Wf;          /* (copies, N, K) */
    uint16_t *Wh;       /* (copies, N, K) */
    size_t copies, next;
    float *y; /* (M, N) */
    pe_status status;
} lin_bench;

static void run_linear(void *arg)
{
    lin_bench *b = arg;
    size_t c = b->next++ % b->copies, wn = b->N * b->K;
    const float *Wf = b->Wf + c * wn;
    const uint16_t *Wh = b->Wh + c * wn;
    switch (b->w) {
    case WAY_BLIS:
#ifdef PE_HAVE_BLIS_H
    {
        rntm_t rntm = BLIS_RNTM_INITIALIZER;
        bli_rntm_set_num_threads(threads, &rntm);
        float one = 1.0f, zero = 0.0f;
        /* row-major y(M, N) = x(M, K) W(N, K)^T: W^T read with strides (1, K) */
        blis_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, (dim_t)b->M, (dim_t)b->N,
                   (dim_t)b->K, &one, (float *)b->x, (inc_t)b->K, 1, (float *)Wf, 1,
                   (inc_t)b->K, &zero, b->y, (inc_t)b->N, 1, NULL, &rntm);
    }
#endif
        break;
    case WAY_SLICE:
        b->status |= hb_linear_with(dev, HB_LINEAR_SGEMM, PE_DTYPE_FP32, b->M, b->N, b->K, b->x,
                                    Wf, NULL, BE_ACT_NONE, b->y, 0, NULL);
        break;
    case WAY_SLICE16:
        b->status |= hb_linear_with(dev, HB_LINEAR_SGEMM, PE_DTYPE_BF16, b->M, b->N, b->K,
                                    b->xh, Wh, NULL, BE_ACT_NONE, b->y, 0, NULL);
        break;
    case WAY_OWN:
        b->status |= hb_linear_with(dev, HB_LINEAR_GEMV, PE_DTYPE_FP32, b->M, b->N, b->K, b->x,
                                    Wf, NULL, BE_ACT_NONE, b->y, 0, NULL);
        break;
    case WAY_OWN16:
        b->status |= hb_linear_with(dev, HB_LINEAR_GEMV, PE_DTYPE_BF16, b->M, b->N, b->K,
                                    b->xh, Wh, NULL, BE_ACT_NONE, b->y, 0, NULL);
        break;
    case WAY_AMX16:
        b->status |= hb_linear_with(dev, HB_LINEAR_AMX, PE_DTYPE_BF16, b->M, b->N, b->K,
                                    b->xh, Wh, NULL, BE_ACT_NONE, b->y, 0, NULL);
        break;
    default:
        break;
    }
}

static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) * 0x1.0p-24 - 0.5);
    }
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "bench_host: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* ---- attention -------------------------------------------------------------------------- */

typedef struct attn_bench {
    be_kv kv;
    be_attn a;
    pe_status status;
} attn_bench;

static void run_attention(void *arg)
{
    attn_bench *b = arg;
    b->status |= ops->attention(dev, &b->kv, 0, &b->a);
}

/* One layer's decode step of nseq sequences, each at position pos: 12 query heads of 64
 * over kvh KV heads (12: GPT-2's; 4: llama-110m's groups of 3). */
static timing time_attention(pe_dtype dt, int32_t pos, int nseq, int kvh)
{
    const int H = 12, hd = 64, B = 16;
    const int32_t per_seq = (pos + 1 + B - 1) / B;
    attn_bench b = {.kv = {.dtype = dt,
                           .shape = {.nlayers = 1, .kv_heads = kvh, .block_tokens = B,
                                     .head_dim = hd, .nblocks = (size_t)(per_seq * nseq)}}};
    size_t elems = b.kv.shape.nblocks * pe_k_kv_block_elems(b.kv.shape);
    float *vals = xalloc(elems * sizeof *vals);
    fill(vals, elems, 7);
    if (dt == PE_DTYPE_BF16) {
        uint16_t *h = xalloc(elems * sizeof *h);
        for (size_t i = 0; i < elems; i++)
            h[i] = pe_k_to_bf16(vals[i]);
        free(vals);
        b.kv.base = h;
    } else {
        b.kv.base = vals;
    }
    int32_t *chunks = xalloc((size_t)nseq * PE_K_CHUNK_FIELDS * sizeof *chunks);
    int32_t *bt = xalloc((size_t)(per_seq * nseq) * sizeof *bt);
    for (int s = 0; s < nseq; s++) {
        int32_t *c = chunks + s * PE_K_CHUNK_FIELDS;
        c[PE_K_CHUNK_ROW0] = s;
        c[PE_K_CHUNK_N] = 1;
        c[PE_K_CHUNK_POS0] = pos;
        c[PE_K_CHUNK_BT] = s * per_seq;
    }
    for (int32_t i = 0; i < per_seq * nseq; i++)
        bt[i] = i;
    size_t width = (size_t)H * hd;
    float *q = xalloc((size_t)nseq * width * sizeof *q), *out = xalloc((size_t)nseq * width * 4);
    fill(q, (size_t)nseq * width, 8);
    b.a = (be_attn){.rows = (size_t)nseq, .q = q, .q_stride = width, .out = out,
                    .out_stride = width, .heads = H, .scale = 0.125f, .nchunks = (size_t)nseq,
                    .chunks = chunks, .block_tables = bt, .max_keys = pos + 1};
    /* each step timed alone: a step in which another process took one of the pool's
     * cores waits for it (milliseconds on a busy machine); the best step is what the
     * cores do, the median what this machine gave */
    enum { STEPS = 300 };
    double *steps = xalloc(STEPS * sizeof *steps);
    run_attention(&b);
    for (int r = 0; r < STEPS; r++) {
        double t0 = rt_now_us();
        run_attention(&b);
        steps[r] = (rt_now_us() - t0) * 1e-6;
    }
    timing t = {bu_min(steps, STEPS), bu_median(steps, STEPS)};
    free(steps);
    if (b.status != PE_OK)
        fprintf(stderr, "attention failed: %s\n", ops->last_error(dev));
    free(b.kv.base);
    free(chunks);
    free(bt);
    free(q);
    free(out);
    return t;
}

/* ---- the pool's region ------------------------------------------------------------------ */

static void nothing(void *arg, size_t b, size_t e, int thread)
{
    (void)arg;
    (void)b;
    (void)e;
    (void)thread;
}

/* Median and best time of an empty region over all threads; idle_us between regions. */
static timing time_region(int count, int idle_us)
{
    double *t = xalloc((size_t)count * sizeof *t);
    for (int i = 0; i < count; i++) {
        if (idle_us)
            usleep((useconds_t)idle_us);
        double t0 = rt_now_us();
        hb_for(dev, (size_t)threads, 1, nothing, NULL);
        t[i] = (rt_now_us() - t0) * 1e-6;
    }
    timing r = {bu_min(t, (size_t)count), bu_median(t, (size_t)count)};
    free(t);
    return r;
}

/* ---- main ------------------------------------------------------------------------------- */

static cJSON *timing_json(timing t, double work, const char *unit)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "best_s", t.best);
    cJSON_AddNumberToObject(o, "median_s", t.median);
    if (unit) {
        char key[64];
        snprintf(key, sizeof key, "best_%s", unit);
        cJSON_AddNumberToObject(o, key, work / t.best);
        snprintf(key, sizeof key, "median_%s", unit);
        cJSON_AddNumberToObject(o, key, work / t.median);
    }
    return o;
}

static int bind_main_thread(int want, char *cores, size_t len)
{
    rt_topology *t = NULL;
    pe_err err = {{0}};
    snprintf(cores, len, "unbound");
    if (rt_topology_load(&t, &err) != PE_OK)
        return want > 0 ? want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int n = want > 0 ? want : rt_topology_cores(t);
    rt_binding b;
    if (rt_topology_plan_cores(t, 1, NULL, n, &b, &err) == PE_OK &&
        rt_topology_bind_self(t, &b, &err) == PE_OK)
        snprintf(cores, len, "PUs %s", b.cpulist);
    rt_topology_free(t);
    return n;
}

/* The bandwidth of a vectorized sum over 1 GiB on every thread; returns the best bytes/s. */
static double bench_bandwidth(cJSON *root)
{
    sum_job *sj = calloc(1, sizeof *sj);
    sj->n = (quick ? (size_t)256 : (size_t)1024) << 20 >> 2; /* floats */
    sj->x = xalloc(sj->n * sizeof(float));
    fill((float *)sj->x, sj->n, 1);
    timing tb = measure(run_sum, sj, quick ? 1.0 : 3.0);
    double bytes = (double)sj->n * sizeof(float), bw = bytes / tb.best;
    printf("\nmemory read bandwidth (sum over %.0f MiB, %d threads): %.2f GB/s best, %.2f "
           "median\n",
           bytes / (1 << 20), threads, bw * 1e-9, bytes / tb.median * 1e-9);
    cJSON_AddItemToObject(root, "bandwidth", timing_json(tb, bytes, "bytes_per_s"));
    free((void *)sj->x);
    free(sj);
    return bw;
}

/* 1 when BLIS could be loaded (its sgemm through dlopen). */
static int load_blis(void)
{
#ifdef PE_HAVE_BLIS_H
    blis_lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (blis_lib)
        blis_sgemm = (blis_sgemm_ex_fn)dlsym(blis_lib, "bli_sgemm_ex");
    if (!blis_sgemm)
        printf("(BLIS: libblis.so.4 not loadable: %s)\n", dlerror());
    return blis_sgemm != NULL;
#else
    printf("(BLIS: built without blis.h; install libblis-pthread-dev)\n");
    return 0;
#endif
}

/* One (M, N) row of the Linear table: every way, GFLOP/s; the GEMV's bytes/s at N = 50257
 * and M = 1 or 8 go to gemv_bytes[M == 8][bf16]. */
static void bench_linear_shape(lin_bench *b, int have_blis, cJSON *jl, double gemv_bytes[2][2])
{
    const size_t M = b->M, N = b->N, K = b->K, wn = N * K;
    double flop = 2.0 * (double)M * (double)N * (double)K, gf[NWAYS];
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "M", (double)M);
    cJSON_AddNumberToObject(row, "N", (double)N);
    cJSON_AddNumberToObject(row, "K", (double)K);
    /* the ways take turns, one call each per round, so that a busy moment of the shared
     * machine falls on all of them alike */
    double times[NWAYS][MAXREPS];
    int ok[NWAYS], rounds = 0;
    for (int w = 0; w < NWAYS; w++) {
        ok[w] = (w != WAY_BLIS || have_blis) && (w != WAY_AMX16 || hb_amx_available());
        b->w = (way)w;
        if (ok[w])
            run_linear(b); /* warm-up */
    }
    double start = rt_now_us();
    while (rounds < MAXREPS && (rounds < 3 || (rt_now_us() - start) * 1e-6 < (quick ? 2.0 : 8.0))) {
        for (int w = 0; w < NWAYS; w++) {
            if (!ok[w])
                continue;
            b->w = (way)w;
            b->status = PE_OK;
            /* BLIS's threads inherit this thread's cores: while the pool runs, the pool pins
             * it to the first core, so BLIS runs with the pool stopped */
            if (w == WAY_BLIS)
                ops->set_compute_threads(dev, 1);
            double t0 = rt_now_us();
            run_linear(b);
            times[w][rounds] = (rt_now_us() - t0) * 1e-6;
            if (w == WAY_BLIS)
                ops->set_compute_threads(dev, threads);
            if (b->status != PE_OK) {
                fprintf(stderr, "%s failed: %s\n", way_names[w], ops->last_error(dev));
                ok[w] = 0;
            }
        }
        rounds++;
    }
    int fastest = -1;
    for (int w = 0; w < NWAYS; w++) {
        gf[w] = NAN;
        if (!ok[w])
            continue;
        timing t = {bu_min(times[w], (size_t)rounds), bu_median(times[w], (size_t)rounds)};
        gf[w] = flop / t.best * 1e-9;
        cJSON_AddItemToObject(row, way_names[w], timing_json(t, flop, "flop_per_s"));
        const int bf16_w = w == WAY_SLICE16 || w == WAY_OWN16 || w == WAY_AMX16;
        if (!bf16_w && (fastest < 0 || gf[w] > gf[fastest]))
            fastest = w;
        if (N == 50257 && (M == 1 || M == 8) && (w == WAY_OWN || w == WAY_OWN16))
            gemv_bytes[M == 8][w == WAY_OWN16] =
                (double)wn * (w == WAY_OWN16 ? 2.0 : 4.0) / t.best;
    }
    printf("%5zu %6zu | %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f | %-7s %.2f\n", M, N, gf[WAY_BLIS],
           gf[WAY_SLICE], gf[WAY_SLICE16], gf[WAY_OWN], gf[WAY_OWN16], gf[WAY_AMX16],
           fastest >= 0 ? way_names[fastest] : "-",
           fastest >= 0 ? gf[WAY_OWN] / gf[fastest] : NAN);
    cJSON_AddStringToObject(row, "fastest_fp32", fastest >= 0 ? way_names[fastest] : "none");
    cJSON_AddItemToArray(jl, row);
}

/* The Linear table over M and N (K = 768), then the GEMV against the bandwidth bw. */
static void bench_linear(cJSON *root, double bw)
{
    const int have_blis = load_blis();
    /* M = 16 and 32 place the AVX2 switch from the GEMV kernel to the sgemm slices, and
     * AVX-512's from its decode kernel to its prefill one (24) */
    const size_t Ms[] = {1, 8, 16, 32, 128, 1024}, Ns[] = {2304, 3072, 50257}, K = 768;
    cJSON *jl = cJSON_AddArrayToObject(root, "linear");
    printf("\nLinear y(M, N) = x(M, K) W(N, K)^T, K = %zu, GFLOP/s (best of repetitions); "
           "W from memory\n",
           K);
    printf("%5s %6s | %8s %8s %8s %8s %8s %8s | %-7s %s\n", "M", "N", "blis", "slice",
           "slice16", "own", "own16", "amx16", "fastest", "own/fastest(fp32)");
    double gemv_bytes[2][2] = {{0}}; /* [M = 1, 8][fp32, bf16]: best bytes/s, N = 50257 */
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
        size_t N = Ns[ni], wn = N * K;
        /* copies of W that together exceed 256 MiB (fp32): every call reads W from memory */
        size_t copies = (((size_t)256 << 20) + wn * 4 - 1) / (wn * 4);
        lin_bench b = {.N = N, .K = K, .copies = copies};
        b.Wf = xalloc(copies * wn * sizeof(float));
        b.Wh = xalloc(copies * wn * sizeof(uint16_t));
        fill(b.Wf, copies * wn, 2 + ni);
        for (size_t i = 0; i < copies * wn; i++)
            b.Wh[i] = pe_k_to_bf16(b.Wf[i]);
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            size_t M = Ms[mi];
            if (quick && M == 1024 && N > 3072)
                continue;
            float *x = xalloc(M * K * sizeof *x);
            uint16_t *xh = xalloc(M * K * sizeof *xh);
            fill(x, M * K, 3);
            for (size_t i = 0; i < M * K; i++)
                xh[i] = pe_k_to_bf16(x[i]);
            b.M = M;
            b.x = x;
            b.xh = xh;
            b.y = xalloc(M * N * sizeof(float));
            bench_linear_shape(&b, have_blis, jl, gemv_bytes);
            free(x);
            free(xh);
            free(b.y);
        }
        free(b.Wf);
        free(b.Wh);
    }

    printf("\nGEMV (own kernel), W (50257, 768) from memory: bytes of W per second / "
           "bandwidth\n");
    cJSON *jg = cJSON_AddArrayToObject(root, "gemv");
    for (int m = 0; m < 2; m++)
        for (int h = 0; h < 2; h++) {
            printf("  M = %d, %s W: %6.2f GB/s = %.2f of the bandwidth\n", m ? 8 : 1,
                   h ? "bf16" : "fp32", gemv_bytes[m][h] * 1e-9, gemv_bytes[m][h] / bw);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "M", m ? 8 : 1);
            cJSON_AddStringToObject(o, "dtype", h ? "bf16" : "fp32");
            cJSON_AddNumberToObject(o, "best_bytes_per_s", gemv_bytes[m][h]);
            cJSON_AddNumberToObject(o, "ratio_to_bandwidth", gemv_bytes[m][h] / bw);
            cJSON_AddItemToArray(jg, o);
        }
}

/* Attention's decode steps on one thread and on the device's threads. */
static void bench_attention(cJSON *root)
{
    printf("\nattention, one layer's decode step (12 query heads x 64 over 12 or 4 KV heads), "
           "us per call: best (median)\n");
    printf("%5s %5s %6s %4s | %17s %17s | %s\n", "seqs", "pos", "kv", "kvh", "1 thread",
           "T threads", "speedup (best)");
    cJSON *ja = cJSON_AddArrayToObject(root, "attention");
    const int32_t positions[] = {10, 1000};
    const int seqs[] = {1, 8}, kv_heads[] = {12, 4};
    for (int gi = 0; gi < 2; gi++)
        for (int si = 0; si < 2; si++)
            for (int pi = 0; pi < 2; pi++)
                for (int h = 0; h < 2; h++) {
                    pe_dtype dt = h ? PE_DTYPE_BF16 : PE_DTYPE_FP32;
                    const int kvh = kv_heads[gi];
                    ops->set_compute_threads(dev, 1);
                    timing t1 = time_attention(dt, positions[pi], seqs[si], kvh);
                    ops->set_compute_threads(dev, threads);
                    timing tt = time_attention(dt, positions[pi], seqs[si], kvh);
                    printf("%5d %5d %6s %4d | %7.1f (%7.1f) %7.1f (%7.1f) | %.2f\n", seqs[si],
                           positions[pi], h ? "bf16" : "fp32", kvh, t1.best * 1e6,
                           t1.median * 1e6, tt.best * 1e6, tt.median * 1e6, t1.best / tt.best);
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddNumberToObject(o, "seqs", seqs[si]);
                    cJSON_AddNumberToObject(o, "pos", positions[pi]);
                    cJSON_AddNumberToObject(o, "kv_heads", kvh);
                    cJSON_AddStringToObject(o, "kv", h ? "bf16" : "fp32");
                    cJSON_AddItemToObject(o, "one_thread", timing_json(t1, 0, NULL));
                    cJSON_AddItemToObject(o, "threads", timing_json(tt, 0, NULL));
                    cJSON_AddItemToArray(ja, o);
                }
}

static void bench_region(cJSON *root)
{
    timing hot = time_region(quick ? 2000 : 20000, 0);
    timing cold = time_region(quick ? 50 : 300, 1000);
    printf("\nempty parallel region over %d threads: %.2f us median (%.2f best) back to back, "
           "%.2f us median after 1 ms idle (helpers parked)\n",
           threads, hot.median * 1e6, hot.best * 1e6, cold.median * 1e6);
    cJSON *jp = cJSON_AddObjectToObject(root, "region");
    cJSON_AddItemToObject(jp, "back_to_back", timing_json(hot, 0, NULL));
    cJSON_AddItemToObject(jp, "after_idle_1ms", timing_json(cold, 0, NULL));
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    quick = args.quick;
    int want = 0, attention_only = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            want = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attention"))
            attention_only = 1;
    char cores[300], load0[128], load1[128];
    loadavg(load0, sizeof load0);
    threads = bind_main_thread(want, cores, sizeof cores);

    ops = be_host_ops();
    pe_err err = {{0}};
    if (ops->open(0, &dev, &err) != PE_OK || ops->set_compute_threads(dev, threads) != PE_OK) {
        fprintf(stderr, "bench_host: cannot open a host device with %d threads: %s %s\n",
                threads, err.msg, dev ? ops->last_error(dev) : "");
        return 1;
    }
    printf("bench_host: %d threads on %s, vector loops %s, AMX tiles %s, load average %s\n",
           threads, cores, hb_simd_get()->name,
           hb_amx_enabled() ? "yes (bf16 linear)" : hb_amx_available() ? "off" : "no", load0);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "threads", threads);
    cJSON_AddStringToObject(root, "cores", cores);
    cJSON_AddStringToObject(root, "simd", hb_simd_get()->name);
    cJSON_AddBoolToObject(root, "amx", hb_amx_enabled());
    cJSON_AddStringToObject(root, "loadavg_before", load0);

    if (!attention_only) {
        double bw = bench_bandwidth(root);
        bench_linear(root, bw);
    }
    bench_attention(root);
    if (!attention_only)
        bench_region(root);

    loadavg(load1, sizeof load1);
    printf("\nload average after: %s\n", load1);
    cJSON_AddStringToObject(root, "loadavg_after", load1);
    int rc = 0;
    if (args.json_path)
        rc = bu_write_json(root, args.json_path) != 0;
    cJSON_Delete(root);
    ops->close(dev);
#ifdef PE_HAVE_BLIS_H
    if (blis_lib)
        dlclose(blis_lib);
#endif
    return rc;
}
