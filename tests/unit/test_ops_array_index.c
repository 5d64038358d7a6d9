/* Tests of the indexing and combining ops (ops/array_index.c): concat, split,
 * slice, gather, one_hot, tile and pad against plain reference
 * implementations on random shapes, every dtype, plus shape inference with
 * unknown dims and the errors of shape functions and kernels. */
#include <graphrun.h>
#include <math.h>
#include <stdlib.h>

#include "gr_test.h"
#include "test_util.h"

static const gr_dtype all_dtypes[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};
#define NDT 6

/* ---- helpers ------------------------------------------------------------------ */

/* A shape of the given rank with dims in [lo, hi]. */
static gr_shape rshape(gt_rng *r, int rank, int lo, int hi) {
  gr_shape s = gr_shape_scalar();
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.dims[i] = gt_int(r, lo, hi);
  return s;
}

static gr_shape shp(int rank, int64_t d0, int64_t d1, int64_t d2) {
  int64_t d[3] = {d0, d1, d2};
  return gr_shape_make(rank, d);
}

/* Random values that every dtype can hold. */
static gr_tensor rnd(gt_rng *r, gr_dtype dt, gr_shape s) {
  return dt == GR_U8 ? gt_random(r, dt, s, 0, 255) : gt_random(r, dt, s, -100, 100);
}

/* A random value that fits dtype dt. */
static double rvalue(gt_rng *r, gr_dtype dt) {
  if (dt == GR_BOOL) return (double)(gt_next(r) & 1);
  if (dt == GR_U8) return (double)gt_int(r, 0, 255);
  if (dt == GR_F32 || dt == GR_F64) return gt_uniform(r, -10, 10);
  return (double)gt_int(r, -1000, 1000);
}

static int64_t ravel(const int64_t *idx, const gr_shape *s) {
  int64_t st[GR_MAX_RANK], f = 0;
  gt_strides(s, st);
  for (int i = 0; i < s->rank; i++) f += idx[i] * st[i];
  return f;
}

static bool same_shape(const gr_shape *a, gr_shape b) {
  if (gr_shape_equal(a, &b)) return true;
  char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
  fprintf(stderr, "  shape %s, want %s\n", gr_shape_str(a, x), gr_shape_str(&b, y));
  return false;
}

static void release_all(gr_tensor *t, int n) {
  for (int i = 0; i < n; i++) gr_tensor_release(&t[i]);
}

/* Runs op on inputs expecting success; outs receive nout outputs. */
static bool run_ok(const char *op, const gr_tensor *in, int n, const gr_attr *a, int na,
                   gr_tensor *outs, int nout) {
  gr_error err;
  gr_error_clear(&err);
  for (int i = 0; i < nout; i++) outs[i] = gr_tensor_empty();
  gr_status s = gt_run_op(op, in, n, a, na, outs, nout, &err);
  GR_CHECK_OK(s, err);
  return s == GR_OK;
}

/* Runs op expecting the error code; the message must name the node and
 * contain sub (when not NULL). */
static void expect_err(const char *op, const gr_tensor *in, int n, const gr_attr *a, int na,
                       gr_status code, const char *sub) {
  gr_error err;
  gr_error_clear(&err);
  gr_tensor out = gr_tensor_empty();
  gr_status s = gt_run_op(op, in, n, a, na, &out, 1, &err);
  GR_CHECK_MSG(s == code, "%s: got %s, want %s (%s)", op, gr_status_name(s), gr_status_name(code),
               err.msg);
  GR_CHECK_STR_CONTAINS(err.msg, "node '");
  if (sub) GR_CHECK_STR_CONTAINS(err.msg, sub);
  gr_tensor_release(&out);
}

/* A graph with placeholders of (partly unknown) shapes and one node of op on
 * them; the node's output is returned in *o (null output on a build error). */
static gr_graph *build_ph(const char *op, const gr_dtype *dts, const gr_shape *shapes, int n,
                          const gr_attr *a, int na, gr_output *o, gr_output *in) {
  gr_graph *g = gr_graph_new();
  for (int i = 0; i < n; i++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", i);
    in[i] = gr_placeholder(g, name, dts[i], shapes[i]);
  }
  *o = gr_op(g, op, "target", in, n, a, na);
  return g;
}

static gr_graph *build(const char *op, const gr_dtype *dts, const gr_shape *shapes, int n,
                       const gr_attr *a, int na, gr_output *o) {
  gr_output in[8];
  return build_ph(op, dts, shapes, n, a, na, o, in);
}

/* The inferred shape of output i of op on placeholders of the given shapes. */
static bool inferred(const char *op, const gr_dtype *dts, const gr_shape *shapes, int n,
                     const gr_attr *a, int na, int i, gr_shape want) {
  gr_output o;
  gr_graph *g = build(op, dts, shapes, n, a, na, &o);
  bool ok = o.node && gr_graph_error(g) == NULL;
  GR_CHECK_MSG(ok, "%s: %s", op, gr_graph_error(g) ? gr_graph_error(g)->msg : "null output");
  if (ok) ok = same_shape(&o.node->out_shapes[i], want);
  gr_graph_free(g);
  return ok;
}

/* Adding op on placeholders of the given shapes fails in its shape function
 * with code; the message names the node and contains sub. */
static void expect_build_err(const char *op, const gr_dtype *dts, const gr_shape *shapes, int n,
                             const gr_attr *a, int na, gr_status code, const char *sub) {
  gr_output o;
  gr_graph *g = build(op, dts, shapes, n, a, na, &o);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK_MSG(o.node == NULL && e && e->code == code, "%s: want build error %s, got %s", op,
               gr_status_name(code), e ? e->msg : "no error");
  if (e) {
    GR_CHECK_STR_CONTAINS(e->msg, "node 'target'");
    GR_CHECK_STR_CONTAINS(e->msg, sub);
  }
  gr_graph_free(g);
}

/* Builds op on placeholders (partly unknown shapes), feeds values, fetches
 * output 0. Returns the run status. */
static gr_status run_partial(const char *op, const gr_shape *shapes, const gr_tensor *vals, int n,
                             const gr_attr *a, int na, gr_tensor *out, gr_error *err) {
  gr_dtype dts[8];
  for (int i = 0; i < n; i++) dts[i] = vals[i].dtype;
  gr_output o, in[8];
  gr_graph *g = build_ph(op, dts, shapes, n, a, na, &o, in);
  *out = gr_tensor_empty();
  gr_status s = GR_ERR_INTERNAL;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    gr_graph_free(g);
    return err->code;
  }
  gr_feed feeds[8];
  for (int i = 0; i < n; i++) feeds[i] = (gr_feed){in[i], &vals[i]};
  gr_session *sess = gr_session_new(g, NULL, err);
  if (sess) {
    s = gr_session_run(sess, feeds, n, &o, 1, out, NULL, 0, err);
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

/* ---- concat ------------------------------------------------------------------- */

static gr_tensor concat_ref(const gr_tensor *xs, int n, int ax) {
  gr_shape os = xs[0].shape;
  os.dims[ax] = 0;
  for (int i = 0; i < n; i++) os.dims[ax] += xs[i].shape.dims[ax];
  gr_tensor w = gt_zeros(xs[0].dtype, os);
  int64_t idx[GR_MAX_RANK];
  for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
    gt_unravel(&os, f, idx);
    int i = 0;
    while (idx[ax] >= xs[i].shape.dims[ax]) idx[ax] -= xs[i++].shape.dims[ax];
    gr_tensor_set_f64(&w, f, gr_tensor_get_f64(&xs[i], ravel(idx, &xs[i].shape)));
  }
  return w;
}

static void test_concat_random(void) {
  gt_rng r = {101};
  for (int c = 0; c < 48; c++) {
    gr_dtype dt = all_dtypes[c % NDT];
    int rank = (int)gt_int(&r, 1, 4), n = (int)gt_int(&r, 1, 4), ax = (int)gt_int(&r, 0, rank - 1);
    int64_t axis = (c & 1) ? ax - rank : ax;
    gr_shape base = rshape(&r, rank, c % 8 == 7 ? 0 : 1, 4);
    gr_tensor xs[4];
    for (int i = 0; i < n; i++) {
      gr_shape s = base;
      s.dims[ax] = gt_int(&r, 0, 4);
      xs[i] = rnd(&r, dt, s);
    }
    gr_attr a = gr_attr_int("axis", axis);
    gr_tensor got;
    if (run_ok("concat", xs, n, &a, 1, &got, 1)) {
      gr_tensor want = concat_ref(xs, n, ax);
      GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
      gr_tensor_release(&want);
    }
    gr_tensor_release(&got);
    release_all(xs, n);
  }
}

static void test_concat_shapes(void) {
  gr_dtype f[3] = {GR_F32, GR_F32, GR_F32};
  gr_attr a0 = gr_attr_int("axis", 0), a1 = gr_attr_int("axis", 1), am1 = gr_attr_int("axis", -1);
  GR_CHECK(inferred("concat", f, (gr_shape[]){shp(2, -1, 3, 0), shp(2, 2, 3, 0)}, 2, &a0, 1, 0,
                    shp(2, -1, 3, 0)));
  GR_CHECK(inferred("concat", f, (gr_shape[]){shp(2, 2, -1, 0), shp(2, -1, 3, 0)}, 2, &a0, 1, 0,
                    shp(2, -1, 3, 0)));
  GR_CHECK(inferred("concat", f, (gr_shape[]){shp(2, 2, 3, 0), shp(2, 4, 3, 0)}, 2, &a0, 1, 0,
                    shp(2, 6, 3, 0)));
  GR_CHECK(inferred("concat", f, (gr_shape[]){shp(2, 2, 1, 0), shp(2, 2, 5, 0), shp(2, -1, 0, 0)},
                    3, &am1, 1, 0, shp(2, 2, 6, 0)));
  GR_CHECK(inferred("concat", f, (gr_shape[]){gr_shape_unknown(), shp(2, 2, 3, 0)}, 2, &a1, 1, 0,
                    shp(2, 2, -1, 0)));
  GR_CHECK(inferred("concat", f, (gr_shape[]){gr_shape_unknown(), gr_shape_unknown()}, 2, &a1, 1, 0,
                    gr_shape_unknown()));
  /* unknown dims are checked at run time */
  gt_rng r = {7};
  gr_tensor v[2] = {rnd(&r, GR_I32, shp(2, 1, 3, 0)), rnd(&r, GR_I32, shp(2, 2, 3, 0))};
  gr_tensor out;
  gr_error err;
  gr_status s = run_partial("concat", (gr_shape[]){shp(2, -1, -1, 0), shp(2, 2, 3, 0)}, v, 2, &a0,
                            1, &out, &err);
  GR_CHECK_OK(s, err);
  gr_tensor want = concat_ref(v, 2, 0);
  if (s == GR_OK) GR_CHECK(gt_equal(&out, &want));
  gr_tensor_release(&want);
  gr_tensor_release(&out);
  gr_tensor_release(&v[0]);
  v[0] = rnd(&r, GR_I32, shp(2, 1, 4, 0));
  s = run_partial("concat", (gr_shape[]){shp(2, -1, -1, 0), shp(2, 2, 3, 0)}, v, 2, &a0, 1, &out,
                  &err);
  GR_CHECK_EQ_INT(s, GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'target'");
  gr_tensor_release(&out);
  release_all(v, 2);
}

static void test_concat_errors(void) {
  gt_rng r = {8};
  gr_tensor a = rnd(&r, GR_F32, shp(2, 2, 3, 0)), b = rnd(&r, GR_F64, shp(2, 2, 3, 0));
  gr_tensor c = rnd(&r, GR_F32, shp(2, 2, 4, 0)), d = rnd(&r, GR_F32, shp(1, 6, 0, 0));
  gr_tensor s = rnd(&r, GR_F32, gr_shape_scalar());
  gr_attr a0 = gr_attr_int("axis", 0), a1 = gr_attr_int("axis", 1);
  expect_err("concat", (gr_tensor[]){a, b}, 2, &a0, 1, GR_ERR_DTYPE, "f64");
  expect_err("concat", (gr_tensor[]){a, c}, 2, &a0, 1, GR_ERR_SHAPE, "[2, 4]");
  expect_err("concat", (gr_tensor[]){a, d}, 2, &a1, 1, GR_ERR_SHAPE, "[6]");
  expect_err("concat", (gr_tensor[]){a, a}, 2, (gr_attr[]){gr_attr_int("axis", 2)}, 1,
             GR_ERR_OUT_OF_RANGE, "axis 2");
  expect_err("concat", (gr_tensor[]){a, a}, 2, (gr_attr[]){gr_attr_int("axis", -3)}, 1,
             GR_ERR_OUT_OF_RANGE, "axis -3");
  expect_err("concat", (gr_tensor[]){s, s}, 2, &a0, 1, GR_ERR_SHAPE, "scalar");
  expect_err("concat", (gr_tensor[]){a, a}, 2, NULL, 0, GR_ERR_INVALID_ARGUMENT, "axis");
  gr_dtype f[2] = {GR_F32, GR_F32};
  expect_build_err("concat", f, (gr_shape[]){shp(2, -1, 3, 0), shp(2, 2, 4, 0)}, 2, &a0, 1,
                   GR_ERR_SHAPE, "dimension 1 differs");
  expect_build_err("concat", f, (gr_shape[]){shp(2, -1, 3, 0), shp(3, 2, 3, 1)}, 2, &a0, 1,
                   GR_ERR_SHAPE, "[?, 3]");
  expect_build_err("concat", f, (gr_shape[]){gr_shape_unknown(), shp(2, 2, 4, 0)}, 2,
                   (gr_attr[]){gr_attr_int("axis", 2)}, 1, GR_ERR_OUT_OF_RANGE, "axis 2");
  gr_graph *g = gr_graph_new();
  GR_CHECK(gr_concat(g, NULL, 0, 0).node == NULL);
  GR_CHECK(gr_graph_error(g) && gr_graph_error(g)->code == GR_ERR_INVALID_ARGUMENT);
  gr_graph_free(g);
  gr_tensor_release(&a);
  gr_tensor_release(&b);
  gr_tensor_release(&c);
  gr_tensor_release(&d);
  gr_tensor_release(&s);
}

/* ---- split -------------------------------------------------------------------- */

static void test_split_random(void) {
  gt_rng r = {202};
  for (int c = 0; c < 48; c++) {
    gr_dtype dt = all_dtypes[c % NDT];
    int rank = (int)gt_int(&r, 1, 4), ax = (int)gt_int(&r, 0, rank - 1);
    int num = (int)gt_int(&r, 1, 5);
    int64_t axis = (c & 1) ? ax - rank : ax;
    gr_shape s = rshape(&r, rank, c % 8 == 7 ? 0 : 1, 4);
    int64_t part = gt_int(&r, c % 5 == 4 ? 0 : 1, 3);
    s.dims[ax] = part * num;
    gr_tensor x = rnd(&r, dt, s);
    gr_attr a[2] = {gr_attr_int("num_split", num), gr_attr_int("axis", axis)};
    gr_tensor outs[5], want[5];
    gr_shape ps = s;
    ps.dims[ax] = part;
    for (int i = 0; i < num; i++) {
      want[i] = gt_zeros(dt, ps);
      int64_t idx[GR_MAX_RANK];
      for (int64_t f = 0; f < gr_shape_num_elements(&ps); f++) {
        gt_unravel(&ps, f, idx);
        idx[ax] += i * part;
        gr_tensor_set_f64(&want[i], f, gr_tensor_get_f64(&x, ravel(idx, &s)));
      }
    }
    bool ok = run_ok("split", &x, 1, a, 2, outs, num);
    gr_tensor_release(&x); /* outputs may be views: they must keep the data alive */
    for (int i = 0; ok && i < num; i++)
      GR_CHECK_MSG(gt_equal(&outs[i], &want[i]), "case %d out %d", c, i);
    release_all(outs, num);
    release_all(want, num);
  }
}

static void test_split_shapes_and_errors(void) {
  gr_dtype f[1] = {GR_F32};
  gr_attr a[2] = {gr_attr_int("num_split", 3), gr_attr_int("axis", -1)};
  GR_CHECK(inferred("split", f, (gr_shape[]){shp(2, -1, 6, 0)}, 1, a, 2, 2, shp(2, -1, 2, 0)));
  GR_CHECK(inferred("split", f, (gr_shape[]){shp(2, 4, -1, 0)}, 1, a, 2, 1, shp(2, 4, -1, 0)));
  GR_CHECK(inferred("split", f, (gr_shape[]){gr_shape_unknown()}, 1, a, 2, 0, gr_shape_unknown()));
  gr_output o;
  gr_graph *g = build("split", f, (gr_shape[]){shp(2, 4, 6, 0)}, 1, a, 2, &o);
  GR_CHECK(o.node && o.node->num_outputs == 3);
  gr_graph_free(g);

  expect_build_err("split", f, (gr_shape[]){shp(2, -1, 5, 0)}, 1, a, 2, GR_ERR_SHAPE,
                   "3 equal parts");
  gt_rng r = {9};
  gr_tensor x = rnd(&r, GR_F32, shp(2, 4, 5, 0)), s = rnd(&r, GR_F32, gr_shape_scalar());
  expect_err("split", &x, 1, a, 2, GR_ERR_SHAPE, "3 equal parts");
  expect_err("split", &x, 1, (gr_attr[]){gr_attr_int("num_split", 0)}, 1, GR_ERR_INVALID_ARGUMENT,
             "num_split 0");
  expect_err("split", &x, 1, (gr_attr[]){gr_attr_int("num_split", 2000)}, 1,
             GR_ERR_INVALID_ARGUMENT, "num_split 2000");
  expect_err("split", &x, 1, (gr_attr[]){gr_attr_int("num_split", 2), gr_attr_int("axis", 2)}, 2,
             GR_ERR_OUT_OF_RANGE, "axis 2");
  expect_err("split", &s, 1, (gr_attr[]){gr_attr_int("num_split", 1)}, 1, GR_ERR_SHAPE, "scalar");
  expect_err("split", &x, 1, NULL, 0, GR_ERR_INVALID_ARGUMENT, "num_split");
  /* unknown at build time: checked by the kernel */
  gr_tensor out;
  gr_error err;
  gr_status st = run_partial("split", (gr_shape[]){shp(2, 4, -1, 0)}, &x, 1, a, 2, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'target'");
  gr_tensor_release(&out);
  gr_tensor_release(&x);
  gr_tensor_release(&s);
}

/* ---- slice -------------------------------------------------------------------- */

static void test_slice_random(void) {
  gt_rng r = {303};
  for (int c = 0; c < 60; c++) {
    gr_dtype dt = all_dtypes[c % NDT];
    int rank = (int)gt_int(&r, 1, 4);
    gr_shape s = rshape(&r, rank, c % 6 == 5 ? 0 : 1, 5);
    int64_t begin[4], size[4];
    gr_shape os = s;
    for (int d = 0; d < rank; d++) {
      begin[d] = gt_int(&r, 0, s.dims[d]);
      size[d] = gt_int(&r, 0, s.dims[d] - begin[d]);
      os.dims[d] = size[d];
      if (gt_int(&r, 0, 3) == 0) {
        size[d] = -1;
        os.dims[d] = s.dims[d] - begin[d];
      }
    }
    if (c % 10 == 0) /* whole dims after the first: a contiguous view */
      for (int d = 1; d < rank; d++) begin[d] = 0, size[d] = -1, os.dims[d] = s.dims[d];
    gr_tensor x = rnd(&r, dt, s), want = gt_zeros(dt, os);
    int64_t idx[GR_MAX_RANK];
    for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
      gt_unravel(&os, f, idx);
      for (int d = 0; d < rank; d++) idx[d] += begin[d];
      gr_tensor_set_f64(&want, f, gr_tensor_get_f64(&x, ravel(idx, &s)));
    }
    gr_attr a[2] = {gr_attr_ints("begin", rank, begin), gr_attr_ints("size", rank, size)};
    gr_tensor got;
    bool ok = run_ok("slice", &x, 1, a, 2, &got, 1);
    gr_tensor_release(&x);
    if (ok) GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
    gr_tensor_release(&got);
    gr_tensor_release(&want);
  }
}

static void test_slice_shapes_and_errors(void) {
  gr_dtype f[1] = {GR_I64};
  int64_t b[2] = {1, 2}, s1[2] = {-1, 2}, s2[2] = {2, -1};
  gr_attr a1[2] = {gr_attr_ints("begin", 2, b), gr_attr_ints("size", 2, s1)};
  gr_attr a2[2] = {gr_attr_ints("begin", 2, b), gr_attr_ints("size", 2, s2)};
  GR_CHECK(inferred("slice", f, (gr_shape[]){shp(2, -1, 5, 0)}, 1, a1, 2, 0, shp(2, -1, 2, 0)));
  GR_CHECK(inferred("slice", f, (gr_shape[]){shp(2, -1, 5, 0)}, 1, a2, 2, 0, shp(2, 2, 3, 0)));
  GR_CHECK(inferred("slice", f, (gr_shape[]){gr_shape_unknown()}, 1, a2, 2, 0, shp(2, 2, -1, 0)));

  int64_t b3[2] = {2, 6}, s3[2] = {-1, 0};
  expect_build_err("slice", f, (gr_shape[]){shp(2, -1, 5, 0)}, 1,
                   (gr_attr[]){gr_attr_ints("begin", 2, b3), gr_attr_ints("size", 2, s3)}, 2,
                   GR_ERR_OUT_OF_RANGE, "begin 6");
  expect_build_err("slice", f, (gr_shape[]){shp(2, -1, 5, 0)}, 1,
                   (gr_attr[]){gr_attr_ints("begin", 2, b), gr_attr_ints("size", 2, b3)}, 2,
                   GR_ERR_OUT_OF_RANGE, "size 6");
  gt_rng r = {10};
  gr_tensor x = rnd(&r, GR_I64, shp(2, 3, 4, 0));
  int64_t z[3] = {0, 0, 0}, m[2] = {-1, 0}, bad[2] = {0, -2}, big[2] = {2, 3}, b4[2] = {0, 5};
  expect_err("slice", &x, 1, (gr_attr[]){gr_attr_ints("begin", 3, z), gr_attr_ints("size", 3, z)},
             2, GR_ERR_INVALID_ARGUMENT, "needs one per dim");
  expect_err("slice", &x, 1, (gr_attr[]){gr_attr_ints("begin", 2, m), gr_attr_ints("size", 2, z)},
             2, GR_ERR_OUT_OF_RANGE, "begin -1");
  expect_err("slice", &x, 1, (gr_attr[]){gr_attr_ints("begin", 2, z), gr_attr_ints("size", 2, bad)},
             2, GR_ERR_OUT_OF_RANGE, "size -2");
  expect_err("slice", &x, 1,
             (gr_attr[]){gr_attr_ints("begin", 2, big), gr_attr_ints("size", 2, big)}, 2,
             GR_ERR_OUT_OF_RANGE, "dim 0");
  expect_err("slice", &x, 1, (gr_attr[]){gr_attr_ints("begin", 2, b4), gr_attr_ints("size", 2, m)},
             2, GR_ERR_OUT_OF_RANGE, "begin 5");
  expect_err("slice", &x, 1, (gr_attr[]){gr_attr_ints("begin", 2, z)}, 1, GR_ERR_INVALID_ARGUMENT,
             "size");
  /* bounds unknown at build time: checked by the kernel */
  gr_tensor out;
  gr_error err;
  gr_attr ab[2] = {gr_attr_ints("begin", 2, big), gr_attr_ints("size", 2, big)};
  gr_status st = run_partial("slice", (gr_shape[]){shp(2, -1, -1, 0)}, &x, 1, ab, 2, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'target'");
  gr_tensor_release(&out);
  gr_tensor y = rnd(&r, GR_I64, shp(3, 3, 4, 2));
  st = run_partial("slice", (gr_shape[]){gr_shape_unknown()}, &y, 1, a2, 2, &out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'target'");
  gr_tensor_release(&out);
  gr_tensor_release(&x);
  gr_tensor_release(&y);
}

/* ---- gather ------------------------------------------------------------------- */

static gr_tensor gather_ref(const gr_tensor *p, const gr_tensor *ix, int ax) {
  int r = p->shape.rank, ri = ix->shape.rank;
  gr_shape os = gr_shape_scalar();
  os.rank = r - 1 + ri;
  for (int d = 0; d < ax; d++) os.dims[d] = p->shape.dims[d];
  for (int d = 0; d < ri; d++) os.dims[ax + d] = ix->shape.dims[d];
  for (int d = ax + 1; d < r; d++) os.dims[ri + d - 1] = p->shape.dims[d];
  gr_tensor w = gt_zeros(p->dtype, os);
  int64_t oi[GR_MAX_RANK], pi[GR_MAX_RANK], ii[GR_MAX_RANK];
  for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
    gt_unravel(&os, f, oi);
    for (int d = 0; d < ri; d++) ii[d] = oi[ax + d];
    for (int d = 0; d < ax; d++) pi[d] = oi[d];
    pi[ax] = (int64_t)gr_tensor_get_f64(ix, ravel(ii, &ix->shape));
    for (int d = ax + 1; d < r; d++) pi[d] = oi[ri + d - 1];
    gr_tensor_set_f64(&w, f, gr_tensor_get_f64(p, ravel(pi, &p->shape)));
  }
  return w;
}

static void test_gather_random(void) {
  gt_rng r = {404};
  for (int c = 0; c < 60; c++) {
    gr_dtype dt = all_dtypes[c % NDT], it = (c / NDT) % 2 ? GR_I64 : GR_I32;
    int rank = (int)gt_int(&r, 1, 4), ri = (int)gt_int(&r, 0, 3), ax = (int)gt_int(&r, 0, rank - 1);
    int64_t axis = (c % 3 == 1) ? ax - rank : ax;
    gr_shape ps = rshape(&r, rank, c % 9 == 8 ? 0 : 1, 4);
    ps.dims[ax] = gt_int(&r, 1, 5);
    gr_shape is = rshape(&r, ri, c % 7 == 6 ? 0 : 1, 4);
    gr_tensor p = rnd(&r, dt, ps), ix = gt_random(&r, it, is, 0, (double)ps.dims[ax] - 1);
    gr_attr a = gr_attr_int("axis", axis);
    gr_tensor got;
    gr_tensor in[2] = {p, ix};
    if (run_ok("gather", in, 2, &a, 1, &got, 1)) {
      gr_tensor want = gather_ref(&p, &ix, ax);
      GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
      gr_tensor_release(&want);
    }
    gr_tensor_release(&got);
    gr_tensor_release(&p);
    gr_tensor_release(&ix);
  }
}

static void test_gather_errors(void) {
  gt_rng r = {11};
  gr_tensor p = rnd(&r, GR_F32, shp(2, 5, 3, 0));
  gr_tensor bad = gt_make(GR_I64, shp(2, 2, 2, 0), (double[]){0, 4, 1, 7});
  gr_tensor neg = gt_make(GR_I32, shp(1, 3, 0, 0), (double[]){0, -1, 2});
  gr_tensor one = gt_make(GR_I32, gr_shape_scalar(), (double[]){3});
  gr_tensor fl = gt_make(GR_F32, shp(1, 1, 0, 0), (double[]){0});
  gr_tensor s = rnd(&r, GR_F32, gr_shape_scalar());
  gr_tensor p5 = rnd(&r, GR_F32, (gr_shape){5, {1, 1, 1, 1, 2}});
  gr_tensor i5 = gt_zeros(GR_I32, (gr_shape){5, {1, 1, 1, 1, 1}});
  gr_attr a0 = gr_attr_int("axis", 0), a1 = gr_attr_int("axis", -1);
  expect_err("gather", (gr_tensor[]){p, bad}, 2, &a0, 1, GR_ERR_OUT_OF_RANGE, "indices[1, 1] = 7");
  expect_err("gather", (gr_tensor[]){p, neg}, 2, &a0, 1, GR_ERR_OUT_OF_RANGE, "indices[1] = -1");
  expect_err("gather", (gr_tensor[]){p, one}, 2, &a1, 1, GR_ERR_OUT_OF_RANGE, "indices = 3");
  expect_err("gather", (gr_tensor[]){p, fl}, 2, &a0, 1, GR_ERR_DTYPE, "indices");
  expect_err("gather", (gr_tensor[]){s, one}, 2, &a0, 1, GR_ERR_SHAPE, "rank");
  expect_err("gather", (gr_tensor[]){p, one}, 2, (gr_attr[]){gr_attr_int("axis", 2)}, 1,
             GR_ERR_OUT_OF_RANGE, "axis 2");
  expect_err("gather", (gr_tensor[]){p5, i5}, 2, &a0, 1, GR_ERR_SHAPE, "rank above 8");
  expect_build_err("gather", (gr_dtype[]){GR_F32, GR_F32},
                   (gr_shape[]){shp(2, 5, 3, 0), shp(1, 2, 0, 0)}, 2, &a0, 1, GR_ERR_DTYPE,
                   "indices");
  expect_build_err("gather", (gr_dtype[]){GR_F32, GR_I32},
                   (gr_shape[]){shp(2, -1, 3, 0), gr_shape_unknown()}, 2,
                   (gr_attr[]){gr_attr_int("axis", -3)}, 1, GR_ERR_OUT_OF_RANGE, "axis -3");
  /* the same index in range passes, the default axis is 0 */
  gr_tensor got;
  if (run_ok("gather", (gr_tensor[]){p, one}, 2, NULL, 0, &got, 1)) {
    gr_tensor want = gather_ref(&p, &one, 0);
    GR_CHECK(gt_equal(&got, &want));
    gr_tensor_release(&want);
  }
  gr_tensor_release(&got);
  GR_CHECK(inferred("gather", (gr_dtype[]){GR_F32, GR_I32},
                    (gr_shape[]){shp(3, 4, -1, 6), shp(2, -1, 2, 0)}, 2, &a1, 1, 0,
                    (gr_shape){4, {4, -1, -1, 2}}));
  GR_CHECK(inferred("gather", (gr_dtype[]){GR_F32, GR_I64},
                    (gr_shape[]){shp(2, 4, 6, 0), gr_shape_unknown()}, 2, &a0, 1, 0,
                    gr_shape_unknown()));
  gr_tensor_release(&p);
  gr_tensor_release(&bad);
  gr_tensor_release(&neg);
  gr_tensor_release(&one);
  gr_tensor_release(&fl);
  gr_tensor_release(&s);
  gr_tensor_release(&p5);
  gr_tensor_release(&i5);
}

/* ---- one_hot ------------------------------------------------------------------ */

static void test_one_hot_random(void) {
  gt_rng r = {505};
  for (int c = 0; c < 48; c++) {
    gr_dtype dt = all_dtypes[c % NDT], it = (c / NDT) % 2 ? GR_I64 : GR_I32;
    int ri = (int)gt_int(&r, 0, 3);
    int64_t depth = gt_int(&r, c % 8 == 7 ? 0 : 1, 6);
    gr_shape is = rshape(&r, ri, c % 7 == 6 ? 0 : 1, 4);
    gr_tensor ix = gt_random(&r, it, is, -2, (double)depth + 1); /* some out of range */
    double on = rvalue(&r, dt), off = rvalue(&r, dt);
    gr_attr a[4] = {gr_attr_int("depth", depth), gr_attr_dtype("dtype", dt),
                    gr_attr_float("on_value", on), gr_attr_float("off_value", off)};
    gr_shape os = is;
    os.dims[os.rank++] = depth;
    gr_tensor want = gt_zeros(dt, os);
    for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
      int64_t k = f % depth, v = (int64_t)gr_tensor_get_f64(&ix, f / depth);
      gr_tensor_set_f64(&want, f, v == k ? on : off);
    }
    gr_tensor got;
    if (run_ok("one_hot", &ix, 1, a, 4, &got, 1)) GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
    gr_tensor_release(&got);
    gr_tensor_release(&want);
    gr_tensor_release(&ix);
  }
}

static void test_one_hot_defaults_and_errors(void) {
  gr_tensor ix = gt_make(GR_I64, shp(1, 4, 0, 0), (double[]){2, -1, 0, 3});
  gr_tensor got;
  if (run_ok("one_hot", &ix, 1, (gr_attr[]){gr_attr_int("depth", 3)}, 1, &got, 1)) {
    gr_tensor want =
        gt_make(GR_F32, shp(2, 4, 3, 0), (double[]){0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0});
    GR_CHECK(gt_equal(&got, &want));
    gr_tensor_release(&want);
  }
  gr_tensor_release(&got);
  gr_tensor fl = gt_make(GR_F64, shp(1, 1, 0, 0), (double[]){0});
  gr_tensor i8 = gt_zeros(GR_I32, (gr_shape){8, {1, 1, 1, 1, 1, 1, 1, 1}});
  expect_err("one_hot", &fl, 1, (gr_attr[]){gr_attr_int("depth", 3)}, 1, GR_ERR_DTYPE, "indices");
  expect_err("one_hot", &ix, 1, (gr_attr[]){gr_attr_int("depth", -1)}, 1, GR_ERR_INVALID_ARGUMENT,
             "depth -1");
  expect_err("one_hot", &ix, 1,
             (gr_attr[]){gr_attr_int("depth", 3), gr_attr_dtype("dtype", GR_U8),
                         gr_attr_float("on_value", 300)},
             3, GR_ERR_INVALID_ARGUMENT, "on_value 300");
  expect_err("one_hot", &ix, 1,
             (gr_attr[]){gr_attr_int("depth", 3), gr_attr_dtype("dtype", GR_I32),
                         gr_attr_float("off_value", NAN)},
             3, GR_ERR_INVALID_ARGUMENT, "off_value");
  expect_err("one_hot", &i8, 1, (gr_attr[]){gr_attr_int("depth", 3)}, 1, GR_ERR_SHAPE,
             "depth axis");
  expect_err("one_hot", &ix, 1, NULL, 0, GR_ERR_INVALID_ARGUMENT, "depth");
  GR_CHECK(inferred("one_hot", (gr_dtype[]){GR_I32}, (gr_shape[]){shp(2, -1, 3, 0)}, 1,
                    (gr_attr[]){gr_attr_int("depth", 5)}, 1, 0, shp(3, -1, 3, 5)));
  gr_tensor_release(&ix);
  gr_tensor_release(&fl);
  gr_tensor_release(&i8);
}

/* ---- tile --------------------------------------------------------------------- */

static void test_tile_random(void) {
  gt_rng r = {606};
  for (int c = 0; c < 48; c++) {
    gr_dtype dt = all_dtypes[c % NDT];
    int rank = (int)gt_int(&r, c % 12 == 11 ? 0 : 1, 4);
    gr_shape s = rshape(&r, rank, c % 8 == 7 ? 0 : 1, 3);
    int64_t mult[4];
    gr_shape os = s;
    for (int d = 0; d < rank; d++) {
      mult[d] = gt_int(&r, c % 9 == 8 ? 0 : 1, 3);
      os.dims[d] = s.dims[d] * mult[d];
    }
    gr_tensor x = rnd(&r, dt, s), want = gt_zeros(dt, os);
    int64_t idx[GR_MAX_RANK];
    for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
      gt_unravel(&os, f, idx);
      for (int d = 0; d < rank; d++) idx[d] %= s.dims[d];
      gr_tensor_set_f64(&want, f, gr_tensor_get_f64(&x, ravel(idx, &s)));
    }
    gr_attr a = gr_attr_ints("multiples", rank, mult);
    gr_tensor got;
    if (run_ok("tile", &x, 1, &a, 1, &got, 1)) GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
    gr_tensor_release(&got);
    gr_tensor_release(&want);
    gr_tensor_release(&x);
  }
}

static void test_tile_shapes_and_errors(void) {
  int64_t m2[2] = {2, 0}, m3[2] = {2, 3}, mn[2] = {1, -1}, mb[1] = {(int64_t)1 << 30};
  GR_CHECK(inferred("tile", (gr_dtype[]){GR_BOOL}, (gr_shape[]){shp(2, -1, 3, 0)}, 1,
                    (gr_attr[]){gr_attr_ints("multiples", 2, m2)}, 1, 0, shp(2, -1, 0, 0)));
  GR_CHECK(inferred("tile", (gr_dtype[]){GR_BOOL}, (gr_shape[]){shp(2, 2, 3, 0)}, 1,
                    (gr_attr[]){gr_attr_ints("multiples", 2, m3)}, 1, 0, shp(2, 4, 9, 0)));
  GR_CHECK(inferred("tile", (gr_dtype[]){GR_BOOL}, (gr_shape[]){gr_shape_unknown()}, 1,
                    (gr_attr[]){gr_attr_ints("multiples", 2, m3)}, 1, 0, shp(2, -1, -1, 0)));
  expect_build_err("tile", (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_unknown()}, 1,
                   (gr_attr[]){gr_attr_ints("multiples", 2, mn)}, 1, GR_ERR_INVALID_ARGUMENT,
                   "multiples[1]");
  gt_rng r = {12};
  gr_tensor x = rnd(&r, GR_U8, shp(2, 2, 3, 0));
  expect_err("tile", &x, 1, (gr_attr[]){gr_attr_ints("multiples", 1, m3)}, 1,
             GR_ERR_INVALID_ARGUMENT, "one per dim");
  expect_err("tile", &x, 1, (gr_attr[]){gr_attr_ints("multiples", 2, mn)}, 1,
             GR_ERR_INVALID_ARGUMENT, "multiples[1]");
  expect_err("tile", &x, 1, NULL, 0, GR_ERR_INVALID_ARGUMENT, "multiples");
  gr_output o;
  gr_graph *g = build("tile", (gr_dtype[]){GR_F32}, (gr_shape[]){shp(1, (int64_t)1 << 30, 0, 0)}, 1,
                      (gr_attr[]){gr_attr_ints("multiples", 1, mb)}, 1, &o);
  GR_CHECK(o.node == NULL && gr_graph_error(g) && gr_graph_error(g)->code == GR_ERR_OUT_OF_RANGE);
  if (gr_graph_error(g)) GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "node 'target'");
  gr_graph_free(g);
  gr_tensor_release(&x);
}

/* ---- pad ---------------------------------------------------------------------- */

static void test_pad_random(void) {
  gt_rng r = {707};
  for (int c = 0; c < 48; c++) {
    gr_dtype dt = all_dtypes[c % NDT];
    int rank = (int)gt_int(&r, 1, 4);
    gr_shape s = rshape(&r, rank, c % 8 == 7 ? 0 : 1, 3);
    int64_t pads[8];
    gr_shape os = s;
    for (int d = 0; d < rank; d++) {
      pads[2 * d] = gt_int(&r, 0, 2);
      pads[2 * d + 1] = gt_int(&r, 0, 2);
      if (c % 10 == 9) pads[2 * d] = pads[2 * d + 1] = 0;
      os.dims[d] = s.dims[d] + pads[2 * d] + pads[2 * d + 1];
    }
    double value = c % 4 == 0 ? 0 : rvalue(&r, dt);
    gr_tensor x = rnd(&r, dt, s), want = gt_zeros(dt, os);
    int64_t idx[GR_MAX_RANK];
    for (int64_t f = 0; f < gr_shape_num_elements(&os); f++) {
      gt_unravel(&os, f, idx);
      bool inside = true;
      for (int d = 0; d < rank; d++) {
        idx[d] -= pads[2 * d];
        inside = inside && idx[d] >= 0 && idx[d] < s.dims[d];
      }
      gr_tensor_set_f64(&want, f, inside ? gr_tensor_get_f64(&x, ravel(idx, &s)) : value);
    }
    gr_attr a[2] = {gr_attr_ints("paddings", 2 * rank, pads), gr_attr_float("value", value)};
    gr_tensor got;
    if (run_ok("pad", &x, 1, a, c % 4 == 0 ? 1 : 2, &got, 1))
      GR_CHECK_MSG(gt_equal(&got, &want), "case %d", c);
    gr_tensor_release(&got);
    gr_tensor_release(&want);
    gr_tensor_release(&x);
  }
}

static void test_pad_shapes_and_errors(void) {
  int64_t p4[4] = {1, 1, 0, 2}, p3[3] = {1, 1, 0}, pn[4] = {0, 0, -1, 0};
  GR_CHECK(inferred("pad", (gr_dtype[]){GR_I32}, (gr_shape[]){shp(2, -1, 2, 0)}, 1,
                    (gr_attr[]){gr_attr_ints("paddings", 4, p4)}, 1, 0, shp(2, -1, 4, 0)));
  GR_CHECK(inferred("pad", (gr_dtype[]){GR_I32}, (gr_shape[]){gr_shape_unknown()}, 1,
                    (gr_attr[]){gr_attr_ints("paddings", 4, p4)}, 1, 0, shp(2, -1, -1, 0)));
  expect_build_err("pad", (gr_dtype[]){GR_U8}, (gr_shape[]){shp(2, -1, 2, 0)}, 1,
                   (gr_attr[]){gr_attr_ints("paddings", 4, pn)}, 1, GR_ERR_INVALID_ARGUMENT,
                   "dim 1");
  expect_build_err("pad", (gr_dtype[]){GR_U8}, (gr_shape[]){gr_shape_unknown()}, 1,
                   (gr_attr[]){gr_attr_ints("paddings", 3, p3)}, 1, GR_ERR_INVALID_ARGUMENT,
                   "two per dim");
  gt_rng r = {13};
  gr_tensor x = rnd(&r, GR_U8, shp(2, 2, 3, 0)), y = rnd(&r, GR_I32, shp(2, 2, 3, 0));
  expect_err("pad", &x, 1, (gr_attr[]){gr_attr_ints("paddings", 3, p3)}, 1, GR_ERR_INVALID_ARGUMENT,
             "two per dim");
  expect_err("pad", &x, 1, (gr_attr[]){gr_attr_ints("paddings", 2, p4)}, 1, GR_ERR_INVALID_ARGUMENT,
             "two per dim");
  expect_err("pad", &x, 1, (gr_attr[]){gr_attr_ints("paddings", 4, pn)}, 1, GR_ERR_INVALID_ARGUMENT,
             "dim 1");
  expect_err("pad", &x, 1,
             (gr_attr[]){gr_attr_ints("paddings", 4, p4), gr_attr_float("value", 300)}, 2,
             GR_ERR_INVALID_ARGUMENT, "value 300");
  expect_err("pad", &y, 1,
             (gr_attr[]){gr_attr_ints("paddings", 4, p4), gr_attr_float("value", NAN)}, 2,
             GR_ERR_INVALID_ARGUMENT, "i32");
  expect_err("pad", &x, 1, NULL, 0, GR_ERR_INVALID_ARGUMENT, "paddings");
  gr_tensor_release(&x);
  gr_tensor_release(&y);
}

/* ---- builders and views inside graphs ------------------------------------------- */

static void test_builders(void) {
  gt_rng r = {14};
  gr_tensor xv = rnd(&r, GR_F64, shp(2, 4, 6, 0));
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const(g, &xv);
  gr_output parts = gr_split(g, x, 3, 1);
  gr_output back = gr_concat(
      g, (gr_output[]){gr_output_at(parts, 0), gr_output_at(parts, 1), gr_output_at(parts, 2)}, 3,
      -1);
  int64_t b[2] = {0, 0}, s[2] = {1, -1};
  gr_output row = gr_slice(g, x, b, s, 2);               /* a view at offset 0 */
  gr_output row1 = gr_add(g, row, gr_const_f64(g, 1.0)); /* must not write into x */
  int64_t iv[3] = {3, 0, 3};
  gr_output idx = gr_const_data(g, GR_I64, shp(1, 3, 0, 0), iv);
  gr_output gat = gr_gather(g, x, idx, 0);
  gr_output oh = gr_one_hot(g, idx, 4, GR_U8);
  int64_t m[2] = {2, 1};
  gr_output til = gr_tile(g, row, m, 2);
  gr_output pad = gr_pad(g, row, (int64_t[]){1, 0, 0, 2}, 2, -5);
  GR_CHECK(gr_graph_error(g) == NULL);
  if (gr_graph_error(g)) fprintf(stderr, "%s\n", gr_graph_error(g)->msg);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  GR_CHECK(sess != NULL);
  gr_output fetch[8] = {back, row1, x, gat, oh, til, pad, gr_output_at(parts, 2)};
  gr_tensor out[8];
  if (sess && gr_session_run(sess, NULL, 0, fetch, 8, out, NULL, 0, &err) == GR_OK) {
    GR_CHECK(gt_equal(&out[0], &xv));
    GR_CHECK(gt_equal(&out[2], &xv));
    GR_CHECK(same_shape(&out[1].shape, shp(2, 1, 6, 0)));
    for (int j = 0; j < 6; j++)
      GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[1], j), gr_tensor_get_f64(&xv, j) + 1);
    GR_CHECK(same_shape(&out[3].shape, shp(2, 3, 6, 0)));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[3], 7), gr_tensor_get_f64(&xv, 1));
    GR_CHECK(out[4].dtype == GR_U8 && same_shape(&out[4].shape, shp(2, 3, 4, 0)));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[4], 3), 1);
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[4], 4), 1);
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[4], 5), 0);
    GR_CHECK(same_shape(&out[5].shape, shp(2, 2, 6, 0)));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[5], 8), gr_tensor_get_f64(&xv, 2));
    GR_CHECK(same_shape(&out[6].shape, shp(2, 2, 8, 0)));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[6], 0), -5);
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[6], 8), gr_tensor_get_f64(&xv, 0));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[6], 15), -5);
    GR_CHECK(same_shape(&out[7].shape, shp(2, 4, 2, 0)));
    GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[7], 3), gr_tensor_get_f64(&xv, 11));
    release_all(out, 8);
  } else {
    GR_CHECK_MSG(false, "run: %s", err.msg);
  }
  gr_session_free(sess);
  gr_graph_free(g);
  gr_tensor_release(&xv);
}

int main(void) {
  GR_RUN(test_concat_random);
  GR_RUN(test_concat_shapes);
  GR_RUN(test_concat_errors);
  GR_RUN(test_split_random);
  GR_RUN(test_split_shapes_and_errors);
  GR_RUN(test_slice_random);
  GR_RUN(test_slice_shapes_and_errors);
  GR_RUN(test_gather_random);
  GR_RUN(test_gather_errors);
  GR_RUN(test_one_hot_random);
  GR_RUN(test_one_hot_defaults_and_errors);
  GR_RUN(test_tile_random);
  GR_RUN(test_tile_shapes_and_errors);
  GR_RUN(test_pad_random);
  GR_RUN(test_pad_shapes_and_errors);
  GR_RUN(test_builders);
  return gr_test_finish();
}
