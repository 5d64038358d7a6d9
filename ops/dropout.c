/* dropout(x): in training (attr training, default true) each element is
 * kept with probability 1 - rate and scaled by 1 / (1 - rate), else 0; the
 * draw of element i is a pure function of (session seed ^ attr seed, node
 * name, step, i) (gr_ops_node_rng), so it never depends on scheduling and a
 * resumed run draws the same masks. Output 1 is the mask (0 or the scale):
 * the gradient is dy * mask. At inference y = x (no copy), mask = ones. */
#include <math.h>
#include <stdint.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

static gr_status dropout_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  double rate = gr_node_attr_float(ctx->node, "rate", 0.5);
  if (!(rate >= 0 && rate < 1))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr 'rate' must be in [0, 1), got %g",
                          rate);
  ctx->num_outputs = 2;
  ctx->out_dtypes[0] = ctx->out_dtypes[1] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->out_shapes[1] = ctx->in_shapes[0];
  return GR_OK;
}

/* Element i is kept when 32-bit word i of the node's stream (word i & 3
 * of Philox block i / 4) is >= rate * 2^32: one block per 4 elements.
 * Blocks are made LANES at a time by philox_lanes, gr_rng_block's rounds
 * over arrays (the same integers: vector units do them side by side),
 * their words in element order. */
enum { LANES = 64 };

/* 32-bit values in 64-bit lanes: the products are then single vector
 * multiplies of the low halves, and 64 lanes keep the rounds' chains of
 * dependent operations side by side. */
GR_VEC_CLONES
static void philox_lanes(const gr_rng *r, uint64_t first, uint32_t out[4 * LANES]) {
  uint64_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
  for (int l = 0; l < LANES; l++) {
    uint64_t b = first + (uint64_t)l;
    c0[l] = b & 0xFFFFFFFFu, c1[l] = b >> 32, c2[l] = r->ctr_hi[0], c3[l] = r->ctr_hi[1];
  }
  uint64_t k0 = r->key[0], k1 = r->key[1];
  for (int round = 0; round < 10; round++) {
    for (int l = 0; l < LANES; l++) {
      uint64_t p0 = 0xD2511F53u * c0[l], p1 = 0xCD9E8D57u * c2[l];
      uint64_t n0 = (p1 >> 32) ^ c1[l] ^ k0, n2 = (p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = p1 & 0xFFFFFFFFu, c3[l] = p0 & 0xFFFFFFFFu, c0[l] = n0, c2[l] = n2;
    }
    k0 = (k0 + 0x9E3779B9u) & 0xFFFFFFFFu;
    k1 = (k1 + 0xBB67AE85u) & 0xFFFFFFFFu;
  }
  for (int l = 0; l < LANES; l++) {
    out[4 * l] = (uint32_t)c0[l], out[4 * l + 1] = (uint32_t)c1[l];
    out[4 * l + 2] = (uint32_t)c2[l], out[4 * l + 3] = (uint32_t)c3[l];
  }
}

/* thr <= 2^32 - 1 here (rate * 2^32 rounded up, all dropped above). */
#define DROPOUT_LOOP(T)                                                                            \
  do {                                                                                             \
    const T *x = gr_tensor_data(X);                                                                \
    T *y = Y ? (T *)gr_tensor_data(Y) : NULL, *m = gr_tensor_data(M), sc = (T)scale;               \
    uint64_t t64 = (uint64_t)ceil(rate * 4294967296.0);                                            \
    uint32_t thr = t64 > UINT32_MAX ? UINT32_MAX : (uint32_t)t64, w[4 * LANES];                    \
    T keep = t64 > UINT32_MAX ? (T)0 : sc;                                                         \
    for (int64_t i0 = 0; i0 < n; i0 += 4 * LANES) {                                                \
      int64_t len = n - i0 < 4 * LANES ? n - i0 : 4 * LANES;                                       \
      if (!training) {                                                                             \
        for (int64_t i = 0; i < len; i++) m[i0 + i] = sc;                                          \
        continue;                                                                                  \
      }                                                                                            \
      philox_lanes(&r, (uint64_t)i0 >> 2, w);                                                      \
      for (int64_t i = 0; i < len; i++) {                                                          \
        T k = w[i] >= thr ? keep : (T)0;                                                           \
        m[i0 + i] = k;                                                                             \
        y[i0 + i] = x[i0 + i] * k;                                                                 \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static gr_status dropout_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0];
  if (X->dtype != GR_F32 && X->dtype != GR_F64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(X->dtype));
  bool training = gr_node_attr_bool(ctx->node, "training", true);
  double rate = gr_node_attr_float(ctx->node, "rate", 0.5);
  double scale = training ? 1.0 / (1.0 - rate) : 1.0;
  gr_tensor *Y = NULL, *M;
  if (training)
    GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &X->shape, &Y));
  else
    gr_kernel_set_output(ctx, 0, X);
  GR_TRY(gr_kernel_alloc_output(ctx, 1, X->dtype, &X->shape, &M));
  int64_t n = gr_tensor_num_elements(X);
  gr_rng r = gr_ops_node_rng(ctx);
  if (X->dtype == GR_F32)
    DROPOUT_LOOP(float);
  else
    DROPOUT_LOOP(double);
  return GR_OK;
}

/* The mask does not depend on x: no gradient through output 1. */
static gr_status dropout_grad(gr_grad_ctx *c) {
  if (c->grads[0].node) c->dinputs[0] = gr_mul(c->graph, c->grads[0], gr_grad_y(c, 1));
  return GR_OK;
}

static void dropout_cost(const gr_node *n, gr_cost *c) {
  int64_t k = gr_shape_num_elements(&n->out_shapes[0]);
  double e = k > 0 ? (double)k : 1;
  c->flops = 22 * e;
  c->bytes = 3 * e * (double)gr_dtype_size(n->out_dtypes[0]);
}

static const gr_attr_spec dropout_attrs[] = {
    {"rate", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.5}},
    {"seed", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    {"training", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}}};

const gr_op_def gr_op_dropout = {
    .name = "dropout",
    .doc = "training: x * mask, mask 1 / (1 - rate) with probability 1 - rate else 0, drawn "
           "per (seed, node, step, element); else x. Outputs y, mask; gradient dy * mask",
    .min_inputs = 1,
    .max_inputs = 1,
    .input_names = (const char *const[]){"x"},
    .num_outputs = 2,
    .attrs = dropout_attrs,
    .num_attrs = 3,
    .shape_fn = dropout_shape,
    .cost_fn = dropout_cost,
    .kernel = dropout_kernel,
    .grad_fn = dropout_grad,
    .flags = GR_OP_STATEFUL};

gr_output gr_dropout(gr_graph *g, gr_output x, double rate, int64_t seed, bool training) {
  gr_attr at[3] = {gr_attr_float("rate", rate), gr_attr_int("seed", seed),
                   gr_attr_bool("training", training)};
  return gr_ops_build(g, "dropout", NULL, &x, 1, at, 3);
}
