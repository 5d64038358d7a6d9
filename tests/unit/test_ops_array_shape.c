/* Tests of the shape ops (ops/array_shape.c): reshape, transpose, expand_dims,
 * squeeze, shape, fill (and gr_zeros / gr_ones), zeros_like, ones_like against
 * plain references on random shapes and every dtype; views really share the
 * input's buffer; shape inference with unknown dims and ranks; build and run
 * errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static const gr_dtype all_dtypes[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};

/* ---- helpers -------------------------------------------------------------------- */

static gr_tensor random_tensor(gt_rng *r, gr_dtype dt, gr_shape s) {
  return gt_random(r, dt, s, dt == GR_U8 ? 0 : -100, 100);
}

/* Runs op on a constant x (so the input buffer is x's own); *out gets the result. */
static gr_status run_on_const(const char *op, const gr_tensor *x, const gr_attr *a, int na,
                              gr_tensor *out, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output c = gr_const(g, x);
  gr_output o = gr_op(g, op, NULL, &c, 1, a, na);
  *out = gr_tensor_empty();
  gr_status st;
  gr_session *sess = NULL;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    st = err->code;
  } else if (!(sess = gr_session_new(g, NULL, err))) {
    st = err->code;
  } else {
    st = gr_session_run(sess, NULL, 0, &o, 1, out, NULL, 0, err);
  }
  if (sess) gr_session_free(sess);
  gr_graph_free(g);
  return st;
}

/* Runs op on a constant x: the result must be x's own buffer seen with shape ws. */
static bool view_ok(const char *op, const gr_tensor *x, gr_shape ws, const gr_attr *a) {
  gr_tensor out, want;
  gr_error err;
  gr_tensor_reshape(x, &ws, &want, &err);
  gr_status st = run_on_const(op, x, a, 1, &out, &err);
  GR_CHECK_OK(st, err);
  bool ok = st == GR_OK && gt_bit_equal(&out, &want) && out.buf == x->buf;
  gr_tensor_release(&out);
  gr_tensor_release(&want);
  return ok;
}

static void expect_run_error(const char *op, const gr_tensor *x, bool rank_known, const gr_attr *a,
                             int na, gr_status code, const char *text) {
  gr_tensor out;
  gr_error err;
  gr_status st = gt_run1_unknown(op, x, rank_known, a, na, &out, &err);
  GR_CHECK_MSG(st == code, "%s: got %s (%s)", op, gr_status_name(st), err.msg);
  GR_CHECK_STR_CONTAINS(err.msg, "node '");
  GR_CHECK_STR_CONTAINS(err.msg, text);
  gr_tensor_release(&out);
}

static void expect_build_error(gr_output o, gr_graph *g, gr_status code, const char *text) {
  GR_CHECK(gt_build_failed(o, g, code, text));
}

static void check_shape(gr_output o, gr_dtype dt, gr_shape want) {
  GR_CHECK(gt_inferred(o, dt, want));
}

/* A random shape whose dims are 1..max, with a 0 dim now and then. */
static gr_shape shape_with_zeros(gt_rng *r, int rank, int max) {
  gr_shape s = gt_random_shape(r, rank, max);
  if (rank > 0 && gt_next(r) % 8 == 0) s.dims[gt_int(r, 0, rank - 1)] = 0;
  return s;
}

/* ---- reshape -------------------------------------------------------------------- */

/* A random target shape of n elements; one dim may become -1 (*resolved
 * receives the dims it stands for). */
static gr_shape random_target(gt_rng *r, int64_t n, gr_shape *resolved) {
  int rank = (int)gt_int(r, n == 1 ? 0 : 1, 4);
  gr_shape t = gr_shape_make(rank, NULL);
  int64_t left = n;
  for (int i = 0; i < rank - 1; i++) {
    if (left == 0) {
      t.dims[i] = gt_int(r, 0, 3);
      continue;
    }
    int64_t divs[64], nd = 0;
    for (int64_t d = 1; d <= left && nd < 64; d++)
      if (left % d == 0) divs[nd++] = d;
    t.dims[i] = divs[gt_int(r, 0, nd - 1)];
    left /= t.dims[i];
  }
  if (rank > 0) t.dims[rank - 1] = left;
  *resolved = t;
  /* -1 is only unambiguous when the other dims have a non-zero product */
  if (rank > 0 && gt_next(r) % 2) {
    int i = (int)gt_int(r, 0, rank - 1);
    int64_t others = 1;
    for (int k = 0; k < rank; k++)
      if (k != i) others *= t.dims[k];
    if (others != 0) t.dims[i] = -1;
  }
  /* shuffle the dims */
  for (int i = rank - 1; i > 0; i--) {
    int j = (int)gt_int(r, 0, i);
    int64_t a = t.dims[i], b = resolved->dims[i];
    t.dims[i] = t.dims[j];
    resolved->dims[i] = resolved->dims[j];
    t.dims[j] = a;
    resolved->dims[j] = b;
  }
  return t;
}

static void test_reshape_random(void) {
  gt_rng r = {11};
  int failures = 0;
  for (int c = 0; c < 200; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    gr_shape s = shape_with_zeros(&r, (int)gt_int(&r, 0, 4), 4), want_shape;
    gr_tensor x = random_tensor(&r, dt, s), out;
    gr_shape t = random_target(&r, gr_tensor_num_elements(&x), &want_shape);
    gr_attr a = gr_attr_shape("shape", t);
    gr_error err;
    gr_status st = run_on_const("reshape", &x, &a, 1, &out, &err);
    GR_CHECK_OK(st, err);
    gr_tensor want;
    gr_tensor_reshape(&x, &want_shape, &want, &err);
    bool ok =
        st == GR_OK && gt_bit_equal(&out, &want) && out.buf == x.buf && out.offset == x.offset;
    if (!ok) {
      char b1[GR_SHAPE_STR_MAX], b2[GR_SHAPE_STR_MAX];
      fprintf(stderr, "  reshape %s -> %s (shared %d)\n", gr_shape_str(&s, b1),
              gr_shape_str(&want_shape, b2), out.buf == x.buf);
      failures++;
    }
    gr_tensor_release(&want);
    gr_tensor_release(&out);
    gr_tensor_release(&x);
  }
  GR_CHECK_EQ_INT(failures, 0);
}

static void test_reshape_shapes_and_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){2, 6}));
  gr_output u = gr_placeholder(g, "u", GR_I32, gr_shape_make(2, (int64_t[]){-1, 6}));
  gr_output e = gr_placeholder(g, "e", GR_F32, gr_shape_make(2, (int64_t[]){0, 3}));
  check_shape(gr_reshape(g, x, gr_shape_make(2, (int64_t[]){-1, 4})), GR_F32,
              gr_shape_make(2, (int64_t[]){3, 4}));
  check_shape(gr_reshape(g, x, gr_shape_make(1, (int64_t[]){12})), GR_F32,
              gr_shape_make(1, (int64_t[]){12}));
  check_shape(gr_reshape(g, u, gr_shape_make(3, (int64_t[]){-1, 2, 3})), GR_I32,
              gr_shape_make(3, (int64_t[]){-1, 2, 3}));
  check_shape(gr_reshape(g, u, gr_shape_make(2, (int64_t[]){4, 5})), GR_I32,
              gr_shape_make(2, (int64_t[]){4, 5}));
  check_shape(gr_reshape(g, e, gr_shape_make(2, (int64_t[]){5, 0})), GR_F32,
              gr_shape_make(2, (int64_t[]){5, 0}));
  GR_CHECK(gr_graph_error(g) == NULL);
  /* 0 elements into [5, 0, -1] is ambiguous */
  expect_build_error(gr_reshape(g, e, gr_shape_make(3, (int64_t[]){5, 0, -1})), g, GR_ERR_SHAPE,
                     "cannot reshape 0 elements into [5, 0, -1]");
  expect_build_error(gr_reshape(g, x, gr_shape_make(1, (int64_t[]){13})), g, GR_ERR_SHAPE,
                     "cannot reshape 12 elements into [13]");
  expect_build_error(gr_reshape(g, x, gr_shape_make(2, (int64_t[]){-1, 5})), g, GR_ERR_SHAPE,
                     "[-1, 5]");
  expect_build_error(gr_reshape(g, x, gr_shape_make(2, (int64_t[]){-1, -1})), g,
                     GR_ERR_INVALID_ARGUMENT, "more than one -1");
  expect_build_error(gr_reshape(g, x, gr_shape_make(2, (int64_t[]){-2, 6})), g,
                     GR_ERR_INVALID_ARGUMENT, "negative");
  expect_build_error(gr_reshape(g, x, gr_shape_unknown()), g, GR_ERR_INVALID_ARGUMENT,
                     "known rank");
  expect_build_error(gr_op(g, "reshape", NULL, &x, 1, NULL, 0), g, GR_ERR_INVALID_ARGUMENT,
                     "shape");
  gr_graph_free(g);
  /* caught by the kernel when the input shape is unknown at build time */
  gt_rng r = {1};
  gr_tensor t = random_tensor(&r, GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_attr a = gr_attr_shape("shape", gr_shape_make(2, (int64_t[]){-1, 4}));
  expect_run_error("reshape", &t, true, &a, 1, GR_ERR_SHAPE, "cannot reshape 6 elements");
  gr_attr b = gr_attr_shape("shape", gr_shape_make(1, (int64_t[]){7}));
  expect_run_error("reshape", &t, false, &b, 1, GR_ERR_SHAPE, "[7]");
  gr_tensor_release(&t);
}

/* ---- transpose ------------------------------------------------------------------- */

static gr_tensor ref_transpose(const gr_tensor *x, const int *perm) {
  int rank = x->shape.rank;
  gr_shape os = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) os.dims[i] = x->shape.dims[perm[i]];
  gr_tensor out = gt_zeros(x->dtype, os);
  int64_t n = gr_tensor_num_elements(&out), st[GR_MAX_RANK], oi[GR_MAX_RANK];
  size_t es = gr_dtype_size(x->dtype);
  gt_strides(&x->shape, st);
  for (int64_t o = 0; o < n; o++) {
    gt_unravel(&os, o, oi);
    int64_t src = 0;
    for (int i = 0; i < rank; i++) src += oi[i] * st[perm[i]];
    memcpy((char *)gr_tensor_data(&out) + o * (int64_t)es,
           (const char *)gr_tensor_data(x) + src * (int64_t)es, es);
  }
  return out;
}

/* Runs transpose with perm (n entries, as passed; empty = reverse) and
 * compares with the reference; returns success. */
static bool check_transpose(const gr_tensor *x, const int64_t *perm, int n) {
  int rank = x->shape.rank, p[GR_MAX_RANK];
  for (int i = 0; i < rank; i++)
    p[i] = n ? (int)(perm[i] < 0 ? perm[i] + rank : perm[i]) : rank - 1 - i;
  gr_tensor want = ref_transpose(x, p), out;
  gr_attr a = gr_attr_ints("perm", n, perm);
  gr_error err;
  gr_status st = gt_run1("transpose", x, &a, 1, &out, &err);
  GR_CHECK_OK(st, err);
  bool ok = st == GR_OK && gt_bit_equal(&out, &want);
  if (!ok) {
    char b[GR_SHAPE_STR_MAX];
    fprintf(stderr, "  transpose %s %s perm", gr_dtype_name(x->dtype), gr_shape_str(&x->shape, b));
    for (int i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)perm[i]);
    fprintf(stderr, "\n");
  }
  gr_tensor_release(&want);
  gr_tensor_release(&out);
  return ok;
}

static void test_transpose_random(void) {
  gt_rng r = {23};
  int failures = 0;
  for (int c = 0; c < 300; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    int rank = (int)gt_int(&r, 0, 5);
    gr_shape s = shape_with_zeros(&r, rank, 5);
    int64_t perm[GR_MAX_RANK];
    for (int i = 0; i < rank; i++) perm[i] = i;
    for (int i = rank - 1; i > 0; i--) {
      int j = (int)gt_int(&r, 0, i);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    for (int i = 0; i < rank; i++)
      if (gt_next(&r) % 3 == 0) perm[i] -= rank;
    int n = gt_next(&r) % 5 == 0 ? 0 : rank;
    gr_tensor x = random_tensor(&r, dt, s);
    if (!check_transpose(&x, perm, n)) failures++;
    gr_tensor_release(&x);
  }
  GR_CHECK_EQ_INT(failures, 0);
}

/* Matrices and batches larger than a tile, and shapes that simplify to them. */
static void test_transpose_large(void) {
  gt_rng r = {29};
  struct {
    int rank;
    int64_t dims[4];
    int64_t perm[4];
  } cases[] = {
      {2, {130, 67}, {1, 0}},
      {2, {1, 200}, {1, 0}},
      {3, {3, 65, 33}, {0, 2, 1}},
      {4, {2, 3, 4, 5}, {3, 1, 0, 2}},
      {4, {1, 50, 1, 70}, {3, 2, 1, 0}},
      {3, {4, 5, 6}, {1, 2, 0}},
      {3, {40, 6, 35}, {2, 0, 1}},
      {4, {7, 9, 33, 2}, {0, 2, 1, 3}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 6; d++) {
      gr_tensor x = random_tensor(&r, all_dtypes[d], gr_shape_make(cases[c].rank, cases[c].dims));
      GR_CHECK_MSG(check_transpose(&x, cases[c].perm, cases[c].rank), "case %zu", c);
      gr_tensor_release(&x);
    }
}

/* A permutation that moves no data gives a view; one that does, a copy. */
static void test_transpose_views(void) {
  gt_rng r = {31};
  struct {
    int rank;
    int64_t dims[3];
    int64_t perm[3];
    bool view;
  } cases[] = {
      {2, {3, 4}, {0, 1}, true},        {2, {1, 5}, {1, 0}, true},  {3, {4, 1, 5}, {1, 0, 2}, true},
      {3, {4, 1, 5}, {2, 1, 0}, false}, {2, {3, 4}, {1, 0}, false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gr_tensor x = random_tensor(&r, GR_F32, gr_shape_make(cases[c].rank, cases[c].dims)), out;
    gr_attr a = gr_attr_ints("perm", cases[c].rank, cases[c].perm);
    gr_error err;
    GR_CHECK_OK(run_on_const("transpose", &x, &a, 1, &out, &err), err);
    GR_CHECK_MSG((out.buf == x.buf) == cases[c].view, "case %zu", c);
    int p[3];
    for (int i = 0; i < cases[c].rank; i++) p[i] = (int)cases[c].perm[i];
    gr_tensor want = ref_transpose(&x, p);
    GR_CHECK(gt_bit_equal(&out, &want));
    gr_tensor_release(&want);
    gr_tensor_release(&out);
    gr_tensor_release(&x);
  }
}

static void test_transpose_shapes_and_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(3, (int64_t[]){2, -1, 4}));
  gr_output u = gr_placeholder(g, "u", GR_BOOL, gr_shape_unknown());
  check_shape(gr_transpose(g, x, NULL, 0), GR_F32, gr_shape_make(3, (int64_t[]){4, -1, 2}));
  check_shape(gr_transpose(g, x, (int64_t[]){-2, 0, 2}, 3), GR_F32,
              gr_shape_make(3, (int64_t[]){-1, 2, 4}));
  check_shape(gr_transpose(g, u, NULL, 0), GR_BOOL, gr_shape_unknown());
  check_shape(gr_transpose(g, u, (int64_t[]){1, 0}, 2), GR_BOOL,
              gr_shape_make(2, (int64_t[]){-1, -1}));
  GR_CHECK(gr_graph_error(g) == NULL);
  expect_build_error(gr_transpose(g, x, (int64_t[]){0, 1, 1}, 3), g, GR_ERR_INVALID_ARGUMENT,
                     "not a permutation");
  expect_build_error(gr_transpose(g, x, (int64_t[]){0, -3, 2}, 3), g, GR_ERR_INVALID_ARGUMENT,
                     "not a permutation");
  expect_build_error(gr_transpose(g, x, (int64_t[]){1, 0}, 2), g, GR_ERR_INVALID_ARGUMENT,
                     "2 entries for rank 3");
  expect_build_error(gr_transpose(g, x, (int64_t[]){0, 1, 3}, 3), g, GR_ERR_OUT_OF_RANGE, "axis 3");
  expect_build_error(gr_transpose(g, u, (int64_t[]){0, 2}, 2), g, GR_ERR_OUT_OF_RANGE, "axis 2");
  gr_graph_free(g);
  gt_rng r = {2};
  gr_tensor t = random_tensor(&r, GR_F64, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_attr a = gr_attr_ints("perm", 3, (int64_t[]){2, 0, 1});
  expect_run_error("transpose", &t, false, &a, 1, GR_ERR_INVALID_ARGUMENT, "3 entries for rank 2");
  gr_tensor_release(&t);
}

/* ---- expand_dims, squeeze ------------------------------------------------------------ */

static void test_expand_dims(void) {
  gt_rng r = {37};
  int failures = 0;
  for (int c = 0; c < 100; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    int rank = (int)gt_int(&r, 0, 4);
    gr_shape s = shape_with_zeros(&r, rank, 4);
    int64_t axis = gt_int(&r, -rank - 1, rank);
    int ax = (int)(axis < 0 ? axis + rank + 1 : axis);
    gr_shape ws = gr_shape_make(rank + 1, NULL);
    for (int i = 0, j = 0; i <= rank; i++) ws.dims[i] = i == ax ? 1 : s.dims[j++];
    gr_tensor x = random_tensor(&r, dt, s);
    gr_attr a = gr_attr_int("axis", axis);
    if (!view_ok("expand_dims", &x, ws, &a)) failures++;
    gr_tensor_release(&x);
  }
  GR_CHECK_EQ_INT(failures, 0);
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_I32, gr_shape_make(2, (int64_t[]){-1, 3}));
  gr_output u = gr_placeholder(g, "u", GR_I32, gr_shape_unknown());
  gr_output big = gr_placeholder(g, "big", GR_I32, gt_random_shape(&(gt_rng){1}, 8, 1));
  check_shape(gr_expand_dims(g, x, -1), GR_I32, gr_shape_make(3, (int64_t[]){-1, 3, 1}));
  check_shape(gr_expand_dims(g, x, -3), GR_I32, gr_shape_make(3, (int64_t[]){1, -1, 3}));
  check_shape(gr_expand_dims(g, x, 1), GR_I32, gr_shape_make(3, (int64_t[]){-1, 1, 3}));
  check_shape(gr_expand_dims(g, u, 5), GR_I32, gr_shape_unknown());
  expect_build_error(gr_expand_dims(g, x, 3), g, GR_ERR_OUT_OF_RANGE, "axis 3");
  expect_build_error(gr_expand_dims(g, x, -4), g, GR_ERR_OUT_OF_RANGE, "axis -4");
  expect_build_error(gr_expand_dims(g, big, 0), g, GR_ERR_SHAPE, "maximum rank");
  gr_graph_free(g);
  gr_tensor t = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){2}));
  gr_attr a = gr_attr_int("axis", 3);
  expect_run_error("expand_dims", &t, false, &a, 1, GR_ERR_OUT_OF_RANGE, "axis 3");
  gr_tensor_release(&t);
}

static void test_squeeze(void) {
  gt_rng r = {41};
  int failures = 0;
  for (int c = 0; c < 150; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    int rank = (int)gt_int(&r, 0, 5);
    gr_shape s = shape_with_zeros(&r, rank, 3);
    for (int i = 0; i < rank; i++)
      if (gt_next(&r) % 2) s.dims[i] = 1;
    /* axes: every size-1 dim (empty list) or a random subset of them */
    int64_t axes[GR_MAX_RANK];
    int n = 0;
    bool drop[GR_MAX_RANK] = {false}, all = gt_next(&r) % 3 == 0;
    for (int i = 0; i < rank; i++)
      if (s.dims[i] == 1 && (all || gt_next(&r) % 2)) {
        drop[i] = true;
        if (!all) axes[n++] = gt_next(&r) % 2 ? i - rank : i;
      }
    if (!all && n == 0) /* an empty list would mean all: drop everything of size 1 */
      for (int i = 0; i < rank; i++) drop[i] = s.dims[i] == 1;
    gr_shape ws = gr_shape_make(0, NULL);
    for (int i = 0; i < rank; i++)
      if (!drop[i]) ws.dims[ws.rank++] = s.dims[i];
    gr_tensor x = random_tensor(&r, dt, s);
    gr_attr a = gr_attr_ints("axes", n, axes);
    if (!view_ok("squeeze", &x, ws, &a)) failures++;
    gr_tensor_release(&x);
  }
  GR_CHECK_EQ_INT(failures, 0);
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_U8, gr_shape_make(4, (int64_t[]){2, 1, 3, 1}));
  gr_output p = gr_placeholder(g, "p", GR_U8, gr_shape_make(3, (int64_t[]){-1, 1, 3}));
  check_shape(gr_squeeze(g, x, NULL, 0), GR_U8, gr_shape_make(2, (int64_t[]){2, 3}));
  check_shape(gr_squeeze(g, x, (int64_t[]){-1}, 1), GR_U8, gr_shape_make(3, (int64_t[]){2, 1, 3}));
  check_shape(gr_squeeze(g, p, NULL, 0), GR_U8, gr_shape_unknown());
  check_shape(gr_squeeze(g, p, (int64_t[]){0, 1}, 2), GR_U8, gr_shape_make(1, (int64_t[]){3}));
  GR_CHECK(gr_graph_error(g) == NULL);
  expect_build_error(gr_squeeze(g, x, (int64_t[]){0}, 1), g, GR_ERR_SHAPE, "size 2 is not 1");
  expect_build_error(gr_squeeze(g, x, (int64_t[]){4}, 1), g, GR_ERR_OUT_OF_RANGE, "axis 4");
  expect_build_error(gr_squeeze(g, x, (int64_t[]){1, -3}, 2), g, GR_ERR_INVALID_ARGUMENT, "twice");
  gr_graph_free(g);
  gr_tensor t = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 1}));
  gr_attr a = gr_attr_ints("axes", 1, (int64_t[]){0});
  expect_run_error("squeeze", &t, true, &a, 1, GR_ERR_SHAPE, "size 2 is not 1");
  gr_tensor_release(&t);
}

/* ---- shape ------------------------------------------------------------------------------ */

static void test_shape_op(void) {
  gt_rng r = {43};
  for (int c = 0; c < 40; c++) {
    int rank = (int)gt_int(&r, 0, 6);
    gr_shape s = shape_with_zeros(&r, rank, 4);
    gr_tensor x = random_tensor(&r, all_dtypes[c % 6], s), out;
    double dims[GR_MAX_RANK];
    for (int i = 0; i < rank; i++) dims[i] = (double)s.dims[i];
    gr_tensor want = gt_make(GR_I64, gr_shape_make(1, (int64_t[]){rank}), dims);
    gr_error err;
    gr_status st = gt_run1_unknown("shape", &x, c % 2, NULL, 0, &out, &err);
    GR_CHECK_OK(st, err);
    GR_CHECK(st == GR_OK && gt_bit_equal(&out, &want));
    gr_tensor_release(&out);
    gr_tensor_release(&want);
    gr_tensor_release(&x);
  }
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_BOOL, gr_shape_make(3, (int64_t[]){-1, 2, 5}));
  gr_output u = gr_placeholder(g, "u", GR_F64, gr_shape_unknown());
  check_shape(gr_shape_of(g, x), GR_I64, gr_shape_make(1, (int64_t[]){3}));
  check_shape(gr_shape_of(g, u), GR_I64, gr_shape_make(1, (int64_t[]){-1}));
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_graph_free(g);
}

/* ---- fill, zeros_like, ones_like -------------------------------------------------------- */

/* Runs the one output o of g and compares it with want. */
static void expect_graph_value(gr_graph *g, gr_output o, const gr_tensor *want) {
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  gr_tensor out;
  gr_status st = gr_session_run(s, NULL, 0, &o, 1, &out, NULL, 0, &err);
  GR_CHECK_OK(st, err);
  if (st == GR_OK) {
    GR_CHECK(gt_bit_equal(&out, want));
    gr_tensor_release(&out);
  }
  gr_session_free(s);
}

static gr_tensor constant_tensor(gr_dtype dt, gr_shape s, double v) {
  gr_tensor t = gt_zeros(dt, s);
  for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++) gr_tensor_set_f64(&t, i, v);
  return t;
}

static void test_fill(void) {
  gt_rng r = {47};
  for (int c = 0; c < 60; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    gr_shape s = shape_with_zeros(&r, (int)gt_int(&r, 0, 3), 5);
    double v = dt == GR_U8             ? 200.9
               : dt == GR_BOOL         ? (c % 4 == 1)
               : gr_dtype_is_float(dt) ? 2.5
                                       : -7.8;
    gr_graph *g = gr_graph_new();
    gr_output o = c % 3 == 0   ? gr_zeros(g, dt, s)
                  : c % 3 == 1 ? gr_ones(g, dt, s)
                               : gr_fill(g, dt, s, v);
    double wv = c % 3 == 0 ? 0 : c % 3 == 1 ? 1 : gr_dtype_is_float(dt) ? v : trunc(v);
    gr_tensor want = constant_tensor(dt, s, wv);
    check_shape(o, dt, s);
    if (o.node) expect_graph_value(g, o, &want);
    gr_tensor_release(&want);
    gr_graph_free(g);
  }
  gr_graph *g = gr_graph_new();
  expect_build_error(gr_fill(g, GR_F32, gr_shape_make(2, (int64_t[]){-1, 3}), 1), g, GR_ERR_SHAPE,
                     "fully known");
  expect_build_error(gr_zeros(g, GR_F32, gr_shape_unknown()), g, GR_ERR_SHAPE, "fully known");
  expect_build_error(gr_fill(g, GR_U8, gr_shape_scalar(), 256), g, GR_ERR_OUT_OF_RANGE, "u8");
  expect_build_error(gr_fill(g, GR_U8, gr_shape_scalar(), -1), g, GR_ERR_OUT_OF_RANGE, "u8");
  expect_build_error(gr_fill(g, GR_I32, gr_shape_scalar(), 3e9), g, GR_ERR_OUT_OF_RANGE, "i32");
  expect_build_error(gr_fill(g, GR_I64, gr_shape_scalar(), NAN), g, GR_ERR_OUT_OF_RANGE, "i64");
  expect_build_error(gr_fill(g, GR_I64, gr_shape_scalar(), 1e19), g, GR_ERR_OUT_OF_RANGE, "i64");
  expect_build_error(gr_op(g, "fill", NULL, NULL, 0, NULL, 0), g, GR_ERR_INVALID_ARGUMENT, "shape");
  gr_graph_free(g);
}

static void test_like(void) {
  gt_rng r = {53};
  for (int c = 0; c < 60; c++) {
    gr_dtype dt = all_dtypes[c % 6];
    gr_shape s = shape_with_zeros(&r, (int)gt_int(&r, 0, 4), 4);
    gr_tensor x = random_tensor(&r, dt, s), keep, out;
    gr_error err;
    gr_tensor_copy(&x, &keep, &err);
    bool ones = c % 2;
    gr_tensor want = constant_tensor(dt, s, ones);
    gr_status st = gt_run1(ones ? "ones_like" : "zeros_like", &x, NULL, 0, &out, &err);
    GR_CHECK_OK(st, err);
    GR_CHECK(st == GR_OK && gt_bit_equal(&out, &want));
    GR_CHECK(gt_bit_equal(&x, &keep)); /* the caller's tensor is untouched */
    gr_tensor_release(&out);
    gr_tensor_release(&want);
    gr_tensor_release(&keep);
    gr_tensor_release(&x);
  }
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_I64, gr_shape_make(2, (int64_t[]){-1, 7}));
  check_shape(gr_zeros_like(g, x), GR_I64, gr_shape_make(2, (int64_t[]){-1, 7}));
  check_shape(gr_ones_like(g, x), GR_I64, gr_shape_make(2, (int64_t[]){-1, 7}));
  /* chained on a computed value: may run in place, still right */
  gr_output c =
      gr_ones_like(g, gr_zeros_like(g, gr_fill(g, GR_F32, gr_shape_make(1, (int64_t[]){5}), 3)));
  gr_tensor want = constant_tensor(GR_F32, gr_shape_make(1, (int64_t[]){5}), 1);
  expect_graph_value(g, c, &want);
  gr_tensor_release(&want);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_reshape_random);
  GR_RUN(test_reshape_shapes_and_errors);
  GR_RUN(test_transpose_random);
  GR_RUN(test_transpose_large);
  GR_RUN(test_transpose_views);
  GR_RUN(test_transpose_shapes_and_errors);
  GR_RUN(test_expand_dims);
  GR_RUN(test_squeeze);
  GR_RUN(test_shape_op);
  GR_RUN(test_fill);
  GR_RUN(test_like);
  return gr_test_finish();
}
