/* llm_run.c: decoder engines for the command, and timed batches of sequences. */
#include "llm_run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_job.h"

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int cli_llm_open(const cli_options *o, pe_engine **out)
{
    return cli_llm_open_with(o, 0, 0, out);
}

int cli_llm_open_with(const cli_options *o, int decode_groups, size_t trace_events,
                      pe_engine **out)
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
    cfg.max_seqs = o->max_seqs;
    cfg.max_step_tokens = o->max_step_tokens;
    cfg.spec_tokens = o->spec_tokens;
    cfg.spec_ngram_max = o->spec_ngram;
    cfg.spec_max_seqs = o->spec_max_seqs;
    cfg.stage_layers = o->nsplit ? o->split : NULL; /* --split: blocks per stage */
    cfg.decode_groups = decode_groups;
    cfg.tp_embedding = o->tp_embedding;
    /* PP: a prompt streams through the stages in micro-batches, pp of them unless told */
    const int pp = o->pp > 1 ? o->pp : 1;
    cfg.schedule = o->schedule_set ? o->schedule : pp > 1 ? PE_SCHED_STREAM : PE_SCHED_NAIVE;
    cfg.microbatches = o->microbatches > 0 ? o->microbatches : pp;
    cfg.trace_capacity = trace_events;
    cfg.mpi = cli_mpi_procs() > 1;
    pe_engine *e = NULL;
    pe_status s = pe_engine_create(&cfg, &e);
    if (s == PE_OK)
        s = pe_engine_load(e, o->model_path);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        pe_engine_destroy(e);
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    if (cli_mpi_me() != 0) { /* process 0 runs the command; this one runs its workers */
        /* mpirun hands SIGINT and SIGTERM to every process: process 0 decides (serve
         * finishes its requests in flight, which need this process), and its destroy ends
         * this one's follow */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        s = pe_engine_follow(e);
        if (s != PE_OK)
            cli_error(pe_engine_last_error(e));
        pe_engine_destroy(e);
        return s == PE_OK ? CLI_FOLLOWED : CLI_RUNTIME;
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
    case PE_FINISH_GRAMMAR: return "grammar";
    }
    return "unknown";
}

int cli_batch_warmup(pe_engine *e, const cli_batch *b)
{
    cli_batch w = *b;
    w.n = 1;
    w.max_tokens = 2;
    w.on_event = NULL;
    int rc = cli_batch_alloc(&w);
    if (rc == CLI_OK)
        rc = cli_batch_run(e, &w);
    cli_batch_free(&w);
    return rc;
}

int cli_batch_rerun(pe_engine *e, const cli_batch *like, int warmup, cli_batch *b)
{
    *b = (cli_batch){.n = like->n, .prompts = like->prompts, .lens = like->lens,
                     .max_tokens = like->max_tokens, .sampling = like->sampling,
                     .ignore_eos = like->ignore_eos};
    int rc = cli_batch_alloc(b);
    if (rc == CLI_OK && warmup) /* as the first run: pages and pools, untimed */
        rc = cli_batch_warmup(e, b);
    pe_engine_trace_clear(e); /* the trace holds the timed run only */
    if (rc == CLI_OK)
        rc = cli_batch_run(e, b);
    return rc;
}

int cli_batch_alloc(cli_batch *b)
{
    size_t n = (size_t)b->n, m = (size_t)(b->max_tokens > 0 ? b->max_tokens : 1);
    b->tokens = calloc(n, sizeof *b->tokens);
    b->events = calloc(n, sizeof *b->events);
    b->t_tok = calloc(n, sizeof *b->t_tok);
    b->ntok = calloc(n, sizeof *b->ntok);
    b->finish = calloc(n, sizeof *b->finish);
    b->status = calloc(n, sizeof *b->status);
    b->stopped = calloc(n, sizeof *b->stopped);
    int ok = b->tokens && b->events && b->t_tok && b->ntok && b->finish && b->status &&
             b->stopped;
    for (size_t i = 0; ok && i < n; i++) {
        b->tokens[i] = malloc(m * sizeof **b->tokens);
        b->t_tok[i] = malloc(m * sizeof **b->t_tok);
        b->events[i] = b->logprobs ? malloc(m * sizeof **b->events) : NULL;
        ok = b->tokens[i] && b->t_tok[i] && (!b->logprobs || b->events[i]);
    }
    if (!ok) {
        cli_batch_free(b);
        cli_errorf("out of memory for the results of %d sequence%s x %zu tokens; lower "
                   "--max-tokens%s", b->n, b->n == 1 ? "" : "s", m,
                   b->n > 1 ? " or the number of sequences (--batch)" : "");
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

void cli_batch_free(cli_batch *b)
{
    for (int i = 0; i < b->n; i++) {
        free(b->tokens ? b->tokens[i] : NULL);
        free(b->events ? b->events[i] : NULL);
        free(b->t_tok ? b->t_tok[i] : NULL);
    }
    free(b->tokens);
    free(b->events);
    free(b->t_tok);
    free(b->ntok);
    free(b->finish);
    free(b->status);
    free(b->stopped);
    b->tokens = NULL;
    b->events = NULL;
    b->t_tok = NULL;
    b->ntok = NULL;
    b->finish = NULL;
    b->status = NULL;
    b->stopped = NULL;
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
        p.min_tokens = b->min_tokens;
        p.sampling = b->sampling;
        p.sampling.seed = b->sampling.seed + (uint64_t)i;
        p.logprobs = b->logprobs;
        p.ignore_eos = b->ignore_eos;
        p.grammar = b->grammar;
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
        int final = ev.finish != PE_FINISH_NONE;
        if (b->stopped[i] && !final)
            continue; /* tokens made before the cancel took effect */
        if (!b->stopped[i] && ev.token >= 0 && b->ntok[i] < b->max_tokens) {
            b->t_tok[i][b->ntok[i]] = now;
            b->tokens[i][b->ntok[i]] = ev.token;
            if (b->events && b->events[i])
                b->events[i][b->ntok[i]] = ev;
            b->ntok[i]++;
        }
        if (!b->stopped[i] && b->on_event && b->on_event(b->ctx, i, &ev)) {
            b->stopped[i] = 1;
            if (!final)
                pe_seq_cancel(e, ev.seq); /* PE_OK also when it ended meanwhile */
        }
        if (final) {
            b->finish[i] = b->stopped[i] && ev.finish != PE_FINISH_ERROR ? PE_FINISH_STOP
                                                                          : ev.finish;
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

/* When the last sequence got its first token (t0 when none did). */
static double last_first_token(const cli_batch *b)
{
    double t = b->t0;
    for (int i = 0; i < b->n; i++)
        if (b->ntok[i] && b->t_tok[i][0] > t)
            t = b->t_tok[i][0];
    return t;
}

/* The decode rates (cli_rates), both over the decode phase: from last_first, when the
 * last sequence got its first token, to the batch's last token. Before last_first some
 * prompts were still being prefilled (a batch's prompts longer than one step, or sequences
 * queued behind others), and the tokens of that time came at prefill's pace: neither the
 * tokens before last_first nor the gaps that start before it are counted. */
static void decode_rates(const cli_batch *b, double last_first, cli_rates *out)
{
    double end = last_first, gaps = 0;
    long after = 0, ngaps = 0;
    for (int i = 0; i < b->n; i++) {
        const double *t = b->t_tok[i];
        for (int j = 1; j < b->ntok[i]; j++) {
            after += t[j] > last_first;
            if (t[j - 1] >= last_first) {
                gaps += t[j] - t[j - 1];
                ngaps++;
            }
        }
        if (b->ntok[i] && t[b->ntok[i] - 1] > end)
            end = t[b->ntok[i] - 1];
    }
    out->decode_ms = ngaps ? gaps / (double)ngaps : 0;
    double span = end - last_first;
    out->decode_tok_s = span > 0 ? (double)after / (span * 1e-3) : 0;
}

void cli_batch_rates(const cli_batch *b, cli_rates *out)
{
    memset(out, 0, sizeof *out);
    double ttft = 0;
    int started = 0;
    for (int i = 0; i < b->n; i++) {
        out->prompt_tokens += (long)b->lens[i];
        out->generated += b->ntok[i];
        if (b->ntok[i]) {
            ttft += b->t_tok[i][0] - b->t0;
            started++;
        }
    }
    if (!started)
        return;
    double last_first = last_first_token(b), end = b->t0;
    for (int i = 0; i < b->n; i++)
        if (b->ntok[i] && b->t_tok[i][b->ntok[i] - 1] > end)
            end = b->t_tok[i][b->ntok[i] - 1];
    out->wall_ms = end - b->t0;
    if (out->wall_ms > 0)
        out->tok_s = (double)out->generated / (out->wall_ms * 1e-3);
    out->ttft_ms = ttft / started;
    if (last_first > b->t0)
        out->prefill_tok_s = (double)out->prompt_tokens / ((last_first - b->t0) * 1e-3);
    decode_rates(b, last_first, out);
}

void cli_spec_counts(pe_engine *e, int print, cli_rates *out)
{
    pe_engine_info info;
    if (pe_engine_info_get(e, &info) != PE_OK)
        return;
    out->spec_drafted = info.spec_drafted_tokens;
    out->spec_accepted = info.spec_accepted_tokens;
    if (print && out->spec_drafted > 0)
        fprintf(stderr, "pengine: speculative decoding: %ld of %ld drafts accepted (%.0f%%)\n",
                out->spec_accepted, out->spec_drafted,
                100.0 * (double)out->spec_accepted / (double)out->spec_drafted);
}
