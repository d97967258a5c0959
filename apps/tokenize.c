/* tokenize.c: "pengine tokenize --tokenizer FILE|--model DIR [--json] [--decode]", as
 * llama.cpp's llama-tokenize: reads text on stdin and prints its ids (space-separated, or a
 * JSON array), with the post-processor's special tokens (BOS/EOS) as a model would get
 * them; with --decode reads ids (separated by spaces or commas, or a JSON array) and prints
 * their text, special tokens included. A missing or malformed tokenizer file and bad ids
 * are usage errors (exit 2). */
#include "tokenize.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "args.h"

typedef struct tok_opts {
    const char *tokenizer, *model;
    int json, decode;
} tok_opts;

static int parse(int argc, char **argv, tok_opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            cli_usage(stdout);
            return -1;
        } else if (!strcmp(f, "--json")) {
            o->json = 1;
        } else if (!strcmp(f, "--decode")) {
            o->decode = 1;
        } else if (!strcmp(f, "--tokenizer") || !strcmp(f, "--model")) {
            if (i + 1 >= argc) {
                cli_errorf("%s needs a value; see pengine --help", f);
                return CLI_USAGE;
            }
            *(!strcmp(f, "--model") ? &o->model : &o->tokenizer) = argv[++i];
        } else {
            cli_errorf("unknown flag '%s' for tokenize; see pengine --help", f);
            return CLI_USAGE;
        }
    }
    if (!o->tokenizer == !o->model) {
        cli_error("tokenize needs exactly one of --tokenizer FILE or --model DIR; see pengine "
                  "--help");
        return CLI_USAGE;
    }
    return CLI_OK;
}

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (n < cap) {
            if (ferror(stdin)) {
                free(buf);
                return NULL;
            }
            break;
        }
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

static int print_ids(const int32_t *ids, size_t n, int json)
{
    fputs(json ? "[" : "", stdout);
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? (json ? ", " : " ") : "", (int)ids[i]);
    fputs(json ? "]\n" : "\n", stdout);
    return CLI_OK;
}

/* Integers separated by spaces or commas, optionally inside [ ]. */
static int parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 256;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    for (const char *p = s; ids && *p;) {
        if (strchr(" \t\r\n,[]", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || !strchr(" \t\r\n,[]", *end)) {
            size_t k = strcspn(p, " \t\r\n,[]");
            cli_errorf("bad token id '%.*s' on stdin; give integers >= 0 separated by spaces "
                       "or as a JSON array", (int)(k > 40 ? 40 : k), p);
            free(ids);
            return CLI_USAGE;
        }
        if (*n == cap) {
            int32_t *ni = realloc(ids, 2 * cap * sizeof *ni);
            if (!ni) {
                free(ids);
                cli_errorf("out of memory after %zu ids on stdin; give fewer", *n);
                return CLI_RUNTIME;
            }
            ids = ni;
            cap *= 2;
        }
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    if (!ids) {
        cli_error("out of memory reading the ids; give fewer");
        return CLI_RUNTIME;
    }
    *out = ids;
    return CLI_OK;
}

static int run(const tok_opts *o, pe_tokenizer *t, const char *in, size_t len)
{
    if (!o->decode) {
        int32_t *ids;
        size_t n;
        if (pe_tokenizer_encode(t, in, len, 1, &ids, &n) != PE_OK) {
            cli_error(pe_last_error());
            return CLI_RUNTIME;
        }
        print_ids(ids, n, o->json);
        free(ids);
        return CLI_OK;
    }
    int32_t *ids;
    size_t n;
    int rc = parse_ids(in, &ids, &n);
    if (rc != CLI_OK)
        return rc;
    char *text;
    size_t tlen;
    pe_status s = pe_tokenizer_decode(t, ids, n, 0, &text, &tlen);
    free(ids);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        return s == PE_EINVAL ? CLI_USAGE : CLI_RUNTIME;
    }
    if (o->json) {
        cJSON *str = cJSON_CreateString(text);
        char *js = str ? cJSON_PrintUnformatted(str) : NULL;
        if (js)
            printf("%s\n", js);
        free(js);
        cJSON_Delete(str);
    } else {
        fwrite(text, 1, tlen, stdout);
    }
    free(text);
    return CLI_OK;
}

int cli_tokenize(int argc, char **argv)
{
    tok_opts o;
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    pe_tokenizer *t;
    pe_status s = pe_tokenizer_load(o.tokenizer ? o.tokenizer : o.model, &t);
    if (s != PE_OK) {
        cli_error(pe_last_error());
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    size_t len;
    char *in = read_stdin(&len);
    if (!in) {
        cli_error("cannot read stdin; pipe the text (or the ids with --decode) into it");
        pe_tokenizer_free(t);
        return CLI_RUNTIME;
    }
    rc = run(&o, t, in, len);
    free(in);
    pe_tokenizer_free(t);
    if (fflush(stdout) != 0 && rc == CLI_OK) {
        cli_error("writing the output failed (a closed stdout?); retry");
        rc = CLI_RUNTIME;
    }
    return rc;
}
