/* Shape ops: reshape, expand_dims and squeeze (free views of the input),
 * transpose (a view when the permutation moves no data, else a copy; blocked
 * for matrices), shape (the runtime shape as an i64 vector), and fill,
 * zeros_like, ones_like. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* Sets output 0 to a view of input 0 with shape s (same element count). */
static gr_status set_view(gr_kernel_ctx *ctx, const gr_shape *s) {
  gr_tensor t;
  GR_TRY(gr_tensor_reshape(&ctx->inputs[0], s, &t, ctx->err));
  gr_kernel_set_output(ctx, 0, &t);
  gr_tensor_release(&t);
  return GR_OK;
}

/* Formats dims as "[2, -1]" (-1 shown as such, unlike gr_shape_str). */
static const char *dims_str(const gr_shape *s, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < s->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* ---- reshape ------------------------------------------------------------------ */

/* Resolves the target shape t (one dim may be -1) for an input of n elements
 * (n -1: unknown, the -1 dim stays unknown). On failure returns the error code
 * with a message in msg. */
static gr_status reshape_target(const gr_shape *t, int64_t n, gr_shape *out, char *msg,
                                size_t cap) {
  char b[GR_SHAPE_STR_MAX];
  if (t->rank < 0) {
    snprintf(msg, cap, "attr 'shape' must have a known rank");
    return GR_ERR_INVALID_ARGUMENT;
  }
  int infer = -1;
  int64_t prod = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->dims[i];
    if (d < -1) {
      snprintf(msg, cap, "attr 'shape' %s has a negative dim", dims_str(t, b, sizeof b));
      return GR_ERR_INVALID_ARGUMENT;
    }
    if (d == -1) {
      if (infer >= 0) {
        snprintf(msg, cap, "attr 'shape' %s has more than one -1", dims_str(t, b, sizeof b));
        return GR_ERR_INVALID_ARGUMENT;
      }
      infer = i;
    } else if (d > 0 && prod > ((int64_t)1 << 62) / d) {
      snprintf(msg, cap, "attr 'shape' %s is too large", dims_str(t, b, sizeof b));
      return GR_ERR_INVALID_ARGUMENT;
    } else {
      prod *= d;
    }
  }
  *out = *t;
  if (n < 0) return GR_OK;
  if (infer >= 0 ? prod == 0 || n % prod != 0 : prod != n) {
    snprintf(msg, cap, "cannot reshape %lld elements into %s", (long long)n,
             dims_str(t, b, sizeof b));
    return GR_ERR_SHAPE;
  }
  if (infer >= 0) out->dims[infer] = n / prod;
  return GR_OK;
}

static gr_status reshape_shape(gr_shape_ctx *ctx) {
  const gr_shape *t = &gr_node_attr(ctx->node, "shape")->shape;
  char msg[400], b[GR_SHAPE_STR_MAX];
  gr_shape out;
  gr_status s = reshape_target(t, gr_shape_num_elements(&ctx->in_shapes[0]), &out, msg, sizeof msg);
  if (s != GR_OK)
    return gr_shape_error(ctx, s, "%s (input shape %s)", msg, gr_shape_str(&ctx->in_shapes[0], b));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status reshape_kernel(gr_kernel_ctx *ctx) {
  const gr_shape *t = &gr_node_attr(ctx->node, "shape")->shape;
  char msg[400], b[GR_SHAPE_STR_MAX];
  gr_shape out;
  const gr_tensor *x = &ctx->inputs[0];
  gr_status s = reshape_target(t, gr_tensor_num_elements(x), &out, msg, sizeof msg);
  if (s != GR_OK)
    return gr_kernel_error(ctx, s, "%s (input shape %s)", msg, gr_shape_str(&x->shape, b));
  return set_view(ctx, &out);
}

/* ---- transpose ------------------------------------------------------------------- */

/* Reads attr "perm" for a tensor of `rank` into perm (empty: reversed). */
static gr_status read_perm(const gr_node *node, int rank, int perm[GR_MAX_RANK], char *msg,
                           size_t cap) {
  const gr_attr_value *v = gr_node_attr(node, "perm");
  int n = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  if (n == 0) {
    for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
    return GR_OK;
  }
  if (n != rank) {
    snprintf(msg, cap, "attr 'perm' has %d entries for rank %d", n, rank);
    return GR_ERR_INVALID_ARGUMENT;
  }
  bool seen[GR_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int ax;
    if (!gr_shape_normalize_axis(rank, v->ints.v[i], &ax)) {
      snprintf(msg, cap, "attr 'perm': axis %lld is out of range for rank %d",
               (long long)v->ints.v[i], rank);
      return GR_ERR_OUT_OF_RANGE;
    }
    if (seen[ax]) {
      snprintf(msg, cap, "attr 'perm' is not a permutation: axis %lld appears twice",
               (long long)v->ints.v[i]);
      return GR_ERR_INVALID_ARGUMENT;
    }
    seen[ax] = true;
    perm[i] = ax;
  }
  return GR_OK;
}

static gr_status transpose_shape(gr_shape_ctx *ctx) {
  const gr_shape *in = &ctx->in_shapes[0];
  const gr_attr_value *v = gr_node_attr(ctx->node, "perm");
  int n = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  if (in->rank < 0 && n == 0) {
    ctx->out_shapes[0] = gr_shape_unknown();
    return GR_OK;
  }
  int rank = in->rank >= 0 ? in->rank : n;
  if (rank > GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr 'perm' has %d entries (max rank %d)",
                          n, GR_MAX_RANK);
  int perm[GR_MAX_RANK];
  char msg[300];
  gr_status s = read_perm(ctx->node, rank, perm, msg, sizeof msg);
  if (s != GR_OK) return gr_shape_error(ctx, s, "%s", msg);
  gr_shape out = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) out.dims[i] = in->rank >= 0 ? in->dims[perm[i]] : GR_DIM_UNKNOWN;
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* rows x cols matrix x into its transpose y, in tiles. */
#define TR_TILE 16
#define TRANSPOSE_2D(T)                                                                            \
  static void tr2d_##T(const T *x, T *y, int64_t rows, int64_t cols) {                             \
    for (int64_t i0 = 0; i0 < rows; i0 += TR_TILE) {                                               \
      int64_t i1 = i0 + TR_TILE < rows ? i0 + TR_TILE : rows;                                      \
      for (int64_t j0 = 0; j0 < cols; j0 += TR_TILE) {                                             \
        int64_t j1 = j0 + TR_TILE < cols ? j0 + TR_TILE : cols;                                    \
        for (int64_t j = j0; j < j1; j++)                                                          \
          for (int64_t i = i0; i < i1; i++) y[j * rows + i] = x[i * cols + j];                     \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  /* General: y in row-major over dims od; input stride of each is is. */                          \
  static void trnd_##T(const T *x, T *y, int r, const int64_t *od, const int64_t *is) {            \
    int64_t idx[GR_MAX_RANK] = {0}, off = 0, n = 1, inner = od[r - 1], st = is[r - 1];             \
    for (int d = 0; d < r - 1; d++) n *= od[d];                                                    \
    for (int64_t k = 0; k < n; k++) {                                                              \
      for (int64_t j = 0; j < inner; j++) *y++ = x[off + j * st];                                  \
      for (int d = r - 2; d >= 0; d--) {                                                           \
        off += is[d];                                                                              \
        if (++idx[d] < od[d]) break;                                                               \
        off -= is[d] * od[d];                                                                      \
        idx[d] = 0;                                                                                \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  static void transpose_##T(const void *in, void *out, int r, const int64_t *d, const int *p) {    \
    const T *x = in;                                                                               \
    T *y = out;                                                                                    \
    if (r == 2) {                                                                                  \
      tr2d_##T(x, y, d[0], d[1]);                                                                  \
    } else if (r == 3 && p[0] == 0) { /* batch of matrices */                                      \
      for (int64_t b = 0; b < d[0]; b++)                                                           \
        tr2d_##T(x + b * d[1] * d[2], y + b * d[1] * d[2], d[1], d[2]);                            \
    } else {                                                                                       \
      int64_t st[GR_MAX_RANK], od[GR_MAX_RANK] = {0}, is[GR_MAX_RANK] = {0};                       \
      gr_shape s = gr_shape_make(r, d);                                                            \
      gr_ops_strides(&s, st);                                                                      \
      for (int i = 0; i < r; i++) {                                                                \
        od[i] = d[p[i]];                                                                           \
        is[i] = st[p[i]];                                                                          \
      }                                                                                            \
      trnd_##T(x, y, r, od, is);                                                                   \
    }                                                                                              \
  }

typedef uint8_t tr_u8;
typedef bool tr_bool;
typedef float tr_f32;
typedef double tr_f64;
typedef int32_t tr_i32;
typedef int64_t tr_i64;
TRANSPOSE_2D(tr_f32)
TRANSPOSE_2D(tr_f64)
TRANSPOSE_2D(tr_i32)
TRANSPOSE_2D(tr_i64)
TRANSPOSE_2D(tr_u8)
TRANSPOSE_2D(tr_bool)

typedef void (*tr_fn)(const void *in, void *out, int r, const int64_t *d, const int *p);
static const tr_fn tr_fns[GR_DTYPE_COUNT] = {
    [GR_F32] = transpose_tr_f32, [GR_F64] = transpose_tr_f64, [GR_I32] = transpose_tr_i32,
    [GR_I64] = transpose_tr_i64, [GR_U8] = transpose_tr_u8,   [GR_BOOL] = transpose_tr_bool};

static gr_status transpose_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  int rank = x->shape.rank, perm[GR_MAX_RANK];
  char msg[300];
  gr_status s = read_perm(ctx->node, rank, perm, msg, sizeof msg);
  if (s != GR_OK) return gr_kernel_error(ctx, s, "%s", msg);
  gr_shape os = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) os.dims[i] = x->shape.dims[perm[i]];
  /* Simplify: drop size-1 dims, then merge output neighbours that are input
   * neighbours too. What remains is the real data movement. */
  int newax[GR_MAX_RANK], k = 0;
  int64_t d0[GR_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    newax[i] = x->shape.dims[i] == 1 ? -1 : k;
    if (x->shape.dims[i] != 1) d0[k++] = x->shape.dims[i];
  }
  int p0[GR_MAX_RANK], m = 0;
  for (int i = 0; i < rank; i++)
    if (newax[perm[i]] >= 0) p0[m++] = newax[perm[i]];
  /* groups: runs of consecutive input axes in output order, each one axis */
  int gstart[GR_MAX_RANK], glen[GR_MAX_RANK], r = 0;
  for (int i = 0; i < m; i++) {
    if (i > 0 && p0[i] == p0[i - 1] + 1) {
      glen[r - 1]++;
    } else {
      gstart[r] = p0[i];
      glen[r++] = 1;
    }
  }
  int p[GR_MAX_RANK];
  int64_t d[GR_MAX_RANK];
  for (int gi = 0; gi < r; gi++) {
    p[gi] = 0; /* the group's axis number: groups starting before it in the input */
    for (int h = 0; h < r; h++) p[gi] += gstart[h] < gstart[gi];
    d[p[gi]] = 1;
    for (int a = gstart[gi]; a < gstart[gi] + glen[gi]; a++) d[p[gi]] *= d0[a];
  }
  bool moves = false;
  for (int i = 0; i < r; i++) moves |= p[i] != i;
  if (!moves || gr_tensor_num_elements(x) == 0) return set_view(ctx, &os);
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, x->dtype, &os, &o));
  tr_fns[x->dtype](gr_tensor_data(x), gr_tensor_data(o), r, d, p);
  return GR_OK;
}

static void copy_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *s = &n->out_shapes[0];
  double e = 1;
  for (int i = 0; i < s->rank; i++) e *= s->dims[i] < 0 ? 1.0 : (double)s->dims[i];
  c->flops = 0;
  c->bytes = 2 * e * (double)gr_dtype_size(n->out_dtypes[0]);
}

/* ---- expand_dims, squeeze ----------------------------------------------------------- */

/* Output shape of expand_dims of in (known rank) at axis; false if out of range. */
static bool expand_target(const gr_shape *in, int64_t axis, gr_shape *out) {
  int r = in->rank;
  if (r >= GR_MAX_RANK || axis < -r - 1 || axis > r) return false;
  int ax = (int)(axis < 0 ? axis + r + 1 : axis);
  *out = gr_shape_make(r + 1, NULL);
  for (int i = 0, j = 0; i <= r; i++) out->dims[i] = i == ax ? 1 : in->dims[j++];
  return true;
}

static gr_status expand_dims_shape(gr_shape_ctx *ctx) {
  const gr_shape *in = &ctx->in_shapes[0];
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  if (in->rank < 0) {
    ctx->out_shapes[0] = gr_shape_unknown();
    return GR_OK;
  }
  if (!expand_target(in, axis, &ctx->out_shapes[0])) {
    if (in->rank >= GR_MAX_RANK)
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input already has the maximum rank %d",
                            GR_MAX_RANK);
    return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range [%d, %d]",
                          (long long)axis, -in->rank - 1, in->rank);
  }
  return GR_OK;
}

static gr_status expand_dims_kernel(gr_kernel_ctx *ctx) {
  const gr_shape *in = &ctx->inputs[0].shape;
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  gr_shape out;
  if (!expand_target(in, axis, &out))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                           (long long)axis, in->rank);
  return set_view(ctx, &out);
}

/* Squeeze of in (known rank). Unknown dims: squeezed when named (they must be
 * 1 at run time) and make the result's rank unknown when axes is empty. */
static gr_status squeeze_target(const gr_node *node, const gr_shape *in, gr_shape *out, char *msg,
                                size_t cap) {
  const gr_attr_value *v = gr_node_attr(node, "axes");
  int n = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  bool drop[GR_MAX_RANK] = {false};
  for (int k = 0; k < n; k++) {
    int ax;
    if (!gr_shape_normalize_axis(in->rank, v->ints.v[k], &ax)) {
      snprintf(msg, cap, "axis %lld is out of range for rank %d", (long long)v->ints.v[k],
               in->rank);
      return GR_ERR_OUT_OF_RANGE;
    }
    if (drop[ax]) {
      snprintf(msg, cap, "axis %lld is given twice", (long long)v->ints.v[k]);
      return GR_ERR_INVALID_ARGUMENT;
    }
    if (in->dims[ax] >= 0 && in->dims[ax] != 1) {
      char b[GR_SHAPE_STR_MAX];
      snprintf(msg, cap, "cannot squeeze axis %lld of shape %s: size %lld is not 1",
               (long long)v->ints.v[k], gr_shape_str(in, b), (long long)in->dims[ax]);
      return GR_ERR_SHAPE;
    }
    drop[ax] = true;
  }
  *out = gr_shape_make(0, NULL);
  for (int i = 0; i < in->rank; i++) {
    if (n == 0 && in->dims[i] < 0) {
      *out = gr_shape_unknown();
      return GR_OK;
    }
    if (n == 0 ? in->dims[i] != 1 : !drop[i]) out->dims[out->rank++] = in->dims[i];
  }
  return GR_OK;
}

static gr_status squeeze_shape(gr_shape_ctx *ctx) {
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  if (ctx->in_shapes[0].rank < 0) {
    ctx->out_shapes[0] = gr_shape_unknown();
    return GR_OK;
  }
  char msg[400];
  gr_status s = squeeze_target(ctx->node, &ctx->in_shapes[0], &ctx->out_shapes[0], msg, sizeof msg);
  return s == GR_OK ? GR_OK : gr_shape_error(ctx, s, "%s", msg);
}

static gr_status squeeze_kernel(gr_kernel_ctx *ctx) {
  char msg[400];
  gr_shape out;
  gr_status s = squeeze_target(ctx->node, &ctx->inputs[0].shape, &out, msg, sizeof msg);
  if (s != GR_OK) return gr_kernel_error(ctx, s, "%s", msg);
  return set_view(ctx, &out);
}

/* ---- shape --------------------------------------------------------------------------- */

static gr_status shape_shape(gr_shape_ctx *ctx) {
  int r = ctx->in_shapes[0].rank;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = GR_I64;
  ctx->out_shapes[0] = gr_shape_make(1, (int64_t[]){r >= 0 ? r : GR_DIM_UNKNOWN});
  return GR_OK;
}

static gr_status shape_kernel(gr_kernel_ctx *ctx) {
  const gr_shape *in = &ctx->inputs[0].shape;
  gr_shape os = gr_shape_make(1, (int64_t[]){in->rank});
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, GR_I64, &os, &o));
  if (in->rank > 0) memcpy(gr_tensor_data(o), in->dims, sizeof(int64_t) * (size_t)in->rank);
  return GR_OK;
}

/* ---- size ------------------------------------------------------------------------------ */

static gr_status size_shape(gr_shape_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_I64);
  if (dt != GR_I32 && dt != GR_I64)
    return gr_shape_error(ctx, GR_ERR_DTYPE, "attr dtype must be i32 or i64, got %s",
                          gr_dtype_name(dt));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = gr_shape_scalar();
  return GR_OK;
}

static gr_status size_kernel(gr_kernel_ctx *ctx) {
  int64_t n = gr_tensor_num_elements(&ctx->inputs[0]);
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_I64);
  if (dt == GR_I32 && n > INT32_MAX)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,
                           "x has %lld elements, more than an i32 holds: use dtype i64",
                           (long long)n);
  gr_tensor *o;
  gr_shape s = gr_shape_scalar();
  GR_TRY(gr_kernel_alloc_output(ctx, 0, dt, &s, &o));
  if (dt == GR_I32)
    *(int32_t *)gr_tensor_data(o) = (int32_t)n;
  else
    *(int64_t *)gr_tensor_data(o) = n;
  return GR_OK;
}

/* ---- fill, zeros_like, ones_like ------------------------------------------------------- */

/* Sets every element of t to v (representable in t's dtype: checked by callers). */
static void fill_tensor(gr_tensor *t, double v) {
  int64_t n = gr_tensor_num_elements(t);
  void *p = gr_tensor_data(t);
  switch (t->dtype) {
    case GR_F32: {
      float *y = p, c = (float)v;
      for (int64_t i = 0; i < n; i++) y[i] = c;
      break;
    }
    case GR_F64: {
      double *y = p;
      for (int64_t i = 0; i < n; i++) y[i] = v;
      break;
    }
    case GR_I32: {
      int32_t *y = p, c = (int32_t)v;
      for (int64_t i = 0; i < n; i++) y[i] = c;
      break;
    }
    case GR_I64: {
      int64_t *y = p, c = (int64_t)v;
      for (int64_t i = 0; i < n; i++) y[i] = c;
      break;
    }
    case GR_U8:
      memset(p, (int)(uint8_t)v, (size_t)n);
      break;
    case GR_BOOL:
      memset(p, v != 0, (size_t)n * sizeof(bool));
      break;
    default:
      break;
  }
}

/* Can v (truncated) be stored in dtype t? */
static bool value_fits(gr_dtype t, double v) {
  if (gr_dtype_is_float(t) || t == GR_BOOL) return true;
  if (!isfinite(v)) return false;
  double x = trunc(v);
  switch (t) {
    case GR_I32:
      return x >= -2147483648.0 && x <= 2147483647.0;
    case GR_I64:
      return x >= -9223372036854775808.0 && x < 9223372036854775808.0;
    case GR_U8:
      return x >= 0 && x <= 255;
    default:
      return false;
  }
}

static gr_status fill_shape(gr_shape_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  const gr_shape *s = &gr_node_attr(ctx->node, "shape")->shape;
  double v = gr_node_attr_float(ctx->node, "value", 0);
  if (!gr_shape_is_fully_known(s)) {
    char b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "attr 'shape' %s must be fully known",
                          gr_shape_str(s, b));
  }
  if (!value_fits(dt, v))
    return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "value %g does not fit in %s", v,
                          gr_dtype_name(dt));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = *s;
  return GR_OK;
}

static gr_status fill_kernel(gr_kernel_ctx *ctx) {
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  double v = gr_node_attr_float(ctx->node, "value", 0);
  if (!value_fits(dt, v))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "value %g does not fit in %s", v,
                           gr_dtype_name(dt));
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, dt, &gr_node_attr(ctx->node, "shape")->shape, &o));
  fill_tensor(o, v);
  return GR_OK;
}

static gr_status like_kernel(gr_kernel_ctx *ctx, double v) {
  const gr_tensor *x = &ctx->inputs[0];
  gr_tensor *o;
  GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, x->dtype, &x->shape, &o));
  fill_tensor(o, v);
  return GR_OK;
}
static gr_status zeros_like_kernel(gr_kernel_ctx *ctx) {
  return like_kernel(ctx, 0);
}
static gr_status ones_like_kernel(gr_kernel_ctx *ctx) {
  return like_kernel(ctx, 1);
}

/* ---- definitions ------------------------------------------------------------------------- */

static const char *const x_name[] = {"x"};

static const gr_attr_spec reshape_attrs[] = {{"shape", GR_ATTR_SHAPE, true, {0}}};
/* ---- gradients ------------------------------------------------------------------ */

/* reshape, expand_dims, squeeze: the gradient is dy viewed with x's shape */
static gr_status view_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_reshape_like(c->graph, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}
/* transpose by the inverse permutation (empty perm: reversal, its own inverse) */
static gr_status transpose_grad(gr_grad_ctx *c) {
  const gr_attr_value *p = gr_node_attr(c->node, "perm");
  int n = p->ints.n;
  int64_t inv[GR_MAX_RANK];
  for (int i = 0; i < n && i < GR_MAX_RANK; i++) {
    int64_t k = p->ints.v[i] < 0 ? p->ints.v[i] + n : p->ints.v[i];
    if (k >= 0 && k < n) inv[k] = i;
  }
  c->dinputs[0] = gr_transpose(c->graph, c->grads[0], n ? inv : NULL, n);
  return GR_OK;
}

const gr_op_def gr_op_reshape = {.name = "reshape",
                                 .doc = "a view of x with attr shape (one dim may be -1)",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .input_names = x_name,
                                 .num_outputs = 1,
                                 .attrs = reshape_attrs,
                                 .num_attrs = 1,
                                 .shape_fn = reshape_shape,
                                 .cost_fn = gr_cost_fn_free,
                                 .kernel = reshape_kernel,
                                 .grad_fn = view_grad};

static const gr_attr_spec transpose_attrs[] = {
    {"perm", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}}};
const gr_op_def gr_op_transpose = {.name = "transpose",
                                   .doc = "permutes the axes (attr perm; empty = reverse)",
                                   .min_inputs = 1,
                                   .max_inputs = 1,
                                   .input_names = x_name,
                                   .num_outputs = 1,
                                   .attrs = transpose_attrs,
                                   .num_attrs = 1,
                                   .shape_fn = transpose_shape,
                                   .cost_fn = copy_cost,
                                   .kernel = transpose_kernel,
                                   .grad_fn = transpose_grad};

static const gr_attr_spec expand_dims_attrs[] = {
    {"axis", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};
const gr_op_def gr_op_expand_dims = {.name = "expand_dims",
                                     .doc = "inserts a dim of size 1 at attr axis (-1: append)",
                                     .min_inputs = 1,
                                     .max_inputs = 1,
                                     .input_names = x_name,
                                     .num_outputs = 1,
                                     .attrs = expand_dims_attrs,
                                     .num_attrs = 1,
                                     .shape_fn = expand_dims_shape,
                                     .cost_fn = gr_cost_fn_free,
                                     .kernel = expand_dims_kernel,
                                     .grad_fn = view_grad};

static const gr_attr_spec squeeze_attrs[] = {
    {"axes", GR_ATTR_INTS, false, {.type = GR_ATTR_INTS, .ints = {0, NULL}}}};
const gr_op_def gr_op_squeeze = {.name = "squeeze",
                                 .doc = "removes dims of size 1 (attr axes; empty = all)",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .input_names = x_name,
                                 .num_outputs = 1,
                                 .attrs = squeeze_attrs,
                                 .num_attrs = 1,
                                 .shape_fn = squeeze_shape,
                                 .cost_fn = gr_cost_fn_free,
                                 .kernel = squeeze_kernel,
                                 .grad_fn = view_grad};

const gr_op_def gr_op_shape = {.name = "shape",
                               .doc = "the runtime shape of x as an i64 vector",
                               .min_inputs = 1,
                               .max_inputs = 1,
                               .input_names = x_name,
                               .num_outputs = 1,
                               .shape_fn = shape_shape,
                               .cost_fn = gr_cost_fn_free,
                               .kernel = shape_kernel,
                               .flags = GR_OP_NO_GRADIENT};

static const gr_attr_spec size_attrs[] = {
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_I64}}};
const gr_op_def gr_op_size = {.name = "size",
                              .doc = "the number of elements of x at run time, a scalar of attr "
                                     "dtype (i64, or i32: an error beyond its range), as tf.size",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .input_names = x_name,
                              .num_outputs = 1,
                              .attrs = size_attrs,
                              .num_attrs = 1,
                              .shape_fn = size_shape,
                              .cost_fn = gr_cost_fn_free,
                              .kernel = size_kernel,
                              .flags = GR_OP_NO_GRADIENT};

static const gr_attr_spec fill_attrs[] = {
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_F32}},
    {"shape", GR_ATTR_SHAPE, true, {0}},
    {"value", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0}}};
const gr_op_def gr_op_fill = {.name = "fill",
                              .doc = "a tensor of attrs dtype and shape filled with attr value",
                              .num_outputs = 1,
                              .attrs = fill_attrs,
                              .num_attrs = 3,
                              .shape_fn = fill_shape,
                              .kernel = fill_kernel,
                              .flags = GR_OP_REMADE};

const gr_op_def gr_op_zeros_like = {.name = "zeros_like",
                                    .doc = "zeros of the dtype and shape of x",
                                    .min_inputs = 1,
                                    .max_inputs = 1,
                                    .input_names = x_name,
                                    .num_outputs = 1,
                                    .shape_fn = gr_shape_fn_unchanged,
                                    .kernel = zeros_like_kernel,
                                    .flags = GR_OP_NO_GRADIENT};

const gr_op_def gr_op_ones_like = {.name = "ones_like",
                                   .doc = "ones of the dtype and shape of x",
                                   .min_inputs = 1,
                                   .max_inputs = 1,
                                   .input_names = x_name,
                                   .num_outputs = 1,
                                   .shape_fn = gr_shape_fn_unchanged,
                                   .kernel = ones_like_kernel,
                                   .flags = GR_OP_NO_GRADIENT};

/* ---- builders ------------------------------------------------------------------------------ */

gr_output gr_reshape(gr_graph *g, gr_output x, gr_shape shape) {
  gr_attr a = gr_attr_shape("shape", shape);
  return gr_ops_build(g, "reshape", NULL, &x, 1, &a, 1);
}

gr_output gr_transpose(gr_graph *g, gr_output x, const int64_t *perm, int n) {
  gr_attr a = gr_attr_ints("perm", perm ? n : 0, perm);
  return gr_ops_build(g, "transpose", NULL, &x, 1, &a, 1);
}

gr_output gr_expand_dims(gr_graph *g, gr_output x, int64_t axis) {
  gr_attr a = gr_attr_int("axis", axis);
  return gr_ops_build(g, "expand_dims", NULL, &x, 1, &a, 1);
}

gr_output gr_squeeze(gr_graph *g, gr_output x, const int64_t *axes, int n) {
  gr_attr a = gr_attr_ints("axes", axes ? n : 0, axes);
  return gr_ops_build(g, "squeeze", NULL, &x, 1, &a, 1);
}

gr_output gr_shape_of(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "shape", NULL, &x, 1, NULL, 0);
}
gr_output gr_size(gr_graph *g, gr_output x, gr_dtype dtype) {
  gr_attr a = gr_attr_dtype("dtype", dtype);
  return gr_ops_build(g, "size", NULL, &x, 1, &a, 1);
}

gr_output gr_fill(gr_graph *g, gr_dtype dtype, gr_shape shape, double value) {
  gr_attr a[] = {gr_attr_dtype("dtype", dtype), gr_attr_shape("shape", shape),
                 gr_attr_float("value", value)};
  return gr_ops_build(g, "fill", NULL, NULL, 0, a, 3);
}

gr_output gr_zeros(gr_graph *g, gr_dtype dtype, gr_shape shape) {
  return gr_fill(g, dtype, shape, 0);
}
gr_output gr_ones(gr_graph *g, gr_dtype dtype, gr_shape shape) {
  return gr_fill(g, dtype, shape, 1);
}

gr_output gr_zeros_like(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "zeros_like", NULL, &x, 1, NULL, 0);
}
gr_output gr_ones_like(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "ones_like", NULL, &x, 1, NULL, 0);
}
