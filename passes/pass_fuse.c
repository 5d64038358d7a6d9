/* Graph pass: fusion. Chains of nodes that read and write the same large
 * tensor one after the other become one node that does the work in one
 * pass over memory, with the arithmetic of the nodes it replaces (so the
 * same bits; docs/passes.md):
 *
 * - conv2d -> bias_add (or add of an [out_c] vector; NHWC) or batch_norm
 *   at inference -> relu (each part optional, one at least): one
 *   _fused_conv2d, its epilogue applied to each block of the output as
 *   the convolution finishes it;
 * - batch_norm (in training behind the identity_n that waits for its
 *   moving-statistics updates) -> relu: batch_norm with attr relu;
 * - relu_grad -> batch_norm_grad (the backward pass of conv, batch norm,
 *   relu, conv): batch_norm_grad with input relu_y, which masks dy;
 * - chains of f32/f64 elementwise ops (add, sub, mul, div, maximum,
 *   minimum, relu_grad, neg, square, relu) of one known shape, scalars
 *   aside, as the backward pass and the optimizers' inputs build them: one
 *   _fused_elementwise named after the chain's last node, which runs the
 *   chain per block of elements (ops/fused_elementwise.c);
 * - such a chain (one op at least) that computes the gradient an update
 *   (apply_sgd, apply_momentum, apply_adam) alone reads: the update with
 *   attr grad_program, which computes each block of the gradient as it
 *   updates the variable and its slots (ops/optimizers.c).
 *
 * A node is absorbed only when the chain is its only reader: each
 * intermediate value has one consumer among the nodes kept, is not
 * fetched and not fed, the absorbed node is no target, nothing has a
 * control input on it, it is in no colocation group (a colocation hint on
 * it, as autodiff sets, moves to the host), and it runs where the host
 * runs (the same device spec, after colocation, and the same assigned
 * device). The host keeps its name; consumers of an absorbed node read the
 * host's output (or the identity_n's) instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes_internal.h"

typedef struct fuse_ops {
  const gr_op_def *conv, *bias_add, *add, *batch_norm, *batch_norm_grad, *relu, *relu_grad,
      *identity_n, *fused_conv, *fused_elementwise, *apply_sgd, *apply_momentum, *apply_adam;
} fuse_ops;

typedef struct fuser {
  gr_passes_ctx *c;
  fuse_ops op;
  int *first;      /* per node: its first endpoint's index in uses / user */
  int *uses;       /* per endpoint: readers among the kept nodes, plus fetches */
  int *user;       /* per endpoint: a kept node reading it (the only one when uses == 1) */
  uint8_t *pinned; /* per node: fetched (any output), a target, or a colocation group target */
  int *ctrl_users; /* per node: kept nodes with a control input on it */
  int absorbed;    /* nodes absorbed so far */
} fuser;

gr_output gr_passes_resolve(const gr_passes_ctx *c, gr_output o) {
  for (;;) {
    o.node = gr_graph_node(c->g, c->rep[o.node->id]);
    if (!c->host || c->host[o.node->id] < 0) return o;
    o = c->redirect[o.node->id];
  }
}

/* Copied with its inputs (not a stand-in, not folded, not replaced by CSE). */
static bool kept(const gr_passes_ctx *c, int v) {
  return c->mark[v] >= GR_PRUNE_NEEDED && c->rep[v] == v && !c->folded[v];
}

static int ep(const fuser *f, gr_output o) {
  return f->first[o.node->id] + o.index;
}

static bool same_str(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

/* a and b run on the same device. */
static bool same_place(const gr_graph *g, const gr_node *a, const gr_node *b) {
  return strcmp(gr_graph_resolve_device(g, a), gr_graph_resolve_device(g, b)) == 0 &&
         same_str(a->assigned_device, b->assigned_device);
}

/* The node reading o when it is o's only reader among the kept nodes and o
 * is not fetched (uses counts fetches), else NULL. */
static const gr_node *sole_user(const fuser *f, gr_output o) {
  int e = ep(f, o);
  return f->uses[e] == 1 && f->user[e] >= 0 ? gr_graph_node(f->c->g, f->user[e]) : NULL;
}

/* May host absorb node n (of op `op`)? */
static bool absorbable(const fuser *f, const gr_node *n, const gr_op_def *op, const gr_node *host) {
  const gr_passes_ctx *c = f->c;
  int v = n->id;
  return n->op == op && kept(c, v) && !c->fed[v] && !f->pinned[v] && f->ctrl_users[v] == 0 &&
         c->host[v] < 0 && !c->fusion[v] && (!n->colocate_with || n->colocate_hint) &&
         same_place(c->g, n, host);
}

/* May node n be a host: kept, nothing fed, not a host or absorbed yet. */
static bool hostable(const fuser *f, const gr_node *n) {
  const gr_passes_ctx *c = f->c;
  return kept(c, n->id) && !c->fed[n->id] && c->host[n->id] < 0 && !c->fusion[n->id];
}

/* Input i of n, resolved through CSE. */
static gr_output input(const fuser *f, const gr_node *n, int i) {
  return gr_passes_resolve(f->c, n->inputs[i]);
}

static bool same_ep(gr_output a, gr_output b) {
  return a.node == b.node && a.index == b.index;
}

/* A new fusion of host n: its inputs and attrs to start from. */
static gr_passes_fusion *start(fuser *f, const gr_node *n, const gr_op_def *op) {
  gr_passes_fusion *u = calloc(1, sizeof *u);
  if (!u) return NULL;
  u->op = op;
  GR_ASSERT(n->num_inputs <= GR_FUSE_MAX_INPUTS && n->num_attrs <= GR_FUSE_MAX_ATTRS - 2);
  for (int i = 0; i < n->num_inputs; i++) u->in[i] = input(f, n, i);
  u->num_inputs = n->num_inputs;
  memcpy(u->attrs, n->attrs, sizeof(gr_attr) * (size_t)n->num_attrs);
  u->num_attrs = n->num_attrs;
  return u;
}

/* Sets attr a of u (replacing one of the same name). */
static void set_attr(gr_passes_fusion *u, gr_attr a) {
  for (int i = 0; i < u->num_attrs; i++)
    if (strcmp(u->attrs[i].name, a.name) == 0) {
      u->attrs[i] = a;
      return;
    }
  GR_ASSERT(u->num_attrs < GR_FUSE_MAX_ATTRS);
  u->attrs[u->num_attrs++] = a;
}

/* Records u for host h, absorbing u->absorbed, whose values now come
 * from `value`. */
static void commit(fuser *f, const gr_node *h, gr_passes_fusion *u, gr_output value) {
  gr_passes_ctx *c = f->c;
  c->fusion[h->id] = u;
  for (int i = 0; i < u->num_absorbed; i++) {
    int v = u->absorbed[i]->id;
    c->host[v] = h->id;
    c->redirect[v] = value;
    f->absorbed++;
  }
}

/* Is o a vector of n f32 values (known shape)? */
static bool f32_vector(gr_output o, int64_t n) {
  const gr_shape *s = &o.node->out_shapes[o.index];
  return o.node->out_dtypes[o.index] == GR_F32 && s->rank == 1 && s->dims[0] == n;
}

/* conv2d -> bias (bias_add, or add of an [out_c] vector) or batch_norm at
 * inference -> relu: one _fused_conv2d. */
static gr_status fuse_conv(fuser *f, const gr_node *cv) {
  /* copied later (copy_at): nothing may wait for it but its chain */
  if (!hostable(f, cv) || cv->out_dtypes[0] != GR_F32 || f->ctrl_users[cv->id]) return GR_OK;
  const gr_shape *ys = &cv->out_shapes[0];
  int64_t oc = -1;
  const char *fmt = gr_node_attr_string(cv, "data_format", "NHWC");
  bool nhwc = strcmp(fmt, "NHWC") == 0;
  if (ys->rank == 4) oc = ys->dims[nhwc ? 3 : 1];
  gr_output cur = {(gr_node *)cv, 0};
  gr_output args[4];
  int nargs = 0;
  const char *kind = NULL;
  double eps = 0;
  const gr_node *abs[GR_FUSE_MAX_ABSORBED];
  int na = 0;
  const gr_node *u = sole_user(f, cur);
  if (u && nhwc && oc > 0 &&
      (absorbable(f, u, f->op.bias_add, cv) || absorbable(f, u, f->op.add, cv))) {
    /* + an [oc] vector, either side of an add: the same f32 sum */
    int other = same_ep(input(f, u, 0), cur) ? 1 : same_ep(input(f, u, 1), cur) ? 0 : -1;
    if (u->op == f->op.bias_add && other != 1) other = -1;
    if (other >= 0 && f32_vector(input(f, u, other), oc) && gr_shape_equal(&u->out_shapes[0], ys)) {
      args[nargs++] = input(f, u, other);
      kind = "bias_add";
      abs[na++] = u;
      cur = (gr_output){(gr_node *)u, 0};
    }
  } else if (u && absorbable(f, u, f->op.batch_norm, cv) && same_ep(input(f, u, 0), cur) &&
             !gr_node_attr_bool(u, "training", true) && !gr_node_attr_bool(u, "relu", false) &&
             strcmp(gr_node_attr_string(u, "data_format", "NHWC"), fmt) == 0 && oc > 0) {
    bool others_read = false;
    for (int i = 1; i < u->num_outputs; i++)
      others_read |= f->uses[ep(f, (gr_output){(gr_node *)u, i})] > 0;
    for (int i = 1; i < 5 && !others_read; i++) others_read = !f32_vector(input(f, u, i), oc);
    if (!others_read) {
      for (int i = 1; i < 5; i++) args[nargs++] = input(f, u, i);
      kind = "batch_norm";
      eps = gr_node_attr_float(u, "epsilon", 1e-3);
      abs[na++] = u;
      cur = (gr_output){(gr_node *)u, 0};
    }
  }
  u = sole_user(f, cur);
  bool relu = u && absorbable(f, u, f->op.relu, cv) && same_ep(input(f, u, 0), cur);
  if (relu) abs[na++] = u;
  if (!na) return GR_OK;
  gr_passes_fusion *fu = start(f, cv, f->op.fused_conv);
  if (!fu) return gr_error_set_oom(f->c->err);
  for (int i = 0; i < nargs; i++) fu->in[fu->num_inputs++] = args[i];
  static const char *const names[2][3] = {{"relu", "bias_add,relu", "batch_norm,relu"},
                                          {"", "bias_add", "batch_norm"}};
  int k = !kind ? 0 : kind[1] == 'i' ? 1 : 2;
  set_attr(fu, gr_attr_string("fused_ops", names[relu ? 0 : 1][k]));
  if (k == 2) set_attr(fu, gr_attr_float("epsilon", eps));
  memcpy(fu->absorbed, abs, sizeof(abs[0]) * (size_t)na);
  fu->num_absorbed = na;
  fu->copy_at = abs[na - 1]; /* after the bias and the statistics it now reads */
  commit(f, cv, fu, (gr_output){(gr_node *)cv, 0});
  return GR_OK;
}

/* batch_norm (through the identity_n of its updates) -> relu: batch_norm
 * with relu. */
static gr_status fuse_bn_relu(fuser *f, const gr_node *bn) {
  if (!hostable(f, bn) || gr_node_attr_bool(bn, "relu", false)) return GR_OK;
  gr_output y = {(gr_node *)bn, 0};
  const gr_node *u = sole_user(f, y);
  if (u && u->op == f->op.identity_n && kept(f->c, u->id) && !f->c->fed[u->id]) {
    int k = -1;
    for (int i = 0; i < u->num_inputs && k < 0; i++)
      if (same_ep(input(f, u, i), y)) k = i;
    if (k < 0) return GR_OK;
    y = (gr_output){(gr_node *)u, k};
    u = sole_user(f, y);
  }
  if (!u || !absorbable(f, u, f->op.relu, bn) || !same_ep(input(f, u, 0), y)) return GR_OK;
  gr_passes_fusion *fu = start(f, bn, bn->op);
  if (!fu) return gr_error_set_oom(f->c->err);
  set_attr(fu, gr_attr_bool("relu", true));
  fu->absorbed[fu->num_absorbed++] = u;
  commit(f, bn, fu, y);
  return GR_OK;
}

/* relu_grad -> batch_norm_grad's dy: batch_norm_grad with relu_y. */
static gr_status fuse_relu_grad_bn(fuser *f, const gr_node *g) {
  if (!hostable(f, g) || g->num_inputs != 5) return GR_OK;
  gr_output dy = input(f, g, 0);
  const gr_node *u = dy.node;
  if (dy.index != 0 || sole_user(f, dy) != g || !absorbable(f, u, f->op.relu_grad, g)) return GR_OK;
  gr_passes_fusion *fu = start(f, g, g->op);
  if (!fu) return gr_error_set_oom(f->c->err);
  fu->in[0] = input(f, u, 0);
  fu->in[fu->num_inputs++] = input(f, u, 1);
  fu->absorbed[fu->num_absorbed++] = u;
  commit(f, g, fu, (gr_output){(gr_node *)g, 0});
  return GR_OK;
}

/* ---- elementwise chains: _fused_elementwise ---------------------------------------- */

/* A chain being gathered from its last node (the host): the leaves (inputs
 * of the fused node) and the steps in an order that computes operands
 * first; an operand is leaf i (i >= 0) or step k (-1 - k). */
typedef struct ew_chain {
  const gr_node *host; /* the node the chain becomes part of: the last, or an update */
  const gr_node *root; /* the last elementwise node */
  int max_steps;
  gr_output leaf[GR_FUSED_ELEMENTWISE_MAX_INPUTS];
  int num_leaves;
  const char *op[GR_FUSED_ELEMENTWISE_MAX_STEPS]; /* per step: its op, its operands */
  int operand[GR_FUSED_ELEMENTWISE_MAX_STEPS][2];
  int num_steps;
  const gr_node *node[GR_FUSED_ELEMENTWISE_MAX_STEPS]; /* the nodes taken, the root last */
  int num_nodes;
  int claimed; /* nodes taken into the chain so far (steps to come included) */
  bool too_big;
} ew_chain;

/* The steps node n takes: 1, an add_n of k inputs k - 1 adds (its sum,
 * left to right); 0 for another op. */
static int ew_steps(const gr_node *n) {
  if (strcmp(n->op->name, "add_n") == 0) return n->num_inputs - 1;
  return gr_fused_elementwise_op_index(n->op->name) >= 0;
}

/* Is n an f32 or f64 op of _fused_elementwise's set (or an add_n of two or
 * more) whose output has a known shape and whose inputs have that shape or
 * are scalars? */
static bool ew_op(const gr_node *n) {
  if (n->num_outputs != 1 || ew_steps(n) < 1) return false;
  const gr_shape *s = &n->out_shapes[0];
  gr_dtype dt = n->out_dtypes[0];
  if ((dt != GR_F32 && dt != GR_F64) || !gr_shape_is_fully_known(s)) return false;
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_output *o = &n->inputs[i];
    const gr_shape *is = &o->node->out_shapes[o->index];
    if (o->node->out_dtypes[o->index] != dt || (is->rank != 0 && !gr_shape_equal(is, s)))
      return false;
  }
  return true;
}

static int ew_leaf(ew_chain *ch, gr_output o) {
  for (int i = 0; i < ch->num_leaves; i++)
    if (same_ep(ch->leaf[i], o)) return i;
  if (ch->num_leaves == GR_FUSED_ELEMENTWISE_MAX_INPUTS)
    ch->too_big = true;
  else
    ch->leaf[ch->num_leaves++] = o;
  return ch->too_big ? 0 : ch->num_leaves - 1;
}

/* Adds n's step after those of the producers it absorbs; returns its
 * operand (-1 - step). */
static int ew_gather(const fuser *f, ew_chain *ch, const gr_node *n) {
  int ops[GR_FUSED_ELEMENTWISE_MAX_STEPS + 1] = {0};
  for (int i = 0; i < n->num_inputs && !ch->too_big; i++) {
    gr_output o = input(f, n, i);
    const gr_node *p = o.node;
    if (o.index == 0 && ew_op(p) && ch->claimed + ew_steps(p) <= ch->max_steps &&
        p->out_dtypes[0] == ch->root->out_dtypes[0] &&
        gr_shape_equal(&p->out_shapes[0], &ch->root->out_shapes[0]) && sole_user(f, o) == n &&
        absorbable(f, p, p->op, ch->host)) {
      ch->claimed += ew_steps(p);
      ops[i] = ew_gather(f, ch, p);
    } else
      ops[i] = ew_leaf(ch, o);
  }
  if (ch->too_big) return 0;
  GR_ASSERT(ch->num_steps + ew_steps(n) <= ch->max_steps);
  ch->node[ch->num_nodes++] = n;
  bool sum = strcmp(n->op->name, "add_n") == 0;
  int acc = ops[0];
  for (int i = 1; i < (sum ? n->num_inputs : 2); i++) { /* one step; an add_n's adds */
    ch->op[ch->num_steps] = sum ? "add" : n->op->name;
    ch->operand[ch->num_steps][0] = acc;
    ch->operand[ch->num_steps][1] =
        n->num_inputs > 1 ? ops[i] : -1 - GR_FUSED_ELEMENTWISE_MAX_STEPS;
    acc = -1 - ch->num_steps++;
  }
  return acc;
}

/* Gathers the chain from its root into ch; true when it is whole. */
static bool ew_chain_of(const fuser *f, ew_chain *ch) {
  ew_gather(f, ch, ch->root);
  return !ch->too_big;
}

/* The chain's leaves as u's inputs from `first`, its program as u's attr
 * `attr`, its nodes but the host absorbed. */
static void ew_commit(fuser *f, ew_chain *ch, gr_passes_fusion *u, int first, const char *attr) {
  memcpy(u->in + first, ch->leaf, sizeof(ch->leaf[0]) * (size_t)ch->num_leaves);
  u->num_inputs = first + ch->num_leaves;
  size_t len = 0;
  for (int k = 0; k < ch->num_steps; k++) {
    len += (size_t)snprintf(u->text + len, sizeof u->text - len, "%s%s", k ? ";" : "", ch->op[k]);
    for (int i = 0; i < 2; i++) {
      int o = ch->operand[k][i];
      if (o != -1 - GR_FUSED_ELEMENTWISE_MAX_STEPS) /* not the missing operand of a unary op */
        len += (size_t)snprintf(u->text + len, sizeof u->text - len, " %d",
                                o >= 0 ? o : ch->num_leaves - 1 - o);
    }
  }
  for (int k = 0; k < ch->num_nodes; k++)
    if (ch->node[k] != ch->host) u->absorbed[u->num_absorbed++] = ch->node[k];
  GR_ASSERT(len < sizeof u->text);
  set_attr(u, gr_attr_string(attr, u->text));
  commit(f, ch->host, u, (gr_output){(gr_node *)ch->host, 0});
}

/* A chain of elementwise ops ending at n, each value read by the next
 * alone: one _fused_elementwise named n. */
static gr_status fuse_elementwise(fuser *f, const gr_node *n) {
  if (!hostable(f, n) || !ew_op(n)) return GR_OK;
  ew_chain ch = {
      .host = n, .root = n, .max_steps = GR_FUSED_ELEMENTWISE_MAX_STEPS, .claimed = ew_steps(n)};
  if (ch.claimed > ch.max_steps || !ew_chain_of(f, &ch) || ch.num_nodes < 2) return GR_OK;
  gr_passes_fusion *u = calloc(1, sizeof *u);
  if (!u) return gr_error_set_oom(f->c->err);
  u->op = f->op.fused_elementwise;
  ew_commit(f, &ch, u, 0, "program");
  return GR_OK;
}

/* An update (apply_sgd, apply_momentum, apply_adam) whose gradient is a
 * chain of elementwise ops it alone reads: the update with the chain as
 * attr grad_program over the chain's inputs, so the gradient is never
 * stored. */
static gr_status fuse_apply(fuser *f, const gr_node *a) {
  if (!hostable(f, a) || a->num_inputs != 2 || *gr_node_attr_string(a, "grad_program", ""))
    return GR_OK;
  gr_output grad = input(f, a, 1);
  const gr_node *r = grad.node;
  if (grad.index != 0 || !ew_op(r) || sole_user(f, grad) != a || !absorbable(f, r, r->op, a))
    return GR_OK;
  ew_chain ch = {
      .host = a, .root = r, .max_steps = GR_FUSED_ELEMENTWISE_MAX_STEPS, .claimed = ew_steps(r)};
  if (ch.claimed > ch.max_steps || !ew_chain_of(f, &ch)) return GR_OK;
  gr_passes_fusion *u = start(f, a, a->op);
  if (!u) return gr_error_set_oom(f->c->err);
  ew_commit(f, &ch, u, 1, "grad_program");
  return GR_OK;
}

/* Readers of every endpoint, control readers, pinned nodes. */
static void count_uses(fuser *f) {
  gr_passes_ctx *c = f->c;
  for (int v = 0; v < c->n; v++) {
    const gr_node *n = gr_graph_node(c->g, v);
    if (!kept(c, v) && c->mark[v] != GR_PRUNE_FED) continue;
    if (n->colocate_with && !n->colocate_hint) {
      const gr_node *t = gr_graph_find_node(c->g, n->colocate_with);
      if (t) f->pinned[t->id] = 1;
    }
    if (!kept(c, v)) continue;
    for (int i = 0; i < n->num_inputs; i++) {
      int e = ep(f, input(f, n, i));
      f->uses[e]++;
      f->user[e] = v;
    }
    for (int i = 0; i < n->num_control_inputs; i++)
      f->ctrl_users[c->rep[n->control_inputs[i]->id]]++;
  }
  for (int i = 0; i < c->num_fetches; i++) {
    f->uses[ep(f, c->fetches[i])]++;
    f->pinned[c->fetches[i].node->id] = 1;
  }
  for (int i = 0; i < c->num_targets; i++) f->pinned[c->targets[i].node->id] = 1;
}

static gr_status fuse_all(fuser *f) {
  gr_passes_ctx *c = f->c;
  /* the convolutions first: their chains are the longest */
  for (int i = 0; i < c->n; i++) {
    const gr_node *n = gr_graph_node(c->g, c->order[i]);
    if (n->op == f->op.conv) GR_TRY(fuse_conv(f, n));
  }
  for (int i = 0; i < c->n; i++) {
    const gr_node *n = gr_graph_node(c->g, c->order[i]);
    if (n->op == f->op.batch_norm) GR_TRY(fuse_bn_relu(f, n));
    if (n->op == f->op.batch_norm_grad) GR_TRY(fuse_relu_grad_bn(f, n));
  }
  /* the updates' gradients, then, from the end of each chain back, the
   * chains left */
  for (int i = 0; i < c->n; i++) {
    const gr_node *n = gr_graph_node(c->g, c->order[i]);
    if (n->op == f->op.apply_sgd || n->op == f->op.apply_momentum || n->op == f->op.apply_adam)
      GR_TRY(fuse_apply(f, n));
  }
  for (int i = c->n - 1; i >= 0; i--) GR_TRY(fuse_elementwise(f, gr_graph_node(c->g, c->order[i])));
  return GR_OK;
}

bool gr_passes_may_fuse(const gr_graph *g) {
  const gr_op_def *host[3] = {gr_ops_find("conv2d"), gr_ops_find("batch_norm"),
                              gr_ops_find("batch_norm_grad")};
  for (int v = 0; v < gr_graph_num_nodes(g); v++) {
    const gr_op_def *op = gr_graph_node(g, v)->op;
    if (op == host[0] || op == host[1] || op == host[2] ||
        gr_fused_elementwise_op_index(op->name) >= 0 || strcmp(op->name, "add_n") == 0)
      return true;
  }
  return false;
}

gr_status gr_passes_fuse(gr_passes_ctx *c, int *fused) {
  *fused = 0;
  fuser f = {.c = c};
  f.op = (fuse_ops){gr_ops_find("conv2d"),
                    gr_ops_find("bias_add"),
                    gr_ops_find("add"),
                    gr_ops_find("batch_norm"),
                    gr_ops_find("batch_norm_grad"),
                    gr_ops_find("relu"),
                    gr_ops_find("relu_grad"),
                    gr_ops_find("identity_n"),
                    gr_ops_find("_fused_conv2d"),
                    gr_ops_find("_fused_elementwise"),
                    gr_ops_find("apply_sgd"),
                    gr_ops_find("apply_momentum"),
                    gr_ops_find("apply_adam")};
  GR_ASSERT(f.op.conv && f.op.bias_add && f.op.add && f.op.batch_norm && f.op.batch_norm_grad &&
            f.op.relu && f.op.relu_grad && f.op.identity_n && f.op.fused_conv &&
            f.op.fused_elementwise && f.op.apply_sgd && f.op.apply_momentum && f.op.apply_adam);
  int eps = 0;
  f.first = gr_alloc_array((size_t)c->n + 1, sizeof(int));
  for (int v = 0; f.first && v < c->n; v++) {
    f.first[v] = eps;
    eps += gr_graph_node(c->g, v)->num_outputs;
  }
  f.uses = calloc((size_t)eps + 1, sizeof(int));
  f.user = gr_alloc_array((size_t)eps + 1, sizeof(int));
  f.pinned = calloc((size_t)c->n + 1, 1);
  f.ctrl_users = calloc((size_t)c->n + 1, sizeof(int));
  gr_status st = GR_OK;
  if (!f.first || !f.uses || !f.user || !f.pinned || !f.ctrl_users) {
    st = gr_error_set_oom(c->err);
  } else {
    for (int e = 0; e < eps; e++) f.user[e] = -1;
    count_uses(&f);
    st = fuse_all(&f);
  }
  for (int v = 0; st == GR_OK && v < c->n; v++)
    if (c->host[v] >= 0) c->mark[v] = GR_PRUNE_UNUSED;
  *fused = f.absorbed;
  free(f.first);
  free(f.uses);
  free(f.user);
  free(f.pinned);
  free(f.ctrl_users);
  return st;
}
