/* sampling_flags.h: the sampling flags that generate and chat share. */
#ifndef PE_APPS_SAMPLING_FLAGS_H
#define PE_APPS_SAMPLING_FLAGS_H

#include <stddef.h>

#include "pengine/pengine.h"

/* The flags, each with a value, for a subcommand's list of them. */
#define CLI_SAMPLING_FLAGS                                                                     \
    "--temperature", "--top-k", "--top-p", "--min-p", "--seed", "--repetition-penalty",        \
        "--frequency-penalty", "--presence-penalty"

/* Greedy, no penalty: pe_seq_params_init's sampling. */
void cli_sampling_init(pe_sampling *s);

/* Applies one of CLI_SAMPLING_FLAGS to s. Returns 0, 1 with msg set on a bad value, or -1
 * when flag is not one of them. */
int cli_apply_sampling_flag(pe_sampling *s, const char *flag, const char *value, char *msg,
                            size_t msg_len);

#endif
