/* Pooling, NHWC (or NCHW, attr data_format: the same loops on each
 * channel's plane as a one-channel image; global_avg_pool indexes NCHW directly): max_pool and
 * avg_pool (attrs ksize, strides, padding SAME/VALID/EXPLICIT; averages count only the elements
 * inside the input, as TensorFlow), their gradients max_pool_grad and avg_pool_grad, the gradient
 * of max_pool_grad (max_pool_grad_grad: picks the values at each window's maximum), global_avg_pool
 * and flatten. max_pool also outputs the position of each window's maximum (argmax), which its
 * gradient reads; a relu followed by max_pool differentiates as one max_pool_grad with attr relu
 * (gr_ops_fuse_relu_grad). f32 max pools over disjoint windows run vec_pool.c's kernels, split
 * over the images; the rest of the five window ops run one loop over the windows (pool_run). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"
#include "ops/vec_internal.h"

typedef enum pool_mode {
  POOL_MAX,      /* y = max over the window; input x */
  POOL_AVG,      /* y = mean over the window; input x */
  POOL_MAX_BACK, /* dx: dy added at each window's (first) maximum of x; inputs x, dy */
  POOL_AVG_BACK, /* dx: dy / count added over each window; inputs dy, like x */
  POOL_MAX_PICK, /* y-shaped: g at each window's maximum of x; inputs x, g (x-shaped) */
} pool_mode;

static pool_mode mode_of(const gr_node *n);

/* ---- shapes -------------------------------------------------------------------------- */

/* The pooled shape of x (dims may be unknown); errors into msg. */
static gr_status pooled_shape(const gr_node *n, const gr_shape *x, gr_shape *out, char *msg,
                              size_t cap) {
  char xs[GR_SHAPE_STR_MAX];
  gr_conv_attrs a;
  GR_TRY(gr_conv_read_attrs(n, true, &a, msg, cap));
  if (x->rank >= 0 && x->rank != 4) {
    snprintf(msg, cap, "input must have rank 4 (%s), got shape %s", gr_layout_format_name(a.format),
             gr_shape_str(x, xs));
    return GR_ERR_SHAPE;
  }
  *out = gr_shape_make(4, (int64_t[]){-1, -1, -1, -1});
  if (x->rank < 0) return GR_OK;
  gr_image_axes ax = gr_layout_axes(a.format);
  out->dims[0] = x->dims[0], out->dims[ax.c] = x->dims[ax.c];
  int64_t pb;
  for (int axis = 0; axis < 2; axis++) {
    gr_status s =
        gr_conv_out_dim(&a, axis, x->dims[ax.h + axis], &out->dims[ax.h + axis], &pb, msg, cap);
    if (s != GR_OK) {
      size_t len = strlen(msg);
      snprintf(msg + len, cap - len, " (input %s, ksize [%lld, %lld])", gr_shape_str(x, xs),
               (long long)a.kh, (long long)a.kw);
      return s;
    }
  }
  return GR_OK;
}

/* The input whose windows are pooled, and the one shaped like the pooled
 * output (-1: none). */
static void roles(pool_mode m, int *xi, int *yi) {
  *xi = m == POOL_AVG_BACK ? 1 : 0;
  *yi = m == POOL_MAX_BACK ? 1 : m == POOL_AVG_BACK ? 0 : -1;
}

static gr_status pool_shapes(const gr_node *n, const gr_shape *in, gr_shape *out, char *msg,
                             size_t cap) {
  pool_mode m = mode_of(n);
  int xi, yi;
  roles(m, &xi, &yi);
  gr_shape y;
  GR_TRY(pooled_shape(n, &in[xi], &y, msg, cap));
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (yi >= 0 && !gr_shape_compatible(&in[yi], &y)) {
    snprintf(msg, cap, "dy %s does not match the pooled shape %s", gr_shape_str(&in[yi], a),
             gr_shape_str(&y, b));
    return GR_ERR_SHAPE;
  }
  if (m == POOL_MAX_PICK && !gr_shape_compatible(&in[1], &in[0])) {
    snprintf(msg, cap, "g %s does not match x %s", gr_shape_str(&in[1], a),
             gr_shape_str(&in[0], b));
    return GR_ERR_SHAPE;
  }
  *out = m == POOL_MAX || m == POOL_AVG || m == POOL_MAX_PICK ? y : in[xi];
  return GR_OK;
}

/* The float inputs of a node (max_pool_grad's optional argmax, input 3,
 * is u8). */
static int float_inputs(const gr_shape_ctx *ctx) {
  return mode_of(ctx->node) == POOL_MAX_BACK && ctx->num_inputs > 3 ? 3 : ctx->num_inputs;
}

/* max_pool_grad (x, dy, y, argmax): y and argmax are max_pool's outputs
 * (pooled shape), argmax u8. */
static gr_status check_argmax_inputs(gr_shape_ctx *ctx) {
  char a[GR_SHAPE_STR_MAX], b[GR_SHAPE_STR_MAX];
  if (ctx->num_inputs == 2) return GR_OK;
  if (ctx->num_inputs != 4)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "max_pool_grad takes (x, dy) or (x, dy, y, argmax), got %d inputs",
                          ctx->num_inputs);
  GR_TRY(gr_shape_check_dtype(ctx, 3, GR_DT_BIT(GR_U8)));
  for (int i = 2; i < 4; i++)
    if (!gr_shape_compatible(&ctx->in_shapes[i], &ctx->in_shapes[1]))
      return gr_shape_error(ctx, GR_ERR_SHAPE, "%s %s does not match dy %s",
                            i == 2 ? "y" : "argmax", gr_shape_str(&ctx->in_shapes[i], a),
                            gr_shape_str(&ctx->in_shapes[1], b));
  return GR_OK;
}

static gr_status pool_shape_fn(gr_shape_ctx *ctx) {
  if (mode_of(ctx->node) == POOL_MAX_BACK) GR_TRY(check_argmax_inputs(ctx));
  int all = ctx->num_inputs;
  ctx->num_inputs = float_inputs(ctx);
  gr_status s = gr_window_shape_fn(ctx, pool_shapes);
  ctx->num_inputs = all;
  if (s != GR_OK || mode_of(ctx->node) != POOL_MAX) return s;
  ctx->num_outputs = 2; /* y, argmax */
  ctx->out_dtypes[1] = GR_U8;
  ctx->out_shapes[1] = ctx->out_shapes[0];
  return GR_OK;
}

/* ---- the window loop --------------------------------------------------------------------- */

/* The position i * kw + j in the window of output (oy, ox) of the element
 * at flat index e of x (255 when the window is too large for a u8). */
static uint8_t window_pos(const gr_conv_geom *g, int64_t oy, int64_t ox, int64_t e) {
  int64_t p = e / g->c, ix = p % g->w, iy = (p / g->w) % g->h;
  int64_t k = (iy - (oy * g->sh - g->pt)) * g->kw + (ix - (ox * g->sw - g->pl));
  return g->kh * g->kw < 255 ? (uint8_t)k : 255;
}

/* x: the pooled input; v: the other input (dy, or g); pos: max_pool's
 * argmax output (window positions); out zeroed by the
 * caller for the BACK modes. best and arg: scratch of c entries. A window
 * that lies in the padding only gives 0 and takes no gradient. */
#define POOL_RUN(T)                                                                                \
  static void pool_run_##T(const gr_conv_geom *g, pool_mode m, const T *x, const T *v, T *out,     \
                           T *best, int64_t *arg, uint8_t *pos) {                                  \
    int64_t C = g->c;                                                                              \
    for (int64_t b = 0; b < g->n; b++)                                                             \
      for (int64_t oy = 0; oy < g->oh; oy++)                                                       \
        for (int64_t ox = 0; ox < g->ow; ox++) {                                                   \
          int64_t y0, y1, x0, x1, o = ((b * g->oh + oy) * g->ow + ox) * C;                         \
          gr_conv_window(oy, g->sh, g->pt, g->kh, g->h, &y0, &y1);                                 \
          gr_conv_window(ox, g->sw, g->pl, g->kw, g->w, &x0, &x1);                                 \
          int64_t cnt = (y1 > y0 ? y1 - y0 : 0) * (x1 > x0 ? x1 - x0 : 0);                         \
          bool mx = m == POOL_MAX || m == POOL_MAX_BACK || m == POOL_MAX_PICK;                     \
          for (int64_t c = 0; c < C; c++) best[c] = 0, arg[c] = -1;                                \
          if (mx && cnt > 0) { /* start from the window's first element */                         \
            int64_t i0 = ((b * g->h + y0) * g->w + x0) * C;                                        \
            for (int64_t c = 0; c < C; c++) best[c] = x[i0 + c], arg[c] = i0 + c;                  \
          }                                                                                        \
          for (int64_t iy = y0; iy < y1; iy++)                                                     \
            for (int64_t ix = x0; ix < x1; ix++) {                                                 \
              int64_t i = ((b * g->h + iy) * g->w + ix) * C;                                       \
              if (mx) { /* NaN wins and stays */                                                   \
                for (int64_t c = 0; c < C; c++)                                                    \
                  if (x[i + c] > best[c] || (x[i + c] != x[i + c] && best[c] == best[c]))          \
                    best[c] = x[i + c], arg[c] = i + c;                                            \
              } else if (m == POOL_AVG) {                                                          \
                for (int64_t c = 0; c < C; c++) best[c] += x[i + c];                               \
              } else {                                                                             \
                for (int64_t c = 0; c < C; c++) out[i + c] += v[o + c] / (T)cnt;                   \
              }                                                                                    \
            }                                                                                      \
          for (int64_t c = 0; c < C && m != POOL_AVG_BACK; c++) {                                  \
            if (m == POOL_MAX) {                                                                   \
              out[o + c] = best[c];                                                                \
              pos[o + c] = arg[c] < 0 ? 255 : window_pos(g, oy, ox, arg[c]);                       \
            } else if (m == POOL_AVG)                                                              \
              out[o + c] = cnt ? best[c] / (T)cnt : 0;                                             \
            else if (m == POOL_MAX_BACK && arg[c] >= 0)                                            \
              out[arg[c]] += v[o + c];                                                             \
            else if (m == POOL_MAX_PICK)                                                           \
              out[o + c] = arg[c] >= 0 ? v[arg[c]] : 0;                                            \
          }                                                                                        \
        }                                                                                          \
  }
POOL_RUN(float)
POOL_RUN(double)

/* The fast kernels' arguments, split over images (vec_pool.c). */
typedef struct pool_par {
  const gr_conv_geom *g;
  pool_mode m;
  const float *x, *dy, *y;
  const uint8_t *arg_in;
  uint8_t *arg_out;
  float *out;
  bool relu;
  int chunks;
} pool_par;

static void pool_chunk(void *p, int i) {
  const pool_par *a = p;
  int64_t b0, b1;
  gr_vec_range(a->g->n, a->chunks, i, &b0, &b1);
  if (a->m == POOL_MAX)
    gr_vec_max_pool(a->g, a->x, a->out, a->arg_out, b0, b1);
  else
    gr_vec_max_pool_grad(a->g, a->x, a->arg_in, a->y, a->dy, a->relu, a->out, b0, b1);
}

/* out = x > 0 ? out : 0 (a fused relu's gradient on the generic path). */
static void relu_mask(const gr_tensor *x, gr_tensor *out) {
  int64_t n = gr_tensor_num_elements(out);
  if (out->dtype == GR_F32) {
    const float *a = gr_tensor_data(x);
    float *o = gr_tensor_data(out);
    for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? o[i] : 0.0f;
  } else {
    const double *a = gr_tensor_data(x);
    double *o = gr_tensor_data(out);
    for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? o[i] : 0.0;
  }
}

/* f32 max pools over disjoint windows run vec_pool.c's kernels, split over
 * images; the rest one generic loop. An NCHW node's planes are its images. */
static gr_status pool_kernel(gr_kernel_ctx *ctx) {
  pool_mode m = mode_of(ctx->node);
  gr_shape shapes[4], out;
  char msg[512];
  gr_status s;
  int all = ctx->num_inputs, nf = m == POOL_MAX_BACK && all > 3 ? 3 : all;
  ctx->num_inputs = nf; /* the float inputs */
  s = gr_window_kernel_shapes(ctx, pool_shapes, shapes, &out);
  ctx->num_inputs = all;
  GR_TRY(s);
  gr_dtype dt = ctx->inputs[0].dtype;
  bool with_arg = m == POOL_MAX_BACK && all == 4;
  if (with_arg && (ctx->inputs[3].dtype != GR_U8 ||
                   !gr_shape_equal(&ctx->inputs[3].shape, &ctx->inputs[1].shape) ||
                   !gr_shape_equal(&ctx->inputs[2].shape, &ctx->inputs[1].shape)))
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "y and argmax must be u8 and f shaped like dy");
  int xi, yi;
  roles(m, &xi, &yi);
  gr_conv_attrs a;
  gr_conv_geom g;
  if ((s = gr_conv_read_attrs(ctx->node, true, &a, msg, sizeof msg)) != GR_OK)
    return gr_kernel_error(ctx, s, "%s", msg);
  /* NCHW [n, c, h, w] is pooled as n * c one-channel images: no copies */
  const int64_t *d = shapes[xi].dims;
  gr_shape xs = a.format == GR_FORMAT_NCHW
                    ? gr_shape_make(4, (int64_t[]){d[0] * d[1], d[2], d[3], 1})
                    : shapes[xi];
  if ((s = gr_conv_geom_make(&a, xs.dims, &g, msg, sizeof msg)) != GR_OK)
    return gr_kernel_error(ctx, s, "%s", msg);
  bool relu = m == POOL_MAX_BACK && gr_node_attr_bool(ctx->node, "relu", false);
  gr_layout_kernel lk;
  GR_TRY(gr_layout_begin(ctx, GR_FORMAT_NHWC, with_arg ? 15u : 3u, &lk));
  const gr_tensor *in = lk.in;
  gr_tensor *o, *A = NULL, scratch;
  if ((s = gr_layout_alloc_output(ctx, &lk, 0, dt, &out, true, &o)) != GR_OK)
    return gr_layout_end(&lk, s);
  if (m == POOL_MAX && (s = gr_layout_alloc_output(ctx, &lk, 1, GR_U8, &out, true, &A)) != GR_OK)
    return gr_layout_end(&lk, s);
  const void *x = gr_tensor_data(&in[xi]);
  const void *v = m == POOL_MAX || m == POOL_AVG ? NULL : gr_tensor_data(&in[xi == 0 ? 1 : 0]);
  if (dt == GR_F32 && (m == POOL_MAX || m == POOL_MAX_BACK) && gr_vec_pool_disjoint(&g)) {
    pool_par p = {&g,
                  m,
                  x,
                  v,
                  with_arg ? gr_tensor_data(&in[2]) : NULL,
                  with_arg ? gr_tensor_data(&in[3]) : NULL,
                  A ? gr_tensor_data(A) : NULL,
                  gr_tensor_data(o),
                  relu,
                  1};
    double bytes = (double)gr_tensor_num_elements(&in[xi]) * 8;
    p.chunks = gr_vec_chunks(ctx, g.n, bytes);
    gr_kernel_parallel(ctx, p.chunks, pool_chunk, &p);
    return gr_layout_end(&lk, GR_OK);
  }
  if (m == POOL_MAX_BACK || m == POOL_AVG_BACK)
    memset(gr_tensor_data(o), 0, (size_t)gr_tensor_num_elements(o) * gr_dtype_size(dt));
  /* best (c values) and arg (c int64) in one buffer */
  gr_shape ss = gr_shape_make(1, (int64_t[]){2 * (g.c > 0 ? g.c : 1)});
  if ((s = gr_tensor_alloc(&scratch, GR_F64, &ss, ctx->err)) != GR_OK) return gr_layout_end(&lk, s);
  double *sc = gr_tensor_data(&scratch);
  uint8_t *pos = A ? gr_tensor_data(A) : NULL;
  if (dt == GR_F32)
    pool_run_float(&g, m, x, v, gr_tensor_data(o), (float *)sc, (int64_t *)(sc + g.c), pos);
  else
    pool_run_double(&g, m, x, v, gr_tensor_data(o), sc, (int64_t *)(sc + g.c), pos);
  if (relu) relu_mask(&in[xi], o);
  gr_tensor_release(&scratch);
  return gr_layout_end(&lk, GR_OK);
}

/* A few flops per element of each window. */
static void pool_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *y = &n->out_shapes[0];
  double e = 1;
  for (int i = 0; i < y->rank; i++) e *= y->dims[i] < 0 ? 1 : (double)y->dims[i];
  gr_conv_attrs a;
  char msg[256];
  double win =
      gr_conv_read_attrs(n, true, &a, msg, sizeof msg) == GR_OK ? (double)(a.kh * a.kw) : 1;
  c->flops = 2 * e * win;
  c->bytes = 2 * e * win * (double)gr_dtype_size(n->out_dtypes[0]);
  gr_layout_add_cost(n, 3u | GR_LAYOUT_OUTPUT, c);
}

/* ---- gradients ----------------------------------------------------------------------------- */

/* A pool op with like's pool attrs (not max_pool_grad's relu) and relu
 * when set; inputs in[0..n). */
static gr_output pool_build(gr_graph *g, const char *op, const gr_node *like, const gr_output *in,
                            int n, bool relu) {
  gr_attr at[8];
  int na = 0;
  for (int i = 0; i < like->num_attrs && na < 7; i++)
    if (strcmp(like->attrs[i].name, "relu") != 0) at[na++] = like->attrs[i];
  if (relu) at[na++] = gr_attr_bool("relu", true);
  return gr_ops_build(g, op, NULL, in, n, at, na);
}

static gr_output pool_like(gr_graph *g, const char *op, const gr_node *like, gr_output a,
                           gr_output b) {
  gr_output in[2] = {a, b};
  return pool_build(g, op, like, in, b.node ? 2 : 1, false);
}

/* Through the argmax max_pool kept (its output 1) and its output y. */
static gr_status max_pool_grad_fn(gr_grad_ctx *c) {
  gr_output in[4] = {gr_grad_x(c, 0), c->grads[0], gr_grad_y(c, 0), gr_grad_y(c, 1)};
  c->dinputs[0] = pool_build(c->graph, "max_pool_grad", c->node, in, 4, false);
  return GR_OK;
}
static gr_status avg_pool_grad_fn(gr_grad_ctx *c) {
  c->dinputs[0] = pool_like(c->graph, "avg_pool_grad", c->node, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}
/* Linear in dy: the gradient picks G at the maxima (with relu, where x >
 * 0); piecewise constant in x, y and argmax. */
static gr_status max_pool_grad_grad_fn(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), G = c->grads[0];
  if (gr_node_attr_bool(c->node, "relu", false)) G = gr_relu_grad(c->graph, G, x);
  c->dinputs[1] = pool_like(c->graph, "max_pool_grad_grad", c->node, x, G);
  return GR_OK;
}
static gr_status avg_pool_grad_grad_fn(gr_grad_ctx *c) {
  c->dinputs[0] = pool_like(c->graph, "avg_pool", c->node, c->grads[0], (gr_output){0});
  return GR_OK;
}
/* Linear in g: its gradient scatters G back to the maxima. */
static gr_status max_pool_pick_grad_fn(gr_grad_ctx *c) {
  c->dinputs[1] = pool_like(c->graph, "max_pool_grad", c->node, gr_grad_x(c, 0), c->grads[0]);
  return GR_OK;
}

gr_output gr_ops_fuse_relu_grad(gr_graph *g, gr_output dy, gr_output y) {
  const gr_node *p = dy.node;
  if (p && p->op == &gr_op_max_pool_grad && dy.index == 0 && p->inputs[0].node == y.node &&
      p->inputs[0].index == y.index && !gr_node_attr_bool(p, "relu", false)) {
    gr_output in[4];
    for (int i = 0; i < p->num_inputs; i++) in[i] = p->inputs[i];
    return pool_build(g, "max_pool_grad", p, in, p->num_inputs, true);
  }
  return gr_relu_grad(g, dy, y);
}

#define DEFINE_POOL(NAME, DOC, GRAD, ...)                                                          \
  GR_WINDOW_OP(NAME, DOC, gr_pool_attr_specs, pool_shape_fn, pool_cost, pool_kernel, GRAD,         \
               __VA_ARGS__)

GR_WINDOW_OP_EX(max_pool,
                "maximum over windows of x [n, h, w, c] (attrs ksize, strides (default ksize), "
                "padding SAME/VALID/EXPLICIT, data_format NHWC or NCHW: x [n, c, h, w]); the "
                "gradient goes to the first maximum. Output 1 (u8, shaped like y): the position "
                "i * kw + j of each window's first maximum (255: a window in the padding only, "
                "or of 255 elements or more), which the gradient reads",
                gr_pool_attr_specs, pool_shape_fn, pool_cost, pool_kernel, max_pool_grad_fn, 1, 2,
                "x")
DEFINE_POOL(avg_pool,
            "mean over windows of x [n, h, w, c] (attrs as max_pool); padding is not counted",
            avg_pool_grad_fn, "x")
GR_WINDOW_OP_EX(max_pool_grad,
                "the gradient of max_pool: dy added at each window's first maximum; inputs (x, "
                "dy) or (x, dy, y, argmax), y and argmax max_pool's outputs (then the maxima "
                "are not searched again where windows do not overlap). Attr relu: the gradient "
                "of max_pool(relu(.)) with respect to the relu's input (nothing where the "
                "maximum is not > 0); gradients build it for relu followed by max_pool",
                gr_pool_grad_attr_specs, pool_shape_fn, pool_cost, pool_kernel,
                max_pool_grad_grad_fn, 2, 1, "x", "dy", "y", "argmax")
DEFINE_POOL(avg_pool_grad,
            "the gradient of avg_pool: dy spread over each window (shaped like `like`)",
            avg_pool_grad_grad_fn, "dy", "like")
DEFINE_POOL(max_pool_grad_grad,
            "g (shaped like x) at each window's first maximum of x: the gradient of "
            "max_pool_grad",
            max_pool_pick_grad_fn, "x", "g")

static pool_mode mode_of(const gr_node *n) {
  return n->op == &gr_op_max_pool        ? POOL_MAX
         : n->op == &gr_op_avg_pool      ? POOL_AVG
         : n->op == &gr_op_max_pool_grad ? POOL_MAX_BACK
         : n->op == &gr_op_avg_pool_grad ? POOL_AVG_BACK
                                         : POOL_MAX_PICK;
}

/* ---- global_avg_pool, flatten -----------------------------------------------------------------
 */

/* The data format of a global_avg_pool node (errors from shape functions). */
static gr_status gap_format(gr_shape_ctx *ctx, gr_data_format *f) {
  char msg[256];
  gr_status s = gr_layout_read_format(ctx->node, f, msg, sizeof msg);
  return s == GR_OK ? GR_OK : gr_shape_error(ctx, s, "%s", msg);
}

static gr_status global_avg_pool_shape(gr_shape_ctx *ctx) {
  gr_data_format f;
  GR_TRY(gap_format(ctx, &f));
  GR_TRY(gr_ops_check_images(ctx, f));
  const gr_shape *x = &ctx->in_shapes[0];
  int c = gr_layout_axes(f).c;
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] =
      gr_shape_make(2, (int64_t[]){x->rank < 0 ? -1 : x->dims[0], x->rank < 0 ? -1 : x->dims[c]});
  return GR_OK;
}

/* x [n, h * w, c] (ps = ch, cs = 1) or [n, c, h * w] (ps = 1, cs = hw). */
#define GAP_LOOP(T)                                                                                \
  do {                                                                                             \
    const T *x = gr_tensor_data(X);                                                                \
    T *y = gr_tensor_data(o);                                                                      \
    for (int64_t b = 0; b < n; b++)                                                                \
      for (int64_t c = 0; c < ch; c++) {                                                           \
        double s = 0;                                                                              \
        const T *xb = x + b * hw * ch + c * cs;                                                    \
        for (int64_t p = 0; p < hw; p++) s += (double)xb[p * ps];                                  \
        y[b * ch + c] = (T)(hw ? s / (double)hw : 0);                                              \
      }                                                                                            \
  } while (0)

/* Indexes either format directly: no copies. */
static gr_status global_avg_pool_kernel(gr_kernel_ctx *ctx) {
  gr_data_format f;
  char msg[256];
  if (gr_layout_read_format(ctx->node, &f, msg, sizeof msg) != GR_OK)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  GR_TRY(gr_ops_kernel_check_images(ctx, f));
  const gr_tensor *X = &ctx->inputs[0];
  gr_image_axes ax = gr_layout_axes(f);
  int64_t n = X->shape.dims[0], hw = X->shape.dims[ax.h] * X->shape.dims[ax.w];
  int64_t ch = X->shape.dims[ax.c];
  int64_t ps = f == GR_FORMAT_NCHW ? 1 : ch, cs = f == GR_FORMAT_NCHW ? hw : 1;
  gr_shape os = gr_shape_make(2, (int64_t[]){n, ch});
  gr_tensor *o;
  GR_TRY(gr_kernel_alloc_output(ctx, 0, X->dtype, &os, &o));
  if (X->dtype == GR_F32)
    GAP_LOOP(float);
  else
    GAP_LOOP(double);
  return GR_OK;
}

static gr_status global_avg_pool_grad(gr_grad_ctx *c) {
  gr_data_format f;
  char msg[256];
  if (gr_layout_read_format(c->node, &f, msg, sizeof msg) != GR_OK) f = GR_FORMAT_NHWC;
  gr_image_axes ax = gr_layout_axes(f);
  const int64_t hw[2] = {ax.h, ax.w};
  c->dinputs[0] = gr_broadcast_like(c->graph, c->grads[0], gr_grad_x(c, 0), hw, 2, false, true);
  return GR_OK;
}

static void global_avg_pool_cost(const gr_node *n, gr_cost *c) {
  const gr_shape *x = &n->inputs[0].node->out_shapes[n->inputs[0].index];
  int64_t e = gr_shape_num_elements(x);
  c->flops = e > 0 ? (double)e : 0;
  c->bytes = c->flops * (double)gr_dtype_size(n->out_dtypes[0]);
}

static const gr_attr_spec gap_attrs[] = {GR_DATA_FORMAT_ATTR};

const gr_op_def gr_op_global_avg_pool = {.name = "global_avg_pool",
                                         .doc = "mean over h and w of x [n, h, w, c] -> [n, c] "
                                                "(data_format NCHW: x [n, c, h, w])",
                                         .min_inputs = 1,
                                         .max_inputs = 1,
                                         .input_names = (const char *const[]){"x"},
                                         .num_outputs = 1,
                                         .attrs = gap_attrs,
                                         .num_attrs = 1,
                                         .shape_fn = global_avg_pool_shape,
                                         .cost_fn = global_avg_pool_cost,
                                         .kernel = global_avg_pool_kernel,
                                         .grad_fn = global_avg_pool_grad};

static gr_status flatten_shape(gr_shape_ctx *ctx) {
  const gr_shape *x = &ctx->in_shapes[0];
  if (x->rank == 0)
    return gr_shape_error(ctx, GR_ERR_SHAPE, "input must have rank >= 1, got a scalar");
  int64_t rest = 1;
  for (int i = 1; i < x->rank && rest >= 0; i++) rest = x->dims[i] < 0 ? -1 : rest * x->dims[i];
  ctx->num_outputs = 1;
  ctx->out_dtypes[0] = ctx->in_dtypes[0];
  ctx->out_shapes[0] =
      gr_shape_make(2, (int64_t[]){x->rank < 0 ? -1 : x->dims[0], x->rank < 0 ? -1 : rest});
  return GR_OK;
}

static gr_status flatten_kernel(gr_kernel_ctx *ctx) {
  const gr_tensor *X = &ctx->inputs[0];
  if (X->shape.rank < 1)
    return gr_kernel_error(ctx, GR_ERR_SHAPE, "input must have rank >= 1, got a scalar");
  int64_t n = X->shape.dims[0];
  gr_shape s = gr_shape_make(2, (int64_t[]){n, n ? gr_tensor_num_elements(X) / n : 0});
  gr_tensor t;
  GR_TRY(gr_tensor_reshape(X, &s, &t, ctx->err));
  gr_kernel_set_output(ctx, 0, &t);
  gr_tensor_release(&t);
  return GR_OK;
}

static gr_status flatten_grad(gr_grad_ctx *c) {
  c->dinputs[0] = gr_reshape_like(c->graph, c->grads[0], gr_grad_x(c, 0));
  return GR_OK;
}

const gr_op_def gr_op_flatten = {.name = "flatten",
                                 .doc = "x [n, ...] viewed as [n, everything else] (no copy)",
                                 .min_inputs = 1,
                                 .max_inputs = 1,
                                 .input_names = (const char *const[]){"x"},
                                 .num_outputs = 1,
                                 .shape_fn = flatten_shape,
                                 .cost_fn = gr_cost_fn_free,
                                 .kernel = flatten_kernel,
                                 .grad_fn = flatten_grad};

/* ---- builders ----------------------------------------------------------------------------------
 */

static gr_output build_pool(gr_graph *g, const char *op, gr_output x, const int64_t ksize[2],
                            const int64_t strides[2], const char *padding,
                            const char *data_format) {
  int64_t s[2] = {strides && strides[0] ? strides[0] : ksize[0],
                  strides && strides[1] ? strides[1] : ksize[1]};
  gr_attr at[4] = {gr_attr_ints("ksize", 2, ksize), gr_attr_ints("strides", 2, s),
                   gr_attr_string("padding", padding ? padding : "VALID"),
                   gr_attr_string("data_format", data_format ? data_format : "NHWC")};
  return gr_ops_build(g, op, NULL, &x, 1, at, 4);
}

gr_output gr_max_pool(gr_graph *g, gr_output x, const int64_t ksize[2], const int64_t strides[2],
                      const char *padding, const char *data_format) {
  return build_pool(g, "max_pool", x, ksize, strides, padding, data_format);
}
gr_output gr_avg_pool(gr_graph *g, gr_output x, const int64_t ksize[2], const int64_t strides[2],
                      const char *padding, const char *data_format) {
  return build_pool(g, "avg_pool", x, ksize, strides, padding, data_format);
}
gr_output gr_global_avg_pool(gr_graph *g, gr_output x, const char *data_format) {
  gr_attr at = gr_attr_string("data_format", data_format ? data_format : "NHWC");
  return gr_ops_build(g, "global_avg_pool", NULL, &x, 1, &at, 1);
}
gr_output gr_flatten(gr_graph *g, gr_output x) {
  return gr_ops_build(g, "flatten", NULL, &x, 1, NULL, 0);
}
