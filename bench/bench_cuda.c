/* bench_cuda.c: the CUDA backend against the GPU's own ceilings, measured in the same run.
 *
 *   GEMM     TFLOP/s of our gemm (fp32) against cublasSgemm called directly on the same
 *            shapes; bf16 through cublasGemmEx directly (our backend has no bf16 op yet:
 *            reported as null, not guessed);
 *   MLP      one Linear-GELU-Linear forward (rows x H -> 4H -> H, torch weight layout)
 *            through the backend ops, TFLOP/s against its two GEMMs alone (target >= 80%);
 *   batch-1  the same forward with one row: weight bytes / time, against the device-to-
 *            device copy bandwidth ((read + write) bytes / time of cudaMemcpyAsync) (target
 *            >= 70%);
 *   peer     all-reduce on the peer path, 2 and 4 ranks (threads) on GPU 0, 4 KiB .. 64 MiB:
 *            latency and busbw = bytes / time * 2(n-1)/n (target: 16 KiB <= 20 us).
 * Device times come from CUDA events on the device's stream; each figure is the median of
 * several repetitions. Without a GPU it says so and exits 0.
 *
 *   bench_cuda [--quick] [--json FILE]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cb_internal.h" /* the device's stream, for event timing */
#include "bench_util.h"
#include "runtime/clock.h"

#define MAXREPS 9

static const be_ops *ops;

#define CUDA_OK(call)                                                                         \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "error: %s: %s\n", #call, cudaGetErrorString(e_));                \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define PE_OK_OR_DIE(dev, call)                                                               \
    do {                                                                                      \
        pe_status s_ = (call);                                                                \
        if (s_ != PE_OK) {                                                                    \
            fprintf(stderr, "error: %s: %s\n", #call, ops->last_error(dev));                  \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* ---- timing on the device's stream ---- */

typedef void (*work_fn)(void *ctx);

/* Median milliseconds of one call of fn, over reps repetitions of `iters` calls. */
static double time_ms(be_device *d, work_fn fn, void *ctx, int iters, int reps)
{
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    fn(ctx); /* warm-up: cuBLAS picks its kernels, caches fill */
    double t[MAXREPS];
    for (int k = 0; k < reps; k++) {
        CUDA_OK(cudaEventRecord(a, d->stream));
        for (int i = 0; i < iters; i++)
            fn(ctx);
        CUDA_OK(cudaEventRecord(b, d->stream));
        CUDA_OK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, a, b));
        t[k] = ms / iters;
    }
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    return bu_median(t, (size_t)reps);
}

static void *dev_alloc(be_device *d, size_t bytes, int pattern)
{
    void *p = NULL;
    PE_OK_OR_DIE(d, ops->alloc(d, bytes, &p));
    /* 0x3c bytes: fp32 ~0.0115, bf16 ~0.0115: finite, non-zero, no denormals */
    CUDA_OK(cudaMemsetAsync(p, pattern, bytes, d->stream));
    return p;
}

/* ---- GEMM ---- */

typedef struct gemm_ctx {
    be_device *d;
    cublasHandle_t direct; /* our own handle on the same stream */
    size_t M, N, K;
    void *A, *B, *C;
    int bf16;
} gemm_ctx;

static void gemm_ours(void *p)
{
    gemm_ctx *g = p;
    PE_OK_OR_DIE(g->d, ops->gemm(g->d, 0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, g->B, g->K,
                                 0.0f, g->C, g->N));
}

/* The same row-major product, C = A B^T, as cuBLAS sees it: C^T = B A^T. */
static void gemm_direct(void *p)
{
    gemm_ctx *g = p;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s;
    if (g->bf16)
        s = cublasGemmEx(g->direct, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->N, (int)g->M, (int)g->K,
                         &one, g->B, CUDA_R_16BF, (int)g->K, g->A, CUDA_R_16BF, (int)g->K, &zero,
                         g->C, CUDA_R_16BF, (int)g->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasSgemm(g->direct, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->N, (int)g->M, (int)g->K,
                        &one, g->B, (int)g->K, g->A, (int)g->K, &zero, g->C, (int)g->N);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: direct cuBLAS GEMM: %s\n", cublasGetStatusString(s));
        exit(1);
    }
}

static cJSON *bench_gemm(be_device *d, cublasHandle_t direct, size_t n, int reps)
{
    size_t es = sizeof(float);
    gemm_ctx g = {d, direct, n, n, n, NULL, NULL, NULL, 0};
    g.A = dev_alloc(d, n * n * es, 0x3c);
    g.B = dev_alloc(d, n * n * es, 0x3c);
    g.C = dev_alloc(d, n * n * es, 0);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    int iters = n >= 4096 ? 5 : 20;
    double ours = time_ms(d, gemm_ours, &g, iters, reps);
    double mine = time_ms(d, gemm_direct, &g, iters, reps);
    g.bf16 = 1; /* bf16 inputs fit in the fp32 buffers */
    double bf = time_ms(d, gemm_direct, &g, iters, reps);
    ops->free(d, g.A);
    ops->free(d, g.B);
    ops->free(d, g.C);
    double t_ours = flop / (ours * 1e-3) * 1e-12, t_direct = flop / (mine * 1e-3) * 1e-12;
    double t_bf = flop / (bf * 1e-3) * 1e-12;
    printf("gemm %5zu^3  fp32 ours %7.1f TFLOP/s  cublasSgemm %7.1f  (%.0f%%)   bf16 ours    n/a"
           "  cublasGemmEx %7.1f\n",
           n, t_ours, t_direct, 100.0 * t_ours / t_direct, t_bf);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", (double)n);
    cJSON_AddNumberToObject(o, "fp32_ours_tflops", t_ours);
    cJSON_AddNumberToObject(o, "fp32_cublas_tflops", t_direct);
    cJSON_AddNullToObject(o, "bf16_ours_tflops");
    cJSON_AddNumberToObject(o, "bf16_cublas_tflops", t_bf);
    return o;
}

/* ---- MLP forward: y = gelu(x W1^T + b1) W2^T + b2 ---- */

typedef struct mlp_ctx {
    be_device *d;
    size_t rows, H, F; /* F = 4H */
    float *x, *h, *y;  /* (rows, H), (rows, F), (rows, H) */
    float *w1, *b1;    /* (F, H), (F) */
    float *w2, *b2;    /* (H, F), (H) */
} mlp_ctx;

static void mlp_forward(void *p)
{
    mlp_ctx *m = p;
    be_device *d = m->d;
    PE_OK_OR_DIE(d, ops->gemm(d, 0, 1, m->rows, m->F, m->H, 1.0f, m->x, m->H, m->w1, m->H, 0.0f,
                              m->h, m->F));
    PE_OK_OR_DIE(d, ops->bias_add(d, m->h, m->b1, m->rows, m->F));
    PE_OK_OR_DIE(d, ops->gelu(d, m->h, m->rows * m->F));
    PE_OK_OR_DIE(d, ops->gemm(d, 0, 1, m->rows, m->H, m->F, 1.0f, m->h, m->F, m->w2, m->F, 0.0f,
                              m->y, m->H));
    PE_OK_OR_DIE(d, ops->bias_add(d, m->y, m->b2, m->rows, m->H));
}

static void mlp_gemms(void *p)
{
    mlp_ctx *m = p;
    be_device *d = m->d;
    PE_OK_OR_DIE(d, ops->gemm(d, 0, 1, m->rows, m->F, m->H, 1.0f, m->x, m->H, m->w1, m->H, 0.0f,
                              m->h, m->F));
    PE_OK_OR_DIE(d, ops->gemm(d, 0, 1, m->rows, m->H, m->F, 1.0f, m->h, m->F, m->w2, m->F, 0.0f,
                              m->y, m->H));
}

static void mlp_init(mlp_ctx *m, be_device *d, size_t rows, size_t H)
{
    m->d = d;
    m->rows = rows;
    m->H = H;
    m->F = 4 * H;
    size_t es = sizeof(float);
    m->x = dev_alloc(d, rows * H * es, 0x3c);
    m->h = dev_alloc(d, rows * m->F * es, 0);
    m->y = dev_alloc(d, rows * H * es, 0);
    m->w1 = dev_alloc(d, m->F * H * es, 0x3c);
    m->b1 = dev_alloc(d, m->F * es, 0x3c);
    m->w2 = dev_alloc(d, H * m->F * es, 0x3c);
    m->b2 = dev_alloc(d, H * es, 0x3c);
}

static void mlp_free(mlp_ctx *m)
{
    float *all[] = {m->x, m->h, m->y, m->w1, m->b1, m->w2, m->b2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ops->free(m->d, all[i]);
}

typedef struct copy_ctx {
    be_device *d;
    void *a, *b;
    size_t bytes;
} copy_ctx;

static void copy_once(void *p)
{
    copy_ctx *c = p;
    PE_OK_OR_DIE(c->d, ops->copy_d2d(c->d, c->b, c->a, c->bytes));
}

/* ---- peer-path all-reduce: n rank threads on GPU 0 ---- */

#define MAXR 4

typedef struct peer_shared {
    int n;
    be_device *devs[MAXR];
    be_comm *comms[MAXR];
    pthread_barrier_t pb;
    size_t bytes;
    int iters, stop;
    double seconds;
    pe_status status[MAXR];
} peer_shared;

typedef struct peer_arg {
    peer_shared *sh;
    int rank;
} peer_arg;

static void *peer_rank(void *p)
{
    peer_arg *a = p;
    peer_shared *sh = a->sh;
    int r = a->rank;
    pe_err err = {{0}};
    sh->status[r] = ops->open(0, &sh->devs[r], &err);
    pthread_barrier_wait(&sh->pb);
    if (r == 0) {
        int ok = 1;
        for (int q = 0; q < sh->n; q++)
            ok &= sh->status[q] == PE_OK;
        sh->status[0] = ok ? ops->comm_create(sh->devs, sh->n, sh->comms, &err) : PE_ENODEV;
        if (sh->status[0] != PE_OK)
            fprintf(stderr, "error: peer communicator: %s\n", err.msg);
    }
    pthread_barrier_wait(&sh->pb);
    float *buf = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_barrier_wait(&sh->pb);
        if (sh->stop || sh->status[0] != PE_OK)
            break;
        be_device *d = sh->devs[r];
        pe_status s = PE_OK;
        if (sh->bytes > cap) {
            ops->free(d, buf);
            buf = NULL;
            s = ops->alloc(d, sh->bytes, (void **)&buf);
            cap = s == PE_OK ? sh->bytes : 0;
            if (s == PE_OK)
                CUDA_OK(cudaMemsetAsync(buf, 0, sh->bytes, d->stream));
        }
        size_t count = sh->bytes / sizeof(float);
        if (s == PE_OK)
            s = ops->synchronize(d);
        if (s == PE_OK)
            s = ops->barrier(sh->comms[r]);
        uint64_t t0 = rt_now_ns();
        for (int it = 0; it < sh->iters && s == PE_OK; it++)
            s = ops->allreduce_sum(sh->comms[r], buf, buf, count);
        if (s == PE_OK)
            s = ops->synchronize(d);
        if (s == PE_OK)
            s = ops->barrier(sh->comms[r]);
        if (r == 0)
            sh->seconds = (double)(rt_now_ns() - t0) * 1e-9;
        if (s != PE_OK)
            sh->status[r] = s;
        pthread_barrier_wait(&sh->pb);
    }
    if (sh->devs[r])
        ops->free(sh->devs[r], buf);
    pthread_barrier_wait(&sh->pb);
    if (r == 0 && sh->status[0] == PE_OK)
        ops->comm_destroy(sh->comms, sh->n);
    pthread_barrier_wait(&sh->pb);
    if (sh->devs[r])
        ops->close(sh->devs[r]);
    return NULL;
}

/* Seconds per all-reduce of `bytes`, median over reps. */
static double peer_measure(peer_shared *sh, size_t bytes, int reps, double target)
{
    double t[MAXREPS];
    sh->bytes = bytes;
    sh->iters = 3;
    pthread_barrier_wait(&sh->pb); /* calibrate */
    pthread_barrier_wait(&sh->pb);
    double one = sh->seconds / 3 > 1e-7 ? sh->seconds / 3 : 1e-7;
    int iters = (int)(target / one);
    sh->iters = iters < 3 ? 3 : iters > 20000 ? 20000 : iters;
    for (int k = 0; k < reps; k++) {
        pthread_barrier_wait(&sh->pb);
        pthread_barrier_wait(&sh->pb);
        t[k] = sh->seconds / sh->iters;
    }
    return bu_median(t, (size_t)reps);
}

static cJSON *bench_peer(int n, int reps, double target, size_t max_bytes, double *lat16k)
{
    peer_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.n = n;
    pthread_barrier_init(&sh.pb, NULL, (unsigned)n + 1);
    pthread_t t[MAXR];
    peer_arg pa[MAXR];
    for (int r = 0; r < n; r++) {
        pa[r] = (peer_arg){&sh, r};
        pthread_create(&t[r], NULL, peer_rank, &pa[r]);
    }
    pthread_barrier_wait(&sh.pb); /* devices open */
    pthread_barrier_wait(&sh.pb); /* communicator made */
    cJSON *arr = cJSON_CreateArray();
    if (sh.status[0] == PE_OK) {
        printf("peer all-reduce, %d ranks on GPU 0\n  %10s %12s %12s\n", n, "bytes", "latency us",
               "busbw GB/s");
        for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
            double s = peer_measure(&sh, bytes, reps, target);
            int bad = 0;
            for (int r = 0; r < n; r++)
                bad |= sh.status[r] != PE_OK;
            if (bad) {
                fprintf(stderr, "error: peer all-reduce failed at %zu bytes\n", bytes);
                break;
            }
            double busbw = (double)bytes / s * 2.0 * (n - 1) / n * 1e-9;
            printf("  %10zu %12.1f %12.1f\n", bytes, s * 1e6, busbw);
            if (bytes == 16384 && lat16k)
                *lat16k = s * 1e6;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "bytes", (double)bytes);
            cJSON_AddNumberToObject(o, "latency_us", s * 1e6);
            cJSON_AddNumberToObject(o, "busbw_gbps", busbw);
            cJSON_AddItemToArray(arr, o);
        }
    }
    sh.stop = 1;
    pthread_barrier_wait(&sh.pb);
    pthread_barrier_wait(&sh.pb); /* buffers freed */
    pthread_barrier_wait(&sh.pb); /* communicator destroyed */
    for (int r = 0; r < n; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&sh.pb);
    return arr;
}

static const char *verdict(double value, double target, int higher_is_better)
{
    if (value <= 0)
        return "not measured";
    return (higher_is_better ? value >= target : value <= target) ? "met" : "MISSED";
}

int main(int argc, char **argv)
{
    bu_args args;
    bu_parse_args(argc, argv, &args);
    int reps = args.quick ? 3 : 7;
    cJSON *root = cJSON_CreateObject();
    ops = be_cuda_ops();
    int ngpus = 0;
    pe_err why = {{0}};
    if (!ops || ops->device_count(&ngpus, &why) != PE_OK || ngpus == 0) {
        printf("bench_cuda: no CUDA device (%s); nothing measured\n",
               ops ? why.msg : "built without CUDA");
        cJSON_AddStringToObject(root, "skipped", ops ? why.msg : "built without CUDA");
        int rc = args.json_path ? bu_write_json(root, args.json_path) : 0;
        cJSON_Delete(root);
        return rc ? 1 : 0;
    }
    be_device_desc desc;
    if (ops->device_describe(0, &desc, &why) == PE_OK)
        cJSON_AddStringToObject(root, "gpu", desc.name);
    be_device *d = NULL;
    pe_err err = {{0}};
    if (ops->open(0, &d, &err) != PE_OK) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    printf("bench_cuda on %s\n", desc.name);
    cublasHandle_t direct;
    if (cublasCreate(&direct) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(direct, d->stream) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cublasCreate failed\n");
        return 1;
    }

    /* GEMM */
    cJSON *gemms = cJSON_AddArrayToObject(root, "gemm");
    size_t sizes[] = {1024, 4096, 8192};
    size_t nsizes = args.quick ? 2 : 3;
    for (size_t i = 0; i < nsizes; i++)
        cJSON_AddItemToArray(gemms, bench_gemm(d, direct, sizes[i], reps));

    /* MLP forward against its GEMMs alone, fp32 */
    size_t H = args.quick ? 2048 : 4096, rows = 2048;
    mlp_ctx m;
    mlp_init(&m, d, rows, H);
    double flop = 2.0 * 2.0 * (double)rows * (double)H * (double)(4 * H);
    double t_fwd = time_ms(d, mlp_forward, &m, 5, reps);
    double t_gemms = time_ms(d, mlp_gemms, &m, 5, reps);
    double tf_fwd = flop / (t_fwd * 1e-3) * 1e-12, tf_gemms = flop / (t_gemms * 1e-3) * 1e-12;
    double mlp_ratio = tf_fwd / tf_gemms;
    printf("mlp fp32 rows %zu H %zu: forward %.1f TFLOP/s, GEMMs alone %.1f TFLOP/s (%.0f%%)"
           "; bf16: n/a (no bf16 ops in the backend yet)\n",
           rows, H, tf_fwd, tf_gemms, 100.0 * mlp_ratio);
    mlp_free(&m);
    cJSON *mj = cJSON_AddObjectToObject(root, "mlp");
    cJSON_AddNumberToObject(mj, "rows", (double)rows);
    cJSON_AddNumberToObject(mj, "hidden", (double)H);
    cJSON_AddNumberToObject(mj, "fp32_forward_tflops", tf_fwd);
    cJSON_AddNumberToObject(mj, "fp32_gemms_tflops", tf_gemms);
    cJSON_AddNumberToObject(mj, "fp32_ratio", mlp_ratio);
    cJSON_AddNullToObject(mj, "bf16_ratio");

    /* batch-1 forward bandwidth against the copy bandwidth */
    mlp_init(&m, d, 1, H);
    double weight_bytes = (double)(2 * 4 * H * H + 5 * H) * sizeof(float);
    double t_b1 = time_ms(d, mlp_forward, &m, 20, reps);
    mlp_free(&m);
    copy_ctx cc = {d, NULL, NULL, (size_t)1 << 30};
    if (args.quick)
        cc.bytes >>= 2;
    cc.a = dev_alloc(d, cc.bytes, 1);
    cc.b = dev_alloc(d, cc.bytes, 0);
    double t_copy = time_ms(d, copy_once, &cc, 5, reps);
    ops->free(d, cc.a);
    ops->free(d, cc.b);
    double bw_b1 = weight_bytes / (t_b1 * 1e-3) * 1e-9;
    double bw_copy = 2.0 * (double)cc.bytes / (t_copy * 1e-3) * 1e-9;
    double b1_ratio = bw_b1 / bw_copy;
    printf("batch-1 fp32 forward (H %zu): %.0f GB/s of weights; device copy %.0f GB/s "
           "(read + write) (%.0f%%)\n",
           H, bw_b1, bw_copy, 100.0 * b1_ratio);
    cJSON *bj = cJSON_AddObjectToObject(root, "batch1");
    cJSON_AddNumberToObject(bj, "forward_gbps", bw_b1);
    cJSON_AddNumberToObject(bj, "copy_gbps", bw_copy);
    cJSON_AddNumberToObject(bj, "ratio", b1_ratio);
    cublasDestroy(direct);
    ops->close(d);

    /* peer all-reduce */
    double lat16k = -1;
    double target = args.quick ? 0.01 : 0.05;
    size_t max_bytes = args.quick ? ((size_t)4 << 20) : ((size_t)64 << 20);
    cJSON *pj = cJSON_AddObjectToObject(root, "peer_allreduce");
    cJSON_AddItemToObject(pj, "ranks2", bench_peer(2, reps, target, max_bytes, &lat16k));
    cJSON_AddItemToObject(pj, "ranks4", bench_peer(4, reps, target, max_bytes, NULL));

    /* targets */
    printf("targets: bf16 MLP >= 80%% of GEMMs alone: not measured (no bf16 ops); fp32 MLP "
           "%.0f%% (%s)\n",
           100.0 * mlp_ratio, verdict(mlp_ratio, 0.8, 1));
    printf("         batch-1 >= 70%% of copy bandwidth: %.0f%% (%s)\n", 100.0 * b1_ratio,
           verdict(b1_ratio, 0.7, 1));
    printf("         16 KiB peer all-reduce <= 20 us: %.1f us (%s)\n", lat16k,
           verdict(lat16k, 20.0, 0));
    cJSON *tj = cJSON_AddObjectToObject(root, "targets");
    cJSON_AddStringToObject(tj, "mlp_fp32_ge_80pct", verdict(mlp_ratio, 0.8, 1));
    cJSON_AddStringToObject(tj, "mlp_bf16_ge_80pct", "not measured");
    cJSON_AddStringToObject(tj, "batch1_ge_70pct_copy", verdict(b1_ratio, 0.7, 1));
    cJSON_AddStringToObject(tj, "peer_16k_le_20us", verdict(lat16k, 20.0, 0));
    int rc = args.json_path ? bu_write_json(root, args.json_path) : 0;
    cJSON_Delete(root);
    return rc ? 1 : 0;
}
