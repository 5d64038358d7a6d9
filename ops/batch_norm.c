/* Fused batch normalization over the last axis (channels of NHWC, or the
 * features of [n, c]; with data_format NCHW over axis 1, computed on a
 * channels-last copy): batch_norm and its gradient batch_norm_grad.
 *
 * batch_norm(x, gamma, beta, moving_mean, moving_variance) gives y =
 * gamma (x - mean) rstd + beta with rstd = 1 / sqrt(var + epsilon) and, as
 * outputs 1 and 2, the mean and rstd it used, as output 3 the variance for
 * the moving statistics, and as outputs 4 and 5 that mean and variance in
 * f64 (what the updates of the moving statistics read). Training (attr
 * training, default true): mean and var are the batch's (var biased; output
 * 3 with Bessel's correction, as TensorFlow and PyTorch). Inference: the
 * moving statistics. Statistics accumulate in double. The op itself writes
 * no state: in training the moving statistics are updated by
 * moving_average_update nodes that its builders add beside it, where the
 * variables live (moving_average.c). */
#include <math.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

/* ---- shapes --------------------------------------------------------------------------- */

/* x (input xi) rank >= 2 with c channels last (NCHW: at axis 1); the
 * inputs [first, 5) [c]. */
static gr_status channel_inputs(gr_shape_ctx *ctx, int xi, int first, int *c_out) {
  const gr_shape *x = &ctx->in_shapes[xi];
  char xs[GR_SHAPE_STR_MAX], ps[GR_SHAPE_STR_MAX];
  gr_data_format f;
  gr_status st = gr_layout_read_format(ctx->node, &f, xs, sizeof xs);
  if (st != GR_OK) return gr_shape_error(ctx, st, "%s", xs);
  if (x->rank >= 0 && x->rank < 2)
    return gr_shape_error(ctx, GR_ERR_SHAPE,
                          "input 'x' must have rank >= 2 (channels %s), got shape %s",
                          f == GR_FORMAT_NCHW ? "at axis 1: NCHW" : "last", gr_shape_str(x, xs));
  int64_t c = x->rank >= 2 ? x->dims[gr_layout_channel_axis(f, x->rank)] : -1;
  for (int i = first; i < 5 && i < ctx->num_inputs; i++) {
    const gr_shape *p = &ctx->in_shapes[i];
    const char *nm = ctx->node->op->input_names[i];
    if (p->rank >= 0 && p->rank != 1)
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input '%s' must have rank 1, got shape %s", nm,
                            gr_shape_str(p, ps));
    if (p->rank == 1 && c >= 0 && p->dims[0] >= 0 && p->dims[0] != c)
      return gr_shape_error(ctx, GR_ERR_SHAPE,
                            "channel mismatch: input '%s' %s but x %s%s has %lld channels", nm,
                            gr_shape_str(p, ps), gr_shape_str(x, xs),
                            f == GR_FORMAT_NCHW ? " (NCHW)" : "", (long long)c);
    if (p->rank == 1 && c < 0) c = p->dims[0];
  }
  *c_out = (int)c;
  return GR_OK;
}

static gr_status batch_norm_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  for (int i = 1; i < 5; i++) GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
  int c = 0;
  GR_TRY(channel_inputs(ctx, 0, 1, &c));
  double eps = gr_node_attr_float(ctx->node, "epsilon", 1e-3);
  double mom = gr_node_attr_float(ctx->node, "momentum", 0.99);
  if (!(eps > 0) || !(mom >= 0 && mom <= 1))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "need epsilon > 0 and 0 <= momentum <= 1, got epsilon %g, momentum %g",
                          eps, mom);
  ctx->num_outputs = 6;
  for (int i = 0; i < 6; i++) {
    ctx->out_dtypes[i] = i < 4 ? ctx->in_dtypes[0] : GR_F64;
    ctx->out_shapes[i] = i ? gr_shape_make(1, (int64_t[]){c}) : ctx->in_shapes[0];
  }
  return GR_OK;
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* Runtime check: x (input xi) rank >= 2, inputs [first, 5) all [c], one
 * float dtype; then the inputs in xs (bits) channels last into k, except
 * for f32 NCHW, which the kernels read as it is: *hw then the size of a
 * channel's plane (else 0). */
static gr_status check_runtime(gr_kernel_ctx *ctx, int xi, int first, unsigned xs, int64_t *rows,
                               int64_t *c, int64_t *hw, gr_layout_kernel *k) {
  const gr_tensor *X = &ctx->inputs[xi];
  gr_data_format f;
  char msg[256];
  if (gr_layout_read_format(ctx->node, &f, msg, sizeof msg) != GR_OK)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (X->shape.rank < 2)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "x must have rank >= 2, got shape %s",
                           gr_shape_str(&X->shape, a));
  if (X->dtype != GR_F32 && X->dtype != GR_F64)
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "unsupported dtype %s", gr_dtype_name(X->dtype));
  *c = X->shape.dims[gr_layout_channel_axis(f, X->shape.rank)];
  *rows = *c ? gr_tensor_num_elements(X) / *c : 0;
  bool planes = f == GR_FORMAT_NCHW && X->dtype == GR_F32;
  *hw = planes && X->shape.dims[0] ? *rows / X->shape.dims[0] : 0;
  for (int i = first; i < 5 && i < ctx->num_inputs; i++) {
    const gr_tensor *p = &ctx->inputs[i];
    if (p->dtype != X->dtype || p->shape.rank != 1 || p->shape.dims[0] != *c)
      return gr_kernel_error(ctx, GR_ERR_SHAPE, "input %d is %s %s; x is %s %s", i,
                             gr_dtype_name(p->dtype), gr_shape_str(&p->shape, a),
                             gr_dtype_name(X->dtype), gr_shape_str(&X->shape, b));
  }
  return gr_layout_begin(ctx, planes ? GR_FORMAT_NHWC : f, xs, k);
}

/* mean and the sum of squared deviations (var) per channel of x [rows, c]. */
#define BN_STATS(T)                                                                                \
  do {                                                                                             \
    const T *x = gr_tensor_data(X);                                                                \
    for (int64_t r = 0; r < rows; r++)                                                             \
      for (int64_t j = 0; j < c; j++) mean[j] += (double)x[r * c + j];                             \
    for (int64_t j = 0; j < c; j++) mean[j] /= (double)rows;                                       \
    for (int64_t r = 0; r < rows; r++)                                                             \
      for (int64_t j = 0; j < c; j++) {                                                            \
        double d = (double)x[r * c + j] - mean[j];                                                 \
        var[j] += d * d;                                                                           \
      }                                                                                            \
  } while (0)

/* y = x scale + shift with scale = gamma rstd, shift = beta - mean scale
 * (var's space holds scale, the slot after rstd shift). */
#define BN_APPLY(T)                                                                                \
  do {                                                                                             \
    const T *x = gr_tensor_data(X), *gm = gr_tensor_data(&ctx->inputs[1]);                         \
    const T *bt = gr_tensor_data(&ctx->inputs[2]);                                                 \
    T *y = gr_tensor_data(Y), *mo = gr_tensor_data(M), *ro = gr_tensor_data(R);                    \
    double *scale = var, *shift = rstd + c;                                                        \
    for (int64_t j = 0; j < c; j++) {                                                              \
      mo[j] = (T)mean[j], ro[j] = (T)rstd[j];                                                      \
      scale[j] = rstd[j] * (double)gm[j];                                                          \
      shift[j] = (double)bt[j] - mean[j] * scale[j];                                               \
    }                                                                                              \
    for (int64_t r = 0; r < rows; r++)                                                             \
      for (int64_t j = 0; j < c; j++) {                                                            \
        T t = (T)((double)x[r * c + j] * scale[j] + shift[j]);                                     \
        y[r * c + j] = relu && t < 0 ? 0 : t;                                                      \
      }                                                                                            \
  } while (0)

/* ---- f32: vec_batch_norm.c's passes, split over the inter-op threads ---------------------- */

typedef struct bn_par {
  const float *x, *dy;
  int64_t rows, c, br, nb; /* NCHW (hw > 0): rows are images, blocks of br images */
  int64_t hw;
  const double *center; /* stats: the shift; gradient: the mean */
  double *part;         /* nb blocks of 2c sums */
  const float *mask;    /* gradient: dy counts only where mask > 0 (a fused relu_grad), or NULL */
  const float *a, *b, *d, *ctr;
  float *out;
  bool relu, grad;
  int chunks;
} bn_par;

static void bn_sums_chunk(void *arg, int i) {
  const bn_par *p = arg;
  int64_t lo, hi;
  gr_vec_range(p->nb, p->chunks, i, &lo, &hi);
  for (int64_t k = lo; k < hi; k++) {
    double *s = p->part + k * 2 * p->c;
    int64_t b1 = (k + 1) * p->br < p->rows ? (k + 1) * p->br : p->rows;
    if (p->hw)
      gr_vec_bn_plane_sums(p->grad ? p->dy : NULL, p->mask, p->x, p->c, p->hw, k * p->br, b1,
                           p->center, s);
    else if (p->grad)
      gr_vec_bn_grad_block(p->dy, p->mask, p->x, p->rows, p->c, p->br, k, p->center, s);
    else
      gr_vec_bn_stats_block(p->x, p->rows, p->c, p->br, k, p->center, s);
  }
}

static void bn_apply_chunk(void *arg, int i) {
  const bn_par *p = arg;
  int64_t lo, hi;
  gr_vec_range(p->rows, p->chunks, i, &lo, &hi);
  if (p->hw) {
    gr_vec_bn_plane_apply(p->grad ? p->dy : p->x, p->mask, p->grad ? p->x : NULL, p->ctr, p->c,
                          p->hw, p->a, p->b, p->d, p->relu, p->out, lo, hi);
    return;
  }
  gr_vec_bn_apply(p->grad ? p->dy : p->x, p->mask, p->grad ? p->x : NULL, p->ctr, p->c, p->a, p->b,
                  p->d, p->relu, p->out, lo, hi);
}

/* The per-channel sums of p's rows into s[2c]: blocks of rows (a split by
 * the sizes only) summed on the threads, then added in block order. Needs
 * scratch for nb * 2c doubles in p->part. */
static void bn_sums(gr_kernel_ctx *ctx, bn_par *p, double *s) {
  double e = (double)(p->rows * p->c) * (double)(p->hw ? p->hw : 1);
  p->chunks = gr_vec_chunks(ctx, p->nb, e * (p->grad ? 8 : 4));
  gr_kernel_parallel(ctx, p->chunks, bn_sums_chunk, p);
  for (int64_t j = 0; j < 2 * p->c; j++) s[j] = 0;
  for (int64_t k = 0; k < p->nb; k++)
    for (int64_t j = 0; j < 2 * p->c; j++) s[j] += p->part[k * 2 * p->c + j];
}

static void bn_apply(gr_kernel_ctx *ctx, bn_par *p) {
  double e = (double)(p->rows * p->c) * (double)(p->hw ? p->hw : 1);
  p->chunks = gr_vec_chunks(ctx, p->rows, e * (p->grad ? 12 : 8));
  gr_kernel_parallel(ctx, p->chunks, bn_apply_chunk, p);
}

/* p's blocks: rows [rows, c] in blocks of gr_vec_bn_block_rows, or (NCHW,
 * hw > 0: p->rows images) at most 16 blocks of whole images; sizes only. */
static void bn_blocks(bn_par *p) {
  if (p->hw) {
    p->br = (p->rows + 15) / 16 > 1 ? (p->rows + 15) / 16 : 1;
  } else {
    p->br = gr_vec_bn_block_rows(p->rows, p->c);
  }
  p->nb = p->rows > 0 ? (p->rows + p->br - 1) / p->br : 0;
}

/* Scratch of n doubles (errors into ctx). */
static gr_status scratch_f64(gr_kernel_ctx *ctx, int64_t n, gr_tensor *t) {
  gr_shape s = gr_shape_make(1, (int64_t[]){n > 0 ? n : 1});
  return gr_tensor_alloc(t, GR_F64, &s, ctx->err);
}

/* mean and the sum of squared deviations (var) of f32 x [rows, c], rows
 * >= 1: sums of x - x[0] and their squares, by blocks. */
static gr_status f32_stats(gr_kernel_ctx *ctx, const gr_tensor *X, int64_t rows, int64_t c,
                           int64_t hw, double *mean, double *var) {
  const float *x = gr_tensor_data(X);
  bn_par p = {.x = x, .rows = hw ? rows / hw : rows, .c = c, .hw = hw};
  bn_blocks(&p);
  gr_tensor t;
  GR_TRY(scratch_f64(ctx, (p.nb + 2) * 2 * c, &t));
  double *shift = gr_tensor_data(&t), *s = shift + c;
  for (int64_t j = 0; j < c; j++) shift[j] = (double)x[hw ? j * hw : j];
  p.center = shift, p.part = s + 2 * c;
  bn_sums(ctx, &p, s);
  for (int64_t j = 0; j < c; j++) {
    double m = s[j] / (double)rows, v = s[c + j] - m * s[j];
    mean[j] = shift[j] + m;
    var[j] = v > 0 ? v : 0;
  }
  gr_tensor_release(&t);
  return GR_OK;
}

void gr_ops_bn_moving_stats(const gr_tensor *mm, const gr_tensor *mv, double eps, int64_t c,
                            double *mean, double *var, double *rstd) {
  for (int64_t j = 0; j < c; j++) {
    mean[j] = gr_tensor_get_f64(mm, j);
    var[j] = gr_tensor_get_f64(mv, j);
    rstd[j] = 1.0 / sqrt(var[j] + eps);
  }
}

void gr_ops_bn_affine_f32(const double *mean, const double *rstd, const float *gamma, int64_t c,
                          float *a, float *ctr) {
  for (int64_t j = 0; j < c; j++) {
    a[j] = (float)(rstd[j] * (double)gamma[j]);
    ctr[j] = (float)mean[j];
  }
}

/* y = gamma rstd (x - mean) + beta for f32 x [rows, c] (then max(y, 0)
 * when relu), and outputs 1, 2. */
static gr_status f32_apply(gr_kernel_ctx *ctx, const gr_tensor *X, gr_tensor *Y, int64_t rows,
                           int64_t c, int64_t hw, const double *mean, const double *rstd,
                           bool relu) {
  const float *gm = gr_tensor_data(&ctx->inputs[1]), *bt = gr_tensor_data(&ctx->inputs[2]);
  float *mo = gr_tensor_data(&ctx->outputs[1]), *ro = gr_tensor_data(&ctx->outputs[2]);
  gr_tensor t;
  GR_TRY(scratch_f64(ctx, 2 * c, &t));
  float *a = gr_tensor_data(&t), *ctr = a + c;
  for (int64_t j = 0; j < c; j++) mo[j] = (float)mean[j], ro[j] = (float)rstd[j];
  gr_ops_bn_affine_f32(mean, rstd, gm, c, a, ctr);
  bn_par p = {.x = gr_tensor_data(X),
              .rows = hw ? rows / hw : rows,
              .c = c,
              .hw = hw,
              .a = a,
              .b = bt,
              .ctr = ctr,
              .out = gr_tensor_data(Y),
              .relu = relu};
  bn_apply(ctx, &p);
  gr_tensor_release(&t);
  return GR_OK;
}

/* NCHW: on a channels-last copy of x, y computed channels last and copied
 * back (gr_layout_begin). */
static gr_status batch_norm_kernel(gr_kernel_ctx *ctx) {
  int64_t rows = 0, c = 0, hw = 0;
  gr_layout_kernel lk;
  GR_TRY(check_runtime(ctx, 0, 1, 1u, &rows, &c, &hw, &lk));
  const gr_tensor *X = &lk.in[0];
  bool training = gr_node_attr_bool(ctx->node, "training", true);
  bool relu = gr_node_attr_bool(ctx->node, "relu", false);
  double eps = gr_node_attr_float(ctx->node, "epsilon", 1e-3);
  gr_tensor scratch;
  gr_shape ss = gr_shape_make(1, (int64_t[]){4 * c + 1});
  if (gr_tensor_alloc(&scratch, GR_F64, &ss, ctx->err) != GR_OK)
    return gr_layout_end(&lk, ctx->err->code);
  double *mean = gr_tensor_data(&scratch), *var = mean + c, *rstd = var + c;
  if (training) {
    if (rows < 1) {
      gr_tensor_release(&scratch);
      return gr_layout_end(
          &lk, gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "training needs a non-empty batch"));
    }
    memset(mean, 0, sizeof(double) * (size_t)(2 * c));
    if (X->dtype == GR_F32) {
      if (f32_stats(ctx, X, rows, c, hw, mean, var) != GR_OK) {
        gr_tensor_release(&scratch);
        return gr_layout_end(&lk, ctx->err->code);
      }
    } else {
      BN_STATS(double);
    }
    for (int64_t j = 0; j < c; j++) {
      rstd[j] = 1.0 / sqrt(var[j] / (double)rows + eps);
      var[j] = rows > 1 ? var[j] / (double)(rows - 1) : var[j];
    }
  } else {
    gr_ops_bn_moving_stats(&ctx->inputs[3], &ctx->inputs[4], eps, c, mean, var, rstd);
  }
  gr_tensor *Y, *M, *R, *V, *M64, *V64;
  gr_shape cs = gr_shape_make(1, (int64_t[]){c});
  gr_status s = gr_layout_alloc_output(ctx, &lk, 0, X->dtype, &ctx->inputs[0].shape, true, &Y);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 1, X->dtype, &cs, &M);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 2, X->dtype, &cs, &R);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 3, X->dtype, &cs, &V);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 4, GR_F64, &cs, &M64);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 5, GR_F64, &cs, &V64);
  if (s == GR_OK) { /* before APPLY, which reuses var */
    double *m64 = gr_tensor_data(M64), *v64 = gr_tensor_data(V64);
    for (int64_t j = 0; j < c; j++) {
      m64[j] = mean[j], v64[j] = var[j];
      gr_tensor_set_f64(V, j, var[j]);
    }
  }
  if (s == GR_OK && X->dtype == GR_F32)
    s = f32_apply(ctx, X, Y, rows, c, hw, mean, rstd, relu);
  else if (s == GR_OK)
    BN_APPLY(double);
  gr_tensor_release(&scratch);
  return gr_layout_end(&lk, s);
}

/* batch_norm_grad(dy, x, gamma, mean, rstd) -> dx, dgamma, dbeta with
 * xhat = (x - mean) rstd: dbeta = sum dy, dgamma = sum dy xhat; training:
 * dx = gamma rstd (dy - dbeta / n - xhat dgamma / n), inference: dx =
 * gamma rstd dy. */
#define BN_GRAD(T)                                                                                 \
  do {                                                                                             \
    const T *dy = gr_tensor_data(&lk.in[0]), *x = gr_tensor_data(&lk.in[1]);                       \
    const T *gm = gr_tensor_data(&ctx->inputs[2]), *mu = gr_tensor_data(&ctx->inputs[3]);          \
    const T *rs = gr_tensor_data(&ctx->inputs[4]);                                                 \
    T *dx = gr_tensor_data(DX), *dg = gr_tensor_data(DG), *db = gr_tensor_data(DB);                \
    const T *m = mask ? gr_tensor_data(&lk.in[5]) : NULL;                                          \
    memset(acc, 0, sizeof(double) * (size_t)(2 * c));                                              \
    for (int64_t r = 0; r < rows; r++)                                                             \
      for (int64_t j = 0; j < c; j++) {                                                            \
        double d = m && !(m[r * c + j] > 0) ? 0.0 : (double)dy[r * c + j];                         \
        acc[j] += d;                                                                               \
        acc[c + j] += d * ((double)x[r * c + j] - (double)mu[j]) * (double)rs[j];                  \
      }                                                                                            \
    for (int64_t j = 0; j < c; j++) db[j] = (T)acc[j], dg[j] = (T)acc[c + j];                      \
    for (int64_t r = 0; r < rows; r++)                                                             \
      for (int64_t j = 0; j < c; j++) {                                                            \
        double k = (double)gm[j] * (double)rs[j];                                                  \
        double d = m && !(m[r * c + j] > 0) ? 0.0 : (double)dy[r * c + j];                         \
        if (training) {                                                                            \
          double xh = ((double)x[r * c + j] - (double)mu[j]) * (double)rs[j];                      \
          d -= (acc[j] + xh * acc[c + j]) / (double)rows;                                          \
        }                                                                                          \
        dx[r * c + j] = (T)(k * d);                                                                \
      }                                                                                            \
  } while (0)

/* BN_GRAD for f32: the sums by blocks, then dx = A dy + B (x - mean) + D
 * in one pass (A = gamma rstd, B = -A rstd dgamma / n, D = -A dbeta / n;
 * inference: B = D = 0); with mask, dy is 0 where relu_y (lk->in[5]) is
 * not > 0. */
static gr_status f32_grad(gr_kernel_ctx *ctx, const gr_layout_kernel *lk, gr_tensor *DX,
                          gr_tensor *DG, gr_tensor *DB, int64_t rows, int64_t c, int64_t hw,
                          bool training, bool mask) {
  const float *gm = gr_tensor_data(&ctx->inputs[2]), *mu = gr_tensor_data(&ctx->inputs[3]);
  const float *rs = gr_tensor_data(&ctx->inputs[4]);
  bn_par p = {.x = gr_tensor_data(&lk->in[1]),
              .dy = gr_tensor_data(&lk->in[0]),
              .rows = hw ? rows / hw : rows,
              .c = c,
              .hw = hw,
              .mask = mask ? gr_tensor_data(&lk->in[5]) : NULL,
              .grad = true};
  bn_blocks(&p);
  int64_t nb = p.nb;
  gr_tensor t;
  GR_TRY(scratch_f64(ctx, (nb + 5) * 2 * c, &t));
  double *mean = gr_tensor_data(&t), *s = mean + c, *part = s + 2 * c;
  float *A = (float *)(part + nb * 2 * c), *B = A + c, *D = B + c, *ctr = D + c;
  for (int64_t j = 0; j < c; j++) mean[j] = (double)mu[j];
  p.center = mean, p.part = part;
  bn_sums(ctx, &p, s);
  float *dg = gr_tensor_data(DG), *db = gr_tensor_data(DB);
  for (int64_t j = 0; j < c; j++) {
    double r = (double)rs[j], k = (double)gm[j] * r, dgam = s[c + j] * r;
    db[j] = (float)s[j], dg[j] = (float)dgam;
    A[j] = (float)k, ctr[j] = mu[j];
    B[j] = training && rows ? (float)(-k * r * dgam / (double)rows) : 0.0f;
    D[j] = training && rows ? (float)(-k * s[j] / (double)rows) : 0.0f;
  }
  p.a = A, p.b = B, p.d = D, p.ctr = ctr, p.out = gr_tensor_data(DX);
  bn_apply(ctx, &p);
  gr_tensor_release(&t);
  return GR_OK;
}

/* NCHW: as batch_norm_kernel, on channels-last copies of dy and x. */
static gr_status batch_norm_grad_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *DY = &ctx->inputs[0], *X = &ctx->inputs[1];
  bool mask = ctx->num_inputs > 5;
  const gr_tensor *MY = mask ? &ctx->inputs[5] : DY;
  if (!gr_shape_equal(&DY->shape, &X->shape) || DY->dtype != X->dtype ||
      !gr_shape_equal(&MY->shape, &X->shape) || MY->dtype != X->dtype) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX], m[GR_SHAPE_STR_MAX];
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "dy %s%s%s and x %s differ",
                           gr_shape_str(&DY->shape, a), mask ? ", relu_y " : "",
                           mask ? gr_shape_str(&MY->shape, m) : "", gr_shape_str(&X->shape, b));
  }
  int64_t rows = 0, c = 0, hw = 0;
  gr_layout_kernel lk;
  GR_TRY(check_runtime(ctx, 1, 2, mask ? 0x23u : 3u, &rows, &c, &hw, &lk));
  bool training = gr_node_attr_bool(ctx->node, "training", true);
  gr_tensor *DX, *DG, *DB, scratch = gr_tensor_empty();
  gr_shape cs = gr_shape_make(1, (int64_t[]){c}), ss = gr_shape_make(1, (int64_t[]){2 * c + 1});
  /* NHWC f32: dx over dy when nothing else holds dy (one pass reads dy and
   * writes dx, element by element) */
  gr_status s = !lk.nchw && X->dtype == GR_F32
                    ? gr_kernel_forward_or_alloc(ctx, 0, 0, X->dtype, &X->shape, &DX)
                    : gr_layout_alloc_output(ctx, &lk, 0, X->dtype, &X->shape, true, &DX);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 1, X->dtype, &cs, &DG);
  if (s == GR_OK) s = gr_kernel_alloc_output(ctx, 2, X->dtype, &cs, &DB);
  if (s == GR_OK) s = gr_tensor_alloc(&scratch, GR_F64, &ss, ctx->err);
  if (s != GR_OK) return gr_layout_end(&lk, s);
  double *acc = gr_tensor_data(&scratch);
  if (X->dtype == GR_F32)
    s = f32_grad(ctx, &lk, DX, DG, DB, rows, c, hw, training, mask);
  else
    BN_GRAD(double);
  gr_tensor_release(&scratch);
  return gr_layout_end(&lk, s);
}

static gr_status batch_norm_grad_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_shape_check_dtype(ctx, 0, GR_DT_FLOAT));
  for (int i = 1; i < ctx->num_inputs; i++) GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
  int c = 0;
  GR_TRY(channel_inputs(ctx, 1, 2, &c));
  if (ctx->num_inputs > 5 && !gr_shape_compatible(&ctx->in_shapes[5], &ctx->in_shapes[1])) {
    char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
    return gr_shape_error(ctx, GR_ERR_SHAPE, "relu_y %s does not match x %s",
                          gr_shape_str(&ctx->in_shapes[5], a), gr_shape_str(&ctx->in_shapes[1], b));
  }
  ctx->num_outputs = 3;
  for (int i = 0; i < 3; i++) ctx->out_dtypes[i] = ctx->in_dtypes[0];
  ctx->out_shapes[0] = ctx->in_shapes[1];
  ctx->out_shapes[1] = ctx->out_shapes[2] = gr_shape_make(1, (int64_t[]){c});
  return GR_OK;
}

/* ---- gradient ----------------------------------------------------------------------------- */

/* The moving statistics get no gradient (they are state, not parameters);
 * neither do outputs 1 to 5 pass one back (an error if asked). */
static gr_status batch_norm_grad_fn(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  if (gr_node_attr_bool(c->node, "relu", false))
    return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                               "gradients: batch_norm node '%s' has a fused relu (the fusion pass "
                               "makes it in a graph that runs, after autodiff)",
                               c->node->name);
  for (int i = 1; i < 6; i++)
    if (c->grads[i].node)
      return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                                 "gradients: batch_norm node '%s': no gradient through its mean, "
                                 "rstd and variance outputs (1 to 5), only through y",
                                 c->node->name);
  gr_output in[5] = {c->grads[0], gr_grad_x(c, 0), gr_grad_x(c, 1), gr_grad_y(c, 1),
                     gr_grad_y(c, 2)};
  gr_output d = gr_ops_build(g, "batch_norm_grad", NULL, in, 5, c->node->attrs, c->node->num_attrs);
  c->dinputs[0] = gr_output_at(d, 0);
  c->dinputs[1] = gr_output_at(d, 1);
  c->dinputs[2] = gr_output_at(d, 2);
  return GR_OK;
}

/* The gradient of batch_norm_grad: its formula rebuilt from primitives
 * (in training with the batch statistics recomputed from x, so mean and
 * rstd need no gradient), differentiated by gr_gradients against the
 * incoming gradients. Slower than the fused op, but only gradients of
 * gradients use it. NCHW: on dy and x transposed channels last. */
static gr_status batch_norm_grad_grad(gr_grad_ctx *c) {
  gr_graph *g = c->graph;
  if (c->node->num_inputs > 5)
    return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                               "gradients: batch_norm_grad node '%s' has a fused relu_grad (the "
                               "fusion pass makes it in a graph that runs, after autodiff)",
                               c->node->name);
  gr_output dy0 = gr_grad_x(c, 0), x0 = gr_grad_x(c, 1), gamma = gr_grad_x(c, 2);
  gr_output dy = dy0, x = x0;
  int rank = x.node->out_shapes[x.index].rank;
  if (rank < 2)
    return gr_graph_set_errorf(g, GR_ERR_UNIMPLEMENTED,
                               "gradients: batch_norm_grad node '%s' needs x of known rank",
                               c->node->name);
  int64_t axes[GR_MAX_RANK], to_last[GR_MAX_RANK], to_first[GR_MAX_RANK];
  for (int i = 0; i < rank - 1; i++) axes[i] = i;
  gr_data_format fmt;
  char msg[128];
  bool nchw =
      gr_layout_read_format(c->node, &fmt, msg, sizeof msg) == GR_OK && fmt == GR_FORMAT_NCHW;
  if (nchw) { /* [n, c, rest] <-> [n, rest, c] */
    for (int i = 0; i < rank; i++) {
      to_last[i] = i == 0 ? 0 : i == rank - 1 ? 1 : i + 1;
      to_first[i] = i == 0 ? 0 : i == 1 ? rank - 1 : i - 1;
    }
    dy = gr_transpose(g, dy, to_last, rank);
    x = gr_transpose(g, x, to_last, rank);
  }
  bool training = gr_node_attr_bool(c->node, "training", true);
  gr_output mean, rstd;
  if (training) {
    double eps = gr_node_attr_float(c->node, "epsilon", 1e-3);
    mean = gr_reduce_mean(g, x, axes, rank - 1, false);
    gr_output var = gr_reduce_mean(g, gr_square(g, gr_sub(g, x, mean)), axes, rank - 1, false);
    rstd =
        gr_div(g, gr_grad_scalar(c, x, 1), gr_sqrt(g, gr_add(g, var, gr_grad_scalar(c, x, eps))));
  } else {
    mean = gr_stop_gradient(g, gr_grad_x(c, 3));
    rstd = gr_stop_gradient(g, gr_grad_x(c, 4));
  }
  gr_output xhat = gr_mul(g, gr_sub(g, x, mean), rstd);
  gr_output f[3];
  f[1] = gr_reduce_sum(g, gr_mul(g, dy, xhat), axes, rank - 1, false);
  f[2] = gr_reduce_sum(g, dy, axes, rank - 1, false);
  gr_output d = dy;
  if (training)
    d = gr_sub(g, gr_sub(g, dy, gr_reduce_mean(g, dy, axes, rank - 1, false)),
               gr_mul(g, xhat, gr_reduce_mean(g, gr_mul(g, dy, xhat), axes, rank - 1, false)));
  f[0] = gr_mul(g, gr_mul(g, gamma, rstd), d);
  if (nchw) f[0] = gr_transpose(g, f[0], to_first, rank);
  gr_output terms[3];
  int nt = 0;
  for (int i = 0; i < 3; i++)
    if (c->grads[i].node)
      terms[nt++] = gr_reduce_sum(g, gr_mul(g, f[i], c->grads[i]), NULL, 0, false);
  gr_output s = nt == 1 ? terms[0] : gr_add_n(g, terms, nt);
  gr_output wrt[3] = {dy0, x0, gamma};
  return gr_gradients(g, &s, 1, wrt, 3, NULL, true, c->dinputs);
}

static void batch_norm_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *x = &n->out_shapes[0];
  double e = 1;
  for (int i = 0; i < x->rank; i++) e *= x->dims[i] < 0 ? 1 : (double)x->dims[i];
  c->flops = 8 * e;
  c->bytes = 3 * e * (double)gr_dtype_size(n->out_dtypes[0]);
  bool grad = n->op == &gr_op_batch_norm_grad;
  gr_layout_add_cost(n, (grad ? n->num_inputs > 5 ? 0x23u : 3u : 1u) | GR_LAYOUT_OUTPUT, c);
}

static const gr_attr_spec bn_attrs[] = {
    {"training", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}},
    {"momentum", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.99}},
    {"epsilon", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 1e-3}},
    {"update_moving", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = true}},
    {"relu", GR_ATTR_BOOL, false, {.type = GR_ATTR_BOOL, .b = false}},
    GR_DATA_FORMAT_ATTR};

const gr_op_def gr_op_batch_norm = {
    .name = "batch_norm",
    .doc = "gamma (x - mean) / sqrt(var + epsilon) + beta over the last axis (data_format "
           "NCHW: axis 1); training: batch statistics, else the moving ones. Outputs y, mean, "
           "rstd, the variance (batch: with Bessel's correction), and that mean and variance in "
           "f64. Built in training (unless update_moving is false), it comes with a "
           "moving_average_update of each moving variable (attr momentum), where the variable "
           "lives, and its outputs wait for them (behind an identity_n). relu: y is max(y, 0) "
           "(the fusion pass sets it when a relu alone reads y)",
    .min_inputs = 5,
    .max_inputs = 5,
    .input_names = (const char *const[]){"x", "gamma", "beta", "moving_mean", "moving_variance"},
    .num_outputs = 6,
    .attrs = bn_attrs,
    .num_attrs = (int)(sizeof bn_attrs / sizeof bn_attrs[0]),
    .shape_fn = batch_norm_shape,
    .cost_fn = batch_norm_cost,
    .kernel = batch_norm_kernel,
    .grad_fn = batch_norm_grad_fn,
    .flags = GR_OP_EXPENSIVE};

const gr_op_def gr_op_batch_norm_grad = {
    .name = "batch_norm_grad",
    .doc = "the gradient of batch_norm: dx, dgamma, dbeta from dy, x, gamma and the mean and "
           "rstd batch_norm used (attrs as batch_norm; relu ignored); with relu_y, dy counts "
           "only where relu_y > 0 (relu_grad fused in by the fusion pass); differentiable again "
           "without relu_y",
    .min_inputs = 5,
    .max_inputs = 6,
    .input_names = (const char *const[]){"dy", "x", "gamma", "mean", "rstd", "relu_y"},
    .num_outputs = 3,
    .attrs = bn_attrs,
    .num_attrs = (int)(sizeof bn_attrs / sizeof bn_attrs[0]),
    .shape_fn = batch_norm_grad_shape,
    .cost_fn = batch_norm_cost,
    .kernel = batch_norm_grad_kernel,
    .grad_fn = batch_norm_grad_grad};

gr_output gr_batch_norm(gr_graph *g, gr_output x, gr_output gamma, gr_output beta,
                        gr_output moving_mean, gr_output moving_variance, bool training,
                        double momentum, double epsilon, const char *data_format) {
  gr_output in[5] = {x, gamma, beta, moving_mean, moving_variance};
  gr_attr at[4] = {gr_attr_bool("training", training), gr_attr_float("momentum", momentum),
                   gr_attr_float("epsilon", epsilon),
                   gr_attr_string("data_format", data_format ? data_format : "NHWC")};
  return gr_ops_batch_norm_build(g, NULL, in, 5, at, 4);
}
