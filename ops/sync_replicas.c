/* Accumulator builders and TensorFlow's SyncReplicasOptimizer as graph
 * construction on the queue and accumulator ops (gr_ops_sync.h,
 * docs/strategies.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

extern const gr_op_def gr_op_accumulator, gr_op_variable;

/* ---- accumulators ------------------------------------------------------------------------- */

gr_output gr_accumulator(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape) {
  if (!name || !*name) return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "accumulator needs a name");
  gr_attr a[] = {gr_attr_string("accumulator", name), gr_attr_dtype("dtype", dtype),
                 gr_attr_shape("shape", shape)};
  return gr_ops_build(g, "accumulator", NULL, NULL, 0, a, 3);
}

static gr_output acc_op(gr_graph *g, gr_output acc, const char *op, const gr_output *in, int n) {
  if (!acc.node) return acc;
  for (int i = 0; i < n; i++)
    if (!in[i].node) return in[i];
  if (acc.node->op != &gr_op_accumulator)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "%s: '%s' is not an accumulator (make one with accumulator)", op,
                       acc.node->name);
  gr_output all[3] = {acc};
  if (n) memcpy(all + 1, in, sizeof *in * (size_t)n);
  gr_attr a[] = {{"accumulator", *gr_node_attr(acc.node, "accumulator")},
                 {"dtype", *gr_node_attr(acc.node, "dtype")},
                 {"shape", *gr_node_attr(acc.node, "shape")}};
  return gr_ops_build_colocated(g, acc.node, op, NULL, all, 1 + n, a, 3);
}

gr_output gr_accumulator_apply_grad(gr_graph *g, gr_output acc, gr_output local_step,
                                    gr_output grad) {
  return acc_op(g, acc, "accumulator_apply_grad", (gr_output[]){local_step, grad}, 2);
}
gr_output gr_accumulator_apply_grads(gr_graph *g, const gr_output *accs, const gr_output *grads,
                                     int n, gr_output local_step) {
  if (n < 1 || !accs || !grads)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "accumulator_apply_grads: no accumulator");
  gr_output *in = gr_alloc_array((size_t)(2 * n + 1), sizeof *in);
  if (!in) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  in[0] = local_step;
  gr_output bad = {NULL, 0};
  for (int i = 0; i < n && !bad.node; i++) {
    in[1 + i] = accs[i], in[1 + n + i] = grads[i];
    if (!accs[i].node) bad = accs[i];
    if (!grads[i].node) bad = grads[i];
    if (!bad.node && accs[i].node->op != &gr_op_accumulator) {
      free(in);
      return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                         "accumulator_apply_grads: '%s' is not an accumulator (make one with "
                         "accumulator)",
                         accs[i].node->name);
    }
  }
  gr_output o = bad.node || !local_step.node
                    ? (gr_output){NULL, 0}
                    : gr_ops_build_colocated(g, accs[0].node, "accumulator_apply_grads", NULL, in,
                                             2 * n + 1, NULL, 0);
  free(in);
  return o;
}

gr_output gr_accumulator_take_grad(gr_graph *g, gr_output acc, gr_output num_required) {
  return acc_op(g, acc, "accumulator_take_grad", &num_required, 1);
}
gr_output gr_accumulator_set_global_step(gr_graph *g, gr_output acc, gr_output step) {
  return acc_op(g, acc, "accumulator_set_global_step", &step, 1);
}
gr_output gr_accumulator_num_accumulated(gr_graph *g, gr_output acc) {
  return acc_op(g, acc, "accumulator_num_accumulated", NULL, 0);
}
gr_output gr_accumulator_num_dropped(gr_graph *g, gr_output acc) {
  return acc_op(g, acc, "accumulator_num_dropped", NULL, 0);
}

/* ---- sync replicas -------------------------------------------------------------------------- */

typedef struct build {
  gr_graph *g;
  const gr_sync_replicas_options *o;
  int n;
  gr_output *vars, *grads, *accs, *ops;
  gr_output gs, tokens_q;
} build;

/* The worker's part: its gradients into the accumulators in one op (all
 * or none: an update never takes part of a worker's gradients, as the
 * applies of one accumulator at a time allowed when the update came
 * between them), then a token. */
static gr_status build_worker(build *b, gr_output loss, gr_sync_replicas *out) {
  gr_graph *g = b->g;
  char name[64];
  snprintf(name, sizeof name, "local_step_%d", b->o->worker_index);
  if (b->o->worker_device) GR_TRY(gr_graph_push_device_scope_reset(g, b->o->worker_device));
  out->local_step = gr_variable(g, name, gr_const_i64(g, 0));
  if (b->o->worker_device) gr_graph_pop_device_scope(g);
  if (!out->local_step.node) return GR_ERR_INVALID_ARGUMENT;
  GR_TRY(gr_gradients(g, &loss, 1, b->vars, b->n, NULL, true, b->grads));
  int na = 0;
  gr_output *accs = b->ops, *grads = b->ops + b->n; /* reuse: b->ops has room for both */
  for (int i = 0; i < b->n; i++)
    if (b->grads[i].node) accs[na] = b->accs[i], grads[na++] = b->grads[i];
  if (!na)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "sync_replicas: the loss depends on no variable");
  gr_output ap = gr_accumulator_apply_grads(g, accs, grads, na, out->local_step);
  if (!ap.node) return GR_ERR_INVALID_ARGUMENT;
  GR_TRY(gr_graph_push_control_deps(g, &ap, 1));
  gr_output token;
  gr_status st = gr_queue_dequeue(g, b->tokens_q, &token);
  gr_graph_pop_control_deps(g);
  GR_TRY(st);
  gr_output set = gr_assign(g, out->local_step, token);
  out->train = gr_group(g, "train", &set, 1);
  return out->train.node ? GR_OK : GR_ERR_INVALID_ARGUMENT;
}

/* tokens: `count` copies of global_step's value, read after `after`. */
static gr_output tokens_of(build *b, int64_t count) {
  gr_graph *g = b->g;
  gr_output step = gr_ops_read_value_via(g, b->gs.node, b->gs);
  gr_output ones = gr_ones(g, GR_I64, gr_shape_make(1, (int64_t[]){count}));
  return gr_mul(g, ones, step);
}

/* The chief's part: the means, one update, the accumulators' step, tokens. */
static gr_status build_chief(build *b, gr_sync_replicas *out) {
  gr_graph *g = b->g;
  const gr_sync_replicas_options *o = b->o;
  gr_output need = gr_const_i64(g, o->replicas_to_aggregate);
  gr_output surrogate = {NULL, 0}, *vars = b->ops; /* reuse: the variables with a gradient */
  int nv = 0;
  for (int i = 0; i < b->n; i++) {
    if (!b->grads[i].node) continue;
    gr_output mean = gr_accumulator_take_grad(g, b->accs[i], need);
    /* d/dv sum(v * stop_gradient(mean)) = mean, bit for bit: the optimizer
     * applies the mean as it would apply a gradient */
    gr_output term =
        gr_reduce_sum(g, gr_mul(g, b->vars[i], gr_stop_gradient(g, mean)), NULL, 0, false);
    surrogate = surrogate.node ? gr_add(g, surrogate, term) : term;
    vars[nv++] = b->vars[i];
  }
  if (!surrogate.node)
    return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                               "sync_replicas: the loss depends on no variable");
  gr_output update = gr_minimize(g, &o->optimizer, surrogate, vars, nv);
  if (!update.node) return GR_ERR_INVALID_ARGUMENT;
  GR_TRY(gr_graph_push_control_deps(g, &update, 1));
  gr_output step = gr_ops_read_value_via(g, b->gs.node, b->gs);
  int ns = 0;
  gr_output *sets = b->grads; /* reuse */
  for (int i = 0; i < b->n; i++) {
    gr_output s = gr_accumulator_set_global_step(g, b->accs[i], step);
    if (!s.node) {
      gr_graph_pop_control_deps(g);
      return GR_ERR_INVALID_ARGUMENT;
    }
    sets[ns++] = s;
  }
  gr_graph_pop_control_deps(g);
  GR_TRY(gr_graph_push_control_deps(g, sets, ns));
  int total = o->total_num_replicas > 0 ? o->total_num_replicas : o->replicas_to_aggregate;
  gr_output tokens =
      tokens_of(b, total > o->replicas_to_aggregate ? total : o->replicas_to_aggregate);
  gr_output enq = gr_queue_enqueue_many(g, b->tokens_q, &tokens, 1);
  gr_graph_pop_control_deps(g);
  out->chief_update = gr_group(g, "chief_update", &enq, 1);
  if (o->init_tokens > 0) {
    gr_output init = tokens_of(b, o->init_tokens);
    out->init_tokens = gr_queue_enqueue_many(g, b->tokens_q, &init, 1);
  }
  return out->chief_update.node ? GR_OK : GR_ERR_INVALID_ARGUMENT;
}

static gr_status build_all(build *b, gr_output loss, gr_sync_replicas *out) {
  gr_graph *g = b->g;
  const gr_sync_replicas_options *o = b->o;
  /* global_step and the token queue, where global_step lives */
  b->gs = gr_global_step(g);
  if (!b->gs.node) return GR_ERR_INVALID_ARGUMENT;
  if (gr_graph_push_device_scope_reset(g, gr_graph_resolve_device(g, b->gs.node)) != GR_OK)
    return GR_ERR_INVALID_ARGUMENT;
  b->tokens_q = gr_fifo_queue(g, "sync_token_q", 1, (gr_dtype[]){GR_I64},
                              (gr_shape[]){gr_shape_scalar()}, -1);
  gr_graph_pop_device_scope(g);
  if (!b->tokens_q.node) return GR_ERR_INVALID_ARGUMENT;
  gr_graph_set_colocation(g, b->tokens_q.node, b->gs.node->name);
  /* an accumulator per variable, all with global_step: a worker's gradients
   * go into them in one op (all or none), which needs them on one task */
  for (int i = 0; i < b->n; i++) {
    const gr_node *v = b->vars[i].node;
    const char *vname = gr_node_attr_string(v, "var", v->name);
    size_t len = strlen(vname) + 16;
    char *an = gr_graph_alloc(g, len);
    if (!an) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    snprintf(an, len, "%s/grad_accum", vname);
    gr_attr a[] = {gr_attr_string("accumulator", an), gr_attr_dtype("dtype", v->out_dtypes[0]),
                   gr_attr_shape("shape", v->out_shapes[0])};
    b->accs[i] = gr_ops_build_colocated(g, b->gs.node, "accumulator", NULL, NULL, 0, a, 3);
    if (!b->accs[i].node) return GR_ERR_INVALID_ARGUMENT;
  }
  GR_TRY(build_worker(b, loss, out));
  GR_TRY(build_chief(b, out));
  gr_output dropped = {NULL, 0};
  for (int i = 0; i < b->n; i++) {
    gr_output d = gr_accumulator_num_dropped(g, b->accs[i]);
    dropped = dropped.node ? gr_add(g, dropped, d) : d;
  }
  out->num_dropped = dropped;
  (void)o;
  return dropped.node ? GR_OK : GR_ERR_INVALID_ARGUMENT;
}

gr_status gr_sync_replicas_minimize(gr_graph *g, const gr_sync_replicas_options *o, gr_output loss,
                                    const gr_output *var_list, int n, gr_sync_replicas *out) {
  memset(out, 0, sizeof *out);
  if (!loss.node) return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "sync_replicas: no loss");
  GR_TRY(gr_ops_check_loss(g, "sync_replicas", loss));
  if (!o || o->replicas_to_aggregate < 1 || o->total_num_replicas < 0 || o->init_tokens < 0 ||
      (o->total_num_replicas && o->total_num_replicas < o->replicas_to_aggregate) ||
      o->worker_index < 0)
    return gr_graph_set_errorf(
        g, GR_ERR_INVALID_ARGUMENT,
        "sync_replicas: want replicas_to_aggregate >= 1, total_num_replicas 0 or >= it (%d, %d), "
        "worker_index >= 0, init_tokens >= 0",
        o ? o->replicas_to_aggregate : 0, o ? o->total_num_replicas : 0);
  int cap = gr_graph_num_nodes(g) + n + 1;
  build b = {.g = g, .o = o};
  b.vars = calloc((size_t)cap * 5, sizeof(gr_output));
  if (!b.vars) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  b.grads = b.vars + cap, b.accs = b.grads + cap, b.ops = b.accs + cap; /* ops: 2 cap */
  if (var_list && n > 0) {
    for (int i = 0; i < n; i++)
      if (!var_list[i].node || var_list[i].node->op != &gr_op_variable) {
        free(b.vars);
        return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                   "sync_replicas: '%s' is not a variable",
                                   var_list[i].node ? var_list[i].node->name : "(null)");
      }
    memcpy(b.vars, var_list, sizeof *var_list * (size_t)n);
    b.n = n;
  } else {
    b.n = gr_ops_float_vars(g, loss, b.vars, cap);
  }
  gr_status st;
  if (b.n <= 0) {
    st = gr_graph_set_errorf(g, b.n < 0 ? GR_ERR_RESOURCE_EXHAUSTED : GR_ERR_INVALID_ARGUMENT,
                             "sync_replicas: loss '%s' depends on no float variable",
                             loss.node->name);
  } else if (gr_graph_push_name_scope(g, "sync_replicas") != GR_OK) {
    st = GR_ERR_INVALID_ARGUMENT;
  } else {
    st = build_all(&b, loss, out);
    gr_graph_pop_name_scope(g);
  }
  free(b.vars);
  if (st != GR_OK) {
    const gr_error *e = gr_graph_error(g);
    return e ? e->code : st;
  }
  return GR_OK;
}
