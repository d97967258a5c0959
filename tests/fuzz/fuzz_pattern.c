/* fuzz_pattern.c: fuzzes the regex compiler (src/text/tx_pattern_parse.c, tx_pattern_dfa.c)
 * and its DFA. The input's first byte picks the mode: bit 0 clear, a whole-match regex
 * (tx_pattern_compile, as pe_grammar_regex); set, a JSON schema string's (tx_pattern_text,
 * a search, with bytes 1 and 2 as minLength and maxLength when bits 1 and 2 say so). The
 * rest is the pattern. An accepted pattern's DFA must hold what tx_pattern.h promises,
 * checked here, else the target aborts: every transition names a state or -1; more[s] says
 * whether any does; every state can still reach a match (checked on DFAs of up to 512
 * states); and, for a whole match, the start is not done (the empty text alone is
 * refused). The pattern's own bytes are then walked through it, and tx_pattern_any_char
 * asked over a few ranges. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "text/tx_pattern.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

/* Every state reaches a match: the matches, then whatever has an edge into a state found. */
static void check_live(const tx_pattern *p)
{
    const int32_t N = p->nstates, C = p->nclasses;
    uint8_t *live = calloc((size_t)N, 1);
    if (!live)
        abort();
    int32_t found = 0;
    for (int32_t s = 0; s < N; s++)
        found += live[s] = p->accept[s];
    for (int grew = 1; grew;) { /* (DFAs of 512 states at most: a fixed point will do) */
        grew = 0;
        for (int32_t s = 0; s < N; s++)
            for (int32_t c = 0; c < C && !live[s]; c++) {
                const int32_t to = p->next[(size_t)s * C + c];
                if (to >= 0 && live[to])
                    live[s] = 1, grew = 1, found++;
            }
    }
    free(live);
    if (found != N)
        abort();
}

static void check_dfa(const tx_pattern *p, int whole)
{
    if (p->nstates < 1 || p->start < 0 || p->start >= p->nstates || p->nclasses < 1)
        abort();
    for (int32_t s = 0; s < p->nstates; s++) {
        int more = 0;
        for (int32_t c = 0; c < p->nclasses; c++) {
            const int32_t to = p->next[(size_t)s * p->nclasses + c];
            if (to < -1 || to >= p->nstates)
                abort();
            more |= to >= 0;
        }
        if (more != p->more[s])
            abort();
    }
    if (whole && tx_pattern_done(p, p->start))
        abort();
    if (p->nstates <= 512)
        check_live(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const int text = data[0] & 1;
    const int32_t min = data[0] & 2 ? data[1] % 16 : 0, max = data[0] & 4 ? data[2] % 32 : -1;
    char *pattern = malloc(size - 2);
    if (!pattern)
        abort();
    memcpy(pattern, data + 3, size - 3);
    pattern[size - 3] = '\0';
    tx_pattern *p = NULL;
    const pe_status s = text ? tx_pattern_text(strlen(pattern) ? pattern : NULL, min, max, &p)
                             : tx_pattern_compile(pattern, size - 3, &p);
    if (s == PE_OK) {
        check_dfa(p, !text);
        int32_t at = p->start;
        for (size_t k = 3; k < size && at >= 0; k++)
            at = tx_pattern_step(p, at, data[k]);
        static const uint32_t range[][2] = {
            {0, 0x7F}, {0x80, 0x7FF}, {0xD7F0, 0xE00F}, {0x10000, 0x10FFFF}, {0, 0xFFFF}};
        for (size_t r = 0; r < sizeof range / sizeof range[0]; r++)
            (void)tx_pattern_any_char(p, p->start, range[r][0], range[r][1]);
    }
    tx_pattern_free(p);
    free(pattern);
    return 0;
}
