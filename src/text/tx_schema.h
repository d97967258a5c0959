/* tx_schema.h: JSON schema's machine over bytes: which byte strings begin a JSON object
 * that a JSON schema accepts, fed one byte at a time, so that the tokens that may come next
 * can be tried from a copy of the state (as tx_json.h does for JSON mode).
 *
 * A schema is compiled into nodes (tx_schema_compile.c); a state is a stack of the
 * objects and arrays of the schema open (a node each), and the value being read: a key or
 * an enum's value matched against its literals, or a scalar or a value the schema leaves
 * free read by JSON mode's rules (tx_json, started at a value).
 *
 * What a schema may say (docs/api.md, "Structured output"):
 *   - type: object, array, string, number, integer, boolean, null, or a list of them;
 *   - object: properties, required, additionalProperties false or absent (only the
 *     properties listed may come, in the order listed; optional ones may be left out);
 *     with no properties, additionalProperties a schema makes a map (any keys, each value
 *     following it), and otherwise the object is any object;
 *   - array: items, minItems, maxItems;
 *   - enum, const: values written as JSON writes them without whitespace;
 *   - string: pattern (a regex the characters contain, tx_pattern.h's syntax; anchored by
 *     ^ and $), or format (date, time, date-time, duration, uuid, ipv4, ipv6, email:
 *     tx_schema_format.h's regexes), minLength, maxLength (characters);
 *   - integer, number: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers,
 *     within +-10^15), read by the DFA of the values they allow (tx_pattern_int_range,
 *     tx_pattern_num_range: a bounded number without an exponent; no -0);
 *   - anyOf, oneOf: alternatives whose values start with different characters (their
 *     types, or their enums' first characters differ), so the first byte chooses one;
 *     allOf of one schema;
 *   - $ref to "#", "#/$defs/NAME" or "#/definitions/NAME", recursion included;
 *   - true and {} accept any value; title, description, default, examples, other
 *     formats and other annotations are ignored (formats are annotations in JSON schema
 *     2020-12 unless a validator is asked to assert them);
 *   - any keyword that constrains values otherwise (multipleOf, uniqueItems, ...) is
 *     refused, naming it, rather than left unenforced.
 * The root must be an object. Whitespace follows JSON mode's rule; at most
 * TX_SCHEMA_MAX_DEPTH of the schema's objects and arrays are open at once. */
#ifndef PE_TEXT_TX_SCHEMA_H
#define PE_TEXT_TX_SCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pengine/pengine.h"
#include "text/tx_json.h"

#define TX_SCHEMA_MAX_DEPTH 32
#define TX_SCHEMA_MAX_NODES 65535

typedef struct tx_schema tx_schema; /* a compiled schema (read-only once made) */

typedef struct tx_schema_frame {
    uint16_t node; /* the object or array */
    uint16_t n;    /* object: properties before n are done or left out; array: items begun */
} tx_schema_frame;

/* A string with a pattern or lengths, being read (phase S_TEXT): its characters, JSON's
 * escapes decoded, go through the DFA of its pattern and lengths (tx_pattern_text). A
 * number or integer with bounds (phase S_DIGITS) uses dfa alone, for its bytes. */
typedef struct tx_schema_text {
    int32_t dfa;    /* the characters so far (a tx_pattern state) */
    uint16_t hex;   /* \uXXXX: the digits so far */
    uint8_t esc;    /* 0; 1 after a backslash; 2 + k after k digits of \u */
    uint8_t pad[9]; /* (zero) */
} tx_schema_text;
_Static_assert(sizeof(tx_schema_text) == sizeof(tx_json), "tx_schema_text is tx_json's size");

typedef struct tx_schema_state {
    union {
        tx_json value;       /* the scalar or free value being read (phase S_JSON) */
        tx_schema_text text; /* a string with a pattern or lengths (phase S_TEXT), or a
                              * number or integer with bounds (S_DIGITS) */
    };
    uint16_t node;   /* the value's node (an enum, or the scalar's type) */
    uint16_t cand;   /* a literal being matched: the first candidate the bytes fit */
    uint16_t off;    /* ... and how many of its bytes have come */
    uint8_t phase;   /* where in the grammar (tx_schema.c's S_*) */
    uint8_t ws;      /* whitespace in this gap, as tx_json's */
    uint8_t depth;   /* frames open */
    uint8_t pad[7];  /* (zero: states compare with memcmp) */
    tx_schema_frame frame[TX_SCHEMA_MAX_DEPTH]; /* (frames past depth are zero) */
} tx_schema_state;
_Static_assert(sizeof(tx_schema_state) ==
                   sizeof(tx_json) + 16 + TX_SCHEMA_MAX_DEPTH * sizeof(tx_schema_frame),
               "tx_schema_state has padding");

/* Compiles a schema (JSON text, len bytes). PE_EINVAL names what is wrong or not
 * supported, and where (a JSON pointer into the schema). */
pe_status tx_schema_compile(const char *text, size_t len, tx_schema **out);
void tx_schema_free(tx_schema *s);

/* The state before the first byte. */
void tx_schema_start(const tx_schema *s, tx_schema_state *st);
/* Feeds byte b: 0 when the bytes so far still begin a text the schema accepts (st
 * advanced), -1 when not (st is then left in no particular state: feed a copy). */
int tx_schema_step(const tx_schema *s, tx_schema_state *st, uint8_t b);
/* Feeds n bytes: 0, or -1 at the first that does not fit (st unchanged). */
int tx_schema_bytes(const tx_schema *s, tx_schema_state *st, const uint8_t *b, size_t n);
/* 1 when the text is complete (the root object closed: nothing more may follow). */
int tx_schema_done(const tx_schema_state *st);
/* Copies a state's used part (frames past src->depth are left as they were in dst): a
 * mask's walk copies a state for every byte it feeds. */
static inline void tx_schema_copy(tx_schema_state *dst, const tx_schema_state *src)
{
    memcpy(dst, src, offsetof(tx_schema_state, frame)); /* (a constant size: inlined) */
    for (uint8_t d = 0; d < src->depth; d++)
        dst->frame[d] = src->frame[d];
}

#endif
