/* Tests of matmul (ops/matmul.c) against a naive double triple loop: f32 and
 * f64, all four transpose combinations, sizes 1..130 (non-square, k = 1,
 * zero-size), partly unknown shapes, and build and run errors. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "gr_test.h"
#include "test_util.h"

/* Element (i, j) of op(x), where x is stored row-major as [rows, cols]. */
static double at(const gr_tensor *x, bool t, int64_t i, int64_t j) {
  int64_t cols = x->shape.dims[1];
  return t ? gr_tensor_get_f64(x, j * cols + i) : gr_tensor_get_f64(x, i * cols + j);
}

/* Checks got == c + op(a) @ op(b) (c NULL: 0) within a bound scaled by
 * |c_ij| + sum |a_ik b_kj|. */
static bool check_sum(const gr_tensor *got, const gr_tensor *c, const gr_tensor *a,
                      const gr_tensor *b, bool ta, bool tb) {
  int64_t m = a->shape.dims[ta ? 1 : 0], k = a->shape.dims[ta ? 0 : 1];
  int64_t n = b->shape.dims[tb ? 0 : 1];
  if (got->dtype != a->dtype || got->shape.rank != 2 || got->shape.dims[0] != m ||
      got->shape.dims[1] != n) {
    fprintf(stderr, "  wrong dtype or shape\n");
    return false;
  }
  double eps = a->dtype == GR_F32 ? 1e-6 : 1e-14;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = c ? gr_tensor_get_f64(c, i * n + j) : 0, mag = fabs(s);
      for (int64_t p = 0; p < k; p++) {
        double v = at(a, ta, i, p) * at(b, tb, p, j);
        s += v;
        mag += fabs(v);
      }
      double g = gr_tensor_get_f64(got, i * n + j);
      if (!(fabs(g - s) <= eps * (mag + 1e-30) * 4)) {
        fprintf(stderr, "  (%lld, %lld): got %.17g, want %.17g\n", (long long)i, (long long)j, g,
                s);
        return false;
      }
    }
  return true;
}

static bool check_product(const gr_tensor *got, const gr_tensor *a, const gr_tensor *b, bool ta,
                          bool tb) {
  return check_sum(got, NULL, a, b, ta, tb);
}

/* Runs matmul on placeholders of shapes pa, pb fed with a, b. */
static gr_status run_mm(const gr_tensor *a, const gr_tensor *b, gr_shape pa, gr_shape pb, bool ta,
                        bool tb, gr_tensor *out, gr_shape *inferred, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "a", a->dtype, pa), y = gr_placeholder(g, "b", b->dtype, pb);
  gr_output o = gr_matmul(g, x, y, ta, tb);
  *out = gr_tensor_empty();
  gr_status s;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    s = err->code;
  } else {
    if (inferred) *inferred = o.node->out_shapes[0];
    gr_feed f[2] = {{x, a}, {y, b}};
    gr_session *sess = gr_session_new(g, NULL, err);
    s = sess ? gr_session_run(sess, f, 2, &o, 1, out, NULL, 0, err) : err->code;
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

static gr_shape stored(int64_t rows, int64_t cols, bool t) {
  return t ? gr_shape_make(2, (int64_t[]){cols, rows}) : gr_shape_make(2, (int64_t[]){rows, cols});
}

static int64_t pick_size(gt_rng *r) {
  switch (gt_int(r, 0, 4)) {
    case 0:
      return 1;
    case 1:
      return gt_int(r, 2, 8);
    case 2:
      return gt_int(r, 60, 70);
    case 3:
      return gt_int(r, 120, 130);
    default:
      return gt_int(r, 9, 40);
  }
}

static void test_random_products(void) {
  gt_rng r = {77};
  int ran = 0;
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 4; t++)
      for (int c = 0; c < 10; c++) {
        gr_dtype dt = d ? GR_F64 : GR_F32;
        bool ta = t & 1, tb = t & 2;
        int64_t m = pick_size(&r), k = c == 0 ? 1 : pick_size(&r), n = pick_size(&r);
        gr_tensor a = gt_random(&r, dt, stored(m, k, ta), -1, 1);
        gr_tensor b = gt_random(&r, dt, stored(k, n, tb), -1, 1);
        /* static shapes: known, or with unknown dims */
        gr_shape pa = a.shape, pb = b.shape;
        if (c % 3 == 1) pa.dims[0] = pb.dims[1] = -1;
        if (c % 3 == 2) pa = pb = gr_shape_make(2, (int64_t[]){-1, -1});
        gr_tensor out;
        gr_shape inf;
        gr_error err;
        gr_status s = run_mm(&a, &b, pa, pb, ta, tb, &out, &inf, &err);
        GR_CHECK_MSG(s == GR_OK, "%s", err.msg);
        if (s == GR_OK) {
          GR_CHECK_MSG(check_product(&out, &a, &b, ta, tb), "%s m=%lld k=%lld n=%lld ta=%d tb=%d",
                       gr_dtype_name(dt), (long long)m, (long long)k, (long long)n, ta, tb);
          GR_CHECK(gr_shape_compatible(&inf, &out.shape));
          if (c % 3 == 0) GR_CHECK(gr_shape_equal(&inf, &out.shape));
          ran++;
        }
        gr_tensor_release(&out);
        gr_tensor_release(&a);
        gr_tensor_release(&b);
      }
  GR_CHECK_EQ_INT(ran, 80);
}

/* A small product written out by hand, so the test does not only agree with itself. */
static void test_known_values(void) {
  gr_tensor a = gt_make(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}), (double[]){1, 2, 3, 4, 5, 6});
  gr_tensor b =
      gt_make(GR_F32, gr_shape_make(2, (int64_t[]){3, 2}), (double[]){7, 8, 9, 10, 11, 12});
  gr_tensor out;
  gr_error err;
  GR_CHECK_OK(run_mm(&a, &b, a.shape, b.shape, false, false, &out, NULL, &err), err);
  gr_tensor want =
      gt_make(GR_F32, gr_shape_make(2, (int64_t[]){2, 2}), (double[]){58, 64, 139, 154});
  GR_CHECK(gt_equal(&out, &want));
  gr_tensor_release(&out);
  gr_tensor_release(&want);
  /* a^T b^T = (b a)^T : [3, 3] */
  GR_CHECK_OK(run_mm(&a, &b, a.shape, b.shape, true, true, &out, NULL, &err), err);
  want = gt_make(GR_F32, gr_shape_make(2, (int64_t[]){3, 3}),
                 (double[]){39, 49, 59, 54, 68, 82, 69, 87, 105});
  GR_CHECK(gt_equal(&out, &want));
  gr_tensor_release(&out);
  gr_tensor_release(&want);
  gr_tensor_release(&a);
  gr_tensor_release(&b);
}

/* Zero-size dims: k = 0 gives zeros, m or n = 0 an empty result. */
static void test_zero_sizes(void) {
  const int64_t cases[][3] = {{3, 0, 4}, {0, 5, 2}, {4, 5, 0}, {0, 0, 0}};
  for (int c = 0; c < 4; c++)
    for (int t = 0; t < 4; t++) {
      bool ta = t & 1, tb = t & 2;
      int64_t m = cases[c][0], k = cases[c][1], n = cases[c][2];
      gr_tensor a = gt_zeros(GR_F64, stored(m, k, ta)), b = gt_zeros(GR_F64, stored(k, n, tb));
      gr_tensor out;
      gr_error err;
      GR_CHECK_OK(run_mm(&a, &b, a.shape, b.shape, ta, tb, &out, NULL, &err), err);
      if (out.buf) {
        GR_CHECK_EQ_INT(out.shape.dims[0], m);
        GR_CHECK_EQ_INT(out.shape.dims[1], n);
        for (int64_t i = 0; i < m * n; i++) GR_CHECK_EQ_INT(gr_tensor_get_f64(&out, i), 0);
      }
      gr_tensor_release(&out);
      gr_tensor_release(&a);
      gr_tensor_release(&b);
    }
  /* k = 0 must zero the output even when its buffer is recycled from the pool */
  gr_tensor a = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){64, 0}));
  gr_tensor b = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){0, 64}));
  for (int rep = 0; rep < 3; rep++) {
    gr_tensor big;
    gr_error err;
    gr_tensor_alloc(&big, GR_F32, &(gr_shape){2, {64, 64}}, &err);
    for (int i = 0; i < 4096; i++) gr_tensor_set_f64(&big, i, 12345);
    gr_tensor_release(&big); /* back to the pool, filled with junk */
    gr_tensor out;
    GR_CHECK_OK(run_mm(&a, &b, a.shape, b.shape, false, false, &out, NULL, &err), err);
    if (out.buf)
      for (int i = 0; i < 4096; i++) GR_CHECK(gr_tensor_get_f64(&out, i) == 0);
    gr_tensor_release(&out);
  }
  gr_tensor_release(&a);
  gr_tensor_release(&b);
}

/* ---- errors ------------------------------------------------------------------- */

static void expect_error(gr_dtype da, gr_shape sa, gr_dtype db, gr_shape sb, bool ta, bool tb,
                         gr_status code, const char *s1, const char *s2) {
  gr_graph *g = gr_graph_new();
  gr_output o =
      gr_matmul(g, gr_placeholder(g, "a", da, sa), gr_placeholder(g, "b", db, sb), ta, tb);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(o.node == NULL && e != NULL);
  if (e) {
    GR_CHECK_MSG(e->code == code, "%s: %s", gr_status_name(e->code), e->msg);
    GR_CHECK_STR_CONTAINS(e->msg, "node 'matmul'");
    GR_CHECK_STR_CONTAINS(e->msg, s1);
    GR_CHECK_STR_CONTAINS(e->msg, s2);
  }
  gr_graph_free(g);
}

static void test_build_errors(void) {
  gr_shape s23 = gr_shape_make(2, (int64_t[]){2, 3}), s45 = gr_shape_make(2, (int64_t[]){4, 5});
  gr_shape s35 = gr_shape_make(2, (int64_t[]){3, 5}), q3 = gr_shape_make(2, (int64_t[]){-1, 3});
  expect_error(GR_F32, s23, GR_F32, s45, false, false, GR_ERR_SHAPE, "[2, 3]", "[4, 5]");
  expect_error(GR_F64, s23, GR_F64, s35, true, false, GR_ERR_SHAPE, "[2, 3]", "[3, 5]");
  expect_error(GR_F32, s23, GR_F32, s23, false, false, GR_ERR_SHAPE, "[2, 3]", "inner");
  expect_error(GR_F32, q3, GR_F32, s45, false, false, GR_ERR_SHAPE, "[?, 3]", "[4, 5]");
  expect_error(GR_F32, s23, GR_F32, s45, false, true, GR_ERR_SHAPE, "[2, 3]", "[4, 5]");
  /* dtypes */
  expect_error(GR_I32, s23, GR_I32, s35, false, false, GR_ERR_DTYPE, "i32", "f32, f64");
  expect_error(GR_I64, s23, GR_I64, s35, false, false, GR_ERR_DTYPE, "i64", "f32");
  expect_error(GR_U8, s23, GR_U8, s35, false, false, GR_ERR_DTYPE, "u8", "f32");
  expect_error(GR_BOOL, s23, GR_BOOL, s35, false, false, GR_ERR_DTYPE, "bool", "f32");
  expect_error(GR_F32, s23, GR_F64, s35, false, false, GR_ERR_DTYPE, "f32", "f64");
  expect_error(GR_F32, s23, GR_I32, s35, false, false, GR_ERR_DTYPE, "f32", "i32");
  /* ranks */
  expect_error(GR_F32, gr_shape_make(1, (int64_t[]){3}), GR_F32, s35, false, false, GR_ERR_SHAPE,
               "rank 2", "[3]");
  expect_error(GR_F32, s23, GR_F32, gr_shape_make(3, (int64_t[]){1, 3, 5}), false, false,
               GR_ERR_SHAPE, "rank 2", "[1, 3, 5]");
  expect_error(GR_F32, s23, GR_F32, gr_shape_scalar(), false, false, GR_ERR_SHAPE, "rank 2", "[]");
}

/* Unknown rank is accepted at build time; the runtime shapes are checked. */
static void test_runtime_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, gr_shape_unknown());
  gr_output b = gr_placeholder(g, "b", GR_F32, gr_shape_make(2, (int64_t[]){-1, -1}));
  gr_output o = gr_matmul(g, a, b, false, false);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g)->msg);
  if (gr_graph_error(g)) {
    gr_graph_free(g);
    return;
  }
  GR_CHECK_EQ_INT(o.node->out_shapes[0].rank, 2);
  gr_session *s = gr_session_new(g, NULL, NULL);
  gr_tensor av = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_tensor bv = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){4, 5}));
  gr_tensor a3 = gt_zeros(GR_F32, gr_shape_make(3, (int64_t[]){2, 2, 3}));
  gr_tensor out;
  gr_error err;
  gr_feed f[2] = {{a, &av}, {b, &bv}};
  GR_CHECK_EQ_INT(gr_session_run(s, f, 2, &o, 1, &out, NULL, 0, &err), GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'matmul'");
  GR_CHECK_STR_CONTAINS(err.msg, "[2, 3]");
  GR_CHECK_STR_CONTAINS(err.msg, "[4, 5]");
  f[0].value = &a3;
  GR_CHECK_EQ_INT(gr_session_run(s, f, 2, &o, 1, &out, NULL, 0, &err), GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'matmul'");
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&av);
  gr_tensor_release(&bv);
  gr_tensor_release(&a3);
}

/* The kernel set is named; a user's OPENBLAS_CORETYPE is never second-guessed. */
static void test_blas_core(void) {
  const char *core = gr_ops_blas_core();
  GR_CHECK(core && core[0]);
  const char *old = getenv("OPENBLAS_CORETYPE");
  char *saved = old ? strdup(old) : NULL;
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  GR_CHECK(gr_ops_blas_suggested_core() == NULL);
  unsetenv("OPENBLAS_CORETYPE");
  const char *s = gr_ops_blas_suggested_core(); /* NULL, or a kernel set this OpenBLAS has */
  GR_CHECK(s == NULL || strcmp(s, "SkylakeX") == 0 || strcmp(s, "Haswell") == 0);
  GR_CHECK(s == NULL || strcasecmp(s, core) != 0);
  if (saved) setenv("OPENBLAS_CORETYPE", saved, 1);
  free(saved);
}

/* matmul_add (c + op(a) op(b)) against the reference: c fed (the client
 * holds it: added into a copy) and c made in the graph (its buffer taken
 * over: added in place), f32 and f64, all transposes. */
static void test_matmul_add(void) {
  gt_rng r = {78};
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 4; t++)
      for (int in_place = 0; in_place < 2; in_place++) {
        gr_dtype dt = d ? GR_F64 : GR_F32;
        bool ta = t & 1, tb = t & 2;
        int64_t m = pick_size(&r), k = pick_size(&r), n = pick_size(&r);
        gr_tensor a = gt_random(&r, dt, stored(m, k, ta), -1, 1);
        gr_tensor b = gt_random(&r, dt, stored(k, n, tb), -1, 1);
        gr_tensor c = gt_random(&r, dt, stored(m, n, false), -1, 1);
        gr_graph *g = gr_graph_new();
        gr_output x = gr_placeholder(g, "a", dt, a.shape), y = gr_placeholder(g, "b", dt, b.shape);
        gr_output z = gr_placeholder(g, "c", dt, c.shape);
        gr_output addend = in_place ? gr_neg(g, gr_neg(g, z)) : z;
        gr_output o = gr_matmul_add(g, addend, x, y, ta, tb);
        GR_CHECK(o.node && gr_shape_equal(&o.node->out_shapes[0], &c.shape));
        gr_feed f[3] = {{x, &a}, {y, &b}, {z, &c}};
        gr_error err;
        gr_tensor out = gr_tensor_empty();
        gr_session *sess = gr_session_new(g, NULL, &err);
        GR_CHECK_OK(gr_session_run(sess, f, 3, &o, 1, &out, NULL, 0, &err), err);
        /* against the fed c: also fails when the kernel wrote into it */
        GR_CHECK_MSG(check_sum(&out, &c, &a, &b, ta, tb), "%s m=%lld k=%lld n=%lld ta=%d tb=%d",
                     gr_dtype_name(dt), (long long)m, (long long)k, (long long)n, ta, tb);
        gr_session_free(sess);
        gr_graph_free(g);
        gr_tensor_release(&out);
        gr_tensor_release(&a), gr_tensor_release(&b), gr_tensor_release(&c);
      }
  /* an addend of another shape: a build error naming both */
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_output c = gr_placeholder(g, "c", GR_F32, gr_shape_make(2, (int64_t[]){2, 4}));
  GR_CHECK(gr_matmul_add(g, c, a, a, false, true).node == NULL);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "the addend is [2, 4], the product [2, 2]");
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_blas_core);
  GR_RUN(test_random_products);
  GR_RUN(test_matmul_add);
  GR_RUN(test_known_values);
  GR_RUN(test_zero_sizes);
  GR_RUN(test_build_errors);
  GR_RUN(test_runtime_errors);
  return gr_test_finish();
}
