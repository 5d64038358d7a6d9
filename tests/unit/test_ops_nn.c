/* Tests of ops/nn.c: relu, sigmoid, tanh, softmax, log_softmax, bias_add and
 * the softmax cross-entropy losses against plain double references on random
 * inputs, including large logits (no overflow), zero-size dims, in-place
 * execution, shape inference with unknown dims and build / run errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------------ */

/* Runs op on n inputs fed through placeholders of shapes ph (NULL: the
 * inputs' own shapes); with fresh, input 0 is first copied in the graph
 * (gt_run_op_fresh). */
static gr_status run_op(const char *op, const gr_tensor *in, int n, const gr_shape *ph, bool fresh,
                        gr_tensor *out, gr_shape *inferred, gr_error *err) {
  return gt_run_op_fresh(op, in, n, ph, NULL, 0, fresh ? 1 : 0, out, inferred, err);
}

/* Runs and compares with want (|got - want| <= atol + rtol |want|), plain and in place. */
static void check_op(const char *op, const gr_tensor *in, int n, const gr_tensor *want, double rtol,
                     double atol, const char *what, int c) {
  for (int fresh = 0; fresh < 2; fresh++) {
    gr_tensor got = gr_tensor_empty();
    gr_error err;
    GR_CHECK_OK(run_op(op, in, n, NULL, fresh, &got, NULL, &err), err);
    char sb[GR_SHAPE_STR_MAX];
    GR_CHECK_MSG(gt_near(&got, want, rtol, atol), "%s %s %s case %d fresh %d", op, what,
                 gr_shape_str(&in[0].shape, sb), c, fresh);
    gr_tensor_release(&got);
  }
}

/* Expects op to fail with code and a message naming the node (and sub). */
static void expect_error(const char *op, const gr_tensor *in, int n, const gr_shape *ph,
                         gr_status code, const char *sub) {
  GR_CHECK(gt_op_fails(op, in, n, ph, NULL, 0, code, sub));
}

static gr_tensor alloc_t(gr_dtype dt, gr_shape s) {
  gr_tensor t;
  gr_error err;
  GR_CHECK_OK(gr_tensor_alloc(&t, dt, &s, &err), err);
  return t;
}

static gr_shape shape2(int64_t a, int64_t b) {
  return gr_shape_make(2, (int64_t[]){a, b});
}
static gr_shape shape1(int64_t a) {
  return gr_shape_make(1, (int64_t[]){a});
}

static const gr_dtype float_dts[] = {GR_F32, GR_F64};
static double rtol_of(gr_dtype dt) {
  return dt == GR_F32 ? 1e-6 : 1e-13;
}

/* ---- activations ------------------------------------------------------------------ */

enum { A_RELU, A_SIGMOID, A_TANH, A_COUNT };
static const char *const act_names[A_COUNT] = {"relu", "sigmoid", "tanh"};

static double ref_act(int op, double x) {
  switch (op) {
    case A_RELU:
      return isnan(x) ? x : x > 0 ? x : 0;
    case A_SIGMOID:
      return 1.0 / (1.0 + exp(-x));
    default:
      return tanh(x);
  }
}

static void test_activations(void) {
  gt_rng r = {11};
  const double specials[] = {1000, -1000, 88.8, -88.8, 1e30, -1e30, 0, INFINITY, -INFINITY, NAN};
  for (int op = 0; op < A_COUNT; op++)
    for (int d = 0; d < 2; d++)
      for (int c = 0; c < 7; c++) {
        gr_tensor x;
        if (c == 6) /* extremes: no overflow to NaN */
          x = gt_make(float_dts[d], shape1(10), specials);
        else
          x = gt_random(&r, float_dts[d], gt_shape_in(&r, c % 5, c == 5 ? 0 : 1, 6), -20, 20);
        gr_tensor want = alloc_t(float_dts[d], x.shape);
        for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++)
          gr_tensor_set_f64(&want, i, ref_act(op, gr_tensor_get_f64(&x, i)));
        check_op(act_names[op], &x, 1, &want, rtol_of(float_dts[d]), 1e-30,
                 gr_dtype_name(float_dts[d]), c);
        gr_tensor_release(&x);
        gr_tensor_release(&want);
      }
}

/* ---- softmax, log_softmax -------------------------------------------------------- */

/* Row-wise reference in double. */
static void ref_softmax(const gr_tensor *x, gr_tensor *y, bool log_out) {
  int64_t c = x->shape.dims[x->shape.rank - 1];
  int64_t rows = c ? gr_tensor_num_elements(x) / c : 0;
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c; j++) m = fmax(m, gr_tensor_get_f64(x, r * c + j));
    for (int64_t j = 0; j < c; j++) sum += exp(gr_tensor_get_f64(x, r * c + j) - m);
    for (int64_t j = 0; j < c; j++) {
      double v = gr_tensor_get_f64(x, r * c + j) - m;
      gr_tensor_set_f64(y, r * c + j, log_out ? v - log(sum) : exp(v) / sum);
    }
  }
}

static void test_softmax(void) {
  gt_rng r = {22};
  for (int lg = 0; lg < 2; lg++)
    for (int d = 0; d < 2; d++)
      for (int c = 0; c < 8; c++) {
        gr_dtype dt = float_dts[d];
        /* rank 1..4; case 6: a zero-size batch dim, case 7: zero classes */
        gr_shape s = gt_shape_in(&r, 1 + c % 4, 1, 7);
        if (c == 6) s = shape2(0, 4);
        if (c == 7) s = shape2(3, 0);
        double span = c % 2 ? 1000 : 10; /* large logits must not overflow */
        gr_tensor x = gt_random(&r, dt, s, -span, span), want = alloc_t(dt, s);
        ref_softmax(&x, &want, lg);
        check_op(lg ? "log_softmax" : "softmax", &x, 1, &want, rtol_of(dt), 1e-7, gr_dtype_name(dt),
                 c);
        if (!lg) { /* rows sum to 1 */
          gr_tensor got = gr_tensor_empty();
          gr_error err;
          GR_CHECK_OK(run_op("softmax", &x, 1, NULL, false, &got, NULL, &err), err);
          int64_t k = s.dims[s.rank - 1], rows = k ? gr_tensor_num_elements(&x) / k : 0;
          for (int64_t i = 0; i < rows; i++) {
            double sum = 0;
            for (int64_t j = 0; j < k; j++) sum += gr_tensor_get_f64(&got, i * k + j);
            GR_CHECK_NEAR(sum, 1.0, 1e-5);
          }
          gr_tensor_release(&got);
        }
        gr_tensor_release(&x);
        gr_tensor_release(&want);
      }
}

/* softmax(x + 1000) == softmax(x) and log_softmax likewise, with no inf/NaN. */
static void test_softmax_large_logits(void) {
  const double base[] = {0.5, -1, 2, 0, -30, 3, 3, 1};
  double shifted[8], huge[8];
  for (int i = 0; i < 8; i++) shifted[i] = base[i] + 1000;
  for (int i = 0; i < 8; i++) huge[i] = base[i] * 1e6;
  for (int lg = 0; lg < 2; lg++) {
    const char *op = lg ? "log_softmax" : "softmax";
    gr_tensor a = gt_make(GR_F64, shape2(2, 4), base), b = gt_make(GR_F64, shape2(2, 4), shifted);
    gr_tensor ra = gr_tensor_empty(), rb = gr_tensor_empty(), rh = gr_tensor_empty();
    gr_error err;
    GR_CHECK_OK(run_op(op, &a, 1, NULL, false, &ra, NULL, &err), err);
    GR_CHECK_OK(run_op(op, &b, 1, NULL, false, &rb, NULL, &err), err);
    GR_CHECK_MSG(gt_near(&rb, &ra, 1e-12, 1e-12), "%s shift invariance", op);
    gr_tensor h = gt_make(GR_F32, shape2(2, 4), huge);
    GR_CHECK_OK(run_op(op, &h, 1, NULL, false, &rh, NULL, &err), err);
    for (int i = 0; i < 8; i++) GR_CHECK(isfinite(gr_tensor_get_f64(&rh, i)));
    /* row 1 of huge: [-3e7, 3e6, 3e6, 1e6]: two equal maxima share the mass */
    GR_CHECK_NEAR(gr_tensor_get_f64(&rh, 5), lg ? -log(2.0) : 0.5, 1e-6);
    gr_tensor *all[] = {&a, &b, &h, &ra, &rb, &rh};
    for (int i = 0; i < 6; i++) gr_tensor_release(all[i]);
  }
}

static void test_softmax_errors(void) {
  gr_tensor s = gt_zeros(GR_F32, gr_shape_scalar()), i = gt_zeros(GR_I32, shape2(2, 2));
  expect_error("softmax", &s, 1, NULL, GR_ERR_SHAPE, "rank >= 1");
  expect_error("log_softmax", &i, 1, NULL, GR_ERR_DTYPE, "i32");
  gr_shape unknown = gr_shape_unknown(); /* unknown rank builds; a scalar fails at run time */
  expect_error("log_softmax", &s, 1, &unknown, GR_ERR_SHAPE, "scalar");
  gr_tensor_release(&s);
  gr_tensor_release(&i);
}

/* ---- bias_add ------------------------------------------------------------------- */

static int32_t wrap32(int64_t v) {
  int64_t m = (int64_t)((uint64_t)v & 0xffffffffu);
  return (int32_t)(m >= 0x80000000LL ? m - 0x100000000LL : m);
}

static void test_bias_add(void) {
  gt_rng r = {33};
  static const gr_dtype dts[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8};
  for (int c = 0; c < 30; c++) {
    gr_dtype dt = dts[c % 5];
    gr_shape s = gt_shape_in(&r, 1 + c % 4, 1, 6);
    if (c == 25) s = shape2(0, 3);
    if (c == 26) s = shape2(4, 0);
    int64_t k = s.dims[s.rank - 1];
    double lo = dt == GR_U8 ? 0 : dt == GR_I32 ? -2147483648.0 : -1e9;
    double hi = dt == GR_U8 ? 255 : dt == GR_I32 ? 2147483647.0 : 1e9;
    if (gr_dtype_is_float(dt)) lo = -10, hi = 10;
    gr_tensor in[2] = {gt_random(&r, dt, s, lo, hi), gt_random(&r, dt, shape1(k), lo, hi)};
    if (dt == GR_I64 && k > 0) /* wrap past INT64_MAX */
      ((int64_t *)gr_tensor_data(&in[1]))[0] = INT64_MAX;
    gr_tensor want = alloc_t(dt, s);
    for (int64_t i = 0; i < gr_tensor_num_elements(&want); i++) {
      double v = gr_tensor_get_f64(&in[0], i) + gr_tensor_get_f64(&in[1], i % k);
      if (dt == GR_I32)
        ((int32_t *)gr_tensor_data(&want))[i] = wrap32((int64_t)v);
      else if (dt == GR_U8)
        ((uint8_t *)gr_tensor_data(&want))[i] = (uint8_t)((int)v % 256);
      else if (dt == GR_I64) {
        int64_t a = ((int64_t *)gr_tensor_data(&in[0]))[i];
        int64_t b = ((int64_t *)gr_tensor_data(&in[1]))[i % k];
        /* wrapped sum: exact while no overflow, else the two's complement result */
        int64_t w;
        if (__builtin_add_overflow(a, b, &w)) w = (int64_t)((uint64_t)a + (uint64_t)b);
        ((int64_t *)gr_tensor_data(&want))[i] = w;
      } else
        gr_tensor_set_f64(&want, i, v);
    }
    check_op("bias_add", in, 2, &want, 1e-7, 0, gr_dtype_name(dt), c);
    gr_tensor_release(&in[0]);
    gr_tensor_release(&in[1]);
    gr_tensor_release(&want);
  }
  /* the u8 and i64 wrap, spelled out */
  gr_tensor x = gt_make(GR_U8, shape2(1, 2), (double[]){200, 10});
  gr_tensor b = gt_make(GR_U8, shape1(2), (double[]){100, 5}), got;
  gr_error err;
  GR_CHECK_OK(run_op("bias_add", (gr_tensor[]){x, b}, 2, NULL, false, &got, NULL, &err), err);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&got, 0), 44);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&got, 1), 15);
  gr_tensor_release(&got);
  gr_tensor_release(&x);
  gr_tensor_release(&b);
}

static void test_bias_add_shapes_and_errors(void) {
  gr_tensor x = gt_zeros(GR_F32, shape2(2, 5)), b5 = gt_zeros(GR_F32, shape1(5));
  gr_tensor b4 = gt_zeros(GR_F32, shape1(4)), b2d = gt_zeros(GR_F32, shape2(1, 5));
  gr_tensor d5 = gt_zeros(GR_F64, shape1(5)), bl = gt_zeros(GR_BOOL, shape1(5));
  gr_tensor s = gt_zeros(GR_F32, gr_shape_scalar());
  gr_shape ph[2] = {shape2(-1, -1), shape1(5)}, inferred;
  gr_tensor got = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(run_op("bias_add", (gr_tensor[]){x, b5}, 2, ph, false, &got, &inferred, &err), err);
  GR_CHECK(gr_shape_equal(&inferred, &(gr_shape){2, {-1, 5}}));
  gr_tensor_release(&got);
  expect_error("bias_add", (gr_tensor[]){x, b4}, 2, NULL, GR_ERR_SHAPE, "(4 vs 5)");
  expect_error("bias_add", (gr_tensor[]){x, b2d}, 2, NULL, GR_ERR_SHAPE, "rank 1");
  expect_error("bias_add", (gr_tensor[]){x, d5}, 2, NULL, GR_ERR_DTYPE, "f64");
  expect_error("bias_add", (gr_tensor[]){bl, bl}, 2, NULL, GR_ERR_DTYPE, "bool");
  expect_error("bias_add", (gr_tensor[]){s, b5}, 2, NULL, GR_ERR_SHAPE, "scalar");
  gr_shape ph2[2] = {shape2(2, -1), shape1(-1)}; /* the mismatch shows at run time */
  expect_error("bias_add", (gr_tensor[]){x, b4}, 2, ph2, GR_ERR_SHAPE, "[4]");
  gr_tensor *all[] = {&x, &b5, &b4, &b2d, &d5, &bl, &s};
  for (int i = 0; i < 7; i++) gr_tensor_release(all[i]);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

/* -sum(labels * log_softmax(logits)) per row, in double. */
static double ref_xent_row(const gr_tensor *x, const gr_tensor *y, int64_t row, int64_t k) {
  double m = -INFINITY, sum = 0, loss = 0;
  for (int64_t j = 0; j < k; j++) m = fmax(m, gr_tensor_get_f64(x, row * k + j));
  for (int64_t j = 0; j < k; j++) sum += exp(gr_tensor_get_f64(x, row * k + j) - m);
  for (int64_t j = 0; j < k; j++)
    loss -= gr_tensor_get_f64(y, row * k + j) * (gr_tensor_get_f64(x, row * k + j) - m - log(sum));
  return loss;
}

/* The loss's shape in case c: [] (logits [k]), [b] or [b, 2] (logits of rank 3). */
static gr_shape xent_loss_shape(int c, int64_t b) {
  switch (c % 4) {
    case 1:
      return gr_shape_scalar();
    case 3:
      return shape2(b, 2);
    default:
      return shape1(b);
  }
}

static void test_softmax_cross_entropy(void) {
  gt_rng r = {44};
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < 10; c++) {
      gr_dtype dt = float_dts[d];
      int64_t b = gt_int(&r, 1, 9), k = gt_int(&r, 1, 12);
      if (c == 8) b = 0;
      if (c == 9) k = 0;
      double span = c % 3 == 2 ? 1000 : 8;
      /* any rank >= 1: [k], [b, k], [b, 2, k] */
      gr_shape os = xent_loss_shape(c, b), ls = os;
      ls.dims[ls.rank++] = k;
      int64_t rows = gr_shape_num_elements(&os);
      gr_tensor in[2] = {gt_random(&r, dt, ls, -span, span), gt_random(&r, dt, ls, 0, 1)};
      if (c % 2 == 0) /* proper distributions on even cases, arbitrary weights on odd */
        for (int64_t i = 0; i < rows; i++) {
          double s = 0;
          for (int64_t j = 0; j < k; j++) s += gr_tensor_get_f64(&in[1], i * k + j);
          for (int64_t j = 0; j < k; j++)
            gr_tensor_set_f64(&in[1], i * k + j, gr_tensor_get_f64(&in[1], i * k + j) / s);
        }
      gr_tensor want = alloc_t(dt, os);
      for (int64_t i = 0; i < rows; i++)
        gr_tensor_set_f64(&want, i, ref_xent_row(&in[0], &in[1], i, k));
      check_op("softmax_cross_entropy", in, 2, &want, rtol_of(dt), 1e-9, gr_dtype_name(dt), c);
      gr_tensor_release(&in[0]);
      gr_tensor_release(&in[1]);
      gr_tensor_release(&want);
    }
}

static void test_sparse_softmax_cross_entropy(void) {
  gt_rng r = {55};
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < 12; c++) {
      gr_dtype dt = float_dts[d], lt = c % 2 ? GR_I64 : GR_I32;
      int64_t b = c == 11 ? 0 : gt_int(&r, 1, 9), k = gt_int(&r, 1, 12);
      double span = c % 3 == 2 ? 1000 : 8;
      gr_shape os = xent_loss_shape(c, b), ls = os;
      ls.dims[ls.rank++] = k;
      int64_t rows = gr_shape_num_elements(&os);
      gr_tensor in[2] = {gt_random(&r, dt, ls, -span, span),
                         gt_random(&r, lt, os, 0, (double)(k - 1))};
      gr_tensor onehot = gt_zeros(dt, ls), want = alloc_t(dt, os);
      for (int64_t i = 0; i < rows; i++)
        gr_tensor_set_f64(&onehot, i * k + (int64_t)gr_tensor_get_f64(&in[1], i), 1.0);
      for (int64_t i = 0; i < rows; i++)
        gr_tensor_set_f64(&want, i, ref_xent_row(&in[0], &onehot, i, k));
      check_op("sparse_softmax_cross_entropy", in, 2, &want, rtol_of(dt), 1e-9, gr_dtype_name(dt),
               c);
      gr_tensor *all[] = {&in[0], &in[1], &onehot, &want};
      for (int i = 0; i < 4; i++) gr_tensor_release(all[i]);
    }
}

/* Large logits: losses are the exact values, not inf or NaN. */
static void test_xent_large_logits(void) {
  gr_tensor x = gt_make(GR_F32, shape2(2, 3), (double[]){1000, 0, -1000, 1000, 1000, 1000});
  gr_tensor y = gt_make(GR_F32, shape2(2, 3), (double[]){0, 1, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  gr_tensor lab = gt_make(GR_I32, shape1(2), (double[]){2, 0}), got;
  gr_error err;
  GR_CHECK_OK(
      run_op("softmax_cross_entropy", (gr_tensor[]){x, y}, 2, NULL, false, &got, NULL, &err), err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 0), 1000, 1e-3);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 1), log(3.0), 1e-5);
  gr_tensor_release(&got);
  GR_CHECK_OK(run_op("sparse_softmax_cross_entropy", (gr_tensor[]){x, lab}, 2, NULL, false, &got,
                     NULL, &err),
              err);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 0), 2000, 1e-2);
  GR_CHECK_NEAR(gr_tensor_get_f64(&got, 1), log(3.0), 1e-5);
  gr_tensor_release(&got);
  gr_tensor_release(&x);
  gr_tensor_release(&y);
  gr_tensor_release(&lab);
}

static void test_xent_shapes_and_errors(void) {
  gr_tensor x = gt_zeros(GR_F32, shape2(4, 5)), y = gt_zeros(GR_F32, shape2(4, 5));
  gr_tensor y64 = gt_zeros(GR_F64, shape2(4, 5)), y6 = gt_zeros(GR_F32, shape2(4, 6));
  gr_tensor xi = gt_zeros(GR_I32, shape2(4, 5)), x3 = gt_zeros(GR_F32, (gr_shape){3, {4, 5, 1}});
  gr_tensor l = gt_make(GR_I64, shape1(4), (double[]){0, 1, 7, 2});
  gr_tensor lneg = gt_make(GR_I32, shape1(4), (double[]){0, -1, 1, 2});
  gr_tensor l3 = gt_zeros(GR_I32, shape1(3)), lf = gt_zeros(GR_F32, shape1(4));
  gr_tensor l2d = gt_zeros(GR_I32, shape2(4, 1));
  gr_tensor x0 = gt_zeros(GR_F32, shape2(2, 0)), l0 = gt_zeros(GR_I32, shape1(2));
  /* inference merges unknown dims of logits and labels */
  gr_shape ph[2] = {shape2(-1, 5), shape2(4, -1)}, inferred;
  gr_tensor got = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(
      run_op("softmax_cross_entropy", (gr_tensor[]){x, y}, 2, ph, false, &got, &inferred, &err),
      err);
  GR_CHECK(gr_shape_equal(&inferred, &(gr_shape){1, {4}}));
  gr_tensor_release(&got);
  gr_shape phs[2] = {shape2(-1, 5), shape1(-1)};
  gr_tensor lok = gt_make(GR_I32, shape1(4), (double[]){4, 0, 1, 2});
  GR_CHECK_OK(run_op("sparse_softmax_cross_entropy", (gr_tensor[]){x, lok}, 2, phs, false, &got,
                     &inferred, &err),
              err);
  gr_tensor_release(&lok);
  GR_CHECK(gr_shape_equal(&inferred, &(gr_shape){1, {-1}}));
  gr_tensor_release(&got);

  const char *d = "softmax_cross_entropy", *s = "sparse_softmax_cross_entropy";
  expect_error(d, (gr_tensor[]){x, y64}, 2, NULL, GR_ERR_DTYPE, "f64");
  expect_error(d, (gr_tensor[]){xi, xi}, 2, NULL, GR_ERR_DTYPE, "i32");
  expect_error(d, (gr_tensor[]){x, y6}, 2, NULL, GR_ERR_SHAPE, "[4, 6]");
  gr_tensor xs = gt_zeros(GR_F32, gr_shape_scalar()), ls = gt_zeros(GR_I32, gr_shape_scalar());
  expect_error(d, (gr_tensor[]){xs, xs}, 2, NULL, GR_ERR_SHAPE, "rank >= 1");
  expect_error(s, (gr_tensor[]){xs, ls}, 2, NULL, GR_ERR_SHAPE, "rank >= 1");
  expect_error(s, (gr_tensor[]){x3, l}, 2, NULL, GR_ERR_SHAPE, "rank 2");
  gr_tensor_release(&xs);
  gr_tensor_release(&ls);
  gr_shape pd[2] = {shape2(-1, -1), shape2(-1, -1)};
  expect_error(d, (gr_tensor[]){x, y6}, 2, pd, GR_ERR_SHAPE, "do not match");
  expect_error(s, (gr_tensor[]){x, l}, 2, NULL, GR_ERR_OUT_OF_RANGE, "label 7 at row 2");
  expect_error(s, (gr_tensor[]){x, lneg}, 2, NULL, GR_ERR_OUT_OF_RANGE, "label -1 at row 1");
  expect_error(s, (gr_tensor[]){x0, l0}, 2, NULL, GR_ERR_OUT_OF_RANGE, "[0, 0)");
  expect_error(s, (gr_tensor[]){x, lf}, 2, NULL, GR_ERR_DTYPE, "'labels'");
  expect_error(s, (gr_tensor[]){x, l2d}, 2, NULL, GR_ERR_SHAPE, "rank 1");
  expect_error(s, (gr_tensor[]){x, l3}, 2, NULL, GR_ERR_SHAPE, "[3]");
  gr_shape ps[2] = {shape2(-1, 5), shape1(-1)};
  expect_error(s, (gr_tensor[]){x, l3}, 2, ps, GR_ERR_SHAPE, "do not match");
  gr_tensor *all[] = {&x, &y, &y64, &y6, &xi, &x3, &l, &lneg, &l3, &lf, &l2d, &x0, &l0};
  for (int i = 0; i < 13; i++) gr_tensor_release(all[i]);
}

/* ---- the builder functions ----------------------------------------------------------- */

static void test_builders(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_data(g, GR_F64, shape2(1, 2), (double[]){-1, 1});
  gr_output b = gr_const_data(g, GR_F64, shape1(2), (double[]){3, 4});
  gr_output lab = gr_const_data(g, GR_F64, shape2(1, 2), (double[]){0, 1});
  gr_output idx = gr_const_data(g, GR_I32, shape1(1), (int32_t[]){1});
  gr_output outs[] = {gr_relu(g, x),
                      gr_sigmoid(g, x),
                      gr_tanh(g, x),
                      gr_softmax(g, x),
                      gr_log_softmax(g, x),
                      gr_bias_add(g, x, b),
                      gr_softmax_cross_entropy(g, x, lab),
                      gr_sparse_softmax_cross_entropy(g, x, idx)};
  const char *ops[] = {"relu",
                       "sigmoid",
                       "tanh",
                       "softmax",
                       "log_softmax",
                       "bias_add",
                       "softmax_cross_entropy",
                       "sparse_softmax_cross_entropy"};
  double e2 = exp(2.0), lse = log(1 + e2);
  const double want[][2] = {{0, 1},
                            {1 / (1 + exp(1.0)), 1 / (1 + exp(-1.0))},
                            {tanh(-1.0), tanh(1.0)},
                            {1 / (1 + e2), e2 / (1 + e2)},
                            {-lse, 2 - lse},
                            {2, 5},
                            {lse - 2, NAN},
                            {lse - 2, NAN}};
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_error err;
  gr_tensor res[8];
  GR_CHECK_OK(gt_run_graph(g, outs, 8, res, &err), err);
  for (int i = 0; i < 8; i++) {
    GR_CHECK(strcmp(outs[i].node->op->name, ops[i]) == 0);
    for (int j = 0; j < gr_tensor_num_elements(&res[i]); j++)
      GR_CHECK_NEAR(gr_tensor_get_f64(&res[i], j), want[i][j], 1e-12);
    gr_tensor_release(&res[i]);
  }
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_activations);
  GR_RUN(test_softmax);
  GR_RUN(test_softmax_large_logits);
  GR_RUN(test_softmax_errors);
  GR_RUN(test_bias_add);
  GR_RUN(test_bias_add_shapes_and_errors);
  GR_RUN(test_softmax_cross_entropy);
  GR_RUN(test_sparse_softmax_cross_entropy);
  GR_RUN(test_xent_large_logits);
  GR_RUN(test_xent_shapes_and_errors);
  GR_RUN(test_builders);
  return gr_test_finish();
}
