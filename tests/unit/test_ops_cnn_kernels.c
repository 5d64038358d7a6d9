/* Tests of the vectorised f32 kernels of the CNN ops (ops/vec_*.c and the
 * paths of conv.c, pool.c and batch_norm.c that use them): conv2d and its
 * two gradients against a plain double reference on random inputs (odd
 * sizes, SAME / VALID / EXPLICIT, strides, dilations, groups, depthwise
 * with depth multipliers 1 and 2 (multiplier 1: oneDNN's), a few input
 * channels, pointwise, NHWC and NCHW; the same bits on 1 and 2 threads);
 * max pooling's argmax output and its gradients (from x, from the argmax,
 * fused with a relu); gradients of the f32 ops by central
 * differences; and a training step of a small CNN giving the same bits
 * with 1, 2 and 3 inter-op threads and with 1, 2 and 3 BLAS threads
 * (where OpenBLAS's threads keep a product's bits), fused or not;
 * dropout's mask against the Philox stream. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static gt_rng rng = {41};

/* ---- conv2d against a plain reference -------------------------------------------------- */

typedef struct conv_case {
  int64_t n, h, w, c, kh, kw, sh, sw, dh, dw;
  const char *pad;
  int64_t pads[4];
  int64_t groups, oc;
  bool nchw;
} conv_case;

static const conv_case conv_cases[] = {
    /* a few input channels, 16-64 outputs: registers kernel */
    {3, 9, 7, 1, 3, 3, 1, 1, 1, 1, "SAME", {0}, 1, 32, false},
    {2, 11, 10, 3, 3, 3, 2, 2, 1, 1, "VALID", {0}, 1, 16, false},
    {2, 8, 9, 4, 2, 3, 1, 2, 2, 1, "EXPLICIT", {1, 2, 0, 3}, 1, 48, false},
    /* a few input channels, other outputs: the direct loop */
    {2, 7, 6, 2, 3, 3, 1, 1, 1, 1, "SAME", {0}, 1, 5, false},
    /* depthwise, multipliers 1 and 2 */
    {2, 9, 8, 8, 3, 3, 1, 1, 2, 2, "SAME", {0}, 8, 8, false},
    {2, 7, 9, 5, 3, 2, 2, 1, 1, 1, "EXPLICIT", {2, 0, 1, 1}, 5, 10, false},
    {1, 6, 6, 6, 3, 3, 1, 1, 1, 1, "VALID", {0}, 6, 12, true},
    /* im2col: one group (the flipped input gradient: 17 channels), two */
    {2, 9, 7, 17, 3, 3, 1, 1, 1, 1, "SAME", {0}, 1, 19, false},
    {2, 9, 8, 6, 3, 3, 2, 2, 1, 1, "SAME", {0}, 2, 4, false},
    {2, 5, 7, 16, 3, 2, 1, 1, 2, 1, "EXPLICIT", {0, 1, 2, 0}, 1, 3, false},
    {1, 8, 7, 20, 3, 3, 1, 1, 1, 1, "SAME", {0}, 1, 17, true},
    /* pointwise */
    {2, 5, 6, 16, 1, 1, 1, 1, 1, 1, "VALID", {0}, 1, 24, false},
    /* depthwise, multiplier 1, undilated: oneDNN (11 images: 5 blocks of 2
     * and 1); stride 2, SAME / VALID / EXPLICIT, odd sizes, NCHW */
    {11, 9, 7, 5, 3, 3, 2, 2, 1, 1, "SAME", {0}, 5, 5, false},
    {3, 10, 7, 19, 3, 3, 1, 2, 1, 1, "VALID", {0}, 19, 19, false},
    {2, 7, 8, 16, 3, 2, 2, 1, 1, 1, "EXPLICIT", {1, 2, 0, 1}, 16, 16, false},
    {11, 9, 7, 5, 3, 3, 2, 2, 1, 1, "SAME", {0}, 5, 5, true},
    {2, 8, 9, 7, 3, 3, 1, 1, 1, 1, "VALID", {0}, 7, 7, true},
};
#define NCONV ((int)(sizeof conv_cases / sizeof conv_cases[0]))

/* Index of (b, y, x, c) in an image batch of the case's format. */
static int64_t at(const conv_case *k, int64_t b, int64_t y, int64_t x, int64_t c, int64_t h,
                  int64_t w, int64_t ch) {
  return k->nchw ? ((b * ch + c) * h + y) * w + x : ((b * h + y) * w + x) * ch + c;
}

static gr_shape image(const conv_case *k, int64_t h, int64_t w, int64_t c) {
  return k->nchw ? gr_shape_make(4, (int64_t[]){k->n, c, h, w})
                 : gr_shape_make(4, (int64_t[]){k->n, h, w, c});
}

/* y = conv2d(x, f), and for dy: dx and df, in double. */
static void ref_conv(const conv_case *k, int64_t oh, int64_t ow, int64_t pt, int64_t pl,
                     const gr_tensor *x, const gr_tensor *f, const gr_tensor *dy, double *y,
                     double *dx, double *df) {
  int64_t cg = k->c / k->groups, og = k->oc / k->groups;
  memset(y, 0, sizeof(double) * (size_t)(k->n * oh * ow * k->oc));
  memset(dx, 0, sizeof(double) * (size_t)(k->n * k->h * k->w * k->c));
  memset(df, 0, sizeof(double) * (size_t)(k->kh * k->kw * cg * k->oc));
  for (int64_t b = 0; b < k->n; b++)
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < ow; ox++)
        for (int64_t o = 0; o < k->oc; o++) {
          int64_t yi = at(k, b, oy, ox, o, oh, ow, k->oc);
          double d = gr_tensor_get_f64(dy, yi);
          for (int64_t i = 0; i < k->kh; i++)
            for (int64_t j = 0; j < k->kw; j++) {
              int64_t iy = oy * k->sh - pt + i * k->dh, ix = ox * k->sw - pl + j * k->dw;
              if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w) continue;
              for (int64_t ci = 0; ci < cg; ci++) {
                int64_t xc = (o / og) * cg + ci, xi = at(k, b, iy, ix, xc, k->h, k->w, k->c);
                int64_t fi = ((i * k->kw + j) * cg + ci) * k->oc + o;
                double xv = gr_tensor_get_f64(x, xi), fv = gr_tensor_get_f64(f, fi);
                y[yi] += xv * fv;
                dx[xi] += d * fv;
                df[fi] += d * xv;
              }
            }
        }
}

/* The case's attrs (the int lists in statics: attrs point at them). */
static gr_attr conv_attrs[6];
static int64_t conv_ints[2][2];
static void set_conv_attrs(const conv_case *k) {
  conv_ints[0][0] = k->sh, conv_ints[0][1] = k->sw, conv_ints[1][0] = k->dh,
  conv_ints[1][1] = k->dw;
  conv_attrs[0] = gr_attr_ints("strides", 2, conv_ints[0]);
  conv_attrs[1] = gr_attr_string("padding", k->pad);
  conv_attrs[2] = gr_attr_ints("explicit_paddings", strcmp(k->pad, "EXPLICIT") ? 0 : 4, k->pads);
  conv_attrs[3] = gr_attr_ints("dilations", 2, conv_ints[1]);
  conv_attrs[4] = gr_attr_int("groups", k->groups);
  conv_attrs[5] = gr_attr_string("data_format", k->nchw ? "NCHW" : "NHWC");
}

/* Runs the graph with feeds, fetching n outputs, on `threads` inter-op threads. */
static bool run(gr_graph *g, const gr_feed *f, int nf, const gr_output *o, int n, int threads,
                gr_tensor *out) {
  gr_error err;
  if (gr_graph_error(g)) {
    fprintf(stderr, "build: %s\n", gr_graph_error(g)->msg);
    return false;
  }
  gr_session *s = gr_session_new(g, &(gr_session_options){.inter_op_threads = threads}, &err);
  bool ok = s && gr_session_run(s, f, nf, o, n, out, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "run: %s\n", err.msg);
  gr_session_free(s);
  return ok;
}

static bool near_ref(const gr_tensor *got, const double *want, double tol, const char *what,
                     int ci) {
  for (int64_t i = 0; i < gr_tensor_num_elements(got); i++) {
    double g = gr_tensor_get_f64(got, i);
    if (!(fabs(g - want[i]) <= tol * (1 + fabs(want[i])))) {
      printf("case %d %s[%lld]: %.9g, want %.9g\n", ci, what, (long long)i, g, want[i]);
      return false;
    }
  }
  return true;
}

static void test_conv_against_reference(void) {
  for (int ci = 0; ci < NCONV; ci++) {
    const conv_case *k = &conv_cases[ci];
    int64_t oh, ow, pt, pl;
    gt_window_dim(k->h, k->kh, k->sh, k->dh, k->pad, k->pads[0], k->pads[1], &oh, &pt);
    gt_window_dim(k->w, k->kw, k->sw, k->dw, k->pad, k->pads[2], k->pads[3], &ow, &pl);
    gr_shape fs = gr_shape_make(4, (int64_t[]){k->kh, k->kw, k->c / k->groups, k->oc});
    gr_tensor x = gt_random(&rng, GR_F32, image(k, k->h, k->w, k->c), -1, 1);
    gr_tensor f = gt_random(&rng, GR_F32, fs, -1, 1);
    gr_tensor dy = gt_random(&rng, GR_F32, image(k, oh, ow, k->oc), -1, 1);
    double *y = malloc(sizeof(double) * (size_t)gr_tensor_num_elements(&dy));
    double *dx = malloc(sizeof(double) * (size_t)gr_tensor_num_elements(&x));
    double *df = malloc(sizeof(double) * (size_t)gr_tensor_num_elements(&f));
    ref_conv(k, oh, ow, pt, pl, &x, &f, &dy, y, dx, df);
    gr_tensor first[3] = {gr_tensor_empty(), gr_tensor_empty(), gr_tensor_empty()};
    for (int threads = 1; threads <= 2; threads++) {
      gr_graph *g = gr_graph_new();
      gr_output px = gr_placeholder(g, "x", GR_F32, x.shape);
      gr_output pf = gr_placeholder(g, "f", GR_F32, f.shape);
      gr_output pd = gr_placeholder(g, "dy", GR_F32, dy.shape);
      set_conv_attrs(k);
      gr_output o[3] = {
          gr_op(g, "conv2d", NULL, (gr_output[]){px, pf}, 2, conv_attrs, 6),
          gr_op(g, "conv2d_backprop_input", NULL, (gr_output[]){pd, pf, px}, 3, conv_attrs, 6),
          gr_op(g, "conv2d_backprop_filter", NULL, (gr_output[]){px, pd, pf}, 3, conv_attrs, 6)};
      gr_feed fd[3] = {{px, &x}, {pf, &f}, {pd, &dy}};
      gr_tensor out[3];
      bool ok = run(g, fd, 3, o, 3, threads, out);
      GR_CHECK_MSG(ok, "case %d", ci);
      if (ok) {
        GR_CHECK(near_ref(&out[0], y, 1e-5, "y", ci));
        GR_CHECK(near_ref(&out[1], dx, 1e-5, "dx", ci));
        GR_CHECK(near_ref(&out[2], df, 1e-5, "df", ci));
        for (int i = 0; i < 3; i++) {
          if (threads == 1) {
            first[i] = out[i];
            continue;
          }
          GR_CHECK_MSG(gt_bit_equal(&out[i], &first[i]), "case %d output %d: 2 threads", ci, i);
          gr_tensor_release(&out[i]);
        }
      }
      gr_graph_free(g);
    }
    for (int i = 0; i < 3; i++) gr_tensor_release(&first[i]);
    free(y), free(dx), free(df);
    gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&dy);
  }
}

/* ---- max pooling ------------------------------------------------------------------------ */

typedef struct pool_case {
  int64_t n, h, w, c, k, s;
  const char *pad;
  bool nchw;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 7, 9, 3, 2, 2, "SAME", false}, {2, 8, 8, 33, 2, 2, "VALID", false},
    {1, 9, 7, 5, 3, 3, "SAME", false}, {2, 7, 7, 4, 2, 3, "VALID", false},
    {2, 6, 5, 3, 2, 2, "SAME", true},  {1, 7, 7, 300, 2, 2, "SAME", false},
    {2, 6, 6, 3, 3, 2, "SAME", false}, /* overlapping windows: the generic loop */
};
#define NPOOL ((int)(sizeof pool_cases / sizeof pool_cases[0]))

static gr_attr pool_attrs[4];
static int64_t pool_ints[2][2];
static void set_pool_attrs(const pool_case *k) {
  pool_ints[0][0] = pool_ints[0][1] = k->k, pool_ints[1][0] = pool_ints[1][1] = k->s;
  pool_attrs[0] = gr_attr_ints("ksize", 2, pool_ints[0]);
  pool_attrs[1] = gr_attr_ints("strides", 2, pool_ints[1]);
  pool_attrs[2] = gr_attr_string("padding", k->pad);
  pool_attrs[3] = gr_attr_string("data_format", k->nchw ? "NCHW" : "NHWC");
}

/* Values in [-1, 1] with ties (a few distinct values), so the first of
 * equal maxima must win. */
static gr_tensor tied(gr_shape s) {
  gr_tensor t = gt_random(&rng, GR_F32, s, 0, 1);
  for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++)
    gr_tensor_set_f64(&t, i, floor(gr_tensor_get_f64(&t, i) * 5) / 2 - 1);
  return t;
}

/* max_pool's argmax names each window's first maximum; the gradient from
 * x and from (y, argmax) agree bit for bit and with a reference; relu then
 * max_pool differentiates as one max_pool_grad with attr relu, equal to
 * relu_grad of the plain one. */
static void test_max_pool_argmax_and_gradients(void) {
  for (int ci = 0; ci < NPOOL; ci++) {
    const pool_case *k = &pool_cases[ci];
    gr_tensor x = tied(k->nchw ? gr_shape_make(4, (int64_t[]){k->n, k->c, k->h, k->w})
                               : gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}));
    gr_graph *g = gr_graph_new();
    gr_output px = gr_placeholder(g, "x", GR_F32, x.shape);
    set_pool_attrs(k);
    gr_output mp = gr_op(g, "max_pool", NULL, &px, 1, pool_attrs, 4);
    gr_output y = gr_output_at(mp, 0), arg = gr_output_at(mp, 1);
    gr_shape ys = y.node->out_shapes[0];
    gr_tensor dyv = gt_random(&rng, GR_F32, ys, -1, 1);
    gr_output pd = gr_placeholder(g, "dy", GR_F32, ys);
    gr_output g2 = gr_op(g, "max_pool_grad", NULL, (gr_output[]){px, pd}, 2, pool_attrs, 4);
    gr_output g4 = gr_op(g, "max_pool_grad", NULL, (gr_output[]){px, pd, y, arg}, 4, pool_attrs, 4);
    /* relu then pool: the gradient through both */
    gr_output r = gr_relu(g, px),
              rp = gr_output_at(gr_op(g, "max_pool", NULL, &r, 1, pool_attrs, 4), 0);
    gr_output s = gr_reduce_sum(g, gr_mul(g, rp, pd), NULL, 0, false), dr;
    gr_gradients(g, &s, 1, &px, 1, NULL, false, &dr);
    GR_CHECK_MSG(dr.node && dr.node->op == gr_op_registry_find("max_pool_grad") &&
                     gr_node_attr_bool(dr.node, "relu", false),
                 "case %d: the fused gradient is %s", ci, dr.node ? dr.node->op->name : "none");
    gr_output mpg = gr_op(g, "max_pool_grad", NULL, (gr_output[]){r, pd}, 2, pool_attrs, 4);
    gr_output unfused = gr_op(g, "relu_grad", NULL, (gr_output[]){mpg, r}, 2, NULL, 0);
    gr_output o[6] = {y, arg, g2, g4, dr, unfused};
    gr_tensor out[6];
    gr_feed fd[2] = {{px, &x}, {pd, &dyv}};
    bool ok = run(g, fd, 2, o, 6, 1, out);
    GR_CHECK_MSG(ok, "case %d", ci);
    if (ok) {
      GR_CHECK_MSG(gt_bit_equal(&out[2], &out[3]), "case %d: argmax gradient", ci);
      GR_CHECK_MSG(gt_bit_equal(&out[4], &out[5]), "case %d: fused relu", ci);
      /* reference: per output element, the window's first maximum */
      int64_t oh = ys.dims[k->nchw ? 2 : 1], ow = ys.dims[k->nchw ? 3 : 2], pt, pl, t;
      gt_window_dim(k->h, k->k, k->s, 1, k->pad, 0, 0, &t, &pt);
      gt_window_dim(k->w, k->k, k->s, 1, k->pad, 0, 0, &t, &pl);
      double *dx = calloc((size_t)gr_tensor_num_elements(&x), sizeof(double));
      conv_case geo = {.nchw = k->nchw};
      bool good = true;
      for (int64_t b = 0; b < k->n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
          for (int64_t ox = 0; ox < ow; ox++)
            for (int64_t c = 0; c < k->c; c++) {
              int64_t best = -1, pos = -1;
              double bv = 0;
              for (int64_t i = 0; i < k->k; i++)
                for (int64_t j = 0; j < k->k; j++) {
                  int64_t iy = oy * k->s - pt + i, ix = ox * k->s - pl + j;
                  if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w) continue;
                  int64_t e = at(&geo, b, iy, ix, c, k->h, k->w, k->c);
                  if (best < 0 || gr_tensor_get_f64(&x, e) > bv)
                    best = e, bv = gr_tensor_get_f64(&x, e), pos = i * k->k + j;
                }
              int64_t yi = at(&geo, b, oy, ox, c, oh, ow, k->c);
              good = good && gr_tensor_get_f64(&out[0], yi) == bv &&
                     gr_tensor_get_f64(&out[1], yi) == (double)pos;
              if (best >= 0) dx[best] += gr_tensor_get_f64(&dyv, yi);
            }
      GR_CHECK_MSG(good, "case %d: y or argmax", ci);
      for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++)
        good = good && fabs(gr_tensor_get_f64(&out[2], i) - dx[i]) <= 1e-6;
      GR_CHECK_MSG(good, "case %d: dx", ci);
      free(dx);
      for (int i = 0; i < 6; i++) gr_tensor_release(&out[i]);
    }
    gr_graph_free(g);
    gr_tensor_release(&x), gr_tensor_release(&dyv);
  }
}

/* ---- central differences in f32 ---------------------------------------------------------- */

/* build makes y (f32) from the f32 placeholder x; loss = sum(y * R) is
 * evaluated in double from y; its gradient through the f32 gradient ops
 * is compared with (loss(x + h) - loss(x - h)) / 2h at `samples`
 * elements, h = 1e-2 (the ops are linear or piecewise linear in x, or
 * smooth: batch norm), within tol of the largest gradient. */
typedef gr_output (*build_fn)(gr_graph *g, gr_output x, const void *arg);

static double loss_of(gr_session *s, gr_output px, const gr_tensor *x, gr_output y,
                      const gr_tensor *R) {
  gr_tensor out;
  gr_error err;
  if (gr_session_run(s, &(gr_feed){px, x}, 1, &y, 1, &out, NULL, 0, &err) != GR_OK) return NAN;
  double l = 0;
  for (int64_t i = 0; i < gr_tensor_num_elements(&out); i++)
    l += gr_tensor_get_f64(&out, i) * gr_tensor_get_f64(R, i);
  gr_tensor_release(&out);
  return l;
}

static bool check_f32_gradient(const char *what, build_fn build, const void *arg, gr_tensor *x,
                               int samples, double tol) {
  gr_graph *g = gr_graph_new();
  gr_output px = gr_placeholder(g, "x", GR_F32, x->shape);
  gr_output y = build(g, px, arg);
  if (!y.node || gr_graph_error(g)) {
    fprintf(stderr, "%s: %s\n", what, gr_graph_error(g) ? gr_graph_error(g)->msg : "no output");
    gr_graph_free(g);
    return false;
  }
  gr_tensor R = gt_random(&rng, GR_F32, y.node->out_shapes[y.index], -1, 1);
  gr_output s = gr_reduce_sum(g, gr_mul(g, y, gr_const(g, &R)), NULL, 0, false), d;
  gr_gradients(g, &s, 1, &px, 1, NULL, false, &d);
  gr_error err;
  gr_session *sess = gr_graph_error(g) ? NULL : gr_session_new(g, NULL, &err);
  gr_tensor ana;
  bool ok = sess && gr_session_run(sess, &(gr_feed){px, x}, 1, &d, 1, &ana, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "%s: %s\n", what, gr_graph_error(g) ? gr_graph_error(g)->msg : err.msg);
  double scale = 0;
  for (int64_t i = 0; ok && i < gr_tensor_num_elements(&ana); i++)
    scale = fmax(scale, fabs(gr_tensor_get_f64(&ana, i)));
  int64_t n = gr_tensor_num_elements(x);
  for (int k = 0; ok && k < samples; k++) {
    int64_t e = (int64_t)(gt_next(&rng) % (uint64_t)n);
    double x0 = gr_tensor_get_f64(x, e), h = 1e-2;
    gr_tensor_set_f64(x, e, x0 + h);
    double lp = loss_of(sess, px, x, y, &R);
    gr_tensor_set_f64(x, e, x0 - h);
    double lm = loss_of(sess, px, x, y, &R);
    gr_tensor_set_f64(x, e, x0);
    double num = (lp - lm) / (2 * h), a = gr_tensor_get_f64(&ana, e);
    if (!(fabs(num - a) <= tol * (1 + scale))) {
      fprintf(stderr, "%s: element %lld: analytic %.7g, differences %.7g\n", what, (long long)e, a,
              num);
      ok = false;
    }
  }
  if (sess) gr_tensor_release(&ana);
  gr_session_free(sess);
  gr_graph_free(g);
  gr_tensor_release(&R);
  return ok;
}

/* conv2d of x with a fixed filter (the case's), then the result squared
 * (so the filter gradient and the input gradient both matter through
 * d loss / dx = bp_input(2 y R, f)). */
static gr_output build_conv(gr_graph *g, gr_output x, const void *arg) {
  const conv_case *k = arg;
  gr_tensor f = gt_random(
      &rng, GR_F32, gr_shape_make(4, (int64_t[]){k->kh, k->kw, k->c / k->groups, k->oc}), -1, 1);
  set_conv_attrs(k);
  gr_output y = gr_op(g, "conv2d", NULL, (gr_output[]){x, gr_const(g, &f)}, 2, conv_attrs, 6);
  gr_tensor_release(&f);
  return gr_mul(g, y, y);
}

/* conv2d of a fixed input with the filter x: the filter gradient. */
static gr_output build_conv_filter(gr_graph *g, gr_output f, const void *arg) {
  const conv_case *k = arg;
  gr_tensor x = gt_random(&rng, GR_F32,
                          k->nchw ? gr_shape_make(4, (int64_t[]){k->n, k->c, k->h, k->w})
                                  : gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}),
                          -1, 1);
  set_conv_attrs(k);
  gr_output y = gr_op(g, "conv2d", NULL, (gr_output[]){gr_const(g, &x), f}, 2, conv_attrs, 6);
  gr_tensor_release(&x);
  return y;
}

/* batch norm (training) then relu then a 2x2 max pool. */
static gr_output build_bn_relu_pool(gr_graph *g, gr_output x, const void *arg) {
  int64_t c = x.node->out_shapes[0].dims[3];
  gr_tensor gm = gt_random(&rng, GR_F32, gr_shape_make(1, (int64_t[]){c}), 0.5, 1.5);
  gr_tensor bt = gt_random(&rng, GR_F32, gr_shape_make(1, (int64_t[]){c}), -0.5, 0.5);
  gr_output z = gr_const(g, &bt);
  gr_shape cs = gr_shape_make(1, (int64_t[]){c});
  gr_output mm = gr_variable(g, "mm", gr_zeros(g, GR_F32, cs));
  gr_output mv = gr_variable(g, "mv", gr_ones(g, GR_F32, cs));
  gr_output y = gr_batch_norm(g, x, gr_const(g, &gm), z, mm, mv, true, 0.9, 1e-3, NULL);
  gr_tensor_release(&gm), gr_tensor_release(&bt);
  (void)arg;
  return gr_max_pool(g, gr_relu(g, y), (int64_t[]){2, 2}, NULL, "SAME", NULL);
}

static void test_f32_finite_differences(void) {
  static const int which[] = {0, 2, 4, 5, 7, 8, 12, 15};
  for (size_t i = 0; i < sizeof which / sizeof which[0]; i++) {
    const conv_case *k = &conv_cases[which[i]];
    char what[64];
    gr_tensor x = gt_random(&rng, GR_F32, image(k, k->h, k->w, k->c), -1, 1);
    snprintf(what, sizeof what, "conv case %d, input", which[i]);
    GR_CHECK(check_f32_gradient(what, build_conv, k, &x, 12, 2e-3));
    gr_tensor f = gt_random(
        &rng, GR_F32, gr_shape_make(4, (int64_t[]){k->kh, k->kw, k->c / k->groups, k->oc}), -1, 1);
    snprintf(what, sizeof what, "conv case %d, filter", which[i]);
    GR_CHECK(check_f32_gradient(what, build_conv_filter, k, &f, 12, 2e-3));
    gr_tensor_release(&x), gr_tensor_release(&f);
  }
  /* distinct values, spaced wider than the differences' step */
  gr_shape s = gr_shape_make(4, (int64_t[]){3, 7, 6, 16});
  gr_tensor x = gt_zeros(GR_F32, s);
  int64_t n = gr_tensor_num_elements(&x);
  for (int64_t i = 0; i < n; i++)
    gr_tensor_set_f64(&x, i, 0.05 * (double)((i * 7919) % n) / 5 - 0.05 * (double)n / 10);
  GR_CHECK(
      check_f32_gradient("batch norm, relu, max pool", build_bn_relu_pool, NULL, &x, 20, 5e-3));
  gr_tensor_release(&x);
}

/* ---- the same bits with 1, 2 and 3 threads ------------------------------------------------ */

/* Two Adam steps of a CNN large enough that its kernels split (a conv of
 * one input channel, batch norm, relu, max pool, a 3x3 conv on im2col, a
 * depthwise conv, dropout, dense); the loss and every variable after them.
 * threads: inter-op threads (the kernels' split); intra: BLAS threads;
 * fuse: the sessions' fusion (batch norm + relu, conv + relu). */
static void cnn_steps(int threads, int intra, bool fuse, gr_tensor *out, int *nout) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 7);
  gr_tensor xv = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){32, 28, 28, 1}), 0, 1);
  gr_tensor lv = gt_zeros(GR_I64, gr_shape_make(1, (int64_t[]){32}));
  for (int i = 0; i < 32; i++) gr_tensor_set_f64(&lv, i, i % 10);
  gr_output x = gr_const(g, &xv), labels = gr_const(g, &lv);
  gr_output w1 = gr_variable(
      g, "w1",
      gr_random_uniform(g, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 1, 32}), -0.3, 0.3, 1));
  gr_output w2 = gr_variable(
      g, "w2",
      gr_random_uniform(g, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 32, 32}), -0.1, 0.1, 2));
  gr_output w3 = gr_variable(
      g, "w3",
      gr_random_uniform(g, GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 1, 32}), -0.3, 0.3, 3));
  gr_output wd = gr_variable(
      g, "wd",
      gr_random_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){7 * 7 * 32, 10}), -0.05, 0.05, 4));
  gr_shape cs = gr_shape_make(1, (int64_t[]){32});
  gr_output gm = gr_variable(g, "gamma", gr_ones(g, GR_F32, cs));
  gr_output bt = gr_variable(g, "beta", gr_zeros(g, GR_F32, cs));
  gr_output mm = gr_variable(g, "mm", gr_zeros(g, GR_F32, cs));
  gr_output mv = gr_variable(g, "mv", gr_ones(g, GR_F32, cs));
  gr_conv_options same = {.padding = "SAME"}, dw = {.padding = "SAME", .groups = 32};
  gr_output h = gr_conv2d(g, x, w1, &same);
  h = gr_relu(g, gr_batch_norm(g, h, gm, bt, mm, mv, true, 0.9, 1e-3, NULL));
  h = gr_max_pool(g, h, (int64_t[]){2, 2}, NULL, "SAME", NULL);
  h = gr_relu(g, gr_conv2d(g, h, w2, &same));
  h = gr_conv2d(g, h, w3, &dw);
  h = gr_max_pool(g, gr_relu(g, h), (int64_t[]){2, 2}, NULL, "SAME", NULL);
  h = gr_dropout(g, gr_flatten(g, h), 0.3, 5, true);
  gr_output logits = gr_matmul(g, h, wd, false, false);
  gr_output loss =
      gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, labels), NULL, 0, false);
  gr_optimizer adam = {.kind = GR_OPT_ADAM, .learning_rate = 1e-2};
  gr_output train = gr_minimize(g, &adam, loss, NULL, 0);
  gr_error err;
  gr_session *s = gr_graph_error(g)
                      ? NULL
                      : gr_session_new(g,
                                       &(gr_session_options){.inter_op_threads = threads,
                                                             .intra_op_threads = intra,
                                                             .no_fusion = !fuse},
                                       &err);
  GR_CHECK_MSG(s, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : err.msg);
  gr_output fetch[7] = {loss, w1, w2, w3, wd, gm, mm};
  *nout = 0;
  for (int step = 0; s && step < 2; step++) {
    gr_tensor l;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &loss, 1, &l, &train, 1, &err), err);
    gr_tensor_release(&l);
  }
  if (s && gr_session_run(s, NULL, 0, fetch, 7, out, NULL, 0, &err) == GR_OK) *nout = 7;
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&xv), gr_tensor_release(&lv);
}

/* Does OpenBLAS give a product of the step's sizes the same bits on 2 and
 * 3 threads of its own as on 1? Its kernels need not: Debian's OpenBLAS
 * with its Haswell kernels (OPENBLAS_CORETYPE=Haswell on an AMD EPYC)
 * gives other bits on more threads even for 32 x 10 x 1568. */
static bool blas_threads_reproducible(void) {
  /* m, n, k, transpose_a, transpose_b of the step's products: conv1 and
   * conv2 as im2col products and their gradients, the dense layer and its */
  static const int64_t prods[][5] = {
      {25088, 32, 9, 0, 0},  {9, 32, 25088, 1, 0}, {6272, 32, 288, 0, 0}, {288, 32, 6272, 1, 0},
      {6272, 288, 32, 0, 1}, {32, 10, 1568, 0, 0}, {1568, 10, 32, 1, 0},  {32, 1568, 10, 0, 1}};
  gt_rng own = {5}; /* not the tests' stream */
  bool same = true;
  for (size_t c = 0; c < sizeof prods / sizeof *prods && same; c++) {
    const int64_t *d = prods[c];
    int64_t as[2] = {d[3] ? d[2] : d[0], d[3] ? d[0] : d[2]};
    int64_t bs[2] = {d[4] ? d[1] : d[2], d[4] ? d[2] : d[1]};
    gr_tensor a = gt_random(&own, GR_F32, gr_shape_make(2, as), -1, 1);
    gr_tensor b = gt_random(&own, GR_F32, gr_shape_make(2, bs), -1, 1);
    gr_tensor out[3] = {{0}};
    for (int t = 0; t < 3; t++) {
      gr_graph *g = gr_graph_new();
      gr_output p = gr_matmul(g, gr_const(g, &a), gr_const(g, &b), d[3] != 0, d[4] != 0);
      gr_error err;
      gr_session *s = gr_session_new(
          g, &(gr_session_options){.inter_op_threads = 1, .intra_op_threads = t + 1}, &err);
      GR_CHECK_MSG(s, "%s", err.msg);
      if (s) GR_CHECK_OK(gr_session_run(s, NULL, 0, &p, 1, &out[t], NULL, 0, &err), err);
      gr_session_free(s);
      gr_graph_free(g);
      if (t > 0 && gr_tensor_data(&out[t]) && gr_tensor_data(&out[0]))
        same = same && gt_bit_equal(&out[t], &out[0]);
    }
    for (int t = 0; t < 3; t++) gr_tensor_release(&out[t]);
    gr_tensor_release(&a), gr_tensor_release(&b);
  }
  return same; /* the next session sets its own BLAS thread count */
}

/* 1, 2 and 3 inter-op threads (the kernels split over them), 2 and 3
 * intra-op (BLAS) threads, fused or not: the bits of 1 thread unfused.
 * With BLAS threads, the bits hold only where OpenBLAS's own threads keep
 * them (blas_threads_reproducible); elsewhere those runs are checked
 * close to the one-thread run (same training, other rounding). */
static void test_same_bits_for_1_2_3_threads(void) {
  static const struct {
    int inter, intra;
    bool fuse;
  } runs[] = {{1, 1, false}, {2, 1, false}, {3, 1, false}, {1, 1, true},
              {2, 1, true},  {3, 1, true},  {1, 2, true},  {1, 3, true}};
  enum { RUNS = sizeof runs / sizeof runs[0] };
  gr_tensor t[RUNS][7];
  int n[RUNS];
  for (int i = 0; i < RUNS; i++) {
    rng = (gt_rng){77}; /* the same data each time */
    cnn_steps(runs[i].inter, runs[i].intra, runs[i].fuse, t[i], &n[i]);
    GR_CHECK_EQ_INT(n[i], 7);
  }
  bool blas_same = blas_threads_reproducible();
  if (!blas_same)
    printf("OpenBLAS's own threads change a product's bits on this CPU (%s kernels): runs with "
           "intra-op threads are checked close, not equal\n",
           gr_ops_blas_core());
  for (int i = 1; i < RUNS; i++)
    for (int k = 0; k < n[0] && k < n[i]; k++)
      GR_CHECK_MSG(runs[i].intra > 1 && !blas_same ? gt_near(&t[i][k], &t[0][k], 1e-3, 1e-5)
                                                   : gt_bit_equal(&t[i][k], &t[0][k]),
                   "%d inter-op, %d intra-op threads%s: fetch %d", runs[i].inter, runs[i].intra,
                   runs[i].fuse ? ", fused" : "", k);
  for (int i = 0; i < RUNS; i++)
    for (int k = 0; k < n[i]; k++) gr_tensor_release(&t[i][k]);
}

/* ---- dropout: its mask is the Philox stream's, made 16 blocks at a time --------------- */

/* Element i kept iff word i & 3 of block i / 4 of gr_rng_make(graph seed
 * ^ attr seed * K, node name, step) is >= rate * 2^32, for a length that is
 * no multiple of the 64 elements made at once. */
static void test_dropout_mask_is_the_stream(void) {
  const int64_t n = 1000;
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 3);
  gr_tensor xv = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){n}));
  for (int64_t i = 0; i < n; i++) gr_tensor_set_f64(&xv, i, 1 + (double)i);
  gr_output d = gr_dropout(g, gr_const(g, &xv), 0.3, 5, true);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s, "%s", err.msg);
  gr_tensor out[2];
  int64_t step = s ? gr_session_step(s) : 0;
  gr_output o[2] = {gr_output_at(d, 0), gr_output_at(d, 1)};
  if (s && gr_session_run(s, NULL, 0, o, 2, out, NULL, 0, &err) == GR_OK) {
    gr_rng r = gr_rng_make(3 ^ (5 * 0xD1B54A32D192ED03ull), gr_rng_hash_name(d.node->name),
                           (uint64_t)step);
    uint64_t thr = (uint64_t)ceil(0.3 * 4294967296.0);
    int bad = 0, kept = 0;
    for (int64_t i = 0; i < n; i++) {
      uint32_t w[4];
      gr_rng_block(&r, (uint64_t)i >> 2, w);
      float k = w[i & 3] >= thr ? (float)(1.0 / 0.7) : 0.0f;
      kept += k != 0;
      bad += gr_tensor_get_f64(&out[1], i) != (double)k ||
             gr_tensor_get_f64(&out[0], i) != (double)((float)(1 + i) * k);
    }
    GR_CHECK_MSG(bad == 0, "%d of %lld elements differ from the stream", bad, (long long)n);
    GR_CHECK(kept > 600 && kept < 800);
    gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
  } else {
    GR_CHECK_MSG(false, "%s", err.msg);
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&xv);
}

int main(void) {
  gr_init(); /* the sessions' fusion */
  GR_RUN(test_conv_against_reference);
  GR_RUN(test_max_pool_argmax_and_gradients);
  GR_RUN(test_f32_finite_differences);
  GR_RUN(test_same_bits_for_1_2_3_threads);
  GR_RUN(test_dropout_mask_is_the_stream);
  return gr_test_finish();
}
