/* tx_normalize.c: the normalizers: Unicode NFC / NFD / NFKC / NFKD (utf8proc), Prepend and
 * Replace, applied in order. Placeholders of invalid input bytes pass through untouched: the
 * Unicode forms run on the valid stretches between them. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/tx_pipeline.h"

static int is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

static int unicode_form(const char *s, size_t n, utf8proc_option_t opt, tx_buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t j = i; /* the valid stretch s[i, j) */
        while (j < n && tx_placeholder_byte(u, n, j) < 0)
            j++;
        if (is_ascii(s + i, j - i)) {
            if (tx_buf_add(out, s + i, j - i) != 0)
                return -1;
        } else {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t len = utf8proc_map(u + i, (utf8proc_ssize_t)(j - i), &dst, opt);
            if (len < 0) {
                /* only on out of memory: the stretch is valid UTF-8 */
                free(dst);
                return -1;
            }
            int rc = tx_buf_add(out, dst, (size_t)len);
            free(dst);
            if (rc != 0)
                return -1;
        }
        if (j < n && tx_buf_add(out, s + j, 3) != 0) /* the placeholder */
            return -1;
        i = j < n ? j + 3 : n;
    }
    return 0;
}

int tx_replace(const tx_text_pattern *p, const char *with, size_t with_len, const char *s,
               size_t n, tx_region *r, tx_buf *out)
{
    size_t i = 0;
    for (;;) {
        size_t ms, me;
        if (p->literal) {
            const char *hit = p->literal_len <= n - i ?
                memmem(s + i, n - i, p->literal, p->literal_len) : NULL;
            if (!hit)
                break;
            ms = (size_t)(hit - s);
            me = ms + p->literal_len;
        } else if (!tx_regex_search(p->regex, r, s, n, i, &ms, &me) || me == ms) {
            break; /* an empty match replaces nothing */
        }
        if (tx_buf_add(out, s + i, ms - i) != 0 || tx_buf_add(out, with, with_len) != 0)
            return -1;
        i = me;
    }
    return tx_buf_add(out, s + i, n - i);
}

static int apply(const tx_norm *nm, const char *s, size_t n, tx_region *r, tx_buf *out)
{
    switch (nm->kind) {
    case TX_NORM_NFC: return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case TX_NORM_NFD: return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case TX_NORM_NFKC:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case TX_NORM_NFKD:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case TX_NORM_PREPEND: /* only before something, as Hugging Face */
        if (n && tx_buf_add(out, nm->text, nm->text_len) != 0)
            return -1;
        return tx_buf_add(out, s, n);
    case TX_NORM_REPLACE:
        return tx_replace(&nm->pattern, nm->text, nm->text_len, s, n, r, out);
    }
    return -1;
}

int tx_normalize(const pe_tokenizer *t, const char *s, size_t n, tx_region *r, tx_buf *out)
{
    tx_buf tmp = {0};
    out->n = 0;
    if (tx_buf_add(out, s, n) != 0)
        return -1;
    for (int k = 0; k < t->nnorm; k++) {
        tmp.n = 0;
        if (apply(&t->norm[k], out->p, out->n, r, &tmp) != 0) {
            tx_buf_free(&tmp);
            return -1;
        }
        tx_buf swap = *out;
        *out = tmp;
        tmp = swap;
    }
    tx_buf_free(&tmp);
    return 0;
}
