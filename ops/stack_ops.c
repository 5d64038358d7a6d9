/* Step-scoped stacks as ops (core/gr_op.h gr_step_stack_*): stack_push
 * (passes its input through and pushes it), stack_pop and stack_size. The
 * gradient of a while loop pushes the forward values it needs in the forward
 * loop and pops them, last first, in the reverse loop. */
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

/* The stack's key: attr stack within the enclosing frame instance, so a
 * loop's gradient inside a loop body pushes and pops per outer iteration
 * even when outer iterations run at once. Built in key->local when it fits
 * (no allocation per push or pop); key_done frees a longer one. */
typedef struct stack_key {
  const char *s;
  char *heap;
  char local[256];
} stack_key;

static bool key_make(gr_kernel_ctx *ctx, stack_key *k) {
  const char *name = gr_node_attr_string(ctx->node, "stack", "");
  int n = ctx->frame_parent_len;
  k->heap = NULL;
  k->s = name;
  if (n <= 0) return true;
  size_t len = (size_t)n + strlen(name) + 2;
  char *b = len <= sizeof k->local ? k->local : (k->heap = malloc(len));
  if (!b) return false;
  snprintf(b, len, "%.*s|%s", n, ctx->frame_name, name);
  k->s = b;
  return true;
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
  if (!key_make(ctx, &key)) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
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

static gr_status pop_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

static gr_status pop_kernel(gr_kernel_ctx *ctx) {
  gr_tensor t;
  stack_key key;
  if (!key_make(ctx, &key)) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
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
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status size_kernel(gr_kernel_ctx *ctx) {
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &(gr_shape){.rank = 0}, &o));
  stack_key key;
  if (!key_make(ctx, &key)) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  *(int64_t *)gr_tensor_data(o) = gr_step_stack_size(ctx->step->stacks, key.s);
  key_done(&key);
  return GR_OK;
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

const gr_op_def gr_op_stack_pop = {
    .name = "stack_pop",
    .doc = "the top of the step's stack attr stack (attrs dtype, shape)",
    .num_outputs = 1,
    .attrs = pop_attrs,
    .num_attrs = 3,
    .shape_fn = pop_shape,
    .kernel = pop_kernel,
    .flags = STACK_FLAGS};

const gr_op_def gr_op_stack_size = {.name = "stack_size",
                                    .doc = "the number of tensors on the step's stack attr stack",
                                    .num_outputs = 1,
                                    .attrs = stack_attrs,
                                    .num_attrs = 1,
                                    .shape_fn = size_shape,
                                    .kernel = size_kernel,
                                    .flags = STACK_FLAGS};
