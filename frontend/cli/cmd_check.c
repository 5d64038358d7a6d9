/* graphrun check FILE.gr: parse, build and shape-check; print node and op counts. */
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

typedef struct op_count {
  const char *op;
  int n;
} op_count;

static int by_count(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  return x->n != y->n ? y->n - x->n : strcmp(x->op, y->op);
}

int gr_cmd_check(int argc, char **argv) {
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: graphrun check FILE.gr\n\nParses FILE.gr, builds its graph with shape "
             "inference and prints the number of nodes and of nodes per op.\nErrors are "
             "reported as file:line:col with the source line. Exit codes: 0 ok, 2 error in "
             "the file.\n");
      return GR_EXIT_OK;
    }
    if ((argv[i][0] == '-' && argv[i][1]) || file) {
      fprintf(stderr, "graphrun check: unexpected argument '%s' (try --help)\n", argv[i]);
      return GR_EXIT_USAGE;
    }
    file = argv[i];
  }
  if (!file) {
    fprintf(stderr, "usage: graphrun check FILE.gr\n");
    return GR_EXIT_USAGE;
  }
  gr_graph *g;
  gr_dsl_program *p;
  int rc = cli_load_graph("check", file, 0, &g, &p);
  if (rc != GR_EXIT_OK) return rc;
  int n = gr_graph_num_nodes(g), kinds = 0;
  op_count *c = calloc((size_t)n + 1, sizeof *c);
  if (!c) {
    fprintf(stderr, "graphrun check: out of memory\n");
    rc = GR_EXIT_FAILURE;
  } else {
    for (int i = 0; i < n; i++) {
      const char *op = gr_graph_node(g, i)->op->name;
      int k = 0;
      while (k < kinds && strcmp(c[k].op, op) != 0) k++;
      if (k == kinds) c[kinds++] = (op_count){op, 0};
      c[k].n++;
    }
    qsort(c, (size_t)kinds, sizeof *c, by_count);
    printf("%s: ok, %d node%s, %d op%s\n", file, n, n == 1 ? "" : "s", kinds,
           kinds == 1 ? "" : "s");
    for (int k = 0; k < kinds; k++) printf("  %-28s %d\n", c[k].op, c[k].n);
    free(c);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
