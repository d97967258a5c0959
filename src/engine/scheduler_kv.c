/* scheduler_kv.c: PE_KV_PREEMPT (scheduler.h): admission on the blocks free now, preemption
 * when they run out, blocks for drafts, and the prefix cache's registrations. */
#include <string.h>

#include "engine/scheduler_internal.h"

/* Parked sequences let their blocks go, the longest parked first, until `want` blocks are
 * available or none holds any: their full blocks stay in the prefix cache, where an append
 * finds them again. */
static void unpark_blocks(en_sched *s, int want)
{
    while (en_kv_available(&s->kv) < want) {
        en_seq *oldest = NULL; /* the list is newest first */
        for (en_seq *q = s->parked; q; q = q->parked_next)
            if (q->nblocks)
                oldest = q;
        if (!oldest)
            return;
        en_sched_return_blocks(s, oldest);
        oldest->cached = 0;
    }
}

/* The blocks of seq's first tokens found in the prefix cache, at most `most` of them, into
 * hit[]; how many. Only whole blocks before its last token (that one gives the logits). */
static int prefix_hits(const en_sched *s, const en_seq *seq, int32_t *hit, int most)
{
    if (!s->kv.caching || seq->score || seq->nblocks || seq->cached)
        return 0;
    const int B = s->cfg.block_tokens;
    int n = 0;
    for (int32_t parent = -1; n < most && (n + 1) * B <= seq->ntok - 1; n++) {
        int32_t b = en_kv_lookup(&s->kv, parent, seq->tokens + (size_t)n * (size_t)B);
        if (b < 0)
            break;
        hit[n] = parent = b;
    }
    return n;
}

/* Whether a running sequence is to compute the block of seq that follows its nhit blocks
 * found in the prefix cache: the same tokens from position 0 to that block's end, not
 * computed yet, in a chain that it registers. seq then waits, to find the block in the
 * cache once computed, rather than computing it beside: the n choices of one prompt, or
 * requests that arrive together with one long system prompt, prefill it once. */
static int prefix_pending(const en_sched *s, const en_seq *seq, int nhit)
{
    const int end = (nhit + 1) * s->cfg.block_tokens; /* the next block's end */
    if (!s->kv.caching || seq->score || seq->nblocks || seq->cached || end > seq->ntok - 1)
        return 0;
    for (int i = 0; i < s->nrunning; i++) {
        const en_seq *r = s->running[i];
        if (!r->score && r->nreg >= 0 && r->cached < end && r->ntok >= end &&
            !memcmp(r->tokens, seq->tokens, (size_t)end * sizeof *seq->tokens))
            return 1;
    }
    return 0;
}

/* PE_KV_PREEMPT: the blocks kept available while others run (1% of the pool, at least 1),
 * so that running sequences can grow before new ones or drafts take the last blocks. */
static int watermark(const en_sched *s)
{
    return s->cfg.nblocks / 100 > 1 ? s->cfg.nblocks / 100 : 1;
}

/* Admits waiting sequences, first come first served, while the blocks of their known tokens
 * (less the ones found in the prefix cache) are available, beyond a watermark while others
 * run. The found blocks are held at once and count as computed. A sequence whose next
 * block a running one is about to compute waits in its place (prefix_pending), and those
 * behind it may go first. */
void en_sched_admit_optimistic(en_sched *s)
{
    for (int k = 0; k < s->nwaiting && s->nrunning < s->cfg.max_seqs;) {
        en_seq *seq = en_sched_waiting_at(s, k);
        const int blocks = en_sched_ceil_blocks(s, seq->ntok);
        if (en_grow((void **)&seq->blocks, &seq->blocks_cap, blocks, sizeof(int32_t)))
            return; /* out of host memory: it waits (and the build fails) */
        int32_t *hit = seq->blocks + seq->nblocks;
        const int nhit = prefix_hits(s, seq, hit, blocks);
        if (prefix_pending(s, seq, nhit)) {
            k++;
            continue;
        }
        int revived = 0; /* found blocks no one holds: they leave the available ones */
        for (int i = 0; i < nhit; i++)
            revived += s->kv.ref[hit[i]] == 0;
        const int need = blocks - seq->nblocks - nhit + revived;
        const int reserve = s->nrunning ? watermark(s) : 0;
        if (need > en_kv_available(&s->kv) - reserve)
            unpark_blocks(s, need + reserve);
        if (need > en_kv_available(&s->kv) - reserve)
            break;
        en_sched_waiting_remove(s, k);
        if (!seq->nblocks) { /* new or preempted: it starts after the blocks found (an append
                              * holding its blocks goes on from what they hold) */
            for (int i = 0; i < nhit; i++)
                en_kv_hold(&s->kv, hit[i]);
            seq->nblocks = nhit;
            seq->nreg = nhit;
            seq->cached = nhit * s->cfg.block_tokens;
            if (s->kv.caching && !seq->score) {
                s->prefix_asked_tokens += seq->ntok - 1;
                s->prefix_hit_tokens += seq->cached;
            }
        }
        s->running[s->nrunning++] = seq;
    }
}

static int in_step(const en_step *st, const en_seq *seq)
{
    for (int i = 0; i < st->nchunks; i++)
        if (st->chunks[i].seq == seq)
            return 1;
    return 0;
}

/* Preempts running sequence i: its blocks go, it waits first in line to be computed again
 * from position 0 with the tokens it has. */
static void preempt(en_sched *s, int i)
{
    en_seq *seq = s->running[i];
    memmove(&s->running[i], &s->running[i + 1], (size_t)(s->nrunning - i - 1) * sizeof *s->running);
    s->nrunning--;
    en_sched_return_blocks(s, seq);
    seq->cached = 0;
    seq->chunk = 0;
    seq->preemptions++;
    s->preemptions++;
    if (en_sched_waiting_push_front(s, seq) != 0)
        en_sched_end_with(s, seq, PE_FINISH_ERROR, PE_ENOMEM);
}

/* The newest running sequence after index `after` that no step holds (in flight or the one
 * being planned): the one to preempt; -1 when none. *newer_busy: whether a newer one is in
 * a step in flight (it can be preempted once it is back). */
static int victim(const en_sched *s, const en_step *st, int after, int *newer_busy)
{
    *newer_busy = 0;
    for (int i = s->nrunning - 1; i > after; i--) {
        if (!s->running[i]->busy && !in_step(st, s->running[i]))
            return i;
        *newer_busy |= s->running[i]->busy > 0;
    }
    return -1;
}

/* Takes blocks for running sequence i (seq) to cover positions up to `end`, from pos0.
 * Returns the end it covers: `end`, or less for a prefill chunk cut to the blocks there are
 * (pos0: none, it waits for a step in flight); -1 when seq itself was preempted. A decode
 * preempts newer sequences until its block comes, and then itself when no newer one is left
 * and none will come back; a prefill chunk preempts only when not one block is left for
 * it. */
int en_sched_take_optimistic(en_sched *s, en_step *st, int *i, int pos0, int end)
{
    en_seq *seq = s->running[*i];
    const int B = s->cfg.block_tokens;
    int need = en_sched_ceil_blocks(s, end) - seq->nblocks;
    if (need > en_kv_available(&s->kv))
        unpark_blocks(s, need);
    const int decode = end - pos0 == 1;
    while (need > en_kv_available(&s->kv) && (decode || en_kv_available(&s->kv) == 0)) {
        int newer_busy;
        int v = victim(s, st, *i, &newer_busy);
        if (v < 0) {
            if (seq->busy || newer_busy) /* a step in flight will give it a victim or blocks */
                return pos0;
            preempt(s, *i);
            (*i)--;
            return -1;
        }
        preempt(s, v);
    }
    if (need > en_kv_available(&s->kv)) { /* a prefill chunk, cut */
        need = en_kv_available(&s->kv);
        end = (seq->nblocks + need) * B < end ? (seq->nblocks + need) * B : end;
    }
    if (en_grow((void **)&seq->blocks, &seq->blocks_cap, seq->nblocks + need, sizeof(int32_t)))
        return -2;
    for (int k = 0; k < need; k++)
        seq->blocks[seq->nblocks++] = en_kv_take(&s->kv);
    return end;
}

/* Registers seq's full blocks, computed now, in the prefix cache, in order from its first:
 * a block is registered only after the one before it (a chain from position 0). A scored
 * prompt's too: it finds nothing there (it wants every position's logits), but what comes
 * after it may (a server's echo scores a prompt, then generates from it). */
void en_sched_register_blocks(en_sched *s, en_seq *seq)
{
    const int B = s->cfg.block_tokens;
    while (s->kv.caching && seq->nreg >= 0 && (seq->nreg + 1) * B <= seq->cached &&
           seq->nreg < seq->nblocks) {
        const int j = seq->nreg;
        const int32_t b = seq->blocks[j], parent = j ? seq->blocks[j - 1] : -1;
        if (!en_kv_register(&s->kv, b, parent, seq->tokens + (size_t)j * (size_t)B) &&
            !s->kv.registered[b]) {
            seq->nreg = -1; /* an equal block came first: this chain stays unregistered */
            return;
        }
        seq->nreg++;
    }
}

/* PE_KV_PREEMPT: blocks for seq's drafts at positions from.., taken only while some are
 * available beyond the admission watermark (a draft never preempts, nor empties the
 * pool); how many of the drafts they cover. -1 when out of host memory. */
int en_sched_take_draft_blocks(en_sched *s, en_seq *seq, int from, int draft)
{
    const int B = s->cfg.block_tokens;
    const int need = en_sched_ceil_blocks(s, from + draft);
    if (en_grow((void **)&seq->blocks, &seq->blocks_cap, need, sizeof(int32_t)))
        return -1;
    while (seq->nblocks < need && en_kv_available(&s->kv) > watermark(s))
        seq->blocks[seq->nblocks++] = en_kv_take(&s->kv);
    return seq->nblocks * B - from < draft ? seq->nblocks * B - from : draft;
}
