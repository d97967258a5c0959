/* embed.c: pengine embedded in a program, using only the public header.
 *
 *   embed MODEL.safetensors
 *
 * Runs the model data-parallel on two host devices: one synchronous pe_infer, then 8
 * requests through pe_submit/pe_wait, and checks that both paths give the same output. */
#include <pengine/pengine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.safetensors\n", argv[0]);
        return 2;
    }
    int devices[2] = {0, 1};
    pe_config cfg;
    pe_config_init(&cfg);
    cfg.backend = PE_BACKEND_HOST;
    cfg.ndevices = 2;
    cfg.devices = devices; /* dp = 2 by default */
    pe_engine *e = NULL;
    if (pe_engine_create(&cfg, &e) != PE_OK || pe_engine_load(e, argv[1]) != PE_OK) {
        fprintf(stderr, "embed: %s\n", pe_last_error());
        pe_engine_destroy(e);
        return 1;
    }
    pe_model_info info;
    pe_engine_model_info(e, &info);
    enum { ROWS = 4, REQUESTS = 8 };
    float *in = malloc(ROWS * info.in_features * sizeof(float));
    float *ref = malloc(ROWS * info.out_features * sizeof(float));
    float *out = malloc(REQUESTS * ROWS * info.out_features * sizeof(float));
    for (size_t i = 0; i < ROWS * info.in_features; i++)
        in[i] = (float)(i % 7) * 0.25f - 0.5f;
    int rc = 0;
    if (pe_infer(e, in, ROWS, ref) != PE_OK) {
        fprintf(stderr, "embed: %s\n", pe_last_error());
        rc = 1;
    }
    for (int r = 0; rc == 0 && r < REQUESTS; r++) {
        pe_request q = {.id = (uint64_t)r, .rows = ROWS, .input = in,
                        .output = out + (size_t)r * ROWS * info.out_features};
        if (pe_submit(e, &q) != PE_OK)
            rc = 1;
    }
    for (int r = 0; rc == 0 && r < REQUESTS; r++) {
        pe_result res;
        if (pe_wait(e, &res) != PE_OK || res.status != PE_OK)
            rc = 1;
    }
    for (int r = 0; rc == 0 && r < REQUESTS; r++)
        if (memcmp(out + (size_t)r * ROWS * info.out_features, ref,
                   ROWS * info.out_features * sizeof(float)) != 0)
            rc = 1;
    printf("embed: pengine %s, %d layers, %zu parameters, %d requests: %s\n", pe_version(),
           info.nlayers, info.nparams, REQUESTS, rc ? "MISMATCH" : "ok");
    free(in);
    free(ref);
    free(out);
    pe_engine_destroy(e);
    return rc;
}
