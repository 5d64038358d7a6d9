/* Optimizers as graph ops that update variables in place: apply_sgd,
 * apply_momentum (optionally Nesterov) and apply_adam, each with its slot
 * variables, and gr_minimize, which builds gradients and one update per
 * variable. Updates run in place when nothing else holds the variable's
 * value, else copy on write, as assign_add does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- shared kernel plumbing ---------------------------------------------------------- */

typedef struct locked_vars {
  gr_var *v[4];
  int n;
} locked_vars;

/* Looks up and locks the variables named by attrs (in order), checking each
 * is initialised and has the gradient's dtype and shape. */
static gr_status lock_vars(gr_kernel_ctx *ctx, const char *const *attrs, int n, gr_dtype dtype,
                           const gr_shape *shape, locked_vars *lv) {
  lv->n = 0;
  for (int i = 0; i < n; i++) {
    const char *name = gr_node_attr_string(ctx->node, attrs[i], "");
    gr_var *v = gr_resource_mgr_get_var(ctx->step->resources, name);
    if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    gr_var_lock(v);
    lv->v[lv->n++] = v;
    gr_tensor *t = gr_var_value(v);
    if (!t->buf)
      return gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION, "variable '%s' is not initialised",
                             name);
    bool scalar_slot = strcmp(attrs[i], "slot_t") == 0;
    if (!scalar_slot && (!gr_shape_equal(&t->shape, shape) || t->dtype != dtype)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "gradient %s %s does not match variable '%s' %s %s",
                             gr_dtype_name(dtype), gr_shape_str(shape, a), name,
                             gr_dtype_name(t->dtype), gr_shape_str(&t->shape, b));
    }
    if (!gr_tensor_is_unique(t)) { /* someone still reads the old value: copy on write */
      gr_tensor fresh;
      GR_TRY(gr_tensor_copy(t, &fresh, ctx->err));
      gr_tensor_release(t);
      *t = fresh;
    }
  }
  return GR_OK;
}

static void unlock_vars(locked_vars *lv) {
  for (int i = lv->n - 1; i >= 0; i--) gr_var_unlock(lv->v[i]);
}

static double scalar_of(const gr_tensor *t) {
  return gr_tensor_get_f64(t, 0);
}

static gr_status check_lr(gr_kernel_ctx *ctx) {
  if (gr_tensor_num_elements(&ctx->inputs[0]) != 1)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "learning rate must be a scalar");
  return GR_OK;
}

/* The gradient of an update, block by block: input 1, or the elementwise
 * program of attr grad_program over inputs 1.. (a chain the fusion pass
 * folded into the update: the gradient is never stored). */
typedef struct grad_src {
  const gr_tensor *t; /* input 1, or NULL: the program */
  gr_ew e;
  gr_ew_scratch s;
  gr_dtype dtype;
  gr_shape shape;
} grad_src;

static gr_status grad_init(gr_kernel_ctx *ctx, grad_src *g) {
  GR_TRY(check_lr(ctx));
  const char *program = gr_node_attr_string(ctx->node, "grad_program", "");
  g->t = *program ? NULL : &ctx->inputs[1];
  if (g->t) {
    g->dtype = g->t->dtype;
    g->shape = g->t->shape;
    return GR_OK;
  }
  GR_TRY(gr_ew_prepare(ctx, program, 1, &g->e));
  gr_ew_scratch_init(&g->e, &g->s);
  g->dtype = g->e.dtype;
  g->shape = g->e.shape;
  return GR_OK;
}

/* Elements [off, off + len) of the gradient: in place, or computed into buf. */
static const void *grad_block(grad_src *g, int64_t off, int len, void *buf) {
  if (g->t) return (const char *)gr_tensor_data(g->t) + (size_t)off * gr_dtype_size(g->dtype);
  gr_ew_block(&g->e, &g->s, off, len, buf);
  return buf;
}

/* Runs BODY for each element i of n, with g[j] the gradient's element i
 * (j = i - off, in the block from off). */
#define FOR_GRAD_BLOCKS(T, BODY)                                                                   \
  for (int64_t off = 0; off < n; off += GR_EW_BLOCK) {                                             \
    int len = (int)(n - off < GR_EW_BLOCK ? n - off : GR_EW_BLOCK);                                \
    T gb[GR_EW_BLOCK];                                                                             \
    const T *g = grad_block(gs, off, len, gb);                                                     \
    for (int64_t j = 0, i = off; j < len; j++, i++) BODY                                           \
  }

/* ---- apply_sgd: var -= lr * grad ---------------------------------------------------------- */

#define SGD_LOOP(T)                                                                                \
  do {                                                                                             \
    T *w = gr_tensor_data(var);                                                                    \
    T a = (T)lr;                                                                                   \
    FOR_GRAD_BLOCKS(T, { w[i] -= a * g[j]; })                                                      \
  } while (0)

void gr_ops_sgd_range(gr_tensor *var, int64_t at, const void *grad, int64_t n, double lr) {
  GR_ASSERT(var->dtype == GR_F32 || var->dtype == GR_F64);
  if (var->dtype == GR_F32) {
    float *w = (float *)gr_tensor_data(var) + at, a = (float)lr;
    const float *g = grad;
    for (int64_t i = 0; i < n; i++) w[i] -= a * g[i];
  } else {
    double *w = (double *)gr_tensor_data(var) + at, a = lr;
    const double *g = grad;
    for (int64_t i = 0; i < n; i++) w[i] -= a * g[i];
  }
}

static gr_status apply_sgd_kernel(gr_kernel_ctx *ctx) {
  grad_src src, *gs = &src;
  GR_TRY(grad_init(ctx, gs));
  static const char *const names[] = {"var"};
  locked_vars lv;
  gr_status s = lock_vars(ctx, names, 1, gs->dtype, &gs->shape, &lv);
  if (s == GR_OK) {
    gr_tensor *var = gr_var_value(lv.v[0]);
    double lr = scalar_of(&ctx->inputs[0]);
    int64_t n = gr_tensor_num_elements(var);
    if (gs->t) /* the gradient stored: the same loop the fused all-reduce runs */
      gr_ops_sgd_range(var, 0, gr_tensor_data(gs->t), n, lr);
    else if (var->dtype == GR_F32)
      SGD_LOOP(float);
    else
      SGD_LOOP(double);
  }
  unlock_vars(&lv);
  return s;
}

/* ---- apply_sgd_matmul: var -= lr * op(a) op(b) ----------------------------------------------
 * SGD on a weight whose gradient is a matrix product (gr_minimize fuses
 * them): one gemm with alpha = -lr and beta = 1 into the variable, so the
 * gradient is never stored, zeroed or read back. */

static gr_status apply_sgd_matmul_kernel(gr_kernel_ctx *ctx) {
  GR_TRY(check_lr(ctx));
  const gr_tensor *A = &ctx->inputs[1], *B = &ctx->inputs[2];
  bool ta = gr_node_attr_bool(ctx->node, "transpose_a", false);
  bool tb = gr_node_attr_bool(ctx->node, "transpose_b", false);
  int64_t mnk[3];
  GR_TRY(gr_ops_gemm_dims(ctx, A, B, ta, tb, mnk));
  gr_shape sh = gr_shape_make(2, (int64_t[]){mnk[0], mnk[1]});
  static const char *const names[] = {"var"};
  locked_vars lv;
  gr_status s = lock_vars(ctx, names, 1, A->dtype, &sh, &lv);
  if (s == GR_OK)
    gr_ops_gemm(ctx, A, B, ta, tb, mnk, -scalar_of(&ctx->inputs[0]), 1.0,
                gr_tensor_data(gr_var_value(lv.v[0])));
  unlock_vars(&lv);
  return s;
}

/* ---- apply_momentum ----------------------------------------------------------------------
 * accum = momentum * accum + grad
 * var -= lr * accum                       (or lr * (grad + momentum * accum): Nesterov) */

#define MOMENTUM_LOOP(T)                                                                           \
  do {                                                                                             \
    T *w = gr_tensor_data(var), *acc = gr_tensor_data(accum);                                      \
    T a = (T)lr, m = (T)mom;                                                                       \
    FOR_GRAD_BLOCKS(T, {                                                                           \
      acc[i] = m * acc[i] + g[j];                                                                  \
      w[i] -= nesterov ? a * (g[j] + m * acc[i]) : a * acc[i];                                     \
    })                                                                                             \
  } while (0)

static gr_status apply_momentum_kernel(gr_kernel_ctx *ctx) {
  grad_src src, *gs = &src;
  GR_TRY(grad_init(ctx, gs));
  static const char *const names[] = {"var", "slot_accum"};
  locked_vars lv;
  gr_status s = lock_vars(ctx, names, 2, gs->dtype, &gs->shape, &lv);
  if (s == GR_OK) {
    gr_tensor *var = gr_var_value(lv.v[0]), *accum = gr_var_value(lv.v[1]);
    double lr = scalar_of(&ctx->inputs[0]), mom = gr_node_attr_float(ctx->node, "momentum", 0.9);
    bool nesterov = gr_node_attr_bool(ctx->node, "nesterov", false);
    int64_t n = gr_tensor_num_elements(var);
    if (var->dtype == GR_F32)
      MOMENTUM_LOOP(float);
    else
      MOMENTUM_LOOP(double);
  }
  unlock_vars(&lv);
  return s;
}

/* ---- apply_adam ----------------------------------------------------------------------------
 * t += 1; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
 * var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)       (Kingma & Ba, as TF) */

#define ADAM_LOOP(T)                                                                               \
  do {                                                                                             \
    T *w = gr_tensor_data(var), *mm = gr_tensor_data(m), *vv = gr_tensor_data(v);                  \
    T b1 = (T)beta1, b2 = (T)beta2, e = (T)eps, a = (T)lr_t;                                       \
    FOR_GRAD_BLOCKS(T, {                                                                           \
      mm[i] = b1 * mm[i] + (1 - b1) * g[j];                                                        \
      vv[i] = b2 * vv[i] + (1 - b2) * g[j] * g[j];                                                 \
      w[i] -= a * mm[i] / ((T)sqrt((double)vv[i]) + e);                                            \
    })                                                                                             \
  } while (0)

static gr_status apply_adam_kernel(gr_kernel_ctx *ctx) {
  grad_src src, *gs = &src;
  GR_TRY(grad_init(ctx, gs));
  static const char *const names[] = {"var", "slot_m", "slot_v", "slot_t"};
  locked_vars lv;
  gr_status s = lock_vars(ctx, names, 4, gs->dtype, &gs->shape, &lv);
  if (s == GR_OK) {
    gr_tensor *var = gr_var_value(lv.v[0]), *m = gr_var_value(lv.v[1]);
    gr_tensor *v = gr_var_value(lv.v[2]), *t = gr_var_value(lv.v[3]);
    double beta1 = gr_node_attr_float(ctx->node, "beta1", 0.9);
    double beta2 = gr_node_attr_float(ctx->node, "beta2", 0.999);
    double eps = gr_node_attr_float(ctx->node, "epsilon", 1e-8);
    double step = gr_tensor_get_f64(t, 0) + 1;
    gr_tensor_set_f64(t, 0, step);
    double lr_t = scalar_of(&ctx->inputs[0]) * sqrt(1 - pow(beta2, step)) / (1 - pow(beta1, step));
    int64_t n = gr_tensor_num_elements(var);
    if (var->dtype == GR_F32)
      ADAM_LOOP(float);
    else
      ADAM_LOOP(double);
  }
  unlock_vars(&lv);
  return s;
}

/* ---- definitions -------------------------------------------------------------------------- */

static gr_status apply_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_FLOAT));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  if (ctx->in_shapes[0].rank > 0 && gr_shape_num_elements(&ctx->in_shapes[0]) != 1) {
    char b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "learning rate must be a scalar, got %s",
                          gr_shape_str(&ctx->in_shapes[0], b));
  }
  ctx->num_outputs = 0;
  return GR_OK;
}

/* apply_sgd, apply_momentum, apply_adam: lr and grad, or lr and the inputs
 * of attr grad_program. */
static gr_status update_shape(gr_shape_ctx *ctx) {
  GR_TRY(apply_shape(ctx));
  const char *program = gr_node_attr_string(ctx->node, "grad_program", "");
  if (*program) {
    gr_dtype dt;
    gr_shape grad;
    GR_TRY(gr_ew_shape(ctx, program, 1, &dt, &grad));
  } else if (ctx->num_inputs != 2) {
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "%d inputs: lr and grad, or more with attr grad_program",
                          ctx->num_inputs);
  }
  return GR_OK;
}

static void apply_cost(const gr_node *n, gr_cost *c) {
  int64_t k = 0; /* the gradient's elements: its largest input's */
  for (int i = 1; i < n->num_inputs; i++) {
    int64_t e = gr_shape_num_elements(&n->inputs[i].node->out_shapes[n->inputs[i].index]);
    if (e > k) k = e;
  }
  c->flops = k > 0 ? 4.0 * (double)k : 0;
  c->bytes = k > 0 ? 16.0 * (double)k : 0;
}

/* lr and grad; with attr grad_program, the program's inputs from input 1 */
static const char *const lr_grad_names[] = {"lr",  "grad", "in2", "in3", "in4",
                                            "in5", "in6",  "in7", "in8"};
#define GRAD_PROGRAM_ATTR                                                                          \
  {                                                                                                \
    "grad_program", GR_ATTR_STRING, false, {                                                       \
      .type = GR_ATTR_STRING, .s = ""                                                              \
    }                                                                                              \
  }
#define GRAD_PROGRAM_DOC                                                                           \
  "; with attr grad_program (the fusion pass sets it), grad is that _fused_elementwise program "   \
  "over inputs 1.., computed block by block as the update runs"
#define APPLY_FLAGS (GR_OP_STATEFUL | GR_OP_VARIABLE | GR_OP_UPDATES)

static const gr_attr_spec sgd_attrs[] = {{"var", GR_ATTR_STRING, true, {0}}, GRAD_PROGRAM_ATTR};
const gr_op_def gr_op_apply_sgd = {.name = "apply_sgd",
                                   .doc = "var -= lr * grad, in place (attr var)" GRAD_PROGRAM_DOC,
                                   .min_inputs = 2,
                                   .max_inputs = 9,
                                   .input_names = lr_grad_names,
                                   .num_outputs = 0,
                                   .attrs = sgd_attrs,
                                   .num_attrs = 2,
                                   .shape_fn = update_shape,
                                   .cost_fn = apply_cost,
                                   .kernel = apply_sgd_kernel,
                                   .flags = APPLY_FLAGS};

/* The product's shape is checked against the variable's when the update runs. */
static gr_status sgd_matmul_shape(gr_shape_ctx *ctx) {
  GR_TRY(apply_shape(ctx));
  gr_shape product;
  return gr_ops_gemm_shape(ctx, 1, &product);
}

static void sgd_matmul_cost(const gr_node *n, gr_cost *c) {
  gr_ops_gemm_cost(n, 1, c);
}

static const gr_attr_spec sgd_matmul_attrs[] = {
    {"var", GR_ATTR_STRING, true, {0}},
    {"transpose_a", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    {"transpose_b", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};
const gr_op_def gr_op_apply_sgd_matmul = {
    .name = "apply_sgd_matmul",
    .doc = "var -= lr * op(a) op(b), in place: SGD fused with a weight gradient's matmul",
    .min_inputs = 3,
    .max_inputs = 3,
    .input_names = (const char *const[]){"lr", "a", "b"},
    .num_outputs = 0,
    .attrs = sgd_matmul_attrs,
    .num_attrs = 3,
    .shape_fn = sgd_matmul_shape,
    .cost_fn = sgd_matmul_cost,
    .kernel = apply_sgd_matmul_kernel,
    .flags = APPLY_FLAGS};

static const gr_attr_spec momentum_attrs[] = {
    {"var", GR_ATTR_STRING, true, {0}},
    {"slot_accum", GR_ATTR_STRING, true, {0}},
    {"momentum", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.9}},
    {"nesterov", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    GRAD_PROGRAM_ATTR};
const gr_op_def gr_op_apply_momentum = {
    .name = "apply_momentum",
    .doc =
        "accum = momentum accum + grad; var -= lr accum (or Nesterov), in place" GRAD_PROGRAM_DOC,
    .min_inputs = 2,
    .max_inputs = 9,
    .input_names = lr_grad_names,
    .num_outputs = 0,
    .attrs = momentum_attrs,
    .num_attrs = 5,
    .shape_fn = update_shape,
    .cost_fn = apply_cost,
    .kernel = apply_momentum_kernel,
    .flags = APPLY_FLAGS};

static const gr_attr_spec adam_attrs[] = {
    {"var", GR_ATTR_STRING, true, {0}},
    {"slot_m", GR_ATTR_STRING, true, {0}},
    {"slot_v", GR_ATTR_STRING, true, {0}},
    {"slot_t", GR_ATTR_STRING, true, {0}},
    {"beta1", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.9}},
    {"beta2", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.999}},
    {"epsilon", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 1e-8}},
    GRAD_PROGRAM_ATTR};
const gr_op_def gr_op_apply_adam = {
    .name = "apply_adam",
    .doc = "Adam update of var with slots m, v and step t, in place" GRAD_PROGRAM_DOC,
    .min_inputs = 2,
    .max_inputs = 9,
    .input_names = lr_grad_names,
    .num_outputs = 0,
    .attrs = adam_attrs,
    .num_attrs = 8,
    .shape_fn = update_shape,
    .cost_fn = apply_cost,
    .kernel = apply_adam_kernel,
    .flags = APPLY_FLAGS};

/* ---- gr_minimize ------------------------------------------------------------------------------
 */

/* A slot variable VAR/SLOT of var's dtype and shape, zeros (or a scalar when scalar). */
static const char *make_slot(gr_graph *g, const gr_node *var, const char *slot, bool scalar) {
  const char *vname = gr_node_attr_string(var, "var", var->name);
  char scope[512];
  snprintf(scope, sizeof scope, "/%s", vname);
  if (gr_graph_push_name_scope(g, scope) != GR_OK) return NULL;
  /* and out of reach of the enclosing control dependencies (TensorFlow's
   * init_scope): initialising a slot must not run the loss it trains */
  if (gr_graph_push_no_control_deps(g) != GR_OK) {
    gr_graph_pop_name_scope(g);
    return NULL;
  }
  /* made with the variable's device, out of reach of the enclosing device
   * scopes and functions (a ps placement must not count a slot as a
   * variable of its own) */
  if (gr_graph_push_device_scope_reset(g, gr_graph_resolve_device(g, var)) != GR_OK) {
    gr_graph_pop_control_deps(g);
    gr_graph_pop_name_scope(g);
    return NULL;
  }
  gr_shape sh = scalar ? gr_shape_scalar() : var->out_shapes[0];
  gr_output s = gr_variable(g, slot, gr_zeros(g, var->out_dtypes[0], sh));
  gr_graph_pop_device_scope(g);
  gr_graph_pop_control_deps(g);
  gr_graph_pop_name_scope(g);
  if (!s.node) return NULL;
  /* a slot lives with its variable (its update reads both there), whatever
   * device scope minimize() was called in */
  s.node->requested_device = "";
  gr_graph_set_colocation(g, s.node, var->name);
  return gr_node_attr_string(s.node, "var", s.node->name);
}

/* Every variable node that y depends on (in id order). */
int gr_ops_float_vars(const gr_graph *g, gr_output y, gr_output *out, int cap) {
  int total = gr_graph_num_nodes(g), n = 0, top = 0;
  char *need = calloc((size_t)total + 1, 1);
  int *stack = gr_alloc_array((size_t)total + 1, sizeof(int));
  if (!need || !stack) {
    free(need);
    free(stack);
    return -1;
  }
  /* every input, a loop's back edge (merge <- next_iteration) too: a
   * variable read only in a loop's body is one y depends on */
  need[y.node->id] = 1;
  stack[top++] = y.node->id;
  while (top > 0) {
    gr_node *nd = gr_graph_node(g, stack[--top]);
    for (int j = 0; j < nd->num_inputs + nd->num_control_inputs; j++) {
      int p = gr_node_predecessor(nd, j)->id;
      if (!need[p]) need[p] = 1, stack[top++] = p;
    }
  }
  for (int id = 0; id < total && n < cap; id++) {
    gr_node *nd = gr_graph_node(g, id);
    if (need[id] && nd->op == &gr_op_variable && gr_dtype_is_float(nd->out_dtypes[0]))
      out[n++] = (gr_output){nd, 0};
  }
  free(need);
  free(stack);
  return n;
}

/* The matmul computing a variable's gradient when SGD can fuse with it: the
 * gradient is a matmul's output of the variable's dtype that nothing else
 * reads, asked for on the same device as the variable (gradients follow
 * their forward node's colocation: gr_graph_resolve_device; the fused update
 * runs with the variable, so a product that was to run elsewhere, say on a
 * worker while the variable lives on a parameter server, stays unfused).
 * NULL otherwise. */
static const gr_node *fusable_matmul(const gr_graph *g, const gr_node *var, gr_output grad) {
  const gr_node *m = grad.node;
  if (m->op != &gr_op_matmul || m->out_dtypes[0] != var->out_dtypes[0]) return NULL;
  for (int id = m->id + 1; id < gr_graph_num_nodes(g); id++) { /* readers come after it */
    const gr_node *r = gr_graph_node(g, id);
    for (int j = 0; j < r->num_inputs; j++)
      if (r->inputs[j].node == m) return NULL;
    for (int j = 0; j < r->num_control_inputs; j++)
      if (r->control_inputs[j] == m) return NULL;
  }
  return strcmp(gr_graph_resolve_device(g, m), gr_graph_resolve_device(g, var)) == 0 ? m : NULL;
}

/* GRAPHRUN_FUSE_UPDATE=0 (read when the graph is built) keeps every SGD
 * update unfused: the weight gradient's product stored, then apply_sgd, as
 * a replica of synchronous training must (bench-parallel's floor pair
 * measures that step); and a mirrored variable's update out of its
 * gradients' all-reduce. Unset or 1: fused where fusable_matmul, or
 * gr_ops_fuse_sgd, allows. */
static gr_status fuse_update(gr_graph *g, bool *fuse) {
  const char *v = getenv("GRAPHRUN_FUSE_UPDATE");
  *fuse = true;
  if (!v || !v[0] || !strcmp(v, "1")) return GR_OK;
  if (!strcmp(v, "0")) return *fuse = false, GR_OK;
  return gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "GRAPHRUN_FUSE_UPDATE='%s': want 0 or 1",
                             v);
}

gr_status gr_ops_check_loss(gr_graph *g, const char *fn, gr_output loss) {
  gr_dtype dt = loss.node->out_dtypes[loss.index];
  if (gr_dtype_is_float(dt)) return GR_OK;
  return gr_graph_set_errorf(g, GR_ERR_DTYPE,
                             "%s: loss '%s' has dtype %s; only an f32/f64 loss can be minimized",
                             fn, loss.node->name, gr_dtype_name(dt));
}

/* The step advances after this step's reads of it and its updates, so
 * every reader sees the same step whatever the schedule or placement:
 * global_step's increment waits for updates[0..*nu), and joins them. With
 * mirrored replicas' copies of it (gr_ops_step_copy), each copy advances
 * after its own read and the updates on its device, and global_step after
 * the other updates: no task waits for another's updates to count the
 * step, and every copy counts every step that every other does. Linear in
 * the updates and copies (a map from a copy's device to the copy). */
static gr_status advance_steps(gr_graph *g, gr_output *updates, int *nu) {
  gr_node *gs = gr_graph_find_node(g, "global_step");
  if (!gs || gs->op != &gr_op_variable || gs->out_dtypes[0] != GR_I64) return GR_OK;
  int total = gr_graph_num_nodes(g), nc = 0, n = *nu;
  gr_node **copies = gr_alloc_array((size_t)total + 1, sizeof *copies);
  gr_output *deps = gr_alloc_array((size_t)n + 1, sizeof *deps);
  int *holder = gr_alloc_array((size_t)n + 1, sizeof *holder); /* -1: global_step */
  gr_map at_dev;
  gr_map_init(&at_dev, GR_MAP_STR);
  bool ok = copies && deps && holder;
  for (int id = 0; ok && id < total; id++) {
    gr_node *c = gr_graph_node(g, id);
    if (!gr_ops_is_step_copy(c) || c->out_dtypes[0] != GR_I64) continue;
    bool added;
    void **slot = gr_map_slot_str(&at_dev, gr_graph_resolve_device(g, c), &added);
    ok = slot != NULL;
    if (ok && added) *slot = (void *)(intptr_t)(nc + 1);
    if (ok) copies[nc++] = c;
  }
  /* the updates by holder (counting sort): order[start[h + 1] ..
   * start[h + 2]) are those of holder h (-1: global_step) */
  int *start = ok ? calloc((size_t)nc + 3, sizeof *start) : NULL;
  int *order = ok ? gr_alloc_array((size_t)n + 1, sizeof *order) : NULL;
  ok = ok && start && order;
  for (int i = 0; ok && i < n; i++) {
    holder[i] =
        (int)(intptr_t)gr_map_get_str(&at_dev, gr_graph_resolve_device(g, updates[i].node)) - 1;
    start[holder[i] + 2]++;
  }
  for (int h = 0; ok && h <= nc; h++) start[h + 1] += start[h];
  for (int i = 0; ok && i < n; i++) order[start[holder[i] + 1]++] = i;
  for (int h = nc; ok && h >= 0; h--) start[h + 1] = start[h]; /* back to the starts */
  if (ok) start[0] = 0;
  gr_status st = ok ? GR_OK : gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int h = -1; st == GR_OK && h < nc; h++) { /* -1: global_step itself */
    gr_node *at = h < 0 ? gs : copies[h];
    int nd = 0;
    deps[nd++] = (gr_output){at, 0};
    for (int j = start[h + 1]; j < start[h + 2]; j++) deps[nd++] = updates[order[j]];
    /* the 1 outside control dependencies: made on the device that adds it */
    st = gr_graph_push_no_control_deps(g);
    gr_output one = st == GR_OK ? gr_const_i64(g, 1) : (gr_output){NULL, 0};
    if (st == GR_OK) gr_graph_pop_control_deps(g);
    if (st == GR_OK && !one.node)
      st = gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
    if (st == GR_OK) st = gr_graph_push_control_deps(g, deps, nd);
    if (st != GR_OK) break;
    gr_output inc = gr_ops_advance_variable(g, "assign_add", (gr_output){at, 0}, one);
    gr_graph_pop_control_deps(g);
    if (!inc.node) st = gr_graph_error(g) ? gr_graph_error(g)->code : GR_ERR_INTERNAL;
    if (st == GR_OK) updates[(*nu)++] = inc;
  }
  gr_map_free(&at_dev);
  free(copies), free(deps), free(holder), free(start), free(order);
  return st;
}

gr_output gr_minimize(gr_graph *g, const gr_optimizer *opt, gr_output loss,
                      const gr_output *var_list, int n) {
  if (!loss.node) return loss;
  if (gr_ops_check_loss(g, "minimize", loss) != GR_OK) return (gr_output){NULL, 0};
  if (!opt) return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "minimize: no optimizer");
  if (!(opt->learning_rate > 0) || !isfinite(opt->learning_rate))
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                       "minimize: learning rate must be positive and finite");
  /* the variables, and the mirrors of mirrored ones (a replica's copies) */
  int cap = gr_graph_num_nodes(g) + n + 1;
  gr_output *found = gr_alloc_array((size_t)cap, sizeof *found);
  if (!found) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (!var_list || n == 0) {
    n = gr_ops_float_vars(g, loss, found, cap);
    if (n <= 0) {
      free(found);
      if (n < 0) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
      return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT,
                         "minimize: loss '%s' depends on no float variable", loss.node->name);
    }
  } else {
    memcpy(found, var_list, sizeof *found * (size_t)n);
  }
  var_list = found;
  for (int i = 0; i < n; i++)
    if (!var_list[i].node || var_list[i].node->op != &gr_op_variable) {
      gr_output r = gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "minimize: '%s' is not a variable",
                                var_list[i].node ? var_list[i].node->name : "(null)");
      free(found);
      return r;
    }
  n = gr_ops_add_mirrors(g, found, n, cap);
  gr_output *grads = calloc((size_t)n, sizeof *grads),
            *updates = calloc((size_t)n + (size_t)gr_graph_num_nodes(g) + 1, sizeof *updates);
  gr_node **fused_by = calloc((size_t)n + 1, sizeof *fused_by);
  if (!grads || !updates || !fused_by) {
    free(grads);
    free(updates);
    free(fused_by);
    free(found);
    return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  gr_output train = {NULL, 0};
  bool fuse;
  if (fuse_update(g, &fuse) != GR_OK) goto done;
  if (gr_gradients(g, &loss, 1, var_list, n, NULL, true, grads) != GR_OK) goto done;
  if (gr_ops_all_reduce_mirrors(g, var_list, n, grads) != GR_OK) goto done;
  if (fuse && opt->kind == GR_OPT_SGD &&
      gr_ops_fuse_sgd(g, var_list, n, grads, opt->learning_rate, fused_by) != GR_OK)
    goto done;
  int nu = 0;
  for (int i = 0; i < n; i++) {
    const gr_node *v = var_list[i].node;
    if (!grads[i].node) continue; /* the loss does not depend on it */
    /* updated by its all-reduce: one target per node, added with the
     * variable of its output 0 */
    if (fused_by[i]) {
      if (grads[i].index == 0) updates[nu++] = (gr_output){fused_by[i], 0};
      continue;
    }
    const char *vname = gr_node_attr_string(v, "var", v->name);
    gr_output lr = gr_ops_const_scalar(g, v->out_dtypes[0], opt->learning_rate);
    gr_output in[2] = {lr, grads[i]};
    gr_output u = {NULL, 0};
    const gr_node *mm = fuse && opt->kind == GR_OPT_SGD ? fusable_matmul(g, v, grads[i]) : NULL;
    if (mm) { /* the matmul is left without consumers: a run prunes it */
      gr_output fin[3] = {lr, mm->inputs[0], mm->inputs[1]};
      gr_attr a[] = {gr_attr_string("var", vname),
                     gr_attr_bool("transpose_a", gr_node_attr_bool(mm, "transpose_a", false)),
                     gr_attr_bool("transpose_b", gr_node_attr_bool(mm, "transpose_b", false))};
      u = gr_ops_build(g, "apply_sgd_matmul", NULL, fin, 3, a, 3);
    } else if (opt->kind == GR_OPT_SGD) {
      gr_attr a[] = {gr_attr_string("var", vname)};
      u = gr_ops_build(g, "apply_sgd", NULL, in, 2, a, 1);
    } else if (opt->kind == GR_OPT_MOMENTUM) {
      const char *acc = make_slot(g, v, "momentum", false);
      if (!acc) goto done;
      gr_attr a[] = {gr_attr_string("var", vname), gr_attr_string("slot_accum", acc),
                     gr_attr_float("momentum", opt->momentum),
                     gr_attr_bool("nesterov", opt->nesterov)};
      u = gr_ops_build(g, "apply_momentum", NULL, in, 2, a, 4);
    } else {
      const char *m = make_slot(g, v, "adam_m", false), *vv = make_slot(g, v, "adam_v", false);
      const char *t = make_slot(g, v, "adam_t", true);
      if (!m || !vv || !t) goto done;
      gr_attr a[] = {gr_attr_string("var", vname),
                     gr_attr_string("slot_m", m),
                     gr_attr_string("slot_v", vv),
                     gr_attr_string("slot_t", t),
                     gr_attr_float("beta1", opt->beta1 > 0 ? opt->beta1 : 0.9),
                     gr_attr_float("beta2", opt->beta2 > 0 ? opt->beta2 : 0.999),
                     gr_attr_float("epsilon", opt->epsilon > 0 ? opt->epsilon : 1e-8)};
      u = gr_ops_build(g, "apply_adam", NULL, in, 2, a, 7);
    }
    if (!u.node) goto done;
    gr_graph_set_colocation(g, u.node, v->name);
    updates[nu++] = u;
  }
  if (advance_steps(g, updates, &nu) != GR_OK) goto done;
  train = gr_group(g, "train", updates, nu);
done:
  free(grads);
  free(updates);
  free(fused_by);
  free(found);
  return train;
}

gr_output gr_global_step(gr_graph *g) {
  gr_node *gs = gr_graph_find_node(g, "global_step");
  if (gs) return (gr_output){gs, 0};
  if (gr_graph_push_name_scope(g, "/") != GR_OK) return (gr_output){NULL, 0};
  gr_output v = gr_variable(g, "global_step", gr_const_i64(g, 0));
  gr_graph_pop_name_scope(g);
  return v;
}
