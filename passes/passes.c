/* Graph passes before placement: the driver. Marks what the request needs
 * (pass_prune.c), merges common subexpressions (pass_cse.c), folds constants
 * (pass_fold.c), marks again, then copies what is left into a new graph with
 * gr_graph_copy_node, in topological order, patching loop back edges last. */
#include <stdlib.h>
#include <string.h>

#include "passes_internal.h"

gr_passes_options gr_passes_options_default(void) {
  return (gr_passes_options){.fold_max_bytes = GR_PASSES_FOLD_MAX_BYTES};
}

bool gr_passes_is_fed(const gr_passes_ctx *c, gr_output o) {
  if (!c->fed[o.node->id]) return false;
  for (int i = 0; i < c->num_feeds; i++)
    if (c->feeds[i].node == o.node && c->feeds[i].index == o.index) return true;
  return false;
}

bool gr_passes_op_is_opaque(const gr_op_def *op) {
  return (op->flags & (GR_OP_STATEFUL | GR_OP_ASYNC | GR_OP_CONTROL_FLOW | GR_OP_TRANSFER |
                       GR_OP_PLACEHOLDER | GR_OP_VARIABLE | GR_OP_STEP_STACKS)) ||
         op->cf_kind != GR_CF_NONE;
}

gr_status gr_passes_check_endpoints(const gr_graph *g, const char *what, const gr_output *eps,
                                    int n, bool need_output, gr_error *err) {
  if (n < 0 || (n && !eps))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "graph passes: bad %s array", what);
  for (int i = 0; i < n; i++) {
    const gr_node *nd = eps[i].node;
    if (!nd || nd->graph != g)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "graph passes: %s %d%s%s%s", what, i,
                          nd ? " ('" : " is a null output", nd ? nd->name : "",
                          nd ? "') is not a node of the graph" : "");
    if (need_output && (eps[i].index < 0 || eps[i].index >= nd->num_outputs))
      return gr_error_set(err, GR_ERR_OUT_OF_RANGE,
                          "graph passes: %s %d refers to output %d of '%s', which has %d output%s",
                          what, i, eps[i].index, nd->name, nd->num_outputs,
                          nd->num_outputs == 1 ? "" : "s");
  }
  return GR_OK;
}

static int count_kept(const gr_passes_ctx *c) {
  int k = 0;
  for (int v = 0; v < c->n; v++) k += c->mark[v] != GR_PRUNE_UNUSED && c->rep[v] == v;
  return k;
}

/* ---- the copy -------------------------------------------------------------------- */

typedef struct patch {
  gr_node *node;
  int input;
  const gr_node *src; /* producer in g (a rep) */
  int index;
} patch;

typedef struct copier {
  gr_passes_ctx *c;
  gr_graph *out;
  gr_node **copy; /* per node of g: its copy (NULL: not copied yet) */
  gr_output *in;  /* scratch inputs */
  gr_node **ctrl; /* scratch control inputs */
  patch *patches;
  int num_patches;
  const gr_op_def *const_op, *placeholder_op, *identity_op;
} copier;

/* n as copied: without devices and colocation with c->no_devices. */
static gr_node source_of(const copier *k, const gr_node *n) {
  gr_node fake = *n;
  if (k->c->no_devices) {
    fake.requested_device = "";
    fake.assigned_device = NULL;
    fake.colocate_with = NULL;
    fake.colocate_hint = false;
  }
  return fake;
}

/* The stand-in of fed node n: c->stand_in's, else a placeholder of n's
 * name, dtype and shape (n's only output is fed). */
static gr_output copy_stand_in(copier *k, const gr_node *n) {
  if (k->c->stand_in) return k->c->stand_in(k->c->stand_in_arg, k->out, n);
  gr_node fake = source_of(k, n);
  gr_attr a[2] = {gr_attr_dtype("dtype", n->out_dtypes[0]),
                  gr_attr_shape("shape", n->out_shapes[0])};
  fake.op = k->placeholder_op;
  fake.num_inputs = 0;
  fake.attrs = a;
  fake.num_attrs = 2;
  fake.colocate_with = NULL;
  return gr_graph_copy_node(k->out, &fake, NULL, NULL, 0);
}

/* A const of n's name holding its folded value. */
static gr_output copy_folded(copier *k, const gr_node *n) {
  gr_node fake = source_of(k, n);
  gr_attr a = gr_attr_tensor("value", k->c->value[n->id]);
  GR_ASSERT(a.value.tensor.buf); /* pass_fold keeps the values of nodes still needed */
  fake.op = k->const_op;
  fake.num_inputs = 0;
  fake.attrs = &a;
  fake.num_attrs = 1;
  return gr_graph_copy_node(k->out, &fake, NULL, NULL, 0);
}

static gr_output copy_node(copier *k, const gr_node *n) {
  gr_passes_ctx *c = k->c;
  int first_done = -1;
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_node *p = gr_graph_node(c->g, c->rep[n->inputs[i].node->id]);
    /* a stand-in has one output */
    k->in[i] = (gr_output){k->copy[p->id], c->mark[p->id] == GR_PRUNE_FED ? 0 : n->inputs[i].index};
    if (k->copy[p->id] && first_done < 0) first_done = i;
  }
  /* a loop's back edge (merge <- next_iteration): a stand-in input of the same
   * node for now, the real one once the producer is copied */
  for (int i = 0; i < n->num_inputs; i++) {
    if (k->in[i].node) continue;
    if (first_done < 0) {
      gr_error_set(c->err, GR_ERR_INTERNAL,
                   "graph passes: node '%s': no input is copied before it (a cycle?)", n->name);
      return (gr_output){NULL, 0};
    }
    k->patches[k->num_patches++] =
        (patch){NULL, i, gr_graph_node(c->g, c->rep[n->inputs[i].node->id]), n->inputs[i].index};
    k->in[i] = k->in[first_done];
  }
  int nc = 0;
  for (int i = 0; i < n->num_control_inputs; i++) {
    gr_node *d = k->copy[c->rep[n->control_inputs[i]->id]];
    if (!d) {
      gr_error_set(c->err, GR_ERR_INTERNAL,
                   "graph passes: control input '%s' of '%s' is not copied before it",
                   n->control_inputs[i]->name, n->name);
      return (gr_output){NULL, 0};
    }
    bool dup = false;
    for (int j = 0; j < nc && !dup; j++) dup = k->ctrl[j] == d;
    if (!dup) k->ctrl[nc++] = d;
  }
  gr_node src = source_of(k, n);
  if (c->identity && c->identity[n->id]) { /* a pass-through: consumers read output 0 */
    src.op = k->identity_op;
    src.num_inputs = 1;
    src.attrs = NULL;
    src.num_attrs = 0;
  }
  gr_output o = gr_graph_copy_node(k->out, &src, k->in, k->ctrl, nc);
  for (int p = k->num_patches - 1; p >= 0 && !k->patches[p].node; p--) k->patches[p].node = o.node;
  return o;
}

gr_status gr_passes_copy(gr_passes_ctx *c, gr_graph **result) {
  int max_in = 1, max_ctrl = 1, back = 0;
  for (int v = 0; v < c->n; v++) {
    const gr_node *n = gr_graph_node(c->g, v);
    if (n->num_inputs > max_in) max_in = n->num_inputs;
    if (n->num_control_inputs > max_ctrl) max_ctrl = n->num_control_inputs;
    back += n->num_inputs;
  }
  copier k = {c,
              gr_graph_new(),
              calloc((size_t)c->n + 1, sizeof(gr_node *)),
              gr_alloc_array((size_t)max_in, sizeof(gr_output)),
              gr_alloc_array((size_t)max_ctrl, sizeof(gr_node *)),
              gr_alloc_array((size_t)back + 1, sizeof(patch)),
              0,
              &gr_op_const,
              gr_ops_find("placeholder"),
              gr_ops_find("identity")};
  gr_status st = GR_OK;
  if (!k.out || !k.copy || !k.in || !k.ctrl || !k.patches) {
    st = gr_error_set_oom(c->err);
    goto done;
  }
  gr_graph_set_seed(k.out, gr_graph_seed(c->g));
  for (int i = 0; i < c->n && st == GR_OK; i++) {
    const gr_node *n = gr_graph_node(c->g, c->order[i]);
    if (c->mark[n->id] == GR_PRUNE_UNUSED || c->rep[n->id] != n->id) continue;
    gr_output o = c->mark[n->id] == GR_PRUNE_FED ? copy_stand_in(&k, n)
                  : c->folded[n->id]             ? copy_folded(&k, n)
                                                 : copy_node(&k, n);
    if (!o.node) {
      const gr_error *ge = gr_graph_error(k.out);
      if (c->err->code == GR_OK)
        gr_error_set(c->err, ge ? ge->code : GR_ERR_INTERNAL, "graph passes: copying '%s': %s",
                     n->name, ge ? ge->msg : "failed");
      st = c->err->code;
    }
    k.copy[n->id] = o.node;
  }
  for (int p = 0; p < k.num_patches && st == GR_OK; p++) {
    const patch *pt = &k.patches[p];
    st =
        gr_graph_set_input(k.out, pt->node, pt->input, (gr_output){k.copy[pt->src->id], pt->index});
  }
  const gr_error *ge = gr_graph_error(k.out);
  if (st == GR_OK && ge)
    st = gr_error_set(c->err, ge->code, "graph passes: copying the graph: %s", ge->msg);
done:
  free(k.copy);
  free(k.in);
  free(k.ctrl);
  free(k.patches);
  if (st != GR_OK) {
    gr_graph_free(k.out);
    k.out = NULL;
  }
  *result = k.out;
  return st;
}

/* ---- the driver -------------------------------------------------------------------- */

bool gr_passes_arrays_alloc(gr_passes_arrays *a, int n) {
  size_t m = (size_t)n + 1;
  a->order = gr_alloc_array(m, sizeof(int));
  a->rep = gr_alloc_array(m, sizeof(int));
  a->fed = calloc(m, 1);
  a->protect = calloc(m, 1);
  a->mark = calloc(m, 1);
  a->folded = calloc(m, 1);
  a->value = calloc(m, sizeof(gr_tensor));
  return a->order && a->rep && a->fed && a->protect && a->mark && a->folded && a->value;
}

gr_passes_ctx gr_passes_ctx_of(const gr_graph *g, int n, gr_passes_arrays *a, gr_error *err) {
  return (gr_passes_ctx){.g = g,
                         .n = n,
                         .order = a->order,
                         .fed = a->fed,
                         .protect = a->protect,
                         .mark = a->mark,
                         .rep = a->rep,
                         .folded = a->folded,
                         .value = a->value,
                         .err = err};
}

void gr_passes_arrays_free(gr_passes_arrays *a, int n) {
  if (a->value)
    for (int i = 0; i < n; i++) gr_tensor_release(&a->value[i]);
  free(a->order);
  free(a->rep);
  free(a->fed);
  free(a->protect);
  free(a->mark);
  free(a->folded);
  free(a->value);
}

/* Fetched, target and fed nodes and colocation targets keep their names
 * (CSE never replaces them). */
static void find_protected(gr_passes_ctx *c) {
  for (int i = 0; i < c->num_feeds; i++) c->fed[c->feeds[i].node->id] = 1;
  for (int i = 0; i < c->num_fetches; i++) c->protect[c->fetches[i].node->id] = 1;
  for (int i = 0; i < c->num_targets; i++) c->protect[c->targets[i].node->id] = 1;
  for (int v = 0; v < c->n; v++) {
    const gr_node *n = gr_graph_node(c->g, v);
    const gr_node *t = n->colocate_with ? gr_graph_find_node(c->g, n->colocate_with) : NULL;
    if (t) c->protect[t->id] = 1;
    c->protect[v] |= c->fed[v];
  }
}

static gr_status run_passes(gr_passes_ctx *c, const gr_passes_options *o, gr_graph **out,
                            gr_passes_stats *stats) {
  for (int v = 0; v < c->n; v++) c->rep[v] = v;
  if (gr_graph_topo_order(c->g, c->order) != c->n) return gr_error_set_oom(c->err);
  find_protected(c);
  GR_TRY(gr_passes_mark(c));
  stats->nodes_pruned = c->n - count_kept(c);
  if (!o->no_cse) GR_TRY(gr_passes_cse(c, &stats->nodes_merged));
  int before_fold = count_kept(c);
  if (!o->no_fold) GR_TRY(gr_passes_fold(c, o->fold_max_bytes, &stats->nodes_folded));
  GR_TRY(gr_passes_mark(c)); /* folded nodes no longer need their inputs */
  stats->nodes_unused_after_folding = before_fold - count_kept(c);
  GR_TRY(gr_passes_copy(c, out));
  stats->nodes_out = gr_graph_num_nodes(*out);
  GR_ASSERT(stats->nodes_out ==
            c->n - stats->nodes_pruned - stats->nodes_merged - stats->nodes_unused_after_folding);
  return GR_OK;
}

gr_status gr_passes_optimize_graph(const gr_graph *g, const gr_output *feeds, int num_feeds,
                                   const gr_output *fetches, int num_fetches,
                                   const gr_output *targets, int num_targets,
                                   const gr_passes_options *o, gr_graph **out,
                                   gr_passes_stats *stats, gr_error *err) {
  if (!out) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "graph passes: out is NULL");
  *out = NULL;
  if (!g) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "graph passes: graph is NULL");
  const gr_error *ge = gr_graph_error(g);
  if (ge) return gr_error_set(err, ge->code, "the graph has a build error: %s", ge->msg);
  GR_TRY(gr_passes_check_endpoints(g, "feed", feeds, num_feeds, true, err));
  GR_TRY(gr_passes_check_endpoints(g, "fetch", fetches, num_fetches, true, err));
  GR_TRY(gr_passes_check_endpoints(g, "target", targets, num_targets, false, err));
  gr_passes_options opts = o ? *o : gr_passes_options_default();
  gr_passes_stats local_stats = {0};
  gr_error local_err;
  gr_error_clear(&local_err);
  int n = gr_graph_num_nodes(g);
  gr_passes_arrays a = {0};
  gr_status st = GR_OK;
  if (!gr_passes_arrays_alloc(&a, n)) {
    st = gr_error_set_oom(&local_err);
  } else {
    gr_passes_ctx c = gr_passes_ctx_of(g, n, &a, &local_err);
    c.feeds = feeds, c.num_feeds = num_feeds;
    c.fetches = fetches, c.num_fetches = num_fetches;
    c.targets = targets, c.num_targets = num_targets;
    c.keep_all = opts.no_prune || (num_fetches == 0 && num_targets == 0);
    local_stats.nodes_in = n;
    st = run_passes(&c, &opts, out, &local_stats);
  }
  gr_passes_arrays_free(&a, n);
  if (st != GR_OK) {
    if (err) *err = local_err;
    return st;
  }
  if (stats) *stats = local_stats;
  return GR_OK;
}
