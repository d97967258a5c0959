/* tx_map.h: the two hash tables of the tokenizer, open addressing with linear probing:
 * strings -> ids (the vocabulary) and 64-bit keys -> 64-bit values (merges: a pair of ids ->
 * rank and merged id; the trie's edges). Built once, then read-only: lookups from several
 * threads at once are safe. */
#ifndef PE_TEXT_TX_MAP_H
#define PE_TEXT_TX_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tx_strmap_slot {
    uint64_t hash;
    uint32_t off, len; /* the key: arena[off, off + len) */
    int32_t value;     /* -1: empty slot */
} tx_strmap_slot;

typedef struct tx_strmap {
    tx_strmap_slot *slots; /* (cap), cap a power of two */
    size_t cap, count;
    char *arena;           /* the keys, back to back */
    size_t arena_len, arena_cap;
} tx_strmap;

/* 0 on success, -1 when out of memory. put overwrites the value of an existing key. */
int tx_strmap_init(tx_strmap *m, size_t expected);
int tx_strmap_put(tx_strmap *m, const char *key, size_t len, int32_t value);
/* The value of key, or -1. */
int32_t tx_strmap_get(const tx_strmap *m, const char *key, size_t len);
void tx_strmap_free(tx_strmap *m);

#define TX_PAIR_EMPTY UINT64_MAX

typedef struct tx_pairmap {
    uint64_t *keys;   /* (cap) TX_PAIR_EMPTY when free */
    uint64_t *values; /* (cap) */
    size_t cap, count;
} tx_pairmap;

int tx_pairmap_init(tx_pairmap *m, size_t expected);
/* key must not be TX_PAIR_EMPTY; overwrites the value of an existing key. */
int tx_pairmap_put(tx_pairmap *m, uint64_t key, uint64_t value);
/* 1 and *value when found, else 0. */
int tx_pairmap_get(const tx_pairmap *m, uint64_t key, uint64_t *value);
void tx_pairmap_free(tx_pairmap *m);

static inline uint64_t tx_pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

/* A 64-bit hash of len bytes. */
uint64_t tx_hash(const void *p, size_t len);

#endif
