/* A 1-D tensor assembled from pieces as they arrive, for the ring
 * all-reduce's result (parallel.c): assemble_buffer makes the uninitialised
 * result, one assemble_put per piece copies it in when it is there, and
 * assemble (the pieces as inputs, every put as a control input) gives the
 * buffer once all are in. A concat of the pieces would copy them all in
 * one go after the last one arrived; the puts copy each while the next is
 * still on the wire.
 *
 * The put writes into its input: it refuses a buffer that is not an
 * assemble_buffer's output, so it cannot change a tensor anything else
 * reads. assemble_buffer is stateful (never merged with another or folded
 * into a constant: each step and each use gets its own buffer). */
#include <stdlib.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const gr_attr_spec buffer_attrs[] = {{"dtype", GR_ATTR_DTYPE, true, {0}},
                                            {"size", GR_ATTR_INT, true, {0}}};

static gr_status buffer_shape(gr_shape_ctx *ctx) {
  int64_t n = gr_node_attr_int(ctx->node, "size", -1);
  if (n < 0) return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr 'size' must be >= 0");
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = gr_shape_make(1, (int64_t[]){n});
  return GR_OK;
}

static gr_status buffer_kernel(gr_kernel_ctx *ctx) {
  gr_shape s = gr_shape_make(1, (int64_t[]){gr_node_attr_int(ctx->node, "size", 0)});
  gr_tensor *o;
  return gr_kernel_alloc_output(ctx, 0, gr_node_attr_dtype(ctx->node, "dtype", GR_F32), &s, &o);
}

const gr_op_def gr_op_assemble_buffer = {
    .name = "assemble_buffer",
    .doc = "an uninitialised 1-D tensor of attrs dtype and size that assemble_put fills "
           "(the ring all-reduce's result)",
    .num_outputs = 1,
    .attrs = buffer_attrs,
    .num_attrs = 2,
    .shape_fn = buffer_shape,
    .cost_fn = gr_cost_fn_free,
    .kernel = buffer_kernel,
    .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

static const char *const put_names[] = {"buffer", "piece"};
static const gr_attr_spec put_attrs[] = {{"offset", GR_ATTR_INT, true, {0}}};

static gr_status put_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  GR_TRY(gr_shape_check_rank(ctx, 0, 1));
  GR_TRY(gr_shape_check_rank(ctx, 1, 1));
  ctx->num_outputs = 0;
  return GR_OK;
}

static gr_status put_kernel(gr_kernel_ctx *ctx) {
  const gr_node *src = ctx->node->inputs[0].node;
  if (src->op != &gr_op_assemble_buffer)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "writes only into an assemble_buffer, not into '%s' (op %s)", src->name,
                           src->op->name);
  const gr_tensor *b = &ctx->inputs[0], *p = &ctx->inputs[1];
  int64_t off = gr_node_attr_int(ctx->node, "offset", 0), n = gr_tensor_num_elements(p);
  if (b->dtype != p->dtype || off < 0 || off > b->shape.dims[0] || n > b->shape.dims[0] - off)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,
                           "a piece of %lld elements at %lld does not fit in %lld", (long long)n,
                           (long long)off, (long long)b->shape.dims[0]);
  size_t es = gr_dtype_size(p->dtype);
  if (n > 0)
    memcpy((char *)gr_tensor_data(b) + (size_t)off * es, gr_tensor_data(p), (size_t)n * es);
  return GR_OK;
}

static void put_cost(const gr_node *n, gr_cost *out) {
  const gr_shape *s = &n->inputs[1].node->out_shapes[n->inputs[1].index];
  int64_t k = gr_shape_num_elements(s);
  out->flops = 0;
  out->bytes = 2.0 * (double)(k > 0 ? k : 0) *
               (double)gr_dtype_size(n->inputs[1].node->out_dtypes[n->inputs[1].index]);
}

const gr_op_def gr_op_assemble_put = {.name = "assemble_put",
                                      .doc = "copies piece into buffer (an assemble_buffer) at "
                                             "element attr offset",
                                      .min_inputs = 2,
                                      .max_inputs = 2,
                                      .input_names = put_names,
                                      .num_outputs = 0,
                                      .attrs = put_attrs,
                                      .num_attrs = 1,
                                      .shape_fn = put_shape,
                                      .cost_fn = put_cost,
                                      .kernel = put_kernel,
                                      .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

static const char *const assemble_names[] = {"buffer", "pieces"};

static gr_status assemble_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_rank(ctx, 0, 1));
  for (int i = 1; i < ctx->num_inputs; i++) GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->in_shapes[0];
  return GR_OK;
}

/* The pieces are inputs for the order and the gradient only: the puts
 * (control inputs) have copied them. */
static gr_status assemble_kernel(gr_kernel_ctx *ctx) {
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

/* Piece i's gradient: its part of the result's, in order. */
static gr_status assemble_grad(gr_grad_ctx *c) {
  int64_t at = 0;
  for (int i = 1; i < c->node->num_inputs; i++) {
    const gr_output *in = &c->node->inputs[i];
    int64_t n = gr_shape_num_elements(&in->node->out_shapes[in->index]);
    if (n < 0)
      return gr_graph_set_errorf(c->graph, GR_ERR_UNIMPLEMENTED,
                                 "gradient of '%s': a piece of unknown size", c->node->name);
    c->dinputs[i] = gr_slice(c->graph, c->grads[0], &at, &n, 1);
    at += n;
  }
  return GR_OK;
}

const gr_op_def gr_op_assemble = {.name = "assemble",
                                  .doc = "buffer once the assemble_put of each piece (control "
                                         "inputs) has copied it in; the pieces, in order, are "
                                         "inputs for the order and the gradient",
                                  .min_inputs = 1,
                                  .max_inputs = -1,
                                  .input_names = assemble_names,
                                  .num_outputs = 1,
                                  .shape_fn = assemble_shape,
                                  .cost_fn = gr_cost_fn_free,
                                  .kernel = assemble_kernel,
                                  .grad_fn = assemble_grad};

gr_output gr_assemble(gr_graph *g, const gr_output *pieces, int n) {
  if (n < 1 || !pieces[0].node)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "assemble: no pieces");
  int64_t total = 0;
  for (int i = 0; i < n; i++)
    total += gr_shape_num_elements(&pieces[i].node->out_shapes[pieces[i].index]);
  gr_attr ba[] = {gr_attr_dtype("dtype", pieces[0].node->out_dtypes[pieces[0].index]),
                  gr_attr_int("size", total)};
  gr_output buf = gr_ops_build(g, "assemble_buffer", NULL, NULL, 0, ba, 2);
  gr_output *in = gr_alloc_array((size_t)n + 1, sizeof *in);
  gr_node **puts = gr_alloc_array((size_t)n + 1, sizeof *puts);
  if (!in || !puts) {
    free(in), free(puts);
    return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  in[0] = buf;
  int64_t at = 0;
  for (int i = 0; i < n && buf.node; i++) {
    gr_attr pa = gr_attr_int("offset", at);
    gr_output put = gr_ops_build(g, "assemble_put", NULL, (gr_output[]){buf, pieces[i]}, 2, &pa, 1);
    puts[i] = put.node;
    in[1 + i] = pieces[i];
    at += gr_shape_num_elements(&pieces[i].node->out_shapes[pieces[i].index]);
  }
  gr_output r = buf.node && !gr_graph_error(g)
                    ? gr_ops_build(g, "assemble", NULL, in, n + 1, NULL, 0)
                    : (gr_output){NULL, 0};
  for (int i = 0; i < n && r.node; i++)
    if (gr_graph_add_control_input(g, r.node, puts[i]) != GR_OK) r = (gr_output){NULL, 0};
  free(in), free(puts);
  return r;
}
