/* graphrun export FILE.gr -o FILE.grb: builds a .gr file and writes its
 * graph serialized (distributed/gr_distributed.h), with the file's names,
 * fetches and targets; every graphrun command reads .grb like .gr. With
 * --inference, the frozen inference graph of its outputs (cli_freeze.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_freeze.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: graphrun export FILE.gr -o OUT.grb [--seed N]\n"
      "       graphrun export FILE.gr --inference [--ckpt PATH [--step N]] --output NAME[,NAME]\n"
      "                       [--input NAME] -o OUT.grb\n\n"
      "Builds FILE.gr and writes its graph as a serialized graph (msgpack, format in\n"
      "docs/distributed.md): every node with its op, attrs (constants included), inputs,\n"
      "devices and source position, plus the file's names, `fetch` and `target`.\n"
      "`graphrun run|check|dot|place OUT.grb` read it like the .gr file, with the same\n"
      "results bit for bit; the graph's seed is the one it was exported with.\n"
      "With --inference it writes the inference graph of the outputs instead: only the\n"
      "nodes they need from their input, each variable a constant of its value in the\n"
      "checkpoint, no devices; an image_folder input becomes an image_input (its size,\n"
      "color mode and class names) that `graphrun predict OUT.grb IMAGE...` feeds.\n"
      "  -o, --out OUT.grb  where to write (required; replaced atomically)\n"
      "  --seed N           the graph's seed for random ops (default 0)\n"
      "  --inference        write the frozen inference graph of --output\n"
      "  --ckpt PATH        the checkpoint file (or directory) the variables' values\n"
      "                     come from (needed when the outputs read variables)\n"
      "  --step N           its checkpoint at step N (default: the newest)\n"
      "  --output A,B       the model's outputs, built with training=false\n"
      "  --input NAME       the model's input (default: the one placeholder or\n"
      "                     image_folder the outputs read); a batch of any size\n"
      "Exit codes: 0 ok, 1 runtime failure, 2 error in the file or flags.\n");
}

/* Writes data to path through a temporary file and a rename, so a failed
 * write never leaves a half file under the name. */
static int write_atomically(const char *path, const void *data, size_t size) {
  size_t n = strlen(path) + 8;
  char *tmp = malloc(n);
  if (!tmp) return GR_EXIT_FAILURE;
  snprintf(tmp, n, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fwrite(data, 1, size, f) == size;
  ok = (f && fclose(f) == 0) && ok;
  if (ok && rename(tmp, path) != 0) ok = false;
  if (!ok) {
    perror(path);
    remove(tmp);
  }
  free(tmp);
  return ok ? GR_EXIT_OK : GR_EXIT_FAILURE;
}

enum { F_SEED = 256, F_INFERENCE, F_CKPT, F_STEP, F_INPUT, F_OUTPUT };

static const struct option export_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"out", required_argument, NULL, 'o'},
    {"seed", required_argument, NULL, F_SEED},
    {"inference", no_argument, NULL, F_INFERENCE},
    {"ckpt", required_argument, NULL, F_CKPT},
    {"step", required_argument, NULL, F_STEP},
    {"input", required_argument, NULL, F_INPUT},
    {"output", required_argument, NULL, F_OUTPUT},
    {0},
};

/* The flags only --inference takes, given without it: a usage error. */
static int check_inference_flags(bool inference, const cli_freeze_options *f, long step) {
  const char *lone = f->ckpt_path     ? "--ckpt"
                     : step >= 0      ? "--step"
                     : f->input       ? "--input"
                     : f->num_outputs ? "--output"
                                      : NULL;
  if (!inference && lone) {
    fprintf(stderr, "graphrun export: %s goes with --inference\n", lone);
    return GR_EXIT_USAGE;
  }
  if (step >= 0 && !f->ckpt_path) {
    fprintf(stderr, "graphrun export: --step goes with --ckpt\n");
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

int gr_cmd_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  uint64_t seed = 0;
  bool inference = false;
  long step = -1;
  cli_freeze_options fo = {.step = -1};
  cli_opts po;
  cli_opts_start(&po, "export", argc, argv, export_flags, "ho:", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == 'o') {
      out = po.arg;
    } else if (c == F_SEED) {
      if (!cli_opt_u64(&po, &seed)) return GR_EXIT_USAGE;
    } else if (c == F_INFERENCE) {
      inference = true;
    } else if (c == F_CKPT) {
      fo.ckpt_path = po.arg;
    } else if (c == F_STEP) {
      if (!cli_opt_long(&po, 0, LONG_MAX, &step)) return GR_EXIT_USAGE;
    } else if (c == F_INPUT) {
      fo.input = po.arg;
    } else if (c == F_OUTPUT) {
      fo.num_outputs = cli_split_names(po.arg, fo.outputs, fo.num_outputs);
    } else if (c == CLI_OPTS_ARG && !in) {
      in = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun export: one input file, not '%s' too\n", po.arg);
      return GR_EXIT_USAGE;
    } else {
      usage(stderr);
      return GR_EXIT_USAGE;
    }
  }
  if (!in || !out) {
    fprintf(stderr, "graphrun export: %s\n", !in ? "no input file" : "no output file (-o OUT.grb)");
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  int rc = check_inference_flags(inference, &fo, step);
  if (rc != GR_EXIT_OK) return rc;
  fo.step = step;
  gr_graph *g;
  gr_dsl_program *p;
  rc = cli_load_graph("export", in, seed, &g, &p);
  if (rc != GR_EXIT_OK) return rc;
  void *data = NULL;
  size_t size;
  gr_error err;
  if (inference) {
    rc = cli_freeze(in, g, p, &fo, &data, &size);
  } else if (gr_dsl_export(p, &data, &size, &err) != GR_OK) {
    fprintf(stderr, "graphrun export: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
  }
  if (rc == GR_EXIT_OK) rc = write_atomically(out, data, size);
  if (rc == GR_EXIT_OK && inference)
    printf("graphrun export: wrote %s (%zu bytes)\n", out, size);
  else if (rc == GR_EXIT_OK)
    printf("graphrun export: wrote %s (%d nodes, %zu bytes)\n", out, gr_graph_num_nodes(g), size);
  free(data);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
