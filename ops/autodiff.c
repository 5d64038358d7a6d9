/* Automatic differentiation as a graph transform (gr_gradients): walk back
 * from ys to xs over floating-point edges, call each op's gradient function
 * in reverse topological order, and sum the contributions that several
 * consumers send to one output (add_n). Gradient nodes are colocated with
 * their forward node and live under the name scope "gradients/". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* Gradient contributions collected for one output of one node. */
typedef struct contrib {
  gr_output *v;
  int n, cap;
} contrib;

static bool float_edge(const gr_node *n, int out) {
  return gr_dtype_is_float(n->out_dtypes[out]);
}

#define fail gr_graph_set_errorf

static bool push(contrib *c, gr_output o) {
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 2;
    gr_output *v = realloc(c->v, sizeof *v * (size_t)cap);
    if (!v) return false;
    c->v = v;
    c->cap = cap;
  }
  c->v[c->n++] = o;
  return true;
}

/* The sum of the contributions, or a null output when there are none. */
static gr_output total(gr_graph *g, const contrib *c) {
  if (c->n == 0) return (gr_output){NULL, 0};
  if (c->n == 1) return c->v[0];
  return gr_add_n(g, c->v, c->n);
}

/* Nodes from first_id on were built for `fwd`: colocate them with it. */
static void colocate_new(gr_graph *g, int first_id, const gr_node *fwd) {
  for (int id = first_id; id < gr_graph_num_nodes(g); id++) {
    gr_node *n = gr_graph_node(g, id);
    if (!n->colocate_with) gr_graph_set_colocation(g, n, fwd->name);
  }
}

gr_status gr_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs) {
  for (int i = 0; i < nx; i++) dxs[i] = (gr_output){NULL, 0};
  if (gr_graph_error(g)) return gr_graph_error(g)->code;
  for (int i = 0; i < ny; i++)
    if (!ys[i].node || ys[i].index < 0 || ys[i].index >= ys[i].node->num_outputs)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "gradients: y %d is not a valid output", i);
  for (int i = 0; i < nx; i++)
    if (!xs[i].node || xs[i].index < 0 || xs[i].index >= xs[i].node->num_outputs)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "gradients: x %d is not a valid output", i);
  for (int i = 0; i < ny; i++)
    if (!float_edge(ys[i].node, ys[i].index))
      return fail(g, GR_ERR_DTYPE,
                  "gradients: y '%s' has dtype %s; only f32/f64 can be differentiated",
                  ys[i].node->name, gr_dtype_name(ys[i].node->out_dtypes[ys[i].index]));

  int total_nodes = gr_graph_num_nodes(g);
  char *from_x = calloc((size_t)total_nodes + 1, 1), *to_y = calloc((size_t)total_nodes + 1, 1);
  int *out_base = malloc(sizeof(int) * ((size_t)total_nodes + 1));
  int *order = malloc(sizeof(int) * ((size_t)total_nodes + 1));
  contrib *grads = NULL;
  int nout = 0;
  gr_status st = GR_OK;
  if (!from_x || !to_y || !out_base || !order || gr_graph_topo_order(g, order) != total_nodes) {
    st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* forward from xs over float edges, in topological order */
  for (int i = 0; i < nx; i++) from_x[xs[i].node->id] = 1;
  for (int k = 0; k < total_nodes; k++) {
    int id = order[k];
    gr_node *n = gr_graph_node(g, id);
    if (from_x[id]) continue;
    for (int j = 0; j < n->num_inputs; j++)
      if (from_x[n->inputs[j].node->id] && float_edge(n->inputs[j].node, n->inputs[j].index)) {
        from_x[id] = 1;
        break;
      }
  }
  /* backward from ys */
  for (int i = 0; i < ny; i++) to_y[ys[i].node->id] = 1;
  for (int k = total_nodes - 1; k >= 0; k--) {
    int id = order[k];
    if (!to_y[id]) continue;
    gr_node *n = gr_graph_node(g, id);
    for (int j = 0; j < n->num_inputs; j++)
      if (float_edge(n->inputs[j].node, n->inputs[j].index)) to_y[n->inputs[j].node->id] = 1;
  }
  for (int id = 0; id < total_nodes; id++) {
    out_base[id] = nout;
    nout += gr_graph_node(g, id)->num_outputs;
  }
  grads = calloc((size_t)nout + 1, sizeof *grads);
  if (!grads) {
    st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* seeds */
  for (int i = 0; i < ny; i++) {
    gr_output seed = grad_ys && grad_ys[i].node ? grad_ys[i] : gr_ones_like(g, ys[i]);
    if (!seed.node || !push(&grads[out_base[ys[i].node->id] + ys[i].index], seed)) {
      st = gr_graph_error(g) ? gr_graph_error(g)->code : fail(g, GR_ERR_RESOURCE_EXHAUSTED, "oom");
      goto done;
    }
  }
  /* reverse topological order over the nodes on a path from xs to ys */
  for (int k = total_nodes - 1; k >= 0 && st == GR_OK; k--) {
    int id = order[k];
    if (!from_x[id] || !to_y[id]) continue;
    gr_node *n = gr_graph_node(g, id);
    bool is_x_only = true; /* an x with no x upstream: no need to go further */
    for (int j = 0; j < n->num_inputs; j++)
      if (from_x[n->inputs[j].node->id]) is_x_only = false;
    if (is_x_only) continue;
    gr_output *og = calloc((size_t)n->num_outputs + 1, sizeof *og);
    gr_output *din = calloc((size_t)n->num_inputs + 1, sizeof *din);
    if (!og || !din) {
      free(og);
      free(din);
      st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    char scope[600];
    snprintf(scope, sizeof scope, "gradients/%s_grad", n->name);
    int first_id = gr_graph_num_nodes(g);
    gr_graph_push_name_scope(g, scope);
    bool any = false;
    for (int k = 0; k < n->num_outputs; k++) {
      og[k] = total(g, &grads[out_base[id] + k]);
      if (og[k].node) any = true;
    }
    if (any && !(n->op->flags & GR_OP_NO_GRADIENT)) {
      if (!n->op->grad_fn) {
        st = fail(g, GR_ERR_UNIMPLEMENTED,
                  "gradients: no gradient defined for op %s (node '%s'); wrap it in "
                  "stop_gradient if no gradient should flow through it",
                  n->op->name, n->name);
      } else {
        gr_grad_ctx ctx = {.graph = g, .node = n, .grads = og, .dinputs = din};
        st = n->op->grad_fn(&ctx);
        if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
        if (st != GR_OK && !gr_graph_error(g))
          fail(g, st, "gradients: gradient of node '%s' (op %s) failed", n->name, n->op->name);
      }
    }
    gr_graph_pop_name_scope(g);
    colocate_new(g, first_id, n);
    for (int j = 0; j < n->num_inputs && st == GR_OK; j++) {
      gr_output src = n->inputs[j];
      if (!din[j].node || !from_x[src.node->id] || !float_edge(src.node, src.index)) continue;
      if (!push(&grads[out_base[src.node->id] + src.index], din[j]))
        st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    }
    free(og);
    free(din);
  }
  for (int i = 0; i < nx && st == GR_OK; i++) {
    contrib *c = &grads[out_base[xs[i].node->id] + xs[i].index];
    char scope[600];
    snprintf(scope, sizeof scope, "gradients/%s_grad", xs[i].node->name);
    gr_graph_push_name_scope(g, scope);
    dxs[i] = total(g, c);
    if (!dxs[i].node && !null_for_unconnected) dxs[i] = gr_zeros_like(g, xs[i]);
    gr_graph_pop_name_scope(g);
  }
  if (gr_graph_error(g)) st = gr_graph_error(g)->code;
done:
  for (int i = 0; grads && i < nout; i++) free(grads[i].v);
  free(grads);
  free(from_x);
  free(to_y);
  free(out_base);
  free(order);
  if (st != GR_OK)
    for (int i = 0; i < nx; i++) dxs[i] = (gr_output){NULL, 0};
  return st;
}
