/* llm_trace.c: the decoder demo's trace: its size, the decode phase's bubble, the file. */
#include "llm_trace.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

/* config.json's text, or NULL. */
static char *read_config(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        text = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
        if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
            free(text);
            text = NULL;
        }
        if (text)
            text[n] = '\0';
    }
    fclose(f);
    return text;
}

/* The decoder's blocks (num_hidden_layers, or GPT-2's n_layer); 0 when unknown. */
static int config_layers(const char *dir)
{
    char *text = read_config(dir);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "num_hidden_layers");
    if (!cJSON_IsNumber(n))
        n = cJSON_GetObjectItemCaseSensitive(j, "n_layer");
    int layers = cJSON_IsNumber(n) && n->valuedouble >= 1 && n->valuedouble < 1e6
                     ? (int)n->valuedouble : 0;
    cJSON_Delete(j);
    return layers;
}

size_t cli_llm_trace_events(const char *dir, int batch, int prompt, int gen)
{
    int layers = config_layers(dir);
    const size_t per_step = 3 + 2 * (size_t)(layers > 0 ? layers : 64) + 6;
    const size_t steps = (size_t)batch * (size_t)(prompt + gen) + 8;
    if (steps > CLI_TRACE_MAX_EVENTS / per_step)
        return CLI_TRACE_MAX_EVENTS;
    return steps * per_step;
}

/* 1 when some worker's buffer is full: later events were dropped. */
static int trace_full(const pe_trace_event *ev, size_t n, int world, size_t cap)
{
    size_t *count = calloc((size_t)world, sizeof *count);
    int full = !count;
    for (size_t i = 0; count && i < n; i++)
        if (ev[i].worker >= 0 && ev[i].worker < world)
            full |= ++count[ev[i].worker] >= cap;
    free(count);
    return full;
}

/* The decode phase: from the first decode step's compute to the last one's end (us). */
static int decode_window(const pe_trace_event *ev, size_t n, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind == PE_TRACE_COMPUTE && ev[i].phase == PE_TRACE_DECODE) {
            *lo = fmin(*lo, ev[i].start_us);
            *hi = fmax(*hi, ev[i].end_us);
        }
    return *hi > *lo ? 0 : -1;
}

int cli_llm_decode_bubble(pe_engine *e, int world, size_t trace_events, double *bubble)
{
    pe_trace_event *ev = NULL;
    size_t n = 0;
    *bubble = NAN;
    if (pe_engine_trace(e, &ev, &n) != PE_OK)
        return -1;
    double lo, hi;
    int rc = trace_full(ev, n, world, trace_events) ? -1 : decode_window(ev, n, &lo, &hi);
    if (rc == 0) {
        double busy = 0; /* every worker's compute inside the window */
        for (size_t i = 0; i < n; i++)
            if (ev[i].kind == PE_TRACE_COMPUTE)
                busy += fmax(0, fmin(ev[i].end_us, hi) - fmax(ev[i].start_us, lo));
        *bubble = 1.0 - busy / ((double)world * (hi - lo));
    }
    free(ev);
    return rc;
}

int cli_llm_trace_write(pe_engine *e, const char *path)
{
    if (pe_engine_trace_write(e, path) == PE_OK)
        return CLI_OK;
    cli_errorf("writing the trace failed: %s", pe_engine_last_error(e));
    return CLI_RUNTIME;
}
