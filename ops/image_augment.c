/* Data augmentation of image batches x [n, h, w, c]: random_flip_left_right,
 * random_crop (zero padding, then a crop of the original size at a random
 * offset), random_brightness (adds a delta) and random_contrast (scales
 * each channel's deviation from its mean). Each image's draws are a pure
 * function of (session seed ^ attr seed, node, step, image index)
 * (gr_ops_node_rng): deterministic for a seed and step, whatever the
 * schedule. They transform input data: no gradient flows through them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef enum aug_kind { AUG_FLIP, AUG_CROP, AUG_BRIGHTNESS, AUG_CONTRAST } aug_kind;

static aug_kind kind_of(const gr_node *n);

static gr_status aug_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_ops_check_images(ctx, GR_FORMAT_NHWC));
  const gr_node *n = ctx->node;
  switch (kind_of(n)) {
    case AUG_CROP:
      if (gr_node_attr_int(n, "padding", 4) < 0)
        return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr 'padding' must be >= 0, got %lld",
                              (long long)gr_node_attr_int(n, "padding", 4));
      break;
    case AUG_BRIGHTNESS: {
      double d = gr_node_attr_float(n, "max_delta", 0.1);
      if (!(d >= 0) || !isfinite(d))
        return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                              "attr 'max_delta' must be finite and >= 0, got %g", d);
      break;
    }
    case AUG_CONTRAST: {
      double lo = gr_node_attr_float(n, "lower", 0.8), hi = gr_node_attr_float(n, "upper", 1.2);
      if (!(lo >= 0 && lo <= hi) || !isfinite(hi))
        return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                              "need finite 0 <= lower <= upper, got lower %g, upper %g", lo, hi);
      break;
    }
    case AUG_FLIP:
      break;
  }
  return gr_shape_fn_unchanged(ctx);
}

/* One image (h, w, c) of x into y with draw u in [0, 1). */
#define AUG_IMAGE(T)                                                                               \
  static void aug_image_##T(aug_kind k, const gr_node *node, const T *x, T *y, int64_t h,          \
                            int64_t w, int64_t c, double u) {                                      \
    int64_t row = w * c;                                                                           \
    if (k == AUG_FLIP) {                                                                           \
      bool flip = u < 0.5;                                                                         \
      for (int64_t i = 0; i < h; i++)                                                              \
        for (int64_t j = 0; j < w; j++)                                                            \
          memcpy(y + i * row + j * c, x + i * row + (flip ? w - 1 - j : j) * c,                    \
                 sizeof(T) * (size_t)c);                                                           \
    } else if (k == AUG_CROP) {                                                                    \
      int64_t p = gr_node_attr_int(node, "padding", 4), span = 2 * p + 1;                          \
      int64_t r = (int64_t)(u * (double)(span * span));                                            \
      if (r >= span * span) r = span * span - 1;                                                   \
      int64_t dy = r / span - p, dx = r % span - p; /* y[i, j] = x[i + dy, j + dx] */              \
      for (int64_t i = 0; i < h; i++)                                                              \
        for (int64_t j = 0; j < w; j++) {                                                          \
          int64_t si = i + dy, sj = j + dx;                                                        \
          if (si < 0 || si >= h || sj < 0 || sj >= w)                                              \
            memset(y + i * row + j * c, 0, sizeof(T) * (size_t)c);                                 \
          else                                                                                     \
            memcpy(y + i * row + j * c, x + si * row + sj * c, sizeof(T) * (size_t)c);             \
        }                                                                                          \
    } else if (k == AUG_BRIGHTNESS) {                                                              \
      double d = gr_node_attr_float(node, "max_delta", 0.1);                                       \
      T delta = (T)(d * (2 * u - 1));                                                              \
      for (int64_t i = 0; i < h * row; i++) y[i] = x[i] + delta;                                   \
    } else {                                                                                       \
      double lo = gr_node_attr_float(node, "lower", 0.8),                                          \
             hi = gr_node_attr_float(node, "upper", 1.2);                                          \
      double f = lo + (hi - lo) * u;                                                               \
      for (int64_t ch = 0; ch < c; ch++) {                                                         \
        double m = 0;                                                                              \
        for (int64_t i = 0; i < h * w; i++) m += (double)x[i * c + ch];                            \
        m = h > 0 && w > 0 ? m / (double)(h * w) : 0;                                              \
        for (int64_t i = 0; i < h * w; i++)                                                        \
          y[i * c + ch] = (T)(((double)x[i * c + ch] - m) * f + m);                                \
      }                                                                                            \
    }                                                                                              \
  }
AUG_IMAGE(float)
AUG_IMAGE(double)

static gr_status aug_kernel(gr_kernel_ctx *ctx) {
  GR_TRY(gr_ops_kernel_check_images(ctx, GR_FORMAT_NHWC));
  const gr_tensor *X = &ctx->inputs[0];
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &X->shape, &o));
  int64_t n = X->shape.dims[0], h = X->shape.dims[1], w = X->shape.dims[2], c = X->shape.dims[3];
  int64_t img = h * w * c;
  gr_rng r = gr_ops_node_rng(ctx);
  aug_kind k = kind_of(ctx->node);
  for (int64_t b = 0; b < n; b++) {
    double u = gr_rng_uniform_f64(&r, (uint64_t)b);
    if (X->dtype == GR_F32)
      aug_image_float(k, ctx->node, (const float *)gr_tensor_data(X) + b * img,
                      (float *)gr_tensor_data(o) + b * img, h, w, c, u);
    else
      aug_image_double(k, ctx->node, (const double *)gr_tensor_data(X) + b * img,
                       (double *)gr_tensor_data(o) + b * img, h, w, c, u);
  }
  return GR_OK;
}

#define SEED_SPEC                                                                                  \
  {                                                                                                \
    "seed", GR_ATTR_INT, false, {                                                                  \
      .type = GR_ATTR_INT, .i = 0                                                                  \
    }                                                                                              \
  }
static const gr_attr_spec flip_attrs[] = {SEED_SPEC};
static const gr_attr_spec crop_attrs[] = {
    {"padding", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 4}}, SEED_SPEC};
static const gr_attr_spec brightness_attrs[] = {
    {"max_delta", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.1}}, SEED_SPEC};
static const gr_attr_spec contrast_attrs[] = {
    {"lower", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0.8}},
    {"upper", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 1.2}},
    SEED_SPEC};

#define DEFINE_AUG(NAME, DOC, ATTRS)                                                               \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = (const char *const[]){"x"},                       \
                                  .num_outputs = 1,                                                \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = sizeof ATTRS / sizeof ATTRS[0],                     \
                                  .shape_fn = aug_shape,                                           \
                                  .kernel = aug_kernel,                                            \
                                  .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

DEFINE_AUG(random_flip_left_right,
           "each image of x [n, h, w, c] mirrored left-right with probability 1/2 (attr seed; "
           "per seed, node, step and image)",
           flip_attrs)
DEFINE_AUG(random_crop,
           "each image of x [n, h, w, c] zero-padded by attr padding on every side and cropped "
           "back to h x w at a random offset (attr seed)",
           crop_attrs)
DEFINE_AUG(random_brightness,
           "each image of x plus a delta uniform in [-max_delta, max_delta] (attr seed)",
           brightness_attrs)
DEFINE_AUG(random_contrast,
           "each image's channels: (x - mean) * f + mean, f uniform in [lower, upper] (attr seed)",
           contrast_attrs)

static aug_kind kind_of(const gr_node *n) {
  return n->op == &gr_op_random_flip_left_right ? AUG_FLIP
         : n->op == &gr_op_random_crop          ? AUG_CROP
         : n->op == &gr_op_random_brightness    ? AUG_BRIGHTNESS
                                                : AUG_CONTRAST;
}

gr_output gr_random_flip_left_right(gr_graph *g, gr_output x, int64_t seed) {
  gr_attr at[1] = {gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_flip_left_right", NULL, &x, 1, at, 1);
}
gr_output gr_random_crop(gr_graph *g, gr_output x, int64_t padding, int64_t seed) {
  gr_attr at[2] = {gr_attr_int("padding", padding), gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_crop", NULL, &x, 1, at, 2);
}
gr_output gr_random_brightness(gr_graph *g, gr_output x, double max_delta, int64_t seed) {
  gr_attr at[2] = {gr_attr_float("max_delta", max_delta), gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_brightness", NULL, &x, 1, at, 2);
}
gr_output gr_random_contrast(gr_graph *g, gr_output x, double lower, double upper, int64_t seed) {
  gr_attr at[3] = {gr_attr_float("lower", lower), gr_attr_float("upper", upper),
                   gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_contrast", NULL, &x, 1, at, 3);
}
