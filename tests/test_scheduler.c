/* test_scheduler.c: the replica scheduler (engine/scheduler.h), driven by hand as the
 * replica thread drives it. Every sequence ends exactly once, after its tokens, with the
 * right reason; a step puts decodes first, keeps its token and logit-row budgets, chunks long
 * prompts and describes its chunks, tokens, slots, logit rows and draws exactly; KV blocks
 * are promised first come first served, never shared, taken as positions grow and all given
 * back; waits, refusals, max_seqs, cancels, failed steps, end_all and scoring behave as the
 * header says; a decode's drafts (cfg.spec_tokens) are the model's own lookup, each row
 * draws its own index's draw, and tokens are taken up to the first miss; a grammar's mask
 * is on each of a sequence's rows, after the drafts before it, its drafts stop at the
 * first it refuses, and the token that closes its text ends it; and a seeded random run
 * keeps all of it.
 *
 * The test keeps its own model of every sequence (its tokens, what is cached, what it was
 * fed, the events it must get) and checks the scheduler against that model after every call,
 * never against the scheduler's own helpers. */
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "kernels/attention.h"
#include "kernels/sample.h"

/* Token ids with a meaning in these tests: two eos tokens (the config's), stop candidates,
 * and the plain tokens the "device" samples by default (20..29); prompts use 100 and up. */
enum { EOS = 2, EOS2 = 5, STOP = 11, STOP2 = 12, VOCAB = 8, MAX_IDS = 1024 };

/* ---- the test's model of a sequence ------------------------------------------------------ */

typedef struct rec {
    pe_token_event ev;
    int score;   /* the event's sequence was a score sequence */
    int exact;   /* (expectations) token and index are part of the expectation */
} rec;

typedef struct seq_spec {
    int prompt_len, max_tokens;
    int score, all_positions;
    int ignore_eos, logprobs;
    int32_t stop[2];
    int nstop;
    pe_sampling sampling; /* top_p 0 is taken as 1 */
    int32_t script[8];    /* the tokens the device samples at index 0, 1, ... */
    int nscript;
} seq_spec;

typedef struct tseq {
    int used, ended;
    seq_spec spec;
    en_seq *seq;          /* the scheduler's, until its final event */
    int32_t *tokens;      /* (cap) the prompt, then the tokens fed back */
    int ntok, cap;
    int cached;           /* positions whose step came back */
    int covered;          /* positions written or being written (cached + in flight) */
    int generated;
    int need;             /* blocks it may need, by hand */
    int running, busy;
    int cancel_pending;
    pe_status end_pending;/* en_sched_end_all's status while busy, or PE_OK */
    int32_t *bt;          /* its block table as last seen */
    int nbt;
    int32_t draft[PE_MAX_SPEC_TOKENS]; /* its decode's drafts in the step (cfg.spec_tokens) */
    int ndraft;
    float *score_out;
    rec *exp, *act;       /* expected and received events, in order */
    int nexp, nact, evcap;
} tseq;

typedef struct harness harness;
typedef int32_t (*pick_fn)(harness *h, const tseq *t, int index);

struct harness {
    en_sched s;
    en_sched_config cfg;
    en_step *st;
    int outstanding;      /* st holds a step that is not back */
    tseq seqs[MAX_IDS];   /* by id */
    int order[MAX_IDS];   /* ids in the order they were added */
    int norder;
    pick_fn pick;         /* NULL: the sequence's script, then default_token */
    uint64_t rng;
    int stray;            /* events for unknown ids or the wrong sequence */
    int refuse_tokens;    /* the engine cannot take token events (out of memory) */
};

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int rnd_in(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rnd(s) % (uint64_t)(hi - lo + 1));
}

/* The token the device samples for sequence id at index k when nothing else is asked. */
static int32_t default_token(int id, int k) { return 20 + (id + k) % 10; }
static int32_t prompt_token(int id, int p) { return 100 + (id * 31 + p) % 900; }

static en_sched_config default_config(void)
{
    en_sched_config c;
    memset(&c, 0, sizeof c);
    c.block_tokens = 4;
    c.nblocks = 64;
    c.max_seqs = 8;
    c.max_step_tokens = 16;
    c.max_logit_rows = 8;
    c.context = 64;
    c.vocab = VOCAB;
    c.kv_full = PE_KV_WAIT;
    c.eos[0] = EOS;
    c.eos[1] = EOS2;
    c.neos = 2;
    return c;
}

static pe_status record(void *ctx, en_seq *seq, const pe_token_event *ev);

/* The harnesses of the running test: its teardown frees them even when an assertion cut
 * the test short, so that a failing test leaks nothing under memcheck. */
static harness *open_harness[4];

static harness *h_new(const en_sched_config *cfg)
{
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    int slot = 0;
    while (slot < 4 && open_harness[slot])
        slot++;
    assert_true(slot < 4);
    open_harness[slot] = h;
    h->cfg = *cfg;
    h->st = calloc(1, sizeof *h->st);
    assert_non_null(h->st);
    assert_int_equal(en_sched_init(&h->s, cfg, record, h), PE_OK);
    assert_int_equal(en_sched_room(&h->s), cfg->nblocks);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    return h;
}

static tseq *seq_of(harness *h, int id)
{
    assert_true(id > 0 && id < MAX_IDS && h->seqs[id].used);
    return &h->seqs[id];
}

static void push_rec(tseq *t, rec **v, int *n, const rec *r)
{
    if (*n == t->evcap) {
        int cap = t->evcap ? 2 * t->evcap : 16;
        t->exp = realloc(t->exp, (size_t)cap * sizeof *t->exp);
        t->act = realloc(t->act, (size_t)cap * sizeof *t->act);
        assert_non_null(t->exp);
        assert_non_null(t->act);
        t->evcap = cap;
    }
    (*v)[(*n)++] = *r;
}

static void push_act(tseq *t, const rec *r) { push_rec(t, &t->act, &t->nact, r); }
static void push_exp(tseq *t, const rec *r) { push_rec(t, &t->exp, &t->nexp, r); }

/* The emit callback: copies the event (and whether its sequence scores) to its sequence. */
static pe_status record(void *ctx, en_seq *seq, const pe_token_event *ev)
{
    harness *h = ctx;
    if (ev->seq == 0 || ev->seq >= MAX_IDS || !h->seqs[ev->seq].used ||
        h->seqs[ev->seq].seq != seq || seq->id != ev->seq) {
        h->stray++;
        return PE_OK;
    }
    if (h->refuse_tokens && ev->finish == PE_FINISH_NONE)
        return PE_ENOMEM;
    tseq *t = &h->seqs[ev->seq];
    rec r = {*ev, seq->score, 0};
    push_act(t, &r);
    if (ev->finish != PE_FINISH_NONE)
        t->seq = NULL; /* the scheduler frees it after this event */
    return PE_OK;
}

/* The model's side: an event the sequence must get, and its end. */
static void expect_final(tseq *t, pe_finish why, pe_status status)
{
    rec r;
    memset(&r, 0, sizeof r);
    r.ev.token = -1;
    r.ev.finish = why;
    r.ev.status = status;
    r.score = t->spec.score;
    r.exact = 0;
    push_exp(t, &r);
    t->ended = 1;
    t->running = 0;
    t->busy = 0;
}

static int is_config_eos(const harness *h, int32_t tok)
{
    for (int i = 0; i < h->cfg.neos; i++)
        if (h->cfg.eos[i] == tok)
            return 1;
    return 0;
}

/* ---- checks ------------------------------------------------------------------------------- */

/* Every sequence got exactly the events the model expects so far, in order: the same ids,
 * users, reasons and statuses, the fed tokens at indices 0, 1, ..., and one final event,
 * last, once it ended. */
static void check_events(harness *h)
{
    assert_int_equal(h->stray, 0);
    for (int o = 0; o < h->norder; o++) {
        int id = h->order[o];
        tseq *t = &h->seqs[id];
        if (t->nact != t->nexp)
            fail_msg("seq %d: %d events, expected %d (last received finish %d status %d)", id,
                     t->nact, t->nexp, t->nact ? (int)t->act[t->nact - 1].ev.finish : -1,
                     t->nact ? (int)t->act[t->nact - 1].ev.status : 0);
        int finals = 0;
        for (int k = 0; k < t->nact; k++) {
            const pe_token_event *a = &t->act[k].ev, *e = &t->exp[k].ev;
            if (a->seq != (uint64_t)id || a->user != (void *)t || t->act[k].score != t->spec.score)
                fail_msg("seq %d event %d: id %llu, user or score flag wrong", id, k,
                         (unsigned long long)a->seq);
            if (a->finish != e->finish || a->status != e->status)
                fail_msg("seq %d event %d: finish %d status %d, expected finish %d status %d", id,
                         k, (int)a->finish, (int)a->status, (int)e->finish, (int)e->status);
            if (t->exp[k].exact && (a->token != e->token || a->index != e->index))
                fail_msg("seq %d event %d: token %d index %d, expected token %d index %d", id, k,
                         (int)a->token, a->index, (int)e->token, e->index);
            if (!t->exp[k].exact && !t->spec.score && a->token != -1)
                fail_msg("seq %d event %d: a final event without a token carries %d", id, k,
                         (int)a->token);
            if (t->exp[k].exact && e->nlogprobs) {
                assert_int_equal(a->nlogprobs, e->nlogprobs);
                assert_float_equal(a->logprob, e->logprob, 1e-6f);
                for (int j = 0; j < e->nlogprobs; j++) {
                    assert_int_equal(a->top_tokens[j], e->top_tokens[j]);
                    assert_float_equal(a->top_logprobs[j], e->top_logprobs[j], 1e-6f);
                }
            }
            if (a->finish != PE_FINISH_NONE) {
                finals++;
                if (k != t->nact - 1)
                    fail_msg("seq %d: event %d after its final event", id, k + 1);
            }
        }
        assert_int_equal(finals, t->ended);
        if (t->ended)
            assert_null(t->seq);
    }
}

/* KV blocks: each running sequence holds the blocks of its written positions (no more: they
 * are taken as positions grow), at most its promise, with a table that never changes under
 * positions already written; no block is held twice or both held and free; every block is
 * held or free; the promises of the running sequences sum to nblocks - room <= nblocks;
 * waiting sequences hold nothing; at most max_seqs run. */
static void check_blocks(harness *h)
{
    const int N = h->cfg.nblocks, B = h->cfg.block_tokens;
    static int owner[4096]; /* (N) the id holding each block, -2 free, -1 neither */
    assert_true(N <= 4096);
    for (int b = 0; b < N; b++)
        owner[b] = -1;
    int promised = 0, nrun = 0, nlive = 0;
    for (int o = 0; o < h->norder; o++) {
        int id = h->order[o];
        tseq *t = &h->seqs[id];
        if (t->ended)
            continue;
        nlive++;
        en_seq *q = t->seq;
        assert_non_null(q);
        if (!t->running) {
            assert_int_equal(q->nblocks, 0);
            continue;
        }
        nrun++;
        promised += t->need;
        if (q->nblocks != ceil_div(t->covered, B) || q->nblocks > t->need)
            fail_msg("seq %d holds %d blocks for %d positions (block %d, promise %d)", id,
                     q->nblocks, t->covered, B, t->need);
        for (int j = 0; j < q->nblocks; j++) {
            int b = q->blocks[j];
            assert_true(b >= 0 && b < N);
            if (owner[b] != -1)
                fail_msg("block %d held by seq %d and seq %d", b, owner[b], id);
            owner[b] = id;
        }
        for (int j = 0; j < t->nbt; j++)
            if (q->blocks[j] != t->bt[j])
                fail_msg("seq %d: block %d of its table moved from %d to %d", id, j, t->bt[j],
                         q->blocks[j]);
        memcpy(t->bt, q->blocks, (size_t)q->nblocks * sizeof *t->bt);
        t->nbt = q->nblocks;
    }
    for (int i = 0; i < h->s.kv.nfree; i++) {
        int b = h->s.kv.free[i];
        assert_true(b >= 0 && b < N);
        if (owner[b] != -1)
            fail_msg("free block %d is %s", b, owner[b] == -2 ? "free twice" : "held");
        owner[b] = -2;
    }
    for (int b = 0; b < N; b++)
        if (owner[b] == -1)
            fail_msg("block %d is lost: neither held nor free", b);
    assert_true(promised <= N);
    assert_int_equal(en_sched_room(&h->s), N - promised);
    assert_true(nrun <= h->cfg.max_seqs);
    assert_int_equal(h->s.nrunning, nrun);
    assert_int_equal(en_sched_sequences(&h->s), nlive);
}

static int in_running(const harness *h, const en_seq *q)
{
    for (int i = 0; i < h->s.nrunning; i++)
        if (h->s.running[i] == q)
            return 1;
    return 0;
}

/* Blocks free and not promised, by the model. */
static int model_room(const harness *h)
{
    int room = h->cfg.nblocks;
    for (int o = 0; o < h->norder; o++) {
        const tseq *t = &h->seqs[h->order[o]];
        if (!t->ended && t->running)
            room -= t->need;
    }
    return room;
}

/* The drafts of t's next decode (cfg.spec_tokens), by the model: after the latest earlier
 * place of its last n tokens (n from spec_ngram_max down to spec_ngram_min), token ntok + j
 * is drafted as token from + j, itself a draft when past the end; at most the step's tokens
 * and logit rows left after the decode's own, and none past its limit, its buffer or the
 * context. None for a scored sequence, or while more than spec_max_seqs run. */
static int model_drafts(const harness *h, const tseq *t, int tokens_left, int logits_left,
                        int32_t *out)
{
    const int limits[] = {h->cfg.spec_tokens, tokens_left, logits_left,
                          t->spec.max_tokens - t->generated - 1, h->cfg.context - 1 - t->ntok,
                          t->cap - t->ntok};
    int most = limits[0];
    for (size_t i = 1; i < sizeof limits / sizeof limits[0]; i++)
        most = limits[i] < most ? limits[i] : most;
    int nrun = 0;
    for (int o = 0; o < h->norder; o++)
        nrun += !h->seqs[h->order[o]].ended && h->seqs[h->order[o]].running;
    if (t->spec.score || most <= 0 || (h->cfg.spec_max_seqs && nrun > h->cfg.spec_max_seqs))
        return 0;
    for (int n = h->cfg.spec_ngram_max; n >= h->cfg.spec_ngram_min; n--) {
        for (int from = t->ntok - 1; n < t->ntok && from - n >= 0; from--) {
            int same = 1; /* tokens [from - n, from) against the last n */
            for (int j = 0; j < n; j++)
                same &= t->tokens[from - n + j] == t->tokens[t->ntok - n + j];
            if (!same)
                continue;
            for (int j = 0; j < most; j++)
                out[j] = from + j < t->ntok ? t->tokens[from + j] : out[from + j - t->ntok];
            return most;
        }
    }
    return 0;
}

/* The step as built, against the model's sequences (before the step comes back). */
static void check_step(harness *h)
{
    const en_step *st = h->st;
    const en_sched_config *cfg = &h->cfg;
    const int B = cfg->block_tokens;
    assert_true(st->nchunks >= 1);
    en_meta_layout L = en_meta_layout_of_step(st);
    assert_int_equal(st->meta_words, L.words);
    const int32_t *m = st->meta;
    const pe_k_sampling *samp = (const pe_k_sampling *)(const void *)(m + L.sampling);
    int row = 0, bt = 0, lr = 0, max_keys = 0, sample = 0, topk = 0, prefill_seen = 0;
    int nshort = 0;
    for (int i = 0; i < st->nchunks; i++) {
        const en_chunk *c = &st->chunks[i];
        const en_seq *q = c->seq;
        tseq *t = seq_of(h, (int)q->id);
        assert_ptr_equal(t->seq, q);
        assert_false(t->ended);
        assert_true(t->running);
        if (t->busy)
            fail_msg("seq %d twice in a step, or in two steps", (int)q->id);
        const int rem = t->ntok - t->cached;
        /* a decode's drafts: as many as the budgets left before it allow */
        t->ndraft = rem == 1 ? model_drafts(h, t, cfg->max_step_tokens - row - 1,
                                            cfg->max_logit_rows - lr - 1, t->draft) : 0;
        if (c->draft != t->ndraft)
            fail_msg("chunk %d of seq %d: %d drafts, expected %d", i, (int)q->id, c->draft,
                     t->ndraft);
        if (c->pos0 != t->cached || c->n < 1 || c->n - c->draft > rem)
            fail_msg("chunk %d of seq %d: positions %d+%d, model has %d cached of %d", i,
                     (int)q->id, c->pos0, c->n, t->cached, t->ntok);
        if (rem == 1) { /* a decode */
            if (prefill_seen)
                fail_msg("chunk %d: the decode of seq %d after a prefill chunk", i, (int)q->id);
        } else {
            prefill_seen = 1;
        }
        const int reaches_end = c->pos0 + c->n - c->draft == t->ntok;
        const int nl = t->spec.score && t->spec.all_positions ? c->n : reaches_end + c->draft;
        if (c->nlogits != nl)
            fail_msg("chunk %d of seq %d (%d+%d of %d): %d logit rows, expected %d", i,
                     (int)q->id, c->pos0, c->n, t->ntok, c->nlogits, nl);
        assert_int_equal(c->logit0, nl ? lr : -1);
        assert_int_equal(c->sample, !t->spec.score && nl > 0);
        if (c->n - c->draft < rem)
            nshort++;
        /* the chunk table row */
        const int32_t *ch = m + L.chunks + (size_t)i * PE_K_CHUNK_FIELDS;
        assert_int_equal(ch[PE_K_CHUNK_ROW0], row);
        assert_int_equal(ch[PE_K_CHUNK_N], c->n);
        assert_int_equal(ch[PE_K_CHUNK_POS0], c->pos0);
        assert_int_equal(ch[PE_K_CHUNK_BT], bt);
        /* its block table covers its positions and is the sequence's */
        const int need = ceil_div(c->pos0 + c->n, B);
        assert_true(q->nblocks >= need);
        const int32_t *tbl = m + L.block_tables + bt;
        for (int j = 0; j < need; j++)
            assert_int_equal(tbl[j], q->blocks[j]);
        /* its tokens, positions and slots */
        for (int k = 0; k < c->n; k++) {
            const int p = c->pos0 + k;
            const int32_t want = p < t->ntok ? t->tokens[p] : t->draft[p - t->ntok];
            if (m[L.tokens + row + k] != want || m[L.positions + row + k] != p)
                fail_msg("seq %d position %d: token %d at position %d in the step, expected %d",
                         (int)q->id, p, m[L.tokens + row + k], m[L.positions + row + k], want);
            assert_int_equal(m[L.slots + row + k], tbl[p / B] * B + p % B);
            assert_int_equal(m[L.slots + row + k], q->blocks[p / B] * B + p % B);
        }
        /* its logit rows: its last nl rows, with their destinations and draws */
        for (int k = 0; k < nl; k++) {
            const int p = c->pos0 + c->n - nl + k;
            assert_int_equal(m[L.logit_rows + lr + k], row + c->n - nl + k);
            if (t->spec.score)
                assert_ptr_equal(st->logit_dst[lr + k],
                                 t->score_out + (t->spec.all_positions ? (size_t)p * VOCAB : 0));
            else
                assert_null(st->logit_dst[lr + k]);
            if (c->sample) {
                const pe_k_sampling *sp = &samp[lr + k];
                assert_true(sp->temperature == t->spec.sampling.temperature);
                assert_int_equal(sp->top_k, t->spec.sampling.top_k);
                assert_true(sp->top_p == t->spec.sampling.top_p);
                /* row k draws what generated token `generated + k` would draw anyway */
                assert_true(sp->u == pe_k_uniform(t->spec.sampling.seed,
                                                  (uint64_t)(t->generated + k)));
            }
        }
        row += c->n;
        bt += need;
        lr += nl;
        if (c->pos0 + c->n > max_keys)
            max_keys = c->pos0 + c->n;
        if (c->sample) {
            sample = 1;
            if (t->spec.logprobs > topk)
                topk = t->spec.logprobs;
        }
        t->busy = 1;
        if (c->pos0 + c->n > t->covered) /* (blocks taken for rejected drafts stay held) */
            t->covered = c->pos0 + c->n;
    }
    assert_int_equal(st->ntok, row);
    assert_int_equal(st->nbt, bt);
    assert_int_equal(st->nlogits, lr);
    assert_true(st->ntok <= cfg->max_step_tokens);
    assert_true(st->nlogits <= cfg->max_logit_rows);
    assert_int_equal(st->max_keys, max_keys);
    assert_int_equal(st->sample, sample);
    assert_int_equal(st->topk, topk);
    /* The step takes what its budgets allow: a chunk is cut short, or a running sequence
     * with work is left out, only when the tokens or the logit rows it needs ran out. */
    const int tokens_left = cfg->max_step_tokens - row, logits_left = cfg->max_logit_rows - lr;
    if (nshort)
        assert_true(tokens_left == 0 || logits_left == 0);
    for (int o = 0; o < h->norder; o++) {
        const tseq *t = &h->seqs[h->order[o]];
        if (t->ended || !t->running || t->busy)
            continue;
        const int rem = t->ntok - t->cached;
        const int needs_row = rem == 1 || (t->spec.score && t->spec.all_positions);
        if (rem > 0 && tokens_left > 0 && !(needs_row && logits_left == 0))
            fail_msg("seq %d (%d of %d cached) left out of a step with %d tokens and %d logit "
                     "rows to spare", h->order[o], t->cached, t->ntok, tokens_left, logits_left);
    }
}

/* ---- driving the scheduler --------------------------------------------------------------- */

static tseq *h_add(harness *h, int id, const seq_spec *spec)
{
    assert_true(id > 0 && id < MAX_IDS && !h->seqs[id].used);
    const en_sched_config *cfg = &h->cfg;
    tseq *t = &h->seqs[id];
    memset(t, 0, sizeof *t);
    t->used = 1;
    t->spec = *spec;
    if (t->spec.sampling.top_p == 0.0f)
        t->spec.sampling.top_p = 1.0f;
    const int n = spec->prompt_len;
    int positions = spec->score ? n : n + spec->max_tokens;
    if (positions > cfg->context)
        positions = cfg->context;
    t->cap = positions;
    /* stored positions: all but the last generated token (that one is never fed back) */
    int stored = spec->score ? positions : positions - 1 < n ? n : positions - 1;
    t->need = ceil_div(stored, cfg->block_tokens);
    t->tokens = malloc((size_t)t->cap * sizeof *t->tokens);
    t->bt = malloc((size_t)(ceil_div(cfg->context, cfg->block_tokens) + 1) * sizeof *t->bt);
    assert_non_null(t->tokens);
    assert_non_null(t->bt);
    for (int p = 0; p < n; p++)
        t->tokens[p] = prompt_token(id, p);
    t->ntok = n;

    en_seq *q = calloc(1, sizeof *q);
    assert_non_null(q);
    q->hdr.kind = EN_MSG_SEQ;
    q->id = (uint64_t)id;
    q->tokens = malloc((size_t)t->cap * sizeof *q->tokens);
    assert_non_null(q->tokens);
    memcpy(q->tokens, t->tokens, (size_t)n * sizeof *q->tokens);
    q->ntok = n;
    q->cap = t->cap;
    q->prompt_len = n;
    q->max_tokens = spec->score ? 0 : spec->max_tokens;
    q->sampling = t->spec.sampling;
    q->logprobs = spec->logprobs;
    memcpy(q->stop, spec->stop, (size_t)spec->nstop * sizeof *q->stop);
    q->nstop = spec->nstop;
    q->ignore_eos = spec->ignore_eos;
    q->user = t;
    if (spec->score) {
        t->score_out = calloc((size_t)(spec->all_positions ? n : 1) * VOCAB, sizeof(float));
        assert_non_null(t->score_out);
        q->score = 1;
        q->all_positions = spec->all_positions;
        q->score_out = t->score_out;
    }
    t->seq = q;
    h->order[h->norder++] = id;

    /* PE_KV_REFUSE: refused at once when its promise does not fit beside the running
     * sequences' promises and those of the sequences waiting ahead of it. */
    if (cfg->kv_full == PE_KV_REFUSE) {
        int waiting = 0;
        for (int o = 0; o < h->norder - 1; o++) {
            const tseq *w = &h->seqs[h->order[o]];
            if (!w->ended && !w->running)
                waiting += w->need;
        }
        if (t->need > model_room(h) - waiting)
            expect_final(t, PE_FINISH_ERROR, PE_EAGAIN);
    }
    en_sched_add(&h->s, q);
    check_events(h);
    check_blocks(h);
    return t;
}

/* Builds a step. Before, the model says who must be admitted: waiting sequences in the
 * order they came, while a sequence may still run (max_seqs) and its promise fits the room;
 * the first that does not fit stops the queue. After, the running set must be exactly that,
 * and has_work must have said whether a step would come. */
static int h_build(harness *h)
{
    assert_false(h->outstanding);
    static char admit[MAX_IDS];
    memset(admit, 0, sizeof admit);
    int room = model_room(h), nrun = 0;
    for (int o = 0; o < h->norder; o++)
        nrun += !h->seqs[h->order[o]].ended && h->seqs[h->order[o]].running;
    for (int o = 0; o < h->norder; o++) {
        const tseq *t = &h->seqs[h->order[o]];
        if (t->ended || t->running)
            continue;
        if (nrun >= h->cfg.max_seqs || t->need > room)
            break;
        admit[h->order[o]] = 1;
        room -= t->need;
        nrun++;
    }
    const int work = en_sched_has_work(&h->s);
    const int r = en_sched_build(&h->s, h->st);
    assert_true(r == 0 || r == 1);
    for (int o = 0; o < h->norder; o++) {
        tseq *t = &h->seqs[h->order[o]];
        if (t->ended)
            continue;
        const int want = t->running || admit[h->order[o]];
        if (in_running(h, t->seq) != want)
            fail_msg("seq %d %s", h->order[o],
                     want ? "should have been admitted" : "was admitted out of turn");
        t->running = want;
    }
    assert_int_equal(work, r);
    if (r == 1) {
        check_step(h);
        h->outstanding = 1;
    }
    check_blocks(h);
    return r;
}

/* The token the device samples for t's generated token `index`. */
static int32_t pick_token(harness *h, const tseq *t, int index)
{
    if (h->pick)
        return h->pick(h, t, index);
    int id = (int)(t - h->seqs);
    return index < t->spec.nscript ? t->spec.script[index] : default_token(id, index);
}

/* The model's side of a sampled token: appended; the event it must bring. */
static void feed(harness *h, tseq *t, const en_step *st, int r)
{
    const int32_t tok = st->out_tokens[r];
    t->tokens[t->ntok++] = tok;
    rec e;
    memset(&e, 0, sizeof e);
    e.ev.token = tok;
    e.ev.index = t->generated++;
    e.exact = 1;
    if (t->spec.logprobs > 0 && st->topk > 0) {
        const float lse = st->out_lse[r];
        e.ev.logprob = st->out_logit[r] - lse;
        e.ev.nlogprobs = t->spec.logprobs < st->topk ? t->spec.logprobs : st->topk;
        for (int j = 0; j < e.ev.nlogprobs; j++) {
            e.ev.top_tokens[j] = st->out_top[(size_t)r * (size_t)st->topk + (size_t)j];
            e.ev.top_logprobs[j] = st->out_topv[(size_t)r * (size_t)st->topk + (size_t)j] - lse;
        }
    }
    int stop = 0;
    for (int i = 0; i < t->spec.nstop; i++)
        stop |= t->spec.stop[i] == tok;
    if (!t->spec.ignore_eos && is_config_eos(h, tok))
        e.ev.finish = PE_FINISH_EOS;
    else if (stop)
        e.ev.finish = PE_FINISH_STOP;
    else if (t->generated >= t->spec.max_tokens || t->ntok >= h->cfg.context)
        e.ev.finish = PE_FINISH_LENGTH;
    if (h->refuse_tokens && e.ev.finish == PE_FINISH_NONE) { /* lost: the sequence ends */
        expect_final(t, PE_FINISH_ERROR, PE_ENOMEM);
        return;
    }
    push_exp(t, &e);
    if (e.ev.finish != PE_FINISH_NONE) {
        t->ended = 1;
        t->running = 0;
    }
}

/* The device's part: the sampled token of each sampling chunk at its last logit row (with
 * a logit, a log-sum-exp and top-k rows), or the step's failure. Then the scheduler takes the
 * step back and the model says what each chunk's sequence must have got. */
static void h_complete(harness *h, pe_status status)
{
    assert_true(h->outstanding);
    en_step *st = h->st;
    for (int i = 0; i < st->nchunks && status == PE_OK; i++) {
        const en_chunk *c = &st->chunks[i];
        if (!c->sample)
            continue;
        const tseq *t = seq_of(h, (int)c->seq->id);
        const int r0 = c->logit0 + c->nlogits - 1 - c->draft;
        int valid = 1; /* row k's inputs are the sequence's own tokens: drafts 1..k all hit */
        for (int k = 0; k <= c->draft; k++) {
            const int r = r0 + k;
            st->out_tokens[r] = valid ? pick_token(h, t, t->generated + k) : 999;
            valid &= k < c->draft && st->out_tokens[r] == t->draft[k];
            st->out_logit[r] = -0.5f - (float)r;
            st->out_lse[r] = 0.25f;
            for (int j = 0; j < st->topk; j++) {
                st->out_top[(size_t)r * (size_t)st->topk + (size_t)j] = 40 + j;
                st->out_topv[(size_t)r * (size_t)st->topk + (size_t)j] = -0.5f * (float)j;
            }
        }
    }
    for (int i = 0; i < st->nchunks; i++) {
        const en_chunk *c = &st->chunks[i];
        tseq *t = seq_of(h, (int)c->seq->id);
        t->busy = 0;
        if (status != PE_OK) {
            t->covered = t->cached;
            expect_final(t, PE_FINISH_ERROR, status);
            continue;
        }
        t->cached += c->n - c->draft;
        if (t->cancel_pending)
            expect_final(t, PE_FINISH_CANCELLED, PE_OK);
        else if (t->end_pending != PE_OK)
            expect_final(t, PE_FINISH_ERROR, t->end_pending);
        else if (t->spec.score) {
            if (t->cached == t->ntok)
                expect_final(t, PE_FINISH_LENGTH, PE_OK);
        } else if (c->sample) { /* each token up to the first draft missed, or the end */
            const int r0 = c->logit0 + c->nlogits - 1 - c->draft;
            for (int k = 0; k <= c->draft; k++) {
                feed(h, t, st, r0 + k);
                if (t->ended || k == c->draft || st->out_tokens[r0 + k] != t->draft[k])
                    break;
                t->cached++; /* draft k + 1 was the token: its keys and values are right */
            }
        }
    }
    st->status = status;
    en_sched_complete(&h->s, st);
    h->outstanding = 0;
    check_events(h);
    check_blocks(h);
}

/* en_sched_cancel: a waiting sequence or a running one not in a step ends now; one in a
 * step when the step comes back; an unknown or ended id changes nothing. */
static void h_cancel(harness *h, int id)
{
    if (id > 0 && id < MAX_IDS && h->seqs[id].used && !h->seqs[id].ended) {
        tseq *t = &h->seqs[id];
        if (t->busy)
            t->cancel_pending = 1;
        else
            expect_final(t, PE_FINISH_CANCELLED, PE_OK);
    }
    en_sched_cancel(&h->s, (uint64_t)id);
    check_events(h);
    check_blocks(h);
}

/* en_sched_end_all: waiting and idle running sequences end now with `why`; busy ones when
 * their step comes back (the header's contract). */
static void h_end_all(harness *h, pe_status why)
{
    for (int o = 0; o < h->norder; o++) {
        tseq *t = &h->seqs[h->order[o]];
        if (t->ended)
            continue;
        if (t->busy)
            t->end_pending = why;
        else
            expect_final(t, PE_FINISH_ERROR, why);
    }
    en_sched_end_all(&h->s, why);
    check_events(h);
    check_blocks(h);
}

/* Builds and completes steps until none comes; returns how many ran. */
static int h_run(harness *h)
{
    int steps = 0;
    while (h_build(h)) {
        h_complete(h, PE_OK);
        assert_true(++steps < 100000);
    }
    return steps;
}

static int live(const harness *h)
{
    int n = 0;
    for (int o = 0; o < h->norder; o++)
        n += !h->seqs[h->order[o]].ended;
    return n;
}

/* Frees the scheduler, the step and the model. */
static void h_release(harness *h)
{
    for (int i = 0; i < 4; i++)
        if (open_harness[i] == h)
            open_harness[i] = NULL;
    en_sched_free(&h->s);
    en_step_free(h->st);
    for (int o = 0; o < h->norder; o++) {
        tseq *t = &h->seqs[h->order[o]];
        free(t->tokens);
        free(t->bt);
        free(t->score_out);
        free(t->exp);
        free(t->act);
    }
    free(h);
}

/* Ends what is left (a test that asserted everything ended has nothing left), checks the
 * pool is whole, frees everything. */
static void h_free(harness *h)
{
    if (h->outstanding)
        h_complete(h, PE_ECLOSED);
    if (live(h))
        h_end_all(h, PE_ECLOSED);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), h->cfg.nblocks);
    assert_int_equal(h->s.kv.nfree, h->cfg.nblocks);
    h_release(h);
}

/* A test's teardown: ends and frees what a failed test left, asserting nothing. */
static int release_open_harnesses(void **state)
{
    (void)state;
    for (int i = 0; i < 4; i++) {
        harness *h = open_harness[i];
        if (!h)
            continue;
        if (h->outstanding) {
            h->st->status = PE_ECLOSED;
            en_sched_complete(&h->s, h->st);
        }
        en_sched_end_all(&h->s, PE_ECLOSED);
        h_release(h);
    }
    return 0;
}

/* ---- reading the results ------------------------------------------------------------------ */

static const pe_token_event *final_event(harness *h, int id)
{
    tseq *t = seq_of(h, id);
    if (!t->nact || t->act[t->nact - 1].ev.finish == PE_FINISH_NONE)
        return NULL;
    return &t->act[t->nact - 1].ev;
}

/* Sequence id received exactly the tokens want[0..n) at indices 0..n-1, the last one in its
 * final event with reason why. */
static void assert_tokens(harness *h, int id, const int32_t *want, int n, pe_finish why)
{
    tseq *t = seq_of(h, id);
    if (t->nact != n)
        fail_msg("seq %d: %d events, expected %d", id, t->nact, n);
    for (int k = 0; k < n; k++) {
        const pe_token_event *e = &t->act[k].ev;
        assert_int_equal(e->token, want[k]);
        assert_int_equal(e->index, k);
        assert_int_equal(e->status, PE_OK);
        assert_int_equal(e->finish, k == n - 1 ? why : PE_FINISH_NONE);
    }
}

static void assert_final(harness *h, int id, pe_finish why, pe_status status)
{
    const pe_token_event *e = final_event(h, id);
    if (!e)
        fail_msg("seq %d has no final event", id);
    assert_int_equal(e->finish, why);
    assert_int_equal(e->status, status);
}

static int token_events(harness *h, int id)
{
    tseq *t = seq_of(h, id);
    int n = 0;
    for (int k = 0; k < t->nact; k++)
        n += t->act[k].ev.token >= 0;
    return n;
}

/* Chunk i of the step is n tokens of seq id from pos0, with nlogits logit rows. */
static void assert_chunk(harness *h, int i, int id, int pos0, int n, int nlogits)
{
    assert_true(i < h->st->nchunks);
    const en_chunk *c = &h->st->chunks[i];
    if ((int)c->seq->id != id || c->pos0 != pos0 || c->n != n || c->nlogits != nlogits)
        fail_msg("chunk %d: seq %d %d+%d (%d logit rows), expected seq %d %d+%d (%d)", i,
                 (int)c->seq->id, c->pos0, c->n, c->nlogits, id, pos0, n, nlogits);
}

/* ---- 1. events ---------------------------------------------------------------------------- */

static void test_each_sequence_ends_once_after_its_tokens_with_its_reason(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    seq_spec eos = {.prompt_len = 3, .max_tokens = 10, .script = {7, 8, EOS}, .nscript = 3};
    seq_spec ignore = {.prompt_len = 3, .max_tokens = 4, .ignore_eos = 1,
                       .script = {EOS, EOS2, 9, 9}, .nscript = 4};
    seq_spec stop = {.prompt_len = 2, .max_tokens = 10, .stop = {STOP2, STOP}, .nstop = 2,
                     .script = {9, STOP}, .nscript = 2};
    seq_spec length = {.prompt_len = 5, .max_tokens = 3};
    seq_spec context = {.prompt_len = 60, .max_tokens = 100}; /* 4 tokens fill the 64 */
    seq_spec eos2 = {.prompt_len = 4, .max_tokens = 5, .script = {EOS2}, .nscript = 1};
    seq_spec logprobs = {.prompt_len = 3, .max_tokens = 2, .logprobs = 3};
    h_add(h, 1, &eos);
    h_add(h, 2, &ignore);
    h_add(h, 3, &stop);
    h_add(h, 4, &length);
    h_add(h, 5, &context);
    h_add(h, 6, &eos2);
    h_add(h, 7, &logprobs);
    h_run(h);

    assert_tokens(h, 1, (const int32_t[]){7, 8, EOS}, 3, PE_FINISH_EOS);
    assert_tokens(h, 2, (const int32_t[]){EOS, EOS2, 9, 9}, 4, PE_FINISH_LENGTH);
    assert_tokens(h, 3, (const int32_t[]){9, STOP}, 2, PE_FINISH_STOP);
    assert_tokens(h, 4, (const int32_t[]){default_token(4, 0), default_token(4, 1),
                                          default_token(4, 2)}, 3, PE_FINISH_LENGTH);
    assert_tokens(h, 5, (const int32_t[]){default_token(5, 0), default_token(5, 1),
                                          default_token(5, 2), default_token(5, 3)}, 4,
                  PE_FINISH_LENGTH);
    assert_tokens(h, 6, (const int32_t[]){EOS2}, 1, PE_FINISH_EOS);
    assert_tokens(h, 7, (const int32_t[]){default_token(7, 0), default_token(7, 1)}, 2,
                  PE_FINISH_LENGTH);
    /* logprobs: the top 3 of the row, as the device wrote them, less the row's lse */
    const pe_token_event *e = &seq_of(h, 7)->act[1].ev;
    assert_int_equal(e->nlogprobs, 3);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(e->top_tokens[j], 40 + j);
        assert_float_equal(e->top_logprobs[j], -0.5f * (float)j - 0.25f, 1e-6f);
    }
    assert_int_equal(en_sched_sequences(&h->s), 0);
    h_free(h);
}

/* ---- 2. step contents --------------------------------------------------------------------- */

static void test_meta_sections_follow_each_other_in_the_documented_order(void **state)
{
    (void)state;
    /* 5 tokens, 2 chunks, 3 block-table entries, 2 logit rows */
    en_meta_layout L = en_meta_layout_of(5, 2, 3, 2, 0, 0, 0);
    assert_int_equal(L.tokens, 0);
    assert_int_equal(L.positions, 5);
    assert_int_equal(L.slots, 10);
    assert_int_equal(L.chunks, 15);
    assert_int_equal(L.block_tables, 15 + 2 * PE_K_CHUNK_FIELDS);
    assert_int_equal(L.logit_rows, 15 + 2 * PE_K_CHUNK_FIELDS + 3);
    assert_int_equal(L.targets, 15 + 2 * PE_K_CHUNK_FIELDS + 3 + 2);
    assert_int_equal(L.sampling, 15 + 2 * PE_K_CHUNK_FIELDS + 3 + 2 + 2);
    assert_int_equal(L.penalties, 15 + 2 * PE_K_CHUNK_FIELDS + 3 + 2 + 2 + 2 * 5);
    assert_int_equal(L.words, 15 + 2 * PE_K_CHUNK_FIELDS + 3 + 2 + 2 + 2 * 5);
    assert_int_equal(sizeof(pe_k_sampling), 5 * sizeof(int32_t));
    /* with 3 masks of 4 words and 2 penalty entries: a mask index a row, the masks, then
     * the penalties (the one section whose size the build learns last) */
    L = en_meta_layout_of(5, 2, 3, 2, 2, 3, 4);
    const size_t after_sampling = 15 + 2 * PE_K_CHUNK_FIELDS + 3 + 2 + 2 + 2 * 5;
    assert_int_equal(L.row_masks, after_sampling);
    assert_int_equal(L.masks, after_sampling + 2);
    assert_int_equal(L.penalties, after_sampling + 2 + 3 * 4);
    assert_int_equal(L.words, after_sampling + 2 + 3 * 4 + 2 * 5);
    assert_int_equal(sizeof(pe_k_penalty), 5 * sizeof(int32_t));
}

static void test_decodes_come_before_prefill_chunks_within_the_budgets(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_step_tokens = 8;
    cfg.max_logit_rows = 4;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 1, .max_tokens = 6});
    h_add(h, 2, &(seq_spec){.prompt_len = 1, .max_tokens = 6});
    assert_int_equal(h_build(h), 1);
    assert_int_equal(h->st->nchunks, 2);
    assert_chunk(h, 0, 1, 0, 1, 1);
    assert_chunk(h, 1, 2, 0, 1, 1);
    h_complete(h, PE_OK);
    h_add(h, 3, &(seq_spec){.prompt_len = 20, .max_tokens = 2});
    /* two decodes first, then 6 of the 20 prompt tokens: the 8-token budget */
    assert_int_equal(h_build(h), 1);
    assert_int_equal(h->st->nchunks, 3);
    assert_chunk(h, 0, 1, 1, 1, 1);
    assert_chunk(h, 1, 2, 1, 1, 1);
    assert_chunk(h, 2, 3, 0, 6, 0);
    assert_int_equal(h->st->ntok, 8);
    h_complete(h, PE_OK);
    assert_int_equal(h_build(h), 1);
    assert_chunk(h, 0, 1, 2, 1, 1);
    assert_chunk(h, 1, 2, 2, 1, 1);
    assert_chunk(h, 2, 3, 6, 6, 0);
    h_complete(h, PE_OK);
    h_run(h);
    assert_int_equal(token_events(h, 3), 2);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    h_free(h);
}

static void test_a_step_never_has_more_logit_rows_than_its_budget(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_logit_rows = 2;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 1, .max_tokens = 3});
    h_add(h, 2, &(seq_spec){.prompt_len = 1, .max_tokens = 3});
    h_add(h, 3, &(seq_spec){.prompt_len = 1, .max_tokens = 3});
    h_add(h, 4, &(seq_spec){.prompt_len = 3, .max_tokens = 3});
    /* two decodes take both rows: the third decode waits, and the 3-token prompt is
     * prefilled all but its last token (which would need a row) */
    assert_int_equal(h_build(h), 1);
    assert_int_equal(h->st->nchunks, 3);
    assert_chunk(h, 0, 1, 0, 1, 1);
    assert_chunk(h, 1, 2, 0, 1, 1);
    assert_chunk(h, 2, 4, 0, 2, 0);
    assert_int_equal(h->st->nlogits, 2);
    h_complete(h, PE_OK);
    h_run(h);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    for (int id = 1; id <= 4; id++)
        assert_final(h, id, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_long_prompt_is_prefilled_in_order_over_several_steps(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_step_tokens = 8;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 21, .max_tokens = 2});
    static const int pos0[] = {0, 8, 16}, n[] = {8, 8, 5};
    int32_t seen[21];
    for (int s = 0; s < 3; s++) {
        assert_int_equal(h_build(h), 1);
        assert_int_equal(h->st->nchunks, 1);
        assert_chunk(h, 0, 1, pos0[s], n[s], s == 2); /* a logit row only at the end */
        assert_int_equal(h->st->sample, s == 2);
        en_meta_layout L =
            en_meta_layout_of(h->st->ntok, 1, h->st->nbt, h->st->nlogits, h->st->npen, 0, 0);
        for (int k = 0; k < n[s]; k++) {
            assert_int_equal(h->st->meta[L.positions + k], pos0[s] + k);
            seen[pos0[s] + k] = h->st->meta[L.tokens + k];
        }
        h_complete(h, PE_OK);
        assert_int_equal(token_events(h, 1), s == 2);
    }
    for (int p = 0; p < 21; p++)
        assert_int_equal(seen[p], prompt_token(1, p));
    h_run(h);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_chunk_table_logit_rows_and_draws_describe_the_step(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    seq_spec x = {.prompt_len = 5,
                  .max_tokens = 3,
                  .sampling = {.temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .seed = 1234},
                  .logprobs = 2};
    seq_spec y = {.prompt_len = 3, .max_tokens = 3, .sampling = {.seed = 99}}; /* greedy */
    h_add(h, 1, &x);
    h_add(h, 2, &y);
    assert_int_equal(h_build(h), 1);
    const en_step *st = h->st;
    en_meta_layout L = en_meta_layout_of(8, 2, 3, 2, 0, 0, 0);
    assert_int_equal(st->ntok, 8);
    assert_int_equal(st->nbt, 3); /* 5 positions in 2 blocks of 4, 3 in 1 */
    assert_int_equal(st->nlogits, 2);
    const int32_t *m = st->meta;
    static const int32_t chunks[2][PE_K_CHUNK_FIELDS] = {{0, 5, 0, 0}, {5, 3, 0, 2}};
    for (int i = 0; i < 2; i++)
        for (int f = 0; f < PE_K_CHUNK_FIELDS; f++)
            assert_int_equal(m[L.chunks + (size_t)i * PE_K_CHUNK_FIELDS + f], chunks[i][f]);
    assert_int_equal(m[L.logit_rows + 0], 4); /* each chunk's last row */
    assert_int_equal(m[L.logit_rows + 1], 7);
    const en_seq *qx = st->chunks[0].seq, *qy = st->chunks[1].seq;
    assert_int_equal(m[L.block_tables + 0], qx->blocks[0]);
    assert_int_equal(m[L.block_tables + 1], qx->blocks[1]);
    assert_int_equal(m[L.block_tables + 2], qy->blocks[0]);
    for (int p = 0; p < 5; p++)
        assert_int_equal(m[L.slots + p], qx->blocks[p / 4] * 4 + p % 4);
    for (int p = 0; p < 3; p++)
        assert_int_equal(m[L.slots + 5 + p], qy->blocks[0] * 4 + p);
    const pe_k_sampling *sp = (const pe_k_sampling *)(const void *)(m + L.sampling);
    assert_true(sp[0].temperature == 0.7f && sp[0].top_k == 5 && sp[0].top_p == 0.9f);
    assert_true(sp[0].u == pe_k_uniform(1234, 0));
    assert_true(sp[1].temperature == 0.0f && sp[1].top_k == 0 && sp[1].top_p == 1.0f);
    assert_true(sp[1].u == pe_k_uniform(99, 0));
    assert_int_equal(st->max_keys, 5);
    assert_int_equal(st->topk, 2);
    assert_int_equal(st->sample, 1);
    h_complete(h, PE_OK);

    /* the decodes: one row each, at positions 5 and 3, drawing the second number */
    assert_int_equal(h_build(h), 1);
    L = en_meta_layout_of(2, 2, 3, 2, 0, 0, 0);
    m = h->st->meta; /* it may have moved */
    static const int32_t decodes[2][PE_K_CHUNK_FIELDS] = {{0, 1, 5, 0}, {1, 1, 3, 2}};
    for (int i = 0; i < 2; i++)
        for (int f = 0; f < PE_K_CHUNK_FIELDS; f++)
            assert_int_equal(m[L.chunks + (size_t)i * PE_K_CHUNK_FIELDS + f], decodes[i][f]);
    assert_int_equal(m[L.tokens + 0], default_token(1, 0));
    assert_int_equal(m[L.tokens + 1], default_token(2, 0));
    assert_int_equal(m[L.logit_rows + 0], 0);
    assert_int_equal(m[L.logit_rows + 1], 1);
    sp = (const pe_k_sampling *)(const void *)(m + L.sampling);
    assert_true(sp[0].u == pe_k_uniform(1234, 1));
    assert_true(sp[1].u == pe_k_uniform(99, 1));
    assert_int_equal(h->st->max_keys, 6);
    h_complete(h, PE_OK);
    h_run(h);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    h_free(h);
}

/* ---- 3. KV blocks ------------------------------------------------------------------------- */

static void test_blocks_are_taken_as_positions_grow_never_shared_and_all_return(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.block_tokens = 2;
    cfg.nblocks = 12;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 5, .max_tokens = 4});  /* 8 stored: 4 blocks */
    h_add(h, 2, &(seq_spec){.prompt_len = 3, .max_tokens = 3});  /* 5: 3 blocks */
    h_add(h, 3, &(seq_spec){.prompt_len = 11, .max_tokens = 2}); /* 12: 6 blocks, 5 left */
    assert_int_equal(h_build(h), 1);
    assert_int_equal(en_sched_room(&h->s), 12 - 4 - 3);
    const en_seq *a = seq_of(h, 1)->seq, *b = seq_of(h, 2)->seq;
    assert_int_equal(a->nblocks, 3); /* positions 0..4 */
    assert_int_equal(b->nblocks, 2); /* positions 0..2 */
    for (int i = 0; i < a->nblocks; i++)
        for (int j = 0; j < b->nblocks; j++)
            assert_int_not_equal(a->blocks[i], b->blocks[j]);
    assert_int_equal(h->s.kv.nfree, 12 - 5);
    h_complete(h, PE_OK);
    assert_int_equal(h_build(h), 1); /* decodes at positions 5 and 3 */
    assert_int_equal(a->nblocks, 3);
    assert_int_equal(b->nblocks, 2);
    h_complete(h, PE_OK);
    assert_int_equal(h_build(h), 1); /* positions 6 and 4: one more block each */
    assert_int_equal(a->nblocks, 4);
    assert_int_equal(b->nblocks, 3);
    h_complete(h, PE_OK);
    h_run(h);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), 12);
    assert_int_equal(h->s.kv.nfree, 12);
    for (int id = 1; id <= 3; id++)
        assert_final(h, id, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_admission_is_first_come_first_served_within_the_promise(void **state)
{
    (void)state;
    en_sched_config cfg = default_config(); /* blocks of 4 */
    cfg.nblocks = 10;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 10, .max_tokens = 10}); /* 20 positions: 5 blocks */
    h_add(h, 2, &(seq_spec){.prompt_len = 12, .max_tokens = 12}); /* 24: 6 > 5 left */
    h_add(h, 3, &(seq_spec){.prompt_len = 2, .max_tokens = 2});   /* 4: 1, fits, must wait */
    assert_int_equal(h_build(h), 1);
    assert_true(seq_of(h, 1)->running);
    assert_false(seq_of(h, 2)->running);
    assert_false(seq_of(h, 3)->running);
    assert_int_equal(en_sched_room(&h->s), 5);
    /* while 1 runs, neither 2 nor the small 3 behind it gets a chunk */
    while (!final_event(h, 1)) {
        for (int i = 0; i < h->st->nchunks; i++)
            assert_int_equal(h->st->chunks[i].seq->id, 1);
        h_complete(h, PE_OK);
        if (!final_event(h, 1))
            assert_int_equal(h_build(h), 1);
    }
    assert_int_equal(en_sched_room(&h->s), 10);
    assert_int_equal(h_build(h), 1);
    assert_true(seq_of(h, 2)->running && seq_of(h, 3)->running);
    assert_int_equal(en_sched_room(&h->s), 10 - 6 - 1);
    h_complete(h, PE_OK);
    /* the promise is capped by the context: 10 + 1000 tokens store at most 63 positions,
     * 16 blocks of 4 */
    cfg.nblocks = 16;
    harness *g = h_new(&cfg);
    h_add(g, 1, &(seq_spec){.prompt_len = 10, .max_tokens = 1000});
    assert_int_equal(h_build(g), 1);
    assert_int_equal(en_sched_room(&g->s), 0);
    h_complete(g, PE_OK);
    h_run(g);
    assert_final(g, 1, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(token_events(g, 1), 64 - 10);
    h_free(g);
    h_run(h);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    h_free(h);
}

static void test_a_promise_is_the_stored_positions_capped_by_the_context_in_blocks(void **state)
{
    (void)state;
    en_sched_config cfg = default_config(); /* blocks of 4, context 64 */
    static const struct {
        int prompt, max_tokens, score, blocks;
    } cases[] = {
        {1, 1, 0, 1},   {3, 1, 0, 1},     {4, 1, 0, 1},   {4, 2, 0, 2}, {10, 10, 0, 5},
        {10, 11, 0, 5}, {10, 12, 0, 6},   {60, 4, 0, 16}, {60, 100, 0, 16}, {63, 1, 0, 16},
        {5, 0, 1, 2},   {64, 0, 1, 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        en_seq q;
        memset(&q, 0, sizeof q);
        q.ntok = q.prompt_len = cases[i].prompt;
        q.max_tokens = cases[i].max_tokens;
        q.score = cases[i].score;
        assert_int_equal(en_sched_blocks_needed(&cfg, &q), cases[i].blocks);
    }
}

/* The waiting queue is a ring: cancels in its middle after it wrapped, and its growth while
 * wrapped, keep the order sequences are admitted in. */
static void test_cancels_in_a_wrapped_waiting_queue_keep_its_order(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_seqs = 1;
    harness *h = h_new(&cfg);
    int id = 0, order[64], norder = 0;
    while (id < 16) /* one token each: each runs in one step */
        h_add(h, ++id, &(seq_spec){.prompt_len = 2, .max_tokens = 1});
    for (int k = 0; k < 10; k++) {
        assert_int_equal(h_build(h), 1);
        order[norder++] = (int)h->st->chunks[0].seq->id;
        h_complete(h, PE_OK);
    }
    while (id < 26) /* 6 waiting + 10: past the end of the ring */
        h_add(h, ++id, &(seq_spec){.prompt_len = 2, .max_tokens = 1});
    h_cancel(h, 13);
    h_cancel(h, 18);
    h_cancel(h, 25);
    while (id < 40) /* the ring grows while wrapped */
        h_add(h, ++id, &(seq_spec){.prompt_len = 2, .max_tokens = 1});
    h_cancel(h, 39);
    while (h_build(h)) {
        order[norder++] = (int)h->st->chunks[0].seq->id;
        h_complete(h, PE_OK);
    }
    assert_int_equal(norder, 40 - 4);
    for (int k = 0, want = 1; k < norder; k++, want++) {
        while (want == 13 || want == 18 || want == 25 || want == 39)
            want++;
        assert_int_equal(order[k], want);
    }
    assert_final(h, 13, PE_FINISH_CANCELLED, PE_OK);
    assert_final(h, 18, PE_FINISH_CANCELLED, PE_OK);
    assert_final(h, 25, PE_FINISH_CANCELLED, PE_OK);
    assert_final(h, 39, PE_FINISH_CANCELLED, PE_OK);
    h_free(h);
}

/* ---- 4. a pool that is full --------------------------------------------------------------- */

static void test_kv_wait_sequence_waits_and_runs_after_others_end(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.nblocks = 8;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 10, .max_tokens = 10}); /* 5 blocks */
    h_add(h, 2, &(seq_spec){.prompt_len = 8, .max_tokens = 8});   /* 4 > 3 left */
    assert_int_equal(en_sched_sequences(&h->s), 2);
    assert_null(final_event(h, 2)); /* waits, not refused */
    int steps = 0;
    while (!final_event(h, 1)) {
        assert_int_equal(h_build(h), 1);
        assert_false(seq_of(h, 2)->running);
        h_complete(h, PE_OK);
        steps++;
    }
    assert_int_equal(steps, 10); /* its prefill, then a decode for each later token */
    assert_int_equal(h_build(h), 1);
    assert_chunk(h, 0, 2, 0, 8, 1);
    h_complete(h, PE_OK);
    h_run(h);
    assert_final(h, 2, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(token_events(h, 2), 8);
    h_free(h);
}

static void test_kv_refuse_ends_at_once_with_eagain_and_spares_the_others(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.nblocks = 8;
    cfg.kv_full = PE_KV_REFUSE;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 10, .max_tokens = 10}); /* 5 blocks */
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    const int held = seq_of(h, 1)->seq->nblocks;
    h_add(h, 2, &(seq_spec){.prompt_len = 8, .max_tokens = 8}); /* 4 > 3: refused */
    assert_final(h, 2, PE_FINISH_ERROR, PE_EAGAIN);
    assert_int_equal(token_events(h, 2), 0);
    h_add(h, 3, &(seq_spec){.prompt_len = 4, .max_tokens = 4}); /* 2 <= 3: waits its turn */
    assert_null(final_event(h, 3));
    h_add(h, 4, &(seq_spec){.prompt_len = 4, .max_tokens = 4}); /* 2 > 3 - 2 (3's): refused */
    assert_final(h, 4, PE_FINISH_ERROR, PE_EAGAIN);
    h_add(h, 5, &(seq_spec){.prompt_len = 2, .max_tokens = 2}); /* 1 <= 1: waits */
    assert_null(final_event(h, 5));
    /* the running one is untouched */
    assert_int_equal(seq_of(h, 1)->seq->nblocks, held);
    assert_int_equal(en_sched_room(&h->s), 3);
    assert_int_equal(en_sched_sequences(&h->s), 3);
    h_run(h);
    assert_int_equal(token_events(h, 1), 10);
    for (int id = 1; id <= 5; id += 2)
        assert_final(h, id, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

/* ---- 5. max_seqs -------------------------------------------------------------------------- */

static void test_at_most_max_seqs_run_at_once_and_the_rest_wait(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_seqs = 2;
    harness *h = h_new(&cfg);
    for (int id = 1; id <= 5; id++)
        h_add(h, id, &(seq_spec){.prompt_len = 2 + id, .max_tokens = id});
    assert_int_equal(h_build(h), 1);
    assert_int_equal(h->s.nrunning, 2);
    assert_int_equal(h->st->nchunks, 2);
    assert_chunk(h, 0, 1, 0, 3, 1);
    assert_chunk(h, 1, 2, 0, 4, 1);
    h_complete(h, PE_OK); /* 1 ends (max_tokens 1): 3 comes in */
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    int most = 0;
    while (h_build(h)) {
        most = h->s.nrunning > most ? h->s.nrunning : most;
        assert_true(h->st->nchunks <= 2);
        h_complete(h, PE_OK);
    }
    assert_int_equal(most, 2);
    for (int id = 1; id <= 5; id++) {
        assert_final(h, id, PE_FINISH_LENGTH, PE_OK);
        assert_int_equal(token_events(h, id), id);
    }
    h_free(h);
}

/* ---- 6. cancel ---------------------------------------------------------------------------- */

static void test_cancel_of_a_waiting_sequence_ends_it_at_once(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_seqs = 1;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 3, .max_tokens = 3});
    h_add(h, 2, &(seq_spec){.prompt_len = 3, .max_tokens = 3});
    h_add(h, 3, &(seq_spec){.prompt_len = 3, .max_tokens = 3});
    assert_int_equal(h_build(h), 1);
    h_cancel(h, 2); /* waiting: in the middle of the queue */
    assert_final(h, 2, PE_FINISH_CANCELLED, PE_OK);
    assert_int_equal(seq_of(h, 2)->nact, 1);
    assert_int_equal(en_sched_sequences(&h->s), 2);
    h_complete(h, PE_OK);
    h_run(h);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    assert_final(h, 3, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_cancel_of_a_running_sequence_not_in_a_step_ends_it_at_once(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 6, .max_tokens = 5});
    h_add(h, 2, &(seq_spec){.prompt_len = 6, .max_tokens = 5}); /* 11 positions: 3 blocks */
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    assert_int_equal(token_events(h, 2), 1);
    const int room = en_sched_room(&h->s), nfree = h->s.kv.nfree;
    const int held = seq_of(h, 2)->seq->nblocks;
    h_cancel(h, 2);
    assert_final(h, 2, PE_FINISH_CANCELLED, PE_OK);
    assert_int_equal(token_events(h, 2), 1);
    assert_int_equal(en_sched_room(&h->s), room + 3);
    assert_int_equal(h->s.kv.nfree, nfree + held);
    h_run(h);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_cancel_of_a_sequence_in_a_step_ends_it_when_the_step_returns(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 6, .max_tokens = 5});
    h_add(h, 2, &(seq_spec){.prompt_len = 6, .max_tokens = 5});
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    assert_int_equal(h_build(h), 1);
    h_cancel(h, 2);
    assert_null(final_event(h, 2)); /* not yet */
    assert_int_equal(en_sched_sequences(&h->s), 2);
    h_complete(h, PE_OK);
    assert_final(h, 2, PE_FINISH_CANCELLED, PE_OK);
    assert_int_equal(token_events(h, 2), 1); /* the token sampled in that step is dropped */
    assert_int_equal(token_events(h, 1), 2);
    h_run(h);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

static void test_cancel_of_an_unknown_or_ended_id_does_nothing(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 4, .max_tokens = 1});
    h_add(h, 2, &(seq_spec){.prompt_len = 4, .max_tokens = 4});
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    const int room = en_sched_room(&h->s), nfree = h->s.kv.nfree;
    h_cancel(h, 1);   /* ended */
    h_cancel(h, 999); /* never given */
    h_cancel(h, 0);
    assert_int_equal(seq_of(h, 1)->nact, 1);
    assert_int_equal(seq_of(h, 2)->nact, 1);
    assert_int_equal(en_sched_room(&h->s), room);
    assert_int_equal(h->s.kv.nfree, nfree);
    assert_int_equal(en_sched_sequences(&h->s), 1);
    h_run(h);
    assert_final(h, 2, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

/* ---- 7. failures and end_all -------------------------------------------------------------- */

static void test_failed_step_ends_its_sequences_with_its_error_and_spares_others(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_step_tokens = 2;
    harness *h = h_new(&cfg);
    for (int id = 1; id <= 3; id++)
        h_add(h, id, &(seq_spec){.prompt_len = 1, .max_tokens = 3}); /* 1 block each */
    assert_int_equal(h_build(h), 1); /* 1 and 2 decode; 3 runs but does not fit the step */
    assert_int_equal(h->st->nchunks, 2);
    assert_true(seq_of(h, 3)->running);
    h_complete(h, PE_EDEVICE);
    assert_final(h, 1, PE_FINISH_ERROR, PE_EDEVICE);
    assert_final(h, 2, PE_FINISH_ERROR, PE_EDEVICE);
    assert_int_equal(token_events(h, 1), 0);
    assert_int_equal(en_sched_room(&h->s), 64 - 1);
    assert_int_equal(h->s.kv.nfree, 64);
    assert_null(final_event(h, 3));
    h_run(h);
    assert_final(h, 3, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(token_events(h, 3), 3);
    h_free(h);
}

/* scheduler.h: "a token event that cannot be delivered (PE_ENOMEM) ends its sequence with
 * that error"; a final event always is. */
static void test_an_undeliverable_token_event_ends_its_sequence_with_enomem(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 2, .max_tokens = 4});
    h_add(h, 2, &(seq_spec){.prompt_len = 2, .max_tokens = 4});
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK); /* both get their first token */
    assert_int_equal(token_events(h, 1), 1);
    h->refuse_tokens = 1;
    h_add(h, 3, &(seq_spec){.prompt_len = 2, .max_tokens = 1}); /* its token is its end */
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    assert_final(h, 1, PE_FINISH_ERROR, PE_ENOMEM);
    assert_final(h, 2, PE_FINISH_ERROR, PE_ENOMEM);
    assert_final(h, 3, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(token_events(h, 1), 1);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), 64);
    assert_int_equal(h->s.kv.nfree, 64);
    h_free(h);
}

/* ---- kept sequences: parking, append, release (no model: block counts by hand) ---- */

typedef struct kept_log {
    int tokens, finals;
    pe_finish last;
} kept_log;

static pe_status log_event(void *ctx, en_seq *seq, const pe_token_event *ev)
{
    (void)seq;
    kept_log *k = ctx;
    k->tokens += ev->token >= 0;
    k->finals += ev->finish != PE_FINISH_NONE;
    k->last = ev->finish;
    return PE_OK;
}

/* A sequence message: n tokens (100, 101, ...) and a generation of max_tokens. */
static en_seq *kept_msg(uint64_t id, int n, int max_tokens, int keep, int context)
{
    en_seq *q = calloc(1, sizeof *q);
    assert_non_null(q);
    int cap = n + max_tokens < context ? n + max_tokens : context;
    q->tokens = malloc((size_t)cap * sizeof *q->tokens);
    assert_non_null(q->tokens);
    for (int i = 0; i < n; i++)
        q->tokens[i] = 100 + i;
    q->hdr.kind = EN_MSG_SEQ;
    q->id = id;
    q->ntok = q->prompt_len = n;
    q->cap = cap;
    q->max_tokens = max_tokens;
    q->ignore_eos = 1;
    q->keep = keep;
    return q;
}

/* Builds a step, checks its one chunk (pos0, n), samples `token` at its logit row (if it
 * has one) and takes it back. */
static void run_chunk(en_sched *s, en_step *st, int pos0, int n, int32_t token)
{
    assert_int_equal(en_sched_build(s, st), 1);
    assert_int_equal(st->nchunks, 1);
    assert_int_equal(st->chunks[0].pos0, pos0);
    assert_int_equal(st->chunks[0].n, n);
    const int r = st->chunks[0].logit0;
    if (r >= 0) {
        st->out_tokens[r] = token;
        st->out_logit[r] = 0.0f;
        st->out_lse[r] = 0.0f;
    }
    en_sched_complete(s, st);
}

/* scheduler.h: a kept sequence parks with its blocks (its promise shrinks to them); an
 * append is prefilled from its first uncached position, the last generated token, on the
 * blocks it holds; a turn that is not kept frees them; release and end_all free a parked
 * one; an append to no parked sequence is refused. */
static void test_a_kept_sequence_parks_with_its_blocks_and_an_append_prefills_only_the_rest(
    void **state)
{
    (void)state;
    en_sched_config cfg = default_config(); /* blocks of 4, 64 of them, context 64 */
    kept_log log = {0};
    en_sched s;
    assert_int_equal(en_sched_init(&s, &cfg, log_event, &log), PE_OK);
    en_step *st = calloc(1, sizeof *st);
    assert_non_null(st);
    en_sched_add(&s, kept_msg(1, 6, 2, 1, cfg.context)); /* promise: 7 positions, 2 blocks */
    run_chunk(&s, st, 0, 6, 20);
    assert_int_equal(en_sched_room(&s), 64 - 2);
    run_chunk(&s, st, 6, 1, 21); /* its 2nd token: the end of the turn, parked */
    assert_int_equal(log.finals, 1);
    assert_int_equal(log.last, PE_FINISH_LENGTH);
    assert_int_equal(en_sched_sequences(&s), 0);
    assert_int_equal(s.kv.nfree, 64 - 2); /* positions 0..6 stay cached */
    assert_int_equal(en_sched_room(&s), 64 - 2);
    assert_int_equal(en_sched_build(&s, st), 0);
    /* turn 2: 3 more tokens; the uncached ones are the last generated token and those */
    assert_int_equal(en_sched_append(&s, kept_msg(1, 3, 2, 0, cfg.context)), PE_OK);
    run_chunk(&s, st, 7, 4, 22);
    assert_int_equal(s.kv.nfree, 64 - 3); /* 11 positions */
    assert_int_equal(en_sched_room(&s), 64 - 3); /* promise: 12 positions, 3 blocks */
    run_chunk(&s, st, 11, 1, 23);
    assert_int_equal(log.finals, 2);
    assert_int_equal(log.tokens, 4);
    assert_int_equal(s.kv.nfree, 64); /* not kept this time: all back */
    assert_int_equal(en_sched_room(&s), 64);
    assert_int_equal(en_sched_append(&s, kept_msg(1, 1, 1, 1, cfg.context)), PE_EINVAL);
    /* release, and end_all, free what is parked */
    en_sched_add(&s, kept_msg(2, 9, 1, 1, cfg.context));
    run_chunk(&s, st, 0, 9, 24);
    assert_int_equal(s.kv.nfree, 64 - 3);
    assert_int_equal(en_sched_release(&s, 2), PE_OK);
    assert_int_equal(en_sched_release(&s, 2), PE_EINVAL);
    assert_int_equal(s.kv.nfree, 64);
    assert_int_equal(en_sched_room(&s), 64);
    en_sched_add(&s, kept_msg(3, 5, 1, 1, cfg.context));
    run_chunk(&s, st, 0, 5, 25);
    assert_int_equal(s.kv.nfree, 64 - 2);
    en_sched_end_all(&s, PE_ECLOSED);
    assert_int_equal(s.kv.nfree, 64);
    assert_null(s.parked);
    en_step_free(st);
    en_sched_free(&s);
}

/* An append past the context is refused and the sequence stays parked as it was. */
static void test_an_append_past_the_context_leaves_the_sequence_parked(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    kept_log log = {0};
    en_sched s;
    assert_int_equal(en_sched_init(&s, &cfg, log_event, &log), PE_OK);
    en_step *st = calloc(1, sizeof *st);
    assert_non_null(st);
    en_sched_add(&s, kept_msg(1, 10, 1, 1, cfg.context));
    run_chunk(&s, st, 0, 10, 20);
    /* it holds 11 tokens (10 cached): 53 more reach the context of 64 */
    assert_int_equal(en_sched_append(&s, kept_msg(1, 53, 1, 1, cfg.context)), PE_EINVAL);
    assert_int_equal(s.kv.nfree, 64 - 3); /* 10 positions still held */
    assert_int_equal(en_sched_append(&s, kept_msg(1, 52, 1, 1, cfg.context)), PE_OK);
    run_chunk(&s, st, 10, 16, 21); /* chunks of the step's token budget, 16 */
    run_chunk(&s, st, 26, 16, 21);
    run_chunk(&s, st, 42, 16, 21);
    run_chunk(&s, st, 58, 5, 22);
    assert_int_equal(log.finals, 2);
    en_sched_end_all(&s, PE_ECLOSED);
    assert_int_equal(s.kv.nfree, 64);
    en_step_free(st);
    en_sched_free(&s);
}

static void test_end_all_ends_waiting_and_idle_ones_now(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_seqs = 2;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 4, .max_tokens = 4});
    h_add(h, 2, &(seq_spec){.prompt_len = 4, .max_tokens = 4});
    h_add(h, 3, &(seq_spec){.prompt_len = 4, .max_tokens = 4}); /* waits: max_seqs */
    assert_int_equal(h_build(h), 1);
    h_complete(h, PE_OK);
    h_end_all(h, PE_ECLOSED);
    for (int id = 1; id <= 3; id++)
        assert_final(h, id, PE_FINISH_ERROR, PE_ECLOSED);
    assert_int_equal(token_events(h, 1), 1);
    assert_int_equal(token_events(h, 3), 0);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), 64);
    assert_int_equal(h->s.kv.nfree, 64);
    assert_int_equal(h_build(h), 0);
    h_free(h);
}

/* The header: en_sched_end_all "ends every sequence not in a step with `why`; the ones in a
 * step end when it comes back". */
static void test_end_all_ends_sequences_in_a_step_when_it_returns(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_step_tokens = 1;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 1, .max_tokens = 4}); /* in the step */
    h_add(h, 2, &(seq_spec){.prompt_len = 1, .max_tokens = 4}); /* running, idle */
    assert_int_equal(h_build(h), 1);
    assert_int_equal(h->st->nchunks, 1);
    h_end_all(h, PE_ECLOSED);
    assert_final(h, 2, PE_FINISH_ERROR, PE_ECLOSED);
    assert_null(final_event(h, 1));
    /* the busy sequence ends with end_all's status as its step comes back (its sampled
     * token is not delivered) */
    h_complete(h, PE_OK);
    assert_final(h, 1, PE_FINISH_ERROR, PE_ECLOSED);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), 64);
    h_free(h);
}

/* ---- 7b. a prompt's chunks in flight at once (PP micro-batches) ---------------------------- */

/* Builds a step that must hold one chunk (pos0, n) of some sequence, with or without a
 * logit row. */
static void build_chunk(en_sched *s, en_step *st, int pos0, int n, int logits)
{
    assert_int_equal(en_sched_build(s, st), 1);
    assert_int_equal(st->nchunks, 1);
    assert_int_equal(st->chunks[0].pos0, pos0);
    assert_int_equal(st->chunks[0].n, n);
    assert_int_equal(st->chunks[0].nlogits, logits);
}

/* The first block-table entries and the slots of a step's chunk (one chunk) agree with
 * blocks (the sequence's table as the test saw it). */
static void expect_slots(const en_step *st, const int32_t *blocks, int B)
{
    const en_meta_layout L = en_meta_layout_of_step(st);
    const en_chunk *c = &st->chunks[0];
    for (int k = 0; k < c->n; k++) {
        int p = c->pos0 + k;
        assert_int_equal(st->meta[L.positions + (size_t)k], p);
        assert_int_equal(st->meta[L.slots + (size_t)k], blocks[p / B] * B + p % B);
    }
    for (int b = 0; b < (c->pos0 + c->n + B - 1) / B; b++)
        assert_int_equal(st->meta[L.block_tables + (size_t)b], blocks[b]);
}

/* A scheduler with 2 groups in flight and prompts in 4 chunks, and its 2 step buffers. */
static void open_streaming(en_sched *s, en_sched_config *cfg, kept_log *log, en_step *st[2])
{
    *cfg = default_config(); /* blocks of 4, budget 16 tokens */
    cfg->groups = 2;
    cfg->prefill_chunks = 4;
    assert_int_equal(en_sched_init(s, cfg, log_event, log), PE_OK);
    st[0] = calloc(1, sizeof(en_step));
    st[1] = calloc(1, sizeof(en_step));
    assert_non_null(st[0]);
    assert_non_null(st[1]);
}

/* scheduler.h: with prefill_chunks m, a prompt is cut into m chunks, and the next one goes
 * into the next step while the previous is still out (the steps in flight of PP); only the
 * last chunk has a logit row; positions, slots and block tables continue across the steps;
 * the decode waits for the prompt's last chunk to come back. */
static void test_a_prompt_streams_in_chunks_through_steps_in_flight(void **state)
{
    (void)state;
    en_sched_config cfg;
    kept_log log = {0};
    en_sched s;
    en_step *st[2];
    open_streaming(&s, &cfg, &log, st);
    en_sched_add(&s, kept_msg(1, 24, 2, 0, cfg.context)); /* chunks of ceil(24 / 4) = 6 */
    build_chunk(&s, st[0], 0, 6, 0);
    en_seq *seq = st[0]->chunks[0].seq;
    build_chunk(&s, st[1], 6, 6, 0); /* the first chunk is still out */
    assert_int_equal(seq->busy, 2);
    int32_t blocks[8];
    memcpy(blocks, seq->blocks, 3 * sizeof *blocks); /* 12 positions: 3 blocks */
    expect_slots(st[0], blocks, 4);
    expect_slots(st[1], blocks, 4);
    en_sched_complete(&s, st[0]);
    build_chunk(&s, st[0], 12, 6, 0);
    en_sched_complete(&s, st[1]);
    build_chunk(&s, st[1], 18, 6, 1); /* the last chunk: its last token's logits */
    assert_int_equal(st[1]->chunks[0].sample, 1);
    memcpy(blocks, seq->blocks, 6 * sizeof *blocks);
    expect_slots(st[1], blocks, 4);
    en_sched_complete(&s, st[0]);
    assert_int_equal(en_sched_build(&s, st[0]), 0); /* nothing until the logits are back */
    assert_int_equal(en_sched_has_work(&s), 0);
    assert_int_equal(log.tokens, 0);
    st[1]->out_tokens[0] = 20;
    en_sched_complete(&s, st[1]);
    assert_int_equal(log.tokens, 1);
    build_chunk(&s, st[0], 24, 1, 1); /* the decode */
    st[0]->out_tokens[0] = 21;
    en_sched_complete(&s, st[0]);
    assert_int_equal(log.finals, 1);
    assert_int_equal(log.last, PE_FINISH_LENGTH);
    assert_int_equal(s.kv.nfree, cfg.nblocks);
    assert_int_equal(en_sched_room(&s), cfg.nblocks);
    en_step_free(st[0]);
    en_step_free(st[1]);
    en_sched_free(&s);
}

/* A sequence whose chunks are out, cancelled or failed, sends no more chunks and gets one
 * final event, when the last of them is back; its blocks all return. */
static void test_a_streaming_prompt_cancelled_or_failed_ends_once_its_chunks_are_back(
    void **state)
{
    (void)state;
    for (int failed = 0; failed < 2; failed++) {
        en_sched_config cfg;
        kept_log log = {0};
        en_sched s;
        en_step *st[2];
        open_streaming(&s, &cfg, &log, st);
        en_sched_add(&s, kept_msg(7, 16, 4, 0, cfg.context));
        build_chunk(&s, st[0], 0, 4, 0);
        build_chunk(&s, st[1], 4, 4, 0);
        if (failed) {
            st[0]->status = PE_EDEVICE; /* the first fails, the second comes back fine */
        } else {
            en_sched_cancel(&s, 7);
            en_step *probe = calloc(1, sizeof(en_step));
            assert_non_null(probe);
            assert_int_equal(en_sched_build(&s, probe), 0); /* no more of it is sent */
            en_step_free(probe);
        }
        en_sched_complete(&s, st[0]);
        assert_int_equal(log.finals, 0); /* the second chunk is still out */
        if (failed)
            assert_int_equal(en_sched_build(&s, st[0]), 0); /* an ending one sends no more */
        st[1]->status = PE_OK;
        en_sched_complete(&s, st[1]);
        assert_int_equal(log.finals, 1);
        assert_int_equal(log.tokens, 0);
        assert_int_equal(log.last, failed ? PE_FINISH_ERROR : PE_FINISH_CANCELLED);
        assert_int_equal(s.kv.nfree, cfg.nblocks);
        assert_int_equal(en_sched_sequences(&s), 0);
        en_step_free(st[0]);
        en_step_free(st[1]);
        en_sched_free(&s);
    }
}

/* ---- 8. scoring --------------------------------------------------------------------------- */

static void test_scoring_all_positions_gives_every_position_a_row_and_never_samples(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_logit_rows = 4;
    harness *h = h_new(&cfg);
    tseq *t = h_add(h, 1, &(seq_spec){.prompt_len = 11, .score = 1, .all_positions = 1});
    static const int pos0[] = {0, 4, 8}, n[] = {4, 4, 3};
    for (int s = 0; s < 3; s++) {
        assert_int_equal(h_build(h), 1);
        assert_int_equal(h->st->nchunks, 1);
        assert_chunk(h, 0, 1, pos0[s], n[s], n[s]);
        assert_int_equal(h->st->chunks[0].sample, 0);
        assert_int_equal(h->st->sample, 0);
        for (int k = 0; k < n[s]; k++)
            assert_ptr_equal(h->st->logit_dst[k], t->score_out + (size_t)(pos0[s] + k) * VOCAB);
        h_complete(h, PE_OK);
        if (s < 2)
            assert_null(final_event(h, 1));
    }
    assert_int_equal(t->nact, 1);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(h->stray, 0);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(h_build(h), 0);
    h_free(h);
}

static void test_scoring_the_last_position_gives_one_row_beside_sampling_ones(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.max_step_tokens = 8;
    harness *h = h_new(&cfg);
    h_add(h, 1, &(seq_spec){.prompt_len = 1, .max_tokens = 5}); /* a decode beside it */
    tseq *t = h_add(h, 2, &(seq_spec){.prompt_len = 15, .score = 1});
    static const int pos0[] = {0, 7}, n[] = {7, 7};
    for (int s = 0; s < 2; s++) {
        assert_int_equal(h_build(h), 1);
        assert_chunk(h, 0, 1, 0 + s, 1, 1);
        assert_chunk(h, 1, 2, pos0[s], n[s], 0);
        h_complete(h, PE_OK);
    }
    assert_int_equal(h_build(h), 1); /* the last token is a "decode" now */
    assert_chunk(h, 0, 1, 2, 1, 1);
    assert_chunk(h, 1, 2, 14, 1, 1);
    assert_int_equal(h->st->chunks[1].sample, 0);
    assert_int_equal(h->st->sample, 1); /* the other's row */
    assert_ptr_equal(h->st->logit_dst[1], t->score_out);
    h_complete(h, PE_OK);
    assert_final(h, 2, PE_FINISH_LENGTH, PE_OK);
    assert_int_equal(t->nact, 1);
    h_run(h);
    assert_final(h, 1, PE_FINISH_LENGTH, PE_OK);
    h_free(h);
}

/* ---- 9. drafts (speculative decoding) ----------------------------------------------------- */

/* The default tokens, but token 13 is 27 where the loop would give 24. */
static int32_t loop_with_a_miss(harness *h, const tseq *t, int index)
{
    (void)h;
    return index == 13 ? 27 : default_token((int)(t - h->seqs), index);
}

/* ---- structured output: masks and drafts (grammar.h) ---- */

/* The ids row `row` of st may sample, in ascending order, into ids; how many (-1: the step
 * has no mask on that row). */
static int row_allows(const en_step *st, int row, int32_t *ids, int most)
{
    const en_meta_layout L = en_meta_layout_of_step(st);
    if (st->nmask == 0 || st->meta[L.row_masks + (size_t)row] < 0)
        return -1;
    const uint32_t *m = (const uint32_t *)(const void *)(st->meta + L.masks) +
                        (size_t)st->meta[L.row_masks + (size_t)row] * (size_t)st->mask_words;
    int n = 0;
    for (int32_t id = 0; id < st->mask_words * 32; id++)
        if (pe_k_mask_allows(m, st->mask_words, id) && n < most)
            ids[n++] = id;
    return n;
}

/* JSON mode over a hand vocabulary: 20 "{", 21 "\"a\"", 22 ":", 23 "1", 24 "}", 25 ",",
 * the rest "x" (never outside a string). The prompt is 9 20 21 22 23 20 7 9 (prompt lookup's
 * source). The prefill row may sample only "{"; given 20, the decode drafts 21 22 23 20
 * (what followed the earlier 9 20) and keeps 21 22 23: "{" cannot follow the value 1. Its
 * rows are masked after the drafts before each: {"a", "}"}, {":"}, {"{", "\"a\"", "1"}
 * and {"1", "}", ","} (1 may grow into 11). The device samples 21 22 23 24: three drafts
 * hit, and "}" closes the object: the sequence ends there with PE_FINISH_GRAMMAR. */
static void test_a_grammar_masks_each_row_and_cuts_drafts_at_the_first_it_refuses(void **state)
{
    (void)state;
    enum { NT = 40 };
    const char *tok[NT];
    size_t len[NT];
    static const char *const named[] = {"{", "\"a\"", ":", "1", "}", ","};
    for (int id = 0; id < NT; id++) {
        tok[id] = id >= 20 && id < 26 ? named[id - 20] : "x";
        len[id] = strlen(tok[id]);
    }
    pe_grammar *g = NULL;
    assert_int_equal(tx_grammar_json_from_tokens(tok, len, NULL, NT, &g), PE_OK);
    en_sched_config cfg = default_config();
    cfg.vocab = NT;
    cfg.spec_tokens = 4;
    cfg.spec_ngram_min = 1;
    cfg.spec_ngram_max = 2;
    kept_log log = {0};
    en_sched s;
    assert_int_equal(en_sched_init(&s, &cfg, log_event, &log), PE_OK);
    en_step *st = calloc(1, sizeof *st);
    assert_non_null(st);
    en_seq *q = kept_msg(1, 8, 10, 0, cfg.context);
    static const int32_t prompt[8] = {9, 20, 21, 22, 23, 20, 7, 9};
    memcpy(q->tokens, prompt, sizeof prompt);
    q->grammar = g;
    tx_grammar_start(g, &q->gstate);
    en_sched_add(&s, q);

    int32_t ids[NT];
    assert_int_equal(en_sched_build(&s, st), 1); /* the prompt, its last row sampling */
    assert_int_equal(st->nmask, 1);
    assert_int_equal(st->mask_words, 2);
    assert_int_equal(row_allows(st, 0, ids, NT), 1);
    assert_int_equal(ids[0], 20);
    st->out_tokens[0] = 20;
    st->out_logit[0] = st->out_lse[0] = 0.0f;
    en_sched_complete(&s, st);

    assert_int_equal(en_sched_build(&s, st), 1); /* the decode of 20 with 3 drafts */
    assert_int_equal(st->chunks[0].draft, 3);
    assert_int_equal(st->nlogits, 4);
    assert_int_equal(st->nmask, 4);
    static const int32_t want[4][3] = {{21, 24}, {22}, {20, 21, 23}, {23, 24, 25}};
    static const int nwant[4] = {2, 1, 3, 3};
    for (int r = 0; r < 4; r++) {
        assert_int_equal(row_allows(st, r, ids, NT), nwant[r]);
        assert_memory_equal(ids, want[r], (size_t)nwant[r] * sizeof *ids);
    }
    static const int32_t sampled[4] = {21, 22, 23, 24};
    for (int r = 0; r < 4; r++) {
        st->out_tokens[r] = sampled[r];
        st->out_logit[r] = st->out_lse[r] = 0.0f;
    }
    en_sched_complete(&s, st);
    assert_int_equal(s.spec_drafted, 3);
    assert_int_equal(s.spec_accepted, 3);
    assert_int_equal(log.tokens, 5); /* { "a" : 1 } */
    assert_int_equal(log.finals, 1);
    assert_int_equal(log.last, PE_FINISH_GRAMMAR);
    assert_int_equal(en_sched_sequences(&s), 0);
    en_sched_free(&s);
    en_step_free(st);
    pe_grammar_free(g);
}

/* Sequence 1 generates the default tokens, a loop of period 10 (21 .. 29, 20, 21 ...): once
 * token 21 comes again (token 10), the tokens after its last time are drafted, four a step,
 * and a step whose drafts all hit gives five tokens. The harness checks each step's chunk
 * (its drafts, rows and draws) and every event against its own model; here the counts are
 * the hand-computed ones. */
static void test_drafts_are_checked_in_one_step_and_taken_up_to_the_first_miss(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.spec_tokens = 4;
    cfg.spec_ngram_min = 1;
    cfg.spec_ngram_max = 2;
    seq_spec sp = {.prompt_len = 3, .max_tokens = 30};

    /* a prefill step (token 0), 10 one-token decodes (tokens 1..10), then 5 + 5 + 5 tokens
     * and, with 3 drafts left before max_tokens, 4: 15 steps, 15 of 15 drafts accepted */
    harness *h = h_new(&cfg);
    h_add(h, 1, &sp);
    assert_int_equal(h_run(h), 15);
    int32_t want[30];
    for (int k = 0; k < 30; k++)
        want[k] = default_token(1, k);
    assert_tokens(h, 1, want, 30, PE_FINISH_LENGTH);
    assert_int_equal(h->s.spec_drafted, 15);
    assert_int_equal(h->s.spec_accepted, 15);
    h_free(h);

    /* token 13 misses: step 12 drafts 22 23 24 25 and gives 22 23 27 (2 accepted); step 13
     * drafts what followed the earlier 27 (28 29 20 21) and gives 25 (none); step 14 drafts
     * what followed 25 (26 27 28 29), all hit, and gives 26 .. 29, 20: tokens 15..19 */
    sp.max_tokens = 20;
    h = h_new(&cfg);
    h->pick = loop_with_a_miss;
    h_add(h, 1, &sp);
    assert_int_equal(h_run(h), 14);
    for (int k = 0; k < 20; k++)
        want[k] = k == 13 ? 27 : default_token(1, k);
    assert_tokens(h, 1, want, 20, PE_FINISH_LENGTH);
    assert_int_equal(h->s.spec_drafted, 12);
    assert_int_equal(h->s.spec_accepted, 6);
    h_free(h);

    /* a stop token among the hits ends the sequence there, and nothing after it is taken:
     * the prompt is 131 132 133 and 133 a stop token; token 0, 131, brings drafts 132 133
     * 131 132, and the device samples 132 and 133 */
    sp = (seq_spec){.prompt_len = 3, .max_tokens = 30, .stop = {133}, .nstop = 1,
                    .script = {131, 132, 133}, .nscript = 3};
    assert_int_equal(prompt_token(1, 2), 133);
    h = h_new(&cfg);
    h_add(h, 1, &sp);
    assert_int_equal(h_run(h), 2);
    assert_tokens(h, 1, sp.script, 3, PE_FINISH_STOP);
    assert_int_equal(h->s.spec_drafted, 4);
    assert_int_equal(h->s.spec_accepted, 2);
    h_free(h);

    /* spec_max_seqs 1: no drafts while sequence 2 (12 tokens) runs beside sequence 1: a
     * prefill step and 11 one-token decodes for both; then sequence 1's loop goes on with
     * drafts, 5 + 5 + 5 tokens and 3 (2 drafts left before max_tokens) */
    cfg.spec_max_seqs = 1;
    sp = (seq_spec){.prompt_len = 3, .max_tokens = 30};
    seq_spec sp2 = {.prompt_len = 3, .max_tokens = 12};
    h = h_new(&cfg);
    h_add(h, 1, &sp);
    h_add(h, 2, &sp2);
    assert_int_equal(h_run(h), 1 + 11 + 4);
    for (int k = 0; k < 30; k++)
        want[k] = default_token(1, k);
    assert_tokens(h, 1, want, 30, PE_FINISH_LENGTH);
    assert_int_equal(h->s.spec_drafted, 4 + 4 + 4 + 2);
    assert_int_equal(h->s.spec_accepted, 4 + 4 + 4 + 2);
    h_free(h);
}

/* Row `row`'s penalty entries in the step st has built: sub (frequency x count + presence)
 * of each id, into sub_of (VOCAB_IDS, 0 for none); how many, and in *bans how many of them
 * ban their id (add -inf: min_tokens). */
enum { VOCAB_IDS = 1024 };
static int row_penalties(const en_step *st, int row, float *sub_of, int *bans)
{
    const en_meta_layout L = en_meta_layout_of_step(st);
    const pe_k_penalty *e = (const pe_k_penalty *)(const void *)(st->meta + L.penalties);
    memset(sub_of, 0, VOCAB_IDS * sizeof *sub_of);
    int n = 0;
    *bans = 0;
    for (int i = 0; i < st->npen; i++)
        if (e[i].row == row) {
            assert_true(e[i].id >= 0 && e[i].id < VOCAB_IDS && e[i].rep == 1.0f);
            sub_of[e[i].id] = e[i].sub;
            *bans += e[i].add == -INFINITY;
            n++;
        }
    return n;
}

/* A frequency penalty of 1 and min_tokens 3 with drafts: row k of a decode counts the
 * drafts before it as generated, and bans the eos and stop ids while token 1 + k is short
 * of min_tokens; once the step is back the counts are the sequence's own tokens, not the
 * drafts. The prompt is 131 132 133; token 0, 131, brings the drafts 132 133 131 132; the
 * device samples 132 133 131 and then 77, where the draft was 132. */
static void test_each_row_of_a_decode_with_drafts_counts_the_drafts_before_it(void **state)
{
    (void)state;
    en_sched_config cfg = default_config();
    cfg.spec_tokens = 4;
    cfg.spec_ngram_min = 1;
    cfg.spec_ngram_max = 2;
    seq_spec sp = {.prompt_len = 3, .max_tokens = 12, .script = {131, 132, 133, 131, 77},
                   .nscript = 5, .stop = {STOP}, .nstop = 1};
    sp.sampling.frequency_penalty = 1.0f;
    harness *h = h_new(&cfg);
    h_add(h, 1, &sp)->seq->min_tokens = 3;
    assert_int_equal(h_build(h), 1); /* the prompt: token 0 */
    h_complete(h, PE_OK);
    assert_int_equal(h_build(h), 1); /* 131 and its 4 drafts */
    assert_int_equal(h->st->chunks[0].draft, 4);
    static float sub_of[VOCAB_IDS];
    /* generated before each row: 131; + 132; + 133; + 131; + 132 */
    static const int32_t counted[5][3] = {{1, 0, 0}, {1, 1, 0}, {1, 1, 1}, {2, 1, 1}, {2, 2, 1}};
    for (int k = 0; k < 5; k++) {
        int bans;
        const int n = row_penalties(h->st, k, sub_of, &bans);
        assert_int_equal(bans, 1 + k < 3 ? 3 : 0); /* EOS, EOS2 and STOP */
        assert_int_equal(n, bans + (counted[k][0] > 0) + (counted[k][1] > 0) +
                                (counted[k][2] > 0));
        for (int j = 0; j < 3; j++)
            if (sub_of[131 + j] != (float)counted[k][j])
                fail_msg("row %d: token %d penalized %g, counted %d times", k, 131 + j,
                         (double)sub_of[131 + j], counted[k][j]);
    }
    h_complete(h, PE_OK); /* 132 133 131 taken, then 77 */
    assert_int_equal(h->s.spec_accepted, 3);
    assert_int_equal(h_build(h), 1); /* 77's decode: generated 131 132 133 131 77 */
    assert_int_equal(h->st->chunks[0].draft, 0);
    int bans;
    assert_int_equal(row_penalties(h->st, 0, sub_of, &bans), 4);
    assert_int_equal(bans, 0);
    assert_true(sub_of[131] == 2.0f && sub_of[132] == 1.0f && sub_of[133] == 1.0f &&
                sub_of[77] == 1.0f);
    h_complete(h, PE_OK);
    h_free(h);
}

/* ---- 10. a random run --------------------------------------------------------------------- */

static int32_t random_token(harness *h, const tseq *t, int index)
{
    (void)t;
    (void)index;
    int r = rnd_in(&h->rng, 0, 99);
    return r < 6 ? EOS : r < 8 ? EOS2 : r < 12 ? STOP : r < 14 ? STOP2 : 20 + r % 10;
}

static seq_spec random_spec(harness *h)
{
    uint64_t *g = &h->rng;
    const en_sched_config *cfg = &h->cfg;
    /* like pe_seq_submit: every sequence fits the pool (else it would wait forever) */
    int maxpos = cfg->nblocks * cfg->block_tokens;
    if (maxpos > cfg->context)
        maxpos = cfg->context;
    seq_spec s = {.score = rnd_in(g, 0, 9) == 0};
    if (s.score) {
        s.prompt_len = rnd_in(g, 1, maxpos);
        s.all_positions = rnd_in(g, 0, 1);
        return s;
    }
    s.prompt_len = rnd_in(g, 1, maxpos - 1);
    s.max_tokens = rnd_in(g, 1, 24);
    if (s.prompt_len + s.max_tokens > maxpos && maxpos < cfg->context)
        s.max_tokens = maxpos - s.prompt_len;
    s.ignore_eos = rnd_in(g, 0, 4) == 0;
    s.logprobs = rnd_in(g, 0, 3);
    s.nstop = rnd_in(g, 0, 2);
    s.stop[0] = STOP, s.stop[1] = STOP2;
    s.sampling = (pe_sampling){.temperature = (float)rnd_in(g, 0, 3) * 0.25f,
                               .top_k = rnd_in(g, 0, 4),
                               .top_p = (float)rnd_in(g, 1, 4) * 0.25f, .seed = rnd(g)};
    return s;
}

/* One seeded random run; adds its drafts and the accepted ones to the counts. */
static void random_run(uint64_t seed, int nseqs, long *drafted, long *accepted)
{
    uint64_t g = seed;
    static const int block_tokens[] = {1, 2, 3, 4, 16};
    en_sched_config cfg = default_config();
    cfg.block_tokens = block_tokens[rnd_in(&g, 0, 4)];
    cfg.context = rnd_in(&g, 8, 96);
    cfg.nblocks = rnd_in(&g, 2, 48);
    cfg.max_seqs = rnd_in(&g, 1, 8);
    cfg.max_step_tokens = rnd_in(&g, 1, 40);
    cfg.max_logit_rows = rnd_in(&g, 1, 9);
    cfg.kv_full = rnd_in(&g, 0, 1) ? PE_KV_REFUSE : PE_KV_WAIT;
    cfg.neos = rnd_in(&g, 1, 2);
    cfg.spec_tokens = rnd_in(&g, 0, 1) ? rnd_in(&g, 1, 5) : 0; /* drafts (random_token: a
                                                               * tenth of them hit) */
    cfg.spec_ngram_min = rnd_in(&g, 1, 2);
    cfg.spec_ngram_max = rnd_in(&g, cfg.spec_ngram_min, 3);
    cfg.spec_max_seqs = rnd_in(&g, 0, 3); /* 0: any number */
    harness *h = h_new(&cfg);
    h->rng = rnd(&g);
    h->pick = random_token;
    const int stop_at = rnd_in(&g, 0, 3) == 0 ? rnd_in(&g, 0, nseqs) : -1; /* then end_all */
    int added = 0, idle = 0;
    for (int iter = 0; added < nseqs || live(h); iter++) {
        if (iter > 200000)
            fail_msg("seed %llu: no progress", (unsigned long long)seed);
        if (added == stop_at) {
            h_end_all(h, PE_ECLOSED);
            assert_int_equal(live(h), 0);
            break;
        }
        const int r = rnd_in(&h->rng, 0, 99);
        if (added < nseqs && r < 35) {
            seq_spec s = random_spec(h);
            h_add(h, ++added, &s);
        } else if (r < 42 && added) {
            h_cancel(h, rnd_in(&h->rng, 1, added + 2));
        } else if (h_build(h)) {
            idle = 0;
            while (rnd_in(&h->rng, 0, 3) == 0) { /* things happen while the step is out */
                if (added < nseqs && rnd_in(&h->rng, 0, 1)) {
                    seq_spec s = random_spec(h);
                    h_add(h, ++added, &s);
                } else if (added) {
                    h_cancel(h, rnd_in(&h->rng, 1, added + 2));
                }
            }
            h_complete(h, rnd_in(&h->rng, 0, 19) == 0 ? PE_EDEVICE : PE_OK);
        } else if (added == nseqs && ++idle > 2) {
            fail_msg("seed %llu: %d sequences left and no step to build",
                     (unsigned long long)seed, live(h));
        }
    }
    check_events(h);
    for (int o = 0; o < h->norder; o++)
        assert_true(h->seqs[h->order[o]].ended);
    assert_int_equal(en_sched_sequences(&h->s), 0);
    assert_int_equal(en_sched_room(&h->s), cfg.nblocks);
    assert_int_equal(h->s.kv.nfree, cfg.nblocks);
    *drafted += h->s.spec_drafted;
    *accepted += h->s.spec_accepted;
    h_free(h);
}

static void test_random_runs_keep_every_invariant(void **state)
{
    (void)state;
    const int runs = (int)tu_size(200, 12), nseqs = (int)tu_size(40, 16);
    long drafted = 0, accepted = 0;
    for (int i = 0; i < runs; i++)
        random_run(0x5eed0000u + (uint64_t)i, nseqs, &drafted, &accepted);
    /* the runs with drafts took some and missed some */
    if (!(accepted > 0 && accepted < drafted))
        fail_msg("%ld of %ld drafts accepted", accepted, drafted);
    print_message("drafts: %ld of %ld accepted\n", accepted, drafted);
}

int main(void)
{
#define TEST(f) cmocka_unit_test_teardown(f, release_open_harnesses)
    const struct CMUnitTest tests[] = {
        TEST(test_each_sequence_ends_once_after_its_tokens_with_its_reason),
        TEST(test_meta_sections_follow_each_other_in_the_documented_order),
        TEST(test_decodes_come_before_prefill_chunks_within_the_budgets),
        TEST(test_a_step_never_has_more_logit_rows_than_its_budget),
        TEST(test_long_prompt_is_prefilled_in_order_over_several_steps),
        TEST(test_chunk_table_logit_rows_and_draws_describe_the_step),
        TEST(test_blocks_are_taken_as_positions_grow_never_shared_and_all_return),
        TEST(test_admission_is_first_come_first_served_within_the_promise),
        TEST(test_a_promise_is_the_stored_positions_capped_by_the_context_in_blocks),
        TEST(test_cancels_in_a_wrapped_waiting_queue_keep_its_order),
        TEST(test_kv_wait_sequence_waits_and_runs_after_others_end),
        TEST(test_kv_refuse_ends_at_once_with_eagain_and_spares_the_others),
        TEST(test_at_most_max_seqs_run_at_once_and_the_rest_wait),
        TEST(test_cancel_of_a_waiting_sequence_ends_it_at_once),
        TEST(test_cancel_of_a_running_sequence_not_in_a_step_ends_it_at_once),
        TEST(test_cancel_of_a_sequence_in_a_step_ends_it_when_the_step_returns),
        TEST(test_cancel_of_an_unknown_or_ended_id_does_nothing),
        TEST(test_failed_step_ends_its_sequences_with_its_error_and_spares_others),
        TEST(test_an_undeliverable_token_event_ends_its_sequence_with_enomem),
        TEST(test_a_kept_sequence_parks_with_its_blocks_and_an_append_prefills_only_the_rest),
        TEST(test_an_append_past_the_context_leaves_the_sequence_parked),
        TEST(test_end_all_ends_waiting_and_idle_ones_now),
        TEST(test_end_all_ends_sequences_in_a_step_when_it_returns),
        TEST(test_a_prompt_streams_in_chunks_through_steps_in_flight),
        TEST(test_a_streaming_prompt_cancelled_or_failed_ends_once_its_chunks_are_back),
        TEST(test_scoring_all_positions_gives_every_position_a_row_and_never_samples),
        TEST(test_scoring_the_last_position_gives_one_row_beside_sampling_ones),
        TEST(test_drafts_are_checked_in_one_step_and_taken_up_to_the_first_miss),
        TEST(test_a_grammar_masks_each_row_and_cuts_drafts_at_the_first_it_refuses),
        TEST(test_each_row_of_a_decode_with_drafts_counts_the_drafts_before_it),
        TEST(test_random_runs_keep_every_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
