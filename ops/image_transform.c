/* Geometric augmentation of image batches x [n, h, w, c], as Keras'
 * RandomFlip, RandomRotation and RandomZoom layers:
 *
 *   random_flip(x, mode="horizontal_and_vertical")   each image mirrored
 *       left-right and/or top-bottom, each with probability 1/2
 *   random_rotation(x, factor=[lo, hi])              rotated about its centre
 *       by an angle uniform in [lo, hi] * 2 pi (one value f: [-f, f])
 *   random_zoom(x, height_factor, width_factor)      scaled about its centre:
 *       the image shows (1 + d) times its height (and width), d uniform in
 *       the factor's range (one value f: [-f, f]); d > 0 zooms out
 *
 * Rotation and zoom map each output pixel (row i, column j) to the input
 * point x' = a0 j + a1 i + a2, y' = b0 j + b1 i + b2 (Keras' transform
 * matrices: rotation by theta [cos, -sin, xo, sin, cos, yo], zoom by zx, zy
 * [zx, 0, (w - 1)(1 - zx)/2, 0, zy, (h - 1)(1 - zy)/2]) and read it with
 * interpolation "bilinear" or "nearest"; a point outside the image is
 * mapped back by fill_mode "reflect" (d c b a | a b c d | d c b a, the
 * default), "wrap" (a b c d | a b c d) or "nearest" (the edge pixel); with
 * "constant" the pixels outside that it reads are fill_value (as
 * TensorFlow's ImageProjectiveTransformV3). Output 1 of random_rotation is each
 * image's angle in radians [n], of random_zoom its zooms (1 + d) [n, 2]
 * (height, width).
 *
 * Each image's draws are a pure function of (session seed ^ attr seed,
 * node, step, image index) (gr_ops_node_rng), as the other random ops:
 * deterministic for a seed and step whatever the schedule. They transform
 * input data: no gradient flows through them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef enum xf_kind { XF_FLIP, XF_ROTATION, XF_ZOOM } xf_kind;
typedef enum fill_mode { FILL_REFLECT, FILL_WRAP, FILL_CONSTANT, FILL_NEAREST } fill_mode;

static xf_kind kind_of(const gr_node *n);

/* What a node's attrs ask for, checked. */
typedef struct xf_params {
  bool horizontal, vertical; /* flip */
  double lo[2], hi[2];       /* rotation: [0] (turns); zoom: [0] height, [1] width */
  bool same_zoom;            /* zoom: no width_factor, the height's zoom for both */
  fill_mode fill;
  bool nearest; /* interpolation */
  double fill_value;
} xf_params;

static const char *const fill_names[] = {"reflect", "wrap", "constant", "nearest", NULL};

static int choice(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

/* A factor attr: one value f (the range [-f, f], f >= 0) or two [lo, hi];
 * zoom ranges stay >= -1 (a zoom 1 + d of 0 or more). *given: not empty. */
static bool read_factor(const gr_node *n, const char *attr, bool zoom, double *lo, double *hi,
                        bool *given, char *msg, size_t cap) {
  const gr_attr_value *v = gr_node_attr(n, attr);
  int k = v && v->type == GR_ATTR_FLOATS ? v->floats.n : 0;
  *given = k > 0;
  *lo = *hi = 0;
  if (k == 0) return true;
  if (k > 2) {
    snprintf(msg, cap,
             "attr '%s' takes one value f (the range [-f, f]) or two [lower, upper], "
             "got %d",
             attr, k);
    return false;
  }
  double a = v->floats.v[0], b = k == 2 ? v->floats.v[1] : a;
  if (k == 1 && !(isfinite(b) && b >= 0)) {
    snprintf(msg, cap, "attr '%s' must be a finite value >= 0, got %g", attr, b);
    return false;
  }
  if (k == 2 && !(isfinite(a) && isfinite(b) && a <= b)) {
    snprintf(msg, cap,
             "attr '%s' must be a finite range [lower, upper], lower <= upper, got [%g, %g]", attr,
             a, b);
    return false;
  }
  if (k == 1) a = -a;
  if (zoom && a < -1) {
    snprintf(msg, cap, "attr '%s': a zoom of 1 + %g would be negative (values must be >= -1)", attr,
             a);
    return false;
  }
  *lo = a, *hi = b;
  return true;
}

static bool read_params(const gr_node *n, xf_params *p, char *msg, size_t cap) {
  memset(p, 0, sizeof *p);
  xf_kind k = kind_of(n);
  if (k == XF_FLIP) {
    const char *mode = gr_node_attr_string(n, "mode", "horizontal_and_vertical");
    p->horizontal = !strcmp(mode, "horizontal") || !strcmp(mode, "horizontal_and_vertical");
    p->vertical = !strcmp(mode, "vertical") || !strcmp(mode, "horizontal_and_vertical");
    if (!p->horizontal && !p->vertical) {
      snprintf(msg, cap,
               "attr 'mode' must be \"horizontal\", \"vertical\" or \"horizontal_and_vertical\", "
               "got \"%s\"",
               mode);
      return false;
    }
    return true;
  }
  bool given, wgiven = false;
  const char *main = k == XF_ROTATION ? "factor" : "height_factor";
  if (!read_factor(n, main, k == XF_ZOOM, &p->lo[0], &p->hi[0], &given, msg, cap)) return false;
  if (!given) {
    snprintf(msg, cap, "attr '%s' is empty: give one value f (the range [-f, f]) or two", main);
    return false;
  }
  if (k == XF_ZOOM &&
      !read_factor(n, "width_factor", true, &p->lo[1], &p->hi[1], &wgiven, msg, cap))
    return false;
  p->same_zoom = k == XF_ZOOM && !wgiven;
  const char *fill = gr_node_attr_string(n, "fill_mode", "reflect");
  const char *interp = gr_node_attr_string(n, "interpolation", "bilinear");
  int f = choice(fill, fill_names);
  if (f < 0) {
    snprintf(msg, cap,
             "attr 'fill_mode' must be \"reflect\", \"wrap\", \"constant\" or \"nearest\", got "
             "\"%s\"",
             fill);
    return false;
  }
  if (strcmp(interp, "bilinear") != 0 && strcmp(interp, "nearest") != 0) {
    snprintf(msg, cap, "attr 'interpolation' must be \"bilinear\" or \"nearest\", got \"%s\"",
             interp);
    return false;
  }
  p->fill = (fill_mode)f;
  p->nearest = interp[0] == 'n';
  p->fill_value = gr_node_attr_float(n, "fill_value", 0);
  if (!isfinite(p->fill_value)) {
    snprintf(msg, cap, "attr 'fill_value' must be finite, got %g", p->fill_value);
    return false;
  }
  return true;
}

static gr_status xf_shape(gr_shape_ctx *ctx) {
  GR_TRY(gr_ops_check_images(ctx, GR_FORMAT_NHWC));
  xf_params p;
  char msg[256];
  if (!read_params(ctx->node, &p, msg, sizeof msg))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  GR_TRY(gr_shape_fn_unchanged(ctx));
  xf_kind k = kind_of(ctx->node);
  if (k == XF_FLIP) return GR_OK;
  const gr_shape *in = &ctx->in_shapes[0];
  int64_t n = in->rank == 4 ? in->dims[0] : -1;
  ctx->num_outputs = 2;
  ctx->out_dtypes[1] = ctx->in_dtypes[0];
  ctx->out_shapes[1] =
      k == XF_ROTATION ? gr_shape_make(1, (int64_t[]){n}) : gr_shape_make(2, (int64_t[]){n, 2});
  return GR_OK;
}

/* An input coordinate outside [0, len - 1] mapped back by the fill mode
 * (constant: unchanged; the read gives fill_value). */
static double map_coord(double c, int64_t len, fill_mode m) {
  double top = (double)(len - 1);
  if (m == FILL_CONSTANT || (c >= 0 && c <= top)) return c;
  if (len <= 1) return 0;
  double l = (double)len;
  if (m == FILL_REFLECT) { /* period 2 len: d c b a | a b c d | d c b a */
    c = fmod(c, 2 * l);
    if (c < 0) c += 2 * l;
    if (c >= l) c = 2 * l - c - 1;
  } else if (m == FILL_WRAP) { /* period len */
    c = fmod(c, l);
    if (c < 0) c += l;
  }
  return c < 0 ? 0 : c > top ? top : c;
}

/* The transform of one image: output (i, j) reads input (y', x'). */
typedef struct xf_map {
  double a0, a1, a2, b0, b1, b2;
} xf_map;

#define XF_IMAGE(T)                                                                                \
  static T read_##T(const T *x, int64_t h, int64_t w, int64_t c, int64_t i, int64_t j, int64_t ch, \
                    double fill) {                                                                 \
    return i >= 0 && i < h && j >= 0 && j < w ? x[(i * w + j) * c + ch] : (T)fill;                 \
  }                                                                                                \
  static void xf_image_##T(const xf_params *p, const xf_map *m, const T *x, T *y, int64_t h,       \
                           int64_t w, int64_t c) {                                                 \
    for (int64_t i = 0; i < h; i++)                                                                \
      for (int64_t j = 0; j < w; j++) {                                                            \
        double xs = map_coord(m->a0 * (double)j + m->a1 * (double)i + m->a2, w, p->fill);          \
        double ys = map_coord(m->b0 * (double)j + m->b1 * (double)i + m->b2, h, p->fill);          \
        T *out = y + (i * w + j) * c;                                                              \
        if (p->nearest) {                                                                          \
          int64_t ri = (int64_t)llround(ys), rj = (int64_t)llround(xs);                            \
          for (int64_t ch = 0; ch < c; ch++)                                                       \
            out[ch] = read_##T(x, h, w, c, ri, rj, ch, p->fill_value);                             \
          continue;                                                                                \
        }                                                                                          \
        double fy = floor(ys), fx = floor(xs), dy = ys - fy, dx = xs - fx;                         \
        int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;                                                \
        for (int64_t ch = 0; ch < c; ch++) {                                                       \
          double v00 = (double)read_##T(x, h, w, c, y0, x0, ch, p->fill_value),                    \
                 v01 = (double)read_##T(x, h, w, c, y0, x0 + 1, ch, p->fill_value),                \
                 v10 = (double)read_##T(x, h, w, c, y0 + 1, x0, ch, p->fill_value),                \
                 v11 = (double)read_##T(x, h, w, c, y0 + 1, x0 + 1, ch, p->fill_value);            \
          out[ch] =                                                                                \
              (T)((1 - dy) * ((1 - dx) * v00 + dx * v01) + dy * ((1 - dx) * v10 + dx * v11));      \
        }                                                                                          \
      }                                                                                            \
  }
XF_IMAGE(float)
XF_IMAGE(double)

/* Image b's map and its draws (angle, or the zooms) from the node's stream. */
static xf_map draw_map(const xf_params *p, xf_kind k, const gr_rng *r, int64_t b, int64_t h,
                       int64_t w, double draws[2]) {
  double H = (double)(h - 1), W = (double)(w - 1);
  double u0 = gr_rng_uniform_f64(r, 2 * (uint64_t)b),
         u1 = gr_rng_uniform_f64(r, 2 * (uint64_t)b + 1);
  if (k == XF_FLIP) {
    bool fx = p->horizontal && u0 < 0.5, fy = p->vertical && u1 < 0.5;
    draws[0] = fx, draws[1] = fy;
    return (xf_map){fx ? -1 : 1, 0, fx ? W : 0, 0, fy ? -1 : 1, fy ? H : 0};
  }
  if (k == XF_ROTATION) {
    double t = 2 * M_PI * (p->lo[0] + (p->hi[0] - p->lo[0]) * u0), cs = cos(t), sn = sin(t);
    draws[0] = t;
    return (xf_map){cs, -sn, (W - (cs * W - sn * H)) / 2, sn, cs, (H - (sn * W + cs * H)) / 2};
  }
  double zy = 1 + p->lo[0] + (p->hi[0] - p->lo[0]) * u0;
  double zx = p->same_zoom ? zy : 1 + p->lo[1] + (p->hi[1] - p->lo[1]) * u1;
  draws[0] = zy, draws[1] = zx;
  return (xf_map){zx, 0, W * (1 - zx) / 2, 0, zy, H * (1 - zy) / 2};
}

static gr_status xf_kernel(gr_kernel_ctx *ctx) {
  GR_TRY(gr_ops_kernel_check_images(ctx, GR_FORMAT_NHWC));
  xf_params p;
  char msg[256];
  if (!read_params(ctx->node, &p, msg, sizeof msg))
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  const gr_tensor *X = &ctx->inputs[0];
  xf_kind k = kind_of(ctx->node);
  int64_t n = X->shape.dims[0], h = X->shape.dims[1], w = X->shape.dims[2], c = X->shape.dims[3];
  gr_tensor *o, *d = NULL;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &X->shape, &o));
  if (k != XF_FLIP) {
    gr_shape ds =
        k == XF_ROTATION ? gr_shape_make(1, (int64_t[]){n}) : gr_shape_make(2, (int64_t[]){n, 2});
    GR_TRY(gr_kernel_alloc_output(ctx, 1, X->dtype, &ds, &d));
  }
  int64_t img = h * w * c;
  gr_rng r = gr_ops_node_rng(ctx);
  for (int64_t b = 0; b < n; b++) {
    double draws[2];
    xf_map m = draw_map(&p, k, &r, b, h, w, draws);
    for (int q = 0; d && q < (k == XF_ROTATION ? 1 : 2); q++)
      gr_tensor_set_f64(d, b * (k == XF_ROTATION ? 1 : 2) + q, draws[q]);
    if (X->dtype == GR_F32)
      xf_image_float(&p, &m, (const float *)gr_tensor_data(X) + b * img,
                     (float *)gr_tensor_data(o) + b * img, h, w, c);
    else
      xf_image_double(&p, &m, (const double *)gr_tensor_data(X) + b * img,
                      (double *)gr_tensor_data(o) + b * img, h, w, c);
  }
  return GR_OK;
}

static void xf_cost(const gr_node *n, gr_cost *c) {
  int64_t k = gr_shape_num_elements(&n->out_shapes[0]);
  double e = k > 0 ? (double)k : 1;
  c->flops = (kind_of(n) == XF_FLIP ? 1 : 20) * e;
  c->bytes = 2 * e * (double)gr_dtype_size(n->out_dtypes[0]);
}

#define SEED_ATTR                                                                                  \
  {                                                                                                \
    "seed", GR_ATTR_INT, false, {                                                                  \
      .type = GR_ATTR_INT, .i = 0                                                                  \
    }                                                                                              \
  }
#define FILL_ATTRS                                                                                 \
  {"fill_mode", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "reflect"}},                  \
      {"interpolation", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "bilinear"}}, {       \
    "fill_value", GR_ATTR_FLOAT, false, {                                                          \
      .type = GR_ATTR_FLOAT, .f = 0                                                                \
    }                                                                                              \
  }

static const gr_attr_spec flip_attrs[] = {
    {"mode", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "horizontal_and_vertical"}},
    SEED_ATTR};
static const gr_attr_spec rotation_attrs[] = {
    {"factor", GR_ATTR_FLOATS, true, {0}}, FILL_ATTRS, SEED_ATTR};
static const gr_attr_spec zoom_attrs[] = {
    {"height_factor", GR_ATTR_FLOATS, true, {0}},
    {"width_factor", GR_ATTR_FLOATS, false, {.type = GR_ATTR_FLOATS, .floats = {0, NULL}}},
    FILL_ATTRS,
    SEED_ATTR};

#define DEFINE_XF(NAME, DOC, ATTRS, OUTS)                                                          \
  const gr_op_def gr_op_##NAME = {.name = #NAME,                                                   \
                                  .doc = DOC,                                                      \
                                  .min_inputs = 1,                                                 \
                                  .max_inputs = 1,                                                 \
                                  .input_names = (const char *const[]){"x"},                       \
                                  .num_outputs = OUTS,                                             \
                                  .attrs = ATTRS,                                                  \
                                  .num_attrs = sizeof ATTRS / sizeof ATTRS[0],                     \
                                  .shape_fn = xf_shape,                                            \
                                  .cost_fn = xf_cost,                                              \
                                  .kernel = xf_kernel,                                             \
                                  .flags = GR_OP_STATEFUL | GR_OP_NO_GRADIENT};

DEFINE_XF(random_flip,
          "each image of x [n, h, w, c] mirrored left-right and/or top-bottom, each with "
          "probability 1/2 (attr mode: \"horizontal\", \"vertical\", \"horizontal_and_vertical\"; "
          "Keras' RandomFlip)",
          flip_attrs, 1)
DEFINE_XF(random_rotation,
          "each image rotated about its centre by an angle uniform in factor * 2 pi (one value "
          "f: [-f, f]); fill_mode, interpolation as Keras' RandomRotation. Outputs y, angles",
          rotation_attrs, 2)
DEFINE_XF(random_zoom,
          "each image scaled about its centre: it shows 1 + d times its height (width), d "
          "uniform in height_factor (width_factor; none: the same zoom); d > 0 zooms out. "
          "Keras' RandomZoom. Outputs y, zooms [n, 2]",
          zoom_attrs, 2)

static xf_kind kind_of(const gr_node *n) {
  return n->op == &gr_op_random_flip       ? XF_FLIP
         : n->op == &gr_op_random_rotation ? XF_ROTATION
                                           : XF_ZOOM;
}

gr_output gr_random_flip(gr_graph *g, gr_output x, const char *mode, int64_t seed) {
  gr_attr at[2] = {gr_attr_string("mode", mode ? mode : "horizontal_and_vertical"),
                   gr_attr_int("seed", seed)};
  return gr_ops_build(g, "random_flip", NULL, &x, 1, at, 2);
}

/* The attrs shared by rotation and zoom, after the factors. */
static int fill_attrs(gr_attr *at, const gr_image_fill *f) {
  gr_image_fill d = {0};
  if (!f) f = &d;
  at[0] = gr_attr_string("fill_mode", f->fill_mode ? f->fill_mode : "reflect");
  at[1] = gr_attr_string("interpolation", f->interpolation ? f->interpolation : "bilinear");
  at[2] = gr_attr_float("fill_value", f->fill_value);
  return 3;
}

gr_output gr_random_rotation(gr_graph *g, gr_output x, double lower, double upper,
                             const gr_image_fill *fill, int64_t seed) {
  double f[2] = {lower, upper};
  gr_attr at[5] = {gr_attr_floats("factor", 2, f)};
  int n = 1 + fill_attrs(at + 1, fill);
  at[n++] = gr_attr_int("seed", seed);
  return gr_ops_build(g, "random_rotation", NULL, &x, 1, at, n);
}

gr_output gr_random_zoom(gr_graph *g, gr_output x, const double height[2], const double *width,
                         const gr_image_fill *fill, int64_t seed) {
  gr_attr at[6] = {gr_attr_floats("height_factor", 2, height),
                   gr_attr_floats("width_factor", width ? 2 : 0, width)};
  int n = 2 + fill_attrs(at + 2, fill);
  at[n++] = gr_attr_int("seed", seed);
  return gr_ops_build(g, "random_zoom", NULL, &x, 1, at, n);
}
