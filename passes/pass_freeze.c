/* Freezing (gr_passes_freeze_graph): the inference graph of some outputs.
 * Marks what the outputs need, stopping at the inputs and at the reads of
 * variables; checks that what is left is a pure function of the inputs;
 * asks the caller for the variables' values; then copies with the passes'
 * copier (passes.c): each read a `const`, each input its new node, each
 * dropout in inference mode an identity, no devices. Single-threaded, as
 * every pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes_internal.h"

typedef struct freezer {
  const gr_graph *g;
  const gr_freeze_input *inputs;
  int num_inputs;
  unsigned char *mark;
  int *parent;
  gr_error *err;
} freezer;

/* "file:line:col: " of n, or "" (buf of cap bytes). */
static const char *where(const gr_node *n, char *buf, size_t cap) {
  if (!n->source_loc) return "";
  snprintf(buf, cap, "%s: ", n->source_loc);
  return buf;
}

/* The output a kept node n is kept for: the root its marking came from. */
static const gr_node *root_of(const freezer *f, const gr_node *n) {
  for (int hops = 0; f->parent[n->id] >= 0 && hops < gr_graph_num_nodes(f->g); hops++)
    n = gr_graph_node(f->g, f->parent[n->id]);
  return n;
}

static gr_output make_stand_in(void *arg, gr_graph *out, const gr_node *n) {
  const freezer *f = arg;
  for (int i = 0; i < f->num_inputs; i++) {
    const gr_freeze_input *in = &f->inputs[i];
    if (in->at.node != n) continue;
    const gr_op_def *op = in->op ? gr_ops_find(in->op) : NULL;
    if (!op) {
      gr_graph_set_errorf(out, GR_ERR_NOT_FOUND, "input '%s': unknown op '%s'", n->name,
                          in->op ? in->op : "(null)");
      return (gr_output){NULL, 0};
    }
    gr_node fake = *n;
    fake.op = op;
    fake.num_inputs = 0;
    fake.attrs = (gr_attr *)in->attrs;
    fake.num_attrs = in->num_attrs;
    fake.requested_device = "";
    fake.assigned_device = NULL;
    fake.colocate_with = NULL;
    fake.colocate_hint = false;
    return gr_graph_copy_node(out, &fake, NULL, NULL, 0);
  }
  gr_graph_set_errorf(out, GR_ERR_INTERNAL, "freeze: '%s' is fed but no input", n->name);
  return (gr_output){NULL, 0};
}

/* The inputs' nodes: each stands in for its node (marked FED), which
 * nothing kept may reach otherwise; each must be read by a kept node. */
static gr_status check_inputs(freezer *f, gr_passes_ctx *c) {
  char at[300];
  for (int i = 0; i < f->num_inputs; i++) {
    const gr_output in = f->inputs[i].at;
    for (int j = 0; j < i; j++)
      if (f->inputs[j].at.node == in.node)
        return gr_error_set(f->err, GR_ERR_INVALID_ARGUMENT,
                            "freeze: inputs %d and %d are outputs of one node '%s'", j, i,
                            in.node->name);
    if (f->mark[in.node->id] != GR_PRUNE_UNUSED) {
      const gr_node *by =
          gr_graph_node(f->g, f->parent[in.node->id] >= 0 ? f->parent[in.node->id] : in.node->id);
      return gr_error_set(f->err, GR_ERR_INVALID_ARGUMENT,
                          "%snode '%s' (op %s) reads '%s' (op %s) otherwise than through the "
                          "input '%s:%d' (another output, or a control edge): the output '%s' "
                          "must depend on the input alone",
                          where(by, at, sizeof at), by->name, by->op->name, in.node->name,
                          in.node->op->name, in.node->name, in.index, root_of(f, by)->name);
    }
    bool read = false;
    for (int v = 0; v < c->n && !read; v++) {
      const gr_node *n = gr_graph_node(f->g, v);
      if (f->mark[v] == GR_PRUNE_UNUSED) continue;
      for (int k = 0; k < n->num_inputs && !read; k++)
        read = n->inputs[k].node == in.node && n->inputs[k].index == in.index;
    }
    if (!read)
      return gr_error_set(f->err, GR_ERR_INVALID_ARGUMENT,
                          "freeze: the outputs do not read the input '%s:%d'", in.node->name,
                          in.index);
    f->mark[in.node->id] = GR_PRUNE_FED;
  }
  return GR_OK;
}

/* A node that passes its input through in inference: a dropout built
 * with training=false (its kernel outputs x itself and a mask of ones). */
static bool passes_through(const gr_node *n) {
  return n->op == gr_ops_find("dropout") && !gr_node_attr_bool(n, "training", true);
}

/* Every kept node but the inputs, the variable reads and the
 * pass-throughs (copied as identities: nothing may read their other
 * outputs) must be pure. */
static gr_status check_pure(freezer *f, const gr_passes_ctx *c) {
  char at[300];
  for (int v = 0; v < c->n; v++) {
    const gr_node *n = gr_graph_node(f->g, v);
    if (f->mark[v] == GR_PRUNE_UNUSED || f->mark[v] == GR_PRUNE_FED || c->folded[v]) continue;
    for (int i = 0; i < n->num_inputs; i++)
      if (c->identity[n->inputs[i].node->id] && n->inputs[i].index != 0)
        return gr_error_set(f->err, GR_ERR_INVALID_ARGUMENT,
                            "%snode '%s' (op %s) reads output %d of '%s' (op %s), which an "
                            "inference graph does not have",
                            where(n, at, sizeof at), n->name, n->op->name, n->inputs[i].index,
                            n->inputs[i].node->name, n->inputs[i].node->op->name);
    if (c->identity[v]) continue;
    const char *out = root_of(f, n)->name;
    if (n->op->flags & GR_OP_PLACEHOLDER)
      return gr_error_set(f->err, GR_ERR_INVALID_ARGUMENT,
                          "%sthe output '%s' needs placeholder '%s' (op %s), which is not its "
                          "input: an inference graph has the inputs it is given",
                          where(n, at, sizeof at), out, n->name, n->op->name);
    if (n->op->flags & (GR_OP_UPDATES | GR_OP_VARIABLE))
      return gr_error_set(f->err, GR_ERR_FAILED_PRECONDITION,
                          "%sthe output '%s' needs node '%s' (op %s), which updates variables: a "
                          "training step, or a batch norm in training mode updating its moving "
                          "statistics; build the output with training=false",
                          where(n, at, sizeof at), out, n->name, n->op->name);
    if (n->op->flags & GR_OP_STATEFUL)
      return gr_error_set(f->err, GR_ERR_FAILED_PRECONDITION,
                          "%sthe output '%s' needs node '%s' (op %s), which is stateful: dropout "
                          "or augmentation in training mode, a random op, a data reader or a "
                          "queue has no place in an inference graph; build the output from its "
                          "input with training=false",
                          where(n, at, sizeof at), out, n->name, n->op->name);
  }
  return GR_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *var_of(const gr_node *n) {
  return gr_node_attr_string(n, "var", n->name);
}

/* Asks for the values of the variables the kept reads read and gives each
 * read its value (c->value, one reference each). *nvars: how many. */
static gr_status read_values(freezer *f, gr_passes_ctx *c, gr_freeze_values_fn fn, void *arg,
                             int *nvars) {
  const char **names = gr_alloc_array((size_t)c->n + 1, sizeof *names);
  if (!names) return gr_error_set_oom(f->err);
  int k = 0;
  for (int v = 0; v < c->n; v++)
    if (c->folded[v] && f->mark[v] != GR_PRUNE_UNUSED) names[k++] = var_of(gr_graph_node(c->g, v));
  qsort(names, (size_t)k, sizeof *names, cmp_str);
  int m = 0;
  for (int i = 0; i < k; i++)
    if (m == 0 || strcmp(names[m - 1], names[i]) != 0) names[m++] = names[i];
  gr_tensor *vals = calloc((size_t)m + 1, sizeof *vals);
  gr_status st = vals ? GR_OK : gr_error_set_oom(f->err);
  if (st == GR_OK && m > 0) st = fn(arg, names, m, vals, f->err);
  for (int v = 0; st == GR_OK && v < c->n; v++) {
    const gr_node *n = gr_graph_node(c->g, v);
    if (!c->folded[v] || f->mark[v] == GR_PRUNE_UNUSED) continue;
    const char *key = var_of(n);
    const char **hit = bsearch(&key, names, (size_t)m, sizeof *names, cmp_str);
    const gr_tensor *t = &vals[hit - names];
    if (!t->buf || t->dtype != n->out_dtypes[0] ||
        !gr_shape_compatible(&t->shape, &n->out_shapes[0])) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      st = gr_error_set(
          f->err, GR_ERR_SHAPE, "freeze: variable '%s' is %s %s in the graph, its value %s %s", key,
          gr_dtype_name(n->out_dtypes[0]), gr_shape_str(&n->out_shapes[0], a),
          t->buf ? gr_dtype_name(t->dtype) : "missing", t->buf ? gr_shape_str(&t->shape, b) : "");
      break;
    }
    gr_tensor_ref(&c->value[v], t);
  }
  for (int i = 0; vals && i < m; i++) gr_tensor_release(&vals[i]);
  free(vals);
  free(names);
  *nvars = m;
  return st;
}

static gr_status freeze(const gr_graph *g, const gr_freeze_input *inputs, int num_inputs,
                        const gr_output *outputs, int num_outputs, gr_freeze_values_fn values,
                        void *arg, gr_graph **out, gr_freeze_stats *stats, gr_error *err) {
  if (!out) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "freeze: out is NULL");
  *out = NULL;
  if (!g || !values)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "freeze: no graph or no values function");
  const gr_error *ge = gr_graph_error(g);
  if (ge) return gr_error_set(err, ge->code, "the graph has a build error: %s", ge->msg);
  if (num_outputs < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "freeze: no outputs to keep");
  int n = gr_graph_num_nodes(g);
  gr_output *feeds = gr_alloc_array((size_t)num_inputs + 1, sizeof *feeds);
  if (!feeds) return gr_error_set_oom(err);
  for (int i = 0; i < num_inputs; i++) feeds[i] = inputs[i].at;
  gr_status st = gr_passes_check_endpoints(g, "input", feeds, num_inputs, true, err);
  if (st == GR_OK) st = gr_passes_check_endpoints(g, "output", outputs, num_outputs, true, err);
  for (int i = 0; st == GR_OK && i < num_outputs; i++)
    for (int j = 0; j < num_inputs; j++)
      if (outputs[i].node == feeds[j].node)
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "freeze: the output '%s' is the input's node itself",
                          outputs[i].node->name);
  size_t m = (size_t)n + 1;
  gr_passes_arrays a = {0};
  int *parent = gr_alloc_array(m, sizeof(int));
  uint8_t *ident = calloc(m, 1);
  bool made = gr_passes_arrays_alloc(&a, n);
  if (st == GR_OK && (!made || !parent || !ident)) st = gr_error_set_oom(err);
  if (st == GR_OK && gr_graph_topo_order(g, a.order) != n) st = gr_error_set_oom(err);
  gr_passes_ctx c = gr_passes_ctx_of(g, n, &a, err);
  c.feeds = feeds, c.num_feeds = num_inputs;
  c.fetches = outputs, c.num_fetches = num_outputs;
  c.no_devices = true;
  c.identity = ident;
  freezer f = {g, inputs, num_inputs, a.mark, parent, err};
  c.stand_in = make_stand_in;
  c.stand_in_arg = &f;
  int nvars = 0;
  if (st == GR_OK) {
    for (int v = 0; v < n; v++) {
      a.rep[v] = v;
      parent[v] = -1;
      a.folded[v] = gr_ops_is_variable_read(gr_graph_node(g, v));
      ident[v] = passes_through(gr_graph_node(g, v));
    }
    gr_prune_request r = {.feeds = feeds,
                          .num_feeds = num_inputs,
                          .fetches = outputs,
                          .num_fetches = num_outputs,
                          .no_inputs = a.folded};
    st = gr_graph_mark_needed(g, &r, a.mark, parent, err);
  }
  if (st == GR_OK) st = check_inputs(&f, &c);
  if (st == GR_OK) st = check_pure(&f, &c);
  if (st == GR_OK) st = read_values(&f, &c, values, arg, &nvars);
  if (st == GR_OK) st = gr_passes_copy(&c, out);
  if (st == GR_OK && stats) *stats = (gr_freeze_stats){n, gr_graph_num_nodes(*out), nvars};
  gr_passes_arrays_free(&a, n);
  free(parent), free(ident), free(feeds);
  return st;
}

gr_status gr_passes_freeze_graph(const gr_graph *g, const gr_freeze_input *inputs, int num_inputs,
                                 const gr_output *outputs, int num_outputs,
                                 gr_freeze_values_fn values, void *arg, gr_graph **out,
                                 gr_freeze_stats *stats, gr_error *err) {
  gr_error local; /* cleared: the copier keeps the first error it sees */
  gr_error_clear(&local);
  gr_status st =
      freeze(g, inputs, num_inputs, outputs, num_outputs, values, arg, out, stats, &local);
  if (st != GR_OK && err) *err = local;
  return st;
}
