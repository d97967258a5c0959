/* bench_decoder.h: what the decoder benchmarks on the library share: a monotonic clock, a
 * seeded preset model written for the run, and a host engine on one device. */
#ifndef PE_BENCH_DECODER_H
#define PE_BENCH_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"
#include "pengine/pengine_tools.h"

/* Milliseconds of CLOCK_MONOTONIC. */
double bd_now_ms(void);

/* Prompt i of run `run`: n tokens below vocab, seeded by (run, i, position), so that no run
 * finds another's blocks in the prefix cache. */
void bd_random_prompt(int32_t *prompt, int n, int run, int i, int vocab);

/* Writes `preset` of arch (pe_gen_init), seeded, into $TMPDIR (or /tmp)/<name>.<pid>,
 * saying so on stdout; dir gets the path (remove it with bu_remove_dir). Returns 0, or -1
 * with the error printed. */
int bd_write_preset(pe_gen_arch arch, const char *preset, uint64_t seed, const char *name,
                    char *dir, size_t len);

/* A host engine on device 0, cfg's decoder fields (threads, kv_tokens, prefix_caching,
 * spec_*) as given and the rest pe_config_init's, loaded with dir. NULL with the error
 * printed. */
pe_engine *bd_host_engine(const char *dir, const pe_config *cfg);

#endif
