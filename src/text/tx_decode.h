/* tx_decode.h: ids -> text through the decoder steps, shared by pe_tokenizer_decode and the
 * streaming pe_detokenizer. */
#ifndef PE_TEXT_TX_DECODE_H
#define PE_TEXT_TX_DECODE_H

#include "text/tx_internal.h"
#include "text/tx_utf8.h"

/* What tx_decode makes of the bytes that byte tokens (ByteLevel, ByteFallback) stand for. */
typedef enum tx_bytes_mode {
    TX_BYTES_LOSSY = 0, /* text: bytes that are not valid UTF-8 become U+FFFD (as Hugging Face) */
    TX_BYTES_HOLD,      /* the same, but a character whose bytes are not all there yet at the
                         * very end is left out (and *held set to 1) */
    TX_BYTES_RAW        /* the bytes as they are, valid UTF-8 or not */
} tx_bytes_mode;

/* out = the text of ids (cleared first; valid UTF-8 unless mode is TX_BYTES_RAW). PE_EINVAL
 * (message in err) for an id without a token. */
pe_status tx_decode(const pe_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                    tx_bytes_mode mode, tx_buf *out, int *held, pe_err *err);

#endif
