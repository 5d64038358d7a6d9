/* The ops that core itself builds or recognises: const and identity, and the
 * control-flow primitives switch, merge, enter, exit, next_iteration and
 * loop_cond (their semantics live in the executor, core/executor_cf.c).
 * The partitioner adds them to control loops (core/partition_loops.c), so
 * they are defined here, below ops/, and registered by the core registry
 * with _send and _recv. Their gradients build ops of ops/, so ops/ adds
 * them (gr_op_registry_add_gradient, ops/op_list.h); their builders
 * (gr_const, gr_identity, gr_cond, gr_while_loop) are in ops/ too. */
#include "core/gr_graph.h"
#include "core/gr_op.h"

static const char *const x_names[] = {"x"};

static gr_status forward_kernel(gr_kernel_ctx *ctx) {
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

/* ---- const ---------------------------------------------------------------- */

static gr_status const_shape(gr_shape_ctx *ctx) {
  const gr_attr_value *v = gr_node_attr(ctx->node, "value");
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = v->tensor.dtype;
  ctx->out_shapes[0] = v->tensor.shape;
  return GR_OK;
}

static gr_status const_kernel(gr_kernel_ctx *ctx) {
  gr_kernel_set_output(ctx, 0, &gr_node_attr(ctx->node, "value")->tensor);
  return GR_OK;
}

static const gr_attr_spec const_attrs[] = {{"value", GR_ATTR_TENSOR, true, {0}}};
const gr_op_def gr_op_const = {.name = "const",
                               .doc = "a constant tensor (attr value)",
                               .num_outputs = 1,
                               .attrs = const_attrs,
                               .num_attrs = 1,
                               .shape_fn = const_shape,
                               .cost_fn = gr_cost_fn_free,
                               .kernel = const_kernel,
                               .flags = GR_OP_CONSTANT};

/* ---- identity ----------------------------------------------------------------- */

const gr_op_def gr_op_identity = {.name = "identity",
                                  .doc = "the input, unchanged (no copy)",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .input_names = x_names,
                                  .num_outputs = 1,
                                  .shape_fn = gr_shape_fn_unchanged,
                                  .cost_fn = gr_cost_fn_free,
                                  .kernel = forward_kernel};

/* ---- switch ------------------------------------------------------------------------- */

static gr_status switch_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_BOOL));
  if (ctx->in_shapes[1].rank > 0 && gr_shape_num_elements(&ctx->in_shapes[1]) != 1)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "pred must be a scalar");
  ctx->num_outputs = 2;
  for (int k = 0; k < 2; k++) {
    ctx->out_dtypes[k] = ctx->in_dtypes[0];
    ctx->out_shapes[k] = ctx->in_shapes[0];
  }
  return GR_OK;
}

static gr_status switch_kernel(gr_kernel_ctx *ctx) {
  if (gr_tensor_num_elements(&ctx->inputs[1]) != 1)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "pred must be a scalar");
  int taken = *(const bool *)gr_tensor_data(&ctx->inputs[1]) ? 1 : 0;
  gr_kernel_set_output(ctx, taken, &ctx->inputs[0]);
  ctx->dead_outputs |= (uint64_t)1 << (1 - taken);
  return GR_OK;
}

const gr_op_def gr_op_switch = {.name = "switch",
                                .doc = "data to output 1 if pred else output 0; the other is dead",
                                .min_inputs = 2,
                                .max_inputs = 2,
                                .input_names = (const char *const[]){"data", "pred"},
                                .num_outputs = 2,
                                .shape_fn = switch_shape,
                                .kernel = switch_kernel,
                                .cf_kind = GR_CF_SWITCH};

/* ---- merge ------------------------------------------------------------------------------ */

static gr_status merge_shape(gr_shape_ctx *ctx) {
  gr_shape s = ctx->in_shapes[0];
  for (int i = 1; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    const gr_shape *o = &ctx->in_shapes[i];
    if (s.rank < 0 || o->rank != s.rank) {
      if (o->rank != s.rank) s = gr_shape_unknown();
      continue;
    }
    for (int d = 0; d < s.rank; d++)
      if (s.dims[d] != o->dims[d]) s.dims[d] = GR_DIM_UNKNOWN;
  }
  ctx->num_outputs = 2;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = s;
  ctx->out_dtypes[1] = GR_I32;
  ctx->out_shapes[1] = gr_shape_scalar();
  return GR_OK;
}

static gr_status merge_kernel(gr_kernel_ctx *ctx) {
  for (int i = 0; i < ctx->num_inputs; i++)
    if (ctx->inputs[i].buf) {
      gr_kernel_set_output(ctx, 0, &ctx->inputs[i]);
      gr_tensor *idx;
      GR_TRY(gr_kernel_alloc_output(ctx, 1, GR_I32, &(gr_shape){.rank = 0}, &idx));
      *(int32_t *)gr_tensor_data(idx) = i;
      return GR_OK;
    }
  return gr_kernel_error(ctx, GR_ERR_INTERNAL, "merge ran without a live input");
}

const gr_op_def gr_op_merge = {.name = "merge",
                               .doc = "the first live input (output 0) and its index (output 1)",
                               .min_inputs = 1,
                               .max_inputs = -1,
                               .input_names = (const char *const[]){"inputs"},
                               .num_outputs = 2,
                               .shape_fn = merge_shape,
                               .kernel = merge_kernel,
                               .cf_kind = GR_CF_MERGE};

/* ---- enter, exit, next_iteration, loop_cond -------------------------------------------- */

static const gr_attr_spec enter_attrs[] = {
    {"frame_name", GR_ATTR_STRING, true, {0}},
    {"is_constant", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    {"parallel_iterations", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 10}}};

static gr_status enter_shape(gr_shape_ctx *ctx) {
  if (gr_node_attr_int(ctx->node, "parallel_iterations", 10) < 1)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "parallel_iterations must be >= 1");
  return gr_shape_fn_unchanged(ctx);
}

static gr_status loop_cond_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_BOOL));
  if (ctx->in_shapes[0].rank > 0 && gr_shape_num_elements(&ctx->in_shapes[0]) != 1)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "a loop condition must be a bool scalar");
  return gr_shape_fn_unchanged(ctx);
}

#define DEFINE_CF(NAME, DOC, KIND, SHAPE, ATTRS, NATTRS)                                           \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = x_names,                                          \
                                  .num_outputs = 1,                                                \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = NATTRS,                                             \
                                  .shape_fn = SHAPE,                                               \
                                  .kernel = forward_kernel,                                        \
                                  .cf_kind = KIND};

DEFINE_CF(enter, "x into the loop frame attr frame_name (is_constant: every iteration)",
          GR_CF_ENTER, enter_shape, enter_attrs, 3)
DEFINE_CF(exit, "x out of its loop frame to the parent", GR_CF_EXIT, gr_shape_fn_unchanged, NULL, 0)
DEFINE_CF(next_iteration, "x into the next iteration of its loop", GR_CF_NEXT_ITERATION,
          gr_shape_fn_unchanged, NULL, 0)
DEFINE_CF(loop_cond, "a loop's predicate (bool scalar)", GR_CF_LOOP_COND, loop_cond_shape, NULL, 0)
