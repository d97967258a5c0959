/* test_collectives.c: host communicators: every collective matches a naive reference bit
 * for bit on every rank (N = 1..8 threads, sizes 0 .. 1<<20, in place and not), send/recv
 * keep order per pair and never deadlock when everyone sends first, and abort wakes every
 * blocked rank with PE_ECOMM, and comm_split makes groups by color that work beside their
 * parent. */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/host/hb_comm.h" /* to see how many ranks are parked in the barrier */

#define MAXR 8

static const be_ops *ops;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- harness: n threads, each opens its own device; rank 0 makes the communicator ---- */

typedef struct harness harness;
typedef void (*body_fn)(harness *h, int rank);

struct harness {
    int n;
    be_device *devs[MAXR];
    be_comm *comms[MAXR];
    pthread_barrier_t pb;
    pe_status create_status;
    body_fn body;
    void *arg;                     /* the test's own data */
    pe_status st[MAXR];            /* what each rank's body recorded */
    char msg[MAXR][PE_ERR_LEN];    /* and the message of its device, if st != PE_OK */
};

typedef struct rank_arg {
    harness *h;
    int rank;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    harness *h = a->h;
    pe_err err = {{0}};
    if (ops->open(a->rank, &h->devs[a->rank], &err) != PE_OK)
        h->devs[a->rank] = NULL;
    pthread_barrier_wait(&h->pb);
    if (a->rank == 0) {
        h->create_status = PE_EINVAL;
        int all = 1;
        for (int r = 0; r < h->n; r++)
            all &= h->devs[r] != NULL;
        if (all)
            h->create_status = ops->comm_create(h->devs, h->n, h->comms, &err);
    }
    pthread_barrier_wait(&h->pb);
    if (h->create_status == PE_OK)
        h->body(h, a->rank);
    pthread_barrier_wait(&h->pb);
    if (a->rank == 0 && h->create_status == PE_OK)
        ops->comm_destroy(h->comms, h->n);
    pthread_barrier_wait(&h->pb);
    if (h->devs[a->rank])
        ops->close(h->devs[a->rank]);
    return NULL;
}

/* Runs body on n rank threads and waits for them. */
static void run_ranks(harness *h, int n, body_fn body, void *arg)
{
    h->n = n;
    h->body = body;
    h->arg = arg;
    for (int r = 0; r < MAXR; r++) {
        h->st[r] = PE_OK;
        h->msg[r][0] = '\0';
    }
    assert_int_equal(pthread_barrier_init(&h->pb, NULL, (unsigned)n), 0);
    pthread_t t[MAXR];
    rank_arg a[MAXR];
    for (int r = 0; r < n; r++) {
        a[r] = (rank_arg){h, r};
        assert_int_equal(pthread_create(&t[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&h->pb);
    assert_int_equal(h->create_status, PE_OK);
}

/* Keeps the first failure of a rank, with its message. */
static void record(harness *h, int rank, pe_status s)
{
    if (s != PE_OK && h->st[rank] == PE_OK) {
        h->st[rank] = s;
        snprintf(h->msg[rank], sizeof h->msg[rank], "%s", ops->last_error(h->devs[rank]));
    }
}

static void assert_all_ok(const harness *h)
{
    for (int r = 0; r < h->n; r++) {
        if (h->st[r] != PE_OK)
            print_error("rank %d: %s: %s\n", r, pe_status_str(h->st[r]), h->msg[r]);
        assert_int_equal(h->st[r], PE_OK);
    }
}

/* ---- sizes ---------------------------------------------------------------------------- */

static const size_t sizes_big[] = {0, 1, 7, 4099, (size_t)1 << 20};
static const size_t sizes_small[] = {0, 1, 7, 4099};

static size_t nsizes(void) { return tu_small() ? 4 : 5; }
static size_t size_at(size_t i) { return tu_small() ? sizes_small[i] : sizes_big[i]; }
static int max_ranks(void) { return tu_small() ? 4 : 8; }

/* Rank q's data: random, scaled by rank so that the order of a float sum shows in its bits. */
static float *rank_data(size_t n, int q, uint64_t salt)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill_random(x, n, salt * 1000003u + (uint64_t)q * 7919u + 1u);
    static const float scale[] = {1.0f, 1.7f, 0.3f, 7.0f, 0.05f, 2.5f, 13.0f, 0.6f};
    for (size_t i = 0; i < n; i++)
        x[i] *= scale[q % 8];
    return x;
}

/* ref(count) = sum over q of x[q](count), added in rank order 0..n-1 in float. */
static void naive_sum(float *ref, float *const *x, int n, size_t off, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float s = x[0][off + i];
        for (int q = 1; q < n; q++)
            s += x[q][off + i];
        ref[i] = s;
    }
}

/* ---- the collectives against the reference ------------------------------------------ */

typedef enum { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST } coll_kind;

typedef struct coll_case {
    coll_kind kind;
    int in_place;
    size_t count; /* elements per call argument, as in backend.h */
    int root;
    float *send[MAXR];
    float *recv[MAXR];
} coll_case;

static void coll_body(harness *h, int r)
{
    coll_case *c = h->arg;
    be_comm *cm = h->comms[r];
    pe_status s = PE_EINTERNAL;
    switch (c->kind) {
    case ALLREDUCE:
        s = ops->allreduce_sum(cm, c->in_place ? c->recv[r] : c->send[r], c->recv[r], c->count);
        break;
    case ALLGATHER:
        s = ops->allgather(cm, c->in_place ? c->recv[r] + (size_t)r * c->count : c->send[r],
                           c->recv[r], c->count);
        break;
    case REDUCE_SCATTER:
        s = ops->reduce_scatter(cm, c->send[r],
                                c->in_place ? c->send[r] + (size_t)r * c->count : c->recv[r],
                                c->count);
        break;
    case BROADCAST:
        s = ops->broadcast(cm, c->recv[r], c->count, c->root);
        break;
    }
    record(h, r, s);
}

static void run_collective(coll_kind kind, int n, size_t count, int in_place, int root)
{
    coll_case c = {.kind = kind, .in_place = in_place, .count = count, .root = root};
    size_t in_len = kind == REDUCE_SCATTER ? (size_t)n * count : count;
    size_t out_len = kind == ALLGATHER ? (size_t)n * count : count;
    uint64_t salt = (uint64_t)kind * 131u + count * 17u + (uint64_t)n;
    float *orig[MAXR]; /* pristine copy of each rank's input */
    for (int q = 0; q < n; q++) {
        orig[q] = rank_data(in_len, q, salt);
        c.send[q] = malloc((in_len ? in_len : 1) * sizeof(float));
        c.recv[q] = malloc((out_len ? out_len : 1) * sizeof(float));
        assert_true(c.send[q] && c.recv[q]);
        memcpy(c.send[q], orig[q], in_len * sizeof(float));
        for (size_t i = 0; i < out_len; i++)
            c.recv[q][i] = -12345.0f; /* every element must be overwritten */
        if (kind == ALLREDUCE && in_place)
            memcpy(c.recv[q], orig[q], in_len * sizeof(float));
        if (kind == ALLGATHER && in_place)
            memcpy(c.recv[q] + (size_t)q * count, orig[q], count * sizeof(float));
        if (kind == BROADCAST)
            memcpy(c.recv[q], orig[q], count * sizeof(float));
    }

    harness h;
    run_ranks(&h, n, coll_body, &c);
    assert_all_ok(&h);

    float *ref = malloc((out_len ? out_len : 1) * sizeof(float));
    assert_non_null(ref);
    for (int r = 0; r < n; r++) {
        const float *got = c.recv[r];
        switch (kind) {
        case ALLREDUCE:
            naive_sum(ref, orig, n, 0, count);
            break;
        case ALLGATHER:
            for (int q = 0; q < n; q++)
                memcpy(ref + (size_t)q * count, orig[q], count * sizeof(float));
            break;
        case REDUCE_SCATTER:
            naive_sum(ref, orig, n, (size_t)r * count, count);
            if (in_place)
                got = c.send[r] + (size_t)r * count;
            break;
        case BROADCAST:
            memcpy(ref, orig[root], count * sizeof(float));
            break;
        }
        if (memcmp(got, ref, out_len * sizeof(float)) != 0)
            fail_msg("kind %d, n=%d, count=%zu, in_place=%d: rank %d differs from the naive "
                     "reference (max |diff| %g)",
                     (int)kind, n, count, in_place, r, tu_max_abs_diff(got, ref, out_len));
        /* Out of place, the inputs are left alone. */
        if (!in_place && kind != BROADCAST)
            assert_memory_equal(c.send[r], orig[r], in_len * sizeof(float));
    }
    free(ref);
    for (int q = 0; q < n; q++) {
        free(orig[q]);
        free(c.send[q]);
        free(c.recv[q]);
    }
}

/* The bit-exact checks are meaningful: with these inputs the order of a 3-way sum shows. */
static void test_sum_order_changes_bits(void **state)
{
    (void)state;
    size_t n = 4099;
    float *x[3] = {rank_data(n, 0, 1), rank_data(n, 1, 1), rank_data(n, 2, 1)};
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        float fwd = (x[0][i] + x[1][i]) + x[2][i], rev = (x[2][i] + x[1][i]) + x[0][i];
        differ += fwd != rev;
    }
    assert_true(differ > n / 100);
    for (int q = 0; q < 3; q++)
        free(x[q]);
}

static void sweep(coll_kind kind, int in_place)
{
    for (int n = 1; n <= max_ranks(); n++)
        for (size_t i = 0; i < nsizes(); i++) {
            size_t size = size_at(i);
            /* allgather/reduce_scatter: size is the total, cut into n per-rank parts */
            size_t count = kind == ALLGATHER || kind == REDUCE_SCATTER
                               ? (size + (size_t)n - 1) / (size_t)n
                               : size;
            run_collective(kind, n, count, in_place, n - 1);
        }
}

static void test_allreduce_matches_reference(void **state)
{
    (void)state;
    sweep(ALLREDUCE, 0);
}

static void test_allreduce_in_place_matches_reference(void **state)
{
    (void)state;
    sweep(ALLREDUCE, 1);
}

static void test_allgather_matches_reference(void **state)
{
    (void)state;
    sweep(ALLGATHER, 0);
    sweep(ALLGATHER, 1);
}

static void test_reduce_scatter_matches_reference(void **state)
{
    (void)state;
    sweep(REDUCE_SCATTER, 0);
    sweep(REDUCE_SCATTER, 1);
}

static void test_broadcast_from_every_root(void **state)
{
    (void)state;
    sweep(BROADCAST, 0);
    for (int n = 2; n <= max_ranks(); n++)
        for (int root = 0; root < n; root++)
            run_collective(BROADCAST, n, 4099, 0, root);
}

/* A 2-rank all-reduce of more than 8 MiB writes with streaming (non-temporal) stores;
 * the output starts off a 16-byte boundary and has an odd length, so the scalar head and
 * tail run too. Same bits as the reference. */
typedef struct stream_case {
    size_t count;
    float *send[2], *recv[2]; /* recv[r] is one float past a 64-byte boundary */
} stream_case;

static void stream_body(harness *h, int r)
{
    stream_case *c = h->arg;
    record(h, r, ops->allreduce_sum(h->comms[r], c->send[r], c->recv[r], c->count));
}

static void test_allreduce_large_streaming_output(void **state)
{
    (void)state;
    if (tu_small())
        skip(); /* 9 MiB buffers: too slow under valgrind */
    stream_case c = {.count = ((size_t)9 << 20) / sizeof(float) + 5}; /* 3 head, 2 tail */
    float *base[2];
    for (int r = 0; r < 2; r++) {
        c.send[r] = rank_data(c.count, r, 99);
        base[r] = aligned_alloc(64, (c.count + 16) * sizeof(float) / 64 * 64 + 64);
        assert_non_null(base[r]);
        c.recv[r] = base[r] + 1;
    }
    harness h;
    run_ranks(&h, 2, stream_body, &c);
    assert_all_ok(&h);
    float *ref = malloc(c.count * sizeof(float));
    naive_sum(ref, c.send, 2, 0, c.count);
    for (int r = 0; r < 2; r++) {
        assert_memory_equal(c.recv[r], ref, c.count * sizeof(float));
        free(c.send[r]);
        free(base[r]);
    }
    free(ref);
}

/* Many all-reduces back to back, alternating in place and not, with the buffers rewritten
 * between calls: a rank must never see a peer's next-call data. */
typedef struct repeat_case {
    int rounds;
    size_t count;
    float *buf[MAXR]; /* (count) per rank */
    float *out[MAXR];
    int bad[MAXR];
} repeat_case;

static void repeat_body(harness *h, int r)
{
    repeat_case *c = h->arg;
    int n = h->n;
    for (int k = 0; k < c->rounds; k++) {
        for (size_t i = 0; i < c->count; i++)
            c->buf[r][i] = (float)(k * 1000 + r) + (float)i;
        int in_place = k & 1;
        float *dst = in_place ? c->buf[r] : c->out[r];
        record(h, r, ops->allreduce_sum(h->comms[r], c->buf[r], dst, c->count));
        for (size_t i = 0; i < c->count; i++) {
            /* sum over q of (k*1000 + q + i): small integers, exact in float */
            float want = (float)(n * (k * 1000 + (int)i) + n * (n - 1) / 2);
            c->bad[r] += dst[i] != want;
        }
    }
}

static void test_allreduce_back_to_back(void **state)
{
    (void)state;
    size_t counts[] = {5, 3000};
    for (int n = 2; n <= max_ranks(); n += 2)
        for (int j = 0; j < 2; j++) {
            repeat_case c = {.rounds = tu_small() ? 20 : 200, .count = counts[j]};
            for (int r = 0; r < n; r++) {
                c.buf[r] = malloc(c.count * sizeof(float));
                c.out[r] = malloc(c.count * sizeof(float));
            }
            harness h;
            run_ranks(&h, n, repeat_body, &c);
            assert_all_ok(&h);
            for (int r = 0; r < n; r++) {
                assert_int_equal(c.bad[r], 0);
                free(c.buf[r]);
                free(c.out[r]);
            }
        }
}

/* ---- barrier ---------------------------------------------------------------------------- */

typedef struct barrier_case {
    int rounds;
    atomic_int arrived;
    int early[MAXR]; /* times a rank left a barrier before every rank reached it */
} barrier_case;

static void barrier_body(harness *h, int r)
{
    barrier_case *c = h->arg;
    for (int k = 0; k < c->rounds; k++) {
        if ((k + r) % 3 == 0)
            sleep_ms(1); /* someone is always late */
        atomic_fetch_add(&c->arrived, 1);
        record(h, r, ops->barrier(h->comms[r]));
        c->early[r] += atomic_load(&c->arrived) < h->n * (k + 1);
    }
}

static void test_barrier_waits_for_everyone(void **state)
{
    (void)state;
    for (int n = 1; n <= max_ranks(); n++) {
        barrier_case c = {.rounds = 20};
        atomic_init(&c.arrived, 0);
        harness h;
        run_ranks(&h, n, barrier_body, &c);
        assert_all_ok(&h);
        for (int r = 0; r < n; r++)
            assert_int_equal(c.early[r], 0);
    }
}

/* ---- send / recv ------------------------------------------------------------------------ */

#define MSGS 5

/* Message k from rank a to rank b: its length and its content. */
static size_t msg_len(int a, int b, int k) { return (size_t)((a * 7 + b * 3 + k * 5) % 9) * 37; }
static float msg_val(int a, int b, int k, size_t i)
{
    return (float)(a * 100000 + b * 1000 + k) + (float)i * 0.5f;
}

typedef struct p2p_case {
    int bad[MAXR]; /* wrong contents received */
} p2p_case;

/* Everyone first sends MSGS messages to every rank (itself included), then receives. */
static void all_to_all_body(harness *h, int r)
{
    p2p_case *c = h->arg;
    int n = h->n;
    float *out[MAXR][MSGS];
    for (int b = 0; b < n; b++)
        for (int k = 0; k < MSGS; k++) {
            size_t len = msg_len(r, b, k);
            out[b][k] = malloc((len ? len : 1) * sizeof(float));
            for (size_t i = 0; i < len; i++)
                out[b][k][i] = msg_val(r, b, k, i);
            record(h, r, ops->send(h->comms[r], out[b][k], len, b));
        }
    for (int k = 0; k < MSGS; k++)
        for (int a = n - 1; a >= 0; a--) { /* a different order than the sends: fine */
            size_t len = msg_len(a, r, k);
            float *in = malloc((len ? len : 1) * sizeof(float));
            record(h, r, ops->recv(h->comms[r], in, len, a));
            for (size_t i = 0; i < len; i++)
                c->bad[r] += in[i] != msg_val(a, r, k, i);
            free(in);
        }
    record(h, r, ops->synchronize(h->devs[r]));
    for (int b = 0; b < n; b++)
        for (int k = 0; k < MSGS; k++)
            free(out[b][k]);
}

static void test_send_recv_in_order_per_pair(void **state)
{
    (void)state;
    for (int n = 1; n <= max_ranks(); n++) {
        p2p_case c = {{0}};
        harness h;
        run_ranks(&h, n, all_to_all_body, &c);
        assert_all_ok(&h);
        for (int r = 0; r < n; r++)
            assert_int_equal(c.bad[r], 0);
    }
}

/* A ring: each rank sends to its right and receives from its left, then synchronizes and
 * reuses its buffer, many rounds. Sending first must not deadlock. */
static void ring_body(harness *h, int r)
{
    p2p_case *c = h->arg;
    int n = h->n, right = (r + 1) % n, left = (r + n - 1) % n;
    size_t len = tu_size(50000, 999);
    float *out = malloc(len * sizeof(float)), *in = malloc(len * sizeof(float));
    for (int k = 0; k < 20; k++) {
        for (size_t i = 0; i < len; i++)
            out[i] = msg_val(r, right, k, i);
        record(h, r, ops->send(h->comms[r], out, len, right));
        record(h, r, ops->recv(h->comms[r], in, len, left));
        record(h, r, ops->synchronize(h->devs[r]));
        for (size_t i = 0; i < len; i++)
            c->bad[r] += in[i] != msg_val(left, r, k, i);
    }
    free(out);
    free(in);
}

static void test_ring_exchange_does_not_deadlock(void **state)
{
    (void)state;
    for (int n = 1; n <= max_ranks(); n++) {
        p2p_case c = {{0}};
        harness h;
        run_ranks(&h, n, ring_body, &c);
        assert_all_ok(&h);
        for (int r = 0; r < n; r++)
            assert_int_equal(c.bad[r], 0);
    }
}

/* More sends in flight than a channel holds: send blocks until the receiver catches up. */
#define MANY 40
static void many_body(harness *h, int r)
{
    p2p_case *c = h->arg;
    if (r == 0) {
        static float bufs[MANY][64];
        for (int k = 0; k < MANY; k++) {
            for (int i = 0; i < 64; i++)
                bufs[k][i] = msg_val(0, 1, k, (size_t)i);
            record(h, r, ops->send(h->comms[0], bufs[k], 64, 1));
        }
        record(h, r, ops->synchronize(h->devs[0]));
    } else {
        float in[64];
        for (int k = 0; k < MANY; k++) {
            if (k % 8 == 0)
                sleep_ms(2); /* a slow receiver */
            record(h, r, ops->recv(h->comms[1], in, 64, 0));
            for (int i = 0; i < 64; i++)
                c->bad[r] += in[i] != msg_val(0, 1, k, (size_t)i);
        }
    }
}

static void test_send_blocks_when_channel_full(void **state)
{
    (void)state;
    p2p_case c = {{0}};
    harness h;
    run_ranks(&h, 2, many_body, &c);
    assert_all_ok(&h);
    assert_int_equal(c.bad[1], 0);
}

/* synchronize returns only after the receiver has copied the data: the sender poisons its
 * buffer right after synchronize, and a slow receiver must still get the original. */
typedef struct sync_case {
    int bad; /* elements the receiver got poisoned */
} sync_case;

static void sync_body(harness *h, int r)
{
    sync_case *c = h->arg;
    float buf[100];
    if (r == 0) {
        for (int i = 0; i < 100; i++)
            buf[i] = (float)i;
        record(h, r, ops->send(h->comms[0], buf, 100, 1));
        record(h, r, ops->synchronize(h->devs[0]));
        for (int i = 0; i < 100; i++)
            buf[i] = -1.0f;
        /* keep buf alive until the receiver is done with everything */
        record(h, r, ops->barrier(h->comms[0]));
    } else {
        sleep_ms(50);
        record(h, r, ops->recv(h->comms[1], buf, 100, 0));
        for (int i = 0; i < 100; i++)
            c->bad += buf[i] != (float)i;
        record(h, r, ops->barrier(h->comms[1]));
    }
}

static void test_synchronize_waits_for_receiver(void **state)
{
    (void)state;
    sync_case c = {0};
    harness h;
    run_ranks(&h, 2, sync_body, &c);
    assert_all_ok(&h);
    assert_int_equal(c.bad, 0);
}

/* A recv whose count differs from the send's fails on both sides with PE_ECOMM. */
static void mismatch_p2p_body(harness *h, int r)
{
    float buf[10] = {0};
    if (r == 0) {
        record(h, r, ops->send(h->comms[0], buf, 10, 1));
        record(h, r, ops->synchronize(h->devs[0]));
    } else {
        record(h, r, ops->recv(h->comms[1], buf, 9, 0));
    }
}

static void test_recv_count_mismatch_fails_both_sides(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, 2, mismatch_p2p_body, NULL);
    assert_int_equal(h.st[1], PE_ECOMM);
    assert_non_null(strstr(h.msg[1], "expected 9"));
    assert_non_null(strstr(h.msg[1], "has 10"));
    assert_int_equal(h.st[0], PE_ECOMM);
    assert_non_null(strstr(h.msg[0], "never reached"));
}

/* ---- mismatched and invalid collective calls ------------------------------------------ */

typedef struct mismatch_case {
    pe_status count_mismatch[MAXR], op_mismatch[MAXR], after[MAXR];
    float value[MAXR][2]; /* first and last element of the matching call's result */
} mismatch_case;

static void mismatch_coll_body(harness *h, int r)
{
    mismatch_case *c = h->arg;
    float buf[16] = {0};
    c->count_mismatch[r] = ops->allreduce_sum(h->comms[r], buf, buf, r == 0 ? 10 : 11);
    record(h, r, c->count_mismatch[r]);
    c->op_mismatch[r] = r == 1 ? ops->allgather(h->comms[r], buf, buf + 8, 4)
                               : ops->allreduce_sum(h->comms[r], buf, buf, 4);
    /* The communicator is still in step: a matching call works. */
    for (int i = 0; i < 16; i++)
        buf[i] = (float)(r + 1);
    c->after[r] = ops->allreduce_sum(h->comms[r], buf, buf, 16);
    c->value[r][0] = buf[0];
    c->value[r][1] = buf[15];
}

static void test_mismatched_collectives_fail_on_every_rank(void **state)
{
    (void)state;
    mismatch_case c;
    harness h;
    run_ranks(&h, 2, mismatch_coll_body, &c);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(c.count_mismatch[r], PE_ECOMM);
        assert_int_equal(c.op_mismatch[r], PE_ECOMM);
        assert_int_equal(c.after[r], PE_OK);
        assert_true(c.value[r][0] == 3.0f && c.value[r][1] == 3.0f);
    }
    assert_non_null(strstr(h.msg[0], "count=10"));
    assert_non_null(strstr(h.msg[0], "count=11"));
}

static void invalid_arg_body(harness *h, int r)
{
    float buf[4] = {0};
    record(h, r, ops->allreduce_sum(h->comms[r], r == 1 ? NULL : buf, buf, 4));
    record(h, r, ops->broadcast(h->comms[r], buf, 4, 7)); /* root 7 of 3: everyone bad */
}

static void test_invalid_arguments_fail_without_hanging(void **state)
{
    (void)state;
    harness h;
    run_ranks(&h, 3, invalid_arg_body, NULL);
    assert_int_equal(h.st[1], PE_EINVAL);
    assert_non_null(strstr(h.msg[1], "send is NULL"));
    assert_int_equal(h.st[0], PE_ECOMM);
    assert_non_null(strstr(h.msg[0], "rank 1 passed invalid arguments"));
    assert_int_equal(h.st[2], PE_ECOMM);
}

static void test_comm_create_rejects_bad_device_lists(void **state)
{
    (void)state;
    be_device *d = NULL;
    pe_err err = {{0}};
    assert_int_equal(ops->open(0, &d, &err), PE_OK);
    be_device *two[2] = {d, d};
    be_comm *c[2];
    assert_int_equal(ops->comm_create(two, 2, c, &err), PE_EINVAL);
    assert_non_null(strstr(err.msg, "same opened device"));
    assert_int_equal(ops->comm_create(two, 0, c, &err), PE_EINVAL);
    ops->close(d);
}

/* ---- split ---------------------------------------------------------------------------------- */

typedef struct split_case {
    int colors[MAXR];
    be_comm *sub[MAXR];
    pe_status split_status;
    int rank[MAXR], size[MAXR];
    float sum[MAXR][2];   /* all-reduce of (r + 1, 1) in the rank's group */
    float world[MAXR];    /* all-reduce of r + 1 in the world after the split */
    float from_prev[MAXR]; /* recv from the previous rank of the group (ring) */
} split_case;

/* Rank 0 splits the world; every rank then all-reduces in its group and sends to the next
 * rank of its group, the world still works beside the groups, and rank 0 frees the groups
 * with one comm_destroy of the whole array. */
static void split_body(harness *h, int r)
{
    split_case *c = h->arg;
    if (r == 0) {
        pe_err err = {{0}};
        c->split_status = ops->comm_split(h->comms, h->n, c->colors, c->sub, &err);
    }
    pthread_barrier_wait(&h->pb);
    if (c->split_status != PE_OK)
        return;
    be_comm *g = c->sub[r];
    c->rank[r] = ops->comm_rank(g);
    c->size[r] = ops->comm_size(g);
    float v[2] = {(float)(r + 1), 1.0f}, one = (float)(r + 1);
    record(h, r, ops->allreduce_sum(g, v, c->sum[r], 2));
    record(h, r, ops->allreduce_sum(h->comms[r], &one, &c->world[r], 1));
    int n = c->size[r], me = c->rank[r];
    c->from_prev[r] = -1.0f;
    if (n > 1) {
        record(h, r, ops->send(g, &one, 1, (me + 1) % n));
        record(h, r, ops->recv(g, &c->from_prev[r], 1, (me + n - 1) % n));
        record(h, r, ops->synchronize(h->devs[r]));
    }
    pthread_barrier_wait(&h->pb);
    if (r == 0) {
        ops->comm_destroy(c->sub, h->n);
        for (int q = 0; q < h->n; q++)
            assert_null(c->sub[q]);
    }
}

static void test_split_groups_ranks_by_color_in_parent_order(void **state)
{
    (void)state;
    const int n = 6;
    const int colors[6] = {7, 3, 7, 0, 3, 7}; /* groups {0,2,5}, {1,4}, {3} */
    split_case c;
    memset(&c, 0, sizeof c);
    memcpy(c.colors, colors, sizeof colors);
    harness h;
    run_ranks(&h, n, split_body, &c);
    assert_int_equal(c.split_status, PE_OK);
    assert_all_ok(&h);
    const int want_rank[6] = {0, 0, 1, 0, 1, 2}, want_size[6] = {3, 2, 3, 1, 2, 3};
    const float want_sum[6] = {1 + 3 + 6, 2 + 5, 1 + 3 + 6, 4, 2 + 5, 1 + 3 + 6};
    const float want_prev[6] = {6, 5, 1, -1, 2, 3}; /* r + 1 of the previous group member */
    for (int r = 0; r < n; r++) {
        assert_int_equal(c.rank[r], want_rank[r]);
        assert_int_equal(c.size[r], want_size[r]);
        assert_true(c.sum[r][0] == want_sum[r]);
        assert_true(c.sum[r][1] == (float)want_size[r]);
        assert_true(c.world[r] == 21.0f);
        assert_true(c.from_prev[r] == want_prev[r]);
    }
}

static void bad_split_body(harness *h, int r)
{
    split_case *c = h->arg;
    if (r != 0)
        return;
    pe_err err = {{0}};
    c->split_status = ops->comm_split(h->comms, h->n, c->colors, c->sub, &err);
    snprintf(h->msg[0], sizeof h->msg[0], "%s", err.msg);
    be_comm *reversed[2] = {h->comms[1], h->comms[0]};
    pe_err err2 = {{0}};
    c->rank[0] = ops->comm_split(reversed, 2, (const int[]){0, 0}, c->sub, &err2) == PE_EINVAL &&
                 strstr(err2.msg, "rank order") != NULL;
}

static void test_split_rejects_negative_colors_and_foreign_ranks(void **state)
{
    (void)state;
    split_case c;
    memset(&c, 0, sizeof c);
    c.colors[0] = 0;
    c.colors[1] = -2;
    harness h;
    run_ranks(&h, 2, bad_split_body, &c);
    assert_int_equal(c.split_status, PE_EINVAL);
    assert_non_null(strstr(h.msg[0], "rank 1 has color -2"));
    assert_null(c.sub[0]);
    assert_null(c.sub[1]);
    assert_int_equal(c.rank[0], 1);
}

/* ---- abort --------------------------------------------------------------------------------- */

typedef struct abort_case {
    pe_status first[MAXR], later[MAXR][4];
} abort_case;

static hb_world *world_of(be_comm *c) { return c->w; }

/* Rank n-1 never joins: it waits until the others are parked in the barrier of their
 * all-reduce (or in recv/synchronize), then aborts, as the engine does for a dead worker. */
static void abort_body(harness *h, int r)
{
    abort_case *c = h->arg;
    be_comm *cm = h->comms[r];
    int n = h->n;
    float buf[64] = {0};
    if (r == n - 1) {
        hb_world *w = world_of(cm);
        int parked = 0;
        for (int i = 0; i < 20000 && !parked; i++) {
            parked = (int)rt_park_waiters(&w->bar.park) >= n - 3;
            sleep_ms(1);
        }
        sleep_ms(50); /* give the recv and synchronize ranks time to block too */
        ops->comm_abort(cm);
        c->first[r] = parked ? PE_ECOMM : PE_EINTERNAL;
    } else if (r == n - 2) {
        /* blocked in recv from the silent rank; another send sits unconsumed */
        pe_status s = ops->recv(cm, buf, 64, n - 1);
        c->first[r] = s;
    } else if (r == n - 3) {
        /* a send nobody receives: synchronize blocks until the abort drops it */
        pe_status s = ops->send(cm, buf, 64, n - 1);
        c->first[r] = s == PE_OK ? ops->synchronize(h->devs[r]) : PE_EINTERNAL;
    } else {
        c->first[r] = ops->allreduce_sum(cm, buf, buf, 64);
    }
    if (r != n - 1)
        snprintf(h->msg[r], sizeof h->msg[r], "%s", ops->last_error(h->devs[r]));
    /* Every later call fails at once. */
    c->later[r][0] = ops->allreduce_sum(cm, buf, buf, 64);
    c->later[r][1] = ops->barrier(cm);
    c->later[r][2] = ops->send(cm, buf, 1, 0);
    c->later[r][3] = ops->recv(cm, buf, 1, 0);
}

static void test_abort_wakes_every_blocked_rank(void **state)
{
    (void)state;
    int n = tu_small() ? 4 : 6; /* allreduce ranks 0..n-4, one sync, one recv, one silent */
    abort_case c;
    harness h;
    run_ranks(&h, n, abort_body, &c);
    for (int r = 0; r < n; r++) {
        if (c.first[r] != PE_ECOMM)
            print_error("rank %d: %d (%s)\n", r, (int)c.first[r], h.msg[r]);
        assert_int_equal(c.first[r], PE_ECOMM);
        for (int k = 0; k < 4; k++)
            assert_int_equal(c.later[r][k], PE_ECOMM);
    }
    assert_non_null(strstr(h.msg[0], "aborted"));
    assert_non_null(strstr(h.msg[n - 2], "aborted"));
    assert_non_null(strstr(h.msg[n - 3], "never reached"));
}

int main(void)
{
    ops = be_host_ops();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_order_changes_bits),
        cmocka_unit_test(test_allreduce_matches_reference),
        cmocka_unit_test(test_allreduce_in_place_matches_reference),
        cmocka_unit_test(test_allgather_matches_reference),
        cmocka_unit_test(test_reduce_scatter_matches_reference),
        cmocka_unit_test(test_broadcast_from_every_root),
        cmocka_unit_test(test_allreduce_large_streaming_output),
        cmocka_unit_test(test_allreduce_back_to_back),
        cmocka_unit_test(test_barrier_waits_for_everyone),
        cmocka_unit_test(test_send_recv_in_order_per_pair),
        cmocka_unit_test(test_ring_exchange_does_not_deadlock),
        cmocka_unit_test(test_send_blocks_when_channel_full),
        cmocka_unit_test(test_synchronize_waits_for_receiver),
        cmocka_unit_test(test_recv_count_mismatch_fails_both_sides),
        cmocka_unit_test(test_mismatched_collectives_fail_on_every_rank),
        cmocka_unit_test(test_invalid_arguments_fail_without_hanging),
        cmocka_unit_test(test_comm_create_rejects_bad_device_lists),
        cmocka_unit_test(test_abort_wakes_every_blocked_rank),
        cmocka_unit_test(test_split_groups_ranks_by_color_in_parent_order),
        cmocka_unit_test(test_split_rejects_negative_colors_and_foreign_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
