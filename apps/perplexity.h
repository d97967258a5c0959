/* perplexity.h: the "pengine perplexity" subcommand: a text's perplexity under a decoder. */
#ifndef PE_APPS_PERPLEXITY_H
#define PE_APPS_PERPLEXITY_H

/* argv[0] is "perplexity". Returns the exit code. */
int cli_perplexity(int argc, char **argv);

#endif
