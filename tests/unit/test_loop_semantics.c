/* Loops with what surrounds them (issue 19): a loop's result feeding
 * another loop, control dependencies on a loop and into a loop body, a cond
 * inside a loop under a gradient, and variables updated and read in and
 * after loops. Each program runs from DSL text on 1 device and spread over
 * 3 (round-robin, so every loop crosses devices), against a plain C
 * reference; loop gradients are checked by finite differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

/* Runs `src` on `devices` devices and returns fetch `name` as a double
 * (scalar), feeding `feed` (a node name, or NULL) with the f32 scalar fv. */
static bool run_prog(const char *src, int devices, const char *name, const char *feed, double fv,
                     double *out, char *msg) {
  gr_tensor ft = gt_make(GR_F32, gr_shape_scalar(), &fv), res;
  bool ok = gt_dsl_run_fed(src, name, devices, feed, &ft, NULL, NULL, &res, NULL);
  gr_tensor_release(&ft);
  if (!ok) {
    snprintf(msg, 512, "load or run failed (above)");
    return false;
  }
  *out = gr_tensor_get_f64(&res, 0);
  gr_tensor_release(&res);
  return true;
}

/* The value of `name` on 1 and 3 devices: both equal `want` (relative 1e-6). */
static void check_value(const char *what, const char *src, const char *name, double want) {
  for (int d = 1; d <= 3; d += 2) {
    double got = NAN;
    char msg[512] = "";
    bool ok = run_prog(src, d, name, NULL, 0, &got, msg);
    if (!ok) fprintf(stderr, "%s on %d device(s): %s\n", what, d, msg);
    GR_CHECK(ok);
    if (ok && !(fabs(got - want) <= 1e-6 * fabs(want) + 1e-9))
      fprintf(stderr, "%s on %d device(s): %s = %.9g, want %.9g\n", what, d, name, got, want);
    GR_CHECK(ok && fabs(got - want) <= 1e-6 * fabs(want) + 1e-9);
  }
}

/* d(ys)/d(xs) as the graph computes it (binding `g`) against central
 * differences of `r` with xs fed at x0 +- h, on 1 and 3 devices. */
static void check_grad(const char *what, const char *src, const char *xs, double x0, double h) {
  for (int d = 1; d <= 3; d += 2) {
    double g = NAN, hi = NAN, lo = NAN;
    char msg[512] = "";
    bool ok = run_prog(src, d, "g", xs, x0, &g, msg) &&
              run_prog(src, d, "r", xs, x0 + h, &hi, msg) &&
              run_prog(src, d, "r", xs, x0 - h, &lo, msg);
    if (!ok) fprintf(stderr, "%s on %d device(s): %s\n", what, d, msg);
    GR_CHECK(ok);
    double fd = (hi - lo) / (2 * h);
    if (ok && !(fabs(g - fd) <= 2e-3 * fabs(fd) + 1e-3))
      fprintf(stderr, "%s on %d device(s): gradient %.9g, finite differences %.9g\n", what, d, g,
              fd);
    GR_CHECK(ok && fabs(g - fd) <= 2e-3 * fabs(fd) + 1e-3);
  }
}

/* ---- plain references --------------------------------------------------------------- */

static double doubling_until(double a, double limit) {
  while (a < limit) a *= 2;
  return a;
}

/* ---- 1. a loop's result feeding another loop ---------------------------------------- */

static void test_loop_feeds_loop(void) {
  double r1 = doubling_until(1, 10);
  check_value("r1 as the bound of a second loop",
              "r1 = while (a = 1.0; a < 10.0) { a = a * 2.0 }\n"
              "r2 = while (b = 1.0; b < r1) { b = b * 2.0 }\n",
              "r2", doubling_until(1, r1));
  check_value("r1 as the start of a second loop",
              "r1 = while (a = 1.0; a < 10.0) { a = a * 2.0 }\n"
              "r2 = while (b = r1; b < 100.0) { b = b * 3.0 }\n",
              "r2", 16 * 3 * 3);
  check_value("three loops in series, each bound by the last",
              "r1 = while (a = 1.0; a < 10.0) { a = a * 2.0 }\n"
              "r2 = while (b = 1.0; b < r1) { b = b + 3.0 }\n"
              "i, r3 = while (i = 0, c = r1; c < r2 * 10.0) { i = i + 1\n c = c + r2 }\n",
              "r3", 16 + 16 * 9);
  /* inside a loop body: an inner loop's exit feeds a second inner loop */
  {
    double s = 0;
    for (int i = 0; i < 3; i++) {
      double a = doubling_until(1 + i, 10), b = 0;
      while (b < a) b += 5;
      s += b;
    }
    check_value("two inner loops in series inside a loop",
                "i, s = while (i = 0, s = 0.0; i < 3) {\n"
                "  a = while (a = 1.0 + cast(i, f32); a < 10.0) { a = a * 2.0 }\n"
                "  b = while (b = 0.0; b < a) { b = b + 5.0 }\n"
                "  i = i + 1\n"
                "  s = s + b\n"
                "}\n",
                "s", s);
  }
}

static void test_loop_feeds_loop_gradient(void) {
  const char *src = "v = placeholder(f32, [])\n"
                    "r1 = while (a = v; a < 10.0) { a = a * 2.0 }\n"
                    "r = while (b = r1; b < 100.0) { b = b * 3.0 + b * b * 0.01 }\n"
                    "g = gradients(r, v)\n";
  check_grad("gradient through two loops in series", src, "v", 1.5, 1e-3);
  check_grad("the same at another start", src, "v", 2.7, 1e-3);
}

/* ---- 2. control dependencies on a loop, and into a loop body -------------------------- */

static void test_control_on_loop(void) {
  check_value("a node depending on a loop only by control",
              "i = while (i = const(0, i32); i < 10) { i = i + 1 }\n"
              "control_dependencies(i) { n = const(3.0) * 2 }\n",
              "n", 6);
  check_value("a loop after another by control only",
              "i = while (i = const(0, i32); i < 10) { i = i + 1 }\n"
              "control_dependencies(i) { j = while (j = 0.0; j < 4.0) { j = j + 1.0 } }\n",
              "j", 4);
  check_value("gradients in a block depending on a loop",
              "v = variable(2.0)\n"
              "i = while (i = const(0, i32); i < 10) { i = i + 1 }\n"
              "control_dependencies(i) { g = gradients(v * v * v, v) }\n",
              "g", 12);
  check_value("a body node depending by control on a node outside",
              "c = const(5.0)\n"
              "inc = c * 2\n"
              "i, s = while (i = const(0, i32), s = 0.0; i < 3) {\n"
              "  control_dependencies(inc) { t = s + 1.0 }\n"
              "  i = i + 1\n"
              "  s = t\n"
              "}\n",
              "s", 3);
  /* the control input must order: the update outside happens before every
   * iteration's read inside */
  check_value("an update outside ordered before reads in the body",
              "v = variable(1.0)\n"
              "u = assign(v, 7.0)\n"
              "i, s = while (i = const(0, i32), s = 0.0; i < 4) {\n"
              "  control_dependencies(u) { t = s + v }\n"
              "  i = i + 1\n"
              "  s = t\n"
              "}\n",
              "s", 28);
  /* ... also when the body runs zero times: the loop (so a node after it)
   * waits for its body's outside control inputs. The update is slow (a
   * chain of tanh), the loop ends at once: run repeatedly, an unordered
   * read after the loop would see 1. */
  for (int rep = 0; rep < 10; rep++)
    check_value("a body that runs zero times still orders its control inputs",
                "v = variable(1.0)\n"
                "x = tanh(tanh(tanh(tanh(tanh(tanh(tanh(tanh(const(0.5)))))))))\n"
                "y = tanh(tanh(tanh(tanh(tanh(tanh(tanh(tanh(x))))))))\n"
                "u = assign(v, 7.0 + y * 0.0)\n"
                "i, s = while (i = const(0, i32), s = 0.0; i < 0) {\n"
                "  control_dependencies(u) { t = s + 1.0 }\n"
                "  i = i + 1\n"
                "  s = t\n"
                "}\n"
                "control_dependencies(i, s) { r = v + s }\n",
                "r", 7);
  check_value("a nested body depending by control on a node two loops out",
              "c = const(2.0)\n"
              "k = c + 1.0\n"
              "i, s = while (i = const(0, i32), s = 0.0; i < 2) {\n"
              "  j, t = while (j = const(0, i32), t = s; j < 3) {\n"
              "    control_dependencies(k) { t2 = t + 1.0 }\n"
              "    j = j + 1\n"
              "    t = t2\n"
              "  }\n"
              "  i = i + 1\n"
              "  s = t\n"
              "}\n",
              "s", 6);
}

/* ---- 3. gradients() inside a loop body ---------------------------------------------- */

static void test_gradients_in_body(void) {
  check_value("gradient of a body value, per iteration",
              "i, acc = while (i = 0, acc = 0.0; i < 3) {\n"
              "  s = cast(i, f32) + 4.0\n"
              "  g = gradients(s * s, s)\n"
              "  i = i + 1\n"
              "  acc = acc + g\n"
              "}\n",
              "acc", 8 + 10 + 12);
  check_value("gradient with respect to a variable outside the loop",
              "w = variable(3.0)\n"
              "i, acc = while (i = 0, acc = 0.0; i < 2) {\n"
              "  s = cast(i, f32) + 2.0\n"
              "  g = gradients(s * s * w, w)\n"
              "  i = i + 1\n"
              "  acc = acc + g\n"
              "}\n",
              "acc", 4 + 9);
  /* an inner loop's gradient in every outer iteration: the iterations run
   * at once and each keeps its own stacks */
  double want = 0;
  for (int i = 0; i < 5; i++) {
    double y = i + 1, f = 1;
    while (y < 10) y *= 2, f *= 2;
    want += f;
  }
  check_value("gradient of a loop inside a loop body",
              "i, acc = while (i = 0, acc = 0.0; i < 5) {\n"
              "  x = cast(i, f32) + 1.0\n"
              "  r = while (y = x; y < 10.0) { y = y * 2.0 }\n"
              "  g = gradients(r, x)\n"
              "  i = i + 1\n"
              "  acc = acc + g\n"
              "}\n",
              "acc", want);
}

/* Gradients of loops that contain loops (issue 19, item 5): test_loop_grad_nested.c. */

/* ---- 4. a cond inside a loop, under a gradient -------------------------------------- */

static void test_cond_in_loop_gradient(void) {
  check_value("forward value with the gradient built",
              "v = variable(2.0)\n"
              "r = while (x = v; x < 100.0) { x = cond(true) { square(x) } else { x - 1.0 } }\n"
              "g = gradients(r, v)\n",
              "r", 256);
  const char *src = "v = placeholder(f32, [])\n"
                    "i, r = while (i = 0, x = v; i < 6) {\n"
                    "  i = i + 1\n"
                    "  x = cond(i < 3) { x * x } else { x * 3.0 - 1.0 }\n"
                    "}\n"
                    "g = gradients(r, v)\n";
  check_grad("both branches taken in different iterations", src, "v", 1.5, 1e-3);
  const char *nested = "v = placeholder(f32, [])\n"
                       "i, r = while (i = 0, x = v; i < 5) {\n"
                       "  i = i + 1\n"
                       "  x = cond(i < 2) { x * 2.0 } else {\n"
                       "    cond(i < 4) { tanh(x) + x } else { x * x * 0.5 } }\n"
                       "}\n"
                       "g = gradients(r, v)\n";
  check_grad("nested conds in a loop", nested, "v", 0.7, 1e-3);
}

/* ---- 6. variables updated and read ---------------------------------------------------- */

static void test_read_after_update(void) {
  check_value("read in a control-dependency scope after an update",
              "v = variable(0.0)\n"
              "inc = assign_add(v, 1.0)\n"
              "control_dependencies(inc) { r = identity(v) * 10 }\n",
              "r", 10);
  check_value("read_value: an explicit read where it is written",
              "v = variable(0.0)\n"
              "inc = assign_add(v, 1.0)\n"
              "control_dependencies(inc) { r = read_value(v) * 10 }\n",
              "r", 10);
  check_value("updated each iteration, read in the next (ordered in the body)",
              "v = variable(0.0)\n"
              "i, s = while (i = 0, s = 0.0; i < 5) {\n"
              "  u = assign_add(v, 1.0)\n"
              "  control_dependencies(u) { s = s + v }\n"
              "  i = i + 1\n"
              "}\n",
              "s", 1 + 2 + 3 + 4 + 5);
  check_value("read in the loop condition, updated in the body",
              "v = variable(0.0)\n"
              "n = while (n = 0; v < 5.0) {\n"
              "  u = assign_add(v, 1.0)\n"
              "  n = n + 1\n"
              "}\n",
              "n", 5);
  check_value("updated in a nested loop, read in the outer body",
              "v = variable(0.0)\n"
              "i, s = while (i = 0, s = 0.0; i < 3) {\n"
              "  j = while (j = 0; j < 2) {\n"
              "    u = assign_add(v, 1.0)\n"
              "    j = j + 1\n"
              "  }\n"
              "  control_dependencies(j) { s = s + v }\n"
              "  i = i + 1\n"
              "}\n",
              "s", 2 + 4 + 6);
}

int main(void) {
  GR_RUN(test_loop_feeds_loop);
  GR_RUN(test_loop_feeds_loop_gradient);
  GR_RUN(test_control_on_loop);
  GR_RUN(test_gradients_in_body);
  GR_RUN(test_cond_in_loop_gradient);
  GR_RUN(test_read_after_update);
  return gr_test_finish();
}
