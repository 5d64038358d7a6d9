/* Gradient accumulators (TensorFlow's ConditionalAccumulator) in a task's
 * resource container, shared by name: `accumulator` makes (or finds) one
 * and outputs its handle (u8, the name); accumulator_apply_grad adds a
 * gradient computed at a local step, or drops it (and counts it) when the
 * step is older than the accumulator's (accumulator_apply_grads: a
 * gradient to each of several accumulators, all or none, under all their
 * locks at once); accumulator_take_grad waits until
 * at least n gradients are in, outputs their mean, empties the accumulator
 * and advances its step by one; accumulator_set_global_step raises the
 * step; accumulator_num_accumulated and accumulator_num_dropped count.
 * Gradients are added in the order they arrive, in the accumulator's dtype. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_resource.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/wait_internal.h"

extern const gr_op_def gr_op_accumulator_num_dropped;

typedef struct take_waiter {
  struct take_waiter *next;
  uint64_t id;
  gr_kernel_ctx *ctx;
  int64_t n;
  gr_status status;
} take_waiter;

typedef struct accum {
  gr_wait_owner owner;
  gr_dtype dtype;
  gr_shape shape;
  gr_tensor sum; /* empty while count == 0 */
  int64_t count, step, dropped;
  take_waiter *waiters; /* oldest first */
} accum;

static void accum_destroy(gr_wait_owner *o) {
  accum *a = (accum *)o;
  gr_tensor_release(&a->sum);
  pthread_mutex_destroy(&a->owner.mu);
  free(a);
}

static take_waiter *unlink_waiter(accum *a, uint64_t id) {
  for (take_waiter **p = &a->waiters; *p; p = &(*p)->next)
    if ((*p)->id == id) {
      take_waiter *w = *p;
      *p = w->next;
      return w;
    }
  return NULL;
}

static gr_kernel_ctx *take_waiter_fn(gr_wait_owner *o, uint64_t id) {
  take_waiter *w = unlink_waiter((accum *)o, id);
  if (!w) return NULL;
  gr_kernel_ctx *ctx = w->ctx;
  free(w);
  return ctx;
}

static void accum_release(void *obj) {
  accum *a = obj;
  pthread_mutex_lock(&a->owner.mu);
  take_waiter *w = a->waiters;
  a->waiters = NULL;
  for (take_waiter *x = w; x; x = x->next) gr_wait_unregister(x->id);
  pthread_mutex_unlock(&a->owner.mu);
  while (w) {
    take_waiter *next = w->next;
    gr_kernel_done(w->ctx,
                   gr_kernel_error(w->ctx, GR_ERR_CANCELLED, "%s was destroyed", a->owner.what));
    free(w);
    w = next;
  }
  gr_wait_owner_unref(&a->owner);
}

static const gr_resource_kind accum_kind = {"accumulator", accum_release};

typedef struct make_arg {
  const char *name;
  gr_dtype dtype;
  gr_shape shape;
} make_arg;

static gr_status accum_make(void *arg, void **obj, gr_error *err) {
  make_arg *m = arg;
  accum *a = calloc(1, sizeof *a);
  if (!a) return gr_error_set_oom(err);
  char what[160];
  snprintf(what, sizeof what, "accumulator '%s'", m->name);
  gr_wait_owner_init(&a->owner, accum_destroy, take_waiter_fn, what);
  a->dtype = m->dtype;
  a->shape = m->shape;
  a->sum = gr_tensor_empty();
  *obj = a;
  return GR_OK;
}

static const char *accum_name(const gr_node *n) {
  return gr_node_attr_string(n, "accumulator", n->name);
}

/* The kernel's accumulator: made by the `accumulator` op, found by the others. */
static gr_status kernel_accum(gr_kernel_ctx *ctx, bool create, accum **out) {
  if (*ctx->state) {
    *out = *ctx->state;
    return GR_OK;
  }
  const gr_node *n = ctx->node;
  make_arg m = {accum_name(n), gr_node_attr_dtype(n, "dtype", GR_F32),
                gr_node_attr(n, "shape")->shape};
  void *obj = NULL;
  gr_error e;
  if (create) {
    if (gr_resource_mgr_lookup_or_create(ctx->step->resources, m.name, &accum_kind, accum_make, &m,
                                         &obj, &e) != GR_OK)
      return gr_kernel_error(ctx, e.code, "%s", e.msg);
  } else if (!(obj = gr_resource_mgr_find(ctx->step->resources, m.name, &accum_kind))) {
    return gr_kernel_error(ctx, GR_ERR_NOT_FOUND,
                           "accumulator '%s' does not exist (run its accumulator op first)",
                           m.name);
  }
  accum *a = obj;
  if (a->dtype != m.dtype || !gr_shape_equal(&a->shape, &m.shape)) {
    char s1[GR_SHAPE_STR_MAX], s2[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "accumulator '%s' exists as %s %s; this node wants %s %s", m.name,
                           gr_dtype_name(a->dtype), gr_shape_str(&a->shape, s1),
                           gr_dtype_name(m.dtype), gr_shape_str(&m.shape, s2));
  }
  *ctx->state = a;
  *out = a;
  return GR_OK;
}

/* ---- shape functions ----------------------------------------------------------------------------
 */

static gr_status check_handle(gr_shape_ctx *ctx) {
  if (ctx->num_inputs < 1 || ctx->in_dtypes[0] != GR_U8 || ctx->in_shapes[0].rank != 1)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "input 0 must be an accumulator handle (the output of accumulator)");
  return GR_OK;
}

static gr_status check_scalar_int(gr_shape_ctx *ctx, int i, const char *what) {
  GR_TRY(gr_shape_check_dtype(ctx, i, GR_DT_INDEX));
  if (ctx->in_shapes[i].rank > 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "%s must be a scalar", what);
  return GR_OK;
}

static gr_status accumulator_shape(gr_shape_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  if (!gr_dtype_is_float(dt))
    return gr_shape_error(ctx, GR_ERR_DTYPE, "an accumulator holds f32 or f64, not %s",
                          gr_dtype_name(dt));
  if (!gr_shape_is_fully_known(&gr_node_attr(ctx->node, "shape")->shape))
    return gr_shape_error(ctx, GR_ERR_SHAPE, "an accumulator needs a fully known shape");
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_U8;
  ctx->out_shapes[0] = (gr_shape){.rank = 1, .dims = {(int64_t)strlen(accum_name(ctx->node))}};
  return GR_OK;
}

static gr_status apply_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  GR_TRY(check_scalar_int(ctx, 1, "local_step"));
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  const gr_shape *sh = &gr_node_attr(ctx->node, "shape")->shape;
  if (ctx->in_dtypes[2] != dt)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "grad is %s, accumulator '%s' holds %s",
                          gr_dtype_name(ctx->in_dtypes[2]), accum_name(ctx->node),
                          gr_dtype_name(dt));
  if (!gr_shape_compatible(&ctx->in_shapes[2], sh)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "grad has shape %s, accumulator '%s' holds %s",
                          gr_shape_str(&ctx->in_shapes[2], a), accum_name(ctx->node),
                          gr_shape_str(sh, b));
  }
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status apply_grads_shape(gr_shape_ctx *ctx) {
  int n = (ctx->num_inputs - 1) / 2;
  if (ctx->num_inputs < 3 || ctx->num_inputs % 2 == 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "want local_step, n accumulator handles and n grads (n >= 1), got %d "
                          "inputs",
                          ctx->num_inputs);
  GR_TRY(check_scalar_int(ctx, 0, "local_step"));
  for (int i = 0; i < n; i++) {
    if (ctx->in_dtypes[1 + i] != GR_U8 || ctx->in_shapes[1 + i].rank != 1)
      return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                            "input %d must be an accumulator handle (the output of accumulator)",
                            1 + i);
    if (!gr_dtype_is_float(ctx->in_dtypes[1 + n + i]))
      return gr_shape_error(ctx, GR_ERR_DTYPE, "grad %d is %s, not a float", i,
                            gr_dtype_name(ctx->in_dtypes[1 + n + i]));
  }
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status take_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  GR_TRY(check_scalar_int(ctx, 1, "num_required"));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

static gr_status set_step_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  GR_TRY(check_scalar_int(ctx, 1, "new_global_step"));
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status count_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static int64_t int_of(const gr_tensor *t) {
  return t->dtype == GR_I32 ? *(const int32_t *)gr_tensor_data(t)
                            : *(const int64_t *)gr_tensor_data(t);
}

/* ---- kernels ------------------------------------------------------------------------------------
 */

static gr_status accumulator_kernel(gr_kernel_ctx *ctx) {
  accum *a = NULL;
  GR_TRY(kernel_accum(ctx, true, &a));
  const char *name = accum_name(ctx->node);
  size_t len = strlen(name);
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_U8, &(gr_shape){.rank = 1, .dims = {(int64_t)len}}, &o));
  if (len) memcpy(gr_tensor_data(o), name, len);
  return GR_OK;
}

/* Serves the oldest waiting take when enough gradients are in (mu held):
 * its output is the mean; the accumulator empties and its step advances. */
static take_waiter *serve(accum *a) {
  take_waiter *w = a->waiters;
  if (!w || a->count < w->n || a->count == 0) return NULL;
  a->waiters = w->next;
  gr_wait_unregister(w->id);
  gr_tensor *o;
  w->status = gr_kernel_alloc_output(w->ctx, 0, a->dtype, &a->shape, &o);
  if (w->status == GR_OK) {
    int64_t n = gr_tensor_num_elements(o);
    if (a->dtype == GR_F32) {
      const float *s = gr_tensor_data(&a->sum);
      float *d = gr_tensor_data(o), c = (float)a->count;
      for (int64_t i = 0; i < n; i++) d[i] = s[i] / c;
    } else {
      const double *s = gr_tensor_data(&a->sum);
      double *d = gr_tensor_data(o), c = (double)a->count;
      for (int64_t i = 0; i < n; i++) d[i] = s[i] / c;
    }
  }
  gr_tensor_release(&a->sum);
  a->sum = gr_tensor_empty();
  a->count = 0;
  a->step++;
  w->next = NULL;
  return w;
}

static void finish(take_waiter *w) {
  if (!w) return;
  gr_kernel_ctx *ctx = w->ctx;
  gr_status st = w->status;
  free(w);
  gr_kernel_done(ctx, st);
}

/* Checks that g fits a (dtype and shape). */
static gr_status check_grad(gr_kernel_ctx *ctx, const accum *a, const gr_tensor *g) {
  if (g->dtype == a->dtype && gr_shape_equal(&g->shape, &a->shape)) return GR_OK;
  char s1[GR_SHAPE_STR_MAX], s2[GR_SHAPE_STR_MAX];
  return gr_kernel_error(ctx, g->dtype == a->dtype ? GR_ERR_SHAPE : GR_ERR_DTYPE,
                         "grad is %s %s, %s holds %s %s", gr_dtype_name(g->dtype),
                         gr_shape_str(&g->shape, s1), a->owner.what, gr_dtype_name(a->dtype),
                         gr_shape_str(&a->shape, s2));
}

static int by_address(const void *x, const void *y) {
  uintptr_t a = (uintptr_t) * (accum *const *)x, b = (uintptr_t) * (accum *const *)y;
  return a < b ? -1 : a > b;
}

/* Adds the gradients g[i] computed at local step `local` to the n
 * accumulators as[i], all or none: under every accumulator's lock at once
 * (taken in address order), they are all dropped (and counted) when the
 * step is older than any one's, and otherwise all added; what adding
 * allocates is allocated before anything is added. A take_grad that
 * runs between two of them sees all of a worker's gradients or none. */
static gr_status apply_all(gr_kernel_ctx *ctx, accum **as, const gr_tensor *const *g, int n,
                           int64_t local) {
  accum **order = gr_alloc_array((size_t)n, sizeof *order);
  gr_tensor *fresh = calloc((size_t)n, sizeof *fresh); /* new sums, before the adds */
  take_waiter **served = calloc((size_t)n, sizeof *served);
  if (!order || !fresh || !served) {
    free(order), free(fresh), free(served);
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(order, as, sizeof *order * (size_t)n);
  qsort(order, (size_t)n, sizeof *order, by_address);
  gr_status st = GR_OK;
  for (int i = 1; i < n && st == GR_OK; i++)
    if (order[i] == order[i - 1])
      st = gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s is given twice", order[i]->owner.what);
  if (st != GR_OK) {
    free(order), free(fresh), free(served);
    return st;
  }
  for (int i = 0; i < n; i++) pthread_mutex_lock(&order[i]->owner.mu);
  bool stale = false;
  for (int i = 0; i < n; i++) stale |= local < as[i]->step;
  for (int i = 0; i < n && !stale && st == GR_OK; i++) {
    accum *a = as[i];
    if (a->count == 0) /* the first gradient: a copy of it is the sum */
      st = gr_tensor_copy(g[i], &fresh[i], ctx->err);
    else if (!gr_tensor_is_unique(&a->sum)) /* never shared: only this accumulator holds it */
      st = gr_tensor_copy(&a->sum, &fresh[i], ctx->err);
  }
  for (int i = 0; i < n && st == GR_OK; i++) {
    accum *a = as[i];
    if (stale) { /* a gradient of an older step: dropped, as TensorFlow does */
      a->dropped++;
      continue;
    }
    bool first = a->count == 0;
    if (fresh[i].buf) gr_tensor_release(&a->sum), a->sum = fresh[i], fresh[i] = gr_tensor_empty();
    int64_t m = first ? 0 : gr_tensor_num_elements(g[i]);
    if (a->dtype == GR_F32) {
      float *s = gr_tensor_data(&a->sum);
      const float *x = gr_tensor_data(g[i]);
      for (int64_t k = 0; k < m; k++) s[k] += x[k];
    } else {
      double *s = gr_tensor_data(&a->sum);
      const double *x = gr_tensor_data(g[i]);
      for (int64_t k = 0; k < m; k++) s[k] += x[k];
    }
    a->count++;
    served[i] = serve(a);
  }
  for (int i = n - 1; i >= 0; i--) pthread_mutex_unlock(&order[i]->owner.mu);
  for (int i = 0; i < n; i++) gr_tensor_release(&fresh[i]), finish(served[i]);
  free(order), free(fresh), free(served);
  return st;
}

static gr_status apply_kernel(gr_kernel_ctx *ctx) {
  accum *a = NULL;
  GR_TRY(kernel_accum(ctx, false, &a));
  const gr_tensor *g = &ctx->inputs[2];
  GR_TRY(check_grad(ctx, a, g));
  return apply_all(ctx, &a, &g, 1, int_of(&ctx->inputs[1]));
}

/* accumulator_apply_grads(local_step, handle_1..handle_n, grad_1..grad_n). */
static gr_status apply_grads_kernel(gr_kernel_ctx *ctx) {
  int n = (ctx->num_inputs - 1) / 2;
  accum **as = gr_alloc_array((size_t)n, sizeof *as);
  const gr_tensor **gs = gr_alloc_array((size_t)n, sizeof *gs);
  gr_status st =
      as && gs ? GR_OK : gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < n && st == GR_OK; i++) {
    const gr_tensor *h = &ctx->inputs[1 + i];
    char name[1024];
    size_t len = (size_t)gr_tensor_num_elements(h);
    if (len >= sizeof name) {
      st = gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "handle %d is too long", i);
      break;
    }
    memcpy(name, gr_tensor_data(h), len);
    name[len] = '\0';
    as[i] = gr_resource_mgr_find(ctx->step->resources, name, &accum_kind);
    gs[i] = &ctx->inputs[1 + n + i];
    if (!as[i])
      st = gr_kernel_error(ctx, GR_ERR_NOT_FOUND,
                           "accumulator '%s' is not in this task's container (run its accumulator "
                           "op first; the accumulators of one apply live on one task)",
                           name);
    else
      st = check_grad(ctx, as[i], gs[i]);
  }
  if (st == GR_OK) st = apply_all(ctx, as, gs, n, int_of(&ctx->inputs[0]));
  free(as), free(gs);
  return st;
}

static gr_status take_kernel(gr_kernel_ctx *ctx) {
  accum *a = NULL;
  GR_TRY(kernel_accum(ctx, false, &a));
  int64_t n = int_of(&ctx->inputs[1]);
  if (n < 1)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "num_required must be >= 1, got %lld",
                           (long long)n);
  take_waiter *w = calloc(1, sizeof *w);
  if (!w) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  *w = (take_waiter){.ctx = ctx, .n = n};
  pthread_mutex_lock(&a->owner.mu);
  bool now = !a->waiters && a->count >= n;
  if (now) {
    a->waiters = w;
    w = serve(a);
  }
  pthread_mutex_unlock(&a->owner.mu);
  if (now) {
    finish(w);
    return GR_OK;
  }
  uint64_t id = gr_wait_register(&a->owner);
  if (!id) {
    free(w);
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  w->id = id;
  gr_wait_arm(ctx, id);
  take_waiter *done = NULL;
  pthread_mutex_lock(&a->owner.mu);
  if (gr_wait_cancelled_locked(id)) {
    gr_wait_unregister(id);
    w->status = gr_kernel_error(ctx, GR_ERR_CANCELLED,
                                "the step was cancelled while it waited on %s", a->owner.what);
    done = w;
  } else {
    take_waiter **p = &a->waiters;
    while (*p) p = &(*p)->next;
    *p = w;
    done = serve(a);
  }
  pthread_mutex_unlock(&a->owner.mu);
  finish(done);
  return GR_OK;
}

static gr_status set_step_kernel(gr_kernel_ctx *ctx) {
  accum *a = NULL;
  GR_TRY(kernel_accum(ctx, false, &a));
  int64_t s = int_of(&ctx->inputs[1]);
  pthread_mutex_lock(&a->owner.mu);
  if (s > a->step) a->step = s;
  pthread_mutex_unlock(&a->owner.mu);
  return GR_OK;
}

static gr_status count_kernel(gr_kernel_ctx *ctx) {
  accum *a = NULL;
  GR_TRY(kernel_accum(ctx, false, &a));
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &(gr_shape){.rank = 0}, &o));
  pthread_mutex_lock(&a->owner.mu);
  *(int64_t *)gr_tensor_data(o) =
      ctx->node->op == &gr_op_accumulator_num_dropped ? a->dropped : a->count;
  pthread_mutex_unlock(&a->owner.mu);
  return GR_OK;
}

/* ---- op definitions ---------------------------------------------------------------------------
 */

static const gr_attr_spec acc_attrs[] = {{"accumulator", GR_ATTR_STRING, true, {0}},
                                         {"dtype", GR_ATTR_DTYPE, true, {0}},
                                         {"shape", GR_ATTR_SHAPE, true, {0}}};

#define ACC_FLAGS (GR_OP_STATEFUL | GR_OP_NO_GRADIENT)
#define ACC_OP(NAME, DOC, MIN, INPUTS, NOUT, SHAPE, KERNEL, FLAGS)                                 \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = MIN,                                               \
                                  .max_inputs = MIN,                                               \
                                  .input_names = INPUTS,                                           \
                                  .num_outputs = NOUT,                                             \
                                  .attrs = acc_attrs,                                              \
                                  .num_attrs = 3,                                                  \
                                  .shape_fn = SHAPE,                                               \
                                  .kernel = KERNEL,                                                \
                                  .flags = FLAGS};

ACC_OP(accumulator,
       "makes or finds the gradient accumulator attr accumulator (attrs dtype, shape) in the "
       "task's container; outputs its handle",
       0, NULL, 1, accumulator_shape, accumulator_kernel, ACC_FLAGS)
ACC_OP(accumulator_apply_grad,
       "adds grad, computed at local_step, to the accumulator; drops it (counted) when "
       "local_step is older than the accumulator's step",
       3, ((const char *const[]){"handle", "local_step", "grad"}), 0, apply_shape, apply_kernel,
       ACC_FLAGS | GR_OP_UPDATES)
const gr_op_def gr_op_accumulator_apply_grads = {
    .name = "accumulator_apply_grads",
    .doc = "adds grads 1..n, computed at local_step, to accumulators 1..n (inputs: local_step, n "
           "handles, n grads), all or none: all are dropped (counted) when local_step is older "
           "than any accumulator's step; the accumulators must live on one task",
    .min_inputs = 3,
    .max_inputs = -1,
    .input_names = (const char *const[]){"local_step", "handle", "grad"},
    .num_outputs = 0,
    .shape_fn = apply_grads_shape,
    .kernel = apply_grads_kernel,
    .flags = ACC_FLAGS | GR_OP_UPDATES};
ACC_OP(accumulator_take_grad,
       "waits for at least num_required gradients, outputs their mean, empties the accumulator "
       "and advances its step",
       2, ((const char *const[]){"handle", "num_required"}), 1, take_shape, take_kernel,
       ACC_FLAGS | GR_OP_ASYNC | GR_OP_UPDATES)
ACC_OP(accumulator_set_global_step,
       "raises the accumulator's step to new_global_step (never lowers it)", 2,
       ((const char *const[]){"handle", "new_global_step"}), 0, set_step_shape, set_step_kernel,
       ACC_FLAGS | GR_OP_UPDATES)
ACC_OP(accumulator_num_accumulated, "the number of gradients in the accumulator (i64)", 1,
       ((const char *const[]){"handle"}), 1, count_shape, count_kernel, ACC_FLAGS)
ACC_OP(accumulator_num_dropped,
       "the number of gradients the accumulator dropped as stale since it was made (i64)", 1,
       ((const char *const[]){"handle"}), 1, count_shape, count_kernel, ACC_FLAGS)
