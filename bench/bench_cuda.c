/* bench_cuda.c: the CUDA backend against the GPU's own ceilings, measured in the same run.
 *
 *   GEMM     TFLOP/s of our gemm (fp32) against cublasSgemm, and of our gemm_bf16 (bf16 A
 *            and B, fp32 C, CUBLAS_COMPUTE_32F) against cublasGemmEx with the same types,
 *            both called directly on the same shapes;
 *   MLP      the model's own forward pass (md_stage_forward, tp = 1) of an in-memory
 *            Linear-GELU-Linear MLP (rows x H -> 4H -> H, torch weight layout), in fp32 and
 *            bf16: TFLOP/s against its GEMMs alone (target, bf16: >= 80%);
 *   batch-1  the same forward with one row: weight bytes (bf16: 2 a weight) / time, against
 *            the device-to-device copy bandwidth ((read + write) bytes / time of
 *            cudaMemcpyAsync) (target, bf16: >= 70%);
 *   peer     all-reduce on the peer path, 2 and 4 ranks (threads) on GPU 0, 4 KiB .. 64 MiB:
 *            latency and busbw = bytes / time * 2(n-1)/n (target: 16 KiB <= 20 us);
 *   decoder  attention over the paged KV cache: 16 sequences decoding one token at position
 *            10 and at 1000, and a prefill chunk of 128 tokens, for 12 heads x 64 (MHA) and
 *            32 heads x 128 over 8 KV heads (GQA), fp32 and bf16 pools; sample (greedy, and
 *            T = 1 with top-k 50 and top-p 0.9), topk (k = 64, with the log-sum-exp) and
 *            argmax over rows of 50257 logits, 1 and 32 rows. Each with the bytes it must
 *            move at least (the keys and values it reads once, its queries and outputs; the
 *            logits once) and that over its time as a share of the copy bandwidth; prefill
 *            also in TFLOP/s (4 x heads x head_dim flops a visible key).
 * GEMM, MLP, batch-1 and copy times come from CUDA events on the device's stream; the peer
 * all-reduce's from the host clock between two barriers of every rank, each rank's stream
 * synchronized. Each figure is the median of several repetitions. Without a GPU it says
 * so and exits 0.
 *
 *   bench_cuda [--quick] [--json FILE]     (--quick: 3 repetitions instead of 7, GEMMs up
 *                                           to 4096 instead of 8192, a 256 MiB copy
 *                                           instead of 1 GiB, shorter all-reduce loops)
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cb_internal.h" /* the device's stream, for event timing */
#include "bench_util.h"
#include "model/mlp/forward.h"
#include "model/mlp/mlp.h"
#include "model/mlp/shard.h"
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

/* ---- GEMM: C (M, N) = A (M, K) B (N, K)^T, row-major, as the model's Linear layers ---- */

typedef struct gemm_ctx {
    be_device *d;
    cublasHandle_t direct; /* our own handle on the same stream */
    size_t M, N, K;
    void *A, *B, *C; /* (M, K), (N, K): float or bf16 by `bf16`; C (M, N) float always */
    int bf16;
} gemm_ctx;

static void gemm_ours(void *p)
{
    gemm_ctx *g = p;
    if (g->bf16)
        PE_OK_OR_DIE(g->d, ops->gemm_bf16(g->d, 0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, g->B,
                                          g->K, 0.0f, g->C, g->N));
    else
        PE_OK_OR_DIE(g->d, ops->gemm(g->d, 0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, g->B, g->K,
                                     0.0f, g->C, g->N));
}

/* The same row-major product as cuBLAS sees it, C^T = B A^T; in bf16 the types and compute
 * type of our gemm_bf16 (bf16 in, fp32 out, fp32 accumulation), so the two differ only by
 * the backend's own overhead. */
static void gemm_direct(void *p)
{
    gemm_ctx *g = p;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s;
    if (g->bf16)
        s = cublasGemmEx(g->direct, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->N, (int)g->M, (int)g->K,
                         &one, g->B, CUDA_R_16BF, (int)g->K, g->A, CUDA_R_16BF, (int)g->K, &zero,
                         g->C, CUDA_R_32F, (int)g->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasSgemm(g->direct, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->N, (int)g->M, (int)g->K,
                        &one, g->B, (int)g->K, g->A, (int)g->K, &zero, g->C, (int)g->N);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: direct cuBLAS GEMM: %s\n", cublasGetStatusString(s));
        exit(1);
    }
}

static double tflops(double flop, double ms) { return flop / (ms * 1e-3) * 1e-12; }

/* TFLOP/s of ours and of cuBLAS direct on g's shape, in fp32 or bf16. */
static void gemm_pair(gemm_ctx *g, int bf16, int reps, double *ours, double *direct)
{
    double flop = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    int iters = g->M >= 4096 ? 5 : 20;
    g->bf16 = bf16;
    *ours = tflops(flop, time_ms(g->d, gemm_ours, g, iters, reps));
    *direct = tflops(flop, time_ms(g->d, gemm_direct, g, iters, reps));
}

static cJSON *bench_gemm(be_device *d, cublasHandle_t direct, size_t n, int reps)
{
    gemm_ctx g = {d, direct, n, n, n, NULL, NULL, NULL, 0};
    g.A = dev_alloc(d, n * n * sizeof(float), 0x3c); /* bf16 operands fit in the fp32 ones */
    g.B = dev_alloc(d, n * n * sizeof(float), 0x3c);
    g.C = dev_alloc(d, n * n * sizeof(float), 0);
    double f_ours, f_direct, b_ours, b_direct;
    gemm_pair(&g, 0, reps, &f_ours, &f_direct);
    gemm_pair(&g, 1, reps, &b_ours, &b_direct);
    ops->free(d, g.A);
    ops->free(d, g.B);
    ops->free(d, g.C);
    printf("gemm %5zu^3  fp32 ours %6.1f TFLOP/s  cublasSgemm %6.1f (%3.0f%%)   bf16 ours %6.1f"
           "  cublasGemmEx %6.1f (%3.0f%%)\n",
           n, f_ours, f_direct, 100.0 * f_ours / f_direct, b_ours, b_direct,
           100.0 * b_ours / b_direct);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", (double)n);
    cJSON_AddNumberToObject(o, "fp32_ours_tflops", f_ours);
    cJSON_AddNumberToObject(o, "fp32_cublas_tflops", f_direct);
    cJSON_AddNumberToObject(o, "fp32_ratio", f_ours / f_direct);
    cJSON_AddNumberToObject(o, "bf16_ours_tflops", b_ours);
    cJSON_AddNumberToObject(o, "bf16_cublas_tflops", b_direct);
    cJSON_AddNumberToObject(o, "bf16_ratio", b_ours / b_direct);
    return o;
}

/* ---- device-to-device copy: the memory ceiling for batch-1 ---- */

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

/* (read + write) GB/s of one copy of `bytes`. */
static double bench_copy(be_device *d, size_t bytes, int reps)
{
    copy_ctx cc = {d, dev_alloc(d, bytes, 1), dev_alloc(d, bytes, 0), bytes};
    double ms = time_ms(d, copy_once, &cc, 5, reps);
    ops->free(d, cc.a);
    ops->free(d, cc.b);
    return 2.0 * (double)bytes / (ms * 1e-3) * 1e-9;
}

/* ---- the model's forward: y = gelu(x W1^T + b1) W2^T + b2 through md_stage_forward ---- */

/* The MLP in host memory we own (storage NULL: freed here, not by md_mlp_free). */
typedef struct host_mlp {
    md_mlp m;           /* m.layers points at layers: do not copy the struct */
    md_layer layers[2]; /* H -> F = 4H (GELU), F -> H (none) */
    float *w[2];        /* (F, H), (H, F) */
    float *b[2];        /* (F), (H) */
} host_mlp;

/* x(n) uniform in [-scale, scale): finite, no denormals, same every run. */
static void fill_uniform(float *x, size_t n, uint32_t *state, float scale)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = scale * ((float)(*state >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

static void host_mlp_init(host_mlp *h, size_t H)
{
    const size_t in[2] = {H, 4 * H}, out[2] = {4 * H, H};
    const md_activation act[2] = {MD_ACT_GELU, MD_ACT_NONE};
    uint32_t state = 1;
    for (int l = 0; l < 2; l++) {
        h->w[l] = malloc(out[l] * in[l] * sizeof(float));
        h->b[l] = malloc(out[l] * sizeof(float));
        if (!h->w[l] || !h->b[l]) {
            fprintf(stderr, "error: out of host memory for a %zu x %zu layer\n", out[l], in[l]);
            exit(1);
        }
        fill_uniform(h->w[l], out[l] * in[l], &state, 0.02f);
        fill_uniform(h->b[l], out[l], &state, 0.02f);
        h->layers[l] = (md_layer){in[l], out[l], act[l], h->w[l], h->b[l]};
    }
    h->m = (md_mlp){2, h->layers, NULL};
}

static void host_mlp_free(host_mlp *h)
{
    for (int l = 0; l < 2; l++) {
        free(h->w[l]);
        free(h->b[l]);
    }
}

/* One stage holding the whole model (tp = 1) on d, with scratch and x, y for max_rows. */
typedef struct fwd_ctx {
    be_device *d;
    md_stage st;
    md_stage_scratch sc;
    float *x, *y; /* (max_rows, H) each */
    size_t rows;  /* of the next call */
} fwd_ctx;

static void fwd_init(fwd_ctx *f, be_device *d, const host_mlp *h, pe_dtype dtype,
                     size_t max_rows)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    md_shard_kind kinds[2];
    pe_err err = {{0}};
    const int L = h->m.nlayers;
    if (md_plan_tp(&h->m, 0, L, 1, kinds, &err) != PE_OK ||
        md_stage_build(ops, d, &h->m, 0, L, kinds, 0, 1, dtype, NULL, &f->st, &err) != PE_OK) {
        fprintf(stderr, "error: building the stage: %s\n", err.msg);
        exit(1);
    }
    PE_OK_OR_DIE(d, md_scratch_reserve(ops, d, &f->st, 1, max_rows, &f->sc));
    f->x = dev_alloc(d, max_rows * f->st.in * sizeof(float), 0x3c);
    f->y = dev_alloc(d, max_rows * f->st.out * sizeof(float), 0);
}

static void fwd_free(fwd_ctx *f)
{
    ops->free(f->d, f->x);
    ops->free(f->d, f->y);
    md_scratch_free(ops, f->d, &f->sc);
    md_stage_free(ops, f->d, &f->st);
}

static void fwd_run(void *p)
{
    fwd_ctx *f = p;
    PE_OK_OR_DIE(f->d, md_stage_forward(ops, f->d, NULL, 1, &f->st, &f->sc, f->x, f->y, f->rows,
                                        NULL));
}

/* The forward's GEMMs alone: plain gemm (fp32) or gemm_bf16 calls (fp32 out) on the same
 * shapes, weights and buffers, nothing else. The forward runs each Linear as one `linear`
 * (cuBLASLt with the bias, ReLU and bf16 output in its epilogue where it can; GELU and the
 * rounding of the stage's input as our kernels): the ratio forward / GEMMs charges all of
 * that to the forward. In bf16 every GEMM here reads sc.xh (bf16 of whatever it holds:
 * the values do not change the time). */
static void fwd_gemms(void *p)
{
    fwd_ctx *f = p;
    const md_stage *s = &f->st;
    const float *cur = f->x;
    for (int k = 0; k < s->nlayers; k++) {
        const md_stage_layer *l = &s->layers[k];
        float *dst = k == s->nlayers - 1 ? f->y : (cur == f->sc.a ? f->sc.b : f->sc.a);
        if (s->dtype == PE_DTYPE_BF16)
            PE_OK_OR_DIE(f->d, ops->gemm_bf16(f->d, 0, 1, f->rows, l->out_t, l->in_t, 1.0f,
                                              f->sc.xh, l->in_t, l->w, l->in_t, 0.0f, dst,
                                              l->out_t));
        else
            PE_OK_OR_DIE(f->d, ops->gemm(f->d, 0, 1, f->rows, l->out_t, l->in_t, 1.0f, cur,
                                         l->in_t, l->w, l->in_t, 0.0f, dst, l->out_t));
        cur = dst;
    }
}

/* FLOPs of one row through the stage, and the bytes a forward must read of its weights
 * (in the stage's dtype) and biases (fp32). */
static double fwd_flops_per_row(const md_stage *s)
{
    double flop = 0;
    for (int k = 0; k < s->nlayers; k++)
        flop += 2.0 * (double)s->layers[k].in_t * (double)s->layers[k].out_t;
    return flop;
}

static double fwd_weight_bytes(const md_stage *s)
{
    size_t es = s->dtype == PE_DTYPE_BF16 ? sizeof(uint16_t) : sizeof(float), bytes = 0;
    for (int k = 0; k < s->nlayers; k++)
        bytes += s->layers[k].out_t * s->layers[k].in_t * es + s->layers[k].out_t * sizeof(float);
    return (double)bytes;
}

typedef struct fwd_figures {
    double fwd_tflops, gemms_tflops, mlp_ratio;  /* at `rows` rows */
    double weight_bytes;                         /* the stage's weights and biases */
    double b1_fwd_gbps, b1_gemms_gbps, b1_ratio; /* one row; ratio against the copy */
} fwd_figures;

/* The forward in dtype at rows rows and at one row, each against its GEMMs alone. */
static fwd_figures bench_forward(be_device *d, const host_mlp *h, pe_dtype dtype, size_t rows,
                                 double copy_gbps, int reps)
{
    fwd_figures r;
    fwd_ctx f;
    fwd_init(&f, d, h, dtype, rows);
    double flop = fwd_flops_per_row(&f.st) * (double)rows;
    f.rows = rows;
    r.fwd_tflops = tflops(flop, time_ms(d, fwd_run, &f, 5, reps)); /* fills sc.xh first */
    r.gemms_tflops = tflops(flop, time_ms(d, fwd_gemms, &f, 5, reps));
    r.mlp_ratio = r.fwd_tflops / r.gemms_tflops;
    r.weight_bytes = fwd_weight_bytes(&f.st);
    f.rows = 1;
    r.b1_fwd_gbps = r.weight_bytes / (time_ms(d, fwd_run, &f, 20, reps) * 1e-3) * 1e-9;
    r.b1_gemms_gbps = r.weight_bytes / (time_ms(d, fwd_gemms, &f, 20, reps) * 1e-3) * 1e-9;
    r.b1_ratio = r.b1_fwd_gbps / copy_gbps;
    fwd_free(&f);
    return r;
}

static const char *dtype_name(pe_dtype t) { return t == PE_DTYPE_BF16 ? "bf16" : "fp32"; }

static void print_forward(pe_dtype t, size_t rows, const fwd_figures *r)
{
    printf("  %s  %zu rows: forward %6.1f TFLOP/s, GEMMs alone %6.1f (%3.0f%%)   batch-1 (%.0f "
           "MB of weights): forward %5.0f GB/s (%3.0f%% of copy), GEMMs alone %5.0f GB/s\n",
           dtype_name(t), rows, r->fwd_tflops, r->gemms_tflops, 100.0 * r->mlp_ratio,
           r->weight_bytes * 1e-6, r->b1_fwd_gbps, 100.0 * r->b1_ratio, r->b1_gemms_gbps);
}

static void json_forward(cJSON *mlp, cJSON *batch1, pe_dtype t, const fwd_figures *r)
{
    cJSON *m = cJSON_AddObjectToObject(mlp, dtype_name(t));
    cJSON_AddNumberToObject(m, "forward_tflops", r->fwd_tflops);
    cJSON_AddNumberToObject(m, "gemms_tflops", r->gemms_tflops);
    cJSON_AddNumberToObject(m, "ratio", r->mlp_ratio);
    cJSON *b = cJSON_AddObjectToObject(batch1, dtype_name(t));
    cJSON_AddNumberToObject(b, "weight_bytes", r->weight_bytes);
    cJSON_AddNumberToObject(b, "forward_gbps", r->b1_fwd_gbps);
    cJSON_AddNumberToObject(b, "gemms_gbps", r->b1_gemms_gbps);
    cJSON_AddNumberToObject(b, "ratio", r->b1_ratio);
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
    int created;      /* the communicator exists (set once, before the measuring loop) */
    double seconds;
    pe_status status[MAXR]; /* each rank's first failure */
    atomic_int failed; /* a rank failed: the others skip the work but keep to the barriers,
                        * so the main thread's barrier count always matches theirs */
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
        sh->created = sh->status[0] == PE_OK;
        if (!sh->created)
            fprintf(stderr, "error: peer communicator: %s\n", err.msg);
    }
    pthread_barrier_wait(&sh->pb);
    float *buf = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_barrier_wait(&sh->pb);
        if (sh->stop || !sh->created)
            break;
        be_device *d = sh->devs[r];
        pe_status s = atomic_load(&sh->failed) ? PE_ECOMM : PE_OK;
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
        if (s != PE_OK && !atomic_exchange(&sh->failed, 1)) {
            sh->status[r] = s;
            ops->comm_abort(sh->comms[r]); /* the ranks waiting for this one return */
        }
        pthread_barrier_wait(&sh->pb);
    }
    if (sh->devs[r])
        ops->free(sh->devs[r], buf);
    pthread_barrier_wait(&sh->pb);
    if (r == 0 && sh->created)
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
    atomic_init(&sh.failed, 0);
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
    if (sh.created) {
        printf("peer all-reduce, %d ranks on GPU 0\n  %10s %12s %12s\n", n, "bytes", "latency us",
               "busbw GB/s");
        for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
            double s = peer_measure(&sh, bytes, reps, target);
            if (atomic_load(&sh.failed)) {
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

/* ---- decoder operations: attention, sampling ---- */

typedef struct attn_ctx {
    be_device *d;
    be_kv kv;
    be_attn a;
} attn_ctx;

static void attn_once(void *p)
{
    attn_ctx *c = p;
    PE_OK_OR_DIE(c->d, ops->attention(c->d, &c->kv, 0, &c->a));
}

/* One attention figure: nseq chunks of ntok tokens, the last at position pos, over a pool of
 * one layer whose blocks are laid out sequence after sequence. */
static cJSON *bench_attention(be_device *d, int heads, int kv_heads, int hd, pe_dtype dt,
                              int nseq, int ntok, int32_t pos, double copy_gbps, int reps)
{
    const int B = 16;
    const int32_t len = pos + 1, nb = (len + B - 1) / B;
    const size_t rows = (size_t)nseq * (size_t)ntok, es = dt == PE_DTYPE_BF16 ? 2 : 4;
    attn_ctx c = {.d = d};
    c.kv.shape = (pe_k_kv_shape){.nlayers = 1, .kv_heads = kv_heads, .block_tokens = B,
                                 .head_dim = hd, .nblocks = (size_t)nseq * (size_t)nb};
    c.kv.dtype = dt;
    c.kv.base = dev_alloc(d, c.kv.shape.nblocks * pe_k_kv_block_elems(c.kv.shape) * es, 0x3c);
    int32_t *chunks = malloc((size_t)nseq * PE_K_CHUNK_FIELDS * sizeof *chunks);
    int32_t *tables = malloc(c.kv.shape.nblocks * sizeof *tables);
    for (int s = 0; s < nseq; s++) {
        int32_t *f = chunks + (size_t)s * PE_K_CHUNK_FIELDS;
        f[PE_K_CHUNK_ROW0] = s * ntok;
        f[PE_K_CHUNK_N] = ntok;
        f[PE_K_CHUNK_POS0] = len - ntok;
        f[PE_K_CHUNK_BT] = s * nb;
    }
    for (size_t i = 0; i < c.kv.shape.nblocks; i++)
        tables[i] = (int32_t)i;
    void *dchunks = dev_alloc(d, (size_t)nseq * PE_K_CHUNK_FIELDS * sizeof *chunks, 0);
    void *dtables = dev_alloc(d, c.kv.shape.nblocks * sizeof *tables, 0);
    PE_OK_OR_DIE(d, ops->copy_h2d(d, dchunks, chunks, (size_t)nseq * PE_K_CHUNK_FIELDS * 4));
    PE_OK_OR_DIE(d, ops->copy_h2d(d, dtables, tables, c.kv.shape.nblocks * sizeof *tables));
    const size_t width = (size_t)heads * (size_t)hd;
    c.a = (be_attn){.rows = rows, .q = dev_alloc(d, rows * width * 4, 0x3c), .q_stride = width,
                    .out = dev_alloc(d, rows * width * 4, 0), .out_stride = width,
                    .heads = heads, .scale = 1.0f / sqrtf((float)hd), .nchunks = (size_t)nseq,
                    .chunks = dchunks, .block_tables = dtables, .max_keys = len};
    double ms = time_ms(d, attn_once, &c, 20, reps);
    /* keys and values read once, queries read and outputs written once */
    double bytes = (double)nseq * len * kv_heads * hd * 2.0 * (double)es + 2.0 * rows * width * 4;
    double visible = 0; /* keys seen by all queries */
    for (int t = 0; t < ntok; t++)
        visible += (double)(len - ntok + t + 1);
    double tflops = 4.0 * heads * hd * visible * nseq / (ms * 1e-3) * 1e-12;
    double gbps = bytes / (ms * 1e-3) * 1e-9;
    const char *step = ntok == 1 ? "decode" : "prefill";
    printf("  %2dx%-3d kv %2d %s %-7s %2d x %3d token%s at pos %4d: %8.1f us  %7.2f MB  %6.0f GB/s"
           " = %4.1f%% of copy  %.2f TFLOP/s\n",
           heads, hd, kv_heads, dt == PE_DTYPE_BF16 ? "bf16" : "fp32", step, nseq, ntok,
           ntok == 1 ? " " : "s", (int)pos, ms * 1e3, bytes * 1e-6, gbps,
           100.0 * gbps / copy_gbps, tflops);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "step", step);
    cJSON_AddNumberToObject(j, "heads", heads);
    cJSON_AddNumberToObject(j, "kv_heads", kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", hd);
    cJSON_AddStringToObject(j, "pool", dt == PE_DTYPE_BF16 ? "bf16" : "fp32");
    cJSON_AddNumberToObject(j, "sequences", nseq);
    cJSON_AddNumberToObject(j, "tokens", ntok);
    cJSON_AddNumberToObject(j, "pos", pos);
    cJSON_AddNumberToObject(j, "us", ms * 1e3);
    cJSON_AddNumberToObject(j, "bytes", bytes);
    cJSON_AddNumberToObject(j, "gbps", gbps);
    cJSON_AddNumberToObject(j, "copy_ratio", gbps / copy_gbps);
    cJSON_AddNumberToObject(j, "tflops", tflops);
    ops->free(d, c.kv.base);
    ops->free(d, (void *)c.a.q);
    ops->free(d, c.a.out);
    ops->free(d, dchunks);
    ops->free(d, dtables);
    free(chunks);
    free(tables);
    return j;
}

typedef struct pick_ctx {
    be_device *d;
    const float *x;
    size_t rows, n;
    int op; /* 0 sample, 1 topk, 2 argmax */
    const pe_k_sampling *params;
    int32_t *idx;
    float *val, *lse;
} pick_ctx;

static void pick_once(void *p)
{
    pick_ctx *c = p;
    if (c->op == 0)
        PE_OK_OR_DIE(c->d, ops->sample(c->d, c->x, c->rows, c->n, c->params, c->idx, c->val));
    else if (c->op == 1)
        PE_OK_OR_DIE(c->d, ops->topk(c->d, c->x, c->rows, c->n, 64, c->idx, c->val, c->lse));
    else
        PE_OK_OR_DIE(c->d, ops->argmax(c->d, c->x, c->rows, c->n, c->idx));
}

/* sample (greedy; T = 1, top-k 50, top-p 0.9), topk 64 + lse, argmax over rows of logits
 * uniform in [-10, 10). */
static void bench_sampling(be_device *d, size_t rows, double copy_gbps, int reps, cJSON *arr)
{
    const size_t n = 50257;
    float *x = malloc(rows * n * sizeof *x);
    uint32_t st = 12345;
    fill_uniform(x, rows * n, &st, 10.0f);
    pick_ctx c = {.d = d, .rows = rows, .n = n};
    c.x = dev_alloc(d, rows * n * sizeof *x, 0);
    PE_OK_OR_DIE(d, ops->copy_h2d(d, (void *)c.x, x, rows * n * sizeof *x));
    c.idx = dev_alloc(d, rows * 64 * sizeof(int32_t), 0);
    c.val = dev_alloc(d, rows * 64 * sizeof(float), 0);
    c.lse = dev_alloc(d, rows * sizeof(float), 0);
    pe_k_sampling *ps = malloc(rows * sizeof *ps);
    void *dgreedy = dev_alloc(d, rows * sizeof *ps, 0), *dfull = dev_alloc(d, rows * sizeof *ps, 0);
    for (size_t r = 0; r < rows; r++)
        ps[r] = (pe_k_sampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .u = 0.5f};
    PE_OK_OR_DIE(d, ops->copy_h2d(d, dgreedy, ps, rows * sizeof *ps));
    for (size_t r = 0; r < rows; r++)
        ps[r] = (pe_k_sampling){.temperature = 1.0f, .top_k = 50, .top_p = 0.9f,
                                .u = pe_k_uniform(7, r)};
    PE_OK_OR_DIE(d, ops->copy_h2d(d, dfull, ps, rows * sizeof *ps));
    const char *names[4] = {"sample greedy", "sample T=1 top-k 50 top-p 0.9", "topk 64 + lse",
                            "argmax"};
    for (int k = 0; k < 4; k++) {
        c.op = k <= 1 ? 0 : k - 1;
        c.params = k == 0 ? dgreedy : dfull;
        double ms = time_ms(d, pick_once, &c, 20, reps);
        double bytes = (double)rows * n * 4, gbps = bytes / (ms * 1e-3) * 1e-9;
        printf("  %-30s %2zu row%s x %zu: %8.1f us  %6.2f MB  %6.0f GB/s = %4.1f%% of copy\n",
               names[k], rows, rows == 1 ? " " : "s", n, ms * 1e3, bytes * 1e-6, gbps,
               100.0 * gbps / copy_gbps);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "op", names[k]);
        cJSON_AddNumberToObject(j, "rows", (double)rows);
        cJSON_AddNumberToObject(j, "n", (double)n);
        cJSON_AddNumberToObject(j, "us", ms * 1e3);
        cJSON_AddNumberToObject(j, "bytes", bytes);
        cJSON_AddNumberToObject(j, "gbps", gbps);
        cJSON_AddNumberToObject(j, "copy_ratio", gbps / copy_gbps);
        cJSON_AddItemToArray(arr, j);
    }
    ops->free(d, (void *)c.x);
    ops->free(d, c.idx);
    ops->free(d, c.val);
    ops->free(d, c.lse);
    ops->free(d, dgreedy);
    ops->free(d, dfull);
    free(ps);
    free(x);
}

static cJSON *bench_decoder(be_device *d, double copy_gbps, int reps)
{
    cJSON *j = cJSON_CreateObject(), *attn = cJSON_AddArrayToObject(j, "attention");
    printf("decoder ops (bytes: what each must move at least; %% of the copy bandwidth)\n");
    const int shapes[2][3] = {{12, 12, 64}, {32, 8, 128}};
    const pe_dtype dts[2] = {PE_DTYPE_FP32, PE_DTYPE_BF16};
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 2; t++) {
            const int h = shapes[s][0], kvh = shapes[s][1], hd = shapes[s][2];
            cJSON_AddItemToArray(attn, bench_attention(d, h, kvh, hd, dts[t], 16, 1, 10,
                                                       copy_gbps, reps));
            cJSON_AddItemToArray(attn, bench_attention(d, h, kvh, hd, dts[t], 16, 1, 1000,
                                                       copy_gbps, reps));
            cJSON_AddItemToArray(attn, bench_attention(d, h, kvh, hd, dts[t], 1, 128, 127,
                                                       copy_gbps, reps));
        }
    cJSON *smp = cJSON_AddArrayToObject(j, "sampling");
    const size_t rows[2] = {1, 32};
    for (int r = 0; r < 2; r++)
        bench_sampling(d, rows[r], copy_gbps, reps, smp);
    return j;
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
    /* Default math, as the backend's handle: fp32 stays fp32 (no TF32) */
    if (cublasCreate(&direct) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(direct, d->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(direct, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cublasCreate failed\n");
        return 1;
    }

    /* GEMM, fp32 and bf16 */
    cJSON *gemms = cJSON_AddArrayToObject(root, "gemm");
    size_t sizes[] = {1024, 4096, 8192};
    size_t nsizes = args.quick ? 2 : 3;
    for (size_t i = 0; i < nsizes; i++)
        cJSON_AddItemToArray(gemms, bench_gemm(d, direct, sizes[i], reps));
    cublasDestroy(direct);

    /* the copy ceiling, then the model's forward in both dtypes */
    double copy_gbps = bench_copy(d, args.quick ? (size_t)256 << 20 : (size_t)1 << 30, reps);
    /* H = 4096 in both modes: the bf16 weights (2 x H x 4H x 2 bytes = 256 MiB) are five
     * times an H200's 50 MB L2, so batch-1 reads them from memory as the copy does */
    size_t H = 4096, rows = 2048;
    host_mlp h;
    host_mlp_init(&h, H);
    const pe_dtype dtypes[2] = {PE_DTYPE_FP32, PE_DTYPE_BF16};
    fwd_figures fig[2];
    printf("mlp forward (md_stage_forward, H %zu -> %zu GELU -> %zu); GEMMs alone = the "
           "gemm/gemm_bf16 calls only; device copy %.0f GB/s (read + write)\n",
           H, 4 * H, H, copy_gbps);
    cJSON *mj = cJSON_AddObjectToObject(root, "mlp");
    cJSON_AddNumberToObject(mj, "rows", (double)rows);
    cJSON_AddNumberToObject(mj, "hidden", (double)H);
    cJSON_AddStringToObject(mj, "gemms_alone", "the gemm/gemm_bf16 calls only: no bias, "
                                               "activation or bf16 rounding");
    cJSON *bj = cJSON_AddObjectToObject(root, "batch1");
    cJSON_AddNumberToObject(bj, "hidden", (double)H);
    cJSON_AddNumberToObject(bj, "copy_gbps", copy_gbps);
    for (int i = 0; i < 2; i++) {
        fig[i] = bench_forward(d, &h, dtypes[i], rows, copy_gbps, reps);
        print_forward(dtypes[i], rows, &fig[i]);
        json_forward(mj, bj, dtypes[i], &fig[i]);
    }
    cb_linear_counts plans; /* how the forward's Linear layers ran */
    cb_linear_plans(d, &plans);
    printf("  linear plans: %ld fused (one cuBLASLt matmul with its epilogue), %ld fused with "
           "an fp32 output and to_bf16 (cuBLASLt refused a bf16 output with the fp32 bias), "
           "%ld as separate ops (cuBLASLt had no algorithm)\n",
           plans.fused, plans.rounded, plans.unfused);
    cJSON_AddNumberToObject(mj, "linear_plans_fused", (double)plans.fused);
    cJSON_AddNumberToObject(mj, "linear_plans_rounded", (double)plans.rounded);
    cJSON_AddNumberToObject(mj, "linear_plans_unfused", (double)plans.unfused);
    host_mlp_free(&h);
    cJSON_AddItemToObject(root, "decoder", bench_decoder(d, copy_gbps, reps));
    ops->close(d);

    /* peer all-reduce */
    double lat16k = -1;
    double target = args.quick ? 0.01 : 0.05;
    size_t max_bytes = (size_t)64 << 20; /* 4 KiB .. 64 MiB in both modes */
    cJSON *pj = cJSON_AddObjectToObject(root, "peer_allreduce");
    cJSON_AddItemToObject(pj, "ranks2", bench_peer(2, reps, target, max_bytes, &lat16k));
    cJSON_AddItemToObject(pj, "ranks4", bench_peer(4, reps, target, max_bytes, NULL));

    /* targets (bf16 is the target; fp32 alongside, for comparison) */
    const fwd_figures *f32 = &fig[0], *b16 = &fig[1];
    printf("targets: bf16 MLP forward >= 80%% of its GEMMs alone: %.0f%% (%s); fp32 %.0f%% (%s)\n",
           100.0 * b16->mlp_ratio, verdict(b16->mlp_ratio, 0.8, 1), 100.0 * f32->mlp_ratio,
           verdict(f32->mlp_ratio, 0.8, 1));
    printf("         bf16 batch-1 >= 70%% of copy bandwidth: %.0f%% (%s); fp32 %.0f%% (%s)\n",
           100.0 * b16->b1_ratio, verdict(b16->b1_ratio, 0.7, 1), 100.0 * f32->b1_ratio,
           verdict(f32->b1_ratio, 0.7, 1));
    printf("         16 KiB peer all-reduce <= 20 us: %.1f us (%s)\n", lat16k,
           verdict(lat16k, 20.0, 0));
    cJSON *tj = cJSON_AddObjectToObject(root, "targets");
    cJSON_AddStringToObject(tj, "mlp_bf16_ge_80pct", verdict(b16->mlp_ratio, 0.8, 1));
    cJSON_AddStringToObject(tj, "mlp_fp32_ge_80pct", verdict(f32->mlp_ratio, 0.8, 1));
    cJSON_AddStringToObject(tj, "batch1_bf16_ge_70pct_copy", verdict(b16->b1_ratio, 0.7, 1));
    cJSON_AddStringToObject(tj, "batch1_fp32_ge_70pct_copy", verdict(f32->b1_ratio, 0.7, 1));
    cJSON_AddStringToObject(tj, "peer_16k_le_20us", verdict(lat16k, 20.0, 0));
    int rc = args.json_path ? bu_write_json(root, args.json_path) : 0;
    cJSON_Delete(root);
    return rc ? 1 : 0;
}
