/* speculate.c: drafts by prompt lookup (speculate.h). */
#include "engine/speculate.h"

#include <string.h>

int en_ngram_draft(const int32_t *tokens, int ntok, int nmin, int nmax, int most,
                   int32_t *out)
{
    if (most <= 0 || nmin < 1)
        return 0;
    for (int n = nmax < ntok - 1 ? nmax : ntok - 1; n >= nmin; n--) {
        const int32_t *tail = tokens + ntok - n;
        /* the latest start i < ntok - n whose n tokens equal the tail, newest first */
        for (int i = ntok - n - 1; i >= 0; i--) {
            if (tokens[i] != tail[0] || memcmp(tokens + i, tail, (size_t)n * sizeof *tail))
                continue;
            /* token ntok + j is drafted as token from + j was; past the end, that is a
             * draft itself: a loop of period ntok - from goes on (avail >= 1) */
            const int from = i + n, avail = ntok - from;
            for (int j = 0; j < most; j++)
                out[j] = j < avail ? tokens[from + j] : out[j - avail];
            return most;
        }
    }
    return 0;
}
