/* llm_model.h: the decoder the demo writes for itself when no --model is given. */
#ifndef PE_APPS_LLM_MODEL_H
#define PE_APPS_LLM_MODEL_H

#include <stdint.h>

typedef struct cli_llm_model {
    char dir[4096]; /* a new folder in $TMPDIR (or /tmp); "" when none was made */
} cli_llm_model;

/* Writes a seeded random Llama (8 blocks, hidden 384, 6 heads and 2 KV heads, MLP 1024,
 * vocabulary 4096, 256 positions: 15.7 M parameters, 63 MB; a few seconds of demo on two
 * cores) into a new temporary folder. Returns the exit code (printed). */
int cli_llm_model_write(uint64_t seed, cli_llm_model *m);
/* Removes the folder and its files. */
void cli_llm_model_remove(cli_llm_model *m);

#endif
