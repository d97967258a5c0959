/* tx_json.h: JSON mode's machine over bytes: which byte strings begin a JSON object
 * (RFC 8259), fed one byte at a time, with a fixed-size state (no allocation), so that the
 * tokens that may come next can be tried from a copy of it.
 *
 * The language, as llama.cpp's json.gbnf and OpenAI's JSON mode:
 *   - the text is one object: it starts with '{' and is complete at the '}' that closes
 *     it; no byte may follow;
 *   - values: objects, arrays, strings, numbers, true, false, null; object keys are
 *     strings;
 *   - strings: valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
 *     U+10FFFF), no control byte below 0x20, escapes \" \\ \/ \b \f \n \r \t \uXXXX;
 *   - numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?;
 *   - whitespace, between any two of the text's parts inside the object: nothing, one
 *     space, or a newline and at most TX_JSON_MAX_INDENT spaces or tabs (so a model cannot
 *     run away in whitespace: llama.cpp's rule);
 *   - at most TX_JSON_MAX_DEPTH objects and arrays open at once. */
#ifndef PE_TEXT_TX_JSON_H
#define PE_TEXT_TX_JSON_H

#include <stddef.h>
#include <stdint.h>

#define TX_JSON_MAX_DEPTH 64
#define TX_JSON_MAX_INDENT 20

typedef struct tx_json {
    uint64_t stack; /* bit d: the container open at depth d + 1 is an object (1), an array (0) */
    uint8_t depth;  /* containers open */
    uint8_t state;  /* where in the grammar (tx_json.c's J_*) */
    uint8_t ws;     /* whitespace in this gap: 0 none, 1 a space, 2 + k a newline, k indents */
    uint8_t aux;    /* a literal's bytes matched, \u's hex digits or UTF-8's bytes left */
    uint8_t lo, hi; /* UTF-8: the range of the next continuation byte */
    uint8_t key;    /* the string being read is an object's key */
    uint8_t lit;    /* the literal being read: 0 true, 1 false, 2 null */
} tx_json;
/* (no padding: states compare with memcmp) */
_Static_assert(sizeof(tx_json) == sizeof(uint64_t) + 8, "tx_json has padding");

/* The state before the first byte. */
void tx_json_start(tx_json *j);
/* The state before a value of any kind (a JSON schema's scalar or free value): the first
 * byte must start one; nothing may follow it (tx_json_ended says where it may end). */
void tx_json_start_value(tx_json *j);
/* Feeds byte b: 0 when the bytes so far still begin a JSON object (j advanced), -1 when
 * not (j unchanged). */
int tx_json_byte(tx_json *j, uint8_t b);
/* Feeds n bytes: 0, or -1 at the first that does not fit (j unchanged). */
int tx_json_bytes(tx_json *j, const uint8_t *s, size_t n);
/* A byte of whitespace in a gap, by the rule above: ws counts what the gap holds so far (0
 * nothing, 1 a space, 2 + k a newline and k spaces or tabs). 0 with ws advanced when b may
 * come next, -1 when not. */
int tx_json_gap_byte(uint8_t *ws, uint8_t b);
static inline int tx_json_is_ws(uint8_t b)
{
    return b == ' ' || b == '\n' || b == '\t' || b == '\r';
}
/* 1 when the object is complete (nothing more may follow). */
int tx_json_done(const tx_json *j);
/* 1 when the bytes so far are a whole value: tx_json_done, or, from tx_json_start_value,
 * a number that more digits could still go on. */
int tx_json_ended(const tx_json *j);

#endif
