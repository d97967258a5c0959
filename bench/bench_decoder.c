/* bench_decoder.c: shared by the decoder benchmarks (bench_decoder.h). */
#include "bench_decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

double bd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void bd_random_prompt(int32_t *prompt, int n, int run, int i, int vocab)
{
    for (int k = 0; k < n; k++) {
        uint64_t s = (uint64_t)run * 1000003u + (uint64_t)k * 7919u + (uint64_t)i * 104729u;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        prompt[k] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

int bd_write_preset(pe_gen_arch arch, const char *preset, uint64_t seed, const char *name,
                    char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/%s.%d", tmp && *tmp ? tmp : "/tmp", name, (int)getpid());
    pe_gen_spec s;
    if (pe_gen_init(&s, arch, preset) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        return -1;
    }
    s.seed = seed;
    printf("writing %s ...\n", dir);
    fflush(stdout);
    if (pe_gen_write(&s, dir) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        return -1;
    }
    return 0;
}

pe_engine *bd_host_engine(const char *dir, const pe_config *cfg)
{
    static const int dev0 = 0;
    pe_config c = *cfg;
    c.backend = PE_BACKEND_HOST;
    c.ndevices = 1;
    c.devices = &dev0;
    pe_engine *e = NULL;
    if (pe_engine_create(&c, &e) != PE_OK || pe_engine_load(e, dir) != PE_OK) {
        fprintf(stderr, "error: %s\n", pe_last_error());
        pe_engine_destroy(e);
        return NULL;
    }
    return e;
}
