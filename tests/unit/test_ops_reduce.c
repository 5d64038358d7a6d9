/* Tests of the reductions (ops/reduce.c): reduce_sum / mean / max / min / prod
 * and argmax / argmin against plain references on random shapes of rank 0..4,
 * random axes subsets (negative, shuffled, empty = all), keepdims both ways,
 * every numeric dtype; the fast loop shapes on large inputs; empty axes, NaN,
 * integer wrapping and truncating means; shape inference with unknown dims;
 * build and run errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

enum { K_SUM, K_MEAN, K_MAX, K_MIN, K_PROD, K_N };
static const char *const op_names[K_N] = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                          "reduce_prod"};
static const gr_dtype numeric[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8};

/* ---- helpers ------------------------------------------------------------------ */

/* Float dtypes compare with a tolerance, integers exactly. */
static bool matches(const gr_tensor *got, const gr_tensor *want) {
  if (gr_dtype_is_float(want->dtype))
    return gt_near(got, want, want->dtype == GR_F32 ? 2e-6 : 1e-12, 1e-30);
  return gt_bit_equal(got, want);
}

static gr_shape reduced_shape(const gr_shape *s, const bool *mask, bool keep) {
  gr_shape o = gr_shape_make(0, NULL);
  for (int i = 0; i < s->rank; i++)
    if (!mask[i])
      o.dims[o.rank++] = s->dims[i];
    else if (keep)
      o.dims[o.rank++] = 1;
  return o;
}

/* Picks a random subset of axes: mask gets the set, axes the list as passed
 * (shuffled, some negative; empty means every axis). */
static int random_axes(gt_rng *r, int rank, int64_t *axes, bool *mask) {
  int n = 0;
  memset(mask, 0, sizeof(bool) * GR_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (gt_next(r) & 1) {
      mask[i] = true;
      axes[n++] = gt_next(r) & 1 ? i - rank : i;
    }
  for (int i = n - 1; i > 0; i--) {
    int j = (int)gt_int(r, 0, i);
    int64_t t = axes[i];
    axes[i] = axes[j];
    axes[j] = t;
  }
  if (n == 0) /* the empty list reduces every axis */
    for (int i = 0; i < rank; i++) mask[i] = true;
  return n;
}

/* ---- reference reductions ---------------------------------------------------------- */

static gr_tensor ref_reduce(int kind, const gr_tensor *x, const bool *mask, bool keep) {
  gr_shape os = reduced_shape(&x->shape, mask, keep);
  gr_tensor out = gt_zeros(x->dtype, os);
  int64_t nout = gr_tensor_num_elements(&out), n = gr_tensor_num_elements(x);
  double *fa = calloc((size_t)nout + 1, sizeof *fa);
  uint64_t *ua = calloc((size_t)nout + 1, sizeof *ua);
  int64_t *ia = calloc((size_t)nout + 1, sizeof *ia), *cnt = calloc((size_t)nout + 1, sizeof *cnt);
  for (int64_t o = 0; o < nout; o++) {
    fa[o] = kind == K_PROD ? 1 : kind == K_MAX ? -INFINITY : kind == K_MIN ? INFINITY : 0;
    ua[o] = kind == K_PROD ? 1 : 0;
    ia[o] = kind == K_MAX ? INT64_MIN : INT64_MAX;
  }
  bool isf = gr_dtype_is_float(x->dtype);
  int64_t idx[GR_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    gt_unravel(&x->shape, i, idx);
    int64_t o = 0;
    for (int d = 0; d < x->shape.rank; d++)
      if (!mask[d]) o = o * x->shape.dims[d] + idx[d];
    cnt[o]++;
    if (isf) {
      double v = gr_tensor_get_f64(x, i);
      switch (kind) {
        case K_SUM:
        case K_MEAN:
          fa[o] += v;
          break;
        case K_PROD:
          fa[o] *= v;
          break;
        case K_MAX:
          fa[o] = (v > fa[o] || isnan(v)) ? v : fa[o];
          break;
        default:
          fa[o] = (v < fa[o] || isnan(v)) ? v : fa[o];
          break;
      }
    } else {
      int64_t v = gt_get_int(x, i);
      switch (kind) {
        case K_SUM:
        case K_MEAN:
          ua[o] += (uint64_t)v;
          break;
        case K_PROD:
          ua[o] *= (uint64_t)v;
          break;
        case K_MAX:
          ia[o] = v > ia[o] ? v : ia[o];
          break;
        default:
          ia[o] = v < ia[o] ? v : ia[o];
          break;
      }
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    if (isf) {
      double v = fa[o];
      if (kind == K_MEAN) v = cnt[o] ? v / (double)cnt[o] : NAN;
      gr_tensor_set_f64(&out, o, v);
    } else if (kind == K_MAX || kind == K_MIN) {
      gt_set_wrapped(&out, o, (uint64_t)ia[o]);
    } else if (kind == K_MEAN) {
      uint64_t m =
          x->dtype == GR_U8 ? ua[o] / (uint64_t)cnt[o] : (uint64_t)((int64_t)ua[o] / cnt[o]);
      gt_set_wrapped(&out, o, m);
    } else {
      gt_set_wrapped(&out, o, ua[o]);
    }
  }
  free(fa);
  free(ua);
  free(ia);
  free(cnt);
  return out;
}

/* Runs one reduction and compares it with the reference; returns success. */
static bool check_reduce(int kind, const gr_tensor *x, const int64_t *axes, int n, const bool *mask,
                         bool keep) {
  gr_attr a[2] = {gr_attr_ints("axes", n, axes), gr_attr_bool("keepdims", keep)};
  gr_tensor out, want = ref_reduce(kind, x, mask, keep);
  gr_error err;
  gr_status s = gt_run1(op_names[kind], x, a, 2, &out, &err);
  GR_CHECK_OK(s, err);
  bool ok = s == GR_OK && matches(&out, &want);
  if (!ok) {
    char b[GR_SHAPE_STR_MAX];
    fprintf(stderr, "  %s %s %s n_axes=%d keepdims=%d\n", op_names[kind], gr_dtype_name(x->dtype),
            gr_shape_str(&x->shape, b), n, keep);
  }
  gr_tensor_release(&out);
  gr_tensor_release(&want);
  return ok;
}

static gr_tensor random_values(gt_rng *r, int kind, gr_dtype dt, gr_shape s) {
  if (dt == GR_U8) return gt_random(r, dt, s, 0, kind == K_PROD ? 3 : 9);
  if (gr_dtype_is_integer(dt)) return gt_random(r, dt, s, -4, 4);
  return gt_random(r, dt, s, kind == K_PROD ? -1.5 : -3, kind == K_PROD ? 1.5 : 3);
}

/* ---- random cases --------------------------------------------------------------------- */

static void test_random_reductions(void) {
  gt_rng r = {42};
  int failures = 0;
  for (int kind = 0; kind < K_N; kind++)
    for (int d = 0; d < 5; d++)
      for (int c = 0; c < 30; c++) {
        gr_dtype dt = numeric[d];
        int rank = (int)gt_int(&r, 0, 4);
        gr_shape s = gt_random_shape(&r, rank, 5);
        bool empty_ok =
            kind == K_SUM || kind == K_PROD || (kind == K_MEAN && gr_dtype_is_float(dt));
        if (rank > 0 && empty_ok && gt_next(&r) % 6 == 0) s.dims[gt_int(&r, 0, rank - 1)] = 0;
        int64_t axes[GR_MAX_RANK];
        bool mask[GR_MAX_RANK];
        int n = random_axes(&r, rank, axes, mask);
        bool keep = gt_next(&r) & 1;
        gr_tensor x = random_values(&r, kind, dt, s);
        if (!check_reduce(kind, &x, axes, n, mask, keep)) failures++;
        gr_tensor_release(&x);
      }
  GR_CHECK_EQ_INT(failures, 0);
}

/* Large inputs: every loop shape (inner run reduced or kept, chunks of kept
 * columns, strided middle axes) in every dtype. */
static void test_large_shapes(void) {
  gt_rng r = {7};
  struct {
    int rank;
    int64_t dims[4];
    int n;
    int64_t axes[3];
  } cases[] = {
      {2, {64, 300}, 1, {0}},          {2, {64, 300}, 1, {1}},      {2, {64, 300}, 0, {0}},
      {2, {40, 700}, 1, {0}},          {3, {3, 300, 5}, 1, {1}},    {3, {5, 7, 600}, 2, {0, 2}},
      {2, {600, 3}, 1, {-2}},          {3, {6, 1, 513}, 2, {0, 1}}, {4, {4, 5, 6, 7}, 2, {1, 3}},
      {4, {2, 30, 1, 40}, 2, {-1, 0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int kind = 0; kind < K_N; kind++)
      for (int d = 0; d < 5; d++) {
        gr_shape s = gr_shape_make(cases[c].rank, cases[c].dims);
        bool mask[GR_MAX_RANK] = {false};
        for (int i = 0; i < cases[c].rank; i++) mask[i] = cases[c].n == 0;
        for (int i = 0; i < cases[c].n; i++) {
          int64_t a = cases[c].axes[i];
          mask[a < 0 ? a + s.rank : a] = true;
        }
        gr_tensor x = random_values(&r, kind, numeric[d], s);
        bool keep = (c + (size_t)kind) % 2;
        GR_CHECK_MSG(check_reduce(kind, &x, cases[c].axes, cases[c].n, mask, keep), "case %zu", c);
        gr_tensor_release(&x);
      }
}

/* Column sums and row sums of the transpose accumulate in the same order:
 * the results are bit-identical, and repeated runs too. */
static void test_deterministic_order(void) {
  gt_rng r = {99};
  int64_t R = 1000, K = 37;
  gr_tensor x = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){R, K}), -1e3, 1e3);
  gr_tensor xt = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){K, R}));
  const float *px = gr_tensor_data(&x);
  float *pt = gr_tensor_data(&xt);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < K; j++) pt[j * R + i] = px[i * K + j];
  gr_attr a0 = gr_attr_ints("axes", 1, (int64_t[]){0}),
          a1 = gr_attr_ints("axes", 1, (int64_t[]){1});
  gr_tensor c1, c2, rs;
  gr_error err;
  GR_CHECK_OK(gt_run1("reduce_sum", &x, &a0, 1, &c1, &err), err);
  GR_CHECK_OK(gt_run1("reduce_sum", &x, &a0, 1, &c2, &err), err);
  GR_CHECK_OK(gt_run1("reduce_sum", &xt, &a1, 1, &rs, &err), err);
  GR_CHECK(gt_bit_equal(&c1, &c2));
  GR_CHECK(gt_bit_equal(&c1, &rs));
  /* the double accumulation is visible: sum of 1e8 and 1000 ones is exact */
  gr_tensor y = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){1001})), s;
  float *py = gr_tensor_data(&y);
  py[0] = 1e8f;
  for (int i = 1; i <= 1000; i++) py[i] = 1.0f;
  GR_CHECK_OK(gt_run1("reduce_sum", &y, NULL, 0, &s, &err), err);
  GR_CHECK_EQ_INT(s.shape.rank, 0);
  if (s.buf) GR_CHECK_EQ_INT(*(float *)gr_tensor_data(&s), 100001000);
  gr_tensor *all[] = {&x, &xt, &c1, &c2, &rs, &y, &s};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gr_tensor_release(all[i]);
}

/* ---- edge cases ------------------------------------------------------------------------------ */

/* Expects op(x) with attr a to give exactly the values want (dtype wt, as doubles). */
static void expect_exact(const char *op, gr_dtype dt, gr_shape s, const double *xv,
                         const gr_attr *a, gr_dtype wt, gr_shape ws, const double *wv) {
  gr_tensor x = gt_make(dt, s, xv), out, want = gt_make(wt, ws, wv);
  gr_error err;
  gr_status st = gt_run1(op, &x, a, 1, &out, &err);
  GR_CHECK_OK(st, err);
  GR_CHECK_MSG(st == GR_OK && gt_equal(&out, &want), "%s", op);
  gr_tensor_release(&x);
  gr_tensor_release(&out);
  gr_tensor_release(&want);
}

/* Expects op(x, axes) to give exactly the values want (as doubles). */
static void expect_values(const char *op, gr_dtype dt, gr_shape s, const double *xv, int n,
                          const int64_t *axes, gr_shape ws, const double *wv) {
  gr_attr a = gr_attr_ints("axes", n, axes);
  expect_exact(op, dt, s, xv, &a, dt, ws, wv);
}

static void expect_run_error(const char *op, const gr_tensor *x, const gr_attr *a, int na,
                             gr_status code, const char *text) {
  gr_tensor out;
  gr_error err;
  gr_status st = gt_run1(op, x, a, na, &out, &err);
  GR_CHECK_MSG(st == code, "%s: got %s (%s)", op, gr_status_name(st), err.msg);
  GR_CHECK_STR_CONTAINS(err.msg, "node '");
  GR_CHECK_STR_CONTAINS(err.msg, text);
  gr_tensor_release(&out);
}

static void test_empty_axes(void) {
  gr_shape s30 = gr_shape_make(2, (int64_t[]){3, 0}), s3 = gr_shape_make(1, (int64_t[]){3});
  int64_t ax1[] = {1};
  expect_values("reduce_sum", GR_F32, s30, NULL, 1, ax1, s3, (double[]){0, 0, 0});
  expect_values("reduce_prod", GR_I32, s30, NULL, 1, ax1, s3, (double[]){1, 1, 1});
  expect_values("reduce_mean", GR_F64, s30, NULL, 1, ax1, s3, (double[]){NAN, NAN, NAN});
  expect_values("reduce_sum", GR_U8, s30, NULL, 0, NULL, gr_shape_scalar(), (double[]){0});
  /* no output elements: nothing to reduce, no error */
  expect_values("reduce_max", GR_F32, gr_shape_make(2, (int64_t[]){0, 3}), NULL, 1, ax1,
                gr_shape_make(1, (int64_t[]){0}), NULL);
  gr_tensor x = gt_zeros(GR_F32, s30), xi = gt_zeros(GR_I64, s30);
  gr_attr a = gr_attr_ints("axes", 1, ax1);
  expect_run_error("reduce_max", &x, &a, 1, GR_ERR_INVALID_ARGUMENT, "empty");
  expect_run_error("reduce_min", &xi, &a, 1, GR_ERR_INVALID_ARGUMENT, "empty");
  expect_run_error("reduce_mean", &xi, &a, 1, GR_ERR_INVALID_ARGUMENT, "empty");
  expect_run_error("reduce_max", &x, NULL, 0, GR_ERR_INVALID_ARGUMENT, "empty");
  gr_tensor_release(&x);
  gr_tensor_release(&xi);
}

static void test_scalars_and_ones(void) {
  gr_shape sc = gr_shape_scalar();
  for (int k = 0; k < K_N; k++)
    expect_values(op_names[k], GR_F64, sc, (double[]){2.5}, 0, NULL, sc, (double[]){2.5});
  /* size-1 dims everywhere */
  gr_shape s = gr_shape_make(4, (int64_t[]){1, 3, 1, 1});
  double v[] = {1, -2, 4};
  expect_values("reduce_sum", GR_I32, s, v, 2, (int64_t[]){0, 2},
                gr_shape_make(2, (int64_t[]){3, 1}), v);
  expect_values("reduce_prod", GR_F32, s, v, 0, NULL, sc, (double[]){-8});
  expect_values("reduce_min", GR_I64, s, v, 1, (int64_t[]){-1},
                gr_shape_make(3, (int64_t[]){1, 3, 1}), v);
  expect_values("reduce_max", GR_I64, s, v, 1, (int64_t[]){-3},
                gr_shape_make(3, (int64_t[]){1, 1, 1}), (double[]){4});
}

static void test_nan(void) {
  double v[] = {1, NAN, 3, NAN, -1, 2};
  gr_shape s = gr_shape_make(2, (int64_t[]){2, 3});
  int64_t a1[] = {1}, a0[] = {0};
  gr_shape s2 = gr_shape_make(1, (int64_t[]){2}), s3 = gr_shape_make(1, (int64_t[]){3});
  expect_values("reduce_max", GR_F32, s, v, 1, a1, s2, (double[]){NAN, NAN});
  expect_values("reduce_min", GR_F64, s, v, 1, a1, s2, (double[]){NAN, NAN});
  expect_values("reduce_max", GR_F64, s, v, 1, a0, s3, (double[]){NAN, NAN, 3});
  expect_values("reduce_min", GR_F32, s, v, 1, a0, s3, (double[]){NAN, NAN, 2});
  expect_values("reduce_sum", GR_F32, s, v, 1, a0, s3, (double[]){NAN, NAN, 5});
  /* long rows (independent lanes): a NaN anywhere wins; all -inf stays -inf */
  double w[40];
  for (int i = 0; i < 40; i++) w[i] = i < 20 ? i : -INFINITY;
  w[13] = NAN;
  gr_shape s220 = gr_shape_make(2, (int64_t[]){2, 20});
  expect_values("reduce_max", GR_F64, s220, w, 1, a1, s2, (double[]){NAN, -INFINITY});
  expect_values("reduce_min", GR_F32, s220, w, 1, a1, s2, (double[]){NAN, -INFINITY});
  w[13] = 13;
  expect_values("reduce_max", GR_F32, s220, w, 1, a1, s2, (double[]){19, -INFINITY});
  expect_values("reduce_min", GR_F64, s220, w, 1, a1, s2, (double[]){0, -INFINITY});
}

static void test_integer_semantics(void) {
  gr_shape s2 = gr_shape_make(1, (int64_t[]){2}), sc = gr_shape_scalar();
  gr_tensor x, out;
  gr_error err;
  /* i32 / i64 sums and products wrap */
  int32_t i32v[] = {INT32_MAX, 1};
  gr_tensor_from_data(&x, GR_I32, &s2, i32v, &err);
  GR_CHECK_OK(gt_run1("reduce_sum", &x, NULL, 0, &out, &err), err);
  if (out.buf) GR_CHECK_EQ_INT(*(int32_t *)gr_tensor_data(&out), INT32_MIN);
  gr_tensor_release(&out);
  /* but the mean sums in 64 bits */
  i32v[1] = INT32_MAX;
  memcpy(gr_tensor_data(&x), i32v, sizeof i32v);
  GR_CHECK_OK(gt_run1("reduce_mean", &x, NULL, 0, &out, &err), err);
  if (out.buf) GR_CHECK_EQ_INT(*(int32_t *)gr_tensor_data(&out), INT32_MAX);
  gr_tensor_release(&out);
  gr_tensor_release(&x);
  int64_t i64v[] = {INT64_MAX, 3};
  gr_tensor_from_data(&x, GR_I64, &s2, i64v, &err);
  GR_CHECK_OK(gt_run1("reduce_sum", &x, NULL, 0, &out, &err), err);
  if (out.buf) GR_CHECK(*(int64_t *)gr_tensor_data(&out) == INT64_MIN + 2);
  gr_tensor_release(&out);
  GR_CHECK_OK(gt_run1("reduce_prod", &x, NULL, 0, &out, &err), err);
  if (out.buf) GR_CHECK(*(int64_t *)gr_tensor_data(&out) == INT64_MAX - 2); /* 3*MAX mod 2^64 */
  gr_tensor_release(&out);
  GR_CHECK_OK(gt_run1("reduce_max", &x, NULL, 0, &out, &err), err);
  if (out.buf) GR_CHECK(*(int64_t *)gr_tensor_data(&out) == INT64_MAX);
  gr_tensor_release(&out);
  gr_tensor_release(&x);
  expect_values("reduce_prod", GR_I32, s2, (double[]){65536, 65536}, 0, NULL, sc, (double[]){0});
  expect_values("reduce_sum", GR_U8, s2, (double[]){200, 100}, 0, NULL, sc, (double[]){44});
  expect_values("reduce_mean", GR_U8, s2, (double[]){255, 254}, 0, NULL, sc, (double[]){254});
  /* integer means truncate toward zero */
  expect_values("reduce_mean", GR_I32, s2, (double[]){1, 2}, 0, NULL, sc, (double[]){1});
  expect_values("reduce_mean", GR_I32, s2, (double[]){-1, -2}, 0, NULL, sc, (double[]){-1});
  expect_values("reduce_mean", GR_I64, gr_shape_make(1, (int64_t[]){3}), (double[]){-7, 0, 0}, 0,
                NULL, sc, (double[]){-2});
  expect_values("reduce_min", GR_U8, s2, (double[]){255, 254}, 0, NULL, sc, (double[]){254});
}

/* ---- argmax / argmin --------------------------------------------------------------------- */

/* Walks x in element order (gt_unravel), so along the axis each output
 * cell sees its candidates first to last: the first extreme wins, and the
 * first NaN wins for good. */
static gr_tensor ref_arg(bool is_min, const gr_tensor *x, int ax) {
  gr_shape os = gr_shape_make(0, NULL);
  for (int i = 0; i < x->shape.rank; i++)
    if (i != ax) os.dims[os.rank++] = x->shape.dims[i];
  gr_tensor out = gt_zeros(GR_I64, os), best = gt_zeros(GR_F64, os);
  int64_t *y = gr_tensor_data(&out), ostr[GR_MAX_RANK], idx[GR_MAX_RANK];
  double *bv = gr_tensor_data(&best);
  gt_strides(&os, ostr);
  for (int64_t o = 0; o < gr_tensor_num_elements(&out); o++) y[o] = -1;
  for (int64_t e = 0; e < gr_tensor_num_elements(x); e++) {
    gt_unravel(&x->shape, e, idx);
    int64_t o = 0;
    for (int i = 0, k = 0; i < x->shape.rank; i++)
      if (i != ax) o += idx[i] * ostr[k++];
    double v = gr_tensor_get_f64(x, e);
    if (y[o] >= 0 && isnan(bv[o])) continue;
    if (y[o] < 0 || isnan(v) || (is_min ? v < bv[o] : v > bv[o])) {
      y[o] = idx[ax];
      bv[o] = v;
    }
  }
  gr_tensor_release(&best);
  return out;
}

static void test_random_arg(void) {
  gt_rng r = {5};
  int failures = 0;
  for (int which = 0; which < 2; which++)
    for (int d = 0; d < 5; d++)
      for (int c = 0; c < 40; c++) {
        gr_dtype dt = numeric[d];
        int rank = (int)gt_int(&r, 1, 4);
        gr_shape s = gt_random_shape(&r, rank, c < 35 ? 6 : 40);
        int ax = (int)gt_int(&r, 0, rank - 1);
        int64_t axis = gt_next(&r) & 1 ? ax - rank : ax;
        /* few distinct values: many ties */
        gr_tensor x = gt_random(&r, dt, s, dt == GR_U8 ? 0 : -2, 2);
        if (gr_dtype_is_float(dt)) {
          int64_t ne = gr_tensor_num_elements(&x);
          for (int64_t i = 0; i < ne; i++)
            gr_tensor_set_f64(&x, i, floor(gr_tensor_get_f64(&x, i) * 2) / 2);
          if (c % 4 == 0) gr_tensor_set_f64(&x, gt_int(&r, 0, ne - 1), NAN);
        }
        gr_tensor out, want = ref_arg(which, &x, ax);
        gr_attr a = gr_attr_int("axis", axis);
        gr_error err;
        gr_status st = gt_run1(which ? "argmin" : "argmax", &x, &a, 1, &out, &err);
        GR_CHECK_OK(st, err);
        if (st != GR_OK || !gt_bit_equal(&out, &want)) {
          char b[GR_SHAPE_STR_MAX];
          fprintf(stderr, "  arg%s %s %s axis %lld\n", which ? "min" : "max", gr_dtype_name(dt),
                  gr_shape_str(&s, b), (long long)axis);
          failures++;
        }
        gr_tensor_release(&x);
        gr_tensor_release(&out);
        gr_tensor_release(&want);
      }
  GR_CHECK_EQ_INT(failures, 0);
}

static void expect_arg(const char *op, gr_dtype dt, gr_shape s, const double *xv, int64_t axis,
                       gr_shape ws, const double *wv) {
  gr_attr a = gr_attr_int("axis", axis);
  expect_exact(op, dt, s, xv, &a, GR_I64, ws, wv);
}

static void test_arg_cases(void) {
  gr_shape s4 = gr_shape_make(1, (int64_t[]){4}), sc = gr_shape_scalar();
  expect_arg("argmax", GR_F32, s4, (double[]){1, NAN, 5, NAN}, 0, sc, (double[]){1});
  expect_arg("argmin", GR_F64, s4, (double[]){1, NAN, -5, NAN}, -1, sc, (double[]){1});
  expect_arg("argmax", GR_I32, s4, (double[]){3, 7, 7, 1}, 0, sc, (double[]){1});
  expect_arg("argmin", GR_U8, s4, (double[]){3, 0, 7, 0}, 0, sc, (double[]){1});
  gr_shape s32 = gr_shape_make(2, (int64_t[]){3, 2}), s2 = gr_shape_make(1, (int64_t[]){2});
  double v[] = {1, 2, NAN, 0, 3, NAN};
  expect_arg("argmax", GR_F32, s32, v, 0, s2, (double[]){1, 2});
  expect_arg("argmin", GR_F32, s32, v, 0, s2, (double[]){1, 2});
  expect_arg("argmax", GR_F32, s32, v, 1, gr_shape_make(1, (int64_t[]){3}), (double[]){1, 0, 1});
  expect_arg("argmin", GR_F32, s32, v, -1, gr_shape_make(1, (int64_t[]){3}), (double[]){0, 0, 1});
  /* empty output, non-empty axis: fine */
  expect_arg("argmax", GR_I64, gr_shape_make(2, (int64_t[]){0, 3}), NULL, 1,
             gr_shape_make(1, (int64_t[]){0}), NULL);
  gr_tensor e = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 0}));
  gr_attr a = gr_attr_int("axis", 1);
  expect_run_error("argmax", &e, &a, 1, GR_ERR_INVALID_ARGUMENT, "empty");
  expect_run_error("argmin", &e, &a, 1, GR_ERR_INVALID_ARGUMENT, "empty");
  gr_tensor_release(&e);
}

/* ---- shapes, builders, errors ------------------------------------------------------------- */

static void check_shape(gr_output o, gr_dtype dt, gr_shape want) {
  GR_CHECK(gt_inferred(o, dt, want));
}

static void test_shape_inference(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(3, (int64_t[]){-1, 3, 4}));
  gr_output u = gr_placeholder(g, "u", GR_I32, gr_shape_unknown());
  int64_t a1[] = {1}, am[] = {-1, 0};
  check_shape(gr_reduce_sum(g, x, a1, 1, false), GR_F32, gr_shape_make(2, (int64_t[]){-1, 4}));
  check_shape(gr_reduce_mean(g, x, a1, 1, true), GR_F32, gr_shape_make(3, (int64_t[]){-1, 1, 4}));
  check_shape(gr_reduce_max(g, x, am, 2, false), GR_F32, gr_shape_make(1, (int64_t[]){3}));
  check_shape(gr_reduce_min(g, x, NULL, 0, false), GR_F32, gr_shape_scalar());
  check_shape(gr_reduce_prod(g, x, NULL, 0, true), GR_F32, gr_shape_make(3, (int64_t[]){1, 1, 1}));
  check_shape(gr_reduce_sum(g, u, NULL, 0, false), GR_I32, gr_shape_scalar());
  check_shape(gr_reduce_sum(g, u, NULL, 0, true), GR_I32, gr_shape_unknown());
  check_shape(gr_reduce_sum(g, u, a1, 1, false), GR_I32, gr_shape_unknown());
  check_shape(gr_argmax(g, x, -1), GR_I64, gr_shape_make(2, (int64_t[]){-1, 3}));
  check_shape(gr_argmin(g, x, 0), GR_I64, gr_shape_make(2, (int64_t[]){3, 4}));
  check_shape(gr_argmin(g, u, 3), GR_I64, gr_shape_unknown());
  GR_CHECK(gr_graph_error(g) == NULL);
  /* run the builders end to end */
  gr_output s = gr_reduce_sum(g, x, am, 2, true), m = gr_argmax(g, x, 1);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  GR_CHECK(sess != NULL);
  double xv[24];
  for (int i = 0; i < 24; i++) xv[i] = (i * 7) % 11;
  gr_tensor xt = gt_make(GR_F32, gr_shape_make(3, (int64_t[]){2, 3, 4}), xv), out[2];
  gr_feed f = {x, &xt};
  gr_output fetch[2] = {s, m};
  if (sess && gr_session_run(sess, &f, 1, fetch, 2, out, NULL, 0, &err) == GR_OK) {
    bool mask[GR_MAX_RANK] = {true, false, true};
    gr_tensor w0 = ref_reduce(K_SUM, &xt, mask, true), w1 = ref_arg(false, &xt, 1);
    GR_CHECK(gt_equal(&out[0], &w0));
    GR_CHECK(gt_equal(&out[1], &w1));
    gr_tensor_release(&w0);
    gr_tensor_release(&w1);
    gr_tensor_release(&out[0]);
    gr_tensor_release(&out[1]);
  } else {
    GR_CHECK_MSG(false, "%s", err.msg);
  }
  gr_tensor_release(&xt);
  gr_session_free(sess);
  gr_graph_free(g);
}

static void expect_build_error(gr_output o, gr_graph *g, gr_status code, const char *text) {
  GR_CHECK(gt_build_failed(o, g, code, text));
}

static void test_build_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_output b = gr_placeholder(g, "b", GR_BOOL, gr_shape_make(1, (int64_t[]){2}));
  gr_output sc = gr_placeholder(g, "sc", GR_F32, gr_shape_scalar());
  for (int k = 0; k < K_N; k++) {
    gr_output in = b;
    expect_build_error(gr_op(g, op_names[k], NULL, &in, 1, NULL, 0), g, GR_ERR_DTYPE, "bool");
  }
  expect_build_error(gr_reduce_sum(g, x, (int64_t[]){2}, 1, false), g, GR_ERR_OUT_OF_RANGE,
                     "axis 2");
  expect_build_error(gr_reduce_max(g, x, (int64_t[]){-3}, 1, false), g, GR_ERR_OUT_OF_RANGE,
                     "axis -3");
  expect_build_error(gr_reduce_mean(g, x, (int64_t[]){1, -1}, 2, false), g, GR_ERR_INVALID_ARGUMENT,
                     "twice");
  expect_build_error(gr_reduce_prod(g, sc, (int64_t[]){0}, 1, false), g, GR_ERR_OUT_OF_RANGE,
                     "rank 0");
  expect_build_error(gr_argmax(g, b, 0), g, GR_ERR_DTYPE, "bool");
  expect_build_error(gr_argmin(g, x, 2), g, GR_ERR_OUT_OF_RANGE, "axis 2");
  expect_build_error(gr_argmax(g, sc, 0), g, GR_ERR_OUT_OF_RANGE, "rank 0");
  gr_attr bad = gr_attr_int("axes", 1);
  expect_build_error(gr_op(g, "reduce_sum", NULL, &x, 1, &bad, 1), g, GR_ERR_INVALID_ARGUMENT,
                     "axes");
  gr_graph_free(g);
}

/* Axes checked again by the kernel when the rank was unknown at build time. */
static void test_run_errors(void) {
  gt_rng r = {3};
  gr_tensor x = gt_random(&r, GR_F32, gr_shape_make(2, (int64_t[]){2, 3}), -1, 1), out;
  gr_error err;
  gr_attr a = gr_attr_ints("axes", 1, (int64_t[]){5});
  gr_status st = gt_run1_unknown("reduce_sum", &x, false, &a, 1, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'reduce_sum'");
  gr_attr d = gr_attr_ints("axes", 2, (int64_t[]){0, -2});
  st = gt_run1_unknown("reduce_min", &x, false, &d, 1, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'reduce_min'");
  gr_attr ax = gr_attr_int("axis", -3);
  st = gt_run1_unknown("argmax", &x, false, &ax, 1, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'argmax'");
  /* unknown dims, known rank: empty axis found at run time */
  gr_tensor e = gt_zeros(GR_I32, gr_shape_make(2, (int64_t[]){0, 2}));
  gr_attr a0 = gr_attr_ints("axes", 1, (int64_t[]){0});
  st = gt_run1_unknown("reduce_max", &e, true, &a0, 1, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'reduce_max'");
  /* and a good run through the unknown-rank path */
  gr_attr a1 = gr_attr_ints("axes", 1, (int64_t[]){-1});
  st = gt_run1_unknown("reduce_sum", &x, false, &a1, 1, &out, &err);
  GR_CHECK_OK(st, err);
  bool mask[GR_MAX_RANK] = {false, true};
  gr_tensor want = ref_reduce(K_SUM, &x, mask, false);
  GR_CHECK(st == GR_OK && matches(&out, &want));
  gr_tensor_release(&out);
  gr_tensor_release(&want);
  gr_tensor_release(&e);
  gr_tensor_release(&x);
}

int main(void) {
  GR_RUN(test_random_reductions);
  GR_RUN(test_large_shapes);
  GR_RUN(test_deterministic_order);
  GR_RUN(test_empty_axes);
  GR_RUN(test_scalars_and_ones);
  GR_RUN(test_nan);
  GR_RUN(test_integer_semantics);
  GR_RUN(test_random_arg);
  GR_RUN(test_arg_cases);
  GR_RUN(test_shape_inference);
  GR_RUN(test_build_errors);
  GR_RUN(test_run_errors);
  return gr_test_finish();
}
