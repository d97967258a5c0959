/* tx_pattern_range.c: the integers, or the numbers, of a range as a regular expression in
 * JSON's syntax (tx_pattern.h), for a JSON schema's minimum and maximum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- numbers ---------------------------------------------------------------------------- */

pe_status tx_decimal_of(double x, tx_decimal *d)
{
    memset(d, 0, sizeof *d);
    if (!(fabs(x) <= (double)TX_PATTERN_MAX_INT))
        return PE_EINVAL;
    char e[40]; /* [-]D.DDDDe[+-]XX: the fewest significant digits that read back as x */
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    const char *m = e + (e[0] == '-');
    char sig[24];
    size_t n = 0;
    for (; *m != 'e'; m++)
        if (*m != '.')
            sig[n++] = *m;
    const long point = strtol(m + 1, NULL, 10) + 1; /* digits of sig before the point */
    for (long i = 0; i < point; i++)
        d->whole = d->whole * 10 + (uint64_t)(i < (long)n ? sig[i] - '0' : 0);
    size_t f = 0;
    for (long i = point; i < (long)n; i++) { /* after the point: zeros (0.00ddd), then sig */
        if (f == TX_PATTERN_MAX_FRAC)
            return PE_EINVAL;
        d->frac[f++] = i < 0 ? '0' : sig[i];
    }
    while (f > 0 && d->frac[f - 1] == '0')
        d->frac[--f] = '\0';
    d->neg = x < 0 && (d->whole || f);
    return PE_OK;
}

/* 0.a against 0.b, digit strings without a point (a missing digit is 0): -1, 0, 1. */
static int frac_cmp(const char *a, const char *b)
{
    while (*a || *b) {
        const char x = *a ? *a++ : '0', y = *b ? *b++ : '0';
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

static int magnitude_cmp(const tx_decimal *a, const tx_decimal *b)
{
    if (a->whole != b->whole)
        return a->whole < b->whole ? -1 : 1;
    return frac_cmp(a->frac, b->frac);
}

static int decimal_cmp(const tx_decimal *a, const tx_decimal *b)
{
    if (a->neg != b->neg)
        return a->neg ? -1 : 1;
    return a->neg ? -magnitude_cmp(a, b) : magnitude_cmp(a, b);
}

static int decimal_ok(const tx_decimal *d)
{
    const size_t f = strnlen(d->frac, sizeof d->frac);
    if (d->whole > (uint64_t)TX_PATTERN_MAX_INT || f == sizeof d->frac ||
        (f && d->frac[f - 1] == '0') || (d->neg && !d->whole && !f))
        return 0;
    for (size_t i = 0; i < f; i++)
        if (d->frac[i] < '0' || d->frac[i] > '9')
            return 0;
    return 1;
}

/* A bound on the digits after the point, read as 0.DIGITS: d without trailing zeros ("" is
 * 0), excl leaves d itself out; an upper bound may be absent (has 0: below 1). */
typedef struct frac_bound {
    const char *d;
    int excl, has;
} frac_bound;

static const frac_bound no_lower = {"", 0, 1}, no_upper = {"", 0, 0};

/* Whether no digits at all (a fraction of 0) lie within lo..hi. */
static int zero_fits(frac_bound lo, frac_bound hi)
{
    return !*lo.d && !lo.excl && !(hi.has && !*hi.d && hi.excl);
}

/* Whether one digit or more can lie within lo..hi. */
static int digits_fit(frac_bound lo, frac_bound hi)
{
    if (!hi.has)
        return 1;
    if (!*hi.d) /* 0.D <= 0: zeros, where the lower bound allows 0 */
        return !hi.excl && !*lo.d && !lo.excl;
    const int c = frac_cmp(lo.d, hi.d);
    return c < 0 || (c == 0 && !lo.excl && !hi.excl);
}

static void frac_tail(rx_out *o, frac_bound lo, frac_bound hi, const char *lead);

/* One digit or more, D, with 0.D within lo..hi (digits_fit holds): by its first digit, the
 * bounds' own first digits taking the rest to the bounds' rest. */
static void frac_digits(rx_out *o, frac_bound lo, frac_bound hi)
{
    if (!hi.has && !*lo.d) {
        put_str(o, lo.excl ? "0*[1-9][0-9]*" : "[0-9]+");
        return;
    }
    if (hi.has && !*hi.d) {
        put_str(o, "0+");
        return;
    }
    const char a = *lo.d ? *lo.d : '0', z = hi.has ? *hi.d : '9';
    const frac_bound lo_rest = {*lo.d ? lo.d + 1 : lo.d, lo.excl, 1};
    const frac_bound hi_rest = {hi.has ? hi.d + 1 : "", hi.excl, hi.has};
    put_str(o, "(?:");
    put(o, &a, 1);
    if (hi.has && a == z) {
        frac_tail(o, lo_rest, hi_rest, "");
    } else {
        frac_tail(o, lo_rest, no_upper, "");
        const char top = hi.has ? (char)(z - 1) : '9';
        if (a + 1 <= top) {
            put_str(o, "|");
            digit_class(o, (char)(a + 1), top);
            put_str(o, "[0-9]*");
        }
        if (hi.has && (zero_fits(no_lower, hi_rest) || digits_fit(no_lower, hi_rest))) {
            put_str(o, "|");
            put(o, &z, 1);
            frac_tail(o, no_lower, hi_rest, "");
        }
    }
    put_str(o, ")");
}

/* What may follow digits already written, with the rest of the fraction within lo..hi
 * (something fits): nothing where 0 fits, else lead and digits. */
static void frac_tail(rx_out *o, frac_bound lo, frac_bound hi, const char *lead)
{
    const int zero = zero_fits(lo, hi);
    if (!digits_fit(lo, hi))
        return;
    if (zero)
        put_str(o, "(?:");
    put_str(o, lead);
    frac_digits(o, lo, hi);
    if (zero)
        put_str(o, ")?");
}

/* The numbers of magnitude lo..hi (hi NULL: unbounded; something fits): the whole part lo
 * with a fraction from lo's up, the whole parts between with any fraction, and the whole
 * part hi with a fraction up to hi's. */
static void number_magnitudes(rx_out *o, const tx_decimal *lo, int lo_excl,
                              const tx_decimal *hi, int hi_excl)
{
    static const char *const point = "\\.";
    const frac_bound flo = {lo->frac, lo_excl, 1};
    const frac_bound fhi = {hi ? hi->frac : "", hi_excl, hi != NULL};
    char w[24];
    snprintf(w, sizeof w, "%llu", (unsigned long long)lo->whole);
    put_str(o, "(?:");
    put_str(o, w);
    if (hi && hi->whole == lo->whole) {
        frac_tail(o, flo, fhi, point);
    } else {
        frac_tail(o, flo, no_upper, point);
        if (!hi || hi->whole - lo->whole >= 2) {
            put_str(o, "|");
            magnitudes(o, lo->whole + 1, hi ? hi->whole - 1 : 0, !hi);
            put_str(o, "(?:\\.[0-9]+)?");
        }
        if (hi && (zero_fits(no_lower, fhi) || digits_fit(no_lower, fhi))) {
            snprintf(w, sizeof w, "|%llu", (unsigned long long)hi->whole);
            put_str(o, w);
            frac_tail(o, no_lower, fhi, point);
        }
    }
    put_str(o, ")");
}

pe_status tx_pattern_num_range(const tx_decimal *lo, int lo_excl, const tx_decimal *hi,
                               int hi_excl, char *out, size_t cap)
{
    rx_out o = {out, 0, cap, 0};
    if (cap)
        out[0] = '\0';
    if ((!lo && !hi) || (lo && !decimal_ok(lo)) || (hi && !decimal_ok(hi)))
        return PE_EINVAL;
    if (lo && hi) {
        const int c = decimal_cmp(lo, hi);
        if (c > 0 || (c == 0 && (lo_excl || hi_excl)))
            return PE_EINVAL;
    }
    const tx_decimal zero = {0};
    int alts = 0;
    put_str(&o, "(?:");
    if (!lo || lo->neg) { /* negatives: -(magnitudes over 0), never -0 */
        tx_decimal from = zero, to = lo ? *lo : zero;
        int from_excl = 1;
        if (hi && hi->neg) {
            from = *hi;
            from_excl = hi_excl;
        }
        from.neg = to.neg = 0;
        put_str(&o, "-");
        number_magnitudes(&o, &from, from_excl, lo ? &to : NULL, lo_excl);
        alts++;
    }
    if (!hi || (!hi->neg && (hi->whole || hi->frac[0] || !hi_excl))) {
        if (alts++)
            put_str(&o, "|");
        const int from_lo = lo && !lo->neg;
        number_magnitudes(&o, from_lo ? lo : &zero, from_lo && lo_excl, hi, hi_excl);
    }
    put_str(&o, ")");
    return o.full ? PE_ENOMEM : PE_OK;
}
