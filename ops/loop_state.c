/* Loops and variables: what a while loop's builder does so that state
 * updated in a loop behaves as in program order.
 *   - A variable the loop updates is read anew in every iteration (a
 *     read_value inside the frame) instead of once before the loop.
 *   - An iteration's updates, and its reads of the variables the loop
 *     updates, finish before the next iteration starts: the next_iteration
 *     nodes wait for each of them, in the loop's own frame or, through
 *     their exits, in loops nested in it, through one control_trigger
 *     (live when an update in an untaken cond branch is dead). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const char *var_of(const gr_node *n) {
  return gr_node_attr_string(n, "var", NULL);
}

/* Does the updating node n write variable name: its attr var, or one of
 * the comma-separated names of a fused all-reduce's apply_vars? */
static bool writes(const gr_node *n, const char *name) {
  const char *v = var_of(n);
  if (v) return strcmp(v, name) == 0;
  if (n->op != &gr_op_collective_all_reduce_sgd) return false;
  size_t len = strlen(name);
  for (const char *p = gr_node_attr_string(n, "apply_vars", ""); *p;) {
    size_t k = strcspn(p, ",");
    if (k == len && !strncmp(p, name, len)) return true;
    p += k + (p[k] == ',');
  }
  return false;
}

bool gr_loop_writes_var(gr_graph *g, int lo, int hi, const gr_node *read) {
  const char *name = var_of(read);
  if (!name) return false;
  for (int id = lo; id < hi; id++) {
    const gr_node *n = gr_graph_node(g, id);
    if ((n->op->flags & GR_OP_UPDATES) && writes(n, name)) return true;
  }
  return false;
}

/* Loop nesting depth of node id relative to the loop being built (0: its
 * own frame), for ids in [lo, hi); anything else is at depth 0. A node takes
 * the frame of its first input (data, else control); an enter is one
 * deeper, and an exit's consumers one shallower. Inputs normally have lower
 * ids; a capture enter built after its consumer is computed on demand
 * (chains of those are as long as the nesting). */
static int depth_of(gr_graph *g, int lo, int hi, int *depth, int id);

static int out_depth(gr_graph *g, int lo, int hi, int *depth, const gr_node *src) {
  if (src->id < lo || src->id >= hi) return 0;
  int d = depth_of(g, lo, hi, depth, src->id);
  return src->op->cf_kind == GR_CF_EXIT ? d - 1 : d;
}

static int depth_of(gr_graph *g, int lo, int hi, int *depth, int id) {
  if (depth[id - lo] != INT_MIN) return depth[id - lo];
  const gr_node *n = gr_graph_node(g, id);
  const gr_node *src = n->num_inputs           ? n->inputs[0].node
                       : n->num_control_inputs ? n->control_inputs[0]
                                               : NULL;
  int d = src ? out_depth(g, lo, hi, depth, src) : 0;
  if (n->op->cf_kind == GR_CF_ENTER) d++;
  return depth[id - lo] = d;
}

int *gr_loop_depths(gr_graph *g, int lo, int hi) {
  int *depth = gr_alloc_array((size_t)(hi - lo) + 1, sizeof(int));
  if (!depth) return NULL;
  for (int i = 0; i < hi - lo; i++) depth[i] = INT_MIN;
  for (int id = lo; id < hi; id++) depth_of(g, lo, hi, depth, id);
  return depth;
}

/* A read (read_value) in [lo, hi) of a variable that [lo, hi) updates. */
static bool reads_updated_var(gr_graph *g, int lo, int hi, const gr_node *n) {
  return n->op->cf_kind == GR_CF_NONE && gr_ops_is_variable_read(n) &&
         gr_loop_writes_var(g, lo, hi, n);
}

gr_status gr_loop_order_updates(gr_graph *g, int lo, int hi, const gr_output *next_iters, int n) {
  int *depth = gr_alloc_array((size_t)(hi - lo) + 1, sizeof(int));
  if (!depth) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "while_loop: out of memory");
  for (int i = 0; i < hi - lo; i++) depth[i] = INT_MIN;
  bool updates = false, nested = false;
  for (int id = lo; id < hi; id++) {
    const gr_node *u = gr_graph_node(g, id);
    if (!(u->op->flags & GR_OP_UPDATES)) continue;
    updates = true;
    if (depth_of(g, lo, hi, depth, id) > 0) nested = true;
  }
  /* reads of what the loop updates: iteration t + 1 must not write before
   * iteration t has read (reads in nested loops: through their exits) */
  char *reads = updates ? calloc((size_t)(hi - lo) + 1, 1) : NULL;
  if (updates && !reads) {
    free(depth);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "while_loop: out of memory");
  }
  for (int id = lo; id < hi && updates; id++)
    if (reads_updated_var(g, lo, hi, gr_graph_node(g, id))) {
      reads[id - lo] = 1;
      if (depth_of(g, lo, hi, depth, id) > 0) nested = true;
    }
  gr_status st = GR_OK;
  gr_node *trigger = NULL;
  for (int id = lo; id < hi && st == GR_OK && updates; id++) {
    gr_node *u = gr_graph_node(g, id);
    int d = depth_of(g, lo, hi, depth, id);
    bool waits = d == 0 && ((u->op->flags & GR_OP_UPDATES) || reads[id - lo]);
    /* a nested loop's exit: after all of that loop's updates and reads */
    if (nested && u->op->cf_kind == GR_CF_EXIT && d == 1) waits = true;
    if (!waits) continue;
    /* through a control_trigger: an update in a cond branch of the body is
     * dead in the iterations that take the other branch, and a dead control
     * input would end the loop there */
    if (!trigger) {
      trigger = gr_op(g, "control_trigger", NULL, NULL, 0, NULL, 0).node;
      if (!trigger) break;
    }
    st = gr_graph_add_control_input_unchecked(g, trigger, u);
  }
  /* the next iteration's values already wait for this one's next_iteration
   * nodes; a control edge from an update is not a cycle (it reaches the
   * next_iteration of the same iteration) */
  for (int i = 0; i < n && trigger && st == GR_OK; i++)
    st = gr_graph_add_control_input_unchecked(g, next_iters[i].node, trigger);
  free(reads);
  free(depth);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  return st;
}
