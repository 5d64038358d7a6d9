/* Window geometry of the NHWC convolution and pooling ops: attrs, output
 * sizes, im2col / col2im and a strided gemm (conv_internal.h). */
#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* The im2col buffer of one tile stays within this many bytes. */
#define GR_CONV_TILE_BYTES ((int64_t)4 << 20)

#define EMPTY_INTS(NAME)                                                                           \
  {                                                                                                \
    NAME, GR_ATTR_INTS, false, {                                                                   \
      .type = GR_ATTR_INTS, .ints = { 0, NULL }                                                    \
    }                                                                                              \
  }
#define PADDING_ATTR                                                                               \
  {                                                                                                \
    "padding", GR_ATTR_STRING, false, {                                                            \
      .type = GR_ATTR_STRING, .s = "VALID"                                                         \
    }                                                                                              \
  }

#define CONV_ATTRS                                                                                 \
  EMPTY_INTS("strides"), PADDING_ATTR, EMPTY_INTS("explicit_paddings"), EMPTY_INTS("dilations"),   \
      {"groups", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 1}}, GR_DATA_FORMAT_ATTR
const gr_attr_spec gr_conv_attr_specs[6] = {CONV_ATTRS};
const gr_attr_spec gr_fused_conv_attr_specs[8] = {
    CONV_ATTRS,
    {"fused_ops", GR_ATTR_STRING, true, {0}},
    {"epsilon", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 1e-3}}};

#define POOL_ATTRS                                                                                 \
  {"ksize", GR_ATTR_INTS, true, {0}}, EMPTY_INTS("strides"), PADDING_ATTR,                         \
      EMPTY_INTS("explicit_paddings"), GR_DATA_FORMAT_ATTR
const gr_attr_spec gr_pool_attr_specs[5] = {POOL_ATTRS};
const gr_attr_spec gr_pool_grad_attr_specs[6] = {
    POOL_ATTRS, {"relu", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}}};

/* A (height, width) pair from an int-list attr: [] gives dflt, [k] both,
 * [h, w], or TensorFlow's [1, h, w, 1] (NCHW: [1, 1, h, w]); every value
 * must be >= 1. */
static gr_status read_pair(const gr_node *n, const char *name, gr_data_format f,
                           const int64_t dflt[2], int64_t out[2], char *msg, size_t cap) {
  const gr_attr_value *v = gr_node_attr(n, name);
  int cnt = v && v->type == GR_ATTR_INTS ? v->ints.n : 0;
  const int64_t *p = cnt ? v->ints.v : NULL;
  if (cnt == 0) {
    out[0] = dflt[0], out[1] = dflt[1];
  } else if (cnt == 1) {
    out[0] = out[1] = p[0];
  } else if (cnt == 2) {
    out[0] = p[0], out[1] = p[1];
  } else if (cnt == 4 && f == GR_FORMAT_NHWC && p[0] == 1 && p[3] == 1) {
    out[0] = p[1], out[1] = p[2];
  } else if (cnt == 4 && f == GR_FORMAT_NCHW && p[0] == 1 && p[1] == 1) {
    out[0] = p[2], out[1] = p[3];
  } else {
    snprintf(msg, cap, "attr '%s' must have 1, 2 or 4 values (%s) for %s, got %d values", name,
             f == GR_FORMAT_NCHW ? "[1, 1, h, w]" : "[1, h, w, 1]", gr_layout_format_name(f), cnt);
    return GR_ERR_INVALID_ARGUMENT;
  }
  if (out[0] < 1 || out[1] < 1) {
    snprintf(msg, cap, "attr '%s' must be >= 1, got [%lld, %lld]", name, (long long)out[0],
             (long long)out[1]);
    return GR_ERR_INVALID_ARGUMENT;
  }
  return GR_OK;
}

gr_status gr_conv_read_attrs(const gr_node *n, bool pool, gr_conv_attrs *a, char *msg, size_t cap) {
  memset(a, 0, sizeof *a);
  const int64_t ones[2] = {1, 1};
  int64_t k[2] = {1, 1}, s[2], d[2] = {1, 1};
  GR_TRY(gr_layout_read_format(n, &a->format, msg, cap));
  gr_data_format f = a->format;
  if (pool) GR_TRY(read_pair(n, "ksize", f, ones, k, msg, cap));
  GR_TRY(read_pair(n, "strides", f, pool ? k : ones, s, msg, cap));
  if (!pool) GR_TRY(read_pair(n, "dilations", f, ones, d, msg, cap));
  a->kh = k[0], a->kw = k[1], a->sh = s[0], a->sw = s[1], a->dh = d[0], a->dw = d[1];
  a->groups = pool ? 1 : gr_node_attr_int(n, "groups", 1);
  if (a->groups < 1) {
    snprintf(msg, cap, "attr 'groups' must be >= 1, got %lld", (long long)a->groups);
    return GR_ERR_INVALID_ARGUMENT;
  }
  const char *p = gr_node_attr_string(n, "padding", "VALID");
  const gr_attr_value *ep = gr_node_attr(n, "explicit_paddings");
  int np = ep && ep->type == GR_ATTR_INTS ? ep->ints.n : 0;
  if (strcmp(p, "VALID") == 0 || strcmp(p, "valid") == 0) {
    a->padding = GR_CONV_PAD_VALID;
  } else if (strcmp(p, "SAME") == 0 || strcmp(p, "same") == 0) {
    a->padding = GR_CONV_PAD_SAME;
  } else if (strcmp(p, "EXPLICIT") == 0 || strcmp(p, "explicit") == 0) {
    a->padding = GR_CONV_PAD_EXPLICIT;
    if (np != 4) {
      snprintf(msg, cap,
               "padding EXPLICIT needs attr 'explicit_paddings' = [top, bottom, left, right], "
               "got %d values",
               np);
      return GR_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < 4; i++) {
      a->pads[i] = ep->ints.v[i];
      if (a->pads[i] < 0) {
        snprintf(msg, cap, "attr 'explicit_paddings' must be >= 0, got %lld at %d",
                 (long long)a->pads[i], i);
        return GR_ERR_INVALID_ARGUMENT;
      }
    }
  } else {
    snprintf(msg, cap, "unknown padding '%s' (expected SAME, VALID or EXPLICIT)", p);
    return GR_ERR_INVALID_ARGUMENT;
  }
  if (a->padding != GR_CONV_PAD_EXPLICIT && np != 0) {
    snprintf(msg, cap, "attr 'explicit_paddings' is only for padding EXPLICIT (padding is %s)", p);
    return GR_ERR_INVALID_ARGUMENT;
  }
  return GR_OK;
}

gr_status gr_conv_out_dim(const gr_conv_attrs *a, int axis, int64_t in, int64_t *out,
                          int64_t *pad_before, char *msg, size_t cap) {
  int64_t k = axis ? a->kw : a->kh, s = axis ? a->sw : a->sh, d = axis ? a->dw : a->dh;
  int64_t ek = (k - 1) * d + 1;
  *pad_before = 0;
  if (in < 0) {
    *out = -1;
    return GR_OK;
  }
  int64_t padded = in;
  switch (a->padding) {
    case GR_CONV_PAD_SAME: {
      *out = (in + s - 1) / s;
      int64_t total = (*out - 1) * s + ek - in;
      *pad_before = total > 0 ? total / 2 : 0;
      return GR_OK;
    }
    case GR_CONV_PAD_EXPLICIT:
      *pad_before = a->pads[axis ? 2 : 0];
      padded = in + a->pads[axis ? 2 : 0] + a->pads[axis ? 3 : 1];
      break;
    case GR_CONV_PAD_VALID:
      break;
  }
  if (padded < ek) {
    snprintf(msg, cap, "the %s of the %skernel (%lld) is larger than the %s input (%lld)",
             axis ? "width" : "height", d > 1 ? "dilated " : "", (long long)ek,
             a->padding == GR_CONV_PAD_EXPLICIT ? "padded" : "unpadded", (long long)padded);
    return GR_ERR_INVALID_ARGUMENT;
  }
  *out = (padded - ek) / s + 1;
  return GR_OK;
}

int64_t gr_conv_in_dim(const gr_conv_attrs *a, int axis, int64_t out) {
  if (out < 0) return -1;
  int64_t k = axis ? a->kw : a->kh, s = axis ? a->sw : a->sh, d = axis ? a->dw : a->dh;
  int64_t ek = (k - 1) * d + 1;
  switch (a->padding) {
    case GR_CONV_PAD_SAME:
      return out * s;
    case GR_CONV_PAD_EXPLICIT:
      return (out - 1) * s + ek - a->pads[axis ? 2 : 0] - a->pads[axis ? 3 : 1];
    default:
      return (out - 1) * s + ek;
  }
}

gr_status gr_conv_geom_make(const gr_conv_attrs *a, const int64_t nhwc[4], gr_conv_geom *g,
                            char *msg, size_t cap) {
  memset(g, 0, sizeof *g);
  g->n = nhwc[0], g->h = nhwc[1], g->w = nhwc[2], g->c = nhwc[3];
  g->kh = a->kh, g->kw = a->kw, g->sh = a->sh, g->sw = a->sw, g->dh = a->dh, g->dw = a->dw;
  g->groups = a->groups;
  GR_TRY(gr_conv_out_dim(a, 0, g->h, &g->oh, &g->pt, msg, cap));
  return gr_conv_out_dim(a, 1, g->w, &g->ow, &g->pl, msg, cap);
}

bool gr_conv_is_pointwise(const gr_conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
         g->oh == g->h && g->ow == g->w;
}

int64_t gr_conv_tile_rows(int64_t k, gr_dtype dt) {
  int64_t row = k * (int64_t)gr_dtype_size(dt);
  int64_t r = row > 0 ? GR_CONV_TILE_BYTES / row : 1;
  return r > 0 ? r : 1;
}

#define CONV_COLS(T)                                                                               \
  static void cols_##T(const gr_conv_geom *g, T *x, T *col, int64_t p0, int64_t p1, int64_t c0,    \
                       int64_t cg, bool scatter) {                                                 \
    int64_t per_image = g->oh * g->ow, k = g->kh * g->kw * cg;                                     \
    for (int64_t p = p0; p < p1; p++) {                                                            \
      int64_t b = p / per_image, r = p % per_image, oy = r / g->ow, ox = r % g->ow;                \
      T *row = col + (p - p0) * k;                                                                 \
      for (int64_t i = 0; i < g->kh; i++) {                                                        \
        int64_t iy = oy * g->sh - g->pt + i * g->dh;                                               \
        for (int64_t j = 0; j < g->kw; j++) {                                                      \
          int64_t ix = ox * g->sw - g->pl + j * g->dw;                                             \
          T *dst = row + (i * g->kw + j) * cg;                                                     \
          if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) {                                      \
            if (!scatter) memset(dst, 0, sizeof(T) * (size_t)cg);                                  \
            continue;                                                                              \
          }                                                                                        \
          T *src = x + ((b * g->h + iy) * g->w + ix) * g->c + c0;                                  \
          if (scatter)                                                                             \
            for (int64_t c = 0; c < cg; c++) src[c] += dst[c];                                     \
          else                                                                                     \
            memcpy(dst, src, sizeof(T) * (size_t)cg);                                              \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
CONV_COLS(float)
CONV_COLS(double)

void gr_conv_cols(const gr_conv_geom *g, gr_dtype dt, void *x, void *col, int64_t p0, int64_t p1,
                  int64_t c0, int64_t cg, bool scatter) {
  if (dt == GR_F32)
    cols_float(g, x, col, p0, p1, c0, cg, scatter);
  else
    cols_double(g, x, col, p0, p1, c0, cg, scatter);
}

void gr_conv_gemm(gr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; i++) {
      if (dt == GR_F32)
        for (int64_t j = 0; j < n; j++) {
          float *e = (float *)c + i * ldc + j;
          *e = beta == 0 ? 0.0f : *e * (float)beta;
        }
      else
        for (int64_t j = 0; j < n; j++) {
          double *e = (double *)c + i * ldc + j;
          *e = beta == 0 ? 0.0 : *e * beta;
        }
    }
    return;
  }
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (dt == GR_F32)
    cblas_sgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb,
                (float)beta, c, (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta,
                c, (int)ldc);
}

gr_status gr_window_shape_fn(gr_shape_ctx *ctx, gr_window_shapes_fn shapes) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  for (int i = 1; i < ctx->num_inputs; i++) GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
  char msg[512];
  gr_shape out;
  gr_status s = shapes(ctx->node, ctx->in_shapes, &out, msg, sizeof msg);
  if (s != GR_OK) return gr_shape_error(ctx, s, "%s", msg);
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = out;
  return GR_OK;
}

gr_status gr_window_kernel_shapes(gr_kernel_ctx *ctx, gr_window_shapes_fn shapes,
                                  gr_shape *in_shapes, gr_shape *out) {
  const gr_tensor *in = ctx->inputs;
  char msg[512];
  for (int i = 0; i < ctx->num_inputs; i++) {
    if (in[i].dtype != in[0].dtype)
      return gr_kernel_error(ctx, GR_ERR_DTYPE, "inputs are %s and %s", gr_dtype_name(in[0].dtype),
                             gr_dtype_name(in[i].dtype));
    in_shapes[i] = in[i].shape;
  }
  if (in[0].dtype != GR_F32 && in[0].dtype != GR_F64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(in[0].dtype));
  gr_status s = shapes(ctx->node, in_shapes, out, msg, sizeof msg);
  return s == GR_OK ? GR_OK : gr_kernel_error(ctx, s, "%s", msg);
}

gr_status gr_ops_check_images(gr_shape_ctx *ctx, gr_data_format f) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  const gr_shape *x = &ctx->in_shapes[0];
  char xs[GR_SHAPE_STR_MAX];
  if (x->rank >= 0 && x->rank != 4)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "input must have rank 4 (%s), got shape %s",
                          gr_layout_format_name(f), gr_shape_str(x, xs));
  return GR_OK;
}

gr_status gr_ops_kernel_check_images(gr_kernel_ctx *ctx, gr_data_format f) {
  const gr_tensor *X = &ctx->inputs[0];
  char xs[GR_SHAPE_STR_MAX];
  if (X->shape.rank != 4)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "input must have rank 4 (%s), got shape %s",
                           gr_layout_format_name(f), gr_shape_str(&X->shape, xs));
  if (X->dtype != GR_F32 && X->dtype != GR_F64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(X->dtype));
  return GR_OK;
}
