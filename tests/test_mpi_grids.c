/* test_mpi_grids.c: decoders on grids that span the processes of an MPI job give one
 * process's answers.
 *
 * Run by mpirun (-np 2 or 4; tests/CMakeLists.txt). Every process writes the same seeded
 * tiny GPT-2 and Llama (its own copy) and creates each grid with pe_config.mpi; process 0
 * runs 8 sequences of different prompt lengths (greedy, then sampled with a seed and top-5
 * logprobs) and pe_score over 20 positions, and checks them against a one-process engine
 * on one device: the same tokens, top-k ids and logprobs within 1e-4, logits within 1e-4
 * of their scale; without TP on a batch-invariant host backend (AVX2 or AVX-512), all of it
 * bit for bit. The Llama's grids run with speculative decoding (up to 4 drafts a decode),
 * within tolerance of one process without it. The other processes follow. Then a second
 * engine with pe_config.mpi while one exists must be refused on every process (and the
 * first one still answer), a grid whose size does not match the processes' devices must
 * be refused on every process, naming the process count, and pe_mpi_agree must give every
 * process the first failure.
 * Before the grids, each other process sends process 0 a control message that arrives
 * after process 0's engine is gone: the engines after it must drop it and lose none of
 * their own.
 *
 * Not cmocka: a failed check on process 0 must end the whole job (MPI_Abort), or the
 * followers would wait for it forever. So it takes only the helpers that say why instead of
 * failing (test_generate.h, tm_sharp, tm_remove).
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/host/hb_simd.h"
#include "engine/engine_testing.h"
#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"
#include "test_generate.h"
#include "test_models.h"

enum { G = 24 };

static int nprocs = 1, me = 0;

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

/* A tiny "sharp" model (tm_sharp), written under this process's own path. */
static void write_model(pe_gen_arch arch, uint64_t seed, const char *name, char *dir,
                        size_t len, int *vocab)
{
    pe_gen_spec s;
    if (tm_sharp(&s, arch, seed) != PE_OK)
        die("pe_gen_init: %s", pe_last_error());
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

typedef struct grid {
    int dp, pp, tp;
} grid;

/* A host engine on grid g over ndev devices a process (pe_config.mpi = mpi), decodes
 * carrying up to spec drafts. */
static pe_status create(const char *dir, grid g, int mpi, int ndev, int spec, pe_engine **e)
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
    cfg.spec_tokens = spec;
    *e = NULL;
    pe_status s = pe_engine_create(&cfg, e);
    if (s == PE_OK)
        s = pe_engine_load(*e, dir);
    return s;
}

/* A run's answers: TG_NSEQ sequences greedy and sampled, pe_score's logits and
 * pe_score_logprobs' prompt logprobs. */
typedef struct answers {
    tg_answers greedy, sampled;
    float *logits; /* (TG_NSCORE, vocab) */
    pe_logprobs prompt_lp[TG_NSCORE - 1];
} answers;

static void run_all(pe_engine *e, int vocab, answers *out)
{
    char why[TG_WHY];
    if (!tg_generate(e, vocab, TG_NSEQ, G, TG_GREEDY, &out->greedy, why) ||
        !tg_generate(e, vocab, TG_NSEQ, G, TG_SAMPLED_TOP_K, &out->sampled, why) ||
        !(out->logits = tg_score(e, vocab, why)) ||
        !tg_prompt_logprobs(e, vocab, out->prompt_lp, why))
        die("%s", why);
}

/* got against one's: the same bits where exact (no TP on a batch-invariant backend), else
 * within test_generate.h's tolerances. */
static void expect_same(const answers *one, const answers *got, int vocab, int exact,
                        const char *what)
{
    char why[TG_WHY];
    if (!(exact ? tg_identical_answers(&one->greedy, &got->greedy, why)
                : tg_same_answers(&one->greedy, &got->greedy, why)))
        die("%s (greedy), against one process: %s", what, why);
    if (!(exact ? tg_identical_answers(&one->sampled, &got->sampled, why)
                : tg_same_answers(&one->sampled, &got->sampled, why)))
        die("%s (sampled), against one process: %s", what, why);
    if (!tg_same_logits(one->logits, got->logits, vocab, exact, why))
        die("%s, against one process: %s", what, why);
    if (!tg_same_prompt_logprobs(one->logits, got->prompt_lp, vocab, why))
        die("%s (prompt logprobs), against one process's logits: %s", what, why);
}

/* Process 0 runs e and checks its answers against one's; the others follow. */
static void run_or_follow(pe_engine *e, int vocab, const answers *one, int exact,
                          const char *what)
{
    if (me == 0) {
        static answers got;
        run_all(e, vocab, &got);
        expect_same(one, &got, vocab, exact, what);
        free(got.logits);
        printf("ok: %s gives one process's tokens, logprobs and logits%s\n", what,
               exact ? ", bit for bit" : "");
        fflush(stdout);
    } else if (pe_engine_follow(e) != PE_OK) {
        die("%s: pe_engine_follow: %s", what, pe_engine_last_error(e));
    }
}

/* One grid over the job, its decodes carrying up to spec drafts: process 0 checks it
 * against one (without drafts), the others follow. */
static void check_grid(const char *dir, int vocab, grid g, int spec, const answers *one,
                       const char *model)
{
    char what[128];
    snprintf(what, sizeof what, "%s dp%d x pp%d x tp%d over %d processes%s", model, g.dp,
             g.pp, g.tp, nprocs, spec ? ", with drafts" : "");
    pe_engine *e = NULL;
    pe_status s = create(dir, g, 1, g.dp * g.pp * g.tp / nprocs, spec, &e);
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
    /* (a decode with drafts sums its rows as a prefill chunk: within tolerance) */
    run_or_follow(e, vocab, one, !spec && g.tp == 1 && hb_simd_batch_invariant(hb_simd_get()),
                  what);
    pe_engine_destroy(e);
}

/* Each other process sends process 0 a control message of an engine that process 0 has
 * destroyed already, as a beat late on the network would. The grids that follow lose none of
 * their own messages: OpenMPI, which reuses a freed communicator's context id, matched such
 * a message in place of one of the next engine's when each engine had a communicator of
 * its own, and a step never reached its worker (a hang), or TP ranks ran different steps. */
static void late_message_of_an_earlier_engine(const char *dir)
{
    grid g = {nprocs, 1, 1};
    pe_engine *e = NULL;
    if (create(dir, g, 1, 1, 0, &e) != PE_OK)
        die("dp%d for the late message: create/load: %s", nprocs, pe_last_error());
    if (me == 0)
        pe_engine_destroy(e);
    else if (pe_engine_follow(e) != PE_OK)
        die("dp%d for the late message: pe_engine_follow: %s", nprocs, pe_engine_last_error(e));
    MPI_Barrier(MPI_COMM_WORLD); /* process 0's engine is gone */
    if (me != 0) {
        if (en_send_late_message(e) != PE_OK)
            die("en_send_late_message failed");
        pe_engine_destroy(e);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A second engine with pe_config.mpi while one exists is refused on every process, naming
 * the fix; the first one still runs after it. */
static void second_engine_is_refused(const char *dir, int vocab, const answers *one)
{
    grid g = {nprocs, 1, 1};
    pe_engine *e = NULL, *second = NULL;
    if (create(dir, g, 1, 1, 0, &e) != PE_OK)
        die("dp%d: create/load: %s", nprocs, pe_last_error());
    pe_status s = create(dir, g, 1, 1, 0, &second);
    if (s != PE_EINVAL || second)
        die("a second MPI engine was not refused (status %d)", (int)s);
    if (!strstr(pe_last_error(), "destroy it first"))
        die("the refusal of a second MPI engine does not name the fix: %s", pe_last_error());
    if (me == 0)
        printf("ok: %s\n", pe_last_error());
    run_or_follow(e, vocab, one, hb_simd_batch_invariant(hb_simd_get()),
                  "the first MPI engine, after a second one was refused");
    pe_engine_destroy(e);
}

/* A grid of 3 ranks over nprocs processes of one device each: refused on every process. */
static void wrong_process_count_is_refused(const char *dir)
{
    grid g = {1, 1, nprocs + 1};
    pe_engine *e = NULL;
    pe_status s = create(dir, g, 1, 1, 0, &e);
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
    snprintf(want, sizeof want, "process %d of %d failed (", last, nprocs);
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
    static answers one_gpt2, one_llama;
    if (me == 0) {
        pe_engine *e = NULL;
        grid single = {1, 1, 1};
        if (create(gpt2_dir, single, 0, 1, 0, &e) != PE_OK)
            die("one device: %s", pe_last_error());
        run_all(e, gpt2_vocab, &one_gpt2);
        pe_engine_destroy(e);
        if (create(llama_dir, single, 0, 1, 0, &e) != PE_OK)
            die("one device: %s", pe_last_error());
        run_all(e, llama_vocab, &one_llama);
        pe_engine_destroy(e);
    }
    late_message_of_an_earlier_engine(llama_dir);
    /* The grids across processes: dp2, tp2, pp2, dp2 x pp2 (-np 2: two ranks a
     * process; -np 4: one), and pp2 x tp2 (TP inside a process at -np 2); the Llama's with
     * up to 4 drafts a decode (speculative decoding), against one process without. */
    static const grid grids[] = {{2, 1, 1}, {1, 1, 2}, {1, 2, 1}, {2, 2, 1}, {1, 2, 2}};
    for (size_t i = 0; i < sizeof grids / sizeof *grids; i++) {
        grid g = grids[i];
        if ((g.dp * g.pp * g.tp) % nprocs != 0)
            continue;
        check_grid(gpt2_dir, gpt2_vocab, g, 0, &one_gpt2, "gpt2");
        check_grid(llama_dir, llama_vocab, g, 4, &one_llama, "llama"); /* greedy: drafts */
    }
    second_engine_is_refused(llama_dir, llama_vocab, &one_llama);
    wrong_process_count_is_refused(llama_dir);
    outcomes_are_agreed();
    if (me == 0) {
        free(one_gpt2.logits);
        free(one_llama.logits);
    }
    tm_remove(gpt2_dir);
    tm_remove(llama_dir);
    pe_mpi_finalize();
    return 0;
}
