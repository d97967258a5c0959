/* scheduler.h: one replica's scheduler: which sequences run, which wait, which KV blocks
 * each holds, and what the next step computes. Pure logic, no threads: the replica's
 * thread (replica.c) drives it, and tests drive it directly.
 *
 * A sequence is a prompt plus the tokens generated so far; `cached` of them have their keys
 * and values in the replica's KV cache. A step is a batch of chunks, each a run of a
 * sequence's uncached tokens: decodes first (one token each), then prefill chunks up to the
 * step's token budget (chunked prefill: a long prompt takes several steps, and never
 * freezes the decodes of the others). A chunk that reaches the end of its sequence's known
 * tokens yields a logit row, from which the device samples the next token. Under PP several
 * steps are in flight (one a stage); a prompt's next chunk may go in the next step while
 * the previous one is still in the pipeline (the stages run steps in order, so its keys are
 * cached at each stage before the next chunk reads them): the prompt's chunks are PP's
 * micro-batches.
 *
 * KV memory, by cfg.kv_full:
 *   - PE_KV_WAIT and PE_KV_REFUSE (promises): a sequence is admitted (first come, first
 *     served) only when the replica can promise it every block it may need (prompt +
 *     max_tokens, capped by the context); blocks are then taken as its positions grow, and
 *     all return when it ends. So a running sequence never runs out of blocks. A sequence
 *     whose promise does not fit waits (PE_KV_WAIT) or ends with PE_EAGAIN (PE_KV_REFUSE).
 *   - PE_KV_PREEMPT (optimistic, as vLLM): a sequence is admitted when the blocks of its
 *     known tokens are free (less a watermark of 1% of the pool while others run). Blocks
 *     are taken as positions grow; when none is left, kept sequences parked with blocks let
 *     them go first, then the newest running sequence not in a step is preempted: its blocks
 *     are let go, and it goes back to the front of the queue with its tokens (prompt and
 *     generated ones), to be computed again when it is admitted again (recompute; its next
 *     draw is the one it would have had). A prefill chunk is cut to the blocks there are.
 *     With cfg.prefix_caching, full blocks are registered by content (kv_blocks.h), and an
 *     admitted sequence starts from the longest run of its first blocks found there (all
 *     but its last token: that one gives the logits), held by reference: identical prompt
 *     prefixes share their blocks, and a preempted or parked sequence finds its own again.
 * In every mode a sequence only writes positions past the blocks it shares, and never
 * touches another's.
 *
 * Drafts (cfg.spec_tokens, speculate.h): a decode may carry drafts after its last token,
 * written after the sequence's tokens; its chunk has a sampling logit row per token, row k
 * drawing generated token generated + k's draw. Back, its tokens are taken up to the first
 * row whose token is not the draft after it: accepted drafts count as cached, a rejected
 * one's keys and values are written over later. A draft's blocks come from the promise
 * (drafts stop short of max_tokens and the context) or, under PE_KV_PREEMPT, only from
 * blocks left above the watermark: a draft never preempts.
 *
 * Grammars (pe_seq_params.grammar, text/grammar.h: structured output): every row that
 * samples a grammar's sequence carries the mask of the ids that keep its text in the
 * grammar (a draft's row: after the drafts before it), made from the sequence's state as
 * the step is built; its drafts stop at the first one the grammar refuses, and the token
 * that completes its text ends it (PE_FINISH_GRAMMAR). Where the text is complete but may
 * go on (a regex's match), the mask allows the model's eos ids too, and an eos sampled
 * there ends it (PE_FINISH_EOS).
 *
 * Kept sequences (pe_seq_params.keep): after its final event such a sequence is parked
 * with its tokens and its blocks (its promise shrinks to the blocks it holds), until an
 * append (more tokens, then a new generation over the cached prefix: a chat's next turn)
 * or a release. An append is admitted as a new sequence is, promised only the blocks it
 * does not hold yet.
 */
#ifndef PE_ENGINE_SCHEDULER_H
#define PE_ENGINE_SCHEDULER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kv_blocks.h"
#include "engine/penalties.h"
#include "kernels/sample.h"
#include "pengine/pengine.h"
#include "text/grammar.h"

/* What travels through a replica's inbox: each message starts with its kind. */
typedef enum en_msg_kind {
    EN_MSG_SEQ = 1, /* a new sequence (en_seq) */
    EN_MSG_CANCEL,  /* a cancel request (en_cancel) */
    EN_MSG_STEP,    /* a step back from the workers (en_step) */
    EN_MSG_WAKE,    /* look at the engine's state (failure, stop) */
    EN_MSG_APPEND,  /* tokens and a new generation for a kept sequence (en_seq) */
    EN_MSG_RELEASE  /* a kept sequence's blocks back (en_cancel) */
} en_msg_kind;

typedef struct en_msg {
    en_msg_kind kind;
} en_msg;

typedef struct en_cancel {
    en_msg hdr;
    uint64_t id;
} en_cancel;

/* pe_score's caller, waiting for its sequence (engine sync_mu / sync_cv). */
typedef struct en_score_sync {
    atomic_int done;
    pe_status status;
} en_score_sync;

/* The id of a pe_score prompt: no client is given it, so none can cancel it. */
#define EN_SCORE_ID UINT64_MAX

/* Most end-of-sequence ids of a model (config.json's eos_token_id may be a list). */
#define EN_MAX_EOS 8

typedef struct en_seq {
    en_msg hdr;
    uint64_t id;
    int32_t *tokens;     /* (cap) the prompt, then the generated tokens; while a decode
                          * with drafts is in a step, its drafts follow them */
    int ntok, cap;
    int prompt_len;
    int cached;          /* positions whose K and V are in the cache */
    int generated;
    int max_tokens;
    int min_tokens;      /* its eos and stop tokens are banned until it has generated these */
    pe_sampling sampling;
    en_counts counts;    /* its tokens' counts, for the penalties (when sampling has any) */
    pe_logit_bias *bias; /* (nbias) its logit bias, sorted by token */
    int nbias;
    int logprobs;
    int32_t stop[PE_MAX_STOP];
    int nstop;
    int ignore_eos;
    const pe_grammar *grammar; /* structured output: its tokens keep the text in this
                          * grammar, and it ends when the text is complete; NULL: none */
    tx_grammar_state gstate; /* its place in the grammar, after its generated tokens */
    uint32_t *last_mask; /* (mask words) the last mask made for it, in state last_state
                          * (when last_made): a long string's steps all have the same */
    tx_grammar_state last_state;
    int last_made;
    int keep;            /* parked after its final event, for an append */
    int tracked;         /* in the engine's table of kept sequences (it was kept once) */
    void *user;
    /* scoring (pe_score): logits instead of tokens */
    int score;
    int all_positions;
    float *score_out;    /* (n or 1, vocab) the caller's; NULL with score_lp */
    pe_logprobs *score_lp; /* (n - 1) the caller's (pe_score_logprobs): each next token's
                          * log-probability and the score_top most likely tokens */
    int score_top;
    en_score_sync *sync;
    /* the scheduler's */
    int32_t *blocks;     /* (nblocks) block table: position p is in blocks[p / block_tokens] */
    int nblocks, blocks_cap;
    int promised;        /* blocks promised at admission (held or still to take) */
    int busy;            /* steps holding a chunk of it that are not back (PP: a prompt's
                          * chunks stream through the stages in several steps at once) */
    int inflight;        /* its positions in those steps: the next chunk starts at cached +
                          * inflight */
    int chunk;           /* the prefill chunk of its prompt (prefill_chunks > 1), set when
                          * the prompt starts; 0: none yet */
    int nreg;            /* PE_KV_PREEMPT: its first blocks registered in the prefix cache
                          * (or found there); -1: an equal block was registered first, so
                          * its chain is not */
    int preemptions;     /* times it was preempted */
    pe_status ending;    /* end_all came while it was busy: it ends with this when back */
    int cancelled;
    struct en_seq *parked_next; /* the scheduler's list of kept sequences */
} en_seq;

/* One chunk of a step: n tokens of seq from position pos0. */
typedef struct en_chunk {
    en_seq *seq;
    int pos0, n;
    int logit0;          /* its first logit row, -1 when it has none */
    int nlogits;         /* logit rows: 0, 1 (its last token), or n (scoring all positions,
                          * or a decode with drafts) */
    int sample;          /* 1: its last 1 + draft logit rows sample the sequence's next
                          * tokens */
    int draft;           /* a decode with drafts (cfg.spec_tokens): its last token, then
                          * `draft` drafted ones (speculate.h), each row sampling the token
                          * after its own: n = nlogits = 1 + draft */
} en_chunk;

/* A step as the scheduler builds it and the workers read it; results come back in it.
 * The int32 metadata the device needs is one array, copied in one call. */
typedef struct en_step {
    en_msg hdr;
    int ntok, nchunks, nlogits, nbt;
    int npen;             /* penalized logits (pe_k_penalty entries) */
    int nmask;            /* grammar masks (structured output), mask_words words each */
    int mask_words;
    int32_t max_keys;
    int topk;             /* largest logprobs of its rows (0: no top-k) */
    int sample;           /* any row samples */
    int targeted;         /* any row reads a given token's logit (pe_score_logprobs) */
    /* meta: tokens (ntok) | positions (ntok) | slots (ntok) | chunks (nchunks x
     * PE_K_CHUNK_FIELDS) | block tables (nbt) | logit rows (nlogits) | targets (nlogits:
     * row r's given token as r x vocab + id, md_step.targets) | sampling
     * (nlogits x 5 words: pe_k_sampling) | the mask of each logit row (nlogits: an index
     * into masks, -1 none; only when nmask > 0) | masks (nmask x mask_words: bits of the
     * vocabulary, sample.h's pe_k_mask_rows) | penalties (npen x 5 words: pe_k_penalty) */
    int32_t *meta;
    size_t meta_words, meta_cap;
    en_chunk *chunks;     /* (nchunks) */
    int chunks_cap;
    float **logit_dst;    /* (nlogits) host row for each logit row (scoring), or NULL */
    int logit_cap;
    /* results (nlogits) */
    int32_t *out_tokens;
    float *out_logit;     /* the sampled token's logit */
    int32_t *out_top;     /* (nlogits, topk) */
    float *out_topv;      /* (nlogits, topk) */
    float *out_lse;       /* log-sum-exp of each logit row */
    float *out_target;    /* the given token's logit (targeted) */
    int out_cap, out_topk_cap;
    pe_status status;     /* PE_OK, or why the step failed (the engine keeps the message) */
    /* for the trace, set by the replica when it sends the step out */
    uint64_t number;      /* the replica's steps before this one */
    int group;            /* its step buffer: the group in flight */
    int prefill;          /* 1: a chunk holds prompt tokens; 0: decodes only */
} en_step;

/* Offsets of the sections of en_step.meta, in int32 words. */
typedef struct en_meta_layout {
    size_t tokens, positions, slots, chunks, block_tables, logit_rows, targets, sampling,
        penalties, row_masks, masks, words;
} en_meta_layout;
en_meta_layout en_meta_layout_of(int ntok, int nchunks, int nbt, int nlogits, int npen,
                                 int nmask, int mask_words);
/* The layout of a step built (its shape's fields). */
en_meta_layout en_meta_layout_of_step(const en_step *st);

void en_step_free(en_step *st);
/* Room in st for a step of that shape (meta_words set; chunks not touched); -1 when out of
 * memory. */
int en_step_reserve(en_step *st, int ntok, int nchunks, int nbt, int nlogits, int npen,
                    int nmask, int mask_words, int topk);

typedef struct en_sched_config {
    int block_tokens;     /* positions per KV block */
    int nblocks;          /* blocks in the pool */
    int max_seqs;         /* running at once */
    int max_step_tokens;  /* token budget of a step */
    int max_logit_rows;   /* logit rows of a step */
    int groups;           /* steps in flight at once (PP: one per stage), each taking at most
                           * 1/groups of the running sequences; 0 or 1: one step, all of them */
    int prefill_chunks;   /* m > 1: a prompt is cut into m chunks, which stream through the
                           * steps in flight (a lone prompt fills the pipeline: micro-batches);
                           * 0 or 1: a prefill chunk is as long as the step's budget allows */
    int context;          /* positions a sequence may hold */
    int vocab;            /* logits per row (a scored sequence's rows) */
    pe_kv_full kv_full;
    int prefix_caching;   /* PE_KV_PREEMPT: share full blocks by content */
    int32_t eos[EN_MAX_EOS];
    int neos;
    int spec_tokens;      /* drafts a decode may carry (speculate.h); 0: none */
    int spec_max_seqs;    /* ... only while at most this many run; 0: any number */
    int spec_ngram_min, spec_ngram_max; /* the n-grams looked up for them */
} en_sched_config;

/* A final or token event for the engine (the scheduler does not know where it goes). A
 * final event is always delivered; a token event that cannot be (PE_ENOMEM) ends its
 * sequence with that error. */
typedef pe_status (*en_emit_fn)(void *ctx, en_seq *seq, const pe_token_event *ev);

typedef struct en_sched {
    en_sched_config cfg;
    en_kv_pool kv;        /* the blocks: free, held, cached */
    int promised;         /* blocks promised to running sequences (held or to take); 0 under
                           * PE_KV_PREEMPT, which promises nothing */
    en_seq **waiting;     /* FIFO ring (waiting_cap) */
    int waiting_head, nwaiting, waiting_cap;
    en_seq **running;     /* (max_seqs) in admission order */
    int nrunning;
    en_seq *parked;       /* kept sequences between their final event and an append */
    en_emit_fn emit;
    void *emit_ctx;
    /* counts, for the engine's figures */
    long preemptions;     /* sequences preempted */
    long prefix_hit_tokens; /* positions found in the prefix cache at admission */
    long prefix_asked_tokens; /* positions looked up there (all but the last of each) */
    long spec_drafted;    /* draft tokens sent to the device */
    long spec_accepted;   /* ... of them equal to the token sampled in their place */
} en_sched;

pe_status en_sched_init(en_sched *s, const en_sched_config *cfg, en_emit_fn emit, void *ctx);
/* Frees the scheduler's memory; every sequence must have ended (en_sched_end_all). */
void en_sched_free(en_sched *s);

/* Blocks a sequence may need: its positions whose keys and values are stored, the prompt
 * and every generated token but the last, capped by the context (scoring: every token). */
int en_sched_blocks_needed(const en_sched_config *cfg, const en_seq *seq);
/* Blocks free and not promised (PE_KV_PREEMPT: free or cached): the room a new sequence
 * sees. */
int en_sched_room(const en_sched *s);
/* Blocks held by sequences (running or parked). */
int en_sched_blocks_held(const en_sched *s);
/* Blocks the waiting sequences will need, in all. */
int en_sched_waiting_need(const en_sched *s);
int en_sched_sequences(const en_sched *s);

/* Queues a new sequence. It may end at once (PE_KV_REFUSE and no room) with its event. */
void en_sched_add(en_sched *s, en_seq *seq);
/* 1 when seq stays parked after its final event ev (it asked to be kept, and ev is not an
 * engine failure: a refusal for room, PE_EAGAIN, keeps it too). */
int en_sched_keeps(const en_seq *seq, const pe_token_event *ev);
/* Appends the tokens of `more` (an en_seq holding only them, and the new generation's
 * parameters) to the parked sequence more->id and queues it to generate again; frees
 * more. PE_EINVAL when no such sequence is parked or the tokens reach the context,
 * PE_ENOMEM when its tokens cannot grow: then nothing changed but the free of more. */
pe_status en_sched_append(en_sched *s, en_seq *more);
/* Frees the parked sequence id and its blocks; PE_EINVAL when none is parked. */
pe_status en_sched_release(en_sched *s, uint64_t id);
/* Marks sequence id cancelled; one not in a step ends now with its CANCELLED event. */
void en_sched_cancel(en_sched *s, uint64_t id);
/* Ends every sequence not in a step with `why` (its ERROR event); the ones in a step end
 * when it comes back. Parked sequences are freed (their final event is out). */
void en_sched_end_all(en_sched *s, pe_status why);
/* 1 when a step could be built now (something waits to run and is not busy). Under
 * PE_KV_PREEMPT a build may still find no blocks for it, and wait for a step to return. */
int en_sched_has_work(const en_sched *s);

/* Builds the next step into st (admitting waiting sequences first). Returns 0 when there
 * is nothing to run, 1 when st holds a step, or -1 when out of host memory. */
int en_sched_build(en_sched *s, en_step *st);
/* Takes a step back: on success each chunk's sequence advances (cached positions, the
 * sampled token and its event, finished sequences end and free their blocks); on failure
 * its sequences end with the step's error. */
void en_sched_complete(en_sched *s, en_step *st);

/* Frees a sequence's memory (not its blocks: the scheduler returns those). */
void en_seq_free(en_seq *seq);

#endif
