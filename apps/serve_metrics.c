/* serve_metrics.c: the counters of pengine serve and GET /metrics in Prometheus' text
 * exposition format (version 0.0.4), with the KV pool's size and the blocks in use
 * (pe_engine_info, read at the scrape). */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The statuses counted, in the order of serve_metrics.by_status; the last counts the rest. */
static const unsigned statuses[8] = {200, 400, 401, 404, 405, 413, 503, 500};

/* Bucket upper bounds in seconds: from a fast decode step to a long queue. */
static const double bounds[SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,   0.25,   0.5,   1,    2.5,   5,
                                                  10,    30};

void serve_metrics_init(serve_metrics *m, size_t kv_blocks)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->c.kv_blocks = kv_blocks;
}

void serve_metrics_free(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_status(serve_metrics *m, unsigned status)
{
    int k = 7;
    for (int i = 0; i < 7; i++)
        if (statuses[i] == status)
            k = i;
    pthread_mutex_lock(&m->mu);
    m->c.by_status[k]++;
    pthread_mutex_unlock(&m->mu);
}

void serve_hist_add(serve_hist *h, double x)
{
    int k = 0;
    while (k < SERVE_HIST_BUCKETS && x > bounds[k])
        k++;
    h->counts[k]++;
    h->sum += x;
    h->n++;
}

/* A growing text. */
typedef struct text_buf {
    char *p;
    size_t len, cap;
    int failed;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = 2 * b->cap + (size_t)n;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void put_metric(text_buf *b, const char *name, const char *type, const char *help,
                       double value)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, value);
}

static void put_hist(text_buf *b, const char *name, const char *help, const serve_hist *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cum = 0;
    for (int k = 0; k < SERVE_HIST_BUCKETS; k++) {
        cum += h->counts[k];
        put(b, "%s_bucket{le=\"%g\"} %ld\n", name, bounds[k], cum);
    }
    cum += h->counts[SERVE_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %ld\n%s_sum %.17g\n%s_count %ld\n", name, cum, name, h->sum,
        name, h->n);
}

char *serve_metrics_text(serve_metrics *m, const pe_engine_info *info)
{
    text_buf b = {malloc(4096), 0, 4096, 0};
    if (!b.p)
        return NULL;
    pthread_mutex_lock(&m->mu);
    serve_counts c = m->c; /* a consistent copy, written out of the lock */
    pthread_mutex_unlock(&m->mu);
    put(&b, "# HELP pengine_requests_total HTTP requests answered, by status.\n"
            "# TYPE pengine_requests_total counter\n");
    for (int i = 0; i < 8; i++)
        if (i < 7)
            put(&b, "pengine_requests_total{status=\"%u\"} %ld\n", statuses[i], c.by_status[i]);
        else
            put(&b, "pengine_requests_total{status=\"other\"} %ld\n", c.by_status[i]);
    put_metric(&b, "pengine_prompt_tokens_total", "counter",
               "Prompt tokens of the sequences submitted.", (double)c.prompt_tokens);
    put_metric(&b, "pengine_generation_tokens_total", "counter",
               "Tokens generated.", (double)c.generated_tokens);
    put_metric(&b, "pengine_requests_running", "gauge",
               "Sequences in the engine (submitted, final event not yet taken).",
               (double)c.running);
    put_metric(&b, "pengine_requests_waiting", "gauge",
               "Sequences in the engine without their first token yet (queued or in "
               "prefill): the queue depth.", (double)c.waiting);
    put_metric(&b, "pengine_http_requests_active", "gauge",
               "HTTP requests being received or answered (streams included).",
               (double)c.http_active);
    put_metric(&b, "pengine_kv_blocks_total", "gauge", "KV blocks in each worker's pool.",
               (double)c.kv_blocks);
    put_metric(&b, "pengine_kv_blocks_used", "gauge",
               "KV blocks held by sequences, summed over the replicas (0 when idle).",
               (double)info->kv_blocks_used);
    put_metric(&b, "pengine_kv_preemptions_total", "counter",
               "Sequences preempted when the KV blocks ran out (their blocks freed, computed "
               "again later).", (double)info->kv_preemptions);
    put_metric(&b, "pengine_prefix_cache_queries_total", "counter",
               "Prompt positions looked up in the prefix cache (all but the last of each "
               "sequence started).", (double)info->prefix_asked_tokens);
    put_metric(&b, "pengine_prefix_cache_hits_total", "counter",
               "Prompt positions found in the prefix cache, whose keys and values were not "
               "computed again.", (double)info->prefix_hit_tokens);
    put_metric(&b, "pengine_spec_draft_tokens_total", "counter",
               "Draft tokens (--spec-tokens) checked on the device.",
               (double)info->spec_drafted_tokens);
    put_metric(&b, "pengine_spec_accepted_tokens_total", "counter",
               "Draft tokens the model sampled itself, each one step saved.",
               (double)info->spec_accepted_tokens);
    put_hist(&b, "pengine_time_to_first_token_seconds",
             "Seconds from a sequence's submit to its first token.", &c.ttft);
    put_hist(&b, "pengine_time_per_output_token_seconds",
             "Seconds between two consecutive tokens of a sequence.", &c.tpot);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
