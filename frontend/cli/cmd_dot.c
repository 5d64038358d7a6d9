/* graphrun dot FILE.gr: the graph in Graphviz DOT, nodes grouped in clusters
 * by name scope and coloured by device (like TensorBoard's graph view). */
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

static const char *const palette[] = {"#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6",
                                      "#ffff99", "#1f78b4", "#33a02c", "#e31a1c", "#ff7f00"};
#define NPAL (int)(sizeof palette / sizeof palette[0])

/* Orders names so that a scope's nodes are contiguous: '/' sorts first. */
static int scope_cmp(const void *a, const void *b) {
  const char *x = (*(gr_node *const *)a)->name, *y = (*(gr_node *const *)b)->name;
  const char *sx = strrchr(x, '/'), *sy = strrchr(y, '/');
  size_t lx = sx ? (size_t)(sx - x) : 0, ly = sy ? (size_t)(sy - y) : 0;
  for (size_t i = 0;; i++) {
    int cx = i < lx ? (x[i] == '/' ? 1 : (unsigned char)x[i]) : 0;
    int cy = i < ly ? (y[i] == '/' ? 1 : (unsigned char)y[i]) : 0;
    if (cx != cy) return cx - cy;
    if (!cx) break;
  }
  return (*(gr_node *const *)a)->id - (*(gr_node *const *)b)->id;
}

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s, f);
  }
}

static const char *device_of(const gr_node *n) {
  return n->assigned_device ? n->assigned_device : n->requested_device ? n->requested_device : "";
}

/* --placed: run the placer on the cluster file so colours show assigned devices. */
static int place_for_dot(gr_graph *g, const char *cluster_path) {
  gr_error err;
  gr_cluster *c = NULL;
  if (gr_cluster_load_json(cluster_path, &c, &err) != GR_OK) {
    fprintf(stderr, "graphrun dot: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  gr_placer_options o = gr_placer_options_default();
  gr_placement *pl = NULL;
  gr_status s = gr_placer_place(g, c, &o, &pl, &err);
  gr_placement_free(pl);
  gr_cluster_free(c);
  if (s != GR_OK) {
    fprintf(stderr, "graphrun dot: placing: %s\n", err.msg);
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

enum { F_NO_SHAPES = 256, F_PLACED, F_CLUSTER };

static const struct option dot_flags[] = {
    {"help", no_argument, NULL, 'h'},
    {"no-shapes", no_argument, NULL, F_NO_SHAPES},
    {"placed", no_argument, NULL, F_PLACED},
    {"cluster", required_argument, NULL, F_CLUSTER},
    {0},
};

typedef struct dot_options {
  const char *file, *cluster;
  bool shapes, placed;
} dot_options;

static void usage(void) {
  printf("usage: graphrun dot FILE.gr [--no-shapes] [--placed --cluster C.json]\n\nPrints "
         "the graph of FILE.gr in Graphviz DOT: one box per node (name and op), clusters "
         "per name\nscope, fill colour per device, data edges labelled with their shape, "
         "control edges dashed.\n  --no-shapes       no shape labels on edges\n  --placed  "
         "        colour by the device the placer assigns on --cluster C.json\n\nExample: "
         "graphrun dot model.gr | dot -Tsvg > model.svg\n");
}

/* Returned by parse_options when the command goes on. */
#define DOT_GO (-1)

/* DOT_GO, or the exit code after --help or an error (printed). */
static int parse_options(int argc, char **argv, dot_options *o) {
  *o = (dot_options){.shapes = true};
  cli_opts po;
  cli_opts_start(&po, "dot", argc, argv, dot_flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == 'h') {
      usage();
      return GR_EXIT_OK;
    } else if (c == F_NO_SHAPES) {
      o->shapes = false;
    } else if (c == F_PLACED) {
      o->placed = true;
    } else if (c == F_CLUSTER) {
      o->cluster = po.arg;
    } else if (c == CLI_OPTS_ARG && !o->file) {
      o->file = po.arg;
    } else if (c == CLI_OPTS_ARG) {
      fprintf(stderr, "graphrun dot: unexpected argument '%s' (try --help)\n", po.arg);
      return GR_EXIT_USAGE;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  if (!o->file) {
    fprintf(stderr, "usage: graphrun dot FILE.gr\n");
    return GR_EXIT_USAGE;
  }
  if (o->placed != (o->cluster != NULL)) {
    fprintf(stderr, "graphrun dot: --placed and --cluster C.json go together (try --help)\n");
    return GR_EXIT_USAGE;
  }
  return DOT_GO;
}

/* The scope clusters open while printing nodes in scope order: open is the
 * scope prefix, depth how many components it has. */
typedef struct scopes {
  char open[1024];
  int depth, next_id;
} scopes;

/* Closes and opens clusters until the open scope is name's first sl bytes. */
static void enter_scope(FILE *f, scopes *sc, const char *name, size_t sl) {
  /* close clusters until `open` is a component prefix of this scope */
  while (sc->depth > 0) {
    size_t ol = strlen(sc->open);
    if (ol <= sl && strncmp(sc->open, name, ol) == 0 && (ol == sl || name[ol] == '/')) break;
    char *last = strrchr(sc->open, '/');
    if (last)
      *last = '\0';
    else
      sc->open[0] = '\0';
    sc->depth--;
    fprintf(f, "%*s}\n", 2 * sc->depth + 2, "");
  }
  /* open the remaining components */
  while (strlen(sc->open) < sl) {
    size_t ol = strlen(sc->open);
    size_t start = ol ? ol + 1 : 0;
    const char *end = memchr(name + start, '/', sl - start);
    size_t el = end ? (size_t)(end - name) : sl;
    fprintf(f,
            "%*ssubgraph cluster_%d {\n%*slabel=\"%.*s\"; style=\"rounded\"; color=\"#888888\";\n",
            2 * sc->depth + 2, "", sc->next_id++, 2 * sc->depth + 4, "", (int)(el - start),
            name + start);
    memcpy(sc->open, name, el);
    sc->open[el] = '\0';
    sc->depth++;
  }
}

/* The palette index of dev (a new one for a device not seen yet, the last
 * when the palette is used up), or -1 for no device. */
static int device_colour(const char *dev, const char **devices, int *ndev) {
  if (!*dev) return -1;
  int color = -1;
  for (int k = 0; k < *ndev; k++)
    if (strcmp(devices[k], dev) == 0) color = k;
  if (color < 0 && *ndev < NPAL) devices[color = (*ndev)++] = dev;
  return color < 0 ? NPAL - 1 : color;
}

/* Every node, in clusters by scope, filled with its device's colour. */
static void print_nodes(FILE *f, gr_node **nodes, int n, const char **devices, int *ndev) {
  scopes sc = {"", 0, 0};
  for (int i = 0; i < n; i++) {
    const gr_node *nd = nodes[i];
    const char *slash = strrchr(nd->name, '/');
    size_t sl = slash ? (size_t)(slash - nd->name) : 0;
    if (sl >= sizeof sc.open) sl = 0;
    enter_scope(f, &sc, nd->name, sl);
    int color = device_colour(device_of(nd), devices, ndev);
    fprintf(f, "%*s\"%s\" [label=\"%s\\n%s\"%s%s%s];\n", 2 * sc.depth + 2, "", nd->name,
            slash ? slash + 1 : nd->name, nd->op->name, color >= 0 ? ", fillcolor=\"" : "",
            color >= 0 ? palette[color] : "", color >= 0 ? "\"" : "");
  }
  while (sc.depth-- > 0) fprintf(f, "%*s}\n", 2 * sc.depth + 2, "");
}

/* Data edges (labelled with dtype and shape unless !shapes), control edges dashed. */
static void print_edges(FILE *f, const gr_graph *g, bool shapes) {
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    const gr_node *nd = gr_graph_node(g, i);
    for (int k = 0; k < nd->num_inputs; k++) {
      gr_output in = nd->inputs[k];
      fprintf(f, "  \"%s\" -> \"%s\"", in.node->name, nd->name);
      if (shapes && in.index >= 0) {
        char sh[GR_SHAPE_STR_MAX];
        fprintf(f, " [label=\"%s%s\"]", gr_dtype_name(in.node->out_dtypes[in.index]),
                gr_shape_str(&in.node->out_shapes[in.index], sh));
      }
      fprintf(f, ";\n");
    }
    for (int k = 0; k < nd->num_control_inputs; k++)
      fprintf(f, "  \"%s\" -> \"%s\" [style=dashed];\n", nd->control_inputs[k]->name, nd->name);
  }
}

static void print_legend(FILE *f, const char **devices, int ndev) {
  if (!ndev) return;
  fprintf(f, "  subgraph cluster_legend {\n    label=\"devices\"; style=\"rounded\";\n");
  for (int k = 0; k < ndev; k++) {
    fprintf(f, "    \"legend_%d\" [label=\"", k);
    put_escaped(f, devices[k]);
    fprintf(f, "\", fillcolor=\"%s\"];\n", palette[k]);
  }
  fprintf(f, "  }\n");
}

int cli_write_dot(FILE *f, gr_graph *g, bool shapes) {
  int n = gr_graph_num_nodes(g);
  gr_node **nodes = gr_alloc_array((size_t)(n + 1), sizeof(gr_node *));
  if (!nodes) {
    fprintf(stderr, "graphrun dot: out of memory\n");
    return GR_EXIT_FAILURE;
  }
  for (int i = 0; i < n; i++) nodes[i] = gr_graph_node(g, i);
  qsort(nodes, (size_t)n, sizeof *nodes, scope_cmp);
  fprintf(f, "digraph graphrun {\n  rankdir=BT;\n  node [shape=box, style=\"rounded,filled\", "
             "fontname=\"Helvetica\", fontsize=10, fillcolor=\"#eeeeee\"];\n  edge [fontsize=8, "
             "fontname=\"Helvetica\"];\n");
  const char *devices[NPAL];
  int ndev = 0;
  print_nodes(f, nodes, n, devices, &ndev);
  print_edges(f, g, shapes);
  print_legend(f, devices, ndev);
  fprintf(f, "}\n");
  free(nodes);
  return GR_EXIT_OK;
}

int gr_cmd_dot(int argc, char **argv) {
  dot_options o;
  int rc = parse_options(argc, argv, &o);
  if (rc != DOT_GO) return rc;
  gr_graph *g;
  gr_dsl_program *p;
  if ((rc = cli_load_graph("dot", o.file, 0, &g, &p)) != GR_EXIT_OK) return rc;
  if (!o.placed || (rc = place_for_dot(g, o.cluster)) == GR_EXIT_OK)
    rc = cli_write_dot(stdout, g, o.shapes);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return rc;
}
