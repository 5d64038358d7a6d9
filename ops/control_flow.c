/* Control flow in the dataflow graph: the gradients of the primitives switch,
 * merge, enter, exit, next_iteration and loop_cond (defined in core,
 * core/base_ops.c), control_trigger, and the builders gr_cond and gr_while_loop, which
 * assemble them as TensorFlow 1 does: values a branch or a loop body uses
 * from outside are routed through switch (cond) or a constant enter (loop),
 * and nodes without inputs are tied to the branch or loop by a control
 * input from a pivot, so they run only when and where they should. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- gradients of the primitives (defined in core/base_ops.c) ------------------------ */

/* The gradient flowing out of a cond branch: merge the branch gradients
 * (zeros for a side that got none, live exactly when its side ran). */
gr_status gr_ops_grad_switch(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output parts[2];
  for (int k = 0; k < 2; k++)
    parts[k] = c->grads[k].node ? c->grads[k] : gr_zeros_like(g, gr_grad_y(c, k));
  c->dinputs[0] = gr_op(g, "merge", NULL, parts, 2, NULL, 0);
  return GR_OK;
}

/* The gradient goes back to the input that was taken (value_index tells). */
gr_status gr_ops_grad_merge(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  if (c->node->num_inputs != 2)
    return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                               "gradients: merge '%s' has %d inputs; only 2-way merges (cond) "
                               "are differentiable",
                               c->node->name, c->node->num_inputs);
  gr_output took1 = gr_equal(g, gr_grad_y(c, 1), gr_const_i32(g, 1));
  gr_output in[2] = {c->grads[0], took1};
  gr_output s = gr_op(g, "switch", NULL, in, 2, NULL, 0);
  c->dinputs[0] = gr_output_at(s, 0);
  c->dinputs[1] = gr_output_at(s, 1);
  return GR_OK;
}

/* enter, exit, next_iteration, loop_cond: loops are differentiated as a
 * whole (while_grad.c), never node by node. */
gr_status gr_ops_grad_loop(gr_grad_ctx *c) {
  return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                             "gradients: differentiating through while loops is not supported "
                             "yet (node '%s', op %s)",
                             c->node->name, c->node->op->name);
}

/* ---- control_trigger ------------------------------------------------------------------------ */

/* Live even when a control input is dead (TensorFlow's ControlTrigger): a
 * loop's next iteration waits through it for updates that may not run, such
 * as those in a cond branch of the body. */
static gr_status control_trigger_kernel(gr_kernel_ctx *ctx) {
  ctx->dead = false;
  return GR_OK;
}

const gr_op_def gr_op_control_trigger = {
    .name = "control_trigger",
    .doc = "does nothing and is live even when a control input is dead: waits for nodes that may "
           "not run",
    .num_outputs = 0,
    .shape_fn = gr_shape_fn_scalar_none,
    .kernel = control_trigger_kernel,
    .flags = GR_OP_RUNS_DEAD | GR_OP_NO_GRADIENT};

/* ---- builders ------------------------------------------------------------------------------- */

typedef struct capture {
  gr_output outside, inside;
} capture;

/* Whether node id (>= first) belongs to the branch or loop being built:
 * it has a control input (the pivot), is an enter (of a loop nested in
 * this one, capturing a value from further out), or has an input that
 * belongs. Nodes built meanwhile from outside values alone, without control
 * inputs (a gradient's stack push of a forward value, or a pop in the
 * reverse loop of an enclosing loop), do not: they stay where their inputs
 * are, and the branch or loop captures them like any value from outside.
 * in[id - first]: 0 unknown, 1 outside, 2 inside. Inputs normally have lower
 * ids; a capture enter built after its consumer is an enter (no recursion). */
static bool belongs(const gr_graph *g, int first, unsigned char *in, int id) {
  if (in[id - first]) return in[id - first] == 2;
  const gr_node *n = gr_graph_node(g, id);
  bool inside = n->num_control_inputs > 0 || n->op->cf_kind == GR_CF_ENTER;
  for (int j = 0; j < n->num_inputs && !inside; j++) {
    int s = n->inputs[j].node->id;
    inside = s >= first && belongs(g, first, in, s);
  }
  in[id - first] = inside ? 2 : 1;
  return inside;
}

/* Reroutes every input of the nodes [first, end) that comes from outside
 * (except the skip range) through make(outside): a switch output for a
 * branch, a constant enter for a loop. */
static void reroute(gr_graph *g, int first, int end, int skip_lo, int skip_hi,
                    gr_output (*make)(gr_graph *, gr_output, void *), void *arg) {
  capture *caps = NULL;
  int ncaps = 0, cap = 0;
  /* capture enters, made past end, belong */
  unsigned char *in = calloc((size_t)(end - first) + 1, 1);
  if (!in) {
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (int id = first; id < end; id++) {
    gr_node *n = gr_graph_node(g, id);
    if (id >= skip_lo && id < skip_hi) continue;
    if (!belongs(g, first, in, id)) continue;
    for (int j = 0; j < n->num_inputs; j++) {
      gr_output src = n->inputs[j];
      int s = src.node->id;
      if (s >= end || (s >= first && belongs(g, first, in, s))) continue;
      gr_output inside = {NULL, 0};
      for (int k = 0; k < ncaps; k++)
        if (caps[k].outside.node == src.node && caps[k].outside.index == src.index)
          inside = caps[k].inside;
      if (!inside.node) {
        inside = make(g, src, arg);
        if (!inside.node) goto done;
        if (ncaps == cap) {
          cap = cap ? cap * 2 : 8;
          capture *c2 = gr_realloc_array(caps, (size_t)cap, sizeof *c2);
          if (!c2) goto done;
          caps = c2;
        }
        caps[ncaps++] = (capture){src, inside};
      }
      gr_graph_set_input(g, n, j, inside);
    }
  }
done:
  free(in);
  free(caps);
}

static bool has_control_input(const gr_node *n, const gr_node *dep) {
  for (int j = 0; j < n->num_control_inputs; j++)
    if (n->control_inputs[j] == dep) return true;
  return false;
}

/* A branch or the condition of a loop hangs every node it builds off a pivot
 * by a control input, but a node with a data input needs none: its inputs
 * come through the branch's switches or from inside the loop's frame, so it
 * is live exactly when the pivot is. Dropping it saves a control edge per
 * node, and a transfer where the node runs on another device. */
static void drop_pivot(gr_graph *g, int lo, int hi, const gr_node *pivot) {
  for (int id = lo; id < hi; id++) {
    gr_node *n = gr_graph_node(g, id);
    if (n->num_inputs && has_control_input(n, pivot)) gr_graph_remove_control_input(n, pivot);
  }
}

/* The same for a loop body [lo, hi), whose pivot is dead in the iteration
 * that ends the loop: a node keeps it unless one of its inputs is tied to
 * it (a body value, or a node that is), since loop invariants stay live.
 * A nested loop's enter fed only by invariants gets the pivot, so that the
 * nested loop does not run again when the outer one ends (a loop nested
 * directly in the body: deeper ones are inside it). */
static void drop_body_pivot(gr_graph *g, int lo, int hi, const gr_output *body, int nbody) {
  const gr_node *pivot = body[0].node;
  unsigned char *tied = calloc((size_t)(hi - lo) + 1, 1);
  int *depth = gr_loop_depths(g, lo, hi);
  if (!tied || !depth) {
    free(tied);
    free(depth);
    gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "while_loop: out of memory");
    return;
  }
  for (int i = 0; i < nbody; i++) tied[body[i].node->id - lo] = 1; /* the switches' true sides */
  for (int id = lo; id < hi; id++) {
    gr_node *n = gr_graph_node(g, id);
    bool from_tied = false; /* a data input, or a control input other than the pivot (a
                               nested loop's pivot: constants of its body), tied to it */
    for (int j = 0; j < n->num_inputs + n->num_control_inputs && !from_tied; j++) {
      const gr_node *p = gr_node_predecessor(n, j);
      int s = p->id;
      from_tied = p != pivot && s >= lo && s < id && tied[s - lo];
    }
    if (tied[id - lo]) continue;
    if (has_control_input(n, pivot)) {
      if (from_tied) gr_graph_remove_control_input(n, pivot);
      tied[id - lo] = 1;
    } else if (from_tied) {
      tied[id - lo] = 1;
    } else if (n->op->cf_kind == GR_CF_ENTER && depth[id - lo] == 1) {
      /* only a loop nested directly in the body: the enters of a loop
       * nested deeper take their values inside that loop, whose own enters
       * are tied already (the pivot would cross two frames) */
      gr_graph_add_control_input(g, n, (gr_node *)pivot);
      tied[id - lo] = 1;
    }
  }
  free(depth);
  free(tied);
}

typedef struct branch_arg {
  gr_output pred;
  int side;
} branch_arg;

static gr_output branch_capture(gr_graph *g, gr_output outside, void *arg) {
  branch_arg *b = arg;
  gr_output in[2] = {outside, b->pred};
  gr_output sw = gr_op(g, "switch", NULL, in, 2, NULL, 0);
  /* where its data is, as TensorFlow colocates a cond's switches: only the
   * predicate travels, and an untaken branch moves no data */
  if (sw.node) gr_graph_set_colocation_hint(g, sw.node, outside.node->name);
  return gr_output_at(sw, b->side);
}

/* gr_cond's branches, which give a number of outputs fixed in advance. */
typedef struct fixed_branches {
  gr_branch_fn fn[2]; /* else, then */
  void *arg;
  int n;
} fixed_branches;

static int fixed_else(gr_graph *g, void *arg, gr_output *outs, int max_outputs) {
  fixed_branches *f = arg;
  (void)max_outputs;
  f->fn[0](g, f->arg, outs);
  return f->n;
}

static int fixed_then(gr_graph *g, void *arg, gr_output *outs, int max_outputs) {
  fixed_branches *f = arg;
  (void)max_outputs;
  f->fn[1](g, f->arg, outs);
  return f->n;
}

gr_status gr_cond(gr_graph *g, gr_output pred, gr_branch_fn then_fn, gr_branch_fn else_fn,
                  void *arg, int num_outputs, gr_output *outputs) {
  for (int i = 0; i < num_outputs; i++) outputs[i] = (gr_output){NULL, 0};
  if (!pred.node) return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
  if (num_outputs < 1 || num_outputs > GR_COND_MAX_OUTPUTS)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "cond: 1 to %d outputs, got %d",
                               GR_COND_MAX_OUTPUTS, num_outputs);
  fixed_branches f = {{else_fn, then_fn}, arg, num_outputs};
  gr_output outs[GR_COND_MAX_OUTPUTS];
  int n;
  gr_status s = gr_cond_tuple(g, pred, fixed_then, fixed_else, &f, &n, outs);
  memcpy(outputs, outs, sizeof(gr_output) * (size_t)num_outputs);
  return s;
}

gr_status gr_cond_tuple(gr_graph *g, gr_output pred, gr_branch_tuple_fn then_fn,
                        gr_branch_tuple_fn else_fn, void *arg, int *num_outputs,
                        gr_output *outputs) {
  *num_outputs = 0;
  for (int i = 0; i < GR_COND_MAX_OUTPUTS; i++) outputs[i] = (gr_output){NULL, 0};
  if (!pred.node) return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
  gr_graph_push_name_scope(g, "cond");
  gr_output both[2][GR_COND_MAX_OUTPUTS];
  int n[2] = {0, 0};
  gr_output sw = gr_op(g, "switch", "pivot", (gr_output[]){pred, pred}, 2, NULL, 0);
  for (int side = 1; side >= 0 && !gr_graph_error(g); side--) {
    gr_output pivot = gr_identity(g, gr_output_at(sw, side));
    int first = gr_graph_num_nodes(g);
    gr_graph_push_control_deps(g, &pivot, 1);
    n[side] = (side ? then_fn : else_fn)(g, arg, both[side], GR_COND_MAX_OUTPUTS);
    gr_graph_pop_control_deps(g);
    int end = gr_graph_num_nodes(g);
    branch_arg b = {pred, side};
    reroute(g, first, end, -1, -1, branch_capture, &b);
    drop_pivot(g, first, end, pivot.node);
    if (!gr_graph_error(g) && (n[side] < 1 || n[side] > GR_COND_MAX_OUTPUTS))
      gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                          "cond: the %s branch gives %d outputs (1 to %d)", side ? "then" : "else",
                          n[side], GR_COND_MAX_OUTPUTS);
    if (!gr_graph_error(g) && side == 0 && n[0] != n[1])
      gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                          "cond: the then branch gives %d outputs and the else branch %d", n[1],
                          n[0]);
    for (int i = 0; i < n[side] && !gr_graph_error(g); i++) {
      if (!both[side][i].node)
        gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "cond: %s branch output %d is null",
                            side ? "then" : "else", i);
      else if (both[side][i].node->id < first) /* returned from outside: through its switch */
        both[side][i] = branch_capture(g, both[side][i], &b);
    }
  }
  for (int i = 0; i < n[1] && !gr_graph_error(g); i++) {
    gr_output in[2] = {both[0][i], both[1][i]};
    const gr_node *a = in[0].node, *b = in[1].node;
    if (a->out_dtypes[in[0].index] != b->out_dtypes[in[1].index])
      gr_graph_set_errorf(
          g, GR_ERR_DTYPE, "cond: output %d is %s in one branch and %s in the other", i,
          gr_dtype_name(a->out_dtypes[in[0].index]), gr_dtype_name(b->out_dtypes[in[1].index]));
    else
      outputs[i] = gr_op(g, "merge", NULL, in, 2, NULL, 0);
  }
  gr_graph_pop_name_scope(g);
  if (gr_graph_error(g)) return gr_graph_error(g)->code;
  *num_outputs = n[1];
  return GR_OK;
}

typedef struct loop_arg {
  const char *frame;
  int par;
  int lo, hi;     /* the condition and body, once built */
  gr_node *pivot; /* the first merge: reads made in the loop hang off it */
} loop_arg;

static gr_output loop_capture(gr_graph *g, gr_output outside, void *arg) {
  loop_arg *l = arg;
  gr_attr a[] = {gr_attr_string("frame_name", l->frame), gr_attr_bool("is_constant", true),
                 gr_attr_int("parallel_iterations", l->par)};
  gr_output in = gr_op(g, "enter", NULL, &outside, 1, a, 3);
  if (!in.node || !l->pivot || !gr_ops_is_variable_read(outside.node) ||
      !gr_loop_writes_var(g, l->lo, l->hi, outside.node))
    return in;
  /* the loop updates this variable: read it in every iteration */
  gr_output fresh = gr_ops_read_value_via(g, outside.node, in);
  if (fresh.node) gr_graph_add_control_input_unchecked(g, fresh.node, l->pivot);
  return fresh;
}

/* A control input that a loop node [first, end) takes from a node built
 * before the loop crosses into the loop's frame as TensorFlow routes it: a
 * scalar that runs after the outside node enters as a loop invariant, and
 * the node waits for that invariant instead (in every iteration). A node
 * of an enclosing loop is outside too: the enclosing loop reroutes the
 * scalar's own control input when it is built. The loop's own enters
 * [skip_lo, skip_hi) also wait for the outside node. */
static void reroute_control(gr_graph *g, int first, int end, int skip_lo, int skip_hi,
                            loop_arg *la) {
  capture *caps = NULL;
  int ncaps = 0, cap = 0;
  for (int id = first; id < end && !gr_graph_error(g); id++) {
    if (id >= skip_lo && id < skip_hi) continue;
    gr_node *n = gr_graph_node(g, id);
    for (int j = 0; j < n->num_control_inputs; j++) {
      gr_node *dep = n->control_inputs[j];
      if (dep->id >= first) continue;
      gr_node *inside = NULL;
      for (int k = 0; k < ncaps && !inside; k++)
        if (caps[k].outside.node == dep) inside = caps[k].inside.node;
      if (!inside) {
        gr_output token = gr_const_i32(g, 0);
        if (!token.node || gr_graph_add_control_input_unchecked(g, token.node, dep) != GR_OK) break;
        inside = loop_capture(g, token, la).node;
        if (!inside) break;
        if (ncaps == cap) {
          cap = cap ? cap * 2 : 8;
          capture *c2 = gr_realloc_array(caps, (size_t)cap, sizeof *c2);
          if (!c2) {
            gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "while_loop: out of memory");
            break;
          }
          caps = c2;
        }
        caps[ncaps++] = (capture){{dep, 0}, {inside, 0}};
      }
      /* same slot: the other control inputs keep their order */
      gr_graph_replace_control_input(g, n, j, inside);
    }
  }
  /* The loop's own enters wait for those outside nodes too, so the loop,
   * and what runs after it, is ordered after them even when the body runs
   * zero times (TensorFlow 2's While op waits for its captures alike). */
  for (int k = 0; k < ncaps && !gr_graph_error(g); k++)
    for (int id = skip_lo; id < skip_hi; id++) {
      gr_node *e = gr_graph_node(g, id);
      if (e->op->cf_kind == GR_CF_ENTER && !has_control_input(e, caps[k].outside.node))
        gr_graph_add_control_input_unchecked(g, e, caps[k].outside.node);
    }
  free(caps);
}

gr_status gr_while_loop(gr_graph *g, gr_loop_cond_fn cond_fn, gr_loop_body_fn body_fn, void *arg,
                        int n, gr_output *loop_vars, int parallel_iterations) {
  if (n < 1 || n > 64)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "while_loop: 1 to 64 loop variables, got %d", n);
  for (int i = 0; i < n; i++)
    if (!loop_vars[i].node)
      return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
  if (parallel_iterations <= 0) parallel_iterations = 10;
  int start = gr_graph_num_nodes(g);
  char frame[96];
  snprintf(frame, sizeof frame, "%s%swhile_%d", gr_graph_name_scope(g),
           *gr_graph_name_scope(g) ? "/" : "", start);
  gr_graph_push_name_scope(g, "while");
  gr_graph_push_no_control_deps(g); /* the loop's own nodes hang off nothing outside */
  loop_arg la = {gr_graph_strdup(g, frame), parallel_iterations, 0, 0, NULL};
  gr_output merges[64], body[64], outside[64];
  memcpy(outside, loop_vars, sizeof(gr_output) * (size_t)n);
  for (int i = 0; i < n; i++) {
    gr_attr a[] = {gr_attr_string("frame_name", la.frame), gr_attr_bool("is_constant", false),
                   gr_attr_int("parallel_iterations", parallel_iterations)};
    gr_output e = gr_op(g, "enter", NULL, &loop_vars[i], 1, a, 3);
    merges[i] = gr_op(g, "merge", NULL, (gr_output[]){e, e}, 2, NULL, 0);
  }
  int own_end = gr_graph_num_nodes(g);
  if (gr_graph_error(g)) goto out;
  /* the condition: nodes without inputs hang off the first merge */
  gr_graph_push_control_deps(g, &merges[0], 1);
  gr_output pred = cond_fn(g, arg, merges);
  gr_graph_pop_control_deps(g);
  if (!pred.node) goto out;
  if (pred.node->out_dtypes[pred.index] != GR_BOOL) {
    gr_graph_set_errorf(g, GR_ERR_DTYPE, "while_loop: the condition is %s, not bool",
                        gr_dtype_name(pred.node->out_dtypes[pred.index]));
    goto out;
  }
  gr_output lc = gr_op(g, "loop_cond", NULL, &pred, 1, NULL, 0);
  gr_output exits[64];
  for (int i = 0; i < n; i++) {
    gr_output s = gr_op(g, "switch", NULL, (gr_output[]){merges[i], lc}, 2, NULL, 0);
    exits[i] = gr_op(g, "exit", NULL, (gr_output[]){gr_output_at(s, 0)}, 1, NULL, 0);
    body[i] = gr_identity(g, gr_output_at(s, 1));
  }
  if (gr_graph_error(g)) goto out;
  gr_output results[64];
  gr_graph_push_control_deps(g, &body[0], 1);
  body_fn(g, arg, body, results);
  gr_graph_pop_control_deps(g);
  int body_start = body[0].node->id, body_end = gr_graph_num_nodes(g);
  if (gr_graph_error(g)) goto out;
  for (int i = 0; i < n; i++) {
    if (!results[i].node) {
      gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "while_loop: body result %d is null", i);
      goto out;
    }
    const gr_node *v = loop_vars[i].node, *r = results[i].node;
    gr_dtype vd = v->out_dtypes[loop_vars[i].index], rd = r->out_dtypes[results[i].index];
    const gr_shape *vs = &v->out_shapes[loop_vars[i].index], *rs = &r->out_shapes[results[i].index];
    if (vd != rd || !gr_shape_compatible(vs, rs)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      gr_graph_set_errorf(g, GR_ERR_SHAPE,
                          "while_loop: loop variable %d is %s %s but the body makes it %s %s "
                          "(node '%s')",
                          i, gr_dtype_name(vd), gr_shape_str(vs, a), gr_dtype_name(rd),
                          gr_shape_str(rs, b), r->name);
      goto out;
    }
  }
  /* values from outside the loop used inside: constant enters */
  la.lo = own_end;
  la.hi = body_end;
  la.pivot = merges[0].node;
  reroute(g, start, gr_graph_num_nodes(g), start, own_end, loop_capture, &la);
  reroute_control(g, start, gr_graph_num_nodes(g), start, own_end, &la);
  drop_pivot(g, own_end, body_start, merges[0].node);
  drop_body_pivot(g, body_start, body_end, body, n);
  gr_output nexts[64];
  for (int i = 0; i < n; i++) {
    gr_output r = results[i];
    if (r.node->id < start) { /* an outside value: through the pivot, dead when the loop ends */
      gr_output inv = loop_capture(g, r, &la);
      gr_graph_push_control_deps(g, &body[0], 1);
      r = gr_identity(g, inv);
      gr_graph_pop_control_deps(g);
    }
    gr_output nx = gr_op(g, "next_iteration", NULL, &r, 1, NULL, 0);
    if (!nx.node) goto out;
    gr_graph_set_input(g, merges[i].node, 1, nx);
    nexts[i] = nx;
  }
  if (gr_loop_order_updates(g, own_end, body_end, nexts, n) != GR_OK) goto out;
  for (int i = 0; i < n; i++) loop_vars[i] = exits[i];
out:
  gr_graph_pop_control_deps(g);
  gr_graph_pop_name_scope(g);
  if (gr_graph_error(g)) {
    for (int i = 0; i < n; i++) loop_vars[i] = (gr_output){NULL, 0};
    return gr_graph_error(g)->code;
  }
  return GR_OK;
}
