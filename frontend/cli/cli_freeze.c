/* graphrun export --inference: finds the input of the outputs (the one
 * placeholder or image_folder they read, or --input), makes it an
 * image_input (from an image_folder: its size, color mode and class names)
 * or a placeholder with a batch of any size, freezes the outputs' graph
 * with the variables' values from the checkpoint, and serializes it with
 * the input's and outputs' names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_freeze.h"
#include "commands.h"

#define CMD "export"

static bool is_image_folder(const gr_node *n) {
  return strcmp(n->op->name, "image_folder") == 0;
}

/* The one placeholder or image_folder node the outputs read (through
 * anything but a variable's initialiser); an exit code. */
static int find_input(const gr_graph *g, const gr_output *outs, int n, gr_output *in) {
  int total = gr_graph_num_nodes(g);
  unsigned char *mark = malloc((size_t)total + 1), *reads = calloc((size_t)total + 1, 1);
  gr_error err;
  int rc = mark && reads ? GR_EXIT_OK : GR_EXIT_FAILURE;
  for (int v = 0; rc == GR_EXIT_OK && v < total; v++)
    reads[v] = gr_ops_is_variable_read(gr_graph_node(g, v));
  gr_prune_request r = {.fetches = outs, .num_fetches = n, .no_inputs = reads};
  if (rc == GR_EXIT_OK && gr_graph_mark_needed(g, &r, mark, NULL, &err) != GR_OK)
    rc = GR_EXIT_FAILURE;
  char list[400] = "";
  int found = 0;
  for (int v = 0; rc == GR_EXIT_OK && v < total; v++) {
    const gr_node *nd = gr_graph_node(g, v);
    if (mark[v] == GR_PRUNE_UNUSED || !((nd->op->flags & GR_OP_PLACEHOLDER) || is_image_folder(nd)))
      continue;
    if (found++ == 0) *in = (gr_output){(gr_node *)nd, 0};
    size_t len = strlen(list);
    if (len + strlen(nd->name) + 16 < sizeof list)
      snprintf(list + len, sizeof list - len, "%s'%s' (%s)", len ? ", " : "", nd->name,
               nd->op->name);
  }
  free(mark);
  free(reads);
  if (rc != GR_EXIT_OK) {
    fprintf(stderr, "graphrun " CMD ": out of memory\n");
  } else if (found != 1) {
    fprintf(stderr,
            "graphrun " CMD ": the outputs read %s%s: name the model's input with --input NAME\n",
            found ? "several placeholders and image folders: " : "no placeholder or image folder",
            list);
    rc = GR_EXIT_USAGE;
  }
  return rc;
}

/* The new input node: an image_input for an image_folder's images, else a
 * placeholder of the endpoint's dtype and shape; the batch dimension
 * becomes unknown, so any number of rows may be fed. */
typedef struct input_spec {
  gr_freeze_input in;
  gr_attr attrs[4];
  gr_shape shape;
} input_spec;

static int make_input(gr_output at, input_spec *s) {
  const gr_node *n = at.node;
  gr_dtype dt = n->out_dtypes[at.index];
  s->shape = n->out_shapes[at.index];
  if (s->shape.rank >= 1) s->shape.dims[0] = -1;
  s->in = (gr_freeze_input){.at = at, .op = "placeholder", .attrs = s->attrs, .num_attrs = 2};
  s->attrs[0] = gr_attr_dtype("dtype", dt);
  s->attrs[1] = gr_attr_shape("shape", s->shape);
  if (!is_image_folder(n)) return GR_EXIT_OK;
  if (at.index != 0) {
    fprintf(stderr,
            "graphrun " CMD ": input '%s:%d' is not the images of image_folder '%s' (its "
            "output 0)\n",
            n->name, at.index, n->name);
    return GR_EXIT_USAGE;
  }
  s->in.op = "image_input";
  s->in.num_attrs = 4;
  s->attrs[2] = gr_attr_string("color_mode", gr_node_attr_string(n, "color_mode", ""));
  s->attrs[3] = gr_attr_string("class_names", gr_node_attr_string(n, "class_names", ""));
  return GR_EXIT_OK;
}

typedef struct values_ctx {
  const char *path;
  gr_ckpt *ck; /* opened when the outputs read variables */
  int64_t step, actual;
  const gr_graph *g;
} values_ctx;

/* The variables' values from the checkpoint (gr_freeze_values_fn). */
static gr_status read_values(void *arg, const char *const *names, int n, gr_tensor *values,
                             gr_error *err) {
  values_ctx *c = arg;
  if (!c->path)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "the outputs read %d variable%s (%s%s): give --ckpt PATH, the "
                        "checkpoint their values come from",
                        n, n == 1 ? "" : "s", names[0], n > 1 ? ", ..." : "");
  gr_ckpt_options co = {.read_only = true};
  GR_TRY(gr_ckpt_open(c->path, &co, &c->ck, err));
  return gr_ckpt_read_vars(c->ck, c->step, c->g, names, n, values, &c->actual, err);
}

/* The names the .grb file carries: the input, then the outputs (also its
 * fetches), each bound to its node in the frozen graph. */
static gr_status encode(gr_graph *frozen, const char *in_name, gr_output in,
                        const char *const *outs, const gr_output *out_eps, int nout, void **data,
                        size_t *size, gr_error *err) {
  const char *names[CLI_MAX_NAMES + 1];
  gr_output eps[CLI_MAX_NAMES + 1];
  names[0] = in_name;
  eps[0] = (gr_output){gr_graph_find_node(frozen, in.node->name), 0};
  for (int i = 0; i < nout; i++) {
    names[i + 1] = outs[i];
    eps[i + 1] = (gr_output){gr_graph_find_node(frozen, out_eps[i].node->name), out_eps[i].index};
  }
  for (int i = 0; i <= nout; i++)
    if (!eps[i].node)
      return gr_error_set(err, GR_ERR_INTERNAL, "freeze: '%s' is not in the frozen graph",
                          names[i]);
  gr_graph_names nm = {.num_names = nout + 1,
                       .names = names,
                       .outputs = eps,
                       .num_fetches = nout,
                       .fetches = (const char **)outs};
  return gr_wire_encode_graph(frozen, &nm, data, size, err);
}

static void print_input(const char *name, const input_spec *s) {
  char b[GR_SHAPE_STR_MAX];
  printf("graphrun " CMD ": input '%s': %s %s %s", name, s->in.op,
         gr_dtype_name(s->attrs[0].value.dtype), gr_shape_str(&s->shape, b));
  if (s->in.num_attrs == 4) {
    printf(" (%s", s->attrs[2].value.s);
    const char *c = s->attrs[3].value.s;
    if (c[0]) printf("; classes: ");
    for (; *c; c++)
      if (*c != '\n')
        putchar(*c);
      else if (c[1])
        printf(", ");
    printf(")");
  }
  printf("\n");
}

int cli_freeze(const char *file, gr_graph *g, const gr_dsl_program *p, const cli_freeze_options *o,
               void **data, size_t *size) {
  gr_output outs[CLI_MAX_NAMES], in = {NULL, 0};
  if (o->num_outputs < 1) {
    fprintf(stderr, "graphrun " CMD ": --inference needs --output NAME: the model's output, "
                    "built with training=false\n");
    return GR_EXIT_USAGE;
  }
  int rc = cli_lookup_names(CMD, p, o->outputs, o->num_outputs, true, outs);
  if (rc == GR_EXIT_OK && o->input) rc = cli_lookup_names(CMD, p, &o->input, 1, true, &in);
  if (rc == GR_EXIT_OK && !o->input) rc = find_input(g, outs, o->num_outputs, &in);
  input_spec spec;
  if (rc == GR_EXIT_OK) rc = make_input(in, &spec);
  if (rc != GR_EXIT_OK) return rc;
  gr_error err;
  values_ctx vc = {o->ckpt_path, NULL, o->step, -1, g};
  gr_graph *frozen = NULL;
  gr_freeze_stats stats;
  gr_status st = gr_passes_freeze_graph(g, &spec.in, 1, outs, o->num_outputs, read_values, &vc,
                                        &frozen, &stats, &err);
  const char *in_name = o->input ? o->input : in.node->name;
  if (st == GR_OK)
    st = encode(frozen, in_name, in, o->outputs, outs, o->num_outputs, data, size, &err);
  if (st != GR_OK) {
    fprintf(stderr, "graphrun " CMD ": %s: %s\n", file, err.msg);
    rc = st == GR_ERR_RESOURCE_EXHAUSTED || st == GR_ERR_INTERNAL || st == GR_ERR_DATA_LOSS
             ? GR_EXIT_FAILURE
             : GR_EXIT_USAGE;
  } else {
    printf("graphrun " CMD ": inference graph of %s%s: %d of %d nodes, %d variable%s frozen",
           o->outputs[0], o->num_outputs > 1 ? " and more" : "", stats.nodes_out, stats.nodes_in,
           stats.variables, stats.variables == 1 ? "" : "s");
    if (vc.ck) printf(" from %s (step %lld)", o->ckpt_path, (long long)vc.actual);
    printf("\n");
    print_input(in_name, &spec);
  }
  gr_graph_free(frozen);
  gr_ckpt_close(vc.ck);
  return rc;
}
