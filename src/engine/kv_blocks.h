/* kv_blocks.h: a replica's pool of KV blocks, as its scheduler hands them out: reference
 * counts, and the prefix cache. Pure bookkeeping on block ids (the workers hold the memory,
 * one pool per worker, all indexed alike); the replica's thread alone touches it.
 *
 * A block is free, held (ref > 0: in the block tables of ref sequences), or cached: held by
 * no one but remembered by its content, to be held again by a sequence whose tokens start
 * the same way (prefix caching, as vLLM's automatic prefix caching).
 *
 * The prefix cache: a full block (block_tokens positions, all computed) is registered under
 * its key, (the block before it in the table, that block's epoch, its tokens). A block's
 * epoch changes each time it is handed out anew, so a key names one chain of content from
 * position 0 and nothing else: a lookup that follows a sequence's tokens block by block finds
 * exactly the blocks whose keys and values those tokens give (the hash only finds the
 * bucket; the key is compared whole). A cached block returns to use when a lookup finds it;
 * when no block is free, the least recently released one is evicted (unregistered) and
 * handed out. Blocks are released from the end of a table first, so a chain is evicted from
 * its tail and its first blocks, the ones most shared, stay longest.
 */
#ifndef PE_ENGINE_KV_BLOCKS_H
#define PE_ENGINE_KV_BLOCKS_H

#include <stdint.h>

#include "pengine/pengine.h"

typedef struct en_kv_pool {
    int nblocks, block_tokens;
    int caching;          /* 1: full blocks are registered and found again */
    int32_t *free;        /* (nblocks) ids neither held nor cached, a stack */
    int nfree;
    int32_t *ref;         /* (nblocks) block tables holding each block */
    /* the prefix cache: registered blocks, by key */
    uint8_t *registered;  /* (nblocks) */
    uint32_t *epoch;      /* (nblocks) times handed out */
    int32_t *parent;      /* (nblocks) the block before it in its chain, -1 for the first */
    uint32_t *parent_epoch; /* (nblocks) that block's epoch when this one was registered */
    int32_t *tokens;      /* (nblocks, block_tokens) the tokens of a registered block */
    uint64_t *hash;       /* (nblocks) of its key */
    int32_t *bucket;      /* (nbuckets) first registered block of each bucket, -1 none */
    int32_t *bucket_next; /* (nblocks) the next one in its bucket */
    int nbuckets;         /* a power of two */
    /* cached blocks (registered, ref 0), least recently released first */
    int32_t *lru_prev, *lru_next; /* (nblocks) */
    int lru_head, lru_tail, ncached;
} en_kv_pool;

pe_status en_kv_init(en_kv_pool *p, int nblocks, int block_tokens, int caching);
void en_kv_free(en_kv_pool *p);

/* Blocks a sequence could take now: free ones and cached ones. */
int en_kv_available(const en_kv_pool *p);
/* Blocks in block tables. */
int en_kv_held(const en_kv_pool *p);

/* A block for new positions, held once: a free one, else the least recently released
 * cached one (evicted from the cache); -1 when every block is held. */
int32_t en_kv_take(en_kv_pool *p);
/* One more table holds b (a block found by en_kv_lookup: off the cached list). */
void en_kv_hold(en_kv_pool *p, int32_t b);
/* A table lets b go: with no holder left, it is cached when registered, else free. */
void en_kv_put(en_kv_pool *p, int32_t b);

/* The registered block whose content is `tokens` (block_tokens of them) after block
 * `parent` (-1: at position 0), or -1. Nothing changes: hold it to use it. */
int32_t en_kv_lookup(const en_kv_pool *p, int32_t parent, const int32_t *tokens);
/* Registers held block b, full with `tokens` after `parent` (itself registered, or -1).
 * Returns 1, or 0 when caching is off or an equal block is registered already (b stays
 * unregistered and is freed as usual). */
int en_kv_register(en_kv_pool *p, int32_t b, int32_t parent, const int32_t *tokens);

#endif
