/* Fused gradient ops of the nn family: relu_grad (dy where y > 0) and
 * sparse_softmax_cross_entropy_grad ((softmax(logits) - onehot(labels)) *
 * dloss), which the gradients of relu and the sparse loss build on, and
 * their own gradients (for gradients of gradients). */
#include <math.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- relu_grad ---------------------------------------------------------------------- */

static gr_status relu_grad_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  return gr_shape_fn_unchanged(ctx);
}

static gr_status relu_grad_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *DY = &ctx->inputs[0], *Y = &ctx->inputs[1];
  if (!gr_shape_equal(&DY->shape, &Y->shape) || DY->dtype != Y->dtype) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "dy %s and y %s differ", gr_shape_str(&DY->shape, a),
                           gr_shape_str(&Y->shape, b));
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, DY->dtype, &DY->shape, &o));
  int64_t n = gr_tensor_num_elements(DY);
  /* both loads unconditional, so the select vectorizes (a branch on the sign
   * of y mispredicted half the time) */
  if (DY->dtype == GR_F32) {
    const float *dy = gr_tensor_data(DY), *y = gr_tensor_data(Y);
    float *r = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++) {
      float d = dy[i], v = y[i];
      r[i] = v > 0 ? d : 0.0f;
    }
  } else {
    const double *dy = gr_tensor_data(DY), *y = gr_tensor_data(Y);
    double *r = gr_tensor_data(o);
    for (int64_t i = 0; i < n; i++) {
      double d = dy[i], v = y[i];
      r[i] = v > 0 ? d : 0.0;
    }
  }
  return GR_OK;
}

/* Linear in dy with the same mask; piecewise constant in y (no gradient). */
static gr_status relu_grad_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_relu_grad(c->graph, c->grads[0], gr_grad_x(c, 1));
  return GR_OK;
}

const gr_op_def gr_op_relu_grad = {.name = "relu_grad",
                                   .doc = "dy where y > 0, else 0 (the gradient of relu)",
                                   .min_inputs = 2,
                                   .max_inputs = 2,
                                   .input_names = (const char *const[]){"dy", "y"},
                                   .num_outputs = 1,
                                   .shape_fn = relu_grad_shape,
                                   .kernel = relu_grad_kernel,
                                   .grad_fn = relu_grad_grad};

gr_output gr_relu_grad(gr_graph *g, gr_output dy, gr_output y) {
  gr_output in[2] = {dy, y};
  return gr_ops_build(g, "relu_grad", NULL, in, 2, NULL, 0);
}

/* ---- sparse_softmax_cross_entropy_grad ------------------------------------------------- */

static gr_status sxg_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_INDEX));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 2));
  return gr_shape_fn_unchanged(ctx);
}

#define SXG_LOOP(T)                                                                                \
  do {                                                                                             \
    const T *x = gr_tensor_data(L), *d = gr_tensor_data(D);                                        \
    T *r = gr_tensor_data(o);                                                                      \
    for (int64_t i = 0; i < batch; i++) {                                                          \
      const T *row = x + i * c;                                                                    \
      T *out = r + i * c;                                                                          \
      int64_t k = Y->dtype == GR_I32 ? ((const int32_t *)gr_tensor_data(Y))[i]                     \
                                     : ((const int64_t *)gr_tensor_data(Y))[i];                    \
      if (k < 0 || k >= c)                                                                         \
        return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,                                           \
                               "label %lld at row %lld is out of range [0, %lld)", (long long)k,   \
                               (long long)i, (long long)c);                                        \
      double m = row[0], sum = 0;                                                                  \
      for (int64_t j = 1; j < c; j++)                                                              \
        if (row[j] > m) m = row[j];                                                                \
      for (int64_t j = 0; j < c; j++) sum += exp((double)row[j] - m);                              \
      double scale = (double)d[i] / sum;                                                           \
      for (int64_t j = 0; j < c; j++) out[j] = (T)(exp((double)row[j] - m) * scale);               \
      out[k] = (T)((double)out[k] - (double)d[i]);                                                 \
    }                                                                                              \
  } while (0)

static gr_status sxg_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *L = &ctx->inputs[0], *Y = &ctx->inputs[1], *D = &ctx->inputs[2];
  int r = L->shape.rank;
  bool ok = r >= 1 && Y->shape.rank == r - 1 && gr_shape_equal(&Y->shape, &D->shape);
  for (int d = 0; ok && d < r - 1; d++) ok = Y->shape.dims[d] == L->shape.dims[d];
  if (!ok) return gr_kernel_error(ctx, GR_ERR_SHAPE, "logits, labels and dloss do not match");
  int64_t batch = gr_tensor_num_elements(Y), c = L->shape.dims[r - 1];
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, L->dtype, &L->shape, &o));
  if (c == 0) return GR_OK;
  if (L->dtype == GR_F32)
    SXG_LOOP(float);
  else
    SXG_LOOP(double);
  return GR_OK;
}

/* out = (p - onehot) d[:, None] with p = softmax(logits); for the incoming G:
 * dlogits = softmax's gradient of G d[:, None], dd = sum(G (p - onehot))
 * over the classes (p - onehot: this op with ones for dloss). */
static gr_status sxg_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output logits = gr_grad_x(c, 0), labels = gr_grad_x(c, 1), d = gr_grad_x(c, 2);
  gr_output G = c->grads[0];
  int64_t last = -1;
  gr_output gd = gr_mul(g, G, gr_expand_dims(g, d, -1));
  c->dinputs[0] = gr_ops_softmax_backprop(g, gr_softmax(g, logits), gd);
  gr_output q = gr_sparse_softmax_cross_entropy_grad(g, logits, labels, gr_ones_like(g, d));
  c->dinputs[2] = gr_reduce_sum(g, gr_mul(g, G, q), &last, 1, false);
  return GR_OK;
}

const gr_op_def gr_op_sparse_softmax_cross_entropy_grad = {
    .name = "sparse_softmax_cross_entropy_grad",
    .doc = "(softmax(logits) - onehot(labels)) * dloss[:, None]",
    .min_inputs = 3,
    .max_inputs = 3,
    .input_names = (const char *const[]){"logits", "labels", "dloss"},
    .num_outputs = 1,
    .shape_fn = sxg_shape,
    .kernel = sxg_kernel,
    .grad_fn = sxg_grad};

gr_output gr_sparse_softmax_cross_entropy_grad(gr_graph *g, gr_output logits, gr_output labels,
                                               gr_output dloss) {
  gr_output in[3] = {logits, labels, dloss};
  return gr_ops_build(g, "sparse_softmax_cross_entropy_grad", NULL, in, 3, NULL, 0);
}
