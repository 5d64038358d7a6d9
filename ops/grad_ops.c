/* Ops that gradient functions build on: sum_like (undo broadcasting) and its
 * inverse broadcast_to_like, broadcast_like (undo a reduction),
 * reshape_like, stop_gradient and gather_grad (scatter-add rows back into
 * the shape of the gathered params). They take the runtime shape from a
 * `like` input, so gradients work with unknown dims such as the batch size.
 * Each has a gradient itself (but stop_gradient), so gradients of gradients
 * work; `like` only lends its shape and gets none. */
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const char *const grad_like_names[] = {"grad", "like"};

/* Output: dtype of input 0, shape of input 1. */
static gr_status like_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->in_shapes[1];
  return GR_OK;
}

/* ---- sum_like -------------------------------------------------------------------- */

static gr_status sum_like_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  gr_shape b;
  if (!gr_shape_broadcast(&ctx->in_shapes[1], &ctx->in_shapes[0], &b) ||
      !gr_shape_compatible(&b, &ctx->in_shapes[0])) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "%s cannot be summed down to %s",
                          gr_shape_str(&ctx->in_shapes[0], x), gr_shape_str(&ctx->in_shapes[1], y));
  }
  return like_shape(ctx);
}

#define SUM_LIKE_LOOP(T)                                                                           \
  do {                                                                                             \
    const T *g = gr_tensor_data(G);                                                                \
    T *r = gr_tensor_data(o);                                                                      \
    memset(r, 0, gr_tensor_num_bytes(o));                                                          \
    GR_BCAST_FOR(&bc, ia, ib, io, r[ia] += g[ib]);                                                 \
  } while (0)

static gr_status sum_like_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *G = &ctx->inputs[0], *L = &ctx->inputs[1];
  if (gr_shape_equal(&G->shape, &L->shape)) {
    gr_kernel_set_output(ctx, 0, G);
    return GR_OK;
  }
  gr_bcast bc;
  gr_shape os;
  if (!gr_bcast_init(&bc, &L->shape, &G->shape, &os) || !gr_shape_equal(&os, &G->shape)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "%s cannot be summed down to %s",
                           gr_shape_str(&G->shape, x), gr_shape_str(&L->shape, y));
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, G->dtype, &L->shape, &o));
  switch (G->dtype) {
    case GR_F32:
      SUM_LIKE_LOOP(float);
      break;
    case GR_F64:
      SUM_LIKE_LOOP(double);
      break;
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "sum_like supports f32 and f64");
  }
  return GR_OK;
}

static gr_status sum_like_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_broadcast_to_like(c->graph, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}

const gr_op_def gr_op_sum_like = {.name = "sum_like",
                                  .doc = "grad summed down to the runtime shape of like (undoes "
                                         "broadcasting)",
                                  .min_inputs = 2,
                                  .max_inputs = 2,
                                  .input_names = grad_like_names,
                                  .num_outputs = 1,
                                  .shape_fn = sum_like_shape,
                                  .kernel = sum_like_kernel,
                                  .grad_fn = sum_like_grad};

gr_output gr_sum_like(gr_graph *g, gr_output grad, gr_output like) {
  gr_output in[2] = {grad, like};
  return gr_ops_build(g, "sum_like", NULL, in, 2, NULL, 0);
}

gr_output gr_grad_sum_like(const gr_grad_ctx *c, gr_output grad, gr_output like) {
  if (c->static_shapes && grad.node && like.node) {
    const gr_shape *gs = &grad.node->out_shapes[grad.index];
    const gr_shape *ls = &like.node->out_shapes[like.index];
    if (gr_shape_num_elements(gs) >= 0 && gr_shape_equal(gs, ls) &&
        grad.node->out_dtypes[grad.index] == like.node->out_dtypes[like.index])
      return grad;
  }
  return gr_sum_like(c->graph, grad, like);
}

/* ---- broadcast_to_like, broadcast_like ------------------------------------------------ */

/* o = Y (viewed with shape ys) broadcast onto o's shape, times scale. */
static void broadcast_into(const gr_tensor *Y, const gr_shape *ys, gr_tensor *o, double scale) {
  gr_bcast bc;
  gr_shape os;
  gr_bcast_init(&bc, ys, &o->shape, &os);
  if (Y->dtype == GR_F32) {
    const float *y = gr_tensor_data(Y);
    float *r = gr_tensor_data(o), s = (float)scale;
    GR_BCAST_FOR(&bc, ia, ib, io, r[io] = y[ia] * s);
  } else {
    const double *y = gr_tensor_data(Y);
    double *r = gr_tensor_data(o);
    GR_BCAST_FOR(&bc, ia, ib, io, r[io] = y[ia] * scale);
  }
}

static gr_status broadcast_to_like_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  gr_shape b;
  if (!gr_shape_broadcast(&ctx->in_shapes[0], &ctx->in_shapes[1], &b) ||
      !gr_shape_compatible(&b, &ctx->in_shapes[1])) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "%s does not broadcast to %s",
                          gr_shape_str(&ctx->in_shapes[0], x), gr_shape_str(&ctx->in_shapes[1], y));
  }
  return like_shape(ctx);
}

static gr_status broadcast_to_like_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0], *L = &ctx->inputs[1];
  if (gr_shape_equal(&X->shape, &L->shape)) {
    gr_kernel_set_output(ctx, 0, X);
    return GR_OK;
  }
  gr_shape os;
  if (!gr_shape_broadcast(&X->shape, &L->shape, &os) || !gr_shape_equal(&os, &L->shape)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "%s does not broadcast to %s",
                           gr_shape_str(&X->shape, x), gr_shape_str(&L->shape, y));
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &L->shape, &o));
  broadcast_into(X, &X->shape, o, 1.0);
  return GR_OK;
}

static gr_status broadcast_to_like_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_sum_like(c->graph, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}

const gr_op_def gr_op_broadcast_to_like = {
    .name = "broadcast_to_like",
    .doc = "x broadcast to the runtime shape of like (NumPy rules; undoes sum_like)",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"x", "like"},
    .num_outputs = 1,
    .shape_fn = broadcast_to_like_shape,
    .kernel = broadcast_to_like_kernel,
    .grad_fn = broadcast_to_like_grad};

gr_output gr_broadcast_to_like(gr_graph *g, gr_output x, gr_output like) {
  gr_output in[2] = {x, like};
  return gr_ops_build(g, "broadcast_to_like", NULL, in, 2, NULL, 0);
}

static gr_status broadcast_like_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  return like_shape(ctx);
}

static gr_status broadcast_like_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *Y = &ctx->inputs[0], *L = &ctx->inputs[1];
  int rank = L->shape.rank;
  bool mask[GR_MAX_RANK];
  GR_TRY(gr_ops_kernel_axes_mask(ctx, "axes", rank, mask));
  gr_shape kd = L->shape;
  double count = 1;
  for (int i = 0; i < rank; i++)
    if (mask[i]) {
      count *= (double)kd.dims[i];
      kd.dims[i] = 1;
    }
  if (gr_shape_num_elements(&kd) != gr_tensor_num_elements(Y)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "%s does not broadcast back to %s",
                           gr_shape_str(&Y->shape, x), gr_shape_str(&L->shape, y));
  }
  double scale = gr_node_attr_bool(ctx->node, "mean", false) && count > 0 ? 1.0 / count : 1.0;
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, Y->dtype, &L->shape, &o));
  broadcast_into(Y, &kd, o, scale);
  return GR_OK;
}

/* The reduction broadcast_like undoes (a mean when it divides), viewed with y's shape. */
static gr_status broadcast_like_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  const gr_attr_value *axes = gr_node_attr(c->node, "axes");
  gr_output r = gr_node_attr_bool(c->node, "mean", false)
                    ? gr_reduce_mean(g, c->grads[0], axes->ints.v, axes->ints.n, true)
                    : gr_reduce_sum(g, c->grads[0], axes->ints.v, axes->ints.n, true);
  c->dinputs[0] = gr_reshape_like(g, r, gr_grad_x(c, 0));
  return GR_OK;
}

static const gr_attr_spec broadcast_like_attrs[] = {
    {"axes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS}},
    {"keepdims", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    {"mean", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};

const gr_op_def gr_op_broadcast_like = {
    .name = "broadcast_like",
    .doc = "y (like reduced over axes) broadcast back to like's runtime shape; / count if mean",
    .min_inputs = 2,
    .max_inputs = 2,
    .input_names = (const char *const[]){"y", "like"},
    .num_outputs = 1,
    .attrs = broadcast_like_attrs,
    .num_attrs = 3,
    .shape_fn = broadcast_like_shape,
    .kernel = broadcast_like_kernel,
    .grad_fn = broadcast_like_grad};

gr_output gr_broadcast_like(gr_graph *g, gr_output y, gr_output like, const int64_t *axes, int n,
                            bool keepdims, bool mean) {
  gr_output in[2] = {y, like};
  gr_attr a[3] = {gr_attr_ints("axes", n, axes), gr_attr_bool("keepdims", keepdims),
                  gr_attr_bool("mean", mean)};
  return gr_ops_build(g, "broadcast_like", NULL, in, 2, a, 3);
}

/* ---- reshape_like, stop_gradient --------------------------------------------------- */

static gr_status reshape_like_kernel(gr_kernel_ctx *ctx) {
  gr_tensor t;
  GR_TRY(gr_tensor_reshape(&ctx->inputs[0], &ctx->inputs[1].shape, &t, ctx->err));
  gr_kernel_set_output(ctx, 0, &t);
  gr_tensor_release(&t);
  return GR_OK;
}

static gr_status reshape_like_grad(gr_grad_ctx *ctx) {
  ctx->dinputs[0] = gr_reshape_like(ctx->graph, ctx->grads[0], gr_grad_x(ctx, 0));
  return GR_OK;
}

const gr_op_def gr_op_reshape_like = {.name = "reshape_like",
                                      .doc = "x viewed with the runtime shape of like",
                                      .min_inputs = 2,
                                      .max_inputs = 2,
                                      .input_names = (const char *const[]){"x", "like"},
                                      .num_outputs = 1,
                                      .shape_fn = like_shape,
                                      .kernel = reshape_like_kernel,
                                      .grad_fn = reshape_like_grad};

gr_output gr_reshape_like(gr_graph *g, gr_output x, gr_output like) {
  gr_output in[2] = {x, like};
  return gr_ops_build(g, "reshape_like", NULL, in, 2, NULL, 0);
}

static gr_status stop_gradient_kernel(gr_kernel_ctx *ctx) {
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

const gr_op_def gr_op_stop_gradient = {.name = "stop_gradient",
                                       .doc = "the input, unchanged; no gradient flows through it",
                                       .min_inputs = 1,
                                       .max_inputs = 1,
                                       .input_names = (const char *const[]){"x"},
                                       .num_outputs = 1,
                                       .shape_fn = gr_shape_fn_unchanged,
                                       .kernel = stop_gradient_kernel,
                                       .flags = GR_OP_NO_GRADIENT};

gr_output gr_stop_gradient(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "stop_gradient", NULL, &x, 1, NULL, 0);
}

/* ---- gather_grad --------------------------------------------------------------------- */

static gr_status gather_grad_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_INDEX));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->in_shapes[2];
  return GR_OK;
}

/* out = zeros(like.shape); out[..., indices[j], ...] += grad[..., j, ...] along axis */
static gr_status gather_grad_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *G = &ctx->inputs[0], *I = &ctx->inputs[1], *L = &ctx->inputs[2];
  int rank = L->shape.rank, ax;
  if (!gr_shape_normalize_axis(rank, gr_node_attr_int(ctx->node, "axis", 0), &ax))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis out of range");
  int64_t outer = 1, inner = 1, n = L->shape.dims[ax], k = gr_tensor_num_elements(I);
  for (int i = 0; i < ax; i++) outer *= L->shape.dims[i];
  for (int i = ax + 1; i < rank; i++) inner *= L->shape.dims[i];
  if (gr_tensor_num_elements(G) != outer * k * inner)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "gradient does not match the gathered shape");
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, G->dtype, &L->shape, &o));
  memset(gr_tensor_data(o), 0, gr_tensor_num_bytes(o));
  size_t es = gr_dtype_size(G->dtype);
  for (int64_t j = 0; j < k; j++) {
    int64_t idx = I->dtype == GR_I32 ? ((const int32_t *)gr_tensor_data(I))[j]
                                     : ((const int64_t *)gr_tensor_data(I))[j];
    if (idx < 0 || idx >= n)
      return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "index %lld out of range [0, %lld)",
                             (long long)idx, (long long)n);
    for (int64_t a = 0; a < outer; a++) {
      const char *src = (const char *)gr_tensor_data(G) + ((a * k + j) * inner) * (int64_t)es;
      char *dst = (char *)gr_tensor_data(o) + ((a * n + idx) * inner) * (int64_t)es;
      if (G->dtype == GR_F32)
        for (int64_t t = 0; t < inner; t++) ((float *)dst)[t] += ((const float *)src)[t];
      else
        for (int64_t t = 0; t < inner; t++) ((double *)dst)[t] += ((const double *)src)[t];
    }
  }
  return GR_OK;
}

/* Linear in grad: the gradient gathers the incoming rows at the same indices. */
static gr_status gather_grad_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output rows = gr_gather(g, c->grads[0], gr_grad_x(c, 1), gr_node_attr_int(c->node, "axis", 0));
  c->dinputs[0] = gr_reshape_like(g, rows, gr_grad_x(c, 0));
  return GR_OK;
}

static const gr_attr_spec gather_grad_attrs[] = {
    {"axis", GR_ATTR_INT, false, {.type = GR_ATTR_INT}}};

const gr_op_def gr_op_gather_grad = {.name = "gather_grad",
                                     .doc = "gradient of gather: grad rows added at indices into "
                                            "zeros shaped like params",
                                     .min_inputs = 3,
                                     .max_inputs = 3,
                                     .input_names =
                                         (const char *const[]){"grad", "indices", "like"},
                                     .num_outputs = 1,
                                     .attrs = gather_grad_attrs,
                                     .num_attrs = 1,
                                     .shape_fn = gather_grad_shape,
                                     .kernel = gather_grad_kernel,
                                     .grad_fn = gather_grad_grad};
