/* tx_utf8.c: UTF-8 validation, placeholders, lossy conversion, the byte-level alphabet. */
#include "text/tx_utf8.h"

#include <stdlib.h>
#include <string.h>

void *tx_grow(void *items, int32_t *cap, int32_t n, size_t size)
{
    if (n < *cap)
        return items;
    const int32_t more = *cap ? 2 * *cap : 16;
    void *p = realloc(items, (size_t)more * size);
    if (p)
        *cap = more;
    return p;
}

int tx_buf_reserve(tx_buf *b, size_t extra)
{
    if (b->n + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tx_buf_add(tx_buf *b, const void *p, size_t n)
{
    if (tx_buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

void tx_buf_free(tx_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* The range of the second byte after lead byte c, and the sequence length (0: bad lead). */
static size_t lead_info(unsigned c, unsigned *lo, unsigned *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0)
            *lo = 0xA0;
        if (c == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0)
            *lo = 0x90;
        if (c == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* How many bytes at s[i] form a valid prefix of a character (the maximal subpart), and
 * the full length that character needs (0 for a bad lead byte). */
static size_t valid_prefix(const unsigned char *s, size_t n, size_t i, size_t *need)
{
    unsigned lo, hi;
    size_t len = lead_info(s[i], &lo, &hi);
    *need = len;
    if (len <= 1)
        return len;
    size_t k = 1;
    for (; k < len && i + k < n; k++) {
        unsigned c = s[i + k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (c < l || c > h)
            break;
    }
    return k;
}

size_t tx_utf8_valid_len(const unsigned char *s, size_t n, size_t i)
{
    size_t need, k = valid_prefix(s, n, i, &need);
    return need && k == need ? need : 0;
}

int tx_placeholder_byte(const unsigned char *s, size_t n, size_t i)
{
    if (i + 2 < n && s[i] == 0xED && (s[i + 1] == 0xB2 || s[i + 1] == 0xB3) &&
        (s[i + 2] & 0xC0) == 0x80)
        return 0x80 + ((s[i + 1] - 0xB2) << 6) + (s[i + 2] & 0x3F);
    return -1;
}

size_t tx_utf8_char_len(const unsigned char *s, size_t n, size_t i)
{
    size_t len = tx_utf8_valid_len(s, n, i);
    if (len)
        return len;
    return tx_placeholder_byte(s, n, i) >= 0 ? 3 : 1;
}

uint32_t tx_utf8_decode(const unsigned char *s, size_t n, size_t i)
{
    size_t len = tx_utf8_char_len(s, n, i);
    uint32_t c = s[i];
    if (len == 1)
        return c;
    c &= len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
    for (size_t k = 1; k < len; k++)
        c = (c << 6) | (s[i + k] & 0x3F);
    return c;
}

size_t tx_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int tx_sanitize(const char *in, size_t n, char **out, size_t *out_n)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0;
    while (i < n && (s[i] < 0x80 || tx_utf8_valid_len(s, n, i)))
        i += s[i] < 0x80 ? 1 : tx_utf8_valid_len(s, n, i);
    *out = NULL;
    *out_n = n;
    if (i == n)
        return 0;
    tx_buf b = {0};
    if (tx_buf_add(&b, in, i) != 0)
        return -1;
    while (i < n) {
        size_t len = tx_utf8_valid_len(s, n, i);
        if (len) {
            if (tx_buf_add(&b, s + i, len) != 0)
                goto oom;
            i += len;
            continue;
        }
        char ph[3];
        tx_utf8_encode(0xDC00u + s[i], ph);
        if (tx_buf_add(&b, ph, 3) != 0)
            goto oom;
        i++;
    }
    *out = b.p;
    *out_n = b.n;
    return 1;
oom:
    tx_buf_free(&b);
    return -1;
}

long tx_utf8_lossy(const unsigned char *s, size_t n, tx_buf *out, int hold_tail)
{
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, run = 0; /* valid bytes s[run, i) not yet copied */
    if (n == 0) /* s may be NULL: no arithmetic on it */
        return 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t need, k = valid_prefix(s, n, i, &need);
        if (need && k == need) {
            i += need;
            continue;
        }
        if (tx_buf_add(out, s + run, i - run) != 0)
            return -1;
        if (need && i + k == n && hold_tail) /* a character the next bytes may complete */
            return (long)(n - i);
        if (tx_buf_add(out, fffd, 3) != 0)
            return -1;
        i += k ? k : 1;
        run = i;
    }
    return tx_buf_add(out, s + run, i - run) != 0 ? -1 : 0;
}

/* bytes_to_unicode: '!'..'~', 0xA1..0xAC and 0xAE..0xFF are themselves; the other bytes,
 * in increasing order, take U+0100, U+0101, ... */
static int printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* The k-th non-printable byte, in order: 0x00..0x20 (33), 0x7F..0xA0 (34), then 0xAD. */
uint32_t tx_byte_to_cp(uint8_t b)
{
    if (printable(b))
        return b;
    if (b <= 0x20)
        return 0x100u + b;
    if (b <= 0xA0)
        return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int tx_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return printable(cp) ? (int)cp : -1;
    uint32_t k = cp - 0x100;
    if (k < 33)
        return (int)k;
    if (k < 67)
        return (int)(0x7F + k - 33);
    return k == 67 ? 0xAD : -1;
}
