/* bench_mpi.c: the grid across MPI processes against the same grid inside one process, side
 * by side in one run (mpirun -np 2; bench/bench_mpi.sh).
 *
 * - PP2, decode at batch 8: tok/s with the two stages in two processes (one device each,
 *   pe_config.mpi) / tok/s with both in process 0. Target >= 0.9.
 * - TP2, decode at batch 1: the gap between tokens across processes / inside one (reported).
 * - The MPI library's own point-to-point bandwidth between the two processes (a 16 MiB
 *   ping-pong) and its latency (8 bytes), the ceiling of what crosses between them.
 * Each trial runs the in-process engine and then the cross-process one; the figures are
 * medians over the trials. While process 0 runs an engine alone, process 1 sleeps in a
 * polled barrier, so it takes no core from it.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_util.h"
#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"

enum { PROMPT = 16, MAXB = 8, MAXG = 64, MAXT = 7 };

static int nprocs = 1, me = 0;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* A barrier that sleeps while it waits (MPI_Barrier spins, taking a core). */
static void idle_barrier(void)
{
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (int done = 0; !done;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

typedef struct run_result {
    double tok_s;  /* tokens after every sequence's first / the time they took */
    double gap_ms; /* median ms between sequence 0's tokens after its first */
} run_result;

/* B sequences of PROMPT tokens, G greedy tokens each (process 0). */
static int run(pe_engine *e, int B, int G, int vocab, run_result *out)
{
    for (int i = 0; i < B; i++) {
        int32_t prompt[PROMPT];
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
    double tick[MAXG], t_first = 0, t_end = 0;
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
        if (firsts == B)
            after++;
        if (ev.index == 0 && ++firsts == B)
            t_first = t;
        t_end = t;
        if ((intptr_t)ev.user == 0 && nt < MAXG)
            tick[nt++] = t;
    }
    double gaps[MAXG];
    for (int k = 1; k < nt; k++)
        gaps[k - 1] = tick[k] - tick[k - 1];
    out->gap_ms = bu_median(gaps, (size_t)(nt - 1));
    out->tok_s = (double)after / ((t_end - t_first) * 1e-3);
    return 0;
}

/* The grid pp x tp: in process 0 alone (mpi 0) or one rank per process (mpi 1). */
static pe_engine *open_grid(const char *dir, int pp, int tp, int mpi)
{
    static const int dev0[4] = {0, 0, 0, 0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = mpi ? pp * tp / nprocs : pp * tp;
    cfg.devices = dev0;
    cfg.pp = pp;
    cfg.tp = tp;
    cfg.dp = 1;
    cfg.threads = 1;
    cfg.kv_tokens = 2048;
    cfg.mpi = mpi;
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK) {
        fprintf(stderr, "error (process %d): pp %d tp %d %s: %s\n", me, pp, tp,
                mpi ? "across processes" : "in one process", pe_last_error());
        pe_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* One trial of one grid: inside process 0, then across the processes. */
static int trial(const char *dir, int pp, int tp, int B, int G, int vocab, run_result *in,
                 run_result *across)
{
    int rc = 0;
    if (me == 0) {
        pe_engine *e = open_grid(dir, pp, tp, 0);
        rc = !e || run(e, B, G, vocab, in) != 0;
        pe_engine_destroy(e);
    }
    idle_barrier();
    pe_engine *e = open_grid(dir, pp, tp, 1);
    if (!e)
        return -1;
    if (me == 0)
        rc |= run(e, B, G, vocab, across) != 0;
    else
        rc |= pe_engine_follow(e) != PE_OK;
    pe_engine_destroy(e);
    return rc ? -1 : 0;
}

/* MPI's own point to point between processes 0 and 1: a ping-pong of n bytes, seconds per
 * one-way message (median of reps). */
static double ping_pong(size_t n, int reps)
{
    char *buf = calloc(n ? n : 1, 1);
    double t[64];
    for (int r = 0; r < reps + 1; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (me == 0) {
            MPI_Send(buf, (int)n, MPI_BYTE, 1, 9, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)n, MPI_BYTE, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (me == 1) {
            MPI_Recv(buf, (int)n, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)n, MPI_BYTE, 0, 9, MPI_COMM_WORLD);
        }
        if (r > 0) /* the first warms the connection */
            t[r - 1] = (MPI_Wtime() - t0) / 2;
    }
    free(buf);
    return bu_median(t, (size_t)reps);
}

static double med(double *x, int n) { return bu_median(x, (size_t)n); }

int main(int argc, char **argv)
{
    if (pe_mpi_init(&argc, &argv, &nprocs, &me) != PE_OK || nprocs != 2) {
        fprintf(stderr, "bench_mpi: run it with mpirun -np 2 (bench/bench_mpi.sh)%s%s\n",
                nprocs != 2 ? "" : ": ", nprocs != 2 ? "" : pe_last_error());
        pe_mpi_finalize();
        return 2;
    }
    bu_args args;
    bu_parse_args(argc, argv, &args);
    const int T = args.quick ? 1 : 3, G = args.quick ? 8 : 32;

    /* A Llama big enough that a step's compute is not all overhead, small enough for CI's
     * cores: 512 wide, 8 blocks, 8 heads over 4 KV heads, vocab 8000. */
    pe_gen_spec spec;
    pe_gen_init(&spec, PE_GEN_LLAMA, "tiny");
    spec.hidden = 512;
    spec.layers = 8;
    spec.heads = 8;
    spec.kv_heads = 4;
    spec.inner = 1376;
    spec.vocab = 8000;
    spec.context = 512;
    spec.seed = 5;
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/bench_mpi.%d.%ld", me, (long)getpid());
    if (pe_gen_write(&spec, dir) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    double pp_in[MAXT], pp_x[MAXT], tp_in[MAXT], tp_x[MAXT];
    int rc = 0;
    for (int t = 0; t < T && rc == 0; t++) {
        run_result in = {0}, x = {0};
        rc |= trial(dir, 2, 1, MAXB, G, spec.vocab, &in, &x);
        pp_in[t] = in.tok_s;
        pp_x[t] = x.tok_s;
        rc |= trial(dir, 1, 2, 1, G, spec.vocab, &in, &x);
        tp_in[t] = in.gap_ms;
        tp_x[t] = x.gap_ms;
    }
    const double bw_s = ping_pong((size_t)16 << 20, args.quick ? 3 : 10);
    const double lat_s = ping_pong(8, args.quick ? 10 : 50);
    bu_remove_dir(dir);
    if (me == 0 && rc == 0) {
        const double pi = med(pp_in, T), px = med(pp_x, T), ti = med(tp_in, T),
                     tx = med(tp_x, T);
        const double act = (double)MAXB * spec.hidden * sizeof(float); /* a step's send */
        printf("grid across 2 MPI processes against the same grid in one process "
               "(host backend, 1 core a rank; llama %d wide, %d blocks; median of %d)\n",
               spec.hidden, spec.layers, T);
        printf("%-34s %12s %12s %8s\n", "", "one process", "2 processes", "ratio");
        printf("%-34s %12.1f %12.1f %8.2f  %s (>= 0.9)\n", "PP2 decode, batch 8: tok/s", pi, px,
               px / pi, px / pi >= 0.9 ? "PASS" : "MISS");
        printf("%-34s %12.3f %12.3f %8.2f  (reported)\n", "TP2 decode, batch 1: ms/token", ti,
               tx, tx / ti);
        printf("MPI point to point (ping-pong): %.2f GB/s for 16 MiB, %.1f us for 8 bytes; "
               "a PP2 step at batch 8 sends %.0f bytes (%.1f us at that bandwidth)\n",
               (double)(16 << 20) / bw_s * 1e-9, lat_s * 1e6, act, act / ((16 << 20) / bw_s) * 1e6);
        if (args.json_path) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddNumberToObject(root, "pp2_tok_s_one_process", pi);
            cJSON_AddNumberToObject(root, "pp2_tok_s_two_processes", px);
            cJSON_AddNumberToObject(root, "pp2_ratio", px / pi);
            cJSON_AddNumberToObject(root, "tp2_ms_one_process", ti);
            cJSON_AddNumberToObject(root, "tp2_ms_two_processes", tx);
            cJSON_AddNumberToObject(root, "tp2_latency_ratio", tx / ti);
            cJSON_AddNumberToObject(root, "mpi_bandwidth_gb_s", (double)(16 << 20) / bw_s * 1e-9);
            cJSON_AddNumberToObject(root, "mpi_latency_us", lat_s * 1e6);
            cJSON_AddNumberToObject(root, "trials", T);
            rc |= bu_write_json(root, args.json_path);
            cJSON_Delete(root);
        }
    }
    pe_mpi_finalize();
    return rc ? 1 : 0;
}
