/* generate.h: "pengine generate": a sequence from token ids, with the decoder's rates. */
#ifndef PE_APPS_GENERATE_H
#define PE_APPS_GENERATE_H

/* argv[0] is "generate". Returns the exit code. */
int cli_generate(int argc, char **argv);

#endif
