/* tx_grammar.c: grammars over a tokenizer's vocabulary (grammar.h): the bytes each token
 * adds to a text, and the masks of the tokens that may come next. */
#include "text/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tx_decode.h"

/* ---- building ----------------------------------------------------------------------------- */

static size_t token_len(const pe_grammar *g, int32_t id) { return g->off[id + 1] - g->off[id]; }

/* Byte order of two tokens' bytes (a prefix first). */
static int by_bytes(const void *a, const void *b, void *ctx)
{
    const pe_grammar *g = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const size_t nx = token_len(g, x), ny = token_len(g, y);
    int c = memcmp(g->bytes + g->off[x], g->bytes + g->off[y], nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

/* g->order, g->lcp and g->tail: the allowed tokens sorted by their bytes. */
static int sort_tokens(pe_grammar *g)
{
    g->order = malloc((size_t)g->vocab * sizeof *g->order);
    g->lcp = malloc((size_t)g->vocab * sizeof *g->lcp);
    if (!g->order || !g->lcp)
        return -1;
    g->norder = 0;
    for (int32_t id = 0; id < g->vocab; id++)
        if (g->allowed[id])
            g->order[g->norder++] = id;
    qsort_r(g->order, (size_t)g->norder, sizeof *g->order, by_bytes, g);
    for (int32_t i = 0; i < g->norder; i++) {
        uint32_t k = 0;
        if (i > 0) {
            const int32_t x = g->order[i - 1], y = g->order[i];
            const size_t n = token_len(g, x) < token_len(g, y) ? token_len(g, x)
                                                                : token_len(g, y);
            while (k < n && g->bytes[g->off[x] + k] == g->bytes[g->off[y] + k])
                k++;
        }
        g->lcp[i] = k;
    }
    size_t total = 0; /* the tails, in order */
    for (int32_t i = 0; i < g->norder; i++)
        total += token_len(g, g->order[i]) - g->lcp[i];
    g->tail = malloc(total ? total : 1);
    g->tail_off = malloc(((size_t)g->norder + 1) * sizeof *g->tail_off);
    if (!g->tail || !g->tail_off)
        return -1;
    uint32_t at = 0;
    for (int32_t i = 0; i < g->norder; i++) {
        const int32_t id = g->order[i];
        const uint32_t n = (uint32_t)token_len(g, id) - g->lcp[i];
        g->tail_off[i] = at;
        memcpy(g->tail + at, g->bytes + g->off[id] + g->lcp[i], n);
        at += n;
    }
    g->tail_off[g->norder] = at;
    return 0;
}

pe_status tx_grammar_json_from_tokens(const char *const *tokens, const size_t *len,
                                      const uint8_t *special, size_t vocab, pe_grammar **out)
{
    *out = NULL;
    if (vocab == 0 || vocab > INT32_MAX) {
        pe_set_last_error("a grammar needs a vocabulary of 1 to 2^31 - 1 tokens");
        return PE_EINVAL;
    }
    size_t total = 0;
    for (size_t i = 0; i < vocab; i++)
        total += tokens[i] ? len[i] : 0;
    pe_grammar *g = calloc(1, sizeof *g);
    if (g) {
        g->bytes = malloc(total ? total : 1);
        g->off = malloc((vocab + 1) * sizeof *g->off);
        g->allowed = malloc(vocab);
    }
    if (!g || !g->bytes || !g->off || !g->allowed || total > UINT32_MAX) {
        pe_grammar_free(g);
        pe_set_last_error("out of memory making a grammar's table of token bytes");
        return PE_ENOMEM;
    }
    g->vocab = (int32_t)vocab;
    size_t at = 0;
    for (size_t i = 0; i < vocab; i++) {
        g->off[i] = (uint32_t)at;
        const size_t n = tokens[i] ? len[i] : 0;
        g->allowed[i] = n > 0 && n <= TX_GRAMMAR_MAX_TOKEN_BYTES && !(special && special[i]);
        if (n)
            memcpy(g->bytes + at, tokens[i], n);
        at += n;
    }
    g->off[vocab] = (uint32_t)at;
    if (sort_tokens(g) != 0) {
        pe_grammar_free(g);
        pe_set_last_error("out of memory making a grammar's table of token bytes");
        return PE_ENOMEM;
    }
    *out = g;
    return PE_OK;
}

/* A plain token whose text alone is its text after others: the one a token's bytes are
 * measured after (decode([a, id]) = decode([a]) + what id adds). -1 when none. */
static int32_t anchor_token(const pe_tokenizer *t, tx_buf *buf)
{
    for (size_t id = 0; id < t->vocab_size; id++) {
        int held;
        pe_err err = {{0}};
        const int32_t ids[1] = {(int32_t)id};
        if (!t->tokens[id] || t->is_special[id] ||
            tx_decode(t, ids, 1, 0, TX_BYTES_RAW, buf, &held, &err) != PE_OK)
            continue;
        if (buf->n > 0 && buf->p[0] != ' ' && (unsigned char)buf->p[0] < 0x80)
            return (int32_t)id;
    }
    return -1;
}

pe_status pe_grammar_json(const pe_tokenizer *t, pe_grammar **out)
{
    if (out)
        *out = NULL;
    if (!t || !out) {
        pe_set_last_error("pe_grammar_json: the tokenizer and out must not be NULL");
        return PE_EINVAL;
    }
    const size_t V = t->vocab_size;
    char **bytes = calloc(V ? V : 1, sizeof *bytes);
    size_t *len = calloc(V ? V : 1, sizeof *len);
    tx_buf alone = {0}, both = {0};
    pe_status s = bytes && len ? PE_OK : PE_ENOMEM;
    const int32_t a = s == PE_OK ? anchor_token(t, &alone) : -1;
    if (s == PE_OK && a < 0) {
        pe_set_last_error("pe_grammar_json: the tokenizer has no plain token to measure the "
                          "others' bytes after");
        s = PE_EINVAL;
    }
    size_t base = alone.n;
    for (size_t id = 0; s == PE_OK && id < V; id++) {
        int held;
        pe_err err = {{0}};
        const int32_t ids[2] = {a, (int32_t)id};
        if (!t->tokens[id] || t->is_special[id])
            continue; /* never allowed */
        const pe_status d = tx_decode(t, ids, 2, 0, TX_BYTES_RAW, &both, &held, &err);
        if (d != PE_OK) {
            s = d == PE_ENOMEM ? PE_ENOMEM : PE_OK; /* (PE_EINVAL: no text, never allowed) */
            continue;
        }
        if (both.n <= base || memcmp(both.p, alone.p, base) != 0)
            continue; /* adds nothing, or changes the text before it: never allowed */
        if (!(bytes[id] = malloc(both.n - base)))
            s = PE_ENOMEM;
        else
            memcpy(bytes[id], both.p + base, len[id] = both.n - base);
    }
    if (s == PE_OK)
        s = tx_grammar_json_from_tokens((const char *const *)bytes, len, t->is_special, V, out);
    else if (s == PE_ENOMEM)
        pe_set_last_error("pe_grammar_json: out of memory reading the tokens' bytes");
    for (size_t id = 0; bytes && id < V; id++)
        free(bytes[id]);
    free(bytes);
    free(len);
    tx_buf_free(&alone);
    tx_buf_free(&both);
    return s;
}

/* A grammar over base's table of token bytes, for a compiled schema or pattern (taken). */
static pe_status derived(const pe_grammar *base, tx_schema *schema, tx_pattern *pattern,
                         pe_grammar **out)
{
    pe_grammar *g = malloc(sizeof *g);
    if (!g) {
        tx_schema_free(schema);
        tx_pattern_free(pattern);
        pe_set_last_error("out of memory making a grammar");
        return PE_ENOMEM;
    }
    const pe_grammar *table = base->table_of ? base->table_of : base;
    *g = *table; /* (its table's arrays, not owned) */
    g->schema = schema;
    g->pattern = pattern;
    g->table_of = table;
    *out = g;
    return PE_OK;
}

pe_status pe_grammar_json_schema(const pe_grammar *base, const char *schema,
                                 pe_grammar **out)
{
    if (out)
        *out = NULL;
    if (!base || !schema || !out) {
        pe_set_last_error("pe_grammar_json_schema: base, schema and out must not be NULL");
        return PE_EINVAL;
    }
    tx_schema *compiled;
    const pe_status s = tx_schema_compile(schema, strlen(schema), &compiled);
    return s != PE_OK ? s : derived(base, compiled, NULL, out);
}

pe_status pe_grammar_regex(const pe_grammar *base, const char *pattern, pe_grammar **out)
{
    if (out)
        *out = NULL;
    if (!base || !pattern || !out) {
        pe_set_last_error("pe_grammar_regex: base, pattern and out must not be NULL");
        return PE_EINVAL;
    }
    tx_pattern *compiled;
    const pe_status s = tx_pattern_compile(pattern, strlen(pattern), &compiled);
    return s != PE_OK ? s : derived(base, NULL, compiled, out);
}

pe_status pe_grammar_choice(const pe_grammar *base, const char *const *choices, size_t n,
                            pe_grammar **out)
{
    if (out)
        *out = NULL;
    if (!base || !choices || !out || n == 0) {
        pe_set_last_error("pe_grammar_choice: base, choices and out must not be NULL, and "
                          "there must be at least one choice");
        return PE_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if (!choices[i]) {
            pe_set_last_error("pe_grammar_choice: a choice is NULL");
            return PE_EINVAL;
        }
    tx_pattern *compiled;
    const pe_status s = tx_pattern_choices(choices, n, &compiled);
    return s != PE_OK ? s : derived(base, NULL, compiled, out);
}

void pe_grammar_free(pe_grammar *g)
{
    if (!g)
        return;
    if (!g->table_of) {
        free(g->bytes);
        free(g->off);
        free(g->allowed);
        free(g->order);
        free(g->lcp);
        free(g->tail);
        free(g->tail_off);
    }
    tx_schema_free(g->schema);
    tx_pattern_free(g->pattern);
    free(g);
}

/* ---- a sequence's state ------------------------------------------------------------------- */

void tx_grammar_start(const pe_grammar *g, tx_grammar_state *st)
{
    memset(st, 0, sizeof *st);
    if (g->schema)
        tx_schema_start(g->schema, &st->schema);
    else if (g->pattern)
        st->pattern = g->pattern->start;
    else
        tx_json_start(&st->json);
}

int tx_grammar_done(const pe_grammar *g, const tx_grammar_state *st)
{
    return g->schema    ? tx_schema_done(&st->schema)
           : g->pattern ? tx_pattern_done(g->pattern, st->pattern)
                        : tx_json_done(&st->json);
}

int tx_grammar_may_end(const pe_grammar *g, const tx_grammar_state *st)
{
    return g->pattern && tx_pattern_accepts(g->pattern, st->pattern) &&
           !tx_pattern_done(g->pattern, st->pattern);
}

/* Feeds token id's bytes: 0, or -1 when one does not fit (st unchanged). */
static int feed(const pe_grammar *g, tx_grammar_state *st, int32_t id)
{
    const uint8_t *b = g->bytes + g->off[id];
    const size_t n = g->off[id + 1] - g->off[id];
    if (g->schema)
        return tx_schema_bytes(g->schema, &st->schema, b, n);
    if (!g->pattern)
        return tx_json_bytes(&st->json, b, n);
    const int32_t at = tx_pattern_bytes(g->pattern, st->pattern, b, n);
    if (at < 0)
        return -1;
    st->pattern = at;
    return 0;
}

int tx_grammar_allows(const pe_grammar *g, const tx_grammar_state *st, int32_t id)
{
    if (id < 0 || id >= g->vocab || !g->allowed[id])
        return 0;
    tx_grammar_state next = *st;
    return feed(g, &next, id) == 0;
}

int tx_grammar_accept(const pe_grammar *g, tx_grammar_state *st, int32_t id)
{
    if (id < 0 || id >= g->vocab || !g->allowed[id])
        return -1;
    return feed(g, st, id); /* (the state stays as it was when a byte does not fit) */
}

/* A mask's walk feeds byte b to the state at level k of its array of states (one a byte of
 * the token being tried), into level k + 1: 0, or -1 when b does not fit. */
typedef int (*level_feed)(const pe_grammar *g, void *levels, size_t k, uint8_t b);

static int json_feed(const pe_grammar *g, void *levels, size_t k, uint8_t b)
{
    (void)g;
    tx_json *at = levels;
    at[k + 1] = at[k];
    return tx_json_byte(&at[k + 1], b);
}

static int schema_feed(const pe_grammar *g, void *levels, size_t k, uint8_t b)
{
    tx_schema_state *at = levels;
    tx_schema_copy(&at[k + 1], &at[k]);
    return tx_schema_step(g->schema, &at[k + 1], b);
}

static int pattern_feed(const pe_grammar *g, void *levels, size_t k, uint8_t b)
{
    int32_t *at = levels;
    at[k + 1] = tx_pattern_step(g->pattern, at[k], b);
    return at[k + 1] < 0 ? -1 : 0;
}

/* The mask from the state at level 0 of levels (each machine its own array of states, so
 * JSON mode's stay 16 bytes apart). Inlined into each caller, so that its feed is too. */
static inline __attribute__((always_inline)) int
walk(const pe_grammar *g, void *levels, level_feed feed_byte, uint32_t *mask, size_t nbits)
{
    memset(mask, 0, tx_mask_words(nbits) * sizeof *mask);
    /* In byte order, token i shares lcp[i] bytes with token i - 1: the states after those
     * bytes are levels 0 .. lcp[i], fed for token i - 1, and when one of them failed, token
     * i fails too. So each prefix is fed once. */
    size_t failed = SIZE_MAX; /* token i - 1's byte at level failed - 1 did not fit; MAX: none */
    int count = 0;
    for (int32_t i = 0; i < g->norder; i++) {
        const int32_t id = g->order[i];
        const size_t shared = g->lcp[i], n = shared + g->tail_off[i + 1] - g->tail_off[i];
        const uint8_t *tail = g->tail + g->tail_off[i]; /* its bytes from shared on */
        if (failed <= shared)
            continue; /* its prefix fails: failed stays */
        int ok = 1;
        for (size_t k = shared; k < n; k++) {
            if (feed_byte(g, levels, k, tail[k - shared]) != 0) {
                ok = 0;
                failed = k + 1;
                break;
            }
        }
        if (ok)
            failed = SIZE_MAX;
        if (ok && (size_t)id < nbits) {
            mask[id >> 5] |= 1u << (id & 31);
            count++;
        }
    }
    return count;
}

int tx_grammar_mask(const pe_grammar *g, const tx_grammar_state *st, uint32_t *mask,
                    size_t nbits)
{
    if (g->schema) {
        tx_schema_state at[TX_GRAMMAR_MAX_TOKEN_BYTES + 1];
        tx_schema_copy(&at[0], &st->schema);
        return walk(g, at, schema_feed, mask, nbits);
    }
    if (g->pattern) {
        int32_t at[TX_GRAMMAR_MAX_TOKEN_BYTES + 1];
        at[0] = st->pattern;
        return walk(g, at, pattern_feed, mask, nbits);
    }
    tx_json at[TX_GRAMMAR_MAX_TOKEN_BYTES + 1];
    at[0] = st->json;
    return walk(g, at, json_feed, mask, nbits);
}
