/* test_mpi_comm.c: host communicators over MPI processes (comm_create_procs), run by
 * mpirun with 1, 2 and 4 processes, each holding its ranks as threads (1, then 2 a
 * process).
 *
 * Every result is checked bit for bit against a naive reference that each process
 * computes on its own from the deterministic inputs of every rank (rank_data: the same
 * function everywhere): all-reduce (in place and not, 0 .. 1<<18 elements), allgather,
 * reduce_scatter, broadcast from several roots, barrier (it waits for the slowest rank),
 * send/recv in order inside and across processes with everyone sending first, a count
 * mismatch named in the error, comm_split into groups inside one process (plain worlds)
 * and across processes (uneven ranks per process, and none here), comm_abort waking a
 * rank blocked on another process within a second, and a collective whose count differs
 * between processes failing on every rank instead of hanging.
 *
 * A failed check prints what and where, and ends the whole job (MPI_Abort, exit code 1):
 * the other processes would otherwise wait in a collective forever.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_mpi_check.h"
#include "test_util.h"

#include "backend/backend.h"
#include "backend/host/hb_comm.h" /* to see that a group inside one process is a plain world */

#define MAXL 2  /* ranks per process */
#define MAXN 64 /* ranks in all */

static const be_ops *ops;
static int P, ME; /* processes, this one */

/* A call that must succeed; on failure the device's message says why. */
#define OK(dev, call)                                                                     \
    do {                                                                                  \
        pe_status s_ = (call);                                                            \
        CHECK(s_ == PE_OK, "%s: %s", pe_status_str(s_), ops->last_error(dev));            \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- inputs and the naive reference ------------------------------------------------------ */

/* Rank q's data: random, scaled by rank so that the order of a float sum shows in its bits. */
static float *rank_data(size_t n, int q, uint64_t salt)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    CHECK(x != NULL, "out of memory");
    tu_fill_random(x, n, salt * 1000003u + (uint64_t)q * 7919u + 1u);
    static const float scale[] = {1.0f, 1.7f, 0.3f, 7.0f, 0.05f, 2.5f, 13.0f, 0.6f};
    for (size_t i = 0; i < n; i++)
        x[i] *= scale[q % 8];
    return x;
}

/* ref(count) = sum over k of rank_data(members[k])[off .. off + count), in member order. */
static float *naive_sum(const int *members, int k, size_t len, uint64_t salt, size_t off,
                        size_t count)
{
    float *ref = calloc(count ? count : 1, sizeof *ref);
    CHECK(ref != NULL, "out of memory");
    for (int j = 0; j < k; j++) {
        float *x = rank_data(len, members[j], salt);
        for (size_t i = 0; i < count; i++)
            ref[i] = j == 0 ? x[off + i] : ref[i] + x[off + i];
        free(x);
    }
    return ref;
}

static void expect_bits(const float *got, const float *ref, size_t count, const char *what,
                        int rank)
{
    CHECK(memcmp(got, ref, count * sizeof *got) == 0,
          "%s on rank %d (count %zu) differs from the naive rank-order reference (max |diff| "
          "%g)", what, rank, count, tu_max_abs_diff(got, ref, count));
}

/* ---- a process's ranks ------------------------------------------------------------------- */

typedef struct proc {
    int L, n;                  /* ranks per process, in all */
    be_device *devs[MAXN];     /* devs[r]: this process's ranks' devices, NULL elsewhere */
    be_comm *world[MAXN];
    be_comm *split[MAXN];      /* the group of the split being tested */
    int colors[MAXN];
    pthread_barrier_t pb;      /* the local ranks and the main thread */
    _Atomic int blocked;       /* the abort test: rank 0 is about to wait */
    double abort_at;           /* when the main thread called comm_abort */
} proc;

static proc G;

static int lo(void) { return ME * G.L; }
static void local_wait(void) { pthread_barrier_wait(&G.pb); }

/* Members of the group of parent rank r under colors (parent-rank order); k of them. */
static int members_of(const int *colors, int n, int r, int *members)
{
    int k = 0;
    for (int q = 0; q < n; q++)
        if (colors[q] == colors[r])
            members[k++] = q;
    return k;
}

/* ---- collectives ------------------------------------------------------------------------- */

/* c is rank `me` (parent rank pr) of a group whose members are parent ranks members (k). */
static void check_allreduce(be_comm *c, be_device *dev, int pr, const int *members, int k,
                            size_t count, int in_place, uint64_t salt)
{
    float *x = rank_data(count, pr, salt), *recv = malloc((count ? count : 1) * sizeof *recv);
    CHECK(recv != NULL, "out of memory");
    float *orig = rank_data(count, pr, salt);
    const float *send = x;
    if (in_place) {
        memcpy(recv, x, count * sizeof *x);
        send = recv;
    }
    OK(dev, ops->allreduce_sum(c, send, recv, count));
    float *ref = naive_sum(members, k, count, salt, 0, count);
    expect_bits(recv, ref, count, in_place ? "allreduce_sum in place" : "allreduce_sum",
                ops->comm_rank(c));
    if (!in_place)
        CHECK(memcmp(x, orig, count * sizeof *x) == 0, "allreduce_sum changed its send buffer");
    free(x), free(recv), free(orig), free(ref);
}

static void check_allgather(be_comm *c, be_device *dev, int pr, const int *members, int k,
                            size_t count, int in_place, uint64_t salt)
{
    int me = ops->comm_rank(c);
    float *x = rank_data(count, pr, salt);
    float *recv = malloc(((size_t)k * count + 1) * sizeof *recv);
    CHECK(recv != NULL, "out of memory");
    for (size_t i = 0; i < (size_t)k * count; i++)
        recv[i] = -12345.0f;
    const float *send = x;
    if (in_place) {
        memcpy(recv + (size_t)me * count, x, count * sizeof *x);
        send = recv + (size_t)me * count;
    }
    OK(dev, ops->allgather(c, send, recv, count));
    for (int j = 0; j < k; j++) {
        float *ref = rank_data(count, members[j], salt);
        expect_bits(recv + (size_t)j * count, ref, count, "allgather", me);
        free(ref);
    }
    free(x), free(recv);
}

static void check_reduce_scatter(be_comm *c, be_device *dev, int pr, const int *members, int k,
                                 size_t count, int in_place, uint64_t salt)
{
    int me = ops->comm_rank(c);
    size_t len = (size_t)k * count;
    float *x = rank_data(len, pr, salt), *recv = malloc((count ? count : 1) * sizeof *recv);
    CHECK(recv != NULL, "out of memory");
    float *out = in_place ? x + (size_t)me * count : recv;
    OK(dev, ops->reduce_scatter(c, x, out, count));
    float *ref = naive_sum(members, k, len, salt, (size_t)me * count, count);
    expect_bits(out, ref, count, in_place ? "reduce_scatter in place" : "reduce_scatter", me);
    free(x), free(recv), free(ref);
}

static void check_broadcast(be_comm *c, be_device *dev, int pr, const int *members, int k,
                            size_t count, int root, uint64_t salt)
{
    (void)k;
    float *buf = rank_data(count, pr, salt);
    OK(dev, ops->broadcast(c, buf, count, root));
    float *ref = rank_data(count, members[root], salt);
    expect_bits(buf, ref, count, "broadcast", ops->comm_rank(c));
    free(buf), free(ref);
}

/* The collectives of one communicator (rank pr of the parent; members: its group). */
static void check_collectives(be_comm *c, be_device *dev, int pr, const int *members, int k,
                              uint64_t salt)
{
    static const size_t sizes[] = {0, 1, 1000, (size_t)1 << 18};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int in_place = 0; in_place < 2; in_place++)
            check_allreduce(c, dev, pr, members, k, sizes[i], in_place, salt + i);
    for (size_t count = 0; count <= 1000; count = count ? count * 1000 : 1)
        for (int in_place = 0; in_place < 2; in_place++) {
            check_allgather(c, dev, pr, members, k, count, in_place, salt + 10 + count);
            check_reduce_scatter(c, dev, pr, members, k, count, in_place, salt + 20 + count);
        }
    int roots[] = {0, k - 1, k / 2};
    for (int i = 0; i < 3; i++)
        check_broadcast(c, dev, pr, members, k, 777, roots[i], salt + 30 + (uint64_t)i);
    check_broadcast(c, dev, pr, members, k, 1 << 16, k - 1, salt + 40);
}

/* The barrier waits for the slowest rank: rank 0 arrives 200 ms late. */
static void check_barrier(be_comm *c, be_device *dev)
{
    OK(dev, ops->barrier(c));
    double t0 = now_s();
    if (ops->comm_rank(c) == 0)
        sleep_ms(200);
    OK(dev, ops->barrier(c));
    double waited = now_s() - t0;
    CHECK(waited > 0.15, "rank %d passed the barrier after %.3f s, before rank 0 arrived",
          ops->comm_rank(c), waited);
}

/* ---- point to point ---------------------------------------------------------------------- */

#define MSGS 3

static size_t msg_len(int m) { return m == 2 ? (size_t)1 << 16 : 1 + (size_t)m * 100; }

static uint64_t msg_salt(int from, int to, int m)
{
    return 5000u + (uint64_t)(from * MAXN + to) * 8u + (uint64_t)m;
}

/* Every rank sends MSGS messages (the last one large) to every other rank, then receives
 * them: in order per pair, no deadlock. */
static void check_p2p(be_comm *c, be_device *dev)
{
    int me = ops->comm_rank(c), n = ops->comm_size(c);
    float *sent[MAXN][MSGS];
    for (int to = 0; to < n; to++)
        for (int m = 0; to != me && m < MSGS; m++) {
            sent[to][m] = rank_data(msg_len(m), me, msg_salt(me, to, m));
            OK(dev, ops->send(c, sent[to][m], msg_len(m), to));
        }
    for (int from = 0; from < n; from++)
        for (int m = 0; from != me && m < MSGS; m++) {
            float *buf = malloc(msg_len(m) * sizeof *buf);
            CHECK(buf != NULL, "out of memory");
            OK(dev, ops->recv(c, buf, msg_len(m), from));
            float *ref = rank_data(msg_len(m), from, msg_salt(from, me, m));
            expect_bits(buf, ref, msg_len(m), "recv", me);
            free(buf), free(ref);
        }
    OK(dev, ops->synchronize(dev)); /* every send received: the buffers may go */
    for (int to = 0; to < n; to++)
        for (int m = 0; to != me && m < MSGS; m++)
            free(sent[to][m]);
}

/* Rank 0 sends 5 elements to rank n-1, which asks for 7: PE_ECOMM naming both ranks and
 * counts; the next message of the pair is received normally. */
static void check_count_mismatch(be_comm *c, be_device *dev)
{
    int me = ops->comm_rank(c), n = ops->comm_size(c);
    if (n < 2)
        return;
    float five[5] = {1, 2, 3, 4, 5}, seven[7] = {0}, next[3] = {7, 8, 9}, got[3] = {0};
    if (me == 0) {
        OK(dev, ops->send(c, five, 5, n - 1));
        OK(dev, ops->send(c, next, 3, n - 1));
        ops->synchronize(dev); /* across processes the sender does not learn of it */
    } else if (me == n - 1) {
        pe_status s = ops->recv(c, seven, 7, 0);
        const char *msg = ops->last_error(dev);
        char want[160];
        snprintf(want, sizeof want, "recv on rank %d from rank 0: expected 7 elements but "
                 "the matching send has 5", n - 1);
        CHECK(s == PE_ECOMM && strstr(msg, want), "got %s: %s", pe_status_str(s), msg);
        OK(dev, ops->recv(c, got, 3, 0));
        CHECK(memcmp(got, next, sizeof got) == 0, "the message after a mismatch was lost");
    }
    OK(dev, ops->barrier(c));
}

/* ---- comm_split -------------------------------------------------------------------------- */

/* Splits the world by G.colors (rank 0 of this process calls it for all), checks every
 * collective and point to point in each group (and the world in between), destroys. A
 * group inside one process must be a plain single-process world. */
enum {
    SPLIT_BY_PROCESS, /* (a) one group per process: plain worlds */
    SPLIT_ACROSS,     /* (b) local rank i of every process: across processes */
    SPLIT_UNEVEN      /* (c) rank 0 alone, the rest uneven (none here on 0) */
};

/* The next split's colors, written by the process's lowest rank once every local rank is
 * done with the last ones (check_split's first barrier publishes them). */
static void set_colors(int r, int how)
{
    local_wait();
    if (r != lo())
        return;
    for (int q = 0; q < G.n; q++)
        G.colors[q] = how == SPLIT_BY_PROCESS ? q / G.L
                      : how == SPLIT_ACROSS   ? q % G.L
                                              : (q == 0 ? 5 : 3);
}

static void check_split(int r, be_device *dev, uint64_t salt)
{
    local_wait();
    if (r == lo()) {
        pe_err err = {{0}};
        pe_status s = ops->comm_split(G.world, G.n, G.colors, G.split, &err);
        CHECK(s == PE_OK, "comm_split: %s", err.msg);
        for (int q = 0; q < G.n; q++)
            CHECK((G.split[q] != NULL) == (G.devs[q] != NULL),
                  "rank %d's split handle is %s", q, G.split[q] ? "set" : "NULL");
    }
    local_wait();
    be_comm *c = G.split[r];
    int members[MAXN], k = members_of(G.colors, G.n, r, members);
    CHECK(ops->comm_size(c) == k && members[ops->comm_rank(c)] == r,
          "rank %d is rank %d of %d in its group", r, ops->comm_rank(c), ops->comm_size(c));
    int inside = members[0] / G.L == members[k - 1] / G.L;
    CHECK((c->w->net == NULL) == inside, "rank %d: a group %s one process is %s world", r,
          inside ? "inside" : "across", inside ? "not a plain" : "a plain");
    check_collectives(c, dev, r, members, k, salt);
    int all[MAXN];
    for (int q = 0; q < G.n; q++)
        all[q] = q;
    check_allreduce(G.world[r], dev, r, all, G.n, 1000, 0, salt + 99); /* interleaved */
    check_p2p(c, dev);
    OK(dev, ops->barrier(c));
    local_wait();
    if (r == lo())
        ops->comm_destroy(G.split, G.n);
    local_wait();
}

/* ---- abort ------------------------------------------------------------------------------- */

/* Three communicators made (a split of the world) to be broken:
 *   0: rank 0 waits for a message from rank n-1 (another process) that never comes; the
 *      main thread of its process aborts the communicator; the recv returns PE_ECOMM
 *      within 1 s;
 *   1: the same for a barrier that only process 0 joins;
 *   2: the processes call allreduce_sum with different counts: every rank fails with
 *      PE_ECOMM (no one waits forever), and the communicator is aborted after it. */
#define BROKEN 3

static int abort_case(int what) { return what == 0 ? G.n > 1 : what == 1 ? P > 1 : 0; }

static void check_cross_mismatch(be_comm *c, be_device *dev, int r)
{
    float x[16] = {0};
    pe_status s = ops->allreduce_sum(c, x, x, 10 + (size_t)ME);
    const char *msg = ops->last_error(dev);
    CHECK(s == PE_ECOMM && (strstr(msg, "count=") || strstr(msg, "different collectives")),
          "allreduce_sum with counts differing between processes, rank %d: %s: %s", r,
          pe_status_str(s), msg);
    s = ops->barrier(c);
    CHECK(s == PE_ECOMM && strstr(ops->last_error(dev), "aborted"),
          "after a failed collective across processes, barrier on rank %d: %s: %s", r,
          pe_status_str(s), ops->last_error(dev));
}

static void check_broken(int r, be_device *dev)
{
    for (int what = 0; what < BROKEN; what++) {
        local_wait();
        if (r == lo()) {
            pe_err err = {{0}};
            for (int q = 0; q < G.n; q++)
                G.colors[q] = 0;
            CHECK(ops->comm_split(G.world, G.n, G.colors, G.split, &err) == PE_OK,
                  "comm_split: %s", err.msg);
        }
        local_wait();
        be_comm *c = G.split[r];
        int blocked = what == 0 ? r == 0 : ME == 0; /* barrier: all of process 0 */
        if (what < 2 && blocked && abort_case(what)) {
            if (r == 0)
                atomic_store(&G.blocked, 1);
            float x[4];
            pe_status s = what == 0 ? ops->recv(c, x, 4, G.n - 1) : ops->barrier(c);
            double late = now_s() - G.abort_at;
            const char *msg = ops->last_error(dev);
            CHECK(s == PE_ECOMM && strstr(msg, "aborted"), "%s on rank %d: %s: %s",
                  what == 0 ? "recv" : "barrier", r, pe_status_str(s), msg);
            CHECK(late < 1.0, "woken %.3f s after the abort", late);
        }
        if (what == 2 && P > 1)
            check_cross_mismatch(c, dev, r);
        local_wait(); /* the main thread has aborted by now, where it had to */
        local_wait();
        if (r == lo())
            ops->comm_destroy(G.split, G.n);
        local_wait();
    }
}

/* The main thread's part of check_broken. */
static void abort_when_blocked(void)
{
    for (int what = 0; what < BROKEN; what++) {
        local_wait();
        local_wait();
        if (ME == 0 && abort_case(what)) {
            while (!atomic_load(&G.blocked))
                sleep_ms(1);
            sleep_ms(200); /* let it block */
            G.abort_at = now_s();
            ops->comm_abort(G.split[0]);
            atomic_store(&G.blocked, 0);
        }
        local_wait();
        local_wait();
        local_wait();
    }
}

/* ---- the run ----------------------------------------------------------------------------- */

static void *rank_main(void *arg)
{
    int r = lo() + (int)(intptr_t)arg;
    be_device *dev = NULL;
    pe_err err = {{0}};
    CHECK(ops->open(r - lo(), &dev, &err) == PE_OK, "open: %s", err.msg);
    OK(dev, ops->set_compute_threads(dev, 1));
    G.devs[r] = dev;
    local_wait();
    if (r == lo()) {
        be_procs procs = {.nprocs = P, .me = ME};
        pe_status s = ops->comm_create_procs(G.devs, G.n, &procs, G.world, &err);
        CHECK(s == PE_OK, "comm_create_procs: %s", err.msg);
    }
    local_wait();
    be_comm *c = G.world[r];
    CHECK(ops->comm_rank(c) == r && ops->comm_size(c) == G.n, "world rank %d of %d",
          ops->comm_rank(c), ops->comm_size(c));
    int all[MAXN];
    for (int q = 0; q < G.n; q++)
        all[q] = q;
    check_collectives(c, dev, r, all, G.n, 1);
    check_barrier(c, dev);
    check_p2p(c, dev);
    check_count_mismatch(c, dev);

    set_colors(r, SPLIT_BY_PROCESS);
    check_split(r, dev, 100);
    set_colors(r, SPLIT_ACROSS);
    check_split(r, dev, 200);
    set_colors(r, SPLIT_UNEVEN);
    check_split(r, dev, 300);

    check_broken(r, dev);

    local_wait();
    if (r == lo())
        ops->comm_destroy(G.world, G.n);
    local_wait();
    ops->close(dev);
    return NULL;
}

static void run(int L)
{
    memset(&G, 0, sizeof G);
    G.L = L;
    G.n = L * P;
    CHECK(G.n <= MAXN, "too many ranks");
    CHECK(pthread_barrier_init(&G.pb, NULL, (unsigned)L + 1) == 0, "pthread_barrier_init");
    pthread_t t[MAXL];
    for (int i = 0; i < L; i++)
        CHECK(pthread_create(&t[i], NULL, rank_main, (void *)(intptr_t)i) == 0,
              "pthread_create");
    local_wait(); /* opened */
    local_wait(); /* created */
    for (int i = 0; i < 3; i++) /* the three splits: set_colors's wait, check_split's four */
        for (int w = 0; w < 5; w++)
            local_wait();
    abort_when_blocked();
    local_wait();
    local_wait();
    for (int i = 0; i < L; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&G.pb);
    if (ME == 0)
        printf("test_mpi_comm: %d process%s x %d rank%s: ok\n", P, P == 1 ? "" : "es", L,
               L == 1 ? "" : "s");
}

int main(int argc, char **argv)
{
    int level = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &ME);
    CHECK(level >= MPI_THREAD_MULTIPLE, "MPI gives thread level %d", level);
    ops = be_host_ops();
    CHECK(ops->comm_create_procs != NULL, "the host backend has no comm_create_procs");
    for (int L = 1; L <= MAXL; L++)
        run(L);
    MPI_Finalize();
    return 0;
}
