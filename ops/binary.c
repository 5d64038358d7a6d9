/* Elementwise binary ops with NumPy broadcasting: arithmetic (same dtype in
 * and out), comparisons (bool out) and logical ops (bool in and out).
 * Signed integer arithmetic wraps around (computed in unsigned), integer
 * division by zero is an error, and pow on integers goes through double. */
#include <math.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef enum bin_kind { BIN_ARITH, BIN_COMPARE, BIN_LOGICAL } bin_kind;

static gr_status binary_shape(gr_shape_ctx *ctx, bin_kind kind) {
  unsigned mask = kind == BIN_LOGICAL   ? GR_DT_BOOL
                  : kind == BIN_COMPARE ? GR_DT_ALL
                                        : GR_DT_NUMERIC;
  GR_TRY(gr_shape_check_dtype(ctx, 0, mask));
  GR_TRY(gr_shape_check_dtype(ctx, 1, mask));
  GR_TRY(gr_shape_check_same_dtype(ctx, 0, 1));
  gr_shape out;
  if (!gr_shape_broadcast(&ctx->in_shapes[0], &ctx->in_shapes[1], &out)) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "shapes %s and %s do not broadcast",
                          gr_shape_str(&ctx->in_shapes[0], a), gr_shape_str(&ctx->in_shapes[1], b));
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = kind == BIN_ARITH ? ctx->in_dtypes[0] : GR_BOOL;
  ctx->out_shapes[0] = out;
  return GR_OK;
}
static gr_status arith_shape(gr_shape_ctx *ctx) {
  return binary_shape(ctx, BIN_ARITH);
}
static gr_status compare_shape(gr_shape_ctx *ctx) {
  return binary_shape(ctx, BIN_COMPARE);
}
static gr_status logical_shape(gr_shape_ctx *ctx) {
  return binary_shape(ctx, BIN_LOGICAL);
}

/* Sets up broadcasting from the runtime shapes and allocates the output
 * (in place over an input when possible). */
static gr_status binary_prepare(gr_kernel_ctx *ctx, gr_dtype out_dtype, gr_bcast *bc,
                                gr_tensor **out) {
  const gr_tensor *a = &ctx->inputs[0], *b = &ctx->inputs[1];
  gr_shape os;
  if (!gr_bcast_init(bc, &a->shape, &b->shape, &os)) {
    char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "shapes %s and %s do not broadcast",
                           gr_shape_str(&a->shape, x), gr_shape_str(&b->shape, y));
  }
  int in = gr_shape_equal(&a->shape, &os) ? 0 : gr_shape_equal(&b->shape, &os) ? 1 : -1;
  if (in >= 0 && ctx->inputs[in].dtype == out_dtype)
    return gr_kernel_forward_or_alloc(ctx, in, 0, out_dtype, &os, out);
  return gr_kernel_alloc_output(ctx, 0, out_dtype, &os, out);
}

/* Element functions: one per op, generic over the C type. */
#define SIGNED_WRAP(T, U, a, op, b) ((T)((U)(a)op(U)(b)))
#define FMAXNAN(a, b)               (((a) > (b) || (a) != (a)) ? (a) : (b))
#define FMINNAN(a, b)               (((a) < (b) || (a) != (a)) ? (a) : (b))

/* One case of a kernel's dtype switch: a and b are the inputs as const T *,
 * r the output as RT *; the statement (the last argument) runs for each
 * element, with x = a[ia] and y = b[ib], and sets r[io]. Needs pa, pb, po
 * (the data) and the gr_bcast bc. */
#define BIN_CASE(DT, T, RT, ...)                                                                   \
  case DT: {                                                                                       \
    const T *a = pa, *b = pb;                                                                      \
    RT *r = po;                                                                                    \
    GR_BCAST_FOR(&bc, ia, ib, io, {                                                                \
      T x = a[ia], y = b[ib];                                                                      \
      __VA_ARGS__;                                                                                 \
    });                                                                                            \
    break;                                                                                         \
  }

/* Defines KERNEL for an arithmetic op with per-dtype element statements. */
#define ARITH_OP(NAME, EF, ED, EI32, EI64, EU8)                                                    \
  static gr_status NAME##_kernel(gr_kernel_ctx *ctx) {                                             \
    gr_bcast bc;                                                                                   \
    gr_tensor *o;                                                                                  \
    const gr_tensor *A = &ctx->inputs[0], *B = &ctx->inputs[1];                                    \
    GR_TRY(binary_prepare(ctx, A->dtype, &bc, &o));                                                \
    const void *pa = gr_tensor_data(A), *pb = gr_tensor_data(B);                                   \
    void *po = gr_tensor_data(o);                                                                  \
    switch (A->dtype) {                                                                            \
      BIN_CASE(GR_F32, float, float, r[io] = EF)                                                   \
      BIN_CASE(GR_F64, double, double, r[io] = ED)                                                 \
      BIN_CASE(GR_I32, int32_t, int32_t, EI32)                                                     \
      BIN_CASE(GR_I64, int64_t, int64_t, EI64)                                                     \
      BIN_CASE(GR_U8, uint8_t, uint8_t, EU8)                                                       \
      default:                                                                                     \
        return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");                            \
    }                                                                                              \
    return GR_OK;                                                                                  \
  }

/* x ** y for integers, wrapping on overflow; negative y truncates toward 0. */
static int64_t ipow_i64(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)x;
  while (y) {
    if (y & 1) r *= b;
    b *= b;
    y >>= 1;
  }
  return (int64_t)r;
}

ARITH_OP(add, x + y, x + y, r[io] = SIGNED_WRAP(int32_t, uint32_t, x, +, y),
         r[io] = SIGNED_WRAP(int64_t, uint64_t, x, +, y), r[io] = (uint8_t)(x + y))
ARITH_OP(sub, x - y, x - y, r[io] = SIGNED_WRAP(int32_t, uint32_t, x, -, y),
         r[io] = SIGNED_WRAP(int64_t, uint64_t, x, -, y), r[io] = (uint8_t)(x - y))
ARITH_OP(mul, x *y, x *y, r[io] = SIGNED_WRAP(int32_t, uint32_t, x, *, y),
         r[io] = SIGNED_WRAP(int64_t, uint64_t, x, *, y), r[io] = (uint8_t)(x * y))
ARITH_OP(maximum, FMAXNAN(x, y), FMAXNAN(x, y), r[io] = x > y ? x : y, r[io] = x > y ? x : y,
         r[io] = x > y ? x : y)
ARITH_OP(minimum, FMINNAN(x, y), FMINNAN(x, y), r[io] = x < y ? x : y, r[io] = x < y ? x : y,
         r[io] = x < y ? x : y)
ARITH_OP(pow, powf(x, y), pow(x, y), r[io] = (int32_t)ipow_i64(x, y), r[io] = ipow_i64(x, y),
         r[io] = (uint8_t)ipow_i64(x, y))

/* Integer division: truncating; by zero sets the flag zero (an error) and
 * stores 0; for signed T, INT_MIN / -1 wraps. */
#define DIV_OR_ZERO(T)                                                                             \
  do {                                                                                             \
    if (y == 0) {                                                                                  \
      zero = true;                                                                                 \
      r[io] = 0;                                                                                   \
    } else {                                                                                       \
      r[io] = (T)(x / y);                                                                          \
    }                                                                                              \
  } while (0)
#define IDIV(T, MINV)                                                                              \
  do {                                                                                             \
    if (y == -1)                                                                                   \
      r[io] = x == MINV ? x : (T)-x;                                                               \
    else                                                                                           \
      DIV_OR_ZERO(T);                                                                              \
  } while (0)

static gr_status div_kernel(gr_kernel_ctx *ctx) {
  gr_bcast bc;
  gr_tensor *o;
  const gr_tensor *A = &ctx->inputs[0], *B = &ctx->inputs[1];
  GR_TRY(binary_prepare(ctx, A->dtype, &bc, &o));
  const void *pa = gr_tensor_data(A), *pb = gr_tensor_data(B);
  void *po = gr_tensor_data(o);
  bool zero = false;
  switch (A->dtype) {
    BIN_CASE(GR_F32, float, float, r[io] = x / y)
    BIN_CASE(GR_F64, double, double, r[io] = x / y)
    BIN_CASE(GR_I32, int32_t, int32_t, IDIV(int32_t, INT32_MIN))
    BIN_CASE(GR_I64, int64_t, int64_t, IDIV(int64_t, INT64_MIN))
    BIN_CASE(GR_U8, uint8_t, uint8_t, DIV_OR_ZERO(uint8_t))
    default:
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  }
  if (zero) return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "integer division by zero");
  return GR_OK;
}

/* Comparisons: any dtype in, bool out. */
#define COMPARE_OP(NAME, OP)                                                                       \
  static gr_status NAME##_kernel(gr_kernel_ctx *ctx) {                                             \
    gr_bcast bc;                                                                                   \
    gr_tensor *o;                                                                                  \
    const gr_tensor *A = &ctx->inputs[0], *B = &ctx->inputs[1];                                    \
    GR_TRY(binary_prepare(ctx, GR_BOOL, &bc, &o));                                                 \
    void *po = gr_tensor_data(o);                                                                  \
    const void *pa = gr_tensor_data(A), *pb = gr_tensor_data(B);                                   \
    switch (A->dtype) {                                                                            \
      BIN_CASE(GR_F32, float, bool, r[io] = x OP y)                                                \
      BIN_CASE(GR_F64, double, bool, r[io] = x OP y)                                               \
      BIN_CASE(GR_I32, int32_t, bool, r[io] = x OP y)                                              \
      BIN_CASE(GR_I64, int64_t, bool, r[io] = x OP y)                                              \
      BIN_CASE(GR_U8, uint8_t, bool, r[io] = x OP y)                                               \
      BIN_CASE(GR_BOOL, bool, bool, r[io] = x OP y)                                                \
      default:                                                                                     \
        return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");                            \
    }                                                                                              \
    return GR_OK;                                                                                  \
  }

COMPARE_OP(equal, ==)
COMPARE_OP(not_equal, !=)
COMPARE_OP(less, <)
COMPARE_OP(less_equal, <=)
COMPARE_OP(greater, >)
COMPARE_OP(greater_equal, >=)

#define LOGICAL_OP(NAME, OP)                                                                       \
  static gr_status NAME##_kernel(gr_kernel_ctx *ctx) {                                             \
    gr_bcast bc;                                                                                   \
    gr_tensor *o;                                                                                  \
    GR_TRY(binary_prepare(ctx, GR_BOOL, &bc, &o));                                                 \
    const bool *a = gr_tensor_data(&ctx->inputs[0]), *b = gr_tensor_data(&ctx->inputs[1]);         \
    bool *r = gr_tensor_data(o);                                                                   \
    GR_BCAST_FOR(&bc, ia, ib, io, r[io] = a[ia] OP b[ib]);                                         \
    return GR_OK;                                                                                  \
  }
LOGICAL_OP(logical_and, &&)
LOGICAL_OP(logical_or, ||)

/* ---- gradients ------------------------------------------------------------------
 * d/da and d/db, each summed down to its input's shape (sum_like undoes the
 * broadcasting). Comparisons and logical ops give bools: no gradient. */

static gr_status add_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_grad_sum_like(c, c->grads[0], gr_grad_x(c, 0));
  c->dinputs[1] = gr_grad_sum_like(c, c->grads[0], gr_grad_x(c, 1));
  return GR_OK;
}
static gr_status sub_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_grad_sum_like(c, c->grads[0], gr_grad_x(c, 0));
  c->dinputs[1] = gr_grad_sum_like(c, gr_neg(c->graph, c->grads[0]), gr_grad_x(c, 1));
  return GR_OK;
}
static gr_status mul_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output a = gr_grad_x(c, 0), b = gr_grad_x(c, 1), dy = c->grads[0];
  c->dinputs[0] = gr_grad_sum_like(c, gr_mul(g, dy, b), a);
  c->dinputs[1] = gr_grad_sum_like(c, gr_mul(g, dy, a), b);
  return GR_OK;
}
static gr_status div_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output a = gr_grad_x(c, 0), b = gr_grad_x(c, 1), y = gr_grad_y(c, 0), dy = c->grads[0];
  c->dinputs[0] = gr_grad_sum_like(c, gr_div(g, dy, b), a);
  c->dinputs[1] =
      gr_grad_sum_like(c, gr_neg(g, gr_div(g, gr_mul(g, dy, y), b)), b); /* -dy a / b^2 */
  return GR_OK;
}
/* d/da = dy b a^(b-1) with the base taken as 1 where b == 0, so that x ** 0
 * has the gradient 0 at x = 0 (not 0 * inf), in higher derivatives too (as
 * PyTorch); d/db = dy y log a, taken as 0 where a <= 0 (as TensorFlow). */
static gr_status pow_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output a = gr_grad_x(c, 0), b = gr_grad_x(c, 1), y = gr_grad_y(c, 0), dy = c->grads[0];
  gr_output zero = gr_grad_scalar(c, a, 0), one = gr_grad_scalar(c, a, 1);
  gr_output base = gr_select(g, gr_equal(g, b, zero), one, a);
  gr_output slope = gr_mul(g, b, gr_pow(g, base, gr_sub(g, b, one)));
  c->dinputs[0] = gr_grad_sum_like(c, gr_mul(g, dy, slope), a);
  gr_output pos = gr_greater(g, a, zero);
  gr_output dyy_loga = gr_mul(g, dy, gr_mul(g, y, gr_log(g, gr_select(g, pos, a, one))));
  c->dinputs[1] = gr_grad_sum_like(c, gr_select(g, pos, dyy_loga, zero), b);
  return GR_OK;
}
/* The gradient goes to a where mask holds, else to b (ties go to a). */
static gr_status select_between(gr_grad_ctx *c, gr_output mask) {
  gr_graph *g = c->graph;
  gr_output dy = c->grads[0], zeros = gr_zeros_like(g, dy);
  c->dinputs[0] = gr_grad_sum_like(c, gr_select(g, mask, dy, zeros), gr_grad_x(c, 0));
  c->dinputs[1] = gr_grad_sum_like(c, gr_select(g, mask, zeros, dy), gr_grad_x(c, 1));
  return GR_OK;
}
static gr_status maximum_grad(gr_grad_ctx *c) {
  return select_between(c, gr_greater_equal(c->graph, gr_grad_x(c, 0), gr_grad_x(c, 1)));
}
static gr_status minimum_grad(gr_grad_ctx *c) {
  return select_between(c, gr_less_equal(c->graph, gr_grad_x(c, 0), gr_grad_x(c, 1)));
}
static const char *const ab_names[] = {"a", "b"};

#define DEFINE_BINARY_OP(NAME, SHAPE, DOC, GRAD_FN, FLAGS)                                         \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 2,                                                 \
                                  .max_inputs = 2,                                                 \
                                  .input_names = ab_names,                                         \
                                  .num_outputs = 1,                                                \
                                  .shape_fn = SHAPE,                                               \
                                  .kernel = NAME##_kernel,                                         \
                                  .grad_fn = GRAD_FN,                                              \
                                  .flags = FLAGS};                                                 \
  gr_output gr_##NAME(gr_graph *g, gr_output a, gr_output b) {                                     \
    gr_output in[2] = {a, b};                                                                      \
    return gr_ops_build(g, #NAME, NULL, in, 2, NULL, 0);                                           \
  }
#define DEFINE_BINARY(NAME, SHAPE, DOC) DEFINE_BINARY_OP(NAME, SHAPE, DOC, NAME##_grad, 0)
/* bool results: no gradient */
#define DEFINE_PREDICATE(NAME, SHAPE, DOC)                                                         \
  DEFINE_BINARY_OP(NAME, SHAPE, DOC, NULL, GR_OP_NO_GRADIENT)

DEFINE_BINARY(add, arith_shape, "a + b elementwise, broadcasting")
DEFINE_BINARY(sub, arith_shape, "a - b elementwise, broadcasting")
DEFINE_BINARY(mul, arith_shape, "a * b elementwise, broadcasting")
DEFINE_BINARY(div, arith_shape, "a / b elementwise (integers truncate), broadcasting")
DEFINE_BINARY(pow, arith_shape,
              "a ** b elementwise, broadcasting; gradients: d/da is 0 where b = 0, d/db is 0 "
              "where a <= 0")
DEFINE_BINARY(maximum, arith_shape,
              "max(a, b) elementwise, broadcasting; on ties the gradient goes to a")
DEFINE_BINARY(minimum, arith_shape,
              "min(a, b) elementwise, broadcasting; on ties the gradient goes to a")
DEFINE_PREDICATE(equal, compare_shape, "a == b elementwise (bool)")
DEFINE_PREDICATE(not_equal, compare_shape, "a != b elementwise (bool)")
DEFINE_PREDICATE(less, compare_shape, "a < b elementwise (bool)")
DEFINE_PREDICATE(less_equal, compare_shape, "a <= b elementwise (bool)")
DEFINE_PREDICATE(greater, compare_shape, "a > b elementwise (bool)")
DEFINE_PREDICATE(greater_equal, compare_shape, "a >= b elementwise (bool)")
DEFINE_PREDICATE(logical_and, logical_shape, "a and b elementwise (bool)")
DEFINE_PREDICATE(logical_or, logical_shape, "a or b elementwise (bool)")
