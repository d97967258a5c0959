/* fuzz_st.c: fuzzes the safetensors reader (src/model/format/safetensors.c): the input is
 * a whole .safetensors file. Checks that every tensor of a file st_open accepts is found by
 * its name, converts to F32 without error reports from the sanitizers, and that every byte
 * of its claimed data range can be read. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "model/format/safetensors.h"

static volatile unsigned char g_sink; /* the bytes read, so that the reads stay */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_path(path, sizeof path, "model.safetensors");
    fuzz_write("model.safetensors", data, size);
    st_file sf;
    pe_err err = {{0}};
    if (st_open(path, &sf, &err) != PE_OK) {
        st_close(&sf);
        return 0;
    }
    for (int i = 0; i < sf.ntensors; i++) {
        const st_tensor *t = &sf.tensors[i];
        if (st_find(&sf, t->name) == NULL)
            abort();
        if (t->nelem < (1u << 20)) { /* larger ones would only cost time */
            float *dst = malloc(t->nelem * sizeof(float) + 1);
            st_read_f32(&sf, t, dst, &err);
            free(dst);
        }
        const unsigned char *p = t->data;
        for (size_t k = t->begin; k < t->end; k++)
            g_sink ^= p[k - t->begin];
    }
    st_meta(&sf, "format");
    st_close(&sf);
    return 0;
}
