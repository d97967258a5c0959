/* gen.h: the "pengine gen mlp|gpt2|llama" subcommand, which writes a seeded random model. */
#ifndef PE_APPS_GEN_H
#define PE_APPS_GEN_H

/* argv[0] is "gen". Returns the exit code (CLI_OK, CLI_RUNTIME, CLI_USAGE). */
int cli_gen(int argc, char **argv);

#endif
