/* tokenize.h: the "pengine tokenize" subcommand: text on stdin -> ids, or ids -> text. */
#ifndef PE_APPS_TOKENIZE_H
#define PE_APPS_TOKENIZE_H

/* argv[0] is "tokenize". Returns the exit code (CLI_OK, CLI_RUNTIME, CLI_USAGE). */
int cli_tokenize(int argc, char **argv);

#endif
