/* tx_map.c: the string and pair hash tables (open addressing, linear probing, load <= 1/2). */
#include "text/tx_map.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

uint64_t tx_hash(const void *p, size_t len)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (len * 0xff51afd7ed558ccdULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ mix(w)) * 0x9fb21c651e98df25ULL;
        s += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, len);
    return mix(h ^ w ^ (len << 56));
}

static size_t capacity_for(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 2)
        cap *= 2;
    return cap;
}

/* ---- strings -> ids ------------------------------------------------------------------------ */

int tx_strmap_init(tx_strmap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    m->cap = capacity_for(expected);
    m->slots = malloc(m->cap * sizeof *m->slots);
    if (!m->slots)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i].value = -1;
    return 0;
}

static tx_strmap_slot *find_slot(const tx_strmap *m, const char *key, size_t len, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        tx_strmap_slot *s = &m->slots[i];
        if (s->value < 0)
            return s;
        if (s->hash == h && s->len == len &&
            (len == 0 || memcmp(m->arena + s->off, key, len) == 0))
            return s;
    }
}

static int strmap_grow(tx_strmap *m)
{
    size_t ncap = m->cap * 2;
    tx_strmap_slot *ns = malloc(ncap * sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < ncap; i++)
        ns[i].value = -1;
    for (size_t i = 0; i < m->cap; i++) {
        tx_strmap_slot s = m->slots[i];
        if (s.value < 0)
            continue;
        size_t j = (size_t)s.hash & (ncap - 1);
        while (ns[j].value >= 0)
            j = (j + 1) & (ncap - 1);
        ns[j] = s;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int tx_strmap_put(tx_strmap *m, const char *key, size_t len, int32_t value)
{
    if ((m->count + 1) * 2 > m->cap && strmap_grow(m) != 0)
        return -1;
    uint64_t h = tx_hash(key, len);
    tx_strmap_slot *s = find_slot(m, key, len, h);
    if (s->value >= 0) {
        s->value = value;
        return 0;
    }
    if (m->arena_len + len > m->arena_cap) {
        size_t ncap = m->arena_cap ? m->arena_cap * 2 : 4096;
        while (ncap < m->arena_len + len)
            ncap *= 2;
        char *na = realloc(m->arena, ncap);
        if (!na)
            return -1;
        m->arena = na;
        m->arena_cap = ncap;
    }
    if (len > UINT32_MAX || m->arena_len > UINT32_MAX - len)
        return -1;
    if (len) /* an empty key ("" is a token in some vocabularies) copies nothing */
        memcpy(m->arena + m->arena_len, key, len);
    s->hash = h;
    s->off = (uint32_t)m->arena_len;
    s->len = (uint32_t)len;
    s->value = value;
    m->arena_len += len;
    m->count++;
    return 0;
}

int32_t tx_strmap_get(const tx_strmap *m, const char *key, size_t len)
{
    if (!m->slots)
        return -1;
    return find_slot(m, key, len, tx_hash(key, len))->value;
}

void tx_strmap_free(tx_strmap *m)
{
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

/* ---- 64-bit keys -> 64-bit values ------------------------------------------------------------ */

int tx_pairmap_init(tx_pairmap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    m->cap = capacity_for(expected);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->values = malloc(m->cap * sizeof *m->values);
    if (!m->keys || !m->values)
        return -1;
    memset(m->keys, 0xff, m->cap * sizeof *m->keys);
    return 0;
}

static int pairmap_grow(tx_pairmap *m)
{
    tx_pairmap n;
    if (tx_pairmap_init(&n, m->cap) != 0) {
        tx_pairmap_free(&n);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != TX_PAIR_EMPTY)
            tx_pairmap_put(&n, m->keys[i], m->values[i]);
    tx_pairmap_free(m);
    *m = n;
    return 0;
}

int tx_pairmap_put(tx_pairmap *m, uint64_t key, uint64_t value)
{
    if ((m->count + 1) * 2 > m->cap && pairmap_grow(m) != 0)
        return -1;
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)mix(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            m->values[i] = value;
            return 0;
        }
        if (m->keys[i] == TX_PAIR_EMPTY) {
            m->keys[i] = key;
            m->values[i] = value;
            m->count++;
            return 0;
        }
    }
}

int tx_pairmap_get(const tx_pairmap *m, uint64_t key, uint64_t *value)
{
    if (!m->keys)
        return 0;
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)mix(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            *value = m->values[i];
            return 1;
        }
        if (m->keys[i] == TX_PAIR_EMPTY)
            return 0;
    }
}

void tx_pairmap_free(tx_pairmap *m)
{
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}
