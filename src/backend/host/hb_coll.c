/* hb_coll.c: collectives of a host communicator, straight from and to the callers' buffers.
 *
 * Every collective is: publish (op, count, root, buffers) in this rank's slot; barrier A
 * (abortable); check that all ranks called the same thing; do the work reading peers'
 * buffers; barrier Z (not abortable: peers may still read this rank's buffers). A rank's
 * slot is rewritten only after it passed barrier Z, when every peer is done with it.
 *
 * A net world (ranks in several processes) has its own collectives (hb_net.h), with the
 * same sums (hb_sum_rows).
 *
 * Sums add the ranks' values in rank order 0, 1, ..., n-1 in float, for each element, so
 * the result has the same bits on every rank and does not depend on timing.
 *
 * all-reduce, sliced: rank r sums slice r of all send buffers into its own recv;
 *   barrier B; rank r copies the other slices from the peers' recv buffers. Remote data
 *   read per rank: 2(n-1)/n count. In place (send == recv) needs no extra copy: before B
 *   a rank writes only its own slice, which only it reads; after B nobody reads sends.
 * all-reduce, direct: every rank sums everything itself, same bits. Used out of place
 *   when n == 2 (any size) or count <= HB_SMALL: one barrier fewer, and a rank's recv is
 *   never read by a peer, so its cache lines stay on its core; for n == 2 it reads no
 *   more remote data than the sliced form (the peer's send, count). In place only when
 *   count <= HB_SMALL: a rank cannot write into its send while peers read it, so it sums
 *   into its scratch, waits at a barrier (every send fully read), then copies the scratch
 *   into recv; that barrier also ends the collective (no barrier Z). Larger in-place
 *   all-reduces take the sliced form: measured with 2 ranks, summing in rounds through a
 *   scratch was slower (more barriers and an extra copy, same cache-line traffic).
 * A 2-rank sum whose output exceeds HB_STREAM_MIN (bigger than a last-level cache) writes
 * with non-temporal stores, which skip reading the output's lines first; measured: 16 and
 * 64 MiB all-reduce went from about 0.3 to 0.45 of memcpy bandwidth.
 */
#include <stdint.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "backend/host/hb_comm.h"
#include "backend/host/hb_net.h"

#define HB_CHUNK 1024 /* elements: the stack accumulator of a 3-or-more-way sum */
#define HB_ALIGN_ELEMS 16 /* slices start on 64-byte boundaries */

/* Four floats added lane by lane: the same IEEE sums as scalar code, just four at once
 * (-O2 does not vectorize a loop whose pointers may alias). */
typedef float hb_v4 __attribute__((vector_size(16)));

static inline hb_v4 ld4(const float *p)
{
    hb_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, hb_v4 v) { memcpy(p, &v, sizeof v); }

/* d(n) = a(n) + b(n); d may be a or b (each block is loaded before it is stored). */
static void add2(float *d, const float *a, const float *b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        hb_v4 x0 = ld4(a + i) + ld4(b + i), x1 = ld4(a + i + 4) + ld4(b + i + 4);
        hb_v4 x2 = ld4(a + i + 8) + ld4(b + i + 8), x3 = ld4(a + i + 12) + ld4(b + i + 12);
        st4(d + i, x0);
        st4(d + i + 4, x1);
        st4(d + i + 8, x2);
        st4(d + i + 12, x3);
    }
    for (; i < n; i++)
        d[i] = a[i] + b[i];
}

#if defined(__SSE__)
#define HB_STREAM_MIN ((size_t)2 << 20) /* elements (8 MiB): larger outputs skip the cache */

/* add2 for outputs larger than the last-level cache: non-temporal stores write d without
 * reading its lines first (a third less memory traffic). d must not alias a or b. */
static void add2_stream(float *d, const float *a, const float *b, size_t n)
{
    size_t i = 0;
    for (; i < n && ((uintptr_t)(d + i) & 15) != 0; i++)
        d[i] = a[i] + b[i];
    for (; i + 16 <= n; i += 16) {
        hb_v4 x0 = ld4(a + i) + ld4(b + i), x1 = ld4(a + i + 4) + ld4(b + i + 4);
        hb_v4 x2 = ld4(a + i + 8) + ld4(b + i + 8), x3 = ld4(a + i + 12) + ld4(b + i + 12);
        _mm_stream_ps(d + i, (__m128)x0);
        _mm_stream_ps(d + i + 4, (__m128)x1);
        _mm_stream_ps(d + i + 8, (__m128)x2);
        _mm_stream_ps(d + i + 12, (__m128)x3);
    }
    _mm_sfence(); /* streamed stores are weakly ordered: publish them before the barrier */
    for (; i < n; i++)
        d[i] = a[i] + b[i];
}
#endif

/* dst(len) = sum over q in 0..n-1 of slots[q].send[off .. off + len), in rank order.
 * dst may be one of the sources at the same offset. */
static void reduce_fixed(float *dst, const hb_slot *slots, int n, size_t off, size_t len)
{
    if (len == 0)
        return;
    if (n == 1) {
        if (dst != slots[0].send + off)
            memcpy(dst, slots[0].send + off, len * sizeof *dst);
        return;
    }
    if (n == 2) {
#if defined(__SSE__)
        const float *a = slots[0].send + off, *b = slots[1].send + off;
        if (len >= HB_STREAM_MIN && !hb_overlap(dst, len, a, len) &&
            !hb_overlap(dst, len, b, len)) {
            add2_stream(dst, a, b, len);
            return;
        }
#endif
        add2(dst, slots[0].send + off, slots[1].send + off, len);
        return;
    }
    float tmp[HB_CHUNK]; /* keeps dst's old values readable until the last source */
    for (size_t b = 0; b < len; b += HB_CHUNK) {
        size_t m = len - b < HB_CHUNK ? len - b : HB_CHUNK;
        add2(tmp, slots[0].send + off + b, slots[1].send + off + b, m);
        for (int q = 2; q < n - 1; q++)
            add2(tmp, tmp, slots[q].send + off + b, m);
        add2(dst + b, tmp, slots[n - 1].send + off + b, m);
    }
}

void hb_sum_rows(float *dst, const float *const *rows, int n, size_t len)
{
    if (len == 0)
        return;
    if (n == 1) {
        if (dst != rows[0])
            memcpy(dst, rows[0], len * sizeof *dst);
        return;
    }
    if (n == 2) { /* add2_stream's sums are add2's: the same bits */
#if defined(__SSE__)
        if (len >= HB_STREAM_MIN && !hb_overlap(dst, len, rows[0], len) &&
            !hb_overlap(dst, len, rows[1], len)) {
            add2_stream(dst, rows[0], rows[1], len);
            return;
        }
#endif
        add2(dst, rows[0], rows[1], len);
        return;
    }
    float tmp[HB_CHUNK];
    for (size_t b = 0; b < len; b += HB_CHUNK) {
        size_t m = len - b < HB_CHUNK ? len - b : HB_CHUNK;
        add2(tmp, rows[0] + b, rows[1] + b, m);
        for (int q = 2; q < n - 1; q++)
            add2(tmp, tmp, rows[q] + b, m);
        add2(dst + b, tmp, rows[n - 1] + b, m);
    }
}

/* Elements [lo, hi) of count that rank r owns when count is cut into n slices. */
static void slice(size_t count, int n, int r, size_t *lo, size_t *hi)
{
    size_t per = (count + (size_t)n - 1) / (size_t)n;
    per = (per + HB_ALIGN_ELEMS - 1) / HB_ALIGN_ELEMS * HB_ALIGN_ELEMS;
    size_t a = per * (size_t)r;
    *lo = a < count ? a : count;
    *hi = count - *lo < per ? count : *lo + per;
}

const char *hb_op_name(hb_op op)
{
    switch (op) {
    case HB_OP_ALLREDUCE: return "allreduce_sum";
    case HB_OP_ALLGATHER: return "allgather";
    case HB_OP_REDUCE_SCATTER: return "reduce_scatter";
    case HB_OP_BROADCAST: return "broadcast";
    case HB_OP_BARRIER: return "barrier";
    }
    return "?";
}

pe_status hb_coll_aborted(be_comm *c, hb_op op)
{
    return hb_fail(c->dev, PE_ECOMM,
                   "%s on rank %d of %d: the communicator was aborted (a peer worker failed); "
                   "the first failing worker's error says why",
                   hb_op_name(op), c->rank, c->w->n);
}

pe_status hb_slots_agree(be_comm *c, hb_op op, size_t count, int root, int bad,
                         const hb_slot *slots, int n, int first_rank)
{
    for (int q = 0; q < n; q++) {
        const hb_slot *o = &slots[q];
        if (o->bad)
            return bad ? PE_EINVAL
                       : hb_fail(c->dev, PE_ECOMM,
                                 "%s on rank %d: rank %d passed invalid arguments (see its "
                                 "error)", hb_op_name(op), c->rank, first_rank + q);
        if (o->op != op || o->count != count || o->root != root)
            return hb_fail(c->dev, PE_ECOMM,
                           "rank %d called %s(count=%zu, root=%d) while rank %d called "
                           "%s(count=%zu, root=%d); every rank must call the same collectives "
                           "in the same order with the same count and root",
                           c->rank, hb_op_name(op), count, root, first_rank + q,
                           hb_op_name(o->op), o->count, o->root);
    }
    return PE_OK;
}

/* Publishes this rank's call, waits for all ranks, and checks that they agree.
 * bad: this rank's own argument check failed (its message is already in c->dev). */
static pe_status coll_begin(be_comm *c, hb_op op, size_t count, int root, const float *send,
                            float *recv, int bad)
{
    hb_world *w = c->w;
    if (rt_barrier_aborted(&w->bar))
        return hb_coll_aborted(c, op);
    w->slots[c->rank] = (hb_slot){.op = op, .count = count, .root = root, .bad = bad,
                                  .send = send, .recv = recv};
    if (rt_barrier_wait(&w->bar, 1) != PE_OK)
        return hb_coll_aborted(c, op);
    pe_status s = hb_slots_agree(c, op, count, root, bad, w->slots, w->n, 0);
    if (s != PE_OK) /* every rank sees the same slots and fails alike */
        rt_barrier_wait(&w->bar, 0);
    return s;
}

/* The last barrier: after it no peer reads this rank's buffers or slot. */
static pe_status coll_end(be_comm *c)
{
    rt_barrier_wait(&c->w->bar, 0);
    return PE_OK;
}

static int need(be_comm *c, hb_op op, const void *p, size_t count, const char *what)
{
    if (count && !p) {
        hb_fail(c->dev, PE_EINVAL, "%s on rank %d: %s is NULL with count %zu", hb_op_name(op),
                c->rank, what, count);
        return 0;
    }
    return 1;
}

/* allgather's and reduce_scatter's buffers: part (count) and whole (n * count) are
 * disjoint, or in place: part is this rank's slice of whole. */
static int apart_or_in_place(be_comm *c, hb_op op, const float *part, const char *part_name,
                             const float *whole, const char *whole_name, size_t count)
{
    const float *mine = whole ? whole + (size_t)c->rank * count : NULL; /* in-place position */
    if (part == mine || !hb_overlap(part, count, whole, count * (size_t)c->w->n))
        return 1;
    hb_fail(c->dev, PE_EINVAL,
            "%s on rank %d: %s overlaps %s; in place means %s == %s + rank * count, otherwise "
            "use disjoint buffers",
            hb_op_name(op), c->rank, part_name, whole_name, part_name, whole_name);
    return 0;
}

pe_status hb_allreduce_sum(be_comm *c, const float *send, float *recv, size_t count)
{
    hb_op op = HB_OP_ALLREDUCE;
    int ok = need(c, op, send, count, "send") && need(c, op, recv, count, "recv");
    if (ok && send != recv && hb_overlap(send, count, recv, count)) {
        hb_fail(c->dev, PE_EINVAL,
                "allreduce_sum on rank %d: send and recv overlap partly; pass the same "
                "pointer (in place) or disjoint buffers",
                c->rank);
        ok = 0;
    }
    if (c->w->net) /* ranks in other processes: mpi/hn_coll.c */
        return hb_net_allreduce_sum(c, send, recv, count, !ok);
    pe_status s = coll_begin(c, op, count, 0, send, recv, !ok);
    if (s != PE_OK)
        return s;
    hb_world *w = c->w;
    int n = w->n, r = c->rank;
    int in_place = 0;
    for (int q = 0; q < n; q++)
        in_place |= w->slots[q].send == w->slots[q].recv;
    if (!in_place && (n == 2 || count <= HB_SMALL)) {
        reduce_fixed(recv, w->slots, n, 0, count);
        return coll_end(c);
    }
    if (count <= HB_SMALL) { /* in place, small: through the scratch */
        reduce_fixed(c->scratch, w->slots, n, 0, count);
        rt_barrier_wait(&w->bar, 0); /* every send fully read: the last barrier */
        if (count)
            memcpy(recv, c->scratch, count * sizeof *recv);
        return PE_OK;
    }
    size_t lo, hi;
    slice(count, n, r, &lo, &hi);
    reduce_fixed(recv + lo, w->slots, n, lo, hi - lo);
    rt_barrier_wait(&w->bar, 0); /* B: every slice is summed */
    for (int q = 0; q < n; q++) {
        slice(count, n, q, &lo, &hi);
        if (q != r && hi > lo)
            memcpy(recv + lo, w->slots[q].recv + lo, (hi - lo) * sizeof *recv);
    }
    return coll_end(c);
}

pe_status hb_allgather(be_comm *c, const float *send, float *recv, size_t count)
{
    hb_op op = HB_OP_ALLGATHER;
    int ok = need(c, op, send, count, "send") &&
             need(c, op, recv, count * (size_t)c->w->n, "recv") &&
             apart_or_in_place(c, op, send, "send", recv, "recv", count);
    if (c->w->net) /* ranks in other processes: mpi/hn_coll.c */
        return hb_net_allgather(c, send, recv, count, !ok);
    pe_status s = coll_begin(c, op, count, 0, send, recv, !ok);
    if (s != PE_OK)
        return s;
    hb_world *w = c->w;
    for (int q = 0; q < w->n && count; q++) {
        float *dst = recv + (size_t)q * count;
        if (dst != w->slots[q].send)
            memcpy(dst, w->slots[q].send, count * sizeof *dst);
    }
    return coll_end(c);
}

pe_status hb_reduce_scatter(be_comm *c, const float *send, float *recv, size_t count)
{
    hb_op op = HB_OP_REDUCE_SCATTER;
    int ok = need(c, op, send, count * (size_t)c->w->n, "send") &&
             need(c, op, recv, count, "recv") &&
             apart_or_in_place(c, op, recv, "recv", send, "send", count);
    if (c->w->net) /* ranks in other processes: mpi/hn_coll.c */
        return hb_net_reduce_scatter(c, send, recv, count, !ok);
    pe_status s = coll_begin(c, op, count, 0, send, recv, !ok);
    if (s != PE_OK)
        return s;
    /* Only this rank reads (or writes) slice r of any send buffer, so in place is safe. */
    reduce_fixed(recv, c->w->slots, c->w->n, (size_t)c->rank * count, count);
    return coll_end(c);
}

pe_status hb_broadcast(be_comm *c, float *buf, size_t count, int root)
{
    hb_op op = HB_OP_BROADCAST;
    int ok = need(c, op, buf, count, "buf");
    if (ok && (root < 0 || root >= c->w->n)) {
        hb_fail(c->dev, PE_EINVAL, "broadcast on rank %d: root %d is not a rank (0..%d)",
                c->rank, root, c->w->n - 1);
        ok = 0;
    }
    if (c->w->net) /* ranks in other processes: mpi/hn_coll.c */
        return hb_net_broadcast(c, buf, count, ok ? root : 0, !ok);
    pe_status s = coll_begin(c, op, count, root, buf, buf, !ok);
    if (s != PE_OK)
        return s;
    const float *src = c->w->slots[root].send;
    if (count && src != buf)
        memcpy(buf, src, count * sizeof *buf);
    return coll_end(c);
}

pe_status hb_barrier(be_comm *c)
{
    if (c->w->net)
        return hb_net_barrier(c);
    pe_status s = coll_begin(c, HB_OP_BARRIER, 0, 0, NULL, NULL, 0);
    if (s != PE_OK)
        return s;
    return coll_end(c);
}
