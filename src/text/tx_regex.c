/* tx_regex.c: Oniguruma behind tx_regex.h. Compiling takes a process-wide lock (Oniguruma's
 * compile touches shared tables); searching does not. */
#include "text/tx_regex.h"

#include <pthread.h>
#include <stdlib.h>

#include <oniguruma.h>

struct tx_regex {
    regex_t *re;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_compile_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init_rc;

static void init_onig(void)
{
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    g_init_rc = onig_initialize(enc, 1);
}

pe_status tx_regex_compile(const char *pattern, size_t len, const char *what, tx_regex **out,
                           pe_err *err)
{
    *out = NULL;
    pthread_once(&g_once, init_onig);
    if (g_init_rc != ONIG_NORMAL)
        return pe_fail(err, PE_EINTERNAL, "Oniguruma failed to initialize (code %d)", g_init_rc);
    tx_regex *r = calloc(1, sizeof *r);
    if (!r)
        return pe_fail(err, PE_ENOMEM, "out of memory compiling %s", what);
    OnigErrorInfo einfo;
    pthread_mutex_lock(&g_compile_lock);
    int rc = onig_new(&r->re, (const OnigUChar *)pattern, (const OnigUChar *)pattern + len,
                      ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &einfo);
    char msg[ONIG_MAX_ERROR_MESSAGE_LEN] = "";
    if (rc != ONIG_NORMAL)
        onig_error_code_to_str((OnigUChar *)msg, rc, &einfo);
    pthread_mutex_unlock(&g_compile_lock);
    if (rc != ONIG_NORMAL) {
        free(r);
        return pe_fail(err, PE_EFORMAT, "%s: the regex /%.*s/ does not compile (%s); fix the "
                       "pattern", what, (int)(len > 120 ? 120 : len), pattern, msg);
    }
    *out = r;
    return PE_OK;
}

void tx_regex_free(tx_regex *re)
{
    if (!re)
        return;
    pthread_mutex_lock(&g_compile_lock);
    onig_free(re->re);
    pthread_mutex_unlock(&g_compile_lock);
    free(re);
}

tx_region *tx_region_new(void) { return (tx_region *)onig_region_new(); }

void tx_region_free(tx_region *r)
{
    if (r)
        onig_region_free((OnigRegion *)r, 1);
}

int tx_regex_search(const tx_regex *re, tx_region *r, const char *s, size_t n, size_t start,
                    size_t *ms, size_t *me)
{
    const OnigUChar *str = (const OnigUChar *)s;
    OnigRegion *reg = (OnigRegion *)r;
    int pos = onig_search(re->re, str, str + n, str + start, str + n, reg, ONIG_OPTION_NONE);
    if (pos < 0)
        return 0;
    *ms = (size_t)reg->beg[0];
    *me = (size_t)reg->end[0];
    return 1;
}

long tx_regex_match_at(const tx_regex *re, tx_region *r, const char *s, size_t n, size_t at)
{
    const OnigUChar *str = (const OnigUChar *)s;
    int len = onig_match(re->re, str, str + n, str + at, (OnigRegion *)r, ONIG_OPTION_NONE);
    return len < 0 ? -1 : len;
}
