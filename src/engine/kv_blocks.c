/* kv_blocks.c: a replica's pool of KV blocks (kv_blocks.h): free stack, reference counts,
 * the prefix cache's buckets and its list of cached blocks. */
#include "engine/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

pe_status en_kv_init(en_kv_pool *p, int nblocks, int block_tokens, int caching)
{
    memset(p, 0, sizeof *p);
    p->nblocks = nblocks;
    p->block_tokens = block_tokens;
    p->caching = caching;
    p->lru_head = p->lru_tail = -1;
    const size_t n = (size_t)(nblocks > 0 ? nblocks : 1);
    p->nbuckets = 1;
    while (p->nbuckets < nblocks)
        p->nbuckets *= 2;
    p->free = malloc(n * sizeof *p->free);
    p->ref = calloc(n, sizeof *p->ref);
    p->registered = calloc(n, sizeof *p->registered);
    p->epoch = calloc(n, sizeof *p->epoch);
    p->parent = malloc(n * sizeof *p->parent);
    p->parent_epoch = malloc(n * sizeof *p->parent_epoch);
    p->tokens = malloc(n * (size_t)(block_tokens > 0 ? block_tokens : 1) * sizeof *p->tokens);
    p->hash = malloc(n * sizeof *p->hash);
    p->bucket = malloc((size_t)p->nbuckets * sizeof *p->bucket);
    p->bucket_next = malloc(n * sizeof *p->bucket_next);
    p->lru_prev = malloc(n * sizeof *p->lru_prev);
    p->lru_next = malloc(n * sizeof *p->lru_next);
    if (!p->free || !p->ref || !p->registered || !p->epoch || !p->parent || !p->parent_epoch ||
        !p->tokens || !p->hash || !p->bucket || !p->bucket_next || !p->lru_prev ||
        !p->lru_next) {
        en_kv_free(p);
        return PE_ENOMEM;
    }
    for (int i = 0; i < nblocks; i++) /* a stack: block 0 comes out first */
        p->free[i] = nblocks - 1 - i;
    p->nfree = nblocks;
    for (int i = 0; i < p->nbuckets; i++)
        p->bucket[i] = -1;
    return PE_OK;
}

void en_kv_free(en_kv_pool *p)
{
    free(p->free);
    free(p->ref);
    free(p->registered);
    free(p->epoch);
    free(p->parent);
    free(p->parent_epoch);
    free(p->tokens);
    free(p->hash);
    free(p->bucket);
    free(p->bucket_next);
    free(p->lru_prev);
    free(p->lru_next);
    memset(p, 0, sizeof *p);
}

int en_kv_available(const en_kv_pool *p) { return p->nfree + p->ncached; }

int en_kv_held(const en_kv_pool *p) { return p->nblocks - p->nfree - p->ncached; }

/* ---- keys ----------------------------------------------------------------------------- */

static uint32_t epoch_of(const en_kv_pool *p, int32_t b) { return b < 0 ? 0 : p->epoch[b]; }

static uint64_t key_hash(int32_t parent, uint32_t parent_epoch, const int32_t *tokens, int n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the key's words */
    h = (h ^ (uint32_t)parent) * 0x100000001b3ull;
    h = (h ^ parent_epoch) * 0x100000001b3ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)tokens[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static int same_key(const en_kv_pool *p, int32_t b, int32_t parent, const int32_t *tokens)
{
    const int B = p->block_tokens;
    return p->parent[b] == parent && p->parent_epoch[b] == epoch_of(p, parent) &&
           !memcmp(p->tokens + (size_t)b * (size_t)B, tokens, (size_t)B * sizeof *tokens);
}

int32_t en_kv_lookup(const en_kv_pool *p, int32_t parent, const int32_t *tokens)
{
    if (!p->caching)
        return -1;
    uint64_t h = key_hash(parent, epoch_of(p, parent), tokens, p->block_tokens);
    for (int32_t b = p->bucket[h & (uint64_t)(p->nbuckets - 1)]; b >= 0; b = p->bucket_next[b])
        if (p->hash[b] == h && same_key(p, b, parent, tokens))
            return b;
    return -1;
}

int en_kv_register(en_kv_pool *p, int32_t b, int32_t parent, const int32_t *tokens)
{
    if (!p->caching || p->registered[b] || en_kv_lookup(p, parent, tokens) >= 0)
        return 0;
    const int B = p->block_tokens;
    p->parent[b] = parent;
    p->parent_epoch[b] = epoch_of(p, parent);
    memcpy(p->tokens + (size_t)b * (size_t)B, tokens, (size_t)B * sizeof *tokens);
    p->hash[b] = key_hash(parent, p->parent_epoch[b], tokens, B);
    int32_t *head = &p->bucket[p->hash[b] & (uint64_t)(p->nbuckets - 1)];
    p->bucket_next[b] = *head;
    *head = b;
    p->registered[b] = 1;
    return 1;
}

static void unregister(en_kv_pool *p, int32_t b)
{
    int32_t *link = &p->bucket[p->hash[b] & (uint64_t)(p->nbuckets - 1)];
    while (*link != b)
        link = &p->bucket_next[*link];
    *link = p->bucket_next[b];
    p->registered[b] = 0;
}

/* ---- the cached list -------------------------------------------------------------------- */

static void lru_push(en_kv_pool *p, int32_t b) /* at the tail: the most recent */
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->ncached++;
}

static void lru_unlink(en_kv_pool *p, int32_t b)
{
    if (p->lru_prev[b] >= 0)
        p->lru_next[p->lru_prev[b]] = p->lru_next[b];
    else
        p->lru_head = p->lru_next[b];
    if (p->lru_next[b] >= 0)
        p->lru_prev[p->lru_next[b]] = p->lru_prev[b];
    else
        p->lru_tail = p->lru_prev[b];
    p->ncached--;
}

/* ---- holding and letting go -------------------------------------------------------------- */

int32_t en_kv_take(en_kv_pool *p)
{
    int32_t b;
    if (p->nfree > 0) {
        b = p->free[--p->nfree];
    } else if (p->lru_head >= 0) {
        b = p->lru_head; /* evicted: its key no longer names it */
        lru_unlink(p, b);
        unregister(p, b);
    } else {
        return -1;
    }
    p->epoch[b]++;
    p->ref[b] = 1;
    return b;
}

void en_kv_hold(en_kv_pool *p, int32_t b)
{
    if (p->ref[b]++ == 0)
        lru_unlink(p, b);
}

void en_kv_put(en_kv_pool *p, int32_t b)
{
    if (--p->ref[b] > 0)
        return;
    if (p->registered[b])
        lru_push(p, b);
    else
        p->free[p->nfree++] = b;
}
