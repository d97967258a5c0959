/* llm_model.c: the decoder the demo writes for itself (no --model), and its removal. */
#include "llm_model.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "pengine/pengine_tools.h"

/* The demo's shape: large enough that compute, not hand-offs, dominates a step on the host
 * (so that the grids' figures mean something), small enough for seconds. */
static void demo_spec(pe_gen_spec *sp, uint64_t seed)
{
    pe_gen_init(sp, PE_GEN_LLAMA, "tiny");
    sp->layers = 8;
    sp->hidden = 384;
    sp->heads = 6;
    sp->kv_heads = 2;
    sp->inner = 1024;
    sp->vocab = 4096;
    sp->context = 256;
    sp->seed = seed;
}

int cli_llm_model_write(uint64_t seed, cli_llm_model *m)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int n = snprintf(m->dir, sizeof m->dir, "%s/pengine-llama-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= sizeof m->dir) {
        m->dir[0] = '\0';
        cli_errorf("TMPDIR '%s' is too long; set TMPDIR to a short writable folder", tmp);
        return CLI_USAGE;
    }
    if (!mkdtemp(m->dir)) {
        cli_errorf("cannot create a folder for the demo's model in %s (%s); set TMPDIR to a "
                   "writable folder or pass --model DIR", tmp, strerror(errno));
        m->dir[0] = '\0';
        return CLI_RUNTIME;
    }
    pe_gen_spec spec;
    demo_spec(&spec, seed);
    if (pe_gen_write(&spec, m->dir) != PE_OK) {
        cli_errorf("writing the demo's model to %s failed: %s; set TMPDIR to a folder with "
                   "100 MB free, or pass --model DIR", m->dir, pe_last_error());
        cli_llm_model_remove(m);
        return CLI_RUNTIME;
    }
    return CLI_OK;
}

void cli_llm_model_remove(cli_llm_model *m)
{
    if (!m->dir[0])
        return;
    DIR *d = opendir(m->dir); /* pe_gen_write writes plain files only */
    for (struct dirent *ent = d ? readdir(d) : NULL; ent; ent = readdir(d)) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        char path[4096 + 256 + 2];
        snprintf(path, sizeof path, "%s/%s", m->dir, ent->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(m->dir);
    m->dir[0] = '\0';
}
