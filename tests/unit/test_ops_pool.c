/* Tests of ops/pool.c: max_pool and avg_pool against a double reference on
 * random shapes (SAME / VALID / EXPLICIT, strides larger than the window,
 * odd sizes, batch 1, channels 1, 3 and 64), global_avg_pool and flatten;
 * gradients (and second derivatives) by finite differences; bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

typedef struct pool_case {
  int64_t n, h, w, c, kh, kw, sh, sw;
  const char *pad;
  int64_t pads[4];
} pool_case;

static gt_rng rng = {29};

static const pool_case cases[] = {
    {2, 7, 9, 3, 2, 2, 2, 2, "VALID", {0}},
    {1, 7, 7, 1, 3, 3, 2, 2, "SAME", {0}},
    {2, 11, 6, 3, 2, 2, 3, 3, "VALID", {0}},
    {2, 5, 5, 64, 3, 3, 1, 1, "SAME", {0}},
    {1, 4, 5, 2, 3, 2, 2, 1, "SAME", {0}},
    {2, 6, 6, 3, 1, 1, 2, 2, "VALID", {0}},
    {1, 4, 4, 2, 2, 2, 2, 2, "EXPLICIT", {1, 1, 0, 1}},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void ref_pool(const pool_case *k, const gr_tensor *x, bool max, gr_tensor *y) {
  int64_t oh, ow, pt, pl;
  gt_window_dim(k->h, k->kh, k->sh, 1, k->pad, k->pads[0], k->pads[1], &oh, &pt);
  gt_window_dim(k->w, k->kw, k->sw, 1, k->pad, k->pads[2], k->pads[3], &ow, &pl);
  *y = gt_zeros(GR_F64, gr_shape_make(4, (int64_t[]){k->n, oh, ow, k->c}));
  for (int64_t b = 0; b < k->n; b++)
    for (int64_t oy = 0; oy < oh; oy++)
      for (int64_t ox = 0; ox < ow; ox++)
        for (int64_t c = 0; c < k->c; c++) {
          double acc = max ? -INFINITY : 0;
          int cnt = 0;
          for (int64_t i = 0; i < k->kh; i++)
            for (int64_t j = 0; j < k->kw; j++) {
              int64_t iy = oy * k->sh - pt + i, ix = ox * k->sw - pl + j;
              if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w) continue;
              double v = gr_tensor_get_f64(x, ((b * k->h + iy) * k->w + ix) * k->c + c);
              acc = max ? fmax(acc, v) : acc + v;
              cnt++;
            }
          gr_tensor_set_f64(y, ((b * oh + oy) * ow + ox) * k->c + c,
                            cnt == 0 ? 0
                            : max    ? acc
                                     : acc / cnt);
        }
}

typedef struct pool_arg {
  const pool_case *k;
  const char *op;
  const char *data_format; /* NULL: NHWC */
} pool_arg;

static gr_output build_op(gr_graph *g, const gr_output *x, void *arg) {
  const pool_arg *a = arg;
  const pool_case *k = a->k;
  gr_attr at[5] = {gr_attr_ints("ksize", 2, (int64_t[]){k->kh, k->kw}),
                   gr_attr_ints("strides", 2, (int64_t[]){k->sh, k->sw}),
                   gr_attr_string("padding", k->pad),
                   gr_attr_ints("explicit_paddings", strcmp(k->pad, "EXPLICIT") ? 0 : 4, k->pads),
                   gr_attr_string("data_format", a->data_format ? a->data_format : "NHWC")};
  return gr_op(g, a->op, NULL, x, 1, at, 5);
}

/* The gradient of sum(y * y) for y = the pool of x: through max_pool_grad
 * or avg_pool_grad. */
static gr_output build_sq_grad(gr_graph *g, const gr_output *x, void *arg) {
  gr_output y = build_op(g, x, arg), d;
  gr_output s = gr_reduce_sum(g, gr_mul(g, y, y), NULL, 0, false);
  gr_gradients(g, &s, 1, x, 1, NULL, false, &d);
  return d;
}

static gr_status run1(gt_build_fn build, void *arg, const gr_tensor *x, gr_tensor *out,
                      gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output p = gr_placeholder(g, "x", x->dtype, x->shape);
  gr_output y = build(g, &p, arg);
  gr_status s;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    s = err->code;
  } else {
    gr_session *sess = gr_session_new(g, NULL, err);
    s = sess ? gr_session_run(sess, &(gr_feed){p, x}, 1, &y, 1, out, NULL, 0, err) : err->code;
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

static void test_pool_forward(void) {
  for (int ci = 0; ci < NCASES; ci++)
    for (int max = 0; max < 2; max++)
      for (int dt = 0; dt < 2; dt++) {
        const pool_case *k = &cases[ci];
        gr_dtype d = dt ? GR_F64 : GR_F32;
        gr_tensor x =
            gt_random(&rng, d, gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}), -2, 2);
        gr_tensor want, got = gr_tensor_empty(), w = gr_tensor_empty();
        ref_pool(k, &x, max, &want);
        w = gt_zeros(d, want.shape);
        for (int64_t i = 0; i < gr_tensor_num_elements(&want); i++)
          gr_tensor_set_f64(&w, i, gr_tensor_get_f64(&want, i));
        pool_arg a = {k, max ? "max_pool" : "avg_pool", NULL};
        gr_error err;
        GR_CHECK_OK(run1(build_op, &a, &x, &got, &err), err);
        GR_CHECK_MSG(got.buf && gt_near(&got, &w, 1e-5, 1e-6), "%s case %d", a.op, ci);
        gr_tensor_release(&x), gr_tensor_release(&want), gr_tensor_release(&w);
        gr_tensor_release(&got);
      }
}

static void test_pool_gradients(void) {
  for (int ci = 0; ci < NCASES; ci++)
    for (int max = 0; max < 2; max++) {
      pool_case k = cases[ci];
      if (k.c > 8) k.c = 5;
      gr_tensor x =
          gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, k.h, k.w, k.c}), -2, 2);
      pool_arg a = {&k, max ? "max_pool" : "avg_pool", NULL};
      char what[64];
      snprintf(what, sizeof what, "%s case %d", a.op, ci);
      for (int order = 1; order <= 2; order++)
        GR_CHECK_MSG(gt_check_gradient(what, build_op, &a, &x, 1, order, 40, 1e-6), "%s order %d",
                     what, order);
      gr_tensor_release(&x);
    }
}

/* max_pool_grad and max_pool_grad_grad: second derivatives (d2 loss / dx2
 * is zero for max_pool; here the linear map dy -> dx) by differences. */
static gr_output build_max_grad(gr_graph *g, const gr_output *x, void *arg) {
  pool_arg a = {arg, "max_pool", NULL};
  gr_output y = build_op(g, x, &a), d;
  gr_output s = gr_reduce_sum(g, gr_mul(g, y, gr_mul(g, y, x[1])), NULL, 0, false);
  gr_gradients(g, &s, 1, x, 1, NULL, false, &d);
  return d; /* 2 max_pool_grad(x, y * w): in w, linear through max_pool_grad */
}

static void test_max_pool_grad_ops(void) {
  pool_case k = cases[1];
  int64_t oh, ow, pb;
  gt_window_dim(k.h, k.kh, k.sh, 1, k.pad, 0, 0, &oh, &pb);
  gt_window_dim(k.w, k.kw, k.sw, 1, k.pad, 0, 0, &ow, &pb);
  gr_tensor x = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, k.h, k.w, k.c}), -2, 2);
  gr_tensor w = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, oh, ow, k.c}), -1, 1);
  gr_tensor in[2] = {x, w};
  GR_CHECK(gt_check_gradient("max_pool_grad in dy", build_max_grad, &k, in, 2, 1, 40, 1e-6));
  GR_CHECK(gt_check_gradient("max_pool_grad in dy", build_max_grad, &k, in, 2, 2, 20, 1e-6));
  gr_tensor_release(&x), gr_tensor_release(&w);
}

/* arg: the data_format (NULL: NHWC). */
static gr_output build_gap(gr_graph *g, const gr_output *x, void *arg) {
  return gr_global_avg_pool(g, x[0], arg);
}
static gr_output build_flatten(gr_graph *g, const gr_output *x, void *arg) {
  (void)arg;
  return gr_flatten(g, x[0]);
}

static void test_global_avg_pool_and_flatten(void) {
  gr_tensor x = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){3, 5, 4, 6}), -1, 1), got;
  gr_error err;
  GR_CHECK_OK(run1(build_gap, NULL, &x, &got, &err), err);
  GR_CHECK_EQ_INT(got.shape.rank, 2);
  for (int64_t b = 0; b < 3; b++)
    for (int64_t c = 0; c < 6; c++) {
      double s = 0;
      for (int64_t p = 0; p < 20; p++) s += gr_tensor_get_f64(&x, (b * 20 + p) * 6 + c);
      GR_CHECK_NEAR(gr_tensor_get_f64(&got, b * 6 + c), s / 20, 1e-12);
    }
  gr_tensor_release(&got);
  GR_CHECK_OK(run1(build_flatten, NULL, &x, &got, &err), err);
  GR_CHECK(got.shape.rank == 2 && got.shape.dims[0] == 3 && got.shape.dims[1] == 120);
  for (int64_t i = 0; i < 360; i++)
    GR_CHECK(gr_tensor_get_f64(&got, i) == gr_tensor_get_f64(&x, i));
  gr_tensor_release(&got);
  GR_CHECK(gt_check_gradient("global_avg_pool", build_gap, NULL, &x, 1, 2, 30, 1e-6));
  GR_CHECK(gt_check_gradient("flatten", build_flatten, NULL, &x, 1, 2, 30, 1e-6));
  gr_tensor_release(&x);
  /* unknown batch: the shape function keeps it unknown */
  gr_graph *g = gr_graph_new();
  gr_output p = gr_placeholder(g, "x", GR_F32, gr_shape_make(4, (int64_t[]){-1, 7, 7, 16}));
  gr_output f = gr_flatten(g, gr_max_pool(g, p, (int64_t[]){2, 2}, NULL, "SAME", NULL));
  GR_CHECK(f.node && f.node->out_shapes[0].dims[0] == -1 && f.node->out_shapes[0].dims[1] == 256);
  gr_graph_free(g);
}

/* NCHW against NHWC on the same data transposed, bit for bit (NCHW runs
 * the NHWC loops on transposed copies): max_pool, avg_pool and, through
 * the gradient of sum(y * y), max_pool_grad and avg_pool_grad, in f32 and
 * f64; global_avg_pool (indexed directly, the same sums in the same order). */
static void test_pool_nchw_matches_nhwc(void) {
  for (int ci = 0; ci < NCASES; ci++)
    for (int m = 0; m < 4; m++) {
      const pool_case *k = &cases[ci];
      gr_dtype d = ci % 2 ? GR_F64 : GR_F32;
      gr_tensor x =
          gt_random(&rng, d, gr_shape_make(4, (int64_t[]){k->n, k->h, k->w, k->c}), -2, 2);
      gr_tensor xt = gt_move_channels(&x, true), y = gr_tensor_empty(), yt = gr_tensor_empty();
      pool_arg a = {k, m % 2 ? "max_pool" : "avg_pool", NULL}, at = a;
      at.data_format = "NCHW";
      gt_build_fn build = m < 2 ? build_op : build_sq_grad;
      gr_error err;
      GR_CHECK_OK(run1(build, &a, &x, &y, &err), err);
      GR_CHECK_OK(run1(build, &at, &xt, &yt, &err), err);
      gr_tensor back = gt_move_channels(&yt, false);
      GR_CHECK_MSG(gt_bit_equal(&back, &y), "%s%s case %d", a.op, m < 2 ? "" : " gradient", ci);
      gr_tensor_release(&x), gr_tensor_release(&xt), gr_tensor_release(&y);
      gr_tensor_release(&yt), gr_tensor_release(&back);
    }
  gr_tensor x = gt_random(&rng, GR_F32, gr_shape_make(4, (int64_t[]){3, 5, 4, 6}), -1, 1);
  gr_tensor xt = gt_move_channels(&x, true), y, yt;
  gr_error err;
  GR_CHECK_OK(run1(build_gap, NULL, &x, &y, &err), err);
  GR_CHECK_OK(run1(build_gap, "NCHW", &xt, &yt, &err), err);
  GR_CHECK(gt_bit_equal(&yt, &y));
  gr_tensor_release(&x), gr_tensor_release(&xt), gr_tensor_release(&y), gr_tensor_release(&yt);
}

/* Gradients in NCHW by finite differences (and second order for one). */
static void test_pool_nchw_gradients(void) {
  for (int ci = 0; ci < NCASES; ci += 2)
    for (int max = 0; max < 2; max++) {
      pool_case k = cases[ci];
      if (k.c > 8) k.c = 5;
      gr_tensor x =
          gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){k.n, k.c, k.h, k.w}), -2, 2);
      pool_arg a = {&k, max ? "max_pool" : "avg_pool", "NCHW"};
      char what[64];
      snprintf(what, sizeof what, "%s NCHW case %d", a.op, ci);
      GR_CHECK_MSG(gt_check_gradient(what, build_op, &a, &x, 1, 1 + (ci == 0), 40, 1e-6), "%s",
                   what);
      gr_tensor_release(&x);
    }
  gr_tensor x = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){2, 3, 4, 5}), -1, 1);
  GR_CHECK(gt_check_gradient("global_avg_pool NCHW", build_gap, "NCHW", &x, 1, 2, 30, 1e-6));
  gr_tensor_release(&x);
}

static void expect_error(const char *op, gr_shape xs, const gr_attr *at, int na, const char *sub) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, xs);
  gr_output y = gr_op(g, op, "pool", &x, 1, at, na);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK_MSG(!y.node && e, "%s: expected an error containing '%s'", op, sub);
  if (e) {
    GR_CHECK_STR_CONTAINS(e->msg, "node 'pool'");
    GR_CHECK_STR_CONTAINS(e->msg, sub);
  }
  gr_graph_free(g);
}

static void test_pool_errors(void) {
  static const int64_t k2[] = {2, 2}, k0[] = {0, 2}, k9[] = {9, 9}, sneg[] = {-2, 1};
  gr_shape x4 = gr_shape_make(4, (int64_t[]){2, 8, 8, 3});
  expect_error("max_pool", gr_shape_make(3, (int64_t[]){8, 8, 3}),
               (gr_attr[]){gr_attr_ints("ksize", 2, k2)}, 1,
               "input must have rank 4 (NHWC), got shape [8, 8, 3]");
  expect_error("avg_pool", x4, (gr_attr[]){gr_attr_ints("ksize", 2, k0)}, 1,
               "attr 'ksize' must be >= 1, got [0, 2]");
  expect_error("max_pool", x4, (gr_attr[]){gr_attr_ints("ksize", 2, k9)}, 1,
               "is larger than the unpadded input (8) (input [2, 8, 8, 3], ksize [9, 9])");
  expect_error("max_pool", x4,
               (gr_attr[]){gr_attr_ints("ksize", 2, k2), gr_attr_ints("strides", 2, sneg)}, 2,
               "attr 'strides' must be >= 1, got [-2, 1]");
  expect_error("avg_pool", x4,
               (gr_attr[]){gr_attr_ints("ksize", 2, k2), gr_attr_string("padding", "SAMEISH")}, 2,
               "unknown padding 'SAMEISH'");
  expect_error("max_pool", x4, NULL, 0, "ksize");
  expect_error("global_avg_pool", gr_shape_make(2, (int64_t[]){8, 3}), NULL, 0,
               "input must have rank 4 (NHWC), got shape [8, 3]");
  /* data_format */
  gr_attr nchw = gr_attr_string("data_format", "NCHW");
  expect_error("max_pool", x4,
               (gr_attr[]){gr_attr_ints("ksize", 2, k2), gr_attr_string("data_format", "nchw")}, 2,
               "unknown data_format 'nchw' (expected NHWC or NCHW)");
  expect_error("global_avg_pool", x4, (gr_attr[]){gr_attr_string("data_format", "CHWN")}, 1,
               "unknown data_format 'CHWN'");
  expect_error("avg_pool", gr_shape_make(3, (int64_t[]){3, 8, 8}),
               (gr_attr[]){gr_attr_ints("ksize", 2, k2), nchw}, 2,
               "input must have rank 4 (NCHW), got shape [3, 8, 8]");
  expect_error("global_avg_pool", gr_shape_make(3, (int64_t[]){3, 8, 8}), &nchw, 1,
               "input must have rank 4 (NCHW), got shape [3, 8, 8]");
  /* NCHW: the window runs over the last two axes: [2, 8, 8, 3] has 3 columns */
  expect_error("max_pool", x4, (gr_attr[]){gr_attr_ints("ksize", 2, (int64_t[]){4, 4}), nchw}, 2,
               "the width of the kernel (4) is larger than the unpadded input (3) (input [2, 8, "
               "8, 3], ksize [4, 4])");
  /* dy of the wrong shape for max_pool_grad */
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, x4);
  gr_output dy = gr_placeholder(g, "dy", GR_F32, x4);
  gr_attr at[1] = {gr_attr_ints("ksize", 2, k2)};
  gr_output r = gr_op(g, "max_pool_grad", "pg", (gr_output[]){x, dy}, 2, at, 1);
  GR_CHECK(!r.node && gr_graph_error(g));
  if (gr_graph_error(g))
    GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg,
                          "node 'pg' (op max_pool_grad): dy [2, 8, 8, 3] does not match the "
                          "pooled shape [2, 4, 4, 3]");
  gr_graph_free(g);
}

/* Ties: the gradient goes to the first maximum of each window (row-major). */
static void test_max_pool_ties(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(4, (int64_t[]){1, 2, 4, 1}));
  gr_output y = gr_max_pool(g, x, (int64_t[]){2, 2}, NULL, "VALID", NULL), dx;
  gr_output s = gr_reduce_sum(g, y, NULL, 0, false);
  GR_CHECK(gr_gradients(g, &s, 1, &x, 1, NULL, false, &dx) == GR_OK);
  gr_tensor xv = gt_make(GR_F64, gr_shape_make(4, (int64_t[]){1, 2, 4, 1}),
                         (double[]){1, 1, 0, 2, 1, 1, 2, 2});
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor r;
  GR_CHECK_OK(gr_session_run(sess, &(gr_feed){x, &xv}, 1, &dx, 1, &r, NULL, 0, &err), err);
  static const double want[8] = {1, 0, 0, 1, 0, 0, 0, 0};
  for (int i = 0; i < 8; i++) GR_CHECK_NEAR(gr_tensor_get_f64(&r, i), want[i], 0);
  gr_tensor_release(&r), gr_tensor_release(&xv);
  gr_session_free(sess);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_max_pool_ties);
  GR_RUN(test_pool_forward);
  GR_RUN(test_pool_gradients);
  GR_RUN(test_max_pool_grad_ops);
  GR_RUN(test_global_avg_pool_and_flatten);
  GR_RUN(test_pool_nchw_matches_nhwc);
  GR_RUN(test_pool_nchw_gradients);
  GR_RUN(test_pool_errors);
  return gr_test_finish();
}
