/* Queue ops (TensorFlow's FIFOQueue): fifo_queue makes (or finds) the queue
 * named by attr queue in the task's resource container and outputs its
 * handle (the name, u8); queue_enqueue, queue_enqueue_many,
 * queue_dequeue, queue_dequeue_many, queue_close and queue_size take the
 * handle as input 0 and name the same queue. The queue itself is
 * queue.c. Builders put every op of a queue with its fifo_queue node, so
 * they run in the container that holds it (a ps task's, shared by every
 * client that names the queue there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/queue_internal.h"

extern const gr_op_def gr_op_queue_enqueue_many, gr_op_queue_dequeue_many;

/* ---- the spec in attrs ---------------------------------------------------------------------- */

/* attrs dtypes (list of dtype codes), shapes (for each component its rank
 * then its dims; rank -1: any shape; empty list: every shape any), capacity. */
static gr_status spec_of_node(const gr_node *n, gr_queue_spec *s, gr_error *err) {
  const gr_attr_value *dt = gr_node_attr(n, "dtypes"), *sh = gr_node_attr(n, "shapes");
  memset(s, 0, sizeof *s);
  s->capacity = gr_node_attr_int(n, "capacity", -1);
  int nc = dt && dt->type == GR_ATTR_INTS ? dt->ints.n : 0;
  if (nc < 1 || nc > GR_QUEUE_MAX_COMPONENTS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "a queue holds 1 to %d components (attr dtypes), not %d",
                        GR_QUEUE_MAX_COMPONENTS, nc);
  s->ncomp = nc;
  for (int c = 0; c < nc; c++) {
    int64_t d = dt->ints.v[c];
    if (d < 0 || d >= GR_DTYPE_COUNT)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "attr dtypes[%d]: %lld is not a dtype", c,
                          (long long)d);
    s->dtypes[c] = (gr_dtype)d;
    s->shapes[c].rank = -1;
  }
  int ns = sh && sh->type == GR_ATTR_INTS ? sh->ints.n : 0;
  for (int c = 0, k = 0; k < ns; c++) {
    if (c >= nc)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "attr shapes describes more than the %d components", nc);
    int64_t r = sh->ints.v[k++];
    if (r < -1 || r > GR_MAX_RANK || k + (r > 0 ? r : 0) > ns)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "attr shapes: bad rank %lld of component %d", (long long)r, c);
    s->shapes[c].rank = (int)r;
    for (int64_t i = 0; i < r; i++) {
      int64_t d = sh->ints.v[k++];
      if (d < -1)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "attr shapes: component %d has dim %lld",
                            c, (long long)d);
      s->shapes[c].dims[i] = d;
    }
  }
  return GR_OK;
}

static gr_status shape_spec(gr_shape_ctx *ctx, gr_queue_spec *s) {
  gr_error e;
  if (spec_of_node(ctx->node, s, &e) != GR_OK) return gr_shape_error(ctx, e.code, "%s", e.msg);
  return GR_OK;
}

static const char *queue_name(const gr_node *n) {
  return gr_node_attr_string(n, "queue", n->name);
}

/* The queue the kernel works on: found once per executor (ctx->state). */
static gr_status kernel_queue(gr_kernel_ctx *ctx, gr_queue **out) {
  if (*ctx->state) {
    *out = *ctx->state;
    return GR_OK;
  }
  gr_error e;
  if (gr_queue_find(ctx->step->resources, queue_name(ctx->node), out, &e) != GR_OK)
    return gr_kernel_error(ctx, e.code, "%s", e.msg);
  *ctx->state = *out;
  return GR_OK;
}

static gr_status check_handle(gr_shape_ctx *ctx) {
  if (ctx->num_inputs < 1 || ctx->in_dtypes[0] != GR_U8 || ctx->in_shapes[0].rank != 1)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "input 0 must be a queue handle (the output of fifo_queue)");
  return GR_OK;
}

/* ---- fifo_queue ------------------------------------------------------------------------------ */

static gr_status fifo_queue_shape(gr_shape_ctx *ctx) {
  gr_queue_spec s;
  GR_TRY(shape_spec(ctx, &s));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_U8;
  ctx->out_shapes[0] = (gr_shape){.rank = 1, .dims = {(int64_t)strlen(queue_name(ctx->node))}};
  return GR_OK;
}

static gr_status fifo_queue_kernel(gr_kernel_ctx *ctx) {
  const char *name = queue_name(ctx->node);
  if (!*ctx->state) {
    gr_queue_spec s;
    gr_queue *q;
    gr_error e;
    if (spec_of_node(ctx->node, &s, &e) != GR_OK ||
        gr_queue_lookup_or_create(ctx->step->resources, name, &s, &q, &e) != GR_OK)
      return gr_kernel_error(ctx, e.code, "%s", e.msg);
    *ctx->state = q;
  }
  gr_tensor *o;
  size_t len = strlen(name);
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_U8, &(gr_shape){.rank = 1, .dims = {(int64_t)len}}, &o));
  if (len) memcpy(gr_tensor_data(o), name, len);
  return GR_OK;
}

static const gr_attr_spec queue_attrs[] = {
    {"queue", GR_ATTR_STRING, true, {0}},
    {"dtypes", GR_ATTR_INTS, true, {0}},
    {"shapes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}},
    {"capacity", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = -1}}};
enum { NUM_QUEUE_ATTRS = sizeof queue_attrs / sizeof queue_attrs[0] };

#define QUEUE_FLAGS (GR_OP_STATEFUL | GR_OP_NO_GRADIENT)

const gr_op_def gr_op_fifo_queue = {
    .name = "fifo_queue",
    .doc = "makes or finds the FIFO queue attr queue (attrs dtypes, shapes, capacity; -1: "
           "unbounded) in the task's container; outputs its handle",
    .num_outputs = 1,
    .attrs = queue_attrs,
    .num_attrs = NUM_QUEUE_ATTRS,
    .shape_fn = fifo_queue_shape,
    .kernel = fifo_queue_kernel,
    .flags = QUEUE_FLAGS};

/* ---- enqueue, enqueue_many ---------------------------------------------------------------- */

static gr_status enqueue_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  gr_queue_spec s;
  GR_TRY(shape_spec(ctx, &s));
  bool many = ctx->node->op == &gr_op_queue_enqueue_many;
  if (ctx->num_inputs - 1 != s.ncomp)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "queue '%s' holds %d components, %d given",
                          queue_name(ctx->node), s.ncomp, ctx->num_inputs - 1);
  int64_t n = -1;
  for (int c = 0; c < s.ncomp; c++) {
    const gr_shape *in = &ctx->in_shapes[c + 1];
    if (ctx->in_dtypes[c + 1] != s.dtypes[c])
      return gr_shape_error(ctx, GR_ERR_DTYPE, "component %d is %s, queue '%s' holds %s", c,
                            gr_dtype_name(ctx->in_dtypes[c + 1]), queue_name(ctx->node),
                            gr_dtype_name(s.dtypes[c]));
    gr_shape es = *in;
    if (many && in->rank >= 0) {
      if (in->rank == 0)
        return gr_shape_error(ctx, GR_ERR_SHAPE,
                              "component %d is a scalar: enqueue_many needs an axis 0 of elements",
                              c);
      if (n >= 0 && in->dims[0] >= 0 && in->dims[0] != n)
        return gr_shape_error(ctx, GR_ERR_SHAPE,
                              "component %d has %lld elements along axis 0, an earlier one %lld", c,
                              (long long)in->dims[0], (long long)n);
      if (in->dims[0] >= 0) n = in->dims[0];
      es.rank--;
      memmove(es.dims, es.dims + 1, sizeof(int64_t) * (size_t)es.rank);
    }
    if (s.shapes[c].rank >= 0 && es.rank >= 0 && !gr_shape_compatible(&es, &s.shapes[c])) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_shape_error(
          ctx, GR_ERR_SHAPE, "component %d has element shape %s, queue '%s' holds %s", c,
          gr_shape_str(&es, a), queue_name(ctx->node), gr_shape_str(&s.shapes[c], b));
    }
  }
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status enqueue_kernel(gr_kernel_ctx *ctx) {
  gr_queue *q;
  GR_TRY(kernel_queue(ctx, &q));
  if (ctx->num_inputs - 1 != gr_queue_get_spec(q)->ncomp)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "queue '%s' holds %d components, %d given",
                           queue_name(ctx->node), gr_queue_get_spec(q)->ncomp, ctx->num_inputs - 1);
  return gr_queue_do_enqueue(q, ctx, ctx->inputs + 1, ctx->node->op == &gr_op_queue_enqueue_many);
}

#define ASYNC_QUEUE_FLAGS (QUEUE_FLAGS | GR_OP_ASYNC)

#define QUEUE_OP(NAME, DOC, MIN, INPUTS, NOUT, ATTRS, NATTRS, SHAPE, KERNEL, FLAGS)                \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = MIN,                                               \
                                  .max_inputs = MIN == 2 ? 1 + GR_QUEUE_MAX_COMPONENTS : MIN,      \
                                  .input_names = INPUTS,                                           \
                                  .num_outputs = NOUT,                                             \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = NATTRS,                                             \
                                  .shape_fn = SHAPE,                                               \
                                  .kernel = KERNEL,                                                \
                                  .flags = FLAGS};
#define ENQ_INPUTS ((const char *const[]){"handle", "components"})
#define HANDLE     ((const char *const[]){"handle"})

QUEUE_OP(queue_enqueue,
         "adds one element (one tensor per component) to the queue; waits while it is full", 2,
         ENQ_INPUTS, 0, queue_attrs, NUM_QUEUE_ATTRS, enqueue_shape, enqueue_kernel,
         ASYNC_QUEUE_FLAGS)
QUEUE_OP(queue_enqueue_many,
         "adds the elements along axis 0 of the components to the queue, in order; waits while "
         "it is full",
         2, ENQ_INPUTS, 0, queue_attrs, NUM_QUEUE_ATTRS, enqueue_shape, enqueue_kernel,
         ASYNC_QUEUE_FLAGS)

/* ---- dequeue, dequeue_many ----------------------------------------------------------------- */

static gr_status dequeue_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  gr_queue_spec s;
  GR_TRY(shape_spec(ctx, &s));
  bool many = ctx->node->op == &gr_op_queue_dequeue_many;
  int64_t n = gr_node_attr_int(ctx->node, "n", 1);
  if (many && n < 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "cannot dequeue %lld elements",
                          (long long)n);
  ctx->num_outputs = s.ncomp;
  for (int c = 0; c < s.ncomp; c++) {
    ctx->out_dtypes[c] = s.dtypes[c];
    gr_shape sh = s.shapes[c];
    if (many) {
      if (sh.rank >= GR_MAX_RANK)
        return gr_shape_error(ctx, GR_ERR_SHAPE, "component %d of rank %d cannot be stacked", c,
                              sh.rank);
      if (sh.rank >= 0) {
        memmove(sh.dims + 1, sh.dims, sizeof(int64_t) * (size_t)sh.rank);
        sh.rank++;
        sh.dims[0] = n;
      }
    }
    ctx->out_shapes[c] = sh;
  }
  return GR_OK;
}

static gr_status dequeue_kernel(gr_kernel_ctx *ctx) {
  gr_queue *q;
  GR_TRY(kernel_queue(ctx, &q));
  bool many = ctx->node->op == &gr_op_queue_dequeue_many;
  return gr_queue_do_dequeue(q, ctx, gr_node_attr_int(ctx->node, "n", 1), many);
}

static const gr_attr_spec dequeue_many_attrs[] = {
    {"queue", GR_ATTR_STRING, true, {0}},
    {"dtypes", GR_ATTR_INTS, true, {0}},
    {"shapes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}},
    {"capacity", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = -1}},
    {"n", GR_ATTR_INT, true, {0}}};

QUEUE_OP(queue_dequeue,
         "removes the oldest element (one output per component); waits while the queue is "
         "empty; out of range when it is closed and empty",
         1, HANDLE, -1, queue_attrs, NUM_QUEUE_ATTRS, dequeue_shape, dequeue_kernel,
         ASYNC_QUEUE_FLAGS)
QUEUE_OP(queue_dequeue_many,
         "removes the n oldest elements, stacked along a new axis 0; waits for n; out of range "
         "when the queue is closed with fewer",
         1, HANDLE, -1, dequeue_many_attrs, 5, dequeue_shape, dequeue_kernel, ASYNC_QUEUE_FLAGS)

/* ---- close, size ------------------------------------------------------------------------------
 */

static gr_status close_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status close_kernel(gr_kernel_ctx *ctx) {
  gr_queue *q;
  GR_TRY(kernel_queue(ctx, &q));
  gr_queue_do_close(q, gr_node_attr_bool(ctx->node, "cancel_pending_enqueues", false));
  return GR_OK;
}

static const gr_attr_spec close_attrs[] = {
    {"queue", GR_ATTR_STRING, true, {0}},
    {"cancel_pending_enqueues", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};

QUEUE_OP(queue_close,
         "closes the queue: later enqueues fail, dequeues fail once it has too few elements "
         "(cancel_pending_enqueues: waiting enqueues fail too)",
         1, HANDLE, 0, close_attrs, 2, close_shape, close_kernel, QUEUE_FLAGS)

static gr_status size_shape(gr_shape_ctx *ctx) {
  GR_TRY(check_handle(ctx));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status size_kernel(gr_kernel_ctx *ctx) {
  gr_queue *q;
  GR_TRY(kernel_queue(ctx, &q));
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &(gr_shape){.rank = 0}, &o));
  *(int64_t *)gr_tensor_data(o) = gr_queue_count(q);
  return GR_OK;
}

static const gr_attr_spec size_attrs[] = {{"queue", GR_ATTR_STRING, true, {0}}};

QUEUE_OP(queue_size, "the number of elements in the queue (i64)", 1, HANDLE, 1, size_attrs, 1,
         size_shape, size_kernel, QUEUE_FLAGS)
