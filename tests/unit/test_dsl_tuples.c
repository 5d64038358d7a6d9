/* Tuples in the DSL: several values from a cond (`a, b = cond(p) { x, y }
 * else { y, x }`: one merge per value), from a def (`return p, q`) and on
 * the right of a binding; gradients through a tuple cond checked by finite
 * differences, and the same programs spread over 3 devices. The errors
 * (mismatched arity, dtypes) are in test_dsl_errors.c. */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

/* Runs the names of src on `devices` devices and checks their first elements. */
static void check_values(const char *src, const char *names, int devices, const double *want,
                         int n) {
  gr_tensor t[8];
  bool ok = gt_dsl_run(src, names, devices, t);
  GR_CHECK_MSG(ok, "%s", src);
  if (!ok) return;
  for (int i = 0; i < n; i++) {
    GR_CHECK_MSG(gr_tensor_get_f64(&t[i], 0) == want[i], "%s (%d devices): value %d is %g, want %g",
                 src, devices, i, gr_tensor_get_f64(&t[i], 0), want[i]);
    gr_tensor_release(&t[i]);
  }
}

static void test_cond_tuples(void) {
  /* both sides of the predicate; values from outside returned directly */
  for (int x = 1; x <= 3; x += 2) {
    char src[256];
    snprintf(src, sizeof src, "x = %d.0\ny = 10.0\na, b = cond(x > 2) { x, y } else { y, x }", x);
    double want[2] = {x > 2 ? x : 10, x > 2 ? 10 : x};
    check_values(src, "a,b", 1, want, 2);
  }
  check_values("x = 3.0\na, b, c = cond(x < 2) { x, x * 2, 1 } else { x - 1, x * 3, 2 }", "a,b,c",
               1, (double[]){2, 9, 2}, 3);
  /* a def returning a tuple as a branch's value; a tuple bound then unpacked */
  check_values("def f(x) { return x + 1, x * 10 }\n"
               "x = 4.0\nt = cond(x > 0) { f(x) } else { f(-x) }\na, b = t",
               "a,b", 1, (double[]){5, 40}, 2);
  /* nested conds, each giving two values */
  check_values("x = 5.0\n"
               "a, b = cond(x > 0) {\n"
               "  p, q = cond(x > 4) { x, 1.0 } else { -x, 2.0 }\n"
               "  q, p * 2\n"
               "} else { 0.0, 0.0 }",
               "a,b", 1, (double[]){1, 10}, 2);
  /* one value: a tensor, not something to unpack */
  check_values("x = 2.0\ny = cond(x > 1) { x * 3 } else { x }", "y", 1, (double[]){6}, 1);
}

/* A tuple cond inside a loop body, and a tuple swap of loop variables. */
static void test_tuples_in_loops(void) {
  check_values("i, s = while (i = 0, s = 1; i < 4) {\n"
               "  a, b = cond(i < 2) { i + 1, s * 2 } else { i + 1, s + 10 }\n"
               "  i = a\n  s = b\n"
               "}",
               "i,s", 1, (double[]){4, 24}, 2);
  check_values("i, a, b = while (i = 0, a = 1, b = 2; i < 3) { i = i + 1; a, b = b, a }", "a,b", 1,
               (double[]){2, 1}, 2);
}

static void test_def_and_binding_tuples(void) {
  check_values("def divmod(a, b) {\n  q = cast(cast(a / b, i32), f32)\n  return q, a - q * b\n}\n"
               "q, r = divmod(17.0, 5.0)",
               "q,r", 1, (double[]){3, 2}, 2);
  check_values("def three(x) { return x, x + 1, x + 2 }\na, b, c = three(1.0)", "a,b,c", 1,
               (double[]){1, 2, 3}, 3);
  /* a, b = 1, 2 names two constant nodes; a, b = x, y two identities */
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", "a, b = 1, 2\nx = 3.0\nc, d = x, a", g, NULL, &p, &err),
              err);
  gr_output o;
  GR_CHECK(gr_dsl_lookup(p, "b", &o) && strcmp(o.node->name, "b") == 0);
  GR_CHECK(gr_dsl_lookup(p, "c", &o) && strcmp(o.node->name, "c") == 0 &&
           strcmp(o.node->op->name, "identity") == 0);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* f(x, y) = a * b with a, b from a tuple cond, in f64. */
static void grad_program(char *src, size_t cap, double x, double y, bool with_grads) {
  snprintf(src, cap,
           "x = variable(const(%.17g, f64))\ny = variable(const(%.17g, f64))\n"
           "a, b = cond(x > 1) { x * x, tanh(x) * y } else { y, x * y }\n"
           "f = a * b\n%s",
           x, y, with_grads ? "dx, dy = gradients(f, [x, y])\n" : "");
}

static double f_at(double x, double y) {
  char src[512];
  grad_program(src, sizeof src, x, y, false);
  return gt_dsl_value(src, "f");
}

/* Gradients of a * b through the cond's two merges, against central
 * differences, on both sides of the predicate, on 1 and 3 devices. */
static void test_gradients_through_tuple_cond(void) {
  const double pts[][2] = {{2.0, 0.5}, {0.5, -1.5}};
  for (int k = 0; k < 2; k++)
    for (int devices = 1; devices <= 3; devices += 2) {
      double x = pts[k][0], y = pts[k][1], h = 1e-6;
      char src[512];
      grad_program(src, sizeof src, x, y, true);
      gr_tensor t[2];
      bool ok = gt_dsl_run(src, "dx,dy", devices, t);
      GR_CHECK(ok);
      if (!ok) continue;
      double fdx = (f_at(x + h, y) - f_at(x - h, y)) / (2 * h);
      double fdy = (f_at(x, y + h) - f_at(x, y - h)) / (2 * h);
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[0], 0), fdx, 1e-6);
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[1], 0), fdy, 1e-6);
      /* by hand: x > 1: f = x^2 tanh(x) y; else f = x y^2 */
      double th = tanh(x);
      double hx = x > 1 ? (2 * x * th + x * x * (1 - th * th)) * y : y * y;
      double hy = x > 1 ? x * x * th : 2 * x * y;
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[0], 0), hx, 1e-9);
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[1], 0), hy, 1e-9);
      gr_tensor_release(&t[0]);
      gr_tensor_release(&t[1]);
    }
}

/* The branches pinned to different devices of 3: the values cross devices
 * through the switches and merges of every tuple element. */
static void test_tuple_cond_on_three_devices(void) {
  for (int x = 0; x <= 4; x += 4) {
    char src[512];
    snprintf(src, sizeof src,
             "x = %d.0\n"
             "a, b = cond(x > 2) {\n"
             "  device \"/device:CPU:1\" { p = x * 2; q = p + 1 }\n"
             "  p, q\n"
             "} else {\n"
             "  device \"/device:CPU:2\" { r = x - 5 }\n"
             "  r, x\n"
             "}\n"
             "device \"/device:CPU:2\" { s = a + b }",
             x);
    double want[3] = {x > 2 ? 2 * x : x - 5, x > 2 ? 2 * x + 1 : x, 0};
    want[2] = want[0] + want[1];
    check_values(src, "a,b,s", 3, want, 3);
  }
}

int main(void) {
  GR_RUN(test_cond_tuples);
  GR_RUN(test_tuples_in_loops);
  GR_RUN(test_def_and_binding_tuples);
  GR_RUN(test_gradients_through_tuple_cond);
  GR_RUN(test_tuple_cond_on_three_devices);
  return gr_test_finish();
}
