/* Control flow: while loops (loop invariants, nested loops, a million
 * iterations in flat memory, parallel iterations overlapping, errors naming
 * the iteration, shape checks), cond (side effects only in the taken branch,
 * nested conds, dead values), and gradients through cond. */
#include <graphrun.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static gr_session *session(gr_graph *g, int threads) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  return s;
}

static double fetch1(gr_session *s, const gr_feed *f, int nf, gr_output y, gr_status *st,
                     gr_error *err) {
  gr_tensor out;
  *st = gr_session_run(s, f, nf, &y, 1, &out, NULL, 0, err);
  if (*st != GR_OK) return NAN;
  double v = gr_tensor_get_f64(&out, 0);
  gr_tensor_release(&out);
  return v;
}

/* ---- while: i < limit; i += step (limit and step from outside: invariants) */
typedef struct counter {
  gr_output limit, step;
} counter;
static gr_output count_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], ((counter *)a)->limit);
}
static void count_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], ((counter *)a)->step);
  next[1] = gr_add(g, v[1], v[0]); /* acc += i */
}

static void test_while_basic(void) {
  gr_graph *g = gr_graph_new();
  counter c = {gr_placeholder(g, "limit", GR_I64, gr_shape_scalar()), gr_const_i64(g, 1)};
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_i64(g, 0)};
  GR_CHECK(gr_while_loop(g, count_cond, count_body, &c, 2, vars, 0) == GR_OK);
  for (int threads = 1; threads <= 2; threads++) {
    gr_session *s = session(g, threads);
    for (int64_t lim = 0; lim <= 100; lim += 25) {
      gr_tensor lv = gr_tensor_scalar_i64(lim), out[2];
      gr_feed f = {c.limit, &lv};
      gr_error err;
      GR_CHECK_OK(gr_session_run(s, &f, 1, vars, 2, out, NULL, 0, &err), err);
      GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[0], 0), lim);
      GR_CHECK_EQ_INT(gr_tensor_get_f64(&out[1], 0), lim * (lim - 1) / 2);
      gr_tensor_release(&out[0]);
      gr_tensor_release(&out[1]);
      gr_tensor_release(&lv);
    }
    gr_session_free(s);
  }
  gr_graph_free(g);
}

/* ---- Collatz: steps to reach 1 */
static gr_output collatz_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_greater(g, v[0], gr_const_i64(g, 1));
}
static void collatz_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  gr_output two = gr_const_i64(g, 2);
  gr_output even =
      gr_equal(g, gr_sub(g, v[0], gr_mul(g, gr_div(g, v[0], two), two)), gr_const_i64(g, 0));
  next[0] = gr_select(g, even, gr_div(g, v[0], two),
                      gr_add(g, gr_mul(g, v[0], gr_const_i64(g, 3)), gr_const_i64(g, 1)));
  next[1] = gr_add(g, v[1], gr_const_i64(g, 1));
}
static void test_collatz(void) {
  gr_graph *g = gr_graph_new();
  gr_output vars[2] = {gr_const_i64(g, 27), gr_const_i64(g, 0)};
  GR_CHECK(gr_while_loop(g, collatz_cond, collatz_body, NULL, 2, vars, 4) == GR_OK);
  gr_session *s = session(g, 2);
  gr_status st;
  gr_error err;
  GR_CHECK_EQ_INT(fetch1(s, NULL, 0, vars[1], &st, &err), 111);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- nested: for i < n: for j < i: total += 1   -> n (n - 1) / 2 */
static gr_output inner_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], v[2]);
}
static void inner_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_add(g, v[1], gr_const_i64(g, 1));
  next[2] = v[2];
}
static gr_output outer_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], *(gr_output *)a);
}
static void outer_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  gr_output in[3] = {gr_const_i64(g, 0), v[1], v[0]};
  gr_while_loop(g, inner_cond, inner_body, NULL, 3, in, 0);
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = in[1];
}
static void test_nested_while(void) {
  gr_graph *g = gr_graph_new();
  gr_output n = gr_placeholder(g, "n", GR_I64, gr_shape_scalar());
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_i64(g, 0)};
  GR_CHECK(gr_while_loop(g, outer_cond, outer_body, &n, 2, vars, 3) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = session(g, 2);
  for (int64_t k = 0; k <= 30; k += 10) {
    gr_tensor nv = gr_tensor_scalar_i64(k);
    gr_feed f = {n, &nv};
    gr_status st;
    gr_error err;
    double v = fetch1(s, &f, 1, vars[1], &st, &err);
    GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
    GR_CHECK_EQ_INT(v, k * (k - 1) / 2);
    gr_tensor_release(&nv);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- values from outside: returned by a body, used two loops deep */
typedef struct outside_arg {
  gr_output limit, far; /* far: from outside the outer loop */
} outside_arg;
static gr_output outside_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], ((outside_arg *)a)->limit);
}
/* the inner loop: v1 <- far (returned as is) */
static void outside_inner(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = ((outside_arg *)a)->far;
}
/* the outer loop: v1 <- v1 + (inner loop's v1) * far */
static void outside_outer(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  outside_arg *oa = a;
  gr_output in[2] = {gr_const_i64(g, 0), gr_const_f32(g, 0)};
  outside_arg ia = {gr_const_i64(g, 2), oa->far};
  GR_CHECK(gr_while_loop(g, outside_cond, outside_inner, &ia, 2, in, 0) == GR_OK);
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_add(g, v[1], gr_mul(g, in[1], oa->far));
}
static void test_values_from_outside(void) {
  gr_graph *g = gr_graph_new();
  gr_output far = gr_placeholder(g, "far", GR_F32, gr_shape_scalar());
  outside_arg oa = {gr_const_i64(g, 4), far};
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_f32(g, 1)};
  GR_CHECK(gr_while_loop(g, outside_cond, outside_outer, &oa, 2, vars, 0) == GR_OK);
  gr_session *s = session(g, 2);
  gr_tensor fv = gr_tensor_scalar_f32(3);
  gr_feed f = {far, &fv};
  gr_status st;
  gr_error err;
  double v = fetch1(s, &f, 1, vars[1], &st, &err); /* ends (the body's outside value is dead
                                                      when the loop ends) */
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  GR_CHECK(v == 1 + 4 * 3 * 3);
  gr_tensor_release(&fv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- a nested loop fed only by values from outside both loops: it runs once
 * per outer iteration and not again when the outer loop ends */
static gr_output far_inner_cond(gr_graph *g, void *a, const gr_output *v) {
  (void)a;
  return gr_less(g, v[0], gr_const_i64(g, 2));
}
static gr_output far_outer_cond(gr_graph *g, void *a, const gr_output *v) {
  (void)a;
  return gr_less(g, v[0], gr_const_i64(g, 3));
}
static void far_inner(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  (void)a;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_mul(g, v[1], gr_const_f32(g, 2));
}
static void far_outer(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  const gr_output *far = a; /* {z, w}: from outside the outer loop */
  gr_output in[2] = {far[0], far[1]};
  GR_CHECK(gr_while_loop(g, far_inner_cond, far_inner, NULL, 2, in, 0) == GR_OK);
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_add(g, v[1], gr_neg(g, in[1]));
}
static void test_nested_loop_from_outside(void) {
  gr_graph *g = gr_graph_new();
  gr_output far[2] = {gr_const_i64(g, 0), gr_const_f32(g, 1.5f)};
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_f32(g, 0)};
  GR_CHECK(gr_while_loop(g, far_outer_cond, far_outer, far, 2, vars, 0) == GR_OK);
  gr_session *s = session(g, 2);
  gr_status st;
  gr_error err;
  double v = fetch1(s, NULL, 0, vars[1], &st, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  GR_CHECK(v == -3 * 6.0); /* three outer iterations, each adds -(1.5 * 2 * 2) */
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- a million iterations in constant memory */
static gr_output million_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], gr_const_i64(g, 1000000));
}
static void million_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
}
static void test_million_iterations_flat_memory(void) {
  gr_graph *g = gr_graph_new();
  gr_output i = gr_const_i64(g, 0);
  GR_CHECK(gr_while_loop(g, million_cond, million_body, NULL, 1, &i, 0) == GR_OK);
  gr_session *s = session(g, 1);
  gr_status st;
  gr_error err;
  gr_buffer_pool_set_limit((size_t)1 << 30); /* the pool is off by default under ASan */
  gr_buffer_pool_stats a, b;
  gr_buffer_pool_get_stats(&a);
  long before = gt_rss_kib();
  GR_CHECK_EQ_INT(fetch1(s, NULL, 0, i, &st, &err), 1000000);
  long after = gt_rss_kib();
  gr_buffer_pool_get_stats(&b);
  /* iteration state and tensors are recycled: a handful of allocations, not a million */
  GR_CHECK_MSG(b.system_allocs - a.system_allocs < 100, "%llu buffer allocations for 1M iterations",
               (unsigned long long)(b.system_allocs - a.system_allocs));
#if defined(__SANITIZE_ADDRESS__)
  printf("note: resident-memory bound not checked under AddressSanitizer (its quarantine keeps "
         "freed memory); grew %ld KiB\n",
         after - before);
#else
  GR_CHECK_MSG(after - before < 4096, "resident memory grew by %ld KiB over 1M iterations",
               after - before);
#endif
#if defined(__SANITIZE_ADDRESS__)
  gr_buffer_pool_set_limit(0); /* back to ASan's default: every free seen */
  gr_buffer_pool_trim();
#endif
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- parallel iterations overlap: a slow op per iteration, independent of the others */
/* With wait_for_company, a kernel stays until another has entered too (at
 * most 2 s): iterations that can overlap then do, however loaded the
 * machine; without, it takes 10 ms. */
static bool wait_for_company;
static gr_status slow_kernel(gr_kernel_ctx *ctx) {
  gt_gauge_enter();
  for (int waited = 0; waited < 2000 && (waited < 10 || (wait_for_company && gt_gauge_max() < 2));
       waited++)
    usleep(1000);
  gt_gauge_leave();
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_op_def slow_op =
    GT_UNARY_OP_DEF("test_slow", slow_kernel, NULL, 0, GR_OP_EXPENSIVE);
static gr_output par_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], gr_const_i64(g, 8));
}
static void par_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_add(g, v[1], gr_op(g, "test_slow", NULL, &v[0], 1, NULL, 0));
}
static int max_parallel(int par_iters, int threads) {
  gr_graph *g = gr_graph_new();
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_i64(g, 0)};
  gr_while_loop(g, par_cond, par_body, NULL, 2, vars, par_iters);
  gr_session *s = session(g, threads);
  gr_status st;
  gr_error err;
  gt_gauge_reset();
  double v = fetch1(s, NULL, 0, vars[1], &st, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  GR_CHECK_EQ_INT(v, 28);
  gr_session_free(s);
  gr_graph_free(g);
  return gt_gauge_max();
}
static void test_parallel_iterations(void) {
  gr_error err;
  gr_op_registry_add(&slow_op, &err);
  int one = max_parallel(1, 4);
  wait_for_company = true;
  int many = max_parallel(8, 4);
  wait_for_company = false;
  GR_CHECK_EQ_INT(one, 1);
  GR_CHECK_MSG(many >= 2, "iterations did not overlap (max %d at once)", many);
}

/* ---- errors inside a loop, shape changes */
static gr_output err_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], gr_const_i32(g, 10));
}
static void err_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  /* 100 / (3 - i): division by zero in iteration 3 */
  gr_output d =
      gr_name(g, gr_div(g, gr_const_i32(g, 100), gr_sub(g, gr_const_i32(g, 3), v[0])), "risky");
  next[0] = gr_add(g, v[0], gr_const_i32(g, 1));
  next[1] = gr_add(g, v[1], d);
}
static void grow_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i32(g, 1));
  next[1] = gr_concat(g, (gr_output[]){v[1], v[1]}, 2, 0);
}
static void test_loop_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output vars[2] = {gr_const_i32(g, 0), gr_const_i32(g, 0)};
  gr_while_loop(g, err_cond, err_body, NULL, 2, vars, 1);
  gr_session *s = session(g, 2);
  gr_status st;
  gr_error err;
  fetch1(s, NULL, 0, vars[1], &st, &err);
  GR_CHECK(st == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "risky");
  GR_CHECK_STR_CONTAINS(err.msg, "iteration 3");
  GR_CHECK_STR_CONTAINS(err.msg, "division by zero");
  gr_session_free(s);
  gr_graph_free(g);
  /* a body that changes a loop variable's shape is rejected when built */
  g = gr_graph_new();
  gr_output v2[2] = {gr_const_i32(g, 0),
                     gr_const_data(g, GR_F32, (gr_shape){1, {2}}, (float[]){1, 2})};
  GR_CHECK(gr_while_loop(g, err_cond, grow_body, NULL, 2, v2, 0) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "loop variable 1 is f32 [2]");
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "[4]");
  gr_graph_free(g);
}

/* An exit outside any loop whose value is used is an error that says so
 * (it was "out of memory" when the plan gave its output no frame). */
static void test_exit_outside_loop(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_i32(g, 1);
  gr_output ex = gr_graph_add_node(g, &gr_op_exit, "stray_exit", &x, 1, NULL, 0);
  gr_output y = gr_add(g, ex, x);
  gr_session *s = session(g, 1);
  gr_status st;
  gr_error err;
  fetch1(s, NULL, 0, y, &st, &err);
  GR_CHECK(st == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "'stray_exit' is an exit outside any loop");
  fetch1(s, NULL, 0, ex, &st, &err);
  GR_CHECK(st == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "'stray_exit' is an exit outside any loop");
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- cond */
typedef struct branch_args {
  gr_output x, var;
} branch_args;
static void then_b(gr_graph *g, void *a, gr_output *o) {
  branch_args *b = a;
  gr_output bump = gr_assign_add(g, b->var, gr_const_f32(g, 1)); /* side effect */
  gr_graph_push_control_deps(g, &bump, 1);
  o[0] = gr_mul(g, b->x, gr_const_f32(g, 2));
  gr_graph_pop_control_deps(g);
}
static void else_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_sub(g, ((branch_args *)a)->x, gr_const_f32(g, 1));
}
static void test_cond_side_effects(void) {
  gr_graph *g = gr_graph_new();
  gr_output p = gr_placeholder(g, "p", GR_BOOL, gr_shape_scalar());
  branch_args b = {gr_placeholder(g, "x", GR_F32, gr_shape_scalar()),
                   gr_variable(g, "taken", gr_const_f32(g, 0))};
  gr_output y;
  GR_CHECK(gr_cond(g, p, then_b, else_b, &b, 1, &y) == GR_OK);
  gr_session *s = session(g, 2);
  bool preds[5] = {true, false, false, true, true};
  for (int k = 0; k < 5; k++) {
    gr_tensor pv, xv = gr_tensor_scalar_f32(10);
    gr_error err;
    gr_tensor_from_data(&pv, GR_BOOL, &(gr_shape){.rank = 0}, &preds[k], &err);
    gr_feed f[2] = {{p, &pv}, {b.x, &xv}};
    gr_status st;
    GR_CHECK_NEAR(fetch1(s, f, 2, y, &st, &err), preds[k] ? 20 : 9, 0);
    gr_tensor_release(&pv);
    gr_tensor_release(&xv);
  }
  gr_status st;
  gr_error err;
  GR_CHECK_NEAR(fetch1(s, NULL, 0, b.var, &st, &err), 3, 0); /* ran in the 3 taken steps only */
  gr_session_free(s);
  gr_graph_free(g);
}

/* nested conds: sign(x) in {-1, 0, 1} through chains of switches and merges */
static void pos_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_const_f32(g, 1);
}
static void neg_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_const_f32(g, -1);
}
static void zero_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_const_f32(g, 0);
}
static void nonzero_b(gr_graph *g, void *a, gr_output *o) {
  gr_output x = *(gr_output *)a;
  gr_cond(g, gr_name(g, gr_greater(g, x, gr_const_f32(g, 0)), "inner_pred"), pos_b, neg_b, NULL, 1,
          o);
}
static void test_nested_cond_deadness(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output y;
  GR_CHECK(gr_cond(g, gr_equal(g, x, gr_const_f32(g, 0)), zero_b, nonzero_b, &x, 1, &y) == GR_OK);
  gr_session *s = session(g, 1);
  float xs[3] = {-4, 0, 7}, want[3] = {-1, 0, 1};
  for (int k = 0; k < 3; k++) {
    gr_tensor xv = gr_tensor_scalar_f32(xs[k]);
    gr_feed f = {x, &xv};
    gr_status st;
    gr_error err;
    GR_CHECK_NEAR(fetch1(s, &f, 1, y, &st, &err), want[k], 0);
    gr_tensor_release(&xv);
  }
  /* fetching a value from the untaken branch is an error, not a crash */
  gr_node *inner = gr_graph_find_node(g, "cond/inner_pred");
  GR_CHECK(inner != NULL);
  gr_tensor xv = gr_tensor_scalar_f32(0);
  gr_feed f = {x, &xv};
  gr_status st;
  gr_error err;
  if (inner) fetch1(s, &f, 1, (gr_output){inner, 0}, &st, &err);
  GR_CHECK(inner && st == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "not taken");
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- gradients through cond: d/dx of (x > 0 ? x^2 : -3x) */
static void sq_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_square(g, *(gr_output *)a);
}
static void lin_b(gr_graph *g, void *a, gr_output *o) {
  o[0] = gr_mul(g, *(gr_output *)a, gr_const_f64(g, -3));
}
static void test_cond_gradient(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_scalar());
  gr_output y, dx;
  gr_cond(g, gr_greater(g, x, gr_const_f64(g, 0)), sq_b, lin_b, &x, 1, &y);
  GR_CHECK(gr_gradients(g, &y, 1, &x, 1, NULL, false, &dx) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = session(g, 2);
  double xs[4] = {3, -2, 0.5, -0.25};
  for (int k = 0; k < 4; k++) {
    const double eps = 1e-6;
    double v[3];
    for (int d = 0; d < 3; d++) {
      gr_tensor xv = gr_tensor_scalar_f64(xs[k] + (d - 1) * eps);
      gr_feed f = {x, &xv};
      gr_status st;
      gr_error err;
      v[d] = fetch1(s, &f, 1, d == 1 ? dx : y, &st, &err);
      GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
      gr_tensor_release(&xv);
    }
    GR_CHECK_NEAR(v[1], (v[2] - v[0]) / (2 * eps), 1e-5);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- gradients through while loops */
/* v = x^n by repeated multiplication: dv/dx = n x^(n-1) */
static gr_output pow_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], *(gr_output *)a);
}
static gr_output pow_x;
static void pow_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_mul(g, v[1], pow_x);
}
static void test_while_gradient_power(void) {
  gr_graph *g = gr_graph_new();
  pow_x = gr_placeholder(g, "x", GR_F64, gr_shape_scalar());
  gr_output n = gr_placeholder(g, "n", GR_I64, gr_shape_scalar());
  gr_output vars[2] = {gr_const_i64(g, 0), gr_const_f64(g, 1)};
  GR_CHECK(gr_while_loop(g, pow_cond, pow_body, &n, 2, vars, 4) == GR_OK);
  gr_output dx;
  GR_CHECK(gr_gradients(g, &vars[1], 1, &pow_x, 1, NULL, false, &dx) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = session(g, 2);
  int64_t ns[4] = {0, 1, 3, 7};
  for (int k = 0; k < 4 && s; k++) {
    gr_tensor xv = gr_tensor_scalar_f64(1.3), nv = gr_tensor_scalar_i64(ns[k]), out[2];
    gr_feed f[2] = {{pow_x, &xv}, {n, &nv}};
    gr_error err;
    GR_CHECK_OK(gr_session_run(s, f, 2, (gr_output[]){vars[1], dx}, 2, out, NULL, 0, &err), err);
    if (out[0].buf) {
      GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), pow(1.3, (double)ns[k]), 1e-12);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out[1], 0), ns[k] ? ns[k] * pow(1.3, (double)ns[k] - 1) : 0,
                    1e-9);
      gr_tensor_release(&out[0]);
      gr_tensor_release(&out[1]);
    }
    gr_tensor_release(&xv);
    gr_tensor_release(&nv);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* A small RNN: h = tanh(h @ W + x_t @ U), t < T, loss = sum(h_T * r); gradients
 * of W, U and h0 against central differences. */
typedef struct rnn {
  gr_output W, U, X, T;
} rnn;
static gr_output rnn_cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], ((rnn *)a)->T);
}
static void rnn_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  rnn *r = a;
  gr_output xt = gr_gather(g, r->X, gr_expand_dims(g, v[0], 0), 0); /* [1, 3] */
  gr_output pre =
      gr_add(g, gr_matmul(g, v[1], r->W, false, false), gr_matmul(g, xt, r->U, false, false));
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_tanh(g, pre);
}
static void test_while_gradient_rnn(void) {
  gr_graph *g = gr_graph_new();
  rnn r = {gr_placeholder(g, "W", GR_F64, (gr_shape){2, {4, 4}}),
           gr_placeholder(g, "U", GR_F64, (gr_shape){2, {3, 4}}),
           gr_placeholder(g, "X", GR_F64, (gr_shape){2, {5, 3}}), gr_const_i64(g, 5)};
  gr_output h0 = gr_placeholder(g, "h0", GR_F64, (gr_shape){2, {1, 4}});
  gr_output vars[2] = {gr_const_i64(g, 0), h0};
  GR_CHECK(gr_while_loop(g, rnn_cond, rnn_body, &r, 2, vars, 0) == GR_OK);
  double rv[4] = {0.3, -1.2, 0.7, 0.5};
  gr_output loss = gr_reduce_sum(
      g, gr_mul(g, vars[1], gr_const_data(g, GR_F64, (gr_shape){2, {1, 4}}, rv)), NULL, 0, false);
  gr_output wrt[3] = {r.W, r.U, h0}, d[3];
  GR_CHECK(gr_gradients(g, &loss, 1, wrt, 3, NULL, false, d) == GR_OK);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = session(g, 1);
  gt_rng rng = {77};
  gr_tensor v[4] = {gt_random(&rng, GR_F64, (gr_shape){2, {4, 4}}, -0.6, 0.6),
                    gt_random(&rng, GR_F64, (gr_shape){2, {3, 4}}, -0.6, 0.6),
                    gt_random(&rng, GR_F64, (gr_shape){2, {5, 3}}, -1, 1),
                    gt_random(&rng, GR_F64, (gr_shape){2, {1, 4}}, -0.5, 0.5)};
  gr_feed f[4] = {{r.W, &v[0]}, {r.U, &v[1]}, {r.X, &v[2]}, {h0, &v[3]}};
  gr_tensor grads[3];
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, f, 4, d, 3, grads, NULL, 0, &err), err);
  int which[3] = {0, 1, 3};
  const double eps = 1e-6;
  bool ran = grads[0].buf != NULL;
  for (int k = 0; k < 3 && ran; k++) {
    gr_tensor *t = &v[which[k]];
    for (int64_t e = 0; e < gr_tensor_num_elements(t); e++) {
      double x0 = gr_tensor_get_f64(t, e), lp, lm;
      gr_status st;
      gr_tensor_set_f64(t, e, x0 + eps);
      lp = fetch1(s, f, 4, loss, &st, &err);
      gr_tensor_set_f64(t, e, x0 - eps);
      lm = fetch1(s, f, 4, loss, &st, &err);
      gr_tensor_set_f64(t, e, x0);
      double num = (lp - lm) / (2 * eps), ana = gr_tensor_get_f64(&grads[k], e);
      GR_CHECK_MSG(fabs(num - ana) <= 1e-6 + 1e-5 * fabs(num), "d/d %s[%lld]: %.10g vs %.10g",
                   wrt[k].node->name, (long long)e, ana, num);
    }
    gr_tensor_release(&grads[k]);
  }
  for (int k = 0; k < 4; k++) gr_tensor_release(&v[k]);
  gr_session_free(s);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_while_basic);
  GR_RUN(test_collatz);
  GR_RUN(test_nested_while);
  GR_RUN(test_values_from_outside);
  GR_RUN(test_nested_loop_from_outside);
  GR_RUN(test_million_iterations_flat_memory);
  GR_RUN(test_parallel_iterations);
  GR_RUN(test_loop_errors);
  GR_RUN(test_exit_outside_loop);
  GR_RUN(test_cond_side_effects);
  GR_RUN(test_nested_cond_deadness);
  GR_RUN(test_cond_gradient);
  GR_RUN(test_while_gradient_power);
  GR_RUN(test_while_gradient_rnn);
  return gr_test_finish();
}
