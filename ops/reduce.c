/* Reductions: reduce_sum, reduce_mean, reduce_max, reduce_min and reduce_prod
 * over any subset of axes (attr "axes", empty = every axis; attr "keepdims"),
 * and argmax / argmin along one axis (attr "axis"; i64 output).
 *
 * Semantics:
 * - Each output element is accumulated over its reduced elements in row-major
 *   order, whichever loop shape runs, so results are deterministic. f32 sums,
 *   means and products accumulate in double; integer ones in uint64, wrapping
 *   like the other integer ops.
 * - reduce_mean of integers is the (64-bit) integer sum divided by the count,
 *   truncated toward zero. Over an empty set: sum 0, prod 1, mean NaN for
 *   floats; mean of integers, max and min are errors.
 * - max / min propagate NaN. argmax / argmin give the first index of the
 *   extreme value; NaN counts as the extreme for both, so the first NaN wins
 *   (as in NumPy). An empty axis is an error. */
#include <math.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD } red_kind;
static const char *const red_names[] = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                        "reduce_prod"};

/* ---- shape functions ------------------------------------------------------ */

static gr_status reduce_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  const gr_shape *in = &ctx->in_shapes[0];
  bool keep = gr_node_attr_bool(ctx->node, "keepdims", false);
  const gr_attr_value *axes = gr_node_attr(ctx->node, "axes");
  int naxes = axes && axes->type == GR_ATTR_INTS ? axes->ints.n : 0;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  if (in->rank < 0) {
    /* every axis without keepdims gives a scalar; otherwise the rank is unknown */
    ctx->out_shapes[0] = naxes == 0 && !keep ? gr_shape_scalar() : gr_shape_unknown();
    return GR_OK;
  }
  bool mask[GR_MAX_RANK];
  GR_TRY(gr_ops_axes_mask(ctx, "axes", in->rank, true, mask));
  gr_shape out = gr_shape_make(0, NULL);
  for (int i = 0; i < in->rank; i++)
    if (!mask[i])
      out.dims[out.rank++] = in->dims[i];
    else if (keep)
      out.dims[out.rank++] = 1;
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status arg_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_NUMERIC));
  const gr_shape *in = &ctx->in_shapes[0];
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  if (in->rank < 0) {
    ctx->out_shapes[0] = gr_shape_unknown();
    return GR_OK;
  }
  int ax;
  if (!gr_shape_normalize_axis(in->rank, axis, &ax))
    return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                          (long long)axis, in->rank);
  gr_shape out = gr_shape_make(0, NULL);
  for (int i = 0; i < in->rank; i++)
    if (i != ax) out.dims[out.rank++] = in->dims[i];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* flops: one per input element */
static void reduce_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *in = &n->inputs[0].node->out_shapes[n->inputs[0].index];
  const gr_shape *out = &n->out_shapes[0];
  double ni = 1, no = 1;
  for (int i = 0; i < in->rank; i++) ni *= in->dims[i] < 0 ? 1.0 : (double)in->dims[i];
  for (int i = 0; i < out->rank; i++) no *= out->dims[i] < 0 ? 1.0 : (double)out->dims[i];
  c->flops = ni;
  c->bytes = ni * (double)gr_dtype_size(n->inputs[0].node->out_dtypes[n->inputs[0].index]) +
             no * (double)gr_dtype_size(n->out_dtypes[0]);
}

/* ---- the reduction loops ---------------------------------------------------- */

/* The input seen as coalesced dims (size-1 dims dropped, neighbours of the
 * same kind merged). The innermost run is either reduced ("rows": each output
 * element walks contiguous runs) or kept ("cols": a block of contiguous outputs
 * is accumulated together, row after row). Other dims are walked by odometers. */
typedef struct red_plan {
  int64_t nout, count; /* output elements, reduced elements per output */
  int nk, nr;          /* outer kept dims, reduced dims outside the inner run */
  int64_t kdim[GR_MAX_RANK], kstr[GR_MAX_RANK];
  int64_t rdim[GR_MAX_RANK], rstr[GR_MAX_RANK];
  int64_t inner; /* length of the contiguous inner run */
  bool rows;     /* inner run reduced (else kept) */
} red_plan;

static void make_plan(const gr_shape *s, const bool mask[GR_MAX_RANK], red_plan *p) {
  int64_t str[GR_MAX_RANK], dim[GR_MAX_RANK], st[GR_MAX_RANK];
  bool red[GR_MAX_RANK];
  int n = 0;
  gr_ops_strides(s, str);
  p->nout = p->count = 1;
  for (int i = 0; i < s->rank; i++) {
    int64_t d = s->dims[i];
    if (mask[i])
      p->count *= d;
    else
      p->nout *= d;
    if (d == 1) continue;
    if (n > 0 && red[n - 1] == mask[i]) { /* contiguous: merge */
      dim[n - 1] *= d;
      st[n - 1] = str[i];
    } else {
      dim[n] = d;
      st[n] = str[i];
      red[n] = mask[i];
      n++;
    }
  }
  p->rows = n > 0 && red[n - 1];
  p->inner = n > 0 ? dim[n - 1] : 1;
  p->nk = p->nr = 0;
  for (int i = 0; i < n - 1; i++) {
    if (red[i]) {
      p->rdim[p->nr] = dim[i];
      p->rstr[p->nr++] = st[i];
    } else {
      p->kdim[p->nk] = dim[i];
      p->kstr[p->nk++] = st[i];
    }
  }
}

/* Advances the multi-index idx over dims (last fastest); returns the change
 * of the offset given by the strides. */
static inline int64_t odo_step(int n, const int64_t *dim, const int64_t *str, int64_t *idx) {
  int64_t delta = 0;
  for (int d = n - 1; d >= 0; d--) {
    delta += str[d];
    if (++idx[d] < dim[d]) return delta;
    delta -= str[d] * dim[d];
    idx[d] = 0;
  }
  return delta;
}

static int64_t prod_dims(int n, const int64_t *dim) {
  int64_t r = 1;
  for (int i = 0; i < n; i++) r *= dim[i];
  return r;
}

#define RED_CHUNK 256

/* One reduction for element type T with accumulator type A: acc starts at
 * INIT, takes each element with STEP(acc, v) and ends as FINAL(acc) (which
 * may use `count`). LANES: the result does not depend on the order (max,
 * min), so contiguous runs use independent lanes. */
#define REDUCE_FN(NAME, T, A, INIT, STEP, FINAL, LANES)                                            \
  static void NAME(const red_plan *p, const void *in, void *out) {                                 \
    const T *x = in;                                                                               \
    T *y = out;                                                                                    \
    const int64_t count = p->count, kn = prod_dims(p->nk, p->kdim);                                \
    const int64_t rn = prod_dims(p->nr, p->rdim), inner = p->inner;                                \
    int64_t kidx[GR_MAX_RANK] = {0}, koff = 0;                                                     \
    (void)count;                                                                                   \
    for (int64_t ko = 0; ko < kn; ko++) {                                                          \
      if (p->rows) {                                                                               \
        A acc = INIT;                                                                              \
        int64_t ridx[GR_MAX_RANK] = {0}, roff = 0;                                                 \
        for (int64_t r = 0; r < rn; r++) {                                                         \
          const T *row = x + koff + roff;                                                          \
          if (LANES) { /* order-free ops: independent lanes, folded per run */                     \
            A l[8] = {INIT, INIT, INIT, INIT, INIT, INIT, INIT, INIT};                             \
            int64_t j = 0;                                                                         \
            for (; j + 8 <= inner; j += 8)                                                         \
              for (int k = 0; k < 8; k++) l[k] = STEP(l[k], row[j + k]);                           \
            for (; j < inner; j++) l[0] = STEP(l[0], row[j]);                                      \
            for (int k = 0; k < 8; k++) acc = STEP(acc, l[k]);                                     \
          } else {                                                                                 \
            for (int64_t j = 0; j < inner; j++) acc = STEP(acc, row[j]);                           \
          }                                                                                        \
          roff += odo_step(p->nr, p->rdim, p->rstr, ridx);                                         \
        }                                                                                          \
        y[ko] = FINAL(acc);                                                                        \
      } else {                                                                                     \
        for (int64_t k0 = 0; k0 < inner; k0 += RED_CHUNK) {                                        \
          const int64_t c = inner - k0 < RED_CHUNK ? inner - k0 : RED_CHUNK;                       \
          A acc[RED_CHUNK];                                                                        \
          for (int64_t j = 0; j < c; j++) acc[j] = INIT;                                           \
          int64_t ridx[GR_MAX_RANK] = {0}, roff = 0;                                               \
          for (int64_t r = 0; r < rn; r++) {                                                       \
            const T *row = x + koff + roff + k0;                                                   \
            for (int64_t j = 0; j < c; j++) acc[j] = STEP(acc[j], row[j]);                         \
            roff += odo_step(p->nr, p->rdim, p->rstr, ridx);                                       \
          }                                                                                        \
          T *yo = y + ko * inner + k0;                                                             \
          for (int64_t j = 0; j < c; j++) yo[j] = FINAL(acc[j]);                                   \
        }                                                                                          \
      }                                                                                            \
      koff += odo_step(p->nk, p->kdim, p->kstr, kidx);                                             \
    }                                                                                              \
  }

#define ADD(a, v)   ((a) + (v))
#define ADD_U(a, v) ((a) + (uint64_t)(v))
#define MUL(a, v)   ((a) * (v))
#define MUL_U(a, v) ((a) * (uint64_t)(v))
#define MAX_F(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define MIN_F(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define MAX_I(a, v) ((v) > (a) ? (v) : (a))
#define MIN_I(a, v) ((v) < (a) ? (v) : (a))
#define AS_F32(a)   ((float)(a))
#define AS_F64(a)   ((double)(a))
#define AS_I32(a)   ((int32_t)(a))
#define AS_I64(a)   ((int64_t)(a))
#define AS_U8(a)    ((uint8_t)(a))
#define MEAN_F32(a) ((float)((a) / (double)count))
#define MEAN_F64(a) ((a) / (double)count)
#define MEAN_I32(a) ((int32_t)((int64_t)(a) / count))
#define MEAN_I64(a) ((int64_t)(a) / count)
#define MEAN_U8(a)  ((uint8_t)((a) / (uint64_t)count))

REDUCE_FN(sum_f32, float, double, 0.0, ADD, AS_F32, 0)
REDUCE_FN(sum_f64, double, double, 0.0, ADD, AS_F64, 0)
REDUCE_FN(sum_i32, int32_t, uint64_t, 0, ADD_U, AS_I32, 0)
REDUCE_FN(sum_i64, int64_t, uint64_t, 0, ADD_U, AS_I64, 0)
REDUCE_FN(sum_u8, uint8_t, uint64_t, 0, ADD_U, AS_U8, 0)
REDUCE_FN(mean_f32, float, double, 0.0, ADD, MEAN_F32, 0)
REDUCE_FN(mean_f64, double, double, 0.0, ADD, MEAN_F64, 0)
REDUCE_FN(mean_i32, int32_t, uint64_t, 0, ADD_U, MEAN_I32, 0)
REDUCE_FN(mean_i64, int64_t, uint64_t, 0, ADD_U, MEAN_I64, 0)
REDUCE_FN(mean_u8, uint8_t, uint64_t, 0, ADD_U, MEAN_U8, 0)
REDUCE_FN(max_f32, float, float, -INFINITY, MAX_F, AS_F32, 1)
REDUCE_FN(max_f64, double, double, -INFINITY, MAX_F, AS_F64, 1)
REDUCE_FN(max_i32, int32_t, int32_t, INT32_MIN, MAX_I, AS_I32, 1)
REDUCE_FN(max_i64, int64_t, int64_t, INT64_MIN, MAX_I, AS_I64, 1)
REDUCE_FN(max_u8, uint8_t, uint8_t, 0, MAX_I, AS_U8, 1)
REDUCE_FN(min_f32, float, float, INFINITY, MIN_F, AS_F32, 1)
REDUCE_FN(min_f64, double, double, INFINITY, MIN_F, AS_F64, 1)
REDUCE_FN(min_i32, int32_t, int32_t, INT32_MAX, MIN_I, AS_I32, 1)
REDUCE_FN(min_i64, int64_t, int64_t, INT64_MAX, MIN_I, AS_I64, 1)
REDUCE_FN(min_u8, uint8_t, uint8_t, UINT8_MAX, MIN_I, AS_U8, 1)
REDUCE_FN(prod_f32, float, double, 1.0, MUL, AS_F32, 0)
REDUCE_FN(prod_f64, double, double, 1.0, MUL, AS_F64, 0)
REDUCE_FN(prod_i32, int32_t, uint64_t, 1, MUL_U, AS_I32, 0)
REDUCE_FN(prod_i64, int64_t, uint64_t, 1, MUL_U, AS_I64, 0)
REDUCE_FN(prod_u8, uint8_t, uint64_t, 1, MUL_U, AS_U8, 0)

typedef void (*red_fn)(const red_plan *p, const void *in, void *out);

/* [kind][dtype] for the numeric dtypes f32, f64, i32, i64, u8 */
static const red_fn red_fns[5][5] = {
    [RED_SUM] = {sum_f32, sum_f64, sum_i32, sum_i64, sum_u8},
    [RED_MEAN] = {mean_f32, mean_f64, mean_i32, mean_i64, mean_u8},
    [RED_MAX] = {max_f32, max_f64, max_i32, max_i64, max_u8},
    [RED_MIN] = {min_f32, min_f64, min_i32, min_i64, min_u8},
    [RED_PROD] = {prod_f32, prod_f64, prod_i32, prod_i64, prod_u8},
};

static gr_status reduce_kernel(gr_kernel_ctx *ctx, red_kind kind) {
  const gr_tensor *x = &ctx->inputs[0];
  if (x->dtype > GR_U8) return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  bool mask[GR_MAX_RANK];
  GR_TRY(gr_ops_kernel_axes_mask(ctx, "axes", x->shape.rank, mask));
  bool keep = gr_node_attr_bool(ctx->node, "keepdims", false);
  gr_shape os = gr_shape_make(0, NULL);
  for (int i = 0; i < x->shape.rank; i++)
    if (!mask[i])
      os.dims[os.rank++] = x->shape.dims[i];
    else if (keep)
      os.dims[os.rank++] = 1;
  red_plan p;
  make_plan(&x->shape, mask, &p);
  if (p.count == 0) {
    if (kind == RED_MAX || kind == RED_MIN)
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s over an empty axis (no identity)",
                             red_names[kind]);
    if (kind == RED_MEAN && !gr_dtype_is_float(x->dtype))
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                             "reduce_mean of integers over an empty axis (no value)");
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, x->dtype, &os, &o));
  if (p.nout == 0) return GR_OK;
  if (p.count == 0) {
    double v = kind == RED_PROD ? 1.0 : kind == RED_MEAN ? NAN : 0.0;
    for (int64_t i = 0; i < p.nout; i++) gr_tensor_set_f64(o, i, v);
    return GR_OK;
  }
  red_fns[kind][x->dtype](&p, gr_tensor_data(x), gr_tensor_data(o));
  return GR_OK;
}

static gr_status reduce_sum_kernel(gr_kernel_ctx *ctx) {
  return reduce_kernel(ctx, RED_SUM);
}
static gr_status reduce_mean_kernel(gr_kernel_ctx *ctx) {
  return reduce_kernel(ctx, RED_MEAN);
}
static gr_status reduce_max_kernel(gr_kernel_ctx *ctx) {
  return reduce_kernel(ctx, RED_MAX);
}
static gr_status reduce_min_kernel(gr_kernel_ctx *ctx) {
  return reduce_kernel(ctx, RED_MIN);
}
static gr_status reduce_prod_kernel(gr_kernel_ctx *ctx) {
  return reduce_kernel(ctx, RED_PROD);
}

/* ---- argmax / argmin ---------------------------------------------------------- */

/* Is v strictly better than the best so far b? NaN beats everything but NaN. */
#define ARGMAX_F(v, b) ((v) > (b) || ((v) != (v) && (b) == (b)))
#define ARGMIN_F(v, b) ((v) < (b) || ((v) != (v) && (b) == (b)))
#define ARGMAX_I(v, b) ((v) > (b))
#define ARGMIN_I(v, b) ((v) < (b))

/* x seen as [outer, n, inner]; y [outer, inner]. n > 0. */
#define ARG_FN(NAME, T, BETTER)                                                                    \
  static void NAME(const void *in, int64_t *y, int64_t outer, int64_t n, int64_t inner) {          \
    const T *x = in;                                                                               \
    for (int64_t o = 0; o < outer; o++) {                                                          \
      const T *base = x + o * n * inner;                                                           \
      if (inner == 1) {                                                                            \
        int64_t best = 0;                                                                          \
        T bv = base[0];                                                                            \
        for (int64_t i = 1; i < n; i++)                                                            \
          if (BETTER(base[i], bv)) {                                                               \
            best = i;                                                                              \
            bv = base[i];                                                                          \
          }                                                                                        \
        y[o] = best;                                                                               \
      } else {                                                                                     \
        int64_t *yo = y + o * inner;                                                               \
        for (int64_t j = 0; j < inner; j++) yo[j] = 0;                                             \
        for (int64_t i = 1; i < n; i++) {                                                          \
          const T *row = base + i * inner;                                                         \
          for (int64_t j = 0; j < inner; j++)                                                      \
            if (BETTER(row[j], base[yo[j] * inner + j])) yo[j] = i;                                \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

ARG_FN(argmax_f32, float, ARGMAX_F)
ARG_FN(argmax_f64, double, ARGMAX_F)
ARG_FN(argmax_i32, int32_t, ARGMAX_I)
ARG_FN(argmax_i64, int64_t, ARGMAX_I)
ARG_FN(argmax_u8, uint8_t, ARGMAX_I)
ARG_FN(argmin_f32, float, ARGMIN_F)
ARG_FN(argmin_f64, double, ARGMIN_F)
ARG_FN(argmin_i32, int32_t, ARGMIN_I)
ARG_FN(argmin_i64, int64_t, ARGMIN_I)
ARG_FN(argmin_u8, uint8_t, ARGMIN_I)

typedef void (*arg_fn)(const void *in, int64_t *y, int64_t outer, int64_t n, int64_t inner);
static const arg_fn arg_fns[2][5] = {
    {argmax_f32, argmax_f64, argmax_i32, argmax_i64, argmax_u8},
    {argmin_f32, argmin_f64, argmin_i32, argmin_i64, argmin_u8},
};

static gr_status arg_kernel(gr_kernel_ctx *ctx, int which) {
  const gr_tensor *x = &ctx->inputs[0];
  if (x->dtype > GR_U8) return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype");
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  int ax;
  if (!gr_shape_normalize_axis(x->shape.rank, axis, &ax))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                           (long long)axis, x->shape.rank);
  int64_t outer = 1, inner = 1, n = x->shape.dims[ax];
  gr_shape os = gr_shape_make(0, NULL);
  for (int i = 0; i < x->shape.rank; i++) {
    if (i == ax) continue;
    os.dims[os.rank++] = x->shape.dims[i];
    if (i < ax)
      outer *= x->shape.dims[i];
    else
      inner *= x->shape.dims[i];
  }
  if (n == 0)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s over an empty axis %d",
                           which ? "argmin" : "argmax", ax);
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &os, &o));
  if (outer * inner > 0)
    arg_fns[which][x->dtype](gr_tensor_data(x), gr_tensor_data(o), outer, n, inner);
  return GR_OK;
}

static gr_status argmax_kernel(gr_kernel_ctx *ctx) {
  return arg_kernel(ctx, 0);
}
static gr_status argmin_kernel(gr_kernel_ctx *ctx) {
  return arg_kernel(ctx, 1);
}

/* ---- definitions and builders --------------------------------------------------- */

static const gr_attr_spec reduce_attrs[] = {
    {"axes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}},
    {"keepdims", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};

static const gr_attr_spec arg_attrs[] = {
    {"axis", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};

/* ---- gradients ------------------------------------------------------------------ */

/* y (or dy) of this reduction broadcast back to the input's runtime shape. */
static gr_output spread(gr_grad_ctx *c, gr_output y, bool mean) {
  const gr_attr_value *axes = gr_node_attr(c->node, "axes");
  return gr_broadcast_like(c->graph, y, gr_grad_x(c, 0), axes->ints.v, axes->ints.n,
                           gr_node_attr_bool(c->node, "keepdims", false), mean);
}
static gr_status reduce_sum_grad(gr_grad_ctx *c) {
  c->dinputs[0] = spread(c, c->grads[0], false);
  return GR_OK;
}
static gr_status reduce_mean_grad(gr_grad_ctx *c) {
  c->dinputs[0] = spread(c, c->grads[0], true);
  return GR_OK;
}
/* dy goes to the elements equal to the extreme, shared equally among ties. */
static gr_status extreme_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  gr_output x = gr_grad_x(c, 0);
  gr_dtype dt = x.node->out_dtypes[x.index];
  gr_output mask = gr_cast(g, gr_equal(g, x, spread(c, gr_grad_y(c, 0), false)), dt);
  const gr_attr_value *axes = gr_node_attr(c->node, "axes");
  gr_output ties = gr_reduce_sum(g, mask, axes->ints.v, axes->ints.n,
                                 gr_node_attr_bool(c->node, "keepdims", false));
  c->dinputs[0] = gr_mul(g, spread(c, gr_div(g, c->grads[0], ties), false), mask);
  return GR_OK;
}
#define reduce_max_grad extreme_grad
#define reduce_min_grad extreme_grad
/* dy times the product of the other reduced elements (prod_others: prefix
 * and suffix products, so zeros in x give exact results, no 0 / 0) */
static gr_status reduce_prod_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0);
  const gr_attr_value *axes = gr_node_attr(c->node, "axes");
  gr_output others = gr_prod_others(c->graph, x, NULL, 0, axes->ints.v, axes->ints.n);
  c->dinputs[0] = gr_mul(c->graph, spread(c, c->grads[0], false), others);
  return GR_OK;
}

#define DEFINE_REDUCE(NAME, DOC)                                                                   \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = (const char *const[]){"x"},                       \
                                  .num_outputs = 1,                                                \
                                  .attrs = reduce_attrs,                                           \
                                  .num_attrs = 2,                                                  \
                                  .shape_fn = reduce_shape,                                        \
                                  .cost_fn = reduce_cost,                                          \
                                  .kernel = NAME##_kernel,                                         \
                                  .grad_fn = NAME##_grad};                                         \
  gr_output gr_##NAME(gr_graph *g, gr_output x, const int64_t *axes, int n, bool keepdims) {       \
    gr_attr a[2] = {gr_attr_ints("axes", axes ? n : 0, axes), gr_attr_bool("keepdims", keepdims)}; \
    return gr_ops_build(g, #NAME, NULL, &x, 1, a, 2);                                              \
  }

DEFINE_REDUCE(reduce_sum, "sum over axes (attrs axes: empty = all, keepdims)")
DEFINE_REDUCE(reduce_mean, "mean over axes; integers truncate (attrs axes, keepdims)")
DEFINE_REDUCE(reduce_max, "maximum over axes, NaN propagates (attrs axes, keepdims); tied maxima "
                          "share the gradient equally")
DEFINE_REDUCE(reduce_min, "minimum over axes, NaN propagates (attrs axes, keepdims); tied minima "
                          "share the gradient equally")
DEFINE_REDUCE(reduce_prod, "product over axes (attrs axes, keepdims); the gradient is exact at "
                           "zeros (products of the other elements)")

#define DEFINE_ARG(NAME, DOC)                                                                      \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = (const char *const[]){"x"},                       \
                                  .num_outputs = 1,                                                \
                                  .attrs = arg_attrs,                                              \
                                  .num_attrs = 1,                                                  \
                                  .shape_fn = arg_shape,                                           \
                                  .cost_fn = reduce_cost,                                          \
                                  .kernel = NAME##_kernel,                                         \
                                  .flags = GR_OP_NO_GRADIENT};                                     \
  gr_output gr_##NAME(gr_graph *g, gr_output x, int64_t axis) {                                    \
    gr_attr a = gr_attr_int("axis", axis);                                                         \
    return gr_ops_build(g, #NAME, NULL, &x, 1, &a, 1);                                             \
  }

DEFINE_ARG(argmax, "i64 index of the largest element along axis; first on ties, NaN wins")
DEFINE_ARG(argmin, "i64 index of the smallest element along axis; first on ties, NaN wins")
