/* fuzz_serve.c: fuzzes pengine serve's request parsing (apps/serve_parse.c, with the chat
 * templates of apps/chat_template.c) with a real tokenizer (TOKENIZER, a Qwen-style
 * tokenizer.json with <|im_end|>). The input's first byte picks the route and the server
 * (bit 0: /v1/chat/completions, else /v1/completions; bit 1: a context of 64, else 4096;
 * bit 2: the llama2 (bit 3) or llama3 template instead of chatml; bits 4 and 5 both: no
 * template); the rest is the body, in a buffer of exactly its size. Checks that an accepted
 * request has 1 to SERVE_MAX_CHOICES choices (a chat one prompt), prompts of ids in the
 * vocabulary that, with max_tokens >= 1, fit the context, at most PE_MAX_STOP stop ids, and
 * an echo only on a completion (a prompt's kept text only with it; no logprobs yet, which
 * the engine computes later). The server has JSON mode's grammar, so that response_format's
 * schemas are compiled too. Exits 77 (a skip) when TOKENIZER is unset or missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "serve.h"

static serve_server g_srv;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *path = getenv("TOKENIZER");
    if (!path || access(path, R_OK) != 0) {
        fprintf(stderr, "skipped: TOKENIZER (%s) is not a readable tokenizer.json\n",
                path ? path : "unset");
        exit(77);
    }
    if (pe_tokenizer_load(path, &g_srv.tk) != PE_OK) {
        fprintf(stderr, "fuzz_serve: %s: %s\n", path, pe_last_error());
        abort();
    }
    g_srv.m.vocab = (int)pe_tokenizer_vocab_size(g_srv.tk);
    g_srv.chat_end_id = pe_tokenizer_token_id(g_srv.tk, "<|im_end|>");
    if (pe_grammar_json(g_srv.tk, &g_srv.json_grammar) != PE_OK) { /* response_format */
        fprintf(stderr, "fuzz_serve: JSON mode's grammar: %s\n", pe_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int flags = data[0];
    g_srv.m.context = (flags & 2) ? 64 : 4096;
    g_srv.chat = cli_chat_template_named((flags & 4) ? ((flags & 8) ? "llama2" : "llama3")
                                                      : "chatml");
    if ((flags & 0x30) == 0x30)
        g_srv.chat = NULL;
    size_t len = size - 1;
    char *body = malloc(len ? len : 1);
    memcpy(body, data + 1, len);
    serve_job j;
    char msg[512];
    if (serve_parse(&g_srv, flags & 1, body, len, &j, msg, sizeof msg) == 0) {
        if (j.nprompts < 1 || j.n < 1 || j.nprompts * j.n > SERVE_MAX_CHOICES ||
            (j.chat && j.nprompts != 1) || j.max_tokens < 1 || j.nstop_ids > PE_MAX_STOP ||
            (j.chat && j.echo))
            abort();
        for (int k = 0; k < j.nprompts; k++) {
            const serve_prompt *p = &j.prompts[k];
            if (p->len == 0 || (long)p->len + j.max_tokens > g_srv.m.context ||
                (p->text && !j.echo) || p->lp)
                abort();
            for (size_t i = 0; i < p->len; i++)
                if (p->ids[i] < 0 || p->ids[i] >= g_srv.m.vocab)
                    abort();
        }
        serve_job_free(&j);
    }
    free(body);
    return 0;
}
