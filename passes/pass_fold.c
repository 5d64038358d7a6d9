/* Graph pass: constant folding. In topological order, a needed node whose
 * op is pure (not opaque), with one output, whose data and control inputs are
 * all constants (const nodes without control inputs, or nodes folded
 * already) and that is not fed, is evaluated once: a scratch graph holds its
 * input values as constants and an exact copy of the node, and an executor
 * runs the node's own kernel, so the value is the one a run would compute.
 * Constants in loops and branches hang off the loop or branch by a control
 * input, so nothing inside a frame or a branch is folded. Outputs over the
 * size cap are not folded; a kernel that fails is left to fail at run time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "passes_internal.h"

/* The value of a constant source, or NULL when n is not one. */
static const gr_tensor *const_value(const gr_passes_ctx *c, const gr_node *n) {
  if (c->fed[n->id]) return NULL;
  if (c->folded[n->id]) return &c->value[n->id];
  if (!(n->op->flags & GR_OP_CONSTANT) || n->num_control_inputs) return NULL;
  const gr_attr_value *v = gr_node_attr(n, "value");
  return v && v->type == GR_ATTR_TENSOR && v->tensor.buf ? &v->tensor : NULL;
}

static const gr_node *rep_of(const gr_passes_ctx *c, const gr_node *n) {
  return gr_graph_node(c->g, c->rep[n->id]);
}

static bool foldable(const gr_passes_ctx *c, const gr_node *n, size_t max_bytes) {
  if (c->mark[n->id] < GR_PRUNE_NEEDED || c->rep[n->id] != n->id || c->fed[n->id] ||
      (n->op->flags & GR_OP_CONSTANT) || gr_passes_op_is_opaque(n->op) || !n->op->kernel ||
      n->num_outputs != 1)
    return false;
  for (int i = 0; i < n->num_inputs; i++)
    if (gr_passes_is_fed(c, n->inputs[i]) || !const_value(c, rep_of(c, n->inputs[i].node)))
      return false;
  for (int i = 0; i < n->num_control_inputs; i++)
    if (!const_value(c, rep_of(c, n->control_inputs[i]))) return false;
  const gr_shape *s = &n->out_shapes[0];
  return !gr_shape_is_fully_known(s) ||
         (size_t)gr_shape_num_elements(s) <= max_bytes / gr_dtype_size(n->out_dtypes[0]);
}

/* Runs n on its constant inputs. GR_OK with *out set (one reference) when it
 * ran; GR_ERR_CANCELLED when it cannot be folded (its kernel or shape
 * function fails: left to the run); other codes are failures of the pass. */
static gr_status evaluate(const gr_passes_ctx *c, const gr_node *n, gr_tensor *out) {
  gr_graph *t = gr_graph_new();
  gr_output *in = gr_alloc_array((size_t)n->num_inputs + 1, sizeof(gr_output));
  gr_node **nodes = gr_alloc_array((size_t)n->num_inputs + 2, sizeof(gr_node *));
  gr_executor *ex = NULL;
  gr_status st = GR_OK;
  gr_error e;
  if (!t || !in || !nodes) {
    st = gr_error_set_oom(c->err);
    goto done;
  }
  gr_graph_set_seed(t, gr_graph_seed(c->g));
  const gr_op_def *const_op = &gr_op_const;
  for (int i = 0; i < n->num_inputs && st == GR_OK; i++) {
    char name[64];
    snprintf(name, sizeof name, "fold_input_%d", i);
    gr_attr a = gr_attr_tensor("value", *const_value(c, rep_of(c, n->inputs[i].node)));
    in[i] = gr_graph_add_node(t, const_op, name, NULL, 0, &a, 1);
  }
  gr_output copy = gr_graph_copy_node(t, n, in, NULL, 0);
  const gr_error *ge = gr_graph_error(t);
  if (ge) {
    st = ge->code == GR_ERR_RESOURCE_EXHAUSTED ? gr_error_set(c->err, ge->code, "%s", ge->msg)
                                               : GR_ERR_CANCELLED;
    goto done;
  }
  int k = gr_graph_num_nodes(t);
  for (int i = 0; i < k; i++) nodes[i] = gr_graph_node(t, i);
  gr_step_info step = {.step_id = 0, .seed = gr_graph_seed(c->g)};
  st = gr_executor_new(nodes, k, NULL, 0, &copy, 1, NULL, &ex, &e);
  if (st == GR_OK) st = gr_executor_run(ex, NULL, out, &step, &e);
  if (st == GR_ERR_RESOURCE_EXHAUSTED)
    gr_error_set(c->err, st, "folding '%s': %s", n->name, e.msg);
  else if (st != GR_OK)
    st = GR_ERR_CANCELLED;
done:
  gr_executor_free(ex);
  gr_graph_free(t);
  free(in);
  free(nodes);
  return st;
}

/* Keeps a value as a constant when it matches what the graph inferred and
 * fits the cap. */
static bool acceptable(const gr_node *n, const gr_tensor *v, size_t max_bytes) {
  return v->buf && v->dtype == n->out_dtypes[0] &&
         gr_shape_compatible(&v->shape, &n->out_shapes[0]) && gr_tensor_num_bytes(v) <= max_bytes;
}

typedef struct uses {
  int *left;      /* per node: consumers (data and control edges) not yet visited */
  uint8_t *stays; /* per node: will be a const of the new graph: keep its value */
} uses;

static void count_uses(const gr_passes_ctx *c, uses *u) {
  for (int v = 0; v < c->n; v++) {
    const gr_node *n = gr_graph_node(c->g, v);
    u->stays[v] = c->keep_all || c->protect[v];
    if (c->mark[v] < GR_PRUNE_NEEDED || c->rep[v] != v) continue;
    for (int i = 0; i < n->num_inputs; i++) u->left[c->rep[n->inputs[i].node->id]]++;
    for (int i = 0; i < n->num_control_inputs; i++) u->left[c->rep[n->control_inputs[i]->id]]++;
  }
}

/* n has been visited (folded or not): its folded inputs have one user less;
 * a value that no remaining node needs is released. */
static void visited(gr_passes_ctx *c, uses *u, const gr_node *n) {
  int ni = n->num_inputs, nc = n->num_control_inputs;
  for (int i = 0; i < ni + nc; i++) {
    int p = c->rep[i < ni ? n->inputs[i].node->id : n->control_inputs[i - ni]->id];
    if (!c->folded[p]) continue;
    if (!c->folded[n->id]) u->stays[p] = 1;
    if (--u->left[p] == 0 && !u->stays[p]) gr_tensor_release(&c->value[p]);
  }
}

gr_status gr_passes_fold(gr_passes_ctx *c, size_t max_bytes, int *folded) {
  *folded = 0;
  uses u = {calloc((size_t)c->n + 1, sizeof(int)), calloc((size_t)c->n + 1, 1)};
  gr_status st = GR_OK;
  if (!u.left || !u.stays) {
    st = gr_error_set_oom(c->err);
    goto done;
  }
  count_uses(c, &u);
  for (int k = 0; k < c->n && st == GR_OK; k++) {
    const gr_node *n = gr_graph_node(c->g, c->order[k]);
    if (c->mark[n->id] < GR_PRUNE_NEEDED || c->rep[n->id] != n->id) continue;
    if (foldable(c, n, max_bytes)) {
      gr_tensor v = gr_tensor_empty();
      st = evaluate(c, n, &v);
      if (st == GR_OK && acceptable(n, &v, max_bytes)) {
        c->value[n->id] = v;
        c->folded[n->id] = 1;
        (*folded)++;
      } else {
        gr_tensor_release(&v);
      }
      if (st == GR_ERR_CANCELLED) st = GR_OK;
    }
    visited(c, &u, n);
  }
done:
  free(u.left);
  free(u.stays);
  return st;
}
