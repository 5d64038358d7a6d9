/* graphrun check FILE.gr: parse, build and shape-check; print node and op
 * counts; with --stats, what the graph passes (prune, CSE, constant folding, fusion)
 * remove for the file's fetches and targets; with --layers, each binding's
 * op or layer, dtype, shape and parameters, and the parameter counts of
 * Keras' model.summary(). */
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
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

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun check FILE.gr [--layers] [--stats [--fetch A,B] [--target T,U]\n"
          "                              [--no-prune] [--no-cse] [--no-fold] [--no-fuse]\n"
          "                              [--fold-max-bytes N]]\n\n"
          "Parses FILE.gr, builds its graph with shape inference and prints the number of nodes\n"
          "and of nodes per op. Errors are reported as file:line:col with the source line.\n"
          "  --layers            also list every `name = expr` binding of a tensor in the order\n"
          "                      built (inside defs once per call, as def/name), with where its\n"
          "                      top-level statement is, the op or layer that made it, dtype,\n"
          "                      shape (? for unknown dims) and the parameters it made; then the\n"
          "                      total, trainable and non-trainable parameters, as Keras'\n"
          "                      model.summary() (optimizer slots are not parameters)\n"
          "  --stats             also run the graph passes and say what each removed: nodes not\n"
          "                      needed by the fetches and targets (pruned), duplicates merged\n"
          "                      by CSE, nodes folded into constants, nodes fused into the\n"
          "                      node before them (see docs/passes.md)\n"
          "  --fetch A,B         what to keep (default: the file's `fetch` names, else its last\n"
          "                      binding, as `graphrun run`; a file that binds no names keeps\n"
          "                      every node without consumers)\n"
          "  --target T,U        nodes kept for their effect (default: the file's `target` names)\n"
          "  --no-prune, --no-cse, --no-fold, --no-fuse   turn one pass off\n"
          "  --fold-max-bytes N  largest output folded into a constant (default 1048576)\n"
          "Exit codes: 0 ok, 1 runtime failure, 2 error in the file or flags.\n");
}

static void print_op_counts(const char *file, const gr_graph *g, op_count *c) {
  int n = gr_graph_num_nodes(g), kinds = 0;
  for (int i = 0; i < n; i++) {
    const char *op = gr_graph_node(g, i)->op->name;
    int k = 0;
    while (k < kinds && strcmp(c[k].op, op) != 0) k++;
    if (k == kinds) c[kinds++] = (op_count){op, 0};
    c[k].n++;
  }
  qsort(c, (size_t)kinds, sizeof *c, by_count);
  printf("%s: ok, %d node%s, %d op%s\n", file, n, n == 1 ? "" : "s", kinds, kinds == 1 ? "" : "s");
  for (int k = 0; k < kinds; k++) printf("  %-28s %d\n", c[k].op, c[k].n);
}

/* Every node nothing consumes (by data or control edge), as targets. */
static int sinks(const gr_graph *g, gr_output *out) {
  int n = gr_graph_num_nodes(g), k = 0;
  char *used = calloc((size_t)n + 1, 1);
  if (!used) return -1;
  for (int i = 0; i < n; i++) {
    const gr_node *nd = gr_graph_node(g, i);
    for (int j = 0; j < nd->num_inputs; j++) used[nd->inputs[j].node->id] = 1;
    for (int j = 0; j < nd->num_control_inputs; j++) used[nd->control_inputs[j]->id] = 1;
  }
  for (int i = 0; i < n; i++)
    if (!used[i]) out[k++] = (gr_output){gr_graph_node(g, i), 0};
  free(used);
  return k;
}

/* n with thousands separators, as Keras prints counts: 269,322. */
static const char *thousands(int64_t n, char *buf) {
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%lld", (long long)(n < 0 ? -n : n)), k = 0;
  if (n < 0) buf[k++] = '-';
  for (int i = 0; i < len; i++) {
    if (i && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = digits[i];
  }
  buf[k] = '\0';
  return buf;
}

/* The graph's variables by role (gr_variable_roles): elements[role]. */
static bool count_roles(const gr_graph *g, int64_t elements[GR_VAR_STEP + 1]) {
  int n = gr_graph_num_nodes(g);
  unsigned char *roles = malloc((size_t)n + 1);
  if (!roles) return false;
  gr_variable_roles(g, 0, n, roles);
  memset(elements, 0, sizeof(int64_t) * (GR_VAR_STEP + 1));
  for (int i = 0; i < n; i++)
    if (roles[i] != GR_VAR_NONE)
      elements[roles[i]] += gr_shape_num_elements(&gr_graph_node(g, i)->out_shapes[0]);
  free(roles);
  return true;
}

/* The recorded bindings as a table, then the parameters as Keras' model.summary() counts them. */
static bool print_layers(const gr_dsl_program *p, const gr_graph *g) {
  int n = gr_dsl_num_layers(p), wn = 4, wa = 2, wo = 2;
  char at[600], shape[GR_SHAPE_STR_MAX];
  for (int i = 0; i < n; i++) {
    const gr_dsl_layer *l = gr_dsl_layer_at(p, i);
    int a = snprintf(at, sizeof at, "%s:%d", l->call_file, l->call_line);
    int pl = (int)strlen(l->path), ol = (int)strlen(l->layer ? l->layer : l->value.node->op->name);
    wn = pl > wn ? (pl < 48 ? pl : 48) : wn;
    wa = a > wa ? (a < 48 ? a : 48) : wa;
    wo = ol > wo ? ol : wo;
  }
  printf("layers (the file's bindings in the order built):\n");
  printf("  %-*s  %-*s  %-*s  %-5s  %-20s  %s\n", wn, "name", wa, "at", wo, "op", "dtype", "shape",
         "params");
  for (int i = 0; i < n; i++) {
    const gr_dsl_layer *l = gr_dsl_layer_at(p, i);
    const gr_node *nd = l->value.node;
    bool out = l->value.index >= 0 && l->value.index < nd->num_outputs; /* else no_op's */
    snprintf(at, sizeof at, "%s:%d", l->call_file, l->call_line);
    printf("  %-*s  %-*s  %-*s  %-5s  %-20s  %lld\n", wn, l->path, wa, at, wo,
           l->layer ? l->layer : nd->op->name,
           out ? gr_dtype_name(nd->out_dtypes[l->value.index]) : "-",
           out ? gr_shape_str(&nd->out_shapes[l->value.index], shape) : "-", (long long)l->params);
  }
  int64_t e[GR_VAR_STEP + 1];
  if (!count_roles(g, e)) return false;
  char b1[32];
  printf("%d binding%s\n", n, n == 1 ? "" : "s");
  printf("Total params: %s\n", thousands(e[GR_VAR_TRAINABLE] + e[GR_VAR_NON_TRAINABLE], b1));
  printf("Trainable params: %s\n", thousands(e[GR_VAR_TRAINABLE], b1));
  printf("Non-trainable params: %s\n", thousands(e[GR_VAR_NON_TRAINABLE], b1));
  static const char *const what[] = {[GR_VAR_SLOT] = "in optimizer slots",
                                     [GR_VAR_COPY] = "in mirrored copies",
                                     [GR_VAR_STEP] = "in the global step"};
  const char *sep = "Not parameters: ";
  for (int r = GR_VAR_SLOT; r <= GR_VAR_STEP; r++)
    if (e[r]) printf("%s%s %s", sep, thousands(e[r], b1), what[r]), sep = ", ";
  if (sep[0] == ',') printf("\n");
  return true;
}

static void print_names(const char *what, const char *const *names, int n) {
  printf("%s", what);
  for (int i = 0; i < n; i++) printf("%s%s", i ? ", " : " ", names[i]);
  if (!n) printf(" none");
}

/* The graph passes for the fetches and targets, and what each removed. */
static int print_pass_stats(gr_graph *g, gr_dsl_program *p, const char **fetch_names, int nfetch,
                            const char **target_names, int ntarget, const gr_passes_options *o) {
  cli_default_names(p, fetch_names, &nfetch, target_names, &ntarget);
  int n = gr_graph_num_nodes(g);
  gr_output *fetches = gr_alloc_array((size_t)nfetch + 1, sizeof(gr_output));
  gr_output *targets = gr_alloc_array((size_t)(ntarget ? ntarget : n) + 1, sizeof(gr_output));
  int rc = GR_EXIT_FAILURE;
  if (!fetches || !targets) {
    fprintf(stderr, "graphrun check: out of memory\n");
    goto done;
  }
  if ((rc = cli_lookup_names("check", p, fetch_names, nfetch, true, fetches)) != GR_EXIT_OK ||
      (rc = cli_lookup_names("check", p, target_names, ntarget, false, targets)) != GR_EXIT_OK)
    goto done;
  if (nfetch + ntarget == 0) {
    ntarget = sinks(g, targets);
    printf("graph passes, keeping the %d node%s without consumers:\n", ntarget,
           ntarget == 1 ? "" : "s");
  } else {
    print_names("graph passes, fetches:", fetch_names, nfetch);
    print_names("; targets:", target_names, ntarget);
    printf("\n");
  }
  gr_graph *opt = NULL;
  gr_passes_stats st;
  gr_error err;
  if (gr_passes_optimize_graph(g, NULL, 0, fetches, nfetch, targets, ntarget, o, &opt, &st, &err) !=
      GR_OK) {
    fprintf(stderr, "graphrun check: graph passes: %s\n", err.msg);
    rc = GR_EXIT_FAILURE;
    goto done;
  }
  printf("  %-28s %d\n", "nodes in", st.nodes_in);
  printf("  %-28s %d%s\n", "pruned", st.nodes_pruned, o->no_prune ? " (off)" : "");
  printf("  %-28s %d%s\n", "merged by CSE", st.nodes_merged, o->no_cse ? " (off)" : "");
  printf("  %-28s %d%s\n", "folded into constants", st.nodes_folded, o->no_fold ? " (off)" : "");
  printf("  %-28s %d\n", "unused after folding", st.nodes_unused_after_folding);
  printf("  %-28s %d%s\n", "fused", st.nodes_fused, o->no_fuse ? " (off)" : "");
  printf("  %-28s %d\n", "nodes out", st.nodes_out);
  gr_graph_free(opt);
  rc = GR_EXIT_OK;
done:
  free(fetches);
  free(targets);
  return rc;
}

enum {
  F_STATS = 256,
  F_LAYERS,
  F_NO_PRUNE,
  F_NO_CSE,
  F_NO_FOLD,
  F_NO_FUSE,
  F_FETCH,
  F_TARGET,
  F_FOLD_MAX_BYTES
};

static const struct option check_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"stats", no_argument, NULL, F_STATS},
    {"layers", no_argument, NULL, F_LAYERS},
    {"no-prune", no_argument, NULL, F_NO_PRUNE},
    {"no-cse", no_argument, NULL, F_NO_CSE},
    {"no-fold", no_argument, NULL, F_NO_FOLD},
    {"no-fuse", no_argument, NULL, F_NO_FUSE},
    {"fetch", required_argument, NULL, F_FETCH},
    {"target", required_argument, NULL, F_TARGET},
    {"fold-max-bytes", required_argument, NULL, F_FOLD_MAX_BYTES},
    {0},
};

int gr_cmd_check(int argc, char **argv) {
  const char *file = NULL, *fetch_names[CLI_MAX_NAMES], *target_names[CLI_MAX_NAMES];
  int nfetch = 0, ntarget = 0;
  bool stats = false, layers = false;
  gr_passes_options po = gr_passes_options_default();
  cli_opts opts;
  cli_opts_start(&opts, "check", argc, argv, check_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&opts)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage(stdout);
      return GR_EXIT_OK;
    } else if (c == F_STATS) {
      stats = true;
    } else if (c == F_LAYERS) {
      layers = true;
    } else if (c == F_NO_PRUNE) {
      po.no_prune = true;
    } else if (c == F_NO_CSE) {
      po.no_cse = true;
    } else if (c == F_NO_FOLD) {
      po.no_fold = true;
    } else if (c == F_NO_FUSE) {
      po.no_fuse = true;
    } else if (c == F_FETCH) {
      nfetch = cli_split_names(opts.arg, fetch_names, nfetch);
    } else if (c == F_TARGET) {
      ntarget = cli_split_names(opts.arg, target_names, ntarget);
    } else if (c == F_FOLD_MAX_BYTES) {
      uint64_t v;
      if (!cli_parse_u64(opts.arg, &v)) return cli_opt_bad(&opts, "a byte count");
      po.fold_max_bytes = (size_t)v;
    } else if (c == CLI_OPTS_ARG && !file) {
      file = opts.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun check: unexpected argument '%s' (try --help)\n", opts.arg);
      return GR_EXIT_USAGE;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  if (!file) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  if (!stats && (nfetch || ntarget || po.no_prune || po.no_cse || po.no_fold || po.no_fuse ||
                 po.fold_max_bytes != GR_PASSES_FOLD_MAX_BYTES)) {
    fprintf(stderr, "graphrun check: --fetch, --target and the pass options go with --stats\n");
    return GR_EXIT_USAGE;
  }
  gr_graph *g;
  gr_dsl_program *p;
  gr_dsl_options o = {.record_layers = layers};
  int rc = cli_load_graph_with("check", file, &o, &g, &p);
  if (rc != GR_EXIT_OK) return rc;
  op_count *c = calloc((size_t)gr_graph_num_nodes(g) + 1, sizeof *c);
  if (!c) {
    fprintf(stderr, "graphrun check: out of memory\n");
    rc = GR_EXIT_FAILURE;
  } else {
    print_op_counts(file, g, c);
    if (layers && !print_layers(p, g)) {
      fprintf(stderr, "graphrun check: out of memory\n");
      rc = GR_EXIT_FAILURE;
    }
    if (stats && rc == GR_EXIT_OK)
      rc = print_pass_stats(g, p, fetch_names, nfetch, target_names, ntarget, &po);
    free(c);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
