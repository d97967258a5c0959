/* tx_decode.c: the decoders (ByteLevel, ByteFallback, Metaspace, Replace, Fuse, Strip) as
 * Hugging Face chains them: each turns the list of token strings into a new list; the text
 * is the last list joined. Without a decoder the tokens are joined with spaces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tx_decode.h"
#include "text/tx_pipeline.h"

typedef struct toklist {
    tx_buf buf;
    size_t *off, *len; /* token i is buf.p[off[i], off[i] + len[i]) */
    size_t n, cap;
} toklist;

static int tl_push(toklist *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *o = realloc(l->off, cap * sizeof *o);
        if (o)
            l->off = o;
        size_t *ln = realloc(l->len, cap * sizeof *ln);
        if (ln)
            l->len = ln;
        if (!o || !ln)
            return -1;
        l->cap = cap;
    }
    l->off[l->n] = l->buf.n;
    l->len[l->n] = n;
    l->n++;
    return tx_buf_add(&l->buf, s, n);
}

/* Makes the last token longer by s. */
static int tl_extend(toklist *l, const char *s, size_t n)
{
    l->len[l->n - 1] += n;
    return tx_buf_add(&l->buf, s, n);
}

static void tl_free(toklist *l)
{
    tx_buf_free(&l->buf);
    free(l->off);
    free(l->len);
}

/* token i's text ("" while every token is empty and the buffer is still unallocated) */
#define TOK(l, i) ((l)->buf.p ? (l)->buf.p + (l)->off[i] : "")

/* ---- ByteLevel: every token's characters back to bytes, then the bytes as text ----------------- */

static int bytelevel(const toklist *in, toklist *out, tx_bytes_mode mode, int *held)
{
    tx_buf bytes = {0}, text = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const unsigned char *s = (const unsigned char *)TOK(in, i);
        size_t n = in->len[i], start = bytes.n, k = 0;
        for (; k < n; k += tx_utf8_valid_len(s, n, k)) {
            int b = tx_utf8_valid_len(s, n, k) ? tx_cp_to_byte(tx_utf8_decode(s, n, k)) : -1;
            if (b < 0 || tx_buf_addc(&bytes, (char)b) != 0)
                break;
        }
        if (k < n) { /* a character outside the alphabet: the token's own bytes */
            bytes.n = start;
            rc = tx_buf_add(&bytes, s, n);
        }
    }
    if (mode == TX_BYTES_RAW) {
        rc = rc == 0 ? tl_push(out, bytes.p, bytes.n) : -1;
        tx_buf_free(&bytes);
        return rc;
    }
    long tail = rc == 0 ? tx_utf8_lossy((const unsigned char *)bytes.p, bytes.n, &text,
                                        mode == TX_BYTES_HOLD) : -1;
    if (tail > 0)
        *held = 1;
    rc = tail < 0 ? -1 : tl_push(out, text.p, text.n);
    tx_buf_free(&bytes);
    tx_buf_free(&text);
    return rc;
}

/* ---- ByteFallback: runs of "<0xNN>" become the text of their bytes ------------------------------ */

static int hex_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = tx_hex_value(c);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A run of bytes: one token when valid UTF-8, else one U+FFFD per byte (as Hugging Face);
 * with raw, the bytes as they are. last_hold: the run ends the text and may wait for the
 * rest of its last character; such a tail is held back (not turned into U+FFFD), valid run
 * or not. */
static int flush_run(tx_buf *run, toklist *out, int raw, int last_hold, int *held)
{
    if (!run->n)
        return 0;
    if (raw) {
        int rc = tl_push(out, run->p, run->n);
        run->n = 0;
        return rc;
    }
    tx_buf text = {0};
    long tail = tx_utf8_lossy((const unsigned char *)run->p, run->n, &text, last_hold);
    int rc = 0;
    if (tail < 0) {
        rc = -1;
    } else if (text.n + (size_t)tail == run->n && (text.n == 0 ||
               memcmp(text.p, run->p, text.n) == 0)) { /* valid, but for a held tail (a
                                                          * U+FFFD can replace 3 bytes) */
        rc = tl_push(out, run->p, run->n - (size_t)tail);
    } else {
        for (size_t k = 0; k + (size_t)tail < run->n && rc == 0; k++)
            rc = tl_push(out, "\xEF\xBF\xBD", 3);
    }
    if (tail > 0)
        *held = 1;
    tx_buf_free(&text);
    run->n = 0;
    return rc;
}

static int bytefallback(const toklist *in, toklist *out, tx_bytes_mode mode, int *held)
{
    const int raw = mode == TX_BYTES_RAW;
    tx_buf run = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        int b = hex_byte(TOK(in, i), in->len[i]);
        if (b >= 0) {
            rc = tx_buf_addc(&run, (char)b);
            continue;
        }
        rc = flush_run(&run, out, raw, 0, held);
        if (rc == 0)
            rc = tl_push(out, TOK(in, i), in->len[i]);
    }
    if (rc == 0)
        rc = flush_run(&run, out, raw, mode == TX_BYTES_HOLD, held);
    tx_buf_free(&run);
    return rc;
}

/* ---- Metaspace, Replace, Fuse, Strip -------------------------------------------------------------- */

/* The replacement becomes a space; in the first token it is dropped (unless "never"). */
static int metaspace(const tx_dec *d, const toklist *in, toklist *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = TOK(in, i);
        size_t n = in->len[i];
        if (tl_push(out, "", 0) != 0)
            return -1;
        for (size_t k = 0; k < n;) {
            if (n - k >= d->replacement_len &&
                memcmp(s + k, d->replacement, d->replacement_len) == 0) {
                if (!(i == 0 && d->prepend != TX_PREPEND_NEVER) && tl_extend(out, " ", 1) != 0)
                    return -1;
                k += d->replacement_len;
            } else {
                if (tl_extend(out, s + k, 1) != 0)
                    return -1;
                k++;
            }
        }
    }
    return 0;
}

static int valid_utf8(const char *s, size_t n)
{
    size_t k = 0, c;
    while (k < n && (c = tx_utf8_valid_len((const unsigned char *)s, n, k)) != 0)
        k += c;
    return k == n;
}

/* A regex never sees bytes that are not UTF-8 (TX_BYTES_RAW after a byte step): such a
 * token is left as it is. */
static int replace(const tx_dec *d, const toklist *in, toklist *out, tx_region **r)
{
    if (d->pattern.regex && !*r && !(*r = tx_region_new()))
        return -1;
    tx_buf tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        tmp.n = 0;
        if (d->pattern.regex && !valid_utf8(TOK(in, i), in->len[i])) {
            rc = tl_push(out, TOK(in, i), in->len[i]);
            continue;
        }
        rc = tx_replace(&d->pattern, d->content, d->content_len, TOK(in, i), in->len[i], *r,
                        &tmp);
        if (rc == 0)
            rc = tl_push(out, tmp.p ? tmp.p : "", tmp.n);
    }
    tx_buf_free(&tmp);
    return rc;
}

static int fuse(const toklist *in, toklist *out)
{
    if (tl_push(out, "", 0) != 0)
        return -1;
    for (size_t i = 0; i < in->n; i++)
        if (tl_extend(out, TOK(in, i), in->len[i]) != 0)
            return -1;
    return 0;
}

static int strip(const tx_dec *d, const toklist *in, toklist *out)
{
    size_t cl = d->content_len;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = TOK(in, i);
        size_t a = 0, b = in->len[i];
        for (int k = 0; k < d->start && b - a >= cl && memcmp(s + a, d->content, cl) == 0; k++)
            a += cl;
        for (int k = 0; k < d->stop && b - a >= cl && memcmp(s + b - cl, d->content, cl) == 0;
             k++)
            b -= cl;
        if (tl_push(out, s + a, b - a) != 0)
            return -1;
    }
    return 0;
}

/* ---- the chain ---------------------------------------------------------------------------------- */

static int run_step(const tx_dec *d, const toklist *in, toklist *out, tx_bytes_mode mode,
                    int *held, tx_region **r)
{
    switch (d->kind) {
    case TX_DEC_BYTELEVEL: return bytelevel(in, out, mode, held);
    case TX_DEC_BYTEFALLBACK: return bytefallback(in, out, mode, held);
    case TX_DEC_METASPACE: return metaspace(d, in, out);
    case TX_DEC_REPLACE: return replace(d, in, out, r);
    case TX_DEC_FUSE: return fuse(in, out);
    case TX_DEC_STRIP: return strip(d, in, out);
    }
    return -1;
}

pe_status tx_decode(const pe_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                    tx_bytes_mode mode, tx_buf *out, int *held, pe_err *err)
{
    *held = 0;
    out->n = 0;
    toklist a = {0}, b = {0}, *cur = &a, *next = &b;
    tx_region *r = NULL;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab_size || !t->tokens[id]) {
            tl_free(&a);
            return pe_fail(err, PE_EINVAL, "token id %d at position %zu is not in the "
                           "vocabulary (%zu ids); give ids this tokenizer made", (int)id, i,
                           t->vocab_size);
        }
        if (!(skip_special && t->is_special[id]))
            rc = tl_push(cur, t->tokens[id], t->token_len[id]);
    }
    for (int k = 0; k < t->ndec && rc == 0; k++) {
        next->buf.n = next->n = 0;
        rc = run_step(&t->dec[k], cur, next, mode, held, &r);
        toklist *tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t i = 0; i < cur->n && rc == 0; i++) {
        if (!t->has_decoder && i > 0)
            rc = tx_buf_addc(out, ' ');
        if (rc == 0)
            rc = tx_buf_add(out, TOK(cur, i), cur->len[i]);
    }
    /* always NUL-terminated, always allocated */
    if (rc == 0 && tx_buf_reserve(out, 1) == 0)
        out->p[out->n] = '\0';
    else
        rc = -1;
    tl_free(&a);
    tl_free(&b);
    tx_region_free(r);
    if (rc != 0)
        return pe_fail(err, PE_ENOMEM, "out of memory decoding %zu ids", n);
    return PE_OK;
}

/* The public decodes: their arguments checked (call names the function in the message),
 * then tx_decode into a malloc'ed, NUL-terminated *out of *len bytes. */
static pe_status decode_to_caller(const char *call, const pe_tokenizer *t, const int32_t *ids,
                                  size_t n, int skip_special, tx_bytes_mode mode, char **out,
                                  size_t *len)
{
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!t || !out || !len || (!ids && n)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: the tokenizer and the output pointers must not be NULL "
                 "(nor ids when n > 0)", call);
        pe_set_last_error(msg);
        return PE_EINVAL;
    }
    pe_err err = {{0}};
    tx_buf buf = {0};
    int held;
    pe_status s = tx_decode(t, ids, n, skip_special, mode, &buf, &held, &err);
    if (s != PE_OK) {
        tx_buf_free(&buf);
        pe_set_last_error(err.msg);
        return s;
    }
    *out = buf.p;
    *len = buf.n;
    return PE_OK;
}

pe_status pe_tokenizer_decode(const pe_tokenizer *t, const int32_t *ids, size_t n,
                              int skip_special, char **text, size_t *len)
{
    return decode_to_caller("pe_tokenizer_decode", t, ids, n, skip_special, TX_BYTES_LOSSY,
                            text, len);
}

pe_status pe_tokenizer_token_bytes(const pe_tokenizer *t, int32_t id, char **bytes, size_t *len)
{
    return decode_to_caller("pe_tokenizer_token_bytes", t, &id, 1, 0, TX_BYTES_RAW, bytes, len);
}
