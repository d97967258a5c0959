/* tx_pattern_range.c: the integers of a range as a regular expression in JSON's syntax for
 * integers (tx_pattern.h), for a JSON schema's minimum and maximum. */
#include <stdio.h>
#include <string.h>

#include "text/tx_pattern.h"

typedef struct rx_out {
    char *p;
    size_t n, cap;
    int full; /* the text did not fit */
} rx_out;

static void put(rx_out *o, const char *s, size_t n)
{
    if (o->n + n >= o->cap) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
}

static void put_str(rx_out *o, const char *s) { put(o, s, strlen(s)); }

/* [a-b] of one digit each, or the digit itself. */
static void digit_class(rx_out *o, char a, char b)
{
    char t[6] = {'[', a, '-', b, ']', 0};
    if (a == b)
        put(o, &a, 1);
    else
        put_str(o, t);
}

static int all_of(const char *s, size_t n, char c)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != c)
            return 0;
    return 1;
}

/* The digit strings lo..hi, both n digits long (lo <= hi): the shared first digit and the
 * rest; or lo's first digit with the rest from lo's to 9..9, the digits between with any
 * rest, and hi's first digit with the rest from 0..0 to hi's. */
static void same_length(rx_out *o, const char *lo, const char *hi, size_t n)
{
    if (n == 1) {
        digit_class(o, lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        put(o, lo, 1);
        same_length(o, lo + 1, hi + 1, n - 1);
        return;
    }
    char rest[32];
    if (all_of(lo + 1, n - 1, '0') && all_of(hi + 1, n - 1, '9')) {
        digit_class(o, lo[0], hi[0]);
        snprintf(rest, sizeof rest, "[0-9]{%zu}", n - 1);
        put_str(o, rest);
        return;
    }
    char nines[32], zeros[32];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    put_str(o, "(?:");
    put(o, lo, 1);
    same_length(o, lo + 1, nines, n - 1);
    if (hi[0] - lo[0] > 1) {
        put_str(o, "|");
        digit_class(o, (char)(lo[0] + 1), (char)(hi[0] - 1));
        snprintf(rest, sizeof rest, "[0-9]{%zu}", n - 1);
        put_str(o, rest);
    }
    put_str(o, "|");
    put(o, hi, 1);
    same_length(o, zeros, hi + 1, n - 1);
    put_str(o, ")");
}

static int digits(uint64_t v)
{
    int d = 1;
    for (; v >= 10; v /= 10)
        d++;
    return d;
}

static uint64_t power10(int d)
{
    uint64_t p = 1;
    while (d-- > 0)
        p *= 10;
    return p;
}

/* The decimal numbers lo..hi (lo <= hi), without leading zeros; any from lo up when
 * unbounded. */
static void magnitudes(rx_out *o, uint64_t lo, uint64_t hi, int unbounded)
{
    const int dlo = digits(lo), dhi = unbounded ? dlo : digits(hi);
    put_str(o, "(?:");
    for (int d = dlo; d <= dhi; d++) {
        const uint64_t a = d == dlo ? lo : power10(d - 1);
        const uint64_t z = d == dhi && !unbounded ? hi : power10(d) - 1;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%llu", (unsigned long long)a);
        snprintf(sz, sizeof sz, "%llu", (unsigned long long)z);
        if (d > dlo)
            put_str(o, "|");
        same_length(o, sa, sz, (size_t)d);
    }
    if (unbounded) { /* and every number of more digits */
        char more[32];
        snprintf(more, sizeof more, "|[1-9][0-9]{%d,}", dlo);
        put_str(o, more);
    }
    put_str(o, ")");
}

pe_status tx_pattern_int_range(int has_lo, int64_t lo, int has_hi, int64_t hi, char *out,
                               size_t cap)
{
    rx_out o = {out, 0, cap, 0};
    if (cap)
        out[0] = '\0';
    if ((has_lo && (lo < -TX_PATTERN_MAX_INT || lo > TX_PATTERN_MAX_INT)) ||
        (has_hi && (hi < -TX_PATTERN_MAX_INT || hi > TX_PATTERN_MAX_INT)) ||
        (has_lo && has_hi && lo > hi) || (!has_lo && !has_hi))
        return PE_EINVAL;
    int alts = 0;
    put_str(&o, "(?:");
    if (!has_lo || lo < 0) { /* negatives: -(magnitudes), never -0 */
        const uint64_t from = has_hi && hi < 0 ? (uint64_t)-hi : 1;
        put_str(&o, "-");
        magnitudes(&o, from, has_lo ? (uint64_t)-lo : 0, !has_lo);
        alts++;
    }
    if (!has_hi || hi >= 0) {
        if (alts++)
            put_str(&o, "|");
        magnitudes(&o, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? (uint64_t)hi : 0,
                   !has_hi);
    }
    put_str(&o, ")");
    return o.full ? PE_ENOMEM : PE_OK;
}
