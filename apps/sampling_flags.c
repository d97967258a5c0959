/* sampling_flags.c: --temperature, --top-k, --top-p, --min-p, --seed and the penalties. */
#include "sampling_flags.h"

#include <stdio.h>
#include <string.h>

#include "args.h"

void cli_sampling_init(pe_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

int cli_apply_sampling_flag(pe_sampling *s, const char *f, const char *v, char *msg,
                            size_t len)
{
    long x = 0;
    double d = 0;
    int bad = 0;
    if (!strcmp(f, "--temperature")) {
        bad = cli_parse_double(f, v, 0.0, 100.0, &d, msg, len);
        s->temperature = (float)d;
    } else if (!strcmp(f, "--top-k")) {
        bad = cli_parse_long(f, v, 0, 1L << 30, &x, msg, len);
        s->top_k = (int)x;
    } else if (!strcmp(f, "--top-p")) {
        bad = cli_parse_double(f, v, 0.0, 1.0, &d, msg, len);
        if (!bad && d <= 0.0) {
            snprintf(msg, len, "--top-p 0 keeps no token; give a number in (0, 1]");
            bad = 1;
        }
        s->top_p = (float)d;
    } else if (!strcmp(f, "--min-p")) {
        bad = cli_parse_double(f, v, 0.0, 1.0, &d, msg, len);
        s->min_p = (float)d;
    } else if (!strcmp(f, "--seed")) {
        bad = cli_parse_u64(f, v, &s->seed, msg, len);
    } else if (!strcmp(f, "--repetition-penalty")) {
        bad = cli_parse_double(f, v, 0.0, 100.0, &d, msg, len);
        if (!bad && d <= 0.0) {
            snprintf(msg, len, "--repetition-penalty 0 would divide by 0; give a number > 0 "
                     "(1: off, above 1 repeats less)");
            bad = 1;
        }
        s->repetition_penalty = (float)d;
    } else if (!strcmp(f, "--frequency-penalty")) {
        bad = cli_parse_double(f, v, -2.0, 2.0, &d, msg, len);
        s->frequency_penalty = (float)d;
    } else if (!strcmp(f, "--presence-penalty")) {
        bad = cli_parse_double(f, v, -2.0, 2.0, &d, msg, len);
        s->presence_penalty = (float)d;
    } else {
        return -1;
    }
    return bad ? 1 : 0;
}
