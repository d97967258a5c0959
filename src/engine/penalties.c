/* penalties.c: the token counts behind the sampling penalties, and a step's entries of
 * them and of the logit bias (penalties.h). */
#include "engine/penalties.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float repetition_of(const pe_sampling *s)
{
    return s->repetition_penalty > 0.0f ? s->repetition_penalty : 1.0f; /* 0 reads as off */
}

int en_penalties_on(const pe_sampling *s)
{
    return repetition_of(s) != 1.0f || s->frequency_penalty != 0.0f ||
           s->presence_penalty != 0.0f;
}

void en_counts_free(en_counts *c)
{
    free(c->ids);
    free(c->gen);
    free(c->prompt);
    free(c->slots);
    memset(c, 0, sizeof *c);
}

static uint32_t hash_of(int32_t id, int nslots)
{
    return ((uint32_t)id * 2654435761u) & (uint32_t)(nslots - 1);
}

/* Room for one more distinct token, the table at most half full. */
static int grow(en_counts *c)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        int32_t *ids = realloc(c->ids, (size_t)cap * sizeof *ids);
        if (ids)
            c->ids = ids;
        int32_t *gen = realloc(c->gen, (size_t)cap * sizeof *gen);
        if (gen)
            c->gen = gen;
        uint8_t *prompt = realloc(c->prompt, (size_t)cap);
        if (prompt)
            c->prompt = prompt;
        if (!ids || !gen || !prompt)
            return -1;
        c->cap = cap;
    }
    if (2 * (c->n + 1) <= c->nslots)
        return 0;
    int nslots = c->nslots ? 2 * c->nslots : 128;
    int32_t *slots = calloc((size_t)nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (int i = 0; i < c->n; i++) { /* every token again, into the larger table */
        uint32_t h = hash_of(c->ids[i], nslots);
        while (slots[h])
            h = (h + 1) & (uint32_t)(nslots - 1);
        slots[h] = i + 1;
    }
    free(c->slots);
    c->slots = slots;
    c->nslots = nslots;
    return 0;
}

/* The index of id in c, or -1. */
static int find(const en_counts *c, int32_t id)
{
    if (!c || !c->nslots)
        return -1;
    uint32_t h = hash_of(id, c->nslots);
    while (c->slots[h] && c->ids[c->slots[h] - 1] != id)
        h = (h + 1) & (uint32_t)(c->nslots - 1);
    return c->slots[h] ? c->slots[h] - 1 : -1;
}

static int count(en_counts *c, int32_t id, int generated)
{
    uint32_t h = c->nslots ? hash_of(id, c->nslots) : 0;
    while (c->nslots && c->slots[h] && c->ids[c->slots[h] - 1] != id)
        h = (h + 1) & (uint32_t)(c->nslots - 1);
    int i;
    if (c->nslots && c->slots[h]) {
        i = c->slots[h] - 1;
    } else {
        if (grow(c) != 0)
            return -1;
        h = hash_of(id, c->nslots); /* the table may have grown: find the empty slot again */
        while (c->slots[h])
            h = (h + 1) & (uint32_t)(c->nslots - 1);
        i = c->n++;
        c->slots[h] = i + 1;
        c->ids[i] = id;
        c->gen[i] = 0;
        c->prompt[i] = 0;
    }
    if (generated)
        c->gen[i]++;
    else
        c->prompt[i] = 1;
    return 0;
}

int en_counts_update(en_counts *c, const int32_t *tokens, int ntok, int gen_start)
{
    if (c->gen_start != gen_start || c->seen > ntok) { /* an append: count again */
        c->n = c->seen = 0;
        if (c->slots)
            memset(c->slots, 0, (size_t)c->nslots * sizeof *c->slots);
        c->gen_start = gen_start;
    }
    for (; c->seen < ntok; c->seen++)
        if (count(c, tokens[c->seen], c->seen >= gen_start) != 0) {
            en_counts_free(c);
            return -1;
        }
    return 0;
}

void en_counts_forget(en_counts *c, const int32_t *tokens, int n)
{
    for (; c->seen > n; c->seen--) {
        const int i = find(c, tokens[c->seen - 1]);
        if (i < 0 || c->seen - 1 < c->gen_start) { /* not a generated one: count again */
            c->n = c->seen = 0;
            if (c->slots)
                memset(c->slots, 0, (size_t)c->nslots * sizeof *c->slots);
            return;
        }
        c->gen[i]--; /* (its id stays, with no effect while neither generated nor prompt) */
    }
}

int en_bias_by_token(const void *a, const void *b)
{
    int32_t x = ((const pe_logit_bias *)a)->token, y = ((const pe_logit_bias *)b)->token;
    return (x > y) - (x < y);
}

int en_counts_entries(const en_counts *c, const pe_sampling *s, const pe_logit_bias *bias,
                      int nbias, int row, pe_k_penalty *out)
{
    const float rep = repetition_of(s);
    int m = 0;
    for (int i = 0; c && i < c->n; i++) { /* the counted tokens, with their bias */
        const int g = c->gen[i];
        const float r = rep != 1.0f && (g > 0 || c->prompt[i]) ? rep : 1.0f;
        const float sub = g > 0 ? s->frequency_penalty * (float)g + s->presence_penalty : 0.0f;
        const pe_logit_bias key = {.token = c->ids[i]};
        const pe_logit_bias *b = nbias ? bsearch(&key, bias, (size_t)nbias, sizeof *bias,
                                                 en_bias_by_token) : NULL;
        const float add = b ? b->bias : 0.0f;
        if (add != 0.0f || r != 1.0f || sub != 0.0f)
            out[m++] = (pe_k_penalty){.row = row, .id = c->ids[i], .add = add, .rep = r,
                                      .sub = sub};
    }
    for (int k = 0; k < nbias; k++) /* the rest of the bias */
        if (bias[k].bias != 0.0f && find(c, bias[k].token) < 0)
            out[m++] = (pe_k_penalty){.row = row, .id = bias[k].token, .add = bias[k].bias,
                                      .rep = 1.0f, .sub = 0.0f};
    return m;
}

int en_ban_tokens(pe_k_penalty *e, int n, const int32_t *ids, int nids, int row)
{
    for (int k = 0; k < nids; k++) {
        int i = 0;
        while (i < n && e[i].id != ids[k])
            i++;
        if (i == n)
            e[n++] = (pe_k_penalty){.row = row, .id = ids[k], .rep = 1.0f};
        e[i].add = -INFINITY; /* x + add: -inf, through the repetition and the subtraction */
    }
    return n;
}
