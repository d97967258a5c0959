/* llm_compare.c: the decoder demo on a grid against one device, as the seeds' tables: the
 * same batch on one device of the same backend (all the cores a host device gets alone),
 * run right after the grid's, then side by side: time to first token, decode latency and
 * throughput, the greedy tokens, weight and KV bytes per worker, and what the grid sends per
 * token. */
#include <stdlib.h>
#include <string.h>

#include "llm_compare.h"

/* The same batch as the grid's (prompts, lengths, tokens, sampling), results of its own. */
static int run_one_device(const cli_options *o, const cli_batch *grid, cli_batch *b,
                          pe_engine_info *info)
{
    cli_options one = *o;
    one.ndevices = 1;
    one.dp = one.pp = one.tp = 1;
    one.nsplit = 0; /* --split is the grid's */
    pe_engine *e = NULL;
    memset(b, 0, sizeof *b);
    int rc = cli_llm_open(&one, &e);
    if (rc == CLI_OK)
        rc = cli_batch_rerun(e, grid, o->warmup > 0, b);
    if (rc == CLI_OK)
        pe_engine_info_get(e, info);
    pe_engine_destroy(e);
    return rc;
}

static size_t most(const size_t *v, int n)
{
    size_t m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The most bytes a worker sends per generated token, over the stages: under TP its
 * all-reduces of the hidden width in fp32 (2 a block of its stage, and the vocab-parallel
 * embedding's on the first stage) and, on the last stage, the head's gather of each rank's
 * best (token, logit) for greedy rows; under PP the residual stream to the next stage. */
static double bytes_per_token(const pe_engine_info *info, const pe_model_info *m,
                              pe_tp_embedding embedding)
{
    const double row = (double)m->hidden * sizeof(float);
    double most_bytes = 0;
    for (int p = 0; p < info->pp; p++) {
        int blocks = info->stage_first_layer[p + 1] - info->stage_first_layer[p];
        double bytes = 0;
        if (info->tp > 1) {
            bytes += 2.0 * blocks * row;
            if (p == 0 && embedding == PE_TP_EMBED_VOCAB)
                bytes += row;
            if (p == info->pp - 1)
                bytes += 2.0 * sizeof(float);
        }
        if (p < info->pp - 1)
            bytes += row;
        most_bytes = bytes > most_bytes ? bytes : most_bytes;
    }
    return most_bytes;
}

int cli_llm_compare(cli_report *r, const cli_options *o, const pe_engine_info *info,
                    const pe_model_info *m, const cli_batch *grid, const cli_rates *grid_rates)
{
    cli_batch one;
    pe_engine_info one_info;
    memset(&one_info, 0, sizeof one_info);
    int rc = run_one_device(o, grid, &one, &one_info);
    if (rc != CLI_OK) {
        cli_batch_free(&one);
        return rc;
    }
    cli_rates one_rates;
    cli_batch_rates(&one, &one_rates);
    report_line(r, "%s", "");
    report_push(r, "one_device", "against one device (the same batch, right after)");
    static const char *const keys[] = {"one_device", "grid"};
    char grid_title[64];
    snprintf(grid_title, sizeof grid_title, "dp=%d x pp=%d x tp=%d", info->dp, info->pp,
             info->tp);
    const char *const titles[] = {"one device", grid_title};
    report_table(r, 2, keys, titles);
    double ttft[] = {one_rates.ttft_ms, grid_rates->ttft_ms};
    double lat[] = {one_rates.decode_ms, grid_rates->decode_ms};
    double tput[] = {one_rates.decode_tok_s, grid_rates->decode_tok_s};
    double wmib[] = {most(one_info.weight_bytes, 1) / 1048576.0,
                     most(info->weight_bytes, info->world) / 1048576.0};
    double kvmib[] = {most(one_info.kv_bytes, 1) / 1048576.0,
                      most(info->kv_bytes, info->world) / 1048576.0};
    double sent[] = {0, bytes_per_token(info, m, o->tp_embedding)};
    report_row(r, "ttft_ms", "time to first token (ms)", ttft, 3, NULL);
    report_row(r, "decode_ms_per_token", "decode (ms/token, one step)", lat, 3, NULL);
    report_row(r, "decode_tok_s", "decode (tok/s, all sequences)", tput, 1, NULL);
    report_row(r, "weight_mib_per_worker", "weights per worker (MiB)", wmib, 2, NULL);
    report_row(r, "kv_mib_per_worker", "KV pool per worker (MiB)", kvmib, 2, NULL);
    report_row(r, "bytes_sent_per_token", "sent per token per worker (bytes)", sent, 0, NULL);
    report_table_end(r);
    report_num(r, "latency_speedup", "decode latency, one device / grid", lat[0] / lat[1], 2,
               "x");
    report_num(r, "throughput_speedup", "decode throughput, grid / one device",
               tput[1] / tput[0], 2, "x");
    if (info->tp > 1)
        report_str(r, "collectives", "collectives per step",
                   o->tp_embedding == PE_TP_EMBED_VOCAB
                       ? "2 all-reduces a block (attention out, MLP down), 1 at the "
                         "vocab-parallel embedding, 1 all-gather at the head"
                       : "2 all-reduces a block (attention out, MLP down), 1 all-gather at "
                         "the head (the embedding replicated)");
    if (info->pp > 1)
        report_str(r, "pipeline", "pipeline",
                   "a step in flight per stage, each on its own group of sequences");
    int same = 0;
    for (int i = 0; i < grid->n; i++)
        same += grid->ntok[i] == one.ntok[i] &&
                !memcmp(grid->tokens[i], one.tokens[i], (size_t)one.ntok[i] * sizeof(int32_t));
    char buf[64];
    snprintf(buf, sizeof buf, "%d of %d sequences", same, grid->n);
    report_str(r, NULL, "greedy tokens identical", buf);
    report_int(r, "greedy_sequences_identical", NULL, same, NULL);
    report_pop(r);
    cli_batch_free(&one);
    return CLI_OK;
}
