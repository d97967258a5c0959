/* chat_template.c: the built-in chat templates (chat_template.h).
 *
 * Each is the text Hugging Face's Jinja template renders for a system message, user
 * messages and the assistant's replies (add_generation_prompt: the text ends where the
 * reply starts). The model's own template is not interpreted: it is recognized by the
 * special tokens it writes.
 */
#include "chat_template.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"

static const cli_chat_template templates[] = {
    {"chatml", "<|im_end|>", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n",
     "<|im_end|>\n<|im_start|>assistant\n", "\n", 0},
    {"llama3", "<|eot_id|>", "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>",
     "<|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "", 0},
    {"llama2", "</s>", "<<SYS>>\n", "\n<</SYS>>\n\n", "[INST] ", " [/INST]", "<s>", 1},
};
enum { NTEMPLATES = sizeof templates / sizeof *templates };

/* The special token each template writes, by which a model's own template is known. */
static const char *const signatures[NTEMPLATES] = {"<|im_start|>", "<|start_header_id|>",
                                                    "[INST]"};

const cli_chat_template *cli_chat_template_named(const char *name)
{
    for (int i = 0; i < NTEMPLATES; i++)
        if (name && !strcmp(templates[i].name, name))
            return &templates[i];
    return NULL;
}

const char *cli_chat_template_names(void) { return "chatml, llama3, llama2"; }

/* The template text of a chat_template field: a string, or a list of {name, template}
 * (the one named "default", else the first). */
static const char *template_text(const cJSON *field)
{
    if (cJSON_IsString(field))
        return field->valuestring;
    const cJSON *item, *first = NULL;
    cJSON_ArrayForEach(item, field)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "template");
        if (!cJSON_IsString(text))
            continue;
        if (!first)
            first = text;
        if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
            return text->valuestring;
    }
    return first ? first->valuestring : NULL;
}

const cli_chat_template *cli_chat_template_detect(const char *dir, char *msg, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *json = cli_read_file(path, NULL);
    if (!json) {
        snprintf(msg, len, "no chat template: %s cannot be read; name one with "
                 "--chat-template (%s)", path, cli_chat_template_names());
        return NULL;
    }
    cJSON *root = cJSON_Parse(json);
    free(json);
    const char *text = root ? template_text(cJSON_GetObjectItemCaseSensitive(root,
                                                                              "chat_template"))
                            : NULL;
    const cli_chat_template *t = NULL;
    for (int i = 0; text && i < NTEMPLATES && !t; i++)
        if (strstr(text, signatures[i]))
            t = &templates[i];
    if (!t)
        snprintf(msg, len, "%s: %s; name a built-in one with --chat-template (%s)", path,
                 !root   ? "is not valid JSON"
                 : !text ? "has no chat_template"
                         : "its chat_template is none of the built-in templates",
                 cli_chat_template_names());
    cJSON_Delete(root);
    return t;
}

/* Appends the strings of parts (NULL-terminated) into a new string. */
static char *concat(const char *const *parts)
{
    size_t n = 1;
    for (int i = 0; parts[i]; i++)
        n += strlen(parts[i]);
    char *s = malloc(n);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (int i = 0; parts[i]; i++)
        strcat(s, parts[i]);
    return s;
}

char *cli_chat_turn_text(const cli_chat_template *t, int first, int closed, const char *system,
                         const char *user)
{
    const char *sys[3] = {"", "", ""}; /* open, message, close */
    if (first && system && system[0]) {
        sys[0] = t->sys_open;
        sys[1] = system;
        sys[2] = t->sys_close;
    }
    const char *close_reply = !first && !closed ? t->end_token : "";
    const char *between = first ? "" : t->next_turn;
    if (t->system_in_user) { /* [INST] <<SYS>> ... <</SYS>> user [/INST] */
        const char *parts[] = {close_reply, between, t->user_open, sys[0], sys[1], sys[2],
                               user, t->user_close, NULL};
        return concat(parts);
    }
    const char *parts[] = {close_reply, between, sys[0], sys[1], sys[2], t->user_open, user,
                           t->user_close, NULL};
    return concat(parts);
}

int cli_apply_chat_flag(cli_chat_flags *c, const char *f, const char *v, char *msg, size_t len)
{
    if (!strcmp(f, "--model")) {
        *c->model_path = v;
    } else if (!strcmp(f, "--tokenizer")) {
        c->tokenizer = v;
    } else if (!strcmp(f, "--chat-template")) {
        c->template_name = v;
        if (!cli_chat_template_named(v)) {
            snprintf(msg, len, "--chat-template '%s' is not a built-in template; give one of %s",
                     v, cli_chat_template_names());
            return 1;
        }
    } else {
        return -1;
    }
    return 0;
}

const cli_chat_template *cli_chat_template_pick(const cli_chat_flags *c, char *msg,
                                                size_t len)
{
    if (c->template_name)
        return cli_chat_template_named(c->template_name);
    char dir[4096];
    const char *from = c->tokenizer ? c->tokenizer : *c->model_path;
    const char *slash = strrchr(from, '/');
    struct stat sb;
    if (stat(from, &sb) == 0 && !S_ISDIR(sb.st_mode)) /* a tokenizer.json: its directory */
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - from) + (slash == from) : 1,
                 slash ? from : ".");
    else
        snprintf(dir, sizeof dir, "%s", from);
    return cli_chat_template_detect(dir, msg, len);
}
