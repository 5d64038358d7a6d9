/* Variables: `variable` reads the session-held value named by attr "var";
 * `assign`, `assign_add` and `assign_sub` update it. Updates happen in place
 * when nothing else references the value, else copy-on-write, so a value
 * read earlier in a step never changes under its reader. */
#include <stdio.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static gr_status var_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

static gr_var *kernel_var(gr_kernel_ctx *ctx) {
  if (!*ctx->state)
    *ctx->state = gr_resource_mgr_get_var(ctx->step->resources,
                                          gr_node_attr_string(ctx->node, "var", ctx->node->name));
  return *ctx->state;
}

static gr_status variable_kernel(gr_kernel_ctx *ctx) {
  gr_var *v = kernel_var(ctx);
  if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_var_lock(v);
  gr_tensor *t = gr_var_value(v);
  gr_status s = GR_OK;
  if (!t->buf)
    s = gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION, "variable '%s' is not initialised",
                        gr_var_name(v));
  else
    gr_kernel_set_output(ctx, 0, t);
  gr_var_unlock(v);
  return s;
}

static const gr_attr_spec var_attrs[] = {
    {"var", GR_ATTR_STRING, true, {0}},
    {"dtype", GR_ATTR_DTYPE, true, {0}},
    {"shape", GR_ATTR_SHAPE, true, {0}},
    {"initializer", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"mirror_of", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    /* a part of a partitioned variable (partitioned.c): the whole's name,
     * this part's first row, the whole's shape */
    {"partition_of", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"partition_offset", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"full_shape", GR_ATTR_SHAPE, false, {.type = GR_ATTR_SHAPE}},
    /* a mirror's: the options of minimize's all-reduce of the copies'
     * gradients (gr_replicate_options.all_reduce) */
    {"all_reduce_algorithm", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"all_reduce_bucket", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"all_reduce_piece", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};

const gr_op_def gr_op_variable = {.name = "variable",
                                  .doc = "reads a variable (attrs var, dtype, shape, initializer; "
                                         "mirror_of: a replica's copy of that variable, whose "
                                         "gradient minimize all-reduces; partition_of, "
                                         "partition_offset, full_shape: a part of a "
                                         "partitioned variable; all_reduce_*: a mirror's "
                                         "all-reduce options)",
                                  .num_outputs = 1,
                                  .attrs = var_attrs,
                                  .num_attrs = sizeof var_attrs / sizeof var_attrs[0],
                                  .shape_fn = var_shape,
                                  .kernel = variable_kernel,
                                  .flags = GR_OP_STATEFUL | GR_OP_VARIABLE};

/* read_value: reads the variable named by attr var when it runs, after its
 * control inputs (a read inside a control-dependency scope or a loop sees
 * the updates before it). Input 0 is an earlier read of the same variable:
 * it ties the read into loops and carries the gradient, its value is not
 * used. */
static gr_status read_value_shape(gr_shape_ctx *ctx) {
  GR_TRY(var_shape(ctx));
  if (ctx->in_dtypes[0] != ctx->out_dtypes[0])
    return gr_shape_error(ctx, GR_ERR_DTYPE, "read_value: input is %s, variable is %s",
                          gr_dtype_name(ctx->in_dtypes[0]), gr_dtype_name(ctx->out_dtypes[0]));
  return GR_OK;
}

static gr_status read_value_grad(gr_grad_ctx *c) {
  c->dinputs[0] = c->grads[0];
  return GR_OK;
}

static const gr_attr_spec read_value_attrs[] = {{"var", GR_ATTR_STRING, true, {0}},
                                                {"dtype", GR_ATTR_DTYPE, true, {0}},
                                                {"shape", GR_ATTR_SHAPE, true, {0}}};

const gr_op_def gr_op_read_value = {.name = "read_value",
                                    .doc = "reads a variable (attr var) when it runs; input: an "
                                           "earlier read of it (for loops and gradients)",
                                    .min_inputs = 1,
                                    .max_inputs = 1,
                                    .input_names = (const char *const[]){"var"},
                                    .num_outputs = 1,
                                    .attrs = read_value_attrs,
                                    .num_attrs = 3,
                                    .shape_fn = read_value_shape,
                                    .kernel = variable_kernel,
                                    .grad_fn = read_value_grad,
                                    .flags = GR_OP_STATEFUL | GR_OP_VARIABLE};

/* ---- assign family ---------------------------------------------------------- */

static gr_status assign_shape(gr_shape_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  const gr_shape *vs = &gr_node_attr(ctx->node, "shape")->shape;
  const char *var = gr_node_attr_string(ctx->node, "var", "?");
  if (ctx->in_dtypes[0] != dt)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "value has dtype %s but variable '%s' is %s",
                          gr_dtype_name(ctx->in_dtypes[0]), var, gr_dtype_name(dt));
  if (ctx->node->op != &gr_op_assign) GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  if (!gr_shape_compatible(&ctx->in_shapes[0], vs)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "value has shape %s but variable '%s' is %s",
                          gr_shape_str(&ctx->in_shapes[0], a), var, gr_shape_str(vs, b));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = *vs;
  return GR_OK;
}

static gr_status assign_kernel(gr_kernel_ctx *ctx) {
  gr_var *v = kernel_var(ctx);
  if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  const gr_tensor *val = &ctx->inputs[0];
  const gr_shape *vs = &gr_node_attr(ctx->node, "shape")->shape;
  if (!gr_shape_compatible(&val->shape, vs)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "value has shape %s but variable '%s' is %s",
                           gr_shape_str(&val->shape, a), gr_var_name(v), gr_shape_str(vs, b));
  }
  /* Share the value's buffer only if nobody else holds it (a fed tensor or a
   * constant could otherwise change or be changed through the variable). */
  gr_tensor fresh;
  if (gr_tensor_is_unique(val))
    gr_tensor_ref(&fresh, val);
  else
    GR_TRY(gr_tensor_copy(val, &fresh, ctx->err));
  gr_var_lock(v);
  gr_tensor *t = gr_var_value(v);
  gr_tensor_release(t);
  *t = fresh;
  gr_kernel_set_output(ctx, 0, t);
  gr_var_unlock(v);
  return GR_OK;
}

/* U: the type the arithmetic runs in (unsigned for integers, so they wrap). */
#define UPDATE_LOOP(T, U)                                                                          \
  do {                                                                                             \
    const T *src = gr_tensor_data(cur);                                                            \
    const T *d = gr_tensor_data(delta);                                                            \
    T *dst = gr_tensor_data(out);                                                                  \
    if (sign > 0)                                                                                  \
      for (int64_t i = 0; i < n; i++) dst[i] = (T)((U)src[i] + (U)d[i]);                           \
    else                                                                                           \
      for (int64_t i = 0; i < n; i++) dst[i] = (T)((U)src[i] - (U)d[i]);                           \
  } while (0)

static gr_status update_kernel(gr_kernel_ctx *ctx, int sign) {
  gr_var *v = kernel_var(ctx);
  if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  const gr_tensor *delta = &ctx->inputs[0];
  gr_var_lock(v);
  gr_tensor *cur = gr_var_value(v);
  gr_status s = GR_OK;
  if (!cur->buf) {
    s = gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION, "variable '%s' is not initialised",
                        gr_var_name(v));
    goto done;
  }
  if (!gr_shape_equal(&cur->shape, &delta->shape)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    s = gr_kernel_error(ctx, GR_ERR_SHAPE, "delta has shape %s but variable '%s' is %s",
                        gr_shape_str(&delta->shape, a), gr_var_name(v),
                        gr_shape_str(&cur->shape, b));
    goto done;
  }
  gr_tensor fresh = gr_tensor_empty();
  gr_tensor *out = cur;
  if (!gr_tensor_is_unique(cur)) { /* someone still reads the old value: copy on write */
    if ((s = gr_tensor_alloc(&fresh, cur->dtype, &cur->shape, ctx->err)) != GR_OK) goto done;
    out = &fresh;
  }
  int64_t n = gr_tensor_num_elements(cur);
  switch (cur->dtype) {
    case GR_F32:
      UPDATE_LOOP(float, float);
      break;
    case GR_F64:
      UPDATE_LOOP(double, double);
      break;
    case GR_I32:
      UPDATE_LOOP(int32_t, uint32_t);
      break;
    case GR_I64:
      UPDATE_LOOP(int64_t, uint64_t);
      break;
    case GR_U8:
      UPDATE_LOOP(uint8_t, uint32_t);
      break;
    default:
      s = gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
      break;
  }
  if (out == &fresh) {
    gr_tensor_release(cur);
    *cur = fresh;
  }
  if (s == GR_OK) gr_kernel_set_output(ctx, 0, cur);
done:
  gr_var_unlock(v);
  return s;
}

static gr_status assign_add_kernel(gr_kernel_ctx *ctx) {
  return update_kernel(ctx, +1);
}
static gr_status assign_sub_kernel(gr_kernel_ctx *ctx) {
  return update_kernel(ctx, -1);
}

static const gr_attr_spec assign_attrs[] = {{"var", GR_ATTR_STRING, true, {0}},
                                            {"dtype", GR_ATTR_DTYPE, true, {0}},
                                            {"shape", GR_ATTR_SHAPE, true, {0}}};

#define DEFINE_ASSIGN(NAME, DOC, IN, FLAGS)                                                        \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = (const char *const[]){IN},                        \
                                  .num_outputs = 1,                                                \
                                  .attrs = assign_attrs,                                           \
                                  .num_attrs = 3,                                                  \
                                  .shape_fn = assign_shape,                                        \
                                  .kernel = NAME##_kernel,                                         \
                                  .flags = GR_OP_STATEFUL | (FLAGS)};
DEFINE_ASSIGN(assign, "sets a variable (attr var) to value; returns it", "value", GR_OP_UPDATES)
DEFINE_ASSIGN(assign_add, "adds delta to a variable in place; returns the new value", "delta",
              GR_OP_VARIABLE | GR_OP_UPDATES)
DEFINE_ASSIGN(assign_sub, "subtracts delta from a variable in place; returns the new value",
              "delta", GR_OP_VARIABLE | GR_OP_UPDATES)

/* ---- builders ------------------------------------------------------------------ */

gr_output gr_ops_variable_with(gr_graph *g, const char *name, gr_output initial_value,
                               const gr_attr *extra, int num_extra) {
  if (!initial_value.node) return (gr_output){NULL, 0};
  if (!name || !*name) return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "variable needs a name");
  const char *scope = gr_graph_name_scope(g);
  size_t len = strlen(scope) + strlen(name) + 8;
  char *full = gr_graph_alloc(g, len), *init_name = gr_graph_alloc(g, len);
  if (!full || !init_name) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(full, len, "%s%s%s", scope, *scope ? "/" : "", name);
  snprintf(init_name, len, "%s/init", name);
  if (gr_graph_find_node(g, full))
    return gr_ops_fail(g, GR_ERR_ALREADY_EXISTS, "duplicate node name '%s' (variable %s)", full,
                       name);
  const gr_node *iv = initial_value.node;
  gr_dtype dt = iv->out_dtypes[initial_value.index];
  gr_shape sh = iv->out_shapes[initial_value.index];
  if (!gr_shape_is_fully_known(&sh)) {
    char b[GR_SHAPE_STR_MAX];
    return gr_ops_fail(g, GR_ERR_SHAPE,
                       "variable '%s': initial value has a partly unknown shape %s", full,
                       gr_shape_str(&sh, b));
  }
  gr_attr aa[] = {gr_attr_string("var", full), gr_attr_dtype("dtype", dt),
                  gr_attr_shape("shape", sh)};
  gr_output init = gr_ops_build(g, "assign", init_name, &initial_value, 1, aa, 3);
  if (!init.node) return init;
  gr_attr va[8] = {gr_attr_string("var", full), gr_attr_dtype("dtype", dt),
                   gr_attr_shape("shape", sh), gr_attr_string("initializer", init.node->name)};
  int na = 4;
  for (int i = 0; i < num_extra && na < 8; i++) va[na++] = extra[i];
  gr_output v = gr_ops_build(g, "variable", name, NULL, 0, va, na);
  if (v.node && strcmp(v.node->name, full) != 0)
    return gr_ops_fail(g, GR_ERR_ALREADY_EXISTS, "duplicate node name '%s' (variable %s)", full,
                       name);
  return v;
}

gr_output gr_ops_variable_mirror(gr_graph *g, const char *name, gr_output initial_value,
                                 const char *mirror_of) {
  gr_attr a = gr_attr_string("mirror_of", mirror_of ? mirror_of : "");
  return gr_ops_variable_with(g, name, initial_value, &a, 1);
}

gr_output gr_variable(gr_graph *g, const char *name, gr_output initial_value) {
  return gr_ops_variable_mirror(g, name, initial_value, NULL);
}

static gr_output build_update(gr_graph *g, const char *op, gr_output var, gr_output value) {
  if (!var.node || !value.node) return (gr_output){NULL, 0};
  if (!(var.node->op->flags & GR_OP_VARIABLE))
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "%s: '%s' is not a variable", op,
                       var.node->name);
  /* replicas' copies of the step counter (gr_ops_step_copy) count with it:
   * an increment of one alone would give the replicas other rows */
  const char *name = gr_node_attr_string(var.node, "var", var.node->name);
  bool counter = !strcmp(name, "global_step") || gr_ops_is_step_copy(var.node);
  if (counter && strcmp(op, "assign") != 0 && gr_ops_step_copies(g) > 0)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "%s: '%s': global_step has copies on the replicas' devices (replicas with "
                       "all_reduce=true and shard_input=true read their step there), which "
                       "minimize advances with it; advancing one alone would give the replicas "
                       "other rows",
                       op, name);
  return gr_ops_advance_variable(g, op, var, value);
}

gr_output gr_ops_advance_variable(gr_graph *g, const char *op, gr_output var, gr_output value) {
  if (!var.node || !value.node) return (gr_output){NULL, 0};
  const gr_node *vn = var.node;
  gr_attr a[] = {gr_attr_string("var", gr_node_attr_string(vn, "var", vn->name)),
                 gr_attr_dtype("dtype", vn->out_dtypes[0]),
                 gr_attr_shape("shape", vn->out_shapes[0])};
  return gr_ops_build(g, op, NULL, &value, 1, a, 3);
}

gr_output gr_ops_read_value_via(gr_graph *g, const gr_node *vn, gr_output tie) {
  if (!tie.node) return (gr_output){NULL, 0};
  gr_attr a[] = {gr_attr_string("var", gr_node_attr_string(vn, "var", vn->name)),
                 gr_attr_dtype("dtype", vn->out_dtypes[0]),
                 gr_attr_shape("shape", vn->out_shapes[0])};
  return gr_ops_build(g, "read_value", NULL, &tie, 1, a, 3);
}

gr_output gr_read_value(gr_graph *g, gr_output var) {
  if (!var.node) return (gr_output){NULL, 0};
  if (!gr_ops_is_variable_read(var.node))
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "read_value: '%s' is not a variable",
                       var.node->name);
  return gr_ops_read_value_via(g, var.node, var);
}

bool gr_ops_is_variable_read(const gr_node *n) {
  return n->op == &gr_op_variable || n->op == &gr_op_read_value;
}

bool gr_ops_is_variable(const gr_node *n) {
  return n->op == &gr_op_variable;
}

gr_output gr_assign(gr_graph *g, gr_output var, gr_output value) {
  return build_update(g, "assign", var, value);
}
gr_output gr_assign_add(gr_graph *g, gr_output var, gr_output delta) {
  return build_update(g, "assign_add", var, delta);
}
gr_output gr_assign_sub(gr_graph *g, gr_output var, gr_output delta) {
  return build_update(g, "assign_sub", var, delta);
}
