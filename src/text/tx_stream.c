/* tx_stream.c: pe_detokenizer, the streaming decode. It decodes a small window of the
 * latest ids and releases what the window adds past the text already released, as Hugging
 * Face's DecodeStream does; the window keeps the ids of the last release before the new
 * ones, so position rules (Metaspace's first token, Strip) see the same context as a full
 * decode. A character whose bytes are not all there yet (an emoji over four byte tokens)
 * waits for the ids that complete it. */
#include <stdlib.h>
#include <string.h>

#include "text/tx_decode.h"

struct pe_detokenizer {
    const pe_tokenizer *t;
    int skip_special;
    int32_t *ids;
    size_t n, cap;
    size_t start, read; /* the window is ids[start, n); ids[start, read) made prefix */
    tx_buf prefix;      /* the text of ids[start, read), already released */
    tx_buf text;        /* the text of the window */
    tx_buf out;         /* what the last call returned */
};

pe_status pe_detokenizer_create(const pe_tokenizer *t, int skip_special, pe_detokenizer **out)
{
    if (!t || !out) {
        pe_set_last_error("pe_detokenizer_create: the tokenizer and out must not be NULL");
        return PE_EINVAL;
    }
    *out = calloc(1, sizeof **out);
    int32_t *ids = malloc(64 * sizeof *ids); /* never NULL: the window is ids + start */
    if (!*out || !ids) {
        free(*out);
        free(ids);
        *out = NULL;
        pe_set_last_error("out of memory creating a detokenizer");
        return PE_ENOMEM;
    }
    (*out)->ids = ids;
    (*out)->cap = 64;
    (*out)->t = t;
    (*out)->skip_special = skip_special;
    return PE_OK;
}

void pe_detokenizer_free(pe_detokenizer *d)
{
    if (!d)
        return;
    free(d->ids);
    tx_buf_free(&d->prefix);
    tx_buf_free(&d->text);
    tx_buf_free(&d->out);
    free(d);
}

static pe_status fail(pe_err *err, pe_status s)
{
    pe_set_last_error(err->msg);
    return s;
}

/* Ids a held character may wait for: a UTF-8 character has at most 4 bytes, so a window
 * still held after as many new ids holds another character's start (every new byte began
 * one), and what it has before that is released. */
#define TX_HOLD_IDS 4

/* Releases what the window's text adds past the released text, then the window moves up.
 * A held character waits (up to TX_HOLD_IDS ids). A window whose text no longer begins with
 * the released text (a run of byte tokens that a later byte made invalid, which ByteFallback
 * then gives as one U+FFFD a byte, as Hugging Face does) restarts after the released ids:
 * released text is never taken back nor given twice, and each push decodes a short window. */
static pe_status release(pe_detokenizer *d, int final, const char **text, size_t *len)
{
    pe_err err = {{0}};
    d->out.n = 0;
    for (int restarted = 0;; restarted = 1) {
        int held = 0;
        pe_status s = tx_decode(d->t, d->ids + d->start, d->n - d->start, d->skip_special,
                                final ? TX_BYTES_LOSSY : TX_BYTES_HOLD, &d->text, &held,
                                &err);
        if (s != PE_OK)
            return fail(&err, s);
        if (held && d->n - d->read < TX_HOLD_IDS)
            break;
        const int begins = d->text.n >= d->prefix.n &&
                           (d->prefix.n == 0 || memcmp(d->text.p, d->prefix.p, d->prefix.n) == 0);
        if (begins && d->text.n == d->prefix.n) /* nothing new (a skipped special token):
                                                 * the window keeps its context */
            break;
        if (begins) {
            if (tx_buf_add(&d->out, d->text.p + d->prefix.n, d->text.n - d->prefix.n) != 0)
                return fail(&err, pe_fail(&err, PE_ENOMEM, "out of memory in the detokenizer"));
            d->start = d->read;
            d->read = d->n;
            s = tx_decode(d->t, d->ids + d->start, d->read - d->start, d->skip_special,
                          TX_BYTES_HOLD, &d->prefix, &held, &err);
            if (s != PE_OK)
                return fail(&err, s);
            break;
        }
        if (restarted) /* cannot happen: every text begins with the empty one */
            break;
        d->start = d->read;
        d->prefix.n = 0;
    }
    if (final) { /* a new stream starts */
        d->start = d->read = d->n;
        d->prefix.n = 0;
    }
    /* drop ids before the window */
    if (d->start > 4096) {
        memmove(d->ids, d->ids + d->start, (d->n - d->start) * sizeof *d->ids);
        d->n -= d->start;
        d->read -= d->start;
        d->start = 0;
    }
    *text = d->out.p ? d->out.p : "";
    *len = d->out.n;
    return PE_OK;
}

pe_status pe_detokenizer_push(pe_detokenizer *d, int32_t id, const char **text, size_t *len)
{
    if (!d || !text || !len) {
        pe_set_last_error("pe_detokenizer_push: d, text and len must not be NULL");
        return PE_EINVAL;
    }
    *text = "";
    *len = 0;
    const pe_tokenizer *t = d->t;
    if (id < 0 || (size_t)id >= t->vocab_size || !t->tokens[id]) {
        pe_err err;
        return fail(&err, pe_fail(&err, PE_EINVAL, "token id %d is not in the vocabulary (%zu "
                                  "ids); push ids this tokenizer made", (int)id,
                                  t->vocab_size));
    }
    if (d->skip_special && t->is_special[id]) /* the decode drops it: so can the window */
        return PE_OK;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        int32_t *p = realloc(d->ids, cap * sizeof *p);
        if (!p) {
            pe_set_last_error("out of memory in the detokenizer");
            return PE_ENOMEM;
        }
        d->ids = p;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    return release(d, 0, text, len);
}

pe_status pe_detokenizer_flush(pe_detokenizer *d, const char **text, size_t *len)
{
    if (!d || !text || !len) {
        pe_set_last_error("pe_detokenizer_flush: d, text and len must not be NULL");
        return PE_EINVAL;
    }
    return release(d, 1, text, len);
}
