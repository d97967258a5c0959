/* model_file.h: the model a run uses: the demo's generated file or --model, and its shape. */
#ifndef PE_APPS_MODEL_FILE_H
#define PE_APPS_MODEL_FILE_H

#include <stddef.h>

#include "args.h"

typedef struct cli_model {
    char path[4096];    /* the safetensors file */
    int generated;      /* 1: a temporary demo file, removed by cli_model_release */
    int nlayers;
    size_t in, out;     /* widths of the input and output */
    size_t nparams;
    char shape[256];    /* "256-256-256-256-1" (widths, input first) */
    const char *act;    /* "relu", "gelu", "none" or "mixed" */
} cli_model;

/* Uses --model if given, else writes the demo MLP (in = hidden = 256, layers Linear layers,
 * out_width outputs, relu, normal(0, 0.02), --seed) to a temporary file. Reads its shape.
 * Returns CLI_OK, or an exit code after printing the error. */
int cli_model_prepare(const cli_options *o, int layers, size_t out_width, cli_model *m);
void cli_model_release(cli_model *m);

#endif
