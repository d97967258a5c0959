/* demo_llm.c: the decoder demo (pengine --model DIR --gpus 0): a batch of random prompts,
 * prefill, then decode; the rates and the memory of each worker; on a grid, the same batch
 * on one device beside it (llm_compare.c); and a verification of the logits and the greedy
 * tokens against the naive double-precision reference (pengine_tools.h), an independent
 * computation on the same weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "llm_compare.h"
#include "llm_pipeline.h"
#include "llm_run.h"
#include "llm_trace.h"
#include "verify.h"
#include "pengine/pengine_tools.h"

/* The reference is plain double loops: verify only where it takes seconds, not hours. */
#define LLM_VERIFY_MAX_MACS 3e10
#define LLM_VERIFY_GENERATED 8 /* generated tokens checked after the prompt */

static void header(cli_report *r, const cli_options *o, const pe_engine_info *info,
                   const pe_model_info *m, int batch, int prompt, int gen)
{
    char buf[512];
    report_line(r, "pengine %s: decoder demo, %d replica%s", pe_version(), info->dp,
                info->dp == 1 ? "" : "s");
    report_str(r, "pengine", NULL, pe_version());
    report_str(r, "backend", "backend", cli_backend_name(info->backend));
    report_str(r, "dtype", "dtype", cli_dtype_name(info->dtype));
    if (info->notice[0])
        report_str(r, "notice", "notice",
                   strncmp(info->notice, "notice: ", 8) ? info->notice : info->notice + 8);
    report_int_array(r, "devices", o->devices, o->ndevices);
    snprintf(buf, sizeof buf, "dp=%d x pp=%d x tp=%d (%d worker%s)", info->dp, info->pp,
             info->tp, info->world, info->world == 1 ? "" : "s");
    report_str(r, "grid", "grid", buf);
    if (info->kernels[0]) /* host: the vector loops, and AMX where bf16 runs on its tiles */
        report_str(r, "kernels", "kernels", info->kernels);
    if (info->pp > 1) { /* "blocks 0-2 | 3-3 (+ head)" */
        size_t used = (size_t)snprintf(buf, sizeof buf, "blocks");
        for (int p = 0; p < info->pp && used < sizeof buf; p++)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s %d-%d", p ? " |" : "",
                                     info->stage_first_layer[p],
                                     info->stage_first_layer[p + 1] - 1);
        if (used < sizeof buf)
            snprintf(buf + used, sizeof buf - used, " (+ head)");
        report_str(r, NULL, "stages", buf);
        report_int_array(r, "stage_first_block", info->stage_first_layer, info->pp + 1);
    }
    snprintf(buf, sizeof buf, "%s: %d layers, hidden %d, %d heads (%d KV, dim %d), vocab %d, "
             "context %d", m->architecture, m->nlayers, m->hidden, m->heads, m->kv_heads,
             m->head_dim, m->vocab, m->context);
    report_str(r, NULL, "model", buf);
    if (o->model_generated) { /* no --model: written for this run, removed after it */
        snprintf(buf, sizeof buf, "a seeded random Llama (seed %llu) in %s, removed at the end",
                 (unsigned long long)o->seed, o->model_path);
        report_str(r, NULL, "generated model", buf);
    }
    report_push(r, "model", NULL);
    report_str(r, "path", NULL, o->model_path);
    report_bool(r, "generated", NULL, o->model_generated, "yes", "no");
    report_str(r, "architecture", NULL, m->architecture);
    report_int(r, "layers", NULL, m->nlayers, NULL);
    report_int(r, "hidden", NULL, m->hidden, NULL);
    report_int(r, "heads", NULL, m->heads, NULL);
    report_int(r, "kv_heads", NULL, m->kv_heads, NULL);
    report_int(r, "vocab", NULL, m->vocab, NULL);
    report_int(r, "context", NULL, m->context, NULL);
    report_pop(r);
    report_int(r, "parameters", "parameters", (long long)m->nparams, NULL);
    snprintf(buf, sizeof buf, "%d sequences x %d prompt tokens, then %d generated (greedy)",
             batch, prompt, gen);
    report_str(r, NULL, "workload", buf);
    report_push(r, "workload", NULL);
    report_int(r, "sequences", NULL, batch, NULL);
    report_int(r, "prompt_tokens", NULL, prompt, NULL);
    report_int(r, "generated_tokens", NULL, gen, NULL);
    report_int(r, "seed", NULL, (long long)o->seed, NULL);
    report_pop(r);
    for (int w = 0; w < info->world && w < 64; w++) {
        char key[32], label[64];
        snprintf(key, sizeof key, "worker%d", w);
        snprintf(label, sizeof label, "worker %d memory", w);
        snprintf(buf, sizeof buf, "weights %.1f MiB, KV %.1f MiB (%zu blocks of %d positions)",
                 (double)info->weight_bytes[w] / 1048576.0, (double)info->kv_bytes[w] / 1048576.0,
                 info->kv_blocks, info->kv_block_tokens);
        report_str(r, NULL, label, buf);
        report_push(r, key, NULL);
        report_int(r, "weight_bytes", NULL, (long long)info->weight_bytes[w], NULL);
        report_int(r, "kv_bytes", NULL, (long long)info->kv_bytes[w], NULL);
        report_int(r, "threads", NULL, info->threads[w], NULL);
        report_pop(r);
    }
}

/* Random prompts of n tokens, seeded. */
static int32_t **make_prompts(int batch, int n, int vocab, uint64_t seed)
{
    int32_t **p = calloc((size_t)batch, sizeof *p);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (int i = 0; p && i < batch; i++) {
        p[i] = malloc((size_t)n * sizeof **p);
        for (int k = 0; p[i] && k < n; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            p[i][k] = (int32_t)(s % (uint64_t)vocab);
        }
    }
    return p;
}

static void free_prompts(int32_t **p, int batch)
{
    for (int i = 0; p && i < batch; i++)
        free(p[i]);
    free(p);
}

/* On CUDA: the same positions scored by a host engine; fp32 within 1e-4 of max |logit|
 * (cuBLAS and OpenBLAS sum in other orders), bf16 within 2e-2 (an order change flips a bf16
 * rounding by 2^-8). Returns 1 when they agree. */
static int against_host(cli_report *r, const cli_options *o, const pe_engine_info *info,
                        const int32_t *tok, int n, const float *got, size_t V)
{
    static const int host0 = 0;
    cli_options ho = *o;
    ho.backend = PE_BACKEND_HOST;
    ho.ndevices = 1;
    ho.devices[0] = host0;
    ho.dp = ho.pp = ho.tp = 1;
    ho.kv_tokens = (size_t)n + 16;
    pe_engine *h = NULL;
    float *ref = malloc((size_t)n * V * sizeof *ref);
    int ok = ref && cli_llm_open(&ho, &h) == CLI_OK && pe_score(h, tok, (size_t)n, 1, ref) == PE_OK;
    if (!ok) {
        cli_errorf("the host backend's check could not run: %s", pe_last_error());
    } else {
        cli_rule rule = {info->dtype == PE_DTYPE_BF16 ? 2e-2 : 1e-4,
                         info->dtype == PE_DTYPE_BF16 ? "within 2e-2 of max |ref| (bf16)"
                                                      : "within 1e-4 of max |ref|",
                         "the host backend (one device)"};
        cli_check c;
        cli_compare(got, ref, (size_t)n * V, &rule, &c);
        cli_report_check(r, "host_backend", "the same logits on the host backend", &c);
        ok = c.match;
        if (!ok)
            cli_errorf("verification failed: the GPU's logits differ from the host backend's by "
                       "%.3g of their scale", c.max_rel);
    }
    pe_engine_destroy(h);
    free(ref);
    return ok;
}

/* Sequence 0 (its prompt and its first LLM_VERIFY_GENERATED tokens) scored by the engine and
 * by the reference; the greedy tokens must be the reference's argmax (or tie with it within
 * the tolerance). */
static int verify(cli_report *r, const cli_options *o, pe_engine *e, const pe_model_info *m,
                  const pe_engine_info *info, const int32_t *prompt, int plen,
                  const int32_t *gen, int ngen)
{
    int n = plen + (ngen < LLM_VERIFY_GENERATED ? ngen : LLM_VERIFY_GENERATED);
    report_push(r, "verify", "verification against the naive double-precision reference");
    if (!o->verify || (double)m->nparams * n > LLM_VERIFY_MAX_MACS) {
        report_str(r, "skipped", "skipped", !o->verify ? "--no-verify"
                   : "the model is too large for the naive reference (plain double loops)");
        report_pop(r);
        return CLI_OK;
    }
    const size_t V = (size_t)m->vocab;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    float *got = malloc((size_t)n * V * sizeof *got);
    double *ref = malloc((size_t)n * V * sizeof *ref);
    float *reff = malloc((size_t)n * V * sizeof *reff);
    if (!tok || !got || !ref || !reff) {
        free(tok), free(got), free(ref), free(reff);
        cli_error("out of memory for the verification");
        return CLI_RUNTIME;
    }
    memcpy(tok, prompt, (size_t)plen * sizeof *tok);
    for (int k = plen; k < n; k++)
        tok[k] = gen[k - plen];
    pe_ref_model *rm = NULL;
    int rc = CLI_OK;
    if (pe_score(e, tok, (size_t)n, 1, got) != PE_OK ||
        pe_ref_open(o->model_path, info->dtype, &rm) != PE_OK ||
        pe_ref_forward(rm, tok, (size_t)n, ref) != PE_OK) {
        cli_error(pe_last_error());
        rc = CLI_RUNTIME;
    }
    pe_ref_close(rm);
    if (rc == CLI_OK) {
        for (size_t i = 0; i < (size_t)n * V; i++)
            reff[i] = (float)ref[i];
        /* fp32: the engine's float sums against double; bf16: against the reference's
         * emulation of the same roundings, where one rounding flip moves a value 2^-8 */
        cli_rule rule = {info->dtype == PE_DTYPE_BF16 ? 2e-2 : 1e-4,
                         info->dtype == PE_DTYPE_BF16 ? "within 2e-2 of max |ref| (bf16)"
                                                      : "within 1e-4 of max |ref|",
                         "the naive reference (double precision, plain loops)"};
        cli_check c;
        cli_compare(got, reff, (size_t)n * V, &rule, &c);
        int agree = 0, checked = 0;
        double scale = 0;
        for (size_t i = 0; i < (size_t)n * V; i++)
            scale = fmax(scale, fabs(ref[i]));
        for (int k = plen; k < n; k++, checked++) { /* token k came from the logits at k - 1 */
            const double *row = ref + (size_t)(k - 1) * V;
            double best = row[0];
            for (size_t v = 1; v < V; v++)
                best = fmax(best, row[v]);
            agree += row[tok[k]] >= best - rule.tol * scale;
        }
        char buf[64];
        snprintf(buf, sizeof buf, "%d of sequence 0", n);
        report_str(r, NULL, "positions", buf);
        report_int(r, "positions", NULL, n, NULL);
        report_str(r, "reference", "reference", rule.reference);
        report_num(r, "max_abs_error", "max |logit - ref|", c.max_abs, -3, NULL);
        report_num(r, "max_rel_error", "max rel error (to max |ref|)", c.max_rel, -3, NULL);
        snprintf(buf, sizeof buf, "%d of %d", agree, checked);
        report_str(r, NULL, "greedy tokens = reference argmax", buf);
        report_int(r, "greedy_agree", NULL, agree, NULL);
        report_int(r, "greedy_checked", NULL, checked, NULL);
        report_str(r, "rule", "rule", rule.text);
        int ok = c.match && agree == checked;
        if (info->backend == PE_BACKEND_CUDA) /* and the GPU's logits against the host's */
            ok &= against_host(r, o, info, tok, n, got, V);
        report_bool(r, "match", "match", ok, "YES", "NO");
        if (!ok) {
            cli_errorf("verification failed: the decoder's logits differ from the naive "
                       "reference by %.3g of their scale (%d of %d greedy tokens agree); this "
                       "is a bug in pengine, please report it with this command line",
                       c.max_rel, agree, checked);
            rc = CLI_RUNTIME;
        }
    }
    report_pop(r);
    free(tok), free(got), free(ref), free(reff);
    return rc;
}

/* The prompts, the lengths and the batch of the demo's run (batch sequences of plen random
 * tokens, gen generated each, greedy). Returns the exit code. */
static int make_batch(const cli_options *o, const pe_model_info *m, int batch, int plen,
                      int gen, cli_batch *b)
{
    int32_t **prompts = make_prompts(batch, plen, m->vocab, o->seed);
    size_t *lens = malloc((size_t)batch * sizeof *lens);
    for (int i = 0; lens && i < batch; i++)
        lens[i] = (size_t)plen;
    *b = (cli_batch){.n = batch, .prompts = (const int32_t *const *)prompts, .lens = lens,
                     .max_tokens = gen, .sampling = {.top_p = 1.0f}, .ignore_eos = 1};
    if (prompts && lens)
        return cli_batch_alloc(b);
    cli_error("out of memory for the prompts");
    return CLI_RUNTIME;
}

static void free_batch(cli_batch *b)
{
    free_prompts((int32_t **)b->prompts, b->n);
    free((size_t *)b->lens);
    cli_batch_free(b);
}

/* The timed run: after an untimed warm-up, with the trace holding the timed run only; then
 * the decode bubble (pp > 1) and the --trace file. */
static int run_timed(const cli_options *o, pe_engine *e, const pe_engine_info *info,
                     size_t trace_events, cli_batch *b, double *bubble)
{
    int rc = o->warmup > 0 ? cli_batch_warmup(e, b) : CLI_OK; /* pages, caches, pools */
    pe_engine_trace_clear(e);
    if (rc == CLI_OK)
        rc = cli_batch_run(e, b);
    *bubble = NAN;
    if (rc == CLI_OK && info->pp > 1)
        cli_llm_decode_bubble(e, info->world, trace_events, bubble);
    if (rc == CLI_OK && o->trace_path)
        rc = cli_llm_trace_write(e, o->trace_path);
    return rc;
}

static void report_rates(cli_report *r, const cli_rates *rt)
{
    report_line(r, "%s", "");
    report_push(r, "rates", NULL);
    report_num(r, "ttft_ms", "time to first token (ms)", rt->ttft_ms, 3, NULL);
    report_num(r, "prefill_tok_s", "prefill (tok/s)", rt->prefill_tok_s, 1, NULL);
    report_num(r, "decode_ms_per_token", "decode (ms/token, one step)", rt->decode_ms, 3, NULL);
    report_num(r, "decode_tok_s", "decode (tok/s, all sequences)", rt->decode_tok_s, 1, NULL);
    report_int(r, "generated", "tokens generated", rt->generated, NULL);
    report_pop(r);
}

int cli_demo_llm(const cli_options *o, cli_report *r)
{
    const int batch = o->batch ? (int)o->batch : 4;
    const int plen = o->prompt_len ? o->prompt_len : 32, gen = o->max_tokens ? o->max_tokens : 32;
    /* traced: for --trace, and for the decode bubble of a pipeline */
    const int traced = o->trace_path || o->pp > 1;
    const size_t trace_events = traced ? cli_llm_trace_events(o->model_path, batch, plen, gen)
                                       : 0;
    pe_engine *e = NULL;
    int rc = cli_llm_open_with(o, 0, trace_events, &e);
    if (rc != CLI_OK)
        return rc;
    pe_engine_info info;
    pe_model_info m;
    pe_engine_info_get(e, &info);
    pe_engine_model_info(e, &m);
    if (plen + gen > m.context) {
        cli_errorf("--prompt-len %d + --max-tokens %d exceed the model's context of %d "
                   "positions; ask for fewer", plen, gen, m.context);
        pe_engine_destroy(e);
        return CLI_USAGE;
    }
    cli_batch b;
    cli_pipe_run grid = {.batch = &b};
    rc = make_batch(o, &m, batch, plen, gen, &b);
    if (rc == CLI_OK)
        rc = run_timed(o, e, &info, trace_events, &b, &grid.bubble);
    if (rc == CLI_OK) {
        cli_batch_rates(&b, &grid.rates);
        header(r, o, &info, &m, batch, plen, gen);
        report_rates(r, &grid.rates);
        if (info.world > 1) /* a grid: the same batch on one device, side by side */
            rc = cli_llm_compare(r, o, &info, &m, &b, &grid.rates);
        if (rc == CLI_OK && info.pp > 1) /* and with one step in flight at a time */
            rc = cli_llm_pipeline(r, o, &info, &grid, trace_events);
        report_line(r, "%s", "");
        if (rc == CLI_OK)
            rc = verify(r, o, e, &m, &info, b.prompts[0], plen, b.tokens[0], b.ntok[0]);
    }
    free_batch(&b);
    pe_engine_destroy(e);
    return rc;
}
