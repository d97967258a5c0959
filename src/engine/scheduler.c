/* scheduler.c: one replica's scheduler (scheduler.h): admission, KV blocks, steps. */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "engine/speculate.h"
#include "kernels/attention.h"

en_meta_layout en_meta_layout_of(int ntok, int nchunks, int nbt, int nlogits, int npen,
                                 int nmask, int mask_words)
{
    en_meta_layout L;
    L.tokens = 0;
    L.positions = (size_t)ntok;
    L.slots = 2 * (size_t)ntok;
    L.chunks = 3 * (size_t)ntok;
    L.block_tables = L.chunks + (size_t)nchunks * PE_K_CHUNK_FIELDS;
    L.logit_rows = L.block_tables + (size_t)nbt;
    L.targets = L.logit_rows + (size_t)nlogits;
    L.sampling = L.targets + (size_t)nlogits;
    L.row_masks = L.sampling + (size_t)nlogits * (sizeof(pe_k_sampling) / sizeof(int32_t));
    L.masks = L.row_masks + (nmask > 0 ? (size_t)nlogits : 0);
    L.penalties = L.masks + (size_t)nmask * (size_t)mask_words;
    L.words = L.penalties + (size_t)npen * (sizeof(pe_k_penalty) / sizeof(int32_t));
    return L;
}

en_meta_layout en_meta_layout_of_step(const en_step *st)
{
    return en_meta_layout_of(st->ntok, st->nchunks, st->nbt, st->nlogits, st->npen, st->nmask,
                             st->mask_words);
}

void en_step_free(en_step *st)
{
    if (!st)
        return;
    free(st->meta);
    free(st->chunks);
    free(st->logit_dst);
    free(st->out_tokens);
    free(st->out_logit);
    free(st->out_top);
    free(st->out_topv);
    free(st->out_lse);
    free(st->out_target);
    free(st);
}

void en_seq_free(en_seq *seq)
{
    if (!seq)
        return;
    free(seq->tokens);
    free(seq->blocks);
    free(seq->bias);
    free(seq->last_mask);
    en_counts_free(&seq->counts);
    free(seq);
}

/* seq's mask after state g into mask (words words): the last one made when g is its state
 * again (inside a string most steps are), else made and kept. Where the text may end there
 * or go on (a regex's), the model's eos ids are allowed too, unless seq ignores them. */
static void grammar_mask(const en_sched *s, en_seq *seq, const tx_grammar_state *g,
                         uint32_t *mask, int words)
{
    const size_t bytes = (size_t)words * sizeof *mask;
    if (seq->last_made && !memcmp(&seq->last_state, g, sizeof *g)) {
        memcpy(mask, seq->last_mask, bytes);
        return;
    }
    (void)tx_grammar_mask(seq->grammar, g, mask, (size_t)s->cfg.vocab);
    for (int i = 0; !seq->ignore_eos && tx_grammar_may_end(seq->grammar, g) && i < s->cfg.neos;
         i++)
        if (s->cfg.eos[i] >= 0 && s->cfg.eos[i] < s->cfg.vocab)
            mask[s->cfg.eos[i] >> 5] |= 1u << (s->cfg.eos[i] & 31);
    memcpy(seq->last_mask, mask, bytes);
    seq->last_state = *g;
    seq->last_made = 1;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

pe_status en_sched_init(en_sched *s, const en_sched_config *cfg, en_emit_fn emit, void *ctx)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->emit = emit;
    s->emit_ctx = ctx;
    const int caching = cfg->kv_full == PE_KV_PREEMPT && cfg->prefix_caching;
    s->running = malloc((size_t)(cfg->max_seqs > 0 ? cfg->max_seqs : 1) * sizeof *s->running);
    if (!s->running || en_kv_init(&s->kv, cfg->nblocks, cfg->block_tokens, caching) != PE_OK) {
        free(s->running);
        memset(s, 0, sizeof *s);
        return PE_ENOMEM;
    }
    return PE_OK;
}

void en_sched_free(en_sched *s)
{
    en_kv_free(&s->kv);
    free(s->running);
    free(s->waiting);
    memset(s, 0, sizeof *s);
}

int en_sched_blocks_needed(const en_sched_config *cfg, const en_seq *seq)
{
    long positions = seq->ntok;
    if (!seq->score) { /* the last token of a sequence is never fed back */
        long total = (long)seq->prompt_len + seq->max_tokens;
        positions = (total < cfg->context ? total : cfg->context) - 1;
        if (positions < seq->prompt_len)
            positions = seq->prompt_len;
    }
    return (int)((positions + cfg->block_tokens - 1) / cfg->block_tokens);
}

/* PE_KV_PREEMPT: blocks are taken when there are some, not promised. */
static int optimistic(const en_sched *s) { return s->cfg.kv_full == PE_KV_PREEMPT; }

int en_sched_room(const en_sched *s)
{
    return optimistic(s) ? en_kv_available(&s->kv) : s->cfg.nblocks - s->promised;
}

int en_sched_blocks_held(const en_sched *s) { return en_kv_held(&s->kv); }

int en_sched_sequences(const en_sched *s) { return s->nwaiting + s->nrunning; }

/* ---- ending a sequence ------------------------------------------------------------------ */

/* Lets seq's blocks go (its last first: a cached chain is evicted from its tail), and its
 * promise. */
static void return_blocks(en_sched *s, en_seq *seq)
{
    for (int i = seq->nblocks - 1; i >= 0; i--)
        en_kv_put(&s->kv, seq->blocks[i]);
    seq->nblocks = 0;
    seq->nreg = 0;
    s->promised -= seq->promised;
    seq->promised = 0;
}

int en_sched_keeps(const en_seq *seq, const pe_token_event *ev)
{
    return seq->keep && !seq->score && (ev->finish != PE_FINISH_ERROR || ev->status == PE_EAGAIN);
}

/* Takes seq out of running, emits ev (its final event), and frees it with its blocks, or
 * parks it with them (a kept sequence: its promise shrinks to the blocks it holds). */
static void finish(en_sched *s, en_seq *seq, const pe_token_event *ev)
{
    const int keep = en_sched_keeps(seq, ev);
    if (keep && !optimistic(s)) {
        s->promised -= seq->promised - seq->nblocks;
        seq->promised = seq->nblocks;
    } else if (!keep) {
        return_blocks(s, seq);
    }
    for (int i = 0; i < s->nrunning; i++)
        if (s->running[i] == seq) {
            memmove(&s->running[i], &s->running[i + 1],
                    (size_t)(s->nrunning - i - 1) * sizeof *s->running);
            s->nrunning--;
            break;
        }
    (void)s->emit(s->emit_ctx, seq, ev); /* a final event is always delivered */
    if (keep) {
        seq->parked_next = s->parked;
        s->parked = seq;
    } else {
        en_seq_free(seq);
    }
}

/* Takes the parked sequence id off the list; NULL when none. */
static en_seq *unpark(en_sched *s, uint64_t id)
{
    for (en_seq **p = &s->parked; *p; p = &(*p)->parked_next)
        if ((*p)->id == id) {
            en_seq *seq = *p;
            *p = seq->parked_next;
            seq->parked_next = NULL;
            return seq;
        }
    return NULL;
}

pe_status en_sched_release(en_sched *s, uint64_t id)
{
    en_seq *seq = unpark(s, id);
    if (!seq)
        return PE_EINVAL;
    return_blocks(s, seq);
    en_seq_free(seq);
    return PE_OK;
}

static pe_token_event event_of(const en_seq *seq, pe_finish finish_reason, pe_status st)
{
    pe_token_event ev;
    memset(&ev, 0, sizeof ev);
    ev.seq = seq->id;
    ev.token = -1;
    ev.index = seq->generated;
    ev.finish = finish_reason;
    ev.status = st;
    ev.user = seq->user;
    return ev;
}

static void end_with(en_sched *s, en_seq *seq, pe_finish why, pe_status st)
{
    pe_token_event ev = event_of(seq, why, st);
    finish(s, seq, &ev);
}

/* ---- the waiting queue -------------------------------------------------------------------- */

static int waiting_push(en_sched *s, en_seq *seq)
{
    if (s->nwaiting == s->waiting_cap) {
        int cap = s->waiting_cap ? 2 * s->waiting_cap : 16;
        en_seq **v = malloc((size_t)cap * sizeof *v);
        if (!v)
            return -1;
        for (int i = 0; i < s->nwaiting; i++)
            v[i] = s->waiting[(s->waiting_head + i) % s->waiting_cap];
        free(s->waiting);
        s->waiting = v;
        s->waiting_cap = cap;
        s->waiting_head = 0;
    }
    s->waiting[(s->waiting_head + s->nwaiting) % s->waiting_cap] = seq;
    s->nwaiting++;
    return 0;
}

static en_seq *waiting_front(const en_sched *s)
{
    return s->nwaiting ? s->waiting[s->waiting_head] : NULL;
}

static void waiting_pop(en_sched *s)
{
    s->waiting_head = (s->waiting_head + 1) % s->waiting_cap;
    s->nwaiting--;
}

/* The k-th waiting sequence (k < nwaiting). */
static en_seq *waiting_at(const en_sched *s, int k)
{
    return s->waiting[(s->waiting_head + k) % s->waiting_cap];
}

/* Takes the k-th waiting sequence out of the queue, the others keeping their order. */
static void waiting_remove(en_sched *s, int k)
{
    for (int i = k; i > 0; i--) /* the k before it move back by one */
        s->waiting[(s->waiting_head + i) % s->waiting_cap] =
            s->waiting[(s->waiting_head + i - 1) % s->waiting_cap];
    waiting_pop(s);
}

/* Puts seq first in the queue (a preempted sequence: it came before those waiting). */
static int waiting_push_front(en_sched *s, en_seq *seq)
{
    if (waiting_push(s, seq) != 0)
        return -1;
    for (int i = s->nwaiting - 1; i > 0; i--) /* rotate it from the back to the front */
        s->waiting[(s->waiting_head + i) % s->waiting_cap] =
            s->waiting[(s->waiting_head + i - 1) % s->waiting_cap];
    s->waiting[s->waiting_head] = seq;
    return 0;
}

static int ceil_blocks(const en_sched *s, int positions)
{
    return (positions + s->cfg.block_tokens - 1) / s->cfg.block_tokens;
}

/* Blocks seq's admission adds to the promises: its need, less what it holds (an append).
 * PE_KV_PREEMPT: the blocks of its known tokens it does not hold (before the prefix cache). */
static int admission_need(const en_sched *s, const en_seq *seq)
{
    if (optimistic(s))
        return ceil_blocks(s, seq->ntok) - seq->nblocks;
    return en_sched_blocks_needed(&s->cfg, seq) - seq->promised;
}

/* Blocks promised to the waiting sequences ahead, if they were all admitted. */
int en_sched_waiting_need(const en_sched *s)
{
    int need = 0;
    for (int i = 0; i < s->nwaiting; i++)
        need += admission_need(s, s->waiting[(s->waiting_head + i) % s->waiting_cap]);
    return need;
}

void en_sched_add(en_sched *s, en_seq *seq)
{
    if (s->cfg.kv_full == PE_KV_REFUSE &&
        admission_need(s, seq) > en_sched_room(s) - en_sched_waiting_need(s)) {
        end_with(s, seq, PE_FINISH_ERROR, PE_EAGAIN);
        return;
    }
    if (waiting_push(s, seq) != 0)
        end_with(s, seq, PE_FINISH_ERROR, PE_ENOMEM);
}

pe_status en_sched_append(en_sched *s, en_seq *more)
{
    en_seq *seq = unpark(s, more->id);
    pe_status st = seq && seq->ntok + more->ntok < s->cfg.context ? PE_OK : PE_EINVAL;
    int cap = seq ? seq->ntok + more->ntok + more->max_tokens : 0;
    cap = cap < s->cfg.context ? cap : s->cfg.context;
    int32_t *t = st == PE_OK ? realloc(seq->tokens, (size_t)cap * sizeof *t) : NULL;
    if (st == PE_OK && !t)
        st = PE_ENOMEM;
    if (st != PE_OK) { /* not parked, past the context, or out of memory */
        if (seq) {
            seq->parked_next = s->parked; /* still kept, as it was */
            s->parked = seq;
        }
        en_seq_free(more);
        return st;
    }
    seq->tokens = t;
    memcpy(seq->tokens + seq->ntok, more->tokens, (size_t)more->ntok * sizeof *t);
    seq->ntok += more->ntok;
    seq->cap = cap;
    seq->prompt_len = seq->ntok;
    seq->generated = 0;
    seq->max_tokens = more->max_tokens;
    seq->min_tokens = more->min_tokens;
    seq->sampling = more->sampling;
    free(seq->bias); /* the new generation's */
    seq->bias = more->bias;
    seq->nbias = more->nbias;
    more->bias = NULL;
    seq->logprobs = more->logprobs;
    memcpy(seq->stop, more->stop, sizeof seq->stop);
    seq->nstop = more->nstop;
    seq->ignore_eos = more->ignore_eos;
    seq->grammar = more->grammar;
    seq->gstate = more->gstate;
    seq->last_made = 0; /* (the last generation's grammar's) */
    seq->keep = more->keep;
    seq->user = more->user;
    seq->cancelled = 0;
    seq->ending = PE_OK;
    en_seq_free(more);
    en_sched_add(s, seq);
    return PE_OK;
}

void en_sched_cancel(en_sched *s, uint64_t id)
{
    for (int i = 0; i < s->nwaiting; i++) {
        en_seq *seq = s->waiting[(s->waiting_head + i) % s->waiting_cap];
        if (seq->id != id)
            continue;
        for (int j = i; j + 1 < s->nwaiting; j++) /* close the gap, order kept */
            s->waiting[(s->waiting_head + j) % s->waiting_cap] =
                s->waiting[(s->waiting_head + j + 1) % s->waiting_cap];
        s->nwaiting--;
        end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        return;
    }
    for (int i = 0; i < s->nrunning; i++) {
        en_seq *seq = s->running[i];
        if (seq->id != id)
            continue;
        seq->cancelled = 1;
        if (!seq->busy)
            end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        return;
    }
}

void en_sched_end_all(en_sched *s, pe_status why)
{
    while (s->parked) {
        en_seq *seq = unpark(s, s->parked->id);
        return_blocks(s, seq);
        en_seq_free(seq);
    }
    while (s->nwaiting) {
        en_seq *seq = waiting_front(s);
        waiting_pop(s);
        end_with(s, seq, PE_FINISH_ERROR, why);
    }
    for (int i = s->nrunning - 1; i >= 0; i--) {
        if (s->running[i]->busy)
            s->running[i]->ending = why; /* ends when its step comes back */
        else
            end_with(s, s->running[i], PE_FINISH_ERROR, why);
    }
}

static void admit_optimistic(en_sched *s);

/* Admits waiting sequences, first come first served, while their promise fits. */
static void admit(en_sched *s)
{
    if (optimistic(s)) {
        admit_optimistic(s);
        return;
    }
    while (s->nwaiting && s->nrunning < s->cfg.max_seqs) {
        en_seq *seq = waiting_front(s);
        int need = admission_need(s, seq);
        if (need > en_sched_room(s))
            break;
        waiting_pop(s);
        seq->promised += need;
        s->promised += need;
        s->running[s->nrunning++] = seq;
    }
}

int en_sched_has_work(const en_sched *s)
{
    for (int i = 0; i < s->nrunning; i++) {
        const en_seq *seq = s->running[i];
        if (!seq->busy || (!seq->score && seq->cached + seq->inflight < seq->ntok))
            return 1;
    }
    return s->nwaiting > 0 && s->nrunning < s->cfg.max_seqs &&
           admission_need(s, waiting_front(s)) <= en_sched_room(s);
}

/* ---- PE_KV_PREEMPT: admission on the blocks free now, preemption when they run out ------- */

/* Grows a buffer of n elements of size sz to at least want. */
static int grow(void **p, int *cap, int want, size_t sz);

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
        return_blocks(s, oldest);
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
static void admit_optimistic(en_sched *s)
{
    for (int k = 0; k < s->nwaiting && s->nrunning < s->cfg.max_seqs;) {
        en_seq *seq = waiting_at(s, k);
        const int blocks = ceil_blocks(s, seq->ntok);
        if (grow((void **)&seq->blocks, &seq->blocks_cap, blocks, sizeof(int32_t)))
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
        waiting_remove(s, k);
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
    return_blocks(s, seq);
    seq->cached = 0;
    seq->chunk = 0;
    seq->preemptions++;
    s->preemptions++;
    if (waiting_push_front(s, seq) != 0)
        end_with(s, seq, PE_FINISH_ERROR, PE_ENOMEM);
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
static int take_optimistic(en_sched *s, en_step *st, int *i, int pos0, int end)
{
    en_seq *seq = s->running[*i];
    const int B = s->cfg.block_tokens;
    int need = ceil_blocks(s, end) - seq->nblocks;
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
    if (grow((void **)&seq->blocks, &seq->blocks_cap, seq->nblocks + need, sizeof(int32_t)))
        return -2;
    for (int k = 0; k < need; k++)
        seq->blocks[seq->nblocks++] = en_kv_take(&s->kv);
    return end;
}

/* Registers seq's full blocks, computed now, in the prefix cache, in order from its first:
 * a block is registered only after the one before it (a chain from position 0). A scored
 * prompt's too: it finds nothing there (it wants every position's logits), but what comes
 * after it may (a server's echo scores a prompt, then generates from it). */
static void register_blocks(en_sched *s, en_seq *seq)
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

/* ---- building a step ------------------------------------------------------------------------ */

/* The tokens seq may not sample as its generated token `index` (min_tokens not reached):
 * the model's end-of-sequence ids (unless it ignores them) and its stop ids, into ban
 * (NULL: only counted); how many. */
static int banned_tokens(const en_sched *s, const en_seq *seq, int index, int32_t *ban)
{
    if (index >= seq->min_tokens)
        return 0;
    int n = 0;
    for (int i = 0; !seq->ignore_eos && i < s->cfg.neos; i++, n++)
        if (ban)
            ban[n] = s->cfg.eos[i];
    for (int i = 0; i < seq->nstop; i++, n++)
        if (ban)
            ban[n] = seq->stop[i];
    return n;
}

/* Grows a buffer of n elements of size sz to at least want. */
static int grow(void **p, int *cap, int want, size_t sz)
{
    if (want <= *cap)
        return 0;
    int c = *cap ? *cap : 16;
    while (c < want)
        c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Drafts for seq's next decode (speculate.h), written after its tokens: at most `most`, and
 * none past its token limit, its buffer or the context (so a promise covers their blocks);
 * how many. None while more than spec_max_seqs run. */
static int draft_tokens(const en_sched *s, en_seq *seq, int most)
{
    if (!s->cfg.spec_tokens || (s->cfg.spec_max_seqs && s->nrunning > s->cfg.spec_max_seqs) ||
        seq->score || seq->busy || seq->cancelled)
        return 0;
    const int left[] = {s->cfg.spec_tokens, seq->max_tokens - seq->generated - 1,
                        s->cfg.context - 1 - seq->ntok, seq->cap - seq->ntok};
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++)
        most = left[i] < most ? left[i] : most;
    int n = en_ngram_draft(seq->tokens, seq->ntok, s->cfg.spec_ngram_min,
                           s->cfg.spec_ngram_max, most, seq->tokens + seq->ntok);
    if (seq->grammar) { /* up to the first draft the grammar refuses or that completes it
                         * (the row before samples that one: nothing follows it) */
        tx_grammar_state g = seq->gstate;
        int k = 0;
        while (k < n && tx_grammar_accept(seq->grammar, &g, seq->tokens[seq->ntok + k]) == 0 &&
               !tx_grammar_done(seq->grammar, &g))
            k++;
        n = k;
    }
    return n;
}

/* PE_KV_PREEMPT: blocks for seq's drafts at positions from.., taken only while some are
 * available beyond the admission watermark (a draft never preempts, nor empties the
 * pool); how many of the drafts they cover. -1 when out of host memory. */
static int take_draft_blocks(en_sched *s, en_seq *seq, int from, int draft)
{
    const int B = s->cfg.block_tokens;
    const int need = ceil_blocks(s, from + draft);
    if (grow((void **)&seq->blocks, &seq->blocks_cap, need, sizeof(int32_t)))
        return -1;
    while (seq->nblocks < need && en_kv_available(&s->kv) > watermark(s))
        seq->blocks[seq->nblocks++] = en_kv_take(&s->kv);
    return seq->nblocks * B - from < draft ? seq->nblocks * B - from : draft;
}

/* Logit rows a chunk of n tokens of seq from position pos0 needs. */
static int chunk_logits(const en_seq *seq, int pos0, int n)
{
    int reaches_end = pos0 + n == seq->ntok;
    if (seq->score)
        return seq->all_positions ? n : reaches_end;
    return reaches_end;
}

/* Plans the chunks of the step: decodes first, then prefill chunks in the budgets. */
static int plan_chunks(en_sched *s, en_step *st)
{
    int tokens = s->cfg.max_step_tokens, logits = s->cfg.max_logit_rows;
    const int groups = s->cfg.groups > 1 ? s->cfg.groups : 1;
    const int most = (s->nrunning + groups - 1) / groups; /* this group's sequences */
    st->nchunks = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->nrunning && tokens > 0 && st->nchunks < most; i++) {
            en_seq *seq = s->running[i];
            const int pos0 = seq->cached + seq->inflight, rem = seq->ntok - pos0;
            if ((seq->busy && (seq->score || seq->cancelled || seq->ending != PE_OK)) ||
                rem <= 0 || (pass == 0) != (rem == 1))
                continue; /* (a busy sequence has a chunk to send only mid-prompt) */
            int n = rem < tokens ? rem : tokens;
            if (rem > 1 && s->cfg.prefill_chunks > 1 && !seq->score) { /* a micro-batch */
                if (!seq->chunk)
                    seq->chunk = (rem + s->cfg.prefill_chunks - 1) / s->cfg.prefill_chunks;
                n = n < seq->chunk ? n : seq->chunk;
            }
            if (seq->score && seq->all_positions && n > logits)
                n = logits;
            int nl = chunk_logits(seq, pos0, n);
            if (nl > logits) { /* no logit row left: prefill all but the last token */
                n = rem - 1 < n ? rem - 1 : n;
                nl = 0;
            }
            if (n <= 0)
                continue;
            int draft = pass == 0 && nl ? draft_tokens(s, seq, logits - 1 < tokens - 1 ?
                                                                logits - 1 : tokens - 1) : 0;
            if (optimistic(s)) { /* blocks now, or preemptions, or a shorter chunk */
                const int end = take_optimistic(s, st, &i, pos0, pos0 + n);
                if (end == -2)
                    return -1;
                if (end <= pos0)
                    continue;
                n = end - pos0;
                nl = nl < chunk_logits(seq, pos0, n) ? nl : chunk_logits(seq, pos0, n);
                if (draft && (draft = take_draft_blocks(s, seq, end, draft)) < 0)
                    return -1;
            }
            if (grow((void **)&st->chunks, &st->chunks_cap, st->nchunks + 1, sizeof(en_chunk)))
                return -1;
            en_chunk *c = &st->chunks[st->nchunks++];
            *c = (en_chunk){seq, pos0, n + draft, -1, nl + draft, !seq->score && nl > 0, draft};
            s->spec_drafted += draft;
            tokens -= n + draft;
            logits -= nl + draft;
        }
    }
    return 0;
}

/* Takes free blocks until seq's table covers `positions` positions. */
static void take_blocks(en_sched *s, en_seq *seq, int positions)
{
    int need = (positions + s->cfg.block_tokens - 1) / s->cfg.block_tokens;
    while (seq->nblocks < need) /* the promise guarantees them (PE_KV_PREEMPT: taken) */
        seq->blocks[seq->nblocks++] = en_kv_take(&s->kv);
}

int en_step_reserve(en_step *st, int ntok, int nchunks, int nbt, int nlogits, int npen,
                    int nmask, int mask_words, int topk)
{
    en_meta_layout L = en_meta_layout_of(ntok, nchunks, nbt, nlogits, npen, nmask, mask_words);
    if (L.words > st->meta_cap) {
        int32_t *m = realloc(st->meta, L.words * sizeof *m);
        if (!m)
            return -1;
        st->meta = m;
        st->meta_cap = L.words;
    }
    st->meta_words = L.words;
    if (grow((void **)&st->logit_dst, &st->logit_cap, nlogits, sizeof(float *)))
        return -1;
    if (nlogits > st->out_cap || nlogits * topk > st->out_topk_cap) {
        int cap = nlogits > st->out_cap ? nlogits : st->out_cap;
        int tcap = nlogits * topk > st->out_topk_cap ? nlogits * topk : st->out_topk_cap;
        int32_t *t = realloc(st->out_tokens, (size_t)cap * sizeof *t);
        if (t) st->out_tokens = t;
        float *l = t ? realloc(st->out_logit, (size_t)cap * sizeof *l) : NULL;
        if (l) st->out_logit = l;
        float *e = l ? realloc(st->out_lse, (size_t)cap * sizeof *e) : NULL;
        if (e) st->out_lse = e;
        float *g = e ? realloc(st->out_target, (size_t)cap * sizeof *g) : NULL;
        if (g) st->out_target = g;
        int32_t *tp = g ? realloc(st->out_top, (size_t)(tcap ? tcap : 1) * sizeof *tp) : NULL;
        if (tp) st->out_top = tp;
        float *tv = tp ? realloc(st->out_topv, (size_t)(tcap ? tcap : 1) * sizeof *tv) : NULL;
        if (tv) st->out_topv = tv;
        if (!tv)
            return -1;
        st->out_cap = cap;
        st->out_topk_cap = tcap;
    }
    return 0;
}

int en_sched_build(en_sched *s, en_step *st)
{
    admit(s);
    const long preempted = s->preemptions;
    if (plan_chunks(s, st) != 0)
        return -1;
    if (st->nchunks == 0 && s->preemptions != preempted) { /* a sequence preempted itself */
        admit(s);
        if (plan_chunks(s, st) != 0)
            return -1;
    }
    if (st->nchunks == 0)
        return 0;
    int ntok = 0, nbt = 0, nlogits = 0, npen = 0, nmask = 0, topk = 0;
    const int B = s->cfg.block_tokens, words = (int)tx_mask_words((size_t)s->cfg.vocab);
    for (int i = 0; i < st->nchunks; i++) {
        en_chunk *c = &st->chunks[i];
        en_seq *seq = c->seq;
        int end = c->pos0 + c->n;
        int need = (end + B - 1) / B;
        if (grow((void **)&seq->blocks, &seq->blocks_cap, need, sizeof(int32_t)))
            return -1;
        take_blocks(s, seq, end);
        c->logit0 = c->nlogits ? nlogits : -1;
        ntok += c->n;
        nbt += need;
        nlogits += c->nlogits;
        if (c->sample && seq->logprobs > topk)
            topk = seq->logprobs;
        if (seq->score_lp && c->nlogits && (seq->score_top > topk || topk == 0))
            topk = seq->score_top > 1 ? seq->score_top : 1; /* at least the lse */
        if (c->sample && en_penalties_on(&seq->sampling)) { /* at most a distinct token each,
                                                              * a row's drafts before it too */
            if (en_counts_update(&seq->counts, seq->tokens, seq->ntok + c->draft,
                                 seq->prompt_len) != 0)
                return -1; /* (the drafts' ids, counted here once, stay for the rows below) */
            en_counts_forget(&seq->counts, seq->tokens, seq->ntok);
            npen += (seq->counts.n + c->draft) * (1 + c->draft);
        }
        if (c->sample) /* (a later row bans no more than the first) */
            npen += (seq->nbias + banned_tokens(s, seq, seq->generated, NULL)) * (1 + c->draft);
        if (c->sample && seq->grammar) {
            nmask += 1 + c->draft;
            if (!seq->last_mask)
                seq->last_mask = malloc((size_t)words * sizeof(uint32_t));
            if (!seq->last_mask)
                return -1; /* (before any sequence is marked busy) */
        }
    }
    if (en_step_reserve(st, ntok, st->nchunks, nbt, nlogits, npen, nmask, words, topk) != 0)
        return -1;
    en_meta_layout L = en_meta_layout_of(ntok, st->nchunks, nbt, nlogits, npen, nmask, words);
    int32_t *m = st->meta;
    pe_k_sampling *samp = (pe_k_sampling *)(void *)(m + L.sampling);
    pe_k_penalty *pen = (pe_k_penalty *)(void *)(m + L.penalties);
    uint32_t *masks = (uint32_t *)(void *)(m + L.masks);
    int32_t *row_masks = m + L.row_masks;
    npen = 0;
    nmask = 0;
    int row = 0, bt = 0, lr = 0;
    st->max_keys = 0;
    st->sample = 0;
    st->targeted = 0;
    for (int i = 0; i < st->nchunks; i++) {
        const en_chunk *c = &st->chunks[i];
        en_seq *seq = c->seq;
        int32_t *ch = m + L.chunks + (size_t)i * PE_K_CHUNK_FIELDS;
        ch[PE_K_CHUNK_ROW0] = row;
        ch[PE_K_CHUNK_N] = c->n;
        ch[PE_K_CHUNK_POS0] = c->pos0;
        ch[PE_K_CHUNK_BT] = bt;
        int need = (c->pos0 + c->n + B - 1) / B;
        memcpy(m + L.block_tables + bt, seq->blocks, (size_t)need * sizeof(int32_t));
        bt += need;
        for (int k = 0; k < c->n; k++, row++) {
            int p = c->pos0 + k;
            m[L.tokens + row] = seq->tokens[p];
            m[L.positions + row] = p;
            m[L.slots + row] = seq->blocks[p / B] * B + p % B;
        }
        if (c->pos0 + c->n > st->max_keys)
            st->max_keys = c->pos0 + c->n;
        tx_grammar_state g = seq->gstate; /* a grammar's: after the drafts before row k */
        for (int k = 0; k < c->nlogits; k++, lr++) {
            int r = row - c->nlogits + k; /* the chunk's last nlogits rows */
            int p = c->pos0 + c->n - c->nlogits + k;
            m[L.logit_rows + lr] = r;
            m[L.targets + lr] = lr * s->cfg.vocab; /* token 0: read, not used */
            st->logit_dst[lr] = NULL;
            if (seq->score_lp && p + 1 < seq->ntok) {
                m[L.targets + lr] += seq->tokens[p + 1];
                st->targeted = 1;
            } else if (seq->score && !seq->score_lp)
                st->logit_dst[lr] = seq->score_out +
                                    (seq->all_positions ? (size_t)p * (size_t)s->cfg.vocab : 0);
            pe_k_sampling sp = {0.0f, 0, 1.0f, 0.0f, 0.0f};
            if (c->sample) {
                sp.temperature = seq->sampling.temperature;
                sp.top_k = seq->sampling.top_k;
                sp.top_p = seq->sampling.top_p;
                sp.min_p = seq->sampling.min_p;
                /* row k of 1 + draft draws the draw of generated token `generated + k` */
                sp.u = pe_k_uniform(seq->sampling.seed, (uint64_t)(seq->generated + k));
                st->sample = 1;
                const en_counts *counts = NULL;
                if (en_penalties_on(&seq->sampling)) { /* row k: with drafts 1 .. k counted
                                                        * (their ids are in: no allocation) */
                    (void)en_counts_update(&seq->counts, seq->tokens, seq->ntok + k,
                                           seq->prompt_len);
                    counts = &seq->counts;
                }
                const int first = npen;
                npen += en_counts_entries(counts, &seq->sampling, seq->bias, seq->nbias, lr,
                                          pen + npen);
                int32_t ban[PE_MAX_STOP + EN_MAX_EOS];
                const int nban = banned_tokens(s, seq, seq->generated + k, ban);
                npen = first + en_ban_tokens(pen + first, npen - first, ban, nban, lr);
            }
            samp[lr] = sp;
            if (L.masks > L.row_masks) /* the step has masks: every row says whether it has */
                row_masks[lr] = c->sample && seq->grammar ? nmask : -1;
            if (c->sample && seq->grammar) { /* row k: after drafts 1 .. k */
                grammar_mask(s, seq, &g, masks + (size_t)nmask * (size_t)words, words);
                nmask++;
                if (k < c->draft) /* (draft_tokens took each) */
                    (void)tx_grammar_accept(seq->grammar, &g, seq->tokens[seq->ntok + k]);
            }
        }
        if (c->draft && en_penalties_on(&seq->sampling)) /* counted for its rows only */
            en_counts_forget(&seq->counts, seq->tokens, seq->ntok);
        seq->busy++;
        seq->inflight += c->n;
    }
    st->ntok = ntok;
    st->nbt = nbt;
    st->nlogits = nlogits;
    st->npen = npen; /* entries that change a logit: the meta ends after them */
    st->nmask = nmask;
    st->mask_words = words;
    st->meta_words = en_meta_layout_of_step(st).words;
    st->topk = topk;
    st->status = PE_OK;
    return 1;
}

/* ---- taking a step back ------------------------------------------------------------------- */

static int is_eos(const en_sched *s, const en_seq *seq, int32_t t)
{
    if (seq->ignore_eos)
        return 0;
    for (int i = 0; i < s->cfg.neos; i++)
        if (s->cfg.eos[i] == t)
            return 1;
    return 0;
}

static int is_stop(const en_seq *seq, int32_t t)
{
    for (int i = 0; i < seq->nstop; i++)
        if (seq->stop[i] == t)
            return 1;
    return 0;
}

/* The token sampled for seq at logit row r: appended, its event emitted; the sequence ends
 * when the token or its length says so (then 1: seq is gone). */
static int take_token(en_sched *s, en_seq *seq, const en_step *st, int r)
{
    int32_t t = st->out_tokens[r];
    seq->tokens[seq->ntok++] = t;
    pe_token_event ev = event_of(seq, PE_FINISH_NONE, PE_OK);
    ev.token = t;
    ev.index = seq->generated++;
    if (seq->logprobs > 0 && st->topk > 0) {
        float lse = st->out_lse[r];
        ev.logprob = st->out_logit[r] - lse;
        ev.nlogprobs = seq->logprobs < st->topk ? seq->logprobs : st->topk;
        for (int j = 0; j < ev.nlogprobs; j++) {
            ev.top_tokens[j] = st->out_top[(size_t)r * (size_t)st->topk + (size_t)j];
            ev.top_logprobs[j] = st->out_topv[(size_t)r * (size_t)st->topk + (size_t)j] - lse;
        }
    }
    const int ends_text = seq->grammar && is_eos(s, seq, t) &&
                          tx_grammar_may_end(seq->grammar, &seq->gstate);
    if (seq->grammar && !ends_text && tx_grammar_accept(seq->grammar, &seq->gstate, t) != 0) {
        /* only where its mask allowed nothing: no token of the vocabulary continues the text */
        pe_token_event stuck = event_of(seq, PE_FINISH_ERROR, PE_EINVAL);
        finish(s, seq, &stuck);
        return 1;
    }
    if (is_eos(s, seq, t))
        ev.finish = PE_FINISH_EOS;
    else if (is_stop(seq, t))
        ev.finish = PE_FINISH_STOP;
    else if (seq->grammar && tx_grammar_done(seq->grammar, &seq->gstate))
        ev.finish = PE_FINISH_GRAMMAR;
    else if (seq->generated >= seq->max_tokens || seq->ntok >= s->cfg.context ||
             seq->ntok >= seq->cap)
        ev.finish = PE_FINISH_LENGTH;
    if (ev.finish != PE_FINISH_NONE) {
        finish(s, seq, &ev);
        return 1;
    }
    if (s->emit(s->emit_ctx, seq, &ev) != PE_OK) {
        pe_token_event lost = event_of(seq, PE_FINISH_ERROR, PE_ENOMEM);
        finish(s, seq, &lost);
        return 1;
    }
    return 0;
}

/* A decode's tokens back: its last row's token; with drafts, row k's token after row k - 1
 * sampled draft k (every row's input was then the sequence's own), up to the first row that
 * sampled another token, which is taken too. An accepted draft's keys and values were
 * computed from the right tokens, so its position counts as cached; a rejected one's are
 * written over when its position is computed again. */
static void take_tokens(en_sched *s, en_seq *seq, const en_step *st, const en_chunk *c)
{
    const int r0 = c->logit0 + c->nlogits - 1 - c->draft;
    for (int k = 0;; k++) { /* draft k + 1 is at tokens[ntok] until row k's token is */
        const int hit = k < c->draft && st->out_tokens[r0 + k] == seq->tokens[seq->ntok];
        s->spec_accepted += hit;
        if (take_token(s, seq, st, r0 + k) || !hit)
            return;
        seq->cached++;
        register_blocks(s, seq);
    }
}

/* A scored prompt's chunk back (pe_score_logprobs): each of its logit rows, at position p,
 * gives entry p, token p + 1's (the last position has no next token). */
static void take_logprobs(en_seq *seq, const en_step *st, const en_chunk *c)
{
    const size_t K = (size_t)st->topk;
    for (int k = 0; k < c->nlogits; k++) {
        const int r = c->logit0 + k, p = c->pos0 + c->n - c->nlogits + k;
        if (p + 1 >= seq->ntok)
            continue;
        pe_logprobs *lp = &seq->score_lp[p];
        const float lse = st->out_lse[r];
        lp->token = seq->tokens[p + 1];
        lp->logprob = st->out_target[r] - lse;
        lp->nlogprobs = seq->score_top < st->topk ? seq->score_top : st->topk;
        for (int j = 0; j < lp->nlogprobs; j++) {
            lp->top_tokens[j] = st->out_top[(size_t)r * K + (size_t)j];
            lp->top_logprobs[j] = st->out_topv[(size_t)r * K + (size_t)j] - lse;
        }
    }
}

void en_sched_complete(en_sched *s, en_step *st)
{
    for (int i = 0; i < st->nchunks; i++) {
        const en_chunk *c = &st->chunks[i];
        en_seq *seq = c->seq;
        seq->busy--;
        seq->inflight -= c->n;
        if (st->status != PE_OK && seq->ending == PE_OK)
            seq->ending = st->status;
        if (st->status == PE_OK) { /* (a decode's drafts count once accepted: take_tokens) */
            seq->cached += c->n - c->draft;
            register_blocks(s, seq);
        }
        if (seq->busy > 0) /* more of its prompt is out: it goes on when that is back */
            continue;
        if (seq->cached == seq->ntok || seq->ending != PE_OK)
            seq->chunk = 0; /* the prompt is in: a later one (an append) is cut anew */
        if (seq->ending != PE_OK) {
            end_with(s, seq, PE_FINISH_ERROR, seq->ending);
        } else if (seq->cancelled) {
            end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        } else if (seq->score) {
            if (seq->score_lp)
                take_logprobs(seq, st, c);
            if (seq->cached == seq->ntok)
                end_with(s, seq, PE_FINISH_LENGTH, PE_OK);
        } else if (c->sample) {
            take_tokens(s, seq, st, c);
        }
    }
    st->nchunks = 0;
}
