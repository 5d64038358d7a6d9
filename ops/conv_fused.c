/* _fused_conv2d: a conv2d with what the fusion pass (passes/pass_fuse.c)
 * folds into it, applied to each block of images of the output as soon
 * as the convolution has computed it (while it is in the cache): + bias
 * (bias_add), or batch normalization with the moving statistics
 * (batch_norm at inference), then relu. The epilogue does the replaced
 * ops' own arithmetic element by element (bias: one f32 add; batch norm:
 * batch_norm's coefficients and gr_vec_bn_apply; relu: x < 0 ? 0 : x),
 * so the fused node gives the bits of the nodes it stands for. f32 only;
 * the pass builds it in a graph that runs, after autodiff (its gradient
 * is an error).
 *
 * Inputs: x, filter, then bias (bias_add) or gamma, beta, moving_mean,
 * moving_variance (batch_norm), all [out_c]. Attrs: conv2d's, fused_ops
 * ("relu", "bias_add", "bias_add,relu", "batch_norm", "batch_norm,relu")
 * and epsilon (batch_norm's). */
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

enum { FUSE_BIAS = 1, FUSE_BN = 2, FUSE_RELU = 4 };

static const struct {
  const char *name;
  unsigned ops;
} fused_kinds[] = {{"relu", FUSE_RELU},
                   {"bias_add", FUSE_BIAS},
                   {"bias_add,relu", FUSE_BIAS | FUSE_RELU},
                   {"batch_norm", FUSE_BN},
                   {"batch_norm,relu", FUSE_BN | FUSE_RELU}};

/* The FUSE_* bits of attr fused_ops, 0 when it names none of the kinds. */
static unsigned fused_ops(const gr_node *n) {
  const char *s = gr_node_attr_string(n, "fused_ops", "");
  for (size_t i = 0; i < sizeof fused_kinds / sizeof fused_kinds[0]; i++)
    if (strcmp(s, fused_kinds[i].name) == 0) return fused_kinds[i].ops;
  return 0;
}

static int num_args(unsigned ops) {
  return ops & FUSE_BIAS ? 1 : ops & FUSE_BN ? 4 : 0;
}

/* attr fused_ops, the input count and the format; errors into msg. */
static gr_status check_node(const gr_node *n, int num_inputs, unsigned *ops, char *msg,
                            size_t cap) {
  *ops = fused_ops(n);
  if (!*ops) {
    snprintf(msg, cap,
             "fused_ops must be relu, bias_add, bias_add,relu, batch_norm or batch_norm,relu, got "
             "'%s'",
             gr_node_attr_string(n, "fused_ops", ""));
    return GR_ERR_INVALID_ARGUMENT;
  }
  if (num_inputs != 2 + num_args(*ops)) {
    snprintf(msg, cap, "fused_ops %s takes %d inputs, got %d",
             gr_node_attr_string(n, "fused_ops", ""), 2 + num_args(*ops), num_inputs);
    return GR_ERR_INVALID_ARGUMENT;
  }
  gr_data_format f;
  GR_TRY(gr_layout_read_format(n, &f, msg, cap));
  if ((*ops & FUSE_BIAS) && f == GR_FORMAT_NCHW) {
    snprintf(msg, cap, "bias_add is fused into NHWC convolutions only");
    return GR_ERR_INVALID_ARGUMENT;
  }
  return GR_OK;
}

/* Inputs 2.. are rank 1 of oc elements (unknown dims pass). */
static gr_status check_args(const gr_shape *in, int num_inputs, int64_t oc, char *msg, size_t cap) {
  char b[GR_SHAPE_STR_MAX];
  for (int i = 2; i < num_inputs; i++) {
    const gr_shape *s = &in[i];
    if (s->rank < 0 || (s->rank == 1 && (s->dims[0] < 0 || oc < 0 || s->dims[0] == oc))) continue;
    snprintf(msg, cap, "input %d must be [%lld] (the output channels), got shape %s", i,
             (long long)oc, gr_shape_str(s, b));
    return GR_ERR_SHAPE;
  }
  return GR_OK;
}

static gr_status fused_shape(gr_shape_ctx *ctx) {
  char msg[256];
  unsigned ops;
  if (ctx->in_dtypes[0] != GR_F32)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "only f32, got %s", gr_dtype_name(ctx->in_dtypes[0]));
  gr_status s = check_node(ctx->node, ctx->num_inputs, &ops, msg, sizeof msg);
  const gr_shape *f = &ctx->in_shapes[1];
  if (s == GR_OK)
    s = check_args(ctx->in_shapes, ctx->num_inputs, f->rank == 4 ? f->dims[3] : -1, msg,
                   sizeof msg);
  if (s != GR_OK) return gr_shape_error(ctx, s, "%s", msg);
  return gr_conv_shape_fn(ctx);
}

static gr_status fused_kernel(gr_kernel_ctx *ctx) {
  char msg[256];
  unsigned ops;
  gr_status s = check_node(ctx->node, ctx->num_inputs, &ops, msg, sizeof msg);
  gr_shape in[GR_LAYOUT_MAX_IO];
  for (int i = 0; i < ctx->num_inputs && i < GR_LAYOUT_MAX_IO; i++) in[i] = ctx->inputs[i].shape;
  const gr_shape *f = &in[1];
  int64_t oc = f->rank == 4 ? f->dims[3] : -1;
  if (s == GR_OK && oc < 0) {
    snprintf(msg, sizeof msg, "filter must have rank 4, got rank %d", f->rank);
    s = GR_ERR_SHAPE;
  }
  if (s == GR_OK) s = check_args(in, ctx->num_inputs, oc, msg, sizeof msg);
  for (int i = 0; s == GR_OK && i < ctx->num_inputs; i++)
    if (ctx->inputs[i].dtype != GR_F32) {
      snprintf(msg, sizeof msg, "input %d is %s, not f32", i, gr_dtype_name(ctx->inputs[i].dtype));
      s = GR_ERR_DTYPE;
    }
  if (s != GR_OK) return gr_kernel_error(ctx, s, "%s", msg);
  gr_conv_epilogue ep = {.relu = (ops & FUSE_RELU) != 0};
  gr_tensor scratch = gr_tensor_empty();
  if (ops & FUSE_BIAS) ep.bias = gr_tensor_data(&ctx->inputs[2]);
  if (ops & FUSE_BN) { /* batch_norm's inference coefficients, as it computes them */
    gr_shape ss = gr_shape_make(1, (int64_t[]){4 * oc + 1});
    GR_TRY(gr_tensor_alloc(&scratch, GR_F64, &ss, ctx->err));
    double *mean = gr_tensor_data(&scratch), *var = mean + oc, *rstd = var + oc;
    float *a = (float *)(rstd + oc), *ctr = a + oc;
    gr_ops_bn_moving_stats(&ctx->inputs[4], &ctx->inputs[5],
                           gr_node_attr_float(ctx->node, "epsilon", 1e-3), oc, mean, var, rstd);
    gr_ops_bn_affine_f32(mean, rstd, gr_tensor_data(&ctx->inputs[2]), oc, a, ctr);
    ep.a = a, ep.ctr = ctr, ep.b = gr_tensor_data(&ctx->inputs[3]);
  }
  s = gr_conv_forward_kernel(ctx, &ep);
  gr_tensor_release(&scratch);
  return s;
}

/* ---- the epilogue ------------------------------------------------------------------- */

/* Rows [0, rows) of y [rows, c]: y + bias[j] (f32, as bias_add), then x <
 * 0 ? 0 : x (as relu). */
GR_VEC_CLONES
static void bias_relu(float *y, const float *bias, int64_t rows, int64_t c, bool relu) {
  for (int64_t r = 0; r < rows; r++) {
    float *o = y + r * c;
    if (relu)
      for (int64_t j = 0; j < c; j++) {
        float t = o[j] + bias[j];
        o[j] = t < 0 ? 0.0f : t;
      }
    else
      for (int64_t j = 0; j < c; j++) o[j] = o[j] + bias[j];
  }
}

GR_VEC_CLONES
static void relu_only(float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0.0f : y[i];
}

void gr_conv_epilogue_apply(const gr_conv_epilogue *e, bool nchw, float *y, int64_t n) {
  int64_t c = e->c, hw = e->hw;
  if (e->a && nchw)
    gr_vec_bn_plane_apply(y, NULL, NULL, e->ctr, c, hw, e->a, e->b, NULL, e->relu, y, 0, n);
  else if (e->a)
    gr_vec_bn_apply(y, NULL, NULL, e->ctr, c, e->a, e->b, NULL, e->relu, y, 0, n * hw);
  else if (e->bias)
    bias_relu(y, e->bias, n * hw, c, e->relu); /* NHWC (check_node) */
  else if (e->relu)
    relu_only(y, n * hw * c);
}

typedef struct epi_job {
  const gr_conv_epilogue *e;
  bool nchw;
  float *y;
  int64_t n;
  int chunks;
} epi_job;

static void epi_chunk(void *arg, int i) {
  const epi_job *j = arg;
  int64_t lo, hi;
  gr_vec_range(j->n, j->chunks, i, &lo, &hi);
  gr_conv_epilogue_apply(j->e, j->nchw, j->y + lo * j->e->c * j->e->hw, hi - lo);
}

void gr_conv_epilogue_run(gr_kernel_ctx *ctx, const gr_conv_epilogue *e, bool nchw, float *y,
                          int64_t n) {
  epi_job j = {e, nchw, y, n, 0};
  j.chunks = gr_vec_chunks(ctx, n, (double)(n * e->c * e->hw) * 8);
  if (n > 0) gr_kernel_parallel(ctx, j.chunks, epi_chunk, &j);
}

/* The pass builds it after autodiff, in a graph that runs: differentiate
 * the graph the user built instead. */
static gr_status fused_grad(gr_grad_ctx *c) {
  return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                             "gradients: node '%s' is a _fused_conv2d, which the fusion pass makes "
                             "in a graph that runs; differentiate the graph before fusion",
                             c->node->name);
}

const gr_op_def gr_op__fused_conv2d = {
    .name = "_fused_conv2d",
    .doc = "conv2d, then fused_ops on its output as each block of images is done: relu, "
           "bias_add (input bias [out_c]; NHWC), batch_norm at inference (inputs gamma, beta, "
           "moving_mean, moving_variance [out_c], attr epsilon), each optionally then relu; "
           "the same bits as those ops unfused. Made by the fusion pass (f32), after autodiff: its "
           "gradient is an error",
    .min_inputs = 2,
    .max_inputs = 6,
    .input_names = (const char *const[]){"x", "filter", "bias_or_gamma", "beta", "moving_mean",
                                         "moving_variance"},
    .num_outputs = 1,
    .attrs = gr_fused_conv_attr_specs,
    .num_attrs = 8,
    .shape_fn = fused_shape,
    .cost_fn = gr_conv_cost,
    .kernel = fused_kernel,
    .grad_fn = fused_grad,
    .flags = GR_OP_EXPENSIVE};
