/* fuzz_cfg.c: fuzzes config.json through md_decoder_open (src/model/format/hf.c's getters,
 * the Llama and GPT-2 configure steps, the check of the checkpoint against the config). The
 * input's first byte picks the checkpoint (bit 0: a tiny Llama or a tiny GPT-2, written by
 * pe_gen_write at start); the rest is the config.json beside it. Checks that an accepted model
 * answers the getters and closes without a sanitizer report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/decoder.h"
#include "pengine/pengine_tools.h"

static char g_model[2][1024]; /* (2) the Llama and the GPT-2 directories */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const pe_gen_arch arch[2] = {PE_GEN_LLAMA, PE_GEN_GPT2};
    for (int i = 0; i < 2; i++) {
        pe_gen_spec spec;
        fuzz_path(g_model[i], sizeof g_model[i], i ? "gpt2" : "llama");
        if (pe_gen_init(&spec, arch[i], "tiny") != PE_OK ||
            pe_gen_write(&spec, g_model[i]) != PE_OK) {
            fprintf(stderr, "fuzz_cfg: pe_gen_write(%s): %s\n", g_model[i], pe_last_error());
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *dir = g_model[data[0] & 1];
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f) != 0)
        abort();
    md_decoder m;
    pe_err err = {{0}};
    if (md_decoder_open(dir, &m, &err) != PE_OK)
        return 0;
    pe_model_info info;
    md_decoder_info(&m, &info);
    long v;
    double x;
    const char *s;
    int b, k;
    int32_t ids[4];
    const void *o;
    md_hf_int(&m.hf, "vocab_size", &v, &err);
    md_hf_num_or(&m.hf, "rope_theta", 1, &x, &err);
    md_hf_str_or(&m.hf, "model_type", "", &s, &err);
    md_hf_bool_or(&m.hf, "use_cache", 0, &b, &err);
    md_hf_int_list(&m.hf, "eos_token_id", ids, 4, &k, &err);
    md_hf_object(&m.hf, "rope_scaling", &o, &err);
    md_decoder_close(&m);
    return 0;
}
