/* Keras' metrics (gr_losses.h): the ops in_top_k, auc_confusion and
 * auc_from_confusion, and the builders of the accuracies, top-k accuracy
 * and AUC (per batch, and streaming in a variable). Metrics have no
 * gradient. */
#include <math.h>
#include <stdio.h>

#include "ops/gr_ops.h"
#include "ops/losses_internal.h"
#include "ops/ops_internal.h"

static const gr_shape *shape_of(gr_output o) {
  return &o.node->out_shapes[o.index];
}
static gr_dtype dtype_of(gr_output o) {
  return o.node->out_dtypes[o.index];
}

/* Merges the dims of b into a (same rank); false on a certain conflict. */
static bool merge_dims(gr_shape *a, const gr_shape *b) {
  if (b->rank < 0) return true;
  if (a->rank < 0) {
    *a = *b;
    return true;
  }
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++) {
    if (a->dims[d] < 0) a->dims[d] = b->dims[d];
    if (b->dims[d] >= 0 && a->dims[d] != b->dims[d]) return false;
  }
  return true;
}

/* The shape of x without its last axis (unknown when x's rank is). */
static gr_shape drop_last(const gr_shape *x) {
  gr_shape s = *x;
  if (s.rank > 0) s.rank--;
  return s;
}

/* ---- in_top_k ------------------------------------------------------------------------- */

static gr_status in_top_k_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_INT));
  if (gr_node_attr_int(ctx->node, "k", 1) < 1)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "k must be >= 1, got %lld",
                          (long long)gr_node_attr_int(ctx->node, "k", 1));
  const gr_shape *p = &ctx->in_shapes[0], *t = &ctx->in_shapes[1];
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (p->rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "predictions must have rank >= 1 [..., classes], got a scalar");
  gr_shape out = drop_last(p);
  if (!merge_dims(&out, t))
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "targets %s must have the shape of predictions %s without the classes",
                          gr_shape_str(t, b), gr_shape_str(p, a));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_BOOL;
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* Whether row[target] is among the k largest of row[0..c): fewer than k
 * scores above it; false when the target is out of range or a score not
 * finite (tf.math.in_top_k). */
#define IN_TOP_K_ROW(T)                                                                            \
  static bool in_top_k_##T(const T *row, int64_t c, int64_t target, int64_t k) {                   \
    if (target < 0 || target >= c || !isfinite(row[target])) return false;                         \
    int64_t above = 0;                                                                             \
    for (int64_t j = 0; j < c; j++) {                                                              \
      if (!isfinite(row[j])) return false;                                                         \
      if (row[j] > row[target] && ++above >= k) return false;                                      \
    }                                                                                              \
    return true;                                                                                   \
  }
IN_TOP_K_ROW(float)
IN_TOP_K_ROW(double)

static int64_t int_at(const gr_tensor *t, int64_t i) {
  switch (t->dtype) {
    case GR_I32:
      return ((const int32_t *)gr_tensor_data(t))[i];
    case GR_I64:
      return ((const int64_t *)gr_tensor_data(t))[i];
    default:
      return ((const uint8_t *)gr_tensor_data(t))[i];
  }
}

static gr_status in_top_k_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *P = &ctx->inputs[0], *Tg = &ctx->inputs[1];
  int r = P->shape.rank;
  bool ok = r >= 1 && Tg->shape.rank == r - 1 && gr_dtype_is_float(P->dtype) &&
            (GR_DT_INT & GR_DT_BIT(Tg->dtype));
  for (int d = 0; ok && d < r - 1; d++) ok = Tg->shape.dims[d] == P->shape.dims[d];
  if (!ok) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "predictions %s %s and targets %s %s do not match",
                           gr_dtype_name(P->dtype), gr_shape_str(&P->shape, a),
                           gr_dtype_name(Tg->dtype), gr_shape_str(&Tg->shape, b));
  }
  int64_t k = gr_node_attr_int(ctx->node, "k", 1), c = P->shape.dims[r - 1];
  int64_t rows = gr_tensor_num_elements(Tg);
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_BOOL, &Tg->shape, &o));
  bool *y = gr_tensor_data(o);
  for (int64_t i = 0; i < rows; i++)
    y[i] = P->dtype == GR_F32
               ? in_top_k_float((const float *)gr_tensor_data(P) + i * c, c, int_at(Tg, i), k)
               : in_top_k_double((const double *)gr_tensor_data(P) + i * c, c, int_at(Tg, i), k);
  return GR_OK;
}

static const gr_attr_spec in_top_k_attrs[] = {{"k", GR_ATTR_INT, true, {0}}};

const gr_op_def gr_op_in_top_k = {
    .name = "in_top_k",
    .doc = "bool [...]: whether predictions[..., target] (predictions [..., classes], targets "
           "[...] of an integer dtype) is among the attr k largest of its row, ties with it "
           "counting for it; false for a target out of range or a row with a score that is not "
           "finite (tf.math.in_top_k)",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"predictions", "targets"},
    .num_outputs = 1,
    .attrs = in_top_k_attrs,
    .num_attrs = 1,
    .shape_fn = in_top_k_shape,
    .kernel = in_top_k_kernel,
    .flags = GR_OP_NO_GRADIENT};

gr_output gr_in_top_k(gr_graph *g, gr_output predictions, gr_output targets, int64_t k) {
  gr_output in[2] = {predictions, targets};
  gr_attr a = gr_attr_int("k", k);
  return gr_ops_build(g, "in_top_k", NULL, in, 2, &a, 1);
}

/* ---- auc_confusion, auc_from_confusion ----------------------------------------------- */

#define AUC_MAX_THRESHOLDS (1 << 20) /* counts of 32 MiB; T - 1 is exact in f32 */

static gr_status auc_confusion_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_ALL));
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_FLOAT));
  int64_t t = gr_node_attr_int(ctx->node, "num_thresholds", 200);
  if (t < 2 || t > AUC_MAX_THRESHOLDS)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "num_thresholds must be from 2 to %d, got %lld", AUC_MAX_THRESHOLDS,
                          (long long)t);
  const gr_shape *l = &ctx->in_shapes[0], *p = &ctx->in_shapes[1];
  int64_t nl = gr_shape_num_elements(l), np = gr_shape_num_elements(p);
  if (nl >= 0 && np >= 0 && nl != np) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "labels %s and predictions %s must have as many elements",
                          gr_shape_str(l, a), gr_shape_str(p, b));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_F64;
  ctx->out_shapes[0] = gr_shape_make(2, (int64_t[]){4, t});
  return GR_OK;
}

static gr_status auc_confusion_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *L = &ctx->inputs[0], *P = &ctx->inputs[1];
  int64_t n = gr_tensor_num_elements(P), t = gr_node_attr_int(ctx->node, "num_thresholds", 200);
  if (gr_tensor_num_elements(L) != n || !gr_dtype_is_float(P->dtype)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(
        ctx, GR_ERR_SHAPE, "labels %s and predictions %s %s must have as many elements",
        gr_shape_str(&L->shape, a), gr_dtype_name(P->dtype), gr_shape_str(&P->shape, b));
  }
  gr_shape os = gr_shape_make(2, (int64_t[]){4, t});
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_F64, &os, &o));
  double *tp = gr_tensor_data(o), *fp = tp + t, *tn = fp + t, *fn = tn + t;
  for (int64_t i = 0; i < 4 * t; i++) tp[i] = 0;
  double pos = 0, neg = 0;
  for (int64_t i = 0; i < n; i++) {
    /* Keras' buckets: ceil(p (T - 1)) - 1, at least 0, on p in f32: p is
     * above threshold j exactly when its bucket is >= j */
    float p = P->dtype == GR_F32 ? ((const float *)gr_tensor_data(P))[i]
                                 : (float)((const double *)gr_tensor_data(P))[i];
    if (!(p >= 0 && p <= 1))
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                             "prediction %g at element %lld is not in [0, 1] (logits? pass "
                             "from_logits=true)",
                             (double)p, (long long)i);
    float b = ceilf(p * (float)(t - 1)) - 1.0f;
    int64_t k = b > 0 ? (int64_t)b : 0;
    double y = gr_tensor_get_f64(L, i) != 0; /* Keras: cast(cast(y, bool), ...) */
    tp[k] += y;
    fp[k] += 1 - y;
    pos += y;
    neg += 1 - y;
  }
  for (int64_t j = t - 2; j >= 0; j--) { /* counts at threshold j: buckets j and above */
    tp[j] += tp[j + 1];
    fp[j] += fp[j + 1];
  }
  for (int64_t j = 0; j < t; j++) {
    fn[j] = pos - tp[j];
    tn[j] = neg - fp[j];
  }
  return GR_OK;
}

static const gr_attr_spec auc_attrs[] = {
    {"num_thresholds", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 200}}};

const gr_op_def gr_op_auc_confusion = {
    .name = "auc_confusion",
    .doc = "f64 [4, T]: true positives, false positives, true negatives and false negatives of "
           "predictions in [0, 1] (rounded to f32) at Keras' T = attr num_thresholds thresholds "
           "-1e-7, 1/(T-1), ..., 1 + 1e-7 (positive: above the threshold), a label that is not 0 "
           "counting as a positive",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"labels", "predictions"},
    .num_outputs = 1,
    .attrs = auc_attrs,
    .num_attrs = 1,
    .shape_fn = auc_confusion_shape,
    .kernel = auc_confusion_kernel,
    .flags = GR_OP_NO_GRADIENT};

static gr_status auc_from_confusion_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  const gr_shape *c = &ctx->in_shapes[0];
  if (c->rank >= 0 && (c->rank != 2 || (c->dims[0] >= 0 && c->dims[0] != 4) ||
                       (c->dims[1] >= 0 && c->dims[1] < 2))) {
    char a[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "confusion must be [4, T] with T >= 2 (auc_confusion's), got %s",
                          gr_shape_str(c, a));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_F32;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status auc_from_confusion_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *C = &ctx->inputs[0];
  if (C->shape.rank != 2 || C->shape.dims[0] != 4 || C->shape.dims[1] < 2) {
    char a[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "confusion must be [4, T] with T >= 2, got %s",
                           gr_shape_str(&C->shape, a));
  }
  int64_t t = C->shape.dims[1];
  double auc = 0, prev_x = 0, prev_y = 0;
  for (int64_t j = 0; j < t; j++) {
    double v[4];
    for (int q = 0; q < 4; q++) v[q] = gr_tensor_get_f64(C, q * t + j);
    /* recall tp / (tp + fn) and false-positive rate fp / (fp + tn), 0 over 0
     * is 0 (divide_no_nan); trapezoids from one threshold to the next */
    double x = v[1] + v[2] != 0 ? v[1] / (v[1] + v[2]) : 0;
    double y = v[0] + v[3] != 0 ? v[0] / (v[0] + v[3]) : 0;
    if (j > 0) auc += (prev_x - x) * (prev_y + y) / 2;
    prev_x = x, prev_y = y;
  }
  gr_tensor *o;
  gr_shape s = gr_shape_scalar();
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_F32, &s, &o));
  *(float *)gr_tensor_data(o) = (float)auc;
  return GR_OK;
}

const gr_op_def gr_op_auc_from_confusion = {
    .name = "auc_from_confusion",
    .doc = "the area under the ROC curve (f32) of auc_confusion's counts [4, T] (or their sums "
           "over batches): recall against the false-positive rate, 0/0 taken as 0, summed by "
           "trapezoids (Keras' AUC)",
    .min_inputs = 1,
    .max_inputs = 1,
    .input_names = (const char *const[]){"confusion"},
    .num_outputs = 1,
    .shape_fn = auc_from_confusion_shape,
    .kernel = auc_from_confusion_kernel,
    .flags = GR_OP_NO_GRADIENT};

gr_output gr_auc_confusion(gr_graph *g, gr_output y_true, gr_output y_pred,
                           int64_t num_thresholds) {
  gr_output in[2] = {y_true, y_pred};
  gr_attr a = gr_attr_int("num_thresholds", num_thresholds);
  return gr_ops_build(g, "auc_confusion", NULL, in, 2, &a, 1);
}

gr_output gr_auc_from_confusion(gr_graph *g, gr_output confusion) {
  return gr_ops_build(g, "auc_from_confusion", NULL, &confusion, 1, NULL, 0);
}

static gr_output probabilities(gr_graph *g, gr_output y_pred, bool from_logits) {
  return from_logits ? gr_sigmoid(g, y_pred) : y_pred;
}

gr_output gr_auc(gr_graph *g, gr_output y_true, gr_output y_pred, int64_t num_thresholds,
                 bool from_logits) {
  gr_output c = gr_auc_confusion(g, y_true, probabilities(g, y_pred, from_logits), num_thresholds);
  return gr_auc_from_confusion(g, c);
}

gr_status gr_streaming_auc(gr_graph *g, const char *name, gr_output y_true, gr_output y_pred,
                           int64_t num_thresholds, bool from_logits, gr_output out[3]) {
  out[0] = out[1] = out[2] = (gr_output){NULL, 0};
  gr_output batch =
      gr_auc_confusion(g, y_true, probabilities(g, y_pred, from_logits), num_thresholds);
  if (!batch.node) return gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INVALID_ARGUMENT;
  gr_shape s = *shape_of(batch);
  gr_output counts = gr_variable(g, name, gr_zeros(g, GR_F64, s));
  out[0] = gr_auc_from_confusion(g, counts);
  out[1] = gr_auc_from_confusion(g, gr_assign_add(g, counts, batch));
  out[2] = gr_assign(g, counts, gr_zeros(g, GR_F64, s));
  const gr_error *e = gr_graph_error(g);
  return e ? e->code : GR_OK;
}

/* ---- accuracies -------------------------------------------------------------------- */

static gr_output mean_f32(gr_graph *g, gr_output hits) {
  return gr_reduce_mean(g, gr_cast(g, hits, GR_F32), NULL, 0, false);
}

static bool present(gr_output a, gr_output b) {
  return a.node && b.node;
}

/* After Keras' rank rule, y_true and y_pred must have one shape. */
static bool same_shape(gr_graph *g, const char *fn, gr_output *y_true, gr_output *y_pred) {
  gr_ops_keras_same_rank(g, y_true, y_pred);
  if (!present(*y_true, *y_pred)) return false;
  if (gr_shape_compatible(shape_of(*y_true), shape_of(*y_pred))) return true;
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  gr_ops_fail(g, GR_ERR_SHAPE, "%s: y_true %s and y_pred %s differ (node '%s', node '%s')", fn,
              gr_shape_str(shape_of(*y_true), a), gr_shape_str(shape_of(*y_pred), b),
              y_true->node->name, y_pred->node->name);
  return false;
}

/* Labels [...] against predictions [..., classes]: an error naming fn when
 * the shapes cannot match. */
static bool per_example(gr_graph *g, const char *fn, gr_output labels, gr_output y_pred) {
  gr_shape want = drop_last(shape_of(y_pred));
  if (shape_of(y_pred)->rank == 0 || !merge_dims(&want, shape_of(labels))) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    gr_ops_fail(g, GR_ERR_SHAPE,
                "%s: y_true %s must have the shape of y_pred %s without the classes (node '%s')",
                fn, gr_shape_str(shape_of(labels), a), gr_shape_str(shape_of(y_pred), b),
                labels.node->name);
    return false;
  }
  return true;
}

/* a == b exactly: in a's dtype when both have it, else in f64 when either
 * is a float, else in i64. */
static gr_output equal_exact(gr_graph *g, gr_output a, gr_output b) {
  gr_dtype da = dtype_of(a), db = dtype_of(b);
  if (da != db) {
    gr_dtype common = gr_dtype_is_float(da) || gr_dtype_is_float(db) ? GR_F64 : GR_I64;
    a = da == common ? a : gr_cast(g, a, common);
    b = db == common ? b : gr_cast(g, b, common);
  }
  return gr_equal(g, a, b);
}

static gr_output argmax_last(gr_graph *g, gr_output x) {
  if (dtype_of(x) == GR_BOOL) x = gr_cast(g, x, GR_U8);
  return gr_argmax(g, x, -1);
}

gr_output gr_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred) {
  if (!present(y_true, y_pred) || !same_shape(g, "accuracy", &y_true, &y_pred))
    return (gr_output){NULL, 0};
  return mean_f32(g, equal_exact(g, y_true, y_pred));
}

gr_output gr_binary_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred, double threshold) {
  if (!present(y_true, y_pred) || !same_shape(g, "binary_accuracy", &y_true, &y_pred))
    return (gr_output){NULL, 0};
  if (!gr_dtype_is_float(dtype_of(y_pred))) y_pred = gr_cast(g, y_pred, GR_F64);
  gr_output above = gr_greater(g, y_pred, gr_ops_const_scalar(g, dtype_of(y_pred), threshold));
  gr_dtype dt = dtype_of(y_true);
  return mean_f32(g, gr_equal(g, y_true, dt == GR_BOOL ? above : gr_cast(g, above, dt)));
}

/* y_true and y_pred of one shape [..., classes]: an error naming fn otherwise. */
static bool one_shape(gr_graph *g, const char *fn, gr_output y_true, gr_output y_pred) {
  if (!present(y_true, y_pred)) return false;
  if (gr_shape_compatible(shape_of(y_true), shape_of(y_pred)) && shape_of(y_pred)->rank != 0)
    return true;
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  gr_ops_fail(g, GR_ERR_SHAPE,
              "%s: y_true %s and y_pred %s must have one shape [..., classes] (node '%s', node "
              "'%s')",
              fn, gr_shape_str(shape_of(y_true), a), gr_shape_str(shape_of(y_pred), b),
              y_true.node->name, y_pred.node->name);
  return false;
}

gr_output gr_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred) {
  if (!one_shape(g, "categorical_accuracy", y_true, y_pred)) return (gr_output){NULL, 0};
  return mean_f32(g, gr_equal(g, argmax_last(g, y_true), argmax_last(g, y_pred)));
}

/* Labels [..., 1] of y_pred's rank lose the last dim (Keras). */
static gr_output squeeze_labels(gr_graph *g, gr_output labels, gr_output y_pred) {
  const gr_shape *sl = shape_of(labels), *sp = shape_of(y_pred);
  if (sl->rank >= 1 && sl->rank == sp->rank && sl->dims[sl->rank - 1] == 1)
    return gr_squeeze(g, labels, (int64_t[]){-1}, 1);
  return labels;
}

gr_output gr_sparse_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred) {
  const char *fn = "sparse_categorical_accuracy";
  if (!present(y_true, y_pred)) return (gr_output){NULL, 0};
  gr_output labels = squeeze_labels(g, y_true, y_pred);
  if (!labels.node || !per_example(g, fn, labels, y_pred)) return (gr_output){NULL, 0};
  return mean_f32(g, equal_exact(g, labels, argmax_last(g, y_pred)));
}

gr_output gr_top_k_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                        int64_t k) {
  if (!one_shape(g, "top_k_categorical_accuracy", y_true, y_pred)) return (gr_output){NULL, 0};
  return mean_f32(g, gr_in_top_k(g, y_pred, argmax_last(g, y_true), k));
}

gr_output gr_sparse_top_k_categorical_accuracy(gr_graph *g, gr_output y_true, gr_output y_pred,
                                               int64_t k) {
  const char *fn = "sparse_top_k_categorical_accuracy";
  gr_output labels = gr_ops_sparse_labels(g, fn, y_true, y_pred);
  if (!labels.node || !per_example(g, fn, labels, y_pred)) return (gr_output){NULL, 0};
  return mean_f32(g, gr_in_top_k(g, y_pred, labels, k));
}
