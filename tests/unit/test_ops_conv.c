/* Tests of ops/conv.c: conv2d and conv2d_transpose against a plain double
 * reference on random shapes (NHWC; NCHW against NHWC on transposed data) (odd sizes, strides
 * larger than the kernel, padding larger than the kernel, batch 1, 1x1 kernels, dilations, groups,
 * depthwise, channels 1, 3 and 64, several im2col tiles), their gradients
 * (and the gradients of the gradient ops) by finite differences, and errors
 * for bad input naming the node and the shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

typedef struct conv_case {
  int64_t n, h, w, c, kh, kw, oc, sh, sw, dh, dw, groups;
  const char *pad;
  int64_t pads[4];
} conv_case;

static gt_rng rng = {17};

static void ref_dim(const conv_case *k, int axis, int64_t in, int64_t *out, int64_t *pb) {
  gt_window_dim(in, axis ? k->kw : k->kh, axis ? k->sw : k->sh, axis ? k->dw : k->dh, k->pad,
                k->pads[axis ? 2 : 0], k->pads[axis ? 3 : 1], out, pb);
}

/* The conv2d of x [n, h, w, c] (k's sizes) and f into y, in double; with
 * transpose, the adjoint: x is the conv's output and y its input. */
static void ref_conv(const conv_case *k, const gr_tensor *x, const gr_tensor *f, bool transpose,
                     gr_tensor *y) {
  int64_t oh, ow, pt, pl;
  ref_dim(k, 0, k->h, &oh, &pt);
  ref_dim(k, 1, k->w, &ow, &pl);
  int64_t cg = k->c / k->groups, og = k->oc / k->groups;
  int64_t ysh[4] = {k->n, transpose ? k->h : oh, transpose ? k->w : ow, transpose ? k->c : k->oc};
  *y = gt_zeros(GR_F64, gr_shape_make(4, ysh));
  double *yd = gr_tensor_data(y);
  for (int64_t b = 0; b < k->n; b++)
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < ow; ox++)
        for (int64_t o = 0; o < k->oc; o++) {
          int64_t gi = o / og;
          int64_t opos = ((b * oh + oy) * ow + ox) * k->oc + o;
          double acc = 0;
          for (int64_t i = 0; i < k->kh; i++)
            for (int64_t j = 0; j < k->kw; j++) {
              int64_t iy = oy * k->sh - pt + i * k->dh, ix = ox * k->sw - pl + j * k->dw;
              if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w) continue;
              for (int64_t ci = 0; ci < cg; ci++) {
                int64_t ipos = ((b * k->h + iy) * k->w + ix) * k->c + gi * cg + ci;
                double wv = gr_tensor_get_f64(f, ((i * k->kw + j) * cg + ci) * k->oc + o);
                if (transpose)
                  yd[ipos] += gr_tensor_get_f64(x, opos) * wv;
                else
                  acc += gr_tensor_get_f64(x, ipos) * wv;
              }
            }
          if (!transpose) yd[opos] = acc;
        }
}

static gr_conv_options opts_of(const conv_case *k, const char *data_format) {
  gr_conv_options o = {{k->sh, k->sw}, {k->dh, k->dw}, k->pad, {0}, k->groups, data_format};
  memcpy(o.explicit_paddings, k->pads, sizeof o.explicit_paddings);
  return o;
}

static gr_output build_conv(gr_graph *g, const gr_output *x, void *arg) {
  gr_conv_options o = opts_of(arg, NULL);
  return gr_conv2d(g, x[0], x[1], &o);
}
static gr_output build_transpose(gr_graph *g, const gr_output *x, void *arg) {
  gr_conv_options o = opts_of(arg, NULL);
  return gr_conv2d_transpose(g, x[0], x[1], &o);
}
/* The same in NCHW (x [n, c, h, w]; the filter as in NHWC). */
static gr_output build_conv_nchw(gr_graph *g, const gr_output *x, void *arg) {
  gr_conv_options o = opts_of(arg, "NCHW");
  return gr_conv2d(g, x[0], x[1], &o);
}
static gr_output build_transpose_nchw(gr_graph *g, const gr_output *x, void *arg) {
  gr_conv_options o = opts_of(arg, "NCHW");
  return gr_conv2d_transpose(g, x[0], x[1], &o);
}

/* Runs build on inputs (fed through placeholders) and returns output 0. */
static gr_status run(gt_build_fn build, void *arg, const gr_tensor *in, int n, gr_tensor *out,
                     gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output x[4];
  gr_feed f[4];
  for (int i = 0; i < n; i++) {
    char nm[8];
    snprintf(nm, sizeof nm, "in%d", i);
    x[i] = gr_placeholder(g, nm, in[i].dtype, in[i].shape);
    f[i] = (gr_feed){x[i], &in[i]};
  }
  gr_output y = build(g, x, arg);
  gr_status s;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    s = err->code;
  } else {
    gr_session *sess = gr_session_new(g, NULL, err);
    s = sess ? gr_session_run(sess, f, n, &y, 1, out, NULL, 0, err) : err->code;
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

static const conv_case cases[] = {
    /* n  h  w  c kh kw oc sh sw dh dw  g  pad */
    {2, 7, 9, 3, 3, 3, 4, 1, 1, 1, 1, 1, "SAME", {0}},
    {1, 8, 8, 1, 3, 3, 2, 2, 2, 1, 1, 1, "SAME", {0}},              /* batch 1, channels 1 */
    {3, 11, 6, 2, 2, 2, 3, 3, 3, 1, 1, 1, "VALID", {0}},            /* stride > kernel */
    {2, 5, 5, 3, 1, 1, 5, 1, 1, 1, 1, 1, "VALID", {0}},             /* 1x1: no im2col */
    {2, 5, 6, 3, 1, 1, 4, 2, 1, 1, 1, 1, "SAME", {0}},              /* 1x1 strided */
    {1, 4, 5, 2, 2, 3, 3, 1, 2, 1, 1, 1, "EXPLICIT", {4, 3, 5, 4}}, /* padding > kernel */
    {2, 9, 9, 2, 3, 3, 2, 1, 1, 2, 2, 1, "SAME", {0}},              /* dilations */
    {2, 10, 7, 2, 3, 2, 3, 2, 1, 2, 3, 1, "VALID", {0}},
    {2, 6, 6, 4, 3, 3, 6, 1, 1, 1, 1, 2, "SAME", {0}},   /* groups */
    {2, 7, 5, 3, 3, 3, 6, 2, 2, 1, 1, 3, "SAME", {0}},   /* depthwise, multiplier 2 */
    {1, 6, 6, 64, 3, 3, 8, 1, 1, 1, 1, 1, "SAME", {0}},  /* channels 64 */
    {2, 5, 5, 3, 5, 5, 64, 1, 1, 1, 1, 1, "VALID", {0}}, /* kernel = input; 64 out */
    {1, 3, 3, 1, 3, 3, 1, 5, 5, 1, 1, 1, "EXPLICIT", {1, 2, 0, 3}},
    {10, 7, 6, 9, 3, 3, 9, 2, 1, 1, 1, 9, "SAME", {0}}, /* depthwise, f32: oneDNN */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static gr_tensor random_filter(const conv_case *k, gr_dtype dt) {
  return gt_random(&rng, dt, gr_shape_make(4, (int64_t[]){k->kh, k->kw, k->c / k->groups, k->oc}),
                   -1, 1);
}

static gr_tensor to_f32(const gr_tensor *t) {
  gr_tensor r = gt_zeros(GR_F32, t->shape);
  for (int64_t i = 0; i < gr_tensor_num_elements(t); i++)
    gr_tensor_set_f64(&r, i, gr_tensor_get_f64(t, i));
  return r;
}

static void test_conv2d_forward(void) {
  for (int ci = 0; ci < NCASES; ci++) {
    const conv_case *k = &cases[ci];
    gr_tensor x =
        gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}), -1, 1);
    gr_tensor f = random_filter(k, GR_F32), want, got = gr_tensor_empty(), w32;
    ref_conv(k, &x, &f, false, &want);
    gr_error err;
    gr_tensor in[2] = {x, f};
    GR_CHECK_OK(run(build_conv, (void *)k, in, 2, &got, &err), err);
    w32 = to_f32(&want);
    GR_CHECK_MSG(got.buf && gt_near(&got, &w32, 1e-4, 1e-4), "case %d", ci);
    gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&want);
    gr_tensor_release(&w32), gr_tensor_release(&got);
  }
}

/* f64 through the op matches the reference closely; conv2d_transpose too. */
static void test_conv2d_f64_and_transpose(void) {
  int matched = 0;
  for (int ci = 0; ci < NCASES; ci++) {
    const conv_case *k = &cases[ci];
    gr_tensor x =
        gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}), -1, 1);
    gr_tensor f = random_filter(k, GR_F64), want, got = gr_tensor_empty();
    ref_conv(k, &x, &f, false, &want);
    gr_error err;
    GR_CHECK_OK(run(build_conv, (void *)k, (gr_tensor[]){x, f}, 2, &got, &err), err);
    GR_CHECK_MSG(got.buf && gt_near(&got, &want, 1e-12, 1e-12), "conv2d f64 case %d", ci);
    gr_tensor_release(&got);
    /* conv2d_transpose of the conv's output shape gives the input shape,
     * except where SAME / strides do not round-trip */
    gr_tensor y = gt_random(&rng, GR_F64, want.shape, -1, 1), tw;
    ref_conv(k, &y, &f, true, &tw);
    gr_status s = run(build_transpose, (void *)k, (gr_tensor[]){y, f}, 2, &got, &err);
    if (s == GR_OK && gr_shape_equal(&got.shape, &tw.shape) && ++matched)
      GR_CHECK_MSG(gt_near(&got, &tw, 1e-12, 1e-12), "conv2d_transpose case %d", ci);
    else /* the output size conv2d_transpose picks differs from this input */
      GR_CHECK_MSG(s != GR_OK || !gr_shape_equal(&got.shape, &tw.shape), "case %d", ci);
    gr_tensor_release(&got), gr_tensor_release(&y), gr_tensor_release(&tw);
    gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&want);
  }
  GR_CHECK_MSG(matched >= 7, "conv2d_transpose compared on %d cases", matched);
}

/* Several im2col tiles (n * oh * ow rows of 576 values beyond the 4 MiB
 * budget), f32 against the reference. */
static void test_conv2d_tiles(void) {
  conv_case k = {4, 28, 28, 64, 3, 3, 16, 1, 1, 1, 1, 1, "SAME", {0}};
  gr_tensor x = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){k.n, k.h, k.w, k.c}), -1, 1);
  gr_tensor f = random_filter(&k, GR_F32), want, got = gr_tensor_empty();
  ref_conv(&k, &x, &f, false, &want);
  gr_tensor w32 = to_f32(&want);
  gr_error err;
  GR_CHECK_OK(run(build_conv, &k, (gr_tensor[]){x, f}, 2, &got, &err), err);
  GR_CHECK(got.buf && gt_near(&got, &w32, 1e-4, 1e-3));
  gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&want);
  gr_tensor_release(&w32), gr_tensor_release(&got);
}

/* First derivatives of conv2d and conv2d_transpose for x and the filter,
 * second derivatives (through conv2d_backprop_input / _filter) for some. */
static void test_conv2d_gradients(void) {
  static const int pick[] = {0, 2, 4, 5, 6, 8, 9, 12};
  for (size_t p = 0; p < sizeof pick / sizeof pick[0]; p++) {
    conv_case k = cases[pick[p]];
    if (k.c > 8) continue;
    gr_tensor x = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, k.h, k.w, k.c}), -1, 1);
    gr_tensor f = random_filter(&k, GR_F64);
    char what[64];
    snprintf(what, sizeof what, "conv2d case %d", pick[p]);
    GR_CHECK_MSG(gt_check_gradient(what, build_conv, &k, (gr_tensor[]){x, f}, 2, 1, 40, 1e-6), "%s",
                 what);
    if (p % 2 == 0)
      GR_CHECK_MSG(gt_check_gradient(what, build_conv, &k, (gr_tensor[]){x, f}, 2, 2, 20, 1e-6),
                   "%s order 2", what);
    /* transpose: its input has the conv's output shape */
    int64_t oh, ow, pb;
    ref_dim(&k, 0, k.h, &oh, &pb);
    ref_dim(&k, 1, k.w, &ow, &pb);
    gr_tensor y = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, oh, ow, k.oc}), -1, 1);
    snprintf(what, sizeof what, "conv2d_transpose case %d", pick[p]);
    gr_error err;
    gr_tensor probe = gr_tensor_empty();
    if (run(build_transpose, &k, (gr_tensor[]){y, f}, 2, &probe, &err) == GR_OK)
      GR_CHECK_MSG(gt_check_gradient(what, build_transpose, &k, (gr_tensor[]){y, f}, 2, 1 + (p % 2),
                                     30, 1e-6),
                   "%s", what);
    gr_tensor_release(&probe);
    gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&y);
  }
}

/* NCHW against NHWC on the same data transposed: the NCHW kernels run the
 * NHWC code on transposed copies, so the outputs must be bit-identical
 * (f32 and f64), for every case, conv2d and conv2d_transpose. */
static void test_conv2d_nchw_matches_nhwc(void) {
  int compared = 0;
  for (int ci = 0; ci < NCASES; ci++) {
    const conv_case *k = &cases[ci];
    gr_dtype dt = ci % 2 ? GR_F64 : GR_F32;
    for (int tr = 0; tr < 2; tr++) {
      int64_t oh, ow, pb;
      ref_dim(k, 0, k->h, &oh, &pb);
      ref_dim(k, 1, k->w, &ow, &pb);
      int64_t xs[4] = {k->n, tr ? oh : k->h, tr ? ow : k->w, tr ? k->oc : k->c};
      gr_tensor x = gt_random(&rng, dt, gr_shape_make(4, xs), -1, 1);
      gr_tensor f = random_filter(k, dt), xt = gt_move_channels(&x, true);
      gr_tensor y = gr_tensor_empty(), yt = gr_tensor_empty();
      gr_error err, err2;
      gr_status s1 =
          run(tr ? build_transpose : build_conv, (void *)k, (gr_tensor[]){x, f}, 2, &y, &err);
      gr_status s2 = run(tr ? build_transpose_nchw : build_conv_nchw, (void *)k,
                         (gr_tensor[]){xt, f}, 2, &yt, &err2);
      GR_CHECK_MSG(s1 == s2, "case %d transpose %d: NHWC %d, NCHW %d", ci, tr, s1, s2);
      if (s1 == GR_OK && s2 == GR_OK) {
        gr_tensor back = gt_move_channels(&yt, false);
        GR_CHECK_MSG(gt_bit_equal(&back, &y), "case %d transpose %d", ci, tr);
        compared++;
        gr_tensor_release(&back);
      }
      gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&xt);
      gr_tensor_release(&y), gr_tensor_release(&yt);
    }
  }
  GR_CHECK_MSG(compared >= NCASES + 7, "compared %d", compared);
}

/* Gradients of conv2d and conv2d_transpose in NCHW by finite differences
 * (through the NCHW conv2d_backprop_input / _filter). */
static void test_conv2d_nchw_gradients(void) {
  static const int pick[] = {0, 2, 5, 8, 9};
  for (size_t p = 0; p < sizeof pick / sizeof pick[0]; p++) {
    const conv_case *k = &cases[pick[p]];
    gr_tensor x =
        gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k->n, k->c, k->h, k->w}), -1, 1);
    gr_tensor f = random_filter(k, GR_F64);
    char what[64];
    snprintf(what, sizeof what, "conv2d NCHW case %d", pick[p]);
    GR_CHECK_MSG(gt_check_gradient(what, build_conv_nchw, (void *)k, (gr_tensor[]){x, f}, 2,
                                   1 + (p == 0), 30, 1e-6),
                 "%s", what);
    int64_t oh, ow, pb;
    ref_dim(k, 0, k->h, &oh, &pb);
    ref_dim(k, 1, k->w, &ow, &pb);
    gr_tensor y =
        gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k->n, k->oc, oh, ow}), -1, 1);
    gr_tensor probe = gr_tensor_empty();
    gr_error err;
    snprintf(what, sizeof what, "conv2d_transpose NCHW case %d", pick[p]);
    if (run(build_transpose_nchw, (void *)k, (gr_tensor[]){y, f}, 2, &probe, &err) == GR_OK)
      GR_CHECK_MSG(gt_check_gradient(what, build_transpose_nchw, (void *)k, (gr_tensor[]){y, f}, 2,
                                     1, 30, 1e-6),
                   "%s", what);
    gr_tensor_release(&probe);
    gr_tensor_release(&x), gr_tensor_release(&f), gr_tensor_release(&y);
  }
}

/* Unknown batch and spatial dims: the shape function leaves them unknown
 * and the kernel works on what it gets. */
static void test_conv2d_unknown_dims(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){-1, -1, 10, 3}));
  gr_output f = gr_placeholder(g, "f", GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 3, 8}));
  gr_output y = gr_conv2d(g, x, f, &(gr_conv_options){.strides = {2, 2}, .padding = "SAME"});
  GR_CHECK(y.node);
  if (y.node) {
    gr_shape s = y.node->out_shapes[0];
    GR_CHECK_EQ_INT(s.rank, 4);
    GR_CHECK_EQ_INT(s.dims[0], -1);
    GR_CHECK_EQ_INT(s.dims[1], -1);
    GR_CHECK_EQ_INT(s.dims[2], 5);
    GR_CHECK_EQ_INT(s.dims[3], 8);
  }
  gr_graph_free(g);
}

/* ---- errors ----------------------------------------------------------------------------- */

typedef struct bad {
  int64_t xs[5], fs[5];
  int xr, fr;
  const char *op;
  gr_attr attrs[5];
  int na;
  gr_dtype dt;
  const char *sub;
} bad;

static void expect_build_error(const bad *b) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", b->dt ? b->dt : GR_F32, gr_shape_make(b->xr, b->xs));
  gr_output f = gr_placeholder(g, "f", GR_F32, gr_shape_make(b->fr, b->fs));
  gr_output y = gr_op(g, b->op, "layer", (gr_output[]){x, f}, 2, b->attrs, b->na);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK_MSG(!y.node && e, "%s: expected an error containing '%s'", b->op, b->sub);
  if (e) {
    GR_CHECK_STR_CONTAINS(e->msg, "node 'layer'");
    GR_CHECK_STR_CONTAINS(e->msg, b->sub);
  }
  gr_graph_free(g);
}

static void test_conv2d_errors(void) {
  static const int64_t s0[] = {0, 1}, sneg[] = {-1, 2}, d0[] = {1, 0}, s3[] = {1, 2, 3};
  static const int64_t p3[] = {1, 1, 1};
  const bad cases_bad[] = {
      {{2, 8, 8, 3},
       {3, 3, 4, 8},
       4,
       4,
       "conv2d",
       {{0}},
       0,
       0,
       "channel mismatch: input [2, 8, 8, 3] has 3 channels but filter [3, 3, 4, 8] takes 4"},
      {{2, 4, 4, 3},
       {5, 5, 3, 8},
       4,
       4,
       "conv2d",
       {{0}},
       0,
       0,
       "larger than the unpadded input (4) (input [2, 4, 4, 3], filter [5, 5, 3, 8])"},
      {{2, 4, 4, 3},
       {5, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("padding", "EXPLICIT"),
        gr_attr_ints("explicit_paddings", 4, (int64_t[]){0, 0, 1, 1})},
       2,
       0,
       "larger than the padded input (4)"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_ints("strides", 2, s0)},
       1,
       0,
       "attr 'strides' must be >= 1, got [0, 1]"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_ints("strides", 2, sneg)},
       1,
       0,
       "attr 'strides' must be >= 1, got [-1, 2]"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_ints("strides", 3, s3)},
       1,
       0,
       "got 3 values"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_ints("dilations", 2, d0)},
       1,
       0,
       "attr 'dilations' must be >= 1"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("padding", "FULL")},
       1,
       0,
       "unknown padding 'FULL' (expected SAME, VALID or EXPLICIT)"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("padding", "EXPLICIT"), gr_attr_ints("explicit_paddings", 3, p3)},
       2,
       0,
       "got 3 values"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_ints("explicit_paddings", 3, p3)},
       1,
       0,
       "only for padding EXPLICIT"},
      {{8, 8, 3},
       {3, 3, 3, 8},
       3,
       4,
       "conv2d",
       {{0}},
       0,
       0,
       "input must have rank 4 (NHWC), got shape [8, 8, 3]"},
      {{2, 8, 8, 3}, {3, 3, 8}, 4, 3, "conv2d", {{0}}, 0, 0, "filter must have rank 4"},
      {{2, 8, 8, 4},
       {3, 3, 2, 6},
       4,
       4,
       "conv2d",
       {gr_attr_int("groups", 3)},
       1,
       0,
       "takes 2 per group in 3 groups"},
      {{2, 8, 8, 4},
       {3, 3, 2, 5},
       4,
       4,
       "conv2d",
       {gr_attr_int("groups", 2)},
       1,
       0,
       "5 output channels do not split into 2 groups"},
      {{2, 8, 8, 4},
       {3, 3, 4, 5},
       4,
       4,
       "conv2d",
       {gr_attr_int("groups", 0)},
       1,
       0,
       "attr 'groups' must be >= 1, got 0"},
      {{2, 8, 8, 3}, {3, 3, 3, 8}, 4, 4, "conv2d", {{0}}, 0, GR_I32, "expected one of f32, f64"},
      {{2, 8, 8, 3},
       {3, 3, 4, 8},
       4,
       4,
       "conv2d_transpose",
       {{0}},
       0,
       0,
       "channel mismatch: input [2, 8, 8, 3] has 3 channels but filter [3, 3, 4, 8] gives 8"},
      {{1, 1, 1, 2},
       {2, 2, 3, 2},
       4,
       4,
       "conv2d_transpose",
       {gr_attr_string("padding", "EXPLICIT"),
        gr_attr_ints("explicit_paddings", 4, (int64_t[]){2, 2, 0, 0})},
       2,
       0,
       "the padding leaves no output"},
  };
  for (size_t i = 0; i < sizeof cases_bad / sizeof cases_bad[0]; i++)
    expect_build_error(&cases_bad[i]);
}

/* data_format: unknown names, channels read from axis 1 in NCHW (the
 * messages show the shapes as given), NCHW-ordered 4-value strides. */
static void test_conv2d_format_errors(void) {
  static const int64_t s4[] = {1, 2, 2, 1};
  const bad cases_bad[] = {
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("data_format", "NWHC")},
       1,
       0,
       "unknown data_format 'NWHC' (expected NHWC or NCHW)"},
      {{2, 8, 8, 3},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("data_format", "NCHW")},
       1,
       0,
       "channel mismatch: input [2, 8, 8, 3] (NCHW) has 8 channels but filter [3, 3, 3, 8] "
       "takes 3"},
      {{2, 3, 8, 8},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d_transpose",
       {gr_attr_string("data_format", "NCHW")},
       1,
       0,
       "channel mismatch: input [2, 3, 8, 8] (NCHW) has 3 channels but filter [3, 3, 3, 8] "
       "gives 8"},
      {{2, 3, 8, 8},
       {3, 3, 3, 8},
       4,
       4,
       "conv2d",
       {gr_attr_string("data_format", "NCHW"), gr_attr_ints("strides", 4, s4)},
       2,
       0,
       "attr 'strides' must have 1, 2 or 4 values ([1, 1, h, w]) for NCHW, got 4 values"},
      {{2, 3, 8},
       {3, 3, 3, 8},
       3,
       4,
       "conv2d",
       {gr_attr_string("data_format", "NCHW")},
       1,
       0,
       "input must have rank 4 (NCHW), got shape [2, 3, 8]"},
  };
  for (size_t i = 0; i < sizeof cases_bad / sizeof cases_bad[0]; i++)
    expect_build_error(&cases_bad[i]);
  /* NCHW strides [1, 1, h, w] are accepted: [2, 3, 8, 8] stride 2 -> [2, 8, 4, 4] */
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){2, 3, 8, 8}));
  gr_output f = gr_placeholder(g, "f", GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 3, 8}));
  gr_attr at[3] = {gr_attr_string("data_format", "NCHW"),
                   gr_attr_ints("strides", 4, (int64_t[]){1, 1, 2, 2}),
                   gr_attr_string("padding", "SAME")};
  gr_output y = gr_op(g, "conv2d", "c", (gr_output[]){x, f}, 2, at, 3);
  GR_CHECK(y.node);
  if (y.node) {
    gr_shape want = gr_shape_make(4, (int64_t[]){2, 8, 4, 4});
    GR_CHECK(gr_shape_equal(&y.node->out_shapes[0], &want));
  }
  gr_graph_free(g);
}

/* Shapes known only at run time: the kernel reports the mismatch, naming
 * the node and the shapes. */
static void test_conv2d_runtime_error(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){-1, -1, -1, -1}));
  gr_output f = gr_placeholder(g, "f", GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 3, 2}));
  gr_output y = gr_op(g, "conv2d", "conv", (gr_output[]){x, f}, 2, NULL, 0);
  gr_tensor xv = gt_zeros(GR_F32, gr_shape_make(4, (int64_t[]){1, 2, 5, 3}));
  gr_tensor fv = gt_zeros(GR_F32, gr_shape_make(4, (int64_t[]){3, 3, 3, 2}));
  gr_error err = {0};
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out = gr_tensor_empty();
  gr_status st = gr_session_run(s, (gr_feed[]){{x, &xv}, {f, &fv}}, 2, &y, 1, &out, NULL, 0, &err);
  GR_CHECK(st != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "conv");
  GR_CHECK_STR_CONTAINS(err.msg, "(input [1, 2, 5, 3], filter [3, 3, 3, 2])");
  gr_session_free(s);
  gr_tensor_release(&xv), gr_tensor_release(&fv), gr_tensor_release(&out);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_conv2d_forward);
  GR_RUN(test_conv2d_f64_and_transpose);
  GR_RUN(test_conv2d_tiles);
  GR_RUN(test_conv2d_gradients);
  GR_RUN(test_conv2d_nchw_matches_nhwc);
  GR_RUN(test_conv2d_nchw_gradients);
  GR_RUN(test_conv2d_unknown_dims);
  GR_RUN(test_conv2d_errors);
  GR_RUN(test_conv2d_format_errors);
  GR_RUN(test_conv2d_runtime_error);
  return gr_test_finish();
}
