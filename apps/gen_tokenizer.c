/* gen_tokenizer.c: "pengine gen gpt2|llama --tokenizer FILE": a random decoder with a real
 * tokenizer's vocabulary, BOS and EOS, and the tokenizer's files copied beside its weights. */
#include "gen_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"

/* The tokenizer's BOS: the id its post-processor puts first (Llama 2's <s>), else the token
 * of a conventional name; -1 when it has none. */
static int32_t tokenizer_bos(const pe_tokenizer *t)
{
    int32_t *ids, id = -1;
    size_t n;
    if (pe_tokenizer_encode(t, "", 0, 1, &ids, &n) == PE_OK) {
        if (n > 0)
            id = ids[0];
        free(ids);
    }
    static const char *const names[] = {"<s>", "<|begin_of_text|>", "<|endoftext|>"};
    for (size_t k = 0; id < 0 && k < sizeof names / sizeof names[0]; k++)
        id = pe_tokenizer_token_id(t, names[k]);
    return id;
}

/* The tokenizer's EOS, by the conventional names (Llama 2, Llama 3, GPT-2 and Qwen); -1. */
static int32_t tokenizer_eos(const pe_tokenizer *t)
{
    static const char *const names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>"};
    int32_t id = -1;
    for (size_t k = 0; id < 0 && k < sizeof names / sizeof names[0]; k++)
        id = pe_tokenizer_token_id(t, names[k]);
    return id;
}

int gen_fit_tokenizer(pe_gen_spec *spec, const char *path, int vocab_set, int bos_set,
                      int eos_set)
{
    pe_tokenizer *t;
    pe_status s = pe_tokenizer_load(path, &t);
    if (s != PE_OK) {
        cli_errorf("--tokenizer: %s", pe_last_error());
        return s == PE_ENOMEM ? CLI_RUNTIME : CLI_USAGE;
    }
    size_t tv = pe_tokenizer_vocab_size(t);
    if (vocab_set && (size_t)spec->vocab < tv) {
        cli_errorf("--vocab %d is smaller than the tokenizer's %zu tokens; drop --vocab (the "
                   "model then gets the tokenizer's), or give at least %zu", spec->vocab, tv, tv);
        pe_tokenizer_free(t);
        return CLI_USAGE;
    }
    if (!vocab_set)
        spec->vocab = (int)tv;
    if (spec->arch == PE_GEN_GPT2) { /* as for --vocab: GPT-2's ids are the vocab's last */
        if (!bos_set)
            spec->bos_token_id = spec->vocab - 1;
        if (!eos_set)
            spec->eos_token_id = spec->vocab - 1;
    }
    int32_t bos = tokenizer_bos(t), eos = tokenizer_eos(t);
    if (!bos_set && bos >= 0)
        spec->bos_token_id = bos;
    if (!eos_set && eos >= 0)
        spec->eos_token_id = eos;
    pe_tokenizer_free(t);
    return CLI_OK;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Copies the file from into dir/name (nothing to do when it is that file already). */
static int copy_into(const char *from, const char *dir, const char *name)
{
    char to[4096];
    if (snprintf(to, sizeof to, "%s/%s", dir, name) >= (int)sizeof to) {
        cli_errorf("the path %s/%s is too long; give a shorter --out", dir, name);
        return CLI_USAGE;
    }
    struct stat a, b;
    if (stat(from, &a) == 0 && stat(to, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return CLI_OK;
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int ok = in && out;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    int err = errno;
    if (out && fclose(out) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (in)
        fclose(in);
    if (!ok) {
        cli_errorf("cannot copy %s to %s (%s); check that --out is writable", from, to,
                   strerror(err));
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

/* Removes dir/name if it is there. */
static void remove_in(const char *dir, const char *name)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path)
        unlink(path);
}

/* The tokenizer_config.json beside tokenizer.json (its chat template, for pengine chat),
 * when there is one; a stale one in dir is removed. */
static int copy_config(const char *tokenizer_json, const char *dir)
{
    char config[4096];
    const char *slash = strrchr(tokenizer_json, '/');
    int n = slash ? (int)(slash - tokenizer_json) : 1;
    snprintf(config, sizeof config, "%.*s/tokenizer_config.json", n,
             slash ? tokenizer_json : ".");
    if (is_file(config))
        return copy_into(config, dir, "tokenizer_config.json");
    remove_in(dir, "tokenizer_config.json");
    return CLI_OK;
}

int gen_copy_tokenizer(const char *path, const char *dir)
{
    char json[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(json, sizeof json, "%s/tokenizer.json", path);
        if (!is_file(json)) { /* GPT-2's pair (pe_tokenizer_load found it) */
            char vocab[4096], merges[4096];
            snprintf(vocab, sizeof vocab, "%s/vocab.json", path);
            snprintf(merges, sizeof merges, "%s/merges.txt", path);
            int rc = copy_into(vocab, dir, "vocab.json");
            if (rc == CLI_OK)
                rc = copy_into(merges, dir, "merges.txt");
            if (rc == CLI_OK)
                remove_in(dir, "tokenizer.json");
            return rc == CLI_OK ? copy_config(json, dir) : rc;
        }
        path = json;
    }
    int rc = copy_into(path, dir, "tokenizer.json");
    if (rc == CLI_OK) {
        remove_in(dir, "vocab.json");
        remove_in(dir, "merges.txt");
        rc = copy_config(path, dir);
    }
    return rc;
}
