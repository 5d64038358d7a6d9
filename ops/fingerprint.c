/* fingerprint: XXH64 of a tensor's bytes as an i64 scalar (seed 0), for
 * checking that copies of a tensor held on different tasks are equal bit
 * for bit without moving them (gr_mirror_spread, parallel.c): each task
 * hashes its own copy and only the 8-byte hashes travel. Equal bits give
 * equal fingerprints; different bits differ but for a collision (2^-64). */
#include <xxhash.h>

#include "core/core_engine.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static gr_status fingerprint_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status fingerprint_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  gr_tensor *o;
  gr_shape scalar = gr_shape_scalar();
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &scalar, &o));
  size_t bytes = (size_t)gr_tensor_num_elements(x) * gr_dtype_size(x->dtype);
  *(int64_t *)gr_tensor_data(o) = (int64_t)XXH64(gr_tensor_data(x), bytes, 0);
  return GR_OK;
}

/* a pass over the bytes */
static void fingerprint_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *s = &n->inputs[0].node->out_shapes[n->inputs[0].index];
  int64_t e = gr_shape_num_elements(s);
  double bytes =
      (e > 0 ? (double)e : 1.0) * gr_dtype_size(n->inputs[0].node->out_dtypes[n->inputs[0].index]);
  *c = (gr_cost){.flops = bytes / 4, .bytes = bytes + 8};
}

static const char *const x_name[] = {"x"};
const gr_op_def gr_op_fingerprint = {.name = "fingerprint",
                                     .doc = "XXH64 of x's bytes (seed 0) as an i64 scalar: equal "
                                            "bits, equal fingerprints",
                                     .min_inputs = 1,
                                     .max_inputs = 1,
                                     .input_names = x_name,
                                     .num_outputs = 1,
                                     .shape_fn = fingerprint_shape,
                                     .cost_fn = fingerprint_cost,
                                     .kernel = fingerprint_kernel,
                                     .flags = GR_OP_NO_GRADIENT};
