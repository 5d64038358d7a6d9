/* Batch norm's moving statistics: the updates that keep them, built beside
 * every batch norm in training.
 *
 * moving_average_update(stat_0, ..., stat_{n-1}) sets the variable named by
 * attr var to momentum var + (1 - momentum) mean_k(stat_k), in double,
 * adding the stats in input order. Its attr var makes it run where the
 * variable lives, whatever device the batch norm runs on (TensorFlow's
 * assign_moving_average, colocated with its variable): batch statistics
 * are computed where the batch is, and only they travel to the variable.
 *
 * One rule, two cases:
 * - a batch norm (gr_ops_batch_norm_build: gr_batch_norm, gr_op and the
 *   .gr call) in training gets one update per moving variable from its own
 *   statistics, in f64 (outputs 4 and 5: the double values the kernel
 *   computed), and its outputs come through an identity_n that waits for
 *   both updates, so a step that computes anything from it updates the
 *   moving statistics;
 * - the batch norms of gr_replicate's replicas (parallel.c) are built
 *   without updates; gr_ops_replicas_moving_stats then makes one update per
 *   moving variable (per copy, with mirrored variables) that averages the
 *   replicas' batch means and variances (outputs 4 and 5, in f64, each with
 *   Bessel's correction over the replica's rows) in replica order: Keras'
 *   BatchNormalization under MirroredStrategy (a MEAN-aggregated assign),
 *   and the replicas' mean outputs wait for those updates.
 * The thread that builds replicas marks the graph for that while it builds
 * them (gr_ops_replicas_enter: a thread-local, so builds on other threads
 * are not affected). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

gr_status gr_ops_update_moving(gr_kernel_ctx *ctx, const char *var, double momentum,
                               const double *batch, int64_t c) {
  gr_var *v = gr_resource_mgr_get_var(ctx->step->resources, var);
  if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_var_lock(v);
  gr_tensor *cur = gr_var_value(v);
  gr_status s = GR_OK;
  gr_dtype st = ctx->inputs[0].dtype; /* the variable's, or f64 */
  if (!cur->buf || cur->shape.rank != 1 || cur->shape.dims[0] != c ||
      (cur->dtype != st && st != GR_F64)) {
    s = gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                        "variable '%s' is not an initialised vector of %lld channels (of %s)",
                        gr_var_name(v), (long long)c, gr_dtype_name(st));
  } else {
    gr_tensor fresh = gr_tensor_empty();
    if (!gr_tensor_is_unique(cur)) s = gr_tensor_alloc(&fresh, cur->dtype, &cur->shape, ctx->err);
    gr_tensor *out = fresh.buf ? &fresh : cur;
    for (int64_t j = 0; s == GR_OK && j < c; j++)
      gr_tensor_set_f64(out, j, momentum * gr_tensor_get_f64(cur, j) + (1 - momentum) * batch[j]);
    if (fresh.buf) {
      gr_tensor_release(cur);
      *cur = fresh;
    }
  }
  gr_var_unlock(v);
  return s;
}

/* ---- the op ------------------------------------------------------------------------------- */

static gr_status moving_average_update_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  const gr_shape *s0 = &ctx->in_shapes[0];
  for (int i = 0; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    const gr_shape *s = &ctx->in_shapes[i];
    if ((s->rank >= 0 && s->rank != 1) || !gr_shape_compatible(s, s0))
      return gr_shape_error(ctx, GR_ERR_SHAPE,
                            "the statistics must be vectors of one length: input %d is %s, "
                            "input 0 %s",
                            i, gr_shape_str(s, a), gr_shape_str(s0, b));
  }
  double mom = gr_node_attr_float(ctx->node, "momentum", 0.99);
  if (!(mom >= 0 && mom <= 1))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "need 0 <= momentum <= 1, got %g", mom);
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status moving_average_update_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *S0 = &ctx->inputs[0];
  int64_t c = S0->shape.rank == 1 ? S0->shape.dims[0] : -1;
  char a[GR_SHAPE_STR_MAX];
  for (int i = 0; i < ctx->num_inputs; i++) {
    const gr_tensor *s = &ctx->inputs[i];
    if (s->dtype != S0->dtype || s->shape.rank != 1 || s->shape.dims[0] != c)
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "input %d is %s %s; input 0 %s [%lld]", i,
                             gr_dtype_name(s->dtype), gr_shape_str(&s->shape, a),
                             gr_dtype_name(S0->dtype), (long long)c);
  }
  gr_tensor scratch;
  gr_shape ss = gr_shape_make(1, (int64_t[]){c + 1});
  GR_TRY(gr_tensor_alloc(&scratch, GR_F64, &ss, ctx->err));
  double *mean = gr_tensor_data(&scratch);
  for (int64_t j = 0; j < c; j++) {
    double sum = 0;
    for (int i = 0; i < ctx->num_inputs; i++) sum += gr_tensor_get_f64(&ctx->inputs[i], j);
    mean[j] = sum / ctx->num_inputs;
  }
  gr_status s = gr_ops_update_moving(ctx, gr_node_attr_string(ctx->node, "var", ""),
                                     gr_node_attr_float(ctx->node, "momentum", 0.99), mean, c);
  gr_tensor_release(&scratch);
  return s;
}

static const gr_attr_spec mau_attrs[] = {
    {"var", GR_ATTR_STRING, true, {.type = GR_ATTR_STRING, .s = ""}},
    {"momentum", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.99}}};

const gr_op_def gr_op_moving_average_update = {
    .name = "moving_average_update",
    .doc = "sets the variable (attr var) to momentum var + (1 - momentum) mean(stats), in double, "
           "adding the stats in input order (batch norm's moving statistics: its own, or the mean "
           "of replicas')",
    .min_inputs = 1,
    .max_inputs = GR_REPLICATE_MAX,
    .input_names = (const char *const[]){"stats"},
    .num_outputs = 0,
    .attrs = mau_attrs,
    .num_attrs = 2,
    .shape_fn = moving_average_update_shape,
    .kernel = moving_average_update_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_VARIABLE | GR_OP_UPDATES | GR_OP_NO_GRADIENT};

static gr_output build_update(gr_graph *g, const char *name, gr_output var, const gr_output *stats,
                              int n, double momentum) {
  if (!var.node) return var;
  if (!gr_ops_is_variable_read(var.node))
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "moving_average_update: '%s' is not a variable",
                       var.node->name);
  gr_attr at[2] = {gr_attr_string("var", gr_node_attr_string(var.node, "var", var.node->name)),
                   gr_attr_float("momentum", momentum)};
  return gr_ops_build(g, "moving_average_update", name, stats, n, at, 2);
}

gr_output gr_moving_average_update(gr_graph *g, gr_output var, const gr_output *stats, int n,
                                   double momentum) {
  return build_update(g, NULL, var, stats, n, momentum);
}

/* ---- a batch norm with its updates ---------------------------------------------------------- */

static _Thread_local const gr_graph *replicas_of; /* the graph whose replicas this thread builds */

const gr_graph *gr_ops_replicas_enter(const gr_graph *g) {
  const gr_graph *prev = replicas_of;
  replicas_of = g;
  return prev;
}

void gr_ops_replicas_leave(const gr_graph *prev) {
  replicas_of = prev;
}

/* In training the moving statistics (inputs 3 and 4) must be variable
 * reads: their updates name the variables. */
static gr_status check_moving_inputs(gr_graph *g, const gr_node *bn) {
  for (int i = 3; i < 5; i++)
    if (!gr_ops_is_variable_read(bn->inputs[i].node))
      return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "node '%s' (op batch_norm): in training, input '%s' must be read "
                                 "from a variable (its update in the step names the variable); "
                                 "'%s' is a %s",
                                 bn->name, bn->op->input_names[i], bn->inputs[i].node->name,
                                 bn->inputs[i].node->op->name);
  return GR_OK;
}

/* The updates of bn's moving statistics from its f64 statistics (outputs
 * 4 and 5), named F/update_moving_mean and F/update_moving_variance (F:
 * bn's name), in no device scope of their own: attr var puts them with
 * their variable. */
static gr_status build_updates(gr_graph *g, gr_node *bn, gr_output ups[2]) {
  static const char *const names[2] = {"update_moving_mean", "update_moving_variance"};
  char *scope = gr_graph_alloc(g, strlen(bn->name) + 2);
  if (!scope) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  sprintf(scope, "/%s", bn->name);
  if (gr_graph_push_name_scope(g, scope) != GR_OK) return gr_graph_error(g)->code;
  if (gr_graph_push_device_scope_reset(g, "") == GR_OK) {
    double momentum = gr_node_attr_float(bn, "momentum", 0.99);
    for (int i = 0; i < 2; i++)
      ups[i] = build_update(g, names[i], bn->inputs[3 + i], &(gr_output){bn, 4 + i}, 1, momentum);
    gr_graph_pop_device_scope(g);
  }
  gr_graph_pop_name_scope(g);
  return gr_graph_error(g) ? gr_graph_error(g)->code : GR_OK;
}

/* Renames bn F to F/batch_norm (F/batch_norm_K if taken); the name F
 * into full (graph-owned). */
static gr_status move_into_own_scope(gr_graph *g, gr_node *bn, const char **full) {
  size_t n = strlen(bn->name);
  const char *slash = strrchr(bn->name, '/'), *last = slash ? slash + 1 : bn->name;
  char *f = gr_graph_strdup(g, bn->name),
       *inner = gr_graph_alloc(g, n - (size_t)(last - bn->name) + 32),
       *taken = gr_graph_alloc(g, n + 32);
  if (!f || !inner || !taken)
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int k = 0;; k++) {
    sprintf(inner, k ? "%s/batch_norm_%d" : "%s/batch_norm", last, k);
    sprintf(taken, "%s/%s", f, inner + strlen(last) + 1);
    if (!gr_graph_find_node(g, taken)) break;
  }
  *full = f;
  return gr_graph_rename(g, (gr_output){bn, 0}, inner).node ? GR_OK : gr_graph_error(g)->code;
}

gr_output gr_ops_batch_norm_build(gr_graph *g, const char *name, const gr_output *inputs,
                                  int num_inputs, const gr_attr *attrs, int num_attrs) {
  gr_output bn = gr_ops_build(g, "batch_norm", name, inputs, num_inputs, attrs, num_attrs);
  if (!bn.node || !gr_node_attr_bool(bn.node, "training", true) ||
      !gr_node_attr_bool(bn.node, "update_moving", true))
    return bn;
  if (check_moving_inputs(g, bn.node) != GR_OK) return (gr_output){NULL, 0};
  if (replicas_of == g) return bn; /* gr_replicate makes the updates */
  gr_output ups[2];
  const char *full = NULL;
  if (build_updates(g, bn.node, ups) != GR_OK || move_into_own_scope(g, bn.node, &full) != GR_OK)
    return (gr_output){NULL, 0};
  /* the identity_n takes bn's old name F, in F's scope */
  const char *slash = strrchr(full, '/');
  char *outer = gr_graph_alloc(g, strlen(full) + 2);
  if (!outer) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  sprintf(outer, "/%.*s", slash ? (int)(slash - full) : 0, full);
  gr_output outs[6], y = {NULL, 0};
  for (int i = 0; i < 6; i++) outs[i] = gr_output_at(bn, i);
  if (gr_graph_push_name_scope(g, outer) == GR_OK) {
    if (gr_graph_push_control_deps(g, ups, 2) == GR_OK) {
      y = gr_ops_build(g, "identity_n", slash ? slash + 1 : full, outs, 6, NULL, 0);
      gr_graph_pop_control_deps(g);
    }
    gr_graph_pop_name_scope(g);
  }
  if (y.node && gr_graph_set_colocation(g, y.node, bn.node->name) != GR_OK) y.node = NULL;
  return y.node ? y : (gr_output){NULL, 0};
}

gr_status gr_check_batch_norm_updates(const gr_graph *g, gr_error *err) {
  int n = gr_graph_num_nodes(g);
  unsigned char *updated = calloc((size_t)n + 1, 1);
  if (!updated) return gr_error_set_oom(err);
  for (int id = 0; id < n; id++) {
    const gr_node *u = gr_graph_node(g, id);
    for (int i = 0; u->op == &gr_op_moving_average_update && i < u->num_inputs; i++)
      if (u->inputs[i].node->op == &gr_op_batch_norm) updated[u->inputs[i].node->id] = 1;
  }
  gr_status st = GR_OK;
  for (int id = 0; id < n && st == GR_OK; id++) {
    const gr_node *bn = gr_graph_node(g, id);
    if (bn->op == &gr_op_batch_norm && !updated[id] && gr_node_attr_bool(bn, "training", true) &&
        gr_node_attr_bool(bn, "update_moving", true))
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "batch norm '%s' trains with update_moving, but no "
                        "moving_average_update reads its statistics, so nothing would update "
                        "its moving statistics (a graph exported before they were updated by "
                        "nodes of their own? export it again from its .gr file)",
                        bn->name);
  }
  free(updated);
  return st;
}

/* ---- replicas ----------------------------------------------------------------------------- */

/* The variable a moving-statistic input reads. */
static const char *var_of(const gr_node *read) {
  return gr_node_attr_string(read, "var", read->name);
}

/* The same, the mirrored one for a copy. */
static const char *moving_key(const gr_node *read) {
  const char *var = var_of(read);
  const gr_node *v = read->op == &gr_op_variable ? read : gr_graph_find_node(read->graph, var);
  const char *of = v ? gr_node_attr_string(v, "mirror_of", "") : "";
  return of[0] ? of : var;
}

static bool is_training_bn(const gr_node *n) {
  return n->op == &gr_op_batch_norm && gr_node_attr_bool(n, "training", true) &&
         gr_node_attr_bool(n, "update_moving", true);
}

/* One moving variable (input `in` of the batch norms: 3 the mean, 4 the
 * variance) of the group that bns[0..nb) updates: one update per copy
 * read, from every batch norm's statistic in f64 (output 4 or 5, as a
 * batch norm's own updates read), in order. */
static gr_status update_group(gr_graph *g, gr_node *const *bns, int nb, int in, gr_output *ups,
                              int *nups) {
  gr_output *stats = calloc((size_t)nb, sizeof *stats);
  if (!stats) return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < nb; i++) stats[i] = (gr_output){bns[i], in == 3 ? 4 : 5};
  double mom = gr_node_attr_float(bns[0], "momentum", 0.99);
  gr_status st = GR_OK;
  for (int i = 0; i < nb && st == GR_OK; i++) {
    const char *copy = var_of(bns[i]->inputs[in].node);
    bool seen = false; /* the same copy read by other nodes (read_value) */
    for (int j = 0; j < i && !seen; j++) seen = strcmp(var_of(bns[j]->inputs[in].node), copy) == 0;
    if (seen) continue;
    gr_output u = gr_moving_average_update(g, bns[i]->inputs[in], stats, nb, mom);
    if (!u.node)
      st = gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
    else
      ups[(*nups)++] = u;
  }
  free(stats);
  return st;
}

gr_status gr_ops_replicas_moving_stats(gr_graph *g, int first, int last, gr_output **updates,
                                       int *num_updates) {
  int total = last - first;
  gr_node **bns = calloc((size_t)total + 1, sizeof *bns), **group = NULL;
  gr_output *ups = NULL;
  char *done = calloc((size_t)total + 1, 1);
  int nbn = 0, nups = 0;
  *updates = NULL;
  *num_updates = 0;
  gr_status st = GR_OK;
  if (!bns || !done) goto oom;
  for (int id = first; id < last; id++)
    if (is_training_bn(gr_graph_node(g, id))) bns[nbn++] = gr_graph_node(g, id);
  group = calloc((size_t)nbn + 1, sizeof *group);
  ups = calloc(2 * (size_t)nbn + 1, sizeof *ups);
  if (!group || !ups) goto oom;
  gr_attr off = gr_attr_bool("update_moving", false);
  for (int i = 0; i < nbn && st == GR_OK; i++) {
    if (done[i]) continue;
    const char *km = moving_key(bns[i]->inputs[3].node), *kv = moving_key(bns[i]->inputs[4].node);
    int ng = 0;
    for (int j = i; j < nbn && st == GR_OK; j++) {
      bool m = strcmp(moving_key(bns[j]->inputs[3].node), km) == 0,
           v = strcmp(moving_key(bns[j]->inputs[4].node), kv) == 0;
      if (!m && !v) continue;
      if (m != v || gr_node_attr_float(bns[j], "momentum", 0.99) !=
                        gr_node_attr_float(bns[i], "momentum", 0.99))
        st = gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT,
                                 "replicate: batch norms '%s' and '%s' share a moving statistic "
                                 "but not both, or not the momentum: the replicas cannot average "
                                 "their updates",
                                 bns[i]->name, bns[j]->name);
      done[j] = 1;
      group[ng++] = bns[j];
    }
    if (st == GR_OK) st = update_group(g, group, ng, 3, ups, &nups);
    if (st == GR_OK) st = update_group(g, group, ng, 4, ups, &nups);
    for (int j = 0; j < ng && st == GR_OK; j++) st = gr_graph_set_attr(g, group[j], &off);
  }
  if (st == GR_OK) {
    *updates = ups, *num_updates = nups;
    ups = NULL;
  }
  goto out;
oom:
  st = gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
out:
  free(bns), free(group), free(ups), free(done);
  return st;
}
