/* Gradients of loops that contain loops (issue 19, item 5): the reverse
 * loop of the outer loop contains the reverse loop of the inner one, whose
 * stacks are kept per outer iteration. Each program is differentiated from
 * DSL text and checked against central differences in f64, on 1 device and
 * spread over 3 (round-robin, so every loop crosses devices), with the
 * forward loops running 1 and 10 iterations at once. A gradient of a loop's
 * gradient (second order through a loop) is refused where it is written. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

/* The forward loops (those not already one iteration at a time, as reverse
 * loops are) run *(int *)par iterations at once. */
static void set_parallel(gr_graph *g, void *par) {
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    gr_node *nd = gr_graph_node(g, i);
    if (strcmp(nd->op->name, "enter") != 0) continue;
    for (int a = 0; a < nd->num_attrs; a++)
      if (strcmp(nd->attrs[a].name, "parallel_iterations") == 0 && nd->attrs[a].value.i != 1)
        nd->attrs[a].value.i = *(int *)par;
  }
}

/* Runs `src` with placeholder x fed the f64 scalar x0 and fetches the f64
 * scalars `names` (comma-separated, at most 4) into out. */
static bool run_prog(const char *src, int devices, int par, double x0, const char *names,
                     double *out, char *msg) {
  int nf = 1;
  for (const char *c = names; *c; c++) nf += *c == ',';
  gr_tensor ft = gt_make(GR_F64, gr_shape_scalar(), &x0), res[4];
  bool ok = gt_dsl_run_fed(src, names, devices, "x", &ft, set_parallel, &par, res, NULL);
  gr_tensor_release(&ft);
  if (!ok) {
    snprintf(msg, 512, "load or run failed (above)");
    return false;
  }
  for (int k = 0; k < nf; k++) {
    if (res[k].dtype != GR_F64) {
      snprintf(msg, 512, "fetch %d is not f64", k);
      ok = false;
    } else {
      out[k] = *(const double *)gr_tensor_data(&res[k]);
    }
    gr_tensor_release(&res[k]);
  }
  return ok;
}

/* d r / d x as the graph computes it (binding g) against central
 * differences of r, at x0, on 1 and 3 devices with 1 and 10 forward
 * iterations at once. Returns the gradient (of the last run). */
static double check_grad(const char *what, const char *src, double x0) {
  const double h = 1e-5;
  double got = NAN;
  for (int d = 1; d <= 3; d += 2)
    for (int par = 1; par <= 10; par += 9) {
      double rg[2] = {NAN, NAN}, hi = NAN, lo = NAN;
      char msg[512] = "";
      bool ok = run_prog(src, d, par, x0, "r,g", rg, msg) &&
                run_prog(src, d, par, x0 + h, "r", &hi, msg) &&
                run_prog(src, d, par, x0 - h, "r", &lo, msg);
      if (!ok) fprintf(stderr, "%s (%d devices, parallel %d): %s\n", what, d, par, msg);
      GR_CHECK(ok);
      if (!ok) continue;
      double fd = (hi - lo) / (2 * h);
      bool near = fabs(rg[1] - fd) <= 1e-6 * fabs(fd) + 1e-7;
      if (!near)
        fprintf(stderr, "%s (%d devices, parallel %d): gradient %.12g, finite differences %.12g\n",
                what, d, par, rg[1], fd);
      GR_CHECK(near);
      got = rg[1];
    }
  return got;
}

static void test_two_levels(void) {
  /* the reproducer once refused: y = 1.5 * 8 then 6 * 2, x = y / 2: r = 4 v */
  double g = check_grad("doubling inside a loop",
                        "x = placeholder(f64, [])\n"
                        "i, r = while (i = 0, a = x; i < 2) {\n"
                        "  y = while (y = a; y < 10.0) { y = y * 2.0 }\n"
                        "  i = i + 1\n"
                        "  a = y * 0.5\n"
                        "}\n"
                        "g = gradients(r, x)\n",
                        1.5);
  GR_CHECK_NEAR(g, 4, 1e-9);
  check_grad("two levels, fixed trip counts",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 3) {\n"
             "  j, b = while (j = 0, b = a; j < 2) {\n"
             "    j = j + 1\n"
             "    b = b * tanh(b) + 0.3 * b\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b * 0.8 + a * 0.1\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.9);
}

static void test_inner_loops_at_once(void) {
  /* the inner loops of different outer iterations do not depend on each
   * other: with 10 outer iterations at once they run concurrently, each
   * pushing on its own stacks ("while_N:t|...") */
  check_grad("independent inner loops of concurrent outer iterations",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, s = const(0.0, f64); i < 6) {\n"
             "  z = x * (1.0 + cast(i, f64) * 0.1)\n"
             "  j, b = while (j = 0, b = z; j < i) {\n"
             "    j = j + 1\n"
             "    b = tanh(b) * 1.1 + b * 0.3\n"
             "  }\n"
             "  i = i + 1\n"
             "  s = s + b * z\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.75);
}

static void test_three_levels(void) {
  check_grad("three levels",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 2) {\n"
             "  j, b = while (j = 0, b = a; j < 2) {\n"
             "    k, c = while (k = 0, c = b; k < 3) {\n"
             "      k = k + 1\n"
             "      c = tanh(c) * 1.5 + c * 0.2\n"
             "    }\n"
             "    j = j + 1\n"
             "    b = c * b * 0.5 + 0.1\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b + a * 0.3\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.6);
}

static void test_inner_trip_count_varies(void) {
  /* 0, 1, 2, 3 inner iterations: the reverse loop of each outer iteration
   * runs its own count */
  check_grad("inner trip count from the outer counter",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 4) {\n"
             "  j, b = while (j = 0, b = a; j < i) {\n"
             "    j = j + 1\n"
             "    b = b * 0.9 + tanh(b) * cast(j, f64)\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b * 0.7\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.8);
  /* the inner count depends on the data, differently in each outer iteration */
  check_grad("inner trip count from the data",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 3) {\n"
             "  b = while (b = a; b < 5.0) { b = b * 1.7 + 0.1 }\n"
             "  i = i + 1\n"
             "  a = b * 0.3 + a\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.45);
}

static void test_loop_after_loop(void) {
  check_grad("two inner loops in series, then a loop after the nest",
             "x = placeholder(f64, [])\n"
             "i, a = while (i = 0, a = x; i < 3) {\n"
             "  b = while (b = a; b < 4.0) { b = b * 1.5 }\n"
             "  j, c = while (j = 0, c = b; j < i) {\n"
             "    j = j + 1\n"
             "    c = c * 0.9 + tanh(c)\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = c * 0.5 + b * 0.1\n"
             "}\n"
             "k, r = while (k = 0, s = a; k < 2) {\n"
             "  k = k + 1\n"
             "  s = s * tanh(s)\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.7);
}

static void test_cond_in_nested_loop(void) {
  check_grad("a cond inside the inner loop",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 3) {\n"
             "  j, b = while (j = 0, b = a; j < 3) {\n"
             "    j = j + 1\n"
             "    b = cond(b > 1.0) { b * 0.5 + tanh(b) } else { b * b + 0.7 }\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b * 0.9\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.4);
  check_grad("an inner loop inside a cond of the outer body",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 4) {\n"
             "  i = i + 1\n"
             "  a = cond(i < 3) {\n"
             "    j, b = while (j = 0, b = a; j < 2) { j = j + 1\n b = b * tanh(b) + 0.5 }\n"
             "    b\n"
             "  } else { a * a * 0.5 }\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.8);
}

static void test_values_used_several_times(void) {
  /* several values of one iteration pushed, each used several times, and
   * two float loop variables in both loops */
  check_grad("several pushes per iteration",
             "x = placeholder(f64, [])\n"
             "i, r, q = while (i = 0, a = x, q = x * 0.5; i < 3) {\n"
             "  j, b, p = while (j = 0, b = a, p = q; j < 2) {\n"
             "    j = j + 1\n"
             "    t = tanh(b * p)\n"
             "    b = b * b * t + b / (1.0 + b * b)\n"
             "    p = p * t + t * t\n"
             "  }\n"
             "  i = i + 1\n"
             "  u = b * p\n"
             "  a = u * 0.3 + u * u * 0.1\n"
             "  q = p * 0.5 + b * 0.25\n"
             "}\n"
             "g = gradients(r * q, x)\n",
             0.55);
}

static void test_unused_inner_variable(void) {
  /* p's exit gets no gradient: the inner reverse loop starts it at zeros
   * shaped like the exit, read back in the outer reverse loop */
  check_grad("an inner loop variable unused after the loop",
             "x = placeholder(f64, [])\n"
             "i, r = while (i = 0, a = x; i < 3) {\n"
             "  j, b, p = while (j = 0, b = a, p = a * 2.0; j < 2) {\n"
             "    j = j + 1\n"
             "    b = b * tanh(p) + 0.1\n"
             "    p = p * 0.5 + b\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b * 0.9\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.5);
}

static void test_nested_gradient_in_body(void) {
  /* gradients() of a nest inside the body of a third loop, whose
   * iterations run at once: g sums dr/dz over k, r sums r (dz/dx = 1) */
  check_grad("the gradient of a nest inside a loop body",
             "x = placeholder(f64, [])\n"
             "k, g, r = while (k = 0, g = const(0.0, f64), s = const(0.0, f64); k < 3) {\n"
             "  z = x + cast(k, f64) * 0.1\n"
             "  i, y = while (i = 0, a = z; i < 2) {\n"
             "    b = while (b = a; b < 3.0) { b = b * 1.3 + 0.05 }\n"
             "    i = i + 1\n"
             "    a = b * 0.6\n"
             "  }\n"
             "  gz = gradients(y, z)\n"
             "  k = k + 1\n"
             "  g = g + gz\n"
             "  s = s + y\n"
             "}\n",
             0.5);
}

static void test_invariant_from_outside(void) {
  /* an invariant computed from x, on no other path to r: its gradient
   * flows back to x (the walk once missed it and gave 0) */
  double g =
      check_grad("an invariant computed from x",
                 "x = placeholder(f64, [])\n"
                 "w = x * 2.0\n"
                 "i, r = while (i = 0, a = const(1.0, f64); i < 3) { i = i + 1\n a = a * w }\n"
                 "g = gradients(r, x)\n",
                 1.5);
  GR_CHECK_NEAR(g, 3 * 3 * 3 * 2, 1e-9);
  /* w and x themselves enter both loops: their gradients sum over every
   * inner iteration of every outer iteration */
  check_grad("loop invariants captured from outside both loops",
             "x = placeholder(f64, [])\n"
             "w = x * 0.5 + 0.2\n"
             "i, r = while (i = 0, a = x; i < 3) {\n"
             "  m = a * w\n"
             "  j, b = while (j = 0, b = a; j < 2) {\n"
             "    j = j + 1\n"
             "    b = tanh(b * w) + w * x + m * 0.1\n"
             "  }\n"
             "  i = i + 1\n"
             "  a = b + x * 0.05\n"
             "}\n"
             "g = gradients(r, x)\n",
             0.65);
}

/* ---- random nests --------------------------------------------------------------------- */

typedef struct prog {
  char text[8192];
  size_t len;
  gt_rng rng;
  int next_id;
} prog;

static void put(prog *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(prog *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
  va_end(ap);
  if (n > 0) p->len += (size_t)n;
  if (p->len >= sizeof p->text) p->len = sizeof p->text - 1;
}

/* Writes `c<id>, v<id> = while (...) {...}` starting from `init`; depth
 * levels of loops may nest in its body; `outer` names the counter of the
 * enclosing loop (NULL: none), which the trip count may use. Returns id. */
static int put_loop(prog *p, int depth, const char *init, const char *outer) {
  int id = p->next_id++;
  char bound[32];
  if (outer && gt_int(&p->rng, 0, 1))
    snprintf(bound, sizeof bound, "%s + %d", outer, (int)gt_int(&p->rng, 0, 1));
  else
    snprintf(bound, sizeof bound, "%d", (int)gt_int(&p->rng, outer ? 0 : 1, 3));
  put(p, "c%d, v%d = while (c%d = 0, v%d = %s; c%d < %s) {\n", id, id, id, id, init, id, bound);
  char a[16], b[16], counter[16];
  snprintf(a, sizeof a, "v%d", id);
  snprintf(b, sizeof b, "v%d", id);
  snprintf(counter, sizeof counter, "c%d", id);
  for (int k = 0; depth > 0 && k < 2; k++) {
    if (k == 1 && gt_int(&p->rng, 0, 2)) break; /* sometimes a second loop in series */
    char in[48];
    if (gt_int(&p->rng, 0, 1))
      snprintf(in, sizeof in, "%s", b);
    else
      snprintf(in, sizeof in, "%s * 0.5 + w", b);
    int inner = put_loop(p, depth - 1 - (int)gt_int(&p->rng, 0, 1), in, counter);
    snprintf(b, sizeof b, "v%d", inner);
  }
  static const char *const exprs[] = {
      "tanh(%1$s) * 0.8 + %2$s * 0.3",
      "%1$s * tanh(%2$s) + 0.1 * cast(%3$s, f64)",
      "%1$s / (1.0 + %2$s * %2$s) + w * 0.2",
      "tanh(%1$s * w) + %2$s * 0.5",
      "cond(%3$s < 2) { tanh(%1$s) + %2$s * 0.2 } else { %1$s * 0.7 - %2$s * 0.1 }",
      "tanh(%1$s * %1$s * 0.3) + tanh(%2$s) * x",
  };
  int e = (int)gt_int(&p->rng, 0, 5);
  put(p, "  v%d = ", id);
  put(p, exprs[e], a, b, counter);
  put(p, "\n  c%d = c%d + 1\n}\n", id, id);
  return id;
}

/* 60 random nests of up to three levels (trip counts 0 to 3, at least 1
 * at the top, fixed or from the enclosing counter; loops in series; conds
 * on the counter; values from outside all loops), each differentiated and
 * checked by central differences on 1 or 3 devices, with 1 or 10
 * iterations at once. */
static void test_random_nests(void) {
  for (int k = 0; k < 60; k++) {
    prog p = {.len = 0, .rng = {0x5eed0000u + (uint64_t)k}, .next_id = 0};
    p.text[0] = '\0';
    put(&p, "x = placeholder(f64, [])\nw = tanh(x) * 0.5 + 0.3\n");
    int top = put_loop(&p, 1 + (int)gt_int(&p.rng, 0, 1), "x", NULL);
    if (gt_int(&p.rng, 0, 1)) { /* a loop after the nest */
      char in[16];
      snprintf(in, sizeof in, "v%d", top);
      top = put_loop(&p, 0, in, NULL);
    }
    put(&p, "r = v%d * 1.0\ng = gradients(r, x)\n", top);
    int devices = k % 2 ? 3 : 1, par = k % 4 < 2 ? 1 : 10;
    double x0 = gt_uniform(&p.rng, 0.3, 0.9), h = 1e-5, rg[2] = {NAN, NAN}, hi = NAN, lo = NAN;
    char msg[512] = "";
    bool ok = run_prog(p.text, devices, par, x0, "r,g", rg, msg) &&
              run_prog(p.text, devices, par, x0 + h, "r", &hi, msg) &&
              run_prog(p.text, devices, par, x0 - h, "r", &lo, msg);
    double fd = (hi - lo) / (2 * h);
    bool near = ok && fabs(rg[1] - fd) <= 2e-6 * fabs(fd) + 1e-6;
    if (!near)
      fprintf(stderr,
              "random nest %d (%d devices, parallel %d, x = %g): %s gradient %.12g, finite "
              "differences %.12g\n%s",
              k, devices, par, x0, msg, rg[1], fd, p.text);
    GR_CHECK(near);
  }
}

/* The gradient of a loop reads the forward values from stacks, and a
 * second gradient does not see through them: refused, never 0. */
static void test_second_order_refused(void) {
  gr_error err = {0};
  GR_CHECK(gt_dsl_error("x = variable(1.5)\n"
                        "r = while (a = x; a < 100.0) { a = a * a }\n"
                        "d1 = gradients(r, x)\n"
                        "d2 = gradients(d1, x)\n",
                        &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:4:6: error: gradients: the value differentiated depends "
                                 "on the gradient of loop 'while_3', which reads the loop's "
                                 "values back from a stack");
  GR_CHECK_STR_CONTAINS(err.msg, "a gradient of a loop's gradient (second order through a "
                                 "while loop) is not supported yet");
  /* also when the first gradient is taken inside a loop body */
  GR_CHECK(gt_dsl_error("x = variable(1.5)\n"
                        "i, s = while (i = 0, s = x; i < 2) {\n"
                        "  y = while (y = s; y < 10.0) { y = y * 2.0 }\n"
                        "  d = gradients(y, s)\n"
                        "  i = i + 1\n"
                        "  s = s + d\n"
                        "}\n"
                        "g = gradients(s, x)\n",
                        &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:8:5: error: gradients: the value differentiated depends");
  /* second order through a loop's gradient whose stacked values do not
   * depend on the x of the second gradient: accepted, and right */
  {
    double h = 1e-6, xs[2] = {1.5 + h, 1.5 - h}, r[2];
    for (int k = 0; k < 2; k++) {
      double a = xs[k];
      while (a < 100) a = a * a * 0.9 + 0.1;
      r[k] = a;
    }
    double dr = (r[0] - r[1]) / (2 * h);
    GR_CHECK_NEAR(gt_dsl_value("x = variable(const(1.5, f64))\n"
                               "w = variable(const(0.7, f64))\n"
                               "r = while (a = x; a < 100.0) { a = a * a * 0.9 + 0.1 }\n"
                               "d1 = gradients(r * w * w, x)\n"
                               "d2 = gradients(d1, w)\n",
                               "d2"),
                  2 * 0.7 * dr, 1e-5 * dr);
  }
  /* second order where no loop is on the path still works */
  GR_CHECK_NEAR(gt_dsl_value("x = variable(1.5)\n"
                             "r = while (a = x; a < 100.0) { a = a * a }\n"
                             "d1 = gradients(r, x)\n"
                             "d2 = gradients(reduce_sum(gradients(x * x * x, x)), x)\n",
                             "d2"),
                9, 1e-5);
}

/* gradients() in a loop body of values computed outside the loop from the
 * xs: the path runs through the enclosing frames, whose nodes are
 * differentiated in the body (they were skipped, and the gradient was 0). */
static void test_gradient_in_body_through_outside(void) {
  /* TensorFlow's testCallGradInLoop (control_flow_ops_py_test.py): d sum(data)
   * / d params = 12 params = 60 per iteration, 600 after ten */
  GR_CHECK_NEAR(gt_dsl_value("i0 = const(0, i32)\n"
                             "params = const(5.0)\n"
                             "params_1 = square(params)\n"
                             "i, x = while (i = i0, x = const(0.0); i < 10) {\n"
                             "  data = const([1.0, 2.0, 3.0]) * params_1\n"
                             "  x = x + gradients(data, params)\n"
                             "  i = i + 1\n"
                             "}\n",
                             "x"),
                600, 0);
  /* the same gradient by central differences of the function it differentiates */
  check_grad("gradients() in a body of a value computed outside the loop",
             "x = placeholder(f64, [])\n"
             "p = tanh(x) * x + 0.5\n"
             "r = reduce_sum(const([1.0, 2.0, 3.0], f64) * p * p)\n"
             "i, s = while (i = 0, s = const(0.0, f64); i < 10) {\n"
             "  data = const([1.0, 2.0, 3.0], f64) * p * p\n"
             "  s = s + gradients(data, x)\n"
             "  i = i + 1\n"
             "}\n"
             "g = s / 10.0\n",
             0.7);
  /* in an inner loop, through a value of the outer body (z) and one from
   * outside both loops (p); ds/dx sums d(z^2)/dx = 8 z p p' over 2 x 3 iterations */
  check_grad("gradients() in an inner body through the outer body and the top level",
             "x = placeholder(f64, [])\n"
             "p = x * x + tanh(x)\n"
             "r = square(p * 2.0)\n"
             "i, s = while (i = 0, s = const(0.0, f64); i < 3) {\n"
             "  z = p * 2.0\n"
             "  j, t = while (j = 0, t = const(0.0, f64); j < 2) {\n"
             "    t = t + gradients(z * z, x)\n"
             "    j = j + 1\n"
             "  }\n"
             "  s = s + t\n"
             "  i = i + 1\n"
             "}\n"
             "g = s / 6.0\n",
             0.6);
  /* the gradient of a loop whose body takes such a gradient: second order
   * through gradient nodes built in the body (s = 10 * 12 x * x) */
  double g = check_grad("the gradient of a loop that takes gradients() in its body",
                        "x = placeholder(f64, [])\n"
                        "q = square(x)\n"
                        "i, r = while (i = 0, s = const(0.0, f64); i < 10) {\n"
                        "  data = const([1.0, 2.0, 3.0], f64) * q\n"
                        "  s = s + gradients(data, x) * x\n"
                        "  i = i + 1\n"
                        "}\n"
                        "g = gradients(r, x)\n",
                        5);
  GR_CHECK_NEAR(g, 240 * 5, 1e-9);
  /* refused, where the gradient is written: through another loop (its
   * reverse loop would run in every iteration of this one, popping stacks
   * pushed once), and through a loop variable's initial value */
  gr_error err = {0};
  GR_CHECK(gt_dsl_error("p = const(5.0)\n"
                        "r = while (r = p; r < 100.0) { r = r * p }\n"
                        "i, x = while (i = 0, x = 0.0; i < 3) {\n"
                        "  x = x + gradients(r * 2.0, p)\n"
                        "  i = i + 1\n"
                        "}\n",
                        &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:4:11: error: gradients: in loop 'while_");
  GR_CHECK_STR_CONTAINS(err.msg, "depends on the xs through loop 'while_1', which is outside it");
  GR_CHECK(gt_dsl_error("p = const(5.0)\n"
                        "i, x = while (i = 0, x = p; i < 3) {\n"
                        "  x = x + gradients(x * 2.0, p)\n"
                        "  i = i + 1\n"
                        "}\n",
                        &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:3:11: error: gradients: in loop 'while_");
  GR_CHECK_STR_CONTAINS(err.msg, "through the initial value of a loop variable");
}

/* stop_gradient (or any op without a gradient) on the path from a loop's
 * gradient cuts it: no gradient flows through the stack pops, so a second
 * gradient is not second order through the loop (it was refused). */
static void test_stop_gradient_on_loop_gradient(void) {
  /* TensorFlow's testStopGradOnWhileGrad: rx = 2 y^6 (6 iterations), so
   * d(y^2 + rx + stop(drx/dy))/dy = 2 y + 12 y^5 = 388 at y = 2 */
  const char *tf = "x = const(2.0)\n"
                   "y = const(2.0)\n"
                   "rx = while (x = x; x < 100.0) { x = x * y }\n"
                   "rg = stop_gradient(gradients(rx, y))\n"
                   "r = square(y) + rx + rg\n"
                   "d = gradients(r, y)\n";
  GR_CHECK_NEAR(gt_dsl_value(tf, "d"), 388, 0);
  /* by central differences: the stopped term adds nothing to the gradient */
  check_grad("a stopped loop gradient in the value differentiated",
             "x = placeholder(f64, [])\n"
             "i, a = while (i = 0, a = x; i < 4) { a = tanh(a) * x + a * 0.5\n i = i + 1 }\n"
             "r = square(x) + a\n"
             "g = gradients(r + stop_gradient(gradients(a, x)), x)\n",
             0.8);
  /* two loop gradients, one stopped: the other is still second order */
  const char *two = "x = const(2.0)\n"
                    "y = const(2.0)\n"
                    "rx = while (x = x; x < 100.0) { x = x * y }\n"
                    "ra = while (x = x; x < 50.0) { x = x * y * y }\n"
                    "ga = stop_gradient(gradients(rx, y))\n"
                    "gb = gradients(ra, y)\n"
                    "r = square(y) + rx + ga + %s\n"
                    "d = gradients(r, y)\n";
  char src[600];
  gr_error err = {0};
  snprintf(src, sizeof src, two, "gb");
  GR_CHECK(gt_dsl_error(src, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:8:5: error: gradients: the value differentiated depends "
                                 "on the gradient of loop 'while_");
  GR_CHECK(strstr(err.msg, "loop 'while_2'") == NULL); /* not rx's loop: its gradient is stopped */
  /* both stopped (or behind zeros_like, another op without a gradient):
   * ra = 2 y^6 (3 iterations), d = 2 y + 12 y^5 + gb * 12 y^5 */
  snprintf(src, sizeof src, two, "stop_gradient(gb) * ra + zeros_like(gb)");
  GR_CHECK_NEAR(gt_dsl_value(src, "d"), 4 + 384 + 384.0 * 384, 0);
  /* the stop on the other side, between y and the loop: the stacked values
   * do not depend on y along a path a gradient takes, d = 2 y */
  GR_CHECK_NEAR(gt_dsl_value("x = const(2.0)\n"
                             "y = const(2.0)\n"
                             "ys = stop_gradient(y)\n"
                             "rx = while (x = x; x < 100.0) { x = x * ys }\n"
                             "r = square(y) + gradients(rx, ys)\n"
                             "d = gradients(r, y)\n",
                             "d"),
                4, 0);
}

int main(void) {
  GR_RUN(test_two_levels);
  GR_RUN(test_inner_loops_at_once);
  GR_RUN(test_three_levels);
  GR_RUN(test_inner_trip_count_varies);
  GR_RUN(test_loop_after_loop);
  GR_RUN(test_cond_in_nested_loop);
  GR_RUN(test_values_used_several_times);
  GR_RUN(test_unused_inner_variable);
  GR_RUN(test_nested_gradient_in_body);
  GR_RUN(test_invariant_from_outside);
  GR_RUN(test_random_nests);
  GR_RUN(test_second_order_refused);
  GR_RUN(test_gradient_in_body_through_outside);
  GR_RUN(test_stop_gradient_on_loop_gradient);
  return gr_test_finish();
}
