/* Keras' losses (gr_losses.h): the fused sigmoid_cross_entropy op, and the
 * builders of binary, categorical and sparse categorical cross-entropy,
 * mean squared error and Huber, each a composite of differentiable ops.
 *
 * Why these are composites and one op is fused: the logits forms reuse the
 * fused, stable softmax_cross_entropy and sparse_softmax_cross_entropy
 * (nn.c) and the new sigmoid_cross_entropy; the probability forms, mean
 * squared error and Huber are a few elementwise ops whose composite is as
 * stable as a kernel would be (the clipping keeps log finite), so their
 * gradients, and gradients of those, come from the ops. The hand-written
 * composite of binary cross-entropy from logits, max(z, 0) - z y +
 * log(1 + e^-|z|), is fused because its gradient is wrong at z = 0: maximum
 * gives the whole gradient to z on the tie and abs none, so d/dz is 1 - y
 * instead of sigmoid(0) - y = 1/2 - y, and a logit of exactly 0 is what a
 * zero-initialised output layer over dead ReLUs gives. The kernel also uses
 * log1p in double, and one node instead of eight (and their gradients). */
#include <math.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/losses_internal.h"
#include "ops/ops_internal.h"

bool gr_loss_reduction_parse(const char *s, gr_loss_reduction *out) {
  if (!s) return false;
  if (strcmp(s, "sum_over_batch_size") == 0 || strcmp(s, "mean") == 0)
    *out = GR_LOSS_SUM_OVER_BATCH_SIZE;
  else if (strcmp(s, "sum") == 0)
    *out = GR_LOSS_SUM;
  else if (strcmp(s, "none") == 0)
    *out = GR_LOSS_NONE;
  else
    return false;
  return true;
}

/* ---- sigmoid_cross_entropy ---------------------------------------------------------- */

static gr_status sce_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  const gr_shape *z = &ctx->in_shapes[0], *y = &ctx->in_shapes[1];
  if (!gr_shape_compatible(z, y)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "logits %s and labels %s differ", gr_shape_str(z, a),
                          gr_shape_str(y, b));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = z->rank >= 0 ? *z : *y;
  for (int d = 0; z->rank >= 0 && d < z->rank; d++)
    if (z->dims[d] < 0) ctx->out_shapes[0].dims[d] = y->dims[d];
  return GR_OK;
}

/* max(z, 0) - z y + log1p(e^-|z|) in double; NaN stays NaN. */
static inline double sce(double z, double y) {
  return (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
}

static gr_status sce_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *Z = &ctx->inputs[0], *Y = &ctx->inputs[1];
  if (Z->dtype != Y->dtype || !gr_dtype_is_float(Z->dtype) ||
      !gr_shape_equal(&Z->shape, &Y->shape)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "logits %s %s and labels %s %s differ",
                           gr_dtype_name(Z->dtype), gr_shape_str(&Z->shape, a),
                           gr_dtype_name(Y->dtype), gr_shape_str(&Y->shape, b));
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, Z->dtype, &Z->shape, &o));
  int64_t n = gr_tensor_num_elements(Z);
  if (Z->dtype == GR_F32) {
    const float *z = gr_tensor_data(Z), *y = gr_tensor_data(Y);
    float *r = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++) r[i] = (float)sce(z[i], y[i]);
  } else {
    const double *z = gr_tensor_data(Z), *y = gr_tensor_data(Y);
    double *r = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++) r[i] = sce(z[i], y[i]);
  }
  return GR_OK;
}

/* d/dz = sigmoid(z) - y, d/dy = -z: built from ops, so differentiable again. */
static gr_status sce_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output z = gr_grad_x(c, 0), y = gr_grad_x(c, 1), dy = c->grads[0];
  c->dinputs[0] = gr_mul(g, dy, gr_sub(g, gr_sigmoid(g, z), y));
  c->dinputs[1] = gr_neg(g, gr_mul(g, dy, z));
  return GR_OK;
}

/* exp, log1p and a few flops per element */
static void sce_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *s = &n->out_shapes[0];
  double e = 1;
  for (int d = 0; d < s->rank; d++) e *= s->dims[d] < 0 ? 1.0 : (double)s->dims[d];
  c->flops = 20 * e;
  c->bytes = 3 * e * (double)gr_dtype_size(n->out_dtypes[0]);
}

const gr_op_def gr_op_sigmoid_cross_entropy = {
    .name = "sigmoid_cross_entropy",
    .doc = "max(z, 0) - z y + log(1 + exp(-abs(z))) elementwise for logits z and labels y of "
           "one shape, in double: the cross-entropy of sigmoid(z) against y, stable for any z "
           "(tf.nn.sigmoid_cross_entropy_with_logits); gradient (sigmoid(z) - y) dy, and -z dy "
           "for y",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"logits", "labels"},
    .num_outputs = 1,
    .shape_fn = sce_shape,
    .cost_fn = sce_cost,
    .kernel = sce_kernel,
    .grad_fn = sce_grad};

gr_output gr_sigmoid_cross_entropy(gr_graph *g, gr_output logits, gr_output labels) {
  gr_output in[2] = {logits, labels};
  return gr_ops_build(g, "sigmoid_cross_entropy", NULL, in, 2, NULL, 0);
}

/* ---- the Keras losses -------------------------------------------------------------- */

static const gr_shape *shape_of(gr_output o) {
  return &o.node->out_shapes[o.index];
}
static gr_dtype dtype_of(gr_output o) {
  return o.node->out_dtypes[o.index];
}

/* Keras' squeeze_or_expand_to_same_rank: when the ranks differ by one and
 * the larger ends in a dim of 1, the smaller gains that dim if it has rank
 * 1, else the larger loses it. */
void gr_ops_keras_same_rank(gr_graph *g, gr_output *a, gr_output *b) {
  for (int pass = 0; pass < 2; pass++) {
    gr_output *big = pass ? b : a, *small = pass ? a : b;
    const gr_shape *sb = shape_of(*big), *ss = shape_of(*small);
    if (sb->rank < 0 || ss->rank < 0 || sb->rank != ss->rank + 1 || sb->dims[sb->rank - 1] != 1)
      continue;
    if (ss->rank == 1)
      *small = gr_expand_dims(g, *small, -1);
    else
      *big = gr_squeeze(g, *big, (int64_t[]){-1}, 1);
    return;
  }
}

/* Checks y_pred (a float) and y_true (same shape after Keras' rank rule),
 * casting y_true to y_pred's dtype. false after recording an error. */
static bool loss_inputs(gr_graph *g, const char *fn, gr_output *y_true, gr_output *y_pred) {
  if (!y_true->node || !y_pred->node) return false; /* an earlier error */
  if (!gr_dtype_is_float(dtype_of(*y_pred))) {
    gr_ops_fail(g, GR_ERR_DTYPE, "%s: y_pred must be f32 or f64, got %s (node '%s')", fn,
                gr_dtype_name(dtype_of(*y_pred)), y_pred->node->name);
    return false;
  }
  gr_ops_keras_same_rank(g, y_true, y_pred);
  if (!y_true->node || !y_pred->node) return false;
  const gr_shape *st = shape_of(*y_true), *sp = shape_of(*y_pred);
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (!gr_shape_compatible(st, sp)) {
    gr_ops_fail(g, GR_ERR_SHAPE, "%s: y_true %s and y_pred %s differ (node '%s', node '%s')", fn,
                gr_shape_str(st, a), gr_shape_str(sp, b), y_true->node->name, y_pred->node->name);
    return false;
  }
  if (sp->rank == 0 || (sp->rank < 0 && st->rank == 0)) {
    gr_ops_fail(g, GR_ERR_SHAPE,
                "%s: y_pred must have rank >= 1 [..., d], got a scalar (node '%s')", fn,
                y_pred->node->name);
    return false;
  }
  if (dtype_of(*y_true) != dtype_of(*y_pred)) *y_true = gr_cast(g, *y_true, dtype_of(*y_pred));
  return y_true->node != NULL;
}

/* The reduction of the per-example losses. */
static gr_output reduce_loss(gr_graph *g, gr_output per_example, gr_loss_reduction r) {
  switch (r) {
    case GR_LOSS_NONE:
      return per_example;
    case GR_LOSS_SUM:
      return gr_reduce_sum(g, per_example, NULL, 0, false);
    default:
      return gr_reduce_mean(g, per_example, NULL, 0, false);
  }
}

static gr_output mean_last(gr_graph *g, gr_output x) {
  return gr_reduce_mean(g, x, (int64_t[]){-1}, 1, false);
}

static gr_output scalar_like(gr_graph *g, gr_output like, double v) {
  return gr_ops_const_scalar(g, dtype_of(like), v);
}

/* min(max(p, eps), 1 - eps): tf.clip_by_value (the gradient passes at the bounds). */
static gr_output clip_eps(gr_graph *g, gr_output p) {
  gr_output lo = gr_maximum(g, p, scalar_like(g, p, GR_LOSS_EPSILON));
  return gr_minimum(g, lo, scalar_like(g, p, 1.0 - GR_LOSS_EPSILON));
}

/* y_pred made by a node of op `op` (sigmoid, softmax) with from_logits
 * false: *logits = that node's input (Keras on TensorFlow, _get_logits),
 * taken before any change of rank. */
static bool logits_of(gr_output y_pred, const gr_op_def *op, gr_output *logits) {
  if (!y_pred.node || y_pred.node->op != op || y_pred.index != 0) return false;
  *logits = y_pred.node->inputs[0];
  return true;
}

static bool bad_reduction(gr_graph *g, const char *fn, gr_loss_reduction r) {
  if (r == GR_LOSS_SUM_OVER_BATCH_SIZE || r == GR_LOSS_SUM || r == GR_LOSS_NONE) return false;
  gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "%s: unknown reduction %d", fn, (int)r);
  return true;
}

gr_output gr_binary_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred, bool from_logits,
                                 gr_loss_reduction reduction) {
  const char *fn = "binary_crossentropy";
  from_logits = from_logits || logits_of(y_pred, &gr_op_sigmoid, &y_pred);
  if (bad_reduction(g, fn, reduction) || !loss_inputs(g, fn, &y_true, &y_pred))
    return (gr_output){NULL, 0};
  gr_output e;
  if (from_logits) {
    e = gr_sigmoid_cross_entropy(g, y_pred, y_true);
  } else { /* -(y log p + (1 - y) log(1 - p)), p clipped, as Keras */
    gr_output p = clip_eps(g, y_pred), one = scalar_like(g, y_pred, 1);
    gr_output pos = gr_mul(g, y_true, gr_log(g, p));
    gr_output neg = gr_mul(g, gr_sub(g, one, y_true), gr_log(g, gr_sub(g, one, p)));
    e = gr_neg(g, gr_add(g, pos, neg));
  }
  return reduce_loss(g, mean_last(g, e), reduction);
}

gr_output gr_categorical_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                      bool from_logits, gr_loss_reduction reduction) {
  const char *fn = "categorical_crossentropy";
  from_logits = from_logits || logits_of(y_pred, &gr_op_softmax, &y_pred);
  if (bad_reduction(g, fn, reduction) || !loss_inputs(g, fn, &y_true, &y_pred))
    return (gr_output){NULL, 0};
  gr_output per;
  if (from_logits) {
    per = gr_softmax_cross_entropy(g, y_pred, y_true);
  } else { /* p / sum(p), clipped, then -sum(y log p), as Keras */
    int64_t last = -1;
    gr_output p = gr_div(g, y_pred, gr_reduce_sum(g, y_pred, &last, 1, true));
    gr_output ylogp = gr_mul(g, y_true, gr_log(g, clip_eps(g, p)));
    per = gr_neg(g, gr_reduce_sum(g, ylogp, &last, 1, false));
  }
  return reduce_loss(g, per, reduction);
}

/* Class indices for the sparse losses and metrics: [..., 1] against
 * predictions of the same rank loses its last dim; integers (u8, bool
 * widened to i32) kept, floats refused. NULL output after an error. */
gr_output gr_ops_sparse_labels(gr_graph *g, const char *fn, gr_output labels, gr_output y_pred) {
  if (!labels.node || !y_pred.node) return (gr_output){NULL, 0};
  const gr_shape *sl = shape_of(labels), *sp = shape_of(y_pred);
  if (sl->rank >= 1 && sl->rank == sp->rank && sl->dims[sl->rank - 1] == 1)
    labels = gr_squeeze(g, labels, (int64_t[]){-1}, 1);
  gr_dtype dt = dtype_of(labels);
  if (gr_dtype_is_float(dt))
    return gr_ops_fail(g, GR_ERR_DTYPE,
                       "%s: y_true must hold class indices of an integer dtype, got %s (node "
                       "'%s'); write cast(labels, i64) if they are whole numbers",
                       fn, gr_dtype_name(dt), labels.node->name);
  if (dt == GR_U8 || dt == GR_BOOL) labels = gr_cast(g, labels, GR_I32);
  return labels;
}

gr_output gr_sparse_categorical_crossentropy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                             bool from_logits, gr_loss_reduction reduction) {
  const char *fn = "sparse_categorical_crossentropy";
  if (bad_reduction(g, fn, reduction)) return (gr_output){NULL, 0};
  if (y_pred.node && !gr_dtype_is_float(dtype_of(y_pred)))
    return gr_ops_fail(g, GR_ERR_DTYPE, "%s: y_pred must be f32 or f64, got %s (node '%s')", fn,
                       gr_dtype_name(dtype_of(y_pred)), y_pred.node->name);
  gr_output labels = gr_ops_sparse_labels(g, fn, y_true, y_pred), logits = y_pred;
  if (!labels.node) return labels;
  if (!from_logits && !logits_of(y_pred, &gr_op_softmax, &logits))
    logits = gr_log(g, clip_eps(g, y_pred)); /* as Keras: the softmax of log p is p / sum(p) */
  return reduce_loss(g, gr_sparse_softmax_cross_entropy(g, logits, labels), reduction);
}

gr_output gr_mean_squared_error(gr_graph *g, gr_output y_true, gr_output y_pred,
                                gr_loss_reduction reduction) {
  const char *fn = "mean_squared_error";
  if (bad_reduction(g, fn, reduction) || !loss_inputs(g, fn, &y_true, &y_pred))
    return (gr_output){NULL, 0};
  return reduce_loss(g, mean_last(g, gr_square(g, gr_sub(g, y_true, y_pred))), reduction);
}

gr_output gr_huber(gr_graph *g, gr_output y_true, gr_output y_pred, double delta,
                   gr_loss_reduction reduction) {
  const char *fn = "huber";
  if (!(delta > 0) || !isfinite(delta))
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "%s: delta must be a number > 0, got %g", fn,
                       delta);
  if (bad_reduction(g, fn, reduction) || !loss_inputs(g, fn, &y_true, &y_pred))
    return (gr_output){NULL, 0};
  gr_output e = gr_sub(g, y_pred, y_true), a = gr_abs(g, e);
  gr_output d = scalar_like(g, y_pred, delta), half = scalar_like(g, y_pred, 0.5);
  gr_output quad = gr_mul(g, half, gr_square(g, e));
  gr_output lin = gr_sub(g, gr_mul(g, d, a), gr_mul(g, half, gr_square(g, d)));
  return reduce_loss(g, mean_last(g, gr_select(g, gr_less_equal(g, a, d), quad, lin)), reduction);
}
