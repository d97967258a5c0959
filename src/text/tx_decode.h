/* tx_decode.h: ids -> text through the decoder steps, shared by pe_tokenizer_decode and the
 * streaming pe_detokenizer. */
#ifndef PE_TEXT_TX_DECODE_H
#define PE_TEXT_TX_DECODE_H

#include "text/tx_internal.h"
#include "text/tx_utf8.h"

/* out = the text of ids (cleared first; valid UTF-8). With hold_tail, a character whose
 * bytes are not all there yet at the very end is left out and *held is set to 1. PE_EINVAL
 * (message in err) for an id without a token. */
pe_status tx_decode(const pe_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                    int hold_tail, tx_buf *out, int *held, pe_err *err);

#endif
