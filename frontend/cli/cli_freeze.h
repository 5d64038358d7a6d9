/* graphrun export --inference (cli_freeze.c): the inference graph of a
 * loaded .gr file's outputs, its variables frozen from a checkpoint
 * (gr_passes_freeze_graph), serialized as a .grb file that `graphrun
 * predict` and `graphrun run` read. Internal to frontend/cli/. */
#ifndef GR_CLI_FREEZE_H
#define GR_CLI_FREEZE_H

#include <graphrun.h>

#include "cli_util.h"

typedef struct cli_freeze_options {
  const char *ckpt_path; /* required: a checkpoint file or a sharded directory */
  int64_t step;          /* -1: the newest checkpoint */
  const char *input;     /* NULL: the one placeholder or image_folder the outputs read */
  const char *outputs[CLI_MAX_NAMES];
  int num_outputs;
} cli_freeze_options;

/* Freezes program p (its graph g, loaded from file) and serializes the
 * result into *data (malloc'd; the caller frees), *size bytes, with the
 * input's and outputs' names and the outputs as its fetches. Prints what it
 * kept on stdout, errors on stderr ("graphrun export: ..."). An exit code. */
int cli_freeze(const char *file, gr_graph *g, const gr_dsl_program *p, const cli_freeze_options *o,
               void **data, size_t *size);

#endif
