/* tx_utf8.h: UTF-8 for the tokenizer: validation, the placeholders that carry invalid
 * input bytes through the pipeline, lossy conversion back to valid text, GPT-2's
 * byte-level alphabet, and a growable byte buffer.
 *
 * Invalid input bytes: each byte b of an invalid sequence becomes the 3-byte placeholder of
 * U+DC00 + b (a lone surrogate, as Python's "surrogateescape"), which valid UTF-8 never
 * holds. The regex sees it as a symbol (not a letter, digit or space); normalizers leave
 * it alone; the model turns it back into byte b (a byte-level symbol, or "<0xNN>"). */
#ifndef PE_TEXT_TX_UTF8_H
#define PE_TEXT_TX_UTF8_H

#include <stddef.h>
#include <stdint.h>

typedef struct tx_buf {
    char *p;
    size_t n, cap;
} tx_buf;

/* items (n of size bytes, room for *cap) with room for one more: items, or where they moved;
 * NULL when out of memory (items as they were). */
void *tx_grow(void *items, int32_t *cap, int32_t n, size_t size);

/* The value of hex digit c (0..15), or -1 when c is none. */
static inline int tx_hex_value(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* 0, or -1 when out of memory. */
int tx_buf_reserve(tx_buf *b, size_t extra);
int tx_buf_add(tx_buf *b, const void *p, size_t n);
static inline int tx_buf_addc(tx_buf *b, char c) { return tx_buf_add(b, &c, 1); }
void tx_buf_free(tx_buf *b);

/* Length of the valid UTF-8 character starting at s[i] (1..4), or 0 when invalid there. */
size_t tx_utf8_valid_len(const unsigned char *s, size_t n, size_t i);
/* Length of the character at s[i] as the pipeline sees it: a valid character, a placeholder
 * (3), or 1 for anything else. */
size_t tx_utf8_char_len(const unsigned char *s, size_t n, size_t i);
/* The code point of the character at s[i] (placeholders give U+DC80..U+DCFF). */
uint32_t tx_utf8_decode(const unsigned char *s, size_t n, size_t i);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
size_t tx_utf8_encode(uint32_t cp, char *out);

/* The input byte a placeholder at s[i] stands for, or -1 when s[i] starts no placeholder. */
int tx_placeholder_byte(const unsigned char *s, size_t n, size_t i);

/* in (n bytes) with every invalid byte replaced by its placeholder, into *out (malloc'ed).
 * Returns 0 when in was valid UTF-8 (*out NULL: use in as it is), 1 when *out was made,
 * -1 when out of memory. */
int tx_sanitize(const char *in, size_t n, char **out, size_t *out_n);

/* Appends bytes to out as valid UTF-8: each maximal invalid subpart becomes U+FFFD (as
 * Rust's from_utf8_lossy). With hold_tail, an incomplete character at the very end is left
 * out; returns its length then (0 otherwise), or -1 when out of memory. */
long tx_utf8_lossy(const unsigned char *bytes, size_t n, tx_buf *out, int hold_tail);

/* GPT-2's byte-level alphabet (bytes_to_unicode), computed. */
uint32_t tx_byte_to_cp(uint8_t b);
int tx_cp_to_byte(uint32_t cp); /* -1 outside the alphabet */

#endif
