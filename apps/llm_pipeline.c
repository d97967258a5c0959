/* llm_pipeline.c: the decoder demo on a pipeline (pp > 1), naive against in flight. Naive:
 * one step at a time, each passing the stages one after the other while the others wait.
 * In flight (the grid's own run): a step per stage, each on its own group of the sequences,
 * so that every stage has work. Side by side: time to first token, decode latency and
 * throughput, and the bubble (the idle fraction of the stages' time in the decode phase,
 * measured from the trace; llm_trace.h), with the theory beside it. */
#include "llm_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llm_trace.h"

/* The theory for g groups in flight on p equal stages, overheads left out: each stage busy
 * min(g, p) / p of the time. */
static double bubble_theory(int pp, int groups)
{
    int busy = groups < pp ? groups : pp;
    return (double)(pp - busy) / (double)pp;
}

/* The grid's batch with one step in flight (decode_groups 1): its rates and bubble. */
static int run_naive(const cli_options *o, const pe_engine_info *info, const cli_batch *grid,
                     size_t trace_events, cli_batch *b, cli_pipe_run *out)
{
    pe_engine *e = NULL;
    memset(b, 0, sizeof *b);
    int rc = cli_llm_open_with(o, 1, trace_events, &e);
    if (rc == CLI_OK)
        rc = cli_batch_rerun(e, grid, o->warmup > 0, b);
    if (rc == CLI_OK) {
        out->batch = b;
        cli_batch_rates(b, &out->rates);
        if (cli_llm_decode_bubble(e, info->world, trace_events, &out->bubble))
            out->bubble = NAN;
    }
    pe_engine_destroy(e);
    return rc;
}

static int same_tokens(const cli_batch *a, const cli_batch *b)
{
    int same = 0;
    for (int i = 0; i < a->n; i++)
        same += a->ntok[i] == b->ntok[i] &&
                !memcmp(a->tokens[i], b->tokens[i], (size_t)a->ntok[i] * sizeof(int32_t));
    return same;
}

static void report_runs(cli_report *r, const pe_engine_info *info, const cli_pipe_run *naive,
                        const cli_pipe_run *grid)
{
    static const char *const keys[] = {"naive", "in_flight"};
    static const char *const titles[] = {"naive", "in flight"};
    report_table(r, 2, keys, titles);
    double groups[] = {1, info->pp};
    double ttft[] = {naive->rates.ttft_ms, grid->rates.ttft_ms};
    double lat[] = {naive->rates.decode_ms, grid->rates.decode_ms};
    double tput[] = {naive->rates.decode_tok_s, grid->rates.decode_tok_s};
    double bubble[] = {naive->bubble, grid->bubble};
    double theory[] = {bubble_theory(info->pp, 1), bubble_theory(info->pp, info->pp)};
    report_row(r, "groups", "steps in flight", groups, 0, NULL);
    report_row(r, "ttft_ms", "time to first token (ms)", ttft, 3, NULL);
    report_row(r, "decode_ms_per_token", "decode (ms/token, one step)", lat, 3, NULL);
    report_row(r, "decode_tok_s", "decode (tok/s, all sequences)", tput, 1, NULL);
    report_row(r, "bubble_measured", "bubble in decode, measured", bubble, 3, NULL);
    report_row(r, "bubble_theory", "bubble, theory (p-g)/p", theory, 3, NULL);
    report_table_end(r);
}

int cli_llm_pipeline(cli_report *r, const cli_options *o, const pe_engine_info *info,
                     const cli_pipe_run *grid, size_t trace_events)
{
    cli_batch b;
    cli_pipe_run naive = {.bubble = NAN};
    int rc = run_naive(o, info, grid->batch, trace_events, &b, &naive);
    if (rc != CLI_OK) {
        cli_batch_free(&b);
        return rc;
    }
    report_line(r, "%s", "");
    report_push(r, "pipeline", "pipeline: naive against in-flight decode (the same batch)");
    report_runs(r, info, &naive, grid);
    report_num(r, "throughput_speedup", "decode throughput, in flight / naive",
               grid->rates.decode_tok_s / naive.rates.decode_tok_s, 2, "x");
    if (isnan(naive.bubble) || isnan(grid->bubble))
        report_str(r, "bubble_note", "bubble", "not measured where blank: no decode step, "
                   "or the trace ran out of room (lower --max-tokens or --batch)");
    char buf[64];
    snprintf(buf, sizeof buf, "%d of %d sequences", same_tokens(grid->batch, &b), b.n);
    report_str(r, NULL, "greedy tokens identical", buf);
    report_int(r, "greedy_sequences_identical", NULL, same_tokens(grid->batch, &b), NULL);
    report_pop(r);
    cli_batch_free(&b);
    return CLI_OK;
}
