/* Basic ops: placeholder, no_op (and group), identity_n; the builders of
 * const and identity (defined in core/base_ops.c) and identity's gradient;
 * gr_op, the builder of any op by name. */
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- placeholder ------------------------------------------------------------ */

static gr_status placeholder_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

static gr_status placeholder_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "placeholder must be fed");
}

static const gr_attr_spec placeholder_attrs[] = {
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_F32}},
    {"shape", GR_ATTR_SHAPE, false, {.type = GR_ATTR_SHAPE, .shape = {.rank = -1}}}};
const gr_op_def gr_op_placeholder = {.name = "placeholder",
                                     .doc = "a value fed at run time (attrs dtype, shape)",
                                     .num_outputs = 1,
                                     .attrs = placeholder_attrs,
                                     .num_attrs = 2,
                                     .shape_fn = placeholder_shape,
                                     .cost_fn = gr_cost_fn_free,
                                     .kernel = placeholder_kernel,
                                     .flags = GR_OP_PLACEHOLDER};

/* ---- identity (defined in core/base_ops.c) ----------------------------------- */

gr_status gr_ops_grad_identity(gr_grad_ctx *c) {
  c->dinputs[0] = c->grads[0];
  return GR_OK;
}

/* ---- identity_n ----------------------------------------------------------------- */

/* Its inputs as its outputs, unchanged (no copy): with control inputs, a
 * tuple of values that is ready only after those nodes ran (what
 * gr_batch_norm returns: its outputs wait for the moving-statistics
 * updates). */
static gr_status identity_n_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = ctx->num_inputs;
  for (int i = 0; i < ctx->num_inputs; i++) {
    ctx->out_dtypes[i] = ctx->in_dtypes[i];
    ctx->out_shapes[i] = ctx->in_shapes[i];
  }
  return GR_OK;
}

static gr_status identity_n_kernel(gr_kernel_ctx *ctx) {
  for (int i = 0; i < ctx->num_inputs; i++) gr_kernel_set_output(ctx, i, &ctx->inputs[i]);
  return GR_OK;
}

static gr_status identity_n_grad(gr_grad_ctx *c) {
  for (int i = 0; i < c->node->num_inputs; i++) c->dinputs[i] = c->grads[i];
  return GR_OK;
}

const gr_op_def gr_op_identity_n = {.name = "identity_n",
                                    .doc = "its inputs, unchanged (no copy), as its outputs: with "
                                           "control inputs, values that wait for other nodes",
                                    .min_inputs = 1,
                                    .max_inputs = GR_MAX_OUTPUTS,
                                    .input_names = (const char *const[]){"xs"},
                                    .num_outputs = -1,
                                    .shape_fn = identity_n_shape,
                                    .cost_fn = gr_cost_fn_free,
                                    .kernel = identity_n_kernel,
                                    .grad_fn = identity_n_grad};

/* ---- no_op -------------------------------------------------------------------- */

static gr_status no_op_kernel(gr_kernel_ctx *ctx) {
  return GR_OK;
}

const gr_op_def gr_op_no_op = {.name = "no_op",
                               .doc = "does nothing; a target for control dependencies",
                               .num_outputs = 0,
                               .shape_fn = gr_shape_fn_scalar_none,
                               .cost_fn = gr_cost_fn_free,
                               .kernel = no_op_kernel};

/* ---- builders ----------------------------------------------------------------- */

gr_output gr_op(gr_graph *g, const char *op, const char *name, const gr_output *inputs,
                int num_inputs, const gr_attr *attrs, int num_attrs) {
  if (op && strcmp(op, "batch_norm") == 0) /* with its moving-statistics updates */
    return gr_ops_batch_norm_build(g, name, inputs, num_inputs, attrs, num_attrs);
  return gr_ops_build(g, op, name, inputs, num_inputs, attrs, num_attrs);
}

gr_output gr_name(gr_graph *g, gr_output o, const char *name) {
  return gr_graph_rename(g, o, name);
}

gr_output gr_const(gr_graph *g, const gr_tensor *value) {
  if (!value || !value->buf)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "gr_const: empty tensor");
  gr_attr a = gr_attr_tensor("value", *value);
  return gr_ops_build(g, "const", NULL, NULL, 0, &a, 1);
}

gr_output gr_const_f32(gr_graph *g, float v) {
  return gr_ops_const_scalar(g, GR_F32, v);
}
gr_output gr_const_f64(gr_graph *g, double v) {
  return gr_ops_const_scalar(g, GR_F64, v);
}
gr_output gr_const_i32(gr_graph *g, int32_t v) {
  return gr_ops_const_scalar(g, GR_I32, v);
}
gr_output gr_const_i64(gr_graph *g, int64_t v) {
  return gr_const_data(g, GR_I64, gr_shape_scalar(), &v);
}

gr_output gr_const_data(gr_graph *g, gr_dtype dtype, gr_shape shape, const void *data) {
  gr_tensor t;
  gr_error e;
  if (gr_tensor_from_data(&t, dtype, &shape, data, &e) != GR_OK) {
    gr_graph_set_error(g, &e);
    return (gr_output){NULL, 0};
  }
  gr_output o = gr_const(g, &t);
  gr_tensor_release(&t);
  return o;
}

gr_output gr_placeholder(gr_graph *g, const char *name, gr_dtype dtype, gr_shape shape) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape)};
  return gr_ops_build(g, "placeholder", name, NULL, 0, a, 2);
}

gr_output gr_identity(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "identity", NULL, &x, 1, NULL, 0);
}

gr_output gr_identity_n(gr_graph *g, const gr_output *xs, int n) {
  return gr_ops_build(g, "identity_n", NULL, xs, n, NULL, 0);
}

gr_output gr_no_op(gr_graph *g, const char *name) {
  return gr_ops_build(g, "no_op", name, NULL, 0, NULL, 0);
}

gr_output gr_group(gr_graph *g, const char *name, const gr_output *deps, int n) {
  if (gr_graph_push_control_deps(g, deps, n) != GR_OK) return (gr_output){NULL, 0};
  gr_output o = gr_ops_build(g, "no_op", name ? name : "group", NULL, 0, NULL, 0);
  gr_graph_pop_control_deps(g);
  return o;
}
