/* Neural-network ops: relu, sigmoid, tanh, softmax and log_softmax over the
 * last axis, bias_add, and the softmax cross-entropy losses (dense and
 * sparse labels). Softmax-style ops subtract the row max and accumulate in
 * double, so large logits do not overflow. */
#include <math.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- activations ------------------------------------------------------------- */

static const char *const x_names[] = {"x"};

/* 1 / (1 + e^-x) without overflow for large |x|. */
static double sigmoid_d(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
static float sigmoid_f(float x) {
  if (x >= 0) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

/* Kernel, op def and builder of a float elementwise op (in place when possible). */
#define DEFINE_ACTIVATION(NAME, DOC, EF, ED)                                                       \
  GR_DEFINE_UNARY_OP(NAME, GR_DT_FLOAT, DOC, EF, ED, x, x, x, x, NAME##_grad, 0)

static gr_status relu_grad_fn(gr_grad_ctx *c) {
  c->dinputs[0] = gr_ops_fuse_relu_grad(c->graph, c->grads[0], gr_grad_y(c, 0));
  return GR_OK;
}
#define relu_grad relu_grad_fn
/* dy y (1 - y) */
static gr_status sigmoid_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output y = gr_grad_y(c, 0);
  gr_output one_minus = gr_sub(g, gr_grad_scalar(c, y, 1), y);
  c->dinputs[0] = gr_mul(g, c->grads[0], gr_mul(g, y, one_minus));
  return GR_OK;
}
/* dy (1 - y^2) */
static gr_status tanh_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output y = gr_grad_y(c, 0);
  c->dinputs[0] = gr_mul(g, c->grads[0], gr_sub(g, gr_grad_scalar(c, y, 1), gr_square(g, y)));
  return GR_OK;
}

/* x < 0 ? 0 : x keeps NaN as NaN. */
DEFINE_ACTIVATION(relu, "max(x, 0) elementwise; gradient 0 at x = 0", x < 0 ? 0.0f : x,
                  x < 0 ? 0.0 : x)
DEFINE_ACTIVATION(sigmoid, "1 / (1 + e^-x) elementwise", sigmoid_f(x), sigmoid_d(x))
DEFINE_ACTIVATION(tanh, "tanh(x) elementwise", tanhf(x), tanh(x))
#undef relu_grad

/* ---- softmax, log_softmax ------------------------------------------------------ */

static gr_status softmax_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  if (ctx->in_shapes[0].rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "input 'x' must have rank >= 1, got a scalar");
  return gr_shape_fn_unchanged(ctx);
}

/* Row-wise (log_)softmax of rows x c values; y may alias x. */
#define SOFTMAX_ROWS(T)                                                                            \
  static void softmax_rows_##T(const T *x, T *y, int64_t rows, int64_t c, bool log_out) {          \
    for (int64_t r = 0; r < rows; r++, x += c, y += c) {                                           \
      T m = x[0];                                                                                  \
      for (int64_t j = 1; j < c; j++)                                                              \
        if (x[j] > m) m = x[j];                                                                    \
      double sum = 0;                                                                              \
      if (log_out) {                                                                               \
        for (int64_t j = 0; j < c; j++) sum += exp((double)x[j] - (double)m);                      \
        double lse = (double)m + log(sum);                                                         \
        for (int64_t j = 0; j < c; j++) y[j] = (T)((double)x[j] - lse);                            \
      } else {                                                                                     \
        for (int64_t j = 0; j < c; j++) {                                                          \
          double e = exp((double)x[j] - (double)m);                                                \
          sum += e;                                                                                \
          y[j] = (T)e;                                                                             \
        }                                                                                          \
        for (int64_t j = 0; j < c; j++) y[j] = (T)((double)y[j] / sum);                            \
      }                                                                                            \
    }                                                                                              \
  }
SOFTMAX_ROWS(float)
SOFTMAX_ROWS(double)

static gr_status softmax_common(gr_kernel_ctx *ctx, bool log_out) {
  const gr_tensor *X = &ctx->inputs[0];
  if (!gr_dtype_is_float(X->dtype))
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(X->dtype));
  if (X->shape.rank < 1)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "input must have rank >= 1, got a scalar");
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, X->dtype, &X->shape, &o));
  int64_t c = X->shape.dims[X->shape.rank - 1];
  if (c == 0) return GR_OK;
  int64_t rows = gr_tensor_num_elements(X) / c;
  if (X->dtype == GR_F32)
    softmax_rows_float(gr_tensor_data(X), gr_tensor_data(o), rows, c, log_out);
  else
    softmax_rows_double(gr_tensor_data(X), gr_tensor_data(o), rows, c, log_out);
  return GR_OK;
}
static gr_status softmax_kernel(gr_kernel_ctx *ctx) {
  return softmax_common(ctx, false);
}
static gr_status log_softmax_kernel(gr_kernel_ctx *ctx) {
  return softmax_common(ctx, true);
}

/* Elements of input i of a node, unknown dims counted as 1. */
static double input_elements(const gr_node *n, int i) {
  const gr_shape *s = &n->inputs[i].node->out_shapes[n->inputs[i].index];
  double e = 1;
  for (int d = 0; d < s->rank; d++) e *= s->dims[d] < 0 ? 1.0 : (double)s->dims[d];
  return e;
}

/* A few flops per logit (max, exp, sum, normalise). */
static void softmax_cost(const gr_node *n, gr_cost *c) {
  double e = input_elements(n, 0);
  c->flops = 5 * e;
  c->bytes = 2 * e * (double)gr_dtype_size(n->out_dtypes[0]);
}

gr_output gr_ops_softmax_backprop(gr_graph *g, gr_output y, gr_output dy) {
  int64_t last = -1;
  gr_output s = gr_reduce_sum(g, gr_mul(g, dy, y), &last, 1, true);
  return gr_mul(g, y, gr_sub(g, dy, s));
}
static gr_status softmax_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_ops_softmax_backprop(c->graph, gr_grad_y(c, 0), c->grads[0]);
  return GR_OK;
}
/* dy - exp(y) sum(dy) over the last axis */
static gr_status log_softmax_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output y = gr_grad_y(c, 0), dy = c->grads[0];
  int64_t last = -1;
  gr_output s = gr_reduce_sum(g, dy, &last, 1, true);
  c->dinputs[0] = gr_sub(g, dy, gr_mul(g, gr_exp(g, y), s));
  return GR_OK;
}

const gr_op_def gr_op_softmax = {.name = "softmax",
                                 .doc = "softmax over the last axis",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .input_names = x_names,
                                 .num_outputs = 1,
                                 .shape_fn = softmax_shape,
                                 .cost_fn = softmax_cost,
                                 .kernel = softmax_kernel,
                                 .grad_fn = softmax_grad};

const gr_op_def gr_op_log_softmax = {.name = "log_softmax",
                                     .doc = "log of softmax over the last axis",
                                     .min_inputs = 1,
                                     .max_inputs = 1,
                                     .input_names = x_names,
                                     .num_outputs = 1,
                                     .shape_fn = softmax_shape,
                                     .cost_fn = softmax_cost,
                                     .kernel = log_softmax_kernel,
                                     .grad_fn = log_softmax_grad};

gr_output gr_softmax(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "softmax", NULL, &x, 1, NULL, 0);
}
gr_output gr_log_softmax(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "log_softmax", NULL, &x, 1, NULL, 0);
}

/* ---- bias_add ---------------------------------------------------------------- */

static gr_status bias_add_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  const gr_shape *x = &ctx->in_shapes[0], *b = &ctx->in_shapes[1];
  char xs[GR_SHAPE_STR_MAX], bs[GR_SHAPE_STR_MAX];
  if (x->rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "input 'x' must have rank >= 1, got a scalar");
  if (b->rank >= 0 && b->rank != 1)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "input 'bias' must have rank 1, got shape %s",
                          gr_shape_str(b, bs));
  if (x->rank > 0 && b->rank == 1) {
    int64_t c = x->dims[x->rank - 1];
    if (c >= 0 && b->dims[0] >= 0 && c != b->dims[0])
      return gr_shape_error(
          ctx, GR_ERR_SHAPE, "bias %s does not match the last dimension of x %s (%lld vs %lld)",
          gr_shape_str(b, bs), gr_shape_str(x, xs), (long long)b->dims[0], (long long)c);
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = *x;
  if (x->rank > 0 && b->rank == 1 && x->dims[x->rank - 1] < 0)
    ctx->out_shapes[0].dims[x->rank - 1] = b->dims[0];
  return GR_OK;
}

/* r[i, j] = x[i, j] + b[j]; U wraps integers. */
#define BIAS_LOOP(T, U)                                                                            \
  do {                                                                                             \
    const T *x = gr_tensor_data(X), *b = gr_tensor_data(B);                                        \
    T *r = gr_tensor_data(o);                                                                      \
    for (int64_t i = 0; i < rows; i++)                                                             \
      for (int64_t j = 0; j < c; j++) r[i * c + j] = (T)((U)x[i * c + j] + (U)b[j]);               \
  } while (0)

static gr_status bias_add_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0], *B = &ctx->inputs[1];
  char xs[GR_SHAPE_STR_MAX], bs[GR_SHAPE_STR_MAX];
  if (X->dtype != B->dtype)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "x is %s but bias is %s", gr_dtype_name(X->dtype),
                           gr_dtype_name(B->dtype));
  if (X->shape.rank < 1 || B->shape.rank != 1 ||
      X->shape.dims[X->shape.rank - 1] != B->shape.dims[0])
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "bias %s does not match the last dimension of x %s",
                           gr_shape_str(&B->shape, bs), gr_shape_str(&X->shape, xs));
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, X->dtype, &X->shape, &o));
  int64_t c = B->shape.dims[0];
  int64_t rows = c ? gr_tensor_num_elements(X) / c : 0;
  switch (X->dtype) {
    case GR_F32:
      BIAS_LOOP(float, float);
      break;
    case GR_F64:
      BIAS_LOOP(double, double);
      break;
    case GR_I32:
      BIAS_LOOP(int32_t, uint32_t);
      break;
    case GR_I64:
      BIAS_LOOP(int64_t, uint64_t);
      break;
    case GR_U8:
      BIAS_LOOP(uint8_t, unsigned);
      break;
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  }
  return GR_OK;
}

static gr_status bias_add_grad(gr_grad_ctx *c) {
  c->dinputs[0] = c->grads[0];
  c->dinputs[1] = gr_sum_like(c->graph, c->grads[0], gr_grad_x(c, 1));
  return GR_OK;
}

const gr_op_def gr_op_bias_add = {.name = "bias_add",
                                  .doc = "x [..., c] + bias [c]",
                                  .min_inputs = 2,
                                  .max_inputs = 2,
                                  .input_names = (const char *const[]){"x", "bias"},
                                  .num_outputs = 1,
                                  .shape_fn = bias_add_shape,
                                  .kernel = bias_add_kernel,
                                  .grad_fn = bias_add_grad};

gr_output gr_bias_add(gr_graph *g, gr_output x, gr_output bias) {
  gr_output in[2] = {x, bias};
  return gr_ops_build(g, "bias_add", NULL, in, 2, NULL, 0);
}

/* ---- cross-entropy losses ------------------------------------------------------ */

/* Merges a known dim into a possibly unknown one; false on a certain conflict. */
static bool merge_dim(int64_t *d, int64_t other) {
  if (*d < 0) {
    *d = other;
    return true;
  }
  return other < 0 || other == *d;
}

static gr_status xent_shape(gr_shape_ctx *ctx, bool sparse) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  if (sparse)
    GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_INDEX));
  else
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  const gr_shape *lg = &ctx->in_shapes[0], *lb = &ctx->in_shapes[1];
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (lg->rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "logits must have rank >= 1 [..., classes], got a scalar");
  if (!sparse && lb->rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "labels must have rank >= 1 [..., classes], got a scalar");
  if (lg->rank > 0 && lb->rank >= 0) {
    int want = sparse ? lg->rank - 1 : lg->rank;
    if (lb->rank != want)
      return gr_shape_error(ctx, GR_ERR_SHAPE, "labels must have rank %d (%s), got %s", want,
                            sparse ? "the logits' shape without the classes" : "that of the logits",
                            gr_shape_str(lb, b));
  }
  /* the loss has the logits' shape without the last axis */
  gr_shape out = gr_shape_unknown();
  if (lg->rank > 0) {
    out.rank = lg->rank - 1;
    for (int d = 0; d < out.rank; d++) out.dims[d] = lg->dims[d];
  } else if (lb->rank >= 0) {
    out.rank = sparse ? lb->rank : lb->rank - 1;
    for (int d = 0; d < out.rank; d++) out.dims[d] = GR_DIM_UNKNOWN;
  }
  bool ok = true;
  if (lb->rank >= 0 && out.rank >= 0)
    for (int d = 0; d < out.rank; d++) ok = ok && merge_dim(&out.dims[d], lb->dims[d]);
  if (ok && !sparse && lg->rank > 0 && lb->rank == lg->rank) {
    int64_t classes = lg->dims[lg->rank - 1];
    ok = merge_dim(&classes, lb->dims[lb->rank - 1]);
  }
  if (!ok)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "logits %s and labels %s do not match",
                          gr_shape_str(lg, a), gr_shape_str(lb, b));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}
static gr_status dense_xent_shape(gr_shape_ctx *ctx) {
  return xent_shape(ctx, false);
}
static gr_status sparse_xent_shape(gr_shape_ctx *ctx) {
  return xent_shape(ctx, true);
}

/* log(sum(exp(x))) of one row of c > 0 values, stable. */
#define LSE_FN(T)                                                                                  \
  static double lse_##T(const T *x, int64_t c) {                                                   \
    double m = x[0];                                                                               \
    for (int64_t j = 1; j < c; j++)                                                                \
      if (x[j] > m) m = x[j];                                                                      \
    double sum = 0;                                                                                \
    for (int64_t j = 0; j < c; j++) sum += exp((double)x[j] - m);                                  \
    return m + log(sum);                                                                           \
  }
LSE_FN(float)
LSE_FN(double)

/* Checks logits [..., classes] and labels (the logits' shape, or without
 * the classes when sparse); allocates the loss (the logits' shape without
 * the classes) and sets *rows (its elements) and *c (the classes). */
static gr_status xent_prepare(gr_kernel_ctx *ctx, bool sparse, gr_tensor **out, int64_t *rows,
                              int64_t *c) {
  const gr_tensor *L = &ctx->inputs[0], *Y = &ctx->inputs[1];
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (!gr_dtype_is_float(L->dtype))
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(L->dtype));
  int r = L->shape.rank;
  bool ok = r >= 1 && Y->shape.rank == (sparse ? r - 1 : r);
  for (int d = 0; ok && d < Y->shape.rank; d++) ok = Y->shape.dims[d] == L->shape.dims[d];
  if (!ok)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "logits %s and labels %s do not match",
                           gr_shape_str(&L->shape, a), gr_shape_str(&Y->shape, b));
  gr_shape os = L->shape;
  os.rank = r - 1;
  *c = L->shape.dims[r - 1];
  *rows = gr_shape_num_elements(&os);
  return gr_kernel_alloc_output(ctx, 0, L->dtype, &os, out);
}

/* loss[i] = sum_j labels[i, j] * (lse(logits[i]) - logits[i, j]); zero
 * labels contribute nothing (even against -inf logits). */
#define DENSE_XENT(T)                                                                              \
  do {                                                                                             \
    const T *x = gr_tensor_data(&ctx->inputs[0]), *y = gr_tensor_data(&ctx->inputs[1]);            \
    T *r = gr_tensor_data(o);                                                                      \
    for (int64_t i = 0; i < batch; i++, x += c, y += c) {                                          \
      if (c == 0) {                                                                                \
        r[i] = 0;                                                                                  \
        continue;                                                                                  \
      }                                                                                            \
      double lse = lse_##T(x, c), loss = 0;                                                        \
      for (int64_t j = 0; j < c; j++)                                                              \
        if (y[j] != 0) loss += (double)y[j] * (lse - (double)x[j]);                                \
      r[i] = (T)loss;                                                                              \
    }                                                                                              \
  } while (0)

static gr_status softmax_cross_entropy_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *L = &ctx->inputs[0];
  if (ctx->inputs[1].dtype != L->dtype)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "labels must have the dtype of logits");
  gr_tensor *o;
  int64_t batch, c;
  GR_TRY(xent_prepare(ctx, false, &o, &batch, &c));
  if (L->dtype == GR_F32)
    DENSE_XENT(float);
  else
    DENSE_XENT(double);
  return GR_OK;
}

/* Label of row i as int64 (i32 or i64 labels). */
static int64_t label_at(const gr_tensor *Y, int64_t i) {
  return Y->dtype == GR_I32 ? ((const int32_t *)gr_tensor_data(Y))[i]
                            : ((const int64_t *)gr_tensor_data(Y))[i];
}

/* loss[i] = lse(logits[i]) - logits[i, labels[i]]. */
#define SPARSE_XENT(T)                                                                             \
  do {                                                                                             \
    const T *x = gr_tensor_data(L);                                                                \
    T *r = gr_tensor_data(o);                                                                      \
    for (int64_t i = 0; i < batch; i++) {                                                          \
      int64_t k = label_at(Y, i);                                                                  \
      if (k < 0 || k >= c)                                                                         \
        return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,                                           \
                               "label %lld at row %lld is out of range [0, %lld)", (long long)k,   \
                               (long long)i, (long long)c);                                        \
      r[i] = (T)(lse_##T(x + i * c, c) - (double)x[i * c + k]);                                    \
    }                                                                                              \
  } while (0)

static gr_status sparse_softmax_cross_entropy_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *L = &ctx->inputs[0], *Y = &ctx->inputs[1];
  if (Y->dtype != GR_I32 && Y->dtype != GR_I64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "labels must be i32 or i64, got %s",
                           gr_dtype_name(Y->dtype));
  gr_tensor *o;
  int64_t batch, c;
  GR_TRY(xent_prepare(ctx, true, &o, &batch, &c));
  if (L->dtype == GR_F32)
    SPARSE_XENT(float);
  else
    SPARSE_XENT(double);
  return GR_OK;
}

/* dlogits = (softmax(logits) sum(labels) - labels) dloss[:, None] (labels need
 * not sum to 1); dlabels = -log_softmax(logits) dloss[:, None]. */
static gr_status softmax_cross_entropy_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output logits = gr_grad_x(c, 0), labels = gr_grad_x(c, 1);
  int64_t last = -1;
  gr_output d = gr_expand_dims(g, c->grads[0], -1);
  gr_output mass = gr_reduce_sum(g, labels, &last, 1, true);
  c->dinputs[0] = gr_mul(g, gr_sub(g, gr_mul(g, gr_softmax(g, logits), mass), labels), d);
  c->dinputs[1] = gr_mul(g, gr_neg(g, gr_log_softmax(g, logits)), d);
  return GR_OK;
}
static gr_status sparse_softmax_cross_entropy_grad_fn(gr_grad_ctx *c) {
  c->dinputs[0] =
      gr_sparse_softmax_cross_entropy_grad(c->graph, gr_grad_x(c, 0), gr_grad_x(c, 1), c->grads[0]);
  return GR_OK;
}

const gr_op_def gr_op_softmax_cross_entropy = {
    .name = "softmax_cross_entropy",
    .doc = "per-example -sum(labels * log_softmax(logits)) over the last axis of [..., classes] "
           "(labels: the same shape); the loss has the shape without classes",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"logits", "labels"},
    .num_outputs = 1,
    .shape_fn = dense_xent_shape,
    .cost_fn = softmax_cost,
    .kernel = softmax_cross_entropy_kernel,
    .grad_fn = softmax_cross_entropy_grad};

const gr_op_def gr_op_sparse_softmax_cross_entropy = {
    .name = "sparse_softmax_cross_entropy",
    .doc = "per-example -log_softmax(logits)[label] of logits [..., classes], labels i32/i64 of "
           "the shape without classes (out of range: an error naming the row)",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"logits", "labels"},
    .num_outputs = 1,
    .shape_fn = sparse_xent_shape,
    .cost_fn = softmax_cost,
    .kernel = sparse_softmax_cross_entropy_kernel,
    .grad_fn = sparse_softmax_cross_entropy_grad_fn};

gr_output gr_softmax_cross_entropy(gr_graph *g, gr_output logits, gr_output labels) {
  gr_output in[2] = {logits, labels};
  return gr_ops_build(g, "softmax_cross_entropy", NULL, in, 2, NULL, 0);
}
gr_output gr_sparse_softmax_cross_entropy(gr_graph *g, gr_output logits, gr_output labels) {
  gr_output in[2] = {logits, labels};
  return gr_ops_build(g, "sparse_softmax_cross_entropy", NULL, in, 2, NULL, 0);
}
