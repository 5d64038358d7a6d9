/* Tests of variables (ops/state.c) through sessions: values persist across
 * runs and are per session, auto-initialisation (and no_auto_init), assign,
 * assign_add and assign_sub on every numeric dtype against a double / exact
 * reference, copy-on-write, and the build and run errors. */
#include <math.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static gr_session *new_session(gr_graph *g, bool no_auto_init) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = 2, .no_auto_init = no_auto_init};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  return s;
}

/* Runs one fetch (or target when out is NULL); returns the status. */
static gr_status run1(gr_session *s, gr_output fetch, gr_tensor *out, gr_error *err) {
  if (!out) return gr_session_run(s, NULL, 0, NULL, 0, NULL, &fetch, 1, err);
  return gr_session_run(s, NULL, 0, &fetch, 1, out, NULL, 0, err);
}

static gr_tensor fetch(gr_session *s, gr_output o) {
  gr_tensor t = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(run1(s, o, &t, &err), err);
  return t;
}

static bool same_bytes(const gr_tensor *a, const gr_tensor *b) {
  return a->buf && b->buf && gr_tensor_num_bytes(a) == gr_tensor_num_bytes(b) &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a)) == 0;
}

static gr_tensor copy_of(const gr_tensor *t) {
  gr_tensor c = gr_tensor_empty();
  gr_error e;
  if (t->buf) gr_tensor_copy(t, &c, &e);
  return c;
}

/* ---- persistence and arithmetic ---------------------------------------------------- */

/* v0 + sum of signed deltas, wrapped to the dtype like the kernel (exact for
 * integers: values stay small enough for doubles). */
static double wrap_to(gr_dtype dt, double v) {
  if (dt == GR_U8) return fmod(fmod(v, 256) + 256, 256);
  if (dt == GR_I32) {
    double m = fmod(v, 4294967296.0);
    if (m < 0) m += 4294967296.0;
    return m >= 2147483648.0 ? m - 4294967296.0 : m;
  }
  return v;
}

static void test_updates_all_dtypes(void) {
  const gr_dtype dts[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8};
  gt_rng r = {31};
  for (int d = 0; d < 5; d++)
    for (int c = 0; c < 4; c++) {
      gr_dtype dt = dts[d];
      gr_shape sh = gt_random_shape(&r, (int)gt_int(&r, 0, 3), 6);
      double lo = dt == GR_U8 ? 0 : -50, hi = 50;
      gr_tensor init = gt_random(&r, dt, sh, lo, hi), add = gt_random(&r, dt, sh, lo, hi);
      gr_tensor sub = gt_random(&r, dt, sh, lo, hi), put = gt_random(&r, dt, sh, lo, hi);
      gr_graph *g = gr_graph_new();
      gr_output w = gr_variable(g, "w", gr_const(g, &init));
      gr_output ua = gr_assign_add(g, w, gr_const(g, &add));
      gr_output us = gr_assign_sub(g, w, gr_const(g, &sub));
      gr_output as = gr_assign(g, w, gr_const(g, &put));
      GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g)->msg);
      gr_session *s = new_session(g, false);
      if (!s) return;
      int64_t n = gr_tensor_num_elements(&init);
      gr_tensor want = copy_of(&init);
      gr_tensor got = fetch(s, w); /* auto-initialised */
      GR_CHECK(gt_equal(&got, &want));
      gr_tensor_release(&got);
      /* a random sequence of updates, each checked through its output and a read */
      for (int step = 0; step < 6; step++) {
        int which = (int)gt_int(&r, 0, 2);
        gr_output op = which == 0 ? ua : which == 1 ? us : as;
        for (int64_t i = 0; i < n; i++) {
          double v = gr_tensor_get_f64(&want, i);
          if (which == 0) v += gr_tensor_get_f64(&add, i);
          if (which == 1) v -= gr_tensor_get_f64(&sub, i);
          if (which == 2) v = gr_tensor_get_f64(&put, i);
          gr_tensor_set_f64(&want, i, dt == GR_F32 ? (float)v : wrap_to(dt, v));
        }
        gr_tensor res = fetch(s, op), read = fetch(s, w);
        GR_CHECK_MSG(gt_equal(&res, &want), "%s update %d", gr_dtype_name(dt), which);
        GR_CHECK_MSG(gt_equal(&read, &want), "%s read after %d", gr_dtype_name(dt), which);
        gr_tensor_release(&res);
        gr_tensor_release(&read);
      }
      /* a new session has its own variables, initialised afresh */
      gr_session *s2 = new_session(g, false);
      got = fetch(s2, w);
      GR_CHECK(gt_equal(&got, &init));
      gr_tensor_release(&got);
      gr_session_free(s2);
      gr_session_free(s);
      gr_graph_free(g);
      gr_tensor_release(&init);
      gr_tensor_release(&add);
      gr_tensor_release(&sub);
      gr_tensor_release(&put);
      gr_tensor_release(&want);
    }
}

static void test_wraparound(void) {
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const_i32(g, INT32_MAX));
  gr_output up = gr_assign_add(g, w, gr_const_i32(g, 1));
  gr_output down = gr_assign_sub(g, w, gr_const_i32(g, 1));
  gr_output l = gr_variable(g, "l", gr_const_i64(g, INT64_MIN));
  gr_output ldown = gr_assign_sub(g, l, gr_const_i64(g, 1));
  uint8_t u0 = 250, u1 = 10;
  gr_output u = gr_variable(g, "u", gr_const_data(g, GR_U8, gr_shape_scalar(), &u0));
  gr_output uup = gr_assign_add(g, u, gr_const_data(g, GR_U8, gr_shape_scalar(), &u1));
  GR_CHECK(!gr_graph_error(g));
  gr_session *s = new_session(g, false);
  if (!s) return;
  gr_tensor t = fetch(s, up);
  if (t.buf) GR_CHECK_EQ_INT(*(int32_t *)gr_tensor_data(&t), INT32_MIN);
  gr_tensor_release(&t);
  t = fetch(s, down);
  if (t.buf) GR_CHECK_EQ_INT(*(int32_t *)gr_tensor_data(&t), INT32_MAX);
  gr_tensor_release(&t);
  t = fetch(s, ldown);
  if (t.buf) GR_CHECK(*(int64_t *)gr_tensor_data(&t) == INT64_MAX);
  gr_tensor_release(&t);
  t = fetch(s, uup);
  if (t.buf) GR_CHECK_EQ_INT(*(uint8_t *)gr_tensor_data(&t), 4);
  gr_tensor_release(&t);
  gr_session_free(s);
  gr_graph_free(g);
}

/* Values persist across runs; the update's output is the new value. */
static void test_persistence_counter(void) {
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "counter", gr_const_f64(g, 10));
  gr_output inc = gr_assign_add(g, w, gr_const_f64(g, 0.5));
  gr_session *s = new_session(g, false);
  if (!s) return;
  gr_error err;
  for (int i = 0; i < 20; i++) GR_CHECK_OK(run1(s, inc, NULL, &err), err);
  gr_tensor t = fetch(s, w);
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 20.0, 0);
  gr_tensor_release(&t);
  gr_session_free(s);
  gr_graph_free(g);
}

/* An initial value computed from another variable: initialised in order. */
static void test_dependent_init(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_variable(g, "a", gr_const_f32(g, 3));
  gr_output b = gr_variable(g, "b", gr_mul(g, a, gr_const_f32(g, 2)));
  gr_session *s = new_session(g, false);
  if (!s) return;
  gr_tensor t = fetch(s, b);
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 6, 0);
  gr_tensor_release(&t);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- initialisation ---------------------------------------------------------------- */

static void test_no_auto_init(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_name_scope(g, "layer1");
  gr_output w = gr_variable(g, "kernel", gr_const_f32(g, 1.5));
  gr_graph_pop_name_scope(g);
  gr_output inc = gr_assign_add(g, w, gr_const_f32(g, 1));
  GR_CHECK(!gr_graph_error(g));
  if (gr_graph_error(g)) return;
  GR_CHECK(strcmp(w.node->name, "layer1/kernel") == 0);
  gr_session *s = new_session(g, true);
  if (!s) return;
  gr_tensor t;
  gr_error err;
  GR_CHECK_EQ_INT(run1(s, w, &t, &err), GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "'layer1/kernel'");
  GR_CHECK_STR_CONTAINS(err.msg, "not initialised");
  GR_CHECK_EQ_INT(run1(s, inc, NULL, &err), GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "'layer1/kernel'");
  /* running the initialiser node by hand, then everything works */
  gr_node *init = gr_graph_find_node(g, "layer1/kernel/init");
  GR_CHECK(init != NULL);
  if (init) GR_CHECK_OK(run1(s, (gr_output){init, 0}, NULL, &err), err);
  t = fetch(s, inc);
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 2.5, 0);
  gr_tensor_release(&t);
  gr_session_free(s);
  /* or gr_session_init_variables */
  s = new_session(g, true);
  GR_CHECK_OK(gr_session_init_variables(s, &err), err);
  t = fetch(s, w);
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 1.5, 0);
  gr_tensor_release(&t);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- copy-on-write ------------------------------------------------------------------ */

static void test_copy_on_write(void) {
  gt_rng r = {8};
  gr_shape sh = gr_shape_make(2, (int64_t[]){4, 5});
  gr_tensor init = gt_random(&r, GR_F32, sh, -1, 1), delta = gt_random(&r, GR_F32, sh, -1, 1);
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const(g, &init));
  gr_output add = gr_assign_add(g, w, gr_const(g, &delta));
  gr_output sub = gr_assign_sub(g, w, gr_const(g, &delta));
  gr_session *s = new_session(g, false);
  if (!s) return;
  /* a fetched value does not change under later updates */
  gr_tensor before = fetch(s, w), keep = copy_of(&before);
  gr_tensor after_add = fetch(s, add), keep_add = copy_of(&after_add);
  gr_tensor after_sub = fetch(s, sub);
  GR_CHECK(same_bytes(&before, &keep));
  GR_CHECK(same_bytes(&after_add, &keep_add));
  GR_CHECK(!same_bytes(&before, &after_add));
  for (int i = 0; i < 20; i++)
    GR_CHECK_NEAR(gr_tensor_get_f64(&after_add, i),
                  (float)(gr_tensor_get_f64(&init, i) + gr_tensor_get_f64(&delta, i)), 0);
  /* the constants the variable was built from are untouched too */
  gr_tensor c0 = gt_random(&(gt_rng){8}, GR_F32, sh, -1, 1);
  GR_CHECK(same_bytes(&init, &c0));
  gr_tensor_release(&c0);
  gr_tensor_release(&before);
  gr_tensor_release(&keep);
  gr_tensor_release(&after_add);
  gr_tensor_release(&keep_add);
  gr_tensor_release(&after_sub);
  /* within one step: a read ordered before the update sees the old value */
  gr_tensor cur = fetch(s, w);
  gr_output rd = gr_identity(g, w);
  gr_graph_push_control_deps(g, &rd, 1);
  gr_output add2 = gr_assign_add(g, w, gr_const(g, &delta));
  gr_graph_pop_control_deps(g);
  gr_output f[2] = {rd, add2};
  gr_tensor res[2];
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, f, 2, res, NULL, 0, &err), err);
  if (res[0].buf && res[1].buf) {
    GR_CHECK(same_bytes(&res[0], &cur));
    for (int i = 0; i < 20; i++)
      GR_CHECK_NEAR(gr_tensor_get_f64(&res[1], i),
                    (float)(gr_tensor_get_f64(&cur, i) + gr_tensor_get_f64(&delta, i)), 0);
  }
  gr_tensor_release(&res[0]);
  gr_tensor_release(&res[1]);
  gr_tensor_release(&cur);
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&init);
  gr_tensor_release(&delta);
}

/* assign from a fed tensor, then update: the caller's tensor is not written. */
static void test_assign_from_feed(void) {
  gr_shape sh = gr_shape_make(1, (int64_t[]){3});
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const_data(g, GR_F64, sh, (double[]){0, 0, 0}));
  gr_output p = gr_placeholder(g, "p", GR_F64, gr_shape_make(1, (int64_t[]){-1}));
  gr_output set = gr_assign(g, w, p);
  gr_output inc = gr_assign_add(g, w, gr_const_data(g, GR_F64, sh, (double[]){1, 1, 1}));
  GR_CHECK(!gr_graph_error(g));
  gr_session *s = new_session(g, false);
  if (!s) return;
  gr_tensor pv = gt_make(GR_F64, sh, (double[]){5, 6, 7}), out;
  gr_feed feed = {p, &pv};
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, &feed, 1, &set, 1, &out, NULL, 0, &err), err);
  gr_tensor_release(&out);
  gr_tensor t = fetch(s, inc);
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 2), 8, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&pv, 2), 7, 0);
  gr_tensor_release(&t);
  /* a fed value of the wrong runtime shape is an error naming the node */
  gr_tensor bad = gt_make(GR_F64, gr_shape_make(1, (int64_t[]){2}), (double[]){1, 2});
  feed.value = &bad;
  GR_CHECK_EQ_INT(gr_session_run(s, &feed, 1, &set, 1, &out, NULL, 0, &err), GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node '");
  GR_CHECK_STR_CONTAINS(err.msg, "'w'");
  t = fetch(s, w); /* unchanged by the failed assign */
  if (t.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&t, 0), 6, 0);
  gr_tensor_release(&t);
  gr_tensor_release(&bad);
  gr_tensor_release(&pv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* An intermediate consumed both by assign and by an elementwise op that may
 * run in place: the variable keeps the value assigned. */
static void test_shared_intermediate(void) {
  gr_shape sh = gr_shape_make(1, (int64_t[]){1000});
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_const_data(g, GR_F32, sh, (float[1000]){0}));
  gr_output p = gr_placeholder(g, "p", GR_F32, sh);
  gr_output x = gr_add(g, p, gr_const_f32(g, 1));
  gr_output set = gr_assign(g, w, x);
  gr_output z = gr_mul(g, gr_mul(g, x, gr_const_f32(g, 3)), gr_const_f32(g, 2));
  GR_CHECK(!gr_graph_error(g));
  gr_session *s = new_session(g, false);
  if (!s) return;
  gt_rng r = {3};
  gr_tensor pv = gt_random(&r, GR_F32, sh, -1, 1);
  gr_feed feed = {p, &pv};
  gr_error err;
  for (int rep = 0; rep < 10; rep++) {
    gr_tensor zv;
    GR_CHECK_OK(gr_session_run(s, &feed, 1, &z, 1, &zv, &set, 1, &err), err);
    gr_tensor wv = fetch(s, w);
    if (zv.buf && wv.buf)
      for (int i = 0; i < 1000; i++) {
        float xi = (float)gr_tensor_get_f64(&pv, i) + 1.0f;
        GR_CHECK_NEAR(gr_tensor_get_f64(&wv, i), xi, 0);
        GR_CHECK_NEAR(gr_tensor_get_f64(&zv, i), (xi * 3.0f) * 2.0f, 0);
      }
    gr_tensor_release(&zv);
    gr_tensor_release(&wv);
  }
  gr_tensor_release(&pv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- build errors ---------------------------------------------------------------------- */

static gr_output zeros_f32(gr_graph *g, gr_shape s) {
  const float z[64] = {0};
  return gr_const_data(g, GR_F32, s, z);
}

static void expect_graph_error(gr_graph *g, gr_output o, gr_status code, const char *s1,
                               const char *s2) {
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(o.node == NULL && e != NULL);
  if (e) {
    GR_CHECK_MSG(e->code == code, "%s: %s", gr_status_name(e->code), e->msg);
    GR_CHECK_STR_CONTAINS(e->msg, s1);
    GR_CHECK_STR_CONTAINS(e->msg, s2);
  }
}

static void test_build_errors(void) {
  gr_shape s23 = gr_shape_make(2, (int64_t[]){2, 3}), s32 = gr_shape_make(2, (int64_t[]){3, 2});
  typedef gr_output (*upd)(gr_graph *, gr_output, gr_output);
  const upd fns[] = {gr_assign, gr_assign_add, gr_assign_sub};
  for (int f = 0; f < 3; f++) {
    gr_graph *g = gr_graph_new();
    gr_output w = gr_variable(g, "w", zeros_f32(g, s23));
    expect_graph_error(g, fns[f](g, w, gr_placeholder(g, "x", GR_F64, s23)), GR_ERR_DTYPE, "node '",
                       "'w'");
    gr_graph_free(g);
    g = gr_graph_new();
    w = gr_variable(g, "w", zeros_f32(g, s23));
    expect_graph_error(g, fns[f](g, w, gr_placeholder(g, "x", GR_F32, s32)), GR_ERR_SHAPE, "[3, 2]",
                       "[2, 3]");
    gr_graph_free(g);
    g = gr_graph_new();
    w = gr_variable(g, "w", zeros_f32(g, s23));
    expect_graph_error(
        g, fns[f](g, w, gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){6}))),
        GR_ERR_SHAPE, "node '", "[6]");
    gr_graph_free(g);
    /* an update of something that is not a variable */
    g = gr_graph_new();
    gr_output c = gr_const_f32(g, 1);
    expect_graph_error(g, fns[f](g, c, gr_const_f32(g, 2)), GR_ERR_INVALID_ARGUMENT, "'const'",
                       "not a variable");
    gr_graph_free(g);
  }
  /* bool variables: assign yes, arithmetic updates no */
  gr_graph *g = gr_graph_new();
  bool tv = true;
  gr_output bv = gr_variable(g, "flag", gr_const_data(g, GR_BOOL, gr_shape_scalar(), &tv));
  GR_CHECK(gr_assign(g, bv, gr_const_data(g, GR_BOOL, gr_shape_scalar(), &tv)).node != NULL);
  expect_graph_error(g, gr_assign_add(g, bv, gr_const_data(g, GR_BOOL, gr_shape_scalar(), &tv)),
                     GR_ERR_DTYPE, "node '", "bool");
  gr_graph_free(g);
  /* duplicate variable names, also within a scope; other scopes are fine */
  g = gr_graph_new();
  gr_variable(g, "w", gr_const_f32(g, 1));
  expect_graph_error(g, gr_variable(g, "w", gr_const_f32(g, 2)), GR_ERR_ALREADY_EXISTS, "'w'",
                     "duplicate");
  gr_graph_free(g);
  g = gr_graph_new();
  gr_graph_push_name_scope(g, "a");
  gr_output v1 = gr_variable(g, "w", gr_const_f32(g, 1));
  gr_graph_pop_name_scope(g);
  gr_output v2 = gr_variable(g, "w", gr_const_f32(g, 1));
  GR_CHECK(v1.node && v2.node && !gr_graph_error(g));
  gr_graph_push_name_scope(g, "a");
  expect_graph_error(g, gr_variable(g, "w", gr_const_f32(g, 1)), GR_ERR_ALREADY_EXISTS, "'a/w'",
                     "duplicate");
  gr_graph_pop_name_scope(g);
  gr_graph_free(g);
  /* a node (not a variable) already named like the variable */
  g = gr_graph_new();
  gr_placeholder(g, "w", GR_F32, gr_shape_scalar());
  expect_graph_error(g, gr_variable(g, "w", gr_const_f32(g, 1)), GR_ERR_ALREADY_EXISTS, "'w'",
                     "duplicate");
  gr_graph_free(g);
  /* partly unknown initial value; missing name */
  g = gr_graph_new();
  expect_graph_error(
      g, gr_variable(g, "w", gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){-1}))),
      GR_ERR_SHAPE, "'w'", "[?]");
  gr_graph_free(g);
  g = gr_graph_new();
  expect_graph_error(g, gr_variable(g, "", gr_const_f32(g, 1)), GR_ERR_INVALID_ARGUMENT, "variable",
                     "name");
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_updates_all_dtypes);
  GR_RUN(test_wraparound);
  GR_RUN(test_persistence_counter);
  GR_RUN(test_dependent_init);
  GR_RUN(test_no_auto_init);
  GR_RUN(test_copy_on_write);
  GR_RUN(test_assign_from_feed);
  GR_RUN(test_shared_intermediate);
  GR_RUN(test_build_errors);
  return gr_test_finish();
}
