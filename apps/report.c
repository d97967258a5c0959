/* report.c: prints figures as aligned text or collects them into one cJSON object. */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define REPORT_DEPTH 8
#define REPORT_COLS 8
#define LABEL_W 30
#define CELL_W 14

struct cli_report {
    int json;
    int failed;                  /* out of memory while building the JSON */
    cJSON *stack[REPORT_DEPTH];  /* stack[0] is the root */
    int depth;
    int ncols;                   /* > 0 while a table is open */
    cJSON *cols[REPORT_COLS];
};

cli_report *report_new(int json)
{
    cli_report *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->json = json;
    r->stack[0] = cJSON_CreateObject();
    if (!r->stack[0]) {
        free(r);
        return NULL;
    }
    return r;
}

void report_free(cli_report *r)
{
    if (!r)
        return;
    cJSON_Delete(r->stack[0]);
    free(r);
}

int report_is_json(const cli_report *r) { return r->json; }

static cJSON *cur(cli_report *r) { return r->stack[r->depth]; }

static void check(cli_report *r, const void *p)
{
    if (!p)
        r->failed = 1;
}

void report_line(cli_report *r, const char *fmt, ...)
{
    if (r->json)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static void text_figure(const char *label, const char *value, const char *unit)
{
    /* "1.52x", but "3.2 ms" */
    int glued = unit && !strcmp(unit, "x");
    printf("  %-*s %s%s%s\n", LABEL_W, label, value, unit && *unit && !glued ? " " : "",
           unit ? unit : "");
}

void report_str(cli_report *r, const char *key, const char *label, const char *value)
{
    if (r->json) {
        if (key)
            check(r, cJSON_AddStringToObject(cur(r), key, value));
    } else if (label) {
        text_figure(label, value, NULL);
    }
}

void report_num(cli_report *r, const char *key, const char *label, double v, int decimals,
                const char *unit)
{
    if (r->json) {
        if (key)
            check(r, isfinite(v) ? cJSON_AddNumberToObject(cur(r), key, v)
                                 : cJSON_AddNullToObject(cur(r), key));
        return;
    }
    if (!label)
        return;
    char buf[64];
    if (decimals < 0) /* significant digits, for errors that span many decades */
        snprintf(buf, sizeof buf, "%.*g", -decimals, v);
    else
        snprintf(buf, sizeof buf, "%.*f", decimals, v);
    text_figure(label, buf, unit);
}

void report_int(cli_report *r, const char *key, const char *label, long long v, const char *unit)
{
    if (r->json) {
        if (key)
            check(r, cJSON_AddNumberToObject(cur(r), key, (double)v));
        return;
    }
    if (!label)
        return;
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", v);
    text_figure(label, buf, unit);
}

void report_bool(cli_report *r, const char *key, const char *label, int v, const char *yes,
                 const char *no)
{
    if (r->json) {
        if (key)
            check(r, cJSON_AddBoolToObject(cur(r), key, v));
    } else if (label) {
        text_figure(label, v ? yes : no, NULL);
    }
}

void report_int_array(cli_report *r, const char *key, const int *v, int n)
{
    if (!r->json)
        return;
    cJSON *a = cJSON_CreateIntArray(v, n);
    check(r, a);
    if (a && !cJSON_AddItemToObject(cur(r), key, a)) {
        cJSON_Delete(a);
        r->failed = 1;
    }
}

void report_push(cli_report *r, const char *key, const char *heading)
{
    if (!r->json) {
        if (heading)
            printf("%s\n", heading);
        return;
    }
    cJSON *o = cJSON_GetObjectItemCaseSensitive(cur(r), key);
    if (!o)
        o = cJSON_AddObjectToObject(cur(r), key);
    check(r, o);
    if (r->depth + 1 < REPORT_DEPTH && o)
        r->stack[++r->depth] = o;
    else
        r->failed = 1;
}

void report_pop(cli_report *r)
{
    if (r->json && r->depth > 0)
        r->depth--;
}

void report_table(cli_report *r, int ncols, const char *const *keys, const char *const *titles)
{
    r->ncols = ncols > REPORT_COLS ? REPORT_COLS : ncols;
    if (!r->json) {
        printf("  %-*s", LABEL_W, "");
        for (int c = 0; c < r->ncols; c++)
            printf(" %*s", CELL_W, titles[c]);
        putchar('\n');
        return;
    }
    for (int c = 0; c < r->ncols; c++) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(cur(r), keys[c]);
        if (!o)
            o = cJSON_AddObjectToObject(cur(r), keys[c]);
        check(r, o);
        r->cols[c] = o;
    }
}

void report_row(cli_report *r, const char *key, const char *label, const double *v, int decimals,
                const char *unit)
{
    if (r->json) {
        for (int c = 0; c < r->ncols; c++)
            if (r->cols[c] && isfinite(v[c]))
                check(r, cJSON_AddNumberToObject(r->cols[c], key, v[c]));
        return;
    }
    char label_unit[96];
    snprintf(label_unit, sizeof label_unit, "%s%s%s%s", label, unit && *unit ? " (" : "",
             unit ? unit : "", unit && *unit ? ")" : "");
    printf("  %-*s", LABEL_W, label_unit);
    for (int c = 0; c < r->ncols; c++) {
        if (isfinite(v[c]))
            printf(" %*.*f", CELL_W, decimals, v[c]);
        else
            printf(" %*s", CELL_W, "");
    }
    putchar('\n');
}

void report_table_end(cli_report *r) { r->ncols = 0; }

void report_lines(cli_report *r, const char *key, char *const *lines, int n)
{
    if (!r->json) {
        for (int i = 0; i < n; i++)
            printf("%s\n", lines[i]);
        return;
    }
    cJSON *a = cJSON_AddArrayToObject(cur(r), key);
    check(r, a);
    for (int i = 0; a && i < n; i++) {
        cJSON *s = cJSON_CreateString(lines[i]);
        check(r, s);
        if (s && !cJSON_AddItemToArray(a, s)) {
            cJSON_Delete(s);
            r->failed = 1;
        }
    }
}

int report_finish(cli_report *r)
{
    if (!r->json)
        return fflush(stdout) == 0 ? 0 : -1;
    if (r->failed)
        return -1;
    if (!r->stack[0]->child) /* nothing was measured (the run failed before any figure) */
        return 0;
    char *s = cJSON_Print(r->stack[0]);
    if (!s)
        return -1;
    printf("%s\n", s);
    cJSON_free(s);
    return fflush(stdout) == 0 ? 0 : -1;
}
