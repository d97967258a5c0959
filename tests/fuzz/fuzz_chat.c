/* fuzz_chat.c: fuzzes pengine chat's template choice and turns (apps/chat_template.c): the
 * input is a model's tokenizer_config.json, whose chat_template is recognized (or not) by
 * cli_chat_template_detect and cli_chat_template_pick; its two halves are then a system
 * prompt and a user message, rendered as each kind of turn of the template found (llama2's
 * when none). Checks that nothing reads out of bounds or leaks (the sanitizers' reports). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("tokenizer_config.json", data, size);
    char msg[256];
    const cli_chat_template *t = cli_chat_template_detect(fuzz_dir(), msg, sizeof msg);
    if (!t)
        t = cli_chat_template_named("llama2");
    size_t half = size / 2;
    char *sys = malloc(half + 1), *user = malloc(size - half + 1);
    if (!sys || !user)
        abort();
    memcpy(sys, data, half);
    sys[half] = 0;
    memcpy(user, data + half, size - half);
    user[size - half] = 0;
    for (int k = 0; k < 4; k++) /* first or not, after a closed turn or not; k = 3 no system */
        free(cli_chat_turn_text(t, k & 1, k >> 1, k == 3 ? NULL : sys, user));
    free(sys);
    free(user);
    const char *dir = fuzz_dir();
    cli_chat_flags flags = {.model_path = &dir};
    (void)cli_chat_template_pick(&flags, msg, sizeof msg);
    return 0;
}
