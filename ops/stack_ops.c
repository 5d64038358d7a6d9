/* Step-scoped stacks as ops (core/gr_op.h gr_step_stack_*): stack_push
 * (passes its input through and pushes it), stack_pop, stack_size, and
 * loop_instance (the name of the loop iteration it runs in). The gradient
 * of a while loop pushes the forward values it needs in the forward loop and
 * pops them, last first, in the reverse loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const gr_attr_spec stack_attrs[] = {{"stack", GR_ATTR_STRING, true, {0}}};
static const gr_attr_spec pop_attrs[] = {
    {"stack", GR_ATTR_STRING, true, {0}},
    {"dtype", GR_ATTR_DTYPE, true, {0}},
    {"shape", GR_ATTR_SHAPE, false, {.type = GR_ATTR_SHAPE, .shape = {.rank = -1}}}};

/* The stack's key: attr stack within a frame instance, so that a loop's
 * gradient keeps the stacks of each iteration of an enclosing loop apart,
 * even when those iterations run at once. The instance is the one the node
 * runs in (its enclosing frame instance and iteration, "outer:3"; none at
 * the top level), or the u8 input `scope` when given: the reverse loop of
 * an enclosing loop names the forward instance it reverses (a loop_instance
 * value that it popped). Built in key->local when it fits (no allocation per
 * push or pop); key_done frees a longer one. */
typedef struct stack_key {
  const char *s;
  char *heap;
  char local[256];
} stack_key;

static gr_status key_make(gr_kernel_ctx *ctx, const gr_tensor *scope, stack_key *k) {
  const char *name = gr_node_attr_string(ctx->node, "stack", "");
  const char *in = ctx->frame_name;
  int n = ctx->frame_parent_len;
  if (scope) {
    if (scope->dtype != GR_U8 || scope->shape.rank != 1)
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "scope must be a u8 vector");
    in = gr_tensor_data(scope);
    n = (int)scope->shape.dims[0];
  }
  k->heap = NULL;
  k->s = name;
  if (n <= 0) return GR_OK;
  size_t len = (size_t)n + strlen(name) + 2;
  char *b = len <= sizeof k->local ? k->local : (k->heap = malloc(len));
  if (!b) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(b, len, "%.*s|%s", n, in, name);
  k->s = b;
  return GR_OK;
}

/* The scope input of a pop or size (input 1, after the ordering input 0), or NULL. */
static const gr_tensor *scope_of(const gr_kernel_ctx *ctx) {
  return ctx->num_inputs > 1 ? &ctx->inputs[1] : NULL;
}

static void key_done(stack_key *k) {
  free(k->heap);
}

/* A push runs with a dead input too. With input 1 (a value live exactly
 * when the loop iteration runs: the body's pivot) live, x is dead because
 * the cond branch holding it was not taken: it pushes an empty entry, so the
 * matching pop is dead in the matching reverse iteration, and the push
 * itself stays live (it gates the loop's next iteration). Otherwise the
 * iteration did not run (the loop's last, whose body is dead): no push. */
static gr_status push_kernel(gr_kernel_ctx *ctx) {
  gr_tensor none = gr_tensor_empty();
  if (ctx->dead && (ctx->num_inputs < 2 || !ctx->inputs[1].buf)) return GR_OK;
  stack_key key;
  GR_TRY(key_make(ctx, NULL, &key));
  gr_status st =
      gr_step_stack_push(ctx->step->stacks, key.s, ctx->dead ? &none : &ctx->inputs[0], ctx->err);
  key_done(&key);
  GR_TRY(st);
  if (ctx->dead) {
    ctx->dead = false;
    ctx->dead_outputs |= 1;
    return GR_OK;
  }
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

/* Input 0 of a pop or size only orders it (it runs once that value exists,
 * and is dead with it); input 1, when given, is the u8 scope of its key. */
static gr_status check_scope(gr_shape_ctx *ctx) {
  if (ctx->num_inputs > 1) GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_BIT(GR_U8)));
  return GR_OK;
}

static gr_status pop_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_scope(ctx));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

static gr_status pop_kernel(gr_kernel_ctx *ctx) {
  gr_tensor t;
  stack_key key;
  GR_TRY(key_make(ctx, scope_of(ctx), &key));
  gr_status st = gr_step_stack_pop(ctx->step->stacks, key.s, &t, ctx->err);
  key_done(&key);
  GR_TRY(st);
  if (t.buf && t.dtype != ctx->node->out_dtypes[0]) {
    gr_tensor_release(&t);
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "popped a tensor of the wrong dtype");
  }
  if (!t.buf) { /* pushed while dead: the value is dead, the pop itself is
                   live (the reverse loop's next iteration waits for it) */
    ctx->dead_outputs |= 1;
    return GR_OK;
  }
  ctx->outputs[0] = t; /* hand the stack's reference over */
  return GR_OK;
}

static gr_status size_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_scope(ctx));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status size_kernel(gr_kernel_ctx *ctx) {
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &(gr_shape){.rank = 0}, &o));
  stack_key key;
  GR_TRY(key_make(ctx, scope_of(ctx), &key));
  *(int64_t *)gr_tensor_data(o) = gr_step_stack_size(ctx->step->stacks, key.s);
  key_done(&key);
  return GR_OK;
}

/* The name of the loop iteration the node runs in: its frame instance and
 * iteration ("outer:3/inner:5"), as u8 bytes. The stacks of loops nested in
 * that iteration are keyed by it (stack_key). */
static gr_status instance_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_U8;
  ctx->out_shapes[0] = (gr_shape){.rank = 1, .dims = {GR_DIM_UNKNOWN}};
  return GR_OK;
}

static gr_status instance_kernel(gr_kernel_ctx *ctx) {
  char local[256], *b = local;
  int n = snprintf(local, sizeof local, "%s:%lld", ctx->frame_name, (long long)ctx->iteration);
  if (n >= (int)sizeof local) {
    b = malloc((size_t)n + 1);
    if (!b) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    snprintf(b, (size_t)n + 1, "%s:%lld", ctx->frame_name, (long long)ctx->iteration);
  }
  gr_tensor *o;
  gr_status st = gr_kernel_alloc_output(ctx, 0, GR_U8, &(gr_shape){.rank = 1, .dims = {n}}, &o);
  if (st == GR_OK) memcpy(gr_tensor_data(o), b, (size_t)n);
  if (b != local) free(b);
  return st;
}

#define STACK_FLAGS (GR_OP_STATEFUL | GR_OP_NO_GRADIENT | GR_OP_STEP_STACKS)

const gr_op_def gr_op_stack_push = {
    .name = "stack_push",
    .doc = "x, pushed on the step's stack attr stack (dead x: an empty entry when live is live)",
    .min_inputs = 1,
    .max_inputs = 2,
    .input_names = (const char *const[]){"x", "live"},
    .num_outputs = 1,
    .attrs = stack_attrs,
    .num_attrs = 1,
    .shape_fn = gr_shape_fn_unchanged,
    .kernel = push_kernel,
    .flags = STACK_FLAGS | GR_OP_RUNS_DEAD};

static const char *const pop_inputs[] = {"after", "scope"};

const gr_op_def gr_op_stack_pop = {
    .name = "stack_pop",
    .doc = "the top of the step's stack attr stack (attrs dtype, shape); runs after `after`, "
           "in the loop iteration named by `scope` (u8, from loop_instance) if given",
    .min_inputs = 0,
    .max_inputs = 2,
    .input_names = pop_inputs,
    .num_outputs = 1,
    .attrs = pop_attrs,
    .num_attrs = 3,
    .shape_fn = pop_shape,
    .kernel = pop_kernel,
    .flags = STACK_FLAGS};

const gr_op_def gr_op_stack_size = {
    .name = "stack_size",
    .doc = "the number of tensors on the step's stack attr stack (inputs as stack_pop)",
    .min_inputs = 0,
    .max_inputs = 2,
    .input_names = pop_inputs,
    .num_outputs = 1,
    .attrs = stack_attrs,
    .num_attrs = 1,
    .shape_fn = size_shape,
    .kernel = size_kernel,
    .flags = STACK_FLAGS};

const gr_op_def gr_op_loop_instance = {
    .name = "loop_instance",
    .doc = "the loop iteration it runs in, as u8 bytes (\"outer:3/inner:5\"); x only places it",
    .min_inputs = 1,
    .max_inputs = 1,
    .input_names = (const char *const[]){"x"},
    .num_outputs = 1,
    .shape_fn = instance_shape,
    .kernel = instance_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};
