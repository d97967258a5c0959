/* fuzz_hfindex.c: fuzzes a sharded checkpoint's model.safetensors.index.json
 * (src/model/format/hf.c): the input is the index, beside fixed shards (two good ones, one in
 * a subdirectory, one whose tensor repeats another's name). Checks that, when md_hf_open
 * accepts the directory, every tensor of every shard is found by its name in that shard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "model/format/hf.h"

/* Writes a safetensors file: the header's length (8 bytes, little-endian), the header, and
 * data_bytes zero bytes. */
static void write_shard(const char *name, const char *header, size_t data_bytes)
{
    size_t h = strlen(header);
    unsigned char *b = calloc(1, 8 + h + data_bytes);
    if (!b)
        abort();
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(h >> (8 * i));
    memcpy(b + 8, header, h);
    fuzz_write(name, b, 8 + h + data_bytes);
    free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char sub[1024];
    fuzz_path(sub, sizeof sub, "sub");
    mkdir(sub, 0700);
    const char *config = "{\"architectures\":[\"LlamaForCausalLM\"]}";
    fuzz_write("config.json", config, strlen(config));
    write_shard("a.safetensors",
                "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"y\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}", 16);
    write_shard("b.safetensors",
                "{\"z\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]},"
                "\"__metadata__\":{\"format\":\"pt\"}}", 2);
    write_shard("sub/c.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_shard("bad.safetensors",
                "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("model.safetensors.index.json", data, size);
    md_hf h;
    pe_err err = {{0}};
    if (md_hf_open(fuzz_dir(), &h, &err) == PE_OK) {
        const st_file *f;
        md_hf_find(&h, "x", &f);
        md_hf_find(&h, "z", &f);
        md_hf_find(&h, "w", &f);
        for (int i = 0; i < h.nfiles; i++)
            for (int k = 0; k < h.files[i].ntensors; k++) {
                const st_tensor *t = md_hf_find(&h, h.files[i].tensors[k].name, &f);
                if (!t || f != &h.files[i])
                    abort();
            }
    }
    md_hf_close(&h);
    return 0;
}
