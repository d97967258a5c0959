/* serve_echo.c: a completion's "echo": its prompt's text, and with "logprobs" its prompt
 * tokens' log-probabilities, which the answer gives before the generated tokens' (OpenAI's
 * legacy echo; lm-evaluation-harness scores a continuation so, with max_tokens 1). The
 * logprobs come from pe_score_logprobs, once per prompt whatever n: a prefill of the prompt
 * beside the one its sequences run. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* p->text from its ids where the request gave ids: their decode, special tokens shown. */
static unsigned ids_text(const serve_server *s, serve_prompt *p, char *msg, size_t msg_len)
{
    size_t n = 0;
    if (p->text || pe_tokenizer_decode(s->tk, p->ids, p->len, 0, &p->text, &n) == PE_OK)
        return 0;
    snprintf(msg, msg_len, "cannot decode the prompt to echo it: %s", pe_last_error());
    return 500;
}

/* p->lp: the log-probabilities of p's tokens 1.. and the top of each place. */
static unsigned score(serve_server *s, serve_prompt *p, int top, char *msg, size_t msg_len)
{
    if (!(p->lp = calloc(p->len > 1 ? p->len - 1 : 1, sizeof *p->lp))) {
        snprintf(msg, msg_len, "out of memory for the prompt's logprobs");
        return 500;
    }
    pe_status st = pe_score_logprobs(s->e, p->ids, p->len, top, p->lp);
    if (st == PE_OK)
        return 0;
    snprintf(msg, msg_len, "cannot score the prompt to echo its logprobs: %s", pe_last_error());
    return st == PE_EAGAIN ? 503 : st == PE_EINVAL ? 400 : 500;
}

unsigned serve_echo_prepare(serve_server *s, serve_job *j, char *msg, size_t msg_len)
{
    unsigned st = 0;
    for (int i = 0; j->echo && !st && i < j->nprompts; i++) {
        st = ids_text(s, &j->prompts[i], msg, msg_len);
        if (!st && j->logprobs >= 0)
            st = score(s, &j->prompts[i], j->logprobs, msg, msg_len);
    }
    return st;
}
