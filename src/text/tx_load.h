/* tx_load.h: the loader's parts, one per section of tokenizer.json. Each reads its section
 * into the pe_tokenizer and names the file and the part at fault in its message. */
#ifndef PE_TEXT_TX_LOAD_H
#define PE_TEXT_TX_LOAD_H

#include <cjson/cJSON.h>

#include "text/tx_internal.h"

typedef struct tx_ctx {
    const char *file; /* the file being read, for messages */
    pe_err *err;
} tx_ctx;

/* pre_tokenizer, normalizer, decoder (tx_load_steps.c). The pre-tokenizer decides whether
 * the model is byte-level, so it is read before the model. */
pe_status tx_load_pretok(pe_tokenizer *t, const cJSON *j, tx_ctx *c);
pe_status tx_load_norm(pe_tokenizer *t, const cJSON *j, tx_ctx *c);
pe_status tx_load_decoder(pe_tokenizer *t, const cJSON *j, tx_ctx *c);
/* post_processor (tx_load_post.c): the ids around the text. */
pe_status tx_load_post(pe_tokenizer *t, const cJSON *j, tx_ctx *c);
/* model (tx_load_model.c): the BPE vocabulary and merges. */
pe_status tx_load_model(pe_tokenizer *t, const cJSON *model, tx_ctx *c);
/* The model from GPT-2's vocab.json (parsed) and merges.txt (its text). */
pe_status tx_load_model_pair(pe_tokenizer *t, const cJSON *vocab, char *merges, size_t len,
                             tx_ctx *c);
/* added_tokens (tx_added.c), after the model and normalizer: ids, flags and the tries. */
pe_status tx_load_added(pe_tokenizer *t, const cJSON *arr, tx_ctx *c);
/* Adds one added token (the vocab.json + merges.txt case: <|endoftext|>). */
pe_status tx_add_token(pe_tokenizer *t, const char *content, int32_t id, int special,
                       tx_ctx *c);
/* Builds the tries of the added tokens (after every tx_add_token). */
pe_status tx_build_tries(pe_tokenizer *t, tx_ctx *c);

/* The largest token id a file may give: the id tables are as long as the largest id, and
 * real vocabularies stay far below (the largest about 262 k). */
#define TX_MAX_TOKEN_ID ((1 << 24) - 1)

/* Sets tokens[id] (growing the id table) and the token -> id map; PE_EFORMAT for an id
 * below 0 or beyond TX_MAX_TOKEN_ID. */
pe_status tx_set_token(pe_tokenizer *t, const char *s, size_t len, int32_t id, tx_ctx *c);

/* A JSON pattern object {"String": s} or {"Regex": r} (what names it). */
pe_status tx_load_pattern(const cJSON *j, const char *what, tx_text_pattern *out, tx_ctx *c);
/* GPT-2's split regex, compiled. */
pe_status tx_gpt2_regex(tx_regex **out, pe_err *err);
/* Helpers: a string member (NULL when absent or null), a boolean member with a default. */
const char *tx_json_str(const cJSON *obj, const char *key);
pe_status tx_json_bool(const cJSON *obj, const char *key, int dflt, const char *what, int *out,
                       tx_ctx *c);

#endif
