/* scheduler_step.c: a replica's steps (scheduler.h): building one (decodes first, then
 * prefill chunks in the budgets; blocks; the meta the devices read) and taking it back
 * (tokens appended and emitted, sequences that end). */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler_internal.h"
#include "engine/speculate.h"
#include "kernels/attention.h"

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
            if (en_sched_optimistic(s)) { /* blocks now, or preemptions, or a shorter chunk */
                const int end = en_sched_take_optimistic(s, st, &i, pos0, pos0 + n);
                if (end == -2)
                    return -1;
                if (end <= pos0)
                    continue;
                n = end - pos0;
                nl = nl < chunk_logits(seq, pos0, n) ? nl : chunk_logits(seq, pos0, n);
                if (draft && (draft = en_sched_take_draft_blocks(s, seq, end, draft)) < 0)
                    return -1;
            }
            if (en_grow((void **)&st->chunks, &st->chunks_cap, st->nchunks + 1, sizeof(en_chunk)))
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


int en_sched_build(en_sched *s, en_step *st)
{
    en_sched_admit(s);
    const long preempted = s->preemptions;
    if (plan_chunks(s, st) != 0)
        return -1;
    if (st->nchunks == 0 && s->preemptions != preempted) { /* a sequence preempted itself */
        en_sched_admit(s);
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
        if (en_grow((void **)&seq->blocks, &seq->blocks_cap, need, sizeof(int32_t)))
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
    pe_token_event ev = en_sched_event_of(seq, PE_FINISH_NONE, PE_OK);
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
        pe_token_event stuck = en_sched_event_of(seq, PE_FINISH_ERROR, PE_EINVAL);
        en_sched_finish(s, seq, &stuck);
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
        en_sched_finish(s, seq, &ev);
        return 1;
    }
    if (s->emit(s->emit_ctx, seq, &ev) != PE_OK) {
        pe_token_event lost = en_sched_event_of(seq, PE_FINISH_ERROR, PE_ENOMEM);
        en_sched_finish(s, seq, &lost);
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
        en_sched_register_blocks(s, seq);
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
            en_sched_register_blocks(s, seq);
        }
        if (seq->busy > 0) /* more of its prompt is out: it goes on when that is back */
            continue;
        if (seq->cached == seq->ntok || seq->ending != PE_OK)
            seq->chunk = 0; /* the prompt is in: a later one (an append) is cut anew */
        if (seq->ending != PE_OK) {
            en_sched_end_with(s, seq, PE_FINISH_ERROR, seq->ending);
        } else if (seq->cancelled) {
            en_sched_end_with(s, seq, PE_FINISH_CANCELLED, PE_OK);
        } else if (seq->score) {
            if (seq->score_lp)
                take_logprobs(seq, st, c);
            if (seq->cached == seq->ntok)
                en_sched_end_with(s, seq, PE_FINISH_LENGTH, PE_OK);
        } else if (c->sample) {
            take_tokens(s, seq, st, c);
        }
    }
    st->nchunks = 0;
}
