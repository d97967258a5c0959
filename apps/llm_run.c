/* llm_run.c: decoder engines for the command, and timed batches of sequences. */
#include "llm_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int cli_llm_open(const cli_options *o, pe_engine **out)
{
    *out = NULL;
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.ndevices = o->ndevices;
    cfg.devices = o->devices;
    cfg.dp = o->dp;
    cfg.pp = o->pp;
    cfg.tp = o->tp;
    cfg.dtype = o->dtype;
    cfg.threads = o->threads;
    cfg.kv_tokens = o->kv_tokens;
    pe_engine *e = NULL;
    pe_status s = pe_engine_create(&cfg, &e);
    if (s == PE_OK)
        s = pe_engine_load(e, o->model_path);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        pe_engine_destroy(e);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    *out = e;
    return CLI_OK;
}

const char *cli_finish_name(pe_finish f)
{
    switch (f) {
    case PE_FINISH_NONE: return "none";
    case PE_FINISH_EOS: return "eos";
    case PE_FINISH_STOP: return "stop";
    case PE_FINISH_LENGTH: return "length";
    case PE_FINISH_CANCELLED: return "cancelled";
    case PE_FINISH_ERROR: return "error";
    }
    return "unknown";
}

int cli_batch_alloc(cli_batch *b)
{
    size_t n = (size_t)b->n, m = (size_t)(b->max_tokens > 0 ? b->max_tokens : 1);
    b->tokens = calloc(n, sizeof *b->tokens);
    b->events = calloc(n, sizeof *b->events);
    b->ntok = calloc(n, sizeof *b->ntok);
    b->finish = calloc(n, sizeof *b->finish);
    b->status = calloc(n, sizeof *b->status);
    b->t_first = calloc(n, sizeof *b->t_first);
    b->t_last = calloc(n, sizeof *b->t_last);
    int ok = b->tokens && b->events && b->ntok && b->finish && b->status && b->t_first &&
             b->t_last;
    for (size_t i = 0; ok && i < n; i++) {
        b->tokens[i] = malloc(m * sizeof **b->tokens);
        b->events[i] = b->logprobs ? malloc(m * sizeof **b->events) : NULL;
        ok = b->tokens[i] && (!b->logprobs || b->events[i]);
    }
    if (!ok) {
        cli_batch_free(b);
        cli_error("out of memory for the batch's results; use a smaller --batch or --max-tokens");
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

void cli_batch_free(cli_batch *b)
{
    for (int i = 0; b->tokens && i < b->n; i++)
        free(b->tokens[i]);
    for (int i = 0; b->events && i < b->n; i++)
        free(b->events[i]);
    free(b->tokens);
    free(b->events);
    free(b->ntok);
    free(b->finish);
    free(b->status);
    free(b->t_first);
    free(b->t_last);
    b->tokens = NULL;
    b->events = NULL;
    b->ntok = NULL;
    b->finish = NULL;
    b->status = NULL;
    b->t_first = b->t_last = NULL;
}

int cli_batch_run(pe_engine *e, cli_batch *b)
{
    b->t0 = cli_now_ms();
    for (int i = 0; i < b->n; i++) {
        pe_seq_params p;
        pe_seq_params_init(&p);
        p.prompt = b->prompts[i];
        p.prompt_len = b->lens[i];
        p.max_tokens = b->max_tokens;
        p.sampling = b->sampling;
        p.sampling.seed = b->sampling.seed + (uint64_t)i;
        p.logprobs = b->logprobs;
        p.ignore_eos = b->ignore_eos;
        p.stop = b->stop;
        p.nstop = b->nstop;
        p.user = (void *)(intptr_t)i;
        uint64_t id;
        if (pe_seq_submit(e, &p, &id) != PE_OK) {
            cli_error(pe_last_error());
            return CLI_USAGE; /* a parameter the engine refused */
        }
    }
    int rc = CLI_OK;
    pe_token_event ev;
    while (pe_seq_wait(e, &ev) == PE_OK) {
        int i = (int)(intptr_t)ev.user;
        double now = cli_now_ms();
        if (ev.token >= 0 && b->ntok[i] < b->max_tokens) {
            if (b->ntok[i] == 0)
                b->t_first[i] = now;
            b->t_last[i] = now;
            b->tokens[i][b->ntok[i]] = ev.token;
            if (b->events && b->events[i])
                b->events[i][b->ntok[i]] = ev;
            b->ntok[i]++;
        }
        if (b->on_event)
            b->on_event(b->ctx, i, &ev);
        if (ev.finish != PE_FINISH_NONE) {
            b->finish[i] = ev.finish;
            b->status[i] = ev.status;
            if (ev.finish == PE_FINISH_ERROR && rc == CLI_OK) {
                cli_errorf("sequence %d failed: %s (%s)", i, pe_status_str(ev.status),
                           pe_engine_last_error(e));
                rc = CLI_RUNTIME;
            }
        }
    }
    return rc;
}

void cli_batch_rates(const cli_batch *b, cli_rates *out)
{
    memset(out, 0, sizeof *out);
    double last_first = b->t0, first_first = 0, end = b->t0, ttft = 0;
    long after_first = 0;
    int started = 0;
    for (int i = 0; i < b->n; i++) {
        out->prompt_tokens += (long)b->lens[i];
        out->generated += b->ntok[i];
        if (!b->ntok[i])
            continue;
        ttft += b->t_first[i] - b->t0;
        last_first = b->t_first[i] > last_first ? b->t_first[i] : last_first;
        first_first = !started || b->t_first[i] < first_first ? b->t_first[i] : first_first;
        end = b->t_last[i] > end ? b->t_last[i] : end;
        after_first += b->ntok[i] - 1;
        started++;
    }
    if (!started)
        return;
    out->ttft_ms = ttft / started;
    out->prefill_tok_s = (double)out->prompt_tokens / ((last_first - b->t0) * 1e-3);
    /* decode: the span after the last sequence got its first token, when every sequence of
     * the batch decodes together */
    double span = end - last_first;
    long steps = 0;
    for (int i = 0; i < b->n; i++)
        if (b->ntok[i] > 1 && b->ntok[i] - 1 > steps)
            steps = b->ntok[i] - 1;
    out->decode_ms = steps ? span / (double)steps : 0;
    out->decode_tok_s = span > 0 ? (double)after_first / (span * 1e-3) : 0;
    (void)first_first;
}
