/* Automatic differentiation as a graph transform (gr_gradients): walk back
 * from ys to xs over floating-point edges, call each op's gradient function
 * in reverse topological order, and sum the contributions that several
 * consumers send to one output (add_n). A while loop is differentiated as a
 * unit by a reverse loop (while_grad.c): the walk orders each loop's nodes
 * as one group, so every consumer of every exit is done before the loop.
 * Gradient nodes carry a colocation hint to their forward node and live under the
 * name scope "gradients/". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/autodiff_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

#define fail gr_graph_set_errorf

/* Gradient contributions collected for one output of one node. */
typedef struct contrib {
  gr_output *v;
  int n, cap;
} contrib;

static bool float_edge(const gr_node *n, int out) {
  return gr_dtype_is_float(n->out_dtypes[out]);
}

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

/* Contributions that are all products op(a_k) op(b_k) of one shape with
 * the same transposes on one device: a weight's gradient from each
 * micro-batch, or from each use of a shared weight. */
typedef struct products {
  bool ta, tb;
  bool remote;  /* some operand is made on another device (a pipeline's stages) */
  int64_t rows; /* the contracted rows of all products (-1: unknown) */
} products;

static bool like_products(gr_graph *g, const contrib *c, products *pr) {
  const gr_node *m0 = c->v[0].node;
  if (m0->op != &gr_op_matmul || m0->out_shapes[0].rank != 2) return false;
  *pr = (products){gr_node_attr_bool(m0, "transpose_a", false),
                   gr_node_attr_bool(m0, "transpose_b", false), false, 0};
  const char *dev = gr_graph_resolve_device(g, m0);
  for (int k = 0; k < c->n; k++) {
    const gr_node *m = c->v[k].node;
    if (m->op != &gr_op_matmul || c->v[k].index != 0 ||
        gr_node_attr_bool(m, "transpose_a", false) != pr->ta ||
        gr_node_attr_bool(m, "transpose_b", false) != pr->tb ||
        m->out_dtypes[0] != m0->out_dtypes[0] ||
        !gr_shape_equal(&m->out_shapes[0], &m0->out_shapes[0]) ||
        strcmp(gr_graph_resolve_device(g, m), dev) != 0)
      return false;
    for (int j = 0; j < 2; j++)
      if (strcmp(gr_graph_resolve_device(g, m->inputs[j].node), dev) != 0) pr->remote = true;
    const gr_shape *a = &m->inputs[0].node->out_shapes[m->inputs[0].index];
    int64_t r = a->rank == 2 ? a->dims[pr->ta ? 0 : 1] : -1;
    pr->rows = r < 0 || pr->rows < 0 ? -1 : pr->rows + r;
  }
  return true;
}

/* Nodes from first_id on: colocated with product m0, so they run where the
 * products would have. */
static void colocate_with_product(gr_graph *g, int first_id, const gr_node *m0) {
  for (int id = first_id; id < gr_graph_num_nodes(g); id++)
    gr_graph_set_colocation_hint(g, gr_graph_node(g, id),
                                 m0->colocate_with ? m0->colocate_with : m0->name);
}

/* All operands local: the products sum to one product over the operands
 * concatenated along the contracted dimension, sum_k a_k^T b_k = A^T B:
 * one product of M rows instead of K products and a K-way add, when the K
 * outputs (K p q elements) outweigh the operands copied (M (p + q)). A
 * null output when that costs more. */
static gr_output fused_products(gr_graph *g, const contrib *c, const products *pr) {
  const gr_node *m0 = c->v[0].node;
  int64_t p = m0->out_shapes[0].dims[0], q = m0->out_shapes[0].dims[1];
  if (p < 0 || q < 0 || pr->rows < 0 ||
      (double)c->n * (double)p * (double)q < (double)pr->rows * (double)(p + q))
    return (gr_output){NULL, 0};
  gr_output *a = calloc((size_t)c->n, sizeof *a), *b = calloc((size_t)c->n, sizeof *b);
  gr_output r = {NULL, 0};
  if (a && b) {
    for (int k = 0; k < c->n; k++) a[k] = c->v[k].node->inputs[0], b[k] = c->v[k].node->inputs[1];
    int first = gr_graph_num_nodes(g);
    r = gr_matmul(g, gr_concat(g, a, c->n, pr->ta ? 0 : 1), gr_concat(g, b, c->n, pr->tb ? 1 : 0),
                  pr->ta, pr->tb);
    if (r.node) colocate_with_product(g, first, m0);
  } else {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  free(a), free(b);
  return r;
}

/* The smallest node id among a product's operands: in a pipeline, the
 * forward activation of its micro-batch, made in micro-batch order, which
 * is the order their backward passes run in. */
static int operand_order(const gr_node *m) {
  int a = m->inputs[0].node->id, b = m->inputs[1].node->id;
  return a < b ? a : b;
}

/* Operands from another device: one product would wait for the last
 * micro-batch, so each product runs as its operands arrive, added into one
 * buffer: a chain p_1 + op(a_2) op(b_2) + ... of matmul_add in operand
 * order, instead of K buffers and an add_n after the last. */
static gr_output chained_products(gr_graph *g, const contrib *c, const products *pr) {
  int *ord = gr_alloc_array((size_t)c->n, sizeof *ord);
  if (!ord) {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return (gr_output){NULL, 0};
  }
  for (int k = 0; k < c->n; k++) { /* insertion sort: K is the number of micro-batches */
    int j = k;
    while (j > 0 && operand_order(c->v[ord[j - 1]].node) > operand_order(c->v[k].node)) {
      ord[j] = ord[j - 1];
      j--;
    }
    ord[j] = k;
  }
  int first = gr_graph_num_nodes(g);
  gr_output acc = c->v[ord[0]];
  for (int k = 1; k < c->n && acc.node; k++) {
    const gr_node *m = c->v[ord[k]].node; /* left without consumers: a run prunes it */
    acc = gr_matmul_add(g, acc, m->inputs[0], m->inputs[1], pr->ta, pr->tb);
  }
  if (acc.node) colocate_with_product(g, first, c->v[0].node);
  free(ord);
  return acc;
}

/* The sum of the contributions, or a null output when there are none. In a
 * graph without control flow (fuse), products are fused (all operands
 * local) or chained (some from another device); an add_n otherwise. */
static gr_output total(gr_graph *g, const contrib *c, bool fuse) {
  if (c->n == 0) return (gr_output){NULL, 0};
  if (c->n == 1) return c->v[0];
  products pr;
  gr_output r = {NULL, 0};
  if (fuse && like_products(g, c, &pr))
    r = pr.remote ? chained_products(g, c, &pr) : fused_products(g, c, &pr);
  return r.node || gr_graph_error(g) ? r : gr_add_n(g, c->v, c->n);
}

/* Nodes from first_id on were built for `fwd`: colocate them with it. */
static void colocate_new(gr_graph *g, int first_id, const gr_node *fwd) {
  for (int id = first_id; id < gr_graph_num_nodes(g); id++) {
    gr_node *n = gr_graph_node(g, id);
    if (!n->colocate_with) gr_graph_set_colocation_hint(g, n, fwd->name);
  }
}

/* ---- loop frames ---------------------------------------------------------------------- */

gr_status ad_frames_compute(const gr_graph *g, const int *order, int total, gr_frames *f) {
  GR_TRY(gr_frames_init(f, GR_FRAMES_DEEPEST_INPUT, total));
  return gr_frames_assign_graph(f, g, order);
}

/* The frame directly inside `base` that contains frame fr, or -1 when fr is base. */
static int child_of_base(const gr_frames *f, int fr, int base) {
  while (fr >= 0 && fr != base && f->frames[fr].parent != base) fr = f->frames[fr].parent;
  return fr == base || fr < 0 ? -1 : fr;
}

/* ---- the walk ------------------------------------------------------------------------- */

typedef struct walk {
  gr_graph *g;
  int total, nout;
  int *order, *out_base, *group_order;
  char *from_x, *to_y;
  contrib *grads;
  gr_frames fr;
  int base;
  bool no_control_flow; /* no control-flow op among the nodes differentiated */
} walk;

static void walk_free(walk *w) {
  for (int i = 0; w->grads && i < w->nout; i++) free(w->grads[i].v);
  free(w->grads);
  free(w->order);
  free(w->out_base);
  free(w->group_order);
  free(w->from_x);
  free(w->to_y);
  gr_frames_free(&w->fr);
}

typedef struct group_edges_ctx {
  const walk *w;
  const int *gid;
} group_edges_ctx;

/* Edges between groups: data inputs but a loop's back edge, and control inputs. */
static void group_edges(const void *ctx, gr_topo_emit_fn emit, void *acc) {
  const group_edges_ctx *c = ctx;
  for (int id = 0; id < c->w->total; id++) {
    gr_node *d = gr_graph_node(c->w->g, id);
    for (int j = 0; j < d->num_inputs + d->num_control_inputs; j++) {
      gr_node *s = gr_node_predecessor(d, j);
      if (j < d->num_inputs && s->op->cf_kind == GR_CF_NEXT_ITERATION) continue;
      int a = c->gid[s->id], b = c->gid[id];
      if (a != b) emit(acc, a, b);
    }
  }
}

/* Groups: each node of `base` alone; each loop directly inside base as one
 * group (id total + frame). Fills w->group_order with the groups in a
 * topological order; returns their count or -1. */
static int group_sort(walk *w) {
  int ng = w->total + w->fr.num_frames, count = -1;
  int *gid = malloc(sizeof(int) * ((size_t)w->total + 1));
  unsigned char *unused = malloc((size_t)ng + 1);
  w->group_order = malloc(sizeof(int) * ((size_t)ng + 1));
  if (gid && unused && w->group_order) {
    memset(unused, 1, (size_t)ng);
    for (int id = 0; id < w->total; id++) {
      int c = child_of_base(&w->fr, w->fr.of_node[id], w->base);
      gid[id] = c >= 0 ? w->total + c : id;
      unused[gid[id]] = 0;
    }
    count = gr_topo_sort(ng, group_edges, &(group_edges_ctx){w, gid}, unused, w->group_order);
  }
  free(gid);
  free(unused);
  return count;
}

/* A loop group: its exits' gradients to the reverse loop, the results to
 * the values that enter it. */
static gr_status loop_group(walk *w, int frame, const ad_reverse *rv) {
  gr_graph *g = w->g;
  ad_loop loop;
  GR_TRY(ad_loop_find(g, &w->fr, frame, w->total, &loop));
  gr_output *d_exits = calloc((size_t)loop.n + 1, sizeof(gr_output));
  gr_output *d_init = calloc((size_t)loop.n + 1, sizeof(gr_output));
  gr_output *d_inv = calloc((size_t)loop.m + 1, sizeof(gr_output));
  bool *want = calloc((size_t)loop.m + 1, sizeof(bool)), any = false;
  gr_status st = GR_OK;
  if (!d_exits || !d_init || !d_inv || !want) {
    st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (int i = 0; i < loop.n; i++) {
    d_exits[i] = total(g, &w->grads[w->out_base[loop.exit[i]->id]], false);
    if (d_exits[i].node) any = true;
  }
  for (int j = 0; j < loop.m; j++) {
    gr_output y = loop.invariant[j]->inputs[0];
    want[j] = float_edge(y.node, y.index) && w->from_x[y.node->id];
  }
  if (!any) goto out;
  st = ad_while_gradient(g, &w->fr, &loop, d_exits, want, d_init, d_inv, rv);
  for (int i = 0; i < loop.n && st == GR_OK; i++) {
    gr_output x = loop.enter[i]->inputs[0];
    if (d_init[i].node && w->from_x[x.node->id] &&
        !push(&w->grads[w->out_base[x.node->id] + x.index], d_init[i]))
      st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int j = 0; j < loop.m && st == GR_OK; j++) {
    gr_output y = loop.invariant[j]->inputs[0];
    if (d_inv[j].node && !push(&w->grads[w->out_base[y.node->id] + y.index], d_inv[j]))
      st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
out:
  free(d_exits);
  free(d_init);
  free(d_inv);
  free(want);
  ad_loop_free(&loop);
  return st;
}

/* One node: its outputs' gradients through its gradient function. */
static gr_status node_group(walk *w, gr_node *n, const ad_reverse *rv) {
  gr_graph *g = w->g;
  int id = n->id;
  bool is_x_only = true; /* an x with no x upstream: nothing to do */
  for (int j = 0; j < n->num_inputs; j++)
    if (w->from_x[n->inputs[j].node->id]) is_x_only = false;
  if (is_x_only) return GR_OK;
  gr_output *og = calloc((size_t)n->num_outputs + 1, sizeof *og);
  gr_output *din = calloc((size_t)n->num_inputs + 1, sizeof *din);
  if (!og || !din) {
    free(og);
    free(din);
    return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  gr_status st = GR_OK;
  char scope[600];
  snprintf(scope, sizeof scope, "/gradients/%s_grad", n->name);
  int first_id = gr_graph_num_nodes(g);
  gr_graph_push_name_scope(g, scope);
  bool any = false;
  for (int k = 0; k < n->num_outputs; k++) {
    og[k] = total(g, &w->grads[w->out_base[id] + k], w->no_control_flow);
    if (og[k].node) any = true;
  }
  gr_op_gradient kind = gr_op_classify_gradient(n->op);
  if (any && kind != GR_OP_GRADIENT_STOPS) {
    if (kind != GR_OP_GRADIENT_DEFINED) {
      st = fail(g, GR_ERR_UNIMPLEMENTED,
                "gradients: no gradient defined for op %s (node '%s'); wrap it in "
                "stop_gradient if no gradient should flow through it",
                n->op->name, n->name);
    } else {
      gr_grad_ctx ctx = {.graph = g,
                         .node = n,
                         .grads = og,
                         .dinputs = din,
                         .remap = rv ? rv->remap : NULL,
                         .remap_arg = rv ? rv->arg : NULL,
                         .static_shapes = w->no_control_flow && !rv};
      st = gr_op_registry_find_gradient(n->op)(&ctx);
      if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
      if (st != GR_OK && !gr_graph_error(g))
        fail(g, st, "gradients: gradient of node '%s' (op %s) failed", n->name, n->op->name);
    }
  }
  gr_graph_pop_name_scope(g);
  colocate_new(g, first_id, n);
  for (int j = 0; j < n->num_inputs && st == GR_OK; j++) {
    gr_output src = n->inputs[j];
    if (!din[j].node || !w->from_x[src.node->id] || !float_edge(src.node, src.index)) continue;
    if (!push(&w->grads[w->out_base[src.node->id] + src.index], din[j]))
      st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  free(og);
  free(din);
  return st;
}

/* Every y and x is a valid output. */
static gr_status check_ends(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx) {
  if (ny < 0 || nx < 0)
    return fail(g, GR_ERR_INVALID_ARGUMENT, "gradients: %d ys and %d xs", ny, nx);
  for (int i = 0; i < ny; i++)
    if (!ys[i].node || ys[i].index < 0 || ys[i].index >= ys[i].node->num_outputs)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "gradients: y %d is not a valid output", i);
  for (int i = 0; i < nx; i++)
    if (!xs[i].node || xs[i].index < 0 || xs[i].index >= xs[i].node->num_outputs)
      return fail(g, GR_ERR_INVALID_ARGUMENT, "gradients: x %d is not a valid output", i);
  return GR_OK;
}

/* The float ys into fys and their seeds into fseed (null: ones); returns
 * how many. As in TensorFlow, an integer or bool y contributes nothing:
 * no gradient flows back from it into a float value (integer and bool
 * edges carry none), so gradients([i, f], x) is d f / dx, and with no
 * float y every x is unconnected. */
static int float_ys(const gr_output *ys, int ny, const gr_output *grad_ys, gr_output *fys,
                    gr_output *fseed) {
  int n = 0;
  for (int i = 0; i < ny; i++)
    if (float_edge(ys[i].node, ys[i].index)) {
      fys[n] = ys[i];
      fseed[n++] = grad_ys ? grad_ys[i] : (gr_output){NULL, 0};
    }
  return n;
}

/* The walk's arrays, the topological order, the loop frames, and the frame
 * being differentiated: base's, or the ys' (all in one frame). */
static gr_status walk_start(walk *w, gr_graph *g, const gr_output *ys, int ny, const char *base) {
  memset(w, 0, sizeof *w);
  w->g = g;
  w->total = gr_graph_num_nodes(g);
  w->from_x = calloc((size_t)w->total + 1, 1);
  w->to_y = calloc((size_t)w->total + 1, 1);
  w->out_base = malloc(sizeof(int) * ((size_t)w->total + 1));
  w->order = malloc(sizeof(int) * ((size_t)w->total + 1));
  if (!w->from_x || !w->to_y || !w->out_base || !w->order ||
      gr_graph_topo_order(g, w->order) != w->total ||
      ad_frames_compute(g, w->order, w->total, &w->fr) != GR_OK)
    return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  w->base = -1;
  for (int k = 0; k < w->fr.num_frames && base; k++)
    if (strcmp(w->fr.frames[k].name, base) == 0) w->base = k;
  if (!base) { /* the frame of the ys: inside a loop body, per iteration */
    w->base = gr_frames_output_frame(&w->fr, ys[0].node->id);
    for (int i = 1; i < ny; i++) {
      int f = gr_frames_output_frame(&w->fr, ys[i].node->id);
      if (f != w->base)
        return fail(g, GR_ERR_INVALID_ARGUMENT,
                    "gradients: y '%s' is in %s%s but y '%s' is in %s%s: differentiate values of "
                    "one loop body (or of the top level) together",
                    ys[0].node->name, w->base ? "loop " : "the top level",
                    w->fr.frames[w->base].name, ys[i].node->name, f ? "loop " : "the top level",
                    w->fr.frames[f].name);
    }
  }
  if (w->base < 0) return fail(g, GR_ERR_INTERNAL, "gradients: no loop frame '%s'", base);
  w->no_control_flow = true;
  for (int id = 0; id < w->total && w->no_control_flow; id++)
    w->no_control_flow = gr_graph_node(g, id)->op->cf_kind == GR_CF_NONE;
  return GR_OK;
}

/* Whether no gradient flows back through n (stop_gradient, zeros_like, a
 * stack op, ...): the path from the xs to the ys does not run through it,
 * so a loop's gradient behind one (its stack pops) is off the path. */
static bool stops(const gr_node *n) {
  return (n->op->flags & GR_OP_NO_GRADIENT) &&
         gr_op_classify_gradient(n->op) == GR_OP_GRADIENT_STOPS;
}

/* from_x: forward from the xs over float edges, in topological order. Loop
 * back edges (merge <- next_iteration) go against the order: repeat until
 * nothing changes (one more pass per level of loop nesting); so do stacks
 * (a pop carries what its push took). Not through an op without a
 * gradient (stops) but for an x itself. */
static void mark_from_x(walk *w, const gr_output *xs, int nx, const ad_pushes *pushes) {
  for (int i = 0; i < nx; i++) w->from_x[xs[i].node->id] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (int k = 0; k < w->total; k++) {
      gr_node *n = gr_graph_node(w->g, w->order[k]);
      const gr_node *push = w->from_x[n->id] ? NULL : ad_pushes_match(pushes, n);
      if (push && w->from_x[push->inputs[0].node->id] &&
          float_edge(push->inputs[0].node, push->inputs[0].index)) {
        w->from_x[n->id] = 1;
        changed = true;
      }
      for (int j = 0; j < n->num_inputs && !w->from_x[n->id] && !stops(n); j++) {
        const gr_node *p = n->inputs[j].node;
        /* not around the loop being differentiated: there the body's inputs are the xs */
        if (p->op->cf_kind == GR_CF_NEXT_ITERATION && w->fr.of_node[p->id] == w->base) continue;
        if (w->from_x[p->id] && float_edge(p, n->inputs[j].index)) {
          w->from_x[n->id] = 1;
          changed = true;
        }
      }
    }
  }
}

/* to_y: back from the ys the same way: a back edge reaches a body that
 * comes earlier in the order (a loop invariant computed outside the loop
 * and used only in its body is on the path through it). Not back through
 * an op without a gradient (stops). */
static void mark_to_y(walk *w, const gr_output *ys, int ny) {
  for (int i = 0; i < ny; i++) w->to_y[ys[i].node->id] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (int k = w->total - 1; k >= 0; k--) {
      gr_node *n = gr_graph_node(w->g, w->order[k]);
      if (!w->to_y[n->id] || stops(n)) continue;
      for (int j = 0; j < n->num_inputs; j++) {
        const gr_node *p = n->inputs[j].node;
        if (p->op->cf_kind == GR_CF_NEXT_ITERATION && w->fr.of_node[p->id] == w->base) continue;
        if (!w->to_y[p->id] && float_edge(p, n->inputs[j].index)) {
          w->to_y[p->id] = 1;
          changed = true;
        }
      }
    }
  }
}

/* A gradients() in a loop body differentiates within one iteration. Its
 * path may run through the frames around the body (a loop invariant
 * computed outside the loop, as TensorFlow's testCallGradInLoop): those
 * values are constants of the iteration, and their gradients are built in
 * the body with them. It may not come out of another loop (that loop's
 * reverse loop would run in every iteration of this one, popping stacks
 * pushed once) nor through the initial value of one of this loop's
 * variables (that gradient would go through every earlier iteration, which
 * TensorFlow refuses too). Loops nested in the body are differentiated as
 * units. */
static gr_status check_body_paths(walk *w) {
  const gr_frames *f = &w->fr;
  for (int id = 0; id < w->total && w->base > 0; id++) {
    if (!w->from_x[id] || !w->to_y[id]) continue;
    const gr_node *n = gr_graph_node(w->g, id);
    int fr = f->of_node[id];
    if (n->op->cf_kind == GR_CF_EXIT && fr != w->base && child_of_base(f, fr, w->base) < 0)
      return fail(w->g, GR_ERR_UNIMPLEMENTED,
                  "gradients: in loop '%s', the value differentiated depends on the xs through "
                  "loop '%s', which is outside it (node '%s'); a gradient taken in a loop body "
                  "cannot go back through another loop: take that gradient outside the loop",
                  f->frames[w->base].name, f->frames[fr].name, n->name);
    if (n->op->cf_kind == GR_CF_ENTER && fr == w->base &&
        !gr_node_attr_bool(n, "is_constant", false))
      return fail(w->g, GR_ERR_UNIMPLEMENTED,
                  "gradients: in loop '%s', the value differentiated depends on the xs through "
                  "the initial value of a loop variable (node '%s'); a gradient taken in a loop "
                  "body goes through the body's values and the values it uses from outside, not "
                  "through a loop variable's initial value (as in TensorFlow)",
                  f->frames[w->base].name, n->name);
  }
  return GR_OK;
}

/* The default seed dy/dy: ones shaped as y. In a graph without control
 * flow and with y's shape known, a constant: it does not wait for y's
 * value, so the backward pass of a part of y (a micro-batch's loss in a
 * mean over micro-batches) starts as soon as that part is computed.
 * Otherwise ones_like(y): a loop's gradient pops what the forward loop
 * pushed, and only y's value says that loop is done. */
static gr_output ones_seed(walk *w, gr_output y) {
  const gr_shape *sh = &y.node->out_shapes[y.index];
  if (!w->no_control_flow || gr_shape_num_elements(sh) < 0) return gr_ones_like(w->g, y);
  return gr_ones(w->g, y.node->out_dtypes[y.index], *sh);
}

/* Seeds the ys' gradients and builds the gradient of every group (a node,
 * or a whole loop) on a path from the xs to the ys, in reverse topological
 * order of the groups. */
static gr_status backprop(walk *w, const gr_output *ys, int ny, const gr_output *grad_ys,
                          const ad_reverse *rv) {
  gr_graph *g = w->g;
  for (int id = 0; id < w->total; id++) {
    w->out_base[id] = w->nout;
    w->nout += gr_graph_node(g, id)->num_outputs;
  }
  w->grads = calloc((size_t)w->nout + 1, sizeof *w->grads);
  int ngroups = w->grads ? group_sort(w) : -1;
  if (ngroups < 0) return fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_status st = GR_OK;
  for (int i = 0; i < ny && st == GR_OK; i++) {
    int first_id = gr_graph_num_nodes(g);
    gr_output seed = grad_ys && grad_ys[i].node ? grad_ys[i] : ones_seed(w, ys[i]);
    colocate_new(g, first_id, ys[i].node); /* the seed starts where y is */
    if (!seed.node || !push(&w->grads[w->out_base[ys[i].node->id] + ys[i].index], seed))
      st = gr_graph_error(g) ? gr_graph_error(g)->code : fail(g, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  }
  for (int k = ngroups - 1; k >= 0 && st == GR_OK; k--) {
    int gi = w->group_order[k];
    if (gi >= w->total) { /* a loop: on the path when one of its exits is */
      int frame = gi - w->total;
      bool on = false;
      for (int id = 0; id < w->total && !on; id++) {
        gr_node *n = gr_graph_node(g, id);
        on = n->op->cf_kind == GR_CF_EXIT && w->fr.of_node[id] == frame && w->from_x[id] &&
             w->to_y[id];
      }
      if (on) st = loop_group(w, frame, rv);
      continue;
    }
    if (!w->from_x[gi] || !w->to_y[gi]) continue;
    /* in a reverse loop, values from outside the forward loop are read
     * through remap and are no node of this walk; a gradients() in a loop
     * body differentiates the enclosing frames' nodes too (check_body_paths) */
    if (rv && w->fr.of_node[gi] != w->base) continue;
    st = node_group(w, gr_graph_node(g, gi), rv);
  }
  return st;
}

/* dxs[i]: the sum of x i's contributions (zeros, or {NULL} when
 * null_for_unconnected, for an x the ys do not depend on). */
static void sum_dxs(walk *w, const gr_output *xs, int nx, bool null_for_unconnected,
                    gr_output *dxs) {
  gr_graph *g = w->g;
  contrib none = {NULL, 0, 0};
  for (int i = 0; i < nx; i++) {
    contrib *c = w->grads ? &w->grads[w->out_base[xs[i].node->id] + xs[i].index] : &none;
    char scope[600];
    snprintf(scope, sizeof scope, "/gradients/%s_grad", xs[i].node->name);
    gr_graph_push_name_scope(g, scope);
    int first_id = gr_graph_num_nodes(g);
    dxs[i] = total(g, c, w->no_control_flow);
    if (!dxs[i].node && !null_for_unconnected) dxs[i] = gr_zeros_like(g, xs[i]);
    gr_graph_pop_name_scope(g);
    /* the sum of several contributions runs with x (as TensorFlow's
     * colocate_gradients_with_ops): for a variable on a parameter server,
     * the replicas' or micro-batches' gradients are added there, unless a
     * device scope around the call says otherwise */
    for (int id = first_id; id < gr_graph_num_nodes(g); id++) {
      gr_node *n = gr_graph_node(g, id);
      if (!n->colocate_with && !n->requested_device[0])
        gr_graph_set_colocation_hint(g, n, xs[i].node->name);
    }
  }
}

gr_status ad_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs,
                       const char *base, const ad_reverse *rv) {
  for (int i = 0; i < nx; i++) dxs[i] = (gr_output){NULL, 0};
  if (gr_graph_error(g)) return gr_graph_error(g)->code;
  gr_status st = check_ends(g, ys, ny, xs, nx);
  if (st != GR_OK) return st;
  walk w;
  memset(&w, 0, sizeof w); /* no float y: no walk, every x unconnected */
  w.g = g;
  ad_pushes pushes = {NULL, 0};
  gr_output *fys = calloc((size_t)ny + 1, sizeof *fys),
            *fseed = calloc((size_t)ny + 1, sizeof *fseed);
  int nf = fys && fseed ? float_ys(ys, ny, grad_ys, fys, fseed) : 0;
  if (!fys || !fseed) st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (st == GR_OK && nf > 0) {
    st = walk_start(&w, g, fys, nf, base);
    if (st == GR_OK && ad_pushes_collect(g, w.total, &pushes) != GR_OK)
      st = fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    if (st == GR_OK) {
      mark_from_x(&w, xs, nx, &pushes);
      mark_to_y(&w, fys, nf);
      st = ad_refuse_loop_gradients(g, &w.fr, &pushes, w.from_x, w.to_y, w.base);
    }
    if (st == GR_OK && !rv) st = check_body_paths(&w);
    if (st == GR_OK) st = backprop(&w, fys, nf, fseed, rv);
  }
  if (st == GR_OK) sum_dxs(&w, xs, nx, null_for_unconnected, dxs);
  if (st == GR_OK && gr_graph_error(g)) st = gr_graph_error(g)->code;
  walk_free(&w);
  ad_pushes_free(&pushes);
  free(fys);
  free(fseed);
  if (st != GR_OK)
    for (int i = 0; i < nx; i++) dxs[i] = (gr_output){NULL, 0};
  return st;
}

gr_status gr_gradients(gr_graph *g, const gr_output *ys, int ny, const gr_output *xs, int nx,
                       const gr_output *grad_ys, bool null_for_unconnected, gr_output *dxs) {
  gr_ops_register_all(); /* the gradients of core's own ops (a graph built with core alone) */
  return ad_gradients(g, ys, ny, xs, nx, grad_ys, null_for_unconnected, dxs, NULL, NULL);
}
