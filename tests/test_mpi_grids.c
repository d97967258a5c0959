/* test_mpi_grids.c: decoders on grids that span the processes of an MPI job give one
 * process's answers.
 *
 * Run by mpirun (-np 2 or 4; tests/CMakeLists.txt). Every process writes the same seeded
 * tiny GPT-2 and Llama (its own copy) and creates each grid with pe_config.mpi; process 0
 * runs 8 sequences of different prompt lengths (greedy, then sampled with a seed and top-5
 * logprobs) and pe_score over 20 positions, and checks them against a one-process engine
 * on one device: the same tokens, top-k ids and logprobs within 1e-4, logits within 1e-4
 * of their scale. The other processes follow. Then a grid whose size does not match the
 * processes' devices must be refused on every process, naming the process count, and
 * pe_mpi_agree must give every process the first failure.
 *
 * Not cmocka: a failed check on process 0 must end the whole job (MPI_Abort), or the
 * followers would wait for it forever.
 */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"

enum { NSEQ = 8, G = 24, MAXPROMPT = 40, TOPK = 5, NSCORE = 20 };

static int nprocs = 1, me = 0;
static const size_t prompt_lens[NSEQ] = {1, 40, 7, 25, 12, 18, 3, 31};

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_mpi_grids[process %d]: FAIL: ", me);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void tokens_of(int32_t *t, size_t n, int vocab, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        t[i] = (int32_t)(s % (uint64_t)vocab);
    }
}

/* A tiny "sharp" model (as tests/test_models.h), written under this process's own path. */
static void write_model(pe_gen_arch arch, uint64_t seed, const char *name, char *dir,
                        size_t len, int *vocab)
{
    pe_gen_spec s;
    if (pe_gen_init(&s, arch, "tiny") != PE_OK)
        die("pe_gen_init: %s", pe_last_error());
    s.seed = seed;
    s.std = 0.08;
    s.qk_std = 0.5;
    s.norm_std = 0.1;
    s.bias_std = 0.05;
    s.layers = 4;
    if (arch == PE_GEN_GPT2) {
        s.vocab = 253; /* padded at tp 2 and 4 */
        s.bos_token_id = s.eos_token_id = 252;
    }
    const char *data = getenv("PE_TEST_DATA");
    snprintf(dir, len, "%s/%s.%ld", data && *data ? data : "/tmp", name, (long)getpid());
    if (pe_gen_write(&s, dir) != PE_OK)
        die("pe_gen_write %s: %s", dir, pe_last_error());
    *vocab = s.vocab;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *ent;
    char path[1024];
    while ((ent = readdir(d))) {
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
            unlink(path);
        }
    }
    closedir(d);
    rmdir(dir);
}

typedef struct grid {
    int dp, pp, tp;
} grid;

static pe_status create(const char *dir, grid g, int mpi, int ndev, pe_engine **e)
{
    static const int zeros[8] = {0};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = ndev;
    cfg.devices = zeros; /* host device 0, once per rank: several ranks may share it */
    cfg.dp = g.dp;
    cfg.pp = g.pp;
    cfg.tp = g.tp;
    cfg.threads = 1;
    cfg.mpi = mpi;
    cfg.schedule = g.pp > 1 ? PE_SCHED_STREAM : PE_SCHED_NAIVE;
    cfg.microbatches = g.pp;
    *e = NULL;
    pe_status s = pe_engine_create(&cfg, e);
    if (s == PE_OK)
        s = pe_engine_load(*e, dir);
    return s;
}

typedef struct answers {
    int ntok[NSEQ];
    int32_t tok[NSEQ][G];
    float top[NSEQ][G][TOPK];
    int32_t top_ids[NSEQ][G][TOPK];
    float *logits; /* (NSCORE, vocab) */
} answers;

static void generate(pe_engine *e, int vocab, int sampled, answers *out)
{
    for (int i = 0; i < NSEQ; i++) {
        int32_t prompt[MAXPROMPT];
        tokens_of(prompt, prompt_lens[i], vocab, 100 + (uint64_t)i);
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = prompt_lens[i];
        p.max_tokens = G;
        p.ignore_eos = 1;
        p.user = (void *)(intptr_t)i;
        if (sampled) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_k = 40;
            p.sampling.top_p = 0.95f;
            p.sampling.seed = 7 + (uint64_t)i;
            p.logprobs = TOPK;
        }
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK)
            die("pe_seq_submit: %s", pe_last_error());
    }
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        if (ev.finish == PE_FINISH_ERROR)
            die("sequence %d ended with an error: %s", i, pe_engine_last_error(e));
        if (ev.token < 0)
            continue;
        int k = out->ntok[i]++;
        if (k >= G)
            die("sequence %d got more than %d tokens", i, G);
        out->tok[i][k] = ev.token;
        for (int j = 0; j < ev.nlogprobs && j < TOPK; j++) {
            out->top[i][k][j] = ev.top_logprobs[j];
            out->top_ids[i][k][j] = ev.top_tokens[j];
        }
    }
}

static void run_all(pe_engine *e, int vocab, answers out[2])
{
    memset(out, 0, 2 * sizeof *out);
    generate(e, vocab, 0, &out[0]);
    generate(e, vocab, 1, &out[1]);
    int32_t prompt[NSCORE];
    tokens_of(prompt, NSCORE, vocab, 55);
    out[0].logits = malloc((size_t)NSCORE * (size_t)vocab * sizeof(float));
    if (!out[0].logits || pe_score(e, prompt, NSCORE, 1, out[0].logits) != PE_OK)
        die("pe_score: %s", pe_last_error());
}

static void expect_same(const answers one[2], const answers got[2], int vocab, const char *what)
{
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < NSEQ; i++) {
            if (got[m].ntok[i] != G)
                die("%s: sequence %d got %d tokens, not %d", what, i, got[m].ntok[i], G);
            for (int k = 0; k < G; k++) {
                if (got[m].tok[i][k] != one[m].tok[i][k])
                    die("%s (%s): sequence %d token %d is %d, one process's %d", what,
                        m ? "sampled" : "greedy", i, k, got[m].tok[i][k], one[m].tok[i][k]);
                for (int j = 0; j < TOPK; j++)
                    if (got[m].top_ids[i][k][j] != one[m].top_ids[i][k][j] ||
                        fabsf(got[m].top[i][k][j] - one[m].top[i][k][j]) > 1e-4f)
                        die("%s: sequence %d token %d logprob %d: %d %g, one process's %d %g",
                            what, i, k, j, got[m].top_ids[i][k][j], (double)got[m].top[i][k][j],
                            one[m].top_ids[i][k][j], (double)one[m].top[i][k][j]);
            }
        }
    double d = 0, scale = 0;
    for (size_t i = 0; i < (size_t)NSCORE * (size_t)vocab; i++) {
        d = fmax(d, fabs((double)got[0].logits[i] - one[0].logits[i]));
        scale = fmax(scale, fabs((double)one[0].logits[i]));
    }
    if (!(d <= 1e-4 * scale))
        die("%s: pe_score logits differ by %g (scale %g)", what, d, scale);
}

/* One grid over the job: process 0 checks it against one, the others follow. */
static void check_grid(const char *dir, int vocab, grid g, const answers one[2],
                       const char *model)
{
    char what[128];
    snprintf(what, sizeof what, "%s dp%d x pp%d x tp%d over %d processes", model, g.dp, g.pp,
             g.tp, nprocs);
    pe_engine *e = NULL;
    pe_status s = create(dir, g, 1, g.dp * g.pp * g.tp / nprocs, &e);
    if (s != PE_OK)
        die("%s: create/load: %s", what, pe_last_error());
    pe_engine_info info;
    if (pe_engine_info_get(e, &info) != PE_OK || info.processes != nprocs ||
        info.process != me || info.world != g.dp * g.pp * g.tp)
        die("%s: pe_engine_info says %d processes, this one %d, world %d", what,
            info.processes, info.process, info.world);
    for (int r = 0; r < info.world && r < 64; r++)
        if (info.weight_bytes[r] == 0 || info.kv_bytes[r] == 0)
            die("%s: pe_engine_info has no weight or KV bytes for rank %d", what, r);
    if (me == 0) {
        answers got[2];
        run_all(e, vocab, got);
        expect_same(one, got, vocab, what);
        free(got[0].logits);
        printf("ok: %s gives one process's tokens, logprobs and logits\n", what);
        fflush(stdout);
    } else if (pe_engine_follow(e) != PE_OK) {
        die("%s: pe_engine_follow: %s", what, pe_engine_last_error(e));
    }
    pe_engine_destroy(e);
}

/* A grid of 3 ranks over nprocs processes of one device each: refused on every process. */
static void wrong_process_count_is_refused(const char *dir)
{
    grid g = {1, 1, nprocs + 1};
    pe_engine *e = NULL;
    pe_status s = create(dir, g, 1, 1, &e);
    if (s != PE_EINVAL || e)
        die("a grid of %d ranks over %d processes x 1 device was not refused (status %d)",
            nprocs + 1, nprocs, (int)s);
    char want[64];
    snprintf(want, sizeof want, "%d processes x 1 device", nprocs);
    if (!strstr(pe_last_error(), want) || !strstr(pe_last_error(), "mpirun -np"))
        die("the refusal does not name the processes and the fix: %s", pe_last_error());
    if (me == 0)
        printf("ok: %s\n", pe_last_error());
}

/* pe_mpi_agree: every process's PE_OK is the job's; else the first failure in process order
 * is every process's, the others' last error naming its process. */
static void outcomes_are_agreed(void)
{
    if (pe_mpi_agree(PE_OK) != PE_OK)
        die("pe_mpi_agree: all PE_OK did not agree on PE_OK");
    const int last = nprocs - 1;
    pe_status s = pe_mpi_agree(me == last ? PE_EIO : PE_OK);
    if (s != PE_EIO)
        die("pe_mpi_agree: process %d's PE_EIO came back as %d", last, (int)s);
    char want[64];
    snprintf(want, sizeof want, "process %d of %d failed before the engine", last, nprocs);
    if (me != last && !strstr(pe_last_error(), want))
        die("pe_mpi_agree: the message does not name process %d: %s", last, pe_last_error());
    /* process 0's failure comes first, whatever the later processes say */
    s = pe_mpi_agree(me == 0 ? PE_EINVAL : me == last ? PE_EIO : PE_OK);
    if (s != PE_EINVAL)
        die("pe_mpi_agree: process 0's PE_EINVAL did not come first (%d)", (int)s);
    if (me == 0)
        printf("ok: pe_mpi_agree gives every process the first failure\n");
}

int main(int argc, char **argv)
{
    if (pe_mpi_init(&argc, &argv, &nprocs, &me) != PE_OK) {
        fprintf(stderr, "pe_mpi_init: %s\n", pe_last_error());
        return 1;
    }
    if (nprocs < 2) { /* ctest runs it under mpirun; alone it has nothing to check */
        printf("test_mpi_grids: run me with mpirun -np 2 or 4\n");
        pe_mpi_finalize();
        return 77;
    }
    char gpt2_dir[512], llama_dir[512];
    int gpt2_vocab = 0, llama_vocab = 0;
    write_model(PE_GEN_GPT2, 21, "mpi_gpt2", gpt2_dir, sizeof gpt2_dir, &gpt2_vocab);
    write_model(PE_GEN_LLAMA, 22, "mpi_llama", llama_dir, sizeof llama_dir, &llama_vocab);

    /* One process, one device: the reference (process 0 alone, no MPI in the engine). */
    answers one_gpt2[2], one_llama[2];
    if (me == 0) {
        pe_engine *e = NULL;
        grid single = {1, 1, 1};
        if (create(gpt2_dir, single, 0, 1, &e) != PE_OK)
            die("one device: %s", pe_last_error());
        run_all(e, gpt2_vocab, one_gpt2);
        pe_engine_destroy(e);
        if (create(llama_dir, single, 0, 1, &e) != PE_OK)
            die("one device: %s", pe_last_error());
        run_all(e, llama_vocab, one_llama);
        pe_engine_destroy(e);
    }
    /* The grids across processes: dp2, tp2, pp2, dp2 x pp2 (-np 2: two ranks a
     * process; -np 4: one), and pp2 x tp2 (TP inside a process at -np 2). */
    static const grid grids[] = {{2, 1, 1}, {1, 1, 2}, {1, 2, 1}, {2, 2, 1}, {1, 2, 2}};
    for (size_t i = 0; i < sizeof grids / sizeof *grids; i++) {
        grid g = grids[i];
        if ((g.dp * g.pp * g.tp) % nprocs != 0)
            continue;
        check_grid(gpt2_dir, gpt2_vocab, g, one_gpt2, "gpt2");
        check_grid(llama_dir, llama_vocab, g, one_llama, "llama");
    }
    wrong_process_count_is_refused(llama_dir);
    outcomes_are_agreed();
    if (me == 0) {
        free(one_gpt2[0].logits);
        free(one_llama[0].logits);
    }
    remove_dir(gpt2_dir);
    remove_dir(llama_dir);
    pe_mpi_finalize();
    return 0;
}
