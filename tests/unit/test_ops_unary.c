/* Tests of ops/unary.c: neg, abs, exp, log, sqrt, square, logical_not, cast,
 * select and add_n against plain double (or wide-integer) references on
 * random inputs, wrapping integer edge cases, saturating float-to-int casts,
 * three-way broadcasting, in-place execution, shape inference with unknown
 * dims, and build / run errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------------ */

/* Runs op on n inputs fed through placeholders of shapes ph (NULL: the
 * inputs' own shapes); with fresh, each input is first copied in the graph
 * (gt_run_op_fresh). */
static gr_status run_op(const char *op, const gr_tensor *in, int n, const gr_shape *ph,
                        const gr_attr *at, int na, bool fresh, gr_tensor *out, gr_shape *inferred,
                        gr_error *err) {
  return gt_run_op_fresh(op, in, n, ph, at, na, fresh ? n : 0, out, inferred, err);
}

/* Expects op to fail with code and a message naming the node (and sub). */
static void expect_error(const char *op, const gr_tensor *in, int n, const gr_shape *ph,
                         const gr_attr *at, int na, gr_status code, const char *sub) {
  GR_CHECK(gt_op_fails(op, in, n, ph, at, na, code, sub));
}

/* Same dtype, shape and bytes. */
static bool same_bits(const gr_tensor *got, const gr_tensor *want) {
  if (!got->buf || got->dtype != want->dtype || !gr_shape_equal(&got->shape, &want->shape)) {
    fprintf(stderr, "  dtype/shape mismatch or empty output\n");
    return false;
  }
  size_t es = gr_dtype_size(got->dtype), nb = gr_tensor_num_bytes(got);
  const char *a = gr_tensor_data(got), *b = gr_tensor_data(want);
  for (size_t i = 0; i < nb; i++)
    if (a[i] != b[i]) {
      fprintf(stderr, "  element %zu differs\n", i / es);
      return false;
    }
  return true;
}

static gr_tensor alloc_t(gr_dtype dt, gr_shape s) {
  gr_tensor t;
  gr_error err;
  GR_CHECK_OK(gr_tensor_alloc(&t, dt, &s, &err), err);
  return t;
}

/* Integers wrapped to 32 bits the arithmetic way. */
static int32_t wrap32(int64_t v) {
  int64_t m = (int64_t)((uint64_t)v & 0xffffffffu);
  return (int32_t)(m >= 0x80000000LL ? m - 0x100000000LL : m);
}
static int64_t wrap64(__int128 v) {
  unsigned __int128 u = (unsigned __int128)v & 0xffffffffffffffffULL;
  return u >= ((unsigned __int128)1 << 63) ? (int64_t)(u - ((unsigned __int128)1 << 63)) + INT64_MIN
                                           : (int64_t)u;
}

/* A random tensor of integer dtype over the full range (i32/i64/u8), with
 * the extreme values mixed in. */
static gr_tensor rand_int_full(gt_rng *r, gr_dtype dt, gr_shape s) {
  gr_tensor t = alloc_t(dt, s);
  int64_t n = gr_tensor_num_elements(&t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t b = gt_next(r);
    int pick = (int)(gt_next(r) % 8);
    if (dt == GR_I32) {
      static const int32_t ex[] = {INT32_MIN, INT32_MAX, -1, 0, 1};
      ((int32_t *)gr_tensor_data(&t))[i] =
          pick < 5 && gt_next(r) % 3 == 0 ? ex[pick] : (int32_t)(uint32_t)b;
    } else if (dt == GR_I64) {
      static const int64_t ex[] = {INT64_MIN, INT64_MAX, -1, 0, 1};
      ((int64_t *)gr_tensor_data(&t))[i] = pick < 5 && gt_next(r) % 3 == 0 ? ex[pick] : (int64_t)b;
    } else {
      ((uint8_t *)gr_tensor_data(&t))[i] = (uint8_t)b;
    }
  }
  return t;
}

/* ---- elementwise unary ops ------------------------------------------------------ */

enum { U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_SQUARE, U_COUNT };
static const char *const unary_names[U_COUNT] = {"neg", "abs", "exp", "log", "sqrt", "square"};

static double ref_float(int op, double x) {
  switch (op) {
    case U_NEG:
      return -x;
    case U_ABS:
      return x < 0 ? -x : x;
    case U_EXP:
      return exp(x);
    case U_LOG:
      return log(x);
    case U_SQRT:
      return sqrt(x);
    default:
      return x * x;
  }
}

static void test_unary_float(void) {
  gt_rng r = {101};
  static const gr_dtype dts[] = {GR_F32, GR_F64};
  for (int op = 0; op < U_COUNT; op++)
    for (int d = 0; d < 2; d++)
      for (int c = 0; c < 6; c++) {
        /* rank 0..4; case 5 has a zero-size dim */
        gr_shape s = gt_shape_in(&r, c % 5, c == 5 ? 0 : 1, 5);
        bool pos = op == U_LOG || op == U_SQRT;
        gr_tensor x = gt_random(&r, dts[d], s, pos ? 0.01 : -6, pos ? 50 : 6);
        gr_tensor want = alloc_t(dts[d], s);
        for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++)
          gr_tensor_set_f64(&want, i, ref_float(op, gr_tensor_get_f64(&x, i)));
        for (int fresh = 0; fresh < 2; fresh++) {
          gr_tensor got = gr_tensor_empty();
          gr_error err;
          GR_CHECK_OK(run_op(unary_names[op], &x, 1, NULL, NULL, 0, fresh, &got, NULL, &err), err);
          double tol = dts[d] == GR_F32 ? 2e-7 : 1e-15;
          GR_CHECK_MSG(gt_near(&got, &want, tol, 0), "%s %s case %d fresh %d", unary_names[op],
                       gr_dtype_name(dts[d]), c, fresh);
          gr_tensor_release(&got);
        }
        gr_tensor_release(&x);
        gr_tensor_release(&want);
      }
}

/* Special float values: NaN and infinities pass through as IEEE says. */
static void test_unary_float_specials(void) {
  const double v[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-300, -2.5};
  gr_tensor x = gt_make(GR_F64, gr_shape_make(1, (int64_t[]){7}), v);
  for (int op = 0; op < U_COUNT; op++) {
    gr_tensor want = alloc_t(GR_F64, x.shape), got = gr_tensor_empty();
    for (int i = 0; i < 7; i++) gr_tensor_set_f64(&want, i, ref_float(op, v[i]));
    gr_error err;
    GR_CHECK_OK(run_op(unary_names[op], &x, 1, NULL, NULL, 0, false, &got, NULL, &err), err);
    GR_CHECK_MSG(gt_near(&got, &want, 0, 0), "%s", unary_names[op]);
    gr_tensor_release(&want);
    gr_tensor_release(&got);
  }
  gr_tensor_release(&x);
}

static void test_unary_int_wrap(void) {
  gt_rng r = {202};
  static const gr_dtype dts[] = {GR_I32, GR_I64, GR_U8};
  static const int ops[] = {U_NEG, U_ABS, U_SQUARE};
  for (int k = 0; k < 3; k++)
    for (int d = 0; d < 3; d++)
      for (int c = 0; c < 4; c++) {
        gr_shape s = gt_shape_in(&r, 1 + c % 3, 1, 9);
        gr_tensor x = rand_int_full(&r, dts[d], s), want = alloc_t(dts[d], s);
        int64_t n = gr_tensor_num_elements(&x);
        for (int64_t i = 0; i < n; i++) {
          if (dts[d] == GR_I32) {
            int64_t v = ((int32_t *)gr_tensor_data(&x))[i];
            int64_t res = ops[k] == U_NEG ? -v : ops[k] == U_ABS ? (v < 0 ? -v : v) : v * v;
            ((int32_t *)gr_tensor_data(&want))[i] = wrap32(res);
          } else if (dts[d] == GR_I64) {
            __int128 v = ((int64_t *)gr_tensor_data(&x))[i];
            __int128 res = ops[k] == U_NEG ? -v : ops[k] == U_ABS ? (v < 0 ? -v : v) : v * v;
            ((int64_t *)gr_tensor_data(&want))[i] = wrap64(res);
          } else {
            int v = ((uint8_t *)gr_tensor_data(&x))[i];
            int res = ops[k] == U_NEG ? 256 - v : ops[k] == U_ABS ? v : v * v;
            ((uint8_t *)gr_tensor_data(&want))[i] = (uint8_t)(res % 256);
          }
        }
        for (int fresh = 0; fresh < 2; fresh++) {
          gr_tensor got = gr_tensor_empty();
          gr_error err;
          GR_CHECK_OK(run_op(unary_names[ops[k]], &x, 1, NULL, NULL, 0, fresh, &got, NULL, &err),
                      err);
          GR_CHECK_MSG(same_bits(&got, &want), "%s %s case %d", unary_names[ops[k]],
                       gr_dtype_name(dts[d]), c);
          gr_tensor_release(&got);
        }
        gr_tensor_release(&x);
        gr_tensor_release(&want);
      }
  /* the classic edge: -INT32_MIN and |INT32_MIN| wrap to INT32_MIN */
  gr_tensor x = gt_make(GR_I32, gr_shape_scalar(), (double[]){INT32_MIN}), got;
  gr_error err;
  GR_CHECK_OK(run_op("abs", &x, 1, NULL, NULL, 0, false, &got, NULL, &err), err);
  GR_CHECK_EQ_INT(((int32_t *)gr_tensor_data(&got))[0], INT32_MIN);
  gr_tensor_release(&got);
  gr_tensor_release(&x);
}

static void test_logical_not(void) {
  gt_rng r = {303};
  for (int c = 0; c < 5; c++) {
    gr_shape s = gt_shape_in(&r, c, c == 4 ? 0 : 1, 6);
    gr_tensor x = gt_random(&r, GR_BOOL, s, 0, 1), want = alloc_t(GR_BOOL, s);
    for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++)
      ((bool *)gr_tensor_data(&want))[i] = gr_tensor_get_f64(&x, i) == 0;
    for (int fresh = 0; fresh < 2; fresh++) {
      gr_tensor got = gr_tensor_empty();
      gr_error err;
      GR_CHECK_OK(run_op("logical_not", &x, 1, NULL, NULL, 0, fresh, &got, NULL, &err), err);
      GR_CHECK_MSG(same_bits(&got, &want), "case %d", c);
      gr_tensor_release(&got);
    }
    gr_tensor_release(&x);
    gr_tensor_release(&want);
  }
}

static void test_unary_errors(void) {
  gr_tensor i = gt_zeros(GR_I32, gr_shape_make(1, (int64_t[]){2}));
  gr_tensor b = gt_zeros(GR_BOOL, gr_shape_make(1, (int64_t[]){2}));
  gr_tensor f = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){2}));
  expect_error("exp", &i, 1, NULL, NULL, 0, GR_ERR_DTYPE, "i32");
  expect_error("log", &i, 1, NULL, NULL, 0, GR_ERR_DTYPE, "f32, f64");
  expect_error("sqrt", &b, 1, NULL, NULL, 0, GR_ERR_DTYPE, NULL);
  expect_error("neg", &b, 1, NULL, NULL, 0, GR_ERR_DTYPE, "bool");
  expect_error("square", &b, 1, NULL, NULL, 0, GR_ERR_DTYPE, NULL);
  expect_error("logical_not", &f, 1, NULL, NULL, 0, GR_ERR_DTYPE, "f32");
  gr_tensor two[2] = {f, f};
  expect_error("abs", two, 2, NULL, NULL, 0, GR_ERR_INVALID_ARGUMENT, "expects 1 input");
  gr_tensor_release(&i);
  gr_tensor_release(&b);
  gr_tensor_release(&f);
}

/* ---- cast --------------------------------------------------------------------- */

static const gr_dtype all_dts[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};

static gr_tensor cast_source(gt_rng *r, gr_dtype dt, int n) {
  static const double specials[] = {
      NAN,           INFINITY,      -INFINITY, 0.0,     -0.0, 0.5,   -0.5,         -0.99,
      255.0,         255.9,         256.0,     -1.0,    1e10, -1e10, 2147483647.0, 2147483648.0,
      -2147483648.0, -2147483649.0, 9.3e18,    -9.3e18, 1e30, -1e30, 3.75,         -3.75};
  int ns = (int)(sizeof specials / sizeof specials[0]);
  gr_shape s = gr_shape_make(1, (int64_t[]){n});
  if (dt == GR_I32 || dt == GR_I64 || dt == GR_U8) return rand_int_full(r, dt, s);
  if (dt == GR_BOOL) return gt_random(r, GR_BOOL, s, 0, 1);
  gr_tensor t = alloc_t(dt, s);
  for (int i = 0; i < n; i++) {
    double v = i < ns ? specials[i] : i % 2 ? gt_uniform(r, -400, 400) : gt_uniform(r, -3e9, 3e9);
    gr_tensor_set_f64(&t, i, v); /* float targets only: no UB */
  }
  return t;
}

/* The reference conversion of element i of src into element i of dst. */
static void ref_cast(const gr_tensor *src, int64_t i, gr_tensor *dst) {
  bool is_f = gr_dtype_is_float(src->dtype);
  double f = 0;
  int64_t iv = 0;
  const void *p = gr_tensor_data(src);
  switch (src->dtype) {
    case GR_F32:
      f = ((const float *)p)[i];
      break;
    case GR_F64:
      f = ((const double *)p)[i];
      break;
    case GR_I32:
      iv = ((const int32_t *)p)[i];
      break;
    case GR_I64:
      iv = ((const int64_t *)p)[i];
      break;
    case GR_U8:
      iv = ((const uint8_t *)p)[i];
      break;
    default:
      iv = ((const bool *)p)[i];
      break;
  }
  double t = is_f ? trunc(f) : 0;
  void *q = gr_tensor_data(dst);
  switch (dst->dtype) {
    case GR_F32:
      ((float *)q)[i] = is_f ? (float)f : (float)iv;
      break;
    case GR_F64:
      ((double *)q)[i] = is_f ? f : (double)iv;
      break;
    case GR_I32:
      ((int32_t *)q)[i] = !is_f               ? wrap32(iv)
                          : isnan(f)          ? 0
                          : t > 2147483647.0  ? INT32_MAX
                          : t < -2147483648.0 ? INT32_MIN
                                              : (int32_t)t;
      break;
    case GR_I64:
      ((int64_t *)q)[i] = !is_f                        ? iv
                          : isnan(f)                   ? 0
                          : t >= 9223372036854775808.0 ? INT64_MAX
                          : t < -9223372036854775808.0 ? INT64_MIN
                                                       : (int64_t)t;
      break;
    case GR_U8:
      ((uint8_t *)q)[i] = !is_f      ? (uint8_t)((uint64_t)iv & 0xff)
                          : isnan(f) ? 0
                          : t > 255  ? 255
                          : t < 0    ? 0
                                     : (uint8_t)t;
      break;
    default:
      ((bool *)q)[i] = is_f ? f != 0 : iv != 0;
      break;
  }
}

static void test_cast_all_pairs(void) {
  gt_rng r = {404};
  for (int a = 0; a < 6; a++)
    for (int b = 0; b < 6; b++)
      for (int c = 0; c < 2; c++) {
        gr_tensor x = cast_source(&r, all_dts[a], 40 + c * 25);
        gr_tensor want = alloc_t(all_dts[b], x.shape), got = gr_tensor_empty();
        for (int64_t i = 0; i < gr_tensor_num_elements(&x); i++) ref_cast(&x, i, &want);
        gr_attr at = gr_attr_dtype("dtype", all_dts[b]);
        gr_error err;
        GR_CHECK_OK(run_op("cast", &x, 1, NULL, &at, 1, c == 1, &got, NULL, &err), err);
        bool ok =
            gr_dtype_is_float(all_dts[b]) ? gt_near(&got, &want, 0, 0) : same_bits(&got, &want);
        GR_CHECK_MSG(ok, "cast %s -> %s", gr_dtype_name(all_dts[a]), gr_dtype_name(all_dts[b]));
        gr_tensor_release(&x);
        gr_tensor_release(&want);
        gr_tensor_release(&got);
      }
}

/* A few conversions spelled out, so the reference itself is checked. */
static void test_cast_known_values(void) {
  const double v[] = {NAN, 1e20, -1e20, -7.9, 7.9, 300.0, -0.0};
  gr_tensor x = gt_make(GR_F64, gr_shape_make(1, (int64_t[]){7}), v);
  struct {
    gr_dtype dt;
    double want[7];
  } cases[] = {{GR_I32, {0, INT32_MAX, INT32_MIN, -7, 7, 300, 0}},
               {GR_U8, {0, 255, 0, 0, 7, 255, 0}},
               {GR_BOOL, {1, 1, 1, 1, 1, 1, 0}}};
  for (int c = 0; c < 3; c++) {
    gr_attr at = gr_attr_dtype("dtype", cases[c].dt);
    gr_tensor got = gr_tensor_empty(), want = gt_make(cases[c].dt, x.shape, cases[c].want);
    gr_error err;
    GR_CHECK_OK(run_op("cast", &x, 1, NULL, &at, 1, false, &got, NULL, &err), err);
    GR_CHECK_MSG(same_bits(&got, &want), "to %s", gr_dtype_name(cases[c].dt));
    gr_tensor_release(&got);
    gr_tensor_release(&want);
  }
  gr_tensor_release(&x);
  /* i64 extremes saturate exactly, i64 -> i32 wraps */
  gr_tensor y = gt_make(GR_F32, gr_shape_make(1, (int64_t[]){2}), (double[]){1e19, -1e19}), got;
  gr_attr at = gr_attr_dtype("dtype", GR_I64);
  gr_error err;
  GR_CHECK_OK(run_op("cast", &y, 1, NULL, &at, 1, false, &got, NULL, &err), err);
  GR_CHECK(((int64_t *)gr_tensor_data(&got))[0] == INT64_MAX);
  GR_CHECK(((int64_t *)gr_tensor_data(&got))[1] == INT64_MIN);
  gr_tensor_release(&got);
  gr_tensor_release(&y);
  gr_tensor z = alloc_t(GR_I64, gr_shape_scalar());
  *(int64_t *)gr_tensor_data(&z) = 0x1234567880000001LL;
  at = gr_attr_dtype("dtype", GR_I32);
  GR_CHECK_OK(run_op("cast", &z, 1, NULL, &at, 1, false, &got, NULL, &err), err);
  GR_CHECK_EQ_INT(*(int32_t *)gr_tensor_data(&got), (int32_t)-2147483647);
  gr_tensor_release(&got);
  gr_tensor_release(&z);
}

static void test_cast_shape_and_errors(void) {
  gr_tensor x = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_shape ph = gr_shape_make(2, (int64_t[]){-1, 3}), inferred;
  gr_attr at = gr_attr_dtype("dtype", GR_U8);
  gr_tensor got = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(run_op("cast", &x, 1, &ph, &at, 1, false, &got, &inferred, &err), err);
  GR_CHECK(gr_shape_equal(&inferred, &ph));
  GR_CHECK_EQ_INT(got.dtype, GR_U8);
  gr_tensor_release(&got);
  expect_error("cast", &x, 1, NULL, NULL, 0, GR_ERR_INVALID_ARGUMENT, "dtype");
  gr_attr bad = gr_attr_int("dtype", 3);
  expect_error("cast", &x, 1, NULL, &bad, 1, GR_ERR_INVALID_ARGUMENT, "must be dtype");
  gr_attr invalid = gr_attr_dtype("dtype", (gr_dtype)42);
  expect_error("cast", &x, 1, NULL, &invalid, 1, GR_ERR_DTYPE, "not a valid dtype");
  gr_tensor_release(&x);
}

/* ---- select -------------------------------------------------------------------- */

/* A shape of rank <= out's rank whose dims are 1 or out's. */
static gr_shape operand_shape(gt_rng *r, const gr_shape *out) {
  int k = (int)gt_int(r, 0, out->rank);
  gr_shape s = gr_shape_make(k, NULL);
  for (int j = 0; j < k; j++) s.dims[j] = gt_next(r) % 2 ? out->dims[out->rank - k + j] : 1;
  return s;
}

/* Offset of the output multi-index idx (rank r) in an operand of shape s. */
static int64_t operand_offset(const gr_shape *s, const int64_t *idx, int r) {
  int64_t off = 0;
  for (int j = 0; j < s->rank; j++)
    off = off * s->dims[j] + (s->dims[j] == 1 ? 0 : idx[r - s->rank + j]);
  return off;
}

static void test_select(void) {
  gt_rng r = {505};
  for (int c = 0; c < 60; c++) {
    gr_dtype dt = all_dts[c % 6];
    gr_shape full = gt_shape_in(&r, (int)gt_int(&r, 0, 4), c % 10 == 9 ? 0 : 1, 4);
    gr_shape sh[3];
    for (int k = 0; k < 3; k++) sh[k] = operand_shape(&r, &full);
    if (c % 4 == 0) sh[1] = full; /* a has the output's shape: may run in place */
    /* the broadcast result: the largest rank; per axis, the non-1 dim if any */
    int orank = 0;
    for (int k = 0; k < 3; k++) orank = sh[k].rank > orank ? sh[k].rank : orank;
    gr_shape os = gr_shape_make(orank, NULL);
    for (int i = 0; i < orank; i++) {
      os.dims[i] = 1;
      for (int k = 0; k < 3; k++) {
        int j = sh[k].rank - orank + i;
        if (j >= 0 && sh[k].dims[j] != 1) os.dims[i] = sh[k].dims[j];
      }
    }
    gr_tensor in[3] = {gt_random(&r, GR_BOOL, sh[0], 0, 1), gt_random(&r, dt, sh[1], -50, 50),
                       gt_random(&r, dt, sh[2], -50, 50)};
    gr_tensor want = alloc_t(dt, os);
    size_t es = gr_dtype_size(dt);
    for (int64_t io = 0; io < gr_tensor_num_elements(&want); io++) {
      int64_t idx[GR_MAX_RANK];
      gt_unravel(&os, io, idx);
      bool cv = ((bool *)gr_tensor_data(&in[0]))[operand_offset(&sh[0], idx, os.rank)];
      int k = cv ? 1 : 2;
      memcpy((char *)gr_tensor_data(&want) + io * es,
             (char *)gr_tensor_data(&in[k]) + operand_offset(&sh[k], idx, os.rank) * es, es);
    }
    for (int fresh = 0; fresh < 2; fresh++) {
      gr_tensor got = gr_tensor_empty();
      gr_error err;
      GR_CHECK_OK(run_op("select", in, 3, NULL, NULL, 0, fresh, &got, NULL, &err), err);
      char b0[GR_SHAPE_STR_MAX], b1[GR_SHAPE_STR_MAX], b2[GR_SHAPE_STR_MAX];
      GR_CHECK_MSG(same_bits(&got, &want), "case %d %s cond %s a %s b %s", c, gr_dtype_name(dt),
                   gr_shape_str(&sh[0], b0), gr_shape_str(&sh[1], b1), gr_shape_str(&sh[2], b2));
      gr_tensor_release(&got);
    }
    for (int k = 0; k < 3; k++) gr_tensor_release(&in[k]);
    gr_tensor_release(&want);
  }
}

static void test_select_errors(void) {
  gr_shape s23 = gr_shape_make(2, (int64_t[]){2, 3}), s4 = gr_shape_make(1, (int64_t[]){4});
  gr_tensor cb = gt_zeros(GR_BOOL, s23), cf = gt_zeros(GR_F32, s23);
  gr_tensor a = gt_zeros(GR_F32, s23), b64 = gt_zeros(GR_F64, s23), b4 = gt_zeros(GR_F32, s4);
  expect_error("select", (gr_tensor[]){cf, a, a}, 3, NULL, NULL, 0, GR_ERR_DTYPE, "'cond'");
  expect_error("select", (gr_tensor[]){cb, a, b64}, 3, NULL, NULL, 0, GR_ERR_DTYPE, "f64");
  expect_error("select", (gr_tensor[]){cb, a, b4}, 3, NULL, NULL, 0, GR_ERR_SHAPE, "[4]");
  expect_error("select", (gr_tensor[]){cb, a}, 2, NULL, NULL, 0, GR_ERR_INVALID_ARGUMENT, NULL);
  /* unknown dims at build time, a conflict at run time */
  gr_shape ph[3] = {s23, gr_shape_make(2, (int64_t[]){2, -1}), gr_shape_make(1, (int64_t[]){-1})};
  expect_error("select", (gr_tensor[]){cb, a, b4}, 3, ph, NULL, 0, GR_ERR_SHAPE,
               "do not broadcast");
  /* inference: [2, ?] with [?] and [1, 3] */
  gr_tensor c13 = gt_zeros(GR_BOOL, gr_shape_make(2, (int64_t[]){1, 3}));
  gr_shape ph2[3] = {gr_shape_make(2, (int64_t[]){1, 3}), gr_shape_make(2, (int64_t[]){2, -1}),
                     gr_shape_make(1, (int64_t[]){-1})};
  gr_shape inferred;
  gr_tensor got = gr_tensor_empty(), b3 = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_error err;
  GR_CHECK_OK(
      run_op("select", (gr_tensor[]){c13, a, b3}, 3, ph2, NULL, 0, false, &got, &inferred, &err),
      err);
  GR_CHECK(gr_shape_equal(&inferred, &s23));
  gr_tensor_release(&got);
  gr_tensor *all[] = {&cb, &cf, &a, &b64, &b4, &c13, &b3};
  for (int i = 0; i < 7; i++) gr_tensor_release(all[i]);
}

/* ---- add_n --------------------------------------------------------------------- */

static void test_add_n(void) {
  gt_rng r = {606};
  static const gr_dtype dts[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8};
  for (int c = 0; c < 40; c++) {
    gr_dtype dt = dts[c % 5];
    int n = 1 + (int)gt_int(&r, 0, 5);
    gr_shape s = gt_shape_in(&r, (int)gt_int(&r, 0, 3), c % 10 == 7 ? 0 : 1, 5);
    gr_tensor in[6];
    for (int i = 0; i < n; i++)
      in[i] = gr_dtype_is_float(dt) ? gt_random(&r, dt, s, -10, 10) : rand_int_full(&r, dt, s);
    gr_tensor want = alloc_t(dt, s);
    for (int64_t j = 0; j < gr_tensor_num_elements(&want); j++) {
      double sd = 0;
      __int128 si = 0;
      for (int i = 0; i < n; i++) {
        sd += gr_tensor_get_f64(&in[i], j);
        if (dt == GR_I64)
          si += ((int64_t *)gr_tensor_data(&in[i]))[j];
        else if (!gr_dtype_is_float(dt))
          si += (int64_t)gr_tensor_get_f64(&in[i], j);
      }
      if (dt == GR_F32) ((float *)gr_tensor_data(&want))[j] = (float)sd;
      if (dt == GR_F64) ((double *)gr_tensor_data(&want))[j] = sd;
      if (dt == GR_I32) ((int32_t *)gr_tensor_data(&want))[j] = wrap32((int64_t)si);
      if (dt == GR_I64) ((int64_t *)gr_tensor_data(&want))[j] = wrap64(si);
      if (dt == GR_U8) ((uint8_t *)gr_tensor_data(&want))[j] = (uint8_t)(si % 256);
    }
    for (int fresh = 0; fresh < 2; fresh++) {
      gr_tensor got = gr_tensor_empty();
      gr_error err;
      GR_CHECK_OK(run_op("add_n", in, n, NULL, NULL, 0, fresh, &got, NULL, &err), err);
      bool ok = gr_dtype_is_float(dt) ? gt_near(&got, &want, 1e-6, 1e-5) : same_bits(&got, &want);
      GR_CHECK_MSG(ok, "case %d %s n=%d", c, gr_dtype_name(dt), n);
      gr_tensor_release(&got);
    }
    for (int i = 0; i < n; i++) gr_tensor_release(&in[i]);
    gr_tensor_release(&want);
  }
}

static void test_add_n_shapes_and_errors(void) {
  gr_shape s23 = gr_shape_make(2, (int64_t[]){2, 3});
  gr_tensor a = gt_zeros(GR_F32, s23), d = gt_zeros(GR_F64, s23), bl = gt_zeros(GR_BOOL, s23);
  gr_tensor c = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){3, 2}));
  /* [?, 3] + [2, ?] + <unknown> -> [2, 3] */
  gr_shape ph[3] = {gr_shape_make(2, (int64_t[]){-1, 3}), gr_shape_make(2, (int64_t[]){2, -1}),
                    gr_shape_unknown()};
  gr_shape inferred;
  gr_tensor got = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(run_op("add_n", (gr_tensor[]){a, a, a}, 3, ph, NULL, 0, false, &got, &inferred, &err),
              err);
  GR_CHECK(gr_shape_equal(&inferred, &s23));
  gr_tensor_release(&got);
  expect_error("add_n", NULL, 0, NULL, NULL, 0, GR_ERR_INVALID_ARGUMENT, "at least 1");
  expect_error("add_n", (gr_tensor[]){a, d}, 2, NULL, NULL, 0, GR_ERR_DTYPE, "f64");
  expect_error("add_n", (gr_tensor[]){bl, bl}, 2, NULL, NULL, 0, GR_ERR_DTYPE, "bool");
  expect_error("add_n", (gr_tensor[]){a, a, c}, 3, NULL, NULL, 0, GR_ERR_SHAPE, "input 2");
  gr_shape ph2[2] = {gr_shape_make(2, (int64_t[]){-1, -1}), gr_shape_make(2, (int64_t[]){-1, -1})};
  expect_error("add_n", (gr_tensor[]){a, c}, 2, ph2, NULL, 0, GR_ERR_SHAPE, "[3, 2]");
  gr_tensor_release(&a);
  gr_tensor_release(&d);
  gr_tensor_release(&bl);
  gr_tensor_release(&c);
}

/* ---- the builder functions ------------------------------------------------------- */

static void test_builders(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_data(g, GR_F64, gr_shape_make(1, (int64_t[]){2}), (double[]){4, -9});
  gr_output p = gr_abs(g, x);
  gr_output b = gr_less(g, x, gr_const_f64(g, 0));
  gr_output outs[] = {gr_neg(g, x),
                      p,
                      gr_exp(g, gr_log(g, p)),
                      gr_sqrt(g, p),
                      gr_square(g, x),
                      gr_cast(g, gr_logical_not(g, b), GR_I32),
                      gr_select(g, b, x, p),
                      gr_add_n(g, (gr_output[]){x, p, x}, 3)};
  const double want[][2] = {{-4, 9}, {4, 9}, {4, 9}, {2, 3}, {16, 81}, {1, 0}, {4, -9}, {12, -9}};
  const char *ops[] = {"neg", "abs", "exp", "sqrt", "square", "cast", "select", "add_n"};
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_error err;
  gr_tensor res[8];
  GR_CHECK_OK(gt_run_graph(g, outs, 8, res, &err), err);
  for (int i = 0; i < 8; i++) {
    GR_CHECK_STR_CONTAINS(outs[i].node->op->name, ops[i]);
    for (int j = 0; j < 2; j++) GR_CHECK_NEAR(gr_tensor_get_f64(&res[i], j), want[i][j], 1e-12);
    gr_tensor_release(&res[i]);
  }
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_unary_float);
  GR_RUN(test_unary_float_specials);
  GR_RUN(test_unary_int_wrap);
  GR_RUN(test_logical_not);
  GR_RUN(test_unary_errors);
  GR_RUN(test_cast_all_pairs);
  GR_RUN(test_cast_known_values);
  GR_RUN(test_cast_shape_and_errors);
  GR_RUN(test_select);
  GR_RUN(test_select_errors);
  GR_RUN(test_add_n);
  GR_RUN(test_add_n_shapes_and_errors);
  GR_RUN(test_builders);
  return gr_test_finish();
}
