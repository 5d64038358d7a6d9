/* 2-D convolution, NHWC (or NCHW: data_format), filters [kh, kw, c /
 * groups, out_c] in both: conv2d, its
 * two gradients conv2d_backprop_input and conv2d_backprop_filter, and
 * conv2d_transpose (the input gradient as a layer). All four run on one
 * im2col (gr_conv_cols) and OpenBLAS gemm, tiled over output positions so
 * the im2col buffer stays small; a 1x1 stride-1 unpadded conv skips im2col.
 * Each is linear in each input, so their gradients are these ops again.
 * An NCHW node runs the same code between transposed copies. */
#include <stdio.h>
#include <string.h>

#include "ops/conv_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

/* ---- shapes ------------------------------------------------------------------------ */

/* An image shape of unknown sizes but batch n and c channels in a's format. */
static gr_shape image_shape(const gr_conv_attrs *a, int64_t n, int64_t c) {
  gr_shape s = gr_shape_make(4, (int64_t[]){n, -1, -1, -1});
  s.dims[gr_layout_axes(a->format).c] = c;
  return s;
}

/* " (NCHW)" after an input shape in messages ("" for NHWC). */
static const char *fmt_note(const gr_conv_attrs *a) {
  return a->format == GR_FORMAT_NCHW ? " (NCHW)" : "";
}

/* Error unless s is of unknown rank or rank 4 (what: "input", "filter ..."). */
static gr_status check_rank4(const gr_conv_attrs *a, const gr_shape *s, const char *what, char *msg,
                             size_t cap) {
  char b[GR_SHAPE_STR_MAX];
  if (s->rank < 0 || s->rank == 4) return GR_OK;
  if (what)
    snprintf(msg, cap, "filter must have rank 4 %s, got shape %s", what, gr_shape_str(s, b));
  else
    snprintf(msg, cap, "input must have rank 4 (%s), got shape %s",
             gr_layout_format_name(a->format), gr_shape_str(s, b));
  return GR_ERR_SHAPE;
}

/* The output of conv2d(x, f) (dims may be unknown), checking ranks,
 * channels and groups; errors into msg. x and the output in a's format,
 * f HWIO in both. */
static gr_status conv_out_shape(const gr_conv_attrs *a0, const gr_shape *x, const gr_shape *f,
                                gr_shape *out, char *msg, size_t cap) {
  char xs[GR_SHAPE_STR_MAX], fs[GR_SHAPE_STR_MAX];
  gr_image_axes ax = gr_layout_axes(a0->format);
  GR_TRY(check_rank4(a0, x, NULL, msg, cap));
  GR_TRY(check_rank4(a0, f, "[kh, kw, in_c / groups, out_c]", msg, cap));
  *out = image_shape(a0, x->rank == 4 ? x->dims[0] : -1, f->rank == 4 ? f->dims[3] : -1);
  if (x->rank != 4 || f->rank != 4) return GR_OK;
  int64_t gs = a0->groups, c = x->dims[ax.c], fc = f->dims[2], oc = f->dims[3];
  if (c >= 0 && fc >= 0 && c != fc * gs) {
    if (gs > 1)
      snprintf(msg, cap,
               "channel mismatch: input %s%s has %lld channels but filter %s takes %lld per "
               "group in %lld groups",
               gr_shape_str(x, xs), fmt_note(a0), (long long)c, gr_shape_str(f, fs), (long long)fc,
               (long long)gs);
    else
      snprintf(msg, cap, "channel mismatch: input %s%s has %lld channels but filter %s takes %lld",
               gr_shape_str(x, xs), fmt_note(a0), (long long)c, gr_shape_str(f, fs), (long long)fc);
    return GR_ERR_SHAPE;
  }
  if (oc >= 0 && oc % gs != 0) {
    snprintf(msg, cap, "filter %s: %lld output channels do not split into %lld groups",
             gr_shape_str(f, fs), (long long)oc, (long long)gs);
    return GR_ERR_SHAPE;
  }
  gr_conv_attrs a = *a0;
  a.kh = f->dims[0], a.kw = f->dims[1];
  if (a.kh == 0 || a.kw == 0) {
    snprintf(msg, cap, "filter %s has an empty window", gr_shape_str(f, fs));
    return GR_ERR_SHAPE;
  }
  if (a.kh < 0 || a.kw < 0) return GR_OK;
  int64_t pb;
  for (int axis = 0; axis < 2; axis++) {
    gr_status s =
        gr_conv_out_dim(&a, axis, x->dims[ax.h + axis], &out->dims[ax.h + axis], &pb, msg, cap);
    if (s != GR_OK) {
      size_t len = strlen(msg);
      snprintf(msg + len, cap - len, " (input %s, filter %s)", gr_shape_str(x, xs),
               gr_shape_str(f, fs));
      return s;
    }
  }
  return GR_OK;
}

typedef enum conv_kind { CONV_FWD, CONV_BP_INPUT, CONV_BP_FILTER, CONV_TRANSPOSE } conv_kind;

static conv_kind kind_of(const gr_node *n);

/* The shapes of (x, filter, y) of the underlying conv2d for a node of kind
 * k with input shapes in (dims may be unknown); *out: the node's output. */
static gr_status conv_shapes(const gr_node *n, const gr_shape *in, gr_shape *out, char *msg,
                             size_t cap) {
  conv_kind k = kind_of(n);
  gr_conv_attrs a;
  GR_TRY(gr_conv_read_attrs(n, false, &a, msg, cap));
  char b1[GR_SHAPE_STR_MAX], b2[GR_SHAPE_STR_MAX];
  gr_shape y;
  switch (k) {
    case CONV_FWD:
      return conv_out_shape(&a, &in[0], &in[1], out, msg, cap);
    case CONV_BP_INPUT: /* dy, filter, like x */
    case CONV_BP_FILTER: /* x, dy, like filter */ {
      const gr_shape *x = k == CONV_BP_INPUT ? &in[2] : &in[0];
      const gr_shape *f = k == CONV_BP_INPUT ? &in[1] : &in[2];
      const gr_shape *dy = k == CONV_BP_INPUT ? &in[0] : &in[1];
      GR_TRY(conv_out_shape(&a, x, f, &y, msg, cap));
      if (!gr_shape_compatible(&y, dy)) {
        snprintf(msg, cap, "dy %s does not match the conv2d output %s", gr_shape_str(dy, b1),
                 gr_shape_str(&y, b2));
        return GR_ERR_SHAPE;
      }
      *out = k == CONV_BP_INPUT ? *x : *f;
      return GR_OK;
    }
    case CONV_TRANSPOSE: { /* x, filter [kh, kw, out_c / groups, in_c] */
      const gr_shape *x = &in[0], *f = &in[1];
      gr_image_axes ax = gr_layout_axes(a.format);
      GR_TRY(check_rank4(&a, x, NULL, msg, cap));
      GR_TRY(check_rank4(&a, f, "[kh, kw, out_c / groups, in_c]", msg, cap));
      *out = image_shape(&a, -1, -1);
      if (x->rank != 4 || f->rank != 4) return GR_OK;
      if (x->dims[ax.c] >= 0 && f->dims[3] >= 0 && x->dims[ax.c] != f->dims[3]) {
        snprintf(msg, cap,
                 "channel mismatch: input %s%s has %lld channels but filter %s gives %lld",
                 gr_shape_str(x, b1), fmt_note(&a), (long long)x->dims[ax.c], gr_shape_str(f, b2),
                 (long long)f->dims[3]);
        return GR_ERR_SHAPE;
      }
      a.kh = f->dims[0], a.kw = f->dims[1];
      *out = image_shape(&a, x->dims[0], f->dims[2] < 0 ? -1 : f->dims[2] * a.groups);
      for (int axis = 0; axis < 2; axis++) {
        int64_t in = x->dims[ax.h + axis];
        if (a.kh < 0 || a.kw < 0 || in < 0) continue;
        out->dims[ax.h + axis] = gr_conv_in_dim(&a, axis, in);
        if (out->dims[ax.h + axis] < 1) {
          snprintf(msg, cap, "the padding leaves no output (input %s, filter %s)",
                   gr_shape_str(x, b1), gr_shape_str(f, b2));
          return GR_ERR_INVALID_ARGUMENT;
        }
      }
      /* the conv2d this is the gradient of must map out back to x */
      GR_TRY(conv_out_shape(&a, out, f, &y, msg, cap));
      if (!gr_shape_compatible(&y, x)) {
        snprintf(msg, cap, "input %s is not a conv2d output of the output %s", gr_shape_str(x, b1),
                 gr_shape_str(&y, b2));
        return GR_ERR_SHAPE;
      }
      return GR_OK;
    }
  }
  return GR_OK;
}

static gr_status conv_shape_fn(gr_shape_ctx *ctx) {
  return gr_window_shape_fn(ctx, conv_shapes);
}

/* ---- kernels ------------------------------------------------------------------------- */

/* Scratch for one im2col tile of rows x k values. */
static gr_status tile_alloc(gr_kernel_ctx *ctx, gr_dtype dt, int64_t rows, int64_t k,
                            gr_tensor *t) {
  gr_shape s = gr_shape_make(1, (int64_t[]){rows * k > 0 ? rows * k : 1});
  return gr_tensor_alloc(t, dt, &s, ctx->err);
}

#define AT(p, dt, off) ((char *)(p) + (size_t)(off)*gr_dtype_size(dt))

/* One pass over the output positions, in tiles, for each group: mode
 * CONV_FWD computes y = conv2d(x, f); CONV_BP_INPUT x = the input gradient
 * for dy in y; CONV_BP_FILTER f = the filter gradient for x and dy in y.
 * Pointwise convs use x itself as the im2col matrix. */
static gr_status conv_compute(gr_kernel_ctx *ctx, const gr_conv_geom *g, gr_dtype dt,
                              conv_kind mode, void *x, void *f, void *y) {
  int64_t gs = g->groups, cg = g->c / gs, og = g->oc / gs, k = g->kh * g->kw * cg;
  int64_t m = g->n * g->oh * g->ow, oc = g->oc;
  bool pw = gr_conv_is_pointwise(g);
  int64_t rows = pw ? (m > 0 ? m : 1) : gr_conv_tile_rows(k, dt);
  gr_tensor col = gr_tensor_empty();
  if (!pw) {
    GR_TRY(tile_alloc(ctx, dt, rows < m ? rows : m, k, &col));
    if (mode == CONV_BP_INPUT)
      memset(x, 0, (size_t)(g->n * g->h * g->w * g->c) * gr_dtype_size(dt));
  }
  if (mode == CONV_BP_FILTER && m == 0) memset(f, 0, (size_t)(k * oc) * gr_dtype_size(dt));
  for (int64_t p0 = 0; p0 < m; p0 += rows) {
    int64_t p1 = p0 + rows < m ? p0 + rows : m, np = p1 - p0;
    for (int64_t gi = 0; gi < gs; gi++) {
      void *cx = pw ? AT(x, dt, p0 * g->c + gi * cg) : gr_tensor_data(&col);
      int64_t ld = pw ? g->c : k;
      void *fg = AT(f, dt, gi * og), *yg = AT(y, dt, p0 * oc + gi * og);
      if (!pw && mode != CONV_BP_INPUT) gr_conv_cols(g, dt, x, cx, p0, p1, gi * cg, cg, false);
      if (mode == CONV_FWD)
        gr_conv_gemm(dt, false, false, np, og, k, cx, ld, fg, oc, 0, yg, oc);
      else if (mode == CONV_BP_FILTER)
        gr_conv_gemm(dt, true, false, k, og, np, cx, ld, yg, oc, p0 ? 1 : 0, fg, oc);
      else
        gr_conv_gemm(dt, false, true, np, k, og, yg, oc, fg, oc, 0, cx, ld);
      if (!pw && mode == CONV_BP_INPUT) gr_conv_cols(g, dt, x, cx, p0, p1, gi * cg, cg, true);
    }
  }
  gr_tensor_release(&col);
  return GR_OK;
}

/* The inputs of each kind that are images (the rest are filters). */
static unsigned image_inputs(conv_kind k) {
  return k == CONV_BP_INPUT ? 5u : k == CONV_BP_FILTER ? 3u : 1u;
}

/* An NCHW node runs the NHWC code on transposed copies (gr_layout_begin). */
static gr_status conv_kernel(gr_kernel_ctx *ctx) {
  conv_kind k = kind_of(ctx->node);
  gr_shape shapes[3], out;
  char msg[512];
  gr_status s;
  GR_TRY(gr_window_kernel_shapes(ctx, conv_shapes, shapes, &out));
  gr_dtype dt = ctx->inputs[0].dtype;
  gr_conv_attrs a;
  if (gr_conv_read_attrs(ctx->node, false, &a, msg, sizeof msg) != GR_OK)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "%s", msg);
  /* the conv2d whose x and filter these are, channels last */
  gr_shape xs = gr_layout_shape_to_nhwc(k == CONV_FWD || k == CONV_BP_FILTER ? &shapes[0]
                                        : k == CONV_BP_INPUT                 ? &shapes[2]
                                                                             : &out,
                                        a.format);
  const gr_shape *fs = k == CONV_BP_FILTER ? &shapes[2] : &shapes[1];
  a.kh = fs->dims[0], a.kw = fs->dims[1];
  gr_conv_geom g;
  if ((s = gr_conv_geom_make(&a, xs.dims, &g, msg, sizeof msg)) != GR_OK)
    return gr_kernel_error(ctx, s, "%s", msg);
  g.oc = fs->dims[3];
  if (g.n * g.oh * g.ow > INT32_MAX || g.kh * g.kw * g.c > INT32_MAX || g.oc > INT32_MAX)
    return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "convolution too large for BLAS");
  gr_layout_kernel lk;
  GR_TRY(gr_layout_begin(ctx, a.format, image_inputs(k), &lk));
  gr_tensor *o;
  s = gr_layout_alloc_output(ctx, &lk, 0, dt, &out, k != CONV_BP_FILTER, &o);
  if (s != GR_OK) return gr_layout_end(&lk, s);
  void *od = gr_tensor_data(o), *a0 = gr_tensor_data(&lk.in[0]), *a1 = gr_tensor_data(&lk.in[1]);
  switch (k) {
    case CONV_FWD:
      s = conv_compute(ctx, &g, dt, CONV_FWD, a0, a1, od);
      break;
    case CONV_BP_INPUT:
    case CONV_TRANSPOSE:
      s = conv_compute(ctx, &g, dt, CONV_BP_INPUT, od, a1, a0);
      break;
    case CONV_BP_FILTER:
      s = conv_compute(ctx, &g, dt, CONV_BP_FILTER, a0, od, a1);
      break;
  }
  return gr_layout_end(&lk, s);
}

/* 2 flops per multiply-add: elements of the positions-side tensor (input
 * di) times the window's kh * kw * (input channels per group) of the
 * filter (input fi; transposed: its dims [0, 1, 2]). */
static void conv_cost(const gr_node *n, gr_cost *c) {
  conv_kind k = kind_of(n);
  int di = k == CONV_FWD ? -1 : k == CONV_BP_FILTER ? 1 : 0, fi = k == CONV_BP_FILTER ? 2 : 1;
  const gr_shape *pos =
      di < 0 ? &n->out_shapes[0] : &n->inputs[di].node->out_shapes[n->inputs[di].index];
  const gr_shape *f = &n->inputs[fi].node->out_shapes[n->inputs[fi].index];
  double e = 1, w = 1, bytes = 0;
  for (int i = 0; i < pos->rank; i++) e *= pos->dims[i] < 0 ? 1 : (double)pos->dims[i];
  for (int i = 0; i < 3 && f->rank == 4; i++) w *= f->dims[i] < 0 ? 1 : (double)f->dims[i];
  if (k == CONV_TRANSPOSE)
    w = w / (f->dims[2] > 0 ? (double)f->dims[2] : 1) * (f->dims[3] > 0 ? (double)f->dims[3] : 1);
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_shape *s = &n->inputs[i].node->out_shapes[n->inputs[i].index];
    double v = 1;
    for (int d = 0; d < s->rank; d++) v *= s->dims[d] < 0 ? 1 : (double)s->dims[d];
    bytes += v;
  }
  c->flops = 2 * e * w;
  c->bytes = (bytes + e) * (double)gr_dtype_size(n->out_dtypes[0]);
  gr_layout_add_cost(n, image_inputs(k) | (k != CONV_BP_FILTER ? GR_LAYOUT_OUTPUT : 0), c);
}

/* ---- gradients ----------------------------------------------------------------------- */

/* A conv op with the attrs of node `like`. */
static gr_output conv_like(gr_graph *g, const char *op, const gr_node *like, const gr_output *in,
                           int n) {
  return gr_ops_build(g, op, NULL, in, n, like->attrs, like->num_attrs);
}

/* <conv(x, f), dy> = <x, bp_input(dy, f)> = <f, bp_filter(x, dy)>: every
 * op here is bilinear, so each gradient is one of the three again. */
static gr_status conv2d_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), f = gr_grad_x(c, 1), dy = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d_backprop_input", c->node, (gr_output[]){dy, f, x}, 3);
  c->dinputs[1] =
      conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){x, dy, f}, 3);
  return GR_OK;
}
/* dx = bp_input(dy, f, like x): for G = d dx, d dy = conv(G, f), d f = bp_filter(G, dy). */
static gr_status bp_input_grad(gr_grad_ctx *c) {
  gr_output dy = gr_grad_x(c, 0), f = gr_grad_x(c, 1), G = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){G, f}, 2);
  c->dinputs[1] =
      conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){G, dy, f}, 3);
  return GR_OK;
}
/* df = bp_filter(x, dy, like f): for H = d df, d x = bp_input(dy, H), d dy = conv(x, H). */
static gr_status bp_filter_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), dy = gr_grad_x(c, 1), H = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d_backprop_input", c->node, (gr_output[]){dy, H, x}, 3);
  c->dinputs[1] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){x, H}, 2);
  return GR_OK;
}
/* y = conv2d_transpose(x, f) = bp_input(x, f): d x = conv(G, f), d f = bp_filter(G, x). */
static gr_status transpose_grad(gr_grad_ctx *c) {
  gr_output x = gr_grad_x(c, 0), f = gr_grad_x(c, 1), G = c->grads[0];
  c->dinputs[0] = conv_like(c->graph, "conv2d", c->node, (gr_output[]){G, f}, 2);
  c->dinputs[1] = conv_like(c->graph, "conv2d_backprop_filter", c->node, (gr_output[]){G, x, f}, 3);
  return GR_OK;
}

#define DEFINE_CONV(NAME, DOC, GRAD, ...)                                                          \
  GR_WINDOW_OP(NAME, DOC, gr_conv_attr_specs, conv_shape_fn, conv_cost, conv_kernel, GRAD,         \
               __VA_ARGS__)

DEFINE_CONV(conv2d,
            "2-D convolution of x [n, h, w, c] with filter [kh, kw, c / groups, out_c] (attrs "
            "strides, padding SAME/VALID/EXPLICIT, explicit_paddings [t, b, l, r], dilations, "
            "groups; groups = c: depthwise; data_format NHWC or NCHW: x [n, c, h, w], the "
            "filter unchanged)",
            conv2d_grad, "x", "filter")
DEFINE_CONV(conv2d_backprop_input,
            "the gradient of conv2d with respect to x (shaped like `like`) for dy", bp_input_grad,
            "dy", "filter", "like")
DEFINE_CONV(conv2d_backprop_filter,
            "the gradient of conv2d with respect to the filter (shaped like `like`) for dy",
            bp_filter_grad, "x", "dy", "like")
DEFINE_CONV(conv2d_transpose,
            "transposed convolution of x [n, h, w, in_c] with filter [kh, kw, out_c / groups, "
            "in_c]: the gradient of conv2d as a layer (output h: SAME h * stride, VALID (h - 1) * "
            "stride + dilated kernel)",
            transpose_grad, "x", "filter")

static conv_kind kind_of(const gr_node *n) {
  return n->op == &gr_op_conv2d                   ? CONV_FWD
         : n->op == &gr_op_conv2d_backprop_input  ? CONV_BP_INPUT
         : n->op == &gr_op_conv2d_backprop_filter ? CONV_BP_FILTER
                                                  : CONV_TRANSPOSE;
}

/* ---- builders -------------------------------------------------------------------------- */

static gr_output build_conv(gr_graph *g, const char *op, gr_output x, gr_output f,
                            const gr_conv_options *o) {
  gr_conv_options d = {0};
  if (!o) o = &d;
  int64_t strides[2] = {o->strides[0] ? o->strides[0] : 1, o->strides[1] ? o->strides[1] : 1};
  int64_t dil[2] = {o->dilations[0] ? o->dilations[0] : 1, o->dilations[1] ? o->dilations[1] : 1};
  bool expl =
      o->padding && (strcmp(o->padding, "EXPLICIT") == 0 || strcmp(o->padding, "explicit") == 0);
  gr_attr at[6] = {gr_attr_ints("strides", 2, strides),
                   gr_attr_string("padding", o->padding ? o->padding : "VALID"),
                   gr_attr_ints("explicit_paddings", expl ? 4 : 0, o->explicit_paddings),
                   gr_attr_ints("dilations", 2, dil),
                   gr_attr_int("groups", o->groups ? o->groups : 1),
                   gr_attr_string("data_format", o->data_format ? o->data_format : "NHWC")};
  return gr_ops_build(g, op, NULL, (gr_output[]){x, f}, 2, at, 6);
}

gr_output gr_conv2d(gr_graph *g, gr_output x, gr_output filter, const gr_conv_options *opt) {
  return build_conv(g, "conv2d", x, filter, opt);
}
gr_output gr_conv2d_transpose(gr_graph *g, gr_output x, gr_output filter,
                              const gr_conv_options *opt) {
  return build_conv(g, "conv2d_transpose", x, filter, opt);
}
