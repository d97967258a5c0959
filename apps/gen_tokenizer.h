/* gen_tokenizer.h: "pengine gen gpt2|llama --tokenizer FILE": a random decoder sized to a real
 * tokenizer, which is copied into the model directory. */
#ifndef PE_APPS_GEN_TOKENIZER_H
#define PE_APPS_GEN_TOKENIZER_H

#include "pengine/pengine_tools.h"

/* Loads the tokenizer at path (a missing or malformed file: printed, CLI_USAGE) and fits spec
 * to it: the vocabulary (--vocab, when given (vocab_set), must hold it), and the tokenizer's
 * BOS and EOS ids where it has them and --bos / --eos were not given. Returns the exit code. */
int gen_fit_tokenizer(pe_gen_spec *spec, const char *path, int vocab_set, int bos_set,
                      int eos_set);

/* Copies the tokenizer at path (a tokenizer.json, or a directory holding one or vocab.json
 * with merges.txt) into the model directory dir, with the tokenizer_config.json beside it
 * (the chat template), and removes the stale tokenizer files of the other layout there: the
 * directory holds one tokenizer, as it holds one checkpoint. Returns the exit code (failures
 * printed). */
int gen_copy_tokenizer(const char *path, const char *dir);

#endif
