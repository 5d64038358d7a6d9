/* The transfer ops that the partitioner inserts where an edge crosses
 * devices: _send hands its input (or, for a control edge, nothing) to the
 * step's rendezvous under its key; _recv waits for it without blocking a
 * thread. Both run while dead so that deadness crosses devices. Registered
 * with the core registry (gr_op_registry_find finds them) so that core's
 * partitioner can use them without the ops layer. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/executor.h"
#include "core/gr_graph.h"
#include "core/gr_op.h"
#include "core/gr_rendezvous.h"
#include "core/transfer_internal.h"

/* Rendezvous keys are "src_device;incarnation;dst_device;edge_name;frame:iter".
 * The part up to "frame:iter" is built once per node, with what else the
 * kernels read of the node's attrs (ctx->state). */
typedef struct xfer_state {
  bool control;
  size_t len;
  char prefix[];
} xfer_state;

static const xfer_state *state_of(gr_kernel_ctx *ctx) {
  _Atomic(xfer_state *) *slot = (_Atomic(xfer_state *) *)ctx->state;
  xfer_state *x = atomic_load_explicit(slot, memory_order_acquire);
  if (x) return x;
  const gr_node *n = ctx->node;
  const char *sd = gr_node_attr_string(n, "send_device", ""),
             *rd = gr_node_attr_string(n, "recv_device", ""),
             *tn = gr_node_attr_string(n, "tensor_name", "");
  unsigned long long inc = (unsigned long long)gr_node_attr_int(n, "incarnation", 0);
  int len = snprintf(NULL, 0, "%s;%016llx;%s;%s;", sd, inc, rd, tn);
  if (len < 0) return NULL;
  xfer_state *mine = malloc(sizeof *mine + (size_t)len + 1);
  if (!mine) return NULL;
  mine->control = gr_node_attr_bool(n, "control", false);
  mine->len = (size_t)len;
  snprintf(mine->prefix, (size_t)len + 1, "%s;%016llx;%s;%s;", sd, inc, rd, tn);
  xfer_state *expected = NULL;
  if (!atomic_compare_exchange_strong_explicit(slot, &expected, mine, memory_order_acq_rel,
                                               memory_order_acquire)) {
    free(mine);
    return expected;
  }
  return mine;
}

/* Writes the full key into buf (or a malloc'd buffer when long: *heap). */
static const char *make_key(gr_kernel_ctx *ctx, char *buf, size_t cap, char **heap) {
  *heap = NULL;
  const xfer_state *x = state_of(ctx);
  if (!x) return NULL;
  const char *frame = ctx->frame_name ? ctx->frame_name : "";
  size_t flen = strlen(frame);
  char digits[24];
  int nd = 0;
  uint64_t it = ctx->iteration < 0 ? 0 : (uint64_t)ctx->iteration;
  do digits[nd++] = (char)('0' + it % 10);
  while ((it /= 10) != 0);
  size_t total = x->len + flen + 1 + (size_t)nd;
  char *k = buf;
  if (total >= cap && !(k = *heap = malloc(total + 1))) return NULL;
  memcpy(k, x->prefix, x->len);
  memcpy(k + x->len, frame, flen);
  k[x->len + flen] = ':';
  for (int i = 0; i < nd; i++) k[x->len + flen + 1 + (size_t)i] = digits[nd - 1 - i];
  k[total] = '\0';
  return k;
}

static void free_state(void *state) {
  free(state);
}

static const gr_attr_spec transfer_attrs[] = {
    {"tensor_name", GR_ATTR_STRING, true, {0}},
    {"send_device", GR_ATTR_STRING, true, {0}},
    {"recv_device", GR_ATTR_STRING, true, {0}},
    {"incarnation", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    /* _recv only (ignored by _send): */
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_BOOL}},
    {"shape", GR_ATTR_SHAPE, false, {.type = GR_ATTR_SHAPE, .shape = {1, {0}}}},
    {"may_be_dead", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    {"control", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};
enum { NUM_TRANSFER_ATTRS = sizeof transfer_attrs / sizeof transfer_attrs[0] };

static gr_status no_rendezvous(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                         "%s runs only in a partitioned multi-device step (no rendezvous)",
                         ctx->node->op->name);
}

/* ---- _send ------------------------------------------------------------------ */

static gr_status send_kernel(gr_kernel_ctx *ctx) {
  if (!ctx->step->rendezvous) return no_rendezvous(ctx);
  char buf[512], *heap;
  const char *key = make_key(ctx, buf, sizeof buf, &heap);
  if (!key) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  const gr_tensor *v = ctx->num_inputs ? &ctx->inputs[0] : NULL;
  gr_status s = gr_rendezvous_send(ctx->step->rendezvous, key, v, ctx->dead, ctx->err);
  free(heap);
  return s;
}

const gr_op_def gr_op__send = {.name = "_send",
                               .doc = "internal: hands x to the rendezvous (inserted by the "
                                      "partitioner)",
                               .min_inputs = 0,
                               .max_inputs = 1,
                               .input_names = (const char *[]){"x"},
                               .num_outputs = 0,
                               .attrs = transfer_attrs,
                               .num_attrs = NUM_TRANSFER_ATTRS,
                               .shape_fn = gr_shape_fn_scalar_none,
                               .cost_fn = gr_cost_fn_free,
                               .kernel = send_kernel,
                               .flags = GR_OP_STATEFUL | GR_OP_TRANSFER | GR_OP_NO_GRADIENT,
                               .state_free = free_state};

/* ---- _recv ------------------------------------------------------------------ */

static void recv_done(void *arg, gr_status status, const gr_error *err, gr_tensor *value,
                      bool dead) {
  gr_kernel_ctx *ctx = arg;
  const gr_node *n = ctx->node;
  if (status != GR_OK) {
    if (ctx->err && err) *ctx->err = *err;
    gr_kernel_done(ctx, status);
    return;
  }
  if (dead) {
    ctx->dead = true;
    ctx->dead_outputs = 1;
    gr_kernel_done(ctx, GR_OK);
    return;
  }
  if (state_of(ctx)->control) { /* built by recv_kernel's make_key */
    if (value && value->buf) gr_tensor_release(value);
    gr_tensor *out;
    gr_status s = gr_kernel_alloc_output(ctx, 0, GR_BOOL, &(gr_shape){1, {0}}, &out);
    gr_kernel_done(ctx, s);
    return;
  }
  if (!value || !value->buf || value->dtype != n->out_dtypes[0] ||
      !gr_shape_compatible(&value->shape, &n->out_shapes[0])) {
    if (value && value->buf) gr_tensor_release(value);
    gr_kernel_done(
        ctx, gr_kernel_error(ctx, GR_ERR_INTERNAL, "received a value of the wrong dtype or shape"));
    return;
  }
  gr_tensor_release(&ctx->outputs[0]);
  ctx->outputs[0] = *value; /* the reference moves into the output */
  gr_kernel_done(ctx, GR_OK);
}

/* The executor cancelled its step: abort the whole step's rendezvous, which
 * fails this Recv and every other device's. */
static void recv_cancel(void *arg) {
  gr_rendezvous_abort(arg, GR_ERR_CANCELLED, "the step was cancelled on another device");
}

static gr_status recv_kernel(gr_kernel_ctx *ctx) {
  gr_rendezvous *r = ctx->step->rendezvous;
  if (!r) return no_rendezvous(ctx);
  char buf[512], *heap;
  const char *key = make_key(ctx, buf, sizeof buf, &heap);
  if (!key) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_kernel_on_cancel(ctx, recv_cancel, r);
  gr_rendezvous_recv(r, key, recv_done, ctx);
  free(heap);
  return GR_OK;
}

static gr_status recv_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_BOOL);
  ctx->out_shapes[0] = gr_node_attr(ctx->node, "shape")->shape;
  return GR_OK;
}

const gr_op_def gr_op__recv = {.name = "_recv",
                               .doc = "internal: waits for the value its _send hands over "
                                      "(inserted by the partitioner)",
                               .num_outputs = 1,
                               .attrs = transfer_attrs,
                               .num_attrs = NUM_TRANSFER_ATTRS,
                               .shape_fn = recv_shape,
                               .cost_fn = gr_cost_fn_free,
                               .kernel = recv_kernel,
                               .flags = GR_OP_STATEFUL | GR_OP_TRANSFER | GR_OP_ASYNC |
                                        GR_OP_NO_GRADIENT,
                               .state_free = free_state};
