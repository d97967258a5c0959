/* test_kv_preempt.c: PE_KV_PREEMPT, the scheduler's optimistic admission, preemption and
 * prefix caching (engine/scheduler.h, engine/kv_blocks.h), driven by hand.
 *
 * The test simulates the device's KV memory: every slot a step writes holds the (token,
 * position) of the row written there, and before a chunk runs, every position it attends to
 * (its block table below pos0) must hold exactly the sequence's own token at that position.
 * That is what paged attention with shared and recomputed blocks must keep, and it is
 * checked against the test's own list of each sequence's tokens (prompt, then the tokens the
 * "device" sampled: a fixed function of the sequence and the index), never against the
 * scheduler's helpers. Besides: block reference counts equal the tables holding each block,
 * held + free + cached blocks make the pool, each sequence ends once with exactly its
 * tokens, and each draw is the one of its index (a recomputed sequence draws as it would
 * have). With drafts (cfg.spec_tokens) on tokens that loop, a rejected draft's slot is
 * written with the draft and must never be read before its position is written again.
 * The pool's own rules (lookup by chain, LRU eviction from a chain's tail, stale children
 * after an eviction) are checked by hand. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kv_blocks.h"
#include "engine/scheduler.h"
#include "kernels/attention.h"

enum { MAX_SEQ = 256, MAX_TOK = 512, EOS = 2 };

/* ---- the pool, by hand ---------------------------------------------------------------------- */

static void test_pool_finds_a_chain_evicts_its_tail_first_and_forgets_stale_children(void **state)
{
    (void)state;
    en_kv_pool p;
    assert_int_equal(en_kv_init(&p, 4, 2, 1), PE_OK);
    const int32_t t0[2] = {7, 8}, t1[2] = {9, 10}, t2[2] = {11, 12};
    int32_t a = en_kv_take(&p), b = en_kv_take(&p);
    assert_int_equal(a, 0); /* block 0 first */
    assert_int_equal(b, 1);
    assert_int_equal(en_kv_register(&p, a, -1, t0), 1);
    assert_int_equal(en_kv_register(&p, b, a, t1), 1);
    assert_int_equal(en_kv_lookup(&p, -1, t0), a);
    assert_int_equal(en_kv_lookup(&p, a, t1), b);
    assert_int_equal(en_kv_lookup(&p, -1, t1), -1); /* the same tokens elsewhere: another key */
    assert_int_equal(en_kv_lookup(&p, b, t1), -1);
    /* an equal block is not registered twice */
    int32_t c = en_kv_take(&p);
    assert_int_equal(en_kv_register(&p, c, -1, t0), 0);
    en_kv_put(&p, c); /* unregistered: free at once */
    assert_int_equal(p.nfree, 2);
    /* released tail first (as return_blocks does): cached, still found, held again */
    en_kv_put(&p, b);
    en_kv_put(&p, a);
    assert_int_equal(en_kv_held(&p), 0);
    assert_int_equal(en_kv_available(&p), 4);
    assert_int_equal(p.ncached, 2);
    assert_int_equal(en_kv_lookup(&p, -1, t0), a);
    en_kv_hold(&p, a);
    assert_int_equal(p.ref[a], 1);
    assert_int_equal(p.ncached, 1);
    en_kv_put(&p, a); /* now a is the most recent, b the least */
    /* the free blocks go first, then the cached ones, least recently released first */
    int32_t f1 = en_kv_take(&p), f2 = en_kv_take(&p);
    assert_true(f1 >= 2 && f2 >= 2);
    assert_int_equal(en_kv_take(&p), b); /* evicted: gone from the cache */
    assert_int_equal(en_kv_lookup(&p, a, t1), -1);
    assert_int_equal(en_kv_lookup(&p, -1, t0), a);
    /* b registered again under a, then a evicted and handed out anew: b's key names the old
     * a, so b is no longer found under the new a, even with the same tokens */
    assert_int_equal(en_kv_register(&p, b, a, t1), 1);
    en_kv_put(&p, b);
    assert_int_equal(en_kv_take(&p), a); /* a released before b: least recent */
    assert_int_equal(en_kv_register(&p, a, -1, t2), 1);
    assert_int_equal(en_kv_lookup(&p, a, t1), -1);
    assert_int_equal(en_kv_lookup(&p, -1, t2), a);
    assert_int_equal(en_kv_take(&p), b); /* the stale one goes when a block is wanted */
    assert_int_equal(en_kv_take(&p), -1); /* all held */
    assert_int_equal(en_kv_held(&p), 4);
    en_kv_free(&p);
}

/* ---- a driver with a simulated device -------------------------------------------------------- */

typedef struct model_seq {
    int used, ended, finals;
    int prompt_len, max_tokens;
    int32_t tokens[MAX_TOK]; /* the prompt, then the tokens received */
    int ntok, received;
    int turn_base;           /* tokens received before this turn (a kept sequence's append) */
    int preempted;           /* times seen preempted */
    pe_finish finish;
    uint64_t seed;
    en_seq *seq;             /* the scheduler's, until its final event */
} model_seq;

typedef struct driver {
    en_sched s;
    en_sched_config cfg;
    en_step *steps[4];
    int ngroups;
    model_seq seqs[MAX_SEQ];
    int32_t *kv_token, *kv_pos; /* (nblocks * block_tokens) what each slot holds; -1 none */
    int bad_events;
    int steps_run;
    int period;                 /* of the tokens the device samples (drafts hit in a loop) */
    int twist;                  /* 1: every 8th token leaves the loop (drafts miss) */
} driver;

/* The token the device samples for sequence id at index k (never an eos): a loop of
 * d->period tokens, left every 8th token with d->twist. */
static int32_t sampled(const driver *d, int id, int k)
{
    if (d->twist && k % 8 == 7)
        return 80 + k % 3;
    return 20 + (id * 7 + k * 3) % d->period;
}

static pe_status on_event(void *ctx, en_seq *seq, const pe_token_event *ev)
{
    driver *d = ctx;
    model_seq *m = &d->seqs[seq->id];
    if (!m->used || m->ended || m->seq != seq) {
        d->bad_events++;
        return PE_OK;
    }
    if (ev->token >= 0) {
        if (ev->token != sampled(d, (int)seq->id, m->received) ||
            ev->index != m->received - m->turn_base)
            d->bad_events++;
        m->tokens[m->ntok++] = ev->token;
        m->received++;
    }
    if (ev->finish != PE_FINISH_NONE) {
        m->finals++;
        m->finish = ev->finish;
        if (!seq->keep || ev->finish == PE_FINISH_ERROR)
            m->ended = 1;
    }
    return PE_OK;
}

static driver *d_new(const en_sched_config *cfg)
{
    driver *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->cfg = *cfg;
    d->period = 50;
    d->ngroups = cfg->groups > 1 ? cfg->groups : 1;
    for (int i = 0; i < d->ngroups; i++) {
        d->steps[i] = calloc(1, sizeof *d->steps[i]);
        assert_non_null(d->steps[i]);
    }
    const size_t slots = (size_t)cfg->nblocks * (size_t)cfg->block_tokens;
    d->kv_token = malloc(slots * sizeof *d->kv_token);
    d->kv_pos = malloc(slots * sizeof *d->kv_pos);
    assert_non_null(d->kv_token);
    assert_non_null(d->kv_pos);
    for (size_t i = 0; i < slots; i++)
        d->kv_token[i] = d->kv_pos[i] = -1;
    assert_int_equal(en_sched_init(&d->s, cfg, on_event, d), PE_OK);
    return d;
}

static void d_free(driver *d)
{
    en_sched_end_all(&d->s, PE_ECLOSED);
    en_sched_free(&d->s);
    for (int i = 0; i < d->ngroups; i++)
        en_step_free(d->steps[i]);
    free(d->kv_token);
    free(d->kv_pos);
    free(d);
}

static en_sched_config preempt_config(int nblocks)
{
    en_sched_config c;
    memset(&c, 0, sizeof c);
    c.block_tokens = 4;
    c.nblocks = nblocks;
    c.max_seqs = 16;
    c.max_step_tokens = 32;
    c.max_logit_rows = 16;
    c.context = 128;
    c.vocab = 64;
    c.kv_full = PE_KV_PREEMPT;
    c.prefix_caching = 1;
    c.eos[0] = EOS;
    c.neos = 1;
    return c;
}

/* Adds sequence id: prompt (n tokens), max_tokens, kept or not. */
static void d_add(driver *d, int id, const int32_t *prompt, int n, int max_tokens, int keep)
{
    model_seq *m = &d->seqs[id];
    assert_false(m->used);
    memset(m, 0, sizeof *m);
    m->used = 1;
    m->prompt_len = n;
    m->max_tokens = max_tokens;
    m->seed = 1000u + (uint64_t)id;
    memcpy(m->tokens, prompt, (size_t)n * sizeof *prompt);
    m->ntok = n;
    en_seq *q = calloc(1, sizeof *q);
    assert_non_null(q);
    int cap = n + max_tokens < d->cfg.context ? n + max_tokens : d->cfg.context;
    q->tokens = malloc((size_t)cap * sizeof *q->tokens);
    assert_non_null(q->tokens);
    memcpy(q->tokens, prompt, (size_t)n * sizeof *prompt);
    q->hdr.kind = EN_MSG_SEQ;
    q->id = (uint64_t)id;
    q->ntok = q->prompt_len = n;
    q->cap = cap;
    q->max_tokens = max_tokens;
    q->sampling.temperature = 1.0f;
    q->sampling.top_p = 1.0f;
    q->sampling.seed = m->seed;
    q->keep = keep;
    m->seq = q;
    en_sched_add(&d->s, q);
}

/* Pool invariants: each block's count is the tables holding it (running, waiting or parked
 * sequences), no table holds a block twice, free blocks are unregistered and unheld, cached
 * ones registered and unheld, and held + free + cached is the pool. */
static void check_pool(driver *d)
{
    const en_kv_pool *p = &d->s.kv;
    static int holders[4096];
    assert_true(p->nblocks <= 4096);
    memset(holders, 0, sizeof holders);
    for (int id = 0; id < MAX_SEQ; id++) {
        const model_seq *m = &d->seqs[id];
        if (!m->used || m->ended)
            continue;
        const en_seq *q = m->seq;
        for (int j = 0; j < q->nblocks; j++) {
            for (int k = 0; k < j; k++)
                if (q->blocks[k] == q->blocks[j])
                    fail_msg("seq %d holds block %d twice", id, q->blocks[j]);
            holders[q->blocks[j]]++;
        }
    }
    int held = 0;
    for (int b = 0; b < p->nblocks; b++) {
        if (p->ref[b] != holders[b])
            fail_msg("block %d: count %d, held by %d tables", b, p->ref[b], holders[b]);
        held += holders[b] > 0;
    }
    for (int i = 0; i < p->nfree; i++)
        if (p->ref[p->free[i]] || p->registered[p->free[i]])
            fail_msg("free block %d is held or registered", p->free[i]);
    int ncached = 0;
    for (int b = p->lru_head; b >= 0; b = p->lru_next[b], ncached++)
        if (p->ref[b] || !p->registered[b])
            fail_msg("cached block %d is held or unregistered", b);
    assert_int_equal(ncached, p->ncached);
    assert_int_equal(held + p->nfree + p->ncached, p->nblocks);
    assert_int_equal(en_sched_blocks_held(&d->s), held);
    for (int id = 0; id < MAX_SEQ; id++)
        if (d->seqs[id].used && !d->seqs[id].ended)
            d->seqs[id].preempted = d->seqs[id].seq->preemptions;
}

/* The device runs step st: every position a chunk attends to holds its sequence's token,
 * its rows are written to their slots (a draft's too), and each sampling row gets the token
 * of its index, with the draw of that index; a row after a draft that missed gets a token
 * the sequence never has (the scheduler must not take it). */
static void run_on_device(driver *d, en_step *st)
{
    const int B = d->cfg.block_tokens;
    en_meta_layout L = en_meta_layout_of_step(st);
    const int32_t *meta = st->meta;
    const pe_k_sampling *samp = (const pe_k_sampling *)(const void *)(meta + L.sampling);
    for (int i = 0; i < st->nchunks; i++) {
        const en_chunk *c = &st->chunks[i];
        const int id = (int)c->seq->id;
        model_seq *m = &d->seqs[id];
        const int32_t *ch = meta + L.chunks + (size_t)i * PE_K_CHUNK_FIELDS;
        const int32_t *bt = meta + L.block_tables + ch[PE_K_CHUNK_BT];
        for (int p = 0; p < c->pos0; p++) { /* what attention reads */
            int slot = bt[p / B] * B + p % B;
            if (d->kv_token[slot] != m->tokens[p] || d->kv_pos[slot] != p)
                fail_msg("seq %d chunk at %d reads position %d from block %d: token %d at "
                         "position %d, expected %d", id, c->pos0, p, bt[p / B],
                         d->kv_token[slot], d->kv_pos[slot], m->tokens[p]);
        }
        for (int k = 0; k < c->n; k++) { /* what the chunk writes */
            const int row = ch[PE_K_CHUNK_ROW0] + k, p = c->pos0 + k;
            assert_true(p < m->ntok + c->draft);
            if (p < m->ntok)
                assert_int_equal(meta[L.tokens + row], m->tokens[p]);
            else /* a draft: written as given, to be read only if it was the token */
                m->tokens[p] = meta[L.tokens + row];
            assert_int_equal(meta[L.positions + row], p);
            const int slot = meta[L.slots + row];
            assert_int_equal(slot, bt[p / B] * B + p % B);
            d->kv_token[slot] = m->tokens[p];
            d->kv_pos[slot] = p;
        }
        if (c->sample) {
            const int r0 = c->logit0 + c->nlogits - 1 - c->draft, row0 = ch[PE_K_CHUNK_ROW0];
            assert_int_equal(c->pos0 + c->n - c->draft, m->ntok);
            int valid = 1; /* drafts 1..k were the tokens */
            for (int k = 0; k <= c->draft; k++) {
                const int r = r0 + k;
                assert_true(samp[r].u == pe_k_uniform(m->seed, (uint64_t)(m->received -
                                                                           m->turn_base + k)));
                st->out_tokens[r] = valid ? sampled(d, id, m->received + k) : 10;
                valid &= k < c->draft && st->out_tokens[r] == meta[L.tokens + row0 + 1 + k];
                st->out_logit[r] = 0.0f;
                st->out_lse[r] = 0.0f;
            }
        }
    }
}

/* Builds and completes steps until none comes, `groups` in flight (oldest back first);
 * cancels sequence cancel_id (if > 0) after `cancel_after` steps. Returns the steps run. */
static int d_run(driver *d, int cancel_id, int cancel_after)
{
    int out = 0, head = 0, ran = 0;
    for (int guard = 0; guard < 100000; guard++) {
        if (cancel_id > 0 && ran == cancel_after)
            en_sched_cancel(&d->s, (uint64_t)cancel_id);
        int built = 0;
        if (out < d->ngroups) {
            en_step *st = d->steps[(head + out) % d->ngroups];
            built = en_sched_build(&d->s, st);
            assert_true(built == 0 || built == 1);
            if (built) {
                run_on_device(d, st);
                out++;
            }
            check_pool(d);
        }
        if (!built) {
            if (!out)
                return ran;
            en_sched_complete(&d->s, d->steps[head]);
            head = (head + 1) % d->ngroups;
            out--;
            ran++;
            check_pool(d);
            assert_int_equal(d->bad_events, 0);
        }
    }
    fail_msg("the scheduler never ran dry");
    return ran;
}

static void prompt_of(int32_t *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = 100 + (salt * 37 + i * 11) % 800;
}

/* Every sequence ended once, by its length, with exactly its max_tokens tokens. */
static void assert_all_complete(driver *d, int nseqs)
{
    for (int id = 1; id <= nseqs; id++) {
        const model_seq *m = &d->seqs[id];
        if (m->finals != 1 || m->finish != PE_FINISH_LENGTH || m->received != m->max_tokens)
            fail_msg("seq %d: %d final events, finish %d, %d of %d tokens", id, m->finals,
                     (int)m->finish, m->received, m->max_tokens);
    }
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    assert_int_equal(en_sched_sequences(&d->s), 0);
}

/* ---- preemption ------------------------------------------------------------------------------ */

/* Two sequences that fit together at the start but not at their full length: the newer one
 * is preempted when the older one needs a block, comes back first in line, and is computed
 * again from its tokens (prompt and generated); both get exactly their tokens. */
static void test_the_newest_is_preempted_and_computed_again_with_its_tokens(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(8); /* 32 positions */
    cfg.prefix_caching = 0;
    driver *d = d_new(&cfg);
    int32_t p1[8], p2[8];
    prompt_of(p1, 8, 1);
    prompt_of(p2, 8, 2);
    d_add(d, 1, p1, 8, 20, 0); /* 27 positions stored at the end: 7 blocks */
    d_add(d, 2, p2, 8, 10, 0); /* 17: 5 blocks; 4 + 4 held when both want their fifth */
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1); /* both prefill: 4 blocks */
    assert_int_equal(d->steps[0]->nchunks, 2);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    assert_int_equal(en_sched_blocks_held(&d->s), 4);
    int preempted_at = -1;
    for (int step = 0; step < 40 && d->s.preemptions == 0; step++) {
        assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
        check_pool(d);
        if (d->s.preemptions)
            preempted_at = step;
        run_on_device(d, d->steps[0]);
        en_sched_complete(&d->s, d->steps[0]);
    }
    assert_true(preempted_at >= 0);
    assert_int_equal(d->s.preemptions, 1);
    /* seq 2 was the one: it waits first in line, holding nothing, its tokens kept */
    assert_int_equal(d->s.nwaiting, 1);
    en_seq *q2 = d->seqs[2].seq;
    assert_ptr_equal(d->s.waiting[d->s.waiting_head], q2);
    assert_int_equal(q2->nblocks, 0);
    assert_int_equal(q2->cached, 0);
    assert_int_equal(q2->ntok, 8 + d->seqs[2].received);
    assert_int_equal(q2->preemptions, 1);
    d_run(d, 0, 0);
    assert_all_complete(d, 2);
    d_free(d);
}

/* The victim is the newest running sequence: with four running and no block left, the
 * second one's decode preempts the fourth, not the third. */
static void test_the_victim_is_the_newest_running_sequence(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(9);
    driver *d = d_new(&cfg);
    int32_t p[4][8];
    for (int i = 0; i < 4; i++) {
        prompt_of(p[i], 8, 10 + i);
        /* 1 and 2 decode into a new block at position 8; 3 and 4 (7 tokens) still have room */
        d_add(d, i + 1, p[i], i < 2 ? 8 : 7, 8, 0);
    }
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1); /* 4 prompts: 8 of 9 blocks */
    assert_int_equal(d->steps[0]->nchunks, 4);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    assert_int_equal(en_sched_blocks_held(&d->s), 8);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1); /* 1 takes the last block */
    assert_int_equal(d->s.preemptions, 1);
    assert_int_equal(d->s.nwaiting, 1);
    assert_ptr_equal(d->s.waiting[d->s.waiting_head], d->seqs[4].seq);
    assert_int_equal(d->steps[0]->nchunks, 3);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    assert_all_complete(d, 4);
    d_free(d);
}

/* With two steps in flight (PP), an older sequence that needs a block while the newer one,
 * holding the rest, is in the other step waits for it to come back and then preempts it;
 * it does not preempt itself. */
static void test_an_older_sequence_waits_for_a_newer_one_in_flight_to_preempt_it(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(6);
    cfg.groups = 2; /* one sequence a step: they alternate, one in flight while the other builds */
    driver *d = d_new(&cfg);
    int32_t a[5], b[11];
    prompt_of(a, 5, 1);
    prompt_of(b, 11, 2);
    /* A holds 2 blocks (decodes 5..7 fit), B 3 (11 fits); 1 left, which B's decode at 12
     * takes; A's at 8 then finds none while B is in the other step */
    d_add(d, 1, a, 5, 12, 0);
    d_add(d, 2, b, 11, 12, 0);
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[1].preempted, 0);
    assert_true(d->seqs[2].preempted >= 1);
    assert_all_complete(d, 2);
    d_free(d);
}

/* A seeded random load on a pool far smaller than the sequences' whole lengths, one and two
 * steps in flight, prompts streamed in 2 chunks or whole, with and without prefix caching,
 * some prompts sharing prefixes: preemptions happen, and every sequence still gets exactly
 * its tokens from what it attends to. */
static void test_a_random_load_on_a_small_pool_completes_every_sequence_exactly(void **state)
{
    (void)state;
    const int nseqs = tu_small() ? 24 : 64;
    for (int variant = 0; variant < 16; variant++) {
        en_sched_config cfg = preempt_config(24); /* 96 positions */
        cfg.groups = 1 + (variant & 1);
        cfg.prefill_chunks = variant & 2 ? 2 : 1;
        cfg.prefix_caching = (variant & 4) != 0;
        if (variant & 8) { /* decodes with drafts, on tokens that loop */
            cfg.spec_tokens = 3;
            cfg.spec_ngram_min = 1;
            cfg.spec_ngram_max = 2;
        }
        driver *d = d_new(&cfg);
        if (variant & 8)
            d->period = 5, d->twist = 1;
        uint64_t g = 0x5eed + (uint64_t)variant;
        int added = 0;
        while (added < nseqs) {
            for (int k = 0; k < 4 && added < nseqs; k++) { /* arrivals between runs */
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                int n = 3 + (int)((g >> 33) % 30), max = 1 + (int)((g >> 40) % 40);
                int32_t prompt[64];
                prompt_of(prompt, n, (int)((g >> 20) % 3)); /* 3 prefixes */
                prompt[n - 1] = 900 + added;                /* each its own last token */
                d_add(d, ++added, prompt, n, max, 0);
            }
            for (int k = 0; k < 3; k++) { /* a few steps, then more arrive */
                en_step *st = d->steps[0];
                if (en_sched_build(&d->s, st) != 1)
                    break;
                run_on_device(d, st);
                en_sched_complete(&d->s, st);
                check_pool(d);
            }
        }
        d_run(d, 0, 0);
        assert_all_complete(d, nseqs);
        if (d->s.preemptions == 0)
            fail_msg("variant %d: no preemption on a pool of 24 blocks", variant);
        if (cfg.prefix_caching && d->s.prefix_hit_tokens == 0)
            fail_msg("variant %d: no prefix was found in the cache", variant);
        if (!cfg.prefix_caching)
            assert_int_equal(d->s.prefix_hit_tokens, 0);
        if (cfg.spec_tokens && !(d->s.spec_accepted > 0 && d->s.spec_accepted < d->s.spec_drafted))
            fail_msg("variant %d: %ld of %ld drafts accepted", variant, d->s.spec_accepted,
                     d->s.spec_drafted);
        d_free(d);
    }
}

/* A cancel of a preempted sequence (waiting again) ends it once, with what it had. */
static void test_a_preempted_sequence_cancelled_while_waiting_ends_once(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(8);
    driver *d = d_new(&cfg);
    int32_t p1[8], p2[8];
    prompt_of(p1, 8, 1);
    prompt_of(p2, 8, 2);
    d_add(d, 1, p1, 8, 20, 0);
    d_add(d, 2, p2, 8, 20, 0);
    for (int i = 0; i < 40 && d->s.preemptions == 0; i++) {
        assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
        run_on_device(d, d->steps[0]);
        en_sched_complete(&d->s, d->steps[0]);
    }
    assert_int_equal(d->s.nwaiting, 1);
    const int had = d->seqs[2].received;
    en_sched_cancel(&d->s, 2);
    assert_int_equal(d->seqs[2].finals, 1);
    assert_int_equal(d->seqs[2].finish, PE_FINISH_CANCELLED);
    assert_int_equal(d->seqs[2].received, had);
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[1].finals, 1);
    assert_int_equal(d->seqs[1].received, 20);
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    d_free(d);
}

/* ---- prefix caching -------------------------------------------------------------------------- */

/* Identical prefixes share their blocks: a sequence admitted after another's prompt is in
 * starts at its first block not found (all but its last token can be found), its table
 * begins with the other's blocks, held twice; after both end the blocks stay cached and a
 * third one finds them too. */
static void test_identical_prefixes_share_their_blocks(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(32);
    driver *d = d_new(&cfg);
    int32_t a[14], b[14];
    prompt_of(a, 14, 5);
    memcpy(b, a, sizeof b);
    b[9] = 999; /* b is a's up to position 9: blocks 0 and 1 (positions 0..7) are shared */
    d_add(d, 1, a, 14, 3, 0);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]); /* a's prompt is in: blocks 0..2 registered */
    d_add(d, 2, b, 14, 3, 0);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    const en_step *st = d->steps[0];
    assert_int_equal(st->nchunks, 2); /* a's decode, then b's prompt from position 8 */
    assert_int_equal(st->chunks[1].pos0, 8);
    assert_int_equal(st->chunks[1].n, 6);
    const en_seq *qa = d->seqs[1].seq, *qb = d->seqs[2].seq;
    assert_int_equal(qb->blocks[0], qa->blocks[0]);
    assert_int_equal(qb->blocks[1], qa->blocks[1]);
    assert_int_not_equal(qb->blocks[2], qa->blocks[2]);
    assert_int_equal(d->s.kv.ref[qa->blocks[0]], 2);
    assert_int_equal(d->s.prefix_hit_tokens, 8);
    assert_int_equal(d->s.prefix_asked_tokens, 13 + 13);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    assert_all_complete(d, 2);
    /* nothing held; a's chain is cached: a third copy of a is found up to its last block
     * before its last token (13 positions: blocks 0..2, 12 positions) */
    assert_true(d->s.kv.ncached >= 3);
    d_add(d, 3, a, 14, 2, 0);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    assert_int_equal(d->steps[0]->chunks[0].pos0, 12);
    assert_int_equal(d->steps[0]->chunks[0].n, 2);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    /* a prompt that is exactly a cached chain still computes its last token: 8 tokens of a
     * find one block (positions 0..3), not two */
    d_add(d, 4, a, 8, 2, 0);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    const en_step *s4 = d->steps[0];
    int found = 0;
    for (int i = 0; i < s4->nchunks; i++)
        if (s4->chunks[i].seq->id == 4) {
            assert_int_equal(s4->chunks[i].pos0, 4);
            assert_int_equal(s4->chunks[i].n, 4);
            found = 1;
        }
    assert_true(found);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    for (int id = 3; id <= 4; id++)
        assert_int_equal(d->seqs[id].received, 2);
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    d_free(d);
}

/* Sequences that come together with one prompt (n choices of it) prefill it once: the
 * first computes it while the others wait in line, letting a later one with another prompt
 * go first; they then start from the first's blocks, found in the cache. */
static void test_a_prefix_being_computed_is_waited_for_not_computed_twice(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(32);
    driver *d = d_new(&cfg);
    int32_t a[14], c[10];
    prompt_of(a, 14, 5);
    prompt_of(c, 10, 9);
    d_add(d, 1, a, 14, 3, 0);
    d_add(d, 2, a, 14, 3, 0);
    d_add(d, 3, a, 14, 3, 0);
    d_add(d, 4, c, 10, 3, 0);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    const en_step *st = d->steps[0];
    assert_int_equal(st->nchunks, 2); /* 1's prompt and 4's; 2 and 3 wait for 1's blocks */
    assert_int_equal((int)st->chunks[0].seq->id, 1);
    assert_int_equal((int)st->chunks[1].seq->id, 4);
    assert_int_equal(d->s.nwaiting, 2);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]); /* 1's blocks 0..2 are in the cache */
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    st = d->steps[0];
    assert_int_equal(st->nchunks, 4); /* 1's and 4's decodes, 2's and 3's last 2 positions */
    for (int i = 2; i < 4; i++) {
        assert_int_equal((int)st->chunks[i].seq->id, i);
        assert_int_equal(st->chunks[i].pos0, 12);
        assert_int_equal(st->chunks[i].n, 2);
    }
    const en_seq *q1 = d->seqs[1].seq;
    for (int j = 0; j < 3; j++)
        assert_int_equal(d->s.kv.ref[q1->blocks[j]], 3);
    assert_int_equal(d->s.prefix_hit_tokens, 2 * 12);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    assert_all_complete(d, 4);
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    d_free(d);
}

/* A kept sequence parked with its blocks lets them go when a new one needs them; its full
 * blocks stay cached, and its next turn starts from the ones still found. */
static void test_parked_blocks_go_under_pressure_and_an_append_finds_them_cached(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(6); /* 24 positions */
    driver *d = d_new(&cfg);
    int32_t a[10], b[14];
    prompt_of(a, 10, 1);
    prompt_of(b, 14, 2);
    d_add(d, 1, a, 10, 3, 1); /* kept: 12 positions stored, 3 blocks */
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[1].finals, 1);
    assert_int_equal(en_sched_blocks_held(&d->s), 3);
    /* 4 blocks for its prompt, 3 free: the parked ones go to the cache, and the least
     * recently released of them (a's last) is taken */
    d_add(d, 2, b, 14, 2, 0);
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[2].received, 2);
    en_seq *qa = d->seqs[1].seq;
    assert_int_equal(qa->nblocks, 0);
    assert_int_equal(qa->cached, 0);
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    /* the next turn, 2 more tokens: 15 in all; a's first 2 blocks are still cached */
    en_seq *more = calloc(1, sizeof *more);
    assert_non_null(more);
    more->tokens = malloc(2 * sizeof *more->tokens);
    assert_non_null(more->tokens);
    more->tokens[0] = 300;
    more->tokens[1] = 301;
    more->ntok = 2;
    more->id = 1;
    more->max_tokens = 2;
    more->sampling = qa->sampling;
    d->seqs[1].tokens[d->seqs[1].ntok++] = 300;
    d->seqs[1].tokens[d->seqs[1].ntok++] = 301;
    d->seqs[1].max_tokens += 2;
    d->seqs[1].turn_base = d->seqs[1].received;
    assert_int_equal(en_sched_append(&d->s, more), PE_OK);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    assert_int_equal(d->steps[0]->chunks[0].pos0, 8);
    assert_int_equal(d->steps[0]->chunks[0].n, 7);
    assert_int_equal(d->s.prefix_hit_tokens, 8);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[1].received, 5);
    assert_int_equal(en_sched_release(&d->s, 1), PE_EINVAL); /* this turn was not kept */
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    d_free(d);
}

/* A kept sequence parked with its blocks (no pressure): its next turn goes on from the
 * positions they hold, computing only its last token and the new ones. */
static void test_an_append_holding_its_blocks_goes_on_from_them(void **state)
{
    (void)state;
    en_sched_config cfg = preempt_config(16);
    driver *d = d_new(&cfg);
    int32_t a[10];
    prompt_of(a, 10, 3);
    d_add(d, 1, a, 10, 3, 1); /* kept: 12 positions computed, 13 tokens */
    d_run(d, 0, 0);
    en_seq *qa = d->seqs[1].seq;
    assert_int_equal(qa->nblocks, 3);
    assert_int_equal(qa->cached, 12);
    en_seq *more = calloc(1, sizeof *more);
    assert_non_null(more);
    more->tokens = malloc(sizeof *more->tokens);
    assert_non_null(more->tokens);
    more->tokens[0] = 300;
    more->ntok = 1;
    more->id = 1;
    more->max_tokens = 2;
    more->sampling = qa->sampling;
    d->seqs[1].tokens[d->seqs[1].ntok++] = 300;
    d->seqs[1].turn_base = d->seqs[1].received;
    assert_int_equal(en_sched_append(&d->s, more), PE_OK);
    assert_int_equal(en_sched_build(&d->s, d->steps[0]), 1);
    assert_int_equal(d->steps[0]->chunks[0].pos0, 12);
    assert_int_equal(d->steps[0]->chunks[0].n, 2);
    run_on_device(d, d->steps[0]);
    en_sched_complete(&d->s, d->steps[0]);
    d_run(d, 0, 0);
    assert_int_equal(d->seqs[1].received, 5);
    assert_int_equal(en_sched_blocks_held(&d->s), 0);
    d_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_finds_a_chain_evicts_its_tail_first_and_forgets_stale_children),
        cmocka_unit_test(test_the_newest_is_preempted_and_computed_again_with_its_tokens),
        cmocka_unit_test(test_the_victim_is_the_newest_running_sequence),
        cmocka_unit_test(test_an_older_sequence_waits_for_a_newer_one_in_flight_to_preempt_it),
        cmocka_unit_test(test_a_random_load_on_a_small_pool_completes_every_sequence_exactly),
        cmocka_unit_test(test_a_preempted_sequence_cancelled_while_waiting_ends_once),
        cmocka_unit_test(test_identical_prefixes_share_their_blocks),
        cmocka_unit_test(test_a_prefix_being_computed_is_waited_for_not_computed_twice),
        cmocka_unit_test(test_parked_blocks_go_under_pressure_and_an_append_finds_them_cached),
        cmocka_unit_test(test_an_append_holding_its_blocks_goes_on_from_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
