/* report.h: the figures a run prints, as aligned text tables or as one JSON object.
 *
 * Every figure goes through here, so --json holds exactly what the text shows. In text
 * mode lines go to stdout as they come; in JSON mode nothing is printed until
 * report_finish writes the object. */
#ifndef PE_APPS_REPORT_H
#define PE_APPS_REPORT_H

#include <stddef.h>

typedef struct cli_report cli_report;

cli_report *report_new(int json); /* NULL when out of memory */
void report_free(cli_report *r);
int report_is_json(const cli_report *r);

/* A free text line (text mode only), e.g. a title or a blank line. */
void report_line(cli_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* key = value in the current JSON object; "label   value unit" in text. A NULL key keeps
 * the figure out of the JSON, a NULL label out of the text. decimals < 0 prints -decimals
 * significant digits (%g) instead of fixed decimals. */
void report_str(cli_report *r, const char *key, const char *label, const char *value);
void report_num(cli_report *r, const char *key, const char *label, double v, int decimals,
                const char *unit);
void report_int(cli_report *r, const char *key, const char *label, long long v,
                const char *unit);
void report_bool(cli_report *r, const char *key, const char *label, int v, const char *yes,
                 const char *no);
/* JSON only: an array of ints (e.g. the device list). */
void report_int_array(cli_report *r, const char *key, const int *v, int n);

/* Nested JSON object; in text, heading (if not NULL) becomes a section line. */
void report_push(cli_report *r, const char *key, const char *heading);
void report_pop(cli_report *r);

/* A table whose columns become JSON objects named keys[c] in the current object and whose
 * rows become a field of each. A NaN value is a blank cell (absent in JSON). */
void report_table(cli_report *r, int ncols, const char *const *keys, const char *const *titles);
void report_row(cli_report *r, const char *key, const char *label, const double *v,
                int decimals, const char *unit);
void report_table_end(cli_report *r);

/* Lines shown verbatim in text and kept as an array of strings in JSON (the timeline). */
void report_lines(cli_report *r, const char *key, char *const *lines, int n);

/* JSON mode: prints the object on stdout. Returns 0, or -1 when out of memory. */
int report_finish(cli_report *r);

#endif
