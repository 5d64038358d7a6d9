/* graphrun export FILE.gr -o FILE.grb: builds a .gr file and writes its
 * graph serialized (distributed/gr_distributed.h), with the file's names,
 * fetches and targets; every graphrun command reads .grb like .gr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

static void usage(FILE *f) {
  fprintf(f, "usage: graphrun export FILE.gr -o OUT.grb [--seed N]\n\n"
             "Builds FILE.gr and writes its graph as a serialized graph (msgpack, format in\n"
             "docs/distributed.md): every node with its op, attrs (constants included), inputs,\n"
             "devices and source position, plus the file's names, `fetch` and `target`.\n"
             "`graphrun run|check|dot|place OUT.grb` read it like the .gr file, with the same\n"
             "results bit for bit; the graph's seed is the one it was exported with.\n"
             "  -o, --out OUT.grb  where to write (required; replaced atomically)\n"
             "  --seed N           the graph's seed for random ops (default 0)\n"
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

enum { F_SEED = 256 };

static const struct option export_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"out", required_argument, NULL, 'o'},
    {"seed", required_argument, NULL, F_SEED},
    {0},
};

int gr_cmd_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  uint64_t seed = 0;
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
  gr_graph *g;
  gr_dsl_program *p;
  int rc = cli_load_graph("export", in, seed, &g, &p);
  if (rc != GR_EXIT_OK) return rc;
  void *data;
  size_t size;
  gr_error err;
  if (gr_dsl_export(p, &data, &size, &err) != GR_OK) {
    fprintf(stderr, "graphrun export: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
  } else {
    rc = write_atomically(out, data, size);
    if (rc == GR_EXIT_OK)
      printf("graphrun export: wrote %s (%d nodes, %zu bytes)\n", out, gr_graph_num_nodes(g), size);
    free(data);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
