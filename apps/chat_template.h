/* chat_template.h: the built-in chat templates of `pengine chat` (ChatML, Llama 3, Llama 2),
 * chosen from a model's tokenizer_config.json or by name, and the text of each turn.
 *
 * A conversation is one kept sequence: the first turn's text is encoded with the
 * tokenizer's BOS, every later turn's text is appended to the tokens already in the KV
 * cache (the previous reply, ended by the template's end-of-turn token or cut by the
 * length, in which case the turn's text closes it first).
 */
#ifndef PE_APPS_CHAT_TEMPLATE_H
#define PE_APPS_CHAT_TEMPLATE_H

#include <stddef.h>

typedef struct cli_chat_template {
    const char *name;      /* "chatml", "llama3", "llama2" */
    const char *end_token; /* the end of an assistant reply, e.g. "<|im_end|>" */
    const char *sys_open, *sys_close; /* around the system message */
    const char *user_open;             /* before a user message */
    const char *user_close;            /* after it, up to where the reply starts */
    const char *next_turn;             /* before a later turn's user_open, after end_token */
    int system_in_user;                /* llama2: the system message opens the first [INST] */
} cli_chat_template;

/* The built-in template called name; NULL when there is none. */
const cli_chat_template *cli_chat_template_named(const char *name);
/* "chatml, llama3, llama2": the names, for messages. */
const char *cli_chat_template_names(void);

/* The flags of the commands that talk (chat, serve): what they talk with. */
typedef struct cli_chat_flags {
    const char **model_path;   /* --model DIR: where it goes (the device options') */
    const char *tokenizer;     /* --tokenizer FILE; NULL: the model directory's */
    const char *template_name; /* --chat-template NAME, a built-in one; NULL: the model's */
} cli_chat_flags;

/* Takes flag f with value v when it is one of cli_chat_flags'. Returns -1 when it is not,
 * 0 when taken, 1 when its value is bad (msg says why). */
int cli_apply_chat_flag(cli_chat_flags *c, const char *f, const char *v, char *msg, size_t len);
/* The template: --chat-template, else the one tokenizer_config.json names beside
 * --tokenizer, else in the model directory. NULL with msg saying why when there is none. */
const cli_chat_template *cli_chat_template_pick(const cli_chat_flags *c, char *msg,
                                                size_t len);

/* The template of a model from the chat_template of the tokenizer_config.json in dir (the
 * directory of the model or of its tokenizer.json). Returns NULL and writes why (a missing
 * file or field, or a template that is none of the built-in ones) into msg. */
const cli_chat_template *cli_chat_template_detect(const char *dir, char *msg, size_t len);

/* The text of a turn (malloc'ed; NULL when out of memory): the first turn holds the
 * system message (or none when system is NULL) and the user's; a later turn first closes
 * the previous reply when `closed` is 0 (the length cut it before its end token). */
char *cli_chat_turn_text(const cli_chat_template *t, int first, int closed, const char *system,
                         const char *user);

#endif
