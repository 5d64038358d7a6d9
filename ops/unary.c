/* Elementwise unary ops (neg, abs, exp, log, sqrt, square, logical_not),
 * cast between any two dtypes, select (cond ? a : b with three-way NumPy
 * broadcasting) and add_n (sum of same-shaped tensors). Integer arithmetic
 * wraps around (computed in unsigned); float-to-integer casts saturate and
 * map NaN to 0, so no conversion is undefined. */
#include <math.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

static const char *const x_names[] = {"x"};

/* ---- elementwise unary ------------------------------------------------------ */

#define DEFINE_UNARY(NAME, MASK, DOC, EF, ED, EI32, EI64, EU8, EB)                                 \
  GR_DEFINE_UNARY_OP(NAME, MASK, DOC, EF, ED, EI32, EI64, EU8, EB, NAME##_grad, 0)

/* Wrapping integer arithmetic through the unsigned type U. */
#define WNEG(T, U, x)    ((T)((U)0 - (U)(x)))
#define WABS(T, U, x)    ((x) < 0 ? WNEG(T, U, x) : (x))
#define WSQUARE(T, U, x) ((T)((U)(x) * (U)(x)))

/* ---- gradients of the elementwise ops ------------------------------------------------ */

static gr_status neg_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_neg(c->graph, c->grads[0]);
  return GR_OK;
}
/* sign(x) * dy, with 0 at x == 0 */
static gr_status abs_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output x = gr_grad_x(c, 0), dy = c->grads[0], zero = gr_grad_scalar(c, x, 0);
  gr_output neg_or_zero = gr_select(g, gr_less(g, x, zero), gr_neg(g, dy), gr_zeros_like(g, dy));
  c->dinputs[0] = gr_select(g, gr_greater(g, x, zero), dy, neg_or_zero);
  return GR_OK;
}
static gr_status exp_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_mul(c->graph, c->grads[0], gr_grad_y(c, 0));
  return GR_OK;
}
static gr_status log_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_div(c->graph, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}
static gr_status sqrt_grad(gr_grad_ctx *c) { /* dy / (2 sqrt(x)) */
  gr_output y = gr_grad_y(c, 0);
  c->dinputs[0] = gr_div(c->graph, c->grads[0], gr_mul(c->graph, y, gr_grad_scalar(c, y, 2)));
  return GR_OK;
}
static gr_status square_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0);
  c->dinputs[0] = gr_mul(c->graph, c->grads[0], gr_mul(c->graph, x, gr_grad_scalar(c, x, 2)));
  return GR_OK;
}

DEFINE_UNARY(neg, GR_DT_NUMERIC, "-x elementwise (integers wrap)", -x, -x,
             WNEG(int32_t, uint32_t, x), WNEG(int64_t, uint64_t, x), WNEG(uint8_t, unsigned, x), x)
DEFINE_UNARY(abs, GR_DT_NUMERIC, "|x| elementwise (integers wrap); gradient 0 at x = 0", fabsf(x),
             fabs(x), WABS(int32_t, uint32_t, x), WABS(int64_t, uint64_t, x), x, x)
DEFINE_UNARY(exp, GR_DT_FLOAT, "e ** x elementwise", expf(x), exp(x), x, x, x, x)
DEFINE_UNARY(log, GR_DT_FLOAT, "natural logarithm elementwise", logf(x), log(x), x, x, x, x)
DEFINE_UNARY(sqrt, GR_DT_FLOAT, "square root elementwise", sqrtf(x), sqrt(x), x, x, x, x)
DEFINE_UNARY(square, GR_DT_NUMERIC, "x * x elementwise (integers wrap)", (x * x), (x * x),
             WSQUARE(int32_t, uint32_t, x), WSQUARE(int64_t, uint64_t, x),
             WSQUARE(uint8_t, unsigned, x), x)
GR_DEFINE_UNARY_OP(logical_not, GR_DT_BOOL, "not x elementwise (bool)", x, x, x, x, x, !x, NULL,
                   GR_OP_NO_GRADIENT)

/* ---- cast ------------------------------------------------------------------- */

static gr_status cast_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_ALL));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  ctx->out_shapes[0] = ctx->in_shapes[0];
  return GR_OK;
}

/* Saturating float -> integer conversions; NaN gives 0. */
static int32_t f_to_i32(double v) {
  if (v != v) return 0;
  if (v <= -2147483648.0) return INT32_MIN;
  if (v >= 2147483647.0) return INT32_MAX;
  return (int32_t)v;
}
static int64_t f_to_i64(double v) {
  if (v != v) return 0;
  if (v <= -0x1p63) return INT64_MIN;
  if (v >= 0x1p63) return INT64_MAX;
  return (int64_t)v;
}
static uint8_t f_to_u8(double v) {
  if (v != v || v <= 0) return 0;
  if (v >= 255.0) return 255;
  return (uint8_t)v;
}

#define CAST_LOOP(ST, DT, EXPR)                                                                    \
  do {                                                                                             \
    const ST *s_ = pin;                                                                            \
    DT *d_ = pout;                                                                                 \
    for (int64_t i_ = 0; i_ < n; i_++) {                                                           \
      ST x = s_[i_];                                                                               \
      d_[i_] = (EXPR);                                                                             \
    }                                                                                              \
  } while (0)

/* From source type ST (IS_F: a float type) to every dtype. Integer to
 * integer wraps (through the unsigned type of the target). */
#define CAST_FROM(ST, IS_F)                                                                        \
  switch (dst) {                                                                                   \
    case GR_F32:                                                                                   \
      CAST_LOOP(ST, float, (float)x);                                                              \
      break;                                                                                       \
    case GR_F64:                                                                                   \
      CAST_LOOP(ST, double, (double)x);                                                            \
      break;                                                                                       \
    case GR_I32:                                                                                   \
      CAST_LOOP(ST, int32_t, IS_F ? f_to_i32((double)x) : (int32_t)(uint32_t)x);                   \
      break;                                                                                       \
    case GR_I64:                                                                                   \
      CAST_LOOP(ST, int64_t, IS_F ? f_to_i64((double)x) : (int64_t)(uint64_t)x);                   \
      break;                                                                                       \
    case GR_U8:                                                                                    \
      CAST_LOOP(ST, uint8_t, IS_F ? f_to_u8((double)x) : (uint8_t)x);                              \
      break;                                                                                       \
    case GR_BOOL:                                                                                  \
      CAST_LOOP(ST, bool, x != 0);                                                                 \
      break;                                                                                       \
    default:                                                                                       \
      break;                                                                                       \
  }

static gr_status cast_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0];
  gr_dtype dst = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  if (X->dtype == dst) {
    gr_kernel_set_output(ctx, 0, X);
    return GR_OK;
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, dst, &X->shape, &o));
  int64_t n = gr_tensor_num_elements(X);
  const void *pin = gr_tensor_data(X);
  void *pout = gr_tensor_data(o);
  switch (X->dtype) {
    case GR_F32:
      CAST_FROM(float, 1);
      break;
    case GR_F64:
      CAST_FROM(double, 1);
      break;
    case GR_I32:
      CAST_FROM(int32_t, 0);
      break;
    case GR_I64:
      CAST_FROM(int64_t, 0);
      break;
    case GR_U8:
      CAST_FROM(uint8_t, 0);
      break;
    case GR_BOOL:
      CAST_FROM(bool, 0);
      break;
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  }
  return GR_OK;
}

/* Between float dtypes the gradient is cast back; to or from integers none flows. */
static gr_status cast_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0);
  gr_dtype xt = x.node->out_dtypes[x.index];
  if (gr_dtype_is_float(xt)) c->dinputs[0] = gr_cast(c->graph, c->grads[0], xt);
  return GR_OK;
}

static const gr_attr_spec cast_attrs[] = {{"dtype", GR_ATTR_DTYPE, true, {0}}};

const gr_op_def gr_op_cast = {.name = "cast",
                              .doc = "x converted to attr dtype (float to int saturates, NaN -> 0)",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .input_names = x_names,
                              .num_outputs = 1,
                              .attrs = cast_attrs,
                              .num_attrs = 1,
                              .shape_fn = cast_shape,
                              .kernel = cast_kernel,
                              .grad_fn = cast_grad};

gr_output gr_cast(gr_graph *g, gr_output x, gr_dtype dtype) {
  gr_attr a = gr_attr_dtype("dtype", dtype);
  return gr_ops_build(g, "cast", NULL, &x, 1, &a, 1);
}

/* ---- select ------------------------------------------------------------------ */

/* NumPy broadcasting of three operands (cond, a, b) onto one output. */
typedef struct bcast3 {
  int rank;
  int64_t n;
  bool same; /* all three have the output's shape */
  int64_t dims[GR_MAX_RANK];
  int64_t st[3][GR_MAX_RANK]; /* element strides, 0 where broadcast */
} bcast3;

static bool broadcast3(const gr_shape *s0, const gr_shape *s1, const gr_shape *s2, gr_shape *out) {
  gr_shape t;
  return gr_shape_broadcast(s0, s1, &t) && gr_shape_broadcast(&t, s2, out);
}

static bool bcast3_init(bcast3 *bc, const gr_shape *const s[3], gr_shape *out) {
  if (!broadcast3(s[0], s[1], s[2], out)) return false;
  memset(bc, 0, sizeof *bc);
  bc->rank = out->rank;
  bc->n = gr_shape_num_elements(out);
  bc->same = true;
  for (int k = 0; k < 3; k++) {
    bc->same = bc->same && gr_shape_equal(s[k], out);
    int64_t stride = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
      int j = s[k]->rank - out->rank + i;
      int64_t d = j >= 0 ? s[k]->dims[j] : 1;
      bc->dims[i] = out->dims[i];
      bc->st[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  return true;
}

static gr_status select_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_BOOL));
  GR_TRY(gr_shape_check_same_dtype(ctx, 1, 2));
  const gr_shape *s = ctx->in_shapes;
  gr_shape out;
  if (!broadcast3(&s[0], &s[1], &s[2], &out)) {
    char c[GR_SHAPE_STR_MAX], a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "shapes cond %s, a %s and b %s do not broadcast",
                          gr_shape_str(&s[0], c), gr_shape_str(&s[1], a), gr_shape_str(&s[2], b));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[1];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* Copies ES-byte elements; memmove because the output may be a forwarded
 * input (then an element is copied onto itself). */
#define SELECT_LOOP(ES)                                                                            \
  do {                                                                                             \
    if (bc.same) {                                                                                 \
      for (int64_t io = 0; io < bc.n; io++)                                                        \
        memmove(po + io * ES, (c[io] ? pa : pb) + io * ES, ES);                                    \
      break;                                                                                       \
    }                                                                                              \
    int64_t idx[GR_MAX_RANK] = {0}, off[3] = {0, 0, 0};                                            \
    for (int64_t io = 0; io < bc.n; io++) {                                                        \
      memmove(po + io * ES, c[off[0]] ? pa + off[1] * ES : pb + off[2] * ES, ES);                  \
      for (int d = bc.rank - 1; d >= 0; d--) {                                                     \
        idx[d]++;                                                                                  \
        for (int k = 0; k < 3; k++) off[k] += bc.st[k][d];                                         \
        if (idx[d] < bc.dims[d]) break;                                                            \
        for (int k = 0; k < 3; k++) off[k] -= bc.st[k][d] * bc.dims[d];                            \
        idx[d] = 0;                                                                                \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static gr_status select_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *C = &ctx->inputs[0], *A = &ctx->inputs[1], *B = &ctx->inputs[2];
  if (C->dtype != GR_BOOL || A->dtype != B->dtype)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "cond must be bool and a, b of one dtype");
  const gr_shape *s[3] = {&C->shape, &A->shape, &B->shape};
  bcast3 bc;
  gr_shape os;
  if (!bcast3_init(&bc, s, &os)) {
    char c[GR_SHAPE_STR_MAX], a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "shapes cond %s, a %s and b %s do not broadcast",
                           gr_shape_str(s[0], c), gr_shape_str(s[1], a), gr_shape_str(s[2], b));
  }
  gr_tensor *o;
  int in = gr_shape_equal(&A->shape, &os) ? 1 : gr_shape_equal(&B->shape, &os) ? 2 : -1;
  if (in > 0)
    GR_TRY(gr_kernel_forward_or_alloc(ctx, in, 0, A->dtype, &os, &o));
  else
    GR_TRY(gr_kernel_alloc_output(ctx, 0, A->dtype, &os, &o));
  const bool *c = gr_tensor_data(C);
  const char *pa = gr_tensor_data(A), *pb = gr_tensor_data(B);
  char *po = gr_tensor_data(o);
  switch (gr_dtype_size(A->dtype)) {
    case 1:
      SELECT_LOOP(1);
      break;
    case 4:
      SELECT_LOOP(4);
      break;
    case 8:
      SELECT_LOOP(8);
      break;
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  }
  return GR_OK;
}

/* dy flows to a where cond holds and to b elsewhere; cond gets none. */
static gr_status select_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output cond = gr_grad_x(c, 0), dy = c->grads[0], zeros = gr_zeros_like(g, dy);
  c->dinputs[1] = gr_sum_like(g, gr_select(g, cond, dy, zeros), gr_grad_x(c, 1));
  c->dinputs[2] = gr_sum_like(g, gr_select(g, cond, zeros, dy), gr_grad_x(c, 2));
  return GR_OK;
}

const gr_op_def gr_op_select = {.name = "select",
                                .doc = "cond ? a : b elementwise, all three broadcast",
                                .min_inputs = 3,
                                .max_inputs = 3,
                                .input_names = (const char *const[]){"cond", "a", "b"},
                                .num_outputs = 1,
                                .shape_fn = select_shape,
                                .kernel = select_kernel,
                                .grad_fn = select_grad};

gr_output gr_select(gr_graph *g, gr_output cond, gr_output a, gr_output b) {
  gr_output in[3] = {cond, a, b};
  return gr_ops_build(g, "select", NULL, in, 3, NULL, 0);
}

/* ---- add_n ------------------------------------------------------------------- */

static gr_status add_n_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  gr_shape out = ctx->in_shapes[0];
  for (int i = 1; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    const gr_shape *s = &ctx->in_shapes[i];
    if (!gr_shape_compatible(&out, s)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d has shape %s, which differs from %s", i,
                            gr_shape_str(s, b), gr_shape_str(&out, a));
    }
    if (out.rank < 0) {
      out = *s;
    } else if (s->rank >= 0) {
      for (int d = 0; d < out.rank; d++)
        if (out.dims[d] < 0) out.dims[d] = s->dims[d];
    }
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* r = x0 + x1 + ... in input order (deterministic); U wraps integers. */
#define ADD_N_LOOP(T, U)                                                                           \
  do {                                                                                             \
    T *r = gr_tensor_data(o);                                                                      \
    const T *x0 = gr_tensor_data(&ctx->inputs[0]), *x1 = gr_tensor_data(&ctx->inputs[1]);          \
    for (int64_t j = 0; j < n; j++) r[j] = (T)((U)x0[j] + (U)x1[j]);                               \
    for (int i = 2; i < ctx->num_inputs; i++) {                                                    \
      const T *x = gr_tensor_data(&ctx->inputs[i]);                                                \
      for (int64_t j = 0; j < n; j++) r[j] = (T)((U)r[j] + (U)x[j]);                               \
    }                                                                                              \
  } while (0)

static gr_status add_n_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X0 = &ctx->inputs[0];
  for (int i = 1; i < ctx->num_inputs; i++) {
    const gr_tensor *X = &ctx->inputs[i];
    if (X->dtype != X0->dtype)
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "input %d is %s but input 0 is %s", i,
                             gr_dtype_name(X->dtype), gr_dtype_name(X0->dtype));
    if (!gr_shape_equal(&X->shape, &X0->shape)) {
      char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "input %d has shape %s but input 0 has %s", i,
                             gr_shape_str(&X->shape, a), gr_shape_str(&X0->shape, b));
    }
  }
  if (ctx->num_inputs == 1) {
    gr_kernel_set_output(ctx, 0, X0);
    return GR_OK;
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, X0->dtype, &X0->shape, &o));
  int64_t n = gr_tensor_num_elements(X0);
  switch (X0->dtype) {
    case GR_F32:
      ADD_N_LOOP(float, float);
      break;
    case GR_F64:
      ADD_N_LOOP(double, double);
      break;
    case GR_I32:
      ADD_N_LOOP(int32_t, uint32_t);
      break;
    case GR_I64:
      ADD_N_LOOP(int64_t, uint64_t);
      break;
    case GR_U8:
      ADD_N_LOOP(uint8_t, unsigned);
      break;
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  }
  return GR_OK;
}

static void add_n_cost(const gr_node *node, gr_cost *c) {
  const gr_shape *s = &node->out_shapes[0];
  double n = 1;
  for (int d = 0; d < s->rank; d++) n *= s->dims[d] < 0 ? 1.0 : (double)s->dims[d];
  c->flops = n * (node->num_inputs > 1 ? node->num_inputs - 1 : 0);
  c->bytes = n * (double)gr_dtype_size(node->out_dtypes[0]) * (node->num_inputs + 1);
}

static gr_status add_n_grad(gr_grad_ctx *c) {
  for (int i = 0; i < c->node->num_inputs; i++) c->dinputs[i] = c->grads[0];
  return GR_OK;
}

const gr_op_def gr_op_add_n = {.name = "add_n",
                               .doc = "x0 + x1 + ... of one dtype and shape",
                               .min_inputs = 1,
                               .max_inputs = -1,
                               .input_names = (const char *const[]){"xs"},
                               .num_outputs = 1,
                               .shape_fn = add_n_shape,
                               .cost_fn = add_n_cost,
                               .kernel = add_n_kernel,
                               .grad_fn = add_n_grad};

gr_output gr_add_n(gr_graph *g, const gr_output *xs, int n) {
  return gr_ops_build(g, "add_n", NULL, xs, n, NULL, 0);
}
