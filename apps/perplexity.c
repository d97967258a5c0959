/* perplexity.c: "pengine perplexity": a text's perplexity under the model, as Hugging Face's
 * "perplexity of fixed-length models" computes it (llama.cpp's llama-perplexity is the same
 * idea): the text's tokens (with the tokenizer's BOS) in windows of --context tokens that
 * start --stride apart, each window scoring only the tokens no earlier window scored, with
 * the tokens before them in the window as their context. Each window is one
 * pe_score_logprobs call: the log-probabilities come back from the device, not the logits.
 * --parallel threads score windows at once (the engine batches them into its steps and
 * spreads them over its replicas); each window's sum is kept apart and the sums are added in
 * window order, so the figure does not depend on the threads.
 *
 * perplexity = exp(-(sum of the scored tokens' log-probabilities) / scored tokens)
 */
#include "perplexity.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "generate.h"
#include "llm_run.h"

typedef struct ppl_opts {
    cli_options dev;        /* --model and the device flags */
    const char *text;       /* --text TEXT */
    const char *file;       /* --file FILE */
    const char *tokenizer;  /* --tokenizer FILE; NULL: the model directory's */
    long context, stride;   /* 0: the model's context, and half the window */
    long parallel;          /* windows scored at once */
    int json;
} ppl_opts;

static int apply_flag(void *ctx, const char *f, const char *v, char *msg, size_t len)
{
    ppl_opts *o = ctx;
    int bad = 0;
    if (!strcmp(f, "--model"))
        o->dev.model_path = v;
    else if (!strcmp(f, "--text"))
        o->text = v;
    else if (!strcmp(f, "--file"))
        o->file = v;
    else if (!strcmp(f, "--tokenizer"))
        o->tokenizer = v;
    else if (!strcmp(f, "--context"))
        bad = cli_parse_long(f, v, 2, 1L << 24, &o->context, msg, len);
    else if (!strcmp(f, "--stride"))
        bad = cli_parse_long(f, v, 1, 1L << 24, &o->stride, msg, len);
    else if (!strcmp(f, "--parallel"))
        bad = cli_parse_long(f, v, 1, 64, &o->parallel, msg, len);
    else
        bad = cli_apply_device_flag(&o->dev, f, v, msg, len) < 0;
    return bad ? CLI_USAGE : CLI_OK;
}

static int parse(int argc, char **argv, ppl_opts *o)
{
    static const char *const with_value[] = {
        "--model", "--text", "--file", "--tokenizer", "--context", "--stride", "--parallel",
        "--gpus",
        "--backend", "--dtype", "--threads", "--kv-tokens", "--dp", "--pp", "--tp"};
    const cli_switch switches[] = {{"--json", &o->json}};
    int rc = cli_parse_subcommand(argc, argv, "perplexity", with_value,
                                  sizeof with_value / sizeof with_value[0], switches,
                                  sizeof switches / sizeof switches[0], apply_flag, o);
    if (rc != CLI_OK)
        return rc;
    if (!o->dev.model_path)
        cli_error("perplexity needs --model DIR; give a decoder directory with a tokenizer");
    else if (!o->text == !o->file)
        cli_error("perplexity needs the text: give one of --text TEXT or --file FILE");
    else if (o->context && o->stride > o->context)
        cli_errorf("--stride %ld is more than --context %ld, so tokens between the windows "
                   "would never be scored; give at most --context", o->stride, o->context);
    else
        return CLI_OK;
    return CLI_USAGE;
}

/* The whole of path, NUL-terminated (*len bytes); NULL after saying why. */
static char *read_file(const char *path, size_t *len)
{
    char *buf = cli_read_file(path, len);
    if (!buf)
        cli_errorf("cannot read --file %s (%s); give a text file", path, strerror(errno));
    return buf;
}

/* What the windows gave. */
typedef struct ppl_sums {
    double nll;             /* minus the sum of the scored tokens' log-probabilities */
    long scored, windows;
} ppl_sums;

/* The windows of a text, as the scoring threads share them: window w holds tokens [w S,
 * min(w S + W, n)) and scores those of them past window w - 1's end, but never its first
 * (which has no context in it: with a stride of the whole window, each window's first token
 * goes unscored, as in Hugging Face's loop). */
typedef struct ppl_work {
    pe_engine *e;
    const int32_t *ids;
    size_t n, W, S, nwin;
    double *nll;            /* (nwin) each window's minus sum of log-probabilities */
    atomic_size_t next;     /* the next window to take */
    atomic_int failed;
    pthread_mutex_t mu;     /* msg */
    char msg[CLI_MSG_LEN];  /* the first failure */
} ppl_work;

static size_t window_end(const ppl_work *k, size_t w)
{
    return w * k->S + k->W < k->n ? w * k->S + k->W : k->n;
}

static void fail_work(ppl_work *k, int out_of_memory, size_t begin, size_t end)
{
    pthread_mutex_lock(&k->mu);
    if (!atomic_exchange(&k->failed, 1)) {
        if (out_of_memory)
            snprintf(k->msg, sizeof k->msg, "out of memory for a window of %zu tokens; give "
                     "a smaller --context or --parallel", k->W);
        else
            snprintf(k->msg, sizeof k->msg, "scoring tokens %zu to %zu failed: %s", begin, end,
                     pe_last_error());
    }
    pthread_mutex_unlock(&k->mu);
}

/* A scoring thread: windows until none is left or one failed. */
static void *score_windows(void *arg)
{
    ppl_work *k = arg;
    pe_logprobs *lp = malloc((k->W - 1) * sizeof *lp);
    if (!lp)
        fail_work(k, 1, 0, 0);
    for (size_t w; lp && !atomic_load(&k->failed) &&
                   (w = atomic_fetch_add(&k->next, 1)) < k->nwin;) {
        const size_t begin = w * k->S, end = window_end(k, w);
        const size_t from = w ? window_end(k, w - 1) : 1;
        const size_t first = from > begin ? from : begin + 1;
        if (pe_score_logprobs(k->e, k->ids + begin, end - begin, 0, lp) != PE_OK) {
            fail_work(k, 0, begin, end);
            break;
        }
        double nll = 0;
        for (size_t t = first; t < end; t++) /* lp[i] is token begin + i + 1's */
            nll -= lp[t - begin - 1].logprob;
        k->nll[w] = nll;
    }
    free(lp);
    return NULL;
}

/* Scores ids (n) in windows of W tokens S apart, threads of them at once, into *sum. */
static int score_text(pe_engine *e, const int32_t *ids, size_t n, size_t W, size_t S,
                      int threads, ppl_sums *sum)
{
    ppl_work k = {.e = e, .ids = ids, .n = n, .W = W, .S = S};
    k.nwin = 1 + (n > W ? (n - W + S - 1) / S : 0);
    k.nll = calloc(k.nwin, sizeof *k.nll);
    if (!k.nll) {
        cli_errorf("out of memory for %zu windows; give a larger --stride", k.nwin);
        return CLI_RUNTIME;
    }
    atomic_init(&k.next, 0);
    atomic_init(&k.failed, 0);
    pthread_mutex_init(&k.mu, NULL);
    pthread_t th[64];
    int started = 0;
    if (threads > (int)k.nwin)
        threads = (int)k.nwin;
    while (started < threads && pthread_create(&th[started], NULL, score_windows, &k) == 0)
        started++;
    if (started == 0)
        score_windows(&k); /* no thread could start: this one scores them all */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&k.mu);
    int rc = CLI_OK;
    if (atomic_load(&k.failed)) {
        cli_error(k.msg);
        rc = CLI_RUNTIME;
    }
    sum->scored = 0;
    for (size_t w = 0; rc == CLI_OK && w < k.nwin; w++) { /* in window order */
        const size_t from = w ? window_end(&k, w - 1) : 1, begin = w * S;
        sum->nll += k.nll[w];
        sum->scored += (long)(window_end(&k, w) - (from > begin ? from : begin + 1));
    }
    sum->windows = (long)k.nwin;
    free(k.nll);
    return rc;
}

static void report(const ppl_opts *o, size_t n, size_t W, size_t S, const ppl_sums *sum,
                   double seconds)
{
    const double mean = sum->nll / (double)sum->scored, ppl = exp(mean);
    const double tok_s = seconds > 0 ? (double)sum->scored / seconds : 0;
    if (!o->json) {
        printf("perplexity %.4f over %ld tokens (mean negative log-likelihood %.6f nats); "
               "%zu tokens in %ld windows of up to %zu, %zu apart, %ld at once; %.1f "
               "tokens/s\n", ppl, sum->scored, mean, n, sum->windows, W, S, o->parallel,
               tok_s);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "perplexity", ppl);
    cJSON_AddNumberToObject(j, "nll", mean);
    cJSON_AddNumberToObject(j, "scored_tokens", (double)sum->scored);
    cJSON_AddNumberToObject(j, "tokens", (double)n);
    cJSON_AddNumberToObject(j, "windows", (double)sum->windows);
    cJSON_AddNumberToObject(j, "context", (double)W);
    cJSON_AddNumberToObject(j, "stride", (double)S);
    cJSON_AddNumberToObject(j, "parallel", (double)o->parallel);
    cJSON_AddNumberToObject(j, "tok_s", tok_s);
    char *text = cJSON_Print(j);
    if (text)
        puts(text);
    free(text);
    cJSON_Delete(j);
}

/* The text's ids (with BOS) on e's model, checked against its vocabulary and the window. */
static int text_ids(const ppl_opts *o, pe_engine *e, int32_t **ids, size_t *n)
{
    size_t len = o->text ? strlen(o->text) : 0;
    char *owned = o->file ? read_file(o->file, &len) : NULL;
    if (o->file && !owned)
        return CLI_USAGE;
    pe_tokenizer *tk = NULL;
    int rc = gen_load_tokenizer(o->tokenizer, o->dev.model_path, NULL, &tk);
    pe_model_info m;
    pe_engine_model_info(e, &m);
    if (rc == CLI_OK)
        rc = gen_check_vocab(&m, tk);
    if (rc == CLI_OK && pe_tokenizer_encode(tk, owned ? owned : o->text, len, 1, ids, n)) {
        cli_errorf("cannot encode the text: %s", pe_last_error());
        rc = CLI_RUNTIME;
    }
    if (rc == CLI_OK && *n < 2) {
        cli_errorf("the text is %zu token%s, and a perplexity needs a token after another; "
                   "give more text", *n, *n == 1 ? "" : "s");
        free(*ids);
        *ids = NULL;
        rc = CLI_USAGE;
    }
    pe_tokenizer_free(tk);
    free(owned);
    return rc;
}

int cli_perplexity(int argc, char **argv)
{
    ppl_opts o;
    memset(&o, 0, sizeof o);
    cli_default_options(&o.dev);
    o.parallel = 4;
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    char msg[CLI_MSG_LEN];
    if (cli_decoder_grid(&o.dev, msg, sizeof msg)) {
        cli_error(msg);
        return CLI_USAGE;
    }
    pe_engine *e = NULL;
    if ((rc = cli_llm_open(&o.dev, &e)) != CLI_OK)
        return rc;
    pe_model_info m;
    pe_engine_model_info(e, &m);
    const size_t W = (size_t)(o.context ? o.context : m.context);
    const size_t S = (size_t)(o.stride ? o.stride : (long)(W / 2 ? W / 2 : 1));
    int32_t *ids = NULL;
    size_t n = 0;
    if (W > (size_t)m.context) {
        cli_errorf("--context %zu is more than the model's %d positions; give at most %d", W,
                   m.context, m.context);
        rc = CLI_USAGE;
    } else if (S > W) {
        cli_errorf("the stride %zu is more than the window of %zu tokens (the model's "
                   "context); give --stride at most %zu", S, W, W);
        rc = CLI_USAGE;
    } else {
        rc = text_ids(&o, e, &ids, &n);
    }
    ppl_sums sum = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rc == CLI_OK)
        rc = score_text(e, ids, n, W, S, (int)o.parallel, &sum);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == CLI_OK)
        report(&o, n, W, S, &sum,
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    free(ids);
    pe_engine_destroy(e);
    return rc;
}
