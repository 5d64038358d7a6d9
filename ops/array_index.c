/* Indexing and combining ops: concat, split, slice, gather, one_hot, tile and
 * pad. They move elements without looking at them, so they work for every
 * dtype: copies go by element size in the largest contiguous blocks the
 * layout allows, and split and slice return views of their input (no copy)
 * when the selected part is contiguous in memory. */
#include <stdio.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- shared helpers ---------------------------------------------------------- */

#define MAX_DIM ((int64_t)1 << 50) /* no tensor can be larger than this */

/* Product of dims[from..to) computed in unsigned arithmetic (no UB even for
 * the dims of an empty tensor; exact whenever the tensor is non-empty). */
static int64_t prod(const int64_t *dims, int from, int to) {
  uint64_t p = 1;
  for (int i = from; i < to; i++) p *= (uint64_t)dims[i];
  return (int64_t)p;
}

/* Number of elements of a fully known shape, 0 if any dim is 0. */
static int64_t numel(const gr_shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] == 0) return 0;
  return prod(s->dims, 0, s->rank);
}

static void strides_of(const int64_t *dims, int r, int64_t *st) {
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) {
    st[i] = s;
    s = (int64_t)((uint64_t)s * (uint64_t)dims[i]);
  }
}

/* A shape of rank r with every dim unknown (rank -1: unknown rank). */
static gr_shape unknown_dims(int r) {
  gr_shape s = gr_shape_unknown();
  s.rank = r;
  for (int i = 0; i < r && i < GR_MAX_RANK; i++) s.dims[i] = GR_DIM_UNKNOWN;
  return s;
}

/* One contiguous block: constant-size memcpy for the common element sizes so
 * the compiler inlines it. */
static inline void copy_block(char *dst, const char *src, size_t bytes) {
  if (bytes == 4)
    memcpy(dst, src, 4);
  else if (bytes == 8)
    memcpy(dst, src, 8);
  else
    memcpy(dst, src, bytes);
}

/* Copies a box of dims `box` (rank r, non-empty) from the row-major array src
 * (dims sdims) starting at element soff into the array dst (dims ddims)
 * starting at element doff. Trailing dims that are whole in both arrays are
 * merged into one memcpy block. */
static void copy_box(char *dst, const int64_t *ddims, int64_t doff, const char *src,
                     const int64_t *sdims, int64_t soff, const int64_t *box, int r, size_t es) {
  int64_t ds[GR_MAX_RANK], ss[GR_MAX_RANK], idx[GR_MAX_RANK] = {0};
  strides_of(ddims, r, ds);
  strides_of(sdims, r, ss);
  int k = r - 1;
  int64_t blk = r ? box[k] : 1;
  while (k > 0 && box[k] == sdims[k] && box[k] == ddims[k]) blk *= box[--k];
  size_t bytes = (size_t)blk * es;
  int64_t count = prod(box, 0, r) / blk;
  for (int64_t c = 0; c < count; c++) {
    copy_block(dst + (size_t)doff * es, src + (size_t)soff * es, bytes);
    for (int j = k - 1; j >= 0; j--) {
      doff += ds[j];
      soff += ss[j];
      if (++idx[j] < box[j]) break;
      doff -= box[j] * ds[j];
      soff -= box[j] * ss[j];
      idx[j] = 0;
    }
  }
}

/* Output i = the box of x at `begin` with shape `box`: a view of x when the
 * box is contiguous in x's memory, else a copy. */
static gr_status take_box(gr_kernel_ctx *ctx, int i, const gr_tensor *x, const int64_t *begin,
                          const gr_shape *box) {
  gr_tensor *o;
  int r = x->shape.rank;
  size_t es = gr_dtype_size(x->dtype);
  if (numel(box) == 0) return gr_kernel_alloc_output(ctx, i, x->dtype, box, &o);
  int64_t st[GR_MAX_RANK], off = 0;
  strides_of(x->shape.dims, r, st);
  for (int d = 0; d < r; d++) off += begin[d] * st[d];
  /* contiguous: leading dims of size 1, then one partial dim, then whole dims */
  int j = 0;
  while (j < r && box->dims[j] == 1) j++;
  bool contiguous = true;
  for (int d = j + 1; d < r; d++) contiguous = contiguous && box->dims[d] == x->shape.dims[d];
  if (contiguous) {
    gr_tensor v = *x;
    v.offset += (size_t)off * es;
    v.shape = *box;
    gr_kernel_set_output(ctx, i, &v);
    return GR_OK;
  }
  GR_TRY(gr_kernel_alloc_output(ctx, i, x->dtype, box, &o));
  copy_box(gr_tensor_data(o), box->dims, 0, gr_tensor_data(x), x->shape.dims, off, box->dims, r,
           es);
  return GR_OK;
}

/* Can v be stored in dtype dt (integers truncate toward zero)? */
static bool value_fits(gr_dtype dt, double v) {
  switch (dt) {
    case GR_I32:
      return v > -2147483649.0 && v < 2147483648.0;
    case GR_I64:
      return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case GR_U8:
      return v > -1.0 && v < 256.0;
    default:
      return true;
  }
}

/* Stores v as one element of dtype dt at p, which need not be aligned (0
 * when v does not fit). */
static void store_value(gr_dtype dt, double v, void *p) {
  if (!value_fits(dt, v)) v = 0;
  union {
    float f;
    double d;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    bool b;
  } e;
  switch (dt) {
    case GR_F32:
      e.f = (float)v;
      break;
    case GR_F64:
      e.d = v;
      break;
    case GR_I32:
      e.i32 = (int32_t)v;
      break;
    case GR_I64:
      e.i64 = (int64_t)v;
      break;
    case GR_U8:
      e.u8 = (uint8_t)v;
      break;
    default:
      e.b = v != 0;
      break;
  }
  memcpy(p, &e, gr_dtype_size(dt));
}

static gr_status check_value(gr_shape_ctx *ctx, const char *attr, gr_dtype dt) {
  double v = gr_node_attr_float(ctx->node, attr, 0);
  if (value_fits(dt, v)) return GR_OK;
  return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s %g does not fit in dtype %s", attr, v,
                        gr_dtype_name(dt));
}

/* Fills n elements of size es at dst with copies of the element at elem. */
static void fill_elems(char *dst, const char *elem, int64_t n, size_t es) {
  size_t total = (size_t)n * es, done = es;
  bool zero = true;
  for (size_t i = 0; i < es; i++) zero = zero && elem[i] == 0;
  if (zero || n <= 0) {
    if (n > 0) memset(dst, 0, total);
    return;
  }
  memcpy(dst, elem, es);
  while (done < total) { /* doubling copies */
    size_t c = done < total - done ? done : total - done;
    memcpy(dst + done, dst, c);
    done += c;
  }
}

/* Reads an index element of an i32/i64 tensor. */
static int64_t index_at(const gr_tensor *t, int64_t i) {
  return t->dtype == GR_I32 ? ((const int32_t *)gr_tensor_data(t))[i]
                            : ((const int64_t *)gr_tensor_data(t))[i];
}

static const int64_t *ints_attr(const gr_node *n, const char *name, int *len) {
  const gr_attr_value *v = gr_node_attr(n, name);
  *len = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  return *len ? v->ints.v : NULL;
}

/* Data movement: no arithmetic, the output is read and written once. */
static void move_cost(const gr_node *n, gr_cost *c) {
  double bytes = 0;
  for (int k = 0; k < n->num_outputs; k++) {
    const gr_shape *s = &n->out_shapes[k];
    double e = (double)gr_dtype_size(n->out_dtypes[k]);
    for (int i = 0; i < s->rank; i++) e *= s->dims[i] < 0 ? 1.0 : (double)s->dims[i];
    bytes += 2 * e;
  }
  c->flops = 0;
  c->bytes = bytes;
}

#define SHAPE_STR(s) gr_shape_str((s), (char[GR_SHAPE_STR_MAX]){0})

/* ---- concat ------------------------------------------------------------------ */

static gr_status concat_shape(gr_shape_ctx *ctx) {
  int n = ctx->num_inputs, rank = -1, first = 0, ax;
  for (int i = 1; i < n; i++) GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
  for (int i = 0; i < n; i++) {
    int r = ctx->in_shapes[i].rank;
    if (r < 0) continue;
    if (rank < 0) {
      rank = r;
      first = i;
    } else if (r != rank) {
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d has shape %s but input %d has shape %s",
                            first, SHAPE_STR(&ctx->in_shapes[first]), i,
                            SHAPE_STR(&ctx->in_shapes[i]));
    }
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = gr_shape_unknown();
  if (rank < 0) return GR_OK;
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  if (rank == 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "cannot concatenate scalars");
  if (!gr_shape_normalize_axis(rank, axis, &ax))
    return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                          (long long)axis, rank);
  gr_shape out = unknown_dims(rank);
  for (int d = 0; d < rank; d++) {
    int64_t v = d == ax ? 0 : GR_DIM_UNKNOWN;
    int from = first; /* the input v came from */
    for (int i = 0; i < n; i++) {
      const gr_shape *s = &ctx->in_shapes[i];
      int64_t di = s->rank < 0 ? GR_DIM_UNKNOWN : s->dims[d];
      if (d == ax) {
        if (v < 0 || di < 0)
          v = GR_DIM_UNKNOWN;
        else if (di > INT64_MAX - v)
          return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "concatenated dimension is too large");
        else
          v += di;
      } else if (di >= 0 && v >= 0 && di != v) {
        return gr_shape_error(ctx, GR_ERR_SHAPE,
                              "dimension %d differs: input %d has shape %s, input %d has %s", d,
                              from, SHAPE_STR(&ctx->in_shapes[from]), i, SHAPE_STR(s));
      } else if (di >= 0) {
        v = di;
        from = i;
      }
    }
    out.dims[d] = v;
  }
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status concat_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x0 = &ctx->inputs[0];
  int n = ctx->num_inputs, r = x0->shape.rank, ax;
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  if (r == 0) return gr_kernel_error(ctx, GR_ERR_SHAPE, "cannot concatenate scalars");
  if (!gr_shape_normalize_axis(r, axis, &ax))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                           (long long)axis, r);
  gr_shape os = x0->shape;
  os.dims[ax] = 0;
  for (int i = 0; i < n; i++) {
    const gr_tensor *x = &ctx->inputs[i];
    bool ok = x->dtype == x0->dtype && x->shape.rank == r;
    for (int d = 0; ok && d < r; d++) ok = d == ax || x->shape.dims[d] == x0->shape.dims[d];
    if (!ok)
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "input 0 is %s %s but input %d is %s %s (axis %d)",
                             gr_dtype_name(x0->dtype), SHAPE_STR(&x0->shape), i,
                             gr_dtype_name(x->dtype), SHAPE_STR(&x->shape), ax);
    if (x->shape.dims[ax] > INT64_MAX - os.dims[ax])
      return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "concatenated dimension is too large");
    os.dims[ax] += x->shape.dims[ax];
  }
  if (n == 1) {
    gr_kernel_set_output(ctx, 0, x0);
    return GR_OK;
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, x0->dtype, &os, &o));
  if (numel(&os) == 0) return GR_OK;
  size_t es = gr_dtype_size(x0->dtype);
  int64_t outer = prod(os.dims, 0, ax), row = prod(os.dims, ax, r) * (int64_t)es;
  char *dst = gr_tensor_data(o);
  for (int64_t k = 0; k < outer; k++) {
    char *p = dst + k * row;
    for (int i = 0; i < n; i++) {
      const gr_tensor *x = &ctx->inputs[i];
      int64_t bytes = prod(x->shape.dims, ax, r) * (int64_t)es;
      if (bytes) memcpy(p, (const char *)gr_tensor_data(x) + k * bytes, (size_t)bytes);
      p += bytes;
    }
  }
  return GR_OK;
}

/* ---- split ------------------------------------------------------------------- */

static gr_status split_shape(gr_shape_ctx *ctx) {
  int64_t num = gr_node_attr_int(ctx->node, "num_split", 1);
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  const gr_shape *s = &ctx->in_shapes[0];
  if (num < 1 || num > GR_MAX_OUTPUTS)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "num_split %lld is not in [1, %d]",
                          (long long)num, GR_MAX_OUTPUTS);
  gr_shape out = *s;
  if (s->rank == 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "cannot split a scalar");
  if (s->rank > 0) {
    int ax;
    if (!gr_shape_normalize_axis(s->rank, axis, &ax))
      return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                            (long long)axis, s->rank);
    if (s->dims[ax] >= 0 && s->dims[ax] % num != 0)
      return gr_shape_error(ctx, GR_ERR_SHAPE,
                            "dimension %d of %s (size %lld) does not split into %lld equal parts",
                            ax, SHAPE_STR(s), (long long)s->dims[ax], (long long)num);
    if (s->dims[ax] >= 0) out.dims[ax] = s->dims[ax] / num;
  }
  ctx->num_outputs = (int)num;
  for (int i = 0; i < num; i++) {
    ctx->out_dtypes[i] = ctx->in_dtypes[0];
    ctx->out_shapes[i] = out;
  }
  return GR_OK;
}

static gr_status split_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  int num = ctx->num_outputs, r = x->shape.rank, ax;
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  if (r == 0) return gr_kernel_error(ctx, GR_ERR_SHAPE, "cannot split a scalar");
  if (!gr_shape_normalize_axis(r, axis, &ax))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                           (long long)axis, r);
  if (x->shape.dims[ax] % num != 0)
    return gr_kernel_error(ctx, GR_ERR_SHAPE,
                           "dimension %d of %s (size %lld) does not split into %d equal parts", ax,
                           SHAPE_STR(&x->shape), (long long)x->shape.dims[ax], num);
  gr_shape box = x->shape;
  box.dims[ax] /= num;
  int64_t begin[GR_MAX_RANK] = {0};
  for (int i = 0; i < num; i++) {
    begin[ax] = i * box.dims[ax];
    GR_TRY(take_box(ctx, i, x, begin, &box));
  }
  return GR_OK;
}

/* ---- slice ------------------------------------------------------------------- */

/* Checks begin/size against a dim (unknown: only signs); sets *out_dim. */
static bool slice_dim(int64_t b, int64_t sz, int64_t dim, int64_t *out_dim) {
  if (b < 0 || sz < -1) return false;
  if (dim < 0) {
    *out_dim = sz;
    return true;
  }
  if (b > dim || (sz >= 0 && sz > dim - b)) return false;
  *out_dim = sz < 0 ? dim - b : sz;
  return true;
}

static gr_status slice_shape(gr_shape_ctx *ctx) {
  int nb, ns;
  const int64_t *begin = ints_attr(ctx->node, "begin", &nb);
  const int64_t *size = ints_attr(ctx->node, "size", &ns);
  const gr_shape *s = &ctx->in_shapes[0];
  if (nb != ns || (s->rank >= 0 && nb != s->rank) || nb > GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "begin has %d values and size %d; the input %s needs one per dim", nb, ns,
                          SHAPE_STR(s));
  gr_shape out = unknown_dims(nb);
  for (int d = 0; d < nb; d++)
    if (!slice_dim(begin[d], size[d], s->rank < 0 ? -1 : s->dims[d], &out.dims[d]))
      return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE,
                            "begin %lld, size %lld is out of bounds for dim %d of input %s",
                            (long long)begin[d], (long long)size[d], d, SHAPE_STR(s));
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status slice_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  int nb, ns, r = x->shape.rank;
  const int64_t *begin = ints_attr(ctx->node, "begin", &nb);
  const int64_t *size = ints_attr(ctx->node, "size", &ns);
  if (nb != r || ns != r)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "begin has %d values and size %d; the input %s needs one per dim", nb,
                           ns, SHAPE_STR(&x->shape));
  gr_shape box = x->shape;
  for (int d = 0; d < r; d++)
    if (!slice_dim(begin[d], size[d], x->shape.dims[d], &box.dims[d]))
      return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,
                             "begin %lld, size %lld is out of bounds for dim %d of input %s",
                             (long long)begin[d], (long long)size[d], d, SHAPE_STR(&x->shape));
  return take_box(ctx, 0, x, begin, &box);
}

/* ---- gather ------------------------------------------------------------------ */

static gr_status gather_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 1, GR_DT_INDEX));
  const gr_shape *p = &ctx->in_shapes[0], *ix = &ctx->in_shapes[1];
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  int ax;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = gr_shape_unknown();
  if (p->rank == 0) return gr_shape_error(ctx, GR_ERR_SHAPE, "params must have rank >= 1");
  if (p->rank < 0) return GR_OK;
  if (!gr_shape_normalize_axis(p->rank, axis, &ax))
    return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                          (long long)axis, p->rank);
  if (ix->rank < 0) return GR_OK;
  if (p->rank - 1 + ix->rank > GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "params %s and indices %s give a rank above %d",
                          SHAPE_STR(p), SHAPE_STR(ix), GR_MAX_RANK);
  gr_shape out = unknown_dims(p->rank - 1 + ix->rank);
  int k = 0;
  for (int d = 0; d < ax; d++) out.dims[k++] = p->dims[d];
  for (int d = 0; d < ix->rank; d++) out.dims[k++] = ix->dims[d];
  for (int d = ax + 1; d < p->rank; d++) out.dims[k++] = p->dims[d];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

/* "[i, j, ...]" for flat element i of a shape, into buf. */
static const char *position_str(const gr_shape *s, int64_t flat, char *buf, size_t cap) {
  int64_t idx[GR_MAX_RANK];
  for (int d = s->rank - 1; d >= 0; d--) {
    idx[d] = flat % s->dims[d];
    flat /= s->dims[d];
  }
  if (s->rank == 0) return "";
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < s->rank && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)idx[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

static gr_status gather_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *p = &ctx->inputs[0], *ix = &ctx->inputs[1];
  int r = p->shape.rank, ri = ix->shape.rank, ax;
  int64_t axis = gr_node_attr_int(ctx->node, "axis", 0);
  if (ix->dtype != GR_I32 && ix->dtype != GR_I64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "indices must be i32 or i64");
  if (r == 0 || r - 1 + ri > GR_MAX_RANK)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "cannot gather from params %s with indices %s",
                           SHAPE_STR(&p->shape), SHAPE_STR(&ix->shape));
  if (!gr_shape_normalize_axis(r, axis, &ax))
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "axis %lld is out of range for rank %d",
                           (long long)axis, r);
  int64_t lim = p->shape.dims[ax], ni = numel(&ix->shape);
  for (int64_t j = 0; j < ni; j++) {
    int64_t v = index_at(ix, j);
    if (v < 0 || v >= lim) {
      char pos[128];
      return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE,
                             "indices%s = %lld is out of range [0, %lld) for axis %d of params %s",
                             position_str(&ix->shape, j, pos, sizeof pos), (long long)v,
                             (long long)lim, ax, SHAPE_STR(&p->shape));
    }
  }
  gr_shape os = gr_shape_unknown();
  os.rank = r - 1 + ri;
  int k = 0;
  for (int d = 0; d < ax; d++) os.dims[k++] = p->shape.dims[d];
  for (int d = 0; d < ri; d++) os.dims[k++] = ix->shape.dims[d];
  for (int d = ax + 1; d < r; d++) os.dims[k++] = p->shape.dims[d];
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, p->dtype, &os, &o));
  if (numel(&os) == 0) return GR_OK;
  size_t bytes = (size_t)prod(p->shape.dims, ax + 1, r) * gr_dtype_size(p->dtype);
  int64_t outer = prod(p->shape.dims, 0, ax);
  const char *src = gr_tensor_data(p);
  char *dst = gr_tensor_data(o);
  for (int64_t a = 0; a < outer; a++) {
    const char *base = src + (size_t)(a * lim) * bytes;
    if (ix->dtype == GR_I32) {
      const int32_t *iv = gr_tensor_data(ix);
      for (int64_t j = 0; j < ni; j++, dst += bytes) copy_block(dst, base + iv[j] * bytes, bytes);
    } else {
      const int64_t *iv = gr_tensor_data(ix);
      for (int64_t j = 0; j < ni; j++, dst += bytes)
        copy_block(dst, base + (size_t)iv[j] * bytes, bytes);
    }
  }
  return GR_OK;
}

/* ---- one_hot ----------------------------------------------------------------- */

static gr_status one_hot_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_INDEX));
  int64_t depth = gr_node_attr_int(ctx->node, "depth", 0);
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  const gr_shape *s = &ctx->in_shapes[0];
  if (depth < 0 || depth > MAX_DIM)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "depth %lld is not in [0, 2^50]",
                          (long long)depth);
  GR_TRY(check_value(ctx, "on_value", dt));
  GR_TRY(check_value(ctx, "off_value", dt));
  if (s->rank >= GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "indices %s leave no room for the depth axis",
                          SHAPE_STR(s));
  gr_shape out = *s;
  if (s->rank >= 0) out.dims[out.rank++] = depth;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = dt;
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status one_hot_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *ix = &ctx->inputs[0];
  int64_t depth = gr_node_attr_int(ctx->node, "depth", 0);
  gr_dtype dt = gr_node_attr_dtype(ctx->node, "dtype", GR_F32);
  if (ix->dtype != GR_I32 && ix->dtype != GR_I64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "indices must be i32 or i64");
  if (ix->shape.rank >= GR_MAX_RANK || depth < 0)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "indices %s with depth %lld", SHAPE_STR(&ix->shape),
                           (long long)depth);
  gr_shape os = ix->shape;
  os.dims[os.rank++] = depth;
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, dt, &os, &o));
  int64_t n = numel(&ix->shape);
  if (numel(&os) == 0) return GR_OK;
  size_t es = gr_dtype_size(dt);
  char on[8], off[8], *dst = gr_tensor_data(o);
  store_value(dt, gr_node_attr_float(ctx->node, "on_value", 1), on);
  store_value(dt, gr_node_attr_float(ctx->node, "off_value", 0), off);
  fill_elems(dst, off, n * depth, es);
  for (int64_t j = 0; j < n; j++) {
    int64_t v = index_at(ix, j);
    if (v >= 0 && v < depth) copy_block(dst + (size_t)(j * depth + v) * es, on, es);
  }
  return GR_OK;
}

/* ---- tile -------------------------------------------------------------------- */

/* dim * m, or -1 when that is too large. */
static int64_t tile_dim(int64_t dim, int64_t m) {
  if (dim == 0 || m == 0) return 0;
  return dim > MAX_DIM / m ? -1 : dim * m;
}

static gr_status tile_shape(gr_shape_ctx *ctx) {
  int n;
  const int64_t *mult = ints_attr(ctx->node, "multiples", &n);
  const gr_shape *s = &ctx->in_shapes[0];
  if ((s->rank >= 0 && n != s->rank) || n > GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "multiples has %d values; the input %s needs one per dim", n,
                          SHAPE_STR(s));
  gr_shape out = unknown_dims(n);
  for (int d = 0; d < n; d++) {
    int64_t dim = s->rank < 0 ? GR_DIM_UNKNOWN : s->dims[d];
    if (mult[d] < 0)
      return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "multiples[%d] is %lld (must be >= 0)", d,
                            (long long)mult[d]);
    if (mult[d] == 0)
      out.dims[d] = 0;
    else if (dim >= 0 && (out.dims[d] = tile_dim(dim, mult[d])) < 0)
      return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "tiling %s by %lld along dim %d is too large",
                            SHAPE_STR(s), (long long)mult[d], d);
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

typedef struct tile_plan {
  int rank;
  const int64_t *in, *mult;
  size_t in_stride[GR_MAX_RANK], out_stride[GR_MAX_RANK]; /* bytes */
} tile_plan;

/* Writes the tiled block of dims d.. at dst: the input rows first, then the
 * finished block replicated mult[d] - 1 times with one memcpy each. */
static void tile_rec(const tile_plan *p, int d, char *dst, const char *src) {
  if (d == p->rank - 1)
    memcpy(dst, src, (size_t)p->in[d] * p->out_stride[d]);
  else
    for (int64_t i = 0; i < p->in[d]; i++)
      tile_rec(p, d + 1, dst + (size_t)i * p->out_stride[d], src + (size_t)i * p->in_stride[d]);
  size_t blk = (size_t)p->in[d] * p->out_stride[d];
  for (int64_t m = 1; m < p->mult[d]; m++) memcpy(dst + (size_t)m * blk, dst, blk);
}

static gr_status tile_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  int n, r = x->shape.rank;
  const int64_t *mult = ints_attr(ctx->node, "multiples", &n);
  if (n != r)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "multiples has %d values; the input %s needs one per dim", n,
                           SHAPE_STR(&x->shape));
  gr_shape os = x->shape;
  bool same = true;
  for (int d = 0; d < r; d++) {
    if (mult[d] < 0 || (os.dims[d] = tile_dim(x->shape.dims[d], mult[d])) < 0)
      return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "cannot tile %s by %lld along dim %d",
                             SHAPE_STR(&x->shape), (long long)mult[d], d);
    same = same && mult[d] == 1;
  }
  if (same) {
    gr_kernel_set_output(ctx, 0, x);
    return GR_OK;
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, x->dtype, &os, &o));
  if (numel(&os) == 0) return GR_OK;
  tile_plan p = {.rank = r, .in = x->shape.dims, .mult = mult};
  size_t es = gr_dtype_size(x->dtype), si = es, so = es;
  for (int d = r - 1; d >= 0; d--) {
    p.in_stride[d] = si;
    p.out_stride[d] = so;
    si *= (size_t)x->shape.dims[d];
    so *= (size_t)os.dims[d];
  }
  tile_rec(&p, 0, gr_tensor_data(o), gr_tensor_data(x));
  return GR_OK;
}

/* ---- pad --------------------------------------------------------------------- */

static gr_status pad_shape(gr_shape_ctx *ctx) {
  int n;
  const int64_t *pads = ints_attr(ctx->node, "paddings", &n);
  const gr_shape *s = &ctx->in_shapes[0];
  if (n % 2 || (s->rank >= 0 && n != 2 * s->rank) || n > 2 * GR_MAX_RANK)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "paddings has %d values; the input %s needs two per dim", n,
                          SHAPE_STR(s));
  GR_TRY(check_value(ctx, "value", ctx->in_dtypes[0]));
  gr_shape out = unknown_dims(n / 2);
  for (int d = 0; d < n / 2; d++) {
    int64_t b = pads[2 * d], a = pads[2 * d + 1];
    if (b < 0 || a < 0 || b > MAX_DIM || a > MAX_DIM)
      return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                            "paddings for dim %d are (%lld, %lld); each must be in [0, 2^50]", d,
                            (long long)b, (long long)a);
    int64_t dim = s->rank < 0 ? GR_DIM_UNKNOWN : s->dims[d];
    if (dim > MAX_DIM)
      return gr_shape_error(ctx, GR_ERR_OUT_OF_RANGE, "padding %s is too large", SHAPE_STR(s));
    out.dims[d] = dim < 0 ? GR_DIM_UNKNOWN : dim + b + a;
  }
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

static gr_status pad_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *x = &ctx->inputs[0];
  int n, r = x->shape.rank;
  const int64_t *pads = ints_attr(ctx->node, "paddings", &n);
  if (n != 2 * r)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "paddings has %d values; the input %s needs two per dim", n,
                           SHAPE_STR(&x->shape));
  gr_shape os = x->shape;
  int64_t begin[GR_MAX_RANK];
  bool none = true;
  for (int d = 0; d < r; d++) {
    int64_t b = pads[2 * d], a = pads[2 * d + 1], dim = x->shape.dims[d];
    if (b < 0 || a < 0 || b > MAX_DIM || a > MAX_DIM || dim > MAX_DIM)
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                             "paddings (%lld, %lld) for dim %d of %s are invalid", (long long)b,
                             (long long)a, d, SHAPE_STR(&x->shape));
    begin[d] = b;
    os.dims[d] = dim + b + a;
    none = none && b == 0 && a == 0;
  }
  if (none) {
    gr_kernel_set_output(ctx, 0, x);
    return GR_OK;
  }
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, x->dtype, &os, &o));
  int64_t total = numel(&os);
  if (total == 0) return GR_OK;
  size_t es = gr_dtype_size(x->dtype);
  char val[8];
  store_value(x->dtype, gr_node_attr_float(ctx->node, "value", 0), val);
  fill_elems(gr_tensor_data(o), val, total, es);
  if (numel(&x->shape) == 0) return GR_OK;
  int64_t st[GR_MAX_RANK], off = 0;
  strides_of(os.dims, r, st);
  for (int d = 0; d < r; d++) off += begin[d] * st[d];
  copy_box(gr_tensor_data(o), os.dims, off, gr_tensor_data(x), x->shape.dims, 0, x->shape.dims, r,
           es);
  return GR_OK;
}

/* ---- definitions ------------------------------------------------------------- */

#define DEFINE_OP_FLAGS(NAME, DOC, MIN_IN, MAX_IN, NAMES, NOUT, FLAGS)                             \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = MIN_IN,                                            \
                                  .max_inputs = MAX_IN,                                            \
                                  .input_names = NAMES,                                            \
                                  .num_outputs = NOUT,                                             \
                                  .attrs = NAME##_attrs,                                           \
                                  .num_attrs = sizeof NAME##_attrs / sizeof(gr_attr_spec),         \
                                  .shape_fn = NAME##_shape,                                        \
                                  .cost_fn = move_cost,                                            \
                                  .kernel = NAME##_kernel,                                         \
                                  .grad_fn = NAME##_grad,                                          \
                                  .flags = FLAGS};
#define DEFINE_OP(NAME, DOC, MIN_IN, MAX_IN, NAMES, NOUT)                                          \
  DEFINE_OP_FLAGS(NAME, DOC, MIN_IN, MAX_IN, NAMES, NOUT, 0)

/* gradients live in array_index_grad.c */
#define concat_grad  gr_ops_concat_grad
#define split_grad   gr_ops_split_grad
#define slice_grad   gr_ops_slice_grad
#define gather_grad  gr_ops_gather_grad
#define one_hot_grad NULL
#define tile_grad    gr_ops_tile_grad
#define pad_grad     gr_ops_pad_grad

static const char *const x_names[] = {"x"}, *const values_names[] = {"values"};
static const char *const gather_names[] = {"params", "indices"}, *const indices_names[] = {
                                                                     "indices"};

static const gr_attr_spec concat_attrs[] = {{"axis", GR_ATTR_INT, true, {0}}};
DEFINE_OP(concat, "joins tensors along attr axis", 1, -1, values_names, 1)

static const gr_attr_spec split_attrs[] = {
    {"num_split", GR_ATTR_INT, true, {0}},
    {"axis", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};
DEFINE_OP(split, "num_split equal parts along attr axis", 1, 1, x_names, -1)

static const gr_attr_spec slice_attrs[] = {{"begin", GR_ATTR_INTS, true, {0}},
                                           {"size", GR_ATTR_INTS, true, {0}}};
DEFINE_OP(slice, "the block at attr begin of attr size (-1: to the end)", 1, 1, x_names, 1)

static const gr_attr_spec gather_attrs[] = {
    {"axis", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};
DEFINE_OP(gather, "params gathered along attr axis at i32/i64 indices", 2, 2, gather_names, 1)

static const gr_attr_spec one_hot_attrs[] = {
    {"depth", GR_ATTR_INT, true, {0}},
    {"dtype", GR_ATTR_DTYPE, false, {.type = GR_ATTR_DTYPE, .dtype = GR_F32}},
    {"on_value", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 1.0}},
    {"off_value", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.0}}};
DEFINE_OP_FLAGS(one_hot,
                "a new last axis of size depth: on_value at the index, off_value elsewhere (an "
                "index outside [0, depth) gives a row of off_value)",
                1, 1, indices_names, 1, GR_OP_NO_GRADIENT)

static const gr_attr_spec tile_attrs[] = {{"multiples", GR_ATTR_INTS, true, {0}}};
DEFINE_OP(tile, "x repeated attr multiples[i] times along each dim i", 1, 1, x_names, 1)

static const gr_attr_spec pad_attrs[] = {
    {"paddings", GR_ATTR_INTS, true, {0}},
    {"value", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.0}}};
DEFINE_OP(pad, "x padded with attr value by attr paddings (before, after per dim)", 1, 1, x_names,
          1)

/* ---- builders ---------------------------------------------------------------- */

gr_output gr_concat(gr_graph *g, const gr_output *xs, int n, int64_t axis) {
  gr_attr a = gr_attr_int("axis", axis);
  return gr_ops_build(g, "concat", NULL, xs, n, &a, 1);
}

gr_output gr_split(gr_graph *g, gr_output x, int num_split, int64_t axis) {
  gr_attr a[] = {gr_attr_int("num_split", num_split), gr_attr_int("axis", axis)};
  return gr_ops_build(g, "split", NULL, &x, 1, a, 2);
}

gr_output gr_slice(gr_graph *g, gr_output x, const int64_t *begin, const int64_t *size, int n) {
  gr_attr a[] = {gr_attr_ints("begin", n, begin), gr_attr_ints("size", n, size)};
  return gr_ops_build(g, "slice", NULL, &x, 1, a, 2);
}

gr_output gr_gather(gr_graph *g, gr_output params, gr_output indices, int64_t axis) {
  gr_output in[2] = {params, indices};
  gr_attr a = gr_attr_int("axis", axis);
  return gr_ops_build(g, "gather", NULL, in, 2, &a, 1);
}

gr_output gr_one_hot(gr_graph *g, gr_output indices, int64_t depth, gr_dtype dtype) {
  gr_attr a[] = {gr_attr_int("depth", depth), gr_attr_dtype("dtype", dtype)};
  return gr_ops_build(g, "one_hot", NULL, &indices, 1, a, 2);
}

gr_output gr_tile(gr_graph *g, gr_output x, const int64_t *multiples, int n) {
  gr_attr a = gr_attr_ints("multiples", n, multiples);
  return gr_ops_build(g, "tile", NULL, &x, 1, &a, 1);
}

gr_output gr_pad(gr_graph *g, gr_output x, const int64_t *paddings, int n, double value) {
  gr_attr a[] = {gr_attr_ints("paddings", 2 * n, paddings), gr_attr_float("value", value)};
  return gr_ops_build(g, "pad", NULL, &x, 1, a, 2);
}
